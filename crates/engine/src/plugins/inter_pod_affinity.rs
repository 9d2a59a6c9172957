//! InterPodAffinity: required pod affinity and anti-affinity (PreFilter with
//! AddPod/RemovePod extensions, Filter), including the symmetry of existing
//! pods' required anti-affinity, and preferred pod (anti-)affinity (PreScore,
//! Score, NormalizeScore), including the symmetry of existing pods' preferred
//! terms and, weighted by `hardPodAffinityWeight`, their required affinity.
//!
//! PreFilter counts, per topology pair (key, value):
//! - existing pods whose required anti-affinity terms select the incoming pod,
//! - existing pods that match *all* of the incoming pod's required affinity
//!   terms (one count per term's key),
//! - existing pods selected by each of the incoming pod's required anti-affinity terms.
//!
//! The counts are kept per topology domain in dense arrays (each node's
//! domain of each key numbered once per snapshot layout), and carried from one
//! cycle to the next for the same pod shape: only the nodes whose pods changed
//! since (the snapshot's journal) are recounted. Filter then needs a few
//! array reads per node. PreScore keeps its scores per domain the same way.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Deserialize;

use crate::cache::{JournalMark, Snapshot};
use crate::framework::{filter_each, CycleState, Events, NodeScore, Plugin, Points, PreFilterNodes, Status, MAX_NODE_SCORE};
use berth_model::pod::{AffinityTerm, WeightedAffinityTerm};
use berth_model::selector::Labels;
use berth_model::{NodeInfo, PodInfo};

/// Plugin name.
pub const NAME: &str = "InterPodAffinity";
/// Reason for a node where the incoming pod's required affinity is not met.
pub const REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// Reason for a node where the incoming pod's required anti-affinity is violated.
pub const REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
/// Reason for a node where an existing pod's required anti-affinity would be violated.
pub const REASON_EXISTING_ANTI_AFFINITY: &str = "node(s) didn't satisfy existing pods anti-affinity rules";

/// Default `hardPodAffinityWeight`.
pub const DEFAULT_HARD_POD_AFFINITY_WEIGHT: i32 = 1;
/// Largest valid `hardPodAffinityWeight`.
pub const MAX_HARD_POD_AFFINITY_WEIGHT: i32 = 100;

/// InterPodAffinityArgs.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// Score weight of an existing pod's required affinity term that selects
    /// the incoming pod (0..=100; default 1).
    #[serde(default)]
    pub hard_pod_affinity_weight: Option<i32>,
    /// Ignore existing pods' preferred terms when the incoming pod has none.
    #[serde(default)]
    pub ignore_preferred_terms_of_existing_pods: Option<bool>,
    /// apiVersion/kind are accepted and ignored.
    #[serde(default)]
    pub api_version: Option<String>,
    /// See `api_version`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// Inter-pod affinity and anti-affinity.
#[derive(Debug)]
pub struct InterPodAffinity {
    hard_pod_affinity_weight: i64,
    ignore_preferred_terms_of_existing_pods: bool,
    /// PreFilter's counts for the last pod shapes, kept for their next cycles.
    filter_cache: Mutex<Vec<Tally>>,
    /// PreScore's scores for the last pod shapes.
    score_cache: Mutex<Vec<Tally>>,
}

impl Default for InterPodAffinity {
    fn default() -> Self {
        InterPodAffinity {
            hard_pod_affinity_weight: i64::from(DEFAULT_HARD_POD_AFFINITY_WEIGHT),
            ignore_preferred_terms_of_existing_pods: false,
            filter_cache: Mutex::default(),
            score_cache: Mutex::default(),
        }
    }
}

impl InterPodAffinity {
    /// Builds the plugin, validating its args (the error names the field).
    pub fn new(args: Args) -> Result<Self, String> {
        let w = args.hard_pod_affinity_weight.unwrap_or(DEFAULT_HARD_POD_AFFINITY_WEIGHT);
        if !(0..=MAX_HARD_POD_AFFINITY_WEIGHT).contains(&w) {
            return Err(format!("hardPodAffinityWeight: Invalid value: {w}: not in valid range [0-{MAX_HARD_POD_AFFINITY_WEIGHT}]"));
        }
        Ok(InterPodAffinity {
            hard_pod_affinity_weight: i64::from(w),
            ignore_preferred_terms_of_existing_pods: args.ignore_preferred_terms_of_existing_pods.unwrap_or(false),
            ..Default::default()
        })
    }
}

/// A fast non-cryptographic hasher (FxHash) for label values.
#[derive(Clone, Copy, Default)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.add(u64::from_le_bytes(b));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        // Fold a full multiply so that both the low bits (bucket) and the
        // high bits (hashbrown's tag) depend on every input bit.
        let x = u128::from(self.0) * 0x9E37_79B9_7F4A_7C15;
        (x as u64) ^ ((x >> 64) as u64)
    }
}

type FxBuild = BuildHasherDefault<FxHasher>;

/// A node without the topology key.
const NO_DOMAIN: u32 = u32::MAX;
/// A node with the key but a value no node of the tables has (a node from
/// outside the snapshot): no count is held for it.
const UNSEEN_DOMAIN: u32 = u32::MAX - 1;

/// The topology domains (values) of one key, numbered densely.
#[derive(Clone, Debug, Default)]
struct KeyDomains {
    key: String,
    /// Per node index: its domain, or `NO_DOMAIN`.
    of_node: Vec<u32>,
    /// Value → domain.
    ids: HashMap<String, u32, FxBuild>,
}

/// The topology domains of the snapshot's nodes for the keys in use. Valid
/// while no node object changes (node labels change only with the object).
#[derive(Clone, Debug, Default)]
struct Domains {
    /// Per node index: the address of the node object the tables were built
    /// from (the snapshot holds it while a cycle reads these tables, so an
    /// equal address is the same object).
    specs: Vec<usize>,
    keys: Vec<KeyDomains>,
}

fn spec_addr(ni: &NodeInfo) -> usize {
    Arc::as_ptr(&ni.node) as usize
}

impl Domains {
    fn new(snap: &Snapshot) -> Self {
        Domains { specs: snap.nodes.iter().map(spec_addr).collect(), keys: Vec::new() }
    }

    /// Were the tables built from these node objects?
    fn fits(&self, snap: &Snapshot) -> bool {
        self.specs.len() == snap.nodes.len() && self.specs.iter().zip(&snap.nodes).all(|(&a, n)| a == spec_addr(n))
    }

    /// The index of `key`'s table, built on first use.
    fn key_index(&mut self, key: &str, snap: &Snapshot) -> usize {
        if let Some(k) = self.keys.iter().position(|d| d.key == key) {
            return k;
        }
        let mut ids: HashMap<String, u32, FxBuild> = HashMap::default();
        let of_node = snap
            .nodes
            .iter()
            .map(|n| match n.node.labels.get(key) {
                None => NO_DOMAIN,
                Some(v) => match ids.get(v.as_str()) {
                    Some(&d) => d,
                    None => {
                        let d = ids.len() as u32;
                        ids.insert(v.clone(), d);
                        d
                    }
                },
            })
            .collect();
        self.keys.push(KeyDomains { key: key.to_string(), of_node, ids });
        self.keys.len() - 1
    }

    /// The node's domain for key `k`: `NO_DOMAIN` when it lacks the key.
    fn domain(&self, k: usize, ni: &NodeInfo) -> u32 {
        let kd = &self.keys[k];
        if self.specs.get(ni.index).is_some_and(|&a| a == spec_addr(ni)) {
            return kd.of_node.get(ni.index).copied().unwrap_or(NO_DOMAIN);
        }
        match ni.node.labels.get(&kd.key) {
            None => NO_DOMAIN,
            Some(v) => kd.ids.get(v.as_str()).copied().unwrap_or(UNSEEN_DOMAIN),
        }
    }
}

