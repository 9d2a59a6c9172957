//! The DaemonSet controller (upstream `pkg/controller/daemon`), in short:
//! one pod per node that should run it, placed by the scheduler. Whether a
//! node should run the pod is upstream's `NodeShouldRunDaemonPod`: the
//! template's nodeSelector and required node affinity select the node, and
//! no taint with effect NoSchedule or NoExecute is left untolerated by the
//! template's tolerations plus the default DaemonSet tolerations; a pod
//! already there keeps running unless the selection fails or an untolerated
//! NoExecute taint appears. Each pod keeps the template's `schedulerName`
//! and gets a required node affinity naming its node (`matchFields
//! metadata.name In [<node>]`, replacing the template's required terms, as
//! upstream's `ReplaceDaemonSetPodNodeNameNodeAffinity`), the default
//! tolerations (not-ready and unreachable NoExecute; disk-, memory- and
//! pid-pressure and unschedulable NoSchedule; network-unavailable NoSchedule
//! with hostNetwork), and the `controller-revision-hash` and
//! `pod-template-generation` labels. Node additions, deletions and label or
//! taint changes create and delete pods; a failed pod is replaced; extra
//! pods on a node go (the oldest stays).
//!
//! `RollingUpdate` (the default) deletes pods of an older revision while
//! no more than `maxUnavailable` (default 1; int or percent of the desired
//! number, rounded up) nodes lack an available pod; the replacement follows
//! once the old pod is gone. `OnDelete` waits for the user. Beyond
//! `revisionHistoryLimit` (default 10) old ControllerRevisions, the oldest
//! no pod uses are deleted (upstream's `cleanupHistory`).
//!
//! Simplified: no `maxSurge`, no `minReadySeconds` (ready is available),
//! no backoff on failed pods.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use crate::jsonptr::Pointer as _;
use serde_json::{Value, json};

use super::{CONTROLLER_REVISION_HASH, Owned, active, delete_obj, ensure_revision, history_limit, is_deleting, list, meta_map, pod_from_template, revisions_oldest_first, s, scaled, template_hash, write_status};
use crate::resources::{CONTROLLERREVISIONS, DAEMONSETS, NODES, PODS};
use crate::store::{Obj, Store};
use berth_model::selector::{Labels, NodeSelector};
use berth_model::taints::{Effect, Taint, Toleration, tolerated};

/// The label carrying the DaemonSet's generation its pod was made at.
pub const POD_TEMPLATE_GENERATION: &str = "pod-template-generation";

/// The tolerations every DaemonSet pod gets (upstream
/// `AddOrUpdateDaemonPodTolerations`): (key, effect).
const DEFAULT_TOLERATIONS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];
/// Added when the pod uses the host network.
const NETWORK_UNAVAILABLE: (&str, &str) = ("node.kubernetes.io/network-unavailable", "NoSchedule");

/// The template's placement constraints, compiled once per DaemonSet.
struct Placement {
    node_selector: Labels,
    required: Option<NodeSelector>,
    tolerations: Vec<Toleration>,
}

impl Placement {
    /// Compiles the template's nodeSelector, required node affinity and
    /// tolerations (with the defaults). An error names the field.
    fn of(template: &Value) -> Result<Self, String> {
        let spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
        let node_selector: Labels = match spec.get("nodeSelector") {
            None | Some(Value::Null) => Labels::new(),
            Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("spec.template.spec.nodeSelector: {e}"))?,
        };
        let required = match spec.at("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let path = "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
                let ns: core::NodeSelector = serde_json::from_value(v.clone()).map_err(|e| format!("{path}: {e}"))?;
                Some(NodeSelector::compile(&ns, path)?)
            }
        };
        let tolerations: Vec<core::Toleration> = match spec.get("tolerations") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("spec.template.spec.tolerations: {e}"))?,
        };
        let mut tolerations: Vec<Toleration> = tolerations.iter().map(Toleration::from_api).collect();
        let host_network = spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);
        for (key, effect) in default_tolerations(host_network) {
            tolerations.push(Toleration { key: key.into(), exists: true, bad_operator: false, value: String::new(), effect: Some(Effect::parse(effect)) });
        }
        Ok(Self { node_selector, required, tolerations })
    }

    /// (should run, should continue running) on `node` (upstream `NodeShouldRunDaemonPod`).
    fn should_run(&self, node: &Value) -> (bool, bool) {
        let name = s(node, "/metadata/name");
        let labels: Labels = node.at("/metadata/labels").and_then(|l| serde_json::from_value(l.clone()).ok()).unwrap_or_default();
        let selected = self.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v)) && self.required.as_ref().is_none_or(|r| r.matches(name, &labels));
        if !selected {
            return (false, false);
        }
        let taints: Vec<Taint> = node
            .at("/spec/taints")
            .and_then(|t| serde_json::from_value::<Vec<core::Taint>>(t.clone()).ok())
            .unwrap_or_default()
            .iter()
            .map(Taint::from_api)
            .collect();
        let untolerated = |effect: Effect| taints.iter().any(|t| t.effect == effect && !tolerated(&self.tolerations, t));
        let no_execute = untolerated(Effect::NoExecute);
        (!no_execute && !untolerated(Effect::NoSchedule), !no_execute)
    }
}

