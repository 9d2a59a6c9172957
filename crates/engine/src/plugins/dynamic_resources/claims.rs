//! PreFilter: the pod's claims (upstream `foreachPodResourceClaim` and
//! `PreFilter`), the extended resources a DeviceClass backs, and the
//! allocator prepared once for every node.

use std::sync::{Arc, Mutex};

use berth_dra::{prepare, AllocError, ClaimView};
use berth_model::pod::ClaimSource;
use berth_model::resources::is_extended;
use berth_model::selector::NodeSelector;
use berth_model::PodInfo;
use k8s_openapi::api::resource::v1 as res;

use super::{ExtendedState, PodClaimState, State};
use crate::cache::devices::{Claim, Devices};
use crate::cache::Snapshot;
use crate::framework::{CycleState, Status};

/// Upstream `resourceapi.ResourceClaimReservedForMaxSize`.
pub const RESERVED_FOR_MAX_SIZE: usize = 256;

/// The namespace label that allows admin access.
pub const ADMIN_ACCESS_LABEL: &str = "resource.kubernetes.io/admin-access";

/// The pod's claims, or why the pod cannot be scheduled now (upstream's
/// messages; UnschedulableAndUnresolvable).
pub fn pod_claims<'a>(pod: &PodInfo, devices: &'a Devices) -> Result<Vec<&'a Claim>, String> {
    let mut out = Vec::with_capacity(pod.resource_claims.len());
    for pc in &pod.resource_claims {
        let (name, must_own) = match &pc.source {
            ClaimSource::Named(n) => (n.as_str(), false),
            ClaimSource::FromTemplate(Some(Some(n))) => (n.as_str(), true),
            // No claim is needed for this pod claim.
            ClaimSource::FromTemplate(Some(None)) => continue,
            ClaimSource::FromTemplate(None) => return Err(format!("pod \"{}/{}\": ResourceClaim not created yet", pod.namespace, pod.name)),
            ClaimSource::Unsupported => {
                return Err(format!("pod \"{}/{}\", spec.resourceClaim {:?}: none of the supported fields are set", pod.namespace, pod.name, pc.name));
            }
        };
        let Some(claim) = devices.claim(&pod.namespace, name) else {
            return Err(format!("resourceclaim.resource.k8s.io {name:?} not found"));
        };
        if claim.deleting {
            return Err(format!("resourceclaim {name:?} is being deleted"));
        }
        if must_own && claim.controller_uid.as_deref() != Some(pod.uid.as_str()) {
            return Err(format!("ResourceClaim {}/{} was not created for pod {}/{} (pod is not owner)", claim.namespace, claim.name, pod.namespace, pod.name));
        }
        out.push(claim);
    }
    Ok(out)
}

/// A resource name DRA may back (upstream `IsDRAExtendedResourceName`): an
/// extended resource (`example.com/gpu`), or the implicit name of a class,
/// `deviceclass.resource.kubernetes.io/<class>`, which is no extended
/// resource for the API (a `kubernetes.io` domain) but is one for DRA.
pub fn is_dra_extended(name: &str) -> bool {
    is_extended(name) || name.starts_with(crate::cache::devices::IMPLICIT_EXTENDED_RESOURCE_PREFIX)
}

/// The pod's extended resources that no node lists but a DeviceClass backs
/// candidates: every extended resource with a backing class.
fn extended_resources(pod: &PodInfo, devices: &Devices) -> Vec<(String, String, i64)> {
    pod.requests
        .scalar
        .iter()
        .filter(|(n, v)| *v > 0 && is_dra_extended(n))
        .filter_map(|(n, v)| devices.class_for_extended_resource(n).map(|c| (n.clone(), c.name.clone(), *v)))
        .collect()
}

