//! The local cluster with `--authorization-mode RBAC`: bearer tokens
//! (static and ServiceAccount), RBAC authorization with upstream's 403s,
//! escalation checks, the access reviews, `kubectl auth`.
#![allow(clippy::unwrap_used)]

use berth_cluster::auth::{AuthConfig, StaticToken};
use berth_cluster::authz::AuthorizationMode;
use berth_cluster::{ClusterConfig, LocalCluster};
use serde_json::{Value, json};

use crate::cluster_kubectl::{kubectl, temp_dir};
use crate::support::{eventually, raw_http_as};

const ADMIN: &str = "rbac-admin-token";
const EVE: &str = "rbac-eve-token";

async fn rbac_cluster() -> LocalCluster {
    crate::support::init_logs();
    let auth = AuthConfig { tokens: vec![StaticToken::new(ADMIN, "admin", &["system:masters"]), StaticToken::new(EVE, "eve", &[])], ..AuthConfig::default() };
    LocalCluster::start(ClusterConfig { nodes: 1, auth, authorization: AuthorizationMode::Rbac, ..Default::default() }).await.unwrap()
}

/// One HTTP/1.1 request with an optional bearer token: (status, body as JSON or a string).
async fn call(c: &LocalCluster, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> (u16, Value) {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let ct = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
    let (code, body) = raw_http_as(c, token, method, path, &format!("Content-Type: {ct}\r\n"), &body).await;
    (code, serde_json::from_str(&body).unwrap_or(Value::String(body)))
}

async fn admin(c: &LocalCluster, method: &str, path: &str, body: Value) -> Value {
    let (code, v) = call(c, method, path, Some(ADMIN), (!body.is_null()).then_some(body)).await;
    assert!((200..300).contains(&code), "{method} {path}: {code} {v}");
    v
}

async fn sa_token(c: &LocalCluster, ns: &str, name: &str) -> String {
    admin(c, "POST", &format!("/api/v1/namespaces/{ns}/serviceaccounts"), json!({"metadata": {"name": name}})).await;
    let tr = admin(c, "POST", &format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token"), json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})).await;
    tr["status"]["token"].as_str().unwrap().to_string()
}

async fn sar(c: &LocalCluster, spec: Value) -> Value {
    admin(c, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})).await["status"].clone()
}

#[tokio::test]
async fn anonymous_and_unknown_tokens() {
    let c = rbac_cluster().await;
    for p in ["/healthz", "/livez", "/readyz", "/version"] {
        let (code, _) = call(&c, "GET", p, None, None).await;
        assert_eq!(code, 200, "{p}");
    }
    let (code, v) = call(&c, "GET", "/api/v1/namespaces/default/pods", None, None).await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(v["message"], r#"pods is forbidden: User "system:anonymous" cannot list resource "pods" in API group "" in the namespace "default""#);
    assert_eq!(v["reason"], "Forbidden");
    let (code, v) = call(&c, "GET", "/apis", None, None).await;
    assert_eq!(code, 403, "{v}");
    let (code, v) = call(&c, "GET", "/api/v1/pods", Some("garbage"), None).await;
    assert_eq!((code, v["reason"].as_str(), v["code"].as_i64()), (401, Some("Unauthorized"), Some(401)), "{v}");
    // Even health is refused to a bad token, as kube-apiserver does.
    let (code, _) = call(&c, "GET", "/healthz", Some("garbage"), None).await;
    assert_eq!(code, 401);
    // The admin token reads everything; the bootstrap policy is in the store.
    let roles = admin(&c, "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin", json!(null)).await;
    assert_eq!(roles["metadata"]["name"], "cluster-admin");
    // Every namespace gets a default ServiceAccount.
    admin(&c, "POST", "/api/v1/namespaces", json!({"metadata": {"name": "fresh"}})).await;
    eventually(10, "default ServiceAccount", || async { (call(&c, "GET", "/api/v1/namespaces/fresh/serviceaccounts/default", Some(ADMIN), None).await.0 == 200).then_some(()) }).await;
    c.shutdown().await;
}

/// kube-controller-manager's root-ca-cert-publisher: every namespace has
/// `kube-root-ca.crt` with the cluster's CA as `ca.crt`, recreated when
/// deleted and put back when edited.
#[tokio::test]
async fn every_namespace_publishes_the_root_ca() {
    let c = rbac_cluster().await;
    let ca = c.identity().map(|i| i.ca_pem().to_string()).unwrap_or_default();
    assert!(ca.contains("BEGIN CERTIFICATE"), "the cluster serves TLS by default");
    let path = |ns: &str| format!("/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt");
    let published = |ns: &'static str| {
        let (c, ca, path) = (&c, ca.clone(), path(ns));
        async move {
            let (code, v) = call(c, "GET", &path, Some(ADMIN), None).await;
            (code == 200 && v["data"]["ca.crt"] == ca.as_str()).then_some(v)
        }
    };
    for ns in ["default", "kube-system", "kube-public"] {
        eventually(10, ns, || published(ns)).await;
    }
    admin(&c, "POST", "/api/v1/namespaces", json!({"metadata": {"name": "fresh"}})).await;
    let v = eventually(10, "a new namespace's root CA", || published("fresh")).await;
    assert!(v["metadata"]["annotations"]["kubernetes.io/description"].as_str().unwrap().starts_with("Contains a CA bundle"), "{v}");
    admin(&c, "DELETE", &path("fresh"), json!(null)).await;
    eventually(10, "recreated after a delete", || published("fresh")).await;
    admin(&c, "PATCH", &path("fresh"), json!({"data": {"ca.crt": "forged"}})).await;
    eventually(10, "put back after an edit", || published("fresh")).await;
    c.shutdown().await;
}

