//! Server-side apply on the local cluster: managedFields, conflicts,
//! force, removal of fields no longer applied, dryRun; over raw HTTP (the
//! exact answers) and with kubectl (skipped, with a message, when kubectl
//! is not installed; CI installs it).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use berth_cluster::{ClusterConfig, LocalCluster};
use serde_json::{Value, json};

use crate::cluster_kubectl::{kubectl, temp_dir};
use crate::support::dechunk;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";
const DEPLOY: &str = "/apis/apps/v1/namespaces/default/deployments";

/// One HTTP/1.1 request: (status, JSON body).
async fn req(c: &LocalCluster, method: &str, path: &str, ct: &str, body: &Value) -> (u16, Value) {
    let body = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
    let mut s = c.connect().await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {}\r\nUser-Agent: apply-test/1.0 (linux)\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n\r\n",
        c.admin_token(),
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body).await.unwrap();
    let mut out = Vec::new();
    // A TLS peer may close without close_notify: keep what came.
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out)).await.unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let rest = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(rest) } else { rest.to_string() };
    (code, serde_json::from_str(&rest).unwrap_or(Value::Null))
}

fn deployment(replicas: i64, labels: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"schedulerName": "nobody",
                "containers": [{"name": "app", "image": "nginx", "ports": [{"containerPort": 80}]}]}}}})
}

