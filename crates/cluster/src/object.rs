//! Small helpers on objects as JSON that the store, its admission rules
//! and the simulated components all use: the time stamps the cluster
//! writes, a path set, a condition replaced. A leaf: it imports nothing
//! of the crate but [`crate::jsonptr`].

use serde_json::{Value, json};

use crate::jsonptr::Pointer as _;

/// RFC 3339 now, second precision.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Set the value at `path` (object keys), making the objects on the way
/// (a non-object on the way is replaced by one).
pub fn set_path(v: &mut Value, path: &[&str], val: Value) {
    let mut cur = v;
    for (i, p) in path.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(map) = cur.as_object_mut() else { return };
        if i + 1 == path.len() {
            map.insert((*p).to_string(), val);
            return;
        }
        cur = map.entry((*p).to_string()).or_insert_with(|| json!({}));
    }
}

/// Set or replace a condition (by `type`) in `status.conditions`.
pub fn set_condition(obj: &mut Value, cond: Value) {
    let ty = cond.get("type").cloned();
    let conds = obj.at_mut("/status/conditions");
    match conds {
        Some(Value::Array(a)) => {
            if let Some(existing) = a.iter_mut().find(|c| c.get("type") == ty.as_ref()) {
                *existing = cond;
            } else {
                a.push(cond);
            }
        }
        _ => set_path(obj, &["status", "conditions"], json!([cond])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_are_replaced_by_type() {
        let mut v = json!({"status": "odd"});
        set_condition(&mut v, json!({"type": "A", "status": "False"}));
        set_condition(&mut v, json!({"type": "B", "status": "True"}));
        set_condition(&mut v, json!({"type": "A", "status": "True"}));
        assert_eq!(v, json!({"status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}}));
        set_path(&mut v, &["metadata", "labels", "x"], json!("y"));
        assert_eq!(v["metadata"], json!({"labels": {"x": "y"}}));
    }
}
