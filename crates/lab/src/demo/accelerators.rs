//! The demo's accelerator wave: GPUs published by the local cluster's
//! simulated DRA driver, asked for through claim templates (CEL), a pair
//! on one PCIe root and an extended resource backed by a DeviceClass; and
//! the check that no device is given twice or held where its pod is not.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use super::{SCHEDULER, TAINT_KEY, TAINT_VALUE, WAVE_TIMEOUT};

/// GPUs the demo cluster's simulated DRA driver publishes on every node.
pub const GPUS_PER_NODE: usize = 4;
/// The accelerator wave's namespace.
const GPU_NS: &str = "demo-gpus";
/// The accelerator wave's training pods (one GPU each, from a template).
const TRAINING_PODS: usize = 12;
/// The DeviceClass that backs the extended resource [`GPU_RESOURCE`].
const GPU_EXT_CLASS: &str = "demo-gpu";
/// The extended resource a DeviceClass backs (DRAExtendedResource).
const GPU_RESOURCE: &str = "example.com/gpu";

/// The accelerator wave's pods: (name, the pod's JSON).
fn accelerator_pods(train: usize) -> Vec<(String, Value)> {
    let pod = |name: &str, extra: Value| {
        let mut p = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": GPU_NS, "labels": {"app": "gpu"}},
            "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 1,
                "tolerations": [{"key": TAINT_KEY, "operator": "Equal", "value": TAINT_VALUE, "effect": "NoSchedule"}],
                "containers": [{"name": "cuda", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]},
        });
        merge_json(&mut p, &extra);
        p
    };
    let with_template = |template: &str| {
        json!({"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{"name": "cuda", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "claims": [{"name": "gpu"}]}}]}})
    };
    let mut out: Vec<(String, Value)> = (0..train).map(|i| (format!("train-{i}"), pod(&format!("train-{i}"), with_template("one-gpu")))).collect();
    out.push(("pair".into(), pod("pair", with_template("gpu-pair"))));
    out.push(("ext".into(), pod("ext", json!({"spec": {"containers": [{"name": "cuda", "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi", GPU_RESOURCE: "1"}, "limits": {GPU_RESOURCE: "1"}}}]}}))));
    out
}

/// Merges `extra` into `v`, object by object (arrays and scalars replace).
fn merge_json(v: &mut Value, extra: &Value) {
    match (v, extra) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, x) in b {
                merge_json(a.entry(k.clone()).or_insert(Value::Null), x);
            }
        }
        (a, b) => *a = b.clone(),
    }
}

/// The claims a pod uses, by name: named ones, those the resourceclaim
/// controller generated from templates (`status.resourceClaimStatuses`) and
/// the extended-resource claim (`status.extendedResourceClaimStatus`).
fn pod_claim_names(pod: &Value) -> Vec<String> {
    let str_at = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
    let statuses: Vec<&Value> = pod.pointer("/status/resourceClaimStatuses").and_then(Value::as_array).into_iter().flatten().collect();
    let mut out = Vec::new();
    for c in pod.pointer("/spec/resourceClaims").and_then(Value::as_array).into_iter().flatten() {
        let entry = str_at(c, "/name").unwrap_or_default();
        match str_at(c, "/resourceClaimName") {
            Some(n) => out.push(n),
            None => match statuses.iter().find(|s| str_at(s, "/name").as_deref() == Some(entry.as_str())).and_then(|s| str_at(s, "/resourceClaimName")) {
                Some(n) => out.push(n),
                // Not generated yet: the check below finds it missing.
                None => out.push(format!("<{entry}: not generated>")),
            },
        }
    }
    out.extend(str_at(pod, "/status/extendedResourceClaimStatus/resourceClaimName"));
    out
}

/// (driver, pool, device) of each device allocated to a claim.
fn allocated_devices(claim: &Value) -> Vec<(String, String, String)> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    claim.pointer("/status/allocation/devices/results").and_then(Value::as_array).into_iter().flatten().map(|r| (s(r, "driver"), s(r, "pool"), s(r, "device"))).collect()
}

