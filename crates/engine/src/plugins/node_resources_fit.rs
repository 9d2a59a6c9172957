//! NodeResourcesFit: Filter checks that the pod's requests fit the node's free
//! allocatable; Score applies the configured strategy (LeastAllocated,
//! MostAllocated or RequestedToCapacityRatio).

use std::borrow::Cow;

use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::{Code, CycleState, Events, FilterPlugin, MAX_NODE_SCORE, NodeScore, Plugin, PreFilterNodes, PreFilterPlugin, PreScorePlugin, Reasons, ScorePlugin, Status};
use berth_model::resources::{is_extended, CPU};
use berth_model::{NodeInfo, PodInfo};

use super::resource_allocation::{allocatable_and_requested_k, default_resources, kind, pod_request_k, validate_resources, Kind, ResourceSpec};

/// Plugin name.
pub const NAME: &str = "NodeResourcesFit";

/// A point of the RequestedToCapacityRatio shape.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ShapePoint {
    /// Utilization, 0..=100.
    pub utilization: i64,
    /// Score, 0..=10.
    pub score: i64,
}

/// RequestedToCapacityRatio parameters.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RequestedToCapacityRatio {
    /// The shape, in increasing utilization.
    #[serde(default)]
    pub shape: Vec<ShapePoint>,
}

/// The scoring strategy.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScoringStrategy {
    /// LeastAllocated (default), MostAllocated or RequestedToCapacityRatio.
    #[serde(rename = "type", default = "least")]
    pub kind: String,
    /// Resources and weights (cpu:1, memory:1 by default).
    #[serde(default = "default_resources")]
    pub resources: Vec<ResourceSpec>,
    /// Shape for RequestedToCapacityRatio.
    #[serde(default)]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatio>,
}

fn least() -> String {
    "LeastAllocated".into()
}

impl Default for ScoringStrategy {
    fn default() -> Self {
        ScoringStrategy { kind: least(), resources: default_resources(), requested_to_capacity_ratio: None }
    }
}

/// NodeResourcesFitArgs.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// Extended resources not checked by Filter.
    #[serde(default)]
    pub ignored_resources: Vec<String>,
    /// Extended resource groups (prefix before '/') not checked by Filter.
    #[serde(default)]
    pub ignored_resource_groups: Vec<String>,
    /// The scoring strategy.
    #[serde(default)]
    pub scoring_strategy: Option<ScoringStrategy>,
    /// Accepted and ignored.
    #[serde(default)]
    pub api_version: Option<String>,
    /// Accepted and ignored.
    #[serde(default)]
    pub kind: Option<String>,
}

#[derive(Debug, Clone)]
enum Strategy {
    Least,
    Most,
    Ratio(Vec<(i64, i64)>),
}

/// Resource fit and allocation scoring.
#[derive(Debug)]
pub struct NodeResourcesFit {
    ignored: Vec<String>,
    ignored_groups: Vec<String>,
    resources: Vec<ResourceSpec>,
    kinds: Vec<Kind>,
    strategy: Strategy,
    /// LeastAllocated over exactly cpu and memory with weight 1 each (the default).
    default_least: bool,
}

impl Default for NodeResourcesFit {
    fn default() -> Self {
        match Self::new(Args::default()) {
            Ok(p) => p,
            Err(_) => NodeResourcesFit { ignored: vec![], ignored_groups: vec![], kinds: vec![Kind::Cpu, Kind::Memory], resources: default_resources(), strategy: Strategy::Least, default_least: true },
        }
    }
}

