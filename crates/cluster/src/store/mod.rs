//! The in-memory object store: objects by resource and key in ordered
//! maps (each kept as JSON plus its serialized bytes), a global monotonic
//! resourceVersion, a bounded per-resource event history for watch
//! resumes, and a broadcast channel per resource for live watchers.
//!
//! Here: the [`Store`] type, its errors and configuration, and the helpers
//! every part shares. The parts, by concern:
//! - `obj`: a stored object ([`Obj`]) and its lean history copies;
//! - `watch`: commit, history, fan-out to watchers, watch starts, bookmarks;
//! - `list`: get, list, selectors and pagination (continue tokens);
//! - `write`: create, update, patch, server-side apply, and the kinds'
//!   admission hooks ([`crate::resources::Admission`]), run with no
//!   per-kind branch;
//! - `fields`: `metadata.managedFields` on writes;
//! - `delete`: deletes, finalizers, namespace termination, CRD removal;
//! - `lifecycle`: what writes of a few kinds set off inside the store
//!   (pods, PDBs, namespaces, CRDs, nodes), through hooks the generic
//!   code calls without naming a kind;
//! - `pods`: bindings, evictions, the kubelets' writes, PDB status;
//! - `tokens`: ServiceAccount tokens (TokenRequest, TokenReview);
//! - `typed`: typed create/get/list for tests and setup.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::jsonptr::Pointer as _;
use crate::resources::{Registry, ResId, ResourceInfo};

use pods::RecentPods;
use tokens::IssuedToken;

mod delete;
mod fields;
mod lifecycle;
pub mod limits;
mod list;
mod obj;
mod persist;
mod pods;
mod tokens;
mod ttl;
mod typed;
mod watch;
mod write;

pub use delete::DeleteOpts;
pub use list::ListResult;
pub(crate) use obj::controller_of;
pub use obj::Obj;
pub use persist::{Error as DataDirError, FILE as DATA_FILE};
#[cfg(feature = "testing")]
pub(crate) use persist::plant_object;
pub use tokens::TokenUser;
pub use watch::{EventType, WatchEvent, WatchStart, WatchSub};
pub use fields::WriteCtx;
pub use write::{PatchType, strategic_merge};
pub use crate::object::{now_rfc3339, set_condition};

/// Errors from store operations; each maps onto a metav1.Status answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object (or its namespace) does not exist (404).
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        /// Qualified resource (`pods`, `leases.coordination.k8s.io`).
        resource: String,
        /// Object name.
        name: String,
    },
    /// An object with that name already exists (409).
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        /// Qualified resource.
        resource: String,
        /// Object name.
        name: String,
    },
    /// Optimistic concurrency or precondition failure (409).
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {message}")]
    Conflict {
        /// Qualified resource.
        resource: String,
        /// Object name.
        name: String,
        /// Why.
        message: String,
    },
    /// The object failed validation (422).
    #[error("{kind} \"{name}\" is invalid: {message}")]
    Invalid {
        /// Kind.
        kind: String,
        /// Object name.
        name: String,
        /// Field errors.
        message: String,
    },
    /// The request is malformed (400).
    #[error("{0}")]
    BadRequest(String),
    /// The request is refused by policy/admission (403).
    #[error("{resource} \"{name}\" is forbidden: {message}")]
    Forbidden {
        /// Qualified resource.
        resource: String,
        /// Object name.
        name: String,
        /// Why.
        message: String,
    },
    /// Creation refused because the namespace is being deleted (403, as
    /// the NamespaceLifecycle admission plugin answers).
    #[error("{resource} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated")]
    NamespaceTerminating {
        /// Qualified resource.
        resource: String,
        /// Object name ("" for generateName).
        name: String,
        /// The terminating namespace.
        namespace: String,
    },
    /// The requested resourceVersion is no longer retained (410).
    #[error("{0}")]
    Gone(String),
    /// Refused for now, e.g. an eviction blocked by a PDB (429).
    #[error("{message}")]
    TooManyRequests {
        /// Why.
        message: String,
        /// Optional status details causes.
        causes: Option<Value>,
    },
    /// Unsupported patch content type (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Server-side apply met fields other managers own (409, with one
    /// `FieldManagerConflict` cause per field).
    #[error("{message}")]
    ApplyConflict {
        /// Upstream's "Apply failed with N conflict(s): ..." message.
        message: String,
        /// The causes.
        causes: Value,
    },
    /// Something unexpected (500).
    #[error("{0}")]
    Internal(String),
    /// The object is larger than etcd takes (500 with etcd's message and
    /// no reason, as kube-apiserver passes etcd's refusal on; see [`limits`]).
    #[error("{}", limits::TOO_LARGE)]
    RequestTooLarge,
    /// A read or watch from a resourceVersion the store has not reached
    /// (504 Timeout, as kube-apiserver's `NewTooLargeResourceVersionError`):
    /// the server's state went backwards (a new cluster on the same
    /// address, a restored backup); clients relist.
    #[error("Timeout: Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// The resourceVersion asked for.
        requested: u64,
        /// The store's.
        current: u64,
    },
}

