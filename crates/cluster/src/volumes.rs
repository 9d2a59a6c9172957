//! Storage in the local cluster, as a real cluster runs it: a CSI driver
//! ([`DRIVER`]) with a CSIDriver object and a CSINode per node (with a
//! per-driver attach limit), the default StorageClass [`DEFAULT_CLASS`]
//! (WaitForFirstConsumer), and one controller task that plays the
//! controllers behind PersistentVolumeClaims:
//!
//! - the **PV controller** (upstream `pkg/controller/volume/persistentvolume`):
//!   binds unbound claims to the smallest matching volume (class, size,
//!   access modes, selector, volume mode; claims of a WaitForFirstConsumer
//!   class only to volumes pre-bound to them, as the scheduler's PreBind
//!   leaves them), sets phases (PV Pending → Available → Bound → Released,
//!   claim Pending → Bound → Lost), asks for provisioning (the
//!   `volume.kubernetes.io/storage-provisioner` annotation) and reclaims
//!   released volumes;
//! - the **external provisioner** of [`DRIVER`]: once a claim of its class
//!   is Immediate or has the scheduler's `volume.kubernetes.io/selected-node`
//!   annotation, it creates a PV of the claim's size with node affinity on
//!   that node's zone, pre-bound to the claim;
//! - the **pvc-protection** and **pv-protection** controllers: a claim in
//!   use by a pod, and a bound volume, stay (deletionTimestamp set) until
//!   they are no longer used.
//!
//! The kubelet side ([`volumes_ready`]) keeps a pod Pending while one of
//! its claims is missing, unbound, bound to a volume the node cannot reach,
//! or (ReadWriteOncePod) used by another running pod.
//!
//! Simplifications: one pass over all claims and volumes per change (fine
//! for thousands of claims); no volume expansion, snapshots, attach
//! (VolumeAttachment) or generic ephemeral volume controller.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::jsonptr::Pointer as _;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::resources::{CSIDRIVERS, NODES, PODS, PVCS, PVS, STORAGE_CLASSES};
use super::selector::{Filter, LabelSelector};
use super::store::{self, Obj, Store, now_rfc3339};
pub use super::admission::storage::{PVC_PROTECTION, PV_PROTECTION, validate_claim, validate_volume};
use super::admission::storage::modes;
use berth_model::quantity;
use berth_model::selector::NodeSelector;

/// The simulated CSI driver, also the provisioner of the default class.
pub const DRIVER: &str = "csi.berth.dev";
/// The default StorageClass created at start.
pub const DEFAULT_CLASS: &str = "standard";
/// Marks the default StorageClass.
pub const IS_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// Set on a claim by the scheduler: the node chosen for its first consumer.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set on a claim by the PV controller: who must provision it.
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
const ZONE: &str = "topology.kubernetes.io/zone";

/// Storage simulation settings.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// Create the default class, the driver and CSINodes, and run the
    /// controllers (and the protection finalizers that need them).
    pub enabled: bool,
    /// Volumes of [`DRIVER`] each node can attach (its CSINode's
    /// `allocatable.count`).
    pub attach_limit: i32,
    /// Full resync period of the controllers (upstream's PV controller
    /// resyncs every 15 s; changes are handled at once regardless).
    pub resync: Duration,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self { enabled: true, attach_limit: 32, resync: Duration::from_secs(1) }
    }
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.at(ptr).and_then(Value::as_str).unwrap_or("")
}

fn ann<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.at("/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str)
}

/// The StorageClass a claim asks for (the beta annotation wins, as upstream).
pub fn claim_class(c: &Value) -> &str {
    ann(c, BETA_STORAGE_CLASS).unwrap_or_else(|| s(c, "/spec/storageClassName"))
}

fn volume_class(pv: &Value) -> &str {
    ann(pv, BETA_STORAGE_CLASS).unwrap_or_else(|| s(pv, "/spec/storageClassName"))
}

