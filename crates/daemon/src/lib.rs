//! `berth run`: the in-cluster scheduler. Watchers feed one scheduling loop
//! that owns the cache and the queue; it schedules one pod at a time and hands
//! API writes (binds, status, events, preemption) to the writer, whose results
//! come back as messages. Only the lease holder schedules and writes.
//!
//! In shadow mode ([`Options::shadow`]) there is no writer and no lease: the
//! loop judges another scheduler's bindings instead ([`shadow`]).
//!
//! What it must never depend on: the local cluster or the lab (the
//! production binary carries neither; `ci/deps.sh` checks it). It uses the
//! engine, the model and the TLS front door below it, and kube-rs to talk
//! to the API server.

pub mod admin;
pub mod connect;
pub mod leader;
pub mod live;
pub mod metrics;
pub mod shadow;
mod shutdown;
mod slots;
pub mod watch;
pub mod writer;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use thiserror::Error;
use tokio::sync::{mpsc, watch as signal};
use tokio::time::Instant;

use berth_engine::cache::{Cache, Pdb};
use berth_engine::config::Config;
use berth_engine::profile::Profiles;
use berth_engine::framework::group::{preempt_for_group, schedule_group, GroupHost, GroupOutcome};
use berth_engine::framework::{ApiWrite, AssumeView, Assumed, CycleOptions, CycleState, Events, Framework, QueuedPod, ScheduledOne};
use berth_model::{NodeSpec, PodInfo};
use berth_engine::queue::{self, Rejection, SchedulingQueue};

pub use self::shutdown::shutdown_signal;

use self::leader::Lease;
use self::metrics::Metrics;
use self::shadow::{Shadow, ShadowLog};
use self::watch::{Change, WatchEvent, WatchHealth};
use self::writer::{seen_claim, BindOutcome, BindResult, SharedCounts, Writer};

/// Why the daemon could not start.
#[derive(Debug, Error)]
pub enum Error {
    /// Metrics could not be registered.
    #[error("registering metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The admin listener could not bind.
    #[error("binding the admin listener on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The admin port could not start (TLS material, listener).
    #[error(transparent)]
    Admin(#[from] admin::Error),
}

/// Options of a running daemon beyond the configuration file.
#[derive(Clone, Debug)]
pub struct Options {
    /// Admin listener (/metrics, /healthz, /livez, /readyz, /debug/explain).
    pub bind_address: SocketAddr,
    /// This replica's identity in the Lease.
    pub identity: String,
    /// Concurrent binds and PreBind writes (64 by default: kube-scheduler
    /// binds each pod in a goroutine of its own, bounded only by the
    /// client's qps; a pod with claims makes three writes in a row, and 16
    /// slots left a burst of them waiting on round trips with the CPU idle).
    pub write_concurrency: usize,
    /// Seed for tie-breaking.
    pub seed: u64,
    /// How long past leaseDuration a leader that has not renewed stays
    /// healthy (upstream's leader-election healthz tolerance, 20 s).
    pub leader_healthz_tolerance: Duration,
    /// How the admin port is served (TLS, authentication, limits).
    pub admin: admin::AdminOptions,
    /// Shadow mode (`--shadow`): judge the bindings another scheduler makes
    /// for the configured profiles and write nothing (no writer, no Lease).
    pub shadow: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bind_address: SocketAddr::from(([0, 0, 0, 0], 10259)),
            identity: format!("berth-{}", std::process::id()),
            write_concurrency: 64,
            seed: 0x5eed,
            leader_healthz_tolerance: leader::HEALTHZ_TOLERANCE,
            admin: admin::AdminOptions::default(),
            shadow: false,
        }
    }
}

/// A running daemon.
pub struct Handle {
    /// The admin listener's address.
    pub admin_addr: SocketAddr,
    stop: signal::Sender<bool>,
    /// True while this replica leads.
    pub leading: signal::Receiver<bool>,
    /// True once every watcher has synced.
    pub ready: signal::Receiver<bool>,
    tasks: tokio::task::JoinSet<()>,
    /// The metrics.
    pub metrics: Metrics,
    /// This replica's view of its lease.
    pub lease: Lease,
    /// The watchers' state.
    pub watch_health: WatchHealth,
    writes: SharedCounts,
    /// None in shadow mode.
    writer: Option<Writer>,
    /// The admin port's certificate and counters.
    pub admin: admin::AdminInfo,
    /// Shadow mode's verdicts (None unless [`Options::shadow`]).
    pub shadow: Option<Arc<ShadowLog>>,
}

impl Handle {
    /// The writer's counters so far (binds, events written and lost, writes refused).
    pub fn write_counts(&self) -> writer::WriteCounts {
        self.writes.lock().map(|c| *c).unwrap_or_default()
    }

    /// Stops taking pods, finishes or abandons in-flight writes, releases the
    /// lease. Returns how many of the daemon's tasks had panicked.
    pub async fn shutdown(mut self) -> usize {
        let _ = self.stop.send(true);
        let deadline = tokio::time::sleep(Duration::from_secs(15));
        tokio::pin!(deadline);
        let mut panics = 0;
        loop {
            tokio::select! {
                r = self.tasks.join_next() => match r {
                    None => break,
                    Some(Err(e)) if e.is_panic() => {
                        tracing::error!(error = %e, "a daemon task panicked");
                        panics += 1;
                    }
                    Some(_) => {}
                },
                _ = &mut deadline => {
                    self.tasks.abort_all();
                    break;
                }
            }
        }
        panics
    }

