//! Opportunistic batching in the cycle (upstream KEP-5598): a pod with the
//! same scheduling signature as an earlier one reuses that pod's node-local
//! Filter verdicts and raw scores on every node that has not changed since
//! ([`BatchCache`]); the plugins that look beyond the node run as usual.

use std::hash::{Hash, Hasher};

use super::cycle::{invalid_score, Cycle, CycleView};
use super::window::Window;
use super::{Framework, NodeStatuses};
use crate::cache::Snapshot;
use crate::framework::batch::{BatchCache, PASS};
use crate::framework::{CycleState, NodeScore, Status, MAX_NODE_SCORE};
use berth_model::PodInfo;

/// The window of `n` nodes from `start` over the node-local verdicts `rej`: the nodes
/// that passed into `feasible`, in order, and into `late` those rejected by
/// a node-local plugin that comes after the first other one (`first_other`).
fn passed_locally(rej: &[u8], n: usize, start: usize, first_other: usize, feasible: &mut Vec<usize>, late: &mut Vec<usize>) {
    feasible.clear();
    late.clear();
    // The window in two plain ranges (a chained iterator costs more per node).
    for range in [start..n, 0..start] {
        for i in range {
            let r = rej[i];
            if r == PASS {
                feasible.push(i);
            } else if usize::from(r) > first_other {
                late.push(i);
            }
        }
    }
}

/// The Filter plugins that look beyond the node, in a cycle that reuses the
/// node-local ones' verdicts.
struct Beyond<'a> {
    /// Those plugins (positions in the Filter list).
    others: &'a [usize],
    /// Every active Filter plugin, in order.
    active: &'a [usize],
    /// Nodes a node-local plugin rejected after one of `others` (whose
    /// status may come first).
    late: &'a [usize],
}