/// The index of `key`'s table in shared `domains`, copying them only when the key is new.
fn key_index(domains: &mut Arc<Domains>, key: &str, snap: &Snapshot) -> usize {
    match domains.keys.iter().position(|d| d.key == key) {
        Some(k) => k,
        None => Arc::make_mut(domains).key_index(key, snap),
    }
}

/// What a count is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Existing pods whose required anti-affinity terms select the incoming pod.
    ExistingAnti,
    /// Existing pods matching all the incoming pod's required affinity terms.
    Affinity,
    /// Existing pods selected by one of the incoming pod's required anti-affinity terms.
    Anti,
    /// Preferred (anti-)affinity score.
    Score,
}

/// Counts (or scores) per domain of one key, for one kind.
#[derive(Clone, Debug)]
struct Slot {
    kind: Kind,
    /// Index of the key in [`Domains`].
    key: usize,
    /// By domain.
    counts: Vec<i64>,
    /// Domains whose count is not 0 (upstream `len` of the pair map).
    nonzero: usize,
    /// Contributions held (a score key exists upstream once a term hit it).
    hits: u64,
}

impl Slot {
    fn get(&self, dom: u32) -> i64 {
        self.counts.get(dom as usize).copied().unwrap_or(0)
    }

    fn add(&mut self, dom: u32, amount: i64, hits: i64) {
        if let Some(c) = self.counts.get_mut(dom as usize) {
            let before = *c != 0;
            *c += amount;
            let after = *c != 0;
            if before != after {
                if after {
                    self.nonzero += 1;
                } else {
                    self.nonzero -= 1;
                }
            }
        }
        self.hits = self.hits.saturating_add_signed(hits);
    }
}

/// One node's share of a [`Tally`]: (slot, amount, hits).
type Share = (u32, i64, u32);

/// Who a [`Tally`] was computed for: the counts depend on the incoming pod's
/// terms, labels and namespace (all in its signature) and on its namespace's labels.
#[derive(Clone, Debug, PartialEq)]
struct TallyOwner {
    signature: u64,
    namespace: String,
    labels: berth_model::PodLabels,
    ns_labels: Labels,
}

/// Counts per topology domain over every node's pods for one incoming pod
/// shape, kept across cycles: only the nodes whose pods changed since (the
/// snapshot's journal) are recounted.
#[derive(Debug, Default)]
struct Tally {
    owner: Option<TallyOwner>,
    mark: Option<JournalMark>,
    domains: Arc<Domains>,
    slots: Arc<Vec<Slot>>,
    /// Per node index: its shares.
    shares: Vec<Vec<Share>>,
}

/// A contribution a node's pods make: kind, topology key, amount.
type Contribution<'a> = (Kind, &'a str, i64);

impl Tally {
    /// Brings the counts up to date with `snap` for `owner`; `count` lists a
    /// node's contributions (those whose key the node lacks are dropped).
    fn refresh<'a>(&mut self, owner: Option<TallyOwner>, snap: &'a Snapshot, mut count: impl FnMut(&'a NodeInfo, &mut Vec<Contribution<'a>>)) {
        let mut changed = Vec::new();
        let incremental = owner.is_some()
            && self.owner == owner
            && self.shares.len() == snap.nodes.len()
            && self.mark.is_some_and(|m| snap.changed_since(m, &mut changed).is_some());
        if !incremental {
            if !self.domains.fits(snap) {
                self.domains = Arc::new(Domains::new(snap));
            }
            self.slots = Arc::new(Vec::new());
            self.shares = vec![Vec::new(); snap.nodes.len()];
            changed.clear();
            changed.extend(0..snap.nodes.len());
        }
        self.owner = owner;
        self.mark = Some(snap.journal_mark());
        if changed.is_empty() {
            return;
        }
        let slots = Arc::make_mut(&mut self.slots);
        let mut found: Vec<Contribution<'a>> = Vec::new();
        for i in changed {
            let old = std::mem::take(&mut self.shares[i]);
            for &(s, amount, hits) in &old {
                let slot = &mut slots[s as usize];
                let dom = self.domains.keys[slot.key].of_node[i];
                slot.add(dom, -amount, -i64::from(hits));
            }
            let ni = &snap.nodes[i];
            found.clear();
            count(ni, &mut found);
            let mut new = old;
            new.clear();
            for &(kind, key, amount) in &found {
                if !ni.node.labels.contains_key(key) {
                    continue;
                }
                let s = match slots.iter().position(|s| s.kind == kind && self.domains.keys[s.key].key == key) {
                    Some(s) => s,
                    None => {
                        let k = key_index(&mut self.domains, key, snap);
                        slots.push(Slot { kind, key: k, counts: vec![0; self.domains.keys[k].ids.len()], nonzero: 0, hits: 0 });
                        slots.len() - 1
                    }
                };
                let dom = self.domains.keys[slots[s].key].of_node[i];
                slots[s].add(dom, amount, 1);
                match new.iter_mut().find(|x| x.0 == s as u32) {
                    Some(x) => {
                        x.1 += amount;
                        x.2 += 1;
                    }
                    None => new.push((s as u32, amount, 1)),
                }
            }
            self.shares[i] = new;
        }
    }
}

/// How many pod shapes' tallies are kept.
const KEPT_TALLIES: usize = 4;

/// Takes the kept tally of `owner` out of `cache`, or a new one (sharing the
/// latest domain tables) when there is none or the counts cannot be kept.
fn take_tally(cache: &Mutex<Vec<Tally>>, owner: Option<&TallyOwner>) -> Tally {
    let mut kept = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(o) = owner
        && let Some(i) = kept.iter().position(|t| t.owner.as_ref() == Some(o))
    {
        return kept.remove(i);
    }
    Tally { domains: kept.first().map(|t| t.domains.clone()).unwrap_or_default(), ..Default::default() }
}

/// Keeps `tally` for its owner's next cycle (the most recent first).
fn put_tally(cache: &Mutex<Vec<Tally>>, tally: Tally) {
    if tally.owner.is_none() {
        return;
    }
    let mut kept = cache.lock().unwrap_or_else(PoisonError::into_inner);
    kept.insert(0, tally);
    kept.truncate(KEPT_TALLIES);
}

/// Does one of the incoming pod's terms select `other`? The incoming pod's
/// namespace selector is resolved against the namespaces known to the
/// scheduler (upstream merges it into the namespace list), so an unknown
/// namespace is selected only by an empty (match-all) selector.
fn incoming_term_matches(term: &AffinityTerm, other: &PodInfo, snap: &Snapshot) -> bool {
    let ns = &term.namespace_selector;
    let labels = if ns.is_nothing() || ns.is_everything() { None } else { snap.namespaces.get(&other.namespace) };
    term.matches(other, labels)
}

/// Does matching this incoming term read other namespaces' labels (which the
/// journal does not track)?
fn reads_namespaces(term: &AffinityTerm) -> bool {
    let ns = &term.namespace_selector;
    !(ns.is_nothing() || ns.is_everything())
}

/// Does `other` match every one of the incoming pod's `terms` (false when there are none)?
fn matches_all(terms: &[AffinityTerm], other: &PodInfo, snap: &Snapshot) -> bool {
    !terms.is_empty() && terms.iter().all(|t| incoming_term_matches(t, other, snap))
}

/// Does an existing pod's term select the incoming pod? `ns_labels` are the
/// labels of the incoming pod's namespace (empty when unknown, as upstream).
fn existing_term_matches(term: &AffinityTerm, incoming: &PodInfo, ns_labels: &Labels) -> bool {
    term.matches(incoming, Some(ns_labels))
}

static EMPTY_LABELS: Labels = Labels::new();

fn namespace_labels<'a>(snap: &'a Snapshot, ns: &str) -> &'a Labels {
    snap.namespaces.get(ns).unwrap_or(&EMPTY_LABELS)
}

