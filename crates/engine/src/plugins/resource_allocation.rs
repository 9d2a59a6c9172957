//! Shared scoring of resource allocation, used by NodeResourcesFit's scoring
//! strategies and by NodeResourcesBalancedAllocation.

use serde::Deserialize;

use berth_model::resources::{is_scalar, CPU, EPHEMERAL_STORAGE, MEMORY};
use berth_model::{NodeInfo, PodInfo};

/// A resource and its weight in a score.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    /// Resource name.
    pub name: String,
    /// Weight (1..=100).
    #[serde(default)]
    pub weight: i64,
}

/// cpu:1, memory:1 (upstream's default for both plugins).
pub fn default_resources() -> Vec<ResourceSpec> {
    vec![ResourceSpec { name: CPU.into(), weight: 1 }, ResourceSpec { name: MEMORY.into(), weight: 1 }]
}

/// Checks resource specs, naming the field.
pub fn validate_resources(rs: &[ResourceSpec], path: &str) -> Result<(), String> {
    for (i, r) in rs.iter().enumerate() {
        if r.name.is_empty() {
            return Err(format!("{path}[{i}].name: must be non-empty"));
        }
        if !(1..=100).contains(&r.weight) {
            return Err(format!("{path}[{i}].weight: resource weight of {} should be in a range of 1-100, got {}", r.name, r.weight));
        }
    }
    Ok(())
}

/// A resource name resolved once, so hot loops compare no strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// cpu.
    Cpu,
    /// memory.
    Memory,
    /// ephemeral-storage.
    Ephemeral,
    /// Anything else (extended resources, hugepages).
    Scalar,
}

/// Resolves a resource name.
pub fn kind(name: &str) -> Kind {
    match name {
        CPU => Kind::Cpu,
        MEMORY => Kind::Memory,
        EPHEMERAL_STORAGE => Kind::Ephemeral,
        _ => Kind::Scalar,
    }
}

/// `pod_request` for a resolved resource.
pub fn pod_request_k(pod: &PodInfo, k: Kind, name: &str, use_requested: bool) -> i64 {
    match k {
        Kind::Cpu => if use_requested { pod.requests.milli_cpu } else { pod.non_zero_cpu },
        Kind::Memory => if use_requested { pod.requests.memory } else { pod.non_zero_memory },
        Kind::Ephemeral => pod.requests.ephemeral_storage,
        Kind::Scalar => pod.requests.scalar(name),
    }
}

/// `allocatable_and_requested` for a resolved resource.
pub fn allocatable_and_requested_k(node: &NodeInfo, k: Kind, name: &str, pod_req: i64, use_requested: bool) -> (i64, i64) {
    let alloc = &node.allocatable;
    match k {
        Kind::Cpu => (alloc.milli_cpu, if use_requested { node.requested.milli_cpu } else { node.non_zero_cpu } + pod_req),
        Kind::Memory => (alloc.memory, if use_requested { node.requested.memory } else { node.non_zero_memory } + pod_req),
        Kind::Ephemeral => (alloc.ephemeral_storage, node.requested.ephemeral_storage + pod_req),
        Kind::Scalar => allocatable_and_requested(node, name, pod_req, use_requested),
    }
}

/// The pod's request of `name` for scoring: with upstream's non-zero defaults
/// for cpu and memory unless `use_requested`.
pub fn pod_request(pod: &PodInfo, name: &str, use_requested: bool) -> i64 {
    match name {
        CPU if !use_requested => pod.non_zero_cpu,
        MEMORY if !use_requested => pod.non_zero_memory,
        _ => pod.requests.get(name),
    }
}

/// (allocatable, requested including the pod) of one resource on a node;
/// (0, 0) for a scalar resource the pod does not request, so it is left out.
pub fn allocatable_and_requested(node: &NodeInfo, name: &str, pod_req: i64, use_requested: bool) -> (i64, i64) {
    if pod_req == 0 && is_scalar(name) {
        return (0, 0);
    }
    let alloc = &node.allocatable;
    match name {
        CPU => (alloc.milli_cpu, if use_requested { node.requested.milli_cpu } else { node.non_zero_cpu } + pod_req),
        MEMORY => (alloc.memory, if use_requested { node.requested.memory } else { node.non_zero_memory } + pod_req),
        EPHEMERAL_STORAGE => (alloc.ephemeral_storage, node.requested.ephemeral_storage + pod_req),
        _ => {
            let a = alloc.scalar(name);
            if a == 0 && !alloc.scalar.iter().any(|(n, _)| n == name) {
                (0, 0)
            } else {
                (a, node.requested.scalar(name) + pod_req)
            }
        }
    }
}