    /// Stops without releasing anything, as a crash would (tests of failover):
    /// writes in flight are abandoned too.
    pub fn abort(mut self) {
        self.tasks.abort_all();
        if let Some(w) = &self.writer {
            w.abort();
        }
    }
}

/// Starts the daemon with `client`: watchers, leader election, the admin
/// listener and the scheduling loop. In shadow mode, neither leader election
/// nor the writer starts: the only API calls are the watches' lists and
/// watches and the admin port's TokenReviews and SubjectAccessReviews.
pub async fn start(client: kube::Client, config: &Config, opts: Options) -> Result<Handle, Error> {
    let metrics = Metrics::new()?;
    // One set of plugin instances for the admin's explain and the loop.
    let profiles = Profiles::new(config);
    let (stop_tx, stop_rx) = signal::channel(false);
    let le = &config.raw.leader_election;
    // A shadow never elects and never leads.
    let elect = le.leader_elect && !opts.shadow;
    let (leading_tx, leading_rx) = signal::channel(!le.leader_elect && !opts.shadow);
    let (ready_tx, ready_rx) = signal::channel(false);
    let (watch_tx, watch_rx) = mpsc::channel(4096);
    let (bind_tx, bind_rx) = mpsc::unbounded_channel();
    let mut tasks = tokio::task::JoinSet::new();

    let lease = Lease::new(elect, config.renew_deadline, config.lease_duration);
    let watch_health = WatchHealth::default();
    let health = admin::Health { lease: lease.clone(), watches: watch_health.clone(), tolerance: opts.leader_healthz_tolerance };
    let shadow_log = opts.shadow.then(|| Arc::new(ShadowLog::default()));
    let admin = admin::start(&opts.admin, opts.bind_address, client.clone(), metrics.clone(), ready_rx.clone(), profiles.frameworks(opts.seed), health, shadow_log.clone(), stop_rx.clone(), &mut tasks).await?;
    let admin_addr = admin.info.addr;

    watch::spawn_workloads(client.clone(), &watch_tx, &stop_rx, &watch_health, &mut tasks);
    watch::spawn_storage(client.clone(), &watch_tx, &stop_rx, &watch_health, &mut tasks);
    watch::spawn_groups(client.clone(), &watch_tx, &stop_rx, &watch_health, &mut tasks);
    watch::spawn_dra(client.clone(), &watch_tx, &stop_rx, &watch_health, &mut tasks);
    watch::spawn(client.clone(), watch_tx, stop_rx.clone(), &watch_health, &mut tasks);

    if elect {
        let cfg = leader::LeaderConfig {
            namespace: le.resource_namespace.clone(),
            name: le.resource_name.clone(),
            identity: opts.identity.clone(),
            lease_duration: config.lease_duration,
            renew_deadline: config.renew_deadline,
            retry_period: config.retry_period,
        };
        tasks.spawn(leader::run(client.clone(), cfg, lease.clone(), leading_tx, stop_rx.clone()));
    } else {
        // Keep the sender alive for the daemon's lifetime.
        let mut stop = stop_rx.clone();
        tasks.spawn(async move {
            let _ = stop.changed().await;
            let _ = leading_tx.send(false);
        });
    }

    let cc = &config.raw.client_connection;
    // Shadow mode has no writer at all: no write path exists.
    let writer = (!opts.shadow).then(|| Writer::new(client, lease.clone(), cc.qps, cc.burst, opts.write_concurrency, bind_tx, &opts.identity));
    if let Some(w) = &writer {
        w.set_metrics(metrics.clone());
    }
    let writes = writer.as_ref().map(Writer::shared_counts).unwrap_or_default();
    let writer_handle = writer.clone();
    let mut frameworks = profiles.frameworks(opts.seed);
    if opts.shadow {
        shadow::judge_every_node(&mut frameworks);
    }
    let now = Instant::now().into_std();
    let lp = Loop {
        profiles: frameworks.iter().map(|f| f.profile.clone()).collect(),
        frameworks,
        cache: Cache::new(),
        queue: SchedulingQueue::new(config.pod_initial_backoff, config.pod_max_backoff, now),
        pdbs: HashMap::new(),
        health: watch_health.clone(),
        ready: ready_tx,
        writer: writer.clone(),
        metrics: metrics.clone(),
        leading: leading_rx.clone(),
        lease: lease.clone(),
        group_status: HashMap::new(),
        shadow: shadow_log.clone().map(Shadow::new),
        dra: watch::DraNames::default(),
    };
    tasks.spawn(lp.run(watch_rx, bind_rx, admin.explain, stop_rx, writer));
    Ok(Handle { admin_addr, stop: stop_tx, leading: leading_rx, ready: ready_rx, tasks, metrics, lease, watch_health, writes, writer: writer_handle, admin: admin.info, shadow: shadow_log })
}

