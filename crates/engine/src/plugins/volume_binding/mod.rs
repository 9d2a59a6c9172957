//! VolumeBinding: a pod's PersistentVolumeClaims must be bound, bindable or
//! provisionable on the node (upstream `volumebinding`, with its binder).
//! Cut by extension point, as upstream's folder is:
//!
//! - `filtering`: PreFilter sorts the pod's claims (bound, delayed,
//!   immediate); Filter finds, per node, the PVs to bind or the classes that
//!   provision there;
//! - `scoring`: PreScore and Score (StorageCapacityScoring) prefer nodes
//!   whose volumes fit tightly, through the args' shape;
//! - `binding`: Reserve records the node's decisions as a reservation that
//!   the framework's assume step applies with the pod (and forgetting the pod
//!   reverts); PreBind turns them into API work for the daemon;
//! - `common`: the cycle state they share.

mod binding;
mod common;
mod filtering;
mod scoring;
#[cfg(test)]
pub(crate) mod tests_support;

use std::time::Duration;

use serde::Deserialize;

use super::node_resources_fit::ShapePoint;
use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, MAX_NODE_SCORE, NodeScore, Plugin, PreBindPlugin, PreFilterNodes, PreFilterPlugin, PreScorePlugin, ReservePlugin, ScorePlugin, Status};
use berth_model::{NodeInfo, PodInfo};

pub use binding::reserved;

/// Plugin name.
pub const NAME: &str = "VolumeBinding";
/// A delayed claim found neither a PV nor provisioning on the node.
pub const REASON_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// A bound PV's node affinity excludes the node.
pub const REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// CSIStorageCapacity shows too little space for a volume to provision.
pub const REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// A bound claim's PV does not exist.
pub const REASON_PV_NOT_EXIST: &str = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// Immediate claims must be bound before the pod is scheduled.
pub const REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// Upstream's default bind timeout.
pub const DEFAULT_BIND_TIMEOUT_SECONDS: i64 = 600;

/// VolumeBindingArgs.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// How long PreBind waits for the PV controller (600 when unset).
    #[serde(default)]
    pub bind_timeout_seconds: Option<i64>,
    /// Score shape over volume utilization (default (0,10),(100,0): tight fits win).
    #[serde(default)]
    pub shape: Option<Vec<ShapePoint>>,
    /// apiVersion/kind are accepted and ignored.
    #[serde(default)]
    pub api_version: Option<String>,
    /// See `api_version`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// The VolumeBinding plugin.
#[derive(Debug)]
pub struct VolumeBinding {
    /// Shape points (utilization, score 0..=100).
    shape: Vec<(i64, i64)>,
    bind_timeout: Duration,
}

impl VolumeBinding {
    /// Validates the args (upstream `ValidateVolumeBindingArgs`).
    pub fn new(args: Args) -> Result<Self, String> {
        let t = args.bind_timeout_seconds.unwrap_or(DEFAULT_BIND_TIMEOUT_SECONDS);
        if t < 0 {
            return Err(format!("bindTimeoutSeconds: invalid BindTimeoutSeconds, should not be a negative value, got {t}"));
        }
        let pts = args.shape.unwrap_or_else(|| vec![ShapePoint { utilization: 0, score: 10 }, ShapePoint { utilization: 100, score: 0 }]);
        if pts.is_empty() {
            return Err("shape: at least one point must be specified".into());
        }
        for (i, p) in pts.iter().enumerate() {
            if !(0..=100).contains(&p.utilization) {
                return Err(format!("shape[{i}].utilization: must be in the range 0-100, got {}", p.utilization));
            }
            if i > 0 && p.utilization <= pts[i - 1].utilization {
                return Err(format!("shape[{i}].utilization: values must be sorted in increasing order"));
            }
            if !(0..=10).contains(&p.score) {
                return Err(format!("shape[{i}].score: must be in the range 0-10, got {}", p.score));
            }
        }
        Ok(VolumeBinding { shape: pts.iter().map(|p| (p.utilization, p.score * (MAX_NODE_SCORE / 10))).collect(), bind_timeout: Duration::from_secs(t.unsigned_abs()) })
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> Events {
        Events::STORAGE_CLASS
            .or(Events::PVC)
            .or(Events::PV)
            .or(Events::NODE_ADD)
            .or(Events::NODE_LABEL)
            .or(Events::NODE_TAINT)
            .or(Events::CSI_NODE)
            .or(Events::CSI_DRIVER)
            .or(Events::CSI_STORAGE_CAPACITY)
    }
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        filtering::pre_filter(state, pod, snap)
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        filtering::filter(state, node)
    }
}

impl PreScorePlugin for VolumeBinding {
    fn pre_score(&self, state: &mut CycleState, _pod: &PodInfo, _nodes: &[usize], _snap: &Snapshot) -> Status {
        scoring::pre_score(state)
    }
}

impl ScorePlugin for VolumeBinding {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(scoring::score(self, state, node.name()))
    }

    fn score_nodes(&self, state: &CycleState, _pod: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
        scoring::score_nodes(self, state, snap, scores)
    }
}

impl ReservePlugin for VolumeBinding {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        binding::reserve(state, pod, node)
    }

    fn unreserve(&self, state: &mut CycleState, _pod: &PodInfo, _node: &str) {
        binding::unreserve(state)
    }
}

impl PreBindPlugin for VolumeBinding {
    fn pre_bind(&self, state: &mut CycleState, _pod: &PodInfo, node: &str) -> Status {
        binding::pre_bind(self, state, node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_are_validated() {
        let bad = [
            (Args { bind_timeout_seconds: Some(-1), ..Default::default() }, "bindTimeoutSeconds"),
            (Args { shape: Some(vec![ShapePoint { utilization: 50, score: 1 }, ShapePoint { utilization: 10, score: 2 }]), ..Default::default() }, "shape[1].utilization"),
            (Args { shape: Some(vec![ShapePoint { utilization: 0, score: 11 }]), ..Default::default() }, "shape[0].score"),
        ];
        for (a, field) in bad {
            let e = VolumeBinding::new(a).expect_err("invalid");
            assert!(e.contains(field), "{e}");
        }
        assert!(VolumeBinding::new(Args { shape: Some(vec![]), ..Default::default() }).is_err());
    }
}