fn owner_of(pod: &PodInfo, ns_labels: &Labels) -> Option<TallyOwner> {
    (pod.signature != 0).then(|| TallyOwner { signature: pod.signature, namespace: pod.namespace.clone(), labels: pod.labels.clone(), ns_labels: ns_labels.clone() })
}

/// The PreFilter contributions of `other` (on some node) for the incoming `pod`.
fn filter_contributions<'a>(pod: &'a PodInfo, other: &'a PodInfo, ns_labels: &Labels, snap: &Snapshot, out: &mut Vec<Contribution<'a>>, delta: i64) {
    for t in &other.required_anti_affinity {
        if existing_term_matches(t, pod, ns_labels) {
            out.push((Kind::ExistingAnti, &t.topology_key, delta));
        }
    }
    if matches_all(&pod.required_affinity, other, snap) {
        for t in &pod.required_affinity {
            out.push((Kind::Affinity, &t.topology_key, delta));
        }
    }
    for t in &pod.required_anti_affinity {
        if incoming_term_matches(t, other, snap) {
            out.push((Kind::Anti, &t.topology_key, delta));
        }
    }
}

/// A change to the counts made by AddPod/RemovePod, kept beside the shared counts.
#[derive(Clone, Debug)]
struct Delta {
    kind: Kind,
    key: String,
    value: String,
    amount: i64,
}

/// PreFilter state: the shared counts, the incoming pod's terms resolved to
/// them, and the changes AddPod/RemovePod made on this copy.
#[derive(Clone, Debug)]
struct PreFilterState {
    domains: Arc<Domains>,
    slots: Arc<Vec<Slot>>,
    /// Per required affinity term: its key's table and its slot (None: no count).
    affinity: Vec<(usize, Option<usize>)>,
    /// Per required anti-affinity term: the same.
    anti: Vec<(usize, Option<usize>)>,
    /// The slots of existing pods' anti-affinity.
    existing: Vec<usize>,
    /// Pairs with a count, per kind (ExistingAnti, Affinity, Anti), deltas included.
    len: [usize; 3],
    /// The incoming pod matches all its own required affinity terms.
    self_match: bool,
    deltas: Vec<Delta>,
    /// The snapshot the counts were brought up to date with: its nodes are
    /// those the domain tables were built from.
    mark: JournalMark,
}

fn kind_index(kind: Kind) -> usize {
    match kind {
        Kind::ExistingAnti => 0,
        Kind::Affinity => 1,
        Kind::Anti | Kind::Score => 2,
    }
}

impl PreFilterState {
    /// The shared count of (kind, key, value).
    fn base_count(&self, kind: Kind, key: &str, value: &str) -> i64 {
        self.slots
            .iter()
            .find(|s| s.kind == kind && self.domains.keys[s.key].key == key)
            .and_then(|s| self.domains.keys[s.key].ids.get(value).map(|&d| s.get(d)))
            .unwrap_or(0)
    }

    fn delta_sum(&self, kind: Kind, key: &str, value: &str) -> i64 {
        self.deltas.iter().filter(|d| d.kind == kind && d.key == key && d.value == value).map(|d| d.amount).sum()
    }

    /// The count of (kind, key, the node's value of key); None when the node lacks the key.
    fn count(&self, kind: Kind, k: usize, slot: Option<usize>, ni: &NodeInfo) -> Option<i64> {
        let dom = self.domains.domain(k, ni);
        if dom == NO_DOMAIN {
            return None;
        }
        let mut c = slot.map_or(0, |s| self.slots[s].get(dom));
        if !self.deltas.is_empty() {
            let key = &self.domains.keys[k].key;
            if let Some(v) = ni.node.labels.get(key) {
                c += self.delta_sum(kind, key, v);
            }
        }
        Some(c)
    }

    /// Counts `other` on `ni` with `delta` (±1) on this copy.
    fn update_with_pod(&mut self, pod: &PodInfo, other: &PodInfo, ni: &NodeInfo, delta: i64, snap: &Snapshot) {
        let ns_labels = namespace_labels(snap, &pod.namespace);
        let mut found = Vec::new();
        filter_contributions(pod, other, ns_labels, snap, &mut found, delta);
        for (kind, key, amount) in found {
            let Some(value) = ni.node.labels.get(key) else { continue };
            let before = self.base_count(kind, key, value) + self.delta_sum(kind, key, value);
            let after = before + amount;
            let len = &mut self.len[kind_index(kind)];
            if before == 0 && after != 0 {
                *len += 1;
            } else if before != 0 && after == 0 {
                *len = len.saturating_sub(1);
            }
            match self.deltas.iter_mut().find(|d| d.kind == kind && d.key == key && d.value == *value) {
                Some(d) => d.amount += amount,
                None => self.deltas.push(Delta { kind, key: key.to_string(), value: value.clone(), amount }),
            }
        }
    }

    /// Does an existing pod's required anti-affinity forbid the node?
    fn existing_forbids(&self, ni: &NodeInfo) -> bool {
        if self.deltas.is_empty() {
            return self.existing.iter().any(|&s| {
                let slot = &self.slots[s];
                let dom = self.domains.domain(slot.key, ni);
                dom != NO_DOMAIN && slot.get(dom) > 0
            });
        }
        // Slow path (preemption's copies): every key with a count, shared or changed here.
        let mut keys: Vec<&str> = self.existing.iter().map(|&s| self.domains.keys[self.slots[s].key].key.as_str()).collect();
        for d in self.deltas.iter().filter(|d| d.kind == Kind::ExistingAnti) {
            if !keys.contains(&d.key.as_str()) {
                keys.push(&d.key);
            }
        }
        keys.iter().any(|key| {
            ni.node
                .labels
                .get(*key)
                .is_some_and(|v| self.base_count(Kind::ExistingAnti, key, v) + self.delta_sum(Kind::ExistingAnti, key, v) > 0)
        })
    }

    /// Filter over nodes of the snapshot the tables were built from, for a
    /// pod without required affinity and with no AddPod/RemovePod changes:
    /// `check` with the domains read by node index.
    fn filter_known(&self, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        // (domain per node, count per domain) of each check, in Filter's order.
        let table = |k: usize, s: usize| (self.domains.keys[k].of_node.as_slice(), self.slots[s].counts.as_slice());
        let anti: Vec<(&[u32], &[i64])> = if self.len[2] != 0 { self.anti.iter().filter_map(|&(k, slot)| slot.map(|s| table(k, s))).collect() } else { Vec::new() };
        let existing: Vec<(&[u32], &[i64])> = if self.len[0] != 0 { self.existing.iter().map(|&s| table(self.slots[s].key, s)).collect() } else { Vec::new() };
        let hit = |list: &[(&[u32], &[i64])], i: usize| {
            list.iter().any(|(of_node, counts)| of_node.get(i).and_then(|&d| counts.get(d as usize)).is_some_and(|&c| c > 0))
        };
        nodes.retain(|&i| {
            if hit(&anti, i) {
                rejected.push((i, Status::unschedulable(REASON_ANTI_AFFINITY)));
                return false;
            }
            if hit(&existing, i) {
                rejected.push((i, Status::unschedulable(REASON_EXISTING_ANTI_AFFINITY)));
                return false;
            }
            true
        });
    }

