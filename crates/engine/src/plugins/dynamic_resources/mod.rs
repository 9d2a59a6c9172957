//! DynamicResources (upstream `dynamicresources`, v1.37 default gates): the
//! pod's ResourceClaims get devices from ResourceSlices through berth's
//! structured allocator ([`berth_dra`]).
//!
//! - PreEnqueue ([`claims::pod_claims`]): a pod whose claim is missing, not
//!   generated yet, not owned by it or being deleted waits gated, with
//!   upstream's message, until a claim event (or an update of the pod) lets
//!   it in.
//! - PreFilter ([`claims`]) resolves the pod's claims again (the same checks
//!   as PreEnqueue, unresolvable, as upstream's PreFilter repeats them),
//!   checks the device classes, keeps allocated claims' node selectors and
//!   prepares the unallocated claims (and the special claim of extended
//!   resources a DeviceClass backs) once for every node.
//! - Filter ([`filtering`]) matches allocated claims' node selectors and
//!   refuses, on every node, an allocated claim whose device binding failed
//!   (a bindingFailureCondition True in status.devices; remembering the
//!   claims unavailable on some node, for PostFilter), then
//!   allocates on the node with the cache's inventory and devices in use
//!   (assumed allocations included); the node's allocation is kept for
//!   Reserve. An allocator error is an Error status: the attempt fails.
//! - PostFilter ([`filtering::post_filter`]): when no node fits, one
//!   allocated claim that was unavailable on some node and is reserved for
//!   no one but this pod is deallocated ([`DeallocateClaim`]; the lowest
//!   index where upstream picks at random), so that the next attempt may
//!   allocate it elsewhere.
//! - Score: with firstAvailable requests, 8 minus the chosen subrequest's
//!   index, summed over the requests of all the pod's claims (those
//!   allocated already count their allocation's subrequests), on the nodes
//!   where Filter allocated something; NormalizeScore scales the raw sums
//!   to 0..=100 (upstream's DefaultNormalizeScore, not reversed), so that a
//!   node with the best choices gets 100 whatever the number of requests.
//! - Reserve/PreBind ([`binding`]): the node's allocations are assumed
//!   through the framework's assume step, and PreBind describes the claim
//!   writes ([`ApiWrite::AllocateClaim`](crate::framework::ApiWrite)).
//!
//! Every DRA rejection is UnschedulableAndUnresolvable: preemption evicts no
//! pod to free devices.
//!
//! [`DeallocateClaim`]: crate::framework::DeallocateClaim

pub mod binding;
pub mod claims;
pub mod explain;
pub mod filtering;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use berth_dra::cel::CelCache;
use berth_dra::allocator::Solution;
use berth_dra::{ClaimAllocation, ClaimView, Classes, InUse, Inventory, Prepared};
use berth_model::selector::NodeSelector;
use berth_model::{NodeInfo, PodInfo};

use crate::cache::Snapshot;
use super::helper::default_normalize;
use crate::framework::{CycleState, Events, FilterPlugin, Framework, NodeScore, NodeStatuses, Plugin, PostFilterPlugin, PostFilterResult, PreBindPlugin, PreEnqueuePlugin, PreFilterNodes, PreFilterPlugin, PreScorePlugin, ReservePlugin, ScorePlugin, Status};

/// The plugin's name.
pub const NAME: &str = "DynamicResources";

/// Highest per-request score (upstream: 8 minus the subrequest index).
pub const MAX_SUBREQUEST_SCORE: i64 = 8;

/// Written first by PreFilter, as upstream writes its (empty) state before
/// anything else: PostFilter tells "PreFilter never ran" from "no claims".
#[derive(Clone, Copy, Debug)]
pub struct PreFiltered;

/// What choosing the `index`th subrequest of a firstAvailable list is worth:
/// upstream's `FirstAvailableDeviceRequestMaxSize` (8) minus the index.
pub(crate) fn subrequest_score(index: usize) -> i64 {
    (MAX_SUBREQUEST_SCORE - i64::try_from(index).unwrap_or(MAX_SUBREQUEST_SCORE)).max(0)
}

/// An allocated claim's part of upstream's `computeScore`: the subrequests
/// named by its allocation's results (`request/subrequest`), each counted
/// once per request, worth [`subrequest_score`] of its index in the
/// request's firstAvailable list.
pub fn allocated_score(view: &ClaimView, allocation: &k8s_openapi::api::resource::v1::AllocationResult) -> i64 {
    let results = allocation.devices.as_ref().and_then(|d| d.results.as_deref()).unwrap_or_default();
    let used: std::collections::HashSet<&str> = results.iter().map(|r| r.request.as_str()).filter(|r| r.contains('/')).collect();
    let mut total = 0;
    for r in view.requests.iter().filter(|r| r.first_available) {
        for (i, sub) in r.alternatives.iter().enumerate() {
            if used.contains(format!("{}/{}", r.name, sub.name).as_str()) {
                total += subrequest_score(i);
            }
        }
    }
    total
}

