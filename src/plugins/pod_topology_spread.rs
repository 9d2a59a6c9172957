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

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, NodeScore, Plugin, Points, PreFilterNodes, Status, MAX_NODE_SCORE};
use crate::model::pod::{InclusionPolicy, SpreadConstraint, WhenUnsatisfiable};
use crate::model::selector::{validate_key, Labels, Selector};
use crate::model::taints::first_untolerated_hard;
use crate::model::{NodeInfo, NodeSpec, PodInfo};

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
    /// Per (namespace, selector): each node's count of matching pods, valid
    /// while that node's object and generation are unchanged. Between two
    /// cycles only the nodes that gained or lost pods are counted again.
    matches: Mutex<HashMap<String, Vec<MatchSlot>>>,
}

/// One node's cached count: the node object and generation it was read from, and the count.
type MatchSlot = (Option<Arc<NodeSpec>>, u64, i64);

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
        Ok(PodTopologySpread { defaults, system_defaulted: system, cache: Mutex::default(), matches: Mutex::default() })
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

/// Marks a node that lacks the topology key.
const MISSING: u32 = u32::MAX;

/// Each node's domain for one topology key, kept across cycles so that a
/// cycle reads no node labels in its passes over all nodes: an entry is valid
/// while the snapshot holds the very same `NodeSpec` (node updates replace it).
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

impl PodTopologySpread {
    /// Matching pods per node index (see `matches`).
    fn match_counts(&self, ns: &str, sel: &Selector, snap: &Snapshot) -> Vec<i64> {
        let key = format!("{ns}\u{0}{sel:?}");
        let mut cache = self.matches.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() > 256 && !cache.contains_key(&key) {
            cache.clear();
        }
        let slots = cache.entry(key).or_default();
        // The node objects are held (not their addresses), so a freed node is
        // never mistaken for a new one allocated at the same address.
        slots.resize(snap.nodes.len(), (None, u64::MAX, 0));
        let mut out = Vec::with_capacity(snap.nodes.len());
        for (node, slot) in snap.nodes.iter().zip(slots.iter_mut()) {
            if !slot.0.as_ref().is_some_and(|p| Arc::ptr_eq(p, &node.node)) || slot.1 != node.generation {
                let n = if node.pods.is_empty() { 0 } else { count_matching(node, sel, ns) };
                *slot = (Some(Arc::clone(&node.node)), node.generation, n);
            }
            out.push(slot.2);
        }
        out
    }
}

/// Matching pods on a node: same namespace, not terminating, selected.
fn count_matching(node: &NodeInfo, sel: &Selector, ns: &str) -> i64 {
    node.pods.iter().filter(|p| !p.terminating && p.namespace == ns && sel.matches(&p.labels)).count() as i64
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
    /// Topology value → domain id (index into the counts).
    ids: Arc<HashMap<String, u32>>,
    /// Domain id per snapshot node index, with the node object it was read from.
    per_node: Arc<Vec<(usize, u32)>>,
}

/// Per-cycle counts of one hard constraint.
#[derive(Clone, Debug)]
struct Counts {
    /// Matching pods per domain id.
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
}

