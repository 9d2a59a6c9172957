//! Every write berth makes to the API: bindings, PodScheduled conditions,
//! nominations, preemption (DisruptionTarget then a graceful delete), and
//! events. Bind results come back to the scheduling loop as messages.
//!
//! Three budgets, so that no kind of write starves another:
//!
//! - **binds**: their own concurrency and token bucket (clientConnection qps/burst).
//!   A bind waits for its turn as a small job in a queue, not as a task: a
//!   backlog of tens of thousands of assumed pods holds a few words each, and
//!   at most [`BIND_TASKS`] bind tasks (each the size of a whole client call)
//!   exist at once;
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
//!
//! A pod whose PreBind plugins left API work (the framework's
//! [`PreBindWork`]: VolumeBinding's PV claimRefs and claims' selected-node
//! annotations today) first has it carried out in its bind job
//! ([`Writer::bind_with_work`]): the writes under the bind budget and the
//! lease, read back when their outcome is unknown; then a bounded wait until
//! the claims are bound. Only then is the pod bound. A failure names the
//! plugin the work came from.
//!
//! DynamicResources' work is its ResourceClaims' (upstream `bindClaim`):
//! the delete-protection finalizer, then the allocation and the pod's
//! reservedFor entry in one status write, each conditional on the claim's
//! uid and resourceVersion: the first against the claim as the scheduler's
//! cache shows it, the second against the first one's reply, so that a
//! current cache costs two writes and no read. A 409 or an unknown outcome
//! is resolved by reading the claim back: allocated as decided and reserved for the pod,
//! the write is done; allocated otherwise, deleted or re-created, the bind
//! fails and the loop forgets the pod's assumed devices and retries it.
//! The claim of extended resources a DeviceClass backs is created first
//! (found again if an earlier attempt created it) and recorded in the pod's
//! status.extendedResourceClaimStatus.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryFutureExt;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::Api;
use serde_json::json;
use tokio::sync::{mpsc, Mutex, Semaphore};

use super::leader::Lease;
use super::slots::Slots;
use berth_engine::cache::storage::{self as vol, StaticBinding};
use berth_engine::framework::{ApiWrite, PreBindWork, WaitFor};
use berth_model::PodInfo;

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
    /// PreBind writes that reached the API: PV claimRefs and claims' selected node.
    pub volume_writes: u64,
    /// PreBind writes whose outcome was unknown and had to be read back.
    pub volume_writes_unknown: u64,
    /// ResourceClaim writes of PreBind that reached the API (finalizer,
    /// allocation and reservation, the extended-resource claim).
    pub claim_writes: u64,
    /// ResourceClaim writes whose outcome was unknown and had to be read back.
    pub claim_writes_unknown: u64,
    /// ResourceClaim writes answered 409 (read back, then retried or given up).
    pub claim_conflicts: u64,
    /// ResourceClaim reads of PreBind's allocations (after a conflict or an
    /// unknown outcome, when the cache's claim was behind or had
    /// reservations; none when the cache is current).
    pub claim_reads: u64,
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
/// At most this many event series are remembered (upstream's
/// `maxLruCacheEntries`).
const SERIES_CAP: usize = 4096;
/// Bounds the event series: at [`SERIES_CAP`], the series past their window
/// go, and if half the cap is still left the older half goes too (upstream's
/// correlator keeps its series in an LRU cache of 4,096). The pass then runs
/// once per thousands of new series rather than on every event.
fn trim_series<K: Eq + std::hash::Hash, V>(series: &mut HashMap<K, V>, at: impl Fn(&V) -> Instant, now: Instant) {
    if series.len() < SERIES_CAP {
        return;
    }
    series.retain(|_, v| now.duration_since(at(v)) < SERIES_WINDOW);
    if series.len() >= SERIES_CAP / 2 {
        let mut seen: Vec<Instant> = series.values().map(&at).collect();
        let mid = seen.len() / 2;
        let cut = *seen.select_nth_unstable(mid).1;
        series.retain(|_, v| at(v) > cut);
    }
}

/// Concurrent event writes.
const EVENT_CONCURRENCY: usize = 8;
/// Bind tasks alive at once at least (twice the bind concurrency when that
/// is more): enough to keep every bind slot busy while others read back a
/// bind whose outcome is unknown.
pub const BIND_TASKS: usize = 64;

/// A bind waiting for a task.
struct BindJob {
    pod: Arc<PodInfo>,
    node: String,
    started: Instant,
}

/// The API writer.
#[derive(Clone)]
pub struct Writer {
    client: kube::Client,
    lease: Lease,
    bind_limiter: Arc<RateLimiter>,
    status_limiter: Arc<RateLimiter>,
    /// Slots of the binds and PreBind writes (see [`crate::slots`]).
    bind_slots: Arc<Slots>,
    status_slots: Arc<Semaphore>,
    results: mpsc::UnboundedSender<BindResult>,
    binds: mpsc::UnboundedSender<BindJob>,
    /// Binds queued and not yet running in a task.
    binds_queued: Arc<AtomicUsize>,
    events: mpsc::Sender<EventItem>,
    events_pending: Arc<AtomicUsize>,
    counts: SharedCounts,
    component: String,
    instance: String,
    tasks: Arc<Mutex<tokio::task::JoinSet<()>>>,
    event_task: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
    bind_task: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
    /// The metrics of claim allocations (set once by the daemon).
    metrics: Arc<std::sync::OnceLock<super::metrics::Metrics>>,
}

/// Aborts the task held in `slot`, if still there.
fn stop_task(slot: &std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>) {
    if let Ok(mut t) = slot.lock()
        && let Some(h) = t.take()
    {
        h.abort();
    }
}

