//! The in-memory object store: objects by resource and key in ordered
//! maps (each kept as JSON plus its serialized bytes), a global monotonic
//! resourceVersion, a bounded per-resource event history for watch
//! resumes, and a broadcast channel per resource for live watchers.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use serde::{Serialize, de::DeserializeOwned};
use super::eventview;
use super::jsonptr::Pointer as _;
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};

use super::resources::{self as res, PDBS, PODS, RESOURCES, Registry, ResId, ResourceInfo};
use super::selector::{Filter, LabelSelector};
use super::managed;
pub use super::object::{now_rfc3339, set_condition};
use super::object::set_path;

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
            Error::Internal(_) => 500,
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
            _ => None,
        }
    }
}

/// A metav1.StatusCause for a field error written as upstream prints it
/// (`spec.x: Forbidden: why`): the field, the cause type and the body.
fn field_cause(message: &str) -> Value {
    let parsed = message.split_once(": ").filter(|(field, _)| !field.is_empty() && !field.contains(' ') && !message.starts_with('['));
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

/// A stored object: its JSON value and the serialized bytes of exactly
/// that value (so lists and watches never reserialize).
///
/// Versions that are no longer current (replaced or deleted) stay in the
/// watch history *lean*: their bytes, and of the value only what selectors
/// read (see [`Lean`]). A replayed event is sent as its bytes, so nothing
/// is lost, and a past version costs little more than its bytes.
#[derive(Debug)]
pub struct Obj {
    /// The object (`Value::Null` for a lean history copy; see
    /// [`Obj::full`]).
    pub value: Value,
    /// `value` serialized (`metadata.managedFields`, kept in `value` as
    /// its JSON text to save memory, written as the list).
    pub bytes: Bytes,
    /// Its resourceVersion.
    pub rv: u64,
    /// Set on a lean history copy.
    lean: Option<Box<Lean>>,
}

/// What selectors read of a lean copy, in one piece of text: the
/// namespace, name, uid and controller uid, then each of the kind's extra
/// field-selector fields (as a field selector compares it), then each
/// label's key and value. Two allocations, whatever the object.
#[derive(Debug)]
struct Lean {
    text: Box<str>,
    /// Where each piece of `text` ends.
    ends: Box<[u32]>,
    /// The kind's extra field-selector fields (dotted, as the kind lists
    /// them): the pieces after the first four are their values.
    fields: &'static [&'static str],
    /// Has a controlling owner reference (the fourth piece is its uid).
    controlled: bool,
}

/// The pieces of a [`Lean`] before its field values.
const LEAN_FIXED: usize = 4;

impl Lean {
    fn new<'a>(fixed: [&'a str; LEAN_FIXED], controlled: bool, fields: &'static [&'static str], rest: impl Iterator<Item = Cow<'a, str>>) -> Option<Lean> {
        let mut text = String::new();
        let mut ends = Vec::with_capacity(LEAN_FIXED + fields.len() + 4);
        for piece in fixed.into_iter().map(Cow::Borrowed).chain(rest) {
            text.push_str(&piece);
            ends.push(u32::try_from(text.len()).ok()?);
        }
        Some(Lean { text: text.into_boxed_str(), ends: ends.into_boxed_slice(), fields, controlled })
    }

    /// Piece `i` ("" past the end).
    fn piece(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends.get(i - 1).map_or(usize::MAX, |e| *e as usize) };
        let end = self.ends.get(i).map_or(0, |e| *e as usize);
        self.text.get(start..end).unwrap_or("")
    }

    /// The value of a label, if the object has it.
    fn label(&self, key: &str) -> Option<&str> {
        let first = LEAN_FIXED + self.fields.len();
        (first..self.ends.len()).step_by(2).find(|i| self.piece(*i) == key).map(|i| self.piece(i + 1))
    }

    /// A field by JSON pointer: name, namespace or one of the kind's
    /// extra fields ("" for any other).
    fn field_at(&self, pointer: &str) -> &str {
        match pointer {
            "/metadata/namespace" => self.piece(0),
            "/metadata/name" => self.piece(1),
            p => self.fields.iter().position(|f| is_pointer_of(p, f)).map_or("", |i| self.piece(LEAN_FIXED + i)),
        }
    }
}

impl Obj {
    fn new(value: Value, rv: u64) -> Result<Arc<Obj>> {
        let bytes = wire_bytes(&value).map_err(|e| Error::Internal(e.to_string()))?;
        // Exactly sized: every version in the history keeps its bytes. A
        // copy of the written text costs less than growing the buffer as
        // it is written and shrinking it after (two reallocations).
        Ok(Arc::new(Obj { value, bytes: Bytes::copy_from_slice(&bytes), rv, lean: None }))
    }

    /// An object built from a value alone (its bytes are empty): for
    /// callers that only read the value.
    pub fn from_value(value: Value, rv: u64) -> Arc<Obj> {
        Arc::new(Obj { value, bytes: Bytes::new(), rv, lean: None })
    }

    /// The history copy of a version that is no longer current: the same
    /// bytes, and what selectors of this kind read (`fields`: its extra
    /// field-selector fields, dotted).
    fn lean(self: &Arc<Self>, fields: &'static [&'static str]) -> Arc<Obj> {
        if self.lean.is_some() {
            return self.clone();
        }
        let meta = self.value.get("metadata");
        let text = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str).unwrap_or("");
        let controller = controller_of(&self.value);
        let values = fields.iter().map(|f| lean_field(&self.value, fields, f));
        let labels = meta.and_then(|m| m.get("labels")).and_then(Value::as_object).into_iter().flatten();
        let labels = labels.flat_map(|(k, v)| [Cow::Borrowed(k.as_str()), Cow::Borrowed(v.as_str().unwrap_or(""))]);
        let fixed = [text("namespace"), text("name"), text("uid"), controller.unwrap_or("")];
        // Text past 4 GiB cannot be indexed: such an object stays whole.
        let Some(lean) = Lean::new(fixed, controller.is_some(), fields, values.chain(labels)) else {
            return self.clone();
        };
        Arc::new(Obj { value: Value::Null, bytes: self.bytes.clone(), rv: self.rv, lean: Some(Box::new(lean)) })
    }

    /// Is this a lean history copy?
    pub fn is_lean(&self) -> bool {
        self.lean.is_some()
    }

    /// The whole object: itself, or for a lean copy the value read back
    /// from its bytes.
    pub fn full(self: &Arc<Self>) -> Arc<Obj> {
        if self.lean.is_none() {
            return self.clone();
        }
        match serde_json::from_slice::<Value>(&self.bytes) {
            Ok(mut value) => {
                if let Some(m) = value.at_mut("/metadata/managedFields")
                    && m.is_array()
                {
                    *m = Value::String(m.to_string());
                }
                Arc::new(Obj { value, bytes: self.bytes.clone(), rv: self.rv, lean: None })
            }
            Err(_) => self.clone(),
        }
    }

    /// Does the object pass a list or watch filter?
    pub fn matches(&self, f: &Filter) -> bool {
        let Some(l) = &self.lean else {
            return f.matches(&self.value);
        };
        if f.namespace.as_deref().is_some_and(|ns| ns != l.piece(0)) {
            return false;
        }
        f.labels.matches_with(|k| l.label(k)) && f.fields.matches_with(|p| l.field_at(p).to_string())
    }

    /// A field as a field selector compares it (see
    /// `selector::field_text`), by its dotted name: for a lean copy, only
    /// `metadata.name`, `metadata.namespace` and the kind's extra
    /// field-selector fields are known ("" for any other), which is what
    /// controllers scanning every pod read without parsing it back.
    pub fn field(&self, dotted: &str) -> Cow<'_, str> {
        let pointer = super::selector::field_pointer(dotted);
        match &self.lean {
            Some(l) => Cow::Borrowed(l.field_at(&pointer)),
            None => Cow::Owned(super::selector::field_text(self.value.at(&pointer))),
        }
    }

    /// metadata.name.
    pub fn name(&self) -> &str {
        self.lean.as_ref().map_or_else(|| meta_str(&self.value, "name"), |l| l.piece(1))
    }

    /// metadata.namespace ("" for cluster-scoped).
    pub fn namespace(&self) -> &str {
        self.lean.as_ref().map_or_else(|| meta_str(&self.value, "namespace"), |l| l.piece(0))
    }

    /// metadata.uid.
    pub fn uid(&self) -> &str {
        self.lean.as_ref().map_or_else(|| meta_str(&self.value, "uid"), |l| l.piece(2))
    }

    /// The uid of the controlling owner reference, if any.
    pub fn controller_uid(&self) -> Option<&str> {
        match &self.lean {
            Some(l) => l.controlled.then(|| l.piece(3)),
            None => controller_of(&self.value),
        }
    }

    /// Decode into a typed object.
    pub fn decode<K: DeserializeOwned>(&self) -> Result<K> {
        serde_json::from_slice(&self.bytes).map_err(|e| Error::Internal(e.to_string()))
    }
}

/// The bytes of a stored value: `metadata.managedFields`, held as its JSON
/// text (see `managed::encode`), is written as the list it stands for,
/// verbatim (checked to be JSON, not parsed into a value and written again).
fn wire_bytes(value: &Value) -> serde_json::Result<Vec<u8>> {
    fn map(out: &mut Vec<u8>, m: &Map<String, Value>, top: bool) -> serde_json::Result<()> {
        out.push(b'{');
        for (i, (k, v)) in m.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, k)?;
            out.push(b':');
            match (top, k.as_str(), v) {
                (true, "metadata", Value::Object(meta)) => map(out, meta, false)?,
                (false, "managedFields", Value::String(text)) if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() => {
                    out.extend_from_slice(text.as_bytes());
                }
                _ => serde_json::to_writer(&mut *out, v)?,
            }
        }
        out.push(b'}');
        Ok(())
    }
    let mut out = Vec::with_capacity(4096);
    match value {
        Value::Object(m) => map(&mut out, m, true)?,
        other => serde_json::to_writer(&mut out, other)?,
    }
    Ok(out)
}

/// What of a pod can move a disruption budget: its labels, health and phase.
fn pdb_facts(p: &Value) -> (Option<&Value>, bool, &str) {
    (p.at("/metadata/labels"), res::pod_healthy(p), get_str(p, "/status/phase"))
}

/// Is `pointer` the JSON pointer of the dotted field name `dotted` (see
/// `selector::field_pointer`)?
fn is_pointer_of(pointer: &str, dotted: &str) -> bool {
    pointer.strip_prefix('/').is_some_and(|p| p.len() == dotted.len() && p.bytes().zip(dotted.bytes()).all(|(a, b)| if b == b'.' { a == b'/' } else { a == b }))
}

/// The uid of the owner reference of `v` marked `controller: true`.
pub(crate) fn controller_of(v: &Value) -> Option<&str> {
    v.at("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|o| o.get("uid").and_then(Value::as_str))
}

/// Kinds whose current objects are also kept lean (their bytes and what
/// selectors read; see [`Obj::full`]): those stored by the thousand,
/// where a parsed value costs several times the bytes (a node's value
/// about 11 KB, its bytes under 2 KB). Every read of a
/// stored object of these kinds goes through [`Obj::full`].
fn kept_lean(r: ResId) -> bool {
    matches!(r, PODS | res::EVENTS_V1 | res::NODES)
}

/// A field a lean copy keeps, as a field selector compares it; the Events
/// store's `source` is computed (see `eventview::source`).
fn lean_field<'a>(v: &'a Value, fields: &[&str], dotted: &str) -> Cow<'a, str> {
    if dotted == "source" && std::ptr::eq(fields, res::EVENTS_SELECTABLE) {
        Cow::Borrowed(eventview::source(v))
    } else {
        super::selector::field_text_at(v, dotted)
    }
}

/// The field-selector fields a kind's lean copies keep: its own, or for
/// Events those of both views (core/v1 Events are a view of the
/// events.k8s.io/v1 store; see `eventview`).
fn lean_fields(r: ResId, info: &ResourceInfo) -> &'static [&'static str] {
    if r == res::EVENTS_V1 { res::EVENTS_SELECTABLE } else { info.fields }
}

fn meta_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str).unwrap_or("")
}

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// ADDED.
    Added,
    /// MODIFIED.
    Modified,
    /// DELETED.
    Deleted,
    /// BOOKMARK.
    Bookmark,
}

impl EventType {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
            EventType::Bookmark => "BOOKMARK",
        }
    }
}

