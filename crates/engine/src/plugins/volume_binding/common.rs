//! What VolumeBinding's extension points share: the cycle state PreFilter
//! writes and Filter, Score, Reserve and PreBind read (upstream
//! `volumebinding`'s `stateData` and `PodVolumes`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::cache::storage::{Capacity, Claim, ClaimRef, Class, Volume};

/// An unbound WaitForFirstConsumer claim with what Filter needs to decide it.
#[derive(Clone, Debug)]
pub(super) struct Delayed {
    pub(super) claim: Arc<Claim>,
    /// The selected node (assumed or annotated).
    pub(super) selected: Option<String>,
    pub(super) class: Arc<Class>,
    /// CSIStorageCapacities of the class when the driver tracks capacity and the claim asks for a size.
    pub(super) capacities: Option<Vec<Arc<Capacity>>>,
}

/// What the pod's volumes need on one node (upstream `PodVolumes`).
#[derive(Clone, Debug, Default)]
pub(super) struct NodeVolumes {
    /// Claims to bind to static PVs.
    pub(super) bindings: Vec<(Arc<Claim>, Arc<Volume>)>,
    /// Claims to provision, with the CSIStorageCapacity that admits them.
    pub(super) provisions: Vec<(Arc<Claim>, Option<Arc<Capacity>>)>,
}

/// A candidate PV with its claimRef as the cache sees it (assumptions included).
pub(super) type Candidate = (Arc<Volume>, Option<ClaimRef>);

/// The cycle state (upstream `stateData`).
#[derive(Clone, Debug, Default)]
pub(super) struct State {
    /// Fully bound claims with their PV (None: the PV does not exist).
    pub(super) bound: Vec<(Arc<Claim>, Option<Arc<Volume>>)>,
    /// Unbound WaitForFirstConsumer claims.
    pub(super) delayed: Vec<Delayed>,
    /// Candidate PVs per class, with their claimRef as the cache sees it (assumptions included).
    pub(super) candidates: HashMap<String, Vec<Candidate>>,
    /// Filter's findings per node name, shared by clones (as upstream's pointer state is).
    pub(super) by_node: Arc<Mutex<HashMap<String, NodeVolumes>>>,
    /// Every claim of the pod is fully bound.
    pub(super) all_bound_at_prefilter: bool,
}
