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
//!
//! Cut by extension point as upstream's `interpodaffinity` folder is: this
//! file has the plugin, its args and the events it answers to; `common` the
//! topology domains, the counts kept across cycles and the term matchers;
//! `filtering` PreFilter/Filter with AddPod/RemovePod; `scoring`
//! PreScore/Score/NormalizeScore.

mod common;
mod filtering;
mod scoring;

use std::sync::{Arc, Mutex};

use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, NodeScore, Plugin, PreFilterNodes, PreFilterPlugin, PreScorePlugin, ScorePlugin, Status};
use berth_model::{NodeInfo, PodInfo};

use common::Tally;

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

/// Each extension point's code is in the file named for it (`filtering`,
/// `scoring`); this impl routes the framework's calls there.
impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
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
}

impl PreFilterPlugin for InterPodAffinity {
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

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        filtering::filter(state, pod, node)
    }

    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        filtering::filter_nodes(self, state, pod, snap, nodes, rejected)
    }
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[usize], snap: &Snapshot) -> Status {
        scoring::pre_score(self, state, pod, nodes, snap)
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        scoring::score(state, pod, node)
    }

    fn score_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
        scoring::score_nodes(state, pod, snap, scores)
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
    pub(super) use crate::cache::Snapshot;
    pub(super) use crate::framework::Code;
    pub(super) use crate::testing::{node, pod, selector, snapshot, NodeBuilder, PodBuilder, Rng};
    pub(super) use k8s_openapi::api::core::v1 as core;

    pub(super) const ZONE: &str = "zone";
    pub(super) const HOST: &str = "kubernetes.io/hostname";

    /// A term selecting `sel` over `key`, in the pod's own namespace.
    pub(super) fn term(sel: &[(&str, &str)], key: &str) -> core::PodAffinityTerm {
        core::PodAffinityTerm { label_selector: Some(selector(sel)), topology_key: key.into(), ..Default::default() }
    }

    /// A term selecting `sel` over `key` in the namespaces whose labels match `ns_sel`.
    pub(super) fn term_ns_sel(sel: &[(&str, &str)], key: &str, ns_sel: &[(&str, &str)]) -> core::PodAffinityTerm {
        core::PodAffinityTerm { namespace_selector: Some(selector(ns_sel)), ..term(sel, key) }
    }

    /// Pod (anti-)affinity: required affinity, required anti-affinity, preferred affinity, preferred anti-affinity.
    #[derive(Default)]
    pub(super) struct Aff {
        req: Vec<core::PodAffinityTerm>,
        anti: Vec<core::PodAffinityTerm>,
        pref: Vec<(i32, core::PodAffinityTerm)>,
        pref_anti: Vec<(i32, core::PodAffinityTerm)>,
    }

    impl Aff {
        pub(super) fn req(mut self, t: core::PodAffinityTerm) -> Self {
            self.req.push(t);
            self
        }
        pub(super) fn anti(mut self, t: core::PodAffinityTerm) -> Self {
            self.anti.push(t);
            self
        }
        pub(super) fn pref(mut self, w: i32, t: core::PodAffinityTerm) -> Self {
            self.pref.push((w, t));
            self
        }
        pub(super) fn pref_anti(mut self, w: i32, t: core::PodAffinityTerm) -> Self {
            self.pref_anti.push((w, t));
            self
        }
        pub(super) fn build(self) -> core::Affinity {
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

    pub(super) type Namespaces<'a> = &'a [(&'a str, &'a [(&'a str, &'a str)])];
    pub(super) type FilterCase<'a> = (&'a str, Vec<NodeBuilder>, Vec<PodBuilder>, Namespaces<'a>, PodBuilder, Vec<Code>);
    pub(super) type ScoreCase<'a> = (&'a str, Args, Vec<PodBuilder>, PodBuilder, Vec<i64>);

    pub(super) fn aff() -> Aff {
        Aff::default()
    }

    pub(super) fn snap_with_ns(nodes: &[NodeBuilder], pods: &[PodBuilder], ns: Namespaces) -> Snapshot {
        let mut s = snapshot(nodes, pods);
        for (name, labels) in ns {
            s.namespaces.insert((*name).into(), labels.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect());
        }
        s
    }

    /// Filter codes per node (all Success when PreFilter skips).
    pub(super) fn filter_codes(pl: &InterPodAffinity, snap: &Snapshot, p: &PodInfo) -> Vec<Code> {
        let mut st = CycleState::new();
        let (s, nodes) = pl.pre_filter(&mut st, p, snap);
        assert!(nodes.is_none());
        if s.is_skip() {
            return vec![Code::Success; snap.nodes.len()];
        }
        assert!(s.is_success(), "{s}");
        snap.nodes.iter().map(|n| pl.filter(&st, p, n).code).collect()
    }

    /// Normalized scores per node (all 0 when PreScore skips).
    pub(super) fn scores(pl: &InterPodAffinity, snap: &Snapshot, p: &PodInfo) -> Vec<i64> {
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

    /// A random pod shape: labels, namespace and (anti-)affinity terms over
    /// keys some nodes lack.
    pub(super) fn random_shape(r: &mut Rng, k: usize) -> PodBuilder {
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
    pub(super) fn filter_both(pl: &InterPodAffinity, snap: &Snapshot, p: &PodInfo) -> Vec<Code> {
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
}

#[cfg(test)]
mod tests {
    use super::test_support::*;

    /// A pod with many terms, each on a topology key of its own (the shape
    /// whose cost once grew with the square of the terms): scores and
    /// Filter verdicts equal a count from scratch, node by node.
    #[test]
    fn many_terms_match_a_count_from_scratch() {
        const KEYS: usize = 60;
        let key = |k: usize| format!("key-{k}");
        let mut r = Rng(0x2545_F491_4F6C_DD1D);
        let mut nodes: Vec<NodeBuilder> = Vec::new();
        for i in 0..8 {
            let mut n = node(&format!("n{i}"));
            // Every key but a few, with one of three values.
            for k in 0..KEYS {
                if r.below(10) != 0 {
                    n = n.label(&key(k), ["x", "y", "z"][r.below(3)]);
                }
                // The anti-affinity keys: n6 and n7 lack them, n0 and n4 share each with n0.
                if i < 6 {
                    n = n.label(&format!("anti-{k}"), &format!("v{}", (i + k) % 4));
                }
            }
            nodes.push(n);
        }
        let apps = ["a", "b", "c"];
        let mut pods: Vec<PodBuilder> = (0..20).map(|j| pod(&format!("e{j}")).label("app", apps[r.below(3)]).node(&format!("n{}", r.below(8)))).collect();
        pods.push(pod("d").label("app", "d").node("n0"));
        let snap = snap_with_ns(&nodes, &pods, &[("default", &[])]);
        // Preferred terms (weight, app, key, sign) and required anti-affinity terms (app, key).
        let preferred: Vec<(i64, &str, String, i64)> = (0..KEYS).map(|k| (1 + r.below(50) as i64, apps[r.below(3)], key(k), if r.below(2) == 0 { 1 } else { -1 })).collect();
        let anti: Vec<(&str, String)> = (0..KEYS).map(|k| ("d", format!("anti-{k}"))).collect();
        let a = preferred.iter().fold(aff(), |a, (w, app, k, sign)| if *sign > 0 { a.pref(*w as i32, term(&[("app", app)], k)) } else { a.pref_anti(*w as i32, term(&[("app", app)], k)) });
        let scored = pod("p").affinity(a.build()).info();
        let filtered = pod("q").affinity(anti.iter().fold(aff(), |a, (app, k)| a.anti(term(&[("app", app)], k))).build()).info();
        // From scratch: a node's raw score sums, over every term and every
        // existing pod it selects, the weight when both nodes share the key's value.
        let value = |n: &str, k: &str| snap.nodes.iter().find(|x| x.name() == n).and_then(|x| x.node.labels.get(k).cloned());
        let same = |a: &str, b: &str, k: &str| value(a, k).is_some_and(|v| Some(v) == value(b, k));
        let on = |e: &PodInfo| e.node_name.clone().unwrap_or_default();
        let raw: Vec<i64> = snap
            .nodes
            .iter()
            .map(|n| {
                let mut sum = 0;
                for (w, app, k, sign) in &preferred {
                    for e in snap.nodes.iter().flat_map(|m| m.pods.iter()) {
                        if e.labels.get("app") == Some(*app) && same(n.name(), &on(e), k) {
                            sum += sign * w;
                        }
                    }
                }
                sum
            })
            .collect();
        let (min, max) = (raw.iter().copied().min().unwrap_or(0), raw.iter().copied().max().unwrap_or(0));
        let want: Vec<i64> = raw.iter().map(|&s| if max > min { (100.0 * ((s - min) as f64 / (max - min) as f64)) as i64 } else { 0 }).collect();
        let pl = InterPodAffinity::default();
        assert_ne!(min, max, "the nodes score differently");
        assert_eq!(scores(&pl, &snap, &scored), want);
        let rejected: Vec<Code> = snap
            .nodes
            .iter()
            .map(|n| {
                let hit = anti.iter().any(|(app, k)| snap.nodes.iter().flat_map(|m| m.pods.iter()).any(|e| e.labels.get("app") == Some(*app) && same(n.name(), &on(e), k)));
                if hit { Code::Unschedulable } else { Code::Success }
            })
            .collect();
        assert_eq!(rejected.iter().filter(|c| **c == Code::Unschedulable).count(), 2, "{rejected:?}");
        assert_eq!(filter_both(&pl, &snap, &filtered), rejected);
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
            .map(|p| PluginEntry::at_every_point(p, 1))
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
