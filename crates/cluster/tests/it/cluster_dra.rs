//! Dynamic resource allocation in the local cluster, with no scheduler:
//! the simulated driver's slices and class, claims made from templates,
//! the kubelet refusing pods whose claims are not allocated and reserved
//! for them, and claims released, deallocated and deleted with their
//! pods. The tests write what a scheduler's PreBind writes.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_cluster::controllers::ControllersConfig;
use berth_cluster::controllers::resourceclaim::{DELETE_PROTECTION, POD_CLAIM_NAME};
use berth_cluster::dra_driver::{DEFAULT_DRIVER, DevicesConfig};
use berth_cluster::{ClusterConfig, KubeletConfig, LocalCluster};
use clap::Parser;
use k8s_openapi::api::core::v1::{Binding, Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{eventually, events};

const REASON: &str = "FailedPrepareDynamicResources";

async fn start(gpus: usize) -> LocalCluster {
    crate::support::init_logs();
    let cfg = ClusterConfig {
        nodes: 2,
        kubelet: KubeletConfig { enabled: true, start_delay: Duration::from_millis(20) },
        controllers: ControllersConfig { resync: Duration::from_millis(300), ..Default::default() },
        devices: DevicesConfig::per_node(gpus),
        ..Default::default()
    };
    LocalCluster::start(cfg).await.unwrap()
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// A pod using one claim: `source` is `{"resourceClaimTemplateName": ..}`
/// or `{"resourceClaimName": ..}`.
fn gpu_pod(name: &str, source: Value, extra: Value) -> Pod {
    let mut claim = json!({"name": "gpu"});
    json_patch::merge(&mut claim, &source);
    let mut v = json!({"metadata": {"name": name}, "spec": {"terminationGracePeriodSeconds": 1, "resourceClaims": [claim],
        "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}]}});
    json_patch::merge(&mut v, &extra);
    from(v)
}

fn binding(pod: &str, node: &str) -> Binding {
    from(json!({"metadata": {"name": pod}, "target": {"apiVersion": "v1", "kind": "Node", "name": node}}))
}

async fn bind(pods: &Api<Pod>, pod: &str, node: &str) {
    let _: kube::core::Status = pods.create_subresource("binding", pod, &PostParams::default(), &binding(pod, node)).await.unwrap();
}

/// What a scheduler's PreBind writes, in its order: the finalizer
/// (metadata), then the allocation and the reservation (status).
async fn allocate(claims: &Api<ResourceClaim>, claim: &str, node: &str, device: &str, reserve_for: Option<&Pod>) {
    let pp = PatchParams::default();
    claims.patch(claim, &pp, &Patch::Merge(json!({"metadata": {"finalizers": [DELETE_PROTECTION]}}))).await.unwrap();
    let mut status = json!({"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DEFAULT_DRIVER, "pool": node, "device": device}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]},
    }});
    if let Some(p) = reserve_for {
        status["reservedFor"] = json!([{"resource": "pods", "name": p.metadata.name, "uid": p.metadata.uid}]);
    }
    claims.patch_status(claim, &pp, &Patch::Merge(json!({"status": status}))).await.unwrap();
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn waiting_reason(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.container_statuses.as_ref()?.first()?.state.as_ref()?.waiting.as_ref()?.reason.as_deref()
}

/// The note of the pod's FailedPrepareDynamicResources event containing `part`.
async fn refusal(c: &LocalCluster, pod: &str, part: &str) -> String {
    eventually(10, &format!("{pod}: an event saying {part:?}"), || async {
        events(c).await.into_iter().find(|(p, r, note)| p == pod && r == REASON && note.contains(part)).map(|e| e.2)
    })
    .await
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    eventually(10, &format!("{name} Running"), || async {
        let p = pods.get(name).await.ok()?;
        (phase(&p) == "Running").then_some(p)
    })
    .await
}

fn recorded_claim(p: &Pod) -> Option<String> {
    let st = p.status.as_ref()?.resource_claim_statuses.as_ref()?;
    let e = st.iter().find(|e| e.name == "gpu")?;
    e.resource_claim_name.clone()
}

#[tokio::test]
async fn template_claims_wait_for_allocation_and_go_with_their_pods() {
    let c = start(2).await;
    let client = c.client().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let claims: Api<ResourceClaim> = Api::default_namespaced(client.clone());
    let templates: Api<ResourceClaimTemplate> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();

    // A pod whose template does not exist yet: no claim; bound, the kubelet says so.
    pods.create(&pp, &gpu_pod("trainer", json!({"resourceClaimTemplateName": "one-gpu"}), json!({}))).await.unwrap();
    bind(&pods, "trainer", "node-0").await;
    let note = refusal(&c, "trainer", "ResourceClaim not created yet").await;
    assert_eq!(note, "Failed to prepare dynamic resources: pod \"default/trainer\": ResourceClaim not created yet");

    // The template appears: the controller makes the claim and records it.
    templates
        .create(&pp, &from(json!({"metadata": {"name": "one-gpu"}, "spec": {
            "metadata": {"labels": {"team": "ml"}, "annotations": {"note": "from-template"}},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEFAULT_DRIVER}}]}}}})))
        .await
        .unwrap();
    let (pod, claim) = eventually(10, "trainer's claim", || async {
        let p = pods.get("trainer").await.ok()?;
        let c = claims.get(&recorded_claim(&p)?).await.ok()?;
        Some((p, c))
    })
    .await;
    let name = claim.metadata.name.clone().unwrap();
    let suffix = name.strip_prefix("trainer-gpu-").unwrap_or_else(|| panic!("claim name {name}"));
    assert!(suffix.len() == 5 && suffix.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit()), "{name}");
    let annotations = claim.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get(POD_CLAIM_NAME).map(String::as_str), Some("gpu"));
    assert_eq!(annotations.get("note").map(String::as_str), Some("from-template"));
    assert_eq!(claim.metadata.labels.clone().unwrap_or_default().get("team").map(String::as_str), Some("ml"));
    let owner = claim.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owner.len(), 1);
    assert_eq!((owner[0].api_version.as_str(), owner[0].kind.as_str(), owner[0].name.as_str()), ("v1", "Pod", "trainer"));
    assert_eq!(Some(&owner[0].uid), pod.metadata.uid.as_ref());
    assert_eq!((owner[0].controller, owner[0].block_owner_deletion), (Some(true), Some(true)));
    let requests = serde_json::to_value(&claim.spec).unwrap();
    assert_eq!(requests["devices"]["requests"][0]["exactly"]["deviceClassName"], DEFAULT_DRIVER);

    // Bound without an allocation: Pending, ContainerCreating, and the reason.
    let note = refusal(&c, "trainer", "is not allowed to use ResourceClaim").await;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let claim_uid = claim.metadata.uid.clone().unwrap_or_default();
    assert_eq!(note, format!("Failed to prepare dynamic resources: pod trainer ({uid}) is not allowed to use ResourceClaim {name} ({claim_uid})"));
    let p = eventually(5, "trainer in ContainerCreating", || async {
        let p = pods.get("trainer").await.ok()?;
        (waiting_reason(&p) == Some("ContainerCreating")).then_some(p)
    })
    .await;
    assert_eq!(phase(&p), "Pending");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(phase(&pods.get("trainer").await.unwrap()), "Pending");

    // Allocated and reserved for it, as PreBind writes them: it starts.
    allocate(&claims, &name, "node-0", "gpu-0", Some(&pod)).await;
    let p = running(&pods, "trainer").await;
    assert_eq!(p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).map(|s| s[0].ready), Some(true));
    // One event per reason, not one per retry.
    let refusals = events(&c).await.into_iter().filter(|(p, r, _)| p == "trainer" && r == REASON).count();
    assert_eq!(refusals, 2);

    // PreBind's order (claim status, then binding): it starts at once, no refusal.
    let server = pods.create(&pp, &gpu_pod("server", json!({"resourceClaimTemplateName": "one-gpu"}), json!({}))).await.unwrap();
    let server_claim = eventually(10, "server's claim", || async { recorded_claim(&pods.get("server").await.ok()?) }).await;
    allocate(&claims, &server_claim, "node-1", "gpu-0", Some(&server)).await;
    bind(&pods, "server", "node-1").await;
    running(&pods, "server").await;
    assert!(!events(&c).await.iter().any(|(p, r, _)| p == "server" && r == REASON));

    // Allocated for node-0 but bound to node-1: refused.
    let stray = pods.create(&pp, &gpu_pod("stray", json!({"resourceClaimTemplateName": "one-gpu"}), json!({}))).await.unwrap();
    let stray_claim = eventually(10, "stray's claim", || async { recorded_claim(&pods.get("stray").await.ok()?) }).await;
    allocate(&claims, &stray_claim, "node-0", "gpu-1", Some(&stray)).await;
    bind(&pods, "stray", "node-1").await;
    let note = refusal(&c, "stray", "allocated for another node").await;
    assert!(note.ends_with(&format!("ResourceClaim {stray_claim}: allocated for another node (the allocation's nodeSelector does not select node node-1)")), "{note}");

    // Deleting a pod releases, deallocates and deletes its generated claim.
    pods.delete("trainer", &DeleteParams::default()).await.unwrap();
    eventually(10, "trainer's claim deleted", || async { claims.get_opt(&name).await.unwrap().is_none().then_some(()) }).await;
    pods.delete("stray", &DeleteParams::default()).await.unwrap();
    eventually(10, "stray's claim deleted", || async { claims.get_opt(&stray_claim).await.unwrap().is_none().then_some(()) }).await;
    // The running server keeps its claim, allocated and reserved.
    let kept = claims.get(&server_claim).await.unwrap();
    let st = kept.status.unwrap_or_default();
    assert!(st.allocation.is_some());
    assert_eq!(st.reserved_for.unwrap_or_default().len(), 1);
    c.shutdown().await;
}

