//! Storage objects as the volume plugins read them: PersistentVolumeClaims,
//! PersistentVolumes, StorageClasses, CSINodes, CSIDrivers and
//! CSIStorageCapacities, each compiled once per object version, plus the PV
//! bindings and provisioning decisions the scheduler has assumed but the API
//! does not show yet.
//!
//! Assumed decisions (upstream's PV/PVC assume cache) are kept per pod:
//!
//! ```text
//!   assume(pod's decisions) --> the next cycles see the PV's claimRef and the
//!                               claim's selected node at once
//!   forget(pod uid)         --> reverted (binding failed, or the pod left)
//!   a watched PV with a claimRef / a watched claim with a selected node or a
//!   volume name             --> the API's object supersedes the assumption
//! ```
//!
//! A malformed object (bad quantity, unknown access mode, empty node affinity)
//! is kept with its error, which names the field: a pod that needs it is
//! unschedulable with that message, and nothing else is affected.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;
use thiserror::Error;

use berth_model::quantity;
use berth_model::selector::{validate_key, Labels, NodeSelector, Op, Requirement, Selector};

/// Annotation the scheduler sets on a claim to have it provisioned for a node.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Annotation the PV controller sets on a claim once binding is complete.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Annotation set on a PV bound by a controller (not pre-bound by a user).
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The deprecated storage class annotation, read before spec.storageClassName.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The CSINode annotation listing in-tree plugins migrated to CSI on the node.
pub const ANN_MIGRATED_PLUGINS: &str = "storage.alpha.kubernetes.io/migrated-plugins";
/// A provisioner name meaning "no dynamic provisioning".
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// A storage object that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// A field is invalid.
    #[error("{kind} {name:?}: {message}")]
    Malformed {
        /// Lower-case kind as upstream's messages spell it ("persistentvolumeclaim").
        kind: &'static str,
        /// Name (namespace/name for namespaced kinds).
        name: String,
        /// The field and what is wrong with it.
        message: String,
    },
}

/// Access modes as a bit set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessModes(pub u8);

impl AccessModes {
    /// ReadWriteOnce.
    pub const RWO: u8 = 1;
    /// ReadOnlyMany.
    pub const ROX: u8 = 2;
    /// ReadWriteMany.
    pub const RWX: u8 = 4;
    /// ReadWriteOncePod.
    pub const RWOP: u8 = 8;

    fn parse(modes: Option<&Vec<String>>, path: &str) -> Result<Self, String> {
        let mut m = 0;
        for (i, s) in modes.into_iter().flatten().enumerate() {
            m |= match s.as_str() {
                "ReadWriteOnce" => Self::RWO,
                "ReadOnlyMany" => Self::ROX,
                "ReadWriteMany" => Self::RWX,
                "ReadWriteOncePod" => Self::RWOP,
                other => return Err(format!("{path}[{i}]: unsupported value {other:?} (ReadWriteOnce, ReadOnlyMany, ReadWriteMany or ReadWriteOncePod)")),
            };
        }
        Ok(AccessModes(m))
    }

    /// Does this set hold every mode of `other`?
    pub fn contains(self, other: AccessModes) -> bool {
        self.0 & other.0 == other.0
    }

    /// Is ReadWriteOncePod among them?
    pub fn rwop(self) -> bool {
        self.0 & Self::RWOP != 0
    }
}

fn block_mode(mode: Option<&str>, path: &str) -> Result<bool, String> {
    match mode {
        None | Some("Filesystem") => Ok(false),
        Some("Block") => Ok(true),
        Some(o) => Err(format!("{path}: unsupported value {o:?} (Filesystem or Block)")),
    }
}

fn class_of(annotations: Option<&std::collections::BTreeMap<String, String>>, spec_class: Option<&String>) -> String {
    annotations.and_then(|a| a.get(ANN_BETA_STORAGE_CLASS)).or(spec_class).cloned().unwrap_or_default()
}

/// A PV's reference to its claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID ("" when unset).
    pub uid: String,
}