/// One change, as kept in history and broadcast to watchers.
#[derive(Debug)]
pub struct WatchEvent {
    /// Type.
    pub ty: EventType,
    /// resourceVersion of the change.
    pub rv: u64,
    /// The object after the change (for DELETED: its last state).
    pub obj: Arc<Obj>,
    /// The object before the change (MODIFIED only), for selector transitions.
    pub old: Option<Arc<Obj>>,
}

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

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub enum WatchStart {
    /// Synthetic ADDED events for the current state, then changes.
    Now,
    /// Changes after this resourceVersion.
    After(u64),
}

/// A new watch subscription.
#[derive(Debug)]
pub struct WatchSub {
    /// Current objects (for [`WatchStart::Now`]).
    pub initial: Vec<Arc<Obj>>,
    /// resourceVersion of that snapshot.
    pub rv: u64,
    /// Retained events after the requested resourceVersion.
    pub backlog: Vec<Arc<WatchEvent>>,
    /// Live events.
    pub rx: broadcast::Receiver<Arc<WatchEvent>>,
}

/// Result of a list.
#[derive(Debug)]
pub struct ListResult {
    /// Items, ordered by namespace then name.
    pub items: Vec<Arc<Obj>>,
    /// resourceVersion of the list.
    pub rv: u64,
    /// Continue token, if more items exist.
    pub cont: Option<String>,
}

/// Delete options.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// gracePeriodSeconds.
    pub grace: Option<i64>,
    /// preconditions.uid.
    pub uid: Option<String>,
    /// preconditions.resourceVersion.
    pub rv: Option<String>,
}

/// Patch content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// application/merge-patch+json (RFC 7386).
    Merge,
    /// application/strategic-merge-patch+json.
    Strategic,
    /// application/json-patch+json (RFC 6902).
    Json,
    /// application/apply-patch+yaml: server-side apply with field
    /// ownership ([`super::managed`]); creates the object when missing.
    Apply,
}

/// Who writes and how: the field manager recorded in
/// `metadata.managedFields` (None for the cluster's own writes, which keep
/// the object's entries as they are), the apiVersion of the request,
/// apply's `force`, and `dryRun=All`.
#[derive(Debug, Clone, Default)]
pub struct WriteCtx {
    /// The field manager (`fieldManager`, else from the User-Agent).
    pub manager: Option<String>,
    /// The request's apiVersion (`v1`, `apps/v1`); the resource's when empty.
    pub api_version: String,
    /// Apply's `force=true`.
    pub force: bool,
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// Set by [`Store::patch_with`] for an apply: the fields applied.
    applied: Option<managed::FieldSet>,
}

impl WriteCtx {
    /// A write by `manager` through apiVersion `api_version`.
    pub fn new(manager: impl Into<String>, api_version: impl Into<String>) -> Self {
        WriteCtx { manager: Some(manager.into()), api_version: api_version.into(), ..Default::default() }
    }
}

/// A ServiceAccount token the store issued (a bound token: valid while
/// the account exists with the same uid, until it expires).
#[derive(Debug, Clone)]
struct IssuedToken {
    namespace: String,
    name: String,
    uid: String,
    audiences: Vec<String>,
    expires: chrono::DateTime<chrono::Utc>,
}

/// The user a ServiceAccount token authenticates (for TokenReview).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenUser {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub username: String,
    /// The account's uid.
    pub uid: String,
    /// `system:serviceaccounts`, `system:serviceaccounts:<namespace>`, `system:authenticated`.
    pub groups: Vec<String>,
    /// The audiences the token was issued for.
    pub audiences: Vec<String>,
}

/// Store tuning.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Events retained per resource for watch resumes.
    pub history_limit: usize,
    /// Broadcast buffer per resource; a watcher further behind is closed.
    pub channel_capacity: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { history_limit: 100_000, channel_capacity: 65_536 }
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
}

/// The whole values of the last [`RECENT_PODS`] pod versions written, by
/// resourceVersion. A pod is stored lean, so a write to it parses its
/// bytes back; the write that most often follows another is a binding
/// soon after the create, and it takes the value from here instead. An
/// entry serves one write (it is taken, so that write owns the value),
/// and the oldest are forgotten first: at most 512 values (a few
/// megabytes), about the pods between create and bind at the p99 of
/// `bench --e2e` at 5,000 pods/s.
#[derive(Default)]
struct RecentPods {
    by_rv: HashMap<u64, Arc<Obj>>,
    order: VecDeque<u64>,
}

/// How many pod versions [`RecentPods`] keeps whole.
const RECENT_PODS: usize = 512;

impl RecentPods {
    fn keep(&mut self, obj: &Arc<Obj>) {
        if obj.is_lean() {
            return;
        }
        self.by_rv.insert(obj.rv, obj.clone());
        self.order.push_back(obj.rv);
        while self.order.len() > RECENT_PODS {
            if let Some(rv) = self.order.pop_front() {
                self.by_rv.remove(&rv);
            }
        }
    }

    /// The whole value of `stored` (the current version): taken from here
    /// when it is, else read back from its bytes.
    fn take_full(&mut self, stored: &Arc<Obj>) -> Arc<Obj> {
        match self.by_rv.remove(&stored.rv) {
            Some(o) => o,
            None => stored.full(),
        }
    }
}

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

/// Several field errors as upstream aggregates them (`[a, b]` when more than one).
/// PatchOptions refused (422, as upstream's ValidatePatchOptions).
pub fn patch_options_invalid(message: &str) -> Error {
    Error::Invalid { kind: "PatchOptions.meta.k8s.io".into(), name: String::new(), message: message.into() }
}

fn invalid_all(info: &ResourceInfo, name: &str, errs: &[String]) -> Error {
    let message = if errs.len() == 1 { errs[0].clone() } else { format!("[{}]", errs.join(", ")) };
    invalid(info, name, message)
}

/// An admission refusal as the API server words it: field errors 422,
/// a plugin's refusal 403.
fn refused(info: &ResourceInfo, name: &str, e: res::Error) -> Error {
    match e {
        res::Error::Invalid(errs) => invalid_all(info, name, &errs),
        res::Error::Forbidden(message) => Error::Forbidden { resource: qualified(info), name: name.to_string(), message },
        other => Error::BadRequest(other.to_string()),
    }
}

/// What admission rules read: the store's current objects, under its lock.
struct AdmissionView<'a> {
    inner: &'a Inner,
    storage_protection: bool,
}

impl res::View for AdmissionView<'_> {
    fn get(&self, r: ResId, ns: &str, name: &str) -> Option<&Value> {
        self.inner.kinds.get(r)?.objects.get(&(ns.to_string(), name.to_string())).map(|o| &o.value)
    }

    fn each(&self, r: ResId) -> Box<dyn Iterator<Item = &Value> + '_> {
        match self.inner.kinds.get(r) {
            Some(ks) => Box::new(ks.objects.values().map(|o| &o.value)),
            None => Box::new(std::iter::empty()),
        }
    }

    fn storage_protection(&self) -> bool {
        self.storage_protection
    }
}

/// metadata.deletionTimestamp is set.
pub(crate) fn is_deleting(v: &Value) -> bool {
    v.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null())
}

/// Finalizers still hold the object (for namespaces, `spec.finalizers` too).
fn has_finalizers(r: ResId, v: &Value) -> bool {
    let non_empty = |p: &str| v.at(p).and_then(Value::as_array).is_some_and(|f| !f.is_empty());
    non_empty("/metadata/finalizers") || (r == res::NAMESPACES && non_empty("/spec/finalizers"))
}

const STALE: &str = "the object has been modified; please apply your changes to the latest version and try again";

/// A request's or a stored object's managedFields as the store tracks
/// them: for Events, every entry's fields in the stored form's names (see
/// [`eventview::entries_to`]).
fn decode_fields(info: &ResourceInfo, list: &Value) -> std::result::Result<Vec<managed::Entry>, managed::Error> {
    let mut entries = managed::decode(list)?;
    if eventview::is_events(info) {
        eventview::entries_to(&mut entries, true);
    }
    Ok(entries)
}

/// managedFields' stored form (see `managed::encode`): for Events, an entry
/// written through core/v1 names its fields as core/v1 does.
fn encode_fields(info: &ResourceInfo, entries: &[managed::Entry]) -> Value {
    if eventview::is_events(info) && entries.iter().any(|e| e.api_version == eventview::CORE) {
        let mut shown = entries.to_vec();
        eventview::entries_to(&mut shown, false);
        return managed::encode(&shown);
    }
    managed::encode(entries)
}

fn meta_mut(v: &mut Value) -> Result<&mut Map<String, Value>> {
    let obj = v.as_object_mut().ok_or_else(|| Error::BadRequest("object must be a JSON object".into()))?;
    let m = obj.entry("metadata").or_insert_with(|| json!({}));
    if m.is_null() {
        *m = json!({});
    }
    m.as_object_mut().ok_or_else(|| Error::BadRequest("metadata must be an object".into()))
}

/// Does the object name `kind`/`uid` among its ownerReferences?
fn owned_by(v: &Value, kind: &str, uid: &str) -> bool {
    v.at("/metadata/ownerReferences").and_then(Value::as_array).is_some_and(|refs| {
        refs.iter().any(|o| o.get("kind").and_then(Value::as_str) == Some(kind) && o.get("uid").and_then(Value::as_str) == Some(uid))
    })
}

fn get_str<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.at(ptr).and_then(Value::as_str).unwrap_or("")
}

/// Check the type, then the typed round trip (built-ins) or the CRD's
/// schema (custom resources: pruning, defaults, validation).
fn normalize(info: &ResourceInfo, mut v: Value) -> Result<Value> {
    res::check_type(&mut v, &info.api_version(), info.kind).map_err(|e| Error::BadRequest(e.to_string()))?;
    // The stored form of managedFields (JSON text, see `managed::encode`)
    // is not the typed form: it goes around the round trip unchanged.
    let stored_managed = match v.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(meta) if meta.get("managedFields").is_some_and(Value::is_string) => meta.remove("managedFields"),
        _ => None,
    };
    let mut v = (info.normalize)(v).map_err(|e| Error::BadRequest(e.to_string()))?;
    custom_schema(info, &mut v)?;
    if let (Some(m), Some(meta)) = (stored_managed, v.get_mut("metadata").and_then(Value::as_object_mut)) {
        meta.insert("managedFields".into(), m);
    }
    Ok(v)
}

/// A custom resource's schema, applied to an object already checked.
fn custom_schema(info: &ResourceInfo, v: &mut Value) -> Result<()> {
    if let Some(schema) = info.custom.as_ref().and_then(|c| c.schema.as_ref()) {
        let errs = super::crd::apply_schema(schema, v);
        if !errs.is_empty() {
            return Err(invalid_all(info, meta_str(v, "name"), &errs));
        }
    }
    Ok(())
}

/// Strategic-merge-patch list merge key, by field name: the first key of
/// the associative lists of [`managed::list_type`] (one table for both),
/// plus the container statuses, which merge by name.
fn merge_key(field: &str, items: &[Value]) -> Option<String> {
    if matches!(field, "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses") {
        return Some("name".into());
    }
    match managed::list_type(field, managed::Shape::Builtin, items) {
        managed::ListType::Map(keys) => keys.into_iter().next(),
        _ => None,
    }
}

/// Apply a strategic merge patch: merge-patch semantics, except lists with
/// a known merge key are merged element-wise by that key (`$patch: delete`
/// removes an element) and `$`-directives are otherwise ignored.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(pm) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(tm) = target.as_object_mut() else { return };
    for (k, pv) in pm {
        if k.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            tm.remove(k);
            continue;
        }
        let mk = match pv {
            Value::Array(items) => merge_key(k, items),
            _ => None,
        };
        match (mk.as_deref(), pv) {
            (Some(mk), Value::Array(items)) => {
                let entry = tm.entry(k.clone()).or_insert_with(|| json!([]));
                if !entry.is_array() {
                    *entry = json!([]);
                }
                if let Value::Array(existing) = entry {
                    for item in items {
                        let key = item.get(mk).cloned();
                        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                        let pos = key.as_ref().and_then(|kv| existing.iter().position(|e| e.get(mk) == Some(kv)));
                        match (pos, delete) {
                            (Some(i), true) => {
                                existing.remove(i);
                            }
                            (Some(i), false) => strategic_merge(&mut existing[i], item),
                            (None, true) => {}
                            (None, false) => {
                                let mut fresh = json!({});
                                strategic_merge(&mut fresh, item);
                                existing.push(fresh);
                            }
                        }
                    }
                }
            }
            (_, Value::Object(_)) => {
                let entry = tm.entry(k.clone()).or_insert(Value::Null);
                strategic_merge(entry, pv);
            }
            _ => {
                tm.insert(k.clone(), pv.clone());
            }
        }
    }
}

fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

