//! The objects default topology spreading reads: Services,
//! ReplicationControllers, ReplicaSets and StatefulSets, with their selectors
//! compiled once per object version.
//!
//! `default_selector` builds the selector upstream's `helper.DefaultSelector`
//! gives a pod: the labels of every Service selecting it, merged with the
//! selector of its controlling ReplicationController, ReplicaSet or
//! StatefulSet (looked up by name, as upstream's listers do).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use thiserror::Error;

use berth_model::selector::{Requirement, Selector};
use berth_model::PodInfo;
pub use berth_model::pod::ControllerRef;

/// A workload object that cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Error {
    /// The selector is invalid; the message names the field.
    #[error("{kind} {namespace}/{name}: {message}")]
    Selector {
        /// The object's kind.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The field at fault and why.
        message: String,
    },
}

/// The four kinds default spreading reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// v1 Service.
    Service,
    /// v1 ReplicationController.
    ReplicationController,
    /// apps/v1 ReplicaSet.
    ReplicaSet,
    /// apps/v1 StatefulSet.
    StatefulSet,
}

impl Kind {
    /// The kind as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::ReplicationController => "ReplicationController",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::StatefulSet => "StatefulSet",
        }
    }
}

/// Services, ReplicationControllers, ReplicaSets and StatefulSets by namespace.
#[derive(Clone, Debug, Default)]
pub struct Workloads {
    /// namespace → service name → spec.selector (None: the Service selects nothing).
    services: HashMap<String, BTreeMap<String, Option<BTreeMap<String, String>>>>,
    /// (namespace, name) → spec.selector of a ReplicationController.
    rcs: HashMap<(String, String), BTreeMap<String, String>>,
    /// (namespace, name) → requirements of a ReplicaSet's selector (None: a
    /// missing selector, which adds nothing).
    replica_sets: HashMap<(String, String), Option<Vec<Requirement>>>,
    /// Same for StatefulSets.
    stateful_sets: HashMap<(String, String), Option<Vec<Requirement>>>,
}

fn ns_name(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (m.namespace.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "default".into()), m.name.clone().unwrap_or_default())
}

/// Requirements a LabelSelector adds (upstream `LabelSelectorAsSelector` then
/// `Requirements()`: a missing selector adds none, an empty one none).
fn requirements(kind: Kind, ns: &str, name: &str, ls: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>) -> Result<Option<Vec<Requirement>>, Error> {
    if ls.is_none() {
        return Ok(None);
    }
    let sel = Selector::from_label_selector(ls, "spec.selector").map_err(|message| Error::Selector { kind: kind.as_str(), namespace: ns.into(), name: name.into(), message })?;
    Ok(Some(sel.requirements().to_vec()))
}

impl Workloads {
    /// No objects.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when no object is known.
    pub fn is_empty(&self) -> bool {
        self.services.values().all(BTreeMap::is_empty) && self.rcs.is_empty() && self.replica_sets.is_empty() && self.stateful_sets.is_empty()
    }

    /// Adds or replaces a Service.
    pub fn upsert_service(&mut self, s: &core::Service) {
        let (ns, name) = ns_name(&s.metadata);
        let sel = s.spec.as_ref().and_then(|sp| sp.selector.clone());
        self.services.entry(ns).or_default().insert(name, sel);
    }

    /// Adds or replaces a ReplicationController.
    pub fn upsert_replication_controller(&mut self, rc: &core::ReplicationController) {
        let (ns, name) = ns_name(&rc.metadata);
        let sel = rc.spec.as_ref().and_then(|sp| sp.selector.clone()).unwrap_or_default();
        self.rcs.insert((ns, name), sel);
    }

    /// Adds or replaces a ReplicaSet. An invalid selector is an error naming
    /// the field; the object is then kept without a selector (it adds nothing,
    /// as upstream ignores a selector it cannot convert).
    pub fn upsert_replica_set(&mut self, rs: &apps::ReplicaSet) -> Result<(), Error> {
        let (ns, name) = ns_name(&rs.metadata);
        let r = requirements(Kind::ReplicaSet, &ns, &name, Some(&rs.spec.selector));
        let (v, out) = match r {
            Ok(v) => (v, Ok(())),
            Err(e) => (None, Err(e)),
        };
        self.replica_sets.insert((ns, name), v);
        out
    }

    /// Adds or replaces a StatefulSet (see `upsert_replica_set`).
    pub fn upsert_stateful_set(&mut self, ss: &apps::StatefulSet) -> Result<(), Error> {
        let (ns, name) = ns_name(&ss.metadata);
        let r = requirements(Kind::StatefulSet, &ns, &name, Some(&ss.spec.selector));
        let (v, out) = match r {
            Ok(v) => (v, Ok(())),
            Err(e) => (None, Err(e)),
        };
        self.stateful_sets.insert((ns, name), v);
        out
    }

    /// Forgets an object.
    pub fn remove(&mut self, kind: Kind, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        match kind {
            Kind::Service => {
                if let Some(m) = self.services.get_mut(namespace) {
                    m.remove(name);
                }
            }
            Kind::ReplicationController => {
                self.rcs.remove(&key);
            }
            Kind::ReplicaSet => {
                self.replica_sets.remove(&key);
            }
            Kind::StatefulSet => {
                self.stateful_sets.remove(&key);
            }
        }
    }

