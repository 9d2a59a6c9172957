//! Compact views of ResourceSlices and DeviceTaintRules, kept incrementally,
//! and the per-node gathering of resource pools (upstream's `GatherPools`).
//!
//! A slice is compiled once when it is added: names become [`Sym`]s,
//! quantities integers, node selectors compiled selectors. Per node, the
//! slices that can serve it are grouped into pools: only the highest
//! generation of a pool counts, a pool with fewer slices than
//! `resourceSliceCount` is incomplete, and a pool with duplicate device
//! names or bad counter references is invalid (with upstream's reason).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use berth_model::selector::{Labels, NodeSelector};
use k8s_openapi::api::resource::v1 as res;
use thiserror::Error;

use crate::intern::{Interner, Sym};
use crate::quantity::{Quantity, QuantityError};

/// Why a slice or rule could not be read, or pools could not be gathered.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum InventoryError {
    /// A quantity in a slice does not parse.
    #[error("ResourceSlice {slice}: {field}: {source}")]
    Quantity {
        /// The slice's name.
        slice: String,
        /// Where the quantity is.
        field: String,
        /// The parse error.
        #[source]
        source: QuantityError,
    },
    /// A slice has no name.
    #[error("ResourceSlice without metadata.name")]
    NoName,
    /// A node selector in a slice does not compile (reported when a node is matched against it,
    /// as upstream's "failed to perform node selection").
    #[error("failed to perform node selection for slice {slice}: {message}")]
    NodeSelector {
        /// The slice's name.
        slice: String,
        /// What is wrong.
        message: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, InventoryError>;

/// The node a decision is made for.
#[derive(Clone, Copy, Debug)]
pub struct NodeRef<'a> {
    /// metadata.name.
    pub name: &'a str,
    /// metadata.labels.
    pub labels: &'a Labels,
}

/// Which nodes a slice (or, with perDeviceNodeSelection, a device) serves.
#[derive(Clone, Debug)]
pub enum NodeSel {
    /// spec.nodeName: that node only.
    Name(Sym),
    /// spec.allNodes.
    All,
    /// spec.nodeSelector, compiled; `Err` keeps a selector that does not compile.
    Selector(Arc<std::result::Result<NodeSelector, String>>, Arc<k8s_openapi::api::core::v1::NodeSelector>),
}

impl NodeSel {
    fn from_fields(
        strings: &mut Interner,
        name: Option<&str>,
        all: Option<bool>,
        sel: Option<&k8s_openapi::api::core::v1::NodeSelector>,
    ) -> Option<NodeSel> {
        match (name.filter(|n| !n.is_empty()), all.unwrap_or(false), sel) {
            (Some(n), _, _) => Some(NodeSel::Name(strings.intern(n))),
            (None, true, _) => Some(NodeSel::All),
            (None, false, Some(s)) => Some(NodeSel::Selector(Arc::new(NodeSelector::compile(s, "nodeSelector")), Arc::new(s.clone()))),
            _ => None,
        }
    }

    /// Does it select the node? (upstream's `NodeMatches`)
    pub fn matches(&self, strings: &Interner, node: NodeRef<'_>) -> std::result::Result<bool, String> {
        match self {
            NodeSel::Name(n) => Ok(strings.get(*n) == node.name),
            NodeSel::All => Ok(true),
            NodeSel::Selector(s, _) => match s.as_ref() {
                Ok(s) => Ok(s.matches(node.name, node.labels)),
                Err(e) => Err(e.clone()),
            },
        }
    }
}

/// Which nodes a change can affect ([`Inventory::pool_reach`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// No node.
    Nowhere,
    /// That node only.
    Node(Sym),
    /// Any node.
    Everywhere,
}

/// A device attribute's value. List values (the alpha DRAListTypeAttributes
/// gate, off in 1.37) are not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttrValue {
    /// bool.
    Bool(bool),
    /// int.
    Int(i64),
    /// string.
    Str(Sym),
    /// version (a semver string, compared as a string by constraints).
    Version(Sym),
}

/// A capacity's request policy (consumable capacity).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestPolicy {
    /// requestPolicy.default.
    pub default: Option<Quantity>,
    /// requestPolicy.validValues (sorted as given).
    pub valid_values: Vec<Quantity>,
    /// requestPolicy.validRange: (min, max, step).
    pub valid_range: Option<(Quantity, Option<Quantity>, Option<Quantity>)>,
}