struct Loop {
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
    dra: watch::DraNames,
}

/// The daemon's side of the group cycle: its cache and one profile.
struct LoopHost<'a> {
    lp: &'a mut Loop,
    fi: usize,
}

impl GroupHost for LoopHost<'_> {
    fn framework(&self) -> &Framework {
        &self.lp.frameworks[self.fi]
    }
    fn snapshot(&self) -> &berth_engine::cache::Snapshot {
        self.lp.cache.snapshot()
    }
    fn snapshot_mut(&mut self) -> &mut berth_engine::cache::Snapshot {
        self.lp.cache.snapshot_mut()
    }
    fn assume_view(&mut self) -> (&Framework, &mut dyn AssumeView) {
        let lp = &mut *self.lp;
        (&lp.frameworks[self.fi], &mut lp.cache)
    }
}

fn node_events(old: Option<&NodeSpec>, new: &NodeSpec) -> Events {
    let Some(old) = old else { return Events::NODE_ADD };
    let mut e = Events::default();
    if old.allocatable != new.allocatable {
        e = e.or(Events::NODE_ALLOCATABLE);
    }
    if old.labels != new.labels {
        e = e.or(Events::NODE_LABEL);
    }
    if old.taints != new.taints {
        e = e.or(Events::NODE_TAINT);
    }
    if old.unschedulable != new.unschedulable {
        e = e.or(Events::NODE_UNSCHEDULABLE);
    }
    if old.images.len() != new.images.len() {
        e = e.or(Events::NODE_IMAGES);
    }
    e
}

impl Loop {
    fn framework(&self, pod: &PodInfo) -> Option<&Framework> {
        self.frameworks.iter().find(|f| f.profile == pod.scheduler_name)
    }

    fn now() -> std::time::Instant {
        Instant::now().into_std()
    }

    fn event(&mut self, e: Events) {
        if e == Events::default() {
            return;
        }
        let now = Self::now();
        self.queue.on_event(e, now);
        // Gated pods whose gate cares about the event ask PreEnqueue again
        // (upstream's GatingPluginEvents): a pod whose claim is created
        // after the pod goes to activeQ now, the others stay gated.
        for pod in self.queue.gated_for(e) {
            let gate = self.gate(&pod);
            self.queue.update(pod.clone(), gate.is_some(), now);
            if let Some(events) = gate {
                self.queue.set_gate_events(&pod.uid, events);
            }
        }
    }

    /// PreEnqueue over the cluster as the cache shows it: None when the pod
    /// may enter activeQ, else the events its gate waits for. Upstream
    /// reports no condition for a gated pod (it only logs the message).
    fn gate(&self, pod: &PodInfo) -> Option<Events> {
        let fw = self.framework(pod)?;
        let s = fw.run_pre_enqueue_in(pod, self.cache.snapshot());
        if s.is_success() {
            return None;
        }
        tracing::debug!(pod = %pod.key(), plugin = s.plugin, message = %s.message(), "gated by PreEnqueue");
        Some(fw.gate_events(s.plugin))
    }

    fn apply_pod(&mut self, pod: &core::Pod) {
        let info = PodInfo::from_pod(pod);
        let uid = info.uid.clone();
        if info.node_name.is_some() || info.terminating || info.terminated {
            self.cache.snapshot_mut().groups.forget_foreign(&uid);
        }
        if info.node_name.is_some() {
            if self.shadow.is_some() {
                self.judge_binding(&info);
            }
            // A pod whose bind is in flight keeps its record until the bind
            // result arrives (it carries attempts and first-seen for the SLI).
            if self.queue.place(&uid) != Some(queue::Place::InFlight) {
                self.queue.delete(&uid);
            }
            let snap = self.cache.snapshot();
            let old_pod = snap.bound_pod(&uid);
            let old = old_pod.is_some();
            let relabeled = old_pod.is_some_and(|p| p.labels != info.labels);
            let terminated = info.terminated;
            self.cache.upsert_bound_pod(info);
            if terminated {
                self.event(Events::POD_DELETE);
            } else if !old {
                self.event(Events::POD_ADD);
            } else if relabeled {
                self.event(Events::POD_LABEL);
            }
            return;
        }
        // Pending.
        let snap = self.cache.snapshot_mut();
        match &info.nominated_node {
            Some(n) => snap.nominate(info.clone(), &n.clone()),
            None => snap.clear_nomination(&uid),
        }
        if !self.profiles.contains(&info.scheduler_name) {
            if let Some(r) = &info.group
                && !info.terminating
                && !info.terminated
            {
                self.cache.snapshot_mut().groups.note_foreign(&info.namespace, r, &uid, &info.scheduler_name);
            }
            return;
        }
        if info.terminating || info.terminated {
            self.queue.delete(&uid);
            return;
        }
        let seen = self.queue.seen(pod);
        let change = self.queue.classify(&uid, &seen);
        if change == queue::Change::StatusOnly {
            // Only the status changed (our own PodScheduled=False patch, a
            // nomination): the record takes the newer pod where it waits.
            self.queue.refresh(info, seen);
            return;
        }
        let gate = self.gate(&info);
        let gated = gate.is_some();
        let q = if gated { "gated" } else { "active" };
        if change == queue::Change::New {
            self.metrics.incoming_pods.with_label_values(&[q, "PodAdd"]).inc();
            // A new member may complete its group (GangScheduling's pod-add event).
            let member = info.group.is_some();
            self.queue.add(info, gated, Self::now());
            if member {
                self.event(Events::POD_GROUP);
            }
        } else {
            self.metrics.incoming_pods.with_label_values(&[q, "PodUpdate"]).inc();
            self.queue.update(info, gated, Self::now());
        }
        if let Some(events) = gate {
            self.queue.set_gate_events(&uid, events);
        }
        self.queue.set_seen(&uid, seen);
    }

