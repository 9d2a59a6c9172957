//! Every write berth makes to the API: bindings, PodScheduled conditions,
//! nominations, preemption (DisruptionTarget then a graceful delete), and
//! events. Bind results come back to the scheduling loop as messages.
//!
//! Three budgets, so that no kind of write starves another:
//!
//! - **binds**: their own concurrency and token bucket (clientConnection qps/burst);
//! - **status writes** (PodScheduled, nominations, preemption): their own
//!   concurrency and bucket, so a flood of failure reports never delays a bind;
//! - **events**: a bounded queue drained by their own task with their own
//!   bucket, as upstream's event broadcaster runs on a client of its own.
//!   Isomorphic events are aggregated into a series as events.k8s.io's
//!   recorder does; a failed write is retried with backoff; an event is never
//!   awaited by a bind.
//!
//! Leadership is checked at the moment of each write ([`Lease::write_permit`],
//! after the rate limiter's wait, right before sending): a write queued while
//! this replica led is dropped once it no longer does.
//!
//! A bind whose outcome is unknown (timeout, connection reset, 5xx: the reply
//! may have been lost after the commit) is not a failure: the pod is read
//! back, with backoff, until the API says whether it is bound; only a pod
//! known not to be bound is reported failed (and its assumed slot freed).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::Api;
use serde_json::json;
use tokio::sync::{mpsc, Mutex, Semaphore};

use super::leader::Lease;
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
    /// Bound by this call (known, or found out after an unknown outcome).
    Bound,
    /// The API says the pod is bound already, to `node` (409, or an unknown
    /// outcome read back): it holds that node's slot; not retried.
    AlreadyBound {
        /// Where the API has it.
        node: String,
    },
    /// The pod is gone (404): dropped.
    Gone,
    /// Not leader any more: not attempted.
    NotLeader,
    /// Known not bound: forget and retry with backoff.
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
    /// Binds whose outcome was unknown and had to be read back.
    pub binds_unknown: u64,
    /// Failed writes of any kind.
    pub failures: u64,
    /// Writes not sent because this replica no longer led.
    pub refused_not_leader: u64,
    /// Events written (created, or a series updated).
    pub events_written: u64,
    /// Repeats folded into a series instead of being written.
    pub events_suppressed: u64,
    /// Event writes that failed and were retried.
    pub event_retries: u64,
    /// Events given up: every retry failed, the queue was full, or the lease was lost.
    pub events_lost: u64,
}

/// Counters shared by the writer's tasks.
pub type SharedCounts = Arc<std::sync::Mutex<WriteCounts>>;

/// An event to record.
#[derive(Debug)]
struct EventItem {
    pod: Arc<PodInfo>,
    kind: &'static str,
    reason: &'static str,
    action: &'static str,
    note: String,
}

/// Events waiting to be written; a full queue drops (and counts) the newest.
const EVENT_QUEUE: usize = 8192;
/// Upstream's `maxTriesPerEvent`.
const EVENT_TRIES: u32 = 12;
/// How long an isomorphic event keeps its series (upstream finishes a series after six minutes).
const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// Concurrent event writes.
const EVENT_CONCURRENCY: usize = 8;

