//! The structured allocator: which devices a pod's unallocated claims get on
//! a node, following upstream's "incubating" allocator (the default in 1.37).
//!
//! Use it in two steps, as the plugin's PreFilter and Filter:
//!
//! 1. [`prepare`] once per pod: resolves classes, compiles selectors (through
//!    the shared [`CelCache`]) and checks what does not depend on the node;
//! 2. [`Prepared::allocate`] per node: gathers the node's pools, counts
//!    "All" requests, and runs the all-or-nothing backtracking search.
//!
//! The search tries claims in order, requests in order, and for each device
//! the candidates in pool order (driver, pool, slice name, device order),
//! only in increasing order within a request so that each combination is
//! tried once. The first full solution wins. A firstAvailable request tries
//! its subrequests in order. A claim never gets more than
//! [`ALLOCATION_RESULTS_MAX_SIZE`] devices. Each selector expression is
//! evaluated at most once per device per call (memoized), and the search
//! stops after `max_steps` steps ([`NodeVerdict::WorkLimit`]), the analogue
//! of upstream's filter timeout.
//!
//! [`InUse`] is the set of devices allocated by any claim (and in-flight
//! allocations), kept incrementally by the cache.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1 as res;
use thiserror::Error;

use crate::cel::{AttrIn, CelCache, Compiled, DeviceVal};
use crate::claims::{AllocationMode, ClaimView, Classes, Constraint, Toleration};
use crate::intern::{Sym, SymMap};
use crate::inventory::{
    AttrValue, CandRef, Capacity, Device, DeviceId, Inventory, InventoryError, NodePools, NodeRef, NodeSel, Pool,
    PoolState, SelectorMemo, Slice, TaintEffect,
};
use crate::quantity::Quantity;

/// Upstream's `resourceapi.AllocationResultsMaxSize`: devices per claim.
pub const ALLOCATION_RESULTS_MAX_SIZE: usize = 32;

/// Default bound on search steps per node (see [`Prepared::allocate`]).
pub const DEFAULT_MAX_STEPS: u64 = 1_000_000;

/// Errors that abort the scheduling attempt (upstream's Filter returns a
/// Status Error for them), with upstream's messages.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AllocError {
    /// A request names no class.
    #[error("claim {claim}, request {request}: missing device class name (unsupported request type?)")]
    MissingClass {
        /// namespace/name.
        claim: String,
        /// Request name.
        request: String,
    },
    /// A request's class does not exist.
    #[error("claim {claim}, request {request}: could not retrieve device class {class}: deviceclass.resource.k8s.io \"{class}\" not found")]
    ClassNotFound {
        /// namespace/name.
        claim: String,
        /// Request name.
        request: String,
        /// The class.
        class: String,
    },
    /// A selector is not a CEL selector.
    #[error("claim {claim}, request {request}, selector #{index}: CEL expression empty (unsupported selector type?)")]
    UnsupportedSelector {
        /// namespace/name.
        claim: String,
        /// Request name.
        request: String,
        /// Selector index.
        index: usize,
    },
    /// An allocationMode this version does not know.
    #[error("claim {claim}, request {request}: unsupported count mode {mode}")]
    UnsupportedMode {
        /// namespace/name.
        claim: String,
        /// Request name.
        request: String,
        /// The mode.
        mode: String,
    },
    /// A constraint with neither matchAttribute nor distinctAttribute.
    #[error("claim {claim}, constraint #{index}: empty constraint (unsupported constraint type?)")]
    UnsupportedConstraint {
        /// namespace/name.
        claim: String,
        /// Constraint index.
        index: usize,
    },
    /// Admin access asked for in a namespace without the
    /// `resource.kubernetes.io/admin-access: "true"` label.
    #[error("claim {claim}, request {request}: admin access to devices requires the `resource.kubernetes.io/admin-access: \"true\"` label on the claim's namespace")]
    AdminAccessNotAllowed {
        /// namespace/name.
        claim: String,
        /// Request name.
        request: String,
    },
    /// An "All" request over a pool being updated or invalid.
    #[error("claim {claim}, request {request}: asks for all devices, but resource pool {pool} is currently {why}")]
    AllOverBadPool {
        /// namespace/name.
        claim: String,
        /// The (sub)request's name.
        request: String,
        /// `driver/pool`.
        pool: String,
        /// "being updated" or "invalid".
        why: &'static str,
    },
    /// More devices than a claim can hold.
    #[error("claim {claim}: number of requested devices {count} exceeds the claim limit of {max}", max = ALLOCATION_RESULTS_MAX_SIZE)]
    TooManyDevices {
        /// namespace/name.
        claim: String,
        /// The minimum number of devices.
        count: usize,
    },
    /// A selector does not compile.
    #[error("{owner}: selector #{index}: CEL compile error: {message}")]
    CelCompile {
        /// `class NAME` or `claim NS/NAME`.
        owner: String,
        /// Selector index.
        index: usize,
        /// cel's message.
        message: String,
    },
    /// A selector failed at run time on a device.
    #[error("{owner}: selector #{index} on device {device}: CEL runtime error: {message}")]
    CelRuntime {
        /// `class NAME` or `claim NS/NAME`.
        owner: String,
        /// Selector index.
        index: usize,
        /// `driver/pool/device`.
        device: String,
        /// The runtime error.
        message: String,
    },
    /// An "All" request whose constraint cannot hold for all devices.
    #[error("claim {claim}, request {request}: cannot add device {device} because a claim constraint would not be satisfied")]
    ConstraintUnsatisfiable {
        /// namespace/name.
        claim: String,
        /// The (sub)request's name.
        request: String,
        /// `driver/pool/device`.
        device: String,
    },
    /// Gathering pools failed (a node selector in a slice does not compile).
    #[error("gather pool information: {0}")]
    Pools(#[source] InventoryError),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, AllocError>;

// ---------------------------------------------------------------------------
// Devices in use

/// A device of an API allocation result: id, shared, consumed capacity.
type ApiResult = (DeviceId, bool, Vec<(Sym, Quantity)>);

/// The devices allocated by claims (and in-flight allocations), as upstream's
/// `AllocatedState`: dedicated devices, shared allocations of multi-allocatable
/// devices, and the capacity they consume. Admin-access results do not count.
#[derive(Clone, Debug, Default)]
pub struct InUse {
    dedicated: SymMap<DeviceId, u32>,
    shared: SymMap<DeviceId, u32>,
    capacity: SymMap<DeviceId, Vec<(Sym, Quantity)>>,
}

impl InUse {
    /// Nothing in use.
    pub fn new() -> Self {
        Self::default()
    }

    fn apply(&mut self, id: DeviceId, shared: bool, consumed: &[(Sym, Quantity)], add: bool) {
        let map = if shared { &mut self.shared } else { &mut self.dedicated };
        if add {
            *map.entry(id).or_default() += 1;
        } else if let Some(n) = map.get_mut(&id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&id);
            }
        }
        if consumed.is_empty() {
            return;
        }
        let agg = self.capacity.entry(id).or_default();
        for (name, q) in consumed {
            match agg.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => *v = if add { v.saturating_add(*q) } else { v.saturating_sub(*q) },
                None if add => agg.push((*name, *q)),
                None => {}
            }
        }
        if !add && agg.iter().all(|(_, v)| v.0 <= 0) {
            self.capacity.remove(&id);
        }
    }

    fn api_results(inv: &mut Inventory, a: &res::AllocationResult) -> Vec<ApiResult> {
        let mut out = Vec::new();
        for r in a.devices.as_ref().and_then(|d| d.results.as_ref()).into_iter().flatten() {
            if r.admin_access == Some(true) {
                continue;
            }
            let id = inv.device_id(&r.driver, &r.pool, &r.device);
            let consumed = r
                .consumed_capacity
                .iter()
                .flatten()
                .filter_map(|(n, q)| Quantity::parse(&q.0).ok().map(|q| (inv.intern(n), q)))
                .collect();
            out.push((id, r.share_id.is_some(), consumed));
        }
        out
    }

    /// Adds the devices of a claim's status.allocation; returns them (those
    /// that count: admin access does not).
    pub fn add_allocation(&mut self, inv: &mut Inventory, a: &res::AllocationResult) -> Vec<DeviceId> {
        self.apply_allocation(inv, a, true)
    }

    /// Removes what [`InUse::add_allocation`] added for the same allocation;
    /// returns the devices.
    pub fn remove_allocation(&mut self, inv: &mut Inventory, a: &res::AllocationResult) -> Vec<DeviceId> {
        self.apply_allocation(inv, a, false)
    }

    /// Adds (or removes) an API allocation's devices; returns them.
    fn apply_allocation(&mut self, inv: &mut Inventory, a: &res::AllocationResult, add: bool) -> Vec<DeviceId> {
        Self::api_results(inv, a)
            .into_iter()
            .map(|(id, shared, consumed)| {
                self.apply(id, shared, &consumed, add);
                id
            })
            .collect()
    }

    /// Adds berth's own (assumed, in-flight) results.
    pub fn add_results(&mut self, results: &[DeviceResult]) {
        self.apply_results(results, true);
    }

    /// Removes what [`InUse::add_results`] added.
    pub fn remove_results(&mut self, results: &[DeviceResult]) {
        self.apply_results(results, false);
    }

    /// Adds (or removes) berth's own results, but those for admin access.
    fn apply_results(&mut self, results: &[DeviceResult], add: bool) {
        for r in results.iter().filter(|r| r.admin_access != Some(true)) {
            self.apply(r.id, r.share_id.is_some(), &r.consumed, add);
        }
    }

    /// Allocated to some claim exclusively (not for admin access, not shared)?
    pub fn is_dedicated(&self, id: DeviceId) -> bool {
        self.dedicated.contains_key(&id)
    }

    /// Allocated in any way (upstream's `IsDeviceAllocated`, used for counters)?
    pub fn is_allocated(&self, id: DeviceId) -> bool {
        self.dedicated.contains_key(&id) || self.shared.contains_key(&id) || self.capacity.contains_key(&id)
    }

    /// The capacity consumed on a device by shared allocations.
    pub fn consumed(&self, id: DeviceId) -> Option<&[(Sym, Quantity)]> {
        self.capacity.get(&id).map(Vec::as_slice)
    }
}