/// A PersistentVolumeClaim, compiled.
#[derive(Clone, Debug, Default)]
pub struct Claim {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// metadata.uid ("" when unset).
    pub uid: String,
    /// Storage class (beta annotation, else spec.storageClassName; "" for none).
    pub class: String,
    /// spec.volumeName ("" when unbound).
    pub volume_name: String,
    /// spec.resources.requests.storage in bytes (0 when unset).
    pub request: i64,
    /// Whether a storage request was given at all.
    pub has_request: bool,
    /// spec.accessModes.
    pub access_modes: AccessModes,
    /// spec.volumeMode is Block.
    pub block: bool,
    /// spec.selector (None when unset).
    pub selector: Option<Selector>,
    /// spec.volumeAttributesClassName ("" when unset).
    pub attributes_class: String,
    /// status.phase is Lost.
    pub lost: bool,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
    /// The bind-completed annotation is present.
    pub bind_completed: bool,
    /// The selected-node annotation.
    pub selected_node: Option<String>,
    /// UID of the controlling owner (generic ephemeral volumes: the pod).
    pub controller_uid: Option<String>,
    /// Why the claim cannot be used.
    pub error: Option<Error>,
}

impl Claim {
    /// Compiles a claim; never fails (problems land in `error`).
    pub fn from_api(c: &core::PersistentVolumeClaim) -> Claim {
        let meta = &c.metadata;
        let ann = meta.annotations.as_ref();
        let spec = c.spec.as_ref();
        let mut out = Claim {
            namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            class: class_of(ann, spec.and_then(|s| s.storage_class_name.as_ref())),
            volume_name: spec.and_then(|s| s.volume_name.clone()).unwrap_or_default(),
            attributes_class: spec.and_then(|s| s.volume_attributes_class_name.clone()).unwrap_or_default(),
            lost: c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost"),
            deleting: meta.deletion_timestamp.is_some(),
            bind_completed: ann.is_some_and(|a| a.contains_key(ANN_BIND_COMPLETED)),
            selected_node: ann.and_then(|a| a.get(ANN_SELECTED_NODE)).cloned(),
            controller_uid: meta.owner_references.iter().flatten().find(|o| o.controller == Some(true)).map(|o| o.uid.clone()),
            ..Default::default()
        };
        if let Err(m) = out.read_spec(spec) {
            out.error = Some(Error::Malformed { kind: "persistentvolumeclaim", name: format!("{}/{}", out.namespace, out.name), message: m });
        }
        out
    }

    fn read_spec(&mut self, spec: Option<&core::PersistentVolumeClaimSpec>) -> Result<(), String> {
        let Some(spec) = spec else { return Ok(()) };
        if let Some(q) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get("storage")) {
            self.request = quantity::parse_value(&q.0).map_err(|e| format!("spec.resources.requests.storage: {e}"))?;
            self.has_request = true;
        }
        self.access_modes = AccessModes::parse(spec.access_modes.as_ref(), "spec.accessModes")?;
        self.block = block_mode(spec.volume_mode.as_deref(), "spec.volumeMode")?;
        if let Some(sel) = &spec.selector {
            self.selector = Some(Selector::from_label_selector(Some(sel), "spec.selector")?);
        }
        Ok(())
    }

    /// Bound, as the binder reads it: a volume name and the bind-completed annotation.
    pub fn fully_bound(&self) -> bool {
        !self.volume_name.is_empty() && self.bind_completed
    }

    /// "namespace/name".
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// An in-tree volume source that has a CSI counterpart (migration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InTree {
    /// The in-tree plugin ("kubernetes.io/gce-pd").
    pub plugin: &'static str,
    /// The CSI driver it migrates to.
    pub driver: &'static str,
    /// The volume handle the translation gives.
    pub handle: String,
}

/// A PersistentVolume, compiled.
#[derive(Clone, Debug, Default)]
pub struct Volume {
    /// Name.
    pub name: String,
    /// metadata.labels (topology labels for VolumeZone).
    pub labels: Labels,
    /// spec.capacity.storage in bytes.
    pub capacity: i64,
    /// spec.accessModes.
    pub access_modes: AccessModes,
    /// spec.volumeMode is Block.
    pub block: bool,
    /// Storage class (beta annotation, else spec.storageClassName).
    pub class: String,
    /// spec.volumeAttributesClassName ("" when unset).
    pub attributes_class: String,
    /// spec.claimRef.
    pub claim_ref: Option<ClaimRef>,
    /// spec.nodeAffinity.required (None: any node).
    pub node_affinity: Option<NodeSelector>,
    /// Node names of a local PV's hostname affinity (upstream
    /// `GetLocalPersistentVolumeNodeNames`; empty when it names none).
    pub local_nodes: Vec<String>,
    /// status.phase is Available.
    pub available: bool,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
    /// spec.csi: driver and volume handle.
    pub csi: Option<(String, String)>,
    /// A migratable in-tree source.
    pub in_tree: Option<InTree>,
    /// Why the volume cannot be used.
    pub error: Option<Error>,
}

