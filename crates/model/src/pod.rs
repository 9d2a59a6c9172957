//! `PodInfo`: a pod compiled once per version for the scheduler.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use super::resources::{self, Resources};
use super::selector::{Labels, NodeSelector, NodeSelectorTerm, PodLabels, Op, Requirement, Selector};
use super::taints::Toleration;

/// A host port a container asks for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// Host IP ("0.0.0.0" when unset).
    pub ip: String,
    /// Protocol ("TCP" when unset).
    pub protocol: String,
    /// Port number.
    pub port: i32,
}

/// One pod (anti-)affinity term, compiled.
#[derive(Clone, Debug, Hash)]
pub struct AffinityTerm {
    /// Which pods the term selects.
    pub selector: Selector,
    /// Namespaces named explicitly (the pod's own when neither list nor selector is given).
    pub namespaces: Vec<String>,
    /// Namespaces selected by label (nothing when unset).
    pub namespace_selector: Selector,
    /// The topology key.
    pub topology_key: String,
}

impl AffinityTerm {
    /// Does the term select `pod`? `ns_labels` are the labels of the pod's namespace.
    pub fn matches(&self, pod: &PodInfo, ns_labels: Option<&Labels>) -> bool {
        let ns_ok = self.namespaces.contains(&pod.namespace)
            || ns_labels.is_some_and(|l| self.namespace_selector.matches(l))
            || (ns_labels.is_none() && self.namespace_selector.is_everything());
        ns_ok && self.selector.matches(&pod.labels)
    }
}

/// A weighted (preferred) pod (anti-)affinity term.
#[derive(Clone, Debug, Hash)]
pub struct WeightedAffinityTerm {
    /// The term.
    pub term: AffinityTerm,
    /// Its weight, 1..=100.
    pub weight: i64,
}

/// A weighted preferred node affinity term.
#[derive(Clone, Debug, Hash)]
pub struct PreferredNodeTerm {
    /// The term.
    pub term: NodeSelectorTerm,
    /// Its weight.
    pub weight: i64,
}

/// `whenUnsatisfiable` of a topology spread constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    /// A hard constraint (Filter).
    DoNotSchedule,
    /// A soft constraint (Score).
    ScheduleAnyway,
}

/// nodeAffinityPolicy / nodeTaintsPolicy of a spread constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InclusionPolicy {
    /// Only nodes that pass the pod's node affinity / tolerate its taints count.
    Honor,
    /// All nodes count.
    Ignore,
}

/// A compiled topology spread constraint.
#[derive(Clone, Debug, Hash)]
pub struct SpreadConstraint {
    /// maxSkew (≥ 1).
    pub max_skew: i64,
    /// topologyKey.
    pub topology_key: String,
    /// whenUnsatisfiable.
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// labelSelector with matchLabelKeys merged in.
    pub selector: Selector,
    /// minDomains (1 when unset).
    pub min_domains: i64,
    /// nodeAffinityPolicy (Honor by default).
    pub node_affinity_policy: InclusionPolicy,
    /// nodeTaintsPolicy (Ignore by default).
    pub node_taints_policy: InclusionPolicy,
}

/// The controller a pod names in its ownerReferences (`controller: true`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ControllerRef {
    /// apiVersion of the owner.
    pub api_version: String,
    /// kind of the owner.
    pub kind: String,
    /// name of the owner.
    pub name: String,
}

/// A pod's controller from its ownerReferences (upstream `GetControllerOf`).
pub fn controller_of(refs: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>) -> Option<ControllerRef> {
    refs?.iter().find(|r| r.controller == Some(true)).map(|r| ControllerRef { api_version: r.api_version.clone(), kind: r.kind.clone(), name: r.name.clone() })
}

/// A field of the pod spec that cannot be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpecError {
    /// The plugin that would have read the field.
    pub plugin: &'static str,
    /// What is wrong, naming the field.
    pub message: String,
}