// ---------------------------------------------------------------------------
// Prepare (per pod)

#[derive(Debug)]
struct PSub {
    /// The (sub)request's own name.
    name: String,
    /// `request` or `request/subrequest`.
    full_name: String,
    class_name: String,
    /// Expression indices into `Prepared::exprs`.
    class_exprs: Vec<usize>,
    req_exprs: Vec<usize>,
    all: bool,
    count: usize,
    admin: bool,
    tolerations: Vec<Toleration>,
    capacity: Vec<(String, Quantity)>,
}

#[derive(Debug)]
struct PRequest {
    name: String,
    first_available: bool,
    alts: Vec<PSub>,
}

#[derive(Debug)]
struct PClaim {
    key: String,
    requests: Vec<PRequest>,
    constraints: Vec<(bool, Vec<String>, String)>,
}

/// A pod's unallocated claims, prepared for per-node allocation.
pub struct Prepared {
    claims: Vec<PClaim>,
    /// Flat index of each (claim, request, subrequest).
    flat: Vec<Vec<Vec<usize>>>,
    /// How many (claim, request, subrequest) there are.
    n_flat: usize,
    /// Some subrequest asks for all devices.
    any_all: bool,
    /// Some request is a firstAvailable list.
    any_first_available: bool,
    /// Some claim has constraints.
    any_constraints: bool,
    /// A buffer the per-node searches reuse (Filter calls them one after another).
    scratch: std::sync::Mutex<Vec<u8>>,
    exprs: Vec<Arc<Compiled>>,
    cel_env: Arc<cel::Env>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").field("claims", &self.claims).field("exprs", &self.exprs).finish()
    }
}

