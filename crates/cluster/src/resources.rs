//! The table of resources the local cluster serves, and per-kind helpers
//! (typed normalization through k8s-openapi, defaults, QoS, PDB maths).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use k8s_openapi::api;
use serde::{Serialize, de::DeserializeOwned};
use super::jsonptr::Pointer as _;
use serde_json::{Value, json};

/// Errors from normalizing or validating an object.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object does not deserialize into its typed form.
    #[error("{0}")]
    Decode(String),
    /// The object has the wrong apiVersion or kind for this path.
    #[error("{0}")]
    WrongType(String),
    /// Admission refused the object as invalid (422): one field error
    /// each, written as upstream prints them (`spec.x: Forbidden: why`).
    #[error("{}", .0.join(", "))]
    Invalid(Vec<String>),
    /// An admission plugin refused the request (403).
    #[error("{0}")]
    Forbidden(String),
}

/// Index of a resource in [`RESOURCES`].
pub type ResId = usize;

/// Describes one served resource.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// API group ("" for core).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Plural resource name (URL segment).
    pub plural: &'static str,
    /// Singular name.
    pub singular: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Namespaced?
    pub namespaced: bool,
    /// kubectl short names.
    pub short_names: &'static [&'static str],
    /// Subresources: (name, kind, verbs).
    pub subresources: &'static [(&'static str, &'static str, &'static [&'static str])],
    /// Has a `status` subresource, so main-resource writes keep the old status.
    pub has_status: bool,
    /// PUT on a missing object creates it.
    pub create_on_update: bool,
    /// Extra field-selector fields (dotted) besides metadata.name/namespace.
    pub fields: &'static [&'static str],
    /// Typed round trip: validates and prunes unknown fields.
    pub normalize: fn(Value) -> Result<Value, Error>,
    /// The same, straight from JSON bytes (saves building a Value twice).
    pub normalize_slice: fn(&[u8]) -> Result<Value, Error>,
    /// A custom resource: what its CustomResourceDefinition says (None
    /// for the built-in kinds).
    pub custom: Option<Arc<CustomInfo>>,
    /// The kind's admission rules (defaults and checks on writes), set
    /// when the [`Registry`] is built (see `admission`); none in the
    /// static table.
    pub admission: Admission,
}

/// What an admission rule may read of the cluster while a write is
/// decided (the store answers it under its lock, so what it reads cannot
/// change before the write commits).
pub trait View {
    /// The current object `ns`/`name` of resource `r`. Only kinds the
    /// store keeps whole can be read this way (not pods, nodes or events).
    fn get(&self, r: ResId, ns: &str, name: &str) -> Option<&Value>;
    /// Every current object of resource `r`, by namespace then name (the
    /// same kinds as [`View::get`]).
    fn each(&self, r: ResId) -> Box<dyn Iterator<Item = &Value> + '_>;
    /// Whether the storage controllers run, so new claims and volumes get
    /// the protection finalizers those controllers remove.
    fn storage_protection(&self) -> bool;
}

/// A new object's defaults and checks: the view, the object's name (the
/// generated one for generateName) and the object.
pub type CreateRule = fn(&dyn View, &str, &mut Value) -> Result<(), Error>;
/// A main-resource update's checks and carried-over fields: the old
/// version and the new one.
pub type UpdateRule = fn(&Value, &mut Value) -> Result<(), Error>;
/// What the system itself sets on every changed version (status updates
/// too), after the write's own changes are known.
pub type SettleRule = fn(&mut Value);
/// Whether an object may be deleted, by name.
pub type DeleteRule = fn(&str) -> Result<(), Error>;

/// A kind's admission: the hooks the store runs on its writes, in place
/// of per-kind branches (upstream's admission plugins and registry
/// strategies). Every hook is optional; a custom resource has none (its
/// schema is checked by the store for every kind).
#[derive(Debug, Clone, Copy, Default)]
pub struct Admission {
    /// On create, before the object is stored (after name and metadata
    /// are settled).
    pub create: Option<CreateRule>,
    /// On an update of the main resource (not `status`), before the
    /// generation is bumped and managedFields are recorded.
    pub update: Option<UpdateRule>,
    /// On any update that changes the object (main resource or status),
    /// after managedFields are recorded; a version it leaves equal to the
    /// stored one is not written.
    pub settle: Option<SettleRule>,
    /// On delete, before the object is looked up.
    pub delete: Option<DeleteRule>,
}

impl Admission {
    /// No admission rules.
    pub const NONE: Admission = Admission { create: None, update: None, settle: None, delete: None };
}

/// What the local cluster keeps of a CustomResourceDefinition for one of
/// its versions.
#[derive(Debug, Clone, Default)]
pub struct CustomInfo {
    /// The CRD's name (`<plural>.<group>`).
    pub crd: String,
    /// `spec.names.listKind`.
    pub list_kind: String,
    /// `spec.names.categories`.
    pub categories: Vec<String>,
    /// The version's `schema.openAPIV3Schema`, if any.
    pub schema: Option<Value>,
    /// The version's `additionalPrinterColumns`.
    pub printer_columns: Vec<Value>,
    /// The version's `subresources.scale`, if any.
    pub scale: Option<ScalePaths>,
}

