//! Watchers on Pods, Nodes, PodDisruptionBudgets, Namespaces, the workload
//! kinds of default spreading and the storage kinds of the volume plugins. Each runs
//! kube-rs's watcher (which resumes from the last resourceVersion, relists on
//! 410 Gone and backs off on errors) and sends changes to the scheduling loop.
//! A relist arrives as one `Relist` with every object, so the loop can drop
//! what disappeared while the watch was down: nothing is lost or counted twice.
//!
//! kube-rs's default backoff grows to 30 s, which kept a watch stale for half
//! a minute after a short outage; ours retries within 1 s ([`WatchBackoff`]).
//!
//! Adding a watched kind: a `WatchEvent` variant, one [`spawn_kind`] line in
//! [`spawn`] (it registers the kind in [`WatchHealth`], whose synced flags gate
//! readiness), and the arm that applies it in the scheduling loop (which calls
//! `WatchHealth::set_synced` after its relist).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::storage::v1 as storage;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch as signal};

use berth_engine::cache::storage::Storage;
use berth_engine::cache::workloads::{self, Kind, Workloads};
use berth_engine::framework::Events;

/// A pod as the daemon's watcher decodes it: boxed, because a `Pod` is
/// kilobytes and moves through the watcher's stream and the channel many
/// times; and without `metadata.managedFields`, which nothing in a scheduler
/// reads and which was the larger part of decoding a pod (its `fieldsV1` is
/// a tree of JSON maps). Everything else is decoded as `core::Pod` decodes it.
#[derive(Clone, Debug, Default)]
pub struct WatchedPod(pub Box<core::Pod>);

impl kube::Resource for WatchedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        <core::Pod as kube::Resource>::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        <core::Pod as kube::Resource>::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        <core::Pod as kube::Resource>::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        <core::Pod as kube::Resource>::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

impl<'de> serde::Deserialize<'de> for WatchedPod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
        /// A pod's wire form; apiVersion, kind and unknown fields are skipped.
        #[derive(serde::Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Option<Meta>,
            spec: Option<core::PodSpec>,
            status: Option<core::PodStatus>,
        }
        /// `ObjectMeta` but for `managedFields`, skipped unread.
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            annotations: Option<BTreeMap<String, String>>,
            creation_timestamp: Option<meta::Time>,
            deletion_grace_period_seconds: Option<i64>,
            deletion_timestamp: Option<meta::Time>,
            finalizers: Option<Vec<String>>,
            generate_name: Option<String>,
            generation: Option<i64>,
            labels: Option<BTreeMap<String, String>>,
            name: Option<String>,
            namespace: Option<String>,
            owner_references: Option<Vec<meta::OwnerReference>>,
            resource_version: Option<String>,
            self_link: Option<String>,
            uid: Option<String>,
        }
        let w = Wire::deserialize(d)?;
        let metadata = w.metadata.map_or_else(ObjectMeta::default, |m| ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        });
        Ok(WatchedPod(Box::new(core::Pod { metadata, spec: w.spec, status: w.status })))
    }
}

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
///
/// A pod (the event of nearly every change) is already a box; the other
/// kinds are boxed too, so that each event moved through the watcher's
/// channel is a few words rather than the largest object's size.
#[derive(Debug)]
pub enum WatchEvent {
    /// Pods.
    Pod(Change<WatchedPod>),
    /// Nodes.
    Node(Box<Change<core::Node>>),
    /// PodDisruptionBudgets.
    Pdb(Box<Change<policy::PodDisruptionBudget>>),
    /// Namespaces.
    Namespace(Box<Change<core::Namespace>>),
    /// Services, ReplicationControllers, ReplicaSets, StatefulSets (default topology spreading).
    Workload(Box<WorkloadChange>),
    /// PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
    /// CSIDrivers and CSIStorageCapacities (the volume plugins).
    Storage(Box<StorageChange>),
    /// PodGroups of one API (gang scheduling), as dynamic objects.
    PodGroup(berth_model::pod::GroupApi, Box<Change<kube::api::DynamicObject>>),
}

