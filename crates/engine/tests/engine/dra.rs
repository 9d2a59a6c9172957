//! DynamicResources through the offline engine: PreEnqueue's gate, PostFilter's
//! deallocation, and bad input (selectors that do not compile, claims over
//! the per-claim device limit) that keeps one pod pending and no other.
#![allow(clippy::unwrap_used)]

use berth_engine::config::Config;
use berth_engine::framework::{CycleOptions, Events};
use berth_engine::offline::{Cluster, Engine};

fn node(name: &str, cpu: &str) -> String {
    format!("---\napiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}\nstatus: {{allocatable: {{cpu: '{cpu}', memory: 16Gi, pods: '110'}}}}\n")
}

fn class(name: &str, expression: &str) -> String {
    format!("---\napiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: {name}}}\nspec:\n  selectors:\n  - cel:\n      expression: '{expression}'\n")
}

/// A node-local slice of `n` devices of driver gpu.example.com.
fn slice(node: &str, n: usize) -> String {
    let devices: Vec<String> = (0..n).map(|i| format!("  - name: gpu-{i}\n")).collect();
    format!("---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {node}-gpus}}\nspec:\n  driver: gpu.example.com\n  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}\n  nodeName: {node}\n  devices:\n{}", devices.concat())
}

/// An unallocated claim for `count` devices of `class` (`selector`: a CEL
/// expression of the request, or empty).
fn claim(name: &str, class: &str, count: u32, selector: &str) -> String {
    let sel = if selector.is_empty() { String::new() } else { format!("\n        selectors:\n        - cel:\n            expression: '{selector}'") };
    format!("---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, namespace: default, uid: uid-{name}}}\nspec:\n  devices:\n    requests:\n    - name: gpu\n      exactly:\n        deviceClassName: {class}\n        count: {count}{sel}\n")
}

/// A claim allocated to gpu-0 of `node` and reserved for `reserved` (pod names).
fn allocated_claim(name: &str, node: &str, reserved: &[&str]) -> String {
    let reserved: Vec<String> = reserved.iter().map(|p| format!("  - {{resource: pods, name: {p}, uid: uid-{p}}}\n")).collect();
    format!(
        "---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, namespace: default, uid: uid-{name}}}\nspec:\n  devices:\n    requests:\n    - name: gpu\n      exactly: {{deviceClassName: gpu}}\nstatus:\n  allocation:\n    devices:\n      results:\n      - {{request: gpu, driver: gpu.example.com, pool: {node}, device: gpu-0}}\n    nodeSelector:\n      nodeSelectorTerms:\n      - matchFields:\n        - {{key: metadata.name, operator: In, values: [{node}]}}\n  reservedFor:{}",
        if reserved.is_empty() { " []\n".to_string() } else { format!("\n{}", reserved.concat()) }
    )
}

/// A pending pod (cpu request `cpu`) with one pod claim `gpu`: `source` is
/// `resourceClaimName: X` or `resourceClaimTemplateName: X`; `status` its
/// status block (or empty).
fn pod(name: &str, cpu: &str, source: &str, status: &str) -> String {
    format!("---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, uid: uid-{name}}}\nspec:\n  containers:\n  - name: c\n    image: i\n    resources: {{requests: {{cpu: {cpu}}}, claims: [{{name: gpu}}]}}\n  resourceClaims:\n  - name: gpu\n    {source}\n{status}")
}

fn engine(docs: &[String]) -> Engine {
    let cluster = Cluster::parse(&docs.concat(), "dump.yaml").unwrap();
    Engine::new(&Config::default_config(), cluster, 1)
}

fn placement(e: &mut Engine) -> Vec<(String, Option<String>, Option<String>)> {
    e.simulate().placements.into_iter().map(|p| (p.pod, p.node, p.message)).collect()
}