impl KindStore {
    fn new(cfg: &StoreConfig) -> Self {
        KindStore {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted_rv: 0,
            tx: None,
            capacity: cfg.channel_capacity.max(16),
        }
    }

    fn subscribe(&mut self) -> broadcast::Receiver<Arc<WatchEvent>> {
        let capacity = self.capacity;
        self.tx.get_or_insert_with(|| broadcast::channel(capacity).0).subscribe()
    }

    fn send(&self, ev: Arc<WatchEvent>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(ev);
        }
    }

    fn range_ns<'a>(&'a self, ns: Option<&'a str>) -> Box<dyn Iterator<Item = (&'a Key, &'a Arc<Obj>)> + 'a> {
        match ns {
            None => Box::new(self.objects.iter()),
            Some(ns) => Box::new(
                self.objects
                    .range::<Key, _>((Bound::Included((ns.to_string(), String::new())), Bound::Unbounded))
                    .take_while(move |(k, _)| k.0 == ns),
            ),
        }
    }
}

impl Store {
    /// A new empty store.
    pub fn new(cfg: StoreConfig) -> Self {
        let registry = Registry::with_admission(super::admission::rules);
        let kinds = (0..registry.len()).map(|_| KindStore::new(&cfg)).collect();
        Store {
            inner: Mutex::new(Inner { rv: 0, kinds, pdbs_per_ns: HashMap::new(), terminating_ns: HashSet::new(), recent_pods: RecentPods::default() }),
            registry,
            cfg,
            kubelet: OnceLock::new(),
            tokens: Mutex::new(HashMap::new()),
            storage_protection: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The description of resource `r` (a built-in or a custom resource).
    pub fn info(&self, r: ResId) -> Arc<ResourceInfo> {
        self.registry.info(r)
    }

    /// The served resources.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// A served resource by group, version and plural.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<ResId> {
        self.registry.lookup(group, version, plural)
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

    /// Number of objects of a resource.
    pub fn count(&self, r: ResId) -> usize {
        self.lock().kinds[r].objects.len()
    }

    fn notify(&self, msg: KubeletMsg) {
        if let Some(tx) = self.kubelet.get() {
            let _ = tx.send(msg);
        }
    }

    fn commit(&self, inner: &mut Inner, r: ResId, ty: EventType, mut value: Value, old: Option<Arc<Obj>>) -> Result<Arc<Obj>> {
        inner.rv += 1;
        let rv = inner.rv;
        meta_mut(&mut value)?.insert("resourceVersion".into(), json!(rv.to_string()));
        let obj = Obj::new(value, rv)?;
        let key = (obj.namespace().to_string(), obj.name().to_string());
        let fields = lean_fields(r, &self.info(r));
        // What the store keeps (and sends to watchers): the object, or for
        // the kinds kept lean its lean copy (the caller gets the whole one).
        let stored = if kept_lean(r) { obj.lean(fields) } else { obj.clone() };
        let ks = &mut inner.kinds[r];
        let prev = if ty == EventType::Deleted { ks.objects.remove(&key) } else { ks.objects.insert(key, stored.clone()) };
        // The version this one replaces is no longer current: its history
        // entry becomes lean, and so does the event's old version (only
        // selectors read it).
        let prev = prev.map(|p| {
            let lean = p.lean(fields);
            if let Ok(i) = ks.history.binary_search_by_key(&p.rv, |e| e.rv)
                && ks.history[i].obj.rv == p.rv
                && !ks.history[i].obj.is_lean()
            {
                let e = &ks.history[i];
                ks.history[i] = Arc::new(WatchEvent { ty: e.ty, rv: e.rv, obj: lean.clone(), old: e.old.clone() });
            }
            lean
        });
        let old = match (ty, old) {
            (EventType::Modified, Some(o)) => Some(match prev {
                Some(p) if p.rv == o.rv => p,
                _ => o.lean(fields),
            }),
            _ => None,
        };
        let ev = Arc::new(WatchEvent { ty, rv, obj: stored.clone(), old });
        // A deletion is final: history keeps it lean from the start.
        let kept = if ty == EventType::Deleted {
            Arc::new(WatchEvent { ty, rv, obj: stored.lean(fields), old: None })
        } else {
            ev.clone()
        };
        ks.history.push_back(kept);
        while ks.history.len() > self.cfg.history_limit {
            if let Some(e) = ks.history.pop_front() {
                ks.compacted_rv = e.rv;
            }
        }
        ks.send(ev);
        if r == PODS && ty != EventType::Deleted {
            inner.recent_pods.keep(&obj);
        }
        if ty == EventType::Deleted && !obj.namespace().is_empty() && inner.terminating_ns.contains(obj.namespace()) {
            let ns = obj.namespace().to_string();
            self.finish_namespace(inner, &ns, false)?;
        }
        if r == PDBS {
            let ns = obj.namespace().to_string();
            let count = inner.kinds[PDBS].range_ns(Some(&ns)).count();
            if count == 0 {
                inner.pdbs_per_ns.remove(&ns);
            } else {
                inner.pdbs_per_ns.insert(ns, count);
            }
        }
        Ok(obj)
    }

    /// Hooks after a pod write: kubelet notification and PDB status.
    fn after_pod_write(&self, inner: &mut Inner, old: Option<&Value>, new: &Value) {
        let was_bound = old.is_some_and(|o| !get_str(o, "/spec/nodeName").is_empty());
        let bound = !get_str(new, "/spec/nodeName").is_empty();
        if bound && !was_bound {
            self.notify(KubeletMsg::Bound {
                ns: meta_str(new, "namespace").to_string(),
                name: meta_str(new, "name").to_string(),
                uid: meta_str(new, "uid").to_string(),
            });
        }
        let ns = meta_str(new, "namespace").to_string();
        // Only changes that can move a disruption budget trigger a resync.
        if inner.pdbs_per_ns.contains_key(&ns) && old.is_none_or(|o| pdb_facts(o) != pdb_facts(new)) {
            self.sync_pdbs(inner, &ns, None);
        }
    }

    /// Recompute the status of the PDBs of a namespace (or just one).
    fn sync_pdbs(&self, inner: &mut Inner, ns: &str, only: Option<&str>) {
        let now = now_rfc3339();
        let pdbs: Vec<Arc<Obj>> = inner.kinds[PDBS]
            .range_ns(Some(ns))
            .filter(|(k, _)| only.is_none_or(|n| k.1 == n))
            .map(|(_, o)| o.clone())
            .collect();
        if pdbs.is_empty() {
            return;
        }
        let pods: Vec<Arc<Obj>> = inner.kinds[PODS].range_ns(Some(ns)).map(|(_, o)| o.full()).collect();
        let pod_vals: Vec<&Value> = pods.iter().map(|p| &p.value).collect();
        for pdb in pdbs {
            let status = res::pdb_status(&pdb.value, &pod_vals, &now);
            if pdb.value.get("status") != Some(&status) {
                let mut v = pdb.value.clone();
                set_path(&mut v, &["status"], status);
                let _ = self.commit(inner, PDBS, EventType::Modified, v, Some(pdb));
            }
        }
    }

    /// Get one object.
    pub fn get(&self, r: ResId, ns: &str, name: &str) -> Result<Arc<Obj>> {
        let inner = self.lock();
        inner.kinds[r].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full).ok_or_else(|| not_found(&self.info(r), name))
    }

    /// Is there an object of resource `r` named `name` in `ns`? (Reads
    /// nothing of it.)
    pub fn exists(&self, r: ResId, ns: &str, name: &str) -> bool {
        self.lock().kinds[r].objects.contains_key(&(ns.to_string(), name.to_string()))
    }

    /// List objects matching a filter, with optional paging.
    pub fn list(&self, r: ResId, filter: &Filter, limit: Option<usize>, cont: Option<&str>) -> Result<ListResult> {
        self.list_with(r, filter, limit, cont, true)
    }

    /// [`Store::list`] for a reader of the bytes only: the items as stored
    /// (a kind kept lean comes lean; see [`Obj::full`]).
    pub fn list_bytes(&self, r: ResId, filter: &Filter, limit: Option<usize>, cont: Option<&str>) -> Result<ListResult> {
        self.list_with(r, filter, limit, cont, false)
    }

    fn list_with(&self, r: ResId, filter: &Filter, limit: Option<usize>, cont: Option<&str>, whole: bool) -> Result<ListResult> {
        let (start_rv, after) = match cont {
            Some(c) if !c.is_empty() => {
                let (rv, key) = decode_continue(c).ok_or_else(|| Error::BadRequest("invalid continue token".into()))?;
                (Some(rv), Some(key))
            }
            _ => (None, None),
        };
        let inner = self.lock();
        let ks = &inner.kinds[r];
        let ns = filter.namespace.as_deref();
        let iter: Box<dyn Iterator<Item = (&Key, &Arc<Obj>)>> = match &after {
            None => ks.range_ns(ns),
            Some(k) => {
                let it = ks.objects.range::<Key, _>((Bound::Excluded(k.clone()), Bound::Unbounded));
                match ns {
                    Some(ns) => Box::new(it.take_while(move |(k, _)| k.0 == ns)),
                    None => Box::new(it),
                }
            }
        };
        let mut items = Vec::new();
        let mut cont_out = None;
        let rv = start_rv.unwrap_or(inner.rv);
        for (k, o) in iter {
            if !o.matches(filter) {
                continue;
            }
            if limit.is_some_and(|l| l > 0 && items.len() >= l) {
                if let Some(last) = items.last().map(|o: &Arc<Obj>| (o.namespace().to_string(), o.name().to_string())) {
                    cont_out = Some(encode_continue(rv, &last));
                }
                let _ = k;
                break;
            }
            items.push(o.clone());
        }
        drop(inner);
        // Lean items are read back whole outside the lock: other requests
        // need not wait for a long list to parse.
        if whole {
            for o in &mut items {
                if o.is_lean() {
                    *o = o.full();
                }
            }
        }
        Ok(ListResult { items, rv, cont: cont_out })
    }

    /// Create an object (already JSON-parsed) in namespace `ns` ("" for cluster-scoped).
    pub fn create(&self, r: ResId, ns: &str, body: Value) -> Result<Arc<Obj>> {
        self.create_with(r, ns, body, &WriteCtx::default())
    }

    /// [`Store::create`] by a field manager (see [`WriteCtx`]).
    pub fn create_with(&self, r: ResId, ns: &str, body: Value, ctx: &WriteCtx) -> Result<Arc<Obj>> {
        let v = normalize(&self.info(r), body)?;
        self.create_normalized(r, ns, v, ctx)
    }

    /// Create from a JSON body (bytes straight into the typed object).
    pub fn create_from_slice(&self, r: ResId, ns: &str, body: &[u8]) -> Result<Arc<Obj>> {
        self.create_from_slice_with(r, ns, body, &WriteCtx::default())
    }

    /// [`Store::create_from_slice`] by a field manager (see [`WriteCtx`]).
    pub fn create_from_slice_with(&self, r: ResId, ns: &str, body: &[u8], ctx: &WriteCtx) -> Result<Arc<Obj>> {
        let info = self.info(r);
        if info.custom.is_some() {
            let v: Value = serde_json::from_slice(body).map_err(|e| Error::BadRequest(format!("the body of the request was in an unknown format: {e}")))?;
            return self.create_with(r, ns, v, ctx);
        }
        let v = (info.normalize_slice)(body).map_err(|e| Error::BadRequest(e.to_string()))?;
        if !v.is_object() {
            return Err(Error::BadRequest("the body of the request must be a JSON object".into()));
        }
        self.create_normalized(r, ns, v, ctx)
    }

    fn create_normalized(&self, r: ResId, ns: &str, mut v: Value, ctx: &WriteCtx) -> Result<Arc<Obj>> {
        let info = self.info(r);
        let meta = meta_mut(&mut v)?;
        let body_ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("").to_string();
        if info.namespaced {
            if !body_ns.is_empty() && body_ns != ns {
                return Err(Error::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ));
            }
            meta.insert("namespace".into(), json!(ns));
        } else {
            meta.remove("namespace");
        }
        let name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        let gen_name = meta.get("generateName").and_then(Value::as_str).unwrap_or("").to_string();
        if name.is_empty() && gen_name.is_empty() {
            return Err(invalid(&info, "", "metadata.name: Required value: name or generateName is required"));
        }
        if !name.is_empty()
            && let Some(msg) = res::validate_name(&name) {
                return Err(invalid(&info, &name, msg));
            }
        for f in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
            meta.remove(f);
        }
        meta.insert("uid".into(), json!(new_uid()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.insert("generation".into(), json!(1));

        let mut inner = self.lock();
        if info.namespaced && !inner.kinds[res::NAMESPACES].objects.contains_key(&(String::new(), ns.to_string())) {
            return Err(Error::NotFound { resource: "namespaces".into(), name: ns.to_string() });
        }
        if info.namespaced && inner.terminating_ns.contains(ns) {
            return Err(Error::NamespaceTerminating { resource: qualified(&info), name: name.clone(), namespace: ns.to_string() });
        }
        let name = if name.is_empty() {
            let mut chosen = None;
            for _ in 0..16 {
                let candidate = format!("{gen_name}{}", random_suffix());
                if !inner.kinds[r].objects.contains_key(&(ns.to_string(), candidate.clone())) {
                    chosen = Some(candidate);
                    break;
                }
            }
            let n = chosen.ok_or_else(|| Error::AlreadyExists { resource: qualified(&info), name: gen_name.clone() })?;
            if let Some(msg) = res::validate_name(&n) {
                return Err(invalid(&info, &n, msg));
            }
            meta_mut(&mut v)?.insert("name".into(), json!(n));
            n
        } else {
            name
        };
        let key = (if info.namespaced { ns.to_string() } else { String::new() }, name.clone());
        if inner.kinds[r].objects.contains_key(&key) {
            return Err(Error::AlreadyExists { resource: qualified(&info), name });
        }
        self.admit_create(&inner, &info, &name, &mut v)?;
        if ctx.manager.is_some() {
            self.record_fields(&info, None, &mut v, ctx, false)?;
        }
        if ctx.dry_run {
            return Obj::new(v, inner.rv);
        }
        let obj = self.commit(&mut inner, r, EventType::Added, v, None)?;
        match r {
            PODS => self.after_pod_write(&mut inner, None, &obj.value),
            PDBS => self.sync_pdbs(&mut inner, &key.0, Some(&name)),
            res::CRDS => self.define_crd(&mut inner, &obj.value),
            _ => {}
        }
        Ok(obj)
    }

    /// Serve what a CRD defines (new versions get their stores).
    fn define_crd(&self, inner: &mut Inner, crd: &Value) {
        let d = super::crd::definition(crd);
        let (_, added) = self.registry.define(meta_str(crd, "name"), d.versions, &d.storage_version);
        for _ in 0..added {
            inner.kinds.push(KindStore::new(&self.cfg));
        }
    }

    /// Delete a CRD: its objects go (DELETED to their watchers), then its
    /// resources stop being served, then the CRD (upstream does the same
    /// asynchronously behind the `customresourcecleanup` finalizer).
    fn delete_crd_locked(&self, inner: &mut Inner, old: Arc<Obj>) -> Result<Arc<Obj>> {
        let ids = self.registry.of_crd(old.name());
        for id in ids {
            let victims: Vec<Arc<Obj>> = inner.kinds[id].objects.values().cloned().collect();
            for o in victims {
                self.commit(inner, id, EventType::Deleted, o.value.clone(), None)?;
            }
        }
        self.registry.retire(old.name());
        self.remove_locked(inner, res::CRDS, &old)
    }

    /// The kind's create admission (defaults, checks; see `admission`),
    /// reading the cluster as it stands under the lock.
    fn admit_create(&self, inner: &Inner, info: &ResourceInfo, name: &str, v: &mut Value) -> Result<()> {
        let Some(create) = info.admission.create else { return Ok(()) };
        let view = AdmissionView { inner, storage_protection: self.storage_protection.load(std::sync::atomic::Ordering::Relaxed) };
        create(&view, name, v).map_err(|e| refused(info, name, e))
    }

    /// Replace an object (PUT), or just its status when `status_only`.
    pub fn update(&self, r: ResId, ns: &str, name: &str, body: Value, status_only: bool) -> Result<Arc<Obj>> {
        self.update_with(r, ns, name, body, status_only, &WriteCtx::default())
    }

    /// [`Store::update`] by a field manager (see [`WriteCtx`]).
    pub fn update_with(&self, r: ResId, ns: &str, name: &str, body: Value, status_only: bool, ctx: &WriteCtx) -> Result<Arc<Obj>> {
        let info = self.info(r);
        let mut v = normalize(&info, body)?;
        let meta = meta_mut(&mut v)?;
        let body_name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        if body_name != name {
            return Err(Error::BadRequest("the name of the object does not match the name on the URL".into()));
        }
        let body_ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("").to_string();
        if info.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(Error::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
        let body_rv = meta.get("resourceVersion").and_then(Value::as_str).unwrap_or("").to_string();
        let mut inner = self.lock();
        let key = (if info.namespaced { ns.to_string() } else { String::new() }, name.to_string());
        let Some(old) = inner.kinds[r].objects.get(&key).map(Obj::full) else {
            drop(inner);
            if info.create_on_update && !status_only {
                return self.create_with(r, ns, v, ctx);
            }
            return Err(not_found(&info, name));
        };
        if !body_rv.is_empty() && body_rv != old.rv.to_string() {
            return Err(conflict(&info, name, STALE));
        }
        self.apply_update(&mut inner, r, old, v, status_only, ctx)
    }

    /// Patch an object (or its status when `status_only`).
    pub fn patch(&self, r: ResId, ns: &str, name: &str, pt: PatchType, body: &[u8], status_only: bool) -> Result<Arc<Obj>> {
        self.patch_with(r, ns, name, pt, body, status_only, &WriteCtx::default()).map(|(o, _)| o)
    }

    /// [`Store::patch`] by a field manager (see [`WriteCtx`]); also says
    /// whether the object was created (an apply of a missing object).
    #[allow(clippy::too_many_arguments)]
    pub fn patch_with(
        &self,
        r: ResId,
        ns: &str,
        name: &str,
        pt: PatchType,
        body: &[u8],
        status_only: bool,
        ctx: &WriteCtx,
    ) -> Result<(Arc<Obj>, bool)> {
        let info = self.info(r);
        let patch: Value = match pt {
            PatchType::Apply => match serde_json::from_slice(body) {
                Ok(v) => v,
                Err(_) => serde_saphyr::from_slice(body).map_err(|e| Error::BadRequest(format!("invalid apply patch: {e}")))?,
            },
            _ => serde_json::from_slice(body).map_err(|e| Error::BadRequest(format!("invalid patch: {e}")))?,
        };
        if pt == PatchType::Apply {
            return self.apply(r, ns, name, patch, status_only, ctx);
        }
        let json_ops: Option<json_patch::Patch> = if pt == PatchType::Json {
            Some(serde_json::from_value(patch.clone()).map_err(|e| Error::BadRequest(format!("invalid JSON patch: {e}")))?)
        } else {
            if !patch.is_object() {
                return Err(Error::BadRequest("patch body must be a JSON object".into()));
            }
            None
        };
        let mut inner = self.lock();
        let key = (if info.namespaced { ns.to_string() } else { String::new() }, name.to_string());
        let Some(old) = inner.kinds[r].objects.get(&key).map(Obj::full) else {
            return Err(not_found(&info, name));
        };
        let mut v = old.value.clone();
        match pt {
            PatchType::Merge => merge_patch(&mut v, &patch),
            PatchType::Strategic | PatchType::Apply => strategic_merge(&mut v, &patch),
            PatchType::Json => {
                if let Some(ops) = &json_ops {
                    json_patch::patch(&mut v, ops).map_err(|e| invalid(&info, name, format!("JSON patch failed: {e}")))?;
                }
            }
        }
        let patched_rv = get_str(&v, "/metadata/resourceVersion");
        if !patched_rv.is_empty() && patched_rv != old.rv.to_string() {
            return Err(conflict(&info, name, STALE));
        }
        if get_str(&v, "/metadata/name") != name || get_str(&v, "/metadata/namespace") != key.0 {
            return Err(invalid(&info, name, "metadata.name: Invalid value: field is immutable"));
        }
        let v = normalize(&info, v)?;
        self.apply_update(&mut inner, r, old, v, status_only, ctx).map(|o| (o, false))
    }

    /// Server-side apply of configuration `cfg` by `ctx`'s manager: creates
    /// the object when missing; else merges `cfg` into it, removes what the
    /// manager applied before and no longer applies (unless another applier
    /// owns it), and refuses fields other managers own with another value
    /// (409) unless forced.
    fn apply(&self, r: ResId, ns: &str, name: &str, cfg: Value, status_only: bool, ctx: &WriteCtx) -> Result<(Arc<Obj>, bool)> {
        let info = self.info(r);
        let Some(manager) = ctx.manager.clone().filter(|m| !m.is_empty()) else {
            return Err(patch_options_invalid("fieldManager: Required value: is required for apply patch"));
        };
        if !cfg.is_object() {
            return Err(Error::BadRequest("the body of an apply patch must be an object".into()));
        }
        if cfg.at("/metadata/managedFields").is_some_and(|m| !m.is_null()) {
            return Err(Error::BadRequest("metadata.managedFields must be nil".into()));
        }
        let kind = get_str(&cfg, "/kind");
        if kind.is_empty() {
            return Err(Error::BadRequest("invalid object: Object 'Kind' is missing".into()));
        }
        if kind != info.kind {
            return Err(Error::BadRequest(format!("the kind in the data ({kind}) does not match the expected kind ({})", info.kind)));
        }
        let cfg_name = get_str(&cfg, "/metadata/name");
        if !cfg_name.is_empty() && cfg_name != name {
            return Err(Error::BadRequest("the name of the object does not match the name on the URL".into()));
        }
        let schema = info.custom.as_ref().and_then(|c| c.schema.clone());
        let shape = schema.as_ref().map_or(managed::Shape::Builtin, managed::Shape::Custom);
        let applied = managed::applied_set(&managed::tracked(&cfg, info.has_status, status_only), shape);
        let actx = WriteCtx { applied: Some(applied.clone()), manager: Some(manager.clone()), ..ctx.clone() };
        let mut inner = self.lock();
        let key = (if info.namespaced { ns.to_string() } else { String::new() }, name.to_string());
        let Some(old) = inner.kinds[r].objects.get(&key).map(Obj::full) else {
            drop(inner);
            if status_only {
                return Err(not_found(&info, name));
            }
            let mut body = cfg;
            set_path(&mut body, &["metadata", "name"], json!(name));
            return self.create_with(r, ns, body, &actx).map(|o| (o, true));
        };
        let cfg_rv = get_str(&cfg, "/metadata/resourceVersion");
        if !cfg_rv.is_empty() && cfg_rv != old.rv.to_string() {
            return Err(conflict(&info, name, STALE));
        }
        let mut v = old.value.clone();
        managed::merge(&mut v, &cfg, shape);
        // What this manager applied last time and no longer applies goes,
        // unless another applier owns it (or something below it).
        let entries = old.value.at("/metadata/managedFields").and_then(|m| decode_fields(&info, m).ok()).unwrap_or_default();
        let me = managed::Entry {
            manager,
            operation: managed::Operation::Apply,
            api_version: String::new(),
            subresource: if status_only { "status".into() } else { String::new() },
            time: None,
            set: managed::FieldSet::default(),
        };
        let mut last = managed::FieldSet::default();
        let mut others = managed::FieldSet::default();
        for e in &entries {
            if e.same_manager(&me) {
                last = last.union(&e.set);
            } else if e.operation == managed::Operation::Apply {
                others = others.union(&e.set);
            }
        }
        for p in last.difference(&applied).paths() {
            if !applied.has_self_or_below(&p) && !others.has_self_or_below(&p) {
                managed::remove_path(&mut v, &p);
            }
        }
        if get_str(&v, "/metadata/namespace") != key.0 {
            return Err(invalid(&info, name, "metadata.namespace: Invalid value: field is immutable"));
        }
        let v = normalize(&info, v)?;
        self.apply_update(&mut inner, r, old, v, status_only, &actx).map(|o| (o, false))
    }

    /// Record a write in `new`'s `metadata.managedFields` (upstream's field
    /// manager): the entries come from the request object when it sets
    /// them (`[]` or `[{}]` resets them; never through a subresource), else
    /// from the live object; the writer's entry gets what it applied, or
    /// what it changed. Apply conflicts are refused here.
    fn record_fields(&self, info: &ResourceInfo, old: Option<&Value>, new: &mut Value, ctx: &WriteCtx, status_only: bool) -> Result<()> {
        let Some(manager) = ctx.manager.clone() else { return Ok(()) };
        let schema = info.custom.as_ref().and_then(|c| c.schema.as_ref());
        let shape = schema.map_or(managed::Shape::Builtin, managed::Shape::Custom);
        let live = old.and_then(|o| o.at("/metadata/managedFields"));
        let live_entries = live.and_then(|m| decode_fields(info, m).ok()).unwrap_or_default();
        let mut entries = match new.at("/metadata/managedFields") {
            Some(m) if !status_only && managed::is_reset(m) => Vec::new(),
            Some(m) if !status_only && Some(m) != live => match decode_fields(info, m) {
                Ok(e) if !e.is_empty() => e,
                _ => live_entries,
            },
            _ => live_entries,
        };
        let api_version = if ctx.api_version.is_empty() { info.api_version() } else { ctx.api_version.clone() };
        let subresource = if status_only { "status" } else { "" };
        // A plain create (an Update by one manager, no entries of its own):
        // its one entry is written from what the create changed, shared by
        // every create of the same shape.
        // (Not for an Event written through core/v1: its entry names the
        // fields as core/v1 does, see `encode_fields`.)
        if old.is_none() && entries.is_empty() && ctx.applied.is_none() && !(eventview::is_events(info) && api_version == eventview::CORE) {
            let cmp = managed::created_shared(new, info.has_status, status_only, shape);
            let list = managed::encode_created(&manager, &api_version, subresource, &now_rfc3339(), &cmp);
            let meta = meta_mut(new)?;
            match list {
                Some(list) => meta.insert("managedFields".into(), list),
                None => meta.remove("managedFields"),
            };
            return Ok(());
        }
        let (operation, set) = match &ctx.applied {
            Some(s) => (managed::Operation::Apply, s.clone()),
            None => (managed::Operation::Update, managed::FieldSet::default()),
        };
        let me = managed::Entry {
            manager,
            operation,
            api_version,
            subresource: subresource.into(),
            time: Some(now_rfc3339()),
            set,
        };
        let cmp = match old {
            Some(o) => Arc::new(managed::compare(&managed::tracked(o, info.has_status, status_only), &managed::tracked(new, info.has_status, status_only), shape)),
            None => managed::created_shared(new, info.has_status, status_only, shape),
        };
        if let Err(conflicts) = managed::record(&mut entries, me, &cmp, ctx.force) {
            let causes: Vec<Value> = conflicts
                .iter()
                .map(|c| json!({"type": "FieldManagerConflict", "message": format!("conflict with {}", c.manager), "field": c.field}))
                .collect();
            return Err(Error::ApplyConflict { message: managed::conflict_message(&conflicts), causes: Value::Array(causes) });
        }
        let meta = meta_mut(new)?;
        if entries.iter().all(|e| e.set.is_empty()) {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), encode_fields(info, &entries));
        }
        Ok(())
    }