/// A change to one of the storage kinds the volume plugins read.
// Boxed whole in `WatchEvent`; its variants stay unboxed (one allocation per event).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum StorageChange {
    /// PersistentVolumeClaims.
    Claim(Change<core::PersistentVolumeClaim>),
    /// PersistentVolumes.
    Volume(Change<core::PersistentVolume>),
    /// StorageClasses.
    Class(Change<storage::StorageClass>),
    /// CSINodes.
    CsiNode(Change<storage::CSINode>),
    /// CSIDrivers.
    CsiDriver(Change<storage::CSIDriver>),
    /// CSIStorageCapacities.
    Capacity(Change<storage::CSIStorageCapacity>),
}

/// The storage kinds' names, in [`apply_storage_event`]'s index order.
pub const STORAGE_KINDS: [&str; 6] = ["persistentvolumeclaims", "persistentvolumes", "storageclasses", "csinodes", "csidrivers", "csistoragecapacities"];

/// Applies a storage change to the cache's storage objects. Returns the
/// index (in [`STORAGE_KINDS`]) of a kind whose (re)list just completed, for
/// readiness, and the cluster event to requeue pods with (the volume plugins
/// declare PVC, PV, STORAGE_CLASS, CSI_NODE, CSI_DRIVER and
/// CSI_STORAGE_CAPACITY).
///
/// Assumed volume decisions survive every update that does not show them
/// yet: a PV keeps its assumed claimRef until the API shows one, a claim its
/// assumed selected node until the API shows a selected node or a volume
/// (see `cache::storage`). A relist drops only the objects that are gone.
pub fn apply_storage_event(st: &mut Storage, ev: StorageChange) -> (Option<usize>, Events) {
    fn ns_name(m: &ObjectMeta) -> (String, String) {
        (m.namespace.clone().unwrap_or_else(|| "default".into()), m.name.clone().unwrap_or_default())
    }
    fn capacity(st: &mut Storage, c: &storage::CSIStorageCapacity) {
        if let Err(e) = st.upsert_capacity(c) {
            tracing::warn!(error = %e, "CSIStorageCapacity ignored");
        }
    }
    /// A cluster-scoped kind: upsert, remove by name, relist.
    fn by_name<K: kube::Resource>(st: &mut Storage, c: Change<K>, i: usize, ev: Events, names: fn(&Storage) -> Vec<String>, up: fn(&mut Storage, &K), rm: fn(&mut Storage, &str)) -> (Option<usize>, Events) {
        match c {
            Change::Apply(o) => {
                up(st, &o);
                (None, ev)
            }
            Change::Delete(o) => {
                rm(st, o.meta().name.as_deref().unwrap_or_default());
                (None, ev)
            }
            Change::Relist(all) => {
                let keep: std::collections::HashSet<&str> = all.iter().filter_map(|o| o.meta().name.as_deref()).collect();
                for n in names(st) {
                    if !keep.contains(n.as_str()) {
                        rm(st, &n);
                    }
                }
                for o in &all {
                    up(st, o);
                }
                (Some(i), ev)
            }
        }
    }
    match ev {
        StorageChange::Claim(c) => match c {
            Change::Apply(o) => {
                st.upsert_claim(&o);
                (None, Events::PVC)
            }
            Change::Delete(o) => {
                let (ns, n) = ns_name(&o.metadata);
                st.remove_claim(&ns, &n);
                (None, Events::PVC)
            }
            Change::Relist(all) => {
                let keep: std::collections::HashSet<(String, String)> = all.iter().map(|o| ns_name(&o.metadata)).collect();
                for (ns, n) in st.claim_keys() {
                    if !keep.contains(&(ns.clone(), n.clone())) {
                        st.remove_claim(&ns, &n);
                    }
                }
                for o in &all {
                    st.upsert_claim(o);
                }
                (Some(0), Events::PVC)
            }
        },
        StorageChange::Volume(c) => by_name(st, c, 1, Events::PV, Storage::volume_names, Storage::upsert_volume, Storage::remove_volume),
        StorageChange::Class(c) => by_name(st, c, 2, Events::STORAGE_CLASS, Storage::class_names, Storage::upsert_class, Storage::remove_class),
        StorageChange::CsiNode(c) => by_name(st, c, 3, Events::CSI_NODE, Storage::csi_node_names, Storage::upsert_csi_node, Storage::remove_csi_node),
        StorageChange::CsiDriver(c) => by_name(st, c, 4, Events::CSI_DRIVER, Storage::csi_driver_names, Storage::upsert_csi_driver, Storage::remove_csi_driver),
        StorageChange::Capacity(c) => match c {
            Change::Apply(o) => {
                capacity(st, &o);
                (None, Events::CSI_STORAGE_CAPACITY)
            }
            Change::Delete(o) => {
                let (ns, n) = ns_name(&o.metadata);
                st.remove_capacity(&format!("{ns}/{n}"));
                (None, Events::CSI_STORAGE_CAPACITY)
            }
            Change::Relist(all) => {
                for k in st.capacities().iter().map(|c| c.key.clone()).collect::<Vec<_>>() {
                    st.remove_capacity(&k);
                }
                for o in &all {
                    capacity(st, o);
                }
                (Some(5), Events::CSI_STORAGE_CAPACITY)
            }
        },
    }
}

