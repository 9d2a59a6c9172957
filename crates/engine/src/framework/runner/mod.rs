//! The framework runner: a profile's plugins by extension point, and the
//! entry to one scheduling cycle ([`Framework::schedule`]), as upstream's
//! `frameworkImpl` and `schedulePod`. The cycle itself lives in [`cycle`]
//! (PreFilter, Filter, PostFilter, PreScore, Score, selection), with its
//! concerns beside it: the nominated node's fast path ([`nominated`]), the
//! rotating window of nodes Filter walks ([`window`]), the reuse of an
//! identical pod's results ([`reuse`], over [`super::batch`]) and what
//! explain records ([`explain`]).

mod cycle;
mod explain;
mod nominated;
mod reuse;
mod window;

use cycle::{Attempt, Cycle};

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::batch::BatchCaches;
use super::{
    BindPlugin, Code, CycleState, FilterPlugin, NodeScore, PermitPlugin, Plugin, Points, PostBindPlugin, PostFilterPlugin, PostFilterResult, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin,
    PreScorePlugin, QueueSortPlugin, QueuedPod, Registered, ReservePlugin, ScorePlugin, Status,
};
use crate::cache::Snapshot;
use berth_model::{NodeInfo, PodInfo};

/// A plugin enabled in a profile, with its score weight.
#[derive(Clone)]
pub struct PluginEntry {
    /// The plugin, under each extension-point trait it implements.
    pub plugin: Registered,
    /// Score weight (1 when not a score plugin or unset).
    pub weight: i64,
}

impl PluginEntry {
    /// The plugin with `weight`, enabled at every point it implements (as
    /// multiPoint enables it).
    pub fn at_every_point(plugin: Registered, weight: i64) -> (PluginEntry, Points) {
        let points = plugin.points();
        (PluginEntry { plugin, weight }, points)
    }
}

/// Per-node Filter statuses of a cycle, by node index (Success: feasible or not evaluated).
///
/// Shared, so that a cycle replaying the last identical pod's failure
/// ([`super::batch::BatchCache`]) hands out the same statuses without copying one per node.
#[derive(Clone, Debug, Default)]
pub struct NodeStatuses {
    /// Status per node index of nodes that failed; None when the node passed or was not evaluated.
    pub statuses: Arc<Vec<Option<Status>>>,
}

impl NodeStatuses {
    /// The status of a node (None: not evaluated).
    pub fn get(&self, i: usize) -> Option<&Status> {
        self.statuses.get(i).and_then(Option::as_ref)
    }

    /// Records the statuses of several nodes at once (one copy-on-write
    /// check, one growth).
    pub fn set_all(&mut self, n: usize, all: impl Iterator<Item = (usize, Status)>) {
        let mut all = all.peekable();
        if all.peek().is_none() {
            return;
        }
        let statuses = Arc::make_mut(&mut self.statuses);
        if statuses.len() < n {
            statuses.resize(n, None);
        }
        for (i, s) in all {
            if let Some(slot) = statuses.get_mut(i) {
                *slot = Some(s);
            }
        }
    }

    /// Records a node's status (the vector grows on first use, so a cycle
    /// where every node passes allocates nothing here).
    pub fn set(&mut self, i: usize, n: usize, s: Status) {
        let statuses = Arc::make_mut(&mut self.statuses);
        if statuses.len() < n {
            statuses.resize(n, None);
        }
        if let Some(slot) = statuses.get_mut(i) {
            *slot = Some(s);
        }
    }
}

/// How to run a cycle.
#[derive(Clone, Copy, Debug, Default)]
pub struct CycleOptions {
    /// Evaluate every node and record every plugin's scores (explain).
    pub explain: bool,
    /// Do not run PostFilter when nothing fits.
    pub skip_post_filter: bool,
    /// Do not reuse the last pod's per-node results (`berth bench --no-reuse`,
    /// to measure what opportunistic batching saves).
    pub no_reuse: bool,
    /// Record the per-node Filter statuses and the rejecting plugins even
    /// when a node fits. Only a failure reads them (its message, PostFilter,
    /// requeueing), so a cycle that finds a node may otherwise skip them.
    pub keep_statuses: bool,
}