/// One capacity of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// The capacity's value.
    pub value: Quantity,
    /// Its request policy, if any.
    pub policy: Option<Box<RequestPolicy>>,
}

/// A device taint's effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    /// NoSchedule: prevents allocation unless tolerated.
    NoSchedule,
    /// NoExecute: prevents allocation unless tolerated.
    NoExecute,
    /// None, or an effect this version does not know: does not prevent allocation.
    Other(Sym),
}

/// A device taint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    /// The key.
    pub key: Sym,
    /// The value ("" when absent).
    pub value: Sym,
    /// The effect.
    pub effect: TaintEffect,
}

impl Taint {
    fn compile(strings: &mut Interner, t: &res::DeviceTaint) -> Taint {
        let effect = match t.effect.as_str() {
            "NoSchedule" => TaintEffect::NoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            other => TaintEffect::Other(strings.intern(other)),
        };
        Taint { key: strings.intern(&t.key), value: strings.intern(t.value.as_deref().unwrap_or("")), effect }
    }
}

/// Counters a device consumes from one counter set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterUse {
    /// The counter set's name.
    pub counter_set: Sym,
    /// Counter name and amount.
    pub counters: Box<[(Sym, Quantity)]>,
}

/// A counter set shared by a pool's devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterSet {
    /// The set's name.
    pub name: Sym,
    /// Counter name and amount available.
    pub counters: Box<[(Sym, Quantity)]>,
}

/// One device, compact: every name is a symbol.
#[derive(Clone, Debug)]
pub struct Device {
    /// The device's name.
    pub name: Sym,
    /// Attributes by qualified name as written (`model` or `gpu.example.com/model`).
    pub attributes: Box<[(Sym, AttrValue)]>,
    /// Capacities by qualified name as written.
    pub capacity: Box<[(Sym, Capacity)]>,
    /// Taints in the slice (DeviceTaintRules are applied by [`Inventory::taints`]).
    pub taints: Box<[Taint]>,
    /// Counters consumed (partitionable devices).
    pub consumes_counters: Box<[CounterUse]>,
    /// Node selection of the device (when the slice has perDeviceNodeSelection).
    pub node: Option<Box<NodeSel>>,
    /// allowMultipleAllocations (consumable capacity).
    pub allow_multiple_allocations: bool,
    /// bindsToNode.
    pub binds_to_node: bool,
    /// The device has bindingConditions (such pools are tried last).
    pub has_binding_conditions: bool,
}

impl Device {
    /// Looks an attribute up by fully qualified name as upstream's constraints do:
    /// the exact name first, then, when the domain is the driver, the bare name.
    pub fn attribute(&self, strings: &Interner, driver: Sym, qualified: &str) -> Option<AttrValue> {
        let find = |name: &str| {
            strings.lookup(name).and_then(|s| self.attributes.iter().find(|(n, _)| *n == s).map(|(_, v)| *v))
        };
        if let Some(v) = find(qualified) {
            return Some(v);
        }
        let (domain, id) = qualified.split_once('/')?;
        if domain != strings.get(driver) {
            return None;
        }
        find(id)
    }

    /// Heap and inline bytes of this device's state.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Device>()
            + self.attributes.len() * std::mem::size_of::<(Sym, AttrValue)>()
            + self
                .capacity
                .iter()
                .map(|(_, c)| {
                    std::mem::size_of::<(Sym, Capacity)>()
                        + c.policy.as_ref().map_or(0, |p| std::mem::size_of::<RequestPolicy>() + p.valid_values.len() * 16)
                })
                .sum::<usize>()
            + self.taints.len() * std::mem::size_of::<Taint>()
            + self
                .consumes_counters
                .iter()
                .map(|c| std::mem::size_of::<CounterUse>() + c.counters.len() * std::mem::size_of::<(Sym, Quantity)>())
                .sum::<usize>()
            + self.node.as_ref().map_or(0, |_| std::mem::size_of::<NodeSel>())
    }
}

