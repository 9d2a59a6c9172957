//! Pod lifecycle in the local cluster, as Kubernetes documents it:
//! graceful namespace deletion, finalizers, grace periods, readiness
//! gates, terminating pods turning NotReady, PodGC, and the API
//! validations a scheduler meets.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_cluster::{ClusterConfig, KubeletConfig, LocalCluster, PodGcConfig};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use super::support::{eventually, api_err};

async fn start() -> LocalCluster {
    let cfg = ClusterConfig {
        nodes: 3,
        kubelet: KubeletConfig { enabled: true, start_delay: Duration::from_millis(20) },
        podgc: PodGcConfig { enabled: true, quarantine: Duration::from_millis(300), period: Duration::from_millis(100) },
        ..Default::default()
    };
    LocalCluster::start(cfg).await.unwrap()
}

/// A pod; `node` binds it at creation, `grace` is its terminationGracePeriodSeconds.
fn pod(name: &str, node: Option<&str>, grace: i64, extra: Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}], "terminationGracePeriodSeconds": grace}
    });
    if let Some(n) = node {
        v["spec"]["nodeName"] = json!(n);
    }
    json_patch::merge(&mut v, &extra);
    serde_json::from_value(v).unwrap()
}



fn condition(p: &Pod, ty: &str) -> Option<(String, Option<String>)> {
    let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == ty)?;
    Some((c.status.clone(), c.reason.clone()))
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    eventually(5, "condition", || async {
        let p = pods.get(name).await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
    })
    .await
}

#[tokio::test]
async fn namespace_deletion_is_graceful_and_refuses_new_content() {
    let c = start().await;
    let client = c.client().unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "doomed");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    pods.create(&PostParams::default(), &pod("runner", Some("node-0"), 2, json!({}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("pending", None, 30, json!({}))).await.unwrap();
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "cfg"}})).unwrap()).await.unwrap();
    running(&pods, "runner").await;

    nss.delete("doomed", &DeleteParams::default()).await.unwrap();
    let ns = nss.get("doomed").await.unwrap();
    assert!(ns.metadata.deletion_timestamp.is_some());
    assert_eq!(ns.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Terminating"));
    // The running pod gets its grace period; the rest goes at once.
    let runner = pods.get("runner").await.unwrap();
    assert_eq!(runner.metadata.deletion_grace_period_seconds, Some(2));
    assert_eq!(api_err(pods.get("pending").await.unwrap_err()).code, 404);
    assert_eq!(api_err(cms.get("cfg").await.unwrap_err()).code, 404);
    // New content is refused as the NamespaceLifecycle admission does.
    let e = api_err(cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "late"}})).unwrap()).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(e.message, "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated");
    // Once the pod is gone, so is the namespace.
    eventually(6, "condition", || async { nss.get("doomed").await.is_err().then_some(()) }).await;
    assert_eq!(api_err(pods.get("runner").await.unwrap_err()).code, 404);
    c.shutdown().await;
}

#[tokio::test]
async fn pod_finalizers_hold_deletion() {
    let c = start().await;
    let pods: Api<Pod> = Api::default_namespaced(c.client().unwrap());
    let hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    pods.create(&PostParams::default(), &pod("bound", Some("node-1"), 1, hold.clone())).await.unwrap();
    pods.create(&PostParams::default(), &pod("unbound", None, 30, hold)).await.unwrap();
    running(&pods, "bound").await;

    // Not bound: no grace period, but the finalizer holds it.
    pods.delete("unbound", &DeleteParams::default()).await.unwrap();
    let p = pods.get("unbound").await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(0));

    // Bound: after its grace period the kubelet is done, the object stays.
    pods.delete("bound", &DeleteParams::default()).await.unwrap();
    let p = eventually(5, "condition", || async {
        let p = pods.get("bound").await.ok()?;
        (p.metadata.deletion_grace_period_seconds == Some(0)).then_some(p)
    })
    .await;
    assert!(p.metadata.deletion_timestamp.is_some());
    assert_eq!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded"));

    // Removing the finalizer lets both go.
    for name in ["bound", "unbound"] {
        pods.patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
        assert_eq!(api_err(pods.get(name).await.unwrap_err()).code, 404, "{name}");
    }
    c.shutdown().await;
}

