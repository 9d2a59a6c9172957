//! `berth explain` and `berth simulate` over YAML dumps of a cluster.

use std::fmt::Write as _;

use clap::Args;

use super::Output;
use berth_engine::config::Config;
use berth_engine::offline::{Cluster, Engine, Explain, Simulation};

/// Arguments shared by the offline commands.
#[derive(Debug, Args)]
pub struct Common {
    /// Multi-document YAML of Nodes, Pods, PriorityClasses, PodDisruptionBudgets and Namespaces.
    #[arg(long)]
    pub cluster: String,
    /// A KubeSchedulerConfiguration (v1); upstream defaults when absent.
    #[arg(long)]
    pub config: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Seed for breaking ties between equally scored nodes.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
}

/// `berth explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Common arguments.
    #[command(flatten)]
    pub common: Common,
    /// The pending pod, as namespace/name (or name, in "default").
    #[arg(long)]
    pub pod: String,
}

/// `berth simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Common arguments.
    #[command(flatten)]
    pub common: Common,
}

fn engine(c: &Common) -> anyhow::Result<Engine> {
    let config = match &c.config {
        Some(p) => Config::load(p)?,
        None => Config::default_config(),
    };
    let cluster = Cluster::load(&c.cluster)?;
    for w in &cluster.warnings {
        eprintln!("warning: {w}");
    }
    Ok(Engine::new(&config, cluster, c.seed))
}

/// Runs `berth explain`.
pub fn explain(a: &ExplainArgs) -> anyhow::Result<String> {
    let e = engine(&a.common)?;
    let key = if a.pod.contains('/') { a.pod.clone() } else { format!("default/{}", a.pod) };
    let x = e.explain(&key)?;
    Ok(match a.common.output {
        Output::Json => serde_json::to_string_pretty(&x)?,
        Output::Table => explain_table(&x),
    })
}

/// Runs `berth simulate`.
pub fn simulate(a: &SimulateArgs) -> anyhow::Result<String> {
    let mut e = engine(&a.common)?;
    let s = e.simulate();
    Ok(match a.common.output {
        Output::Json => serde_json::to_string_pretty(&s)?,
        Output::Table => simulate_table(&s),
    })
}

/// explain as a table for people.
pub fn explain_table(x: &Explain) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Pod {} (profile {})", x.pod, x.profile);
    let mut plugins: Vec<&String> = x.weights.keys().collect();
    plugins.sort();
    let w = x.nodes.iter().map(|n| n.name.len()).max().unwrap_or(4).max(4);
    let _ = write!(s, "\n{:<w$}  {:<8}", "NODE", "FEASIBLE");
    for p in &plugins {
        let weight = x.weights.get(*p).and_then(|v| v.as_i64()).unwrap_or(1);
        let _ = write!(s, "  {p}(x{weight})");
    }
    let _ = writeln!(s, "  TOTAL");
    for n in &x.nodes {
        let _ = write!(s, "{:<w$}  {:<8}", n.name, if n.feasible { "yes" } else { "no" });
        if n.feasible {
            for p in &plugins {
                let v = n.scores.as_ref().and_then(|m| m.get(*p)).and_then(|v| v.as_i64()).unwrap_or(0);
                let width = p.len() + 4 + x.weights.get(*p).and_then(|v| v.as_i64()).unwrap_or(1).to_string().len();
                let _ = write!(s, "  {v:>width$}");
            }
            let _ = writeln!(s, "  {}", n.total.unwrap_or(0));
        } else {
            let why: Vec<String> = n.reasons.iter().map(|r| format!("{}: {}", r.plugin, r.reason)).collect();
            let _ = writeln!(s, "  {}", why.join("; "));
        }
    }
    let _ = writeln!(s);
    match &x.selected {
        Some(n) => {
            let _ = writeln!(s, "Selected: {n}");
        }
        None => {
            let _ = writeln!(s, "Unschedulable: {}", x.message.clone().unwrap_or_default());
        }
    }
    if let Some(p) = &x.preemption {
        let _ = writeln!(s, "Preemption: nominate {} after evicting {}", p.nominated_node, if p.victims.is_empty() { "nothing".into() } else { p.victims.join(", ") });
    }
    s
}

/// simulate as a table for people.
pub fn simulate_table(sim: &Simulation) -> String {
    let mut s = String::new();
    let w = sim.placements.iter().map(|p| p.pod.len()).max().unwrap_or(3).max(3);
    let _ = writeln!(s, "{:<w$}  {:<20}  DETAILS", "POD", "NODE");
    for p in &sim.placements {
        let mut details = Vec::new();
        if let Some(n) = &p.nominated_node {
            details.push(format!("nominated {n}"));
        }
        if !p.victims.is_empty() {
            details.push(format!("preempted {}", p.victims.join(", ")));
        }
        if let Some(m) = &p.message
            && p.node.is_none() {
                details.push(m.clone());
            }
        let _ = writeln!(s, "{:<w$}  {:<20}  {}", p.pod, p.node.as_deref().unwrap_or("<pending>"), details.join("; "));
    }
    let placed = sim.placements.iter().filter(|p| p.node.is_some()).count();
    let _ = writeln!(s, "\n{placed}/{} pods placed", sim.placements.len());
    s
}
