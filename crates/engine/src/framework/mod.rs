//! The scheduling framework: extension points, statuses, cycle state and the
//! runner that drives plugins through one scheduling cycle.
//!
//! Plugins implement [`Plugin`], overriding the methods of the extension points
//! they declare in [`Plugin::points`]. The framework, not the plugins, enforces
//! the score contract: normalize, check 0..=100, multiply by the weight.

pub mod assume;
mod batch;
pub mod cycle_state;
pub mod group;
pub mod pre_bind;
pub mod runner;
pub mod status;

use std::collections::HashSet;
use std::sync::Arc;

pub use assume::{assume, AssumeView, Refusal, Reservation, Reservations};
pub use cycle_state::CycleState;
pub use pre_bind::{ApiWrite, DeallocateClaim, PreBindWork, WaitFor};
pub use runner::{CycleOptions, CycleOutcome, Framework, NodeStatuses, PluginEntry};
pub use status::{Code, Reasons, Status};

use crate::cache::Snapshot;
use berth_model::{NodeInfo, PodInfo};

/// Extension points a plugin implements, as a bit set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Points(pub u32);

impl Points {
    /// QueueSort.
    pub const QUEUE_SORT: Points = Points(1);
    /// PreEnqueue.
    pub const PRE_ENQUEUE: Points = Points(1 << 1);
    /// PreFilter (and its AddPod/RemovePod extensions).
    pub const PRE_FILTER: Points = Points(1 << 2);
    /// Filter.
    pub const FILTER: Points = Points(1 << 3);
    /// PostFilter.
    pub const POST_FILTER: Points = Points(1 << 4);
    /// PreScore.
    pub const PRE_SCORE: Points = Points(1 << 5);
    /// Score (and NormalizeScore when `has_normalize`).
    pub const SCORE: Points = Points(1 << 6);
    /// Reserve / Unreserve.
    pub const RESERVE: Points = Points(1 << 7);
    /// Permit.
    pub const PERMIT: Points = Points(1 << 8);
    /// PreBind.
    pub const PRE_BIND: Points = Points(1 << 9);
    /// Bind.
    pub const BIND: Points = Points(1 << 10);
    /// PostBind.
    pub const POST_BIND: Points = Points(1 << 11);

    /// Union.
    pub const fn or(self, o: Points) -> Points {
        Points(self.0 | o.0)
    }

    /// Does this set contain `o`?
    pub const fn has(self, o: Points) -> bool {
        self.0 & o.0 == o.0
    }