/// The API writer.
#[derive(Clone)]
pub struct Writer {
    client: kube::Client,
    lease: Lease,
    bind_limiter: Arc<RateLimiter>,
    status_limiter: Arc<RateLimiter>,
    bind_slots: Arc<Semaphore>,
    status_slots: Arc<Semaphore>,
    results: mpsc::UnboundedSender<BindResult>,
    events: mpsc::Sender<EventItem>,
    events_pending: Arc<AtomicUsize>,
    counts: SharedCounts,
    component: String,
    instance: String,
    tasks: Arc<Mutex<tokio::task::JoinSet<()>>>,
    event_task: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Could a write that failed with `e` have been committed? Transport errors,
/// timeouts and 5xx may hide a commit whose reply was lost; other API answers
/// (4xx, 429 included) say the write was refused.
fn outcome_unknown(e: &kube::Error) -> bool {
    api_code(e).is_none_or(|c| c >= 500)
}

/// What reading a pod back after a bind says.
#[derive(Debug, PartialEq, Eq)]
enum Verified {
    BoundHere,
    BoundElsewhere(String),
    NotBound,
    Gone,
}

impl Writer {
    /// A writer for `client`, writing only while `lease` allows it.
    /// `qps`/`burst` pace each of the three budgets.
    pub fn new(client: kube::Client, lease: Lease, qps: f64, burst: i64, concurrency: usize, results: mpsc::UnboundedSender<BindResult>, identity: &str) -> Writer {
        let (etx, erx) = mpsc::channel(EVENT_QUEUE);
        let w = Writer {
            client,
            lease,
            bind_limiter: Arc::new(RateLimiter::new(qps, burst)),
            status_limiter: Arc::new(RateLimiter::new(qps, burst)),
            bind_slots: Arc::new(Semaphore::new(concurrency.max(1))),
            status_slots: Arc::new(Semaphore::new(concurrency.max(1))),
            results,
            events: etx,
            events_pending: Arc::new(AtomicUsize::new(0)),
            counts: Arc::new(std::sync::Mutex::new(WriteCounts::default())),
            component: "berth".into(),
            instance: identity.to_string(),
            tasks: Arc::new(Mutex::new(tokio::task::JoinSet::new())),
            event_task: Arc::new(std::sync::Mutex::new(None)),
        };
        let h = tokio::spawn(w.clone().event_loop(erx, Arc::new(RateLimiter::new(qps, burst))));
        if let Ok(mut t) = w.event_task.lock() {
            *t = Some(h);
        }
        w
    }

    /// Counters so far.
    pub fn counts(&self) -> WriteCounts {
        self.counts.lock().map(|c| *c).unwrap_or_default()
    }

    /// The shared counters (live).
    pub fn shared_counts(&self) -> SharedCounts {
        self.counts.clone()
    }

