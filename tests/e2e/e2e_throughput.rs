//! End to end: 1,000 pods onto 100 nodes through the daemon over HTTP. All
//! bound, no node over capacity, each pod with one Scheduled event; prints
//! the throughput (pods bound per second, first create to last bind).
//! Alone in its binary so that other tests do not share its two cores.
#![allow(clippy::unwrap_used)]



use std::collections::HashMap;
use std::time::{Duration, Instant};

use berth_cluster::FaultConfig;
use crate::e2e_support::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;

const PODS: usize = 1000;
const NODES: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_pods_onto_hundred_nodes() {
    tokio::time::timeout(Duration::from_secs(120), run()).await.expect("test deadline (120 s) exceeded");
}

async fn run() {
    // 2 cores and 14 pod slots per node: 1,400 slots by cpu (150m each), 1,400 by count.
    let c = cluster(NODES, 3, "2", 14, FaultConfig::default()).await;
    let cfg = config("");
    let d = start_daemon(&c, &cfg, "solo").await;
    until_leading(&d, 20).await;
    let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());

    let t0 = Instant::now();
    let all: Vec<Pod> = (0..PODS).map(|i| pod(&format!("p-{i:04}"), "150m", json!({}))).collect();
    create_all(&api, all, 64).await;
    let created = t0.elapsed();
    // Poll until every pod is bound; the time of the last bind is when the
    // poll first sees them all (polled every 50 ms).
    let bound_at = eventually(90, "all pods bound", || async {
        let ps = pods(&api).await;
        let n = ps.iter().filter(|p| node_of(p).is_some()).count();
        (n == PODS).then(|| t0.elapsed())
    })
    .await;
    let secs = bound_at.as_secs_f64();
    println!("e2e throughput: {PODS} pods onto {NODES} nodes bound in {secs:.2}s (creates took {:.2}s) = {:.0} pods/s", created.as_secs_f64(), PODS as f64 / secs);

    // Capacity per node.
    let ps = pods(&api).await;
    let mut per: HashMap<String, (i64, u32)> = HashMap::new();
    for p in &ps {
        let n = node_of(p).unwrap().to_string();
        let e = per.entry(n).or_default();
        e.0 += pod_milli_cpu(p);
        e.1 += 1;
    }
    for n in nodes(&c).await {
        let name = n.metadata.name.clone().unwrap();
        let alloc = n.status.as_ref().unwrap().allocatable.as_ref().unwrap();
        let cpu = milli(&alloc["cpu"].0);
        let slots: u32 = alloc["pods"].0.parse().unwrap();
        let (used_cpu, used_pods) = per.get(&name).copied().unwrap_or_default();
        assert!(used_cpu <= cpu, "{name}: {used_cpu}m requested > {cpu}m allocatable");
        assert!(used_pods <= slots, "{name}: {used_pods} pods > {slots} slots");
    }
    // One Scheduled event per pod (events are written after the binding; wait for them).
    let counts = eventually(20, "a Scheduled event per pod", || async {
        let m = event_counts(&c, "Scheduled").await;
        (m.len() == PODS).then_some(m)
    })
    .await;
    assert!(counts.values().all(|n| *n == 1), "some pod has more than one Scheduled event");
    let attempts = d.metrics.schedule_attempts.with_label_values(&["scheduled", PROFILE]).get();
    assert_eq!(attempts, PODS as u64, "scheduled attempts");
    d.shutdown().await;
    c.shutdown().await;
}