impl Cycle<'_> {
    /// May this cycle reuse an identical pod's results? Every node is
    /// evaluated, nothing narrows or nominates, and when only part of the
    /// window is evaluated, every Filter that runs is node-local (the others
    /// would have to run node by node).
    pub(super) fn reuses(&self, w: Window) -> bool {
        let (fw, state, n) = (self.fw, &self.state, self.snap.nodes.len());
        !self.explains()
            && !self.opts.no_reuse
            && state.signature != 0
            && self.subset.is_none()
            && self.pod.nominated_node.is_none()
            && self.snap.nominated.is_empty()
            && state.active_filters.as_ref().is_some_and(|l| l.len() < usize::from(PASS) && (w.to_find >= n || l.iter().all(|&i| fw.filter[i].reusable())))
    }

    /// Filter over every node, with the node-local plugins' verdicts
    /// recomputed only on the nodes that changed since the last cycle of a
    /// pod with the same signature ([`BatchCache`]), and the other plugins
    /// run on every node the node-local ones passed (and on those a
    /// node-local plugin after them rejected). The outcome (feasible nodes in
    /// window order, statuses, rejecting plugins) is what
    /// [`Self::filter_window`] gives over every node.
    pub(super) fn filter_reusing(&mut self, cache: &mut BatchCache, w: Window) -> Result<usize, Status> {
        let Window { start, to_find } = w;
        let opts = self.opts;
        let skip_post_filter = opts.skip_post_filter;
        let (fw, snap) = (self.fw, self.snap);
        let n = snap.nodes.len();
        // The cycle's state is only read here, and the outcome written:
        // borrowed apart, so that Filter steps can fill the outcome.
        let view = CycleView { fw, state: &self.state, pod: self.pod, snap };
        let out = &mut self.out;
        let state = view.state;
        let active = fw.active_or_all(state);
        let active: &[usize] = &active;
        let local: Vec<usize> = active.iter().copied().filter(|&i| fw.filter[i].reusable()).collect();
        let all_local = local.len() == active.len();
        let mut changed = Vec::new();
        cache.refresh(state.signature, &local, all_local, snap, &mut changed);
        if all_local && let Some(o) = cache.failure(start, skip_post_filter) {
            // Nothing changed since the last pod of this signature failed from
            // the same start: its outcome (statuses, message, PostFilter's
            // answer) is this pod's.
            *out = o.clone();
            return Ok(n);
        }
        if !changed.is_empty() {
            let mut alive = changed.clone();
            let mut rejected: Vec<(usize, Status)> = Vec::new();
            view.filter_list(&local, &mut alive, &mut rejected)?;
            for &i in &alive {
                cache.set_verdict(i, None);
            }
            for (i, s) in rejected {
                let at = active.iter().position(|&k| fw.filter[k].name() == s.plugin).unwrap_or(0);
                cache.set_verdict(i, Some((at as u8, s)));
            }
        }
        out.feasible.reserve(n);
        let window = (start..n).chain(0..start);
        if all_local && to_find < n {
            // Part of the window: up to the node that makes `to_find` feasible
            // ones, as evaluating one node after another does.
            let mut seen = vec![false; active.len()];
            let mut processed = 0;
            for i in window {
                processed += 1;
                let r = cache.verdict(i);
                if r == PASS {
                    out.feasible.push(i);
                    if out.feasible.len() >= to_find {
                        break;
                    }
                    continue;
                }
                if let Some(s) = cache.status(i) {
                    out.statuses.set(i, n, s.clone());
                }
                if let Some(seen) = seen.get_mut(usize::from(r)).filter(|s| !**s) {
                    *seen = true;
                    out.unschedulable_plugins.push(fw.filter[active[usize::from(r)]].name());
                }
            }
            return Ok(processed);
        }
        if all_local {
            if cache.rejected() == 0 {
                out.feasible.extend(window);
                return Ok(n);
            }
            let mut seen = vec![false; active.len()];
            for i in window {
                let r = cache.verdict(i);
                if r == PASS {
                    out.feasible.push(i);
                } else if let Some(seen) = seen.get_mut(usize::from(r)).filter(|s| !**s) {
                    *seen = true;
                    out.unschedulable_plugins.push(fw.filter[active[usize::from(r)]].name());
                }
            }
            out.statuses = NodeStatuses { statuses: cache.statuses() };
            return Ok(n);
        }
        // The plugins that look beyond the node run on every node the
        // node-local ones passed, and on those rejected by a node-local
        // plugin that comes after one of them (its status may come first).
        let first_other = active.iter().position(|&i| !fw.filter[i].reusable()).unwrap_or(active.len());
        let others: Vec<usize> = active.iter().copied().filter(|&i| !fw.filter[i].reusable()).collect();
        let mut late = Vec::new();
        passed_locally(cache.verdicts(), n, start, first_other, &mut out.feasible, &mut late);
        // The rejections of the other plugins go to a buffer kept across
        // cycles: a spreading constraint may reject thousands of nodes per
        // cycle, and a fresh vector that size costs page faults each time.
        let mut rejected = cache.take_scratch();
        // Statuses are read only when nothing fits: first without them
        // where a plugin can, again with them if nothing fit.
        let lean = !opts.keep_statuses;
        let beyond = Beyond { others: &others, active, late: &late };
        let mut r = view.filter_others(lean, &beyond, cache, &mut out.feasible, &mut rejected);
        if lean && r.is_ok() && out.feasible.is_empty() {
            passed_locally(cache.verdicts(), n, start, first_other, &mut out.feasible, &mut late);
            rejected.clear();
            let beyond = Beyond { others: &others, active, late: &late };
            r = view.filter_others(false, &beyond, cache, &mut out.feasible, &mut rejected);
        }
        if r.is_ok() && (out.feasible.is_empty() || opts.keep_statuses) {
            // Per-node statuses and the rejecting plugins are read only when
            // nothing fits (the failure message, PostFilter, requeueing);
            // explain never reuses. A cycle that finds a node skips them
            // unless asked.
            if cache.rejected() > 0 {
                out.statuses = NodeStatuses { statuses: cache.statuses() };
            }
            let any = cache.rejected() > 0 || !rejected.is_empty();
            out.statuses.set_all(n, rejected.drain(..));
            if any {
                for range in [start..n, 0..start] {
                    for i in range {
                        if let Some(s) = out.statuses.get(i)
                            && !out.unschedulable_plugins.contains(&s.plugin) {
                                out.unschedulable_plugins.push(s.plugin);
                            }
                    }
                }
            }
        }
        cache.keep_scratch(rejected);
        r.map(|()| n)
    }
}

