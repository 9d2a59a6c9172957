//! Dynamic resource allocation state as the DynamicResources plugin reads
//! it: ResourceSlices and DeviceTaintRules (the [`Inventory`]), DeviceClasses,
//! ResourceClaims by namespace/name, and the devices in use ([`InUse`]):
//! those of every claim's status.allocation plus the allocations the
//! scheduler has assumed but the API does not show yet.
//!
//! Assumed allocations (upstream's claim assume cache and in-flight
//! allocations) are kept per claim, with the claim as the API showed it:
//!
//! ```text
//!   assume(claim, allocation, pod) --> the claim reads as allocated and
//!                                      reserved for the pod; its devices
//!                                      are in use at once
//!   forget(claim, pod)             --> reverted (bind failed, pod left)
//!   a watched claim with an allocation --> the API's object supersedes the
//!                                      assumption
//! ```
//!
//! The inventory, the classes and the devices in use sit behind `Arc`s, so
//! that PreFilter hands them to Filter without a copy; a change made while
//! a cycle state still holds one copies that part once (copy on write).
//!
//! Every change that can change what a node offers a claim (a device taken
//! or given back, a slice, a taint rule, a class) is written to a journal of
//! the nodes it reaches ([`Devices::mark`], [`Devices::changed_since`]): a
//! device of a node-local pool reaches that node, anything else every node.
//! Opportunistic batching reads it to recompute only those nodes' verdicts.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use berth_dra::cel::CelCache;
use berth_dra::inventory::Reach;
use berth_dra::{ClaimView, Classes, ClassView, DeviceId, DeviceResult, InUse, Inventory};
use k8s_openapi::api::resource::v1 as res;
use thiserror::Error;

/// A DRA object that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// The object could not be compiled.
    #[error("{kind} {name}: {message}")]
    Malformed {
        /// Kind ("ResourceSlice", "DeviceClass", ...).
        kind: &'static str,
        /// Name (namespace/name for claims).
        name: String,
        /// Why.
        message: String,
    },
}

/// A consumer in a claim's status.reservedFor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumer {
    /// resource ("pods").
    pub resource: String,
    /// name.
    pub name: String,
    /// uid.
    pub uid: String,
}

/// A ResourceClaim as the plugin reads it.
#[derive(Clone, Debug)]
pub struct Claim {
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.uid.
    pub uid: String,
    /// metadata.resourceVersion (PreBind's writes are conditional on it).
    pub resource_version: String,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
    /// uid of the controller in metadata.ownerReferences.
    pub controller_uid: Option<String>,
    /// metadata.finalizers.
    pub finalizers: Vec<String>,
    /// status.reservedFor.
    pub reserved_for: Vec<Consumer>,
    /// status.allocation.
    pub allocation: Option<res::AllocationResult>,
    /// The compiled spec (an error names what cannot be read).
    pub view: Result<Arc<ClaimView>, String>,
    /// DRADeviceBindingConditions: an allocated device whose status shows
    /// one of its bindingFailureConditions as True ([`binding_failure`]):
    /// why, as upstream's `isClaimReadyForBinding` words it.
    pub binding_failure: Option<String>,
}

/// Upstream's `ErrDeviceBindingFailed` text.
pub const DEVICE_BINDING_FAILED: &str = "device binding failed";

