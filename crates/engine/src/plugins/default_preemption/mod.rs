//! DefaultPreemption (PostFilter): when a pod fits nowhere, find a node where
//! evicting pods of strictly lower priority lets it fit, evicting as few and
//! as unimportant pods as possible and respecting PodDisruptionBudgets where it
//! can (upstream `defaultpreemption` with `framework/preemption`).
//!
//! The steps, as upstream runs them:
//! 1. Eligibility: a pod with preemptionPolicy Never never preempts; a pod
//!    nominated to a node where a lower-priority victim of an earlier
//!    preemption is still terminating waits for it instead.
//! 2. Candidates: only nodes whose Filter status was Unschedulable (not
//!    UnschedulableAndUnresolvable) are dry-run, stopping once enough
//!    candidates are found (`minCandidateNodesPercentage`/`Absolute`).
//! 3. Dry run per node (on a cloned NodeInfo and CycleState): remove every
//!    lower-priority pod; if the pod still does not fit, the node is out.
//!    Otherwise add pods back, PDB-violating ones first, each group from the
//!    most important down, keeping each one that leaves the pod fitting.
//! 4. Pick one candidate: fewest PDB violations, lowest highest-priority
//!    victim, lowest sum of priorities, fewest victims, latest start of the
//!    highest-priority victims, then the first.
//!
//! Cut by what each step does, as upstream's `defaultpreemption` plugin and
//! `framework/preemption` package are: this file has the plugin, its args,
//! eligibility and PostFilter itself; `candidates` the dry run over the
//! potential nodes (with the results kept for the next preemptor of the same
//! shape); `victims` the victims on one node (with the PodDisruptionBudget
//! split); `pick` the choice of one candidate.

mod candidates;
mod pick;
mod victims;

use std::sync::{Arc, Mutex};

use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::status::ReasonCounts;
use crate::framework::{Code, CycleState, Events, Framework, NodeStatuses, Plugin, PostFilterPlugin, PostFilterResult, Status};
use berth_model::PodInfo;

pub use candidates::Candidate;
pub use pick::pick_one;
pub use victims::{more_important, select_victims, split_by_pdb};

use candidates::DryRuns;

/// Plugin name.
pub const NAME: &str = "DefaultPreemption";

/// Reason for a node with no pod of lower priority.
pub const REASON_NO_VICTIMS: &str = "No preemption victims found for incoming pod";
/// Reason for nodes that were not dry-run (preemption cannot help there).
pub const REASON_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// Message for a pod whose preemptionPolicy is Never.
pub const MSG_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
/// Message for a pod waiting for an earlier preemption's victims to go.
pub const MSG_TERMINATING: &str = "not eligible due to a terminating pod on the nominated node.";

/// DefaultPreemptionArgs (v1 defaults: 10 % and 100 nodes).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// Minimum share of the potential nodes to dry-run, 0..=100 (default 10).
    pub min_candidate_nodes_percentage: Option<i32>,
    /// Minimum number of candidates to find (default 100).
    pub min_candidate_nodes_absolute: Option<i32>,
    /// apiVersion/kind are accepted and ignored.
    #[serde(default)]
    pub api_version: Option<String>,
    /// See `api_version`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// Preemption of lower-priority pods.
#[derive(Debug)]
pub struct DefaultPreemption {
    min_percentage: i64,
    min_absolute: i64,
    /// Dry-run results of the last preemptor shape, per node.
    kept: Mutex<DryRuns>,
}

impl Default for DefaultPreemption {
    fn default() -> Self {
        DefaultPreemption { min_percentage: 10, min_absolute: 100, kept: Mutex::default() }
    }
}