fn volume_mode(v: &Value) -> &str {
    match s(v, "/spec/volumeMode") {
        "" => "Filesystem",
        m => m,
    }
}

fn bytes(v: &Value, ptr: &str) -> Option<i64> {
    v.at(ptr).and_then(Value::as_str).and_then(|q| quantity::parse_value(q).ok())
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    v.at("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, x)| (k.clone(), x.as_str().unwrap_or("").to_string())).collect())
        .unwrap_or_default()
}

/// The StorageClass objects for the core/v1 and storage.k8s.io/v1 seed:
/// the default class and the CSIDriver of [`DRIVER`].
pub fn seed(store: &Store) -> Result<(), store::Error> {
    store.create(
        STORAGE_CLASSES,
        "",
        json!({"metadata": {"name": DEFAULT_CLASS, "annotations": {IS_DEFAULT_CLASS: "true"}},
            "provisioner": DRIVER, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": true}),
    )?;
    store.create(
        CSIDRIVERS,
        "",
        json!({"metadata": {"name": DRIVER}, "spec": {"attachRequired": true, "podInfoOnMount": false, "storageCapacity": false,
            "requiresRepublish": false, "fsGroupPolicy": "ReadWriteOnceWithFSType", "volumeLifecycleModes": ["Persistent"]}}),
    )?;
    Ok(())
}

/// The CSINode of a node: [`DRIVER`] with its attach limit and zone
/// topology, owned by the node (so the garbage collector removes it with it).
pub fn csinode_json(node: &str, node_uid: &str, attach_limit: i32) -> Value {
    json!({
        "metadata": {"name": node, "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": node, "topologyKeys": [ZONE], "allocatable": {"count": attach_limit}}]},
    })
}

/// Does the volume's required node affinity admit the node? (No affinity: yes;
/// an affinity that does not compile: no.)
pub fn volume_fits_node(pv: &Value, node: &Value) -> bool {
    let Some(req) = pv.at("/spec/nodeAffinity/required") else { return true };
    let Ok(ns) = serde_json::from_value::<k8s_openapi::api::core::v1::NodeSelector>(req.clone()) else { return false };
    match NodeSelector::compile(&ns, "spec.nodeAffinity.required") {
        Ok(sel) => sel.matches(s(node, "/metadata/name"), &labels(node)),
        Err(_) => false,
    }
}

/// The claims a pod's volumes name: `persistentVolumeClaim.claimName`, and
/// `<pod>-<volume>` for generic ephemeral volumes (with `true`).
pub fn pod_claims(pod: &Value) -> Vec<(String, bool)> {
    let pod_name = s(pod, "/metadata/name");
    pod.at("/spec/volumes")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter_map(|v| {
                    if let Some(c) = v.at("/persistentVolumeClaim/claimName").and_then(Value::as_str) {
                        Some((c.to_string(), false))
                    } else if v.get("ephemeral").is_some_and(|e| !e.is_null()) {
                        Some((format!("{pod_name}-{}", s(v, "/name")), true))
                    } else {
                        None
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn terminal(pod: &Value) -> bool {
    matches!(s(pod, "/status/phase"), "Succeeded" | "Failed")
}

/// The kubelet's volume manager: can the pod's volumes be mounted on `node`?
pub fn volumes_ready(store: &Store, pod: &Value, node: &Value) -> bool {
    let claims = pod_claims(pod);
    if claims.is_empty() {
        return true;
    }
    let ns = s(pod, "/metadata/namespace");
    let uid = s(pod, "/metadata/uid");
    for (name, ephemeral) in claims {
        let Ok(claim) = store.get(PVCS, ns, &name) else { return false };
        let c = &claim.value;
        if ephemeral
            && !c
                .at("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|o| o.iter().any(|r| r.get("uid").and_then(Value::as_str) == Some(uid)))
        {
            return false;
        }
        if s(c, "/status/phase") != "Bound" {
            return false;
        }
        let Ok(pv) = store.get(PVS, "", s(c, "/spec/volumeName")) else { return false };
        if !volume_fits_node(&pv.value, node) {
            return false;
        }
        if modes(c, "/spec/accessModes").contains(&"ReadWriteOncePod") {
            let f = Filter { namespace: Some(ns.to_string()), ..Default::default() };
            let Ok(pods) = store.list(PODS, &f, None, None) else { return false };
            let taken = pods.items.iter().any(|p| {
                p.uid() != uid && s(&p.value, "/status/phase") == "Running" && pod_claims(&p.value).iter().any(|(n, _)| *n == name)
            });
            if taken {
                return false;
            }
        }
    }
    true
}

/// Spawn the storage controllers. They stop when `stop` changes.
pub fn spawn(store: Arc<Store>, cfg: StorageConfig, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut rx: Vec<broadcast::Receiver<Arc<store::WatchEvent>>> =
            [PVCS, PVS, STORAGE_CLASSES, NODES].into_iter().map(|r| store.subscribe(r)).collect();
        let mut ctl = Controllers { store, said: HashSet::new() };
        let mut tick = tokio::time::interval(cfg.resync.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ctl.sync();
            let [a, b, c, d] = &mut rx[..] else { break };
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => {}
                r = a.recv() => if matches!(r, Err(broadcast::error::RecvError::Closed)) { break },
                r = b.recv() => if matches!(r, Err(broadcast::error::RecvError::Closed)) { break },
                r = c.recv() => if matches!(r, Err(broadcast::error::RecvError::Closed)) { break },
                r = d.recv() => if matches!(r, Err(broadcast::error::RecvError::Closed)) { break },
            }
            // One pass handles every change that arrived meanwhile.
            for r in &mut rx {
                while !matches!(r.try_recv(), Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)) {}
            }
        }
    })
}

struct Controllers {
    store: Arc<Store>,
    /// Events already recorded: (object uid, reason).
    said: HashSet<(String, &'static str)>,
}

fn list(store: &Store, r: usize) -> Vec<Arc<Obj>> {
    store.list(r, &Filter::default(), None, None).map(|l| l.items).unwrap_or_default()
}

fn log(r: Result<Option<Arc<Obj>>, store::Error>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "storage controller write failed (retried on the next pass)");
    }
}

fn set_phase(v: &mut Value, phase: &str) {
    if s(v, "/status/phase") != phase {
        if !v.get("status").is_some_and(Value::is_object) {
            v["status"] = json!({});
        }
        v["status"]["phase"] = json!(phase);
        v["status"]["lastPhaseTransitionTime"] = json!(now_rfc3339());
    }
}

fn set_ann(v: &mut Value, key: &str, val: &str) {
    if !v.at("/metadata/annotations").is_some_and(Value::is_object) {
        v["metadata"]["annotations"] = json!({});
    }
    v["metadata"]["annotations"][key] = json!(val);
}

fn without_finalizer(v: &Value, f: &str) -> Option<Value> {
    let list = v.at("/metadata/finalizers").and_then(Value::as_array)?;
    if !list.iter().any(|x| x.as_str() == Some(f)) {
        return None;
    }
    let mut n = v.clone();
    let kept: Vec<Value> = list.iter().filter(|x| x.as_str() != Some(f)).cloned().collect();
    n["metadata"]["finalizers"] = json!(kept);
    Some(n)
}

/// Is `pv` bound (or pre-bound) to claim `c`?
fn bound_to(pv: &Value, c: &Value) -> bool {
    let r = pv.at("/spec/claimRef");
    r.is_some_and(|r| {
        !r.is_null()
            && s(r, "/name") == s(c, "/metadata/name")
            && s(r, "/namespace") == s(c, "/metadata/namespace")
            && (s(r, "/uid").is_empty() || s(r, "/uid") == s(c, "/metadata/uid"))
    })
}

fn has_claim_ref(pv: &Value) -> bool {
    pv.at("/spec/claimRef").is_some_and(|r| !r.is_null())
}

/// Upstream's `FindMatchingVolume` without a node (the PV controller's
/// path): a volume pre-bound to the claim, else (not for delayed binding)
/// the smallest Available volume of the claim's class that is big enough,
/// has its access modes and volume mode, and matches its selector.
fn find_match<'a>(c: &Value, pvs: &'a [Arc<Obj>], delayed: bool) -> Option<&'a Arc<Obj>> {
    let want = bytes(c, "/spec/resources/requests/storage")?;
    let class = claim_class(c);
    let want_modes = modes(c, "/spec/accessModes");
    let selector = match c.at("/spec/selector").filter(|x| !x.is_null()) {
        Some(sel) => Some(LabelSelector::from_structured(sel).ok()?),
        None => None,
    };
    let mut best: Option<(&Arc<Obj>, i64)> = None;
    for pv in pvs {
        let v = &pv.value;
        if store::is_deleting(v) || volume_mode(v) != volume_mode(c) {
            continue;
        }
        let Some(size) = bytes(v, "/spec/capacity/storage") else { continue };
        if has_claim_ref(v) {
            if bound_to(v, c) && size >= want {
                return Some(pv);
            }
            continue;
        }
        if size < want || s(v, "/status/phase") != "Available" || volume_class(v) != class || delayed {
            continue;
        }
        if selector.as_ref().is_some_and(|sel| !sel.matches_object(v)) {
            continue;
        }
        let have = modes(v, "/spec/accessModes");
        if !want_modes.iter().all(|m| have.contains(m)) {
            continue;
        }
        if best.is_none_or(|(_, b)| size < b) {
            best = Some((pv, size));
        }
    }
    best.map(|(pv, _)| pv)
}

