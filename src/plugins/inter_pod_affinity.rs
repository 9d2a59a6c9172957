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
//! Filter then needs only a label lookup and a hash lookup per term.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, NodeScore, Plugin, Points, PreFilterNodes, Status, MAX_NODE_SCORE};
use crate::model::pod::{AffinityTerm, WeightedAffinityTerm};
use crate::model::selector::Labels;
use crate::model::{NodeInfo, PodInfo};

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
}

impl Default for InterPodAffinity {
    fn default() -> Self {
        InterPodAffinity { hard_pod_affinity_weight: i64::from(DEFAULT_HARD_POD_AFFINITY_WEIGHT), ignore_preferred_terms_of_existing_pods: false }
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
        })
    }
}

/// A fast non-cryptographic hasher (FxHash) for label values: these maps are
/// rebuilt every cycle, where SipHash dominated PreFilter.
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

/// Longest label value kept inline (without allocating) in a [`ValueMap`].
const INLINE_MAX: usize = 31;

/// A label value of at most `INLINE_MAX` bytes packed into words, its length in the last byte.
fn pack(v: &str) -> Option<[u64; 4]> {
    let b = v.as_bytes();
    if b.len() > INLINE_MAX {
        return None;
    }
    let mut buf = [0u8; 32];
    buf[..b.len()].copy_from_slice(b);
    buf[31] = b.len() as u8;
    let mut out = [0u64; 4];
    for (w, c) in out.iter_mut().zip(buf.chunks_exact(8)) {
        let mut x = [0u8; 8];
        x.copy_from_slice(c);
        *w = u64::from_le_bytes(x);
    }
    Some(out)
}

/// Label value → count or score. Short values (nearly all) are stored
/// inline, so building the map each cycle allocates only for the table.
#[derive(Clone, Debug, Default)]
struct ValueMap {
    small: HashMap<[u64; 4], i64, FxBuild>,
    big: HashMap<String, i64, FxBuild>,
}

impl ValueMap {
    fn get(&self, v: &str) -> Option<i64> {
        match pack(v) {
            Some(k) => self.small.get(&k).copied(),
            None => self.big.get(v).copied(),
        }
    }

    /// Adds `delta` to the value's entry; with `drop_zero`, an entry that
    /// reaches 0 is removed. Returns the change in the number of entries.
    fn add(&mut self, v: &str, delta: i64, drop_zero: bool) -> isize {
        let (slot, inserted) = match pack(v) {
            Some(k) => match self.small.get_mut(&k) {
                Some(c) => (Some(c), false),
                None => {
                    self.small.insert(k, delta);
                    (None, true)
                }
            },
            None => match self.big.get_mut(v) {
                Some(c) => (Some(c), false),
                None => {
                    self.big.insert(v.to_string(), delta);
                    (None, true)
                }
            },
        };
        if inserted {
            return 1;
        }
        if let Some(c) = slot {
            *c += delta;
            if drop_zero && *c == 0 {
                match pack(v) {
                    Some(k) => self.small.remove(&k),
                    None => self.big.remove(v),
                };
                return -1;
            }
        }
        0
    }

    fn is_empty(&self) -> bool {
        self.small.is_empty() && self.big.is_empty()
    }
}

/// Counts per topology pair, grouped by topology key (a pod has few keys, so
/// the keys are searched linearly). Pairs whose count drops to 0 are removed.
#[derive(Clone, Debug, Default)]
struct TopoCounts {
    by_key: Vec<(String, ValueMap)>,
    /// Number of pairs held (upstream `len(map)`).
    len: usize,
}

