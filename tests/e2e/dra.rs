//! Dynamic resource allocation end to end: the daemon over HTTP against the
//! local cluster, whose simulated DRA driver publishes 2 GPUs per node, whose
//! resourceclaim controller makes claims from templates and releases them
//! with their pods, and whose kubelets start a pod only once its claims are
//! allocated and reserved for it. Checked after each step: no device is in
//! two allocations, and every bound pod's claims are allocated on its node
//! and reserved for it.
#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use axum::http::Method;
use berth_cluster::controllers::ControllersConfig;
use berth_cluster::dra_driver::{DEFAULT_DRIVER, DevicesConfig};
use berth_cluster::{ClusterConfig, LocalCluster};
use berth_daemon::{self as daemon, Options};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use crate::e2e_support::*;
use crate::fault_proxy::{Fault, FaultProxy, Rule};

async fn deadline<F: std::future::Future<Output = ()>>(secs: u64, f: F) {
    tokio::time::timeout(Duration::from_secs(secs), f).await.unwrap_or_else(|_| panic!("test deadline ({secs} s) exceeded"));
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// `nodes` nodes with `gpus` simulated GPUs each, the resourceclaim
/// controller and the kubelets on.
async fn gpu_cluster(nodes: usize, gpus: usize) -> LocalCluster {
    init_logs();
    let cfg = ClusterConfig {
        devices: DevicesConfig::per_node(gpus),
        controllers: ControllersConfig { resync: Duration::from_millis(300), ..Default::default() },
        ..cluster_config(nodes, 2, "8", 110)
    };
    LocalCluster::start(cfg).await.unwrap()
}

/// A request for one GPU of the driver's class, with CEL `selector` when given.
fn one_gpu(selector: Option<&str>) -> Value {
    let mut exactly = json!({"deviceClassName": DEFAULT_DRIVER});
    if let Some(s) = selector {
        exactly["selectors"] = json!([{"cel": {"expression": s}}]);
    }
    json!({"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}})
}

/// A pod of the test profile with one claim `source` (`{"resourceClaimTemplateName": ..}`
/// or `{"resourceClaimName": ..}`) used by its container.
fn gpu_pod(name: &str, source: Value) -> Pod {
    let mut claim = json!({"name": "gpu"});
    merge(&mut claim, &source);
    pod(name, "100m", json!({"spec": {"resourceClaims": [claim],
        "containers": [{"name": "c", "image": "cuda", "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}]}}))
}

async fn create_template(client: &kube::Client) {
    let templates: Api<ResourceClaimTemplate> = Api::default_namespaced(client.clone());
    templates.create(&PostParams::default(), &from(json!({"metadata": {"name": "one-gpu"}, "spec": {"spec": one_gpu(None)}}))).await.unwrap();
}

async fn create_claim(client: &kube::Client, name: &str, selector: Option<&str>) {
    let claims: Api<ResourceClaim> = Api::default_namespaced(client.clone());
    claims.create(&PostParams::default(), &from(json!({"metadata": {"name": name}, "spec": one_gpu(selector)}))).await.unwrap();
}

/// The claims a pod uses: named, or generated from a template (as its status records them).
fn claims_of(p: &Pod) -> Vec<String> {
    let spec = p.spec.as_ref().and_then(|s| s.resource_claims.as_ref()).cloned().unwrap_or_default();
    let generated: HashMap<String, String> = p
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|s| Some((s.name.clone(), s.resource_claim_name.clone()?)))
        .collect();
    spec.iter().filter_map(|c| c.resource_claim_name.clone().or_else(|| generated.get(&c.name).cloned())).collect()
}

/// (driver, pool, device) of each device a claim is allocated.
fn devices_of(c: &ResourceClaim) -> Vec<(String, String, String)> {
    let a = c.status.as_ref().and_then(|s| s.allocation.as_ref());
    a.and_then(|a| a.devices.as_ref()).and_then(|d| d.results.as_ref()).into_iter().flatten().map(|r| (r.driver.clone(), r.pool.clone(), r.device.clone())).collect()
}

fn reserved_for(c: &ResourceClaim) -> Vec<String> {
    c.status.as_ref().and_then(|s| s.reserved_for.as_ref()).into_iter().flatten().map(|r| r.uid.clone()).collect()
}

/// The invariants: no device in two allocations; every bound pod's claims
/// allocated on its node (the node's pool) and reserved for it; every
/// allocated claim reserved for some pod. Returns the claims by name.
async fn check_allocations(client: &kube::Client) -> HashMap<String, ResourceClaim> {
    let claims_api: Api<ResourceClaim> = Api::default_namespaced(client.clone());
    let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
    // Pods first: a claim is written before its pod is bound, so the
    // claims read after the pods show every bound pod's allocation.
    let all_pods = pods(&pods_api).await;
    let claims: HashMap<String, ResourceClaim> = claims_api.list(&ListParams::default()).await.unwrap().items.into_iter().map(|c| (c.metadata.name.clone().unwrap(), c)).collect();
    let mut seen: HashMap<(String, String, String), String> = HashMap::new();
    for (name, c) in &claims {
        for d in devices_of(c) {
            if let Some(other) = seen.insert(d.clone(), name.clone()) {
                panic!("device {d:?} is allocated to both {other} and {name}");
            }
        }
    }
    for p in all_pods {
        let Some(node) = node_of(&p) else { continue };
        let pname = p.metadata.name.clone().unwrap();
        let uid = p.metadata.uid.clone().unwrap();
        for cn in claims_of(&p) {
            let c = claims.get(&cn).unwrap_or_else(|| panic!("bound pod {pname}: claim {cn} missing"));
            let devs = devices_of(c);
            assert!(!devs.is_empty(), "bound pod {pname} on {node}: claim {cn} not allocated");
            assert!(devs.iter().all(|(_, pool, _)| pool == node), "bound pod {pname} on {node}: claim {cn} allocated on {devs:?}");
            assert!(reserved_for(c).contains(&uid), "bound pod {pname}: claim {cn} not reserved for it");
        }
    }
    claims
}

/// Every allocated claim is reserved for a pod that exists (none left
/// allocated without its pod once things settle).
async fn no_claim_without_its_pod(client: &kube::Client) -> bool {
    let claims_api: Api<ResourceClaim> = Api::default_namespaced(client.clone());
    let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
    let uids: HashSet<String> = pods(&pods_api).await.into_iter().filter_map(|p| p.metadata.uid).collect();
    claims_api.list(&ListParams::default()).await.unwrap().items.iter().filter(|c| !devices_of(c).is_empty()).all(|c| reserved_for(c).iter().any(|u| uids.contains(u)))
}

fn bound_count(all: &[Pod]) -> usize {
    all.iter().filter(|p| node_of(p).is_some()).count()
}

fn unschedulable(all: &[Pod]) -> Vec<(&str, String)> {
    all.iter()
        .filter(|p| node_of(p).is_none())
        .filter_map(|p| scheduled_condition(p).filter(|c| c.0 == "False" && c.1 == "Unschedulable").map(|c| (p.metadata.name.as_deref().unwrap_or(""), c.2)))
        .collect()
}

// 4 nodes × 2 GPUs, 10 pods from one template: 8 bound, each claim on a
// distinct device of its pod's node and reserved for it; 2 Pending with
// the DRA reason. Deleting 2 bound pods frees their devices (the
// controller deallocates), and the claim events bind the other 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_pods_from_one_template_share_eight_gpus() {
    deadline(120, async {
        let c = gpu_cluster(4, 2).await;
        let d = start_daemon(&c, &config(""), "dra").await;
        until_leading(&d, 20).await;
        let client = c.client().unwrap();
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        create_template(&client).await;
        create_all(&pods_api, (0..10).map(|i| gpu_pod(&format!("train-{i}"), json!({"resourceClaimTemplateName": "one-gpu"}))).collect(), 5).await;
        let waiting = eventually(60, "8 pods bound, 2 reported unschedulable", || async {
            let all = pods(&pods_api).await;
            // Before the controller made its claim, a pod is reported
            // with "ResourceClaim not created yet": wait for the verdict on devices.
            let u: Vec<(String, String)> = unschedulable(&all).into_iter().filter(|(_, m)| m.contains("cannot allocate all claims")).map(|(n, m)| (n.to_string(), m)).collect();
            (bound_count(&all) == 8 && u.len() == 2).then_some(u)
        })
        .await;
        for (name, message) in &waiting {
            assert!(message.starts_with("0/4 nodes are available: ") && message.contains("cannot allocate all claims"), "{name}: {message}");
        }
        let claims = check_allocations(&client).await;
        let allocated = claims.values().filter(|c| !devices_of(c).is_empty()).count();
        assert_eq!(allocated, 8, "one allocated claim per bound pod");
        // Still so a little later: the waiting pods are retried, never bound.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(bound_count(&pods(&pods_api).await), 8);
        check_allocations(&client).await;
        // Delete two bound pods: their claims go, and the two waiting pods take the devices.
        let bound: Vec<String> = pods(&pods_api).await.into_iter().filter(|p| node_of(p).is_some()).filter_map(|p| p.metadata.name).take(2).collect();
        for n in &bound {
            pods_api.delete(n, &DeleteParams::default()).await.unwrap();
        }
        eventually(60, "the two waiting pods bound once devices freed up", || async {
            let all = pods(&pods_api).await;
            let names: HashSet<String> = all.iter().filter(|p| node_of(p).is_some()).filter_map(|p| p.metadata.name.clone()).collect();
            (waiting.iter().all(|(n, _)| names.contains(n)) && bound.iter().all(|n| !names.contains(n))).then_some(())
        })
        .await;
        check_allocations(&client).await;
        eventually(30, "every allocated claim reserved for a pod that exists", || async { no_claim_without_its_pod(&client).await.then_some(()) }).await;
        let text = d.metrics.render();
        assert!(text.contains("berth_dra_allocation_attempts_total{result=\"allocated\"} 10"), "{}", text.lines().filter(|l| l.contains("berth_dra")).collect::<Vec<_>>().join("\n"));
        let (_, ready) = http_get(d.admin_addr, "/readyz?verbose").await;
        assert!(ready.contains("[+]watch resourceclaims synced") && ready.contains("[+]watch resourceslices synced"), "{ready}");
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// A pod naming a claim allocated on some node lands on that node; one
// claim is shared by 3 pods; a claim whose selector matches no device
// keeps its pod Pending with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_claims_follow_their_allocation_and_unmatched_selectors_wait() {
    deadline(120, async {
        let c = gpu_cluster(4, 2).await;
        let d = start_daemon(&c, &config(""), "dra-shared").await;
        until_leading(&d, 20).await;
        let client = c.client().unwrap();
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        let claims_api: Api<ResourceClaim> = Api::default_namespaced(client.clone());
        create_claim(&client, "shared", None).await;
        create_claim(&client, "nomatch", Some("device.attributes[\"gpu.example.com\"].model == \"NO-SUCH-MODEL\"")).await;
        pods_api.create(&PostParams::default(), &gpu_pod("first", json!({"resourceClaimName": "shared"}))).await.unwrap();
        let node = eventually(30, "first bound", || async { pods_api.get("first").await.ok().and_then(|p| node_of(&p).map(str::to_string)) }).await;
        let claim = claims_api.get("shared").await.unwrap();
        assert_eq!(devices_of(&claim).first().map(|d| d.1.clone()), Some(node.clone()), "the claim is allocated on first's node");
        // Two more pods name the allocated claim: they go where it is.
        create_all(&pods_api, vec![gpu_pod("second", json!({"resourceClaimName": "shared"})), gpu_pod("third", json!({"resourceClaimName": "shared"}))], 2).await;
        pods_api.create(&PostParams::default(), &gpu_pod("lonely", json!({"resourceClaimName": "nomatch"}))).await.unwrap();
        eventually(30, "second and third bound", || async {
            let all = pods(&pods_api).await;
            let on = |n: &str| all.iter().find(|p| p.metadata.name.as_deref() == Some(n)).and_then(|p| node_of(p).map(str::to_string));
            (on("second").is_some() && on("third").is_some()).then_some(())
        })
        .await;
        for n in ["second", "third"] {
            assert_eq!(node_of(&pods_api.get(n).await.unwrap()), Some(node.as_str()), "{n} left the claim's node");
        }
        let claims = check_allocations(&client).await;
        assert_eq!(reserved_for(&claims["shared"]).len(), 3, "shared by three pods");
        assert_eq!(devices_of(&claims["shared"]).len(), 1);
        let (_, reason, message) = eventually(30, "lonely reported unschedulable", || async {
            pods_api.get("lonely").await.ok().as_ref().and_then(scheduled_condition).filter(|c| c.0 == "False")
        })
        .await;
        assert_eq!(reason, "Unschedulable");
        assert!(message.contains("cannot allocate all claims"), "{message}");
        assert!(devices_of(&claims_api.get("nomatch").await.unwrap()).is_empty());
        assert!(node_of(&pods_api.get("lonely").await.unwrap()).is_none());
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// A pod naming a claim that does not exist yet is gated by PreEnqueue: it
// stays Pending with no PodScheduled condition (upstream reports no
// PreEnqueue rejection), and the claim's creation lets it in: it binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_waits_gated_for_its_claim_and_binds_once_it_exists() {
    deadline(90, async {
        let c = gpu_cluster(2, 2).await;
        let d = start_daemon(&c, &config(""), "dra-gate").await;
        until_leading(&d, 20).await;
        let client = c.client().unwrap();
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        let claims_api: Api<ResourceClaim> = Api::default_namespaced(client.clone());
        pods_api.create(&PostParams::default(), &gpu_pod("early", json!({"resourceClaimName": "later"}))).await.unwrap();
        // A pod update (a label) while the claim is still missing: it stays gated.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let patch = json!({"metadata": {"labels": {"touched": "yes"}}});
        pods_api.patch("early", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let p = pods_api.get("early").await.unwrap();
        assert!(node_of(&p).is_none(), "bound without its claim");
        assert_eq!(scheduled_condition(&p), None, "a gated pod is not reported");
        create_claim(&client, "later", None).await;
        let node = eventually(30, "early bound once its claim exists", || async { pods_api.get("early").await.ok().and_then(|p| node_of(&p).map(str::to_string)) }).await;
        let claim = claims_api.get("later").await.unwrap();
        assert_eq!(devices_of(&claim).first().map(|d| d.1.clone()), Some(node));
        check_allocations(&client).await;
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// A claim allocated (by a driver, say) on a node the pod cannot go to
// (cordoned), reserved for no one: PostFilter finds it usable nowhere,
// berth deallocates it, and the claim's update brings the pod back: it
// binds on the other node with a new allocation there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_allocated_where_the_pod_cannot_go_is_deallocated_and_moved() {
    deadline(120, async {
        let c = gpu_cluster(2, 2).await;
        let d = start_daemon(&c, &config(""), "dra-dealloc").await;
        until_leading(&d, 20).await;
        let client = c.client().unwrap();
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        let claims_api: Api<ResourceClaim> = Api::default_namespaced(client.clone());
        let nodes_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        // A real allocation, taken from a first pod, which then goes (the
        // controller deallocates the claim when it is released).
        create_claim(&client, "stale", None).await;
        pods_api.create(&PostParams::default(), &gpu_pod("first", json!({"resourceClaimName": "stale"}))).await.unwrap();
        let old = eventually(30, "first bound", || async { pods_api.get("first").await.ok().and_then(|p| node_of(&p).map(str::to_string)) }).await;
        let allocation = serde_json::to_value(claims_api.get("stale").await.unwrap().status.and_then(|s| s.allocation)).unwrap();
        assert!(!allocation.is_null());
        pods_api.delete("first", &DeleteParams::default()).await.unwrap();
        eventually(30, "first gone and its claim deallocated", || async {
            let gone = pods_api.get_opt("first").await.unwrap().is_none();
            let free = devices_of(&claims_api.get("stale").await.unwrap()).is_empty();
            (gone && free).then_some(())
        })
        .await;
        // The node is cordoned, then the claim allocated there again,
        // reserved for no one.
        let pp = kube::api::PatchParams::default();
        nodes_api.patch(&old, &pp, &kube::api::Patch::Merge(json!({"spec": {"unschedulable": true}}))).await.unwrap();
        claims_api.patch_status("stale", &pp, &kube::api::Patch::Merge(json!({"status": {"allocation": allocation}}))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        pods_api.create(&PostParams::default(), &gpu_pod("second", json!({"resourceClaimName": "stale"}))).await.unwrap();
        let new = eventually(30, "second bound", || async { pods_api.get("second").await.ok().and_then(|p| node_of(&p).map(str::to_string)) }).await;
        assert_ne!(new, old, "bound on the cordoned node");
        let claim = claims_api.get("stale").await.unwrap();
        let devs = devices_of(&claim);
        assert_eq!(devs.len(), 1);
        assert_eq!(devs[0].1, new, "allocated anew on second's node");
        check_allocations(&client).await;
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// Claim writes through a fault proxy: none lost first, then replies lost
// after the commit, and 409s without a commit. Without faults, PreBind
// writes each claim twice (finalizer, then allocation and reservation)
// against the cache's claim and the first write's reply, reading nothing;
// with them, berth reads the claim back each time (it counts them), every
// pod ends bound with its claim allocated and reserved, and no device is
// ever in two allocations (checked all along).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_and_conflicting_claim_writes_are_read_back() {
    deadline(150, async {
        let c = gpu_cluster(5, 2).await;
        let client = c.client().unwrap();
        let proxy = FaultProxy::start(client.clone()).await;
        let opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: "dra-faults".into(), ..Options::default() };
        let d = daemon::start(proxy.client(), &config(""), opts).await.unwrap();
        until_leading(&d, 20).await;
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        create_template(&client).await;
        // 0. No fault: two writes per claim, no read.
        create_all(&pods_api, (0..2).map(|i| gpu_pod(&format!("clean-{i}"), json!({"resourceClaimTemplateName": "one-gpu"}))).collect(), 2).await;
        eventually(60, "the 2 pods bound", || async {
            check_allocations(&client).await;
            (bound_count(&pods(&pods_api).await) == 2).then_some(())
        })
        .await;
        let counts = d.write_counts();
        assert_eq!((counts.claim_writes, counts.claim_reads, counts.claim_conflicts, counts.claim_writes_unknown), (4, 0, 0, 0), "{counts:?}");
        // 1. Every claim write is committed but its reply lost.
        proxy.set_rules(vec![Rule::new(Some(Method::PATCH), "/resourceclaims/", Fault::DropReplyAfterCommit, 1.0)]);
        create_all(&pods_api, (0..4).map(|i| gpu_pod(&format!("lost-{i}"), json!({"resourceClaimTemplateName": "one-gpu"}))).collect(), 4).await;
        eventually(60, "the 6 pods bound", || async {
            check_allocations(&client).await;
            (bound_count(&pods(&pods_api).await) == 6).then_some(())
        })
        .await;
        let counts = d.write_counts();
        assert!(counts.claim_writes_unknown >= 4 && counts.claim_reads >= 4, "{counts:?}");
        // 2. Half the claim writes answered 409 without reaching the API.
        proxy.set_rules(vec![Rule::new(Some(Method::PATCH), "/resourceclaims/", Fault::Status(409), 0.5)]);
        create_all(&pods_api, (0..4).map(|i| gpu_pod(&format!("conflict-{i}"), json!({"resourceClaimTemplateName": "one-gpu"}))).collect(), 4).await;
        eventually(60, "the 10 pods bound", || async {
            check_allocations(&client).await;
            (bound_count(&pods(&pods_api).await) == 10).then_some(())
        })
        .await;
        let counts = d.write_counts();
        assert!(counts.claim_conflicts >= 1, "{counts:?}");
        proxy.set_rules(vec![]);
        let claims = check_allocations(&client).await;
        assert_eq!(claims.values().filter(|c| !devices_of(c).is_empty()).count(), 10);
        assert!(no_claim_without_its_pod(&client).await);
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// berth is killed in the middle: its claim writes made, its binds held
// (through the fault proxy), then aborted; another replica takes over
// against the cluster directly. Pods whose claims were allocated and
// reserved for them go where their claims are; no device is allocated
// twice, and no claim stays allocated without its pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_allocates_no_device_twice() {
    deadline(150, async {
        let c = gpu_cluster(4, 2).await;
        let client = c.client().unwrap();
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        let claims_api: Api<ResourceClaim> = Api::default_namespaced(client.clone());
        create_template(&client).await;
        let cfg = config_short_lease("");
        let proxy = FaultProxy::start(client.clone()).await;
        proxy.hold(Method::POST, "/binding");
        let opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: "dra-before".into(), ..Options::default() };
        let d = daemon::start(proxy.client(), &cfg, opts).await.unwrap();
        until_leading(&d, 20).await;
        create_all(&pods_api, (0..10).map(|i| gpu_pod(&format!("wave-{i}"), json!({"resourceClaimTemplateName": "one-gpu"}))).collect(), 10).await;
        eventually(30, "claims allocated and reserved, their pods' binds held", || async {
            let all = claims_api.list(&ListParams::default()).await.unwrap().items;
            let done = all.iter().filter(|c| !devices_of(c).is_empty() && !reserved_for(c).is_empty()).count();
            (done >= 4 && proxy.holding() >= 4).then_some(())
        })
        .await;
        assert_eq!(bound_count(&pods(&pods_api).await), 0, "binds are held");
        d.abort();
        drop(proxy);
        check_allocations(&client).await;
        let d = start_daemon(&c, &cfg, "dra-after").await;
        until_leading(&d, 30).await;
        eventually(60, "8 bound and 2 waiting", || async {
            check_allocations(&client).await;
            let all = pods(&pods_api).await;
            (bound_count(&all) == 8 && unschedulable(&all).len() == 2).then_some(())
        })
        .await;
        eventually(30, "every allocated claim reserved for a pod that exists", || async { no_claim_without_its_pod(&client).await.then_some(()) }).await;
        let claims = check_allocations(&client).await;
        assert_eq!(claims.values().filter(|c| !devices_of(c).is_empty()).count(), 8);
        // The new leader only reserved what the old one had allocated.
        let text = d.metrics.render();
        assert!(!text.contains("berth_dra_allocation_attempts_total{result=\"error\"}"), "{text}");
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// Kubernetes 1.36 serves resource.k8s.io/v1 without DeviceTaintRules: that
// optional kind is not served (its feature off, readiness not held back),
// and claims are allocated as on 1.37.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_device_taint_rules_claims_are_still_allocated() {
    deadline(90, async {
        init_logs();
        let cfg = ClusterConfig {
            devices: DevicesConfig::per_node(1),
            controllers: ControllersConfig { resync: Duration::from_millis(300), ..Default::default() },
            kubernetes_version: berth_cluster::version::KubeVersion::new(36).unwrap(),
            ..cluster_config(2, 2, "8", 110)
        };
        let c = LocalCluster::start(cfg).await.unwrap();
        let d = start_daemon(&c, &config(""), "dra-136").await;
        until_leading(&d, 20).await;
        let (_, ready) = http_get(d.admin_addr, "/readyz?verbose").await;
        assert!(ready.contains("[+]watch devicetaintrules not served") && ready.contains("device taints from DeviceTaintRules off"), "{ready}");
        assert!(ready.contains("[+]watch resourceclaims synced; optional: dynamic resource allocation (resource.k8s.io/v1) on"), "{ready}");
        let client = c.client().unwrap();
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        create_template(&client).await;
        pods_api.create(&PostParams::default(), &gpu_pod("solo", json!({"resourceClaimTemplateName": "one-gpu"}))).await.unwrap();
        eventually(30, "solo bound", || async { pods_api.get("solo").await.ok().and_then(|p| node_of(&p).map(str::to_string)) }).await;
        check_allocations(&client).await;
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// A pod asking for an extended resource a DeviceClass backs
// (spec.extendedResourceName) that no node lists: PreBind creates its
// claim (annotated, owned by the pod), allocates and reserves it, and
// records it in the pod's status.extendedResourceClaimStatus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_resources_backed_by_a_class_get_their_claim() {
    deadline(90, async {
        let c = gpu_cluster(2, 3).await;
        let d = start_daemon(&c, &config(""), "dra-extended").await;
        until_leading(&d, 20).await;
        let client = c.client().unwrap();
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        let claims_api: Api<ResourceClaim> = Api::default_namespaced(client.clone());
        // A class backing `example.com/gpu`, which no node lists.
        let classes: Api<k8s_openapi::api::resource::v1::DeviceClass> = Api::all(client.clone());
        classes
            .create(&PostParams::default(), &from(json!({"metadata": {"name": "gpu-ext"}, "spec": {"extendedResourceName": "example.com/gpu",
                "selectors": [{"cel": {"expression": format!("device.driver == \"{DEFAULT_DRIVER}\"")}}]}})))
            .await
            .unwrap();
        let resource = "example.com/gpu".to_string();
        let p = pod("ext", "100m", json!({"spec": {"containers": [{"name": "c", "image": "cuda",
            "resources": {"requests": {"cpu": "100m", resource.clone(): "1"}, "limits": {resource.clone(): "1"}}}]}}));
        pods_api.create(&PostParams::default(), &p).await.unwrap();
        let (node, uid) = eventually(30, "ext bound", || async { pods_api.get("ext").await.ok().and_then(|p| Some((node_of(&p)?.to_string(), p.metadata.uid.clone()?))) }).await;
        let claims = claims_api.list(&ListParams::default()).await.unwrap().items;
        assert_eq!(claims.len(), 1, "{claims:?}");
        let claim = &claims[0];
        let m = &claim.metadata;
        assert!(m.name.as_deref().is_some_and(|n| n.starts_with("ext-extended-resources-")), "{m:?}");
        assert_eq!(m.annotations.as_ref().and_then(|a| a.get("resource.kubernetes.io/extended-resource-claim")).map(String::as_str), Some("true"));
        assert!(m.owner_references.iter().flatten().any(|o| o.uid == uid && o.controller == Some(true)));
        assert!(m.finalizers.iter().flatten().any(|f| f == "resource.kubernetes.io/delete-protection"));
        let devs = devices_of(claim);
        assert_eq!(devs.len(), 1);
        assert_eq!(devs[0].1, node);
        assert_eq!(reserved_for(claim), vec![uid]);
        let status = serde_json::to_value(pods_api.get("ext").await.unwrap().status).unwrap();
        assert_eq!(status.pointer("/extendedResourceClaimStatus/resourceClaimName").and_then(Value::as_str), m.name.as_deref(), "{status}");
        // The class's implicit name, deviceclass.resource.kubernetes.io/<class>, works alike.
        let implicit = "deviceclass.resource.kubernetes.io/gpu-ext".to_string();
        let p = pod("implicit", "100m", json!({"spec": {"containers": [{"name": "c", "image": "cuda",
            "resources": {"requests": {"cpu": "100m", implicit.clone(): "1"}, "limits": {implicit.clone(): "1"}}}]}}));
        pods_api.create(&PostParams::default(), &p).await.unwrap();
        let (node, uid) = eventually(30, "implicit bound", || async { pods_api.get("implicit").await.ok().and_then(|p| Some((node_of(&p)?.to_string(), p.metadata.uid.clone()?))) }).await;
        let claims = claims_api.list(&ListParams::default()).await.unwrap().items;
        let claim = claims.iter().find(|c| c.metadata.name.as_deref().is_some_and(|n| n.starts_with("implicit-extended-resources-"))).unwrap_or_else(|| panic!("{claims:?}"));
        let devs = devices_of(claim);
        assert_eq!(devs.len(), 1);
        assert_eq!(devs[0].1, node);
        assert_eq!(reserved_for(claim), vec![uid]);
        let status = serde_json::to_value(pods_api.get("implicit").await.unwrap().status).unwrap();
        assert_eq!(status.pointer("/extendedResourceClaimStatus/requestMappings/0/resourceName").and_then(Value::as_str), Some(implicit.as_str()), "{status}");
        assert_eq!(status.pointer("/extendedResourceClaimStatus/requestMappings/0/containerName").and_then(Value::as_str), Some("c"), "{status}");
        // Two containers asking for one each: a request per container (as
        // upstream names them: the container's index, the resource's among
        // its sorted request names), each container mapped to its own, so
        // that the kubelet gives each container its own device.
        let gpu = |name: &str| json!({"name": name, "image": "cuda", "resources": {"requests": {"cpu": "100m", resource.clone(): "1"}, "limits": {resource.clone(): "1"}}});
        pods_api.create(&PostParams::default(), &pod("two", "100m", json!({"spec": {"containers": [gpu("a"), gpu("b")]}}))).await.unwrap();
        eventually(30, "two bound", || async { pods_api.get("two").await.ok().and_then(|p| node_of(&p).map(str::to_string)) }).await;
        let claims = claims_api.list(&ListParams::default()).await.unwrap().items;
        let claim = claims.iter().find(|c| c.metadata.name.as_deref().is_some_and(|n| n.starts_with("two-extended-resources-"))).unwrap_or_else(|| panic!("{claims:?}"));
        let requests: Vec<(String, i64)> = claim.spec.as_ref().and_then(|s| s.devices.as_ref()).and_then(|d| d.requests.clone()).unwrap_or_default().into_iter().map(|r| (r.name, r.exactly.and_then(|e| e.count).unwrap_or(0))).collect();
        assert_eq!(requests, vec![("container-0-request-1".to_string(), 1), ("container-1-request-1".to_string(), 1)]);
        assert_eq!(devices_of(claim).len(), 2);
        let status = serde_json::to_value(pods_api.get("two").await.unwrap().status).unwrap();
        let mappings: Vec<(&str, &str)> = status
            .pointer("/extendedResourceClaimStatus/requestMappings")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|m| (m["containerName"].as_str().unwrap_or(""), m["requestName"].as_str().unwrap_or(""))).collect())
            .unwrap_or_default();
        assert_eq!(mappings, vec![("a", "container-0-request-1"), ("b", "container-1-request-1")], "{status}");
        check_allocations(&client).await;
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// A pod asking for an extended resource before any DeviceClass backs it
// is rejected by NodeResourcesFit (no node lists the resource); the
// class's creation requeues it (upstream's Fit registers DeviceClass
// Add/Update with DRAExtendedResource) and it binds with its claim, long
// before the 5-minute flush of unschedulable pods. This was the flaky
// failed-bind test's cause: when the daemon saw its pod before its class,
// the pod waited for the flush, and no bind (nor Unreserve) happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_extended_resource_has_no_class_yet_binds_once_the_class_exists() {
    deadline(90, async {
        let c = gpu_cluster(2, 2).await;
        let d = start_daemon(&c, &config(""), "dra-class-later").await;
        until_leading(&d, 20).await;
        let client = c.client().unwrap();
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        let p = pod("early", "100m", json!({"spec": {"containers": [{"name": "c", "image": "cuda",
            "resources": {"requests": {"cpu": "100m", "example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}}}]}}));
        pods_api.create(&PostParams::default(), &p).await.unwrap();
        let why = eventually(30, "early unschedulable", || async { unschedulable(&pods(&pods_api).await).first().map(|(_, m)| m.clone()) }).await;
        assert!(why.contains("Insufficient example.com/gpu"), "{why}");
        let classes: Api<k8s_openapi::api::resource::v1::DeviceClass> = Api::all(client.clone());
        classes.create(&PostParams::default(), &from(json!({"metadata": {"name": "gpu-ext"}, "spec": {"extendedResourceName": "example.com/gpu"}}))).await.unwrap();
        eventually(30, "early bound once its class exists", || async { pods_api.get("early").await.ok().and_then(|p| node_of(&p).map(str::to_string)) }).await;
        check_allocations(&client).await;
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// PreBind fails after creating the extended-resource claim (the pod's
// status write is refused): berth deletes that claim (upstream's
// Unreserve), so no device stays allocated to a claim nobody uses; once
// the writes pass, the pod binds with a single claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_bind_deletes_the_extended_resource_claim_it_created() {
    deadline(120, async {
        let c = gpu_cluster(2, 2).await;
        let client = c.client().unwrap();
        let proxy = FaultProxy::start(client.clone()).await;
        let opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: "dra-unreserve".into(), ..Options::default() };
        let d = daemon::start(proxy.client(), &config(""), opts).await.unwrap();
        until_leading(&d, 20).await;
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        let claims_api: Api<ResourceClaim> = Api::default_namespaced(client.clone());
        let classes: Api<k8s_openapi::api::resource::v1::DeviceClass> = Api::all(client.clone());
        classes.create(&PostParams::default(), &from(json!({"metadata": {"name": "gpu-ext"}, "spec": {"extendedResourceName": "example.com/gpu"}}))).await.unwrap();
        proxy.set_rules(vec![Rule::new(Some(Method::PATCH), "/pods/ext/status", Fault::Status(422), 1.0)]);
        let p = pod("ext", "100m", json!({"spec": {"containers": [{"name": "c", "image": "cuda",
            "resources": {"requests": {"cpu": "100m", "example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}}}]}}));
        pods_api.create(&PostParams::default(), &p).await.unwrap();
        eventually(30, "a created claim deleted after the failed bind", || async {
            proxy.writes().iter().any(|w| w.method == Method::DELETE && w.path.contains("/resourceclaims/ext-extended-resources-")).then_some(())
        })
        .await;
        proxy.set_rules(vec![]);
        let uid = eventually(60, "ext bound", || async { pods_api.get("ext").await.ok().and_then(|p| node_of(&p).and(p.metadata.uid.clone())) }).await;
        let claim = eventually(30, "only the bound attempt's claim left", || async {
            let claims = claims_api.list(&ListParams::default()).await.unwrap().items;
            (claims.len() == 1).then(|| claims.into_iter().next()).flatten()
        })
        .await;
        assert_eq!(reserved_for(&claim), vec![uid]);
        check_allocations(&client).await;
        assert!(no_claim_without_its_pod(&client).await);
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// The daemon as berth's service account under RBAC, with exactly the
// ClusterRole, Role and bindings of deploy/berth.yaml: it becomes ready
// (the DRA kinds may be listed and watched) and allocates claims (the
// finalizer, the status, the extended-resource claim and the pod status
// are allowed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifests_rbac_is_enough_for_claims() {
    deadline(120, async {
        init_logs();
        let cfg = ClusterConfig {
            devices: DevicesConfig::per_node(2),
            controllers: ControllersConfig { resync: Duration::from_millis(300), ..Default::default() },
            authorization: berth_cluster::authz::AuthorizationMode::Rbac,
            ..cluster_config(2, 2, "8", 110)
        };
        let c = LocalCluster::start(cfg).await.unwrap();
        let admin = c.client().unwrap();
        let token = crate::chart_rbac::apply_chart_rbac(&admin).await;
        let mut kc = c.client_config().unwrap();
        kc.auth_info.token = Some(token.into());
        let opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: "dra-rbac".into(), ..Options::default() };
        let d = daemon::start(kube::Client::try_from(kc).unwrap(), &config(""), opts).await.unwrap();
        until_leading(&d, 30).await;
        let pods_api: Api<Pod> = Api::default_namespaced(admin.clone());
        create_template(&admin).await;
        let classes: Api<k8s_openapi::api::resource::v1::DeviceClass> = Api::all(admin.clone());
        classes
            .create(&PostParams::default(), &from(json!({"metadata": {"name": "gpu-ext"}, "spec": {"extendedResourceName": "example.com/gpu",
                "selectors": [{"cel": {"expression": format!("device.driver == \"{DEFAULT_DRIVER}\"")}}]}})))
            .await
            .unwrap();
        let mut all: Vec<Pod> = (0..3).map(|i| gpu_pod(&format!("rbac-{i}"), json!({"resourceClaimTemplateName": "one-gpu"}))).collect();
        all.push(pod("rbac-ext", "100m", json!({"spec": {"containers": [{"name": "c", "image": "cuda",
            "resources": {"requests": {"cpu": "100m", "example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}}}]}})));
        create_all(&pods_api, all, 4).await;
        eventually(60, "the 4 pods bound", || async {
            check_allocations(&admin).await;
            (bound_count(&pods(&pods_api).await) == 4).then_some(())
        })
        .await;
        let claims = check_allocations(&admin).await;
        assert_eq!(claims.values().filter(|c| !devices_of(c).is_empty()).count(), 4);
        assert_eq!(d.write_counts().failures, 0, "{:?}", d.write_counts());
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}
