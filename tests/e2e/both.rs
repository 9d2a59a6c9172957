//! Scenarios written once and run on both backends ([`Backend`]): berth's
//! local cluster (`local_*`) and a real control plane from `tools/kube/up`
//! (`real_*`, ignored unless asked for; see `backend.rs`). Where the two
//! answer differently, the local cluster is wrong: docs/local-cluster.md
//! lists what these found.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use berth_daemon::{self as daemon, Handle, Options};
use berth_engine::config::Config;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::backend::{Backend, BindLog, NodeSpec, assert_capacity, pods_in};
use crate::e2e_support::{PROFILE, create_all, eventually, node_of, pod};

/// Runs `f` under a hard deadline.
async fn deadline<F: std::future::Future<Output = ()>>(secs: u64, f: F) {
    tokio::time::timeout(Duration::from_secs(secs), f).await.unwrap_or_else(|_| panic!("test deadline ({secs} s) exceeded"));
}

/// A configuration with one profile ([`PROFILE`]), short backoffs, and a
/// Lease of its own (`lease`), so that a scenario never waits out the Lease
/// an earlier one left on the same control plane.
fn config(lease: &str, duration: &str, renew: &str, retry: &str) -> Config {
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npodInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 2\n\
         clientConnection:\n  qps: 2000\n  burst: 4000\nleaderElection:\n  leaderElect: true\n  resourceName: {lease}\n  resourceNamespace: kube-system\n  \
         leaseDuration: {duration}\n  renewDeadline: {renew}\n  retryPeriod: {retry}\nprofiles:\n- schedulerName: {PROFILE}\n"
    );
    Config::parse(&yaml).unwrap()
}

/// A Lease name no earlier run used.
fn lease_name(scenario: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("berth-e2e-{scenario}-{nanos:x}")
}

async fn start(b: &Backend, cfg: &Config, identity: &str) -> Handle {
    let opts = Options { bind_address: std::net::SocketAddr::from(([127, 0, 0, 1], 0)), identity: identity.into(), ..Options::default() };
    daemon::start(b.client(), cfg, opts).await.unwrap()
}

async fn until_leading(h: &Handle, secs: u64) {
    let mut l = h.leading.clone();
    let mut r = h.ready.clone();
    tokio::time::timeout(Duration::from_secs(secs), async {
        r.wait_for(|x| *x).await.unwrap();
        l.wait_for(|x| *x).await.unwrap();
    })
    .await
    .expect("daemon did not become ready and leading");
}