/// Has the binding of the claim's allocated devices failed? Upstream's
/// `isClaimReadyForBinding` (pkg/scheduler/framework/plugins/dynamicresources/
/// dynamicresources.go, v1.37), of which only the failure matters to the
/// scheduler's Filter: the allocation's results are read in order, those
/// without bindingConditions skipped; a result whose device has no entry
/// in status.devices (same driver, pool and device), or whose
/// bindingConditions are not all True, ends the check (not ready, not
/// failed); before that, the first of its bindingFailureConditions whose
/// condition (same type) is True is the failure.
pub fn binding_failure(name: &str, status: &res::ResourceClaimStatus) -> Option<String> {
    let allocation = status.allocation.as_ref()?;
    let results = allocation.devices.as_ref().and_then(|d| d.results.as_deref()).unwrap_or_default();
    let devices = status.devices.as_deref().unwrap_or_default();
    for r in results {
        let wanted = r.binding_conditions.as_deref().unwrap_or_default();
        if wanted.is_empty() {
            continue;
        }
        let device = devices.iter().find(|d| d.driver == r.driver && d.pool == r.pool && d.device == r.device)?;
        let conditions = device.conditions.as_deref().unwrap_or_default();
        let find = |t: &str| conditions.iter().find(|c| c.type_ == t);
        for t in r.binding_failure_conditions.as_deref().unwrap_or_default() {
            if let Some(c) = find(t).filter(|c| c.status == "True") {
                return Some(format!("{DEVICE_BINDING_FAILED}: claim={name}, reason={}, message={:?}", c.reason, c.message));
            }
        }
        if !wanted.iter().all(|t| find(t).is_some_and(|c| c.status == "True")) {
            return None;
        }
    }
    None
}

impl Claim {
    /// Compiles a claim.
    pub fn from_api(c: &res::ResourceClaim) -> Claim {
        let m = &c.metadata;
        let status = c.status.as_ref();
        let mut view = ClaimView::from_api(c).map(Arc::new).map_err(|e| e.to_string());
        if let Ok(v) = &mut view
            && v.namespace.is_empty()
        {
            Arc::make_mut(v).namespace = "default".into();
        }
        Claim {
            namespace: m.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into()),
            name: m.name.clone().unwrap_or_default(),
            uid: m.uid.clone().unwrap_or_default(),
            resource_version: m.resource_version.clone().unwrap_or_default(),
            deleting: m.deletion_timestamp.is_some(),
            controller_uid: m.owner_references.iter().flatten().find(|o| o.controller == Some(true)).map(|o| o.uid.clone()),
            finalizers: m.finalizers.clone().unwrap_or_default(),
            reserved_for: status
                .and_then(|s| s.reserved_for.as_ref())
                .into_iter()
                .flatten()
                .map(|r| Consumer { resource: r.resource.clone(), name: r.name.clone(), uid: r.uid.clone() })
                .collect(),
            allocation: status.and_then(|s| s.allocation.clone()),
            view,
            binding_failure: status.and_then(|s| binding_failure(m.name.as_deref().unwrap_or_default(), s)),
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Is the claim reserved for the pod with this uid?
    pub fn reserved_for_pod(&self, uid: &str) -> bool {
        self.reserved_for.iter().any(|r| r.uid == uid)
    }
}

/// An allocation the scheduler assumed for a claim.
#[derive(Clone, Debug)]
struct Assumed {
    pod_uid: String,
    /// Devices added to [`InUse`] (none when the claim was allocated already).
    results: Vec<DeviceResult>,
    /// The claim as it was before (as the API last showed it).
    before: Claim,
}

/// Where the device journal stands ([`Devices::mark`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceMark {
    id: u64,
    seq: u64,
}

/// How many node changes the journal keeps (older marks read as "cannot tell").
const JOURNAL_KEEP: usize = 8192;

fn next_journal_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The nodes that device changes reached, in order (see the module docs).
#[derive(Debug)]
struct Journal {
    /// Identifies this history; a clone gets a new one (the two diverge).
    id: u64,
    /// The last change's number.
    seq: u64,
    /// (change number, node name) of the changes that reached one node.
    nodes: VecDeque<(u64, Box<str>)>,
    /// Marks below this cannot tell: a change reached every node then, or
    /// older entries were dropped.
    floor: u64,
}

impl Default for Journal {
    fn default() -> Self {
        Journal { id: next_journal_id(), seq: 0, nodes: VecDeque::new(), floor: 0 }
    }
}

impl Clone for Journal {
    fn clone(&self) -> Self {
        Journal { id: next_journal_id(), seq: self.seq, nodes: self.nodes.clone(), floor: self.floor }
    }
}

impl Journal {
    fn everywhere(&mut self) {
        self.seq += 1;
        self.floor = self.seq;
        self.nodes.clear();
    }

