//! The framework runner: one scheduling cycle for one pod, as upstream's
//! `schedulePod` runs it (PreFilter, Filter over a rotating window of nodes,
//! PostFilter when nothing fits, PreScore, Score, NormalizeScore, weights,
//! random choice among the best).

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::batch::{BatchCache, BatchCaches, PASS};
use super::status::ReasonCounts;
use super::{
    BindPlugin, Code, CycleState, FilterPlugin, NodeScore, PermitPlugin, Plugin, Points, PostBindPlugin, PostFilterPlugin, PostFilterResult, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin,
    PreScorePlugin, QueueSortPlugin, QueuedPod, Registered, ReservePlugin, ScorePlugin, Status, MAX_NODE_SCORE,
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
/// ([`BatchCache`]) hands out the same statuses without copying one per node.
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

/// The error for a score outside 0..=100 after normalizing (upstream's message).
fn invalid_score(plugin: &'static str, score: i64) -> Status {
    Status::error(format!("plugin {plugin:?} returns an invalid score {score}, it should in the range of [0, 100] after normalizing")).with_plugin(plugin)
}

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
    /// the gates that read only the pod (see [`Plugin::pre_enqueue`]).
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
    fn active_filters(&self, state: &CycleState) -> Vec<usize> {
        (0..self.filter.len()).filter(|&i| !state.filter_skipped(self.filter[i].name())).collect()
    }

    /// The cycle's active Filter plugins, or every one when the cycle did
    /// not record them.
    fn active_or_all<'a>(&self, state: &'a CycleState) -> std::borrow::Cow<'a, [usize]> {
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
    pub fn schedule(&self, pod: &Arc<PodInfo>, snap: &Snapshot, opts: CycleOptions) -> (CycleOutcome, CycleState) {
        let mut out = CycleOutcome::default();
        let mut state = CycleState::new();
        let n = snap.nodes.len();
        if n == 0 {
            out.message = Some("0/0 nodes are available: no nodes available to schedule pods.".into());
            return (out, state);
        }
        // PreFilter.
        let (subset, narrowing) = match self.run_pre_filter(&mut state, pod, snap) {
            Ok(r) => r,
            Err(s) => {
                if s.code == Code::Error {
                    out.message = Some(format!("running PreFilter plugin {:?}: {}", s.plugin, s.message()));
                    out.error = Some(s);
                    return (out, state);
                }
                for i in 0..n {
                    out.statuses.set(i, n, s.clone());
                }
                out.unschedulable_plugins.push(s.plugin);
                out.pre_filter_rejection = Some(s);
                self.fail(&mut out, &state, pod, snap, opts);
                return (out, state);
            }
        };
        // Nodes PreFilter excluded.
        if let Some(sub) = &subset {
            let reason = if narrowing.len() == 1 {
                format!("node(s) didn't satisfy plugin {}", narrowing[0])
            } else {
                format!("node(s) didn't satisfy plugin(s) [{}]", narrowing.join(", "))
            };
            for (i, ni) in snap.nodes.iter().enumerate() {
                if !sub.contains(ni.name()) {
                    out.statuses.set(i, n, Status::unresolvable(reason.clone()).with_plugin(narrowing.first().copied().unwrap_or("")));
                }
            }
        }
        state.active_filters = Some(self.active_filters(&state));
        state.signature = self.cycle_signature(&state, pod, snap);
        let candidate = |i: usize| subset.as_ref().is_none_or(|s| s.contains(snap.nodes[i].name()));
        // The nominated node first, as upstream evaluates it before the others.
        if !opts.explain
            && let Some(idx) = pod.nominated_node.as_deref().and_then(|nn| snap.node_index(nn)).filter(|&i| candidate(i)) {
                let s = self.run_filter_with_nominated(&state, pod, &snap.nodes[idx], snap);
                if s.code == Code::Error {
                    out.message = Some(s.message());
                    out.error = Some(s);
                    return (out, state);
                }
                if s.is_success() {
                    out.feasible.push(idx);
                    out.evaluated = 1;
                    out.selected = Some(idx);
                    out.totals = vec![0];
                    return (out, state);
                }
            }
        // Filter over a window rotating across cycles.
        let to_find = if opts.explain { n } else { num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, n) };
        let start = if opts.explain { 0 } else { self.next_start.load(Ordering::Relaxed) % n };
        // Opportunistic batching: every node is evaluated, nothing narrows or
        // nominates, and every Filter that runs is node-local.
        // When only part of the window is evaluated, only if every Filter
        // that runs is node-local (the others would have to run node by node).
        let reuse = !opts.explain
            && !opts.no_reuse
            && state.signature != 0
            && subset.is_none()
            && pod.nominated_node.is_none()
            && snap.nominated.is_empty()
            && state.active_filters.as_ref().is_some_and(|l| l.len() < usize::from(PASS) && (to_find >= n || l.iter().all(|&i| self.filter[i].reusable())));
        let mut caches = if reuse { Some(self.batch.lock().unwrap_or_else(std::sync::PoisonError::into_inner)) } else { None };
        let mut guard = caches.as_deref_mut().map(|c| c.for_signature(state.signature));
        let processed = match guard.as_deref_mut() {
            Some(cache) => match self.filter_reusing(cache, &state, pod, snap, start, to_find, opts, &mut out) {
                Ok(p) => p,
                Err(s) => {
                    cache.clear();
                    out.message = Some(format!("running Filter plugin {:?}: {}", s.plugin, s.message()));
                    out.error = Some(s);
                    return (out, state);
                }
            },
            None => match self.filter_window(&state, pod, snap, start, to_find, &candidate, &mut out) {
                Ok(p) => p,
                Err(s) => {
                    out.message = Some(format!("running Filter plugin {:?}: {}", s.plugin, s.message()));
                    out.error = Some(s);
                    return (out, state);
                }
            },
        };
        out.evaluated = processed;
        if !opts.explain {
            self.next_start.store((start + processed) % n, Ordering::Relaxed);
        }
        if out.feasible.is_empty() {
            if let Some(c) = guard.as_deref_mut() {
                // Only a cycle with reuse fills the message before this point:
                // when it replayed the failure of the last identical pod.
                if out.message.is_none() {
                    self.fail(&mut out, &state, pod, snap, opts);
                    c.set_failure(start, opts.skip_post_filter, &out);
                }
                self.add_failure_details(&mut out, &state, pod);
                return (out, state);
            }
            self.fail(&mut out, &state, pod, snap, opts);
            self.add_failure_details(&mut out, &state, pod);
            return (out, state);
        }
        if out.feasible.len() == 1 && !opts.explain {
            out.selected = Some(out.feasible[0]);
            out.totals = vec![0];
        } else {
            // Score.
            if let Err(s) = self.prioritize(&mut out, &mut state, pod, snap, opts.explain, guard.as_deref_mut()) {
                if let Some(c) = guard {
                    c.clear();
                }
                out.message = Some(format!("running Score plugins: {}", s));
                out.error = Some(s);
                out.feasible.clear();
                return (out, state);
            }
            out.selected = self.select_host(&out.feasible, &out.totals);
        }
        if let (Some(c), Some(i)) = (guard, out.selected)
            && !c.fresh(i)
            && !self.refilter(&state, pod, snap, i)
        {
            // A reused verdict the node no longer gives (never expected;
            // tests read the count): nothing is kept, and the pod gets a
            // full cycle.
            self.diverged.fetch_add(1, Ordering::Relaxed);
            c.clear();
            drop(caches);
            return self.schedule(pod, snap, CycleOptions { no_reuse: true, ..opts });
        }
        (out, state)
    }

    /// The cycle's signature (see [`Plugin::sign_pod`]): the pod's, with
    /// what each plugin adds; 0 when the pod or some plugin leaves it unsigned.
    fn cycle_signature(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot) -> u64 {
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

    /// Runs the node-local Filter plugins once more on node `i`, selected on
    /// a reused verdict, so that the plugins that keep per-node results for
    /// Reserve have them in this cycle's state; false when it no longer passes.
    fn refilter(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, i: usize) -> bool {
        let active = self.active_or_all(state);
        let active: &[usize] = &active;
        let local: Vec<usize> = active.iter().copied().filter(|&k| self.filter[k].reusable()).collect();
        let (mut alive, mut rejected) = (vec![i], Vec::new());
        self.filter_list(&local, state, pod, snap, &mut alive, &mut rejected).is_ok() && rejected.is_empty() && alive == [i]
    }

    /// Filter over a window of nodes starting at `start`, until `to_find`
    /// feasible nodes are found; returns how many nodes were evaluated, or the
    /// error that failed the cycle.
    ///
    /// The window is taken in chunks of as many candidates as feasible nodes
    /// are still wanted, and each chunk runs one plugin at a time over the
    /// nodes still feasible ([`Plugin::filter_nodes`]): no chunk can hold
    /// more feasible nodes than wanted, so the nodes evaluated, the feasible
    /// ones (in window order), the statuses and the rejecting plugins are
    /// those of evaluating one node after another. Nodes with nominated pods
    /// to count go through the per-node path.
    #[allow(clippy::too_many_arguments)] // one cycle's inputs, all borrowed
    fn filter_window(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, start: usize, to_find: usize, candidate: &dyn Fn(usize) -> bool, out: &mut CycleOutcome) -> Result<usize, Status> {
        let n = snap.nodes.len();
        let mut processed = 0;
        let mut order = (start..n).chain(0..start);
        let mut exhausted = false;
        let (mut chunk, mut alive, mut rejected): (Vec<usize>, Vec<usize>, Vec<(usize, Status)>) = (Vec::new(), Vec::new(), Vec::new());
        while out.feasible.len() < to_find && !exhausted {
            let want = to_find - out.feasible.len();
            chunk.clear();
            while chunk.len() < want {
                match order.next() {
                    Some(i) => {
                        if candidate(i) {
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
            for &i in &chunk {
                let nominated = !snap.nominated.is_empty()
                    && snap.nominated.get(snap.nodes[i].name()).is_some_and(|v| v.iter().any(|p| p.uid != pod.uid && p.priority >= pod.priority));
                if !nominated {
                    alive.push(i);
                    continue;
                }
                let s = self.run_filter_with_nominated(state, pod, &snap.nodes[i], snap);
                match s.code {
                    Code::Success => alive.push(i),
                    Code::Error => return Err(s),
                    _ => out.statuses.set(i, n, s),
                }
            }
            rejected.clear();
            self.filter_batch(state, pod, snap, &mut alive, &mut rejected)?;
            for (i, s) in rejected.drain(..) {
                out.statuses.set(i, n, s);
            }
            for &i in &chunk {
                match out.statuses.get(i) {
                    None => out.feasible.push(i),
                    Some(s) => {
                        if !out.unschedulable_plugins.contains(&s.plugin) {
                            out.unschedulable_plugins.push(s.plugin);
                        }
                    }
                }
            }
        }
        Ok(processed)
    }

    /// Runs the cycle's active Filter plugins over `alive`, one plugin at a
    /// time: `alive` keeps the nodes every plugin passed (in order),
    /// `rejected` gets the others with the first rejecting plugin's status.
    fn filter_batch(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, alive: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) -> Result<(), Status> {
        let all: Vec<usize>;
        let list = match &state.active_filters {
            Some(l) => l,
            None => {
                all = self.active_filters(state);
                &all
            }
        };
        self.filter_list(list, state, pod, snap, alive, rejected)
    }

    /// [`Self::filter_batch`] with the Filter plugins `list` (entry indexes, in order).
    fn filter_list(&self, list: &[usize], state: &CycleState, pod: &PodInfo, snap: &Snapshot, alive: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) -> Result<(), Status> {
        self.filter_list_as(false, list, state, pod, snap, alive, rejected)
    }

    /// [`Self::filter_list`]; with `lean`, a plugin that can leaves out the
    /// statuses of the nodes it rejects ([`Plugin::retain_feasible`]).
    #[allow(clippy::too_many_arguments)] // one cycle's inputs, all borrowed
    fn filter_list_as(&self, lean: bool, list: &[usize], state: &CycleState, pod: &PodInfo, snap: &Snapshot, alive: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) -> Result<(), Status> {
        for &k in list {
            if alive.is_empty() {
                break;
            }
            let p = &self.filter[k];
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

    /// Filter over every node, with the node-local plugins' verdicts
    /// recomputed only on the nodes that changed since the last cycle of a
    /// pod with the same signature ([`BatchCache`]), and the other plugins
    /// run on every node the node-local ones passed (and on those a
    /// node-local plugin after them rejected). The outcome (feasible nodes in
    /// window order, statuses, rejecting plugins) is what
    /// [`Self::filter_window`] gives over every node.
    #[allow(clippy::too_many_arguments)] // one cycle's inputs, all borrowed
    fn filter_reusing(&self, cache: &mut BatchCache, state: &CycleState, pod: &PodInfo, snap: &Snapshot, start: usize, to_find: usize, opts: CycleOptions, out: &mut CycleOutcome) -> Result<usize, Status> {
        let skip_post_filter = opts.skip_post_filter;
        let n = snap.nodes.len();
        let active = self.active_or_all(state);
        let active: &[usize] = &active;
        let local: Vec<usize> = active.iter().copied().filter(|&i| self.filter[i].reusable()).collect();
        let all_local = local.len() == active.len();
        let mut changed = Vec::new();
        cache.refresh(state.signature, &local, snap, &mut changed);
        cache.replayable = all_local;
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
            self.filter_list(&local, state, pod, snap, &mut alive, &mut rejected)?;
            for &i in &alive {
                cache.set_verdict(i, None);
            }
            for (i, s) in rejected {
                let at = active.iter().position(|&k| self.filter[k].name() == s.plugin).unwrap_or(0);
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
                let r = cache.rej[i];
                if r == PASS {
                    out.feasible.push(i);
                    if out.feasible.len() >= to_find {
                        break;
                    }
                    continue;
                }
                if let Some(s) = cache.statuses.get(i).and_then(Option::as_ref) {
                    out.statuses.set(i, n, s.clone());
                }
                if let Some(seen) = seen.get_mut(usize::from(r)).filter(|s| !**s) {
                    *seen = true;
                    out.unschedulable_plugins.push(self.filter[active[usize::from(r)]].name());
                }
            }
            return Ok(processed);
        }
        if all_local {
            if cache.rejected == 0 {
                out.feasible.extend(window);
                return Ok(n);
            }
            let mut seen = vec![false; active.len()];
            for i in window {
                let r = cache.rej[i];
                if r == PASS {
                    out.feasible.push(i);
                } else if let Some(seen) = seen.get_mut(usize::from(r)).filter(|s| !**s) {
                    *seen = true;
                    out.unschedulable_plugins.push(self.filter[active[usize::from(r)]].name());
                }
            }
            out.statuses = NodeStatuses { statuses: Arc::clone(&cache.statuses) };
            return Ok(n);
        }
        // The plugins that look beyond the node run on every node the
        // node-local ones passed, and on those rejected by a node-local
        // plugin that comes after one of them (its status may come first).
        let first_other = active.iter().position(|&i| !self.filter[i].reusable()).unwrap_or(active.len());
        let others: Vec<usize> = active.iter().copied().filter(|&i| !self.filter[i].reusable()).collect();
        let mut late = Vec::new();
        passed_locally(&cache.rej, n, start, first_other, &mut out.feasible, &mut late);
        // The rejections of the other plugins go to a buffer kept across
        // cycles: a spreading constraint may reject thousands of nodes per
        // cycle, and a fresh vector that size costs page faults each time.
        let mut rejected = std::mem::take(&mut cache.scratch);
        rejected.clear();
        // Statuses are read only when nothing fits: first without them
        // where a plugin can, again with them if nothing fit.
        let lean = !opts.keep_statuses;
        let mut r = self.filter_others(lean, &others, active, &late, cache, state, pod, snap, &mut out.feasible, &mut rejected);
        if lean && r.is_ok() && out.feasible.is_empty() {
            passed_locally(&cache.rej, n, start, first_other, &mut out.feasible, &mut late);
            rejected.clear();
            r = self.filter_others(false, &others, active, &late, cache, state, pod, snap, &mut out.feasible, &mut rejected);
        }
        if r.is_ok() && (out.feasible.is_empty() || opts.keep_statuses) {
            // Per-node statuses and the rejecting plugins are read only when
            // nothing fits (the failure message, PostFilter, requeueing);
            // explain never reuses. A cycle that finds a node skips them
            // unless asked.
            if cache.rejected > 0 {
                out.statuses = NodeStatuses { statuses: Arc::clone(&cache.statuses) };
            }
            let any = cache.rejected > 0 || !rejected.is_empty();
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
        cache.scratch = rejected;
        r.map(|()| n)
    }

    /// [`Self::filter_reusing`]'s plugins that look beyond the node: `others`
    /// over the nodes the node-local ones passed (`feasible`), and over each
    /// `late` node the plugins of `others` that come before its rejecting one.
    #[allow(clippy::too_many_arguments)] // one cycle's inputs, all borrowed
    fn filter_others(&self, lean: bool, others: &[usize], active: &[usize], late: &[usize], cache: &BatchCache, state: &CycleState, pod: &PodInfo, snap: &Snapshot, feasible: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) -> Result<(), Status> {
        self.filter_list_as(lean, others, state, pod, snap, feasible, rejected)?;
        for &i in late {
            let before: Vec<usize> = active[..usize::from(cache.rej[i])].iter().copied().filter(|&k| !self.filter[k].reusable()).collect();
            let mut one = vec![i];
            self.filter_list_as(lean, &before, state, pod, snap, &mut one, rejected)?;
        }
        Ok(())
    }

    fn prioritize(&self, out: &mut CycleOutcome, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot, record: bool, cache: Option<&mut BatchCache>) -> Result<(), Status> {
        let feasible = std::mem::take(&mut out.feasible);
        let r = self.prioritize_over(&feasible, out, state, pod, snap, record, cache);
        out.feasible = feasible;
        r
    }

    #[allow(clippy::too_many_arguments)] // one cycle's inputs, all borrowed
    fn prioritize_over(&self, feasible: &[usize], out: &mut CycleOutcome, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot, record: bool, cache: Option<&mut BatchCache>) -> Result<(), Status> {
        for p in &self.pre_score {
            let s = p.pre_score(state, pod, feasible, snap);
            match s.code {
                Code::Success => {}
                Code::Skip => state.skip_score.push(p.name()),
                _ => return Err(s.with_plugin(p.name())),
            }
        }
        // A poisoned lock only means a panic elsewhere left a buffer behind:
        // it is cleared before each use.
        let mut buf: Vec<NodeScore> = std::mem::take(&mut *self.scratch.lock().unwrap_or_else(|e| e.into_inner()));
        let r = self.prioritize_with(&mut buf, feasible, out, state, pod, snap, record, cache);
        buf.clear();
        *self.scratch.lock().unwrap_or_else(|e| e.into_inner()) = buf;
        r
    }

    #[allow(clippy::too_many_arguments)] // one cycle's inputs, all borrowed
    fn prioritize_with(&self, buf: &mut Vec<NodeScore>, feasible: &[usize], out: &mut CycleOutcome, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot, record: bool, cache: Option<&mut BatchCache>) -> Result<(), Status> {
        // Node-local plugins' raw scores come from the last pod of this
        // signature where the node has not changed since.
        let cache = cache.filter(|_| !record);
        let reusing = cache.is_some();
        let mut totals = match cache {
            None => vec![0i64; feasible.len()],
            Some(c) => {
                let scorers: Vec<(usize, i64, bool)> = self
                    .score
                    .iter()
                    .enumerate()
                    .filter(|(_, (p, _))| p.reusable() && !state.score_skipped(p.name()))
                    .map(|(i, (p, w))| (i, *w, p.has_normalize()))
                    .collect();
                let mut stale = Vec::new();
                c.stale_scores(&scorers, &mut stale);
                let mut bad: Vec<(usize, &'static str, i64)> = Vec::new();
                if !stale.is_empty() {
                    for (k, &(i, _, norm)) in scorers.iter().enumerate() {
                        let p = &self.score[i].0;
                        buf.clear();
                        buf.extend(stale.iter().map(|&ni| NodeScore { node: ni, score: 0 }));
                        p.score_nodes(state, pod, snap, buf).map_err(|s| s.with_plugin(p.name()))?;
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
                    if let Some(reverse) = self.score[i].0.default_normalized() {
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
                                    return Err(invalid_score(self.score[i].0.name(), s));
                                }
                                *t += s * weight;
                            }
                        }
                        continue;
                    }
                    buf.clear();
                    buf.extend(feasible.iter().map(|&ni| NodeScore { node: ni, score: raw[ni] }));
                    self.normalized_into(i, weight, state, pod, snap, buf, &mut totals)?;
                }
                totals
            }
        };
        for (i, (p, weight)) in self.score.iter().enumerate() {
            if reusing && p.reusable() {
                continue;
            }
            if record {
                out.score_plugins.push(p.name());
            }
            if state.score_skipped(p.name()) {
                if record {
                    out.scores.push(vec![0; feasible.len()]);
                }
                continue;
            }
            buf.clear();
            buf.extend(feasible.iter().map(|&ni| NodeScore { node: ni, score: 0 }));
            p.score_nodes(state, pod, snap, buf).map_err(|s| s.with_plugin(p.name()))?;
            self.normalized_into(i, *weight, state, pod, snap, buf, &mut totals)?;
            if record {
                out.scores.push(buf.iter().map(|s| s.score).collect());
            }
        }
        out.totals = totals;
        Ok(())
    }

    /// Normalizes plugin `i`'s raw scores in `buf` (when it normalizes),
    /// checks them and adds them, weighted, to `totals`.
    #[allow(clippy::too_many_arguments)] // one plugin's scores and their context
    fn normalized_into(&self, i: usize, weight: i64, state: &CycleState, pod: &PodInfo, snap: &Snapshot, buf: &mut [NodeScore], totals: &mut [i64]) -> Result<(), Status> {
        let p = &self.score[i].0;
        if p.has_normalize() {
            let s = p.normalize_score(state, pod, buf, snap);
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

    /// The feasible node with the highest total; among several, one chosen
    /// uniformly at random (as upstream's reservoir sampling chooses).
    fn select_host(&self, feasible: &[usize], totals: &[i64]) -> Option<usize> {
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

    /// Collects the Filter plugins' [`super::Plugin::failure_detail`] into
    /// `failure_detail` (after [`Self::fail`] or a replayed failure: they
    /// are the pod's own), one sentence after the other.
    fn add_failure_details(&self, out: &mut CycleOutcome, state: &CycleState, pod: &PodInfo) {
        let active = self.active_or_all(state);
        let active: &[usize] = &active;
        let details: Vec<String> = active.iter().filter_map(|&i| self.filter[i].failure_detail(state, pod, &out.statuses)).collect();
        out.failure_detail = (!details.is_empty()).then(|| details.join(" "));
    }

    fn fail(&self, out: &mut CycleOutcome, state: &CycleState, pod: &Arc<PodInfo>, snap: &Snapshot, opts: CycleOptions) {
        let n = snap.nodes.len();
        let mut msg = format!("0/{n} nodes are available:");
        if let Some(s) = &out.pre_filter_rejection {
            msg.push_str(&format!(" {}.", s.message()));
        } else {
            let mut hist = ReasonCounts::default();
            for s in out.statuses.statuses.iter().flatten() {
                if !s.is_success() {
                    hist.add_status(s);
                }
            }
            let parts = hist.parts();
            if !parts.is_empty() {
                msg.push_str(&format!(" {}.", parts.join(", ")));
            }
        }
        if !opts.skip_post_filter && !self.post_filter.is_empty() {
            let post = self.run_post_filter(out, state, pod, snap);
            if !post.is_empty() {
                msg.push(' ');
                msg.push_str(&post);
            }
        }
        out.message = Some(msg);
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
    fn run_post_filter(&self, out: &mut CycleOutcome, state: &CycleState, pod: &Arc<PodInfo>, snap: &Snapshot) -> String {
        let mut reasons: Vec<String> = Vec::new();
        for p in &self.post_filter {
            let (s, mut r) = p.post_filter(self, state, pod, snap, &out.statuses);
            out.deallocations.append(&mut r.deallocations);
            match s.code {
                Code::Success => {
                    let m = s.message();
                    out.post_filter = Some(r);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feasible_nodes_to_find_matches_upstream() {
        assert_eq!(num_feasible_nodes_to_find(None, 10), 10);
        assert_eq!(num_feasible_nodes_to_find(None, 99), 99);
        assert_eq!(num_feasible_nodes_to_find(None, 100), 100);
        assert_eq!(num_feasible_nodes_to_find(None, 1000), 420);
        assert_eq!(num_feasible_nodes_to_find(None, 5000), 500);
        assert_eq!(num_feasible_nodes_to_find(None, 6000), 300);
        assert_eq!(num_feasible_nodes_to_find(Some(100), 6000), 6000);
        assert_eq!(num_feasible_nodes_to_find(Some(1), 6000), 100);
        assert_eq!(num_feasible_nodes_to_find(Some(50), 6000), 3000);
    }
}

#[cfg(test)]
mod batch_tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;
    use crate::testing::{node, pod};

    fn default_framework(pct: i32) -> Framework {
        let raw = crate::config::KubeSchedulerConfiguration { percentage_of_nodes_to_score: Some(pct), ..Default::default() };
        crate::profile::frameworks(&Config::from_raw(raw).expect("default config"), 7).into_iter().next().expect("one profile")
    }

    /// Binds `p` to node `i` of the snapshot.
    fn bind(snap: &mut Snapshot, p: &PodInfo, i: usize) {
        let mut b = p.clone();
        b.node_name = Some(snap.nodes[i].name().to_string());
        snap.add_pod(Arc::new(b));
    }

    /// Feasible nodes with their totals, by node name.
    fn verdicts(o: &CycleOutcome, snap: &Snapshot) -> Vec<(String, i64)> {
        // A cycle with one feasible node does not score it (explain does).
        let one = o.feasible.len() == 1;
        let mut v: Vec<(String, i64)> = o.feasible.iter().zip(&o.totals).map(|(&i, &t)| (snap.nodes[i].name().to_string(), if one { 0 } else { t })).collect();
        v.sort();
        v
    }

    /// A cycle that reuses the last pod's per-node results decides as a full
    /// cycle does: same feasible nodes, same totals, same statuses, rejecting
    /// plugins and failure message, across placements, pod removals and node
    /// object changes; with only node-local plugins, and with spreading and
    /// inter-pod affinity (not node-local) running beside them.
    /// Returns how many cycles run without statuses found no node.
    fn reuse_decides_as_full_cycles(template: &dyn Fn(usize) -> Arc<PodInfo>) -> usize {
        let mut nodes = Vec::new();
        for i in 0..40 {
            let mut b = node(&format!("n{i}")).alloc(if i % 3 == 0 { "2" } else { "4" }, "8Gi", 110).label("zone", &format!("z{}", i % 3)).image("app:1", 300 * 1024 * 1024 * (i % 2));
            b = b.label("kubernetes.io/hostname", &format!("n{i}"));
            if i % 7 == 0 {
                b = b.taint("dedicated", "x", "PreferNoSchedule");
            }
            if i % 11 == 0 {
                b = b.taint("hard", "x", "NoSchedule");
            }
            nodes.push(b);
        }
        let mut snap = crate::testing::snapshot(&nodes, &[]);
        let batched = default_framework(100);
        let full = default_framework(100);
        let statuses = |o: &CycleOutcome| -> Vec<(usize, String, &'static str)> {
            o.statuses.statuses.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i, s.message(), s.plugin))).collect()
        };
        let mut failed_lean = 0;
        for k in 0..300 {
            let p = template(k);
            // Every other cycle as the daemon runs it: statuses are built
            // only if nothing fits (and a plugin that can filters without).
            let keep_statuses = k % 2 == 0;
            let (o, _) = batched.schedule(&p, &snap, CycleOptions { skip_post_filter: true, keep_statuses, ..Default::default() });
            let (x, _) = full.schedule(&p, &snap, CycleOptions { explain: true, skip_post_filter: true, ..Default::default() });
            assert_eq!(verdicts(&o, &snap), verdicts(&x, &snap), "pod {k}");
            if keep_statuses || o.selected.is_none() {
                assert_eq!(statuses(&o), statuses(&x), "pod {k}");
                let mut plugins = (o.unschedulable_plugins.clone(), x.unschedulable_plugins.clone());
                plugins.0.sort_unstable();
                plugins.1.sort_unstable();
                assert_eq!(plugins.0, plugins.1, "pod {k}");
            }
            if o.selected.is_none() {
                failed_lean += usize::from(!keep_statuses);
                assert_eq!(o.message, x.message, "pod {k}");
            }
            let Some(i) = o.selected else { continue };
            bind(&mut snap, &p, i);
            if k % 17 == 5 {
                // Someone else's pod leaves a node.
                assert!(snap.remove_pod(&format!("uid-p{}", k - 3)).is_some(), "pod {k}");
            }
            if k % 50 == 49 {
                // A node object changes (a taint comes).
                let name = format!("n{}", k % 40);
                snap.upsert_node(node(&name).alloc("4", "8Gi", 110).label("zone", "z0").label("kubernetes.io/hostname", &name).taint("hard", "x", "NoSchedule").spec());
            }
        }
        assert!(batched.reused_cycles() > 200, "reused {} of 300 cycles", batched.reused_cycles());
        // A different pod shape is not confused with the first.
        let other = pod("other").req("3", "1Gi").info();
        let (o, _) = batched.schedule(&other, &snap, CycleOptions::default());
        let (x, _) = full.schedule(&other, &snap, CycleOptions { explain: true, skip_post_filter: true, ..Default::default() });
        assert_eq!(verdicts(&o, &snap), verdicts(&x, &snap));
        failed_lean
    }

    #[test]
    fn reusing_results_changes_no_decision() {
        reuse_decides_as_full_cycles(&|k| pod(&format!("p{k}")).req("300m", "256Mi").image("app:1").info());
    }

    #[test]
    fn reusing_node_local_results_beside_spreading_changes_no_decision() {
        let failed_lean = reuse_decides_as_full_cycles(&|k| {
            pod(&format!("p{k}"))
                .label("app", "web")
                .req("300m", "256Mi")
                .spread(1, "zone", "DoNotSchedule", &[("app", "web")])
                .spread(2, "kubernetes.io/hostname", "ScheduleAnyway", &[("app", "web")])
                .info()
        });
        // Spreading filters without statuses first: some of those cycles
        // find no node and are run again with them (compared above).
        assert!(failed_lean > 0);
    }

    #[test]
    fn reusing_node_local_results_beside_inter_pod_affinity_changes_no_decision() {
        use k8s_openapi::api::core::v1 as core;
        let term = |key: &str| core::PodAffinityTerm { label_selector: Some(crate::testing::selector(&[("app", "db")])), topology_key: key.into(), ..Default::default() };
        let aff = core::Affinity {
            pod_anti_affinity: Some(core::PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![term("kubernetes.io/hostname")]),
                preferred_during_scheduling_ignored_during_execution: Some(vec![core::WeightedPodAffinityTerm { weight: 10, pod_affinity_term: term("zone") }]),
            }),
            ..Default::default()
        };
        assert!(reuse_decides_as_full_cycles(&|k| pod(&format!("p{k}")).label("app", "db").req("100m", "128Mi").affinity(aff.clone()).info()) > 0);
    }

    /// With part of the window evaluated (percentageOfNodesToScore), and two
    /// pod shapes in turn (each keeps its own results), a cycle reusing the
    /// last same-shape pod's verdicts decides exactly as a cycle evaluating
    /// one node after another: the same nodes evaluated, feasible nodes in
    /// order, statuses, rejecting plugins, totals and chosen node.
    #[test]
    fn windowed_reuse_decides_as_node_by_node() {
        let nodes: Vec<_> = (0..150)
            .map(|i| {
                let mut b = node(&format!("n{i}")).alloc(if i % 3 == 0 { "1" } else { "4" }, "8Gi", 110).label("zone", &format!("z{}", i % 3));
                if i % 11 == 0 {
                    b = b.taint("hard", "x", "NoSchedule");
                }
                b
            })
            .collect();
        let mut snap = crate::testing::snapshot(&nodes, &[]);
        let batched = default_framework(30);
        let full = default_framework(30);
        let shapes = |k: usize| if k.is_multiple_of(3) { pod(&format!("p{k}")).req("700m", "1Gi").info() } else { pod(&format!("p{k}")).req("200m", "256Mi").node_selector("zone", "z1").info() };
        let statuses = |o: &CycleOutcome| -> Vec<(usize, String, &'static str)> {
            o.statuses.statuses.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i, s.message(), s.plugin))).collect()
        };
        for k in 0..400 {
            let p = shapes(k);
            let opts = CycleOptions { skip_post_filter: true, ..Default::default() };
            let (o, _) = batched.schedule(&p, &snap, opts);
            let (x, _) = full.schedule(&p, &snap, CycleOptions { no_reuse: true, ..opts });
            assert_eq!((o.evaluated, &o.feasible, &o.totals, o.selected), (x.evaluated, &x.feasible, &x.totals, x.selected), "pod {k}");
            assert_eq!(statuses(&o), statuses(&x), "pod {k}");
            assert_eq!(o.unschedulable_plugins, x.unschedulable_plugins, "pod {k}");
            assert_eq!(o.message, x.message, "pod {k}");
            let Some(i) = o.selected else { continue };
            bind(&mut snap, &p, i);
            if k % 13 == 7 {
                snap.remove_pod(&format!("uid-p{}", k - 5));
            }
        }
        assert!(batched.reused_cycles() > 350, "reused {} of 400 cycles", batched.reused_cycles());
    }

    /// Test plugins for reuse beside Filters that are not node-local.
    mod odd {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

        use crate::cache::Snapshot;
        use crate::framework::{CycleState, FilterPlugin, Plugin, PreFilterNodes, PreFilterPlugin, ScorePlugin, Status};
        use berth_model::{NodeInfo, PodInfo};

        /// Not node-local: rejects the nodes whose index has the parity of
        /// the number of bound pods (read at PreFilter), so its verdicts move
        /// with every placement; skipped while `off`.
        #[derive(Default)]
        pub struct Parity {
            pub bound: AtomicUsize,
            pub off: AtomicBool,
        }

        impl Plugin for Parity {
            fn name(&self) -> &'static str {
                "Parity"
            }
        }

        impl PreFilterPlugin for Parity {
            fn pre_filter(&self, _: &mut CycleState, _: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
                if self.off.load(Ordering::Relaxed) {
                    return (Status::skip(), None);
                }
                self.bound.store(snap.pod_count(), Ordering::Relaxed);
                (Status::success(), None)
            }
        }

        impl FilterPlugin for Parity {
            fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
                if (node.index + self.bound.load(Ordering::Relaxed)).is_multiple_of(2) {
                    Status::unschedulable("parity")
                } else {
                    Status::success()
                }
            }
        }

        /// Node-local, after Parity: rejects every third node; scores a node
        /// by its pods, and `bad` out of range.
        pub struct Third {
            pub bad: usize,
        }

        impl Plugin for Third {
            fn name(&self) -> &'static str {
                "Third"
            }

            fn reusable(&self) -> bool {
                true
            }
        }

        impl FilterPlugin for Third {
            fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
                if node.index.is_multiple_of(3) {
                    Status::unschedulable("third")
                } else {
                    Status::success()
                }
            }
        }

        impl ScorePlugin for Third {
            fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
                Ok(if node.index == self.bad { 150 } else { 100 - node.pods.len().min(100) as i64 })
            }
        }
    }

    /// A node-local Filter placed after one that is not node-local: a node
    /// it rejects still gets the other's status when that comes first; a
    /// cached node-local score out of range fails exactly the cycles where
    /// its node is feasible; and a failure seen while the other Filter ran
    /// is not replayed once it is skipped (its answer can change with
    /// objects no node change shows).
    #[test]
    fn reuse_beside_an_earlier_filter_that_is_not_node_local() {
        use std::sync::atomic::Ordering;
        let frameworks = |bad: usize| {
            let parity = Arc::new(odd::Parity::default());
            let entries = vec![
                PluginEntry::at_every_point(crate::register!(parity.clone()), 1),
                PluginEntry::at_every_point(crate::register!(Arc::new(odd::Third { bad })), 1),
            ];
            (Framework::new("p".into(), entries, Some(100), 7), parity)
        };
        let nodes: Vec<_> = (0..12).map(|i| node(&format!("n{i}")).alloc("4", "8Gi", 110)).collect();
        let mut snap = crate::testing::snapshot(&nodes, &[]);
        let (batched, _) = frameworks(5);
        let (full, _) = frameworks(5);
        let statuses = |o: &CycleOutcome| -> Vec<(usize, String, &'static str)> {
            o.statuses.statuses.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i, s.message(), s.plugin))).collect()
        };
        let (mut errors, mut placed) = (0, 0);
        for k in 0..40 {
            let p = pod(&format!("p{k}")).req("10m", "1Mi").info();
            let opts = CycleOptions { skip_post_filter: true, keep_statuses: true, ..Default::default() };
            let (o, _) = batched.schedule(&p, &snap, opts);
            let (x, _) = full.schedule(&p, &snap, CycleOptions { no_reuse: true, ..opts });
            assert_eq!(o.error.as_ref().map(Status::message), x.error.as_ref().map(Status::message), "pod {k}");
            if o.error.is_some() {
                errors += 1;
                // Someone else's pod lands on the other parity, so the next cycle differs.
                snap.add_pod(pod(&format!("x{k}")).node("n1").info());
                continue;
            }
            assert_eq!((&o.feasible, &o.totals, o.selected), (&x.feasible, &x.totals, x.selected), "pod {k}");
            assert_eq!(statuses(&o), statuses(&x), "pod {k}");
            assert_eq!(o.unschedulable_plugins, x.unschedulable_plugins, "pod {k}");
            let Some(i) = o.selected else { continue };
            placed += 1;
            bind(&mut snap, &p, i);
        }
        assert!(errors > 0 && placed > 0, "{errors} errors, {placed} placed");
        // Parity's statuses come first on nodes Third also rejects.
        let (o, _) = batched.schedule(&pod("q").info(), &snap, CycleOptions { skip_post_filter: true, keep_statuses: true, ..Default::default() });
        assert!(statuses(&o).iter().any(|(i, _, pl)| i % 3 == 0 && *pl == "Parity"), "{:?}", statuses(&o));

        // Every node rejected while Parity runs (one bound pod: it rejects
        // m1, Third rejects m0); then Parity is skipped and m1 fits, though
        // no node changed.
        let (fw, parity) = frameworks(usize::MAX);
        let nodes: Vec<_> = (0..2).map(|i| node(&format!("m{i}")).alloc("4", "8Gi", 110)).collect();
        let snap = crate::testing::snapshot(&nodes, &[pod("b").node("m0")]);
        let fails = || fw.schedule(&pod("r").info(), &snap, CycleOptions { skip_post_filter: true, ..Default::default() }).0.selected.is_none();
        assert!(fails());
        assert!(fails());
        parity.off.store(true, Ordering::Relaxed);
        assert!(!fails(), "Parity skipped: m1 fits");
    }

    /// Identical pods that fit nowhere get the first one's failure again while
    /// nothing changes (the same statuses, rejecting plugins and message as a
    /// full cycle, PostFilter included); a pod leaving a node ends that, and a
    /// pod that can preempt gets PostFilter's answer every time.
    #[test]
    fn identical_unschedulable_pods_replay_the_failure() {
        let nodes: Vec<_> = (0..30).map(|i| node(&format!("n{i}")).alloc(if i % 5 == 0 { "1" } else { "2" }, "8Gi", 110)).collect();
        let existing: Vec<_> = (0..30).map(|i| pod(&format!("e{i}")).node(&format!("n{i}")).req("1500m", "1Gi")).collect();
        let mut snap = crate::testing::snapshot(&nodes, &existing);
        let batched = default_framework(100);
        let full = default_framework(100);
        let check = |p: &Arc<PodInfo>, snap: &Snapshot| {
            let (o, _) = batched.schedule(p, snap, CycleOptions::default());
            let (x, _) = full.schedule(p, snap, CycleOptions { no_reuse: true, ..Default::default() });
            assert_eq!(o.selected.is_some(), x.selected.is_some(), "pod {}", p.name);
            assert_eq!(o.message, x.message, "pod {}", p.name);
            assert_eq!(o.unschedulable_plugins, x.unschedulable_plugins, "pod {}", p.name);
            assert_eq!(o.post_filter.as_ref().map(|r| r.nominated_node.clone()), x.post_filter.as_ref().map(|r| r.nominated_node.clone()), "pod {}", p.name);
            for i in 0..snap.nodes.len() {
                assert_eq!(o.statuses.get(i), x.statuses.get(i), "pod {} node n{i}", p.name);
            }
            o
        };
        let before = batched.reused_cycles();
        for k in 0..5 {
            let o = check(&pod(&format!("p{k}")).req("1", "1Gi").info(), &snap);
            assert!(o.selected.is_none() && o.post_filter.is_none(), "pod p{k} fits nowhere and preempts no one");
            assert!(o.message.as_deref().is_some_and(|m| m.starts_with("0/30 nodes are available: 30 Insufficient cpu.")), "{:?}", o.message);
        }
        assert_eq!(batched.reused_cycles() - before, 4, "every pod after the first reuses the failure");
        // A pod leaves n3: the next identical pod fits there.
        assert!(snap.remove_pod("uid-e3").is_some());
        let p5 = pod("p5").req("1", "1Gi").node("n3").info();
        let o = check(&pod("p5").req("1", "1Gi").info(), &snap);
        assert_eq!(o.selected.map(|i| snap.nodes[i].name().to_string()).as_deref(), Some("n3"));
        snap.add_pod(p5);
        // Higher-priority pods preempt each time: PostFilter's answer is never replayed.
        for k in 0..3 {
            let o = check(&pod(&format!("h{k}")).req("1500m", "1Gi").priority(10).info(), &snap);
            assert!(o.post_filter.as_ref().is_some_and(|r| r.nominated_node.is_some()), "pod h{k} preempts");
        }
    }
}

