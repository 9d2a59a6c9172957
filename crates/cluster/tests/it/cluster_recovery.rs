//! Recovery: a cluster kept in a data directory across restarts and
//! crashes, answers to clients whose resourceVersion is ahead of the
//! server's (its state went backwards), and the Kubernetes release the
//! cluster answers as.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_cluster::controllers::ControllersConfig;
use berth_cluster::version::KubeVersion;
use berth_cluster::{ClusterConfig, KubeletConfig, LocalCluster, StoreConfig};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use crate::support::{eventually, plain_http_get};

/// A new, empty directory for one test.
fn data_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("berth-recovery-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn config(dir: &Path, nodes: usize) -> ClusterConfig {
    ClusterConfig {
        nodes,
        kubelet: KubeletConfig { enabled: true, start_delay: Duration::from_millis(20) },
        controllers: ControllersConfig { resync: Duration::from_millis(200), ..Default::default() },
        data_dir: Some(dir.to_path_buf()),
        ..Default::default()
    }
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": name}})).unwrap()
}

/// A restart with the same data directory keeps every object as it was
/// (uids, bindings, a CRD and its objects, the nodes the first start
/// made: `--nodes` only seeds a new directory); resourceVersions go on
/// above every one served before, and a watch from before the restart
/// gets 410 Gone.
#[tokio::test]
async fn a_restart_keeps_every_object_and_resumes_get_410() {
    let dir = data_dir("restart");
    let c = LocalCluster::start(config(&dir, 3)).await.unwrap();
    let client = c.client().unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm = cms.create(&PostParams::default(), &config_map("settings")).await.unwrap();
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap();
    Api::<Deployment>::default_namespaced(client.clone()).create(&PostParams::default(), &deploy).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let names = eventually(10, "three pods", || async {
        let l = pods.list(&ListParams::default()).await.ok()?;
        (l.items.len() == 3).then(|| l.items.iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>())
    })
    .await;
    for (i, name) in names.iter().enumerate() {
        let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": format!("node-{i}")}});
        c.store().bind("default", name, binding).unwrap();
    }
    let running = |pods: Api<Pod>| async move {
        eventually(10, "three running pods", || async {
            let l = pods.list(&ListParams::default()).await.ok()?;
            let all = l.items.iter().all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            (l.items.len() == 3 && all).then_some(l.items)
        })
        .await
    };
    let before = running(pods.clone()).await;
    let facts = |ps: &[Pod]| {
        let mut v: Vec<_> = ps.iter().map(|p| (p.metadata.name.clone(), p.metadata.uid.clone(), p.spec.as_ref().and_then(|s| s.node_name.clone()))).collect();
        v.sort();
        v
    };
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let crds = c.store().lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions").unwrap();
    c.store().create(crds, "", crd).unwrap();
    let widgets = c.store().lookup("example.com", "v1", "widgets").unwrap();
    let widget = c.store().create(widgets, "default", json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "size": 3})).unwrap();
    let nodes_before: Vec<(Option<String>, Option<String>)> =
        Api::<Node>::all(client.clone()).list(&ListParams::default()).await.unwrap().items.iter().map(|n| (n.metadata.name.clone(), n.metadata.uid.clone())).collect();
    let rv_before = c.store().current_rv();
    c.shutdown().await;

    // One node asked for: the directory's three are kept, none is added.
    let c = LocalCluster::start(config(&dir, 1)).await.unwrap();
    let client = c.client().unwrap();
    assert!(c.store().current_rv() > rv_before);
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let back = cms.get("settings").await.unwrap();
    assert_eq!(back.metadata.uid, cm.metadata.uid);
    assert_eq!(back.metadata.resource_version, cm.metadata.resource_version);
    assert_eq!(back.data, cm.data);
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let after = running(pods.clone()).await;
    assert_eq!(facts(&after), facts(&before));
    assert!(Api::<Deployment>::default_namespaced(client.clone()).get("web").await.is_ok());
    let nodes_after: Vec<(Option<String>, Option<String>)> =
        Api::<Node>::all(client.clone()).list(&ListParams::default()).await.unwrap().items.iter().map(|n| (n.metadata.name.clone(), n.metadata.uid.clone())).collect();
    assert_eq!(nodes_after, nodes_before);
    let widgets = c.store().lookup("example.com", "v1", "widgets").expect("the CRD is served again");
    assert_eq!(c.store().get(widgets, "default", "w").unwrap().value, widget.value);
    // New writes continue above every resourceVersion served before.
    let new = cms.create(&PostParams::default(), &config_map("new")).await.unwrap();
    assert!(new.metadata.resource_version.unwrap().parse::<u64>().unwrap() > rv_before);
    // A watch resumed from before the restart: 410 Gone, so the client relists.
    let mut stream = cms.watch(&WatchParams::default(), &rv_before.to_string()).await.unwrap().boxed();
    match stream.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired"), "{e:?}"),
        other => panic!("expected 410, got {other:?}"),
    }
    drop(stream);
    c.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every write acknowledged over HTTP is in the directory after a crash:
/// the cluster is dropped as by `kill -9` (tasks aborted, what is still
/// queued for the directory dropped) while writers are busy, and the
/// directory is opened again; three crashes in a row, at different
/// moments of the burst. The writers go on a few requests past the
/// crash: connections that were open are still served for a moment (the
/// server's connection tasks outlive the aborted listener), and a write
/// they carry after the crash must not be acknowledged (it once was,
/// when the writer had just caught up: see
/// `store::persist::tests::a_change_after_a_halt_is_never_acknowledged`).
/// (A real `kill -9` of `berth cluster` is the e2e test
/// `data_dir_survives_kill_9`; both rest on the store answering a write
/// only once its transaction is committed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_crash() {
    let dir = data_dir("crash");
    let mut acked: Vec<(String, String)> = Vec::new();
    for (round, burst_ms) in [700u64, 1100, 1500].into_iter().enumerate() {
        let c = LocalCluster::start(config(&dir, 2)).await.unwrap();
        let cm_res = c.store().lookup("", "v1", "configmaps").unwrap();
        // What earlier crashes acknowledged is there.
        for (name, uid) in &acked {
            let o = c.store().get(cm_res, "default", name).unwrap_or_else(|e| panic!("round {round}: acknowledged {name} lost: {e}"));
            assert_eq!(o.uid(), uid);
        }
        let cms: Api<ConfigMap> = Api::default_namespaced(c.client().unwrap());
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut writers = Vec::new();
        for w in 0..12 {
            let cms = cms.clone();
            let stop = stop_rx.clone();
            writers.push(tokio::spawn(async move {
                let mut acked: Vec<(String, String)> = Vec::new();
                let mut after_stop = 0;
                for i in 0.. {
                    if *stop.borrow() {
                        after_stop += 1;
                        if after_stop > 3 {
                            break;
                        }
                    }
                    let cm = config_map(&format!("cm-{round}-{w}-{i}"));
                    match tokio::time::timeout(Duration::from_secs(5), cms.create(&PostParams::default(), &cm)).await {
                        Ok(Ok(cm)) => acked.push((cm.metadata.name.unwrap(), cm.metadata.uid.unwrap())),
                        Ok(Err(_)) => {}
                        Err(_) => break,
                    }
                }
                acked
            }));
        }
        tokio::time::sleep(Duration::from_millis(burst_ms)).await;
        // Crash while the writers are still going: what was answered is committed.
        let _ = stop_tx.send(true);
        c.abort();
        let before = acked.len();
        for w in writers {
            acked.extend(w.await.unwrap());
        }
        assert!(acked.len() - before > 20, "round {round}: only {} writes acknowledged", acked.len() - before);
        eprintln!("round {round}: {} writes acknowledged before the crash", acked.len() - before);
    }
    let c = LocalCluster::start(config(&dir, 2)).await.unwrap();
    let cm_res = c.store().lookup("", "v1", "configmaps").unwrap();
    for (name, uid) in &acked {
        let o = c.store().get(cm_res, "default", name).unwrap_or_else(|e| panic!("acknowledged {name} lost: {e}"));
        assert_eq!(o.uid(), uid);
    }
    c.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn status_of(body: &str) -> Value {
    serde_json::from_str(body.lines().next().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Reads and watches from a resourceVersion ahead of the server's (a new
/// cluster on the same address, a restored backup) wait a little for the
/// store to reach it, then are answered as kube-apiserver answers: 504
/// Timeout "Too large resource version" with the `ResourceVersionTooLarge`
/// cause (a watch: one ERROR event), so that clients relist.
#[tokio::test]
async fn a_resource_version_ahead_of_the_server_is_too_large() {
    let cfg = ClusterConfig { nodes: 1, store: StoreConfig { too_large_wait: Duration::from_millis(300), ..Default::default() }, ..Default::default() };
    let c = LocalCluster::start(cfg).await.unwrap();
    let current = c.store().current_rv();
    let ahead = current + 1000;
    let check = |s: &Value| {
        assert_eq!(s["code"], 504, "{s}");
        assert_eq!(s["reason"], "Timeout", "{s}");
        let m = s["message"].as_str().unwrap_or("");
        assert!(m.starts_with(&format!("Timeout: Too large resource version: {ahead}, current: ")), "{m}");
        assert_eq!(s["details"]["causes"][0], json!({"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}), "{s}");
        assert_eq!(s["details"]["retryAfterSeconds"], 1, "{s}");
    };
    for path in [
        format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={ahead}"),
        format!("/api/v1/pods?watch=1&resourceVersion={ahead}&allowWatchBookmarks=true"),
        format!("/api/v1/pods?watch=1&resourceVersion={ahead}&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
    ] {
        let started = std::time::Instant::now();
        let (code, body) = plain_http_get(&c, &path).await;
        assert_eq!(code, 200, "{path}");
        assert!(started.elapsed() >= Duration::from_millis(250), "{path} answered without waiting");
        let ev = status_of(&body);
        assert_eq!(ev["type"], "ERROR", "{body}");
        check(&ev["object"]);
    }
    for path in [
        format!("/api/v1/pods?resourceVersion={ahead}"),
        format!("/api/v1/nodes?resourceVersion={ahead}&resourceVersionMatch=NotOlderThan"),
        format!("/api/v1/nodes?resourceVersion={ahead}&resourceVersionMatch=Exact"),
        format!("/api/v1/nodes/node-0?resourceVersion={ahead}"),
    ] {
        let (code, body) = plain_http_get(&c, &path).await;
        assert_eq!(code, 504, "{path}: {body}");
        check(&status_of(&body));
    }
    // kube-rs sees the same Status (what a client relists on).
    let nodes: Api<Node> = Api::all(c.client_without_retry().unwrap());
    match nodes.list(&ListParams::default().at(&ahead.to_string())).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (504, "Timeout"), "{s:?}"),
        other => panic!("expected 504, got {other:?}"),
    }
    // Versions the server has, "0" and none are served as before.
    for path in [format!("/api/v1/nodes?resourceVersion={current}"), "/api/v1/nodes?resourceVersion=0".to_string(), "/api/v1/nodes".to_string()] {
        assert_eq!(plain_http_get(&c, &path).await.0, 200, "{path}");
    }
    // A version the store reaches while the request waits is served.
    let next = c.store().current_rv() + 1;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client().unwrap());
    let writer = {
        let cms = cms.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            cms.create(&PostParams::default(), &config_map("late")).await.unwrap()
        })
    };
    let l = cms.list(&ListParams::default().at(&next.to_string())).await.unwrap();
    assert!(l.metadata.resource_version.unwrap().parse::<u64>().unwrap() >= next);
    writer.await.unwrap();
    c.shutdown().await;
}

/// The server of a fresh cluster on the address of an old one: a client
/// that resumes its watch from the old cluster's resourceVersion is told
/// "Too large resource version" instead of waiting for events forever.
#[tokio::test]
async fn a_new_cluster_on_the_same_address_refuses_the_old_resource_versions() {
    let fast = StoreConfig { too_large_wait: Duration::from_millis(200), ..Default::default() };
    let old = LocalCluster::start(ClusterConfig { nodes: 20, store: fast.clone(), ..Default::default() }).await.unwrap();
    let addr = old.addr();
    let nodes: Api<Node> = Api::all(old.client().unwrap());
    let rv = nodes.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    old.shutdown().await;
    let new = LocalCluster::start(ClusterConfig { nodes: 5, listen: addr, store: fast, ..Default::default() }).await.unwrap();
    assert_eq!(new.addr(), addr);
    let nodes: Api<Node> = Api::all(new.client().unwrap());
    let mut stream = nodes.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
        Ok(Some(Ok(WatchEvent::Error(e)))) => {
            assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"), "{e:?}");
            assert!(e.message.contains("Too large resource version"), "{e:?}");
        }
        other => panic!("expected Too large resource version, got {other:?}"),
    }
    // The relist shows the new cluster as it is.
    assert_eq!(nodes.list(&ListParams::default()).await.unwrap().items.len(), 5);
    new.shutdown().await;
}

