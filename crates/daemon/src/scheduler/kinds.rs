//! Every kind the scheduling loop watches, one implementation of
//! [`Kind`] each (as linkerd's `k8s/index` has one apply/delete per kind):
//! its name, whether readiness waits for it, its API, and how a change
//! reaches the cache and the queue. [`watch_all`] starts them all, as
//! upstream's `addAllEventHandlers` registers them: a new kind is its
//! implementation here and one line there; the list/watch plumbing
//! (`crate::watch`) is the same for all.
//!
//! A kind is required when upstream kube-scheduler 1.34 watches it; later
//! APIs and CRDs are optional (see [`Need`]).

use std::collections::HashSet;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::resource::v1 as res;
use k8s_openapi::api::storage::v1 as storage;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::Api;
use tokio::sync::{mpsc, watch as signal};

use berth_engine::cache::storage::Storage;
use berth_engine::cache::workloads::{self, Workloads};
use berth_engine::cache::Snapshot;
use berth_engine::framework::Events;
use berth_model::pod::GroupApi;
use berth_model::PodInfo;

use super::Loop;
use crate::watch::{self, group_api_resource, Change, Kind, Need, WatchEvent, WatchHealth, WatchedPod};

/// Starts the watch of every kind the loop reads; each stops when `stop`
/// changes.
pub(crate) fn watch_all(client: &kube::Client, tx: &mpsc::Sender<WatchEvent<Loop>>, stop: &signal::Receiver<bool>, health: &WatchHealth, tasks: &mut tokio::task::JoinSet<()>) {
    let mut s = Spawner { client, tx, stop, health, tasks };
    // Default topology spreading.
    s.spawn(Services);
    s.spawn(ReplicationControllers);
    s.spawn(ReplicaSets);
    s.spawn(StatefulSets);
    // The volume plugins.
    s.spawn(PersistentVolumeClaims);
    s.spawn(PersistentVolumes);
    s.spawn(StorageClasses);
    s.spawn(CsiNodes);
    s.spawn(CsiDrivers);
    s.spawn(CsiStorageCapacities);
    // Gang scheduling.
    s.spawn(PodGroups(GroupApi::V1beta1));
    s.spawn(PodGroups(GroupApi::V1alpha1));
    // Dynamic resource allocation.
    s.spawn(ResourceClaims);
    s.spawn(ResourceSlices);
    s.spawn(DeviceClasses);
    s.spawn(DeviceTaintRules);
    // The core kinds.
    s.spawn(Pods);
    s.spawn(Nodes);
    s.spawn(PodDisruptionBudgets);
    s.spawn(Namespaces);
}

/// What every watch is started with.
struct Spawner<'a> {
    client: &'a kube::Client,
    tx: &'a mpsc::Sender<WatchEvent<Loop>>,
    stop: &'a signal::Receiver<bool>,
    health: &'a WatchHealth,
    tasks: &'a mut tokio::task::JoinSet<()>,
}

impl Spawner<'_> {
    fn spawn<K: Kind<Loop>>(&mut self, kind: K) {
        watch::spawn_kind(self.client, kind, self.tx, self.stop, self.health, self.tasks);
    }
}

/// `namespace/name` of an object (namespace "default" when it has none).
pub(super) fn key(m: &ObjectMeta) -> String {
    format!("{}/{}", m.namespace.as_deref().unwrap_or("default"), m.name.as_deref().unwrap_or_default())
}

fn ns_name(m: &ObjectMeta) -> (String, String) {
    (m.namespace.clone().unwrap_or_else(|| "default".into()), m.name.clone().unwrap_or_default())
}

fn name_of(m: &ObjectMeta) -> String {
    m.name.clone().unwrap_or_default()
}

// ---------------------------------------------------------------- the core kinds

/// Pods: pending pods of our profiles into the queue, bound pods into the cache.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pods;

impl Kind<Loop> for Pods {
    type Object = WatchedPod;

