//! Every write berth makes to the API: bindings, PodScheduled conditions,
//! nominations, preemption (DisruptionTarget then a graceful delete), and
//! events. Writes run concurrently (bounded), paced by clientConnection's QPS
//! and burst, and only while this replica leads. Bind results come back to the
//! scheduling loop as messages.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::Api;
use serde_json::json;
use tokio::sync::{mpsc, watch, Mutex, Semaphore};

use crate::model::PodInfo;

/// The outcome of a bind, reported to the scheduling loop.
#[derive(Debug)]
pub struct BindResult {
    /// The pod.
    pub pod: Arc<PodInfo>,
    /// The node it was bound to.
    pub node: String,
    /// What happened.
    pub outcome: BindOutcome,
    /// When the cycle that chose the node started.
    pub started: Instant,
    /// How long the binding call took.
    pub took: Duration,
}

/// What a bind came to.
#[derive(Debug, PartialEq, Eq)]
pub enum BindOutcome {
    /// Bound.
    Bound,
    /// The API answered 409 Conflict (usually: already bound): the pod is
    /// retried with backoff unless the watch shows it bound.
    AlreadyBound,
    /// The pod is gone (404): dropped.
    Gone,
    /// Not leader any more: not attempted.
    NotLeader,
    /// Any other failure: forget and retry with backoff.
    Failed(String),
}

/// A token bucket pacing API writes (clientConnection qps/burst).
#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, tokio::time::Instant)>,
}

