//! Shadow mode (`berth run --shadow`): berth judges another scheduler's
//! bindings without writing anything.
//!
//! The loop calls [`judge`] when a pod of a judged profile that it saw
//! pending turns up bound, *before* that binding is applied to the cache, so
//! the cycle runs on the cache as it stood just before the binding (earlier
//! bindings included, the pod itself excluded). The verdict compares berth's
//! choice with the bound node:
//!
//! | verdict         | meaning                                                   |
//! |-----------------|-----------------------------------------------------------|
//! | `same`          | berth selects the bound node                              |
//! | `tie`           | the bound node has berth's best total; berth picked another |
//! | `lower`         | the bound node is feasible for berth, with a lower total  |
//! | `infeasible`    | a berth Filter rejects the bound node                     |
//! | `unschedulable` | berth finds no node at all                                |
//!
//! The verdict comes from the daemon's own cycle over every node (per-node
//! results reused across pods of one shape, [`judge_with`]); only up to
//! [`DETAIL_RATE`] disagreements a second (ties aside) are explained with
//! every plugin's score, which keeps the shadow at 1,000 bindings a second on
//! 5,000 nodes (`berth bench --shadow`).
//!
//! Every verdict is counted in `berth_shadow_decisions_total{profile,verdict}`;
//! disagreements (every verdict but `same`) are kept in a ring buffer
//! ([`ShadowLog`], served as JSON on `/debug/shadow`) and logged, at most one
//! line a second.
//!
//! Pods the other scheduler leaves Pending (waiting in the shadow's queue for
//! [`PENDING_AFTER`] or longer) get berth's view too ([`Shadow::review_pending`]):
//! `placeable` ("berth would place it on X") or `unplaceable` ("berth cannot
//! place it either", with berth's failure message). They are served in
//! `/debug/shadow`'s `pending` section and counted in
//! `berth_shadow_pending_pods{profile,view}`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use thiserror::Error;

use berth_engine::cache::Snapshot;
use berth_engine::framework::{CycleOptions, Framework};
use berth_engine::offline::{explain_pod, NodeExplain, Rejection};
use berth_model::PodInfo;

/// How many disagreements `/debug/shadow` keeps (the oldest go first).
pub const RING: usize = 1000;

/// The shortest interval between two disagreement log lines.
pub const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// What can fail in shadow mode.
#[derive(Debug, Error)]
pub enum Error {
    /// The disagreements could not be rendered as JSON.
    #[error("rendering the shadow verdicts: {0}")]
    Json(#[from] serde_json::Error),
}

/// Berth's verdict on one binding made by another scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Berth selects the bound node.
    Same,
    /// The bound node has berth's best total, but berth picked another node of that total.
    Tie,
    /// The bound node is feasible for berth, with a lower total than berth's choice.
    Lower,
    /// A berth Filter plugin rejects the bound node.
    Infeasible,
    /// Berth finds no node for the pod.
    Unschedulable,
}

impl Verdict {
    /// Every verdict, in order.
    pub const ALL: [Verdict; 5] = [Verdict::Same, Verdict::Tie, Verdict::Lower, Verdict::Infeasible, Verdict::Unschedulable];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Tie => "tie",
            Verdict::Lower => "lower",
            Verdict::Infeasible => "infeasible",
            Verdict::Unschedulable => "unschedulable",
        }
    }
}

/// One node as berth saw it in a verdict cycle.
#[derive(Clone, Debug, Serialize)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// Passed every Filter.
    pub feasible: bool,
    /// Weighted total (feasible nodes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    /// Normalized score per Score plugin (feasible nodes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scores: Option<serde_json::Map<String, serde_json::Value>>,
    /// Why berth's Filters reject it (plugin and reason).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<Rejection>,
}

impl NodeView {
    fn from_explain(n: &NodeExplain) -> NodeView {
        NodeView { name: n.name.clone(), feasible: n.feasible, total: n.total, scores: n.scores.clone(), reasons: n.reasons.clone() }
    }
}

