//! Namespaces: a new one is labelled with its name and held by the
//! namespace controller's finalizer; `spec.finalizers` changes only
//! through that controller; the system namespaces may not be deleted
//! (NamespaceLifecycle).

use serde_json::{Value, json};

use crate::jsonptr::Pointer as _;
use crate::object::set_path;
use crate::resources::{Admission, Error, View};

/// The Namespace rules.
pub const ADMISSION: Admission = Admission { create: Some(create), update: Some(update), delete: Some(delete), ..Admission::NONE };

fn create(_: &dyn View, name: &str, v: &mut Value) -> Result<(), Error> {
    set_path(v, &["metadata", "labels", "kubernetes.io/metadata.name"], json!(name));
    set_path(v, &["spec", "finalizers"], json!(["kubernetes"]));
    set_path(v, &["status"], json!({"phase": "Active"}));
    Ok(())
}

fn update(old: &Value, new: &mut Value) -> Result<(), Error> {
    // spec.finalizers changes only through the namespace controller.
    match old.at("/spec/finalizers").cloned() {
        Some(f) => set_path(new, &["spec", "finalizers"], f),
        None => {
            if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("finalizers");
            }
        }
    }
    Ok(())
}

fn delete(name: &str) -> Result<(), Error> {
    if matches!(name, "default" | "kube-system" | "kube-public") {
        return Err(Error::Forbidden("this namespace may not be deleted".into()));
    }
    Ok(())
}
