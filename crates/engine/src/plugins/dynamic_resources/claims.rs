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

/// One entry of the pod's request mappings: (container, resource, request).
pub type Mapping = (String, String, String);

/// One request of the special claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtendedRequest {
    /// `container-<i>-request-<j>`: the container's index in initContainers
    /// followed by containers, the resource's among its sorted request names.
    pub name: String,
    /// The backing class.
    pub class: String,
    /// Devices.
    pub count: i64,
}

/// The special claim's requests for `resources` (extended resource, backing
/// class, pod-level count) and the pod's request mappings (container,
/// resource, request), as upstream lays them out: for each resource in
/// name order, one request per long-lived container (a regular container
/// or a sidecar) for what it asks; a short-lived init container first
/// reuses the requests of the long-lived containers that come after it and
/// asks only for the rest; of the init containers' own requests only the
/// largest is kept, and they all map to it (they never run at once).
/// Requests are sorted by name. A pod compiled without per-container data
/// gets one request per resource for the pod's total, mapped to every
/// container asking for it.
pub fn extended_layout(pod: &PodInfo, resources: &[(String, String, i64)]) -> (Vec<ExtendedRequest>, Vec<Mapping>) {
    let mut sorted: Vec<&(String, String, i64)> = resources.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let (mut requests, mut mappings) = (Vec::new(), Vec::new());
    if pod.extended_containers.is_empty() {
        for (j, (resource, class, count)) in sorted.into_iter().enumerate() {
            let name = format!("container-0-request-{j}");
            mappings.push((String::new(), resource.clone(), name.clone()));
            requests.push(ExtendedRequest { name, class: class.clone(), count: *count });
        }
        return (requests, mappings);
    }
    for (resource, class, _) in sorted {
        let asks = |short: bool| {
            pod.extended_containers
                .iter()
                .filter(move |c| c.short_lived == short)
                .filter_map(move |c| c.resources.iter().find(|r| &r.0 == resource).map(|r| (c, format!("container-{}-request-{}", c.index, r.1), r.2)))
        };
        let long: Vec<_> = asks(false).collect();
        for (c, name, count) in &long {
            mappings.push((c.name.clone(), resource.clone(), name.clone()));
            requests.push(ExtendedRequest { name: name.clone(), class: class.clone(), count: *count });
        }
        let mut short_maps: Vec<Mapping> = Vec::new();
        let mut short_names: Vec<String> = Vec::new();
        let mut largest: Option<ExtendedRequest> = None;
        for (c, name, wanted) in asks(true) {
            let mut have = 0;
            for (_, reused, count) in long.iter().filter(|(l, _, _)| l.index > c.index) {
                have += count;
                short_maps.push((c.name.clone(), resource.clone(), reused.clone()));
                if have >= wanted {
                    break;
                }
            }
            if have >= wanted {
                continue;
            }
            short_maps.push((c.name.clone(), resource.clone(), name.clone()));
            short_names.push(name.clone());
            if largest.as_ref().is_none_or(|l| l.count < wanted - have) {
                largest = Some(ExtendedRequest { name, class: class.clone(), count: wanted - have });
            }
        }
        if let Some(l) = &largest {
            for m in &mut short_maps {
                if short_names.contains(&m.2) {
                    m.2.clone_from(&l.name);
                }
            }
        }
        requests.extend(largest);
        mappings.append(&mut short_maps);
    }
    requests.sort_by(|a, b| a.name.cmp(&b.name));
    (requests, mappings)
}

