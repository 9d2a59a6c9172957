//! The local cluster's OpenAPI documents and strict field validation,
//! through raw HTTP and the real kubectl (skipped, with a message, when
//! kubectl is not installed).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use berth_cluster::{ClusterConfig, LocalCluster};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cluster_kubectl::{kubectl, temp_dir};

/// A raw HTTP/1.1 request: (status, headers lower-cased, body).
async fn raw(c: &LocalCluster, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut s = c.connect().await.unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n", c.admin_token(), body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    // A TLS peer may close without close_notify: keep what came.
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out)).await.unwrap();
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&out[..split]).to_string();
    let mut lines = head.lines();
    let code = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let hs = lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string())).collect();
    (code, hs, out[split + 4..].to_vec())
}

fn header<'a>(hs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    hs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn json_of(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(b)))
}

async fn start() -> LocalCluster {
    LocalCluster::start(ClusterConfig { nodes: 2, ..Default::default() }).await.unwrap()
}

#[tokio::test]
async fn openapi_documents_are_served_hashed_and_cached() {
    let c = start().await;
    let addr = &c;
    let (code, _, body) = raw(addr, "GET", "/openapi/v3", &[("Accept", "application/json, */*")], b"").await;
    assert_eq!(code, 200);
    let root = json_of(&body);
    let url = root["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap().to_string();
    assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="), "{url}");
    assert!(root["paths"]["api/v1"].is_object() && root["paths"]["apis/rbac.authorization.k8s.io/v1"].is_object(), "{root}");
    let hash = url.split("hash=").nth(1).unwrap().to_string();
    assert_eq!(hash.len(), 128);

    // The hashed URL: cacheable for ever, its ETag is the hash.
    let (code, hs, body) = raw(addr, "GET", &url, &[("Accept", "application/json")], b"").await;
    assert_eq!(code, 200);
    assert_eq!(header(&hs, "cache-control"), Some("public, immutable"));
    assert_eq!(header(&hs, "etag"), Some(format!("\"{hash}\"").as_str()));
    assert_eq!(header(&hs, "content-type"), Some("application/json"));
    let doc = json_of(&body);
    assert_eq!(doc["openapi"], "3.0.0");
    let dep = &doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(dep["x-kubernetes-group-version-kind"], json!([{"group": "apps", "kind": "Deployment", "version": "v1"}]));
    let post = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments"]["post"];
    assert_eq!(post["x-kubernetes-action"], "post");
    assert_eq!(post["x-kubernetes-group-version-kind"], json!({"group": "apps", "kind": "Deployment", "version": "v1"}));
    let params: Vec<&str> = post["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(params, ["dryRun", "fieldManager", "fieldValidation"]);
    // The same document again (cached): same bytes; If-None-Match: 304.
    let (_, _, again) = raw(addr, "GET", &url, &[("Accept", "application/json")], b"").await;
    assert_eq!(again, body);
    let (code, _, _) = raw(addr, "GET", "/openapi/v3/apis/apps/v1", &[("If-None-Match", &format!("\"{hash}\""))], b"").await;
    assert_eq!(code, 304);
    // An old hash is redirected to the current one; no hash: not immutable.
    let (code, hs, _) = raw(addr, "GET", "/openapi/v3/apis/apps/v1?hash=0123", &[], b"").await;
    assert_eq!(code, 301);
    assert_eq!(header(&hs, "location"), Some(url.as_str()));
    let (code, hs, _) = raw(addr, "GET", "/openapi/v3/apis/apps/v1", &[], b"").await;
    assert_eq!(code, 200);
    assert_eq!(header(&hs, "cache-control"), None);
    // Protobuf only: 406; unknown group-version: 404.
    let (code, _, _) = raw(addr, "GET", &url, &[("Accept", "application/com.github.proto-openapi.spec.v3.v1.0+protobuf")], b"").await;
    assert_eq!(code, 406);
    let (code, _, _) = raw(addr, "GET", "/openapi/v3/apis/nope.example.com/v1", &[], b"").await;
    assert_eq!(code, 404);

    // Swagger 2.0, JSON.
    let (code, hs, body) = raw(addr, "GET", "/openapi/v2", &[("Accept", "application/json")], b"").await;
    assert_eq!(code, 200);
    assert!(header(&hs, "etag").is_some());
    let v2 = json_of(&body);
    assert_eq!(v2["swagger"], "2.0");
    assert_eq!(v2["definitions"]["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
    let (code, _, _) = raw(addr, "GET", "/openapi/v2", &[("Accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")], b"").await;
    assert_eq!(code, 406);

    // A CRD joins its group-version's document, and leaves it.
    let crd = widget_crd();
    let (code, _, body) = raw(addr, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &[("Content-Type", "application/json")], crd.to_string().as_bytes()).await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let (_, _, body) = raw(addr, "GET", "/openapi/v3", &[], b"").await;
    let url = json_of(&body)["paths"]["apis/example.com/v1"]["serverRelativeURL"].as_str().unwrap().to_string();
    let (_, _, body) = raw(addr, "GET", &url, &[], b"").await;
    let doc = json_of(&body);
    let w = &doc["components"]["schemas"]["com.example.v1.Widget"];
    assert_eq!(w["x-kubernetes-group-version-kind"], json!([{"group": "example.com", "kind": "Widget", "version": "v1"}]));
    assert_eq!(w["properties"]["spec"]["properties"]["size"]["type"], "integer");
    assert!(doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"]["requestBody"]["content"].get("application/strategic-merge-patch+json").is_none());
    let (code, _, _) = raw(addr, "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", &[], b"").await;
    assert_eq!(code, 200);
    let (_, _, body) = raw(addr, "GET", "/openapi/v3", &[], b"").await;
    assert!(json_of(&body)["paths"].get("apis/example.com/v1").is_none());
    c.shutdown().await;
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "description": "A widget.",
                "properties": {"spec": {"type": "object", "description": "The widget's spec.", "properties": {
                    "size": {"type": "integer", "description": "How big the widget is."},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}}}}}}]}
    })
}

