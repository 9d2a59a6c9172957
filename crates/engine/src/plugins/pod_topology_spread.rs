//! PodTopologySpread: hard topology spread constraints (`DoNotSchedule`) in
//! PreFilter/Filter, with the AddPod/RemovePod extensions preemption and
//! nominated pods rely on; soft ones (`ScheduleAnyway`) in PreScore/Score/
//! NormalizeScore, with upstream's exact scores.
//!
//! Default constraints (`defaultingType: System` or `List`) apply to pods
//! without constraints of their own, with the selector upstream's
//! `helper.DefaultSelector` builds from the Services, ReplicationControllers,
//! ReplicaSets and StatefulSets that select or own the pod (kept in the
//! snapshot's `workloads`); they are skipped when that selector is empty.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Deserialize;

use crate::cache::{JournalMark, Snapshot};
use crate::framework::{filter_each, CycleState, Events, NodeScore, Plugin, Points, PreFilterNodes, Status, MAX_NODE_SCORE};
use berth_model::pod::{InclusionPolicy, SpreadConstraint, WhenUnsatisfiable};
use berth_model::selector::{validate_key, Labels, Selector};
use berth_model::taints::first_untolerated_hard;
use berth_model::{NodeInfo, NodeSpec, PodInfo};

use super::node_affinity::pod_matches_node;

/// Plugin name.
pub const NAME: &str = "PodTopologySpread";
/// Filter reason when placing the pod on the node would exceed a maxSkew.
pub const REASON_CONSTRAINTS: &str = "node(s) didn't match pod topology spread constraints";
/// Filter reason when the node lacks a constraint's topology key.
pub const REASON_MISSING_LABEL: &str = "node(s) didn't match pod topology spread constraints (missing required label)";
/// The hostname label: per-node domains, counted at Score time.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// The zone label.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// One entry of `defaultConstraints`: a v1.TopologySpreadConstraint, which
/// must not name a labelSelector. Fields default to their zero values so that
/// validation, not decoding, reports what is missing.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultConstraint {
    /// maxSkew.
    #[serde(default)]
    pub max_skew: i32,
    /// topologyKey.
    #[serde(default)]
    pub topology_key: String,
    /// whenUnsatisfiable.
    #[serde(default)]
    pub when_unsatisfiable: String,
    /// labelSelector: forbidden here, kept to report it.
    #[serde(default)]
    pub label_selector: Option<serde_json::Value>,
    /// minDomains.
    #[serde(default)]
    pub min_domains: Option<i32>,
    /// nodeAffinityPolicy (Honor when unset).
    #[serde(default)]
    pub node_affinity_policy: Option<String>,
    /// nodeTaintsPolicy (Ignore when unset).
    #[serde(default)]
    pub node_taints_policy: Option<String>,
    /// matchLabelKeys (meaningless without a selector; accepted).
    #[serde(default)]
    pub match_label_keys: Option<Vec<String>>,
}

/// PodTopologySpreadArgs.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// Constraints for pods that have none (only with `defaultingType: List`).
    #[serde(default)]
    pub default_constraints: Option<Vec<DefaultConstraint>>,
    /// `System` (the default) or `List`.
    #[serde(default)]
    pub defaulting_type: Option<String>,
    /// apiVersion/kind are accepted and ignored.
    #[serde(default)]
    pub api_version: Option<String>,
    /// See `api_version`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// Topology spread constraints.
#[derive(Debug, Default)]
pub struct PodTopologySpread {
    /// Default constraints, compiled with a selector matching nothing (replaced per pod).
    defaults: Vec<SpreadConstraint>,
    /// defaultingType is System.
    system_defaulted: bool,
    /// Node domains per topology key, reused across cycles.
    cache: Mutex<HashMap<String, KeyDomains>>,
    /// Matching pods per domain, kept up to date across cycles, per
    /// (namespace, selector, topology key, keys a node must have).
    tallies: Mutex<HashMap<String, Tally>>,
}

fn policy(v: Option<&str>, default: InclusionPolicy, path: &str) -> Result<InclusionPolicy, String> {
    match v {
        None => Ok(default),
        Some("Honor") => Ok(InclusionPolicy::Honor),
        Some("Ignore") => Ok(InclusionPolicy::Ignore),
        Some(o) => Err(format!("{path}: unsupported value {o:?} (Honor or Ignore)")),
    }
}

/// upstream's system default constraints.
fn system_defaults() -> Vec<SpreadConstraint> {
    let mk = |key: &str, skew: i64| SpreadConstraint {
        max_skew: skew,
        topology_key: key.into(),
        when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
        selector: Selector::nothing(),
        min_domains: 1,
        node_affinity_policy: InclusionPolicy::Honor,
        node_taints_policy: InclusionPolicy::Ignore,
    };
    vec![mk(LABEL_HOSTNAME, 3), mk(LABEL_ZONE, 5)]
}

impl PodTopologySpread {
    /// Builds the plugin, validating its args as upstream's
    /// `ValidatePodTopologySpreadArgs` does; errors name the field.
    pub fn new(args: Args) -> Result<Self, String> {
        let list = args.default_constraints.unwrap_or_default();
        let system = match args.defaulting_type.as_deref() {
            None | Some("System") => true,
            Some("List") => false,
            Some(o) => return Err(format!("defaultingType: unsupported value {o:?} (System or List)")),
        };
        if system && !list.is_empty() {
            return Err("defaultingType: \"System\": invalid when .defaultConstraints are not empty".into());
        }
        let mut defaults = Vec::with_capacity(list.len());
        for (i, c) in list.iter().enumerate() {
            let p = format!("defaultConstraints[{i}]");
            if c.max_skew <= 0 {
                return Err(format!("{p}.maxSkew: must be greater than zero, got {}", c.max_skew));
            }
            if c.topology_key.is_empty() {
                return Err(format!("{p}.topologyKey: required value"));
            }
            validate_key(&c.topology_key).map_err(|e| format!("{p}.topologyKey: {e}"))?;
            let when = match c.when_unsatisfiable.as_str() {
                "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
                "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
                o => return Err(format!("{p}.whenUnsatisfiable: unsupported value {o:?} (DoNotSchedule or ScheduleAnyway)")),
            };
            if c.label_selector.is_some() {
                return Err(format!("{p}.labelSelector: forbidden: constraint must not define a selector, as they deduced for each pod"));
            }
            if list[..i].iter().any(|o| o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable) {
                return Err(format!("{p}: duplicate value {{{}, {}}}", c.topology_key, c.when_unsatisfiable));
            }
            let min_domains = match c.min_domains {
                None => 1,
                Some(m) if m <= 0 => return Err(format!("{p}.minDomains: must be greater than zero, got {m}")),
                Some(m) => i64::from(m),
            };
            defaults.push(SpreadConstraint {
                max_skew: i64::from(c.max_skew),
                topology_key: c.topology_key.clone(),
                when_unsatisfiable: when,
                selector: Selector::nothing(),
                min_domains,
                node_affinity_policy: policy(c.node_affinity_policy.as_deref(), InclusionPolicy::Honor, &format!("{p}.nodeAffinityPolicy"))?,
                node_taints_policy: policy(c.node_taints_policy.as_deref(), InclusionPolicy::Ignore, &format!("{p}.nodeTaintsPolicy"))?,
            });
        }
        if system {
            defaults = system_defaults();
        }
        Ok(PodTopologySpread { defaults, system_defaulted: system, cache: Mutex::default(), tallies: Mutex::default() })
    }

