//! What filtering and scoring share: the pod's constraints (its own or the
//! defaults), each node's domain per topology key, and the matching pods per
//! domain kept across cycles.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use crate::cache::{JournalMark, Snapshot};
use berth_model::pod::{InclusionPolicy, SpreadConstraint, WhenUnsatisfiable};
use berth_model::selector::Selector;
use berth_model::taints::first_untolerated_hard;
use berth_model::{NodeInfo, NodeSpec, PodInfo};

use super::PodTopologySpread;
use crate::plugins::node_affinity::pod_matches_node;

impl PodTopologySpread {
    /// The pod's constraints of one kind, or the default ones when the pod has
    /// none (upstream `buildDefaultConstraints`).
    pub(super) fn constraints(&self, pod: &PodInfo, when: WhenUnsatisfiable, snap: &Snapshot) -> Vec<SpreadConstraint> {
        if !pod.spread_constraints.is_empty() {
            return pod.spread_constraints.iter().filter(|c| c.when_unsatisfiable == when).cloned().collect();
        }
        let defaults: Vec<&SpreadConstraint> = self.defaults.iter().filter(|c| c.when_unsatisfiable == when).collect();
        if defaults.is_empty() {
            return Vec::new();
        }
        let sel = snap.workloads.default_selector(pod);
        if sel.is_everything() {
            return Vec::new();
        }
        defaults
            .into_iter()
            .map(|c| SpreadConstraint { selector: sel.clone(), ..c.clone() })
            .collect()
    }
}

/// Per-node entries the cross-cycle caches (node domains per key, tallies)
/// hold, about, each: how many keys or tallies are kept depends on the
/// cluster's size (one pod may name thousands of keys).
pub(super) const CACHE_BUDGET: usize = 1 << 20;

/// Tallies kept across cycles whatever the cluster's size.
pub(super) const MIN_TALLIES: usize = 256;

/// Topology keys whose node domains are kept whatever the cluster's size.
pub(super) const MIN_CACHED_KEYS: usize = 64;

/// Is a cache of `entries` (each holding something per node) full?
pub(super) fn cache_full(entries: usize, nodes: usize, min: usize) -> bool {
    entries >= min.max(CACHE_BUDGET / nodes.max(1))
}

/// Sets of required keys named at once, at most.
pub(super) const MAX_REQUIRED_SETS: usize = 256;

/// A topology key's domain ids (value → id) and each snapshot node's id.
pub(super) type Domains = (Arc<HashMap<String, u32>>, Vec<u32>);

/// Marks a node that lacks the topology key (or, as a counting slot, a node that does not count).
pub(super) const MISSING: u32 = u32::MAX;

/// A value the domain ids do not know (its count is 0).
pub(super) const UNKNOWN: u32 = u32::MAX - 1;

/// Each node's domain for one topology key, kept across cycles so that a
/// rebuild reads no node labels: an entry is valid while the snapshot holds
/// the very same `NodeSpec` (node updates replace it).
#[derive(Debug, Default)]
pub(super) struct KeyDomains {
    /// Topology value → domain id; ids are never reused.
    pub(super) ids: Arc<HashMap<String, u32>>,
    /// By node index: the spec the entry was computed from and its domain id.
    pub(super) nodes: Vec<(Option<Arc<NodeSpec>>, u32)>,
}

impl PodTopologySpread {
    /// The domain ids of `key` (value → id) and each snapshot node's id (MISSING without the key).
    pub(super) fn node_domains(&self, key: &str, snap: &Snapshot) -> Domains {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if !cache.contains_key(key) {
            // Bounded: pods may name any number of keys (a layout keeps its own ids).
            if cache_full(cache.len(), snap.nodes.len(), MIN_CACHED_KEYS) {
                cache.clear();
            }
            cache.insert(key.to_string(), KeyDomains::default());
        }
        let Some(kd) = cache.get_mut(key) else { return (Arc::default(), vec![MISSING; snap.nodes.len()]) };
        kd.nodes.resize(snap.nodes.len(), (None, MISSING));
        let mut out = Vec::with_capacity(snap.nodes.len());
        for (node, slot) in snap.nodes.iter().zip(kd.nodes.iter_mut()) {
            if slot.0.as_ref().is_some_and(|s| Arc::ptr_eq(s, &node.node)) {
                out.push(slot.1);
                continue;
            }
            let id = match node.node.labels.get(key) {
                None => MISSING,
                Some(v) => match kd.ids.get(v.as_str()) {
                    Some(&d) => d,
                    None => {
                        let ids = Arc::make_mut(&mut kd.ids);
                        let d = ids.len() as u32;
                        ids.insert(v.clone(), d);
                        d
                    }
                },
            };
            *slot = (Some(Arc::clone(&node.node)), id);
            out.push(id);
        }
        (Arc::clone(&kd.ids), out)
    }
}