/// An event's name as upstream's recorders make it: the object's name, a
/// dot, and the time in hexadecimal nanoseconds (kube-apiserver refuses the
/// generateName "<name>.", which ends in a dot).
fn event_name(object: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{object}.{nanos:x}")
}

impl Controllers {
    fn event(&mut self, obj: &Value, kind: &str, ty: &str, reason: &'static str, message: String, component: &str) {
        if !self.said.insert((s(obj, "/metadata/uid").to_string(), reason)) {
            return;
        }
        let now = now_rfc3339();
        let ns = s(obj, "/metadata/namespace");
        // Written as core/v1, as upstream's volume controllers do; stored
        // in the one Events store (see `eventview`).
        let mut ev = json!({
            "metadata": {"name": event_name(s(obj, "/metadata/name")), "namespace": ns},
            "involvedObject": {"kind": kind, "apiVersion": "v1", "namespace": ns, "name": s(obj, "/metadata/name"),
                "uid": s(obj, "/metadata/uid"), "resourceVersion": s(obj, "/metadata/resourceVersion")},
            "reason": reason, "message": message, "type": ty, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now, "source": {"component": component},
            "reportingComponent": component, "reportingInstance": "",
        });
        super::eventview::to_stored(&mut ev);
        if let Err(e) = self.store.create(super::resources::EVENTS_V1, ns, ev) {
            tracing::debug!(error = %e, "could not record a storage event");
        }
    }