/// Prepares a pod's unallocated claims (in the order given; the results of
/// [`Prepared::allocate`] follow it). `admin_access_allowed` is whether the
/// pod's namespace has the label `resource.kubernetes.io/admin-access: "true"`.
pub fn prepare(claims: &[&ClaimView], classes: &Classes, cel: &CelCache, admin_access_allowed: bool) -> Result<Prepared> {
    let mut exprs: Vec<Arc<Compiled>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut expr = |e: &str| -> usize {
        *index.entry(e.to_string()).or_insert_with(|| {
            exprs.push(cel.get_or_compile(e));
            exprs.len() - 1
        })
    };
    let mut out = Vec::with_capacity(claims.len());
    for claim in claims {
        let key = claim.key();
        let mut requests = Vec::new();
        for r in &claim.requests {
            let mut alts = Vec::new();
            for s in &r.alternatives {
                let rname = s.name.clone();
                let mut req_exprs = Vec::new();
                for (i, sel) in s.selectors.iter().enumerate() {
                    match sel {
                        Some(e) => req_exprs.push(expr(e)),
                        None => {
                            return Err(AllocError::UnsupportedSelector { claim: key, request: rname, index: i });
                        }
                    }
                }
                if s.admin_access == Some(true) && !admin_access_allowed {
                    return Err(AllocError::AdminAccessNotAllowed { claim: key, request: rname });
                }
                if s.class.is_empty() {
                    return Err(AllocError::MissingClass { claim: key, request: rname });
                }
                let Some(class) = classes.get(&s.class) else {
                    return Err(AllocError::ClassNotFound { claim: key, request: rname, class: s.class.clone() });
                };
                let mut class_exprs = Vec::new();
                for (i, sel) in class.selectors.iter().enumerate() {
                    match sel {
                        Some(e) => class_exprs.push(expr(e)),
                        None => {
                            return Err(AllocError::UnsupportedSelector { claim: key, request: rname, index: i });
                        }
                    }
                }
                let (all, count) = match &s.mode {
                    AllocationMode::ExactCount(n) => (false, usize::try_from(*n).unwrap_or(usize::MAX)),
                    AllocationMode::All => (true, 0),
                    AllocationMode::Unknown(m) => {
                        return Err(AllocError::UnsupportedMode { claim: key, request: rname, mode: m.clone() });
                    }
                };
                let full_name = if r.first_available { format!("{}/{}", r.name, s.name) } else { r.name.clone() };
                alts.push(PSub {
                    name: rname,
                    full_name,
                    class_name: class.name.clone(),
                    class_exprs,
                    req_exprs,
                    all,
                    count,
                    admin: s.admin_access == Some(true),
                    tolerations: s.tolerations.clone(),
                    capacity: s.capacity.clone(),
                });
            }
            requests.push(PRequest { name: r.name.clone(), first_available: r.first_available, alts });
        }
        let mut constraints = Vec::new();
        for (i, c) in claim.constraints.iter().enumerate() {
            match c {
                Constraint::Match { requests, attribute } => constraints.push((true, requests.clone(), attribute.clone())),
                Constraint::Distinct { requests, attribute } => constraints.push((false, requests.clone(), attribute.clone())),
                Constraint::Unknown => return Err(AllocError::UnsupportedConstraint { claim: key, index: i }),
            }
        }
        out.push(PClaim { key, requests, constraints });
    }
    let mut flat = Vec::with_capacity(out.len());
    let mut n_flat = 0usize;
    for c in &out {
        let mut fc = Vec::with_capacity(c.requests.len());
        for r in &c.requests {
            fc.push((n_flat..n_flat + r.alts.len()).collect::<Vec<usize>>());
            n_flat += r.alts.len();
        }
        flat.push(fc);
    }
    let any_all = out.iter().any(|c| c.requests.iter().any(|r| r.alts.iter().any(|s| s.all)));
    let any_first_available = out.iter().any(|c| c.requests.iter().any(|r| r.first_available));
    let any_constraints = out.iter().any(|c| !c.constraints.is_empty());
    Ok(Prepared {
        claims: out,
        flat,
        n_flat,
        any_all,
        any_first_available,
        any_constraints,
        scratch: std::sync::Mutex::new(Vec::new()),
        exprs,
        cel_env: cel.env().clone(),
    })
}

// ---------------------------------------------------------------------------
// Results

/// One allocated device, as a `DeviceRequestAllocationResult`.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceResult {
    /// `request` or `request/subrequest`.
    pub request: String,
    /// Driver.
    pub driver: String,
    /// Pool.
    pub pool: String,
    /// Device.
    pub device: String,
    /// The device's id in the inventory that allocated it.
    pub id: DeviceId,
    /// `Some(true)` for admin access, else None.
    pub admin_access: Option<bool>,
    /// The request's tolerations.
    pub tolerations: Vec<res::DeviceToleration>,
    /// Consumed capacity (multi-allocatable devices), by capacity name.
    pub consumed_capacity: Vec<(String, Quantity)>,
    /// The same as symbols (for [`InUse`]).
    pub consumed: Vec<(Sym, Quantity)>,
    /// The share id of an allocation of a multi-allocatable device
    /// (deterministic, UUID-shaped; upstream draws a random UUID).
    pub share_id: Option<String>,
}

/// What a claim gets on the node.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimAllocation {
    /// The devices, in allocation order.
    pub results: Vec<DeviceResult>,
    /// The allocation's node selector (None: available on every node).
    pub node_selector: Option<core::NodeSelector>,
    /// Per request: the index of the chosen firstAvailable subrequest (None
    /// for `exactly` requests). Upstream's Score is 8 minus it, summed.
    pub chosen_subrequests: Vec<Option<usize>>,
}

impl ClaimAllocation {
    /// The claim's `status.allocation` (without config, see the crate notes).
    pub fn to_api(&self) -> res::AllocationResult {
        let results = self
            .results
            .iter()
            .map(|r| res::DeviceRequestAllocationResult {
                request: r.request.clone(),
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
                admin_access: r.admin_access,
                tolerations: (!r.tolerations.is_empty()).then(|| r.tolerations.clone()),
                share_id: r.share_id.clone(),
                consumed_capacity: (!r.consumed_capacity.is_empty()).then(|| {
                    r.consumed_capacity
                        .iter()
                        .map(|(n, q)| (n.clone(), k8s_openapi::apimachinery::pkg::api::resource::Quantity(q.to_string())))
                        .collect()
                }),
                ..Default::default()
            })
            .collect();
        res::AllocationResult {
            devices: Some(res::DeviceAllocationResult { results: Some(results), config: None }),
            node_selector: self.node_selector.clone(),
            allocation_timestamp: None,
        }
    }
}

/// What a node offers the pod's claims (`A`: the allocations, or a compact
/// [`Solution`] from [`Prepared::allocate_compact`]).
#[derive(Clone, Debug, PartialEq)]
pub enum NodeVerdict<A = Vec<ClaimAllocation>> {
    /// All claims allocated, in the order given to [`prepare`].
    Allocated(A),
    /// Not possible on this node ("cannot allocate all claims").
    CannotAllocate,
    /// Not possible, and some pool was invalid: upstream's "invalid resource
    /// pools were encountered" (still a per-node unschedulable status).
    InvalidPools,
    /// The search took more than `max_steps` steps (upstream's filter timeout:
    /// "timed out trying to allocate devices").
    WorkLimit,
}

/// What a node offers one request ([`Prepared::diagnose`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestDiagnosis {
    /// The claim, namespace/name.
    pub claim: String,
    /// `request` or `request/subrequest`.
    pub request: String,
    /// Its device class.
    pub class: String,
    /// Devices wanted (None: allocationMode All).
    pub wanted: Option<usize>,
    /// The node's devices that the class and the request's selectors admit.
    pub matching: Vec<DeviceId>,
    /// Of those, the ones allocated (or in flight) for another claim.
    pub in_use: Vec<DeviceId>,
    /// Of the others, those with a taint the request does not tolerate.
    pub tainted: Vec<DeviceId>,
}

