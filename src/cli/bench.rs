//! `berth bench`: in-process scheduling benchmarks (figures, not tests).

use std::fmt::Write as _;

use clap::Args;

use super::out::print;
use super::Output;
use berth_lab::bench::{self, Figures};

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
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Do not reuse work across pods of one scheduling signature
    /// (opportunistic batching), to measure what it saves.
    #[arg(long)]
    pub no_reuse: bool,
    /// End to end instead: the local cluster and the daemon as two processes
    /// over loopback HTTP, this one creating pods (workloads SchedulingBasic,
    /// TopologySpreading, Unschedulable, default nodes 5000; and, when asked
    /// by --workload, SchedulingWithResourceClaimTemplate, default nodes 500).
    #[arg(long)]
    pub e2e: bool,
    /// Shadow mode's throughput instead: verdicts per second judging a
    /// binder's bindings on a cluster of --nodes nodes (default 5000), in
    /// process.
    #[arg(long, conflicts_with = "e2e")]
    pub shadow: bool,
    /// With --e2e: pods measured; with --shadow: bindings judged.
    #[arg(long, default_value_t = 10_000)]
    pub pods: usize,
    /// With --e2e: concurrent clients creating pods.
    #[arg(long, default_value_t = 16)]
    pub creators: usize,
    /// With --e2e: the daemon's clientConnection.qps (default: the chart's).
    #[arg(long, default_value_t = CHART_QPS)]
    pub qps: f64,
    /// With --e2e: the daemon's clientConnection.burst (default: the chart's).
    #[arg(long, default_value_t = CHART_BURST)]
    pub burst: i64,
    /// With --e2e: run against the API server of this kubeconfig (a real
    /// control plane from tools/kube/up, a test cluster) instead of a local
    /// cluster; the pods go to a namespace of their own, deleted afterwards.
    #[arg(long, requires = "e2e")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// With --e2e --kubeconfig: create the --nodes nodes as KWOK nodes
    /// (3 zones, 4 CPUs, 32Gi, 110 pods each; deleted afterwards).
    #[arg(long, requires = "kubeconfig")]
    pub kwok_nodes: bool,
    /// With --e2e --kubeconfig: create the --nodes nodes Ready at create,
    /// for a control plane with no KWOK (tools/kube/up --static-nodes):
    /// nothing heartbeats them, as scheduler_perf's nodes.
    #[arg(long, requires = "kubeconfig", conflicts_with = "kwok_nodes")]
    pub static_nodes: bool,
    /// With --e2e: the scheduler the pods name. Another scheduler's name
    /// (kube-scheduler's default-scheduler) measures that scheduler: berth's
    /// daemon is not started.
    #[arg(long, requires = "e2e")]
    pub scheduler_name: Option<String>,
    /// With --e2e --scheduler-name: that scheduler's process id, for its CPU
    /// seconds and peak RSS (from /proc).
    #[arg(long, requires = "scheduler_name")]
    pub scheduler_pid: Option<u32>,
    /// With --e2e: no scheduler; each creating client binds its pod itself
    /// (round-robin over the nodes): the API server's ceiling with no
    /// scheduling work.
    #[arg(long, requires = "e2e", conflicts_with = "scheduler_name")]
    pub bind_directly: bool,
}

/// The chart's default clientConnection.qps (charts/berth/values.yaml).
pub const CHART_QPS: f64 = 10_000.0;
/// The chart's default clientConnection.burst (charts/berth/values.yaml).
pub const CHART_BURST: i64 = 20_000;

/// Runs the benchmarks, printing each figure as it is measured.
pub fn run(a: &BenchArgs) -> anyhow::Result<()> {
    if a.e2e {
        return run_e2e(a);
    }
    if a.shadow {
        return run_shadow(a);
    }
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
        print(&format!("{:<28} {:>6} {:>5} {:>6} {:>10} {:>8} {:>8} {:>8}", "WORKLOAD", "NODES", "PCT", "PODS", "PODS/S", "P50 ms", "P99 ms", "RSS MB"))?;
    }
    for &n in &sizes {
        for w in &workloads {
            for &p in &percentages {
                let f = bench::run(w, n, p, a.no_reuse).ok_or_else(|| anyhow::anyhow!("workload {w} could not be set up"))?;
                print(&line(&f, a.output)?)?;
            }
        }
    }
    Ok(())
}