impl RateLimiter {
    /// qps ≤ 0 means unlimited.
    pub fn new(qps: f64, burst: i64) -> Self {
        let burst = (burst.max(1)) as f64;
        RateLimiter { qps, burst, state: Mutex::new((burst, tokio::time::Instant::now())) }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        if self.qps <= 0.0 {
            return;
        }
        loop {
            let wait = {
                let mut s = self.state.lock().await;
                let now = tokio::time::Instant::now();
                let refill = now.duration_since(s.1).as_secs_f64() * self.qps;
                s.0 = (s.0 + refill).min(self.burst);
                s.1 = now;
                if s.0 >= 1.0 {
                    s.0 -= 1.0;
                    return;
                }
                Duration::from_secs_f64((1.0 - s.0) / self.qps)
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// Counts of writes, for logs and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct WriteCounts {
    /// Successful binds.
    pub binds: u64,
    /// Failed writes of any kind.
    pub failures: u64,
    /// Events dropped by aggregation or rate limiting.
    pub events_suppressed: u64,
}

/// Last event written per (pod uid, reason): its note and when.
type RecentEvents = HashMap<(String, String), (String, Instant)>;

/// The API writer.
#[derive(Clone)]
pub struct Writer {
    client: kube::Client,
    leader: watch::Receiver<bool>,
    limiter: Arc<RateLimiter>,
    inflight: Arc<Semaphore>,
    results: mpsc::UnboundedSender<BindResult>,
    recent_events: Arc<Mutex<RecentEvents>>,
    counts: Arc<std::sync::Mutex<WriteCounts>>,
    component: String,
    tasks: Arc<Mutex<tokio::task::JoinSet<()>>>,
}

/// How long the same event for the same pod is not repeated.
const EVENT_DEDUP: Duration = Duration::from_secs(30);

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

impl Writer {
    /// A writer for `client`, writing only while `leader` is true.
    pub fn new(client: kube::Client, leader: watch::Receiver<bool>, qps: f64, burst: i64, concurrency: usize, results: mpsc::UnboundedSender<BindResult>) -> Writer {
        Writer {
            client,
            leader,
            limiter: Arc::new(RateLimiter::new(qps, burst)),
            inflight: Arc::new(Semaphore::new(concurrency.max(1))),
            results,
            recent_events: Arc::new(Mutex::new(HashMap::new())),
            counts: Arc::new(std::sync::Mutex::new(WriteCounts::default())),
            component: "berth".into(),
            tasks: Arc::new(Mutex::new(tokio::task::JoinSet::new())),
        }
    }

    /// Counters so far.
    pub fn counts(&self) -> WriteCounts {
        self.counts.lock().map(|c| *c).unwrap_or_default()
    }

    fn count(&self, f: impl FnOnce(&mut WriteCounts)) {
        if let Ok(mut c) = self.counts.lock() {
            f(&mut c);
        }
    }

    fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    async fn spawn<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut tasks = self.tasks.lock().await;
        // Reap finished tasks so the set stays small.
        while tasks.try_join_next().is_some() {}
        tasks.spawn(fut);
    }

    /// Waits for every write in flight (shutdown), up to `timeout`.
    pub async fn drain(&self, timeout: Duration) {
        let mut tasks = self.tasks.lock().await;
        let _ = tokio::time::timeout(timeout, async { while tasks.join_next().await.is_some() {} }).await;
        tasks.abort_all();
    }

    /// Binds `pod` to `node` through `pods/binding`, off the caller's task.
    pub async fn bind(&self, pod: Arc<PodInfo>, node: String, started: Instant) {
        let w = self.clone();
        self.spawn(async move {
            let t = Instant::now();
            let outcome = w.bind_now(&pod, &node).await;
            let took = t.elapsed();
            if outcome == BindOutcome::Bound {
                w.count(|c| c.binds += 1);
                w.event(&pod, "Normal", "Scheduled", "Binding", format!("Successfully assigned {} to {}", pod.key(), node)).await;
            } else if matches!(outcome, BindOutcome::Failed(_)) {
                w.count(|c| c.failures += 1);
            }
            let _ = w.results.send(BindResult { pod, node, outcome, started, took });
        })
        .await;
    }

    async fn bind_now(&self, pod: &PodInfo, node: &str) -> BindOutcome {
        let Ok(_permit) = self.inflight.acquire().await else { return BindOutcome::Failed("writer closed".into()) };
        if !self.is_leader() {
            return BindOutcome::NotLeader;
        }
        self.limiter.acquire().await;
        let api: Api<core::Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let binding = core::Binding {
            metadata: meta::ObjectMeta { name: Some(pod.name.clone()), namespace: Some(pod.namespace.clone()), uid: Some(pod.uid.clone()), ..Default::default() },
            target: core::ObjectReference { kind: Some("Node".into()), api_version: Some("v1".into()), name: Some(node.into()), ..Default::default() },
        };
        let r = tokio::time::timeout(Duration::from_secs(30), api.create_subresource::<_, serde_json::Value>("binding", &pod.name, &PostParams::default(), &binding)).await;
        match r {
            Err(_) => BindOutcome::Failed("binding timed out after 30s".into()),
            Ok(Ok(_)) => BindOutcome::Bound,
            Ok(Err(e)) => match api_code(&e) {
                Some(409) => BindOutcome::AlreadyBound,
                Some(404) => BindOutcome::Gone,
                _ => BindOutcome::Failed(e.to_string()),
            },
        }
    }

    async fn patch_status(&self, pod: &PodInfo, patch: serde_json::Value) -> bool {
        let Ok(_permit) = self.inflight.acquire().await else { return false };
        if !self.is_leader() {
            return false;
        }
        self.limiter.acquire().await;
        let api: Api<core::Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        match api.patch_status(&pod.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
            Ok(_) => true,
            Err(e) => {
                if api_code(&e) != Some(404) {
                    self.count(|c| c.failures += 1);
                    tracing::warn!(pod = %pod.key(), error = %e, "status patch failed");
                }
                false
            }
        }
    }

    /// Reports a failed attempt: PodScheduled=False with the message (and the
    /// nomination, when preemption chose a node), and a FailedScheduling event.
    pub async fn report_failure(&self, pod: Arc<PodInfo>, reason: &'static str, message: String, nominated: Option<String>) {
        let w = self.clone();
        self.spawn(async move {
            let now = meta::Time(k8s_openapi::jiff::Timestamp::now());
            let mut status = json!({
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": reason, "message": message, "lastTransitionTime": now}],
            });
            if let Some(n) = &nominated {
                status["nominatedNodeName"] = json!(n);
            }
            w.patch_status(&pod, json!({ "status": status })).await;
            w.event(&pod, "Warning", "FailedScheduling", "Scheduling", message).await;
        })
        .await;
    }

    /// Clears a pod's nomination (a lower-priority pod on a node a preemptor now needs).
    pub async fn clear_nomination(&self, pod: Arc<PodInfo>) {
        let w = self.clone();
        self.spawn(async move {
            w.patch_status(&pod, json!({"status": {"nominatedNodeName": null}})).await;
        })
        .await;
    }

    /// Preempts a victim: DisruptionTarget condition, a Preempted event, then a
    /// graceful delete with the victim's own grace period (never forced).
    pub async fn preempt(&self, victim: Arc<PodInfo>, preemptor: Arc<PodInfo>, node: String, profile: String) {
        let w = self.clone();
        self.spawn(async move {
            let now = meta::Time(k8s_openapi::jiff::Timestamp::now());
            let cond = json!({"status": {"conditions": [{
                "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                "message": format!("{profile}: preempting to accommodate a higher priority pod"), "lastTransitionTime": now,
            }]}});
            w.patch_status(&victim, cond).await;
            w.event(&victim, "Normal", "Preempted", "Preempting", format!("Preempted by pod {} on node {}", preemptor.uid, node)).await;
            let Ok(_permit) = w.inflight.acquire().await else { return };
            if !w.is_leader() {
                return;
            }
            let api: Api<core::Pod> = Api::namespaced(w.client.clone(), &victim.namespace);
            let dp = DeleteParams { preconditions: Some(Preconditions { uid: Some(victim.uid.clone()), resource_version: None }), ..Default::default() };
            // The preemptor waits for this delete: retry transient failures a few times.
            let mut pause = Duration::from_millis(200);
            for attempt in 1..=5 {
                w.limiter.acquire().await;
                match api.delete(&victim.name, &dp).await {
                    Ok(_) => break,
                    Err(e) if matches!(api_code(&e), Some(404 | 409)) => break,
                    Err(e) => {
                        w.count(|c| c.failures += 1);
                        tracing::warn!(victim = %victim.key(), error = %e, attempt, "deleting preemption victim failed");
                    }
                }
                if !w.is_leader() {
                    break;
                }
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        })
        .await;
    }

    /// Records an event (events.k8s.io/v1), aggregated: the same reason and
    /// message for the same pod is written at most once per 30 seconds.
    pub async fn event(&self, pod: &PodInfo, kind: &str, reason: &str, action: &str, note: String) {
        {
            let mut recent = self.recent_events.lock().await;
            let key = (pod.uid.clone(), reason.to_string());
            let now = Instant::now();
            if let Some((msg, at)) = recent.get(&key)
                && *msg == note
                && now.duration_since(*at) < EVENT_DEDUP
            {
                self.count(|c| c.events_suppressed += 1);
                return;
            }
            if recent.len() > 10_000 {
                recent.retain(|_, (_, at)| now.duration_since(*at) < EVENT_DEDUP);
            }
            recent.insert(key, (note.clone(), now));
        }
        if !self.is_leader() {
            return;
        }
        let Ok(_permit) = self.inflight.acquire().await else { return };
        self.limiter.acquire().await;
        let now = k8s_openapi::jiff::Timestamp::now();
        let ev = events::Event {
            metadata: meta::ObjectMeta { generate_name: Some(format!("{}.", pod.name)), namespace: Some(pod.namespace.clone()), ..Default::default() },
            event_time: Some(meta::MicroTime(now)),
            action: Some(action.into()),
            reason: Some(reason.into()),
            note: Some(note.chars().take(1024).collect()),
            type_: Some(kind.into()),
            reporting_controller: Some(self.component.clone()),
            reporting_instance: Some(format!("{}-{}", self.component, std::process::id())),
            regarding: Some(core::ObjectReference {
                kind: Some("Pod".into()),
                api_version: Some("v1".into()),
                namespace: Some(pod.namespace.clone()),
                name: Some(pod.name.clone()),
                uid: Some(pod.uid.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let api: Api<events::Event> = Api::namespaced(self.client.clone(), &pod.namespace);
        if let Err(e) = api.create(&PostParams::default(), &ev).await {
            tracing::debug!(pod = %pod.key(), error = %e, "event not recorded");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rate_limiter_paces_after_burst() {
        let rl = RateLimiter::new(20.0, 2);
        let t0 = tokio::time::Instant::now();
        for _ in 0..4 {
            rl.acquire().await;
        }
        // Two from the burst, two more at 20/s (≥ ~100 ms).
        let took = tokio::time::Instant::now().duration_since(t0);
        assert!(took >= Duration::from_millis(90), "{took:?}");
        let unlimited = RateLimiter::new(0.0, 1);
        let t1 = tokio::time::Instant::now();
        for _ in 0..1000 {
            unlimited.acquire().await;
        }
        assert!(t1.elapsed() < Duration::from_millis(90));
    }
}
