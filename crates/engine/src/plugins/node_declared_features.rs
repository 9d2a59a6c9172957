//! NodeDeclaredFeatures (a default plugin since 1.37, where its feature gate
//! is GA and locked on): a pod that needs a node feature only runs on nodes
//! whose `status.declaredFeatures` name it.
//!
//! What a pod needs is inferred from its spec as upstream's
//! `k8s.io/component-helpers/nodedeclaredfeatures` registry infers it for
//! scheduling (`model::pod::required_node_features`); features the registry
//! only infers for updates (in-place resize) never reject a new pod.

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, Plugin, Status};
use berth_model::{NodeInfo, PodInfo};

/// Plugin name.
pub const NAME: &str = "NodeDeclaredFeatures";
/// Reason given when a node lacks a feature the pod needs.
pub const REASON: &str = "node(s) didn't match Pod's required features";

/// Rejects nodes that do not declare every feature the pod needs.
#[derive(Debug, Default)]
pub struct NodeDeclaredFeatures;

impl Plugin for NodeDeclaredFeatures {
    fn name(&self) -> &'static str {
        NAME
    }

    fn reusable(&self) -> bool {
        // Node-local: the node's declared features against the pod's needs.
        true
    }

    fn events(&self) -> Events {
        // upstream: Node Add | UpdateNodeDeclaredFeature, and updates of the pod
        // itself. berth's node events have no bit for a change of declared
        // features alone: such a pod is retried by the periodic flush.
        Events::NODE_ADD.or(Events::POD_SELF)
    }
}

impl FilterPlugin for NodeDeclaredFeatures {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod.required_features.iter().all(|f| node.node.declared_features.iter().any(|d| d == f)) {
            Status::success()
        } else {
            Status::unresolvable(REASON)
        }
    }

    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        // A pod that needs no feature passes everywhere.
        if pod.required_features.is_empty() {
            return;
        }
        crate::framework::filter_each(self, state, pod, snap, nodes, rejected, |_, _| true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use berth_model::{NodeSpec, PodInfo};
    use std::sync::Arc;

    fn node(features: &[&str]) -> NodeInfo {
        NodeInfo::new(Arc::new(NodeSpec { name: "n".into(), declared_features: features.iter().map(|s| (*s).to_string()).collect(), ..Default::default() }))
    }

    #[test]
    fn table() {
        let plain = PodInfo::default();
        let needs = PodInfo { required_features: vec!["RestartAllContainersOnContainerExits"], ..Default::default() };
        let cases = [
            ("no requirement fits a node without features", &plain, node(&[]), true),
            ("requirement declared", &needs, node(&["GuaranteedQoSPodCPUResize", "RestartAllContainersOnContainerExits"]), true),
            ("requirement not declared", &needs, node(&["GuaranteedQoSPodCPUResize"]), false),
            ("node without features", &needs, node(&[]), false),
        ];
        for (name, p, n, ok) in cases {
            let s = NodeDeclaredFeatures.filter(&CycleState::new(), p, &n);
            assert_eq!(s.is_success(), ok, "{name}: {s}");
            if !ok {
                assert_eq!(s.code, Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(s.message(), REASON);
            }
        }
    }
}
