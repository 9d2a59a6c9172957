//! PrioritySort: the queue's order, higher priority first, then earlier arrival.

use crate::framework::{Plugin, QueueSortPlugin, QueuedPod};

/// Plugin name.
pub const NAME: &str = "PrioritySort";

/// Orders pods by priority, then by queue timestamp.
#[derive(Debug, Default)]
pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPod, b: &QueuedPod) -> bool {
        a.pod.priority > b.pod.priority || (a.pod.priority == b.pod.priority && a.timestamp_ms < b.timestamp_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    #[test]
    fn order() {
        let q = |p: crate::testing::PodBuilder, ts| QueuedPod { pod: p.info(), timestamp_ms: ts, attempts: 0 };
        let cases = [
            (q(pod("a").priority(10), 5), q(pod("b").priority(1), 1), true),
            (q(pod("a").priority(1), 1), q(pod("b").priority(10), 5), false),
            (q(pod("a"), 1), q(pod("b"), 2), true),
            (q(pod("a"), 2), q(pod("b"), 1), false),
        ];
        for (a, b, want) in cases {
            assert_eq!(PrioritySort.less(&a, &b), want, "{} vs {}", a.pod.name, b.pod.name);
        }
    }
}