/// One ResourceSlice, compiled.
#[derive(Clone, Debug)]
pub struct Slice {
    /// metadata.name.
    pub name: Sym,
    /// spec.driver.
    pub driver: Sym,
    /// spec.pool.name.
    pub pool: Sym,
    /// spec.pool.generation.
    pub generation: i64,
    /// spec.pool.resourceSliceCount.
    pub slice_count: i64,
    /// spec.nodeName / allNodes / nodeSelector; None for perDeviceNodeSelection (or none set).
    pub node: Option<NodeSel>,
    /// spec.perDeviceNodeSelection.
    pub per_device_node_selection: bool,
    /// spec.sharedCounters.
    pub shared_counters: Box<[CounterSet]>,
    /// spec.devices.
    pub devices: Box<[Device]>,
}

/// A DeviceTaintRule: a taint applied to every device its selector matches.
#[derive(Clone, Debug)]
pub struct TaintRule {
    /// spec.deviceSelector.driver.
    pub driver: Option<Sym>,
    /// spec.deviceSelector.pool.
    pub pool: Option<Sym>,
    /// spec.deviceSelector.device.
    pub device: Option<Sym>,
    /// spec.taint.
    pub taint: Taint,
}

/// A device's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    /// Driver name.
    pub driver: Sym,
    /// Pool name.
    pub pool: Sym,
    /// Device name.
    pub device: Sym,
}

/// Whether a gathered pool can be allocated from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolState {
    /// Complete and valid.
    Ready,
    /// Fewer slices than resourceSliceCount: being updated.
    Incomplete,
    /// Invalid, with upstream's reason ("duplicate device name gpu-0", ...).
    Invalid(String),
}

/// A resource pool as seen from one node.
#[derive(Clone, Debug)]
pub struct Pool {
    /// Driver.
    pub driver: Sym,
    /// Pool name.
    pub pool: Sym,
    /// Ready, incomplete or invalid.
    pub state: PoolState,
    /// The slices with devices that can serve the node, sorted by name.
    pub slices: Vec<Arc<Slice>>,
    /// The pool's other device slices (they consume the same counters).
    pub other_slices: Vec<Arc<Slice>>,
    /// Counter sets of the pool by name.
    pub counter_sets: HashMap<Sym, Box<[(Sym, Quantity)]>>,
}

/// A device of a node's ready pools, by position in [`NodePools::pools`].
#[derive(Clone, Copy, Debug)]
pub struct CandRef {
    /// Index of the pool.
    pub pool: u32,
    /// Index of the slice in the pool's `slices`.
    pub slice: u32,
    /// Index of the device in the slice's `devices`.
    pub dev: u32,
    /// The device's id.
    pub id: DeviceId,
}

/// Results of selector expressions on a node's devices: per compiled
/// expression (by [`crate::cel::Compiled::id`]), one byte per candidate
/// (0: not evaluated yet, 1: false, 2: true).
pub type SelectorMemo = Vec<(u64, Box<[u8]>)>;

/// A node's pools, gathered once ([`Inventory::node_pools`]) and kept while
/// nothing they were gathered from changes.
#[derive(Debug)]
pub struct NodePools {
    /// The pools, as [`Inventory::pools_for_node`] returns them.
    pub pools: Vec<Pool>,
    /// Every device of the ready pools, in pool order (driver, pool, slice
    /// name, device order): the allocator's candidates.
    pub cands: Vec<CandRef>,
    /// Selector results per device. A device's result depends only on the
    /// expression and the device, and the device does not change while this
    /// entry is valid (a change of its slice drops the entry), so results
    /// carry over from one scheduling cycle to the next.
    memo: Mutex<SelectorMemo>,
    /// (driver, pool) and its generation for every pool seen while gathering.
    pool_gens: Box<[((Sym, Sym), u64)]>,
    /// The node's labels when a slice's node selector was consulted (a label
    /// change can change the pools then).
    labels: Option<Labels>,
}

impl NodePools {
    /// The selector memo (see [`SelectorMemo`]); the allocator holds it for one search.
    pub fn memo(&self) -> MutexGuard<'_, SelectorMemo> {
        self.memo.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slice of a candidate.
    pub fn slice(&self, c: &CandRef) -> &Slice {
        &self.pools[c.pool as usize].slices[c.slice as usize]
    }

    /// The device of a candidate.
    pub fn device(&self, c: &CandRef) -> &Device {
        &self.slice(c).devices[c.dev as usize]
    }