#[tokio::test]
async fn shared_claims_are_released_deallocated_and_reserved_for_bound_pods() {
    let c = start(2).await;
    let client = c.client().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let claims: Api<ResourceClaim> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();
    let user_claim = |name: &str| -> ResourceClaim {
        from(json!({"metadata": {"name": name}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEFAULT_DRIVER}}]}}}))
    };

    // A claim that does not exist.
    pods.create(&pp, &gpu_pod("orphan", json!({"resourceClaimName": "nope"}), json!({}))).await.unwrap();
    bind(&pods, "orphan", "node-0").await;
    let note = refusal(&c, "orphan", "fetch ResourceClaim").await;
    assert_eq!(note, "Failed to prepare dynamic resources: fetch ResourceClaim nope: resourceclaims.resource.k8s.io \"nope\" not found");

    // A claim of the user's, reserved for a pod that completes: once the
    // pod is done the claim is released and deallocated, and stays.
    claims.create(&pp, &user_claim("shared")).await.unwrap();
    let job = pods
        .create(&pp, &gpu_pod("job", json!({"resourceClaimName": "shared"}), json!({"metadata": {"annotations": {berth_cluster::COMPLETE_AFTER: "300ms"}}})))
        .await
        .unwrap();
    allocate(&claims, "shared", "node-0", "gpu-1", Some(&job)).await;
    bind(&pods, "job", "node-0").await;
    running(&pods, "job").await;
    eventually(10, "job Succeeded", || async { (phase(&pods.get("job").await.ok()?) == "Succeeded").then_some(()) }).await;
    let released = eventually(10, "shared released", || async {
        let c = claims.get("shared").await.ok()?;
        let st = c.status.clone().unwrap_or_default();
        (st.reserved_for.unwrap_or_default().is_empty() && st.allocation.is_none()).then_some(c)
    })
    .await;
    assert!(!released.metadata.finalizers.unwrap_or_default().iter().any(|f| f == DELETE_PROTECTION));
    assert!(released.metadata.deletion_timestamp.is_none());

    // Allocated after the pod was bound, without a reservation: the
    // controller reserves it for the bound pod and the kubelet starts it.
    claims.create(&pp, &user_claim("late")).await.unwrap();
    pods.create(&pp, &gpu_pod("late", json!({"resourceClaimName": "late"}), json!({}))).await.unwrap();
    bind(&pods, "late", "node-1").await;
    refusal(&c, "late", "is not allowed to use ResourceClaim late").await;
    allocate(&claims, "late", "node-1", "gpu-1", None).await;
    let p = running(&pods, "late").await;
    let reserved = claims.get("late").await.unwrap().status.unwrap_or_default().reserved_for.unwrap_or_default();
    assert_eq!(reserved.iter().map(|r| (r.resource.as_str(), r.name.as_str(), Some(&r.uid))).collect::<Vec<_>>(), [("pods", "late", p.metadata.uid.as_ref())]);

    // Deleting a claim that nothing uses drops its finalizer: it goes.
    pods.delete("late", &DeleteParams::default()).await.unwrap();
    eventually(10, "late released", || async {
        let st = claims.get("late").await.ok()?.status.unwrap_or_default();
        st.reserved_for.unwrap_or_default().is_empty().then_some(())
    })
    .await;
    claims.delete("late", &DeleteParams::default()).await.unwrap();
    eventually(10, "late deleted", || async { claims.get_opt("late").await.unwrap().is_none().then_some(()) }).await;
    c.shutdown().await;
}

