//! The `scale` subresource (autoscaling/v1 Scale) of Deployments,
//! ReplicaSets, StatefulSets, ReplicationControllers and of custom
//! resources whose CRD declares `subresources.scale`: read as a Scale,
//! written by changing only the object's replicas (so `kubectl scale`
//! and autoscalers work).

use serde_json::{Map, Value, json};

use crate::jsonptr::Pointer as _;
use crate::resources::ResourceInfo;

/// A label selector (`matchLabels`, `matchExpressions`) written as
/// upstream's `labels.Selector.String()`: requirements sorted by key,
/// values sorted.
pub fn selector_string(sel: &Value) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in sel.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("").to_string();
        let mut values: Vec<&str> = e.get("values").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        values.sort_unstable();
        let text = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({})", values.join(",")),
        };
        reqs.push((key, text));
    }
    reqs.sort();
    reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(",")
}

/// (spec replicas, status replicas, selector and whether it is a label
/// selector object rather than a string), as JSON pointers.
type Paths = (String, String, Option<(String, bool)>);

/// Where `info`'s objects keep their desired replicas, current replicas
/// and selector: built-in kinds at `spec.replicas`, `status.replicas` and
/// `spec.selector` (a label selector); custom resources where their CRD
/// says (the selector already a string). None: no scale subresource.
fn paths(info: &ResourceInfo) -> Option<Paths> {
    match &info.custom {
        Some(c) => c.scale.as_ref().map(|s| (s.spec_replicas.clone(), s.status_replicas.clone(), s.label_selector.clone().map(|p| (p, false)))),
        None => info
            .subresources
            .iter()
            .any(|(n, _, _)| *n == "scale")
            .then(|| ("/spec/replicas".to_string(), "/status/replicas".to_string(), Some(("/spec/selector".to_string(), true)))),
    }
}

/// The Scale of object `obj` of `info`'s kind.
pub fn scale_of(info: &ResourceInfo, obj: &Value) -> Option<Value> {
    let (spec, status, selector) = paths(info)?;
    let int = |p: &str| obj.at(p).and_then(Value::as_i64).unwrap_or(0);
    let mut meta = Map::new();
    for f in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = obj.at(&format!("/metadata/{f}")).filter(|v| !v.is_null()) {
            meta.insert(f.into(), v.clone());
        }
    }
    // Built-in kinds default spec.replicas to 1.
    let desired = match obj.at(&spec).and_then(Value::as_i64) {
        Some(n) => n,
        None if info.custom.is_none() => 1,
        None => 0,
    };
    let mut st = json!({"replicas": int(&status)});
    let sel = match selector {
        Some((p, true)) => obj.at(&p).map(selector_string),
        Some((p, false)) => obj.at(&p).and_then(Value::as_str).map(str::to_string),
        None => None,
    };
    if let Some(s) = sel.filter(|s| !s.is_empty()) {
        st["selector"] = json!(s);
    }
    Some(json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": meta, "spec": {"replicas": desired}, "status": st}))
}

/// Why a Scale cannot be applied: field errors as upstream words them.
pub fn validate(scale: &Value) -> Vec<String> {
    match scale.at("/spec/replicas") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => match v.as_i64() {
            Some(n) if n < 0 => vec![format!("spec.replicas: Invalid value: {n}: must be greater than or equal to 0")],
            Some(n) if n > i64::from(i32::MAX) => vec![format!("spec.replicas: Invalid value: {n}: must be no more than 2147483647")],
            Some(_) => Vec::new(),
            None => vec![format!("spec.replicas: Invalid value: {v}: must be an integer")],
        },
    }
}

/// The merge patch that gives an object of `info`'s kind the replicas of
/// `scale`, with the Scale's resourceVersion as a precondition (if any).
pub fn replicas_patch(info: &ResourceInfo, scale: &Value) -> Option<Value> {
    let (spec, _, _) = paths(info)?;
    let replicas = scale.at("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
    let mut patch = json!(replicas);
    for seg in spec.trim_start_matches('/').split('/').rev() {
        patch = json!({ seg: patch });
    }
    if let Some(rv) = scale.at("/metadata/resourceVersion").and_then(Value::as_str).filter(|rv| !rv.is_empty()) {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    Some(patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_print_as_upstream_does() {
        let sel = json!({"matchLabels": {"b": "2", "a": "1"}, "matchExpressions": [{"key": "c", "operator": "In", "values": ["y", "x"]}, {"key": "d", "operator": "DoesNotExist"}]});
        assert_eq!(selector_string(&sel), "a=1,b=2,c in (x,y),!d");
    }

    #[test]
    fn negative_replicas_are_refused() {
        assert_eq!(validate(&json!({"spec": {"replicas": -1}})), vec!["spec.replicas: Invalid value: -1: must be greater than or equal to 0".to_string()]);
        assert!(validate(&json!({"spec": {"replicas": 3}})).is_empty());
    }
}
