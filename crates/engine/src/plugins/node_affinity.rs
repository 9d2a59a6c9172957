//! NodeAffinity: spec.nodeSelector and required node affinity (Filter, with a
//! PreFilter that narrows to nodes named by `metadata.name` fields), preferred
//! node affinity (Score), and the scheduler-enforced `addedAffinity` argument.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, NodeScore, Plugin, PreFilterNodes, PreFilterPlugin, PreScorePlugin, ScorePlugin, Status};
use berth_model::pod::PreferredNodeTerm;
use berth_model::selector::{NodeSelector, NodeSelectorTerm, Op};
use berth_model::{NodeInfo, NodeSpec, PodInfo};

use super::helper::default_normalize;

/// Plugin name.
pub const NAME: &str = "NodeAffinity";
/// Reason for a node the pod's affinity or selector does not select.
pub const REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
/// Reason for a node the scheduler-enforced affinity does not select.
pub const REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// Reason when terms name disjoint node sets.
pub const REASON_CONFLICT: &str = "pod affinity terms conflict";

/// NodeAffinityArgs.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// Node affinity added to every pod of the profile.
    pub added_affinity: Option<core::NodeAffinity>,
    /// apiVersion/kind are accepted and ignored.
    #[serde(default)]
    pub api_version: Option<String>,
    /// See `api_version`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// Node affinity and node selectors.
#[derive(Debug, Default)]
pub struct NodeAffinity {
    added_required: Option<NodeSelector>,
    added_preferred: Vec<PreferredNodeTerm>,
    /// Per pod selector (nodeSelector + required affinity): whether each node
    /// matches, keyed by the node object it was computed from. Identical pods
    /// (most workloads) then pay one pointer comparison per node.
    matches: std::sync::Mutex<std::collections::HashMap<String, SelectorMatches>>,
}

/// Whether each node (by index, with the node object it was computed from) matches.
type NodeMatches = Vec<(Option<Arc<NodeSpec>>, bool)>;

/// Per-cycle: the cached match of every snapshot node.
#[derive(Clone)]
struct PreFilterState {
    matches: Arc<NodeMatches>,
}

impl NodeAffinity {
    /// Builds the plugin, validating its args.
    pub fn new(args: Args) -> Result<Self, String> {
        let mut pl = NodeAffinity::default();
        if let Some(a) = &args.added_affinity {
            if let Some(r) = &a.required_during_scheduling_ignored_during_execution {
                pl.added_required = Some(NodeSelector::compile(r, "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution")?);
            }
            for (i, t) in a.preferred_during_scheduling_ignored_during_execution.iter().flatten().enumerate() {
                if t.weight == 0 {
                    continue;
                }
                if let Some(term) = NodeSelectorTerm::compile(&t.preference, &format!("addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"))? {
                    pl.added_preferred.push(PreferredNodeTerm { term, weight: i64::from(t.weight) });
                }
            }
        }
        Ok(pl)
    }
}

/// Does the pod's own nodeSelector and required affinity select the node?
pub fn pod_matches_node(pod: &PodInfo, node: &NodeInfo) -> bool {
    let labels = &node.node.labels;
    if pod.node_selector.as_ref().is_some_and(|s| !s.matches(labels)) {
        return false;
    }
    pod.required_node_affinity.as_ref().is_none_or(|a| a.matches(node.name(), labels))
}

#[derive(Clone)]
struct PreScoreState;

/// One selector's node matches, and the snapshot node layout
/// ([`Snapshot::layout`]) they were last checked at.
type SelectorMatches = (Option<(u64, u64)>, Arc<NodeMatches>);

impl NodeAffinity {
    fn cache_matches(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) {
        let key = format!("{:?}|{:?}", pod.node_selector, pod.required_node_affinity);
        let mut cache = self.matches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() > 256 && !cache.contains_key(&key) {
            cache.clear();
        }
        let (layout, entry) = cache.entry(key).or_default();
        // The node objects are those of the last check while the snapshot's
        // layout holds; otherwise each is checked.
        if *layout != Some(snap.layout()) {
            let v = Arc::make_mut(entry);
            // Holding the node objects (not their addresses) means a freed node
            // can never be mistaken for a new one at the same address.
            v.resize(snap.nodes.len(), (None, false));
            for (node, slot) in snap.nodes.iter().zip(v.iter_mut()) {
                if !slot.0.as_ref().is_some_and(|p| Arc::ptr_eq(p, &node.node)) {
                    *slot = (Some(Arc::clone(&node.node)), pod_matches_node(pod, node));
                }
            }
            *layout = Some(snap.layout());
        }
        state.insert(PreFilterState { matches: Arc::clone(entry) });
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn reusable(&self) -> bool {
        // Node-local: see Plugin::reusable.
        true
    }

    fn events(&self) -> Events {
        Events::NODE_ADD.or(Events::NODE_LABEL).or(Events::POD_SELF)
    }
}

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        if pod.required_node_affinity.is_none() && pod.node_selector.is_none() && self.added_required.is_none() {
            return (Status::skip(), None);
        }
        self.cache_matches(state, pod, snap);
        let Some(req) = &pod.required_node_affinity else { return (Status::success(), None) };
        if req.terms.is_empty() {
            return (Status::success(), None);
        }
        // Terms are ORed; a term narrows only through metadata.name In fields.
        let mut names: HashSet<String> = HashSet::new();
        for t in &req.terms {
            let mut term_names: Option<HashSet<String>> = None;
            for f in &t.fields {
                if let Op::In(vals) = &f.op {
                    let s: HashSet<String> = vals.iter().cloned().collect();
                    term_names = Some(match term_names {
                        None => s,
                        Some(prev) => prev.intersection(&s).cloned().collect(),
                    });
                }
            }
            match term_names {
                None => return (Status::success(), None),
                Some(s) => names.extend(s),
            }
        }
        if names.is_empty() {
            return (Status::unresolvable(REASON_CONFLICT), None);
        }
        (Status::success(), Some(names))
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if self.added_required.as_ref().is_some_and(|a| !a.matches(node.name(), &node.node.labels)) {
            return Status::unresolvable(REASON_ENFORCED);
        }
        let cached = state.get::<PreFilterState>().and_then(|s| s.matches.get(node.index)).filter(|(p, _)| p.as_ref().is_some_and(|p| Arc::ptr_eq(p, &node.node)));
        let ok = match cached {
            Some(&(_, ok)) => ok,
            None => pod_matches_node(pod, node),
        };
        if !ok {
            return Status::unresolvable(REASON_POD);
        }
        Status::success()
    }

    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        // The verdicts PreFilter cached per node object, read in one loop; a
        // node without a current verdict (or a rejected one) gets `filter`.
        let cached = if self.added_required.is_none() { state.get::<PreFilterState>().map(|s| &s.matches[..]) } else { None };
        let passed = |i: usize, ni: &NodeInfo| matches!(cached.and_then(|m| m.get(i)), Some((Some(p), true)) if Arc::ptr_eq(p, &ni.node));
        crate::framework::filter_each(self, state, pod, snap, nodes, rejected, |i, ni| !passed(i, ni));
    }
}

