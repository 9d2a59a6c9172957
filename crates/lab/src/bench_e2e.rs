//! `berth bench --e2e`: the whole pipeline, end to end. The local cluster
//! (`berth cluster`) and the daemon (`berth run`) run as two child processes
//! of this one, talking HTTP over loopback; this process creates pods as fast
//! as the API server takes them and watches them get bound.
//!
//! Figures: pods bound per second (first create to last bind), p50/p99 from
//! the create call to the watch event that shows the pod bound, and each
//! child's peak RSS (`VmHWM`). Nothing here asserts a time.
//!
//! With `--kubeconfig` it runs against that API server instead (a real
//! control plane from `tools/kube/up`, or a test cluster): no local cluster
//! is started, the pods live in a namespace of their own
//! (`berth-bench-<pid>`, deleted afterwards), and `--kwok-nodes` creates the
//! nodes as KWOK nodes (deleted afterwards), `--static-nodes` as nodes
//! created Ready that nothing heartbeats (`tools/kube/up --static-nodes`,
//! no KWOK: scheduler_perf's nodes). With `--scheduler-name` naming
//! another scheduler (kube-scheduler's `default-scheduler`), berth's daemon
//! is not started and that scheduler is measured; `--scheduler-pid` lets
//! its CPU and peak RSS be read from /proc as the daemon's are.
//!
//! `--bind-directly` measures the API server's own ceiling: no scheduler
//! runs, and each creating client binds its pod itself (`pods/binding`,
//! round-robin over the nodes) right after the create, so the same figures
//! show what the server and the load take with no scheduling work (it
//! writes no Scheduled event, so the ceiling is if anything high).
//!
//! SchedulingWithResourceClaimTemplate (scheduler_perf's DRA workload) runs
//! the cluster with its simulated DRA driver (`--devices-per-node 10`,
//! which also creates the driver's DeviceClass): every pod names one
//! ResourceClaimTemplate, the cluster's resourceclaim controller generates
//! each pod's claim, and the daemon allocates it, writes it (finalizer,
//! `status.allocation`, `reservedFor`) and binds the pod. As upstream, half
//! of the devices go to init pods first (created and bound before the
//! measurement), then the measured pods take at most the other half. At the
//! end the claims are read back: each measured and init pod's claim
//! allocated, no device in two allocations, or the run fails.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use serde::{Deserialize, Serialize};
use serde_json::json;
use thiserror::Error;
use tokio::process::{Child, Command};

/// The end-to-end workloads.
pub const WORKLOADS: &[&str] = &["SchedulingBasic", "TopologySpreading", "Unschedulable", PREEMPTION_WORKLOAD, DRA_WORKLOAD];

/// The preemption workload: every node full of low-priority pods, then
/// high-priority pods that fit only by preempting (scheduler_perf's
/// PreemptionBasic).
pub const PREEMPTION_WORKLOAD: &str = "PreemptionBasic";
/// Low-priority pods per node of the preemption workload (scheduler_perf's
/// 4,000 init pods on 1,000 nodes).
pub const PREEMPTION_VICTIMS_PER_NODE: usize = 4;
/// The PriorityClass of the preemption workload's measured pods
/// (scheduler_perf's high-priority pods have priority 10).
const HIGH_PRIORITY_CLASS: &str = "berth-bench-high";

/// The DRA workload: pods with a claim from a ResourceClaimTemplate.
pub const DRA_WORKLOAD: &str = "SchedulingWithResourceClaimTemplate";
/// Devices per node of the DRA workload (scheduler_perf's maxClaimsPerNode).
pub const DRA_DEVICES_PER_NODE: usize = 10;
/// The ResourceClaimTemplate of the DRA workload's pods.
const DRA_TEMPLATE: &str = "bench-gpu";

/// The scheduler name the benchmark's pods ask for.
const PROFILE: &str = "berth-bench";
/// The scheduler name of `--bind-directly`'s pods: no scheduler serves it.
const NO_SCHEDULER: &str = "none-the-bench-binds";

/// Why the end-to-end benchmark could not run.
#[derive(Debug, Error)]
pub enum Error {
    /// A child process or file could not be handled.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The local cluster or the scheduler did not come up, or pods were not bound in time.
    #[error("{0}")]
    Stuck(String),
    /// The API client failed.
    #[error("API client: {0}")]
    Client(String),
    /// Unknown workload.
    #[error("--workload: unknown end-to-end workload {0:?} (one of SchedulingBasic, TopologySpreading, Unschedulable, PreemptionBasic, SchedulingWithResourceClaimTemplate)")]
    Workload(String),
    /// The claims read back after the DRA workload break an invariant.
    #[error("claims after the run: {0}")]
    Claims(String),
}