    /// Shadow mode: a pod of a judged profile that this loop saw pending is
    /// now bound (by another scheduler). Runs one cycle for it on the cache
    /// as it stands, before the binding is applied (earlier bindings in,
    /// the pod itself not yet bound), and records the verdict.
    fn judge_binding(&mut self, bound: &Arc<PodInfo>) {
        let Some(node) = bound.node_name.as_deref() else { return };
        // Only a binding seen happen: the pod waits in the queue (pending,
        // of a judged profile) and is not bound in the cache yet.
        let Some(qp) = self.queue.get(&bound.uid) else { return };
        if self.cache.pod_state(&bound.uid).is_some() {
            return;
        }
        let Some(fw) = self.frameworks.iter().find(|f| f.profile == bound.scheduler_name) else { return };
        // The pod as it waited (no nodeName: NodeName would reject every other node).
        let mut pending = (*qp.pod).clone();
        pending.node_name = None;
        let pending = Arc::new(pending);
        let now = Self::now();
        let detail = self.shadow.as_mut().map(|sh| &mut sh.detail);
        let j = shadow::judge_with(fw, self.cache.snapshot(), &pending, node, || detail.is_some_and(|d| d.take(now)));
        let profile = fw.profile.as_str();
        self.metrics.shadow_decisions.with_label_values(&[profile, j.verdict.as_str()]).inc();
        if let Some(g) = j.score_gap {
            self.metrics.shadow_score_gap.with_label_values(&[profile]).observe(g as f64);
        }
        if let Some(sh) = &mut self.shadow {
            sh.record(&j, Self::now());
        }
    }

    fn delete_pod(&mut self, uid: &str) {
        self.cache.snapshot_mut().groups.forget_foreign(uid);
        let was_bound = self.cache.pod_state(uid).is_some();
        self.cache.remove_pod(uid);
        self.queue.delete(uid);
        if was_bound {
            self.event(Events::POD_DELETE);
        }
    }

    fn apply(&mut self, ev: WatchEvent) {
        match ev {
            WatchEvent::Pod(c) => match c {
                Change::Apply(p) => self.apply_pod(&p.0),
                Change::Delete(p) => {
                    let uid = PodInfo::from_pod(&p.0).uid.clone();
                    self.delete_pod(&uid);
                }
                Change::Relist(all) => {
                    let live: HashSet<String> = all.iter().map(|p| PodInfo::from_pod(&p.0).uid.clone()).collect();
                    let gone: Vec<String> = self.cache.pod_uids().chain(self.queue.pods().map(|p| &p.uid)).filter(|u| !live.contains(*u)).cloned().collect();
                    for u in gone {
                        // Assumed pods are kept: their bind is still in flight.
                        if self.cache.pod_state(&u) != Some(berth_engine::cache::PodState::Assumed) {
                            self.delete_pod(&u);
                        }
                    }
                    for p in all {
                        self.apply_pod(&p.0);
                    }
                    self.mark_synced(watch::PODS);
                }
            },
            WatchEvent::Node(c) => match *c {
                Change::Apply(n) => self.apply_node(&n),
                Change::Delete(n) => {
                    self.cache.remove_node(n.metadata.name.as_deref().unwrap_or_default());
                }
                Change::Relist(all) => {
                    let live: HashSet<&str> = all.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
                    let gone: Vec<String> = self.cache.snapshot().nodes.iter().map(|n| n.name().to_string()).filter(|n| !live.contains(n.as_str())).collect();
                    for n in gone {
                        self.cache.remove_node(&n);
                    }
                    for n in &all {
                        self.apply_node(n);
                    }
                    self.mark_synced(watch::NODES);
                }
            },
            WatchEvent::Pdb(c) => {
                match *c {
                    Change::Apply(p) => self.apply_pdb(&p),
                    Change::Delete(p) => {
                        self.pdbs.remove(&key(&p.metadata));
                    }
                    Change::Relist(all) => {
                        self.pdbs.clear();
                        for p in &all {
                            self.apply_pdb(p);
                        }
                        self.mark_synced(watch::PDBS);
                    }
                }
                self.cache.snapshot_mut().pdbs = self.pdbs.values().cloned().collect();
                self.event(Events::PDB);
            }
            WatchEvent::Namespace(c) => {
                let snap = self.cache.snapshot_mut();
                match *c {
                    Change::Apply(n) => {
                        snap.namespaces.insert(n.metadata.name.clone().unwrap_or_default(), n.metadata.labels.clone().unwrap_or_default());
                    }
                    Change::Delete(n) => {
                        snap.namespaces.remove(n.metadata.name.as_deref().unwrap_or_default());
                    }
                    Change::Relist(all) => {
                        snap.namespaces = all.iter().map(|n| (n.metadata.name.clone().unwrap_or_default(), n.metadata.labels.clone().unwrap_or_default())).collect();
                        self.mark_synced(watch::NAMESPACES);
                    }
                }
                self.event(Events::NAMESPACE);
            }
            WatchEvent::PodGroup(api, c) => self.apply_groups(api, *c),
            WatchEvent::Workload(w) => {
                if let Some(i) = watch::apply_workload_event(&mut self.cache.snapshot_mut().workloads, *w) {
                    self.mark_synced(watch::WORKLOAD_KINDS[i]);
                }
            }
            WatchEvent::Dra(d) => {
                let (synced, ev) = watch::apply_dra_event(self.cache.snapshot_mut(), &mut self.dra, *d);
                if let Some(i) = synced {
                    self.mark_synced(watch::DRA_KINDS[i]);
                }
                self.event(ev);
            }
            WatchEvent::Storage(st) => {
                let (synced, ev) = watch::apply_storage_event(&mut self.cache.snapshot_mut().storage, *st);
                if let Some(i) = synced {
                    self.mark_synced(watch::STORAGE_KINDS[i]);
                }
                self.event(ev);
            }
        }
    }

