//! The plugin registry: every plugin berth knows, its default weight, and how
//! to build it from its (optional) args.

use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::framework::Registered;
use crate::register;

use super::{
    balanced_allocation, default_binder, default_preemption, dynamic_resources, gang_scheduling, image_locality, inter_pod_affinity, node_affinity, node_declared_features,
    node_name, node_ports, node_resources_fit, node_unschedulable, node_volume_limits, pod_topology_spread, priority_sort, scheduling_gates, taint_toleration,
    volume_binding, volume_restrictions, volume_zone,
};

/// A plugin berth knows: its name, its default score weight, and how to
/// build it from its (optional) args. Every one is in upstream's default set.
#[derive(Clone, Copy, Debug)]
pub struct DefaultPlugin {
    /// Name.
    pub name: &'static str,
    /// Weight (0 when not a score plugin).
    pub weight: i64,
    /// Builds the plugin from its args (None: defaults); the error names the
    /// args field at fault.
    build: Build,
}

/// A plugin's constructor.
/// Its result is the plugin stored under each extension-point trait it
/// implements ([`register!`]): what it implements is what it is enabled at.
type Build = fn(Option<&serde_json::Value>) -> Result<Registered, String>;

const fn plugin(name: &'static str, weight: i64, build: Build) -> DefaultPlugin {
    DefaultPlugin { name, weight, build }
}

/// The one list of plugins: upstream's default multiPoint plugins, in
/// upstream's order, with their weights and constructors. Adding a plugin
/// is one line here.
const PLUGINS: &[DefaultPlugin] = &[
    plugin(scheduling_gates::NAME, 0, |_| Ok(register!(Arc::new(scheduling_gates::SchedulingGates)))),
    plugin(priority_sort::NAME, 0, |_| Ok(register!(Arc::new(priority_sort::PrioritySort)))),
    plugin(node_unschedulable::NAME, 0, |_| Ok(register!(Arc::new(node_unschedulable::NodeUnschedulable)))),
    plugin(node_name::NAME, 0, |_| Ok(register!(Arc::new(node_name::NodeName)))),
    plugin(taint_toleration::NAME, 3, |_| Ok(register!(Arc::new(taint_toleration::TaintToleration)))),
    plugin(node_affinity::NAME, 2, |a| Ok(register!(Arc::new(node_affinity::NodeAffinity::new(args(a)?)?)))),
    plugin(node_ports::NAME, 0, |_| Ok(register!(Arc::new(node_ports::NodePorts)))),
    plugin(node_resources_fit::NAME, 1, |a| Ok(register!(Arc::new(node_resources_fit::NodeResourcesFit::new(args(a)?)?)))),
    plugin(volume_restrictions::NAME, 0, |_| Ok(register!(Arc::new(volume_restrictions::VolumeRestrictions)))),
    plugin(node_volume_limits::NAME, 0, |_| Ok(register!(Arc::new(node_volume_limits::NodeVolumeLimits)))),
    plugin(volume_binding::NAME, 0, |a| Ok(register!(Arc::new(volume_binding::VolumeBinding::new(args(a)?)?)))),
    plugin(volume_zone::NAME, 0, |_| Ok(register!(Arc::new(volume_zone::VolumeZone)))),
    plugin(pod_topology_spread::NAME, 2, |a| Ok(register!(Arc::new(pod_topology_spread::PodTopologySpread::new(args(a)?)?)))),
    plugin(inter_pod_affinity::NAME, 2, |a| Ok(register!(Arc::new(inter_pod_affinity::InterPodAffinity::new(args(a)?)?)))),
    // v1.37 applyDynamicResources inserts it before DefaultPreemption
    // with weight 2 (v1.34 gave none, so 1).
    plugin(dynamic_resources::NAME, 2, |_| Ok(register!(Arc::new(dynamic_resources::DynamicResources)))),
    plugin(default_preemption::NAME, 0, |a| Ok(register!(Arc::new(default_preemption::DefaultPreemption::new(args(a)?)?)))),
    plugin(balanced_allocation::NAME, 1, |a| Ok(register!(Arc::new(balanced_allocation::BalancedAllocation::new(args(a)?)?)))),
    plugin(image_locality::NAME, 1, |_| Ok(register!(Arc::new(image_locality::ImageLocality)))),
    plugin(default_binder::NAME, 0, |_| Ok(register!(Arc::new(default_binder::DefaultBinder)))),
    // Appended by applyFeatureGates (NodeDeclaredFeatures, GA and locked on in 1.37).
    plugin(node_declared_features::NAME, 0, |_| Ok(register!(Arc::new(node_declared_features::NodeDeclaredFeatures)))),
    // Appended by applyFeatureGates when the GangScheduling gate is on
    // (beta with the scheduling.k8s.io/v1beta1 PodGroup API, on by default).
    plugin(gang_scheduling::NAME, 0, |a| Ok(register!(Arc::new(gang_scheduling::GangScheduling::new(args(a)?)?)))),
];

/// Upstream's default multiPoint plugins, in upstream's order, with their weights.
pub fn default_plugins() -> &'static [DefaultPlugin] {
    PLUGINS
}

/// Is this a plugin name berth knows?
pub fn known(name: &str) -> bool {
    PLUGINS.iter().any(|p| p.name == name)
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
/// args field at fault, or the unknown plugin.
pub fn build(name: &str, a: Option<&serde_json::Value>) -> Result<Registered, String> {
    match PLUGINS.iter().find(|p| p.name == name) {
        Some(p) => (p.build)(a),
        None => Err(format!("unknown plugin {name:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plugin_builds_with_its_defaults_and_names_itself() {
        for d in default_plugins() {
            match build(d.name, None) {
                Ok(p) => assert_eq!(p.name(), d.name),
                Err(e) => panic!("{}: {e}", d.name),
            }
            assert!(known(d.name));
        }
        let mut names: Vec<_> = default_plugins().iter().map(|d| d.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), default_plugins().len(), "a plugin is listed twice");
        assert!(build("Nope", None).is_err());
        assert!(!known("Nope"));
    }
}