fn default_tolerations(host_network: bool) -> impl Iterator<Item = (&'static str, &'static str)> {
    DEFAULT_TOLERATIONS.iter().copied().chain(host_network.then_some(NETWORK_UNAVAILABLE))
}

/// The node a daemon pod is for: its nodeName, else the node its required
/// affinity names (upstream `GetTargetNodeName`).
fn target_node(p: &Value) -> Option<&str> {
    let bound = s(p, "/spec/nodeName");
    if !bound.is_empty() {
        return Some(bound);
    }
    p.at("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")?
        .as_array()?
        .iter()
        .flat_map(|t| t.get("matchFields").and_then(Value::as_array).into_iter().flatten())
        .find(|f| s(f, "/key") == "metadata.name" && s(f, "/operator") == "In")
        .and_then(|f| f.at("/values/0"))
        .and_then(Value::as_str)
}

/// The daemon pod for `node`.
fn new_pod(ds: &Obj, template: &Value, hash: &str, node: &str) -> Value {
    let mut pod = pod_from_template(template, "DaemonSet", ds, None);
    if let Some(l) = meta_map(&mut pod, "labels") {
        l.insert(CONTROLLER_REVISION_HASH.into(), json!(hash));
        let generation = ds.value.at("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
        l.insert(POD_TEMPLATE_GENERATION.into(), json!(generation.to_string()));
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return pod };
    // ReplaceDaemonSetPodNodeNameNodeAffinity: the required terms become the one naming the node.
    let term = json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]});
    let affinity = spec.entry("affinity").or_insert_with(|| json!({}));
    if !affinity.is_object() {
        *affinity = json!({});
    }
    if let Some(a) = affinity.as_object_mut() {
        let na = a.entry("nodeAffinity").or_insert_with(|| json!({}));
        if !na.is_object() {
            *na = json!({});
        }
        if let Some(na) = na.as_object_mut() {
            match na.get_mut("requiredDuringSchedulingIgnoredDuringExecution").and_then(Value::as_object_mut) {
                Some(req) => {
                    req.insert("nodeSelectorTerms".into(), term["nodeSelectorTerms"].clone());
                }
                None => {
                    na.insert("requiredDuringSchedulingIgnoredDuringExecution".into(), term);
                }
            }
        }
    }
    // AddOrUpdateDaemonPodTolerations.
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if !tolerations.is_array() {
        *tolerations = json!([]);
    }
    if let Some(ts) = tolerations.as_array_mut() {
        for (key, effect) in default_tolerations(host_network) {
            let t = json!({"key": key, "operator": "Exists", "effect": effect});
            // An equal toleration is not added twice.
            ts.retain(|x| !(s(x, "/key") == key && s(x, "/effect") == effect && s(x, "/operator") == "Exists" && s(x, "/value").is_empty()));
            ts.push(t);
        }
    }
    pod
}

/// One pass over every DaemonSet.
pub(super) fn sync(store: &Store, pods: &Owned, burst: usize) {
    let nodes = list(store, NODES, None);
    let revisions = Owned::of(store, CONTROLLERREVISIONS);
    for ds in list(store, DAEMONSETS, None) {
        if !is_deleting(&ds.value) {
            sync_one(store, pods, &revisions, &nodes, &ds, burst);
        }
    }
}