/// What [`Prepared::allocate`] reads.
#[derive(Clone, Copy, Debug)]
pub struct AllocateInput<'a> {
    /// The node.
    pub node: NodeRef<'a>,
    /// Slices and taint rules.
    pub inventory: &'a Inventory,
    /// Devices in use (allocated and in flight).
    pub in_use: &'a InUse,
    /// Bound on search steps (see [`DEFAULT_MAX_STEPS`]).
    pub max_steps: u64,
}

// ---------------------------------------------------------------------------
// The search

enum CState {
    Match { all: bool, requests: Vec<String>, attr: String, value: Option<AttrValue>, n: usize },
    Distinct { all: bool, requests: Vec<String>, attr: String, values: Vec<(String, AttrValue)>, n: usize },
}

fn applies(requests: &[String], all: bool, base: &str, sub: Option<&str>) -> bool {
    all || requests.iter().any(|r| r == base || sub.is_some_and(|s| r.len() == base.len() + 1 + s.len() && r.starts_with(base) && r[base.len()..].starts_with('/') && r.ends_with(s)))
}

#[derive(Debug)]
struct Picked {
    cand: usize,
    req: usize,
    sub: usize,
    consumed: Vec<(Sym, Quantity)>,
    shared: bool,
}

struct Undo<'a> {
    claim: usize,
    cand: usize,
    multi: bool,
    counters: bool,
    consumed: Vec<(Sym, Quantity)>,
    base: &'a str,
    sub: Option<&'a str>,
}

enum Flow {
    MaxSize,
    Work,
    Err(AllocError),
}

impl From<AllocError> for Flow {
    fn from(e: AllocError) -> Self {
        Flow::Err(e)
    }
}

struct Search<'a> {
    p: &'a Prepared,
    inp: AllocateInput<'a>,
    np: &'a NodePools,
    pools: &'a [Pool],
    cands: &'a [CandRef],
    /// Flat index of each (claim, request, sub).
    flat: &'a [Vec<Vec<usize>>],
    all_devices: Vec<Vec<usize>>,
    /// Selector results kept with the node's pools (across cycles).
    memo: std::sync::MutexGuard<'a, SelectorMemo>,
    /// Per (flat subrequest, candidate): 0 unknown, 1 not selectable, 2 selectable.
    select_memo: Vec<u8>,
    /// Devices taken in this search (not multi-allocatable ones) and the
    /// claim taking each; a device appears once per claim (admin access lets
    /// several claims take one device). A short list: a claim has at most
    /// [`ALLOCATION_RESULTS_MAX_SIZE`] devices.
    allocating: Vec<(DeviceId, usize)>,
    allocating_capacity: SymMap<DeviceId, Vec<(Sym, Quantity)>>,
    available: SymMap<usize, SymMap<(Sym, Sym), Quantity>>,
    consumed_counters: SymMap<(usize, Sym, Sym), Quantity>,
    constraints: Vec<Vec<CState>>,
    results: Vec<Vec<Picked>>,
    chosen: Vec<Vec<Option<usize>>>,
    steps: u64,
}

impl Prepared {
    /// How many claims were prepared.
    pub fn len(&self) -> usize {
        self.claims.len()
    }

