//! Leader election through a coordination.k8s.io/v1 Lease, as client-go's
//! leaderelection does it: the holder renews every retryPeriod; a replica
//! that cannot renew within renewDeadline stops leading at once; others take
//! the lease when its record has not changed for leaseDuration (judged by
//! their own clock, so clock skew between replicas does not matter). On
//! shutdown the holder releases the lease so a successor need not wait.
//!
//! [`Lease`] is what writers consult at the moment of each write: a replica
//! may write only while it leads *and* its last renewal is younger than
//! renewDeadline (judged by the clock, not by when the election task last
//! ran, so a replica that was paused stops writing the instant it wakes).
//! Writes hold a read guard across the request; stepping down and releasing
//! take the write side first, so no write of ours reaches the API after the
//! lease is given up.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1 as coord;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::api::PostParams;
use kube::Api;
use tokio::sync::watch;

use crate::watch::WatchHealth;
use tokio::time::Instant;

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// leaseDuration (15 s upstream).
    pub lease_duration: Duration,
    /// renewDeadline (10 s upstream).
    pub renew_deadline: Duration,
    /// retryPeriod (2 s upstream).
    pub retry_period: Duration,
}

/// Upstream's `maxTolerableExpiredLease` of the leader-election health check.
pub const HEALTHZ_TOLERANCE: Duration = Duration::from_secs(20);

#[derive(Debug)]
struct LeaseInner {
    /// Leader election is on (when off, this replica always may write).
    elect: bool,
    leading: AtomicBool,
    /// Milliseconds since `epoch` of the last successful renewal.
    renewed_ms: AtomicU64,
    epoch: std::time::Instant,
    renew_deadline: Duration,
    lease_duration: Duration,
    gate: tokio::sync::RwLock<()>,
    /// What the election last saw, for /readyz?verbose and the metrics.
    seen: std::sync::Mutex<Seen>,
}

/// What the election last saw of the Lease.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Seen {
    /// No attempt has been answered yet (or election is off).
    #[default]
    Unknown,
    /// This replica holds the Lease.
    Leading,
    /// Another identity holds the Lease; this replica schedules nothing
    /// until it is released or expires.
    Waiting {
        /// `namespace/name` of the Lease.
        lease: String,
        /// The identity holding it.
        holder: String,
    },
}

/// This replica's view of its leadership, shared by the election, the
/// writer, the scheduling loop and the health checks. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Lease {
    inner: Arc<LeaseInner>,
}

/// A permit to write, held across one API request.
pub type WritePermit<'a> = tokio::sync::RwLockReadGuard<'a, ()>;

impl Lease {
    /// A lease view; `elect` false means this replica always leads.
    pub fn new(elect: bool, renew_deadline: Duration, lease_duration: Duration) -> Lease {
        Lease {
            inner: Arc::new(LeaseInner {
                elect,
                leading: AtomicBool::new(!elect),
                renewed_ms: AtomicU64::new(0),
                epoch: std::time::Instant::now(),
                renew_deadline,
                lease_duration,
                gate: tokio::sync::RwLock::new(()),
                seen: std::sync::Mutex::new(Seen::Unknown),
            }),
        }
    }

    fn since_renewal(&self) -> Duration {
        let now = self.inner.epoch.elapsed();
        now.saturating_sub(Duration::from_millis(self.inner.renewed_ms.load(Ordering::Acquire)))
    }

    /// Records a successful acquisition or renewal.
    pub fn renewed(&self) {
        let ms = self.inner.epoch.elapsed().as_millis() as u64;
        self.inner.renewed_ms.store(ms, Ordering::Release);
        self.inner.leading.store(true, Ordering::Release);
    }

    /// Believes it leads (the election has not stepped down).
    pub fn believes_leading(&self) -> bool {
        self.inner.leading.load(Ordering::Acquire)
    }

    /// May this replica write now: it leads and renewed within renewDeadline.
    pub fn may_write(&self) -> bool {
        !self.inner.elect || (self.believes_leading() && self.since_renewal() < self.inner.renew_deadline)
    }