#[tokio::test]
async fn negative_grace_period_means_one_second() {
    let c = start().await;
    let client = c.client().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pod("p", Some("node-0"), 30, json!({}))).await.unwrap();
    running(&pods, "p").await;
    // kube-rs cannot send a negative grace period: a raw request can.
    let req = axum::http::Request::delete("/api/v1/namespaces/default/pods/p?gracePeriodSeconds=-5").body(Vec::new()).unwrap();
    let body = client.request_text(req).await.unwrap();
    let deleted: Pod = serde_json::from_str(&body).unwrap();
    assert_eq!(deleted.metadata.deletion_grace_period_seconds, Some(1));
    assert!(pods.get("p").await.is_ok(), "still there for its one second");
    eventually(4, "condition", || async { pods.get("p").await.is_err().then_some(()) }).await;
    c.shutdown().await;
}

#[tokio::test]
async fn readiness_gates_and_terminating_pods_drive_ready_and_pdbs() {
    let c = start().await;
    let client = c.client().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})).unwrap(),
    )
    .await
    .unwrap();
    let gate = json!({"spec": {"readinessGates": [{"conditionType": "example.com/lb"}]}});
    for (name, node) in [("g0", "node-0"), ("g1", "node-1")] {
        pods.create(&PostParams::default(), &pod(name, Some(node), 5, gate.clone())).await.unwrap();
    }
    let p = running(&pods, "g0").await;
    running(&pods, "g1").await;
    // Running, containers ready, but the gate's condition is missing: not Ready.
    assert_eq!(condition(&p, "ContainersReady").map(|c| c.0).as_deref(), Some("True"));
    assert_eq!(condition(&p, "Ready"), Some(("False".into(), Some("ReadinessGatesNotReady".into()))));
    let msg = p.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Ready").unwrap().message.clone();
    assert_eq!(msg.as_deref(), Some("corresponding condition of pod readiness gate \"example.com/lb\" does not exist."));
    let pdb = pdbs.get("web").await.unwrap();
    assert_eq!(pdb.status.as_ref().map(|s| (s.current_healthy, s.disruptions_allowed)), Some((Some(0), Some(0))));

    // The gate's owner sets its condition: Ready, and the budget counts them.
    for name in ["g0", "g1"] {
        let cond = json!({"status": {"conditions": [{"type": "example.com/lb", "status": "True"}]}});
        let p = pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(cond)).await.unwrap();
        assert_eq!(condition(&p, "Ready").map(|c| c.0).as_deref(), Some("True"), "{name}");
    }
    let pdb = pdbs.get("web").await.unwrap();
    assert_eq!(pdb.status.as_ref().map(|s| (s.current_healthy, s.disruptions_allowed)), Some((Some(2), Some(1))));

    // A terminating pod turns NotReady at once, long before its grace period ends.
    pods.delete("g0", &DeleteParams::default()).await.unwrap();
    let p = eventually(2, "condition", || async {
        let p = pods.get("g0").await.ok()?;
        (condition(&p, "ContainersReady").map(|c| c.0).as_deref() == Some("False")).then_some(p)
    })
    .await;
    assert_eq!(condition(&p, "Ready"), Some(("False".into(), Some("ContainersNotReady".into()))));
    let pdb = pdbs.get("web").await.unwrap();
    assert_eq!(pdb.status.as_ref().map(|s| (s.current_healthy, s.disruptions_allowed)), Some((Some(1), Some(0))));
    c.shutdown().await;
}