// 1. Placement at scale: 1,000 pods over 100 nodes in 3 zones, with zone
// spread constraints, required node affinity, and taints with the pods that
// tolerate them.
async fn placement(b: Backend) {
    let ns = "e2e-placement";
    let mut nodes = Vec::new();
    for i in 0..100 {
        let zone = ["zone-a", "zone-b", "zone-c"][i % 3];
        let mut n = NodeSpec::new(&format!("place-{i:03}"), zone, "4");
        if i >= 90 {
            n = n.label("pool", "batch").taint("dedicated", "batch", "NoSchedule");
        }
        nodes.push(n);
    }
    b.namespace(ns).await;
    b.add_nodes(&nodes).await;
    let cfg = config(&lease_name("placement"), "15s", "10s", "2s");
    let d = start(&b, &cfg, "placement").await;
    until_leading(&d, 30).await;
    let client = b.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (log, watch_task) = BindLog::start(client.clone(), ns);

    let web = |i: usize| {
        pod(&format!("web-{i:03}"), "100m", json!({"metadata": {"labels": {"app": "web"}}, "spec": {"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}}}]}}))
    };
    let batch = |i: usize| {
        pod(&format!("batch-{i:03}"), "100m", json!({"metadata": {"labels": {"app": "batch"}}, "spec": {
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}]}}}}}))
    };
    let ab = |i: usize| {
        pod(&format!("ab-{i:03}"), "100m", json!({"metadata": {"labels": {"app": "ab"}}, "spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a", "zone-b"]}]}]}}}}}))
    };
    let mut all: Vec<Pod> = (0..400).map(web).collect();
    all.extend((0..300).map(batch));
    all.extend((0..300).map(ab));
    let t0 = Instant::now();
    create_all(&api, all, 32).await;
    eventually(180, "1,000 pods bound", || async { (log.bound() == 1000).then_some(()) }).await;
    println!("placement ({}): 1,000 pods created and bound in {:?}", b.name(), t0.elapsed());

    let pods = pods_in(&client, ns).await;
    assert_eq!(pods.len(), 1000);
    let spec: HashMap<&str, &NodeSpec> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut web_zones: BTreeMap<&str, usize> = ["zone-a", "zone-b", "zone-c"].iter().map(|z| (*z, 0)).collect();
    for p in &pods {
        let name = p.metadata.name.as_deref().unwrap();
        let n = spec[node_of(p).unwrap()];
        let batch_node = n.labels.get("pool").is_some_and(|v| v == "batch");
        if name.starts_with("batch-") {
            assert!(batch_node, "{name} is on {}, outside pool=batch", n.name);
        } else {
            assert!(!batch_node, "{name} does not tolerate dedicated=batch but is on {}", n.name);
        }
        if name.starts_with("ab-") {
            assert!(n.zone != "zone-c", "{name} is in zone-c against its node affinity");
        }
        if name.starts_with("web-") {
            *web_zones.get_mut(n.zone.as_str()).unwrap() += 1;
        }
    }
    let skew = web_zones.values().max().unwrap() - web_zones.values().min().unwrap();
    assert!(skew <= 1, "web pods' zone skew {skew}: {web_zones:?}");
    assert_capacity(&pods, &nodes);
    assert!(log.rebinds().is_empty(), "rebound: {:?}", log.rebinds());
    watch_task.abort();
    d.shutdown().await;
    b.finish(ns, &nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_placement_spread_affinity_taints_1000_pods() {
    deadline(240, async { placement(Backend::local().await).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_ -- --ignored"]
async fn real_placement_spread_affinity_taints_1000_pods() {
    deadline(300, async { placement(Backend::real().await).await }).await;
}

/// The PriorityClasses `e2e-low` (10) and `e2e-high` (1000), kept when they exist.
async fn priority_classes(client: &kube::Client) {
    for (name, value) in [("e2e-low", 10), ("e2e-high", 1000)] {
        let api: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(client.clone());
        let pc =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value})).unwrap();
        match api.create(&PostParams::default(), &pc).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("priority class {name}: {e}"),
        }
    }
}