impl Error {
    /// HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            Error::NotFound { .. } => 404,
            Error::AlreadyExists { .. } | Error::Conflict { .. } | Error::ApplyConflict { .. } => 409,
            Error::Invalid { .. } => 422,
            Error::BadRequest(_) => 400,
            Error::Forbidden { .. } | Error::NamespaceTerminating { .. } => 403,
            Error::Gone(_) => 410,
            Error::TooManyRequests { .. } => 429,
            Error::UnsupportedMediaType(_) => 415,
            Error::Internal(_) | Error::RequestTooLarge => 500,
            Error::TooLargeResourceVersion { .. } => 504,
        }
    }

    /// metav1.StatusReason.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "NotFound",
            Error::AlreadyExists { .. } => "AlreadyExists",
            Error::Conflict { .. } | Error::ApplyConflict { .. } => "Conflict",
            Error::Invalid { .. } => "Invalid",
            Error::BadRequest(_) => "BadRequest",
            Error::Forbidden { .. } | Error::NamespaceTerminating { .. } => "Forbidden",
            Error::Gone(_) => "Expired",
            Error::TooManyRequests { .. } => "TooManyRequests",
            Error::UnsupportedMediaType(_) => "UnsupportedMediaType",
            Error::Internal(_) => "InternalError",
            Error::RequestTooLarge => "",
            Error::TooLargeResourceVersion { .. } => "Timeout",
        }
    }

    /// metav1.StatusDetails, when there is something to say.
    pub fn details(&self) -> Option<Value> {
        let split = |r: &str| -> (String, String) {
            match r.split_once('.') {
                Some((k, g)) => (k.to_string(), g.to_string()),
                None => (r.to_string(), String::new()),
            }
        };
        match self {
            Error::NotFound { resource, name }
            | Error::AlreadyExists { resource, name }
            | Error::Conflict { resource, name, .. }
            | Error::Forbidden { resource, name, .. } => {
                let (kind, group) = split(resource);
                let mut d = json!({"name": name, "kind": kind});
                if !group.is_empty() {
                    d["group"] = json!(group);
                }
                Some(d)
            }
            Error::NamespaceTerminating { resource, name, namespace } => {
                let (kind, group) = split(resource);
                let mut d = json!({"name": name, "kind": kind, "causes": [{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {namespace} is being terminated"),
                    "field": "metadata.namespace",
                }]});
                if !group.is_empty() {
                    d["group"] = json!(group);
                }
                Some(d)
            }
            Error::Invalid { kind, name, message } => {
                let (kind, group) = split(kind);
                let mut d = json!({"name": name, "kind": kind, "causes": [field_cause(message)]});
                if !group.is_empty() {
                    d["group"] = json!(group);
                }
                Some(d)
            }
            Error::TooManyRequests { causes: Some(c), .. } | Error::ApplyConflict { causes: c, .. } => Some(json!({"causes": c})),
            Error::TooLargeResourceVersion { .. } => Some(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1,
            })),
            _ => None,
        }
    }
}

/// A metav1.StatusCause for a field error written as upstream prints it
/// (`spec.x: Forbidden: why`): the field, the cause type and the body.
/// The whole object's path prints as `[]` (a list of errors is `[a, b]`).
fn field_cause(message: &str) -> Value {
    let whole = message.starts_with("[]: ");
    let parsed = message.split_once(": ").filter(|(field, _)| !field.is_empty() && !field.contains(' ') && (whole || !message.starts_with('[')));
    let Some((field, body)) = parsed else {
        return json!({"reason": "FieldValueInvalid", "message": message});
    };
    let reason = [
        ("Forbidden", "FieldValueForbidden"),
        ("Required value", "FieldValueRequired"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
    ]
    .iter()
    .find(|(prefix, _)| body.starts_with(prefix))
    .map_or("FieldValueInvalid", |(_, r)| r);
    json!({"reason": reason, "message": body, "field": field})
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// Messages from the store to the simulated kubelets.
#[derive(Debug, Clone)]
pub enum KubeletMsg {
    /// A pod was bound to a node (or created bound).
    Bound {
        /// Namespace.
        ns: String,
        /// Name.
        name: String,
        /// UID.
        uid: String,
    },
    /// A pod is terminating and must be removed at `deadline`.
    Terminate {
        /// Namespace.
        ns: String,
        /// Name.
        name: String,
        /// UID.
        uid: String,
        /// When to remove it.
        deadline: Instant,
    },
}

/// Store tuning.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Events retained per resource for watch resumes.
    pub history_limit: usize,
    /// Broadcast buffer per resource; a watcher further behind is closed.
    pub channel_capacity: usize,
    /// How long a read or watch from a resourceVersion ahead of the
    /// store's waits for the store to reach it before it is answered
    /// "Too large resource version" (upstream's watch cache: 3 s).
    pub too_large_wait: std::time::Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { history_limit: 100_000, channel_capacity: 65_536, too_large_wait: std::time::Duration::from_secs(3) }
    }
}

