//! VolumeBinding: a pod's PersistentVolumeClaims must be bound, bindable or
//! provisionable on the node (upstream `volumebinding`, with its binder).
//!
//! - PreFilter sorts the pod's claims: bound ones (their PV's node affinity is
//!   checked per node, and local PVs narrow the nodes), unbound
//!   WaitForFirstConsumer ones (decided per node), and unbound Immediate ones,
//!   which make the pod unschedulable until the PV controller binds them.
//! - Filter finds, per node, the smallest matching static PV for each delayed
//!   claim (upstream `FindMatchingVolume`), or checks that the class can
//!   provision there (provisioner, allowedTopologies, CSIStorageCapacity).
//! - Score (StorageCapacityScoring, on by default from v1.37) prefers nodes
//!   whose volumes fit tightly, through the args' shape.
//! - Reserve records the node's decisions in the cycle state ([`reserved`]);
//!   the caller assumes them in the cache (`Cache::assume_volumes`), so the
//!   next pod does not take the same PV, and `Cache::forget` reverts them.
//! - PreBind turns them into the API writes upstream's binder makes
//!   ([`pre_bind_work`]): PV claimRefs and the claims' selected-node
//!   annotation, then a wait, bounded by bindTimeoutSeconds, until the PV
//!   controller has bound every claim. The engine makes no API call.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;

use super::node_resources_fit::ShapePoint;
use crate::cache::storage::{Capacity, Claim, ClaimRef, Class, StaticBinding, Volume, VolumeDecisions};
use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, NodeScore, Plugin, Points, PreFilterNodes, Status, MAX_NODE_SCORE};
use berth_model::{NodeInfo, PodInfo};

/// Plugin name.
pub const NAME: &str = "VolumeBinding";
/// A delayed claim found neither a PV nor provisioning on the node.
pub const REASON_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// A bound PV's node affinity excludes the node.
pub const REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// CSIStorageCapacity shows too little space for a volume to provision.
pub const REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// A bound claim's PV does not exist.
pub const REASON_PV_NOT_EXIST: &str = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// Immediate claims must be bound before the pod is scheduled.
pub const REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// Upstream's default bind timeout.
pub const DEFAULT_BIND_TIMEOUT_SECONDS: i64 = 600;

/// VolumeBindingArgs.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// How long PreBind waits for the PV controller (600 when unset).
    #[serde(default)]
    pub bind_timeout_seconds: Option<i64>,
    /// Score shape over volume utilization (default (0,10),(100,0): tight fits win).
    #[serde(default)]
    pub shape: Option<Vec<ShapePoint>>,
    /// apiVersion/kind are accepted and ignored.
    #[serde(default)]
    pub api_version: Option<String>,
    /// See `api_version`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// The VolumeBinding plugin.
#[derive(Debug)]
pub struct VolumeBinding {
    /// Shape points (utilization, score 0..=100).
    shape: Vec<(i64, i64)>,
    bind_timeout: Duration,
}

impl VolumeBinding {
    /// Validates the args (upstream `ValidateVolumeBindingArgs`).
    pub fn new(args: Args) -> Result<Self, String> {
        let t = args.bind_timeout_seconds.unwrap_or(DEFAULT_BIND_TIMEOUT_SECONDS);
        if t < 0 {
            return Err(format!("bindTimeoutSeconds: invalid BindTimeoutSeconds, should not be a negative value, got {t}"));
        }
        let pts = args.shape.unwrap_or_else(|| vec![ShapePoint { utilization: 0, score: 10 }, ShapePoint { utilization: 100, score: 0 }]);
        if pts.is_empty() {
            return Err("shape: at least one point must be specified".into());
        }
        for (i, p) in pts.iter().enumerate() {
            if !(0..=100).contains(&p.utilization) {
                return Err(format!("shape[{i}].utilization: must be in the range 0-100, got {}", p.utilization));
            }
            if i > 0 && p.utilization <= pts[i - 1].utilization {
                return Err(format!("shape[{i}].utilization: values must be sorted in increasing order"));
            }
            if !(0..=10).contains(&p.score) {
                return Err(format!("shape[{i}].score: must be in the range 0-10, got {}", p.score));
            }
        }
        Ok(VolumeBinding { shape: pts.iter().map(|p| (p.utilization, p.score * (MAX_NODE_SCORE / 10))).collect(), bind_timeout: Duration::from_secs(t.unsigned_abs()) })
    }

    fn shape_at(&self, u: i64) -> i64 {
        for (i, &(x, s)) in self.shape.iter().enumerate() {
            if u <= x {
                if i == 0 {
                    return s;
                }
                let (px, ps) = self.shape[i - 1];
                return ps + (s - ps) * (u - px) / (x - px);
            }
        }
        self.shape.last().map(|p| p.1).unwrap_or(0)
    }

