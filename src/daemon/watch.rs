//! Watchers on Pods, Nodes, PodDisruptionBudgets and Namespaces. Each runs
//! kube-rs's watcher (which resumes from the last resourceVersion, relists on
//! 410 Gone and backs off on errors) and sends changes to the scheduling loop.
//! A relist arrives as one `Relist` with every object, so the loop can drop
//! what disappeared while the watch was down: nothing is lost or counted twice.

use std::fmt::Debug;

use futures::StreamExt;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::api::policy::v1 as policy;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch as signal};

use crate::cache::workloads::{self, Kind, Workloads};

/// A change to one kind of object.
#[derive(Debug)]
pub enum Change<K> {
    /// Added or modified.
    Apply(K),
    /// Deleted.
    Delete(K),
    /// The complete current set after a (re)list.
    Relist(Vec<K>),
}

/// A change from one of the watchers.
// Pods dwarf the other kinds; each event is moved once through the channel,
// so boxing would cost an allocation per event for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum WatchEvent {
    /// Pods.
    Pod(Change<core::Pod>),
    /// Nodes.
    Node(Change<core::Node>),
    /// PodDisruptionBudgets.
    Pdb(Change<policy::PodDisruptionBudget>),
    /// Namespaces.
    Namespace(Change<core::Namespace>),
    /// Services, ReplicationControllers, ReplicaSets, StatefulSets (default topology spreading).
    Workload(WorkloadChange),
}

/// A change to one of the kinds default topology spreading reads.
#[derive(Debug)]
pub enum WorkloadChange {
    /// Services.
    Service(Change<core::Service>),
    /// ReplicationControllers.
    ReplicationController(Change<core::ReplicationController>),
    /// ReplicaSets.
    ReplicaSet(Change<apps::ReplicaSet>),
    /// StatefulSets.
    StatefulSet(Change<apps::StatefulSet>),
}

/// Applies a workload change to the cache's workloads. Returns the index
/// (0..4: Service, ReplicationController, ReplicaSet, StatefulSet) of a kind
/// whose (re)list just completed, for readiness. No pod is requeued: upstream's
/// PodTopologySpread registers no event of these kinds.
pub fn apply_workload_event(w: &mut Workloads, ev: WorkloadChange) -> Option<usize> {
    fn apply<K>(w: &mut Workloads, c: Change<K>, kind: Kind, meta: fn(&K) -> &ObjectMeta, up: fn(&mut Workloads, &K) -> Result<(), workloads::Error>) -> bool {
        let put = |w: &mut Workloads, o: &K| {
            if let Err(e) = up(w, o) {
                tracing::warn!(error = %e, "selector ignored for default topology spreading");
            }
        };
        match c {
            Change::Apply(o) => put(w, &o),
            Change::Delete(o) => {
                let m = meta(&o);
                w.remove(kind, m.namespace.as_deref().unwrap_or("default"), m.name.as_deref().unwrap_or_default());
            }
            Change::Relist(all) => {
                w.clear(kind);
                for o in &all {
                    put(w, o);
                }
                return true;
            }
        }
        false
    }
    let (i, done) = match ev {
        WorkloadChange::Service(c) => (0, apply(w, c, Kind::Service, |o| &o.metadata, |w, o| {
            w.upsert_service(o);
            Ok(())
        })),
        WorkloadChange::ReplicationController(c) => (1, apply(w, c, Kind::ReplicationController, |o| &o.metadata, |w, o| {
            w.upsert_replication_controller(o);
            Ok(())
        })),
        WorkloadChange::ReplicaSet(c) => (2, apply(w, c, Kind::ReplicaSet, |o| &o.metadata, Workloads::upsert_replica_set)),
        WorkloadChange::StatefulSet(c) => (3, apply(w, c, Kind::StatefulSet, |o| &o.metadata, Workloads::upsert_stateful_set)),
    };
    done.then_some(i)
}

/// Starts the watchers of the four workload kinds (see `WorkloadChange`).
pub fn spawn_workloads(client: kube::Client, tx: mpsc::Sender<WatchEvent>, stop: signal::Receiver<bool>, tasks: &mut tokio::task::JoinSet<()>) {
    use WorkloadChange as W;
    tasks.spawn(run_one(Api::<core::Service>::all(client.clone()), |c| WatchEvent::Workload(W::Service(c)), tx.clone(), stop.clone(), "services"));
    tasks.spawn(run_one(Api::<core::ReplicationController>::all(client.clone()), |c| WatchEvent::Workload(W::ReplicationController(c)), tx.clone(), stop.clone(), "replicationcontrollers"));
    tasks.spawn(run_one(Api::<apps::ReplicaSet>::all(client.clone()), |c| WatchEvent::Workload(W::ReplicaSet(c)), tx.clone(), stop.clone(), "replicasets"));
    tasks.spawn(run_one(Api::<apps::StatefulSet>::all(client), |c| WatchEvent::Workload(W::StatefulSet(c)), tx, stop, "statefulsets"));
}

async fn run_one<K, F>(api: Api<K>, wrap: F, tx: mpsc::Sender<WatchEvent>, mut stop: signal::Receiver<bool>, what: &'static str)
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: Fn(Change<K>) -> WatchEvent,
{
    let cfg = watcher::Config::default().any_semantic();
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut buffer: Vec<K> = Vec::new();
    loop {
        let next = tokio::select! {
            n = stream.next() => n,
            _ = stop.changed() => return,
        };
        let Some(item) = next else { return };
        let change = match item {
            Ok(Event::Apply(o)) => Change::Apply(o),
            Ok(Event::Delete(o)) => Change::Delete(o),
            Ok(Event::Init) => {
                buffer.clear();
                continue;
            }
            Ok(Event::InitApply(o)) => {
                buffer.push(o);
                continue;
            }
            Ok(Event::InitDone) => Change::Relist(std::mem::take(&mut buffer)),
            Err(e) => {
                tracing::warn!(kind = what, error = %e, "watch error; retrying with backoff");
                continue;
            }
        };
        if tx.send(wrap(change)).await.is_err() {
            return;
        }
    }
}

/// Starts the four watchers; they stop when `stop` changes.
pub fn spawn(client: kube::Client, tx: mpsc::Sender<WatchEvent>, stop: signal::Receiver<bool>, tasks: &mut tokio::task::JoinSet<()>) {
    tasks.spawn(run_one(Api::<core::Pod>::all(client.clone()), WatchEvent::Pod, tx.clone(), stop.clone(), "pods"));
    tasks.spawn(run_one(Api::<core::Node>::all(client.clone()), WatchEvent::Node, tx.clone(), stop.clone(), "nodes"));
    tasks.spawn(run_one(Api::<policy::PodDisruptionBudget>::all(client.clone()), WatchEvent::Pdb, tx.clone(), stop.clone(), "poddisruptionbudgets"));
    tasks.spawn(run_one(Api::<core::Namespace>::all(client), WatchEvent::Namespace, tx, stop, "namespaces"));
}