    /// Shared update path: merge system fields, validate, commit.
    fn apply_update(&self, inner: &mut Inner, r: ResId, old: Arc<Obj>, v: Value, status_only: bool, ctx: &WriteCtx) -> Result<Arc<Obj>> {
        let info = self.info(r);
        let name = old.name().to_string();
        let mut new = if status_only {
            let mut n = old.value.clone();
            if let Some(m) = n.as_object_mut() {
                match v.get("status") {
                    Some(s) => m.insert("status".into(), s.clone()),
                    None => m.remove("status"),
                };
            }
            n
        } else {
            let mut n = v;
            if let (Some(nm), Some(om)) = (n.as_object_mut(), old.value.as_object())
                && info.has_status {
                    match om.get("status") {
                        Some(s) => nm.insert("status".into(), s.clone()),
                        None => nm.remove("status"),
                    };
                }
            let om = old.value.get("metadata").cloned().unwrap_or_else(|| json!({}));
            let meta = meta_mut(&mut n)?;
            for f in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace", "generation"] {
                match om.get(f) {
                    Some(x) => meta.insert(f.into(), x.clone()),
                    None => meta.remove(f),
                };
            }
            n
        };
        if !status_only {
            if let Some(update) = info.admission.update {
                update(&old.value, &mut new).map_err(|e| refused(&info, &name, e))?;
            }
            if old.value.get("spec") != new.get("spec") {
                let g = old.value.at("/metadata/generation").and_then(Value::as_i64).unwrap_or(1) + 1;
                meta_mut(&mut new)?.insert("generation".into(), json!(g));
            }
        }
        if ctx.manager.is_some() {
            self.record_fields(&info, Some(&old.value), &mut new, ctx, status_only)?;
        } else if !status_only {
            // The cluster's own writes keep the entries as they are.
            match old.value.at("/metadata/managedFields").cloned() {
                Some(m) => set_path(&mut new, &["metadata", "managedFields"], m),
                None => {
                    if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.remove("managedFields");
                    }
                }
            }
        }
        // No-op updates do not bump the resourceVersion.
        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), json!(old.rv.to_string()));
        }
        if new == old.value {
            return Ok(old);
        }
        if let Some(settle) = info.admission.settle {
            settle(&mut new);
            if new == old.value {
                return Ok(old);
            }
        }
        if ctx.dry_run {
            return Obj::new(new, old.rv);
        }
        self.commit_update(inner, r, old, new)
    }

    /// Commit a new version of an existing object: removes it when this
    /// write took its last finalizer off while it is being deleted with no
    /// grace period left (upstream's `shouldDeleteDuringUpdate`), then runs
    /// the per-kind hooks.
    fn commit_update(&self, inner: &mut Inner, r: ResId, old: Arc<Obj>, new: Value) -> Result<Arc<Obj>> {
        let name = old.name().to_string();
        let no_grace_left = new.at("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0) == 0;
        if is_deleting(&new) && !has_finalizers(r, &new) && no_grace_left && (r != PODS || has_finalizers(r, &old.value)) {
            if r == res::NAMESPACES {
                // Finalized by hand: the namespace goes, as upstream, whatever is left in it.
                inner.terminating_ns.remove(&name);
            }
            return self.remove_locked(inner, r, &Obj::from_value(new, old.rv));
        }
        let obj = self.commit(inner, r, EventType::Modified, new, Some(old.clone()))?;
        match r {
            PODS => self.after_pod_write(inner, Some(&old.value), &obj.value),
            PDBS => {
                let ns = obj.namespace().to_string();
                self.sync_pdbs(inner, &ns, Some(&name));
            }
            res::CRDS => self.define_crd(inner, &obj.value),
            _ => {}
        }
        // Re-read: PDB sync may have committed a newer version of this object.
        let key = (obj.namespace().to_string(), obj.name().to_string());
        match inner.kinds[r].objects.get(&key) {
            Some(o) if o.rv != obj.rv => Ok(o.full()),
            _ => Ok(obj),
        }
    }

    /// Delete an object. Bound running pods are deleted gracefully (the
    /// returned object carries deletionTimestamp); others go at once.
    pub fn delete(&self, r: ResId, ns: &str, name: &str, opts: &DeleteOpts) -> Result<Arc<Obj>> {
        let info = self.info(r);
        if let Some(admit) = info.admission.delete {
            admit(name).map_err(|e| refused(&info, name, e))?;
        }
        let mut inner = self.lock();
        let key = (if info.namespaced { ns.to_string() } else { String::new() }, name.to_string());
        let old = inner.kinds[r].objects.get(&key).map(Obj::full).ok_or_else(|| not_found(&self.info(r), name))?;
        if let Some(uid) = &opts.uid
            && uid != old.uid() {
                return Err(conflict(&info,
                    name,
                    format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", old.uid()),
                ));
            }
        if let Some(rv) = &opts.rv
            && *rv != old.rv.to_string() {
                return Err(conflict(&info,
                    name,
                    format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}", old.rv),
                ));
            }
        match r {
            PODS => self.delete_pod_locked(&mut inner, old, opts.grace),
            res::NAMESPACES => self.delete_namespace_locked(&mut inner, old),
            res::CRDS => self.delete_crd_locked(&mut inner, old),
            _ => {
                let obj = self.delete_object_locked(&mut inner, r, old)?;
                if r == res::NODES && !is_deleting(&obj.value) {
                    // The garbage collector removes what the node owns (its CSINode).
                    if let Some(csinode) = inner.kinds[res::CSINODES].objects.get(&(String::new(), name.to_string())).map(Obj::full)
                        && owned_by(&csinode.value, "Node", obj.uid())
                    {
                        self.delete_object_locked(&mut inner, res::CSINODES, csinode)?;
                    }
                }
                Ok(obj)
            }
        }
    }

    /// Delete any object but a pod or a namespace: finalizers hold it
    /// (deletionTimestamp set, deletionGracePeriodSeconds 0), otherwise it goes.
    fn delete_object_locked(&self, inner: &mut Inner, r: ResId, old: Arc<Obj>) -> Result<Arc<Obj>> {
        if has_finalizers(r, &old.value) {
            if is_deleting(&old.value) {
                return Ok(old);
            }
            let mut v = old.value.clone();
            let meta = meta_mut(&mut v)?;
            meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            return self.commit(inner, r, EventType::Modified, v, Some(old));
        }
        self.remove_locked(inner, r, &old)
    }

    /// Remove an object from the store now (with the PDB resync a pod needs).
    fn remove_locked(&self, inner: &mut Inner, r: ResId, old: &Arc<Obj>) -> Result<Arc<Obj>> {
        let obj = self.commit(inner, r, EventType::Deleted, old.value.clone(), None)?;
        if r == PODS && inner.pdbs_per_ns.contains_key(obj.namespace()) {
            let ns = obj.namespace().to_string();
            self.sync_pdbs(inner, &ns, None);
        }
        Ok(obj)
    }

    /// Delete a pod as the API server does (`CheckGracefulDelete`): the
    /// grace period is the request's, else the pod's
    /// terminationGracePeriodSeconds; 0 for a pod not bound or already
    /// terminal; a negative one becomes 1. A positive grace period marks
    /// the pod (deletionTimestamp) and leaves its removal to the kubelet;
    /// 0 removes it at once unless finalizers hold it. A second delete may
    /// only shorten the grace period.
    fn delete_pod_locked(&self, inner: &mut Inner, old: Arc<Obj>, grace: Option<i64>) -> Result<Arc<Obj>> {
        let v = &old.value;
        let mut period = grace.or_else(|| v.at("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64)).unwrap_or(0);
        if get_str(v, "/spec/nodeName").is_empty() || matches!(get_str(v, "/status/phase"), "Succeeded" | "Failed") {
            period = 0;
        }
        if period < 0 {
            period = 1;
        }
        let now = chrono::Utc::now();
        let mut deadline_ts = now + chrono::Duration::seconds(period);
        if is_deleting(v) {
            let existing = v.at("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0);
            if period >= existing {
                return Ok(old);
            }
            // Shorten: the new deadline counts from the first request.
            if let Some(ts) = v
                .at("/metadata/deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            {
                deadline_ts = ts.with_timezone(&chrono::Utc) - chrono::Duration::seconds(existing) + chrono::Duration::seconds(period);
            }
        }
        if period == 0 && !has_finalizers(PODS, v) {
            return self.remove_locked(inner, PODS, &old);
        }
        let mut nv = old.value.clone();
        let meta = meta_mut(&mut nv)?;
        meta.insert("deletionTimestamp".into(), json!(deadline_ts.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)));
        meta.insert("deletionGracePeriodSeconds".into(), json!(period));
        let obj = self.commit(inner, PODS, EventType::Modified, nv, Some(old.clone()))?;
        if period > 0 {
            let left = (deadline_ts - now).num_milliseconds().max(0).unsigned_abs();
            self.notify(KubeletMsg::Terminate {
                ns: obj.namespace().to_string(),
                name: obj.name().to_string(),
                uid: obj.uid().to_string(),
                deadline: Instant::now() + Duration::from_millis(left),
            });
        }
        self.after_pod_write(inner, Some(&old.value), &obj.value);
        Ok(obj)
    }

    /// Delete a namespace as the API server and the namespace controller
    /// do: it goes Terminating (creation in it is refused), its pods are
    /// deleted gracefully and everything else at once (finalizers hold
    /// what they hold), and it is removed once empty.
    fn delete_namespace_locked(&self, inner: &mut Inner, old: Arc<Obj>) -> Result<Arc<Obj>> {
        if is_deleting(&old.value) {
            return Ok(old);
        }
        let name = old.name().to_string();
        let mut v = old.value.clone();
        let meta = meta_mut(&mut v)?;
        meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        set_path(&mut v, &["status", "phase"], json!("Terminating"));
        self.commit(inner, res::NAMESPACES, EventType::Modified, v, Some(old))?;
        inner.terminating_ns.insert(name.clone());
        for (kr, info) in self.registry.all().iter().enumerate() {
            if !info.namespaced {
                continue;
            }
            let victims: Vec<Arc<Obj>> = inner.kinds[kr].range_ns(Some(&name)).map(|(_, o)| o.clone()).collect();
            for o in victims {
                // Earlier removals may have taken this one.
                let Some(current) = inner.kinds[kr].objects.get(&(name.clone(), o.name().to_string())).map(Obj::full) else { continue };
                if kr == PODS {
                    self.delete_pod_locked(inner, current, None)?;
                } else {
                    self.delete_object_locked(inner, kr, current)?;
                }
            }
        }
        self.finish_namespace(inner, &name, true)?;
        let key = (String::new(), name);
        match inner.kinds[res::NAMESPACES].objects.get(&key) {
            Some(o) => Ok(o.clone()),
            None => inner.kinds[res::NAMESPACES].history.back().map(|e| e.obj.full()).ok_or_else(|| not_found(&RESOURCES[res::NAMESPACES], &key.1)),
        }
    }

    /// The namespace controller's last step: remove a terminating namespace
    /// once nothing is left in it; with `report`, record what remains in
    /// its conditions (NamespaceContentRemaining, NamespaceFinalizersRemaining).
    fn finish_namespace(&self, inner: &mut Inner, ns: &str, report: bool) -> Result<()> {
        let key = (String::new(), ns.to_string());
        let Some(nso) = inner.kinds[res::NAMESPACES].objects.get(&key).map(Obj::full) else {
            inner.terminating_ns.remove(ns);
            return Ok(());
        };
        let mut remaining: Vec<String> = Vec::new();
        let mut finalizers: BTreeMap<String, usize> = BTreeMap::new();
        for (kr, info) in self.registry.all().iter().enumerate() {
            if !info.namespaced {
                continue;
            }
            let mut count = 0;
            for (_, o) in inner.kinds[kr].range_ns(Some(ns)) {
                count += 1;
                if !report {
                    break;
                }
                let o = o.full();
                for f in o.value.at("/metadata/finalizers").and_then(Value::as_array).into_iter().flatten() {
                    *finalizers.entry(f.as_str().unwrap_or("").to_string()).or_default() += 1;
                }
            }
            if count > 0 {
                if !report {
                    return Ok(());
                }
                remaining.push(format!("{} has {count} resource instances", qualified(info)));
            }
        }
        if remaining.is_empty() {
            if has_finalizers(PODS, &nso.value) {
                // Other finalizers than the controller's own still hold it.
                let mut v = nso.value.clone();
                set_path(&mut v, &["spec", "finalizers"], json!([]));
                self.commit(inner, res::NAMESPACES, EventType::Modified, v, Some(nso))?;
                return Ok(());
            }
            inner.terminating_ns.remove(ns);
            self.commit(inner, res::NAMESPACES, EventType::Deleted, nso.value.clone(), None)?;
            return Ok(());
        }
        let now = now_rfc3339();
        let mut v = nso.value.clone();
        set_condition(&mut v, json!({"type": "NamespaceContentRemaining", "status": "True", "reason": "SomeResourcesRemain",
            "message": format!("Some resources are remaining: {}", remaining.join(", ")), "lastTransitionTime": now}));
        if !finalizers.is_empty() {
            let list: Vec<String> = finalizers.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect();
            set_condition(&mut v, json!({"type": "NamespaceFinalizersRemaining", "status": "True", "reason": "SomeFinalizersRemain",
                "message": format!("Some content in the namespace has finalizers remaining: {}", list.join(", ")), "lastTransitionTime": now}));
        }
        self.commit(inner, res::NAMESPACES, EventType::Modified, v, Some(nso))?;
        Ok(())
    }

    /// POST pods/binding: assign a pod to a node.
    pub fn bind(&self, ns: &str, name: &str, body: Value) -> Result<()> {
        let mut b = body;
        res::check_type(&mut b, "v1", "Binding").map_err(|e| Error::BadRequest(e.to_string()))?;
        let b: k8s_openapi::api::core::v1::Binding =
            serde_json::from_value(b).map_err(|e| Error::BadRequest(format!("invalid Binding: {e}")))?;
        let target = b.target.name.clone().unwrap_or_default();
        if target.is_empty() {
            return Err(Error::Invalid { kind: "Binding".into(), name: name.into(), message: "target.name: Required value".into() });
        }
        if let Some(bn) = b.metadata.name.as_deref()
            && !bn.is_empty() && bn != name {
                return Err(Error::BadRequest("the name of the binding does not match the pod name on the URL".into()));
            }
        if let Some(bns) = b.metadata.namespace.as_deref()
            && !bns.is_empty() && bns != ns {
                return Err(Error::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ));
            }
        let mut inner = self.lock();
        let key = (ns.to_string(), name.to_string());
        let stored = inner.kinds[PODS].objects.get(&key).cloned().ok_or_else(|| not_found(&RESOURCES[PODS], name))?;
        let old = inner.recent_pods.take_full(&stored);
        let res_name = "pods/binding";
        let bconflict = |m: String| Error::Conflict { resource: res_name.into(), name: name.to_string(), message: m };
        if let Some(uid) = b.metadata.uid.as_deref()
            && uid != old.uid() {
                return Err(bconflict(format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", old.uid())));
            }
        if old.value.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null()) {
            return Err(bconflict(format!("pod {name} is being deleted, cannot be assigned to a host")));
        }
        let current = get_str(&old.value, "/spec/nodeName");
        if !current.is_empty() {
            return Err(bconflict(format!("pod {name} is already assigned to node \"{current}\"")));
        }
        // The old value, read back from the stored bytes, is this write's
        // own copy: it is changed in place rather than copied. What the
        // hooks compare of the old version is taken first.
        let pdbs = inner.pdbs_per_ns.contains_key(ns);
        let facts = |p: &Value| {
            let (labels, healthy, phase) = pdb_facts(p);
            (labels.cloned(), healthy, phase.to_string())
        };
        let before = pdbs.then(|| facts(&old.value));
        let mut v = match Arc::try_unwrap(old) {
            Ok(o) => o.value,
            Err(shared) => shared.value.clone(),
        };
        set_path(&mut v, &["spec", "nodeName"], json!(target));
        if let Some(ann) = &b.metadata.annotations {
            for (k, val) in ann {
                set_path(&mut v, &["metadata", "annotations", k.as_str()], json!(val));
            }
        }
        set_condition(&mut v, json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()}));
        let obj = self.commit(&mut inner, PODS, EventType::Modified, v, Some(stored))?;
        // As `after_pod_write` with the old version: it was not bound.
        self.notify(KubeletMsg::Bound { ns: ns.to_string(), name: name.to_string(), uid: obj.uid().to_string() });
        if before.is_some_and(|b| b != facts(&obj.value)) {
            self.sync_pdbs(&mut inner, ns, None);
        }
        Ok(())
    }

    /// POST pods/eviction: check PDBs, then delete gracefully.
    pub fn evict(&self, ns: &str, name: &str, body: Value) -> Result<()> {
        let mut b = body;
        res::check_type(&mut b, "policy/v1", "Eviction").map_err(|e| Error::BadRequest(e.to_string()))?;
        let ev: k8s_openapi::api::policy::v1::Eviction =
            serde_json::from_value(b).map_err(|e| Error::BadRequest(format!("invalid Eviction: {e}")))?;
        if let Some(en) = ev.metadata.name.as_deref()
            && !en.is_empty() && en != name {
                return Err(Error::BadRequest("name in URL does not match name in Eviction object".into()));
            }
        let mut opts = DeleteOpts::default();
        if let Some(d) = &ev.delete_options {
            opts.grace = d.grace_period_seconds;
            if let Some(p) = &d.preconditions {
                opts.uid = p.uid.clone();
                opts.rv = p.resource_version.clone();
            }
        }
        {
            let mut inner = self.lock();
            let pod = inner.kinds[PODS].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full).ok_or_else(|| not_found(&RESOURCES[PODS], name))?;
            let terminal = matches!(get_str(&pod.value, "/status/phase"), "Succeeded" | "Failed");
            let deleting = pod.value.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null());
            if !terminal && !deleting {
                self.sync_pdbs(&mut inner, ns, None);
                let labels = pod.value.at("/metadata/labels");
                let matching: Vec<Arc<Obj>> = inner.kinds[PDBS]
                    .range_ns(Some(ns))
                    .map(|(_, o)| o.clone())
                    .filter(|pdb| {
                        pdb.value
                            .at("/spec/selector")
                            .map(LabelSelector::from_structured)
                            .is_some_and(|s| s.is_ok_and(|s| s.matches_labels(labels)))
                    })
                    .collect();
                if matching.len() > 1 {
                    return Err(Error::Internal(
                        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
                    ));
                }
                if let Some(pdb) = matching.first() {
                    let st = |f: &str| pdb.value.at(&format!("/status/{f}")).and_then(Value::as_i64).unwrap_or(0);
                    let allowed = if res::pod_healthy(&pod.value) {
                        st("disruptionsAllowed") > 0
                    } else {
                        st("currentHealthy") >= st("desiredHealthy")
                    };
                    if !allowed {
                        return Err(Error::TooManyRequests {
                            message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
                            causes: Some(json!([{
                                "reason": "DisruptionBudget",
                                "message": format!("The disruption budget {} needs {} healthy pods and has {} currently",
                                    pdb.name(), st("desiredHealthy"), st("currentHealthy")),
                            }])),
                        });
                    }
                }
            }
        }
        self.delete(PODS, ns, name, &opts).map(|_| ())
    }

    /// Modify a pod under the lock if it still has `uid`; `f` returns the
    /// new value or None to leave it. Used by the kubelets.
    pub fn modify_pod(&self, ns: &str, name: &str, uid: &str, f: impl FnOnce(&Value) -> Option<Value>) -> Result<Option<Arc<Obj>>> {
        let mut inner = self.lock();
        let Some(old) = inner.kinds[PODS].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full) else {
            return Ok(None);
        };
        if old.uid() != uid {
            return Ok(None);
        }
        let Some(new) = f(&old.value) else { return Ok(None) };
        let obj = self.commit(&mut inner, PODS, EventType::Modified, new, Some(old.clone()))?;
        self.after_pod_write(&mut inner, Some(&old.value), &obj.value);
        Ok(Some(obj))
    }

    /// The kubelet is done with a terminating pod (`uid`): it asks for
    /// its removal with no grace period left. Finalizers hold it, in a
    /// terminal phase (Succeeded: its containers stopped), until they are
    /// removed. Returns whether it is gone.
    pub fn finish_pod(&self, ns: &str, name: &str, uid: &str) -> Result<bool> {
        let mut inner = self.lock();
        let Some(old) = inner.kinds[PODS].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full) else {
            return Ok(false);
        };
        if old.uid() != uid {
            return Ok(false);
        }
        if !has_finalizers(PODS, &old.value) {
            self.remove_locked(&mut inner, PODS, &old)?;
            return Ok(true);
        }
        let mut v = old.value.clone();
        set_path(&mut v, &["metadata", "deletionGracePeriodSeconds"], json!(0));
        if !matches!(get_str(&v, "/status/phase"), "Succeeded" | "Failed") {
            set_path(&mut v, &["status", "phase"], json!("Succeeded"));
        }
        let obj = self.commit(&mut inner, PODS, EventType::Modified, v, Some(old.clone()))?;
        self.after_pod_write(&mut inner, Some(&old.value), &obj.value);
        Ok(false)
    }

    /// PodGC's orphan collection for pod `uid`, bound to a node that no
    /// longer exists: a pod not yet terminal goes Failed with the
    /// DisruptionTarget condition (DeletionByPodGC), then it is deleted
    /// with no grace period. Returns whether it was collected.
    pub fn gc_orphan_pod(&self, ns: &str, name: &str, uid: &str) -> Result<bool> {
        let mut inner = self.lock();
        let Some(mut pod) = inner.kinds[PODS].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full) else {
            return Ok(false);
        };
        let node = get_str(&pod.value, "/spec/nodeName").to_string();
        if pod.uid() != uid || node.is_empty() || inner.kinds[res::NODES].objects.contains_key(&(String::new(), node)) {
            return Ok(false);
        }
        if !matches!(get_str(&pod.value, "/status/phase"), "Succeeded" | "Failed") {
            let mut v = pod.value.clone();
            set_path(&mut v, &["status", "phase"], json!("Failed"));
            set_condition(&mut v, json!({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                "message": "PodGC: node no longer exists", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()}));
            let obj = self.commit(&mut inner, PODS, EventType::Modified, v, Some(pod.clone()))?;
            self.after_pod_write(&mut inner, Some(&pod.value), &obj.value);
            pod = obj;
        }
        self.delete_pod_locked(&mut inner, pod, Some(0))?;
        Ok(true)
    }

    /// Modify any object under the lock if it still exists (and has `uid`
    /// when given); `f` returns the new value or None to leave it. The
    /// write follows the update rules (finalizers, hooks). Used by the
    /// simulated controllers.
    pub fn modify(&self, r: ResId, ns: &str, name: &str, uid: Option<&str>, f: impl FnOnce(&Value) -> Option<Value>) -> Result<Option<Arc<Obj>>> {
        let mut inner = self.lock();
        let Some(old) = inner.kinds[r].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full) else {
            return Ok(None);
        };
        if uid.is_some_and(|u| u != old.uid()) {
            return Ok(None);
        }
        let Some(mut new) = f(&old.value) else { return Ok(None) };
        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), json!(old.rv.to_string()));
        }
        if new == old.value {
            return Ok(Some(old));
        }
        self.commit_update(&mut inner, r, old, new).map(Some)
    }

    /// Remove a terminating pod now if it still has `uid`.
    pub fn remove_pod(&self, ns: &str, name: &str, uid: &str) -> Result<bool> {
        let mut inner = self.lock();
        let Some(old) = inner.kinds[PODS].objects.get(&(ns.to_string(), name.to_string())).map(Obj::full) else {
            return Ok(false);
        };
        if old.uid() != uid {
            return Ok(false);
        }
        self.commit(&mut inner, PODS, EventType::Deleted, old.value.clone(), None)?;
        if inner.pdbs_per_ns.contains_key(ns) {
            self.sync_pdbs(&mut inner, ns, None);
        }
        Ok(true)
    }

    /// POST serviceaccounts/<name>/token: issue a token for the account
    /// (TokenRequest: `spec.expirationSeconds`, default 3600 and at least
    /// 600; `spec.audiences`). Returns the TokenRequest with its status.
    pub fn request_token(&self, ns: &str, name: &str, body: Value) -> Result<Value> {
        let mut b = body;
        res::check_type(&mut b, "authentication.k8s.io/v1", "TokenRequest").map_err(|e| Error::BadRequest(e.to_string()))?;
        let req: k8s_openapi::api::authentication::v1::TokenRequest =
            serde_json::from_value(b).map_err(|e| Error::BadRequest(format!("invalid TokenRequest: {e}")))?;
        let sa = self.get(res::SERVICE_ACCOUNTS, ns, name)?;
        let req_spec = req.spec.unwrap_or_default();
        let seconds = req_spec.expiration_seconds.unwrap_or(3600);
        if seconds < 600 {
            return Err(Error::Invalid {
                kind: "TokenRequest.authentication.k8s.io".into(),
                name: name.into(),
                message: "spec.expirationSeconds: Invalid value: ".to_string() + &seconds.to_string() + ": may not specify a duration less than 10 minutes",
            });
        }
        let expires = chrono::Utc::now() + chrono::Duration::seconds(seconds);
        let token = format!("berth-sa.{}{}", new_uid().replace('-', ""), new_uid().replace('-', ""));
        let issued = IssuedToken { namespace: ns.into(), name: name.into(), uid: sa.uid().into(), audiences: req_spec.audiences.clone().unwrap_or_default(), expires };
        let mut tokens = match self.tokens.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let now = chrono::Utc::now();
        tokens.retain(|_, t| t.expires > now);
        tokens.insert(token.clone(), issued);
        let mut spec = serde_json::to_value(&req_spec).map_err(|e| Error::Internal(e.to_string()))?;
        set_path(&mut spec, &["expirationSeconds"], json!(seconds));
        Ok(json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": now_rfc3339()},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)},
        }))
    }

    /// The user a token issued by [`Store::request_token`] authenticates,
    /// if it is known, unexpired and its account still exists.
    pub fn review_token(&self, token: &str) -> Option<TokenUser> {
        let t = {
            let tokens = match self.tokens.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            tokens.get(token).cloned()?
        };
        if t.expires <= chrono::Utc::now() {
            return None;
        }
        let sa = self.get(res::SERVICE_ACCOUNTS, &t.namespace, &t.name).ok()?;
        if sa.uid() != t.uid || is_deleting(&sa.value) {
            return None;
        }
        Some(TokenUser {
            username: format!("system:serviceaccount:{}:{}", t.namespace, t.name),
            uid: t.uid,
            groups: vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{}", t.namespace), "system:authenticated".into()],
            audiences: t.audiences,
        })
    }

    /// Live events of one resource, from now on (for in-process controllers).
    pub fn subscribe(&self, r: ResId) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.lock().kinds[r].subscribe()
    }

    /// Storage controllers run: new claims and volumes get their
    /// protection finalizers (which those controllers remove).
    pub fn enable_storage_protection(&self) {
        self.storage_protection.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Start a watch.
    pub fn watch(&self, r: ResId, start: WatchStart) -> Result<WatchSub> {
        let mut inner = self.lock();
        let rx = inner.kinds[r].subscribe();
        let ks = &inner.kinds[r];
        match start {
            WatchStart::Now => Ok(WatchSub { initial: ks.objects.values().cloned().collect(), rv: inner.rv, backlog: Vec::new(), rx }),
            WatchStart::After(n) => {
                if n < ks.compacted_rv {
                    return Err(Error::Gone(format!("too old resource version: {n} ({})", ks.compacted_rv)));
                }
                let from = ks.history.partition_point(|e| e.rv <= n);
                let backlog = ks.history.range(from..).cloned().collect();
                Ok(WatchSub { initial: Vec::new(), rv: inner.rv, backlog, rx })
            }
        }
    }

    /// Drop all retained history so that watch resumes from any older
    /// resourceVersion answer 410 Gone.
    pub fn compact(&self) {
        let mut inner = self.lock();
        let rv = inner.rv;
        for ks in &mut inner.kinds {
            ks.history.clear();
            ks.compacted_rv = rv;
        }
    }

    /// Send a BOOKMARK at the current resourceVersion to every watched resource.
    pub fn bookmark_tick(&self) {
        let inner = self.lock();
        let rv = inner.rv;
        for (r, ks) in inner.kinds.iter().enumerate() {
            if ks.tx.as_ref().is_none_or(|tx| tx.receiver_count() == 0) {
                continue;
            }
            let info = self.info(r);
            let v = json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": {"resourceVersion": rv.to_string()}});
            if let Ok(obj) = Obj::new(v, rv) {
                ks.send(Arc::new(WatchEvent { ty: EventType::Bookmark, rv, obj, old: None }));
            }
        }
    }

    /// Create a typed object directly (tests, setup). Namespaced objects
    /// without a namespace go to "default".
    pub fn create_typed<K>(&self, obj: &K) -> Result<K>
    where
        K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> + Serialize + DeserializeOwned,
    {
        let r = typed_id::<K>()?;
        let ns = if RESOURCES[r].namespaced { obj.metadata().namespace.clone().unwrap_or_else(|| "default".into()) } else { String::new() };
        let mut v = serde_json::to_value(obj).map_err(|e| Error::Internal(e.to_string()))?;
        if r == res::EVENTS {
            super::eventview::to_stored(&mut v);
        }
        let created = self.create(self.registry.storage(r), &ns, v)?;
        shown(r, &created)
    }

    /// Get a typed object directly.
    pub fn get_typed<K: k8s_openapi::Resource + DeserializeOwned>(&self, ns: &str, name: &str) -> Result<K> {
        let r = typed_id::<K>()?;
        shown(r, &*self.get(self.registry.storage(r), ns, name)?)
    }

    /// List typed objects directly (all namespaces when `ns` is None).
    pub fn list_typed<K: k8s_openapi::Resource + DeserializeOwned>(&self, ns: Option<&str>) -> Result<Vec<K>> {
        let r = typed_id::<K>()?;
        let f = Filter { namespace: ns.map(str::to_string), ..Default::default() };
        self.list(self.registry.storage(r), &f, None, None)?.items.iter().map(|o| shown(r, o)).collect()
    }
}