/// Matching pods on a node: same namespace, not terminating, selected.
pub(super) fn count_matching(node: &NodeInfo, sel: &Selector, ns: &str) -> i64 {
    node.pods.iter().filter(|p| !p.terminating && p.namespace == ns && sel.matches(&p.labels)).count() as i64
}

/// The snapshot's nodes as one topology key sees them, for one set of keys a
/// node must have to count: rebuilt only when nodes are added, removed or
/// replaced, and shared read-only with the cycle states, so that a cycle
/// finds a node's domain by its index.
#[derive(Debug, Default)]
pub(super) struct Layout {
    /// Topology value → domain id (slots `0..ids.len()`).
    pub(super) ids: Arc<HashMap<String, u32>>,
    /// By node index: the node object read. Held, so that a node object
    /// freed since is never mistaken for a new one at the same address.
    pub(super) specs: Vec<Arc<NodeSpec>>,
    /// By node index: the domain of the node's value of the key, MISSING without it.
    pub(super) dom: Vec<u32>,
    /// By node index: the slot the node counts in: its domain, or for a
    /// node without the key the domain of the empty value (upstream reads a
    /// missing label as "") when such nodes count; MISSING when the node
    /// does not count (it lacks a required key).
    pub(super) slot: Vec<u32>,
    /// By slot: some counted node lies there.
    pub(super) present: Vec<bool>,
    /// Number of present slots.
    pub(super) domains: i64,
}

impl Layout {
    /// Counting slots: every domain id and one past them for the empty value.
    pub(super) fn slots(&self) -> usize {
        self.ids.len() + 1
    }

    /// The slot node `i` counts in, MISSING when it does not count.
    pub(super) fn slot(&self, i: usize) -> u32 {
        self.slot.get(i).copied().unwrap_or(MISSING)
    }

    /// Is `node` the very node object this layout read at its index?
    pub(super) fn knows(&self, node: &NodeInfo) -> bool {
        self.specs.get(node.index).is_some_and(|s| Arc::ptr_eq(s, &node.node))
    }

    /// The node's domain: from the layout when it knows the node, else from
    /// its labels (UNKNOWN for a value no node had when the layout was built).
    pub(super) fn domain_of(&self, node: &NodeInfo, key: &str) -> u32 {
        if self.knows(node) {
            return self.dom[node.index];
        }
        match node.node.labels.get(key) {
            None => MISSING,
            Some(v) => self.ids.get(v.as_str()).copied().unwrap_or(UNKNOWN),
        }
    }
}

/// Matching pods per domain for one (namespace, selector, topology key,
/// required keys), kept across cycles: between two cycles only the nodes the
/// snapshot's journal lists as changed are counted again; a new node layout
/// (or a snapshot the journal cannot relate) rebuilds it, recounting only the
/// nodes whose state changed.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Where the snapshot stood when the counts were last brought up to date.
    pub(super) mark: Option<JournalMark>,
    pub(super) layout: Arc<Layout>,
    /// By node index: the node state (generation) counted.
    pub(super) gens: Vec<u64>,
    /// By node index: matching pods on the node (every node, counted or not).
    pub(super) per_node: Arc<Vec<i64>>,
    /// By slot: matching pods on the counted nodes.
    pub(super) sums: Vec<i64>,
}

/// The keys a node must have to count, the same for every constraint of a
/// cycle: named by a short id, so that a tally's name does not spell them
/// out, and with each node's verdict worked out once, on first need (not
/// once per constraint: a pod may have thousands of constraints, each with
/// a key of its own).
pub(super) struct Required<'a> {
    pub(super) keys: &'a [&'a str],
    /// 0 when no key is required, else the id `keys` were given.
    pub(super) id: u64,
    /// By snapshot node index: the node has every key.
    mask: OnceCell<Vec<bool>>,
}