/// How to run it.
#[derive(Clone, Debug)]
pub struct E2eOptions {
    /// Workload (one of [`WORKLOADS`]).
    pub workload: String,
    /// Nodes of the local cluster.
    pub nodes: usize,
    /// Pods measured.
    pub pods: usize,
    /// Concurrent creating clients.
    pub creators: usize,
    /// The daemon's clientConnection.qps and burst (the chart's defaults unless given).
    pub qps: f64,
    /// See `qps`.
    pub burst: i64,
    /// The berth binary to start the children from.
    pub exe: PathBuf,
    /// An API server to run against instead of a local cluster.
    pub kubeconfig: Option<PathBuf>,
    /// The scheduler the pods name (berth's daemon is started only when
    /// this is berth's profile, the default).
    pub scheduler_name: Option<String>,
    /// With `kubeconfig`: create `nodes` KWOK nodes for the run.
    pub kwok_nodes: bool,
    /// With `kubeconfig`: create `nodes` nodes Ready at create, for a
    /// control plane with no KWOK (`tools/kube/up --static-nodes`).
    pub static_nodes: bool,
    /// The process of a scheduler this run does not start, for its CPU and RSS.
    pub scheduler_pid: Option<u32>,
    /// No scheduler: the creating clients bind each pod themselves.
    pub bind_directly: bool,
}

/// The figures of one end-to-end run.
#[derive(Clone, Debug, Serialize)]
pub struct E2eFigures {
    /// Workload name.
    pub workload: String,
    /// Where it ran: `local cluster`, or the API server's URL.
    pub backend: String,
    /// The scheduler measured (the pods' schedulerName).
    pub scheduler: String,
    /// Nodes.
    pub nodes: usize,
    /// Pods measured (bound).
    pub pods: usize,
    /// Unschedulable pods created beside them (Unschedulable workload).
    pub unschedulable_pods: usize,
    /// Pods bound before the measurement that hold devices (the DRA workload's init pods).
    pub init_pods: usize,
    /// Claims found allocated after the run (the DRA workload), none sharing a device.
    pub claims_allocated: usize,
    /// Measured pods bound per second, first create to last bind.
    pub pods_per_second: f64,
    /// Median create-to-bound latency.
    pub p50_ms: f64,
    /// 99th percentile create-to-bound latency.
    pub p99_ms: f64,
    /// Peak RSS of the scheduler's process (0 when unknown).
    pub scheduler_peak_rss_mb: f64,
    /// The scheduler process's CPU seconds (user + system) per 1,000
    /// measured pods, from their first create to the last bind (0 when unknown).
    pub scheduler_cpu_s_per_1000_pods: f64,
    /// Peak RSS of the local cluster process.
    pub cluster_peak_rss_mb: f64,
    /// The daemon's clientConnection.qps.
    pub qps: f64,
    /// The daemon's clientConnection.burst.
    pub burst: i64,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// CPU seconds (user + system) a process has used, 0 when unknown.
fn cpu_seconds(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return 0.0 };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // Fields after the command (which may hold spaces) start at state (3);
    // utime and stime are fields 14 and 15, in clock ticks of USER_HZ,
    // which Linux fixes at 100 on every architecture it runs on.
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak RSS (VmHWM) of a process in MiB, 0 when unknown.
fn peak_rss_mb(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return 0.0 };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<f64>().ok()))
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn free_port() -> Result<u16, Error> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("finding a free port"))?;
    Ok(l.local_addr().map_err(io("finding a free port"))?.port())
}

/// Where the pods go and whom they ask.
#[derive(Clone, Debug)]
struct Target {
    ns: String,
    scheduler: String,
}

impl Target {
    fn pods_path(&self) -> String {
        format!("/api/v1/namespaces/{}/pods", self.ns)
    }
}

/// Where a pod's name goes in a [`PodBody`] before it is split.
const NAME_MARK: &str = "\u{1}name\u{1}";

/// A pod's JSON, ready to post.
fn pod(t: &Target, name: &str, cpu: &str, spread: bool) -> Vec<u8> {
    PodBody::new(t, cpu, spread, false).with_name(name)
}