#[tokio::test]
async fn a_service_account_that_may_get_pods_may_not_delete_them() {
    let c = rbac_cluster().await;
    admin(&c, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", json!({"metadata": {"name": "pod-getter"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})).await;
    admin(
        &c,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        json!({"metadata": {"name": "sa-gets-pods"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-getter"}, "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}]}),
    )
    .await;
    admin(&c, "POST", "/api/v1/namespaces/default/pods", json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})).await;
    let token = sa_token(&c, "default", "sa").await;
    let (code, v) = call(&c, "GET", "/api/v1/namespaces/default/pods/p", Some(&token), None).await;
    assert_eq!(code, 200, "{v}");
    let (code, v) = call(&c, "DELETE", "/api/v1/namespaces/default/pods/p", Some(&token), None).await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(v["message"], r#"pods "p" is forbidden: User "system:serviceaccount:default:sa" cannot delete resource "pods" in API group "" in the namespace "default""#);
    assert_eq!(v["details"], json!({"name": "p", "kind": "pods"}));
    // The token stops working with its account.
    admin(&c, "DELETE", "/api/v1/namespaces/default/serviceaccounts/sa", json!(null)).await;
    let (code, _) = call(&c, "GET", "/api/v1/namespaces/default/pods/p", Some(&token), None).await;
    assert_eq!(code, 401);
    c.shutdown().await;
}

