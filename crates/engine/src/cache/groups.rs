//! Pod groups (gang scheduling), compiled from both APIs into one
//! [`GroupPolicy`]:
//!
//! - upstream's `scheduling.k8s.io/v1beta1` PodGroup (KEP-4671): a pod names it
//!   in `spec.schedulingGroup.podGroupName`; `spec.schedulingPolicy.gang.minCount`
//!   (a `basic` policy counts as minCount 1), `spec.schedulingConstraints.topology[0].key`;
//! - scheduler-plugins' `scheduling.x-k8s.io/v1alpha1` PodGroup (Coscheduling):
//!   a pod names it with the label `scheduling.x-k8s.io/pod-group`;
//!   `spec.minMember`, `spec.minResources`, `spec.scheduleTimeoutSeconds`.
//!
//! A group object that cannot be read is kept with the reason (its pods stay
//! pending with it), so one bad object stops nothing else.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::scheduling::v1beta1 as sched;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;
use thiserror::Error;

use berth_model::pod::{GroupApi, GroupRef};
use berth_model::selector::validate_key;
use berth_model::Resources;

/// Why a group object could not be compiled.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum Error {
    /// A field has a value the scheduler cannot use.
    #[error("PodGroup {key}: {field}: {message}")]
    Field {
        /// "namespace/name".
        key: String,
        /// The field at fault.
        field: &'static str,
        /// Why.
        message: String,
    },
}

/// A pod group's scheduling requirements, whichever API it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPolicy {
    /// The API the group was read from.
    pub api: GroupApi,
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// How many members must have a place (counting those already bound)
    /// before any is bound: v1beta1 `gang.minCount`, v1alpha1 `minMember`.
    pub min_count: u32,
    /// v1beta1 `schedulingConstraints.topology[0].key`: the whole group goes
    /// into one domain of this node label.
    pub topology_key: Option<String>,
    /// v1alpha1 `minResources`: the cluster's free resources must cover them.
    pub min_resources: Option<Resources>,
    /// v1alpha1 `scheduleTimeoutSeconds`.
    pub timeout: Option<Duration>,
}

impl GroupPolicy {
    /// "namespace/name".
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Compiles a `scheduling.k8s.io/v1beta1` PodGroup.
    pub fn from_v1beta1(pg: &sched::PodGroup) -> Result<GroupPolicy, Error> {
        let namespace = pg.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let name = pg.metadata.name.clone().unwrap_or_default();
        let key = format!("{namespace}/{name}");
        let field = |field: &'static str, message: String| Error::Field { key: key.clone(), field, message };
        let spec = &pg.spec;
        let min_count = match &spec.scheduling_policy.gang {
            Some(g) if g.min_count < 1 => return Err(field("spec.schedulingPolicy.gang.minCount", format!("must be at least 1, got {}", g.min_count))),
            Some(g) => g.min_count as u32,
            None => 1,
        };
        let topology_key = match spec.scheduling_constraints.as_ref().and_then(|c| c.topology.as_ref()).and_then(|t| t.first()) {
            Some(t) => {
                validate_key(&t.key).map_err(|m| field("spec.schedulingConstraints.topology[0].key", m))?;
                Some(t.key.clone())
            }
            None => None,
        };
        Ok(GroupPolicy { api: GroupApi::V1beta1, namespace, name, min_count, topology_key, min_resources: None, timeout: None })
    }

    /// Compiles a `scheduling.x-k8s.io/v1alpha1` PodGroup from its JSON
    /// (`metadata`, `spec`, as a dynamic object carries it).
    pub fn from_v1alpha1(namespace: &str, name: &str, obj: &Value) -> Result<GroupPolicy, Error> {
        let key = format!("{namespace}/{name}");
        let field = |field: &'static str, message: String| Error::Field { key: key.clone(), field, message };
        let spec = obj.get("spec");
        let int = |k: &str| spec.and_then(|s| s.get(k)).filter(|v| !v.is_null());
        let min_member = match int("minMember") {
            None => 0,
            Some(v) => v.as_i64().filter(|n| (0..=i64::from(i32::MAX)).contains(n)).ok_or_else(|| field("spec.minMember", format!("must be a non-negative integer, got {v}")))?,
        };
        let timeout = match int("scheduleTimeoutSeconds") {
            None => None,
            Some(v) => {
                let s = v.as_i64().filter(|n| (1..=i64::from(i32::MAX)).contains(n)).ok_or_else(|| field("spec.scheduleTimeoutSeconds", format!("must be a positive integer, got {v}")))?;
                Some(Duration::from_secs(s as u64))
            }
        };
        let min_resources = match spec.and_then(|s| s.get("minResources")).filter(|v| !v.is_null()) {
            None => None,
            Some(v) => {
                let list: std::collections::BTreeMap<String, Quantity> = serde_json::from_value(quantities_as_strings(v.clone())).map_err(|e| field("spec.minResources", e.to_string()))?;
                Some(Resources::from_list(Some(&list), "spec.minResources").map_err(|m| field("spec.minResources", m))?)
            }
        };
        Ok(GroupPolicy {
            api: GroupApi::V1alpha1,
            namespace: namespace.to_string(),
            name: name.to_string(),
            // scheduler-plugins treats minMember 0 as "no gang": one pod is enough.
            min_count: (min_member as u32).max(1),
            topology_key: None,
            min_resources,
            timeout,
        })
    }
}

/// Quantities may arrive as JSON numbers; `Quantity` wants strings.
fn quantities_as_strings(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, if let Value::Number(n) = &v { Value::String(n.to_string()) } else { v })).collect()),
        other => other,
    }
}

