//! The limits a real cluster applies, and that nothing stored is
//! unloadable: ConfigMap and Secret data over 1 MiB (kube-apiserver's
//! validation), objects over etcd's 1.5 MiB request limit (etcd's error),
//! request bodies over 3 MiB (413), objects nested past what the data
//! directory reads back (refused on every write path), and a data
//! directory with one unreadable object (named, kept aside, the rest
//! served).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use berth_cluster::{ClusterConfig, LocalCluster};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::support::{api_code, api_err, cluster_config, raw_http};

fn data_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("berth-limits-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn config(dir: &Path) -> ClusterConfig {
    ClusterConfig { data_dir: Some(dir.to_path_buf()), ..cluster_config(1, 1, "4", 110) }
}

const MIB: usize = 1024 * 1024;

#[tokio::test]
async fn configmap_secret_object_and_body_sizes_are_refused_as_a_real_cluster_refuses_them() {
    let c = LocalCluster::start(cluster_config(1, 1, "4", 110)).await.unwrap();
    let client = c.client().unwrap();
    let pp = PostParams::default();

    // ConfigMap data over 1 MiB: kube-apiserver's validation (422 on `[]`).
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm = |name: &str, bytes: usize| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name}, "data": {"k": "x".repeat(bytes)}})).unwrap();
    cms.create(&pp, &cm("at-limit", MIB)).await.unwrap();
    let e = api_err(cms.create(&pp, &cm("big", MIB + MIB / 2)).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
    assert_eq!(e.message, r#"ConfigMap "big" is invalid: []: Too long: may not be more than 1048576 bytes"#);
    let cause = &e.details.as_ref().unwrap().causes[0];
    assert_eq!((cause.reason.as_str(), cause.field.as_str()), ("FieldValueTooLong", "[]"), "{cause:?}");
    // Grown past it by an update: refused too.
    let mut grown = cms.get("at-limit").await.unwrap();
    grown.data.as_mut().unwrap().insert("more".into(), "y".into());
    assert_eq!(api_code(&cms.replace("at-limit", &pp, &grown).await.unwrap_err()), 422);

    // Secret data over 1 MiB (decoded; stringData counts once folded in): 422 on `data`.
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let secret = serde_json::from_value::<Secret>(json!({"metadata": {"name": "s"}, "stringData": {"k": "x".repeat(MIB + 1)}})).unwrap();
    let e = api_err(secrets.create(&pp, &secret).await.unwrap_err());
    assert_eq!(e.message, r#"Secret "s" is invalid: data: Too long: may not be more than 1048576 bytes"#);

    // A pod of 2 MiB (env values): under the 3 MiB body limit, over etcd's
    // 1.5 MiB: etcd's error, as kube-apiserver passes it on (500, no reason).
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let env: Vec<Value> = (0..4).map(|i| json!({"name": format!("E{i}"), "value": "x".repeat(MIB / 2)})).collect();
    let pod = serde_json::from_value::<Pod>(json!({"metadata": {"name": "huge"}, "spec": {"containers": [{"name": "c", "image": "i", "env": env}]}})).unwrap();
    let e = api_err(pods.create(&pp, &pod).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str(), e.message.as_str()), (500, "", "etcdserver: request is too large"), "{e:?}");
    assert!(pods.get_opt("huge").await.unwrap().is_none());

    // A body over kube-apiserver's 3 MiB: 413 before anything is decoded.
    let e = api_err(cms.create(&pp, &cm("body", 3 * MIB + 1)).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str(), e.message.as_str()), (413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728"), "{e:?}");
    c.shutdown().await;
}

/// A value nested `levels` deep under key `a`, ending in `{}`.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!({}), |v, _| json!({"a": v}))
}

/// The JSON pointer `/spec/a/a/.../a` (`levels` a's).
fn deep_path(root: &str, levels: usize) -> String {
    format!("{root}{}", "/a".repeat(levels))
}

const BLOBS: &str = "/apis/example.com/v1/namespaces/default/blobs";

/// Every write path that can deepen a stored custom resource past what the
/// data directory reads back refuses it (422); what is accepted loads after
/// a restart, and the restarted cluster serves the object.
#[tokio::test]
async fn a_custom_resource_deepened_by_any_write_path_is_refused_or_loads_after_a_restart() {
    let dir = data_dir("deepen");
    let c = LocalCluster::start(config(&dir)).await.unwrap();
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "blobs.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "blobs", "singular": "blob", "kind": "Blob"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let (code, body) = raw_http(&c, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "Content-Type: application/json\r\n", &crd.to_string()).await;
    assert_eq!(code, 201, "{body}");
    // 100 levels under spec and under status (its own subresource): 40
    // more make it unloadable.
    let blob = json!({"apiVersion": "example.com/v1", "kind": "Blob", "metadata": {"name": "d"}, "spec": nested(100)});
    let (code, body) = raw_http(&c, "POST", BLOBS, "Content-Type: application/json\r\n", &blob.to_string()).await;
    assert_eq!(code, 201, "{body}");
    let merge = "Content-Type: application/merge-patch+json\r\n";
    let (code, body) = raw_http(&c, "PATCH", &format!("{BLOBS}/d/status"), merge, &json!({"status": nested(100)}).to_string()).await;
    assert_eq!(code, 200, "{body}");

    let json_patch = "Content-Type: application/json-patch+json\r\n";
    let apply = "Content-Type: application/apply-patch+yaml\r\n";
    // The JSON patches deepen past the limit with a shallow body: refused.
    let deepening: Vec<(&str, String, String)> = vec![
        ("JSON patch add", format!("{BLOBS}/d"), json!([{"op": "add", "path": deep_path("/spec", 100) + "/b", "value": nested(40)}]).to_string()),
        ("JSON patch copy", format!("{BLOBS}/d"), json!([{"op": "copy", "from": "/spec", "path": deep_path("/spec", 100) + "/b"}]).to_string()),
        ("JSON patch replace", format!("{BLOBS}/d"), json!([{"op": "replace", "path": deep_path("/spec", 100), "value": nested(40)}]).to_string()),
        ("status JSON patch", format!("{BLOBS}/d/status"), json!([{"op": "add", "path": deep_path("/status", 100) + "/b", "value": nested(40)}]).to_string()),
    ];
    for (what, path, body) in &deepening {
        let (code, answer) = raw_http(&c, "PATCH", path, json_patch, body).await;
        assert_eq!(code, 422, "{what}: {answer}");
        assert!(answer.contains("exceeded max depth of 127"), "{what}: {answer}");
    }
    // Merge patches and apply cannot nest deeper than their own body, which
    // the decoder bounds; what they store (managedFields included, which
    // nest deeper than the object) is refused when it would not load.
    let bounded: Vec<(&str, String, &str, String)> = vec![
        ("merge patch", format!("{BLOBS}/d"), merge, json!({"spec": nested(125)}).to_string()),
        ("status merge patch", format!("{BLOBS}/d/status"), merge, json!({"status": nested(125)}).to_string()),
        ("apply", format!("{BLOBS}/d?fieldManager=deep&force=true"), apply, json!({"apiVersion": "example.com/v1", "kind": "Blob", "metadata": {"name": "d"}, "spec": nested(125)}).to_string()),
    ];
    for (what, path, ct, body) in &bounded {
        let (code, answer) = raw_http(&c, "PATCH", path, ct, body).await;
        assert!(matches!(code, 200 | 400 | 422), "{what}: {code} {answer}");
        if code == 422 {
            assert!(answer.contains("exceeded max depth of 127"), "{what}: {answer}");
        }
        println!("{what}: {code}");
    }
    // A PUT of a body deeper than the decoder reads: 400, as before.
    let deep = json!({"apiVersion": "example.com/v1", "kind": "Blob", "metadata": {"name": "d"}, "spec": nested(140)});
    assert_eq!(raw_http(&c, "PUT", &format!("{BLOBS}/d"), "Content-Type: application/json\r\n", &deep.to_string()).await.0, 400);
    let (code, before) = raw_http(&c, "GET", &format!("{BLOBS}/d"), "", "").await;
    assert_eq!(code, 200, "{before}");
    c.shutdown().await;

    // The directory loads, whole: nothing set aside, the object served.
    let c = LocalCluster::start(config(&dir)).await.unwrap_or_else(|e| panic!("the data directory does not load: {e}"));
    assert!(c.store().quarantined().is_empty(), "{:?}", c.store().quarantined());
    let (code, after) = raw_http(&c, "GET", &format!("{BLOBS}/d"), "", "").await;
    assert_eq!(code, 200, "{after}");
    let v = |s: &str| serde_json::from_str::<Value>(s).unwrap();
    assert_eq!(v(&after)["spec"], v(&before)["spec"]);
    c.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A data directory with one object that cannot be read back starts,
/// names the object, keeps it aside and serves the rest.
#[tokio::test]
async fn a_data_directory_with_one_unreadable_object_starts_names_it_and_serves_the_rest() {
    let dir = data_dir("unreadable");
    let c = LocalCluster::start(config(&dir)).await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client().unwrap());
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "good"}, "data": {"k": "v"}})).unwrap()).await.unwrap();
    c.shutdown().await;
    let bad = format!("{{\"metadata\":{{\"name\":\"bad\",\"namespace\":\"default\"}},\"data\":{}{}}}", "[".repeat(200), "]".repeat(200));
    berth_cluster::testing::plant_object(&dir, "configmaps", "default", "bad", bad.as_bytes()).unwrap();

    let c = LocalCluster::start(config(&dir)).await.unwrap_or_else(|e| panic!("one unreadable object stopped the cluster: {e}"));
    let named: Vec<String> = c.store().quarantined().iter().map(ToString::to_string).collect();
    assert_eq!(named.len(), 1, "{named:?}");
    assert!(named[0].contains("configmaps/default/bad"), "{named:?}");
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client().unwrap());
    assert!(cms.get("good").await.is_ok(), "the rest is served");
    assert_eq!(api_code(&cms.get("bad").await.unwrap_err()), 404);
    c.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Over `--max-requests-inflight`: 429, `Retry-After: 1` and upstream's