/// Everything a cycle decided and, with `explain`, how.
#[derive(Clone, Debug, Default)]
pub struct CycleOutcome {
    /// The chosen node's index.
    pub selected: Option<usize>,
    /// Filter statuses per node.
    pub statuses: NodeStatuses,
    /// Indexes of feasible nodes found.
    pub feasible: Vec<usize>,
    /// Score plugin names, in order (explain only).
    pub score_plugins: Vec<&'static str>,
    /// Per score plugin, per feasible node (same order as `feasible`), the normalized score (explain only).
    pub scores: Vec<Vec<i64>>,
    /// Weighted total per feasible node (same order as `feasible`).
    pub totals: Vec<i64>,
    /// The failure message when nothing fits ("0/N nodes are available: ..."),
    /// upstream's word for word.
    pub message: Option<String>,
    /// What the Filter plugins can add about the pod's own objects when
    /// nothing fits ([`super::Plugin::failure_detail`]; berth's, kept out of
    /// the message so that the message stays upstream's).
    pub failure_detail: Option<String>,
    /// Plugins that rejected the pod (for requeueing on events).
    pub unschedulable_plugins: Vec<&'static str>,
    /// A PreFilter rejection applied to every node.
    pub pre_filter_rejection: Option<Status>,
    /// PostFilter (preemption) result when nothing fits.
    pub post_filter: Option<PostFilterResult>,
    /// Claims PostFilter plugins deallocate when nothing fits (whatever
    /// their status), for the caller to write.
    pub deallocations: Vec<super::DeallocateClaim>,
    /// An internal error that failed the cycle.
    pub error: Option<Status>,
    /// Nodes evaluated by Filter.
    pub evaluated: usize,
}

/// A profile's plugins, ready to run.
pub struct Framework {
    /// The profile's schedulerName.
    pub profile: String,
    entries: Vec<PluginEntry>,
    // Each extension point's plugins, in the profile's order, through the
    // trait of that point: the cycle calls a point's method only on a
    // plugin that implements it.
    queue_sort: Option<Arc<dyn QueueSortPlugin>>,
    pre_enqueue: Vec<Arc<dyn PreEnqueuePlugin>>,
    pre_filter: Vec<Arc<dyn PreFilterPlugin>>,
    /// Filter plugins; [`CycleState`]'s active filters are positions here.
    filter: Vec<Arc<dyn FilterPlugin>>,
    post_filter: Vec<Arc<dyn PostFilterPlugin>>,
    pre_score: Vec<Arc<dyn PreScorePlugin>>,
    /// Score plugins with their weights.
    score: Vec<(Arc<dyn ScorePlugin>, i64)>,
    reserve: Vec<Arc<dyn ReservePlugin>>,
    permit: Vec<Arc<dyn PermitPlugin>>,
    pre_bind: Vec<Arc<dyn PreBindPlugin>>,
    bind: Vec<Arc<dyn BindPlugin>>,
    post_bind: Vec<Arc<dyn PostBindPlugin>>,
    /// percentageOfNodesToScore (None or 0: upstream's adaptive default).
    pub percentage_of_nodes_to_score: Option<i32>,
    next_start: AtomicUsize,
    rng: AtomicU64,
    /// Per-node results of the last cycle, reused by the next pod with the same signature.
    batch: std::sync::Mutex<BatchCaches>,
    /// Cycles whose selected node no longer passed the Filter verdict reused for it.
    diverged: AtomicU64,
    /// The score buffer, kept between cycles: one pass's worth per node,
    /// large enough at thousands of nodes that allocating and freeing it
    /// every cycle showed in profiles (glibc consolidates on such frees).
    scratch: std::sync::Mutex<Vec<NodeScore>>,
}

/// Upstream's floor on the number of feasible nodes to look for.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// Upstream's floor on the adaptive percentage.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i64 = 5;

/// splitmix64's output function.
fn splitmix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How many feasible nodes to find before scoring (upstream `numFeasibleNodesToFind`).
pub fn num_feasible_nodes_to_find(percentage: Option<i32>, num_all: usize) -> usize {
    if num_all < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all;
    }
    let mut pct = i64::from(percentage.unwrap_or(0));
    if pct >= 100 {
        return num_all;
    }
    if pct <= 0 {
        pct = 50 - (num_all as i64) / 125;
        if pct < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND {
            pct = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND;
        }
    }
    let n = (num_all as i64 * pct / 100) as usize;
    n.max(MIN_FEASIBLE_NODES_TO_FIND)
}

