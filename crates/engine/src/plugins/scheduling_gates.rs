//! SchedulingGates: a pod with scheduling gates waits outside the active queue.

use crate::cache::Snapshot;
use crate::framework::{Code, Events, Plugin, PreEnqueuePlugin, Status};
use berth_model::PodInfo;

/// Plugin name.
pub const NAME: &str = "SchedulingGates";

/// Keeps gated pods out of the active queue.
#[derive(Debug, Default)]
pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> Events {
        Events::POD_SELF
    }
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &PodInfo, _cluster: Option<&Snapshot>) -> Status {
        if pod.scheduling_gates.is_empty() {
            return Status::success();
        }
        Status::new(Code::UnschedulableAndUnresolvable, format!("waiting for scheduling gates: [{}]", pod.scheduling_gates.join(" ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    #[test]
    fn gates() {
        assert!(SchedulingGates.pre_enqueue(&pod("p").info(), None).is_success());
        let s = SchedulingGates.pre_enqueue(&pod("p").gate("a").gate("b").info(), None);
        assert_eq!(s.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "waiting for scheduling gates: [a b]");
    }
}