fn run_e2e(a: &BenchArgs) -> anyhow::Result<()> {
    let workloads: Vec<&str> = match &a.workload {
        Some(w) => vec![w.as_str()],
        None => vec!["SchedulingBasic", "TopologySpreading", "Unschedulable"],
    };
    if let Some(w) = workloads.iter().find(|w| !berth_lab::bench_e2e::WORKLOADS.contains(w)) {
        anyhow::bail!("--workload: {w} does not run end to end (with --e2e: {})", berth_lab::bench_e2e::WORKLOADS.join(", "));
    }
    let nodes = match a.nodes.as_slice() {
        [] if workloads == [berth_lab::bench_e2e::DRA_WORKLOAD] => 500,
        [] => 5000,
        [n] if (1..=100_000).contains(n) => *n,
        _ => anyhow::bail!("--nodes: with --e2e, give one size between 1 and 100000"),
    };
    if a.pods == 0 || a.pods > 1_000_000 {
        anyhow::bail!("--pods: must be between 1 and 1000000");
    }
    let exe = std::env::current_exe()?;
    // The load generator gets one worker thread: it shares the machine with
    // the two processes it measures, and a second worker bought it nothing
    // but cross-thread wake-ups (3–10% of their throughput on two cores).
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    if a.output == Output::Table {
        print(&format!(
            "{:<20} {:<18} {:>6} {:>7} {:>7} {:>10} {:>9} {:>9} {:>12} {:>10} {:>10}  BACKEND",
            "E2E WORKLOAD", "SCHEDULER", "NODES", "PODS", "UNSCHED", "PODS/S", "P50 ms", "P99 ms", "CPU s/1000", "SCHED MB", "CLUSTER MB"
        ))?;
    }
    for w in workloads {
        let o = berth_lab::bench_e2e::E2eOptions {
            workload: w.into(),
            nodes,
            pods: a.pods,
            creators: a.creators,
            qps: a.qps,
            burst: a.burst,
            exe: exe.clone(),
            kubeconfig: a.kubeconfig.clone(),
            scheduler_name: a.scheduler_name.clone(),
            kwok_nodes: a.kwok_nodes,
            static_nodes: a.static_nodes,
            scheduler_pid: a.scheduler_pid,
            bind_directly: a.bind_directly,
        };
        let f = rt.block_on(berth_lab::bench_e2e::run(&o))?;
        match a.output {
            Output::Json => print(&serde_json::to_string(&f)?)?,
            Output::Table => print(&format!(
                "{:<20} {:<18} {:>6} {:>7} {:>7} {:>10.0} {:>9.1} {:>9.1} {:>12.2} {:>10.1} {:>10.1}  {}",
                f.workload,
                f.scheduler,
                f.nodes,
                f.pods,
                f.unschedulable_pods,
                f.pods_per_second,
                f.p50_ms,
                f.p99_ms,
                f.scheduler_cpu_s_per_1000_pods,
                f.scheduler_peak_rss_mb,
                f.cluster_peak_rss_mb,
                f.backend
            ))?,
        }
    }
    Ok(())
}

fn run_shadow(a: &BenchArgs) -> anyhow::Result<()> {
    let sizes = if a.nodes.is_empty() { vec![5000] } else { a.nodes.clone() };
    if sizes.iter().any(|n| *n == 0 || *n > 100_000) {
        anyhow::bail!("--nodes: must be between 1 and 100000");
    }
    if a.pods == 0 || a.pods > 1_000_000 {
        anyhow::bail!("--pods: must be between 1 and 1000000");
    }
    if a.output == Output::Table {
        print(&format!("{:<20} {:>6} {:>8} {:>11} {:>8} {:>8} {:>8}  VERDICTS", "SHADOW", "NODES", "BINDINGS", "VERDICTS/S", "P50 ms", "P99 ms", "RSS MB"))?;
    }
    for n in sizes {
        let f = berth_lab::bench_shadow::run(n, a.pods).ok_or_else(|| anyhow::anyhow!("the shadow benchmark's cluster could not be set up"))?;
        match a.output {
            Output::Json => print(&serde_json::to_string(&f)?)?,
            Output::Table => {
                let counts: Vec<String> = f.counts.iter().map(|(v, c)| format!("{}={c}", v.as_str())).collect();
                print(&format!("{:<20} {:>6} {:>8} {:>11.0} {:>8.3} {:>8.3} {:>8.1}  {} (explained {})", "judge (round-robin)", f.nodes, f.verdicts, f.verdicts_per_second, f.p50_ms, f.p99_ms, f.peak_rss_mb, counts.join(" "), f.detailed))?;
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
            if let (Some(first), Some(behind)) = (f.first_pod_ms, f.behind_ms) {
                let _ = write!(s, "  first pod {first:.1} ms, the pod behind it bound after {behind:.1} ms");
            }
            s
        }
    })
}