/// Everything the scheduler reads of a pod, computed once per pod version.
///
/// A bound pod (spec.nodeName set) is only ever read as an existing pod: its
/// scheduling gates, images, required node features, tolerations, node
/// selector and affinity, spread constraints and controller are left empty.
#[derive(Clone, Debug, Default, Hash)]
pub struct PodInfo {
    /// metadata.uid (namespace/name when the object has none).
    pub uid: String,
    /// metadata.namespace ("default" when unset).
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.labels.
    pub labels: PodLabels,
    /// metadata.creationTimestamp in milliseconds since the epoch (0 when unset).
    pub created_ms: i64,
    /// metadata.deletionTimestamp is set.
    pub terminating: bool,
    /// Terminating because the scheduler preempted it: deletionTimestamp set and the
    /// first DisruptionTarget condition is True with reason PreemptionByScheduler.
    pub preempted_by_scheduler: bool,
    /// status.phase is Succeeded or Failed.
    pub terminated: bool,
    /// spec.priority (0 when unset).
    pub priority: i32,
    /// spec.preemptionPolicy is Never.
    pub preemption_never: bool,
    /// spec.schedulerName ("default-scheduler" when unset).
    pub scheduler_name: String,
    /// spec.nodeName, when bound.
    pub node_name: Option<String>,
    /// status.nominatedNodeName.
    pub nominated_node: Option<String>,
    /// Names of spec.schedulingGates.
    pub scheduling_gates: Vec<String>,
    /// status.startTime in milliseconds (falls back to creation).
    pub start_ms: i64,
    /// Effective requests: max(sum of containers, largest init container) plus overhead.
    pub requests: Resources,
    /// Requests with upstream's defaults (100m, 200Mi) for containers that name none.
    pub non_zero_cpu: i64,
    /// Memory counterpart of `non_zero_cpu`.
    pub non_zero_memory: i64,
    /// Host ports asked for.
    pub host_ports: Vec<HostPort>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// spec.nodeSelector (None when empty).
    pub node_selector: Option<Box<Selector>>,
    /// Required node affinity (None when unset).
    pub required_node_affinity: Option<Box<NodeSelector>>,
    /// Preferred node affinity terms.
    pub preferred_node_affinity: Vec<PreferredNodeTerm>,
    /// Required pod affinity terms.
    pub required_affinity: Vec<AffinityTerm>,
    /// Required pod anti-affinity terms.
    pub required_anti_affinity: Vec<AffinityTerm>,
    /// Preferred pod affinity terms.
    pub preferred_affinity: Vec<WeightedAffinityTerm>,
    /// Preferred pod anti-affinity terms.
    pub preferred_anti_affinity: Vec<WeightedAffinityTerm>,
    /// Topology spread constraints as written in the pod.
    pub spread_constraints: Vec<SpreadConstraint>,
    /// Container images.
    pub images: Vec<String>,
    /// Volumes the storage plugins read (claims, ephemeral claims, in-tree disks); empty for most pods.
    pub volumes: Arc<[super::volumes::PodVolume]>,
    /// Fields that cannot be evaluated: such a pod is unschedulable, with the reason.
    pub errors: Vec<SpecError>,
    /// Node features the pod needs (NodeDeclaredFeatures), sorted.
    pub required_features: Vec<&'static str>,
    /// The controller among metadata.ownerReferences (default topology spreading).
    pub controller: Option<Box<ControllerRef>>,
    /// Scheduling signature ([`PodInfo::from_pod`] computes it for a pending pod); 0 when not computed.
    pub signature: u64,
    /// The pod group the pod belongs to (gang scheduling), if any.
    pub group: Option<GroupRef>,
    /// spec.resourceClaims (DynamicResources), with the claim each one names;
    /// empty for most pods. Part of the signature: pods whose claims differ
    /// never share verdicts.
    pub resource_claims: Vec<PodClaim>,
    /// Per container, the extended resources a DeviceClass may back (DRA
    /// extended resources), for the claim DynamicResources writes: upstream
    /// makes one request per container and resource. Filled for pending
    /// pods only; empty for most.
    pub extended_containers: Vec<ContainerExtended>,
}

/// One container's requests of resources DRA may back
/// ([`PodInfo::extended_containers`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ContainerExtended {
    /// Its index in initContainers followed by containers.
    pub index: usize,
    /// The container's name.
    pub name: String,
    /// An init container that is not a sidecar (restartPolicy Always): it
    /// ends before the others start, so it may reuse their devices.
    pub short_lived: bool,
    /// (resource, the resource's index among the container's request names
    /// in sorted order, count), for each nonzero request of such a resource.
    pub resources: Vec<(String, usize, i64)>,
}

/// May a DeviceClass back this resource (upstream `IsDRAExtendedResourceName`):
/// an extended resource, or a class's implicit `deviceclass.resource.kubernetes.io/<class>`.
pub fn is_dra_extended(name: &str) -> bool {
    super::resources::is_extended(name) || name.starts_with("deviceclass.resource.kubernetes.io/")
}

/// [`PodInfo::extended_containers`] of a spec.
fn extended_containers(spec: &core::PodSpec) -> Vec<ContainerExtended> {
    let inits = spec.init_containers.iter().flatten().map(|c| (c, c.restart_policy.as_deref() != Some("Always")));
    let all = inits.chain(spec.containers.iter().map(|c| (c, false)));
    let mut out = Vec::new();
    for (index, (c, short_lived)) in all.enumerate() {
        let Some(requests) = c.resources.as_ref().and_then(|r| r.requests.as_ref()) else { continue };
        // A BTreeMap: its keys are already in the sorted order upstream numbers them in.
        let resources: Vec<(String, usize, i64)> = requests
            .iter()
            .enumerate()
            .filter(|(_, (name, _))| is_dra_extended(name))
            .filter_map(|(j, (name, q))| super::quantity::parse_value(&q.0).ok().filter(|v| *v > 0).map(|v| (name.clone(), j, v)))
            .collect();
        if !resources.is_empty() {
            out.push(ContainerExtended { index, name: c.name.clone(), short_lived, resources });
        }
    }
    out
}

/// Which ResourceClaim a pod claim (an entry of spec.resourceClaims) is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClaimSource {
    /// spec.resourceClaims[].resourceClaimName: a claim in the pod's namespace.
    Named(String),
    /// Made from a template: the claim status.resourceClaimStatuses names for
    /// it (None: not created yet; Some(None): no claim is needed), which must
    /// be controlled by the pod.
    FromTemplate(Option<Option<String>>),
    /// Neither field is set.
    Unsupported,
}

/// An entry of spec.resourceClaims.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodClaim {
    /// The pod claim's name.
    pub name: String,
    /// The claim it resolves to.
    pub source: ClaimSource,
}

/// spec.resourceClaims resolved through status.resourceClaimStatuses
/// (upstream `resourceclaim.Name`).
fn pod_claims(spec: &core::PodSpec, status: Option<&core::PodStatus>) -> Vec<PodClaim> {
    let statuses = status.and_then(|s| s.resource_claim_statuses.as_ref());
    spec.resource_claims
        .iter()
        .flatten()
        .map(|c| {
            let source = match (&c.resource_claim_name, &c.resource_claim_template_name) {
                (Some(n), _) => ClaimSource::Named(n.clone()),
                (None, Some(_)) => ClaimSource::FromTemplate(statuses.and_then(|ss| ss.iter().find(|s| s.name == c.name)).map(|s| s.resource_claim_name.clone())),
                (None, None) => ClaimSource::Unsupported,
            };
            PodClaim { name: c.name.clone(), source }
        })
        .collect()
}