type Key = (String, String);

struct KindStore {
    objects: BTreeMap<Key, Arc<Obj>>,
    history: VecDeque<Arc<WatchEvent>>,
    compacted_rv: u64,
    /// Live events, made on the first subscription: a broadcast channel
    /// allocates all its slots up front, and most kinds are never watched.
    tx: Option<broadcast::Sender<Arc<WatchEvent>>>,
    capacity: usize,
}

struct Inner {
    rv: u64,
    kinds: Vec<KindStore>,
    pdbs_per_ns: HashMap<String, usize>,
    /// Namespaces being deleted: creating in them is refused, and each
    /// removal of their content checks whether they can go.
    terminating_ns: HashSet<String>,
    /// The whole values of the pods written last (see [`RecentPods`]).
    recent_pods: RecentPods,
    /// With a data directory: the persisted bound on resourceVersions
    /// (see `persist`).
    ceiling: u64,
    /// When each Event was last written (see `ttl`).
    event_writes: HashMap<Key, std::time::Instant>,
}

/// Called on each commit with the resource, the event and the whole
/// object, under the store's lock: it must not call into the store.
pub type CommitObserver = Box<dyn Fn(ResId, EventType, &Obj) + Send + Sync>;

/// The store. Cheap to share behind an `Arc`.
pub struct Store {
    inner: Mutex<Inner>,
    /// The served resources (built-ins, then what CRDs define). Lock
    /// order: `inner` before the registry's own lock, never the reverse.
    registry: Registry,
    cfg: StoreConfig,
    kubelet: OnceLock<mpsc::UnboundedSender<KubeletMsg>>,
    /// ServiceAccount tokens issued through `serviceaccounts/token`.
    tokens: Mutex<HashMap<String, IssuedToken>>,
    storage_protection: std::sync::atomic::AtomicBool,
    /// The data directory, if any (`berth cluster --data-dir`).
    persist: Option<persist::Persist>,
    /// The minor version of the Kubernetes release served (see
    /// [`crate::version`]; 0 for the default).
    kube_minor: std::sync::atomic::AtomicU32,
    /// What [`Store::observe_commits`] set.
    observer: OnceLock<CommitObserver>,
    /// The objects of the data directory that could not be read back when
    /// it was opened (kept aside; see [`Store::open`]).
    quarantined: Vec<DataDirError>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("cfg", &self.cfg).finish_non_exhaustive()
    }
}

/// A random UUID (version 4, variant `a`), written digit by digit.
fn new_uid() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let r: u128 = rand::random();
    let mut out = String::with_capacity(36);
    for i in 0..32u32 {
        if matches!(i, 8 | 12 | 16 | 20) {
            out.push('-');
        }
        out.push(match i {
            12 => '4',
            16 => 'a',
            _ => HEX[((r >> (124 - 4 * i)) & 0xf) as usize] as char,
        });
    }
    out
}

fn random_suffix() -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5).map(|_| ALPHA[rand::random_range(0..ALPHA.len())] as char).collect()
}

/// The qualified resource name used in messages (`pods`, `leases.coordination.k8s.io`).
pub fn qualified(info: &ResourceInfo) -> String {
    if info.group.is_empty() { info.plural.to_string() } else { format!("{}.{}", info.plural, info.group) }
}

fn not_found(info: &ResourceInfo, name: &str) -> Error {
    Error::NotFound { resource: qualified(info), name: name.to_string() }
}

fn conflict(info: &ResourceInfo, name: &str, message: impl Into<String>) -> Error {
    Error::Conflict { resource: qualified(info), name: name.to_string(), message: message.into() }
}