    /// Bytes held by this entry beyond the slices it shares (candidates,
    /// pool records and memo), for memory figures.
    pub fn size_bytes(&self) -> usize {
        let memo: usize = self.memo().iter().map(|(_, m)| 24 + m.len()).sum();
        std::mem::size_of::<NodePools>()
            + self.cands.len() * std::mem::size_of::<CandRef>()
            + self
                .pools
                .iter()
                .map(|p| {
                    std::mem::size_of::<Pool>()
                        + (p.slices.len() + p.other_slices.len()) * 8
                        + p.counter_sets.values().map(|c| 32 + c.len() * std::mem::size_of::<(Sym, Quantity)>()).sum::<usize>()
                })
                .sum::<usize>()
            + self.pool_gens.len() * std::mem::size_of::<((Sym, Sym), u64)>()
            + memo
    }
}

/// The per-node pools kept across cycles, by node name. Cloning the
/// inventory (copy on write) shares the entries: an entry is immutable but
/// for its memo, which stays right for the same devices.
#[derive(Default)]
struct NodeCache(Mutex<HashMap<String, Arc<NodePools>>>);

impl NodeCache {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<NodePools>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Clone for NodeCache {
    fn clone(&self) -> Self {
        NodeCache(Mutex::new(self.lock().clone()))
    }
}

impl std::fmt::Debug for NodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCache").field("nodes", &self.lock().len()).finish()
    }
}

/// All ResourceSlices and DeviceTaintRules, kept incrementally, and each
/// node's gathered pools ([`Inventory::node_pools`]).
///
/// A node's entry is dropped when a slice published for that node
/// (spec.nodeName) is added, updated or removed; all entries are dropped
/// when a slice for allNodes, a nodeSelector or perDeviceNodeSelection
/// changes; an entry is stale when a slice of one of its pools (on any
/// node) changed since (per-pool generations), or when the node's labels
/// changed and a node selector was consulted. DeviceTaintRules are not part
/// of the entries: taints are read at allocation time.
#[derive(Debug, Default, Clone)]
pub struct Inventory {
    strings: Interner,
    slices: HashMap<String, Arc<Slice>>,
    on_node: HashMap<Sym, BTreeSet<String>>,
    not_on_node: BTreeSet<String>,
    by_pool: HashMap<(Sym, Sym), BTreeSet<String>>,
    taint_rules: BTreeMap<String, TaintRule>,
    /// Generation of each pool: bumped when one of its slices changes.
    pool_gen: HashMap<(Sym, Sym), u64>,
    /// The last generation handed out.
    last_gen: u64,
    node_cache: NodeCache,
}

