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

/// Counts per topology pair, grouped by topology key (a pod has few keys, so
/// the keys are searched linearly). Pairs whose count drops to 0 are removed.
#[derive(Clone, Debug, Default)]
struct TopoCounts {
    by_key: Vec<(String, HashMap<String, i64>)>,
    /// Number of pairs held (upstream `len(map)`).
    len: usize,
}

impl TopoCounts {
    /// Adds `delta` to (key, the node's value of key), when the node has the key.
    fn update(&mut self, key: &str, node_labels: &Labels, delta: i64) {
        let Some(value) = node_labels.get(key) else { return };
        let i = match self.by_key.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.by_key.push((key.to_string(), HashMap::new()));
                self.by_key.len() - 1
            }
        };
        let m = &mut self.by_key[i].1;
        match m.get_mut(value.as_str()) {
            Some(c) => {
                *c += delta;
                if *c == 0 {
                    m.remove(value.as_str());
                    self.len -= 1;
                }
            }
            None if delta != 0 => {
                m.insert(value.clone(), delta);
                self.len += 1;
            }
            None => {}
        }
    }

    /// The count of (key, value).
    fn get(&self, key: &str, value: &str) -> i64 {
        self.by_key.iter().find(|(k, _)| k == key).and_then(|(_, m)| m.get(value)).copied().unwrap_or(0)
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
struct PreScoreState(Arc<Vec<(String, HashMap<String, i64>)>>);

/// Adds `weight` to (term's key, node's value) when the term selects the pod.
fn score_term(scores: &mut HashMap<String, HashMap<String, i64>>, key: &str, node_labels: &Labels, weight: i64) {
    if let Some(v) = node_labels.get(key) {
        let m = match scores.get_mut(key) {
            Some(m) => m,
            None => scores.entry(key.to_string()).or_default(),
        };
        match m.get_mut(v.as_str()) {
            Some(c) => *c += weight,
            None => {
                m.insert(v.clone(), weight);
            }
        }
    }
}

impl InterPodAffinity {
    /// Adds an existing pod's contribution to the topology scores.
    fn process_existing_pod(
        &self,
        scores: &mut HashMap<String, HashMap<String, i64>>,
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
        for ni in snap.nodes.iter().filter(|n| n.pods_with_required_anti_affinity > 0) {
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
        if !pods_exist && !(s.affinity.is_empty() && s.self_match) {
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
                if labels.get(k).and_then(|v| m.get(v.as_str())).is_some_and(|&c| c > 0) {
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
        let ns_labels = namespace_labels(snap, &pod.namespace);
        let mut scores: HashMap<String, HashMap<String, i64>> = HashMap::new();
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
                score += m.get(v.as_str()).copied().unwrap_or(0);
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