#[tokio::test]
async fn binding_anonymous_to_cluster_admin_needs_bind() {
    let c = rbac_cluster().await;
    admin(&c, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", json!({"metadata": {"name": "rbac-editor"}, "rules": [
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"], "verbs": ["*"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["get", "create", "update", "patch"]},
        ]})).await;
    admin(
        &c,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"metadata": {"name": "eve-edits"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "rbac-editor"}, "subjects": [{"kind": "User", "name": "eve"}]}),
    )
    .await;
    let grant = json!({"metadata": {"name": "open"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}, "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous"}]});
    let (code, v) = call(&c, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", Some(EVE), Some(grant.clone())).await;
    assert_eq!(code, 403, "{v}");
    let msg = v["message"].as_str().unwrap_or_default();
    assert!(msg.starts_with(r#"clusterrolebindings.rbac.authorization.k8s.io "open" is forbidden: user "eve" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:"#), "{msg}");
    let (code, _) = call(&c, "GET", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/open", Some(ADMIN), None).await;
    assert_eq!(code, 404, "the refused binding must not be stored");
    // A dry run is checked too, and an allowed binding passes.
    let (code, _) = call(&c, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings?dryRun=All", Some(EVE), Some(grant)).await;
    assert_eq!(code, 403);
    let harmless = json!({"metadata": {"name": "eve-too"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "rbac-editor"}, "subjects": [{"kind": "User", "name": "eve2"}]});
    let (code, v) = call(&c, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", Some(EVE), Some(harmless)).await;
    assert_eq!(code, 201, "{v}");
    // A patch that would grant more than eve holds is refused on what it would store.
    let (code, v) = call(&c, "PATCH", "/apis/rbac.authorization.k8s.io/v1/clusterroles/rbac-editor", Some(EVE), Some(json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}]}))).await;
    assert_eq!(code, 403, "{v}");
    let msg = v["message"].as_str().unwrap_or_default();
    assert!(msg.starts_with(r#"clusterroles.rbac.authorization.k8s.io "rbac-editor" is forbidden: user "eve" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:"#), "{msg}");
    let stored = admin(&c, "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/rbac-editor", json!(null)).await;
    assert_eq!(stored["rules"].as_array().map(Vec::len), Some(2), "{stored}");
    c.shutdown().await;
}

#[tokio::test]
async fn subject_access_reviews_follow_the_policy() {
    let c = rbac_cluster().await;
    let spec = json!({"user": "bob", "groups": ["system:authenticated"], "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"}});
    assert_eq!(sar(&c, spec.clone()).await["allowed"], false);
    admin(
        &c,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        json!({"metadata": {"name": "bob-view"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}, "subjects": [{"kind": "User", "name": "bob"}]}),
    )
    .await;
    let st = sar(&c, spec).await;
    assert_eq!(st["allowed"], true, "{st}");
    assert_eq!(st["reason"], r#"RBAC: allowed by RoleBinding "bob-view/default" of ClusterRole "view" to User "bob""#);

    // nonResourceURLs: a ServiceAccount bound to get /metrics may, another may not.
    admin(&c, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", json!({"metadata": {"name": "metrics-reader"}, "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]})).await;
    admin(
        &c,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"metadata": {"name": "metrics"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"}, "subjects": [{"kind": "ServiceAccount", "name": "prom", "namespace": "monitoring"}]}),
    )
    .await;
    let metrics = |user: &str| json!({"user": user, "groups": ["system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"], "nonResourceAttributes": {"verb": "get", "path": "/metrics"}});
    assert_eq!(sar(&c, metrics("system:serviceaccount:monitoring:prom")).await["allowed"], true);
    assert_eq!(sar(&c, metrics("system:serviceaccount:monitoring:other")).await["allowed"], false);

    // The reviews of one's own access, for a ServiceAccount.
    let token = sa_token(&c, "default", "me").await;
    let (code, v) = call(&c, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", Some(&token), Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}))).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["status"]["userInfo"]["username"], "system:serviceaccount:default:me");
    let ssar = |verb: &str| json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": {"namespace": "default", "verb": verb, "resource": "selfsubjectaccessreviews", "group": "authorization.k8s.io"}}});
    let (code, v) = call(&c, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", Some(&token), Some(ssar("create"))).await;
    assert_eq!((code, &v["status"]["allowed"]), (201, &json!(true)), "{v}");
    let (_, v) = call(&c, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", Some(&token), Some(ssar("delete"))).await;
    assert_eq!(v["status"]["allowed"], false, "{v}");
    let (code, v) = call(&c, "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", Some(&token), Some(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": "default"}}))).await;
    assert_eq!(code, 201, "{v}");
    assert!(v["status"]["resourceRules"].as_array().is_some_and(|r| r.iter().any(|r| r["resources"].as_array().is_some_and(|x| x.contains(&json!("selfsubjectaccessreviews"))))), "{v}");
    // Anonymous may not ask (system:basic-user is for the authenticated).
    let (code, _) = call(&c, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", None, Some(json!({}))).await;
    assert_eq!(code, 403);
    c.shutdown().await;
}

#[tokio::test]
async fn kube_rs_clients_carry_the_admin_token() {
    let c = rbac_cluster().await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(c.client().unwrap());
    pods.list(&Default::default()).await.unwrap();
    assert!(c.kubeconfig_yaml().contains(&format!("token: {ADMIN}")));
    c.shutdown().await;
}

/// kubectl gets the kubeconfig the cluster writes (HTTPS with the
/// cluster's CA, the admin token): it is the admin. With a
/// ServiceAccount's token it is refused in upstream's words; with a token
/// the cluster never issued it gets 401. `--authorization-mode AlwaysAllow`
/// treats that token as no credential and lets the anonymous do
/// everything. (A kubeconfig with no credential at all makes kubectl
/// prompt for a username over HTTPS; anonymous requests are checked over
/// raw HTTP in `anonymous_and_unknown_tokens`.)
#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_auth_can_i_and_whoami() {
    let dir = temp_dir();
    let kc = dir.join("kubeconfig");

    // The defaults: HTTPS, RBAC; the written kubeconfig is the admin's.
    let d = LocalCluster::start(ClusterConfig { nodes: 1, ..Default::default() }).await.unwrap();
    assert!(d.url().starts_with("https://"), "{}", d.url());
    d.write_kubeconfig(&kc).unwrap();
    let (ok, out) = kubectl(&kc, &["auth", "whoami", "-o", "json"]).await;
    assert!(ok && out.contains("berth-admin") && out.contains("system:masters"), "{out}");
    d.shutdown().await;

    let c = rbac_cluster().await;
    c.write_kubeconfig(&kc).unwrap();
    let (ok, out) = kubectl(&kc, &["auth", "can-i", "delete", "pods"]).await;
    assert!(ok && out.trim() == "yes", "{out}");
    let (ok, out) = kubectl(&kc, &["get", "clusterroles", "-o", "name"]).await;
    assert!(ok && out.contains("clusterrole.rbac.authorization.k8s.io/cluster-admin"), "{out}");
    let (ok, out) = kubectl(&kc, &["get", "serviceaccounts", "-n", "kube-system", "-o", "name"]).await;
    assert!(ok && out.contains("serviceaccount/default"), "{out}");

    // A ServiceAccount with no role: refused in upstream's words.
    let token = sa_token(&c, "default", "nobody").await;
    let sa = dir.join("sa-kubeconfig");
    std::fs::write(&sa, c.kubeconfig_yaml().replace(c.admin_token(), &token)).unwrap();
    let (ok, out) = kubectl(&sa, &["auth", "whoami", "-o", "json"]).await;
    assert!(ok && out.contains("system:serviceaccount:default:nobody"), "{out}");
    let (ok, out) = kubectl(&sa, &["auth", "can-i", "get", "pods"]).await;
    assert!(!ok && out.trim().starts_with("no"), "{out}");
    let (ok, out) = kubectl(&sa, &["get", "pods"]).await;
    assert!(!ok && out.contains(r#"pods is forbidden: User "system:serviceaccount:default:nobody" cannot list resource "pods" in API group "" in the namespace "default""#), "{out}");

    // A token the cluster never issued: 401.
    let anon = dir.join("anon-kubeconfig");
    std::fs::write(&anon, c.kubeconfig_yaml().replace(c.admin_token(), "not-a-token")).unwrap();
    let (ok, out) = kubectl(&anon, &["get", "pods"]).await;
    assert!(!ok && out.contains("Unauthorized"), "{out}");
    c.shutdown().await;

    // Open: that token is no credential, and the anonymous may do everything.
    let open = LocalCluster::start(ClusterConfig { nodes: 1, authorization: AuthorizationMode::AlwaysAllow, ..Default::default() }).await.unwrap();
    std::fs::write(&anon, open.kubeconfig_yaml().replace(open.admin_token(), "not-a-token")).unwrap();
    let (ok, out) = kubectl(&anon, &["auth", "whoami", "-o", "json"]).await;
    assert!(ok && out.contains("system:anonymous"), "{out}");
    let (ok, out) = kubectl(&anon, &["auth", "can-i", "delete", "pods"]).await;
    assert!(ok && out.trim() == "yes", "{out}");
    let (ok, out) = kubectl(&anon, &["auth", "can-i", "--list"]).await;
    assert!(ok && out.contains("*.*"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
    open.shutdown().await;
}