/// The managedFields entries as (manager, operation, subresource).
fn managers(obj: &Value) -> Vec<(String, String, String)> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| {
                    let s = |f: &str| e.get(f).and_then(Value::as_str).unwrap_or("").to_string();
                    (s("manager"), s("operation"), s("subresource"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn entry<'a>(obj: &'a Value, manager: &str) -> &'a Value {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|e| e["manager"] == manager))
        .unwrap_or_else(|| panic!("no entry of {manager}: {obj}"))
}

#[tokio::test]
async fn apply_ownership_conflicts_force_and_removal() {
    let c = LocalCluster::start(ClusterConfig { nodes: 1, ..Default::default() }).await.unwrap();
    let addr = &c;
    let item = format!("{DEPLOY}/web");

    // Apply names its manager (as upstream's PatchOptions validation).
    let (code, body) = req(addr, "PATCH", &item, APPLY, &deployment(2, json!({"app": "web"}))).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["message"], "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch");
    let (code, body) = req(addr, "PATCH", &format!("{item}?force=true"), MERGE, &json!({"spec": {"replicas": 1}})).await;
    assert_eq!(code, 422, "{body}");

    // Apply creates, owned by the applier in upstream's FieldsV1 format.
    let (code, d) = req(addr, "PATCH", &format!("{item}?fieldManager=alice"), APPLY, &deployment(2, json!({"app": "web", "tier": "x"}))).await;
    assert_eq!(code, 201, "{d}");
    assert_eq!(managers(&d), [("alice".to_string(), "Apply".to_string(), String::new())]);
    let f = &entry(&d, "alice")["fieldsV1"];
    assert_eq!(entry(&d, "alice")["fieldsType"], "FieldsV1");
    assert_eq!(entry(&d, "alice")["apiVersion"], "apps/v1");
    assert_eq!(f["f:metadata"]["f:labels"], json!({"f:app": {}, "f:tier": {}}));
    assert_eq!(f["f:spec"]["f:selector"], json!({}));
    let container = &f["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"];
    assert_eq!(container["."], json!({}));
    assert_eq!(container["f:ports"]["k:{\"containerPort\":80,\"protocol\":\"TCP\"}"]["f:containerPort"], json!({}));

    // Another manager (an Update named by the User-Agent) takes replicas.
    let (code, d) = req(addr, "PATCH", &item, MERGE, &json!({"spec": {"replicas": 5}})).await;
    assert_eq!(code, 200, "{d}");
    assert!(managers(&d).contains(&("apply-test".into(), "Update".into(), String::new())), "{:?}", managers(&d));
    assert_eq!(entry(&d, "apply-test")["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    assert!(entry(&d, "alice")["fieldsV1"]["f:spec"].get("f:replicas").is_none(), "replicas moved to the updater: {d}");

    // alice applying another value conflicts, as upstream reports it.
    let (code, body) = req(addr, "PATCH", &format!("{item}?fieldManager=bob"), APPLY, &deployment(3, json!({"app": "web"}))).await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["reason"], "Conflict");
    assert_eq!(body["message"], "Apply failed with 1 conflict: conflict with \"apply-test\" using apps/v1: .spec.replicas");
    assert_eq!(body["details"]["causes"], json!([{"type": "FieldManagerConflict", "message": "conflict with \"apply-test\" using apps/v1", "field": ".spec.replicas"}]));

    // The same value is shared ownership, no conflict.
    let (code, d) = req(addr, "PATCH", &format!("{item}?fieldManager=bob"), APPLY, &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 5}})).await;
    assert_eq!(code, 200, "{d}");
    assert_eq!(entry(&d, "bob")["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    assert_eq!(entry(&d, "apply-test")["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));

    // dryRun answers the result and stores nothing.
    let (code, d) = req(addr, "PATCH", &format!("{item}?fieldManager=alice&force=true&dryRun=All"), APPLY, &deployment(7, json!({"app": "web"}))).await;
    assert_eq!(code, 200, "{d}");
    assert_eq!(d["spec"]["replicas"], 7);
    let (_, live) = req(addr, "GET", &item, "application/json", &Value::Null).await;
    assert_eq!(live["spec"]["replicas"], 5);
    assert_eq!(live["metadata"]["labels"]["tier"], "x");

    // force takes ownership from both; the label alice stopped applying goes.
    let (code, d) = req(addr, "PATCH", &format!("{item}?fieldManager=alice&force=true"), APPLY, &deployment(7, json!({"app": "web"}))).await;
    assert_eq!(code, 200, "{d}");
    assert_eq!(d["spec"]["replicas"], 7);
    assert_eq!(d["metadata"]["labels"], json!({"app": "web"}));
    let names: Vec<String> = managers(&d).into_iter().map(|m| m.0).collect();
    assert_eq!(names, ["alice"], "the others owned only replicas: {d}");

    // A field another applier owns stays when this one drops it.
    let (code, _) = req(addr, "PATCH", &format!("{item}?fieldManager=carol"), APPLY,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}}})).await;
    assert_eq!(code, 200);
    let (code, d) = req(addr, "PATCH", &format!("{item}?fieldManager=alice"), APPLY, &deployment(7, json!({}))).await;
    assert_eq!(code, 200, "{d}");
    assert_eq!(d["metadata"]["labels"], json!({"app": "web"}), "carol still applies it");

    // Re-applying the same configuration changes nothing.
    // (The Deployment controller may write status in between, so compare
    // what the apply owns, not the resourceVersion.)
    let (_, again) = req(addr, "PATCH", &format!("{item}?fieldManager=alice"), APPLY, &deployment(7, json!({}))).await;
    assert_eq!(again["metadata"]["managedFields"], d["metadata"]["managedFields"], "{again}");
    assert_eq!(again["metadata"]["generation"], d["metadata"]["generation"]);
    assert_eq!(again["spec"], d["spec"]);

    // Status writes are recorded against the status subresource.
    let (code, d) = req(addr, "PATCH", &format!("{item}/status?fieldManager=ctl"), MERGE, &json!({"status": {"observedGeneration": 42}})).await;
    assert_eq!(code, 200, "{d}");
    assert!(managers(&d).contains(&("ctl".into(), "Update".into(), "status".into())), "{:?}", managers(&d));

    // managedFields is a list: a request cannot pass anything else for it
    // (the store keeps its own as text), by update or by any patch.
    let want = r#"Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field ObjectMeta.metadata.managedFields of type []v1.ManagedFieldsEntry"#;
    let mut put = d.clone();
    put["metadata"]["managedFields"] = json!("[]");
    for (method, ct, body) in [
        ("PUT", "application/json", put),
        ("PATCH", MERGE, json!({"metadata": {"managedFields": "x"}})),
        ("PATCH", "application/strategic-merge-patch+json", json!({"metadata": {"managedFields": "x"}})),
        ("PATCH", "application/json-patch+json", json!([{"op": "replace", "path": "/metadata/managedFields", "value": "x"}])),
    ] {
        let (code, body) = req(addr, method, &item, ct, &body).await;
        assert_eq!((code, body["message"].as_str()), (400, Some(want)), "{method} {ct}: {body}");
    }
    let (code, _) = req(addr, "GET", &item, MERGE, &Value::Null).await;
    assert_eq!(code, 200);
    c.shutdown().await;
}

