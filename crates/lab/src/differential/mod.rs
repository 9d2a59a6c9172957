//! `berth differential`: berth's decisions against another scheduler's (the
//! real kube-scheduler), on the same cluster, pod by pod.
//!
//! A seed makes a cluster and a workload ([`generate`]: nodes in zones with
//! labels, taints, capacities, an extended resource and DRA devices; pods
//! with requests, priorities, spread constraints explicit and default,
//! required and preferred node and pod (anti-)affinity, tolerations,
//! PodDisruptionBudgets, Services and claims). The nodes are created as KWOK nodes on the API server of a
//! kubeconfig (`tools/kube/up DIR --kube-scheduler` starts kube-scheduler
//! 1.37.2 as `default-scheduler` beside it); the pods name the judged
//! scheduler and are created one at a time, each once the one before it is
//! bound or reported unschedulable, so that every binding is made, and
//! judged, on the state it was made in. berth runs in process in shadow
//! mode with upstream's default profile and judges every binding (`same`,
//! `tie`, `lower`, `infeasible`, `unschedulable`; see docs/shadow.md).
//!
//! The pods the judged scheduler leaves Pending are compared too: its
//! PodScheduled condition (reason and message) against berth's `explain`
//! of the same pod on a listing of the cluster taken right after the
//! judged scheduler decided it (before the next pod), word for word.
//!
//! Pods with claims are judged on their node like every other pod; which
//! devices the judged scheduler picked is compared in the reverse
//! direction ([`run_reverse`]), where berth decides first.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_daemon::shadow::{Disagreement, ShadowLog, Verdict};
use berth_engine::config::Config;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde::Serialize;
use serde_json::{Value, json};

mod generate;
mod reverse;

pub use generate::{EXTENDED, MODELS, SHARED_CLAIM, TEMPLATES, Workload, generate};
pub use reverse::{ReverseCounts, ReverseReport, run_reverse};

/// Why a differential run could not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read or used.
    #[error("{path}: {why}")]
    Kubeconfig {
        /// Its path.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// A request failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// The nodes.
    #[error(transparent)]
    Nodes(#[from] crate::kwok::Error),
    /// berth's shadow could not start or answer.
    #[error("berth's shadow: {0}")]
    Shadow(String),
    /// The judged scheduler did not decide a pod in time.
    #[error("{0}")]
    Stuck(String),
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// One run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The API server.
    pub kubeconfig: PathBuf,
    /// The seed of the cluster and the workload.
    pub seed: u64,
    /// Nodes.
    pub nodes: usize,
    /// Pods.
    pub pods: usize,
    /// The scheduler that binds the pods (and that berth's profile is named after).
    pub scheduler_name: String,
    /// How long one pod may wait for the judged scheduler's decision.
    pub per_pod_timeout: Duration,
    /// Leave the namespace and the nodes in place afterwards (to look into
    /// a disagreement with kubectl or `berth explain`).
    pub keep: bool,
}

/// A pod the judged scheduler left Pending, and berth's view of it.
#[derive(Clone, Debug, Serialize)]
pub struct PendingCompare {
    /// "ns/name".
    pub pod: String,
    /// The judged scheduler's PodScheduled reason and message.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// berth's message for the same pod (None: berth would place it).
    pub berth_message: Option<String>,
    /// berth's node, when berth would place it.
    pub berth_node: Option<String>,
    /// The two messages are the same, word for word.
    pub same_message: bool,
}

/// One seed's report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Nodes.
    pub nodes: usize,
    /// Pods created.
    pub pods: usize,
    /// Pods bound by the judged scheduler.
    pub bound: usize,
    /// berth's verdicts on those bindings.
    pub counts: BTreeMap<Verdict, u64>,
    /// Each disagreement, with both nodes' per-plugin scores.
    pub disagreements: Vec<Disagreement>,
    /// The pods left Pending, compared.
    pub pending: Vec<PendingCompare>,
    /// Wall time of the run.
    pub seconds: f64,
}

impl Report {
    /// The count of one verdict.
    pub fn count(&self, v: Verdict) -> u64 {
        self.counts.get(&v).copied().unwrap_or(0)
    }