    /// True when there is nothing to allocate.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    /// The search state over the node's candidates (every device of the
    /// node's ready pools, in pool order).
    fn search<'s>(&'s self, inp: AllocateInput<'s>, np: &'s NodePools) -> Search<'s> {
        let n = self.n_flat;
        Search {
            p: self,
            inp,
            np,
            pools: &np.pools,
            memo: np.memo(),
            select_memo: {
                let mut b = std::mem::take(&mut *self.scratch.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
                b.clear();
                b.resize(n * np.cands.len(), 0);
                b
            },
            all_devices: if self.any_all { vec![Vec::new(); n] } else { Vec::new() },
            cands: &np.cands,
            flat: &self.flat,
            allocating: Vec::new(),
            allocating_capacity: SymMap::default(),
            available: SymMap::default(),
            consumed_counters: SymMap::default(),
            constraints: if !self.any_constraints {
                Vec::new()
            } else {
                self.claims
                .iter()
                .map(|c| {
                    c.constraints
                        .iter()
                        .map(|(is_match, reqs, attr)| {
                            let all = reqs.is_empty();
                            if *is_match {
                                CState::Match { all, requests: reqs.clone(), attr: attr.clone(), value: None, n: 0 }
                            } else {
                                CState::Distinct { all, requests: reqs.clone(), attr: attr.clone(), values: Vec::new(), n: 0 }
                            }
                        })
                        .collect()
                })
                .collect()
            },
            results: self.claims.iter().map(|_| Vec::new()).collect(),
            chosen: if self.any_first_available { self.claims.iter().map(|c| vec![None; c.requests.len()]).collect() } else { Vec::new() },
            steps: 0,
        }
    }

    /// For explain: per request (each firstAvailable subrequest on its own)
    /// of every prepared claim, the node's devices its class and selectors
    /// admit, and which of them are in use or carry a taint it does not
    /// tolerate. An error is the one [`Prepared::allocate`] would give.
    pub fn diagnose(&self, inp: AllocateInput<'_>) -> Result<Vec<RequestDiagnosis>> {
        let np = inp.inventory.node_pools(inp.node).map_err(AllocError::Pools)?;
        let mut s = self.search(inp, &np);
        let mut out = Vec::new();
        for (ci, claim) in self.claims.iter().enumerate() {
            for (ri, r) in claim.requests.iter().enumerate() {
                for (si, sub) in r.alts.iter().enumerate() {
                    let mut d = RequestDiagnosis {
                        claim: claim.key.clone(),
                        request: sub.full_name.clone(),
                        class: sub.class_name.clone(),
                        wanted: (!sub.all).then_some(sub.count),
                        matching: Vec::new(),
                        in_use: Vec::new(),
                        tainted: Vec::new(),
                    };
                    for k in 0..s.cands.len() {
                        if !s.selectable(ci, ri, si, k)? {
                            continue;
                        }
                        let id = s.cands[k].id;
                        d.matching.push(id);
                        if s.in_use(id) {
                            d.in_use.push(id);
                        } else if s.taint_blocks(k, sub) {
                            d.tainted.push(id);
                        }
                    }
                    out.push(d);
                }
            }
        }
        Ok(out)
    }

    /// Allocates all prepared claims on one node, or says why not. `Err` is
    /// an error for the whole scheduling attempt (CEL runtime error, "All"
    /// over an incomplete pool, ...), as upstream's Filter Status Error.
    pub fn allocate(&self, inp: AllocateInput<'_>) -> Result<NodeVerdict> {
        Ok(match self.allocate_compact(inp)? {
            NodeVerdict::Allocated(sol) => NodeVerdict::Allocated(self.materialize(&sol, inp.inventory, inp.node.name)),
            NodeVerdict::CannotAllocate => NodeVerdict::CannotAllocate,
            NodeVerdict::InvalidPools => NodeVerdict::InvalidPools,
            NodeVerdict::WorkLimit => NodeVerdict::WorkLimit,
        })
    }

    /// [`Prepared::allocate`] with the solution kept compact (see [`Solution`]).
    pub fn allocate_compact(&self, inp: AllocateInput<'_>) -> Result<NodeVerdict<Solution>> {
        if self.claims.is_empty() {
            return Ok(NodeVerdict::Allocated(Solution { np: None, picked: Vec::new(), chosen: Vec::new() }));
        }
        let np = inp.inventory.node_pools(inp.node).map_err(AllocError::Pools)?;
        let mut s = self.search(inp, &np);
        // "All" requests: which devices, and the per-claim minimum.
        for (ci, claim) in self.claims.iter().enumerate() {
            let mut min_total = 0usize;
            for (ri, r) in claim.requests.iter().enumerate() {
                let mut min_req = usize::MAX;
                for (si, sub) in r.alts.iter().enumerate() {
                    let num = if sub.all {
                        let f = s.flat[ci][ri][si];
                        for pool in s.pools {
                            let why = match &pool.state {
                                PoolState::Ready => continue,
                                PoolState::Incomplete => "being updated",
                                PoolState::Invalid(_) => "invalid",
                            };
                            let st = inp.inventory.strings();
                            return Err(AllocError::AllOverBadPool {
                                claim: claim.key.clone(),
                                request: sub.name.clone(),
                                pool: format!("{}/{}", st.get(pool.driver), st.get(pool.pool)),
                                why,
                            });
                        }
                        let mut devs = Vec::new();
                        for k in 0..s.cands.len() {
                            if s.selectable(ci, ri, si, k)? && s.capacity_ok(sub, k) == Some(true) {
                                devs.push(k);
                            }
                        }
                        let len = devs.len();
                        s.all_devices[f] = devs;
                        len
                    } else {
                        sub.count
                    };
                    min_req = min_req.min(num);
                }
                if min_req != usize::MAX {
                    min_total = min_total.saturating_add(min_req);
                }
            }
            if min_total > ALLOCATION_RESULTS_MAX_SIZE {
                return Err(AllocError::TooManyDevices { claim: claim.key.clone(), count: min_total });
            }
        }
        let found = s.allocate_one(0, 0, 0, 0, false, 0);
        let (picked, chosen) = (std::mem::take(&mut s.results), std::mem::take(&mut s.chosen));
        s.give_back();
        match found {
            Ok(true) => Ok(NodeVerdict::Allocated(Solution { np: Some(np), picked, chosen })),
            Ok(false) | Err(Flow::MaxSize) => {
                if np.pools.iter().any(|p| matches!(p.state, PoolState::Invalid(_))) {
                    Ok(NodeVerdict::InvalidPools)
                } else {
                    Ok(NodeVerdict::CannotAllocate)
                }
            }
            Err(Flow::Work) => Ok(NodeVerdict::WorkLimit),
            Err(Flow::Err(e)) => Err(e),
        }
    }
}

fn consumed_from_request(requested: Option<Quantity>, cap: &Capacity) -> Quantity {
    let Some(r) = requested else {
        return cap.policy.as_ref().and_then(|p| p.default).unwrap_or(cap.value);
    };
    let Some(p) = &cap.policy else { return r };
    if let Some((min, _, step)) = p.valid_range {
        if r < min {
            return min;
        }
        let Some(step) = step else { return r };
        let (rv, sv, mv) = (r.value(), step.value(), min.value());
        if sv <= 0 {
            return r;
        }
        let added = rv - mv;
        let mut n = added / sv;
        if added % sv != 0 {
            n += 1;
        }
        return Quantity((mv + sv * n).saturating_mul(1_000_000_000));
    }
    if !p.valid_values.is_empty() {
        return p.valid_values.iter().copied().find(|v| r <= *v).unwrap_or(r);
    }
    r
}

fn violates_policy(v: Quantity, cap: &Capacity) -> bool {
    let Some(p) = &cap.policy else { return false };
    if p.default == Some(v) {
        return false;
    }
    if let Some((min, max, step)) = p.valid_range {
        if max.is_some_and(|m| v > m) {
            return true;
        }
        if let Some(step) = step {
            let sv = step.value();
            return sv > 0 && (v.value() - min.value()) % sv != 0;
        }
        return false;
    }
    !p.valid_values.is_empty() && !p.valid_values.contains(&v)
}

impl<'a> Search<'a> {
    /// Returns the reusable buffer to the prepared claims.
    fn give_back(self) {
        let mut b = self.p.scratch.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *b = self.select_memo;
    }