    /// Upstream's volume capacity scorer: the mean, over storage classes, of
    /// the shape at requested/capacity (rounded half away from zero).
    fn class_score(&self, classes: &[(String, i64, i64)]) -> i64 {
        if classes.is_empty() {
            return 0;
        }
        let sum: i64 = classes
            .iter()
            .map(|(_, req, cap)| if *cap == 0 || req > cap { self.shape_at(100) } else { self.shape_at(req * 100 / cap) })
            .sum();
        let n = classes.len() as i64;
        (sum * 2 + n).div_euclid(2 * n)
    }
}

/// An unbound WaitForFirstConsumer claim with what Filter needs to decide it.
#[derive(Clone, Debug)]
struct Delayed {
    claim: Arc<Claim>,
    /// The selected node (assumed or annotated).
    selected: Option<String>,
    class: Arc<Class>,
    /// CSIStorageCapacities of the class when the driver tracks capacity and the claim asks for a size.
    capacities: Option<Vec<Arc<Capacity>>>,
}

/// What the pod's volumes need on one node (upstream `PodVolumes`).
#[derive(Clone, Debug, Default)]
struct NodeVolumes {
    bindings: Vec<(Arc<Claim>, Arc<Volume>)>,
    provisions: Vec<(Arc<Claim>, Option<Arc<Capacity>>)>,
}

/// A candidate PV with its claimRef as the cache sees it (assumptions included).
type Candidate = (Arc<Volume>, Option<ClaimRef>);

/// The cycle state.
#[derive(Clone, Debug, Default)]
struct State {
    bound: Vec<(Arc<Claim>, Option<Arc<Volume>>)>,
    delayed: Vec<Delayed>,
    /// Candidate PVs per class, with their claimRef as the cache sees it (assumptions included).
    candidates: HashMap<String, Vec<Candidate>>,
    /// Filter's findings per node name, shared by clones (as upstream's pointer state is).
    by_node: Arc<Mutex<HashMap<String, NodeVolumes>>>,
    /// Every claim of the pod is fully bound.
    all_bound_at_prefilter: bool,
}

/// What Reserve decided for the pod; read it with [`reserved`].
#[derive(Clone, Debug, Default)]
struct Reserved {
    decisions: Option<VolumeDecisions>,
}

/// The API work of PreBind, for the daemon to carry out off the scheduling loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreBindWork {
    /// The pod ("namespace/name").
    pub pod: String,
    /// The node.
    pub node: String,
    /// PVs to update: spec.claimRef to the claim (kind PersistentVolumeClaim,
    /// apiVersion v1, namespace, name, uid) and, unless it was pre-bound to
    /// it, the annotation `pv.kubernetes.io/bound-by-controller: "yes"`.
    pub bind_pvs: Vec<StaticBinding>,
    /// Claims ("namespace", "name") to update with the annotation
    /// `volume.kubernetes.io/selected-node: <node>`.
    pub provision_claims: Vec<(String, String)>,
    /// Then wait until each of these claims is fully bound (spec.volumeName
    /// set and `pv.kubernetes.io/bind-completed` present), failing when a
    /// PV's claimRef is dropped, a claim's selected-node annotation is removed
    /// (provisioning failed), a bound PV's node affinity excludes the node,
    /// or the pod is deleted.
    pub wait_for: Vec<(String, String)>,
    /// Upper bound of the wait (bindTimeoutSeconds).
    pub timeout: Duration,
}

/// The volume decisions Reserve made for the pod, to assume in the cache.
pub fn reserved(state: &CycleState) -> Option<&VolumeDecisions> {
    state.get::<Reserved>().and_then(|r| r.decisions.as_ref())
}

/// The API work PreBind produced (None when every claim was bound already).
pub fn pre_bind_work(state: &CycleState) -> Option<&PreBindWork> {
    state.get::<PreBindWork>()
}

fn claim_status(pod: &PodInfo, snap: &Snapshot) -> Result<Vec<(Arc<Claim>, bool)>, Status> {
    let mut out = Vec::new();
    for v in pod.volumes.iter() {
        let Some(name) = v.claim() else { continue };
        let Some(c) = snap.storage.claim(&pod.namespace, name) else {
            return Err(Status::unresolvable(if v.is_ephemeral() {
                format!("waiting for ephemeral volume controller to create the persistentvolumeclaim {name:?}")
            } else {
                format!("persistentvolumeclaim {name:?} not found")
            }));
        };
        if let Some(e) = &c.error {
            return Err(Status::unresolvable(e.to_string()));
        }
        if c.lost {
            return Err(Status::unresolvable(format!("persistentvolumeclaim {:?} bound to non-existent persistentvolume {:?}", c.name, c.volume_name)));
        }
        if c.deleting {
            return Err(Status::unresolvable(format!("persistentvolumeclaim {:?} is being deleted", c.name)));
        }
        if v.is_ephemeral() && c.controller_uid.as_deref() != Some(pod.uid.as_str()) {
            return Err(Status::unresolvable(format!("PVC {}/{} was not created for pod {}/{} (pod is not owner)", c.namespace, c.name, pod.namespace, pod.name)));
        }
        out.push((c.clone(), v.is_ephemeral()));
    }
    Ok(out)
}