/// Where a custom resource keeps what its `scale` subresource shows
/// (JSON pointers, from the CRD's JSON paths).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath`.
    pub spec_replicas: String,
    /// `statusReplicasPath`.
    pub status_replicas: String,
    /// `labelSelectorPath`, if any.
    pub label_selector: Option<String>,
}

impl ResourceInfo {
    /// `apiVersion` string (`v1` or `group/version`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_string() } else { format!("{}/{}", self.group, self.version) }
    }
}

fn norm<K: DeserializeOwned + Serialize>(v: Value) -> Result<Value, Error> {
    let k: K = serde_json::from_value(v).map_err(|e| Error::Decode(e.to_string()))?;
    serde_json::to_value(k).map_err(|e| Error::Decode(e.to_string()))
}

fn norm_slice<K: DeserializeOwned + Serialize>(b: &[u8]) -> Result<Value, Error> {
    let k: K = serde_json::from_slice(b).map_err(|e| Error::Decode(e.to_string()))?;
    serde_json::to_value(k).map_err(|e| Error::Decode(e.to_string()))
}

const ALL_VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// A built-in kind served without a controller: names from its
/// k8s-openapi type, typed normalization, optional subresources.
/// Whether a resource is namespaced, from its k8s-openapi scope.
trait Scope {
    const NAMESPACED: bool;
}
impl Scope for k8s_openapi::NamespaceResourceScope {
    const NAMESPACED: bool = true;
}
impl Scope for k8s_openapi::ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// Whether `subresources` has `status` (a main-resource write then keeps
/// the old status).
const fn has_status(subresources: &[(&str, &str, &[&str])]) -> bool {
    let mut i = 0;
    while i < subresources.len() {
        let name = subresources[i].0.as_bytes();
        if name.len() == 6 && name[0] == b's' && name[1] == b't' && name[2] == b'a' && name[3] == b't' && name[4] == b'u' && name[5] == b's' {
            return true;
        }
        i += 1;
    }
    false
}

/// A built-in resource served by the k8s-openapi type `$ty`: group,
/// version, kind, plural and scope are the type's ([`k8s_openapi::Resource`]);
/// what the type does not know (the singular name, kubectl's short names,
/// the subresources, the selectable fields, create-on-update) is given.
macro_rules! builtin {
    ($ty:ty, $singular:expr, $short:expr, $subs:expr) => {
        builtin!($ty, $singular, $short, $subs, fields: &[], create_on_update: false)
    };
    ($ty:ty, $singular:expr, $short:expr, $subs:expr, fields: $fields:expr, create_on_update: $create_on_update:expr) => {
        ResourceInfo {
            group: <$ty as k8s_openapi::Resource>::GROUP,
            version: <$ty as k8s_openapi::Resource>::VERSION,
            plural: <$ty as k8s_openapi::Resource>::URL_PATH_SEGMENT,
            singular: $singular,
            kind: <$ty as k8s_openapi::Resource>::KIND,
            namespaced: <<$ty as k8s_openapi::Resource>::Scope as Scope>::NAMESPACED,
            short_names: $short,
            subresources: $subs,
            has_status: has_status($subs),
            create_on_update: $create_on_update,
            fields: $fields,
            normalize: norm::<$ty>,
            normalize_slice: norm_slice::<$ty>,
            custom: None,
            admission: Admission::NONE,
        }
    };
}

/// Pods' subresources.
const POD_SUBRESOURCES: &[(&str, &str, &[&str])] = &[
    ("attach", "PodAttachOptions", &["create", "get"]),
    ("binding", "Binding", &["create"]),
    ("eviction", "Eviction", &["create"]),
    ("exec", "PodExecOptions", &["create", "get"]),
    ("log", "Pod", &["get"]),
    ("portforward", "PodPortForwardOptions", &["create", "get"]),
    ("status", "Pod", STATUS_VERBS),
];

/// Pods' selectable fields besides metadata.name/namespace.
const POD_FIELDS: &[&str] = &["spec.nodeName", "spec.schedulerName", "spec.restartPolicy", "spec.serviceAccountName", "status.phase", "status.podIP", "status.nominatedNodeName"];

/// core/v1 Events' selectable fields besides metadata.name/namespace.
const CORE_EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// ServiceAccounts' subresources: `token` (TokenRequest).
const SA_SUBRESOURCES: &[(&str, &str, &[&str])] = &[("token", "TokenRequest", &["create"])];

