//! NodeResourcesBalancedAllocation: prefers nodes whose resource fractions
//! (requested/allocatable, after placing the pod) are close to each other.

use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, NodeScore, Plugin, Points, Status, MAX_NODE_SCORE};
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

/// One minus the standard deviation of the fractions, times 100.
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

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
    fn reusable(&self) -> bool {
        // Node-local: see Plugin::reusable.
        true
    }

    fn points(&self) -> Points {
        Points::PRE_SCORE.or(Points::SCORE)
    }
    fn events(&self) -> Events {
        Events::NODE_ADD.or(Events::NODE_ALLOCATABLE).or(Events::POD_DELETE)
    }
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _: &[usize], _: &Snapshot) -> Status {
        let requests: Vec<i64> = self.resources.iter().map(|r| pod_request(pod, &r.name, true)).collect();
        // Best-effort pods would all pile onto one node; upstream skips them.
        if requests.iter().all(|r| *r == 0) {
            return Status::skip();
        }
        state.insert(PreScoreState { requests });
        Status::success()
    }
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
                let c = fraction(ni.allocatable.milli_cpu, ni.requested.milli_cpu + pc);
                let m = fraction(ni.allocatable.memory, ni.requested.memory + pm);
                s.score = match (c, m) {
                    (Some(c), Some(m)) => balanced_score(&[c, m]),
                    (Some(x), None) | (None, Some(x)) => balanced_score(&[x]),
                    (None, None) => balanced_score(&[]),
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

impl BalancedAllocation {
    fn requests(&self, state: &CycleState, pod: &PodInfo) -> Vec<i64> {
        match state.get::<PreScoreState>() {
            Some(s) => s.requests.clone(),
            None => self.resources.iter().map(|r| pod_request(pod, &r.name, true)).collect(),
        }
    }

    fn score_with(&self, reqs: &[i64], node: &NodeInfo) -> i64 {
        // A small fixed buffer: no allocation per node for the usual few resources.
        let mut buf = [0f64; 8];
        let mut spill = Vec::new();
        let mut len = 0;
        for ((r, &k), &req) in self.resources.iter().zip(&self.kinds).zip(reqs) {
            if req == 0 && k == Kind::Scalar {
                continue;
            }
            let (alloc, requested) = allocatable_and_requested_k(node, k, &r.name, req, true);
            if alloc == 0 {
                continue;
            }
            let f = (requested as f64 / alloc as f64).min(1.0);
            if len < buf.len() {
                buf[len] = f;
            } else {
                if spill.is_empty() {
                    spill.extend_from_slice(&buf);
                }
                spill.push(f);
            }
            len += 1;
        }
        if spill.is_empty() { balanced_score(&buf[..len]) } else { balanced_score(&spill) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod, snapshot};

    #[test]
    fn scores() {
        // cpu 3000/10000 = 0.3, memory 5000/20000 = 0.25: std 0.025 → 97.
        let snap = snapshot(&[node("n").alloc("10000", "20000", 32)], &[]);
        let p = pod("p").req("3000", "5000").info();
        let mut st = CycleState::new();
        let pl = BalancedAllocation::default();
        assert!(pl.pre_score(&mut st, &p, &[0], &snap).is_success());
        assert_eq!(pl.score(&st, &p, &snap.nodes[0]), Ok(97));
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