/// A binding berth would not have made (every verdict but `same`).
#[derive(Clone, Debug, Serialize)]
pub struct Disagreement {
    /// When it was judged (RFC 3339).
    pub at: String,
    /// "namespace/name".
    pub pod: String,
    /// The profile (schedulerName).
    pub profile: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The node the other scheduler bound the pod to.
    pub bound_node: String,
    /// Berth's choice (none when berth finds no node).
    pub berth_node: Option<String>,
    /// Berth's best total minus the bound node's total (`lower`, `tie`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score_gap: Option<i64>,
    /// The bound node as berth saw it (scores, or why berth rejects it).
    pub bound: NodeView,
    /// Berth's node as berth saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub berth: Option<NodeView>,
    /// Berth's failure message when it finds no node ("0/N nodes are available: ...").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The outcome of one verdict cycle.
#[derive(Clone, Debug)]
pub struct Judgement {
    /// The verdict.
    pub verdict: Verdict,
    /// Berth's best total minus the bound node's (`lower`, `tie`).
    pub score_gap: Option<i64>,
    /// The details, for every verdict but `same`.
    pub disagreement: Option<Disagreement>,
}

/// Runs one scheduling cycle for `pod` with `fw` over `snap` (nothing is
/// changed) and compares berth's choice with `bound_node`, with every
/// disagreement's details (both nodes' per-plugin scores). `pod` must be the
/// pending pod (no `nodeName`), and `snap` must not hold it bound yet.
pub fn judge(fw: &Framework, snap: &Snapshot, pod: &Arc<PodInfo>, bound_node: &str) -> Judgement {
    judge_with(fw, snap, pod, bound_node, || true)
}

/// [`judge`], in two steps: the verdict comes from the scheduling cycle the
/// daemon runs (per-node results reused across pods of one shape), over
/// every node when `fw` scores every node ([`judge_every_node`]); otherwise,
/// or when that cycle did not see the bound node, from explain's cycle.
/// Only a disagreement other than a tie for which `detail()` says yes is
/// explained (explain's cycle: every plugin's score); ties and the others
/// keep both nodes' totals and the Filter reasons, without per-plugin scores.
pub fn judge_with(fw: &Framework, snap: &Snapshot, pod: &Arc<PodInfo>, bound_node: &str, detail: impl FnOnce() -> bool) -> Judgement {
    let (o, _) = fw.schedule(pod, snap, CycleOptions { skip_post_filter: true, keep_statuses: true, ..Default::default() });
    let n = snap.nodes.len();
    if o.error.is_some() || o.evaluated < n || !fw.run_pre_enqueue(pod).is_success() {
        return judge_explained(fw, snap, pod, bound_node);
    }
    let bound_idx = snap.node_index(bound_node);
    let total_of = |i: usize| o.feasible.iter().position(|&f| f == i).and_then(|k| o.totals.get(k).copied());
    let bound_total = bound_idx.and_then(total_of);
    let best = o.selected.and_then(total_of);
    let bound_feasible = bound_idx.is_some_and(|i| o.feasible.contains(&i));
    // One feasible node is not scored: its total is moot.
    let single = o.feasible.len() == 1;
    let (verdict, gap) = match o.selected {
        None => (Verdict::Unschedulable, None),
        Some(s) if Some(s) == bound_idx => (Verdict::Same, None),
        Some(_) if bound_feasible && !single => {
            let gap = best.zip(bound_total).map(|(b, t)| b - t);
            if gap.is_some_and(|g| g <= 0) { (Verdict::Tie, Some(0)) } else { (Verdict::Lower, gap) }
        }
        Some(_) => (Verdict::Infeasible, None),
    };
    if verdict == Verdict::Same {
        return Judgement { verdict, score_gap: None, disagreement: None };
    }
    // A tie needs no per-plugin scores: both nodes have berth's best total.
    if verdict != Verdict::Tie && detail() {
        return judge_explained(fw, snap, pod, bound_node);
    }
    let view = |i: usize| NodeView {
        name: snap.nodes[i].name().to_string(),
        feasible: o.feasible.contains(&i),
        total: if single { None } else { total_of(i) },
        scores: None,
        reasons: o.statuses.get(i).map(|s| s.reasons.iter().map(|r| Rejection { plugin: s.plugin.into(), reason: r.to_string() }).collect()).unwrap_or_default(),
    };
    let berth_node = o.selected.map(|s| snap.nodes[s].name().to_string());
    let disagreement = Disagreement {
        at: k8s_openapi::jiff::Timestamp::now().to_string(),
        pod: pod.key(),
        profile: fw.profile.clone(),
        verdict,
        bound_node: bound_node.to_string(),
        berth_node,
        score_gap: gap,
        bound: bound_idx.map(view).unwrap_or_else(|| not_cached(bound_node)),
        berth: o.selected.map(view),
        message: o.message.clone(),
    };
    Judgement { verdict, score_gap: gap, disagreement: Some(disagreement) }
}

fn not_cached(node: &str) -> NodeView {
    NodeView { name: node.to_string(), feasible: false, total: None, scores: None, reasons: vec![Rejection { plugin: "NodeCache".into(), reason: "node not in berth's cache".into() }] }
}

/// Makes `fws` score every node (percentageOfNodesToScore 100), as a shadow's
/// frameworks do: a verdict compares the bound node with berth's best over
/// the whole cluster, and [`judge_with`]'s fast step needs every node seen.
pub fn judge_every_node(fws: &mut [Framework]) {
    for f in fws {
        f.percentage_of_nodes_to_score = Some(100);
    }
}

/// Explain's cycle (every node evaluated and scored by every plugin).
fn judge_explained(fw: &Framework, snap: &Snapshot, pod: &Arc<PodInfo>, bound_node: &str) -> Judgement {
    let e = explain_pod(Some(fw), snap, pod);
    let bound = e.nodes.iter().find(|n| n.name == bound_node);
    let berth = e.selected.as_deref().and_then(|s| e.nodes.iter().find(|n| n.name == s));
    let best = berth.and_then(|n| n.total);
    let (verdict, gap) = match (berth, bound) {
        (None, _) => (Verdict::Unschedulable, None),
        (Some(b), Some(n)) if b.name == n.name => (Verdict::Same, None),
        (Some(_), Some(n)) if n.feasible => {
            let gap = best.zip(n.total).map(|(b, t)| b - t);
            if gap.is_some_and(|g| g <= 0) { (Verdict::Tie, Some(0)) } else { (Verdict::Lower, gap) }
        }
        (Some(_), _) => (Verdict::Infeasible, None),
    };
    let disagreement = (verdict != Verdict::Same).then(|| Disagreement {
        at: k8s_openapi::jiff::Timestamp::now().to_string(),
        pod: pod.key(),
        profile: fw.profile.clone(),
        verdict,
        bound_node: bound_node.to_string(),
        berth_node: e.selected.clone(),
        score_gap: gap,
        bound: bound.map(NodeView::from_explain).unwrap_or_else(|| not_cached(bound_node)),
        berth: berth.map(NodeView::from_explain),
        message: e.message.clone(),
    });
    Judgement { verdict, score_gap: gap, disagreement }
}

/// How many disagreements a second get per-plugin scores (explain's cycle,
/// which reuses nothing); the others keep totals and Filter reasons.
pub const DETAIL_RATE: f64 = 50.0;

/// A token bucket of [`DETAIL_RATE`] a second (as many in a burst).
#[derive(Debug)]
pub struct DetailLimiter {
    tokens: f64,
    last: Option<Instant>,
}

impl Default for DetailLimiter {
    fn default() -> Self {
        DetailLimiter { tokens: DETAIL_RATE, last: None }
    }
}

impl DetailLimiter {
    /// True (and a token taken) when a disagreement may be explained at `now`.
    pub fn take(&mut self, now: Instant) -> bool {
        if let Some(l) = self.last {
            self.tokens = (self.tokens + now.saturating_duration_since(l).as_secs_f64() * DETAIL_RATE).min(DETAIL_RATE);
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The last [`RING`] disagreements and the count of every verdict, shared
/// between the loop (which records) and the admin port (which serves them).
#[derive(Debug, Default)]
pub struct ShadowLog {
    inner: Mutex<LogInner>,
}

#[derive(Debug, Default)]
struct LogInner {
    ring: VecDeque<Disagreement>,
    counts: BTreeMap<Verdict, u64>,
    pending: PendingReport,
}

/// What `/debug/shadow` serves.
#[derive(Debug, Serialize)]
pub struct ShadowReport {
    /// Verdicts so far, by verdict.
    pub counts: BTreeMap<Verdict, u64>,
    /// The last disagreements, oldest first.
    pub disagreements: Vec<Disagreement>,
    /// Berth's view of the pods the other scheduler leaves Pending.
    pub pending: PendingReport,
}

/// Berth's view of a pod that the other scheduler leaves Pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PendingVerdict {
    /// Berth would place it (on `berth_node`).
    Placeable,
    /// Berth cannot place it either (preemption aside).
    Unplaceable,
}

impl PendingVerdict {
    /// Both views, in order.
    pub const ALL: [PendingVerdict; 2] = [PendingVerdict::Placeable, PendingVerdict::Unplaceable];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            PendingVerdict::Placeable => "placeable",
            PendingVerdict::Unplaceable => "unplaceable",
        }
    }
}

/// One pod the other scheduler leaves Pending, as berth last saw it.
#[derive(Clone, Debug, Serialize)]
pub struct PendingView {
    /// "namespace/name".
    pub pod: String,
    /// The profile (schedulerName).
    pub profile: String,
    /// `placeable` or `unplaceable`.
    pub view: PendingVerdict,
    /// Where berth would place it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub berth_node: Option<String>,
    /// Berth's failure message ("0/N nodes are available: ...").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How long it had waited pending when berth looked (seconds).
    pub waiting_seconds: u64,
    /// When berth looked (RFC 3339).
    pub at: String,
}

impl PendingView {
    /// The sentence a person reads.
    pub fn summary(&self) -> String {
        match (&self.view, &self.berth_node) {
            (PendingVerdict::Placeable, Some(n)) => format!("berth would place it on {n}"),
            _ => format!("berth cannot place it either: {}", self.message.as_deref().unwrap_or("no node fits")),
        }
    }
}

/// `/debug/shadow`'s `pending` section.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PendingReport {
    /// Pods per view.
    pub counts: BTreeMap<PendingVerdict, u64>,
    /// The pods, by namespace/name (at most [`RING`]; `counts` has them all).
    pub pods: Vec<PendingView>,
}

