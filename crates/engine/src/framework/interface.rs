//! The plugin interfaces: [`Plugin`] for what every plugin says of itself,
//! and one trait per extension point (upstream's `framework/interface.go`).
//!
//! A plugin implements the traits of the points it has, and [`register!`]
//! stores it under each of them: which points a plugin has is what the
//! compiler knows it implements, never a list the plugin keeps by hand. A
//! plugin cannot write a `filter` that never runs: `filter` is a method of
//! [`FilterPlugin`] only, and a type that implements [`FilterPlugin`] is
//! registered as a Filter plugin.
//!
//! [`register!`]: crate::register

use std::sync::Arc;

use super::{CycleState, DeviceChoice, Events, Framework, NodeScore, NodeStatuses, Points, PostFilterResult, PreFilterNodes, QueuedPod, Status};
use crate::cache::Snapshot;
use berth_model::{NodeInfo, PodInfo};

/// What every scheduling plugin says of itself, whatever its extension
/// points (its name, its events, what explain and batching ask of it).
/// Every method but `name` has a default.
#[allow(unused_variables)] // default methods ignore their arguments
pub trait Plugin: Send + Sync {
    /// The plugin's name, as in configuration.
    fn name(&self) -> &'static str;

    /// A sentence added to the failure message of `pod` when no node fits
    /// (none by default): what this plugin can say of the pod's own objects
    /// that upstream's per-node reasons do not name. Added after the cycle,
    /// also to a failure replayed from an identical pod, so it must read
    /// only `pod`, `state` and `statuses`. Asked of Filter plugins.
    fn failure_detail(&self, state: &CycleState, pod: &PodInfo, statuses: &NodeStatuses) -> Option<String> {
        None
    }

    /// explain: more about this plugin's rejection `status` of `node` than
    /// its reasons say (none by default).
    fn explain_rejection(&self, state: &CycleState, snap: &Snapshot, node: &NodeInfo, status: &Status) -> Vec<String> {
        Vec::new()
    }

    /// explain and simulate: the devices this cycle gives the pod on `node`,
    /// or, with None, those its Reserve took (none by default).
    fn device_choices(&self, state: &CycleState, node: Option<&str>) -> Vec<DeviceChoice> {
        Vec::new()
    }

    /// Opportunistic batching (upstream KEP-5598): are this plugin's Filter
    /// verdict and raw Score for a node a function of the cycle's signature
    /// (the pod's, with what [`Plugin::sign_pod`] adds) and of that one node
    /// (its object, its pods, and its devices as the snapshot's device
    /// journal follows them) alone? Then a later pod with the same signature
    /// reuses them on every node that has not changed since. Plugins whose
    /// results depend on other nodes (spreading, inter-pod affinity) keep the
    /// default, no; a plugin that PreFilter or PreScore skipped for the pod
    /// does not matter either way. A plugin that keeps per-node results from
    /// Filter for Reserve may be reusable: the cycle runs the node-local
    /// Filters once more on the node it selects when its verdict was reused.
    fn reusable(&self) -> bool {
        false
    }

    /// Opportunistic batching: what this plugin's Filter and Score read of
    /// the pod that the pod's own signature does not cover (objects the pod
    /// names, such as its ResourceClaims), called after PreFilter. `Some(h)`
    /// mixes `h` into the cycle's signature (`Some(0)`, the default: nothing
    /// to add); None leaves the pod unsigned for this cycle (no reuse).
    fn sign_pod(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot) -> Option<u64> {
        Some(0)
    }

    /// Cluster events that can make a pod this plugin rejected schedulable.
    fn events(&self) -> Events {
        Events::ALL
    }
}

/// QueueSort.
pub trait QueueSortPlugin: Plugin {
    /// Does `a` go before `b`?
    fn less(&self, a: &QueuedPod, b: &QueuedPod) -> bool;
}

/// PreEnqueue.
pub trait PreEnqueuePlugin: Plugin {
    /// May the pod enter the active queue? `cluster` is the cache's snapshot
    /// (upstream's plugins read their listers); None when the caller has no
    /// cluster view at hand, and then a plugin whose gate reads the cluster
    /// lets the pod in (its PreFilter repeats the check). A pod refused here
    /// waits gated until one of the plugin's [`Plugin::events`] (or an
    /// update of the pod) lets PreEnqueue run again.
    fn pre_enqueue(&self, pod: &PodInfo, cluster: Option<&Snapshot>) -> Status;
}

/// PreFilter, with its AddPod/RemovePod extensions (upstream's
/// `PreFilterExtensions`, optional: they default to Success).
#[allow(unused_variables)] // default methods ignore their arguments
pub trait PreFilterPlugin: Plugin {
    /// Computes per-cycle state; may narrow the nodes or answer Skip.
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes);

    /// `added` is now assumed on `node`.
    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        Status::success()
    }

    /// `removed` is no longer on `node`.
    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, removed: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
        Status::success()
    }
}

