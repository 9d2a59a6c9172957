//! End to end: `berth run --shadow` judging another scheduler's bindings
//! over HTTP, through the fault proxy that records every request the shadow
//! makes that is not a GET.
//!
//! - a non-shadow berth on the same configuration binds the pods: the
//!   shadow agrees (`same` or `tie`) on at least 95% of them;
//! - a bin-packing binder in the test (always the fullest node that fits):
//!   most verdicts are `lower`;
//!
//! and in both the shadow wrote nothing: the only requests it sent that were
//! not GETs (lists and watches) are its admin port's TokenReviews and
//! SubjectAccessReviews. Each also leaves one pod Pending (one that fits
//! nowhere, one the binder skips): the shadow gives berth's view of it.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use berth_cluster::{FaultConfig, LocalCluster};
use berth_daemon::shadow::{self, ShadowLog, Verdict};
use berth_daemon::{self as daemon, Handle, Options};
use k8s_openapi::api::core::v1::{Binding, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::e2e_support::*;
use crate::fault_proxy::FaultProxy;

const NODES: usize = 8;
const PODS: usize = 120;
/// Each node: 4 cores, so 16 pods of 250m.
const NODE_MILLI: i64 = 4000;
const POD_MILLI: i64 = 250;

async fn deadline<F: std::future::Future<Output = ()>>(secs: u64, f: F) {
    tokio::time::timeout(Duration::from_secs(secs), f).await.unwrap_or_else(|_| panic!("test deadline ({secs} s) exceeded"));
}

/// Starts a shadow against `c` through a fresh fault proxy, and waits until it is ready.
async fn start_shadow(c: &LocalCluster) -> (Handle, FaultProxy) {
    let proxy = FaultProxy::start(c.client().unwrap()).await;
    let opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: "shadow".into(), shadow: true, ..Options::default() };
    let h = daemon::start(proxy.client(), &config(""), opts).await.unwrap();
    let mut r = h.ready.clone();
    tokio::time::timeout(Duration::from_secs(20), r.wait_for(|x| *x)).await.unwrap().unwrap();
    assert!(!*h.leading.borrow(), "a shadow never leads");
    (h, proxy)
}

fn judged(log: &ShadowLog) -> u64 {
    log.counts().values().sum()
}

