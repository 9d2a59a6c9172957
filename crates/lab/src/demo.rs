//! `berth demo`: one process runs a local cluster (three zones, one of them
//! tainted for batch work), the scheduler daemon against it over HTTP exactly
//! as in a cluster (profile `berth`, leader election with a Lease), and plays
//! a workload through the API, as the cluster's controllers run it:
//! Deployments with spread constraints (hard and soft) and node affinity, a
//! tolerating batch Job, a burst of high-priority Deployment pods that
//! preempts low-priority filler pods, a pod that fits nowhere, whose explain
//! is printed, a gang of pods (PodGroup), a StatefulSet with claims and an
//! accelerator wave (GPUs through dynamic resource allocation: templates,
//! a CEL selector, matchAttribute, an extended resource a DeviceClass
//! backs). The summary is checked independently of the scheduler: any
//! placement that breaks a hard constraint (capacity, taints, required node
//! affinity, a DoNotSchedule spread skew, preemption of an equal or higher
//! priority pod, a device given twice, a bound pod whose claims are not
//! allocated on its node and reserved for it) or a pod left pending that
//! should have been placed makes the demo fail.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::sync::Notify;

use berth_cluster::auth::{AuthConfig, StaticToken};
use berth_cluster::{ClusterConfig, LocalCluster, zone_name};
use berth_engine::config::Config;
use berth_daemon::{self as daemon, Options};
use berth_daemon::admin::https_get;
use berth_model::quantity::{parse_milli, parse_value};
use crate::bench::percentile;

mod accelerators;

pub use accelerators::GPUS_PER_NODE;
use accelerators::accelerator_wave;

/// The namespace the workload runs in.
pub const NAMESPACE: &str = "demo";
/// The profile (schedulerName) the demo's pods ask for.
pub const SCHEDULER: &str = "berth";
const TAINT_KEY: &str = "dedicated";
const TAINT_VALUE: &str = "batch";
const ZONE_KEY: &str = "topology.kubernetes.io/zone";
const HOST_KEY: &str = "kubernetes.io/hostname";
const SSD_KEY: &str = "disktype";
const GIANT: &str = "giant";
const ZONES: usize = 3;
const TAINTED_ZONE: usize = 2;
/// How long one wave may take before its unbound pods count as failures.
const WAVE_TIMEOUT: Duration = Duration::from_secs(30);

/// The scheduler configuration the demo runs with: one profile named `berth`,
/// leader election on a Lease, and a client budget sized for a local API server.
pub const CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceNamespace: kube-system
  resourceName: berth
clientConnection:
  qps: 1000
  burst: 2000
profiles:
  - schedulerName: berth
";

/// What `berth demo` was asked to do.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Number of nodes (spread over three zones).
    pub nodes: usize,
    /// The scheduler's tie-breaking seed.
    pub seed: u64,
    /// Stay up after the summary until Ctrl-C.
    pub keep_running: bool,
    /// The local API server's address.
    pub listen: SocketAddr,
    /// The scheduler's admin (metrics/health/explain) address.
    pub bind_address: SocketAddr,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            nodes: 60,
            seed: 0x5eed,
            keep_running: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            bind_address: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }
}

// ---------------------------------------------------------------- workload

/// A topology spread constraint of a group.
#[derive(Debug, Clone)]
struct Spread {
    key: &'static str,
    max_skew: i64,
    hard: bool,
    honor_taints: bool,
}

impl Spread {
    fn describe(&self) -> String {
        let key = if self.key == ZONE_KEY { "zone" } else { "hostname" };
        format!(
            "{key} {} maxSkew {}{}",
            if self.hard { "DoNotSchedule" } else { "ScheduleAnyway" },
            self.max_skew,
            if self.honor_taints { ", nodeTaintsPolicy Honor" } else { "" }
        )
    }
}

/// A Deployment-like group of identical pods.
#[derive(Debug, Clone)]
struct Group {
    name: &'static str,
    count: usize,
    cpu_m: i64,
    mem_mi: i64,
    class: &'static str,
    spread: Vec<Spread>,
    /// Required node affinity: key In values.
    affinity: Option<(&'static str, Vec<String>)>,
    tolerate: bool,
    wave: usize,
    /// Fits nowhere by design.
    expect_pending: bool,
}

const PRIORITY_CLASSES: [(&str, i32, &str); 3] = [
    ("demo-low", 100, "Preemptible filler work."),
    ("demo-standard", 1000, "Ordinary services."),
    ("demo-high", 100_000, "Urgent work that may preempt lower-priority pods."),
];

fn class_value(class: &str) -> i32 {
    PRIORITY_CLASSES.iter().find(|c| c.0 == class).map(|c| c.1).unwrap_or(0)
}

const WAVES: [&str; 4] = ["services + batch", "low-priority filler", "high-priority burst", "a pod too big for any node"];

/// The cluster's shape: which nodes are tainted, which carry SSDs.
#[derive(Debug, Clone)]
struct Shape {
    nodes: usize,
    untainted: usize,
    tainted: usize,
    ssd: Vec<String>,
}

impl Shape {
    fn new(nodes: usize) -> Shape {
        let tainted = (0..nodes).filter(|i| i % ZONES == TAINTED_ZONE).count();
        let ssd = (0..nodes).filter(|i| i % ZONES != TAINTED_ZONE && (i / ZONES).is_multiple_of(3)).map(|i| format!("node-{i}")).collect();
        Shape { nodes, untainted: nodes - tainted, tainted, ssd }
    }

