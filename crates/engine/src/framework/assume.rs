//! The one assume step: a pod chosen for a node counts on that node at once,
//! together with whatever its Reserve plugins decided for it (PV bindings and
//! provisioning today, device allocations tomorrow), so that the next cycle
//! sees them; forgetting the pod reverts all of it.
//!
//! - A Reserve plugin records its decision in the cycle state
//!   ([`CycleState::reservations_mut`], under its name) as a value
//!   implementing [`Reservation`], which knows how to apply itself to the
//!   [`Snapshot`] and how to revert itself. Its Unreserve clears it.
//! - [`Framework::reserve_and_assume`] runs Reserve and Permit, then
//!   [`assume`]: the pod (node name set, nomination cleared) and every
//!   recorded reservation go into an [`AssumeView`]: the daemon's
//!   [`Cache`](crate::cache::Cache), or a plain [`Snapshot`] (the offline
//!   commands, the group cycle's copies).
//! - The view keeps each pod's reservations by uid
//!   ([`Snapshot::assume_reservations`]), so that a forget by uid alone (a
//!   bind that failed, reported long after the cycle state is gone) reverts
//!   them; [`Framework::unassume`] undoes the step while the state is at hand.
//!
//! - [`Framework::schedule_one`] is the whole step for one pod: the cycle
//!   over the view's cluster, then Reserve, Permit and assume on the node it
//!   selects (upstream's `scheduleOne` up to the binding cycle). The daemon,
//!   the offline commands, the group cycle and the benchmarks call it; the
//!   schedule → assume sequence is written here only.
//!
//! The daemon, the offline engine and the group cycle call these and name no
//! plugin: a new kind of decision is a new [`Reservation`] type in its plugin
//! (and the cache data it applies to), nothing else.

use super::{CycleOptions, CycleOutcome, CycleState, Framework, Status};
use std::sync::Arc;

pub use crate::cache::reservations::{Reservation, Reservations};
use crate::cache::{Cache, Snapshot};
use berth_model::PodInfo;

/// Where pods are assumed: the daemon's [`Cache`] (which also tracks the
/// pod as Assumed until the API confirms it) or a plain [`Snapshot`].
pub trait AssumeView {
    /// The cluster as the next cycle sees it (assumed pods included).
    fn cluster(&self) -> &Snapshot;

    /// Adds `pod` (node name set) as assumed on its node, with its
    /// reservations applied and kept under its uid.
    fn assume_pod(&mut self, pod: Arc<PodInfo>, reservations: &Reservations);

    /// Undoes [`AssumeView::assume_pod`] for `pod` (as it was before it was
    /// assumed): the pod leaves its node and its reservations are reverted.
    fn forget_pod(&mut self, pod: &Arc<PodInfo>);
}

impl AssumeView for Cache {
    fn cluster(&self) -> &Snapshot {
        self.snapshot()
    }

    fn assume_pod(&mut self, pod: Arc<PodInfo>, reservations: &Reservations) {
        let uid = pod.uid.clone();
        if pod.node_name.is_none() {
            return;
        }
        self.assume(pod);
        self.snapshot_mut().assume_reservations(&uid, reservations);
    }

    /// [`Cache::forget`]: the nomination the pod had is not restored (the
    /// daemon's queue record keeps it).
    fn forget_pod(&mut self, pod: &Arc<PodInfo>) {
        self.forget(&pod.uid);
    }
}

impl AssumeView for Snapshot {
    fn cluster(&self) -> &Snapshot {
        self
    }

    fn assume_pod(&mut self, pod: Arc<PodInfo>, reservations: &Reservations) {
        if pod.node_name.is_none() {
            return;
        }
        self.assume_reservations(&pod.uid, reservations);
        self.clear_nomination(&pod.uid);
        self.add_pod(pod);
    }

    /// Also restores the pod's nomination, which assuming cleared.
    fn forget_pod(&mut self, pod: &Arc<PodInfo>) {
        self.forget_reservations(&pod.uid);
        self.remove_pod(&pod.uid);
        if let Some(n) = &pod.nominated_node {
            self.nominate(pod.clone(), n);
        }
    }
}

/// The one assume step: `pod` counts on `node` in `view`, with every
/// reservation its Reserve plugins recorded in `state`.
pub fn assume(view: &mut dyn AssumeView, state: &CycleState, pod: &PodInfo, node: &str) {
    let mut bound = pod.clone();
    bound.node_name = Some(node.to_string());
    bound.nominated_node = None;
    view.assume_pod(Arc::new(bound), state.reservations());
}

/// A Reserve or Permit plugin refused the node.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The extension point that refused ("Reserve" or "Permit").
    pub point: &'static str,
    /// The refusing plugin's status (its `plugin` set).
    pub status: Status,
}

/// Where [`Framework::schedule_one`] left a pod.
#[derive(Clone, Debug, PartialEq)]
pub enum Assumed {
    /// No node was selected (nothing fits, or the cycle failed): the
    /// outcome says why.
    NoNode,
    /// Assumed on this node, with its reservations.
    On(String),
    /// The cycle selected `node`, and a Reserve or Permit plugin refused it:
    /// nothing is assumed.
    Refused {
        /// The selected node.
        node: String,
        /// Who refused, and why.
        refusal: Refusal,
    },
}