    /// Filter on one node.
    fn check(&self, ni: &NodeInfo) -> Option<Status> {
        // The incoming pod's required affinity.
        if !self.affinity.is_empty() {
            let mut pods_exist = true;
            for &(k, slot) in &self.affinity {
                match self.count(Kind::Affinity, k, slot, ni) {
                    None => return Some(Status::unresolvable(REASON_AFFINITY)),
                    Some(c) => {
                        if c <= 0 {
                            pods_exist = false;
                        }
                    }
                }
            }
            // The first pod of a group with affinity to itself may go
            // anywhere that has the topology keys.
            let first_of_collection = self.len[1] == 0 && self.self_match;
            if !pods_exist && !first_of_collection {
                return Some(Status::unresolvable(REASON_AFFINITY));
            }
        }
        // The incoming pod's required anti-affinity.
        if self.len[2] != 0 {
            for &(k, slot) in &self.anti {
                if self.count(Kind::Anti, k, slot, ni).is_some_and(|c| c > 0) {
                    return Some(Status::unschedulable(REASON_ANTI_AFFINITY));
                }
            }
        }
        // Existing pods' required anti-affinity.
        if self.len[0] != 0 && self.existing_forbids(ni) {
            return Some(Status::unschedulable(REASON_EXISTING_ANTI_AFFINITY));
        }
        None
    }
}

/// PreScore state: scores per topology domain.
#[derive(Clone, Debug)]
struct PreScoreState {
    domains: Arc<Domains>,
    /// Score slots that some term hit.
    slots: Arc<Vec<Slot>>,
}

impl PreScoreState {
    fn score(&self, ni: &NodeInfo) -> i64 {
        let mut score = 0;
        for s in self.slots.iter().filter(|s| s.hits > 0) {
            let dom = self.domains.domain(s.key, ni);
            if dom != NO_DOMAIN {
                score += s.get(dom);
            }
        }
        score
    }

    fn is_empty(&self) -> bool {
        self.slots.iter().all(|s| s.hits == 0)
    }
}