/// A change to one of the kinds default topology spreading reads.
#[allow(clippy::large_enum_variant)]
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
pub fn spawn_workloads(client: kube::Client, tx: &mpsc::Sender<WatchEvent>, stop: &signal::Receiver<bool>, health: &WatchHealth, tasks: &mut tokio::task::JoinSet<()>) {
    use WorkloadChange as W;
    let [svc, rc, rs, ss] = WORKLOAD_KINDS;
    spawn_kind(Api::<core::Service>::all(client.clone()), svc, |c| WatchEvent::Workload(Box::new(W::Service(c))), tx, stop, health, tasks);
    spawn_kind(Api::<core::ReplicationController>::all(client.clone()), rc, |c| WatchEvent::Workload(Box::new(W::ReplicationController(c))), tx, stop, health, tasks);
    spawn_kind(Api::<apps::ReplicaSet>::all(client.clone()), rs, |c| WatchEvent::Workload(Box::new(W::ReplicaSet(c))), tx, stop, health, tasks);
    spawn_kind(Api::<apps::StatefulSet>::all(client), ss, |c| WatchEvent::Workload(Box::new(W::StatefulSet(c))), tx, stop, health, tasks);
}

/// The workload kinds' names, in `apply_workload_event`'s index order.
pub const WORKLOAD_KINDS: [&str; 4] = ["services", "replicationcontrollers", "replicasets", "statefulsets"];

/// Starts the watchers of the six storage kinds (see `StorageChange`).
pub fn spawn_storage(client: kube::Client, tx: &mpsc::Sender<WatchEvent>, stop: &signal::Receiver<bool>, health: &WatchHealth, tasks: &mut tokio::task::JoinSet<()>) {
    use StorageChange as S;
    let [pvc, pv, sc, csin, csid, cap] = STORAGE_KINDS;
    spawn_kind(Api::<core::PersistentVolumeClaim>::all(client.clone()), pvc, |c| WatchEvent::Storage(Box::new(S::Claim(c))), tx, stop, health, tasks);
    spawn_kind(Api::<core::PersistentVolume>::all(client.clone()), pv, |c| WatchEvent::Storage(Box::new(S::Volume(c))), tx, stop, health, tasks);
    spawn_kind(Api::<storage::StorageClass>::all(client.clone()), sc, |c| WatchEvent::Storage(Box::new(S::Class(c))), tx, stop, health, tasks);
    spawn_kind(Api::<storage::CSINode>::all(client.clone()), csin, |c| WatchEvent::Storage(Box::new(S::CsiNode(c))), tx, stop, health, tasks);
    spawn_kind(Api::<storage::CSIDriver>::all(client.clone()), csid, |c| WatchEvent::Storage(Box::new(S::CsiDriver(c))), tx, stop, health, tasks);
    spawn_kind(Api::<storage::CSIStorageCapacity>::all(client), cap, |c| WatchEvent::Storage(Box::new(S::Capacity(c))), tx, stop, health, tasks);
}