    /// All points with their configuration names, in the order upstream lists them.
    pub const ALL: [(Points, &'static str); 12] = [
        (Points::QUEUE_SORT, "queueSort"),
        (Points::PRE_ENQUEUE, "preEnqueue"),
        (Points::PRE_FILTER, "preFilter"),
        (Points::FILTER, "filter"),
        (Points::POST_FILTER, "postFilter"),
        (Points::PRE_SCORE, "preScore"),
        (Points::SCORE, "score"),
        (Points::RESERVE, "reserve"),
        (Points::PERMIT, "permit"),
        (Points::PRE_BIND, "preBind"),
        (Points::BIND, "bind"),
        (Points::POST_BIND, "postBind"),
    ];
}

/// Cluster events that may make a rejected pod schedulable, as a bit set.
/// Plugins declare theirs; the queue moves unschedulable pods on them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Events(pub u32);

impl Events {
    /// A node was added.
    pub const NODE_ADD: Events = Events(1);
    /// A node's allocatable grew.
    pub const NODE_ALLOCATABLE: Events = Events(1 << 1);
    /// A node's labels changed.
    pub const NODE_LABEL: Events = Events(1 << 2);
    /// A node's taints changed.
    pub const NODE_TAINT: Events = Events(1 << 3);
    /// A node's spec.unschedulable changed.
    pub const NODE_UNSCHEDULABLE: Events = Events(1 << 4);
    /// A node's images changed.
    pub const NODE_IMAGES: Events = Events(1 << 5);
    /// A pod was added (bound) to a node.
    pub const POD_ADD: Events = Events(1 << 6);
    /// A pod was deleted, finished or shrank.
    pub const POD_DELETE: Events = Events(1 << 7);
    /// A bound pod's labels changed.
    pub const POD_LABEL: Events = Events(1 << 8);
    /// A namespace was added or its labels changed.
    pub const NAMESPACE: Events = Events(1 << 9);
    /// A PodDisruptionBudget changed.
    pub const PDB: Events = Events(1 << 10);
    /// The pod itself changed (its scheduling gates, tolerations, ...).
    pub const POD_SELF: Events = Events(1 << 11);
    /// A pod group (PodGroup, either API) was added or updated, or a pending
    /// member of a group was added.
    pub const POD_GROUP: Events = Events(1 << 12);
    /// A PersistentVolumeClaim was added or updated.
    pub const PVC: Events = Events(1 << 20);
    /// A PersistentVolume was added or updated.
    pub const PV: Events = Events(1 << 21);
    /// A StorageClass was added or updated.
    pub const STORAGE_CLASS: Events = Events(1 << 22);
    /// A CSINode was added or updated.
    pub const CSI_NODE: Events = Events(1 << 23);
    /// A CSIDriver was added or updated.
    pub const CSI_DRIVER: Events = Events(1 << 24);
    /// A CSIStorageCapacity was added or updated.
    pub const CSI_STORAGE_CAPACITY: Events = Events(1 << 25);
    /// A ResourceClaim was added or updated.
    pub const RESOURCE_CLAIM: Events = Events(1 << 26);
    /// A ResourceSlice was added or updated.
    pub const RESOURCE_SLICE: Events = Events(1 << 27);
    /// A DeviceClass was added or updated.
    pub const DEVICE_CLASS: Events = Events(1 << 28);
    /// Every event.
    pub const ALL: Events = Events(u32::MAX);

    /// Union.
    pub const fn or(self, o: Events) -> Events {
        Events(self.0 | o.0)
    }

    /// Do the two sets share an event?
    pub const fn intersects(self, o: Events) -> bool {
        self.0 & o.0 != 0
    }
}

/// A pod waiting in a queue, with its queue bookkeeping.
#[derive(Clone, Debug)]
pub struct QueuedPod {
    /// The pod.
    pub pod: Arc<PodInfo>,
    /// When it entered the queue (ms; creation time offline).
    pub timestamp_ms: i64,
    /// Scheduling attempts so far.
    pub attempts: u32,
}

/// What PreFilter narrowed the candidate nodes to (None: all nodes).
pub type PreFilterNodes = Option<HashSet<String>>;

/// A node's score from one plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeScore {
    /// Index of the node in the snapshot.
    pub node: usize,
    /// The score.
    pub score: i64,
}

/// What a PostFilter plugin (preemption) found.
#[derive(Clone, Debug, Default)]
pub struct PostFilterResult {
    /// The node nominated for the pod.
    pub nominated_node: Option<String>,
    /// Pods to evict so that the pod fits there.
    pub victims: Vec<Arc<PodInfo>>,
    /// Why no node was nominated (upstream's "preemption: ..." message).
    pub message: Option<String>,
    /// Claims to deallocate (DynamicResources' PostFilter), kept whatever
    /// the status: the caller makes the writes, as it evicts victims.
    pub deallocations: Vec<DeallocateClaim>,
}

/// Highest normalized score a plugin may give.
pub const MAX_NODE_SCORE: i64 = 100;