#[tokio::test]
async fn deleted_nodes_pods_are_garbage_collected() {
    let c = start().await;
    let client = c.client().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pod("orphan", Some("node-2"), 30, json!({}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("stays", Some("node-1"), 30, json!({}))).await.unwrap();
    let p = running(&pods, "orphan").await;
    let rv = p.metadata.resource_version.clone().unwrap();
    let mut events = pods.watch(&WatchParams::default().fields("metadata.name=orphan"), &rv).await.unwrap().boxed();

    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    nodes.delete("node-2", &DeleteParams::default()).await.unwrap();
    // The node's CSINode goes with it (owner reference).
    let csinodes: Api<CSINode> = Api::all(client.clone());
    assert_eq!(api_err(csinodes.get("node-2").await.unwrap_err()).code, 404);

    // PodGC: Failed with DisruptionTarget/DeletionByPodGC, then deleted without grace.
    let mut failed = None;
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), events.try_next()).await.unwrap().unwrap().unwrap();
        match ev {
            WatchEvent::Modified(p) if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed") => {
                failed = Some(p);
            }
            WatchEvent::Deleted(_) => break,
            _ => {}
        }
    }
    let failed = failed.expect("the pod went Failed before its deletion");
    let dt = failed.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "DisruptionTarget").unwrap();
    assert_eq!((dt.status.as_str(), dt.reason.as_deref(), dt.message.as_deref()), ("True", Some("DeletionByPodGC"), Some("PodGC: node no longer exists")));
    assert_eq!(api_err(pods.get("orphan").await.unwrap_err()).code, 404);
    assert!(pods.get("stays").await.is_ok(), "pods of live nodes stay");
    c.shutdown().await;
}

#[tokio::test]
async fn priority_classes_above_one_billion_are_refused() {
    let c = start().await;
    let pcs: Api<PriorityClass> = Api::all(c.client().unwrap());
    let pc = |name: &str, value: i64| serde_json::from_value::<PriorityClass>(json!({"metadata": {"name": name}, "value": value})).unwrap();
    let e = api_err(pcs.create(&PostParams::default(), &pc("too-high", 1_000_000_001)).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "PriorityClass.scheduling.k8s.io \"too-high\" is invalid: value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
    );
    pcs.create(&PostParams::default(), &pc("highest", 1_000_000_000)).await.unwrap();
    let e = api_err(pcs.create(&PostParams::default(), &pc("system-mine", 5)).await.unwrap_err());
    assert_eq!(e.code, 422);
    assert!(e.message.ends_with("metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"), "{}", e.message);
    c.shutdown().await;
}

#[tokio::test]
async fn scheduling_gates_can_only_be_removed() {
    let c = start().await;
    let pods: Api<Pod> = Api::default_namespaced(c.client().unwrap());
    pods.create(&PostParams::default(), &pod("gated", None, 30, json!({"spec": {"schedulingGates": [{"name": "g1"}]}}))).await.unwrap();
    let add = json!({"spec": {"schedulingGates": [{"name": "g1"}, {"name": "g2"}]}});
    let e = api_err(pods.patch("gated", &PatchParams::default(), &Patch::Merge(add)).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(e.message, "Pod \"gated\" is invalid: spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'g2'");
    let p = pods.patch("gated", &PatchParams::default(), &Patch::Merge(json!({"spec": {"schedulingGates": null}}))).await.unwrap();
    assert!(p.spec.unwrap().scheduling_gates.is_none_or(|g| g.is_empty()));
    // Gates may not be added back, and a gated pod cannot be created bound.
    let e = api_err(pods.patch("gated", &PatchParams::default(), &Patch::Merge(json!({"spec": {"schedulingGates": [{"name": "g1"}]}}))).await.unwrap_err());
    assert_eq!(e.code, 422);
    let e = api_err(
        pods.create(&PostParams::default(), &pod("bound-gated", Some("node-0"), 30, json!({"spec": {"schedulingGates": [{"name": "g"}]}}))).await.unwrap_err(),
    );
    assert_eq!(e.message, "Pod \"bound-gated\" is invalid: spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared");
    c.shutdown().await;
}
