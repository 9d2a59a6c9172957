//! The scheduler cache: the snapshot plus the assumed pods.
//!
//! Pod state machine (as upstream's cache documents it):
//!
//! ```text
//!   Initial --assume--> Assumed --add (watch confirms the binding)--> Added --remove--> Deleted
//!                          |
//!                          +--forget (bind failed)--> Initial
//! ```
//!
//! An assumed pod counts on its node at once, so the next cycle sees it; the
//! watch event that confirms the binding replaces it with the API's object.
//! A pod removed from the API while assumed is dropped too.
//!
//! Pods are assumed through the framework's one assume step
//! ([`crate::framework::assume`]), with what their Reserve plugins decided
//! (reservations, kept in the snapshot by pod uid): `forget` and `remove_pod`
//! revert those too; a confirmed pod keeps them until it is removed (the
//! API's objects supersede each one as they show it).

use std::collections::HashSet;
use std::sync::Arc;

use super::Snapshot;
use berth_model::{NodeSpec, PodInfo};

/// The cache's view of one pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodState {
    /// Bound in the cache by the scheduler, not yet confirmed by the API.
    Assumed,
    /// Bound according to the API.
    Added,
}

/// Cluster state owned by the scheduling loop.
#[derive(Debug, Default)]
pub struct Cache {
    snapshot: Snapshot,
    /// Uids of the assumed pods; every other pod bound in the snapshot is
    /// Added (the snapshot keeps the bound pods by uid, so this set stays as
    /// small as the binds in flight).
    assumed: HashSet<String>,
}

