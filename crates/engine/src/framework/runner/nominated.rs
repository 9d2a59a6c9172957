//! The nominated node's fast path (upstream evaluates a pod's nominated
//! node before the others, and takes it when it fits) and Filter with the
//! nominated pods of equal or higher priority counted on their node.

use std::sync::Arc;

use super::cycle::Cycle;
use super::Framework;
use crate::cache::Snapshot;
use crate::framework::{Code, CycleState, Status};
use berth_model::{NodeInfo, PodInfo};

/// Does node `i` hold a nominated pod (other than `pod`) of equal or higher
/// priority, which Filter must count there?
#[inline]
pub(super) fn nominated_here(snap: &Snapshot, pod: &PodInfo, i: usize) -> bool {
    !snap.nominated.is_empty() && snap.nominated.get(snap.nodes[i].name()).is_some_and(|v| v.iter().any(|p| p.uid != pod.uid && p.priority >= pod.priority))
}

impl Cycle<'_> {
    /// The nominated node first, as upstream evaluates it before the
    /// others: true when that decided the cycle (the pod fits there, or
    /// Filter failed); explain evaluates every node instead.
    pub(super) fn nominated_node_decides(&mut self) -> bool {
        if self.explains() {
            return false;
        }
        let Some(idx) = self.pod.nominated_node.as_deref().and_then(|nn| self.snap.node_index(nn)).filter(|&i| self.candidate(i)) else {
            return false;
        };
        let s = self.fw.run_filter_with_nominated(&self.state, self.pod, &self.snap.nodes[idx], self.snap);
        if s.code == Code::Error {
            self.out.message = Some(s.message());
            self.out.error = Some(s);
            return true;
        }
        if !s.is_success() {
            return false;
        }
        self.out.feasible.push(idx);
        self.out.evaluated = 1;
        self.out.selected = Some(idx);
        self.out.totals = vec![0];
        true
    }
}

impl Framework {
    /// Filter with the nominated pods of equal or higher priority on the node
    /// counted as if already there (upstream `RunFilterPluginsWithNominatedPods`).
    pub fn run_filter_with_nominated(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo, snap: &Snapshot) -> Status {
        if snap.nominated.is_empty() {
            return self.run_filter(state, pod, node);
        }
        let nominated: Vec<&Arc<PodInfo>> = match snap.nominated.get(node.name()) {
            Some(v) => v.iter().filter(|p| p.uid != pod.uid && p.priority >= pod.priority).collect(),
            None => Vec::new(),
        };
        if nominated.is_empty() {
            return self.run_filter(state, pod, node);
        }
        let mut st = state.clone();
        let mut ni = node.clone();
        for np in nominated {
            let mut np2 = (**np).clone();
            np2.node_name = Some(node.name().to_string());
            let np2 = Arc::new(np2);
            ni.add_pod(np2.clone());
            let s = self.run_add_pod(&mut st, pod, &np2, &ni, snap);
            if !s.is_success() {
                return s;
            }
        }
        let s = self.run_filter(&st, pod, &ni);
        if !s.is_success() {
            return s;
        }
        self.run_filter(state, pod, node)
    }
}