impl InterPodAffinity {
    /// Adds an existing pod's contribution to the topology scores.
    fn process_existing_pod<'a>(&self, out: &mut Vec<Contribution<'a>>, pod: &'a PodInfo, existing: &'a PodInfo, ns_labels: &Labels, snap: &Snapshot) {
        let mut weighted = |terms: &'a [WeightedAffinityTerm], sign: i64| {
            for t in terms {
                if incoming_term_matches(&t.term, existing, snap) {
                    out.push((Kind::Score, &t.term.topology_key, sign * t.weight));
                }
            }
        };
        weighted(&pod.preferred_affinity, 1);
        weighted(&pod.preferred_anti_affinity, -1);
        if self.hard_pod_affinity_weight > 0 {
            for t in &existing.required_affinity {
                if existing_term_matches(t, pod, ns_labels) {
                    out.push((Kind::Score, &t.topology_key, self.hard_pod_affinity_weight));
                }
            }
        }
        for (terms, sign) in [(&existing.preferred_affinity, 1), (&existing.preferred_anti_affinity, -1)] {
            for t in terms {
                if existing_term_matches(&t.term, pod, ns_labels) {
                    out.push((Kind::Score, &t.term.topology_key, sign * t.weight));
                }
            }
        }
    }
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER.or(Points::FILTER).or(Points::PRE_SCORE).or(Points::SCORE)
    }

    fn events(&self) -> Events {
        // Upstream: Pod Add | UpdatePodLabel | Delete; Node Add | UpdateNodeLabel | UpdateNodeTaint.
        Events::POD_ADD
            .or(Events::POD_DELETE)
            .or(Events::POD_LABEL)
            .or(Events::NODE_ADD)
            .or(Events::NODE_LABEL)
            .or(Events::NODE_TAINT)
    }

    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        let has_terms = !pod.required_affinity.is_empty() || !pod.required_anti_affinity.is_empty();
        if !has_terms && snap.pods_with_required_anti_affinity() == 0 {
            // No existing pod's anti-affinity to count and no term of its own.
            return (Status::skip(), None);
        }
        let ns_labels = namespace_labels(snap, &pod.namespace);
        let keep = !pod.required_affinity.iter().chain(&pod.required_anti_affinity).any(reads_namespaces);
        let owner = if keep { owner_of(pod, ns_labels) } else { None };
        let mut t = take_tally(&self.filter_cache, owner.as_ref());
        t.refresh(owner, snap, |ni, out| {
            if !has_terms && ni.pods_with_required_anti_affinity == 0 {
                return;
            }
            for p in &ni.pods {
                if !has_terms && p.required_anti_affinity.is_empty() {
                    continue;
                }
                filter_contributions(pod, p, ns_labels, snap, out, 1);
            }
        });
        let mut len = [0; 3];
        let mut existing = Vec::new();
        for (s, slot) in t.slots.iter().enumerate() {
            len[kind_index(slot.kind)] += slot.nonzero;
            if slot.kind == Kind::ExistingAnti && slot.nonzero > 0 {
                existing.push(s);
            }
        }
        if len[0] == 0 && !has_terms {
            put_tally(&self.filter_cache, t);
            return (Status::skip(), None);
        }
        let mut resolve = |terms: &[AffinityTerm], kind: Kind| -> Vec<(usize, Option<usize>)> {
            terms
                .iter()
                .map(|term| {
                    let k = key_index(&mut t.domains, &term.topology_key, snap);
                    (k, t.slots.iter().position(|s| s.kind == kind && s.key == k))
                })
                .collect()
        };
        let affinity = resolve(&pod.required_affinity, Kind::Affinity);
        let anti = resolve(&pod.required_anti_affinity, Kind::Anti);
        state.insert(PreFilterState {
            domains: t.domains.clone(),
            slots: t.slots.clone(),
            affinity,
            anti,
            existing,
            len,
            self_match: matches_all(&pod.required_affinity, pod, snap),
            deltas: Vec::new(),
            mark: snap.journal_mark(),
        });
        put_tally(&self.filter_cache, t);
        (Status::success(), None)
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        let Some(s) = state.get_mut::<PreFilterState>() else { return Status::error("InterPodAffinity: no PreFilter state") };
        s.update_with_pod(pod, added, node, 1, snap);
        Status::success()
    }

    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, removed: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        let Some(s) = state.get_mut::<PreFilterState>() else { return Status::error("InterPodAffinity: no PreFilter state") };
        s.update_with_pod(pod, removed, node, -1, snap);
        Status::success()
    }

    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<PreFilterState>() else { return Status::error("InterPodAffinity: no PreFilter state") };
        s.check(node).unwrap_or_else(Status::success)
    }

    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        let Some(s) = state.get::<PreFilterState>() else {
            filter_each(self, state, pod, snap, nodes, rejected, |_| true);
            return;
        };
        if s.deltas.is_empty() && s.mark == snap.journal_mark() && s.affinity.is_empty() {
            // The nodes are those of the tables: a node's domain is read by its index.
            s.filter_known(nodes, rejected);
            return;
        }
        nodes.retain(|&i| match s.check(&snap.nodes[i]) {
            None => true,
            Some(st) => {
                rejected.push((i, st));
                false
            }
        });
    }

    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[usize], snap: &Snapshot) -> Status {
        if nodes.is_empty() {
            return Status::skip();
        }
        let has_constraints = !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
        if self.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        if !has_constraints && snap.pods_with_affinity() == 0 {
            return Status::skip();
        }
        let ns_labels = namespace_labels(snap, &pod.namespace);
        let keep = !pod.preferred_affinity.iter().chain(&pod.preferred_anti_affinity).any(|t| reads_namespaces(&t.term));
        let owner = if keep { owner_of(pod, ns_labels) } else { None };
        let mut t = take_tally(&self.score_cache, owner.as_ref());
        t.refresh(owner, snap, |ni, out| {
            // Unless the pod has preferred terms, only pods with affinity matter.
            if (!has_constraints && ni.pods_with_affinity == 0) || ni.node.labels.is_empty() {
                return;
            }
            for p in &ni.pods {
                if !has_constraints && !p.has_affinity() {
                    continue;
                }
                self.process_existing_pod(out, pod, p, ns_labels, snap);
            }
        });
        let s = PreScoreState { domains: t.domains.clone(), slots: t.slots.clone() };
        put_tally(&self.score_cache, t);
        if s.is_empty() {
            return Status::skip();
        }
        state.insert(s);
        Status::success()
    }

    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.get::<PreScoreState>() else { return Err(Status::error("InterPodAffinity: no PreScore state")) };
        Ok(s.score(node))
    }

    fn score_nodes(&self, state: &CycleState, _: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
        let Some(s) = state.get::<PreScoreState>() else { return Err(Status::error("InterPodAffinity: no PreScore state")) };
        for ns in scores.iter_mut() {
            ns.score = s.score(&snap.nodes[ns.node]);
        }
        Ok(())
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize_score(&self, state: &CycleState, _: &PodInfo, scores: &mut [NodeScore], _: &Snapshot) -> Status {
        if state.get::<PreScoreState>().is_none_or(PreScoreState::is_empty) {
            return Status::success();
        }
        let (Some(min), Some(max)) = (scores.iter().map(|s| s.score).min(), scores.iter().map(|s| s.score).max()) else {
            return Status::success();
        };
        let diff = max - min;
        for s in scores.iter_mut() {
            s.score = if diff > 0 { (MAX_NODE_SCORE as f64 * ((s.score - min) as f64 / diff as f64)) as i64 } else { 0 };
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{node, pod, selector, snapshot, NodeBuilder, PodBuilder, Rng};
    use k8s_openapi::api::core::v1 as core;

    const ZONE: &str = "zone";
    const HOST: &str = "kubernetes.io/hostname";

    /// A term selecting `sel` over `key`, in the pod's own namespace.
    fn term(sel: &[(&str, &str)], key: &str) -> core::PodAffinityTerm {
        core::PodAffinityTerm { label_selector: Some(selector(sel)), topology_key: key.into(), ..Default::default() }
    }

    /// A term selecting `sel` over `key` in the namespaces whose labels match `ns_sel`.
    fn term_ns_sel(sel: &[(&str, &str)], key: &str, ns_sel: &[(&str, &str)]) -> core::PodAffinityTerm {
        core::PodAffinityTerm { namespace_selector: Some(selector(ns_sel)), ..term(sel, key) }
    }

    /// Pod (anti-)affinity: required affinity, required anti-affinity, preferred affinity, preferred anti-affinity.
    #[derive(Default)]
    struct Aff {
        req: Vec<core::PodAffinityTerm>,
        anti: Vec<core::PodAffinityTerm>,
        pref: Vec<(i32, core::PodAffinityTerm)>,
        pref_anti: Vec<(i32, core::PodAffinityTerm)>,
    }

    impl Aff {
        fn req(mut self, t: core::PodAffinityTerm) -> Self {
            self.req.push(t);
            self
        }
        fn anti(mut self, t: core::PodAffinityTerm) -> Self {
            self.anti.push(t);
            self
        }
        fn pref(mut self, w: i32, t: core::PodAffinityTerm) -> Self {
            self.pref.push((w, t));
            self
        }
        fn pref_anti(mut self, w: i32, t: core::PodAffinityTerm) -> Self {
            self.pref_anti.push((w, t));
            self
        }
        fn build(self) -> core::Affinity {
            let weighted = |v: Vec<(i32, core::PodAffinityTerm)>| {
                v.into_iter().map(|(weight, pod_affinity_term)| core::WeightedPodAffinityTerm { weight, pod_affinity_term }).collect::<Vec<_>>()
            };
            let some = |v: Vec<core::PodAffinityTerm>| if v.is_empty() { None } else { Some(v) };
            let some_w = |v: Vec<core::WeightedPodAffinityTerm>| if v.is_empty() { None } else { Some(v) };
            core::Affinity {
                pod_affinity: Some(core::PodAffinity {
                    required_during_scheduling_ignored_during_execution: some(self.req),
                    preferred_during_scheduling_ignored_during_execution: some_w(weighted(self.pref)),
                }),
                pod_anti_affinity: Some(core::PodAntiAffinity {
                    required_during_scheduling_ignored_during_execution: some(self.anti),
                    preferred_during_scheduling_ignored_during_execution: some_w(weighted(self.pref_anti)),
                }),
                node_affinity: None,
            }
        }
    }

    type Namespaces<'a> = &'a [(&'a str, &'a [(&'a str, &'a str)])];
    type FilterCase<'a> = (&'a str, Vec<NodeBuilder>, Vec<PodBuilder>, Namespaces<'a>, PodBuilder, Vec<Code>);
    type ScoreCase<'a> = (&'a str, Args, Vec<PodBuilder>, PodBuilder, Vec<i64>);

    fn aff() -> Aff {
        Aff::default()
    }

    fn snap_with_ns(nodes: &[NodeBuilder], pods: &[PodBuilder], ns: Namespaces) -> Snapshot {
        let mut s = snapshot(nodes, pods);
        for (name, labels) in ns {
            s.namespaces.insert((*name).into(), labels.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect());
        }
        s
    }

    /// Filter codes per node (all Success when PreFilter skips).
    fn filter_codes(pl: &InterPodAffinity, snap: &Snapshot, p: &PodInfo) -> Vec<Code> {
        let mut st = CycleState::new();
        let (s, nodes) = pl.pre_filter(&mut st, p, snap);
        assert!(nodes.is_none());
        if s.is_skip() {
            return vec![Code::Success; snap.nodes.len()];
        }
        assert!(s.is_success(), "{s}");
        snap.nodes.iter().map(|n| pl.filter(&st, p, n).code).collect()
    }

    #[test]
    fn filter_table() {
        use Code::{Success as S, Unschedulable as U, UnschedulableAndUnresolvable as R};
        let zones = || vec![node("n1").label(ZONE, "a"), node("n2").label(ZONE, "b"), node("n3")];
        let web = |name: &str, n: &str| pod(name).label("app", "web").node(n);
        let no_ns: Namespaces = &[];
        let team_ns: Namespaces = &[("team", &[("tier", "x")]), ("default", &[("tier", "y")])];
        let cases: Vec<FilterCase> = vec![
            ("no terms anywhere", zones(), vec![web("e", "n1")], no_ns, pod("p"), vec![S, S, S]),
            ("affinity matches existing pod's zone", zones(), vec![web("e", "n1")], no_ns, pod("p").affinity(aff().req(term(&[("app", "web")], ZONE)).build()), vec![S, R, R]),
            ("affinity: node without the key", zones(), vec![web("e", "n1")], no_ns, pod("p").affinity(aff().req(term(&[("app", "web")], HOST)).build()), vec![S, R, R]),
            ("first pod of a collection", zones(), vec![], no_ns, pod("p").label("app", "web").affinity(aff().req(term(&[("app", "web")], ZONE)).build()), vec![S, S, R]),
            ("no match and not matching itself", zones(), vec![], no_ns, pod("p").affinity(aff().req(term(&[("app", "web")], ZONE)).build()), vec![R, R, R]),
            (
                "one pod must match all affinity terms",
                zones(),
                vec![web("e1", "n1"), pod("e2").label("tier", "db").node("n1")],
                no_ns,
                pod("p").affinity(aff().req(term(&[("app", "web")], ZONE)).req(term(&[("tier", "db")], ZONE)).build()),
                vec![R, R, R],
            ),
            (
                "affinity in another namespace does not count",
                zones(),
                vec![web("e", "n1").namespace("other")],
                no_ns,
                pod("p").affinity(aff().req(term(&[("app", "web")], ZONE)).build()),
                vec![R, R, R],
            ),
            ("anti-affinity", zones(), vec![web("e", "n1")], no_ns, pod("p").affinity(aff().anti(term(&[("app", "web")], ZONE)).build()), vec![U, S, S]),
            (
                "anti-affinity ignores other namespaces",
                zones(),
                vec![web("e", "n1").namespace("other")],
                no_ns,
                pod("p").affinity(aff().anti(term(&[("app", "web")], ZONE)).build()),
                vec![S, S, S],
            ),
            (
                "anti-affinity with namespaceSelector",
                zones(),
                vec![web("e", "n1").namespace("team"), web("f", "n2").namespace("unknown")],
                team_ns,
                pod("p").affinity(aff().anti(term_ns_sel(&[("app", "web")], ZONE, &[("tier", "x")])).build()),
                vec![U, S, S],
            ),
            (
                "anti-affinity with empty namespaceSelector selects all namespaces",
                zones(),
                vec![web("f", "n2").namespace("unknown")],
                team_ns,
                pod("p").affinity(aff().anti(term_ns_sel(&[("app", "web")], ZONE, &[])).build()),
                vec![S, U, S],
            ),
            (
                "existing pod's anti-affinity (symmetry)",
                zones(),
                vec![pod("e").node("n1").affinity(aff().anti(term(&[("app", "web")], ZONE)).build())],
                no_ns,
                pod("p").label("app", "web"),
                vec![U, S, S],
            ),
            (
                "existing pod's anti-affinity in another namespace selects only its own",
                zones(),
                vec![pod("e").namespace("other").node("n1").affinity(aff().anti(term(&[("app", "web")], ZONE)).build())],
                no_ns,
                pod("p").label("app", "web"),
                vec![S, S, S],
            ),
            (
                "existing pod's anti-affinity with namespaceSelector on the incoming pod's namespace",
                zones(),
                vec![pod("e").namespace("team").node("n2").affinity(aff().anti(term_ns_sel(&[("app", "web")], ZONE, &[("tier", "y")])).build())],
                team_ns,
                pod("p").label("app", "web"),
                vec![S, U, S],
            ),
            (
                "affinity checked before anti-affinity",
                zones(),
                vec![web("e", "n1")],
                no_ns,
                pod("p").affinity(aff().req(term(&[("app", "web")], ZONE)).anti(term(&[("app", "web")], ZONE)).build()),
                vec![U, R, R],
            ),
        ];
        let pl = InterPodAffinity::default();
        for (name, nodes, pods, ns, p, want) in cases {
            let snap = snap_with_ns(&nodes, &pods, ns);
            assert_eq!(filter_codes(&pl, &snap, &p.info()), want, "{name}");
        }
    }

    #[test]
    fn filter_reasons() {
        let pl = InterPodAffinity::default();
        let snap = snapshot(&[node("n1").label(ZONE, "a"), node("n2")], &[pod("e").label("app", "web").node("n1")]);
        let p = pod("p").affinity(aff().anti(term(&[("app", "web")], ZONE)).build()).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        assert_eq!(pl.filter(&st, &p, &snap.nodes[0]).message(), REASON_ANTI_AFFINITY);
        let p = pod("p").affinity(aff().req(term(&[("app", "db")], ZONE)).build()).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        assert_eq!(pl.filter(&st, &p, &snap.nodes[1]).message(), REASON_AFFINITY);
        let snap = snapshot(&[node("n1")], &[pod("e").node("n1").affinity(aff().anti(term(&[], HOST)).build())]);
        let p = pod("p").info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        assert_eq!(pl.filter(&st, &p, &snap.nodes[0]).message(), REASON_EXISTING_ANTI_AFFINITY);
    }

    #[test]
    fn add_and_remove_pod() {
        let pl = InterPodAffinity::default();
        let blocker = pod("e").node("n1").affinity(aff().anti(term(&[("app", "web")], HOST)).build());
        let snap = snapshot(&[node("n1"), node("n2").label(ZONE, "a")], std::slice::from_ref(&blocker));
        let p = pod("p").label("app", "web").affinity(aff().req(term(&[("app", "db")], ZONE)).build()).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        let codes = |st: &CycleState| snap.nodes.iter().map(|n| pl.filter(st, &p, n).code).collect::<Vec<_>>();
        assert_eq!(codes(&st), vec![Code::UnschedulableAndUnresolvable; 2]);
        // A pod matching the affinity is nominated to n2; the original state is untouched.
        let mut st2 = st.clone();
        let db = pod("db").label("app", "db").node("n2").info();
        assert!(pl.add_pod(&mut st2, &p, &db, &snap.nodes[1], &snap).is_success());
        assert_eq!(codes(&st2), vec![Code::UnschedulableAndUnresolvable, Code::Success]);
        assert_eq!(codes(&st), vec![Code::UnschedulableAndUnresolvable; 2]);
        // Removing the blocker (preemption) lifts the existing anti-affinity on n1.
        let p2 = pod("p2").label("app", "web").info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p2, &snap).0.is_success());
        assert_eq!(pl.filter(&st, &p2, &snap.nodes[0]).code, Code::Unschedulable);
        let mut st3 = st.clone();
        assert!(pl.remove_pod(&mut st3, &p2, &blocker.info(), &snap.nodes[0], &snap).is_success());
        assert!(pl.filter(&st3, &p2, &snap.nodes[0]).is_success());
        assert!(pl.add_pod(&mut st3, &p2, &blocker.info(), &snap.nodes[0], &snap).is_success());
        assert_eq!(pl.filter(&st3, &p2, &snap.nodes[0]).code, Code::Unschedulable);
        // The incoming pod's own anti-affinity against an added pod.
        let p3 = pod("p3").affinity(aff().anti(term(&[("app", "db")], ZONE)).build()).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p3, &snap).0.is_success());
        assert!(pl.filter(&st, &p3, &snap.nodes[1]).is_success());
        assert!(pl.add_pod(&mut st, &p3, &db, &snap.nodes[1], &snap).is_success());
        assert_eq!(pl.filter(&st, &p3, &snap.nodes[1]).code, Code::Unschedulable);
        assert!(pl.remove_pod(&mut st, &p3, &db, &snap.nodes[1], &snap).is_success());
        assert!(pl.filter(&st, &p3, &snap.nodes[1]).is_success());
    }

    /// Normalized scores per node (all 0 when PreScore skips).
    fn scores(pl: &InterPodAffinity, snap: &Snapshot, p: &PodInfo) -> Vec<i64> {
        let mut st = CycleState::new();
        let idx: Vec<usize> = (0..snap.nodes.len()).collect();
        let s = pl.pre_score(&mut st, p, &idx, snap);
        if s.is_skip() {
            return vec![0; idx.len()];
        }
        assert!(s.is_success(), "{s}");
        let mut out: Vec<NodeScore> = idx.iter().map(|&i| NodeScore { node: i, score: pl.score(&st, p, &snap.nodes[i]).unwrap_or(-1) }).collect();
        assert!(pl.normalize_score(&st, p, &mut out, snap).is_success());
        out.iter().map(|s| s.score).collect()
    }

    #[test]
    fn score_table() {
        let nodes = || vec![node("n1").label("region", "r1"), node("n2").label("region", "r2"), node("n3").label("region", "r1"), node("n4")];
        let sec = |name: &str, v: &str, n: &str| pod(name).label("security", v).node(n);
        let req_sym = aff().req(term(&[("security", "S1")], "region")).build();
        let cases: Vec<ScoreCase> = vec![
            ("no terms", Args::default(), vec![sec("e", "S1", "n1")], pod("p"), vec![0, 0, 0, 0]),
            (
                "preferred affinity by topology",
                Args::default(),
                vec![sec("e", "S1", "n1")],
                pod("p").affinity(aff().pref(5, term(&[("security", "S1")], "region")).build()),
                vec![100, 0, 100, 0],
            ),
            (
                "preferred anti-affinity by topology",
                Args::default(),
                vec![sec("e", "S1", "n1")],
                pod("p").affinity(aff().pref_anti(5, term(&[("security", "S1")], "region")).build()),
                vec![0, 100, 0, 100],
            ),
            (
                "affinity and anti-affinity weights add up",
                Args::default(),
                vec![sec("e1", "S1", "n1"), sec("e2", "S2", "n2")],
                pod("p").affinity(aff().pref(8, term(&[("security", "S1")], "region")).pref_anti(2, term(&[("security", "S2")], "region")).build()),
                vec![100, 0, 100, 20],
            ),
            (
                "symmetry of existing preferred affinity",
                Args::default(),
                vec![pod("e").node("n2").affinity(aff().pref(3, term(&[("security", "S1")], "region")).build())],
                pod("p").label("security", "S1"),
                vec![0, 100, 0, 0],
            ),
            (
                "symmetry of existing preferred anti-affinity",
                Args::default(),
                vec![pod("e").node("n2").affinity(aff().pref_anti(3, term(&[("security", "S1")], "region")).build())],
                pod("p").label("security", "S1"),
                vec![100, 0, 100, 100],
            ),
            (
                "symmetry of existing required affinity with hardPodAffinityWeight",
                Args::default(),
                vec![pod("e").node("n2").affinity(req_sym.clone())],
                pod("p").label("security", "S1"),
                vec![0, 100, 0, 0],
            ),
            (
                "hardPodAffinityWeight 0 ignores required affinity",
                Args { hard_pod_affinity_weight: Some(0), ..Default::default() },
                vec![pod("e").node("n2").affinity(req_sym.clone())],
                pod("p").label("security", "S1"),
                vec![0, 0, 0, 0],
            ),
            (
                "existing pods' preferred terms ignored when configured",
                Args { ignore_preferred_terms_of_existing_pods: Some(true), ..Default::default() },
                vec![pod("e").node("n2").affinity(req_sym.clone())],
                pod("p").label("security", "S1"),
                vec![0, 0, 0, 0],
            ),
            (
                "preferred affinity in another namespace does not count",
                Args::default(),
                vec![sec("e", "S1", "n1").namespace("other")],
                pod("p").affinity(aff().pref(5, term(&[("security", "S1")], "region")).build()),
                vec![0, 0, 0, 0],
            ),
        ];
        for (name, args, pods, p, want) in cases {
            let pl = InterPodAffinity::new(args).unwrap_or_default();
            let snap = snapshot(&nodes(), &pods);
            assert_eq!(scores(&pl, &snap, &p.info()), want, "{name}");
        }
    }

    #[test]
    fn domains_number_values_per_key() {
        let snap = snapshot(&[node("n1").label(ZONE, "a"), node("n2").label(ZONE, "b"), node("n3"), node("n4").label(ZONE, "a")], &[]);
        let mut d = Domains::new(&snap);
        assert!(d.fits(&snap));
        let k = d.key_index(ZONE, &snap);
        assert_eq!(d.key_index(ZONE, &snap), k);
        let doms: Vec<u32> = snap.nodes.iter().map(|n| d.domain(k, n)).collect();
        assert_eq!(doms, vec![0, 1, NO_DOMAIN, 0]);
        // A node object from elsewhere is read by its labels.
        let foreign = NodeInfo::new(Arc::new(node("x").label(ZONE, "b").spec()));
        assert_eq!(d.domain(k, &foreign), 1);
        let unseen = NodeInfo::new(Arc::new(node("y").label(ZONE, "c").spec()));
        assert_eq!(d.domain(k, &unseen), UNSEEN_DOMAIN);
        let mut slot = Slot { kind: Kind::Anti, key: k, counts: vec![0; 2], nonzero: 0, hits: 0 };
        slot.add(1, 2, 1);
        slot.add(UNSEEN_DOMAIN, 5, 1);
        assert_eq!((slot.get(1), slot.get(UNSEEN_DOMAIN), slot.nonzero), (2, 0, 1));
        slot.add(1, -2, -1);
        assert_eq!((slot.nonzero, slot.hits), (0, 1));
        let mut other = snap.clone();
        other.upsert_node(node("n2").label(ZONE, "c").spec());
        assert!(!d.fits(&other));
    }

    #[test]
    fn normalize_uses_min_and_max() {
        let pl = InterPodAffinity::default();
        let mut st = CycleState::new();
        let slot = Slot { kind: Kind::Score, key: 0, counts: vec![], nonzero: 0, hits: 1 };
        st.insert(PreScoreState { domains: Arc::new(Domains::default()), slots: Arc::new(vec![slot]) });
        let mut s: Vec<NodeScore> = [-3, 0, 7, 4].iter().enumerate().map(|(i, &score)| NodeScore { node: i, score }).collect();
        assert!(pl.normalize_score(&st, &pod("p").info(), &mut s, &Snapshot::new()).is_success());
        assert_eq!(s.iter().map(|x| x.score).collect::<Vec<_>>(), vec![0, 30, 100, 70]);
    }

    /// A random pod shape: labels, namespace and (anti-)affinity terms over
    /// keys some nodes lack.
    fn random_shape(r: &mut Rng, k: usize) -> PodBuilder {
        const APPS: [&str; 3] = ["a", "b", "c"];
        const KEYS: [&str; 3] = [ZONE, HOST, "rack"];
        let mut b = pod(&format!("shape{k}")).label("app", APPS[r.below(3)]);
        if r.below(4) == 0 {
            b = b.namespace("other");
        }
        let mut a = aff();
        let mut any = false;
        for _ in 0..r.below(3) {
            let t = term(&[("app", APPS[r.below(3)])], KEYS[r.below(3)]);
            let t = match r.below(6) {
                0 => core::PodAffinityTerm { namespace_selector: Some(selector(&[])), ..t },
                1 => core::PodAffinityTerm { namespace_selector: Some(selector(&[("team", "x")])), ..t },
                _ => t,
            };
            any = true;
            a = match r.below(4) {
                0 => a.req(t),
                1 => a.anti(t),
                2 => a.pref(1 + r.below(50) as i32, t),
                _ => a.pref_anti(1 + r.below(50) as i32, t),
            };
        }
        if any {
            b = b.affinity(a.build());
        }
        b
    }

    /// Filter codes per node through both Filter and the batched filter_nodes.
    fn filter_both(pl: &InterPodAffinity, snap: &Snapshot, p: &PodInfo) -> Vec<Code> {
        let mut st = CycleState::new();
        let (s, _) = pl.pre_filter(&mut st, p, snap);
        if s.is_skip() {
            return vec![Code::Success; snap.nodes.len()];
        }
        assert!(s.is_success(), "{s}");
        let one: Vec<Code> = snap.nodes.iter().map(|n| pl.filter(&st, p, n).code).collect();
        let mut alive: Vec<usize> = (0..snap.nodes.len()).collect();
        let mut rejected = Vec::new();
        pl.filter_nodes(&st, p, snap, &mut alive, &mut rejected);
        let mut batch = vec![Code::Success; snap.nodes.len()];
        for (i, s) in rejected {
            batch[i] = s.code;
        }
        assert_eq!(one, batch);
        one
    }

    /// The counts kept across cycles (recounting only changed nodes) give the
    /// same Filter verdicts and scores as counting from scratch, over random
    /// placements and removals of pods with random terms.
    #[test]
    fn kept_counts_match_a_full_recount() {
        let nodes: Vec<NodeBuilder> = (0..12)
            .map(|i| {
                let mut b = node(&format!("n{i}")).label(HOST, &format!("n{i}"));
                if i % 4 != 3 {
                    b = b.label(ZONE, &format!("z{}", i % 3));
                }
                if i % 2 == 0 {
                    b = b.label("rack", &format!("r{}", i % 5));
                }
                b
            })
            .collect();
        let mut snap = snap_with_ns(&nodes, &[], &[("default", &[]), ("other", &[("team", "x")])]);
        let mut r = Rng(0x9E37_79B9_7F4A_7C15);
        let shapes: Vec<PodBuilder> = (0..6).map(|k| random_shape(&mut r, k)).collect();
        let kept = InterPodAffinity::default();
        let mut placed: Vec<String> = Vec::new();
        for step in 0..400 {
            let shape = &shapes[r.below(shapes.len())];
            let p = shape.clone().info();
            let fresh = InterPodAffinity::default();
            assert_eq!(filter_both(&kept, &snap, &p), filter_both(&fresh, &snap, &p), "step {step}");
            assert_eq!(scores(&kept, &snap, &p), scores(&fresh, &snap, &p), "step {step}");
            // Place a random pod, or remove one.
            if r.below(4) == 0 && !placed.is_empty() {
                let uid = placed.swap_remove(r.below(placed.len()));
                assert!(snap.remove_pod(&uid).is_some());
            } else {
                let name = format!("e{step}");
                let b = shapes[r.below(shapes.len())].clone();
                let mut pi = (*b.info()).clone();
                pi.name = name.clone();
                pi.uid = name.clone();
                pi.node_name = Some(format!("n{}", r.below(12)));
                snap.add_pod(Arc::new(pi));
                placed.push(name);
            }
            if step % 97 == 96 {
                // A node object changes: every table is rebuilt.
                snap.upsert_node(node("n5").label(HOST, "n5").label(ZONE, "z9").spec());
            }
        }
    }

    /// AddPod/RemovePod on a copy of the state give the verdicts of a
    /// PreFilter over the snapshot with the pod added or removed.
    #[test]
    fn add_and_remove_match_a_recount() {
        let nodes: Vec<NodeBuilder> = (0..8).map(|i| node(&format!("n{i}")).label(HOST, &format!("n{i}")).label(ZONE, &format!("z{}", i % 3))).collect();
        let mut r = Rng(12345);
        let shapes: Vec<PodBuilder> = (0..8).map(|k| random_shape(&mut r, k)).collect();
        for round in 0..60 {
            let mut snap = snapshot(&nodes, &[]);
            for j in 0..6 {
                let mut pi = (*shapes[r.below(8)].info()).clone();
                pi.uid = format!("e{j}");
                pi.node_name = Some(format!("n{}", r.below(8)));
                snap.add_pod(Arc::new(pi));
            }
            let p = shapes[r.below(8)].info();
            let pl = InterPodAffinity::default();
            let mut st = CycleState::new();
            if !pl.pre_filter(&mut st, &p, &snap).0.is_success() {
                continue;
            }
            let mut moved = (*shapes[r.below(8)].info()).clone();
            moved.uid = "moved".into();
            let n = r.below(8);
            moved.node_name = Some(format!("n{n}"));
            let moved = Arc::new(moved);
            // Added.
            let mut added = st.clone();
            assert!(pl.add_pod(&mut added, &p, &moved, &snap.nodes[n], &snap).is_success());
            let mut with = snap.clone();
            with.add_pod(moved.clone());
            let codes = |st: &CycleState, s: &Snapshot| s.nodes.iter().map(|ni| pl.filter(st, &p, ni).code).collect::<Vec<_>>();
            assert_eq!(codes(&added, &snap), filter_codes(&InterPodAffinity::default(), &with, &p), "round {round}: add");
            // And removed again.
            assert!(pl.remove_pod(&mut added, &p, &moved, &snap.nodes[n], &snap).is_success());
            assert_eq!(codes(&added, &snap), codes(&st, &snap), "round {round}: add then remove");
            // Removing an existing pod.
            let victim = snap.nodes.iter().flat_map(|ni| ni.pods.iter()).next().cloned();
            if let Some(v) = victim {
                let vn = snap.node_index(v.node_name.as_deref().unwrap_or("")).unwrap_or(0);
                let mut removed = st.clone();
                assert!(pl.remove_pod(&mut removed, &p, &v, &snap.nodes[vn], &snap).is_success());
                let mut without = snap.clone();
                without.remove_pod(&v.uid);
                assert_eq!(codes(&removed, &snap), filter_codes(&InterPodAffinity::default(), &without, &p), "round {round}: remove");
            }
        }
    }

    #[test]
    fn args() {
        let parse = |v: serde_json::Value| -> Result<InterPodAffinity, String> {
            let a: Args = serde_json::from_value(v).map_err(|e| e.to_string())?;
            InterPodAffinity::new(a)
        };
        let pl = parse(serde_json::json!({})).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pl.hard_pod_affinity_weight, 1);
        assert!(!pl.ignore_preferred_terms_of_existing_pods);
        let pl = parse(serde_json::json!({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "InterPodAffinityArgs", "hardPodAffinityWeight": 100, "ignorePreferredTermsOfExistingPods": true}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pl.hard_pod_affinity_weight, 100);
        assert!(pl.ignore_preferred_terms_of_existing_pods);
        for bad in [101, -1] {
            let e = parse(serde_json::json!({"hardPodAffinityWeight": bad})).err().unwrap_or_default();
            assert!(e.contains("hardPodAffinityWeight"), "{e}");
        }
        assert!(parse(serde_json::json!({"hardPodAffinityWeigh": 1})).is_err());
    }
}

