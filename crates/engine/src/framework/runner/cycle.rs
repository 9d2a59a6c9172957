//! One scheduling cycle for one pod, as upstream's `schedulePod` runs it
//! with PostFilter: PreFilter, Filter over a window of nodes, PostFilter
//! when nothing fits, PreScore, Score, NormalizeScore, weights, a random
//! choice among the best. A [`Cycle`] owns what travels through it (the
//! pod, the snapshot, the options, the cycle state and the outcome), so
//! that its steps are methods rather than functions passing them along.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{CycleOptions, CycleOutcome, Framework};
use crate::cache::Snapshot;
use crate::framework::batch::BatchCache;
use crate::framework::status::ReasonCounts;
use crate::framework::{Code, CycleState, NodeScore, ScorePlugin, Status, MAX_NODE_SCORE};
use berth_model::PodInfo;

/// What every Filter step of a cycle reads, borrowed together: the
/// framework, the cycle's state, the pod and the snapshot.
#[derive(Clone, Copy)]
pub(super) struct CycleView<'a> {
    pub(super) fw: &'a Framework,
    pub(super) state: &'a CycleState,
    pub(super) pod: &'a PodInfo,
    pub(super) snap: &'a Snapshot,
}

/// One scheduling cycle in progress.
pub(super) struct Cycle<'a> {
    pub(super) fw: &'a Framework,
    pub(super) pod: &'a Arc<PodInfo>,
    pub(super) snap: &'a Snapshot,
    pub(super) opts: CycleOptions,
    pub(super) state: CycleState,
    pub(super) out: CycleOutcome,
    /// The nodes PreFilter narrowed the pod to (None: every node).
    pub(super) subset: Option<HashSet<String>>,
}

/// How one run of a cycle ended.
pub(super) enum Attempt {
    /// The outcome is the cycle's.
    Done,
    /// The node selected on a reused Filter verdict no longer passes its
    /// Filters: the cycle must run again without reuse.
    Diverged,
}

/// The error for a score outside 0..=100 after normalizing (upstream's message).
pub(super) fn invalid_score(plugin: &'static str, score: i64) -> Status {
    Status::error(format!("plugin {plugin:?} returns an invalid score {score}, it should in the range of [0, 100] after normalizing")).with_plugin(plugin)
}

impl<'a> Cycle<'a> {
    /// A cycle for `pod` over `snap`, not yet run.
    pub(super) fn new(fw: &'a Framework, pod: &'a Arc<PodInfo>, snap: &'a Snapshot, opts: CycleOptions) -> Self {
        Cycle { fw, pod, snap, opts, state: CycleState::new(), out: CycleOutcome::default(), subset: None }
    }

