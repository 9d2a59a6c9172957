//! The table of resources the local cluster serves, and per-kind helpers
//! (typed normalization through k8s-openapi, defaults, QoS, PDB maths).

use k8s_openapi::api;
use serde::{Serialize, de::DeserializeOwned};
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
}

/// Index of a resource in [`RESOURCES`].
pub type ResId = usize;

/// Describes one served resource.
#[derive(Debug)]
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

/// The served resources (indexed by the constants above; the rest are
/// stored and served without any controller behind them).
pub static RESOURCES: &[ResourceInfo] = &[
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        subresources: &[("status", "Namespace", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &["status.phase"],
        normalize: norm::<api::core::v1::Namespace>,
        normalize_slice: norm_slice::<api::core::v1::Namespace>,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        subresources: &[("status", "Node", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &["spec.unschedulable"],
        normalize: norm::<api::core::v1::Node>,
        normalize_slice: norm_slice::<api::core::v1::Node>,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        subresources: &[
            ("binding", "Binding", &["create"]),
            ("eviction", "Eviction", &["create"]),
            ("status", "Pod", STATUS_VERBS),
        ],
        has_status: true,
        create_on_update: false,
        fields: &[
            "spec.nodeName",
            "spec.schedulerName",
            "spec.restartPolicy",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        normalize: norm::<api::core::v1::Pod>,
        normalize_slice: norm_slice::<api::core::v1::Pod>,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        subresources: &[],
        has_status: false,
        create_on_update: true,
        fields: &[
            "involvedObject.kind",
            "involvedObject.name",
            "involvedObject.namespace",
            "involvedObject.uid",
            "reason",
            "type",
            "source",
        ],
        normalize: norm::<api::core::v1::Event>,
        normalize_slice: norm_slice::<api::core::v1::Event>,
    },
    ResourceInfo {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        subresources: &[],
        has_status: false,
        create_on_update: true,
        fields: &["regarding.kind", "regarding.name", "regarding.namespace", "reason", "type", "reportingController"],
        normalize: norm::<api::events::v1::Event>,
        normalize_slice: norm_slice::<api::events::v1::Event>,
    },
    ResourceInfo {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        subresources: &[],
        has_status: false,
        create_on_update: true,
        fields: &[],
        normalize: norm::<api::coordination::v1::Lease>,
        normalize_slice: norm_slice::<api::coordination::v1::Lease>,
    },
    ResourceInfo {
        group: "scheduling.k8s.io",
        version: "v1",
        plural: "priorityclasses",
        singular: "priorityclass",
        kind: "PriorityClass",
        namespaced: false,
        short_names: &["pc"],
        subresources: &[],
        has_status: false,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::scheduling::v1::PriorityClass>,
        normalize_slice: norm_slice::<api::scheduling::v1::PriorityClass>,
    },
    ResourceInfo {
        group: "policy",
        version: "v1",
        plural: "poddisruptionbudgets",
        singular: "poddisruptionbudget",
        kind: "PodDisruptionBudget",
        namespaced: true,
        short_names: &["pdb"],
        subresources: &[("status", "PodDisruptionBudget", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::policy::v1::PodDisruptionBudget>,
        normalize_slice: norm_slice::<api::policy::v1::PodDisruptionBudget>,
    },
    // Stored only (no controllers): objects a scheduler's informers read.
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        subresources: &[("status", "Service", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::core::v1::Service>,
        normalize_slice: norm_slice::<api::core::v1::Service>,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "persistentvolumes",
        singular: "persistentvolume",
        kind: "PersistentVolume",
        namespaced: false,
        short_names: &["pv"],
        subresources: &[("status", "PersistentVolume", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::core::v1::PersistentVolume>,
        normalize_slice: norm_slice::<api::core::v1::PersistentVolume>,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        short_names: &["pvc"],
        subresources: &[("status", "PersistentVolumeClaim", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::core::v1::PersistentVolumeClaim>,
        normalize_slice: norm_slice::<api::core::v1::PersistentVolumeClaim>,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "replicationcontrollers",
        singular: "replicationcontroller",
        kind: "ReplicationController",
        namespaced: true,
        short_names: &["rc"],
        subresources: &[("status", "ReplicationController", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::core::v1::ReplicationController>,
        normalize_slice: norm_slice::<api::core::v1::ReplicationController>,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        subresources: &[],
        has_status: false,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::core::v1::ConfigMap>,
        normalize_slice: norm_slice::<api::core::v1::ConfigMap>,
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        plural: "replicasets",
        singular: "replicaset",
        kind: "ReplicaSet",
        namespaced: true,
        short_names: &["rs"],
        subresources: &[("status", "ReplicaSet", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::apps::v1::ReplicaSet>,
        normalize_slice: norm_slice::<api::apps::v1::ReplicaSet>,
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        plural: "statefulsets",
        singular: "statefulset",
        kind: "StatefulSet",
        namespaced: true,
        short_names: &["sts"],
        subresources: &[("status", "StatefulSet", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::apps::v1::StatefulSet>,
        normalize_slice: norm_slice::<api::apps::v1::StatefulSet>,
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        short_names: &["deploy"],
        subresources: &[("status", "Deployment", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::apps::v1::Deployment>,
        normalize_slice: norm_slice::<api::apps::v1::Deployment>,
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        plural: "daemonsets",
        singular: "daemonset",
        kind: "DaemonSet",
        namespaced: true,
        short_names: &["ds"],
        subresources: &[("status", "DaemonSet", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::apps::v1::DaemonSet>,
        normalize_slice: norm_slice::<api::apps::v1::DaemonSet>,
    },
    ResourceInfo {
        group: "storage.k8s.io",
        version: "v1",
        plural: "storageclasses",
        singular: "storageclass",
        kind: "StorageClass",
        namespaced: false,
        short_names: &["sc"],
        subresources: &[],
        has_status: false,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::storage::v1::StorageClass>,
        normalize_slice: norm_slice::<api::storage::v1::StorageClass>,
    },
    ResourceInfo {
        group: "storage.k8s.io",
        version: "v1",
        plural: "csinodes",
        singular: "csinode",
        kind: "CSINode",
        namespaced: false,
        short_names: &[],
        subresources: &[],
        has_status: false,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::storage::v1::CSINode>,
        normalize_slice: norm_slice::<api::storage::v1::CSINode>,
    },
    ResourceInfo {
        group: "storage.k8s.io",
        version: "v1",
        plural: "csidrivers",
        singular: "csidriver",
        kind: "CSIDriver",
        namespaced: false,
        short_names: &[],
        subresources: &[],
        has_status: false,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::storage::v1::CSIDriver>,
        normalize_slice: norm_slice::<api::storage::v1::CSIDriver>,
    },
    ResourceInfo {
        group: "storage.k8s.io",
        version: "v1",
        plural: "csistoragecapacities",
        singular: "csistoragecapacity",
        kind: "CSIStorageCapacity",
        namespaced: true,
        short_names: &[],
        subresources: &[],
        has_status: false,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::storage::v1::CSIStorageCapacity>,
        normalize_slice: norm_slice::<api::storage::v1::CSIStorageCapacity>,
    },
    ResourceInfo {
        group: "storage.k8s.io",
        version: "v1",
        plural: "volumeattachments",
        singular: "volumeattachment",
        kind: "VolumeAttachment",
        namespaced: false,
        short_names: &[],
        subresources: &[("status", "VolumeAttachment", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::storage::v1::VolumeAttachment>,
        normalize_slice: norm_slice::<api::storage::v1::VolumeAttachment>,
    },
    ResourceInfo {
        group: "resource.k8s.io",
        version: "v1",
        plural: "resourceclaims",
        singular: "resourceclaim",
        kind: "ResourceClaim",
        namespaced: true,
        short_names: &[],
        subresources: &[("status", "ResourceClaim", STATUS_VERBS)],
        has_status: true,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::resource::v1::ResourceClaim>,
        normalize_slice: norm_slice::<api::resource::v1::ResourceClaim>,
    },
    ResourceInfo {
        group: "resource.k8s.io",
        version: "v1",
        plural: "resourceclaimtemplates",
        singular: "resourceclaimtemplate",
        kind: "ResourceClaimTemplate",
        namespaced: true,
        short_names: &[],
        subresources: &[],
        has_status: false,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::resource::v1::ResourceClaimTemplate>,
        normalize_slice: norm_slice::<api::resource::v1::ResourceClaimTemplate>,
    },
    ResourceInfo {
        group: "resource.k8s.io",
        version: "v1",
        plural: "deviceclasses",
        singular: "deviceclass",
        kind: "DeviceClass",
        namespaced: false,
        short_names: &[],
        subresources: &[],
        has_status: false,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::resource::v1::DeviceClass>,
        normalize_slice: norm_slice::<api::resource::v1::DeviceClass>,
    },
    ResourceInfo {
        group: "resource.k8s.io",
        version: "v1",
        plural: "resourceslices",
        singular: "resourceslice",
        kind: "ResourceSlice",
        namespaced: false,
        short_names: &[],
        subresources: &[],
        has_status: false,
        create_on_update: false,
        fields: &[],
        normalize: norm::<api::resource::v1::ResourceSlice>,
        normalize_slice: norm_slice::<api::resource::v1::ResourceSlice>,
    },
];

/// The highest priority a user-defined PriorityClass may have (upstream's
/// `HighestUserDefinablePriority`).
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;

/// The system priority classes: (name, value), neither a global default.
pub const SYSTEM_PRIORITY_CLASSES: &[(&str, i64)] = &[("system-node-critical", 2_000_001_000), ("system-cluster-critical", 2_000_000_000)];

/// Validate a PriorityClass as upstream's `ValidatePriorityClass` does;
/// returns the field error (`field: Forbidden: why`), if any.
pub fn validate_priority_class(name: &str, value: i64, global_default: bool) -> Option<String> {
    if name.starts_with("system-") {
        let why = match SYSTEM_PRIORITY_CLASSES.iter().find(|(n, _)| *n == name) {
            None => format!("{name} is not a known system priority class"),
            Some((n, v)) if *v != value => format!("value of {n} PriorityClass must be {v}"),
            Some((n, _)) if global_default => format!("globalDefault of {n} PriorityClass must be false"),
            Some(_) => return None,
        };
        return Some(format!("metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: {why}"));
    }
    if value > HIGHEST_USER_DEFINABLE_PRIORITY {
        return Some(format!("value: Forbidden: maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"));
    }
    None
}

/// Verbs of every main resource.
pub fn verbs() -> &'static [&'static str] {
    ALL_VERBS
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

fn quantity_present(c: &Value, which: &str, res: &str) -> Option<String> {
    c.pointer(&format!("/resources/{which}/{res}")).and_then(Value::as_str).map(str::to_string)
}

/// Compute the pod QoS class from its containers' requests and limits.
pub fn qos_class(pod: &Value) -> &'static str {
    let mut containers: Vec<&Value> = Vec::new();
    for key in ["containers", "initContainers"] {
        if let Some(a) = pod.pointer(&format!("/spec/{key}")).and_then(Value::as_array) {
            containers.extend(a.iter());
        }
    }
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        for r in ["cpu", "memory"] {
            let req = quantity_present(c, "requests", r);
            let lim = quantity_present(c, "limits", r);
            if req.is_some() || lim.is_some() {
                any = true;
            }
            match (&req, &lim) {
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
    if pod.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) {
        return false;
    }
    let ready = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready") && c.get("status").and_then(Value::as_str) == Some("True")
            })
        });
    ready && pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
}

/// Compute a PDB's status from the pods it selects. Returns the new
/// status JSON (expectedPods, currentHealthy, desiredHealthy,
/// disruptionsAllowed, observedGeneration, conditions).
pub fn pdb_status(pdb: &Value, pods: &[&Value], now: &str) -> Value {
    let selector = pdb.pointer("/spec/selector");
    let sel = selector.map(super::selector::LabelSelector::from_structured);
    let matching: Vec<&&Value> = match sel {
        Some(Ok(s)) => pods
            .iter()
            .filter(|p| s.matches_object(p))
            .filter(|p| {
                !matches!(p.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded") | Some("Failed"))
            })
            .collect(),
        _ => Vec::new(),
    };
    let expected = matching.len() as i64;
    let healthy = matching.iter().filter(|p| pod_healthy(p)).count() as i64;
    let desired = if let Some(m) = pdb.pointer("/spec/minAvailable") {
        int_or_percent(m, expected).unwrap_or(0)
    } else if let Some(m) = pdb.pointer("/spec/maxUnavailable") {
        expected - int_or_percent(m, expected).unwrap_or(0)
    } else {
        0
    }
    .max(0);
    let allowed = (healthy - desired).max(0);
    let generation = pdb.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
    let old_cond_time = pdb
        .pointer("/status/conditions/0/lastTransitionTime")
        .and_then(Value::as_str)
        .unwrap_or(now)
        .to_string();
    let old_allowed = pdb.pointer("/status/conditions/0/status").and_then(Value::as_str);
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
    fn resource_ids_match_the_table() {
        for (id, plural) in [(NAMESPACES, "namespaces"), (NODES, "nodes"), (PODS, "pods"), (PDBS, "poddisruptionbudgets"), (PVS, "persistentvolumes"),
            (PVCS, "persistentvolumeclaims"), (STORAGE_CLASSES, "storageclasses"), (CSINODES, "csinodes"), (CSIDRIVERS, "csidrivers")] {
            assert_eq!(RESOURCES[id].plural, plural);
        }
    }

    #[test]
    fn priority_class_validation() {
        assert_eq!(validate_priority_class("high", 1_000_000_000, false), None);
        assert_eq!(
            validate_priority_class("high", 1_000_000_001, false).as_deref(),
            Some("value: Forbidden: maximum allowed value of a user defined priority is 1000000000")
        );
        assert_eq!(validate_priority_class("system-node-critical", 2_000_001_000, false), None);
        assert!(validate_priority_class("system-foo", 1, false).is_some_and(|m| m.ends_with("system-foo is not a known system priority class")));
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