/// The device checks, independent of the scheduler: no device allocated to
/// two claims (over `claims`, every claim of the cluster), and every bound
/// pod of `pods` with its claims allocated on its node (the simulated
/// driver's pool is named after its node) and reserved for it.
fn device_violations(pods: &[Value], claims: &[Value]) -> Vec<String> {
    let key = |v: &Value| format!("{}/{}", v.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default(), v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default());
    let mut out = Vec::new();
    let mut given: HashMap<(String, String, String), String> = HashMap::new();
    for c in claims {
        for d in allocated_devices(c) {
            if let Some(other) = given.insert(d.clone(), key(c)) {
                out.push(format!("device: {}/{}/{} is allocated to both {other} and {}", d.0, d.1, d.2, key(c)));
            }
        }
    }
    for p in pods {
        let Some(node) = p.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) else { continue };
        let ns = p.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
        let uid = p.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
        for name in pod_claim_names(p) {
            let Some(c) = claims.iter().find(|c| key(c) == format!("{ns}/{name}")) else {
                out.push(format!("device: {} is bound to {node} but its claim {name} does not exist", key(p)));
                continue;
            };
            let devices = allocated_devices(c);
            if devices.is_empty() {
                out.push(format!("device: {} is bound to {node} but its claim {name} is not allocated", key(p)));
            } else if let Some(d) = devices.iter().find(|d| d.1 != node) {
                out.push(format!("device: {} is bound to {node} but its claim {name} holds {} of pool {}", key(p), d.2, d.1));
            }
            let reserved = c.pointer("/status/reservedFor").and_then(Value::as_array).into_iter().flatten().any(|r| r.get("uid").and_then(Value::as_str) == Some(uid));
            if !reserved {
                out.push(format!("device: {} is bound to {node} but its claim {name} is not reserved for it", key(p)));
            }
        }
    }
    out
}

