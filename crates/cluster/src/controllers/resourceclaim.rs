//! The resourceclaim controller (upstream `pkg/controller/resourceclaim`),
//! with the garbage collector's part for the claims it generates:
//!
//! - **Claims from templates.** For each entry of a pod's
//!   `spec.resourceClaims` that names a `resourceClaimTemplateName`, it
//!   creates a ResourceClaim from the template: `spec` is the template's
//!   `spec.spec`, labels and annotations are the template's
//!   `spec.metadata` ones plus [`POD_CLAIM_NAME`] (the entry's name), the
//!   pod is its controller (`{apiVersion: v1, kind: Pod, name, uid,
//!   controller: true, blockOwnerDeletion: true}`), and its name is
//!   generated from `<pod>-<entry>-` (both parts shortened in proportion
//!   when longer than 57 characters, as upstream does) plus 5 random
//!   characters. Then it records `pod.status.resourceClaimStatuses`
//!   (`{name, resourceClaimName}`). A claim the pod already controls for
//!   that entry is reused (a crash between the create and the status
//!   write leaves no second claim); one that is gone, or no longer
//!   controlled by the pod, is replaced. Pods being deleted get none. A
//!   pod whose template is missing is retried every resync and when a
//!   template appears.
//! - **Reservations of bound pods.** A bound pod whose claim is allocated
//!   but not reserved for it is added to the claim's `status.reservedFor`
//!   (`{resource: pods, name, uid}`), while it has fewer than
//!   [`RESERVED_FOR_MAX`] entries, as upstream does for pods bound
//!   without the scheduler's reservation.
//! - **Releasing claims.** A `reservedFor` entry of a pod that is gone,
//!   replaced (other uid), terminal (Succeeded/Failed) or deleted before
//!   it was bound is removed. When that leaves the claim reserved for
//!   nothing and the claim carries [`DELETE_PROTECTION`] (the finalizer
//!   the scheduler adds when it allocates), its `status.allocation` is
//!   cleared (deallocated) and the finalizer removed, in the same write;
//!   a claim being deleted that is reserved for nothing loses its
//!   allocation and the finalizer too.
//! - **Deleting generated claims.** A claim whose controlling pod is gone
//!   (or replaced) is deleted, as the garbage collector would; one whose
//!   pod is done and that is reserved for nothing is deleted at once, as
//!   upstream's controller does.
//!
//! Driven by pod, claim and template changes, with a resync of every
//! claim. It does nothing at all while the cluster has no ResourceClaim
//! and no ResourceClaimTemplate (pod events are not even read): a cluster
//! without DRA pays nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use crate::jsonptr::Pointer as _;
use crate::resources::{PODS, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES};
use crate::selector::Filter;
use crate::store::{self, DeleteOpts, EventType, Obj, Store, WatchEvent, controller_of};

/// The annotation of a generated claim naming the pod's
/// `spec.resourceClaims[].name` it was made for.
pub const POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";
/// The finalizer on a claim allocated by the scheduler: the claim may not
/// go while allocated, and this controller deallocates it once unused.
pub const DELETE_PROTECTION: &str = "resource.kubernetes.io/delete-protection";
/// Most entries of `status.reservedFor` (upstream
/// `ResourceClaimReservedForMaxSize`).
pub const RESERVED_FOR_MAX: usize = 256;
/// Longest `generateName` of a generated claim: 63 characters less the
/// hyphen and the 5 random ones (upstream's `maxBaseLen`).
const MAX_BASE_LEN: usize = 57;

/// Errors of one sync (logged; the object is retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pod's template does not exist (yet).
    #[error("resource claim template {template:?}: {source}")]
    Template {
        /// The template's name.
        template: String,
        /// The store's answer.
        #[source]
        source: store::Error,
    },
    /// A write failed.
    #[error("{what}: {source}")]
    Store {
        /// What was being written.
        what: String,
        /// The store's answer.
        #[source]
        source: store::Error,
    },
}

type Key = (String, String);

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.at(p).and_then(Value::as_str).unwrap_or("")
}

fn deleting(v: &Value) -> bool {
    v.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null())
}

