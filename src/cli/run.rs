//! `berth run`: the scheduler daemon.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use berth_engine::config::Config;
use berth_daemon::admin::AdminOptions;
use berth_daemon::{self as daemon, shutdown_signal, Options};

use super::logging::{self, Format as LogFormat};

/// `berth run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// KubeSchedulerConfiguration file (v1), required: it must name berth's
    /// profiles (schedulerName), so that berth never takes pods meant for
    /// another scheduler by default.
    #[arg(long, env = "BERTH_CONFIG")]
    pub config: Option<String>,
    /// kubeconfig to reach the API server (default: the configuration's
    /// clientConnection.kubeconfig, else $KUBECONFIG, else ~/.kube/config,
    /// else the in-cluster service account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<String>,
    /// The kubeconfig context to use (its current context by default).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Address of the secure (HTTPS) port: /metrics, /healthz, /livez,
    /// /readyz, /debug/explain, /debug/shadow.
    #[arg(long, default_value = "0.0.0.0:10259")]
    pub bind_address: SocketAddr,
    /// PEM certificate (chain) of the secure port; a self-signed certificate when absent.
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key matching --tls-cert-file.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// Paths served without authorization (a trailing `*` matches a prefix).
    #[arg(long, value_delimiter = ',', default_value = "/healthz,/readyz,/livez")]
    pub authorization_always_allow_paths: Vec<String>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Identity in the leader-election Lease (default: $POD_NAME or berth-<pid>).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Shadow mode: write nothing (no binds, status, events or Lease) and
    /// judge the bindings another scheduler makes for the configured
    /// profiles' pods (usually `default-scheduler`): verdicts on /metrics
    /// (berth_shadow_decisions_total) and /debug/shadow.
    #[arg(long, env = "BERTH_SHADOW")]
    pub shadow: bool,
}

/// Runs the daemon until SIGTERM or Ctrl-C (a second one aborts).
pub async fn run(a: &RunArgs) -> anyhow::Result<()> {
    logging::init(a.log_format, logging::DAEMON);
    let Some(path) = a.config.as_deref() else {
        anyhow::bail!(
            "no --config given: berth run needs a KubeSchedulerConfiguration file (apiVersion: kubescheduler.config.k8s.io/v1, kind: KubeSchedulerConfiguration) whose profiles name the schedulerName berth serves; without one it would take every default-scheduler pod and race the cluster's own scheduler"
        );
    };
    let config = Config::load_for_scheduler(path)?;
    let kubeconfig = a.kubeconfig.clone().or_else(|| config.raw.client_connection.kubeconfig.clone()).filter(|s| !s.is_empty());
    let conn = daemon::connect::connect(kubeconfig.as_deref(), a.context.as_deref()).await?;
    tracing::info!(server = %conn.server, from = %conn.origin, context = conn.context.as_deref().unwrap_or(""), "API server");
    let client = conn.client;
    let admin = AdminOptions {
        tls_cert_file: a.tls_cert_file.clone(),
        tls_private_key_file: a.tls_private_key_file.clone(),
        always_allow_paths: a.authorization_always_allow_paths.iter().map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect(),
        ..AdminOptions::default()
    };
    let opts = Options { bind_address: a.bind_address, identity: a.identity.clone().unwrap_or_else(|| Options::default().identity), admin, shadow: a.shadow, ..Options::default() };
    let handle = daemon::start(client, &config, opts).await?;
    if a.shadow {
        tracing::info!(admin = %handle.admin_addr, profiles = ?config.profile_names(), "berth is running in shadow mode: judging other schedulers' bindings, writing nothing");
    } else {
        tracing::info!(admin = %handle.admin_addr, profiles = ?config.profile_names(), "berth is running");
    }
    shutdown_signal().await;
    tracing::info!("shutting down: no new pods; finishing in-flight binds; releasing the lease");
    tokio::select! {
        _ = handle.shutdown() => {}
        _ = shutdown_signal() => {
            tracing::warn!("second signal: aborting");
            anyhow::bail!("aborted by a second signal");
        }
    }
    Ok(())
}
