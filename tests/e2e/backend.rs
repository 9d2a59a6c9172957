//! Where a two-backend scenario runs: berth's local cluster, or a real
//! control plane (etcd, kube-apiserver, kube-controller-manager and KWOK's
//! fake nodes) started by `tools/kube/up DIR`.
//!
//! A scenario is written once against [`Backend`] and has two tests: one on
//! the local cluster (always run) and one on the real control plane,
//! `#[ignore]`d by default because it needs the control plane running. CI
//! starts it and runs them (`BERTH_KUBE_DIR=DIR cargo test --test e2e real_
//! -- --ignored`); a real test run without `BERTH_KUBE_DIR` fails, it never
//! passes without having run.
//!
//! Scenarios create their own nodes through the API (as KWOK nodes, which
//! the local cluster's kubelets serve too), work in a namespace of their
//! own, and delete both at the end. On the real control plane they run one
//! at a time (one process-wide lock), because one scheduler sees every node.
#![allow(clippy::unwrap_used, dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_cluster::{ClusterConfig, LocalCluster};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};

use crate::e2e_support::{auth_config, eventually, node_of, pod_milli_cpu};

/// The environment variable naming the directory `tools/kube/up` wrote.
pub const KUBE_DIR_ENV: &str = "BERTH_KUBE_DIR";

/// One real-backend scenario at a time in this process.
static REAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A cluster a scenario runs against (one per test: its size does not matter).
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    Local(LocalCluster),
    Real { client: kube::Client, dir: PathBuf, _turn: tokio::sync::MutexGuard<'static, ()> },
}

pub use berth_lab::kwok::NodeSpec;

impl Backend {
    /// The local cluster, with no nodes of its own (scenarios add theirs)
    /// and its controllers on, as kube-controller-manager runs beside the
    /// real API server (garbage collection, disruption budgets' status,
    /// generated ResourceClaims).
    pub async fn local() -> Backend {
        crate::e2e_support::init_logs();
        let controllers = berth_cluster::controllers::ControllersConfig { resync: Duration::from_millis(500), ..Default::default() };
        let cfg = ClusterConfig {
            nodes: 0,
            controllers,
            kubelet: berth_cluster::KubeletConfig { enabled: true, start_delay: Duration::from_millis(20) },
            bookmark_interval: Duration::from_millis(500),
            auth: auth_config(),
            ..Default::default()
        };
        Backend::Local(LocalCluster::start(cfg).await.unwrap())
    }

    /// The real control plane of `$BERTH_KUBE_DIR` (its admin kubeconfig),
    /// once the scenarios before this one have finished. Panics, failing the
    /// test, when the variable is not set.
    pub async fn real() -> Backend {
        crate::e2e_support::init_logs();
        let dir = std::env::var_os(KUBE_DIR_ENV).map(PathBuf::from).unwrap_or_else(|| {
            panic!("{KUBE_DIR_ENV} is not set: start a real control plane with `tools/kube/up DIR` and run with {KUBE_DIR_ENV}=DIR")
        });
        let turn = REAL.lock().await;
        let kubeconfig = dir.join("kubeconfig");
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()));
        let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
        Backend::Real { client, dir, _turn: turn }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Backend::Local(_) => "local",
            Backend::Real { .. } => "real",
        }
    }

    pub fn is_real(&self) -> bool {
        matches!(self, Backend::Real { .. })
    }

    /// An administrator's client.
    pub fn client(&self) -> kube::Client {
        match self {
            Backend::Local(c) => c.client().unwrap(),
            Backend::Real { client, .. } => client.clone(),
        }
    }

    /// Creates `ns` (waiting out a namespace of that name still terminating
    /// from an earlier run).
    pub async fn namespace(&self, ns: &str) {
        let api: Api<Namespace> = Api::all(self.client());
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        eventually(120, &format!("namespace {ns} created"), || async {
            match api.create(&PostParams::default(), &obj).await {
                Ok(_) => Some(()),
                Err(kube::Error::Api(s)) if s.code == 409 => None,
                Err(e) => panic!("creating namespace {ns}: {e}"),
            }
        })
        .await;
    }

    /// Creates the nodes and waits until each is schedulable: on the real
    /// control plane KWOK reports it Ready and the node lifecycle controller
    /// has lifted its `not-ready` taint.
    /// Returns each node's name and uid.
    pub async fn add_nodes(&self, specs: &[NodeSpec]) -> Vec<(String, String)> {
        let client = self.client();
        let made = berth_lab::kwok::create_nodes(&client, specs, 16).await.unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        berth_lab::kwok::wait_schedulable(&client, &names, self.is_real(), 120).await.unwrap_or_else(|e| panic!("{e}"));
        made
    }

    /// Deletes the scenario's namespace and nodes (and, on the local
    /// cluster, stops it).
    pub async fn finish(self, ns: &str, nodes: &[NodeSpec]) {
        let client = self.client();
        let nsapi: Api<Namespace> = Api::all(client.clone());
        let _ = nsapi.delete(ns, &DeleteParams::default()).await;
        let names: Vec<String> = nodes.iter().map(|s| s.name.clone()).collect();
        berth_lab::kwok::delete_nodes(&client, &names).await;
        if let Backend::Local(c) = self {
            c.shutdown().await;
        }
    }
}