/// Upstream's topology label keys read from PVs, beta first.
pub const ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
/// Beta region label.
pub const REGION_BETA: &str = "failure-domain.beta.kubernetes.io/region";
/// GA zone label.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// GA region label.
pub const REGION: &str = "topology.kubernetes.io/region";

impl Volume {
    /// Compiles a PV; never fails (problems land in `error`).
    pub fn from_api(v: &core::PersistentVolume) -> Volume {
        let meta = &v.metadata;
        let spec = v.spec.as_ref();
        let mut out = Volume {
            name: meta.name.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            class: class_of(meta.annotations.as_ref(), spec.and_then(|s| s.storage_class_name.as_ref())),
            attributes_class: spec.and_then(|s| s.volume_attributes_class_name.clone()).unwrap_or_default(),
            claim_ref: spec.and_then(|s| s.claim_ref.as_ref()).map(|r| ClaimRef {
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
                uid: r.uid.clone().unwrap_or_default(),
            }),
            available: v.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available"),
            deleting: meta.deletion_timestamp.is_some(),
            ..Default::default()
        };
        if let Err(m) = out.read_spec(spec) {
            out.error = Some(Error::Malformed { kind: "persistentvolume", name: out.name.clone(), message: m });
        }
        out
    }

    fn read_spec(&mut self, spec: Option<&core::PersistentVolumeSpec>) -> Result<(), String> {
        let Some(spec) = spec else { return Ok(()) };
        // A PV without a capacity offers nothing (upstream reads a zero quantity).
        if let Some(q) = spec.capacity.as_ref().and_then(|c| c.get("storage")) {
            self.capacity = quantity::parse_value(&q.0).map_err(|e| format!("spec.capacity.storage: {e}"))?;
        }
        self.access_modes = AccessModes::parse(spec.access_modes.as_ref(), "spec.accessModes")?;
        self.block = block_mode(spec.volume_mode.as_deref(), "spec.volumeMode")?;
        if let Some(na) = &spec.node_affinity {
            let req = na.required.as_ref().ok_or("spec.nodeAffinity.required: must specify required node constraints")?;
            if req.node_selector_terms.is_empty() {
                return Err("spec.nodeAffinity.required.nodeSelectorTerms: must have at least one node selector term".into());
            }
            self.node_affinity = Some(NodeSelector::compile(req, "spec.nodeAffinity.required")?);
            self.local_nodes = local_node_names(req);
        }
        self.csi = spec.csi.as_ref().map(|c| (c.driver.clone(), c.volume_handle.clone()));
        let zone = self.labels.get(ZONE).or_else(|| self.labels.get(ZONE_BETA)).cloned().unwrap_or_else(|| "UNSPECIFIED".into());
        self.in_tree = if let Some(g) = &spec.gce_persistent_disk {
            Some(InTree { plugin: "kubernetes.io/gce-pd", driver: "pd.csi.storage.gke.io", handle: format!("projects/UNSPECIFIED/zones/{zone}/disks/{}", g.pd_name) })
        } else if let Some(a) = &spec.aws_elastic_block_store {
            Some(InTree { plugin: "kubernetes.io/aws-ebs", driver: "ebs.csi.aws.com", handle: ebs_volume_id(&a.volume_id) })
        } else if let Some(a) = &spec.azure_disk {
            Some(InTree { plugin: "kubernetes.io/azure-disk", driver: "disk.csi.azure.com", handle: a.disk_uri.clone() })
        } else {
            spec.cinder.as_ref().map(|c| InTree { plugin: "kubernetes.io/cinder", driver: "cinder.csi.openstack.org", handle: c.volume_id.clone() })
        };
        Ok(())
    }

    /// Does the PV's node affinity admit the node (upstream `CheckNodeAffinity`)?
    pub fn admits(&self, node_name: &str, labels: &Labels) -> bool {
        self.node_affinity.as_ref().is_none_or(|a| a.matches(node_name, labels))
    }

    /// Is the volume bound or pre-bound to this claim (upstream `IsVolumeBoundToClaim`)?
    pub fn bound_to(claim_ref: Option<&ClaimRef>, claim: &Claim) -> bool {
        claim_ref.is_some_and(|r| r.name == claim.name && r.namespace == claim.namespace && (r.uid.is_empty() || r.uid == claim.uid))
    }
}

/// `aws://zone/vol-123` → `vol-123`, as the CSI translation does.
fn ebs_volume_id(id: &str) -> String {
    if id.starts_with("aws://") { id.rsplit('/').next().unwrap_or(id).to_string() } else { id.to_string() }
}

