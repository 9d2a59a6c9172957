//! More scenarios written once and run on both backends ([`Backend`]; see
//! `both.rs` and `backend.rs`): berth's local cluster (`local_*`) and a real
//! control plane from `tools/kube/up` (`real_*`, ignored unless asked for).
//!
//! - volumes: a WaitForFirstConsumer class with static local PVs pinned to
//!   nodes and zones, bound by the PV controller (kube-controller-manager's
//!   on the real one);
//! - gangs through the PodGroup API the real server serves (upstream's
//!   `scheduling.k8s.io/v1beta1`, KEP-4671);
//! - the chart's RBAC: `helm template`, its ServiceAccount's token, and the
//!   daemon on that token with no request refused;
//! - shadow mode judging another scheduler's bindings: kube-scheduler on
//!   the real control plane (`tools/kube/up --kube-scheduler`), a berth
//!   binder on the local cluster.
//!
//! Where the two answer differently, the local cluster is wrong:
//! docs/local-cluster.md lists what these found.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use berth_daemon::shadow::Verdict;
use berth_daemon::watch::group_api_resource;
use berth_daemon::{self as daemon, Handle, Options};
use berth_engine::config::Config;
use berth_model::pod::GroupApi;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

use crate::backend::{Backend, NodeSpec, pods_in};
use crate::e2e_support::{PROFILE, admin_get, create_all, eventually, node_of, pod, pod_milli_cpu, scheduled_condition};
use crate::fault_proxy::FaultProxy;

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// Runs a scenario (`f(&backend, ns, &nodes)`) under a hard deadline, then
/// cleans up whatever happened: its namespace, its nodes and the
/// cluster-scoped objects it labelled [`LABEL`] (so that a failed scenario
/// leaves nothing in the way of the next on a shared control plane), and
/// fails as the scenario did.
macro_rules! scenario {
    ($backend:expr, $secs:expr, $ns:expr, $nodes:expr, $f:ident) => {{
        let b = $backend;
        let ns: &str = $ns;
        let nodes: Vec<NodeSpec> = $nodes;
        let r = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(tokio::time::timeout(Duration::from_secs($secs), $f(&b, ns, &nodes)))).await;
        let client = b.client();
        cleanup(&client).await;
        b.finish(ns, &nodes).await;
        gone(&client, ns).await;
        match r {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("test deadline ({} s) exceeded", $secs),
            Err(p) => std::panic::resume_unwind(p),
        }
    }};
}

/// The label of the cluster-scoped objects a scenario makes (PVs,
/// StorageClasses, PriorityClasses), deleted after it.
const LABEL: (&str, &str) = ("berth-e2e", "both-workloads");

/// Waits (a minute at most, without failing) until namespace `ns`, being
/// deleted, holds no pending pod, so that the next scenario's scheduler
/// finds none of its pods to schedule. (Its bound pods may take longer to
/// go: their nodes are gone, so the pod garbage collector deletes them.)
async fn gone(client: &kube::Client, ns: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        match api.list(&ListParams::default()).await {
            Ok(l) if l.items.iter().all(|p| node_of(p).is_some()) => return,
            Ok(_) => {}
            Err(_) => return,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn cleanup(client: &kube::Client) {
    let lp = ListParams::default().labels(&format!("{}={}", LABEL.0, LABEL.1));
    let _ = Api::<PersistentVolume>::all(client.clone()).delete_collection(&DeleteParams::default(), &lp).await;
    let _ = Api::<StorageClass>::all(client.clone()).delete_collection(&DeleteParams::default(), &lp).await;
    let _ = Api::<k8s_openapi::api::scheduling::v1::PriorityClass>::all(client.clone()).delete_collection(&DeleteParams::default(), &lp).await;
}

/// A short token unique to this run (names of cluster-scoped objects, so
/// that nothing an interrupted run left is taken for this run's).
fn run_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:x}", nanos & 0xff_ffff_ffff)
}

/// One profile named `profile`, short backoffs, and a Lease of its own
/// (`lease` in kube-system), upstream's default lease timings.
fn config(profile: &str, lease: &str) -> Config {
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npodInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 2\n\
         clientConnection:\n  qps: 2000\n  burst: 4000\nleaderElection:\n  leaderElect: true\n  resourceName: {lease}\n  resourceNamespace: kube-system\n  \
         leaseDuration: 15s\n  renewDeadline: 10s\n  retryPeriod: 2s\nprofiles:\n- schedulerName: {profile}\n"
    );
    Config::parse(&yaml).unwrap()
}

fn opts(identity: &str, shadow: bool) -> Options {
    Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: identity.into(), shadow, ..Options::default() }
}

async fn start(client: kube::Client, cfg: &Config, identity: &str) -> Handle {
    daemon::start(client, cfg, opts(identity, false)).await.unwrap()
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

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// Creates a cluster-scoped or namespaced object, an existing one of that name kept.
async fn create_or_keep<K>(api: &Api<K>, obj: Value)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    match api.create(&PostParams::default(), &from(obj.clone())).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating {}: {e}", obj["metadata"]["name"]),
    }
}

