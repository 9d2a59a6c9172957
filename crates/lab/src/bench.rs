//! In-process scheduling benchmarks modelled on upstream's scheduler_perf:
//! the engine alone (no API server), one scheduling cycle after another on
//! one core, with the pod assumed on its node after each decision.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::Serialize;

use berth_engine::cache::Snapshot;
use berth_engine::config::Config;
use berth_engine::framework::{Assumed, CycleOptions};
use berth_model::{NodeSpec, PodInfo};

/// The workloads, by name.
pub const WORKLOADS: &[&str] = &[
    "SchedulingBasic",
    "TopologySpreading",
    "PreferredTopologySpreading",
    "SchedulingNodeAffinity",
    "SchedulingPodAntiAffinity",
    "PreemptionBasic",
    "Unschedulable",
    "GangScheduling",
    // Dynamic resource allocation (scheduler_perf's dra/performance-config.yaml).
    "SchedulingWithResourceClaimTemplate",
    "SteadyStateClusterResourceClaimTemplate",
    "SchedulingWithResourceClaimTemplate8Devices",
    "SchedulingWithExtendedResource",
    // One pod with 8,000 ScheduleAnyway spread constraints, and a plain pod behind it.
    "PathologicalSpread",
];

/// GangScheduling: members per group.
pub const GANG_SIZE: usize = 32;

/// PathologicalSpread: the ScheduleAnyway constraints of its one pod.
pub const PATHOLOGICAL_CONSTRAINTS: usize = 8000;
/// PathologicalSpread: nodes at most (each carries every topology key).
pub const PATHOLOGICAL_NODES: usize = 100;

/// One workload's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    /// Workload name.
    pub workload: String,
    /// Nodes.
    pub nodes: usize,
    /// percentageOfNodesToScore (0: adaptive default).
    pub percentage: i32,
    /// Pods measured.
    pub pods: usize,
    /// Pods scheduled (or attempted, for Unschedulable) per second.
    pub pods_per_second: f64,
    /// Median scheduling-cycle latency.
    pub p50_ms: f64,
    /// 99th percentile scheduling-cycle latency.
    pub p99_ms: f64,
    /// Peak resident memory of the process so far.
    pub peak_rss_mb: f64,
    /// Pods that found a node (or were nominated, for preemption).
    pub scheduled: usize,
    /// PathologicalSpread: the cycle of the pod with many constraints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_pod_ms: Option<f64>,
    /// PathologicalSpread: how long the plain pod queued behind it waited
    /// until it was bound (both cycles).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behind_ms: Option<f64>,
}

impl Figures {
    /// The figures of `pods` pods run in `took`, one latency (ms) each in
    /// `lat`, `scheduled` of them placed.
    fn measured(workload: &str, nodes: usize, percentage: i32, pods: usize, took: std::time::Duration, mut lat: Vec<f64>, scheduled: usize) -> Figures {
        lat.sort_by(f64::total_cmp);
        Figures {
            workload: workload.into(),
            nodes,
            percentage,
            pods,
            pods_per_second: pods as f64 / took.as_secs_f64().max(1e-9),
            p50_ms: percentile(&lat, 0.5),
            p99_ms: percentile(&lat, 0.99),
            peak_rss_mb: peak_rss_mb(),
            scheduled,
            first_pod_ms: None,
            behind_ms: None,
        }
    }
}

/// The `q` quantile of `sorted` (ascending): the value at the nearest rank
/// of `(n - 1) * q`, 0 when there is none. Every figure the lab prints
/// uses it.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0)
}

fn q(s: &str) -> Quantity {
    Quantity(s.into())
}

fn node(i: usize, zones: usize) -> core::Node {
    let mut n = core::Node::default();
    let name = format!("node-{i}");
    n.metadata.name = Some(name.clone());
    let mut labels = BTreeMap::new();
    labels.insert("kubernetes.io/hostname".to_string(), name);
    labels.insert("topology.kubernetes.io/zone".to_string(), format!("zone-{}", i % zones));
    labels.insert("node-affinity".to_string(), if i.is_multiple_of(2) { "a" } else { "b" }.to_string());
    n.metadata.labels = Some(labels);
    let alloc: BTreeMap<String, Quantity> = [("cpu", "4"), ("memory", "32Gi"), ("pods", "110")].iter().map(|(k, v)| (k.to_string(), q(v))).collect();
    n.status = Some(core::NodeStatus { allocatable: Some(alloc.clone()), capacity: Some(alloc), ..Default::default() });
    n
}

