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

use std::collections::HashMap;
use std::sync::Arc;

use super::Snapshot;
use crate::model::{NodeSpec, PodInfo};

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
    pods: HashMap<String, PodState>,
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
        self.pods.get(uid).copied()
    }

    /// Assumes `pod` (with node_name set) is bound.
    pub fn assume(&mut self, pod: Arc<PodInfo>) {
        if pod.node_name.is_none() {
            return;
        }
        self.pods.insert(pod.uid.clone(), PodState::Assumed);
        self.snapshot.clear_nomination(&pod.uid);
        self.snapshot.add_pod(pod);
    }

    /// Assumes the volume decisions VolumeBinding reserved for a pod (see
    /// `plugins::volume_binding::reserved`); `forget` reverts them with the pod.
    pub fn assume_volumes(&mut self, d: &super::storage::VolumeDecisions) {
        self.snapshot.storage.assume(d);
    }

    /// The bind failed: the assumed pod leaves its node.
    pub fn forget(&mut self, uid: &str) {
        self.snapshot.storage.forget(uid);
        if self.pods.get(uid) == Some(&PodState::Assumed) {
            self.pods.remove(uid);
            self.snapshot.remove_pod(uid);
        }
    }

    /// A bound pod from the API (added or updated); confirms an assumed one.
    /// A pod that finished is removed (it holds nothing).
    pub fn upsert_bound_pod(&mut self, pod: Arc<PodInfo>) {
        if pod.terminated {
            self.remove_pod(&pod.uid);
            return;
        }
        self.pods.insert(pod.uid.clone(), PodState::Added);
        self.snapshot.add_pod(pod);
    }

    /// A pod left the API.
    pub fn remove_pod(&mut self, uid: &str) {
        self.snapshot.storage.forget(uid);
        self.pods.remove(uid);
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
        self.pods.len()
    }

    /// Uids of pods that are bound in the cache.
    pub fn pod_uids(&self) -> impl Iterator<Item = &String> {
        self.pods.keys()
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
}
