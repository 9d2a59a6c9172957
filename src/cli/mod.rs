//! The command line: `berth explain`, `berth simulate`, and the other front doors.

#[cfg(feature = "local")]
pub mod bench;
#[cfg(feature = "local")]
pub mod demo;
#[cfg(feature = "local")]
pub mod differential;
pub mod logging;
pub mod offline;
pub mod out;
pub mod run;

use clap::{Parser, Subcommand};

/// berth: a Kubernetes scheduler that decides as kube-scheduler does, faster, and explains why.
#[derive(Debug, Parser)]
#[command(name = "berth", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Explain why a pending pod goes where it goes, or stays pending: every node, every plugin.
    Explain(offline::ExplainArgs),
    /// Show where berth would place every pending pod of a cluster dump (or of a live cluster).
    Simulate(offline::SimulateArgs),
    /// Write a cluster's objects as the dump explain and simulate read (optionally anonymized).
    Dump(offline::DumpArgs),
    /// Run the scheduler against a Kubernetes API server (in-cluster by default).
    Run(run::RunArgs),
    /// Run a local Kubernetes-API-compatible cluster (in-memory API server and simulated kubelets).
    #[cfg(feature = "local")]
    Cluster(berth_cluster::cli::ClusterArgs),
    /// Benchmark the local cluster's API server (creates, bindings, watch fan-out).
    #[cfg(feature = "local")]
    ClusterBench(berth_lab::cluster_bench::BenchArgs),
    /// Run the in-process scheduling benchmarks (upstream scheduler_perf workloads) and print figures.
    #[cfg(feature = "local")]
    Bench(bench::BenchArgs),
    /// Run a local cluster, the scheduler against it and a workload (spread, affinity, taints, preemption), then summarize.
    #[cfg(feature = "local")]
    Demo(demo::DemoArgs),
    /// Judge another scheduler's decisions on a live API server, pod by pod, on a seeded workload.
    #[cfg(feature = "local")]
    Differential(differential::DifferentialArgs),
}

/// Output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A table for people.
    #[default]
    Table,
    /// JSON as in the conformance format.
    Json,
}