fn local_node_names(req: &core::NodeSelector) -> Vec<String> {
    let mut result: BTreeSet<String> = BTreeSet::new();
    for term in &req.node_selector_terms {
        let mut nodes: Option<BTreeSet<String>> = None;
        for e in term.match_expressions.iter().flatten() {
            if e.key == "kubernetes.io/hostname" && e.operator == "In" {
                let vals: BTreeSet<String> = e.values.iter().flatten().cloned().collect();
                nodes = Some(match nodes {
                    None => vals,
                    Some(prev) => prev.intersection(&vals).cloned().collect(),
                });
            }
        }
        result.extend(nodes.unwrap_or_default());
    }
    result.into_iter().collect()
}

/// A StorageClass, compiled.
#[derive(Clone, Debug, Default)]
pub struct Class {
    /// Name.
    pub name: String,
    /// provisioner.
    pub provisioner: String,
    /// volumeBindingMode is WaitForFirstConsumer (unset reads as Immediate, the API default).
    pub wait_for_first_consumer: bool,
    /// allowedTopologies: terms ORed, each a list of (key, values) ANDed; empty: anywhere.
    pub allowed_topologies: Vec<Vec<Requirement>>,
    /// Why the class cannot be used.
    pub error: Option<Error>,
}

impl Class {
    /// Compiles a StorageClass; never fails (problems land in `error`).
    pub fn from_api(c: &storage::StorageClass) -> Class {
        let mut out = Class { name: c.metadata.name.clone().unwrap_or_default(), provisioner: c.provisioner.clone(), ..Default::default() };
        let mut read = || -> Result<(), String> {
            out.wait_for_first_consumer = match c.volume_binding_mode.as_deref() {
                None | Some("Immediate") => false,
                Some("WaitForFirstConsumer") => true,
                Some(o) => return Err(format!("volumeBindingMode: unsupported value {o:?} (Immediate or WaitForFirstConsumer)")),
            };
            for (i, t) in c.allowed_topologies.iter().flatten().enumerate() {
                let mut reqs = Vec::new();
                for (j, e) in t.match_label_expressions.iter().flatten().enumerate() {
                    validate_key(&e.key).map_err(|m| format!("allowedTopologies[{i}].matchLabelExpressions[{j}].key: {m}"))?;
                    reqs.push(Requirement { key: e.key.clone(), op: Op::In(e.values.clone()) });
                }
                // An empty term selects nothing (upstream skips it).
                if !reqs.is_empty() {
                    out.allowed_topologies.push(reqs);
                }
            }
            if c.allowed_topologies.as_ref().is_some_and(|t| !t.is_empty()) && out.allowed_topologies.is_empty() {
                // Every term was empty: nothing matches.
                out.allowed_topologies.push(vec![Requirement { key: String::new(), op: Op::In(vec![]) }]);
            }
            Ok(())
        };
        if let Err(m) = read() {
            out.error = Some(Error::Malformed { kind: "storageclass", name: out.name.clone(), message: m });
        }
        out
    }

    /// Does the node satisfy allowedTopologies (upstream `MatchTopologySelectorTerms`)?
    pub fn topology_allows(&self, labels: &Labels) -> bool {
        self.allowed_topologies.is_empty() || self.allowed_topologies.iter().any(|t| t.iter().all(|r| r.matches(labels)))
    }

    /// Can the class provision dynamically at all?
    pub fn provisions(&self) -> bool {
        !self.provisioner.is_empty() && self.provisioner != NO_PROVISIONER
    }
}

/// A CSINode, compiled.
#[derive(Clone, Debug, Default)]
pub struct CsiNode {
    /// Name (the node's).
    pub name: String,
    /// Per driver, allocatable.count when set.
    pub limits: Vec<(String, i64)>,
    /// In-tree plugins migrated to CSI on this node.
    pub migrated_plugins: Vec<String>,
    /// Why the object cannot be used.
    pub error: Option<Error>,
}