/// Namespaces.
pub const NAMESPACES: ResId = 0;
/// Nodes.
pub const NODES: ResId = 1;
/// Pods.
pub const PODS: ResId = 2;
/// core/v1 Events.
pub const EVENTS: ResId = 3;
/// events.k8s.io/v1 Events.
pub const EVENTS_V1: ResId = 4;
/// coordination.k8s.io/v1 Leases.
pub const LEASES: ResId = 5;
/// scheduling.k8s.io/v1 PriorityClasses.
pub const PRIORITY_CLASSES: ResId = 6;
/// policy/v1 PodDisruptionBudgets.
pub const PDBS: ResId = 7;
/// core/v1 PersistentVolumes.
pub const PVS: ResId = 9;
/// core/v1 PersistentVolumeClaims.
pub const PVCS: ResId = 10;
/// storage.k8s.io/v1 StorageClasses.
pub const STORAGE_CLASSES: ResId = 17;
/// storage.k8s.io/v1 CSINodes.
pub const CSINODES: ResId = 18;
/// storage.k8s.io/v1 CSIDrivers.
pub const CSIDRIVERS: ResId = 19;
/// scheduling.k8s.io/v1beta1 PodGroups.
pub const PODGROUPS: ResId = 26;
/// scheduling.k8s.io/v1beta1 Workloads.
pub const WORKLOADS: ResId = 27;
/// apiextensions.k8s.io/v1 CustomResourceDefinitions.
pub const CRDS: ResId = 28;
/// apps/v1 ReplicaSets.
pub const REPLICASETS: ResId = 13;
/// apps/v1 Deployments.
pub const DEPLOYMENTS: ResId = 15;
/// core/v1 ServiceAccounts.
pub const SERVICE_ACCOUNTS: ResId = 29;
/// core/v1 Secrets.
pub const SECRETS: ResId = 30;
/// core/v1 ConfigMaps.
pub const CONFIGMAPS: ResId = 12;
/// batch/v1 Jobs.
pub const JOBS: ResId = 40;
/// apps/v1 StatefulSets.
pub const STATEFULSETS: ResId = 14;
/// apps/v1 DaemonSets.
pub const DAEMONSETS: ResId = 16;
/// apps/v1 ControllerRevisions.
pub const CONTROLLERREVISIONS: ResId = 42;
/// resource.k8s.io/v1 ResourceClaims.
pub const RESOURCECLAIMS: ResId = 22;
/// resource.k8s.io/v1 ResourceClaimTemplates.
pub const RESOURCECLAIMTEMPLATES: ResId = 23;
/// resource.k8s.io/v1 DeviceClasses.
pub const DEVICECLASSES: ResId = 24;
/// resource.k8s.io/v1 ResourceSlices.
pub const RESOURCESLICES: ResId = 25;

/// The field-selector fields the Events store (events.k8s.io/v1) keeps
/// for both views of an Event (core/v1 is a view of it; see `eventview`), dotted:
/// events.k8s.io/v1's own, and `source`, which core/v1 selects on (the
/// deprecated source's component, or the reporting controller when it has
/// none, as upstream's `ToSelectableFields` has it; see `eventview::source`).
pub const EVENTS_SELECTABLE: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
    "source",
];

/// events.k8s.io/v1's own selectable fields: [`EVENTS_SELECTABLE`] without
/// `source`, its last.
pub const EVENTS_V1_SELECTABLE: &[&str] = match EVENTS_SELECTABLE.split_last() {
    Some((_, own)) => own,
    None => &[],
};