/// A Deployment, a StatefulSet, a Job and a DaemonSet (no scheduler picks
/// their pods up: `schedulerName: nobody`).
pub(crate) const WORKLOADS: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, tier: front}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      schedulerName: nobody
      containers: [{name: app, image: nginx}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 1
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      schedulerName: nobody
      containers: [{name: db, image: postgres}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  template:
    spec:
      schedulerName: nobody
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      schedulerName: nobody
      containers: [{name: a, image: busybox}]
"#;

#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_server_side_apply() {
    let c = LocalCluster::start(ClusterConfig { nodes: 2, ..Default::default() }).await.unwrap();
    let dir = temp_dir();
    let kc = dir.join("kubeconfig");
    c.write_kubeconfig(&kc).unwrap();
    let cache = dir.join("cache");
    let kube = |args: Vec<String>| {
        let kc = kc.clone();
        let cache = cache.clone();
        async move {
            let mut all = vec!["--cache-dir".to_string(), cache.to_string_lossy().to_string()];
            all.extend(args);
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            kubectl(&kc, &refs).await
        }
    };
    let argv = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    let file = dir.join("workloads.yaml");
    std::fs::write(&file, WORKLOADS).unwrap();
    let f = file.to_string_lossy().to_string();

    let (ok, out) = kube(argv(&format!("apply --server-side -f {f}"))).await;
    assert!(ok, "{out}");
    for k in ["deployment.apps/web", "statefulset.apps/db", "job.batch/once", "daemonset.apps/agent"] {
        assert!(out.contains(&format!("{k} serverside-applied")), "{out}");
    }
    let (ok, out) = kube(argv("get deployment web -o yaml --show-managed-fields")).await;
    assert!(ok && out.contains("manager: kubectl") && out.contains("operation: Apply") && out.contains("f:replicas: {}"), "{out}");

    // Another manager changing replicas conflicts; --force-conflicts wins.
    let other = dir.join("other.yaml");
    std::fs::write(&other, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 4}\n").unwrap();
    let o = other.to_string_lossy().to_string();
    let (ok, out) = kube(argv(&format!("apply --server-side --field-manager=ops -f {o}"))).await;
    assert!(!ok && out.contains("Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"), "{out}");
    let (ok, out) = kube(argv(&format!("apply --server-side --field-manager=ops --force-conflicts -f {o}"))).await;
    assert!(ok, "{out}");
    let (ok, out) = kube(argv("get deployment web -o jsonpath={.spec.replicas}")).await;
    assert!(ok && out.trim() == "4", "{out}");
    let (ok, out) = kube(argv("get deployment web -o yaml --show-managed-fields")).await;
    assert!(ok && out.contains("manager: ops") && out.contains("manager: kubectl"), "{out}");

    // A field dropped from the manifest is removed.
    // (replicas goes too: ops owns it now, and asking for 2 would conflict.)
    let dropped = WORKLOADS.replacen("labels: {app: web, tier: front}", "labels: {app: web}", 1).replacen("  replicas: 2\n", "", 1);
    std::fs::write(&file, dropped).unwrap();
    let (ok, out) = kube(argv(&format!("apply --server-side -f {f}"))).await;
    assert!(ok, "{out}");
    let (ok, out) = kube(argv("get deployment web -o jsonpath={.metadata.labels}")).await;
    assert!(ok && out.contains("\"app\":\"web\"") && !out.contains("tier"), "{out}");
    // ops still owns replicas.
    let (ok, out) = kube(argv("get deployment web -o jsonpath={.spec.replicas}")).await;
    assert!(ok && out.trim() == "4", "{out}");

    // berth's own manifests, server-side.
    let manifests = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("deploy/berth.yaml").to_string_lossy().to_string();
    let (ok, out) = kube(argv(&format!("apply --server-side -f {manifests}"))).await;
    assert!(ok, "{out}");
    for k in ["serviceaccount/berth", "configmap/berth-config", "deployment.apps/berth"] {
        assert!(out.contains(&format!("{k} serverside-applied")), "{out}");
    }
    let (ok, out) = kube(argv(&format!("apply --server-side -f {manifests}"))).await;
    assert!(ok && out.contains("serverside-applied"), "applying again: {out}");

    // kubectl create records its own manager (an Update).
    let cm = dir.join("cm.yaml");
    std::fs::write(&cm, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: \"1\"}\n").unwrap();
    let (ok, out) = kube(vec!["create".into(), "-f".into(), cm.to_string_lossy().to_string()]).await;
    assert!(ok, "{out}");
    let (ok, out) = kube(argv("get configmap cfg -o yaml --show-managed-fields")).await;
    assert!(ok && out.contains("manager: kubectl-create") && out.contains("operation: Update") && out.contains("f:a: {}"), "{out}");
    c.shutdown().await;
}