/// Returns once `n` is zero (polled: it counts queued work that has no waiter).
async fn until_zero(n: &AtomicUsize) {
    while n.load(Ordering::Acquire) > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
        let (btx, brx) = mpsc::unbounded_channel();
        let w = Writer {
            client,
            lease,
            bind_limiter: Arc::new(RateLimiter::new(qps, burst)),
            status_limiter: Arc::new(RateLimiter::new(qps, burst)),
            bind_slots: Slots::new(concurrency),
            status_slots: Arc::new(Semaphore::new(concurrency.max(1))),
            results,
            binds: btx,
            binds_queued: Arc::new(AtomicUsize::new(0)),
            events: etx,
            events_pending: Arc::new(AtomicUsize::new(0)),
            counts: Arc::new(std::sync::Mutex::new(WriteCounts::default())),
            component: "berth".into(),
            instance: identity.to_string(),
            tasks: Arc::new(Mutex::new(tokio::task::JoinSet::new())),
            event_task: Arc::new(std::sync::Mutex::new(None)),
            bind_task: Arc::new(std::sync::Mutex::new(None)),
            metrics: Arc::new(std::sync::OnceLock::new()),
        };
        let h = tokio::spawn(w.clone().event_loop(erx, Arc::new(RateLimiter::new(qps, burst))));
        if let Ok(mut t) = w.event_task.lock() {
            *t = Some(h);
        }
        let h = tokio::spawn(w.clone().bind_loop(brx, BIND_TASKS.max(2 * concurrency)));
        if let Ok(mut t) = w.bind_task.lock() {
            *t = Some(h);
        }
        w
    }

    /// Records claim allocations in `m` from now on (every clone of this writer).
    pub fn set_metrics(&self, m: super::metrics::Metrics) {
        let _ = self.metrics.set(m);
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
        // Boxed: a write's future holds a whole client call (kilobytes), which
        // the task would otherwise copy in on spawn and over on completion.
        tasks.spawn(Box::pin(fut));
    }

    /// Starts queued binds as tasks, at most `live` at once, in order.
    async fn bind_loop(self, mut rx: mpsc::UnboundedReceiver<BindJob>, live: usize) {
        let live = Arc::new(Semaphore::new(live));
        while let Some(job) = rx.recv().await {
            let Ok(permit) = live.clone().acquire_owned().await else { return };
            let w = self.clone();
            self.spawn(async move {
                w.run_bind(job.pod, job.node, job.started, Vec::new(), Vec::new()).await;
                drop(permit);
            })
            .await;
            // Counted out once in the task set, so that `drain` waits for it.
            self.binds_queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Waits for every write in flight and every queued event (shutdown), up to `timeout`.
    pub async fn drain(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        let _ = tokio::time::timeout_at(deadline, until_zero(&self.binds_queued)).await;
        stop_task(&self.bind_task);
        {
            let mut tasks = self.tasks.lock().await;
            let _ = tokio::time::timeout_at(deadline, async { while tasks.join_next().await.is_some() {} }).await;
            tasks.abort_all();
        }
        let _ = tokio::time::timeout_at(deadline, until_zero(&self.events_pending)).await;
        stop_task(&self.event_task);
    }

    /// Abandons every write in flight and every queued event at once (a crash, in tests).
    pub fn abort(&self) {
        stop_task(&self.bind_task);
        if let Ok(mut t) = self.tasks.try_lock() {
            t.abort_all();
        }
        stop_task(&self.event_task);
    }

    /// Binds `pod` to `node` through `pods/binding`, off the caller's task.
    pub async fn bind(&self, pod: Arc<PodInfo>, node: String, started: Instant) {
        self.bind_with_work(pod, node, started, Vec::new(), Vec::new()).await;
    }

    /// Binds `pod` to `node` off the caller's task, after carrying out the
    /// PreBind plugins' API work, in order, when there is some (see
    /// [`Writer::pre_bind_work`]). A PreBind failure is reported on the pod
    /// (PodScheduled=False, SchedulerError, and a FailedScheduling event) and
    /// comes back as `Failed`, `Gone` or `NotLeader`; the pod is not bound.
    /// `seen`: the ResourceClaims the work writes, as the scheduler's cache
    /// last showed them (see [`Writer::allocate_claim`]; any missing one is
    /// read first).
    pub async fn bind_with_work(&self, pod: Arc<PodInfo>, node: String, started: Instant, work: Vec<PreBindWork>, seen: Vec<ResourceClaim>) {
        match work.is_empty() {
            // PreBind may wait long (for volumes): its own task, never holding up other binds.
            false => {
                let w = self.clone();
                self.spawn(async move { w.run_bind(pod, node, started, work, seen).await }).await;
            }
            true => {
                self.binds_queued.fetch_add(1, Ordering::AcqRel);
                if self.binds.send(BindJob { pod, node, started }).is_err() {
                    // The writer is shutting down: the bind is not made.
                    self.binds_queued.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
    }

    /// One bind job: PreBind's API work when there is some, the binding,
    /// the failure report, the result to the loop and the Scheduled event.
    async fn run_bind(&self, pod: Arc<PodInfo>, node: String, started: Instant, work: Vec<PreBindWork>, seen: Vec<ResourceClaim>) {
        let mut pre = Ok(());
        for w in &work {
            pre = self.pre_bind_work(&pod, &node, w, &seen).await.map_err(|e| e.outcome(w.plugin));
            if pre.is_err() {
                break;
            }
        }
        let pre_failed = pre.is_err();
        // `took` is the binding call's, as before (PreBind's wait is not Bind's).
        let t = Instant::now();
        let outcome = match pre {
            Ok(()) => self.bind_now(&pod, &node, started).await,
            Err(o) => o,
        };
        let took = t.elapsed();
        let bound = outcome == BindOutcome::Bound;
        match &outcome {
            BindOutcome::Bound => self.count(|c| c.binds += 1),
            BindOutcome::Failed(_) => self.count(|c| c.failures += 1),
            _ => {}
        }
        let report = match &outcome {
            BindOutcome::Failed(m) if pre_failed => Some(m.clone()),
            _ => None,
        };
        // Unreserve: the extended-resource claim PreBind created goes with
        // the failed attempt (before the result, which allows the retry).
        if matches!(outcome, BindOutcome::Failed(_)) && work.iter().flat_map(|w| &w.writes).any(|w| matches!(w, ApiWrite::CreateExtendedResourceClaim { .. })) {
            self.delete_extended_claim(&pod).await;
        }
        if let Some(message) = report {
            // Before the result: the retry it allows cannot bind the pod
            // before this False condition is written.
            let at = meta::Time(k8s_openapi::jiff::Timestamp::now());
            let status = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError", "message": message, "lastTransitionTime": at}]}});
            self.patch_status(&pod, status).await;
            self.event(&pod, "Warning", "FailedScheduling", "Scheduling", message);
        }
        let note = format!("Successfully assigned {} to {}", pod.key(), node);
        let ev_pod = pod.clone();
        let _ = self.results.send(BindResult { pod, node, outcome, started, took });
        // After the result: an event never holds up a bind.
        if bound {
            self.event(&ev_pod, "Normal", "Scheduled", "Binding", note);
        }
    }

    async fn bind_now(&self, pod: &PodInfo, node: &str, started: Instant) -> BindOutcome {
        let r = {
            // A binding's key is its pod's start: ahead of every PreBind write (keyed by its deadline).
            let _slot = self.bind_slots.acquire(tokio::time::Instant::from_std(started)).await;
            self.bind_limiter.acquire().await;
            let Some(_permit) = self.lease.write_permit().await else {
                self.count(|c| c.refused_not_leader += 1);
                return BindOutcome::NotLeader;
            };
            let binding = core::Binding {
                metadata: meta::ObjectMeta { name: Some(pod.name.clone()), namespace: Some(pod.namespace.clone()), uid: Some(pod.uid.clone()), ..Default::default() },
                target: core::ObjectReference { kind: Some("Node".into()), api_version: Some("v1".into()), name: Some(node.into()), ..Default::default() },
            };
            // `Api::create_subresource`'s request, on a path built without an
            // `Api` (which formats the path and copies the kind's names per call).
            // The reply (a Status) is checked for being JSON, not kept.
            let call = async {
                let body = serde_json::to_vec(&binding).map_err(kube::Error::SerdeError)?;
                let path = namespaced_path("/api/v1/namespaces/", &pod.namespace, "/pods");
                let mut req = kube::core::Request::new(path).create_subresource("binding", &pod.name, &PostParams::default(), body).map_err(kube::Error::BuildRequest)?;
                req.extensions_mut().insert("create_subresource");
                self.client.request::<serde::de::IgnoredAny>(req).await
            };
            tokio::time::timeout(Duration::from_secs(30), call).await
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
    pub async fn group_status(&self, api: berth_model::pod::GroupApi, namespace: String, name: String, status: serde_json::Value) {
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
            trim_series(&mut series, |v| v.2, now);
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
            // Boxed, as in `Writer::spawn`.
            running.spawn(Box::pin(async move {
                w.write_event(&item, &limiter, &name, count).await;
                drop(slot);
                w.events_pending.fetch_sub(1, Ordering::AcqRel);
            }));
        }
    }

    async fn write_event(&self, item: &EventItem, limiter: &RateLimiter, name: &std::sync::Mutex<Option<String>>, count: u32) {
        let pod = &item.pod;
        let path = namespaced_path("/apis/events.k8s.io/v1/namespaces/", &pod.namespace, "/events");
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
                        let ours = ev.metadata.name.clone();
                        match create_reading_name(&self.client, &path, &ev).await {
                            Ok(created) => {
                                if let (Ok(mut n), Some(created)) = (name.lock(), created) {
                                    *n = Some(created);
                                }
                                Ok(())
                            }
                            // The name is this event's own: an earlier attempt
                            // whose reply was lost created it.
                            Err(e) if api_code(&e) == Some(409) => {
                                if let Ok(mut n) = name.lock() {
                                    *n = ours;
                                }
                                Ok(())
                            }
                            Err(e) => Err(e),
                        }
                    }
                    (_, Some(existing)) => {
                        let patch = json!({"series": {"count": count, "lastObservedTime": meta::MicroTime(now)}});
                        let api: Api<events::Event> = Api::namespaced(self.client.clone(), &pod.namespace);
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
                    // Refused access is the operator's to fix (the account's
                    // RBAC): said at warning level, with the server's message.
                    if matches!(api_code(&e), Some(401 | 403)) {
                        tracing::warn!(pod = %pod.key(), reason = item.reason, error = %e, "event refused");
                    } else {
                        tracing::debug!(pod = %pod.key(), error = %e, "event refused");
                    }
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
            // Named as upstream's recorder names it (`<regarding>.<unix nanos in hex>`):
            // a generateName of "<pod>." is refused by kube-apiserver, which
            // validates the prefix as a DNS subdomain (it may not end in a dot).
            metadata: meta::ObjectMeta { name: Some(format!("{}.{:x}", pod.name, now.as_nanosecond())), namespace: Some(pod.namespace.clone()), ..Default::default() },
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

/// How one PreBind write ended.
enum VolumeWrite {
    /// Written (or found written when read back).
    Done,
    /// The object changed under us (409): read it again and retry.
    Conflict(String),
    /// Known not written, for this reason.
    Refused(String),
    /// Not leader any more: not attempted.
    NotLeader,
}

/// What one poll of the PreBind wait found.
enum Bound {
    /// Every claim is fully bound.
    All,
    /// Not yet.
    NotYet,
    /// Binding cannot succeed (upstream `checkBindings` errors).
    Failed(String),
    /// The pod is gone.
    PodGone,
}

/// Attempts at one PV or claim write when it conflicts (409) with another writer.
const VOLUME_WRITE_TRIES: u32 = 3;

/// Why a PreBind plugin's API work stopped short.
#[derive(Debug)]
enum PreBindStop {
    /// Known to have failed, for this reason.
    Failed(String),
    /// The pod is gone.
    Gone,
    /// Not leader any more: not attempted.
    NotLeader,
}

impl PreBindStop {
    /// What the bind comes to: a failure names the plugin the work came from.
    fn outcome(self, plugin: &str) -> BindOutcome {
        match self {
            PreBindStop::Failed(m) => pre_bind_failed(plugin, m),
            PreBindStop::Gone => BindOutcome::Gone,
            PreBindStop::NotLeader => BindOutcome::NotLeader,
        }
    }
}

fn stop(message: impl std::fmt::Display) -> PreBindStop {
    PreBindStop::Failed(message.to_string())
}

fn pre_bind_failed(plugin: &str, message: impl std::fmt::Display) -> BindOutcome {
    BindOutcome::Failed(format!("running PreBind plugin {plugin:?}: {message}"))
}

/// Fully bound, as the binder reads it: a volume name and the bind-completed annotation.
fn claim_fully_bound(c: &core::PersistentVolumeClaim) -> bool {
    c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).is_some_and(|v| !v.is_empty()) && c.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(vol::ANN_BIND_COMPLETED))
}

fn selected_node_of(c: &core::PersistentVolumeClaim) -> Option<&str> {
    c.metadata.annotations.as_ref().and_then(|a| a.get(vol::ANN_SELECTED_NODE)).map(String::as_str)
}

impl Writer {
    /// One PreBind plugin's API work, carried out off the scheduling loop
    /// (for VolumeBinding's, as upstream's `BindPodVolumes` does): each write
    /// in order (a PV's claimRef, with `pv.kubernetes.io/bound-by-controller`
    /// unless it was pre-bound; a claim's `volume.kubernetes.io/selected-node`
    /// annotation); then it waits, at most `work.timeout`, until the PV
    /// controller and the provisioner have bound every claim.
    ///
    /// Each write is a fresh read then a write conditional on its
    /// resourceVersion, through the bind budget and the lease permit. A write
    /// whose outcome is unknown is read back: written, it counts as done;
    /// not written, PreBind fails. Nothing is rolled back in the API (as
    /// upstream: the PV controller finishes or undoes a binding); the loop
    /// forgets the assumed decisions when the result says the pod was not
    /// bound.
    async fn pre_bind_work(&self, pod: &PodInfo, node: &str, work: &PreBindWork, seen: &[ResourceClaim]) -> Result<(), PreBindStop> {
        let deadline = tokio::time::Instant::now() + work.timeout;
        for w in &work.writes {
            match w {
                ApiWrite::BindVolume(b) => self.bind_pv(b, deadline).await?,
                ApiWrite::SelectNode { namespace, name } => self.select_node(namespace, name, node, deadline).await?,
                ApiWrite::AllocateClaim { namespace, name, uid, allocation, pod_name, pod_uid } => {
                    let t = Instant::now();
                    let seen = seen.iter().find(|c| c.metadata.namespace.as_deref() == Some(namespace.as_str()) && c.metadata.name.as_deref() == Some(name.as_str())).cloned();
                    let r = self.allocate_claim(namespace, name, uid, allocation.as_ref(), pod_name, pod_uid, seen, deadline).await;
                    self.observe_allocation(if allocation.is_some() { "allocated" } else { "reserved" }, &r, t);
                    r?;
                }
                ApiWrite::CreateExtendedResourceClaim { namespace, pod_name, pod_uid, claim, request_mappings } => {
                    let t = Instant::now();
                    let r = self.create_extended_claim(namespace, pod_name, pod_uid, claim, request_mappings, deadline).await;
                    self.observe_allocation("allocated", &r, t);
                    r?;
                }
            }
        }
        if work.wait_for.is_empty() {
            return Ok(());
        }
        let nodes: Api<core::Node> = Api::all(self.client.clone());
        let labels = match self.read(deadline, || nodes.get_opt(node)).await? {
            Some(n) => n.metadata.labels.unwrap_or_default(),
            None => return Err(stop(format!("binding volumes: failed to get node {node:?}: nodes {node:?} not found"))),
        };
        let mut pause = Duration::from_millis(100);
        loop {
            match self.check_bindings(pod, node, &labels, work).await {
                Bound::All => return Ok(()),
                Bound::PodGone => return Err(PreBindStop::Gone),
                Bound::Failed(m) => return Err(stop(format!("binding volumes: {m}"))),
                Bound::NotYet => {}
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(stop("binding volumes: context deadline exceeded"));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Reads until the API answers (transport errors and 5xx are retried
    /// with backoff until `deadline`). Reads need no leadership.
    async fn read<T, F, Fut>(&self, deadline: tokio::time::Instant, f: F) -> Result<T, PreBindStop>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        let mut pause = Duration::from_millis(50);
        loop {
            match tokio::time::timeout(Duration::from_secs(10), f()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if !outcome_unknown(&e) => return Err(stop(e)),
                Ok(Err(e)) => tracing::debug!(error = %e, "PreBind read failed; retrying"),
                Err(_) => tracing::debug!("PreBind read timed out; retrying"),
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(stop("binding volumes: context deadline exceeded"));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    /// One PreBind write through the bind budget and the lease permit;
    /// `landed` reads the object back when the outcome is unknown.
    async fn volume_write<W, WFut, L, LFut>(&self, deadline: tokio::time::Instant, write: W, landed: L) -> Result<VolumeWrite, PreBindStop>
    where
        W: FnOnce() -> WFut,
        WFut: std::future::Future<Output = Result<serde_json::Value, kube::Error>>,
        L: Fn() -> LFut,
        LFut: std::future::Future<Output = Result<bool, kube::Error>>,
    {
        let r = {
            let _slot = self.bind_slots.acquire(deadline).await;
            self.bind_limiter.acquire().await;
            let Some(_permit) = self.lease.write_permit().await else {
                self.count(|c| c.refused_not_leader += 1);
                return Ok(VolumeWrite::NotLeader);
            };
            tokio::time::timeout(Duration::from_secs(30), write()).await
        };
        let why = match r {
            Ok(Ok(_)) => {
                self.count(|c| c.volume_writes += 1);
                return Ok(VolumeWrite::Done);
            }
            Ok(Err(e)) if api_code(&e) == Some(409) => return Ok(VolumeWrite::Conflict(e.to_string())),
            Ok(Err(e)) if !outcome_unknown(&e) => return Ok(VolumeWrite::Refused(e.to_string())),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "write timed out after 30s".to_string(),
        };
        self.count(|c| c.volume_writes_unknown += 1);
        tracing::info!(error = %why, "PreBind write outcome unknown; reading it back");
        if self.read(deadline, landed).await? {
            self.count(|c| c.volume_writes += 1);
            Ok(VolumeWrite::Done)
        } else {
            Ok(VolumeWrite::Refused(why))
        }
    }

    /// Sets a PV's claimRef to the claim (upstream `GetBindVolumeToClaim`,
    /// then the update of `bindAPIUpdate`).
    async fn bind_pv(&self, b: &StaticBinding, deadline: tokio::time::Instant) -> Result<(), PreBindStop> {
        let pvs: Api<core::PersistentVolume> = Api::all(self.client.clone());
        let claims: Api<core::PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &b.claim.namespace);
        let uid = if b.claim.uid.is_empty() {
            match self.read(deadline, || claims.get_opt(&b.claim.name)).await? {
                Some(c) => c.metadata.uid.unwrap_or_default(),
                None => return Err(stop(format!("persistentvolumeclaims {:?} not found", b.claim.name))),
            }
        } else {
            b.claim.uid.clone()
        };
        let mut last = String::new();
        for _ in 0..VOLUME_WRITE_TRIES {
            let Some(pv) = self.read(deadline, || pvs.get_opt(&b.pv)).await? else {
                return Err(stop(format!("persistentvolumes {:?} not found", b.pv)));
            };
            let current = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            let to_claim = current.is_some_and(|r| r.name.as_deref() == Some(&b.claim.name) && r.namespace.as_deref() == Some(&b.claim.namespace));
            if current.is_some() && !to_claim {
                return Err(stop(format!("persistentvolume {:?} is bound to another claim", b.pv)));
            }
            let current_uid = current.and_then(|r| r.uid.as_deref()).unwrap_or_default();
            if to_claim && current_uid == uid {
                return Ok(());
            }
            if to_claim && !current_uid.is_empty() {
                return Err(stop(format!("persistentvolume {:?} is bound to another claim of the same name", b.pv)));
            }
            let mut patch = json!({
                "metadata": {"resourceVersion": pv.metadata.resource_version},
                "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": b.claim.namespace, "name": b.claim.name, "uid": uid}},
            });
            if !to_claim {
                patch["metadata"]["annotations"] = json!({ vol::ANN_BOUND_BY_CONTROLLER: "yes" });
            }
            let (pvs_r, uid_r) = (&pvs, &uid);
            let landed = move || async move {
                let pv = pvs_r.get_opt(&b.pv).await?;
                Ok::<bool, kube::Error>(pv.and_then(|p| p.spec?.claim_ref).is_some_and(|r| r.name.as_deref() == Some(&b.claim.name) && r.namespace.as_deref() == Some(&b.claim.namespace) && r.uid.as_deref() == Some(uid_r)))
            };
            let (pp, mp) = (PatchParams::default(), Patch::Merge(&patch));
            match self.volume_write(deadline, || pvs.patch(&b.pv, &pp, &mp).map_ok(|_| serde_json::Value::Null), landed).await? {
                VolumeWrite::Done => return Ok(()),
                VolumeWrite::Conflict(m) => last = m,
                VolumeWrite::Refused(m) => return Err(stop(m)),
                VolumeWrite::NotLeader => return Err(PreBindStop::NotLeader),
            }
        }
        Err(stop(last))
    }

    /// Asks for a claim to be provisioned on `node` (the selected-node annotation).
    async fn select_node(&self, ns: &str, name: &str, node: &str, deadline: tokio::time::Instant) -> Result<(), PreBindStop> {
        let claims: Api<core::PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        let mut last = String::new();
        for _ in 0..VOLUME_WRITE_TRIES {
            let Some(c) = self.read(deadline, || claims.get_opt(name)).await? else {
                return Err(stop(format!("persistentvolumeclaims {name:?} not found")));
            };
            if c.metadata.deletion_timestamp.is_some() {
                return Err(stop(format!("persistentvolumeclaim {name:?} is being deleted")));
            }
            if selected_node_of(&c) == Some(node) {
                return Ok(());
            }
            let patch = json!({"metadata": {"resourceVersion": c.metadata.resource_version, "annotations": { vol::ANN_SELECTED_NODE: node }}});
            let claims_r = &claims;
            let landed = move || async move { Ok::<bool, kube::Error>(claims_r.get_opt(name).await?.is_some_and(|c| selected_node_of(&c) == Some(node))) };
            let (pp, mp) = (PatchParams::default(), Patch::Merge(&patch));
            match self.volume_write(deadline, || claims.patch(name, &pp, &mp).map_ok(|_| serde_json::Value::Null), landed).await? {
                VolumeWrite::Done => return Ok(()),
                VolumeWrite::Conflict(m) => last = m,
                VolumeWrite::Refused(m) => return Err(stop(m)),
                VolumeWrite::NotLeader => return Err(PreBindStop::NotLeader),
            }
        }
        Err(stop(last))
    }

    /// One poll of the wait (upstream `checkBindings`), on the API's objects.
    async fn check_bindings(&self, pod: &PodInfo, node: &str, labels: &berth_model::selector::Labels, work: &PreBindWork) -> Bound {
        let pods: Api<core::Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        match pods.get_opt(&pod.name).await {
            Ok(None) => return Bound::PodGone,
            Ok(Some(p)) if p.metadata.uid.as_deref().is_some_and(|u| u != pod.uid) => return Bound::PodGone,
            Ok(Some(_)) => {}
            Err(e) if api_code(&e) == Some(404) => return Bound::PodGone,
            Err(_) => return Bound::NotYet,
        }
        let pvs: Api<core::PersistentVolume> = Api::all(self.client.clone());
        let affinity = |pv: &core::PersistentVolume| -> Option<String> {
            let v = vol::Volume::from_api(pv);
            if let Some(e) = &v.error {
                return Some(e.to_string());
            }
            (!v.admits(node, labels)).then(|| format!("pv {:?} node affinity doesn't match node {node:?}: no matching NodeSelectorTerms", v.name))
        };
        for b in work.volume_bindings() {
            let pv = match pvs.get_opt(&b.pv).await {
                Ok(Some(pv)) => pv,
                Ok(None) => return Bound::Failed(format!("failed to check binding: persistentvolumes {:?} not found", b.pv)),
                Err(_) => return Bound::NotYet,
            };
            if let Some(m) = affinity(&pv) {
                return Bound::Failed(m);
            }
            match pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
                Some(r) if r.uid.as_deref().is_some_and(|u| !u.is_empty()) => {
                    if r.name.as_deref() != Some(&b.claim.name) || r.namespace.as_deref() != Some(&b.claim.namespace) {
                        return Bound::Failed(format!("pv {:?} was bound to another claim", b.pv));
                    }
                }
                _ => return Bound::Failed(format!("ClaimRef got reset for pv {:?}", b.pv)),
            }
        }
        for w in &work.wait_for {
            let WaitFor::ClaimBound { namespace: ns, name } = w;
            let claims: Api<core::PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
            let c = match claims.get_opt(name).await {
                Ok(Some(c)) => c,
                Ok(None) => return Bound::Failed(format!("failed to check binding: persistentvolumeclaims {name:?} not found")),
                Err(_) => return Bound::NotYet,
            };
            let provisioning = work.provisions(ns, name);
            if provisioning {
                if selected_node_of(&c) != Some(node) {
                    return Bound::Failed(format!("provisioning failed for PVC {name:?}"));
                }
                if let Some(v) = c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty()) {
                    match pvs.get_opt(v).await {
                        Ok(Some(pv)) => {
                            if let Some(m) = affinity(&pv) {
                                return Bound::Failed(m);
                            }
                        }
                        // Not seen yet (or being replaced): look again next time.
                        Ok(None) | Err(_) => return Bound::NotYet,
                    }
                }
            }
            if !claim_fully_bound(&c) {
                return Bound::NotYet;
            }
        }
        Bound::All
    }
}

/// Of a created object's reply, only its name.
#[derive(serde::Deserialize)]
struct CreatedName {
    metadata: NameOnly,
}

#[derive(serde::Deserialize)]
struct NameOnly {
    name: Option<String>,
}

/// Creates the event `obj` through `api` as `Api::create` does, but reads only
/// `metadata.name` of the reply instead of decoding the whole object (the
/// event writer needs the generated name, nothing else).
async fn create_reading_name(client: &kube::Client, path: &str, obj: &events::Event) -> Result<Option<String>, kube::Error> {
    let bytes = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let mut req = kube::core::Request::new(path).create(&PostParams::default(), bytes).map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("create");
    let created: CreatedName = client.request(req).await?;
    Ok(created.metadata.name)
}

/// A namespaced collection's path, `prefix` + namespace + `suffix` (as
/// kube's `Resource::url_path` gives it, in one allocation).
fn namespaced_path(prefix: &str, ns: &str, suffix: &str) -> String {
    let mut path = String::with_capacity(prefix.len() + ns.len() + suffix.len());
    path.push_str(prefix);
    path.push_str(ns);
    path.push_str(suffix);
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_paths_are_kubes() {
        use kube::Resource as _;
        assert_eq!(namespaced_path("/api/v1/namespaces/", "ns-1", "/pods"), core::Pod::url_path(&(), Some("ns-1")));
        assert_eq!(namespaced_path("/apis/events.k8s.io/v1/namespaces/", "ns-1", "/events"), events::Event::url_path(&(), Some("ns-1")));
    }

    #[test]
    fn event_series_stay_bounded_and_keep_the_newest() {
        let t0 = Instant::now();
        let mut series: HashMap<usize, Instant> = HashMap::new();
        for i in 0..20_000 {
            trim_series(&mut series, |v| *v, t0 + Duration::from_millis(i as u64));
            series.insert(i, t0 + Duration::from_millis(i as u64));
            assert!(series.len() <= SERIES_CAP, "{i}: {}", series.len());
        }
        assert!(series.contains_key(&19_999) && series.len() > SERIES_CAP / 4);
        // Series past their window go first: nothing else is dropped then.
        let late = t0 + SERIES_WINDOW + Duration::from_secs(60);
        let mut old: HashMap<usize, Instant> = (0..SERIES_CAP).map(|i| (i, if i < SERIES_CAP / 2 + 10 { t0 } else { late })).collect();
        trim_series(&mut old, |v| *v, late);
        assert_eq!(old.len(), SERIES_CAP / 2 - 10);
    }

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
    fn claims_are_bound_with_a_volume_and_bind_completed() {
        let claim = |v: serde_json::Value| -> core::PersistentVolumeClaim { serde_json::from_value(v).expect("claim") };
        let pending = claim(json!({"metadata": {"name": "c", "annotations": {vol::ANN_SELECTED_NODE: "n1"}}, "spec": {}}));
        assert!(!claim_fully_bound(&pending));
        assert_eq!(selected_node_of(&pending), Some("n1"));
        let half = claim(json!({"metadata": {"name": "c"}, "spec": {"volumeName": "pv-1"}}));
        assert!(!claim_fully_bound(&half));
        assert_eq!(selected_node_of(&half), None);
        let bound = claim(json!({"metadata": {"name": "c", "annotations": {vol::ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "pv-1"}}));
        assert!(claim_fully_bound(&bound));
        assert_eq!(
            stop("binding volumes: context deadline exceeded").outcome("VolumeBinding"),
            BindOutcome::Failed("running PreBind plugin \"VolumeBinding\": binding volumes: context deadline exceeded".into())
        );
    }

    fn rc(v: serde_json::Value) -> k8s_openapi::api::resource::v1::ResourceClaim {
        serde_json::from_value(v).expect("claim")
    }

    fn alloc(device: &str) -> k8s_openapi::api::resource::v1::AllocationResult {
        serde_json::from_value(json!({"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "node-0", "device": device}]}})).expect("allocation")
    }

    #[test]
    fn claim_writes_follow_what_the_api_shows() {
        let key = "default/c";
        let fresh = rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "5"}, "spec": {}}));
        let ours = alloc("gpu-0");
        // Unallocated: the finalizer first, then the status.
        assert_eq!(claim_next(&fresh, key, "u1", Some(&ours), "p1"), ClaimNext::Finalizer);
        let protected = rc(json!({"metadata": {"name": "c", "uid": "u1", "finalizers": [CLAIM_FINALIZER]}, "spec": {}}));
        assert_eq!(claim_next(&protected, key, "u1", Some(&ours), "p1"), ClaimNext::Status);
        // Re-created under the same name, or being deleted: the bind fails.
        assert_eq!(claim_next(&protected, key, "u2", Some(&ours), "p1"), ClaimNext::Fail("claim default/c got deleted in the meantime".into()));
        let deleting = rc(json!({"metadata": {"name": "c", "uid": "u1", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}}));
        assert!(matches!(claim_next(&deleting, key, "u1", Some(&ours), "p1"), ClaimNext::Fail(_)));
        // Our allocation and reservation already there (a lost reply): done.
        let mine = rc(json!({"metadata": {"name": "c", "uid": "u1", "finalizers": [CLAIM_FINALIZER]}, "spec": {},
            "status": {"allocation": serde_json::to_value(&ours).expect("json"), "reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}]}}));
        assert_eq!(claim_next(&mine, key, "u1", Some(&ours), "p1"), ClaimNext::Done);
        // Another allocation: the pod goes back to the queue.
        assert_eq!(claim_next(&mine, key, "u1", Some(&alloc("gpu-1")), "p1"), ClaimNext::Fail("claim default/c got allocated elsewhere in the meantime".into()));
        // Allocated already: only the reservation, added to the others.
        assert_eq!(claim_next(&mine, key, "u1", None, "p2"), ClaimNext::Status);
        assert_eq!(claim_next(&mine, key, "u1", None, "p1"), ClaimNext::Done);
        assert!(matches!(claim_next(&protected, key, "u1", None, "p1"), ClaimNext::Fail(m) if m.contains("deallocated")));
        let patch = claim_status_patch(&mine, None, "q", "p2");
        assert_eq!(patch["status"]["reservedFor"].as_array().map(Vec::len), Some(2));
        assert!(patch["status"].get("allocation").is_none());
        assert_eq!(patch["metadata"]["uid"], "u1");
        let patch = claim_status_patch(&fresh, Some(&serde_json::to_value(&ours).expect("json")), "p", "p1");
        assert_eq!(patch["metadata"]["resourceVersion"], "5");
        assert_eq!(patch["status"]["allocation"]["devices"]["results"][0]["device"], "gpu-0");
        assert_eq!(patch["status"]["reservedFor"], json!([{"resource": "pods", "name": "p", "uid": "p1"}]));
    }

    #[test]
    fn the_cache_claim_is_the_base_of_the_first_write_unless_it_has_reservations() {
        use berth_engine::cache::devices::Claim;
        let key = "default/c";
        let ours = alloc("gpu-0");
        let fresh = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "5"}, "spec": {}})));
        let seen = seen_claim(&fresh).expect("seen");
        assert_eq!(seen.metadata.resource_version.as_deref(), Some("5"));
        assert_eq!(claim_next(&seen, key, "u1", Some(&ours), "p1"), ClaimNext::Finalizer);
        // The finalizer there already (an earlier attempt): the status next,
        // under the cache's resourceVersion.
        let protected = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "6", "finalizers": [CLAIM_FINALIZER]}, "spec": {}})));
        let seen = seen_claim(&protected).expect("seen");
        assert_eq!(claim_next(&seen, key, "u1", Some(&ours), "p1"), ClaimNext::Status);
        assert_eq!(claim_status_patch(&seen, None, "p", "p1")["metadata"]["resourceVersion"], "6");
        // Allocated already and unreserved: only the reservation.
        let allocated = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "7", "finalizers": [CLAIM_FINALIZER]}, "spec": {},
            "status": {"allocation": serde_json::to_value(&ours).expect("json")}})));
        let seen = seen_claim(&allocated).expect("seen");
        assert_eq!(claim_next(&seen, key, "u1", None, "p1"), ClaimNext::Status);
        // Reserved for others (the cache drops their API group), being
        // deleted, or without a resourceVersion: read first.
        let shared = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "8"}, "spec": {},
            "status": {"allocation": serde_json::to_value(&ours).expect("json"), "reservedFor": [{"resource": "pods", "name": "q", "uid": "p2"}]}})));
        assert!(seen_claim(&shared).is_none());
        let deleting = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "9", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}})));
        assert!(seen_claim(&deleting).is_none());
        let unversioned = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1"}, "spec": {}})));
        assert!(seen_claim(&unversioned).is_none());
    }

    #[test]
    fn deallocation_only_of_a_claim_reserved_for_no_other_pod() {
        let d = berth_engine::framework::DeallocateClaim { namespace: "default".into(), name: "c".into(), uid: "u1".into(), pod_uid: "p1".into() };
        let allocation = serde_json::to_value(alloc("gpu-0")).expect("json");
        let claim = |uid: &str, status: serde_json::Value| rc(json!({"metadata": {"name": "c", "uid": uid, "resourceVersion": "7"}, "spec": {}, "status": status}));
        let free = claim("u1", json!({"allocation": allocation}));
        assert_eq!(dealloc_next(&free, &d), DeallocNext::Write);
        let ours = claim("u1", json!({"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}]}));
        assert_eq!(dealloc_next(&ours, &d), DeallocNext::Write);
        // Another pod holds it (alone or beside ours): no write.
        let other = claim("u1", json!({"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "q", "uid": "p2"}]}));
        assert!(matches!(dealloc_next(&other, &d), DeallocNext::Skip(m) if m.contains("another")));
        let both = claim("u1", json!({"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}, {"resource": "pods", "name": "q", "uid": "p2"}]}));
        assert!(matches!(dealloc_next(&both, &d), DeallocNext::Skip(_)));
        // Re-created, or deallocated already: nothing to do.
        assert!(matches!(dealloc_next(&claim("u2", json!({"allocation": allocation})), &d), DeallocNext::Skip(_)));
        assert!(matches!(dealloc_next(&claim("u1", json!({})), &d), DeallocNext::Skip(_)));
        let patch = dealloc_patch(&ours);
        assert_eq!(patch["metadata"], json!({"uid": "u1", "resourceVersion": "7"}));
        assert_eq!(patch["status"], json!({"allocation": null, "reservedFor": null, "devices": null}));
    }

    #[test]
    fn request_mappings_name_the_containers_asking_for_the_resource() {
        let pod: core::Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "init", "resources": {"limits": {"example.com/gpu": "1"}}}],
            "containers": [{"name": "a", "resources": {"requests": {"example.com/gpu": "2"}}}, {"name": "b", "resources": {"requests": {"example.com/gpu": "0m", "cpu": "1"}}},
                {"name": "c", "resources": {"requests": {"deviceclass.resource.kubernetes.io/nic": "1"}}}]}}))
        .expect("pod");
        let m = |c: &str, r: &str, q: &str| (c.to_string(), r.to_string(), q.to_string());
        let got = request_mappings(&pod, &[m("", "example.com/gpu", "container-0-request-0"), m("", "deviceclass.resource.kubernetes.io/nic", "container-0-request-1"), m("x", "y", "z")]);
        let names: Vec<(&str, &str)> = got.iter().map(|v| (v["containerName"].as_str().unwrap_or(""), v["requestName"].as_str().unwrap_or(""))).collect();
        assert_eq!(names, vec![("init", "container-0-request-0"), ("a", "container-0-request-0"), ("c", "container-0-request-1"), ("x", "z")]);
        assert_eq!(got[2]["resourceName"], "deviceclass.resource.kubernetes.io/nic");
    }

    #[test]
    fn unreserve_removes_only_the_pods_entry() {
        let c = rc(json!({"metadata": {"name": "c", "uid": "u1"}, "spec": {}, "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}, {"resource": "pods", "name": "q", "uid": "p2"}]}}));
        assert_eq!(reserved_without(&c, "p1"), Some(Some(vec![json!({"resource": "pods", "name": "q", "uid": "p2", "apiGroup": null})])));
        assert_eq!(reserved_without(&c, "p3"), None);
        let only = rc(json!({"metadata": {"name": "c", "uid": "u1"}, "spec": {}, "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}]}}));
        assert_eq!(reserved_without(&only, "p1"), Some(None));
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

// ---------------------------------------------------------------- ResourceClaims (DynamicResources' PreBind)

/// The finalizer that keeps an allocated claim until it is deallocated
/// (upstream `resourceapi.Finalizer`).
pub const CLAIM_FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// The annotation of the claim PreBind creates for extended resources.
pub const EXTENDED_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";
/// Attempts at one claim when it conflicts (409) with another writer
/// (upstream retries with `retry.DefaultRetry`: 5 steps).
const CLAIM_WRITE_TRIES: u32 = 5;

/// What the claim as the API shows it asks of PreBind next.
#[derive(Debug, PartialEq, Eq)]
enum ClaimNext {
    /// Allocated as we decided (or allocated already, for a reservation)
    /// and reserved for the pod: nothing to write.
    Done,
    /// The delete-protection finalizer must be added first.
    Finalizer,
    /// The status update (allocation and reservation) is due.
    Status,
    /// PreBind cannot succeed: the reason.
    Fail(String),
}

/// The devices of an allocation, as (request, driver, pool, device), sorted.
fn allocated_devices(a: &k8s_openapi::api::resource::v1::AllocationResult) -> Vec<(String, String, String, String)> {
    let mut v: Vec<_> = a.devices.iter().flat_map(|d| d.results.iter().flatten()).map(|r| (r.request.clone(), r.driver.clone(), r.pool.clone(), r.device.clone())).collect();
    v.sort();
    v
}

/// Decides PreBind's next step for `claim` (namespace/name `key`, whose uid
/// must be `uid`): write `ours` (None: the claim is allocated already) and a
/// reservation for the pod `pod_uid` (upstream `bindClaim`).
fn claim_next(claim: &k8s_openapi::api::resource::v1::ResourceClaim, key: &str, uid: &str, ours: Option<&k8s_openapi::api::resource::v1::AllocationResult>, pod_uid: &str) -> ClaimNext {
    let m = &claim.metadata;
    if m.uid.as_deref() != Some(uid) || m.deletion_timestamp.is_some() {
        return ClaimNext::Fail(format!("claim {key} got deleted in the meantime"));
    }
    let status = claim.status.as_ref();
    let current = status.and_then(|s| s.allocation.as_ref());
    let reserved = status.and_then(|s| s.reserved_for.as_ref()).is_some_and(|r| r.iter().any(|c| c.uid == pod_uid));
    match (ours, current) {
        (Some(a), Some(c)) if allocated_devices(a) == allocated_devices(c) => {
            if reserved { ClaimNext::Done } else { ClaimNext::Status }
        }
        (Some(_), Some(_)) => ClaimNext::Fail(format!("claim {key} got allocated elsewhere in the meantime")),
        (Some(_), None) => {
            if m.finalizers.iter().flatten().any(|f| f == CLAIM_FINALIZER) { ClaimNext::Status } else { ClaimNext::Finalizer }
        }
        (None, Some(_)) => {
            if reserved { ClaimNext::Done } else { ClaimNext::Status }
        }
        (None, None) => ClaimNext::Fail(format!("claim {key} got deallocated in the meantime")),
    }
}

/// The claim as the scheduler's cache shows it (the API's view, nothing
/// assumed), as the base of PreBind's first conditional write
/// ([`Writer::allocate_claim`]): its uid, resourceVersion, finalizers and
/// allocation. None (read the claim first) when the cache has no
/// resourceVersion, the claim is being deleted, or it has reservations:
/// the cache keeps a consumer's resource, name and uid but not its API
/// group, and the status write carries the whole reservedFor list.
pub fn seen_claim(c: &berth_engine::cache::devices::Claim) -> Option<ResourceClaim> {
    if c.resource_version.is_empty() || c.deleting || !c.reserved_for.is_empty() {
        return None;
    }
    let mut claim = ResourceClaim::default();
    let m = &mut claim.metadata;
    m.namespace = Some(c.namespace.clone());
    m.name = Some(c.name.clone());
    m.uid = Some(c.uid.clone());
    m.resource_version = Some(c.resource_version.clone());
    m.finalizers = (!c.finalizers.is_empty()).then(|| c.finalizers.clone());
    claim.status = Some(k8s_openapi::api::resource::v1::ResourceClaimStatus { allocation: c.allocation.clone(), ..Default::default() });
    Some(claim)
}

/// The status PreBind writes: the allocation (when it makes one) and the
/// reservedFor list with the pod added, under the claim's uid and
/// resourceVersion (a claim changed since it was read answers 409).
fn claim_status_patch(claim: &k8s_openapi::api::resource::v1::ResourceClaim, ours: Option<&serde_json::Value>, pod_name: &str, pod_uid: &str) -> serde_json::Value {
    let mut reserved: Vec<serde_json::Value> = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref()).into_iter().flatten().map(|r| json!({"resource": r.resource, "name": r.name, "uid": r.uid, "apiGroup": r.api_group})).collect();
    reserved.push(json!({"resource": "pods", "name": pod_name, "uid": pod_uid}));
    let mut status = json!({ "reservedFor": reserved });
    if let Some(a) = ours {
        status["allocation"] = a.clone();
    }
    json!({"metadata": {"uid": claim.metadata.uid, "resourceVersion": claim.metadata.resource_version}, "status": status})
}

/// What PostFilter's deallocation does with the claim as read.
#[derive(Debug, PartialEq, Eq)]
enum DeallocNext {
    /// Clear the allocation (conditional on what was read).
    Write,
    /// Leave the claim alone, for this reason.
    Skip(&'static str),
}

/// Decides the deallocation `d` on `claim` as read (upstream's PostFilter
/// condition): the same claim (uid), allocated, and reserved for no one or
/// only for the pod that could not be scheduled.
fn dealloc_next(claim: &k8s_openapi::api::resource::v1::ResourceClaim, d: &berth_engine::framework::DeallocateClaim) -> DeallocNext {
    if claim.metadata.uid.as_deref() != Some(d.uid.as_str()) {
        return DeallocNext::Skip("the claim was re-created");
    }
    let status = claim.status.as_ref();
    if status.and_then(|s| s.allocation.as_ref()).is_none() {
        return DeallocNext::Skip("the claim is not allocated");
    }
    let reserved = status.and_then(|s| s.reserved_for.as_deref()).unwrap_or_default();
    if reserved.iter().any(|r| r.uid != d.pod_uid) {
        return DeallocNext::Skip("the claim is reserved for another consumer");
    }
    DeallocNext::Write
}

/// The deallocation: status.allocation, reservedFor and devices cleared,
/// under the claim's uid and resourceVersion (a claim changed since it was
/// read answers 409).
fn dealloc_patch(claim: &k8s_openapi::api::resource::v1::ResourceClaim) -> serde_json::Value {
    json!({"metadata": {"uid": claim.metadata.uid, "resourceVersion": claim.metadata.resource_version},
        "status": {"allocation": null, "reservedFor": null, "devices": null}})
}

/// The pod's status.extendedResourceClaimStatus.requestMappings: each
/// (container, resource, request) of `mappings` whose container is unnamed
/// (the engine sees the pod's summed requests) names every container (init
/// or regular) that asks for the resource. Upstream makes one request per
/// container; berth's claim has one request per resource, which each such
/// container maps to.
fn request_mappings(pod: &core::Pod, mappings: &[(String, String, String)]) -> Vec<serde_json::Value> {
    let spec = pod.spec.as_ref();
    let containers = spec.into_iter().flat_map(|s| s.init_containers.iter().flatten().chain(s.containers.iter()));
    let asks = |c: &core::Container, resource: &str| {
        let r = c.resources.as_ref();
        let nonzero = |l: Option<&std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| l.and_then(|l| l.get(resource)).is_some_and(|q| q.0.chars().take_while(|c| c.is_ascii_digit() || *c == '.').any(|c| matches!(c, '1'..='9')));
        nonzero(r.and_then(|r| r.requests.as_ref())) || nonzero(r.and_then(|r| r.limits.as_ref()))
    };
    let mut out = Vec::new();
    for (container, resource, request) in mappings {
        let names: Vec<&str> = if container.is_empty() { containers.clone().filter(|c| asks(c, resource)).map(|c| c.name.as_str()).collect() } else { vec![container.as_str()] };
        for c in names {
            out.push(json!({"containerName": c, "resourceName": resource, "requestName": request}));
        }
    }
    out
}

/// The pod's extended-resource claim, when one exists and is not being
/// deleted: annotated, with the pod (`pod_uid`) as controller.
async fn find_extended_claim(claims: &Api<k8s_openapi::api::resource::v1::ResourceClaim>, pod_uid: &str) -> Result<Option<k8s_openapi::api::resource::v1::ResourceClaim>, kube::Error> {
    let all = claims.list(&kube::api::ListParams::default()).await?;
    Ok(all.items.into_iter().find(|c| {
        let m = &c.metadata;
        m.deletion_timestamp.is_none()
            && m.annotations.as_ref().is_some_and(|a| a.get(EXTENDED_CLAIM_ANNOTATION).is_some_and(|v| v == "true"))
            && m.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == pod_uid)
    }))
}

/// The reservedFor list without the pod `pod_uid` (None when nothing is
/// left), or None-of-None when the pod holds no entry (nothing to write).
fn reserved_without(claim: &k8s_openapi::api::resource::v1::ResourceClaim, pod_uid: &str) -> Option<Option<Vec<serde_json::Value>>> {
    let reserved = claim.status.as_ref().and_then(|s| s.reserved_for.as_deref()).unwrap_or_default();
    if !reserved.iter().any(|r| r.uid == pod_uid) {
        return None;
    }
    let rest: Vec<serde_json::Value> = reserved.iter().filter(|r| r.uid != pod_uid).map(|r| json!({"resource": r.resource, "name": r.name, "uid": r.uid, "apiGroup": r.api_group})).collect();
    Some((!rest.is_empty()).then_some(rest))
}

/// How one claim write ended.
enum ClaimWrite<T> {
    /// Written: the reply (None when the outcome was unknown and the
    /// write was found landed by reading it back).
    Done(Option<T>),
    /// Conflict, or an unknown outcome that did not land: read again.
    Again(String),
    /// Known not written, for this reason.
    Refused(String),
}

impl Writer {
    fn observe_allocation(&self, what: &str, r: &Result<(), PreBindStop>, t: Instant) {
        let Some(m) = self.metrics.get() else { return };
        let result = match r {
            Ok(()) => what,
            Err(PreBindStop::Failed(_)) => "error",
            Err(PreBindStop::Gone) => "pod_gone",
            Err(PreBindStop::NotLeader) => "not_leader",
        };
        m.dra_allocation_attempts.with_label_values(&[result]).inc();
        m.dra_allocation_duration.with_label_values(&[result]).observe(t.elapsed().as_secs_f64());
    }

    /// One claim write through the bind budget and the lease permit; an
    /// unknown outcome is resolved by `landed` (reading the claim back).
    async fn claim_write<T, W, WFut, L, LFut>(&self, deadline: tokio::time::Instant, write: W, landed: L) -> Result<ClaimWrite<T>, PreBindStop>
    where
        W: FnOnce() -> WFut,
        WFut: std::future::Future<Output = Result<T, kube::Error>>,
        L: Fn() -> LFut,
        LFut: std::future::Future<Output = Result<bool, kube::Error>>,
    {
        let r = {
            let _slot = self.bind_slots.acquire(deadline).await;
            self.bind_limiter.acquire().await;
            let Some(_permit) = self.lease.write_permit().await else {
                self.count(|c| c.refused_not_leader += 1);
                return Err(PreBindStop::NotLeader);
            };
            tokio::time::timeout(Duration::from_secs(30), write()).await
        };
        let why = match r {
            Ok(Ok(reply)) => {
                self.count(|c| c.claim_writes += 1);
                return Ok(ClaimWrite::Done(Some(reply)));
            }
            Ok(Err(e)) if api_code(&e) == Some(409) => {
                self.count(|c| c.claim_conflicts += 1);
                return Ok(ClaimWrite::Again(e.to_string()));
            }
            Ok(Err(e)) if !outcome_unknown(&e) => return Ok(ClaimWrite::Refused(e.to_string())),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "write timed out after 30s".to_string(),
        };
        self.count(|c| c.claim_writes_unknown += 1);
        tracing::info!(error = %why, "claim write outcome unknown; reading the claim back");
        if self.read(deadline, landed).await? {
            self.count(|c| c.claim_writes += 1);
            Ok(ClaimWrite::Done(None))
        } else {
            Ok(ClaimWrite::Again(why))
        }
    }

    /// DynamicResources' PreBind for one claim (upstream `bindClaim`): the
    /// delete-protection finalizer when missing, then in one status update
    /// the allocation (when `allocation` is Some) and the pod's reservedFor
    /// entry, each conditional on the claim's uid and resourceVersion.
    ///
    /// The first write is made against `seen`, the claim as the scheduler's
    /// cache last showed it (upstream writes against its informer's claim
    /// too), and the status write against the finalizer write's reply: no
    /// read on the way when the cache is current. Only the API's answer
    /// decides that nothing is left to write or that PreBind fails: a
    /// verdict other than a write on `seen` is checked on a fresh read. A
    /// conflict (409), meaning the cache was behind or another writer came
    /// first, or a write whose outcome is unknown, is resolved by reading
    /// the claim back: allocated as decided and reserved for the pod, it is
    /// done; allocated otherwise, deleted or re-created, PreBind fails (the
    /// loop forgets the assumed devices and retries the pod).
    #[allow(clippy::too_many_arguments)] // the fields of ApiWrite::AllocateClaim, and the claim as seen
    async fn allocate_claim(&self, ns: &str, name: &str, uid: &str, allocation: Option<&serde_json::Value>, pod_name: &str, pod_uid: &str, seen: Option<k8s_openapi::api::resource::v1::ResourceClaim>, deadline: tokio::time::Instant) -> Result<(), PreBindStop> {
        use k8s_openapi::api::resource::v1 as res;
        let key = format!("{ns}/{name}");
        let ours: Option<res::AllocationResult> = match allocation {
            Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| stop(format!("claim {key}: the allocation cannot be written: {e}")))?),
            None => None,
        };
        let claims: Api<res::ResourceClaim> = Api::namespaced(self.client.clone(), ns);
        let pp = PatchParams::default();
        let judge = |c: &res::ResourceClaim| claim_next(c, &key, uid, ours.as_ref(), pod_uid);
        // Landed: the finalizer is there (`finalizer`), or the claim is
        // allocated as decided and reserved for the pod.
        let landed = |finalizer: bool| {
            let (claims, judge) = (&claims, &judge);
            move || async move {
                self.count(|c| c.claim_reads += 1);
                let c = claims.get_opt(name).await?;
                Ok::<bool, kube::Error>(c.as_ref().is_some_and(|c| {
                    let next = judge(c);
                    next == ClaimNext::Done || (finalizer && next == ClaimNext::Status)
                }))
            }
        };
        // The claim to judge next and whether the API just gave it (a read
        // or a write's reply); None: read it.
        let mut next: Option<(res::ResourceClaim, bool)> = seen.map(|c| (c, false));
        let mut last = String::new();
        for _ in 0..CLAIM_WRITE_TRIES {
            let (claim, fresh) = match next.take() {
                Some(c) => c,
                None => match self.read(deadline, || {
                    self.count(|c| c.claim_reads += 1);
                    claims.get_opt(name)
                })
                .await?
                {
                    Some(c) => (c, true),
                    None => return Err(stop(format!("claim {key} got deleted in the meantime"))),
                },
            };
            match judge(&claim) {
                ClaimNext::Done if fresh => return Ok(()),
                ClaimNext::Fail(m) if fresh => return Err(stop(m)),
                // The cache may be behind the API: read before deciding.
                ClaimNext::Done | ClaimNext::Fail(_) => {}
                ClaimNext::Finalizer => {
                    let mut finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
                    finalizers.push(CLAIM_FINALIZER.to_string());
                    let patch = json!({"metadata": {"uid": uid, "resourceVersion": claim.metadata.resource_version, "finalizers": finalizers}});
                    let mp = Patch::Merge(&patch);
                    match self.claim_write(deadline, || claims.patch(name, &pp, &mp), landed(true)).await? {
                        // The status is written against the reply (or, found
                        // landed after an unknown outcome, a fresh read).
                        ClaimWrite::Done(reply) => next = reply.map(|c| (c, true)),
                        ClaimWrite::Again(m) => last = m,
                        ClaimWrite::Refused(m) => return Err(stop(format!("add finalizer to claim {key}: {m}"))),
                    }
                }
                ClaimNext::Status => {
                    let patch = claim_status_patch(&claim, allocation, pod_name, pod_uid);
                    let mp = Patch::Merge(&patch);
                    match self.claim_write(deadline, || claims.patch_status(name, &pp, &mp).map_ok(|_| ()), landed(false)).await? {
                        ClaimWrite::Done(_) => return Ok(()),
                        ClaimWrite::Again(m) => last = m,
                        ClaimWrite::Refused(m) if allocation.is_some() => return Err(stop(format!("add allocation and reservation to claim {key}: {m}"))),
                        ClaimWrite::Refused(m) => return Err(stop(format!("add reservation to claim {key}: {m}"))),
                    }
                }
            }
        }
        Err(stop(format!("claim {key}: {last}")))
    }

    /// DynamicResources' PostFilter write (leader only, through the lease
    /// permit): deallocates a claim allocated where the pod cannot go, so
    /// that the claim's update requeues the pod and it allocates anew. Each
    /// try reads the claim fresh and writes only when [`dealloc_next`]
    /// allows; a conflict or an unknown outcome is read back. Nothing waits
    /// for it: a failure is logged (the pod stays unschedulable until some
    /// other event).
    pub async fn deallocate_claim(&self, d: berth_engine::framework::DeallocateClaim) {
        let w = self.clone();
        self.spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let key = format!("{}/{}", d.namespace, d.name);
            match w.deallocate(&d, deadline).await {
                Ok(Some(why)) => tracing::info!(claim = %key, %why, "claim left allocated"),
                Ok(None) => tracing::info!(claim = %key, "claim deallocated (usable by no node for its pod)"),
                Err(PreBindStop::NotLeader | PreBindStop::Gone) => {}
                Err(PreBindStop::Failed(e)) => tracing::warn!(claim = %key, error = %e, "claim deallocation failed"),
            }
        })
        .await;
    }

    /// [`Writer::deallocate_claim`]'s work: None when deallocated, else why not.
    async fn deallocate(&self, d: &berth_engine::framework::DeallocateClaim, deadline: tokio::time::Instant) -> Result<Option<&'static str>, PreBindStop> {
        use k8s_openapi::api::resource::v1 as res;
        let claims: Api<res::ResourceClaim> = Api::namespaced(self.client.clone(), &d.namespace);
        let pp = PatchParams::default();
        let mut last = String::new();
        for _ in 0..CLAIM_WRITE_TRIES {
            let Some(claim) = self.read(deadline, || claims.get_opt(&d.name)).await? else { return Ok(Some("the claim is gone")) };
            if let DeallocNext::Skip(why) = dealloc_next(&claim, d) {
                return Ok(Some(why));
            }
            let patch = dealloc_patch(&claim);
            let mp = Patch::Merge(&patch);
            // Landed: the claim (this uid) is no longer allocated.
            let landed = || async {
                let c = claims.get_opt(&d.name).await?;
                Ok::<bool, kube::Error>(c.is_none_or(|c| c.metadata.uid.as_deref() != Some(d.uid.as_str()) || c.status.and_then(|s| s.allocation).is_none()))
            };
            match self.claim_write(deadline, || claims.patch_status(&d.name, &pp, &mp).map_ok(|_| ()), landed).await? {
                ClaimWrite::Done(_) => return Ok(None),
                ClaimWrite::Again(m) => last = m,
                ClaimWrite::Refused(m) => return Err(stop(format!("deallocate claim {}/{}: {m}", d.namespace, d.name))),
            }
        }
        Err(stop(format!("deallocate claim {}/{}: {last}", d.namespace, d.name)))
    }

    /// Upstream's Unreserve for the extended-resource claim PreBind created,
    /// once the bind failed: the pod's reservedFor entry removed (so that the
    /// claim controller lets the claim go), then the claim deleted under its
    /// uid. Unknown outcomes are read back; failures are logged (the next
    /// attempt finds and reuses a claim left behind).
    async fn delete_extended_claim(&self, pod: &PodInfo) {
        use k8s_openapi::api::resource::v1 as res;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let claims: Api<res::ResourceClaim> = Api::namespaced(self.client.clone(), &pod.namespace);
        let pp = PatchParams::default();
        // The pod's reservedFor entry goes first, on a fresh read each try:
        // the claim controller may change the claim meanwhile (409).
        let mut tries = 0;
        let (name, uid) = loop {
            let Ok(Some(claim)) = self.read(deadline, || find_extended_claim(&claims, &pod.uid)).await else { return };
            let name = claim.metadata.name.clone().unwrap_or_default();
            let uid = claim.metadata.uid.clone().unwrap_or_default();
            let Some(rest) = reserved_without(&claim, &pod.uid) else { break (name, uid) };
            let patch = json!({"metadata": {"uid": uid, "resourceVersion": claim.metadata.resource_version}, "status": {"reservedFor": rest}});
            let mp = Patch::Merge(&patch);
            let landed = || async {
                let c = claims.get_opt(&name).await?;
                Ok::<bool, kube::Error>(c.is_none_or(|c| c.metadata.uid.as_deref() != Some(uid.as_str()) || reserved_without(&c, &pod.uid).is_none()))
            };
            tries += 1;
            match self.claim_write(deadline, || claims.patch_status(&name, &pp, &mp).map_ok(|_| ()), landed).await {
                Ok(ClaimWrite::Done(_)) => break (name, uid),
                Ok(ClaimWrite::Again(_)) if tries < CLAIM_WRITE_TRIES => continue,
                Ok(ClaimWrite::Again(m) | ClaimWrite::Refused(m)) => {
                    tracing::warn!(claim = %format!("{}/{name}", pod.namespace), error = %m, "extended-resource claim left behind: its reservation could not be removed");
                    return;
                }
                Err(_) => return,
            }
        };
        let key = format!("{}/{name}", pod.namespace);
        let dp = DeleteParams { preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }), ..DeleteParams::default() };
        let landed = || async {
            let c = claims.get_opt(&name).await?;
            Ok::<bool, kube::Error>(c.is_none_or(|c| c.metadata.uid.as_deref() != Some(uid.as_str()) || c.metadata.deletion_timestamp.is_some()))
        };
        match self.claim_write(deadline, || claims.delete(&name, &dp).map_ok(|_| ()), landed).await {
            Ok(ClaimWrite::Done(_)) => tracing::info!(claim = %key, pod = %pod.key(), "extended-resource claim deleted after a failed bind"),
            Ok(ClaimWrite::Again(m) | ClaimWrite::Refused(m)) => tracing::warn!(claim = %key, error = %m, "extended-resource claim left behind"),
            Err(_) => {}
        }
    }

    /// The claim of the pod's extended resources a DeviceClass backs
    /// (DRAExtendedResource): found when an earlier attempt created it (the
    /// annotation, the pod as controller), else created from `claim`
    /// (without its status); then allocated and reserved for the pod as any
    /// claim ([`Writer::allocate_claim`]), and recorded in the pod's
    /// status.extendedResourceClaimStatus.
    async fn create_extended_claim(&self, ns: &str, pod_name: &str, pod_uid: &str, claim: &serde_json::Value, mappings: &[(String, String, String)], deadline: tokio::time::Instant) -> Result<(), PreBindStop> {
        use k8s_openapi::api::resource::v1 as res;
        let claims: Api<res::ResourceClaim> = Api::namespaced(self.client.clone(), ns);
        let find = || find_extended_claim(&claims, pod_uid);
        let mut body = claim.clone();
        let allocation = body.as_object_mut().and_then(|o| o.remove("status")).and_then(|mut st| st.get_mut("allocation").map(serde_json::Value::take));
        let body: res::ResourceClaim = serde_json::from_value(body).map_err(|e| stop(format!("the extended-resource claim cannot be written: {e}")))?;
        let mut created = self.read(deadline, find).await?;
        let mut last = String::new();
        for _ in 0..CLAIM_WRITE_TRIES {
            if created.is_some() {
                break;
            }
            let pp = PostParams::default();
            let r = {
                let _slot = self.bind_slots.acquire(deadline).await;
                self.bind_limiter.acquire().await;
                let Some(_permit) = self.lease.write_permit().await else {
                    self.count(|c| c.refused_not_leader += 1);
                    return Err(PreBindStop::NotLeader);
                };
                tokio::time::timeout(Duration::from_secs(30), claims.create(&pp, &body)).await
            };
            match r {
                Ok(Ok(c)) => {
                    self.count(|c| c.claim_writes += 1);
                    created = Some(c);
                }
                Ok(Err(e)) if !outcome_unknown(&e) => return Err(stop(format!("create claim for extended resources: {e}"))),
                Ok(Err(e)) => {
                    self.count(|c| c.claim_writes_unknown += 1);
                    last = e.to_string();
                    created = self.read(deadline, find).await?;
                }
                Err(_) => {
                    self.count(|c| c.claim_writes_unknown += 1);
                    last = "write timed out after 30s".into();
                    created = self.read(deadline, find).await?;
                }
            }
        }
        let Some(c) = created else { return Err(stop(format!("create claim for extended resources: {last}"))) };
        let name = c.metadata.name.clone().unwrap_or_default();
        let uid = c.metadata.uid.clone().unwrap_or_default();
        self.allocate_claim(ns, &name, &uid, allocation.as_ref(), pod_name, pod_uid, Some(c), deadline).await?;
        let pods: Api<core::Pod> = Api::namespaced(self.client.clone(), ns);
        let pod = self.read(deadline, || pods.get_opt(pod_name)).await?.filter(|p| p.metadata.uid.as_deref() == Some(pod_uid)).ok_or(PreBindStop::Gone)?;
        let mappings = request_mappings(&pod, mappings);
        let patch = json!({"status": {"extendedResourceClaimStatus": {"resourceClaimName": name, "requestMappings": mappings}}});
        let pp = PatchParams::default();
        let mp = Patch::Merge(&patch);
        let landed = || async {
            let p = pods.get_opt(pod_name).await?;
            let v = p.map(|p| serde_json::to_value(p.status).unwrap_or_default()).unwrap_or_default();
            Ok::<bool, kube::Error>(v.pointer("/extendedResourceClaimStatus/resourceClaimName").and_then(serde_json::Value::as_str) == Some(name.as_str()))
        };
        match self.claim_write(deadline, || pods.patch_status(pod_name, &pp, &mp).map_ok(|_| ()), landed).await? {
            ClaimWrite::Done(_) => Ok(()),
            ClaimWrite::Again(m) | ClaimWrite::Refused(m) => Err(stop(format!("update pod {ns}/{pod_name} extended resource claim status: {m}"))),
        }
    }
}
