//! `NodeInfo`: a node and the aggregates of the pods bound to it.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use super::pod::{HostPort, PodInfo};
use super::resources::Resources;
use super::selector::Labels;
use super::taints::Taint;

/// Node fields the scheduler reads, compiled once per node version.
#[derive(Clone, Debug, Default)]
pub struct NodeSpec {
    /// metadata.name.
    pub name: String,
    /// metadata.labels.
    pub labels: Labels,
    /// spec.taints.
    pub taints: Vec<Taint>,
    /// spec.unschedulable.
    pub unschedulable: bool,
    /// status.allocatable.
    pub allocatable: Resources,
    /// Image name → size in bytes, from status.images (every name of an image).
    pub images: HashMap<String, i64>,
    /// Problems reading the node (bad quantities); such a node's bad fields count as 0.
    pub errors: Vec<String>,
    /// status.declaredFeatures (NodeDeclaredFeatures).
    pub declared_features: Vec<String>,
}

impl NodeSpec {
    /// Compiles a node.
    pub fn from_node(node: &core::Node) -> NodeSpec {
        let mut n = NodeSpec {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            ..Default::default()
        };
        if let Some(spec) = &node.spec {
            n.unschedulable = spec.unschedulable.unwrap_or(false);
            n.taints = spec.taints.iter().flatten().map(Taint::from_api).collect();
        }
        if let Some(st) = &node.status {
            n.declared_features = st.declared_features.clone().unwrap_or_default();
            match Resources::from_list(st.allocatable.as_ref(), "status.allocatable") {
                Ok(r) => n.allocatable = r,
                Err(e) => n.errors.push(e),
            }
            for img in st.images.iter().flatten() {
                let size = img.size_bytes.unwrap_or(0);
                for name in img.names.iter().flatten() {
                    n.images.insert(name.clone(), size);
                }
            }
        }
        n
    }
}

/// A node with the pods bound to it and their aggregates, updated incrementally.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    /// The node.
    pub node: Arc<NodeSpec>,
    /// Pods on the node (including assumed and terminating ones).
    pub pods: Vec<Arc<PodInfo>>,
    /// Sum of the requests of pods that hold resources.
    pub requested: Resources,
    /// Sum of non-zero CPU requests (scoring defaults applied).
    pub non_zero_cpu: i64,
    /// Sum of non-zero memory requests.
    pub non_zero_memory: i64,
    /// Host ports in use.
    pub used_ports: Vec<HostPort>,
    /// Number of pods with any pod (anti-)affinity term.
    pub pods_with_affinity: usize,
    /// Number of pods with required anti-affinity terms.
    pub pods_with_required_anti_affinity: usize,
    /// Changed on every change, to a value no other node state ever had (so
    /// that (node object, generation) identifies one state of one node, even
    /// across clones of a snapshot).
    pub generation: u64,
    /// Copy of the node's allocatable, kept inline so that hot loops do not
    /// chase the `node` pointer for every node.
    pub allocatable: Resources,
    /// Copy of spec.unschedulable.
    pub unschedulable: bool,
    /// The node has taints.
    pub has_taints: bool,
    /// The node reports images.
    pub has_images: bool,
    /// Position in the snapshot's node vector (kept current by the snapshot),
    /// so that plugins can index per-cycle arrays instead of hashing names.
    pub index: usize,
}

/// A generation no node state has had before.
fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl NodeInfo {
    /// A node with no pods.
    pub fn new(node: Arc<NodeSpec>) -> Self {
        let mut ni = NodeInfo::default();
        ni.set_node(node);
        ni
    }

    /// Replaces the node object (its pods stay).
    pub fn set_node(&mut self, node: Arc<NodeSpec>) {
        self.allocatable = node.allocatable.clone();
        self.unschedulable = node.unschedulable;
        self.has_taints = !node.taints.is_empty();
        self.has_images = !node.images.is_empty();
        self.node = node;
        self.generation = next_generation();
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.node.name
    }

    /// Number of pods counted against the node's pod capacity.
    pub fn pod_count(&self) -> i64 {
        self.pods.iter().filter(|p| p.holds_resources()).count() as i64
    }

    /// Adds a pod and its aggregates.
    pub fn add_pod(&mut self, p: Arc<PodInfo>) {
        if p.holds_resources() {
            self.requested.add(&p.requests);
            self.non_zero_cpu = self.non_zero_cpu.saturating_add(p.non_zero_cpu);
            self.non_zero_memory = self.non_zero_memory.saturating_add(p.non_zero_memory);
            self.used_ports.extend(p.host_ports.iter().cloned());
        }
        if p.has_affinity() {
            self.pods_with_affinity += 1;
        }
        if !p.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity += 1;
        }
        self.pods.push(p);
        self.generation = next_generation();
    }

    /// Removes the pod with this uid; returns it when it was there.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let i = self.pods.iter().position(|p| p.uid == uid)?;
        let p = self.pods.swap_remove(i);
        if p.holds_resources() {
            self.requested.sub(&p.requests);
            self.non_zero_cpu = self.non_zero_cpu.saturating_sub(p.non_zero_cpu);
            self.non_zero_memory = self.non_zero_memory.saturating_sub(p.non_zero_memory);
            for hp in &p.host_ports {
                if let Some(j) = self.used_ports.iter().position(|u| u == hp) {
                    self.used_ports.swap_remove(j);
                }
            }
        }
        if p.has_affinity() {
            self.pods_with_affinity -= 1;
        }
        if !p.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity -= 1;
        }
        self.generation = next_generation();
        Some(p)
    }
}

/// Adds ":latest" to an image name without a tag, as upstream compares them
/// (ImageLocality, and the anonymizer of `berth dump`).
pub fn normalized_image_name(name: &str) -> String {
    let colon = name.rfind(':');
    let slash = name.rfind('/');
    if colon.map(|c| c as i64).unwrap_or(-1) <= slash.map(|s| s as i64).unwrap_or(-1) {
        format!("{name}:latest")
    } else {
        name.to_string()
    }
}


#[cfg(test)]
mod tests {
    use super::normalized_image_name;

    #[test]
    fn image_names_get_latest_when_untagged() {
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(normalized_image_name("reg:5000/nginx"), "reg:5000/nginx:latest");
        assert_eq!(normalized_image_name("nginx:1.2"), "nginx:1.2");
    }
}
