//! Simulated kubelets: a single task with a timer heap serves every node.
//! Bound pods start Running after a delay, pods annotated
//! `berth.dev/complete-after` succeed that long after starting, and
//! terminating pods are removed once their grace period has passed.
//!
//! Dynamic resources (upstream `pkg/kubelet/cm/dra`, PrepareResources):
//! a pod with `spec.resourceClaims` starts only once each of its claims
//! exists (a generated one recorded in its status and controlled by it),
//! is reserved for it, is allocated, is allocated for this node (its
//! allocation's `nodeSelector` selects it) and names devices the node's
//! drivers publish ([`prepare_dynamic_resources`]). Until then it stays
//! Pending with its containers waiting in `ContainerCreating`, and gets a
//! Warning event `FailedPrepareDynamicResources` (`Failed to prepare
//! dynamic resources: <why>`, one per distinct reason); it is checked
//! again when a claim of its namespace changes and every second. A pod
//! without claims never reaches this check.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::jsonptr::Pointer as _;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::resources::{self as res, EVENTS_V1, NODES, RESOURCECLAIMS, RESOURCESLICES};
use super::admission::pods::gated_ready_condition;
use super::controllers::resourceclaim::{is_for_pod, reserved_for};
use super::selector::Filter;
use super::store::{self, KubeletMsg, Obj, Store, WatchEvent, now_rfc3339, set_condition};

/// How often the kubelet retries a pod whose volumes are not ready.
const VOLUME_RETRY: Duration = Duration::from_millis(500);
/// How often the kubelet retries a pod whose claims are not ready (it
/// also retries when a claim of the pod's namespace changes).
const DRA_RETRY: Duration = Duration::from_secs(1);

/// The reason of the Warning event of a pod whose claims are not ready
/// (upstream `events.FailedPrepareDynamicResources`).
pub const FAILED_PREPARE_DYNAMIC_RESOURCES: &str = "FailedPrepareDynamicResources";

/// Annotation asking the kubelet to complete a pod this long after it starts.
pub const COMPLETE_AFTER: &str = "berth.dev/complete-after";

/// Errors of the kubelet simulation (logged, never fatal).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A store write failed.
    #[error("kubelet store write failed: {0}")]
    Store(#[from] store::Error),
}

/// Kubelet tuning.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// Run the simulation at all.
    pub enabled: bool,
    /// Delay between binding and Running.
    pub start_delay: Duration,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        Self { enabled: true, start_delay: Duration::from_millis(100) }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Action {
    Start,
    Complete,
    Remove(Instant),
}

#[derive(Debug, PartialEq, Eq)]
struct Timer {
    when: Instant,
    seq: u64,
    ns: String,
    name: String,
    uid: String,
    action: Action,
}

impl Ord for Timer {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.when, self.seq).cmp(&(other.when, other.seq))
    }
}

impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A pod the kubelet refused to start for its claims: (uid, the reason
/// last reported). It has one Start timer pending (the retry).
struct Refused {
    uid: String,
    why: String,
}

struct Kubelets {
    store: Arc<Store>,
    cfg: KubeletConfig,
    heap: BinaryHeap<Reverse<Timer>>,
    seq: u64,
    next_ip: u32,
    /// Latest removal deadline per terminating pod (ns, name) -> (uid, when).
    terminating: HashMap<(String, String), (String, Instant)>,
    /// Pods waiting for their claims, by (ns, name).
    refused: HashMap<(String, String), Refused>,
}

/// Spawn the kubelet task. It stops when `stop` changes or its sender is dropped.
pub fn spawn(store: Arc<Store>, cfg: KubeletConfig, mut rx: mpsc::UnboundedReceiver<KubeletMsg>, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    let mut claims = store.subscribe(RESOURCECLAIMS);
    tokio::spawn(async move {
        let mut k = Kubelets { store, cfg, heap: BinaryHeap::new(), seq: 0, next_ip: 1, terminating: HashMap::new(), refused: HashMap::new() };
        loop {
            let next = k.heap.peek().map(|Reverse(t)| t.when);
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                _ = stop.changed() => break,
                m = rx.recv() => match m {
                    Some(m) => k.on_msg(m),
                    None => break,
                },
                ev = claims.recv() => match ev {
                    Ok(ev) => k.on_claim(Some(&ev)),
                    Err(broadcast::error::RecvError::Lagged(_)) => k.on_claim(None),
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = tokio::time::sleep_until(next.unwrap_or(far)), if next.is_some() => k.fire_due(),
            }
        }
    })
}

impl Kubelets {
    fn push(&mut self, when: Instant, ns: String, name: String, uid: String, action: Action) {
        self.seq += 1;
        self.heap.push(Reverse(Timer { when, seq: self.seq, ns, name, uid, action }));
    }

    fn on_msg(&mut self, m: KubeletMsg) {
        if !self.cfg.enabled {
            return;
        }
        match m {
            KubeletMsg::Bound { ns, name, uid } => {
                let when = Instant::now() + self.cfg.start_delay;
                self.push(when, ns, name, uid, Action::Start);
            }
            KubeletMsg::Terminate { ns, name, uid, deadline } => {
                self.refused.remove(&(ns.clone(), name.clone()));
                // The kubelet stops the containers at once: the pod turns NotReady.
                if let Err(e) = self.store.modify_pod(&ns, &name, &uid, |v| {
                    (v.at("/status/phase").and_then(Value::as_str) == Some("Running")).then(|| not_ready(v))
                }) {
                    tracing::warn!(error = %e, "kubelet could not mark a terminating pod NotReady");
                }
                let when = Instant::from_std(deadline);
                self.terminating.insert((ns.clone(), name.clone()), (uid.clone(), when));
                self.push(when, ns, name, uid, Action::Remove(when));
            }
        }
    }

    /// A claim changed (None: changes were missed): the pods of its
    /// namespace waiting for their claims are checked again at once (their
    /// retry timer stays).
    fn on_claim(&mut self, ev: Option<&WatchEvent>) {
        if !self.cfg.enabled || self.refused.is_empty() {
            return;
        }
        let ns = ev.map(|e| e.obj.namespace());
        let due: Vec<((String, String), String)> =
            self.refused.iter().filter(|((n, _), _)| ns.is_none_or(|ns| ns == n)).map(|(k, r)| (k.clone(), r.uid.clone())).collect();
        for ((ns, name), uid) in due {
            if let Err(e) = self.try_start(&ns, &name, &uid, false) {
                tracing::warn!(error = %e, "kubelet action failed");
            }
        }
    }

    fn fire_due(&mut self) {
        let now = Instant::now();
        let mut budget = 10_000;
        while let Some(Reverse(t)) = self.heap.peek() {
            if t.when > now || budget == 0 {
                break;
            }
            budget -= 1;
            let Some(Reverse(t)) = self.heap.pop() else { break };
            if let Err(e) = self.fire(t) {
                tracing::warn!(error = %e, "kubelet action failed");
            }
        }
    }

    fn fire(&mut self, t: Timer) -> Result<(), Error> {
        match t.action {
            Action::Start => self.start_pod(&t),
            Action::Complete => {
                self.store.modify_pod(&t.ns, &t.name, &t.uid, |v| {
                    if v.at("/status/phase").and_then(Value::as_str) != Some("Running") || deleting(v) {
                        return None;
                    }
                    Some(completed(v))
                })?;
                Ok(())
            }
            Action::Remove(when) => {
                let key = (t.ns.clone(), t.name.clone());
                if self.terminating.get(&key).is_some_and(|(uid, w)| *uid == t.uid && *w == when) {
                    self.terminating.remove(&key);
                    self.store.finish_pod(&t.ns, &t.name, &t.uid)?;
                }
                Ok(())
            }
        }
    }

    fn start_pod(&mut self, t: &Timer) -> Result<(), Error> {
        self.try_start(&t.ns, &t.name, &t.uid, true)
    }

    /// Start a bound pod if its volumes and claims are ready; `timer`:
    /// called by its Start timer (a refusal sets the next one).
    fn try_start(&mut self, ns: &str, name: &str, uid: &str, timer: bool) -> Result<(), Error> {
        let key = (ns.to_string(), name.to_string());
        let Ok(pod) = self.store.get(res::PODS, ns, name) else {
            self.refused.remove(&key);
            return Ok(());
        };
        if self.refused.contains_key(&key) && (pod.uid() != uid || phase(&pod.value) != "Pending" || deleting(&pod.value)) {
            // Replaced, started or going: nothing left to wait for.
            self.refused.remove(&key);
            return Ok(());
        }
        let node_name = pod.value.at("/spec/nodeName").and_then(Value::as_str).unwrap_or("").to_string();
        // No node, no kubelet: the pod stays Pending (as upstream).
        let Ok(node) = self.store.get(NODES, "", &node_name) else { return Ok(()) };
        // Volumes first: a claim that is missing, unbound, bound to a volume
        // this node cannot reach, or held by another pod (ReadWriteOncePod)
        // keeps the pod Pending; the kubelet retries, as its volume manager does.
        if !deleting(&pod.value) && !super::volumes::volumes_ready(&self.store, &pod.value, &node.value) {
            if timer {
                let when = Instant::now() + VOLUME_RETRY;
                self.push(when, ns.to_string(), name.to_string(), uid.to_string(), Action::Start);
            }
            return Ok(());
        }
        let host_ip = node
            .value
            .at("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| x.get("type").and_then(Value::as_str) == Some("InternalIP")))
            .and_then(|x| x.get("address").and_then(Value::as_str))
            .unwrap_or("10.0.0.1")
            .to_string();
        // Then dynamic resources: claims allocated and reserved for it.
        if !deleting(&pod.value) && pod.uid() == uid && phase(&pod.value) == "Pending" && has_claims(&pod.value) {
            if let Err(why) = prepare_dynamic_resources(&self.store, &pod.value, &node.value) {
                return self.refuse(&pod, &node_name, &host_ip, why, timer);
            }
            self.refused.remove(&key);
        }
        let (t_ns, t_name, t_uid) = (ns.to_string(), name.to_string(), uid.to_string());
        let n = self.next_ip;
        self.next_ip = self.next_ip.wrapping_add(1);
        let pod_ip = format!("10.{}.{}.{}", 64 + (n >> 16) % 64, (n >> 8) & 255, n & 255);
        let started = self.store.modify_pod(&t_ns, &t_name, &t_uid, |v| {
            if v.at("/status/phase").and_then(Value::as_str) != Some("Pending") || deleting(v) {
                return None;
            }
            Some(running(v, &host_ip, &pod_ip))
        })?;
        if let Some(p) = started {
            let after = p
                .value
                .at("/metadata/annotations")
                .and_then(|a| a.get(COMPLETE_AFTER))
                .and_then(Value::as_str)
                .and_then(res::parse_duration);
            if let Some(d) = after {
                self.push(Instant::now() + d, t_ns, t_name, t_uid, Action::Complete);
            }
        }
        Ok(())
    }

    /// Keep a pod Pending for its claims: its containers wait in
    /// ContainerCreating, a Warning event says why (once per reason), and
    /// it is retried after [`DRA_RETRY`] when `timer`.
    fn refuse(&mut self, pod: &Obj, node: &str, host_ip: &str, why: String, timer: bool) -> Result<(), Error> {
        let (ns, name, uid) = (pod.namespace().to_string(), pod.name().to_string(), pod.uid().to_string());
        let key = (ns.clone(), name.clone());
        let new_reason = self.refused.get(&key).is_none_or(|r| r.uid != uid || r.why != why);
        if timer {
            self.push(Instant::now() + DRA_RETRY, ns.clone(), name.clone(), uid.clone(), Action::Start);
        }
        self.refused.insert(key, Refused { uid: uid.clone(), why: why.clone() });
        self.store.modify_pod(&ns, &name, &uid, |v| {
            if phase(v) != "Pending" || deleting(v) {
                return None;
            }
            let p = container_creating(v, host_ip);
            (p != *v).then_some(p)
        })?;
        if new_reason {
            tracing::debug!(pod = %format!("{ns}/{name}"), node, reason = %why, "kubelet: dynamic resources not ready");
            self.store.create(EVENTS_V1, &ns, prepare_failed_event(pod, node, &why))?;
        }
        Ok(())
    }
}

fn phase(v: &Value) -> &str {
    v.at("/status/phase").and_then(Value::as_str).unwrap_or("")
}

fn has_claims(pod: &Value) -> bool {
    pod.at("/spec/resourceClaims").and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

fn text<'a>(v: &'a Value, p: &str) -> &'a str {
    v.at(p).and_then(Value::as_str).unwrap_or("")
}

/// The kubelet's check before it starts a pod with claims (upstream
/// `ManagerImpl.PrepareResources`, with the simulated drivers'
/// `NodePrepareResources`): Err(why) names the first claim that is not
/// ready, in upstream's words where upstream has them:
///
/// - `pod "<ns>/<pod>": ResourceClaim not created yet` (a template's claim
///   not recorded in `status.resourceClaimStatuses`);
/// - `fetch ResourceClaim <claim>: resourceclaims.resource.k8s.io "<claim>" not found`;
/// - `ResourceClaim <ns>/<claim> was not created for pod <ns>/<pod> (pod is not owner)`;
/// - `pod <pod> (<uid>) is not allowed to use ResourceClaim <claim> (<uid>)`
///   (not in `status.reservedFor`);
/// - `ResourceClaim <claim>: not allocated`;
/// - `ResourceClaim <claim>: allocated for another node (the allocation's
///   nodeSelector does not select node <node>)` (upstream's kubelet trusts
///   the scheduler here; a real driver would fail to prepare);
/// - `DRA driver <driver> is not registered` (no ResourceSlice of that
///   driver for this node);
/// - `NodePrepareResources failed for ResourceClaim <claim>: device
///   <driver>/<pool>/<device> is not available on node <node>` (no slice
///   of the pool that this node can reach lists it).
pub fn prepare_dynamic_resources(store: &Store, pod: &Value, node: &Value) -> Result<(), String> {
    let (ns, pod_name, pod_uid) = (text(pod, "/metadata/namespace"), text(pod, "/metadata/name"), text(pod, "/metadata/uid"));
    let node_name = text(node, "/metadata/name");
    let claims = pod.at("/spec/resourceClaims").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut slices: Option<Vec<Arc<Obj>>> = None;
    for pc in claims {
        let pc_name = text(pc, "/name");
        let (claim_name, check_owner) = match (pc.get("resourceClaimName").and_then(Value::as_str), pc.get("resourceClaimTemplateName").and_then(Value::as_str)) {
            (Some(n), _) => (n, false),
            (None, Some(_)) => {
                let recorded = pod
                    .at("/status/resourceClaimStatuses")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().find(|e| text(e, "/name") == pc_name))
                    .map(|e| e.get("resourceClaimName").and_then(Value::as_str));
                match recorded {
                    Some(Some(n)) => (n, true),
                    // Recorded as not needed.
                    Some(None) => continue,
                    None => return Err(format!("pod \"{ns}/{pod_name}\": ResourceClaim not created yet")),
                }
            }
            (None, None) => return Err(format!("pod \"{ns}/{pod_name}\", spec.resourceClaim {pc_name:?}: none of the supported fields are set")),
        };
        let claim = store.get(RESOURCECLAIMS, ns, claim_name).map_err(|e| format!("fetch ResourceClaim {claim_name}: {e}"))?;
        let c = &claim.value;
        if check_owner && !is_for_pod(c, pod) {
            return Err(format!("ResourceClaim {ns}/{claim_name} was not created for pod {ns}/{pod_name} (pod is not owner)"));
        }
        if !reserved_for(c, pod_uid) {
            return Err(format!("pod {pod_name} ({pod_uid}) is not allowed to use ResourceClaim {claim_name} ({})", claim.uid()));
        }
        let Some(allocation) = c.at("/status/allocation").filter(|a| !a.is_null()) else {
            return Err(format!("ResourceClaim {claim_name}: not allocated"));
        };
        if let Some(sel) = allocation.get("nodeSelector").filter(|s| !s.is_null())
            && !selects(sel, node)
        {
            return Err(format!("ResourceClaim {claim_name}: allocated for another node (the allocation's nodeSelector does not select node {node_name})"));
        }
        let results = allocation.at("/devices/results").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        if results.is_empty() {
            continue;
        }
        let slices = slices.get_or_insert_with(|| store.list(RESOURCESLICES, &Filter::default(), None, None).map(|l| l.items).unwrap_or_default());
        for r in results {
            let (driver, pool, device) = (text(r, "/driver"), text(r, "/pool"), text(r, "/device"));
            let of_driver: Vec<&Arc<Obj>> = slices.iter().filter(|o| text(&o.value, "/spec/driver") == driver && reaches(&o.value, node)).collect();
            if of_driver.is_empty() {
                return Err(format!("DRA driver {driver} is not registered"));
            }
            let listed = of_driver.iter().any(|o| {
                text(&o.value, "/spec/pool/name") == pool
                    && o.value.at("/spec/devices").and_then(Value::as_array).is_some_and(|d| d.iter().any(|x| text(x, "/name") == device))
            });
            if !listed {
                return Err(format!("NodePrepareResources failed for ResourceClaim {claim_name}: device {driver}/{pool}/{device} is not available on node {node_name}"));
            }
        }
    }
    Ok(())
}

