//! Simulated kubelets: a single task with a timer heap serves every node.
//! Bound pods start Running after a delay, pods annotated
//! `berth.dev/complete-after` succeed that long after starting, and
//! terminating pods are removed once their grace period has passed.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::jsonptr::Pointer as _;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::resources::{self as res, NODES};
use super::admission::pods::gated_ready_condition;
use super::store::{self, KubeletMsg, Store, now_rfc3339, set_condition};

/// How often the kubelet retries a pod whose volumes are not ready.
const VOLUME_RETRY: Duration = Duration::from_millis(500);

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

struct Kubelets {
    store: Arc<Store>,
    cfg: KubeletConfig,
    heap: BinaryHeap<Reverse<Timer>>,
    seq: u64,
    next_ip: u32,
    /// Latest removal deadline per terminating pod (ns, name) -> (uid, when).
    terminating: HashMap<(String, String), (String, Instant)>,
}

/// Spawn the kubelet task. It stops when `stop` changes or its sender is dropped.
pub fn spawn(store: Arc<Store>, cfg: KubeletConfig, mut rx: mpsc::UnboundedReceiver<KubeletMsg>, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut k = Kubelets { store, cfg, heap: BinaryHeap::new(), seq: 0, next_ip: 1, terminating: HashMap::new() };
        loop {
            let next = k.heap.peek().map(|Reverse(t)| t.when);
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                _ = stop.changed() => break,
                m = rx.recv() => match m {
                    Some(m) => k.on_msg(m),
                    None => break,
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
        let Ok(pod) = self.store.get(res::PODS, &t.ns, &t.name) else { return Ok(()) };
        let node_name = pod.value.at("/spec/nodeName").and_then(Value::as_str).unwrap_or("").to_string();
        // No node, no kubelet: the pod stays Pending (as upstream).
        let Ok(node) = self.store.get(NODES, "", &node_name) else { return Ok(()) };
        // Volumes first: a claim that is missing, unbound, bound to a volume
        // this node cannot reach, or held by another pod (ReadWriteOncePod)
        // keeps the pod Pending; the kubelet retries, as its volume manager does.
        if !deleting(&pod.value) && !super::volumes::volumes_ready(&self.store, &pod.value, &node.value) {
            let when = Instant::now() + VOLUME_RETRY;
            self.push(when, t.ns.clone(), t.name.clone(), t.uid.clone(), Action::Start);
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
        let n = self.next_ip;
        self.next_ip = self.next_ip.wrapping_add(1);
        let pod_ip = format!("10.{}.{}.{}", 64 + (n >> 16) % 64, (n >> 8) & 255, n & 255);
        let started = self.store.modify_pod(&t.ns, &t.name, &t.uid, |v| {
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
                self.push(Instant::now() + d, t.ns.clone(), t.name.clone(), t.uid.clone(), Action::Complete);
            }
        }
        Ok(())
    }
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
        st.insert("startTime".into(), json!(now));
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