/// Ids given to sets of required keys (never reused).
#[derive(Debug, Default)]
pub(super) struct RequiredIds {
    ids: HashMap<String, u64>,
    last: u64,
}

impl PodTopologySpread {
    /// `keys` as a required set, with its id.
    pub(super) fn required<'a>(&self, keys: &'a [&'a str]) -> Required<'a> {
        let id = if keys.is_empty() {
            0
        } else {
            // Label keys hold no NUL.
            let text = keys.join("\u{0}");
            let mut r = self.required_ids.lock().unwrap_or_else(PoisonError::into_inner);
            match r.ids.get(&text) {
                Some(&id) => id,
                None => {
                    if r.ids.len() >= MAX_REQUIRED_SETS {
                        // Tallies named by a forgotten id are merely never found again.
                        r.ids.clear();
                    }
                    r.last += 1;
                    let id = r.last;
                    r.ids.insert(text, id);
                    id
                }
            }
        };
        Required { keys, id, mask: OnceCell::new() }
    }
}

impl Required<'_> {
    /// By snapshot node index: the node has every key (computed once).
    pub(super) fn mask(&self, pl: &PodTopologySpread, snap: &Snapshot) -> &[bool] {
        self.mask.get_or_init(|| {
            let mut mask = vec![true; snap.nodes.len()];
            for key in self.keys {
                for (m, d) in mask.iter_mut().zip(pl.node_domains(key, snap).1) {
                    *m &= d != MISSING;
                }
            }
            mask
        })
    }
}

/// What identifies a tally: the pods counted (namespace, selector) and the
/// nodes (topology key, keys a node must have, missing key read as "").
pub(super) struct TallyKey<'a> {
    pub(super) ns: &'a str,
    pub(super) sel: &'a Selector,
    pub(super) key: &'a str,
    pub(super) required: &'a Required<'a>,
    pub(super) missing_as_empty: bool,
}

impl TallyKey<'_> {
    pub(super) fn text(&self) -> String {
        format!("{}\u{0}{:?}\u{0}{}\u{0}{}\u{0}{}", self.ns, self.sel, self.key, self.required.id, self.missing_as_empty)
    }
}

impl Tally {
    /// Brings the counts up to `snap`.
    pub(super) fn sync(&mut self, pl: &PodTopologySpread, k: &TallyKey, snap: &Snapshot) {
        let mut changed = Vec::new();
        let incremental = self.layout.specs.len() == snap.nodes.len() && self.mark.is_some_and(|m| snap.changed_since(m, &mut changed).is_some());
        if incremental {
            for &i in &changed {
                self.recount(i, &snap.nodes[i], k);
            }
        } else {
            self.rebuild(pl, k, snap);
        }
        self.mark = Some(snap.journal_mark());
    }

    /// Counts node `i` again after its pods changed (same node object).
    pub(super) fn recount(&mut self, i: usize, node: &NodeInfo, k: &TallyKey) {
        let n = if node.pods.is_empty() { 0 } else { count_matching(node, k.sel, k.ns) };
        let Some(g) = self.gens.get_mut(i) else { return };
        *g = node.generation;
        let per_node = Arc::make_mut(&mut self.per_node);
        let old = std::mem::replace(&mut per_node[i], n);
        let s = self.layout.slot(i);
        if s != MISSING && old != n {
            self.sums[s as usize] += n - old;
        }
    }