/// The watchers' reconnection backoff: 100 ms doubling to 1 s, with no
/// limit on retries, reset after each success.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff { next: BACKOFF_FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let d = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        Some(d)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = BACKOFF_FIRST;
    }
}

/// One watched kind's state.
#[derive(Debug, Clone, Default)]
pub struct KindHealth {
    /// Its first list has been applied.
    pub synced: bool,
    /// The last watch attempt failed (with this error, since then).
    pub disconnected: Option<(String, Instant)>,
    /// When the last error came. A watch that restarts quietly (resuming from
    /// its resourceVersion, with nothing new to send) yields no item to clear
    /// `disconnected`; but while it keeps failing, an error comes at least
    /// every second ([`WatchBackoff`]), so one older than
    /// [`DISCONNECTED_AFTER_SILENCE`] means it is connected again.
    pub last_error: Option<Instant>,
}

/// See [`KindHealth::last_error`].
pub const DISCONNECTED_AFTER_SILENCE: Duration = Duration::from_secs(3);

/// The state of every watched kind, shared with the health checks.
#[derive(Debug, Clone, Default)]
pub struct WatchHealth {
    kinds: Arc<Mutex<BTreeMap<&'static str, KindHealth>>>,
}

impl WatchHealth {
    /// Registers a kind (not synced yet).
    pub fn register(&self, kind: &'static str) {
        if let Ok(mut k) = self.kinds.lock() {
            k.entry(kind).or_default();
        }
    }

    /// The kind's first list has been applied. True when every kind is synced now.
    pub fn set_synced(&self, kind: &'static str) -> bool {
        match self.kinds.lock() {
            Ok(mut k) => {
                k.entry(kind).or_default().synced = true;
                k.values().all(|h| h.synced)
            }
            Err(_) => false,
        }
    }

    /// Every registered kind is synced.
    pub fn all_synced(&self) -> bool {
        self.kinds.lock().map(|k| k.values().all(|h| h.synced)).unwrap_or(false)
    }

    fn set_error(&self, kind: &'static str, error: Option<String>) {
        if let Ok(mut k) = self.kinds.lock() {
            let h = k.entry(kind).or_default();
            match error {
                None => h.disconnected = None,
                Some(e) => {
                    let since = h.disconnected.as_ref().map(|d| d.1).unwrap_or_else(Instant::now);
                    h.disconnected = Some((e, since));
                    h.last_error = Some(Instant::now());
                }
            }
        }
    }

    /// Problems, one line per kind: not synced yet, or disconnected.
    /// Empty when every watch is synced and connected.
    pub fn problems(&self) -> Vec<String> {
        let Ok(k) = self.kinds.lock() else { return vec!["watch state unavailable".into()] };
        let mut out = Vec::new();
        for (kind, h) in k.iter() {
            if !h.synced {
                out.push(format!("watch {kind}: not synced"));
            }
            let failing = h.last_error.is_some_and(|t| t.elapsed() < DISCONNECTED_AFTER_SILENCE);
            if let Some((e, since)) = h.disconnected.as_ref().filter(|_| failing) {
                out.push(format!("watch {kind}: disconnected for {:.1}s: {e}", since.elapsed().as_secs_f64()));
            }
        }
        out
    }
}

