//! Helpers for tests of the local cluster and of what runs against it (the
//! cluster's own tests and the end-to-end suite, through the `testing`
//! feature): a local cluster, pod builders and polling.
#![allow(clippy::unwrap_used, dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::auth::{AuthConfig, AuthRule, StaticToken};
use crate::{ClusterConfig, FaultConfig, KubeletConfig, LocalCluster};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The profile every test pod names.
pub const PROFILE: &str = "berth-e2e";

/// Logs to stderr when RUST_LOG is set (`--nocapture` to see them).
pub fn init_logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_test_writer().try_init();
    }
}

/// A cluster of `nodes` nodes over `zones` zones with `cpu` cores and `pods` pod slots each.
pub async fn cluster(nodes: usize, zones: usize, cpu: &str, pods: u32, faults: FaultConfig) -> LocalCluster {
    // The e2e tests hand-craft their pods (some owned by a ReplicaSet
    // that must not run); cluster_controllers turns them on.
    let controllers = crate::controllers::ControllersConfig { enabled: false, ..Default::default() };
    start_cluster(ClusterConfig { faults, controllers, ..cluster_config(nodes, zones, cpu, pods) }).await
}

/// A cluster as [`cluster`] (no faults) with the workload controllers on
/// (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, garbage collection).
pub async fn cluster_with_controllers(nodes: usize, zones: usize, cpu: &str, pods: u32) -> LocalCluster {
    let controllers = crate::controllers::ControllersConfig { resync: Duration::from_millis(500), ..Default::default() };
    start_cluster(ClusterConfig { controllers, ..cluster_config(nodes, zones, cpu, pods) }).await
}

pub fn cluster_config(nodes: usize, zones: usize, cpu: &str, pods: u32) -> ClusterConfig {
    ClusterConfig {
        nodes,
        zones,
        node_cpu: cpu.into(),
        node_memory: "64Gi".into(),
        node_pods: pods,
        kubelet: KubeletConfig { enabled: true, start_delay: Duration::from_millis(20) },
        bookmark_interval: Duration::from_millis(500),
        auth: auth_config(),
        ..Default::default()
    }
}

async fn start_cluster(cfg: ClusterConfig) -> LocalCluster {
    init_logs();
    let c = LocalCluster::start(cfg).await.unwrap();
    grant_metrics(&c, "User", "prometheus", "").await;
    c
}

/// Binds the subject (`kind` User, Group or ServiceAccount, `namespace`
/// for a ServiceAccount) to a ClusterRole allowing `get` on `/metrics`,
/// as README's monitoring instructions do (the cluster's RBAC answers
/// the daemon's SubjectAccessReviews).
pub async fn grant_metrics(c: &LocalCluster, kind: &str, name: &str, namespace: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let client = c.client().unwrap();
    let roles: Api<ClusterRole> = Api::all(client.clone());
    if roles.get_opt("berth-metrics-reader").await.unwrap().is_none() {
        let role = json!({"metadata": {"name": "berth-metrics-reader"}, "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]});
        roles.create(&PostParams::default(), &serde_json::from_value(role).unwrap()).await.unwrap();
    }
    let mut subject = json!({"kind": kind, "name": name});
    if kind == "ServiceAccount" {
        subject["namespace"] = json!(namespace);
    } else {
        subject["apiGroup"] = json!("rbac.authorization.k8s.io");
    }
    let binding = json!({"metadata": {"name": format!("berth-metrics-reader-{}", name.replace(':', "-"))},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "berth-metrics-reader"}, "subjects": [subject]});
    let bindings: Api<ClusterRoleBinding> = Api::all(client);
    bindings.create(&PostParams::default(), &serde_json::from_value(binding).unwrap()).await.unwrap();
}

/// A token of group system:masters: everything on the admin port.
pub const ADMIN_TOKEN: &str = "e2e-admin-token";
/// A token of user "prometheus", allowed `get` on /metrics only.
pub const METRICS_TOKEN: &str = "e2e-metrics-token";
/// A token of user "nobody", allowed nothing.
pub const NOBODY_TOKEN: &str = "e2e-nobody-token";

/// The test clusters' tokens and rules (the defaults plus a /metrics reader).
pub fn auth_config() -> AuthConfig {
    let mut rules = AuthConfig::default().rules;
    rules.push(AuthRule::user_paths("prometheus", &["get"], &["/metrics"]));
    AuthConfig {
        tokens: vec![
            StaticToken::new(ADMIN_TOKEN, "e2e-admin", &["system:masters"]),
            StaticToken::new(METRICS_TOKEN, "prometheus", &["monitoring"]),
            StaticToken::new(NOBODY_TOKEN, "nobody", &[]),
        ],
        rules,
    }
}

/// A pod of `PROFILE` requesting `cpu`, with `extra` merged into its JSON.
pub fn pod(name: &str, cpu: &str, extra: Value) -> Pod {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "e2e"}},
        "spec": {
            "schedulerName": PROFILE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]
        }
    });
    merge(&mut v, &extra);
    serde_json::from_value(v).unwrap()
}

/// JSON merge (objects merged recursively, everything else replaced).
pub fn merge(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b.clone(),
    }
}