/// Which API names a pod's group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupApi {
    /// `spec.schedulingGroup.podGroupName`: a `scheduling.k8s.io/v1beta1` PodGroup.
    V1beta1,
    /// The label `scheduling.x-k8s.io/pod-group`: a scheduler-plugins
    /// `scheduling.x-k8s.io/v1alpha1` PodGroup.
    V1alpha1,
}

/// The pod group a pod names (in the pod's namespace).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupRef {
    /// The API the name refers to.
    pub api: GroupApi,
    /// The PodGroup's name.
    pub name: String,
}

/// The label scheduler-plugins' Coscheduling reads a pod's group from.
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// A pod's group: `spec.schedulingGroup.podGroupName` first (upstream's
/// API), else the scheduler-plugins label.
fn group_of(spec: &core::PodSpec, labels: &PodLabels) -> Option<GroupRef> {
    if let Some(name) = spec.scheduling_group.as_ref().and_then(|g| g.pod_group_name.as_ref()).filter(|n| !n.is_empty()) {
        return Some(GroupRef { api: GroupApi::V1beta1, name: name.clone() });
    }
    labels.get(POD_GROUP_LABEL).filter(|n| !n.is_empty()).map(|n| GroupRef { api: GroupApi::V1alpha1, name: n.to_string() })
}

impl PodInfo {
    /// "namespace/name".
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// True when the pod has any pod affinity or anti-affinity term.
    pub fn has_affinity(&self) -> bool {
        !(self.required_affinity.is_empty()
            && self.required_anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty())
    }

    /// True when the pod holds node resources: bound pods that have not finished
    /// (terminating pods still hold theirs until gone).
    pub fn holds_resources(&self) -> bool {
        !self.terminated
    }

    /// Compiles a pod. Never fails: what cannot be read is recorded in `errors`.
    pub fn from_pod(pod: &core::Pod) -> Arc<PodInfo> {
        let mut p = Self::build(pod);
        // Only a pod still to be scheduled needs its signature: a bound
        // one (most watch events) is never scheduled again.
        if p.node_name.is_none() {
            p.signature = signature(&p);
        }
        Arc::new(p)
    }

