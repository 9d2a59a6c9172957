//! StatefulSets and DaemonSets: the defaults of upstream's
//! `SetDefaults_StatefulSet` and `SetDefaults_DaemonSet` that clients read:
//! `updateStrategy` RollingUpdate, with partition 0, or maxUnavailable 1
//! and maxSurge 0 (`kubectl rollout status` reads it), and
//! `revisionHistoryLimit` 10 (the controllers keep that many old
//! ControllerRevisions).

use serde_json::{Value, json};

use crate::resources::{Admission, Error, View};

/// The StatefulSet rules.
pub const STATEFULSETS: Admission = Admission { create: Some(create_set), update: Some(update_set), ..Admission::NONE };

/// The DaemonSet rules.
pub const DAEMONSETS: Admission = Admission { create: Some(create_daemon), update: Some(update_daemon), ..Admission::NONE };

fn create_set(_: &dyn View, _: &str, v: &mut Value) -> Result<(), Error> {
    set_defaults(v, json!({"partition": 0}));
    Ok(())
}

fn update_set(_: &Value, v: &mut Value) -> Result<(), Error> {
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
    let limit = spec.entry("revisionHistoryLimit").or_insert(Value::Null);
    if limit.is_null() {
        *limit = json!(10);
    }
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
