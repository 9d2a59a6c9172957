//! The local cluster driven by a real client (kube-rs).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_cluster::{ClusterConfig, KubeletConfig, LocalCluster};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Binding, Namespace, Node, ObjectReference, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use super::support::{eventually, api_code};

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}], "terminationGracePeriodSeconds": 1}
    }))
    .unwrap()
}

async fn start() -> LocalCluster {
    let cfg = ClusterConfig {
        nodes: 6,
        kubelet: KubeletConfig { enabled: true, start_delay: Duration::from_millis(20) },
        bookmark_interval: Duration::from_millis(300),
        ..Default::default()
    };
    LocalCluster::start(cfg).await.unwrap()
}




/// Next watch event that is not a periodic bookmark (bounded wait).
async fn next_event<S>(s: &mut S) -> WatchEvent<Pod>
where
    S: futures::Stream<Item = Result<WatchEvent<Pod>, kube::Error>> + Unpin,
{
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), s.try_next()).await.unwrap().unwrap().unwrap();
        if !matches!(ev, WatchEvent::Bookmark(_)) {
            return ev;
        }
    }
}

#[tokio::test]
async fn nodes_namespaces_and_discovery() {
    let c = start().await;
    let client = c.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 6);
    let n0 = &list.items[0];
    let labels = n0.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "node-0");
    assert_eq!(labels["topology.kubernetes.io/zone"], "zone-a");
    assert_eq!(list.items[4].metadata.labels.as_ref().unwrap()["topology.kubernetes.io/zone"], "zone-b");
    let st = n0.status.as_ref().unwrap();
    assert_eq!(st.allocatable.as_ref().unwrap()["pods"].0, "110");
    assert_eq!(st.capacity.as_ref().unwrap()["memory"].0, "32Gi");
    let extra = c.add_node("extra").unwrap();
    assert_eq!(extra.metadata.labels.unwrap()["topology.kubernetes.io/zone"], "zone-a");
    assert_eq!(nodes.list(&ListParams::default()).await.unwrap().items.len(), 7);
    let ns: Api<Namespace> = Api::all(client.clone());
    assert!(ns.get("default").await.is_ok());
    assert!(ns.get("kube-system").await.is_ok());
    let pcs: Api<PriorityClass> = Api::all(client.clone());
    assert_eq!(pcs.get("system-node-critical").await.unwrap().value, Some(2_000_001_000));
    let v = client.apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
    let groups = client.list_api_groups().await.unwrap();
    assert!(groups.groups.iter().any(|g| g.name == "policy"));
    let core = client.list_core_api_resources("v1").await.unwrap();
    assert!(core.resources.iter().any(|r| r.name == "pods/binding"));
    c.shutdown().await;
}

#[tokio::test]
async fn crud_conflicts_and_patches() {
    let c = start().await;
    let client = c.client().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();
    let created = pods.create(&pp, &pod("a")).await.unwrap();
    let spec = created.spec.as_ref().unwrap();
    assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
    assert_eq!(spec.priority, Some(0));
    assert_eq!(created.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    // AlreadyExists.
    let e = pods.create(&pp, &pod("a")).await.unwrap_err();
    assert_eq!(api_code(&e), 409);
    // generateName.
    let mut g = pod("");
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let gp = pods.create(&pp, &g).await.unwrap();
    assert!(gp.metadata.name.as_ref().unwrap().starts_with("gen-"));
    // Update with the current resourceVersion works; a stale one conflicts.
    let mut upd = created.clone();
    upd.metadata.labels.as_mut().unwrap().insert("v".into(), "2".into());
    let updated = pods.replace("a", &pp, &upd).await.unwrap();
    assert_ne!(updated.metadata.resource_version, created.metadata.resource_version);
    let e = pods.replace("a", &pp, &upd).await.unwrap_err();
    assert_eq!(api_code(&e), 409);
    // Merge patch.
    let p = pods.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"x": "1"}}}))).await.unwrap();
    assert_eq!(p.metadata.annotations.unwrap()["x"], "1");
    // Strategic merge patch on status: conditions merged by type, nominatedNodeName set.
    let sp = json!({"status": {"nominatedNodeName": "node-1", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/6 nodes"}]}});
    pods.patch_status("a", &PatchParams::default(), &Patch::Strategic(sp)).await.unwrap();
    let sp2 = json!({"status": {"conditions": [{"type": "Custom", "status": "True"}]}});
    let p = pods.patch_status("a", &PatchParams::default(), &Patch::Strategic(sp2)).await.unwrap();
    let st = p.status.unwrap();
    assert_eq!(st.nominated_node_name.as_deref(), Some("node-1"));
    let conds = st.conditions.unwrap();
    assert_eq!(conds.len(), 2, "{conds:?}");
    assert_eq!(conds[0].reason.as_deref(), Some("Unschedulable"));
    // JSON patch.
    let req = axum::http::Request::builder()
        .method("PATCH")
        .uri("/api/v1/namespaces/default/pods/a")
        .header("content-type", "application/json-patch+json")
        .body(br#"[{"op": "add", "path": "/metadata/labels/j", "value": "k"}]"#.to_vec())
        .unwrap();
    let p: Pod = serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap();
    assert_eq!(p.metadata.labels.unwrap()["j"], "k");
    let req = axum::http::Request::builder()
        .method("PATCH")
        .uri("/api/v1/namespaces/default/pods/a")
        .header("content-type", "application/json-patch+json")
        .body(br#"[{"op": "test", "path": "/metadata/labels/j", "value": "other"}]"#.to_vec())
        .unwrap();
    assert_eq!(api_code(&client.request_text(req).await.unwrap_err()), 422);
    // Server-side apply: conditions merge by type; a missing object is created.
    let ssa = PatchParams::apply("berth").force();
    let ap = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "status": {"conditions": [{"type": "Applied", "status": "True"}]}});
    let p = pods.patch_status("a", &ssa, &Patch::Apply(ap)).await.unwrap();
    assert_eq!(p.status.unwrap().conditions.unwrap().len(), 3);
    let fresh = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "applied"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    pods.patch("applied", &ssa, &Patch::Apply(fresh)).await.unwrap();
    assert!(pods.get("applied").await.is_ok());
    // A patch carrying a stale resourceVersion conflicts.
    let e = pods
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"z": "z"}}})))
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), 409);
    // Delete (unbound: immediate) and 404 afterwards.
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(&pods.get("a").await.unwrap_err()), 404);
    assert_eq!(api_code(&pods.delete("a", &DeleteParams::default()).await.unwrap_err()), 404);
    // Delete precondition on uid.
    let dp = DeleteParams { preconditions: Some(kube::api::Preconditions { uid: Some("nope".into()), resource_version: None }), ..Default::default() };
    let e = pods.delete(gp.metadata.name.as_ref().unwrap(), &dp).await.unwrap_err();
    assert_eq!(api_code(&e), 409);
    c.shutdown().await;
}

