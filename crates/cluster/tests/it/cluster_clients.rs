//! The local cluster with the clients people already use: the core kinds a
//! chart touches (through kube-rs), and typed `kubectl create` commands
//! through the real kubectl (ignored, saying why, when it is not here).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_cluster::{ClusterConfig, LocalCluster};
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Secret, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use crate::cluster_kubectl::kubectl;

async fn start() -> LocalCluster {
    LocalCluster::start(ClusterConfig { nodes: 2, ..Default::default() }).await.unwrap()
}

fn typed<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap()
}

async fn token_review(c: &LocalCluster, token: &str) -> Value {
    let http = reqwest_like_post(c, "/apis/authentication.k8s.io/v1/tokenreviews", json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})).await;
    http.get("status").cloned().unwrap_or(Value::Null)
}

/// POST a JSON body through kube's client (raw request).
async fn reqwest_like_post(c: &LocalCluster, path: &str, body: Value) -> Value {
    let client = c.client().unwrap();
    let req = axum::http::Request::post(path).header("content-type", "application/json").body(serde_json::to_vec(&body).unwrap()).unwrap();
    client.request::<Value>(req).await.unwrap()
}

#[tokio::test]
async fn core_kinds_a_chart_touches_are_served() {
    let c = start().await;
    let client = c.client().unwrap();
    let pp = PostParams::default();

    // ServiceAccounts and their tokens, which TokenReview accepts while the account lives.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
    let sa = sas.create(&pp, &typed(json!({"metadata": {"name": "berth"}}))).await.unwrap();
    let tr: TokenRequest = typed(json!({"spec": {"audiences": ["berth"], "expirationSeconds": 3600}}));
    let answer = sas.create_token_request("berth", &pp, &tr).await.unwrap();
    let token = answer.status.as_ref().and_then(|s| s.token.clone()).unwrap();
    assert!(!token.is_empty());
    let st = token_review(&c, &token).await;
    assert_eq!(st["authenticated"], true, "{st}");
    assert_eq!(st["user"]["username"], "system:serviceaccount:kube-system:berth");
    assert_eq!(st["user"]["uid"].as_str(), sa.metadata.uid.as_deref());
    assert!(st["user"]["groups"].as_array().unwrap().contains(&json!("system:serviceaccounts:kube-system")));
    let short: TokenRequest = typed(json!({"spec": {"audiences": [], "expirationSeconds": 60}}));
    let e = sas.create_token_request("berth", &pp, &short).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("spec.expirationSeconds")), "{e:?}");
    sas.delete("berth", &DeleteParams::default()).await.unwrap();
    assert_ne!(token_review(&c, &token).await["authenticated"], true);
    let e = sas.create_token_request("berth", &pp, &tr).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 404), "{e:?}");

    // Secrets: stringData folds into data; watch and pages like the rest.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let mut watch = secrets.watch(&WatchParams::default().labels("owner=helm"), "0").await.unwrap().boxed();
    for i in 0..3 {
        let s: Secret = typed(json!({"metadata": {"name": format!("sh.helm.release.v1.berth.v{i}"), "labels": {"owner": "helm"}},
            "type": "helm.sh/release.v1", "stringData": {"release": format!("r{i}")}}));
        secrets.create(&pp, &s).await.unwrap();
    }
    secrets.create(&pp, &typed(json!({"metadata": {"name": "other"}, "data": {"k": "dg=="}}))).await.unwrap();
    let got = secrets.get("sh.helm.release.v1.berth.v1").await.unwrap();
    assert_eq!(got.data.unwrap()["release"].0, b"r1".to_vec());
    assert!(got.string_data.is_none());
    assert_eq!(got.type_.as_deref(), Some("helm.sh/release.v1"));
    assert_eq!(secrets.get("other").await.unwrap().type_.as_deref(), Some("Opaque"));
    let page = secrets.list(&ListParams::default().labels("owner=helm").limit(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    assert!(page.metadata.continue_.is_some());
    let mut added = 0;
    while added < 3 {
        let ev = tokio::time::timeout(Duration::from_secs(5), watch.next()).await.unwrap().unwrap().unwrap();
        // BOOKMARKs come on a timer and may fall between the ADDED events.
        if !matches!(ev, WatchEvent::Bookmark(_)) {
            assert!(matches!(ev, WatchEvent::Added(_)), "{ev:?}");
            added += 1;
        }
    }

    // ConfigMaps, the RBAC kinds, Endpoints and EndpointSlices.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&pp, &typed(json!({"metadata": {"name": "cfg"}, "data": {"a": "b"}}))).await.unwrap();
    let roles: Api<Role> = Api::namespaced(client.clone(), "default");
    roles.create(&pp, &typed(json!({"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}))).await.unwrap();
    let rbs: Api<RoleBinding> = Api::namespaced(client.clone(), "default");
    rbs.create(&pp, &typed(json!({"metadata": {"name": "rb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "berth", "namespace": "kube-system"}]}))).await.unwrap();
    let crs: Api<ClusterRole> = Api::all(client.clone());
    crs.create(&pp, &typed(json!({"metadata": {"name": "cr"}, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["list"]}]}))).await.unwrap();
    let crbs: Api<ClusterRoleBinding> = Api::all(client.clone());
    crbs.create(&pp, &typed(json!({"metadata": {"name": "crb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cr"}}))).await.unwrap();
    assert_eq!(crbs.get("crb").await.unwrap().role_ref.name, "cr");
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    eps.create(&pp, &typed(json!({"metadata": {"name": "svc"}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}))).await.unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    slices.create(&pp, &typed(json!({"metadata": {"name": "svc-x", "labels": {"kubernetes.io/service-name": "svc"}}, "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"]}]}))).await.unwrap();
    assert_eq!(slices.list(&ListParams::default().labels("kubernetes.io/service-name=svc")).await.unwrap().items.len(), 1);

    // A kind no controller touches is still served (the generic store).
    let jobs: Api<k8s_openapi::api::batch::v1::CronJob> = Api::namespaced(client.clone(), "default");
    jobs.create(&pp, &typed(json!({"metadata": {"name": "cj"}, "spec": {"schedule": "* * * * *",
        "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}}}))).await.unwrap();
    c.shutdown().await;
}

fn temp_kubeconfig(c: &LocalCluster) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("berth-clients-{}-{}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&d).unwrap();
    let kc = d.join("kubeconfig");
    c.write_kubeconfig(&kc).unwrap();
    kc
}

/// kubectl's typed `create` commands send `application/vnd.kubernetes.protobuf`
/// (and do not fall back to JSON): the cluster decodes them into the objects
/// the same commands' JSON would make.
#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn typed_kubectl_create_commands_work() {
    let c = start().await;
    let kc = temp_kubeconfig(&c);
    for (args, expected) in [
        (vec!["create", "namespace", "team-a"], "namespace/team-a created"),
        (vec!["create", "configmap", "cfg", "-n", "team-a", "--from-literal=a=b"], "configmap/cfg created"),
        (vec!["create", "secret", "generic", "s", "-n", "team-a", "--from-literal=password=hunter2"], "secret/s created"),
        (vec!["create", "serviceaccount", "sa", "-n", "team-a"], "serviceaccount/sa created"),
        (vec!["create", "deployment", "idle", "-n", "team-a", "--image=nginx", "--replicas=0"], "deployment.apps/idle created"),
        (vec!["create", "deployment", "web", "-n", "team-a", "--image=nginx", "--replicas=3"], "deployment.apps/web created"),
        (vec!["create", "service", "clusterip", "svc", "-n", "team-a", "--tcp=80:8080"], "service/svc created"),
        (vec!["create", "job", "j", "-n", "team-a", "--image=busybox"], "job.batch/j created"),
        (vec!["create", "cronjob", "cj", "-n", "team-a", "--image=busybox", "--schedule=*/5 * * * *"], "cronjob.batch/cj created"),
        (vec!["create", "role", "r", "-n", "team-a", "--verb=get,list", "--resource=pods"], "role.rbac.authorization.k8s.io/r created"),
        (vec!["create", "rolebinding", "rb", "-n", "team-a", "--role=r", "--serviceaccount=team-a:sa"], "rolebinding.rbac.authorization.k8s.io/rb created"),
        (vec!["create", "clusterrole", "cr", "--verb=get", "--resource=nodes"], "clusterrole.rbac.authorization.k8s.io/cr created"),
        (vec!["create", "clusterrolebinding", "crb", "--clusterrole=cr", "--user=bob"], "clusterrolebinding.rbac.authorization.k8s.io/crb created"),
        (vec!["create", "quota", "q", "-n", "team-a", "--hard=pods=10,cpu=2"], "resourcequota/q created"),
        (vec!["create", "pdb", "p", "-n", "team-a", "--selector=app=web", "--min-available=1"], "poddisruptionbudget.policy/p created"),
        (vec!["create", "priorityclass", "pc", "--value=1000", "--description=test"], "priorityclass.scheduling.k8s.io/pc created"),
    ] {
        let (ok, out) = kubectl(&kc, &args).await;
        assert!(ok && out.contains(expected), "kubectl {args:?}:\n{out}");
    }
    let store = c.store();
    let ns: k8s_openapi::api::core::v1::Namespace = store.get_typed("", "team-a").unwrap();
    assert_eq!(ns.metadata.name.as_deref(), Some("team-a"));
    let secret: Secret = store.get_typed("team-a", "s").unwrap();
    assert_eq!(secret.data.unwrap()["password"].0, b"hunter2".to_vec());
    let cm: ConfigMap = store.get_typed("team-a", "cfg").unwrap();
    assert_eq!(cm.data.unwrap()["a"], "b");
    let sa: ServiceAccount = store.get_typed("team-a", "sa").unwrap();
    assert_eq!(sa.metadata.namespace.as_deref(), Some("team-a"));

    // replicas: 0 is a set pointer, kept (not defaulted to 1); empty strings are not stored.
    let idle: k8s_openapi::api::apps::v1::Deployment = store.get_typed("team-a", "idle").unwrap();
    assert_eq!(idle.spec.replicas, Some(0));
    let d: k8s_openapi::api::apps::v1::Deployment = store.get_typed("team-a", "web").unwrap();
    let spec = d.spec;
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(spec.selector.match_labels.unwrap()["app"], "web");
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.containers[0].image.as_deref(), Some("nginx"));
    let raw = store.get(berth_cluster::resources::DEPLOYMENTS, "team-a", "web").unwrap();
    let raw = &raw.value;
    assert!(raw["spec"]["template"]["spec"].get("schedulerName").is_none_or(|s| s != ""), "{raw}");
    assert!(raw["metadata"].get("generateName").is_none(), "{raw}");

    let svc: k8s_openapi::api::core::v1::Service = store.get_typed("team-a", "svc").unwrap();
    let svc = svc.spec.unwrap();
    assert_eq!(svc.type_.as_deref(), Some("ClusterIP"));
    let port = &svc.ports.unwrap()[0];
    assert_eq!((port.port, port.protocol.as_deref()), (80, Some("TCP")));
    assert_eq!(port.target_port, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(8080)));

    let job: k8s_openapi::api::batch::v1::Job = store.get_typed("team-a", "j").unwrap();
    let job_pod = job.spec.unwrap().template.spec.unwrap();
    assert_eq!(job_pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(job_pod.containers[0].image.as_deref(), Some("busybox"));
    let cj: k8s_openapi::api::batch::v1::CronJob = store.get_typed("team-a", "cj").unwrap();
    assert_eq!(cj.spec.schedule, "*/5 * * * *");

    let role: Role = store.get_typed("team-a", "r").unwrap();
    let rule = &role.rules.unwrap()[0];
    assert_eq!(rule.verbs, vec!["get", "list"]);
    assert_eq!(rule.resources.as_deref(), Some(&["pods".to_string()][..]));
    assert_eq!(rule.api_groups.as_deref(), Some(&[String::new()][..]));
    let rb: RoleBinding = store.get_typed("team-a", "rb").unwrap();
    assert_eq!((rb.role_ref.kind.as_str(), rb.role_ref.name.as_str()), ("Role", "r"));
    let subject = &rb.subjects.unwrap()[0];
    assert_eq!((subject.kind.as_str(), subject.name.as_str(), subject.namespace.as_deref()), ("ServiceAccount", "sa", Some("team-a")));
    let cr: ClusterRole = store.get_typed("", "cr").unwrap();
    assert_eq!(cr.rules.unwrap()[0].resources.as_deref(), Some(&["nodes".to_string()][..]));
    let crb: ClusterRoleBinding = store.get_typed("", "crb").unwrap();
    assert_eq!(crb.role_ref.name, "cr");
    assert_eq!(crb.subjects.unwrap()[0].name, "bob");

    let quota: k8s_openapi::api::core::v1::ResourceQuota = store.get_typed("team-a", "q").unwrap();
    let hard = quota.spec.unwrap().hard.unwrap();
    assert_eq!((hard["pods"].0.as_str(), hard["cpu"].0.as_str()), ("10", "2"));
    let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget = store.get_typed("team-a", "p").unwrap();
    let pdb = pdb.spec.unwrap();
    assert_eq!(pdb.min_available, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)));
    assert_eq!(pdb.selector.unwrap().match_labels.unwrap()["app"], "web");
    let pc: k8s_openapi::api::scheduling::v1::PriorityClass = store.get_typed("", "pc").unwrap();
    assert_eq!((pc.value, pc.description.as_deref()), (Some(1000), Some("test")));
    assert_eq!(pc.global_default, None);

    // A TokenRequest (serviceaccounts/token) sent as protobuf; TokenReview accepts the token.
    let (ok, token) = kubectl(&kc, &["create", "token", "sa", "-n", "team-a"]).await;
    assert!(ok, "{token}");
    let st = token_review(&c, token.trim()).await;
    assert_eq!(st["authenticated"], true, "{st}");
    assert_eq!(st["user"]["username"], "system:serviceaccount:team-a:sa");

    let (ok, out) = kubectl(&kc, &["create", "namespace", "team-a"]).await;
    assert!(!ok && out.contains("AlreadyExists"), "{out}");

    // A malformed protobuf body is a 400 naming the fault, and the cluster keeps serving.
    let client = c.client().unwrap();
    let mut body = b"k8s\0".to_vec();
    body.extend_from_slice(&[0x0a, 0x0d, 0x0a, 0x02, b'v', b'1', 0x12, 0x07, b'S', b'e', b'c', b'r', b'e', b't', 0x12, 0x05, 0x0a, 0x09]);
    let req = axum::http::Request::post("/api/v1/namespaces/team-a/secrets")
        .header("content-type", "application/vnd.kubernetes.protobuf")
        .body(body)
        .unwrap();
    let e = client.request::<Value>(req).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 400 && s.message.contains("malformed protobuf")), "{e:?}");
    let (ok, out) = kubectl(&kc, &["create", "configmap", "after", "-n", "team-a"]).await;
    assert!(ok, "{out}");
    c.shutdown().await;
}