/// The qualified kind used in Invalid messages (`Pod`, `PriorityClass.scheduling.k8s.io`).
fn qualified_kind(info: &ResourceInfo) -> String {
    if info.group.is_empty() { info.kind.to_string() } else { format!("{}.{}", info.kind, info.group) }
}

fn invalid(info: &ResourceInfo, name: &str, message: impl Into<String>) -> Error {
    Error::Invalid { kind: qualified_kind(info), name: name.to_string(), message: message.into() }
}

/// PatchOptions refused (422, as upstream's ValidatePatchOptions).
pub fn patch_options_invalid(message: &str) -> Error {
    Error::Invalid { kind: "PatchOptions.meta.k8s.io".into(), name: String::new(), message: message.into() }
}

/// Several field errors as upstream aggregates them (`[a, b]` when more than one).
fn invalid_all(info: &ResourceInfo, name: &str, errs: &[String]) -> Error {
    let message = if errs.len() == 1 { errs[0].clone() } else { format!("[{}]", errs.join(", ")) };
    invalid(info, name, message)
}

/// metadata.deletionTimestamp is set.
pub(crate) fn is_deleting(v: &Value) -> bool {
    v.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null())
}

fn meta_mut(v: &mut Value) -> Result<&mut Map<String, Value>> {
    let obj = v.as_object_mut().ok_or_else(|| Error::BadRequest("object must be a JSON object".into()))?;
    let m = obj.entry("metadata").or_insert_with(|| json!({}));
    if m.is_null() {
        *m = json!({});
    }
    m.as_object_mut().ok_or_else(|| Error::BadRequest("metadata must be an object".into()))
}

fn get_str<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.at(ptr).and_then(Value::as_str).unwrap_or("")
}

fn meta_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str).unwrap_or("")
}

impl Store {
    /// A new empty store.
    pub fn new(cfg: StoreConfig) -> Self {
        let registry = Registry::with_admission(crate::admission::rules);
        let kinds = (0..registry.len()).map(|_| KindStore::new(&cfg)).collect();
        Store {
            inner: Mutex::new(Inner { rv: 0, kinds, pdbs_per_ns: HashMap::new(), terminating_ns: HashSet::new(), recent_pods: RecentPods::default(), ceiling: 0, event_writes: HashMap::new() }),
            registry,
            cfg,
            kubelet: OnceLock::new(),
            tokens: Mutex::new(HashMap::new()),
            storage_protection: std::sync::atomic::AtomicBool::new(false),
            persist: None,
            kube_minor: std::sync::atomic::AtomicU32::new(0),
            observer: OnceLock::new(),
            quarantined: Vec::new(),
        }
    }

    /// Sets the observer of every commit (once: false when one is set).
    pub fn observe_commits(&self, f: CommitObserver) -> bool {
        self.observer.set(f).is_ok()
    }

    /// The description of resource `r` (a built-in or a custom resource).
    pub fn info(&self, r: ResId) -> Arc<ResourceInfo> {
        self.registry.info(r)
    }

    /// The served resources.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// A served resource by group, version and plural (not one the
    /// Kubernetes release served leaves out).
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<ResId> {
        self.registry.lookup(group, version, plural).filter(|r| self.release_serves(*r))
    }

    /// Every served resource, by id (without those the Kubernetes
    /// release served leaves out).
    pub fn served(&self) -> Vec<(ResId, Arc<ResourceInfo>)> {
        let v = self.kubernetes_version();
        self.registry.served().into_iter().filter(|(_, i)| i.custom.is_some() || v.serves(i.group, i.version, i.plural)).collect()
    }

    fn release_serves(&self, r: ResId) -> bool {
        let i = self.info(r);
        i.custom.is_some() || self.kubernetes_version().serves(i.group, i.version, i.plural)
    }

    /// Answer as Kubernetes release `v` (see [`crate::version`]).
    pub fn set_kubernetes_version(&self, v: crate::version::KubeVersion) {
        self.kube_minor.store(v.minor(), std::sync::atomic::Ordering::Relaxed);
    }

