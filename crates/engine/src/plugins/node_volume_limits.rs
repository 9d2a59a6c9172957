//! NodeVolumeLimits (upstream `nodevolumelimits`, CSI limits): the CSI
//! volumes attached to a node, counted per driver, may not exceed the
//! driver's `allocatable.count` in the node's CSINode.
//!
//! A volume is identified by driver and volume handle, so one volume used by
//! several pods counts once. A claim's driver comes from its PV (spec.csi, or
//! an in-tree source migrated to CSI on the node); an unbound claim counts
//! through its StorageClass's provisioner. Claims of pods already on the node
//! that cannot be found are not counted; the new pod's must exist.

use std::collections::HashMap;

use crate::cache::storage::{Claim, CsiNode, Storage};
use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, Plugin, PreFilterNodes, PreFilterPlugin, Status};
use berth_model::volumes::VolumeSource;
use berth_model::{NodeInfo, PodInfo};

/// Plugin name.
pub const NAME: &str = "NodeVolumeLimits";
/// Reason given for a node whose limit would be exceeded.
pub const REASON: &str = "node(s) exceed max volume count";

/// Handle prefix for claims not bound yet (upstream uses a random one).
const PENDING_PREFIX: &str = "pending-claim";

/// In-tree plugins with CSI drivers they migrate to.
const MIGRATABLE: [(&str, &str); 4] = [
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
];

/// The storage view PreFilter keeps for Filter (a cheap clone of the cache's).
#[derive(Clone, Debug)]
struct State {
    storage: Storage,
}

/// The NodeVolumeLimits plugin.
#[derive(Debug, Default)]
pub struct NodeVolumeLimits;

fn migrated(csi_node: Option<&CsiNode>, plugin: &str) -> bool {
    csi_node.is_some_and(|n| n.migrated(plugin))
}

/// (driver, handle) of a claim, or None when it does not count.
fn claim_driver(st: &Storage, csi_node: Option<&CsiNode>, c: &Claim) -> Option<(String, String)> {
    let pv = (!c.volume_name.is_empty()).then(|| st.volume(&c.volume_name)).flatten();
    let Some(pv) = pv else {
        // Unbound (or its PV is gone): count through the class's provisioner.
        if c.class.is_empty() {
            return None;
        }
        let class = st.class(&c.class)?;
        let handle = format!("{PENDING_PREFIX}-{}/{}", c.namespace, c.name);
        if let Some((plugin, driver)) = MIGRATABLE.iter().find(|(p, _)| *p == class.provisioner) {
            return migrated(csi_node, plugin).then(|| (driver.to_string(), handle));
        }
        return Some((class.provisioner.clone(), handle));
    };
    if let Some((d, h)) = &pv.csi {
        return Some((d.clone(), h.clone()));
    }
    let t = pv.in_tree.as_ref()?;
    migrated(csi_node, t.plugin).then(|| (t.driver.to_string(), t.handle.clone()))
}