fn pod(name: &str, cpu: &str, mem: &str, priority: i32, labels: &[(&str, &str)]) -> core::Pod {
    let mut p = core::Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some(name.into());
    p.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    let req: BTreeMap<String, Quantity> = [("cpu", cpu), ("memory", mem)].iter().map(|(k, v)| (k.to_string(), q(v))).collect();
    p.spec = Some(core::PodSpec {
        priority: Some(priority),
        containers: vec![core::Container {
            name: "c".into(),
            image: Some("registry.k8s.io/pause:3.10".into()),
            resources: Some(core::ResourceRequirements { requests: Some(req), ..Default::default() }),
            ..Default::default()
        }],
        ..Default::default()
    });
    p
}

fn sel(k: &str, v: &str) -> meta::LabelSelector {
    meta::LabelSelector { match_labels: Some([(k.to_string(), v.to_string())].into()), match_expressions: None }
}

/// Builds the cluster (with its initial pods bound) and the pods to measure.
pub fn setup(workload: &str, nodes: usize) -> Option<(Snapshot, Vec<Arc<PodInfo>>)> {
    let mut snap = Snapshot::new();
    for i in 0..nodes {
        snap.upsert_node(NodeSpec::from_node(&node(i, 3)));
    }
    let measured = match workload {
        "SchedulingPodAntiAffinity" | "PreemptionBasic" => nodes / 2,
        "Unschedulable" => nodes.min(2000),
        "GangScheduling" => GANG_SIZE * (nodes / 100).clamp(1, 50),
        _ => nodes.min(10_000),
    };
    let mut init = |p: core::Pod, i: usize| {
        let mut p = p;
        if let Some(s) = p.spec.as_mut() {
            s.node_name = Some(format!("node-{}", i % nodes));
        }
        snap.add_pod(PodInfo::from_pod(&p));
    };
    let mut pods = Vec::with_capacity(measured);
    match workload {
        "SchedulingBasic" | "Unschedulable" => {
            for i in 0..nodes {
                init(pod(&format!("init-{i}"), "100m", "500Mi", 0, &[]), i);
            }
            for i in 0..measured {
                let big = workload == "Unschedulable";
                pods.push(pod(&format!("p-{i}"), if big { "5" } else { "100m" }, "500Mi", 0, &[]));
            }
        }
        "TopologySpreading" | "PreferredTopologySpreading" => {
            let when = if workload == "TopologySpreading" { "DoNotSchedule" } else { "ScheduleAnyway" };
            for i in 0..nodes {
                init(pod(&format!("init-{i}"), "100m", "500Mi", 0, &[("app", "init")]), i);
            }
            for i in 0..measured {
                let mut p = pod(&format!("p-{i}"), "100m", "500Mi", 0, &[("color", "blue")]);
                if let Some(s) = p.spec.as_mut() {
                    s.topology_spread_constraints = Some(vec![core::TopologySpreadConstraint {
                        max_skew: 5,
                        topology_key: "topology.kubernetes.io/zone".into(),
                        when_unsatisfiable: when.into(),
                        label_selector: Some(sel("color", "blue")),
                        ..Default::default()
                    }]);
                }
                pods.push(p);
            }
        }
        "SchedulingNodeAffinity" => {
            for i in 0..nodes {
                init(pod(&format!("init-{i}"), "100m", "500Mi", 0, &[]), i);
            }
            for i in 0..measured {
                let mut p = pod(&format!("p-{i}"), "100m", "500Mi", 0, &[]);
                if let Some(s) = p.spec.as_mut() {
                    s.affinity = Some(core::Affinity {
                        node_affinity: Some(core::NodeAffinity {
                            required_during_scheduling_ignored_during_execution: Some(core::NodeSelector {
                                node_selector_terms: vec![core::NodeSelectorTerm {
                                    match_expressions: Some(vec![core::NodeSelectorRequirement { key: "node-affinity".into(), operator: "In".into(), values: Some(vec!["a".into()]) }]),
                                    match_fields: None,
                                }],
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    });
                }
                pods.push(p);
            }
        }
        "SchedulingPodAntiAffinity" => {
            for i in 0..nodes {
                init(pod(&format!("init-{i}"), "100m", "500Mi", 0, &[]), i);
            }
            for i in 0..measured {
                let mut p = pod(&format!("p-{i}"), "100m", "500Mi", 0, &[("color", "green")]);
                if let Some(s) = p.spec.as_mut() {
                    s.affinity = Some(core::Affinity {
                        pod_anti_affinity: Some(core::PodAntiAffinity {
                            required_during_scheduling_ignored_during_execution: Some(vec![core::PodAffinityTerm {
                                label_selector: Some(sel("color", "green")),
                                topology_key: "kubernetes.io/hostname".into(),
                                ..Default::default()
                            }]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    });
                }
                pods.push(p);
            }
        }
        "PreemptionBasic" => {
            // Every node full of low-priority pods; each high-priority pod preempts one.
            for i in 0..nodes * 4 {
                init(pod(&format!("low-{i}"), "900m", "500Mi", 1, &[]), i);
            }
            for i in 0..measured {
                pods.push(pod(&format!("high-{i}"), "900m", "500Mi", 1000, &[]));
            }
        }
        "GangScheduling" => {
            // Groups of 32 (minCount 32); every tenth group has one member
            // that fits nowhere, so the whole group is tried and undone.
            for i in 0..nodes {
                init(pod(&format!("init-{i}"), "100m", "500Mi", 0, &[]), i);
            }
            for g in 0..measured / GANG_SIZE {
                let name = format!("gang-{g}");
                let policy = berth_engine::cache::groups::GroupPolicy {
                    api: berth_model::pod::GroupApi::V1beta1,
                    namespace: "default".into(),
                    name: name.clone(),
                    min_count: GANG_SIZE as u32,
                    topology_key: None,
                    min_resources: None,
                    timeout: None,
                };
                snap.groups.upsert(berth_model::pod::GroupApi::V1beta1, "default", &name, Ok(policy));
                for m in 0..GANG_SIZE {
                    let big = g % 10 == 9 && m == GANG_SIZE - 1;
                    let mut p = pod(&format!("{name}-{m}"), if big { "5" } else { "500m" }, "500Mi", 0, &[]);
                    if let Some(s) = p.spec.as_mut() {
                        s.scheduling_group = Some(core::PodSchedulingGroup { pod_group_name: Some(name.clone()) });
                    }
                    pods.push(p);
                }
            }
        }
        _ => return None,
    }
    Some((snap, pods.iter().map(PodInfo::from_pod).collect()))
}

/// Peak resident set size of this process in MiB (Linux; 0 elsewhere).
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<f64>().ok()))
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Runs one workload.
/// `no_reuse`: do not reuse work across pods of one signature (to measure what it saves).
pub fn run(workload: &str, nodes: usize, percentage: i32, no_reuse: bool) -> Option<Figures> {
    if let Some(w) = DraWorkload::named(workload) {
        return run_dra(workload, w, nodes, percentage, no_reuse);
    }
    if workload == "PathologicalSpread" {
        return run_pathological_spread(nodes.min(PATHOLOGICAL_NODES), PATHOLOGICAL_CONSTRAINTS, percentage, no_reuse);
    }
    let (mut snap, pods) = setup(workload, nodes)?;
    let cfg = berth_engine::config::KubeSchedulerConfiguration { percentage_of_nodes_to_score: Some(percentage), ..Default::default() };
    let config = Config::from_raw(cfg).ok()?;
    let fw = berth_engine::profile::frameworks(&config, 42).into_iter().next()?;
    let mut lat = Vec::with_capacity(pods.len());
    let mut scheduled = 0;
    let start = Instant::now();
    if workload == "GangScheduling" {
        // One group cycle per group; the latency figures are per group cycle.
        use berth_engine::framework::group::{schedule_group, SnapshotHost};
        for members in pods.chunks(GANG_SIZE) {
            let t = Instant::now();
            let out = schedule_group(&mut SnapshotHost { fw: &fw, snap: &mut snap }, members);
            scheduled += out.placed.len();
            lat.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    for p in pods.iter().filter(|_| workload != "GangScheduling") {
        let t = Instant::now();
        let mut pod = p.clone();
        for _attempt in 0..2 {
            // The daemon's step: the cycle, then the pod assumed on its node.
            let one = fw.schedule_one(&mut snap, &pod, CycleOptions { no_reuse, ..Default::default() });
            match one.assumed {
                Assumed::On(_) => {
                    scheduled += 1;
                    break;
                }
                Assumed::Refused { .. } => break,
                Assumed::NoNode => {}
            }
            match one.outcome.post_filter.and_then(|pf| pf.nominated_node.clone().map(|n| (n, pf.victims))) {
                Some((n, victims)) => {
                    for v in &victims {
                        snap.remove_pod(&v.uid);
                    }
                    let mut b = (*pod).clone();
                    b.nominated_node = Some(n);
                    pod = Arc::new(b);
                }
                None => break,
            }
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Some(Figures::measured(workload, nodes, percentage, pods.len(), start.elapsed(), lat, scheduled))
}

/// PathologicalSpread: one pod with `constraints` ScheduleAnyway topology
/// spread constraints, each on a topology key of its own (the API rejects
/// two with the same key and whenUnsatisfiable), on `nodes` nodes that carry
/// every key, with a plain pod queued behind it. Figures: the first pod's
/// cycle, and how long the plain pod waited until it was bound.
pub fn run_pathological_spread(nodes: usize, constraints: usize, percentage: i32, no_reuse: bool) -> Option<Figures> {
    let key = |k: usize| format!("spread.berth.example/key-{k}");
    let mut snap = Snapshot::new();
    for i in 0..nodes {
        let mut n = node(i, 3);
        if let Some(l) = n.metadata.labels.as_mut() {
            // A few domains per key, shifted key by key.
            l.extend((0..constraints).map(|k| (key(k), format!("d{}", (i + k) % 4))));
        }
        snap.upsert_node(NodeSpec::from_node(&n));
        let mut p = pod(&format!("init-{i}"), "100m", "500Mi", 0, &[("app", "spread")]);
        if let Some(s) = p.spec.as_mut() {
            s.node_name = Some(format!("node-{i}"));
        }
        snap.add_pod(PodInfo::from_pod(&p));
    }
    let mut first = pod("pathological", "100m", "500Mi", 0, &[("app", "spread")]);
    if let Some(s) = first.spec.as_mut() {
        let tsc = |k: usize| core::TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key(k),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(sel("app", "spread")),
            ..Default::default()
        };
        s.topology_spread_constraints = Some((0..constraints).map(tsc).collect());
    }
    let pods = [PodInfo::from_pod(&first), PodInfo::from_pod(&pod("plain", "100m", "500Mi", 0, &[]))];
    let cfg = berth_engine::config::KubeSchedulerConfiguration { percentage_of_nodes_to_score: Some(percentage), ..Default::default() };
    let config = Config::from_raw(cfg).ok()?;
    let fw = berth_engine::profile::frameworks(&config, 42).into_iter().next()?;
    let mut lat = Vec::with_capacity(pods.len());
    let mut scheduled = 0;
    let start = Instant::now();
    for p in &pods {
        let t = Instant::now();
        if let Assumed::On(_) = fw.schedule_one(&mut snap, p, CycleOptions { no_reuse, ..Default::default() }).assumed {
            scheduled += 1;
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let total = start.elapsed().as_secs_f64();
    let first_pod_ms = lat.first().copied();
    let behind_ms = Some(lat.iter().sum());
    lat.sort_by(f64::total_cmp);
    Some(Figures {
        workload: "PathologicalSpread".into(),
        nodes,
        percentage,
        pods: pods.len(),
        pods_per_second: pods.len() as f64 / total.max(1e-9),
        p50_ms: lat.first().copied().unwrap_or(0.0),
        p99_ms: lat.last().copied().unwrap_or(0.0),
        peak_rss_mb: peak_rss_mb(),
        scheduled,
        first_pod_ms,
        behind_ms,
    })
}

// ---------------------------------------------------------------------------
// Dynamic resource allocation

/// The driver of scheduler_perf's DRA workloads.
const DRA_DRIVER: &str = "test-driver.cdi.k8s.io";

/// A DRA workload: the cluster, the claims already allocated, and the pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DraWorkload {
    /// SchedulingWithResourceClaimTemplate (5000pods_500nodes): 10 devices
    /// per node, half of them allocated to init pods, then as many pods,
    /// each with a claim from a template, fill the cluster up.
    Template,
    /// SteadyStateClusterResourceClaimTemplate (half_500nodes): half of the
    /// devices allocated to claims, then pods with a template claim in
    /// batches of 10, each batch deleted (with its claims) once scheduled.
    SteadyState,
    /// SchedulingWithResourceClaimTemplate with 8 devices per node (every
    /// node evaluated when run at percentageOfNodesToScore 100): half of
    /// the devices allocated to init pods, then pods fill the rest.
    EightDevices,
    /// Extended resources via DRA (DRAExtendedResource): a DeviceClass with
    /// extendedResourceName example.com/gpu, pods asking for 1 of it, nodes
    /// that do not list it (10 devices per node, half in use).
    Extended,
}

impl DraWorkload {
    fn named(w: &str) -> Option<DraWorkload> {
        Some(match w {
            "SchedulingWithResourceClaimTemplate" => DraWorkload::Template,
            "SteadyStateClusterResourceClaimTemplate" => DraWorkload::SteadyState,
            "SchedulingWithResourceClaimTemplate8Devices" => DraWorkload::EightDevices,
            "SchedulingWithExtendedResource" => DraWorkload::Extended,
            _ => return None,
        })
    }

    fn devices_per_node(self) -> usize {
        if self == DraWorkload::EightDevices { 8 } else { 10 }
    }
}

fn from_json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Option<T> {
    serde_json::from_value(v).ok()
}

/// Nodes with their slices, the class, claims allocated beforehand (with
/// their bound pods, except in the steady state), and the measured pods with
/// their generated claims.
fn setup_dra(w: DraWorkload, nodes: usize) -> Option<(Snapshot, Vec<Arc<PodInfo>>)> {
    let devs = w.devices_per_node();
    let mut snap = Snapshot::new();
    for i in 0..nodes {
        snap.upsert_node(NodeSpec::from_node(&node(i, 3)));
        let devices: Vec<serde_json::Value> = (0..devs).map(|k| serde_json::json!({"name": format!("claim-{k:04}")})).collect();
        let slice = serde_json::json!({
            "metadata": {"name": format!("node-{i}-{DRA_DRIVER}")},
            "spec": {"driver": DRA_DRIVER, "nodeName": format!("node-{i}"), "pool": {"name": format!("node-{i}"), "generation": 1, "resourceSliceCount": 1}, "devices": devices},
        });
        snap.devices.upsert_slice(&from_json(slice)?).ok()?;
    }
    let mut class = serde_json::json!({"metadata": {"name": "test-class"}, "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRA_DRIVER}\"")}}]}});
    if w == DraWorkload::Extended {
        class["spec"]["extendedResourceName"] = "example.com/gpu".into();
    }
    snap.upsert_device_class(&from_json(class)?).ok()?;
    // Half of the devices allocated (scheduler_perf's init pods, or
    // allocResourceClaims in the steady state): claim j on node j % nodes.
    let init = nodes * devs / 2;
    for j in 0..init {
        let (n, k) = (j % nodes, j / nodes);
        let owner = format!("init-{j}");
        let claim = serde_json::json!({
            "metadata": {"name": format!("init-claim-{j}"), "namespace": "init", "uid": format!("uid-init-claim-{j}")},
            "spec": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "test-class"}}]}},
            "status": {
                "allocation": {
                    "devices": {"results": [{"request": "req-0", "driver": DRA_DRIVER, "pool": format!("node-{n}"), "device": format!("claim-{k:04}")}]},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [format!("node-{n}")]}]}]},
                },
                "reservedFor": if w == DraWorkload::SteadyState { serde_json::json!([]) } else { serde_json::json!([{"resource": "pods", "name": owner, "uid": owner}]) },
            },
        });
        snap.devices.upsert_claim(&from_json(claim)?);
        if w != DraWorkload::SteadyState {
            let mut p = pod(&owner, "100m", "500Mi", 0, &[]);
            if let Some(s) = p.spec.as_mut() {
                s.node_name = Some(format!("node-{n}"));
            }
            snap.add_pod(PodInfo::from_pod(&p));
        }
    }
    let measured = (nodes * devs - init).min(10_000);
    let mut pods = Vec::with_capacity(measured);
    for i in 0..measured {
        let name = format!("p-{i}");
        let mut p = pod(&name, "100m", "500Mi", 0, &[]);
        if w == DraWorkload::Extended {
            if let Some(r) = p.spec.as_mut().and_then(|s| s.containers.first_mut()).and_then(|c| c.resources.as_mut()) {
                for m in [&mut r.requests, &mut r.limits] {
                    m.get_or_insert_with(Default::default).insert("example.com/gpu".into(), q("1"));
                }
            }
            pods.push(p);
            continue;
        }
        // The resourceclaim controller's claim for the pod's template claim.
        let claim_name = format!("{name}-resource-x7k2p");
        let claim = serde_json::json!({
            "metadata": {
                "name": claim_name, "namespace": "default", "uid": format!("uid-{claim_name}"),
                "annotations": {"resource.kubernetes.io/pod-claim-name": "resource"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": name, "controller": true, "blockOwnerDeletion": true}],
            },
            "spec": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "test-class"}}]}},
        });
        snap.devices.upsert_claim(&from_json(claim)?);
        let v = serde_json::to_value(&p).ok()?;
        let mut v = v;
        v["spec"]["resourceClaims"] = serde_json::json!([{"name": "resource", "resourceClaimTemplateName": "test-claim-template"}]);
        v["spec"]["containers"][0]["resources"]["claims"] = serde_json::json!([{"name": "resource"}]);
        v["status"] = serde_json::json!({"resourceClaimStatuses": [{"name": "resource", "resourceClaimName": claim_name}]});
        pods.push(from_json(v)?);
    }
    Some((snap, pods.iter().map(PodInfo::from_pod).collect()))
}