/// `berth cluster`'s command line, for the flags.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: berth_cluster::cli::ClusterArgs,
}

#[tokio::test]
async fn devices_per_node_publishes_slices_and_a_class_that_follow_the_nodes() {
    crate::support::init_logs();
    let cli = Cli::try_parse_from(["berth", "--listen", "127.0.0.1:0", "--nodes", "2", "--devices-per-node", "2"]).unwrap();
    let cfg = cli.args.config().unwrap();
    assert_eq!(cfg.devices, DevicesConfig::per_node(2));
    let c = LocalCluster::start(cfg).await.unwrap();
    let client = c.client().unwrap();
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let list = slices.list(&ListParams::default()).await.unwrap().items;
    let mut seen: Vec<(String, String, Vec<String>)> = list
        .iter()
        .map(|s| {
            let spec = &s.spec;
            assert_eq!(spec.driver, DEFAULT_DRIVER);
            assert_eq!(Some(&spec.pool.name), spec.node_name.as_ref());
            (spec.node_name.clone().unwrap_or_default(), spec.pool.name.clone(), spec.devices.iter().flatten().map(|d| d.name.clone()).collect())
        })
        .collect();
    seen.sort();
    assert_eq!(seen, [("node-0".into(), "node-0".into(), vec!["gpu-0".to_string(), "gpu-1".into()]), ("node-1".into(), "node-1".into(), vec!["gpu-0".to_string(), "gpu-1".into()])]);
    let device = serde_json::to_value(&list[0].spec.devices.as_ref().unwrap()[1]).unwrap();
    assert_eq!(device["capacity"]["memory"]["value"], "80Gi");
    assert_eq!(device["attributes"]["pcieRoot"], serde_json::to_value(&list[0].spec.devices.as_ref().unwrap()[0]).unwrap()["attributes"]["pcieRoot"]);
    let class = Api::<DeviceClass>::all(client.clone()).get(DEFAULT_DRIVER).await.unwrap();
    let class = serde_json::to_value(&class.spec).unwrap();
    assert_eq!(class["selectors"][0]["cel"]["expression"], "device.driver == \"gpu.example.com\"");

    // A new node gets its slice; a deleted one loses it.
    c.add_node("node-9").unwrap();
    let of = |node: &'static str| {
        let slices = slices.clone();
        async move { slices.list(&ListParams::default()).await.unwrap().items.into_iter().filter(|s| s.spec.node_name.as_deref() == Some(node)).count() }
    };
    eventually(10, "node-9's slice", || async { (of("node-9").await == 1).then_some(()) }).await;
    Api::<Node>::all(client.clone()).delete("node-0", &DeleteParams::default()).await.unwrap();
    eventually(10, "node-0's slice withdrawn", || async { (of("node-0").await == 0).then_some(()) }).await;
    c.shutdown().await;

    // A devices file, and the two flags together are refused.
    let dir = std::env::temp_dir().join(format!("berth-devices-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("devices.yaml");
    std::fs::write(&file, "nodes:\n  node-1:\n    - name: nic-0\n      driver: nic.example.com\n      attributes: {speed: 100}\n").unwrap();
    let path = file.display().to_string();
    let cfg = Cli::try_parse_from(["berth", "--devices", path.as_str()]).unwrap().args.config().unwrap();
    assert!(cfg.devices.devices_of("node-0").is_empty());
    assert_eq!(cfg.devices.devices_of("node-1").keys().copied().collect::<Vec<_>>(), ["nic.example.com"]);
    assert!(Cli::try_parse_from(["berth", "--devices", path.as_str(), "--devices-per-node", "2"]).is_err());
    std::fs::write(&file, "nodes:\n  node-1:\n    - name: Bad\n").unwrap();
    let e = Cli::try_parse_from(["berth", "--devices", path.as_str()]).unwrap().args.config().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("DNS label"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
