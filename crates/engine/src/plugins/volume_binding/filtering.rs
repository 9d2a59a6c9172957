//! VolumeBinding's PreFilter and Filter (upstream `volumebinding`'s
//! PreFilter/Filter with its binder's `GetPodVolumeClaims` and
//! `FindPodVolumes`).
//!
//! - PreFilter sorts the pod's claims: bound ones (their PV's node affinity is
//!   checked per node, and local PVs narrow the nodes), unbound
//!   WaitForFirstConsumer ones (decided per node), and unbound Immediate ones,
//!   which make the pod unschedulable until the PV controller binds them.
//! - Filter finds, per node, the smallest matching static PV for each delayed
//!   claim (upstream `FindMatchingVolume`), or checks that the class can
//!   provision there (provisioner, allowedTopologies, CSIStorageCapacity),
//!   and keeps its findings for Score and Reserve.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use super::common::{Delayed, NodeVolumes, State};
use super::{REASON_BIND_CONFLICT, REASON_NODE_CONFLICT, REASON_NOT_ENOUGH_SPACE, REASON_PV_NOT_EXIST, REASON_UNBOUND_IMMEDIATE};
use crate::cache::storage::{Claim, Volume};
use crate::cache::Snapshot;
use crate::framework::{Code, CycleState, PreFilterNodes, Status};
use berth_model::{NodeInfo, PodInfo};

pub(super) fn pre_filter(state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
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

pub(super) fn filter(state: &CycleState, node: &NodeInfo) -> Status {
    let Some(s) = state.get::<State>() else { return Status::error("VolumeBinding: no PreFilter state") };
    match s.find(node) {
        Ok(v) => {
            let mut m = s.by_node.lock().unwrap_or_else(|e| e.into_inner());
            m.insert(node.name().to_string(), v);
            Status::success()
        }
        Err(reasons) => Status { code: Code::UnschedulableAndUnresolvable, reasons: reasons.into(), plugin: "" },
    }
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

#[cfg(test)]
mod tests {
    use super::super::tests_support::*;
    use super::super::{REASON_BIND_CONFLICT, REASON_PV_NOT_EXIST, REASON_UNBOUND_IMMEDIATE};
    use crate::framework::{Code, CycleState, PreFilterPlugin};

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
    }
}
