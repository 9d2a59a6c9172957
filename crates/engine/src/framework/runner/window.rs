//! The window of nodes Filter walks: from where the last cycle stopped
//! (rotating across cycles, as upstream's `nextStartNodeIndex`), until
//! enough feasible nodes are found (`numFeasibleNodesToFind`), and the
//! Filter plugins run over it one plugin at a time.

use std::sync::atomic::Ordering;

use super::cycle::{Cycle, CycleView};
use super::nominated::nominated_here;
use super::num_feasible_nodes_to_find;
use crate::framework::{Code, Status};

/// Where a cycle's Filter starts and how many feasible nodes it looks for.
#[derive(Clone, Copy, Debug)]
pub(super) struct Window {
    /// The first node evaluated.
    pub(super) start: usize,
    /// Feasible nodes to find before scoring.
    pub(super) to_find: usize,
}

impl Cycle<'_> {
    /// This cycle's window: every node from the first when explaining,
    /// otherwise from where the last cycle stopped.
    pub(super) fn window(&self) -> Window {
        let n = self.snap.nodes.len();
        if self.explains() {
            return Window { start: 0, to_find: n };
        }
        Window { start: self.fw.next_start.load(Ordering::Relaxed) % n, to_find: num_feasible_nodes_to_find(self.fw.percentage_of_nodes_to_score, n) }
    }

    /// Filter over a window of nodes starting at `start`, until `to_find`
    /// feasible nodes are found; returns how many nodes were evaluated, or the
    /// error that failed the cycle.
    ///
    /// The window is taken in chunks of as many candidates as feasible nodes
    /// are still wanted, and each chunk runs one plugin at a time over the
    /// nodes still feasible ([`crate::framework::FilterPlugin::filter_nodes`]): no chunk can hold
    /// more feasible nodes than wanted, so the nodes evaluated, the feasible
    /// ones (in window order), the statuses and the rejecting plugins are
    /// those of evaluating one node after another. Nodes with nominated pods
    /// to count go through the per-node path.
    pub(super) fn filter_window(&mut self, w: Window) -> Result<usize, Status> {
        let (fw, pod, snap) = (self.fw, self.pod, self.snap);
        let Window { start, to_find } = w;
        let n = snap.nodes.len();
        let mut processed = 0;
        let mut order = (start..n).chain(0..start);
        let mut exhausted = false;
        let (mut chunk, mut alive, mut rejected): (Vec<usize>, Vec<usize>, Vec<(usize, Status)>) = (Vec::new(), Vec::new(), Vec::new());
        while self.out.feasible.len() < to_find && !exhausted {
            let want = to_find - self.out.feasible.len();
            chunk.clear();
            while chunk.len() < want {
                match order.next() {
                    Some(i) => {
                        if self.candidate(i) {
                            chunk.push(i);
                        }
                    }
                    None => {
                        exhausted = true;
                        break;
                    }
                }
            }
            processed += chunk.len();
            alive.clear();
            if snap.nominated.is_empty() {
                // No nominated pod anywhere: every node takes the batch path.
                alive.extend_from_slice(&chunk);
            } else {
                for &i in &chunk {
                    if !nominated_here(snap, pod, i) {
                        alive.push(i);
                        continue;
                    }
                    let s = fw.run_filter_with_nominated(&self.state, pod, &snap.nodes[i], snap);
                    match s.code {
                        Code::Success => alive.push(i),
                        Code::Error => return Err(s),
                        _ => self.out.statuses.set(i, n, s),
                    }
                }
            }
            rejected.clear();
            self.view().filter_batch(&mut alive, &mut rejected)?;
            for (i, s) in rejected.drain(..) {
                self.out.statuses.set(i, n, s);
            }
            if self.out.statuses.statuses.is_empty() {
                // No node rejected so far in this cycle: the chunk is feasible.
                self.out.feasible.extend_from_slice(&chunk);
                continue;
            }
            for &i in &chunk {
                match self.out.statuses.get(i) {
                    None => self.out.feasible.push(i),
                    Some(s) => {
                        if !self.out.unschedulable_plugins.contains(&s.plugin) {
                            self.out.unschedulable_plugins.push(s.plugin);
                        }
                    }
                }
            }
        }
        Ok(processed)
    }
}

impl CycleView<'_> {
    /// Runs the cycle's active Filter plugins over `alive`, one plugin at a
    /// time: `alive` keeps the nodes every plugin passed (in order),
    /// `rejected` gets the others with the first rejecting plugin's status.
    pub(super) fn filter_batch(&self, alive: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) -> Result<(), Status> {
        let all: Vec<usize>;
        let list = match &self.state.active_filters {
            Some(l) => l,
            None => {
                all = self.fw.active_filters(self.state);
                &all
            }
        };
        self.filter_list(list, alive, rejected)
    }

    /// [`Self::filter_batch`] with the Filter plugins `list` (positions in the
    /// framework's Filter list, in order).
    pub(super) fn filter_list(&self, list: &[usize], alive: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) -> Result<(), Status> {
        self.filter_list_as(false, list, alive, rejected)
    }

    /// [`Self::filter_list`]; with `lean`, a plugin that can leaves out the
    /// statuses of the nodes it rejects ([`crate::framework::FilterPlugin::retain_feasible`]).
    pub(super) fn filter_list_as(&self, lean: bool, list: &[usize], alive: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) -> Result<(), Status> {
        let (state, pod, snap) = (self.state, self.pod, self.snap);
        for &k in list {
            if alive.is_empty() {
                break;
            }
            let p = &self.fw.filter[k];
            if lean && p.retain_feasible(state, pod, snap, alive) {
                continue;
            }
            let from = rejected.len();
            p.filter_nodes(state, pod, snap, alive, rejected);
            for (_, s) in &mut rejected[from..] {
                s.plugin = p.name();
                if s.code == Code::Error {
                    return Err(s.clone());
                }
                if !s.is_rejected() {
                    s.code = Code::Error;
                    return Err(s.clone());
                }
            }
        }
        Ok(())
    }
}