impl ShadowLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a judgement.
    pub fn record(&self, j: &Judgement) {
        let mut g = self.lock();
        *g.counts.entry(j.verdict).or_insert(0) += 1;
        if let Some(d) = &j.disagreement {
            if g.ring.len() >= RING {
                g.ring.pop_front();
            }
            g.ring.push_back(d.clone());
        }
    }

    /// Verdicts so far, by verdict.
    pub fn counts(&self) -> BTreeMap<Verdict, u64> {
        self.lock().counts.clone()
    }

    /// The report (counts and the kept disagreements).
    pub fn report(&self) -> ShadowReport {
        let g = self.lock();
        ShadowReport { counts: g.counts.clone(), disagreements: g.ring.iter().cloned().collect(), pending: g.pending.clone() }
    }

    /// Replaces the pending section.
    pub fn set_pending(&self, pending: PendingReport) {
        self.lock().pending = pending;
    }

    /// Berth's view of the pods left Pending.
    pub fn pending(&self) -> PendingReport {
        self.lock().pending.clone()
    }

    /// The report as JSON.
    pub fn to_json(&self) -> Result<String, Error> {
        Ok(serde_json::to_string(&self.report())?)
    }
}

/// At most one line per `interval`; the lines held back are counted and
/// reported with the next line.
#[derive(Debug)]
pub struct LogLimiter {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    /// A limiter of one line per `interval`.
    pub fn new(interval: Duration) -> LogLimiter {
        LogLimiter { interval, last: None, suppressed: 0 }
    }