/// The preemption workload's pods, as scheduler_perf's templates: victims
/// of 900m (four fill a 4-CPU node) with `terminationGracePeriodSeconds: 0`
/// so that a preempted pod is gone at once, and preemptors of 3 CPUs at
/// priority 10 (through a PriorityClass: the Priority admission plugin
/// refuses a bare `priority`), each of which must evict three victims.
fn preemption_body(t: &Target, high: bool) -> PodBody {
    let mut v = pod_value(t, if high { "3" } else { "900m" }, false, false);
    if high {
        v["spec"]["priorityClassName"] = json!(HIGH_PRIORITY_CLASS);
    } else {
        v["spec"]["terminationGracePeriodSeconds"] = json!(0);
    }
    PodBody::of(&v)
}

/// A benchmark pod as a value, named [`NAME_MARK`]: `cpu` requested, the
/// zone spread constraint with `spread`, and with `claim` the claim
/// `resource` from the template [`DRA_TEMPLATE`].
fn pod_value(t: &Target, cpu: &str, spread: bool, claim: bool) -> serde_json::Value {
    let mut spec = json!({
        "schedulerName": t.scheduler,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": "500Mi"}}}],
    });
    if claim {
        spec["resourceClaims"] = json!([{"name": "resource", "resourceClaimTemplateName": DRA_TEMPLATE}]);
        spec["containers"][0]["resources"]["claims"] = json!([{"name": "resource"}]);
    }
    if spread {
        spec["topologySpreadConstraints"] = json!([{
            "maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"color": "blue"}},
        }]);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": NAME_MARK, "namespace": t.ns, "labels": {"color": "blue", "bench": "e2e"}},
        "spec": spec,
    })
}

/// The JSON of the benchmark's pods of one kind, serialized once: the text
/// before and after the name, which is all that differs between two of them.
/// This process is the load, and should cost the machine little.
struct PodBody {
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl PodBody {
    /// The body of [`pod_value`].
    fn new(t: &Target, cpu: &str, spread: bool, claim: bool) -> PodBody {
        PodBody::of(&pod_value(t, cpu, spread, claim))
    }

    /// Serializes a pod named [`NAME_MARK`] once, split around its name.
    fn of(v: &serde_json::Value) -> PodBody {
        let text = v.to_string();
        let mark = serde_json::to_string(NAME_MARK).unwrap_or_default();
        match text.split_once(&mark) {
            Some((head, tail)) => PodBody { head: head.as_bytes().to_vec(), tail: tail.as_bytes().to_vec() },
            None => PodBody { head: Vec::new(), tail: Vec::new() },
        }
    }

    fn with_name(&self, name: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.len() + self.tail.len() + name.len() + 8);
        out.extend_from_slice(&self.head);
        // A name is plain text; writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, name);
        out.extend_from_slice(&self.tail);
        out
    }
}

/// Creates a pod from its JSON. The reply is checked for being JSON and not
/// decoded: this process is the load, and should cost the machine little.
async fn create(client: &kube::Client, t: &Target, body: Vec<u8>) -> Result<(), kube::Error> {
    let req = kube::core::Request::new(t.pods_path()).create(&PostParams::default(), body).map_err(kube::Error::BuildRequest)?;
    client.request::<serde::de::IgnoredAny>(req).await.map(|_| ())
}

/// What the watch reads of a pod: its name and node.
#[derive(Clone, Debug, Deserialize)]
struct BoundPod {
    metadata: BoundMeta,
    spec: Option<BoundSpec>,
}

#[derive(Clone, Debug, Deserialize)]
struct BoundMeta {
    name: Option<String>,
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BoundSpec {
    node_name: Option<String>,
}

#[derive(Deserialize)]
struct BoundList {
    metadata: BoundListMeta,
    items: Vec<BoundPod>,
}

#[derive(Deserialize)]
struct BoundListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

/// When each benchmark pod was first seen bound, and how many of the
/// measured ones (`p-*`) are.
#[derive(Default)]
struct Bound {
    at: Mutex<HashMap<String, Instant>>,
    measured: AtomicUsize,
}

impl Bound {
    fn saw(&self, p: BoundPod, now: Instant) {
        if p.spec.and_then(|s| s.node_name).is_none() {
            return;
        }
        let Some(name) = p.metadata.name else { return };
        let Ok(mut m) = self.at.lock() else { return };
        if m.contains_key(&name) {
            return;
        }
        if name.starts_with("p-") {
            self.measured.fetch_add(1, Ordering::Relaxed);
        }
        m.insert(name, now);
    }

