//! What filtering and scoring share: each node's topology domain per key,
//! the counts per domain kept across cycles for one pod shape, and the term
//! matchers.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use crate::cache::{JournalMark, Snapshot};
use berth_model::pod::AffinityTerm;
use berth_model::selector::Labels;
use berth_model::{NodeInfo, PodInfo};

/// A fast non-cryptographic hasher (FxHash) for label values.
#[derive(Clone, Copy, Default)]
pub(super) struct FxHasher(u64);

impl FxHasher {
    pub(super) fn add(&mut self, w: u64) {
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

pub(super) type FxBuild = BuildHasherDefault<FxHasher>;

/// A node without the topology key.
pub(super) const NO_DOMAIN: u32 = u32::MAX;
/// A node with the key but a value no node of the tables has (a node from
/// outside the snapshot): no count is held for it.
pub(super) const UNSEEN_DOMAIN: u32 = u32::MAX - 1;

/// The topology domains (values) of one key, numbered densely.
#[derive(Clone, Debug, Default)]
pub(super) struct KeyDomains {
    pub(super) key: String,
    /// Per node index: its domain, or `NO_DOMAIN`.
    pub(super) of_node: Vec<u32>,
    /// Value → domain.
    pub(super) ids: HashMap<String, u32, FxBuild>,
}

/// The topology domains of the snapshot's nodes for the keys in use. Valid
/// while no node object changes (node labels change only with the object).
#[derive(Clone, Debug, Default)]
pub(super) struct Domains {
    /// Per node index: the address of the node object the tables were built
    /// from (the snapshot holds it while a cycle reads these tables, so an
    /// equal address is the same object).
    pub(super) specs: Vec<usize>,
    pub(super) keys: Vec<KeyDomains>,
    /// Key → its index in `keys` (a pod may name thousands of keys: no
    /// search along them).
    pub(super) by_key: HashMap<String, usize>,
}

pub(super) fn spec_addr(ni: &NodeInfo) -> usize {
    Arc::as_ptr(&ni.node) as usize
}

impl Domains {
    pub(super) fn new(snap: &Snapshot) -> Self {
        Domains { specs: snap.nodes.iter().map(spec_addr).collect(), keys: Vec::new(), by_key: HashMap::new() }
    }

    /// Were the tables built from these node objects?
    pub(super) fn fits(&self, snap: &Snapshot) -> bool {
        self.specs.len() == snap.nodes.len() && self.specs.iter().zip(&snap.nodes).all(|(&a, n)| a == spec_addr(n))
    }

    /// The index of `key`'s table, built on first use.
    pub(super) fn key_index(&mut self, key: &str, snap: &Snapshot) -> usize {
        if let Some(&k) = self.by_key.get(key) {
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
        self.by_key.insert(key.to_string(), self.keys.len() - 1);
        self.keys.len() - 1
    }

    /// The node's domain for key `k`: `NO_DOMAIN` when it lacks the key.
    pub(super) fn domain(&self, k: usize, ni: &NodeInfo) -> u32 {
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
pub(super) fn key_index(domains: &mut Arc<Domains>, key: &str, snap: &Snapshot) -> usize {
    match domains.by_key.get(key) {
        Some(&k) => k,
        None => Arc::make_mut(domains).key_index(key, snap),
    }
}

/// What a count is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Kind {
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
pub(super) struct Slot {
    pub(super) kind: Kind,
    /// Index of the key in [`Domains`].
    pub(super) key: usize,
    /// By domain.
    pub(super) counts: Vec<i64>,
    /// Domains whose count is not 0 (upstream `len` of the pair map).
    pub(super) nonzero: usize,
    /// Contributions held (a score key exists upstream once a term hit it).
    pub(super) hits: u64,
}

impl Slot {
    pub(super) fn get(&self, dom: u32) -> i64 {
        self.counts.get(dom as usize).copied().unwrap_or(0)
    }

    pub(super) fn add(&mut self, dom: u32, amount: i64, hits: i64) {
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
pub(super) type Share = (u32, i64, u32);

/// Who a [`Tally`] was computed for: the counts depend on the incoming pod's
/// terms, labels and namespace (all in its signature) and on its namespace's labels.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct TallyOwner {
    pub(super) signature: u64,
    pub(super) namespace: String,
    pub(super) labels: berth_model::PodLabels,
    pub(super) ns_labels: Labels,
}

/// Counts per topology domain over every node's pods for one incoming pod
/// shape, kept across cycles: only the nodes whose pods changed since (the
/// snapshot's journal) are recounted.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) owner: Option<TallyOwner>,
    pub(super) mark: Option<JournalMark>,
    pub(super) domains: Arc<Domains>,
    pub(super) slots: Arc<Vec<Slot>>,
    /// Per node index: its shares.
    pub(super) shares: Vec<Vec<Share>>,
}

/// A contribution a node's pods make: kind, topology key, amount.
pub(super) type Contribution<'a> = (Kind, &'a str, i64);

impl Tally {
    /// Brings the counts up to date with `snap` for `owner`; `count` lists a
    /// node's contributions (those whose key the node lacks are dropped).
    pub(super) fn refresh<'a>(&mut self, owner: Option<TallyOwner>, snap: &'a Snapshot, mut count: impl FnMut(&'a NodeInfo, &mut Vec<Contribution<'a>>)) {
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
        // Each slot found by (kind, key) and each node's share of a slot by
        // the slot, without a search (a pod may have thousands of terms).
        let mut slot_of = slot_index(slots);
        const NONE: u32 = u32::MAX;
        let mut share_at: Vec<u32> = vec![NONE; slots.len()];
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
                let k = key_index(&mut self.domains, key, snap);
                let s = match slot_of.get(&(kind, k)) {
                    Some(&s) => s,
                    None => {
                        slots.push(Slot { kind, key: k, counts: vec![0; self.domains.keys[k].ids.len()], nonzero: 0, hits: 0 });
                        slot_of.insert((kind, k), slots.len() - 1);
                        share_at.push(NONE);
                        slots.len() - 1
                    }
                };
                let dom = self.domains.keys[slots[s].key].of_node[i];
                slots[s].add(dom, amount, 1);
                match new.get_mut(share_at[s] as usize) {
                    Some(x) => {
                        x.1 += amount;
                        x.2 += 1;
                    }
                    None => {
                        share_at[s] = new.len() as u32;
                        new.push((s as u32, amount, 1));
                    }
                }
            }
            for x in &new {
                share_at[x.0 as usize] = NONE;
            }
            self.shares[i] = new;
        }
    }
}

/// Each slot's index by (kind, key index).
pub(super) fn slot_index(slots: &[Slot]) -> HashMap<(Kind, usize), usize, FxBuild> {
    slots.iter().enumerate().map(|(i, s)| ((s.kind, s.key), i)).collect()
}

/// How many pod shapes' tallies are kept.
pub(super) const KEPT_TALLIES: usize = 4;

/// Takes the kept tally of `owner` out of `cache`, or a new one (sharing the
/// latest domain tables) when there is none or the counts cannot be kept.
pub(super) fn take_tally(cache: &Mutex<Vec<Tally>>, owner: Option<&TallyOwner>) -> Tally {
    let mut kept = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(o) = owner
        && let Some(i) = kept.iter().position(|t| t.owner.as_ref() == Some(o))
    {
        return kept.remove(i);
    }
    Tally { domains: kept.first().map(|t| t.domains.clone()).unwrap_or_default(), ..Default::default() }
}

/// Keeps `tally` for its owner's next cycle (the most recent first).
pub(super) fn put_tally(cache: &Mutex<Vec<Tally>>, tally: Tally) {
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
pub(super) fn incoming_term_matches(term: &AffinityTerm, other: &PodInfo, snap: &Snapshot) -> bool {
    let ns = &term.namespace_selector;
    let labels = if ns.is_nothing() || ns.is_everything() { None } else { snap.namespaces.get(&other.namespace) };
    term.matches(other, labels)
}

/// Does matching this incoming term read other namespaces' labels (which the
/// journal does not track)?
pub(super) fn reads_namespaces(term: &AffinityTerm) -> bool {
    let ns = &term.namespace_selector;
    !(ns.is_nothing() || ns.is_everything())
}

/// Does `other` match every one of the incoming pod's `terms` (false when there are none)?
pub(super) fn matches_all(terms: &[AffinityTerm], other: &PodInfo, snap: &Snapshot) -> bool {
    !terms.is_empty() && terms.iter().all(|t| incoming_term_matches(t, other, snap))
}

/// Does an existing pod's term select the incoming pod? `ns_labels` are the
/// labels of the incoming pod's namespace (empty when unknown, as upstream).
pub(super) fn existing_term_matches(term: &AffinityTerm, incoming: &PodInfo, ns_labels: &Labels) -> bool {
    term.matches(incoming, Some(ns_labels))
}

pub(super) static EMPTY_LABELS: Labels = Labels::new();

pub(super) fn namespace_labels<'a>(snap: &'a Snapshot, ns: &str) -> &'a Labels {
    snap.namespaces.get(ns).unwrap_or(&EMPTY_LABELS)
}

pub(super) fn owner_of(pod: &PodInfo, ns_labels: &Labels) -> Option<TallyOwner> {
    (pod.signature != 0).then(|| TallyOwner { signature: pod.signature, namespace: pod.namespace.clone(), labels: pod.labels.clone(), ns_labels: ns_labels.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::test_support::*;


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
}