impl DefaultPreemption {
    /// Builds the plugin, validating its args (upstream `ValidateDefaultPreemptionArgs`).
    pub fn new(args: Args) -> Result<Self, String> {
        let pct = args.min_candidate_nodes_percentage.unwrap_or(10);
        let abs = args.min_candidate_nodes_absolute.unwrap_or(100);
        let mut errs = Vec::new();
        if !(0..=100).contains(&pct) {
            errs.push(format!("minCandidateNodesPercentage: Invalid value: {pct}: not in valid range [0, 100]"));
        }
        if abs < 0 {
            errs.push(format!("minCandidateNodesAbsolute: Invalid value: {abs}: not in valid range [0, inf)"));
        }
        if pct == 0 && abs == 0 {
            errs.push("minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute".into());
            errs.push("minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage".into());
        }
        match errs.len() {
            0 => Ok(DefaultPreemption { min_percentage: i64::from(pct), min_absolute: i64::from(abs), ..Default::default() }),
            1 => Err(errs.remove(0)),
            _ => Err(format!("[{}]", errs.join(", "))),
        }
    }

    /// How many candidates to find among `n` potential nodes (upstream `calculateNumCandidates`).
    pub fn num_candidates(&self, n: usize) -> usize {
        let n64 = n as i64;
        let k = (n64 * self.min_percentage / 100).max(self.min_absolute).min(n64);
        k.max(0) as usize
    }
}

/// Upstream `PodEligibleToPreemptOthers`: Err carries the reason.
pub fn eligible(pod: &PodInfo, snap: &Snapshot, statuses: &NodeStatuses) -> Result<(), &'static str> {
    if pod.preemption_never {
        return Err(MSG_NEVER);
    }
    let Some(nn) = pod.nominated_node.as_deref() else { return Ok(()) };
    let Some(idx) = snap.node_index(nn) else { return Ok(()) };
    // A node absent from the statuses counts as UnschedulableAndUnresolvable.
    let code = statuses.get(idx).map_or(Code::UnschedulableAndUnresolvable, |s| s.code);
    if code == Code::UnschedulableAndUnresolvable {
        return Ok(());
    }
    if snap.nodes[idx].pods.iter().any(|p| p.priority < pod.priority && p.preempted_by_scheduler) {
        return Err(MSG_TERMINATING);
    }
    Ok(())
}