    fn build(pod: &core::Pod) -> PodInfo {
        let meta = &pod.metadata;
        let mut p = PodInfo {
            namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
            name: meta.name.clone().unwrap_or_default(),
            labels: meta.labels.as_ref().map(PodLabels::from_map).unwrap_or_default(),
            created_ms: meta.creation_timestamp.as_ref().map(|t| t.0.as_millisecond()).unwrap_or(0),
            terminating: meta.deletion_timestamp.is_some(),
            ..Default::default()
        };
        p.uid = meta.uid.clone().unwrap_or_else(|| p.key());
        let status = pod.status.as_ref();
        p.preempted_by_scheduler = p.terminating
            && status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
                .is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler"));
        p.terminated = matches!(status.and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
        p.nominated_node = status.and_then(|s| s.nominated_node_name.clone()).filter(|s| !s.is_empty());
        p.start_ms = status
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0.as_millisecond())
            .unwrap_or(p.created_ms);
        let Some(spec) = pod.spec.as_ref() else {
            p.scheduler_name = "default-scheduler".into();
            p.errors.push(SpecError { plugin: "PodSpec", message: "spec: required field is missing".into() });
            return p;
        };
        p.priority = spec.priority.unwrap_or(0);
        p.preemption_never = spec.preemption_policy.as_deref() == Some("Never");
        p.scheduler_name = spec.scheduler_name.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "default-scheduler".into());
        p.node_name = spec.node_name.clone().filter(|s| !s.is_empty());
        p.compute_requests(spec, status);
        p.compute_ports(spec);
        p.compute_pod_affinity(spec);
        // What only the pod being scheduled is asked for (gates, images,
        // node features, tolerations, node affinity, spread constraints and
        // the controller that defaults them) is left empty for a bound pod:
        // nothing reads it of an existing pod, and a daemon keeps every
        // bound pod.
        if p.node_name.is_none() {
            p.controller = controller_of(meta.owner_references.as_ref()).map(Box::new);
            p.scheduling_gates = spec.scheduling_gates.iter().flatten().map(|g| g.name.clone()).collect();
            p.images = spec.containers.iter().chain(spec.init_containers.iter().flatten()).filter_map(|c| c.image.clone()).collect();
            p.required_features = required_node_features(spec);
            p.tolerations = spec.tolerations.iter().flatten().map(Toleration::from_api).collect();
            p.compute_node_affinity(spec);
            p.compute_spread(spec);
        }
        p.volumes = super::volumes::from_spec(&p.name, spec);
        p.group = group_of(spec, &p.labels);
        p.resource_claims = pod_claims(spec, status);
        if p.node_name.is_none() {
            p.extended_containers = extended_containers(spec);
        }
        p
    }

    fn compute_requests(&mut self, spec: &core::PodSpec, status: Option<&core::PodStatus>) {
        // A bound pod counts what the kubelet allocated while a resize is
        // pending or in progress (InPlacePodVerticalScaling, GA and locked on
        // since 1.35); a pending pod is accounted from its spec.
        let status = status.filter(|_| self.node_name.is_some());
        let (eff, errors) = effective_requests(spec, status);
        self.requests = eff.requests;
        self.non_zero_cpu = eff.non_zero_cpu;
        self.non_zero_memory = eff.non_zero_memory;
        self.errors.extend(errors);
    }

    fn compute_ports(&mut self, spec: &core::PodSpec) {
        let all = spec.containers.iter().chain(spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always")));
        for c in all {
            for port in c.ports.iter().flatten() {
                let hp = port.host_port.unwrap_or(0);
                if hp <= 0 {
                    continue;
                }
                self.host_ports.push(HostPort {
                    ip: port.host_ip.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "0.0.0.0".into()),
                    protocol: port.protocol.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "TCP".into()),
                    port: hp,
                });
            }
        }
    }

    fn compute_node_affinity(&mut self, spec: &core::PodSpec) {
        if let Some(ns) = spec.node_selector.as_ref().filter(|m| !m.is_empty()) {
            self.node_selector = Some(Box::new(Selector::from_map(ns)));
        }
        let Some(na) = spec.affinity.as_ref().and_then(|a| a.node_affinity.as_ref()) else { return };
        if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
            match NodeSelector::compile(req, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution") {
                Ok(s) => self.required_node_affinity = Some(Box::new(s)),
                Err(e) => self.errors.push(SpecError { plugin: "NodeAffinity", message: e }),
            }
        }
        for (i, t) in na.preferred_during_scheduling_ignored_during_execution.iter().flatten().enumerate() {
            if t.weight == 0 {
                continue;
            }
            let path = format!("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference");
            match NodeSelectorTerm::compile(&t.preference, &path) {
                Ok(Some(term)) => self.preferred_node_affinity.push(PreferredNodeTerm { term, weight: i64::from(t.weight) }),
                Ok(None) => {}
                Err(e) => self.errors.push(SpecError { plugin: "NodeAffinity", message: e }),
            }
        }
    }

    fn compile_term(&self, t: &core::PodAffinityTerm, path: &str) -> Result<AffinityTerm, String> {
        let mut selector = Selector::from_label_selector(t.label_selector.as_ref(), &format!("{path}.labelSelector"))?;
        // matchLabelKeys / mismatchLabelKeys merge the incoming pod's own label values.
        for k in t.match_label_keys.iter().flatten() {
            if let Some(v) = self.labels.get(k) {
                selector.push(Requirement { key: k.clone(), op: Op::In(vec![v.to_string()]) });
            }
        }
        for k in t.mismatch_label_keys.iter().flatten() {
            if let Some(v) = self.labels.get(k) {
                selector.push(Requirement { key: k.clone(), op: Op::NotIn(vec![v.to_string()]) });
            }
        }
        let namespace_selector = match &t.namespace_selector {
            None => Selector::nothing(),
            Some(s) => Selector::from_label_selector(Some(s), &format!("{path}.namespaceSelector"))?,
        };
        let mut namespaces = t.namespaces.clone().unwrap_or_default();
        if namespaces.is_empty() && t.namespace_selector.is_none() {
            namespaces.push(self.namespace.clone());
        }
        if t.topology_key.is_empty() {
            return Err(format!("{path}.topologyKey: must be non-empty"));
        }
        Ok(AffinityTerm { selector, namespaces, namespace_selector, topology_key: t.topology_key.clone() })
    }

    fn compute_pod_affinity(&mut self, spec: &core::PodSpec) {
        let Some(aff) = spec.affinity.as_ref() else { return };
        let mut errors = Vec::new();
        let mut req = |terms: Option<&Vec<core::PodAffinityTerm>>, path: &str| -> Vec<AffinityTerm> {
            terms
                .into_iter()
                .flatten()
                .enumerate()
                .filter_map(|(i, t)| {
                    self.compile_term(t, &format!("{path}[{i}]"))
                        .map_err(|e| errors.push(SpecError { plugin: "InterPodAffinity", message: e }))
                        .ok()
                })
                .collect()
        };
        let pa = aff.pod_affinity.as_ref();
        let paa = aff.pod_anti_affinity.as_ref();
        let required_affinity = req(pa.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()), "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution");
        let required_anti = req(paa.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()), "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution");
        let mut pref = |terms: Option<&Vec<core::WeightedPodAffinityTerm>>, path: &str| -> Vec<WeightedAffinityTerm> {
            terms
                .into_iter()
                .flatten()
                .enumerate()
                .filter_map(|(i, t)| {
                    self.compile_term(&t.pod_affinity_term, &format!("{path}[{i}].podAffinityTerm"))
                        .map(|term| WeightedAffinityTerm { term, weight: i64::from(t.weight) })
                        .map_err(|e| errors.push(SpecError { plugin: "InterPodAffinity", message: e }))
                        .ok()
                })
                .collect()
        };
        let preferred_affinity = pref(pa.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()), "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution");
        let preferred_anti = pref(paa.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()), "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution");
        self.required_affinity = required_affinity;
        self.required_anti_affinity = required_anti;
        self.preferred_affinity = preferred_affinity;
        self.preferred_anti_affinity = preferred_anti;
        self.errors.extend(errors);
    }

    fn compute_spread(&mut self, spec: &core::PodSpec) {
        for (i, c) in spec.topology_spread_constraints.iter().flatten().enumerate() {
            match self.compile_spread(c, &format!("spec.topologySpreadConstraints[{i}]")) {
                Ok(sc) => self.spread_constraints.push(sc),
                Err(e) => self.errors.push(SpecError { plugin: "PodTopologySpread", message: e }),
            }
        }
    }

    fn compile_spread(&self, c: &core::TopologySpreadConstraint, path: &str) -> Result<SpreadConstraint, String> {
        if c.max_skew <= 0 {
            return Err(format!("{path}.maxSkew: must be greater than zero, got {}", c.max_skew));
        }
        if c.topology_key.is_empty() {
            return Err(format!("{path}.topologyKey: must be non-empty"));
        }
        let when = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            other => return Err(format!("{path}.whenUnsatisfiable: unsupported value {other:?} (DoNotSchedule or ScheduleAnyway)")),
        };
        let min_domains = match c.min_domains {
            None => 1,
            Some(m) if m <= 0 => return Err(format!("{path}.minDomains: must be greater than zero, got {m}")),
            Some(m) if when != WhenUnsatisfiable::DoNotSchedule => {
                return Err(format!("{path}.minDomains: {m} may only be set with whenUnsatisfiable DoNotSchedule"));
            }
            Some(m) => i64::from(m),
        };
        let policy = |v: Option<&str>, default: InclusionPolicy, field: &str| -> Result<InclusionPolicy, String> {
            match v {
                None => Ok(default),
                Some("Honor") => Ok(InclusionPolicy::Honor),
                Some("Ignore") => Ok(InclusionPolicy::Ignore),
                Some(o) => Err(format!("{path}.{field}: unsupported value {o:?} (Honor or Ignore)")),
            }
        };
        let mut selector = Selector::from_label_selector(c.label_selector.as_ref(), &format!("{path}.labelSelector"))?;
        if c.label_selector.is_some() {
            for k in c.match_label_keys.iter().flatten() {
                if let Some(v) = self.labels.get(k) {
                    selector.push(Requirement { key: k.clone(), op: Op::In(vec![v.to_string()]) });
                }
            }
        }
        Ok(SpreadConstraint {
            max_skew: i64::from(c.max_skew),
            topology_key: c.topology_key.clone(),
            when_unsatisfiable: when,
            selector,
            min_domains,
            node_affinity_policy: policy(c.node_affinity_policy.as_deref(), InclusionPolicy::Honor, "nodeAffinityPolicy")?,
            node_taints_policy: policy(c.node_taints_policy.as_deref(), InclusionPolicy::Ignore, "nodeTaintsPolicy")?,
        })
    }
}

