//! The seeded generator of `berth differential`'s clusters and workloads.
//!
//! Nodes in zones with labels, taints, capacities, an extended resource and
//! devices of the simulated DRA driver; pods with requests, priorities,
//! spread constraints (explicit, and default through Services), required
//! and preferred node and pod (anti-)affinity, tolerations, a
//! PodDisruptionBudget, and claims (from ResourceClaimTemplates: one
//! device, two, one of a model, a prioritized list; and one claim several
//! pods share).
//!
//! The devices and claims are drawn from a second random stream of the
//! same seed, so that adding them left every other part of a seed's
//! workload as it was.

use berth_cluster::dra_driver::{self, Attribute, Device, DevicesConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::kwok::NodeSpec;

/// The generated cluster and workload of one seed.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Nodes.
    pub nodes: Vec<NodeSpec>,
    /// Other objects, created before the pods (PriorityClasses are cluster-scoped; the rest namespaced).
    pub objects: Vec<Value>,
    /// Pods, in creation order.
    pub pods: Vec<Value>,
    /// The simulated driver's devices, by node name (published once the
    /// nodes exist: a slice names its node's uid).
    pub devices: DevicesConfig,
}

/// The extended resource some nodes offer and some pods ask for.
pub const EXTENDED: &str = "example.com/widget";
const APPS: [&str; 5] = ["a", "b", "c", "d", "e"];
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

fn pick<T: Copy>(r: &mut StdRng, xs: &[T]) -> T {
    xs[r.random_range(0..xs.len())]
}