    fn name(self) -> &'static str {
        "pods"
    }

    fn api(self, client: kube::Client) -> Api<WatchedPod> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<WatchedPod>) {
        match change {
            Change::Apply(p) => lp.apply_pod(&p.0),
            Change::Delete(p) => {
                let uid = PodInfo::from_pod(&p.0).uid.clone();
                lp.delete_pod(&uid);
            }
            Change::Relist(all) => {
                let live: HashSet<String> = all.iter().map(|p| PodInfo::from_pod(&p.0).uid.clone()).collect();
                let gone: Vec<String> = lp.cache.pod_uids().chain(lp.queue.pods().map(|p| &p.uid)).filter(|u| !live.contains(*u)).cloned().collect();
                for u in gone {
                    // Assumed pods are kept: their bind is still in flight.
                    if lp.cache.pod_state(&u) != Some(berth_engine::cache::PodState::Assumed) {
                        lp.delete_pod(&u);
                    }
                }
                for p in all {
                    lp.apply_pod(&p.0);
                }
            }
        }
    }
}

/// Nodes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Nodes;

impl Kind<Loop> for Nodes {
    type Object = core::Node;

    fn name(self) -> &'static str {
        "nodes"
    }

    fn api(self, client: kube::Client) -> Api<core::Node> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<core::Node>) {
        match change {
            Change::Apply(n) => lp.apply_node(&n),
            Change::Delete(n) => {
                lp.cache.remove_node(n.metadata.name.as_deref().unwrap_or_default());
            }
            Change::Relist(all) => {
                let live: HashSet<&str> = all.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
                let gone: Vec<String> = lp.cache.snapshot().nodes.iter().map(|n| n.name().to_string()).filter(|n| !live.contains(n.as_str())).collect();
                for n in gone {
                    lp.cache.remove_node(&n);
                }
                for n in &all {
                    lp.apply_node(n);
                }
            }
        }
    }
}

/// PodDisruptionBudgets (preemption).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PodDisruptionBudgets;

impl Kind<Loop> for PodDisruptionBudgets {
    type Object = policy::PodDisruptionBudget;

    fn name(self) -> &'static str {
        "poddisruptionbudgets"
    }

    fn api(self, client: kube::Client) -> Api<policy::PodDisruptionBudget> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<policy::PodDisruptionBudget>) {
        match change {
            Change::Apply(p) => lp.apply_pdb(&p),
            Change::Delete(p) => {
                lp.pdbs.remove(&key(&p.metadata));
            }
            Change::Relist(all) => {
                lp.pdbs.clear();
                for p in &all {
                    lp.apply_pdb(p);
                }
            }
        }
        lp.cache.snapshot_mut().pdbs = lp.pdbs.values().cloned().collect();
        lp.event(Events::PDB);
    }
}

/// Namespaces (their labels, for namespace selectors).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Namespaces;

impl Kind<Loop> for Namespaces {
    type Object = core::Namespace;

    fn name(self) -> &'static str {
        "namespaces"
    }

    fn api(self, client: kube::Client) -> Api<core::Namespace> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<core::Namespace>) {
        let snap = lp.cache.snapshot_mut();
        match change {
            Change::Apply(n) => {
                snap.namespaces.insert(n.metadata.name.clone().unwrap_or_default(), n.metadata.labels.clone().unwrap_or_default());
            }
            Change::Delete(n) => {
                snap.namespaces.remove(n.metadata.name.as_deref().unwrap_or_default());
            }
            Change::Relist(all) => {
                snap.namespaces = all.iter().map(|n| (n.metadata.name.clone().unwrap_or_default(), n.metadata.labels.clone().unwrap_or_default())).collect();
            }
        }
        lp.event(Events::NAMESPACE);
    }
}

// ---------------------------------------------------------------- default topology spreading

/// Applies a change of one of the kinds default topology spreading reads to
/// the cache's workloads: `up` adds or replaces. No pod is requeued:
/// upstream's PodTopologySpread registers no event of these kinds.
fn apply_workload<K: kube::Resource>(w: &mut Workloads, c: Change<K>, kind: workloads::Kind, up: fn(&mut Workloads, &K) -> Result<(), workloads::Error>) {
    let put = |w: &mut Workloads, o: &K| {
        if let Err(e) = up(w, o) {
            tracing::warn!(error = %e, "selector ignored for default topology spreading");
        }
    };
    match c {
        Change::Apply(o) => put(w, &o),
        Change::Delete(o) => {
            let m = o.meta();
            w.remove(kind, m.namespace.as_deref().unwrap_or("default"), m.name.as_deref().unwrap_or_default());
        }
        Change::Relist(all) => {
            w.clear(kind);
            for o in &all {
                put(w, o);
            }
        }
    }
}

