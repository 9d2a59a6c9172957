//! Fault injection knobs, exercised with kube-rs and raw HTTP.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use berth_cluster::{ClusterConfig, ErrorRule, FaultConfig, FaultKind, KubeletConfig, LocalCluster};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "f"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}], "terminationGracePeriodSeconds": 1}
    }))
    .unwrap()
}

async fn start(faults: FaultConfig) -> LocalCluster {
    let cfg = ClusterConfig {
        nodes: 3,
        kubelet: KubeletConfig { enabled: true, start_delay: Duration::from_millis(10) },
        bookmark_interval: Duration::from_millis(500),
        faults,
        ..Default::default()
    };
    LocalCluster::start(cfg).await.unwrap()
}

fn code(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason),
        other => panic!("expected API error, got {other:?}"),
    }
}

/// `req` (a whole HTTP/1.1 request) sent over the cluster's TLS with the admin token.
async fn raw_http(c: &LocalCluster, req: &str) -> String {
    let mut s = c.connect().await.unwrap();
    let req = req.replacen("\r\n", &format!("\r\nAuthorization: Bearer {}\r\n", c.admin_token()), 1);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // A TLS peer may close without close_notify: keep what came.
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await.unwrap();
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test]
async fn error_rules_429_500_409() {
    // A rule configured at start: every pod create answers 429.
    let rule = ErrorRule { verb: Some("create".into()), resource: Some("pods".into()), kind: FaultKind::TooManyRequests { retry_after_seconds: 1 }, fraction: 1.0 };
    let c = start(FaultConfig { error_rules: vec![rule], ..Default::default() }).await;
    let raw = c.client_without_retry().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(raw.clone());
    let pp = PostParams::default();
    assert_eq!(code(pods.create(&pp, &pod("a")).await.unwrap_err()), (429, "TooManyRequests".into()));
    // Retry-After header and Status body on the wire.
    let body = r#"{"metadata":{"name":"raw"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#;
    let resp = raw_http(
        &c,
        &format!("POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 429"), "{resp}");
    assert!(resp.to_lowercase().contains("retry-after: 1"), "{resp}");
    assert!(resp.contains(r#""reason":"TooManyRequests""#), "{resp}");
    // Other verbs are unaffected.
    pods.list(&ListParams::default()).await.unwrap();

    // At run time: half of the creates fail with 429; kube's default retry gets through.
    c.faults().set_error_rules(vec![ErrorRule {
        verb: Some("create".into()),
        resource: Some("pods".into()),
        kind: FaultKind::TooManyRequests { retry_after_seconds: 0 },
        fraction: 0.5,
    }]);
    let retrying: Api<Pod> = Api::default_namespaced(c.client().unwrap());
    for i in 0..20 {
        retrying.create(&pp, &pod(&format!("r{i}"))).await.unwrap();
    }
    assert!(c.faults().injected_count() > 2, "injected {}", c.faults().injected_count());

    // 500 on get only.
    c.faults().set_error_rules(vec!["get:pods:500:1".parse().unwrap()]);
    assert_eq!(code(pods.get("r0").await.unwrap_err()), (500, "InternalError".into()));
    assert_eq!(pods.list(&ListParams::default()).await.unwrap().items.len(), 20);

    // 409 on the binding subresource.
    c.faults().set_error_rules(vec!["create:pods/binding:409:1".parse().unwrap()]);
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "r1"}, "target": {"kind": "Node", "name": "node-0"}});
    let e = pods.create_subresource::<_, kube::core::Status>("binding", "r1", &pp, &binding).await.unwrap_err();
    assert_eq!(code(e), (409, "Conflict".into()));

    // Cleared: everything works again.
    c.faults().clear_error_rules();
    pods.get("r0").await.unwrap();
    pods.create_subresource::<_, kube::core::Status>("binding", "r1", &pp, &binding).await.unwrap();
    c.shutdown().await;
}

#[tokio::test]
async fn watch_cut_interval_and_cut_now() {
    let c = start(FaultConfig { watch_cut_interval: Some(Duration::from_secs(1)), ..Default::default() }).await;
    let pods: Api<Pod> = Api::default_namespaced(c.client().unwrap());
    let t = tokio::time::Instant::now();
    let mut s = pods.watch(&WatchParams::default().timeout(60), "0").await.unwrap().boxed();
    // Drains (bookmarks only) until the server ends the watch.
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(ev) = s.try_next().await.unwrap() {
            let _ = ev;
        }
    })
    .await;
    assert!(end.is_ok(), "watch was not cut");
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(4), "cut after {took:?}");

    // Cut now.
    c.faults().set_watch_cut_interval(None);
    let mut s = pods.watch(&WatchParams::default().timeout(60), "0").await.unwrap().boxed();
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.faults().cut_watches();
    let end = tokio::time::timeout(Duration::from_secs(3), async { while s.try_next().await.unwrap().is_some() {} }).await;
    assert!(end.is_ok(), "watch was not cut by cut_watches");
    c.shutdown().await;
}