/// The accelerator wave: the simulated DRA driver publishes
/// [`GPUS_PER_NODE`] GPUs per node (80Gi each, two per PCIe root);
/// training pods ask for one GPU with at least 40Gi of memory through a
/// ResourceClaimTemplate (CEL selector), a pod asks for two GPUs on one
/// PCIe root (matchAttribute), and a pod asks for the extended resource
/// `example.com/gpu`, which a DeviceClass backs. berth allocates and
/// reserves every claim in PreBind. Returns the line to show and the
/// violations of the device checks ([`device_violations`], and pods not
/// bound in time).
pub(super) async fn accelerator_wave(client: &kube::Client, nodes: usize) -> (String, Vec<String>) {
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};
    let driver = berth_cluster::dra_driver::DEFAULT_DRIVER;
    // Every pod finds its devices, whatever --nodes is (two GPUs for the pair, one for ext).
    let train = TRAINING_PODS.min((nodes * GPUS_PER_NODE).saturating_sub(3));
    let run = async {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": GPU_NS}}))?;
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.context("creating the accelerator namespace")?;
        let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), GPU_NS);
        let one: ResourceClaimTemplate = serde_json::from_value(json!({"metadata": {"name": "one-gpu"}, "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": driver, "selectors": [{"cel": {"expression": format!("device.capacity[\"{driver}\"].memory.compareTo(quantity(\"40Gi\")) >= 0")}}]}}]}}}}))?;
        templates.create(&PostParams::default(), &one).await.context("creating ResourceClaimTemplate one-gpu")?;
        let pair: ResourceClaimTemplate = serde_json::from_value(json!({"metadata": {"name": "gpu-pair"}, "spec": {"spec": {"devices": {
            "requests": [{"name": "gpus", "exactly": {"deviceClassName": driver, "count": 2}}],
            "constraints": [{"requests": ["gpus"], "matchAttribute": format!("{driver}/pcieRoot")}]}}}}))?;
        templates.create(&PostParams::default(), &pair).await.context("creating ResourceClaimTemplate gpu-pair")?;
        let class: DeviceClass = serde_json::from_value(json!({"metadata": {"name": GPU_EXT_CLASS}, "spec": {"extendedResourceName": GPU_RESOURCE,
            "selectors": [{"cel": {"expression": format!("device.driver == \"{driver}\"")}}]}}))?;
        Api::<DeviceClass>::all(client.clone()).create(&PostParams::default(), &class).await.with_context(|| format!("creating DeviceClass {GPU_EXT_CLASS}"))?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), GPU_NS);
        let all = accelerator_pods(train);
        let want = all.len();
        for (name, body) in all {
            let p: Pod = serde_json::from_value(body)?;
            pods.create(&PostParams::default(), &p).await.with_context(|| format!("creating pod {GPU_NS}/{name}"))?;
        }
        let claims: Api<ResourceClaim> = Api::all(client.clone());
        let deadline = Instant::now() + WAVE_TIMEOUT;
        loop {
            let list: Vec<Value> = pods.list(&ListParams::default()).await?.items.iter().map(serde_json::to_value).collect::<Result<_, _>>()?;
            let bound = list.iter().filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty())).count();
            if bound < want && Instant::now() <= deadline {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            // Pods first, then claims: a claim is written before its pod is bound.
            let all_claims: Vec<Value> = claims.list(&ListParams::default()).await?.items.iter().map(serde_json::to_value).collect::<Result<_, _>>()?;
            let mut violations = device_violations(&list, &all_claims);
            for p in list.iter().filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str).is_none_or(str::is_empty)) {
                let why = p.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().find(|c| c["type"] == "PodScheduled").and_then(|c| c["message"].as_str()).unwrap_or("not attempted yet");
                violations.push(format!("device: {GPU_NS}/{} not bound within {}s: {why}", p.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default(), WAVE_TIMEOUT.as_secs()));
            }
            let ours: Vec<&Value> = all_claims.iter().filter(|c| c.pointer("/metadata/namespace").and_then(Value::as_str) == Some(GPU_NS)).collect();
            // The pair's two GPUs share a PCIe root (the driver gives gpu-2k and gpu-2k+1 one root).
            if let Some(p) = list.iter().find(|p| p.pointer("/metadata/name").and_then(Value::as_str) == Some("pair")).filter(|p| p.pointer("/spec/nodeName").is_some()) {
                let devs: Vec<(String, String, String)> = pod_claim_names(p).iter().filter_map(|n| ours.iter().find(|c| c.pointer("/metadata/name").and_then(Value::as_str) == Some(n.as_str()))).flat_map(|c| allocated_devices(c)).collect();
                let roots: BTreeSet<Option<usize>> = devs.iter().map(|d| d.2.strip_prefix("gpu-").and_then(|i| i.parse::<usize>().ok()).map(|i| i / 2)).collect();
                if devs.len() != 2 || roots.len() != 1 || roots.contains(&None) {
                    violations.push(format!("device: {GPU_NS}/pair holds {devs:?}, not two GPUs of one PCIe root"));
                }
            }
            let gpus: usize = ours.iter().map(|c| allocated_devices(c).len()).sum();
            let used_nodes: BTreeSet<String> = ours.iter().flat_map(|c| allocated_devices(c)).map(|d| d.1).collect();
            let devices_of = |pod: &str| -> String {
                let Some(p) = list.iter().find(|p| p.pointer("/metadata/name").and_then(Value::as_str) == Some(pod)) else { return "missing".into() };
                let node = p.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("no node").to_string();
                let names: Vec<String> = pod_claim_names(p).iter().filter_map(|n| ours.iter().find(|c| c.pointer("/metadata/name").and_then(Value::as_str) == Some(n.as_str()))).flat_map(|c| allocated_devices(c)).map(|d| d.2).collect();
                format!("{} on {node}", if names.is_empty() { "nothing".into() } else { names.join("+") })
            };
            let line = format!(
                "accelerator wave: {bound}/{want} pods bound holding {gpus} GPUs on {} nodes ({GPUS_PER_NODE} per node, published by the simulated DRA driver): {train} train-* (template one-gpu: 1 GPU, CEL memory >= 40Gi), pair (template gpu-pair: 2 GPUs on one PCIe root: {}), ext ({GPU_RESOURCE}: 1 through DeviceClass {GPU_EXT_CLASS}: {}); device violations: {}",
                used_nodes.len(),
                devices_of("pair"),
                devices_of("ext"),
                violations.len()
            );
            return anyhow::Ok((line, violations));
        }
    };
    match run.await {
        Ok(r) => r,
        Err(e) => (format!("accelerator wave failed: {e:#}"), vec![format!("device: the accelerator wave could not run: {e:#}")]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, devices: &[(&str, &str)], reserved_for: &[&str]) -> Value {
        let results: Vec<Value> = devices.iter().map(|(pool, d)| json!({"request": "gpu", "driver": "gpu.example.com", "pool": pool, "device": d})).collect();
        let reserved: Vec<Value> = reserved_for.iter().map(|u| json!({"resource": "pods", "name": "x", "uid": u})).collect();
        let mut c = json!({"metadata": {"name": name, "namespace": GPU_NS}});
        if !devices.is_empty() {
            c["status"] = json!({"allocation": {"devices": {"results": results}}, "reservedFor": reserved});
        }
        c
    }

    fn gpu_pod(name: &str, uid: &str, node: Option<&str>, generated: &str) -> Value {
        let mut p = json!({"metadata": {"name": name, "namespace": GPU_NS, "uid": uid},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": generated}]}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        p
    }

    #[test]
    fn the_accelerator_pods_ask_through_templates_and_an_extended_resource() {
        let pods = accelerator_pods(3);
        assert_eq!(pods.len(), 5);
        let (_, train) = &pods[0];
        assert_eq!(train["spec"]["resourceClaims"][0]["resourceClaimTemplateName"], "one-gpu");
        assert_eq!(train["spec"]["containers"][0]["resources"]["claims"][0]["name"], "gpu");
        assert_eq!(train["spec"]["tolerations"][0]["key"], TAINT_KEY);
        let (_, ext) = &pods[4];
        assert_eq!(ext["spec"]["containers"][0]["resources"]["limits"][GPU_RESOURCE], "1");
        assert!(pods.iter().all(|(_, p)| serde_json::from_value::<Pod>(p.clone()).is_ok()));
    }

    #[test]
    fn device_check_finds_double_allocations_and_claims_not_held_where_the_pod_runs() {
        let ok = [gpu_pod("a", "ua", Some("node-1"), "a-gpu-x"), gpu_pod("b", "ub", None, "b-gpu-y")];
        let claims = [claim("a-gpu-x", &[("node-1", "gpu-0")], &["ua"]), claim("b-gpu-y", &[], &[])];
        assert!(device_violations(&ok, &claims).is_empty(), "{:?}", device_violations(&ok, &claims));
        // gpu-0 of node-1 twice; b bound to node-2 with a claim of node-1, not reserved for it.
        let pods = [gpu_pod("a", "ua", Some("node-1"), "a-gpu-x"), gpu_pod("b", "ub", Some("node-2"), "b-gpu-y")];
        let claims = [claim("a-gpu-x", &[("node-1", "gpu-0")], &["ua"]), claim("b-gpu-y", &[("node-1", "gpu-0")], &["ua"])];
        let v = device_violations(&pods, &claims);
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].contains("allocated to both"), "{v:?}");
        assert!(v.iter().any(|m| m.contains("holds gpu-0 of pool node-1")), "{v:?}");
        assert!(v.iter().any(|m| m.contains("not reserved for it")), "{v:?}");
        // A bound pod whose claim is missing or unallocated.
        let v = device_violations(&[gpu_pod("c", "uc", Some("node-1"), "c-gpu-z")], &[]);
        assert!(v[0].contains("does not exist"), "{v:?}");
        let v = device_violations(&[gpu_pod("c", "uc", Some("node-1"), "c-gpu-z")], &[claim("c-gpu-z", &[], &[])]);
        assert!(v[0].contains("is not allocated"), "{v:?}");
    }

    #[test]
    fn a_pods_claims_include_the_extended_resource_claim() {
        let mut p = gpu_pod("a", "ua", Some("n"), "a-gpu-x");
        p["status"]["extendedResourceClaimStatus"] = json!({"resourceClaimName": "a-extended-resources-q"});
        if let Some(a) = p["spec"]["resourceClaims"].as_array_mut() {
            a.push(json!({"name": "direct", "resourceClaimName": "shared"}));
        }
        assert_eq!(pod_claim_names(&p), vec!["a-gpu-x", "shared", "a-extended-resources-q"]);
    }
}
