//! The in-tree plugins, one module each with its tests beside it, and the
//! registry that builds them from configuration.

pub mod balanced_allocation;
pub mod default_binder;
pub mod default_preemption;
pub mod dynamic_resources;
pub mod gang_scheduling;
pub mod helper;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_declared_features;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_volume_limits;
pub mod node_unschedulable;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod resource_allocation;
pub mod scheduling_gates;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

mod registry;

pub use registry::{build, default_plugins, known, DefaultPlugin};
