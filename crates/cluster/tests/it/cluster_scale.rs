//! The scale subresource (autoscaling/v1 Scale) of Deployments,
//! ReplicaSets, StatefulSets and of custom resources that declare one:
//! over HTTP (GET, PUT, PATCH, preconditions, validation) and through
//! `kubectl scale`.
#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use crate::cluster_kubectl::{kubectl, temp_dir};
use crate::cluster_validation::call;
use crate::support::eventually;

fn workload(kind: &str, name: &str, replicas: i64) -> Value {
    let mut v = json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": {"replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    if kind == "StatefulSet" {
        v["spec"]["serviceName"] = json!(name);
        // No scheduler runs here: pods are created, never ready.
        v["spec"]["podManagementPolicy"] = json!("Parallel");
    }
    v
}

const WIDGETS_CRD: &str = r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
  "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
        "status": {"type": "object", "properties": {"count": {"type": "integer"}, "sel": {"type": "string"}}}}}},
      "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.count", "labelSelectorPath": ".status.sel"}}}]}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn scale_subresource_over_http_and_kubectl() {
    let c = crate::support::cluster_with_controllers(2, 1, "8", 110).await;
    let addr = &c;
    let apps = "/apis/apps/v1/namespaces/default";
    for (kind, plural) in [("Deployment", "deployments"), ("ReplicaSet", "replicasets"), ("StatefulSet", "statefulsets")] {
        let name = format!("{}-x", kind.to_lowercase());
        let (code, v) = call(addr, "POST", &format!("{apps}/{plural}"), "application/json", &workload(kind, &name, 1).to_string()).await;
        assert_eq!(code, 201, "{v}");
        let path = format!("{apps}/{plural}/{name}/scale");
        let (code, scale) = call(addr, "GET", &path, "application/json", "").await;
        assert_eq!(code, 200, "{scale}");
        assert_eq!((scale["kind"].as_str(), scale["apiVersion"].as_str()), (Some("Scale"), Some("autoscaling/v1")));
        assert_eq!(scale["spec"]["replicas"], 1);
        assert_eq!(scale["status"]["selector"], format!("app={name}"));
        // PUT with the current resourceVersion (read again while the
        // controller's status writes move it), then again with the stale one.
        let put = eventually(10, "a PUT of the scale", || async {
            let (_, mut put) = call(addr, "GET", &path, "application/json", "").await;
            put["spec"]["replicas"] = json!(2);
            let (code, v) = call(addr, "PUT", &path, "application/json", &put.to_string()).await;
            assert!(code == 200 || code == 409, "{v}");
            (code == 200).then(|| {
                assert_eq!(v["spec"]["replicas"], 2);
                put
            })
        })
        .await;
        let (code, v) = call(addr, "PUT", &path, "application/json", &put.to_string()).await;
        assert_eq!((code, v["reason"].as_str()), (409, Some("Conflict")), "{v}");
        // PATCH (merge) and validation.
        let (code, v) = call(addr, "PATCH", &path, "application/merge-patch+json", r#"{"spec":{"replicas":3}}"#).await;
        assert_eq!((code, v["spec"]["replicas"].as_i64()), (200, Some(3)), "{v}");
        let (code, v) = call(addr, "PATCH", &path, "application/merge-patch+json", r#"{"spec":{"replicas":-1}}"#).await;
        assert_eq!(code, 422, "{v}");
        assert_eq!(v["message"], format!("Scale.autoscaling \"{name}\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"));
        let (code, obj) = call(addr, "GET", &format!("{apps}/{plural}/{name}"), "application/json", "").await;
        assert_eq!((code, obj["spec"]["replicas"].as_i64()), (200, Some(3)));
        // The controller brings status.replicas, which the Scale shows, to 3.
        eventually(30, &format!("{kind} reaches 3 replicas"), || async {
            let (_, s) = call(addr, "GET", &path, "application/json", "").await;
            (s["status"]["replicas"] == 3).then_some(())
        })
        .await;
    }
    // Discovery names the subresource's kind and group, as upstream does.
    let (_, list) = call(addr, "GET", "/apis/apps/v1", "application/json", "").await;
    let entry = list["resources"].as_array().unwrap().iter().find(|r| r["name"] == "deployments/scale").cloned().unwrap();
    assert_eq!((entry["kind"].as_str(), entry["group"].as_str(), entry["version"].as_str()), (Some("Scale"), Some("autoscaling"), Some("v1")));

    // A custom resource with subresources.scale.
    let (code, v) = call(addr, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json", WIDGETS_CRD).await;
    assert_eq!(code, 201, "{v}");
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    eventually(10, "widgets served", || async { (call(addr, "GET", widgets, "application/json", "").await.0 == 200).then_some(()) }).await;
    let (code, v) = call(addr, "POST", widgets, "application/json", r#"{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}}"#).await;
    assert_eq!(code, 201, "{v}");
    let (code, v) = call(addr, "PATCH", &format!("{widgets}/w/status"), "application/merge-patch+json", r#"{"status": {"count": 1, "sel": "app=w"}}"#).await;
    assert_eq!(code, 200, "{v}");
    let (code, scale) = call(addr, "GET", &format!("{widgets}/w/scale"), "application/json", "").await;
    assert_eq!(code, 200, "{scale}");
    assert_eq!((scale["spec"]["replicas"].as_i64(), scale["status"]["replicas"].as_i64(), scale["status"]["selector"].as_str()), (Some(1), Some(1), Some("app=w")));

    let dir = temp_dir();
    let kc = dir.join("kubeconfig");
    c.write_kubeconfig(&kc).unwrap();
    for (target, path) in [
        ("deployment/deployment-x", format!("{apps}/deployments/deployment-x")),
        ("rs/replicaset-x", format!("{apps}/replicasets/replicaset-x")),
        ("statefulset/statefulset-x", format!("{apps}/statefulsets/statefulset-x")),
        ("widget/w", format!("{widgets}/w")),
    ] {
        let (ok, out) = kubectl(&kc, &["scale", target, "--replicas=5"]).await;
        assert!(ok && out.contains("scaled"), "{target}: {out}");
        let (_, obj) = call(addr, "GET", &path, "application/json", "").await;
        let replicas = if target.starts_with("widget") { &obj["spec"]["size"] } else { &obj["spec"]["replicas"] };
        assert_eq!(replicas, 5, "{target}: {obj}");
    }
    // Server-side printer columns, as kube-apiserver's (`get -o wide`).
    for (what, header) in [
        ("deployments", "NAME           READY   UP-TO-DATE   AVAILABLE   AGE   CONTAINERS   IMAGES   SELECTOR"),
        ("rs", "NAME           DESIRED   CURRENT   READY   AGE   CONTAINERS   IMAGES   SELECTOR"),
        ("statefulsets", "NAME            READY   AGE   CONTAINERS   IMAGES"),
    ] {
        let (ok, out) = kubectl(&kc, &["get", what, "-o", "wide"]).await;
        assert!(ok, "{out}");
        let columns: Vec<&str> = out.lines().next().unwrap_or("").split_whitespace().collect();
        assert_eq!(columns, header.split_whitespace().collect::<Vec<_>>(), "{out}");
    }
    let (ok, out) = kubectl(&kc, &["get", "rs", "replicaset-x", "-o", "wide", "--no-headers"]).await;
    assert!(ok && out.split_whitespace().collect::<Vec<_>>()[..4] == ["replicaset-x", "5", "5", "0"] && out.contains("app=replicaset-x"), "{out}");
    // --current-replicas is a precondition kubectl checks against the Scale.
    let (ok, out) = kubectl(&kc, &["scale", "deployment/deployment-x", "--current-replicas=2", "--replicas=1"]).await;
    assert!(!ok && out.contains("Expected replicas to be 2, was 5"), "{out}");
    c.shutdown().await;
}