    fn node(&mut self, name: &str) {
        self.seq += 1;
        self.nodes.push_back((self.seq, name.into()));
        if self.nodes.len() > JOURNAL_KEEP {
            while self.nodes.len() > JOURNAL_KEEP / 2 {
                if let Some((s, _)) = self.nodes.pop_front() {
                    self.floor = s;
                }
            }
        }
    }
}

/// Devices, classes and claims (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Devices {
    journal: Journal,
    inventory: Arc<Inventory>,
    classes: Arc<Classes>,
    claims: HashMap<String, Claim>,
    in_use: Arc<InUse>,
    assumed: HashMap<String, Assumed>,
    /// Extended-resource allocations (no claim object yet), by pod uid.
    extended: HashMap<String, Vec<DeviceResult>>,
    cel: Arc<CelCache>,
    /// Objects that could not be compiled, by "Kind name".
    errors: HashMap<String, String>,
}

impl Devices {
    /// Nothing known.
    pub fn new() -> Self {
        Self::default()
    }

    /// Where the journal of device changes stands now.
    pub fn mark(&self) -> DeviceMark {
        DeviceMark { id: self.journal.id, seq: self.journal.seq }
    }

    /// Calls `node` with the name of every node a device change since
    /// `mark` reached (a node may come more than once), or returns None
    /// when that cannot be told: a change since reached every node, the
    /// mark is another journal's, or it is too old to be kept.
    pub fn changed_since(&self, mark: DeviceMark, mut node: impl FnMut(&str)) -> Option<()> {
        let j = &self.journal;
        if mark.id != j.id || mark.seq < j.floor || mark.seq > j.seq {
            return None;
        }
        let from = j.nodes.partition_point(|(s, _)| *s <= mark.seq);
        for (_, n) in j.nodes.range(from..) {
            node(n);
        }
        Some(())
    }

    fn reach(&mut self, r: Reach) {
        match r {
            Reach::Nowhere => {}
            Reach::Node(n) => {
                let name = self.inventory.strings().get(n).to_string();
                self.journal.node(&name);
            }
            Reach::Everywhere => self.journal.everywhere(),
        }
    }

    /// Journals the nodes that the use of `ids` reaches.
    fn devices_changed(&mut self, ids: impl IntoIterator<Item = DeviceId>) {
        let mut last = None;
        for id in ids {
            let r = self.inventory.pool_reach(id.driver, id.pool);
            if last != Some(r) {
                self.reach(r);
                last = Some(r);
            }
        }
    }

    fn add_results(&mut self, results: &[DeviceResult]) {
        Arc::make_mut(&mut self.in_use).add_results(results);
        self.devices_changed(results.iter().filter(|r| r.admin_access != Some(true)).map(|r| r.id));
    }

    fn remove_results(&mut self, results: &[DeviceResult]) {
        Arc::make_mut(&mut self.in_use).remove_results(results);
        self.devices_changed(results.iter().filter(|r| r.admin_access != Some(true)).map(|r| r.id));
    }

    /// The slices and taint rules.
    pub fn inventory(&self) -> &Arc<Inventory> {
        &self.inventory
    }

    /// The device classes.
    pub fn classes(&self) -> &Arc<Classes> {
        &self.classes
    }

    /// The devices in use, assumed allocations included.
    pub fn in_use(&self) -> &Arc<InUse> {
        &self.in_use
    }

    /// The compiled CEL expressions, shared by every cycle.
    pub fn cel(&self) -> &Arc<CelCache> {
        &self.cel
    }

    /// A claim by namespace and name (as assumed, when it is).
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Claim> {
        self.claims.get(&format!("{namespace}/{name}"))
    }

    /// A claim by namespace and name as the API last showed it (what was
    /// assumed for it left out): the base of PreBind's conditional writes.
    pub fn api_claim(&self, namespace: &str, name: &str) -> Option<&Claim> {
        let key = format!("{namespace}/{name}");
        match self.assumed.get(&key) {
            Some(a) => Some(&a.before),
            None => self.claims.get(&key),
        }
    }

