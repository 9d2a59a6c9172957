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
use berth_engine::framework::CycleOptions;
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
            let (o, _) = fw.schedule(&pod, &snap, CycleOptions { no_reuse, ..Default::default() });
            if let Some(i) = o.selected {
                let mut b = (*pod).clone();
                b.node_name = Some(snap.nodes[i].name().to_string());
                snap.add_pod(Arc::new(b));
                scheduled += 1;
                break;
            }
            match o.post_filter.and_then(|pf| pf.nominated_node.clone().map(|n| (n, pf.victims))) {
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
    let total = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let pct = |q: f64| lat.get(((lat.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    Some(Figures {
        workload: workload.into(),
        nodes,
        percentage,
        pods: pods.len(),
        pods_per_second: pods.len() as f64 / total.max(1e-9),
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        peak_rss_mb: peak_rss_mb(),
        scheduled,
        first_pod_ms: None,
        behind_ms: None,
    })
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
        let (o, _) = fw.schedule(p, &snap, CycleOptions { no_reuse, ..Default::default() });
        if let Some(i) = o.selected {
            let mut b = (**p).clone();
            b.node_name = Some(snap.nodes[i].name().to_string());
            snap.add_pod(Arc::new(b));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_runs_small() {
        for w in WORKLOADS {
            let f = run(w, 30, 100, false).expect("workload runs");
            assert!(f.pods > 0, "{w}");
            if *w == "Unschedulable" {
                assert_eq!(f.scheduled, 0, "{w}");
            } else {
                assert!(f.scheduled > 0, "{w}: nothing scheduled");
            }
        }
    }
}
