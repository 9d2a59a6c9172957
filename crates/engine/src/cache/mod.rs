//! Cluster state as the scheduler sees it: nodes with their pods, namespaces,
//! PodDisruptionBudgets and nominated pods.
//!
//! One owner (the scheduling loop, or an offline command) mutates it between
//! cycles; a cycle reads it through `&Snapshot`, so no copy is taken per cycle.

mod state;
pub mod reservations;
pub mod workloads;
pub mod storage;
pub mod groups;
pub mod devices;

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use self::reservations::Reservations;
use berth_model::selector::{Labels, Selector};
use berth_model::{NodeInfo, NodeSpec, PodInfo};

pub use state::{Cache, PodState};

/// A bound pod keyed by its uid: the set of bound pods shares each pod's
/// `PodInfo` (its uid and node name) instead of copying both strings into a
/// map, which at tens of thousands of pods is a good part of the daemon's
/// memory.
#[derive(Clone, Debug)]
struct ByUid(Arc<PodInfo>);

impl ByUid {
    fn node(&self) -> &str {
        self.0.node_name.as_deref().unwrap_or_default()
    }
}

impl Borrow<str> for ByUid {
    fn borrow(&self) -> &str {
        &self.0.uid
    }
}

impl PartialEq for ByUid {
    fn eq(&self, o: &Self) -> bool {
        self.0.uid == o.0.uid
    }
}

impl Eq for ByUid {}

impl std::hash::Hash for ByUid {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        // As `str` hashes, so that lookups by `&str` find it.
        self.0.uid.as_str().hash(h);
    }
}

/// A PodDisruptionBudget, compiled.
#[derive(Clone, Debug)]
pub struct Pdb {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// spec.selector (nothing when missing or empty, as preemption reads it).
    pub selector: Selector,
    /// status.disruptionsAllowed.
    pub disruptions_allowed: i64,
    /// Names of the pods in status.disruptedPods (already being evicted: not counted again).
    pub disrupted_pods: Vec<String>,
}

impl Pdb {
    /// Compiles a PodDisruptionBudget. A missing or empty selector selects
    /// nothing (as preemption reads it); an invalid one is an error naming the field.
    pub fn from_api(p: &k8s_openapi::api::policy::v1::PodDisruptionBudget) -> Result<Pdb, String> {
        let sel = p.spec.as_ref().and_then(|s| s.selector.as_ref());
        let non_empty = sel.is_some_and(|s| s.match_labels.as_ref().is_some_and(|m| !m.is_empty()) || s.match_expressions.as_ref().is_some_and(|m| !m.is_empty()));
        let selector = if non_empty { Selector::from_label_selector(sel, "spec.selector")? } else { Selector::nothing() };
        let status = p.status.as_ref();
        Ok(Pdb {
            namespace: p.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            name: p.metadata.name.clone().unwrap_or_default(),
            selector,
            disruptions_allowed: i64::from(status.and_then(|s| s.disruptions_allowed).unwrap_or(0)),
            disrupted_pods: status.and_then(|s| s.disrupted_pods.as_ref()).map(|m| m.keys().cloned().collect()).unwrap_or_default(),
        })
    }
}

/// Which nodes changed, in the order they changed, so that a cycle reusing
/// the last identical pod's per-node results finds them without visiting
/// every node.
#[derive(Debug)]
struct Journal {
    /// Identifies this snapshot's history; a clone gets a new one, since the
    /// two diverge from then on.
    id: u64,
    /// Bumped when a node is added, removed or its object replaced.
    layout: u64,
    /// (generation, node index) of every other change, generations ascending.
    changes: VecDeque<(u64, usize)>,
    /// Changes at or below this generation were dropped.
    floor: u64,
}

fn next_journal_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Default for Journal {
    fn default() -> Self {
        Journal { id: next_journal_id(), layout: 0, changes: VecDeque::new(), floor: 0 }
    }
}

impl Clone for Journal {
    fn clone(&self) -> Self {
        Journal { id: next_journal_id(), layout: self.layout, changes: self.changes.clone(), floor: self.floor }
    }
}

/// Where a snapshot's history stands: see [`Snapshot::journal_mark`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalMark {
    id: u64,
    layout: u64,
    generation: u64,
}