    fn apply_node(&mut self, n: &core::Node) {
        let spec = NodeSpec::from_node(n);
        for e in &spec.errors {
            tracing::warn!(node = %spec.name, error = %e, "node field ignored");
        }
        let ev = node_events(self.cache.snapshot().node(&spec.name).map(|ni| &*ni.node), &spec);
        self.cache.upsert_node(spec);
        self.event(ev);
    }

    fn apply_pdb(&mut self, p: &policy::PodDisruptionBudget) {
        match Pdb::from_api(p) {
            Ok(pdb) => {
                self.pdbs.insert(key(&p.metadata), pdb);
            }
            Err(e) => {
                // Upstream skips such a budget during preemption; so do we.
                tracing::warn!(pdb = %key(&p.metadata), error = %e, "PodDisruptionBudget ignored");
                self.pdbs.remove(&key(&p.metadata));
            }
        }
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

    async fn schedule_one(&mut self) -> bool {
        let now = Self::now();
        let Some(qp) = self.queue.pop(now) else { return false };
        let pod = qp.pod.clone();
        if self.cache.pod_state(&pod.uid).is_some() {
            self.queue.done(&pod.uid);
            return true;
        }
        let Some(fi) = self.frameworks.iter().position(|f| f.profile == pod.scheduler_name) else {
            self.queue.done(&pod.uid);
            return true;
        };
        if pod.group.is_some() {
            self.schedule_group(fi, qp, now).await;
            return true;
        }
        let start = Instant::now();
        let fw = &self.frameworks[fi];
        let profile = fw.profile.clone();
        // The cycle, then Reserve and Permit and the framework's assume step
        // into the cache: the pod and whatever its Reserve plugins decided
        // (volume and device decisions), which `Cache::forget` reverts with it.
        let ScheduledOne { outcome: o, state, assumed } = fw.schedule_one(&mut self.cache, &pod, CycleOptions::default());
        let elapsed = start.elapsed().as_secs_f64();
        match assumed {
            Assumed::On(node) => {
                self.metrics.schedule_attempts.with_label_values(&["scheduled", &profile]).inc();
                self.metrics.attempt_duration.with_label_values(&["scheduled", &profile]).observe(elapsed);
                self.bind_assumed(fi, state, pod, node, start).await;
                return true;
            }
            Assumed::Refused { .. } => {
                self.metrics.schedule_attempts.with_label_values(&["error", &profile]).inc();
                self.queue.error(&pod.uid, now);
                return true;
            }
            Assumed::NoNode => {}
        }
        if let Some(err) = &o.error {
            tracing::warn!(pod = %pod.key(), error = %err, "scheduling error");
            self.metrics.schedule_attempts.with_label_values(&["error", &profile]).inc();
            self.metrics.attempt_duration.with_label_values(&["error", &profile]).observe(elapsed);
            let since = self.queue.unschedulable_since(&pod.uid);
            if let Some(w) = &self.writer {
            w.report_failure(pod.clone(), "SchedulerError", o.message.clone().unwrap_or_else(|| err.message()), None, since).await;
        }
            self.queue.error(&pod.uid, now);
            return true;
        }
        self.metrics.schedule_attempts.with_label_values(&["unschedulable", &profile]).inc();
        self.metrics.attempt_duration.with_label_values(&["unschedulable", &profile]).observe(elapsed);
        let mut nominated = None;
        if let Some(pf) = &o.post_filter {
            self.metrics.preemption_attempts.inc();
            if let Some(n) = &pf.nominated_node {
                self.metrics.preemption_victims.observe(pf.victims.len() as f64);
                nominated = Some(n.clone());
                for v in &pf.victims {
                    if let Some(w) = &self.writer {
            w.preempt(v.clone(), pod.clone(), n.clone(), profile.clone()).await;
        }
                }
                // Lower-priority pods nominated to the same node lose their nomination.
                let lower: Vec<Arc<PodInfo>> = self.cache.snapshot().nominated.get(n).map(|v| v.iter().filter(|p| p.priority < pod.priority && p.uid != pod.uid).cloned().collect()).unwrap_or_default();
                for p in lower {
                    self.cache.snapshot_mut().clear_nomination(&p.uid);
                    if let Some(w) = &self.writer {
            w.clear_nomination(p).await;
        }
                }
                let mut np = (*pod).clone();
                np.nominated_node = Some(n.clone());
                self.cache.snapshot_mut().nominate(Arc::new(np), n);
                // The record carries the nomination from now on: the next
                // attempt sees it (PodEligibleToPreemptOthers) even before the
                // watch brings the status back.
                self.queue.set_nominated(&pod.uid, Some(n.clone()));
            }
        }
        // PostFilter's deallocations (DynamicResources): the claim's update
        // event requeues the pod, which then allocates anew.
        if let Some(w) = &self.writer {
            for d in &o.deallocations {
                w.deallocate_claim(d.clone()).await;
            }
        }
        let message = o.message.clone().unwrap_or_default();
        tracing::info!(pod = %pod.key(), %message, "unschedulable");
        let was_nominated = nominated.is_some();
        let since = self.queue.unschedulable_since(&pod.uid);
        if let Some(w) = &self.writer {
            w.report_failure(pod.clone(), "Unschedulable", message, nominated, since).await;
        }
        let mut mask = Events::default();
        for name in &o.unschedulable_plugins {
            match fw.plugins().find(|p| p.name() == *name) {
                Some(p) => mask = mask.or(p.events()),
                None => mask = Events::ALL,
            }
        }
        if mask == Events::default() {
            mask = Events::ALL;
        }
        // A nominated preemptor waits for its victims to go.
        if was_nominated {
            mask = mask.or(Events::POD_DELETE);
        }
        self.queue.set_rejected(&pod.uid, Some(Rejection { profile, plugins: o.unschedulable_plugins.clone() }));
        self.queue.unschedulable(&pod.uid, mask, now);
        true
    }

    /// A PodGroup change (either API). Members waiting in the pool move only
    /// when what the scheduler reads changed (minCount, topology, ...), not
    /// on the status writes that follow each attempt.
    fn apply_groups(&mut self, api: berth_model::pod::GroupApi, c: Change<kube::api::DynamicObject>) {
        use berth_engine::cache::groups::GroupPolicy;
        fn compile(api: berth_model::pod::GroupApi, o: &kube::api::DynamicObject) -> (String, String, Result<GroupPolicy, berth_engine::cache::groups::Error>) {
            let ns = o.metadata.namespace.clone().unwrap_or_else(|| "default".into());
            let name = o.metadata.name.clone().unwrap_or_default();
            let value = serde_json::to_value(o).unwrap_or_default();
            let g = match api {
                berth_model::pod::GroupApi::V1alpha1 => GroupPolicy::from_v1alpha1(&ns, &name, &value),
                berth_model::pod::GroupApi::V1beta1 => match serde_json::from_value::<k8s_openapi::api::scheduling::v1beta1::PodGroup>(value) {
                    Ok(pg) => GroupPolicy::from_v1beta1(&pg),
                    Err(e) => Err(berth_engine::cache::groups::Error::Field { key: format!("{ns}/{name}"), field: "spec", message: e.to_string() }),
                },
            };
            (ns, name, g)
        }
        let mut changed = false;
        let groups = &mut self.cache.snapshot_mut().groups;
        match c {
            Change::Apply(o) => {
                let (ns, name, g) = compile(api, &o);
                let r = berth_model::pod::GroupRef { api, name: name.clone() };
                changed = groups.get(&ns, &r).is_none_or(|old| old.as_ref().map(|a| &**a) != g.as_ref());
                if let Err(e) = &g {
                    tracing::warn!(error = %e, "PodGroup cannot be used; its pods stay pending with the reason");
                }
                groups.upsert(api, &ns, &name, g);
            }
            Change::Delete(o) => {
                let ns = o.metadata.namespace.clone().unwrap_or_else(|| "default".into());
                groups.remove(api, &ns, o.metadata.name.as_deref().unwrap_or_default());
            }
            Change::Relist(all) => {
                let before = groups.len();
                groups.clear(api);
                for o in &all {
                    let (ns, name, g) = compile(api, o);
                    groups.upsert(api, &ns, &name, g);
                }
                changed = before != 0 || !all.is_empty();
                let kind = match api {
                    berth_model::pod::GroupApi::V1beta1 => watch::PODGROUPS_V1BETA1,
                    berth_model::pod::GroupApi::V1alpha1 => watch::PODGROUPS_V1ALPHA1,
                };
                self.mark_synced(kind);
            }
        }
        if changed {
            self.event(Events::POD_GROUP);
        }
    }

    /// The events that may make a pod the named plugins rejected schedulable.
    fn mask_for(&self, fi: usize, plugins: &[&'static str]) -> Events {
        let fw = &self.frameworks[fi];
        let mut mask = Events::default();
        for name in plugins {
            match fw.plugins().find(|p| p.name() == *name) {
                Some(p) => mask = mask.or(p.events()),
                None => mask = Events::ALL,
            }
        }
        if mask == Events::default() { Events::ALL } else { mask }
    }

    /// The group cycle for the group of `qp` (just popped): its other waiting
    /// members are taken from the queue, the group is decided all or
    /// nothing, the placed members are bound and the others go back to the
    /// pool together, each with its reason.
    async fn schedule_group(&mut self, fi: usize, qp: QueuedPod, now: std::time::Instant) {
        let first = qp.pod.clone();
        let mut members = vec![first.clone()];
        for q in self.queue.take_group(&first, now) {
            if self.cache.pod_state(&q.pod.uid).is_some() {
                self.queue.done(&q.pod.uid);
                continue;
            }
            members.push(q.pod);
        }
        let start = Instant::now();
        let out = schedule_group(&mut LoopHost { lp: self, fi }, &members);
        let elapsed = start.elapsed().as_secs_f64();
        let profile = self.frameworks[fi].profile.clone();
        let result = if out.fits { "scheduled" } else { "unschedulable" };
        self.metrics.schedule_attempts.with_label_values(&[result, &profile]).inc_by(members.len() as u64);
        self.metrics.attempt_duration.with_label_values(&[result, &profile]).observe(elapsed);
        tracing::info!(group = %out.group, members = members.len(), placed = out.placed.len(), fits = out.fits, message = %out.message, "group cycle");
        if out.waiting {
            // Fewer members than minCount exist: they wait for the rest (a
            // member added moves them), unreported, as upstream's PreEnqueue
            // keeps them out of the queue.
            for u in &out.unplaced {
                self.queue.set_rejected(&u.pod.uid, Some(Rejection { profile: profile.clone(), plugins: u.plugins.clone() }));
                self.queue.unschedulable(&u.pod.uid, Events::POD_GROUP, now);
            }
            return;
        }
        self.report_group(&first, &out).await;
        // Preemption for the whole group, or for nobody.
        let mut nominated: HashMap<String, String> = HashMap::new();
        if let Some(gp) = preempt_for_group(&self.frameworks[fi], self.cache.snapshot(), &members, &out) {
            self.metrics.preemption_attempts.inc();
            self.metrics.preemption_victims.observe(gp.victims.len() as f64);
            tracing::info!(group = %out.group, victims = gp.victims.len(), "preempting for a pod group");
            let by = gp.nominations.first().map(|(p, n)| (p.clone(), n.clone()));
            for v in &gp.victims {
                let (preemptor, node) = by.clone().unwrap_or_else(|| (first.clone(), String::new()));
                let node = self.cache.snapshot().pod_node(&v.uid).map(str::to_string).unwrap_or(node);
                if let Some(w) = &self.writer {
            w.preempt(v.clone(), preemptor, node, profile.clone()).await;
        }
            }
            for (m, n) in gp.nominations {
                let mut np = (*m).clone();
                np.nominated_node = Some(n.clone());
                self.cache.snapshot_mut().nominate(Arc::new(np), &n);
                self.queue.set_nominated(&m.uid, Some(n.clone()));
                nominated.insert(m.uid.clone(), n);
            }
        }
        // Members that wait: as one group (the union of every member's
        // rejectors, so any event that could help moves them all), or alone
        // when the group was bound without them.
        let mut group_mask = self.mask_for(fi, &out.plugins()).or(Events::POD_GROUP);
        if !nominated.is_empty() {
            // The group waits for its victims to go.
            group_mask = group_mask.or(Events::POD_DELETE);
        }
        for u in &out.unplaced {
            let since = self.queue.unschedulable_since(&u.pod.uid);
            let (reason, message) = if u.error { ("SchedulerError", u.message.clone()) } else { ("Unschedulable", out.pod_message(u)) };
            if let Some(w) = &self.writer {
            w.report_failure(u.pod.clone(), reason, message, nominated.get(&u.pod.uid).cloned(), since).await;
        }
            self.queue.set_rejected(&u.pod.uid, Some(Rejection { profile: profile.clone(), plugins: u.plugins.clone() }));
            if u.error {
                self.queue.error(&u.pod.uid, now);
            } else {
                let mask = if out.fits { self.mask_for(fi, &u.plugins) } else { group_mask };
                self.queue.unschedulable(&u.pod.uid, mask, now);
            }
        }
        for p in out.placed {
            self.bind_assumed(fi, p.state, p.pod, p.node, start).await;
        }
    }

    /// Writes the group's status when it changed: upstream's
    /// PodGroupInitiallyScheduled condition (v1beta1; never back to False once
    /// True), scheduler-plugins' phase and scheduled count (v1alpha1).
    async fn report_group(&mut self, first: &Arc<PodInfo>, out: &GroupOutcome) {
        use berth_model::pod::GroupApi;
        let Some(r) = &first.group else { return };
        if out.min_count == 0 {
            return; // no usable group object to write to
        }
        let key = format!("{:?}/{}/{}", r.api, first.namespace, r.name);
        let last = self.group_status.get(&key);
        let message = if out.fits { String::new() } else { out.message.clone() };
        if last == Some(&message) || (last.is_some_and(String::is_empty) && !out.fits) {
            return;
        }
        self.group_status.insert(key, message.clone());
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
        let status = match (r.api, out.fits) {
            (GroupApi::V1beta1, true) => serde_json::json!({"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled", "message": "", "lastTransitionTime": now}]}),
            (GroupApi::V1beta1, false) => serde_json::json!({"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable", "message": message, "lastTransitionTime": now}]}),
            (GroupApi::V1alpha1, true) => serde_json::json!({"phase": "Scheduled", "scheduled": out.bound as usize + out.placed.len(), "scheduleStartTime": now}),
            (GroupApi::V1alpha1, false) => serde_json::json!({"phase": "Pending", "scheduled": out.bound, "scheduleStartTime": now}),
        };
        if let Some(w) = &self.writer {
            w.group_status(r.api, first.namespace.clone(), r.name.clone(), status).await;
        }
    }

    /// The binding cycle of an assumed pod: PreBind, whose plugins describe
    /// their API work (VolumeBinding's: PV claimRefs, the claims' selected
    /// node, then the wait until they are bound), then that work and the
    /// bind, off the loop; the outcome comes back as a `BindResult`. A
    /// PreBind plugin that fails here forgets the pod and its reservations
    /// and retries it with backoff.
    async fn bind_assumed(&mut self, fi: usize, mut state: CycleState, pod: Arc<PodInfo>, node: String, start: Instant) {
        let s = self.frameworks[fi].run_pre_bind(&mut state, &pod, &node);
        if !s.is_success() {
            let message = format!("running PreBind plugin {:?}: {}", s.plugin, s.message());
            tracing::warn!(pod = %pod.key(), %node, error = %message, "PreBind failed");
            self.frameworks[fi].unassume(&mut self.cache, &mut state, &pod, &node);
            let since = self.queue.unschedulable_since(&pod.uid);
            if let Some(w) = &self.writer {
            w.report_failure(pod.clone(), "SchedulerError", message, None, since).await;
        }
            self.queue.error(&pod.uid, Self::now());
            return;
        }
        let work = state.take_pre_bind_work();
        if let Some(w) = &self.writer {
            let devices = &self.cache.snapshot().devices;
            let seen = work
                .iter()
                .flat_map(|w| &w.writes)
                .filter_map(|w| match w {
                    ApiWrite::AllocateClaim { namespace, name, .. } => devices.api_claim(namespace, name).and_then(seen_claim),
                    _ => None,
                })
                .collect();
            w.bind_with_work(pod, node, start.into_std(), work, seen).await;
        }
    }

    fn bind_result(&mut self, r: BindResult) {
        let uid = r.pod.uid.clone();
        if r.outcome != BindOutcome::NotLeader {
            let status = if matches!(r.outcome, BindOutcome::Bound | BindOutcome::AlreadyBound { .. }) { "Success" } else { "Error" };
            self.metrics.extension_point_duration.with_label_values(&["Bind", status, &r.pod.scheduler_name]).observe(r.took.as_secs_f64());
        }
        match r.outcome {
            BindOutcome::Bound => {
                let attempts = self.queue.get(&uid).map(|q| q.attempts).unwrap_or(1).max(1).to_string();
                if let Some(t) = self.queue.first_seen(&uid) {
                    self.metrics.sli_duration.with_label_values(&[&attempts]).observe(t.elapsed().as_secs_f64());
                }
                self.queue.done(&uid);
                tracing::debug!(pod = %r.pod.key(), node = %r.node, "bound");
            }
            BindOutcome::AlreadyBound { node } => {
                // The API has it bound (409, or read back after an unknown
                // outcome): it holds a slot there, whatever the watch says yet.
                tracing::info!(pod = %r.pod.key(), chosen = %r.node, bound = %node, "pod already bound");
                if node != r.node && self.cache.pod_state(&uid) == Some(berth_engine::cache::PodState::Assumed) {
                    self.cache.forget(&uid);
                    let mut p = (*r.pod).clone();
                    p.node_name = Some(node);
                    p.nominated_node = None;
                    self.cache.assume(Arc::new(p));
                }
                self.queue.done(&uid);
            }
            BindOutcome::Gone => {
                self.cache.forget(&uid);
                self.delete_pod(&uid);
            }
            BindOutcome::NotLeader => {
                self.cache.forget(&uid);
                self.queue.error(&uid, Self::now());
            }
            BindOutcome::Failed(m) => {
                tracing::warn!(pod = %r.pod.key(), node = %r.node, error = %m, "bind failed (known not bound); retrying with backoff");
                self.cache.forget(&uid);
                self.queue.error(&uid, Self::now());
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

    async fn run(
        mut self,
        mut watch_rx: mpsc::Receiver<WatchEvent>,
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
            if self.shadow.is_none() && ready && self.health.ready() && *self.leading.borrow() && self.lease.may_write() && self.schedule_one().await {
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

fn key(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!("{}/{}", m.namespace.as_deref().unwrap_or("default"), m.name.as_deref().unwrap_or_default())
}