/// Creates pods, `conc` at a time.
pub async fn create_all(api: &Api<Pod>, pods: Vec<Pod>, conc: usize) {
    use futures::StreamExt;
    let pp = PostParams::default();
    futures::stream::iter(pods)
        .map(|p| {
            let api = api.clone();
            let pp = pp.clone();
            async move { api.create(&pp, &p).await.unwrap() }
        })
        .buffer_unordered(conc)
        .collect::<Vec<_>>()
        .await;
}

/// The Status of an API error (panics on any other error).
pub fn api_err(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The HTTP code of an API error (panics on any other error).
pub fn api_code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Polls `f` every 50 ms until it returns Some, for at most `secs`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: not reached within {secs}s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// All pods of the default namespace.
pub async fn pods(api: &Api<Pod>) -> Vec<Pod> {
    api.list(&ListParams::default()).await.unwrap().items
}

/// All nodes.
pub async fn nodes(c: &LocalCluster) -> Vec<Node> {
    Api::<Node>::all(c.client().unwrap()).list(&ListParams::default()).await.unwrap().items
}

/// Events (events.k8s.io/v1) of the default namespace, as (pod name, reason, note).
pub async fn events(c: &LocalCluster) -> Vec<(String, String, String)> {
    let api: Api<Event> = Api::namespaced(c.client().unwrap(), "default");
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| (e.regarding.and_then(|r| r.name).unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Count of events per (pod, reason).
pub async fn event_counts(c: &LocalCluster, reason: &str) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for (p, r, _) in events(c).await {
        if r == reason {
            *m.entry(p).or_insert(0) += 1;
        }
    }
    m
}

/// The pod's node, if bound.
pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// The pod's PodScheduled condition as (status, reason, message).
pub fn scheduled_condition(p: &Pod) -> Option<(String, String, String)> {
    p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "PodScheduled").map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

/// A condition of type `ty` is present with status True.
pub fn has_condition(p: &Pod, ty: &str) -> bool {
    p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == ty && c.status == "True"))
}

/// Milli-CPU of a quantity string ("100m", "2").
pub fn milli(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => (q.parse::<f64>().unwrap() * 1000.0) as i64,
    }
}

/// Requested milli-CPU of a pod (sum over containers).
pub fn pod_milli_cpu(p: &Pod) -> i64 {
    p.spec
        .as_ref()
        .map(|s| s.containers.iter().filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get("cpu").map(|q| milli(&q.0))).sum())
        .unwrap_or(0)
}

/// One HTTP/1.1 request to the cluster (over its TLS, trusting its CA)
/// with the admin token, extra header lines `headers` (each ending in
/// CRLF; an `Authorization` line there replaces the admin token) and
/// `body`: (status, body, de-chunked); status 0 when the answer is not HTTP.
pub async fn raw_http(c: &LocalCluster, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let token = (!headers.to_ascii_lowercase().contains("authorization:")).then(|| c.admin_token());
    raw_http_as(c, token, method, path, headers, body).await
}

/// As [`raw_http`] with the bearer `token`, or anonymous when None.
pub async fn raw_http_as(c: &LocalCluster, token: Option<&str>, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    raw_http_on(c.connect().await.unwrap(), method, path, &format!("{auth}{headers}"), body).await
}

/// One plain HTTP/1.1 request to any server at `addr` (no TLS, no token).
pub async fn raw_http_plain(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    raw_http_on(tokio::net::TcpStream::connect(addr).await.unwrap(), method, path, headers, body).await
}

async fn raw_http_on<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(s: S, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let (code, _, body) = raw_http_with_head(s, method, path, headers, body).await;
    (code, body)
}

/// As [`raw_http_as`], with the response head too: (status, head, body).
pub async fn raw_http_head_as(c: &LocalCluster, token: Option<&str>, method: &str, path: &str, headers: &str, body: &str) -> (u16, String, String) {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    raw_http_with_head(c.connect().await.unwrap(), method, path, &format!("{auth}{headers}"), body).await
}

async fn raw_http_with_head<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S, method: &str, path: &str, headers: &str, body: &str) -> (u16, String, String) {
    let length = if body.is_empty() && method == "GET" { String::new() } else { format!("Content-Length: {}\r\n", body.len()) };
    let req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}{length}\r\n{body}");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // A TLS peer may close without close_notify: keep what came.
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await.unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = match text.split_once("\r\n\r\n") {
        Some((head, body)) if head.to_ascii_lowercase().contains("transfer-encoding: chunked") => (head.to_string(), dechunk(body)),
        Some((head, body)) => (head.to_string(), body.to_string()),
        None => (text.clone(), String::new()),
    };
    (code, head, body)
}

/// A GET to the cluster with the admin token: (status, body); 0 when the answer is not HTTP.
pub async fn plain_http_get(c: &LocalCluster, path: &str) -> (u16, String) {
    raw_http(c, "GET", path, "", "").await
}

/// A plain-HTTP/1.1 GET to any server at `addr`: (status, body).
pub async fn plain_http_get_addr(addr: SocketAddr, path: &str) -> (u16, String) {
    raw_http_plain(addr, "GET", path, "", "").await
}

/// The body of a chunked HTTP/1.1 answer.
pub fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Writes `bytes` as the stored object `resource/namespace/name` of the
/// data directory `dir` (the cluster must be stopped): for tests of what
/// the cluster does with an object it cannot read back.
pub fn plant_object(dir: &std::path::Path, resource: &str, namespace: &str, name: &str, bytes: &[u8]) -> Result<(), crate::store::DataDirError> {
    crate::store::plant_object(dir, resource, namespace, name, bytes)
}
