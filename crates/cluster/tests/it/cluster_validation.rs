//! Bad input gets kube-apiserver's answers: quantities that do not parse
//! (400 from decoding), negative requests, requests above limits, too
//! much annotation, duplicate topology spread constraints (422, each with
//! upstream's message), and the server stays up.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_cluster::{ClusterConfig, LocalCluster};
use serde_json::{Value, json};

use crate::support::raw_http;

/// One HTTP/1.1 request: (status, body as JSON or a string).
pub(crate) async fn call(addr: &LocalCluster, method: &str, path: &str, content_type: &str, body: &str) -> (u16, Value) {
    let (code, body) = raw_http(addr, method, path, &format!("Content-Type: {content_type}\r\n"), body).await;
    (code, serde_json::from_str(&body).unwrap_or(Value::String(body)))
}

fn pod(name: &str, container: Value, extra: Value) -> Value {
    let mut c = json!({"name": "c", "image": "busybox"});
    crate::support::merge(&mut c, &container);
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [c]}});
    crate::support::merge(&mut p, &extra);
    p
}

const QUANTITY_RE: &str = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pods_get_upstreams_answers() {
    crate::support::init_logs();
    let c = LocalCluster::start(ClusterConfig { nodes: 1, ..Default::default() }).await.unwrap();
    let addr = &c;
    let pods = "/api/v1/namespaces/default/pods";
    let spread = |key: &str, when: &str| json!({"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when, "labelSelector": {"matchLabels": {"app": "a"}}});
    let cases: Vec<(Value, u16, String)> = vec![
        (
            pod("lots", json!({"resources": {"requests": {"cpu": "lots"}}}), json!({})),
            400,
            format!("Pod in version \"v1\" cannot be handled as a Pod: {QUANTITY_RE}"),
        ),
        (
            pod("suffix", json!({"resources": {"limits": {"memory": "1KK"}}}), json!({})),
            400,
            "Pod in version \"v1\" cannot be handled as a Pod: unable to parse quantity's suffix".into(),
        ),
        (
            pod("negative", json!({"resources": {"requests": {"cpu": "-4"}}}), json!({})),
            422,
            "Pod \"negative\" is invalid: spec.containers[0].resources.requests[cpu]: Invalid value: \"-4\": must be greater than or equal to 0".into(),
        ),
        (
            pod("negative-limit", json!({"resources": {"limits": {"memory": "-1Gi"}, "requests": {"memory": "0"}}}), json!({})),
            422,
            "Pod \"negative-limit\" is invalid: [spec.containers[0].resources.limits[memory]: Invalid value: \"-1Gi\": must be greater than or equal to 0, spec.containers[0].resources.requests: Invalid value: \"0\": must be less than or equal to memory limit of -1Gi]".into(),
        ),
        (
            pod("above", json!({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}}), json!({})),
            422,
            "Pod \"above\" is invalid: spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1500m".into(),
        ),
        (
            pod("notes", json!({}), json!({"metadata": {"annotations": {"big": "x".repeat(256 * 1024)}}})),
            422,
            "Pod \"notes\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes".into(),
        ),
        (
            pod("spread", json!({}), json!({"spec": {"topologySpreadConstraints": [spread("zone", "DoNotSchedule"), spread("host", "DoNotSchedule"), spread("zone", "DoNotSchedule")]}})),
            422,
            "Pod \"spread\" is invalid: spec.topologySpreadConstraints[0].{topologyKey, whenUnsatisfiable}: Duplicate value: \"{zone, DoNotSchedule}\"".into(),
        ),
    ];
    for (body, code, message) in &cases {
        let (got, status) = call(addr, "POST", pods, "application/json", &body.to_string()).await;
        assert_eq!((got, status["message"].as_str().unwrap_or("")), (*code, message.as_str()), "{status}");
        let reason = if *code == 400 { "BadRequest" } else { "Invalid" };
        assert_eq!((status["code"].as_u64(), status["reason"].as_str()), (Some(u64::from(*code)), Some(reason)));
    }
    // The 422s name the field in their causes.
    let (_, status) = call(addr, "POST", pods, "application/json", &cases[2].0.to_string()).await;
    assert_eq!(status["details"]["causes"][0]["field"], "spec.containers[0].resources.requests[cpu]");
    // A bad quantity in a workload's template, and through a patch, is refused too.
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "d"}},
        "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "many"}}}]}}}});
    let (code, status) = call(addr, "POST", "/apis/apps/v1/namespaces/default/deployments", "application/json", &dep.to_string()).await;
    assert_eq!((code, status["message"].as_str().unwrap()), (400, format!("Deployment in version \"v1\" cannot be handled as a Deployment: {QUANTITY_RE}").as_str()));
    let good = pod("good", json!({"resources": {"limits": {"cpu": "1"}}}), json!({}));
    let (code, created) = call(addr, "POST", pods, "application/json", &good.to_string()).await;
    assert_eq!(code, 201, "{created}");
    // Requests default to limits, as upstream's defaulting does.
    assert_eq!(created["spec"]["containers"][0]["resources"]["requests"]["cpu"], "1");
    let patch = json!({"metadata": {"annotations": {"big": "x".repeat(300 * 1024)}}});
    let (code, status) = call(addr, "PATCH", &format!("{pods}/good"), "application/merge-patch+json", &patch.to_string()).await;
    assert_eq!((code, status["message"].as_str().unwrap()), (422, "Pod \"good\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes"));
    // The server is still up, and nothing bad was stored.
    let (code, list) = call(addr, "GET", pods, "application/json", "").await;
    assert_eq!(code, 200);
    let names: Vec<&str> = list["items"].as_array().unwrap().iter().filter_map(|p| p["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["good"]);
    c.shutdown().await;
}

/// Events expire after `event_ttl` from their last write (kube-apiserver's
/// `--event-ttl`): a watcher sees them deleted; one written again lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_expire_after_the_event_ttl() {
    crate::support::init_logs();
    let ttl = Duration::from_secs(3);
    let c = LocalCluster::start(ClusterConfig { nodes: 1, event_ttl: ttl, ..Default::default() }).await.unwrap();
    let addr = &c;
    let event = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "Tested", "message": "m", "type": "Normal", "source": {"component": "test"}})
        .to_string()
    };
    let events = "/api/v1/namespaces/default/events";
    for name in ["a", "b"] {
        let (code, v) = call(addr, "POST", events, "application/json", &event(name)).await;
        assert_eq!(code, 201, "{v}");
    }
    let names = || async {
        let (_, list) = call(addr, "GET", events, "application/json", "").await;
        let mut n: Vec<String> = list["items"].as_array().unwrap().iter().filter_map(|e| e["metadata"]["name"].as_str().map(str::to_string)).filter(|n| n == "a" || n == "b").collect();
        n.sort();
        n
    };
    tokio::time::sleep(ttl / 2).await;
    // Writing "b" again renews its lease.
    let patch = json!({"message": "again"}).to_string();
    let (code, _) = call(addr, "PATCH", &format!("{events}/b"), "application/merge-patch+json", &patch).await;
    assert_eq!(code, 200);
    tokio::time::sleep(ttl * 3 / 4).await;
    crate::support::eventually(10, "event a expired", || async { (names().await == ["b"]).then_some(()) }).await;
    crate::support::eventually(10, "event b expired", || async { names().await.is_empty().then_some(()) }).await;
    c.shutdown().await;
}
