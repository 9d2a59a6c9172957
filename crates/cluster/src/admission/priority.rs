//! PriorityClasses, as upstream's `ValidatePriorityClass` and the
//! Priority admission plugin: reserved `system-` names, a ceiling for
//! user classes, one global default, an immutable value.

use serde_json::{Value, json};

use crate::jsonptr::Pointer as _;
use crate::resources::{Admission, Error, PRIORITY_CLASSES, View};

/// The PriorityClass rules.
pub const ADMISSION: Admission = Admission { create: Some(create), update: Some(update), ..Admission::NONE };

fn create(view: &dyn View, name: &str, v: &mut Value) -> Result<(), Error> {
    let value = v.get("value").and_then(Value::as_i64).unwrap_or(0);
    let global_default = v.get("globalDefault").and_then(Value::as_bool).unwrap_or(false);
    if let Some(e) = validate_priority_class(name, value, global_default) {
        return Err(Error::Invalid(vec![e]));
    }
    if v.get("globalDefault").and_then(Value::as_bool) == Some(true)
        && let Some(other) = view.each(PRIORITY_CLASSES).find(|pc| pc.get("globalDefault").and_then(Value::as_bool) == Some(true))
    {
        let other = other.at("/metadata/name").and_then(Value::as_str).unwrap_or("");
        return Err(Error::Invalid(vec![format!(
            "globalDefault: Invalid value: true: PriorityClass {other} is already marked as default. Only one default can exist"
        )]));
    }
    if let Some(m) = v.as_object_mut() {
        m.entry("preemptionPolicy").or_insert_with(|| json!("PreemptLowerPriority"));
    }
    Ok(())
}

fn update(old: &Value, new: &mut Value) -> Result<(), Error> {
    if old.get("value") != new.get("value") {
        return Err(Error::Invalid(vec!["value: Forbidden: may not be changed in an update.".into()]));
    }
    Ok(())
}

/// The highest priority a user-defined PriorityClass may have (upstream's
/// `HighestUserDefinablePriority`).
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;

/// The system priority classes: (name, value), neither a global default.
pub const SYSTEM_PRIORITY_CLASSES: &[(&str, i64)] = &[("system-node-critical", 2_000_001_000), ("system-cluster-critical", 2_000_000_000)];

/// Validate a PriorityClass as upstream's `ValidatePriorityClass` does;
/// returns the field error (`field: Forbidden: why`), if any.
pub fn validate_priority_class(name: &str, value: i64, global_default: bool) -> Option<String> {
    if name.starts_with("system-") {
        let why = match SYSTEM_PRIORITY_CLASSES.iter().find(|(n, _)| *n == name) {
            None => format!("{name} is not a known system priority class"),
            Some((n, v)) if *v != value => format!("value of {n} PriorityClass must be {v}"),
            Some((n, _)) if global_default => format!("globalDefault of {n} PriorityClass must be false"),
            Some(_) => return None,
        };
        return Some(format!("metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: {why}"));
    }
    if value > HIGHEST_USER_DEFINABLE_PRIORITY {
        return Some(format!("value: Forbidden: maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::testing::Objects;

    #[test]
    fn priority_class_validation() {
        assert_eq!(validate_priority_class("high", 1_000_000_000, false), None);
        assert_eq!(
            validate_priority_class("high", 1_000_000_001, false).as_deref(),
            Some("value: Forbidden: maximum allowed value of a user defined priority is 1000000000")
        );
        assert_eq!(validate_priority_class("system-node-critical", 2_000_001_000, false), None);
        assert!(validate_priority_class("system-foo", 1, false).is_some_and(|m| m.ends_with("system-foo is not a known system priority class")));
    }

    #[test]
    fn one_global_default_and_an_immutable_value() {
        let view = Objects { objects: vec![(PRIORITY_CLASSES, json!({"metadata": {"name": "low"}, "value": 1, "globalDefault": true}))], ..Default::default() };
        let mut second = json!({"metadata": {"name": "other"}, "value": 2, "globalDefault": true});
        let refused = create(&view, "other", &mut second);
        assert!(matches!(refused, Err(Error::Invalid(e)) if e[0].contains("PriorityClass low is already marked as default")));
        let mut plain = json!({"metadata": {"name": "mid"}, "value": 5});
        create(&view, "mid", &mut plain).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plain["preemptionPolicy"], "PreemptLowerPriority");
        assert!(update(&plain, &mut json!({"value": 6})).is_err());
        assert!(update(&plain, &mut json!({"value": 5, "description": "x"})).is_ok());
    }
}