/// Services.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Services;

impl Kind<Loop> for Services {
    type Object = core::Service;

    fn name(self) -> &'static str {
        "services"
    }

    fn api(self, client: kube::Client) -> Api<core::Service> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<core::Service>) {
        apply_workload(&mut lp.cache.snapshot_mut().workloads, change, workloads::Kind::Service, |w, o| {
            w.upsert_service(o);
            Ok(())
        });
    }
}

/// ReplicationControllers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReplicationControllers;

impl Kind<Loop> for ReplicationControllers {
    type Object = core::ReplicationController;

    fn name(self) -> &'static str {
        "replicationcontrollers"
    }

    fn api(self, client: kube::Client) -> Api<core::ReplicationController> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<core::ReplicationController>) {
        apply_workload(&mut lp.cache.snapshot_mut().workloads, change, workloads::Kind::ReplicationController, |w, o| {
            w.upsert_replication_controller(o);
            Ok(())
        });
    }
}

/// ReplicaSets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReplicaSets;

impl Kind<Loop> for ReplicaSets {
    type Object = apps::ReplicaSet;

    fn name(self) -> &'static str {
        "replicasets"
    }

    fn api(self, client: kube::Client) -> Api<apps::ReplicaSet> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<apps::ReplicaSet>) {
        apply_workload(&mut lp.cache.snapshot_mut().workloads, change, workloads::Kind::ReplicaSet, Workloads::upsert_replica_set);
    }
}

/// StatefulSets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StatefulSets;

impl Kind<Loop> for StatefulSets {
    type Object = apps::StatefulSet;

    fn name(self) -> &'static str {
        "statefulsets"
    }

    fn api(self, client: kube::Client) -> Api<apps::StatefulSet> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<apps::StatefulSet>) {
        apply_workload(&mut lp.cache.snapshot_mut().workloads, change, workloads::Kind::StatefulSet, Workloads::upsert_stateful_set);
    }
}

// ---------------------------------------------------------------- the volume plugins
//
// Assumed volume decisions survive every update that does not show them
// yet: a PV keeps its assumed claimRef until the API shows one, a claim its
// assumed selected node until the API shows a selected node or a volume
// (see `cache::storage`). A relist drops only the objects that are gone.
// Each kind requeues pods with its own event (the volume plugins declare
// PVC, PV, STORAGE_CLASS, CSI_NODE, CSI_DRIVER and CSI_STORAGE_CAPACITY).

/// A cluster-scoped storage kind: `up` adds or replaces, `rm` removes by
/// name; a relist removes the names (`names`) not listed.
fn storage_by_name<K: kube::Resource>(st: &mut Storage, c: Change<K>, names: fn(&Storage) -> Vec<String>, up: fn(&mut Storage, &K), rm: fn(&mut Storage, &str)) {
    match c {
        Change::Apply(o) => up(st, &o),
        Change::Delete(o) => rm(st, o.meta().name.as_deref().unwrap_or_default()),
        Change::Relist(all) => {
            let keep: HashSet<&str> = all.iter().filter_map(|o| o.meta().name.as_deref()).collect();
            for n in names(st) {
                if !keep.contains(n.as_str()) {
                    rm(st, &n);
                }
            }
            for o in &all {
                up(st, o);
            }
        }
    }
}

/// PersistentVolumeClaims into the cache's storage.
fn apply_claims(st: &mut Storage, c: Change<core::PersistentVolumeClaim>) {
    match c {
        Change::Apply(o) => st.upsert_claim(&o),
        Change::Delete(o) => {
            let (ns, n) = ns_name(&o.metadata);
            st.remove_claim(&ns, &n);
        }
        Change::Relist(all) => {
            let keep: HashSet<(String, String)> = all.iter().map(|o| ns_name(&o.metadata)).collect();
            for (ns, n) in st.claim_keys() {
                if !keep.contains(&(ns.clone(), n.clone())) {
                    st.remove_claim(&ns, &n);
                }
            }
            for o in &all {
                st.upsert_claim(o);
            }
        }
    }
}

