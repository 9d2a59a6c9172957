//! Cluster state as the scheduler sees it: nodes with their pods, namespaces,
//! PodDisruptionBudgets and nominated pods.
//!
//! One owner (the scheduling loop, or an offline command) mutates it between
//! cycles; a cycle reads it through `&Snapshot`, so no copy is taken per cycle.

mod state;
pub mod workloads;
pub mod storage;
pub mod groups;

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::selector::{Labels, Selector};
use crate::model::{NodeInfo, NodeSpec, PodInfo};

pub use state::{Cache, PodState};

/// A PodDisruptionBudget, compiled.
#[derive(Clone, Debug)]
pub struct Pdb {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// spec.selector (nothing when missing or empty, as preemption reads it).
    pub selector: Selector,
    /// status.disruptionsAllowed.
    pub disruptions_allowed: i64,
    /// Names of the pods in status.disruptedPods (already being evicted: not counted again).
    pub disrupted_pods: Vec<String>,
}

impl Pdb {
    /// Compiles a PodDisruptionBudget. A missing or empty selector selects
    /// nothing (as preemption reads it); an invalid one is an error naming the field.
    pub fn from_api(p: &k8s_openapi::api::policy::v1::PodDisruptionBudget) -> Result<Pdb, String> {
        let sel = p.spec.as_ref().and_then(|s| s.selector.as_ref());
        let non_empty = sel.is_some_and(|s| s.match_labels.as_ref().is_some_and(|m| !m.is_empty()) || s.match_expressions.as_ref().is_some_and(|m| !m.is_empty()));
        let selector = if non_empty { Selector::from_label_selector(sel, "spec.selector")? } else { Selector::nothing() };
        let status = p.status.as_ref();
        Ok(Pdb {
            namespace: p.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            name: p.metadata.name.clone().unwrap_or_default(),
            selector,
            disruptions_allowed: i64::from(status.and_then(|s| s.disruptions_allowed).unwrap_or(0)),
            disrupted_pods: status.and_then(|s| s.disrupted_pods.as_ref()).map(|m| m.keys().cloned().collect()).unwrap_or_default(),
        })
    }
}

/// The cluster state read by scheduling cycles.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Nodes in a dense vector; indexes are stable until a node is removed.
    pub nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    /// Namespace name → labels.
    pub namespaces: HashMap<String, Labels>,
    /// PodDisruptionBudgets.
    pub pdbs: Vec<Pdb>,
    /// Pods bound to nodes not (yet) known, by node name.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
    /// Bound pod uid → node name.
    pod_node: HashMap<String, String>,
    /// Pending pods nominated to a node (status.nominatedNodeName), by node name.
    pub nominated: HashMap<String, Vec<Arc<PodInfo>>>,
    /// Image name → number of nodes that have it.
    image_nodes: HashMap<String, usize>,
    /// Services, ReplicationControllers, ReplicaSets and StatefulSets (default topology spreading).
    pub workloads: workloads::Workloads,
    /// Storage objects (claims, PVs, classes, CSI objects) and assumed volume decisions.
    pub storage: storage::Storage,
    /// Pod groups (gang scheduling) and the topology domain a group cycle is trying.
    pub groups: groups::Groups,
}

impl Snapshot {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    /// Index of the named node.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The named node.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.node_index(name).map(|i| &self.nodes[i])
    }

    /// Number of nodes that have the image.
    pub fn image_node_count(&self, image: &str) -> usize {
        self.image_nodes.get(image).copied().unwrap_or(0)
    }

    fn count_images(&mut self, spec: &NodeSpec, add: bool) {
        for name in spec.images.keys() {
            let c = self.image_nodes.entry(name.clone()).or_default();
            if add {
                *c += 1;
            } else {
                *c = c.saturating_sub(1);
            }
        }
    }

    /// Adds or replaces a node, keeping its pods.
    pub fn upsert_node(&mut self, spec: NodeSpec) {
        let spec = Arc::new(spec);
        self.count_images(&spec, true);
        if let Some(i) = self.node_index(&spec.name) {
            let old = self.nodes[i].node.clone();
            self.count_images(&old, false);
            let ni = &mut self.nodes[i];
            ni.set_node(spec);
            return;
        }
        let mut ni = NodeInfo::new(spec.clone());
        ni.index = self.nodes.len();
        for p in self.orphans.remove(&spec.name).unwrap_or_default() {
            ni.add_pod(p);
        }
        self.index.insert(spec.name.clone(), self.nodes.len());
        self.nodes.push(ni);
    }

    /// Removes a node; its pods are kept aside until the node returns or they go.
    pub fn remove_node(&mut self, name: &str) -> bool {
        let Some(i) = self.index.remove(name) else { return false };
        let ni = self.nodes.swap_remove(i);
        let spec = ni.node.clone();
        self.count_images(&spec, false);
        if i < self.nodes.len() {
            self.nodes[i].index = i;
            let moved = self.nodes[i].name().to_string();
            self.index.insert(moved, i);
        }
        if !ni.pods.is_empty() {
            self.orphans.insert(name.to_string(), ni.pods);
        }
        true
    }

    /// Adds or updates a bound pod (spec.nodeName set) on its node. Pods that
    /// have finished (Succeeded/Failed) hold nothing and are dropped.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        let Some(node) = pod.node_name.clone() else { return };
        self.remove_pod(&pod.uid);
        if pod.terminated {
            return;
        }
        self.pod_node.insert(pod.uid.clone(), node.clone());
        match self.node_index(&node) {
            Some(i) => self.nodes[i].add_pod(pod),
            None => self.orphans.entry(node).or_default().push(pod),
        }
    }

    /// Removes a bound pod by uid; returns it when it was there.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let node = self.pod_node.remove(uid)?;
        match self.node_index(&node) {
            Some(i) => self.nodes[i].remove_pod(uid),
            None => {
                let v = self.orphans.get_mut(&node)?;
                let j = v.iter().position(|p| p.uid == uid)?;
                Some(v.swap_remove(j))
            }
        }
    }

    /// The node a bound pod is on.
    pub fn pod_node(&self, uid: &str) -> Option<&str> {
        self.pod_node.get(uid).map(String::as_str)
    }

    /// Records that a pending pod is nominated to a node (replacing any earlier nomination).
    pub fn nominate(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.clear_nomination(&pod.uid);
        self.nominated.entry(node.to_string()).or_default().push(pod);
    }

    /// Forgets a pod's nomination.
    pub fn clear_nomination(&mut self, uid: &str) {
        for v in self.nominated.values_mut() {
            v.retain(|p| p.uid != uid);
        }
        self.nominated.retain(|_, v| !v.is_empty());
    }

    /// Total number of bound pods on known nodes.
    pub fn pod_count(&self) -> usize {
        self.nodes.iter().map(|n| n.pods.len()).sum()
    }
}
