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

use std::cmp::Ordering;
use std::hash::Hasher;
use std::sync::{Arc, Mutex, TryLockError};

use serde::Deserialize;

use crate::cache::{Pdb, Snapshot};
use crate::framework::status::ReasonCounts;
use crate::framework::{Code, CycleState, Events, Framework, NodeStatuses, Plugin, Points, PostFilterResult, Status};
use berth_model::{NodeInfo, NodeSpec, PodInfo};

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

/// One node's dry-run outcome: the victims and PDB violations, or the node's status.
type Victims = Result<(Vec<Arc<PodInfo>>, usize), Status>;

/// What a node's dry run depends on besides the node itself.
#[derive(Clone, Debug, PartialEq, Eq)]
struct DryRunKey {
    /// The framework (its address while it runs this cycle).
    framework: usize,
    /// The preemptor's signature: every field of the pod but its identity.
    signature: u64,
    /// The Filter plugins that run, all node-local.
    filters: Vec<&'static str>,
    /// The PreFilter plugins that answered Skip (their AddPod/RemovePod do not run).
    skipped: Vec<&'static str>,
    /// A fingerprint of the PodDisruptionBudgets.
    pdbs: u64,
    /// Number of nodes.
    nodes: usize,
}

/// Dry-run results kept for the next preemptor of the same shape.
///
/// When every Filter plugin that runs is node-local ([`Plugin::reusable`]:
/// its verdict is a function of the pod's signature and of the one node),
/// a node's dry run (which removes and re-adds that node's pods and runs
/// those filters) is a function of the pod's signature, the node (its
/// object and pods), the PodDisruptionBudgets and the pods nominated to the
/// node. So a node that has not changed since, with no nominated pods,
/// gives the result it gave then.
#[derive(Debug, Default)]
struct DryRuns {
    key: Option<DryRunKey>,
    /// Per node index: the node object and generation the result was found at, and the result.
    nodes: Vec<Option<(Arc<NodeSpec>, u64, Victims)>>,
}

impl DryRuns {
    fn get(&self, i: usize, node: &NodeInfo) -> Option<&Victims> {
        match self.nodes.get(i) {
            Some(Some((spec, generation, v))) if Arc::ptr_eq(spec, &node.node) && *generation == node.generation => Some(v),
            _ => None,
        }
    }

    fn set(&mut self, i: usize, node: &NodeInfo, v: &Victims) {
        if let Some(slot) = self.nodes.get_mut(i) {
            *slot = Some((node.node.clone(), node.generation, v.clone()));
        }
    }
}

/// Feeds formatted text to a hasher.
struct HashWriter<'a, H: Hasher>(&'a mut H);