/// CSIStorageCapacities into the cache's storage.
fn apply_capacities(st: &mut Storage, c: Change<storage::CSIStorageCapacity>) {
    fn capacity(st: &mut Storage, c: &storage::CSIStorageCapacity) {
        if let Err(e) = st.upsert_capacity(c) {
            tracing::warn!(error = %e, "CSIStorageCapacity ignored");
        }
    }
    match c {
        Change::Apply(o) => capacity(st, &o),
        Change::Delete(o) => {
            let (ns, n) = ns_name(&o.metadata);
            st.remove_capacity(&format!("{ns}/{n}"));
        }
        Change::Relist(all) => {
            for k in st.capacities().iter().map(|c| c.key.clone()).collect::<Vec<_>>() {
                st.remove_capacity(&k);
            }
            for o in &all {
                capacity(st, o);
            }
        }
    }
}

/// PersistentVolumeClaims.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PersistentVolumeClaims;

impl Kind<Loop> for PersistentVolumeClaims {
    type Object = core::PersistentVolumeClaim;

    fn name(self) -> &'static str {
        "persistentvolumeclaims"
    }

    fn api(self, client: kube::Client) -> Api<core::PersistentVolumeClaim> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<core::PersistentVolumeClaim>) {
        apply_claims(&mut lp.cache.snapshot_mut().storage, change);
        lp.event(Events::PVC);
    }
}

/// PersistentVolumes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PersistentVolumes;

impl Kind<Loop> for PersistentVolumes {
    type Object = core::PersistentVolume;

    fn name(self) -> &'static str {
        "persistentvolumes"
    }

    fn api(self, client: kube::Client) -> Api<core::PersistentVolume> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<core::PersistentVolume>) {
        storage_by_name(&mut lp.cache.snapshot_mut().storage, change, Storage::volume_names, Storage::upsert_volume, Storage::remove_volume);
        lp.event(Events::PV);
    }
}

/// StorageClasses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StorageClasses;

impl Kind<Loop> for StorageClasses {
    type Object = storage::StorageClass;

    fn name(self) -> &'static str {
        "storageclasses"
    }

    fn api(self, client: kube::Client) -> Api<storage::StorageClass> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<storage::StorageClass>) {
        storage_by_name(&mut lp.cache.snapshot_mut().storage, change, Storage::class_names, Storage::upsert_class, Storage::remove_class);
        lp.event(Events::STORAGE_CLASS);
    }
}

/// CSINodes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CsiNodes;

impl Kind<Loop> for CsiNodes {
    type Object = storage::CSINode;

    fn name(self) -> &'static str {
        "csinodes"
    }

    fn api(self, client: kube::Client) -> Api<storage::CSINode> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<storage::CSINode>) {
        storage_by_name(&mut lp.cache.snapshot_mut().storage, change, Storage::csi_node_names, Storage::upsert_csi_node, Storage::remove_csi_node);
        lp.event(Events::CSI_NODE);
    }
}

/// CSIDrivers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CsiDrivers;

impl Kind<Loop> for CsiDrivers {
    type Object = storage::CSIDriver;

    fn name(self) -> &'static str {
        "csidrivers"
    }

    fn api(self, client: kube::Client) -> Api<storage::CSIDriver> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<storage::CSIDriver>) {
        storage_by_name(&mut lp.cache.snapshot_mut().storage, change, Storage::csi_driver_names, Storage::upsert_csi_driver, Storage::remove_csi_driver);
        lp.event(Events::CSI_DRIVER);
    }
}

/// CSIStorageCapacities.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CsiStorageCapacities;

impl Kind<Loop> for CsiStorageCapacities {
    type Object = storage::CSIStorageCapacity;

    fn name(self) -> &'static str {
        "csistoragecapacities"
    }

    fn api(self, client: kube::Client) -> Api<storage::CSIStorageCapacity> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<storage::CSIStorageCapacity>) {
        apply_capacities(&mut lp.cache.snapshot_mut().storage, change);
        lp.event(Events::CSI_STORAGE_CAPACITY);
    }
}

// ---------------------------------------------------------------- gang scheduling