fn qty(slice: &str, field: impl FnOnce() -> String, q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Result<Quantity> {
    Quantity::parse(&q.0).map_err(|source| InventoryError::Quantity { slice: slice.to_string(), field: field(), source })
}

impl Inventory {
    /// An empty inventory.
    pub fn new() -> Self {
        Self::default()
    }

    /// The string table (to resolve [`Sym`]s).
    pub fn strings(&self) -> &Interner {
        &self.strings
    }

    /// Interns a string (for callers building [`DeviceId`]s, e.g. from allocation results).
    pub fn intern(&mut self, s: &str) -> Sym {
        self.strings.intern(s)
    }

    /// The id of a device named by strings (interning them).
    pub fn device_id(&mut self, driver: &str, pool: &str, device: &str) -> DeviceId {
        DeviceId { driver: self.intern(driver), pool: self.intern(pool), device: self.intern(device) }
    }

    /// `driver/pool/device`, as upstream prints a device id.
    pub fn device_id_string(&self, id: DeviceId) -> String {
        format!("{}/{}/{}", self.strings.get(id.driver), self.strings.get(id.pool), self.strings.get(id.device))
    }

    /// How many slices are kept.
    pub fn num_slices(&self) -> usize {
        self.slices.len()
    }

    /// A slice by name.
    pub fn slice(&self, name: &str) -> Option<&Arc<Slice>> {
        self.slices.get(name)
    }

    /// Adds or replaces a slice.
    pub fn upsert_slice(&mut self, s: &res::ResourceSlice) -> Result<()> {
        let name = s.metadata.name.clone().ok_or(InventoryError::NoName)?;
        let compiled = self.compile_slice(&name, &s.spec)?;
        self.remove_slice(&name);
        self.invalidate(&compiled);
        let node_name = match &compiled.node {
            Some(NodeSel::Name(n)) => Some(*n),
            _ => None,
        };
        match node_name {
            Some(n) => {
                self.on_node.entry(n).or_default().insert(name.clone());
            }
            None => {
                self.not_on_node.insert(name.clone());
            }
        }
        self.by_pool.entry((compiled.driver, compiled.pool)).or_default().insert(name.clone());
        self.slices.insert(name, Arc::new(compiled));
        Ok(())
    }

    /// Removes a slice (no-op when unknown).
    pub fn remove_slice(&mut self, name: &str) {
        let Some(old) = self.slices.remove(name) else { return };
        self.invalidate(&old);
        if let Some(NodeSel::Name(n)) = &old.node {
            if let Some(set) = self.on_node.get_mut(n) {
                set.remove(name);
                if set.is_empty() {
                    self.on_node.remove(n);
                }
            }
        } else {
            self.not_on_node.remove(name);
        }
        let key = (old.driver, old.pool);
        if let Some(set) = self.by_pool.get_mut(&key) {
            set.remove(name);
            if set.is_empty() {
                self.by_pool.remove(&key);
            }
        }
    }

    /// Which nodes a change of `slice` (added, updated or removed) can
    /// affect: its node for a node-local slice, any node otherwise.
    pub fn slice_reach(&self, slice: &Slice) -> Reach {
        match &slice.node {
            Some(NodeSel::Name(n)) => Reach::Node(*n),
            _ => Reach::Everywhere,
        }
    }

    /// Which nodes a change in the use of a device of pool `driver`/`pool`
    /// can affect: no node when no slice publishes the pool, its node when
    /// every slice of the pool is that node's, any node otherwise (allNodes,
    /// nodeSelector, perDeviceNodeSelection, or slices on several nodes).
    pub fn pool_reach(&self, driver: Sym, pool: Sym) -> Reach {
        let mut reach = Reach::Nowhere;
        for name in self.by_pool.get(&(driver, pool)).into_iter().flatten() {
            let Some(slice) = self.slices.get(name) else { continue };
            match (reach, self.slice_reach(slice)) {
                (Reach::Nowhere, r) => reach = r,
                (Reach::Node(a), Reach::Node(b)) if a == b => {}
                _ => return Reach::Everywhere,
            }
        }
        reach
    }

    /// Adds or replaces a DeviceTaintRule.
    pub fn upsert_taint_rule(&mut self, r: &res::DeviceTaintRule) -> Result<()> {
        let name = r.metadata.name.clone().ok_or(InventoryError::NoName)?;
        let sel = r.spec.device_selector.as_ref();
        let rule = TaintRule {
            driver: sel.and_then(|s| s.driver.as_deref()).map(|s| self.strings.intern(s)),
            pool: sel.and_then(|s| s.pool.as_deref()).map(|s| self.strings.intern(s)),
            device: sel.and_then(|s| s.device.as_deref()).map(|s| self.strings.intern(s)),
            taint: Taint::compile(&mut self.strings, &r.spec.taint),
        };
        self.taint_rules.insert(name, rule);
        Ok(())
    }

    /// Removes a DeviceTaintRule.
    pub fn remove_taint_rule(&mut self, name: &str) {
        self.taint_rules.remove(name);
    }

    /// The taints of a device: its own and those of matching DeviceTaintRules.
    pub fn taints<'a>(&'a self, id: DeviceId, device: &'a Device) -> impl Iterator<Item = &'a Taint> + 'a {
        device.taints.iter().chain(self.taint_rules.values().filter_map(move |r| {
            let ok = r.driver.is_none_or(|d| d == id.driver)
                && r.pool.is_none_or(|p| p == id.pool)
                && r.device.is_none_or(|d| d == id.device);
            ok.then_some(&r.taint)
        }))
    }

    fn compile_slice(&mut self, name: &str, spec: &res::ResourceSliceSpec) -> Result<Slice> {
        let st = &mut self.strings;
        let driver = st.intern(&spec.driver);
        let node = NodeSel::from_fields(st, spec.node_name.as_deref(), spec.all_nodes, spec.node_selector.as_ref());
        let mut shared = Vec::new();
        for (i, cs) in spec.shared_counters.iter().flatten().enumerate() {
            let mut counters = Vec::with_capacity(cs.counters.len());
            for (cn, c) in &cs.counters {
                counters.push((st.intern(cn), qty(name, || format!("spec.sharedCounters[{i}].counters[{cn}]"), &c.value)?));
            }
            shared.push(CounterSet { name: st.intern(&cs.name), counters: counters.into() });
        }
        let mut devices = Vec::with_capacity(spec.devices.as_ref().map_or(0, Vec::len));
        for (di, d) in spec.devices.iter().flatten().enumerate() {
            let mut attributes = Vec::new();
            for (an, a) in d.attributes.iter().flatten() {
                let v = if let Some(b) = a.bool {
                    AttrValue::Bool(b)
                } else if let Some(i) = a.int {
                    AttrValue::Int(i)
                } else if let Some(s) = &a.string {
                    AttrValue::Str(st.intern(s))
                } else if let Some(v) = &a.version {
                    AttrValue::Version(st.intern(v))
                } else {
                    continue;
                };
                attributes.push((st.intern(an), v));
            }
            let mut capacity = Vec::new();
            for (cn, c) in d.capacity.iter().flatten() {
                let field = |what: &str| format!("spec.devices[{di}].capacity[{cn}]{what}");
                let value = qty(name, || field(".value"), &c.value)?;
                let policy = match &c.request_policy {
                    None => None,
                    Some(p) => {
                        let mut rp = RequestPolicy::default();
                        if let Some(q) = &p.default {
                            rp.default = Some(qty(name, || field(".requestPolicy.default"), q)?);
                        }
                        for q in p.valid_values.iter().flatten() {
                            rp.valid_values.push(qty(name, || field(".requestPolicy.validValues"), q)?);
                        }
                        if let Some(r) = &p.valid_range {
                            let min = qty(name, || field(".requestPolicy.validRange.min"), &r.min)?;
                            let max = r.max.as_ref().map(|q| qty(name, || field(".requestPolicy.validRange.max"), q)).transpose()?;
                            let step = r.step.as_ref().map(|q| qty(name, || field(".requestPolicy.validRange.step"), q)).transpose()?;
                            rp.valid_range = Some((min, max, step));
                        }
                        Some(Box::new(rp))
                    }
                };
                capacity.push((st.intern(cn), Capacity { value, policy }));
            }
            let taints: Vec<Taint> = d.taints.iter().flatten().map(|t| Taint::compile(st, t)).collect();
            let mut consumes = Vec::new();
            for (ci, cc) in d.consumes_counters.iter().flatten().enumerate() {
                let mut counters = Vec::with_capacity(cc.counters.len());
                for (cn, c) in &cc.counters {
                    counters.push((st.intern(cn), qty(name, || format!("spec.devices[{di}].consumesCounters[{ci}].counters[{cn}]"), &c.value)?));
                }
                consumes.push(CounterUse { counter_set: st.intern(&cc.counter_set), counters: counters.into() });
            }
            let dnode = if spec.per_device_node_selection.unwrap_or(false) {
                NodeSel::from_fields(st, d.node_name.as_deref(), d.all_nodes, d.node_selector.as_ref()).map(Box::new)
            } else {
                None
            };
            devices.push(Device {
                name: st.intern(&d.name),
                attributes: attributes.into(),
                capacity: capacity.into(),
                taints: taints.into(),
                consumes_counters: consumes.into(),
                node: dnode,
                allow_multiple_allocations: d.allow_multiple_allocations.unwrap_or(false),
                binds_to_node: d.binds_to_node.unwrap_or(false),
                has_binding_conditions: d.binding_conditions.as_ref().is_some_and(|c| !c.is_empty()),
            });
        }
        Ok(Slice {
            name: st.intern(name),
            driver,
            pool: st.intern(&spec.pool.name),
            generation: spec.pool.generation,
            slice_count: spec.pool.resource_slice_count,
            node,
            per_device_node_selection: spec.per_device_node_selection.unwrap_or(false),
            shared_counters: shared.into(),
            devices: devices.into(),
        })
    }

    /// Drops the cached pools a change of `slice` can affect (see the type's docs).
    fn invalidate(&mut self, slice: &Slice) {
        self.last_gen += 1;
        self.pool_gen.insert((slice.driver, slice.pool), self.last_gen);
        let mut cache = self.node_cache.lock();
        match &slice.node {
            Some(NodeSel::Name(n)) => {
                cache.remove(self.strings.get(*n));
            }
            _ => cache.clear(),
        }
    }

    /// How many nodes have their pools cached.
    pub fn cached_nodes(&self) -> usize {
        self.node_cache.lock().len()
    }

    /// Bytes held by the per-node cache (beyond the slices it shares), for memory figures.
    pub fn cache_bytes(&self) -> usize {
        self.node_cache.lock().iter().map(|(n, e)| n.len() + 48 + e.size_bytes()).sum()
    }

    /// The pools that can serve a node with their candidate devices, kept
    /// across calls while still valid (see the type's docs); the same pools
    /// as [`Inventory::pools_for_node`].
    pub fn node_pools(&self, node: NodeRef<'_>) -> Result<Arc<NodePools>> {
        if let Some(e) = self.node_cache.lock().get(node.name)
            && self.still_valid(e, node)
        {
            return Ok(e.clone());
        }
        let (pools, seen, label_dependent) = self.gather(node)?;
        let mut cands = Vec::new();
        for (pi, pool) in pools.iter().enumerate() {
            if pool.state != PoolState::Ready {
                continue;
            }
            for (si, slice) in pool.slices.iter().enumerate() {
                for (di, dev) in slice.devices.iter().enumerate() {
                    cands.push(CandRef {
                        pool: u32::try_from(pi).unwrap_or(u32::MAX),
                        slice: u32::try_from(si).unwrap_or(u32::MAX),
                        dev: u32::try_from(di).unwrap_or(u32::MAX),
                        id: DeviceId { driver: pool.driver, pool: pool.pool, device: dev.name },
                    });
                }
            }
        }
        let pool_gens = seen.into_iter().map(|k| (k, self.pool_gen.get(&k).copied().unwrap_or(0))).collect();
        let entry = Arc::new(NodePools {
            pools,
            cands,
            memo: Mutex::new(Vec::new()),
            pool_gens,
            labels: label_dependent.then(|| node.labels.clone()),
        });
        self.node_cache.lock().insert(node.name.to_string(), entry.clone());
        Ok(entry)
    }

    fn still_valid(&self, e: &NodePools, node: NodeRef<'_>) -> bool {
        e.pool_gens.iter().all(|(k, g)| self.pool_gen.get(k).copied().unwrap_or(0) == *g)
            && e.labels.as_ref().is_none_or(|l| l == node.labels)
    }

    /// Does a slice serve the node at all? (the relevance test of upstream's `GatherPools`)
    fn relevant(&self, slice: &Slice, node: NodeRef<'_>) -> Result<bool> {
        let err = |message: String| InventoryError::NodeSelector { slice: self.strings.get(slice.name).to_string(), message };
        if let Some(sel) = &slice.node {
            return sel.matches(&self.strings, node).map_err(err);
        }
        if slice.per_device_node_selection {
            for d in slice.devices.iter() {
                if let Some(sel) = &d.node
                    && sel.matches(&self.strings, node).map_err(err)?
                {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The pools that can serve a node, in upstream's order (by driver, then
    /// pool name; pools with binding conditions last).
    pub fn pools_for_node(&self, node: NodeRef<'_>) -> Result<Vec<Pool>> {
        self.gather(node).map(|(pools, _, _)| pools)
    }

    /// Gathers the node's pools; also returns every (driver, pool) seen and
    /// whether a node selector was consulted.
    #[allow(clippy::type_complexity)] // a private helper's three results
    fn gather(&self, node: NodeRef<'_>) -> Result<(Vec<Pool>, Vec<(Sym, Sym)>, bool)> {
        // (driver, pool) -> slices of the highest generation seen among the relevant ones
        let mut found: BTreeMap<(String, String), Vec<Arc<Slice>>> = BTreeMap::new();
        let mut label_dependent = false;
        let on_node = self.strings.lookup(node.name).and_then(|n| self.on_node.get(&n));
        for name in on_node.into_iter().flatten().chain(self.not_on_node.iter()) {
            let Some(slice) = self.slices.get(name) else { continue };
            if matches!(slice.node, Some(NodeSel::Selector(..))) || slice.per_device_node_selection {
                label_dependent = true;
            }
            if !self.relevant(slice, node)? {
                continue;
            }
            let key = (self.strings.get(slice.driver).to_string(), self.strings.get(slice.pool).to_string());
            let entry = found.entry(key).or_default();
            match entry.first().map(|s| s.generation) {
                Some(g) if slice.generation < g => {}
                Some(g) if slice.generation > g => *entry = vec![slice.clone()],
                _ => entry.push(slice.clone()),
            }
        }
        let mut ready = Vec::new();
        let mut with_binding = Vec::new();
        let seen: Vec<(Sym, Sym)> = found.values().filter_map(|v| v.first().map(|s| (s.driver, s.pool))).collect();
        for (_, mut slices) in found {
            let Some(first) = slices.first().cloned() else { continue };
            let (driver, pool, generation, count) = (first.driver, first.pool, first.generation, first.slice_count);
            let mut all_slices: Option<Vec<Arc<Slice>>> = None;
            if i64::try_from(slices.len()).unwrap_or(i64::MAX) != count {
                // Some slices may serve other nodes: look at the whole pool.
                let mut all = Vec::new();
                let mut obsolete = false;
                for n in self.by_pool.get(&(driver, pool)).into_iter().flatten() {
                    let Some(s) = self.slices.get(n) else { continue };
                    if s.generation == generation {
                        all.push(s.clone());
                    } else if s.generation > generation {
                        obsolete = true;
                        break;
                    }
                }
                if obsolete {
                    continue;
                }
                if i64::try_from(all.len()).unwrap_or(i64::MAX) != count {
                    ready.push(Pool {
                        driver,
                        pool,
                        state: PoolState::Incomplete,
                        slices: Vec::new(),
                        other_slices: Vec::new(),
                        counter_sets: HashMap::new(),
                    });
                    continue;
                }
                all_slices = Some(all);
            }
            slices.sort_by(|a, b| self.strings.get(a.name).cmp(self.strings.get(b.name)));
            let pool = self.build_pool(driver, pool, slices, all_slices);
            let binding = pool.slices.iter().any(|s| s.devices.iter().any(|d| d.has_binding_conditions));
            if binding { with_binding.push(pool) } else { ready.push(pool) }
        }
        ready.extend(with_binding);
        Ok((ready, seen, label_dependent))
    }

    fn build_pool(&self, driver: Sym, pool: Sym, slices: Vec<Arc<Slice>>, all: Option<Vec<Arc<Slice>>>) -> Pool {
        let mut device_slices = Vec::new();
        let mut counter_slices = Vec::new();
        let mut other = Vec::new();
        for s in &slices {
            if s.shared_counters.is_empty() { device_slices.push(s.clone()) } else { counter_slices.push(s.clone()) }
        }
        if let Some(all) = all {
            for s in all {
                if slices.iter().any(|t| t.name == s.name) {
                    continue;
                }
                if s.shared_counters.is_empty() { other.push(s) } else { counter_slices.push(s) }
            }
        }
        let invalid = |reason: String| Pool {
            driver,
            pool,
            state: PoolState::Invalid(reason),
            slices: Vec::new(),
            other_slices: Vec::new(),
            counter_sets: HashMap::new(),
        };
        let mut names = BTreeSet::new();
        for s in &device_slices {
            for d in s.devices.iter() {
                if !names.insert(d.name) {
                    return invalid(format!("duplicate device name {}", self.strings.get(d.name)));
                }
            }
        }
        let mut counter_sets: HashMap<Sym, Box<[(Sym, Quantity)]>> = HashMap::new();
        for s in &counter_slices {
            for cs in s.shared_counters.iter() {
                if counter_sets.insert(cs.name, cs.counters.clone()).is_some() {
                    return invalid(format!("duplicate counter set name {}", self.strings.get(cs.name)));
                }
            }
        }
        for s in device_slices.iter().chain(other.iter()) {
            for d in s.devices.iter() {
                for cu in d.consumes_counters.iter() {
                    let Some(set) = counter_sets.get(&cu.counter_set) else {
                        return invalid(format!("counter set {} not found", self.strings.get(cu.counter_set)));
                    };
                    for (cn, _) in cu.counters.iter() {
                        if !set.iter().any(|(n, _)| n == cn) {
                            return invalid(format!(
                                "counter {} not found in counter set {}",
                                self.strings.get(*cn),
                                self.strings.get(cu.counter_set)
                            ));
                        }
                    }
                }
            }
        }
        Pool { driver, pool, state: PoolState::Ready, slices: device_slices, other_slices: other, counter_sets }
    }
}