/// The node features a pod needs to be scheduled, as the registry of
/// upstream's `k8s.io/component-helpers/nodedeclaredfeatures` infers them for
/// scheduling: a container restart rule with action RestartAllContainers, and
/// host networking inside a user namespace (hostUsers false). The registry's
/// other features (in-place resize of guaranteed pods, pod-level resources)
/// are inferred for updates only.
pub fn required_node_features(spec: &core::PodSpec) -> Vec<&'static str> {
    let mut out = Vec::new();
    let restart_all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.restart_policy_rules.iter().flatten())
        .any(|r| r.action == "RestartAllContainers");
    if restart_all {
        out.push("RestartAllContainersOnContainerExits");
    }
    if spec.host_network == Some(true) && spec.host_users == Some(false) {
        out.push("UserNamespacesHostNetworkSupport");
    }
    out
}

/// A pod's effective requests, as upstream's `resource.PodRequests` computes
/// them for the scheduler.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EffectiveRequests {
    /// Requests: containers (init containers and sidecars as the sidecar KEP
    /// sums them), replaced by pod-level requests where given, plus overhead.
    pub requests: Resources,
    /// CPU for scoring: containers that name no CPU count 100m (unless pod-level
    /// requests are set and some level names CPU).
    pub non_zero_cpu: i64,
    /// Memory counterpart of `non_zero_cpu` (200Mi).
    pub non_zero_memory: i64,
}

/// One container's requests as read by one aggregation, and which of cpu and
/// memory it names (a named zero still counts as named).
#[derive(Clone, Debug, Default)]
struct Entry {
    r: Resources,
    has_cpu: bool,
    has_mem: bool,
}

impl Entry {
    /// `path` names the list in an error; it is written only then (every
    /// container of every pod event is read here).
    fn read(list: Option<&std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>, path: &dyn Fn() -> String, errors: &mut Vec<SpecError>) -> Entry {
        // The error reads `<path>[<name>]: …`; with an empty path, `[<name>]: …`.
        let r = Resources::from_list(list, "").unwrap_or_else(|e| {
            errors.push(SpecError { plugin: "NodeResourcesFit", message: format!("{}{e}", path()) });
            Resources::default()
        });
        let has = |n: &str| list.is_some_and(|l| l.contains_key(n));
        Entry { has_cpu: has(resources::CPU), has_mem: has(resources::MEMORY), r }
    }

    /// upstream `applyNonMissing`: adds the defaults for what the list does not name.
    fn with_defaults(&self, d: Defaults) -> Entry {
        let mut e = self.clone();
        if let Some(cpu) = d.cpu.filter(|_| !e.has_cpu) {
            e.r.milli_cpu = e.r.milli_cpu.saturating_add(cpu);
            e.has_cpu = true;
        }
        if let Some(mem) = d.memory.filter(|_| !e.has_mem) {
            e.r.memory = e.r.memory.saturating_add(mem);
            e.has_mem = true;
        }
        e
    }

    fn add(&mut self, o: &Entry) {
        self.r.add(&o.r);
        self.has_cpu |= o.has_cpu;
        self.has_mem |= o.has_mem;
    }

    fn max_with(&mut self, o: &Entry) {
        self.r.max_with(&o.r);
        self.has_cpu |= o.has_cpu;
        self.has_mem |= o.has_mem;
    }
}

/// upstream `NonMissingContainerRequests`: values for containers that name no cpu / memory.
#[derive(Clone, Copy, Debug, Default)]
struct Defaults {
    cpu: Option<i64>,
    memory: Option<i64>,
}

/// Which requests of a container an aggregation reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// spec.containers[].resources.requests.
    Spec,
    /// status allocatedResources, else the spec (nothing when the resize is infeasible).
    Allocated,
    /// status resources.requests, else allocatedResources, else the spec (nothing when infeasible).
    Actuated,
}

/// A container: its spec requests and, for bound pods, what its status reports.
struct ContainerReqs {
    spec: Entry,
    allocated: Option<Entry>,
    actuated: Option<Entry>,
    init: bool,
    restartable: bool,
}

impl ContainerReqs {
    fn get(&self, src: Source, infeasible: bool) -> Option<&Entry> {
        let spec = (!infeasible).then_some(&self.spec);
        match src {
            Source::Spec => Some(&self.spec),
            Source::Allocated => self.allocated.as_ref().or(spec),
            Source::Actuated => self.actuated.as_ref().or(self.allocated.as_ref()).or(spec),
        }
    }
}

