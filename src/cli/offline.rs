//! `berth explain` and `berth simulate` over a YAML dump of a cluster or
//! over its API server (`--kubeconfig`: lists, no watches), and `berth dump`,
//! which writes the dump they read.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;

use super::Output;
use berth_daemon::connect::Connection;
use berth_daemon::live::{self, Anonymizer};
use berth_engine::config::Config;
use berth_engine::offline::{Cluster, Engine, Explain, Simulation, SkipReason, Skipped};

/// How to reach an API server, as kubectl finds it: `--kubeconfig`, else
/// `$KUBECONFIG`, else `~/.kube/config`, else the in-cluster service account.
#[derive(Debug, Clone, Args)]
pub struct Connect {
    /// The kubeconfig of the cluster (default: $KUBECONFIG, else
    /// ~/.kube/config, else the in-cluster service account, as kubectl).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<String>,
    /// The kubeconfig context to use (its current context by default).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// Arguments shared by `explain` and `simulate`.
#[derive(Debug, Args)]
pub struct Common {
    /// A multi-document YAML dump of the cluster to read instead of an API
    /// server (`-` reads standard input; `berth dump` writes one): Nodes,
    /// Pods, Namespaces, PriorityClasses, PodDisruptionBudgets, workloads,
    /// storage and DRA objects. Without it, the cluster of the kubeconfig is
    /// read (one paginated list per kind, no watches; needs "list" on every kind).
    #[arg(long, short = 'f', value_name = "FILE", conflicts_with_all = ["kubeconfig", "context"])]
    pub cluster: Option<String>,
    /// The API server, when no --cluster is given.
    #[command(flatten)]
    pub connect: Connect,
    /// Objects per list page when reading an API server.
    #[arg(long, default_value_t = live::DEFAULT_PAGE)]
    pub chunk_size: u32,
    /// A KubeSchedulerConfiguration (v1); without it, upstream's defaults,
    /// whose one profile is default-scheduler (pending pods of other
    /// schedulerNames are skipped, and named on stderr).
    #[arg(long, value_name = "FILE")]
    pub config: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Seed for breaking ties between equally scored nodes (decimal or 0x hex).
    #[arg(long, default_value = "0x5eed", value_parser = parse_seed)]
    pub seed: u64,
}

/// A seed in decimal or `0x` hexadecimal.
pub fn parse_seed(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s:?} is not a number (decimal or 0x hex): {e}"))
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
    #[arg(value_name = "POD", required_unless_present = "pod_flag")]
    pub pod: Option<String>,
    /// The pod, as a flag (the same as the positional POD).
    #[arg(long = "pod", id = "pod_flag", value_name = "POD", conflicts_with = "pod")]
    pub pod_flag: Option<String>,
}

/// `berth simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Common arguments.
    #[command(flatten)]
    pub common: Common,
}

/// The formats `berth dump` writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DumpFormat {
    /// Multi-document YAML, the format explain and simulate read.
    #[default]
    Yaml,
}

/// `berth dump`.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// The cluster to dump.
    #[command(flatten)]
    pub connect: Connect,
    /// The file to write, whole or not at all (it is written beside and
    /// renamed at the end); `-` or absent: standard output.
    #[arg(long, short = 'f', value_name = "FILE", default_value = "-")]
    pub file: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = DumpFormat::Yaml)]
    pub output: DumpFormat,
    /// Hash names, namespaces, uids, label keys and values, annotations,
    /// images and every other identifying value with a random per-dump key,
    /// keeping every scheduling decision (references are rewritten alike;
    /// quantities, taint effects and well-known label keys stay readable).
    #[arg(long)]
    pub anonymize: bool,
    /// With --anonymize: write the mapping (original -> anonymized, JSON) to
    /// this file, to read results on the dump back. Keep it private.
    #[arg(long, requires = "anonymize", value_name = "FILE")]
    pub anonymize_map: Option<PathBuf>,
    /// Objects per list page.
    #[arg(long, default_value_t = live::DEFAULT_PAGE)]
    pub chunk_size: u32,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// A connection as kubectl would make it.
async fn connect(c: &Connect) -> anyhow::Result<Connection> {
    Ok(berth_daemon::connect::connect(c.kubeconfig.as_deref(), c.context.as_deref()).await?)
}

/// A listing error, with the server and the kubeconfig it came from when
/// the server did not answer (once, with the innermost cause).
fn live_error(e: live::Error, conn: &Connection) -> anyhow::Error {
    match e {
        live::Error::Unreachable { resource, error } => {
            anyhow::anyhow!("cannot list {resource}: the API server did not answer: {}: {}", conn.describe(), innermost(&error))
        }
        other => other.into(),
    }
}

