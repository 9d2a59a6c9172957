//! berth's entry point: parse the command line and run it.

use clap::Parser;

use berth::cli::{offline, Cli, Command};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let out = match &cli.command {
        Command::Explain(a) => offline::explain(a)?,
        Command::Simulate(a) => offline::simulate(a)?,
        Command::Bench(a) => {
            berth::cli::bench::run(a)?;
            return Ok(());
        }
    };
    println!("{out}");
    Ok(())
}