/// The DynamicResources plugin.
#[derive(Debug, Default)]
pub struct DynamicResources;

/// One claim of the pod, as PreFilter found it.
#[derive(Clone, Debug)]
pub struct PodClaimState {
    /// namespace/name.
    pub key: String,
    /// The claim's name.
    pub name: String,
    /// metadata.uid.
    pub uid: String,
    /// Allocated already: where it can be used (None: anywhere).
    pub allocated: Option<Option<Arc<NodeSelector>>>,
    /// The claim's view (unallocated claims are allocated from it).
    pub view: Arc<ClaimView>,
    /// status.reservedFor is empty or holds only this pod (PostFilter may
    /// deallocate the claim).
    pub reserved_only_for_pod: bool,
    /// An allocated claim's part of Score: what its firstAvailable
    /// subrequests in status.allocation are worth ([`allocated_score`]);
    /// 0 for an unallocated claim.
    pub allocated_score: i64,
    /// An allocated claim whose device binding failed (DRADeviceBindingConditions,
    /// [`crate::cache::devices::binding_failure`]): why. Filter finds it
    /// unavailable on every node.
    pub binding_failure: Option<String>,
}

/// The special claim for extended resources a DeviceClass backs.
#[derive(Clone, Debug)]
pub struct ExtendedState {
    /// (resource name, class name, quantity) of each backed resource.
    pub resources: Vec<(String, String, i64)>,
}

/// Per-cycle state, written by PreFilter.
#[derive(Clone)]
pub struct State {
    /// The pod's claims, in spec order.
    pub claims: Vec<PodClaimState>,
    /// The unallocated claims, prepared (None: nothing to allocate).
    pub prepared: Option<Arc<Prepared>>,
    /// Extended resources backed by a class (None: none).
    pub extended: Option<ExtendedState>,
    /// The extended claim's view with all its resources.
    pub extended_view: Option<Arc<ClaimView>>,
    /// Slices and taint rules.
    pub inventory: Arc<Inventory>,
    /// Devices in use.
    pub in_use: Arc<InUse>,
    /// Classes (to prepare a node's partial extended claim).
    pub classes: Arc<Classes>,
    /// Compiled selectors.
    pub cel: Arc<CelCache>,
    /// Whether the namespace allows admin access.
    pub admin_access: bool,
    /// Filter's result per node, compact ([`filtering::allocation`] makes
    /// the [`NodeAllocation`]).
    pub by_node: Arc<Mutex<HashMap<String, Found>>>,
    /// Indexes (into `claims`) of allocated claims that some node's Filter
    /// found unavailable (upstream's `unavailableClaims`), for PostFilter.
    pub unavailable: Arc<Mutex<BTreeSet<usize>>>,
}

/// What Filter found on one node, as the allocator left it.
#[derive(Debug, Default)]
pub struct Found {
    /// What was allocated from (None: nothing to allocate on this node).
    pub prepared: Option<Arc<Prepared>>,
    /// The solution.
    pub solution: Option<Solution>,
    /// How many of the solution's claims are the pod's unallocated claims
    /// (one more is the extended-resource claim).
    pub n_claims: usize,
    /// The extended-resource claim's view, when it was allocated from.
    pub ext_view: Option<Arc<ClaimView>>,
}

/// What Filter found on one node: the allocations of the unallocated claims
/// (in order), then the extended claim's when there is one.
#[derive(Clone, Debug, Default)]
pub struct NodeAllocation {
    /// One per unallocated claim, in order.
    pub claims: Vec<ClaimAllocation>,
    /// The extended-resource claim's, with its view.
    pub extended: Option<(ClaimAllocation, Arc<ClaimView>)>,
}

impl Plugin for DynamicResources {
    fn explain_rejection(&self, state: &CycleState, snap: &Snapshot, node: &NodeInfo, status: &Status) -> Vec<String> {
        if status.reasons.iter().any(|r| r == filtering::CANNOT_ALLOCATE) {
            explain::node_reasons(state, snap, node)
        } else {
            Vec::new()
        }
    }