impl CsiNode {
    /// Compiles a CSINode.
    pub fn from_api(n: &storage::CSINode) -> CsiNode {
        let name = n.metadata.name.clone().unwrap_or_default();
        let mut out = CsiNode {
            migrated_plugins: n
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANN_MIGRATED_PLUGINS))
                .map(|s| s.split(',').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect())
                .unwrap_or_default(),
            name,
            ..Default::default()
        };
        for (i, d) in n.spec.drivers.iter().enumerate() {
            if let Some(c) = d.allocatable.as_ref().and_then(|a| a.count) {
                if c < 0 {
                    out.error = Some(Error::Malformed { kind: "csinode", name: out.name.clone(), message: format!("spec.drivers[{i}].allocatable.count: must be greater than or equal to 0, got {c}") });
                    continue;
                }
                out.limits.push((d.name.clone(), i64::from(c)));
            }
        }
        out
    }

    /// The attach limit for a driver.
    pub fn limit(&self, driver: &str) -> Option<i64> {
        self.limits.iter().find(|(d, _)| d == driver).map(|(_, c)| *c)
    }

    /// Is the in-tree plugin migrated to CSI on this node?
    pub fn migrated(&self, plugin: &str) -> bool {
        self.migrated_plugins.iter().any(|p| p == plugin)
    }
}

/// A CSIStorageCapacity, compiled.
#[derive(Clone, Debug)]
pub struct Capacity {
    /// "namespace/name".
    pub key: String,
    /// storageClassName.
    pub class: String,
    /// nodeTopology (None: no node has access).
    pub node_topology: Option<Selector>,
    /// capacity in bytes.
    pub capacity: Option<i64>,
    /// maximumVolumeSize in bytes.
    pub maximum_volume_size: Option<i64>,
}

impl Capacity {
    /// Compiles a CSIStorageCapacity; the error names the field.
    pub fn from_api(c: &storage::CSIStorageCapacity) -> Result<Capacity, Error> {
        let key = format!("{}/{}", c.metadata.namespace.clone().unwrap_or_else(|| "default".into()), c.metadata.name.clone().unwrap_or_default());
        let err = |m: String| Error::Malformed { kind: "csistoragecapacity", name: key.clone(), message: m };
        let q = |v: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>, f: &str| -> Result<Option<i64>, Error> {
            v.map(|q| quantity::parse_value(&q.0).map_err(|e| err(format!("{f}: {e}")))).transpose()
        };
        let node_topology = match &c.node_topology {
            None => None,
            Some(s) => Some(Selector::from_label_selector(Some(s), "nodeTopology").map_err(err)?),
        };
        Ok(Capacity {
            class: c.storage_class_name.clone(),
            node_topology,
            capacity: q(c.capacity.as_ref(), "capacity")?,
            maximum_volume_size: q(c.maximum_volume_size.as_ref(), "maximumVolumeSize")?,
            key: key.clone(),
        })
    }

    /// The largest volume it can hold (maximumVolumeSize when set, else capacity).
    pub fn volume_limit(&self) -> Option<i64> {
        self.maximum_volume_size.or(self.capacity)
    }
}

/// A static binding the scheduler chose: the PV gets a claimRef to the claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticBinding {
    /// The PV.
    pub pv: String,
    /// The claim it is bound to.
    pub claim: ClaimRef,
}

/// What VolumeBinding decided for one pod on its node (Reserve), to assume in
/// the cache and to write through the API (PreBind).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeDecisions {
    /// The pod's uid.
    pub pod_uid: String,
    /// The node chosen.
    pub node: String,
    /// PVs to bind to claims (PV spec.claimRef).
    pub bindings: Vec<StaticBinding>,
    /// Claims ("namespace", "name") to provision on the node (selected-node annotation).
    pub provisions: Vec<(String, String)>,
}

/// Storage objects of the cluster and the decisions assumed on them.
///
/// Every table sits behind an `Arc`, so a clone (a plugin keeping a view for
/// its Filter calls) costs a few reference counts; updates copy a table only
/// while such a view is alive.
#[derive(Clone, Debug, Default)]
pub struct Storage {
    claims: Arc<HashMap<String, HashMap<String, Arc<Claim>>>>,
    volumes: Arc<HashMap<String, Arc<Volume>>>,
    by_class: Arc<HashMap<String, BTreeSet<String>>>,
    classes: Arc<HashMap<String, Arc<Class>>>,
    csi_nodes: Arc<HashMap<String, Arc<CsiNode>>>,
    csi_drivers: Arc<HashMap<String, bool>>,
    capacities: Arc<Vec<Arc<Capacity>>>,
    assumed_refs: Arc<HashMap<String, (ClaimRef, String)>>,
    assumed_nodes: Arc<HashMap<String, (String, String)>>,
}

