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
//!
//! Cut by extension point as upstream's `podtopologyspread` folder is: this
//! file has the plugin, its args and the events it answers to; `common` the
//! node domains and the incrementally kept counts both halves read;
//! `filtering` PreFilter/Filter with AddPod/RemovePod; `scoring`
//! PreScore/Score/NormalizeScore.

mod common;
mod filtering;
mod scoring;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, NodeScore, Plugin, PreFilterNodes, PreFilterPlugin, PreScorePlugin, ScorePlugin, Status};
use berth_model::pod::{InclusionPolicy, SpreadConstraint, WhenUnsatisfiable};
use berth_model::selector::{validate_key, Selector};
use berth_model::{NodeInfo, PodInfo};

use common::{KeyDomains, RequiredIds, Tally};

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
    /// Ids of the sets of keys a node must have (see `Required`).
    required_ids: Mutex<RequiredIds>,
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
        Ok(PodTopologySpread { defaults, system_defaulted: system, cache: Mutex::default(), tallies: Mutex::default(), required_ids: Mutex::default() })
    }
}

/// Each extension point's code is in the file named for it (`filtering`,
/// `scoring`); this impl routes the framework's calls there.
impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> Events {
        Events::NODE_ADD
            .or(Events::NODE_LABEL)
            .or(Events::NODE_TAINT)
            .or(Events::POD_ADD)
            .or(Events::POD_DELETE)
            .or(Events::POD_LABEL)
    }
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        filtering::pre_filter(self, state, pod, snap)
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        filtering::add_pod(state, pod, added, node, snap)
    }

    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, removed: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        filtering::remove_pod(state, pod, removed, node, snap)
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        filtering::filter(state, pod, node)
    }

    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        filtering::filter_nodes(self, state, pod, snap, nodes, rejected)
    }

    fn retain_feasible(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>) -> bool {
        filtering::retain_feasible(state, pod, snap, nodes)
    }
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[usize], snap: &Snapshot) -> Status {
        scoring::pre_score(self, state, pod, nodes, snap)
    }
}

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        scoring::score(state, pod, node)
    }

    fn score_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
        scoring::score_nodes(self, state, pod, snap, scores)
    }

    fn normalize_score(&self, state: &CycleState, pod: &PodInfo, scores: &mut [NodeScore], snap: &Snapshot) -> Status {
        scoring::normalize_score(state, pod, scores, snap)
    }

    fn has_normalize(&self) -> bool {
        true
    }
}

/// Builders and runners the tests of every part share.
#[cfg(test)]
mod test_support {
    pub(super) use super::*;
    pub(super) use crate::framework::{Code, MAX_NODE_SCORE};
    pub(super) use crate::testing::{node, pod, selector, snapshot, NodeBuilder, PodBuilder, Rng};
    pub(super) use k8s_openapi::api::core::v1 as core;


    pub(super) const DNS: &str = "DoNotSchedule";
    pub(super) const SA: &str = "ScheduleAnyway";
    pub(super) const HOST: &str = LABEL_HOSTNAME;

    /// name, incoming pod, nodes, bound pods, feasible nodes.
    pub(super) type FilterCase = (&'static str, PodBuilder, Vec<NodeBuilder>, Vec<PodBuilder>, Vec<&'static str>);
    /// name, incoming pod, feasible nodes, other nodes, bound pods, scores of the feasible nodes.
    pub(super) type ScoreCase = (&'static str, PodBuilder, Vec<NodeBuilder>, Vec<NodeBuilder>, Vec<PodBuilder>, Vec<i64>);

    /// A node without the hostname label.
    pub(super) fn bare(name: &str) -> NodeBuilder {
        let mut n = node(name);
        if let Some(l) = n.node.metadata.labels.as_mut() {
            l.clear();
        }
        n
    }

    pub(super) fn plugin() -> PodTopologySpread {
        PodTopologySpread::new(Args::default()).unwrap_or_default()
    }

    /// A node in a zone.
    pub(super) fn zn(name: &str, zone: &str) -> NodeBuilder {
        node(name).label("zone", zone)
    }

    /// A bound pod labelled foo="".
    pub(super) fn on(name: &str, n: &str) -> PodBuilder {
        pod(name).node(n).label("foo", "")
    }

    /// The incoming pod, labelled foo="".
    pub(super) fn incoming() -> PodBuilder {
        pod("p").label("foo", "")
    }

    pub(super) fn tsc(skew: i32, key: &str, when: &str, min_domains: Option<i32>, aff: Option<&str>, taints: Option<&str>) -> core::TopologySpreadConstraint {
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
    pub(super) fn feasible(p: &PodBuilder, nodes: &[NodeBuilder], pods: &[PodBuilder]) -> Vec<String> {
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


    /// Normalized scores of the feasible `nodes` (the snapshot also holds `failed`).
    pub(super) fn scores(p: &PodBuilder, nodes: &[NodeBuilder], failed: &[NodeBuilder], pods: &[PodBuilder]) -> Vec<i64> {
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
}

#[cfg(test)]
mod tests {
    use super::test_support::*;


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
}