    fn groups(&self) -> Vec<Group> {
        let z = self.untainted;
        let zone = |hard| Spread { key: ZONE_KEY, max_skew: 1, hard, honor_taints: true };
        let host = |hard, honor_taints| Spread { key: HOST_KEY, max_skew: 1, hard, honor_taints };
        let g = |name, count, cpu_m, class, wave| Group { name, count, cpu_m, mem_mi: 256, class, spread: vec![], affinity: None, tolerate: false, wave, expect_pending: false };
        vec![
            // Hard zone spread; tainted nodes do not count as a domain (nodeTaintsPolicy Honor).
            Group { spread: vec![zone(true), host(false, true)], ..g("web", z * 3 / 2, 500, "demo-standard", 0) },
            Group { spread: vec![zone(false)], ..g("api", z, 500, "demo-standard", 0) },
            // Only on SSD nodes, at most one more on any of them than on another.
            Group { spread: vec![host(true, false)], affinity: Some((SSD_KEY, vec!["ssd".into()])), ..g("cache", self.ssd.len() * 3 / 2, 250, "demo-standard", 0) },
            // Tolerates the taint and asks for the tainted zone.
            Group {
                spread: vec![host(false, false)],
                affinity: Some((ZONE_KEY, vec![zone_name(TAINTED_ZONE)])),
                tolerate: true,
                ..g("batch", self.tainted * 3, 1000, "demo-standard", 0)
            },
            g("filler", z * 7 / 4, 1000, "demo-low", 1),
            g("critical", z / 2, 2000, "demo-high", 2),
            Group { expect_pending: true, ..g(GIANT, 1, 6000, "demo-standard", 3) },
        ]
    }
}

fn pod_name(g: &Group, i: usize) -> String {
    if g.count == 1 { g.name.to_string() } else { format!("{}-{i}", g.name) }
}

fn pod_json(g: &Group, i: usize) -> Value {
    let mut spec = json!({
        "schedulerName": SCHEDULER,
        "priorityClassName": g.class,
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "app",
            "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": format!("{}m", g.cpu_m), "memory": format!("{}Mi", g.mem_mi)}},
        }],
    });
    if !g.spread.is_empty() {
        spec["topologySpreadConstraints"] = g
            .spread
            .iter()
            .map(|s| {
                let mut c = json!({
                    "maxSkew": s.max_skew,
                    "topologyKey": s.key,
                    "whenUnsatisfiable": if s.hard { "DoNotSchedule" } else { "ScheduleAnyway" },
                    "labelSelector": {"matchLabels": {"app": g.name}},
                });
                if s.honor_taints {
                    c["nodeTaintsPolicy"] = json!("Honor");
                }
                c
            })
            .collect();
    }
    if let Some((key, values)) = &g.affinity {
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": values}]}],
        }}});
    }
    if g.tolerate {
        spec["tolerations"] = json!([{"key": TAINT_KEY, "operator": "Equal", "value": TAINT_VALUE, "effect": "NoSchedule"}]);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(g, i), "namespace": NAMESPACE, "labels": {"app": g.name}},
        "spec": spec,
    })
}

/// How a group's pods are made: by a Deployment, by a Job, or created one by
/// one (the preemption victims, which a controller would recreate, and the
/// pod that fits nowhere, whose explain is asked by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Maker {
    Deployment,
    Job,
    Pods,
}

fn maker(g: &Group) -> Maker {
    match g.name {
        "batch" => Maker::Job,
        "filler" | GIANT => Maker::Pods,
        _ => Maker::Deployment,
    }
}

/// The Deployment or Job that makes a group's pods (its template is the
/// group's pod; Job pods run until the demo ends).
fn workload_json(g: &Group) -> Value {
    let pod = pod_json(g, 0);
    let labels = json!({"app": g.name});
    let meta = json!({"name": g.name, "namespace": NAMESPACE, "labels": labels});
    match maker(g) {
        Maker::Job => {
            let mut spec = pod["spec"].clone();
            spec["restartPolicy"] = json!("Never");
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {"completions": g.count, "parallelism": g.count, "template": {
                    "metadata": {"labels": labels, "annotations": {berth_cluster::COMPLETE_AFTER: "1h"}}, "spec": spec}}})
        }
        _ => json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": g.count, "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod["spec"]}}}),
    }
}

// ---------------------------------------------------------------- tracking

/// One pod as seen by the demo's watch.
#[derive(Debug, Default, Clone)]
struct Rec {
    group: String,
    created: Option<Instant>,
    bound: Option<Instant>,
    node: Option<String>,
    priority: i32,
    attempted: bool,
    preempted: bool,
    deleted: bool,
}

#[derive(Default)]
struct Tracker {
    pods: HashMap<String, Rec>,
}

struct Shared {
    tracker: Mutex<Tracker>,
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Tracker> {
        match self.tracker.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn observe(&self, pod: &Pod, deleted: bool) {
        let Some(name) = pod.metadata.name.clone() else { return };
        let mut t = self.lock();
        let r = t.pods.entry(name).or_default();
        if r.group.is_empty() {
            r.group = pod.metadata.labels.as_ref().and_then(|l| l.get("app")).cloned().unwrap_or_default();
        }
        // A controller's pod is first seen on creation.
        r.created.get_or_insert_with(Instant::now);
        let spec = pod.spec.as_ref();
        r.priority = spec.and_then(|s| s.priority).unwrap_or(r.priority);
        if let Some(n) = spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty())
            && r.node.is_none()
        {
            r.node = Some(n);
            r.bound = Some(Instant::now());
        }
        for c in pod.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten() {
            if c.type_ == "PodScheduled" && c.status == "False" {
                r.attempted = true;
            }
            if c.type_ == "DisruptionTarget" && c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler") {
                r.preempted = true;
            }
        }
        r.deleted |= deleted;
        drop(t);
        self.changed.notify_waiters();
    }

    async fn wait(&self, timeout: Duration, done: impl Fn(&Tracker) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            if done(&self.lock()) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let _ = tokio::time::timeout(left.min(Duration::from_millis(200)), notified).await;
        }
    }
}

// ---------------------------------------------------------------- run