/// Does a ResourceSlice describe devices this node can use: node-local
/// to it, for all nodes, or selecting it (a slice whose devices each name
/// their nodes counts as reachable: the allocation's nodeSelector was
/// checked already)?
fn reaches(slice: &Value, node: &Value) -> bool {
    let spec = slice.get("spec");
    let field = |f: &str| spec.and_then(|s| s.get(f)).filter(|x| !x.is_null());
    if let Some(n) = field("nodeName").and_then(Value::as_str) {
        return n == text(node, "/metadata/name");
    }
    if field("allNodes").and_then(Value::as_bool) == Some(true) || field("perDeviceNodeSelection").and_then(Value::as_bool) == Some(true) {
        return true;
    }
    field("nodeSelector").is_some_and(|sel| selects(sel, node))
}

/// Does a core/v1 NodeSelector (JSON) select the node? (One that does not
/// compile selects nothing.)
fn selects(sel: &Value, node: &Value) -> bool {
    let Ok(ns) = serde_json::from_value::<k8s_openapi::api::core::v1::NodeSelector>(sel.clone()) else { return false };
    let labels: std::collections::BTreeMap<String, String> = node
        .at("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect())
        .unwrap_or_default();
    match berth_model::selector::NodeSelector::compile(&ns, "nodeSelector") {
        Ok(s) => s.matches(text(node, "/metadata/name"), &labels),
        Err(_) => false,
    }
}

/// The kubelet's Warning event for a pod whose claims are not ready, as
/// its legacy recorder writes it (core/v1 fields, stored as
/// events.k8s.io/v1).
fn prepare_failed_event(pod: &Obj, node: &str, why: &str) -> Value {
    let now = now_rfc3339();
    let nanos = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default();
    json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": format!("{}.{nanos:x}", pod.name()), "namespace": pod.namespace()},
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace(), "name": pod.name(), "uid": pod.uid(),
            "resourceVersion": pod.rv.to_string()},
        "reason": FAILED_PREPARE_DYNAMIC_RESOURCES,
        "note": format!("Failed to prepare dynamic resources: {why}"),
        "type": "Warning",
        "reportingController": "kubelet",
        "reportingInstance": node,
        "deprecatedSource": {"component": "kubelet", "host": node},
        "deprecatedFirstTimestamp": now,
        "deprecatedLastTimestamp": now,
        "deprecatedCount": 1,
    })
}

