//! TaintToleration: Filter rejects nodes with an untolerated NoSchedule or
//! NoExecute taint; Score prefers nodes with fewer untolerated PreferNoSchedule taints.

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, NodeScore, Plugin, PreScorePlugin, ScorePlugin, Status};
use berth_model::taints::{first_untolerated_hard, tolerated, Effect, Toleration};
use berth_model::{NodeInfo, PodInfo};

use super::helper::default_normalize;

/// Plugin name.
pub const NAME: &str = "TaintToleration";

/// Filter's reason (upstream `Filter` in
/// pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go,
/// v1.37): it names no taint, so that the failure message's histogram
/// counts every tainted node under one reason (upstream logs the taint at
/// verbosity 4; the node's taints are in its object).
pub const REASON_UNTOLERATED: &str = "node(s) had untolerated taint(s)";

/// Taints and tolerations.
#[derive(Debug, Default)]
pub struct TaintToleration;

#[derive(Clone)]
struct PreScoreState {
    prefer: Vec<Toleration>,
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    fn reusable(&self) -> bool {
        // Node-local: see Plugin::reusable.
        true
    }

    fn events(&self) -> Events {
        Events::NODE_ADD.or(Events::NODE_TAINT).or(Events::POD_SELF)
    }
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.has_taints {
            return Status::success();
        }
        match first_untolerated_hard(&node.node.taints, &pod.tolerations) {
            None => Status::success(),
            Some(_) => Status::unresolvable(REASON_UNTOLERATED),
        }
    }

    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        // Only tainted nodes need a look.
        crate::framework::filter_each(self, state, pod, snap, nodes, rejected, |_, ni| ni.has_taints);
    }
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _: &[usize], _: &Snapshot) -> Status {
        let prefer = pod
            .tolerations
            .iter()
            .filter(|t| t.effect.is_none() || t.effect == Some(Effect::PreferNoSchedule))
            .cloned()
            .collect();
        state.insert(PreScoreState { prefer });
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        if !node.has_taints {
            return Ok(0);
        }
        let computed;
        let prefer = match state.get::<PreScoreState>() {
            Some(s) => &s.prefer,
            None => {
                computed = pod.tolerations.iter().filter(|t| t.effect.is_none() || t.effect == Some(Effect::PreferNoSchedule)).cloned().collect::<Vec<_>>();
                &computed
            }
        };
        Ok(node
            .node
            .taints
            .iter()
            .filter(|t| t.effect == Effect::PreferNoSchedule && !tolerated(prefer, t))
            .count() as i64)
    }

    fn default_normalized(&self) -> Option<bool> {
        Some(true)
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize_score(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore], _: &Snapshot) -> Status {
        default_normalize(scores, true);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{node, pod};
    use std::sync::Arc;

    #[test]
    fn filter_table() {
        let cases = [
            ("no taints", pod("p"), node("n"), Code::Success),
            ("untolerated NoSchedule", pod("p"), node("n").taint("dedicated", "gpu", "NoSchedule"), Code::UnschedulableAndUnresolvable),
            ("tolerated by value", pod("p").toleration("dedicated", Some("gpu"), "NoSchedule"), node("n").taint("dedicated", "gpu", "NoSchedule"), Code::Success),
            ("value mismatch", pod("p").toleration("dedicated", Some("cpu"), "NoSchedule"), node("n").taint("dedicated", "gpu", "NoSchedule"), Code::UnschedulableAndUnresolvable),
            ("effect mismatch", pod("p").toleration("dedicated", None, "NoExecute"), node("n").taint("dedicated", "gpu", "NoSchedule"), Code::UnschedulableAndUnresolvable),
            ("PreferNoSchedule passes", pod("p"), node("n").taint("a", "b", "PreferNoSchedule"), Code::Success),
        ];
        for (name, p, n, code) in cases {
            let s = TaintToleration.filter(&CycleState::new(), &p.info(), &NodeInfo::new(Arc::new(n.spec())));
            assert_eq!(s.code, code, "{name}: {s}");
            if !s.is_success() {
                // Upstream's reason names no taint.
                assert_eq!(s.message(), "node(s) had untolerated taint(s)", "{name}");
            }
        }
    }

    #[test]
    fn score_prefers_fewer_untolerated() {
        let p = pod("p").toleration("a", Some("x"), "PreferNoSchedule").info();
        let nodes = [node("n0"), node("n1").taint("a", "x", "PreferNoSchedule"), node("n2").taint("b", "y", "PreferNoSchedule")];
        let mut st = CycleState::new();
        let snap = crate::testing::snapshot(&nodes, &[]);
        TaintToleration.pre_score(&mut st, &p, &[0, 1, 2], &snap);
        let mut scores: Vec<NodeScore> = (0..3).map(|i| NodeScore { node: i, score: TaintToleration.score(&st, &p, &snap.nodes[i]).unwrap_or(-1) }).collect();
        TaintToleration.normalize_score(&st, &p, &mut scores, &snap);
        assert_eq!(scores.iter().map(|s| s.score).collect::<Vec<_>>(), vec![100, 100, 0]);
    }
}