/// Runs the demo and prints its summary; an error when a check fails.
pub async fn run(opts: DemoOptions) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let shape = Shape::new(opts.nodes);
    let groups = shape.groups();
    let expected_bound: usize = groups.iter().filter(|g| !g.expect_pending).map(|g| g.count).sum();

    let pb = if console_is_tty() { ProgressBar::new(expected_bound as u64) } else { ProgressBar::with_draw_target(Some(expected_bound as u64), ProgressDrawTarget::hidden()) };
    pb.set_style(
        ProgressStyle::with_template("{spinner:.green} [{elapsed_precise}] {bar:40.cyan/blue} {pos:>4}/{len} pods bound  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.enable_steady_tick(Duration::from_millis(100));
    // Each step is a line above the bar; the bar keeps the step's short name.
    let say = |pb: &ProgressBar, m: String| {
        pb.set_message(m.split(':').next().unwrap_or_default().to_string());
        pb.suspend(|| eprintln!("{m}"));
    };

    say(&pb, format!("starting a local cluster: {} nodes in {ZONES} zones, {GPUS_PER_NODE} simulated GPUs per node (DRA)", shape.nodes));
    // The admin port authenticates through the cluster: a token for the demo's own requests (and yours, with --keep-running).
    let token = format!("{:032x}", rand::random::<u128>());
    let auth = AuthConfig { tokens: vec![StaticToken::new(&token, "berth-demo-admin", &["system:masters"])], ..AuthConfig::default() };
    let devices = berth_cluster::dra_driver::DevicesConfig::per_node(GPUS_PER_NODE);
    let cluster = LocalCluster::start(ClusterConfig { listen: opts.listen, nodes: shape.nodes, zones: ZONES, auth, devices, ..Default::default() }).await?;
    let client = cluster.client()?;
    prepare_cluster(&client, &shape).await?;

    say(&pb, "starting the scheduler (profile berth, leader election on Lease kube-system/berth)".into());
    let config = Config::parse(CONFIG).context("the demo's scheduler configuration")?;
    let identity = format!("berth-demo-{}", std::process::id());
    let handle = daemon::start(client.clone(), &config, Options { bind_address: opts.bind_address, identity: identity.clone(), seed: opts.seed, ..Options::default() }).await?;
    let admin = handle.admin_addr;
    let cert = handle.admin.cert_der.clone();
    let mut ready = handle.ready.clone();
    let mut leading = handle.leading.clone();
    let up = tokio::time::timeout(Duration::from_secs(30), async {
        let _ = ready.wait_for(|r| *r).await;
        let _ = leading.wait_for(|l| *l).await;
    })
    .await;
    if up.is_err() {
        bail!("the scheduler did not become ready and leader within 30s (ready={}, leading={})", *handle.ready.borrow(), *handle.leading.borrow());
    }

    let shared = Arc::new(Shared { tracker: Mutex::new(Tracker::default()), changed: Notify::new() });
    let watch_task = spawn_watch(client.clone(), shared.clone(), pb.clone());
    let start_workload = Instant::now();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut late: Vec<String> = Vec::new();
    let mut explain: Option<Result<Value, String>> = None;

    for (wave, title) in WAVES.iter().enumerate() {
        let in_wave: Vec<&Group> = groups.iter().filter(|g| g.wave == wave).collect();
        let n: usize = in_wave.iter().map(|g| g.count).sum();
        let made: Vec<String> = in_wave.iter().map(|g| format!("{} {}", g.name, match maker(g) { Maker::Deployment => "(Deployment)", Maker::Job => "(Job)", Maker::Pods => "(pods)" })).collect();
        say(&pb, format!("wave {}/{}: {title}: {n} pods ({})", wave + 1, WAVES.len(), made.join(", ")));
        for g in in_wave.iter().filter(|g| maker(g) != Maker::Pods) {
            create_workload(&client, g).await?;
        }
        // Interleave the hand-made groups of a wave, as concurrent rollouts would.
        let max = in_wave.iter().filter(|g| maker(g) == Maker::Pods).map(|g| g.count).max().unwrap_or(0);
        let mut batch = Vec::new();
        for i in 0..max {
            for g in in_wave.iter().filter(|g| maker(g) == Maker::Pods) {
                if i < g.count {
                    batch.push((pod_name(g, i), g.name, pod_json(g, i)));
                }
            }
        }
        create_pods(&pods, &shared, batch).await?;
        // Each group's pods, by the `app` label the watch records: all bound (or, by design, attempted).
        let pending_by_design = in_wave.iter().any(|g| g.expect_pending);
        let wave_done = |t: &Tracker, ok: &dyn Fn(&Rec) -> bool| in_wave.iter().all(|g| t.pods.values().filter(|r| r.group == g.name && !r.deleted && ok(r)).count() >= g.count);
        let ok = if pending_by_design {
            shared.wait(Duration::from_secs(15), |t| wave_done(t, &|r| r.attempted || r.node.is_some())).await
        } else {
            shared.wait(WAVE_TIMEOUT, |t| wave_done(t, &|r| r.node.is_some())).await
        };
        if !ok && !pending_by_design {
            let t = shared.lock();
            late.extend(t.pods.iter().filter(|(_, r)| in_wave.iter().any(|g| g.name == r.group) && !r.deleted && r.node.is_none()).map(|(n, _)| n.clone()));
        }
        if pending_by_design {
            let path = format!("/debug/explain?pod={NAMESPACE}/{GIANT}");
            explain = Some(match https_get(admin, &path, Some(&token), Some(&cert)).await {
                Ok((200, body)) => serde_json::from_str(&body).map_err(|e| format!("explain answered with something that is not JSON: {e}")),
                Ok((code, body)) => Err(format!("explain answered {code}: {}", body.trim())),
                Err(e) => Err(format!("explain failed: {e:#}")),
            });
        }
    }
    say(&pb, gang_wave(&client).await);
    say(&pb, stateful_wave(&client).await);
    let (accelerator_line, gpu_violations) = accelerator_wave(&client, shape.nodes).await;
    say(&pb, accelerator_line);
    // Let preemption victims finish terminating.
    say(&pb, "letting preemption victims terminate".into());
    shared.wait(Duration::from_secs(10), |t| t.pods.values().all(|r| !r.preempted || r.deleted)).await;
    let workload_secs = start_workload.elapsed().as_secs_f64();
    pb.finish_and_clear();

    // The final state, read fresh from the API.
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items;
    let final_pods = pods.list(&ListParams::default()).await?.items;
    let events = Api::<Event>::namespaced(client.clone(), NAMESPACE).list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    let lease = Api::<Lease>::namespaced(client.clone(), &config.raw.leader_election.resource_namespace).get_opt(&config.raw.leader_election.resource_name).await.ok().flatten();
    let m = &handle.metrics;
    let attempts = |r: &str| m.schedule_attempts.with_label_values(&[r, SCHEDULER]).get();
    let metrics_line = format!(
        "{} attempts ({} scheduled, {} unschedulable, {} error), {} preemption attempts",
        attempts("scheduled") + attempts("unschedulable") + attempts("error"),
        attempts("scheduled"),
        attempts("unschedulable"),
        attempts("error"),
        m.preemption_attempts.get()
    );
    let tracker = std::mem::take(&mut *shared.lock());
    let report = Report {
        shape: &shape,
        groups: &groups,
        nodes: &nodes,
        pods: &final_pods,
        events: &events,
        tracker: &tracker,
        late: &late,
        device_violations: &gpu_violations,
        explain: explain.as_ref(),
        admin,
        api: cluster.url(),
        leader: lease.and_then(|l| l.spec.and_then(|s| s.holder_identity)).unwrap_or_else(|| "<none>".into()),
        metrics_line,
        workload_secs,
    };
    let (text, failures) = report.render();
    // Written, not println!ed: a reader that has gone (`berth demo | head`)
    // is an error the CLI ends quietly on, not a panic.
    use std::io::Write as _;
    let mut summary = format!("{text}\nfinished in {:.1}s\n", t0.elapsed().as_secs_f64());
    let keep = if opts.keep_running {
        let dir = std::env::temp_dir().join(format!("berth-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let kubeconfig: PathBuf = dir.join("kubeconfig");
        cluster.write_kubeconfig(&kubeconfig)?;
        summary += &format!(
            "\nThe cluster and the scheduler keep running (Ctrl-C to stop):\nkubeconfig: {}\napi:        {}\nmetrics:    https://{admin}/metrics\nexplain:    https://{admin}/debug/explain?pod={NAMESPACE}/{GIANT}\ntoken:      {token}\ntry:        curl -k -H \"Authorization: Bearer {token}\" https://{admin}/metrics\ntry:        KUBECONFIG={} kubectl get pods -n {NAMESPACE} -o wide\n",
            kubeconfig.display(),
            cluster.url(),
            kubeconfig.display()
        );
        Some(dir)
    } else {
        None
    };
    {
        let mut o = std::io::stdout().lock();
        o.write_all(summary.as_bytes()).and_then(|()| o.flush())?;
    }
    if let Some(dir) = keep {
        berth_daemon::shutdown_signal().await;
        eprintln!("shutting down");
        let _ = std::fs::remove_dir_all(&dir);
    }

    watch_task.abort();
    let _ = tokio::time::timeout(Duration::from_secs(5), handle.shutdown()).await;
    cluster.shutdown().await;
    if failures > 0 {
        bail!("{failures} check(s) failed: see the summary above");
    }
    Ok(())
}

fn console_is_tty() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal()
}

/// Taints the third zone, labels the SSD nodes, creates the namespace and the PriorityClasses.
async fn prepare_cluster(client: &kube::Client, shape: &Shape) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 0..shape.nodes {
        let name = format!("node-{i}");
        let patch = if i % ZONES == TAINTED_ZONE {
            json!({"spec": {"taints": [{"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "NoSchedule"}]}})
        } else if shape.ssd.contains(&name) {
            json!({"metadata": {"labels": {SSD_KEY: "ssd"}}})
        } else {
            continue;
        };
        nodes.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.with_context(|| format!("patching node {name}"))?;
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.context("creating the demo namespace")?;
    let pcs: Api<PriorityClass> = Api::all(client.clone());
    for (name, value, description) in PRIORITY_CLASSES {
        let pc: PriorityClass = serde_json::from_value(json!({"metadata": {"name": name}, "value": value, "description": description}))?;
        pcs.create(&PostParams::default(), &pc).await.with_context(|| format!("creating PriorityClass {name}"))?;
    }
    Ok(())
}

/// The gang wave: a PodGroup (scheduling.k8s.io/v1beta1, minCount 8, one
/// zone) and its 8 pods in a namespace of their own; returns the line to show.
async fn gang_wave(client: &kube::Client) -> String {
    const NS: &str = "demo-gangs";
    const SIZE: usize = 8;
    let run = async {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))?;
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.context("creating the gang namespace")?;
        let ar = berth_daemon::watch::group_api_resource(berth_model::pod::GroupApi::V1beta1);
        let pg: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": NS},
            "spec": {"schedulingPolicy": {"gang": {"minCount": SIZE}}, "schedulingConstraints": {"topology": [{"key": ZONE_KEY}]}}
        }))?;
        let groups: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), NS, &ar);
        groups.create(&PostParams::default(), &pg).await.context("creating PodGroup train (does the cluster serve scheduling.k8s.io/v1beta1?)")?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        for i in 0..SIZE {
            let p: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("train-{i}")},
                "spec": {"schedulerName": SCHEDULER, "schedulingGroup": {"podGroupName": "train"},
                         "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}]}
            }))?;
            pods.create(&PostParams::default(), &p).await.with_context(|| format!("creating pod {NS}/train-{i}"))?;
        }
        let nodes: HashMap<String, String> = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items.iter().map(|n| (n.metadata.name.clone().unwrap_or_default(), node_labels(n).get(ZONE_KEY).cloned().unwrap_or_default())).collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let list = pods.list(&ListParams::default()).await?.items;
            let zones: BTreeSet<String> = list.iter().filter_map(node_of).filter_map(|n| nodes.get(n).cloned()).collect();
            let bound = list.iter().filter(|p| node_of(p).is_some()).count();
            if bound == SIZE || Instant::now() > deadline {
                let zones: Vec<String> = zones.into_iter().collect();
                return anyhow::Ok(format!("gang wave: {bound}/{SIZE} pods of PodGroup {NS}/train (minCount {SIZE}, one zone) bound together in {}", if zones.is_empty() { "no zone".into() } else { zones.join(", ") }));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    match run.await {
        Ok(line) => line,
        Err(e) => format!("gang wave skipped: {e:#}"),
    }
}