/// Upstream's `isPodDone`: the pod will not run (again).
fn pod_done(pod: &Value) -> bool {
    matches!(s(pod, "/status/phase"), "Succeeded" | "Failed") || (deleting(pod) && s(pod, "/spec/nodeName").is_empty())
}

/// What the controller reads of a pod; the rest of it (containers,
/// volumes, managed fields) is skipped by the parser, never built.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct SlimPod {
    metadata: SlimMeta,
    spec: SlimSpec,
    status: SlimStatus,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct SlimMeta {
    name: Option<Value>,
    namespace: Option<Value>,
    uid: Option<Value>,
    deletion_timestamp: Option<Value>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct SlimSpec {
    resource_claims: Option<Value>,
    node_name: Option<Value>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct SlimStatus {
    phase: Option<Value>,
    resource_claim_statuses: Option<Value>,
}

impl SlimPod {
    fn into_value(self) -> Value {
        fn object<const N: usize>(fields: [(&str, Option<Value>); N]) -> Value {
            Value::Object(fields.into_iter().filter_map(|(k, v)| Some((k.to_string(), v?))).collect())
        }
        let m = self.metadata;
        object([
            ("metadata", Some(object([("name", m.name), ("namespace", m.namespace), ("uid", m.uid), ("deletionTimestamp", m.deletion_timestamp)]))),
            ("spec", Some(object([("resourceClaims", self.spec.resource_claims), ("nodeName", self.spec.node_name)]))),
            ("status", Some(object([("phase", self.status.phase), ("resourceClaimStatuses", self.status.resource_claim_statuses)]))),
        ])
    }
}

/// A stored pod with only what the controller reads of it (see
/// [`SlimPod`]): parsing a whole pod back from its bytes costs several
/// times more.
fn slim_pod(o: &Arc<Obj>) -> Arc<Obj> {
    if o.bytes.is_empty() {
        return o.clone();
    }
    match serde_json::from_slice::<SlimPod>(&o.bytes) {
        Ok(p) => Obj::from_value(p.into_value(), o.rv),
        Err(_) => o.full(),
    }
}

/// [`pod_done`] of a pod as stored, read without parsing it back: the
/// phase and node are kept beside a lean copy; only a pod that may be
/// deleted before it was bound is parsed.
fn stored_pod_done(o: &Arc<Obj>) -> bool {
    const NEEDLE: &[u8] = b"\"deletionTimestamp\"";
    if matches!(&*o.field("status.phase"), "Succeeded" | "Failed") {
        return true;
    }
    if !o.field("spec.nodeName").is_empty() || (o.is_lean() && !o.bytes.windows(NEEDLE.len()).any(|w| w == NEEDLE)) {
        return false;
    }
    pod_done(&slim_pod(o).value)
}

/// Does a stored pod have `spec.resourceClaims`? (Read from its bytes,
/// without parsing a lean copy.)
fn mentions_claims(o: &Obj) -> bool {
    const NEEDLE: &[u8] = b"\"resourceClaims\"";
    if o.bytes.is_empty() {
        return o.value.at("/spec/resourceClaims").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    }
    o.bytes.windows(NEEDLE.len()).any(|w| w == NEEDLE)
}

/// The pod's `spec.resourceClaims` entries.
fn pod_claims(pod: &Value) -> &[Value] {
    pod.at("/spec/resourceClaims").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// The status entry of a pod claim: Some(Some(claim)) when recorded,
/// Some(None) when recorded as not needed, None when not recorded.
fn status_entry<'a>(pod: &'a Value, pod_claim: &str) -> Option<Option<&'a str>> {
    pod.at("/status/resourceClaimStatuses")
        .and_then(Value::as_array)?
        .iter()
        .find(|e| s(e, "/name") == pod_claim)
        .map(|e| e.get("resourceClaimName").and_then(Value::as_str))
}

/// The claims a pod uses, by name: `resourceClaimName`s, and generated
/// claims recorded in its status (upstream `resourceclaim.Name`).
pub fn claim_names(pod: &Value) -> Vec<String> {
    pod_claims(pod)
        .iter()
        .filter_map(|c| match c.get("resourceClaimName").and_then(Value::as_str) {
            Some(n) => Some(n.to_string()),
            None if c.get("resourceClaimTemplateName").and_then(Value::as_str).is_some() => {
                status_entry(pod, s(c, "/name")).flatten().map(str::to_string)
            }
            None => None,
        })
        .collect()
}

/// Upstream's `IsForPod`: the claim is in the pod's namespace and the pod
/// is its controller.
pub fn is_for_pod(claim: &Value, pod: &Value) -> bool {
    s(claim, "/metadata/namespace") == s(pod, "/metadata/namespace") && controller_of(claim) == Some(s(pod, "/metadata/uid"))
}

/// Is the claim reserved for the pod (by uid)?
pub fn reserved_for(claim: &Value, pod_uid: &str) -> bool {
    claim.at("/status/reservedFor").and_then(Value::as_array).is_some_and(|r| r.iter().any(|e| s(e, "/uid") == pod_uid))
}

fn has_protection(claim: &Value) -> bool {
    claim.at("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| f.iter().any(|x| x.as_str() == Some(DELETE_PROTECTION)))
}

/// The `generateName` of a claim for pod claim `claim` of pod `pod`:
/// `<pod>-<claim>-`, or when longer than 57 characters both names cut
/// in proportion, joined by a hyphen (upstream's rule, which keeps part
/// of the claim's name whatever the pod's length).
pub fn generate_name(pod: &str, claim: &str) -> String {
    let base = format!("{pod}-{claim}-");
    let len = base.len();
    if len <= MAX_BASE_LEN {
        return base;
    }
    let cut = |x: &str| x.get(..x.len() * MAX_BASE_LEN / len).unwrap_or(x).to_string();
    format!("{}-{}", cut(pod), cut(claim))
}

/// The claim a template makes for a pod's claim `pod_claim`.
fn claim_from_template(template: &Value, pod: &Value, pod_claim: &str) -> Value {
    let mut annotations = template.at("/spec/metadata/annotations").filter(|a| a.is_object()).cloned().unwrap_or_else(|| json!({}));
    if let Some(a) = annotations.as_object_mut() {
        a.insert(POD_CLAIM_NAME.into(), json!(pod_claim));
    }
    let mut meta = json!({
        "generateName": generate_name(s(pod, "/metadata/name"), pod_claim),
        "namespace": s(pod, "/metadata/namespace"),
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": s(pod, "/metadata/name"), "uid": s(pod, "/metadata/uid"),
            "controller": true, "blockOwnerDeletion": true}],
        "annotations": annotations,
    });
    if let Some(labels) = template.at("/spec/metadata/labels").filter(|l| l.as_object().is_some_and(|m| !m.is_empty())) {
        meta["labels"] = labels.clone();
    }
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": template.at("/spec/spec").filter(|x| x.is_object()).cloned().unwrap_or_else(|| json!({})),
    })
}