/// upstream `aggregateContainerResourcesByFn`: regular containers and sidecars
/// add up; each init container runs beside the sidecars started before it.
fn aggregate(cs: &[ContainerReqs], src: Source, infeasible: bool, d: Defaults) -> Entry {
    let empty = Entry::default();
    let read = |c: &ContainerReqs| c.get(src, infeasible).unwrap_or(&empty).with_defaults(d);
    let mut total = Entry::default();
    for c in cs.iter().filter(|c| !c.init) {
        total.add(&read(c));
    }
    let mut sidecars = Entry::default();
    let mut init_max = Entry::default();
    for c in cs.iter().filter(|c| c.init) {
        let e = read(c);
        if c.restartable {
            total.add(&e);
            sidecars.add(&e);
            init_max.max_with(&sidecars);
        } else {
            let mut t = e;
            t.add(&sidecars);
            init_max.max_with(&t);
        }
    }
    total.max_with(&init_max);
    total
}

/// Resources that pod-level requests may set (upstream `IsSupportedPodLevelResource`).
fn pod_level_supported(name: &str) -> bool {
    name == resources::CPU || name == resources::MEMORY || resources::is_hugepages(name)
}

/// The effective requests of a pod (upstream `resource.PodRequests` with the
/// scheduler's options: pod-level resources on, status resources when
/// `status` is given, i.e. for bound pods). The one place every plugin's
/// view of a pod's requests comes from.
pub fn effective_requests(spec: &core::PodSpec, status: Option<&core::PodStatus>) -> (EffectiveRequests, Vec<SpecError>) {
    let mut errors = Vec::new();
    let find_status = |name: &str| -> Option<&core::ContainerStatus> {
        let st = status?;
        st.container_statuses.iter().flatten().chain(st.init_container_statuses.iter().flatten()).find(|c| c.name == name)
    };
    let mut cs = Vec::with_capacity(spec.containers.len());
    let all = spec.containers.iter().enumerate().map(|(i, c)| (c, false, i)).chain(spec.init_containers.iter().flatten().enumerate().map(|(i, c)| (c, true, i)));
    for (c, init, i) in all {
        let kind = if init { "initContainers" } else { "containers" };
        let spec_e = Entry::read(c.resources.as_ref().and_then(|r| r.requests.as_ref()), &|| format!("spec.{kind}[{i}].resources.requests"), &mut errors);
        let st = find_status(&c.name);
        let allocated = st.and_then(|s| s.allocated_resources.as_ref()).map(|l| Entry::read(Some(l), &|| format!("status.containerStatuses[{}].allocatedResources", c.name), &mut errors));
        let actuated = st
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .map(|l| Entry::read(Some(l), &|| format!("status.containerStatuses[{}].resources.requests", c.name), &mut errors));
        cs.push(ContainerReqs { spec: spec_e, allocated, actuated, init, restartable: init && c.restart_policy.as_deref() == Some("Always") });
    }
    let infeasible = status.is_some_and(|s| {
        s.conditions.iter().flatten().find(|c| c.type_ == "PodResizePending").is_some_and(|c| c.reason.as_deref() == Some("Infeasible"))
    });
    let containers = |d: Defaults| -> Entry {
        if status.is_none() {
            return aggregate(&cs, Source::Spec, false, d);
        }
        let mut e = aggregate(&cs, Source::Allocated, infeasible, d);
        e.max_with(&aggregate(&cs, Source::Actuated, infeasible, d));
        if !infeasible {
            e.max_with(&aggregate(&cs, Source::Spec, false, d));
        }
        e
    };
    let pod_level = spec.resources.as_ref().and_then(|r| r.requests.as_ref()).filter(|l| l.keys().any(|k| pod_level_supported(k)));
    let pod_level = pod_level.map(|l| {
        let supported: std::collections::BTreeMap<_, _> = l.iter().filter(|(k, _)| pod_level_supported(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
        (Entry::read(Some(&supported), &|| "spec.resources.requests".into(), &mut errors), supported)
    });
    let overhead = spec.overhead.as_ref().map(|o| Entry::read(Some(o), &|| "spec.overhead".into(), &mut errors));
    let finish = |mut e: Entry| -> Entry {
        if let Some((pl, names)) = &pod_level {
            for n in names.keys() {
                e.r.set(n, pl.r.get(n));
            }
            e.has_cpu |= pl.has_cpu;
            e.has_mem |= pl.has_mem;
        }
        if let Some(o) = &overhead {
            e.add(o);
        }
        e
    };
    let req = finish(containers(Defaults::default()));
    // upstream `getNonMissingContainerRequests`: without pod-level requests every
    // container that names no cpu / memory counts the default; with them, only
    // a resource named at no level gets the default.
    let d = match pod_level {
        None => Defaults { cpu: Some(resources::DEFAULT_MILLI_CPU_REQUEST), memory: Some(resources::DEFAULT_MEMORY_REQUEST) },
        Some(_) => Defaults {
            cpu: (!req.has_cpu).then_some(resources::DEFAULT_MILLI_CPU_REQUEST),
            memory: (!req.has_mem).then_some(resources::DEFAULT_MEMORY_REQUEST),
        },
    };
    let nz = if d.cpu.is_none() && d.memory.is_none() { req.r.clone() } else { finish(containers(d)).r };
    (EffectiveRequests { non_zero_cpu: nz.milli_cpu, non_zero_memory: nz.memory, requests: req.r }, errors)
}

// A pod's scheduling signature (upstream's opportunistic batching, KEP-5598):
// two pending pods with the same signature get the same Filter verdict and
// the same raw Score from every node-local plugin on the same node, so a
// cycle may reuse the previous pod's per-node results for the nodes that did
// not change since.
//
// The signature is conservative: it covers every field of the compact pod
// view except the pod's identity and timestamps (uid, name, creation and
// start time, nomination), hashed through `PodInfo`'s derived `Hash`, so a
// field added to [`PodInfo`] later is covered without anyone remembering
// to add it here (its type must be `Hash` for the crate to build).
//
// One exception: the name of the claim a pod's ResourceClaimTemplate made
// for it (every pod has its own) is left out, so that pods of one template
// can share a signature. What their claims ask for is not in the pod: the
// DynamicResources plugin adds it to the cycle's signature from the claims
// themselves (`Plugin::sign_pod` in the engine), and leaves pods whose
// claims are allocated already unsigned.

/// The scheduling signature of `p` (never 0; 0 means "no signature"), see above.
fn signature(p: &PodInfo) -> u64 {
    let mut shape = p.clone();
    shape.uid = String::new();
    shape.name = String::new();
    shape.created_ms = 0;
    shape.start_ms = 0;
    shape.nominated_node = None;
    shape.signature = 0;
    for c in &mut shape.resource_claims {
        if let ClaimSource::FromTemplate(Some(Some(name))) = &mut c.source {
            name.clear();
        }
    }
    // The derived `Hash` reads every field (fixed keys: equal pods, equal
    // signatures, in every process).
    let mut h = DefaultHasher::new();
    shape.hash(&mut h);
    h.finish().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(v: serde_json::Value) -> Arc<PodInfo> {
        let pod: core::Pod = serde_json::from_value(v).unwrap_or_default();
        PodInfo::from_pod(&pod)
    }

    fn c(name: &str, req: serde_json::Value) -> serde_json::Value {
        json!({"name": name, "image": "i", "resources": {"requests": req}})
    }

    const MI: i64 = 1024 * 1024;

    /// Per container, the resources DRA may back, with the resource's index
    /// among the container's sorted request names; sidecars are long-lived.
    #[test]
    fn extended_containers_number_resources_as_upstream() {
        let mut sidecar = c("side", json!({"example.com/nic": "1"}));
        sidecar["restartPolicy"] = json!("Always");
        let p = info(json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [c("init", json!({"example.com/gpu": "2"})), sidecar],
            "containers": [c("main", json!({"cpu": "1", "example.com/gpu": "1", "deviceclass.resource.kubernetes.io/fpga": "1", "memory": "1Gi"})), c("plain", json!({"cpu": "1"}))]}}));
        type Row<'a> = (usize, &'a str, bool, Vec<(&'a str, usize, i64)>);
        let got: Vec<Row> = p.extended_containers.iter().map(|c| (c.index, c.name.as_str(), c.short_lived, c.resources.iter().map(|r| (r.0.as_str(), r.1, r.2)).collect())).collect();
        assert_eq!(
            got,
            vec![
                (0, "init", true, vec![("example.com/gpu", 0, 2)]),
                (1, "side", false, vec![("example.com/nic", 0, 1)]),
                (2, "main", false, vec![("deviceclass.resource.kubernetes.io/fpga", 1, 1), ("example.com/gpu", 2, 1)]),
            ]
        );
    }

    #[test]
    fn a_bound_pod_keeps_what_existing_pods_are_read_for() {
        use crate::testing::pod;
        let anti = core::Affinity {
            pod_anti_affinity: Some(core::PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![core::PodAffinityTerm { label_selector: Some(crate::testing::selector(&[("app", "w")])), topology_key: "zone".into(), ..Default::default() }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let shape = |b: crate::testing::PodBuilder| {
            b.label("app", "w").req("1", "1Gi").image("img").host_port(80, "TCP", "").toleration("k", None, "NoSchedule").node_selector("pool", "p").spread(1, "zone", "DoNotSchedule", &[("app", "w")]).gate("g").affinity(anti.clone())
        };
        let pending = shape(pod("p")).info();
        let bound = shape(pod("p")).node("n").info();
        assert!(!pending.tolerations.is_empty() && pending.node_selector.is_some() && !pending.spread_constraints.is_empty());
        assert!(!pending.images.is_empty() && !pending.scheduling_gates.is_empty());
        // What any plugin reads of an existing pod is there ...
        assert_eq!((bound.labels.get("app"), bound.requests.milli_cpu, bound.host_ports.len(), bound.required_anti_affinity.len()), (Some("w"), 1000, 1, 1));
        // ... and what only the pod being scheduled is asked for is not.
        assert!(bound.tolerations.is_empty() && bound.node_selector.is_none() && bound.required_node_affinity.is_none());
        assert!(bound.spread_constraints.is_empty() && bound.images.is_empty() && bound.scheduling_gates.is_empty() && bound.required_features.is_empty());
    }

    #[test]
    fn containers_init_sidecars_overhead() {
        let p = info(json!({"metadata": {"name": "p"}, "spec": {
            "containers": [c("a", json!({"cpu": "100m", "memory": "100Mi"})), c("b", json!({"cpu": "200m"}))],
            "initContainers": [
                {"name": "side", "image": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
                c("init", json!({"cpu": "1", "memory": "1Gi"}))
            ],
            "overhead": {"cpu": "10m"}
        }}));
        // max(100+200+50, 1000+50) + 10 overhead.
        assert_eq!(p.requests.milli_cpu, 1060);
        assert_eq!(p.requests.memory, 1024 * MI);
        // Scoring: b and the sidecar name no memory (200Mi each): max(100+200+200, 1024+200) Mi.
        assert_eq!(p.non_zero_memory, 1224 * MI);
        assert_eq!(p.non_zero_cpu, 1060);
    }

    #[test]
    fn pod_level_requests_replace_container_sums() {
        let p = info(json!({"metadata": {"name": "p"}, "spec": {
            "resources": {"requests": {"cpu": "2", "hugepages-2Mi": "4Mi", "ephemeral-storage": "1Gi"}},
            "containers": [c("a", json!({"cpu": "100m", "ephemeral-storage": "10Mi"})), {"name": "b", "image": "i"}]
        }}));
        assert_eq!(p.requests.milli_cpu, 2000);
        assert_eq!(p.requests.scalar("hugepages-2Mi"), 4 * MI);
        // ephemeral-storage is not a pod-level resource: the container sum stays.
        assert_eq!(p.requests.ephemeral_storage, 10 * MI);
        assert_eq!(p.non_zero_cpu, 2000);
        // No level names memory: each container counts the 200Mi default.
        assert_eq!(p.non_zero_memory, 400 * MI);
        // Pod-level memory only; a container names cpu, so no cpu default applies.
        let q = info(json!({"metadata": {"name": "q"}, "spec": {
            "resources": {"requests": {"memory": "1Gi"}},
            "containers": [c("a", json!({"cpu": "100m"})), {"name": "b", "image": "i"}]
        }}));
        assert_eq!((q.non_zero_cpu, q.non_zero_memory), (100, 1024 * MI));
        // Without pod-level requests every container gets the defaults.
        let r = info(json!({"metadata": {"name": "r"}, "spec": {"containers": [c("a", json!({"cpu": "100m"})), {"name": "b", "image": "i"}]}}));
        assert_eq!((r.non_zero_cpu, r.non_zero_memory), (200, 400 * MI));
    }

    fn resized(reason: Option<&str>, bound: bool) -> Arc<PodInfo> {
        let mut v = json!({"metadata": {"name": "p"}, "spec": {
            "containers": [c("a", json!({"cpu": "6", "memory": "20M"}))]
        }, "status": {
            "containerStatuses": [{"name": "a", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                "allocatedResources": {"cpu": "4", "memory": "30M"},
                "resources": {"requests": {"cpu": "2", "memory": "10M"}}}]
        }});
        if bound {
            v["spec"]["nodeName"] = json!("n");
        }
        if let Some(r) = reason {
            v["status"]["conditions"] = json!([{"type": "PodResizePending", "status": "True", "reason": r}]);
        }
        info(v)
    }

    #[test]
    fn bound_pods_count_resized_resources() {
        // In progress: max(spec, allocated, actuated) per resource.
        let p = resized(None, true);
        assert_eq!((p.requests.milli_cpu, p.requests.memory), (6000, 30_000_000));
        // Infeasible: the spec is ignored, max(allocated, actuated).
        let p = resized(Some("Infeasible"), true);
        assert_eq!((p.requests.milli_cpu, p.requests.memory), (4000, 30_000_000));
        // Deferred counts like in progress.
        let p = resized(Some("Deferred"), true);
        assert_eq!(p.requests.milli_cpu, 6000);
        // A pending pod is accounted from its spec.
        let p = resized(None, false);
        assert_eq!((p.requests.milli_cpu, p.requests.memory), (6000, 20_000_000));
    }

    #[test]
    fn bad_quantity_names_the_field() {
        let p = info(json!({"metadata": {"name": "p"}, "spec": {"containers": [], "resources": {"requests": {"cpu": "lots"}}}}));
        assert!(p.errors.iter().any(|e| e.message.starts_with("spec.resources.requests[cpu]")), "{:?}", p.errors);
    }

    #[test]
    fn required_features() {
        let p = info(json!({"metadata": {"name": "p"}, "spec": {"hostNetwork": true, "hostUsers": false, "containers": [
            {"name": "a", "image": "i", "restartPolicy": "Never", "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]}
        ]}}));
        assert_eq!(p.required_features, vec!["RestartAllContainersOnContainerExits", "UserNamespacesHostNetworkSupport"]);
        assert!(info(json!({"metadata": {"name": "q"}, "spec": {"hostNetwork": true, "containers": []}})).required_features.is_empty());
    }

    #[test]
    fn signature_ignores_identity_but_not_the_spec() {
        let a = PodInfo { uid: "a".into(), name: "a".into(), created_ms: 1, ..Default::default() };
        let b = PodInfo { uid: "b".into(), name: "b".into(), created_ms: 2, ..Default::default() };
        assert_eq!(signature(&a), signature(&b));
        let mut c = b.clone();
        c.non_zero_cpu = 5;
        assert_ne!(signature(&a), signature(&c));
        let mut d = b.clone();
        d.images.push("x".into());
        assert_ne!(signature(&a), signature(&d));
        assert_ne!(signature(&a), 0);
        // Fields deep in the view count too.
        let mut e = b.clone();
        e.required_features.push("x");
        assert_ne!(signature(&a), signature(&e));
        let mut f = b.clone();
        f.requests.milli_cpu = 1;
        assert_ne!(signature(&a), signature(&f));
        let mut g = b.clone();
        g.namespace = "other".into();
        assert_ne!(signature(&a), signature(&g));
        let mut n = b.clone();
        n.nominated_node = Some("n".into());
        n.start_ms = 9;
        assert_eq!(signature(&a), signature(&n));
        // The claim a template made for the pod does not count (the plugin
        // signs what it asks for); whether it exists, and named claims, do.
        let with = |source: ClaimSource| PodInfo { resource_claims: vec![PodClaim { name: "gpu".into(), source }], ..b.clone() };
        let t1 = with(ClaimSource::FromTemplate(Some(Some("b-gpu-x7k2p".into()))));
        let t2 = with(ClaimSource::FromTemplate(Some(Some("c-gpu-p2k7x".into()))));
        assert_eq!(signature(&t1), signature(&t2));
        assert_ne!(signature(&t1), signature(&a));
        assert_ne!(signature(&t1), signature(&with(ClaimSource::FromTemplate(None))));
        assert_ne!(signature(&t1), signature(&with(ClaimSource::FromTemplate(Some(None)))));
        assert_ne!(signature(&with(ClaimSource::Named("x".into()))), signature(&with(ClaimSource::Named("y".into()))));
    }
}
