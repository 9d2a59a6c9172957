use clap::{Parser, Subcommand};

/// berth: a Kubernetes scheduler.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an in-memory local cluster (API server + simulated kubelets).
    Cluster(berth::cluster::cli::ClusterArgs),
    /// Benchmark the local cluster.
    ClusterBench(berth::cluster::bench::BenchArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_writer(std::io::stderr).init();
    match Cli::parse().command {
        Command::Cluster(args) => berth::cluster::cli::run(args).await?,
        Command::ClusterBench(args) => berth::cluster::bench::run(args).await?,
    }
    Ok(())
}