    /// One line: `seed S: P pods, B bound: same A, tie B, lower C, infeasible D, unschedulable E; pending N (messages same M)`.
    pub fn line(&self) -> String {
        let same_msgs = self.pending.iter().filter(|p| p.same_message).count();
        format!(
            "seed {}: {} pods on {} nodes, {} bound: same {}, tie {}, lower {}, infeasible {}, unschedulable {}; pending {} (messages same {}) in {:.0} s",
            self.seed,
            self.pods,
            self.nodes,
            self.bound,
            self.count(Verdict::Same),
            self.count(Verdict::Tie),
            self.count(Verdict::Lower),
            self.count(Verdict::Infeasible),
            self.count(Verdict::Unschedulable),
            self.pending.len(),
            same_msgs,
            self.seconds
        )
    }
}

async fn client_of(path: &PathBuf) -> Result<kube::Client, Error> {
    let err = |why: String| Error::Kubeconfig {
        path: path.clone(),
        why,
    };
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    kube::Client::try_from(cfg).map_err(|e| err(e.to_string()))
}

/// Creates a namespaced or cluster-scoped object from its JSON (kept when it exists).
async fn create_value(client: &kube::Client, ns: &str, v: &Value) -> Result<(), Error> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let api_version = v["apiVersion"].as_str().unwrap_or("v1");
    let kind = v["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let objects: Api<DynamicObject> = if matches!(kind, "PriorityClass" | "DeviceClass") {
        Api::all_with(client.clone(), &ar)
    } else {
        Api::namespaced_with(client.clone(), ns, &ar)
    };
    let obj: DynamicObject = serde_json::from_value(v.clone())
        .map_err(|e| api(kind.to_string())(kube::Error::SerdeError(e)))?;
    match objects.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(api(format!("creating {kind} {}", v["metadata"]["name"]))(e)),
    }
}

/// The judged scheduler's decision on a pod: bound (to a node), or
/// unschedulable (PodScheduled False, Unschedulable, and no nomination
/// pending), or None while it has not decided.
fn decided(p: &Pod) -> Option<Result<String, (String, String)>> {
    if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
        return Some(Ok(n));
    }
    let st = p.status.as_ref()?;
    if st.nominated_node_name.is_some() {
        return None;
    }
    // A gated pod's condition (reason SchedulingGated) is no decision.
    let c = st.conditions.as_ref()?.iter().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() != Some("SchedulingGated")
    })?;
    Some(Err((
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    )))
}

/// A pod the judged scheduler left Pending: its condition against berth's
/// `explain` of the same pod on the cluster as it is now.
async fn explain_now(
    client: &kube::Client,
    cfg: &Config,
    ns: &str,
    name: &str,
    reason: String,
    message: String,
) -> Result<PendingCompare, Error> {
    let listing = berth_daemon::live::list_for_scheduler(client, 500)
        .await
        .map_err(|e| Error::Shadow(e.to_string()))?;
    let cluster = berth_engine::offline::Cluster::from_documents(listing.objects, "the API server")
        .map_err(|e| Error::Shadow(e.to_string()))?;
    let engine = berth_engine::offline::Engine::new(cfg, cluster, 0);
    let key = format!("{ns}/{name}");
    let (berth_message, berth_node) = match engine.explain(&key) {
        Ok(e) => (e.message.clone(), e.selected.clone()),
        Err(e) => (Some(format!("berth could not explain it: {e}")), None),
    };
    let same_message = berth_message.as_deref() == Some(message.as_str());
    Ok(PendingCompare {
        pod: key,
        reason,
        message,
        berth_message,
        berth_node,
        same_message,
    })
}

/// Runs one seed.
pub async fn run(o: &Options) -> Result<Report, Error> {
    let t0 = Instant::now();
    let client = client_of(&o.kubeconfig).await?;
    let w = generate(o.seed, o.nodes, o.pods, &o.scheduler_name);
    let ns = format!("differential-{}", o.seed);
    let r = run_in(o, &client, &w, &ns).await;
    clean_up(o, &client, &w, &ns).await;
    let mut report = r?;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// Deletes the seed's namespace and nodes, whatever happened (unless
/// `keep`).
async fn clean_up(o: &Options, client: &kube::Client, w: &Workload, ns: &str) {
    if o.keep {
        return;
    }
    let nsapi: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = nsapi.delete(ns, &DeleteParams::default()).await;
    let names: Vec<String> = w.nodes.iter().map(|n| n.name.clone()).collect();
    crate::kwok::delete_nodes(client, &names).await;
}

/// Upstream's default profile under the judged scheduler's name.
fn default_profile(scheduler: &str) -> Result<Config, Error> {
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {scheduler}\n"
    );
    Config::parse(&yaml).map_err(|e| Error::Shadow(e.to_string()))
}