/// The served resources (indexed by the constants above; the rest are
/// stored and served without any controller behind them).
pub static RESOURCES: &[ResourceInfo] = &[
    builtin!(api::core::v1::Namespace, "namespace", &["ns"], &[("status", "Namespace", STATUS_VERBS)], fields: &["status.phase"], create_on_update: false),
    builtin!(api::core::v1::Node, "node", &["no"], &[("status", "Node", STATUS_VERBS)], fields: &["spec.unschedulable"], create_on_update: false),
    builtin!(api::core::v1::Pod, "pod", &["po"], POD_SUBRESOURCES, fields: POD_FIELDS, create_on_update: false),
    builtin!(api::core::v1::Event, "event", &["ev"], &[], fields: CORE_EVENT_FIELDS, create_on_update: true),
    builtin!(api::events::v1::Event, "event", &["ev"], &[], fields: EVENTS_V1_SELECTABLE, create_on_update: true),
    builtin!(api::coordination::v1::Lease, "lease", &[], &[], fields: &[], create_on_update: true),
    builtin!(api::scheduling::v1::PriorityClass, "priorityclass", &["pc"], &[]),
    builtin!(api::policy::v1::PodDisruptionBudget, "poddisruptionbudget", &["pdb"], &[("status", "PodDisruptionBudget", STATUS_VERBS)]),
    // Stored only (no controllers): objects a scheduler's informers read.
    builtin!(api::core::v1::Service, "service", &["svc"], &[("status", "Service", STATUS_VERBS)]),
    builtin!(api::core::v1::PersistentVolume, "persistentvolume", &["pv"], &[("status", "PersistentVolume", STATUS_VERBS)]),
    builtin!(api::core::v1::PersistentVolumeClaim, "persistentvolumeclaim", &["pvc"], &[("status", "PersistentVolumeClaim", STATUS_VERBS)]),
    builtin!(api::core::v1::ReplicationController, "replicationcontroller", &["rc"], &[("status", "ReplicationController", STATUS_VERBS), ("scale", "Scale", STATUS_VERBS)]),
    builtin!(api::core::v1::ConfigMap, "configmap", &["cm"], &[]),
    builtin!(api::apps::v1::ReplicaSet, "replicaset", &["rs"], &[("status", "ReplicaSet", STATUS_VERBS), ("scale", "Scale", STATUS_VERBS)]),
    builtin!(api::apps::v1::StatefulSet, "statefulset", &["sts"], &[("status", "StatefulSet", STATUS_VERBS), ("scale", "Scale", STATUS_VERBS)]),
    builtin!(api::apps::v1::Deployment, "deployment", &["deploy"], &[("status", "Deployment", STATUS_VERBS), ("scale", "Scale", STATUS_VERBS)]),
    builtin!(api::apps::v1::DaemonSet, "daemonset", &["ds"], &[("status", "DaemonSet", STATUS_VERBS)]),
    builtin!(api::storage::v1::StorageClass, "storageclass", &["sc"], &[]),
    builtin!(api::storage::v1::CSINode, "csinode", &[], &[]),
    builtin!(api::storage::v1::CSIDriver, "csidriver", &[], &[]),
    builtin!(api::storage::v1::CSIStorageCapacity, "csistoragecapacity", &[], &[]),
    builtin!(api::storage::v1::VolumeAttachment, "volumeattachment", &[], &[("status", "VolumeAttachment", STATUS_VERBS)]),
    builtin!(api::resource::v1::ResourceClaim, "resourceclaim", &[], &[("status", "ResourceClaim", STATUS_VERBS)]),
    builtin!(api::resource::v1::ResourceClaimTemplate, "resourceclaimtemplate", &[], &[]),
    builtin!(api::resource::v1::DeviceClass, "deviceclass", &[], &[]),
    builtin!(api::resource::v1::ResourceSlice, "resourceslice", &[], &[]),
    builtin!(api::scheduling::v1beta1::PodGroup, "podgroup", &[], &[("status", "PodGroup", STATUS_VERBS)]),
    builtin!(api::scheduling::v1beta1::Workload, "workload", &[], &[]),
    builtin!(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition, "customresourcedefinition", &["crd", "crds"], &[("status", "CustomResourceDefinition", STATUS_VERBS)]),
    // Stored only: the rest of the built-in kinds (charts and kubectl touch them).
    builtin!(api::core::v1::ServiceAccount, "serviceaccount", &["sa"], SA_SUBRESOURCES),
    builtin!(api::core::v1::Secret, "secret", &[], &[]),
    builtin!(api::core::v1::Endpoints, "endpoints", &["ep"], &[]),
    builtin!(api::core::v1::LimitRange, "limitrange", &["limits"], &[]),
    builtin!(api::core::v1::ResourceQuota, "resourcequota", &["quota"], &[("status", "ResourceQuota", STATUS_VERBS)]),
    builtin!(api::core::v1::PodTemplate, "podtemplate", &[], &[]),
    builtin!(api::rbac::v1::Role, "role", &[], &[]),
    builtin!(api::rbac::v1::RoleBinding, "rolebinding", &[], &[]),
    builtin!(api::rbac::v1::ClusterRole, "clusterrole", &[], &[]),
    builtin!(api::rbac::v1::ClusterRoleBinding, "clusterrolebinding", &[], &[]),
    builtin!(api::discovery::v1::EndpointSlice, "endpointslice", &[], &[]),
    builtin!(api::batch::v1::Job, "job", &[], &[("status", "Job", STATUS_VERBS)]),
    builtin!(api::batch::v1::CronJob, "cronjob", &["cj"], &[("status", "CronJob", STATUS_VERBS)]),
    builtin!(api::apps::v1::ControllerRevision, "controllerrevision", &[], &[]),
    builtin!(api::autoscaling::v2::HorizontalPodAutoscaler, "horizontalpodautoscaler", &["hpa"], &[("status", "HorizontalPodAutoscaler", STATUS_VERBS)]),
    builtin!(api::networking::v1::Ingress, "ingress", &["ing"], &[("status", "Ingress", STATUS_VERBS)]),
    builtin!(api::networking::v1::IngressClass, "ingressclass", &[], &[]),
    builtin!(api::networking::v1::NetworkPolicy, "networkpolicy", &["netpol"], &[]),
    builtin!(api::networking::v1::IPAddress, "ipaddress", &["ip"], &[]),
    builtin!(api::networking::v1::ServiceCIDR, "servicecidr", &[], &[("status", "ServiceCIDR", STATUS_VERBS)]),
    builtin!(api::node::v1::RuntimeClass, "runtimeclass", &[], &[]),
    builtin!(api::admissionregistration::v1::MutatingWebhookConfiguration, "mutatingwebhookconfiguration", &[], &[]),
    builtin!(api::admissionregistration::v1::ValidatingWebhookConfiguration, "validatingwebhookconfiguration", &[], &[]),
    builtin!(api::admissionregistration::v1::ValidatingAdmissionPolicy, "validatingadmissionpolicy", &[], &[("status", "ValidatingAdmissionPolicy", STATUS_VERBS)]),
    builtin!(api::admissionregistration::v1::ValidatingAdmissionPolicyBinding, "validatingadmissionpolicybinding", &[], &[]),
    builtin!(api::admissionregistration::v1::MutatingAdmissionPolicy, "mutatingadmissionpolicy", &[], &[]),
    builtin!(api::admissionregistration::v1::MutatingAdmissionPolicyBinding, "mutatingadmissionpolicybinding", &[], &[]),
    builtin!(api::certificates::v1::CertificateSigningRequest, "certificatesigningrequest", &["csr"], &[("approval", "CertificateSigningRequest", STATUS_VERBS), ("status", "CertificateSigningRequest", STATUS_VERBS)]),
    builtin!(api::certificates::v1::ClusterTrustBundle, "clustertrustbundle", &[], &[]),
    builtin!(api::flowcontrol::v1::FlowSchema, "flowschema", &[], &[("status", "FlowSchema", STATUS_VERBS)]),
    builtin!(api::flowcontrol::v1::PriorityLevelConfiguration, "prioritylevelconfiguration", &[], &[("status", "PriorityLevelConfiguration", STATUS_VERBS)]),
    builtin!(api::storage::v1::VolumeAttributesClass, "volumeattributesclass", &["vac"], &[]),
    builtin!(api::resource::v1::DeviceTaintRule, "devicetaintrule", &[], &[("status", "DeviceTaintRule", STATUS_VERBS)]),
    builtin!(k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService, "apiservice", &[], &[("status", "APIService", STATUS_VERBS)]),
];