    /// One pass of every controller over the current state.
    fn sync(&mut self) {
        let classes: HashMap<String, Arc<Obj>> = list(&self.store, STORAGE_CLASSES).into_iter().map(|c| (c.name().to_string(), c)).collect();
        let claims = list(&self.store, PVCS);
        let pvs = list(&self.store, PVS);
        let by_key: HashMap<(&str, &str), &Arc<Obj>> = claims.iter().map(|c| ((c.namespace(), c.name()), c)).collect();
        for pv in &pvs {
            self.sync_volume(pv, &by_key);
        }
        // Later passes see the volumes as these writes left them.
        let pvs = list(&self.store, PVS);
        for c in &claims {
            if store::is_deleting(&c.value) {
                self.protect_claim(c);
            } else {
                self.sync_claim(c, &pvs, &classes);
            }
        }
        let live: HashSet<&str> = claims.iter().chain(pvs.iter()).map(|o| o.uid()).collect();
        self.said.retain(|(uid, _)| live.contains(uid.as_str()));
    }

    fn sync_volume(&mut self, pv: &Arc<Obj>, claims: &HashMap<(&str, &str), &Arc<Obj>>) {
        let v = &pv.value;
        let st = &self.store;
        if store::is_deleting(v) {
            if s(v, "/status/phase") != "Bound" {
                log(st.modify(PVS, "", pv.name(), Some(pv.uid()), |v| without_finalizer(v, PV_PROTECTION)));
            }
            return;
        }
        if !has_claim_ref(v) {
            log(st.modify(PVS, "", pv.name(), Some(pv.uid()), |v| {
                let mut n = v.clone();
                set_phase(&mut n, "Available");
                Some(n)
            }));
            return;
        }
        let ref_uid = s(v, "/spec/claimRef/uid");
        if ref_uid.is_empty() {
            // Pre-bound by name: wait for the claim's sync.
            log(st.modify(PVS, "", pv.name(), Some(pv.uid()), |v| {
                let mut n = v.clone();
                set_phase(&mut n, "Available");
                Some(n)
            }));
            return;
        }
        let claim = claims.get(&(s(v, "/spec/claimRef/namespace"), s(v, "/spec/claimRef/name"))).filter(|c| c.uid() == ref_uid);
        match claim {
            Some(c) if s(&c.value, "/spec/volumeName") == pv.name() => {
                log(st.modify(PVS, "", pv.name(), Some(pv.uid()), |v| {
                    let mut n = v.clone();
                    set_phase(&mut n, "Bound");
                    Some(n)
                }));
            }
            // Bound to a claim that is not bound yet: the claim's sync binds it.
            Some(_) => {}
            None => {
                if !matches!(s(v, "/status/phase"), "Released" | "Failed") {
                    self.reclaim(pv);
                }
            }
        }
    }