/// Filter.
#[allow(unused_variables)] // default methods ignore their arguments
pub trait FilterPlugin: Plugin {
    /// Can the pod run on this node?
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;

    /// Filter over many nodes at once (a cycle that evaluates every node):
    /// keeps in `nodes`, in order, the ones that pass, and pushes every other
    /// one with its status (as `filter` gives it) to `rejected`. The default
    /// calls `filter` per node; node-local plugins override it with a tight
    /// loop that answers the common case without building a status, so that a
    /// full cycle pays one dynamic call per plugin rather than per node.
    fn filter_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        super::filter_each(self, state, pod, snap, nodes, rejected, |_, _| true);
    }

    /// [`Self::filter_nodes`] for a cycle that will not read the rejected
    /// nodes' statuses (it reuses earlier results and a node fits): keeps in
    /// `nodes`, in order, the ones that pass and returns true; or returns
    /// false with `nodes` untouched, and the caller runs `filter_nodes`. Only
    /// a pass whose rejections are never errors may answer true.
    fn retain_feasible(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>) -> bool {
        false
    }
}

/// PostFilter: called when no node fits.
pub trait PostFilterPlugin: Plugin {
    /// What this plugin found (a node to nominate, victims, claims to deallocate).
    fn post_filter(&self, fw: &Framework, state: &CycleState, pod: &Arc<PodInfo>, snap: &Snapshot, statuses: &NodeStatuses) -> (Status, PostFilterResult);
}

/// PreScore.
pub trait PreScorePlugin: Plugin {
    /// Computes scoring state for the feasible nodes, or Skip.
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[usize], snap: &Snapshot) -> Status;
}

/// Score, with NormalizeScore when `has_normalize`.
#[allow(unused_variables)] // default methods ignore their arguments
pub trait ScorePlugin: Plugin {
    /// The node's raw score.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// Scores every node of `scores` (their `node` index set, `score` to fill).
    /// The default calls `score` per node; plugins may override it to hoist
    /// per-cycle work out of the loop.
    fn score_nodes(&self, state: &CycleState, pod: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
        for s in scores.iter_mut() {
            s.score = self.score(state, pod, &snap.nodes[s.node])?;
        }
        Ok(())
    }

    /// Does the plugin normalize its scores?
    fn has_normalize(&self) -> bool {
        false
    }

    /// Is NormalizeScore upstream's DefaultNormalizeScore (raw × 100 / the
    /// highest raw score, reversed when `Some(true)`)? Then a cycle reusing
    /// cached raw scores applies it without a copy of them.
    fn default_normalized(&self) -> Option<bool> {
        None
    }

    /// NormalizeScore: rescales raw scores to 0..=100.
    fn normalize_score(&self, state: &CycleState, pod: &PodInfo, scores: &mut [NodeScore], snap: &Snapshot) -> Status {
        Status::success()
    }
}

/// Reserve and Unreserve (a plugin that reserves must say how it undoes it).
pub trait ReservePlugin: Plugin {
    /// A decision later cycles must see before the API shows it is recorded
    /// with [`CycleState::reservations_mut`] as a [`super::Reservation`];
    /// the framework's assume step applies it with the pod.
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;

    /// Clears what Reserve recorded.
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

/// Permit.
pub trait PermitPlugin: Plugin {
    /// Success, Wait, or a rejection.
    fn permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
}

/// PreBind.
pub trait PreBindPlugin: Plugin {
    /// API writes are not made here but described as a
    /// [`super::PreBindWork`] ([`CycleState::add_pre_bind_work`]) that the
    /// daemon carries out before the bind.
    fn pre_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
}

/// Bind.
pub trait BindPlugin: Plugin {
    /// The API call itself is made by the daemon's binder; this says whether
    /// this plugin handles the pod (Skip to pass it on).
    fn bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
}

/// PostBind.
pub trait PostBindPlugin: Plugin {
    /// Informational, after a successful bind.
    fn post_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

/// A plugin stored under each extension-point trait it implements (what
/// [`register!`](crate::register) builds): the framework runs a plugin at a
/// point through its handle there, and the points a profile may enable it
/// at are those it has a handle for.
#[derive(Clone)]
pub struct Registered {
    /// The plugin itself.
    pub plugin: Arc<dyn Plugin>,
    /// QueueSort.
    pub queue_sort: Option<Arc<dyn QueueSortPlugin>>,
    /// PreEnqueue.
    pub pre_enqueue: Option<Arc<dyn PreEnqueuePlugin>>,
    /// PreFilter.
    pub pre_filter: Option<Arc<dyn PreFilterPlugin>>,
    /// Filter.
    pub filter: Option<Arc<dyn FilterPlugin>>,
    /// PostFilter.
    pub post_filter: Option<Arc<dyn PostFilterPlugin>>,
    /// PreScore.
    pub pre_score: Option<Arc<dyn PreScorePlugin>>,
    /// Score.
    pub score: Option<Arc<dyn ScorePlugin>>,
    /// Reserve.
    pub reserve: Option<Arc<dyn ReservePlugin>>,
    /// Permit.
    pub permit: Option<Arc<dyn PermitPlugin>>,
    /// PreBind.
    pub pre_bind: Option<Arc<dyn PreBindPlugin>>,
    /// Bind.
    pub bind: Option<Arc<dyn BindPlugin>>,
    /// PostBind.
    pub post_bind: Option<Arc<dyn PostBindPlugin>>,
}

impl Registered {
    /// The plugin's name.
    pub fn name(&self) -> &'static str {
        self.plugin.name()
    }