    fn slice(&self, k: usize) -> &'a Slice {
        self.np.slice(&self.cands[k])
    }

    fn dev(&self, k: usize) -> &'a Device {
        self.np.device(&self.cands[k])
    }

    fn owner_class(&self, class: &str) -> String {
        format!("class {class}")
    }

    fn device_string(&self, k: usize) -> String {
        self.inp.inventory.device_id_string(self.cands[k].id)
    }

    fn eval(&mut self, e: usize, k: usize, owner: impl FnOnce() -> String, index: usize) -> Result<bool> {
        let compiled = &self.p.exprs[e];
        let id = compiled.id();
        let slot = match self.memo.iter().position(|(i, _)| *i == id) {
            Some(slot) => slot,
            None => {
                self.memo.push((id, vec![0; self.cands.len()].into()));
                self.memo.len() - 1
            }
        };
        match self.memo[slot].1.get(k) {
            Some(1) => return Ok(false),
            Some(2) => return Ok(true),
            _ => {}
        }
        if let Some(msg) = compiled.error() {
            return Err(AllocError::CelCompile { owner: owner(), index, message: format!("compilation failed: {msg}") });
        }
        // Evaluated at most once per device and expression while the node's
        // pools stay valid: the value is built here, not kept.
        let r = {
            let st = self.inp.inventory.strings();
            let c = &self.cands[k];
            let dev = self.np.device(c);
            let attrs = dev.attributes.iter().map(|(n, v)| {
                (
                    st.get(*n),
                    match v {
                        AttrValue::Bool(b) => AttrIn::Bool(*b),
                        AttrValue::Int(i) => AttrIn::Int(*i),
                        AttrValue::Str(s) => AttrIn::Str(st.get(*s)),
                        AttrValue::Version(s) => AttrIn::Version(st.get(*s)),
                    },
                )
            });
            let caps = dev.capacity.iter().map(|(n, cap)| (st.get(*n), cap.value));
            match DeviceVal::new(st.get(c.id.driver), dev.allow_multiple_allocations, attrs, caps) {
                Ok(d) => compiled.matches(&self.p.cel_env, &d),
                Err(e) => Err(e),
            }
        };
        match r {
            Ok(b) => {
                if let Some(m) = self.memo[slot].1.get_mut(k) {
                    *m = if b { 2 } else { 1 };
                }
                Ok(b)
            }
            Err(err) => Err(AllocError::CelRuntime { owner: owner(), index, device: self.device_string(k), message: err.to_string() }),
        }
    }

    /// Class and request selectors, and per-device node selection.
    fn selectable(&mut self, c: usize, r: usize, s: usize, k: usize) -> Result<bool> {
        let f = self.flat[c][r][s];
        let slot = f * self.cands.len() + k;
        match self.select_memo[slot] {
            1 => return Ok(false),
            2 => return Ok(true),
            _ => {}
        }
        let p = self.p;
        let sub = &p.claims[c].requests[r].alts[s];
        let mut ok = true;
        for (i, &e) in sub.class_exprs.iter().enumerate() {
            let owner = self.owner_class(&sub.class_name);
            if !self.eval(e, k, || owner, i)? {
                ok = false;
                break;
            }
        }
        if ok {
            for (i, &e) in sub.req_exprs.iter().enumerate() {
                let key = &p.claims[c].key;
                if !self.eval(e, k, || format!("claim {key}"), i)? {
                    ok = false;
                    break;
                }
            }
        }
        if ok && self.slice(k).per_device_node_selection {
            let st = self.inp.inventory.strings();
            ok = match &self.dev(k).node {
                Some(sel) => sel.matches(st, self.inp.node).map_err(|message| {
                    AllocError::Pools(InventoryError::NodeSelector { slice: st.get(self.slice(k).name).to_string(), message })
                })?,
                None => false,
            };
        }
        self.select_memo[slot] = if ok { 2 } else { 1 };
        Ok(ok)
    }

    /// Upstream's `CmpRequestOverCapacity`: None when a requested capacity
    /// is not defined by the device.
    fn capacity_ok(&self, sub: &PSub, k: usize) -> Option<bool> {
        let dev = self.dev(k);
        let st = self.inp.inventory.strings();
        let mut requested: Vec<(Sym, Quantity)> = Vec::with_capacity(sub.capacity.len());
        for (name, q) in &sub.capacity {
            let sym = st.lookup(name)?;
            if !dev.capacity.iter().any(|(n, _)| *n == sym) {
                return None;
            }
            requested.push((sym, *q));
        }
        let id = self.cands[k].id;
        let current = self.inp.in_use.consumed(id).unwrap_or_default();
        let allocating = self.allocating_capacity.get(&id).map(Vec::as_slice).unwrap_or_default();
        for (name, cap) in dev.capacity.iter() {
            let req = requested.iter().find(|(n, _)| n == name).map(|(_, q)| *q);
            let consumed = consumed_from_request(req, cap);
            if violates_policy(consumed, cap) {
                return Some(false);
            }
            let mut total = consumed;
            if let Some((_, q)) = current.iter().find(|(n, _)| n == name) {
                total = total.saturating_add(*q);
            }
            if let Some((_, q)) = allocating.iter().find(|(n, _)| n == name) {
                total = total.saturating_add(*q);
            }
            if total > cap.value {
                return Some(false);
            }
        }
        Some(true)
    }

    fn in_use(&self, id: DeviceId) -> bool {
        self.allocating.iter().any(|(d, _)| *d == id) || self.inp.in_use.is_dedicated(id)
    }

    fn allocating_for(&self, id: DeviceId, claim: usize) -> bool {
        self.allocating.contains(&(id, claim))
    }

    fn taint_blocks(&self, k: usize, sub: &PSub) -> bool {
        let st = self.inp.inventory.strings();
        let c = &self.cands[k];
        self.inp.inventory.taints(c.id, self.np.device(c)).any(|t| {
            let effect = match t.effect {
                TaintEffect::NoSchedule => "NoSchedule",
                TaintEffect::NoExecute => "NoExecute",
                TaintEffect::Other(_) => return false,
            };
            !sub.tolerations.iter().any(|tol| tol.tolerates(st.get(t.key), st.get(t.value), effect))
        })
    }

    /// Counters available in a pool, less those of allocated devices (computed once).
    fn available_counters(&mut self, pool: usize) -> &SymMap<(Sym, Sym), Quantity> {
        let inp = self.inp;
        let pools = self.pools;
        self.available.entry(pool).or_insert_with(|| {
            let p = &pools[pool];
            let mut avail = SymMap::default();
            for (set, counters) in &p.counter_sets {
                for (n, q) in counters.iter() {
                    avail.insert((*set, *n), *q);
                }
            }
            for slice in p.slices.iter().chain(p.other_slices.iter()) {
                for d in slice.devices.iter() {
                    let id = DeviceId { driver: p.driver, pool: p.pool, device: d.name };
                    if !inp.in_use.is_allocated(id) {
                        continue;
                    }
                    for cu in d.consumes_counters.iter() {
                        for (n, q) in cu.counters.iter() {
                            if let Some(v) = avail.get_mut(&(cu.counter_set, *n)) {
                                *v = Quantity::saturating_sub(*v, *q);
                            }
                        }
                    }
                }
            }
            avail
        })
    }

    fn dealloc_counters(&mut self, k: usize) {
        let pool = self.cands[k].pool as usize;
        for cu in self.dev(k).consumes_counters.iter() {
            for (n, q) in cu.counters.iter() {
                if let Some(v) = self.consumed_counters.get_mut(&(pool, cu.counter_set, *n)) {
                    *v = v.saturating_sub(*q);
                }
            }
        }
    }

    fn check_counters(&mut self, k: usize) -> bool {
        let pool = self.cands[k].pool as usize;
        let avail = self.available_counters(pool).clone();
        let dev = self.dev(k);
        for cu in dev.consumes_counters.iter() {
            for (n, q) in cu.counters.iter() {
                let e = self.consumed_counters.entry((pool, cu.counter_set, *n)).or_default();
                *e = e.saturating_add(*q);
            }
        }
        for ((set, n), a) in &avail {
            let used = self.consumed_counters.get(&(pool, *set, *n)).copied().unwrap_or_default();
            if *a < used {
                self.dealloc_counters(k);
                return false;
            }
        }
        true
    }

    fn constraint_add(&mut self, c: usize, i: usize, base: &str, sub: Option<&str>, k: usize) -> bool {
        let st = self.inp.inventory.strings();
        let cand = &self.cands[k];
        let dev = self.np.device(cand);
        match &mut self.constraints[c][i] {
            CState::Match { all, requests, attr, value, n } => {
                if !applies(requests, *all, base, sub) {
                    return true;
                }
                let Some(v) = dev.attribute(st, cand.id.driver, attr) else { return false };
                if *n == 0 {
                    *value = Some(v);
                    *n = 1;
                    return true;
                }
                if *value != Some(v) {
                    return false;
                }
                *n += 1;
                true
            }
            CState::Distinct { all, requests, attr, values, n } => {
                if !applies(requests, *all, base, sub) {
                    return true;
                }
                let Some(v) = dev.attribute(st, cand.id.driver, attr) else { return false };
                if *n > 0 && values.iter().any(|(_, x)| *x == v) {
                    return false;
                }
                // Keyed by request name, as upstream's map.
                match values.iter_mut().find(|(r, _)| r == base) {
                    Some(e) => e.1 = v,
                    None => values.push((base.to_string(), v)),
                }
                *n += 1;
                true
            }
        }
    }

    fn constraint_remove(&mut self, c: usize, i: usize, base: &str, sub: Option<&str>) {
        match &mut self.constraints[c][i] {
            CState::Match { all, requests, n, .. } => {
                if applies(requests, *all, base, sub) {
                    *n = n.saturating_sub(1);
                }
            }
            CState::Distinct { all, requests, values, n, .. } => {
                if applies(requests, *all, base, sub) {
                    values.retain(|(r, _)| r != base);
                    *n = n.saturating_sub(1);
                }
            }
        }
    }

    /// Upstream's `allocateDevice`: Some(undo) when the device was taken.
    fn allocate_device(&mut self, c: usize, r: usize, s: usize, k: usize, must: bool) -> Result<Option<Undo<'a>>> {
        let p = self.p;
        let req = &p.claims[c].requests[r];
        let sub = &req.alts[s];
        let (id, dev) = (self.cands[k].id, self.dev(k));
        let multi = dev.allow_multiple_allocations;
        if !multi && sub.admin && self.allocating_for(id, c) {
            return Ok(None);
        }
        if !sub.admin && self.in_use(id) {
            return Ok(None);
        }
        let capacity_in_use = self.inp.in_use.consumed(id).is_some() || self.allocating_capacity.contains_key(&id);
        let skip_counters = multi && capacity_in_use;
        if !skip_counters && !dev.consumes_counters.is_empty() && !self.check_counters(k) {
            return Ok(None);
        }
        // As upstream, counters taken above are not given back when a taint
        // or a constraint refuses the device.
        if self.taint_blocks(k, sub) {
            return Ok(None);
        }
        let base: &'a str = &req.name;
        let subname: Option<&'a str> = req.first_available.then_some(sub.name.as_str());
        for i in 0..self.constraints.get(c).map_or(0, Vec::len) {
            if !self.constraint_add(c, i, base, subname, k) {
                if must {
                    return Err(AllocError::ConstraintUnsatisfiable {
                        claim: p.claims[c].key.clone(),
                        request: sub.name.clone(),
                        device: self.device_string(k),
                    });
                }
                for e in 0..i {
                    self.constraint_remove(c, e, base, subname);
                }
                return Ok(None);
            }
        }
        if !multi {
            self.allocating.push((id, c));
        }
        if self.capacity_ok(sub, k) != Some(true) {
            // As upstream: this late check does not roll back.
            return Ok(None);
        }
        let mut consumed = Vec::new();
        if multi {
            let st = self.inp.inventory.strings();
            for (name, cap) in dev.capacity.iter() {
                let requested = sub.capacity.iter().find(|(n, _)| st.get(*name) == n).map(|(_, q)| *q);
                consumed.push((*name, consumed_from_request(requested, cap)));
            }
            let agg = self.allocating_capacity.entry(id).or_default();
            for (n, q) in &consumed {
                match agg.iter_mut().find(|(x, _)| x == n) {
                    Some((_, v)) => *v = v.saturating_add(*q),
                    None => agg.push((*n, *q)),
                }
            }
        }
        self.results[c].push(Picked { cand: k, req: r, sub: s, consumed: consumed.clone(), shared: multi });
        Ok(Some(Undo {
            claim: c,
            cand: k,
            multi,
            counters: !dev.consumes_counters.is_empty(),
            consumed,
            base,
            sub: subname,
        }))
    }

    fn undo(&mut self, u: Undo<'a>) {
        let c = u.claim;
        for i in 0..self.constraints.get(c).map_or(0, Vec::len) {
            self.constraint_remove(c, i, u.base, u.sub);
        }
        let id = self.cands[u.cand].id;
        if let Some(pos) = self.allocating.iter().rposition(|x| *x == (id, c)) {
            self.allocating.remove(pos);
        }
        if u.multi {
            if let Some(agg) = self.allocating_capacity.get_mut(&id) {
                for (n, q) in &u.consumed {
                    if let Some((_, v)) = agg.iter_mut().find(|(x, _)| x == n) {
                        *v = v.saturating_sub(*q);
                    }
                }
                if agg.iter().all(|(_, v)| v.0 == 0) {
                    self.allocating_capacity.remove(&id);
                }
            }
        } else if u.counters {
            self.dealloc_counters(u.cand);
        }
        self.results[c].pop();
    }

    fn allocate_one(&mut self, c: usize, r: usize, s: usize, d: usize, in_sub: bool, start: usize) -> std::result::Result<bool, Flow> {
        self.steps += 1;
        if self.steps > self.inp.max_steps {
            return Err(Flow::Work);
        }
        let p = self.p;
        let Some(claim) = p.claims.get(c) else { return Ok(true) };
        let Some(req) = claim.requests.get(r) else {
            return match self.allocate_one(c + 1, 0, 0, 0, false, 0) {
                Err(Flow::MaxSize) => Ok(false),
                other => other,
            };
        };
        if req.first_available && !in_sub {
            let mut all_exceeded = true;
            for si in 0..req.alts.len() {
                match self.allocate_one(c, r, si, 0, true, 0) {
                    Err(Flow::MaxSize) => continue,
                    Err(e) => return Err(e),
                    Ok(true) => {
                        if let Some(x) = self.chosen.get_mut(c).and_then(|v| v.get_mut(r)) {
                            *x = Some(si);
                        }
                        return Ok(true);
                    }
                    Ok(false) => all_exceeded = false,
                }
            }
            return if all_exceeded { Err(Flow::MaxSize) } else { Ok(false) };
        }
        let Some(sub) = req.alts.get(s) else { return Ok(false) };
        let f = self.flat[c][r][s];
        if sub.all && self.all_devices[f].is_empty() {
            return Ok(false);
        }
        let num = if sub.all { self.all_devices[f].len() } else { sub.count };
        if d >= num {
            return self.allocate_one(c, r + 1, 0, 0, false, 0);
        }
        if self.results[c].len() + (num - d) > ALLOCATION_RESULTS_MAX_SIZE {
            return Err(Flow::MaxSize);
        }
        if sub.all {
            let k = self.all_devices[f][d];
            let Some(u) = self.allocate_device(c, r, s, k, true)? else { return Ok(false) };
            return match self.allocate_one(c, r, s, d + 1, in_sub, 0) {
                Ok(true) => Ok(true),
                other => {
                    self.undo(u);
                    other
                }
            };
        }
        for k in start..self.cands.len() {
            let id = self.cands[k].id;
            if sub.admin {
                if self.allocating_for(id, c) {
                    continue;
                }
            } else if self.in_use(id) {
                continue;
            }
            if !self.selectable(c, r, s, k)? {
                continue;
            }
            if self.capacity_ok(sub, k) != Some(true) {
                continue;
            }
            let Some(u) = self.allocate_device(c, r, s, k, false)? else { continue };
            match self.allocate_one(c, r, s, d + 1, in_sub, k + 1) {
                Ok(true) => return Ok(true),
                Ok(false) => self.undo(u),
                Err(e) => {
                    self.undo(u);
                    return Err(e);
                }
            }
        }
        Ok(false)
    }
}