    /// Forgets every object of a kind (before a relist).
    pub fn clear(&mut self, kind: Kind) {
        match kind {
            Kind::Service => self.services.clear(),
            Kind::ReplicationController => self.rcs.clear(),
            Kind::ReplicaSet => self.replica_sets.clear(),
            Kind::StatefulSet => self.stateful_sets.clear(),
        }
    }

    /// upstream `helper.DefaultSelector`: the merged labels of the Services
    /// selecting the pod, then the selector of its controller. The result is
    /// empty (`is_everything`) when nothing selects or owns the pod.
    pub fn default_selector(&self, pod: &PodInfo) -> Selector {
        let mut set: BTreeMap<String, String> = BTreeMap::new();
        if let Some(svcs) = self.services.get(&pod.namespace) {
            for sel in svcs.values().flatten() {
                if sel.iter().all(|(k, v)| pod.labels.get(k) == Some(v.as_str())) {
                    set.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
        }
        let Some(owner) = pod.controller.as_ref() else { return Selector::from_map(&set) };
        let key = (pod.namespace.clone(), owner.name.clone());
        let extra = match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("v1", "ReplicationController") => {
                if let Some(rc) = self.rcs.get(&key) {
                    set.extend(rc.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                None
            }
            ("apps/v1", "ReplicaSet") => self.replica_sets.get(&key).cloned().flatten(),
            ("apps/v1", "StatefulSet") => self.stateful_sets.get(&key).cloned().flatten(),
            _ => None,
        };
        let mut sel = Selector::from_map(&set);
        for r in extra.into_iter().flatten() {
            sel.push(r);
        }
        sel
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::selector::Op;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};

    fn eq_req(key: &str, v: &str) -> Requirement {
        Requirement { key: key.into(), op: Op::In(vec![v.into()]) }
    }

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta { name: Some(name.into()), namespace: Some("default".into()), ..Default::default() }
    }

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    fn pod(kv: &[(&str, &str)], owner: Option<(&str, &str, &str)>) -> PodInfo {
        PodInfo {
            namespace: "default".into(),
            name: "p".into(),
            labels: (&labels(kv)).into(),
            controller: owner.map(|(a, k, n)| Box::new(ControllerRef { api_version: a.into(), kind: k.into(), name: n.into() })),
            ..Default::default()
        }
    }

    fn service(name: &str, sel: Option<&[(&str, &str)]>) -> core::Service {
        core::Service { metadata: meta(name), spec: Some(core::ServiceSpec { selector: sel.map(labels), ..Default::default() }), ..Default::default() }
    }

    #[test]
    fn services_merge_and_must_match() {
        let mut w = Workloads::new();
        w.upsert_service(&service("a", Some(&[("app", "web")])));
        w.upsert_service(&service("b", Some(&[("tier", "fe")])));
        w.upsert_service(&service("other", Some(&[("app", "db")])));
        w.upsert_service(&service("none", None));
        let s = w.default_selector(&pod(&[("app", "web"), ("tier", "fe"), ("x", "y")], None));
        assert_eq!(s.requirements(), &[eq_req("app", "web"), eq_req("tier", "fe")]);
        assert!(w.default_selector(&pod(&[("foo", "bar")], None)).is_everything());
        w.remove(Kind::Service, "default", "a");
        assert_eq!(w.default_selector(&pod(&[("app", "web"), ("tier", "fe")], None)).requirements(), &[eq_req("tier", "fe")]);
    }

    #[test]
    fn controllers_by_kind_and_name() {
        let mut w = Workloads::new();
        let rs = apps::ReplicaSet {
            metadata: meta("rs"),
            spec: apps::ReplicaSetSpec {
                selector: LabelSelector {
                    match_expressions: Some(vec![LabelSelectorRequirement { key: "app".into(), operator: "In".into(), values: Some(vec!["web".into()]) }]),
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(w.upsert_replica_set(&rs).is_ok());
        let rc = core::ReplicationController {
            metadata: meta("rc"),
            spec: Some(core::ReplicationControllerSpec { selector: Some(labels(&[("rc", "1")])), ..Default::default() }),
            ..Default::default()
        };
        w.upsert_replication_controller(&rc);
        let s = w.default_selector(&pod(&[("app", "web")], Some(("apps/v1", "ReplicaSet", "rs"))));
        assert_eq!(s.requirements(), &[eq_req("app", "web")]);
        // Another group version, or a missing object, adds nothing.
        assert!(w.default_selector(&pod(&[("app", "web")], Some(("extensions/v1beta1", "ReplicaSet", "rs")))).is_everything());
        assert!(w.default_selector(&pod(&[("app", "web")], Some(("apps/v1", "StatefulSet", "rs")))).is_everything());
        let s = w.default_selector(&pod(&[], Some(("v1", "ReplicationController", "rc"))));
        assert_eq!(s.requirements(), &[eq_req("rc", "1")]);
    }

    #[test]
    fn invalid_selector_names_the_field() {
        let mut w = Workloads::new();
        let ss = apps::StatefulSet {
            metadata: meta("db"),
            spec: apps::StatefulSetSpec {
                selector: LabelSelector {
                    match_expressions: Some(vec![LabelSelectorRequirement { key: "app".into(), operator: "Near".into(), values: None }]),
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let e = w.upsert_stateful_set(&ss).unwrap_err().to_string();
        assert!(e.contains("StatefulSet default/db") && e.contains("spec.selector.matchExpressions[0].operator"), "{e}");
        assert!(w.default_selector(&pod(&[("app", "x")], Some(("apps/v1", "StatefulSet", "db")))).is_everything());
    }
}