async fn run_one<K, F>(api: Api<K>, wrap: F, tx: mpsc::Sender<WatchEvent>, mut stop: signal::Receiver<bool>, what: &'static str, health: WatchHealth)
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: Fn(Change<K>) -> WatchEvent,
{
    let cfg = watcher::Config::default().any_semantic();
    let mut stream = watcher::watcher(api, cfg).backoff(WatchBackoff::default()).boxed();
    let mut buffer: Vec<K> = Vec::new();
    loop {
        let next = tokio::select! {
            n = stream.next() => n,
            _ = stop.changed() => return,
        };
        let Some(item) = next else { return };
        health.set_error(what, item.as_ref().err().map(|e| e.to_string()));
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

/// Kind names, as the health checks report them.
pub const PODS: &str = "pods";
/// Nodes.
pub const NODES: &str = "nodes";
/// PodDisruptionBudgets.
pub const PDBS: &str = "poddisruptionbudgets";
/// Namespaces.
pub const NAMESPACES: &str = "namespaces";

/// Registers `kind` in `health` and starts its watcher, which sends each
/// change wrapped by `wrap`; it stops when `stop` changes.
pub fn spawn_kind<K, F>(api: Api<K>, kind: &'static str, wrap: F, tx: &mpsc::Sender<WatchEvent>, stop: &signal::Receiver<bool>, health: &WatchHealth, tasks: &mut tokio::task::JoinSet<()>)
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: Fn(Change<K>) -> WatchEvent + Send + 'static,
{
    health.register(kind);
    tasks.spawn(run_one(api, wrap, tx.clone(), stop.clone(), kind, health.clone()));
}

/// Starts every watcher; they stop when `stop` changes.
pub fn spawn(client: kube::Client, tx: mpsc::Sender<WatchEvent>, stop: signal::Receiver<bool>, health: &WatchHealth, tasks: &mut tokio::task::JoinSet<()>) {
    spawn_kind(Api::<WatchedPod>::all(client.clone()), PODS, WatchEvent::Pod, &tx, &stop, health, tasks);
    spawn_kind(Api::<core::Node>::all(client.clone()), NODES, |c| WatchEvent::Node(Box::new(c)), &tx, &stop, health, tasks);
    spawn_kind(Api::<policy::PodDisruptionBudget>::all(client.clone()), PDBS, |c| WatchEvent::Pdb(Box::new(c)), &tx, &stop, health, tasks);
    spawn_kind(Api::<core::Namespace>::all(client), NAMESPACES, |c| WatchEvent::Namespace(Box::new(c)), &tx, &stop, health, tasks);
}

/// Health names of the PodGroup watchers.
pub const PODGROUPS_V1BETA1: &str = "podgroups.scheduling.k8s.io";
/// scheduler-plugins' PodGroups.
pub const PODGROUPS_V1ALPHA1: &str = "podgroups.scheduling.x-k8s.io";

/// How often a PodGroup API that is not served (404: the CRD or the beta API
/// is not installed) is looked for again.
pub const GROUP_API_RECHECK: Duration = Duration::from_secs(10);

/// The API resource of one PodGroup API.
pub fn group_api_resource(api: berth_model::pod::GroupApi) -> kube::api::ApiResource {
    use berth_model::pod::GroupApi;
    let (g, v) = match api {
        GroupApi::V1beta1 => ("scheduling.k8s.io", "v1beta1"),
        GroupApi::V1alpha1 => ("scheduling.x-k8s.io", "v1alpha1"),
    };
    kube::api::ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk(g, v, "PodGroup"), "podgroups")
}

/// Starts the watchers of both PodGroup APIs. An API the server does not
/// serve (404 on list) does not hold readiness back: it counts as synced and
/// empty, and is looked for again every [`GROUP_API_RECHECK`].
pub fn spawn_groups(client: kube::Client, tx: &mpsc::Sender<WatchEvent>, stop: &signal::Receiver<bool>, health: &WatchHealth, tasks: &mut tokio::task::JoinSet<()>) {
    use berth_model::pod::GroupApi;
    for (api, kind) in [(GroupApi::V1beta1, PODGROUPS_V1BETA1), (GroupApi::V1alpha1, PODGROUPS_V1ALPHA1)] {
        health.register(kind);
        let objects: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &group_api_resource(api));
        tasks.spawn(run_optional(objects, api, tx.clone(), stop.clone(), kind, health.clone()));
    }
}

async fn run_optional(objects: Api<kube::api::DynamicObject>, api: berth_model::pod::GroupApi, tx: mpsc::Sender<WatchEvent>, mut stop: signal::Receiver<bool>, kind: &'static str, health: WatchHealth) {
    let lp = kube::api::ListParams::default().limit(1);
    loop {
        let r = tokio::select! {
            r = objects.list(&lp) => r,
            _ = stop.changed() => return,
        };
        match r {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                if tx.send(WatchEvent::PodGroup(api, Box::new(Change::Relist(vec![])))).await.is_err() {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(GROUP_API_RECHECK) => continue,
                    _ = stop.changed() => return,
                }
            }
            // Served (or a transient error, which the watcher retries).
            _ => break,
        }
    }
    run_one(objects, move |c| WatchEvent::PodGroup(api, Box::new(c)), tx, stop, kind, health).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watched_pod_is_the_pod_without_its_managed_fields() {
        let text = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7", "generation": 2,
                "labels": {"app": "a"}, "annotations": {"x": "y"}, "finalizers": ["f"],
                "creationTimestamp": "2026-01-01T00:00:00Z", "deletionTimestamp": "2026-01-01T00:01:00Z", "deletionGracePeriodSeconds": 30,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "o", "controller": true}],
                "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:nodeName": {}}}}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]},
        })
        .to_string();
        let mut want: core::Pod = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert!(want.metadata.managed_fields.is_some());
        want.metadata.managed_fields = None;
        let got: WatchedPod = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(*got.0, want);
        // Without metadata at all, as `core::Pod` reads it: empty metadata.
        let bare: WatchedPod = serde_json::from_str(r#"{"spec": null}"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bare.0.metadata, ObjectMeta::default());
        // Wrong types are errors, not panics.
        assert!(serde_json::from_str::<WatchedPod>(r#"{"metadata": {"name": 5}}"#).is_err());
    }

    #[test]
    fn backoff_caps_at_one_second_and_resets() {
        use kube::runtime::utils::Backoff;
        let mut b = WatchBackoff::default();
        let first: Vec<u64> = b.by_ref().take(6).map(|d| d.as_millis() as u64).collect();
        assert_eq!(first, vec![100, 200, 400, 800, 1000, 1000]);
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(100)));
    }

    fn pv(name: &str, claim: Option<&str>) -> core::PersistentVolume {
        let mut v = serde_json::json!({"metadata": {"name": name}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "sc"}});
        if let Some(c) = claim {
            v["spec"]["claimRef"] = serde_json::json!({"namespace": "default", "name": c, "uid": "uid-c"});
        }
        serde_json::from_value(v).expect("pv")
    }

    fn pvc(name: &str, selected: Option<&str>) -> core::PersistentVolumeClaim {
        let mut v = serde_json::json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "sc"}});
        if let Some(n) = selected {
            v["metadata"]["annotations"] = serde_json::json!({"volume.kubernetes.io/selected-node": n});
        }
        serde_json::from_value(v).expect("pvc")
    }

    #[test]
    fn storage_events_keep_assumptions_until_the_api_shows_them() {
        use berth_engine::cache::storage::{ClaimRef, StaticBinding, VolumeDecisions};
        let mut st = Storage::new();
        assert_eq!(apply_storage_event(&mut st, StorageChange::Volume(Change::Relist(vec![pv("pv-1", None), pv("pv-3", None)]))), (Some(1), Events::PV));
        assert_eq!(apply_storage_event(&mut st, StorageChange::Claim(Change::Relist(vec![pvc("c", None), pvc("d", None)]))), (Some(0), Events::PVC));
        st.assume(&VolumeDecisions {
            pod_uid: "uid-p".into(),
            node: "n1".into(),
            bindings: vec![StaticBinding { pv: "pv-1".into(), claim: ClaimRef { namespace: "default".into(), name: "c".into(), uid: "uid-c".into() } }],
            provisions: vec![("default".into(), "d".into())],
        });
        // Updates that do not show the decisions (a status change, a relist
        // while the writes are in flight) keep them.
        apply_storage_event(&mut st, StorageChange::Volume(Change::Apply(pv("pv-1", None))));
        apply_storage_event(&mut st, StorageChange::Volume(Change::Relist(vec![pv("pv-1", None), pv("pv-2", None)])));
        apply_storage_event(&mut st, StorageChange::Claim(Change::Apply(pvc("d", None))));
        assert_eq!(st.assumed_count(), 2);
        let v = st.volume("pv-1").cloned().expect("pv-1");
        assert_eq!(st.claim_ref(&v).map(|r| r.name.as_str()), Some("c"));
        // The relist dropped pv-3 only.
        assert!(st.volume("pv-3").is_none() && st.volume("pv-2").is_some());
        // The API's objects take over once they show the decisions.
        apply_storage_event(&mut st, StorageChange::Volume(Change::Apply(pv("pv-1", Some("c")))));
        apply_storage_event(&mut st, StorageChange::Claim(Change::Apply(pvc("d", Some("n1")))));
        assert_eq!(st.assumed_count(), 0);
        let c = st.claim("default", "d").cloned().expect("d");
        assert_eq!(st.selected_node(&c), Some("n1"));
        // A claim relist without "c" removes it.
        apply_storage_event(&mut st, StorageChange::Claim(Change::Relist(vec![pvc("d", Some("n1"))])));
        assert!(st.claim("default", "c").is_none() && st.claim("default", "d").is_some());
        // The other kinds report their own events and indexes.
        let class: storage::StorageClass = serde_json::from_value(serde_json::json!({"metadata": {"name": "sc"}, "provisioner": "p"})).expect("class");
        assert_eq!(apply_storage_event(&mut st, StorageChange::Class(Change::Relist(vec![class]))), (Some(2), Events::STORAGE_CLASS));
        assert!(st.class("sc").is_some());
        assert_eq!(apply_storage_event(&mut st, StorageChange::Class(Change::Relist(vec![]))).0, Some(2));
        assert!(st.class("sc").is_none());
        assert_eq!(apply_storage_event(&mut st, StorageChange::CsiNode(Change::Relist(vec![]))), (Some(3), Events::CSI_NODE));
        assert_eq!(apply_storage_event(&mut st, StorageChange::CsiDriver(Change::Relist(vec![]))), (Some(4), Events::CSI_DRIVER));
        assert_eq!(apply_storage_event(&mut st, StorageChange::Capacity(Change::Relist(vec![]))), (Some(5), Events::CSI_STORAGE_CAPACITY));
    }

    #[test]
    fn health_names_unsynced_and_disconnected_kinds() {
        let h = WatchHealth::default();
        h.register(PODS);
        h.register(NODES);
        assert!(!h.all_synced());
        assert_eq!(h.problems(), vec!["watch nodes: not synced", "watch pods: not synced"]);
        assert!(!h.set_synced(PODS));
        assert!(h.set_synced(NODES));
        assert!(h.problems().is_empty());
        h.set_error(NODES, Some("connection refused".into()));
        let p = h.problems();
        assert_eq!(p.len(), 1);
        assert!(p[0].starts_with("watch nodes: disconnected for ") && p[0].ends_with(": connection refused"), "{p:?}");
        h.set_error(NODES, None);
        assert!(h.problems().is_empty());
    }
}