impl PreFilterState {
    /// The global minimum of constraint `i`, with minDomains applied.
    fn min_match(&self, i: usize) -> i64 {
        let c = &self.counts[i];
        if c.domains < self.fixed[i].c.min_domains { 0 } else { c.min }
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
            let Some(&d) = labels.get(&f.c.topology_key).and_then(|v| f.ids.get(v)) else { continue };
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

/// One soft constraint with its counts and weight.
#[derive(Debug)]
struct SoftConstraint {
    c: SpreadConstraint,
    /// The key is the hostname label: counted per node at Score time.
    hostname: bool,
    /// Topology value → domain id (non-hostname keys).
    ids: Arc<HashMap<String, u32>>,
    /// Matching pods per domain id; None for domains of no scored node.
    counts: Vec<Option<i64>>,
    /// log(number of domains + 2).
    weight: f64,
}

/// PreScore state.
#[derive(Clone, Debug)]
struct PreScoreState {
    constraints: Arc<Vec<SoftConstraint>>,
    /// Nodes missing a topology key are ignored (always, except for system defaults).
    require_all: bool,
}

impl PreScoreState {
    fn ignored(&self, labels: &Labels) -> bool {
        self.require_all && !self.constraints.iter().all(|s| labels.contains_key(&s.c.topology_key))
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
        let doms: Vec<Domains> = cs.iter().map(|c| self.node_domains(&c.topology_key, snap)).collect();
        let matched: Vec<Vec<i64>> = cs.iter().map(|c| self.match_counts(&pod.namespace, &c.selector, snap)).collect();
        let mut counts: Vec<Counts> = doms
            .iter()
            .map(|(ids, _)| Counts { counts: vec![0; ids.len()], present: vec![false; ids.len()], domains: 0, min: i64::MAX })
            .collect();
        for (ni, node) in snap.nodes.iter().enumerate() {
            if doms.iter().any(|(_, per_node)| per_node[ni] == MISSING) {
                continue;
            }
            let mut inc = Inclusion::new(pod, node);
            for (i, c) in cs.iter().enumerate() {
                if !inc.admits(c) {
                    continue;
                }
                let d = doms[i].1[ni] as usize;
                let k = &mut counts[i];
                if !k.present[d] {
                    k.present[d] = true;
                    k.domains += 1;
                }
                k.counts[d] += matched[i][ni];
            }
        }
        for k in counts.iter_mut() {
            k.recompute_min();
        }
        let fixed = cs
            .into_iter()
            .zip(doms)
            .map(|(c, (ids, per))| HardConstraint {
                self_match: c.selector.matches(&pod.labels),
                c,
                ids,
                per_node: Arc::new(snap.nodes.iter().zip(per).map(|(n, d)| (Arc::as_ptr(&n.node) as usize, d)).collect()),
            })
            .collect();
        state.insert(PreFilterState { fixed: Arc::new(fixed), counts });
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
        let labels = &node.node.labels;
        let ptr = Arc::as_ptr(&node.node) as usize;
        for (i, f) in s.fixed.iter().enumerate() {
            let k = &s.counts[i];
            // Fast path: the domain read in PreFilter for this very node object.
            if let Some(&(p, d)) = f.per_node.get(node.index)
                && p == ptr {
                    if d == MISSING {
                        return Status::unresolvable(REASON_MISSING_LABEL);
                    }
                    let count = if k.present.get(d as usize).copied().unwrap_or(false) { k.counts[d as usize] } else { 0 };
                    if count + i64::from(f.self_match) - s.min_match(i) > f.c.max_skew {
                        return Status::unschedulable(REASON_CONSTRAINTS);
                    }
                    continue;
                }
            let Some(v) = labels.get(&f.c.topology_key) else {
                return Status::unresolvable(REASON_MISSING_LABEL);
            };
            let count = match f.ids.get(v.as_str()) {
                Some(&d) if k.present.get(d as usize).copied().unwrap_or(false) => k.counts[d as usize],
                _ => 0,
            };
            let skew = count + i64::from(f.self_match) - s.min_match(i);
            if skew > f.c.max_skew {
                return Status::unschedulable(REASON_CONSTRAINTS);
            }
        }
        Status::success()
    }

    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[usize], snap: &Snapshot) -> Status {
        if snap.nodes.is_empty() {
            return Status::skip();
        }
        let cs = self.constraints(pod, WhenUnsatisfiable::ScheduleAnyway, snap);
        if cs.is_empty() {
            return Status::skip();
        }
        let require_all = !pod.spread_constraints.is_empty() || !self.system_defaulted;
        let doms: Vec<Domains> = cs.iter().map(|c| self.node_domains(&c.topology_key, snap)).collect();
        // A node without the key counts in the domain of the empty value when
        // not every key is required (upstream reads the missing label as "").
        let slot = |i: usize, ni: usize| -> usize {
            let (ids, per_node) = &doms[i];
            match per_node[ni] {
                MISSING => ids.get("").map_or(ids.len(), |&d| d as usize),
                d => d as usize,
            }
        };
        let has_all = |ni: usize| doms.iter().all(|(_, per_node)| per_node[ni] != MISSING);
        let mut soft: Vec<SoftConstraint> = cs
            .into_iter()
            .zip(&doms)
            .map(|(c, (ids, _))| SoftConstraint {
                hostname: c.topology_key == LABEL_HOSTNAME,
                c,
                ids: Arc::clone(ids),
                counts: vec![None; ids.len() + 1],
                weight: 0.0,
            })
            .collect();
        // Domains of the scored nodes; nodes missing a key are ignored.
        let mut ignored = 0usize;
        for &ni in nodes.iter().filter(|&&ni| ni < snap.nodes.len()) {
            if require_all && !has_all(ni) {
                ignored += 1;
                continue;
            }
            for (i, s) in soft.iter_mut().enumerate().filter(|(_, s)| !s.hostname) {
                s.counts[slot(i, ni)].get_or_insert(0);
            }
        }
        for s in soft.iter_mut() {
            let size = if s.hostname { nodes.len().saturating_sub(ignored) } else { s.counts.iter().filter(|c| c.is_some()).count() };
            s.weight = ((size + 2) as f64).ln();
        }
        // Matching pods per domain, over every node of the cluster.
        if soft.iter().any(|s| !s.hostname) {
            let matched: Vec<Option<Vec<i64>>> = soft.iter().map(|s| (!s.hostname).then(|| self.match_counts(&pod.namespace, &s.c.selector, snap))).collect();
            for (ni, node) in snap.nodes.iter().enumerate() {
                if node.pods.is_empty() || (require_all && !has_all(ni)) {
                    continue;
                }
                let mut inc = Inclusion::new(pod, node);
                for (i, s) in soft.iter_mut().enumerate().filter(|(_, s)| !s.hostname) {
                    let d = slot(i, ni);
                    if s.counts[d].is_none() || !inc.admits(&s.c) {
                        continue;
                    }
                    let n = matched[i].as_ref().map(|m| m[ni]).unwrap_or(0);
                    if let Some(c) = s.counts[d].as_mut() {
                        *c += n;
                    }
                }
            }
        }
        state.insert(PreScoreState { constraints: Arc::new(soft), require_all });
        Status::success()
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.get::<PreScoreState>() else {
            return Err(Status::error("PodTopologySpread: PreScore state missing"));
        };
        let labels = &node.node.labels;
        if s.ignored(labels) {
            return Ok(0);
        }
        let mut score = 0f64;
        for sc in s.constraints.iter() {
            let Some(v) = labels.get(&sc.c.topology_key) else { continue };
            let cnt = if sc.hostname {
                count_matching(node, &sc.c.selector, &pod.namespace)
            } else {
                sc.ids.get(v.as_str()).and_then(|&d| sc.counts.get(d as usize).copied().flatten()).unwrap_or(0)
            };
            score += cnt as f64 * sc.weight + (sc.c.max_skew - 1) as f64;
        }
        Ok(score.round() as i64)
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize_score(&self, state: &CycleState, _: &PodInfo, scores: &mut [NodeScore], snap: &Snapshot) -> Status {
        let Some(s) = state.get::<PreScoreState>() else {
            return Status::error("PodTopologySpread: PreScore state missing");
        };
        let ignored = |ns: &NodeScore| snap.nodes.get(ns.node).is_none_or(|n| s.ignored(&n.node.labels));
        let (mut min, mut max) = (i64::MAX, 0i64);
        for ns in scores.iter().filter(|ns| !ignored(ns)) {
            min = min.min(ns.score);
            max = max.max(ns.score);
        }
        for ns in scores.iter_mut() {
            ns.score = if ignored(ns) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - ns.score) / max
            };
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
}
