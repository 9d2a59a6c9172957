//! `PodInfo`: a pod compiled once per version for the scheduler.

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use super::resources::{self, Resources};
use super::selector::{Labels, NodeSelector, NodeSelectorTerm, Op, Requirement, Selector};
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
#[derive(Clone, Debug)]
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
#[derive(Clone, Debug)]
pub struct WeightedAffinityTerm {
    /// The term.
    pub term: AffinityTerm,
    /// Its weight, 1..=100.
    pub weight: i64,
}

/// A weighted preferred node affinity term.
#[derive(Clone, Debug)]
pub struct PreferredNodeTerm {
    /// The term.
    pub term: NodeSelectorTerm,
    /// Its weight.
    pub weight: i64,
}

/// `whenUnsatisfiable` of a topology spread constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenUnsatisfiable {
    /// A hard constraint (Filter).
    DoNotSchedule,
    /// A soft constraint (Score).
    ScheduleAnyway,
}

/// nodeAffinityPolicy / nodeTaintsPolicy of a spread constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InclusionPolicy {
    /// Only nodes that pass the pod's node affinity / tolerate its taints count.
    Honor,
    /// All nodes count.
    Ignore,
}

/// A compiled topology spread constraint.
#[derive(Clone, Debug)]
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

/// A field of the pod spec that cannot be evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// The plugin that would have read the field.
    pub plugin: &'static str,
    /// What is wrong, naming the field.
    pub message: String,
}

/// Everything the scheduler reads of a pod, computed once per pod version.
#[derive(Clone, Debug, Default)]
pub struct PodInfo {
    /// metadata.uid (namespace/name when the object has none).
    pub uid: String,
    /// metadata.namespace ("default" when unset).
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// metadata.labels.
    pub labels: Labels,
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
    pub node_selector: Option<Selector>,
    /// Required node affinity (None when unset).
    pub required_node_affinity: Option<NodeSelector>,
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
        Arc::new(Self::build(pod))
    }

    fn build(pod: &core::Pod) -> PodInfo {
        let meta = &pod.metadata;
        let mut p = PodInfo {
            namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
            name: meta.name.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
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
        p.scheduling_gates = spec.scheduling_gates.iter().flatten().map(|g| g.name.clone()).collect();
        p.images = spec.containers.iter().chain(spec.init_containers.iter().flatten()).filter_map(|c| c.image.clone()).collect();
        p.compute_requests(spec);
        p.compute_ports(spec);
        p.tolerations = spec.tolerations.iter().flatten().map(Toleration::from_api).collect();
        p.compute_node_affinity(spec);
        p.compute_pod_affinity(spec);
        p.compute_spread(spec);
        p.volumes = super::volumes::from_spec(&p.name, spec);
        p
    }

    fn compute_requests(&mut self, spec: &core::PodSpec) {
        let mut errors = Vec::new();
        let mut read = |c: &core::Container, kind: &str, i: usize| -> (Resources, i64, i64) {
            let path = format!("spec.{kind}[{i}].resources.requests");
            let list = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            let r = Resources::from_list(list, &path).unwrap_or_else(|e| {
                errors.push(SpecError { plugin: "NodeResourcesFit", message: e });
                Resources::default()
            });
            let has = |n: &str| list.is_some_and(|l| l.contains_key(n));
            let cpu = if has(resources::CPU) { r.milli_cpu } else { resources::DEFAULT_MILLI_CPU_REQUEST };
            let mem = if has(resources::MEMORY) { r.memory } else { resources::DEFAULT_MEMORY_REQUEST };
            (r, cpu, mem)
        };
        let mut reqs = Resources::default();
        let (mut nz_cpu, mut nz_mem) = (0i64, 0i64);
        for (i, c) in spec.containers.iter().enumerate() {
            let (r, cpu, mem) = read(c, "containers", i);
            reqs.add(&r);
            nz_cpu = nz_cpu.saturating_add(cpu);
            nz_mem = nz_mem.saturating_add(mem);
        }
        // Init containers run one at a time, each beside the restartable
        // (sidecar) init containers started before it; sidecars keep running
        // beside the regular containers.
        let mut sidecars = Resources::default();
        let (mut sc_cpu, mut sc_mem) = (0i64, 0i64);
        let mut init_max = Resources::default();
        let (mut init_cpu, mut init_mem) = (0i64, 0i64);
        for (i, c) in spec.init_containers.iter().flatten().enumerate() {
            let (r, cpu, mem) = read(c, "initContainers", i);
            if c.restart_policy.as_deref() == Some("Always") {
                reqs.add(&r);
                nz_cpu = nz_cpu.saturating_add(cpu);
                nz_mem = nz_mem.saturating_add(mem);
                sidecars.add(&r);
                sc_cpu = sc_cpu.saturating_add(cpu);
                sc_mem = sc_mem.saturating_add(mem);
                init_max.max_with(&sidecars);
                init_cpu = init_cpu.max(sc_cpu);
                init_mem = init_mem.max(sc_mem);
            } else {
                let mut t = r;
                t.add(&sidecars);
                init_max.max_with(&t);
                init_cpu = init_cpu.max(cpu.saturating_add(sc_cpu));
                init_mem = init_mem.max(mem.saturating_add(sc_mem));
            }
        }
        reqs.max_with(&init_max);
        nz_cpu = nz_cpu.max(init_cpu);
        nz_mem = nz_mem.max(init_mem);
        // Pod-level resources, where given, replace the container sum for the
        // resources they name.
        if let Some(pl) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
            match Resources::from_list(Some(pl), "spec.resources.requests") {
                Ok(r) => {
                    if pl.contains_key(resources::CPU) {
                        reqs.milli_cpu = r.milli_cpu;
                        nz_cpu = r.milli_cpu;
                    }
                    if pl.contains_key(resources::MEMORY) {
                        reqs.memory = r.memory;
                        nz_mem = r.memory;
                    }
                }
                Err(e) => errors.push(SpecError { plugin: "NodeResourcesFit", message: e }),
            }
        }
        if let Some(ov) = &spec.overhead {
            match Resources::from_list(Some(ov), "spec.overhead") {
                Ok(o) => {
                    reqs.add(&o);
                    nz_cpu = nz_cpu.saturating_add(o.milli_cpu);
                    nz_mem = nz_mem.saturating_add(o.memory);
                }
                Err(e) => errors.push(SpecError { plugin: "NodeResourcesFit", message: e }),
            }
        }
        self.requests = reqs;
        self.non_zero_cpu = nz_cpu;
        self.non_zero_memory = nz_mem;
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
            self.node_selector = Some(Selector::from_map(ns));
        }
        let Some(na) = spec.affinity.as_ref().and_then(|a| a.node_affinity.as_ref()) else { return };
        if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
            match NodeSelector::compile(req, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution") {
                Ok(s) => self.required_node_affinity = Some(s),
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
                selector.push(Requirement { key: k.clone(), op: Op::In(vec![v.clone()]) });
            }
        }
        for k in t.mismatch_label_keys.iter().flatten() {
            if let Some(v) = self.labels.get(k) {
                selector.push(Requirement { key: k.clone(), op: Op::NotIn(vec![v.clone()]) });
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
                    selector.push(Requirement { key: k.clone(), op: Op::In(vec![v.clone()]) });
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