    /// The pod's constraints of one kind, or the default ones when the pod has
    /// none (upstream `buildDefaultConstraints`).
    fn constraints(&self, pod: &PodInfo, when: WhenUnsatisfiable, snap: &Snapshot) -> Vec<SpreadConstraint> {
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

/// A topology key's domain ids (value → id) and each snapshot node's id.
type Domains = (Arc<HashMap<String, u32>>, Vec<u32>);

/// Marks a node that lacks the topology key (or, as a counting slot, a node that does not count).
const MISSING: u32 = u32::MAX;

/// A value the domain ids do not know (its count is 0).
const UNKNOWN: u32 = u32::MAX - 1;

/// Each node's domain for one topology key, kept across cycles so that a
/// rebuild reads no node labels: an entry is valid while the snapshot holds
/// the very same `NodeSpec` (node updates replace it).
#[derive(Debug, Default)]
struct KeyDomains {
    /// Topology value → domain id; ids are never reused.
    ids: Arc<HashMap<String, u32>>,
    /// By node index: the spec the entry was computed from and its domain id.
    nodes: Vec<(Option<Arc<NodeSpec>>, u32)>,
}

impl PodTopologySpread {
    /// The domain ids of `key` (value → id) and each snapshot node's id (MISSING without the key).
    fn node_domains(&self, key: &str, snap: &Snapshot) -> Domains {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if !cache.contains_key(key) {
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
fn count_matching(node: &NodeInfo, sel: &Selector, ns: &str) -> i64 {
    node.pods.iter().filter(|p| !p.terminating && p.namespace == ns && sel.matches(&p.labels)).count() as i64
}

/// The snapshot's nodes as one topology key sees them, for one set of keys a
/// node must have to count: rebuilt only when nodes are added, removed or
/// replaced, and shared read-only with the cycle states, so that a cycle
/// finds a node's domain by its index.
#[derive(Debug, Default)]
struct Layout {
    /// Topology value → domain id (slots `0..ids.len()`).
    ids: Arc<HashMap<String, u32>>,
    /// By node index: the node object read. Held, so that a node object
    /// freed since is never mistaken for a new one at the same address.
    specs: Vec<Arc<NodeSpec>>,
    /// By node index: the domain of the node's value of the key, MISSING without it.
    dom: Vec<u32>,
    /// By node index: the slot the node counts in: its domain, or for a
    /// node without the key the domain of the empty value (upstream reads a
    /// missing label as "") when such nodes count; MISSING when the node
    /// does not count (it lacks a required key).
    slot: Vec<u32>,
    /// By slot: some counted node lies there.
    present: Vec<bool>,
    /// Number of present slots.
    domains: i64,
}

impl Layout {
    /// Counting slots: every domain id and one past them for the empty value.
    fn slots(&self) -> usize {
        self.ids.len() + 1
    }

    /// The slot node `i` counts in, MISSING when it does not count.
    fn slot(&self, i: usize) -> u32 {
        self.slot.get(i).copied().unwrap_or(MISSING)
    }

    /// Is `node` the very node object this layout read at its index?
    fn knows(&self, node: &NodeInfo) -> bool {
        self.specs.get(node.index).is_some_and(|s| Arc::ptr_eq(s, &node.node))
    }

    /// The node's domain: from the layout when it knows the node, else from
    /// its labels (UNKNOWN for a value no node had when the layout was built).
    fn domain_of(&self, node: &NodeInfo, key: &str) -> u32 {
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
struct Tally {
    /// Where the snapshot stood when the counts were last brought up to date.
    mark: Option<JournalMark>,
    layout: Arc<Layout>,
    /// By node index: the node state (generation) counted.
    gens: Vec<u64>,
    /// By node index: matching pods on the node (every node, counted or not).
    per_node: Arc<Vec<i64>>,
    /// By slot: matching pods on the counted nodes.
    sums: Vec<i64>,
}

/// What identifies a tally: the pods counted (namespace, selector) and the
/// nodes (topology key, keys a node must have, missing key read as "").
struct TallyKey<'a> {
    ns: &'a str,
    sel: &'a Selector,
    key: &'a str,
    required: &'a [&'a str],
    missing_as_empty: bool,
}

impl TallyKey<'_> {
    fn text(&self) -> String {
        format!("{}\u{0}{:?}\u{0}{}\u{0}{:?}\u{0}{}", self.ns, self.sel, self.key, self.required, self.missing_as_empty)
    }
}

impl Tally {
    /// Brings the counts up to `snap`.
    fn sync(&mut self, pl: &PodTopologySpread, k: &TallyKey, snap: &Snapshot) {
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
    fn recount(&mut self, i: usize, node: &NodeInfo, k: &TallyKey) {
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
    fn rebuild(&mut self, pl: &PodTopologySpread, k: &TallyKey, snap: &Snapshot) {
        let (ids, dom) = pl.node_domains(k.key, snap);
        let others: Vec<Vec<u32>> = k.required.iter().filter(|r| **r != k.key).map(|r| pl.node_domains(r, snap).1).collect();
        let own_required = k.required.contains(&k.key);
        let empty_slot = if k.missing_as_empty { ids.get("").copied().unwrap_or(ids.len() as u32) } else { MISSING };
        let slot: Vec<u32> = (0..snap.nodes.len())
            .map(|i| {
                let counts = (!own_required || dom[i] != MISSING) && others.iter().all(|o| o[i] != MISSING);
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
    fn with_tally<R>(&self, k: &TallyKey, snap: &Snapshot, f: impl FnOnce(&Tally) -> R) -> R {
        let text = k.text();
        let mut tallies = self.tallies.lock().unwrap_or_else(PoisonError::into_inner);
        if tallies.len() > 256 && !tallies.contains_key(&text) {
            tallies.clear();
        }
        let t = tallies.entry(text).or_default();
        t.sync(self, k, snap);
        f(t)
    }
}

/// Does the constraint count every node whatever the pod's node affinity and
/// tolerations (so PreFilter/PreScore need not look at each node)?
fn admits_every_node(pod: &PodInfo, c: &SpreadConstraint) -> bool {
    let affinity = c.node_affinity_policy == InclusionPolicy::Ignore || (pod.node_selector.is_none() && pod.required_node_affinity.is_none());
    affinity && c.node_taints_policy == InclusionPolicy::Ignore
}

/// Per node, the inclusion policies evaluated lazily and at most once.
struct Inclusion<'a> {
    pod: &'a PodInfo,
    node: &'a NodeInfo,
    affinity: Option<bool>,
    taints: Option<bool>,
}

impl<'a> Inclusion<'a> {
    fn new(pod: &'a PodInfo, node: &'a NodeInfo) -> Self {
        Inclusion { pod, node, affinity: None, taints: None }
    }

    /// Does the node count for this constraint under its inclusion policies?
    fn admits(&mut self, c: &SpreadConstraint) -> bool {
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

/// What PreFilter computed that never changes within the cycle.
#[derive(Debug)]
struct HardConstraint {
    c: SpreadConstraint,
    /// The incoming pod matches the constraint's selector.
    self_match: bool,
    /// The nodes' domains (counted nodes have every constraint's key).
    layout: Arc<Layout>,
}

/// Per-cycle counts of one hard constraint.
#[derive(Clone, Debug)]
struct Counts {
    /// Matching pods per domain id (0 for domains not present).
    counts: Vec<i64>,
    /// Domains of nodes that pass the inclusion policies and have every key.
    present: Vec<bool>,
    /// Number of present domains.
    domains: i64,
    /// Smallest count over present domains (i64::MAX when there is none).
    min: i64,
}

impl Counts {
    fn recompute_min(&mut self) {
        self.min = self.counts.iter().zip(&self.present).filter(|(_, p)| **p).map(|(c, _)| *c).min().unwrap_or(i64::MAX);
    }

    /// Matching pods of domain `d` (0 for a domain not present or unknown).
    fn count(&self, d: u32) -> i64 {
        let d = d as usize;
        if self.present.get(d).copied().unwrap_or(false) { self.counts[d] } else { 0 }
    }
}

/// One hard constraint's Filter table: each node's domain, whether each
/// domain is within maxSkew, and whether a domain unknown to it would be.
type DomainVerdicts<'a> = (&'a [u32], Vec<bool>, bool);

/// Why node `i` fails by the tables of every hard constraint: None when it
/// passes, else the first failing constraint's: true for a missing key
/// (unresolvable), false for a domain over maxSkew.
fn rejection(tables: &[DomainVerdicts], i: usize) -> Option<bool> {
    for (dom, ok, ok_unknown) in tables {
        let d = dom[i];
        if d == MISSING {
            return Some(true);
        }
        if !ok.get(d as usize).copied().unwrap_or(*ok_unknown) {
            return Some(false);
        }
    }
    None
}

/// PreFilter state: matching pods per domain and the global minimum, per
/// hard constraint. Cloned per nominated-pod and preemption trial, so the
/// fixed part is shared.
///
/// The minimum is kept exact across AddPod/RemovePod. Upstream tracks only two
/// "critical paths", which can overstate the minimum after several AddPods
/// when more than two domains tie for it (and which ones it keeps depends on
/// Go's map order); where its two paths are right, both agree.
#[derive(Clone, Debug)]
struct PreFilterState {
    fixed: Arc<Vec<HardConstraint>>,
    counts: Vec<Counts>,
    /// The snapshot's journal when the layouts were read: while the snapshot
    /// can say what changed since, its node indexes are the layouts' ones.
    mark: JournalMark,
}

impl PreFilterState {
    /// Per constraint: each node's domain, and whether each domain (then an
    /// unknown one) is within maxSkew; None unless the layouts still hold
    /// for `snap` (nothing changed since PreFilter).
    fn domain_verdicts<'a>(&'a self, snap: &Snapshot) -> Option<Vec<DomainVerdicts<'a>>> {
        if !same_nodes(snap, self.mark, false) || self.fixed.iter().any(|f| f.layout.dom.len() != snap.nodes.len()) {
            return None;
        }
        let tables = self
            .fixed
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let limit = f.c.max_skew - i64::from(f.self_match) + self.min_match(i);
                let k = &self.counts[i];
                let ok = (0..k.counts.len()).map(|d| k.count(d as u32) <= limit).collect();
                (f.layout.dom.as_slice(), ok, 0 <= limit)
            })
            .collect();
        Some(tables)
    }

    /// The global minimum of constraint `i`, with minDomains applied.
    fn min_match(&self, i: usize) -> i64 {
        let c = &self.counts[i];
        if c.domains < self.fixed[i].c.min_domains { 0 } else { c.min }
    }

    /// Filter of one node given each constraint's domain for it.
    fn verdict(&self, dom: impl Fn(usize, &HardConstraint) -> u32) -> Status {
        for (i, f) in self.fixed.iter().enumerate() {
            let d = dom(i, f);
            if d == MISSING {
                return Status::unresolvable(REASON_MISSING_LABEL);
            }
            if self.counts[i].count(d) + i64::from(f.self_match) - self.min_match(i) > f.c.max_skew {
                return Status::unschedulable(REASON_CONSTRAINTS);
            }
        }
        Status::success()
    }

    /// Counts (delta 1) or uncounts (delta -1) `other` on `node` (upstream
    /// `updateWithPod`, which, unlike PreFilter, does not look at deletionTimestamp).
    fn update(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64) {
        if other.namespace != pod.namespace {
            return;
        }
        let labels = &node.node.labels;
        if !self.fixed.iter().all(|f| labels.contains_key(&f.c.topology_key)) {
            return;
        }
        let mut inc = Inclusion::new(pod, node);
        let fixed = Arc::clone(&self.fixed);
        for (i, f) in fixed.iter().enumerate() {
            if !f.c.selector.matches(&other.labels) || !inc.admits(&f.c) {
                continue;
            }
            // Every value of a snapshot node has an id.
            let Some(&d) = labels.get(&f.c.topology_key).and_then(|v| f.layout.ids.get(v)) else { continue };
            let c = &mut self.counts[i];
            let d = d as usize;
            if d >= c.counts.len() {
                continue;
            }
            if !c.present[d] {
                // As upstream, a domain first seen here becomes one.
                c.present[d] = true;
                c.domains += 1;
                c.counts[d] = 0;
            }
            let old = c.counts[d];
            let new = old + delta;
            c.counts[d] = new;
            if new < c.min {
                c.min = new;
            } else if old == c.min && new > old {
                c.recompute_min();
            }
        }
    }
}

/// Do the snapshot's node indexes still mean what they meant at `mark`
/// (and, with `unchanged`, has no node's pods changed either)?
/// NormalizeScore for one constraint whose key is not the hostname, with
/// nodes missing the key ignored, while the snapshot is the one PreScore
/// read: a node's raw score is its domain's, so each domain present among
/// the scored nodes is normalized once and every node takes its domain's
/// value. False (and `scores` untouched) when that does not hold, or when a
/// raw score is not its domain's (then the caller normalizes node by node).
fn normalize_by_domain(s: &PreScoreState, scores: &mut [NodeScore]) -> bool {
    let [sc] = s.constraints.as_slice() else { return false };
    if sc.hostname {
        return false;
    }
    let slot = sc.layout.slot.as_slice();
    // Per domain: its raw score when a scored node is in it, else ABSENT
    // (no raw score is negative). Flat tables, so that the pass over the
    // nodes is a few loads, a compare and a store each.
    const ABSENT: i64 = -1;
    let raw: Vec<i64> = sc.counts.iter().enumerate().map(|(d, c)| if c.is_some() { sc.domain_part(d as u32).round() as i64 } else { ABSENT }).collect();
    // The domains of the scored nodes (min and max are taken over them):
    // PreScore's nodes are the usual ones, so their domains are assumed and
    // every node normalized in the same pass that checks its raw score; the
    // domains actually seen are compared after.
    let bounds = |present: &dyn Fn(usize) -> bool| {
        let seen = || raw.iter().enumerate().filter(|&(d, &r)| r != ABSENT && present(d)).map(|(_, &r)| r);
        let (min, max) = (seen().min().unwrap_or(0), seen().max().unwrap_or(0));
        raw.iter().enumerate().map(|(d, &r)| if r == ABSENT || !present(d) { 0 } else if max == 0 { MAX_NODE_SCORE } else { MAX_NODE_SCORE * (max + min - r) / max }).collect::<Vec<i64>>()
    };
    // Per domain: (raw, normalized, seen among the scored nodes).
    let mut table: Vec<(i64, i64, bool)> = raw.iter().zip(bounds(&|_| true)).map(|(&r, v)| (r, v, false)).collect();
    let mut done = 0;
    for ns in scores.iter_mut() {
        // A node past the snapshot reads as UNKNOWN: neither a slot nor MISSING.
        let d = slot.get(ns.node).copied().unwrap_or(UNKNOWN);
        match table.get_mut(d as usize) {
            Some((r, v, seen)) if *r != ABSENT && *r == ns.score => {
                *seen = true;
                ns.score = *v;
            }
            // Missing the key: ignored, whatever its raw score.
            None if d == MISSING => ns.score = 0,
            _ => break,
        }
        done += 1;
    }
    let raw_of = |ns: &NodeScore| slot.get(ns.node).and_then(|&d| raw.get(d as usize)).copied();
    if done < scores.len() {
        // Not a raw score by domain: put back the ones overwritten (an
        // ignored node's raw score does not matter, it normalizes to 0).
        for ns in scores[..done].iter_mut() {
            ns.score = raw_of(ns).unwrap_or(0);
        }
        return false;
    }
    if table.iter().any(|&(r, _, seen)| r != ABSENT && !seen) {
        // Fewer domains than PreScore's: min and max over those seen.
        let norm = bounds(&|d| table.get(d).is_some_and(|t| t.2));
        for ns in scores.iter_mut() {
            let d = slot.get(ns.node).copied().unwrap_or(MISSING);
            ns.score = norm.get(d as usize).copied().unwrap_or(0);
        }
    }
    true
}

/// NormalizeScore: how many distinct raw scores are normalized once and
/// looked up.
const SEEN_SCORES: usize = 16;

fn same_nodes(snap: &Snapshot, mark: JournalMark, unchanged: bool) -> bool {
    let mut changed = Vec::new();
    snap.changed_since(mark, &mut changed).is_some() && (!unchanged || changed.is_empty())
}

/// One soft constraint with its counts and weight.
#[derive(Debug)]
struct SoftConstraint {
    c: SpreadConstraint,
    /// The key is the hostname label: counted per node at Score time.
    hostname: bool,
    /// The nodes' domains and which nodes count.
    layout: Arc<Layout>,
    /// Matching pods per node index at PreScore (hostname keys).
    per_node: Arc<Vec<i64>>,
    /// Matching pods per slot; None for domains of no scored node.
    counts: Vec<Option<i64>>,
    /// log(number of domains + 2).
    weight: f64,
}

impl SoftConstraint {
    /// The constraint's part of a node's raw score given its matching pods.
    fn part(&self, cnt: i64) -> f64 {
        cnt as f64 * self.weight + (self.c.max_skew - 1) as f64
    }

    /// The part of a node in domain `d` (not hostname).
    fn domain_part(&self, d: u32) -> f64 {
        self.part(self.counts.get(d as usize).copied().flatten().unwrap_or(0))
    }
}

/// PreScore state.
#[derive(Clone, Debug)]
struct PreScoreState {
    constraints: Arc<Vec<SoftConstraint>>,
    /// Nodes missing a topology key are ignored (always, except for system defaults).
    require_all: bool,
    /// The snapshot's journal at PreScore (see `PreFilterState::mark`).
    mark: JournalMark,
}

impl PreScoreState {
    fn ignored(&self, labels: &Labels) -> bool {
        self.require_all && !self.constraints.iter().all(|s| labels.contains_key(&s.c.topology_key))
    }

    /// Is snapshot node `i` ignored, by the layouts (valid for the snapshot)?
    /// With require_all, a node counts in every layout or in none.
    fn ignored_at(&self, i: usize) -> bool {
        self.require_all && self.constraints.first().is_some_and(|sc| sc.layout.slot(i) == MISSING)
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> Points {
        Points::PRE_FILTER.or(Points::FILTER).or(Points::PRE_SCORE).or(Points::SCORE)
    }
    fn events(&self) -> Events {
        Events::NODE_ADD
            .or(Events::NODE_LABEL)
            .or(Events::NODE_TAINT)
            .or(Events::POD_ADD)
            .or(Events::POD_DELETE)
            .or(Events::POD_LABEL)
    }

    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        let cs = self.constraints(pod, WhenUnsatisfiable::DoNotSchedule, snap);
        if cs.is_empty() {
            return (Status::skip(), None);
        }
        // Nodes count when they have every constraint's key.
        let keys: Vec<&str> = cs.iter().map(|c| c.topology_key.as_str()).collect();
        let every_node = cs.iter().all(|c| admits_every_node(pod, c));
        let mut layouts = Vec::with_capacity(cs.len());
        let mut counts = Vec::with_capacity(cs.len());
        let mut per_node = Vec::new();
        for c in &cs {
            let k = TallyKey { ns: &pod.namespace, sel: &c.selector, key: &c.topology_key, required: &keys, missing_as_empty: false };
            self.with_tally(&k, snap, |t| {
                let l = &t.layout;
                if every_node {
                    // Every node with all the keys counts: the tally's sums are the counts.
                    counts.push(Counts { counts: t.sums.clone(), present: l.present.clone(), domains: l.domains, min: i64::MAX });
                } else {
                    counts.push(Counts { counts: vec![0; l.slots()], present: vec![false; l.slots()], domains: 0, min: i64::MAX });
                    per_node.push(Arc::clone(&t.per_node));
                }
                layouts.push(Arc::clone(l));
            });
        }
        if !every_node {
            for (ni, node) in snap.nodes.iter().enumerate() {
                // Every layout has the same counted nodes (those with every key).
                if layouts.iter().any(|l| l.slot(ni) == MISSING) {
                    continue;
                }
                let mut inc = Inclusion::new(pod, node);
                for (i, c) in cs.iter().enumerate() {
                    if !inc.admits(c) {
                        continue;
                    }
                    let d = layouts[i].dom[ni] as usize;
                    let k = &mut counts[i];
                    if !k.present[d] {
                        k.present[d] = true;
                        k.domains += 1;
                    }
                    k.counts[d] += per_node[i][ni];
                }
            }
        }
        for k in counts.iter_mut() {
            k.recompute_min();
        }
        let fixed = cs
            .into_iter()
            .zip(layouts)
            .map(|(c, layout)| HardConstraint { self_match: c.selector.matches(&pod.labels), c, layout })
            .collect();
        state.insert(PreFilterState { fixed: Arc::new(fixed), counts, mark: snap.journal_mark() });
        (Status::success(), None)
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &Arc<PodInfo>, node: &NodeInfo, _: &Snapshot) -> Status {
        match state.get_mut::<PreFilterState>() {
            Some(s) => {
                s.update(pod, added, node, 1);
                Status::success()
            }
            None => Status::error("PodTopologySpread: PreFilter state missing"),
        }
    }

    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, removed: &Arc<PodInfo>, node: &NodeInfo, _: &Snapshot) -> Status {
        match state.get_mut::<PreFilterState>() {
            Some(s) => {
                s.update(pod, removed, node, -1);
                Status::success()
            }
            None => Status::error("PodTopologySpread: PreFilter state missing"),
        }
    }

    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<PreFilterState>() else {
            return Status::error("PodTopologySpread: PreFilter state missing");
        };
        s.verdict(|_, f| f.layout.domain_of(node, &f.c.topology_key))
    }

    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        let Some(tables) = state.get::<PreFilterState>().and_then(|s| s.domain_verdicts(snap)) else {
            return filter_each(self, state, pod, snap, nodes, rejected, |_| true);
        };
        nodes.retain(|&i| match rejection(&tables, i) {
            None => true,
            Some(missing) => {
                rejected.push((i, if missing { Status::unresolvable(REASON_MISSING_LABEL) } else { Status::unschedulable(REASON_CONSTRAINTS) }));
                false
            }
        });
    }

    fn retain_feasible(&self, state: &CycleState, _: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>) -> bool {
        let Some(tables) = state.get::<PreFilterState>().and_then(|s| s.domain_verdicts(snap)) else { return false };
        // As filter_nodes, without the statuses.
        nodes.retain(|&i| rejection(&tables, i).is_none());
        true
    }

    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[usize], snap: &Snapshot) -> Status {
        if snap.nodes.is_empty() {
            return Status::skip();
        }
        let cs = self.constraints(pod, WhenUnsatisfiable::ScheduleAnyway, snap);
        if cs.is_empty() {
            return Status::skip();
        }
        // Nodes missing a key are ignored, except under system defaults,
        // where a node without the key counts in the domain of the empty
        // value (upstream reads the missing label as "").
        let require_all = !pod.spread_constraints.is_empty() || !self.system_defaulted;
        let owned: Vec<String> = if require_all { cs.iter().map(|c| c.topology_key.clone()).collect() } else { Vec::new() };
        let keys: Vec<&str> = owned.iter().map(String::as_str).collect();
        let every_node = cs.iter().all(|c| admits_every_node(pod, c));
        let mut soft = Vec::with_capacity(cs.len());
        let mut sums = Vec::with_capacity(cs.len());
        for c in cs {
            let k = TallyKey { ns: &pod.namespace, sel: &c.selector, key: &c.topology_key, required: &keys, missing_as_empty: !require_all };
            let (layout, per_node, s) = self.with_tally(&k, snap, |t| (Arc::clone(&t.layout), Arc::clone(&t.per_node), if every_node { t.sums.clone() } else { Vec::new() }));
            sums.push(s);
            soft.push(SoftConstraint {
                hostname: c.topology_key == LABEL_HOSTNAME,
                counts: vec![None; layout.slots()],
                c,
                layout,
                per_node,
                weight: 0.0,
            });
        }
        // Domains of the scored nodes; nodes missing a key are ignored. With
        // require_all a node counts in every layout or in none; else in all.
        let n = snap.nodes.len();
        let first = Arc::clone(&soft[0].layout);
        let counted = |ni: usize| !require_all || first.slot(ni) != MISSING;
        let mut seen: Vec<Vec<bool>> = soft.iter().map(|s| if s.hostname { Vec::new() } else { vec![false; s.counts.len()] }).collect();
        // The nodes ignored (with require_all: missing from the first
        // layout) are counted in the same pass as the first layout's domains.
        let mut ignored = 0;
        let mut ignored_counted = !require_all;
        // PreScore's nodes are distinct snapshot indexes: as many as the
        // snapshot has are all of them.
        let every_scored = nodes.len() == n;
        for (k, (s, seen)) in soft.iter().zip(seen.iter_mut()).enumerate().filter(|(_, (s, _))| !s.hostname) {
            let slot = s.layout.slot.as_slice();
            let count_missing = require_all && k == 0;
            if every_scored && slot.len() == n && s.layout.present.len() == seen.len() {
                // Every node scored: the domains seen are those some node counts in.
                seen.copy_from_slice(&s.layout.present);
                if count_missing {
                    ignored += slot.iter().filter(|&&d| d == MISSING).count();
                }
                ignored_counted |= count_missing;
                continue;
            }
            for &ni in nodes {
                match slot.get(ni) {
                    Some(&d) if d != MISSING => {
                        if let Some(x) = seen.get_mut(d as usize) {
                            *x = true;
                        }
                    }
                    _ if count_missing && ni < n => ignored += 1,
                    _ => {}
                }
            }
            ignored_counted |= count_missing;
        }
        if !ignored_counted {
            ignored = nodes.iter().filter(|&&ni| ni < n && first.slot(ni) == MISSING).count();
        }
        for ((s, seen), sums) in soft.iter_mut().zip(&seen).zip(&sums) {
            if s.hostname {
                s.weight = ((nodes.len().saturating_sub(ignored) + 2) as f64).ln();
                continue;
            }
            for (d, _) in seen.iter().enumerate().filter(|(_, x)| **x) {
                s.counts[d] = Some(if every_node { sums.get(d).copied().unwrap_or(0) } else { 0 });
            }
            s.weight = ((s.counts.iter().filter(|c| c.is_some()).count() + 2) as f64).ln();
        }
        // Not every node counts: matching pods per domain over the nodes that do.
        if !every_node && soft.iter().any(|s| !s.hostname) {
            for (ni, node) in snap.nodes.iter().enumerate() {
                if node.pods.is_empty() || !counted(ni) {
                    continue;
                }
                let mut inc = Inclusion::new(pod, node);
                for s in soft.iter_mut().filter(|s| !s.hostname) {
                    let d = s.layout.slot(ni) as usize;
                    if s.counts.get(d).is_none_or(|c| c.is_none()) || !inc.admits(&s.c) {
                        continue;
                    }
                    let m = s.per_node[ni];
                    if let Some(c) = s.counts[d].as_mut() {
                        *c += m;
                    }
                }
            }
        }
        state.insert(PreScoreState { constraints: Arc::new(soft), require_all, mark: snap.journal_mark() });
        Status::success()
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.get::<PreScoreState>() else {
            return Err(Status::error("PodTopologySpread: PreScore state missing"));
        };
        if s.ignored(&node.node.labels) {
            return Ok(0);
        }
        let mut score = 0f64;
        for sc in s.constraints.iter() {
            let d = sc.layout.domain_of(node, &sc.c.topology_key);
            if d == MISSING {
                continue;
            }
            score += if sc.hostname { sc.part(count_matching(node, &sc.c.selector, &pod.namespace)) } else { sc.domain_part(d) };
        }
        Ok(score.round() as i64)
    }

    fn score_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
        let Some(s) = state.get::<PreScoreState>() else {
            return Err(Status::error("PodTopologySpread: PreScore state missing"));
        };
        let n = snap.nodes.len();
        // The layouts and the per-node counts hold for this snapshot only
        // while nothing changed since PreScore.
        if !same_nodes(snap, s.mark, true) || s.constraints.iter().any(|sc| sc.layout.dom.len() != n || sc.per_node.len() != n) || scores.iter().any(|ns| ns.node >= n) {
            for ns in scores.iter_mut() {
                ns.score = self.score(state, pod, &snap.nodes[ns.node])?;
            }
            return Ok(());
        }
        // Each domain's part of the raw score, per constraint.
        let parts: Vec<Vec<f64>> = s.constraints.iter().map(|sc| if sc.hostname { Vec::new() } else { (0..sc.counts.len()).map(|d| sc.domain_part(d as u32)).collect() }).collect();
        if let ([sc], [part]) = (s.constraints.as_slice(), parts.as_slice())
            && !sc.hostname
        {
            // One constraint: each domain's score, rounded once. With
            // require_all a node that does not count is ignored (0); else a
            // node without the key gets no part (0). Either way its index
            // (MISSING) is past the table.
            let table: Vec<i64> = part.iter().map(|p| p.round() as i64).collect();
            let by = if s.require_all { sc.layout.slot.as_slice() } else { sc.layout.dom.as_slice() };
            for ns in scores.iter_mut() {
                ns.score = by.get(ns.node).and_then(|&d| table.get(d as usize)).copied().unwrap_or(0);
            }
            return Ok(());
        }
        for ns in scores.iter_mut() {
            let i = ns.node;
            if s.ignored_at(i) {
                ns.score = 0;
                continue;
            }
            let mut score = 0f64;
            for (sc, part) in s.constraints.iter().zip(&parts) {
                let d = sc.layout.dom[i];
                if d == MISSING {
                    continue;
                }
                score += if sc.hostname { sc.part(sc.per_node[i]) } else { part.get(d as usize).copied().unwrap_or_else(|| sc.part(0)) };
            }
            ns.score = score.round() as i64;
        }
        Ok(())
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize_score(&self, state: &CycleState, _: &PodInfo, scores: &mut [NodeScore], snap: &Snapshot) -> Status {
        let Some(s) = state.get::<PreScoreState>() else {
            return Status::error("PodTopologySpread: PreScore state missing");
        };
        let n = snap.nodes.len();
        let by_layout = same_nodes(snap, s.mark, false) && s.constraints.iter().all(|sc| sc.layout.dom.len() == n);
        // With require_all, the nodes that count are the same in every layout.
        let counting = s.constraints.first().filter(|_| by_layout && s.require_all).map(|sc| sc.layout.slot.as_slice());
        let ignored = |i: usize| match snap.nodes.get(i) {
            None => true,
            Some(_) if by_layout => counting.is_some_and(|c| c[i] == MISSING),
            Some(node) => s.ignored(&node.node.labels),
        };
        if by_layout && s.require_all && normalize_by_domain(s, scores) {
            return Status::success();
        }
        // Which scored nodes count, each looked up once.
        let counts: Vec<bool> = match (by_layout, counting) {
            (true, Some(c)) => scores.iter().map(|ns| c.get(ns.node).is_some_and(|&d| d != MISSING)).collect(),
            (true, None) => scores.iter().map(|ns| ns.node < n).collect(),
            _ => scores.iter().map(|ns| !ignored(ns.node)).collect(),
        };
        let (mut min, mut max) = (i64::MAX, 0i64);
        for (ns, _) in scores.iter().zip(&counts).filter(|(_, c)| **c) {
            min = min.min(ns.score);
            max = max.max(ns.score);
        }
        let normalized = |raw: i64| if max == 0 { MAX_NODE_SCORE } else { MAX_NODE_SCORE * (max + min - raw) / max };
        // Raw scores take few values (one per domain): the first distinct
        // ones are normalized once and looked up (no division per node).
        let mut seen: Vec<(i64, i64)> = Vec::with_capacity(SEEN_SCORES);
        for (ns, counted) in scores.iter_mut().zip(counts) {
            ns.score = if !counted {
                0
            } else if let Some(&(_, v)) = seen.iter().find(|(raw, _)| *raw == ns.score) {
                v
            } else {
                let v = normalized(ns.score);
                if seen.len() < SEEN_SCORES {
                    seen.push((ns.score, v));
                }
                v
            };
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

    const DNS: &str = "DoNotSchedule";
    const SA: &str = "ScheduleAnyway";
    const HOST: &str = LABEL_HOSTNAME;

    /// name, incoming pod, nodes, bound pods, feasible nodes.
    type FilterCase = (&'static str, PodBuilder, Vec<NodeBuilder>, Vec<PodBuilder>, Vec<&'static str>);
    /// name, incoming pod, feasible nodes, other nodes, bound pods, scores of the feasible nodes.
    type ScoreCase = (&'static str, PodBuilder, Vec<NodeBuilder>, Vec<NodeBuilder>, Vec<PodBuilder>, Vec<i64>);

    /// A node without the hostname label.
    fn bare(name: &str) -> NodeBuilder {
        let mut n = node(name);
        if let Some(l) = n.node.metadata.labels.as_mut() {
            l.clear();
        }
        n
    }

    fn plugin() -> PodTopologySpread {
        PodTopologySpread::new(Args::default()).unwrap_or_default()
    }

    /// A node in a zone.
    fn zn(name: &str, zone: &str) -> NodeBuilder {
        node(name).label("zone", zone)
    }

    /// A bound pod labelled foo="".
    fn on(name: &str, n: &str) -> PodBuilder {
        pod(name).node(n).label("foo", "")
    }

    /// The incoming pod, labelled foo="".
    fn incoming() -> PodBuilder {
        pod("p").label("foo", "")
    }

    fn tsc(skew: i32, key: &str, when: &str, min_domains: Option<i32>, aff: Option<&str>, taints: Option<&str>) -> core::TopologySpreadConstraint {
        core::TopologySpreadConstraint {
            max_skew: skew,
            topology_key: key.into(),
            when_unsatisfiable: when.into(),
            label_selector: Some(selector(&[("foo", "")])),
            min_domains,
            node_affinity_policy: aff.map(Into::into),
            node_taints_policy: taints.map(Into::into),
            ..Default::default()
        }
    }

    /// Feasible node names after PreFilter and Filter.
    fn feasible(p: &PodBuilder, nodes: &[NodeBuilder], pods: &[PodBuilder]) -> Vec<String> {
        let pl = plugin();
        let snap = snapshot(nodes, pods);
        let p = p.info();
        let mut st = CycleState::new();
        let (s, _) = pl.pre_filter(&mut st, &p, &snap);
        if s.is_skip() {
            return snap.nodes.iter().map(|n| n.name().to_string()).collect();
        }
        snap.nodes.iter().filter(|n| pl.filter(&st, &p, n).is_success()).map(|n| n.name().to_string()).collect()
    }

    #[test]
    fn filter_table() {
        let zones = || vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2"), zn("node-y", "zone2")];
        let spread_2103 = || vec![on("a1", "node-a"), on("a2", "node-a"), on("b1", "node-b"), on("y1", "node-y"), on("y2", "node-y"), on("y3", "node-y")];
        let cases: Vec<FilterCase> = vec![
            ("no constraints: skip", pod("p"), zones(), vec![on("a1", "node-a")], vec!["node-a", "node-b", "node-x", "node-y"]),
            ("soft only: skip", incoming().spread(1, "zone", SA, &[("foo", "")]), zones(), spread_2103(), vec!["node-a", "node-b", "node-x", "node-y"]),
            ("no existing pods", incoming().spread(1, "zone", DNS, &[("foo", "")]), zones(), vec![], vec!["node-a", "node-b", "node-x", "node-y"]),
            ("zones 3/3 all fit", incoming().spread(1, "zone", DNS, &[("foo", "")]), zones(), vec![on("a1", "node-a"), on("b1", "node-b"), on("b2", "node-b"), on("x1", "node-x"), on("y1", "node-y"), on("y2", "node-y")], vec!["node-a", "node-b", "node-x", "node-y"]),
            ("zones 3/1: only zone2", incoming().spread(1, "zone", DNS, &[("foo", "")]), zones(), vec![on("a1", "node-a"), on("a2", "node-a"), on("b1", "node-b"), on("x1", "node-x")], vec!["node-x", "node-y"]),
            ("hosts 2/1/0/3: only node-x", incoming().spread(1, HOST, DNS, &[("foo", "")]), zones(), spread_2103(), vec!["node-x"]),
            ("hosts 2/1/0/3, maxSkew 2", incoming().spread(2, HOST, DNS, &[("foo", "")]), zones(), spread_2103(), vec!["node-b", "node-x"]),
            ("hosts 2/1/0/3, no self match", pod("p").spread(1, HOST, DNS, &[("foo", "")]), zones(), spread_2103(), vec!["node-b", "node-x"]),
            ("other namespace not counted", incoming().spread(1, HOST, DNS, &[("foo", "")]), zones(), vec![on("a1", "node-a").namespace("ns1"), on("b1", "node-b"), on("x1", "node-x"), on("y1", "node-y")], vec!["node-a"]),
            ("terminating not counted", incoming().spread(1, HOST, DNS, &[("foo", "")]), zones(), vec![on("a1", "node-a").terminating(), on("b1", "node-b"), on("x1", "node-x"), on("y1", "node-y")], vec!["node-a"]),
            ("missing zone label rejects node", incoming().spread(1, "zone", DNS, &[("foo", "")]), vec![zn("node-a", "zone1"), node("node-b")], vec![], vec!["node-a"]),
            ("node without all keys is not a domain", incoming().spread(1, "zone", DNS, &[("foo", "")]).spread(1, HOST, DNS, &[("foo", "")]), vec![zn("node-a", "zone1"), zn("node-x", "zone2").label(HOST, "")], vec![on("a1", "node-a")], vec!["node-x"]),
            ("two constraints both must hold", incoming().spread(1, "zone", DNS, &[("foo", "")]).spread(1, HOST, DNS, &[("foo", "")]), zones(), vec![on("a1", "node-a"), on("b1", "node-b"), on("x1", "node-x")], vec!["node-y"]),
            // minDomains 3 > 2 zones: the global minimum counts as 0.
            ("minDomains above domains", incoming().spread_constraint(tsc(1, "zone", DNS, Some(3), None, None)), zones(), vec![on("a1", "node-a"), on("x1", "node-x")], vec![]),
            ("minDomains met", incoming().spread_constraint(tsc(1, "zone", DNS, Some(2), None, None)), zones(), vec![on("a1", "node-a"), on("x1", "node-x")], vec!["node-a", "node-b", "node-x", "node-y"]),
            // nodeAffinityPolicy Honor: zone2 is not a domain (only zone1 nodes match), so the minimum
            // is zone1's count and node-a fits; node-x (count 0) too, NodeAffinity rejects it.
            ("affinity policy honor", incoming().node_selector("pool", "p").spread(1, "zone", DNS, &[("foo", "")]), vec![zn("node-a", "zone1").label("pool", "p"), zn("node-x", "zone2")], vec![on("a1", "node-a"), on("a2", "node-a")], vec!["node-a", "node-x"]),
            ("affinity policy ignore", incoming().node_selector("pool", "p").spread_constraint(tsc(1, "zone", DNS, None, Some("Ignore"), None)), vec![zn("node-a", "zone1").label("pool", "p"), zn("node-x", "zone2")], vec![on("a1", "node-a"), on("a2", "node-a")], vec!["node-x"]),
            ("taints policy ignore (default)", incoming().spread(1, "zone", DNS, &[("foo", "")]), vec![zn("node-a", "zone1"), zn("node-x", "zone2").taint("k", "v", "NoSchedule")], vec![on("a1", "node-a")], vec!["node-x"]),
            ("taints policy honor", incoming().spread_constraint(tsc(1, "zone", DNS, None, None, Some("Honor"))), vec![zn("node-a", "zone1"), zn("node-x", "zone2").taint("k", "v", "NoSchedule")], vec![on("a1", "node-a"), on("a2", "node-a")], vec!["node-a", "node-x"]),
            ("taints policy honor, tolerated", incoming().toleration("k", Some("v"), "NoSchedule").spread_constraint(tsc(1, "zone", DNS, None, None, Some("Honor"))), vec![zn("node-a", "zone1"), zn("node-x", "zone2").taint("k", "v", "NoSchedule")], vec![on("a1", "node-a"), on("a2", "node-a")], vec!["node-x"]),
        ];
        for (name, p, nodes, pods, want) in cases {
            assert_eq!(feasible(&p, &nodes, &pods), want, "{name}");
        }
    }

    #[test]
    fn filter_statuses() {
        let pl = plugin();
        let snap = snapshot(&[zn("node-a", "zone1"), node("node-b"), zn("node-x", "zone2")], &[on("a1", "node-a"), on("a2", "node-a")]);
        let p = incoming().spread(1, "zone", DNS, &[("foo", "")]).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        let s = pl.filter(&st, &p, &snap.nodes[0]);
        assert_eq!((s.code, s.message()), (Code::Unschedulable, REASON_CONSTRAINTS.to_string()));
        let s = pl.filter(&st, &p, &snap.nodes[1]);
        assert_eq!((s.code, s.message()), (Code::UnschedulableAndUnresolvable, REASON_MISSING_LABEL.to_string()));
        assert!(pl.filter(&st, &p, &snap.nodes[2]).is_success());
        assert_eq!(pl.filter(&CycleState::new(), &p, &snap.nodes[2]).code, Code::Error);
    }

    #[test]
    fn add_and_remove_pod() {
        let pl = plugin();
        let nodes = [node("node-a"), node("node-b"), node("node-c")];
        let snap = snapshot(&nodes, &[]);
        let p = incoming().spread(1, HOST, DNS, &[("foo", "")]).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        let fits = |st: &CycleState| -> Vec<bool> { snap.nodes.iter().map(|n| pl.filter(st, &p, n).is_success()).collect() };
        assert_eq!(fits(&st), vec![true, true, true]);
        // Adding on a and b leaves c at the minimum 0.
        let mut st2 = st.clone();
        for (i, name) in [(0, "x1"), (1, "x2")] {
            let added = on(name, snap.nodes[i].name()).info();
            assert!(pl.add_pod(&mut st2, &p, &added, &snap.nodes[i], &snap).is_success());
        }
        assert_eq!(fits(&st2), vec![false, false, true]);
        // The original state is untouched.
        assert_eq!(fits(&st), vec![true, true, true]);
        // Another on c: every domain at 1.
        let added = on("x3", "node-c").info();
        pl.add_pod(&mut st2, &p, &added, &snap.nodes[2], &snap);
        assert_eq!(fits(&st2), vec![true, true, true]);
        // Removing from a: a is the minimum again.
        let removed = on("x1", "node-a").info();
        pl.remove_pod(&mut st2, &p, &removed, &snap.nodes[0], &snap);
        assert_eq!(fits(&st2), vec![true, false, false]);
        // Pods of another namespace or not selected change nothing.
        for other in [on("o1", "node-a").namespace("other"), pod("o2").node("node-a").label("bar", "")] {
            pl.add_pod(&mut st2, &p, &other.info(), &snap.nodes[0], &snap);
            pl.add_pod(&mut st2, &p, &other.info(), &snap.nodes[0], &snap);
        }
        assert_eq!(fits(&st2), vec![true, false, false]);
    }

    #[test]
    fn add_pod_honors_inclusion_policies() {
        let pl = plugin();
        let nodes = [zn("node-a", "zone1").label("pool", "p"), zn("node-x", "zone2").label("pool", "p"), zn("node-z", "zone3")];
        let snap = snapshot(&nodes, &[]);
        let p = incoming().node_selector("pool", "p").spread(1, "zone", DNS, &[("foo", "")]).info();
        let mut st = CycleState::new();
        pl.pre_filter(&mut st, &p, &snap);
        // node-z does not match the pod's nodeSelector: a pod added there is not counted.
        pl.add_pod(&mut st, &p, &on("z1", "node-z").info(), &snap.nodes[2], &snap);
        assert!(pl.filter(&st, &p, &snap.nodes[0]).is_success());
        pl.add_pod(&mut st, &p, &on("a1", "node-a").info(), &snap.nodes[0], &snap);
        assert!(!pl.filter(&st, &p, &snap.nodes[0]).is_success());
        assert!(pl.filter(&st, &p, &snap.nodes[1]).is_success());
    }

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

    /// Normalized scores of the feasible `nodes` (the snapshot also holds `failed`).
    fn scores(p: &PodBuilder, nodes: &[NodeBuilder], failed: &[NodeBuilder], pods: &[PodBuilder]) -> Vec<i64> {
        let pl = plugin();
        let all: Vec<NodeBuilder> = nodes.iter().chain(failed).cloned().collect();
        let snap = snapshot(&all, pods);
        let p = p.info();
        let feasible: Vec<usize> = (0..nodes.len()).collect();
        let mut st = CycleState::new();
        let s = pl.pre_score(&mut st, &p, &feasible, &snap);
        if s.is_skip() {
            return vec![-1; nodes.len()];
        }
        let mut out: Vec<NodeScore> = feasible.iter().map(|&i| NodeScore { node: i, score: pl.score(&st, &p, &snap.nodes[i]).unwrap_or(-100) }).collect();
        assert!(pl.normalize_score(&st, &p, &mut out, &snap).is_success());
        out.iter().map(|s| s.score).collect()
    }

    #[test]
    fn score_table() {
        let hosts = |names: &[&str]| names.iter().map(|n| node(n)).collect::<Vec<_>>();
        let many = |spec: &[(&str, usize)]| {
            spec.iter().flat_map(|(n, k)| (0..*k).map(move |i| on(&format!("p-{n}{i}"), n))).collect::<Vec<_>>()
        };
        let foo = &[("foo", "")];
        let bar = &[("bar", "")];
        let cases: Vec<ScoreCase> = vec![
            ("no constraints: skip", incoming(), hosts(&["node-a", "node-b"]), vec![], many(&[("node-a", 1)]), vec![-1, -1]),
            ("hard only: skip", incoming().spread(1, HOST, DNS, foo), hosts(&["node-a", "node-b"]), vec![], many(&[("node-a", 1)]), vec![-1, -1]),
            ("no existing pods", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b"]), vec![], vec![], vec![100, 100]),
            ("only one candidate", incoming().spread(1, HOST, SA, foo), hosts(&["node-a"]), hosts(&["node-b"]), many(&[("node-a", 2), ("node-b", 1)]), vec![100]),
            ("same count everywhere", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b"]), vec![], many(&[("node-a", 1), ("node-b", 1)]), vec![100, 100]),
            ("2/1/0/3", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b", "node-c", "node-d"]), vec![], many(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]), vec![20, 60, 100, 0]),
            ("2/1/0/3 maxSkew 2", incoming().spread(2, HOST, SA, foo), hosts(&["node-a", "node-b", "node-c", "node-d"]), vec![], many(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]), vec![33, 66, 100, 16]),
            ("4/3/2/1 maxSkew 3", incoming().spread(3, HOST, SA, foo), hosts(&["node-a", "node-b", "node-c", "node-d"]), vec![], many(&[("node-a", 4), ("node-b", 3), ("node-c", 2), ("node-d", 1)]), vec![44, 66, 77, 100]),
            ("4/2/1/~3~", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b", "node-x"]), hosts(&["node-y"]), many(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]), vec![33, 83, 100]),
            ("4/?2?/1/~3~", incoming().spread(1, HOST, SA, foo), vec![node("node-a"), bare("node-b").label("n", "node-b"), node("node-x")], hosts(&["node-y"]), many(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]), vec![16, 0, 100]),
            ("zone, 4/2/1/~3~", incoming().spread(1, "zone", SA, foo), vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")], vec![zn("node-y", "zone2")], many(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]), vec![75, 75, 100]),
            ("zone+host, 2/~1~/2/~4~", incoming().spread(1, "zone", SA, foo).spread(1, HOST, SA, foo), vec![zn("node-a", "zone1"), zn("node-x", "zone2")], vec![zn("node-b", "zone1"), zn("node-y", "zone2")], many(&[("node-a", 2), ("node-b", 1), ("node-x", 2), ("node-y", 4)]), vec![100, 63]),
            (
                "zone+host, different selectors",
                incoming().label("bar", "").spread(1, "zone", SA, foo).spread(1, HOST, SA, bar),
                vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2"), zn("node-y", "zone2")],
                vec![],
                vec![on("p-a1", "node-a"), on("p-b1", "node-b").label("bar", ""), on("p-y1", "node-y"), pod("p-y2").node("node-y").label("bar", "")],
                vec![60, 20, 100, 60],
            ),
            (
                "zone+host, different selectors, some nodes have 0 pods",
                incoming().label("bar", "").spread(1, "zone", SA, foo).spread(1, HOST, SA, bar),
                vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2"), zn("node-y", "zone2")],
                vec![],
                vec![pod("p-b1").node("node-b").label("bar", ""), on("p-x1", "node-x"), on("p-y1", "node-y").label("bar", "")],
                vec![100, 60, 40, 0],
            ),
            (
                "zone+host, different selectors, 3 of 4 candidates",
                incoming().label("bar", "").spread(1, "zone", SA, foo).spread(1, HOST, SA, bar),
                vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")],
                vec![zn("node-y", "zone2")],
                vec![on("p-a1", "node-a"), on("p-b1", "node-b").label("bar", ""), on("p-y1", "node-y"), pod("p-y2").node("node-y").label("bar", "")],
                vec![50, 25, 100],
            ),
            ("other namespace not counted", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b"]), vec![], vec![on("p-a1", "node-a").namespace("ns1"), on("p-a2", "node-a"), on("p-b1", "node-b"), on("p-b2", "node-b")], vec![100, 33]),
            ("terminating excluded", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b"]), vec![], vec![on("p-a", "node-a").terminating(), on("p-b", "node-b")], vec![100, 0]),
            (
                "affinity policy honor: non-matching nodes not counted",
                incoming().node_selector("foo", "").spread(1, "zone", SA, foo),
                vec![zn("node-a", "zone1").label("foo", ""), zn("node-x", "zone2").label("foo", "")],
                vec![zn("node-b", "zone1"), zn("node-y", "zone2")],
                many(&[("node-b", 2), ("node-x", 1)]),
                vec![100, 0],
            ),
            (
                "affinity policy ignore: every node counted",
                incoming().node_selector("foo", "").spread_constraint(tsc(1, "zone", SA, None, Some("Ignore"), None)),
                vec![zn("node-a", "zone1").label("foo", ""), zn("node-x", "zone2").label("foo", "")],
                vec![zn("node-b", "zone1"), zn("node-y", "zone2")],
                many(&[("node-b", 2), ("node-x", 1)]),
                vec![33, 100],
            ),
            (
                "taints policy honor: untolerated nodes not counted",
                incoming().spread_constraint(tsc(1, "zone", SA, None, None, Some("Honor"))),
                vec![zn("node-a", "zone1"), zn("node-x", "zone2")],
                vec![zn("node-b", "zone1").taint("k", "v", "NoSchedule")],
                many(&[("node-b", 2), ("node-x", 1)]),
                vec![100, 0],
            ),
        ];
        for (name, p, nodes, failed, pods, want) in cases {
            assert_eq!(scores(&p, &nodes, &failed, &pods), want, "{name}");
        }
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
                let k = TallyKey { ns: "default", sel: &sel, key, required: &required, missing_as_empty: false };
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

    #[test]
    fn args_validation() {
        let build = |v: serde_json::Value| crate::plugins::build(NAME, Some(&v)).map(|_| ()).err().unwrap_or_default();
        let dc = |skew: i32, key: &str, when: &str| serde_json::json!({"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when});
        let cases = [
            ("defaults", serde_json::json!({}), ""),
            ("apiVersion and kind", serde_json::json!({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "PodTopologySpreadArgs"}), ""),
            ("List, no constraints", serde_json::json!({"defaultingType": "List"}), ""),
            ("List, empty constraints", serde_json::json!({"defaultingType": "List", "defaultConstraints": []}), ""),
            ("List, constraints", serde_json::json!({"defaultingType": "List", "defaultConstraints": [dc(1, "zone", SA), dc(2, "zone", DNS)]}), ""),
            ("System with constraints", serde_json::json!({"defaultConstraints": [dc(1, "zone", SA)]}), "defaultingType"),
            ("bad defaultingType", serde_json::json!({"defaultingType": "Auto"}), "defaultingType"),
            ("maxSkew 0", serde_json::json!({"defaultingType": "List", "defaultConstraints": [dc(0, "zone", SA)]}), "defaultConstraints[0].maxSkew: must be greater than zero"),
            ("empty key", serde_json::json!({"defaultingType": "List", "defaultConstraints": [dc(1, "", SA)]}), "defaultConstraints[0].topologyKey"),
            ("bad key", serde_json::json!({"defaultingType": "List", "defaultConstraints": [dc(1, "a b", SA)]}), "defaultConstraints[0].topologyKey"),
            ("bad when", serde_json::json!({"defaultingType": "List", "defaultConstraints": [dc(1, "zone", "Never")]}), "defaultConstraints[0].whenUnsatisfiable"),
            ("selector forbidden", serde_json::json!({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": SA, "labelSelector": {}}]}), "defaultConstraints[0].labelSelector"),
            ("duplicate", serde_json::json!({"defaultingType": "List", "defaultConstraints": [dc(1, "zone", SA), dc(2, "zone", SA)]}), "defaultConstraints[1]"),
            ("unknown field", serde_json::json!({"defaultingType": "List", "bogus": 1}), "bogus"),
        ];
        for (name, v, want) in cases {
            let got = build(v);
            if want.is_empty() {
                assert_eq!(got, "", "{name}");
            } else {
                assert!(got.contains(want), "{name}: {got}");
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

    /// Normalizing by domain gives what normalizing node by node gives: for
    /// PreScore's nodes, for fewer nodes (a domain without scored nodes),
    /// and for raw scores that are not their domain's (it puts them back
    /// and the node-by-node path runs).
    #[test]
    fn normalize_by_domain_matches_node_by_node() {
        let pl = plugin();
        let nodes = [zn("a1", "z1"), zn("a2", "z1"), zn("b1", "z2"), zn("b2", "z2"), node("x"), zn("c1", "z3"), zn("c2", "z3")];
        let pods = [on("p1", "a1"), on("p2", "a2"), on("p3", "a2"), on("p4", "b1")];
        let snap = snapshot(&nodes, &pods);
        let p = incoming().spread(1, "zone", SA, &[("foo", "")]).info();
        let all: Vec<usize> = (0..snap.nodes.len()).collect();
        let mut st = CycleState::new();
        assert!(pl.pre_score(&mut st, &p, &all, &snap).is_success());
        let mut raw: Vec<NodeScore> = all.iter().map(|&i| NodeScore { node: i, score: 0 }).collect();
        assert!(pl.score_nodes(&st, &p, &snap, &mut raw).is_ok());
        // Upstream's NormalizeScore, node by node; "x" (no zone) is ignored.
        let by_hand = |scores: &[NodeScore]| -> Vec<i64> {
            let counted = |ns: &NodeScore| snap.nodes[ns.node].node.labels.contains_key("zone");
            let kept = || scores.iter().filter(|ns| counted(ns)).map(|ns| ns.score);
            let (min, max) = (kept().min().unwrap_or(0), kept().max().unwrap_or(0));
            scores.iter().map(|ns| if !counted(ns) { 0 } else if max == 0 { MAX_NODE_SCORE } else { MAX_NODE_SCORE * (max + min - ns.score) / max }).collect()
        };
        let normalized = |mut scores: Vec<NodeScore>| -> Vec<i64> {
            assert!(pl.normalize_score(&st, &p, &mut scores, &snap).is_success());
            scores.iter().map(|ns| ns.score).collect()
        };
        let expected = by_hand(&raw);
        assert_ne!(expected.iter().min(), expected.iter().max(), "the domains score differently");
        assert_eq!(normalized(raw.clone()), expected);
        // Without z3's nodes: min and max over z1 and z2 only.
        let fewer: Vec<NodeScore> = raw.iter().copied().filter(|ns| !snap.nodes[ns.node].name().starts_with('c')).collect();
        assert_eq!(normalized(fewer.clone()), by_hand(&fewer));
        // A raw score in the middle that is not its domain's.
        let mut odd = raw.clone();
        odd[3].score += 1;
        assert_eq!(normalized(odd.clone()), by_hand(&odd));
    }
}