    /// The claim of a bound volume is gone: Retain and Recycle leave it
    /// Released; Delete deletes volumes this driver provisioned (others fail).
    fn reclaim(&mut self, pv: &Arc<Obj>) {
        let v = &pv.value;
        let policy = match s(v, "/spec/persistentVolumeReclaimPolicy") {
            "" => "Retain",
            p => p,
        };
        let st = &self.store;
        if policy == "Delete" && ann(v, PROVISIONED_BY) == Some(DRIVER) {
            // Released first, so that pv-protection lets the deletion through.
            log(st.modify(PVS, "", pv.name(), Some(pv.uid()), |v| {
                let mut n = v.clone();
                set_phase(&mut n, "Released");
                Some(n)
            }));
            if let Err(e) = st.delete(PVS, "", pv.name(), &store::DeleteOpts { uid: Some(pv.uid().to_string()), ..Default::default() }) {
                tracing::debug!(error = %e, "could not delete a released volume");
            }
            return;
        }
        let phase = if policy == "Delete" { "Failed" } else { "Released" };
        log(st.modify(PVS, "", pv.name(), Some(pv.uid()), |v| {
            let mut n = v.clone();
            set_phase(&mut n, phase);
            if phase == "Failed" {
                n["status"]["message"] = json!(format!("error getting deleter volume plugin for volume \"{}\": no deletable volume plugin matched", s(v, "/metadata/name")));
            }
            Some(n)
        }));
    }

    /// pvc-protection: a deleting claim goes once no pod that is not
    /// terminal uses it.
    fn protect_claim(&mut self, c: &Arc<Obj>) {
        let f = Filter { namespace: Some(c.namespace().to_string()), ..Default::default() };
        let Ok(pods) = self.store.list(PODS, &f, None, None) else { return };
        let used = pods.items.iter().any(|p| !terminal(&p.value) && pod_claims(&p.value).iter().any(|(n, _)| n == c.name()));
        if !used {
            log(self.store.modify(PVCS, c.namespace(), c.name(), Some(c.uid()), |v| without_finalizer(v, PVC_PROTECTION)));
        }
    }