/// The PodGroups of one API, both optional: scheduling.k8s.io/v1beta1 is
/// not served before Kubernetes 1.35 (nor later without its feature gate),
/// and scheduler-plugins' CRD is installed on few clusters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PodGroups(pub GroupApi);

impl Kind<Loop> for PodGroups {
    type Object = DynamicObject;

    fn name(self) -> &'static str {
        match self.0 {
            GroupApi::V1beta1 => "podgroups.scheduling.k8s.io",
            GroupApi::V1alpha1 => "podgroups.scheduling.x-k8s.io",
        }
    }

    fn need(self) -> Need {
        let feature = match self.0 {
            GroupApi::V1beta1 => "gang scheduling of scheduling.k8s.io/v1beta1 PodGroups",
            GroupApi::V1alpha1 => "gang scheduling of scheduler-plugins PodGroups (scheduling.x-k8s.io/v1alpha1)",
        };
        Need::Optional { feature }
    }

    fn api(self, client: kube::Client) -> Api<DynamicObject> {
        Api::all_with(client, &group_api_resource(self.0))
    }

    fn apply(self, lp: &mut Loop, change: Change<DynamicObject>) {
        lp.apply_groups(self.0, change);
    }
}

// ---------------------------------------------------------------- dynamic resource allocation
//
// All four optional: when resource.k8s.io/v1 is not served, dynamic
// resource allocation is off (one line logged) and readiness does not wait
// for them; when it is served, readiness waits for their first lists.
// DeviceTaintRules are served from 1.37 only: their own feature.
//
// An assumed allocation survives every claim update that does not show an
// allocation yet (the finalizer written before the status, a relist while
// the write is in flight): see `cache::devices`. An object that cannot be
// compiled is logged and left out (a slice) or kept with its error (a
// claim, whose pods then report it). Each kind requeues pods with the
// events DynamicResources declares: RESOURCE_CLAIM, RESOURCE_SLICE and
// DEVICE_CLASS (a DeviceTaintRule changes which devices of the slices are
// usable, so its changes count as slice changes).

/// The feature the claims, slices and classes turn on: off when
/// resource.k8s.io/v1 is not served (before Kubernetes 1.34).
const DRA_FEATURE: &str = "dynamic resource allocation (resource.k8s.io/v1)";
/// The feature DeviceTaintRules turn on (resource.k8s.io/v1 serves them from 1.37).
const DRA_TAINT_RULES_FEATURE: &str = "device taints from DeviceTaintRules";

/// The names of the DRA objects the cache holds, so that a relist drops
/// those that are gone (claims by `namespace/name`).
#[derive(Debug, Default)]
pub(crate) struct DraNames {
    claims: HashSet<String>,
    slices: HashSet<String>,
    classes: HashSet<String>,
    taint_rules: HashSet<String>,
}

fn warn<E: std::fmt::Display>(r: Result<(), E>) {
    if let Err(e) = r {
        tracing::warn!(error = %e, "DRA object cannot be used");
    }
}

/// A cluster-scoped DRA kind: `up` adds or replaces, `rm` removes by name;
/// a relist removes the names (`known`) not listed.
fn dra_by_name<K: kube::Resource>(snap: &mut Snapshot, known: &mut HashSet<String>, c: Change<K>, up: fn(&mut Snapshot, &K), rm: fn(&mut Snapshot, &str)) {
    match c {
        Change::Apply(o) => {
            known.insert(name_of(o.meta()));
            up(snap, &o);
        }
        Change::Delete(o) => {
            let n = name_of(o.meta());
            known.remove(&n);
            rm(snap, &n);
        }
        Change::Relist(all) => {
            let keep: HashSet<String> = all.iter().map(|o| name_of(o.meta())).collect();
            for n in known.iter().filter(|n| !keep.contains(*n)) {
                rm(snap, n);
            }
            for o in &all {
                up(snap, o);
            }
            *known = keep;
        }
    }
}