    /// The extension points the plugin implements.
    pub fn points(&self) -> Points {
        let has = [
            (self.queue_sort.is_some(), Points::QUEUE_SORT),
            (self.pre_enqueue.is_some(), Points::PRE_ENQUEUE),
            (self.pre_filter.is_some(), Points::PRE_FILTER),
            (self.filter.is_some(), Points::FILTER),
            (self.post_filter.is_some(), Points::POST_FILTER),
            (self.pre_score.is_some(), Points::PRE_SCORE),
            (self.score.is_some(), Points::SCORE),
            (self.reserve.is_some(), Points::RESERVE),
            (self.permit.is_some(), Points::PERMIT),
            (self.pre_bind.is_some(), Points::PRE_BIND),
            (self.bind.is_some(), Points::BIND),
            (self.post_bind.is_some(), Points::POST_BIND),
        ];
        has.into_iter().filter(|(h, _)| *h).fold(Points::default(), |acc, (_, p)| acc.or(p))
    }
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered").field("name", &self.name()).field("points", &self.points()).finish()
    }
}

/// The machinery of [`register!`](crate::register): for a concrete plugin
/// type, a handle for each extension-point trait it implements and None for
/// the others, decided by the compiler. Rust has no run-time "does this type
/// implement that trait" (upstream's Go asks with a type assertion), so each
/// point has two probe traits with a method of the same name: one
/// implemented for `&Probe<T>` when `T` implements the point's trait, one
/// for every `Probe<T>`. Method resolution on `&&Probe<T>` tries the first
/// (it needs no auto-dereference) and falls back to the second only when
/// the bound does not hold ("autoref specialization"; it works because the
/// macro sees the concrete type).
#[doc(hidden)]
pub mod probe {
    use std::sync::Arc;

    use super::*;

    /// A plugin being registered.
    pub struct Probe<T>(pub Arc<T>);

    macro_rules! probes {
        ($($method:ident: $tr:ident, $yes:ident, $no:ident;)*) => {$(
            /// Chosen when the plugin implements the point's trait.
            pub trait $yes {
                /// The plugin's handle at this point.
                fn $method(&self) -> Option<Arc<dyn $tr>>;
            }
            impl<T: $tr + 'static> $yes for &Probe<T> {
                fn $method(&self) -> Option<Arc<dyn $tr>> {
                    Some(self.0.clone())
                }
            }
            /// The fallback: the plugin does not implement the point's trait.
            pub trait $no {
                /// None.
                fn $method(&self) -> Option<Arc<dyn $tr>>;
            }
            impl<T> $no for Probe<T> {
                fn $method(&self) -> Option<Arc<dyn $tr>> {
                    None
                }
            }
        )*};
    }

    probes! {
        probe_queue_sort: QueueSortPlugin, IsQueueSort, NotQueueSort;
        probe_pre_enqueue: PreEnqueuePlugin, IsPreEnqueue, NotPreEnqueue;
        probe_pre_filter: PreFilterPlugin, IsPreFilter, NotPreFilter;
        probe_filter: FilterPlugin, IsFilter, NotFilter;
        probe_post_filter: PostFilterPlugin, IsPostFilter, NotPostFilter;
        probe_pre_score: PreScorePlugin, IsPreScore, NotPreScore;
        probe_score: ScorePlugin, IsScore, NotScore;
        probe_reserve: ReservePlugin, IsReserve, NotReserve;
        probe_permit: PermitPlugin, IsPermit, NotPermit;
        probe_pre_bind: PreBindPlugin, IsPreBind, NotPreBind;
        probe_bind: BindPlugin, IsBind, NotBind;
        probe_post_bind: PostBindPlugin, IsPostBind, NotPostBind;
    }
}