    /// What the Filter steps read (the framework, the state, the pod, the snapshot).
    pub(super) fn view(&self) -> CycleView<'_> {
        CycleView { fw: self.fw, state: &self.state, pod: self.pod, snap: self.snap }
    }

    /// Is node `i` one PreFilter left to the pod?
    pub(super) fn candidate(&self, i: usize) -> bool {
        self.subset.as_ref().is_none_or(|s| s.contains(self.snap.nodes[i].name()))
    }

    /// Runs the cycle once, its outcome in `self.out`.
    pub(super) fn run(&mut self) -> Attempt {
        let (fw, pod, snap, opts) = (self.fw, self.pod, self.snap, self.opts);
        let n = snap.nodes.len();
        if n == 0 {
            self.out.message = Some("0/0 nodes are available: no nodes available to schedule pods.".into());
            return Attempt::Done;
        }
        let narrowing = match fw.run_pre_filter(&mut self.state, pod, snap) {
            Ok((subset, narrowing)) => {
                self.subset = subset;
                narrowing
            }
            Err(s) => {
                self.pre_filter_rejected(s);
                return Attempt::Done;
            }
        };
        self.exclude_narrowed(&narrowing);
        self.state.active_filters = Some(fw.active_filters(&self.state));
        self.state.signature = fw.cycle_signature(&self.state, pod, snap);
        if self.nominated_node_decides() {
            return Attempt::Done;
        }
        let window = self.window();
        // Opportunistic batching, over the per-signature results the
        // framework keeps (locked for the rest of the cycle).
        let mut caches = if self.reuses(window) { Some(fw.batch.lock().unwrap_or_else(std::sync::PoisonError::into_inner)) } else { None };
        let mut cache = caches.as_deref_mut().map(|c| c.for_signature(self.state.signature));
        let filtered = match cache.as_deref_mut() {
            Some(c) => self.filter_reusing(c, window),
            None => self.filter_window(window),
        };
        let processed = match filtered {
            Ok(p) => p,
            Err(s) => {
                if let Some(c) = cache {
                    c.clear();
                }
                self.out.message = Some(format!("running Filter plugin {:?}: {}", s.plugin, s.message()));
                self.out.error = Some(s);
                return Attempt::Done;
            }
        };
        self.out.evaluated = processed;
        if !opts.explain {
            fw.next_start.store((window.start + processed) % n, Ordering::Relaxed);
        }
        if self.out.feasible.is_empty() {
            match cache.as_deref_mut() {
                // Only a cycle with reuse fills the message before this point:
                // when it replayed the failure of the last identical pod.
                Some(c) => {
                    if self.out.message.is_none() {
                        self.fail();
                        c.set_failure(window.start, opts.skip_post_filter, &self.out);
                    }
                }
                None => self.fail(),
            }
            self.add_failure_details();
            return Attempt::Done;
        }
        if self.out.feasible.len() == 1 && !opts.explain {
            self.out.selected = Some(self.out.feasible[0]);
            self.out.totals = vec![0];
        } else {
            if let Err(s) = self.prioritize(cache.as_deref_mut()) {
                if let Some(c) = cache {
                    c.clear();
                }
                self.out.message = Some(format!("running Score plugins: {}", s));
                self.out.error = Some(s);
                self.out.feasible.clear();
                return Attempt::Done;
            }
            self.out.selected = fw.select_host(&self.out.feasible, &self.out.totals);
        }
        if let (Some(c), Some(i)) = (cache, self.out.selected)
            && !c.fresh(i)
            && !self.view().refilter(i)
        {
            fw.diverged.fetch_add(1, Ordering::Relaxed);
            c.clear();
            return Attempt::Diverged;
        }
        Attempt::Done
    }

    /// PreFilter rejected the pod (every node, with its status) or failed.
    fn pre_filter_rejected(&mut self, s: Status) {
        if s.code == Code::Error {
            self.out.message = Some(format!("running PreFilter plugin {:?}: {}", s.plugin, s.message()));
            self.out.error = Some(s);
            return;
        }
        let n = self.snap.nodes.len();
        for i in 0..n {
            self.out.statuses.set(i, n, s.clone());
        }
        self.out.unschedulable_plugins.push(s.plugin);
        self.out.pre_filter_rejection = Some(s);
        self.fail();
    }

    /// The statuses of the nodes PreFilter excluded (`narrowing`: the
    /// plugins that narrowed).
    fn exclude_narrowed(&mut self, narrowing: &[&'static str]) {
        let Some(sub) = &self.subset else { return };
        let reason = if narrowing.len() == 1 {
            format!("node(s) didn't satisfy plugin {}", narrowing[0])
        } else {
            format!("node(s) didn't satisfy plugin(s) [{}]", narrowing.join(", "))
        };
        let n = self.snap.nodes.len();
        for (i, ni) in self.snap.nodes.iter().enumerate() {
            if !sub.contains(ni.name()) {
                self.out.statuses.set(i, n, Status::unresolvable(reason.clone()).with_plugin(narrowing.first().copied().unwrap_or("")));
            }
        }
    }

    /// PreScore, then Score over the feasible nodes into `out.totals`.
    fn prioritize(&mut self, cache: Option<&mut BatchCache>) -> Result<(), Status> {
        let feasible = std::mem::take(&mut self.out.feasible);
        let r = self.prioritize_over(&feasible, cache);
        self.out.feasible = feasible;
        r
    }

    fn prioritize_over(&mut self, feasible: &[usize], cache: Option<&mut BatchCache>) -> Result<(), Status> {
        let fw = self.fw;
        for p in &fw.pre_score {
            let s = p.pre_score(&mut self.state, self.pod, feasible, self.snap);
            match s.code {
                Code::Success => {}
                Code::Skip => self.state.skip_score.push(p.name()),
                _ => return Err(s.with_plugin(p.name())),
            }
        }
        // A poisoned lock only means a panic elsewhere left a buffer behind:
        // it is cleared before each use.
        let mut buf: Vec<NodeScore> = std::mem::take(&mut *self.fw.scratch.lock().unwrap_or_else(|e| e.into_inner()));
        let r = self.prioritize_with(&mut buf, feasible, cache);
        buf.clear();
        *self.fw.scratch.lock().unwrap_or_else(|e| e.into_inner()) = buf;
        r
    }

    fn prioritize_with(&mut self, buf: &mut Vec<NodeScore>, feasible: &[usize], cache: Option<&mut BatchCache>) -> Result<(), Status> {
        let (fw, state, pod, snap) = (self.fw, &self.state, &**self.pod, self.snap);
        let view = CycleView { fw, state, pod, snap };
        let record = self.records_scores();
        // Node-local plugins' raw scores come from the last pod of this
        // signature where the node has not changed since.
        let cache = cache.filter(|_| !record);
        let reusing = cache.is_some();
        let mut totals = match cache {
            None => vec![0i64; feasible.len()],
            Some(c) => view.reused_totals(c, buf, feasible)?,
        };
        for (p, weight) in &fw.score {
            if reusing && p.reusable() {
                continue;
            }
            if record {
                self.out.record_score_plugin(p.name());
            }
            if state.score_skipped(p.name()) {
                if record {
                    self.out.record_scores(feasible.iter().map(|_| 0));
                }
                continue;
            }
            buf.clear();
            buf.extend(feasible.iter().map(|&ni| NodeScore { node: ni, score: 0 }));
            p.score_nodes(state, pod, snap, buf).map_err(|s| s.with_plugin(p.name()))?;
            view.normalized_into(&**p, *weight, buf, &mut totals)?;
            if record {
                self.out.record_scores(buf.iter().map(|s| s.score));
            }
        }
        self.out.totals = totals;
        Ok(())
    }

    /// Collects the Filter plugins' [`crate::framework::Plugin::failure_detail`]
    /// into `failure_detail` (after [`Self::fail`] or a replayed failure:
    /// they are the pod's own), one sentence after the other.
    fn add_failure_details(&mut self) {
        let active = self.fw.active_or_all(&self.state);
        let details: Vec<String> = active.iter().filter_map(|&i| self.fw.filter[i].failure_detail(&self.state, self.pod, &self.out.statuses)).collect();
        self.out.failure_detail = (!details.is_empty()).then(|| details.join(" "));
    }

    /// Nothing fits: upstream's FitError message, after PostFilter.
    fn fail(&mut self) {
        let n = self.snap.nodes.len();
        let mut msg = format!("0/{n} nodes are available:");
        if let Some(s) = &self.out.pre_filter_rejection {
            msg.push_str(&format!(" {}.", s.message()));
        } else {
            let mut hist = ReasonCounts::default();
            for s in self.out.statuses.statuses.iter().flatten() {
                if !s.is_success() {
                    hist.add_status(s);
                }
            }
            let parts = hist.parts();
            if !parts.is_empty() {
                msg.push_str(&format!(" {}.", parts.join(", ")));
            }
        }
        if !self.opts.skip_post_filter && !self.fw.post_filter.is_empty() {
            let post = self.run_post_filter();
            if !post.is_empty() {
                msg.push(' ');
                msg.push_str(&post);
            }
        }
        self.out.message = Some(msg);
    }

    /// Runs the PostFilter plugins in order and returns upstream's
    /// PostFilter message (`RunPostFilterPlugins` in
    /// pkg/scheduler/framework/runtime/framework.go and its `Status.Message`,
    /// v1.37): the first plugin that succeeds ends the run with its own
    /// reasons (none, for DefaultPreemption); one that answers
    /// UnschedulableAndUnresolvable or Error ends it with its own message
    /// alone; otherwise the reasons of every plugin, in order, joined by
    /// ", " ("deallocation of ResourceClaim completed, preemption: 0/3
    /// nodes are available: ..."). Upstream's `FitError.Error` appends it
    /// after a space, with no period of its own.
    fn run_post_filter(&mut self) -> String {
        let fw = self.fw;
        let mut reasons: Vec<String> = Vec::new();
        for p in &fw.post_filter {
            let (s, mut r) = p.post_filter(fw, &self.state, self.pod, self.snap, &self.out.statuses);
            self.out.deallocations.append(&mut r.deallocations);
            match s.code {
                Code::Success => {
                    let m = s.message();
                    self.out.post_filter = Some(r);
                    return m;
                }
                Code::Unschedulable => match r.message.take() {
                    Some(m) => reasons.push(m),
                    None => reasons.extend(s.reasons.iter().map(|r| r.to_string())),
                },
                _ => return r.message.take().unwrap_or_else(|| s.message()),
            }
        }
        reasons.join(", ")
    }
}

impl CycleView<'_> {
    /// Normalizes `p`'s raw scores in `buf` (when it normalizes), checks
    /// them and adds them, weighted, to `totals`.
    pub(super) fn normalized_into(&self, p: &dyn ScorePlugin, weight: i64, buf: &mut [NodeScore], totals: &mut [i64]) -> Result<(), Status> {
        if p.has_normalize() {
            let s = p.normalize_score(self.state, self.pod, buf, self.snap);
            if !s.is_success() {
                return Err(s.with_plugin(p.name()));
            }
        }
        for (t, ns) in totals.iter_mut().zip(buf.iter()) {
            if !(0..=MAX_NODE_SCORE).contains(&ns.score) {
                return Err(invalid_score(p.name(), ns.score));
            }
            *t += ns.score * weight;
        }
        Ok(())
    }
}