/// A node's solution, compact: which candidate each claim's devices are.
/// [`Prepared::materialize`] turns it into [`ClaimAllocation`]s; the
/// plugin does that only for the node it reserves (or explains).
#[derive(Debug)]
pub struct Solution {
    /// The node's pools (None when there was nothing to allocate).
    np: Option<Arc<NodePools>>,
    picked: Vec<Vec<Picked>>,
    chosen: Vec<Vec<Option<usize>>>,
}

impl Solution {
    /// Per claim, per request: the index of the chosen firstAvailable
    /// subrequest (as [`ClaimAllocation::chosen_subrequests`]).
    pub fn chosen_subrequests(&self) -> &[Vec<Option<usize>>] {
        &self.chosen
    }
}

impl Prepared {
    /// The allocations of a [`Solution`] found by [`Prepared::allocate_compact`]
    /// on `node` with `inventory` (the same the search read).
    pub fn materialize(&self, sol: &Solution, inventory: &Inventory, node: &str) -> Vec<ClaimAllocation> {
        let st = inventory.strings();
        let Some(np) = sol.np.as_deref() else { return Vec::new() };
        let mut out = Vec::with_capacity(self.claims.len());
        for (ci, claim) in self.claims.iter().enumerate() {
            let Some(picked) = sol.picked.get(ci) else { break };
            let results = picked
                .iter()
                .enumerate()
                .map(|(i, pk)| {
                    let sub = &claim.requests[pk.req].alts[pk.sub];
                    let id = np.cands[pk.cand].id;
                    let share_id = pk.shared.then(|| {
                        let mut h = DefaultHasher::new();
                        (&claim.key, &sub.full_name, st.get(id.device), i).hash(&mut h);
                        let a = h.finish();
                        ("share", a).hash(&mut h);
                        let b = h.finish();
                        format!(
                            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                            a >> 32,
                            (a >> 16) & 0xffff,
                            a & 0xfff,
                            b >> 52,
                            b & 0xffff_ffff_ffff
                        )
                    });
                    DeviceResult {
                        request: sub.full_name.clone(),
                        driver: st.get(id.driver).to_string(),
                        pool: st.get(id.pool).to_string(),
                        device: st.get(id.device).to_string(),
                        id,
                        admin_access: sub.admin.then_some(true),
                        tolerations: sub.tolerations.iter().map(|t| t.api.clone()).collect(),
                        consumed_capacity: pk.consumed.iter().map(|(n, q)| (st.get(*n).to_string(), *q)).collect(),
                        consumed: pk.consumed.clone(),
                        share_id,
                    }
                })
                .collect();
            out.push(ClaimAllocation {
                results,
                node_selector: node_selector(np, node, picked),
                chosen_subrequests: sol.chosen.get(ci).cloned().unwrap_or_else(|| vec![None; claim.requests.len()]),
            });
        }
        out
    }
}

