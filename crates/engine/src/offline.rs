//! The offline engine: a cluster loaded from a YAML dump, the profiles'
//! frameworks, and the `explain` and `simulate` operations over them. The
//! daemon and the benchmark drive the same frameworks over the same snapshot.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use crate::cache::groups::GroupPolicy;
use crate::cache::{Pdb, Snapshot};
use crate::framework::group::{schedule_group, SnapshotHost};
use berth_model::pod::GroupApi;
use crate::config::Config;
use crate::framework::{Assumed, CycleOptions, CycleOutcome, CycleState, DeviceChoice, Framework, QueuedPod, ScheduledOne};
use berth_model::pod::SpecError;
use berth_model::{NodeSpec, PodInfo};

/// Why a cluster dump could not be used.
#[derive(Debug, Error)]
pub enum Error {
    /// The file could not be read.
    #[error("reading {path}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Not valid YAML.
    #[error("{path}: {message}")]
    Yaml {
        /// The file.
        path: String,
        /// The parser's message, with the line.
        message: String,
    },
    /// An object that cannot be read.
    #[error("{path}: document {doc} ({what}): {message}")]
    Object {
        /// The file.
        path: String,
        /// 1-based document number.
        doc: usize,
        /// Kind and name.
        what: String,
        /// The field at fault and why.
        message: String,
    },
    /// The pod named on the command line is not in the cluster at all.
    #[error("pod {0} not found in the cluster (pending pods: {1})")]
    NotFound(String, String),
    /// The pod is in the cluster but not waiting for one of the profiles.
    #[error("pod {pod} is not pending: {why}")]
    NotPending {
        /// "ns/name".
        pod: String,
        /// Why (bound to a node, being deleted, another scheduler's).
        why: String,
    },
}

/// At most this many pod names in one message; the rest are counted.
const NAMES_SHOWN: usize = 20;