/// Generates seed `seed`'s cluster of `nodes` nodes and `pods` pods whose
/// scheduler is `scheduler`; names are prefixed `d<seed>-` so that seeds
/// never share a node.
pub fn generate(seed: u64, nodes: usize, pods: usize, scheduler: &str) -> Workload {
    let mut r = StdRng::seed_from_u64(seed);
    let mut ns_nodes = Vec::with_capacity(nodes);
    for i in 0..nodes {
        let mut n = NodeSpec::new(
            &format!("d{seed}-n{i:03}"),
            ZONES[i % 3],
            pick(&mut r, &["4", "8", "16"]),
        );
        n.memory = pick(&mut r, &["16Gi", "32Gi", "64Gi"]).to_string();
        n = n
            .label("disktype", pick(&mut r, &["ssd", "hdd"]))
            .label("tier", pick(&mut r, &["gold", "silver"]));
        if r.random_bool(0.1) {
            n = n.taint("dedicated", "infra", "NoSchedule");
        }
        if r.random_bool(0.05) {
            n = n.taint("spot", "true", "PreferNoSchedule");
        }
        if r.random_bool(0.3) {
            n.extended
                .insert(EXTENDED.into(), pick(&mut r, &["2", "4"]).to_string());
        }
        ns_nodes.push(n);
    }
    let mut objects = vec![
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "diff-low"}, "value": 100}),
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "diff-high"}, "value": 1000}),
        // Default spreading applies to pods a Service selects.
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc-a"}, "spec": {"selector": {"app": "a"}, "ports": [{"port": 80}]}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc-b"}, "spec": {"selector": {"app": "b"}, "ports": [{"port": 80}]}}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb-c"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "c"}}}}),
    ];
    objects.shrink_to_fit();
    let mut out = Vec::with_capacity(pods);
    for i in 0..pods {
        let app = pick(&mut r, &APPS);
        let mut spec = json!({
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {
                "cpu": pick(&mut r, &["250m", "500m", "1", "2"]),
                "memory": pick(&mut r, &["128Mi", "512Mi", "1Gi"]),
            }}}],
        });
        if r.random_bool(0.1) {
            spec["containers"][0]["resources"]["requests"][EXTENDED] = json!("1");
            spec["containers"][0]["resources"]["limits"] = json!({EXTENDED: "1"});
        }
        if r.random_bool(0.02) {
            // Fits nowhere: its message is compared.
            spec["containers"][0]["resources"]["requests"]["cpu"] = json!("64");
        }
        match r.random_range(0..10) {
            0 => spec["priorityClassName"] = json!("diff-low"),
            1 => spec["priorityClassName"] = json!("diff-high"),
            _ => {}
        }
        let mut constraints = Vec::new();
        if r.random_bool(0.3) {
            constraints.push(json!({"maxSkew": r.random_range(1..=2), "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": pick(&mut r, &["DoNotSchedule", "ScheduleAnyway"]), "labelSelector": {"matchLabels": {"app": app}}}));
        }
        if r.random_bool(0.15) {
            constraints.push(json!({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": app}}}));
        }
        if !constraints.is_empty() {
            spec["topologySpreadConstraints"] = json!(constraints);
        }
        let mut affinity = serde_json::Map::new();
        let mut node_aff = serde_json::Map::new();
        if r.random_bool(0.15) {
            node_aff.insert(
                "requiredDuringSchedulingIgnoredDuringExecution".into(),
                json!({"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "disktype", "operator": "In", "values": ["ssd"]}]}]}),
            );
        }
        if r.random_bool(0.2) {
            node_aff.insert("preferredDuringSchedulingIgnoredDuringExecution".into(), json!([{"weight": r.random_range(1..=100),
                "preference": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}}]));
        }
        if !node_aff.is_empty() {
            affinity.insert("nodeAffinity".into(), Value::Object(node_aff));
        }
        if r.random_bool(0.1) {
            affinity.insert("podAntiAffinity".into(), json!({"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}));
        } else if r.random_bool(0.1) {
            affinity.insert("podAntiAffinity".into(), json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": r.random_range(1..=100),
                "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "topology.kubernetes.io/zone"}}]}));
        }
        if r.random_bool(0.15) {
            let other = pick(&mut r, &APPS);
            affinity.insert("podAffinity".into(), json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": r.random_range(1..=100),
                "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": other}}, "topologyKey": "topology.kubernetes.io/zone"}}]}));
        }
        if !affinity.is_empty() {
            spec["affinity"] = Value::Object(affinity);
        }
        if r.random_bool(0.1) {
            spec["tolerations"] = json!([{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]);
        }
        out.push(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{i:04}"), "labels": {"app": app, "differential": "true"}}, "spec": spec}));
    }
    let devices = add_devices(seed, &ns_nodes, &mut objects, &mut out);
    Workload {
        nodes: ns_nodes,
        objects,
        pods: out,
        devices,
    }
}

/// The device models some nodes carry; [`MODELS`]`[1]` is the one some claims select.
pub const MODELS: [&str; 2] = ["A100", "H100"];
/// The ResourceClaimTemplates pods draw their claims from, and the one
/// claim several pods share.
pub const TEMPLATES: [&str; 4] = ["gpu-one", "gpu-two", "gpu-h100", "gpu-prefer-h100"];
/// The ResourceClaim several pods share (each of them must run where it is allocated).
pub const SHARED_CLAIM: &str = "shared-gpu";

/// Devices on about a third of the nodes (1, 2 or 4 of one model), the
/// DeviceClass, the claim templates and the shared claim, and a claim on
/// about one pod in eight; from the seed's second stream.
fn add_devices(
    seed: u64,
    nodes: &[NodeSpec],
    objects: &mut Vec<Value>,
    pods: &mut [Value],
) -> DevicesConfig {
    let mut r = StdRng::seed_from_u64(seed ^ 0x00d7_a000_0000_0000);
    let driver = dra_driver::DEFAULT_DRIVER;
    let mut cfg = DevicesConfig::default();
    for n in nodes {
        if !r.random_bool(0.3) {
            continue;
        }
        let count = pick(&mut r, &[1_i64, 2, 4]);
        let model = pick(&mut r, &MODELS);
        let memory = if model == MODELS[1] { "80Gi" } else { "40Gi" };
        let devices = (0..count)
            .map(|i| Device {
                name: format!("gpu-{i}"),
                driver: driver.into(),
                attributes: [
                    ("model".to_string(), Attribute::String(model.into())),
                    ("index".to_string(), Attribute::Int(i)),
                    (
                        "driverVersion".to_string(),
                        Attribute::Version("1.0.0".into()),
                    ),
                ]
                .into(),
                capacity: [("memory".to_string(), memory.to_string())].into(),
            })
            .collect();
        cfg.nodes.insert(n.name.clone(), devices);
    }
    let h100 = json!([{"cel": {"expression": format!("device.attributes[{}].model == {}", json!(driver), json!(MODELS[1]))}}]);
    let exactly = |count: u32, selectors: Option<&Value>| {
        let mut e = json!({"deviceClassName": driver, "count": count});
        if let Some(s) = selectors {
            e["selectors"] = s.clone();
        }
        e
    };
    let requests = [
        json!([{"name": "gpu", "exactly": exactly(1, None)}]),
        json!([{"name": "gpu", "exactly": exactly(2, None)}]),
        json!([{"name": "gpu", "exactly": exactly(1, Some(&h100))}]),
        json!([{"name": "gpu", "firstAvailable": [{"name": "h100", "deviceClassName": driver, "selectors": h100}, {"name": "any", "deviceClassName": driver}]}]),
    ];
    objects.push(dra_driver::device_class_json(driver));
    for (name, req) in TEMPLATES.iter().zip(&requests) {
        objects.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": req}}}}));
    }
    objects.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": SHARED_CLAIM},
        "spec": {"devices": {"requests": requests[0]}}}));
    for p in pods.iter_mut() {
        if !r.random_bool(0.12) {
            continue;
        }
        let claim = if r.random_bool(0.15) {
            json!({"name": "gpu", "resourceClaimName": SHARED_CLAIM})
        } else {
            json!({"name": "gpu", "resourceClaimTemplateName": pick(&mut r, &TEMPLATES)})
        };
        p["spec"]["resourceClaims"] = json!([claim]);
    }
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn a_seed_makes_the_same_workload_every_time() {
        let a = generate(7, 20, 50, "default-scheduler");
        let b = generate(7, 20, 50, "default-scheduler");
        assert_eq!(
            serde_json::to_string(&a.pods).unwrap_or_default(),
            serde_json::to_string(&b.pods).unwrap_or_default()
        );
        assert_eq!(
            a.nodes.iter().map(|n| n.object()).collect::<Vec<_>>(),
            b.nodes.iter().map(|n| n.object()).collect::<Vec<_>>()
        );
        let c = generate(8, 20, 50, "default-scheduler");
        assert_ne!(
            serde_json::to_string(&a.pods).unwrap_or_default(),
            serde_json::to_string(&c.pods).unwrap_or_default()
        );
    }

    #[test]
    fn generated_pods_and_nodes_are_valid_objects_naming_the_scheduler() {
        let w = generate(1, 30, 200, "default-scheduler");
        for p in &w.pods {
            let pod: Pod = serde_json::from_value(p.clone()).unwrap_or_else(|e| panic!("{e}: {p}"));
            assert_eq!(
                pod.spec.and_then(|s| s.scheduler_name).as_deref(),
                Some("default-scheduler")
            );
        }
        for n in &w.nodes {
            assert!(serde_json::from_value::<k8s_openapi::api::core::v1::Node>(n.object()).is_ok());
            assert!(n.name.starts_with("d1-"));
        }
        // Every feature is exercised somewhere.
        let text = serde_json::to_string(&w.pods).unwrap_or_default();
        for f in [
            "topologySpreadConstraints",
            "podAntiAffinity",
            "podAffinity",
            "nodeAffinity",
            "tolerations",
            "priorityClassName",
            EXTENDED,
            SHARED_CLAIM,
        ] {
            assert!(text.contains(f), "no pod uses {f}");
        }
        for t in TEMPLATES {
            assert!(
                text.contains(&format!("\"{t}\"")),
                "no pod uses the template {t}"
            );
        }
        // Devices on some nodes, not all, and each of them of one model.
        assert!(!w.devices.nodes.is_empty() && w.devices.nodes.len() < w.nodes.len());
        for (node, devices) in &w.devices.nodes {
            assert!(w.nodes.iter().any(|n| &n.name == node));
            let models: std::collections::BTreeSet<String> = devices
                .iter()
                .map(|d| format!("{:?}", d.attributes.get("model")))
                .collect();
            assert_eq!(models.len(), 1, "{node}");
        }
        // The templates and the shared claim are valid objects.
        for o in &w.objects {
            match o["kind"].as_str() {
                Some("ResourceClaimTemplate") => {
                    assert!(
                        serde_json::from_value::<
                            k8s_openapi::api::resource::v1::ResourceClaimTemplate,
                        >(o.clone())
                        .is_ok(),
                        "{o}"
                    )
                }
                Some("ResourceClaim") => assert!(
                    serde_json::from_value::<k8s_openapi::api::resource::v1::ResourceClaim>(
                        o.clone()
                    )
                    .is_ok(),
                    "{o}"
                ),
                _ => {}
            }
        }
    }
}
