//! Upstream `TestPlugin` rows that apply to berth (PreEnqueue's checks, run
//! in PreFilter).

use berth_model::pod::{ClaimSource, PodClaim};
use berth_model::PodInfo;
use k8s_openapi::api::resource::v1 as res;

use super::claims::pod_claims;
use crate::cache::devices::Devices;

fn pod(source: ClaimSource) -> PodInfo {
    PodInfo { uid: "uid-my-pod".into(), namespace: "default".into(), name: "my-pod".into(), resource_claims: vec![PodClaim { name: "my-resource".into(), source }], ..Default::default() }
}

fn claim(owner: &str, deleting: bool) -> res::ResourceClaim {
    let mut c = res::ResourceClaim::default();
    c.metadata.name = Some("my-pod-my-resource".into());
    c.metadata.namespace = Some("default".into());
    c.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference { uid: owner.into(), controller: Some(true), kind: "Pod".into(), name: "my-pod".into(), api_version: "v1".into(), ..Default::default() }]);
    if deleting {
        c.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()));
    }
    c
}

/// A row: name, the pod claim's source, the claim in the cluster, claims found or the message.
type Row = (&'static str, ClaimSource, Option<res::ResourceClaim>, Result<usize, &'static str>);

#[test]
fn test_plugin_pre_enqueue_rows() {
    let generated = ClaimSource::FromTemplate(Some(Some("my-pod-my-resource".into())));
    let rows: Vec<Row> = vec![
        ("claim-template", generated.clone(), Some(claim("uid-my-pod", false)), Ok(1)),
        ("missing-claim", ClaimSource::FromTemplate(None), None, Err(r#"pod "default/my-pod": ResourceClaim not created yet"#)),
        ("deleted-claim", generated.clone(), Some(claim("uid-my-pod", true)), Err(r#"resourceclaim "my-pod-my-resource" is being deleted"#)),
        ("wrong-claim", generated.clone(), Some(claim("uid-my-pod123", false)), Err("ResourceClaim default/my-pod-my-resource was not created for pod default/my-pod (pod is not owner)")),
        ("no claim needed", ClaimSource::FromTemplate(Some(None)), None, Ok(0)),
    ];
    for (name, source, c, want) in rows {
        let mut d = Devices::new();
        if let Some(c) = &c {
            d.upsert_claim(c);
        }
        let got = pod_claims(&pod(source), &d).map(|v| v.len());
        assert_eq!(got.as_ref().map(|n| *n).map_err(String::as_str), want, "{name}");
    }
}

/// DRAExtendedResource: the implicit `deviceclass.resource.kubernetes.io/<class>`
/// is a name DRA backs (upstream `IsDRAExtendedResourceName`), though the
/// API does not count it as an extended resource; other kubernetes.io
/// names are neither.
#[test]
fn implicit_class_names_are_dra_extended_resources() {
    use super::claims::is_dra_extended;
    assert!(is_dra_extended("example.com/gpu"));
    assert!(is_dra_extended("deviceclass.resource.kubernetes.io/gpu"));
    assert!(!berth_model::resources::is_extended("deviceclass.resource.kubernetes.io/gpu"));
    assert!(!is_dra_extended("kubernetes.io/gpu"));
    assert!(!is_dra_extended("other.kubernetes.io/gpu"));
    assert!(!is_dra_extended("cpu"));
    // A class named by the implicit name backs it, with no extendedResourceName.
    let mut d = Devices::new();
    let class: res::DeviceClass = serde_json::from_value(serde_json::json!({"metadata": {"name": "gpu"}, "spec": {}})).expect("class");
    d.upsert_class(&class).expect("class");
    assert_eq!(d.class_for_extended_resource("deviceclass.resource.kubernetes.io/gpu").map(|c| c.name.as_str()), Some("gpu"));
    assert!(d.class_for_extended_resource("deviceclass.resource.kubernetes.io/nic").is_none());
}

/// YAML for the Score tests: a class of driver gpu.example.com, and per node
/// a slice of devices with an int attribute `model`.
mod score_cluster {
    /// Node `name` with 4 cpus.
    pub fn node(name: &str) -> String {
        format!("---\napiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}\nstatus: {{allocatable: {{cpu: '4', memory: 16Gi, pods: '110'}}}}\n")
    }

    /// The class every request names.
    pub fn class() -> String {
        "---\napiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu}\nspec:\n  selectors:\n  - cel:\n      expression: 'device.driver == \"gpu.example.com\"'\n".to_string()
    }

    /// A slice for `node` (or, with None, for all nodes, pool `shared`) with
    /// one device per entry of `models`.
    pub fn slice(node: Option<&str>, models: &[u8]) -> String {
        let (name, placement) = match node {
            Some(n) => (n.to_string(), format!("nodeName: {n}")),
            None => ("shared".to_string(), "allNodes: true".to_string()),
        };
        let devices: Vec<String> = models.iter().enumerate().map(|(k, m)| format!("  - name: dev-{k}\n    attributes:\n      model: {{int: {m}}}\n")).collect();
        format!("---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {name}-devs}}\nspec:\n  driver: gpu.example.com\n  pool: {{name: {name}, generation: 1, resourceSliceCount: 1}}\n  {placement}\n  devices:\n{}", devices.concat())
    }

    /// A claim with one request `gpu`: firstAvailable over models
    /// `m<k>` in the order of `models` (or, empty, `exactly` any device);
    /// `status`: its status block, or empty.
    pub fn claim(name: &str, models: &[u8], status: &str) -> String {
        let request = if models.is_empty() {
            "      exactly: {deviceClassName: gpu}\n".to_string()
        } else {
            let subs: Vec<String> = models
                .iter()
                .map(|m| format!("      - name: m{m}\n        deviceClassName: gpu\n        selectors:\n        - cel:\n            expression: 'device.attributes[\"gpu.example.com\"].model == {m}'\n"))
                .collect();
            format!("      firstAvailable:\n{}", subs.concat())
        };
        format!("---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, namespace: default, uid: uid-{name}}}\nspec:\n  devices:\n    requests:\n    - name: gpu\n{request}{status}")
    }

    /// The status of a claim allocated `device` of pool `shared` for
    /// subrequest `sub` of request gpu, usable on every node.
    pub fn allocated(sub: &str, device: &str) -> String {
        format!("status:\n  allocation:\n    devices:\n      results:\n      - {{request: gpu/{sub}, driver: gpu.example.com, pool: shared, device: {device}}}\n")
    }

    /// A pending pod naming `claims`, asking for `cpu`.
    pub fn pod(name: &str, cpu: &str, claims: &[&str]) -> String {
        let refs: Vec<String> = claims.iter().map(|c| format!("  - {{name: {c}, resourceClaimName: {c}}}\n")).collect();
        let uses: Vec<String> = claims.iter().map(|c| format!("{{name: {c}}}")).collect();
        format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, uid: uid-{name}}}\nspec:\n  containers:\n  - name: c\n    image: i\n    resources: {{requests: {{cpu: '{cpu}'}}, claims: [{}]}}\n  resourceClaims:\n{}",
            uses.join(", "),
            refs.concat()
        )
    }
}

/// Upstream's Score and NormalizeScore (`Score`, `computeScore`,
/// `NormalizeScore` in pkg/scheduler/framework/plugins/dynamicresources,
/// v1.37): per node, the raw sum of 8 minus the chosen subrequest's index
/// over every firstAvailable request of the pod's claims (an allocated
/// claim counts what its allocation chose, on every node), then scaled so
/// that the best node gets 100 (`DefaultNormalizeScore`, not reversed).
#[test]
fn score_is_normalized_as_upstream() {
    use score_cluster::*;
    use crate::config::Config;
    use crate::framework::CycleOptions;
    use crate::offline::{Cluster, Engine};

    struct Row {
        name: &'static str,
        /// Devices (models) of each node's own slice, nodes n0, n1, ...
        nodes: Vec<Vec<u8>>,
        /// Models of the shared (allNodes) pool.
        shared: Vec<u8>,
        /// The claims: (firstAvailable models, status).
        claims: Vec<(Vec<u8>, String)>,
        raw: Vec<i64>,
        normalized: Vec<i64>,
    }
    let rows = vec![
        Row {
            name: "one request: the first, second, third subrequest",
            nodes: vec![vec![0], vec![1], vec![2]],
            shared: vec![],
            claims: vec![(vec![0, 1, 2], String::new())],
            raw: vec![8, 7, 6],
            normalized: vec![100, 87, 75],
        },
        Row {
            name: "two claims: raw sums past 8, the best still 100",
            nodes: vec![vec![0, 0], vec![0, 1], vec![1, 1]],
            shared: vec![],
            claims: vec![(vec![0, 1], String::new()), (vec![0, 1], String::new())],
            raw: vec![16, 15, 14],
            normalized: vec![100, 93, 87],
        },
        Row {
            name: "an allocated claim adds what its allocation chose on every node",
            nodes: vec![vec![0], vec![1]],
            shared: vec![0],
            claims: vec![(vec![0, 1], allocated("m0", "dev-0")), (vec![0, 1], String::new())],
            raw: vec![16, 15],
            normalized: vec![100, 93],
        },
        Row {
            name: "an allocated claim's second choice with an exact request: the same everywhere, 100",
            nodes: vec![vec![0], vec![1]],
            shared: vec![1],
            claims: vec![(vec![0, 1], allocated("m1", "dev-0")), (vec![], String::new())],
            raw: vec![7, 7],
            normalized: vec![100, 100],
        },
        Row { name: "no firstAvailable request: 0", nodes: vec![vec![0], vec![1]], shared: vec![], claims: vec![(vec![], String::new())], raw: vec![0, 0], normalized: vec![0, 0] },
    ];
    for r in rows {
        let mut docs = vec![class()];
        for (i, models) in r.nodes.iter().enumerate() {
            docs.push(node(&format!("n{i}")));
            docs.push(slice(Some(&format!("n{i}")), models));
        }
        if !r.shared.is_empty() {
            docs.push(slice(None, &r.shared));
        }
        let names: Vec<String> = (0..r.claims.len()).map(|k| format!("c{k}")).collect();
        for (k, (models, status)) in r.claims.iter().enumerate() {
            docs.push(claim(&names[k], models, status));
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        docs.push(pod("p", "100m", &refs));
        let cluster = Cluster::parse(&docs.concat(), "dump.yaml").expect("cluster");
        let e = Engine::new(&Config::default_config(), cluster, 1);
        let fw = &e.frameworks[0];
        let snap = &e.cluster.snapshot;
        let p = e.cluster.pending.first().expect("pending pod").clone();
        let (out, state) = fw.schedule(&p, snap, CycleOptions { explain: true, ..Default::default() });
        assert_eq!(out.feasible.len(), r.nodes.len(), "{}: {:?}", r.name, out.message);
        let raw: Vec<i64> = out.feasible.iter().map(|&i| super::filtering::score(&state, &p, &snap.nodes[i])).collect();
        let k = out.score_plugins.iter().position(|n| *n == super::NAME).expect("DynamicResources scores");
        assert_eq!(raw, r.raw, "{}: raw", r.name);
        assert_eq!(out.scores[k], r.normalized, "{}: normalized", r.name);
    }
}

/// DRADeviceBindingConditions (upstream `isClaimReadyForBinding`, v1.37):
/// which statuses make an allocated claim's binding failed.
#[test]
fn binding_failure_rows() {
    use crate::cache::devices::binding_failure;
    let result = |device: &str, conds: &[&str], failures: &[&str]| {
        serde_json::json!({"request": "gpu", "driver": "gpu.example.com", "pool": "node-a", "device": device,
            "bindingConditions": conds, "bindingFailureConditions": failures})
    };
    let device_status = |device: &str, conds: &[(&str, &str)]| {
        let conds: Vec<serde_json::Value> = conds
            .iter()
            .map(|(t, s)| serde_json::json!({"type": t, "status": s, "reason": "Boom", "message": "attach \"failed\"", "lastTransitionTime": "2026-01-01T00:00:00Z"}))
            .collect();
        serde_json::json!({"driver": "gpu.example.com", "pool": "node-a", "device": device, "conditions": conds})
    };
    let failed = Some(r#"device binding failed: claim=c, reason=Boom, message="attach \"failed\"""#);
    type Row = (&'static str, Vec<serde_json::Value>, Vec<serde_json::Value>, Option<&'static str>);
    let rows: Vec<Row> = vec![
        ("failure condition True", vec![result("d0", &["Ready"], &["Failed"])], vec![device_status("d0", &[("Failed", "True")])], failed),
        ("failure condition False", vec![result("d0", &["Ready"], &["Failed"])], vec![device_status("d0", &[("Failed", "False"), ("Ready", "False")])], None),
        ("no bindingConditions: failure conditions not read", vec![result("d0", &[], &["Failed"])], vec![device_status("d0", &[("Failed", "True")])], None),
        ("no status for the device", vec![result("d0", &["Ready"], &["Failed"])], vec![device_status("d1", &[("Failed", "True")])], None),
        ("condition types are case-sensitive", vec![result("d0", &["Ready"], &["Failed"])], vec![device_status("d0", &[("failed", "True")])], None),
        ("failure before the binding conditions", vec![result("d0", &["Ready"], &["Failed"])], vec![device_status("d0", &[("Ready", "True"), ("Failed", "True")])], failed),
        (
            "a device not ready ends the check",
            vec![result("d0", &["Ready"], &["Failed"]), result("d1", &["Ready"], &["Failed"])],
            vec![device_status("d0", &[("Ready", "False")]), device_status("d1", &[("Failed", "True")])],
            None,
        ),
        (
            "after a ready device, the next one's failure counts",
            vec![result("d0", &["Ready"], &["Failed"]), result("d1", &["Ready"], &["Failed"])],
            vec![device_status("d0", &[("Ready", "True")]), device_status("d1", &[("Failed", "True")])],
            failed,
        ),
    ];
    for (name, results, devices, want) in rows {
        let status: k8s_openapi::api::resource::v1::ResourceClaimStatus =
            serde_json::from_value(serde_json::json!({"allocation": {"devices": {"results": results}}, "devices": devices})).expect("status");
        assert_eq!(binding_failure("c", &status).as_deref(), want, "{name}");
    }
    // Not allocated: nothing to bind.
    let status: k8s_openapi::api::resource::v1::ResourceClaimStatus =
        serde_json::from_value(serde_json::json!({"devices": [device_status("d0", &[("Failed", "True")])]})).expect("status");
    assert_eq!(binding_failure("c", &status), None);
}