/// Verbs of every main resource.
pub fn verbs() -> &'static [&'static str] {
    ALL_VERBS
}

/// One entry of the [`Registry`].
#[derive(Debug, Clone)]
struct Entry {
    info: Arc<ResourceInfo>,
    /// Served (discovery, routing); a retired custom resource keeps its
    /// slot (and id) so that a CRD created again reuses it.
    served: bool,
    /// The id whose store holds the objects (itself; for another version
    /// of a custom resource, the version that stores them; for core/v1
    /// Events, events.k8s.io/v1's).
    storage: ResId,
}

/// The resources a local cluster serves: the built-in table, then the
/// versions of the custom resources its CRDs define, added and retired
/// at run time. Ids are stable: a built-in's id is its index in
/// [`RESOURCES`]; a custom resource keeps its id while the cluster lives.
#[derive(Debug)]
pub struct Registry {
    entries: RwLock<Vec<Entry>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// The built-in resources, without admission rules.
    pub fn new() -> Self {
        Self::with_admission(|_| Admission::NONE)
    }

    /// The built-in resources, each with the admission rules `rules`
    /// gives its id (the store passes `admission::rules`).
    pub fn with_admission(rules: fn(ResId) -> Admission) -> Self {
        // core/v1 Events are a view of the events.k8s.io/v1 store (see
        // `eventview`).
        let storage = |i| if i == EVENTS { EVENTS_V1 } else { i };
        let entries = RESOURCES
            .iter()
            .enumerate()
            .map(|(i, r)| Entry { info: Arc::new(ResourceInfo { admission: rules(i), ..r.clone() }), served: true, storage: storage(i) })
            .collect();
        Registry { entries: RwLock::new(entries) }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Entry>> {
        match self.entries.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Entry>> {
        match self.entries.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Number of ids handed out (served or not).
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Never empty (the built-ins); for clippy.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// The description of an id (served or retired). Ids come from this
    /// registry, so a miss falls back to the first built-in rather than panic.
    pub fn info(&self, r: ResId) -> Arc<ResourceInfo> {
        let g = self.read();
        match g.get(r) {
            Some(e) => e.info.clone(),
            None => Arc::new(RESOURCES[0].clone()),
        }
    }

    /// The id whose store holds the objects of `r`.
    pub fn storage(&self, r: ResId) -> ResId {
        self.read().get(r).map_or(r, |e| e.storage)
    }

    /// A served resource by group, version and plural.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<ResId> {
        self.read().iter().position(|e| e.served && e.info.group == group && e.info.version == version && e.info.plural == plural)
    }

    /// Every served resource, by id.
    pub fn served(&self) -> Vec<(ResId, Arc<ResourceInfo>)> {
        self.read().iter().enumerate().filter(|(_, e)| e.served).map(|(i, e)| (i, e.info.clone())).collect()
    }

    /// Every id with its description (served or not), for walks over all stores.
    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        self.read().iter().map(|e| e.info.clone()).collect()
    }

    /// The ids of the custom resources defined by CRD `crd` (served or not).
    pub fn of_crd(&self, crd: &str) -> Vec<ResId> {
        self.read()
            .iter()
            .enumerate()
            .filter(|(_, e)| e.info.custom.as_ref().is_some_and(|c| c.crd == crd))
            .map(|(i, _)| i)
            .collect()
    }

    /// Serve the versions of one CRD (in its order, the storage version
    /// `storage_version`): existing slots for the same group, version and
    /// plural are reused, versions no longer listed are retired. Returns
    /// every id now used by the CRD and how many new ids were handed out
    /// (the caller adds that many stores).
    pub fn define(&self, crd: &str, versions: Vec<ResourceInfo>, storage_version: &str) -> (Vec<ResId>, usize) {
        let mut g = self.write();
        let before = g.len();
        let mut ids = Vec::new();
        for info in versions {
            let slot = g.iter().position(|e| {
                e.info.custom.as_ref().is_some_and(|c| c.crd == crd) && e.info.version == info.version
            });
            let entry = Entry { info: Arc::new(info), served: true, storage: 0 };
            let id = match slot {
                Some(i) => {
                    g[i] = Entry { storage: g[i].storage, ..entry };
                    i
                }
                None => {
                    g.push(entry);
                    g.len() - 1
                }
            };
            ids.push(id);
        }
        // One store holds the objects: the one already holding them, else
        // the storage version's.
        let existing = g
            .iter()
            .enumerate()
            .find(|(i, e)| e.info.custom.as_ref().is_some_and(|c| c.crd == crd) && e.storage == *i && *i < before)
            .map(|(i, _)| i);
        let storage = existing
            .or_else(|| ids.iter().copied().find(|i| g[*i].info.version == storage_version))
            .or_else(|| ids.first().copied())
            .unwrap_or(0);
        for (i, e) in g.iter_mut().enumerate() {
            if e.info.custom.as_ref().is_some_and(|c| c.crd == crd) {
                e.storage = storage;
                if !ids.contains(&i) {
                    e.served = false;
                }
            }
        }
        let added = g.len() - before;
        (ids, added)
    }

    /// Stop serving every version of CRD `crd`.
    pub fn retire(&self, crd: &str) {
        for e in self.write().iter_mut() {
            if e.info.custom.as_ref().is_some_and(|c| c.crd == crd) {
                e.served = false;
            }
        }
    }
}

/// Leak a string once per distinct value: the descriptions of custom
/// resources use `&'static str` like the built-ins, and a cluster sees few
/// distinct names (the leak is bounded by them, not by CRD updates).
pub fn intern(s: &str) -> &'static str {
    static POOL: Mutex<Option<HashMap<String, &'static str>>> = Mutex::new(None);
    let mut g = match POOL.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let pool = g.get_or_insert_with(HashMap::new);
    if let Some(s) = pool.get(s) {
        return s;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    pool.insert(s.to_string(), leaked);
    leaked
}

/// [`intern`] for a list of strings.
pub fn intern_list(items: &[String]) -> &'static [&'static str] {
    type Pool = HashMap<Vec<String>, &'static [&'static str]>;
    static POOL: Mutex<Option<Pool>> = Mutex::new(None);
    let mut g = match POOL.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let pool = g.get_or_insert_with(HashMap::new);
    if let Some(s) = pool.get(items) {
        return s;
    }
    let v: Vec<&'static str> = items.iter().map(|s| intern(s)).collect();
    let leaked: &'static [&'static str] = Box::leak(v.into_boxed_slice());
    pool.insert(items.to_vec(), leaked);
    leaked
}