/// The stateful wave: a StatefulSet of six pods (`db-0`.. in order), each
/// with its own claim `data-db-<i>` from the set's volumeClaimTemplate on the default
/// StorageClass (WaitForFirstConsumer: berth picks the node, writes the
/// claim's selected node, the provisioner creates the volume in that zone),
/// and one pod whose claim can only be met by a pre-existing PV in one zone.
/// Returns the line to show.
async fn stateful_wave(client: &kube::Client) -> String {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    const NS: &str = "demo-stateful";
    const SIZE: usize = 6;
    let archive_zone = zone_name(1);
    let run = async {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))?;
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.context("creating the stateful namespace")?;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let claim = |name: &str, class: Option<&str>| -> anyhow::Result<PersistentVolumeClaim> {
            let mut spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
            if let Some(c) = class {
                spec["storageClassName"] = json!(c);
            }
            Ok(serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))?)
        };
        let pod = |name: &str, claim: &str| -> anyhow::Result<Pod> {
            Ok(serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"app": "db"}},
                "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "db", "image": "pause", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}],
                         "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}
            }))?)
        };
        // A statically provisioned zonal volume, and a class only it serves.
        let sc: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "demo-archive"}, "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"
        }))?;
        Api::<StorageClass>::all(client.clone()).create(&PostParams::default(), &sc).await.context("creating StorageClass demo-archive")?;
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "demo-archive-pv"},
            "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "demo-archive",
                     "persistentVolumeReclaimPolicy": "Retain", "csi": {"driver": "csi.berth.dev", "volumeHandle": "demo-archive"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE_KEY, "operator": "In", "values": [archive_zone]}]}]}}}
        }))?;
        Api::<PersistentVolume>::all(client.clone()).create(&PostParams::default(), &pv).await.context("creating PersistentVolume demo-archive-pv")?;
        // StatefulSet db: pods db-0.. in order, each with its claim data-db-<i> from the template.
        let set: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "db"},
            "spec": {"replicas": SIZE, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": pod("db", "data")?.spec},
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": claim("data", None)?.spec}]}
        }))?;
        Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(client.clone(), NS).create(&PostParams::default(), &set).await.context("creating StatefulSet db")?;
        claims.create(&PostParams::default(), &claim("archive", Some("demo-archive"))?).await.context("creating claim archive")?;
        pods.create(&PostParams::default(), &pod("archive", "archive")?).await.context("creating pod archive")?;
        let zones: HashMap<String, String> = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items.iter().map(|n| (n.metadata.name.clone().unwrap_or_default(), node_labels(n).get(ZONE_KEY).cloned().unwrap_or_default())).collect();
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let list = pods.list(&ListParams::default()).await?.items;
            let claim_list = claims.list(&ListParams::default()).await?.items;
            let pv_list = pvs.list(&ListParams::default()).await?.items;
            // A pod is placed well when its claim is Bound to a PV whose node affinity admits the pod's node.
            let mut good = 0;
            let mut archive_node = None;
            for p in &list {
                let (Some(node), Some(name)) = (node_of(p), p.metadata.name.as_deref()) else { continue };
                let claim_name = if name == "archive" { "archive".to_string() } else { format!("data-{name}") };
                let Some(volume) = claim_list.iter().find(|c| c.metadata.name.as_deref() == Some(&claim_name)).and_then(|c| c.spec.as_ref()?.volume_name.clone()) else { continue };
                let Some(pv) = pv_list.iter().find(|v| v.metadata.name.as_deref() == Some(&volume)) else { continue };
                let zone = zones.get(node).cloned().unwrap_or_default();
                let admits = pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()?.required.as_ref()).is_none_or(|r| {
                    r.node_selector_terms.iter().any(|t| {
                        t.match_expressions.iter().flatten().all(|e| {
                            let have = if e.key == ZONE_KEY { zone.as_str() } else if e.key == HOST_KEY { node } else { "" };
                            e.values.iter().flatten().any(|v| v == have)
                        })
                    })
                });
                if admits {
                    good += 1;
                    if name == "archive" {
                        archive_node = Some(zone);
                    }
                }
            }
            if good == SIZE + 1 || Instant::now() > deadline {
                let placed_archive = usize::from(archive_node.is_some());
                let archive = match archive_node {
                    Some(z) => format!("archive bound beside its pre-existing PV in {z}"),
                    None => format!("archive (pre-existing PV in {archive_zone}) not placed"),
                };
                return anyhow::Ok(format!("stateful wave: {}/{SIZE} pods of StatefulSet db with claims of the default class, each volume provisioned in its pod's zone; {archive}", good - placed_archive));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    match run.await {
        Ok(line) => line,
        Err(e) => format!("stateful wave skipped: {e:#}"),
    }
}