    /// A permit for one write, or None when this replica may not write. Hold
    /// it until the request has been answered.
    pub async fn write_permit(&self) -> Option<WritePermit<'_>> {
        let g = self.inner.gate.read().await;
        self.may_write().then_some(g)
    }

    /// Steps down: no new write starts; waits (at most `timeout`) for the
    /// writes in flight to be answered. True when none is left.
    pub async fn step_down(&self, timeout: Duration) -> bool {
        self.inner.leading.store(false, Ordering::Release);
        tokio::time::timeout(timeout, self.inner.gate.write()).await.is_ok()
    }

    /// What the election last saw of the Lease.
    pub fn seen(&self) -> Seen {
        self.inner.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Records what the election saw; true when it changed.
    fn set_seen(&self, now: Seen) -> bool {
        match self.inner.seen.lock() {
            Ok(mut s) if *s != now => {
                *s = now;
                true
            }
            _ => false,
        }
    }

    /// The leader-election line of `/readyz?verbose`. A replica waiting for
    /// another's Lease is ready (it takes over as soon as it may), but says
    /// whom it waits for.
    pub fn readyz_line(&self) -> String {
        if !self.inner.elect {
            return "[+]leaderElection off: this replica schedules".into();
        }
        match self.seen() {
            Seen::Unknown => "[+]leaderElection starting: the Lease has not been read yet".into(),
            Seen::Leading => "[+]leaderElection leading: this replica holds the Lease and schedules".into(),
            Seen::Waiting { lease, holder } => format!("[+]leaderElection waiting: the Lease {lease} is held by {holder:?}; this replica schedules nothing until it is released or expires"),
        }
    }

    /// 1 while another identity holds the Lease and this replica waits for
    /// it (berth_leader_election_waiting).
    pub fn waiting(&self) -> bool {
        matches!(self.seen(), Seen::Waiting { .. })
    }

    /// Upstream's leader-election health check: failing when this replica
    /// believes it leads but has not renewed within leaseDuration + `tolerance`.
    pub fn check(&self, tolerance: Duration) -> Result<(), String> {
        if !self.inner.elect || !self.believes_leading() {
            return Ok(());
        }
        let since = self.since_renewal();
        let limit = self.inner.lease_duration + tolerance;
        if since > limit {
            return Err(format!("leaderElection: this replica believes it leads but last renewed its lease {:.1}s ago (leaseDuration + tolerance = {:.1}s)", since.as_secs_f64(), limit.as_secs_f64()));
        }
        Ok(())
    }
}

#[derive(Default)]
struct Observed {
    record: Option<(Option<String>, Option<String>)>,
    at: Option<Instant>,
    /// Another identity holding the Lease at the last read.
    holder: Option<String>,
}

fn now_micro() -> meta::MicroTime {
    meta::MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn spec_for(cfg: &LeaderConfig, prev: Option<&coord::LeaseSpec>, taking_over: bool) -> coord::LeaseSpec {
    let transitions = prev.and_then(|s| s.lease_transitions).unwrap_or(0);
    coord::LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.lease_duration.as_secs().max(1) as i32),
        acquire_time: if taking_over { Some(now_micro()) } else { prev.and_then(|s| s.acquire_time.clone()).or_else(|| Some(now_micro())) },
        renew_time: Some(now_micro()),
        lease_transitions: Some(if taking_over { transitions + 1 } else { transitions }),
        ..Default::default()
    }
}