/// The claims that have a controller, by its uid (kept from claim events;
/// rebuilt by a full sweep).
type Owned = HashMap<String, BTreeSet<Key>>;

/// Pods read in one pass, by key (None: not found): a pod read by several
/// syncs of a pass is parsed once. A version older than the store's within
/// the pass only delays a release (a pod does not come back from gone or
/// done); the pass's own writes to a pod drop it from here.
type Pods = HashMap<Key, Option<Arc<Obj>>>;

/// Most pods a pass keeps parsed.
const PASS_PODS: usize = 256;

/// What is left to do after the events seen so far.
#[derive(Default)]
struct Work {
    pods: BTreeSet<Key>,
    claims: BTreeSet<Key>,
    /// Namespace and uid of deleted pods: the claims they control go.
    gone: Vec<(String, String)>,
    /// Read every pod and claim again (start, lagged watch, first use).
    full: bool,
}

/// The controller's state: its subscriptions, the pods that use each
/// claim, and the pods to retry.
pub(super) struct Controller {
    store: Arc<Store>,
    pods: broadcast::Receiver<Arc<WatchEvent>>,
    claims: broadcast::Receiver<Arc<WatchEvent>>,
    templates: broadcast::Receiver<Arc<WatchEvent>>,
    /// (namespace, claim) -> names and uids of the pods that use it (kept
    /// from pod events: `spec.resourceClaims` does not change, the status
    /// only grows).
    users: HashMap<Key, HashMap<String, String>>,
    /// The claims each controller (a pod) has.
    owned: Owned,
    /// Pods whose last sync failed.
    retry: BTreeSet<Key>,
    /// Whether the cluster had claims or templates at the last look.
    in_use: bool,
}

