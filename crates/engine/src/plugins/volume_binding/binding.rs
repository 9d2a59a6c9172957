//! VolumeBinding's Reserve, Unreserve and PreBind (upstream
//! `volumebinding`'s Reserve/PreBind with its binder's `AssumePodVolumes`
//! and `BindPodVolumes`).
//!
//! - Reserve records the node's decisions ([`VolumeDecisions`]) in the cycle
//!   state as a [`Reservation`]; the framework's assume step applies them to
//!   the snapshot's storage view with the pod, so the next pod does not take
//!   the same PV, and forgetting the pod reverts them. Unreserve clears them.
//! - PreBind turns them into the API writes upstream's binder makes, as a
//!   [`PreBindWork`]: PV claimRefs and the claims' selected-node annotation,
//!   then a wait, bounded by bindTimeoutSeconds, until the PV controller has
//!   bound every claim. The engine makes no API call.

use super::common::State;
use super::{VolumeBinding, NAME};
use crate::cache::storage::{ClaimRef, StaticBinding, VolumeDecisions};
use crate::cache::Snapshot;
use crate::framework::{ApiWrite, CycleState, PreBindWork, Reservation, Status, WaitFor};
use berth_model::PodInfo;

/// Volume decisions count in the snapshot's storage view: the PVs as bound
/// to their claims, the claims as provisioned on the node.
impl Reservation for VolumeDecisions {
    fn assume(&self, snap: &mut Snapshot, _pod_uid: &str) {
        snap.storage.assume(self);
    }

    fn forget(&self, snap: &mut Snapshot, pod_uid: &str) {
        snap.storage.forget(pod_uid);
    }
}

/// The volume decisions Reserve recorded for the pod (None when every claim
/// was bound already, or after Unreserve).
pub fn reserved(state: &CycleState) -> Option<&VolumeDecisions> {
    state.reservations().get::<VolumeDecisions>(NAME)
}

pub(super) fn reserve(state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
    let decisions = match state.get::<State>() {
        None => None,
        Some(s) if s.all_bound_at_prefilter => None,
        Some(s) => {
            let m = s.by_node.lock().unwrap_or_else(|e| e.into_inner());
            m.get(node).map(|v| VolumeDecisions {
                pod_uid: pod.uid.clone(),
                node: node.to_string(),
                bindings: v
                    .bindings
                    .iter()
                    .map(|(c, pv)| StaticBinding { pv: pv.name.clone(), claim: ClaimRef { namespace: c.namespace.clone(), name: c.name.clone(), uid: c.uid.clone() } })
                    .collect(),
                provisions: v.provisions.iter().map(|(c, _)| (c.namespace.clone(), c.name.clone())).collect(),
            })
        }
    };
    match decisions {
        Some(d) => state.reservations_mut().record(NAME, d),
        None => state.reservations_mut().clear(NAME),
    }
    Status::success()
}

pub(super) fn unreserve(state: &mut CycleState) {
    state.reservations_mut().clear(NAME);
}