/// Every pod of `ns`.
pub async fn pods_in(client: &kube::Client, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns).list(&ListParams::default()).await.unwrap().items
}

/// Each pod's first node, and the pods whose node changed.
type Binds = (HashMap<String, String>, Vec<String>);

/// Every pod's node as bindings happen (a watch on `ns`, with backoff: the
/// server goes away in the fault tests),
/// and any pod whose node changed after it was first bound.
#[derive(Clone, Default)]
pub struct BindLog {
    inner: Arc<Mutex<Binds>>,
}

impl BindLog {
    pub fn start(client: kube::Client, ns: &str) -> (BindLog, tokio::task::JoinHandle<()>) {
        let log = BindLog::default();
        let api: Api<Pod> = Api::namespaced(client, ns);
        let l = log.clone();
        let task = tokio::spawn(async move {
            // With backoff: the server goes away in these tests.
            let mut s = watcher(api, watcher::Config::default()).default_backoff().applied_objects().boxed();
            while let Some(ev) = s.next().await {
                let Ok(p) = ev else { continue };
                let (Some(name), Some(node)) = (p.metadata.name.clone(), node_of(&p).map(str::to_string)) else { continue };
                let mut g = l.inner.lock().unwrap();
                match g.0.get(&name).cloned() {
                    None => {
                        g.0.insert(name, node);
                    }
                    Some(prev) if prev != node => g.1.push(format!("{name}: {prev} -> {node}")),
                    Some(_) => {}
                }
            }
        });
        (log, task)
    }

    pub fn bound(&self) -> usize {
        self.inner.lock().unwrap().0.len()
    }

    pub fn rebinds(&self) -> Vec<String> {
        self.inner.lock().unwrap().1.clone()
    }

    /// The node `pod` was first seen bound to.
    pub fn node(&self, pod: &str) -> Option<String> {
        self.inner.lock().unwrap().0.get(pod).cloned()
    }
}

/// No node holds more CPU requests than it has (the scenario's pods are
/// the only ones on its nodes); returns (used, capacity) in millicores.
pub fn assert_capacity(pods: &[Pod], nodes: &[NodeSpec]) -> (i64, i64) {
    let cap: HashMap<&str, i64> = nodes.iter().map(|n| (n.name.as_str(), n.cpu.parse::<i64>().unwrap() * 1000)).collect();
    let mut used: HashMap<&str, i64> = HashMap::new();
    for p in pods {
        if let Some(n) = node_of(p) {
            *used.entry(n).or_default() += pod_milli_cpu(p);
        }
    }
    for (n, u) in &used {
        let c = cap.get(n).copied().unwrap_or_else(|| panic!("a pod is bound to {n}, not one of the scenario's nodes"));
        assert!(*u <= c, "node {n} is over capacity: {u}m of {c}m requested");
    }
    (used.values().sum(), cap.values().sum())
}
