//! VolumeZone: the zone and region labels of the PVs bound to a pod's claims
//! must match the node's (upstream `volumezone`). Beta
//! (`failure-domain.beta.kubernetes.io/*`) and GA (`topology.kubernetes.io/*`)
//! keys are read from the PV; a beta key on the PV also matches the GA key on
//! the node, not the other way round. A label may list several zones joined
//! by "__". A node without any zone or region label accepts every volume.
//! Unbound WaitForFirstConsumer claims are skipped (VolumeBinding decides).

use std::sync::Arc;

use crate::cache::storage::{REGION, REGION_BETA, ZONE, ZONE_BETA};
use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, Plugin, PreFilterNodes, PreFilterPlugin, Status};
use berth_model::volumes::VolumeSource;
use berth_model::{NodeInfo, PodInfo};

/// Plugin name.
pub const NAME: &str = "VolumeZone";
/// Reason given for a node in another zone.
pub const REASON: &str = "node(s) had no available volume zone";

/// Label keys read, in upstream's order.
const KEYS: [&str; 4] = [ZONE_BETA, REGION_BETA, ZONE, REGION];

fn to_ga(key: &str) -> &str {
    match key {
        ZONE_BETA => ZONE,
        REGION_BETA => REGION,
        k => k,
    }
}

/// One topology constraint of a PV: the label key and its allowed values.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Topology {
    key: &'static str,
    values: Arc<[String]>,
}

#[derive(Clone, Debug, Default)]
struct State {
    topologies: Vec<Topology>,
}

/// The VolumeZone plugin.
#[derive(Debug, Default)]
pub struct VolumeZone;

/// Upstream `LabelZonesToSet`: "a__b" → {a, b}; a value with an empty part is ignored.
fn zones(value: &str) -> Option<Arc<[String]>> {
    let parts: Vec<String> = value.split("__").map(|z| z.trim().to_string()).collect();
    if parts.iter().any(String::is_empty) { None } else { Some(Arc::from(parts)) }
}

