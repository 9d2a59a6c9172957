//! The plugin registry: every plugin berth knows, its default weight, and how
//! to build it from its (optional) args.

use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::framework::{Plugin, Points};

use super::{
    balanced_allocation, default_binder, default_preemption, image_locality, inter_pod_affinity, node_affinity, node_name, node_ports, node_resources_fit,
    node_unschedulable, pod_topology_spread, priority_sort, scheduling_gates, taint_toleration,
};
use super::{node_volume_limits, volume_binding, volume_restrictions, volume_zone};

/// A plugin of upstream's default set, with its default score weight.
#[derive(Clone, Copy, Debug)]
pub struct DefaultPlugin {
    /// Name.
    pub name: &'static str,
    /// Weight (0 when not a score plugin).
    pub weight: i64,
}

/// Upstream's default multiPoint plugins, in upstream's order, with their weights.
pub fn default_plugins() -> &'static [DefaultPlugin] {
    const D: &[DefaultPlugin] = &[
        DefaultPlugin { name: "SchedulingGates", weight: 0 },
        DefaultPlugin { name: "PrioritySort", weight: 0 },
        DefaultPlugin { name: "NodeUnschedulable", weight: 0 },
        DefaultPlugin { name: "NodeName", weight: 0 },
        DefaultPlugin { name: "TaintToleration", weight: 3 },
        DefaultPlugin { name: "NodeAffinity", weight: 2 },
        DefaultPlugin { name: "NodePorts", weight: 0 },
        DefaultPlugin { name: "NodeResourcesFit", weight: 1 },
        DefaultPlugin { name: "VolumeRestrictions", weight: 0 },
        DefaultPlugin { name: "NodeVolumeLimits", weight: 0 },
        DefaultPlugin { name: "VolumeBinding", weight: 0 },
        DefaultPlugin { name: "VolumeZone", weight: 0 },
        DefaultPlugin { name: "PodTopologySpread", weight: 2 },
        DefaultPlugin { name: "InterPodAffinity", weight: 2 },
        // v1.37 applyDynamicResources inserts it before DefaultPreemption
        // with weight 2 (v1.34 gave none, so 1).
        DefaultPlugin { name: "DynamicResources", weight: 2 },
        DefaultPlugin { name: "DefaultPreemption", weight: 0 },
        DefaultPlugin { name: "NodeResourcesBalancedAllocation", weight: 1 },
        DefaultPlugin { name: "ImageLocality", weight: 1 },
        DefaultPlugin { name: "DefaultBinder", weight: 0 },
        // Appended by applyFeatureGates (NodeDeclaredFeatures, GA and locked on in 1.37).
        DefaultPlugin { name: "NodeDeclaredFeatures", weight: 0 },
        // Appended by applyFeatureGates when the GangScheduling gate is on
        // (beta with the scheduling.k8s.io/v1beta1 PodGroup API, on by default).
        DefaultPlugin { name: "GangScheduling", weight: 0 },
    ];
    D
}

/// Plugins accepted in configuration that berth does not implement: they are
/// enabled as no-ops.
const NO_OPS: &[&str] = &[];

/// Is this a plugin name berth knows?
pub fn known(name: &str) -> bool {
    build(name, None).is_ok()
}

/// A plugin that implements no extension point (see `NO_OPS`).
struct NoOp(&'static str);

impl Plugin for NoOp {
    fn name(&self) -> &'static str {
        self.0
    }
    fn points(&self) -> Points {
        Points::default()
    }
    fn reusable(&self) -> bool {
        // Does nothing, so it depends on nothing.
        true
    }
}

fn args<T: DeserializeOwned + Default>(v: Option<&serde_json::Value>) -> Result<T, String> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(T::default()),
        Some(v) => serde_path_to_error::deserialize(v).map_err(|e| {
            let path = e.path().to_string();
            if path == "." { e.inner().to_string() } else { format!("{path}: {}", e.inner()) }
        }),
    }
}

/// Builds the named plugin from its args (None: defaults). The error names the
/// args field at fault.
pub fn build(name: &str, a: Option<&serde_json::Value>) -> Result<Arc<dyn Plugin>, String> {
    Ok(match name {
        priority_sort::NAME => Arc::new(priority_sort::PrioritySort),
        scheduling_gates::NAME => Arc::new(scheduling_gates::SchedulingGates),
        node_unschedulable::NAME => Arc::new(node_unschedulable::NodeUnschedulable),
        super::node_declared_features::NAME => Arc::new(super::node_declared_features::NodeDeclaredFeatures),
        node_name::NAME => Arc::new(node_name::NodeName),
        taint_toleration::NAME => Arc::new(taint_toleration::TaintToleration),
        node_affinity::NAME => Arc::new(node_affinity::NodeAffinity::new(args(a)?)?),
        node_ports::NAME => Arc::new(node_ports::NodePorts),
        node_resources_fit::NAME => Arc::new(node_resources_fit::NodeResourcesFit::new(args(a)?)?),
        balanced_allocation::NAME => Arc::new(balanced_allocation::BalancedAllocation::new(args(a)?)?),
        pod_topology_spread::NAME => Arc::new(pod_topology_spread::PodTopologySpread::new(args(a)?)?),
        image_locality::NAME => Arc::new(image_locality::ImageLocality),
        inter_pod_affinity::NAME => Arc::new(inter_pod_affinity::InterPodAffinity::new(args(a)?)?),
        default_binder::NAME => Arc::new(default_binder::DefaultBinder),
        default_preemption::NAME => Arc::new(default_preemption::DefaultPreemption::new(args(a)?)?),
        volume_binding::NAME => Arc::new(volume_binding::VolumeBinding::new(args(a)?)?),
        volume_zone::NAME => Arc::new(volume_zone::VolumeZone),
        volume_restrictions::NAME => Arc::new(volume_restrictions::VolumeRestrictions),
        node_volume_limits::NAME => Arc::new(node_volume_limits::NodeVolumeLimits),
        super::dynamic_resources::NAME => Arc::new(super::dynamic_resources::DynamicResources),
        super::gang_scheduling::NAME => Arc::new(super::gang_scheduling::GangScheduling::new(args(a)?)?),
        n => match NO_OPS.iter().find(|x| **x == n) {
            Some(x) => Arc::new(NoOp(x)),
            None => return Err(format!("unknown plugin {n:?}")),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_plugin_builds() {
        for d in default_plugins() {
            let p = build(d.name, None);
            // Plugins still to come are reported, not silently dropped.
            if let Ok(p) = p {
                assert_eq!(p.name(), d.name);
            }
        }
        assert!(build("Nope", None).is_err());
    }
}
