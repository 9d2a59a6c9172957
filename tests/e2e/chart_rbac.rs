//! The chart's RBAC, proven on the local cluster (RBAC on, as by default):
//! the chart is installed with `helm install` (into kube-system, release
//! `berth`, `replicas=0` so that the chart's own Deployment runs no pod:
//! the berth under test is a process here), and `berth run`, as a process
//! with a token of the chart's ServiceAccount, schedules a Deployment of 30
//! pods. With one rule removed at a time from the installed ClusterRole,
//! the matching operation fails and berth's log carries kube-apiserver's
//! Forbidden message: the `pods/binding` create, the `events` create, and
//! the `pods` watch (then readiness says so too).
//!
//! Helm is `$BERTH_HELM`, else `/opt/berth-tools/helm/helm` (installed by
//! ci/validate.sh), else `helm` on PATH. Without helm the test says so and
//! applies the RBAC documents of deploy/berth.yaml (what the chart renders
//! with its defaults) instead.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use berth_cluster::{ClusterConfig, LocalCluster};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::e2e_support::*;

const SA: &str = "system:serviceaccount:kube-system:berth";

/// The documents of `kinds` in deploy/berth.yaml: (kind, namespace, name, YAML).
fn manifests(kinds: &[&str]) -> Vec<(String, Option<String>, String, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/berth.yaml")).unwrap();
    let field = |doc: &str, prefix: &str| doc.lines().find_map(|l| l.strip_prefix(prefix)).map(|v| v.trim().trim_matches('"').to_string());
    text.split("\n---\n")
        .filter_map(|doc| {
            let kind = field(doc, "kind: ")?;
            kinds.contains(&kind.as_str()).then(|| (kind, field(doc, "  namespace: "), field(doc, "  name: ").unwrap(), doc.to_string()))
        })
        .collect()
}

/// Applies the chart's ServiceAccount, roles and bindings; returns a token of its ServiceAccount.
pub(crate) async fn apply_chart_rbac(admin: &kube::Client) -> String {
    let plural = |k: &str| match k {
        "ServiceAccount" => "/api/v1/namespaces/{ns}/serviceaccounts",
        "ClusterRole" => "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "ClusterRoleBinding" => "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "Role" => "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        _ => "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    };
    let docs = manifests(&["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]);
    assert!(docs.len() >= 6, "{docs:?}");
    for (kind, ns, name, doc) in docs {
        let path = plural(&kind).replace("{ns}", ns.as_deref().unwrap_or("default"));
        let req = axum::http::Request::patch(format!("{path}/{name}?fieldManager=e2e")).header("Content-Type", "application/apply-patch+yaml").body(doc.into_bytes()).unwrap();
        admin.request_text(req).await.unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
    }
    service_account_token(admin).await
}

/// The ClusterRole `berth` with `edit` applied to its rules (a rule
/// removed, or a verb): the authorizer follows at once.
async fn edit_role(admin: &kube::Client, edit: impl Fn(&mut Vec<Value>)) {
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let role = serde_json::to_value(roles.get("berth").await.unwrap()).unwrap();
    let mut rules = role["rules"].as_array().cloned().unwrap();
    edit(&mut rules);
    roles.patch("berth", &PatchParams::default(), &Patch::Merge(json!({"rules": rules}))).await.unwrap();
}

fn is_rule(r: &Value, group: &str, resource: &str) -> bool {
    let has = |k: &str, v: &str| r[k].as_array().is_some_and(|a| a.iter().any(|x| x == v));
    has("apiGroups", group) && has("resources", resource)
}

/// The helm binary: `$BERTH_HELM`, ci/validate.sh's, or the one on PATH.
fn helm_bin() -> Option<String> {
    let candidates = [std::env::var("BERTH_HELM").ok(), Some("/opt/berth-tools/helm/helm".to_string()), Some("helm".to_string())];
    candidates.into_iter().flatten().find(|h| std::process::Command::new(h).arg("version").output().is_ok_and(|o| o.status.success()))
}

/// Installs charts/berth with `helm` into kube-system as release `berth`
/// (its Deployment scaled to 0 through values), then returns a token of
/// the ServiceAccount the chart created.
async fn helm_install_chart(helm: &str, admin: &kube::Client, kubeconfig: &Path, dir: &Path) -> String {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/berth");
    let args: Vec<String> = vec![
        "install".into(),
        "berth".into(),
        chart.to_string_lossy().into(),
        "--namespace".into(),
        "kube-system".into(),
        "--set".into(),
        "replicas=0".into(),
        "--kubeconfig".into(),
        kubeconfig.to_string_lossy().into(),
        "--repository-cache".into(),
        dir.join("helm-cache").to_string_lossy().into(),
        "--repository-config".into(),
        dir.join("helm-config/repositories.yaml").to_string_lossy().into(),
    ];
    let out = tokio::time::timeout(Duration::from_secs(120), tokio::process::Command::new(helm).args(&args).env("HELM_CONFIG_HOME", dir.join("helm-config")).env("HELM_CACHE_HOME", dir.join("helm-cache")).env("HELM_DATA_HOME", dir.join("helm-data")).kill_on_drop(true).output())
        .await
        .expect("helm install timed out")
        .unwrap();
    assert!(out.status.success(), "helm install: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // What helm created is what the rest of the test edits.
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let role = roles.get("berth").await.unwrap();
    let labels = role.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("app.kubernetes.io/managed-by").map(String::as_str), Some("Helm"), "the ClusterRole is the chart's");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(admin.clone(), "kube-system");
    let dep = deployments.get("berth").await.unwrap();
    assert_eq!(dep.spec.replicas, Some(0), "the chart's own berth runs no pod here");
    service_account_token(admin).await
}

/// A token (TokenRequest) of the ServiceAccount kube-system/berth.
async fn service_account_token(admin: &kube::Client) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "kube-system");
    let tr: k8s_openapi::api::authentication::v1::TokenRequest =
        sas.create_subresource("token", "berth", &PostParams::default(), &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})).await.unwrap();
    serde_json::to_value(tr.status).unwrap()["token"].as_str().unwrap().to_string()
}

