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

/// The failure message names the claim that kept the pod out (upstream's
/// "still not schedulable" alone leaves a user guessing); a pod that fails
/// for cpu only, on nodes whose devices it could have, names none.
#[test]
fn the_failure_message_names_the_claim_no_node_can_allocate() {
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
    let got = placement(&mut e);
    let get = |k: &str| got.iter().find(|p| p.0 == k).unwrap().clone();
    let (_, node, m) = get("default/p-two");
    let m = m.unwrap_or_default();
    assert!(node.is_none(), "{m}");
    assert!(m.starts_with("0/2 nodes are available: 2 cannot allocate all claims."), "{m}");
    assert!(m.contains("still not schedulable: ResourceClaim default/two cannot be allocated on any node that passed the other filters"), "{m}");
    let (_, node, m) = get("default/p-cpu");
    let m = m.unwrap_or_default();
    assert!(node.is_none(), "{m}");
    assert!(m.contains("Insufficient cpu") && !m.contains("default/one"), "{m}");
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
