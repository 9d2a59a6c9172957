//! berth's entry point: parse the command line and run it.

use clap::Parser;

use berth::cli::{bench, demo, offline, run, Cli, Command};

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
        Command::Bench(a) => return bench::run(a),
        Command::Demo(a) => return demo::run(a),
        Command::Run(a) => return tokio::runtime::Runtime::new()?.block_on(run::run(a)),
        Command::Cluster(a) => {
            run::init_logging(run::LogFormat::Text);
            return Ok(tokio::runtime::Runtime::new()?.block_on(berth::cluster::cli::run(a.clone()))?);
        }
        Command::ClusterBench(a) => {
            run::init_logging(run::LogFormat::Text);
            return Ok(tokio::runtime::Runtime::new()?.block_on(berth::cluster::bench::run(a.clone()))?);
        }
    };
    println!("{out}");
    Ok(())
}