    /// `Some(lines suppressed since the last one)` when a line may be
    /// written at `now`, `None` when it must be held back (and is counted).
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|l| now.saturating_duration_since(l) < self.interval) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// How long after the caches synced a shadow that judged no binding warns (once).
pub const IDLE_WARNING: Duration = Duration::from_secs(600);

/// A pod of a judged profile that has waited pending this long is one the
/// other scheduler leaves Pending (kube-scheduler binds a pod that fits
/// within a second; one that fits nowhere waits in its unschedulable queue).
pub const PENDING_AFTER: Duration = Duration::from_secs(10);

/// How often berth's view of a pod left Pending is recomputed.
pub const PENDING_REFRESH: Duration = Duration::from_secs(30);

/// The most time one review of the pending pods may take (the rest wait for
/// the next review), so that the loop keeps up with the bindings it judges.
pub const PENDING_BUDGET: Duration = Duration::from_millis(50);

/// The loop's shadow state.
#[derive(Debug)]
pub struct Shadow {
    /// The shared verdicts.
    pub log: Arc<ShadowLog>,
    limiter: LogLimiter,
    judged: u64,
    synced_at: Option<Instant>,
    warned_idle: bool,
    /// Berth's view of the pods left Pending, by uid, with when it was computed.
    pending: HashMap<String, (PendingView, Instant)>,
    /// Which disagreements get per-plugin scores.
    pub detail: DetailLimiter,
}

impl Shadow {
    /// A shadow recording into `log`.
    pub fn new(log: Arc<ShadowLog>) -> Shadow {
        Shadow { log, limiter: LogLimiter::new(LOG_INTERVAL), judged: 0, synced_at: None, warned_idle: false, pending: HashMap::new(), detail: DetailLimiter::default() }
    }