/// `names` joined with ", ", at most [`NAMES_SHOWN`] of them, then "and N more".
pub fn name_list(names: &[String]) -> String {
    if names.is_empty() {
        return "none".into();
    }
    let mut s = names.iter().take(NAMES_SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > NAMES_SHOWN {
        s += &format!(" and {} more", names.len() - NAMES_SHOWN);
    }
    s
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// A cluster read from a dump: bound pods in the snapshot, pending pods aside.
#[derive(Debug, Default)]
pub struct Cluster {
    /// Nodes, bound pods, namespaces, PDBs.
    pub snapshot: Snapshot,
    /// Pods without spec.nodeName, in file order.
    pub pending: Vec<Arc<PodInfo>>,
    /// Warnings about objects that were skipped.
    pub warnings: Vec<String>,
    /// Uids of unbound pods without spec.schedulerName: they belong to the
    /// first profile (FORMAT.md), which only the engine knows.
    pub unnamed_scheduler: std::collections::HashSet<String>,
}

/// upstream's built-in PriorityClasses, which every cluster has.
const SYSTEM_PRIORITY_CLASSES: &[(&str, i32)] = &[("system-node-critical", 2_000_001_000), ("system-cluster-critical", 2_000_000_000)];

/// Quantities may be written as YAML numbers; the API types want strings.
fn quantities_to_strings(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                if matches!(k.as_str(), "requests" | "limits" | "capacity" | "allocatable" | "overhead")
                    && let Value::Object(q) = child {
                        for qv in q.values_mut() {
                            if let Value::Number(n) = qv {
                                *qv = Value::String(n.to_string());
                            }
                        }
                    }
                quantities_to_strings(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(quantities_to_strings),
        _ => {}
    }
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> std::result::Result<T, String> {
    serde_path_to_error::deserialize(v).map_err(|e| format!("{}: {}", e.path(), e.inner()))
}

fn meta_name(v: &Value) -> (String, String) {
    let m = v.get("metadata");
    let s = |k: &str| m.and_then(|m| m.get(k)).and_then(Value::as_str).unwrap_or("").to_string();
    let ns = s("namespace");
    (if ns.is_empty() { "default".into() } else { ns }, s("name"))
}

impl Cluster {
    /// Loads a multi-document YAML dump (Nodes, Pods, PriorityClasses,
    /// PodDisruptionBudgets, Namespaces, Services, ReplicationControllers,
    /// ReplicaSets, StatefulSets, or `List`s of them).
    pub fn load(path: &str) -> Result<Cluster> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.into(), source })?;
        Self::parse(&text, path)
    }

    /// Parses dump text; `path` is used in messages.
    pub fn parse(text: &str, path: &str) -> Result<Cluster> {
        // A real cluster dump is large: lift the parser's default budget (1,024
        // documents, 250k nodes), which is meant for configuration files.
        let options = serde_saphyr::options! {
            budget: serde_saphyr::budget! {
                max_documents: 10_000_000,
                max_events: 500_000_000,
                max_nodes: 200_000_000,
            },
        };
        let docs: Vec<Value> = serde_saphyr::from_multiple_with_options(text, options).map_err(|e| Error::Yaml { path: path.into(), message: e.to_string().replace("<input>", path) })?;
        Self::from_documents(docs, path)
    }

    /// Builds the cluster from documents already parsed (a dump's documents,
    /// or the objects listed from an API server, each with apiVersion and
    /// kind): the same objects as [`Cluster::parse`] builds from their YAML.
    /// `path` names the source in messages; document numbers are 1-based
    /// positions in `docs`.
    pub fn from_documents(docs: Vec<Value>, path: &str) -> Result<Cluster> {
        let mut objects = Vec::new();
        for (i, d) in docs.into_iter().enumerate() {
            match d {
                Value::Null => {}
                Value::Object(ref m) if m.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List")) => {
                    for item in m.get("items").and_then(Value::as_array).cloned().unwrap_or_default() {
                        objects.push((i + 1, item));
                    }
                }
                other => objects.push((i + 1, other)),
            }
        }
        let mut c = Cluster::default();
        let mut classes: HashMap<String, (i32, Option<String>)> = SYSTEM_PRIORITY_CLASSES.iter().map(|(n, v)| ((*n).to_string(), (*v, None))).collect();
        let mut global_default: Option<(i32, Option<String>)> = None;
        let mut pods = Vec::new();
        for (doc, mut v) in objects {
            quantities_to_strings(&mut v);
            let kind = v.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
            let (ns, name) = meta_name(&v);
            let err = |message: String| Error::Object { path: path.into(), doc, what: format!("{kind} {name}"), message };
            match kind.as_str() {
                "Node" => {
                    let n: core::Node = typed(v).map_err(err)?;
                    let spec = NodeSpec::from_node(&n);
                    for e in &spec.errors {
                        c.warnings.push(format!("node {}: {e}", spec.name));
                    }
                    c.snapshot.upsert_node(spec);
                }
                "Pod" => pods.push((doc, ns, name, v)),
                "Namespace" => {
                    let n: core::Namespace = typed(v).map_err(err)?;
                    c.snapshot.namespaces.insert(name, n.metadata.labels.unwrap_or_default());
                }
                "PriorityClass" => {
                    let value = v.get("value").and_then(Value::as_i64).unwrap_or(0);
                    let value = i32::try_from(value).map_err(|_| err(format!("value: {value} does not fit in 32 bits")))?;
                    let policy = v.get("preemptionPolicy").and_then(Value::as_str).map(String::from);
                    if v.get("globalDefault").and_then(Value::as_bool).unwrap_or(false) {
                        global_default = Some((value, policy.clone()));
                    }
                    classes.insert(name, (value, policy));
                }
                "PodDisruptionBudget" => {
                    let p: policy::PodDisruptionBudget = typed(v).map_err(err)?;
                    let mut pdb = Pdb::from_api(&p).map_err(err)?;
                    pdb.namespace = ns;
                    c.snapshot.pdbs.push(pdb);
                }
                "Service" => {
                    let o: core::Service = typed(v).map_err(err)?;
                    c.snapshot.workloads.upsert_service(&o);
                }
                "ReplicationController" => {
                    let o: core::ReplicationController = typed(v).map_err(err)?;
                    c.snapshot.workloads.upsert_replication_controller(&o);
                }
                "ReplicaSet" => {
                    let o: apps::ReplicaSet = typed(v).map_err(err)?;
                    if let Err(e) = c.snapshot.workloads.upsert_replica_set(&o) {
                        c.warnings.push(format!("document {doc}: {e} (the selector adds nothing to default spreading)"));
                    }
                }
                "StatefulSet" => {
                    let o: apps::StatefulSet = typed(v).map_err(err)?;
                    if let Err(e) = c.snapshot.workloads.upsert_stateful_set(&o) {
                        c.warnings.push(format!("document {doc}: {e} (the selector adds nothing to default spreading)"));
                    }
                }
                "PodGroup" => {
                    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
                    let (api, g) = if api_version.starts_with("scheduling.x-k8s.io/") {
                        (GroupApi::V1alpha1, GroupPolicy::from_v1alpha1(&ns, &name, &v))
                    } else {
                        let o: k8s_openapi::api::scheduling::v1beta1::PodGroup = typed(v).map_err(err)?;
                        (GroupApi::V1beta1, GroupPolicy::from_v1beta1(&o))
                    };
                    if let Err(e) = &g {
                        c.warnings.push(format!("document {doc}: {e} (its pods stay pending with this reason)"));
                    }
                    c.snapshot.groups.upsert(api, &ns, &name, g);
                }
                // PodGroups are created from a Workload's templates by a
                // controller; pods name the PodGroup, so the Workload adds nothing.
                "Workload" => {}
                "PersistentVolumeClaim" | "PersistentVolume" | "StorageClass" | "CSINode" | "CSIDriver" | "CSIStorageCapacity" => {
                    load_storage(&mut c, &kind, &ns, &name, doc, v);
                }
                "ResourceClaim" | "DeviceClass" | "ResourceSlice" | "DeviceTaintRule" => load_dra(&mut c, &kind, doc, v),
                // The resourceclaim controller's input: the claims it made are read.
                "ResourceClaimTemplate" => {}
                "" => return Err(err("kind: required field is missing".into())),
                other => c.warnings.push(format!("document {doc}: kind {other} ignored")),
            }
        }
        for (doc, ns, name, v) in pods {
            let mut pod: core::Pod = match typed(v) {
                Ok(p) => p,
                Err(m) => {
                    // A pod that cannot be read stays pending with the reason; it must not stop the others.
                    let info = PodInfo {
                        uid: format!("{ns}/{name}"),
                        namespace: ns,
                        name,
                        scheduler_name: crate::config::DEFAULT_SCHEDULER_NAME.into(),
                        errors: vec![SpecError { plugin: "PodSpec", message: format!("document {doc}: {m}") }],
                        ..Default::default()
                    };
                    c.pending.push(Arc::new(info));
                    continue;
                }
            };
            if let Some(spec) = pod.spec.as_mut()
                && spec.priority.is_none() {
                    // Admission rejects a pod naming a PriorityClass that does not exist.
                    let named = spec.priority_class_name.as_ref().filter(|n| !n.is_empty());
                    if let Some(n) = named
                        && !classes.contains_key(n) {
                            return Err(Error::Object {
                                path: path.into(),
                                doc,
                                what: format!("Pod {ns}/{name}"),
                                message: format!("spec.priorityClassName: no PriorityClass named {n:?} in the cluster"),
                            });
                        }
                    let class = named.and_then(|n| classes.get(n)).or(global_default.as_ref());
                    if let Some((value, policy)) = class {
                        spec.priority = Some(*value);
                        if spec.preemption_policy.is_none() {
                            spec.preemption_policy = policy.clone();
                        }
                    }
                }
            let info = PodInfo::from_pod(&pod);
            if info.node_name.is_some() {
                c.snapshot.add_pod(info);
            } else {
                if pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).is_none_or(str::is_empty) {
                    c.unnamed_scheduler.insert(info.uid.clone());
                }
                c.pending.push(info);
            }
        }
        // Pending pods that carry a nomination count on their node, as upstream's nominator does.
        for p in &c.pending {
            if let Some(n) = p.nominated_node.clone() {
                c.snapshot.nominate(p.clone(), &n);
            }
        }
        Ok(c)
    }
}

