//! `berth demo`: a local cluster, the scheduler daemon against it, and a
//! workload played through the API, with a summary at the end.

use std::net::SocketAddr;

use clap::Args;

/// `berth demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Number of simulated nodes, spread over 3 zones (the third zone is tainted dedicated=batch:NoSchedule).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(6..=3000))]
    pub nodes: u32,
    /// Seed for the scheduler's tie-breaking (decimal or 0x hex).
    #[arg(long, default_value = "0x5eed", value_parser = super::offline::parse_seed)]
    pub seed: u64,
    /// Leave the cluster and the scheduler running after the summary (until Ctrl-C),
    /// printing the kubeconfig path and the metrics URL.
    #[arg(long)]
    pub keep_running: bool,
    /// Address of the local cluster's API server (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Address of the scheduler's metrics/health listener (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub bind_address: SocketAddr,
}

/// Runs `berth demo`; an error (non-zero exit) when a placement violates a constraint.
pub fn run(a: &DemoArgs) -> anyhow::Result<()> {
    super::logging::init(super::logging::Format::Text, super::logging::OFFLINE);
    tokio::runtime::Runtime::new()?.block_on(berth_lab::demo::run(berth_lab::demo::DemoOptions {
        nodes: a.nodes as usize,
        seed: a.seed,
        keep_running: a.keep_running,
        listen: a.listen,
        bind_address: a.bind_address,
    }))
}