impl<H: Hasher> std::fmt::Write for HashWriter<'_, H> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// What a dry run over this cycle depends on beyond the nodes, or None when
/// a Filter plugin that runs is not node-local (or the pod has no signature).
fn dry_run_key(fw: &Framework, state: &CycleState, pod: &PodInfo, snap: &Snapshot) -> Option<DryRunKey> {
    if pod.signature == 0 {
        return None;
    }
    let filters: Vec<&'static str> = fw.plugins_at(Points::FILTER).into_iter().filter(|n| !state.filter_skipped(n)).collect();
    let node_local = |name: &str| fw.plugins().find(|p| p.name() == name).is_some_and(|p| p.reusable());
    if !filters.iter().all(|n| node_local(n)) {
        return None;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if !snap.pdbs.is_empty() {
        use std::fmt::Write;
        write!(HashWriter(&mut h), "{:?}", snap.pdbs).ok()?;
    }
    Some(DryRunKey {
        framework: fw as *const Framework as usize,
        signature: pod.signature,
        filters,
        skipped: state.skip_filter.clone(),
        pdbs: h.finish(),
        nodes: snap.nodes.len(),
    })
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

/// A node where preemption lets the pod fit, with the pods to evict.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Node index in the snapshot.
    pub node: usize,
    /// Victims, most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// How many victims' eviction violates a PodDisruptionBudget.
    pub pdb_violations: usize,
}

/// Upstream `MoreImportantPod`: higher priority first, then the earlier start.
pub fn more_important(a: &PodInfo, b: &PodInfo) -> Ordering {
    b.priority.cmp(&a.priority).then(a.start_ms.cmp(&b.start_ms))
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

/// Upstream `filterPodsWithPDBViolation`: splits pods (order kept) into those
/// whose eviction would take some matching budget below zero, and the others.
pub fn split_by_pdb(pods: Vec<Arc<PodInfo>>, pdbs: &[Pdb]) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i64> = pdbs.iter().map(|p| p.disruptions_allowed).collect();
    let mut violating = Vec::new();
    let mut ok = Vec::new();
    for p in pods {
        let mut violated = false;
        if !p.labels.is_empty() {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.namespace != p.namespace || pdb.selector.is_everything() || !pdb.selector.matches(&p.labels) {
                    continue;
                }
                // Already being disrupted: counted by the budget already.
                if pdb.disrupted_pods.iter().any(|n| *n == p.name) {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated { violating.push(p) } else { ok.push(p) }
    }
    (violating, ok)
}

fn as_error(s: Status) -> Status {
    Status::error(s.message())
}

/// Upstream `SelectVictimsOnNode`: the pods to evict from `node` so that `pod`
/// fits, with the number of PDB violations; Err is the node's status when
/// preemption there cannot help.
pub fn select_victims(fw: &Framework, state: &CycleState, pod: &PodInfo, node: &NodeInfo, snap: &Snapshot) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
    let mut potential: Vec<Arc<PodInfo>> = node.pods.iter().filter(|p| p.priority < pod.priority).cloned().collect();
    if potential.is_empty() {
        return Err(Status::unresolvable(REASON_NO_VICTIMS));
    }
    let mut ni = node.clone();
    let mut st = state.clone();
    for v in &potential {
        ni.remove_pod(&v.uid);
        let s = fw.run_remove_pod(&mut st, pod, v, &ni, snap);
        if !s.is_success() {
            return Err(as_error(s));
        }
    }
    let s = fw.run_filter_with_nominated(&st, pod, &ni, snap);
    if !s.is_success() {
        return Err(s);
    }
    potential.sort_by(|a, b| more_important(a, b));
    let (violating, non_violating) = split_by_pdb(potential, &snap.pdbs);
    let both = !violating.is_empty() && !non_violating.is_empty();
    let mut victims = Vec::new();
    let mut violations = 0;
    for (group, counts) in [(violating, true), (non_violating, false)] {
        for p in group {
            ni.add_pod(p.clone());
            let s = fw.run_add_pod(&mut st, pod, &p, &ni, snap);
            if !s.is_success() {
                return Err(as_error(s));
            }
            if fw.run_filter_with_nominated(&st, pod, &ni, snap).is_success() {
                continue;
            }
            ni.remove_pod(&p.uid);
            let s = fw.run_remove_pod(&mut st, pod, &p, &ni, snap);
            if !s.is_success() {
                return Err(as_error(s));
            }
            if counts {
                violations += 1;
            }
            victims.push(p);
        }
    }
    if both {
        victims.sort_by(|a, b| more_important(a, b));
    }
    Ok((victims, violations))
}

/// The start time of the highest-priority victims: the earliest among them
/// (upstream `GetEarliestPodStartTime`).
fn earliest_top_start(victims: &[Arc<PodInfo>]) -> i64 {
    let Some(first) = victims.first() else { return i64::MIN };
    let mut top = first.priority;
    let mut start = first.start_ms;
    for v in victims {
        if v.priority > top {
            top = v.priority;
            start = v.start_ms;
        } else if v.priority == top && v.start_ms < start {
            start = v.start_ms;
        }
    }
    start
}

/// Upstream `pickOneNodeForPreemption` with the default criteria, each a score
/// where higher wins, applied in turn to the candidates still tied.
pub fn pick_one(candidates: &[Candidate]) -> Option<usize> {
    type Score = fn(&Candidate) -> i64;
    const CRITERIA: [Score; 5] = [
        // Fewest PDB violations.
        |c| -(c.pdb_violations as i64),
        // Lowest highest-priority victim.
        |c| -i64::from(c.victims.first().map_or(i32::MIN, |v| v.priority)),
        // Lowest sum of priorities, each shifted to be non-negative.
        |c| -c.victims.iter().map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1).sum::<i64>(),
        // Fewest victims.
        |c| -(c.victims.len() as i64),
        // Latest start among the highest-priority victims.
        |c| earliest_top_start(&c.victims),
    ];
    let mut remaining: Vec<usize> = (0..candidates.len()).collect();
    for f in CRITERIA {
        if remaining.len() <= 1 {
            break;
        }
        let best = remaining.iter().map(|&i| f(&candidates[i])).max()?;
        remaining.retain(|&i| f(&candidates[i]) == best);
    }
    remaining.first().copied()
}

impl DefaultPreemption {
    /// Upstream `DryRunPreemption` over the potential nodes from `offset`:
    /// the candidates (non-violating first) and the statuses of the nodes
    /// where preemption does not help.
    fn dry_run(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
        potential: &[usize],
        offset: usize,
    ) -> (Vec<Candidate>, Vec<(usize, Status)>, Vec<String>) {
        let want = self.num_candidates(potential.len());
        let mut non_violating: Vec<Candidate> = Vec::new();
        let mut violating: Vec<Candidate> = Vec::new();
        let mut failed = Vec::new();
        let mut errors = Vec::new();
        // Results kept from the last preemptor of this shape (see DryRuns).
        let mut kept = match self.kept.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => {
                let mut g = p.into_inner();
                *g = DryRuns::default();
                self.kept.clear_poison();
                Some(g)
            }
            Err(TryLockError::WouldBlock) => None,
        };
        let key = kept.as_ref().and_then(|_| dry_run_key(fw, state, pod, snap));
        match (kept.as_deref_mut(), &key) {
            (Some(k), Some(key)) => {
                if k.key.as_ref() != Some(key) {
                    k.key = Some(key.clone());
                    k.nodes.clear();
                    k.nodes.resize(snap.nodes.len(), None);
                }
            }
            _ => kept = None,
        }
        for k in 0..potential.len() {
            let idx = potential[(offset + k) % potential.len()];
            let node = &snap.nodes[idx];
            // Pods nominated to the node are counted by the filters: such a node is not kept.
            let keep = !snap.nominated.contains_key(node.name());
            let found = match kept.as_deref_mut() {
                Some(c) if keep => match c.get(idx, node) {
                    Some(v) => v.clone(),
                    None => {
                        let v = select_victims(fw, state, pod, node, snap);
                        if v.as_ref().err().is_none_or(|s| s.code != Code::Error) {
                            c.set(idx, node, &v);
                        }
                        v
                    }
                },
                _ => select_victims(fw, state, pod, node, snap),
            };
            let status = match found {
                Ok((victims, _)) if victims.is_empty() => Status::error(format!("expected at least one victim pod on node {:?}", node.name())),
                Ok((victims, pdb_violations)) => {
                    let c = Candidate { node: idx, victims, pdb_violations };
                    let list = if pdb_violations == 0 { &mut non_violating } else { &mut violating };
                    if list.len() < want {
                        list.push(c);
                    }
                    if !non_violating.is_empty() && non_violating.len() + violating.len() >= want {
                        break;
                    }
                    continue;
                }
                Err(s) => s,
            };
            if status.code == Code::Error {
                errors.push(status.message());
            }
            failed.push((idx, status));
        }
        non_violating.extend(violating);
        (non_violating, failed, errors)
    }
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
    fn points(&self) -> Points {
        Points::POST_FILTER
    }
    fn events(&self) -> Events {
        // It never rejects a pod itself; the plugins whose rejections it tries to resolve requeue it.
        Events::default()
    }
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
            PostFilterResult { nominated_node: Some(snap.nodes[c.node].name().to_string()), victims: c.victims.clone(), message: None },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{CycleOptions, CycleOutcome, PluginEntry};
    use berth_model::selector::Selector;
    use crate::plugins::node_ports::NodePorts;
    use crate::plugins::node_resources_fit::NodeResourcesFit;
    use crate::plugins::node_unschedulable::NodeUnschedulable;
    use crate::plugins::priority_sort::PrioritySort;
    use crate::testing::{node, pod, snapshot, NodeBuilder, PodBuilder};
    use std::collections::BTreeMap;

    fn framework() -> Framework {
        let plugins: Vec<Arc<dyn Plugin>> =
            vec![Arc::new(PrioritySort), Arc::new(NodeUnschedulable), Arc::new(NodePorts), Arc::new(NodeResourcesFit::default()), Arc::new(DefaultPreemption::default())];
        let entries = plugins
            .into_iter()
            .map(|p| {
                let pts = p.points();
                (PluginEntry { plugin: p, weight: 1 }, pts)
            })
            .collect();
        Framework::new("test".into(), entries, None, 1)
    }

    fn pdb(name: &str, label: (&str, &str), allowed: i64) -> Pdb {
        let mut m = BTreeMap::new();
        m.insert(label.0.to_string(), label.1.to_string());
        Pdb { namespace: "default".into(), name: name.into(), selector: Selector::from_map(&m), disruptions_allowed: allowed, disrupted_pods: vec![] }
    }

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

    fn low(name: &str, n: &str, prio: i32, cpu: &str) -> PodBuilder {
        pod(name).node(n).priority(prio).req(cpu, "")
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
                message_ends: "preemption: not eligible due to preemptionPolicy=Never..",
            },
            Row {
                name: "victim of an earlier preemption still terminating on the nominated node",
                nodes: vec![node("n1"), node("n2")],
                pods: vec![low("a", "n1", 0, "3").preempted(), low("b", "n2", 0, "4")],
                pdbs: vec![],
                pod: pod("p").priority(100).req("2", "").nominated("n1"),
                nominated: None,
                victims: vec![],
                message_ends: "preemption: not eligible due to a terminating pod on the nominated node..",
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
                message_ends: "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling..",
            },
            Row {
                name: "pod does not fit even without the lower-priority pods",
                nodes: vec![node("n1")],
                pods: vec![low("a", "n1", 0, "1"), low("b", "n1", 100, "2")],
                pdbs: vec![],
                pod: pod("p").priority(100).req("3", ""),
                nominated: None,
                victims: vec![],
                message_ends: "preemption: 0/1 nodes are available: 1 Insufficient cpu..",
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
            assert!(msg.ends_with(r.message_ends), "{}: {msg}", r.name);
        }
    }

    fn cand(node: usize, pdb: usize, victims: &[(i32, i64)]) -> Candidate {
        let victims = victims
            .iter()
            .enumerate()
            .map(|(i, &(priority, start_ms))| Arc::new(PodInfo { name: format!("v{node}-{i}"), priority, start_ms, ..Default::default() }))
            .collect();
        Candidate { node, victims, pdb_violations: pdb }
    }

    #[test]
    fn pick_one_criteria() {
        let rows: Vec<(&str, Vec<Candidate>, usize)> = vec![
            ("single candidate", vec![cand(0, 3, &[(9, 0)])], 0),
            ("fewest PDB violations", vec![cand(0, 1, &[(1, 0)]), cand(1, 0, &[(9, 0), (9, 0)])], 1),
            ("lowest highest priority", vec![cand(0, 0, &[(5, 0)]), cand(1, 0, &[(3, 0), (3, 0), (3, 0)])], 1),
            ("lowest sum of priorities", vec![cand(0, 0, &[(5, 0), (4, 0)]), cand(1, 0, &[(5, 0), (2, 0)])], 1),
            ("negative priorities: fewer pods win the sum", vec![cand(0, 0, &[(-5, 0), (-5, 0)]), cand(1, 0, &[(-5, 0)])], 1),
            ("fewest victims on equal sums", vec![cand(0, 0, &[(0, 0), (0, 0)]), cand(1, 0, &[(0, 0), (0, 0)]), cand(2, 0, &[(0, 0), (0, 0)])], 0),
            (
                "latest start of the highest-priority victims",
                vec![cand(0, 0, &[(5, 100), (5, 300), (1, 900)]), cand(1, 0, &[(5, 200), (5, 250), (1, 10)])],
                1,
            ),
            ("full tie: the first", vec![cand(0, 0, &[(1, 5)]), cand(1, 0, &[(1, 5)])], 0),
        ];
        for (name, cs, want) in rows {
            assert_eq!(pick_one(&cs).map(|i| cs[i].node), Some(want), "{name}");
        }
        assert_eq!(pick_one(&[]), None);
    }

    #[test]
    fn pdb_split_table() {
        let p = |n: &str, app: &str| {
            let mut b = pod(n);
            if !app.is_empty() {
                b = b.label("app", app);
            }
            b.info()
        };
        let mut disrupted = pdb("web", ("app", "web"), 0);
        disrupted.disrupted_pods = vec!["w0".into()];
        type PdbRow = (&'static str, Vec<Arc<PodInfo>>, Vec<Pdb>, Vec<&'static str>);
        let rows: Vec<PdbRow> = vec![
            ("no pdb", vec![p("a", "db")], vec![], vec![]),
            ("budget 1: second pod violates", vec![p("a", "db"), p("b", "db")], vec![pdb("db", ("app", "db"), 1)], vec!["b"]),
            ("no labels never matches", vec![p("a", "")], vec![pdb("db", ("app", "db"), 0)], vec![]),
            ("other namespace", vec![pod("a").namespace("x").label("app", "db").info()], vec![pdb("db", ("app", "db"), 0)], vec![]),
            ("already disrupted pod is not counted", vec![p("w0", "web"), p("w1", "web")], vec![disrupted], vec!["w1"]),
        ];
        for (name, pods, pdbs, want) in rows {
            let (v, _) = split_by_pdb(pods, &pdbs);
            assert_eq!(v.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), want, "{name}");
        }
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

    #[test]
    fn dry_run_stops_after_enough_candidates() {
        // Every node needs a victim; with absolute 2 and 0 %, two candidates suffice.
        let nodes: Vec<NodeBuilder> = (0..5).map(|i| node(&format!("n{i}"))).collect();
        let pods: Vec<PodBuilder> = (0..5).map(|i| low(&format!("a{i}"), &format!("n{i}"), 0, "4")).collect();
        let snap = snapshot(&nodes, &pods);
        let fw = framework();
        let p = pod("p").priority(10).req("1", "").info();
        let (o, state) = fw.schedule(&p, &snap, CycleOptions { explain: true, skip_post_filter: true, ..Default::default() });
        let pl = DefaultPreemption { min_percentage: 0, min_absolute: 2, ..Default::default() };
        let potential: Vec<usize> = (0..5).filter(|&i| o.statuses.get(i).is_some_and(|s| s.code == Code::Unschedulable)).collect();
        let (cs, failed, _) = pl.dry_run(&fw, &state, &p, &snap, &potential, 3);
        assert_eq!(cs.iter().map(|c| c.node).collect::<Vec<_>>(), vec![3, 4]);
        assert!(failed.is_empty());
    }

    /// Dry-run results kept across cycles (for nodes unchanged since) give
    /// the nomination, victims and message a fresh dry run gives, over a random
    /// sequence of preemptions, placements, removals, nominations and PDB changes.
    #[test]
    fn kept_dry_runs_match_fresh_ones() {
        let nodes: Vec<NodeBuilder> = (0..12).map(|i| node(&format!("n{i}")).alloc(if i % 3 == 0 { "2" } else { "4" }, "32Gi", 110)).collect();
        let mut snap = snapshot(&nodes, &[]);
        let mut rng = crate::testing::Rng(0x2545_F491_4F6C_DD1D);
        let mut below = |n: u64| rng.below(n as usize) as u64;
        let mut k = 0;
        let mut low_pod = |n: usize, prio: i32, cpu: u64, app: &str| {
            k += 1;
            pod(&format!("l{k}")).node(&format!("n{n}")).priority(prio).req(&format!("{}m", cpu * 500), "").label("app", app).created(k).info()
        };
        for i in 0..40 {
            let p = low_pod(i % 12, (i % 4) as i32, 1 + (i as u64 % 3), if i % 5 == 0 { "db" } else { "web" });
            let n = &snap.nodes[i % 12];
            if n.requested.milli_cpu + p.requests.milli_cpu <= n.allocatable.milli_cpu {
                snap.add_pod(p);
            }
        }
        let shapes = [pod("hi").priority(10).req("1", ""), pod("mid").priority(3).req("1500m", ""), pod("big").priority(10).req("3", "")];
        let kept = framework();
        let explain = CycleOptions { explain: true, ..Default::default() };
        let mut preempted = 0;
        for step in 0..300 {
            let shape = &shapes[below(3) as usize];
            let p = shape.clone().info();
            let (a, _) = kept.schedule(&p, &snap, explain);
            let (b, _) = framework().schedule(&p, &snap, explain);
            assert_eq!(a.selected.is_some(), b.selected.is_some(), "step {step}");
            let pf = |o: &CycleOutcome| o.post_filter.as_ref().map(|r| (r.nominated_node.clone(), r.victims.iter().map(|v| v.uid.clone()).collect::<Vec<_>>()));
            assert_eq!(pf(&a), pf(&b), "step {step}");
            assert_eq!(a.message, b.message, "step {step}");
            let target = match (a.selected, a.post_filter.and_then(|r| r.nominated_node.map(|n| (n, r.victims)))) {
                (Some(i), _) => Some(i),
                (None, Some((n, victims))) => {
                    preempted += 1;
                    for v in &victims {
                        snap.remove_pod(&v.uid);
                    }
                    snap.node_index(&n)
                }
                _ => None,
            };
            if let Some(i) = target {
                let mut b = (*p).clone();
                b.uid = format!("s{step}");
                b.node_name = Some(snap.nodes[i].name().to_string());
                let n = &snap.nodes[i];
                if n.requested.milli_cpu + b.requests.milli_cpu <= n.allocatable.milli_cpu {
                    snap.add_pod(Arc::new(b));
                }
            }
            match below(8) {
                0 => {
                    // A low pod comes where it fits.
                    let n = below(12) as usize;
                    let lp = low_pod(n, below(4) as i32, 1 + below(2), if below(3) == 0 { "db" } else { "web" });
                    let ni = &snap.nodes[n];
                    if ni.requested.milli_cpu + lp.requests.milli_cpu <= ni.allocatable.milli_cpu {
                        snap.add_pod(lp);
                    }
                }
                1 => snap.pdbs = if snap.pdbs.is_empty() { vec![pdb("db", ("app", "db"), below(2) as i64)] } else { vec![] },
                2 => {
                    let other = pod("nom").priority(20).req("1", "").info();
                    if snap.nominated.is_empty() {
                        snap.nominate(other, &format!("n{}", below(12)));
                    } else {
                        snap.clear_nomination(&other.uid);
                    }
                }
                _ => {}
            }
        }
        assert!(preempted > 20, "only {preempted} preemptions");
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
