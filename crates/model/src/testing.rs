//! Fluent builders for tests: `pod("p").label("app", "web").req("100m", "1Gi")`,
//! `node("n1").label("zone", "a").alloc("4", "8Gi", 110)`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use crate::{NodeSpec, PodInfo};

/// A pod under construction.
#[derive(Clone, Debug, Default)]
pub struct PodBuilder {
    /// The object built so far.
    pub pod: core::Pod,
}

/// Starts a pod in namespace "default" with one container and no requests.
pub fn pod(name: &str) -> PodBuilder {
    let mut p = core::Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    p.spec = Some(core::PodSpec {
        containers: vec![core::Container { name: "c0".into(), image: Some("registry.k8s.io/pause:3.10".into()), ..Default::default() }],
        ..Default::default()
    });
    PodBuilder { pod: p }
}

impl PodBuilder {
    fn spec(&mut self) -> &mut core::PodSpec {
        self.pod.spec.get_or_insert_with(Default::default)
    }

    /// Sets the namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.into());
        let name = self.pod.metadata.name.clone().unwrap_or_default();
        self.pod.metadata.uid = Some(format!("uid-{ns}-{name}"));
        self
    }

    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.pod.metadata.labels.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }

    /// Sets spec.priority.
    pub fn priority(mut self, p: i32) -> Self {
        self.spec().priority = Some(p);
        self
    }

    /// Binds the pod to a node.
    pub fn node(mut self, n: &str) -> Self {
        self.spec().node_name = Some(n.into());
        self
    }

    /// Sets the first container's cpu and memory requests ("" leaves one out).
    pub fn req(mut self, cpu: &str, mem: &str) -> Self {
        let mut m = BTreeMap::new();
        if !cpu.is_empty() {
            m.insert("cpu".to_string(), Quantity(cpu.into()));
        }
        if !mem.is_empty() {
            m.insert("memory".to_string(), Quantity(mem.into()));
        }
        self.spec().containers[0].resources = Some(core::ResourceRequirements { requests: Some(m), ..Default::default() });
        self
    }

    /// Sets one request of the first container.
    pub fn request(mut self, name: &str, q: &str) -> Self {
        let c = &mut self.spec().containers[0];
        c.resources.get_or_insert_with(Default::default).requests.get_or_insert_with(BTreeMap::new).insert(name.into(), Quantity(q.into()));
        self
    }

    /// Adds a container with an image.
    pub fn image(mut self, image: &str) -> Self {
        let n = self.spec().containers.len();
        self.spec().containers.push(core::Container { name: format!("c{n}"), image: Some(image.into()), ..Default::default() });
        self
    }

    /// Adds a host port to the first container.
    pub fn host_port(mut self, port: i32, protocol: &str, ip: &str) -> Self {
        let c = &mut self.spec().containers[0];
        c.ports.get_or_insert_with(Vec::new).push(core::ContainerPort {
            container_port: port,
            host_port: Some(port),
            protocol: Some(protocol.into()),
            host_ip: if ip.is_empty() { None } else { Some(ip.into()) },
            ..Default::default()
        });
        self
    }

    /// Adds a toleration (operator Exists when value is None).
    pub fn toleration(mut self, key: &str, value: Option<&str>, effect: &str) -> Self {
        self.spec().tolerations.get_or_insert_with(Vec::new).push(core::Toleration {
            key: Some(key.into()),
            operator: Some(if value.is_some() { "Equal" } else { "Exists" }.into()),
            value: value.map(Into::into),
            effect: if effect.is_empty() { None } else { Some(effect.into()) },
            ..Default::default()
        });
        self
    }

    /// Adds a nodeSelector entry.
    pub fn node_selector(mut self, k: &str, v: &str) -> Self {
        self.spec().node_selector.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }

    /// Sets the affinity.
    pub fn affinity(mut self, a: core::Affinity) -> Self {
        self.spec().affinity = Some(a);
        self
    }

    /// Adds a topology spread constraint selecting `sel` (key → value, "" for Exists).
    pub fn spread(mut self, max_skew: i32, key: &str, when: &str, sel: &[(&str, &str)]) -> Self {
        self.spec().topology_spread_constraints.get_or_insert_with(Vec::new).push(core::TopologySpreadConstraint {
            max_skew,
            topology_key: key.into(),
            when_unsatisfiable: when.into(),
            label_selector: Some(selector(sel)),
            ..Default::default()
        });
        self
    }

    /// Adds a topology spread constraint as given (for minDomains, policies, matchLabelKeys).
    pub fn spread_constraint(mut self, c: core::TopologySpreadConstraint) -> Self {
        self.spec().topology_spread_constraints.get_or_insert_with(Vec::new).push(c);
        self
    }

    /// Adds a scheduling gate.
    pub fn gate(mut self, name: &str) -> Self {
        self.spec().scheduling_gates.get_or_insert_with(Vec::new).push(core::PodSchedulingGate { name: name.into() });
        self
    }

    /// Sets the phase.
    pub fn phase(mut self, phase: &str) -> Self {
        self.pod.status.get_or_insert_with(Default::default).phase = Some(phase.into());
        self
    }

    /// Sets creation time (ms since epoch).
    pub fn created(mut self, ms: i64) -> Self {
        if let Ok(t) = k8s_openapi::jiff::Timestamp::from_millisecond(ms) {
            self.pod.metadata.creation_timestamp = Some(meta::Time(t));
        }
        self
    }

    /// Marks the pod terminating.
    pub fn terminating(mut self) -> Self {
        if let Ok(t) = k8s_openapi::jiff::Timestamp::from_millisecond(1) {
            self.pod.metadata.deletion_timestamp = Some(meta::Time(t));
        }
        self
    }

    /// Marks the pod terminating because the scheduler preempted it
    /// (DisruptionTarget condition with reason PreemptionByScheduler).
    pub fn preempted(self) -> Self {
        let mut b = self.terminating();
        b.pod.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new).push(core::PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("PreemptionByScheduler".into()),
            ..Default::default()
        });
        b
    }

    /// Sets status.startTime (ms since epoch).
    pub fn started(mut self, ms: i64) -> Self {
        if let Ok(t) = k8s_openapi::jiff::Timestamp::from_millisecond(ms) {
            self.pod.status.get_or_insert_with(Default::default).start_time = Some(meta::Time(t));
        }
        self
    }

    /// Sets status.nominatedNodeName.
    pub fn nominated(mut self, node: &str) -> Self {
        self.pod.status.get_or_insert_with(Default::default).nominated_node_name = Some(node.into());
        self
    }

    /// Sets preemptionPolicy Never.
    pub fn preempt_never(mut self) -> Self {
        self.spec().preemption_policy = Some("Never".into());
        self
    }

    /// Compiles the pod.
    pub fn info(&self) -> Arc<PodInfo> {
        PodInfo::from_pod(&self.pod)
    }
}

