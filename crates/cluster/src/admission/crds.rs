//! CustomResourceDefinitions: validated, their status (NamesAccepted,
//! Established) written at once, on create and on update (see [`crate::crd`]).

use serde_json::Value;

use crate::object::{now_rfc3339, set_path};
use crate::resources::{Admission, Error, View};

/// The CRD rules.
pub const ADMISSION: Admission = Admission { create: Some(create), update: Some(update), ..Admission::NONE };

fn create(_: &dyn View, _name: &str, v: &mut Value) -> Result<(), Error> {
    let errs = crate::crd::validate(v);
    if !errs.is_empty() {
        return Err(Error::Invalid(errs));
    }
    let status = crate::crd::status(v, None, &now_rfc3339());
    set_path(v, &["status"], status);
    Ok(())
}

fn update(old: &Value, new: &mut Value) -> Result<(), Error> {
    let errs = crate::crd::validate(new);
    if !errs.is_empty() {
        return Err(Error::Invalid(errs));
    }
    let status = crate::crd::status(new, old.get("status"), &now_rfc3339());
    set_path(new, &["status"], status);
    Ok(())
}