impl Controller {
    /// Subscribe now (before the task runs), so nothing written right
    /// after the cluster starts is missed.
    pub(super) fn new(store: Arc<Store>) -> Self {
        let pods = store.subscribe(PODS);
        let claims = store.subscribe(RESOURCECLAIMS);
        let templates = store.subscribe(RESOURCECLAIMTEMPLATES);
        Self { store, pods, claims, templates, users: HashMap::new(), owned: Owned::new(), retry: BTreeSet::new(), in_use: false }
    }

    fn dra_in_use(&self) -> bool {
        self.store.count(RESOURCECLAIMS) > 0 || self.store.count(RESOURCECLAIMTEMPLATES) > 0
    }

    /// Run until `stop` changes or the store goes.
    pub(super) async fn run(mut self, resync: Duration, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(resync.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut work = Work { full: true, ..Default::default() };
        loop {
            let mut sweep = false;
            let open = tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => { sweep = true; true }
                ev = self.pods.recv() => self.on_pod(ev, &mut work),
                ev = self.claims.recv() => self.on_claim(ev, &mut work),
                ev = self.templates.recv() => self.on_template(ev, &mut work),
            };
            if !open {
                break;
            }
            // Coalesce a burst of changes into one pass.
            tokio::time::sleep(Duration::from_millis(5)).await;
            while let Ok(ev) = self.pods.try_recv() {
                self.on_pod(Ok(ev), &mut work);
            }
            while let Ok(ev) = self.claims.try_recv() {
                self.on_claim(Ok(ev), &mut work);
            }
            while let Ok(ev) = self.templates.try_recv() {
                self.on_template(Ok(ev), &mut work);
            }
            let in_use = self.dra_in_use();
            if !in_use {
                self.in_use = false;
                work = Work::default();
                continue;
            }
            if !self.in_use {
                // Pod events were skipped while nothing used DRA.
                self.in_use = true;
                work.full = true;
            }
            if sweep {
                work.pods.extend(self.retry.iter().cloned());
                for c in self.store.list_bytes(RESOURCECLAIMS, &Filter::default(), None, None).map(|l| l.items).unwrap_or_default() {
                    work.claims.insert((c.namespace().to_string(), c.name().to_string()));
                }
            }
            self.process(std::mem::take(&mut work));
        }
    }

    /// Note a pod event. False when the store is gone.
    fn on_pod(&mut self, ev: Result<Arc<WatchEvent>, broadcast::error::RecvError>, work: &mut Work) -> bool {
        let ev = match ev {
            Ok(ev) => ev,
            Err(broadcast::error::RecvError::Lagged(_)) => {
                work.full = true;
                return true;
            }
            Err(broadcast::error::RecvError::Closed) => return false,
        };
        if !self.in_use && !self.dra_in_use() {
            return true;
        }
        if !mentions_claims(&ev.obj) {
            return true;
        }
        let pod = slim_pod(&ev.obj);
        let key = (pod.namespace().to_string(), pod.name().to_string());
        let names = claim_names(&pod.value);
        if ev.ty == EventType::Deleted {
            for n in names {
                if let Some(u) = self.users.get_mut(&(key.0.clone(), n.clone())) {
                    u.remove(&key.1);
                }
                work.claims.insert((key.0.clone(), n));
            }
            work.gone.push((key.0.clone(), pod.uid().to_string()));
            self.retry.remove(&key);
            return true;
        }
        for n in names {
            self.users.entry((key.0.clone(), n)).or_default().insert(key.1.clone(), pod.uid().to_string());
        }
        work.pods.insert(key);
        true
    }