impl NodeResourcesFit {
    /// Builds the plugin, validating its args.
    pub fn new(args: Args) -> Result<Self, String> {
        let ss = args.scoring_strategy.unwrap_or_default();
        validate_resources(&ss.resources, "scoringStrategy.resources")?;
        let strategy = match ss.kind.as_str() {
            "LeastAllocated" => Strategy::Least,
            "MostAllocated" => Strategy::Most,
            "RequestedToCapacityRatio" => {
                let shape = ss.requested_to_capacity_ratio.map(|r| r.shape).unwrap_or_default();
                if shape.is_empty() {
                    return Err("scoringStrategy.requestedToCapacityRatio.shape: at least one point must be specified".into());
                }
                let mut prev = -1;
                for (i, p) in shape.iter().enumerate() {
                    if !(0..=100).contains(&p.utilization) {
                        return Err(format!("scoringStrategy.requestedToCapacityRatio.shape[{i}].utilization: must be in the range 0-100, got {}", p.utilization));
                    }
                    if p.utilization <= prev {
                        return Err(format!("scoringStrategy.requestedToCapacityRatio.shape[{i}].utilization: values must be sorted in increasing order"));
                    }
                    prev = p.utilization;
                    if !(0..=10).contains(&p.score) {
                        return Err(format!("scoringStrategy.requestedToCapacityRatio.shape[{i}].score: must be in the range 0-10, got {}", p.score));
                    }
                }
                Strategy::Ratio(shape.iter().map(|p| (p.utilization, p.score * (MAX_NODE_SCORE / 10))).collect())
            }
            other => return Err(format!("scoringStrategy.type: unsupported value {other:?} (LeastAllocated, MostAllocated or RequestedToCapacityRatio)")),
        };
        for (i, r) in args.ignored_resources.iter().enumerate() {
            if r.is_empty() {
                return Err(format!("ignoredResources[{i}]: must be non-empty"));
            }
        }
        for (i, g) in args.ignored_resource_groups.iter().enumerate() {
            if g.is_empty() || g.contains('/') {
                return Err(format!("ignoredResourceGroups[{i}]: {g:?} is not a valid resource group name (no '/')"));
            }
        }
        let kinds: Vec<Kind> = ss.resources.iter().map(|r| kind(&r.name)).collect();
        let default_least = matches!(strategy, Strategy::Least) && kinds == [Kind::Cpu, Kind::Memory] && ss.resources.iter().all(|r| r.weight == 1);
        Ok(NodeResourcesFit { ignored: args.ignored_resources, ignored_groups: args.ignored_resource_groups, resources: ss.resources, kinds, strategy, default_least })
    }

    fn ignored(&self, name: &str) -> bool {
        is_extended(name)
            && (self.ignored.iter().any(|r| r == name)
                || name.split_once('/').is_some_and(|(g, _)| self.ignored_groups.iter().any(|x| x == g)))
    }
}

/// Extended resources of the pod that a DeviceClass backs (DRAExtendedResource).
#[derive(Clone, Debug)]
struct DraBacked(Vec<String>);

/// Reasons the pod does not fit the node's free resources, and whether the
/// pod could not fit even an empty node (preemption cannot help then).
pub fn insufficient(pod: &PodInfo, node: &NodeInfo, ignored: impl Fn(&str) -> bool) -> (Reasons, bool) {
    let mut reasons = Reasons::new();
    let mut unresolvable = false;
    let alloc = &node.allocatable;
    if node.pods.len() as i64 + 1 > alloc.pods {
        reasons.push(Cow::Borrowed("Too many pods"));
    }
    let r = &pod.requests;
    if r.milli_cpu == 0 && r.memory == 0 && r.ephemeral_storage == 0 && r.scalar.iter().all(|(_, v)| *v == 0) {
        return (reasons, false);
    }
    let mut check = |name: &str, want: i64, have: i64, used: i64| {
        if want > 0 && want > have - used {
            reasons.push(match name {
                CPU => Cow::Borrowed("Insufficient cpu"),
                "memory" => Cow::Borrowed("Insufficient memory"),
                "ephemeral-storage" => Cow::Borrowed("Insufficient ephemeral-storage"),
                other => Cow::Owned(format!("Insufficient {other}")),
            });
            if want > have {
                unresolvable = true;
            }
        }
    };
    check(CPU, r.milli_cpu, alloc.milli_cpu, node.requested.milli_cpu);
    check("memory", r.memory, alloc.memory, node.requested.memory);
    check("ephemeral-storage", r.ephemeral_storage, alloc.ephemeral_storage, node.requested.ephemeral_storage);
    for (name, want) in &r.scalar {
        if *want == 0 || ignored(name) {
            continue;
        }
        check(name, *want, alloc.scalar(name), node.requested.scalar(name));
    }
    (reasons, unresolvable)
}

fn ratio_fn(shape: &[(i64, i64)], p: i64) -> i64 {
    for (i, &(u, s)) in shape.iter().enumerate() {
        if p <= u {
            if i == 0 {
                return s;
            }
            let (pu, ps) = shape[i - 1];
            return ps + (s - ps) * (p - pu) / (u - pu);
        }
    }
    shape.last().map(|x| x.1).unwrap_or(0)
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }

    fn reusable(&self) -> bool {
        // Node-local: see Plugin::reusable.
        true
    }

    fn events(&self) -> Events {
        // DeviceClass Add/Update as upstream with DRAExtendedResource: a pod
        // rejected for an extended resource no node lists may wait for the
        // class that backs it (then DynamicResources allocates it).
        Events::NODE_ADD.or(Events::NODE_ALLOCATABLE).or(Events::POD_DELETE).or(Events::DEVICE_CLASS)
    }
}