/// The group objects known to the scheduler, by API, namespace and name.
#[derive(Clone, Debug, Default)]
pub struct Groups {
    by_key: HashMap<(GroupApi, String, String), Result<Arc<GroupPolicy>, Error>>,
    /// The topology domain (label key, value) the group cycle is trying now:
    /// GangScheduling's PreFilter narrows the members' nodes to it (upstream's
    /// "assumed placement").
    pub placement: Option<(String, String)>,
    /// Pending members that another scheduler owns, per group (uid →
    /// schedulerName): a group's pods must share one schedulerName.
    foreign: HashMap<(String, GroupRef), std::collections::BTreeMap<String, String>>,
}

impl Groups {
    /// No groups.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of group objects.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// No group objects?
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Adds or replaces a group object (or the reason it cannot be used).
    pub fn upsert(&mut self, api: GroupApi, namespace: &str, name: &str, g: Result<GroupPolicy, Error>) {
        self.by_key.insert((api, namespace.to_string(), name.to_string()), g.map(Arc::new));
    }

    /// Removes a group object.
    pub fn remove(&mut self, api: GroupApi, namespace: &str, name: &str) {
        self.by_key.remove(&(api, namespace.to_string(), name.to_string()));
    }

    /// Forgets every object of one API (before a relist).
    pub fn clear(&mut self, api: GroupApi) {
        self.by_key.retain(|k, _| k.0 != api);
    }

    /// A pending member of `r` owned by another scheduler.
    pub fn note_foreign(&mut self, namespace: &str, r: &GroupRef, uid: &str, scheduler: &str) {
        self.foreign.entry((namespace.to_string(), r.clone())).or_default().insert(uid.to_string(), scheduler.to_string());
    }

    /// A pod is no longer a pending member owned by another scheduler.
    pub fn forget_foreign(&mut self, uid: &str) {
        if self.foreign.is_empty() {
            return;
        }
        for m in self.foreign.values_mut() {
            m.remove(uid);
        }
        self.foreign.retain(|_, m| !m.is_empty());
    }

    /// The schedulerNames of the pending members of `r` other schedulers own.
    pub fn foreign_schedulers(&self, namespace: &str, r: &GroupRef) -> Vec<String> {
        self.foreign.get(&(namespace.to_string(), r.clone())).map(|m| m.values().cloned().collect()).unwrap_or_default()
    }

    /// The group a pod in `namespace` names: None when no such object exists.
    pub fn get(&self, namespace: &str, r: &GroupRef) -> Option<&Result<Arc<GroupPolicy>, Error>> {
        self.by_key.get(&(r.api, namespace.to_string(), r.name.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1beta1(yaml: serde_json::Value) -> sched::PodGroup {
        serde_json::from_value(yaml).expect("test object")
    }

    #[test]
    fn compiles_v1beta1() {
        let pg = v1beta1(serde_json::json!({
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}, "schedulingConstraints": {"topology": [{"key": "zone"}]}}
        }));
        let g = GroupPolicy::from_v1beta1(&pg).expect("valid");
        assert_eq!((g.min_count, g.topology_key.as_deref(), g.key().as_str()), (4, Some("zone"), "ns/g"));
        let basic = v1beta1(serde_json::json!({"metadata": {"name": "b"}, "spec": {"schedulingPolicy": {"basic": {}}}}));
        assert_eq!(GroupPolicy::from_v1beta1(&basic).expect("valid").min_count, 1);
        let bad = v1beta1(serde_json::json!({"metadata": {"name": "x"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 0}}}}));
        let e = GroupPolicy::from_v1beta1(&bad).expect_err("minCount 0");
        assert!(e.to_string().contains("spec.schedulingPolicy.gang.minCount"), "{e}");
    }

    #[test]
    fn compiles_v1alpha1() {
        let obj = serde_json::json!({"spec": {"minMember": 3, "scheduleTimeoutSeconds": 10, "minResources": {"cpu": 3, "memory": "1Gi"}}});
        let g = GroupPolicy::from_v1alpha1("ns", "pg", &obj).expect("valid");
        assert_eq!(g.min_count, 3);
        assert_eq!(g.timeout, Some(Duration::from_secs(10)));
        assert_eq!(g.min_resources.as_ref().map(|r| r.milli_cpu), Some(3000));
        for (bad, field) in [
            (serde_json::json!({"spec": {"minMember": -1}}), "spec.minMember"),
            (serde_json::json!({"spec": {"minMember": "x"}}), "spec.minMember"),
            (serde_json::json!({"spec": {"scheduleTimeoutSeconds": 0}}), "spec.scheduleTimeoutSeconds"),
            (serde_json::json!({"spec": {"minResources": {"cpu": "lots"}}}), "spec.minResources"),
        ] {
            let e = GroupPolicy::from_v1alpha1("ns", "pg", &bad).expect_err("invalid");
            assert!(e.to_string().contains(field), "{e}");
        }
    }

    #[test]
    fn lookup_by_api() {
        let mut gs = Groups::new();
        let g = GroupPolicy::from_v1alpha1("ns", "pg", &serde_json::json!({"spec": {"minMember": 2}}));
        gs.upsert(GroupApi::V1alpha1, "ns", "pg", g);
        assert!(gs.get("ns", &GroupRef { api: GroupApi::V1alpha1, name: "pg".into() }).is_some());
        assert!(gs.get("ns", &GroupRef { api: GroupApi::V1beta1, name: "pg".into() }).is_none());
        gs.clear(GroupApi::V1alpha1);
        assert!(gs.is_empty());
    }
}