/// Waits until the shadow has judged `n` bindings.
async fn until_judged(log: &ShadowLog, n: u64) {
    let t = tokio::time::Instant::now();
    while judged(log) < n {
        assert!(t.elapsed() < Duration::from_secs(10), "the shadow judged {} bindings, expected {n}", judged(log));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The shadow's writes: every request through the proxy that is not a GET,
/// except the admin port's reviews.
fn shadow_writes(proxy: &FaultProxy) -> Vec<String> {
    proxy
        .writes()
        .into_iter()
        .filter(|w| !(w.method == "POST" && (w.path.contains("/tokenreviews") || w.path.contains("/subjectaccessreviews"))))
        .map(|w| format!("{} {}", w.method, w.path))
        .collect()
}

/// Checks the admin port's view: /readyz, the metric, /debug/shadow.
async fn check_admin(h: &Handle, counts: &BTreeMap<Verdict, u64>) -> serde_json::Value {
    assert_eq!(http_get(h.admin_addr, "/readyz").await.0, 200);
    let (code, metrics) = http_get(h.admin_addr, "/metrics").await;
    assert_eq!(code, 200);
    for (v, n) in counts {
        let line = format!("berth_shadow_decisions_total{{profile=\"{PROFILE}\",verdict=\"{}\"}} {n}", v.as_str());
        assert!(metrics.contains(&line), "{line} missing from /metrics");
    }
    // Behind the same authorization as /debug/explain.
    assert_eq!(admin_get(h.admin_addr, "/debug/shadow", Some(NOBODY_TOKEN)).await.0, 403);
    let (code, body) = http_get(h.admin_addr, "/debug/shadow").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Waits until /debug/shadow's pending section lists `pod` (the shadow
/// looks at pods pending for PENDING_AFTER), and checks the gauge.
async fn until_pending_view(h: &Handle, pod: &str, view: &str) -> serde_json::Value {
    let t = tokio::time::Instant::now();
    loop {
        let (code, body) = http_get(h.admin_addr, "/debug/shadow").await;
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        if let Some(p) = v["pending"]["pods"].as_array().unwrap().iter().find(|p| p["pod"] == format!("default/{pod}")) {
            assert_eq!(p["view"], view, "{p}");
            assert_eq!(v["pending"]["counts"][view], 1, "{v}");
            let (_, metrics) = http_get(h.admin_addr, "/metrics").await;
            let line = format!("berth_shadow_pending_pods{{profile=\"{PROFILE}\",view=\"{view}\"}} 1");
            assert!(metrics.contains(&line), "{line} missing from /metrics");
            return p.clone();
        }
        assert!(t.elapsed() < shadow::PENDING_AFTER + Duration::from_secs(10), "no pending view of {pod}: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn binding(pod: &str, node: &str) -> Binding {
    serde_json::from_value(json!({"metadata": {"name": pod}, "target": {"apiVersion": "v1", "kind": "Node", "name": node}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_agrees_with_berth() {
    deadline(90, async {
        let c = cluster(NODES, 2, "4", 110, FaultConfig::default()).await;
        let (shadow, proxy) = start_shadow(&c).await;
        let log = shadow.shadow.clone().unwrap();
        let berth = start_daemon(&c, &config(""), "binder").await;
        until_leading(&berth, 30).await;
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        // Fits nowhere: the binder leaves it Pending, and so would berth.
        api.create(&PostParams::default(), &pod("huge", "64", json!({}))).await.unwrap();
        // One at a time: each is bound, and judged, before the next exists,
        // so that both see the same cache at each decision.
        for i in 0..PODS {
            api.create(&PostParams::default(), &pod(&format!("p{i}"), "250m", json!({}))).await.unwrap();
            until_judged(&log, i as u64 + 1).await;
        }
        let counts = log.counts();
        let agree = counts.get(&Verdict::Same).copied().unwrap_or(0) + counts.get(&Verdict::Tie).copied().unwrap_or(0);
        eprintln!("verdicts with a berth binder: {counts:?}");
        assert!(agree * 100 >= 95 * PODS as u64, "only {agree}/{PODS} same or tie: {counts:?}");
        assert_eq!(counts.get(&Verdict::Infeasible), None, "{counts:?}");
        let report = check_admin(&shadow, &counts).await;
        assert_eq!(report["counts"]["same"].as_u64().unwrap_or(0) + report["counts"]["tie"].as_u64().unwrap_or(0), agree);
        let p = until_pending_view(&shadow, "huge", "unplaceable").await;
        assert!(p["message"].as_str().unwrap().contains("Insufficient cpu"), "{p}");
        assert_eq!(p.get("berth_node"), None, "{p}");
        assert_eq!(shadow_writes(&proxy), Vec::<String>::new(), "the shadow wrote");
        assert_eq!(shadow.write_counts().binds, 0);
        assert_eq!(berth.shutdown().await, 0);
        assert_eq!(shadow.shutdown().await, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_judges_bin_packing_lower() {
    deadline(90, async {
        let c = cluster(NODES, 2, "4", 110, FaultConfig::default()).await;
        let (shadow, proxy) = start_shadow(&c).await;
        let log = shadow.shadow.clone().unwrap();
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        let mut used: HashMap<String, i64> = (0..NODES).map(|i| (format!("node-{i}"), 0)).collect();
        // The binder skips this one: berth would place it.
        api.create(&PostParams::default(), &pod("skipped", "250m", json!({}))).await.unwrap();
        for i in 0..PODS {
            let name = format!("p{i}");
            api.create(&PostParams::default(), &pod(&name, "250m", json!({}))).await.unwrap();
            // MostAllocated: the fullest node the pod still fits on (by name among equals).
            let node = used.iter().filter(|(_, u)| **u + POD_MILLI <= NODE_MILLI).max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))).map(|(n, _)| n.clone()).unwrap();
            let _: kube::core::Status = api.create_subresource("binding", &name, &PostParams::default(), &binding(&name, &node)).await.unwrap();
            *used.get_mut(&node).unwrap() += POD_MILLI;
            until_judged(&log, i as u64 + 1).await;
        }
        let counts = log.counts();
        eprintln!("verdicts with a bin-packing binder: {counts:?}");
        let lower = counts.get(&Verdict::Lower).copied().unwrap_or(0);
        assert!(lower * 2 > PODS as u64, "only {lower}/{PODS} lower: {counts:?}");
        assert_eq!(counts.get(&Verdict::Infeasible), None, "{counts:?}");
        let report = check_admin(&shadow, &counts).await;
        let ds = report["disagreements"].as_array().unwrap();
        assert_eq!(ds.len() as u64, PODS as u64 - counts.get(&Verdict::Same).copied().unwrap_or(0));
        let d = ds.iter().find(|d| d["verdict"] == "lower").unwrap();
        assert!(d["score_gap"].as_i64().unwrap() > 0, "{d}");
        assert_ne!(d["bound_node"], d["berth_node"]);
        assert!(d["bound"]["scores"].as_object().is_some_and(|s| !s.is_empty()), "{d}");
        assert!(d["berth"]["total"].as_i64() > d["bound"]["total"].as_i64(), "{d}");
        let gap = shadow.metrics.shadow_score_gap.with_label_values(&[PROFILE]).get_sample_count();
        assert_eq!(gap, lower + counts.get(&Verdict::Tie).copied().unwrap_or(0));
        let p = until_pending_view(&shadow, "skipped", "placeable").await;
        assert!(p["berth_node"].as_str().unwrap().starts_with("node-"), "{p}");
        assert_eq!(shadow_writes(&proxy), Vec::<String>::new(), "the shadow wrote");
        // Nothing else bound them: every pod is where the binder put it.
        for p in pods(&api).await {
            assert_eq!(node_of(&p).is_some(), p.metadata.name.as_deref() != Some("skipped"), "{:?}", p.metadata.name);
        }
        assert_eq!(shadow.shutdown().await, 0);
    })
    .await;
}