#[tokio::test]
async fn restart_keeps_state_and_drops_connections() {
    let c = start(FaultConfig::default()).await;
    let addr = c.addr();
    let pods: Api<Pod> = Api::default_namespaced(c.client().unwrap());
    pods.create(&PostParams::default(), &pod("keep")).await.unwrap();
    let mut s = pods.watch(&WatchParams::default().timeout(60), "0").await.unwrap().boxed();
    c.faults().restart_server().await.unwrap();
    // The open watch ends (cleanly or with a connection error).
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = s.next().await {}
    })
    .await;
    assert!(end.is_ok(), "watch survived the restart");
    assert_eq!(c.addr(), addr);
    // Same port, state kept.
    let got = pods.get("keep").await.unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("keep"));
    c.shutdown().await;
}

async fn wait_names(reader: &reflector::Store<Pod>, want: &BTreeSet<String>, secs: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let have: BTreeSet<String> = reader.state().iter().filter_map(|p| p.metadata.name.clone()).collect();
        if &have == want {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "reflector has {have:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn watcher_survives_faults(streaming: bool) {
    let c = start(FaultConfig { watch_cut_interval: Some(Duration::from_secs(1)), ..Default::default() }).await;
    let client = c.client().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();
    let (reader, writer) = reflector::store();
    let mut cfg = watcher::Config::default();
    if streaming {
        cfg = cfg.streaming_lists();
    }
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let stream = reflector(writer, watcher(Api::<Pod>::default_namespaced(client.clone()), cfg)).default_backoff().touched_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = stop_rx.changed() => break,
                ev = stream.next() => if ev.is_none() { break },
            }
        }
    });
    let mut want = BTreeSet::new();
    for i in 0..10 {
        pods.create(&pp, &pod(&format!("a{i}"))).await.unwrap();
        want.insert(format!("a{i}"));
    }
    wait_names(&reader, &want, 10).await;
    // Across watch cuts (1s) ...
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for i in 0..5 {
        pods.create(&pp, &pod(&format!("b{i}"))).await.unwrap();
        want.insert(format!("b{i}"));
    }
    wait_names(&reader, &want, 10).await;
    // ... a server restart ...
    c.faults().restart_server().await.unwrap();
    for i in 0..5 {
        pods.create(&pp, &pod(&format!("c{i}"))).await.unwrap();
        want.insert(format!("c{i}"));
    }
    pods.delete("a0", &Default::default()).await.unwrap();
    want.remove("a0");
    wait_names(&reader, &want, 10).await;
    // ... and a compaction (the resume gets 410 and the watcher relists).
    c.faults().compact_history();
    c.faults().cut_watches();
    pods.delete("a1", &Default::default()).await.unwrap();
    want.remove("a1");
    pods.create(&pp, &pod("d0")).await.unwrap();
    want.insert("d0".into());
    wait_names(&reader, &want, 10).await;
    let _ = stop_tx.send(true);
    tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap();
    c.shutdown().await;
}

#[tokio::test]
async fn runtime_watcher_across_cuts_restart_and_compaction() {
    watcher_survives_faults(false).await;
}

#[tokio::test]
async fn runtime_watcher_streaming_lists() {
    watcher_survives_faults(true).await;
}

#[tokio::test]
async fn slow_watcher_is_closed_instead_of_buffering_forever() {
    let cfg = ClusterConfig {
        nodes: 1,
        store: berth_cluster::StoreConfig { history_limit: 1000, channel_capacity: 64, ..Default::default() },
        ..Default::default()
    };
    let c = LocalCluster::start(cfg).await.unwrap();
    // A watcher that does not read.
    let mut s = c.connect().await.unwrap();
    s.write_all(format!("GET /api/v1/pods?watch=true&resourceVersion=0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n", c.admin_token()).as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ~40 MB of events, far more than the socket buffers hold.
    let pad = "x".repeat(4000);
    for i in 0..10_000 {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("p{i}"), "annotations": {"pad": pad}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .unwrap();
        c.store().create_typed(&p).unwrap();
    }
    // Now read: the server must have ended the watch (chunked terminator), short of all events.
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    let done = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            // A TLS peer may close without close_notify: an end all the same.
            let n = s.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.ends_with(b"\r\n0\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    assert!(done.is_ok(), "the lagging watch was not closed");
    let events = buf.windows(8).filter(|w| w == b"\"type\":\"").count();
    assert!(events < 10_000, "got all {events} events; expected the watch to be closed");
    c.shutdown().await;
}