/// Loads a DRA object of the dump (ResourceClaim, DeviceClass,
/// ResourceSlice, DeviceTaintRule). One that cannot be read is reported in
/// the warnings (a pod that needs it then finds it missing).
fn load_dra(c: &mut Cluster, kind: &str, doc: usize, v: Value) {
    use k8s_openapi::api::resource::v1 as res;
    let snap = &mut c.snapshot;
    let r: std::result::Result<(), String> = match kind {
        "ResourceClaim" => typed::<res::ResourceClaim>(v).map(|o| snap.devices.upsert_claim(&o)),
        "DeviceClass" => typed::<res::DeviceClass>(v).and_then(|o| snap.upsert_device_class(&o).map_err(|e| e.to_string())),
        "ResourceSlice" => typed::<res::ResourceSlice>(v).and_then(|o| snap.devices.upsert_slice(&o).map_err(|e| e.to_string())),
        _ => typed::<res::DeviceTaintRule>(v).and_then(|o| snap.devices.upsert_taint_rule(&o).map_err(|e| e.to_string())),
    };
    if let Err(m) = r {
        c.warnings.push(format!("document {doc} ({kind}): {m}"));
    }
}

/// Loads a storage object of the dump into the snapshot. One that cannot be
/// decoded is kept as unusable (with the reason) where a pod may need it,
/// and reported in the warnings; it stops nothing else.
fn load_storage(c: &mut Cluster, kind: &str, ns: &str, name: &str, doc: usize, mut v: Value) {
    use k8s_openapi::api::storage::v1 as storage;
    // CSIStorageCapacity carries its quantities at the top level.
    if let Value::Object(m) = &mut v {
        for k in ["capacity", "maximumVolumeSize"] {
            if let Some(Value::Number(n)) = m.get(k).cloned() {
                m.insert(k.into(), Value::String(n.to_string()));
            }
        }
    }
    // A CSINode's `allocatable: {count: N}` is an integer, not a quantity:
    // undo what the dump reader did to it.
    if kind == "CSINode"
        && let Some(drivers) = v.pointer_mut("/spec/drivers").and_then(Value::as_array_mut) {
            for d in drivers {
                if let Some(count) = d.pointer_mut("/allocatable/count")
                    && let Some(n) = count.as_str().and_then(|s| s.parse::<i64>().ok()) {
                        *count = Value::from(n);
                    }
            }
        }
    let st = &mut c.snapshot.storage;
    let res: std::result::Result<(), String> = match kind {
        "PersistentVolumeClaim" => typed::<core::PersistentVolumeClaim>(v).map(|o| st.upsert_claim(&o)),
        "PersistentVolume" => typed::<core::PersistentVolume>(v).map(|o| st.upsert_volume(&o)),
        "StorageClass" => typed::<storage::StorageClass>(v).map(|o| st.upsert_class(&o)),
        "CSINode" => typed::<storage::CSINode>(v).map(|o| st.upsert_csi_node(&o)),
        "CSIDriver" => typed::<storage::CSIDriver>(v).map(|o| st.upsert_csi_driver(&o)),
        _ => typed::<storage::CSIStorageCapacity>(v).and_then(|o| st.upsert_capacity(&o).map_err(|e| e.to_string())),
    };
    if let Err(m) = res {
        c.warnings.push(format!("document {doc} ({kind} {name}): {m}"));
        c.snapshot.storage.upsert_unreadable(kind, ns, name, format!("document {doc}: {m}"));
    }
}

