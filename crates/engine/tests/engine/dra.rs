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
    assert!(o.message.unwrap_or_default().contains("still not schedulable"));
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
