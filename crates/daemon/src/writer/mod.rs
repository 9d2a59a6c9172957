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
//!
//! Every write of the binding cycle (the binding, the volume writes, the
//! claim writes) is one guarded write (`guarded`: a slot, the limiter,
//! the lease, a timeout, the error sorted, the unknown outcome read back
//! by the one read-back loop). The parts: this file (the budgets, the bind
//! jobs, status writes), `guarded`, `volumes` (VolumeBinding's PreBind),
//! `claims` (DynamicResources'), `events`, and the tests.

mod claims;
mod events;
mod guarded;
mod volumes;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::Api;
use serde_json::json;
use tokio::sync::{mpsc, Mutex, Semaphore};

use super::leader::Lease;
use super::slots::Slots;
use berth_engine::framework::{ApiWrite, PreBindWork};
use berth_model::PodInfo;

use self::events::{EventItem, EVENT_QUEUE};
use self::guarded::{read_back, Patience, Subject, WriteKind, Written};

pub use self::claims::{seen_claim, CLAIM_FINALIZER, EXTENDED_CLAIM_ANNOTATION};

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

/// A pod and the node it is bound to, as a log line names them.
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
        let binding = core::Binding {
            metadata: meta::ObjectMeta { name: Some(pod.name.clone()), namespace: Some(pod.namespace.clone()), uid: Some(pod.uid.clone()), ..Default::default() },
            target: core::ObjectReference { kind: Some("Node".into()), api_version: Some("v1".into()), name: Some(node.into()), ..Default::default() },
        };
        // `Api::create_subresource`'s request, on a path built without an
        // `Api` (which formats the path and copies the kind's names per call).
        // The reply (a Status) is checked for being JSON, not kept.
        let call = || async {
            let body = serde_json::to_vec(&binding).map_err(kube::Error::SerdeError)?;
            let path = namespaced_path("/api/v1/namespaces/", &pod.namespace, "/pods");
            let mut req = kube::core::Request::new(path).create_subresource("binding", &pod.name, &PostParams::default(), body).map_err(kube::Error::BuildRequest)?;
            req.extensions_mut().insert("create_subresource");
            self.client.request::<serde::de::IgnoredAny>(req).await
        };
        // A binding's key is its pod's start: ahead of every PreBind write (keyed by its deadline).
        let key = tokio::time::Instant::from_std(started);
        let written = self.guarded(WriteKind::Binding, key, Patience::Forever, Subject::PodOn(pod, node), call, || self.where_is(pod, node)).await;
        let (found, why) = match written {
            Ok(Written::Done(_)) => return BindOutcome::Bound,
            Ok(Written::NotLeader) => return BindOutcome::NotLeader,
            Ok(Written::Refused(e)) if api_code(&e) == Some(404) => return BindOutcome::Gone,
            Ok(Written::Refused(e)) if api_code(&e) == Some(409) => {
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
            Ok(Written::Refused(e)) => return BindOutcome::Failed(e.to_string()),
            Ok(Written::ReadBack { why, found }) => (found, why),
            // Patience::Forever reads until the API answers: not reached.
            Err(e) => (Verified::NotBound, format!("{e:?}")),
        };
        match found {
            Verified::BoundHere => BindOutcome::Bound,
            Verified::BoundElsewhere(n) => BindOutcome::AlreadyBound { node: n },
            Verified::NotBound => BindOutcome::Failed(why),
            Verified::Gone => BindOutcome::Gone,
        }
    }

    /// Reads the pod back until the API says where it is (reads need no
    /// leadership; retried with backoff for as long as it takes).
    async fn verify(&self, pod: &PodInfo, node: &str) -> Verified {
        read_back(Patience::Forever, || self.where_is(pod, node)).await.unwrap_or(Verified::NotBound)
    }

    /// One read of where the API has the pod.
    async fn where_is(&self, pod: &PodInfo, node: &str) -> Result<Verified, kube::Error> {
        let api: Api<core::Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let Some(p) = api.get_opt(&pod.name).await? else { return Ok(Verified::Gone) };
        if p.metadata.uid.as_deref().is_some_and(|u| u != pod.uid) {
            return Ok(Verified::Gone);
        }
        Ok(match p.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty()) {
            Some(n) if n == node => Verified::BoundHere,
            Some(n) => Verified::BoundElsewhere(n),
            None => Verified::NotBound,
        })
    }

    /// A status write's turn (PodScheduled, nominations, preemption,
    /// PodGroup status: the status budget, not the binds'): a status slot,
    /// the status limiter, then the lease, checked last, right before the
    /// write. None when this replica may not write now (counted), or the
    /// writer is closing. The write goes out while the turn is held.
    async fn status_turn(&self) -> Option<(tokio::sync::SemaphorePermit<'_>, super::leader::WritePermit<'_>)> {
        let slot = self.status_slots.acquire().await.ok()?;
        self.status_limiter.acquire().await;
        let Some(permit) = self.lease.write_permit().await else {
            self.count(|c| c.refused_not_leader += 1);
            return None;
        };
        Some((slot, permit))
    }

    async fn patch_status(&self, pod: &PodInfo, patch: serde_json::Value) -> bool {
        let Some(_turn) = self.status_turn().await else { return false };
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
                    let Some(_turn) = w.status_turn().await else { return };
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
            let Some(_turn) = w.status_turn().await else { return };
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
        self.wait_bound(pod, node, work, deadline).await
    }
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