#[tokio::test]
async fn strict_field_validation_on_create_update_and_patch() {
    let c = start().await;
    let addr = &c;
    let ct = [("Content-Type", "application/json")];
    let pod = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","name":"p"},"spec":{"bogus":1,"containers":[{"name":"c","image":"i","extra":true}],"nodeSelector":{"any":"thing"}}}"#;
    // Strict: 400 with every field, duplicates first (as upstream's decoder).
    let (code, _, body) = raw(addr, "POST", "/api/v1/namespaces/default/pods?fieldValidation=Strict", &ct, pod).await;
    assert_eq!(code, 400);
    let st = json_of(&body);
    assert_eq!(st["reason"], "BadRequest");
    assert_eq!(
        st["message"],
        r#"Pod in version "v1" cannot be handled as a Pod: strict decoding error: duplicate field "metadata.name", unknown field "spec.bogus", unknown field "spec.containers[0].extra""#
    );
    // An unknown directive is refused.
    let (code, _, _) = raw(addr, "POST", "/api/v1/namespaces/default/pods?fieldValidation=strict", &ct, pod).await;
    assert_eq!(code, 400);
    // Warn (the default): created, one Warning header per field, the fields dropped.
    let (code, hs, body) = raw(addr, "POST", "/api/v1/namespaces/default/pods", &ct, pod).await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let warnings: Vec<&str> = hs.iter().filter(|(k, _)| k == "warning").map(|(_, v)| v.as_str()).collect();
    assert_eq!(
        warnings,
        [r#"299 - "duplicate field \"metadata.name\"""#, r#"299 - "unknown field \"spec.bogus\"""#, r#"299 - "unknown field \"spec.containers[0].extra\"""#]
    );
    assert!(json_of(&body)["spec"].get("bogus").is_none());
    // Ignore: created silently.
    let other = String::from_utf8_lossy(pod).replace("\"p\"", "\"q\"");
    let (code, hs, _) = raw(addr, "POST", "/api/v1/namespaces/default/pods?fieldValidation=Ignore", &ct, other.as_bytes()).await;
    assert_eq!(code, 201);
    assert!(header(&hs, "warning").is_none());

    // Update (PUT) as create.
    let (_, _, body) = raw(addr, "GET", "/api/v1/namespaces/default/pods/p", &[], b"").await;
    let mut cur = json_of(&body);
    cur["spec"]["bogus"] = json!(2);
    let (code, _, body) = raw(addr, "PUT", "/api/v1/namespaces/default/pods/p?fieldValidation=Strict", &ct, cur.to_string().as_bytes()).await;
    assert_eq!(code, 400);
    assert!(String::from_utf8_lossy(&body).contains(r#"strict decoding error: unknown field \"spec.bogus\""#), "{}", String::from_utf8_lossy(&body));

    // Patches: Strict refuses with 422 `patch: Invalid value`; Warn warns.
    for (ctype, patch) in [
        ("application/merge-patch+json", r#"{"metadata":{"labels":{"a":"b"}},"spec":{"bogus":1}}"#),
        ("application/strategic-merge-patch+json", r#"{"spec":{"bogus":1,"$setElementOrder/containers":[{"name":"c"}]}}"#),
        ("application/json-patch+json", r#"[{"op":"add","path":"/spec/bogus","value":1}]"#),
    ] {
        let (code, _, body) = raw(addr, "PATCH", "/api/v1/namespaces/default/pods/p?fieldValidation=Strict", &[("Content-Type", ctype)], patch.as_bytes()).await;
        assert_eq!(code, 422, "{ctype}: {}", String::from_utf8_lossy(&body));
        let st = json_of(&body);
        assert_eq!(st["reason"], "Invalid");
        assert_eq!(st["details"]["causes"][0]["field"], "patch");
        assert!(st["message"].as_str().unwrap().ends_with(r#"strict decoding error: unknown field "spec.bogus""#), "{st}");
        let (code, hs, _) = raw(addr, "PATCH", "/api/v1/namespaces/default/pods/p", &[("Content-Type", ctype)], patch.as_bytes()).await;
        assert_eq!(code, 200, "{ctype}");
        assert_eq!(header(&hs, "warning"), Some(r#"299 - "unknown field \"spec.bogus\"""#), "{ctype}");
    }

    // Custom resources: the CRD's schema decides (pruned fields are
    // unknown; preserved, map and embedded fields are not).
    let (code, _, _) = raw(addr, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &ct, widget_crd().to_string().as_bytes()).await;
    assert_eq!(code, 201);
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"size": 1, "color": "red", "free": {"x": {"y": 1}}, "labels": {"k": "v"},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t"}, "spec": {"z": 1}}}});
    let (code, _, body) = raw(addr, "POST", "/apis/example.com/v1/namespaces/default/widgets?fieldValidation=Strict", &ct, w.to_string().as_bytes()).await;
    assert_eq!(code, 400);
    assert_eq!(json_of(&body)["message"], r#"Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.color""#);
    // dryRun writes are answered, not persisted.
    let (code, _, _) = raw(addr, "POST", "/api/v1/namespaces/default/pods?dryRun=All", &ct, other.replace("\"q\"", "\"r\"").as_bytes()).await;
    assert_eq!(code, 201);
    let (code, _, _) = raw(addr, "GET", "/api/v1/namespaces/default/pods/r", &[], b"").await;
    assert_eq!(code, 404);
    c.shutdown().await;
}

async fn kc(kubeconfig: &Path, cache: &Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["--cache-dir", cache.to_str().unwrap()];
    all.extend_from_slice(args);
    kubectl(kubeconfig, &all).await
}

#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_explain_and_apply_with_validation() {
    let c = start().await;
    let dir = temp_dir();
    let kcfg = dir.join("kubeconfig");
    let cache = dir.join("cache");
    c.write_kubeconfig(&kcfg).unwrap();

    let (ok, out) = kc(&kcfg, &cache, &["explain", "pod.spec"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("KIND:       Pod") && out.contains("FIELD: spec <PodSpec>") && out.contains("containers\t<[]Container>"), "{out}");
    let (ok, out) = kc(&kcfg, &cache, &["explain", "deployment.spec.replicas"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("GROUP:      apps") && out.contains("FIELD: replicas <integer>") && out.contains("Number of desired pods"), "{out}");
    let (ok, out) = kc(&kcfg, &cache, &["explain", "pods.spec.bogus"]).await;
    assert!(!ok && out.contains("field \"bogus\" does not exist"), "{out}");

    // Validation on (kubectl's default, Strict through the server).
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let (ok, out) = kc(&kcfg, &cache, &["apply", "-f", root.join("deploy/example-pod.yaml").to_str().unwrap()]).await;
    assert!(ok, "{out}");
    assert!(out.contains("created"), "{out}");
    let (ok, out) = kc(&kcfg, &cache, &["apply", "-f", root.join("deploy/berth.yaml").to_str().unwrap()]).await;
    assert!(ok, "{out}");
    for what in ["deployment.apps/berth created", "serviceaccount/berth created", "clusterrole.rbac.authorization.k8s.io/berth created", "rolebinding.rbac.authorization.k8s.io/berth-leader-election created"] {
        assert!(out.contains(what), "{what}: {out}");
    }
    // A second apply patches (strategic merge computed from the v3 document).
    let (ok, out) = kc(&kcfg, &cache, &["apply", "-f", root.join("deploy/berth.yaml").to_str().unwrap()]).await;
    assert!(ok && !out.contains("warning"), "{out}");
    assert!(out.contains("deployment.apps/berth unchanged"), "{out}");

    // The workload kinds, client-side with validation: created, then unchanged.
    let workloads = dir.join("workloads.yaml");
    std::fs::write(&workloads, crate::cluster_apply::WORKLOADS).unwrap();
    let (ok, out) = kc(&kcfg, &cache, &["apply", "-f", workloads.to_str().unwrap()]).await;
    assert!(ok, "{out}");
    for what in ["deployment.apps/web created", "statefulset.apps/db created", "job.batch/once created", "daemonset.apps/agent created"] {
        assert!(out.contains(what), "{what}: {out}");
    }
    let (ok, out) = kc(&kcfg, &cache, &["apply", "-f", workloads.to_str().unwrap()]).await;
    assert!(ok && !out.contains("warning"), "{out}");
    for what in ["deployment.apps/web unchanged", "statefulset.apps/db unchanged", "job.batch/once unchanged", "daemonset.apps/agent unchanged"] {
        assert!(out.contains(what), "{what}: {out}");
    }
    for (get, want) in [
        ("deployment/web -o jsonpath={.spec.replicas}", "2"),
        ("statefulset/db -o jsonpath={.spec.serviceName}", "db"),
        ("job/once -o jsonpath={.spec.template.spec.restartPolicy}", "Never"),
        ("daemonset/agent -o jsonpath={.spec.template.spec.schedulerName}", "nobody"),
    ] {
        let args: Vec<&str> = std::iter::once("get").chain(get.split(' ')).collect();
        let (ok, out) = kc(&kcfg, &cache, &args).await;
        assert!(ok && out.trim() == want, "{get}: {out}");
    }
    // The last-applied annotation carries the manifest; changing it patches.
    let scaled = crate::cluster_apply::WORKLOADS.replacen("  replicas: 1\n  serviceName: db", "  replicas: 2\n  serviceName: db", 1);
    std::fs::write(&workloads, scaled).unwrap();
    let (ok, out) = kc(&kcfg, &cache, &["apply", "-f", workloads.to_str().unwrap()]).await;
    assert!(ok && out.contains("statefulset.apps/db configured") && out.contains("job.batch/once unchanged"), "{out}");
    let (ok, out) = kc(&kcfg, &cache, &["get", "statefulset/db", "-o", "jsonpath={.spec.replicas}"]).await;
    assert!(ok && out.trim() == "2", "{out}");

    // Unknown fields: refused by default, a warning with --validate=warn.
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  bogus: 1\n  containers:\n  - name: c\n    image: nginx\n").unwrap();
    let (ok, out) = kc(&kcfg, &cache, &["apply", "-f", bad.to_str().unwrap()]).await;
    assert!(!ok, "{out}");
    assert!(out.contains(r#"Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.bogus""#), "{out}");
    let (ok, out) = kc(&kcfg, &cache, &["apply", "--validate=warn", "-f", bad.to_str().unwrap()]).await;
    assert!(ok, "{out}");
    assert!(out.contains(r#"Warning: unknown field "spec.bogus""#) && out.contains("pod/bad created"), "{out}");

    // A CRD: explain and validation of its kind.
    let crd = dir.join("crd.json");
    std::fs::write(&crd, widget_crd().to_string()).unwrap();
    let (ok, out) = kc(&kcfg, &cache, &["apply", "-f", crd.to_str().unwrap()]).await;
    assert!(ok, "{out}");
    let (ok, out) = kc(&kcfg, &cache, &["explain", "widget.spec.size"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("KIND:       Widget") && out.contains("FIELD: size <integer>") && out.contains("How big the widget is."), "{out}");
    let w = dir.join("w.yaml");
    std::fs::write(&w, "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 2\n  color: red\n").unwrap();
    let (ok, out) = kc(&kcfg, &cache, &["apply", "-f", w.to_str().unwrap()]).await;
    assert!(!ok && out.contains(r#"strict decoding error: unknown field "spec.color""#), "{out}");
    c.shutdown().await;
}