    /// The Kubernetes release served.
    pub fn kubernetes_version(&self) -> crate::version::KubeVersion {
        crate::version::KubeVersion::new(self.kube_minor.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or_default()
    }

    /// Connect the kubelet notification channel (once).
    pub fn set_kubelet(&self, tx: mpsc::UnboundedSender<KubeletMsg>) {
        let _ = self.kubelet.set(tx);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The latest resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Wait (at most [`StoreConfig::too_large_wait`]) until the store
    /// has reached resourceVersion `rv`: a read or watch from a later one
    /// is refused with [`Error::TooLargeResourceVersion`].
    pub async fn reached(&self, rv: u64) -> Result<()> {
        let deadline = tokio::time::Instant::now() + self.cfg.too_large_wait;
        loop {
            let current = self.current_rv();
            if rv <= current {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::TooLargeResourceVersion { requested: rv, current });
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Number of objects of a resource.
    pub fn count(&self, r: ResId) -> usize {
        self.lock().kinds[r].objects.len()
    }

    fn notify(&self, msg: KubeletMsg) {
        if let Some(tx) = self.kubelet.get() {
            let _ = tx.send(msg);
        }
    }

    /// Storage controllers run: new claims and volumes get their
    /// protection finalizers (which those controllers remove).
    pub fn enable_storage_protection(&self) {
        self.storage_protection.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// An admission refusal as the API server words it: field errors 422,
/// a plugin's refusal 403.
pub(super) fn refused(info: &ResourceInfo, name: &str, e: crate::resources::Error) -> Error {
    match e {
        crate::resources::Error::Invalid(errs) => invalid_all(info, name, &errs),
        crate::resources::Error::Forbidden(message) => Error::Forbidden { resource: qualified(info), name: name.to_string(), message },
        other => Error::BadRequest(other.to_string()),
    }
}


/// Finalizers still hold the object (`metadata.finalizers`, or what the
/// kind's lifecycle adds, such as a namespace's `spec.finalizers`).
pub(super) fn has_finalizers(r: ResId, v: &Value) -> bool {
    has_metadata_finalizers(v) || lifecycle::of(r).held(v)
}

/// `metadata.finalizers` is not empty.
pub(super) fn has_metadata_finalizers(v: &Value) -> bool {
    v.at("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty())
}

/// Dispatch to the kinds' lifecycles (`lifecycle.rs`): the store's generic
/// parts call these and name no kind.
impl Store {
    /// After a create (`old` None) or update of `r` committed `new`.
    fn after_write(&self, inner: &mut Inner, r: ResId, old: Option<&Value>, new: &Value) {
        lifecycle::of(r).after_write(self, inner, old, new);
    }

    /// Delete `old` of `r` as its kind deletes (preconditions checked).
    fn delete_as_kind(&self, inner: &mut Inner, r: ResId, old: Arc<Obj>, grace: Option<i64>) -> Result<Arc<Obj>> {
        lifecycle::of(r).delete(self, inner, r, old, grace)
    }

    /// After `obj` of `r` was committed with event `ty`: the kind's hook,
    /// then, for a removal from a terminating namespace, whether the
    /// namespace can go.
    fn after_commit(&self, inner: &mut Inner, r: ResId, ty: EventType, obj: &Arc<Obj>) -> Result<()> {
        lifecycle::of(r).committed(inner, ty, obj);
        if ty == EventType::Deleted && !obj.namespace().is_empty() && inner.terminating_ns.contains(obj.namespace()) {
            let ns = obj.namespace().to_string();
            self.finish_namespace(inner, &ns, false)?;
        }
        Ok(())
    }

    /// After `obj` of `r` was removed.
    fn after_remove(&self, inner: &mut Inner, r: ResId, obj: &Obj) {
        lifecycle::of(r).removed(self, inner, obj);
    }

    /// Whether an update of `r` that leaves a deleting object with no
    /// finalizers and no grace removes it (`old`: the stored version);
    /// when it does, the kind hears that the object was finalized by hand.
    fn removed_by_update(&self, inner: &mut Inner, r: ResId, old: &Value, name: &str) -> bool {
        let life = lifecycle::of(r);
        let removed = life.removed_by_update(old);
        if removed {
            life.finalized_by_update(inner, name);
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{PRIORITY_CLASSES, RESOURCES};

    #[test]
    fn uids_are_version_4_uuids() {
        let a = new_uid();
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), vec![8, 4, 4, 4, 12], "{a}");
        assert!(parts[2].starts_with('4') && parts[3].starts_with('a'), "{a}");
        assert!(a.bytes().all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{a}");
        assert_ne!(a, new_uid());
    }

    #[test]
    fn invalid_details_name_the_field() {
        let e = invalid(&RESOURCES[PRIORITY_CLASSES], "x", "value: Forbidden: too high");
        assert_eq!(e.to_string(), "PriorityClass.scheduling.k8s.io \"x\" is invalid: value: Forbidden: too high");
        let d = e.details().unwrap_or_default();
        assert_eq!(d["kind"], "PriorityClass");
        assert_eq!(d["group"], "scheduling.k8s.io");
        assert_eq!(d["causes"][0], json!({"reason": "FieldValueForbidden", "message": "Forbidden: too high", "field": "value"}));
    }
}