/// The cluster state read by scheduling cycles.
///
/// Nodes change only through its methods (the fields are public to read),
/// which keep the journal of changed nodes and the affinity totals.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Nodes in a dense vector; indexes are stable until a node is removed.
    pub nodes: Vec<NodeInfo>,
    journal: Journal,
    /// Pods on known nodes with any pod (anti-)affinity term.
    pods_with_affinity: usize,
    /// Pods on known nodes with required anti-affinity terms.
    pods_with_required_anti_affinity: usize,
    index: HashMap<String, usize>,
    /// Namespace name → labels.
    pub namespaces: HashMap<String, Labels>,
    /// PodDisruptionBudgets.
    pub pdbs: Vec<Pdb>,
    /// Pods bound to nodes not (yet) known, by node name.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
    /// Bound pods by uid (each knows its node).
    pod_node: HashSet<ByUid>,
    /// Pending pods nominated to a node (status.nominatedNodeName), by node name.
    pub nominated: HashMap<String, Vec<Arc<PodInfo>>>,
    /// Image name → number of nodes that have it.
    image_nodes: HashMap<String, usize>,
    /// Services, ReplicationControllers, ReplicaSets and StatefulSets (default topology spreading).
    pub workloads: workloads::Workloads,
    /// Storage objects (claims, PVs, classes, CSI objects) and assumed volume decisions.
    pub storage: storage::Storage,
    /// Pod groups (gang scheduling) and the topology domain a group cycle is trying.
    pub groups: groups::Groups,
    /// DRA objects (slices, classes, claims) and the devices in use.
    pub devices: devices::Devices,
    /// What Reserve plugins decided for assumed pods, by pod uid, applied to
    /// this snapshot (see [`crate::framework::assume`]); kept until the pod
    /// is forgotten or removed.
    reservations: HashMap<String, Reservations>,
}