/// The admin's kubeconfig of the backend, as text.
fn admin_kubeconfig(b: &Backend) -> String {
    match b {
        Backend::Local(c) => c.kubeconfig_yaml(),
        Backend::Real { dir, .. } => std::fs::read_to_string(dir.join("kubeconfig")).unwrap(),
    }
}

/// The admin's bearer token (it is in system:masters on both backends).
fn admin_token(b: &Backend) -> String {
    let text = admin_kubeconfig(b);
    let token = text.lines().find_map(|l| l.trim().strip_prefix("token: ")).expect("the admin kubeconfig has a token");
    token.trim().trim_matches('"').to_string()
}

/// A client of the backend's API server authenticating with `token` alone
/// (the admin's kubeconfig with the token replaced).
async fn client_with_token(b: &Backend, token: &str) -> kube::Client {
    let text = admin_kubeconfig(b).replace(&admin_token(b), token);
    let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// Asserts no node holds more CPU requests than it has (the scenario's pods
/// are the only ones on its nodes).
fn assert_capacity(pods: &[Pod], nodes: &[NodeSpec]) {
    let cap: HashMap<&str, i64> = nodes.iter().map(|n| (n.name.as_str(), n.cpu.parse::<i64>().unwrap() * 1000)).collect();
    let mut used: HashMap<&str, i64> = HashMap::new();
    for p in pods {
        if let Some(n) = node_of(p) {
            *used.entry(n).or_default() += pod_milli_cpu(p);
        }
    }
    for (n, u) in used {
        let c = cap.get(n).copied().unwrap_or_else(|| panic!("a pod is bound to {n}, not one of the scenario's nodes"));
        assert!(u <= c, "node {n} is over capacity: {u}m of {c}m requested");
    }
}

fn bound_with_prefix(pods: &[Pod], prefix: &str) -> usize {
    pods.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with(prefix)) && node_of(p).is_some()).count()
}

// ---------------------------------------------------------------------------
// 1. Volumes.

/// A node's labels as the scenario made them.
fn labels_of(n: &NodeSpec) -> BTreeMap<String, String> {
    let mut l = n.labels.clone();
    l.insert(ZONE.into(), n.zone.clone());
    l.insert(HOSTNAME.into(), n.name.clone());
    l
}

/// Whether a PV's required node affinity admits the node (terms ORed,
/// expressions ANDed; only `In` is used here).
fn pv_admits(pv: &PersistentVolume, node: &NodeSpec) -> bool {
    let labels = labels_of(node);
    let Some(req) = pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()).and_then(|a| a.required.as_ref()) else { return true };
    req.node_selector_terms.iter().any(|t| {
        t.match_expressions.iter().flatten().all(|e| {
            assert_eq!(e.operator, "In", "the scenario's PVs use In only");
            labels.get(&e.key).is_some_and(|v| e.values.iter().flatten().any(|x| x == v))
        })
    })
}

fn claim_phase(c: &PersistentVolumeClaim) -> &str {
    c.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn claim_volume(c: &PersistentVolumeClaim) -> Option<&str> {
    c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty())
}

/// A static local PV of `class` whose node affinity requires `key` In [`value`].
fn local_pv(name: &str, run: &str, class: &str, size: &str, key: &str, value: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"e2e-run": run, LABEL.0: LABEL.1}}, "spec": {
        "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": class, "volumeMode": "Filesystem", "local": {"path": format!("/mnt/disks/{name}")},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}}}})
}

fn wffc_class(name: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {LABEL.0: LABEL.1}}, "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Retain"})
}

fn claim_of(name: &str, class: &str, size: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}})
}