/// ResourceClaims into the snapshot's devices.
fn apply_resource_claims(snap: &mut Snapshot, names: &mut DraNames, c: Change<res::ResourceClaim>) {
    fn claim_key(m: &ObjectMeta) -> (String, String) {
        (m.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into()), name_of(m))
    }
    match c {
        Change::Apply(o) => {
            let (ns, n) = claim_key(&o.metadata);
            names.claims.insert(format!("{ns}/{n}"));
            snap.devices.upsert_claim(&o);
        }
        Change::Delete(o) => {
            let (ns, n) = claim_key(&o.metadata);
            names.claims.remove(&format!("{ns}/{n}"));
            snap.devices.remove_claim(&ns, &n);
        }
        Change::Relist(all) => {
            let keep: HashSet<String> = all.iter().map(|o| claim_key(&o.metadata)).map(|(ns, n)| format!("{ns}/{n}")).collect();
            for k in names.claims.iter().filter(|k| !keep.contains(*k)) {
                if let Some((ns, n)) = k.split_once('/') {
                    snap.devices.remove_claim(ns, n);
                }
            }
            for o in &all {
                snap.devices.upsert_claim(o);
            }
            names.claims = keep;
        }
    }
}

/// ResourceClaims.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResourceClaims;

impl Kind<Loop> for ResourceClaims {
    type Object = res::ResourceClaim;

    fn name(self) -> &'static str {
        "resourceclaims"
    }

    fn need(self) -> Need {
        Need::Optional { feature: DRA_FEATURE }
    }

    fn api(self, client: kube::Client) -> Api<res::ResourceClaim> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<res::ResourceClaim>) {
        apply_resource_claims(lp.cache.snapshot_mut(), &mut lp.dra, change);
        lp.event(Events::RESOURCE_CLAIM);
    }
}

/// ResourceSlices.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResourceSlices;

impl Kind<Loop> for ResourceSlices {
    type Object = res::ResourceSlice;

    fn name(self) -> &'static str {
        "resourceslices"
    }

    fn need(self) -> Need {
        Need::Optional { feature: DRA_FEATURE }
    }

    fn api(self, client: kube::Client) -> Api<res::ResourceSlice> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<res::ResourceSlice>) {
        dra_by_name(lp.cache.snapshot_mut(), &mut lp.dra.slices, change, |s, o| warn(s.devices.upsert_slice(o)), |s, n| s.devices.remove_slice(n));
        lp.event(Events::RESOURCE_SLICE);
    }
}

/// DeviceClasses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeviceClasses;

impl Kind<Loop> for DeviceClasses {
    type Object = res::DeviceClass;

    fn name(self) -> &'static str {
        "deviceclasses"
    }

    fn need(self) -> Need {
        Need::Optional { feature: DRA_FEATURE }
    }

    fn api(self, client: kube::Client) -> Api<res::DeviceClass> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<res::DeviceClass>) {
        dra_by_name(lp.cache.snapshot_mut(), &mut lp.dra.classes, change, |s, o| warn(s.upsert_device_class(o)), |s, n| s.remove_device_class(n));
        lp.event(Events::DEVICE_CLASS);
    }
}

/// DeviceTaintRules.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeviceTaintRules;

impl Kind<Loop> for DeviceTaintRules {
    type Object = res::DeviceTaintRule;

