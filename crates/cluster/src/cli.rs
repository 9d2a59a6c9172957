//! The `berth cluster` and `berth cluster-bench` command lines.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{ClusterConfig, Error, ErrorRule, FaultConfig, KubeletConfig, LocalCluster};

/// Arguments of `berth cluster`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Number of simulated nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Number of zones the nodes are spread over.
    #[arg(long, default_value_t = 3)]
    pub zones: usize,
    /// CPU capacity of each node.
    #[arg(long, default_value = "4")]
    pub node_cpu: String,
    /// Memory capacity of each node.
    #[arg(long, default_value = "32Gi")]
    pub node_memory: String,
    /// Pod capacity of each node.
    #[arg(long, default_value_t = 110)]
    pub node_pods: u32,
    /// Write a kubeconfig pointing at the cluster here.
    #[arg(long)]
    pub write_kubeconfig: Option<PathBuf>,
    /// Milliseconds between a pod's binding and its Running status.
    #[arg(long, default_value_t = 100)]
    pub pod_start_delay_ms: u64,
    /// Disable the simulated kubelets.
    #[arg(long)]
    pub no_kubelet: bool,
    /// Seconds between watch BOOKMARK events.
    #[arg(long, default_value_t = 5)]
    pub bookmark_interval_secs: u64,
    /// Watch events retained per resource for resumes.
    #[arg(long, default_value_t = 100_000)]
    pub history: usize,
    /// Inject errors: VERB:RESOURCE:KIND:FRACTION (KIND 429, 500 or 409; * for any), repeatable.
    #[arg(long = "fault")]
    pub faults: Vec<String>,
    /// End every watch after this many seconds.
    #[arg(long)]
    pub watch_cut_secs: Option<u64>,
    /// Volumes of the simulated CSI driver each node can attach (its CSINode's allocatable count).
    #[arg(long, default_value_t = 32)]
    pub attach_limit: i32,
    /// Seconds a deleted node's pods wait before PodGC deletes them (upstream: 40).
    #[arg(long, default_value_t = 40)]
    pub podgc_quarantine_secs: u64,
    /// GPUs of the simulated DRA driver `gpu.example.com` on every node
    /// (a ResourceSlice per node, DeviceClass `gpu.example.com`); 0: no driver.
    #[arg(long, default_value_t = 0, conflicts_with = "devices")]
    pub devices_per_node: usize,
    /// The simulated DRA drivers' devices per node, from a YAML file
    /// (format: `berth_cluster::dra_driver`).
    #[arg(long)]
    pub devices: Option<PathBuf>,
    /// Keep every object in this directory across restarts (a redb
    /// database; resourceVersions continue, watches from before a restart
    /// get 410 Gone). A new directory is seeded with --nodes nodes; one
    /// that holds a cluster is read back as it is (--nodes is ignored).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The Kubernetes release to answer as (1.34, 1.35, 1.36 or 1.37):
    /// `/version`, and only the API groups and versions it serves by default.
    #[arg(long, default_value = "1.37")]
    pub kubernetes_version: super::version::KubeVersion,
    /// How requests are authorized: RBAC (bearer tokens, RBAC policy; the
    /// written kubeconfig carries the admin token) or AlwaysAllow (every
    /// request, even anonymous, has full access; a warning is logged when
    /// --listen is not a loopback address).
    #[arg(long, value_enum, default_value_t = super::authz::AuthorizationMode::Rbac)]
    pub authorization_mode: super::authz::AuthorizationMode,
    /// How long an Event is kept after its last write, as kube-apiserver's
    /// `--event-ttl` (a Go duration: `1h`, `1h0m0s`, `90s`, `500ms`).
    #[arg(long, default_value = "1h", value_parser = go_duration)]
    pub event_ttl: Duration,
    /// Read-only requests in flight at most, as kube-apiserver's flag
    /// (watches are not counted; system:masters is never refused); the
    /// excess gets 429 with Retry-After: 1. 0: no limit.
    #[arg(long, default_value_t = super::inflight::DEFAULT_MAX_REQUESTS_INFLIGHT)]
    pub max_requests_inflight: usize,
    /// Mutating requests in flight at most, as kube-apiserver's flag. 0: no limit.
    #[arg(long, default_value_t = super::inflight::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT)]
    pub max_mutating_requests_inflight: usize,
}