    /// Builds the layout anew and recounts the nodes whose state is not the one counted.
    pub(super) fn rebuild(&mut self, pl: &PodTopologySpread, k: &TallyKey, snap: &Snapshot) {
        let (ids, dom) = pl.node_domains(k.key, snap);
        let mask = if k.required.keys.is_empty() { None } else { Some(k.required.mask(pl, snap)) };
        let empty_slot = if k.missing_as_empty { ids.get("").copied().unwrap_or(ids.len() as u32) } else { MISSING };
        let slot: Vec<u32> = (0..snap.nodes.len())
            .map(|i| {
                let counts = mask.is_none_or(|m| m.get(i).copied().unwrap_or(false));
                match dom[i] {
                    _ if !counts => MISSING,
                    MISSING => empty_slot,
                    d => d,
                }
            })
            .collect();
        let slots = ids.len() + 1;
        let mut layout = Layout {
            ids,
            specs: snap.nodes.iter().map(|n| Arc::clone(&n.node)).collect(),
            dom,
            slot,
            present: vec![false; slots],
            domains: 0,
        };
        let old = std::mem::take(&mut self.layout);
        let mut gens = Vec::with_capacity(snap.nodes.len());
        let mut per_node = Vec::with_capacity(snap.nodes.len());
        let mut sums = vec![0; slots];
        for (i, node) in snap.nodes.iter().enumerate() {
            let same = self.gens.get(i) == Some(&node.generation) && old.specs.get(i).is_some_and(|s| Arc::ptr_eq(s, &node.node));
            let n = match self.per_node.get(i) {
                Some(&n) if same => n,
                _ if node.pods.is_empty() => 0,
                _ => count_matching(node, k.sel, k.ns),
            };
            gens.push(node.generation);
            per_node.push(n);
            let s = layout.slot(i);
            if s != MISSING {
                let s = s as usize;
                sums[s] += n;
                if !layout.present[s] {
                    layout.present[s] = true;
                    layout.domains += 1;
                }
            }
        }
        *self = Tally { mark: None, layout: Arc::new(layout), gens, per_node: Arc::new(per_node), sums };
    }
}

impl PodTopologySpread {
    /// The tally of `k`, brought up to `snap`, handed to `f`.
    pub(super) fn with_tally<R>(&self, k: &TallyKey, snap: &Snapshot, f: impl FnOnce(&Tally) -> R) -> R {
        let text = k.text();
        let mut tallies = self.tallies.lock().unwrap_or_else(PoisonError::into_inner);
        if cache_full(tallies.len(), snap.nodes.len(), MIN_TALLIES) && !tallies.contains_key(&text) {
            tallies.clear();
        }
        let t = tallies.entry(text).or_default();
        t.sync(self, k, snap);
        f(t)
    }
}

/// Does the constraint count every node whatever the pod's node affinity and
/// tolerations (so PreFilter/PreScore need not look at each node)?
pub(super) fn admits_every_node(pod: &PodInfo, c: &SpreadConstraint) -> bool {
    let affinity = c.node_affinity_policy == InclusionPolicy::Ignore || (pod.node_selector.is_none() && pod.required_node_affinity.is_none());
    affinity && c.node_taints_policy == InclusionPolicy::Ignore
}

/// Per node, the inclusion policies evaluated lazily and at most once.
pub(super) struct Inclusion<'a> {
    pub(super) pod: &'a PodInfo,
    pub(super) node: &'a NodeInfo,
    pub(super) affinity: Option<bool>,
    pub(super) taints: Option<bool>,
}

impl<'a> Inclusion<'a> {
    pub(super) fn new(pod: &'a PodInfo, node: &'a NodeInfo) -> Self {
        Inclusion { pod, node, affinity: None, taints: None }
    }

    /// Does the node count for this constraint under its inclusion policies?
    pub(super) fn admits(&mut self, c: &SpreadConstraint) -> bool {
        if c.node_affinity_policy == InclusionPolicy::Honor && !*self.affinity.get_or_insert_with(|| pod_matches_node(self.pod, self.node)) {
            return false;
        }
        if c.node_taints_policy == InclusionPolicy::Honor
            && !*self.taints.get_or_insert_with(|| first_untolerated_hard(&self.node.node.taints, &self.pod.tolerations).is_none())
        {
            return false;
        }
        true
    }
}