/// plain-text body; watches are not counted, system:masters is always
/// served, and the mutating pool is separate.
#[tokio::test]
async fn requests_over_the_inflight_limit_get_429_unless_long_running_or_system_masters() {
    use berth_cluster::authz::AuthorizationMode;
    use crate::support::{NOBODY_TOKEN, raw_http_as, raw_http_head_as};
    let c = LocalCluster::start(ClusterConfig {
        max_requests_inflight: 1,
        max_mutating_requests_inflight: 1,
        authorization: AuthorizationMode::AlwaysAllow,
        ..cluster_config(1, 1, "4", 110)
    })
    .await
    .unwrap();
    let nobody = Some(NOBODY_TOKEN);
    // A list waiting for a resourceVersion ahead of the store's holds the
    // one read-only place until it gives up (504 after a few seconds).
    let ahead = c.store().current_rv() + 1000;
    let held_path = format!("/api/v1/namespaces/default/configmaps?resourceVersion={ahead}&resourceVersionMatch=NotOlderThan");
    let holder = raw_http_as(&c, nobody, "GET", &held_path, "", "");
    let checks = async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let (code, head, body) = raw_http_head_as(&c, nobody, "GET", "/api/v1/namespaces/default/configmaps", "", "").await;
        assert_eq!(code, 429, "{head}\n{body}");
        assert_eq!(body, "Too many requests, please try again later.\n");
        let head = head.to_ascii_lowercase();
        assert!(head.contains("retry-after: 1\r\n") && head.contains("content-type: text/plain; charset=utf-8"), "{head}");
        // system:masters is served whatever the load.
        assert_eq!(raw_http(&c, "GET", "/api/v1/namespaces/default/configmaps", "", "").await.0, 200);
        // A watch is long-running: not counted.
        assert_eq!(raw_http_as(&c, nobody, "GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1", "", "").await.0, 200);
        // The mutating pool is another.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}});
        assert_eq!(raw_http_as(&c, nobody, "POST", "/api/v1/namespaces/default/configmaps", "Content-Type: application/json\r\n", &cm.to_string()).await.0, 201);
    };
    let ((held, _), ()) = tokio::join!(holder, checks);
    assert_eq!(held, 504, "the holder waited for its resourceVersion");
    // Its place is free again.
    assert_eq!(raw_http_as(&c, nobody, "GET", "/api/v1/namespaces/default/configmaps", "", "").await.0, 200);
    let refused = c.inflight_refused();
    assert_eq!((refused.read_only, refused.mutating), (1, 0), "{refused:?}");
    c.shutdown().await;
}