impl Storage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when no storage object is known (pods without volumes never look).
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.volumes.is_empty() && self.classes.is_empty() && self.csi_nodes.is_empty()
    }

    /// Adds or replaces a claim. A claim that now shows a selected node or a
    /// volume supersedes what was assumed for it.
    pub fn upsert_claim(&mut self, c: &core::PersistentVolumeClaim) {
        let c = Claim::from_api(c);
        if c.selected_node.is_some() || !c.volume_name.is_empty() {
            Arc::make_mut(&mut self.assumed_nodes).remove(&c.key());
        }
        Arc::make_mut(&mut self.claims).entry(c.namespace.clone()).or_default().insert(c.name.clone(), Arc::new(c));
    }

    /// Removes a claim.
    pub fn remove_claim(&mut self, namespace: &str, name: &str) {
        let claims = Arc::make_mut(&mut self.claims);
        if let Some(m) = claims.get_mut(namespace) {
            m.remove(name);
            if m.is_empty() {
                claims.remove(namespace);
            }
        }
        Arc::make_mut(&mut self.assumed_nodes).remove(&format!("{namespace}/{name}"));
    }

    /// A claim by namespace and name.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Arc<Claim>> {
        self.claims.get(namespace).and_then(|m| m.get(name))
    }

    /// The claim's selected node, the assumed one first.
    pub fn selected_node<'a>(&'a self, c: &'a Claim) -> Option<&'a str> {
        if let Some((n, _)) = self.assumed_nodes.get(&c.key()) {
            return Some(n);
        }
        c.selected_node.as_deref()
    }

    /// Adds or replaces a PV. A PV that now has a claimRef supersedes what was assumed for it.
    pub fn upsert_volume(&mut self, v: &core::PersistentVolume) {
        let v = Volume::from_api(v);
        if v.claim_ref.is_some() {
            Arc::make_mut(&mut self.assumed_refs).remove(&v.name);
        }
        self.unindex(&v.name);
        Arc::make_mut(&mut self.by_class).entry(v.class.clone()).or_default().insert(v.name.clone());
        Arc::make_mut(&mut self.volumes).insert(v.name.clone(), Arc::new(v));
    }

    fn unindex(&mut self, name: &str) {
        let Some(old) = self.volumes.get(name) else { return };
        let by_class = Arc::make_mut(&mut self.by_class);
        if let Some(s) = by_class.get_mut(&old.class) {
            s.remove(name);
            if s.is_empty() {
                by_class.remove(&old.class);
            }
        }
    }

    /// Removes a PV.
    pub fn remove_volume(&mut self, name: &str) {
        self.unindex(name);
        Arc::make_mut(&mut self.volumes).remove(name);
        Arc::make_mut(&mut self.assumed_refs).remove(name);
    }

    /// A PV by name.
    pub fn volume(&self, name: &str) -> Option<&Arc<Volume>> {
        self.volumes.get(name)
    }

    /// The PV's claimRef, the assumed one first.
    pub fn claim_ref<'a>(&'a self, v: &'a Volume) -> Option<&'a ClaimRef> {
        self.assumed_refs.get(&v.name).map(|(r, _)| r).or(v.claim_ref.as_ref())
    }

    /// PVs of a storage class, by name.
    pub fn volumes_of_class(&self, class: &str) -> impl Iterator<Item = &Arc<Volume>> {
        self.by_class.get(class).into_iter().flatten().filter_map(|n| self.volumes.get(n))
    }

    /// Adds or replaces a StorageClass.
    pub fn upsert_class(&mut self, c: &storage::StorageClass) {
        let c = Class::from_api(c);
        Arc::make_mut(&mut self.classes).insert(c.name.clone(), Arc::new(c));
    }

    /// Removes a StorageClass.
    pub fn remove_class(&mut self, name: &str) {
        Arc::make_mut(&mut self.classes).remove(name);
    }

    /// A StorageClass by name.
    pub fn class(&self, name: &str) -> Option<&Arc<Class>> {
        self.classes.get(name)
    }

    /// Adds or replaces a CSINode.
    pub fn upsert_csi_node(&mut self, n: &storage::CSINode) {
        let n = CsiNode::from_api(n);
        Arc::make_mut(&mut self.csi_nodes).insert(n.name.clone(), Arc::new(n));
    }

    /// Removes a CSINode.
    pub fn remove_csi_node(&mut self, name: &str) {
        Arc::make_mut(&mut self.csi_nodes).remove(name);
    }

    /// The CSINode of a node.
    pub fn csi_node(&self, name: &str) -> Option<&Arc<CsiNode>> {
        self.csi_nodes.get(name)
    }

    /// Adds or replaces a CSIDriver.
    pub fn upsert_csi_driver(&mut self, d: &storage::CSIDriver) {
        let name = d.metadata.name.clone().unwrap_or_default();
        Arc::make_mut(&mut self.csi_drivers).insert(name, d.spec.storage_capacity.unwrap_or(false));
    }

    /// Removes a CSIDriver.
    pub fn remove_csi_driver(&mut self, name: &str) {
        Arc::make_mut(&mut self.csi_drivers).remove(name);
    }

    /// Is there a CSIDriver of this name with storageCapacity: true?
    pub fn driver_tracks_capacity(&self, name: &str) -> bool {
        self.csi_drivers.get(name).copied().unwrap_or(false)
    }

    /// Adds or replaces a CSIStorageCapacity. One that cannot be read is
    /// dropped (it offers no capacity) and the error returned to be logged.
    pub fn upsert_capacity(&mut self, c: &storage::CSIStorageCapacity) -> Result<(), Error> {
        let parsed = Capacity::from_api(c);
        let key = match &parsed {
            Ok(c) => c.key.clone(),
            Err(Error::Malformed { name, .. }) => name.clone(),
        };
        Arc::make_mut(&mut self.capacities).retain(|x| x.key != key);
        let c = parsed?;
        Arc::make_mut(&mut self.capacities).push(Arc::new(c));
        Ok(())
    }

    /// Removes a CSIStorageCapacity by "namespace/name".
    pub fn remove_capacity(&mut self, key: &str) {
        Arc::make_mut(&mut self.capacities).retain(|x| x.key != key);
    }

    /// CSIStorageCapacities, in the order they arrived.
    pub fn capacities(&self) -> &[Arc<Capacity>] {
        &self.capacities
    }

    /// Records an object of a kind VolumeBinding reads (claim, PV, class) that
    /// could not even be decoded: a pod that needs it is unschedulable with
    /// `message`. Other kinds are left out (they offer nothing).
    pub fn upsert_unreadable(&mut self, kind: &str, namespace: &str, name: &str, message: String) {
        match kind {
            "PersistentVolumeClaim" => {
                let c = Claim {
                    namespace: namespace.into(),
                    name: name.into(),
                    error: Some(Error::Malformed { kind: "persistentvolumeclaim", name: format!("{namespace}/{name}"), message }),
                    ..Default::default()
                };
                Arc::make_mut(&mut self.claims).entry(namespace.into()).or_default().insert(name.into(), Arc::new(c));
            }
            "PersistentVolume" => {
                self.unindex(name);
                let v = Volume { name: name.into(), error: Some(Error::Malformed { kind: "persistentvolume", name: name.into(), message }), ..Default::default() };
                Arc::make_mut(&mut self.volumes).insert(name.into(), Arc::new(v));
            }
            "StorageClass" => {
                let c = Class { name: name.into(), error: Some(Error::Malformed { kind: "storageclass", name: name.into(), message }), ..Default::default() };
                Arc::make_mut(&mut self.classes).insert(name.into(), Arc::new(c));
            }
            _ => {}
        }
    }

    /// Assumes a pod's volume decisions: the PVs count as bound to their
    /// claims and the claims as provisioned on the node until the API shows
    /// it or the pod's decisions are forgotten.
    pub fn assume(&mut self, d: &VolumeDecisions) {
        for b in &d.bindings {
            Arc::make_mut(&mut self.assumed_refs).insert(b.pv.clone(), (b.claim.clone(), d.pod_uid.clone()));
        }
        for (ns, name) in &d.provisions {
            Arc::make_mut(&mut self.assumed_nodes).insert(format!("{ns}/{name}"), (d.node.clone(), d.pod_uid.clone()));
        }
    }

    /// Reverts what was assumed for a pod.
    pub fn forget(&mut self, pod_uid: &str) {
        if self.assumed_refs.is_empty() && self.assumed_nodes.is_empty() {
            return;
        }
        Arc::make_mut(&mut self.assumed_refs).retain(|_, (_, u)| u != pod_uid);
        Arc::make_mut(&mut self.assumed_nodes).retain(|_, (_, u)| u != pod_uid);
    }

    /// Every claim as ("namespace", "name") (a relist drops the ones gone).
    pub fn claim_keys(&self) -> Vec<(String, String)> {
        self.claims.iter().flat_map(|(ns, m)| m.keys().map(move |n| (ns.clone(), n.clone()))).collect()
    }

    /// Every PV's name.
    pub fn volume_names(&self) -> Vec<String> {
        self.volumes.keys().cloned().collect()
    }

    /// Every StorageClass's name.
    pub fn class_names(&self) -> Vec<String> {
        self.classes.keys().cloned().collect()
    }

    /// Every CSINode's name.
    pub fn csi_node_names(&self) -> Vec<String> {
        self.csi_nodes.keys().cloned().collect()
    }

    /// Every CSIDriver's name.
    pub fn csi_driver_names(&self) -> Vec<String> {
        self.csi_drivers.keys().cloned().collect()
    }

    /// Number of assumed PV bindings and provisioning decisions.
    pub fn assumed_count(&self) -> usize {
        self.assumed_refs.len() + self.assumed_nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pvc(name: &str, storage: &str, modes: &[&str]) -> core::PersistentVolumeClaim {
        let mut c = core::PersistentVolumeClaim::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("default".into());
        c.spec = Some(core::PersistentVolumeClaimSpec {
            access_modes: Some(modes.iter().map(|s| s.to_string()).collect()),
            resources: Some(core::VolumeResourceRequirements { requests: Some([("storage".to_string(), Quantity(storage.into()))].into()), limits: None }),
            storage_class_name: Some("sc".into()),
            ..Default::default()
        });
        c
    }

    fn pv(name: &str, storage: &str) -> core::PersistentVolume {
        let mut v = core::PersistentVolume::default();
        v.metadata.name = Some(name.into());
        v.spec = Some(core::PersistentVolumeSpec {
            capacity: Some([("storage".to_string(), Quantity(storage.into()))].into()),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some("sc".into()),
            ..Default::default()
        });
        v
    }

    #[test]
    fn malformed_objects_name_the_field() {
        let rows: Vec<(Option<Error>, &str)> = vec![
            (Claim::from_api(&pvc("a", "lots", &["ReadWriteOnce"])).error, "spec.resources.requests.storage"),
            (Claim::from_api(&pvc("b", "1Gi", &["ReadWriteSometimes"])).error, "spec.accessModes[0]"),
            (Volume::from_api(&pv("c", "1Gi!")).error, "spec.capacity.storage"),
            (
                Volume::from_api(&{
                    let mut v = pv("d", "1Gi");
                    if let Some(s) = v.spec.as_mut() {
                        s.node_affinity = Some(core::VolumeNodeAffinity { required: None });
                    }
                    v
                })
                .error,
                "spec.nodeAffinity.required",
            ),
            (
                Volume::from_api(&{
                    let mut v = pv("e", "1Gi");
                    if let Some(s) = v.spec.as_mut() {
                        s.node_affinity = Some(core::VolumeNodeAffinity { required: Some(core::NodeSelector { node_selector_terms: vec![] }) });
                    }
                    v
                })
                .error,
                "spec.nodeAffinity.required.nodeSelectorTerms",
            ),
        ];
        for (e, field) in rows {
            let m = e.map(|e| e.to_string()).unwrap_or_default();
            assert!(m.contains(field), "{m:?} should name {field}");
        }
        assert!(Claim::from_api(&pvc("ok", "5G", &["ReadWriteOncePod"])).error.is_none());
    }

    #[test]
    fn assume_and_forget() {
        let mut s = Storage::new();
        s.upsert_volume(&pv("pv-1", "1Gi"));
        s.upsert_claim(&pvc("c", "1Gi", &["ReadWriteOnce"]));
        let d = VolumeDecisions {
            pod_uid: "uid-p".into(),
            node: "n1".into(),
            bindings: vec![StaticBinding { pv: "pv-1".into(), claim: ClaimRef { namespace: "default".into(), name: "c".into(), uid: String::new() } }],
            provisions: vec![("default".into(), "c".into())],
        };
        s.assume(&d);
        let v = s.volume("pv-1").cloned().expect("pv");
        assert_eq!(s.claim_ref(&v).map(|r| r.name.as_str()), Some("c"));
        let c = s.claim("default", "c").cloned().expect("claim");
        assert_eq!(s.selected_node(&c), Some("n1"));
        s.forget("uid-p");
        assert_eq!(s.claim_ref(&v), None);
        assert_eq!(s.selected_node(&c), None);
        // The API's object supersedes an assumption.
        s.assume(&d);
        let mut bound = pv("pv-1", "1Gi");
        if let Some(sp) = bound.spec.as_mut() {
            sp.claim_ref = Some(core::ObjectReference { name: Some("c".into()), namespace: Some("default".into()), ..Default::default() });
        }
        s.upsert_volume(&bound);
        assert_eq!(s.assumed_count(), 1);
        assert_eq!(s.volumes_of_class("sc").count(), 1);
        s.remove_volume("pv-1");
        assert_eq!(s.volumes_of_class("sc").count(), 0);
    }
}