fn deleting(v: &Value) -> bool {
    v.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null())
}

fn cond(ty: &str, status: &str, now: &str) -> Value {
    json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": now})
}

fn containers(v: &Value) -> Vec<(String, String)> {
    v.at("/spec/containers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
                        c.get("image").and_then(Value::as_str).unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The pod while its containers are being created (its claims not
/// ready): Pending, containers waiting in ContainerCreating, not ready.
/// Conditions already so keep their transition times, so that a pod
/// refused again is not rewritten.
fn container_creating(v: &Value, host_ip: &str) -> Value {
    let now = now_rfc3339();
    let mut p = v.clone();
    let statuses: Vec<Value> = containers(v)
        .into_iter()
        .map(|(name, image)| {
            json!({"name": name, "image": image, "imageID": "", "ready": false, "started": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}}})
        })
        .collect();
    let names: Vec<String> = containers(v).into_iter().map(|(n, _)| n).collect();
    let message = format!("containers with unready status: [{}]", names.join(" "));
    let start = v.at("/status/startTime").cloned().unwrap_or_else(|| json!(now));
    if let Some(st) = p.get_mut("status").and_then(Value::as_object_mut) {
        st.insert("hostIP".into(), json!(host_ip));
        st.insert("hostIPs".into(), json!([{"ip": host_ip}]));
        st.insert("startTime".into(), start);
        st.insert("containerStatuses".into(), json!(statuses));
    }
    let wanted = [
        ("PodReadyToStartContainers", "False", None),
        ("Initialized", "True", None),
        ("Ready", "False", Some("ContainersNotReady")),
        ("ContainersReady", "False", Some("ContainersNotReady")),
    ];
    for (ty, status, reason) in wanted {
        let same = v.at("/status/conditions").and_then(Value::as_array).is_some_and(|cs| {
            cs.iter().any(|c| text(c, "/type") == ty && text(c, "/status") == status && reason.is_none_or(|r| text(c, "/reason") == r))
        });
        if same {
            continue;
        }
        let mut c = cond(ty, status, &now);
        if let Some(r) = reason {
            c["reason"] = json!(r);
            c["message"] = json!(message);
        }
        set_condition(&mut p, c);
    }
    p
}

fn running(v: &Value, host_ip: &str, pod_ip: &str) -> Value {
    let now = now_rfc3339();
    let mut p = v.clone();
    let uid = p.at("/metadata/uid").and_then(Value::as_str).unwrap_or("").to_string();
    let statuses: Vec<Value> = containers(v)
        .into_iter()
        .map(|(name, image)| {
            json!({"name": name, "image": image, "imageID": format!("berth.dev/{image}"), "containerID": format!("berth://{uid}/{name}"),
                "ready": true, "started": true, "restartCount": 0, "state": {"running": {"startedAt": now}}})
        })
        .collect();
    if let Some(st) = p.get_mut("status").and_then(Value::as_object_mut) {
        st.insert("phase".into(), json!("Running"));
        // A pod that waited in ContainerCreating keeps its start time.
        let start = st.get("startTime").cloned().unwrap_or_else(|| json!(now));
        st.insert("startTime".into(), start);
        st.insert("hostIP".into(), json!(host_ip));
        st.insert("hostIPs".into(), json!([{"ip": host_ip}]));
        st.insert("podIP".into(), json!(pod_ip));
        st.insert("podIPs".into(), json!([{"ip": pod_ip}]));
        st.insert("containerStatuses".into(), json!(statuses));
    }
    for ty in ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"] {
        let keep = ty == "PodScheduled"
            && p.at("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| cs.iter().any(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled") && c.get("status").and_then(Value::as_str) == Some("True")));
        if !keep {
            set_condition(&mut p, cond(ty, "True", &now));
        }
    }
     if let Some(ready) = gated_ready_condition(&p) {
        set_condition(&mut p, ready);
    }
    p
}

