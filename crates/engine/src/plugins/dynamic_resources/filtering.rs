//! Filter and Score (upstream `Filter`, `filterExtendedResources`, `Score`).

use std::sync::Arc;

use berth_dra::allocator::DEFAULT_MAX_STEPS;
use berth_dra::{prepare, AllocateInput, ClaimView, NodeRef, NodeVerdict, Prepared};

use super::Found;
use berth_model::{NodeInfo, PodInfo};

use super::claims::extended_claim;
use super::{subrequest_score, NodeAllocation, PreFiltered, State};
use crate::framework::{Code, CycleState, DeallocateClaim, NodeStatuses, PostFilterResult, Reasons, Status};

/// Upstream's reason for an allocated claim whose node selector excludes the node.
pub const NOT_AVAILABLE: &str = "resourceclaim not available on the node";
/// Upstream's reason when the allocator finds no solution on the node.
pub const CANNOT_ALLOCATE: &str = "cannot allocate all claims";

/// What the node can offer, or the status that rejects it.
pub fn filter(state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
    let Some(s) = state.get::<State>() else { return Status::success() };
    let labels = &node.node.labels;
    // Every allocated claim the node cannot use is remembered (PostFilter):
    // one whose node selector excludes the node, and (upstream's Filter with
    // DRADeviceBindingConditions, on by default in v1.37) one whose device
    // binding failed, which no node can use.
    let mut any = false;
    for (i, c) in s.claims.iter().enumerate() {
        let Some(allocated) = &c.allocated else { continue };
        let elsewhere = allocated.as_ref().is_some_and(|sel| !sel.matches(node.name(), labels));
        if elsewhere || c.binding_failure.is_some() {
            any = true;
            s.unavailable.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(i);
        }
    }
    if any {
        return Status::unresolvable(NOT_AVAILABLE);
    }
    // Extended resources the node lists are the device plugin's (NodeResourcesFit).
    let all_extended = s.extended.as_ref().is_none_or(|e| e.resources.iter().all(|(n, _, _)| node.allocatable.scalar(n) == 0));
    let n_claims = s.claims.iter().filter(|c| c.allocated.is_none()).count();
    let local: Option<(Arc<Prepared>, Option<Arc<ClaimView>>)> = if all_extended {
        s.prepared.clone().map(|p| (p, s.extended_view.clone()))
    } else {
        let needed: Vec<(String, String, i64)> = match &s.extended {
            Some(e) => e.resources.iter().filter(|(n, _, _)| node.allocatable.scalar(n) == 0).cloned().collect(),
            None => Vec::new(),
        };
        let unallocated: Vec<&ClaimView> = s.claims.iter().filter(|c| c.allocated.is_none()).map(|c| &*c.view).collect();
        let ext = if needed.is_empty() { None } else { extended_claim(pod, &needed).map(Arc::new) };
        let mut views = unallocated.clone();
        if let Some(v) = &ext {
            views.push(v);
        }
        if views.is_empty() {
            None
        } else {
            match prepare(&views, &s.classes, &s.cel, s.admin_access) {
                Ok(p) => Some((Arc::new(p), ext)),
                Err(e) => return Status::error(e.to_string()),
            }
        }
    };
    let Some((prepared, ext_view)) = local else {
        record(s, node.name(), Found::default());
        return Status::success();
    };
    let input = AllocateInput { node: NodeRef { name: node.name(), labels }, inventory: &s.inventory, in_use: &s.in_use, max_steps: DEFAULT_MAX_STEPS };
    match prepared.allocate_compact(input) {
        Err(e) => Status::error(e.to_string()),
        Ok(NodeVerdict::CannotAllocate) => Status::unresolvable(CANNOT_ALLOCATE),
        Ok(NodeVerdict::InvalidPools) => Status::unresolvable("invalid resource pools were encountered"),
        Ok(NodeVerdict::WorkLimit) => Status::unresolvable("timed out trying to allocate devices"),
        Ok(NodeVerdict::Allocated(sol)) => {
            record(s, node.name(), Found { prepared: Some(prepared), solution: Some(sol), n_claims, ext_view });
            Status::success()
        }
    }
}

fn record(s: &State, node: &str, a: Found) {
    let mut m = s.by_node.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    m.insert(node.to_string(), a);
}

/// The node's allocation as Filter found it (made from the compact
/// solution Filter kept: only the node that is reserved or explained pays
/// for the allocation results).
pub fn allocation(state: &CycleState, node: &str) -> Option<NodeAllocation> {
    let s = state.get::<State>()?;
    let m = s.by_node.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let f = m.get(node)?;
    let (Some(p), Some(sol)) = (&f.prepared, &f.solution) else { return Some(NodeAllocation::default()) };
    let mut all = p.materialize(sol, &s.inventory, node);
    let extended = if all.len() > f.n_claims { all.pop().zip(f.ext_view.clone()) } else { None };
    Some(NodeAllocation { claims: all, extended })
}