#[cfg(test)]
mod window_tests {
    use super::*;
    use crate::config::Config;
    use crate::testing::{node, pod};

    fn framework(pct: i32) -> Framework {
        let raw = crate::config::KubeSchedulerConfiguration { percentage_of_nodes_to_score: Some(pct), ..Default::default() };
        crate::profile::frameworks(&Config::from_raw(raw).expect("default config"), 7).into_iter().next().expect("one profile")
    }

    /// The window evaluated one node after another, as the runner did before
    /// it took the window in chunks: (feasible, statuses, rejecting plugins, evaluated).
    fn node_by_node(fw: &Framework, state: &CycleState, p: &PodInfo, snap: &Snapshot, start: usize, to_find: usize) -> (Vec<usize>, Vec<Option<Status>>, Vec<&'static str>, usize) {
        let n = snap.nodes.len();
        let (mut feasible, mut statuses, mut plugins, mut processed) = (Vec::new(), vec![None; n], Vec::new(), 0);
        for i in (start..n).chain(0..start) {
            if feasible.len() >= to_find {
                break;
            }
            processed += 1;
            let s = fw.run_filter_with_nominated(state, p, &snap.nodes[i], snap);
            if s.is_success() {
                feasible.push(i);
                continue;
            }
            if !plugins.contains(&s.plugin) {
                plugins.push(s.plugin);
            }
            statuses[i] = Some(s);
        }
        (feasible, statuses, plugins, processed)
    }