/// Runs `plugin`'s Filter on the nodes `needs_look` picks, keeps the others
/// as they are, and moves each rejected node with its status to `rejected`:
/// the shared body of [`Plugin::filter_nodes`] and its node-local overrides.
pub fn filter_each<P: Plugin + ?Sized>(
    plugin: &P,
    state: &CycleState,
    pod: &PodInfo,
    snap: &Snapshot,
    nodes: &mut Vec<usize>,
    rejected: &mut Vec<(usize, Status)>,
    needs_look: impl Fn(&NodeInfo) -> bool,
) {
    nodes.retain(|&i| {
        let ni = &snap.nodes[i];
        if !needs_look(ni) {
            return true;
        }
        let s = plugin.filter(state, pod, ni);
        if s.is_success() {
            return true;
        }
        rejected.push((i, s));
        false
    });
}

/// One device a claim gets (explain and simulate show them).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceChoice {
    /// The claim, namespace/name (`<pod>-extended-resources` for the claim
    /// PreBind creates for extended resources).
    pub claim: String,
    /// `request` or `request/subrequest`.
    pub request: String,
    /// `driver/pool/device`.
    pub device: String,
}

/// A scheduling plugin. Every method has a default for plugins that do not
/// implement that extension point; `points` says which ones it does.
#[allow(unused_variables)] // default methods ignore their arguments
pub trait Plugin: Send + Sync {
    /// The plugin's name, as in configuration.
    fn name(&self) -> &'static str;

    /// A sentence added to the failure message of `pod` when no node fits
    /// (none by default): what this plugin can say of the pod's own objects
    /// that upstream's per-node reasons do not name. Added after the cycle,
    /// also to a failure replayed from an identical pod, so it must read
    /// only `pod`, `state` and `statuses`.
    fn failure_detail(&self, state: &CycleState, pod: &PodInfo, statuses: &NodeStatuses) -> Option<String> {
        None
    }

    /// explain: more about this plugin's rejection `status` of `node` than
    /// its reasons say (none by default).
    fn explain_rejection(&self, state: &CycleState, snap: &Snapshot, node: &NodeInfo, status: &Status) -> Vec<String> {
        Vec::new()
    }

    /// explain and simulate: the devices this cycle gives the pod on `node`,
    /// or, with None, those its Reserve took (none by default).
    fn device_choices(&self, state: &CycleState, node: Option<&str>) -> Vec<DeviceChoice> {
        Vec::new()
    }

    /// Extension points implemented.
    fn points(&self) -> Points;

    /// Opportunistic batching (upstream KEP-5598): are this plugin's Filter
    /// verdict and raw Score for a node a function of the cycle's signature
    /// (the pod's, with what [`Plugin::sign_pod`] adds) and of that one node
    /// (its object, its pods, and its devices as the snapshot's device
    /// journal follows them) alone? Then a later pod with the same signature
    /// reuses them on every node that has not changed since. Plugins whose
    /// results depend on other nodes (spreading, inter-pod affinity) keep the
    /// default, no; a plugin that PreFilter or PreScore skipped for the pod
    /// does not matter either way. A plugin that keeps per-node results from
    /// Filter for Reserve may be reusable: the cycle runs the node-local
    /// Filters once more on the node it selects when its verdict was reused.
    fn reusable(&self) -> bool {
        false
    }

    /// Opportunistic batching: what this plugin's Filter and Score read of
    /// the pod that the pod's own signature does not cover (objects the pod
    /// names, such as its ResourceClaims), called after PreFilter. `Some(h)`
    /// mixes `h` into the cycle's signature (`Some(0)`, the default: nothing
    /// to add); None leaves the pod unsigned for this cycle (no reuse).
    fn sign_pod(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot) -> Option<u64> {
        Some(0)
    }

    /// Cluster events that can make a pod this plugin rejected schedulable.
    fn events(&self) -> Events {
        Events::ALL
    }

    /// QueueSort: does `a` go before `b`?
    fn less(&self, a: &QueuedPod, b: &QueuedPod) -> bool {
        a.timestamp_ms < b.timestamp_ms
    }