    fn len(&self) -> usize {
        self.at.lock().map(|m| m.len()).unwrap_or(0)
    }
}

/// Lists, then watches from the list, the benchmark's pods that are bound,
/// recording when each is first seen bound; lists again when the watch ends
/// or fails. The field selector leaves the server to send only the bind of
/// each pod (as ADDED, the event of a pod entering the selection), not its
/// creation: half the events, for a process that should cost the machine little.
async fn watch_bound(client: kube::Client, t: Target, bound: Arc<Bound>) {
    let path = t.pods_path();
    let labels = "bench=e2e";
    let fields = "spec.nodeName!=";
    loop {
        let Ok(req) = kube::core::Request::new(&path).list(&ListParams::default().labels(labels).fields(fields)) else { return };
        let list: BoundList = match client.request(req).await {
            Ok(l) => l,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let now = Instant::now();
        for p in list.items {
            bound.saw(p, now);
        }
        let mut rv = list.metadata.resource_version.unwrap_or_default();
        loop {
            let Ok(req) = kube::core::Request::new(&path).watch(&WatchParams::default().labels(labels).fields(fields).timeout(290), &rv) else { return };
            let Ok(stream) = client.request_events::<BoundPod>(req).await else { break };
            let mut stream = std::pin::pin!(stream);
            let mut ended_cleanly = true;
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Added(p) | WatchEvent::Modified(p)) => {
                        if let Some(v) = &p.metadata.resource_version {
                            rv.clone_from(v);
                        }
                        bound.saw(p, Instant::now());
                    }
                    Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                    Ok(WatchEvent::Deleted(_)) => {}
                    Ok(WatchEvent::Error(_)) | Err(_) => {
                        ended_cleanly = false;
                        break;
                    }
                }
            }
            if !ended_cleanly {
                break;
            }
        }
    }
}

struct Children {
    cluster: Option<Child>,
    daemon: Option<Child>,
}