fn spawn_watch(client: kube::Client, shared: Arc<Shared>, pb: ProgressBar) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
        let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => shared.observe(&p, false),
                Ok(watcher::Event::Delete(p)) => shared.observe(&p, true),
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "demo watch error"),
            }
            let bound = shared.lock().pods.iter().filter(|(n, r)| r.node.is_some() && n.as_str() != GIANT).count();
            pb.set_position(bound as u64);
        }
    })
}

async fn create_workload(client: &kube::Client, g: &Group) -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::batch::v1::Job;
    let body = workload_json(g);
    let pp = PostParams::default();
    match maker(g) {
        Maker::Job => {
            let job: Job = serde_json::from_value(body)?;
            Api::<Job>::namespaced(client.clone(), NAMESPACE).create(&pp, &job).await.with_context(|| format!("creating Job {NAMESPACE}/{}", g.name))?;
        }
        _ => {
            let d: Deployment = serde_json::from_value(body)?;
            Api::<Deployment>::namespaced(client.clone(), NAMESPACE).create(&pp, &d).await.with_context(|| format!("creating Deployment {NAMESPACE}/{}", g.name))?;
        }
    }
    Ok(())
}

async fn create_pods(api: &Api<Pod>, shared: &Shared, batch: Vec<(String, &'static str, Value)>) -> anyhow::Result<()> {
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(batch)
        .map(|(name, group, body)| async move {
            let pod: Pod = serde_json::from_value(body)?;
            {
                let mut t = shared.lock();
                let r = t.pods.entry(name.clone()).or_default();
                r.group = group.to_string();
                r.created = Some(Instant::now());
            }
            api.create(&PostParams::default(), &pod).await.with_context(|| format!("creating pod {NAMESPACE}/{name}"))?;
            Ok(())
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}


// ---------------------------------------------------------------- checks

fn node_labels(n: &Node) -> BTreeMap<String, String> {
    n.metadata.labels.clone().unwrap_or_default()
}

fn requests(p: &Pod) -> (i64, i64) {
    let mut cpu = 0;
    let mut mem = 0;
    for c in p.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default() {
        if let Some(r) = c.resources.as_ref().and_then(|r| r.requests.as_ref()) {
            cpu += r.get("cpu").and_then(|q| parse_milli(&q.0).ok()).unwrap_or(0);
            mem += r.get("memory").and_then(|q| parse_value(&q.0).ok()).unwrap_or(0);
        }
    }
    (cpu, mem)
}

/// Does a toleration of `p` tolerate the hard taint (key, value, effect)?
fn tolerates(p: &Pod, key: &str, value: &str, effect: &str) -> bool {
    p.spec.as_ref().and_then(|s| s.tolerations.as_ref()).into_iter().flatten().any(|t| {
        let op = t.operator.as_deref().unwrap_or("Equal");
        let key_ok = match t.key.as_deref() {
            None | Some("") => op == "Exists",
            Some(k) => k == key,
        };
        let value_ok = op == "Exists" || t.value.as_deref().unwrap_or("") == value;
        let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == effect);
        key_ok && value_ok && effect_ok
    })
}

/// The first hard taint of `n` that `p` does not tolerate.
fn untolerated(p: &Pod, n: &Node) -> Option<String> {
    n.spec.as_ref().and_then(|s| s.taints.as_ref()).into_iter().flatten().find_map(|t| {
        let hard = t.effect == "NoSchedule" || t.effect == "NoExecute";
        (hard && !tolerates(p, &t.key, t.value.as_deref().unwrap_or(""), &t.effect)).then(|| format!("{}={}:{}", t.key, t.value.as_deref().unwrap_or(""), t.effect))
    })
}

/// Does `n` satisfy `p`'s nodeSelector and required node affinity?
fn affinity_ok(p: &Pod, n: &Node) -> bool {
    let labels = node_labels(n);
    let Some(spec) = p.spec.as_ref() else { return true };
    if let Some(sel) = &spec.node_selector
        && sel.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    let Some(req) = spec.affinity.as_ref().and_then(|a| a.node_affinity.as_ref()).and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref()) else {
        return true;
    };
    req.node_selector_terms.iter().any(|term| {
        let exprs = term.match_expressions.as_deref().unwrap_or_default();
        !exprs.is_empty()
            && exprs.iter().all(|e| {
                let v = labels.get(&e.key);
                let values = e.values.as_deref().unwrap_or_default();
                let num = |x: &str| x.parse::<i64>().ok();
                match e.operator.as_str() {
                    "In" => v.is_some_and(|v| values.contains(v)),
                    "NotIn" => v.is_none_or(|v| !values.contains(v)),
                    "Exists" => v.is_some(),
                    "DoesNotExist" => v.is_none(),
                    "Gt" => matches!((v.and_then(|v| num(v)), values.first().and_then(|x| num(x))), (Some(a), Some(b)) if a > b),
                    "Lt" => matches!((v.and_then(|v| num(v)), values.first().and_then(|x| num(x))), (Some(a), Some(b)) if a < b),
                    _ => false,
                }
            })
    })
}

fn is_active(p: &Pod) -> bool {
    !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty())
}

fn fmt_secs(s: f64) -> String {
    if s < 1.0 { format!("{:.0}ms", s * 1000.0) } else { format!("{s:.2}s") }
}

