//! Reserve, Unreserve and PreBind (upstream `Reserve`, `Unreserve`,
//! `PreBind`/`bindClaim`).
//!
//! Reserve records the node's allocations ([`ClaimDecisions`]) as a
//! [`Reservation`]: the framework's assume step marks the claims allocated
//! and reserved for the pod in the snapshot and their devices in use, so a
//! later pod sees them taken and a later pod naming the same claim follows
//! its allocation; forgetting the pod reverts it. PreBind describes the claim
//! writes ([`ApiWrite::AllocateClaim`], [`ApiWrite::CreateExtendedResourceClaim`]).

use std::time::Duration;

use berth_dra::DeviceResult;
use k8s_openapi::api::resource::v1 as res;

use super::filtering::allocation;
use super::{State, NAME};
use crate::cache::devices::Consumer;
use crate::cache::Snapshot;
use crate::framework::{ApiWrite, CycleState, PreBindWork, Reservation, Status};
use berth_model::PodInfo;

/// Upper bound of the claim writes (upstream binds claims within the
/// binding cycle's context; 10 minutes as bindTimeoutSeconds).
pub const PRE_BIND_TIMEOUT: Duration = Duration::from_secs(600);

/// One claim's decision.
#[derive(Clone, Debug)]
pub struct ClaimDecision {
    /// namespace/name.
    pub key: String,
    /// The claim's name.
    pub name: String,
    /// metadata.uid.
    pub uid: String,
    /// The new allocation (None: allocated already, only reserved).
    pub allocation: Option<(Vec<DeviceResult>, res::AllocationResult)>,
}

/// What Reserve decided for one pod on one node.
#[derive(Clone, Debug)]
pub struct ClaimDecisions {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod_name: String,
    /// The pod's uid.
    pub pod_uid: String,
    /// The node.
    pub node: String,
    /// The pod's claims, in spec order.
    pub claims: Vec<ClaimDecision>,
    /// The extended-resource claim's allocation and spec, when there is one.
    pub extended: Option<(Vec<DeviceResult>, res::AllocationResult, res::ResourceClaimSpec)>,
    /// (container, extended resource, request) of the extended-resource claim.
    pub request_mappings: Vec<(String, String, String)>,
}

impl ClaimDecisions {
    fn consumer(&self) -> Consumer {
        Consumer { resource: "pods".into(), name: self.pod_name.clone(), uid: self.pod_uid.clone() }
    }
}

impl Reservation for ClaimDecisions {
    fn assume(&self, snap: &mut Snapshot, pod_uid: &str) {
        let who = Consumer { uid: pod_uid.to_string(), ..self.consumer() };
        for c in &self.claims {
            snap.devices.assume_claim(&c.key, &who, c.allocation.as_ref().map(|(r, a)| (r.as_slice(), a.clone())));
        }
        if let Some((r, _, _)) = &self.extended {
            snap.devices.assume_extended(pod_uid, r);
        }
    }

    fn forget(&self, snap: &mut Snapshot, pod_uid: &str) {
        for c in self.claims.iter().rev() {
            snap.devices.forget_claim(&c.key, pod_uid);
        }
        snap.devices.forget_extended(pod_uid);
    }
}

/// The decisions Reserve recorded (None without claims, or after Unreserve).
pub fn reserved(state: &CycleState) -> Option<&ClaimDecisions> {
    state.reservations().get::<ClaimDecisions>(NAME)
}

/// Reserve: the node's allocations from Filter, as a reservation.
pub fn reserve(state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
    let Some(s) = state.get::<State>() else { return Status::success() };
    if s.claims.is_empty() && s.extended.is_none() {
        return Status::success();
    }
    let a = allocation(state, node);
    let needs = s.prepared.is_some();
    let Some(a) = a.or_else(|| (!needs).then(Default::default)) else {
        return Status::error(format!("no allocation found for node {node:?}"));
    };
    let mut fresh = a.claims.into_iter();
    let mut claims = Vec::with_capacity(s.claims.len());
    for c in &s.claims {
        let allocation = if c.allocated.is_some() {
            None
        } else {
            match fresh.next() {
                Some(ca) => Some((ca.results.clone(), ca.to_api())),
                None => return Status::error(format!("claim {}: no allocation found for node {node:?}", c.key)),
            }
        };
        claims.push(ClaimDecision { key: c.key.clone(), name: c.name.clone(), uid: c.uid.clone(), allocation });
    }
    let mut request_mappings = Vec::new();
    let extended = a.extended.map(|(ca, view)| {
        let spec = extended_spec(&view);
        // The node's claim asks only for what the node does not list as
        // allocatable: the mappings of the requests it has.
        let resources = s.extended.as_ref().map(|e| e.resources.as_slice()).unwrap_or_default();
        let (_, mappings) = super::claims::extended_layout(pod, resources);
        request_mappings = mappings.into_iter().filter(|m| view.requests.iter().any(|r| r.name == m.2)).collect();
        (ca.results.clone(), ca.to_api(), spec)
    });
    let d = ClaimDecisions { namespace: pod.namespace.clone(), pod_name: pod.name.clone(), pod_uid: pod.uid.clone(), node: node.to_string(), claims, extended, request_mappings };
    state.reservations_mut().record(NAME, d);
    Status::success()
}

fn extended_spec(view: &berth_dra::ClaimView) -> res::ResourceClaimSpec {
    let requests = view
        .requests
        .iter()
        .filter_map(|r| r.alternatives.first().map(|a| (r, a)))
        .map(|(r, a)| res::DeviceRequest {
            name: r.name.clone(),
            exactly: Some(res::ExactDeviceRequest {
                device_class_name: a.class.clone(),
                allocation_mode: Some("ExactCount".into()),
                count: match a.mode {
                    berth_dra::claims::AllocationMode::ExactCount(n) => Some(n),
                    _ => None,
                },
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    res::ResourceClaimSpec { devices: Some(res::DeviceClaim { requests: Some(requests), ..Default::default() }) }
}

/// PreBind: the claim writes for the reserved node.
pub fn pre_bind(state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
    let Some(d) = reserved(state).cloned() else { return Status::success() };
    if d.node != node {
        return Status::error(format!("no claim allocations found for node {node:?}"));
    }
    let mut writes = Vec::new();
    for c in &d.claims {
        let allocation = match &c.allocation {
            None => None,
            Some((_, a)) => match serde_json::to_value(a) {
                Ok(v) => Some(v),
                Err(e) => return Status::error(format!("claim {}: {e}", c.key)),
            },
        };
        writes.push(ApiWrite::AllocateClaim { namespace: d.namespace.clone(), name: c.name.clone(), uid: c.uid.clone(), allocation, pod_name: pod.name.clone(), pod_uid: pod.uid.clone() });
    }
    if let Some((_, alloc, spec)) = &d.extended {
        let claim = serde_json::json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": format!("{}-extended-resources-", pod.name),
                "namespace": d.namespace,
                "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": true, "blockOwnerDeletion": true}],
                "finalizers": ["resource.kubernetes.io/delete-protection"],
            },
            "spec": spec,
            "status": {
                "allocation": alloc,
                "reservedFor": [{"resource": "pods", "name": pod.name, "uid": pod.uid}],
            },
        });
        let request_mappings = d.request_mappings.clone();
        writes.push(ApiWrite::CreateExtendedResourceClaim { namespace: d.namespace.clone(), pod_name: pod.name.clone(), pod_uid: pod.uid.clone(), claim, request_mappings });
    }
    state.add_pre_bind_work(PreBindWork { plugin: NAME, writes, wait_for: vec![], timeout: PRE_BIND_TIMEOUT });
    Status::success()
}