    fn count(&self, f: impl FnOnce(&mut WriteCounts)) {
        if let Ok(mut c) = self.counts.lock() {
            f(&mut c);
        }
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

    /// Waits for every write in flight and every queued event (shutdown), up to `timeout`.
    pub async fn drain(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        {
            let mut tasks = self.tasks.lock().await;
            let _ = tokio::time::timeout_at(deadline, async { while tasks.join_next().await.is_some() {} }).await;
            tasks.abort_all();
        }
        let _ = tokio::time::timeout_at(deadline, async {
            while self.events_pending.load(Ordering::Acquire) > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        if let Ok(mut t) = self.event_task.lock()
            && let Some(h) = t.take()
        {
            h.abort();
        }
    }

    /// Abandons every write in flight and every queued event at once (a crash, in tests).
    pub fn abort(&self) {
        if let Ok(mut t) = self.tasks.try_lock() {
            t.abort_all();
        }
        if let Ok(mut t) = self.event_task.lock()
            && let Some(h) = t.take()
        {
            h.abort();
        }
    }

    /// Binds `pod` to `node` through `pods/binding`, off the caller's task.
    pub async fn bind(&self, pod: Arc<PodInfo>, node: String, started: Instant) {
        let w = self.clone();
        self.spawn(async move {
            let t = Instant::now();
            let outcome = w.bind_now(&pod, &node).await;
            let took = t.elapsed();
            let bound = outcome == BindOutcome::Bound;
            match &outcome {
                BindOutcome::Bound => w.count(|c| c.binds += 1),
                BindOutcome::Failed(_) => w.count(|c| c.failures += 1),
                _ => {}
            }
            let note = format!("Successfully assigned {} to {}", pod.key(), node);
            let ev_pod = pod.clone();
            let _ = w.results.send(BindResult { pod, node, outcome, started, took });
            // After the result: an event never holds up a bind.
            if bound {
                w.event(&ev_pod, "Normal", "Scheduled", "Binding", note);
            }
        })
        .await;
    }

    async fn bind_now(&self, pod: &PodInfo, node: &str) -> BindOutcome {
        let r = {
            let Ok(_slot) = self.bind_slots.acquire().await else { return BindOutcome::Failed("writer closed".into()) };
            self.bind_limiter.acquire().await;
            let Some(_permit) = self.lease.write_permit().await else {
                self.count(|c| c.refused_not_leader += 1);
                return BindOutcome::NotLeader;
            };
            let api: Api<core::Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
            let binding = core::Binding {
                metadata: meta::ObjectMeta { name: Some(pod.name.clone()), namespace: Some(pod.namespace.clone()), uid: Some(pod.uid.clone()), ..Default::default() },
                target: core::ObjectReference { kind: Some("Node".into()), api_version: Some("v1".into()), name: Some(node.into()), ..Default::default() },
            };
            tokio::time::timeout(Duration::from_secs(30), api.create_subresource::<_, serde_json::Value>("binding", &pod.name, &PostParams::default(), &binding)).await
        };
        let why = match r {
            Ok(Ok(_)) => return BindOutcome::Bound,
            Ok(Err(e)) if api_code(&e) == Some(404) => return BindOutcome::Gone,
            Ok(Err(e)) if api_code(&e) == Some(409) => {
                // Bound already (by an earlier attempt of ours whose reply was
                // lost and that kube's client retried, by a previous leader, or
                // by someone else) — or a conflict saying nothing of the sort.
                return match self.verify(pod, node).await {
                    Verified::BoundHere => BindOutcome::AlreadyBound { node: node.to_string() },
                    Verified::BoundElsewhere(n) => BindOutcome::AlreadyBound { node: n },
                    Verified::NotBound => BindOutcome::Failed(e.to_string()),
                    Verified::Gone => BindOutcome::Gone,
                };
            }
            Ok(Err(e)) if !outcome_unknown(&e) => return BindOutcome::Failed(e.to_string()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "binding timed out after 30s".to_string(),
        };
        self.count(|c| c.binds_unknown += 1);
        tracing::info!(pod = %pod.key(), %node, error = %why, "bind outcome unknown; reading the pod back");
        match self.verify(pod, node).await {
            Verified::BoundHere => BindOutcome::Bound,
            Verified::BoundElsewhere(n) => BindOutcome::AlreadyBound { node: n },
            Verified::NotBound => BindOutcome::Failed(why),
            Verified::Gone => BindOutcome::Gone,
        }
    }

    /// Reads the pod back until the API says where it is (reads need no
    /// leadership; retried with backoff for as long as it takes).
    async fn verify(&self, pod: &PodInfo, node: &str) -> Verified {
        let api: Api<core::Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let mut pause = Duration::from_millis(50);
        for attempt in 1u32.. {
            match tokio::time::timeout(Duration::from_secs(10), api.get_opt(&pod.name)).await {
                Ok(Ok(None)) => return Verified::Gone,
                Ok(Ok(Some(p))) => {
                    if p.metadata.uid.as_deref().is_some_and(|u| u != pod.uid) {
                        return Verified::Gone;
                    }
                    return match p.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty()) {
                        Some(n) if n == node => Verified::BoundHere,
                        Some(n) => Verified::BoundElsewhere(n),
                        None => Verified::NotBound,
                    };
                }
                Ok(Err(e)) => tracing::debug!(pod = %pod.key(), error = %e, attempt, "reading the pod back failed"),
                Err(_) => tracing::debug!(pod = %pod.key(), attempt, "reading the pod back timed out"),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
        Verified::NotBound
    }

    async fn patch_status(&self, pod: &PodInfo, patch: serde_json::Value) -> bool {
        let Ok(_slot) = self.status_slots.acquire().await else { return false };
        self.status_limiter.acquire().await;
        let Some(_permit) = self.lease.write_permit().await else {
            self.count(|c| c.refused_not_leader += 1);
            return false;
        };
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
    /// `since`: the condition's lastTransitionTime when it already was False
    /// (kept: it changes only on a transition), None to stamp now.
    pub async fn report_failure(&self, pod: Arc<PodInfo>, reason: &'static str, message: String, nominated: Option<String>, since: Option<meta::Time>) {
        let w = self.clone();
        self.spawn(async move {
            let at = since.unwrap_or_else(|| meta::Time(k8s_openapi::jiff::Timestamp::now()));
            let mut status = json!({
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": reason, "message": message, "lastTransitionTime": at}],
            });
            if let Some(n) = &nominated {
                status["nominatedNodeName"] = json!(n);
            }
            w.patch_status(&pod, json!({ "status": status })).await;
            w.event(&pod, "Warning", "FailedScheduling", "Scheduling", message);
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
            w.event(&victim, "Normal", "Preempted", "Preempting", format!("Preempted by pod {} on node {}", preemptor.uid, node));
            let api: Api<core::Pod> = Api::namespaced(w.client.clone(), &victim.namespace);
            let dp = DeleteParams { preconditions: Some(Preconditions { uid: Some(victim.uid.clone()), resource_version: None }), ..Default::default() };
            // The preemptor waits for this delete: retry transient failures a few times.
            let mut pause = Duration::from_millis(200);
            for attempt in 1..=5 {
                let r = {
                    let Ok(_slot) = w.status_slots.acquire().await else { return };
                    w.status_limiter.acquire().await;
                    let Some(_permit) = w.lease.write_permit().await else {
                        w.count(|c| c.refused_not_leader += 1);
                        return;
                    };
                    api.delete(&victim.name, &dp).await
                };
                match r {
                    Ok(_) => break,
                    Err(e) if matches!(api_code(&e), Some(404 | 409)) => break,
                    Err(e) => {
                        w.count(|c| c.failures += 1);
                        tracing::warn!(victim = %victim.key(), error = %e, attempt, "deleting preemption victim failed");
                    }
                }
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        })
        .await;
    }

    /// Writes a PodGroup's status (either API) with a merge patch of its
    /// status subresource, off the caller's task. A failure is logged: the
    /// next attempt of the group writes again.
    pub async fn group_status(&self, api: crate::model::pod::GroupApi, namespace: String, name: String, status: serde_json::Value) {
        let w = self.clone();
        self.spawn(async move {
            let ar = super::watch::group_api_resource(api);
            let groups: Api<kube::api::DynamicObject> = Api::namespaced_with(w.client.clone(), &namespace, &ar);
            let Ok(_slot) = w.status_slots.acquire().await else { return };
            w.status_limiter.acquire().await;
            let Some(_permit) = w.lease.write_permit().await else {
                w.count(|c| c.refused_not_leader += 1);
                return;
            };
            if let Err(e) = groups.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({ "status": status }))).await {
                tracing::warn!(group = %format!("{namespace}/{name}"), error = %e, "writing PodGroup status failed");
            }
        })
        .await;
    }

    /// Queues an event (events.k8s.io/v1) for the event task; never waits.
    pub fn event(&self, pod: &Arc<PodInfo>, kind: &'static str, reason: &'static str, action: &'static str, note: String) {
        let item = EventItem { pod: pod.clone(), kind, reason, action, note };
        self.events_pending.fetch_add(1, Ordering::AcqRel);
        if self.events.try_send(item).is_err() {
            self.events_pending.fetch_sub(1, Ordering::AcqRel);
            self.count(|c| c.events_lost += 1);
            tracing::warn!(pod = %pod.key(), reason, "event queue full; event dropped");
        }
    }

    /// Drains the event queue: aggregates isomorphic events into series and
    /// writes the rest, each with retries, at most `EVENT_CONCURRENCY` at once.
    async fn event_loop(self, mut rx: mpsc::Receiver<EventItem>, limiter: Arc<RateLimiter>) {
        // Isomorphic key → (created event's name once known, series count, last seen).
        type Series = HashMap<(String, &'static str, &'static str, &'static str, String), (Arc<std::sync::Mutex<Option<String>>>, u32, Instant)>;
        let mut series: Series = HashMap::new();
        let slots = Arc::new(Semaphore::new(EVENT_CONCURRENCY));
        let mut running = tokio::task::JoinSet::new();
        while let Some(item) = rx.recv().await {
            while running.try_join_next().is_some() {}
            let now = Instant::now();
            if series.len() > 10_000 {
                series.retain(|_, (_, _, at)| now.duration_since(*at) < SERIES_WINDOW);
            }
            let key = (item.pod.uid.clone(), item.kind, item.reason, item.action, item.note.clone());
            let (name, count) = match series.get_mut(&key) {
                Some((name, count, at)) if now.duration_since(*at) < SERIES_WINDOW => {
                    *count += 1;
                    *at = now;
                    (name.clone(), *count)
                }
                _ => {
                    let name = Arc::new(std::sync::Mutex::new(None));
                    series.insert(key, (name.clone(), 1, now));
                    (name, 1)
                }
            };
            if count > 2 {
                // Upstream writes a series once (count 2) and then only on its heartbeat.
                self.count(|c| c.events_suppressed += 1);
                self.events_pending.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            let Ok(slot) = slots.clone().acquire_owned().await else { break };
            let w = self.clone();
            let limiter = limiter.clone();
            running.spawn(async move {
                w.write_event(&item, &limiter, &name, count).await;
                drop(slot);
                w.events_pending.fetch_sub(1, Ordering::AcqRel);
            });
        }
    }

    async fn write_event(&self, item: &EventItem, limiter: &RateLimiter, name: &std::sync::Mutex<Option<String>>, count: u32) {
        let pod = &item.pod;
        let api: Api<events::Event> = Api::namespaced(self.client.clone(), &pod.namespace);
        let now = k8s_openapi::jiff::Timestamp::now();
        let mut pause = Duration::from_millis(100);
        for attempt in 1..=EVENT_TRIES {
            limiter.acquire().await;
            let r = {
                let Some(_permit) = self.lease.write_permit().await else {
                    self.count(|c| {
                        c.refused_not_leader += 1;
                        c.events_lost += 1;
                    });
                    return;
                };
                let existing = name.lock().ok().and_then(|n| n.clone());
                match (count, existing) {
                    (1, _) | (_, None) => {
                        let ev = self.event_object(item, now);
                        api.create(&PostParams::default(), &ev).await.map(|created| {
                            if let (Ok(mut n), Some(created)) = (name.lock(), created.metadata.name) {
                                *n = Some(created);
                            }
                        })
                    }
                    (_, Some(existing)) => {
                        let patch = json!({"series": {"count": count, "lastObservedTime": meta::MicroTime(now)}});
                        api.patch(&existing, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| ())
                    }
                }
            };
            match r {
                Ok(()) => {
                    self.count(|c| c.events_written += 1);
                    return;
                }
                Err(e) if api_code(&e).is_some_and(|c| (400..500).contains(&c) && c != 429) => {
                    // Refused for good (namespace gone, invalid): retrying cannot help.
                    tracing::debug!(pod = %pod.key(), error = %e, "event refused");
                    self.count(|c| c.events_lost += 1);
                    return;
                }
                Err(e) => {
                    tracing::debug!(pod = %pod.key(), error = %e, attempt, "event write failed; retrying");
                    self.count(|c| c.event_retries += 1);
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
        tracing::warn!(pod = %pod.key(), reason = item.reason, "event not recorded after {EVENT_TRIES} tries");
        self.count(|c| c.events_lost += 1);
    }

    fn event_object(&self, item: &EventItem, now: k8s_openapi::jiff::Timestamp) -> events::Event {
        let pod = &item.pod;
        events::Event {
            metadata: meta::ObjectMeta { generate_name: Some(format!("{}.", pod.name)), namespace: Some(pod.namespace.clone()), ..Default::default() },
            event_time: Some(meta::MicroTime(now)),
            action: Some(item.action.into()),
            reason: Some(item.reason.into()),
            note: Some(item.note.chars().take(1024).collect()),
            type_: Some(item.kind.into()),
            reporting_controller: Some(self.component.clone()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(core::ObjectReference {
                kind: Some("Pod".into()),
                api_version: Some("v1".into()),
                namespace: Some(pod.namespace.clone()),
                name: Some(pod.name.clone()),
                uid: Some(pod.uid.clone()),
                ..Default::default()
            }),
            ..Default::default()
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

    #[test]
    fn unknown_outcomes_are_transport_errors_and_5xx() {
        let api = |code| kube::Error::Api(Box::new(kube::core::Status { code, ..Default::default() }));
        assert!(outcome_unknown(&api(500)));
        assert!(outcome_unknown(&api(504)));
        assert!(!outcome_unknown(&api(429)));
        assert!(!outcome_unknown(&api(409)));
        assert!(!outcome_unknown(&api(422)));
    }
}
