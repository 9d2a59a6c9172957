//! `berth differential`: berth's decisions against another scheduler's on
//! the same API server, pod by pod (see `berth_lab::differential`; the
//! driver that starts a real control plane with kube-scheduler is
//! `tools/kube/differential`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::Output;
use berth_lab::differential::{self, Options};

/// `berth differential`.
#[derive(Debug, Args)]
pub struct DifferentialArgs {
    /// The API server whose scheduler is judged (a real control plane from
    /// `tools/kube/up DIR --kube-scheduler`); its nodes are created as KWOK
    /// nodes and deleted afterwards.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// The seed of the generated cluster and workload.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Nodes.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(3..=5000))]
    pub nodes: u64,
    /// Pods, created one at a time.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub pods: u64,
    /// The judged scheduler: the pods' schedulerName, and the name of the
    /// berth profile (upstream's defaults) that judges it.
    #[arg(long, default_value = "default-scheduler")]
    pub scheduler_name: String,
    /// Seconds one pod may wait for the judged scheduler's decision.
    #[arg(long, default_value_t = 30)]
    pub per_pod_timeout: u64,
    /// The reverse direction: berth decides each pod first (it is created
    /// behind a scheduling gate), then the judged scheduler, its node
    /// selection narrowed to berth's node, accepts or refuses it.
    #[arg(long)]
    pub reverse: bool,
    /// Leave the seed's namespace and nodes in place afterwards, to look
    /// into a disagreement (kubectl, `berth explain --kubeconfig`).
    #[arg(long)]
    pub keep: bool,
    /// Output format: a line per seed and each disagreement (table), or the whole report (json).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Runs one seed; its report as text.
pub fn run(a: &DifferentialArgs) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    let o = Options {
        kubeconfig: a.kubeconfig.clone(),
        seed: a.seed,
        nodes: usize::try_from(a.nodes)?,
        pods: usize::try_from(a.pods)?,
        scheduler_name: a.scheduler_name.clone(),
        per_pod_timeout: Duration::from_secs(a.per_pod_timeout),
        keep: a.keep,
    };
    let rt = tokio::runtime::Runtime::new()?;
    if a.reverse {
        let r = rt.block_on(differential::run_reverse(&o))?;
        return Ok(match a.output {
            Output::Json => serde_json::to_string(&r)?,
            Output::Table => {
                let mut out = r.line();
                for d in &r.disagreements {
                    write!(
                        out,
                        "\n  {}: berth {}; {} {}",
                        d.pod, d.berth, a.scheduler_name, d.judged
                    )?;
                }
                out
            }
        });
    }
    let r = rt.block_on(differential::run(&o))?;
    let mut out = String::new();
    match a.output {
        Output::Json => out.push_str(&serde_json::to_string(&r)?),
        Output::Table => {
            out.push_str(&r.line());
            for d in &r.disagreements {
                write!(
                    out,
                    "\n  {} {}: bound to {} (total {:?}), berth picks {} (total {:?}); bound node's scores {}; berth's {}",
                    d.verdict.as_str(),
                    d.pod,
                    d.bound_node,
                    d.bound.total,
                    d.berth_node.as_deref().unwrap_or("none"),
                    d.berth.as_ref().and_then(|b| b.total),
                    serde_json::to_string(&d.bound.scores)?,
                    serde_json::to_string(&d.berth.as_ref().map(|b| &b.scores))?,
                )?;
            }
            for p in r.pending.iter().filter(|p| !p.same_message) {
                write!(out, "\n  pending {}: {} says {:?}; berth says {:?}", p.pod, a.scheduler_name, p.message, p.berth_message.as_deref().unwrap_or("it would place it"))?;
            }
        }
    }
    Ok(out)
}
