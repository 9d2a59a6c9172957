//! Workload controllers of the local cluster (upstream `pkg/controller/
//! deployment`, `replicaset`, `job`, `statefulset`, `daemon` and the
//! garbage collector), enough to run real manifests: a Deployment owns one
//! ReplicaSet per pod template (named by its `pod-template-hash`) and rolls
//! from the old ones to the new one within `maxSurge`/`maxUnavailable` (or
//! Recreate); a ReplicaSet creates pods from its template (so their
//! `schedulerName` is the template's) and deletes the surplus (unbound
//! first, then not ready, then the newest); a Job runs `parallelism` pods at
//! a time until `completions` succeed (the simulated kubelet completes
//! them); a StatefulSet runs ordered, named pods with their claims
//! ([`statefulset`]); a DaemonSet runs one pod per eligible node, placed by
//! the scheduler ([`daemonset`]); deleting an owner deletes its dependents
//! (background propagation through ownerReferences).
//!
//! Simplified: no proportional scaling of several old ReplicaSets during a
//! resize, no `minReadySeconds` (ready is
//! available), no progress deadline; Jobs have no indexed completion
//! mode, pod failure policy or TTL.

pub mod daemonset;
pub mod resourceclaim;
pub mod statefulset;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::jsonptr::Pointer as _;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::resources::{self as res, CONTROLLERREVISIONS, DAEMONSETS, DEPLOYMENTS, JOBS, NODES, PODS, REPLICASETS, STATEFULSETS};
use super::selector::Filter;
use super::store::{controller_of, DeleteOpts, EventType, Obj, Store, WatchEvent, now_rfc3339};

/// Workload controller settings.
#[derive(Debug, Clone)]
pub struct ControllersConfig {
    /// Run the workload controllers and the garbage collector.
    pub enabled: bool,
    /// Full resync period (events trigger a sync sooner).
    pub resync: Duration,
    /// Most pods one controller creates or deletes per owner and sync
    /// (upstream's `burstReplicas`, 500).
    pub burst: usize,
}

impl Default for ControllersConfig {
    fn default() -> Self {
        Self { enabled: true, resync: Duration::from_secs(2), burst: 500 }
    }
}

/// The label a Deployment puts on its ReplicaSets and their pods.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The label naming the ControllerRevision a StatefulSet's or DaemonSet's pod was made from.
pub const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.at(p).and_then(Value::as_str).unwrap_or("")
}


