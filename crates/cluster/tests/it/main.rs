//! The local cluster's tests, in one binary: through kube-rs and kubectl,
//! its controllers, faults, OpenAPI and dynamic resource allocation.
//! No scheduler is linked.

mod cluster_apply;
mod cluster_clients;
mod cluster_crd;
mod cluster_dra;
mod cluster_faults;
mod cluster_kube;
mod cluster_kubectl;
mod cluster_lifecycle;
mod cluster_limits;
mod cluster_openapi;
mod cluster_recovery;
mod cluster_rbac;
mod cluster_scale;
mod cluster_storage;
mod cluster_validation;
mod cluster_watch_memory;
use berth_cluster::testing as support;

/// jemalloc, as the berth binary runs the cluster (see crates/berth): what
/// the memory measurements see is what `berth cluster` would.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