    /// Note a claim event. False when the store is gone.
    fn on_claim(&mut self, ev: Result<Arc<WatchEvent>, broadcast::error::RecvError>, work: &mut Work) -> bool {
        match ev {
            Ok(ev) => {
                let key = (ev.obj.namespace().to_string(), ev.obj.name().to_string());
                if ev.ty == EventType::Deleted {
                    if let Some(uid) = ev.obj.controller_uid()
                        && let Some(set) = self.owned.get_mut(uid)
                    {
                        set.remove(&key);
                        if set.is_empty() {
                            self.owned.remove(uid);
                        }
                    }
                    return true;
                }
                if let Some(uid) = ev.obj.controller_uid() {
                    self.owned.entry(uid.to_string()).or_default().insert(key.clone());
                }
                // Bound pods using it may need a reservation: those it is
                // allocated for and not reserved for (the rest of what a pod
                // sync does follows the pod's own events).
                let claim = &ev.obj.value;
                if claim.at("/status/allocation").is_some_and(|a| !a.is_null()) {
                    for (p, uid) in self.users.get(&key).into_iter().flatten() {
                        if !reserved_for(claim, uid) {
                            work.pods.insert((key.0.clone(), p.clone()));
                        }
                    }
                }
                work.claims.insert(key);
                true
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                work.full = true;
                true
            }
            Err(broadcast::error::RecvError::Closed) => false,
        }
    }

    /// Note a template event: pods waiting for a template are retried.
    fn on_template(&mut self, ev: Result<Arc<WatchEvent>, broadcast::error::RecvError>, work: &mut Work) -> bool {
        match ev {
            Ok(ev) if ev.ty == EventType::Added => {
                work.pods.extend(self.retry.iter().filter(|(ns, _)| ns == ev.obj.namespace()).cloned());
                true
            }
            Ok(_) => true,
            Err(broadcast::error::RecvError::Lagged(_)) => {
                work.full = true;
                true
            }
            Err(broadcast::error::RecvError::Closed) => false,
        }
    }

    /// Every pod that uses claims, and every claim.
    fn full_sweep(&mut self, work: &mut Work) {
        self.users.clear();
        self.owned.clear();
        for o in self.store.list_bytes(PODS, &Filter::default(), None, None).map(|l| l.items).unwrap_or_default() {
            if !mentions_claims(&o) {
                continue;
            }
            let pod = slim_pod(&o);
            for n in claim_names(&pod.value) {
                self.users.entry((pod.namespace().to_string(), n)).or_default().insert(pod.name().to_string(), pod.uid().to_string());
            }
            work.pods.insert((pod.namespace().to_string(), pod.name().to_string()));
        }
        for c in self.store.list_bytes(RESOURCECLAIMS, &Filter::default(), None, None).map(|l| l.items).unwrap_or_default() {
            let key = (c.namespace().to_string(), c.name().to_string());
            if let Some(uid) = c.controller_uid() {
                self.owned.entry(uid.to_string()).or_default().insert(key.clone());
            }
            work.claims.insert(key);
        }
    }

    fn process(&mut self, mut work: Work) {
        if work.full {
            self.full_sweep(&mut work);
        }
        for (ns, uid) in &work.gone {
            for key in self.owned.get(uid).into_iter().flatten().filter(|k| &k.0 == ns) {
                work.claims.insert(key.clone());
            }
        }
        let mut pods = Pods::new();
        for key in &work.pods {
            match self.sync_pod(key, &mut pods, &mut work.claims) {
                Ok(()) => {
                    self.retry.remove(key);
                }
                Err(e) => {
                    tracing::debug!(pod = %format!("{}/{}", key.0, key.1), error = %e, "resourceclaim controller: pod sync failed");
                    self.retry.insert(key.clone());
                }
            }
        }
        for key in &work.claims {
            if let Err(e) = self.sync_claim(key) {
                tracing::debug!(claim = %format!("{}/{}", key.0, key.1), error = %e, "resourceclaim controller: claim sync failed");
            }
        }
    }

    /// The pod `ns/name`, read once per pass (see [`Pods`]). At most
    /// [`PASS_PODS`] parsed pods are held at once (a full sweep reads
    /// every pod).
    fn pod(&self, pods: &mut Pods, ns: &str, name: &str) -> Option<Arc<Obj>> {
        if pods.len() >= PASS_PODS {
            pods.clear();
        }
        pods.entry((ns.to_string(), name.to_string())).or_insert_with(|| self.store.get_stored(PODS, ns, name).ok().map(|o| slim_pod(&o))).clone()
    }