impl Children {
    async fn stop(&mut self) {
        for c in [self.daemon.as_mut(), self.cluster.as_mut()].into_iter().flatten() {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }
}

async fn wait_for_file(p: &Path, what: &str) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !p.exists() {
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!("{what} did not start within 60 s")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Runs one end-to-end workload.
pub async fn run(o: &E2eOptions) -> Result<E2eFigures, Error> {
    if !WORKLOADS.contains(&o.workload.as_str()) {
        return Err(Error::Workload(o.workload.clone()));
    }
    if o.bind_directly && (o.workload == DRA_WORKLOAD || o.workload == PREEMPTION_WORKLOAD || o.scheduler_name.is_some()) {
        return Err(Error::Stuck(format!("--bind-directly measures the API server with no scheduler: not with --scheduler-name, nor with {DRA_WORKLOAD} or {PREEMPTION_WORKLOAD} (their pods need a scheduler's work)")));
    }
    if o.kubeconfig.is_some() && o.workload == DRA_WORKLOAD && !o.kwok_nodes && !o.static_nodes {
        return Err(Error::Stuck(format!("--workload {DRA_WORKLOAD} with --kubeconfig needs --kwok-nodes or --static-nodes: the run publishes the devices of the nodes it creates")));
    }
    let dir = std::env::temp_dir().join(format!("berth-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let mut children = Children { cluster: None, daemon: None };
    let mut made = Made::default();
    let r = run_in(o, &dir, &mut children, &mut made).await;
    children.stop().await;
    made.clean().await;
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// What a run against an external API server created there, to delete
/// afterwards.
#[derive(Default)]
struct Made {
    client: Option<kube::Client>,
    namespace: Option<String>,
    nodes: Vec<String>,
}

impl Made {
    /// Deletes the pods at once (grace 0: static nodes have no kubelet to
    /// finish a graceful deletion, and the namespace controller's and pod
    /// GC's deletions would otherwise load the server during the next run),
    /// then the namespace and the nodes.
    async fn clean(&mut self) {
        let Some(client) = &self.client else { return };
        if let Some(ns) = &self.namespace {
            let now = kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
            let _ = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns).delete_collection(&now, &ListParams::default()).await;
            let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone()).delete(ns, &Default::default()).await;
        }
        crate::kwok::delete_nodes(client, &self.nodes).await;
    }
}

async fn client_of(kc: &Path) -> Result<kube::Client, Error> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kc).map_err(|e| Error::Client(format!("{}: {e}", kc.display())))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await.map_err(|e| Error::Client(format!("{}: {e}", kc.display())))?;
    kube::Client::try_from(config).map_err(|e| Error::Client(format!("{}: {e}", kc.display())))
}

async fn run_in(o: &E2eOptions, dir: &Path, children: &mut Children, made: &mut Made) -> Result<E2eFigures, Error> {
    let dra = o.workload == DRA_WORKLOAD;
    let (kc, backend, cluster_pid) = match &o.kubeconfig {
        Some(kc) => (kc.clone(), String::new(), None),
        None => {
            let kc = dir.join("kubeconfig");
            let port = free_port()?;
            let devices = if dra { vec!["--devices-per-node".to_string(), DRA_DEVICES_PER_NODE.to_string()] } else { Vec::new() };
            let cluster = Command::new(&o.exe)
                .args(["cluster", "--listen", &format!("127.0.0.1:{port}"), "--nodes", &o.nodes.to_string(), "--zones", "3", "--no-kubelet", "--history", "500000"])
                .args(&devices)
                .arg("--write-kubeconfig")
                .arg(&kc)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(io(format!("starting {} cluster", o.exe.display())))?;
            let pid = cluster.id();
            children.cluster = Some(cluster);
            wait_for_file(&kc, "the local cluster").await?;
            (kc, "local cluster".to_string(), pid)
        }
    };
    let client = client_of(&kc).await?;
    let backend = if backend.is_empty() { server_of(&kc) } else { backend };
    let scheduler = match &o.scheduler_name {
        _ if o.bind_directly => NO_SCHEDULER.to_string(),
        Some(name) => name.clone(),
        None => PROFILE.to_string(),
    };
    let ours = scheduler == PROFILE;
    let target = if o.kubeconfig.is_some() {
        // A namespace of its own on a server that is not the benchmark's.
        let ns = format!("berth-bench-{}", std::process::id());
        made.client = Some(client.clone());
        let obj: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).map_err(|e| Error::Client(e.to_string()))?;
        kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(&PostParams::default(), &obj)
            .await
            .map_err(|e| Error::Client(format!("creating namespace {ns}: {e}")))?;
        made.namespace = Some(ns.clone());
        wait_default_service_account(&client, &ns).await?;
        if o.kwok_nodes || o.static_nodes {
            let mut specs = crate::kwok::spread_nodes(&format!("bench-{}", std::process::id()), o.nodes, "4", "32Gi", 110);
            for s in &mut specs {
                s.ready_at_create = o.static_nodes;
            }
            made.nodes = specs.iter().map(|s| s.name.clone()).collect();
            let nodes = crate::kwok::create_nodes(&client, &specs, 32).await.map_err(|e| Error::Stuck(e.to_string()))?;
            crate::kwok::wait_schedulable(&client, &made.nodes, true, 300).await.map_err(|e| Error::Stuck(e.to_string()))?;
            if dra {
                crate::kwok::publish_devices(&client, &nodes, &berth_cluster::dra_driver::DevicesConfig::per_node(DRA_DEVICES_PER_NODE)).await.map_err(|e| Error::Stuck(e.to_string()))?;
            }
        }
        Target { ns, scheduler: scheduler.clone() }
    } else {
        Target { ns: "default".into(), scheduler: scheduler.clone() }
    };

    let daemon_pid = if ours {
        let cfg = dir.join("config.yaml");
        let yaml = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\nclientConnection:\n  qps: {}\n  burst: {}\nprofiles:\n- schedulerName: {PROFILE}\n",
            o.qps, o.burst
        );
        std::fs::write(&cfg, yaml).map_err(io(format!("writing {}", cfg.display())))?;
        let log = std::fs::File::create(dir.join("daemon.log")).map_err(io("creating the daemon log"))?;
        let daemon = Command::new(&o.exe)
            .arg("run")
            .arg("--config")
            .arg(&cfg)
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["--bind-address", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(io(format!("starting {} run", o.exe.display())))?;
        let pid = daemon.id();
        children.daemon = Some(daemon);
        pid
    } else {
        o.scheduler_pid
    };

    let bind_to = if o.bind_directly { Some(Arc::new(node_names(&client).await?)) } else { None };
    let load = Load { client: client.clone(), target: target.clone(), bind_to };

    // Bound times, from the watch.
    let bound: Arc<Bound> = Arc::default();
    let watching = tokio::spawn(watch_bound(client.clone(), target.clone(), bound.clone()));

