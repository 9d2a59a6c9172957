//! berth's entry point: parse the command line and run it.

mod cli;

use clap::Parser;

#[cfg(feature = "local")]
use crate::cli::{bench, demo, differential};
use crate::cli::{offline, run, Cli, Command};

/// jemalloc for every berth process (the daemon, the local cluster, the
/// offline commands); see the `jemalloc` feature in Cargo.toml.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let out = match &cli.command {
        Command::Explain(a) => offline::explain(a)?,
        Command::Simulate(a) => offline::simulate(a)?,
        Command::Dump(a) => return offline::dump(a),
        Command::Run(a) => return tokio::runtime::Runtime::new()?.block_on(run::run(a)),
        #[cfg(feature = "local")]
        Command::Bench(a) => return bench::run(a),
        #[cfg(feature = "local")]
        Command::Demo(a) => return demo::run(a),
        #[cfg(feature = "local")]
        Command::Differential(a) => return differential::run(a),
        #[cfg(feature = "local")]
        Command::Cluster(a) => {
            run::init_logging(run::LogFormat::Text);
            return Ok(tokio::runtime::Runtime::new()?.block_on(berth_cluster::cli::run(a.clone()))?);
        }
        #[cfg(feature = "local")]
        Command::ClusterBench(a) => {
            run::init_logging(run::LogFormat::Text);
            return Ok(tokio::runtime::Runtime::new()?.block_on(berth_lab::cluster_bench::run(a.clone()))?);
        }
    };
    println!("{out}");
    Ok(())
}