/// One plugin's rejection of a node.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Rejection {
    /// The plugin.
    pub plugin: String,
    /// Its reason.
    pub reason: String,
}

/// One node in explain's output.
#[derive(Clone, Debug, Serialize)]
pub struct NodeExplain {
    /// Node name.
    pub name: String,
    /// Passed every Filter.
    pub feasible: bool,
    /// Why not.
    pub reasons: Vec<Rejection>,
    /// Normalized score per Score plugin (feasible nodes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scores: Option<serde_json::Map<String, Value>>,
    /// Weighted total (feasible nodes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    /// More about a rejection: for DynamicResources, which request the
    /// node cannot meet and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
}

/// What preemption would do.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PreemptionExplain {
    /// The node the pod would be nominated to.
    pub nominated_node: String,
    /// The pods that would be evicted ("ns/name").
    pub victims: Vec<String>,
}

/// explain's output.
#[derive(Clone, Debug, Serialize)]
pub struct Explain {
    /// "ns/name".
    pub pod: String,
    /// The profile used.
    pub profile: String,
    /// Every node.
    pub nodes: Vec<NodeExplain>,
    /// The chosen node.
    pub selected: Option<String>,
    /// The failure message, upstream's word for word.
    pub message: Option<String>,
    /// What berth adds about the pod's own objects when it fits nowhere
    /// (for DynamicResources, the claims that kept it out), kept out of
    /// `message`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Preemption, when the pod fits nowhere and preemption finds a node.
    pub preemption: Option<PreemptionExplain>,
    /// Score weights per plugin.
    pub weights: serde_json::Map<String, Value>,
    /// The pod's group, when it belongs to one: the group cycle's decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupExplain>,
    /// The devices the pod's claims would get on the selected node.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<DeviceChoice>,
}

/// The group cycle's decision for the group of an explained pod.
#[derive(Clone, Debug, Serialize)]
pub struct GroupExplain {
    /// "namespace/name" of the PodGroup.
    pub name: String,
    /// Its minCount.
    pub min_count: u32,
    /// Members already bound.
    pub bound: u32,
    /// Enough members have a place.
    pub fits: bool,
    /// Pending members ("ns/name") and where each would go (None: no place).
    pub members: Vec<(String, Option<String>)>,
    /// Why the group does not fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The topology domain chosen ("key=value").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

/// One pod's outcome in simulate.
#[derive(Clone, Debug, Serialize)]
pub struct Placement {
    /// "ns/name".
    pub pod: String,
    /// Where it was bound.
    pub node: Option<String>,
    /// Where it was nominated by preemption.
    pub nominated_node: Option<String>,
    /// Pods evicted for it.
    pub victims: Vec<String>,
    /// Why it stays pending.
    pub message: Option<String>,
    /// The devices its claims were allocated.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<DeviceChoice>,
}

/// simulate's output.
#[derive(Clone, Debug, Serialize)]
pub struct Simulation {
    /// Every pending pod, in the order it was decided.
    pub placements: Vec<Placement>,
    /// The unbound pods left out, and why (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// An unbound pod that explain and simulate leave out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// "ns/name".
    pub pod: String,
    /// Why.
    pub reason: SkipReason,
}

/// Why an unbound pod is left out (upstream's informers and
/// `skipPodSchedule` leave out the same pods).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "type", content = "schedulerName")]
pub enum SkipReason {
    /// Its schedulerName names no profile of the configuration.
    OtherScheduler(String),
    /// It is being deleted.
    Terminating,
    /// It has finished (Succeeded or Failed).
    Finished,
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::OtherScheduler(s) => write!(f, "its schedulerName {s:?} names no profile"),
            SkipReason::Terminating => f.write_str("it is being deleted"),
            SkipReason::Finished => f.write_str("it has finished"),
        }
    }
}

/// Frameworks plus a cluster.
pub struct Engine {
    /// One framework per profile, in configuration order.
    pub frameworks: Vec<Framework>,
    /// The cluster.
    pub cluster: Cluster,
    /// The unbound pods that are not pending for any profile, in file order.
    pub skipped: Vec<Skipped>,
}