/// Adds the pod's attachable volumes (unique name → driver) to `out`. With
/// `new_pod`, a missing claim is an error; otherwise it is skipped.
fn attachable(st: &Storage, csi_node: Option<&CsiNode>, pod: &PodInfo, new_pod: bool, out: &mut HashMap<String, String>) -> Result<(), Status> {
    for v in pod.volumes.iter() {
        let (claim, ephemeral) = match &v.source {
            VolumeSource::Claim { claim } => (claim, false),
            VolumeSource::Ephemeral { claim } => (claim, true),
            VolumeSource::GcePd { pd_name, .. } => {
                if migrated(csi_node, "kubernetes.io/gce-pd") {
                    out.insert(format!("pd.csi.storage.gke.io/projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{pd_name}"), "pd.csi.storage.gke.io".into());
                }
                continue;
            }
            VolumeSource::AwsEbs { volume_id } => {
                if migrated(csi_node, "kubernetes.io/aws-ebs") {
                    let id = if volume_id.starts_with("aws://") { volume_id.rsplit('/').next().unwrap_or(volume_id) } else { volume_id.as_str() };
                    out.insert(format!("ebs.csi.aws.com/{id}"), "ebs.csi.aws.com".into());
                }
                continue;
            }
            _ => continue,
        };
        if claim.is_empty() {
            return Err(Status::error("PersistentVolumeClaim had no name"));
        }
        let Some(c) = st.claim(&pod.namespace, claim) else {
            if new_pod {
                return Err(Status::unresolvable(format!("looking up PVC {}/{claim}: persistentvolumeclaims {claim:?} not found", pod.namespace)));
            }
            continue;
        };
        if ephemeral && c.controller_uid.as_deref() != Some(pod.uid.as_str()) {
            return Err(Status::error(format!("PVC {}/{} was not created for pod {}/{} (pod is not owner)", c.namespace, c.name, pod.namespace, pod.name)));
        }
        if let Some((driver, handle)) = claim_driver(st, csi_node, c) {
            if driver.is_empty() || handle.is_empty() {
                continue;
            }
            out.insert(format!("{driver}/{handle}"), driver);
        }
    }
    Ok(())
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> Events {
        Events::CSI_NODE.or(Events::POD_DELETE).or(Events::PVC)
    }
}