    /// Claims from templates, the pod's status, reservations of a bound
    /// pod; the claims of a pod that is done are released.
    fn sync_pod(&mut self, key: &Key, pods: &mut Pods, claims: &mut BTreeSet<Key>) -> Result<(), Error> {
        let Some(pod) = self.pod(pods, &key.0, &key.1) else { return Ok(()) };
        let pod = &pod.value;
        let (ns, uid) = (key.0.as_str(), s(pod, "/metadata/uid"));
        if pod_done(pod) {
            claims.extend(claim_names(pod).into_iter().map(|n| (key.0.clone(), n)));
            return Ok(());
        }
        if deleting(pod) {
            return Ok(());
        }
        let mut recorded: Vec<(String, String)> = Vec::new();
        let mut first_error = None;
        for pc in pod_claims(pod) {
            let (name, Some(template)) = (s(pc, "/name"), pc.get("resourceClaimTemplateName").and_then(Value::as_str)) else { continue };
            let mine = |c: &Value| is_for_pod(c, pod);
            // Recorded and still the pod's: nothing to do.
            if let Some(Some(claim)) = status_entry(pod, name)
                && self.store.get(RESOURCECLAIMS, ns, claim).is_ok_and(|c| mine(&c.value))
            {
                continue;
            }
            // Made before, not recorded (or recorded and since lost).
            let found = self.owned.get(uid).into_iter().flatten().filter(|k| k.0 == ns).filter_map(|k| self.store.get(RESOURCECLAIMS, &k.0, &k.1).ok()).find(|c| {
                mine(&c.value)
                    && !deleting(&c.value)
                    && match c.value.at("/metadata/annotations").and_then(|a| a.get(POD_CLAIM_NAME)).and_then(Value::as_str) {
                        Some(n) => n == name,
                        None => c.name() == format!("{}-{name}", key.1),
                    }
            });
            if let Some(c) = found {
                recorded.push((name.to_string(), c.name().to_string()));
                continue;
            }
            let t = match self.store.get(RESOURCECLAIMTEMPLATES, ns, template) {
                Ok(t) => t,
                Err(source) => {
                    first_error.get_or_insert(Error::Template { template: template.to_string(), source });
                    continue;
                }
            };
            match self.store.create(RESOURCECLAIMS, ns, claim_from_template(&t.value, pod, name)) {
                Ok(c) => {
                    recorded.push((name.to_string(), c.name().to_string()));
                    self.owned.entry(uid.to_string()).or_default().insert((ns.to_string(), c.name().to_string()));
                }
                Err(source) => {
                    first_error.get_or_insert(Error::Store { what: format!("creating the claim {name} from template {template}"), source });
                }
            }
        }
        if !recorded.is_empty() {
            for (_, c) in &recorded {
                self.users.entry((key.0.clone(), c.clone())).or_default().insert(key.1.clone(), uid.to_string());
            }
            pods.remove(key);
            self.store
                .modify_pod(ns, &key.1, uid, |v| {
                    let mut p = v.clone();
                    let st = p.as_object_mut()?.entry("status").or_insert_with(|| json!({}));
                    let list = st.as_object_mut()?.entry("resourceClaimStatuses").or_insert_with(|| json!([]));
                    if !list.is_array() {
                        *list = json!([]);
                    }
                    let list = list.as_array_mut()?;
                    for (name, claim) in &recorded {
                        let entry = json!({"name": name, "resourceClaimName": claim});
                        match list.iter_mut().find(|e| s(e, "/name") == name) {
                            Some(e) => *e = entry,
                            None => list.push(entry),
                        }
                    }
                    Some(p)
                })
                .map_err(|source| Error::Store { what: "writing the pod's resourceClaimStatuses".into(), source })?;
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        if !s(pod, "/spec/nodeName").is_empty() {
            // Reread when the status was just written.
            let pod = match recorded.is_empty() {
                true => pod.clone(),
                false => match self.pod(pods, ns, &key.1) {
                    Some(p) => p.value.clone(),
                    None => return Ok(()),
                },
            };
            for claim in claim_names(&pod) {
                self.reserve(&pod, &claim)?;
            }
        }
        Ok(())
    }

    /// Reserve an allocated claim for a bound pod that uses it, if it can
    /// still be reserved.
    fn reserve(&self, pod: &Value, claim: &str) -> Result<(), Error> {
        let (ns, name, uid) = (s(pod, "/metadata/namespace"), s(pod, "/metadata/name"), s(pod, "/metadata/uid"));
        self.store
            .modify(RESOURCECLAIMS, ns, claim, None, |c| {
                let count = c.at("/status/reservedFor").and_then(Value::as_array).map_or(0, Vec::len);
                if c.at("/status/allocation").is_none_or(Value::is_null) || reserved_for(c, uid) || count >= RESERVED_FOR_MAX {
                    return None;
                }
                let mut n = c.clone();
                let st = n.as_object_mut()?.entry("status").or_insert_with(|| json!({}));
                let list = st.as_object_mut()?.entry("reservedFor").or_insert_with(|| json!([]));
                if !list.is_array() {
                    *list = json!([]);
                }
                list.as_array_mut()?.push(json!({"resource": "pods", "name": name, "uid": uid}));
                Some(n)
            })
            .map(|_| ())
            .map_err(|source| Error::Store { what: format!("reserving claim {claim} for the pod"), source })
    }

    /// Drop stale reservations, deallocate and unprotect an unused claim,
    /// delete a generated claim whose pod is gone or done.
    fn sync_claim(&self, key: &Key) -> Result<(), Error> {
        let Ok(claim) = self.store.get(RESOURCECLAIMS, &key.0, &key.1) else { return Ok(()) };
        let c = &claim.value;
        let reserved: &[Value] = c.at("/status/reservedFor").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let keep = |e: &Value| {
            if !s(e, "/apiGroup").is_empty() || s(e, "/resource") != "pods" {
                // Only pods are known consumers; others stay.
                return true;
            }
            // On the store's word (as stored: not parsed), not the pass's copy.
            self.store.get_stored(PODS, &key.0, s(e, "/name")).is_ok_and(|p| p.uid() == s(e, "/uid") && !stored_pod_done(&p))
        };
        let valid: Vec<Value> = reserved.iter().filter(|e| keep(e)).cloned().collect();
        let protected = has_protection(c);
        let allocated = c.at("/status/allocation").is_some_and(|a| !a.is_null());
        let release = valid.len() < reserved.len();
        // As upstream: the finalizer goes once the claim is deallocated
        // (by this release, or before it), or when a claim being deleted
        // is reserved for nothing.
        let unprotect = protected && ((release && (valid.is_empty() || !allocated)) || (deleting(c) && valid.is_empty()));
        if release || unprotect {
            self.store
                .modify(RESOURCECLAIMS, &key.0, &key.1, Some(claim.uid()), |v| {
                    let mut n = v.clone();
                    if let Some(st) = n.get_mut("status").and_then(Value::as_object_mut) {
                        if valid.is_empty() {
                            st.remove("reservedFor");
                        } else {
                            st.insert("reservedFor".into(), Value::Array(valid.clone()));
                        }
                        if protected && valid.is_empty() {
                            // Allocated by the scheduler and unused: deallocate.
                            st.remove("allocation");
                        }
                    }
                    if unprotect && let Some(f) = n.at_mut("/metadata/finalizers").and_then(Value::as_array_mut) {
                        f.retain(|x| x.as_str() != Some(DELETE_PROTECTION));
                    }
                    Some(n)
                })
                .map_err(|source| Error::Store { what: "releasing the claim".into(), source })?;
            tracing::debug!(claim = %format!("{}/{}", key.0, key.1), released = reserved.len() - valid.len(), deallocated = allocated && protected && valid.is_empty(), "claim released");
        }
        // A generated claim goes with its pod.
        let Some(owner) = c
            .at("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| refs.iter().find(|r| r.get("controller").and_then(Value::as_bool) == Some(true)))
            .filter(|r| s(r, "/kind") == "Pod" && s(r, "/apiVersion") == "v1")
        else {
            return Ok(());
        };
        let pod = self.store.get_stored(PODS, &key.0, s(owner, "/name")).ok();
        let gone = pod.as_ref().is_none_or(|p| p.uid() != s(owner, "/uid"));
        let done = pod.as_ref().is_some_and(stored_pod_done);
        if (gone || (done && valid.is_empty())) && !deleting(c) {
            let opts = DeleteOpts { uid: Some(claim.uid().to_string()), ..Default::default() };
            match self.store.delete(RESOURCECLAIMS, &key.0, &key.1, &opts) {
                Ok(_) => tracing::debug!(claim = %format!("{}/{}", key.0, key.1), "generated claim deleted with its pod"),
                Err(e) if e.code() == 404 || e.code() == 409 => {}
                Err(source) => return Err(Error::Store { what: "deleting the generated claim".into(), source }),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slim_pod_reads_what_the_controller_reads_and_nothing_else() {
        let store = super::super::test_store();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i"}], "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]}});
        let stored = store.create(PODS, "default", pod).unwrap_or_else(|e| panic!("{e}"));
        let status = |f: fn(&mut Value)| {
            store
                .modify_pod("default", "p", stored.uid(), |v| {
                    let mut p = v.clone();
                    f(&mut p);
                    Some(p)
                })
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("the pod is there"))
        };
        status(|p| p["status"]["resourceClaimStatuses"] = json!([{"name": "gpu", "resourceClaimName": "p-gpu-x"}]));
        let o = store.get_stored(PODS, "default", "p").unwrap_or_else(|e| panic!("{e}"));
        let slim = slim_pod(&o);
        assert_eq!(slim.uid(), stored.uid());
        assert_eq!(claim_names(&slim.value), ["p-gpu-x"]);
        assert!(slim.value.at("/spec/containers").is_none() && slim.value.at("/metadata/labels").is_none());
        assert!(!stored_pod_done(&o));
        // Deleted before it was bound: done, read from the bytes.
        let deleting = status(|p| p["metadata"]["deletionTimestamp"] = json!("2026-11-28T00:00:00Z"));
        assert!(pod_done(&deleting.full().value));
        let o = store.get_stored(PODS, "default", "p").unwrap_or_else(|e| panic!("{e}"));
        assert!(stored_pod_done(&o));
    }