pub(super) fn pre_bind(pl: &VolumeBinding, state: &mut CycleState, node: &str) -> Status {
    let Some(s) = state.get::<State>() else { return Status::success() };
    if s.all_bound_at_prefilter {
        return Status::success();
    }
    let Some(d) = reserved(state).filter(|d| d.node == node) else {
        return Status::error(format!("no pod volumes found for node {node:?}"));
    };
    let writes = d
        .bindings
        .iter()
        .map(|b| ApiWrite::BindVolume(b.clone()))
        .chain(d.provisions.iter().map(|(namespace, name)| ApiWrite::SelectNode { namespace: namespace.clone(), name: name.clone() }))
        .collect();
    let wait_for = d
        .bindings
        .iter()
        .map(|b| (&b.claim.namespace, &b.claim.name))
        .chain(d.provisions.iter().map(|(ns, n)| (ns, n)))
        .map(|(namespace, name)| WaitFor::ClaimBound { namespace: namespace.clone(), name: name.clone() })
        .collect();
    let work = PreBindWork { plugin: NAME, writes, wait_for, timeout: pl.bind_timeout };
    state.add_pre_bind_work(work);
    Status::success()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests_support::*;
    use super::*;
    use crate::framework::{assume, AssumeView, PreBindPlugin, ReservePlugin};

    #[test]
    fn reserve_records_pre_bind_describes_and_assume_takes_the_pv() {
        let mut snap = snapshot_with(
            &[("n1", vec![("zone", "a")]), ("n2", vec![("zone", "b")])],
            &[claim("small", "2Gi", Some("wait")), claim("dyn", "1Gi", Some("dyn"))],
            &[pv("pv-a-5", "5Gi", Some("wait")).affinity("zone", "a"), pv("pv-a-3", "3Gi", Some("wait")).affinity("zone", "a")],
            &[("wait", true, crate::cache::storage::NO_PROVISIONER), ("dyn", true, "csi.example.com")],
        );
        // The smallest PV that fits is chosen, and Reserve records it.
        let p = pod_with_claims("p", &["small"]);
        let (_, mut st, _) = run(&snap, &p);
        let pl = plugin();
        assert!(pl.reserve(&mut st, &p, "n1").is_success());
        let d = reserved(&st).cloned().expect("decisions");
        assert_eq!(d.bindings.iter().map(|b| b.pv.as_str()).collect::<Vec<_>>(), vec!["pv-a-3"]);
        // PreBind describes the API work, naming the plugin.
        assert!(pl.pre_bind(&mut st, &p, "n1").is_success());
        let w = st.pre_bind_work().first().cloned().expect("work");
        assert_eq!(w.plugin, NAME);
        assert_eq!(w.writes, vec![ApiWrite::BindVolume(d.bindings[0].clone())]);
        assert_eq!((w.wait_for, w.timeout), (vec![WaitFor::ClaimBound { namespace: "default".into(), name: "small".into() }], Duration::from_secs(600)));
        // The framework's assume step takes the PV: the next pod's claim of
        // the same size gets the 5Gi one.
        assume(&mut snap, &st, &p, "n1");
        let mut other = claim("small2", "2Gi", Some("wait")).0;
        other.metadata.uid = Some("u2".into());
        snap.storage.upsert_claim(&other);
        let p2 = pod_with_claims("p2", &["small2"]);
        let (_, mut st2, res) = run(&snap, &p2);
        assert_eq!(feasible(&res), vec!["n1"]);
        pl.reserve(&mut st2, &p2, "n1");
        assert_eq!(reserved(&st2).map(|d| d.bindings[0].pv.clone()), Some("pv-a-5".to_string()));
        // Forgetting the first pod frees its PV again.
        snap.forget_pod(&p);
        assert_eq!((snap.storage.assumed_count(), snap.reserved_pods()), (0, 0));
        let (_, mut st3, _) = run(&snap, &p2);
        pl.reserve(&mut st3, &p2, "n1");
        assert_eq!(reserved(&st3).map(|d| d.bindings[0].pv.clone()), Some("pv-a-3".to_string()));
        // Dynamic provisioning is recorded as a selected node, and written as its annotation.
        let p4 = pod_with_claims("p4", &["dyn"]);
        let (_, mut st4, _) = run(&snap, &p4);
        pl.reserve(&mut st4, &p4, "n2");
        assert_eq!(reserved(&st4).map(|d| d.provisions.clone()), Some(vec![("default".to_string(), "dyn".to_string())]));
        assert!(pl.pre_bind(&mut st4, &p4, "n2").is_success());
        let w = &st4.pre_bind_work()[0];
        assert!(w.provisions("default", "dyn") && w.volume_bindings().next().is_none());
        pl.unreserve(&mut st4, &p4, "n2");
        assert!(reserved(&st4).is_none() && st4.reservations().is_empty());
        // Reserve on a node Filter did not see: nothing to assume, and PreBind refuses.
        let (_, mut st5, _) = run(&snap, &p);
        pl.reserve(&mut st5, &p, "elsewhere");
        assert!(reserved(&st5).is_none());
        assert_eq!(pl.pre_bind(&mut st5, &p, "elsewhere").message(), "no pod volumes found for node \"elsewhere\"");
    }
}