impl Cache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The state scheduling cycles read.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Mutable access for namespaces, PDBs and nominations.
    pub fn snapshot_mut(&mut self) -> &mut Snapshot {
        &mut self.snapshot
    }

    /// A pod's state.
    pub fn pod_state(&self, uid: &str) -> Option<PodState> {
        if self.assumed.contains(uid) {
            Some(PodState::Assumed)
        } else {
            self.snapshot.pod_node(uid).map(|_| PodState::Added)
        }
    }

    /// Assumes `pod` (with node_name set) is bound, without reservations
    /// (the framework's assume step adds them).
    pub fn assume(&mut self, pod: Arc<PodInfo>) {
        if pod.node_name.is_none() {
            return;
        }
        self.assumed.insert(pod.uid.clone());
        self.snapshot.clear_nomination(&pod.uid);
        self.snapshot.add_pod(pod);
    }

    /// The bind failed: the assumed pod leaves its node, and its reservations are reverted.
    pub fn forget(&mut self, uid: &str) {
        self.snapshot.forget_reservations(uid);
        if self.assumed.remove(uid) {
            self.snapshot.remove_pod(uid);
        }
    }

    /// A bound pod from the API (added or updated); confirms an assumed one.
    /// A pod that finished is removed (it holds nothing). A bound pod holds
    /// no nomination, whatever its status still says (a preemptor keeps
    /// `nominatedNodeName` after another scheduler binds it): counted on
    /// its node as nominated too, it would be counted twice there for every
    /// pod of its priority or lower, as upstream's nominator never does.
    pub fn upsert_bound_pod(&mut self, pod: Arc<PodInfo>) {
        if pod.terminated {
            self.remove_pod(&pod.uid);
            return;
        }
        self.assumed.remove(&pod.uid);
        self.snapshot.clear_nomination(&pod.uid);
        self.snapshot.add_pod(pod);
    }

    /// A pod left the API.
    pub fn remove_pod(&mut self, uid: &str) {
        self.snapshot.forget_reservations(uid);
        self.assumed.remove(uid);
        self.snapshot.remove_pod(uid);
        self.snapshot.clear_nomination(uid);
    }

    /// Adds or updates a node.
    pub fn upsert_node(&mut self, node: NodeSpec) {
        self.snapshot.upsert_node(node);
    }

    /// Removes a node.
    pub fn remove_node(&mut self, name: &str) {
        self.snapshot.remove_node(name);
    }

    /// Bound pods (assumed included).
    pub fn pod_count(&self) -> usize {
        self.snapshot.bound_count()
    }

    /// Uids of pods that are bound in the cache.
    pub fn pod_uids(&self) -> impl Iterator<Item = &String> {
        self.snapshot.bound_pods().map(|p| &p.uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    #[test]
    fn assume_confirm_forget() {
        let mut c = Cache::new();
        c.upsert_node(node("n").spec());
        c.assume(pod("a").node("n").req("1", "").info());
        assert_eq!(c.pod_state("uid-a"), Some(PodState::Assumed));
        assert_eq!(c.snapshot().nodes[0].requested.milli_cpu, 1000);
        // The watch confirms: counted once.
        c.upsert_bound_pod(pod("a").node("n").req("1", "").info());
        assert_eq!(c.pod_state("uid-a"), Some(PodState::Added));
        assert_eq!(c.snapshot().nodes[0].requested.milli_cpu, 1000);
        // Forget only undoes assumptions.
        c.forget("uid-a");
        assert_eq!(c.snapshot().nodes[0].pods.len(), 1);
        c.assume(pod("b").node("n").req("1", "").info());
        c.forget("uid-b");
        assert_eq!(c.snapshot().nodes[0].requested.milli_cpu, 1000);
        // Finished pods hold nothing.
        c.upsert_bound_pod(pod("a").node("n").req("1", "").phase("Succeeded").info());
        assert_eq!(c.snapshot().nodes[0].requested.milli_cpu, 0);
        assert_eq!(c.pod_count(), 0);
    }

    /// A preemptor nominated to a node and then bound there by another
    /// scheduler (its status still naming the node) is counted once: bound,
    /// not nominated as well.
    #[test]
    fn a_bound_pod_loses_its_nomination() {
        let mut c = Cache::new();
        c.upsert_node(node("n").spec());
        let pending = pod("a").req("1", "").info();
        c.snapshot_mut().nominate(pending, "n");
        assert_eq!(c.snapshot().nominated.get("n").map(Vec::len), Some(1));
        c.upsert_bound_pod(pod("a").node("n").req("1", "").info());
        assert!(c.snapshot().nominated.is_empty(), "{:?}", c.snapshot().nominated.keys().collect::<Vec<_>>());
        assert_eq!(c.snapshot().nodes[0].requested.milli_cpu, 1000);
    }

    #[test]
    fn pods_before_their_node() {
        let mut c = Cache::new();
        c.upsert_bound_pod(pod("a").node("late").req("1", "").info());
        c.upsert_node(node("late").spec());
        assert_eq!(c.snapshot().nodes[0].requested.milli_cpu, 1000);
        c.remove_node("late");
        c.upsert_node(node("late").spec());
        assert_eq!(c.snapshot().nodes[0].pods.len(), 1);
        c.remove_pod("uid-a");
        assert_eq!(c.snapshot().nodes[0].pods.len(), 0);
    }

    #[test]
    fn bound_pods_are_found_by_uid_on_known_nodes_and_off_them() {
        let mut c = Cache::new();
        c.upsert_node(node("n").spec());
        c.upsert_bound_pod(pod("a").node("n").label("app", "x").info());
        c.upsert_bound_pod(pod("b").node("gone").info());
        c.assume(pod("c").node("n").info());
        assert_eq!(c.pod_count(), 3);
        let mut uids: Vec<&String> = c.pod_uids().collect();
        uids.sort();
        assert_eq!(uids, ["uid-a", "uid-b", "uid-c"]);
        assert_eq!(c.snapshot().pod_node("uid-b"), Some("gone"));
        assert_eq!(c.pod_state("uid-b"), Some(PodState::Added));
        assert_eq!(c.pod_state("uid-c"), Some(PodState::Assumed));
        assert_eq!(c.snapshot().bound_pod("uid-a").map(|p| p.labels.get("app")), Some(Some("x")));
        // An update moves nothing twice and replaces the pod kept by uid.
        c.upsert_bound_pod(pod("a").node("n").label("app", "y").info());
        assert_eq!(c.snapshot().nodes[0].pods.len(), 2);
        assert_eq!(c.snapshot().bound_pod("uid-a").map(|p| p.labels.get("app")), Some(Some("y")));
        // The node goes: its pods stay known by uid, off any node.
        c.remove_node("n");
        assert_eq!(c.pod_count(), 3);
        assert_eq!(c.snapshot().pod_node("uid-a"), Some("n"));
        c.forget("uid-c");
        assert_eq!(c.pod_state("uid-c"), None);
        c.remove_pod("uid-a");
        assert_eq!((c.pod_state("uid-a"), c.pod_count()), (None, 1));
    }
}