impl PreFilterPlugin for NodeVolumeLimits {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        let counts = pod.volumes.iter().any(|v| matches!(v.source, VolumeSource::Claim { .. } | VolumeSource::Ephemeral { .. } | VolumeSource::GcePd { .. } | VolumeSource::AwsEbs { .. }));
        if !counts {
            return (Status::skip(), None);
        }
        state.insert(State { storage: snap.storage.clone() });
        (Status::success(), None)
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(State { storage: st }) = state.get::<State>() else { return Status::success() };
        let csi_node = st.csi_node(node.name()).map(|n| &**n);
        let mut new_volumes = HashMap::new();
        if let Err(s) = attachable(st, csi_node, pod, true, &mut new_volumes) {
            return s;
        }
        if new_volumes.is_empty() {
            return Status::success();
        }
        let Some(csi_node) = csi_node else { return Status::success() };
        if let Some(e) = &csi_node.error {
            return Status::unresolvable(e.to_string());
        }
        if csi_node.limits.is_empty() {
            return Status::success();
        }
        let mut attached = HashMap::new();
        for p in &node.pods {
            if let Err(s) = attachable(st, Some(csi_node), p, false, &mut attached) {
                return s;
            }
        }
        let mut attached_count: HashMap<&str, i64> = HashMap::new();
        for (unique, driver) in &attached {
            new_volumes.remove(unique);
            *attached_count.entry(driver).or_default() += 1;
        }
        let mut new_count: HashMap<&str, i64> = HashMap::new();
        for driver in new_volumes.values() {
            *new_count.entry(driver).or_default() += 1;
        }
        for (driver, n) in new_count {
            if let Some(limit) = csi_node.limit(driver)
                && attached_count.get(driver).copied().unwrap_or(0) + n > limit {
                    return Status::unschedulable(REASON);
                }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::volume_binding::tests_support::{claim, csi_node, pod_with_claims, pv, snapshot_with};
    use std::sync::Arc;

    fn on(node: &str, p: Arc<PodInfo>) -> Arc<PodInfo> {
        let mut p = (*p).clone();
        p.node_name = Some(node.into());
        Arc::new(p)
    }

    #[test]
    fn counts_per_driver_and_dedupes() {
        let mut claims = Vec::new();
        let mut pvs = Vec::new();
        for (i, d) in ["ebs", "ebs", "ebs", "pd", "pd"].iter().enumerate() {
            let n = format!("c{i}");
            claims.push(claim(&n, "1Gi", Some("")).volume(&format!("v{i}")));
            pvs.push(pv(&format!("v{i}"), "1Gi", Some("")).csi(d, &format!("h{i}")).bound(&n));
        }
        claims.push(claim("pending", "1Gi", Some("ebs-sc")));
        let mut snap = snapshot_with(&[("n1", vec![])], &claims, &pvs, &[("ebs-sc", false, "ebs")]);
        snap.storage.upsert_csi_node(&csi_node("n1", &[("ebs", 3), ("pd", 2)]));
        snap.add_pod(on("n1", pod_with_claims("old", &["c0", "c1"])));
        // (new pod's claims, fits)
        let rows: &[(&[&str], bool)] = &[
            (&["c2"], true),                 // 2 attached + 1 <= 3
            (&["c0"], true),                 // already attached: counted once
            (&["c2", "pending"], false),     // the pending claim counts through its class
            (&["c3", "c4"], true),           // another driver's limit
            (&["c0", "c1", "c2"], true),
        ];
        for (claims, fits) in rows {
            let p = pod_with_claims("p", claims);
            let mut st = CycleState::new();
            assert!(NodeVolumeLimits.pre_filter(&mut st, &p, &snap).0.is_success());
            let s = NodeVolumeLimits.filter(&st, &p, &snap.nodes[0]);
            assert_eq!(s.is_success(), *fits, "{claims:?}: {s}");
            if !fits {
                assert_eq!((s.code, s.message()), (Code::Unschedulable, REASON.to_string()));
            }
        }
        // A missing claim of the new pod, and a pod without volumes.
        let mut st = CycleState::new();
        let p = pod_with_claims("p", &["nope"]);
        NodeVolumeLimits.pre_filter(&mut st, &p, &snap);
        let s = NodeVolumeLimits.filter(&st, &p, &snap.nodes[0]);
        assert_eq!(s.code, Code::UnschedulableAndUnresolvable, "{s}");
        assert!(s.message().contains("persistentvolumeclaims \"nope\" not found"), "{s}");
        assert!(NodeVolumeLimits.pre_filter(&mut CycleState::new(), &crate::testing::pod("plain").info(), &snap).0.is_skip());
    }

    /// A pod in "default" with generic ephemeral volumes named `volumes`
    /// (its claims are `<name>-<volume>`).
    fn ephemeral_pod(name: &str, volumes: &[&str]) -> Arc<PodInfo> {
        use k8s_openapi::api::core::v1 as core;
        let mut b = crate::testing::pod(name);
        if let Some(s) = b.pod.spec.as_mut() {
            s.volumes = Some(volumes.iter().map(|v| core::Volume { name: v.to_string(), ephemeral: Some(core::EphemeralVolumeSource::default()), ..Default::default() }).collect());
        }
        b.info()
    }

    /// The claim of `pod`'s ephemeral volume `volume`, of class "csi-sc",
    /// unbound, owned (controller) by the pod with `owner_uid`.
    fn ephemeral_claim(pod: &str, volume: &str, owner_uid: Option<&str>) -> crate::plugins::volume_binding::tests_support::ClaimB {
        let mut c = claim(&format!("{pod}-{volume}"), "1Gi", Some("csi-sc"));
        if let Some(uid) = owner_uid {
            c.0.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]);
        }
        c
    }

    // Upstream's TestCSILimits, its ephemeral rows: driver "ebs" behind the
    // class "csi-sc"; `running` has one bound claim on ebs, `two` two ebs
    // claims, `csi-4` is an unbound claim of the class.
    #[test]
    fn generic_ephemeral_volumes_count_like_claims() {
        let mut claims = vec![
            claim("csi-3", "1Gi", Some("csi-sc")).volume("v3"),
            claim("csi-1", "1Gi", Some("csi-sc")).volume("v1"),
            claim("csi-2", "1Gi", Some("csi-sc")).volume("v2"),
            claim("csi-0", "1Gi", Some("csi-sc")).volume("v0"),
        ];
        let pvs: Vec<_> = (0..4).map(|i| pv(&format!("v{i}"), "1Gi", Some("csi-sc")).csi("ebs", &format!("h{i}")).bound(&format!("csi-{i}"))).collect();
        let abc_uid = crate::testing::pod("abc").info().uid.clone();
        let two_uid = crate::testing::pod("two").info().uid.clone();
        claims.push(ephemeral_claim("abc", "xyz", Some(&abc_uid)));
        claims.push(ephemeral_claim("two", "x", Some(&two_uid)));
        claims.push(ephemeral_claim("two", "y", Some(&two_uid)));
        claims.push(ephemeral_claim("orphan", "xyz", None));
        let running = || pod_with_claims("running", &["csi-3"]);
        let csi_two = || pod_with_claims("csi-two", &["csi-1", "csi-2"]);
        let one = || pod_with_claims("one", &["csi-0"]);
        struct Row {
            name: &'static str,
            new_pod: Arc<PodInfo>,
            existing: Vec<Arc<PodInfo>>,
            limit: Option<i32>,
            want: Result<(), (Code, &'static str)>,
        }
        let rows = vec![
            Row { name: "ephemeral volume missing", new_pod: ephemeral_pod("missing", &["xyz"]), existing: vec![], limit: None, want: Err((Code::UnschedulableAndUnresolvable, "looking up PVC default/missing-xyz: persistentvolumeclaims \"missing-xyz\" not found")) },
            Row { name: "ephemeral volume not owned", new_pod: ephemeral_pod("orphan", &["xyz"]), existing: vec![], limit: None, want: Err((Code::Error, "PVC default/orphan-xyz was not created for pod default/orphan (pod is not owner)")) },
            Row { name: "ephemeral volume unbound", new_pod: ephemeral_pod("abc", &["xyz"]), existing: vec![], limit: None, want: Ok(()) },
            Row { name: "ephemeral doesn't when node volume limit <= pods CSI volume", new_pod: ephemeral_pod("abc", &["xyz"]), existing: vec![running(), csi_two()], limit: Some(2), want: Err((Code::Unschedulable, REASON)) },
            Row { name: "ephemeral doesn't when node volume limit <= pods ephemeral CSI volume", new_pod: one(), existing: vec![running(), ephemeral_pod("two", &["x", "y"])], limit: Some(2), want: Err((Code::Unschedulable, REASON)) },
            Row { name: "persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent volume", new_pod: one(), existing: vec![running(), ephemeral_pod("abc", &["xyz"]), csi_two()], limit: Some(3), want: Err((Code::Unschedulable, REASON)) },
            Row { name: "persistent okay when node volume limit > pods ephemeral CSI volume + persistent volume", new_pod: one(), existing: vec![running(), ephemeral_pod("abc", &["xyz"]), csi_two()], limit: Some(5), want: Ok(()) },
            // Beyond upstream's table: the ephemeral claims of a bound pod
            // alone reach the limit.
            Row { name: "ephemeral claims of a bound pod fill the limit", new_pod: one(), existing: vec![ephemeral_pod("two", &["x", "y"])], limit: Some(2), want: Err((Code::Unschedulable, REASON)) },
            Row { name: "ephemeral claims of a bound pod below the limit", new_pod: one(), existing: vec![ephemeral_pod("two", &["x", "y"])], limit: Some(3), want: Ok(()) },
        ];
        for r in rows {
            let mut snap = snapshot_with(&[("n1", vec![])], &claims, &pvs, &[("csi-sc", true, "ebs")]);
            // Upstream's "csinode-with-no-limit": the driver is listed without a count.
            let mut cn = csi_node("n1", &[("ebs", r.limit.unwrap_or(0))]);
            if r.limit.is_none() {
                cn.spec.drivers[0].allocatable = None;
            }
            snap.storage.upsert_csi_node(&cn);
            for p in r.existing {
                snap.add_pod(on("n1", p));
            }
            let mut st = CycleState::new();
            assert!(NodeVolumeLimits.pre_filter(&mut st, &r.new_pod, &snap).0.is_success(), "{}", r.name);
            let s = NodeVolumeLimits.filter(&st, &r.new_pod, &snap.nodes[0]);
            match r.want {
                Ok(()) => assert!(s.is_success(), "{}: {s}", r.name),
                Err((code, message)) => assert_eq!((s.code, s.message()), (code, message.to_string()), "{}", r.name),
            }
        }
    }
}