/// The pod once the kubelet has begun stopping its containers: every
/// container unready, ContainersReady and Ready False.
fn not_ready(v: &Value) -> Value {
    let now = now_rfc3339();
    let mut p = v.clone();
    if let Some(statuses) = p.at_mut("/status/containerStatuses").and_then(Value::as_array_mut) {
        for s in statuses {
            s["ready"] = json!(false);
        }
    }
    let names: Vec<String> = containers(v).into_iter().map(|(n, _)| n).collect();
    let message = format!("containers with unready status: [{}]", names.join(" "));
    for ty in ["ContainersReady", "Ready"] {
        set_condition(&mut p, json!({"type": ty, "status": "False", "reason": "ContainersNotReady", "message": message, "lastProbeTime": null, "lastTransitionTime": now}));
    }
    p
}

fn completed(v: &Value) -> Value {
    let now = now_rfc3339();
    let mut p = v.clone();
    let uid = p.at("/metadata/uid").and_then(Value::as_str).unwrap_or("").to_string();
    let started = p.at("/status/startTime").cloned().unwrap_or(json!(now));
    let statuses: Vec<Value> = containers(v)
        .into_iter()
        .map(|(name, image)| {
            json!({"name": name, "image": image, "imageID": format!("berth.dev/{image}"), "containerID": format!("berth://{uid}/{name}"),
                "ready": false, "started": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": now, "containerID": format!("berth://{uid}/{name}")}}})
        })
        .collect();
    if let Some(st) = p.get_mut("status").and_then(Value::as_object_mut) {
        st.insert("phase".into(), json!("Succeeded"));
        st.insert("containerStatuses".into(), json!(statuses));
    }
    for ty in ["Ready", "ContainersReady"] {
        set_condition(&mut p, json!({"type": ty, "status": "False", "reason": "PodCompleted", "lastProbeTime": null, "lastTransitionTime": now}));
    }
    set_condition(&mut p, cond("PodReadyToStartContainers", "False", &now));
    p
}