/// The special claim for `resources` ([`extended_layout`]).
pub fn extended_claim(pod: &PodInfo, resources: &[(String, String, i64)]) -> Option<ClaimView> {
    let requests = extended_layout(pod, resources)
        .0
        .into_iter()
        .map(|r| res::DeviceRequest {
            name: r.name,
            exactly: Some(res::ExactDeviceRequest { device_class_name: r.class, allocation_mode: Some("ExactCount".into()), count: Some(r.count), ..Default::default() }),
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
    state.insert(super::PreFiltered);
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
        let allocated_score = c.allocation.as_ref().map_or(0, |a| super::allocated_score(&view, a));
        states.push(PodClaimState { key: c.key(), name: c.name.clone(), uid: c.uid.clone(), allocated, view, reserved_only_for_pod, allocated_score, binding_failure: c.binding_failure.clone() });
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

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::pod::ContainerExtended;

    fn container(index: usize, name: &str, short_lived: bool, ridx: usize, count: i64) -> ContainerExtended {
        ContainerExtended { index, name: name.into(), short_lived, resources: vec![("example.com/gpu".into(), ridx, count)] }
    }

    type Pairs<B> = Vec<(String, B)>;

    fn layout(containers: Vec<ContainerExtended>) -> (Pairs<i64>, Pairs<String>) {
        let pod = PodInfo { extended_containers: containers, ..Default::default() };
        let (requests, mappings) = extended_layout(&pod, &[("example.com/gpu".into(), "gpu".into(), 99)]);
        assert!(requests.iter().all(|r| r.class == "gpu") && mappings.iter().all(|m| m.1 == "example.com/gpu"));
        (requests.into_iter().map(|r| (r.name, r.count)).collect(), mappings.into_iter().map(|m| (m.0, m.2)).collect())
    }

    fn pairs<B: Copy>(v: &[(&str, B)]) -> Vec<(String, B)> {
        v.iter().map(|(a, b)| (a.to_string(), *b)).collect()
    }

    fn names(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    /// Upstream `createRequestsAndMappings`: one request per long-lived
    /// container; an init container reuses the later containers' requests
    /// and asks for the rest; of the init containers' own requests only the
    /// largest stays, and every init container maps to it.
    #[test]
    fn the_special_claim_has_a_request_per_container_as_upstream() {
        // Two containers: a request each, no sharing.
        let (r, m) = layout(vec![container(0, "a", false, 0, 1), container(1, "b", false, 1, 2)]);
        assert_eq!(r, pairs(&[("container-0-request-0", 1), ("container-1-request-1", 2)]));
        assert_eq!(m, names(&[("a", "container-0-request-0"), ("b", "container-1-request-1")]));
        // An init container wanting 2 reuses main's 1 and asks for 1 more.
        let (r, m) = layout(vec![container(0, "init", true, 0, 2), container(1, "main", false, 1, 1)]);
        assert_eq!(r, pairs(&[("container-0-request-0", 1), ("container-1-request-1", 1)]));
        assert_eq!(m, names(&[("main", "container-1-request-1"), ("init", "container-1-request-1"), ("init", "container-0-request-0")]));
        // An init container that the later requests cover asks for nothing.
        let (r, m) = layout(vec![container(0, "i0", true, 0, 3), container(1, "i1", true, 0, 1), container(2, "main", false, 0, 1)]);
        assert_eq!(r, pairs(&[("container-0-request-0", 2), ("container-2-request-0", 1)]));
        assert_eq!(m, names(&[("main", "container-2-request-0"), ("i0", "container-2-request-0"), ("i0", "container-0-request-0"), ("i1", "container-2-request-0")]));
        // Two init containers with requests of their own: only the largest stays.
        let (r, m) = layout(vec![container(0, "i0", true, 0, 2), container(1, "i1", true, 0, 3)]);
        assert_eq!(r, pairs(&[("container-1-request-0", 3)]));
        assert_eq!(m, names(&[("i0", "container-1-request-0"), ("i1", "container-1-request-0")]));
        // A sidecar before the init container is long-lived but not reusable by it.
        let (r, _) = layout(vec![container(0, "side", false, 0, 1), container(1, "init", true, 0, 1)]);
        assert_eq!(r, pairs(&[("container-0-request-0", 1), ("container-1-request-0", 1)]));
    }
}