fn sync_one(store: &Store, pods: &Owned, revisions: &Owned, nodes: &[Arc<Obj>], ds: &Arc<Obj>, burst: usize) {
    let template = ds.value.at("/spec/template").cloned().unwrap_or_else(|| json!({}));
    let placement = match Placement::of(&template) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(daemonset = ds.name(), error = %e, "the pod template cannot be placed");
            return;
        }
    };
    let hash = template_hash(&template);
    if ensure_revision(store, revisions, "DaemonSet", ds, &hash, &template).is_none() {
        return;
    }
    let mut by_node: HashMap<&str, Vec<&Arc<Obj>>> = HashMap::new();
    for p in pods.of_owner(ds) {
        if let Some(n) = target_node(&p.value) {
            by_node.entry(n).or_default().push(p);
        }
    }
    let mut budget = burst;
    let (mut desired, mut scheduled, mut misscheduled, mut ready, mut updated) = (0i64, 0i64, 0i64, 0i64, 0i64);
    // Nodes that should run the pod and have an old-revision pod: (pod, available).
    let mut old: Vec<(&Arc<Obj>, bool)> = Vec::new();
    let mut unavailable = 0i64;
    let node_names: std::collections::HashSet<&str> = nodes.iter().map(|n| n.name()).collect();
    for node in nodes {
        let (should_run, should_continue) = placement.should_run(&node.value);
        let mut here: Vec<&Arc<Obj>> = by_node.get(node.name()).cloned().unwrap_or_default();
        here.sort_by(|a, b| s(&a.value, "/metadata/creationTimestamp").cmp(s(&b.value, "/metadata/creationTimestamp")).then_with(|| a.name().cmp(b.name())));
        let running: Vec<&Arc<Obj>> = here.iter().filter(|p| active(&p.value)).copied().collect();
        if should_run {
            desired += 1;
            if !running.is_empty() {
                scheduled += 1;
            }
        } else if !running.is_empty() {
            misscheduled += 1;
        }
        // A failed pod is replaced.
        for p in here.iter().filter(|p| !is_deleting(&p.value) && s(&p.value, "/status/phase") == "Failed") {
            if budget > 0 {
                budget -= 1;
                delete_obj(store, PODS, p);
            }
        }
        if should_continue && running.len() > 1 {
            for p in &running[1..] {
                if budget > 0 {
                    budget -= 1;
                    delete_obj(store, PODS, p);
                }
            }
        } else if !should_continue {
            for p in &running {
                if budget > 0 {
                    budget -= 1;
                    delete_obj(store, PODS, p);
                }
            }
        }
        if !should_run && !should_continue {
            continue;
        }
        let terminating = here.iter().any(|p| is_deleting(&p.value));
        match running.first() {
            None if should_run && !terminating && budget > 0 => {
                budget -= 1;
                unavailable += 1;
                if let Err(e) = store.create(PODS, ds.namespace(), new_pod(ds, &template, &hash, node.name())) {
                    tracing::debug!(daemonset = ds.name(), node = node.name(), error = %e, "creating a pod failed");
                }
            }
            None => unavailable += i64::from(should_run),
            Some(p) => {
                let is_ready = crate::resources::pod_healthy(&p.value);
                if should_run {
                    ready += i64::from(is_ready);
                    unavailable += i64::from(!is_ready);
                }
                if s(&p.value, &format!("/metadata/labels/{CONTROLLER_REVISION_HASH}")) == hash {
                    updated += i64::from(should_run);
                } else {
                    old.push((p, is_ready));
                }
            }
        }
    }
    // Pods for nodes that are gone.
    for (n, ps) in &by_node {
        if !node_names.contains(n) {
            for p in ps.iter().filter(|p| !is_deleting(&p.value)) {
                delete_obj(store, PODS, p);
            }
        }
    }
    // Rolling update: old pods go, unavailable ones first, within maxUnavailable.
    if s(&ds.value, "/spec/updateStrategy/type") != "OnDelete" {
        let max_unavailable = scaled(ds.value.at("/spec/updateStrategy/rollingUpdate/maxUnavailable"), desired, true, 1).max(1);
        old.sort_by_key(|(_, available)| *available);
        for (p, available) in old {
            if budget == 0 {
                break;
            }
            if available {
                if unavailable >= max_unavailable {
                    break;
                }
                unavailable += 1;
            }
            budget -= 1;
            delete_obj(store, PODS, p);
        }
    }
    let status = json!({
        "observedGeneration": ds.value.at("/metadata/generation").cloned().unwrap_or(json!(1)),
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": scheduled,
        "numberMisscheduled": misscheduled,
        "numberReady": ready,
        "numberAvailable": ready,
        "numberUnavailable": (desired - ready).max(0),
        "updatedNumberScheduled": updated,
    });
    write_status(store, DAEMONSETS, ds, status);
    cleanup_history(store, pods, revisions, ds, &hash);
}

