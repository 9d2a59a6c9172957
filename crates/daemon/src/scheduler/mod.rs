//! The scheduling loop's construction and run (upstream's `scheduler.go`):
//! one task owns the cache and the queue; watch events ([`eventhandlers`])
//! and bind results come in as messages, and each turn schedules one pod
//! ([`schedule_one`]) while this replica may write.

mod eventhandlers;
mod kinds;
mod schedule_one;

pub(crate) use self::kinds::watch_all;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch as signal};
use tokio::time::Instant;

use berth_engine::cache::{Cache, Pdb};
use berth_engine::config::Config;
use berth_engine::framework::Framework;
use berth_engine::queue::SchedulingQueue;
use berth_model::PodInfo;

use crate::admin;
use crate::leader::Lease;
use crate::metrics::Metrics;
use crate::shadow::{Shadow, ShadowLog};
use crate::watch::{WatchEvent, WatchHealth};
use crate::writer::{BindResult, Writer};

/// What the loop is wired to: the watches' health, the readiness it
/// publishes, the writer (none in shadow mode), the lease and the metrics.
pub(crate) struct Wiring {
    /// The watches' states (readiness reads them).
    pub health: WatchHealth,
    /// Set once every watch has synced.
    pub ready: signal::Sender<bool>,
    /// None in shadow mode: nothing is ever written.
    pub writer: Option<Writer>,
    /// The metrics.
    pub metrics: Metrics,
    /// True while the election task says this replica leads.
    pub leading: signal::Receiver<bool>,
    /// The lease, which says whether a write may go out now.
    pub lease: Lease,
    /// Shadow mode's log (None unless shadow).
    pub shadow: Option<Arc<ShadowLog>>,
}

pub(crate) struct Loop {
    frameworks: Vec<Framework>,
    profiles: HashSet<String>,
    cache: Cache,
    /// The pending pods of our profiles: one record each (pod, object,
    /// attempts, first seen, rejecting plugins), owned by the queue.
    queue: SchedulingQueue,
    pdbs: HashMap<String, Pdb>,
    health: WatchHealth,
    ready: signal::Sender<bool>,
    /// None in shadow mode: nothing is ever written.
    writer: Option<Writer>,
    metrics: Metrics,
    leading: signal::Receiver<bool>,
    lease: Lease,
    /// The last status written per pod group ("api/ns/name" → message, empty
    /// once scheduled), so a failed attempt does not rewrite the same status
    /// (and a PodGroup that was scheduled never goes back to False).
    group_status: HashMap<String, String>,
    /// Shadow mode: no pod is popped for binding; bindings made by another
    /// scheduler are judged.
    shadow: Option<Shadow>,
    /// The DRA objects in the cache, by name (for relists).
    dra: kinds::DraNames,
    /// Preemptors whose victims' deletions this loop issued, by uid.
    preempting: HashMap<String, Preempting>,
}

/// How long a preemptor waits at most for its victims to show their
/// deletion (a delete that failed for good must not strand it).
const PREEMPTION_HOLD: Duration = Duration::from_secs(30);

/// A preemptor whose victims' deletions were issued. It stays gated (out of
/// activeQ) until every victim has left the cache or shows its graceful
/// deletion there, as upstream's DefaultPreemption PreEnqueue holds a pod
/// whose preemption is still being carried out: retried earlier, it would
/// find the victims still on the node, not yet terminating, and preempt
/// again, deleting them a second time or choosing others.
struct Preempting {
    /// The victims' uids.
    victims: Vec<String>,
    /// When it is let go whatever the victims show.
    until: std::time::Instant,
}

impl Loop {
    /// A loop over `frameworks` (one per profile), with the queue's backoffs from `config`.
    pub(crate) fn new(frameworks: Vec<Framework>, config: &Config, w: Wiring) -> Loop {
        Loop {
            profiles: frameworks.iter().map(|f| f.profile.clone()).collect(),
            frameworks,
            cache: Cache::new(),
            queue: SchedulingQueue::new(config.pod_initial_backoff, config.pod_max_backoff, Self::now()),
            pdbs: HashMap::new(),
            health: w.health,
            ready: w.ready,
            writer: w.writer,
            metrics: w.metrics,
            leading: w.leading,
            lease: w.lease,
            group_status: HashMap::new(),
            shadow: w.shadow.map(Shadow::new),
            dra: kinds::DraNames::default(),
            preempting: HashMap::new(),
        }
    }

    fn framework(&self, pod: &PodInfo) -> Option<&Framework> {
        self.frameworks.iter().find(|f| f.profile == pod.scheduler_name)
    }

    fn now() -> std::time::Instant {
        Instant::now().into_std()
    }