impl Framework {
    /// Builds a framework from plugins in configuration order, each listed
    /// with the extension points it is enabled at.
    pub fn new(profile: String, plugins: Vec<(PluginEntry, Points)>, percentage_of_nodes_to_score: Option<i32>, seed: u64) -> Self {
        let mut entries: Vec<PluginEntry> = Vec::new();
        // Per extension point (in `Points::ALL` order), the entries enabled
        // there, in order of first enabling.
        let mut at: [Vec<usize>; 12] = Default::default();
        for (e, pts) in plugins {
            let i = match entries.iter().position(|x| x.plugin.name() == e.plugin.name()) {
                Some(i) => {
                    if pts.has(Points::SCORE) {
                        entries[i].weight = e.weight;
                    }
                    i
                }
                None => {
                    entries.push(e);
                    entries.len() - 1
                }
            };
            for ((p, _), list) in Points::ALL.iter().zip(at.iter_mut()) {
                if pts.has(*p) && !list.contains(&i) {
                    list.push(i);
                }
            }
        }
        // A point enabled for a plugin that does not implement it has
        // nothing to run (profiles refuse such configurations).
        fn handles<T: ?Sized>(entries: &[PluginEntry], list: &[usize], h: impl Fn(&PluginEntry) -> Option<Arc<T>>) -> Vec<Arc<T>> {
            list.iter().filter_map(|&i| h(&entries[i])).collect()
        }
        let [queue_sort, pre_enqueue, pre_filter, filter, post_filter, pre_score, score, reserve, permit, pre_bind, bind, post_bind] = &at;
        Framework {
            profile,
            queue_sort: handles(&entries, queue_sort, |e| e.plugin.queue_sort.clone()).into_iter().next(),
            pre_enqueue: handles(&entries, pre_enqueue, |e| e.plugin.pre_enqueue.clone()),
            pre_filter: handles(&entries, pre_filter, |e| e.plugin.pre_filter.clone()),
            filter: handles(&entries, filter, |e| e.plugin.filter.clone()),
            post_filter: handles(&entries, post_filter, |e| e.plugin.post_filter.clone()),
            pre_score: handles(&entries, pre_score, |e| e.plugin.pre_score.clone()),
            score: score.iter().filter_map(|&i| entries[i].plugin.score.clone().map(|p| (p, entries[i].weight))).collect(),
            reserve: handles(&entries, reserve, |e| e.plugin.reserve.clone()),
            permit: handles(&entries, permit, |e| e.plugin.permit.clone()),
            pre_bind: handles(&entries, pre_bind, |e| e.plugin.pre_bind.clone()),
            bind: handles(&entries, bind, |e| e.plugin.bind.clone()),
            post_bind: handles(&entries, post_bind, |e| e.plugin.post_bind.clone()),
            entries,
            percentage_of_nodes_to_score,
            next_start: AtomicUsize::new(0),
            rng: AtomicU64::new(seed | 1),
            batch: std::sync::Mutex::new(BatchCaches::default()),
            diverged: AtomicU64::new(0),
            scratch: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Names of the plugins enabled at an extension point.
    pub fn plugins_at(&self, point: Points) -> Vec<&'static str> {
        fn names<T: Plugin + ?Sized>(list: &[Arc<T>]) -> Vec<&'static str> {
            list.iter().map(|p| p.name()).collect()
        }
        match point {
            Points::QUEUE_SORT => self.queue_sort.iter().map(|p| p.name()).collect(),
            Points::PRE_ENQUEUE => names(&self.pre_enqueue),
            Points::PRE_FILTER => names(&self.pre_filter),
            Points::FILTER => names(&self.filter),
            Points::POST_FILTER => names(&self.post_filter),
            Points::PRE_SCORE => names(&self.pre_score),
            Points::SCORE => self.score.iter().map(|(p, _)| p.name()).collect(),
            Points::RESERVE => names(&self.reserve),
            Points::PERMIT => names(&self.permit),
            Points::PRE_BIND => names(&self.pre_bind),
            Points::BIND => names(&self.bind),
            Points::POST_BIND => names(&self.post_bind),
            _ => vec![],
        }
    }

    /// The score weight of a plugin.
    pub fn weight(&self, name: &str) -> Option<i64> {
        self.score.iter().find(|(p, _)| p.name() == name).map(|(_, w)| *w)
    }

    /// All plugins of the profile.
    pub fn plugins(&self) -> impl Iterator<Item = &Arc<dyn Plugin>> {
        self.entries.iter().map(|e| &e.plugin.plugin)
    }