impl State {
    /// Upstream `FindPodVolumes` for one node: the reasons it does not fit, or what the volumes need there.
    fn find(&self, node: &NodeInfo) -> Result<NodeVolumes, Vec<Cow<'static, str>>> {
        let labels = &node.node.labels;
        let name = node.name();
        let mut bound_ok = true;
        let mut unbound_ok = true;
        let mut enough_space = true;
        let mut pvs_found = true;
        let mut out = NodeVolumes::default();
        for (_, pv) in &self.bound {
            match pv {
                None => {
                    pvs_found = false;
                    break;
                }
                Some(pv) if !pv.admits(name, labels) => {
                    bound_ok = false;
                    break;
                }
                Some(_) => {}
            }
        }
        'delayed: {
            if self.delayed.is_empty() {
                break 'delayed;
            }
            let mut to_provision: Vec<&Delayed> = Vec::new();
            let mut to_match: Vec<&Delayed> = Vec::new();
            for d in &self.delayed {
                match &d.selected {
                    Some(n) if n != name => {
                        unbound_ok = false;
                        break 'delayed;
                    }
                    Some(_) => to_provision.push(d),
                    None => to_match.push(d),
                }
            }
            if !to_match.is_empty() {
                // Smallest requests first, so that each gets the smallest PV that fits.
                to_match.sort_by_key(|d| d.claim.request);
                let mut chosen: HashSet<&str> = HashSet::new();
                unbound_ok = true;
                for d in to_match {
                    match self.find_matching(&d.claim, name, labels, &chosen) {
                        Some(pv) => {
                            chosen.insert(&pv.name);
                            out.bindings.push((d.claim.clone(), pv.clone()));
                        }
                        None => {
                            unbound_ok = false;
                            to_provision.push(d);
                        }
                    }
                }
            }
            if !to_provision.is_empty() {
                // Upstream lets the provisioning check decide the outcome for these claims.
                unbound_ok = true;
                for d in to_provision {
                    if !d.class.provisions() || !d.class.topology_allows(labels) {
                        unbound_ok = false;
                        out.provisions.clear();
                        break;
                    }
                    let cap = match &d.capacities {
                        None => None,
                        Some(caps) => {
                            let found = caps.iter().find(|c| {
                                c.volume_limit().is_some_and(|l| l >= d.claim.request) && c.node_topology.as_ref().is_some_and(|s| s.matches(labels))
                            });
                            match found {
                                Some(c) => Some(c.clone()),
                                None => {
                                    enough_space = false;
                                    out.provisions.clear();
                                    break;
                                }
                            }
                        }
                    };
                    out.provisions.push((d.claim.clone(), cap));
                }
            }
        }
        let mut reasons: Vec<Cow<'static, str>> = Vec::new();
        if !bound_ok {
            reasons.push(Cow::Borrowed(REASON_NODE_CONFLICT));
        }
        if !unbound_ok {
            reasons.push(Cow::Borrowed(REASON_BIND_CONFLICT));
        }
        if !enough_space {
            reasons.push(Cow::Borrowed(REASON_NOT_ENOUGH_SPACE));
        }
        if !pvs_found {
            reasons.push(Cow::Borrowed(REASON_PV_NOT_EXIST));
        }
        if reasons.is_empty() { Ok(out) } else { Err(reasons) }
    }

    /// Upstream `FindMatchingVolume` on the scheduler path: a PV pre-bound to
    /// the claim, else the smallest available PV of the class that fits the
    /// request, volume mode, selector, attributes class, node affinity and
    /// access modes.
    fn find_matching<'a>(&'a self, claim: &Claim, node: &str, labels: &berth_model::Labels, chosen: &HashSet<&str>) -> Option<&'a Arc<Volume>> {
        let mut best: Option<&Arc<Volume>> = None;
        for (pv, claim_ref) in self.candidates.get(&claim.class).into_iter().flatten() {
            if chosen.contains(pv.name.as_str()) {
                continue;
            }
            let bound_here = Volume::bound_to(claim_ref.as_ref(), claim);
            if claim_ref.is_some() && !bound_here {
                continue;
            }
            if pv.capacity < claim.request || pv.block != claim.block || pv.deleting {
                continue;
            }
            let affinity_ok = pv.admits(node, labels);
            if bound_here {
                return if affinity_ok { Some(pv) } else { None };
            }
            if !pv.available || claim.selector.as_ref().is_some_and(|s| !s.matches(&pv.labels)) {
                continue;
            }
            if pv.class != claim.class || pv.attributes_class != claim.attributes_class || !affinity_ok || !pv.access_modes.contains(claim.access_modes) {
                continue;
            }
            if best.is_none_or(|b| b.capacity > pv.capacity) {
                best = Some(pv);
            }
        }
        best
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER.or(Points::FILTER).or(Points::PRE_SCORE).or(Points::SCORE).or(Points::RESERVE).or(Points::PRE_BIND)
    }

    fn events(&self) -> Events {
        Events::STORAGE_CLASS
            .or(Events::PVC)
            .or(Events::PV)
            .or(Events::NODE_ADD)
            .or(Events::NODE_LABEL)
            .or(Events::NODE_TAINT)
            .or(Events::CSI_NODE)
            .or(Events::CSI_DRIVER)
            .or(Events::CSI_STORAGE_CAPACITY)
    }

    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        if !pod.volumes.iter().any(|v| v.claim().is_some()) {
            return (Status::skip(), None);
        }
        let claims = match claim_status(pod, snap) {
            Ok(c) => c,
            Err(s) => return (s, None),
        };
        let st = &snap.storage;
        let mut s = State::default();
        let mut immediate = false;
        for (c, _) in claims {
            if c.fully_bound() {
                let pv = st.volume(&c.volume_name).cloned();
                if let Some(e) = pv.as_ref().and_then(|p| p.error.as_ref()) {
                    return (Status::unresolvable(e.to_string()), None);
                }
                s.bound.push((c, pv));
                continue;
            }
            let class = if c.class.is_empty() { None } else { st.class(&c.class) };
            if let Some(e) = class.and_then(|k| k.error.as_ref()) {
                return (Status::unresolvable(e.to_string()), None);
            }
            match class {
                Some(k) if k.wait_for_first_consumer && c.volume_name.is_empty() => {
                    let capacities = (k.provisions() && c.has_request && st.driver_tracks_capacity(&k.provisioner))
                        .then(|| st.capacities().iter().filter(|x| x.class == k.name).cloned().collect());
                    s.delayed.push(Delayed { selected: st.selected_node(&c).map(String::from), class: k.clone(), capacities, claim: c });
                }
                _ => immediate = true,
            }
        }
        if immediate {
            return (Status::unresolvable(REASON_UNBOUND_IMMEDIATE), None);
        }
        for d in &s.delayed {
            if s.candidates.contains_key(&d.claim.class) {
                continue;
            }
            let list = st.volumes_of_class(&d.claim.class).filter(|v| v.error.is_none()).map(|v| (v.clone(), st.claim_ref(v).cloned())).collect();
            s.candidates.insert(d.claim.class.clone(), list);
        }
        // Local PVs of bound claims narrow the nodes (upstream GetEligibleNodes).
        let mut eligible: Option<HashSet<String>> = None;
        if s.bound.iter().all(|(_, pv)| pv.is_some()) {
            for pv in s.bound.iter().filter_map(|(_, pv)| pv.as_ref()) {
                if pv.local_nodes.is_empty() {
                    continue;
                }
                let names: HashSet<String> = pv.local_nodes.iter().cloned().collect();
                eligible = Some(match eligible {
                    None => names,
                    Some(prev) => prev.intersection(&names).cloned().collect(),
                });
            }
        }
        s.all_bound_at_prefilter = s.delayed.is_empty();
        state.insert(s);
        (Status::success(), eligible)
    }

    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<State>() else { return Status::error("VolumeBinding: no PreFilter state") };
        match s.find(node) {
            Ok(v) => {
                let mut m = s.by_node.lock().unwrap_or_else(|e| e.into_inner());
                m.insert(node.name().to_string(), v);
                Status::success()
            }
            Err(reasons) => Status { code: crate::framework::Code::UnschedulableAndUnresolvable, reasons: reasons.into(), plugin: "" },
        }
    }

    fn pre_score(&self, state: &mut CycleState, _pod: &PodInfo, _nodes: &[usize], _snap: &Snapshot) -> Status {
        // StorageCapacityScoring is on: every pod with claims is scored.
        if state.get::<State>().is_none() { Status::skip() } else { Status::success() }
    }

    fn score_nodes(&self, state: &CycleState, _pod: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
        let Some(s) = state.get::<State>() else { return Ok(()) };
        let m = s.by_node.lock().unwrap_or_else(|e| e.into_inner());
        for ns in scores.iter_mut() {
            let Some(v) = m.get(snap.nodes[ns.node].name()) else {
                ns.score = 0;
                continue;
            };
            // Per storage class: (class, requested, capacity).
            let mut classes: Vec<(String, i64, i64)> = Vec::new();
            fn entry<'a>(classes: &'a mut Vec<(String, i64, i64)>, class: &str) -> &'a mut (String, i64, i64) {
                let i = match classes.iter().position(|c| c.0 == class) {
                    Some(i) => i,
                    None => {
                        classes.push((class.to_string(), 0, 0));
                        classes.len() - 1
                    }
                };
                &mut classes[i]
            }
            if !v.bindings.is_empty() {
                for (c, pv) in &v.bindings {
                    let e = entry(&mut classes, &pv.class);
                    e.1 += c.request;
                    e.2 += pv.capacity;
                }
            } else {
                for (c, cap) in &v.provisions {
                    let Some(cap) = cap else { continue };
                    let e = entry(&mut classes, &c.class);
                    e.2 = cap.capacity.unwrap_or(0);
                    e.1 += c.request;
                }
            }
            ns.score = self.class_score(&classes);
        }
        Ok(())
    }

    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let decisions = match state.get::<State>() {
            None => None,
            Some(s) if s.all_bound_at_prefilter => None,
            Some(s) => {
                let m = s.by_node.lock().unwrap_or_else(|e| e.into_inner());
                m.get(node).map(|v| VolumeDecisions {
                    pod_uid: pod.uid.clone(),
                    node: node.to_string(),
                    bindings: v
                        .bindings
                        .iter()
                        .map(|(c, pv)| StaticBinding { pv: pv.name.clone(), claim: ClaimRef { namespace: c.namespace.clone(), name: c.name.clone(), uid: c.uid.clone() } })
                        .collect(),
                    provisions: v.provisions.iter().map(|(c, _)| (c.namespace.clone(), c.name.clone())).collect(),
                })
            }
        };
        state.insert(Reserved { decisions });
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, _pod: &PodInfo, _node: &str) {
        state.insert(Reserved::default());
    }

    fn pre_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(s) = state.get::<State>() else { return Status::success() };
        if s.all_bound_at_prefilter {
            return Status::success();
        }
        let Some(d) = reserved(state).filter(|d| d.node == node) else {
            return Status::error(format!("no pod volumes found for node {node:?}"));
        };
        let work = PreBindWork {
            pod: pod.key(),
            node: node.to_string(),
            bind_pvs: d.bindings.clone(),
            provision_claims: d.provisions.clone(),
            wait_for: d.bindings.iter().map(|b| (b.claim.namespace.clone(), b.claim.name.clone())).chain(d.provisions.iter().cloned()).collect(),
            timeout: self.bind_timeout,
        };
        state.insert(work);
        Status::success()
    }
}


