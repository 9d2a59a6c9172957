//! Storage: claims and volumes are validated as upstream's
//! `ValidatePersistentVolumeClaim`/`ValidatePersistentVolume` do for the
//! fields a scheduler reads; a claim without a class gets the default one
//! (DefaultStorageClass); both get their protection finalizers while the
//! storage controllers run (StorageObjectInUseProtection); a
//! StorageClass gets its defaults.

use berth_model::quantity;
use berth_model::selector::NodeSelector;
use serde_json::{Value, json};

use crate::jsonptr::Pointer as _;
use crate::object::{now_rfc3339, set_path};
use crate::resources::{Admission, Error, STORAGE_CLASSES, View};

/// Finalizer added to every claim (StorageObjectInUseProtection admission).
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
/// Finalizer added to every volume (StorageObjectInUseProtection admission).
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";
const ACCESS_MODES: &[&str] = &["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"];

/// The PersistentVolumeClaim rules.
pub const CLAIMS: Admission = Admission { create: Some(create_claim), ..Admission::NONE };
/// The PersistentVolume rules.
pub const VOLUMES: Admission = Admission { create: Some(create_volume), ..Admission::NONE };
/// The StorageClass rules.
pub const CLASSES: Admission = Admission { create: Some(create_class), ..Admission::NONE };

fn get_str<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.at(ptr).and_then(Value::as_str).unwrap_or("")
}

/// The strings of the array at `ptr` (access modes).
pub(crate) fn modes<'a>(v: &'a Value, ptr: &str) -> Vec<&'a str> {
    v.at(ptr).and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

fn create_claim(view: &dyn View, _name: &str, v: &mut Value) -> Result<(), Error> {
    let errs = validate_claim(v);
    if !errs.is_empty() {
        return Err(Error::Invalid(errs));
    }
    // DefaultStorageClass admission: no storageClassName, the default class.
    let unset = v.at("/spec/storageClassName").is_none_or(Value::is_null)
        && v.at("/metadata/annotations/volume.beta.kubernetes.io~1storage-class").is_none();
    if unset
        && let Some(class) = view
            .each(STORAGE_CLASSES)
            .filter(|c| get_str(c, "/metadata/annotations/storageclass.kubernetes.io~1is-default-class") == "true")
            .max_by(|a, b| {
                (get_str(a, "/metadata/creationTimestamp"), std::cmp::Reverse(get_str(a, "/metadata/name")))
                    .cmp(&(get_str(b, "/metadata/creationTimestamp"), std::cmp::Reverse(get_str(b, "/metadata/name"))))
            })
    {
        set_path(v, &["spec", "storageClassName"], json!(get_str(class, "/metadata/name")));
    }
    protect(view, v, PVC_PROTECTION);
    set_path(v, &["status"], json!({"phase": "Pending"}));
    Ok(())
}

fn create_volume(view: &dyn View, _name: &str, v: &mut Value) -> Result<(), Error> {
    let errs = validate_volume(v);
    if !errs.is_empty() {
        return Err(Error::Invalid(errs));
    }
    protect(view, v, PV_PROTECTION);
    set_path(v, &["status"], json!({"phase": "Pending", "lastPhaseTransitionTime": now_rfc3339()}));
    Ok(())
}

fn create_class(_: &dyn View, _name: &str, v: &mut Value) -> Result<(), Error> {
    if let Some(m) = v.as_object_mut() {
        m.entry("reclaimPolicy").or_insert_with(|| json!("Delete"));
        m.entry("volumeBindingMode").or_insert_with(|| json!("Immediate"));
    }
    Ok(())
}

/// StorageObjectInUseProtection admission: add finalizer `f` when the
/// storage controllers that remove it run.
fn protect(view: &dyn View, v: &mut Value, f: &str) {
    if !view.storage_protection() {
        return;
    }
    let list = v.at("/metadata/finalizers").and_then(Value::as_array).cloned().unwrap_or_default();
    if !list.iter().any(|x| x.as_str() == Some(f)) {
        let mut list = list;
        list.push(json!(f));
        set_path(v, &["metadata", "finalizers"], json!(list));
    }
}