#[tokio::test]
async fn list_pagination_and_selectors() {
    let c = start().await;
    let client = c.client().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for i in 0..25 {
        let mut p = pod(&format!("p{i:02}"));
        if i % 5 == 0 {
            p.metadata.labels.as_mut().unwrap().insert("tier".into(), "db".into());
        }
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().limit(10);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = pods.list(&lp).await.unwrap();
        pages += 1;
        assert!(page.metadata.resource_version.is_some());
        names.extend(page.items.iter().map(|p| p.metadata.name.clone().unwrap()));
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() || pages > 10 {
            break;
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names.len(), 25);
    assert_eq!(names[0], "p00");
    let db = pods.list(&ListParams::default().labels("tier=db")).await.unwrap();
    assert_eq!(db.items.len(), 5);
    let notdb = pods.list(&ListParams::default().labels("app=web,tier notin (db)")).await.unwrap();
    assert_eq!(notdb.items.len(), 20);
    let none = pods.list(&ListParams::default().labels("!app")).await.unwrap();
    assert_eq!(none.items.len(), 0);
    let one = pods.list(&ListParams::default().fields("metadata.name=p01")).await.unwrap();
    assert_eq!(one.items.len(), 1);
    let unbound = pods.list(&ListParams::default().fields("spec.nodeName=,status.phase!=Running")).await.unwrap();
    assert_eq!(unbound.items.len(), 25);
    // deletecollection with a selector.
    pods.delete_collection(&DeleteParams::default(), &ListParams::default().labels("tier=db")).await.unwrap();
    assert_eq!(pods.list(&ListParams::default()).await.unwrap().items.len(), 20);
    // Cluster-wide list.
    let all: Api<Pod> = Api::all(client.clone());
    assert_eq!(all.list(&ListParams::default()).await.unwrap().items.len(), 20);
    // Bad selectors are 400s.
    assert_eq!(api_code(&pods.list(&ListParams::default().labels("a in b")).await.unwrap_err()), 400);
    assert_eq!(api_code(&pods.list(&ListParams::default().fields("spec.bogus=1")).await.unwrap_err()), 400);
    c.shutdown().await;
}

#[tokio::test]
async fn watch_resume_bookmarks_and_gone() {
    let c = start().await;
    let pods: Api<Pod> = Api::default_namespaced(c.client().unwrap());
    let first = pods.create(&PostParams::default(), &pod("w0")).await.unwrap();
    let rv0 = first.metadata.resource_version.clone().unwrap();
    for i in 1..4 {
        pods.create(&PostParams::default(), &pod(&format!("w{i}"))).await.unwrap();
    }
    // Resume after w0: exactly w1..w3 as ADDED.
    let mut s = pods.watch(&WatchParams::default().timeout(5), &rv0).await.unwrap().boxed();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match next_event(&mut s).await {
            WatchEvent::Added(p) => seen.push(p.metadata.name.unwrap()),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["w1", "w2", "w3"]);
    // Live events keep flowing.
    pods.patch("w1", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"m": "1"}}}))).await.unwrap();
    match next_event(&mut s).await {
        WatchEvent::Modified(p) => assert_eq!(p.metadata.name.as_deref(), Some("w1")),
        other => panic!("unexpected {other:?}"),
    }
    drop(s);
    // Field-selected watch sees a pod leave the selection as DELETED.
    let wp = WatchParams::default().fields("metadata.name=w2").timeout(5);
    let mut s = pods.watch(&wp, "0").await.unwrap().boxed();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Added(_)));
    pods.delete("w2", &DeleteParams::default()).await.unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Deleted(_)));
    drop(s);
    // Bookmarks, with the initial-events-end marker for sendInitialEvents.
    let wp = WatchParams::default().initial_events().timeout(5);
    let mut s = pods.watch(&wp, "").await.unwrap().boxed();
    let mut added = 0;
    let mut end_marker = false;
    let mut periodic = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !(end_marker && periodic) && tokio::time::Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), s.try_next()).await.unwrap().unwrap().unwrap() {
            WatchEvent::Added(_) => added += 1,
            WatchEvent::Bookmark(b) => {
                if b.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str) == Some("true") {
                    end_marker = true;
                } else {
                    periodic = true;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(added, 3);
    assert!(end_marker && periodic);
    drop(s);
    // After compaction, resuming from an old resourceVersion is 410 Expired.
    c.faults().compact_history();
    let mut s = pods.watch(&WatchParams::default().timeout(5), &rv0).await.unwrap().boxed();
    match tokio::time::timeout(Duration::from_secs(5), s.try_next()).await.unwrap().unwrap().unwrap() {
        WatchEvent::Error(st) => {
            assert_eq!(st.code, 410);
            assert_eq!(st.reason, "Expired");
        }
        other => panic!("expected 410, got {other:?}"),
    }
    c.shutdown().await;
}

#[tokio::test]
async fn binding_kubelet_and_graceful_deletion() {
    let c = start().await;
    let pods: Api<Pod> = Api::default_namespaced(c.client().unwrap());
    let pp = PostParams::default();
    pods.create(&pp, &pod("b")).await.unwrap();
    let binding = |pod: &str, node: &str| Binding {
        metadata: kube::api::ObjectMeta { name: Some(pod.into()), ..Default::default() },
        target: ObjectReference { kind: Some("Node".into()), name: Some(node.into()), ..Default::default() },
    };
    let st: kube::core::Status = pods.create_subresource("binding", "b", &pp, &binding("b", "node-2")).await.unwrap();
    assert_eq!(st.code, 201);
    let e = pods.create_subresource::<_, kube::core::Status>("binding", "b", &pp, &binding("b", "node-3")).await.unwrap_err();
    assert_eq!(api_code(&e), 409);
    let e = pods.create_subresource::<_, kube::core::Status>("binding", "gone", &pp, &binding("gone", "node-3")).await.unwrap_err();
    assert_eq!(api_code(&e), 404);
    // The kubelet starts it.
    let running = eventually(5, "condition", || async {
        let p = pods.get("b").await.unwrap();
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
    })
    .await;
    let st = running.status.unwrap();
    assert_eq!(running.spec.unwrap().node_name.as_deref(), Some("node-2"));
    assert!(st.pod_ip.is_some() && st.host_ip.is_some() && st.start_time.is_some());
    let conds = st.conditions.unwrap();
    for ty in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert!(conds.iter().any(|c| c.type_ == ty && c.status == "True"), "{ty} missing in {conds:?}");
    }
    // Graceful deletion: terminationGracePeriodSeconds is 1.
    let r = pods.delete("b", &DeleteParams::default()).await.unwrap();
    let deleting = r.left().unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(1));
    assert!(pods.get("b").await.is_ok(), "still there during its grace period");
    eventually(5, "condition", || async { pods.get_opt("b").await.unwrap().is_none().then_some(()) }).await;

    // A second delete with a shorter grace period shortens it.
    let mut long = pod("long");
    long.spec.as_mut().unwrap().termination_grace_period_seconds = Some(300);
    long.spec.as_mut().unwrap().node_name = Some("node-1".into());
    pods.create(&pp, &long).await.unwrap();
    pods.delete("long", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(pods.get("long").await.unwrap().metadata.deletion_timestamp.is_some());
    pods.delete("long", &DeleteParams { grace_period_seconds: Some(1), ..Default::default() }).await.unwrap();
    eventually(5, "condition", || async { pods.get_opt("long").await.unwrap().is_none().then_some(()) }).await;

    // gracePeriodSeconds=0 removes at once.
    let mut now = pod("now");
    now.spec.as_mut().unwrap().node_name = Some("node-1".into());
    pods.create(&pp, &now).await.unwrap();
    pods.delete("now", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    assert!(pods.get_opt("now").await.unwrap().is_none());

    // Completion annotation: Succeeded after starting.
    let mut job = pod("job");
    job.metadata.annotations = Some([(berth_cluster::COMPLETE_AFTER.to_string(), "200ms".to_string())].into());
    job.spec.as_mut().unwrap().node_name = Some("node-0".into());
    pods.create(&pp, &job).await.unwrap();
    eventually(5, "condition", || async {
        let p = pods.get("job").await.unwrap();
        (p.status.as_ref()?.phase.as_deref() == Some("Succeeded")).then_some(())
    })
    .await;
    // A terminal pod is deleted at once.
    pods.delete("job", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("job").await.unwrap().is_none());

    // A pod bound to a node that doesn't exist is accepted but stays Pending.
    pods.create(&pp, &pod("ghost")).await.unwrap();
    let gb = binding("ghost", "no-such-node");
    pods.create_subresource::<_, kube::core::Status>("binding", "ghost", &pp, &gb).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(pods.get("ghost").await.unwrap().status.unwrap().phase.as_deref(), Some("Pending"));
    c.shutdown().await;
}

#[tokio::test]
async fn priority_classes() {
    let c = start().await;
    let client = c.client().unwrap();
    let pcs: Api<PriorityClass> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();
    let high: PriorityClass = serde_json::from_value(json!({"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"})).unwrap();
    pcs.create(&pp, &high).await.unwrap();
    let mut p = pod("hp");
    p.spec.as_mut().unwrap().priority_class_name = Some("high".into());
    let created = pods.create(&pp, &p).await.unwrap();
    assert_eq!(created.spec.as_ref().unwrap().priority, Some(1000));
    assert_eq!(created.spec.as_ref().unwrap().preemption_policy.as_deref(), Some("Never"));
    let mut p = pod("crit");
    p.spec.as_mut().unwrap().priority_class_name = Some("system-cluster-critical".into());
    assert_eq!(pods.create(&pp, &p).await.unwrap().spec.unwrap().priority, Some(2_000_000_000));
    // Unknown class refused.
    let mut p = pod("bad");
    p.spec.as_mut().unwrap().priority_class_name = Some("nope".into());
    assert_eq!(api_code(&pods.create(&pp, &p).await.unwrap_err()), 403);
    // A globalDefault class applies when none is named; only one may exist.
    let def: PriorityClass = serde_json::from_value(json!({"metadata": {"name": "def"}, "value": 7, "globalDefault": true})).unwrap();
    pcs.create(&pp, &def).await.unwrap();
    let def2: PriorityClass = serde_json::from_value(json!({"metadata": {"name": "def2"}, "value": 8, "globalDefault": true})).unwrap();
    assert_eq!(api_code(&pcs.create(&pp, &def2).await.unwrap_err()), 422);
    let d = pods.create(&pp, &pod("dflt")).await.unwrap();
    assert_eq!(d.spec.as_ref().unwrap().priority, Some(7));
    assert_eq!(d.spec.as_ref().unwrap().priority_class_name.as_deref(), Some("def"));
    c.shutdown().await;
}

#[tokio::test]
async fn pdb_and_eviction() {
    let c = start().await;
    let client = c.client_without_retry().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();
    let pdb: PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}})).unwrap();
    pdbs.create(&pp, &pdb).await.unwrap();
    for i in 0..4 {
        let mut p = pod(&format!("e{i}"));
        p.spec.as_mut().unwrap().node_name = Some(format!("node-{i}"));
        pods.create(&pp, &p).await.unwrap();
    }
    // 4 healthy, 50% => 2 may be disrupted.
    eventually(5, "condition", || async {
        let s = pdbs.get("web").await.unwrap().status?;
        (s.current_healthy == Some(4) && s.disruptions_allowed == Some(2)).then_some(())
    })
    .await;
    pods.evict("e0", &EvictParams::default()).await.unwrap();
    pods.evict("e1", &EvictParams::default()).await.unwrap();
    let s = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(s.disruptions_allowed, Some(0));
    assert_eq!(s.expected_pods, Some(4));
    let e = pods.evict("e2", &EvictParams::default()).await.unwrap_err();
    assert_eq!(api_code(&e), 429);
    assert_eq!(api_code(&pods.evict("missing", &EvictParams::default()).await.unwrap_err()), 404);
    // The evicted pods go after their grace period; 50% of 2 leaves one disruption.
    // (Both must be gone: e1 may still be terminating, and counted, when e0 is.)
    for name in ["e0", "e1"] {
        eventually(5, "condition", || async { pods.get_opt(name).await.unwrap().is_none().then_some(()) }).await;
    }
    eventually(5, "condition", || async {
        let s = pdbs.get("web").await.unwrap().status?;
        ((s.expected_pods, s.current_healthy, s.disruptions_allowed) == (Some(2), Some(2), Some(1))).then_some(())
    })
    .await;
    c.shutdown().await;
}