impl PreFilterPlugin for NodeResourcesFit {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        // DRAExtendedResource: an extended resource a DeviceClass backs is
        // left to DynamicResources on nodes that do not list it.
        let backed: Vec<String> = pod
            .requests
            .scalar
            .iter()
            .filter(|(n, v)| *v > 0 && super::dynamic_resources::claims::is_dra_extended(n) && snap.devices.class_for_extended_resource(n).is_some())
            .map(|(n, _)| n.clone())
            .collect();
        if !backed.is_empty() {
            state.insert(DraBacked(backed));
        }
        (Status::success(), None)
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let backed = state.get::<DraBacked>();
        let (reasons, unresolvable) =
            insufficient(pod, node, |n| self.ignored(n) || backed.is_some_and(|b| b.0.iter().any(|x| x == n) && node.allocatable.scalar(n) == 0));
        if reasons.is_empty() {
            return Status::success();
        }
        Status {
            code: if unresolvable { Code::UnschedulableAndUnresolvable } else { Code::Unschedulable },
            reasons,
            plugin: NAME,
        }
    }

    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        // The native resources and the pod count in one tight loop; a node that
        // does not fit (or a pod with scalar requests) gets the full check,
        // which names the reasons.
        let r = &pod.requests;
        let (cpu, mem, eph) = (r.milli_cpu, r.memory, r.ephemeral_storage);
        let scalars = r.scalar.iter().any(|(_, v)| *v != 0);
        let fits = |ni: &NodeInfo| {
            let (a, u) = (&ni.allocatable, &ni.requested);
            !scalars
                && (ni.pods.len() as i64) < a.pods
                && (cpu <= 0 || cpu <= a.milli_cpu - u.milli_cpu)
                && (mem <= 0 || mem <= a.memory - u.memory)
                && (eph <= 0 || eph <= a.ephemeral_storage - u.ephemeral_storage)
        };
        crate::framework::filter_each(self, state, pod, snap, nodes, rejected, |_, ni| !fits(ni));
    }
}

impl PreScorePlugin for NodeResourcesFit {
    fn pre_score(&self, _: &mut CycleState, _: &PodInfo, _: &[usize], _: &Snapshot) -> Status {
        // Score reads the pod's requests itself; upstream's PreScore only
        // caches them, so nothing to compute here.
        Status::success()
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let reqs = self.pod_requests(pod);
        Ok(self.score_with(&reqs, node))
    }

    fn score_nodes(&self, _: &CycleState, pod: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
        let reqs = self.pod_requests(pod);
        if self.default_least {
            // The default (LeastAllocated over cpu and memory, weight 1 each):
            // the same arithmetic as `score_with`, without the generic loop.
            let (pc, pm) = (reqs[0], reqs[1]);
            let least = |alloc: i64, requested: i64| -> Option<i64> {
                if alloc == 0 {
                    None
                } else if requested > alloc {
                    Some(0)
                } else {
                    Some((alloc - requested) * MAX_NODE_SCORE / alloc)
                }
            };
            for s in scores.iter_mut() {
                let ni = &snap.nodes[s.node];
                let c = least(ni.allocatable.milli_cpu, ni.non_zero_cpu + pc);
                let m = least(ni.allocatable.memory, ni.non_zero_memory + pm);
                s.score = match (c, m) {
                    (Some(c), Some(m)) => (c + m) / 2,
                    (Some(x), None) | (None, Some(x)) => x,
                    (None, None) => 0,
                };
            }
            return Ok(());
        }
        for s in scores.iter_mut() {
            s.score = self.score_with(&reqs, &snap.nodes[s.node]);
        }
        Ok(())
    }
}

impl NodeResourcesFit {
    fn pod_requests(&self, pod: &PodInfo) -> Vec<i64> {
        self.resources.iter().zip(&self.kinds).map(|(r, &k)| pod_request_k(pod, k, &r.name, false)).collect()
    }

