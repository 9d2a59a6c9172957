//! NodeResourcesBalancedAllocation: prefers nodes whose balance of resource
//! fractions (requested/allocatable) the pod improves.
//!
//! Since v1.37 upstream scores the change the pod makes, not the balance after
//! placing it (balanced_allocation.go, balancedResourceScorer): with
//! `with` and `without` the balance (one minus the standard deviation of the
//! fractions, times 100, truncated) with and without the pod's requests,
//! the score is `50 + (50 + with - without) / 2`, in integers: about 75 when
//! the pod changes little, towards 100 when it improves the balance, towards
//! 50 when it worsens it.

use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, MAX_NODE_SCORE, NodeScore, Plugin, PreScorePlugin, ScorePlugin, Status};
use berth_model::{NodeInfo, PodInfo};

use super::resource_allocation::{allocatable_and_requested_k, default_resources, kind, pod_request, validate_resources, Kind, ResourceSpec};

/// Plugin name.
pub const NAME: &str = "NodeResourcesBalancedAllocation";

/// NodeResourcesBalancedAllocationArgs.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// Resources considered (cpu and memory by default).
    #[serde(default = "default_resources")]
    pub resources: Vec<ResourceSpec>,
    /// Accepted and ignored.
    #[serde(default)]
    pub api_version: Option<String>,
    /// Accepted and ignored.
    #[serde(default)]
    pub kind: Option<String>,
}

impl Default for Args {
    fn default() -> Self {
        Args { resources: default_resources(), api_version: None, kind: None }
    }
}

/// Balanced resource allocation.
#[derive(Debug)]
pub struct BalancedAllocation {
    resources: Vec<ResourceSpec>,
    kinds: Vec<Kind>,
}

impl Default for BalancedAllocation {
    fn default() -> Self {
        BalancedAllocation { resources: default_resources(), kinds: vec![Kind::Cpu, Kind::Memory] }
    }
}

impl BalancedAllocation {
    /// Builds the plugin, validating its args.
    pub fn new(args: Args) -> Result<Self, String> {
        validate_resources(&args.resources, "resources")?;
        let kinds = args.resources.iter().map(|r| kind(&r.name)).collect();
        Ok(BalancedAllocation { resources: args.resources, kinds })
    }
}

#[derive(Clone)]
struct PreScoreState {
    requests: Vec<i64>,
}

/// One minus the standard deviation of the fractions, times 100
/// (upstream's balancedResourceScore).
pub fn balanced_score(fractions: &[f64]) -> i64 {
    let std = match fractions.len() {
        0 | 1 => 0.0,
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        n => {
            let mean = fractions.iter().sum::<f64>() / n as f64;
            (fractions.iter().map(|f| (f - mean) * (f - mean)).sum::<f64>() / n as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// The score from the balance with and without the pod (upstream's
/// balancedResourceScorer): the balance's change brought back into
/// [MAX/2, MAX]. Both balances are in [MAX/2, MAX], so the dividend is never
/// negative and integer division truncates as Go's does.
pub fn balanced_change_score(with_pod: i64, without_pod: i64) -> i64 {
    MAX_NODE_SCORE / 2 + (MAX_NODE_SCORE / 2 + with_pod - without_pod) / 2
}

/// The score of a node from its fractions with and without the pod (a
/// resource the node has none of is left out of both).
fn score_of(with: &[f64], without: &[f64]) -> i64 {
    balanced_change_score(balanced_score(with), balanced_score(without))
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }

    fn reusable(&self) -> bool {
        // Node-local: see Plugin::reusable.
        true
    }

    fn events(&self) -> Events {
        Events::NODE_ADD.or(Events::NODE_ALLOCATABLE).or(Events::POD_DELETE)
    }
}

impl PreScorePlugin for BalancedAllocation {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _: &[usize], _: &Snapshot) -> Status {
        let requests: Vec<i64> = self.resources.iter().map(|r| pod_request(pod, &r.name, true)).collect();
        // Best-effort pods would all pile onto one node; upstream skips them.
        if requests.iter().all(|r| *r == 0) {
            return Status::skip();
        }
        state.insert(PreScoreState { requests });
        Status::success()
    }
}

impl ScorePlugin for BalancedAllocation {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let reqs = self.requests(state, pod);
        Ok(self.score_with(&reqs, node))
    }

    fn score_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
        let reqs = self.requests(state, pod);
        if self.kinds == [Kind::Cpu, Kind::Memory] {
            // The default (cpu and memory): the same arithmetic as
            // `score_with`, without the generic loop.
            let (pc, pm) = (reqs[0], reqs[1]);
            let fraction = |alloc: i64, requested: i64| -> Option<f64> { (alloc != 0).then(|| (requested as f64 / alloc as f64).min(1.0)) };
            for s in scores.iter_mut() {
                let ni = &snap.nodes[s.node];
                let (ac, am) = (ni.allocatable.milli_cpu, ni.allocatable.memory);
                let (rc, rm) = (ni.requested.milli_cpu, ni.requested.memory);
                let with = [fraction(ac, rc + pc), fraction(am, rm + pm)];
                let without = [fraction(ac, rc), fraction(am, rm)];
                let pick = |fs: [Option<f64>; 2]| -> ([f64; 2], usize) {
                    match fs {
                        [Some(c), Some(m)] => ([c, m], 2),
                        [Some(x), None] | [None, Some(x)] => ([x, 0.0], 1),
                        [None, None] => ([0.0; 2], 0),
                    }
                };
                let ((w, wl), (wo, wol)) = (pick(with), pick(without));
                s.score = score_of(&w[..wl], &wo[..wol]);
            }
            return Ok(());
        }
        for s in scores.iter_mut() {
            s.score = self.score_with(&reqs, &snap.nodes[s.node]);
        }
        Ok(())
    }
}