impl Engine {
    /// Builds the engine.
    pub fn new(config: &Config, mut cluster: Cluster, seed: u64) -> Engine {
        let frameworks = crate::profile::frameworks(config, seed);
        // Pending members of a pod group that another scheduler owns: the
        // group cycle refuses a group whose pods name different schedulers.
        for p in &cluster.pending {
            if let Some(r) = &p.group
                && !cluster.unnamed_scheduler.contains(&p.uid)
                && !frameworks.iter().any(|f| f.profile == p.scheduler_name)
            {
                cluster.snapshot.groups.note_foreign(&p.namespace, r, &p.uid, &p.scheduler_name);
            }
        }
        let unbound = std::mem::take(&mut cluster.pending);
        let skipped = unbound
            .iter()
            .filter_map(|p| {
                let reason = if p.terminating {
                    SkipReason::Terminating
                } else if p.terminated {
                    SkipReason::Finished
                } else if !cluster.unnamed_scheduler.contains(&p.uid) && !frameworks.iter().any(|f| f.profile == p.scheduler_name) {
                    SkipReason::OtherScheduler(p.scheduler_name.clone())
                } else {
                    return None;
                };
                Some(Skipped { pod: p.key(), reason })
            })
            .collect();
        cluster.pending = pending_set(unbound, &cluster.unnamed_scheduler, &frameworks);
        // Nominations of pods that are not pending hold nothing either.
        let keep: std::collections::HashSet<&str> = cluster.pending.iter().map(|p| p.uid.as_str()).collect();
        let drop: Vec<String> = cluster.snapshot.nominated.values().flatten().filter(|p| !keep.contains(p.uid.as_str())).map(|p| p.uid.clone()).collect();
        for uid in drop {
            cluster.snapshot.clear_nomination(&uid);
        }
        Engine { frameworks, cluster, skipped }
    }

    /// The profile for a pod: the one its schedulerName names, else the first.
    pub fn framework_for(&self, pod: &PodInfo) -> Option<&Framework> {
        self.frameworks.iter().find(|f| f.profile == pod.scheduler_name).or_else(|| self.frameworks.first())
    }

    /// Explains one scheduling cycle for a pending pod.
    pub fn explain(&self, key: &str) -> Result<Explain> {
        let pod = self.cluster.pending.iter().find(|p| p.key() == key).cloned().ok_or_else(|| {
            if let Some(s) = self.skipped.iter().find(|s| s.pod == key) {
                return Error::NotPending { pod: key.into(), why: s.reason.to_string() };
            }
            if let Some(p) = self.cluster.snapshot.bound_pods().find(|p| p.key() == key) {
                return Error::NotPending { pod: key.into(), why: format!("it is bound to {}", p.node_name.as_deref().unwrap_or("a node")) };
            }
            // Every pod explain could be asked about: the pending ones of every scheduler.
            let mut known: Vec<String> = self.cluster.pending.iter().map(|p| p.key()).collect();
            known.extend(self.skipped.iter().filter(|s| matches!(s.reason, SkipReason::OtherScheduler(_))).map(|s| s.pod.clone()));
            known.sort();
            Error::NotFound(key.into(), name_list(&known))
        })?;
        let fw = self.framework_for(&pod);
        Ok(explain_member(fw, &self.cluster.snapshot, &pod, &self.cluster.pending))
    }