struct Report<'a> {
    shape: &'a Shape,
    groups: &'a [Group],
    nodes: &'a [Node],
    pods: &'a [Pod],
    events: &'a [Event],
    tracker: &'a Tracker,
    late: &'a [String],
    /// The accelerator wave's device checks that failed.
    device_violations: &'a [String],
    explain: Option<&'a Result<Value, String>>,
    admin: SocketAddr,
    api: String,
    leader: String,
    metrics_line: String,
    workload_secs: f64,
}

impl Report<'_> {
    /// The summary and the number of failed checks.
    fn render(&self) -> (String, usize) {
        let mut s = String::new();
        let mut violations: Vec<String> = Vec::new();
        let node_by_name: HashMap<&str, &Node> = self.nodes.iter().filter_map(|n| Some((n.metadata.name.as_deref()?, n))).collect();
        let zone_of = |node: &str| node_by_name.get(node).and_then(|n| node_labels(n).get(ZONE_KEY).cloned()).unwrap_or_default();
        let zones: Vec<String> = (0..ZONES).map(zone_name).collect();
        let running: Vec<&Pod> = self.pods.iter().filter(|p| node_of(p).is_some() && is_active(p) && p.metadata.deletion_timestamp.is_none()).collect();
        let group_of = |p: &Pod| p.metadata.labels.as_ref().and_then(|l| l.get("app")).cloned().unwrap_or_default();

        let _ = writeln!(
            s,
            "\nberth demo: {} nodes in {ZONES} zones ({} tainted {TAINT_KEY}={TAINT_VALUE}:NoSchedule, {} nodes labelled {SSD_KEY}=ssd)",
            self.shape.nodes,
            zone_name(TAINTED_ZONE),
            self.shape.ssd.len()
        );
        let _ = writeln!(s, "scheduler: profile {SCHEDULER}, leader {} (Lease kube-system/berth), API server {}, admin https://{}", self.leader, self.api, self.admin);

        // Placement per group and zone.
        let _ = writeln!(s, "\nPlacement (running pods per zone)");
        let _ = write!(s, "  {:<10} {:<14} {:>6}", "GROUP", "PRIORITY", "PODS");
        for z in &zones {
            let _ = write!(s, " {z:>7}");
        }
        let _ = writeln!(s, " {:>8} {:>10}", "PENDING", "PREEMPTED");
        for g in self.groups {
            let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
            for p in running.iter().filter(|p| group_of(p) == g.name) {
                *per_zone.entry(zone_of(node_of(p).unwrap_or_default())).or_default() += 1;
            }
            let pending = self.pods.iter().filter(|p| group_of(p) == g.name && node_of(p).is_none()).count();
            let preempted = self.tracker.pods.values().filter(|r| r.group == g.name && r.preempted).count();
            let _ = write!(s, "  {:<10} {:<14} {:>6}", g.name, format!("{} ({})", g.class.trim_start_matches("demo-"), class_value(g.class)), g.count);
            for z in &zones {
                let _ = write!(s, " {:>7}", per_zone.get(z).copied().unwrap_or(0));
            }
            let _ = writeln!(s, " {pending:>8} {preempted:>10}");
        }

        // Spread constraints and their skew.
        let _ = writeln!(s, "\nTopology spread (skew over the constraint's eligible domains)");
        for g in self.groups.iter().filter(|g| !g.spread.is_empty()) {
            let sample = self.pods.iter().find(|p| group_of(p) == g.name);
            for c in &g.spread {
                let mut counts: BTreeMap<String, i64> = BTreeMap::new();
                for n in self.nodes {
                    let eligible = sample.is_none_or(|p| affinity_ok(p, n) && (!c.honor_taints || untolerated(p, n).is_none()));
                    if let Some(d) = node_labels(n).get(c.key).filter(|_| eligible) {
                        counts.entry(d.clone()).or_insert(0);
                    }
                }
                for p in running.iter().filter(|p| group_of(p) == g.name) {
                    let Some(n) = node_by_name.get(node_of(p).unwrap_or_default()) else { continue };
                    if let Some(v) = node_labels(n).get(c.key).and_then(|d| counts.get_mut(d)) {
                        *v += 1;
                    }
                }
                let max = counts.values().copied().max().unwrap_or(0);
                let min = counts.values().copied().min().unwrap_or(0);
                let skew = max - min;
                let group_preempted = self.tracker.pods.values().any(|r| r.group == g.name && r.preempted);
                let verdict = if !c.hard {
                    "soft".to_string()
                } else if skew <= c.max_skew {
                    "ok".to_string()
                } else if group_preempted {
                    "over maxSkew after preemption (allowed)".to_string()
                } else {
                    violations.push(format!("spread: group {} has skew {skew} > maxSkew {} on {}", g.name, c.max_skew, c.key));
                    "VIOLATION".to_string()
                };
                let _ = writeln!(s, "  {:<10} {:<58} {} domains, min {min}, max {max}, skew {skew}: {verdict}", g.name, c.describe(), counts.len());
            }
        }

        // Hard constraints of every running pod.
        let mut per_node: HashMap<&str, (i64, i64, i64)> = HashMap::new();
        for p in self.pods.iter().filter(|p| is_active(p)) {
            let Some(node) = node_of(p) else { continue };
            let key = format!("{NAMESPACE}/{}", p.metadata.name.as_deref().unwrap_or_default());
            let Some(n) = node_by_name.get(node) else {
                violations.push(format!("{key} is bound to unknown node {node}"));
                continue;
            };
            if let Some(t) = untolerated(p, n) {
                violations.push(format!("taint: {key} runs on {node} without tolerating {t}"));
            }
            if !affinity_ok(p, n) {
                violations.push(format!("node affinity: {key} runs on {node}, which its nodeSelector/required node affinity excludes"));
            }
            let (cpu, mem) = requests(p);
            let e = per_node.entry(node).or_default();
            e.0 += cpu;
            e.1 += mem;
            e.2 += 1;
        }
        for (node, (cpu, mem, count)) in &per_node {
            let Some(alloc) = node_by_name.get(node).and_then(|n| n.status.as_ref()).and_then(|s| s.allocatable.as_ref()) else { continue };
            let a = |k: &str, f: fn(&str) -> Result<i64, berth_model::quantity::Error>| alloc.get(k).and_then(|q| f(&q.0).ok()).unwrap_or(i64::MAX);
            if *cpu > a("cpu", parse_milli) {
                violations.push(format!("capacity: {node} has {cpu}m cpu requested, more than its allocatable"));
            }
            if *mem > a("memory", parse_value) {
                violations.push(format!("capacity: {node} has {mem} bytes of memory requested, more than its allocatable"));
            }
            if *count > a("pods", parse_value) {
                violations.push(format!("capacity: {node} runs {count} pods, more than its allocatable"));
            }
        }

        // Preemptions, from the scheduler's Preempted events.
        let uid_to_name: HashMap<String, String> = self.pods.iter().filter_map(|p| Some((p.metadata.uid.clone()?, p.metadata.name.clone()?))).collect();
        let mut by_preemptor: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for e in self.events.iter().filter(|e| e.reason.as_deref() == Some("Preempted")) {
            let note = e.note.as_deref().unwrap_or_default();
            let Some(rest) = note.strip_prefix("Preempted by pod ") else { continue };
            let (uid, node) = rest.split_once(" on node ").unwrap_or((rest, "?"));
            let preemptor = uid_to_name.get(uid).cloned().unwrap_or_else(|| format!("uid {uid}"));
            let victim = e.regarding.as_ref().and_then(|r| r.name.clone()).unwrap_or_default();
            by_preemptor.entry((preemptor, node.to_string())).or_default().insert(victim);
        }
        let victims: BTreeSet<&String> = by_preemptor.values().flatten().collect();
        let _ = writeln!(s, "\nPreemption: {} preemptor(s) evicted {} pod(s)", by_preemptor.len(), victims.len());
        for (i, ((preemptor, node), vs)) in by_preemptor.iter().enumerate() {
            let pp = self.tracker.pods.get(preemptor).map(|r| r.priority).unwrap_or(0);
            for v in vs {
                let vp = self.tracker.pods.get(v).map(|r| r.priority).unwrap_or(0);
                if vp >= pp {
                    violations.push(format!("preemption: {v} (priority {vp}) was evicted for {preemptor} (priority {pp})"));
                }
            }
            if i < 8 {
                let list: Vec<String> = vs.iter().map(|v| format!("{v} ({})", self.tracker.pods.get(v).map(|r| r.priority).unwrap_or(0))).collect();
                let _ = writeln!(s, "  {preemptor} ({pp}) on {node}: evicted {}", list.join(", "));
            } else if i == 8 {
                let _ = writeln!(s, "  ... and {} more", by_preemptor.len() - 8);
            }
        }
        let untracked = self.tracker.pods.iter().filter(|(n, r)| r.preempted && !victims.contains(n)).count();
        if untracked > 0 {
            let _ = writeln!(s, "  ({untracked} more pod(s) carried DisruptionTarget=PreemptionByScheduler without a Preempted event)");
        }

        // Pending pods.
        let pending: Vec<&Pod> = self.pods.iter().filter(|p| node_of(p).is_none()).collect();
        let _ = writeln!(s, "\nPending: {} pod(s)", pending.len());
        for p in &pending {
            let name = p.metadata.name.clone().unwrap_or_default();
            let why = p
                .status
                .as_ref()
                .and_then(|st| st.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
                .and_then(|c| c.message.clone())
                .unwrap_or_else(|| "not attempted yet".into());
            let expected = self.groups.iter().any(|g| g.expect_pending && g.name == group_of(p));
            let _ = writeln!(s, "  {NAMESPACE}/{name}{}: {why}", if expected { " (fits nowhere, by design)" } else { "" });
        }
        let mut unexpected: BTreeSet<String> = self.late.iter().cloned().collect();
        for p in &pending {
            if !self.groups.iter().any(|g| g.expect_pending && g.name == group_of(p)) {
                unexpected.insert(p.metadata.name.clone().unwrap_or_default());
            }
        }
        // Preempted pods are gone, and late ones that got bound eventually are fine.
        unexpected.retain(|n| self.tracker.pods.get(n).is_none_or(|r| !r.preempted) && self.pods.iter().any(|p| p.metadata.name.as_deref() == Some(n) && node_of(p).is_none()));

        // Explain of the pod that fits nowhere.
        let _ = writeln!(s, "\nWhy {NAMESPACE}/{GIANT} stays pending (GET https://{}/debug/explain?pod={NAMESPACE}/{GIANT})", self.admin);
        match self.explain {
            None => {
                let _ = writeln!(s, "  not asked");
            }
            Some(Err(e)) => {
                let _ = writeln!(s, "  {e}");
            }
            Some(Ok(x)) => render_explain(&mut s, x),
        }

        // Throughput and latency.
        let _ = writeln!(s, "\nThroughput and latency (pod creation to binding, as seen by a watch)");
        let _ = writeln!(s, "  {:<32} {:>5} {:>6} {:>8} {:>7} {:>8} {:>8}", "WAVE", "PODS", "BOUND", "SECONDS", "PODS/S", "P50", "P99");
        let mut all = Vec::new();
        let (mut first_all, mut last_all) = (None::<Instant>, None::<Instant>);
        for (w, title) in WAVES.iter().enumerate() {
            let names: BTreeSet<&str> = self.groups.iter().filter(|g| g.wave == w).map(|g| g.name).collect();
            let recs: Vec<&Rec> = self.tracker.pods.values().filter(|r| names.contains(r.group.as_str())).collect();
            let first = recs.iter().filter_map(|r| r.created).min();
            let last = recs.iter().filter_map(|r| r.bound).max();
            let mut lat: Vec<f64> = recs.iter().filter_map(|r| Some(r.bound?.saturating_duration_since(r.created?).as_secs_f64())).collect();
            lat.sort_by(f64::total_cmp);
            let secs = match (first, last) {
                (Some(f), Some(l)) => l.saturating_duration_since(f).as_secs_f64(),
                _ => 0.0,
            };
            let rate = if secs > 0.0 { format!("{:.0}", lat.len() as f64 / secs) } else { "-".into() };
            let (p50, p99) = if lat.is_empty() { ("-".into(), "-".into()) } else { (fmt_secs(percentile(&lat, 0.5)), fmt_secs(percentile(&lat, 0.99))) };
            let _ = writeln!(s, "  {:<32} {:>5} {:>6} {:>8.2} {:>7} {:>8} {:>8}", format!("{}. {title}", w + 1), recs.len(), lat.len(), secs, rate, p50, p99);
            all.extend(lat);
            first_all = first_all.into_iter().chain(first).min();
            last_all = last_all.into_iter().chain(last).max();
        }
        all.sort_by(f64::total_cmp);
        let secs = match (first_all, last_all) {
            (Some(f), Some(l)) => l.saturating_duration_since(f).as_secs_f64(),
            _ => 0.0,
        };
        let _ = writeln!(
            s,
            "  {:<32} {:>5} {:>6} {:>8.2} {:>7} {:>8} {:>8}",
            "all",
            self.tracker.pods.len(),
            all.len(),
            secs,
            if secs > 0.0 { format!("{:.0}", all.len() as f64 / secs) } else { "-".into() },
            fmt_secs(percentile(&all, 0.5)),
            fmt_secs(percentile(&all, 0.99))
        );
        let _ = writeln!(s, "  workload played in {:.1}s; scheduler metrics: {}", self.workload_secs, self.metrics_line);

        // Verdict.
        violations.extend(self.device_violations.iter().cloned());
        let _ = writeln!(s, "\nChecks: capacity, taints, required node affinity, DoNotSchedule spread skew, preemption priorities, devices (none given twice; a bound pod's claims allocated on its node and reserved for it)");
        for v in &violations {
            let _ = writeln!(s, "  VIOLATION {v}");
        }
        for n in &unexpected {
            let _ = writeln!(s, "  NOT PLACED {NAMESPACE}/{n} should have been scheduled within {}s", WAVE_TIMEOUT.as_secs());
        }
        let _ = writeln!(s, "violations: {}", violations.len());
        let _ = writeln!(s, "unexpected pending: {}", unexpected.len());
        (s, violations.len() + unexpected.len())
    }
}