    if dra {
        create_template(&client, &target).await?;
    }
    let preempt = o.workload == PREEMPTION_WORKLOAD;
    if preempt {
        create_priority_class(&client).await?;
    }
    let spread = o.workload == "TopologySpreading";
    let template = Arc::new(if preempt { preemption_body(&target, true) } else { PodBody::new(&target, "100m", spread, dra) });
    let creators = o.creators.max(1);

    // Warm-up: the scheduler is ready (caches synced, leading) once it binds
    // these. The DRA workload's are its init pods: half of the devices; the
    // preemption workload's fill every node with victims.
    let devices = o.nodes * DRA_DEVICES_PER_NODE;
    let (warm, warm_template, warm_secs) = match () {
        () if dra => ((devices / 2).max(1), template.clone(), 300),
        () if preempt => (o.nodes * PREEMPTION_VICTIMS_PER_NODE, Arc::new(preemption_body(&target, false)), 300),
        () => (50, template.clone(), 120),
    };
    create_many(&load, &warm_template, "warm", warm, if dra || preempt { creators } else { 1 }, None).await?;
    let deadline = Instant::now() + Duration::from_secs(warm_secs);
    loop {
        let n = bound.len();
        if n >= warm {
            break;
        }
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!("the scheduler bound {n} of {warm} warm-up pods within {warm_secs} s (see its log in {})", dir.display())));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Unschedulable pods first, so that they sit in the queue while the others are measured.
    let unschedulable = if o.workload == "Unschedulable" { o.pods / 10 } else { 0 };
    for i in 0..unschedulable {
        create(&client, &target, pod(&target, &format!("big-{i}"), "100", false)).await.map_err(|e| Error::Client(format!("creating unschedulable pods: {e}")))?;
    }

    // The measured pods, from `creators` concurrent clients (for DRA, at
    // most as many as there are free devices; for preemption, one per node).
    let measured = match () {
        () if dra => o.pods.min(devices - warm),
        () if preempt => o.pods.min(o.nodes),
        () => o.pods,
    };
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let cpu_before = cpu_seconds(daemon_pid);
    let first = Instant::now();
    create_many(&load, &template, "p", measured, creators, Some(created.clone())).await?;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let done = bound.measured.load(Ordering::Relaxed);
        if done >= measured {
            break;
        }
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!("{done} of {measured} pods bound within 300 s")));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu = cpu_seconds(daemon_pid) - cpu_before;
    watching.abort();
    let scheduler_peak_rss_mb = peak_rss_mb(daemon_pid);
    let cluster_peak_rss_mb = peak_rss_mb(cluster_pid);

    let (bound, created) = match (bound.at.lock(), created.lock()) {
        (Ok(b), Ok(c)) => (b.clone(), c.clone()),
        _ => return Err(Error::Stuck("a recording thread panicked".into())),
    };
    let claims_allocated = if dra { check_claims(&client, &target, warm + measured).await? } else { 0 };
    let mut lat: Vec<f64> = Vec::with_capacity(measured);
    let mut last = first;
    for (name, t0) in &created {
        if let Some(t1) = bound.get(name) {
            lat.push(t1.saturating_duration_since(*t0).as_secs_f64() * 1000.0);
            last = last.max(*t1);
        }
    }
    lat.sort_by(f64::total_cmp);
    let pct = |q: f64| crate::bench::percentile(&lat, q);
    Ok(E2eFigures {
        workload: o.workload.clone(),
        backend,
        scheduler,
        nodes: o.nodes,
        pods: lat.len(),
        unschedulable_pods: unschedulable,
        init_pods: if dra { warm } else { 0 },
        claims_allocated,
        pods_per_second: lat.len() as f64 / last.saturating_duration_since(first).as_secs_f64().max(1e-9),
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        scheduler_peak_rss_mb,
        scheduler_cpu_s_per_1000_pods: if daemon_pid.is_some() && measured > 0 { cpu / measured as f64 * 1000.0 } else { 0.0 },
        cluster_peak_rss_mb,
        qps: o.qps,
        burst: o.burst,
    })
}