    fn mark_synced(&mut self, kind: &'static str) {
        if self.health.set_synced(kind) {
            self.caches_synced();
        }
    }

    /// Every watch is synced: ready from now on (once). Called when a relist
    /// is applied, and by the loop whenever the watches' health says so: the
    /// last kind to come up may be one whose watch dropped after its list and
    /// resumed where it was, with no relist to apply (seen with the real
    /// server's 429s at start).
    fn caches_synced(&mut self) {
        if !*self.ready.borrow() {
            tracing::info!(nodes = self.cache.snapshot().nodes.len(), pods = self.cache.pod_count(), pending = self.queue.len(), "caches synced");
            let _ = self.ready.send(true);
            if self.shadow.is_some() {
                let judged = self.queue.len() + self.cache.snapshot().bound_pods().filter(|p| self.profiles.contains(&p.scheduler_name)).count();
                let profiles: Vec<String> = self.frameworks.iter().map(|f| f.profile.clone()).collect();
                if let Some(sh) = &mut self.shadow {
                    sh.synced(judged, &profiles, Self::now());
                }
            }
        }
    }

    fn gauges(&mut self) {
        let s = self.queue.sizes();
        for (q, v) in [("active", s.active), ("backoff", s.backoff), ("unschedulable", s.unschedulable), ("gated", s.gated)] {
            self.metrics.pending_pods.with_label_values(&[q]).set(v as i64);
        }
        // scheduler_unschedulable_pods{plugin, profile}: pods in the pool, per rejecting plugin.
        let mut counts: HashMap<(&str, &str), i64> = HashMap::new();
        for r in self.queue.pool_rejections() {
            for p in &r.plugins {
                *counts.entry((p, &r.profile)).or_insert(0) += 1;
            }
        }
        self.metrics.unschedulable_pods.reset();
        for ((plugin, profile), n) in counts {
            self.metrics.unschedulable_pods.with_label_values(&[plugin, profile]).set(n);
        }
    }

    pub(crate) async fn run(
        mut self,
        mut watch_rx: mpsc::Receiver<WatchEvent<Loop>>,
        mut bind_rx: mpsc::UnboundedReceiver<BindResult>,
        explain: Arc<admin::ExplainHub>,
        mut stop: signal::Receiver<bool>,
        writer: Option<Writer>,
    ) {
        let mut last_tick = Instant::now();
        loop {
            if *stop.borrow() {
                break;
            }
            // Take in everything that has arrived before deciding anything.
            while let Ok(ev) = watch_rx.try_recv() {
                self.apply(ev);
            }
            while let Ok(r) = bind_rx.try_recv() {
                self.bind_result(r);
            }
            // Explain runs off the loop, on a copy published when asked (at most once a second).
            if explain.wanted() {
                explain.publish(self.cache.snapshot().clone(), self.queue.pods().cloned().collect());
            }
            if last_tick.elapsed() >= Duration::from_millis(500) {
                self.queue.tick(Self::now());
                self.release_preemptors();
                self.gauges();
                if let Some(sh) = &mut self.shadow {
                    let profiles: Vec<String> = self.frameworks.iter().map(|f| f.profile.clone()).collect();
                    sh.tick(&profiles, Self::now());
                    let q = &self.queue;
                    let pending = sh.review_pending(&self.frameworks, self.cache.snapshot(), q.pods().filter_map(|p| q.first_seen(&p.uid).map(|t| (p, t))), Self::now());
                    for ((profile, view), n) in pending {
                        self.metrics.shadow_pending.with_label_values(&[profile.as_str(), view.as_str()]).set(n);
                    }
                }
                last_tick = Instant::now();
            }
            if !*self.ready.borrow() && self.health.ready() {
                self.caches_synced();
            }
            // Schedule only while the lease allows writing (renewed within
            // renewDeadline), not merely while the election task says so.
            // A shadow never pops a pod for binding.
            let ready = *self.ready.borrow();
            if self.shadow.is_none() && ready && self.health.fresh() && *self.leading.borrow() && self.lease.may_write() && self.schedule_one().await {
                continue;
            }
            let wait = self.queue.next_deadline().map(|d| d.saturating_duration_since(Self::now())).unwrap_or(Duration::from_secs(1)).min(Duration::from_secs(1));
            tokio::select! {
                Some(ev) = watch_rx.recv() => self.apply(ev),
                Some(r) = bind_rx.recv() => self.bind_result(r),
                _ = tokio::time::sleep(wait) => {}
                _ = self.leading.changed() => {}
                _ = stop.changed() => break,
            }
        }
        tracing::info!("scheduling loop stopping; finishing in-flight writes");
        if let Some(w) = writer {
            w.drain(Duration::from_secs(10)).await;
        }
    }
}