/// Upstream `FitError.Error()` for the nodes preemption did not help: the
/// dry-run statuses, and every other node as "not helpful".
fn no_candidate_message(num_nodes: usize, failed: &[(usize, Status)]) -> String {
    let mut hist = ReasonCounts::default();
    for (_, s) in failed {
        hist.add_status(s);
    }
    let absent = num_nodes.saturating_sub(failed.len());
    if absent > 0 {
        hist.add(REASON_NOT_HELPFUL, absent);
    }
    let parts = hist.parts();
    let mut msg = format!("0/{num_nodes} nodes are available:");
    if !parts.is_empty() {
        msg.push_str(&format!(" {}.", parts.join(", ")));
    }
    msg
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> Events {
        // It never rejects a pod itself; the plugins whose rejections it tries to resolve requeue it.
        Events::default()
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(&self, fw: &Framework, state: &CycleState, pod: &Arc<PodInfo>, snap: &Snapshot, statuses: &NodeStatuses) -> (Status, PostFilterResult) {
        let fail = |code: Code, msg: String| (Status::new(code, format!("preemption: {msg}")), PostFilterResult::default());
        if let Err(m) = eligible(pod, snap, statuses) {
            return fail(Code::Unschedulable, m.to_string());
        }
        if snap.nodes.is_empty() {
            return fail(Code::Error, "no nodes available".into());
        }
        // Nodes where removing pods may help: those Filter found Unschedulable.
        let potential: Vec<usize> = (0..snap.nodes.len()).filter(|&i| statuses.get(i).is_some_and(|s| s.code == Code::Unschedulable)).collect();
        let (candidates, failed, errors) = if potential.is_empty() {
            (Vec::new(), Vec::new(), Vec::new())
        } else {
            // Upstream starts at a random offset; berth starts at the first
            // potential node so that explain is reproducible.
            self.dry_run(fw, state, pod, snap, &potential, 0)
        };
        if candidates.is_empty() {
            if !errors.is_empty() {
                let msg = match errors.as_slice() {
                    [one] => one.clone(),
                    many => format!("[{}]", many.join(", ")),
                };
                return fail(Code::Error, msg);
            }
            return fail(Code::Unschedulable, no_candidate_message(snap.nodes.len(), &failed));
        }
        let Some(best) = pick_one(&candidates) else {
            return fail(Code::Unschedulable, "no candidate node for preemption".into());
        };
        let c = &candidates[best];
        (
            Status::success(),
            PostFilterResult { nominated_node: Some(snap.nodes[c.node].name().to_string()), victims: c.victims.clone(), message: None, deallocations: vec![] },
        )
    }
}

/// Builders the tests of every part share.
#[cfg(test)]
mod test_support {
    pub(super) use super::*;
    pub(super) use crate::cache::Pdb;
    pub(super) use crate::framework::{CycleOptions, CycleOutcome, PluginEntry};
    pub(super) use crate::plugins::node_ports::NodePorts;
    pub(super) use crate::plugins::node_resources_fit::NodeResourcesFit;
    pub(super) use crate::plugins::node_unschedulable::NodeUnschedulable;
    pub(super) use crate::plugins::priority_sort::PrioritySort;
    pub(super) use crate::testing::{node, pod, snapshot, NodeBuilder, PodBuilder};
    pub(super) use berth_model::selector::Selector;
    pub(super) use std::collections::BTreeMap;

    pub(super) fn framework() -> Framework {
        use crate::register;
        let plugins = vec![
            register!(Arc::new(PrioritySort)),
            register!(Arc::new(NodeUnschedulable)),
            register!(Arc::new(NodePorts)),
            register!(Arc::new(NodeResourcesFit::default())),
            register!(Arc::new(DefaultPreemption::default())),
        ];
        let entries = plugins.into_iter().map(|p| PluginEntry::at_every_point(p, 1)).collect();
        Framework::new("test".into(), entries, None, 1)
    }

    pub(super) fn pdb(name: &str, label: (&str, &str), allowed: i64) -> Pdb {
        let mut m = BTreeMap::new();
        m.insert(label.0.to_string(), label.1.to_string());
        Pdb { namespace: "default".into(), name: name.into(), selector: Selector::from_map(&m), disruptions_allowed: allowed, disrupted_pods: vec![] }
    }


    pub(super) fn low(name: &str, n: &str, prio: i32, cpu: &str) -> PodBuilder {
        pod(name).node(n).priority(prio).req(cpu, "")
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;

    fn run(nodes: &[NodeBuilder], pods: &[PodBuilder], pdbs: Vec<Pdb>, p: &PodBuilder) -> CycleOutcome {
        let mut snap = snapshot(nodes, pods);
        snap.pdbs = pdbs;
        let pi = p.info();
        if let Some(n) = pi.nominated_node.clone() {
            snap.nominate(pi.clone(), &n);
        }
        framework().schedule(&pi, &snap, CycleOptions { explain: true, ..Default::default() }).0
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    /// One row: nodes (4 cpu each unless set), bound pods, PDBs, the preemptor,
    /// and the expected nomination and victims (names) or the expected end of the message.
    struct Row {
        name: &'static str,
        nodes: Vec<NodeBuilder>,
        pods: Vec<PodBuilder>,
        pdbs: Vec<Pdb>,
        pod: PodBuilder,
        nominated: Option<&'static str>,
        victims: Vec<&'static str>,
        message_ends: &'static str,
    }


    #[test]
    fn post_filter_table() {
        let rows = vec![
            Row {
                name: "preemptionPolicy Never is not eligible",
                nodes: vec![node("n1")],
                pods: vec![low("a", "n1", 0, "4")],
                pdbs: vec![],
                pod: pod("p").priority(100).req("1", "").preempt_never(),
                nominated: None,
                victims: vec![],
                message_ends: "preemption: not eligible due to preemptionPolicy=Never.",
            },
            Row {
                name: "victim of an earlier preemption still terminating on the nominated node",
                nodes: vec![node("n1"), node("n2")],
                pods: vec![low("a", "n1", 0, "3").preempted(), low("b", "n2", 0, "4")],
                pdbs: vec![],
                pod: pod("p").priority(100).req("2", "").nominated("n1"),
                nominated: None,
                victims: vec![],
                message_ends: "preemption: not eligible due to a terminating pod on the nominated node.",
            },
            Row {
                name: "terminating pod not deleted by preemption does not block",
                nodes: vec![node("n1")],
                pods: vec![low("a", "n1", 0, "3").terminating()],
                pdbs: vec![],
                pod: pod("p").priority(100).req("2", "").nominated("n1"),
                nominated: Some("n1"),
                victims: vec!["a"],
                message_ends: "",
            },
            Row {
                name: "nominated node unresolvable: eligible again",
                nodes: vec![node("n1").unschedulable(), node("n2")],
                pods: vec![low("a", "n1", 0, "3").preempted(), low("b", "n2", 0, "4")],
                pdbs: vec![],
                pod: pod("p").priority(100).req("2", "").nominated("n1"),
                nominated: Some("n2"),
                victims: vec!["b"],
                message_ends: "",
            },
            Row {
                name: "only strictly lower priority pods are victims",
                nodes: vec![node("n1"), node("n2").unschedulable(), node("n3").unschedulable()],
                pods: vec![low("a", "n1", 100, "4")],
                pdbs: vec![],
                pod: pod("p").priority(100).req("1", ""),
                nominated: None,
                victims: vec![],
                message_ends: "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.",
            },
            Row {
                name: "pod does not fit even without the lower-priority pods",
                nodes: vec![node("n1")],
                pods: vec![low("a", "n1", 0, "1"), low("b", "n1", 100, "2")],
                pdbs: vec![],
                pod: pod("p").priority(100).req("3", ""),
                nominated: None,
                victims: vec![],
                message_ends: "preemption: 0/1 nodes are available: 1 Insufficient cpu.",
            },
            Row {
                name: "fewest victims: higher priority and older pods are reprieved first",
                nodes: vec![node("n1")],
                pods: vec![low("a", "n1", 5, "1"), low("b", "n1", 1, "1").started(2000), low("c", "n1", 1, "1").started(1000), low("d", "n1", 1, "1").started(3000)],
                pdbs: vec![],
                pod: pod("p").priority(100).req("2", ""),
                nominated: Some("n1"),
                victims: vec!["b", "d"],
                message_ends: "",
            },
            Row {
                name: "PDB-protected pods are reprieved before others",
                nodes: vec![node("n1")],
                pods: vec![low("a", "n1", 1, "2").label("app", "db"), low("b", "n1", 5, "2")],
                pdbs: vec![pdb("db", ("app", "db"), 0)],
                pod: pod("p").priority(100).req("2", ""),
                nominated: Some("n1"),
                victims: vec!["b"],
                message_ends: "",
            },
            Row {
                name: "a PDB with room does not protect",
                nodes: vec![node("n1")],
                pods: vec![low("a", "n1", 1, "2").label("app", "db"), low("b", "n1", 5, "2")],
                pdbs: vec![pdb("db", ("app", "db"), 1)],
                pod: pod("p").priority(100).req("2", ""),
                nominated: Some("n1"),
                victims: vec!["a"],
                message_ends: "",
            },
            Row {
                name: "node with fewer PDB violations wins over lower priorities",
                nodes: vec![node("n1"), node("n2")],
                pods: vec![low("a", "n1", 1, "4").label("app", "db"), low("b", "n2", 50, "4")],
                pdbs: vec![pdb("db", ("app", "db"), 0)],
                pod: pod("p").priority(100).req("2", ""),
                nominated: Some("n2"),
                victims: vec!["b"],
                message_ends: "",
            },
            Row {
                name: "lowest highest-priority victim",
                nodes: vec![node("n1"), node("n2")],
                pods: vec![low("a", "n1", 10, "4"), low("b1", "n2", 5, "2"), low("b2", "n2", 5, "2")],
                pdbs: vec![],
                pod: pod("p").priority(100).req("3", ""),
                nominated: Some("n2"),
                victims: vec!["b1", "b2"],
                message_ends: "",
            },
        ];
        for r in rows {
            let o = run(&r.nodes, &r.pods, r.pdbs, &r.pod);
            assert!(o.selected.is_none(), "{}: the pod fits", r.name);
            let pf = o.post_filter.clone().unwrap_or_default();
            assert_eq!(pf.nominated_node.as_deref(), r.nominated, "{}: {:?}", r.name, o.message);
            let got = sorted(pf.victims.iter().map(|v| v.name.clone()).collect());
            assert_eq!(got, sorted(r.victims.iter().map(|s| s.to_string()).collect()), "{}", r.name);
            let msg = o.message.unwrap_or_default();
            // Upstream's FitError appends the PostFilter message with no
            // period of its own: one final period.
            assert!(msg.ends_with(r.message_ends) && !msg.ends_with(".."), "{}: {msg}", r.name);
        }
    }


    // Found by the reverse differential (seed 6): two candidate victims
    // tied in MoreImportantPod (same priority, the same start time to the
    // second) are reprieved in the order the node holds its pods, and an
    // update moves a pod to the end (remove, swap the last into its place,
    // append), as in upstream's NodeInfo; which of them is evicted follows.
    #[test]
    fn tied_victims_follow_the_nodes_pod_order_which_updates_change() {
        let nodes = [node("n1")];
        let pods = [
            low("h", "n1", 1000, "2"),
            low("a", "n1", 0, "1").started(1000),
            low("b", "n1", 0, "500m").started(1000),
            low("h2", "n1", 1000, "500m"),
        ];
        let p = pod("p").priority(100).req("250m", "");
        let victims = |snap: &crate::cache::Snapshot| {
            let o = framework()
                .schedule(&p.info(), snap, CycleOptions::default())
                .0;
            o.post_filter
                .unwrap_or_default()
                .victims
                .iter()
                .map(|v| v.name.clone())
                .collect::<Vec<_>>()
        };
        let mut snap = snapshot(&nodes, &pods);
        // Order h, a, b, h2: a is reprieved first, b goes.
        assert_eq!(victims(&snap), ["b"]);
        // a is updated (its status, say): h, h2, b, a; now b is reprieved first.
        snap.add_pod(pods[1].info());
        assert_eq!(victims(&snap), ["a"]);
    }

    #[test]
    fn args_table() {
        type ArgsRow = (&'static str, serde_json::Value, Result<(i64, i64), &'static str>);
        let rows: Vec<ArgsRow> = vec![
            ("defaults", serde_json::json!({}), Ok((10, 100))),
            ("apiVersion and kind", serde_json::json!({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "DefaultPreemptionArgs"}), Ok((10, 100))),
            ("zero percentage alone", serde_json::json!({"minCandidateNodesPercentage": 0}), Ok((0, 100))),
            ("zero absolute alone", serde_json::json!({"minCandidateNodesAbsolute": 0}), Ok((10, 0))),
            ("percentage above 100", serde_json::json!({"minCandidateNodesPercentage": 101}), Err("minCandidateNodesPercentage")),
            ("negative percentage", serde_json::json!({"minCandidateNodesPercentage": -1}), Err("minCandidateNodesPercentage")),
            ("negative absolute", serde_json::json!({"minCandidateNodesAbsolute": -1}), Err("minCandidateNodesAbsolute")),
            ("both zero", serde_json::json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}), Err("cannot be zero at the same time")),
            ("unknown field", serde_json::json!({"minCandidateNodes": 1}), Err("unknown field")),
        ];
        for (name, v, want) in rows {
            let got = serde_json::from_value::<Args>(v).map_err(|e| e.to_string()).and_then(DefaultPreemption::new);
            match (got, want) {
                (Ok(p), Ok((pct, abs))) => assert_eq!((p.min_percentage, p.min_absolute), (pct, abs), "{name}"),
                (Err(e), Err(part)) => assert!(e.contains(part), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn num_candidates_table() {
        let rows = [(10, 100, 5, 5), (10, 100, 5000, 500), (10, 100, 200, 100), (0, 3, 50, 3), (50, 0, 7, 3), (100, 0, 9, 9)];
        for (pct, abs, n, want) in rows {
            let p = DefaultPreemption { min_percentage: pct, min_absolute: abs, ..Default::default() };
            assert_eq!(p.num_candidates(n), want, "{pct}% {abs} of {n}");
        }
    }


    mod property {
        use super::*;
        use proptest::prelude::*;

        /// Node cpus (cores); pods as (node, priority, cpu in 100m); preemptor priority and cpu (100m).
        type Cluster = (Vec<u32>, Vec<(usize, i32, u32)>, i32, u32);

        fn cluster() -> impl Strategy<Value = Cluster> {
            (
                prop::collection::vec(2u32..=8, 3..=6),
                prop::collection::vec((0usize..6, 0i32..6, 1u32..=20), 0..30),
                0i32..10,
                1u32..=60,
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn victims_are_lower_priority_and_make_room((node_cpus, pods, prio, cpu) in cluster()) {
                let nodes: Vec<NodeBuilder> = node_cpus.iter().enumerate().map(|(i, c)| node(&format!("n{i}")).alloc(&c.to_string(), "32Gi", 110)).collect();
                let mut snap = snapshot(&nodes, &[]);
                // Place each pod on its node while it fits.
                for (k, &(n, p, c)) in pods.iter().enumerate() {
                    let n = n % nodes.len();
                    let milli = i64::from(c) * 100;
                    let ni = &snap.nodes[n];
                    if ni.requested.milli_cpu + milli > ni.node.allocatable.milli_cpu {
                        continue;
                    }
                    snap.add_pod(pod(&format!("q{k}")).node(&format!("n{n}")).priority(p).req(&format!("{milli}m"), "").created(k as i64).info());
                }
                let fw = framework();
                let preemptor = pod("p").priority(prio).req(&format!("{}m", u64::from(cpu) * 100), "").info();
                let explain = CycleOptions { explain: true, ..Default::default() };
                let (o, _) = fw.schedule(&preemptor, &snap, explain);
                if o.selected.is_some() {
                    return Ok(());
                }
                match o.post_filter.and_then(|pf| pf.nominated_node.clone().map(|n| (n, pf.victims))) {
                    Some((nn, victims)) => {
                        prop_assert!(!victims.is_empty());
                        for v in &victims {
                            prop_assert!(v.priority < prio, "victim {} has priority {} >= {}", v.name, v.priority, prio);
                            prop_assert_eq!(v.node_name.as_deref(), Some(nn.as_str()));
                        }
                        let mut after = snap.clone();
                        for v in &victims {
                            after.remove_pod(&v.uid);
                        }
                        let (o2, _) = fw.schedule(&preemptor, &after, explain);
                        let idx = after.node_index(&nn).unwrap_or(usize::MAX);
                        prop_assert!(o2.feasible.contains(&idx), "{} still does not fit on {}", preemptor.name, nn);
                    }
                    None => {
                        // No node works even without every lower-priority pod.
                        for i in 0..snap.nodes.len() {
                            let mut after = snap.clone();
                            let lower: Vec<String> = after.nodes[i].pods.iter().filter(|p| p.priority < prio).map(|p| p.uid.clone()).collect();
                            for u in lower {
                                after.remove_pod(&u);
                            }
                            let (o2, _) = fw.schedule(&preemptor, &after, explain);
                            prop_assert!(!o2.feasible.contains(&i), "preemption missed node {}", i);
                        }
                    }
                }
            }
        }
    }
}
