//! berth's entry point: parse the command line and run it.

mod cli;

use std::process::ExitCode;

use clap::Parser as _;

#[cfg(feature = "local")]
use crate::cli::{bench, demo, differential};
use crate::cli::{logging, offline, out, run, Cli, Command};

/// jemalloc for every berth process (the daemon, the local cluster, the
/// offline commands); see the `jemalloc` feature in Cargo.toml.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version go to stdout through the same door as every
        // other output (a closed pipe is 141, not a silent 0).
        Err(e) if matches!(e.kind(), clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion) => {
            return match out::print(&e.render().to_string()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if out::is_closed(&e) => ExitCode::from(out::CLOSED_STATUS),
                Err(_) => ExitCode::FAILURE,
            };
        }
        Err(e) => e.exit(),
    };
    match dispatch(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output has gone (`| head`): nothing to say, as kubectl says nothing.
        Err(e) if out::is_closed(&e) => ExitCode::from(out::CLOSED_STATUS),
        Err(e) => {
            // A closed stderr leaves nothing to tell; the status still says it failed.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "Error: {}", out::report(&e));
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: &Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::Explain(a) => {
            logging::init(logging::Format::Text, logging::OFFLINE);
            out::print(&offline::explain(a)?)
        }
        Command::Simulate(a) => {
            logging::init(logging::Format::Text, logging::OFFLINE);
            out::print(&offline::simulate(a)?)
        }
        Command::Dump(a) => {
            logging::init(logging::Format::Text, logging::OFFLINE);
            offline::dump(a)
        }
        Command::Run(a) => tokio::runtime::Runtime::new()?.block_on(run::run(a)),
        #[cfg(feature = "local")]
        Command::Bench(a) => bench::run(a),
        #[cfg(feature = "local")]
        // The demo prints its summary itself (before it keeps running): a closed pipe there is ours too.
        Command::Demo(a) => demo::run(a).map_err(out::broken_pipe_is_closed),
        #[cfg(feature = "local")]
        Command::Differential(a) => {
            logging::init(logging::Format::Text, logging::OFFLINE);
            out::print(&differential::run(a)?)
        }
        #[cfg(feature = "local")]
        Command::Cluster(a) => {
            logging::init(logging::Format::Text, logging::DAEMON);
            Ok(tokio::runtime::Runtime::new()?.block_on(berth_cluster::cli::run(a.clone()))?)
        }
        #[cfg(feature = "local")]
        Command::ClusterBench(a) => {
            logging::init(logging::Format::Text, logging::DAEMON);
            let report = tokio::runtime::Runtime::new()?.block_on(berth_lab::cluster_bench::run_bench(a))?;
            out::print(&report.to_string())
        }
    }
}