/// One attempt to acquire or renew. Ok(true): we hold the lease now;
/// Ok(false): another identity does (`obs.holder` names it).
async fn try_acquire_or_renew(api: &Api<coord::Lease>, cfg: &LeaderConfig, obs: &mut Observed) -> Result<bool, kube::Error> {
    let current = match api.get_opt(&cfg.name).await? {
        Some(l) => l,
        None => {
            let lease = coord::Lease {
                metadata: meta::ObjectMeta { name: Some(cfg.name.clone()), namespace: Some(cfg.namespace.clone()), ..Default::default() },
                spec: Some(spec_for(cfg, None, true)),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        }
    };
    let spec = current.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let record = (holder.clone(), spec.renew_time.as_ref().map(|t| t.0.to_string()));
    if obs.record.as_ref() != Some(&record) {
        obs.record = Some(record);
        obs.at = Some(Instant::now());
    }
    let mine = holder.as_deref() == Some(cfg.identity.as_str());
    obs.holder = holder.clone().filter(|_| !mine);
    if !mine && holder.is_some() {
        let duration = spec.lease_duration_seconds.map(|s| Duration::from_secs(s.max(1) as u64)).unwrap_or(cfg.lease_duration);
        let unchanged_for = obs.at.map(|t| t.elapsed()).unwrap_or_default();
        if unchanged_for < duration {
            return Ok(false);
        }
    }
    let mut lease = current;
    lease.spec = Some(spec_for(cfg, Some(&spec), !mine));
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

async fn release(api: &Api<coord::Lease>, cfg: &LeaderConfig) {
    if let Ok(Some(mut lease)) = api.get_opt(&cfg.name).await {
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() == Some(cfg.identity.as_str()) {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now_micro());
            if let Err(e) = api.replace(&cfg.name, &PostParams::default(), &lease).await {
                tracing::warn!(error = %e, "releasing the lease failed");
            }
        }
    }
}

/// Runs the election until `stop` changes; `leading` tells whether we lead.
/// On taking the Lease, every watch relists before `leading` says so
/// ([`WatchHealth::relist_every_kind`]): nothing is scheduled on a view
/// older than the moment this replica became leader.
pub async fn run(client: kube::Client, cfg: LeaderConfig, lease: Lease, leading: watch::Sender<bool>, mut stop: watch::Receiver<bool>, health: WatchHealth) {
    let api: Api<coord::Lease> = Api::namespaced(client, &cfg.namespace);
    let mut obs = Observed::default();
    let mut last_renew: Option<Instant> = None;
    loop {
        let attempt = tokio::time::timeout(cfg.retry_period.max(Duration::from_millis(100)), try_acquire_or_renew(&api, &cfg, &mut obs)).await;
        let ok = matches!(attempt, Ok(Ok(true)));
        if let Ok(Err(e)) = &attempt {
            tracing::warn!(error = %e, "lease update failed");
        }
        let was = *leading.borrow();
        let name = format!("{}/{}", cfg.namespace, cfg.name);
        match (&attempt, &obs.holder) {
            (Ok(Ok(true)), _) => {
                lease.set_seen(Seen::Leading);
            }
            (Ok(Ok(false)), Some(holder)) => {
                let waiting = Seen::Waiting { lease: name.clone(), holder: holder.clone() };
                if lease.set_seen(waiting) {
                    // Once per holder, not once per retry.
                    tracing::info!(lease = %name, holder = %holder, identity = %cfg.identity, "waiting for the Lease: another identity holds it; this replica schedules nothing until it is released or expires (a second scheduler with other profiles needs its own leaderElection.resourceName)");
                }
            }
            _ => {}
        }
        if ok {
            last_renew = Some(Instant::now());
            lease.renewed();
            if !was {
                tracing::info!(identity = %cfg.identity, lease = %format!("{}/{}", cfg.namespace, cfg.name), "became leader; relisting every kind before scheduling");
                health.relist_every_kind();
                let _ = leading.send(true);
            }
        } else if was && last_renew.is_none_or(|t| t.elapsed() >= cfg.renew_deadline) {
            tracing::warn!(identity = %cfg.identity, "lost the lease: could not renew within the renew deadline; stop scheduling");
            let _ = leading.send(false);
            lease.step_down(cfg.renew_deadline).await;
        } else if was && matches!(attempt, Ok(Ok(false))) {
            // Someone else holds it now.
            tracing::warn!(identity = %cfg.identity, "lease taken by another replica; stop scheduling");
            let _ = leading.send(false);
            lease.step_down(cfg.renew_deadline).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.retry_period) => {}
            _ = stop.changed() => {
                if *leading.borrow() {
                    let _ = leading.send(false);
                    // No write of ours may follow the release: wait for those in flight.
                    if !lease.step_down(cfg.renew_deadline).await {
                        tracing::warn!("writes still in flight at release; releasing anyway");
                    }
                    // Bounded: an unreachable API must not hold up shutdown.
                    if tokio::time::timeout(cfg.renew_deadline, release(&api, &cfg)).await.is_err() {
                        tracing::warn!("releasing the lease timed out; successors wait for it to expire");
                    }
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_allowed_only_within_renew_deadline_and_health_fails_past_lease() {
        let l = Lease::new(true, Duration::from_millis(30), Duration::from_millis(40));
        assert!(!l.may_write(), "not leading yet");
        assert!(l.check(Duration::ZERO).is_ok(), "a follower is healthy");
        l.renewed();
        assert!(l.may_write());
        assert!(l.write_permit().await.is_some());
        // Not renewed: writes stop at renewDeadline although the election has not stepped down.
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(l.believes_leading());
        assert!(!l.may_write());
        assert!(l.write_permit().await.is_none());
        // Past leaseDuration + tolerance while believing it leads: unhealthy.
        let e = l.check(Duration::ZERO).unwrap_err();
        assert!(e.contains("believes it leads"), "{e}");
        assert!(l.check(Duration::from_secs(60)).is_ok());
        // Stepping down waits for the writes in flight.
        l.renewed();
        let permit = l.write_permit().await;
        assert!(permit.is_some());
        assert!(!l.step_down(Duration::from_millis(10)).await, "a write was still in flight");
        drop(permit);
        assert!(l.step_down(Duration::from_millis(10)).await);
        assert!(!l.may_write());
        assert!(l.check(Duration::ZERO).is_ok(), "stepped down: healthy");
        // Without election this replica always writes.
        assert!(Lease::new(false, Duration::ZERO, Duration::ZERO).may_write());
    }

    #[test]
    fn a_waiting_replica_says_whom_it_waits_for_once() {
        let l = Lease::new(true, Duration::from_secs(10), Duration::from_secs(15));
        assert!(l.readyz_line().contains("starting") && !l.waiting());
        let w = Seen::Waiting { lease: "kube-system/berth".into(), holder: "replica-a".into() };
        assert!(l.set_seen(w.clone()), "a change");
        assert!(!l.set_seen(w), "the same holder again is no change (no second log line)");
        assert!(l.waiting());
        assert_eq!(l.readyz_line(), r#"[+]leaderElection waiting: the Lease kube-system/berth is held by "replica-a"; this replica schedules nothing until it is released or expires"#);
        assert!(l.set_seen(Seen::Leading));
        assert!(!l.waiting() && l.readyz_line().contains("leading"));
        assert!(Lease::new(false, Duration::ZERO, Duration::ZERO).readyz_line().contains("off"));
    }
}
