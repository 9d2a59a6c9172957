//! Property tests over random clusters: what the engine decides never breaks
//! capacity or hard spread constraints, and explain agrees with simulate.

use std::collections::HashMap;

use berth_engine::config::Config;
use berth_engine::offline::{Cluster, Engine};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Spec {
    nodes: Vec<(u32, u32, u8)>, // (cpu milli, pods, zone)
    bound: Vec<(usize, u32, i32)>, // (node, cpu milli, priority)
    pending: Vec<(u32, i32, bool)>, // (cpu milli, priority, spread)
}

fn spec() -> impl Strategy<Value = Spec> {
    (1usize..7).prop_flat_map(|n| {
        (
            prop::collection::vec((500u32..4000, 1u32..6, 0u8..3), n),
            prop::collection::vec((0..n, 100u32..1500, 0i32..3), 0..8),
            prop::collection::vec((100u32..2000, 0i32..3, any::<bool>()), 1..10),
        )
            .prop_map(|(nodes, bound, pending)| Spec { nodes, bound, pending })
    })
}

fn yaml(s: &Spec, spread_all: bool) -> String {
    let mut y = String::new();
    for (i, (cpu, pods, zone)) in s.nodes.iter().enumerate() {
        y += &format!(
            "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: n{i}\n  labels:\n    kubernetes.io/hostname: n{i}\n    topology.kubernetes.io/zone: z{zone}\nstatus:\n  allocatable:\n    cpu: {cpu}m\n    memory: 8Gi\n    pods: '{pods}'\n"
        );
    }
    for (j, (node, cpu, prio)) in s.bound.iter().enumerate() {
        y += &format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: b{j}\n  namespace: default\nspec:\n  nodeName: n{node}\n  priority: {prio}\n  containers:\n  - name: c\n    image: x\n    resources:\n      requests:\n        cpu: {cpu}m\n"
        );
    }
    for (j, (cpu, prio, spread)) in s.pending.iter().enumerate() {
        y += &format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p{j}\n  namespace: default\n  labels:\n    app: web\n  creationTimestamp: '2024-01-01T00:00:{:02}Z'\nspec:\n  priority: {prio}\n  containers:\n  - name: c\n    image: x\n    resources:\n      requests:\n        cpu: {cpu}m\n",
            j % 60
        );
        if *spread || spread_all {
            y += "  topologySpreadConstraints:\n  - maxSkew: 1\n    topologyKey: topology.kubernetes.io/zone\n    whenUnsatisfiable: DoNotSchedule\n    labelSelector:\n      matchLabels:\n        app: web\n";
        }
    }
    y
}

fn engine(text: &str) -> Engine {
    let cluster = Cluster::parse(text, "generated").expect("generated cluster parses");
    Engine::new(&Config::default_config(), cluster, 7)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn no_node_over_capacity(s in spec()) {
        // Pods bound before may already overcommit a node; every node the
        // scheduler placed a pod on must be within capacity.
        let mut e = engine(&yaml(&s, false));
        let sim = e.simulate();
        let placed: std::collections::HashSet<String> = sim.placements.iter().filter_map(|p| p.node.clone()).collect();
        for n in e.cluster.snapshot.nodes.iter().filter(|n| placed.contains(n.name())) {
            let a = &n.node.allocatable;
            prop_assert!(n.requested.milli_cpu <= a.milli_cpu, "{} over cpu: {} > {}", n.name(), n.requested.milli_cpu, a.milli_cpu);
            prop_assert!(n.pods.len() as i64 <= a.pods, "{} over pods", n.name());
        }
    }

    #[test]
    fn hard_spread_is_never_violated(s in spec()) {
        // Only pending pods carry the label, all with the same constraint, so
        // the skew bound must hold over zones that have nodes.
        let mut s = s;
        s.bound.clear();
        let mut e = engine(&yaml(&s, true));
        let _ = e.simulate();
        let mut counts: HashMap<String, i64> = HashMap::new();
        for n in &e.cluster.snapshot.nodes {
            let z = n.node.labels.get("topology.kubernetes.io/zone").cloned().unwrap_or_default();
            *counts.entry(z).or_default() += n.pods.len() as i64;
        }
        let max = counts.values().max().copied().unwrap_or(0);
        let min = counts.values().min().copied().unwrap_or(0);
        prop_assert!(max - min <= 1, "skew {} > 1: {counts:?}", max - min);
    }

    #[test]
    fn explain_agrees_with_simulate(s in spec()) {
        let text = yaml(&s, false);
        let mut e = engine(&text);
        let sim = e.simulate();
        let first = &sim.placements[0];
        let e2 = engine(&text);
        let x = e2.explain(&first.pod).expect("explain runs");
        if let Some(nominated) = &first.nominated_node {
            // Simulate preempted: explain must show the same preemption.
            prop_assert!(x.selected.is_none());
            prop_assert_eq!(x.preemption.as_ref().map(|p| &p.nominated_node), Some(nominated));
            return Ok(());
        }
        prop_assert_eq!(x.selected.is_some(), first.node.is_some());
        if let Some(node) = &first.node {
            // The simulated node is one of explain's best-scored feasible nodes.
            let best = x.nodes.iter().filter(|n| n.feasible).filter_map(|n| n.total).max();
            let chosen = x.nodes.iter().find(|n| &n.name == node).expect("node listed");
            prop_assert!(chosen.feasible);
            prop_assert_eq!(chosen.total, best);
        }
    }
}