fn pod_with_claim(name: &str, claim: &str, cpu: &str) -> Pod {
    pod(name, cpu, json!({"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}))
}

// A StorageClass with WaitForFirstConsumer and no provisioner, five static
// local PVs (three pinned to one node each by hostname, two to zone-c), six
// nodes (one, vol-4, with no PV anywhere it could use), five claims and five
// pods: berth places each pod where a PV of its claim can go, PreBind sets
// the PV's claimRef, the PV controller binds the claim, and every pod is on
// a node its PV admits. A sixth claim no PV can satisfy (10Gi) leaves its pod
// Unschedulable with upstream's message, its claim Pending.
fn volume_nodes() -> Vec<NodeSpec> {
    (0..6).map(|i| NodeSpec::new(&format!("vol-{i}"), ZONES[i % 3], "4")).collect()
}

async fn volumes(b: &Backend, ns: &str, nodes: &[NodeSpec]) {
    b.namespace(ns).await;
    b.add_nodes(nodes).await;
    let client = b.client();
    let run = run_id();
    let class = format!("e2e-local-{run}");
    let classes: Api<StorageClass> = Api::all(client.clone());
    create_or_keep(&classes, wffc_class(&class)).await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let mut pv_specs = Vec::new();
    for n in ["vol-0", "vol-1", "vol-3"] {
        pv_specs.push(local_pv(&format!("e2e-{run}-{n}"), &run, &class, "1Gi", HOSTNAME, n));
    }
    for i in 0..2 {
        pv_specs.push(local_pv(&format!("e2e-{run}-zone-c-{i}"), &run, &class, "1Gi", ZONE, "zone-c"));
    }
    for pv in pv_specs {
        pvs.create(&PostParams::default(), &from(pv)).await.unwrap();
    }
    let d = start(client.clone(), &config(PROFILE, &lease_name("volumes")), "volumes").await;
    until_leading(&d, 30).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for i in 0..5 {
        claims.create(&PostParams::default(), &from(claim_of(&format!("data-{i}"), &class, "1Gi"))).await.unwrap();
    }
    claims.create(&PostParams::default(), &from(claim_of("data-big", &class, "10Gi"))).await.unwrap();
    let mut all: Vec<Pod> = (0..5).map(|i| pod_with_claim(&format!("db-{i}"), &format!("data-{i}"), "100m")).collect();
    all.push(pod_with_claim("big", "data-big", "100m"));
    let t0 = Instant::now();
    create_all(&api, all, 6).await;
    eventually(120, "5 pods bound and their 5 claims Bound", || async {
        let bound = bound_with_prefix(&pods_in(&client, ns).await, "db-");
        let claimed = claims.list(&ListParams::default()).await.unwrap().items.iter().filter(|c| claim_phase(c) == "Bound").count();
        (bound == 5 && claimed == 5).then_some(())
    })
    .await;
    println!("volumes ({}): 5 pods bound with their claims in {:?}", b.name(), t0.elapsed());

    let spec: HashMap<&str, &NodeSpec> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut used_pvs = std::collections::HashSet::new();
    for i in 0..5 {
        let p = api.get(&format!("db-{i}")).await.unwrap();
        let node = node_of(&p).unwrap();
        let c = claims.get(&format!("data-{i}")).await.unwrap();
        let pv_name = claim_volume(&c).unwrap_or_else(|| panic!("data-{i} is Bound without a volume")).to_string();
        assert!(used_pvs.insert(pv_name.clone()), "{pv_name} is bound to two claims");
        let pv = pvs.get(&pv_name).await.unwrap();
        assert!(pv_name.starts_with(&format!("e2e-{run}-")), "data-{i} bound to {pv_name}, not one of this run's PVs");
        let cref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).unwrap_or_else(|| panic!("{pv_name} has no claimRef"));
        assert_eq!((cref.namespace.as_deref(), cref.name.as_deref()), (Some(ns), Some(format!("data-{i}").as_str())), "{pv_name}'s claimRef");
        assert_eq!(pv.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Bound"), "{pv_name}'s phase");
        let n = spec.get(node).unwrap_or_else(|| panic!("db-{i} is on {node}, not one of the scenario's nodes"));
        assert!(pv_admits(&pv, n), "db-{i} is on {node} ({}), which its volume {pv_name} does not admit", n.zone);
        // The claim is annotated as bound by the PV controller.
        let ann = c.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(ann.get("pv.kubernetes.io/bind-completed").map(String::as_str), Some("yes"), "data-{i}: {ann:?}");
    }
    assert_eq!(bound_with_prefix(&pods_in(&client, ns).await, "vol-4"), 0);

    // No PV of 10Gi: Unschedulable, in upstream's words.
    let all_nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.unwrap().items.len();
    // Under load the pod can be tried before its claim reached the
    // scheduler's cache ("persistentvolumeclaim ... not found", requeued
    // when the claim arrives): wait for the verdict on the volumes.
    let (reason, message) = eventually(60, "big reported unschedulable for want of a volume", || async {
        let c = scheduled_condition(&api.get("big").await.ok()?)?;
        (c.0 == "False" && c.2.contains("persistent volumes")).then_some((c.1, c.2))
    })
    .await;
    assert_eq!(reason, "Unschedulable", "{message}");
    assert!(message.starts_with(&format!("0/{all_nodes} nodes are available: ")), "{message}");
    assert!(message.contains("node(s) didn't find available persistent volumes to bind"), "{message}");
    // As kube-scheduler 1.37 writes it (one period: the differential
    // compares these messages word for word with the real one).
    assert!(message.ends_with(&format!("preemption: 0/{all_nodes} nodes are available: {all_nodes} Preemption is not helpful for scheduling.")), "{message}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(node_of(&api.get("big").await.unwrap()).is_none(), "big was bound without a volume");
    let big = claims.get("data-big").await.unwrap();
    assert_eq!(claim_phase(&big), "Pending", "data-big");
    assert!(claim_volume(&big).is_none(), "data-big got a volume");
    assert_capacity(&pods_in(&client, ns).await, nodes);
    assert_eq!(d.write_counts().volume_writes_unknown, 0);
    d.shutdown().await;
    let _ = pvs.delete_collection(&DeleteParams::default(), &ListParams::default().labels(&format!("e2e-run={run}"))).await;
    let _ = classes.delete(&class, &DeleteParams::default()).await;
}

/// A Lease name no earlier run used.
fn lease_name(scenario: &str) -> String {
    format!("berth-e2e-{scenario}-{}", run_id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_volumes_wait_for_first_consumer_static_local_pvs() {
    scenario!(Backend::local().await, 180, "e2e-volumes", volume_nodes(), volumes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR --kube-scheduler, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_ -- --ignored"]
async fn real_volumes_wait_for_first_consumer_static_local_pvs() {
    scenario!(Backend::real().await, 240, "e2e-volumes", volume_nodes(), volumes);
}

// ---------------------------------------------------------------------------
// 2. Gangs through the PodGroup API the real server serves.

/// PodGroups of upstream's API in `ns`; fails the test, saying so, when the
/// server does not serve it.
async fn group_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let groups: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &group_api_resource(GroupApi::V1beta1));
    if let Err(e) = groups.list(&ListParams::default()).await {
        panic!("the API server does not serve scheduling.k8s.io/v1beta1 PodGroups (tools/kube/up enables them): {e}");
    }
    groups
}

async fn create_group(groups: &Api<DynamicObject>, ns: &str, name: &str, min: i32) {
    let obj = json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min}}}});
    groups.create(&PostParams::default(), &from(obj)).await.unwrap_or_else(|e| panic!("creating PodGroup {name}: {e}"));
}

fn member(group: &str, i: usize, cpu: &str, extra: Value) -> Pod {
    let mut v = json!({"spec": {"schedulingGroup": {"podGroupName": group}}});
    crate::e2e_support::merge(&mut v, &extra);
    pod(&format!("{group}-{i}"), cpu, v)
}

/// The group's `PodGroupInitiallyScheduled` condition: (status, reason, message).
async fn group_condition(groups: &Api<DynamicObject>, name: &str) -> Option<(String, String, String)> {
    let g = groups.get(name).await.ok()?;
    let conds = g.data.get("status")?.get("conditions")?.as_array()?.clone();
    let c = conds.iter().find(|c| c["type"] == "PodGroupInitiallyScheduled")?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

// Four nodes of 4 cores (two in zone-a). Group `fits`: minCount 4, four
// members of 1 core: all four bound, the group's condition True. Group
// `short`: minCount 4, four members of 3 cores that must be in zone-a (room
// for two at most): none bound, each member and the group say why, and it
// stays so.
fn gang_nodes() -> Vec<NodeSpec> {
    (0..4).map(|i| NodeSpec::new(&format!("gang-{i}"), ZONES[i % 2], "4")).collect()
}

async fn gangs(b: &Backend, ns: &str, nodes: &[NodeSpec]) {
    b.namespace(ns).await;
    b.add_nodes(nodes).await;
    let client = b.client();
    let groups = group_api(&client, ns).await;
    let d = start(client.clone(), &config(PROFILE, &lease_name("gangs")), "gangs").await;
    until_leading(&d, 30).await;
    create_group(&groups, ns, "fits", 4).await;
    create_group(&groups, ns, "short", 4).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let zone_a = json!({"spec": {"nodeSelector": {ZONE: "zone-a"}}});
    let mut all: Vec<Pod> = (0..4).map(|i| member("short", i, "3", zone_a.clone())).collect();
    all.extend((0..4).map(|i| member("fits", i, "1", json!({}))));
    create_all(&api, all, 8).await;
    eventually(60, "the group that fits bound whole", || async { (bound_with_prefix(&pods_in(&client, ns).await, "fits-") == 4).then_some(()) }).await;
    let short_says_why = |pods: &[Pod]| -> Vec<String> {
        pods.iter()
            .filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("short-")))
            .filter_map(|p| scheduled_condition(p).filter(|c| c.0 == "False" && c.1 == "Unschedulable").map(|c| c.2))
            .collect()
    };
    let t = Instant::now();
    loop {
        let pods = pods_in(&client, ns).await;
        let why = short_says_why(&pods);
        if why.len() == 4 && why.iter().all(|m| m.contains("minCount (4) cannot be satisfied")) {
            break;
        }
        let conds: Vec<_> = pods.iter().map(|p| (p.metadata.name.clone(), node_of(p).map(str::to_string), scheduled_condition(p))).collect();
        assert!(t.elapsed() < Duration::from_secs(60), "the short group's members do not all say why: {conds:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, reason, message) = eventually(30, "the short group's condition", || async { group_condition(&groups, "short").await.filter(|c| c.0 == "False") }).await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Unschedulable"), "{message}");
    assert!(message.contains("minCount (4)"), "{message}");
    let (status, _, message) = eventually(30, "the fitting group's condition True", || async { group_condition(&groups, "fits").await.filter(|c| c.0 == "True") }).await;
    assert_eq!(status, "True", "{message}");
    // Retried with backoff, still nothing of it bound.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let pods = pods_in(&client, ns).await;
    assert_eq!(bound_with_prefix(&pods, "short-"), 0, "a partial gang was bound");
    assert_eq!(bound_with_prefix(&pods, "fits-"), 4);
    assert_capacity(&pods, nodes);
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_gangs_through_upstream_podgroups_all_or_nothing() {
    scenario!(Backend::local().await, 180, "e2e-gangs", gang_nodes(), gangs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR --kube-scheduler, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_ -- --ignored"]
async fn real_gangs_through_upstream_podgroups_all_or_nothing() {
    scenario!(Backend::real().await, 240, "e2e-gangs", gang_nodes(), gangs);
}

// ---------------------------------------------------------------------------
// 3. The chart's RBAC.

/// The helm binary: `$BERTH_HELM`, ci/validate.sh's, or the one on PATH.
/// Fails the test when there is none: without the chart rendered, the
/// scenario proves nothing.
fn helm_bin() -> String {
    let candidates = [std::env::var("BERTH_HELM").ok(), Some("/opt/berth-tools/helm/helm".to_string()), Some("helm".to_string())];
    candidates.into_iter().flatten().find(|h| std::process::Command::new(h).arg("version").output().is_ok_and(|o| o.status.success())).unwrap_or_else(|| {
        panic!(
            "helm is not installed, so the chart cannot be rendered: run ci/validate.sh (it installs Helm 4 at /opt/berth-tools/helm/helm), \
             or point BERTH_HELM at a helm binary"
        )
    })
}

/// `helm template` of charts/berth as release `berth` in kube-system, with
/// `set` values: one (kind, namespace, name, YAML) per document.
fn render_chart(set: &[String]) -> Vec<(String, Option<String>, String, String)> {
    let helm = helm_bin();
    let dir = std::env::temp_dir().join(format!("berth-e2e-helm-{}-{}", std::process::id(), run_id()));
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/berth");
    let mut cmd = std::process::Command::new(&helm);
    cmd.args(["template", "berth"]).arg(&chart).args(["--namespace", "kube-system"]);
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = cmd.env("HELM_CONFIG_HOME", dir.join("config")).env("HELM_CACHE_HOME", dir.join("cache")).env("HELM_DATA_HOME", dir.join("data")).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{helm} template: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let field = |doc: &str, prefix: &str| doc.lines().find_map(|l| l.strip_prefix(prefix)).map(|v| v.trim().trim_matches('"').to_string());
    text.split("\n---")
        .filter_map(|doc| {
            let kind = field(doc, "kind: ")?;
            let name = field(doc, "  name: ")?;
            Some((kind, field(doc, "  namespace: "), name, doc.trim_start_matches('\n').to_string()))
        })
        .collect()
}

const RBAC_KINDS: [&str; 5] = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];

fn rbac_path(kind: &str, ns: &str) -> String {
    match kind {
        "ServiceAccount" => format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        "ClusterRole" => "/apis/rbac.authorization.k8s.io/v1/clusterroles".into(),
        "ClusterRoleBinding" => "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".into(),
        "Role" => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
        _ => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
    }
}

// The chart rendered with `helm template` (its Lease named for this run),
// its ServiceAccount, ClusterRoles, Role and bindings applied, a token of
// the ServiceAccount from the TokenRequest API, and the daemon running on
// that token alone (through a proxy that records every answer). It does
// every kind of write berth makes: binds, events, a preemption (victim
// deleted, nominatedNodeName and DisruptionTarget written), a static PV's
// claimRef, a PodGroup's status, a ResourceClaim's finalizer, allocation
// and reservation; its admin port reviews a token and a request. No request
// is refused (401, 403, or 422 for a field the account may not change), no
// event is lost, every pod is bound.
fn chart_nodes() -> Vec<NodeSpec> {
    vec![
        NodeSpec::new("chart-0", "zone-a", "4"),
        NodeSpec::new("chart-1", "zone-b", "4"),
        NodeSpec::new("chart-2", "zone-c", "4"),
        NodeSpec::new("chart-p", "zone-a", "4").taint("e2e/preempt", "yes", "NoSchedule"),
    ]
}

async fn chart_rbac(b: &Backend, ns: &str, nodes: &[NodeSpec]) {
    use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
    let run = run_id();
    let lease = format!("berth-e2e-chart-{run}");
    let docs = render_chart(&[format!("leaderElection.resourceName={lease}")]);
    let rbac: Vec<_> = docs.into_iter().filter(|d| RBAC_KINDS.contains(&d.0.as_str())).collect();
    let kinds: std::collections::BTreeSet<&str> = rbac.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(kinds.len(), 5, "the chart renders a ServiceAccount, ClusterRoles, a Role and bindings: {kinds:?}");
    // Nothing more than named rights: no wildcard anywhere in the roles.
    for (kind, _, name, doc) in rbac.iter().filter(|d| d.0.ends_with("Role")) {
        assert!(!doc.contains("\"*\"") && !doc.contains("'*'") && !doc.contains("- *"), "{kind} {name} grants a wildcard:\n{doc}");
        assert!(!doc.contains("secrets"), "{kind} {name} grants access to secrets:\n{doc}");
    }
    b.namespace(ns).await;
    let made = b.add_nodes(nodes).await;
    let admin = b.client();
    for (kind, obj_ns, name, doc) in &rbac {
        let path = rbac_path(kind, obj_ns.as_deref().unwrap_or("kube-system"));
        let req = axum::http::Request::patch(format!("{path}/{name}?fieldManager=e2e&force=true"))
            .header("Content-Type", "application/apply-patch+yaml")
            .body(doc.clone().into_bytes())
            .unwrap();
        admin.request_text(req).await.unwrap_or_else(|e| panic!("applying the chart's {kind} {name}: {e}"));
    }
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "kube-system");
    let tr: k8s_openapi::api::authentication::v1::TokenRequest = sas
        .create_subresource("token", "berth", &PostParams::default(), &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}))
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for kube-system/berth: {e}"));
    let token = serde_json::to_value(tr.status).unwrap()["token"].as_str().unwrap().to_string();
    let proxy = FaultProxy::start(client_with_token(b, &token).await).await;

    // What the workload needs beside pods: priority classes, a WFFC class
    // with one static PV, a PodGroup, devices and a claim template.
    let (low, high) = (format!("e2e-chart-low-{run}"), format!("e2e-chart-high-{run}"));
    let pcs: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(admin.clone());
    create_or_keep(&pcs, json!({"metadata": {"name": low, "labels": {LABEL.0: LABEL.1}}, "value": 10})).await;
    create_or_keep(&pcs, json!({"metadata": {"name": high, "labels": {LABEL.0: LABEL.1}}, "value": 1000})).await;
    let class = format!("e2e-chart-{run}");
    let classes: Api<StorageClass> = Api::all(admin.clone());
    create_or_keep(&classes, wffc_class(&class)).await;
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    let pv_name = format!("e2e-chart-{run}");
    pvs.create(&PostParams::default(), &from(local_pv(&pv_name, &run, &class, "1Gi", HOSTNAME, "chart-0"))).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), ns);
    claims.create(&PostParams::default(), &from(claim_of("data", &class, "1Gi"))).await.unwrap();
    let groups = group_api(&admin, ns).await;
    create_group(&groups, ns, "pair", 2).await;
    berth_lab::kwok::publish_devices(&admin, &made[..3], &berth_cluster::dra_driver::DevicesConfig::per_node(1)).await.unwrap_or_else(|e| panic!("{e}"));
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(admin.clone(), ns);
    templates
        .create(&PostParams::default(), &from(json!({"metadata": {"name": "gpu"}, "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": berth_cluster::dra_driver::DEFAULT_DRIVER}}]}}}})))
        .await
        .unwrap();

    let d = daemon::start(proxy.client(), &config(PROFILE, &lease), opts("chart", false)).await.unwrap();
    until_leading(&d, 60).await;
    let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let tolerate = json!({"tolerations": [{"key": "e2e/preempt", "operator": "Exists", "effect": "NoSchedule"}], "nodeSelector": {HOSTNAME: "chart-p"}});
    // The victim first, alone on chart-p.
    api.create(&PostParams::default(), &pod("victim", "3", json!({"spec": {"priorityClassName": low, "terminationGracePeriodSeconds": 1}})).tap_spec(&tolerate))
        .await
        .unwrap();
    eventually(60, "the victim bound", || async { api.get("victim").await.ok().and_then(|p| node_of(&p).map(str::to_string)) }).await;
    let mut all: Vec<Pod> = (0..12).map(|i| pod(&format!("plain-{i:02}"), "250m", json!({}))).collect();
    all.push(pod_with_claim("with-volume", "data", "100m"));
    all.extend((0..2).map(|i| member("pair", i, "100m", json!({}))));
    all.push(pod(
        "with-device",
        "100m",
        json!({"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
            "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}]}}),
    ));
    all.push(pod("preemptor", "3", json!({"spec": {"priorityClassName": high}})).tap_spec(&tolerate));
    let want = all.len();
    create_all(&api, all, 8).await;
    let t = Instant::now();
    loop {
        let pods = pods_in(&admin, ns).await;
        let victim_gone = !pods.iter().any(|p| p.metadata.name.as_deref() == Some("victim"));
        if victim_gone && pods.iter().filter(|p| node_of(p).is_some()).count() == want {
            break;
        }
        if t.elapsed() > Duration::from_secs(120) {
            let state: Vec<_> = pods.iter().map(|p| (p.metadata.name.clone(), node_of(p).map(str::to_string), p.metadata.deletion_timestamp.is_some(), scheduled_condition(p))).collect();
            panic!("not every pod bound, or the victim not gone, within 120 s: {state:#?}\nfailed requests: {:#?}", failed_requests(&proxy));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(node_of(&api.get("preemptor").await.unwrap()), Some("chart-p"));
    assert_eq!(claim_phase(&claims.get("data").await.unwrap()), "Bound");
    eventually(30, "the pair's condition True", || async { group_condition(&groups, "pair").await.filter(|c| c.0 == "True") }).await;
    let rc: Api<k8s_openapi::api::resource::v1::ResourceClaim> = Api::namespaced(admin.clone(), ns);
    let reserved = rc.list(&ListParams::default()).await.unwrap().items.iter().filter(|c| c.status.as_ref().and_then(|s| s.reserved_for.as_ref()).is_some_and(|r| !r.is_empty())).count();
    assert_eq!(reserved, 1, "the device pod's claim is reserved for it");
    // The admin port: TokenReview and SubjectAccessReview on the chart's account.
    let (code, body) = admin_get(d.admin_addr, "/metrics", Some(&admin_token(b))).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(admin_get(d.admin_addr, "/metrics", Some("not-a-token")).await.0, 401);
    assert!(*d.ready.borrow(), "ready: every watched kind synced");

    let replies = proxy.replies();
    // A namespace being deleted answers creates in it with 403 too
    // (another scenario's pending pods): that is no right missing.
    let refused: Vec<String> = proxy
        .errors()
        .into_iter()
        .filter(|r| (r.2 == 401 || r.2 == 403) && !r.3.contains("because it is being terminated"))
        .map(|(m, p, s, body)| format!("{s} {m} {p}: {body}"))
        .collect();
    assert!(refused.is_empty(), "requests of the chart's ServiceAccount refused:\n{}", refused.join("\n"));
    // Nor refused as invalid: a 422 is how kube-apiserver refuses a write
    // whose fields need a right the account lacks (resourceclaims/binding),
    // and what a malformed event earns.
    let invalid: Vec<String> = failed_requests(&proxy).into_iter().filter(|r| r.starts_with("422 ")).collect();
    assert!(invalid.is_empty(), "requests refused as invalid:\n{}", invalid.join("\n"));
    assert_eq!(d.write_counts().events_lost, 0, "events lost: {:?}", d.write_counts());
    let wrote = |m: &str, frag: &str| replies.iter().any(|(meth, p, s)| meth.as_str() == m && p.contains(frag) && *s < 300);
    for (m, frag) in [("POST", "/binding"), ("POST", "/events"), ("DELETE", "/pods/victim"), ("PATCH", "/persistentvolumes/")] {
        assert!(wrote(m, frag), "no successful {m} …{frag}… among the daemon's requests");
    }
    assert!(replies.iter().any(|(m, p, s)| m != "GET" && p.contains("/leases") && *s < 300), "no Lease written");
    assert!(replies.iter().any(|(_, p, s)| p.contains("/podgroups/") && p.contains("/status") && *s < 300), "no PodGroup status written");
    assert!(replies.iter().any(|(_, p, s)| p.contains("/resourceclaims/") && p.contains("/status") && *s < 300), "no ResourceClaim status written");
    println!("chart rbac ({}): {} requests, none refused; {:?}", b.name(), replies.len(), d.write_counts());
    assert_capacity(&pods_in(&admin, ns).await, nodes);
    d.shutdown().await;
    drop(proxy);
    for (kind, obj_ns, name, _) in rbac.iter().rev() {
        let path = rbac_path(kind, obj_ns.as_deref().unwrap_or("kube-system"));
        let _ = admin.request_text(axum::http::Request::delete(format!("{path}/{name}")).body(Vec::new()).unwrap()).await;
    }
    for pc in [&low, &high] {
        let _ = pcs.delete(pc, &DeleteParams::default()).await;
    }
    let _ = pvs.delete(&pv_name, &DeleteParams::default()).await;
    let _ = classes.delete(&class, &DeleteParams::default()).await;
}

/// The requests through `proxy` the server answered with an error (404s of
/// APIs looked for aside).
fn failed_requests(proxy: &FaultProxy) -> Vec<String> {
    proxy.errors().into_iter().map(|(m, p, s, body)| format!("{s} {m} {p}: {body}")).collect()
}

/// Merges a pod spec fragment into a pod.
trait TapSpec {
    fn tap_spec(self, spec: &Value) -> Pod;
}

impl TapSpec for Pod {
    fn tap_spec(self, spec: &Value) -> Pod {
        let mut v = serde_json::to_value(self).unwrap();
        crate::e2e_support::merge(&mut v, &json!({"spec": spec}));
        from(v)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_the_charts_rbac_is_enough_and_nothing_is_refused() {
    scenario!(Backend::local().await, 240, "e2e-chart", chart_nodes(), chart_rbac);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR --kube-scheduler, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_ -- --ignored"]
async fn real_the_charts_rbac_is_enough_and_nothing_is_refused() {
    scenario!(Backend::real().await, 300, "e2e-chart", chart_nodes(), chart_rbac);
}

// ---------------------------------------------------------------------------
// 4. Shadow mode judging another scheduler.

/// The scheduler name kube-scheduler serves by default.
const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// Fails the test unless kube-scheduler runs on the real control plane of
/// `dir` (`tools/kube/up DIR --kube-scheduler` records it in DIR/pids).
fn assert_kube_scheduler_running(dir: &Path) {
    let pids = std::fs::read_to_string(dir.join("pids")).unwrap_or_default();
    let pid = pids.lines().find_map(|l| l.strip_prefix("kube-scheduler ")).map(str::trim);
    let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
    assert!(
        alive,
        "kube-scheduler is not running on the control plane in {}: start it with `tools/kube/up {} --kube-scheduler` (the shadow scenario judges its bindings)",
        dir.display(),
        dir.display()
    );
}

// A shadow berth (profile default-scheduler, writing nothing) beside the
// scheduler that binds pods naming default-scheduler: kube-scheduler on the
// real control plane, a non-shadow berth of that profile on the local
// cluster. Pods are created one at a time, each bound and judged before the
// next: every judgement is `same` or `tie` (simple pods on equal nodes), and
// the shadow wrote nothing.
fn shadow_nodes() -> Vec<NodeSpec> {
    (0..6).map(|i| NodeSpec::new(&format!("shadow-{i}"), ZONES[i % 3], "4")).collect()
}

async fn shadow(b: &Backend, ns: &str, nodes: &[NodeSpec]) {
    const PODS: usize = 12;
    if let Backend::Real { dir, .. } = b {
        assert_kube_scheduler_running(dir);
    }
    b.namespace(ns).await;
    b.add_nodes(nodes).await;
    let client = b.client();
    let proxy = FaultProxy::start(client.clone()).await;
    let cfg = config(DEFAULT_SCHEDULER, &lease_name("shadow"));
    let sh = daemon::start(proxy.client(), &cfg, opts("shadow", true)).await.unwrap();
    let mut ready = sh.ready.clone();
    tokio::time::timeout(Duration::from_secs(30), ready.wait_for(|x| *x)).await.expect("the shadow did not become ready").unwrap();
    assert!(!*sh.leading.borrow(), "a shadow never leads");
    let log = sh.shadow.clone().unwrap();
    let binder = match b {
        Backend::Local(_) => {
            let h = start(client.clone(), &cfg, "binder").await;
            until_leading(&h, 30).await;
            Some(h)
        }
        Backend::Real { .. } => None,
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let judged = || log.counts().values().sum::<u64>();
    let before = judged();
    for i in 0..PODS {
        let name = format!("ks-{i:02}");
        api.create(&PostParams::default(), &pod(&name, "250m", json!({"spec": {"schedulerName": DEFAULT_SCHEDULER}}))).await.unwrap();
        eventually(60, &format!("{name} bound by the {DEFAULT_SCHEDULER}"), || async { api.get(&name).await.ok().and_then(|p| node_of(&p).map(str::to_string)) }).await;
        eventually(30, &format!("{name}'s binding judged by the shadow"), || async { (judged() > before + i as u64).then_some(()) }).await;
    }
    let counts = log.counts();
    println!("shadow ({}): verdicts {counts:?}", b.name());
    let agree = counts.get(&Verdict::Same).copied().unwrap_or(0) + counts.get(&Verdict::Tie).copied().unwrap_or(0);
    assert_eq!(agree, judged(), "every binding of simple pods on equal nodes is same or tie: {counts:?}; {}", log.to_json().unwrap_or_default());
    assert_eq!(judged() - before, PODS as u64, "{counts:?}");
    let writes: Vec<String> = proxy
        .writes()
        .into_iter()
        .filter(|w| !(w.method == "POST" && (w.path.contains("/tokenreviews") || w.path.contains("/subjectaccessreviews"))))
        .map(|w| format!("{} {}", w.method, w.path))
        .collect();
    assert_eq!(writes, Vec::<String>::new(), "the shadow wrote");
    assert_eq!(sh.write_counts().binds, 0);
    let pods = pods_in(&client, ns).await;
    assert_eq!(pods.iter().filter(|p| node_of(p).is_some()).count(), PODS);
    if let Some(h) = binder {
        h.shutdown().await;
    }
    sh.shutdown().await;
    drop(proxy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_shadow_judges_the_default_schedulers_bindings() {
    scenario!(Backend::local().await, 180, "e2e-shadow", shadow_nodes(), shadow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR --kube-scheduler, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_ -- --ignored"]
async fn real_shadow_judges_kube_schedulers_bindings() {
    scenario!(Backend::real().await, 240, "e2e-shadow", shadow_nodes(), shadow);
}