    fn device_choices(&self, state: &CycleState, node: Option<&str>) -> Vec<crate::framework::DeviceChoice> {
        match node {
            Some(n) => explain::node_allocations(state, n),
            None => explain::reserved_allocations(state),
        }
    }

    fn name(&self) -> &'static str {
        NAME
    }

    /// The node's verdict and score are a function of what the pod's
    /// unallocated claims ask for (signed by [`Plugin::sign_pod`]) and of
    /// the node: its labels and allocatable (its object), and the devices of
    /// the pools that serve it, which the snapshot's device journal follows.
    fn reusable(&self) -> bool {
        true
    }

    /// What the pod's claims ask for: per claim, the hash of its requests and
    /// constraints ([`berth_dra::ClaimView::spec_hash`]; not its name, so that
    /// the claims one template made for several pods sign alike), and
    /// whether the namespace allows admin access. Extended resources are in
    /// the pod's own signature (its requests), the classes that back them in
    /// the snapshot's layout. A pod with an allocated claim is not signed:
    /// its Filter reads the claim's allocation and remembers, for PostFilter,
    /// the nodes where it is unavailable.
    fn sign_pod(&self, state: &CycleState, _pod: &PodInfo, _snap: &Snapshot) -> Option<u64> {
        let Some(s) = state.get::<State>() else { return Some(0) };
        if s.claims.iter().any(|c| c.allocated.is_some()) {
            return None;
        }
        let mut h = std::hash::DefaultHasher::new();
        s.admin_access.hash(&mut h);
        for c in &s.claims {
            c.view.spec_hash.hash(&mut h);
        }
        Some(h.finish().max(1))
    }

    fn events(&self) -> Events {
        // Upstream: Node Add|UpdateNodeLabel|UpdateNodeTaint, ResourceClaim
        // Add|Update, the pod's generated claims, DeviceClass Add|Update,
        // ResourceSlice Add|Update.
        Events::NODE_ADD
            .or(Events::NODE_LABEL)
            .or(Events::NODE_TAINT)
            .or(Events::POD_SELF)
            .or(Events::RESOURCE_CLAIM)
            .or(Events::DEVICE_CLASS)
            .or(Events::RESOURCE_SLICE)
    }

    fn failure_detail(&self, state: &CycleState, _pod: &PodInfo, statuses: &NodeStatuses) -> Option<String> {
        filtering::failure_detail(state, statuses)
    }
}

impl PreEnqueuePlugin for DynamicResources {
    fn pre_enqueue(&self, pod: &PodInfo, cluster: Option<&Snapshot>) -> Status {
        let Some(snap) = cluster else { return Status::success() };
        if pod.resource_claims.is_empty() {
            return Status::success();
        }
        match claims::pod_claims(pod, &snap.devices) {
            Ok(_) => Status::success(),
            Err(m) => Status::unresolvable(m),
        }
    }
}

impl PreFilterPlugin for DynamicResources {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        (claims::pre_filter(state, pod, snap), None)
    }
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        filtering::filter(state, pod, node)
    }
}

impl PostFilterPlugin for DynamicResources {
    fn post_filter(&self, _fw: &Framework, state: &CycleState, pod: &Arc<PodInfo>, _snap: &Snapshot, _statuses: &NodeStatuses) -> (Status, PostFilterResult) {
        filtering::post_filter(state, pod)
    }
}

impl PreScorePlugin for DynamicResources {
    /// Upstream has no PreScore: its Score gives 0 to every node when
    /// nothing is allocated in the cycle or no claim has a firstAvailable
    /// request, and 0 everywhere normalizes to 0, as a skipped plugin scores.
    fn pre_score(&self, state: &mut CycleState, _pod: &PodInfo, _nodes: &[usize], _snap: &Snapshot) -> Status {
        if state.get::<State>().is_some_and(filtering::may_score) { Status::success() } else { Status::skip() }
    }
}

impl ScorePlugin for DynamicResources {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(filtering::score(state, pod, node))
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn default_normalized(&self) -> Option<bool> {
        Some(false)
    }

    /// Upstream `NormalizeScore`: `DefaultNormalizeScore(MaxNodeScore, false, scores)`.
    fn normalize_score(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore], _: &Snapshot) -> Status {
        default_normalize(scores, false);
        Status::success()
    }
}

impl ReservePlugin for DynamicResources {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        binding::reserve(state, pod, node)
    }

    fn unreserve(&self, state: &mut CycleState, _pod: &PodInfo, _node: &str) {
        state.reservations_mut().clear(NAME);
    }
}

impl PreBindPlugin for DynamicResources {
    fn pre_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        binding::pre_bind(state, pod, node)
    }
}
