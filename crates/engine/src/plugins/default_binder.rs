//! DefaultBinder: binds through the API's `pods/binding` subresource. The
//! engine only decides; the daemon's binder makes the call.

use crate::framework::{BindPlugin, CycleState, Plugin, Status};
use berth_model::PodInfo;

/// Plugin name.
pub const NAME: &str = "DefaultBinder";

/// Binds every pod.
#[derive(Debug, Default)]
pub struct DefaultBinder;

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl BindPlugin for DefaultBinder {
    fn bind(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> Status {
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_everything() {
        assert!(DefaultBinder.bind(&mut CycleState::new(), &crate::testing::pod("p").info(), "n").is_success());
    }
}
