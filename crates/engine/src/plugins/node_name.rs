//! NodeName: a pod that names a node (spec.nodeName) fits only there.

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, Plugin, Status};
use berth_model::{NodeInfo, PodInfo};

/// Plugin name.
pub const NAME: &str = "NodeName";
/// Reason given for another node.
pub const REASON: &str = "node(s) didn't match the requested node name";

/// Matches spec.nodeName.
#[derive(Debug, Default)]
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }

    fn reusable(&self) -> bool {
        // Node-local: see Plugin::reusable.
        true
    }

    fn events(&self) -> Events {
        Events::NODE_ADD
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match &pod.node_name {
            Some(n) if n != node.name() => Status::unresolvable(REASON),
            _ => Status::success(),
        }
    }

    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        // A pod that names no node passes everywhere.
        if pod.node_name.is_none() {
            return;
        }
        crate::framework::filter_each(self, state, pod, snap, nodes, rejected, |_, _| true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};
    use std::sync::Arc;

    #[test]
    fn table() {
        let ni = NodeInfo::new(Arc::new(node("n1").spec()));
        assert!(NodeName.filter(&CycleState::new(), &pod("p").info(), &ni).is_success());
        assert!(NodeName.filter(&CycleState::new(), &pod("p").node("n1").info(), &ni).is_success());
        assert_eq!(NodeName.filter(&CycleState::new(), &pod("p").node("n2").info(), &ni).message(), REASON);
    }
}