    /// PreEnqueue: may the pod enter the active queue? `cluster` is the
    /// cache's snapshot (upstream's plugins read their listers); None when
    /// the caller has no cluster view at hand, and then a plugin whose gate
    /// reads the cluster lets the pod in (its PreFilter repeats the check).
    /// A pod refused here waits gated until one of the plugin's
    /// [`Plugin::events`] (or an update of the pod) lets PreEnqueue run again.
    fn pre_enqueue(&self, pod: &PodInfo, cluster: Option<&Snapshot>) -> Status {
        Status::success()
    }

    /// PreFilter: computes per-cycle state; may narrow the nodes or answer Skip.
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        (Status::success(), None)
    }

    /// PreFilter extension: `added` is now assumed on `node`.
    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        Status::success()
    }

    /// PreFilter extension: `removed` is no longer on `node`.
    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, removed: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        Status::success()
    }

    /// Filter: can the pod run on this node?
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        Status::success()
    }

    /// Filter over many nodes at once (a cycle that evaluates every node):
    /// keeps in `nodes`, in order, the ones that pass, and pushes every other
    /// one with its status (as `filter` gives it) to `rejected`. The default
    /// calls `filter` per node; node-local plugins override it with a tight
    /// loop that answers the common case without building a status, so that a
    /// full cycle pays one dynamic call per plugin rather than per node.
    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        filter_each(self, state, pod, snap, nodes, rejected, |_| true);
    }

    /// [`Self::filter_nodes`] for a cycle that will not read the rejected
    /// nodes' statuses (it reuses earlier results and a node fits): keeps in
    /// `nodes`, in order, the ones that pass and returns true; or returns
    /// false with `nodes` untouched, and the caller runs `filter_nodes`. Only
    /// a pass whose rejections are never errors may answer true.
    fn retain_feasible(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>) -> bool {
        false
    }

    /// PostFilter: called when no node fits.
    fn post_filter(&self, fw: &Framework, state: &CycleState, pod: &Arc<PodInfo>, snap: &Snapshot, statuses: &NodeStatuses) -> (Status, PostFilterResult) {
        (Status::unschedulable("not implemented"), PostFilterResult::default())
    }

    /// PreScore: computes scoring state for the feasible nodes, or Skip.
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[usize], snap: &Snapshot) -> Status {
        Status::success()
    }

    /// Score: the node's raw score.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(0)
    }

    /// Scores every node of `scores` (their `node` index set, `score` to fill).
    /// The default calls `score` per node; plugins may override it to hoist
    /// per-cycle work out of the loop.
    fn score_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
        for s in scores.iter_mut() {
            s.score = self.score(state, pod, &snap.nodes[s.node])?;
        }
        Ok(())
    }

    /// Does the plugin normalize its scores?
    fn has_normalize(&self) -> bool {
        false
    }

    /// Is NormalizeScore upstream's DefaultNormalizeScore (raw × 100 / the
    /// highest raw score, reversed when `Some(true)`)? Then a cycle reusing
    /// cached raw scores applies it without a copy of them.
    fn default_normalized(&self) -> Option<bool> {
        None
    }

    /// NormalizeScore: rescales raw scores to 0..=100.
    fn normalize_score(&self, state: &CycleState, pod: &PodInfo, scores: &mut [NodeScore], snap: &Snapshot) -> Status {
        Status::success()
    }

    /// Reserve: a decision later cycles must see before the API shows it
    /// is recorded with [`CycleState::reservations_mut`] as a [`Reservation`];
    /// the framework's assume step applies it with the pod.
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        Status::success()
    }

    /// Unreserve: clears what Reserve recorded.
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {}

    /// Permit.
    fn permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        Status::success()
    }

    /// PreBind: API writes are not made here but described as a
    /// [`PreBindWork`] ([`CycleState::add_pre_bind_work`]) that the daemon
    /// carries out before the bind.
    fn pre_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        Status::success()
    }

    /// Bind: the API call itself is made by the daemon's binder; this says
    /// whether this plugin handles the pod (Skip to pass it on).
    fn bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        Status::skip()
    }

    /// PostBind.
    fn post_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {}
}
