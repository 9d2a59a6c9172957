//! Deployments, StatefulSets and DaemonSets: the defaults of upstream's
//! `SetDefaults_Deployment`, `SetDefaults_StatefulSet` and
//! `SetDefaults_DaemonSet` that clients read: a Deployment's `strategy`
//! RollingUpdate with maxUnavailable and maxSurge 25%, and
//! `progressDeadlineSeconds` 600; a set's `updateStrategy` RollingUpdate,
//! with partition 0, or maxUnavailable 1 and maxSurge 0 (`kubectl rollout
//! status` reads it); `replicas` 1 (Deployments and StatefulSets); and
//! `revisionHistoryLimit` 10 (the controllers keep that many old
//! ReplicaSets or ControllerRevisions).

use serde_json::{Value, json};

use crate::resources::{Admission, Error, View};

/// The Deployment rules.
pub const DEPLOYMENTS: Admission = Admission { create: Some(create_deployment), update: Some(update_deployment), ..Admission::NONE };

/// The StatefulSet rules.
pub const STATEFULSETS: Admission = Admission { create: Some(create_set), update: Some(update_set), ..Admission::NONE };

/// The DaemonSet rules.
pub const DAEMONSETS: Admission = Admission { create: Some(create_daemon), update: Some(update_daemon), ..Admission::NONE };

fn create_deployment(_: &dyn View, _: &str, v: &mut Value) -> Result<(), Error> {
    deployment_defaults(v);
    Ok(())
}

fn update_deployment(_: &Value, v: &mut Value) -> Result<(), Error> {
    deployment_defaults(v);
    Ok(())
}

/// A field of `spec` that is absent or null gets `value`.
fn default_field(spec: &mut serde_json::Map<String, Value>, field: &str, value: Value) {
    let f = spec.entry(field).or_insert(Value::Null);
    if f.is_null() {
        *f = value;
    }
}

/// Upstream's `SetDefaults_Deployment` (apps/v1).
fn deployment_defaults(v: &mut Value) {
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else { return };
    default_field(spec, "replicas", json!(1));
    default_field(spec, "revisionHistoryLimit", json!(10));
    default_field(spec, "progressDeadlineSeconds", json!(600));
    default_field(spec, "strategy", json!({}));
    let Some(strategy) = spec.get_mut("strategy").and_then(Value::as_object_mut) else { return };
    default_field(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type") != Some(&json!("RollingUpdate")) {
        return;
    }
    default_field(strategy, "rollingUpdate", json!({}));
    if let Some(ru) = strategy.get_mut("rollingUpdate").and_then(Value::as_object_mut) {
        default_field(ru, "maxUnavailable", json!("25%"));
        default_field(ru, "maxSurge", json!("25%"));
    }
}

fn create_set(_: &dyn View, _: &str, v: &mut Value) -> Result<(), Error> {
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        default_field(spec, "replicas", json!(1));
    }
    set_defaults(v, json!({"partition": 0}));
    Ok(())
}

fn update_set(_: &Value, v: &mut Value) -> Result<(), Error> {
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        default_field(spec, "replicas", json!(1));
    }
    set_defaults(v, json!({"partition": 0}));
    Ok(())
}

fn create_daemon(_: &dyn View, _: &str, v: &mut Value) -> Result<(), Error> {
    set_defaults(v, json!({"maxUnavailable": 1, "maxSurge": 0}));
    Ok(())
}

fn update_daemon(_: &Value, v: &mut Value) -> Result<(), Error> {
    set_defaults(v, json!({"maxUnavailable": 1, "maxSurge": 0}));
    Ok(())
}

/// `spec.updateStrategy` defaults to RollingUpdate; a RollingUpdate
/// strategy gets `rolling`'s fields where it has none.
/// `spec.revisionHistoryLimit` defaults to 10.
fn set_defaults(v: &mut Value, rolling: Value) {
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else { return };
    default_field(spec, "revisionHistoryLimit", json!(10));
    let strategy = spec.entry("updateStrategy").or_insert_with(|| json!({}));
    let Some(strategy) = strategy.as_object_mut() else { return };
    let ty = strategy.entry("type").or_insert_with(|| json!("RollingUpdate"));
    if *ty != "RollingUpdate" {
        return;
    }
    let ru = strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
    if let (Some(ru), Some(defaults)) = (ru.as_object_mut(), rolling.as_object()) {
        for (k, d) in defaults {
            ru.entry(k.clone()).or_insert_with(|| d.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployments_get_upstreams_defaults_and_keep_what_they_set() {
        let mut v = json!({"spec": {"selector": {}}});
        deployment_defaults(&mut v);
        assert_eq!(v["spec"]["replicas"], json!(1));
        assert_eq!(v["spec"]["revisionHistoryLimit"], json!(10));
        assert_eq!(v["spec"]["progressDeadlineSeconds"], json!(600));
        assert_eq!(v["spec"]["strategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}));
        let mut v = json!({"spec": {"replicas": 0, "revisionHistoryLimit": 1, "strategy": {"type": "Recreate"}, "progressDeadlineSeconds": 3}});
        deployment_defaults(&mut v);
        assert_eq!(v["spec"], json!({"replicas": 0, "revisionHistoryLimit": 1, "strategy": {"type": "Recreate"}, "progressDeadlineSeconds": 3}));
        let mut v = json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": 2}}}});
        deployment_defaults(&mut v);
        assert_eq!(v["spec"]["strategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 2}}));
    }

    #[test]
    fn update_strategy_defaults_to_rolling_update() {
        let mut v = json!({"spec": {"replicas": 2}});
        set_defaults(&mut v, json!({"partition": 0}));
        assert_eq!(v["spec"]["updateStrategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
        assert_eq!(v["spec"]["revisionHistoryLimit"], json!(10));
        let mut v = json!({"spec": {"updateStrategy": {"type": "OnDelete"}, "revisionHistoryLimit": 2}});
        set_defaults(&mut v, json!({"partition": 0}));
        assert_eq!(v["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
        assert_eq!(v["spec"]["revisionHistoryLimit"], json!(2));
    }
}