    fn name(self) -> &'static str {
        "devicetaintrules"
    }

    fn need(self) -> Need {
        Need::Optional { feature: DRA_TAINT_RULES_FEATURE }
    }

    fn api(self, client: kube::Client) -> Api<res::DeviceTaintRule> {
        Api::all(client)
    }

    fn apply(self, lp: &mut Loop, change: Change<res::DeviceTaintRule>) {
        dra_by_name(lp.cache.snapshot_mut(), &mut lp.dra.taint_rules, change, |s, o| warn(s.devices.upsert_taint_rule(o)), |s, n| s.devices.remove_taint_rule(n));
        // Which devices of the slices are usable changed.
        lp.event(Events::RESOURCE_SLICE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let volumes = |st: &mut Storage, c| storage_by_name(st, c, Storage::volume_names, Storage::upsert_volume, Storage::remove_volume);
        let mut st = Storage::new();
        volumes(&mut st, Change::Relist(vec![pv("pv-1", None), pv("pv-3", None)]));
        apply_claims(&mut st, Change::Relist(vec![pvc("c", None), pvc("d", None)]));
        st.assume(&VolumeDecisions {
            pod_uid: "uid-p".into(),
            node: "n1".into(),
            bindings: vec![StaticBinding { pv: "pv-1".into(), claim: ClaimRef { namespace: "default".into(), name: "c".into(), uid: "uid-c".into() } }],
            provisions: vec![("default".into(), "d".into())],
        });
        // Updates that do not show the decisions (a status change, a relist
        // while the writes are in flight) keep them.
        volumes(&mut st, Change::Apply(pv("pv-1", None)));
        volumes(&mut st, Change::Relist(vec![pv("pv-1", None), pv("pv-2", None)]));
        apply_claims(&mut st, Change::Apply(pvc("d", None)));
        assert_eq!(st.assumed_count(), 2);
        let v = st.volume("pv-1").cloned().expect("pv-1");
        assert_eq!(st.claim_ref(&v).map(|r| r.name.as_str()), Some("c"));
        // The relist dropped pv-3 only.
        assert!(st.volume("pv-3").is_none() && st.volume("pv-2").is_some());
        // The API's objects take over once they show the decisions.
        volumes(&mut st, Change::Apply(pv("pv-1", Some("c"))));
        apply_claims(&mut st, Change::Apply(pvc("d", Some("n1"))));
        assert_eq!(st.assumed_count(), 0);
        let c = st.claim("default", "d").cloned().expect("d");
        assert_eq!(st.selected_node(&c), Some("n1"));
        // A claim relist without "c" removes it.
        apply_claims(&mut st, Change::Relist(vec![pvc("d", Some("n1"))]));
        assert!(st.claim("default", "c").is_none() && st.claim("default", "d").is_some());
        // A relist of a cluster-scoped kind drops what it does not hold.
        let class: storage::StorageClass = serde_json::from_value(serde_json::json!({"metadata": {"name": "sc"}, "provisioner": "p"})).expect("class");
        let classes = |st: &mut Storage, c| storage_by_name(st, c, Storage::class_names, Storage::upsert_class, Storage::remove_class);
        classes(&mut st, Change::Relist(vec![class]));
        assert!(st.class("sc").is_some());
        classes(&mut st, Change::Relist(vec![]));
        assert!(st.class("sc").is_none());
    }

    #[test]
    fn dra_events_feed_the_devices_and_relists_drop_what_is_gone() {
        let slice = |name: &str, node: &str| -> res::ResourceSlice {
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": {"driver": "gpu.example.com", "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": [{"name": "gpu-0"}]}})).expect("slice")
        };
        let claim = |name: &str| -> res::ResourceClaim {
            serde_json::from_value(serde_json::json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})).expect("claim")
        };
        let class: res::DeviceClass = serde_json::from_value(serde_json::json!({"metadata": {"name": "gpu.example.com"}, "spec": {}})).expect("class");
        let mut snap = Snapshot::default();
        let mut names = DraNames::default();
        let classes = |snap: &mut Snapshot, names: &mut DraNames, c| dra_by_name(snap, &mut names.classes, c, |s, o| warn(s.upsert_device_class(o)), |s, n| s.remove_device_class(n));
        dra_by_name(&mut snap, &mut names.slices, Change::Relist(vec![slice("s1", "n1"), slice("s2", "n2")]), |s, o| warn(s.devices.upsert_slice(o)), |s, n| s.devices.remove_slice(n));
        classes(&mut snap, &mut names, Change::Relist(vec![class]));
        assert!(snap.devices.classes().get("gpu.example.com").is_some());
        apply_resource_claims(&mut snap, &mut names, Change::Relist(vec![claim("a"), claim("b")]));
        assert!(snap.devices.claim("default", "a").is_some());
        apply_resource_claims(&mut snap, &mut names, Change::Apply(claim("c")));
        // A relist without "a": removed; "b" and "c" are listed.
        apply_resource_claims(&mut snap, &mut names, Change::Relist(vec![claim("b"), claim("c")]));
        assert!(snap.devices.claim("default", "a").is_none() && snap.devices.claim("default", "c").is_some());
        apply_resource_claims(&mut snap, &mut names, Change::Delete(claim("b")));
        assert!(snap.devices.claim("default", "b").is_none());
        // Not served any more: the empty relist drops every class.
        classes(&mut snap, &mut names, Change::Relist(vec![]));
        assert!(snap.devices.classes().get("gpu.example.com").is_none());
    }

}