    /// Every claim (as assumed, when it is).
    pub fn claims(&self) -> impl Iterator<Item = &Claim> {
        self.claims.values()
    }

    /// Objects that could not be compiled, with the reason.
    pub fn errors(&self) -> impl Iterator<Item = (&String, &String)> {
        self.errors.iter()
    }

    /// Adds or replaces a ResourceSlice.
    pub fn upsert_slice(&mut self, s: &res::ResourceSlice) -> Result<(), Error> {
        let name = s.metadata.name.clone().unwrap_or_default();
        self.slice_changed(&name);
        match Arc::make_mut(&mut self.inventory).upsert_slice(s) {
            Ok(()) => {
                self.slice_changed(&name);
                self.errors.remove(&format!("ResourceSlice {name}"));
                Ok(())
            }
            Err(e) => {
                self.errors.insert(format!("ResourceSlice {name}"), e.to_string());
                Err(Error::Malformed { kind: "ResourceSlice", name, message: e.to_string() })
            }
        }
    }

    /// Removes a ResourceSlice.
    pub fn remove_slice(&mut self, name: &str) {
        self.slice_changed(name);
        Arc::make_mut(&mut self.inventory).remove_slice(name);
        self.errors.remove(&format!("ResourceSlice {name}"));
    }

    /// Journals the nodes the slice `name` (as the inventory has it) reaches.
    fn slice_changed(&mut self, name: &str) {
        if let Some(r) = self.inventory.slice(name).map(|sl| self.inventory.slice_reach(sl)) {
            self.reach(r);
        }
    }

    /// Adds or replaces a DeviceTaintRule.
    pub fn upsert_taint_rule(&mut self, r: &res::DeviceTaintRule) -> Result<(), Error> {
        self.journal.everywhere();
        let name = r.metadata.name.clone().unwrap_or_default();
        Arc::make_mut(&mut self.inventory)
            .upsert_taint_rule(r)
            .map_err(|e| Error::Malformed { kind: "DeviceTaintRule", name, message: e.to_string() })
    }

    /// Removes a DeviceTaintRule.
    pub fn remove_taint_rule(&mut self, name: &str) {
        self.journal.everywhere();
        Arc::make_mut(&mut self.inventory).remove_taint_rule(name);
    }

    /// Adds or replaces a DeviceClass. Prefer [`crate::cache::Snapshot::upsert_device_class`],
    /// which also drops reused verdicts (NodeResourcesFit reads classes).
    pub fn upsert_class(&mut self, c: &res::DeviceClass) -> Result<(), Error> {
        self.journal.everywhere();
        let v = ClassView::from_api(c).map_err(|e| Error::Malformed { kind: "DeviceClass", name: c.metadata.name.clone().unwrap_or_default(), message: e.to_string() })?;
        Arc::make_mut(&mut self.classes).upsert(v);
        Ok(())
    }

    /// Removes a DeviceClass.
    pub fn remove_class(&mut self, name: &str) {
        self.journal.everywhere();
        Arc::make_mut(&mut self.classes).remove(name);
    }

    /// The class that backs an extended resource (DRAExtendedResource): the
    /// one with that spec.extendedResourceName, or `<class>` for the implicit
    /// `deviceclass.resource.kubernetes.io/<class>`.
    pub fn class_for_extended_resource(&self, resource: &str) -> Option<&ClassView> {
        if let Some(c) = self.classes.for_extended_resource(resource) {
            return Some(c);
        }
        resource.strip_prefix(IMPLICIT_EXTENDED_RESOURCE_PREFIX).and_then(|class| self.classes.get(class))
    }

    /// Adds or replaces a ResourceClaim. An assumed allocation is superseded
    /// when the API's claim is allocated; otherwise it stays on top of it.
    pub fn upsert_claim(&mut self, c: &res::ResourceClaim) {
        let claim = Claim::from_api(c);
        let key = claim.key();
        if let Some(a) = self.assumed.get_mut(&key) {
            if claim.allocation.is_none() && claim.uid == a.before.uid {
                // The API does not show the allocation yet: keep assuming it.
                a.before = claim;
                return;
            }
            if let Some(a) = self.assumed.remove(&key) {
                self.remove_results(&a.results);
                self.claims.insert(key.clone(), a.before);
            }
        }
        self.remove_claim_allocation(&key);
        if let Some(alloc) = &claim.allocation {
            let inv = Arc::make_mut(&mut self.inventory);
            let ids = Arc::make_mut(&mut self.in_use).add_allocation(inv, alloc);
            self.devices_changed(ids);
        }
        self.claims.insert(key, claim);
    }