impl CycleView<'_> {
    /// Runs the node-local Filter plugins once more on node `i`, selected on
    /// a reused verdict, so that the plugins that keep per-node results for
    /// Reserve have them in this cycle's state; false when it no longer passes.
    pub(super) fn refilter(&self, i: usize) -> bool {
        let active = self.fw.active_or_all(self.state);
        let local: Vec<usize> = active.iter().copied().filter(|&k| self.fw.filter[k].reusable()).collect();
        let (mut alive, mut rejected) = (vec![i], Vec::new());
        self.filter_list(&local, &mut alive, &mut rejected).is_ok() && rejected.is_empty() && alive == [i]
    }

    /// [`Cycle::filter_reusing`]'s plugins that look beyond the node: `others`
    /// over the nodes the node-local ones passed (`feasible`), and over each
    /// `late` node the plugins of `others` that come before its rejecting one.
    fn filter_others(&self, lean: bool, beyond: &Beyond, cache: &BatchCache, feasible: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) -> Result<(), Status> {
        self.filter_list_as(lean, beyond.others, feasible, rejected)?;
        for &i in beyond.late {
            let before: Vec<usize> = beyond.active[..usize::from(cache.verdict(i))].iter().copied().filter(|&k| !self.fw.filter[k].reusable()).collect();
            let mut one = vec![i];
            self.filter_list_as(lean, &before, &mut one, rejected)?;
        }
        Ok(())
    }

    /// The totals of the node-local Score plugins over `feasible`: their
    /// raw scores from `c` where the node has not changed since the last pod
    /// of this signature (and computed now where it has), normalized and
    /// weighted. The other Score plugins run as in a full cycle.
    pub(super) fn reused_totals(&self, c: &mut BatchCache, buf: &mut Vec<NodeScore>, feasible: &[usize]) -> Result<Vec<i64>, Status> {
        let scorers: Vec<(usize, i64, bool)> = self
            .fw
            .score
            .iter()
            .enumerate()
            .filter(|(_, (p, _))| p.reusable() && !self.state.score_skipped(p.name()))
            .map(|(i, (p, w))| (i, *w, p.has_normalize()))
            .collect();
        let mut stale = Vec::new();
        c.stale_scores(&scorers, &mut stale);
        let mut bad: Vec<(usize, &'static str, i64)> = Vec::new();
        if !stale.is_empty() {
            for (k, &(i, _, norm)) in scorers.iter().enumerate() {
                let p = &self.fw.score[i].0;
                buf.clear();
                buf.extend(stale.iter().map(|&ni| NodeScore { node: ni, score: 0 }));
                p.score_nodes(self.state, self.pod, self.snap, buf).map_err(|s| s.with_plugin(p.name()))?;
                for ns in buf.iter() {
                    if !norm && !(0..=MAX_NODE_SCORE).contains(&ns.score) {
                        bad.push((ns.node, p.name(), ns.score));
                    }
                    c.set_raw(k, ns.node, ns.score);
                }
            }
            c.scored(&stale, &bad);
        }
        let base = c.base();
        let mut totals: Vec<i64> = feasible.iter().map(|&i| base[i]).collect();
        if !c.bad().is_empty()
            && let Some(&(_, plugin, score)) = c.bad().iter().find(|(i, _, _)| feasible.contains(i)) {
                // A node-local score out of range fails the cycle that
                // finds its node feasible, as a full cycle does.
                return Err(invalid_score(plugin, score));
            }
        for (k, &(i, weight, norm)) in scorers.iter().enumerate() {
            if !norm {
                continue;
            }
            let raw = c.raw(k);
            if let Some(reverse) = self.fw.score[i].0.default_normalized() {
                // Upstream's DefaultNormalizeScore, over the cached raw scores.
                let max = feasible.iter().map(|&ni| raw[ni]).max().unwrap_or(0);
                if max == 0 {
                    if reverse {
                        let all = MAX_NODE_SCORE * weight;
                        totals.iter_mut().for_each(|t| *t += all);
                    }
                } else {
                    for (t, &ni) in totals.iter_mut().zip(feasible) {
                        let s = MAX_NODE_SCORE * raw[ni] / max;
                        let s = if reverse { MAX_NODE_SCORE - s } else { s };
                        if !(0..=MAX_NODE_SCORE).contains(&s) {
                            return Err(invalid_score(self.fw.score[i].0.name(), s));
                        }
                        *t += s * weight;
                    }
                }
                continue;
            }
            buf.clear();
            buf.extend(feasible.iter().map(|&ni| NodeScore { node: ni, score: raw[ni] }));
            self.normalized_into(&*self.fw.score[i].0, weight, buf, &mut totals)?;
        }
        Ok(totals)
    }
}

impl Framework {
    /// The cycle's signature (see [`crate::framework::Plugin::sign_pod`]): the pod's, with
    /// what each plugin adds; 0 when the pod or some plugin leaves it unsigned.
    pub(super) fn cycle_signature(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot) -> u64 {
        if pod.signature == 0 {
            return 0;
        }
        let mut sig = pod.signature;
        for e in &self.entries {
            match e.plugin.plugin.sign_pod(state, pod, snap) {
                None => return 0,
                Some(0) => {}
                Some(h) => {
                    let mut hasher = std::hash::DefaultHasher::new();
                    (sig, e.plugin.name(), h).hash(&mut hasher);
                    sig = hasher.finish().max(1);
                }
            }
        }
        sig
    }
}