    fn sync_claim(&mut self, c: &Arc<Obj>, pvs: &[Arc<Obj>], classes: &HashMap<String, Arc<Obj>>) {
        let v = &c.value;
        let volume_name = s(v, "/spec/volumeName");
        if s(v, "/status/phase") == "Bound" || s(v, "/status/phase") == "Lost" {
            if !pvs.iter().any(|p| p.name() == volume_name) {
                if s(v, "/status/phase") == "Bound" {
                    self.event(v, "PersistentVolumeClaim", "Warning", "ClaimLost", "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!".into(), "persistentvolume-controller");
                }
                log(self.store.modify(PVCS, c.namespace(), c.name(), Some(c.uid()), |v| {
                    let mut n = v.clone();
                    set_phase(&mut n, "Lost");
                    Some(n)
                }));
            }
            return;
        }
        if !volume_name.is_empty() {
            // Pre-bound by the user to a volume.
            match pvs.iter().find(|p| p.name() == volume_name) {
                Some(pv) if !has_claim_ref(&pv.value) || bound_to(&pv.value, v) => self.bind(c, pv),
                Some(_) => self.event(v, "PersistentVolumeClaim", "Warning", "FailedBinding", format!("volume \"{volume_name}\" already bound to a different claim."), "persistentvolume-controller"),
                None => {}
            }
            return;
        }
        let class_name = claim_class(v);
        let class = classes.get(class_name);
        let delayed = class.is_some_and(|k| s(&k.value, "/volumeBindingMode") == "WaitForFirstConsumer");
        if let Some(pv) = find_match(v, pvs, delayed) {
            self.bind(c, pv);
            return;
        }
        let selected = ann(v, SELECTED_NODE).filter(|n| !n.is_empty());
        if delayed && selected.is_none() {
            self.event(v, "PersistentVolumeClaim", "Normal", "WaitForFirstConsumer", "waiting for first consumer to be created before binding".into(), "persistentvolume-controller");
            return;
        }
        if class_name.is_empty() {
            self.event(v, "PersistentVolumeClaim", "Normal", "FailedBinding", "no persistent volumes available for this claim and no storage class is set".into(), "persistentvolume-controller");
            return;
        }
        let Some(class) = class else {
            self.event(v, "PersistentVolumeClaim", "Warning", "ProvisioningFailed", format!("storageclass.storage.k8s.io \"{class_name}\" not found"), "persistentvolume-controller");
            return;
        };
        let provisioner = s(&class.value, "/provisioner").to_string();
        if provisioner == "kubernetes.io/no-provisioner" || provisioner.is_empty() {
            self.event(v, "PersistentVolumeClaim", "Normal", "FailedBinding", "no persistent volumes available for this claim and no storage class is set".into(), "persistentvolume-controller");
            return;
        }
        if ann(v, STORAGE_PROVISIONER) != Some(provisioner.as_str()) {
            log(self.store.modify(PVCS, c.namespace(), c.name(), Some(c.uid()), |v| {
                let mut n = v.clone();
                set_ann(&mut n, STORAGE_PROVISIONER, &provisioner);
                set_ann(&mut n, BETA_STORAGE_PROVISIONER, &provisioner);
                Some(n)
            }));
            self.event(v, "PersistentVolumeClaim", "Normal", "ExternalProvisioning", format!("Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."), "persistentvolume-controller");
        }
        if provisioner == DRIVER {
            self.provision(c, &class.value, selected);
        }
    }

