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
//!
//! The crate is cut as upstream cuts `pkg/scheduler`: this file is the face
//! (options, [`start`], [`Handle`]); `scheduler` builds and runs the loop
//! (`scheduler.go`), `scheduler::schedule_one` is one cycle and its binding
//! (`schedule_one.go`) and `scheduler::eventhandlers` takes watch events into
//! the cache and the queue (`eventhandlers.go`). [`watch`] is the list/watch
//! plumbing, [`writer`] every API write.

pub mod admin;
pub mod connect;
pub mod leader;
pub mod live;
pub mod metrics;
mod scheduler;
pub mod shadow;
mod shutdown;
mod slots;
pub mod watch;
pub mod writer;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{mpsc, watch as signal};

use berth_engine::config::Config;
use berth_engine::profile::Profiles;

pub use self::shutdown::shutdown_signal;

use self::leader::Lease;
use self::metrics::Metrics;
use self::scheduler::{Loop, Wiring};
use self::shadow::ShadowLog;
use self::watch::WatchHealth;
use self::writer::{SharedCounts, Writer};

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

    scheduler::watch_all(&client, &watch_tx, &stop_rx, &watch_health, &mut tasks);
    drop(watch_tx);

    if elect {
        let cfg = leader::LeaderConfig {
            namespace: le.resource_namespace.clone(),
            name: le.resource_name.clone(),
            identity: opts.identity.clone(),
            lease_duration: config.lease_duration,
            renew_deadline: config.renew_deadline,
            retry_period: config.retry_period,
        };
        tasks.spawn(leader::run(client.clone(), cfg, lease.clone(), leading_tx, stop_rx.clone(), watch_health.clone()));
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
    let lp = Loop::new(frameworks, config, Wiring { health: watch_health.clone(), ready: ready_tx, writer: writer.clone(), metrics: metrics.clone(), leading: leading_rx.clone(), lease: lease.clone(), shadow: shadow_log.clone() });
    tasks.spawn(lp.run(watch_rx, bind_rx, admin.explain, stop_rx, writer));
    Ok(Handle { admin_addr, stop: stop_tx, leading: leading_rx, ready: ready_rx, tasks, metrics, lease, watch_health, writes, writer: writer_handle, admin: admin.info, shadow: shadow_log })
}
