//! VolumeRestrictions (upstream `volumerestrictions`): a ReadWriteOncePod
//! claim already used by another pod anywhere in the cluster makes the pod
//! unschedulable, and in-tree disks (GCE PD, AWS EBS, RBD, iSCSI) may not be
//! mounted read-write by two pods on one node.

use std::sync::Arc;

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, Plugin, PreFilterNodes, PreFilterPlugin, Status};
use berth_model::volumes::VolumeSource;
use berth_model::{NodeInfo, PodInfo};

/// Plugin name.
pub const NAME: &str = "VolumeRestrictions";
/// In-tree disk conflict on the node.
pub const REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// A ReadWriteOncePod claim is in use.
pub const REASON_RWOP_CONFLICT: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

#[derive(Clone, Debug, Default)]
struct State {
    /// The pod's ReadWriteOncePod claim names (its namespace).
    rwop_claims: Vec<String>,
    /// How many pods (besides this one) use them.
    conflicts: i64,
}

/// The VolumeRestrictions plugin.
#[derive(Debug, Default)]
pub struct VolumeRestrictions;

fn uses(pod: &PodInfo, namespace: &str, claims: &[String]) -> i64 {
    if pod.namespace != namespace {
        return 0;
    }
    pod.volumes
        .iter()
        .filter(|v| matches!(&v.source, VolumeSource::Claim { claim } if claims.contains(claim)))
        .count() as i64
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> Events {
        Events::POD_DELETE.or(Events::NODE_ADD).or(Events::PVC)
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        if pod.volumes.is_empty() {
            return (Status::skip(), None);
        }
        let needs_disk_check = pod.volumes.iter().any(|v| v.is_disk());
        let mut rwop_claims = Vec::new();
        for v in pod.volumes.iter() {
            let VolumeSource::Claim { claim } = &v.source else { continue };
            let Some(c) = snap.storage.claim(&pod.namespace, claim) else {
                return (Status::unresolvable(format!("persistentvolumeclaim {claim:?} not found")), None);
            };
            if c.access_modes.rwop() && !rwop_claims.contains(claim) {
                rwop_claims.push(claim.clone());
            }
        }
        // Pods using the claims, over every node (upstream counts each claim once).
        let mut conflicts = 0;
        if !rwop_claims.is_empty() {
            for c in &rwop_claims {
                let one = [c.clone()];
                let used = snap.nodes.iter().flat_map(|n| n.pods.iter()).any(|p| p.uid != pod.uid && uses(p, &pod.namespace, &one) > 0);
                if used {
                    conflicts += 1;
                }
            }
        }
        if !needs_disk_check && conflicts == 0 {
            return (Status::skip(), None);
        }
        state.insert(State { rwop_claims, conflicts });
        (Status::success(), None)
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &Arc<PodInfo>, _node: &NodeInfo, _snap: &Snapshot) -> Status {
        if let Some(s) = state.get_mut::<State>() {
            s.conflicts += uses(added, &pod.namespace, &s.rwop_claims);
        }
        Status::success()
    }

    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, removed: &Arc<PodInfo>, _node: &NodeInfo, _snap: &Snapshot) -> Status {
        if let Some(s) = state.get_mut::<State>() {
            s.conflicts -= uses(removed, &pod.namespace, &s.rwop_claims);
        }
        Status::success()
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for v in pod.volumes.iter().filter(|v| v.is_disk()) {
            if node.pods.iter().any(|p| p.volumes.iter().any(|e| v.conflicts_with(e))) {
                return Status::unschedulable(REASON_DISK_CONFLICT);
            }
        }
        if state.get::<State>().is_some_and(|s| s.conflicts > 0) {
            return Status::unschedulable(REASON_RWOP_CONFLICT);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::volume_binding::tests_support::{claim, pod_with_claims, snapshot_with};
    use k8s_openapi::api::core::v1 as core;

    fn disk_pod(name: &str, node: Option<&str>, vol: core::Volume) -> Arc<PodInfo> {
        let mut b = crate::testing::pod(name);
        if let Some(n) = node {
            b = b.node(n);
        }
        if let Some(s) = b.pod.spec.as_mut() {
            s.volumes = Some(vec![vol]);
        }
        b.info()
    }

    fn gce(pd: &str, ro: bool) -> core::Volume {
        core::Volume { name: "d".into(), gce_persistent_disk: Some(core::GCEPersistentDiskVolumeSource { pd_name: pd.into(), read_only: Some(ro), ..Default::default() }), ..Default::default() }
    }

    #[test]
    fn disk_conflicts_on_the_node() {
        let mut snap = snapshot_with(&[("n1", vec![]), ("n2", vec![])], &[], &[], &[]);
        snap.add_pod(disk_pod("old", Some("n1"), gce("disk", false)));
        let rows = [(gce("disk", false), false), (gce("disk", true), false), (gce("other", false), true)];
        for (i, (vol, fits_n1)) in rows.into_iter().enumerate() {
            let p = disk_pod("p", None, vol);
            let mut st = CycleState::new();
            assert!(VolumeRestrictions.pre_filter(&mut st, &p, &snap).0.is_success());
            let s1 = VolumeRestrictions.filter(&st, &p, &snap.nodes[0]);
            assert_eq!(s1.is_success(), fits_n1, "row {i}: {s1}");
            if !fits_n1 {
                assert_eq!((s1.code, s1.message()), (Code::Unschedulable, REASON_DISK_CONFLICT.to_string()));
            }
            assert!(VolumeRestrictions.filter(&st, &p, &snap.nodes[1]).is_success(), "row {i}");
        }
    }

    #[test]
    fn read_write_once_pod_claims() {
        let mut snap = snapshot_with(&[("n1", vec![]), ("n2", vec![])], &[claim("rwop", "1Gi", None).modes(&["ReadWriteOncePod"]), claim("rwo", "1Gi", None)], &[], &[]);
        let p = pod_with_claims("p", &["rwop"]);
        // Unused: nothing to check.
        assert!(VolumeRestrictions.pre_filter(&mut CycleState::new(), &p, &snap).0.is_skip());
        let mut user = (*pod_with_claims("user", &["rwop"])).clone();
        user.node_name = Some("n1".into());
        let user = Arc::new(user);
        snap.add_pod(user.clone());
        let mut st = CycleState::new();
        assert!(VolumeRestrictions.pre_filter(&mut st, &p, &snap).0.is_success());
        for n in &snap.nodes {
            let s = VolumeRestrictions.filter(&st, &p, n);
            assert_eq!((s.code, s.message()), (Code::Unschedulable, REASON_RWOP_CONFLICT.to_string()));
        }
        // Preemption removing the user frees the claim.
        assert!(VolumeRestrictions.remove_pod(&mut st, &p, &user, &snap.nodes[0], &snap).is_success());
        assert!(VolumeRestrictions.filter(&st, &p, &snap.nodes[1]).is_success());
        // ReadWriteOnce claims are not restricted; missing claims are reported.
        assert!(VolumeRestrictions.pre_filter(&mut CycleState::new(), &pod_with_claims("q", &["rwo"]), &snap).0.is_skip());
        let (s, _) = VolumeRestrictions.pre_filter(&mut CycleState::new(), &pod_with_claims("q", &["gone"]), &snap);
        assert_eq!((s.code, s.message()), (Code::UnschedulableAndUnresolvable, "persistentvolumeclaim \"gone\" not found".to_string()));
    }
}