/// `berth run` as the chart's ServiceAccount, logging to `log`.
struct Berth {
    child: tokio::process::Child,
    log: PathBuf,
    admin: std::net::SocketAddr,
}

impl Berth {
    fn start(dir: &Path, kubeconfig: &Path, name: &str) -> Berth {
        let cfg = dir.join("config.yaml");
        std::fs::write(
            &cfg,
            format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npodInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 2\nleaderElection:\n  leaderElect: true\n  resourceLock: leases\n  resourceName: berth\n  resourceNamespace: kube-system\nprofiles:\n- schedulerName: {PROFILE}\n"
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let admin = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let log = dir.join(format!("{name}.log"));
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
            .arg("run")
            .arg("--config")
            .arg(&cfg)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--bind-address", &admin.to_string()])
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Berth { child, log, admin }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log holds `text`.
    async fn logged(&self, secs: u64, text: &str) {
        let found = tokio::time::timeout(Duration::from_secs(secs), async {
            while !self.log().contains(text) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        assert!(found.is_ok(), "berth's log never said {text:?}:\n{}", self.log());
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

fn pod_of(name: &str) -> Pod {
    pod(name, "100m", json!({"metadata": {"labels": {"app": "single"}}}))
}

async fn bound(api: &Api<Pod>, name: &str) -> bool {
    api.get(name).await.ok().and_then(|p| p.spec?.node_name).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_rbac_schedules_and_each_missing_rule_is_named() {
    tokio::time::timeout(Duration::from_secs(240), async {
        init_logs();
        let controllers = berth_cluster::controllers::ControllersConfig { resync: Duration::from_millis(500), ..Default::default() };
        let c = LocalCluster::start(ClusterConfig { controllers, ..cluster_config(3, 3, "8", 110) }).await.unwrap();
        assert_eq!(c.config().authorization, berth_cluster::authz::AuthorizationMode::Rbac, "RBAC is the default");
        let admin = c.client().unwrap();
        let dir = std::env::temp_dir().join(format!("berth-chart-rbac-{}-{}", std::process::id(), rand::random::<u32>()));
        std::fs::create_dir_all(&dir).unwrap();
        let admin_kc = dir.join("admin-kubeconfig");
        c.write_kubeconfig(&admin_kc).unwrap();
        let token = match helm_bin() {
            Some(helm) => helm_install_chart(&helm, &admin, &admin_kc, &dir).await,
            None => {
                eprintln!("helm is not installed (ci/validate.sh installs it under /opt/berth-tools/helm): applying deploy/berth.yaml's RBAC documents instead of `helm install`");
                apply_chart_rbac(&admin).await
            }
        };
        let kc = dir.join("kubeconfig");
        std::fs::write(&kc, c.kubeconfig_yaml().replace(c.admin_token(), &token)).unwrap();

        // The chart's rights are enough: a Deployment of 30 pods is scheduled.
        let berth = Berth::start(&dir, &kc, "berth");
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::default_namespaced(admin.clone());
        let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 30, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"schedulerName": PROFILE, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}});
        deployments.create(&PostParams::default(), &serde_json::from_value(dep).unwrap()).await.unwrap();
        let pods: Api<Pod> = Api::default_namespaced(admin.clone());
        eventually(90, "the Deployment's 30 pods bound", || async {
            let list = pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
            (list.len() == 30 && list.iter().all(|p| node_of(p).is_some())).then_some(())
        })
        .await;
        let log = berth.log();
        assert!(!log.contains("is forbidden"), "a write of the chart's account was refused:\n{log}");

        // Without `create` on pods/binding: the binding is refused, in upstream's words.
        edit_role(&admin, |rules| rules.retain(|r| !is_rule(r, "", "pods/binding"))).await;
        pods.create(&PostParams::default(), &pod_of("no-binding")).await.unwrap();
        berth
            .logged(60, &format!(r#"pods "no-binding" is forbidden: User "{SA}" cannot create resource "pods/binding" in API group "" in the namespace "default""#))
            .await;
        assert!(!bound(&pods, "no-binding").await);
        edit_role(&admin, |rules| rules.push(json!({"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}))).await;
        eventually(60, "no-binding bound once the rule is back", || async { bound(&pods, "no-binding").await.then_some(()) }).await;

        // Without `create` on events: the pod is bound, its event refused.
        edit_role(&admin, |rules| rules.retain(|r| !is_rule(r, "events.k8s.io", "events"))).await;
        pods.create(&PostParams::default(), &pod_of("no-event")).await.unwrap();
        eventually(60, "no-event bound", || async { bound(&pods, "no-event").await.then_some(()) }).await;
        berth
            .logged(60, &format!(r#"events.events.k8s.io is forbidden: User "{SA}" cannot create resource "events" in API group "events.k8s.io" in the namespace "default""#))
            .await;
        edit_role(&admin, |rules| rules.push(json!({"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]}))).await;
        berth.stop().await;

        // Without `watch` on pods: a new berth lists but cannot watch; its
        // log and its readiness say why.
        edit_role(&admin, |rules| {
            for r in rules.iter_mut().filter(|r| is_rule(r, "", "pods")) {
                r["verbs"] = json!(["get", "list", "delete"]);
            }
        })
        .await;
        let berth = Berth::start(&dir, &kc, "berth-no-watch");
        let forbidden = format!(r#"pods is forbidden: User "{SA}" cannot watch resource "pods" in API group "" at the cluster scope"#);
        berth.logged(60, &forbidden).await;
        let (code, body) = eventually(30, "readiness names the refused watch", || async {
            match berth_daemon::admin::https_get(berth.admin, "/readyz?verbose", None, None).await {
                Ok((code, body)) if body.contains(&forbidden) => Some((code, body)),
                _ => None,
            }
        })
        .await;
        assert_eq!(code, 503, "{body}");
        berth.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
        c.shutdown().await;
    })
    .await
    .unwrap_or_else(|_| panic!("test deadline exceeded"));
}