    fn remove_claim_allocation(&mut self, key: &str) {
        if let Some(old) = self.claims.get(key)
            && let Some(alloc) = old.allocation.clone()
        {
            let inv = Arc::make_mut(&mut self.inventory);
            let ids = Arc::make_mut(&mut self.in_use).remove_allocation(inv, &alloc);
            self.devices_changed(ids);
        }
    }

    /// Removes a ResourceClaim (and what was assumed for it).
    pub fn remove_claim(&mut self, namespace: &str, name: &str) {
        let key = format!("{namespace}/{name}");
        if let Some(a) = self.assumed.remove(&key) {
            self.remove_results(&a.results);
            self.claims.insert(key.clone(), a.before);
        }
        self.remove_claim_allocation(&key);
        self.claims.remove(&key);
    }

    /// Clears the claim's allocation, reservations and device statuses (so
    /// any binding failure), as the API shows it once a deallocation is
    /// written (DynamicResources' PostFilter). No-op
    /// when no claim `namespace/name` with metadata.uid `uid` exists.
    pub fn deallocate_claim(&mut self, namespace: &str, name: &str, uid: &str) {
        let key = format!("{namespace}/{name}");
        if self.claims.get(&key).is_none_or(|c| c.uid != uid) {
            return;
        }
        if let Some(a) = self.assumed.remove(&key) {
            self.remove_results(&a.results);
            self.claims.insert(key.clone(), a.before);
        }
        self.remove_claim_allocation(&key);
        if let Some(c) = self.claims.get_mut(&key) {
            c.allocation = None;
            c.reserved_for.clear();
            c.binding_failure = None;
        }
    }

    /// Assumes that `claim` is allocated (`results`, `allocation`; empty
    /// results when it was allocated already) and reserved for the pod.
    pub fn assume_claim(&mut self, key: &str, pod: &Consumer, allocation: Option<(&[DeviceResult], res::AllocationResult)>) {
        let Some(current) = self.claims.get(key).cloned() else { return };
        if let Some(a) = self.assumed.get(key)
            && a.pod_uid != pod.uid
        {
            // Another pod's assumption: only add the reservation.
            if let Some(c) = self.claims.get_mut(key)
                && !c.reserved_for_pod(&pod.uid)
            {
                c.reserved_for.push(pod.clone());
            }
            return;
        }
        let before = match self.assumed.remove(key) {
            Some(a) => {
                self.remove_results(&a.results);
                a.before
            }
            None => current.clone(),
        };
        let mut now = before.clone();
        let mut results = Vec::new();
        if let Some((r, alloc)) = allocation
            && now.allocation.is_none()
        {
            self.add_results(r);
            results = r.to_vec();
            now.allocation = Some(alloc);
        }
        if !now.reserved_for_pod(&pod.uid) {
            now.reserved_for.push(pod.clone());
        }
        self.claims.insert(key.to_string(), now);
        self.assumed.insert(key.to_string(), Assumed { pod_uid: pod.uid.clone(), results, before });
    }

    /// Reverts [`Devices::assume_claim`] for the pod (no-op when the API's
    /// claim superseded it).
    pub fn forget_claim(&mut self, key: &str, pod_uid: &str) {
        match self.assumed.get(key) {
            Some(a) if a.pod_uid == pod_uid => {
                if let Some(a) = self.assumed.remove(key) {
                    self.remove_results(&a.results);
                    self.claims.insert(key.to_string(), a.before);
                }
            }
            _ => {
                if let Some(c) = self.claims.get_mut(key) {
                    c.reserved_for.retain(|r| r.uid != pod_uid);
                }
            }
        }
    }