impl PreScorePlugin for NodeAffinity {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _: &[usize], _: &Snapshot) -> Status {
        if pod.preferred_node_affinity.is_empty() && self.added_preferred.is_empty() {
            return Status::skip();
        }
        state.insert(PreScoreState);
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let labels = &node.node.labels;
        let sum = |terms: &[PreferredNodeTerm]| -> i64 {
            terms.iter().filter(|t| t.term.matches(node.name(), labels)).map(|t| t.weight).sum()
        };
        Ok(sum(&self.added_preferred) + sum(&pod.preferred_node_affinity))
    }

    fn default_normalized(&self) -> Option<bool> {
        Some(false)
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize_score(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore], _: &Snapshot) -> Status {
        default_normalize(scores, false);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{node, pod, snapshot};
    use std::sync::Arc;

    fn required(exprs: Vec<core::NodeSelectorRequirement>, fields: Vec<core::NodeSelectorRequirement>) -> core::Affinity {
        core::Affinity {
            node_affinity: Some(core::NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(core::NodeSelector {
                    node_selector_terms: vec![core::NodeSelectorTerm { match_expressions: Some(exprs), match_fields: Some(fields) }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn req(key: &str, op: &str, vals: &[&str]) -> core::NodeSelectorRequirement {
        core::NodeSelectorRequirement { key: key.into(), operator: op.into(), values: Some(vals.iter().map(|s| s.to_string()).collect()) }
    }

    #[test]
    fn filter_table() {
        let pl = NodeAffinity::default();
        let cases = [
            ("no selector", pod("p"), node("n"), Code::Success),
            ("selector matches", pod("p").node_selector("zone", "a"), node("n").label("zone", "a"), Code::Success),
            ("selector missing label", pod("p").node_selector("zone", "a"), node("n"), Code::UnschedulableAndUnresolvable),
            ("In matches", pod("p").affinity(required(vec![req("zone", "In", &["a", "b"])], vec![])), node("n").label("zone", "b"), Code::Success),
            ("ANDed expressions", pod("p").affinity(required(vec![req("zone", "In", &["a"]), req("disk", "Exists", &[])], vec![])), node("n").label("zone", "a"), Code::UnschedulableAndUnresolvable),
            ("matchFields other node", pod("p").affinity(required(vec![], vec![req("metadata.name", "In", &["m"])])), node("n"), Code::UnschedulableAndUnresolvable),
        ];
        for (name, p, n, code) in cases {
            let s = pl.filter(&CycleState::new(), &p.info(), &NodeInfo::new(Arc::new(n.spec())));
            assert_eq!(s.code, code, "{name}: {s}");
        }
    }

    #[test]
    fn pre_filter_narrows_by_name() {
        let pl = NodeAffinity::default();
        let snap = snapshot(&[node("a"), node("b")], &[]);
        let p = pod("p").affinity(required(vec![], vec![req("metadata.name", "In", &["a"])])).info();
        let (s, r) = pl.pre_filter(&mut CycleState::new(), &p, &snap);
        assert!(s.is_success());
        assert_eq!(r, Some(["a".to_string()].into()));
        let (s, _) = pl.pre_filter(&mut CycleState::new(), &pod("p").info(), &snap);
        assert!(s.is_skip());
    }

    #[test]
    fn added_affinity_is_enforced() {
        let args: Args = serde_json::from_value(serde_json::json!({
            "addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}
        }))
        .unwrap_or_default();
        let pl = NodeAffinity::new(args).unwrap_or_default();
        let s = pl.filter(&CycleState::new(), &pod("p").info(), &NodeInfo::new(Arc::new(node("n").label("zone", "b").spec())));
        assert_eq!(s.message(), REASON_ENFORCED);
    }
}