/// The server URL of a kubeconfig's current context, for the figures.
fn server_of(kc: &Path) -> String {
    kube::config::Kubeconfig::read_from(kc)
        .ok()
        .and_then(|k| {
            let ctx = k.current_context.clone()?;
            let cluster = k.contexts.iter().find(|c| c.name == ctx)?.context.as_ref()?.cluster.clone();
            k.clusters.iter().find(|c| c.name == cluster)?.cluster.as_ref()?.server.clone()
        })
        .unwrap_or_else(|| kc.display().to_string())
}

/// Where the pods go: the client, the namespace and scheduler, and with
/// `--bind-directly` the nodes the creating clients bind them to.
struct Load {
    client: kube::Client,
    target: Target,
    bind_to: Option<Arc<Vec<String>>>,
}

/// Waits until kube-controller-manager has made the namespace's `default`
/// ServiceAccount: until then the ServiceAccount admission plugin refuses
/// every pod (the first creates of a run on a busy machine met it).
async fn wait_default_service_account(client: &kube::Client, ns: &str) -> Result<(), Error> {
    let api = kube::Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match api.get_opt("default").await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            Ok(None) => return Err(Error::Stuck(format!("namespace {ns} got no default ServiceAccount within 60 s (is kube-controller-manager's serviceaccount-controller running?)"))),
            Err(e) => return Err(Error::Client(format!("reading ServiceAccount {ns}/default: {e}"))),
        }
    }
}

/// The names of the cluster's nodes, for `--bind-directly`.
async fn node_names(client: &kube::Client) -> Result<Vec<String>, Error> {
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(client.clone()).list_metadata(&ListParams::default()).await.map_err(|e| Error::Client(format!("listing nodes: {e}")))?;
    let names: Vec<String> = nodes.items.into_iter().filter_map(|n| n.metadata.name).collect();
    if names.is_empty() {
        return Err(Error::Stuck("--bind-directly: the cluster has no nodes to bind to".into()));
    }
    Ok(names)
}

/// Binds a pod to a node through `pods/binding`, as a scheduler does.
async fn bind(client: &kube::Client, t: &Target, name: &str, node: &str) -> Result<(), kube::Error> {
    let body = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": t.ns}, "target": {"kind": "Node", "name": node}});
    let req = kube::core::Request::new(t.pods_path()).create_subresource("binding", name, &PostParams::default(), body.to_string().into_bytes()).map_err(kube::Error::BuildRequest)?;
    client.request::<serde::de::IgnoredAny>(req).await.map(|_| ())
}

/// Creates `total` pods named `<prefix>-<i>` from `template`, from
/// `creators` concurrent clients, recording each create's start in
/// `created`; with `bind_to`, each client binds its pod right after
/// creating it (round-robin over those nodes).
async fn create_many(load: &Load, template: &Arc<PodBody>, prefix: &'static str, total: usize, creators: usize, created: Option<Arc<Mutex<HashMap<String, Instant>>>>) -> Result<(), Error> {
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..creators.max(1) {
        let client = load.client.clone();
        let created = created.clone();
        let template = template.clone();
        let target = load.target.clone();
        let bind_to = load.bind_to.clone();
        tasks.spawn(async move {
            let mut i = c;
            while i < total {
                let name = format!("{prefix}-{i}");
                let body = template.with_name(&name);
                let t = Instant::now();
                create(&client, &target, body).await.map_err(|e| Error::Client(format!("creating {name}: {e}")))?;
                if let Some(Ok(mut m)) = created.as_ref().map(|c| c.lock()) {
                    m.insert(name.clone(), t);
                }
                if let Some(nodes) = bind_to.as_deref().filter(|n| !n.is_empty()) {
                    let node = &nodes[i % nodes.len()];
                    bind(&client, &target, &name, node).await.map_err(|e| Error::Client(format!("binding {name} to {node}: {e}")))?;
                }
                i += creators.max(1);
            }
            Ok::<(), Error>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| Error::Client(e.to_string()))??;
    }
    Ok(())
}

/// The DRA workload's ResourceClaimTemplate: one device of the simulated
/// driver's class (scheduler_perf's template asks for one of its class).
async fn create_template(client: &kube::Client, t: &Target) -> Result<(), Error> {
    use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
    let class = berth_cluster::dra_driver::DEFAULT_DRIVER;
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "metadata": {"name": DRA_TEMPLATE, "namespace": t.ns},
        "spec": {"spec": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": class}}]}}},
    }))
    .map_err(|e| Error::Client(format!("the ResourceClaimTemplate: {e}")))?;
    kube::Api::<ResourceClaimTemplate>::namespaced(client.clone(), &t.ns)
        .create(&PostParams::default(), &template)
        .await
        .map_err(|e| Error::Client(format!("creating ResourceClaimTemplate {DRA_TEMPLATE}: {e}")))?;
    Ok(())
}