/// The subresource table of a custom resource of kind `kind` (status only
/// when its CRD declares it; `scale` is not served).
pub fn custom_subresources(kind: &str, status: bool, scale: bool) -> &'static [(&'static str, &'static str, &'static [&'static str])] {
    type Subs = &'static [(&'static str, &'static str, &'static [&'static str])];
    /// (kind, status, scale).
    type Key = (String, bool, bool);
    static POOL: Mutex<Option<HashMap<Key, Subs>>> = Mutex::new(None);
    if !status && !scale {
        return &[];
    }
    let mut g = match POOL.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let pool = g.get_or_insert_with(HashMap::new);
    let key = (kind.to_string(), status, scale);
    if let Some(s) = pool.get(&key) {
        return s;
    }
    let mut subs = Vec::new();
    if status {
        subs.push(("status", intern(kind), STATUS_VERBS));
    }
    if scale {
        subs.push(("scale", "Scale", STATUS_VERBS));
    }
    let leaked: Subs = Box::leak(subs.into_boxed_slice());
    pool.insert(key, leaked);
    leaked
}

/// Kubernetes' version priority (`v1` > `v1beta2` > `v1beta1` > `v1alpha1` >
/// anything else, which sorts by name): a key that sorts the preferred first.
pub fn version_priority(v: &str) -> (u8, std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, String) {
    use std::cmp::Reverse;
    let parse = || -> Option<(u8, u64, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: u64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((0, major, 0));
        }
        let (kind, n) = if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (2, n)
        } else {
            return None;
        };
        let minor: u64 = n.parse().ok()?;
        Some((kind, major, minor))
    };
    match parse() {
        Some((kind, major, minor)) => (kind, Reverse(major), Reverse(minor), String::new()),
        None => (3, Reverse(0), Reverse(0), v.to_string()),
    }
}

