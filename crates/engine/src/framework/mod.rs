//! The scheduling framework: extension points, statuses, cycle state and the
//! runner that drives plugins through one scheduling cycle.
//!
//! Plugins implement [`Plugin`] and one trait per extension point they have
//! ([`interface`]); [`register!`](crate::register) stores a plugin under
//! each. The framework, not the plugins, enforces the score contract:
//! normalize, check 0..=100, multiply by the weight.

pub mod assume;
mod batch;
pub mod cycle_state;
pub mod group;
pub mod interface;
pub mod pre_bind;
pub mod runner;
pub mod status;

use std::collections::HashSet;
use std::sync::Arc;

pub use assume::{assume, AssumeView, Assumed, Refusal, Reservation, Reservations, ScheduledOne};
pub use cycle_state::CycleState;
pub use interface::{
    BindPlugin, FilterPlugin, PermitPlugin, Plugin, PostBindPlugin, PostFilterPlugin, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreScorePlugin, QueueSortPlugin, Registered,
    ReservePlugin, ScorePlugin,
};
pub use pre_bind::{ApiWrite, DeallocateClaim, PreBindWork, WaitFor};
pub use runner::{CycleOptions, CycleOutcome, Framework, NodeStatuses, PluginEntry};
pub use status::{Code, Reasons, Status};

use crate::cache::Snapshot;
use berth_model::{NodeInfo, PodInfo};

/// Extension points, as a bit set: those a profile enables a plugin at, and
/// those a plugin implements ([`Registered::points`], from its traits).
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

/// Runs `plugin`'s Filter on the nodes `needs_look` picks (by index and node), keeps the others
/// as they are, and moves each rejected node with its status to `rejected`:
/// the shared body of [`FilterPlugin::filter_nodes`] and its node-local overrides.
pub fn filter_each<P: FilterPlugin + ?Sized>(
    plugin: &P,
    state: &CycleState,
    pod: &PodInfo,
    snap: &Snapshot,
    nodes: &mut Vec<usize>,
    rejected: &mut Vec<(usize, Status)>,
    needs_look: impl Fn(usize, &NodeInfo) -> bool,
) {
    nodes.retain(|&i| {
        let ni = &snap.nodes[i];
        if !needs_look(i, ni) {
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