    /// Filter taken in chunks, one plugin at a time, finds the same feasible
    /// nodes, statuses, rejecting plugins and number of nodes evaluated as
    /// node-by-node evaluation, for windows that stop early and ones that
    /// cover every node, with cordoned, tainted, full and unselected nodes
    /// and a nominated pod in the way.
    #[test]
    fn chunked_window_matches_node_by_node() {
        let mut nodes = Vec::new();
        for i in 0..300 {
            let mut b = node(&format!("n{i}")).alloc(if i % 4 == 0 { "1" } else { "4" }, "8Gi", if i % 13 == 0 { 1 } else { 110 }).label("zone", if i % 3 == 0 { "a" } else { "b" });
            if i % 7 == 0 {
                b = b.taint("hard", "x", "NoSchedule");
            }
            if i % 11 == 0 {
                b = b.unschedulable();
            }
            if i % 17 == 0 {
                b = b.taint("soft", "x", "PreferNoSchedule");
            }
            nodes.push(b);
        }
        let existing: Vec<_> = (0..300).filter(|i| i % 13 == 0 || i % 5 == 0).map(|i| pod(&format!("e{i}")).node(&format!("n{i}")).req("500m", "1Gi")).collect();
        let mut snap = crate::testing::snapshot(&nodes, &existing);
        // A higher-priority pod nominated to a node counts there.
        snap.nominate(pod("nom").req("3500m", "1Gi").priority(100).nominated("n2").info(), "n2");
        let pods = [
            pod("small").req("300m", "256Mi").info(),
            pod("big").req("2", "1Gi").info(),
            pod("tolerant").req("300m", "256Mi").toleration("hard", Some("x"), "NoSchedule").info(),
            pod("huge").req("8", "1Gi").info(),
            pod("picky").req("300m", "256Mi").node_selector("zone", "a").info(),
        ];
        for pct in [1, 10, 50, 100] {
            let fw = framework(pct);
            let to_find = num_feasible_nodes_to_find(Some(pct), snap.nodes.len());
            for p in &pods {
                for start in [0, 1, 150, 299] {
                    let mut state = CycleState::new();
                    fw.run_pre_filter(&mut state, p, &snap).expect("PreFilter passes");
                    state.active_filters = Some(fw.active_filters(&state));
                    let mut out = CycleOutcome::default();
                    let evaluated = fw.filter_window(&state, p, &snap, start, to_find, &|_| true, &mut out).expect("no error");
                    let (feasible, statuses, plugins, processed) = node_by_node(&fw, &state, p, &snap, start, to_find);
                    let what = format!("pod {} at {pct}% from {start}", p.name);
                    assert_eq!(out.feasible, feasible, "{what}");
                    assert_eq!(evaluated, processed, "{what}");
                    assert_eq!(out.unschedulable_plugins, plugins, "{what}");
                    for (i, s) in statuses.iter().enumerate() {
                        assert_eq!(out.statuses.get(i), s.as_ref(), "{what}: node n{i}");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod post_filter_message_tests {
    use std::sync::Arc;

    use super::*;
    use crate::framework::{NodeStatuses, PluginEntry};
    use crate::testing::{node, pod, snapshot};

    /// Rejects every node for cpu.
    struct Full;
    impl Plugin for Full {
        fn name(&self) -> &'static str {
            "Full"
        }
    }

    impl FilterPlugin for Full {
        fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
            Status::unschedulable("Insufficient cpu")
        }
    }

    /// A PostFilter plugin answering `code` with `reasons`.
    struct Post(&'static str, Code, &'static [&'static str]);
    impl Plugin for Post {
        fn name(&self) -> &'static str {
            self.0
        }
    }

    impl PostFilterPlugin for Post {
        fn post_filter(&self, _: &Framework, _: &CycleState, _: &Arc<PodInfo>, _: &Snapshot, _: &NodeStatuses) -> (Status, PostFilterResult) {
            let s = Status { code: self.1, reasons: self.2.iter().map(|r| std::borrow::Cow::Borrowed(*r)).collect(), plugin: "" };
            (s, PostFilterResult::default())
        }
    }

    /// Upstream's `RunPostFilterPlugins` and `FitError.Error` (v1.37): the
    /// rejecting plugins' reasons joined by ", " after the Filter part's
    /// period, with no period of their own; a plugin answering
    /// UnschedulableAndUnresolvable or Error ends the run with its message
    /// alone; one that succeeds, with its own (none).
    #[test]
    fn the_post_filter_message_is_assembled_as_upstream() {
        const PRE: &str = "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.";
        type Row = (&'static str, (Code, &'static [&'static str]), (Code, &'static [&'static str]), &'static str);
        let rows: [Row; 7] = [
            ("DRA silent, preemption", (Code::Unschedulable, &[]), (Code::Unschedulable, &[PRE]), "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."),
            (
                "both give reasons: a comma",
                (Code::Unschedulable, &["deallocation of ResourceClaim completed"]),
                (Code::Unschedulable, &[PRE]),
                "0/2 nodes are available: 2 Insufficient cpu. deallocation of ResourceClaim completed, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
            ),
            ("nothing to say", (Code::Unschedulable, &[]), (Code::Unschedulable, &[]), "0/2 nodes are available: 2 Insufficient cpu."),
            ("unresolvable ends the run, alone", (Code::Unschedulable, &["a"]), (Code::UnschedulableAndUnresolvable, &["b"]), "0/2 nodes are available: 2 Insufficient cpu. b"),
            ("an error ends the run, alone", (Code::Error, &["not found"]), (Code::Unschedulable, &[PRE]), "0/2 nodes are available: 2 Insufficient cpu. not found"),
            ("success: its own reasons only", (Code::Unschedulable, &["a"]), (Code::Success, &[]), "0/2 nodes are available: 2 Insufficient cpu."),
            ("several reasons of one plugin", (Code::Unschedulable, &["a", "b"]), (Code::Unschedulable, &["c"]), "0/2 nodes are available: 2 Insufficient cpu. a, b, c"),
        ];
        for (name, first, second, want) in rows {
            let plugins = vec![crate::register!(Arc::new(Full)), crate::register!(Arc::new(Post("First", first.0, first.1))), crate::register!(Arc::new(Post("Second", second.0, second.1)))];
            let entries = plugins.into_iter().map(|p| PluginEntry::at_every_point(p, 1)).collect();
            let fw = Framework::new("test".into(), entries, None, 1);
            let snap = snapshot(&[node("n1"), node("n2")], &[]);
            let (o, _) = fw.schedule(&pod("p").info(), &snap, CycleOptions { explain: true, ..Default::default() });
            assert_eq!(o.message.as_deref(), Some(want), "{name}");
        }
    }
}