/// Upstream's `cleanupHistory`: beyond `revisionHistoryLimit` revisions
/// other than the current one, the oldest are deleted, skipping those a
/// pod still uses (by its `controller-revision-hash`, the template hash).
fn cleanup_history(store: &Store, pods: &Owned, revisions: &Owned, ds: &Obj, hash: &str) {
    let current = format!("{}-{hash}", ds.name());
    let old: Vec<&Arc<Obj>> = revisions_oldest_first(revisions, ds).into_iter().filter(|r| r.name() != current).collect();
    let mut to_kill = old.len().saturating_sub(history_limit(&ds.value));
    if to_kill == 0 {
        return;
    }
    let live: std::collections::HashSet<String> =
        pods.of_owner(ds).map(|p| s(&p.value, &format!("/metadata/labels/{CONTROLLER_REVISION_HASH}"))).filter(|h| !h.is_empty()).map(|h| format!("{}-{h}", ds.name())).collect();
    for r in old {
        if to_kill == 0 {
            break;
        }
        if live.contains(r.name()) {
            continue;
        }
        delete_obj(store, CONTROLLERREVISIONS, r);
        to_kill -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::test_store;

    fn node(name: &str, labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}})
    }

    #[test]
    fn node_should_run_follows_selector_affinity_and_taints() {
        let p = Placement::of(&json!({"spec": {"nodeSelector": {"role": "edge"}}})).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.should_run(&node("a", json!({"role": "edge"}), json!([]))), (true, true));
        assert_eq!(p.should_run(&node("b", json!({"role": "core"}), json!([]))), (false, false));
        // NoSchedule: not started, but a running pod stays; NoExecute: neither.
        assert_eq!(p.should_run(&node("c", json!({"role": "edge"}), json!([{"key": "x", "effect": "NoSchedule"}]))), (false, true));
        assert_eq!(p.should_run(&node("d", json!({"role": "edge"}), json!([{"key": "x", "effect": "NoExecute"}]))), (false, false));
        // The default tolerations cover unschedulable and not-ready nodes.
        assert_eq!(p.should_run(&node("e", json!({"role": "edge"}), json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}, {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]))), (true, true));
        let p = Placement::of(&json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}]}}}, "tolerations": [{"key": "x", "operator": "Exists"}]}}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.should_run(&node("a", json!({}), json!([{"key": "x", "effect": "NoExecute"}]))), (true, true));
        assert_eq!(p.should_run(&node("b", json!({}), json!([]))), (false, false));
        assert!(Placement::of(&json!({"spec": {"tolerations": "nope"}})).is_err_and(|e| e.contains("spec.template.spec.tolerations")));
    }

    /// Upstream's `cleanupHistory` counts every old revision against the
    /// limit and skips those a pod uses: with limit 1, a pod still on the
    /// first of four templates (OnDelete) keeps it, and the two between go.
    #[test]
    fn old_revisions_beyond_the_limit_go_unless_a_pod_uses_them() {
        let store = test_store();
        store.create(NODES, "", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})).unwrap_or_else(|e| panic!("{e}"));
        store
            .create(
                DAEMONSETS,
                "default",
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "default"},
                    "spec": {"revisionHistoryLimit": 1, "updateStrategy": {"type": "OnDelete"}, "selector": {"matchLabels": {"app": "agent"}},
                        "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "c", "image": "agent:1"}]}}}}),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let pass = || sync(&store, &Owned::of(&store, PODS), 500);
        pass();
        pass();
        for image in ["agent:2", "agent:3", "agent:4"] {
            let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}).to_string();
            store.patch(DAEMONSETS, "default", "agent", crate::store::PatchType::Merge, patch.as_bytes(), false).unwrap_or_else(|e| panic!("{e}"));
            pass();
            pass();
        }
        let mut left: Vec<i64> = list(&store, CONTROLLERREVISIONS, None).iter().map(|r| r.value["revision"].as_i64().unwrap_or(0)).collect();
        left.sort_unstable();
        assert_eq!(left, [1, 4]);
        assert_eq!(list(&store, PODS, None).len(), 1);
    }

    #[test]
    fn pods_name_their_node_and_tolerate_the_defaults() {
        let store = test_store();
        let ds = store
            .create(
                DAEMONSETS,
                "default",
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "default"},
                    "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {"metadata": {"labels": {"app": "agent"}},
                        "spec": {"schedulerName": "berth", "hostNetwork": true, "containers": [{"name": "c", "image": "x"}],
                            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]}}},
                            "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}}}}),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let pod = new_pod(&ds, &ds.value["spec"]["template"], "h1", "node-3");
        assert_eq!(s(&pod, "/spec/schedulerName"), "berth");
        assert_eq!(
            pod.at("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"),
            Some(&json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-3"]}]}]}))
        );
        assert_eq!(target_node(&pod), Some("node-3"));
        let tolerations = pod["spec"]["tolerations"].as_array().map(Vec::len);
        assert_eq!(tolerations, Some(7), "six defaults plus network-unavailable, the user's unschedulable not doubled");
        assert_eq!(s(&pod, "/metadata/labels/controller-revision-hash"), "h1");
        assert_eq!(s(&pod, "/metadata/labels/pod-template-generation"), "1");
        assert!(s(&pod, "/metadata/generateName").starts_with("agent-"));
    }
}