/// Do the snapshot's node indexes still mean what they meant at `mark`
/// (and, with `unchanged`, has no node's pods changed either)?
pub(super) fn same_nodes(snap: &Snapshot, mark: JournalMark, unchanged: bool) -> bool {
    let mut changed = Vec::new();
    snap.changed_since(mark, &mut changed).is_some() && (!unchanged || changed.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::test_support::*;


    #[test]
    fn domain_cache_follows_node_changes() {
        let pl = plugin();
        let mut snap = snapshot(&[zn("node-a", "zone1"), zn("node-b", "zone2"), zn("node-c", "zone3")], &[on("a1", "node-a"), on("b1", "node-b")]);
        let p = incoming().spread(1, "zone", DNS, &[("foo", "")]).info();
        let fits = |snap: &Snapshot| -> Vec<String> {
            let mut st = CycleState::new();
            pl.pre_filter(&mut st, &p, snap);
            snap.nodes.iter().filter(|n| pl.filter(&st, &p, n).is_success()).map(|n| n.name().to_string()).collect()
        };
        assert_eq!(fits(&snap), vec!["node-c"]);
        // node-c moves into zone1: zone1 has 1, zone2 has 1, every node fits.
        snap.upsert_node(zn("node-c", "zone1").spec());
        assert_eq!(fits(&snap), vec!["node-a", "node-b", "node-c"]);
        // node-a goes (node-c takes its index): zone1 now 0 via node-c, zone2 1.
        snap.remove_node("node-a");
        assert_eq!(fits(&snap), vec!["node-c"]);
        // A new zone appears.
        snap.upsert_node(zn("node-d", "zone9").spec());
        assert_eq!(fits(&snap), vec!["node-c", "node-d"]);
    }

    /// A random node: in one of a few zones (or none), with or without the
    /// hostname label, sometimes tainted or off the pod's node selector.
    fn random_node(r: &mut Rng, name: &str) -> NodeBuilder {
        let mut n = if r.below(8) == 0 { bare(name) } else { node(name) };
        if r.below(8) != 0 {
            n = n.label("zone", ["z1", "z2", "z3", ""][r.below(4)]);
        }
        if r.below(3) != 0 {
            n = n.label("pool", "p");
        }
        if r.below(6) == 0 {
            n = n.taint("k", "v", "NoSchedule");
        }
        n
    }

    /// Per (value of `key`), the matching pods of `ns`/`sel` over the nodes
    /// having every key of `required`, counted from scratch.
    fn recount(snap: &Snapshot, ns: &str, sel: &Selector, key: &str, required: &[&str]) -> std::collections::BTreeMap<String, i64> {
        let mut out = std::collections::BTreeMap::new();
        for n in &snap.nodes {
            let labels = &n.node.labels;
            if !required.iter().all(|k| labels.contains_key(*k)) {
                continue;
            }
            let Some(v) = labels.get(key) else { continue };
            *out.entry(v.clone()).or_insert(0) += count_matching(n, sel, ns);
        }
        out
    }

    /// The plugin's verdicts (by node name) and normalized scores for `p`.
    fn decisions(pl: &PodTopologySpread, p: &PodInfo, snap: &Snapshot, batch: bool, every: usize) -> (Vec<(String, Code)>, Vec<i64>) {
        let mut st = CycleState::new();
        let (s, _) = pl.pre_filter(&mut st, p, snap);
        let mut verdicts = Vec::new();
        if s.is_success() {
            if batch {
                let mut alive: Vec<usize> = (0..snap.nodes.len()).collect();
                let mut rejected = Vec::new();
                pl.filter_nodes(&st, p, snap, &mut alive, &mut rejected);
                verdicts.extend(alive.iter().map(|&i| (snap.nodes[i].name().to_string(), Code::Success)));
                verdicts.extend(rejected.iter().map(|(i, s)| (snap.nodes[*i].name().to_string(), s.code)));
            } else {
                verdicts.extend(snap.nodes.iter().map(|n| (n.name().to_string(), pl.filter(&st, p, n).code)));
            }
        }
        verdicts.sort_by(|a, b| a.0.cmp(&b.0));
        // Score every `every`th node (with 2, some domains have no scored node).
        let feasible: Vec<usize> = (0..snap.nodes.len()).filter(|i| i % every == 0).collect();
        let mut st = CycleState::new();
        if pl.pre_score(&mut st, p, &feasible, snap).is_skip() {
            return (verdicts, Vec::new());
        }
        let mut out: Vec<NodeScore> = feasible.iter().map(|&i| NodeScore { node: i, score: 0 }).collect();
        if batch {
            assert!(pl.score_nodes(&st, p, snap, &mut out).is_ok());
        } else {
            for ns in out.iter_mut() {
                ns.score = pl.score(&st, p, &snap.nodes[ns.node]).unwrap_or(-1);
            }
        }
        assert!(pl.normalize_score(&st, p, &mut out, snap).is_success());
        let mut named: Vec<(String, i64)> = out.iter().map(|s| (snap.nodes[s.node].name().to_string(), s.score)).collect();
        named.sort();
        (verdicts, named.into_iter().map(|(_, s)| s).collect())
    }

    /// Normalized scores (by node name) of every `every`th node, computed from
    /// upstream's definitions node by node, sharing nothing with the plugin's
    /// state but its constraints, inclusion policies and pod matching.
    fn reference_scores(pl: &PodTopologySpread, p: &PodInfo, snap: &Snapshot, every: usize) -> Vec<i64> {
        let cs = pl.constraints(p, WhenUnsatisfiable::ScheduleAnyway, snap);
        if cs.is_empty() {
            return Vec::new();
        }
        let feasible: Vec<usize> = (0..snap.nodes.len()).filter(|i| i % every == 0).collect();
        let require_all = !p.spread_constraints.is_empty() || !pl.system_defaulted;
        let has_all = |n: &NodeInfo| cs.iter().all(|c| n.node.labels.contains_key(&c.topology_key));
        let value = |n: &NodeInfo, c: &SpreadConstraint| n.node.labels.get(&c.topology_key).cloned().unwrap_or_default();
        let ignored = |i: usize| require_all && !has_all(&snap.nodes[i]);
        let mut counts: Vec<HashMap<String, i64>> = vec![HashMap::new(); cs.len()];
        for &i in feasible.iter().filter(|&&i| !ignored(i)) {
            for (k, c) in cs.iter().enumerate().filter(|(_, c)| c.topology_key != LABEL_HOSTNAME) {
                counts[k].entry(value(&snap.nodes[i], c)).or_insert(0);
            }
        }
        let n_ignored = feasible.iter().filter(|&&i| ignored(i)).count();
        let weights: Vec<f64> = cs
            .iter()
            .zip(&counts)
            .map(|(c, m)| (if c.topology_key == LABEL_HOSTNAME { feasible.len() - n_ignored } else { m.len() } + 2) as f64)
            .map(f64::ln)
            .collect();
        for (i, n) in snap.nodes.iter().enumerate() {
            if ignored(i) {
                continue;
            }
            for (k, c) in cs.iter().enumerate() {
                if Inclusion::new(p, n).admits(c)
                    && let Some(x) = counts[k].get_mut(&value(n, c))
                {
                    *x += count_matching(n, &c.selector, &p.namespace);
                }
            }
        }
        let raw: Vec<i64> = feasible
            .iter()
            .map(|&i| {
                let n = &snap.nodes[i];
                let mut score = 0f64;
                if ignored(i) {
                    return 0;
                }
                for (k, c) in cs.iter().enumerate().filter(|(_, c)| n.node.labels.contains_key(&c.topology_key)) {
                    let cnt = if c.topology_key == LABEL_HOSTNAME { count_matching(n, &c.selector, &p.namespace) } else { counts[k][&value(n, c)] };
                    score += cnt as f64 * weights[k] + (c.max_skew - 1) as f64;
                }
                score.round() as i64
            })
            .collect();
        let kept = || feasible.iter().zip(&raw).filter(|(i, _)| !ignored(**i)).map(|(_, s)| *s);
        let (min, max) = (kept().min().unwrap_or(i64::MAX), kept().max().unwrap_or(0).max(0));
        let mut named: Vec<(String, i64)> = feasible
            .iter()
            .zip(&raw)
            .map(|(&i, &s)| {
                let v = if ignored(i) { 0 } else if max == 0 { MAX_NODE_SCORE } else { MAX_NODE_SCORE * (max + min - s) / max };
                (snap.nodes[i].name().to_string(), v)
            })
            .collect();
        named.sort();
        named.into_iter().map(|(_, s)| s).collect()
    }

    #[test]
    fn incremental_counts_follow_random_changes() {
        let mut r = Rng(0x9E37_79B9_7F4A_7C15);
        let foo = &[("foo", "")];
        let pods = [
            incoming().spread(1, "zone", DNS, foo),
            incoming().spread(1, "zone", DNS, foo).spread(2, HOST, DNS, foo),
            incoming().node_selector("pool", "p").spread(1, "zone", DNS, foo).spread(1, "zone", SA, foo),
            incoming().spread_constraint(tsc(1, "zone", DNS, Some(3), None, Some("Honor"))),
            incoming().spread(2, "zone", SA, foo).spread(1, HOST, SA, &[("bar", "")]),
            incoming().namespace("other").spread(1, "zone", SA, foo),
            // No constraints: the system defaults (hostname and zone), where
            // nodes without a key count under the empty value.
            incoming(),
        ]
        .map(|p| p.info());
        let pl = plugin();
        let mut snap = snapshot(&(0..12).map(|i| random_node(&mut r, &format!("node-{i}"))).collect::<Vec<_>>(), &[]);
        let svc = core::Service {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta { name: Some("svc".into()), namespace: Some("default".into()), ..Default::default() },
            spec: Some(core::ServiceSpec { selector: Some([("foo".to_string(), String::new())].into()), ..Default::default() }),
            ..Default::default()
        };
        snap.workloads.upsert_service(&svc);
        let mut bound: Vec<String> = Vec::new();
        let mut next = 0;
        for step in 0..600 {
            match r.below(20) {
                0 => {
                    // A node changes labels or taints (its pods stay).
                    let i = r.below(snap.nodes.len());
                    let name = snap.nodes[i].name().to_string();
                    snap.upsert_node(random_node(&mut r, &name).spec());
                }
                1 if snap.nodes.len() > 4 => {
                    let i = r.below(snap.nodes.len());
                    let name = snap.nodes[i].name().to_string();
                    snap.remove_node(&name);
                }
                2 => {
                    next += 1;
                    snap.upsert_node(random_node(&mut r, &format!("new-{next}")).spec());
                }
                3..=8 if !bound.is_empty() => {
                    let uid = bound.swap_remove(r.below(bound.len()));
                    snap.remove_pod(&uid);
                }
                _ => {
                    next += 1;
                    let i = r.below(snap.nodes.len());
                    let mut b = pod(&format!("q{next}")).node(snap.nodes[i].name());
                    for (k, v) in [("foo", ""), ("bar", "")] {
                        if r.below(3) != 0 {
                            b = b.label(k, v);
                        }
                    }
                    if r.below(6) == 0 {
                        b = b.namespace("other");
                    }
                    if r.below(8) == 0 {
                        b = b.terminating();
                    }
                    let info = b.info();
                    bound.push(info.uid.clone());
                    snap.add_pod(info);
                }
            }
            // The kept tallies equal a count from scratch.
            let sel = pods[0].spread_constraints[0].selector.clone();
            for (key, required) in [("zone", vec!["zone"]), ("zone", vec!["zone", HOST]), (HOST, vec!["zone", HOST])] {
                let req = pl.required(&required);
                let k = TallyKey { ns: "default", sel: &sel, key, required: &req, missing_as_empty: false };
                let got: std::collections::BTreeMap<String, i64> = pl.with_tally(&k, &snap, |t| {
                    t.layout.ids.iter().filter(|(_, d)| t.layout.present[**d as usize]).map(|(v, d)| (v.clone(), t.sums[*d as usize])).collect()
                });
                assert_eq!(got, recount(&snap, "default", &sel, key, &required), "step {step}: {key} {required:?}");
            }
            // Decisions equal those of a plugin that counts from scratch, by
            // the batch and the per-node paths alike.
            if step % 3 == 0 {
                // Every node scored, and every other one.
                for (p, every) in pods.iter().flat_map(|p| [(p, 1), (p, 2)]) {
                    let want = decisions(&plugin(), p, &snap, false, every);
                    assert_eq!(want.1, reference_scores(&pl, p, &snap, every), "step {step}/{every}: {:?}", p.spread_constraints);
                    assert_eq!(decisions(&pl, p, &snap, true, every), want, "step {step}/{every}: {:?}", p.spread_constraints);
                    assert_eq!(decisions(&pl, p, &snap, false, every), want, "step {step}/{every}: {:?}", p.spread_constraints);
                }
            }
        }
    }

    /// A pod with many constraints, each on a topology key of its own (the
    /// shape whose cost once grew with the square of the constraints):
    /// scores equal a count from scratch, node by node, and the batch and
    /// per-node paths agree, as the cluster changes between cycles.
    #[test]
    fn many_constraints_score_as_counted_from_scratch() {
        const KEYS: usize = 60;
        let mut r = Rng(0x2545_F491_4F6C_DD1D);
        let key = |k: usize| format!("key-{k}");
        // Most nodes carry every key (a few values each); some lack one and are ignored.
        let random_node = |r: &mut Rng, name: &str| {
            let mut n = node(name);
            let lacking = if r.below(5) == 0 { Some(r.below(KEYS)) } else { None };
            for k in (0..KEYS).filter(|k| Some(*k) != lacking) {
                n = n.label(&key(k), ["a", "b", "c"][r.below(3)]);
            }
            n
        };
        let foo = &[("foo", "")];
        let soft = (0..KEYS).fold(incoming(), |p, k| p.spread(1 + (k % 3) as i32, &key(k), SA, foo)).info();
        let hard = (0..KEYS).fold(incoming(), |p, k| p.spread(KEYS as i32, &key(k), DNS, foo)).info();
        let pl = plugin();
        let mut snap = snapshot(&(0..10).map(|i| random_node(&mut r, &format!("node-{i}"))).collect::<Vec<_>>(), &[]);
        for step in 0..12 {
            for _ in 0..6 {
                let i = r.below(snap.nodes.len());
                let b = pod(&format!("q{step}-{}", r.below(1 << 20))).node(snap.nodes[i].name());
                snap.add_pod(if r.below(4) == 0 { b } else { b.label("foo", "") }.info());
            }
            if step % 4 == 3 {
                let i = r.below(snap.nodes.len());
                let name = snap.nodes[i].name().to_string();
                snap.upsert_node(random_node(&mut r, &name).spec());
            }
            for every in [1, 2] {
                let want = decisions(&plugin(), &soft, &snap, false, every);
                assert!(!want.1.is_empty(), "step {step}: scored");
                assert_eq!(want.1, reference_scores(&pl, &soft, &snap, every), "step {step}/{every}");
                assert_eq!(decisions(&pl, &soft, &snap, true, every), want, "step {step}/{every}");
                let hard_want = decisions(&plugin(), &hard, &snap, false, every);
                assert_eq!(decisions(&pl, &hard, &snap, true, every), hard_want, "step {step}/{every}: hard");
            }
        }
    }

    #[test]
    fn default_constraints_skip_pods_no_workload_selects() {
        for args in [Args::default(), Args { defaulting_type: Some("List".into()), default_constraints: Some(vec![DefaultConstraint { max_skew: 1, topology_key: "zone".into(), when_unsatisfiable: DNS.into(), ..Default::default() }]), ..Default::default() }] {
            let pl = PodTopologySpread::new(args).unwrap_or_default();
            let snap = snapshot(&[zn("node-a", "zone1")], &[on("a1", "node-a")]);
            let p = incoming().info();
            assert!(pl.pre_filter(&mut CycleState::new(), &p, &snap).0.is_skip());
            assert!(pl.pre_score(&mut CycleState::new(), &p, &[0], &snap).is_skip());
        }
        assert!(plugin().system_defaulted);
        assert_eq!(plugin().defaults.len(), 2);
    }

    #[test]
    fn default_constraints_use_the_workload_selector() {
        let list = Args {
            defaulting_type: Some("List".into()),
            default_constraints: Some(vec![DefaultConstraint { max_skew: 1, topology_key: HOST.into(), when_unsatisfiable: DNS.into(), ..Default::default() }]),
            ..Default::default()
        };
        let pl = PodTopologySpread::new(list).unwrap_or_default();
        let nodes = [node("node-a"), node("node-b")];
        let mut snap = snapshot(&nodes, &[on("a1", "node-a"), pod("a2").node("node-a").label("other", "")]);
        let svc = core::Service {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta { name: Some("svc".into()), namespace: Some("default".into()), ..Default::default() },
            spec: Some(core::ServiceSpec { selector: Some([("foo".to_string(), String::new())].into()), ..Default::default() }),
            ..Default::default()
        };
        snap.workloads.upsert_service(&svc);
        let p = incoming().info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        let ok: Vec<&str> = snap.nodes.iter().filter(|n| pl.filter(&st, &p, n).is_success()).map(|n| n.name()).collect();
        // Only a1 matches the Service's selector: node-a has 1, node-b 0.
        assert_eq!(ok, vec!["node-b"]);
        // A pod the Service does not select gets no default constraint.
        assert!(pl.pre_filter(&mut CycleState::new(), &pod("q").label("other", "").info(), &snap).0.is_skip());
        // System defaults are ScheduleAnyway: Filter skips, Score runs.
        let sys = plugin();
        assert!(sys.pre_filter(&mut CycleState::new(), &p, &snap).0.is_skip());
        assert!(sys.pre_score(&mut CycleState::new(), &p, &[0, 1], &snap).is_success());
    }
}