/// A Go duration (`1h0m0s`, `90s`, `1.5m`, `500ms`): one or more number
/// and unit pairs.
fn go_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?}: expected a Go duration such as 1h, 30m, 90s, 500ms");
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let unit_end = rest[num_end..].find(|c: char| c.is_ascii_digit() || c == '.').map_or(rest.len(), |i| num_end + i);
        let part = super::resources::parse_duration(&rest[..unit_end]).filter(|_| num_end > 0 && matches!(&rest[num_end..unit_end], "h" | "m" | "s" | "ms")).ok_or_else(bad)?;
        total += part;
        rest = &rest[unit_end..];
    }
    Ok(total)
}

impl ClusterArgs {
    /// The cluster configuration these arguments describe.
    pub fn config(&self) -> Result<ClusterConfig, Error> {
        let error_rules = self.faults.iter().map(|s| s.parse::<ErrorRule>()).collect::<Result<Vec<_>, _>>()?;
        Ok(ClusterConfig {
            listen: self.listen,
            nodes: self.nodes,
            zones: self.zones,
            node_cpu: self.node_cpu.clone(),
            node_memory: self.node_memory.clone(),
            node_pods: self.node_pods,
            kubelet: KubeletConfig { enabled: !self.no_kubelet, start_delay: Duration::from_millis(self.pod_start_delay_ms) },
            store: super::StoreConfig { history_limit: self.history.max(1), ..Default::default() },
            bookmark_interval: Duration::from_secs(self.bookmark_interval_secs.max(1)),
            faults: FaultConfig { error_rules, watch_cut_interval: self.watch_cut_secs.map(Duration::from_secs) },
            auth: Default::default(),
            storage: super::StorageConfig { attach_limit: self.attach_limit, ..Default::default() },
            podgc: super::PodGcConfig { quarantine: Duration::from_secs(self.podgc_quarantine_secs), ..Default::default() },
            controllers: Default::default(),
            devices: match &self.devices {
                Some(path) => super::dra_driver::DevicesConfig::from_file(path)?,
                None => super::dra_driver::DevicesConfig::per_node(self.devices_per_node),
            },
            data_dir: self.data_dir.clone(),
            kubernetes_version: self.kubernetes_version,
            authorization: self.authorization_mode,
            event_ttl: self.event_ttl,
            tls: true,
            ca: None,
            max_requests_inflight: self.max_requests_inflight,
            max_mutating_requests_inflight: self.max_mutating_requests_inflight,
        })
    }
}

/// Run `berth cluster` until Ctrl-C (or SIGTERM).
pub async fn run(args: ClusterArgs) -> Result<(), Error> {
    let cluster = LocalCluster::start(args.config()?).await?;
    if let Some(p) = &args.write_kubeconfig {
        cluster.write_kubeconfig(p)?;
        eprintln!("kubeconfig written to {}", p.display());
    }
    let nodes = cluster.store().count(super::resources::NODES);
    eprintln!("local cluster listening on {} with {nodes} nodes (Ctrl-C to stop)", cluster.url());
    wait_for_signal().await;
    eprintln!("shutting down");
    cluster.shutdown().await;
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ttl_reads_go_durations() {
        assert_eq!(go_duration("1h0m0s"), Ok(Duration::from_secs(3600)));
        assert_eq!(go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(go_duration("90s"), Ok(Duration::from_secs(90)));
        assert!(go_duration("soon").is_err());
        assert!(go_duration("5").is_err());
        assert!(go_duration("").is_err());
    }
}
