//! A pod with thousands of topology spread constraints (each on a key of its
//! own, as the API requires) is decided, and the pod queued behind it too.
//! Correctness only: how long it takes is `berth bench`'s
//! PathologicalSpread row.
#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;

use berth_engine::config::Config;
use berth_engine::offline::{Cluster, Engine};

const CONSTRAINTS: usize = 2000;
const NODES: usize = 20;

fn key(k: usize) -> String {
    format!("spread.example/key-{k}")
}

#[test]
fn a_pod_with_many_soft_constraints_does_not_hold_up_the_queue() {
    let mut dump = String::new();
    for i in 0..NODES {
        // Every key names the node's own domain.
        let labels: String = (0..CONSTRAINTS).map(|k| format!(", {}: n{i}", key(k))).collect();
        let _ = write!(
            dump,
            "---\napiVersion: v1\nkind: Node\nmetadata: {{name: node-{i}, labels: {{kubernetes.io/hostname: node-{i}{labels}}}}}\nstatus: {{allocatable: {{cpu: '4', memory: 8Gi, pods: '110'}}}}\n"
        );
        // A matching pod on every node but node-7.
        if i != 7 {
            let _ = write!(dump, "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: old-{i}, namespace: default, labels: {{app: spread}}}}\nspec: {{nodeName: node-{i}, containers: [{{name: c, image: i}}]}}\n");
        }
    }
    let constraints: String = (0..CONSTRAINTS)
        .map(|k| format!("  - {{maxSkew: 1, topologyKey: {}, whenUnsatisfiable: ScheduleAnyway, labelSelector: {{matchLabels: {{app: spread}}}}}}\n", key(k)))
        .collect();
    let _ = write!(
        dump,
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: many, namespace: default, creationTimestamp: '2026-01-01T00:00:00Z', labels: {{app: spread}}}}\nspec:\n  containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]\n  topologySpreadConstraints:\n{constraints}"
    );
    let _ = write!(dump, "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: plain, namespace: default, creationTimestamp: '2026-01-01T00:00:01Z'}}\nspec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]}}\n");
    let cluster = Cluster::parse(&dump, "many.yaml").unwrap();
    let many = cluster.pending.iter().find(|p| p.name == "many").unwrap();
    assert_eq!(many.spread_constraints.len(), CONSTRAINTS);
    let mut e = Engine::new(&Config::default_config(), cluster, 7);
    let s = e.simulate();
    let placed: Vec<(&str, Option<&str>)> = s.placements.iter().map(|p| (p.pod.as_str(), p.node.as_deref())).collect();
    assert_eq!(placed.len(), 2, "{placed:?}");
    // node-7 is the only domain of every key without a matching pod.
    assert_eq!(placed[0], ("default/many", Some("node-7")));
    assert_eq!(placed[1].0, "default/plain");
    assert!(placed[1].1.is_some(), "the plain pod is bound: {placed:?}");
}