    /// Gives berth's view of the pods the other scheduler leaves Pending:
    /// `pods` are the pending pods of the judged profiles with when each was
    /// first seen; those that have waited [`PENDING_AFTER`] at `now` get one
    /// scheduling cycle on `snap` (nothing changes; no preemption), at most
    /// once per [`PENDING_REFRESH`] and within [`PENDING_BUDGET`] per call
    /// (the least recently seen first). Gated pods wait on their gates, not
    /// on a scheduler, and gang members on their group: neither is reviewed.
    /// Publishes the views to the log and returns the count per profile and view.
    pub fn review_pending<'a>(&mut self, frameworks: &[Framework], snap: &Snapshot, pods: impl Iterator<Item = (&'a Arc<PodInfo>, Instant)>, now: Instant) -> BTreeMap<(String, PendingVerdict), i64> {
        let started = Instant::now();
        let mut due: Vec<(Option<Instant>, &'a Arc<PodInfo>, &Framework, Instant)> = Vec::new();
        let mut live: HashSet<&str> = HashSet::new();
        for (pod, first_seen) in pods {
            if now.saturating_duration_since(first_seen) < PENDING_AFTER || pod.group.is_some() || pod.terminating {
                continue;
            }
            let Some(fw) = frameworks.iter().find(|f| f.profile == pod.scheduler_name) else { continue };
            if !fw.run_pre_enqueue(pod).is_success() {
                continue;
            }
            live.insert(pod.uid.as_str());
            let last = self.pending.get(&pod.uid).map(|(_, at)| *at);
            if last.is_none_or(|at| now.saturating_duration_since(at) >= PENDING_REFRESH) {
                due.push((last, pod, fw, first_seen));
            }
        }
        self.pending.retain(|uid, _| live.contains(uid.as_str()));
        // Never seen first, then the stalest.
        due.sort_by_key(|(last, ..)| *last);
        for (i, (_, pod, fw, first_seen)) in due.into_iter().enumerate() {
            if i > 0 && started.elapsed() >= PENDING_BUDGET {
                break;
            }
            let (o, _) = fw.schedule(pod, snap, CycleOptions { skip_post_filter: true, ..Default::default() });
            let berth_node = o.selected.and_then(|n| snap.nodes.get(n)).map(|n| n.name().to_string());
            let view = PendingView {
                pod: pod.key(),
                profile: fw.profile.clone(),
                view: if berth_node.is_some() { PendingVerdict::Placeable } else { PendingVerdict::Unplaceable },
                message: if berth_node.is_some() { None } else { o.message.clone().or_else(|| o.error.as_ref().map(|e| e.message())) },
                berth_node,
                waiting_seconds: now.saturating_duration_since(first_seen).as_secs(),
                at: k8s_openapi::jiff::Timestamp::now().to_string(),
            };
            self.pending.insert(pod.uid.clone(), (view, now));
        }
        let mut views: Vec<&PendingView> = self.pending.values().map(|(v, _)| v).collect();
        views.sort_by(|a, b| a.pod.cmp(&b.pod));
        let mut report = PendingReport::default();
        let mut counts: BTreeMap<(String, PendingVerdict), i64> = BTreeMap::new();
        for f in frameworks {
            for v in PendingVerdict::ALL {
                counts.insert((f.profile.clone(), v), 0);
            }
        }
        for v in &views {
            *report.counts.entry(v.view).or_insert(0) += 1;
            *counts.entry((v.profile.clone(), v.view)).or_insert(0) += 1;
        }
        report.pods = views.into_iter().take(RING).cloned().collect();
        self.log.set_pending(report);
        counts
    }

    /// Records `j` and logs it when it is a disagreement (rate-limited).
    pub fn record(&mut self, j: &Judgement, now: Instant) {
        self.judged += 1;
        self.log.record(j);
        let Some(d) = &j.disagreement else { return };
        let Some(suppressed) = self.limiter.admit(now) else { return };
        let reasons: Vec<String> = d.bound.reasons.iter().map(|r| format!("{}: {}", r.plugin, r.reason)).collect();
        tracing::info!(
            pod = %d.pod,
            profile = %d.profile,
            verdict = d.verdict.as_str(),
            bound_node = %d.bound_node,
            berth_node = d.berth_node.as_deref().unwrap_or("<none>"),
            score_gap = ?d.score_gap,
            reasons = %reasons.join("; "),
            suppressed,
            "shadow: berth disagrees with a binding"
        );
    }

    /// Called once when the caches have synced, with how many pods of the
    /// judged profiles exist (bound or pending): warns when there are none.
    /// True when it warned.
    pub fn synced(&mut self, pods: usize, profiles: &[String], now: Instant) -> bool {
        self.synced_at = Some(now);
        if pods == 0 && !self.warned_idle {
            self.warned_idle = true;
            tracing::warn!(?profiles, "shadow: no pod of the judged profiles exists; check that the configuration's profiles name the schedulerName the cluster's pods use (usually default-scheduler)");
            return true;
        }
        false
    }

    /// Called periodically: warns when no binding was judged within
    /// [`IDLE_WARNING`] of the caches' sync, unless it warned already (here
    /// or at sync). True when it warned.
    pub fn tick(&mut self, profiles: &[String], now: Instant) -> bool {
        if self.warned_idle || self.judged > 0 {
            return false;
        }
        if self.synced_at.is_some_and(|s| now.saturating_duration_since(s) >= IDLE_WARNING) {
            self.warned_idle = true;
            tracing::warn!(?profiles, minutes = IDLE_WARNING.as_secs() / 60, "shadow: no binding of a judged profile was seen since the caches synced; check that the configuration's profiles name the schedulerName the cluster's pods use");
            return true;
        }
        false
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn limiter_admits_one_line_a_second_and_counts_the_rest() {
        let mut l = LogLimiter::new(Duration::from_secs(1));
        let t = Instant::now();
        assert_eq!(l.admit(t), Some(0));
        assert_eq!(l.admit(t + Duration::from_millis(10)), None);
        assert_eq!(l.admit(t + Duration::from_millis(500)), None);
        assert_eq!(l.admit(t + Duration::from_millis(1001)), Some(2));
        assert_eq!(l.admit(t + Duration::from_millis(1002)), None);
    }

    fn disagreement(pod: &str) -> Judgement {
        let d = Disagreement {
            at: String::new(),
            pod: pod.into(),
            profile: "p".into(),
            verdict: Verdict::Lower,
            bound_node: "a".into(),
            berth_node: Some("b".into()),
            score_gap: Some(3),
            bound: NodeView { name: "a".into(), feasible: true, total: Some(1), scores: None, reasons: vec![] },
            berth: None,
            message: None,
        };
        Judgement { verdict: Verdict::Lower, score_gap: Some(3), disagreement: Some(d) }
    }

    /// Nodes a (2 of 4 cores used), b and d (empty, 4 cores), c (1 core).
    fn verdict(cpu: &str, bound: &str) -> Judgement {
        use berth_engine::testing::{node, pod, snapshot};
        let config = berth_engine::config::Config::parse("").unwrap();
        let fw = berth_engine::profile::frameworks(&config, 1).remove(0);
        let snap = snapshot(&[node("a"), node("b"), node("c").alloc("1", "32Gi", 110), node("d")], &[pod("old").node("a").req("2", "1Gi")]);
        judge(&fw, &snap, &pod("p").req(cpu, "1Gi").info(), bound)
    }

    #[test]
    fn verdicts() {
        let j = verdict("1500m", "a");
        assert_eq!(j.verdict, Verdict::Lower);
        assert!(j.score_gap.unwrap() > 0);
        let d = j.disagreement.unwrap();
        assert!(d.bound.total.unwrap() < d.berth.as_ref().unwrap().total.unwrap());
        assert!(matches!(d.berth_node.as_deref(), Some("b" | "d")));

        let j = verdict("1500m", "c");
        assert_eq!(j.verdict, Verdict::Infeasible);
        let d = j.disagreement.unwrap();
        assert!(d.bound.reasons.iter().any(|r| r.plugin == "NodeResourcesFit"), "{:?}", d.bound.reasons);

        // b and d tie: one is berth's choice (same), the other a tie.
        let (jb, jd) = (verdict("1500m", "b"), verdict("1500m", "d"));
        let mut both = [jb.verdict, jd.verdict];
        both.sort();
        assert_eq!(both, [Verdict::Same, Verdict::Tie]);
        let tie = if jb.verdict == Verdict::Tie { jb } else { jd };
        assert_eq!(tie.score_gap, Some(0));

        let j = verdict("10", "b");
        assert_eq!(j.verdict, Verdict::Unschedulable);
        let d = j.disagreement.unwrap();
        assert_eq!(d.berth_node, None);
        assert!(d.message.is_some());

        let j = verdict("1500m", "gone");
        assert_eq!(j.verdict, Verdict::Infeasible);
    }

    /// Logs written while `f` runs.
    fn logs(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let w = buf.clone();
        let sub = tracing_subscriber::fmt().with_writer(move || w.clone()).with_ansi(false).finish();
        tracing::subscriber::with_default(sub, f);
        let out = buf.0.lock().unwrap().clone();
        String::from_utf8(out).unwrap()
    }

    const NO_POD: &str = "shadow: no pod of the judged profiles exists";
    const NO_BINDING: &str = "shadow: no binding of a judged profile was seen";

    #[test]
    fn profiles_matching_no_pod_warn_once() {
        let profiles = vec!["default-scheduler".to_string()];
        let t = Instant::now();
        // No pod at sync: one warning, and the idle warning does not follow.
        let mut sh = Shadow::new(Arc::default());
        let out = logs(|| {
            assert!(sh.synced(0, &profiles, t));
            for m in [1, 11, 60, 600] {
                assert!(!sh.tick(&profiles, t + Duration::from_secs(60 * m)));
            }
        });
        assert_eq!(out.matches(NO_POD).count(), 1, "{out}");
        assert!(out.contains("WARN") && out.contains("default-scheduler"), "{out}");
        assert!(!out.contains(NO_BINDING), "{out}");

        // Pods exist but no binding is judged: one warning after IDLE_WARNING.
        let mut sh = Shadow::new(Arc::default());
        let out = logs(|| {
            assert!(!sh.synced(3, &profiles, t));
            assert!(!sh.tick(&profiles, t + IDLE_WARNING - Duration::from_secs(1)));
            assert!(sh.tick(&profiles, t + IDLE_WARNING));
            assert!(!sh.tick(&profiles, t + IDLE_WARNING * 2));
        });
        assert_eq!(out.matches(NO_BINDING).count(), 1, "{out}");
        assert!(!out.contains(NO_POD), "{out}");

        // A judged binding: never a warning.
        let mut sh = Shadow::new(Arc::default());
        let out = logs(|| {
            assert!(!sh.synced(3, &profiles, t));
            sh.record(&Judgement { verdict: Verdict::Same, score_gap: None, disagreement: None }, t);
            assert!(!sh.tick(&profiles, t + IDLE_WARNING * 2));
        });
        assert_eq!(out, "");
    }

    #[test]
    fn pods_left_pending_get_berths_view() {
        use berth_engine::testing::{node, pod, snapshot};
        let config = berth_engine::config::Config::parse("").unwrap();
        let fws = berth_engine::profile::frameworks(&config, 1);
        // a: 2 of 4 cores used; b: 1 core in all.
        let snap = snapshot(&[node("a"), node("b").alloc("1", "32Gi", 110)], &[pod("old").node("a").req("2", "1Gi")]);
        let fits = pod("fits").req("1500m", "1Gi").info();
        let huge = pod("huge").req("10", "1Gi").info();
        let young = pod("young").req("100m", "1Gi").info();
        let gated = pod("gated").req("100m", "1Gi").gate("wait").info();
        let other = pod("other").req("100m", "1Gi").info();
        let mut other_profile = (*other).clone();
        other_profile.scheduler_name = "someone-else".into();
        let other = Arc::new(other_profile);
        let t0 = Instant::now();
        let now = t0 + PENDING_AFTER + Duration::from_secs(5);
        let old = t0;
        let log = Arc::new(ShadowLog::default());
        let mut sh = Shadow::new(log.clone());
        let pods = [(&fits, old), (&huge, old), (&young, now - Duration::from_secs(1)), (&gated, old), (&other, old)];
        let counts = sh.review_pending(&fws, &snap, pods.iter().map(|(p, t)| (*p, *t)), now);
        assert_eq!(counts[&("default-scheduler".to_string(), PendingVerdict::Placeable)], 1);
        assert_eq!(counts[&("default-scheduler".to_string(), PendingVerdict::Unplaceable)], 1);
        let r = log.pending();
        assert_eq!(r.pods.iter().map(|v| v.pod.as_str()).collect::<Vec<_>>(), ["default/fits", "default/huge"]);
        let (f, h) = (&r.pods[0], &r.pods[1]);
        assert_eq!((f.view, f.berth_node.as_deref(), f.message.as_deref()), (PendingVerdict::Placeable, Some("a"), None));
        assert_eq!(f.summary(), "berth would place it on a");
        assert_eq!(f.waiting_seconds, (PENDING_AFTER + Duration::from_secs(5)).as_secs());
        assert_eq!((h.view, h.berth_node.as_deref()), (PendingVerdict::Unplaceable, None));
        let msg = h.message.as_deref().unwrap();
        assert!(msg.starts_with("0/2 nodes are available") && msg.contains("Insufficient cpu"), "{msg}");
        assert!(h.summary().starts_with("berth cannot place it either: 0/2 nodes"), "{}", h.summary());
        let v: serde_json::Value = serde_json::from_str(&log.to_json().unwrap()).unwrap();
        assert_eq!(v["pending"]["counts"], serde_json::json!({"placeable": 1, "unplaceable": 1}));
        assert_eq!(v["pending"]["pods"][0]["view"], "placeable");
        assert_eq!(v["pending"]["pods"][0]["berth_node"], "a");

        // Within PENDING_REFRESH the views are kept, not recomputed; "fits" bound
        // (gone from the queue) leaves the section, "young" has waited long enough.
        let later = now + Duration::from_secs(10);
        let pods = [(&huge, old), (&young, now - Duration::from_secs(1))];
        let counts = sh.review_pending(&fws, &snap, pods.iter().map(|(p, t)| (*p, *t)), later);
        assert_eq!(counts[&("default-scheduler".to_string(), PendingVerdict::Placeable)], 1);
        let r = log.pending();
        assert_eq!(r.pods.iter().map(|v| (v.pod.as_str(), v.waiting_seconds)).collect::<Vec<_>>(), [("default/huge", 15), ("default/young", 11)]);
        // After PENDING_REFRESH, recomputed.
        let refreshed = now + PENDING_REFRESH;
        sh.review_pending(&fws, &snap, pods.iter().map(|(p, t)| (*p, *t)), refreshed);
        assert_eq!(log.pending().pods[0].waiting_seconds, (refreshed - old).as_secs());
    }

    /// The fast step alone (no disagreement explained) gives explain's verdicts.
    #[test]
    fn verdicts_without_details_match_explains() {
        use berth_engine::testing::{node, pod, snapshot};
        let config = berth_engine::config::Config::parse("").unwrap();
        let mut fws = berth_engine::profile::frameworks(&config, 1);
        judge_every_node(&mut fws);
        let fw = &fws[0];
        let snap = snapshot(&[node("a"), node("b"), node("c").alloc("1", "32Gi", 110), node("d")], &[pod("old").node("a").req("2", "1Gi")]);
        for (cpu, bound) in [("1500m", "a"), ("1500m", "b"), ("1500m", "c"), ("1500m", "d"), ("10", "b"), ("1500m", "gone"), ("3", "a"), ("3", "b")] {
            let p = pod("p").req(cpu, "1Gi").info();
            let full = judge(fw, &snap, &p, bound);
            let mut asked = false;
            let fast = judge_with(fw, &snap, &p, bound, || {
                asked = true;
                false
            });
            let both = [full.verdict, fast.verdict];
            // b and d tie: which one berth picks is a draw (same or tie).
            assert!(full.verdict == fast.verdict || both.iter().all(|v| matches!(v, Verdict::Same | Verdict::Tie)), "{cpu} on {bound}: {both:?}");
            if full.verdict == fast.verdict {
                assert_eq!(full.score_gap, fast.score_gap, "{cpu} on {bound}");
            }
            assert_eq!(asked, !matches!(fast.verdict, Verdict::Same | Verdict::Tie), "{cpu} on {bound}: {:?}", fast.verdict);
            let (Some(f), Some(d)) = (full.disagreement, fast.disagreement) else { continue };
            assert_eq!((&f.bound_node, f.bound.feasible, f.bound.total), (&d.bound_node, d.bound.feasible, d.bound.total), "{cpu} on {bound}");
            assert_eq!(f.bound.reasons.len(), d.bound.reasons.len(), "{cpu} on {bound}");
            // Explain's message adds what preemption would do.
            assert!(f.message.as_deref().unwrap_or("").starts_with(d.message.as_deref().unwrap_or("")), "{cpu} on {bound}: {:?} {:?}", f.message, d.message);
            assert_eq!(d.bound.scores, None);
        }
    }

    #[test]
    fn detail_limiter_refills_at_its_rate() {
        let mut l = DetailLimiter::default();
        let t = Instant::now();
        let burst = (0..200).filter(|_| l.take(t)).count();
        assert_eq!(burst, DETAIL_RATE as usize);
        assert!(!l.take(t));
        assert!(l.take(t + Duration::from_secs_f64(1.0 / DETAIL_RATE)));
        assert!(!l.take(t + Duration::from_secs_f64(1.0 / DETAIL_RATE)));
    }

    #[test]
    fn ring_keeps_the_last_thousand() {
        let log = ShadowLog::default();
        for i in 0..RING + 5 {
            log.record(&disagreement(&format!("ns/p{i}")));
        }
        log.record(&Judgement { verdict: Verdict::Same, score_gap: None, disagreement: None });
        let r = log.report();
        assert_eq!(r.disagreements.len(), RING);
        assert_eq!(r.disagreements[0].pod, "ns/p5");
        assert_eq!(r.counts[&Verdict::Lower], (RING + 5) as u64);
        assert_eq!(r.counts[&Verdict::Same], 1);
        let v: serde_json::Value = serde_json::from_str(&log.to_json().unwrap()).unwrap();
        assert_eq!(v["counts"]["lower"], (RING + 5) as u64);
        assert_eq!(v["disagreements"][0]["verdict"], "lower");
    }
}