/// The seed's namespace (waiting out one of the same name from an
/// interrupted run), nodes, devices and other objects.
async fn prepare(client: &kube::Client, w: &Workload, ns: &str) -> Result<(), Error> {
    let nsapi: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let obj = serde_json::from_value(json!({"metadata": {"name": ns}}))
            .map_err(|e| api("namespace")(kube::Error::SerdeError(e)))?;
        match nsapi.create(&PostParams::default(), &obj).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 409 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await
            }
            Err(e) => return Err(api(format!("creating namespace {ns}"))(e)),
        }
    }
    let made = crate::kwok::create_nodes(client, &w.nodes, 16).await?;
    crate::kwok::wait_schedulable(
        client,
        &w.nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>(),
        true,
        180,
    )
    .await?;
    crate::kwok::publish_devices(client, &made, &w.devices).await?;
    for v in &w.objects {
        create_value(client, ns, v).await?;
    }
    Ok(())
}

async fn run_in(
    o: &Options,
    client: &kube::Client,
    w: &Workload,
    ns: &str,
) -> Result<Report, Error> {
    prepare(client, w, ns).await?;
    let cfg = default_profile(&o.scheduler_name)?;
    let opts = berth_daemon::Options {
        bind_address: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        shadow: true,
        identity: format!("differential-{}", o.seed),
        ..Default::default()
    };
    let shadow = berth_daemon::start(client.clone(), &cfg, opts)
        .await
        .map_err(|e| Error::Shadow(e.to_string()))?;
    let mut ready = shadow.ready.clone();
    tokio::time::timeout(Duration::from_secs(60), ready.wait_for(|r| *r))
        .await
        .map_err(|_| Error::Shadow("not ready within 60 s".into()))?
        .map_err(|e| Error::Shadow(e.to_string()))?;
    let log: Arc<ShadowLog> = shadow
        .shadow
        .clone()
        .ok_or_else(|| Error::Shadow("no shadow log".into()))?;

    // The pods, one at a time, each once the judged scheduler has decided the one before.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut bound = 0;
    let mut pending = Vec::new();
    for v in &w.pods {
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let pod: Pod = serde_json::from_value(v.clone())
            .map_err(|e| api(format!("pod {name}"))(kube::Error::SerdeError(e)))?;
        pods.create(&PostParams::default(), &pod)
            .await
            .map_err(api(format!("creating pod {name}")))?;
        let deadline = Instant::now() + o.per_pod_timeout;
        loop {
            let p = pods
                .get(&name)
                .await
                .map_err(api(format!("reading pod {name}")))?;
            match decided(&p) {
                Some(Ok(_)) => {
                    bound += 1;
                    break;
                }
                Some(Err((reason, message))) => {
                    // berth's explanation on the state the judged scheduler
                    // decided on: now, before the next pod is created (later
                    // pods change it: the message would then count nodes
                    // that were full only afterwards).
                    pending.push(explain_now(client, &cfg, ns, &name, reason, message).await?);
                    break;
                }
                None if Instant::now() > deadline => {
                    return Err(Error::Stuck(format!(
                        "{} did not decide pod {ns}/{name} within {:?}",
                        o.scheduler_name, o.per_pod_timeout
                    )));
                }
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
    // Every binding judged: the shadow has seen as many as were made.
    let deadline = Instant::now() + Duration::from_secs(30);
    while log.counts().values().sum::<u64>() < bound as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = log.report();
    shadow.shutdown().await;

    Ok(Report {
        seed: o.seed,
        nodes: w.nodes.len(),
        pods: w.pods.len(),
        bound,
        counts: report.counts,
        disagreements: report.disagreements,
        pending,
        seconds: 0.0,
    })
}