/// The innermost cause of `e` (kube's connection errors nest four deep,
/// each repeating the next): "Connection refused (os error 111)".
pub fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// Loads the cluster from the dump (`-`: standard input) or from the API server.
fn load_cluster(c: &Common) -> anyhow::Result<Cluster> {
    match c.cluster.as_deref() {
        Some("-") => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text).context("reading the dump from standard input")?;
            Ok(Cluster::parse(&text, "<stdin>")?)
        }
        Some(path) => Ok(Cluster::load(path)?),
        None => {
            let listing = runtime()?.block_on(async {
                let conn = connect(&c.connect).await?;
                let listing = live::list_for_scheduler(&conn.client, c.chunk_size).await.map_err(|e| live_error(e, &conn))?;
                anyhow::Ok((listing, conn.describe()))
            })?;
            let (listing, source) = listing;
            for n in &listing.notes {
                tracing::debug!("{n}");
            }
            Ok(Cluster::from_documents(listing.objects, &format!("the API server {source}"))?)
        }
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
    let e = Engine::new(config, cluster, c.seed);
    note_skipped(c, config, &e.skipped);
    e
}

/// One note per reason on stderr for the pods left out: another
/// scheduler's (naming it, and what --config would take them), being
/// deleted, finished.
fn note_skipped(c: &Common, config: &Config, skipped: &[Skipped]) {
    let profiles = config.profile_names();
    let mut by_reason: Vec<(&SkipReason, Vec<String>)> = Vec::new();
    for s in skipped {
        match by_reason.iter_mut().find(|(r, _)| *r == &s.reason) {
            Some((_, pods)) => pods.push(s.pod.clone()),
            None => by_reason.push((&s.reason, vec![s.pod.clone()])),
        }
    }
    for (reason, pods) in by_reason {
        let n = pods.len();
        let pl = if n == 1 { "pod" } else { "pods" };
        let why = match reason {
            SkipReason::OtherScheduler(name) => {
                let have = match &c.config {
                    Some(path) => format!("--config {path} has profiles {}", profiles.join(", ")),
                    None => format!("no --config: the default configuration's one profile is {}", profiles.join(", ")),
                };
                format!("schedulerName {name:?} names no profile ({have}); give --config with a profile named {name:?} to include them")
            }
            other => other.to_string(),
        };
        eprintln!("note: {n} unbound {pl} skipped: {why}: {}", berth_engine::offline::name_list(&pods));
    }
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
    let pod = a.pod.as_deref().or(a.pod_flag.as_deref()).unwrap_or_default();
    let key = if pod.contains('/') { pod.to_string() } else { format!("default/{pod}") };
    if let Some(note) = adopt(&mut cluster, &key, &config.profile_names()) {
        eprintln!("note: {note}");
    }
    for w in &cluster.warnings {
        eprintln!("warning: {w}");
    }
    // Only the pod asked about matters here: no notes about the others.
    let e = Engine::new(&config, cluster, a.common.seed);
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

/// Runs `berth dump`: the dump to the file (or standard output), a summary to stderr.
pub fn dump(a: &DumpArgs) -> anyhow::Result<()> {
    let DumpFormat::Yaml = a.output;
    let mut anonymizer = if a.anonymize { Some(Anonymizer::random()?) } else { None };
    let to_stdout = a.file == "-";
    let summary = runtime()?.block_on(async {
        let conn = connect(&a.connect).await?;
        let r = if to_stdout {
            let mut o = std::io::stdout().lock();
            let r = live::dump_to(&conn.client, live::DumpTo::Writer { name: "standard output", writer: &mut o }, a.chunk_size, anonymizer.as_mut()).await;
            match r {
                Err(live::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => return Err(anyhow::Error::new(super::out::Closed)),
                r => r,
            }
        } else {
            live::dump(&conn.client, Path::new(&a.file), a.chunk_size, anonymizer.as_mut()).await
        };
        anyhow::Ok(r.map_err(|e| live_error(e, &conn))?)
    })?;
    for n in &summary.notes {
        tracing::debug!("{n}");
    }
    if let (Some(path), Some(an)) = (&a.anonymize_map, &anonymizer) {
        let text = serde_json::to_string_pretty(an.mapping())?;
        write_private(path, text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    }
    let total: usize = summary.counts.iter().map(|(_, n)| n).sum();
    let kinds: Vec<String> = summary.counts.iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{n} {k}")).collect();
    let dest = if to_stdout { "standard output".to_string() } else { a.file.clone() };
    eprintln!("wrote {total} objects to {dest}{}: {}", if a.anonymize { " (anonymized)" } else { "" }, kinds.join(", "));
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
    if !sim.skipped.is_empty() {
        let _ = writeln!(s, "{} unbound pods skipped (named on stderr)", sim.skipped.len());
    }
    s
}
