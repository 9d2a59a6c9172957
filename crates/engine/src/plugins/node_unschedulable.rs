//! NodeUnschedulable: nodes with spec.unschedulable take only pods that
//! tolerate the `node.kubernetes.io/unschedulable` NoSchedule taint.

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, Plugin, Status};
use berth_model::taints::{tolerated, Effect, Taint};
use berth_model::{NodeInfo, PodInfo};

/// Plugin name.
pub const NAME: &str = "NodeUnschedulable";
/// Reason given for an unschedulable node.
pub const REASON: &str = "node(s) were unschedulable";

/// Rejects cordoned nodes.
#[derive(Debug, Default)]
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }

    fn reusable(&self) -> bool {
        // Node-local: see Plugin::reusable.
        true
    }

    fn events(&self) -> Events {
        Events::NODE_ADD.or(Events::NODE_UNSCHEDULABLE).or(Events::POD_SELF)
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::success();
        }
        let taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            value: String::new(),
            effect: Effect::NoSchedule,
            effect_name: "NoSchedule".into(),
        };
        if tolerated(&pod.tolerations, &taint) {
            return Status::success();
        }
        Status::unresolvable(REASON)
    }

    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        // Only cordoned nodes need a look.
        crate::framework::filter_each(self, state, pod, snap, nodes, rejected, |_, ni| ni.unschedulable);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::NodeInfo;
    use crate::testing::{node, pod};
    use std::sync::Arc;

    #[test]
    fn table() {
        let cases = [
            ("schedulable node", pod("p"), node("n"), true),
            ("cordoned node", pod("p"), node("n").unschedulable(), false),
            ("tolerating pod", pod("p").toleration("node.kubernetes.io/unschedulable", None, "NoSchedule"), node("n").unschedulable(), true),
        ];
        for (name, p, n, ok) in cases {
            let ni = NodeInfo::new(Arc::new(n.spec()));
            let s = NodeUnschedulable.filter(&CycleState::new(), &p.info(), &ni);
            assert_eq!(s.is_success(), ok, "{name}: {s}");
        }
    }
}