/// A label selector from (key, value) pairs; an empty value means Exists.
pub fn selector(sel: &[(&str, &str)]) -> meta::LabelSelector {
    let mut ml = BTreeMap::new();
    let mut me = Vec::new();
    for (k, v) in sel {
        if v.is_empty() {
            me.push(meta::LabelSelectorRequirement { key: (*k).into(), operator: "Exists".into(), values: None });
        } else {
            ml.insert((*k).to_string(), (*v).to_string());
        }
    }
    meta::LabelSelector { match_labels: Some(ml), match_expressions: Some(me) }
}

/// A node under construction.
#[derive(Clone, Debug, Default)]
pub struct NodeBuilder {
    /// The object built so far.
    pub node: core::Node,
}

/// Starts a node with 4 CPU, 32Gi and 110 pods allocatable, labelled with its hostname.
pub fn node(name: &str) -> NodeBuilder {
    let mut n = core::Node::default();
    n.metadata.name = Some(name.into());
    NodeBuilder { node: n }.label("kubernetes.io/hostname", name).alloc("4", "32Gi", 110)
}

impl NodeBuilder {
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.node.metadata.labels.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }

    /// Sets allocatable cpu, memory and pods.
    pub fn alloc(mut self, cpu: &str, mem: &str, pods: i64) -> Self {
        let mut m = BTreeMap::new();
        m.insert("cpu".to_string(), Quantity(cpu.into()));
        m.insert("memory".to_string(), Quantity(mem.into()));
        m.insert("pods".to_string(), Quantity(pods.to_string()));
        let st = self.node.status.get_or_insert_with(Default::default);
        st.allocatable = Some(m.clone());
        st.capacity = Some(m);
        self
    }

    /// Sets one allocatable resource.
    pub fn resource(mut self, name: &str, q: &str) -> Self {
        let st = self.node.status.get_or_insert_with(Default::default);
        st.allocatable.get_or_insert_with(BTreeMap::new).insert(name.into(), Quantity(q.into()));
        self
    }

    /// Adds a taint.
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        let spec = self.node.spec.get_or_insert_with(Default::default);
        spec.taints.get_or_insert_with(Vec::new).push(core::Taint {
            key: key.into(),
            value: if value.is_empty() { None } else { Some(value.into()) },
            effect: effect.into(),
            ..Default::default()
        });
        self
    }

    /// Marks the node unschedulable.
    pub fn unschedulable(mut self) -> Self {
        self.node.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        self
    }

    /// Adds an image of the given size.
    pub fn image(mut self, name: &str, size: i64) -> Self {
        let st = self.node.status.get_or_insert_with(Default::default);
        st.images.get_or_insert_with(Vec::new).push(core::ContainerImage { names: Some(vec![name.into()]), size_bytes: Some(size) });
        self
    }

    /// Compiles the node.
    pub fn spec(&self) -> NodeSpec {
        NodeSpec::from_node(&self.node)
    }
}

/// A small deterministic generator (xorshift) for randomized tests.
pub struct Rng(pub u64);

impl Rng {
    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}