/// What [`Framework::schedule_one`] did with one pod.
pub struct ScheduledOne {
    /// The scheduling cycle's outcome (the failure message, PostFilter's
    /// answer, the scores).
    pub outcome: CycleOutcome,
    /// The cycle's state (the binding cycle's PreBind, and Unreserve if the
    /// bind fails, read it).
    pub state: CycleState,
    /// Where the pod is now.
    pub assumed: Assumed,
}

impl Framework {
    /// One pod's scheduling cycle over the cluster `view` shows, then, on
    /// the node it selects, Reserve, Permit and the assume step into `view`
    /// ([`Self::reserve_and_assume`]): the one schedule → assume sequence.
    pub fn schedule_one(&self, view: &mut dyn AssumeView, pod: &Arc<PodInfo>, opts: CycleOptions) -> ScheduledOne {
        let (outcome, mut state) = self.schedule(pod, view.cluster(), opts);
        let Some(i) = outcome.selected else {
            return ScheduledOne { outcome, state, assumed: Assumed::NoNode };
        };
        let node = view.cluster().nodes[i].name().to_string();
        let assumed = match self.reserve_and_assume(view, &mut state, pod, &node) {
            Ok(()) => Assumed::On(node),
            Err(refusal) => Assumed::Refused { node, refusal },
        };
        ScheduledOne { outcome, state, assumed }
    }

    /// Reserve, then Permit, then [`assume`]. When a plugin refuses, every
    /// Reserve plugin is unreserved, nothing is assumed, and the refusal is
    /// returned.
    pub fn reserve_and_assume(&self, view: &mut dyn AssumeView, state: &mut CycleState, pod: &PodInfo, node: &str) -> Result<(), Refusal> {
        let s = self.run_reserve(state, pod, node);
        let refused = if !s.is_success() {
            Some(Refusal { point: "Reserve", status: s })
        } else {
            let s = self.run_permit(state, pod, node);
            (!s.is_success()).then_some(Refusal { point: "Permit", status: s })
        };
        if let Some(r) = refused {
            self.run_unreserve(state, pod, node);
            return Err(r);
        }
        assume(view, state, pod, node);
        Ok(())
    }

    /// Undoes [`Framework::reserve_and_assume`] for a pod that will not be
    /// bound: Unreserve, then the pod and its reservations are forgotten.
    pub fn unassume(&self, view: &mut dyn AssumeView, state: &mut CycleState, pod: &Arc<PodInfo>, node: &str) {
        self.run_unreserve(state, pod, node);
        view.forget_pod(pod);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    /// A second kind of decision, as a future plugin would add one: a count
    /// kept in the snapshot's namespaces (any data the snapshot holds).
    #[derive(Debug)]
    struct Marker(&'static str);

    impl Reservation for Marker {
        fn assume(&self, snap: &mut Snapshot, pod_uid: &str) {
            snap.namespaces.insert(format!("{}:{pod_uid}", self.0), Default::default());
        }
        fn forget(&self, snap: &mut Snapshot, pod_uid: &str) {
            snap.namespaces.remove(&format!("{}:{pod_uid}", self.0));
        }
    }

    #[test]
    fn reservations_are_typed_per_plugin() {
        let mut r = Reservations::default();
        r.record("A", Marker("a"));
        r.record("B", Marker("b"));
        r.record("A", Marker("a2"));
        assert_eq!(r.get::<Marker>("A").map(|m| m.0), Some("a2"));
        r.clear("A");
        assert!(r.get::<Marker>("A").is_none());
        assert!(!r.is_empty());
    }

    #[test]
    fn assume_then_forget_by_uid_reverts_every_reservation() {
        let mut c = Cache::new();
        c.upsert_node(node("n").spec());
        let mut st = CycleState::new();
        st.reservations_mut().record("A", Marker("a"));
        st.reservations_mut().record("B", Marker("b"));
        let p = pod("p").info();
        assume(&mut c, &st, &p, "n");
        assert_eq!(c.pod_state("uid-p"), Some(crate::cache::PodState::Assumed));
        assert_eq!(c.snapshot().namespaces.len(), 2);
        // The watch confirms the pod: its reservations stay until the pod goes.
        c.upsert_bound_pod(pod("p").node("n").info());
        assert_eq!(c.snapshot().namespaces.len(), 2);
        c.remove_pod("uid-p");
        assert!(c.snapshot().namespaces.is_empty());
        // On a plain snapshot, forgetting restores the nomination too.
        let mut s = crate::testing::snapshot(&[node("n")], &[]);
        let p = pod("q").nominated("n").info();
        s.nominate(p.clone(), "n");
        assume(&mut s, &st, &p, "n");
        assert!(s.nominated.is_empty());
        assert_eq!(s.namespaces.len(), 2);
        s.forget_pod(&p);
        assert_eq!((s.namespaces.len(), s.nominated.get("n").map(Vec::len), s.pod_count()), (0, Some(1), 0));
    }
}
