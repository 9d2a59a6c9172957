//! `berth bench`: in-process scheduling benchmarks (figures, not tests).

use std::fmt::Write as _;

use clap::Args;

use super::Output;
use crate::bench::{self, Figures};

/// `berth bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// One workload (default: all).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(bench::WORKLOADS))]
    pub workload: Option<String>,
    /// Cluster sizes (repeatable; default 500 and 5000).
    #[arg(long = "nodes")]
    pub nodes: Vec<usize>,
    /// percentageOfNodesToScore (default: both the adaptive default and 100).
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..=100))]
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Runs the benchmarks, printing each figure as it is measured.
pub fn run(a: &BenchArgs) -> anyhow::Result<()> {
    let workloads: Vec<&str> = match &a.workload {
        Some(w) => vec![w.as_str()],
        None => bench::WORKLOADS.to_vec(),
    };
    let sizes = if a.nodes.is_empty() { vec![500, 5000] } else { a.nodes.clone() };
    if sizes.iter().any(|n| *n == 0 || *n > 100_000) {
        anyhow::bail!("--nodes: must be between 1 and 100000");
    }
    let percentages = match a.percentage_of_nodes_to_score {
        Some(p) => vec![p],
        None => vec![0, 100],
    };
    if a.output == Output::Table {
        println!("{:<28} {:>6} {:>5} {:>6} {:>10} {:>8} {:>8} {:>8}", "WORKLOAD", "NODES", "PCT", "PODS", "PODS/S", "P50 ms", "P99 ms", "RSS MB");
    }
    for &n in &sizes {
        for w in &workloads {
            for &p in &percentages {
                let f = bench::run(w, n, p).ok_or_else(|| anyhow::anyhow!("workload {w} could not be set up"))?;
                println!("{}", line(&f, a.output)?);
            }
        }
    }
    Ok(())
}

fn line(f: &Figures, o: Output) -> anyhow::Result<String> {
    Ok(match o {
        Output::Json => serde_json::to_string(f)?,
        Output::Table => {
            let mut s = String::new();
            let pct = if f.percentage == 0 { "auto".to_string() } else { f.percentage.to_string() };
            let _ = write!(s, "{:<28} {:>6} {:>5} {:>6} {:>10.0} {:>8.3} {:>8.3} {:>8.1}", f.workload, f.nodes, pct, f.pods, f.pods_per_second, f.p50_ms, f.p99_ms, f.peak_rss_mb);
            s
        }
    })
}