fn node_selector(np: &NodePools, node: &str, picked: &[Picked]) -> Option<core::NodeSelector> {
    let mut term = core::NodeSelectorTerm::default();
    let name_only = || core::NodeSelector {
        node_selector_terms: vec![core::NodeSelectorTerm {
            match_fields: Some(vec![core::NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.to_string()]),
            }]),
            match_expressions: None,
        }],
    };
    for pk in picked {
        let c = &np.cands[pk.cand];
        let (slice, dev) = (np.slice(c), np.device(c));
        let sel = if slice.per_device_node_selection { dev.node.as_deref() } else { slice.node.as_ref() };
        if matches!(sel, Some(NodeSel::Name(_))) || dev.binds_to_node {
            return Some(name_only());
        }
        if let Some(NodeSel::Selector(_, api)) = sel
            && let [t] = api.node_selector_terms.as_slice()
        {
            merge_reqs(t.match_fields.as_deref().unwrap_or_default(), &mut term.match_fields);
            merge_reqs(t.match_expressions.as_deref().unwrap_or_default(), &mut term.match_expressions);
        }
    }
    if term.match_fields.as_ref().is_some_and(|v| !v.is_empty()) || term.match_expressions.as_ref().is_some_and(|v| !v.is_empty()) {
        Some(core::NodeSelector { node_selector_terms: vec![term] })
    } else {
        None
    }
}

fn merge_reqs(from: &[core::NodeSelectorRequirement], to: &mut Option<Vec<core::NodeSelectorRequirement>>) {
    let to = to.get_or_insert_with(Vec::new);
    for r in from {
        let mut vals: Vec<&String> = r.values.iter().flatten().collect();
        vals.sort();
        vals.dedup();
        let dup = to.iter().any(|e| {
            let mut ev: Vec<&String> = e.values.iter().flatten().collect();
            ev.sort();
            ev.dedup();
            e.key == r.key && e.operator == r.operator && ev == vals
        });
        if !dup {
            to.push(r.clone());
        }
    }
}

#[cfg(test)]
mod tests;