    /// Schedules every pending pod in queue order, updating the cluster after
    /// each decision. Victims of preemption are removed at once and the
    /// preemptor retried.
    pub fn simulate(&mut self) -> Simulation {
        // Queue order (QueueSort; every profile shares one, as upstream requires):
        // pending pods sorted once, stably so that file order breaks full ties;
        // preemptors retried after their victims go wait in a short list beside it.
        let mut queue: Vec<QueuedPod> = self.cluster.pending.iter().map(|p| QueuedPod { pod: p.clone(), timestamp_ms: p.created_ms, attempts: 0 }).collect();
        if let Some(fw) = self.frameworks.first() {
            queue.sort_by(|a, b| {
                if fw.less(a, b) {
                    std::cmp::Ordering::Less
                } else if fw.less(b, a) {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            });
        }
        let mut queue: std::collections::VecDeque<QueuedPod> = queue.into();
        let mut retries: Vec<QueuedPod> = Vec::new();
        let mut placements: Vec<Placement> = Vec::new();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        loop {
            // The first pod in QueueSort order: the head of the sorted queue or
            // a retried preemptor that goes before it (a retry goes after
            // every pod it ties with, as if pushed to the back).
            let mut best_retry: Option<usize> = None;
            for (k, r) in retries.iter().enumerate() {
                let fw = self.framework_for(&r.pod);
                let before_best = best_retry.is_none_or(|b| fw.is_some_and(|f| f.less(r, &retries[b])));
                if before_best {
                    best_retry = Some(k);
                }
            }
            let take_retry = match (best_retry, queue.front()) {
                (Some(k), Some(h)) => self.framework_for(&retries[k].pod).is_some_and(|f| f.less(&retries[k], h)),
                (Some(_), None) => true,
                (None, _) => false,
            };
            let next = if take_retry { best_retry.map(|k| retries.remove(k)) } else { queue.pop_front() };
            let Some(mut q) = next else { break };
            let key = q.pod.key();
            let idx = *by_key.entry(key.clone()).or_insert_with(|| {
                placements.push(Placement { pod: key.clone(), node: None, nominated_node: None, victims: vec![], message: None, allocations: vec![] });
                placements.len() - 1
            });
            let Some(fw) = self.framework_for(&q.pod) else {
                placements[idx].message = Some("no scheduling profile is configured".into());
                continue;
            };
            let gate = fw.run_pre_enqueue_in(&q.pod, &self.cluster.snapshot);
            if !gate.is_success() {
                placements[idx].message = Some(gate.message());
                continue;
            }
            if q.pod.group.is_some() {
                // A pod group: its pending members are decided together.
                let first = q.pod.clone();
                let same = |p: &PodInfo| p.namespace == first.namespace && p.group == first.group;
                let mut members = vec![first.clone()];
                let mut rest: Vec<QueuedPod> = Vec::new();
                queue.retain(|x| if same(&x.pod) { rest.push(x.clone()); false } else { true });
                retries.retain(|x| if same(&x.pod) { rest.push(x.clone()); false } else { true });
                for x in rest {
                    let gate = fw.run_pre_enqueue_in(&x.pod, &self.cluster.snapshot);
                    if gate.is_success() {
                        members.push(x.pod);
                    } else {
                        let key = x.pod.key();
                        let k = *by_key.entry(key.clone()).or_insert_with(|| {
                            placements.push(Placement { pod: key, node: None, nominated_node: None, victims: vec![], message: None, allocations: vec![] });
                            placements.len() - 1
                        });
                        placements[k].message = Some(gate.message());
                    }
                }
                let fw = self.frameworks.iter().find(|f| f.profile == first.scheduler_name).or_else(|| self.frameworks.first());
                let Some(fw) = fw else { continue };
                let mut out = schedule_group(&mut SnapshotHost { fw, snap: &mut self.cluster.snapshot }, &members);
                // Gang preemption: victims go at once, the group is retried with its nominations.
                let mut victims_of: HashMap<String, (String, Vec<String>)> = HashMap::new();
                if let Some(gp) = crate::framework::group::preempt_for_group(fw, &self.cluster.snapshot, &members, &out) {
                    for v in &gp.victims {
                        let node = self.cluster.snapshot.pod_node(&v.uid).unwrap_or_default().to_string();
                        self.cluster.snapshot.remove_pod(&v.uid);
                        // Each victim is listed under the member nominated to its node.
                        if let Some((m, n)) = gp.nominations.iter().find(|(_, n)| *n == node) {
                            victims_of.entry(m.key()).or_insert_with(|| (n.clone(), vec![])).1.push(v.key());
                        }
                    }
                    let nominated: HashMap<String, String> = gp.nominations.iter().map(|(m, n)| (m.uid.clone(), n.clone())).collect();
                    for (m, n) in &gp.nominations {
                        victims_of.entry(m.key()).or_insert_with(|| (n.clone(), vec![]));
                    }
                    for m in members.iter_mut() {
                        if let Some(n) = nominated.get(&m.uid) {
                            let mut p2 = (**m).clone();
                            p2.nominated_node = Some(n.clone());
                            let p2 = Arc::new(p2);
                            self.cluster.snapshot.nominate(p2.clone(), n);
                            *m = p2;
                        }
                    }
                    out = schedule_group(&mut SnapshotHost { fw, snap: &mut self.cluster.snapshot }, &members);
                }
                for (key, (node, victims)) in victims_of {
                    let k = *by_key.entry(key.clone()).or_insert_with(|| {
                        placements.push(Placement { pod: key, node: None, nominated_node: None, victims: vec![], message: None, allocations: vec![] });
                        placements.len() - 1
                    });
                    placements[k].nominated_node = Some(node);
                    placements[k].victims.extend(victims);
                }
                let mut slot = |key: String| {
                    *by_key.entry(key.clone()).or_insert_with(|| {
                        placements.push(Placement { pod: key, node: None, nominated_node: None, victims: vec![], message: None, allocations: vec![] });
                        placements.len() - 1
                    })
                };
                let mut decided: Vec<(usize, Option<String>, Option<String>)> = Vec::new();
                for p in &out.placed {
                    decided.push((slot(p.pod.key()), Some(p.node.clone()), None));
                }
                for u in &out.unplaced {
                    decided.push((slot(u.pod.key()), None, Some(out.pod_message(u))));
                }
                for (k, node, message) in decided {
                    placements[k].node = node;
                    placements[k].message = message;
                }
                continue;
            }
            // The profile again, borrowed from its field alone: the snapshot is assumed into below.
            let Some(fw) = self.frameworks.iter().find(|f| f.profile == q.pod.scheduler_name).or_else(|| self.frameworks.first()) else { continue };
            // The cycle, then Reserve, Permit and the framework's assume step:
            // the pod and its plugins' reservations, so later pods see the PVs taken.
            let ScheduledOne { outcome: o, state, assumed } = fw.schedule_one(&mut self.cluster.snapshot, &q.pod, CycleOptions::default());
            match assumed {
                Assumed::On(node) => {
                    placements[idx].node = Some(node);
                    placements[idx].message = None;
                    placements[idx].allocations = fw.plugins().flat_map(|p| p.device_choices(&state, None)).collect();
                    continue;
                }
                Assumed::Refused { refusal: r, .. } => {
                    placements[idx].message = Some(format!("running {} plugin {:?}: {}", r.point, r.status.plugin, r.status.message()));
                    continue;
                }
                Assumed::NoNode => {}
            }
            placements[idx].message = o.message.clone();
            if !o.deallocations.is_empty() {
                // PostFilter deallocated claims: the claims' update requeues
                // the pod, which tries again.
                for d in &o.deallocations {
                    self.cluster.snapshot.devices.deallocate_claim(&d.namespace, &d.name, &d.uid);
                }
                q.attempts += 1;
                if q.attempts <= 3 {
                    retries.push(q);
                }
                continue;
            }
            let Some(pf) = o.post_filter.filter(|pf| pf.nominated_node.is_some()) else { continue };
            let Some(nominated) = pf.nominated_node.clone() else { continue };
            for v in &pf.victims {
                self.cluster.snapshot.remove_pod(&v.uid);
                placements[idx].victims.push(v.key());
            }
            placements[idx].nominated_node = Some(nominated.clone());
            // Lower-priority pods nominated to the same node lose their nomination.
            let mut p2 = (*q.pod).clone();
            p2.nominated_node = Some(nominated.clone());
            let p2 = Arc::new(p2);
            self.cluster.snapshot.nominate(p2.clone(), &nominated);
            q.pod = p2;
            q.attempts += 1;
            if q.attempts <= 3 {
                retries.push(q);
            }
        }
        Simulation { placements, skipped: self.skipped.clone() }
    }
}

/// The pods of `unbound` that wait for one of `frameworks` (FORMAT.md "Which
/// pods are pending", as upstream's informers and `skipPodSchedule` decide):
/// not being deleted, not finished, and of a configured profile. A pod whose
/// uid is in `unnamed` has no schedulerName and belongs to the first profile.
pub fn pending_set(unbound: Vec<Arc<PodInfo>>, unnamed: &std::collections::HashSet<String>, frameworks: &[Framework]) -> Vec<Arc<PodInfo>> {
    let first = frameworks.first().map(|f| f.profile.as_str());
    unbound
        .into_iter()
        .filter(|p| !p.terminating && !p.terminated)
        .filter_map(|p| {
            if unnamed.contains(&p.uid)
                && let Some(first) = first
                && p.scheduler_name != first
            {
                let mut q = (*p).clone();
                q.scheduler_name = first.to_string();
                return Some(Arc::new(q));
            }
            frameworks.iter().any(|f| f.profile == p.scheduler_name).then_some(p)
        })
        .collect()
}

/// Explains a pending pod. For a member of a pod group the group cycle runs
/// first (on a copy), and the pod's own cycle is explained as the group cycle
/// saw it: the members before it (queue order) assumed, in the chosen
/// topology domain. Nothing is changed.
pub fn explain_member(fw: Option<&Framework>, snap: &Snapshot, pod: &Arc<PodInfo>, pending: &[Arc<PodInfo>]) -> Explain {
    let (Some(f), Some(r)) = (fw, pod.group.as_ref()) else { return explain_pod(fw, snap, pod) };
    let mut members: Vec<QueuedPod> = pending
        .iter()
        .filter(|p| p.namespace == pod.namespace && p.group.as_ref() == Some(r) && f.run_pre_enqueue_in(p, snap).is_success())
        .map(|p| QueuedPod { pod: p.clone(), timestamp_ms: p.created_ms, attempts: 0 })
        .collect();
    if !members.iter().any(|m| m.pod.uid == pod.uid) {
        return explain_pod(fw, snap, pod);
    }
    members.sort_by(|a, b| if f.less(a, b) { std::cmp::Ordering::Less } else if f.less(b, a) { std::cmp::Ordering::Greater } else { std::cmp::Ordering::Equal });
    let members: Vec<Arc<PodInfo>> = members.into_iter().map(|q| q.pod).collect();
    let mut copy = snap.clone();
    let out = schedule_group(&mut SnapshotHost { fw: f, snap: &mut copy }, &members);
    // Replay the members before this one, as the group cycle placed them.
    let mut view = snap.clone();
    view.groups.placement = out.domain.clone();
    for m in members.iter().take_while(|m| m.uid != pod.uid) {
        // A refused member is left out, as the group cycle leaves it.
        f.schedule_one(&mut view, m, CycleOptions { skip_post_filter: true, ..Default::default() });
    }
    let mut e = explain_pod(fw, &view, pod);
    let mut listed: Vec<(String, Option<String>)> = out.placed.iter().map(|p| (p.pod.key(), Some(p.node.clone()))).collect();
    listed.extend(out.unplaced.iter().map(|u| (u.pod.key(), None)));
    let order: HashMap<String, usize> = members.iter().enumerate().map(|(i, m)| (m.key(), i)).collect();
    listed.sort_by_key(|(k, _)| order.get(k).copied().unwrap_or(usize::MAX));
    if out.fits {
        if let Some(p) = out.placed.iter().find(|p| p.pod.uid == pod.uid) {
            e.selected = Some(p.node.clone());
        }
    } else {
        e.selected = None;
        e.preemption = None;
        e.message = Some(out.unplaced.iter().find(|u| u.pod.uid == pod.uid).map(|u| out.pod_message(u)).unwrap_or_else(|| out.message.clone()));
    }
    e.group = Some(GroupExplain {
        name: out.group.clone(),
        min_count: out.min_count,
        bound: out.bound,
        fits: out.fits,
        members: listed,
        message: (!out.fits).then(|| out.message.clone()),
        domain: out.domain.as_ref().map(|(k, v)| format!("{k}={v}")),
    });
    e
}

/// Explains one scheduling cycle of `pod` with `fw` over `snap` (nothing is changed).
pub fn explain_pod(fw: Option<&Framework>, snap: &Snapshot, pod: &Arc<PodInfo>) -> Explain {
    let mut out = Explain {
        pod: pod.key(),
        profile: String::new(),
        nodes: Vec::new(),
        selected: None,
        message: None,
        detail: None,
        preemption: None,
        weights: serde_json::Map::new(),
        group: None,
        allocations: Vec::new(),
    };
    let Some(fw) = fw else {
        out.message = Some("no scheduling profile is configured".into());
        return out;
    };
    out.profile = fw.profile.clone();
    let gate = fw.run_pre_enqueue_in(pod, snap);
    if !gate.is_success() {
        out.message = Some(format!("not scheduled: {} ({})", gate.message(), gate.plugin));
        out.nodes = snap
            .nodes
            .iter()
            .map(|n| NodeExplain { name: n.name().into(), feasible: false, reasons: vec![Rejection { plugin: gate.plugin.into(), reason: gate.message() }], scores: None, total: None, details: vec![] })
            .collect();
        return out;
    }
    let (o, state) = fw.schedule(pod, snap, CycleOptions { explain: true, ..Default::default() });
    for name in &o.score_plugins {
        out.weights.insert((*name).into(), Value::from(fw.weight(name).unwrap_or(1)));
    }
    out.nodes = node_explains(fw, &o, &state, snap);
    out.selected = o.selected.map(|i| snap.nodes[i].name().to_string());
    if let Some(n) = &out.selected {
        out.allocations = fw.plugins().flat_map(|p| p.device_choices(&state, Some(n))).collect();
    }
    out.message = o.message.clone();
    out.detail = o.failure_detail.clone();
    if let Some(pf) = &o.post_filter
        && let Some(n) = &pf.nominated_node {
            out.preemption = Some(PreemptionExplain { nominated_node: n.clone(), victims: pf.victims.iter().map(|v| v.key()).collect() });
        }
    out
}

fn node_explains(fw: &Framework, o: &CycleOutcome, state: &CycleState, snap: &Snapshot) -> Vec<NodeExplain> {
    let pos: HashMap<usize, usize> = o.feasible.iter().enumerate().map(|(k, &i)| (i, k)).collect();
    snap.nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if let Some(&k) = pos.get(&i) {
                let mut scores = serde_json::Map::new();
                for (pi, name) in o.score_plugins.iter().enumerate() {
                    scores.insert((*name).into(), Value::from(o.scores.get(pi).and_then(|s| s.get(k)).copied().unwrap_or(0)));
                }
                NodeExplain { name: n.name().into(), feasible: true, reasons: vec![], scores: Some(scores), total: o.totals.get(k).copied(), details: vec![] }
            } else {
                let reasons = match o.statuses.get(i) {
                    Some(s) => s.reasons.iter().map(|r| Rejection { plugin: s.plugin.into(), reason: r.to_string() }).collect(),
                    None => vec![],
                };
                let details = match o.statuses.get(i) {
                    Some(s) => fw.plugins().filter(|p| p.name() == s.plugin).flat_map(|p| p.explain_rejection(state, snap, n, s)).collect(),
                    None => vec![],
                };
                NodeExplain { name: n.name().into(), feasible: false, reasons, scores: None, total: None, details }
            }
        })
        .collect()
}