impl TopoCounts {
    /// Adds `delta` to (key, the node's value of key), when the node has the key.
    fn update(&mut self, key: &str, node_labels: &Labels, delta: i64) {
        if delta == 0 {
            return;
        }
        let Some(value) = node_labels.get(key) else { return };
        let i = match self.by_key.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.by_key.push((key.to_string(), ValueMap::default()));
                self.by_key.len() - 1
            }
        };
        let d = self.by_key[i].1.add(value, delta, true);
        self.len = self.len.saturating_add_signed(d);
    }

    /// The count of (key, value).
    fn get(&self, key: &str, value: &str) -> i64 {
        self.by_key.iter().find(|(k, _)| k == key).and_then(|(_, m)| m.get(value)).unwrap_or(0)
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
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

/// PreFilter state (shared until AddPod/RemovePod change a copy).
#[derive(Clone, Debug, Default)]
struct FilterCounts {
    /// Existing pods whose required anti-affinity terms select the incoming pod.
    existing_anti: TopoCounts,
    /// Existing pods matching all the incoming pod's required affinity terms.
    affinity: TopoCounts,
    /// Existing pods selected by the incoming pod's required anti-affinity terms.
    anti: TopoCounts,
    /// The incoming pod matches all its own required affinity terms.
    self_match: bool,
}

impl FilterCounts {
    /// Counts `other`, which sits on a node with `node_labels`, with `delta` (±1).
    fn update_with_pod(&mut self, pod: &PodInfo, other: &PodInfo, node_labels: &Labels, delta: i64, snap: &Snapshot) {
        if !other.required_anti_affinity.is_empty() {
            let ns_labels = namespace_labels(snap, &pod.namespace);
            for t in &other.required_anti_affinity {
                if existing_term_matches(t, pod, ns_labels) {
                    self.existing_anti.update(&t.topology_key, node_labels, delta);
                }
            }
        }
        if matches_all(&pod.required_affinity, other, snap) {
            for t in &pod.required_affinity {
                self.affinity.update(&t.topology_key, node_labels, delta);
            }
        }
        for t in &pod.required_anti_affinity {
            if incoming_term_matches(t, other, snap) {
                self.anti.update(&t.topology_key, node_labels, delta);
            }
        }
    }
}

#[derive(Clone, Debug)]
struct PreFilterState(Arc<FilterCounts>);

/// PreScore state: score per topology pair.
#[derive(Clone, Debug)]
struct PreScoreState(Arc<Vec<(String, ValueMap)>>);

/// Adds `weight` to (term's key, node's value) when the term selects the pod.
fn score_term(scores: &mut HashMap<String, ValueMap>, key: &str, node_labels: &Labels, weight: i64) {
    if let Some(v) = node_labels.get(key) {
        let m = match scores.get_mut(key) {
            Some(m) => m,
            None => scores.entry(key.to_string()).or_default(),
        };
        m.add(v, weight, false);
    }
}

impl InterPodAffinity {
    /// Adds an existing pod's contribution to the topology scores.
    fn process_existing_pod(
        &self,
        scores: &mut HashMap<String, ValueMap>,
        pod: &PodInfo,
        existing: &PodInfo,
        node_labels: &Labels,
        ns_labels: &Labels,
        snap: &Snapshot,
    ) {
        let mut weighted = |terms: &[WeightedAffinityTerm], sign: i64| {
            for t in terms {
                if incoming_term_matches(&t.term, existing, snap) {
                    score_term(scores, &t.term.topology_key, node_labels, sign * t.weight);
                }
            }
        };
        weighted(&pod.preferred_affinity, 1);
        weighted(&pod.preferred_anti_affinity, -1);
        if self.hard_pod_affinity_weight > 0 {
            for t in &existing.required_affinity {
                if existing_term_matches(t, pod, ns_labels) {
                    score_term(scores, &t.topology_key, node_labels, self.hard_pod_affinity_weight);
                }
            }
        }
        for (terms, sign) in [(&existing.preferred_affinity, 1), (&existing.preferred_anti_affinity, -1)] {
            for t in terms {
                if existing_term_matches(&t.term, pod, ns_labels) {
                    score_term(scores, &t.term.topology_key, node_labels, sign * t.weight);
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
        let mut c = FilterCounts::default();
        // Existing pods' required anti-affinity that selects the incoming pod.
        let ns_labels = namespace_labels(snap, &pod.namespace);
        let nodes = if snap.pods_with_required_anti_affinity() > 0 { &snap.nodes[..] } else { &[] };
        for ni in nodes.iter().filter(|n| n.pods_with_required_anti_affinity > 0) {
            let labels = &ni.node.labels;
            for p in ni.pods.iter().filter(|p| !p.required_anti_affinity.is_empty()) {
                for t in &p.required_anti_affinity {
                    if existing_term_matches(t, pod, ns_labels) {
                        c.existing_anti.update(&t.topology_key, labels, 1);
                    }
                }
            }
        }
        if c.existing_anti.is_empty() && pod.required_affinity.is_empty() && pod.required_anti_affinity.is_empty() {
            return (Status::skip(), None);
        }
        // The incoming pod's required terms against every existing pod.
        if !pod.required_affinity.is_empty() || !pod.required_anti_affinity.is_empty() {
            for ni in &snap.nodes {
                let labels = &ni.node.labels;
                for p in &ni.pods {
                    if matches_all(&pod.required_affinity, p, snap) {
                        for t in &pod.required_affinity {
                            c.affinity.update(&t.topology_key, labels, 1);
                        }
                    }
                    for t in &pod.required_anti_affinity {
                        if incoming_term_matches(t, p, snap) {
                            c.anti.update(&t.topology_key, labels, 1);
                        }
                    }
                }
            }
        }
        c.self_match = matches_all(&pod.required_affinity, pod, snap);
        state.insert(PreFilterState(Arc::new(c)));
        (Status::success(), None)
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        let Some(s) = state.get_mut::<PreFilterState>() else { return Status::error("InterPodAffinity: no PreFilter state") };
        Arc::make_mut(&mut s.0).update_with_pod(pod, added, &node.node.labels, 1, snap);
        Status::success()
    }

    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, removed: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        let Some(s) = state.get_mut::<PreFilterState>() else { return Status::error("InterPodAffinity: no PreFilter state") };
        Arc::make_mut(&mut s.0).update_with_pod(pod, removed, &node.node.labels, -1, snap);
        Status::success()
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(PreFilterState(s)) = state.get::<PreFilterState>() else { return Status::error("InterPodAffinity: no PreFilter state") };
        let labels = &node.node.labels;
        // The incoming pod's required affinity.
        let mut pods_exist = true;
        for t in &pod.required_affinity {
            match labels.get(&t.topology_key) {
                None => return Status::unresolvable(REASON_AFFINITY),
                Some(v) => {
                    if s.affinity.get(&t.topology_key, v) <= 0 {
                        pods_exist = false;
                    }
                }
            }
        }
        // The first pod of a group with affinity to itself may go anywhere
        // that has the topology keys.
        let first_of_collection = s.affinity.is_empty() && s.self_match;
        if !pods_exist && !first_of_collection {
            return Status::unresolvable(REASON_AFFINITY);
        }
        // The incoming pod's required anti-affinity.
        if !s.anti.is_empty() {
            for t in &pod.required_anti_affinity {
                if labels.get(&t.topology_key).is_some_and(|v| s.anti.get(&t.topology_key, v) > 0) {
                    return Status::unschedulable(REASON_ANTI_AFFINITY);
                }
            }
        }
        // Existing pods' required anti-affinity.
        if !s.existing_anti.is_empty() {
            for (k, m) in &s.existing_anti.by_key {
                if m.is_empty() {
                    continue;
                }
                if labels.get(k).and_then(|v| m.get(v)).is_some_and(|c| c > 0) {
                    return Status::unschedulable(REASON_EXISTING_ANTI_AFFINITY);
                }
            }
        }
        Status::success()
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
        let mut scores: HashMap<String, ValueMap> = HashMap::new();
        for ni in &snap.nodes {
            // Unless the pod has preferred terms, only pods with affinity matter.
            if !has_constraints && ni.pods_with_affinity == 0 {
                continue;
            }
            let labels = &ni.node.labels;
            if labels.is_empty() {
                continue;
            }
            for p in &ni.pods {
                if !has_constraints && !p.has_affinity() {
                    continue;
                }
                self.process_existing_pod(&mut scores, pod, p, labels, ns_labels, snap);
            }
        }
        if scores.is_empty() {
            return Status::skip();
        }
        state.insert(PreScoreState(Arc::new(scores.into_iter().collect())));
        Status::success()
    }

    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(PreScoreState(s)) = state.get::<PreScoreState>() else { return Err(Status::error("InterPodAffinity: no PreScore state")) };
        let labels = &node.node.labels;
        let mut score = 0;
        for (k, m) in s.iter() {
            if let Some(v) = labels.get(k) {
                score += m.get(v).unwrap_or(0);
            }
        }
        Ok(score)
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize_score(&self, state: &CycleState, _: &PodInfo, scores: &mut [NodeScore], _: &Snapshot) -> Status {
        if state.get::<PreScoreState>().is_none_or(|s| s.0.is_empty()) {
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
    use crate::testing::{node, pod, selector, snapshot, NodeBuilder, PodBuilder};
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
    fn topo_counts_short_and_long_values() {
        let long = "a-value-longer-than-thirty-one-bytes-for-sure";
        let labels: Labels = [("k".to_string(), "short".to_string()), ("l".to_string(), long.to_string())].into_iter().collect();
        let mut c = TopoCounts::default();
        c.update("k", &labels, 1);
        c.update("l", &labels, 1);
        c.update("l", &labels, 1);
        c.update("missing", &labels, 1);
        assert_eq!((c.get("k", "short"), c.get("l", long), c.get("l", "short"), c.len), (1, 2, 0, 2));
        c.update("k", &labels, -1);
        c.update("l", &labels, -2);
        assert!(c.is_empty());
        assert_eq!(c.get("l", long), 0);
    }

    #[test]
    fn normalize_uses_min_and_max() {
        let pl = InterPodAffinity::default();
        let mut st = CycleState::new();
        st.insert(PreScoreState(Arc::new(vec![("k".into(), ValueMap::default())])));
        let mut s: Vec<NodeScore> = [-3, 0, 7, 4].iter().enumerate().map(|(i, &score)| NodeScore { node: i, score }).collect();
        assert!(pl.normalize_score(&st, &pod("p").info(), &mut s, &Snapshot::new()).is_success());
        assert_eq!(s.iter().map(|x| x.score).collect::<Vec<_>>(), vec![0, 30, 100, 70]);
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
