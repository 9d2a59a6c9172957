//! PodDisruptionBudgets: a new one starts with an empty status (the store
//! keeps it current from then on).

use serde_json::{Value, json};

use crate::object::set_path;
use crate::resources::{Admission, Error, View};

/// The PodDisruptionBudget rules.
pub const ADMISSION: Admission = Admission { create: Some(create), ..Admission::NONE };

fn create(_: &dyn View, _name: &str, v: &mut Value) -> Result<(), Error> {
    set_path(v, &["status"], json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}));
    Ok(())
}