impl Snapshot {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    /// Index of the named node.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The named node.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.node_index(name).map(|i| &self.nodes[i])
    }

    /// Pods on known nodes with any pod (anti-)affinity term.
    pub fn pods_with_affinity(&self) -> usize {
        self.pods_with_affinity
    }

    /// Pods on known nodes with required anti-affinity terms.
    pub fn pods_with_required_anti_affinity(&self) -> usize {
        self.pods_with_required_anti_affinity
    }

    /// Identifies the set of node objects: it changes whenever a node is
    /// added, removed or replaced (and differs between a snapshot and its
    /// clone), so per-node results keyed by it stay valid while it holds.
    pub fn layout(&self) -> (u64, u64) {
        (self.journal.id, self.journal.layout)
    }

    /// Where the history of node changes stands now.
    pub fn journal_mark(&self) -> JournalMark {
        let generation = self.journal.changes.back().map_or(self.journal.floor, |c| c.0);
        JournalMark { id: self.journal.id, layout: self.journal.layout, generation }
    }

    /// The nodes whose pods changed since `mark` (each once, by index), or
    /// None when that cannot be told: another snapshot's mark, nodes added,
    /// removed or replaced since, or a history too old to be kept.
    pub fn changed_since(&self, mark: JournalMark, out: &mut Vec<usize>) -> Option<()> {
        out.clear();
        let j = &self.journal;
        if mark.id != j.id || mark.layout != j.layout || mark.generation < j.floor {
            return None;
        }
        let from = j.changes.partition_point(|c| c.0 <= mark.generation);
        for &(generation, i) in j.changes.range(from..) {
            // A node changed twice is listed at its latest change only.
            if self.nodes.get(i).is_some_and(|n| n.generation == generation) {
                out.push(i);
            }
        }
        Some(())
    }

    /// Records a change to node `i` (its pods), and the affinity totals it moved.
    fn changed(&mut self, i: usize, before: (usize, usize)) {
        let ni = &self.nodes[i];
        self.pods_with_affinity = self.pods_with_affinity + ni.pods_with_affinity - before.0;
        self.pods_with_required_anti_affinity = self.pods_with_required_anti_affinity + ni.pods_with_required_anti_affinity - before.1;
        let generation = ni.generation;
        let j = &mut self.journal;
        if generation <= j.changes.back().map_or(j.floor, |c| c.0) {
            // Nothing changed (or a clone's older state): nothing to record.
            return;
        }
        j.changes.push_back((generation, i));
        if j.changes.len() > 2 * self.nodes.len() + 1024 {
            let keep = j.changes.len() / 2;
            while j.changes.len() > keep {
                if let Some((g, _)) = j.changes.pop_front() {
                    j.floor = g;
                }
            }
        }
    }

    /// Nodes were added, removed or replaced: every mark taken before is void.
    fn relaid(&mut self) {
        self.journal.layout += 1;
        self.journal.floor = self.journal.changes.back().map_or(self.journal.floor, |c| c.0);
        self.journal.changes.clear();
    }

    fn affinity_of(ni: &NodeInfo) -> (usize, usize) {
        (ni.pods_with_affinity, ni.pods_with_required_anti_affinity)
    }

    /// Number of nodes that have the image.
    pub fn image_node_count(&self, image: &str) -> usize {
        self.image_nodes.get(image).copied().unwrap_or(0)
    }

    fn count_images(&mut self, spec: &NodeSpec, add: bool) {
        for name in spec.images.keys() {
            let c = self.image_nodes.entry(name.clone()).or_default();
            if add {
                *c += 1;
            } else {
                *c = c.saturating_sub(1);
            }
        }
    }

    /// Adds or replaces a node, keeping its pods.
    pub fn upsert_node(&mut self, spec: NodeSpec) {
        let spec = Arc::new(spec);
        self.count_images(&spec, true);
        self.relaid();
        if let Some(i) = self.node_index(&spec.name) {
            let old = self.nodes[i].node.clone();
            self.count_images(&old, false);
            let ni = &mut self.nodes[i];
            ni.set_node(spec);
            return;
        }
        let mut ni = NodeInfo::new(spec.clone());
        ni.index = self.nodes.len();
        for p in self.orphans.remove(&spec.name).unwrap_or_default() {
            ni.add_pod(p);
        }
        self.pods_with_affinity += ni.pods_with_affinity;
        self.pods_with_required_anti_affinity += ni.pods_with_required_anti_affinity;
        self.index.insert(spec.name.clone(), self.nodes.len());
        self.nodes.push(ni);
    }

    /// Removes a node; its pods are kept aside until the node returns or they go.
    pub fn remove_node(&mut self, name: &str) -> bool {
        let Some(i) = self.index.remove(name) else { return false };
        self.relaid();
        let ni = self.nodes.swap_remove(i);
        self.pods_with_affinity -= ni.pods_with_affinity;
        self.pods_with_required_anti_affinity -= ni.pods_with_required_anti_affinity;
        let spec = ni.node.clone();
        self.count_images(&spec, false);
        if i < self.nodes.len() {
            self.nodes[i].index = i;
            let moved = self.nodes[i].name().to_string();
            self.index.insert(moved, i);
        }
        if !ni.pods.is_empty() {
            self.orphans.insert(name.to_string(), ni.pods);
        }
        true
    }

    /// Adds or updates a bound pod (spec.nodeName set) on its node. Pods that
    /// have finished (Succeeded/Failed) hold nothing and are dropped.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        let Some(node) = pod.node_name.clone() else { return };
        self.remove_pod(&pod.uid);
        if pod.terminated {
            return;
        }
        self.pod_node.replace(ByUid(pod.clone()));
        match self.node_index(&node) {
            Some(i) => {
                let before = Self::affinity_of(&self.nodes[i]);
                self.nodes[i].add_pod(pod);
                self.changed(i, before);
            }
            None => self.orphans.entry(node).or_default().push(pod),
        }
    }

    /// Removes a bound pod by uid; returns it when it was there.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let bound = self.pod_node.take(uid)?;
        let node = bound.node();
        match self.node_index(node) {
            Some(i) => {
                let before = Self::affinity_of(&self.nodes[i]);
                let p = self.nodes[i].remove_pod(uid);
                self.changed(i, before);
                p
            }
            None => {
                let v = self.orphans.get_mut(node)?;
                let j = v.iter().position(|p| p.uid == uid)?;
                Some(v.swap_remove(j))
            }
        }
    }

    /// A bound pod by uid (on a known node or not).
    pub fn bound_pod(&self, uid: &str) -> Option<&Arc<PodInfo>> {
        self.pod_node.get(uid).map(|b| &b.0)
    }

    /// The bound pods (on known nodes or not), in no order.
    pub fn bound_pods(&self) -> impl Iterator<Item = &Arc<PodInfo>> {
        self.pod_node.iter().map(|b| &b.0)
    }

    /// The number of bound pods (on known nodes or not).
    pub fn bound_count(&self) -> usize {
        self.pod_node.len()
    }

    /// The node a bound pod is on.
    pub fn pod_node(&self, uid: &str) -> Option<&str> {
        self.pod_node.get(uid).map(ByUid::node)
    }

    /// Records that a pending pod is nominated to a node (replacing any earlier nomination).
    pub fn nominate(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.clear_nomination(&pod.uid);
        self.nominated.entry(node.to_string()).or_default().push(pod);
    }

    /// Forgets a pod's nomination.
    pub fn clear_nomination(&mut self, uid: &str) {
        for v in self.nominated.values_mut() {
            v.retain(|p| p.uid != uid);
        }
        self.nominated.retain(|_, v| !v.is_empty());
    }

    /// Applies a pod's reservations and keeps them under its uid, so that
    /// [`Snapshot::forget_reservations`] reverts them (a pod assumed again
    /// adds to what it holds).
    pub fn assume_reservations(&mut self, uid: &str, r: &Reservations) {
        if r.is_empty() {
            return;
        }
        r.assume_all(self, uid);
        self.reservations.entry(uid.to_string()).or_default().merge(r);
    }

    /// Reverts and drops a pod's reservations.
    pub fn forget_reservations(&mut self, uid: &str) {
        if self.reservations.is_empty() {
            return;
        }
        if let Some(r) = self.reservations.remove(uid) {
            r.forget_all(self, uid);
        }
    }

    /// Adds or replaces a DeviceClass. NodeResourcesFit's verdicts depend on
    /// the classes (an extended resource a class backs is left to
    /// DynamicResources), so reused per-node results are dropped.
    pub fn upsert_device_class(&mut self, c: &k8s_openapi::api::resource::v1::DeviceClass) -> Result<(), devices::Error> {
        self.journal.layout += 1;
        self.devices.upsert_class(c)
    }

    /// Removes a DeviceClass (see [`Snapshot::upsert_device_class`]).
    pub fn remove_device_class(&mut self, name: &str) {
        self.journal.layout += 1;
        self.devices.remove_class(name);
    }

    /// Number of pods holding reservations.
    pub fn reserved_pods(&self) -> usize {
        self.reservations.len()
    }

    /// Total number of bound pods on known nodes.
    pub fn pod_count(&self) -> usize {
        self.nodes.iter().map(|n| n.pods.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{node, pod, snapshot};

    /// The journal lists each node whose pods changed since a mark, once, and
    /// refuses marks it cannot answer for; the affinity totals follow.
    #[test]
    fn journal_lists_changed_nodes_since_a_mark() {
        let nodes: Vec<_> = (0..4).map(|i| node(&format!("n{i}")).alloc("4", "8Gi", 110)).collect();
        let mut snap = snapshot(&nodes, &[]);
        let mark = snap.journal_mark();
        let mut out = Vec::new();
        assert_eq!(snap.changed_since(mark, &mut out), Some(()));
        assert!(out.is_empty());
        snap.add_pod(pod("a").node("n1").info());
        snap.add_pod(pod("b").node("n3").info());
        snap.add_pod(pod("c").node("n1").info());
        snap.changed_since(mark, &mut out);
        out.sort_unstable();
        assert_eq!(out, vec![1, 3]);
        let mark2 = snap.journal_mark();
        assert!(snap.remove_pod("uid-b").is_some());
        assert!(snap.remove_pod("nope").is_none());
        snap.changed_since(mark2, &mut out);
        assert_eq!(out, vec![3]);
        // A clone has its own history; node changes void every mark.
        let clone = snap.clone();
        assert_eq!(clone.changed_since(mark2, &mut out), None);
        snap.upsert_node(node("n9").alloc("4", "8Gi", 110).spec());
        assert_eq!(snap.changed_since(mark2, &mut out), None);
        // The totals count pods with affinity terms.
        assert_eq!(snap.pods_with_affinity(), 0);
        use k8s_openapi::api::core::v1 as core;
        let term = core::PodAffinityTerm { topology_key: "kubernetes.io/hostname".into(), ..Default::default() };
        let anti = core::Affinity {
            pod_anti_affinity: Some(core::PodAntiAffinity { required_during_scheduling_ignored_during_execution: Some(vec![term]), ..Default::default() }),
            ..Default::default()
        };
        snap.add_pod(pod("x").node("n2").affinity(anti).info());
        assert_eq!((snap.pods_with_affinity(), snap.pods_with_required_anti_affinity()), (1, 1));
        assert!(snap.remove_node("n2"));
        assert_eq!((snap.pods_with_affinity(), snap.pods_with_required_anti_affinity()), (0, 0));
        snap.upsert_node(node("n2").alloc("4", "8Gi", 110).spec());
        assert_eq!((snap.pods_with_affinity(), snap.pods_with_required_anti_affinity()), (1, 1));
    }
}