/// The preemption workload's PriorityClass (value 10, as scheduler_perf's
/// high-priority pods), unless the server has it already. Cluster-scoped:
/// it is left for the next run.
async fn create_priority_class(client: &kube::Client) -> Result<(), Error> {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let pc: PriorityClass = serde_json::from_value(json!({"metadata": {"name": HIGH_PRIORITY_CLASS}, "value": 10, "description": "berth bench --e2e PreemptionBasic's preemptors"}))
        .map_err(|e| Error::Client(format!("the PriorityClass: {e}")))?;
    match kube::Api::<PriorityClass>::all(client.clone()).create(&PostParams::default(), &pc).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(Error::Client(format!("creating PriorityClass {HIGH_PRIORITY_CLASS}: {e}"))),
    }
}

/// Reads the claims back once every pod is bound: at least `want` of them
/// allocated (one per pod), and no device in two allocations. Returns how
/// many are allocated.
async fn check_claims(client: &kube::Client, t: &Target, want: usize) -> Result<usize, Error> {
    use k8s_openapi::api::resource::v1::ResourceClaim;
    let claims = kube::Api::<ResourceClaim>::namespaced(client.clone(), &t.ns).list(&ListParams::default()).await.map_err(|e| Error::Client(format!("listing claims: {e}")))?;
    let mut given: HashMap<(String, String, String), String> = HashMap::new();
    let mut allocated = 0;
    for c in &claims.items {
        let name = c.metadata.name.clone().unwrap_or_default();
        let results = c.status.as_ref().and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref()).and_then(|d| d.results.as_ref());
        let Some(results) = results.filter(|r| !r.is_empty()) else { continue };
        allocated += 1;
        for r in results {
            if let Some(other) = given.insert((r.driver.clone(), r.pool.clone(), r.device.clone()), name.clone()) {
                return Err(Error::Claims(format!("device {}/{}/{} is allocated to both {other} and {name}", r.driver, r.pool, r.device)));
            }
        }
    }
    if allocated < want {
        return Err(Error::Claims(format!("{allocated} of {want} claims allocated, with every pod bound")));
    }
    Ok(allocated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target { ns: "default".into(), scheduler: PROFILE.into() }
    }

    #[test]
    fn a_pod_body_is_the_template_with_its_name() {
        for spread in [false, true] {
            let t = PodBody::new(&target(), "100m", spread, false);
            for name in ["p-0", "warm-17", "odd \"name\""] {
                let v: serde_json::Value = serde_json::from_slice(&t.with_name(name)).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(v["metadata"]["name"], name);
                assert_eq!(v["spec"]["containers"][0]["resources"]["requests"]["cpu"], "100m");
                assert_eq!(v["spec"]["topologySpreadConstraints"].is_array(), spread);
                assert!(v["spec"]["resourceClaims"].is_null());
            }
        }
    }

    #[test]
    fn the_preemption_bodies_are_scheduler_perfs_victims_and_preemptors() {
        let low: serde_json::Value = serde_json::from_slice(&preemption_body(&target(), false).with_name("warm-0")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((low["spec"]["terminationGracePeriodSeconds"].as_i64(), low["spec"]["priorityClassName"].as_str()), (Some(0), None));
        assert_eq!(low["spec"]["containers"][0]["resources"]["requests"]["cpu"], "900m");
        let high: serde_json::Value = serde_json::from_slice(&preemption_body(&target(), true).with_name("p-0")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((high["metadata"]["name"].as_str(), high["spec"]["priorityClassName"].as_str()), (Some("p-0"), Some(HIGH_PRIORITY_CLASS)));
        assert_eq!(high["spec"]["containers"][0]["resources"]["requests"]["cpu"], "3");
    }

    #[test]
    fn a_dra_pod_body_names_the_template_and_uses_its_claim() {
        let v: serde_json::Value = serde_json::from_slice(&PodBody::new(&target(), "100m", false, true).with_name("p-3")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["metadata"]["name"], "p-3");
        assert_eq!(v["spec"]["resourceClaims"][0]["resourceClaimTemplateName"], DRA_TEMPLATE);
        assert_eq!(v["spec"]["containers"][0]["resources"]["claims"][0]["name"], "resource");
        assert!(serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(v).is_ok());
    }
}