/// A custom resource's typed round trip: any JSON object (its CRD's schema
/// is applied by the store).
pub fn norm_custom(v: Value) -> Result<Value, Error> {
    if !v.is_object() {
        return Err(Error::Decode("the body of the request must be a JSON object".into()));
    }
    if v.get("metadata").is_some_and(|m| !m.is_object() && !m.is_null()) {
        return Err(Error::Decode("metadata must be an object".into()));
    }
    Ok(v)
}

/// [`norm_custom`] from bytes.
pub fn norm_custom_slice(b: &[u8]) -> Result<Value, Error> {
    let v: Value = serde_json::from_slice(b).map_err(|e| Error::Decode(e.to_string()))?;
    norm_custom(v)
}

/// Find a resource by group, version and plural.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<ResId> {
    RESOURCES.iter().position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Find the resource serving a k8s-openapi type.
pub fn lookup_type<K: k8s_openapi::Resource>() -> Option<ResId> {
    lookup(K::GROUP, K::VERSION, K::URL_PATH_SEGMENT)
}

/// Check `apiVersion`/`kind` of a body, filling them in if absent.
pub fn check_type(v: &mut Value, api_version: &str, kind: &str) -> Result<(), Error> {
    let Some(map) = v.as_object_mut() else {
        return Err(Error::Decode("body must be a JSON object".into()));
    };
    match map.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("apiVersion".into(), json!(api_version));
        }
        Some(a) if a == api_version => {}
        Some(a) => {
            return Err(Error::WrongType(format!(
                "the API version in the data ({a}) does not match the expected API version ({api_version})"
            )));
        }
    }
    match map.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("kind".into(), json!(kind));
        }
        Some(k) if k == kind => {}
        Some(k) => {
            return Err(Error::WrongType(format!("the kind in the data ({k}) does not match the expected kind ({kind})")));
        }
    }
    Ok(())
}

/// Validate the name of an object of `info`'s kind: RBAC objects' names
/// are path segments (upstream's `ValidatePathSegmentName`: `system:...`
/// is fine), other kinds' DNS-1123 subdomains ([`validate_name`]).
pub fn validate_object_name(info: &ResourceInfo, name: &str) -> Option<String> {
    if info.group != "rbac.authorization.k8s.io" {
        return validate_name(name);
    }
    let why = if name == "." || name == ".." {
        format!("may not be '{name}'")
    } else if let Some(c) = name.chars().find(|c| *c == '/' || *c == '%') {
        format!("may not contain '{c}'")
    } else {
        return None;
    };
    Some(format!("metadata.name: Invalid value: \"{name}\": {why}"))
}

/// Validate a DNS-1123 subdomain name; returns a message if invalid.
pub fn validate_name(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        None
    } else {
        Some(format!(
            "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ))
    }
}

fn quantity_present<'a>(c: &'a Value, which: &str, res: &str) -> Option<&'a str> {
    c.get("resources")?.get(which)?.get(res)?.as_str()
}

/// Compute the pod QoS class from its containers' requests and limits.
pub fn qos_class(pod: &Value) -> &'static str {
    let spec = pod.get("spec");
    let containers = ["containers", "initContainers"].into_iter().filter_map(|key| spec?.get(key)?.as_array()).flatten();
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        for r in ["cpu", "memory"] {
            let req = quantity_present(c, "requests", r);
            let lim = quantity_present(c, "limits", r);
            if req.is_some() || lim.is_some() {
                any = true;
            }
            match (req, lim) {
                (_, None) => guaranteed = false,
                (Some(a), Some(b)) if a != b => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Parse a duration like `5s`, `100ms`, `1m`, `1.5s`, `2h`.
pub fn parse_duration(s: &str) -> Option<std::time::Duration> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let f: f64 = num.trim().parse().ok()?;
    if !f.is_finite() || f < 0.0 {
        return None;
    }
    Some(std::time::Duration::from_secs_f64(f * mult))
}

/// Resolve an IntOrString value (`3` or `"30%"`) against a total, rounding up.
pub fn int_or_percent(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            if let Some(p) = s.strip_suffix('%') {
                let p: i64 = p.trim().parse().ok()?;
                Some((p * total + 99) / 100)
            } else {
                s.trim().parse().ok()
            }
        }
        _ => None,
    }
}

/// Is the pod counted as healthy by the disruption controller?
pub fn pod_healthy(pod: &Value) -> bool {
    if pod.at("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) {
        return false;
    }
    let ready = pod
        .at("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready") && c.get("status").and_then(Value::as_str) == Some("True")
            })
        });
    ready && pod.at("/status/phase").and_then(Value::as_str) == Some("Running")
}

