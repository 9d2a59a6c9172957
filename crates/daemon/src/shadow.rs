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
//! Every verdict is counted in `berth_shadow_decisions_total{profile,verdict}`;
//! disagreements (every verdict but `same`) are kept in a ring buffer
//! ([`ShadowLog`], served as JSON on `/debug/shadow`) and logged, at most one
//! line a second.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use thiserror::Error;

use berth_engine::cache::Snapshot;
use berth_engine::framework::Framework;
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
/// changed: explain's cycle, every node evaluated and scored) and compares
/// berth's choice with `bound_node`. `pod` must be the pending pod (no
/// `nodeName`), and `snap` must not hold it bound yet.
pub fn judge(fw: &Framework, snap: &Snapshot, pod: &Arc<PodInfo>, bound_node: &str) -> Judgement {
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
        bound: bound.map(NodeView::from_explain).unwrap_or_else(|| NodeView {
            name: bound_node.to_string(),
            feasible: false,
            total: None,
            scores: None,
            reasons: vec![Rejection { plugin: "NodeCache".into(), reason: "node not in berth's cache".into() }],
        }),
        berth: berth.map(NodeView::from_explain),
        message: e.message.clone(),
    });
    Judgement { verdict, score_gap: gap, disagreement }
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
}

/// What `/debug/shadow` serves.
#[derive(Debug, Serialize)]
pub struct ShadowReport {
    /// Verdicts so far, by verdict.
    pub counts: BTreeMap<Verdict, u64>,
    /// The last disagreements, oldest first.
    pub disagreements: Vec<Disagreement>,
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
        ShadowReport { counts: g.counts.clone(), disagreements: g.ring.iter().cloned().collect() }
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

/// The loop's shadow state.
#[derive(Debug)]
pub struct Shadow {
    /// The shared verdicts.
    pub log: Arc<ShadowLog>,
    limiter: LogLimiter,
    judged: u64,
    synced_at: Option<Instant>,
    warned_idle: bool,
}

impl Shadow {
    /// A shadow recording into `log`.
    pub fn new(log: Arc<ShadowLog>) -> Shadow {
        Shadow { log, limiter: LogLimiter::new(LOG_INTERVAL), judged: 0, synced_at: None, warned_idle: false }
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
    pub fn synced(&mut self, pods: usize, profiles: &[String], now: Instant) {
        self.synced_at = Some(now);
        if pods == 0 {
            self.warned_idle = true;
            tracing::warn!(?profiles, "shadow: no pod of the judged profiles exists; check that the configuration's profiles name the schedulerName the cluster's pods use (usually default-scheduler)");
        }
    }

    /// Called periodically: warns once when no binding was judged within
    /// [`IDLE_WARNING`] of the caches' sync.
    pub fn tick(&mut self, profiles: &[String], now: Instant) {
        if self.warned_idle || self.judged > 0 {
            return;
        }
        if self.synced_at.is_some_and(|s| now.saturating_duration_since(s) >= IDLE_WARNING) {
            self.warned_idle = true;
            tracing::warn!(?profiles, minutes = IDLE_WARNING.as_secs() / 60, "shadow: no binding of a judged profile was seen since the caches synced; check that the configuration's profiles name the schedulerName the cluster's pods use");
        }
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