/// The special claim for `resources` (upstream names its requests
/// `container-<i>-request-<j>`; berth sees the pod's summed requests, so
/// they are numbered in resource order).
pub fn extended_claim(pod: &PodInfo, resources: &[(String, String, i64)]) -> Option<ClaimView> {
    let requests = resources
        .iter()
        .enumerate()
        .map(|(j, (_, class, count))| res::DeviceRequest {
            name: format!("container-0-request-{j}"),
            exactly: Some(res::ExactDeviceRequest { device_class_name: class.clone(), allocation_mode: Some("ExactCount".into()), count: Some(*count), ..Default::default() }),
            ..Default::default()
        })
        .collect();
    let mut c = res::ResourceClaim::default();
    c.metadata.namespace = Some(pod.namespace.clone());
    c.metadata.name = Some(format!("{}-extended-resources", pod.name));
    c.spec = Some(res::ResourceClaimSpec { devices: Some(res::DeviceClaim { requests: Some(requests), ..Default::default() }) });
    ClaimView::from_api(&c).ok()
}

fn class_check(view: &ClaimView, devices: &Devices) -> Result<(), String> {
    for r in &view.requests {
        for a in &r.alternatives {
            if devices.classes().get(&a.class).is_none() {
                let name = if r.first_available { format!("{}/{}", r.name, a.name) } else { r.name.clone() };
                return Err(format!("request {name}: device class {} does not exist", a.class));
            }
        }
    }
    Ok(())
}

/// Upstream's PreFilter (see the module docs).
pub fn pre_filter(state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> Status {
    let devices = &snap.devices;
    let extended = if pod.requests.scalar.is_empty() { Vec::new() } else { extended_resources(pod, devices) };
    if pod.resource_claims.is_empty() && extended.is_empty() {
        return Status::skip();
    }
    let claims = match pod_claims(pod, devices) {
        Ok(c) => c,
        Err(m) => return Status::unresolvable(m),
    };
    if claims.is_empty() && extended.is_empty() {
        return Status::skip();
    }
    let mut states = Vec::with_capacity(claims.len());
    for c in &claims {
        let view = match &c.view {
            Ok(v) => v.clone(),
            Err(m) => return Status::unresolvable(format!("resourceclaim {}: {m}", c.key())),
        };
        let allocated = match &c.allocation {
            Some(a) => {
                if c.reserved_for.len() >= RESERVED_FOR_MAX_SIZE && !c.reserved_for_pod(&pod.uid) {
                    return Status::unresolvable("resourceclaim in use");
                }
                match &a.node_selector {
                    None => Some(None),
                    Some(ns) => match NodeSelector::compile(ns, "status.allocation.nodeSelector") {
                        Ok(s) => Some(Some(Arc::new(s))),
                        Err(m) => return Status::error(format!("resourceclaim {}: {m}", c.key())),
                    },
                }
            }
            None => {
                if let Err(m) = class_check(&view, devices) {
                    return Status::unresolvable(m);
                }
                None
            }
        };
        let reserved_only_for_pod = match c.reserved_for.as_slice() {
            [] => true,
            [only] => only.uid == pod.uid,
            _ => false,
        };
        states.push(PodClaimState { key: c.key(), name: c.name.clone(), uid: c.uid.clone(), allocated, view, reserved_only_for_pod });
    }
    let admin_access = snap.namespaces.get(&pod.namespace).and_then(|l| l.get(ADMIN_ACCESS_LABEL)).is_some_and(|v| v == "true");
    let extended_view = if extended.is_empty() { None } else { extended_claim(pod, &extended).map(Arc::new) };
    let mut to_allocate: Vec<&ClaimView> = states.iter().filter(|c| c.allocated.is_none()).map(|c| &*c.view).collect();
    if let Some(v) = &extended_view {
        to_allocate.push(v);
    }
    let prepared = if to_allocate.is_empty() {
        None
    } else {
        match prepare(&to_allocate, devices.classes(), devices.cel(), admin_access) {
            Ok(p) => Some(Arc::new(p)),
            Err(e @ AllocError::AdminAccessNotAllowed { .. }) => return Status::unresolvable(e.to_string()),
            Err(e) => return Status::error(e.to_string()),
        }
    };
    state.insert(State {
        claims: states,
        prepared,
        extended: (!extended.is_empty()).then_some(ExtendedState { resources: extended }),
        extended_view,
        inventory: devices.inventory().clone(),
        in_use: devices.in_use().clone(),
        classes: devices.classes().clone(),
        cel: devices.cel().clone(),
        admin_access,
        by_node: Arc::new(Mutex::new(Default::default())),
        unavailable: Arc::new(Mutex::new(Default::default())),
    });
    Status::success()
}