async fn get_json(c: &LocalCluster, path: &str) -> (u16, Value) {
    let (code, body) = plain_http_get(c, path).await;
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn resources_of(list: &Value) -> Vec<String> {
    list["resources"].as_array().map(|a| a.iter().filter_map(|r| r["name"].as_str().map(str::to_string)).collect()).unwrap_or_default()
}

fn versions_of(group: &Value) -> Vec<String> {
    group["versions"].as_array().map(|a| a.iter().filter_map(|v| v["version"].as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// `--kubernetes-version`: `/version` reports the release, and the
/// built-in resources it does not serve by default are absent from
/// discovery and OpenAPI and 404 on every path; the default (1.37)
/// serves everything, as before.
#[tokio::test]
async fn the_kubernetes_version_decides_what_is_served() {
    let start = |v: &str| {
        let kubernetes_version: KubeVersion = v.parse().unwrap();
        LocalCluster::start(ClusterConfig { nodes: 1, kubernetes_version, ..Default::default() })
    };
    let c = start("1.34").await.unwrap();
    let (_, v) = get_json(&c, "/version").await;
    assert_eq!((v["major"].as_str(), v["minor"].as_str(), v["gitVersion"].as_str()), (Some("1"), Some("34"), Some("v1.34.0-berth")));
    let (_, node) = get_json(&c, "/api/v1/nodes/node-0").await;
    assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], "v1.34.0-berth");
    // scheduling.k8s.io: v1 only (PodGroup and Workload came in 1.35-1.37 as alpha, then v1beta1).
    let (_, g) = get_json(&c, "/apis/scheduling.k8s.io").await;
    assert_eq!(versions_of(&g), ["v1"]);
    let (_, all) = get_json(&c, "/apis").await;
    let sched = all["groups"].as_array().unwrap().iter().find(|g| g["name"] == "scheduling.k8s.io").unwrap();
    assert_eq!(versions_of(sched), ["v1"]);
    for path in [
        "/apis/scheduling.k8s.io/v1beta1",
        "/apis/scheduling.k8s.io/v1beta1/podgroups",
        "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups",
        "/apis/scheduling.k8s.io/v1beta1/namespaces/default/workloads/w",
        "/apis/resource.k8s.io/v1/devicetaintrules",
        "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
        "/apis/certificates.k8s.io/v1/clustertrustbundles/b",
        "/openapi/v3/apis/scheduling.k8s.io/v1beta1",
    ] {
        assert_eq!(plain_http_get(&c, path).await.0, 404, "{path}");
    }
    // DRA is GA in 1.34; DeviceTaintRule is not yet v1.
    let (_, dra) = get_json(&c, "/apis/resource.k8s.io/v1").await;
    let dra = resources_of(&dra);
    assert!(dra.contains(&"resourceclaims".to_string()) && dra.contains(&"resourceslices".to_string()), "{dra:?}");
    assert!(!dra.iter().any(|r| r.starts_with("devicetaintrules")), "{dra:?}");
    assert_eq!(plain_http_get(&c, "/apis/resource.k8s.io/v1/resourceclaims").await.0, 200);
    let (_, adm) = get_json(&c, "/apis/admissionregistration.k8s.io/v1").await;
    assert!(!resources_of(&adm).iter().any(|r| r.starts_with("mutatingadmissionpolicies")));
    let (_, v3) = get_json(&c, "/openapi/v3").await;
    assert!(v3["paths"].get("apis/scheduling.k8s.io/v1beta1").is_none());
    assert!(v3["paths"].get("apis/resource.k8s.io/v1").is_some());
    c.shutdown().await;

    let c = start("1.36").await.unwrap();
    let (_, adm) = get_json(&c, "/apis/admissionregistration.k8s.io/v1").await;
    assert!(resources_of(&adm).contains(&"mutatingadmissionpolicies".to_string()));
    assert_eq!(plain_http_get(&c, "/apis/scheduling.k8s.io/v1beta1/podgroups").await.0, 404);
    assert_eq!(plain_http_get(&c, "/apis/certificates.k8s.io/v1/clustertrustbundles").await.0, 404);
    c.shutdown().await;

    let c = LocalCluster::start(ClusterConfig { nodes: 1, ..Default::default() }).await.unwrap();
    let (_, v) = get_json(&c, "/version").await;
    assert_eq!(v["minor"], "37");
    let (_, g) = get_json(&c, "/apis/scheduling.k8s.io").await;
    assert_eq!(versions_of(&g), ["v1", "v1beta1"]);
    for path in ["/apis/scheduling.k8s.io/v1beta1/podgroups", "/apis/resource.k8s.io/v1/devicetaintrules", "/apis/certificates.k8s.io/v1/clustertrustbundles"] {
        assert_eq!(plain_http_get(&c, path).await.0, 200, "{path}");
    }
    c.shutdown().await;
}