    /// Assumes the devices of a pod's extended-resource claim (not an API object yet).
    pub fn assume_extended(&mut self, pod_uid: &str, results: &[DeviceResult]) {
        self.forget_extended(pod_uid);
        self.add_results(results);
        self.extended.insert(pod_uid.to_string(), results.to_vec());
    }

    /// Reverts [`Devices::assume_extended`].
    pub fn forget_extended(&mut self, pod_uid: &str) {
        if let Some(r) = self.extended.remove(pod_uid) {
            self.remove_results(&r);
        }
    }

    /// How many claim allocations are assumed.
    pub fn assumed_count(&self) -> usize {
        self.assumed.len() + self.extended.len()
    }
}

/// The prefix of the extended resource every DeviceClass backs implicitly.
pub const IMPLICIT_EXTENDED_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, allocated: Option<&str>) -> res::ResourceClaim {
        let mut c = res::ResourceClaim::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("default".into());
        c.metadata.uid = Some(format!("uid-{name}"));
        if let Some(d) = allocated {
            c.status = Some(res::ResourceClaimStatus {
                allocation: Some(res::AllocationResult {
                    devices: Some(res::DeviceAllocationResult {
                        results: Some(vec![res::DeviceRequestAllocationResult { request: "r".into(), driver: "d".into(), pool: "p".into(), device: d.into(), ..Default::default() }]),
                        config: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        c
    }

    #[test]
    fn allocations_mark_devices_and_assumptions_revert() {
        let mut d = Devices::new();
        d.upsert_claim(&claim("a", Some("gpu-0")));
        let id0 = Arc::make_mut(&mut d.inventory).device_id("d", "p", "gpu-0");
        assert!(d.in_use().is_dedicated(id0));
        // The claim changes: its old allocation is no longer counted.
        d.upsert_claim(&claim("a", None));
        assert!(!d.in_use().is_dedicated(id0));
        // Assume an allocation for pod p; forget reverts it.
        let id1 = Arc::make_mut(&mut d.inventory).device_id("d", "p", "gpu-1");
        let r = DeviceResult {
            request: "r".into(),
            driver: "d".into(),
            pool: "p".into(),
            device: "gpu-1".into(),
            id: id1,
            admin_access: None,
            tolerations: vec![],
            consumed_capacity: vec![],
            consumed: vec![],
            share_id: None,
        };
        let pod = Consumer { resource: "pods".into(), name: "p".into(), uid: "uid-p".into() };
        let alloc = res::AllocationResult::default();
        d.assume_claim("default/a", &pod, Some((std::slice::from_ref(&r), alloc)));
        assert!(d.in_use().is_dedicated(id1));
        assert!(d.claim("default", "a").is_some_and(|c| c.allocation.is_some() && c.reserved_for_pod("uid-p")));
        // PreBind's base is the API's claim, without the assumption.
        assert!(d.api_claim("default", "a").is_some_and(|c| c.allocation.is_none() && !c.reserved_for_pod("uid-p")));
        // A stale watch event (no allocation yet) keeps the assumption;
        // the API's view follows it (its resourceVersion too).
        let mut newer = claim("a", None);
        newer.metadata.resource_version = Some("8".into());
        d.upsert_claim(&newer);
        assert!(d.in_use().is_dedicated(id1));
        assert_eq!(d.api_claim("default", "a").map(|c| c.resource_version.as_str()), Some("8"));
        d.forget_claim("default/a", "uid-p");
        assert!(!d.in_use().is_dedicated(id1) && d.claim("default", "a").is_some_and(|c| c.allocation.is_none()));
        // The API's allocation supersedes an assumption.
        d.assume_claim("default/a", &pod, Some((std::slice::from_ref(&r), res::AllocationResult::default())));
        d.upsert_claim(&claim("a", Some("gpu-1")));
        assert_eq!(d.assumed_count(), 0);
        assert!(d.in_use().is_dedicated(id1));
        d.remove_claim("default", "a");
        assert!(!d.in_use().is_dedicated(id1));
    }
}