/// Registers a plugin (an `Arc` of a concrete plugin type) under each
/// extension-point trait it implements: a [`Registered`].
#[macro_export]
macro_rules! register {
    ($plugin:expr) => {{
        #[allow(unused_imports)]
        use $crate::framework::interface::probe::*;
        let probe = Probe($plugin);
        $crate::framework::Registered {
            queue_sort: (&&probe).probe_queue_sort(),
            pre_enqueue: (&&probe).probe_pre_enqueue(),
            pre_filter: (&&probe).probe_pre_filter(),
            filter: (&&probe).probe_filter(),
            post_filter: (&&probe).probe_post_filter(),
            pre_score: (&&probe).probe_pre_score(),
            score: (&&probe).probe_score(),
            reserve: (&&probe).probe_reserve(),
            permit: (&&probe).probe_permit(),
            pre_bind: (&&probe).probe_pre_bind(),
            bind: (&&probe).probe_bind(),
            post_bind: (&&probe).probe_post_bind(),
            plugin: probe.0,
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Points;

    /// A Filter and Reserve plugin, with nothing to say.
    struct Two;
    impl Plugin for Two {
        fn name(&self) -> &'static str {
            "Two"
        }
    }
    impl FilterPlugin for Two {
        fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
            Status::unschedulable("no")
        }
    }
    impl ReservePlugin for Two {
        fn reserve(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> Status {
            Status::success()
        }
        fn unreserve(&self, _: &mut CycleState, _: &PodInfo, _: &str) {}
    }

    /// A plugin with no extension point at all.
    struct None_;
    impl Plugin for None_ {
        fn name(&self) -> &'static str {
            "None"
        }
    }

    /// The points a plugin is registered at are the traits it implements,
    /// and its handle there runs its own method.
    #[test]
    fn registration_stores_a_plugin_under_each_trait_it_implements() {
        let r = crate::register!(Arc::new(Two));
        assert_eq!(r.points(), Points::FILTER.or(Points::RESERVE));
        assert_eq!(r.name(), "Two");
        let f = r.filter.as_ref().map(|f| f.filter(&CycleState::new(), &crate::testing::pod("p").info(), &crate::testing::snapshot(&[crate::testing::node("n")], &[]).nodes[0]));
        assert_eq!(f.map(|s| s.message()).as_deref(), Some("no"));
        assert!(r.score.is_none() && r.pre_filter.is_none() && r.bind.is_none());
        assert_eq!(crate::register!(Arc::new(None_)).points(), Points::default());
    }

    /// Every registry plugin is registered at the points upstream's
    /// implements (a plugin's points are no longer a list it keeps by hand).
    #[test]
    fn registry_plugins_implement_upstreams_points() {
        let want: &[(&str, &[&str])] = &[
            ("SchedulingGates", &["preEnqueue"]),
            ("PrioritySort", &["queueSort"]),
            ("NodeUnschedulable", &["filter"]),
            ("NodeName", &["filter"]),
            ("TaintToleration", &["filter", "preScore", "score"]),
            ("NodeAffinity", &["preFilter", "filter", "preScore", "score"]),
            ("NodePorts", &["preFilter", "filter"]),
            ("NodeResourcesFit", &["preFilter", "filter", "preScore", "score"]),
            ("VolumeRestrictions", &["preFilter", "filter"]),
            ("NodeVolumeLimits", &["preFilter", "filter"]),
            ("VolumeBinding", &["preFilter", "filter", "preScore", "score", "reserve", "preBind"]),
            ("VolumeZone", &["preFilter", "filter"]),
            ("PodTopologySpread", &["preFilter", "filter", "preScore", "score"]),
            ("InterPodAffinity", &["preFilter", "filter", "preScore", "score"]),
            ("DynamicResources", &["preEnqueue", "preFilter", "filter", "postFilter", "preScore", "score", "reserve", "preBind"]),
            ("DefaultPreemption", &["postFilter"]),
            ("NodeResourcesBalancedAllocation", &["preScore", "score"]),
            ("ImageLocality", &["preScore", "score"]),
            ("DefaultBinder", &["bind"]),
            ("NodeDeclaredFeatures", &["filter"]),
            ("GangScheduling", &["preFilter"]),
        ];
        assert_eq!(want.len(), crate::plugins::default_plugins().len());
        for (name, points) in want {
            let r = crate::plugins::build(name, None).unwrap_or_else(|e| panic!("{name}: {e}"));
            let has: Vec<&str> = Points::ALL.iter().filter(|(p, _)| r.points().has(*p)).map(|(_, n)| *n).collect();
            assert_eq!(&has, points, "{name}");
        }
    }
}