    /// Upstream's bind: the volume's claimRef and phase, then the claim's
    /// volumeName, annotations and status.
    fn bind(&mut self, c: &Arc<Obj>, pv: &Arc<Obj>) {
        let claim = c.value.clone();
        let mut taken = true;
        log(self.store.modify(PVS, "", pv.name(), Some(pv.uid()), |v| {
            // Re-checked on the current volume: an earlier bind of this pass may have taken it.
            if (has_claim_ref(v) && !bound_to(v, &claim)) || store::is_deleting(v) {
                return None;
            }
            taken = false;
            let mut n = v.clone();
            if !has_claim_ref(v) || s(v, "/spec/claimRef/uid").is_empty() {
                if !has_claim_ref(v) {
                    set_ann(&mut n, BOUND_BY_CONTROLLER, "yes");
                }
                n["spec"]["claimRef"] = json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": s(&claim, "/metadata/namespace"),
                    "name": s(&claim, "/metadata/name"), "uid": s(&claim, "/metadata/uid"), "resourceVersion": s(&claim, "/metadata/resourceVersion")});
            }
            set_phase(&mut n, "Bound");
            Some(n)
        }));
        if taken {
            return;
        }
        let (pv_name, pv_modes, pv_cap) = (pv.name().to_string(), pv.value.at("/spec/accessModes").cloned(), pv.value.at("/spec/capacity").cloned());
        log(self.store.modify(PVCS, c.namespace(), c.name(), Some(c.uid()), |v| {
            let mut n = v.clone();
            if s(v, "/spec/volumeName").is_empty() {
                n["spec"]["volumeName"] = json!(pv_name);
                set_ann(&mut n, BOUND_BY_CONTROLLER, "yes");
            }
            set_ann(&mut n, BIND_COMPLETED, "yes");
            set_phase(&mut n, "Bound");
            n["status"]["accessModes"] = pv_modes.unwrap_or(json!([]));
            n["status"]["capacity"] = pv_cap.unwrap_or(json!({}));
            Some(n)
        }));
    }

    /// The external provisioner of [`DRIVER`]: a volume of the claim's size
    /// in the selected node's zone (Immediate: the class's allowed zone, or
    /// the first node's), pre-bound to the claim.
    fn provision(&mut self, c: &Arc<Obj>, class: &Value, selected: Option<&str>) {
        let v = &c.value;
        let pv_name = format!("pvc-{}", c.uid());
        if self.store.get(PVS, "", &pv_name).is_ok() {
            return;
        }
        let allowed: Vec<String> = class
            .at("/allowedTopologies")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|t| t.at("/matchLabelExpressions").and_then(Value::as_array).into_iter().flatten())
            .filter(|e| s(e, "/key") == ZONE)
            .flat_map(|e| e.at("/values").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_string))
            .collect();
        let zone = match selected {
            Some(node) => match self.store.get(NODES, "", node) {
                Ok(n) => labels(&n.value).get(ZONE).cloned(),
                Err(_) => {
                    self.event(v, "PersistentVolumeClaim", "Warning", "ProvisioningFailed", format!("failed to get target node: node \"{node}\" not found"), DRIVER);
                    return;
                }
            },
            None => allowed.first().cloned().or_else(|| list(&self.store, NODES).first().and_then(|n| labels(&n.value).get(ZONE).cloned())),
        };
        if let Some(z) = &zone
            && !allowed.is_empty()
            && !allowed.contains(z)
        {
            self.event(v, "PersistentVolumeClaim", "Warning", "ProvisioningFailed", format!("failed to provision volume with StorageClass \"{}\": topology {ZONE}={z} is not allowed by the class", claim_class(v)), DRIVER);
            return;
        }
        let Some(size) = v.at("/spec/resources/requests/storage").cloned() else { return };
        self.event(v, "PersistentVolumeClaim", "Normal", "Provisioning", format!("External provisioner is provisioning volume for claim \"{}/{}\"", c.namespace(), c.name()), DRIVER);
        let reclaim = match s(class, "/reclaimPolicy") {
            "" => "Delete",
            p => p,
        };
        let mut spec = json!({
            "capacity": {"storage": size},
            "accessModes": v.at("/spec/accessModes").cloned().unwrap_or(json!(["ReadWriteOnce"])),
            "volumeMode": volume_mode(v),
            "storageClassName": claim_class(v),
            "persistentVolumeReclaimPolicy": reclaim,
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": c.namespace(), "name": c.name(), "uid": c.uid(),
                "resourceVersion": s(v, "/metadata/resourceVersion")},
            "csi": {"driver": DRIVER, "volumeHandle": format!("vol-{}", c.uid()), "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": DRIVER}},
        });
        if volume_mode(v) == "Filesystem" {
            spec["csi"]["fsType"] = json!("ext4");
        }
        if let Some(m) = class.get("mountOptions").filter(|m| !m.is_null()) {
            spec["mountOptions"] = m.clone();
        }
        if let Some(z) = zone {
            spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": [z]}]}]}});
        }
        let pv = json!({"metadata": {"name": pv_name, "annotations": {PROVISIONED_BY: DRIVER}}, "spec": spec});
        match self.store.create(PVS, "", pv) {
            Ok(_) => self.event(v, "PersistentVolumeClaim", "Normal", "ProvisioningSucceeded", format!("Successfully provisioned volume {pv_name}"), DRIVER),
            Err(e) => tracing::debug!(error = %e, "provisioning failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(size: &str, class: &str, modes: &[&str]) -> Value {
        json!({"metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "spec": {"storageClassName": class, "accessModes": modes, "resources": {"requests": {"storage": size}}}})
    }

    fn pv(name: &str, size: &str, class: &str, modes: &[&str]) -> Arc<Obj> {
        let v = json!({"metadata": {"name": name, "labels": {"tier": "fast"}},
            "spec": {"storageClassName": class, "accessModes": modes, "capacity": {"storage": size}}, "status": {"phase": "Available"}});
        Obj::from_value(v, 1)
    }

    #[test]
    fn find_match_picks_the_smallest_fitting_volume() {
        let pvs = vec![pv("big", "10Gi", "slow", &["ReadWriteOnce"]), pv("small", "2Gi", "slow", &["ReadWriteOnce"]), pv("tiny", "1Gi", "slow", &["ReadWriteOnce"])];
        let c = claim("1500Mi", "slow", &["ReadWriteOnce"]);
        assert_eq!(find_match(&c, &pvs, false).map(|p| p.name()), Some("small"));
        // Another class, a missing access mode, delayed binding: nothing.
        assert!(find_match(&claim("1Gi", "fast", &["ReadWriteOnce"]), &pvs, false).is_none());
        assert!(find_match(&claim("1Gi", "slow", &["ReadWriteMany"]), &pvs, false).is_none());
        assert!(find_match(&c, &pvs, true).is_none());
        // A selector the volumes do not match.
        let mut sel = c.clone();
        sel["spec"]["selector"] = json!({"matchLabels": {"tier": "slow"}});
        assert!(find_match(&sel, &pvs, false).is_none());
    }

    #[test]
    fn find_match_prefers_a_volume_pre_bound_to_the_claim_even_when_delayed() {
        let pre = pv("pre", "5Gi", "slow", &["ReadWriteOnce"]);
        let mut v = pre.value.clone();
        v["spec"]["claimRef"] = json!({"name": "c", "namespace": "ns", "uid": "u1"});
        let pre = Obj::from_value(v, 1);
        let pvs = vec![pv("small", "1Gi", "slow", &["ReadWriteOnce"]), pre];
        assert_eq!(find_match(&claim("1Gi", "slow", &["ReadWriteOnce"]), &pvs, true).map(|p| p.name()), Some("pre"));
    }

    #[test]
    fn volume_node_affinity() {
        let node = json!({"metadata": {"name": "n", "labels": {ZONE: "zone-a"}}});
        let mut v = pv("p", "1Gi", "x", &["ReadWriteOnce"]).value.clone();
        assert!(volume_fits_node(&v, &node));
        v["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-b"]}]}]}});
        assert!(!volume_fits_node(&v, &node));
        v["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": []}});
        assert!(!validate_volume(&v).is_empty());
    }
}