fn owner_ref(kind: &str, owner: &Value) -> Value {
    json!([{
        "apiVersion": if kind == "Job" { "batch/v1" } else { "apps/v1" },
        "kind": kind,
        "name": s(owner, "/metadata/name"),
        "uid": s(owner, "/metadata/uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

fn is_deleting(v: &Value) -> bool {
    v.at("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null())
}

fn active(p: &Value) -> bool {
    !is_deleting(p) && !matches!(s(p, "/status/phase"), "Succeeded" | "Failed")
}

/// Every object of a resource, indexed by its controller's uid (the
/// pod-listing and owner matching all controllers share).
struct Owned {
    by_owner: HashMap<String, Vec<Arc<Obj>>>,
}

impl Owned {
    fn of(store: &Store, r: res::ResId) -> Self {
        let mut by_owner: HashMap<String, Vec<Arc<Obj>>> = HashMap::new();
        // Read as stored (pods are kept lean) and parsed back whole only
        // when controlled: most pods of a large cluster have no controller.
        let all = store.list_bytes(r, &Filter::default(), None, None).map(|l| l.items).unwrap_or_default();
        for o in all {
            if let Some(uid) = o.controller_uid() {
                by_owner.entry(uid.to_string()).or_default().push(o.full());
            }
        }
        Self { by_owner }
    }

    /// The objects `owner` controls (same namespace).
    fn of_owner<'a>(&'a self, owner: &'a Obj) -> impl Iterator<Item = &'a Arc<Obj>> + 'a {
        self.by_owner.get(owner.uid()).into_iter().flatten().filter(move |p| p.namespace() == owner.namespace())
    }

    /// The active (not terminal, not terminating) pods `owner` controls.
    fn active_of<'a>(&'a self, owner: &'a Obj) -> Vec<&'a Arc<Obj>> {
        self.of_owner(owner).filter(|p| active(&p.value)).collect()
    }
}

/// A pod from `template`, controlled by `owner` (of `kind`), named `name`
/// or generated from the owner's name.
fn pod_from_template(template: &Value, kind: &str, owner: &Obj, name: Option<&str>) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": template.get("metadata").filter(|m| m.is_object()).cloned().unwrap_or_else(|| json!({})),
        "spec": template.get("spec").filter(|m| m.is_object()).cloned().unwrap_or_else(|| json!({})),
    });
    if let Some(m) = pod.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("name");
        m.remove("generateName");
        match name {
            Some(n) => m.insert("name".into(), json!(n)),
            None => m.insert("generateName".into(), json!(format!("{}-", owner.name()))),
        };
        m.insert("namespace".into(), json!(owner.namespace()));
        m.insert("ownerReferences".into(), owner_ref(kind, &owner.value));
    }
    pod
}

/// The metadata map of an object (created when missing or malformed).
fn meta_map<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut serde_json::Map<String, Value>> {
    let m = v.get_mut("metadata")?.as_object_mut()?;
    let e = m.entry(key).or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e.as_object_mut()
}

/// Start the controllers: they sync on changes to their owners, owned
/// pods and nodes, and every `resync`. The resourceclaim controller
/// ([`resourceclaim`]) runs beside the workload controllers, in the same
/// task.
pub fn spawn(store: Arc<Store>, cfg: ControllersConfig, stop: watch::Receiver<bool>) -> JoinHandle<()> {
    let claims = resourceclaim::Controller::new(store.clone());
    let (resync, claims_stop) = (cfg.resync, stop.clone());
    tokio::spawn(async move {
        tokio::join!(workloads(store, cfg, stop), claims.run(resync, claims_stop));
    })
}

/// The workload controllers' loop (see [`spawn`]).
async fn workloads(store: Arc<Store>, cfg: ControllersConfig, mut stop: watch::Receiver<bool>) {
    {
        let mut deployments = store.subscribe(DEPLOYMENTS);
        let mut replicasets = store.subscribe(REPLICASETS);
        let mut pods = store.subscribe(PODS);
        let mut jobs = store.subscribe(JOBS);
        let mut statefulsets = store.subscribe(STATEFULSETS);
        let mut daemonsets = store.subscribe(DAEMONSETS);
        let mut nodes = store.subscribe(NODES);
        let mut tick = tokio::time::interval(cfg.resync.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let mut sweep = false;
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => sweep = true,
                ev = deployments.recv() => if !handle(&store, ev, DEPLOYMENTS) { break },
                ev = replicasets.recv() => if !handle(&store, ev, REPLICASETS) { break },
                ev = jobs.recv() => if !handle(&store, ev, JOBS) { break },
                ev = statefulsets.recv() => if !handle(&store, ev, STATEFULSETS) { break },
                ev = daemonsets.recv() => if !handle(&store, ev, DAEMONSETS) { break },
                ev = nodes.recv() => match ev {
                    Ok(_) if store.count(DAEMONSETS) == 0 => continue,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                ev = pods.recv() => match ev {
                    Ok(ev) if ev.obj.controller_uid().is_none() => continue,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            }
            // Coalesce a burst of changes into one sync.
            tokio::time::sleep(Duration::from_millis(5)).await;
            while let Ok(ev) = pods.try_recv() {
                let _ = ev;
            }
            while let Ok(ev) = nodes.try_recv() {
                let _ = ev;
            }
            let workloads = [JOBS, DEPLOYMENTS, REPLICASETS, STATEFULSETS, DAEMONSETS].map(|r| store.count(r) > 0);
            if !workloads.iter().any(|w| *w) {
                // Nothing to run; dependents of deleted owners went with
                // their owner's DELETED event.
                continue;
            }
            let pods = Owned::of(&store, PODS);
            let [jobs, deployments, replicasets, statefulsets, daemonsets] = workloads;
            if jobs {
                sync_jobs(&store, &pods, cfg.burst);
            }
            if statefulsets {
                statefulset::sync(&store, &pods, cfg.burst);
            }
            if daemonsets {
                daemonset::sync(&store, &pods, cfg.burst);
            }
            if deployments || replicasets {
                sync_deployments(&store, &pods);
                sync_replicasets(&store, &pods, cfg.burst);
            }
            if sweep {
                collect_orphans(&store);
            }
        }
    }
}

/// An owner event: a deleted owner's dependents go. False when the
/// store is gone.
fn handle(store: &Store, ev: Result<Arc<WatchEvent>, broadcast::error::RecvError>, r: res::ResId) -> bool {
    match ev {
        Ok(ev) if ev.ty == EventType::Deleted => {
            let dependents = if r == DEPLOYMENTS { REPLICASETS } else { PODS };
            delete_dependents(store, dependents, ev.obj.namespace(), ev.obj.uid());
            if r == STATEFULSETS || r == DAEMONSETS {
                delete_dependents(store, CONTROLLERREVISIONS, ev.obj.namespace(), ev.obj.uid());
            }
            if r == STATEFULSETS {
                statefulset::deleted(store, &ev.obj);
            }
            true
        }
        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => true,
        Err(broadcast::error::RecvError::Closed) => false,
    }
}

fn list(store: &Store, r: res::ResId, ns: Option<&str>) -> Vec<Arc<Obj>> {
    let f = Filter { namespace: ns.map(str::to_string), ..Default::default() };
    store.list(r, &f, None, None).map(|l| l.items).unwrap_or_default()
}

/// Delete one object, if it is still the one seen (uid precondition).
fn delete_obj(store: &Store, r: res::ResId, o: &Obj) {
    let opts = DeleteOpts { uid: Some(o.uid().to_string()), ..Default::default() };
    let _ = store.delete(r, o.namespace(), o.name(), &opts);
}

fn delete_dependents(store: &Store, r: res::ResId, ns: &str, owner_uid: &str) {
    for o in list(store, r, Some(ns)) {
        if controller_of(&o.value) == Some(owner_uid) && !is_deleting(&o.value) {
            delete_obj(store, r, &o);
        }
    }
}

/// The garbage collector's sweep: dependents whose controlling owner (of
/// the kinds the controllers run) no longer exists.
fn collect_orphans(store: &Store) {
    let owners: [(res::ResId, &str); 5] =
        [(DEPLOYMENTS, "Deployment"), (REPLICASETS, "ReplicaSet"), (JOBS, "Job"), (STATEFULSETS, "StatefulSet"), (DAEMONSETS, "DaemonSet")];
    let live: HashSet<String> = owners.iter().flat_map(|(r, _)| list(store, *r, None)).map(|o| o.uid().to_string()).collect();
    for dependent in [REPLICASETS, PODS, CONTROLLERREVISIONS] {
        let all = store.list_bytes(dependent, &Filter::default(), None, None).map(|l| l.items).unwrap_or_default();
        // Only a dependent whose controller is gone is read whole.
        for o in all.iter().filter(|o| o.controller_uid().is_some_and(|u| !live.contains(u))).map(Obj::full) {
            let orphaned = o.value.at("/metadata/ownerReferences").and_then(Value::as_array).is_some_and(|refs| {
                refs.iter().any(|r| {
                    r.get("controller").and_then(Value::as_bool) == Some(true)
                        && owners.iter().any(|(_, kind)| r.get("kind").and_then(Value::as_str) == Some(kind))
                        && r.get("uid").and_then(Value::as_str).is_some_and(|u| !live.contains(u))
                })
            });
            if orphaned && !is_deleting(&o.value) {
                delete_obj(store, dependent, &o);
            }
        }
    }
}

fn ready(p: &Value) -> bool {
    res::pod_healthy(p)
}

/// Order in which surplus pods go (upstream's `ActivePods` ranking, in
/// short): unassigned, then pending, then not ready, then the newest.
fn deletion_rank(p: &Value) -> (u8, u8, u8, std::cmp::Reverse<String>) {
    let unassigned = u8::from(!s(p, "/spec/nodeName").is_empty());
    let pending = u8::from(s(p, "/status/phase") != "Pending");
    let not_ready = u8::from(ready(p));
    (unassigned, pending, not_ready, std::cmp::Reverse(s(p, "/metadata/creationTimestamp").to_string()))
}

fn sync_replicasets(store: &Store, pods: &Owned, burst: usize) {
    for rs in list(store, REPLICASETS, None) {
        if is_deleting(&rs.value) {
            continue;
        }
        let desired = rs.value.at("/spec/replicas").and_then(Value::as_i64).unwrap_or(1).max(0) as usize;
        let mut owned = pods.active_of(&rs);
        let ns = rs.namespace().to_string();
        if owned.len() < desired {
            let template = rs.value.at("/spec/template").cloned().unwrap_or_else(|| json!({}));
            for _ in 0..(desired - owned.len()).min(burst) {
                let pod = pod_from_template(&template, "ReplicaSet", &rs, None);
                if let Err(e) = store.create(PODS, &ns, pod) {
                    tracing::debug!(replicaset = rs.name(), error = %e, "creating a pod failed");
                    break;
                }
            }
        } else if owned.len() > desired {
            owned.sort_by_key(|p| deletion_rank(&p.value));
            for p in owned.iter().take((owned.len() - desired).min(burst)) {
                delete_obj(store, PODS, p);
            }
        }
        // As upstream, the status counts the pods seen before this sync's changes.
        let ready_count = owned.iter().filter(|p| ready(&p.value)).count();
        let status = json!({
            "replicas": owned.len(),
            "fullyLabeledReplicas": owned.len(),
            "readyReplicas": ready_count,
            "availableReplicas": ready_count,
            "observedGeneration": rs.value.at("/metadata/generation").cloned().unwrap_or(json!(1)),
        });
        write_status(store, REPLICASETS, &rs, status);
    }
}

fn write_status(store: &Store, r: res::ResId, o: &Obj, status: Value) {
    let _ = store.modify(r, o.namespace(), o.name(), Some(o.uid()), |v| {
        let mut keep = status.clone();
        if let (Some(k), Some(old)) = (keep.as_object_mut(), v.get("status").and_then(Value::as_object)) {
            for (key, val) in old {
                if key == "conditions" {
                    k.entry(key.clone()).or_insert_with(|| val.clone());
                }
            }
        }
        if v.get("status") == Some(&keep) {
            return None;
        }
        let mut n = v.clone();
        n.as_object_mut()?.insert("status".into(), keep);
        Some(n)
    });
}

/// FNV-1a over the template, as a short DNS-safe string (upstream hashes
/// the template with FNV-32a and encodes it with its "safe" alphabet).
fn template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h: u32 = 0x811c_9dc5;
    for b in template.to_string().bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let mut out = String::new();
    let mut n = h;
    loop {
        out.push(ALPHABET[(n % ALPHABET.len() as u32) as usize] as char);
        n /= ALPHABET.len() as u32;
        if n == 0 {
            break;
        }
    }
    out
}

/// maxSurge and maxUnavailable of a rolling update (defaults 25%, surge
/// rounded up, unavailable down; both zero becomes unavailable 1).
fn rolling_bounds(d: &Value, desired: i64) -> (i64, i64) {
    let resolve = |p: &str, up: bool| -> i64 {
        match d.at(p) {
            Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
            Some(Value::String(t)) => match t.strip_suffix('%').and_then(|x| x.trim().parse::<i64>().ok()) {
                Some(pct) if up => (pct * desired + 99) / 100,
                Some(pct) => pct * desired / 100,
                None => t.parse().unwrap_or(0),
            },
            _ if up => (25 * desired + 99) / 100,
            _ => 25 * desired / 100,
        }
    };
    let surge = resolve("/spec/strategy/rollingUpdate/maxSurge", true).max(0);
    let mut unavailable = resolve("/spec/strategy/rollingUpdate/maxUnavailable", false).max(0);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

fn replicas(v: &Value) -> i64 {
    v.at("/spec/replicas").and_then(Value::as_i64).unwrap_or(1).max(0)
}

fn set_replicas(store: &Store, rs: &Obj, n: i64) {
    if replicas(&rs.value) == n {
        return;
    }
    let _ = store.modify(REPLICASETS, rs.namespace(), rs.name(), Some(rs.uid()), |v| {
        let mut n2 = v.clone();
        n2.at_mut("/spec")?.as_object_mut()?.insert("replicas".into(), json!(n));
        Some(n2)
    });
}

fn sync_deployments(store: &Store, pods: &Owned) {
    let all_rs = list(store, REPLICASETS, None);
    for d in list(store, DEPLOYMENTS, None) {
        if is_deleting(&d.value) {
            continue;
        }
        // A paused Deployment keeps its ReplicaSets as they are (no new
        // one, no rolling) but its status is still kept, as upstream does.
        let paused = d.value.at("/spec/paused").and_then(Value::as_bool) == Some(true);
        let ns = d.namespace().to_string();
        let desired = replicas(&d.value);
        let template = d.value.at("/spec/template").cloned().unwrap_or_else(|| json!({}));
        let hash = template_hash(&template);
        let owned: Vec<&Arc<Obj>> = all_rs.iter().filter(|r| r.namespace() == ns && controller_of(&r.value) == Some(d.uid())).collect();
        let counts = |rs: &Obj| -> (i64, i64) {
            let pods = pods.active_of(rs);
            (pods.len() as i64, pods.iter().filter(|p| ready(&p.value)).count() as i64)
        };
        let new_rs = owned.iter().find(|r| s(&r.value, &format!("/metadata/labels/{POD_TEMPLATE_HASH}")) == hash).copied();
        let old: Vec<&Arc<Obj>> = owned.iter().filter(|r| new_rs.is_none_or(|n| n.uid() != r.uid())).copied().collect();
        let old_replicas: i64 = old.iter().map(|r| replicas(&r.value)).sum();
        let recreate = s(&d.value, "/spec/strategy/type") == "Recreate";
        let (surge, max_unavailable) = rolling_bounds(&d.value, desired);
        let new_target = |current: i64| -> i64 {
            if recreate {
                let old_pods: i64 = old.iter().map(|r| counts(r).0).sum();
                if old_replicas == 0 && old_pods == 0 { desired } else { 0 }
            } else if old_replicas == 0 {
                desired
            } else {
                let room = (desired + surge - (old_replicas + current)).max(0);
                (current + room).min(desired).max(current.min(desired))
            }
        };
        let revision_of = |r: &Obj| s(&r.value, "/metadata/annotations/deployment.kubernetes.io~1revision").parse::<i64>().unwrap_or(0);
        let mut created = false;
        let new_rs = match new_rs {
            Some(r) if paused => Some((*r).clone()),
            None if paused => None,
            Some(r) => {
                set_replicas(store, r, new_target(replicas(&r.value)));
                // A template seen before (`rollout undo`) makes its old
                // ReplicaSet the newest revision again.
                let newest_old = old.iter().map(|o| revision_of(o)).max().unwrap_or(0);
                if revision_of(r) <= newest_old {
                    let revision = (newest_old + 1).to_string();
                    let _ = store.modify(REPLICASETS, &ns, r.name(), Some(r.uid()), |v| {
                        let mut n = v.clone();
                        meta_map(&mut n, "annotations")?.insert("deployment.kubernetes.io/revision".into(), json!(revision));
                        Some(n)
                    });
                }
                Some((*r).clone())
            }
            None => {
                let mut tmpl = template.clone();
                crate_label(&mut tmpl, &hash);
                let mut selector = d.value.at("/spec/selector").cloned().unwrap_or_else(|| json!({}));
                if let Some(m) = selector.as_object_mut() {
                    let ml = m.entry("matchLabels").or_insert_with(|| json!({}));
                    if let Some(ml) = ml.as_object_mut() {
                        ml.insert(POD_TEMPLATE_HASH.into(), json!(hash));
                    }
                }
                let revision = owned
                    .iter()
                    .filter_map(|r| s(&r.value, "/metadata/annotations/deployment.kubernetes.io~1revision").parse::<i64>().ok())
                    .max()
                    .unwrap_or(0)
                    + 1;
                let rs = json!({
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "metadata": {
                        "name": format!("{}-{hash}", d.name()),
                        "namespace": ns,
                        "labels": tmpl.at("/metadata/labels").cloned().unwrap_or_else(|| json!({})),
                        "annotations": {"deployment.kubernetes.io/revision": revision.to_string(),
                            "deployment.kubernetes.io/desired-replicas": desired.to_string(),
                            "deployment.kubernetes.io/max-replicas": (desired + surge).to_string()},
                        "ownerReferences": owner_ref("Deployment", &d.value),
                    },
                    "spec": {"replicas": new_target(0), "selector": selector, "template": tmpl},
                });
                match store.create(REPLICASETS, &ns, rs) {
                    Ok(o) => {
                        created = true;
                        Some(o)
                    }
                    Err(e) => {
                        tracing::debug!(deployment = d.name(), error = %e, "creating a ReplicaSet failed");
                        None
                    }
                }
            }
        };
        // Scale the old ReplicaSets down while enough pods stay available.
        let (new_pods, new_ready) = new_rs.as_ref().map(|r| counts(r)).unwrap_or((0, 0));
        let old_counts: Vec<(i64, i64)> = old.iter().map(|r| counts(r)).collect();
        if paused {
            // Nothing to roll while paused.
        } else if recreate {
            for r in &old {
                set_replicas(store, r, 0);
            }
        } else {
            let available: i64 = new_ready + old_counts.iter().map(|c| c.1).sum::<i64>();
            let old_unhealthy: i64 = old.iter().zip(&old_counts).map(|(r, c)| (replicas(&r.value) - c.1).max(0)).sum();
            let mut allowed = (available - (desired - max_unavailable)).max(0) + old_unhealthy;
            let mut oldest: Vec<&&Arc<Obj>> = old.iter().collect();
            oldest.sort_by_key(|r| s(&r.value, "/metadata/creationTimestamp").to_string());
            for r in oldest {
                let cur = replicas(&r.value);
                let cut = cur.min(allowed);
                if cut > 0 {
                    set_replicas(store, r, cur - cut);
                    allowed -= cut;
                }
            }
        }
        let total_pods = new_pods + old_counts.iter().map(|c| c.0).sum::<i64>();
        let total_ready = new_ready + old_counts.iter().map(|c| c.1).sum::<i64>();
        let available_ok = total_ready >= desired - max_unavailable;
        let now = now_rfc3339();
        let rs_name = format!("{}-{hash}", d.name());
        let complete = new_pods == desired && total_pods == desired && new_ready == desired;
        let progressing = progressing_condition(&d.value, &rs_name, paused, complete, created, (total_pods, new_pods, total_ready), &now);
        if complete || paused {
            cleanup_history(store, &d.value, &old, &old_counts);
        }
        let status = json!({
            "observedGeneration": d.value.at("/metadata/generation").cloned().unwrap_or(json!(1)),
            "replicas": total_pods,
            "updatedReplicas": new_pods,
            "readyReplicas": total_ready,
            "availableReplicas": total_ready,
            "unavailableReplicas": (desired - total_ready).max(0),
            "conditions": [
                {"type": "Available", "status": if available_ok { "True" } else { "False" },
                    "reason": if available_ok { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                    "message": if available_ok { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." },
                    "lastUpdateTime": now, "lastTransitionTime": now},
                progressing,
            ],
        });
        let unchanged = d.value.get("status").is_some_and(|old| {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut()
                    && let Some(Value::Array(conds)) = m.get_mut("conditions")
                {
                    for c in conds.iter_mut() {
                        *c = json!([c.get("type"), c.get("status"), c.get("reason")]);
                    }
                }
                v
            };
            strip(old) == strip(&status)
        });
        // The Deployment carries its newest ReplicaSet's revision.
        let revision = new_rs.as_ref().map(|r| s(&r.value, "/metadata/annotations/deployment.kubernetes.io~1revision").to_string()).filter(|r| !r.is_empty());
        let revision_shown = revision.as_deref().is_none_or(|r| s(&d.value, "/metadata/annotations/deployment.kubernetes.io~1revision") == r);
        if !unchanged || !revision_shown {
            let _ = store.modify(DEPLOYMENTS, &ns, d.name(), Some(d.uid()), |v| {
                let mut n = v.clone();
                if let Some(r) = &revision {
                    meta_map(&mut n, "annotations")?.insert("deployment.kubernetes.io/revision".into(), json!(r));
                }
                n.as_object_mut()?.insert("status".into(), status.clone());
                Some(n)
            });
        }
    }
}

/// Upstream's `cleanupDeployment` (run when a rollout is complete or the
/// Deployment paused): beyond `revisionHistoryLimit` (default 10) old
/// ReplicaSets, the oldest revisions are deleted, those scaled to zero
/// with no pods left.
fn cleanup_history(store: &Store, d: &Value, old: &[&Arc<Obj>], counts: &[(i64, i64)]) {
    let limit = d.at("/spec/revisionHistoryLimit").and_then(Value::as_i64).unwrap_or(10).max(0);
    let mut alive: Vec<(&Arc<Obj>, i64)> = old.iter().zip(counts).filter(|(r, _)| !is_deleting(&r.value)).map(|(r, c)| (*r, c.0)).collect();
    let diff = alive.len() as i64 - limit;
    if diff <= 0 {
        return;
    }
    let revision = |r: &Obj| s(&r.value, "/metadata/annotations/deployment.kubernetes.io~1revision").parse::<i64>().unwrap_or(0);
    alive.sort_by_key(|(r, _)| (revision(r), s(&r.value, "/metadata/creationTimestamp").to_string()));
    for (r, pods) in alive.into_iter().take(diff as usize) {
        let status_replicas = r.value.at("/status/replicas").and_then(Value::as_i64).unwrap_or(0);
        if pods == 0 && status_replicas == 0 && replicas(&r.value) == 0 {
            delete_obj(store, REPLICASETS, r);
        }
    }
}

/// The Progressing condition as upstream's `syncRolloutStatus` keeps it:
/// paused (Unknown, DeploymentPaused); complete (NewReplicaSetAvailable);
/// a new ReplicaSet (NewReplicaSetCreated); progress since the last status
/// (more updated, ready or available pods, fewer old ones: ReplicaSetUpdated,
/// its lastUpdateTime now); no progress for `progressDeadlineSeconds`
/// (default 600) since then (False, ProgressDeadlineExceeded, which
/// `kubectl rollout status` reports as a failed rollout); else unchanged.
/// `counts` is (pods, updated pods, ready pods) of this pass.
fn progressing_condition(d: &Value, rs_name: &str, paused: bool, complete: bool, created: bool, counts: (i64, i64, i64), now: &str) -> Value {
    let (total, updated, ready) = counts;
    let cond = |status: &str, reason: &str, message: String, since: Option<&Value>| {
        let since = since.cloned().unwrap_or_else(|| json!(now));
        json!({"type": "Progressing", "status": status, "reason": reason, "message": message, "lastUpdateTime": now, "lastTransitionTime": since})
    };
    let old = d
        .at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Progressing")));
    let old_field = |k: &str| old.and_then(|c| c.get(k)).and_then(Value::as_str).unwrap_or("");
    // lastTransitionTime moves only when the status does.
    let same_status = |status: &str| old.filter(|_| old_field("status") == status).and_then(|c| c.get("lastTransitionTime"));
    if paused {
        return cond("Unknown", "DeploymentPaused", "Deployment is paused".into(), same_status("Unknown"));
    }
    if complete {
        if old_field("reason") == "NewReplicaSetAvailable"
            && let Some(c) = old
        {
            return c.clone();
        }
        return cond("True", "NewReplicaSetAvailable", format!("ReplicaSet \"{rs_name}\" has successfully progressed."), same_status("True"));
    }
    if created {
        return cond("True", "NewReplicaSetCreated", format!("Created new replica set \"{rs_name}\""), same_status("True"));
    }
    let before = |k: &str| d.at(&format!("/status/{k}")).and_then(Value::as_i64).unwrap_or(0);
    let progressed = updated > before("updatedReplicas")
        || total - updated < before("replicas") - before("updatedReplicas")
        || ready > before("readyReplicas")
        || ready > before("availableReplicas");
    if progressed || old.is_none() || old_field("reason") == "DeploymentPaused" {
        return cond("True", "ReplicaSetUpdated", format!("ReplicaSet \"{rs_name}\" is progressing."), same_status("True"));
    }
    let deadline = d.at("/spec/progressDeadlineSeconds").and_then(Value::as_i64).unwrap_or(600);
    let last = chrono::DateTime::parse_from_rfc3339(old_field("lastUpdateTime")).ok();
    let timed_out = old_field("reason") == "ProgressDeadlineExceeded"
        || (deadline < i64::from(i32::MAX) && last.is_some_and(|t| chrono::Utc::now().signed_duration_since(t).num_seconds() > deadline));
    match old {
        Some(c) if old_field("reason") == "ProgressDeadlineExceeded" => c.clone(),
        _ if timed_out => cond("False", "ProgressDeadlineExceeded", format!("ReplicaSet \"{rs_name}\" has timed out progressing."), same_status("False")),
        Some(c) => c.clone(),
        None => cond("True", "ReplicaSetUpdated", format!("ReplicaSet \"{rs_name}\" is progressing."), None),
    }
}

/// The Job controller, in short: `parallelism` pods at a time (default
/// one) until `completions` (default one) have Succeeded, then the Job is
/// Complete (SuccessCriteriaMet, then Complete, as 1.31+ writes them);
/// more than `backoffLimit` (default 6) failed pods make it Failed. Its pods
/// carry the job labels and, unless the template says otherwise, ask the
/// simulated kubelet to complete them after a second.
fn sync_jobs(store: &Store, pods: &Owned, burst: usize) {
    for job in list(store, JOBS, None) {
        if is_deleting(&job.value) {
            continue;
        }
        let finished = job.value.at("/status/conditions").and_then(Value::as_array).is_some_and(|cs| {
            cs.iter().any(|c| matches!(s(c, "/type"), "Complete" | "Failed") && s(c, "/status") == "True")
        });
        if finished || job.value.at("/spec/suspend").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        let ns = job.namespace().to_string();
        let completions = job.value.at("/spec/completions").and_then(Value::as_i64).unwrap_or(1).max(0);
        let parallelism = job.value.at("/spec/parallelism").and_then(Value::as_i64).unwrap_or(1).max(0);
        let backoff_limit = job.value.at("/spec/backoffLimit").and_then(Value::as_i64).unwrap_or(6);
        let owned: Vec<&Arc<Obj>> = pods.of_owner(&job).collect();
        let succeeded = owned.iter().filter(|p| s(&p.value, "/status/phase") == "Succeeded").count() as i64;
        let failed = owned.iter().filter(|p| s(&p.value, "/status/phase") == "Failed").count() as i64;
        let active = owned.iter().filter(|p| active(&p.value)).count() as i64;
        let now = now_rfc3339();
        let start = job.value.at("/status/startTime").cloned().unwrap_or_else(|| json!(now));
        let mut status = json!({"startTime": start, "active": active, "succeeded": succeeded, "failed": failed, "ready": owned.iter().filter(|p| ready(&p.value)).count()});
        let cond = |ty: &str, reason: &str, message: &str| {
            json!({"type": ty, "status": "True", "reason": reason, "message": message, "lastProbeTime": now, "lastTransitionTime": now})
        };
        if succeeded >= completions {
            status["active"] = json!(0);
            status["completionTime"] = json!(now);
            status["conditions"] = json!([
                cond("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"),
                cond("Complete", "CompletionsReached", "Reached expected number of succeeded pods"),
            ]);
        } else if failed > backoff_limit {
            status["conditions"] = json!([
                cond("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
                cond("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
            ]);
        } else {
            let wanted = parallelism.min(completions - succeeded);
            let template = job.value.at("/spec/template").cloned().unwrap_or_else(|| json!({}));
            for _ in 0..(wanted - active).clamp(0, burst as i64) {
                let mut pod = pod_from_template(&template, "Job", &job, None);
                if let Some(l) = meta_map(&mut pod, "labels") {
                    l.insert("batch.kubernetes.io/controller-uid".into(), json!(job.uid()));
                    l.insert("batch.kubernetes.io/job-name".into(), json!(job.name()));
                    l.insert("controller-uid".into(), json!(job.uid()));
                    l.insert("job-name".into(), json!(job.name()));
                }
                if let Some(a) = meta_map(&mut pod, "annotations") {
                    a.entry(super::kubelet::COMPLETE_AFTER).or_insert_with(|| json!("1s"));
                }
                if let Err(e) = store.create(PODS, &ns, pod) {
                    tracing::debug!(job = job.name(), error = %e, "creating a pod failed");
                    break;
                }
            }
        }
        write_status(store, JOBS, &job, status);
    }
}

/// The ControllerRevision of `owner`'s current template, `<owner>-<hash>`
/// (created when missing, numbered after the owner's others, with the
/// template as upstream stores it: a `$patch: replace` of `spec.template`).
/// Returns its name, or None when it could not be created.
fn ensure_revision(store: &Store, revisions: &Owned, kind: &str, owner: &Obj, hash: &str, template: &Value) -> Option<String> {
    let name = format!("{}-{hash}", owner.name());
    let mine: Vec<&Arc<Obj>> = revisions.of_owner(owner).collect();
    let number = |r: &Obj| r.value.get("revision").and_then(Value::as_i64).unwrap_or(0);
    if let Some(r) = mine.iter().find(|r| r.name() == name) {
        // A template seen before (`rollout undo`) becomes the newest
        // revision again, as upstream renumbers it.
        let newest_other = mine.iter().filter(|o| o.name() != name).map(|o| number(o)).max().unwrap_or(0);
        if number(r) <= newest_other {
            let _ = store.modify(CONTROLLERREVISIONS, owner.namespace(), &name, Some(r.uid()), |v| {
                let mut n = v.clone();
                n.as_object_mut()?.insert("revision".into(), json!(newest_other + 1));
                Some(n)
            });
        }
        return Some(name);
    }
    let revision = mine.iter().map(|r| number(r)).max().unwrap_or(0) + 1;
    let mut data_template = template.clone();
    if let Some(t) = data_template.as_object_mut() {
        t.insert("$patch".into(), json!("replace"));
    }
    let mut labels = template.at("/metadata/labels").cloned().unwrap_or_else(|| json!({}));
    if let Some(l) = labels.as_object_mut() {
        l.insert("controller.kubernetes.io/hash".into(), json!(hash));
    }
    let cr = json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {"name": name, "namespace": owner.namespace(), "labels": labels,
            "ownerReferences": owner_ref(kind, &owner.value)},
        "data": {"spec": {"template": data_template}},
        "revision": revision,
    });
    match store.create(CONTROLLERREVISIONS, owner.namespace(), cr) {
        Ok(_) => Some(name),
        Err(e) if e.code() == 409 => Some(name),
        Err(e) => {
            tracing::debug!(owner = owner.name(), error = %e, "creating a ControllerRevision failed");
            None
        }
    }
}

/// `spec.revisionHistoryLimit` of a StatefulSet or DaemonSet (upstream
/// defaults it to 10; a negative one keeps none).
fn history_limit(owner: &Value) -> usize {
    owner.at("/spec/revisionHistoryLimit").and_then(Value::as_i64).unwrap_or(10).max(0) as usize
}

/// `owner`'s ControllerRevisions not being deleted, the oldest first
/// (upstream's `SortControllerRevisions`: by revision number, then
/// creation time, then name).
fn revisions_oldest_first<'a>(revisions: &'a Owned, owner: &'a Obj) -> Vec<&'a Arc<Obj>> {
    let mut mine: Vec<&Arc<Obj>> = revisions.of_owner(owner).filter(|r| !is_deleting(&r.value)).collect();
    mine.sort_by(|a, b| {
        let number = |r: &Obj| r.value.get("revision").and_then(Value::as_i64).unwrap_or(0);
        number(a)
            .cmp(&number(b))
            .then_with(|| s(&a.value, "/metadata/creationTimestamp").cmp(s(&b.value, "/metadata/creationTimestamp")))
            .then_with(|| a.name().cmp(b.name()))
    });
    mine
}

/// The template a ControllerRevision recorded (None when it is gone).
fn revision_template(store: &Store, ns: &str, name: &str) -> Option<Value> {
    let cr = store.get(CONTROLLERREVISIONS, ns, name).ok()?;
    let mut t = cr.value.at("/data/spec/template")?.clone();
    t.as_object_mut()?.remove("$patch");
    Some(t)
}

/// An int-or-percent of `total` (upstream `GetScaledValueFromIntOrPercent`);
/// `default` when absent or malformed.
fn scaled(v: Option<&Value>, total: i64, round_up: bool, default: i64) -> i64 {
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(default),
        Some(Value::String(t)) => match t.strip_suffix('%').and_then(|x| x.trim().parse::<i64>().ok()) {
            Some(pct) if round_up => (pct * total + 99) / 100,
            Some(pct) => pct * total / 100,
            None => t.parse().unwrap_or(default),
        },
        _ => default,
    }
}

/// Add the pod-template-hash label to a template.
fn crate_label(tmpl: &mut Value, hash: &str) {
    let Some(t) = tmpl.as_object_mut() else { return };
    let meta = t.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    if let Some(m) = meta.as_object_mut() {
        let labels = m.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert(POD_TEMPLATE_HASH.into(), json!(hash));
        }
    }
}

/// A store with the `default` namespace, for the controllers' unit tests.
#[cfg(test)]
fn test_store() -> Store {
    let store = Store::new(super::store::StoreConfig::default());
    store
        .create(res::NAMESPACES, "", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}))
        .unwrap_or_else(|e| panic!("{e}"));
    store
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_constants_name_their_kinds() {
        for (r, kind) in [(STATEFULSETS, "StatefulSet"), (DAEMONSETS, "DaemonSet"), (CONTROLLERREVISIONS, "ControllerRevision"), (JOBS, "Job")] {
            assert_eq!(res::RESOURCES[r].kind, kind);
        }
        assert_eq!(scaled(Some(&json!("50%")), 3, true, 1), 2);
        assert_eq!(scaled(None, 3, true, 1), 1);
    }

    #[test]
    fn rolling_bounds_follow_upstream_defaults() {
        assert_eq!(rolling_bounds(&json!({}), 10), (3, 2));
        assert_eq!(rolling_bounds(&json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}}}), 10), (0, 1));
        assert_eq!(rolling_bounds(&json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 1}}}}), 3), (2, 1));
    }

    #[test]
    fn surplus_pods_go_unbound_first_then_newest() {
        let p = |node: &str, phase: &str, t: &str| json!({"spec": {"nodeName": node}, "status": {"phase": phase}, "metadata": {"creationTimestamp": t}});
        let mut pods = [p("n1", "Running", "2026-01-01T00:00:01Z"), p("", "Pending", "2026-01-01T00:00:00Z"), p("n1", "Running", "2026-01-01T00:00:02Z")];
        pods.sort_by_key(deletion_rank);
        assert_eq!(s(&pods[0], "/spec/nodeName"), "");
        assert_eq!(s(&pods[1], "/metadata/creationTimestamp"), "2026-01-01T00:00:02Z");
        assert_eq!(template_hash(&json!({"a": 1})), template_hash(&json!({"a": 1})));
        assert_ne!(template_hash(&json!({"a": 1})), template_hash(&json!({"a": 2})));
    }
}