/// Builders for the storage plugins' tests.
#[cfg(test)]
pub(crate) mod tests_support {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::api::storage::v1 as storage;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use crate::cache::storage::{ANN_BIND_COMPLETED, ANN_SELECTED_NODE};
    use crate::cache::Snapshot;
    use berth_model::PodInfo;

    /// A claim under construction.
    #[derive(Clone)]
    pub struct ClaimB(pub core::PersistentVolumeClaim);

    /// A claim in "default" asking for `size` of `class` (None: no class), ReadWriteOnce.
    pub fn claim(name: &str, size: &str, class: Option<&str>) -> ClaimB {
        let mut c = core::PersistentVolumeClaim::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("default".into());
        c.spec = Some(core::PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(core::VolumeResourceRequirements { requests: Some([("storage".to_string(), Quantity(size.into()))].into()), limits: None }),
            storage_class_name: class.map(String::from),
            ..Default::default()
        });
        ClaimB(c)
    }

    impl ClaimB {
        fn spec(&mut self) -> &mut core::PersistentVolumeClaimSpec {
            self.0.spec.get_or_insert_with(Default::default)
        }
        /// Fully bound to a PV.
        pub fn volume(mut self, pv: &str) -> Self {
            self.spec().volume_name = Some(pv.into());
            self.0.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(ANN_BIND_COMPLETED.into(), "yes".into());
            self
        }
        /// Access modes.
        pub fn modes(mut self, m: &[&str]) -> Self {
            self.spec().access_modes = Some(m.iter().map(|s| s.to_string()).collect());
            self
        }
        /// The selected-node annotation.
        pub fn selected(mut self, node: &str) -> Self {
            self.0.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(ANN_SELECTED_NODE.into(), node.into());
            self
        }
    }

    /// A PV under construction.
    #[derive(Clone)]
    pub struct PvB(pub core::PersistentVolume);

    /// An Available ReadWriteOnce PV of `size` and `class`.
    pub fn pv(name: &str, size: &str, class: Option<&str>) -> PvB {
        let mut v = core::PersistentVolume::default();
        v.metadata.name = Some(name.into());
        v.spec = Some(core::PersistentVolumeSpec {
            capacity: Some([("storage".to_string(), Quantity(size.into()))].into()),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: class.map(String::from),
            ..Default::default()
        });
        v.status = Some(core::PersistentVolumeStatus { phase: Some("Available".into()), ..Default::default() });
        PvB(v)
    }

    impl PvB {
        fn spec(&mut self) -> &mut core::PersistentVolumeSpec {
            self.0.spec.get_or_insert_with(Default::default)
        }
        /// Adds a label.
        pub fn label(mut self, k: &str, v: &str) -> Self {
            self.0.metadata.labels.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
            self
        }
        /// Bound to a claim of "default".
        pub fn bound(mut self, claim: &str) -> Self {
            self.spec().claim_ref = Some(core::ObjectReference { name: Some(claim.into()), namespace: Some("default".into()), ..Default::default() });
            self.0.status = Some(core::PersistentVolumeStatus { phase: Some("Bound".into()), ..Default::default() });
            self
        }
        /// A CSI source.
        pub fn csi(mut self, driver: &str, handle: &str) -> Self {
            self.spec().csi = Some(core::CSIPersistentVolumeSource { driver: driver.into(), volume_handle: handle.into(), ..Default::default() });
            self
        }
        /// Node affinity: `key` In [`value`].
        pub fn affinity(mut self, key: &str, value: &str) -> Self {
            self.spec().node_affinity = Some(core::VolumeNodeAffinity {
                required: Some(core::NodeSelector {
                    node_selector_terms: vec![core::NodeSelectorTerm {
                        match_expressions: Some(vec![core::NodeSelectorRequirement { key: key.into(), operator: "In".into(), values: Some(vec![value.into()]) }]),
                        match_fields: None,
                    }],
                }),
            });
            self
        }
    }

    /// A CSINode with per-driver limits.
    pub fn csi_node(name: &str, limits: &[(&str, i32)]) -> storage::CSINode {
        let mut n = storage::CSINode::default();
        n.metadata.name = Some(name.into());
        n.spec.drivers = limits
            .iter()
            .map(|(d, c)| storage::CSINodeDriver { name: d.to_string(), node_id: name.into(), allocatable: Some(storage::VolumeNodeResources { count: Some(*c) }), topology_keys: None })
            .collect();
        n
    }

    /// A StorageClass.
    pub fn class(name: &str, wffc: bool, provisioner: &str) -> storage::StorageClass {
        let mut c = storage::StorageClass { provisioner: provisioner.into(), ..Default::default() };
        c.metadata.name = Some(name.into());
        c.volume_binding_mode = Some(if wffc { "WaitForFirstConsumer" } else { "Immediate" }.into());
        c
    }

    /// A snapshot with labelled nodes, claims, PVs and classes (name, WaitForFirstConsumer, provisioner).
    pub fn snapshot_with(nodes: &[(&str, Vec<(&str, &str)>)], claims: &[ClaimB], pvs: &[PvB], classes: &[(&str, bool, &str)]) -> Snapshot {
        let mut s = Snapshot::new();
        for (n, labels) in nodes {
            let mut b = crate::testing::node(n);
            for (k, v) in labels {
                b = b.label(k, v);
            }
            s.upsert_node(b.spec());
        }
        for c in claims {
            s.storage.upsert_claim(&c.0);
        }
        for v in pvs {
            s.storage.upsert_volume(&v.0);
        }
        for (n, w, p) in classes {
            s.storage.upsert_class(&class(n, *w, p));
        }
        s
    }

    /// A pending pod in "default" mounting these claims.
    pub fn pod_with_claims(name: &str, claims: &[&str]) -> Arc<PodInfo> {
        let mut b = crate::testing::pod(name);
        if let Some(s) = b.pod.spec.as_mut() {
            s.volumes = Some(
                claims
                    .iter()
                    .enumerate()
                    .map(|(i, c)| core::Volume {
                        name: format!("v{i}"),
                        persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource { claim_name: c.to_string(), read_only: None }),
                        ..Default::default()
                    })
                    .collect(),
            );
        }
        b.info()
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::*;
    use super::*;
    use crate::framework::Code;

    fn plugin() -> VolumeBinding {
        VolumeBinding::new(Args::default()).expect("default args")
    }

    /// PreFilter then Filter on every node: (prefilter status, feasible node names, per-node statuses).
    fn run(snap: &Snapshot, p: &PodInfo) -> (Status, CycleState, Vec<(String, Status)>) {
        let pl = plugin();
        let mut st = CycleState::new();
        let (s, narrowed) = pl.pre_filter(&mut st, p, snap);
        if !s.is_success() {
            return (s, st, vec![]);
        }
        let out = snap
            .nodes
            .iter()
            .map(|n| {
                let f = if narrowed.as_ref().is_some_and(|set| !set.contains(n.name())) { Status::unresolvable("narrowed") } else { pl.filter(&st, p, n) };
                (n.name().to_string(), f)
            })
            .collect();
        (s, st, out)
    }

    fn feasible(rows: &[(String, Status)]) -> Vec<&str> {
        rows.iter().filter(|(_, s)| s.is_success()).map(|(n, _)| n.as_str()).collect()
    }

    fn nodes(names: &[&str]) -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
        names.iter().map(|n| (Box::leak(n.to_string().into_boxed_str()) as &str, vec![])).collect()
    }

    #[test]
    fn prefilter_table() {
        let snap = snapshot_with(
            &nodes(&["n1"]),
            &[
                claim("imm", "1Gi", Some("now")),
                claim("lost", "1Gi", Some("now")),
                claim("bad", "one gig", Some("wait")),
                claim("wffc", "1Gi", Some("wait")),
                claim("bound", "1Gi", Some("wait")).volume("pv-b"),
            ],
            &[pv("pv-b", "1Gi", Some("wait")).bound("bound")],
            &[("now", false, "p"), ("wait", true, "p")],
        );
        let mut lost = claim("lost2", "1Gi", Some("now")).0;
        lost.status = Some(core_status("Lost"));
        let mut snap = snap;
        snap.storage.upsert_claim(&lost);
        let mut deleting = claim("del", "1Gi", Some("wait")).0;
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()));
        snap.storage.upsert_claim(&deleting);
        let rows: &[(&[&str], Code, &str)] = &[
            (&["missing"], Code::UnschedulableAndUnresolvable, "persistentvolumeclaim \"missing\" not found"),
            (&["imm"], Code::UnschedulableAndUnresolvable, REASON_UNBOUND_IMMEDIATE),
            (&["lost2"], Code::UnschedulableAndUnresolvable, "persistentvolumeclaim \"lost2\" bound to non-existent persistentvolume \"\""),
            (&["del"], Code::UnschedulableAndUnresolvable, "persistentvolumeclaim \"del\" is being deleted"),
            (&["bad"], Code::UnschedulableAndUnresolvable, "spec.resources.requests.storage"),
            (&["wffc", "bound"], Code::Success, ""),
        ];
        for (claims, code, msg) in rows {
            let (s, _, _) = run(&snap, &pod_with_claims("p", claims));
            assert_eq!(s.code, *code, "{claims:?}: {s}");
            assert!(s.message().contains(msg), "{claims:?}: {s}");
        }
        assert!(plugin().pre_filter(&mut CycleState::new(), &crate::testing::pod("plain").info(), &snap).0.is_skip());
    }

    fn core_status(phase: &str) -> k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
        k8s_openapi::api::core::v1::PersistentVolumeClaimStatus { phase: Some(phase.into()), ..Default::default() }
    }

    #[test]
    fn filter_table() {
        let snap = snapshot_with(
            &[("n1", vec![("zone", "a")]), ("n2", vec![("zone", "b")])],
            &[
                claim("bound-n1", "1Gi", Some("wait")).volume("pv-n1"),
                claim("bound-gone", "1Gi", Some("wait")).volume("pv-gone"),
                claim("small", "2Gi", Some("wait")),
                claim("big", "50Gi", Some("wait")),
                claim("dyn", "1Gi", Some("dyn")),
                claim("dyn-zone", "1Gi", Some("dyn-zone")),
                claim("picked", "1Gi", Some("dyn")).selected("n2"),
                claim("rwx", "1Gi", Some("wait")).modes(&["ReadWriteMany"]),
            ],
            &[
                pv("pv-n1", "1Gi", Some("wait")).affinity("kubernetes.io/hostname", "n1").bound("bound-n1"),
                pv("pv-a-5", "5Gi", Some("wait")).affinity("zone", "a"),
                pv("pv-a-3", "3Gi", Some("wait")).affinity("zone", "a"),
                pv("pv-b-1", "1Gi", Some("wait")).affinity("zone", "b"),
            ],
            &[("wait", true, crate::cache::storage::NO_PROVISIONER), ("dyn", true, "csi.example.com")],
        );
        let mut snap = snap;
        let mut zoned = class("dyn-zone", true, "csi.example.com");
        zoned.allowed_topologies = Some(vec![k8s_openapi::api::core::v1::TopologySelectorTerm {
            match_label_expressions: Some(vec![k8s_openapi::api::core::v1::TopologySelectorLabelRequirement { key: "zone".into(), values: vec!["b".into()] }]),
        }]);
        snap.storage.upsert_class(&zoned);
        // (claims, feasible nodes, reason on the others)
        let rows: &[(&[&str], &[&str], &str)] = &[
            (&["bound-n1"], &["n1"], "narrowed"),
            (&["bound-gone"], &[], REASON_PV_NOT_EXIST),
            (&["small"], &["n1"], REASON_BIND_CONFLICT),
            (&["big"], &[], REASON_BIND_CONFLICT),
            (&["dyn"], &["n1", "n2"], ""),
            (&["dyn-zone"], &["n2"], REASON_BIND_CONFLICT),
            (&["picked"], &["n2"], REASON_BIND_CONFLICT),
            (&["rwx"], &[], REASON_BIND_CONFLICT),
            (&["small", "dyn"], &["n1"], REASON_BIND_CONFLICT),
        ];
        for (claims, want, reason) in rows {
            let (s, _, res) = run(&snap, &pod_with_claims("p", claims));
            assert!(s.is_success(), "{claims:?}: {s}");
            assert_eq!(feasible(&res), want.to_vec(), "{claims:?}");
            for (n, st) in res.iter().filter(|(_, s)| !s.is_success()) {
                assert_eq!(st.message(), *reason, "{claims:?} on {n}");
            }
        }
        // The smallest PV that fits is chosen, and Reserve records it.
        let p = pod_with_claims("p", &["small"]);
        let (_, mut st, _) = run(&snap, &p);
        let pl = plugin();
        assert!(pl.reserve(&mut st, &p, "n1").is_success());
        let d = reserved(&st).cloned().expect("decisions");
        assert_eq!(d.bindings.iter().map(|b| b.pv.as_str()).collect::<Vec<_>>(), vec!["pv-a-3"]);
        assert!(pl.pre_bind(&mut st, &p, "n1").is_success());
        let w = pre_bind_work(&st).expect("work");
        assert_eq!((w.bind_pvs.len(), w.wait_for.clone(), w.timeout), (1, vec![("default".to_string(), "small".to_string())], Duration::from_secs(600)));
        // Assumed, the PV is taken: the next pod's claim of the same size gets the 5Gi one.
        snap.storage.assume(&d);
        let mut other = claim("small2", "2Gi", Some("wait")).0;
        other.metadata.uid = Some("u2".into());
        snap.storage.upsert_claim(&other);
        let p2 = pod_with_claims("p2", &["small2"]);
        let (_, mut st2, res) = run(&snap, &p2);
        assert_eq!(feasible(&res), vec!["n1"]);
        pl.reserve(&mut st2, &p2, "n1");
        assert_eq!(reserved(&st2).map(|d| d.bindings[0].pv.clone()), Some("pv-a-5".to_string()));
        // Forgetting the first pod frees its PV again.
        snap.storage.forget(&p.uid);
        let (_, mut st3, _) = run(&snap, &p2);
        pl.reserve(&mut st3, &p2, "n1");
        assert_eq!(reserved(&st3).map(|d| d.bindings[0].pv.clone()), Some("pv-a-3".to_string()));
        // Dynamic provisioning is recorded as a selected node.
        let p4 = pod_with_claims("p4", &["dyn"]);
        let (_, mut st4, _) = run(&snap, &p4);
        pl.reserve(&mut st4, &p4, "n2");
        assert_eq!(reserved(&st4).map(|d| d.provisions.clone()), Some(vec![("default".to_string(), "dyn".to_string())]));
        pl.unreserve(&mut st4, &p4, "n2");
        assert!(reserved(&st4).is_none());
    }

    #[test]
    fn capacity_and_score() {
        let mut snap = snapshot_with(
            &[("n1", vec![("k", "1")]), ("n2", vec![("k", "2")])],
            &[claim("c", "10Gi", Some("csi"))],
            &[],
            &[("csi", true, "drv")],
        );
        let mut drv = k8s_openapi::api::storage::v1::CSIDriver::default();
        drv.metadata.name = Some("drv".into());
        drv.spec.storage_capacity = Some(true);
        snap.storage.upsert_csi_driver(&drv);
        let cap = |name: &str, k: &str, capacity: &str, max: Option<&str>| {
            let mut c = k8s_openapi::api::storage::v1::CSIStorageCapacity { storage_class_name: "csi".into(), ..Default::default() };
            c.metadata.name = Some(name.into());
            c.metadata.namespace = Some("kube-system".into());
            c.capacity = Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(capacity.into()));
            c.maximum_volume_size = max.map(|m| k8s_openapi::apimachinery::pkg::api::resource::Quantity(m.into()));
            c.node_topology = Some(crate::testing::selector(&[("k", k)]));
            c
        };
        assert!(snap.storage.upsert_capacity(&cap("c1", "1", "40Gi", None)).is_ok());
        assert!(snap.storage.upsert_capacity(&cap("c2", "2", "100Gi", Some("5Gi"))).is_ok());
        let p = pod_with_claims("p", &["c"]);
        let (_, mut st, res) = run(&snap, &p);
        assert_eq!(feasible(&res), vec!["n1"]);
        assert_eq!(res[1].1.message(), REASON_NOT_ENOUGH_SPACE);
        let pl = plugin();
        assert!(pl.pre_score(&mut st, &p, &[0], &snap).is_success());
        let mut scores = vec![NodeScore { node: 0, score: 0 }];
        assert!(pl.score_nodes(&st, &p, &snap, &mut scores).is_ok());
        // 10Gi of 40Gi: utilization 25 on the default shape (0,100)..(100,0).
        assert_eq!(scores[0].score, 75);
        // A bad quantity is refused with the field named.
        let e = snap.storage.upsert_capacity(&cap("c3", "1", "lots", None)).expect_err("malformed");
        assert!(e.to_string().contains("capacity"), "{e}");
    }

    #[test]
    fn args_are_validated() {
        let bad = [
            (Args { bind_timeout_seconds: Some(-1), ..Default::default() }, "bindTimeoutSeconds"),
            (Args { shape: Some(vec![ShapePoint { utilization: 50, score: 1 }, ShapePoint { utilization: 10, score: 2 }]), ..Default::default() }, "shape[1].utilization"),
            (Args { shape: Some(vec![ShapePoint { utilization: 0, score: 11 }]), ..Default::default() }, "shape[0].score"),
        ];
        for (a, field) in bad {
            let e = VolumeBinding::new(a).expect_err("invalid");
            assert!(e.contains(field), "{e}");
        }
        let pl = plugin();
        assert_eq!(pl.class_score(&[("a".into(), 50, 200), ("b".into(), 100, 100)]), 38);
        assert_eq!(pl.class_score(&[("a".into(), 300, 200)]), 0);
    }
}
