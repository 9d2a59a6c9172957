//! StatefulSets and DaemonSets: the `updateStrategy` default of upstream's
//! `SetDefaults_StatefulSet` and `SetDefaults_DaemonSet` (RollingUpdate,
//! with partition 0, or maxUnavailable 1 and maxSurge 0), which
//! `kubectl rollout status` reads.

use serde_json::{Value, json};

use crate::resources::{Admission, Error, View};

/// The StatefulSet rules.
pub const STATEFULSETS: Admission = Admission { create: Some(create_set), update: Some(update_set), ..Admission::NONE };

/// The DaemonSet rules.
pub const DAEMONSETS: Admission = Admission { create: Some(create_daemon), update: Some(update_daemon), ..Admission::NONE };

fn create_set(_: &dyn View, _: &str, v: &mut Value) -> Result<(), Error> {
    default_strategy(v, json!({"partition": 0}));
    Ok(())
}

fn update_set(_: &Value, v: &mut Value) -> Result<(), Error> {
    default_strategy(v, json!({"partition": 0}));
    Ok(())
}

fn create_daemon(_: &dyn View, _: &str, v: &mut Value) -> Result<(), Error> {
    default_strategy(v, json!({"maxUnavailable": 1, "maxSurge": 0}));
    Ok(())
}

fn update_daemon(_: &Value, v: &mut Value) -> Result<(), Error> {
    default_strategy(v, json!({"maxUnavailable": 1, "maxSurge": 0}));
    Ok(())
}

/// `spec.updateStrategy` defaults to RollingUpdate; a RollingUpdate
/// strategy gets `rolling`'s fields where it has none.
fn default_strategy(v: &mut Value, rolling: Value) {
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else { return };
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
        default_strategy(&mut v, json!({"partition": 0}));
        assert_eq!(v["spec"]["updateStrategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
        let mut v = json!({"spec": {"updateStrategy": {"type": "OnDelete"}}});
        default_strategy(&mut v, json!({"partition": 0}));
        assert_eq!(v["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
    }
}
