//! Builders for the storage plugins' tests, and helpers that run
//! VolumeBinding's PreFilter and Filter for the tests of its parts.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::cache::storage::{ANN_BIND_COMPLETED, ANN_SELECTED_NODE};
use super::{Args, VolumeBinding};
use crate::cache::Snapshot;
use crate::framework::{CycleState, FilterPlugin, PreFilterPlugin, Status};
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

/// The plugin with default args.
pub fn plugin() -> VolumeBinding {
    VolumeBinding::new(Args::default()).expect("default args")
}

/// PreFilter then Filter on every node: (PreFilter status, the cycle state,
/// per-node Filter statuses; "narrowed" for nodes PreFilter left out).
pub fn run(snap: &Snapshot, p: &PodInfo) -> (Status, CycleState, Vec<(String, Status)>) {
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

/// The names of the nodes that passed.
pub fn feasible(rows: &[(String, Status)]) -> Vec<&str> {
    rows.iter().filter(|(_, s)| s.is_success()).map(|(n, _)| n.as_str()).collect()
}

/// Unlabelled nodes of these names, for [`snapshot_with`].
pub fn nodes(names: &[&str]) -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    names.iter().map(|n| (Box::leak(n.to_string().into_boxed_str()) as &str, vec![])).collect()
}