/// Upstream `TestPlugin` (PreEnqueue rows) as a gate: a pod whose claim is
/// missing, not generated yet, not the pod's or being deleted never enters
/// activeQ; the gate names DynamicResources and waits for claim events.
#[test]
fn pre_enqueue_gates_pods_whose_claims_are_not_there() {
    let generated = |claim: &str| format!("resourceClaimTemplateName: t\nstatus:\n  resourceClaimStatuses:\n  - {{name: gpu, resourceClaimName: {claim}}}\n");
    let mut owned = claim("p-owned-gpu-x", "gpu", 1, "");
    owned = owned.replace("uid: uid-p-owned-gpu-x}", "uid: uid-p-owned-gpu-x, ownerReferences: [{apiVersion: v1, kind: Pod, name: p-owned, uid: uid-p-owned, controller: true}]}");
    let foreign = claim("p-foreign-gpu-x", "gpu", 1, "").replace("uid: uid-p-foreign-gpu-x}", "uid: uid-p-foreign-gpu-x, ownerReferences: [{apiVersion: v1, kind: Pod, name: p-foreign, uid: uid-someone-else, controller: true}]}");
    let deleting = claim("deleting", "gpu", 1, "").replace("uid: uid-deleting}", "uid: uid-deleting, deletionTimestamp: '2026-01-01T00:00:00Z', finalizers: [x]}");
    let docs = [
        node("node-a", "4"),
        class("gpu", "device.driver == \"gpu.example.com\""),
        slice("node-a", 4),
        owned,
        foreign,
        deleting,
        pod("p-missing", "100m", "resourceClaimName: nowhere", ""),
        pod("p-not-created", "100m", "resourceClaimTemplateName: t", ""),
        pod("p-foreign", "100m", &generated("p-foreign-gpu-x"), ""),
        pod("p-deleting", "100m", "resourceClaimName: deleting", ""),
        pod("p-owned", "100m", &generated("p-owned-gpu-x"), ""),
    ];
    let mut e = engine(&docs);
    let fw = &e.frameworks[0];
    let snap = &e.cluster.snapshot;
    let want = [
        ("default/p-missing", Some(r#"resourceclaim.resource.k8s.io "nowhere" not found"#)),
        ("default/p-not-created", Some(r#"pod "default/p-not-created": ResourceClaim not created yet"#)),
        ("default/p-foreign", Some("ResourceClaim default/p-foreign-gpu-x was not created for pod default/p-foreign (pod is not owner)")),
        ("default/p-deleting", Some(r#"resourceclaim "deleting" is being deleted"#)),
        ("default/p-owned", None),
    ];
    for (key, message) in want {
        let p = e.cluster.pending.iter().find(|p| p.key() == key).unwrap();
        let s = fw.run_pre_enqueue_in(p, snap);
        match message {
            None => assert!(s.is_success(), "{key}: {s:?}"),
            Some(m) => {
                assert!(!s.is_success(), "{key}");
                assert_eq!(s.plugin, "DynamicResources", "{key}");
                assert_eq!(s.message(), m, "{key}");
                // Without a cluster view the gate lets it in (PreFilter checks again).
                assert!(fw.run_pre_enqueue(p).is_success(), "{key}");
                assert!(fw.gate_events(s.plugin).intersects(Events::RESOURCE_CLAIM));
            }
        }
    }
    let x = e.explain("default/p-missing").unwrap();
    assert_eq!(x.message.as_deref(), Some(r#"not scheduled: resourceclaim.resource.k8s.io "nowhere" not found (DynamicResources)"#));
    let got = placement(&mut e);
    let placed: Vec<&str> = got.iter().filter(|p| p.1.is_some()).map(|p| p.0.as_str()).collect();
    assert_eq!(placed, vec!["default/p-owned"]);
    let deleting = got.iter().find(|p| p.0 == "default/p-deleting").unwrap();
    assert_eq!(deleting.2.as_deref(), Some(r#"resourceclaim "deleting" is being deleted"#));
}

/// Upstream's PostFilter: the pod's claim is allocated on node-a, where the
/// pod does not fit (cpu), and reserved for no one: it is deallocated, and
/// the next attempt allocates it on node-b. A claim reserved for another
/// pod is left alone.
#[test]
fn post_filter_deallocates_a_claim_usable_nowhere() {
    let docs = [
        node("node-a", "100m"),
        node("node-b", "4"),
        class("gpu", "device.driver == \"gpu.example.com\""),
        slice("node-a", 1),
        slice("node-b", 1),
        allocated_claim("stuck", "node-a", &[]),
        pod("p", "500m", "resourceClaimName: stuck", ""),
    ];
    let mut e = engine(&docs);
    let p = e.cluster.pending[0].clone();
    let (o, _) = e.frameworks[0].schedule(&p, &e.cluster.snapshot, CycleOptions::default());
    assert_eq!(o.selected, None);
    assert_eq!(o.deallocations.len(), 1, "{:?}", o.message);
    assert_eq!((o.deallocations[0].name.as_str(), o.deallocations[0].uid.as_str(), o.deallocations[0].pod_uid.as_str()), ("stuck", "uid-stuck", "uid-p"));
    let m = o.message.unwrap_or_default();
    assert!(m.contains("resourceclaim not available on the node") && m.contains("deallocation of ResourceClaim completed"), "{m}");
    let got = placement(&mut e);
    assert_eq!(got[0].1.as_deref(), Some("node-b"), "{got:?}");

    // Reserved for another (bound) pod: not deallocated.
    let mut other = pod("holder", "100m", "resourceClaimName: held", "");
    other = other.replace("spec:\n  containers", "spec:\n  nodeName: node-a\n  containers");
    let docs = [
        node("node-a", "100m"),
        node("node-b", "4"),
        class("gpu", "device.driver == \"gpu.example.com\""),
        slice("node-a", 1),
        slice("node-b", 1),
        allocated_claim("held", "node-a", &["holder"]),
        other,
        pod("p", "500m", "resourceClaimName: held", ""),
    ];
    let e = engine(&docs);
    let p = e.cluster.pending.iter().find(|p| p.name == "p").unwrap().clone();
    let (o, _) = e.frameworks[0].schedule(&p, &e.cluster.snapshot, CycleOptions::default());
    assert_eq!(o.selected, None);
    assert!(o.deallocations.is_empty());
    // Upstream v1.37's PostFilter gives no reason when it deallocates
    // nothing; 500m over node-a's 100m is unresolvable, so preemption helps
    // on neither node.
    assert_eq!(
        o.message.as_deref(),
        Some("0/2 nodes are available: 1 Insufficient cpu, 1 resourceclaim not available on the node. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
    );
}

/// A DeviceClass or a claim whose selector does not compile keeps its pod
/// pending with a message naming the class or the claim and cel's error;
/// the other pods are placed.
#[test]
fn selectors_that_do_not_compile_keep_only_their_pods_pending() {
    let docs = [
        node("node-a", "4"),
        class("gpu", "device.driver == \"gpu.example.com\""),
        class("broken", "device.driver =="),
        slice("node-a", 4),
        claim("by-class", "broken", 1, ""),
        claim("by-claim", "gpu", 1, "device.attributes[\"x\"].y &&& true"),
        claim("fine", "gpu", 1, ""),
        pod("p-class", "100m", "resourceClaimName: by-class", ""),
        pod("p-claim", "100m", "resourceClaimName: by-claim", ""),
        pod("p-fine", "100m", "resourceClaimName: fine", ""),
    ];
    let mut e = engine(&docs);
    let got = placement(&mut e);
    let get = |k: &str| got.iter().find(|p| p.0 == k).unwrap().clone();
    assert_eq!(get("default/p-fine").1.as_deref(), Some("node-a"));
    let (_, node, m) = get("default/p-class");
    let m = m.unwrap_or_default();
    assert!(node.is_none() && m.contains("class broken") && m.contains("CEL compile error"), "{m}");
    let (_, node, m) = get("default/p-claim");
    let m = m.unwrap_or_default();
    assert!(node.is_none() && m.contains("claim default/by-claim") && m.contains("CEL compile error"), "{m}");
}

/// A claim asking for more devices than a claim may hold is refused with
/// upstream's message; the other pod is placed.
#[test]
fn a_claim_over_the_device_limit_is_refused() {
    let docs = [
        node("node-a", "4"),
        class("gpu", "device.driver == \"gpu.example.com\""),
        slice("node-a", 40),
        claim("big", "gpu", 33, ""),
        claim("fine", "gpu", 2, ""),
        pod("p-big", "100m", "resourceClaimName: big", ""),
        pod("p-fine", "100m", "resourceClaimName: fine", ""),
    ];
    let mut e = engine(&docs);
    let got = placement(&mut e);
    let get = |k: &str| got.iter().find(|p| p.0 == k).unwrap().clone();
    assert_eq!(get("default/p-fine").1.as_deref(), Some("node-a"));
    let (_, node, m) = get("default/p-big");
    let m = m.unwrap_or_default();
    assert!(node.is_none(), "{m}");
    assert!(m.contains("claim default/big: number of requested devices 33 exceeds the claim limit of 32"), "{m}");
}

/// The failure message is upstream's word for word (v1.37: DynamicResources'
/// PostFilter adds nothing when it deallocates nothing); explain's `detail`
/// names the claim that kept the pod out (upstream names none, and a user
/// is left to guess). A pod that fails for cpu only, on nodes whose devices
/// it could have, gets no detail.
#[test]
fn the_failure_detail_names_the_claim_no_node_can_allocate() {
    let docs = [
        node("node-a", "4"),
        node("node-b", "200m"),
        class("gpu", "device.driver == \"gpu.example.com\""),
        slice("node-a", 1),
        slice("node-b", 1),
        claim("two", "gpu", 2, ""),
        claim("one", "gpu", 1, ""),
        pod("p-two", "100m", "resourceClaimName: two", ""),
        pod("p-cpu", "5", "resourceClaimName: one", ""),
    ];
    let mut e = engine(&docs);
    let x = e.explain("default/p-two").unwrap();
    assert_eq!(x.message.as_deref(), Some("0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."));
    assert_eq!(x.detail.as_deref(), Some("ResourceClaim default/two cannot be allocated on any node that passed the other filters."));
    let x = e.explain("default/p-cpu").unwrap();
    assert!(x.message.as_deref().is_some_and(|m| m.contains("Insufficient cpu")), "{:?}", x.message);
    assert_eq!(x.detail, None);
    let got = placement(&mut e);
    let get = |k: &str| got.iter().find(|p| p.0 == k).unwrap().clone();
    let (_, node, m) = get("default/p-two");
    assert!(node.is_none());
    assert_eq!(m.as_deref(), Some("0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."));
}

/// explain names, per node, the request that cannot be met and who holds
/// the devices, and lists the devices the selected node would give;
/// simulate reports each pod's allocations.
#[test]
fn explain_and_simulate_show_devices() {
    let mut held = allocated_claim("train-3-gpu-x7k2p", "node-a", &[]);
    held = held.replace("      - {request: gpu, driver: gpu.example.com, pool: node-a, device: gpu-0}\n", "      - {request: gpu, driver: gpu.example.com, pool: node-a, device: gpu-0}\n      - {request: gpu, driver: gpu.example.com, pool: node-a, device: gpu-1}\n");
    let docs = [
        node("node-a", "4"),
        node("node-b", "4"),
        class("gpu", "device.driver == \"gpu.example.com\""),
        slice("node-a", 2),
        slice("node-b", 2),
        held,
        claim("c1", "gpu", 1, ""),
        claim("c2", "gpu", 1, ""),
        pod("p1", "100m", "resourceClaimName: c1", ""),
        pod("p2", "100m", "resourceClaimName: c2", ""),
    ];
    let mut e = engine(&docs);
    let x = e.explain("default/p1").unwrap();
    assert_eq!(x.selected.as_deref(), Some("node-b"));
    let a = x.nodes.iter().find(|n| n.name == "node-a").unwrap();
    assert!(!a.feasible);
    assert_eq!(a.details, vec!["request gpu: 2 devices of class gpu on this node, both allocated to default/train-3-gpu-x7k2p; 1 wanted".to_string()]);
    assert_eq!(x.allocations.len(), 1);
    assert_eq!((x.allocations[0].claim.as_str(), x.allocations[0].request.as_str()), ("default/c1", "gpu"));
    assert!(x.allocations[0].device.starts_with("gpu.example.com/node-b/gpu-"), "{:?}", x.allocations);
    let json = serde_json::to_value(&x).unwrap();
    assert!(json["nodes"][0].get("details").is_some() || json["nodes"][1].get("details").is_some());

    let s = e.simulate();
    let mut devices: Vec<String> = Vec::new();
    for p in &s.placements {
        assert_eq!(p.node.as_deref(), Some("node-b"), "{p:?}");
        assert_eq!(p.allocations.len(), 1, "{p:?}");
        devices.push(p.allocations[0].device.clone());
    }
    devices.sort();
    assert_eq!(devices, vec!["gpu.example.com/node-b/gpu-0", "gpu.example.com/node-b/gpu-1"]);
}

/// Upstream normalizes DynamicResources' Score (NormalizeScore,
/// DefaultNormalizeScore to 0..=100), and its weight (2) applies to the
/// normalized score. node-a offers only the pod's second choice (raw 7),
/// node-b its first (raw 8), but node-b is busier: the other plugins favor
/// node-a by more than the raw difference weighs (2 × 1) and less than the
/// normalized one (2 × (100 - 87)). Raw scores would place the pod on
/// node-a; upstream, and berth, place it on node-b.
#[test]
fn normalized_first_available_score_changes_the_node() {
    let claim = "---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c, namespace: default, uid: uid-c}\nspec:\n  devices:\n    requests:\n    - name: gpu\n      firstAvailable:\n      - name: m0\n        deviceClassName: gpu\n        selectors:\n        - cel:\n            expression: 'device.attributes[\"gpu.example.com\"].model == 0'\n      - name: m1\n        deviceClassName: gpu\n        selectors:\n        - cel:\n            expression: 'device.attributes[\"gpu.example.com\"].model == 1'\n";
    let model_slice = |node: &str, model: u8| {
        format!("---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {node}-gpus}}\nspec:\n  driver: gpu.example.com\n  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}\n  nodeName: {node}\n  devices:\n  - name: gpu-0\n    attributes:\n      model: {{int: {model}}}\n")
    };
    let busy = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: busy, namespace: default, uid: uid-busy}\nspec:\n  nodeName: node-b\n  containers:\n  - name: c\n    image: i\n    resources: {requests: {cpu: 500m}}\n".to_string();
    let docs = [
        node("node-a", "4"),
        node("node-b", "4"),
        class("gpu", "device.driver == \"gpu.example.com\""),
        model_slice("node-a", 1),
        model_slice("node-b", 0),
        claim.to_string(),
        busy,
        pod("p", "100m", "resourceClaimName: c", ""),
    ];
    let e = engine(&docs);
    let x = e.explain("default/p").unwrap();
    let get = |n: &str| x.nodes.iter().find(|k| k.name == n).unwrap();
    let dra = |n: &str| get(n).scores.as_ref().unwrap()["DynamicResources"].as_i64().unwrap();
    assert_eq!((dra("node-a"), dra("node-b")), (87, 100), "normalized 7 and 8");
    let weight = x.weights["DynamicResources"].as_i64().unwrap();
    assert_eq!(weight, 2);
    // What the other plugins give each node.
    let rest = |n: &str| get(n).total.unwrap() - weight * dra(n);
    let lead = rest("node-a") - rest("node-b");
    // Raw: 8 minus the subrequest index on each node.
    let (raw_a, raw_b) = (7, 8);
    let (raw_gap, normalized_gap) = (weight * (raw_b - raw_a), weight * (dra("node-b") - dra("node-a")));
    assert!(raw_gap < lead && lead < normalized_gap, "the other plugins favor node-a by {lead}");
    // With raw scores node-a would win; normalized, node-b does.
    assert!(rest("node-a") + weight * raw_a > rest("node-b") + weight * raw_b);
    assert_eq!(x.selected.as_deref(), Some("node-b"));
}

/// DRADeviceBindingConditions (upstream's Filter and PostFilter, v1.37):
/// the pod's claim is allocated on node-a, where the pod fits, but the
/// driver reports the device's binding failed (a bindingFailureCondition
/// True in status.devices). Filter refuses the claim on every node, and
/// PostFilter deallocates it; the next attempt allocates it afresh. With
/// the condition False the pod goes to node-a at once.
#[test]
fn a_claim_whose_binding_failed_is_usable_nowhere() {
    let with_status = |failed: &str| {
        let mut c = allocated_claim("bound-badly", "node-a", &[]);
        c = c.replace(
            "      - {request: gpu, driver: gpu.example.com, pool: node-a, device: gpu-0}\n",
            "      - {request: gpu, driver: gpu.example.com, pool: node-a, device: gpu-0, bindingConditions: [Attached], bindingFailureConditions: [AttachFailed]}\n",
        );
        c.push_str(&format!(
            "  devices:\n  - driver: gpu.example.com\n    pool: node-a\n    device: gpu-0\n    conditions:\n    - {{type: AttachFailed, status: '{failed}', reason: Timeout, message: fabric down, lastTransitionTime: '2026-01-01T00:00:00Z'}}\n"
        ));
        c
    };
    let docs = |failed: &str| {
        [
            node("node-a", "4"),
            node("node-b", "4"),
            class("gpu", "device.driver == \"gpu.example.com\""),
            slice("node-a", 1),
            slice("node-b", 1),
            with_status(failed),
            pod("p", "100m", "resourceClaimName: bound-badly", ""),
        ]
    };
    let mut e = engine(&docs("True"));
    let p = e.cluster.pending[0].clone();
    let (o, _) = e.frameworks[0].schedule(&p, &e.cluster.snapshot, CycleOptions { explain: true, ..Default::default() });
    assert_eq!(o.selected, None);
    for s in o.statuses.statuses.iter().flatten() {
        assert_eq!((s.plugin, s.message()), ("DynamicResources", "resourceclaim not available on the node".to_string()));
    }
    assert_eq!(o.deallocations.len(), 1, "{:?}", o.message);
    assert_eq!((o.deallocations[0].name.as_str(), o.deallocations[0].pod_uid.as_str()), ("bound-badly", "uid-p"));
    let m = o.message.unwrap_or_default();
    assert!(m.starts_with("0/2 nodes are available: 2 resourceclaim not available on the node. deallocation of ResourceClaim completed"), "{m}");
    // Deallocated, the claim is allocated again where the pod goes.
    let got = placement(&mut e);
    assert!(got[0].1.is_some(), "{got:?}");
    let c = e.cluster.snapshot.devices.claim("default", "bound-badly").unwrap();
    assert!(c.allocation.is_some() && c.binding_failure.is_none());

    let mut e = engine(&docs("False"));
    let p = e.cluster.pending[0].clone();
    let (o, _) = e.frameworks[0].schedule(&p, &e.cluster.snapshot, CycleOptions::default());
    assert_eq!(o.selected.map(|i| e.cluster.snapshot.nodes[i].name().to_string()).as_deref(), Some("node-a"), "{:?}", o.message);
    assert!(o.deallocations.is_empty());
    assert_eq!(placement(&mut e)[0].1.as_deref(), Some("node-a"));
}

/// Upstream v1.37's message when a PreFilter before DynamicResources'
/// (VolumeBinding's) rejects the pod: DynamicResources' PreFilter never ran,
/// so its PostFilter finds no state of its own and answers with that error,
/// "not found" (`getStateData` and `fwk.ErrNotFound`), which ends the
/// PostFilter run: preemption is not tried, and the message ends with it.
#[test]
fn a_pre_filter_rejection_before_dynamic_resources_ends_with_not_found() {
    let pvc = "---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: default}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n".to_string();
    let p = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default, uid: uid-p}\nspec:\n  containers: [{name: c, image: i}]\n  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]\n".to_string();
    let e = engine(&[node("node-a", "4"), pvc, p]);
    let x = e.explain("default/p").unwrap();
    assert_eq!(x.selected, None);
    assert_eq!(x.message.as_deref(), Some("0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"));
}

mod properties {
    //! Random slices and claims, pods scheduled in sequence (simulate): no
    //! device is in two allocations, and every bound pod's claims are
    //! allocated, reserved for it, and on its node.

    use std::collections::{HashMap, HashSet};

    use proptest::prelude::*;

    use super::{class, engine, node, pod};

    #[derive(Debug, Clone)]
    struct Spec {
        /// Per node: its devices' models (0 or 1).
        nodes: Vec<Vec<u8>>,
        /// Devices of a pool every node can use (allNodes).
        shared_pool: Vec<u8>,
        /// Devices already allocated: (node, device index) to a claim of a bound pod.
        taken: Vec<(usize, usize)>,
        /// Pending pods: their claims, each (class: any/model-0/model-1, count); and whether it also names the shared claim.
        pods: Vec<(Vec<(u8, u32)>, bool)>,
    }

    fn spec() -> impl Strategy<Value = Spec> {
        (1usize..4).prop_flat_map(|n| {
            (
                prop::collection::vec(prop::collection::vec(0u8..2, 0..4), n),
                prop::collection::vec(0u8..2, 0..3),
                prop::collection::vec((0..n, 0usize..4), 0..4),
                prop::collection::vec((prop::collection::vec((0u8..3, 1u32..3), 1..3), any::<bool>()), 1..7),
            )
                .prop_map(|(nodes, shared_pool, taken, pods)| Spec { nodes, shared_pool, taken, pods })
        })
    }

    fn slice_yaml(name: &str, pool: &str, placement: &str, models: &[u8]) -> String {
        let devices: Vec<String> = models.iter().enumerate().map(|(k, m)| format!("  - name: dev-{k}\n    attributes:\n      model: {{int: {m}}}\n")).collect();
        let list = if devices.is_empty() { " []\n".to_string() } else { format!("\n{}", devices.concat()) };
        format!("---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {name}}}\nspec:\n  driver: gpu.example.com\n  pool: {{name: {pool}, generation: 1, resourceSliceCount: 1}}\n  {placement}\n  devices:{list}")
    }

    fn claim_yaml(name: &str, class: &str, count: u32, status: &str) -> String {
        format!("---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, namespace: default, uid: uid-{name}}}\nspec:\n  devices:\n    requests:\n    - name: r\n      exactly: {{deviceClassName: {class}, count: {count}}}\n{status}")
    }

    fn build(s: &Spec) -> (String, HashMap<String, Vec<String>>) {
        let mut docs = vec![class("any", "device.driver == \"gpu.example.com\""), class("model-0", "device.attributes[\"gpu.example.com\"].model == 0"), class("model-1", "device.attributes[\"gpu.example.com\"].model == 1")];
        for (i, models) in s.nodes.iter().enumerate() {
            docs.push(node(&format!("n{i}"), "8"));
            docs.push(slice_yaml(&format!("n{i}-gpus"), &format!("n{i}"), &format!("nodeName: n{i}"), models));
        }
        docs.push(slice_yaml("shared-gpus", "shared", "allNodes: true", &s.shared_pool));
        let mut seen = HashSet::new();
        for (j, (n, k)) in s.taken.iter().enumerate() {
            if *k >= s.nodes[*n].len() || !seen.insert((*n, *k)) {
                continue;
            }
            let status = format!("status:\n  allocation:\n    devices:\n      results:\n      - {{request: r, driver: gpu.example.com, pool: n{n}, device: dev-{k}}}\n    nodeSelector:\n      nodeSelectorTerms:\n      - matchFields:\n        - {{key: metadata.name, operator: In, values: [n{n}]}}\n  reservedFor:\n  - {{resource: pods, name: holder-{j}, uid: uid-holder-{j}}}\n");
            docs.push(claim_yaml(&format!("held-{j}"), "any", 1, &status));
            docs.push(pod(&format!("holder-{j}"), "100m", &format!("resourceClaimName: held-{j}"), "").replace("spec:\n  containers", &format!("spec:\n  nodeName: n{n}\n  containers")));
        }
        docs.push(claim_yaml("shared", "any", 1, ""));
        let mut claims_of = HashMap::new();
        for (j, (claims, shared)) in s.pods.iter().enumerate() {
            let mut names = Vec::new();
            for (k, (c, count)) in claims.iter().enumerate() {
                let name = format!("p{j}-c{k}");
                let class = ["any", "model-0", "model-1"][usize::from(*c)];
                docs.push(claim_yaml(&name, class, *count, ""));
                names.push(name);
            }
            if *shared {
                names.push("shared".into());
            }
            let refs: Vec<String> = names.iter().map(|n| format!("  - {{name: {n}, resourceClaimName: {n}}}\n")).collect();
            let mut p = pod(&format!("p{j}"), "100m", "resourceClaimName: unused", "");
            p = p.replace("  resourceClaims:\n  - name: gpu\n    resourceClaimName: unused\n", &format!("  resourceClaims:\n{}", refs.concat()));
            p = p.replace("claims: [{name: gpu}]", &format!("claims: [{}]", names.iter().map(|n| format!("{{name: {n}}}")).collect::<Vec<_>>().join(", ")));
            docs.push(p);
            claims_of.insert(format!("default/p{j}"), names);
        }
        (docs.concat(), claims_of)
    }

    /// The generated clusters place pods (the property is not vacuous): two
    /// nodes with models [0, 1] and [1], one shared model-0 device, n0's
    /// dev-0 taken; p0 wants any device plus the shared claim, p1 a model-1
    /// device, p2 two model-1 devices (only n0 + shared cannot give them:
    /// n1 has one, n0 has one free).
    #[test]
    fn the_generator_places_pods() {
        let s = Spec { nodes: vec![vec![0, 1], vec![1]], shared_pool: vec![0], taken: vec![(0, 0)], pods: vec![(vec![(0, 1)], true), (vec![(2, 1)], false), (vec![(2, 2)], false)] };
        let (text, _) = build(&s);
        let mut e = engine(&[text]);
        let placed: Vec<(String, Option<String>)> = e.simulate().placements.into_iter().map(|p| (p.pod, p.node)).collect();
        assert_eq!(placed.iter().filter(|p| p.1.is_some()).count(), 2, "{placed:?}");
        assert_eq!(placed.iter().find(|p| p.0 == "default/p2").and_then(|p| p.1.clone()), None, "{placed:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn no_device_twice_and_claims_follow_their_pods(s in spec()) {
            let (text, claims_of) = build(&s);
            let mut e = engine(&[text]);
            let placements = e.simulate().placements;
            let devices = &e.cluster.snapshot.devices;
            // No device in two allocations (nor twice in one).
            let mut owner: HashMap<String, String> = HashMap::new();
            for c in devices.claims() {
                let results = c.allocation.as_ref().and_then(|a| a.devices.as_ref()).and_then(|d| d.results.clone()).unwrap_or_default();
                for r in results {
                    let id = format!("{}/{}/{}", r.driver, r.pool, r.device);
                    if let Some(other) = owner.insert(id.clone(), c.key()) {
                        prop_assert!(false, "device {} allocated to {} and {}", id, other, c.key());
                    }
                }
            }
            // Every bound pod's claims: allocated, reserved for it, on its node.
            for p in &placements {
                let Some(node) = &p.node else { continue };
                for name in &claims_of[&p.pod] {
                    let c = devices.claim("default", name).expect("claim exists");
                    let uid = format!("uid-{}", p.pod.trim_start_matches("default/"));
                    prop_assert!(c.reserved_for_pod(&uid), "{} not reserved for {}", name, p.pod);
                    let a = c.allocation.as_ref();
                    prop_assert!(a.is_some(), "{} of {} not allocated", name, p.pod);
                    for r in a.and_then(|a| a.devices.as_ref()).and_then(|d| d.results.clone()).unwrap_or_default() {
                        prop_assert!(r.pool == *node || r.pool == "shared", "{} of {} on {} got {}/{}", name, p.pod, node, r.pool, r.device);
                    }
                }
            }
        }
    }
}

/// The allocator keeps each node's pools and selector results from one
/// cycle to the next: a slice update between two cycles must change the
/// decision. The class wants model a100: first node-a has it; then the two
/// slices swap models (same names, same generation), so node-b has it; then
/// node-b's slice is removed and nothing fits.
#[test]
fn slice_updates_between_cycles_change_the_decision() {
    fn model_slice(node: &str, model: &str) -> k8s_openapi::api::resource::v1::ResourceSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{node}-gpus")},
            "spec": {
                "driver": "gpu.example.com", "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0", "attributes": {"model": {"string": model}}}],
            },
        }))
        .unwrap()
    }
    let docs = [
        node("node-a", "4"),
        node("node-b", "4"),
        class("gpu", "device.attributes[\"gpu.example.com\"].model == \"a100\""),
        claim("c", "gpu", 1, ""),
        pod("p", "100m", "resourceClaimName: c", ""),
    ];
    let mut e = engine(&docs);
    let p = e.cluster.pending[0].clone();
    let snap = &mut e.cluster.snapshot;
    snap.devices.upsert_slice(&model_slice("node-a", "a100")).unwrap();
    snap.devices.upsert_slice(&model_slice("node-b", "t4")).unwrap();
    let selected = |e: &Engine| {
        let (o, _) = e.frameworks[0].schedule(&p, &e.cluster.snapshot, CycleOptions { no_reuse: true, ..Default::default() });
        o.selected.map(|i| e.cluster.snapshot.nodes[i].name().to_string())
    };
    assert_eq!(selected(&e).as_deref(), Some("node-a"));
    assert_eq!(selected(&e).as_deref(), Some("node-a"), "the same decision from the kept pools");
    let snap = &mut e.cluster.snapshot;
    snap.devices.upsert_slice(&model_slice("node-a", "t4")).unwrap();
    snap.devices.upsert_slice(&model_slice("node-b", "a100")).unwrap();
    assert_eq!(selected(&e).as_deref(), Some("node-b"));
    e.cluster.snapshot.devices.remove_slice("node-b-gpus");
    assert_eq!(selected(&e), None);
}

/// Opportunistic batching with claims: a framework that reuses the last
/// same-signature pod's per-node results places every pod where one that
/// runs every cycle in full (`--no-reuse`) does, with the same feasible
/// nodes, totals, devices, statuses and messages. The cluster mixes
/// node-local pools with a nodeSelector pool, an allNodes pool and a
/// perDeviceNodeSelection pool; the pods come in turn with template claims
/// of several shapes (one model-1 GPU, any GPU, a firstAvailable list, an
/// FPGA from the shared pools, two GPUs with matchAttribute), a named claim
/// several pods share (allocated after the first: not signed), extended
/// resources a class backs, and no claims at all; between cycles pods
/// leave with their claims, a slice grows and a taint rule comes.
#[test]
fn reuse_places_as_full_cycles_with_shared_pools_and_mixed_claims() {
    use std::sync::Arc;

    use berth_engine::cache::Snapshot;
    use berth_engine::framework::{CycleOutcome, Framework};
    use berth_model::{NodeSpec, PodInfo};
    use serde_json::{json, Value};

    fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }
    const D: &str = "gpu.example.com";
    let gpu = |i: usize, k: usize| json!({"name": format!("gpu-{k}"), "attributes": {"kind": {"string": "gpu"}, "model": {"int": (i + k) % 2}}});
    let node_slice = |i: usize, n: usize| json!({
        "metadata": {"name": format!("n{i}-gpus")},
        "spec": {"driver": D, "nodeName": format!("n{i}"), "pool": {"name": format!("n{i}"), "generation": 1, "resourceSliceCount": 1}, "devices": (0..n).map(|k| gpu(i, k)).collect::<Vec<_>>()},
    });
    let mut snap = Snapshot::new();
    for i in 0..12 {
        let zone = if i < 6 { "a" } else { "b" };
        let n: k8s_openapi::api::core::v1::Node = obj(json!({
            "metadata": {"name": format!("n{i}"), "labels": {"kubernetes.io/hostname": format!("n{i}"), "zone": zone}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
        }));
        snap.upsert_node(NodeSpec::from_node(&n));
        snap.devices.upsert_slice(&obj(node_slice(i, 2 + i % 3))).unwrap();
    }
    let fpga = |name: &str| json!({"name": name, "attributes": {"kind": {"string": "fpga"}}});
    snap.devices
        .upsert_slice(&obj(json!({
            "metadata": {"name": "rack-a"},
            "spec": {"driver": D, "pool": {"name": "rack-a", "generation": 1, "resourceSliceCount": 1},
                "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
                "devices": [fpga("fpga-0"), fpga("fpga-1")]},
        })))
        .unwrap();
    snap.devices
        .upsert_slice(&obj(json!({
            "metadata": {"name": "net"},
            "spec": {"driver": D, "pool": {"name": "net", "generation": 1, "resourceSliceCount": 1}, "allNodes": true,
                "devices": [{"name": "nic-0", "attributes": {"kind": {"string": "nic"}}}, {"name": "nic-1", "attributes": {"kind": {"string": "nic"}}}]},
        })))
        .unwrap();
    snap.devices
        .upsert_slice(&obj(json!({
            "metadata": {"name": "per-device"},
            "spec": {"driver": D, "pool": {"name": "per-device", "generation": 1, "resourceSliceCount": 1}, "perDeviceNodeSelection": true,
                "devices": [{"name": "pd-0", "nodeName": "n7", "attributes": {"kind": {"string": "fpga"}}}, {"name": "pd-1", "nodeName": "n8", "attributes": {"kind": {"string": "fpga"}}}]},
        })))
        .unwrap();
    let class = |name: &str, cel: &str, ext: Option<&str>| {
        let mut c = json!({"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": cel}}]}});
        if let Some(e) = ext {
            c["spec"]["extendedResourceName"] = e.into();
        }
        obj::<k8s_openapi::api::resource::v1::DeviceClass>(c)
    };
    let kind = |k: &str| format!("device.attributes[\"{D}\"].kind == \"{k}\"");
    snap.upsert_device_class(&class("gpu", &kind("gpu"), Some("example.com/gpu"))).unwrap();
    snap.upsert_device_class(&class("gpu-m1", &format!("{} && device.attributes[\"{D}\"].model == 1", kind("gpu")), None)).unwrap();
    snap.upsert_device_class(&class("fpga", &kind("fpga"), None)).unwrap();
    snap.upsert_device_class(&class("nic", &kind("nic"), None)).unwrap();
    let exactly = |class: &str, count: u32| json!([{"name": "r", "exactly": {"deviceClassName": class, "count": count}}]);
    let claim = |name: &str, owner: Option<&str>, devices: Value| {
        let mut c = json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")}, "spec": {"devices": devices}});
        if let Some(o) = owner {
            c["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": o, "uid": format!("uid-{o}"), "controller": true}]);
        }
        obj::<k8s_openapi::api::resource::v1::ResourceClaim>(c)
    };
    snap.devices.upsert_claim(&claim("team", None, json!({"requests": exactly("nic", 1)})));
    // The claim shapes of the pods' templates, by kind.
    let shape = |kind: char| -> Option<Value> {
        Some(match kind {
            'A' => json!({"requests": exactly("gpu-m1", 1)}),
            'B' => json!({"requests": exactly("gpu", 1)}),
            'C' => json!({"requests": [{"name": "r", "firstAvailable": [{"name": "two", "deviceClassName": "gpu-m1", "count": 2}, {"name": "one", "deviceClassName": "gpu", "count": 1}]}]}),
            'D' => json!({"requests": exactly("fpga", 1)}),
            'H' => json!({"requests": exactly("gpu", 2), "constraints": [{"requests": ["r"], "matchAttribute": format!("{D}/model")}]}),
            _ => return None,
        })
    };
    let cfg = berth_engine::config::KubeSchedulerConfiguration { percentage_of_nodes_to_score: Some(100), ..Default::default() };
    let config = Config::from_raw(cfg).unwrap();
    let first = |c: &Config| -> Framework { berth_engine::profile::frameworks(c, 3).into_iter().next().unwrap() };
    let (batched, full) = (first(&config), first(&config));
    let dra = |fw: &Framework| fw.plugins().find(|p| p.name() == "DynamicResources").unwrap().clone();
    /// Selected node, feasible nodes with totals, message, statuses when nothing fits.
    type Verdicts = (Option<String>, Vec<(String, i64)>, Option<String>, Vec<(usize, String)>);
    let verdicts = |o: &CycleOutcome, snap: &Snapshot| -> Verdicts {
        let one = o.feasible.len() == 1;
        let mut v: Vec<(String, i64)> = o.feasible.iter().zip(&o.totals).map(|(&i, &t)| (snap.nodes[i].name().to_string(), if one { 0 } else { t })).collect();
        v.sort();
        let statuses = if o.selected.is_none() { o.statuses.statuses.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i, s.message()))).collect() } else { Vec::new() };
        (o.selected.map(|i| snap.nodes[i].name().to_string()), v, o.message.clone(), statuses)
    };
    let pattern: Vec<char> = "AAABACCDAEFGCAAHBBDAECCG".chars().collect();
    let mut bound: std::collections::VecDeque<(Arc<PodInfo>, Option<String>)> = Default::default();
    let (mut placed, mut failed) = (0, 0);
    for k in 0..96 {
        let kind = pattern[k % pattern.len()];
        let name = format!("p{k}-{kind}");
        let mut containers = json!([{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]);
        let mut p = json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")}, "spec": {}});
        let mut generated = None;
        if let Some(devices) = shape(kind) {
            let claim_name = format!("{name}-gpu-x7k2p");
            snap.devices.upsert_claim(&claim(&claim_name, Some(&name), devices));
            p["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimTemplateName": format!("t-{kind}")}]);
            p["status"] = json!({"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim_name}]});
            containers[0]["resources"]["claims"] = json!([{"name": "gpu"}]);
            generated = Some(claim_name);
        } else if kind == 'E' {
            p["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimName": "team"}]);
            containers[0]["resources"]["claims"] = json!([{"name": "gpu"}]);
        } else if kind == 'G' {
            containers[0]["resources"]["requests"]["example.com/gpu"] = "1".into();
            containers[0]["resources"]["limits"] = json!({"example.com/gpu": "1"});
        }
        p["spec"]["containers"] = containers;
        let pod = PodInfo::from_pod(&obj(p));
        let opts = CycleOptions { skip_post_filter: true, ..Default::default() };
        let (o, mut state) = batched.schedule(&pod, &snap, opts);
        let (x, full_state) = full.schedule(&pod, &snap, CycleOptions { no_reuse: true, ..opts });
        assert!(o.error.is_none() && x.error.is_none(), "pod {name}: {:?} {:?}", o.error, x.error);
        assert_eq!(verdicts(&o, &snap), verdicts(&x, &snap), "pod {name}");
        let Some(i) = o.selected else {
            failed += 1;
            continue;
        };
        let node = snap.nodes[i].name().to_string();
        assert_eq!(dra(&batched).device_choices(&state, Some(&node)), dra(&full).device_choices(&full_state, Some(&node)), "pod {name} on {node}");
        batched.reserve_and_assume(&mut snap, &mut state, &pod, &node).unwrap();
        placed += 1;
        bound.push_back((pod, generated));
        if k % 3 == 2 {
            // The oldest pod leaves, and its generated claim with it.
            let (gone, claim) = bound.pop_front().unwrap();
            snap.forget_reservations(&gone.uid);
            snap.remove_pod(&gone.uid);
            if let Some(c) = claim {
                snap.devices.remove_claim("default", &c);
            }
        }
        if k == 40 {
            // A node-local pool grows by two devices.
            snap.devices.upsert_slice(&obj(node_slice(3, 6))).unwrap();
        }
        if k == 60 {
            // A taint rule keeps pods off the devices of n5's pool.
            let rule = json!({"metadata": {"name": "drain-n5"}, "spec": {"deviceSelector": {"driver": D, "pool": "n5"}, "taint": {"key": "drain", "effect": "NoSchedule"}}});
            snap.devices.upsert_taint_rule(&obj(rule)).unwrap();
        }
    }
    assert!(placed >= 40 && failed >= 5, "placed {placed}, failed {failed}");
    assert!(batched.reused_cycles() > 30, "reused {} cycles", batched.reused_cycles());
    assert_eq!(batched.reuse_divergences(), 0);
}