#[tokio::test]
async fn bad_requests_get_status_answers() {
    let c = start().await;
    let client = c.client().unwrap();
    let raw = |method: &str, uri: &str, body: &str, ct: &str| {
        axum::http::Request::builder().method(method).uri(uri).header("content-type", ct).body(body.as_bytes().to_vec()).unwrap()
    };
    let code = |r: Result<String, kube::Error>| match r {
        Ok(s) => panic!("expected an error, got {s}"),
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.status, Some(kube::core::response::StatusSummary::Failure));
            (s.code, s.reason)
        }
        Err(e) => panic!("unexpected {e:?}"),
    };
    let json = "application/json";
    let cases: Vec<(&str, &str, &str, &str, u16, &str)> = vec![
        ("POST", "/api/v1/namespaces/default/pods", "{not json", json, 400, "BadRequest"),
        ("POST", "/api/v1/namespaces/default/pods", "", json, 400, "BadRequest"),
        ("POST", "/api/v1/namespaces/default/pods", "[1,2]", json, 400, "BadRequest"),
        ("POST", "/api/v1/namespaces/default/pods", r#"{"metadata":{},"spec":{"containers":[{"name":"c"}]}}"#, json, 422, "Invalid"),
        ("POST", "/api/v1/namespaces/default/pods", r#"{"metadata":{"name":"Bad_Name"},"spec":{"containers":[{"name":"c"}]}}"#, json, 422, "Invalid"),
        ("POST", "/api/v1/namespaces/default/pods", r#"{"metadata":{"name":"x"},"spec":{"containers":[]}}"#, json, 422, "Invalid"),
        ("POST", "/api/v1/namespaces/default/pods", r#"{"kind":"Node","metadata":{"name":"x"}}"#, json, 400, "BadRequest"),
        ("POST", "/api/v1/namespaces/default/pods", r#"{"metadata":{"name":"x","namespace":"other"},"spec":{"containers":[{"name":"c"}]}}"#, json, 400, "BadRequest"),
        ("POST", "/api/v1/namespaces/default/pods", r#"{"metadata":{"name":"x"},"spec":{"containers":"nope"}}"#, json, 400, "BadRequest"),
        ("POST", "/api/v1/namespaces/nosuch/pods", r#"{"metadata":{"name":"x"},"spec":{"containers":[{"name":"c"}]}}"#, json, 404, "NotFound"),
        ("GET", "/api/v1/namespaces/default/widgets", "", json, 404, "NotFound"),
        ("GET", "/apis/nosuch.io/v1/things", "", json, 404, "NotFound"),
        ("GET", "/api/v1/namespaces/default/pods/missing", "", json, 404, "NotFound"),
        ("GET", "/api/v1/namespaces/default/pods/missing/log", "", json, 404, "NotFound"),
        ("PUT", "/api/v1/namespaces/default/pods/a", r#"{"metadata":{"name":"b"},"spec":{"containers":[{"name":"c"}]}}"#, json, 400, "BadRequest"),
        ("PATCH", "/api/v1/namespaces/default/pods/a", "{}", "text/plain", 415, "UnsupportedMediaType"),
        ("PUT", "/api/v1/namespaces/default/pods", "{}", json, 405, "MethodNotAllowed"),
        ("POST", "/api/v1/namespaces/default/pods/missing/binding", r#"{"target":{"name":"node-0"}}"#, json, 404, "NotFound"),
        ("POST", "/api/v1/namespaces/default/pods/missing/binding", r#"{"target":{}}"#, json, 422, "Invalid"),
        ("GET", "/api/v1/namespaces/default/pods?limit=abc", "", json, 400, "BadRequest"),
        ("GET", "/api/v1/namespaces/default/pods?continue=zzzz", "", json, 400, "BadRequest"),
        ("DELETE", "/api/v1/namespaces/default", "", json, 403, "Forbidden"),
    ];
    for (m, u, b, ct, want, reason) in cases {
        let (got, r) = code(client.request_text(raw(m, u, b, ct)).await);
        assert_eq!((got, r.as_str()), (want, reason), "{m} {u} {b}");
    }
    // YAML bodies are accepted when labelled as such.
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: from-yaml\nspec:\n  containers:\n  - name: c\n    image: x\n";
    client.request_text(raw("POST", "/api/v1/namespaces/default/pods", yaml, "application/yaml")).await.unwrap();
    // A watch on a single object (old-style item path) sees only that object.
    client.request_text(raw("POST", "/api/v1/namespaces/default/pods", &yaml.replace("from-yaml", "other"), "application/yaml")).await.unwrap();
    let out = client.request_text(raw("GET", "/api/v1/namespaces/default/pods/from-yaml?watch=true&timeoutSeconds=1", "", json)).await.unwrap();
    assert_eq!(out.lines().filter(|l| l.contains("\"ADDED\"")).count(), 1, "{out}");
    assert!(out.contains("from-yaml") && !out.contains("\"other\""), "{out}");
    // The server is still fine.
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.create(&PostParams::default(), &pod("ok")).await.unwrap();
    c.shutdown().await;
}

#[tokio::test]
async fn stored_kinds_for_scheduler_informers() {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
    use k8s_openapi::api::resource::v1::ResourceClaim;
    use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
    let c = start().await;
    let client = c.client().unwrap();
    let pp = PostParams::default();
    let sc: StorageClass = serde_json::from_value(json!({"metadata": {"name": "fast"}, "provisioner": "x.csi", "volumeBindingMode": "WaitForFirstConsumer"})).unwrap();
    Api::<StorageClass>::all(client.clone()).create(&pp, &sc).await.unwrap();
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({"metadata": {"name": "data"}, "spec": {"storageClassName": "fast",
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})).unwrap();
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    pvcs.create(&pp, &pvc).await.unwrap();
    // The status subresource takes writes (the PV controller then judges a
    // Bound claim without a volume Lost, as a real one does).
    let patched = pvcs.patch_status("data", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Bound"}}))).await.unwrap();
    assert_eq!(patched.status.unwrap().phase.as_deref(), Some("Bound"));
    let rs: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"replicas": 2,
        "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}}})).unwrap();
    Api::<ReplicaSet>::default_namespaced(client.clone()).create(&pp, &rs).await.unwrap();
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})).unwrap();
    Api::<Service>::default_namespaced(client.clone()).create(&pp, &svc).await.unwrap();
    let claim: ResourceClaim = serde_json::from_value(json!({"metadata": {"name": "gpu"}, "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})).unwrap();
    Api::<ResourceClaim>::default_namespaced(client.clone()).create(&pp, &claim).await.unwrap();
    // Every simulated node comes with its CSINode (attach limits).
    assert!(!Api::<CSINode>::all(client.clone()).list(&ListParams::default()).await.unwrap().items.is_empty());
    assert_eq!(Api::<ReplicaSet>::all(client.clone()).list(&ListParams::default()).await.unwrap().items.len(), 1);
    let apps = client.list_api_group_resources("apps/v1").await.unwrap();
    assert!(apps.resources.iter().any(|r| r.name == "statefulsets"));
    c.shutdown().await;
}

/// One Event, two views: what is written through events.k8s.io/v1 is read
/// through core/v1 at the same resourceVersion (fields renamed) and the
/// other way round; selectors, watches, patches and deletes through core/v1
/// act on the one stored object, as on an API server.
#[tokio::test]
async fn core_events_are_a_view_of_events_k8s_io() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event;
    let c = start().await;
    let client = c.client().unwrap();
    let v1: Api<Event> = Api::default_namespaced(client.clone());
    let core: Api<CoreEvent> = Api::default_namespaced(client);
    let mut watch = core.watch(&WatchParams::default().fields("involvedObject.name=p"), "0").await.unwrap().boxed();

    let written: Event = serde_json::from_value(json!({
        "metadata": {"name": "p.1"}, "regarding": {"kind": "Pod", "name": "p", "namespace": "default", "uid": "u-p"},
        "reason": "Scheduled", "note": "assigned", "type": "Normal", "action": "Binding",
        "reportingController": "berth", "reportingInstance": "berth-0", "eventTime": "2026-01-01T00:00:00.000000Z"
    }))
    .unwrap();
    let written = v1.create(&PostParams::default(), &written).await.unwrap();
    let read = core.get("p.1").await.unwrap();
    assert_eq!(read.metadata.resource_version, written.metadata.resource_version);
    assert_eq!(read.involved_object.name.as_deref(), Some("p"));
    assert_eq!(read.message.as_deref(), Some("assigned"));
    assert_eq!(read.reporting_component.as_deref(), Some("berth"));
    let seen = loop {
        match tokio::time::timeout(Duration::from_secs(5), watch.try_next()).await.unwrap().unwrap().unwrap() {
            WatchEvent::Added(e) => break e,
            WatchEvent::Bookmark(_) => continue,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!((seen.metadata.resource_version, seen.message), (written.metadata.resource_version.clone(), Some("assigned".into())));
    // Its bookmarks are core/v1's too (clients decode them as the watched kind).
    let mark = match tokio::time::timeout(Duration::from_secs(5), watch.try_next()).await.unwrap().unwrap().unwrap() {
        WatchEvent::Bookmark(b) => b,
        other => panic!("{other:?}"),
    };
    assert_eq!((mark.types.api_version.as_str(), mark.types.kind.as_str()), ("v1", "Event"));

    // Selectors by core/v1's names, on the stored fields: `source` is the
    // reporting controller when there is no deprecated source.
    let names = |l: kube::core::ObjectList<CoreEvent>| l.items.into_iter().filter_map(|e| e.metadata.name).collect::<Vec<_>>();
    for (sel, want) in [
        ("involvedObject.uid=u-p,reason=Scheduled", vec!["p.1"]),
        ("source=berth,reportingComponent=berth", vec!["p.1"]),
        ("involvedObject.name=q", vec![]),
    ] {
        assert_eq!(names(core.list(&ListParams::default().fields(sel)).await.unwrap()), want, "{sel}");
    }
    assert_eq!(v1.list(&ListParams::default().fields("regarding.uid=u-p")).await.unwrap().items.len(), 1);
    // events.k8s.io/v1 selects by its own names only.
    assert_eq!(api_code(&v1.list(&ListParams::default().fields("source=berth")).await.unwrap_err()), 400);

    // Written through core/v1 (as kubelets and controllers do), read
    // through events.k8s.io/v1.
    let old: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "p.2"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Pulled", "message": "image pulled", "type": "Normal", "source": {"component": "kubelet", "host": "node-1"},
        "count": 1, "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"
    }))
    .unwrap();
    core.create(&PostParams::default(), &old).await.unwrap();
    let as_v1 = v1.get("p.2").await.unwrap();
    assert_eq!(as_v1.note.as_deref(), Some("image pulled"));
    assert_eq!(as_v1.deprecated_source.as_ref().and_then(|s| s.host.as_deref()), Some("node-1"));
    assert_eq!(as_v1.deprecated_count, Some(1));
    assert_eq!(as_v1.regarding.as_ref().and_then(|r| r.name.as_deref()), Some("p"));
    assert_eq!(names(core.list(&ListParams::default().fields("source=kubelet")).await.unwrap()), vec!["p.2"]);

    // Patches in core/v1's terms: merge and JSON patch.
    core.patch("p.2", &PatchParams::default(), &Patch::Merge(json!({"count": 3, "lastTimestamp": "2026-01-01T00:01:00Z"}))).await.unwrap();
    let ops: json_patch::Patch = serde_json::from_value(json!([{"op": "replace", "path": "/message", "value": "pulled again"}])).unwrap();
    let patched = core.patch("p.2", &PatchParams::default(), &Patch::<()>::Json(ops)).await.unwrap();
    assert_eq!((patched.count, patched.message.as_deref()), (Some(3), Some("pulled again")));
    let as_v1 = v1.get("p.2").await.unwrap();
    assert_eq!((as_v1.deprecated_count, as_v1.note.as_deref()), (Some(3), Some("pulled again")));
    assert_eq!(as_v1.metadata.resource_version, patched.metadata.resource_version);

    // Deleted through one, gone from both.
    core.delete("p.1", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(&v1.get("p.1").await.unwrap_err()), 404);
    assert_eq!(v1.list(&ListParams::default()).await.unwrap().items.len(), 1);
}

/// The core/v1 Event view takes every body a client sends in core/v1's
/// terms (YAML, strategic merge, server-side apply) and shows watches as
/// tables, as `kubectl get events -w` asks for them.
#[tokio::test]
async fn core_event_view_takes_yaml_strategic_and_apply_bodies_and_watches_as_tables() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event;
    let c = start().await;
    let client = c.client().unwrap();
    let v1: Api<Event> = Api::default_namespaced(client.clone());
    let core: Api<CoreEvent> = Api::default_namespaced(client.clone());
    let request = |method: &str, uri: &str, body: &str, headers: &[(&str, &str)]| {
        let mut b = axum::http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(body.as_bytes().to_vec()).unwrap()
    };
    let events = "/api/v1/namespaces/default/events";

    // A YAML body in core/v1's names.
    let yaml = "apiVersion: v1\nkind: Event\nmetadata:\n  name: w.1\ninvolvedObject:\n  kind: Pod\n  name: web\n  namespace: default\nreason: Pulled\nmessage: from yaml\ntype: Normal\nsource:\n  component: kubelet\ncount: 2\n";
    client.request_text(request("POST", events, yaml, &[("content-type", "application/yaml")])).await.unwrap();
    let as_v1 = v1.get("w.1").await.unwrap();
    assert_eq!((as_v1.note.as_deref(), as_v1.deprecated_count), (Some("from yaml"), Some(2)));
    assert_eq!(as_v1.regarding.as_ref().and_then(|r| r.name.as_deref()), Some("web"));

    // A strategic merge patch, then a server-side apply, in core/v1's names.
    core.patch("w.1", &PatchParams::default(), &Patch::Strategic(json!({"message": "strategic", "count": 3}))).await.unwrap();
    let as_v1 = v1.get("w.1").await.unwrap();
    assert_eq!((as_v1.note.as_deref(), as_v1.deprecated_count), (Some("strategic"), Some(3)));
    let applied = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "w.1"}, "message": "applied", "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"}});
    let got = core.patch("w.1", &PatchParams::apply("tester").force(), &Patch::Apply(applied)).await.unwrap();
    assert_eq!(got.message.as_deref(), Some("applied"));
    let as_v1 = v1.get("w.1").await.unwrap();
    assert_eq!(as_v1.note.as_deref(), Some("applied"));
    // Each managedFields entry names its fields as its own apiVersion does,
    // whichever group reads it (the API server keeps entries per version).
    let fields = |e: &Event, manager: &str| {
        let entry = e.metadata.managed_fields.iter().flatten().find(|m| m.manager.as_deref() == Some(manager)).unwrap_or_else(|| panic!("{manager}: {:?}", e.metadata.managed_fields));
        (entry.api_version.clone(), serde_json::to_value(&entry.fields_v1).unwrap())
    };
    let (version, set) = fields(&as_v1, "tester");
    assert_eq!(version.as_deref(), Some("v1"));
    assert!(set["f:message"].is_object() && set["f:involvedObject"]["f:name"].is_object() && set.get("f:note").is_none(), "{set}");
    let as_core = serde_json::to_value(core.get("w.1").await.unwrap().metadata.managed_fields).unwrap();
    assert_eq!(as_core, serde_json::to_value(&as_v1.metadata.managed_fields).unwrap());
    // Written through events.k8s.io, an entry keeps that group's names;
    // the core/v1 applier still owns its fields (both views track one set).
    v1.patch("w.1", &PatchParams::apply("recorder").force(), &Patch::Apply(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "w.1"}, "note": "recorded"}))).await.unwrap();
    let as_v1 = v1.get("w.1").await.unwrap();
    let (version, set) = fields(&as_v1, "recorder");
    assert_eq!((version.as_deref(), set["f:note"].is_object()), (Some("events.k8s.io/v1"), true), "{set}");
    let (_, set) = fields(&as_v1, "tester");
    assert!(set.get("f:message").is_none() && set["f:involvedObject"].is_object(), "the forced apply took message from tester: {set}");
    let conflict = core.patch("w.1", &PatchParams::apply("tester"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "w.1"}, "message": "mine", "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"}}))).await;
    assert_eq!(api_code(&conflict.unwrap_err()), 409);
    core.patch("w.1", &PatchParams::apply("tester").force(), &Patch::Apply(json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "w.1"}, "message": "applied", "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"}}))).await.unwrap();

    // A watch as tables: core/v1's columns, rows of core/v1 objects.
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let out = client
        .request_text(request("GET", &format!("{events}?watch=true&timeoutSeconds=1&includeObject=Object"), "", &[("accept", table)]))
        .await
        .unwrap();
    let added: Vec<serde_json::Value> = out.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).filter(|e| e["type"] == "ADDED").collect();
    assert_eq!(added.len(), 1, "{out}");
    let t = &added[0]["object"];
    assert_eq!((t["kind"].as_str(), t["apiVersion"].as_str()), (Some("Table"), Some("meta.k8s.io/v1")), "{t}");
    let columns: Vec<&str> = t["columnDefinitions"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    assert!(columns.contains(&"Message") && columns.contains(&"Last Seen"), "{columns:?}");
    let row = &t["rows"][0];
    assert!(row["cells"].as_array().into_iter().flatten().any(|c| c == "applied"), "{row}");
    assert_eq!((row["object"]["apiVersion"].as_str(), row["object"]["message"].as_str()), (Some("v1"), Some("applied")), "{row}");
    assert!(row["object"].get("note").is_none(), "{row}");
    assert!(row["object"]["metadata"]["managedFields"].is_array(), "{row}");
    // By default a row carries the object's metadata (its managedFields as
    // the list); `None` carries nothing; anything else is refused.
    let list = |include: &str| request("GET", &format!("{events}?includeObject={include}"), "", &[("accept", table)]);
    let t: serde_json::Value = serde_json::from_str(&client.request_text(list("Metadata")).await.unwrap()).unwrap();
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata", "{t}");
    assert!(t["rows"][0]["object"]["metadata"]["managedFields"].is_array(), "{t}");
    let t: serde_json::Value = serde_json::from_str(&client.request_text(list("None")).await.unwrap()).unwrap();
    assert!(t["rows"][0]["object"].is_null() && t["rows"][0]["cells"].is_array(), "{t}");
    match client.request_text(list("Everything")).await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!((s.code, s.message.as_str()), (400, "includeObject: Invalid value: \"Everything\": must be 'Metadata', 'Object', 'None', or empty")),
        other => panic!("{other:?}"),
    }
    // A resource served from its own store (pods) too: the store keeps
    // managedFields as text, which no row shows.
    Api::<Pod>::default_namespaced(client.clone()).create(&PostParams::default(), &pod("tabled")).await.unwrap();
    let pods = |include: &str| request("GET", &format!("/api/v1/namespaces/default/pods?includeObject={include}"), "", &[("accept", table)]);
    let t: serde_json::Value = serde_json::from_str(&client.request_text(pods("Metadata")).await.unwrap()).unwrap();
    assert!(t["rows"][0]["object"]["metadata"]["managedFields"].is_array(), "{t}");
    let t: serde_json::Value = serde_json::from_str(&client.request_text(pods("Object")).await.unwrap()).unwrap();
    let o = &t["rows"][0]["object"];
    assert_eq!((o["kind"].as_str(), o["metadata"]["name"].as_str()), (Some("Pod"), Some("tabled")), "{t}");
    assert!(o["metadata"]["managedFields"].is_array() && o["spec"]["containers"].is_array(), "{t}");
    c.shutdown().await;
}