/// Validate a new claim as upstream's `ValidatePersistentVolumeClaim`
/// does for the fields a scheduler reads; returns the field errors.
pub fn validate_claim(c: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    let am = modes(c, "/spec/accessModes");
    if am.is_empty() {
        errs.push("spec.accessModes: Required value: at least 1 access mode is required".to_string());
    }
    for m in &am {
        if !ACCESS_MODES.contains(m) {
            errs.push(format!(
                "spec.accessModes: Unsupported value: \"{m}\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""
            ));
        }
    }
    if am.contains(&"ReadWriteOncePod") && am.len() > 1 {
        errs.push("spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes".to_string());
    }
    match c.at("/spec/resources/requests/storage").and_then(Value::as_str) {
        None => errs.push("spec.resources[storage]: Required value".to_string()),
        Some(q) => match quantity::parse_value(q) {
            Ok(n) if n <= 0 => errs.push(format!("spec.resources[storage]: Invalid value: \"{q}\": must be greater than zero")),
            Ok(_) => {}
            Err(_) => errs.push(format!(
                "spec.resources.requests[storage]: Invalid value: \"{q}\": {}",
                quantity::SyntaxError::Format
            )),
        },
    }
    if let Some(m) = c.at("/spec/volumeMode").and_then(Value::as_str)
        && !matches!(m, "Block" | "Filesystem")
    {
        errs.push(format!("spec.volumeMode: Unsupported value: \"{m}\": supported values: \"Block\", \"Filesystem\""));
    }
    errs
}

/// Validate a new volume (capacity, access modes, node affinity); returns the field errors.
pub fn validate_volume(pv: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    match pv.at("/spec/capacity/storage").and_then(Value::as_str) {
        None => errs.push("spec.capacity: Required value".to_string()),
        Some(q) if quantity::parse_value(q).is_err() => errs.push(format!(
            "spec.capacity[storage]: Invalid value: \"{q}\": {}",
            quantity::SyntaxError::Format
        )),
        Some(_) => {}
    }
    let am = modes(pv, "/spec/accessModes");
    if am.is_empty() {
        errs.push("spec.accessModes: Required value".to_string());
    }
    for m in &am {
        if !ACCESS_MODES.contains(m) {
            errs.push(format!(
                "spec.accessModes: Unsupported value: \"{m}\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""
            ));
        }
    }
    if let Some(req) = pv.at("/spec/nodeAffinity/required") {
        match serde_json::from_value::<k8s_openapi::api::core::v1::NodeSelector>(req.clone()) {
            Ok(ns) if ns.node_selector_terms.is_empty() => {
                errs.push("spec.nodeAffinity.required.nodeSelectorTerms: Required value: must have at least one node selector term".to_string())
            }
            Ok(ns) => {
                if let Err(e) = NodeSelector::compile(&ns, "spec.nodeAffinity.required") {
                    errs.push(e.to_string());
                }
            }
            Err(e) => errs.push(format!("spec.nodeAffinity.required: Invalid value: {e}")),
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::testing::Objects;

    fn claim(size: &str, class: &str, modes: &[&str]) -> Value {
        json!({"metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "spec": {"storageClassName": class, "accessModes": modes, "resources": {"requests": {"storage": size}}}})
    }

    #[test]
    fn claim_validation_names_the_field() {
        assert!(validate_claim(&claim("1Gi", "x", &["ReadWriteOnce"])).is_empty());
        assert_eq!(validate_claim(&claim("1Gi", "x", &[])), vec!["spec.accessModes: Required value: at least 1 access mode is required"]);
        assert!(validate_claim(&claim("lots", "x", &["ReadWriteOnce"]))[0].starts_with("spec.resources.requests[storage]: Invalid value: \"lots\""));
        assert!(validate_claim(&claim("1Gi", "x", &["ReadWriteOncePod", "ReadWriteOnce"]))[0].contains("may not use ReadWriteOncePod"));
        assert!(validate_claim(&claim("1Gi", "x", &["Sometimes"]))[0].starts_with("spec.accessModes: Unsupported value: \"Sometimes\""));
    }

    #[test]
    fn a_claim_without_a_class_gets_the_newest_default_and_its_finalizer() {
        let class = |name: &str, at: &str, default: bool| {
            (STORAGE_CLASSES, json!({"metadata": {"name": name, "creationTimestamp": at,
                "annotations": {"storageclass.kubernetes.io/is-default-class": if default { "true" } else { "false" }}}}))
        };
        let view = Objects { objects: vec![class("old", "2020-01-01T00:00:00Z", true), class("new", "2021-01-01T00:00:00Z", true), class("other", "2022-01-01T00:00:00Z", false)], storage_protection: true };
        let mut c = claim("1Gi", "x", &["ReadWriteOnce"]);
        c["spec"].as_object_mut().map(|s| s.remove("storageClassName"));
        create_claim(&view, "c", &mut c).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c["spec"]["storageClassName"], "new");
        assert_eq!(c["metadata"]["finalizers"], json!([PVC_PROTECTION]));
        assert_eq!(c["status"], json!({"phase": "Pending"}));
        let mut bad = claim("1Gi", "x", &[]);
        assert!(matches!(create_claim(&view, "c", &mut bad), Err(Error::Invalid(_))));
    }
}
