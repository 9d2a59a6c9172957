//! Shared helpers of the end-to-end tests: the local cluster's helpers
//! (`support.rs` of its tests), and the daemon started in-process against it
//! over HTTP.
#![allow(clippy::unwrap_used, dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use berth_cluster::LocalCluster;
use berth_daemon::{self as daemon, Handle, Options};
use berth_engine::config::Config;

pub use crate::cluster_support::*;

/// An HTTPS GET against the admin port with `token` (any certificate
/// accepted, as `curl -k`): (status, body).
pub async fn admin_get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    berth_daemon::admin::https_get(addr, path, token, None).await.unwrap()
}

/// A configuration with one profile (`PROFILE`), short backoffs, a generous
/// client rate limit, and leader election on upstream's default leases (15 s,
/// renewed within 10 s): on a loaded test machine a short renew deadline can
/// pass while the process is starved, and a leader that steps down drops its
/// queued events, which tests that are not about failover must not depend on.
/// `extra` is appended at the top level (YAML).
pub fn config(extra: &str) -> Config {
    config_with_lease(extra, "15s", "10s", "2s")
}

/// As [`config`], with short leases (3 s, renewed within 2 s, retried every
/// 500 ms) for the tests of failover and of a deposed leader.
pub fn config_short_lease(extra: &str) -> Config {
    config_with_lease(extra, "3s", "2s", "500ms")
}

fn config_with_lease(extra: &str, duration: &str, renew: &str, retry: &str) -> Config {
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npodInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 2\nclientConnection:\n  qps: 2000\n  burst: 4000\nleaderElection:\n  leaderElect: true\n  leaseDuration: {duration}\n  renewDeadline: {renew}\n  retryPeriod: {retry}\nprofiles:\n- schedulerName: {PROFILE}\n{extra}"
    );
    Config::parse(&yaml).unwrap()
}

/// Starts the daemon against `c` with `identity`, admin listener on an ephemeral port.
pub async fn start_daemon(c: &LocalCluster, cfg: &Config, identity: &str) -> Handle {
    let opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: identity.into(), ..Options::default() };
    daemon::start(c.client().unwrap(), cfg, opts).await.unwrap()
}

/// Waits until `h` is ready and leading.
pub async fn until_leading(h: &Handle, secs: u64) {
    let mut l = h.leading.clone();
    let mut r = h.ready.clone();
    tokio::time::timeout(Duration::from_secs(secs), async {
        r.wait_for(|x| *x).await.unwrap();
        l.wait_for(|x| *x).await.unwrap();
    })
    .await
    .expect("daemon did not become ready and leading");
}

/// A GET against the admin port as an administrator (HTTPS, [`ADMIN_TOKEN`]): (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    admin_get(addr, path, Some(ADMIN_TOKEN)).await
}
