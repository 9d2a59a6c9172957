//! The runner's tests: the window, reuse and PostFilter's message, each
//! against a plain cycle.

use super::*;

mod feasible {
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
                    let mut cycle = Cycle::new(&fw, p, &snap, CycleOptions::default());
                    cycle.state = state;
                    let evaluated = cycle.filter_window(window::Window { start, to_find }).expect("no error");
                    let (out, state) = (cycle.out, cycle.state);
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