/// Runs a DRA workload: each pod scheduled, then reserved and assumed (its
/// allocation in flight for the next pods, as the daemon assumes it before
/// PreBind writes it). The steady state deletes each batch of 10 once placed.
fn run_dra(workload: &str, w: DraWorkload, nodes: usize, percentage: i32, no_reuse: bool) -> Option<Figures> {
    let (mut snap, pods) = setup_dra(w, nodes)?;
    let cfg = berth_engine::config::KubeSchedulerConfiguration { percentage_of_nodes_to_score: Some(percentage), ..Default::default() };
    let config = Config::from_raw(cfg).ok()?;
    let fw = berth_engine::profile::frameworks(&config, 42).into_iter().next()?;
    let batch = if w == DraWorkload::SteadyState { 10 } else { pods.len().max(1) };
    let mut lat = Vec::with_capacity(pods.len());
    let mut scheduled = 0;
    let start = Instant::now();
    for chunk in pods.chunks(batch) {
        for p in chunk {
            let t = Instant::now();
            if let Assumed::On(_) = fw.schedule_one(&mut snap, p, CycleOptions { no_reuse, ..Default::default() }).assumed {
                scheduled += 1;
            }
            lat.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        if w == DraWorkload::SteadyState {
            for p in chunk {
                snap.forget_reservations(&p.uid);
                snap.remove_pod(&p.uid);
                for c in &p.resource_claims {
                    if let berth_model::pod::ClaimSource::FromTemplate(Some(Some(n))) = &c.source {
                        snap.devices.remove_claim(&p.namespace, n);
                    }
                }
            }
        }
    }
    Some(Figures::measured(workload, nodes, percentage, pods.len(), start.elapsed(), lat, scheduled))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_runs_small() {
        for w in WORKLOADS {
            let f = run(w, 30, 100, false).expect("workload runs");
            assert!(f.pods > 0, "{w}");
            if DraWorkload::named(w).is_some() {
                assert_eq!(f.scheduled, f.pods, "{w}: every pod gets a device");
            }
            if *w == "Unschedulable" {
                assert_eq!(f.scheduled, 0, "{w}");
            } else {
                assert!(f.scheduled > 0, "{w}: nothing scheduled");
            }
        }
    }
}

/// Figures of the DRA workloads in this build (`cargo test -p berth-lab
/// --lib dra_figures -- --ignored --nocapture`): to find hot spots, not to
/// judge speed (a dev build).
#[cfg(test)]
mod dra_figures {
    #[test]
    #[ignore = "prints figures; run by hand"]
    fn dra_figures() {
        let nodes: usize = std::env::var("BERTH_DRA_NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
        for w in ["SchedulingWithResourceClaimTemplate", "SteadyStateClusterResourceClaimTemplate", "SchedulingWithResourceClaimTemplate8Devices", "SchedulingWithExtendedResource"] {
            for p in [0, 100] {
                if let Some(f) = super::run(w, nodes, p, false) {
                    println!("{w} nodes={nodes} pct={p} pods={} pods/s={:.0} p50={:.3}ms p99={:.3}ms scheduled={}", f.pods, f.pods_per_second, f.p50_ms, f.p99_ms, f.scheduled);
                }
            }
        }
    }
}