#[cfg(test)]
mod bench {
    use super::*;
    use crate::framework::{CycleOptions, Framework, PluginEntry};
    use crate::testing::{node, pod, selector};
    use k8s_openapi::api::core::v1 as core;

    fn anti_pod(name: &str) -> crate::testing::PodBuilder {
        let t = core::PodAffinityTerm { label_selector: Some(selector(&[("color", "green")])), topology_key: "kubernetes.io/hostname".into(), ..Default::default() };
        pod(name).namespace("sched-0").label("color", "green").affinity(core::Affinity {
            pod_anti_affinity: Some(core::PodAntiAffinity { required_during_scheduling_ignored_during_execution: Some(vec![t]), ..Default::default() }),
            ..Default::default()
        })
    }

    /// SchedulingPodAntiAffinity-like: 5,000 nodes, 1,000 bound pods with
    /// required anti-affinity on hostname, then 1,000 more scheduled one by one.
    /// Run: cargo test --release bench_pod_anti_affinity -- --ignored --nocapture
    #[test]
    #[ignore]
    fn bench_pod_anti_affinity() {
        let mut snap = Snapshot::new();
        for i in 0..5000 {
            snap.upsert_node(node(&format!("node-{i}")).label("topology.kubernetes.io/zone", &format!("zone-{}", i % 3)).spec());
        }
        for i in 0..1000 {
            snap.add_pod(anti_pod(&format!("init-{i}")).node(&format!("node-{i}")).info());
        }
        let names = ["PrioritySort", "NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodeResourcesFit", NAME, "NodeResourcesBalancedAllocation", "ImageLocality", "DefaultBinder"];
        let plugins = names
            .iter()
            .filter_map(|n| crate::plugins::build(n, None).ok())
            .map(|p| {
                let pts = p.points();
                (PluginEntry { plugin: p, weight: 1 }, pts)
            })
            .collect();
        let fw = Framework::new("default-scheduler".into(), plugins, None, 1);
        let pods: Vec<_> = (0..1000).map(|i| anti_pod(&format!("p-{i}")).info()).collect();
        let start = std::time::Instant::now();
        let mut placed = 0;
        for p in &pods {
            let (out, _) = fw.schedule(p, &snap, CycleOptions { skip_post_filter: true, ..Default::default() });
            if let Some(i) = out.selected {
                let mut b = (**p).clone();
                b.node_name = Some(snap.nodes[i].name().to_string());
                snap.add_pod(Arc::new(b));
                placed += 1;
            }
        }
        let el = start.elapsed();
        println!("placed {placed} pods in {el:?}: {:.0} pods/s", placed as f64 / el.as_secs_f64());
        assert_eq!(placed, 1000);
        for ni in &snap.nodes {
            assert!(ni.pods.len() <= 1, "{} has {} pods", ni.name(), ni.pods.len());
        }
    }
}