/// explain's JSON, grouped by reason: one line per distinct rejection.
fn render_explain(s: &mut String, x: &Value) {
    if let Some(m) = x.get("message").and_then(Value::as_str) {
        let _ = writeln!(s, "  {m}");
    }
    let mut by_reason: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut feasible = Vec::new();
    for n in x.get("nodes").and_then(Value::as_array).into_iter().flatten() {
        let name = n.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        if n.get("feasible").and_then(Value::as_bool).unwrap_or(false) {
            feasible.push(name);
            continue;
        }
        let reasons: Vec<String> = n
            .get("reasons")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| format!("{}: {}", r.get("plugin").and_then(Value::as_str).unwrap_or("?"), r.get("reason").and_then(Value::as_str).unwrap_or("?")))
            .collect();
        by_reason.entry(if reasons.is_empty() { "(no reason given)".into() } else { reasons.join("; ") }).or_default().push(name);
    }
    let mut rows: Vec<(String, Vec<String>)> = by_reason.into_iter().collect();
    rows.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    for (reason, nodes) in rows {
        let sample: Vec<&str> = nodes.iter().take(4).map(String::as_str).collect();
        let more = if nodes.len() > 4 { ", ..." } else { "" };
        let _ = writeln!(s, "  {:>4} node(s)  {reason}  [{}{more}]", nodes.len(), sample.join(", "));
    }
    if !feasible.is_empty() {
        let _ = writeln!(s, "  {:>4} node(s)  feasible now", feasible.len());
    }
    match x.get("preemption").filter(|p| !p.is_null()) {
        Some(p) => {
            let victims: Vec<&str> = p.get("victims").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
            let _ = writeln!(s, "  preemption: would nominate {} after evicting {}", p.get("nominatedNode").or_else(|| p.get("nominated_node")).and_then(Value::as_str).unwrap_or("?"), victims.join(", "));
        }
        None => {
            let _ = writeln!(s, "  preemption: no node where evicting lower-priority pods would make room");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_config_parses_with_one_berth_profile() {
        let c = Config::parse(CONFIG).expect("demo config");
        assert_eq!(c.profile_names(), vec![SCHEDULER.to_string()]);
        assert!(c.raw.leader_election.leader_elect);
    }

    #[test]
    fn workload_fits_the_default_shape() {
        let shape = Shape::new(60);
        assert_eq!(shape.tainted, 20);
        assert_eq!(shape.ssd.len(), 14);
        let groups = shape.groups();
        // Wave 1 and the filler fit in the untainted zones without preemption.
        let cpu = |w: usize| groups.iter().filter(|g| g.wave <= w && g.name != "batch").map(|g| g.cpu_m * g.count as i64).sum::<i64>();
        assert!(cpu(1) <= shape.untainted as i64 * 4000);
        // The burst does not fit without preemption.
        assert!(cpu(2) > shape.untainted as i64 * 4000);
    }

    fn node(name: &str, cpu: &str, taint: bool, labels: Value) -> Node {
        let mut n = json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": cpu, "memory": "1Gi", "pods": "10"}},
        });
        if taint {
            n["spec"] = json!({"taints": [{"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "NoSchedule"}]});
        }
        serde_json::from_value(n).expect("node")
    }

    fn pod(name: &str, node: Option<&str>, cpu: &str, extra: Value) -> Pod {
        let mut spec = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        if let (Some(m), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "web"}}, "spec": spec})).expect("pod")
    }

    #[test]
    fn taint_check_honours_tolerations() {
        let tainted = node("n", "1", true, json!({}));
        assert!(untolerated(&pod("p", None, "1m", json!({})), &tainted).is_some());
        let tol = json!({"tolerations": [{"key": TAINT_KEY, "operator": "Equal", "value": TAINT_VALUE, "effect": "NoSchedule"}]});
        assert!(untolerated(&pod("p", None, "1m", tol), &tainted).is_none());
        let wrong_value = json!({"tolerations": [{"key": TAINT_KEY, "value": "gpu", "effect": "NoSchedule"}]});
        assert!(untolerated(&pod("p", None, "1m", wrong_value), &tainted).is_some());
        let everything = json!({"tolerations": [{"operator": "Exists"}]});
        assert!(untolerated(&pod("p", None, "1m", everything), &tainted).is_none());
    }

    #[test]
    fn affinity_check_follows_required_terms_and_node_selector() {
        let ssd = node("a", "1", false, json!({SSD_KEY: "ssd"}));
        let plain = node("b", "1", false, json!({}));
        let aff = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": SSD_KEY, "operator": "In", "values": ["ssd"]}]}]}}}});
        let p = pod("p", None, "1m", aff);
        assert!(affinity_ok(&p, &ssd));
        assert!(!affinity_ok(&p, &plain));
        let sel = pod("p", None, "1m", json!({"nodeSelector": {SSD_KEY: "ssd"}}));
        assert!(affinity_ok(&sel, &ssd));
        assert!(!affinity_ok(&sel, &plain));
    }

    #[test]
    fn summary_counts_violations_and_unplaced_pods() {
        let shape = Shape::new(6);
        let groups = shape.groups();
        let nodes = vec![node("node-0", "1", false, json!({ZONE_KEY: "zone-a"})), node("node-2", "4", true, json!({ZONE_KEY: "zone-c"}))];
        // Overcommitted node-0, an untolerated taint on node-2, one pod never placed.
        let pods = vec![pod("web-0", Some("node-0"), "800m", json!({})), pod("web-1", Some("node-0"), "800m", json!({})), pod("web-2", Some("node-2"), "100m", json!({})), pod("web-3", None, "100m", json!({}))];
        let tracker = Tracker::default();
        let r = Report {
            shape: &shape,
            groups: &groups,
            nodes: &nodes,
            pods: &pods,
            events: &[],
            tracker: &tracker,
            late: &[],
            device_violations: &["device: gpu-0 twice".to_string()],
            explain: None,
            admin: SocketAddr::from(([127, 0, 0, 1], 1)),
            api: String::new(),
            leader: String::new(),
            metrics_line: String::new(),
            workload_secs: 0.0,
        };
        let (text, failures) = r.render();
        assert!(text.contains("VIOLATION capacity: node-0"), "{text}");
        assert!(text.contains("VIOLATION taint: demo/web-2"), "{text}");
        assert!(text.contains("NOT PLACED demo/web-3"), "{text}");
        assert!(text.contains("VIOLATION device: gpu-0 twice"), "{text}");
        assert!(text.contains("violations: 3"), "{text}");
        assert_eq!(failures, 4);
    }

}
