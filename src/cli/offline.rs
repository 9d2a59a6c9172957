//! `berth explain` and `berth simulate` over a YAML dump of a cluster or
//! over its API server (`--kubeconfig`: lists, no watches), and `berth dump`,
//! which writes the dump they read.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;

use super::Output;
use berth_daemon::live::{self, Anonymizer};
use berth_engine::config::Config;
use berth_engine::offline::{Cluster, Engine, Explain, Simulation};

/// Where the cluster comes from: a dump or an API server (one of them).
#[derive(Debug, Args)]
#[group(id = "source", multiple = false)]
pub struct Source {
    /// Multi-document YAML dump of the cluster (`berth dump` writes one):
    /// Nodes, Pods, Namespaces, PriorityClasses, PodDisruptionBudgets,
    /// workloads, storage and DRA objects.
    #[arg(long, required_unless_present = "kubeconfig")]
    pub cluster: Option<String>,
    /// Read the cluster from this kubeconfig's API server instead of a dump
    /// (one paginated list per kind, no watches; needs "list" on every kind).
    #[arg(long)]
    pub kubeconfig: Option<String>,
}

/// Arguments shared by the offline commands.
#[derive(Debug, Args)]
pub struct Common {
    /// The cluster.
    #[command(flatten)]
    pub source: Source,
    /// The kubeconfig context to use with --kubeconfig (its current context by default).
    #[arg(long, requires = "kubeconfig")]
    pub context: Option<String>,
    /// Objects per list page with --kubeconfig.
    #[arg(long, default_value_t = live::DEFAULT_PAGE)]
    pub chunk_size: u32,
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
    /// The pod, as namespace/name (or name, in "default"). A pending pod of
    /// another scheduler, or a bound pod, is explained as if it were
    /// pending for the first profile (a note on stderr says so).
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

/// `berth dump`.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// kubeconfig of the cluster to dump.
    #[arg(long)]
    pub kubeconfig: String,
    /// The kubeconfig context (its current context by default).
    #[arg(long)]
    pub context: Option<String>,
    /// The file to write: whole, or not at all (it is written beside and
    /// renamed at the end).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Hash names, namespaces, uids, label keys and values, annotations,
    /// images and every other identifying value with a random per-dump key,
    /// keeping every scheduling decision (references are rewritten alike;
    /// quantities, taint effects and well-known label keys stay readable).
    #[arg(long)]
    pub anonymize: bool,
    /// With --anonymize: write the mapping (original -> anonymized, JSON) to
    /// this file, to read results on the dump back. Keep it private.
    #[arg(long, requires = "anonymize")]
    pub anonymize_map: Option<PathBuf>,
    /// Objects per list page.
    #[arg(long, default_value_t = live::DEFAULT_PAGE)]
    pub chunk_size: u32,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// A kube client for `path` (and `context`).
async fn client(path: &str, context: Option<&str>) -> anyhow::Result<kube::Client> {
    Ok(berth_daemon::connect::client(Some(path), context).await?)
}

/// Loads the cluster from the dump or, with --kubeconfig, from the API server.
fn load_cluster(c: &Common) -> anyhow::Result<Cluster> {
    match (&c.source.kubeconfig, &c.source.cluster) {
        (Some(kc), _) => {
            let listing = runtime()?.block_on(async {
                let client = client(kc, c.context.as_deref()).await?;
                anyhow::Ok(live::list_for_scheduler(&client, c.chunk_size).await?)
            })?;
            for n in &listing.notes {
                eprintln!("note: {n}");
            }
            Ok(Cluster::from_documents(listing.objects, &format!("the API server of {kc}"))?)
        }
        (None, Some(path)) => Ok(Cluster::load(path)?),
        (None, None) => anyhow::bail!("one of --cluster or --kubeconfig is required"),
    }
}

fn config(c: &Common) -> anyhow::Result<Config> {
    Ok(match &c.config {
        Some(p) => Config::load(p)?,
        None => Config::default_config(),
    })
}

fn engine(c: &Common, config: &Config, cluster: Cluster) -> Engine {
    for w in &cluster.warnings {
        eprintln!("warning: {w}");
    }
    Engine::new(config, cluster, c.seed)
}

/// Makes `key` explainable when it is not pending for one of `profiles`: a
/// pending pod of another scheduler, or a bound pod (taken off its node),
/// is given to the first profile, as a pod without schedulerName is. A pod
/// that is pending for a profile, or not in the cluster, is left alone.
/// Returns a note for stderr when the pod was adopted.
pub fn adopt(cluster: &mut Cluster, key: &str, profiles: &[String]) -> Option<String> {
    let first = profiles.first()?;
    if let Some(p) = cluster.pending.iter().find(|p| p.key() == key) {
        if cluster.unnamed_scheduler.contains(&p.uid) || profiles.contains(&p.scheduler_name) {
            return None;
        }
        cluster.unnamed_scheduler.insert(p.uid.clone());
        return Some(format!("pod {key} is pending for scheduler {:?}, which is not a profile here: explained with profile {first:?}", p.scheduler_name));
    }
    let p = cluster.snapshot.bound_pods().find(|p| p.key() == key && !p.terminated && !p.terminating).cloned()?;
    let node = p.node_name.clone().unwrap_or_default();
    cluster.snapshot.remove_pod(&p.uid);
    let mut q = (*p).clone();
    q.node_name = None;
    q.nominated_node = None;
    if !profiles.contains(&q.scheduler_name) {
        cluster.unnamed_scheduler.insert(q.uid.clone());
    }
    let profile = if profiles.contains(&q.scheduler_name) { q.scheduler_name.clone() } else { first.clone() };
    let note = format!("pod {key} is bound to {node} (scheduler {:?}): explained as if it were pending, off {node}, with profile {profile:?}", p.scheduler_name);
    cluster.pending.push(Arc::new(q));
    Some(note)
}

/// Runs `berth explain`.
pub fn explain(a: &ExplainArgs) -> anyhow::Result<String> {
    let config = config(&a.common)?;
    let mut cluster = load_cluster(&a.common)?;
    let key = if a.pod.contains('/') { a.pod.clone() } else { format!("default/{}", a.pod) };
    if let Some(note) = adopt(&mut cluster, &key, &config.profile_names()) {
        eprintln!("note: {note}");
    }
    let e = engine(&a.common, &config, cluster);
    let x = e.explain(&key)?;
    Ok(match a.common.output {
        Output::Json => serde_json::to_string_pretty(&x)?,
        Output::Table => explain_table(&x),
    })
}

/// Runs `berth simulate`.
pub fn simulate(a: &SimulateArgs) -> anyhow::Result<String> {
    let config = config(&a.common)?;
    let cluster = load_cluster(&a.common)?;
    let mut e = engine(&a.common, &config, cluster);
    let s = e.simulate();
    Ok(match a.common.output {
        Output::Json => serde_json::to_string_pretty(&s)?,
        Output::Table => simulate_table(&s),
    })
}

/// Runs `berth dump`: a summary goes to stderr.
pub fn dump(a: &DumpArgs) -> anyhow::Result<()> {
    let mut anonymizer = if a.anonymize { Some(Anonymizer::random()?) } else { None };
    let summary = runtime()?.block_on(async {
        let client = client(&a.kubeconfig, a.context.as_deref()).await?;
        anyhow::Ok(live::dump(&client, &a.output, a.chunk_size, anonymizer.as_mut()).await?)
    })?;
    for n in &summary.notes {
        eprintln!("note: {n}");
    }
    if let (Some(path), Some(an)) = (&a.anonymize_map, &anonymizer) {
        let text = serde_json::to_string_pretty(an.mapping())?;
        write_private(path, text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    }
    let total: usize = summary.counts.iter().map(|(_, n)| n).sum();
    let kinds: Vec<String> = summary.counts.iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{n} {k}")).collect();
    eprintln!("wrote {total} objects to {}{}: {}", a.output.display(), if a.anonymize { " (anonymized)" } else { "" }, kinds.join(", "));
    Ok(())
}

/// Writes a file only its owner can read (the anonymization map names everything).
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        o.mode(0o600);
    }
    o.open(path)?.write_all(bytes)
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
            if let Some(d) = &x.detail {
                let _ = writeln!(s, "Detail: {d}");
            }
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