/// Compute a PDB's status from the pods it selects. Returns the new
/// status JSON (expectedPods, currentHealthy, desiredHealthy,
/// disruptionsAllowed, observedGeneration, conditions).
pub fn pdb_status(pdb: &Value, pods: &[&Value], now: &str) -> Value {
    let selector = pdb.at("/spec/selector");
    let sel = selector.map(super::selector::LabelSelector::from_structured);
    let matching: Vec<&&Value> = match sel {
        Some(Ok(s)) => pods
            .iter()
            .filter(|p| s.matches_object(p))
            .filter(|p| {
                !matches!(p.at("/status/phase").and_then(Value::as_str), Some("Succeeded") | Some("Failed"))
            })
            .collect(),
        _ => Vec::new(),
    };
    let expected = matching.len() as i64;
    let healthy = matching.iter().filter(|p| pod_healthy(p)).count() as i64;
    let desired = if let Some(m) = pdb.at("/spec/minAvailable") {
        int_or_percent(m, expected).unwrap_or(0)
    } else if let Some(m) = pdb.at("/spec/maxUnavailable") {
        expected - int_or_percent(m, expected).unwrap_or(0)
    } else {
        0
    }
    .max(0);
    let allowed = (healthy - desired).max(0);
    let generation = pdb.at("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
    let old_cond_time = pdb
        .at("/status/conditions/0/lastTransitionTime")
        .and_then(Value::as_str)
        .unwrap_or(now)
        .to_string();
    let old_allowed = pdb.at("/status/conditions/0/status").and_then(Value::as_str);
    let status_str = if allowed > 0 { "True" } else { "False" };
    let ltt = if old_allowed == Some(status_str) { old_cond_time } else { now.to_string() };
    json!({
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": allowed,
        "observedGeneration": generation,
        "conditions": [{
            "type": "DisruptionAllowed",
            "status": status_str,
            "reason": if allowed > 0 { "SufficientPods" } else { "InsufficientPods" },
            "message": "",
            "lastTransitionTime": ltt,
            "observedGeneration": generation,
        }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_constants_name_the_dra_kinds() {
        for (r, kind) in [(RESOURCECLAIMS, "ResourceClaim"), (RESOURCECLAIMTEMPLATES, "ResourceClaimTemplate"), (DEVICECLASSES, "DeviceClass"), (RESOURCESLICES, "ResourceSlice")] {
            assert_eq!((RESOURCES[r].group, RESOURCES[r].kind), ("resource.k8s.io", kind));
        }
    }

    #[test]
    fn events_k8s_io_selects_all_but_source() {
        assert_eq!(EVENTS_V1_SELECTABLE.len() + 1, EVENTS_SELECTABLE.len());
        assert!(!EVENTS_V1_SELECTABLE.contains(&"source") && EVENTS_SELECTABLE.contains(&"source"));
        assert!(EVENTS_V1_SELECTABLE.iter().all(|f| EVENTS_SELECTABLE.contains(f)));
    }

    #[test]
    fn resource_ids_match_the_table() {
        for (id, plural) in [(JOBS, "jobs"), (REPLICASETS, "replicasets"), (DEPLOYMENTS, "deployments"), (SERVICE_ACCOUNTS, "serviceaccounts"), (SECRETS, "secrets"), (CONFIGMAPS, "configmaps"), (PODGROUPS, "podgroups"), (WORKLOADS, "workloads"), (CRDS, "customresourcedefinitions"), (NAMESPACES, "namespaces"), (NODES, "nodes"), (PODS, "pods"), (PDBS, "poddisruptionbudgets"), (PVS, "persistentvolumes"),
            (PVCS, "persistentvolumeclaims"), (STORAGE_CLASSES, "storageclasses"), (CSINODES, "csinodes"), (CSIDRIVERS, "csidrivers")] {
            assert_eq!(RESOURCES[id].plural, plural);
        }
    }

    #[test]
    fn every_served_resource_is_named_once() {
        let mut seen = std::collections::HashSet::new();
        for r in RESOURCES {
            assert!(seen.insert((r.group, r.version, r.plural)), "{}/{} {} twice", r.group, r.version, r.plural);
        }
    }

    #[test]
    fn qos() {
        let be = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(qos_class(&be), "BestEffort");
        let g = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}});
        assert_eq!(qos_class(&b), "Burstable");
    }

    #[test]
    fn durations_and_percent() {
        assert_eq!(parse_duration("5s"), Some(std::time::Duration::from_secs(5)));
        assert_eq!(parse_duration("100ms"), Some(std::time::Duration::from_millis(100)));
        assert_eq!(parse_duration("x"), None);
        assert_eq!(int_or_percent(&json!("50%"), 3), Some(2));
        assert_eq!(int_or_percent(&json!(2), 3), Some(2));
    }

    #[test]
    fn pdb_maths() {
        let pod = |ready: bool| {
            json!({"metadata": {"labels": {"app": "a"}}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
        };
        let pods = [pod(true), pod(true), pod(false)];
        let refs: Vec<&Value> = pods.iter().collect();
        let pdb = json!({"spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "a"}}}});
        let st = pdb_status(&pdb, &refs, "t");
        assert_eq!(st["disruptionsAllowed"], 0);
        assert_eq!(st["expectedPods"], 3);
        let pdb = json!({"spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "a"}}}});
        let st = pdb_status(&pdb, &refs, "t");
        assert_eq!(st["desiredHealthy"], 1);
        assert_eq!(st["disruptionsAllowed"], 1);
    }
}