/// The built-in resource of a k8s-openapi type.
fn typed_id<K: k8s_openapi::Resource>() -> Result<ResId> {
    res::lookup_type::<K>().ok_or_else(|| Error::BadRequest(format!("unsupported kind {}", K::KIND)))
}

/// A stored object as resource `r` shows it (a core/v1 Event is a view
/// of the stored events.k8s.io/v1 one).
fn shown<K: DeserializeOwned>(r: ResId, o: &Obj) -> Result<K> {
    if r != res::EVENTS {
        return o.decode();
    }
    let mut v: Value = o.decode()?;
    super::eventview::to_core(&mut v);
    serde_json::from_value(v).map_err(|e| Error::Internal(e.to_string()))
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect();
    String::from_utf8(bytes?).ok()
}

fn encode_continue(rv: u64, key: &Key) -> String {
    hex(&format!("{rv}\u{0}{}\u{0}{}", key.0, key.1))
}

fn decode_continue(s: &str) -> Option<(u64, Key)> {
    let raw = unhex(s)?;
    let mut parts = raw.splitn(3, '\u{0}');
    let rv = parts.next()?.parse().ok()?;
    let ns = parts.next()?.to_string();
    let name = parts.next()?.to_string();
    Some((rv, (ns, name)))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn strategic_conditions_merge_by_type() {
        let mut t = json!({"status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]}});
        let p = json!({"status": {"conditions": [{"type": "B", "status": "True", "reason": "x"}, {"type": "C", "status": "True"}], "nominatedNodeName": "n1"}, "$setElementOrder/conditions": []});
        strategic_merge(&mut t, &p);
        assert_eq!(t["status"]["conditions"].as_array().map(Vec::len), Some(3));
        assert_eq!(t["status"]["conditions"][1]["reason"], "x");
        assert_eq!(t["status"]["nominatedNodeName"], "n1");
        let p = json!({"status": {"conditions": [{"type": "A", "$patch": "delete"}], "nominatedNodeName": null}});
        strategic_merge(&mut t, &p);
        assert_eq!(t["status"]["conditions"].as_array().map(Vec::len), Some(2));
        assert!(t["status"].get("nominatedNodeName").is_none());
    }

    #[test]
    fn invalid_details_name_the_field() {
        let e = invalid(&RESOURCES[res::PRIORITY_CLASSES], "x", "value: Forbidden: too high");
        assert_eq!(e.to_string(), "PriorityClass.scheduling.k8s.io \"x\" is invalid: value: Forbidden: too high");
        let d = e.details().unwrap_or_default();
        assert_eq!(d["kind"], "PriorityClass");
        assert_eq!(d["group"], "scheduling.k8s.io");
        assert_eq!(d["causes"][0], json!({"reason": "FieldValueForbidden", "message": "Forbidden: too high", "field": "value"}));
    }

    /// Replaced and deleted versions stay in the history lean: replayed as
    /// their exact bytes, and selectors (labels, fields, the old version of
    /// a MODIFIED) still see each version as it was.
    #[test]
    fn history_keeps_past_versions_lean() {
        let store = Store::new(StoreConfig::default());
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"pool": "a"}}});
        let v1 = store.create(res::NODES, "", node).unwrap_or_else(|e| panic!("{e}"));
        let from = v1.rv - 1;
        let patch = br#"{"metadata": {"labels": {"pool": "b"}}, "spec": {"unschedulable": true}}"#;
        let v2 = store.patch(res::NODES, "", "n1", PatchType::Merge, patch, false).unwrap_or_else(|e| panic!("{e}"));
        store.delete(res::NODES, "", "n1", &DeleteOpts::default()).unwrap_or_else(|e| panic!("{e}"));
        let sub = store.watch(res::NODES, WatchStart::After(from)).unwrap_or_else(|e| panic!("{e}"));
        let evs: Vec<_> = sub.backlog.iter().filter(|e| e.obj.name() == "n1").collect();
        assert_eq!(evs.iter().map(|e| e.ty).collect::<Vec<_>>(), [EventType::Added, EventType::Modified, EventType::Deleted]);
        assert!(evs.iter().all(|e| e.obj.is_lean() && e.obj.value.is_null()));
        assert_eq!(evs[0].obj.bytes, v1.bytes);
        assert_eq!(evs[1].obj.bytes, v2.bytes);
        assert_eq!(evs[1].obj.full().value["spec"]["unschedulable"], true);
        let filter = |labels: &str, fields: &str| Filter {
            namespace: None,
            labels: LabelSelector::parse(labels).unwrap_or_else(|e| panic!("{e}")),
            fields: super::super::selector::FieldSelector::parse(fields, &["spec.unschedulable"]).unwrap_or_else(|e| panic!("{e}")),
        };
        let a = filter("pool=a", "");
        assert!(evs[0].obj.matches(&a) && !evs[1].obj.matches(&a));
        assert!(evs[1].old.as_ref().is_some_and(|o| o.is_lean() && o.matches(&a)));
        let cordoned = filter("pool in (b)", "spec.unschedulable=true,metadata.name=n1");
        assert!(!evs[0].obj.matches(&cordoned) && evs[1].obj.matches(&cordoned) && evs[2].obj.matches(&cordoned));
        assert_eq!((evs[2].obj.name(), evs[2].obj.uid()), ("n1", v1.uid()));
    }

    /// Pods and events are kept lean while current: every read gives the
    /// whole object back, selectors and watchers see it as it is, and the
    /// controllers still find a pod's controller.
    #[test]
    fn pods_and_events_are_kept_lean_and_read_whole() {
        let store = Store::new(StoreConfig::default());
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        store.create(res::NAMESPACES, "", ns).unwrap_or_else(|e| panic!("{e}"));
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "a"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-1", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let ctx = WriteCtx::new("tester", "v1");
        let created = store.create_with(PODS, "ns", pod, &ctx).unwrap_or_else(|e| panic!("{e}"));
        assert!(!created.is_lean(), "the writer gets the whole object");
        let rx_from = created.rv;
        let mut rx = store.subscribe(PODS);
        {
            let inner = store.lock();
            let stored = inner.kinds[PODS].objects.get(&("ns".to_string(), "p".to_string())).cloned();
            assert!(stored.is_some_and(|o| o.is_lean() && o.value.is_null() && o.bytes == created.bytes));
        }
        let got = store.get(PODS, "ns", "p").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.value, created.value);
        assert!(got.value.at("/metadata/managedFields").is_some_and(Value::is_string));
        store.bind("ns", "p", json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "n1"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        let bound = store.get(PODS, "ns", "p").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bound.value["spec"]["nodeName"], "n1");
        assert_eq!(bound.value["metadata"]["labels"], json!({"app": "a"}));
        assert_eq!(bound.value["metadata"]["managedFields"], created.value["metadata"]["managedFields"]);
        // The live event is lean, and selectors read it as the bound pod.
        let ev = rx.try_recv().unwrap_or_else(|e| panic!("{e}"));
        assert!(ev.obj.is_lean() && ev.rv > rx_from);
        assert_eq!(ev.obj.controller_uid(), Some("u-1"));
        assert_eq!(created.controller_uid(), Some("u-1"));
        let filter = |labels: &str, fields: &str| Filter {
            namespace: Some("ns".into()),
            labels: LabelSelector::parse(labels).unwrap_or_else(|e| panic!("{e}")),
            fields: super::super::selector::FieldSelector::parse(fields, RESOURCES[PODS].fields).unwrap_or_else(|e| panic!("{e}")),
        };
        assert!(ev.obj.matches(&filter("app=a", "spec.nodeName=n1")));
        assert!(!ev.obj.matches(&filter("app=a", "spec.nodeName=n2")));
        assert!(ev.old.as_ref().is_some_and(|o| o.matches(&filter("", "spec.nodeName="))));
        let listed = store.list(PODS, &filter("app=a", "spec.nodeName=n1"), None, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(listed.items.len(), 1);
        assert_eq!(listed.items[0].value, bound.value);
        assert!(store.list(PODS, &filter("app=b", ""), None, None).is_ok_and(|l| l.items.is_empty()));
        // For a reader of the bytes, the items as stored.
        let raw = store.list_bytes(PODS, &filter("app=a", ""), None, None).unwrap_or_else(|e| panic!("{e}"));
        assert!(raw.items.len() == 1 && raw.items[0].is_lean() && raw.items[0].bytes == bound.bytes);
        // An events.k8s.io Event: lean, whole when read, and selectors read
        // the fields of both views (`source` falls back to the reporting
        // controller).
        let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "p.1"}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "regarding": {"kind": "Pod", "namespace": "ns", "name": "p", "uid": "u-p"}, "reason": "Scheduled", "type": "Normal", "action": "Binding",
            "reportingController": "berth", "reportingInstance": "berth-1", "note": "bound"});
        let created = store.create(res::EVENTS_V1, "ns", ev).unwrap_or_else(|e| panic!("{e}"));
        {
            let inner = store.lock();
            let stored = inner.kinds[res::EVENTS_V1].objects.get(&("ns".to_string(), "p.1".to_string())).cloned();
            assert!(stored.is_some_and(|o| o.is_lean() && o.bytes == created.bytes));
            assert!(inner.kinds[res::EVENTS].objects.is_empty(), "core/v1 Events are a view, not a copy");
        }
        let got = store.get(res::EVENTS_V1, "ns", "p.1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.value["regarding"]["name"], "p");
        let events = |fields: &str| {
            let fields = super::super::selector::FieldSelector::parse(fields, super::super::resources::EVENTS_SELECTABLE).unwrap_or_else(|e| panic!("{e}"));
            store.list(res::EVENTS_V1, &Filter { namespace: None, labels: LabelSelector::default(), fields }, None, None).map(|l| l.items.len()).unwrap_or(0)
        };
        assert_eq!(events("reason=Scheduled,regarding.uid=u-p,source=berth,reportingController=berth"), 1);
        assert_eq!(events("source=kubelet"), 0);
        assert_eq!(events("regarding.name!=p"), 0);
        // Deleting reads the whole pod (a graceful delete of a bound pod).
        let gone = store.delete(PODS, "ns", "p", &DeleteOpts { grace: Some(0), ..Default::default() }).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gone.value["spec"]["nodeName"], "n1");
    }

    /// A binding takes the pod's whole value from the recent ones when it
    /// is there and reads it back from the bytes when it is not: the same
    /// pod either way.
    #[test]
    fn a_bind_from_the_recent_values_writes_what_a_bind_from_the_bytes_writes() {
        let store = Store::new(StoreConfig::default());
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        store.create(res::NAMESPACES, "", ns).unwrap_or_else(|e| panic!("{e}"));
        let pod = |name: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]}});
        let binding = |name: &str| json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"name": "n1"}});
        // The first is forgotten by the time it is bound; the last is not.
        let n = RECENT_PODS + 1;
        for i in 0..n {
            store.create(PODS, "ns", pod(&format!("p{i}"))).unwrap_or_else(|e| panic!("{e}"));
        }
        let last = format!("p{}", n - 1);
        assert_eq!(store.lock().recent_pods.by_rv.len(), RECENT_PODS);
        for name in ["p0", last.as_str()] {
            store.bind("ns", name, binding(name)).unwrap_or_else(|e| panic!("{e}"));
        }
        // Taken by the bind that used it; the bound version is recent now.
        let bound = |name: &str| store.get(PODS, "ns", name).unwrap_or_else(|e| panic!("{e}"));
        let (first, second) = (bound("p0"), bound(&last));
        assert_eq!(store.lock().recent_pods.by_rv.get(&second.rv).map(|o| o.value.clone()), Some(second.value.clone()));
        let strip = |o: &Obj| {
            let mut v = o.value.clone();
            for f in ["name", "uid", "resourceVersion", "creationTimestamp"] {
                v["metadata"].as_object_mut().map(|m| m.remove(f));
            }
            v["status"]["conditions"][0].as_object_mut().map(|c| c.remove("lastTransitionTime"));
            v["metadata"]["managedFields"] = Value::Null;
            v
        };
        assert_eq!(strip(&first), strip(&second));
        assert_eq!(second.value["spec"]["nodeName"], "n1");
    }

    /// A lean copy answers every accessor as the object it stands for,
    /// and a superseded version in the history reads back equal to the
    /// object as it was committed.
    #[test]
    fn lean_copies_read_back_as_committed() {
        let store = Store::new(StoreConfig::default());
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        store.create(res::NAMESPACES, "", ns).unwrap_or_else(|e| panic!("{e}"));
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "a", "empty": "", "tier": "web"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ReplicaSet", "name": "o", "uid": "u-0", "controller": false},
                                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-1", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "i"}], "serviceAccountName": "sa", "nodeName": "n1"}});
        let created = store.create(PODS, "ns", pod).unwrap_or_else(|e| panic!("{e}"));
        let lean = created.lean(RESOURCES[PODS].fields);
        assert!(lean.is_lean() && lean.value.is_null());
        assert_eq!((lean.namespace(), lean.name(), lean.uid()), (created.namespace(), created.name(), created.uid()));
        assert_eq!(lean.controller_uid(), Some("u-1"));
        for f in RESOURCES[PODS].fields.iter().chain(&["metadata.name", "metadata.namespace"]) {
            assert_eq!(lean.field(f), created.field(f), "{f}");
        }
        assert_eq!(lean.field("spec.nodeName"), "n1");
        assert_eq!(lean.field("spec.restartPolicy"), "Always");
        assert_eq!(lean.field("spec.notAField"), "");
        let labels = |sel: &str| Filter { namespace: Some("ns".into()), labels: LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{e}")), ..Default::default() };
        for (sel, want) in [("app=a", true), ("empty=", true), ("empty", true), ("tier=web", true), ("app!=a", false), ("missing", false), ("!missing", true)] {
            assert_eq!(lean.matches(&labels(sel)), want, "{sel}");
            assert_eq!(created.matches(&labels(sel)), want, "{sel}");
        }
        assert!(!lean.matches(&Filter { namespace: Some("other".into()), ..Default::default() }));
        // Without labels or a controller.
        let bare = Obj::new(json!({"metadata": {"name": "b"}}), 1).unwrap_or_else(|e| panic!("{e}")).lean(&[]);
        assert_eq!((bare.name(), bare.namespace(), bare.uid(), bare.controller_uid()), ("b", "", "", None));
        assert!(!bare.matches(&labels("!app")) && bare.matches(&Filter::default()));
        // The superseded first version, as the history keeps it.
        let patch = br#"{"metadata": {"labels": {"app": "b"}}}"#;
        store.patch(PODS, "ns", "p", PatchType::Merge, patch, false).unwrap_or_else(|e| panic!("{e}"));
        let sub = store.watch(PODS, WatchStart::After(created.rv - 1)).unwrap_or_else(|e| panic!("{e}"));
        let first = sub.backlog.iter().find(|e| e.rv == created.rv).map(|e| e.obj.clone());
        let first = first.unwrap_or_else(|| panic!("the first version is in the history"));
        assert!(first.is_lean());
        assert_eq!(first.bytes, created.bytes);
        assert_eq!(first.full().value, created.value);
        assert!(first.matches(&labels("app=a")) && !first.matches(&labels("app=b")));
        assert!(store.exists(PODS, "ns", "p") && !store.exists(PODS, "ns", "q") && !store.exists(PODS, "other", "p"));
        // Nodes are kept lean too, and read whole.
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "a"}}, "spec": {"unschedulable": true}});
        let n1 = store.create(res::NODES, "", node).unwrap_or_else(|e| panic!("{e}"));
        assert!(store.lock().kinds[res::NODES].objects.values().all(|o| o.is_lean() && o.bytes == n1.bytes));
        assert_eq!(store.get(res::NODES, "", "n1").map(|o| o.value.clone()).ok(), Some(n1.value.clone()));
        assert_eq!(store.list(res::NODES, &Filter::default(), None, None).map(|l| l.items[0].value.clone()).ok(), Some(n1.value.clone()));
        assert!(store.exists(res::NODES, "", "n1"));
    }

    #[test]
    fn pointers_of_dotted_fields() {
        assert!(is_pointer_of("/spec/nodeName", "spec.nodeName"));
        assert!(!is_pointer_of("/spec.nodeName", "spec.nodeName"));
        assert!(!is_pointer_of("spec/nodeName", "spec.nodeName"));
        assert!(!is_pointer_of("/spec/node", "spec.nodeName"));
        assert!(is_pointer_of("/a/b/c", "a.b.c"));
    }

    #[test]
    fn managed_fields_text_is_written_as_its_list() {
        let list = json!([{"manager": "m", "operation": "Update", "fieldsV1": {"f:data": {"f:a": {}}}}]);
        let stored = json!({"kind": "ConfigMap", "metadata": {"name": "c", "managedFields": list.to_string()}, "data": {"a": "x\"y"}});
        let bytes = wire_bytes(&stored).unwrap_or_default();
        let back: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        assert_eq!(back, json!({"kind": "ConfigMap", "metadata": {"name": "c", "managedFields": list}, "data": {"a": "x\"y"}}));
        // Text that is not JSON stays a string; only metadata's field is read.
        let odd = json!({"metadata": {"managedFields": "[oops"}, "spec": {"managedFields": "[]"}});
        let back: Value = serde_json::from_slice(&wire_bytes(&odd).unwrap_or_default()).unwrap_or_default();
        assert_eq!(back, odd);
    }

    #[test]
    fn continue_tokens_round_trip() {
        let k = ("ns".to_string(), "name".to_string());
        assert_eq!(decode_continue(&encode_continue(7, &k)), Some((7, k)));
        assert_eq!(decode_continue("zz"), None);
    }
}