    /// QueueSort: does `a` go before `b`? (priority, then age, when no plugin is enabled).
    pub fn less(&self, a: &QueuedPod, b: &QueuedPod) -> bool {
        match &self.queue_sort {
            Some(p) => p.less(a, b),
            None => (b.pod.priority, a.timestamp_ms) < (a.pod.priority, b.timestamp_ms),
        }
    }

    /// PreEnqueue without a cluster view: the first non-success status of
    /// the gates that read only the pod (see [`PreEnqueuePlugin::pre_enqueue`]).
    /// Prefer [`Self::run_pre_enqueue_in`].
    pub fn run_pre_enqueue(&self, pod: &PodInfo) -> Status {
        self.pre_enqueue_with(pod, None)
    }

    /// PreEnqueue over the cluster as `snap` shows it: the first
    /// non-success status, naming its plugin (the pod waits gated for that
    /// plugin's events, [`Self::gate_events`]).
    pub fn run_pre_enqueue_in(&self, pod: &PodInfo, snap: &Snapshot) -> Status {
        self.pre_enqueue_with(pod, Some(snap))
    }

    fn pre_enqueue_with(&self, pod: &PodInfo, snap: Option<&Snapshot>) -> Status {
        for p in &self.pre_enqueue {
            let s = p.pre_enqueue(pod, snap);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// The events that may let a pod that `plugin`'s PreEnqueue refused in
    /// (upstream's GatingPluginEvents); every event for an unknown plugin.
    pub fn gate_events(&self, plugin: &str) -> super::Events {
        self.entries.iter().find(|e| e.plugin.name() == plugin).map_or(super::Events::ALL, |e| e.plugin.plugin.events())
    }

    /// PreFilter: runs every plugin; returns the merged node subset or the first rejection.
    pub fn run_pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> Result<(Option<HashSet<String>>, Vec<&'static str>), Status> {
        // Fields of the pod that cannot be evaluated reject it outright, naming them.
        if let Some(e) = pod.errors.first() {
            let plugin = self
                .entries
                .iter()
                .map(|e| e.plugin.name())
                .find(|n| *n == e.plugin)
                .unwrap_or("PodSpec");
            return Err(Status::unresolvable(format!("invalid pod spec: {}", e.message)).with_plugin(plugin));
        }
        let mut nodes: Option<HashSet<String>> = None;
        let mut narrowing = Vec::new();
        for p in &self.pre_filter {
            let name = p.name();
            let (s, r) = p.pre_filter(state, pod, snap);
            match s.code {
                Code::Success => {}
                Code::Skip => {
                    state.skip_filter.push(name);
                    continue;
                }
                _ => return Err(s.with_plugin(name)),
            }
            if let Some(r) = r {
                narrowing.push(name);
                nodes = Some(match nodes {
                    None => r,
                    Some(prev) => prev.intersection(&r).cloned().collect(),
                });
                if nodes.as_ref().is_some_and(HashSet::is_empty) {
                    let msg = if narrowing.len() == 1 {
                        format!("node(s) didn't satisfy plugin {}", narrowing[0])
                    } else {
                        format!("node(s) didn't satisfy plugin(s) [{}] simultaneously", narrowing.join(", "))
                    };
                    return Err(Status::unresolvable(msg).with_plugin(name));
                }
            }
        }
        Ok((nodes, narrowing))
    }

    /// PreFilter extensions: `added` now sits on `node`.
    pub fn run_add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        for p in &self.pre_filter {
            if state.filter_skipped(p.name()) {
                continue;
            }
            let s = p.add_pod(state, pod, added, node, snap);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// PreFilter extensions: `removed` no longer sits on `node`.
    pub fn run_remove_pod(&self, state: &mut CycleState, pod: &PodInfo, removed: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        for p in &self.pre_filter {
            if state.filter_skipped(p.name()) {
                continue;
            }
            let s = p.remove_pod(state, pod, removed, node, snap);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// The Filter plugins PreFilter did not skip for this cycle, as
    /// positions in the Filter list.
    pub(super) fn active_filters(&self, state: &CycleState) -> Vec<usize> {
        (0..self.filter.len()).filter(|&i| !state.filter_skipped(self.filter[i].name())).collect()
    }

    /// The cycle's active Filter plugins, or every one when the cycle did
    /// not record them.
    pub(super) fn active_or_all<'a>(&self, state: &'a CycleState) -> std::borrow::Cow<'a, [usize]> {
        match state.active_filters.as_deref() {
            Some(l) => std::borrow::Cow::Borrowed(l),
            None => std::borrow::Cow::Owned((0..self.filter.len()).collect()),
        }
    }

    /// Filter: the first plugin that does not pass.
    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match &state.active_filters {
            Some(list) => self.run_filter_list(list, state, pod, node),
            None => {
                let list: Vec<usize> = self.active_filters(state);
                self.run_filter_list(&list, state, pod, node)
            }
        }
    }

    fn run_filter_list(&self, list: &[usize], state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for &i in list {
            let p = &self.filter[i];
            let s = p.filter(state, pod, node);
            if !s.is_success() {
                let mut s = s.with_plugin(p.name());
                if s.code != Code::Error && !s.is_rejected() {
                    s.code = Code::Error;
                }
                return s;
            }
        }
        Status::success()
    }

    /// Reserve: every plugin in order; on failure the ones already run are unreserved in reverse.
    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for (k, p) in self.reserve.iter().enumerate() {
            let s = p.reserve(state, pod, node);
            if !s.is_success() {
                for q in self.reserve[..=k].iter().rev() {
                    q.unreserve(state, pod, node);
                }
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Unreserve: every Reserve plugin, in reverse order.
    pub fn run_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for p in self.reserve.iter().rev() {
            p.unreserve(state, pod, node);
        }
    }

    /// Permit: the first status that is not Success (Wait included).
    pub fn run_permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.permit {
            let s = p.permit(state, pod, node);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// PreBind: the first failure.
    pub fn run_pre_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.pre_bind {
            let s = p.pre_bind(state, pod, node);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Bind: the first plugin that does not Skip decides.
    pub fn run_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.bind {
            let s = p.bind(state, pod, node);
            if !s.is_skip() {
                return s.with_plugin(p.name());
            }
        }
        Status::skip()
    }

    /// PostBind: every plugin.
    pub fn run_post_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for p in &self.post_bind {
            p.post_bind(state, pod, node);
        }
    }

    /// How many cycles reused the per-node results of an earlier pod of the
    /// same signature (opportunistic batching).
    pub fn reused_cycles(&self) -> u64 {
        self.batch.lock().map(|c| c.reused()).unwrap_or(0)
    }

    /// How many cycles selected a node on a reused verdict that the node no
    /// longer gave when its Filters ran again (each then ran in full); a
    /// bug in some plugin's [`Plugin::reusable`] or [`Plugin::sign_pod`]
    /// when not 0.
    pub fn reuse_divergences(&self) -> u64 {
        self.diverged.load(Ordering::Relaxed)
    }

    /// Is there any Filter plugin?
    pub fn has_filter(&self) -> bool {
        !self.filter.is_empty()
    }

    /// Runs one scheduling cycle for `pod` (schedulePod plus PostFilter).
    pub fn schedule(&self, pod: &Arc<PodInfo>, snap: &Snapshot, mut opts: CycleOptions) -> (CycleOutcome, CycleState) {
        loop {
            let mut cycle = Cycle::new(self, pod, snap, opts);
            match cycle.run() {
                Attempt::Done => return (cycle.out, cycle.state),
                // A reused verdict the selected node no longer gives (never
                // expected; tests read the count): nothing was kept, and the
                // pod gets a full cycle.
                Attempt::Diverged => opts.no_reuse = true,
            }
        }
    }

    /// The feasible node with the highest total; among several, one chosen
    /// uniformly at random (as upstream's reservoir sampling chooses).
    pub(super) fn select_host(&self, feasible: &[usize], totals: &[i64]) -> Option<usize> {
        // The best total and how many nodes have it, in one pass.
        let (mut best, mut ties) = (*totals.first()?, 0u64);
        for &t in totals {
            if t > best {
                (best, ties) = (t, 1);
            } else if t == best {
                ties += 1;
            }
        }
        let pick = if ties > 1 {
            // One draw per decision; the generator's state is read and written once.
            let next = self.rng.load(Ordering::Relaxed).wrapping_add(0x9E37_79B9_7F4A_7C15);
            self.rng.store(next, Ordering::Relaxed);
            (splitmix(next) % ties) as usize
        } else {
            0
        };
        feasible.iter().zip(totals).filter(|&(_, &t)| t == best).nth(pick).map(|(&i, _)| i)
    }
}

#[cfg(test)]
mod tests;