/// Upstream's Score (`Score` and `computeScore` in
/// pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go,
/// v1.37): 0 on a node where Filter allocated nothing (no claim to allocate
/// this cycle); otherwise, over every claim of the pod, for each
/// firstAvailable request, 8 minus the index of the subrequest its devices
/// came from: on this node for the claims allocated this cycle, in
/// status.allocation for the claims allocated before. The raw sum is not
/// capped: NormalizeScore scales it. A node whose Filter verdict this cycle
/// reused (opportunistic batching) is allocated on here first.
pub fn score(state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
    let Some(s) = state.get::<State>() else { return 0 };
    if s.prepared.is_none() {
        return 0;
    }
    let known = s.by_node.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains_key(node.name());
    if !known {
        // Its verdict was reused: the same allocation as the pod that
        // computed it, since nothing it read changed.
        let _ = filter(state, pod, node);
    }
    let m = s.by_node.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(found) = m.get(node.name()) else { return 0 };
    let before: i64 = s.claims.iter().map(|c| c.allocated_score).sum();
    let Some(sol) = found.solution.as_ref() else { return before };
    let now: i64 = sol
        .chosen_subrequests()
        .iter()
        .take(found.n_claims)
        .flat_map(|c| c.iter())
        .flatten()
        .map(|&i| subrequest_score(i))
        .sum();
    before + now
}

/// Can Score give any node more than 0 this cycle? Only when something is
/// allocated (upstream keeps no node allocation otherwise) and some claim
/// has a firstAvailable request, unallocated or allocated from one.
pub fn may_score(s: &State) -> bool {
    s.prepared.is_some() && s.claims.iter().any(|c| c.allocated_score > 0 || (c.allocated.is_none() && c.view.requests.iter().any(|r| r.first_available)))
}

/// Upstream's PostFilter (`PostFilter` and `deallocateOrDeletePodClaims`
/// in pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go,
/// v1.37): no node fits. One allocated claim that some node found
/// unavailable and that is reserved for no one but this pod is deallocated
/// (the lowest index; upstream picks one at random), so that the next
/// attempt may allocate it where the pod fits: Unschedulable, "deallocation
/// of ResourceClaim completed". Otherwise Unschedulable without a reason
/// (v1.34's "no new claims to deallocate" and "still not schedulable" are
/// gone in v1.37), so the failure message says nothing of this plugin.
///
/// When the plugin's PreFilter never ran (an earlier PreFilter rejected the
/// pod), upstream finds no state of its own and answers with that error,
/// "not found", which ends the PostFilter run and the message with it.
pub fn post_filter(state: &CycleState, pod: &PodInfo) -> (Status, PostFilterResult) {
    if state.get::<PreFiltered>().is_none() {
        return (Status::error(STATE_NOT_FOUND), PostFilterResult::default());
    }
    let silent = || Status { code: Code::Unschedulable, reasons: Reasons::new(), plugin: "" };
    let Some(s) = state.get::<State>().filter(|s| !s.claims.is_empty()) else {
        return (silent(), PostFilterResult::default());
    };
    let unavailable = s.unavailable.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    for i in unavailable {
        let Some(c) = s.claims.get(i).filter(|c| c.reserved_only_for_pod) else { continue };
        let d = DeallocateClaim { namespace: pod.namespace.clone(), name: c.name.clone(), uid: c.uid.clone(), pod_uid: pod.uid.clone() };
        return (Status::unschedulable(DEALLOCATED), PostFilterResult { deallocations: vec![d], ..Default::default() });
    }
    (silent(), PostFilterResult::default())
}

/// Upstream's `fwk.ErrNotFound` text: what reading the plugin's cycle state
/// gives when its PreFilter did not run.
pub const STATE_NOT_FOUND: &str = "not found";

/// berth's sentence naming the claims that kept the pod out where this
/// plugin rejected nodes (upstream names none, and a user is left to guess
/// which of the pod's claims to look at): the unallocated claims when some
/// node could not allocate them, the allocated ones when some node could
/// not use them, with the driver's word when their binding failed. Kept
/// beside the failure message (explain's `detail`), which stays upstream's.
pub fn failure_detail(state: &CycleState, statuses: &NodeStatuses) -> Option<String> {
    let claims = &state.get::<State>()?.claims;
    let rejected = |reason: &str| statuses.statuses.iter().flatten().any(|s| s.reasons.iter().any(|r| r == reason));
    let keys = |allocated: bool| claims.iter().filter(|c| c.allocated.is_some() == allocated).map(|c| c.key.as_str()).collect::<Vec<_>>();
    let noun = |n: usize| if n == 1 { "ResourceClaim" } else { "ResourceClaims" };
    let mut parts = Vec::new();
    let unallocated = keys(false);
    if !unallocated.is_empty() && rejected(CANNOT_ALLOCATE) {
        parts.push(format!("{} {} cannot be allocated on any node that passed the other filters", noun(unallocated.len()), unallocated.join(", ")));
    }
    let allocated = keys(true);
    if !allocated.is_empty() && rejected(NOT_AVAILABLE) {
        parts.push(format!("allocated {} {} cannot be used on the nodes that passed the other filters", noun(allocated.len()), allocated.join(", ")));
        for c in claims {
            if let Some(why) = &c.binding_failure {
                parts.push(format!("ResourceClaim {}: {why}", c.key));
            }
        }
    }
    (!parts.is_empty()).then(|| format!("{}.", parts.join("; ")))
}

/// PostFilter's message when it deallocated a claim.
pub const DEALLOCATED: &str = "deallocation of ResourceClaim completed";