    fn score_with(&self, reqs: &[i64], node: &NodeInfo) -> i64 {
        let (mut total, mut weights) = (0i64, 0i64);
        for ((r, &k), &req) in self.resources.iter().zip(&self.kinds).zip(reqs) {
            if req == 0 && k == Kind::Scalar {
                continue;
            }
            let (alloc, requested) = allocatable_and_requested_k(node, k, &r.name, req, false);
            if alloc == 0 {
                continue;
            }
            let s = match &self.strategy {
                Strategy::Least => {
                    if requested > alloc { 0 } else { (alloc - requested) * MAX_NODE_SCORE / alloc }
                }
                Strategy::Most => requested.min(alloc) * MAX_NODE_SCORE / alloc,
                Strategy::Ratio(shape) => {
                    let u = if requested > alloc { 100 } else { requested * 100 / alloc };
                    let s = ratio_fn(shape, u);
                    if s <= 0 {
                        continue;
                    }
                    s
                }
            };
            total += s * r.weight;
            weights += r.weight;
        }
        if weights == 0 {
            return 0;
        }
        match self.strategy {
            Strategy::Ratio(_) => (total as f64 / weights as f64).round() as i64,
            _ => total / weights,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod, snapshot};

    #[test]
    fn filter_table() {
        let cases = [
            ("fits", pod("p").req("1", "1Gi"), vec![], Code::Success, vec![]),
            ("no requests always fits", pod("p"), vec![pod("e").node("n").req("4", "32Gi")], Code::Success, vec![]),
            ("insufficient cpu", pod("p").req("2", ""), vec![pod("e").node("n").req("3", "")], Code::Unschedulable, vec!["Insufficient cpu"]),
            ("more than allocatable", pod("p").req("5", ""), vec![], Code::UnschedulableAndUnresolvable, vec!["Insufficient cpu"]),
            ("extended unknown", pod("p").request("example.com/gpu", "1"), vec![], Code::UnschedulableAndUnresolvable, vec!["Insufficient example.com/gpu"]),
            ("terminated pods free resources", pod("p").req("2", ""), vec![pod("e").node("n").req("3", "").phase("Succeeded")], Code::Success, vec![]),
            ("terminating pods hold resources", pod("p").req("2", ""), vec![pod("e").node("n").req("3", "").terminating()], Code::Unschedulable, vec!["Insufficient cpu"]),
        ];
        for (name, p, existing, code, reasons) in cases {
            let snap = snapshot(&[node("n")], &existing);
            let s = NodeResourcesFit::default().filter(&CycleState::new(), &p.info(), &snap.nodes[0]);
            assert_eq!(s.code, code, "{name}: {s}");
            assert_eq!(s.reasons.as_slice(), reasons.as_slice(), "{name}");
        }
    }

    #[test]
    fn too_many_pods() {
        let snap = snapshot(&[node("n").alloc("4", "32Gi", 1)], &[pod("e").node("n")]);
        let s = NodeResourcesFit::default().filter(&CycleState::new(), &pod("p").info(), &snap.nodes[0]);
        assert_eq!(s.reasons.as_slice(), ["Too many pods"]);
    }

    #[test]
    fn ignored_resource_groups() {
        let pl = NodeResourcesFit::new(Args { ignored_resource_groups: vec!["example.com".into()], ..Default::default() }).expect("valid");
        let snap = snapshot(&[node("n")], &[]);
        assert!(pl.filter(&CycleState::new(), &pod("p").request("example.com/gpu", "1").info(), &snap.nodes[0]).is_success());
    }

    #[test]
    fn least_allocated_score() {
        // Upstream: "no resources requested, pods scheduled with resources".
        let nodes = [node("n1").alloc("10000", "20000", 32), node("n2").alloc("10000", "20000", 32)];
        let pods = [
            pod("e1").node("n1").req("3000", "0"),
            pod("e2").node("n1").req("3000", "0"),
            pod("e3").node("n2").req("3000", "0"),
            pod("e4").node("n2").req("3000", "5000"),
        ];
        let snap = snapshot(&nodes, &pods);
        let p = pod("p").req("0", "0").info();
        let pl = NodeResourcesFit::default();
        let st = CycleState::new();
        assert_eq!(pl.score(&st, &p, &snap.nodes[0]), Ok(70));
        assert_eq!(pl.score(&st, &p, &snap.nodes[1]), Ok(57));
    }

    #[test]
    fn bad_args_name_the_field() {
        let e = NodeResourcesFit::new(Args {
            scoring_strategy: Some(ScoringStrategy { kind: "Fancy".into(), ..Default::default() }),
            ..Default::default()
        })
        .expect_err("invalid");
        assert!(e.starts_with("scoringStrategy.type"), "{e}");
        let e = NodeResourcesFit::new(Args {
            scoring_strategy: Some(ScoringStrategy { resources: vec![ResourceSpec { name: "cpu".into(), weight: 0 }], ..Default::default() }),
            ..Default::default()
        })
        .expect_err("invalid");
        assert!(e.starts_with("scoringStrategy.resources[0].weight"), "{e}");
    }

    #[test]
    fn ratio_shape() {
        let shape = vec![(0, 0), (100, 100)];
        assert_eq!(ratio_fn(&shape, 50), 50);
        let shape = vec![(0, 100), (100, 0)];
        assert_eq!(ratio_fn(&shape, 30), 70);
    }
}