impl BalancedAllocation {
    fn requests(&self, state: &CycleState, pod: &PodInfo) -> Vec<i64> {
        match state.get::<PreScoreState>() {
            Some(s) => s.requests.clone(),
            None => self.resources.iter().map(|r| pod_request(pod, &r.name, true)).collect(),
        }
    }

    fn score_with(&self, reqs: &[i64], node: &NodeInfo) -> i64 {
        // Small fixed buffers: no allocation per node for the usual few resources.
        let (mut with, mut without) = ([0f64; 8], [0f64; 8]);
        let (mut with_spill, mut without_spill) = (Vec::new(), Vec::new());
        let mut len = 0;
        for ((r, &k), &req) in self.resources.iter().zip(&self.kinds).zip(reqs) {
            if req == 0 && k == Kind::Scalar {
                continue;
            }
            let (alloc, requested) = allocatable_and_requested_k(node, k, &r.name, req, true);
            if alloc == 0 {
                continue;
            }
            let allocated = requested - req;
            let (f, g) = ((requested as f64 / alloc as f64).min(1.0), (allocated as f64 / alloc as f64).min(1.0));
            if len < with.len() {
                with[len] = f;
                without[len] = g;
            } else {
                if with_spill.is_empty() {
                    with_spill.extend_from_slice(&with);
                    without_spill.extend_from_slice(&without);
                }
                with_spill.push(f);
                without_spill.push(g);
            }
            len += 1;
        }
        if with_spill.is_empty() { score_of(&with[..len], &without[..len]) } else { score_of(&with_spill, &without_spill) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod, snapshot, NodeBuilder};

    #[test]
    fn scores() {
        // With the pod: cpu 3000/10000 = 0.3, memory 5000/20000 = 0.25: std 0.025 → 97;
        // without: 0, 0 → 100. 50 + (50 + 97 - 100) / 2 = 73.
        let snap = snapshot(&[node("n").alloc("10000m", "20000", 32)], &[]);
        let p = pod("p").req("3000m", "5000").info();
        let mut st = CycleState::new();
        let pl = BalancedAllocation::default();
        assert!(pl.pre_score(&mut st, &p, &[0], &snap).is_success());
        assert_eq!(pl.score(&st, &p, &snap.nodes[0]), Ok(73));
    }

    /// Scores of every node through all three paths: Score after PreScore,
    /// Score without PreScore, and ScoreNodes.
    fn all_paths(pl: &BalancedAllocation, snap: &Snapshot, p: &PodInfo) -> Vec<i64> {
        let idx: Vec<usize> = (0..snap.nodes.len()).collect();
        let mut st = CycleState::new();
        assert!(pl.pre_score(&mut st, p, &idx, snap).is_success());
        let after: Vec<i64> = snap.nodes.iter().map(|n| pl.score(&st, p, n).unwrap()).collect();
        let without: Vec<i64> = snap.nodes.iter().map(|n| pl.score(&CycleState::new(), p, n).unwrap()).collect();
        let mut ns: Vec<NodeScore> = idx.iter().map(|&i| NodeScore { node: i, score: -1 }).collect();
        pl.score_nodes(&st, p, snap, &mut ns).unwrap();
        let nodes: Vec<i64> = ns.iter().map(|s| s.score).collect();
        assert_eq!(after, without, "Score with and without PreScore");
        assert_eq!(after, nodes, "Score and ScoreNodes");
        after
    }

    fn gpu_args() -> Args {
        Args {
            resources: vec![
                ResourceSpec { name: "cpu".into(), weight: 1 },
                ResourceSpec { name: "memory".into(), weight: 1 },
                ResourceSpec { name: "nvidia.com/gpu".into(), weight: 1 },
            ],
            ..Args::default()
        }
    }

    /// upstream v1.37.2 balanced_allocation_test.go, TestNodeResourcesBalancedAllocation
    /// (the cases without DRA): the score of the balance's change.
    #[test]
    fn upstream_table() {
        use berth_model::testing::PodBuilder;
        // Two containers as upstream's st.MakePod().Req(..).Req(..): the sums.
        let both = || pod("p").req("3000m", "5000");
        let cpu3 = |n: &str| pod(&format!("e-{n}")).node(n).req("3000m", "");
        let cpu3mem5 = |n: &str| pod(&format!("e-{n}")).node(n).req("3000m", "5000");
        let none: [PodBuilder; 0] = [];
        // (name, nodes, bound pods, the pod, args, the two nodes' scores)
        type Case = (&'static str, Vec<NodeBuilder>, Vec<PodBuilder>, PodBuilder, Args, [i64; 2]);
        let cases: Vec<Case> = vec![
            (
                "nothing scheduled, resources requested, differently sized nodes",
                vec![node("node1").alloc("4000m", "10000", 32), node("node2").alloc("6000m", "10000", 32)],
                none.to_vec(),
                both(),
                Args::default(),
                [68, 75],
            ),
            (
                "resources requested, pods scheduled with resources",
                vec![node("node1").alloc("10000m", "20000", 32), node("node2").alloc("10000m", "20000", 32)],
                vec![cpu3("node1"), cpu3mem5("node2")],
                both(),
                Args::default(),
                [73, 74],
            ),
            (
                "resources requested, pods scheduled with resources, differently sized nodes",
                vec![node("node1").alloc("10000m", "20000", 32), node("node2").alloc("10000m", "50000", 32)],
                vec![cpu3("node1"), cpu3mem5("node2")],
                both(),
                Args::default(),
                [73, 70],
            ),
            (
                "nodes to reach min/max score",
                vec![node("node1").alloc("3000m", "5000", 32), node("node2").alloc("3000m", "5000", 32)],
                vec![cpu3("node1")],
                pod("p").req("", "5000"),
                Args::default(),
                [100, 50],
            ),
            (
                "requested resources at node capacity",
                vec![node("node1").alloc("6000m", "10000", 32), node("node2").alloc("6000m", "10000", 32)],
                vec![cpu3("node1"), cpu3mem5("node2")],
                pod("p").req("3000m", ""),
                Args::default(),
                [62, 62],
            ),
            (
                "scalar resource is included in the score computation if pod requests the scalar resource",
                vec![
                    node("node1").alloc("3500m", "40000", 32).resource("nvidia.com/gpu", "8"),
                    node("node2").alloc("3500m", "40000", 32).resource("nvidia.com/gpu", "8"),
                ],
                vec![cpu3mem5("node1").request("nvidia.com/gpu", "3"), cpu3mem5("node2")],
                pod("p").req("0", "0").request("nvidia.com/gpu", "1"),
                gpu_args(),
                [75, 76],
            ),
            (
                "scalar resource is not included in the score computation if pod doesn't request the scalar resource",
                vec![node("node1").alloc("3500m", "40000", 32).resource("nvidia.com/gpu", "8"), node("node2").alloc("3500m", "40000", 32)],
                none.to_vec(),
                both(),
                gpu_args(),
                [56, 56],
            ),
        ];
        let cases = cases.into_iter().chain([(
            // What the real kube-scheduler 1.37.2 logged at --v=10 for two
            // KWOK nodes (tests/conformance/cases/node-resources/balanced-scores-the-change):
            // sc-a 100 -> 95: 72; sc-b 65 -> 70: 77 (the balance after alone: 95 and 70).
            "kube-scheduler 1.37.2 live",
            vec![node("sc-a").alloc("4", "16Gi", 110), node("sc-b").alloc("4", "16Gi", 110)],
            vec![pod("on-a").node("sc-a").req("2", "8Gi"), pod("on-b").node("sc-b").req("3", "1Gi")],
            pod("p").req("100m", "2Gi"),
            Args::default(),
            [72, 77],
        )]);
        for (name, nodes, pods, p, args, want) in cases {
            let snap = snapshot(&nodes, &pods);
            let pl = BalancedAllocation::new(args).unwrap();
            assert_eq!(all_paths(&pl, &snap, &p.info()), want.to_vec(), "{name}");
        }
    }

    #[test]
    fn change_score_range() {
        assert_eq!(balanced_change_score(100, 100), 75);
        assert_eq!(balanced_change_score(100, 50), 100);
        assert_eq!(balanced_change_score(50, 100), 50);
        // (50 + 63 - 100) / 2 truncates: 56.
        assert_eq!(balanced_change_score(63, 100), 56);
    }

    #[test]
    fn best_effort_skipped() {
        let snap = snapshot(&[node("n")], &[]);
        assert!(BalancedAllocation::default().pre_score(&mut CycleState::new(), &pod("p").info(), &[0], &snap).is_skip());
    }

    #[test]
    fn std_formula() {
        assert_eq!(balanced_score(&[0.5, 0.5]), 100);
        assert_eq!(balanced_score(&[0.0, 1.0]), 50);
        assert_eq!(balanced_score(&[0.2]), 100);
    }
}