fn topologies(pod: &PodInfo, snap: &Snapshot) -> Result<Vec<Topology>, Status> {
    let st = &snap.storage;
    let mut out = Vec::new();
    for v in pod.volumes.iter() {
        let VolumeSource::Claim { claim } = &v.source else { continue };
        if claim.is_empty() {
            return Err(Status::unresolvable("PersistentVolumeClaim had no name"));
        }
        let Some(c) = st.claim(&pod.namespace, claim) else {
            return Err(Status::unresolvable(format!("persistentvolumeclaim {claim:?} not found")));
        };
        if let Some(e) = &c.error {
            return Err(Status::unresolvable(e.to_string()));
        }
        if c.volume_name.is_empty() {
            if c.class.is_empty() {
                return Err(Status::unresolvable("PersistentVolumeClaim had no pv name and storageClass name"));
            }
            let Some(k) = st.class(&c.class) else {
                return Err(Status::unresolvable(format!("storageclass.storage.k8s.io {:?} not found", c.class)));
            };
            if let Some(e) = &k.error {
                return Err(Status::unresolvable(e.to_string()));
            }
            if k.wait_for_first_consumer {
                continue;
            }
            return Err(Status::unresolvable("PersistentVolume had no name"));
        }
        let Some(pv) = st.volume(&c.volume_name) else {
            return Err(Status::unresolvable(format!("persistentvolume {:?} not found", c.volume_name)));
        };
        if let Some(e) = &pv.error {
            return Err(Status::unresolvable(e.to_string()));
        }
        for key in KEYS {
            if let Some(values) = pv.labels.get(key).and_then(|v| zones(v)) {
                out.push(Topology { key, values });
            }
        }
    }
    Ok(out)
}

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> Events {
        Events::STORAGE_CLASS.or(Events::NODE_ADD).or(Events::NODE_LABEL).or(Events::NODE_TAINT).or(Events::PVC).or(Events::PV)
    }
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        if !pod.volumes.iter().any(|v| matches!(v.source, VolumeSource::Claim { .. })) {
            return (Status::skip(), None);
        }
        match topologies(pod, snap) {
            Err(s) => (s, None),
            Ok(t) if t.is_empty() => (Status::skip(), None),
            Ok(topologies) => {
                state.insert(State { topologies });
                (Status::success(), None)
            }
        }
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<State>() else { return Status::success() };
        let labels = &node.node.labels;
        if !KEYS.iter().any(|k| labels.contains_key(*k)) {
            return Status::success();
        }
        for t in &s.topologies {
            let v = labels.get(t.key).or_else(|| labels.get(to_ga(t.key)));
            if !v.is_some_and(|v| t.values.iter().any(|x| x == v)) {
                return Status::unresolvable(REASON);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::volume_binding::tests_support::{claim, pod_with_claims, pv, snapshot_with};

    #[test]
    fn zones_of_pvs_against_nodes() {
        let pvs = vec![
            pv("pv-ga", "1Gi", Some("sc")).label(ZONE, "zone-a").bound("claim-ga"),
            pv("pv-beta", "1Gi", Some("sc")).label(ZONE_BETA, "zone-a__zone-b").bound("claim-beta"),
            pv("pv-both", "1Gi", Some("sc")).label(ZONE, "zone-a").label(REGION, "r1").bound("claim-both"),
        ];
        let claims = vec![
            claim("claim-ga", "1Gi", Some("sc")).volume("pv-ga"),
            claim("claim-beta", "1Gi", Some("sc")).volume("pv-beta"),
            claim("claim-both", "1Gi", Some("sc")).volume("pv-both"),
        ];
        let nodes: Vec<(&str, Vec<(&str, &str)>)> = vec![
            ("ga-a", vec![(ZONE, "zone-a")]),
            ("ga-b", vec![(ZONE, "zone-b")]),
            ("beta-a", vec![(ZONE_BETA, "zone-a")]),
            ("none", vec![]),
            ("zone-only", vec![(ZONE, "zone-a")]),
            ("zone-region", vec![(ZONE, "zone-a"), (REGION, "r1")]),
        ];
        let snap = snapshot_with(&nodes, &claims, &pvs, &[]);
        // (claim, nodes that pass)
        let rows: &[(&str, &[&str])] = &[
            ("claim-ga", &["ga-a", "none", "zone-only", "zone-region"]),
            ("claim-beta", &["ga-a", "ga-b", "beta-a", "none", "zone-only", "zone-region"]),
            ("claim-both", &["none", "zone-region"]),
        ];
        for (c, want) in rows {
            let p = pod_with_claims("p", &[c]);
            let mut st = CycleState::new();
            let (s, _) = VolumeZone.pre_filter(&mut st, &p, &snap);
            assert!(s.is_success(), "{c}: {s}");
            let got: Vec<&str> = snap.nodes.iter().filter(|n| VolumeZone.filter(&st, &p, n).is_success()).map(|n| n.name()).collect();
            let mut want = want.to_vec();
            want.sort();
            let mut got = got;
            got.sort();
            assert_eq!(got, want, "{c}");
        }
    }

    #[test]
    fn prefilter_errors_and_skips() {
        let snap = snapshot_with(
            &[("n", vec![(ZONE, "a")])],
            &[claim("wffc", "1Gi", Some("wait")), claim("imm", "1Gi", Some("now")), claim("noclass", "1Gi", None), claim("ghost", "1Gi", Some("wait")).volume("nope")],
            &[],
            &[("wait", true, "x"), ("now", false, "x")],
        );
        let rows: &[(&str, Option<&str>)] = &[
            ("wffc", None),
            ("imm", Some("PersistentVolume had no name")),
            ("noclass", Some("PersistentVolumeClaim had no pv name and storageClass name")),
            ("ghost", Some("persistentvolume \"nope\" not found")),
            ("missing", Some("persistentvolumeclaim \"missing\" not found")),
        ];
        for (c, want) in rows {
            let (s, _) = VolumeZone.pre_filter(&mut CycleState::new(), &pod_with_claims("p", &[c]), &snap);
            match want {
                None => assert!(s.is_skip(), "{c}: {s}"),
                Some(m) => assert_eq!((s.code, s.message()), (crate::framework::Code::UnschedulableAndUnresolvable, m.to_string()), "{c}"),
            }
        }
        assert!(VolumeZone.pre_filter(&mut CycleState::new(), &crate::testing::pod("plain").info(), &snap).0.is_skip());
    }
}