    #[test]
    fn generated_names_keep_both_parts_when_long() {
        assert_eq!(generate_name("my-pod", "gpu"), "my-pod-gpu-");
        let pod = "p".repeat(60);
        let name = generate_name(&pod, "accelerator");
        // 60 + 1 + 11 + 1 = 73 > 57: both cut in proportion (60*57/73 = 46, 11*57/73 = 8).
        assert_eq!(name, format!("{}-{}", "p".repeat(46), "accelera"));
        assert!(name.len() + 5 <= 63);
    }

    #[test]
    fn claim_from_template_copies_spec_and_metadata_and_names_the_pod() {
        let template = json!({"metadata": {"name": "t"}, "spec": {"metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}});
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}});
        let c = claim_from_template(&template, &pod, "gpu");
        assert_eq!(c["metadata"]["generateName"], "p-gpu-");
        assert_eq!(c["metadata"]["annotations"], json!({"x": "y", POD_CLAIM_NAME: "gpu"}));
        assert_eq!(c["metadata"]["labels"], json!({"a": "b"}));
        assert_eq!(c["metadata"]["ownerReferences"][0], json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1", "controller": true, "blockOwnerDeletion": true}));
        assert_eq!(c["spec"]["devices"]["requests"][0]["name"], "gpu");
        assert!(is_for_pod(&json!({"metadata": {"namespace": "ns", "ownerReferences": c["metadata"]["ownerReferences"]}}), &pod));
    }

    #[test]
    fn claim_names_come_from_the_spec_and_the_status() {
        let pod = json!({"spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "shared"}, {"name": "b", "resourceClaimTemplateName": "t"},
            {"name": "c", "resourceClaimTemplateName": "t"}]},
            "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-x2z4q"}, {"name": "c"}]}});
        assert_eq!(claim_names(&pod), ["shared", "p-b-x2z4q"]);
        assert!(pod_done(&json!({"status": {"phase": "Failed"}})));
        assert!(pod_done(&json!({"metadata": {"deletionTimestamp": "t"}, "spec": {}})));
        assert!(!pod_done(&json!({"metadata": {"deletionTimestamp": "t"}, "spec": {"nodeName": "n"}})));
    }
}
