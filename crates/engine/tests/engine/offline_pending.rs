//! The offline pending set (FORMAT.md "Which pods are pending") and the
//! dump's PriorityClass rule, through the engine's public API.
#![allow(clippy::unwrap_used)]

use berth_engine::config::Config;
use berth_engine::offline::{Cluster, Engine};

const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '1', memory: 1Gi, pods: '10'}}\n";

fn pod(name: &str, extra_meta: &str, extra_spec: &str, status: &str) -> String {
    format!("---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default{extra_meta}}}\nspec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: 600m}}}}}}]{extra_spec}}}\n{status}\n")
}

#[test]
fn only_pods_the_scheduler_would_see_are_pending() {
    let dump = [
        NODE.to_string(),
        pod("deleting", ", deletionTimestamp: '2026-01-01T00:00:00Z'", "", ""),
        pod("done", "", "", "status: {phase: Succeeded}"),
        pod("foreign", "", ", schedulerName: other-scheduler", ""),
        pod("finished-bound", "", ", nodeName: n1", "status: {phase: Failed}"),
        pod("waiting", "", "", ""),
    ]
    .concat();
    let cluster = Cluster::parse(&dump, "dump.yaml").unwrap_or_default();
    let mut e = Engine::new(&Config::default_config(), cluster, 1);
    let keys: Vec<String> = e.cluster.pending.iter().map(|p| p.key()).collect();
    assert_eq!(keys, vec!["default/waiting"]);
    // The finished pod holds nothing: the waiting pod fits beside it.
    let s = e.simulate();
    assert_eq!(s.placements.len(), 1);
    assert_eq!(s.placements[0].node.as_deref(), Some("n1"));
    assert!(e.explain("default/foreign").is_err());
}

#[test]
fn unnamed_pods_belong_to_the_first_profile() {
    let cfg = Config::parse("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: first\n- schedulerName: second\n").unwrap_or_else(|_| Config::default_config());
    let dump = [NODE.to_string(), pod("a", "", "", ""), pod("b", "", ", schedulerName: second", ""), pod("c", "", ", schedulerName: default-scheduler", "")].concat();
    let e = Engine::new(&cfg, Cluster::parse(&dump, "dump.yaml").unwrap_or_default(), 1);
    let got: Vec<(String, String)> = e.cluster.pending.iter().map(|p| (p.key(), p.scheduler_name.clone())).collect();
    assert_eq!(got, vec![("default/a".to_string(), "first".to_string()), ("default/b".to_string(), "second".to_string())]);
}

#[test]
fn unknown_priority_class_names_the_pod() {
    let dump = [NODE.to_string(), pod("p", "", ", priorityClassName: gold", ""), pod("q", "", ", priorityClassName: system-node-critical", "")].concat();
    let err = Cluster::parse(&dump, "dump.yaml").map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("Pod default/p") && err.contains("spec.priorityClassName") && err.contains("gold"), "{err}");
    let ok = [NODE.to_string(), pod("q", "", ", priorityClassName: system-node-critical", "")].concat();
    let c = Cluster::parse(&ok, "dump.yaml").unwrap_or_default();
    assert_eq!(c.pending.first().map(|p| p.priority), Some(2_000_001_000));
}

/// A profile whose only Score plugin normalizes (nothing node-local to keep
/// across pods) still simulates: the batch cache sizes its totals for the
/// nodes even when the set of kept scorers is empty. This panicked with an
/// index out of bounds before.
#[test]
fn simulate_with_only_a_normalizing_score_plugin() {
    let cfg = Config::parse(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n      disabled: [{name: '*'}]\n      enabled: [{name: PrioritySort}, {name: DefaultBinder}, {name: PodTopologySpread}]\n",
    )
    .unwrap();
    let dump = [NODE.to_string(), format!("---\n{}", NODE.replace("n1", "n2")), pod("a", "", "", ""), pod("b", "", "", "")].concat();
    let mut e = Engine::new(&cfg, Cluster::parse(&dump, "dump.yaml").unwrap(), 1);
    let s = e.simulate();
    assert_eq!(s.placements.len(), 2);
    assert!(s.placements.iter().all(|p| p.node.is_some()), "{:?}", s.placements);
}