// 2. Preemption with a PodDisruptionBudget: the preemptor goes where its
// victims' eviction breaks no budget; the victims are deleted gracefully (by
// the fake kubelets on the real control plane); the preemptor binds to its
// nominated node once they are gone.
async fn preemption(b: Backend) {
    let ns = "e2e-preempt";
    let nodes = vec![NodeSpec::new("preempt-0", "zone-a", "1"), NodeSpec::new("preempt-1", "zone-a", "1")];
    b.namespace(ns).await;
    b.add_nodes(&nodes).await;
    let client = b.client();
    priority_classes(&client).await;
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let pdb = serde_json::from_value(json!({"metadata": {"name": "guarded"}, "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}}})).unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let cfg = config(&lease_name("preempt"), "15s", "10s", "2s");
    let d = start(&b, &cfg, "preempt").await;
    until_leading(&d, 30).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let filler = |name: &str, app: &str, node: &str| {
        pod(name, "500m", json!({"metadata": {"labels": {"app": app}}, "spec": {"priorityClassName": "e2e-low", "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"kubernetes.io/hostname": node}}}))
    };
    create_all(&api, vec![filler("free-0", "free", "preempt-0"), filler("free-1", "free", "preempt-0"), filler("guarded-0", "guarded", "preempt-1"), filler("guarded-1", "guarded", "preempt-1")], 4).await;
    eventually(60, "fillers bound", || async { (pods_in(&client, ns).await.iter().filter(|p| node_of(p).is_some()).count() == 4).then_some(()) }).await;
    // The PDB controller (kube-controller-manager, or berth's on the local
    // cluster) must have counted the guarded pods before preemption reads it.
    eventually(60, "PDB status observed", || async {
        let p = pdbs.get("guarded").await.ok()?;
        let st = p.status?;
        (st.current_healthy == Some(2)).then_some(())
    })
    .await;

    api.create(&PostParams::default(), &pod("high", "1", json!({"spec": {"priorityClassName": "e2e-high"}}))).await.unwrap();
    let nominated = eventually(30, "high nominated", || async { api.get("high").await.ok()?.status?.nominated_node_name }).await;
    assert_eq!(nominated, "preempt-0", "the preemptor must go where no budget breaks");
    let bound = eventually(90, "high bound", || async {
        let p = api.get("high").await.ok()?;
        node_of(&p).map(str::to_string)
    })
    .await;
    assert_eq!(bound, "preempt-0");
    let left: HashSet<String> = pods_in(&client, ns).await.into_iter().filter_map(|p| p.metadata.name).collect();
    assert!(!left.contains("free-0") && !left.contains("free-1"), "victims remain: {left:?}");
    assert!(left.contains("guarded-0") && left.contains("guarded-1"), "a guarded pod was evicted: {left:?}");
    assert_capacity(&pods_in(&client, ns).await, &nodes);
    d.shutdown().await;
    for name in ["e2e-low", "e2e-high"] {
        let api: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(client.clone());
        let _ = api.delete(name, &Default::default()).await;
    }
    b.finish(ns, &nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_preemption_respects_pdb_and_binds_to_nominated_node() {
    deadline(180, async { preemption(Backend::local().await).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_ -- --ignored"]
async fn real_preemption_respects_pdb_and_binds_to_nominated_node() {
    deadline(240, async { preemption(Backend::real().await).await }).await;
}

// 2b. A preemptor is not tried again while its victims' deletions are in
// flight: the second victim's DELETE waits at a proxy between the daemon and
// the server while the first victim goes (the event that requeues the
// preemptor). Retried then, it would find the held victim still running,
// not yet terminating, and preempt again: a second DELETE for it (or
// another victim). Each victim is deleted once, and the preemptor binds
// once the held delete goes through.
async fn held_victim(b: Backend) {
    let ns = "e2e-held-victim";
    let nodes = vec![NodeSpec::new("held-0", "zone-a", "1")];
    b.namespace(ns).await;
    b.add_nodes(&nodes).await;
    let client = b.client();
    priority_classes(&client).await;
    let proxy = crate::fault_proxy::FaultProxy::start(client.clone()).await;
    let cfg = config(&lease_name("held-victim"), "15s", "10s", "2s");
    let opts = Options {
        bind_address: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        identity: "held-victim".into(),
        ..Options::default()
    };
    let d = daemon::start(proxy.client(), &cfg, opts).await.unwrap();
    until_leading(&d, 30).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    // Two low pods fill the node's one CPU; the preemptor needs both gone.
    let low = json!({"spec": {"priorityClassName": "e2e-low", "terminationGracePeriodSeconds": 0, "nodeSelector": {"kubernetes.io/hostname": "held-0"}}});
    create_all(
        &api,
        (0..2)
            .map(|i| pod(&format!("low-{i}"), "450m", low.clone()))
            .collect(),
        2,
    )
    .await;
    eventually(60, "low pods bound", || async {
        (pods_in(&client, ns)
            .await
            .iter()
            .filter(|p| node_of(p).is_some())
            .count()
            == 2)
            .then_some(())
    })
    .await;
    proxy.hold(axum::http::Method::DELETE, "/pods/low-1");
    let t = std::time::Instant::now();
    api.create(
        &PostParams::default(),
        &pod(
            "high",
            "900m",
            json!({"spec": {"priorityClassName": "e2e-high"}}),
        ),
    )
    .await
    .unwrap();
    eventually(60, "low-0 gone", || async {
        api.get_opt("low-0").await.unwrap().is_none().then_some(())
    })
    .await;
    // Time for retries after backoffs of 1 and 2 s.
    tokio::time::sleep(Duration::from_secs(4)).await;
    proxy.release();
    eventually(90, "high bound", || async {
        api.get("high")
            .await
            .ok()
            .and_then(|p| node_of(&p).map(|_| ()))
    })
    .await;
    let deletes: Vec<String> = proxy
        .writes_since(t)
        .into_iter()
        .filter(|w| w.method == axum::http::Method::DELETE)
        .map(|w| w.path)
        .collect();
    println!("held victim: deletes {deletes:?}");
    assert_eq!(deletes.len(), 2, "each victim deleted once: {deletes:?}");
    for v in ["low-0", "low-1"] {
        assert!(
            deletes.iter().any(|p| p.contains(&format!("/pods/{v}"))),
            "{v} not deleted: {deletes:?}"
        );
    }
    assert_capacity(&pods_in(&client, ns).await, &nodes);
    d.shutdown().await;
    b.finish(ns, &nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_a_preemptor_waits_for_its_victims_deletes() {
    deadline(120, async { held_victim(Backend::local().await).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_ -- --ignored"]
async fn real_a_preemptor_waits_for_its_victims_deletes() {
    deadline(180, async { held_victim(Backend::real().await).await }).await;
}

// 3. Leader election through a real Lease: two replicas, the leader killed
// mid-burst, every pod bound exactly once.
async fn failover(b: Backend) {
    let ns = "e2e-failover";
    let nodes: Vec<NodeSpec> = (0..10).map(|i| NodeSpec::new(&format!("failover-{i}"), ["zone-a", "zone-b", "zone-c"][i % 3], "8")).collect();
    b.namespace(ns).await;
    b.add_nodes(&nodes).await;
    let cfg = config(&lease_name("failover"), "3s", "2s", "500ms");
    let a = start(&b, &cfg, "replica-a").await;
    until_leading(&a, 30).await;
    let r = start(&b, &cfg, "replica-b").await;
    let mut ready = r.ready.clone();
    tokio::time::timeout(Duration::from_secs(30), ready.wait_for(|x| *x)).await.unwrap().unwrap();
    assert!(!*r.leading.borrow(), "two leaders");
    let client = b.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (log, watch_task) = BindLog::start(client.clone(), ns);
    const N: usize = 200;
    let creator = {
        let api = api.clone();
        tokio::spawn(async move {
            for chunk in 0..(N / 20) {
                create_all(&api, (0..20).map(|i| pod(&format!("f-{:03}", chunk * 20 + i), "50m", json!({}))).collect(), 20).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    eventually(60, "some pods bound by the first leader", || async { (log.bound() >= 40).then_some(()) }).await;
    a.abort();
    let mut l = r.leading.clone();
    tokio::time::timeout(Duration::from_secs(15), l.wait_for(|x| *x)).await.expect("replica-b never took over").unwrap();
    creator.await.unwrap();
    eventually(90, "every pod bound", || async { (log.bound() == N).then_some(()) }).await;
    let pods = pods_in(&client, ns).await;
    assert_eq!(pods.len(), N, "pods lost");
    assert!(log.rebinds().is_empty(), "rebound: {:?}", log.rebinds());
    assert_capacity(&pods, &nodes);
    watch_task.abort();
    r.shutdown().await;
    b.finish(ns, &nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_leader_failover_through_a_lease() {
    deadline(180, async { failover(Backend::local().await).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_ -- --ignored"]
async fn real_leader_failover_through_a_lease() {
    deadline(240, async { failover(Backend::real().await).await }).await;
}

// 4. Dynamic resource allocation: pods ask for a device through a
// ResourceClaimTemplate; the resourceclaim controller (kube-controller-
// manager's on the real control plane) generates each pod's claim; berth
// allocates it on the pod's node and reserves it for the pod, writes the
// real API server validates; no device is given twice; a pod for which no
// device is left waits, and binds once a device is freed.
async fn dra(b: Backend) {
    use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
    let ns = "e2e-dra";
    let nodes: Vec<NodeSpec> = (0..4).map(|i| NodeSpec::new(&format!("dra-{i}"), ["zone-a", "zone-b"][i % 2], "8")).collect();
    b.namespace(ns).await;
    let made = b.add_nodes(&nodes).await;
    let client = b.client();
    berth_lab::kwok::publish_devices(&client, &made, &berth_cluster::dra_driver::DevicesConfig::per_node(2)).await.unwrap_or_else(|e| panic!("{e}"));
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), ns);
    let t = serde_json::from_value(json!({"metadata": {"name": "gpu"}, "spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": berth_cluster::dra_driver::DEFAULT_DRIVER}}]}}}}))
    .unwrap();
    templates.create(&PostParams::default(), &t).await.unwrap();
    let cfg = config(&lease_name("dra"), "15s", "10s", "2s");
    let d = start(&b, &cfg, "dra").await;
    until_leading(&d, 30).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let gpu_pod = |name: &str| {
        pod(name, "100m", json!({"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
            "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}]}}))
    };
    create_all(&api, (0..8).map(|i| gpu_pod(&format!("gpu-{i}"))).collect(), 8).await;
    eventually(120, "8 device pods bound", || async { (pods_in(&client, ns).await.iter().filter(|p| node_of(p).is_some()).count() == 8).then_some(()) }).await;

    // Every pod's claim: allocated on the pod's node, reserved for it, and no device twice.
    let check = |pods: Vec<Pod>, claims: Vec<ResourceClaim>| {
        let node_of_pod: HashMap<String, String> = pods.iter().filter_map(|p| Some((p.metadata.uid.clone()?, node_of(p)?.to_string()))).collect();
        let mut given: HashMap<(String, String, String), String> = HashMap::new();
        let mut reserved = 0;
        for c in &claims {
            let name = c.metadata.name.clone().unwrap();
            let Some(st) = &c.status else { continue };
            let Some(alloc) = &st.allocation else { continue };
            for r in alloc.devices.as_ref().and_then(|d| d.results.as_ref()).into_iter().flatten() {
                if let Some(other) = given.insert((r.driver.clone(), r.pool.clone(), r.device.clone()), name.clone()) {
                    panic!("device {}/{} is given to both {other} and {name}", r.pool, r.device);
                }
                for rf in st.reserved_for.iter().flatten() {
                    let node = node_of_pod.get(&rf.uid).unwrap_or_else(|| panic!("{name} is reserved for a pod that is not bound: {}", rf.name));
                    // The simulated driver's pool is its node.
                    assert_eq!(&r.pool, node, "{name}'s device is on {} but its pod is on {node}", r.pool);
                }
            }
            reserved += st.reserved_for.as_ref().map_or(0, |r| r.len());
        }
        reserved
    };
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    let reserved = check(pods_in(&client, ns).await, claims.list(&Default::default()).await.unwrap().items);
    assert_eq!(reserved, 8, "each bound pod's claim is reserved for it");

    // No device left: the ninth waits, unschedulable.
    api.create(&PostParams::default(), &gpu_pod("gpu-8")).await.unwrap();
    let (reason, message) = eventually(60, "gpu-8 marked unschedulable", || async {
        let p = api.get("gpu-8").await.ok()?;
        let c = p.status?.conditions?.into_iter().find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
        Some((c.reason.unwrap_or_default(), c.message.unwrap_or_default()))
    })
    .await;
    assert_eq!(reason, "Unschedulable");
    assert!(message.starts_with("0/4 nodes are available"), "{message}");
    // A device freed: gpu-0 goes, its generated claim with it, and gpu-8 binds.
    api.delete("gpu-0", &Default::default()).await.unwrap();
    eventually(120, "gpu-8 bound after a device was freed", || async { api.get("gpu-8").await.ok().and_then(|p| node_of(&p).map(str::to_string)) }).await;
    let reserved = check(pods_in(&client, ns).await, claims.list(&Default::default()).await.unwrap().items);
    assert_eq!(reserved, 8);
    d.shutdown().await;
    b.finish(ns, &nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_dra_claims_from_templates_allocated_once() {
    deadline(240, async { dra(Backend::local().await).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_ -- --ignored"]
async fn real_dra_claims_from_templates_allocated_once() {
    deadline(300, async { dra(Backend::real().await).await }).await;
}
