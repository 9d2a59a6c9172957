//! What berth ships, installed as users install it, on the local cluster:
//! the chart by the real Helm 4 (which applies server-side: install,
//! upgrade, uninstall) and deploy/berth.yaml by the real kubectl. Helm is
//! `$BERTH_HELM`, else `/opt/berth-tools/helm/helm` (ci/validate.sh
//! installs it), else `helm` on PATH; kubectl is `$BERTH_KUBECTL`, else
//! `kubectl` on PATH. Where one is missing its test is ignored, with the
//! reason (build.rs looks), never passed without running.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_cluster::{ClusterConfig, LocalCluster};

fn helm_bin() -> String {
    let candidates = [std::env::var("BERTH_HELM").ok(), Some("/opt/berth-tools/helm/helm".to_string()), Some("helm".to_string())];
    candidates.into_iter().flatten().find(|h| std::process::Command::new(h).arg("version").output().is_ok_and(|o| o.status.success())).expect("helm: build.rs found one")
}

fn kubectl_bin() -> String {
    std::env::var("BERTH_KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// `bin args`, bounded: whether it succeeded, and what it printed.
async fn run(bin: &str, args: &[&str]) -> (bool, String) {
    let out = tokio::time::timeout(Duration::from_secs(120), tokio::process::Command::new(bin).args(args).kill_on_drop(true).output())
        .await
        .unwrap_or_else(|_| panic!("{bin} {args:?} timed out"))
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// kubectl against `kubeconfig`, its cache beside it.
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let (kc, cache) = (kubeconfig.to_string_lossy().to_string(), kubeconfig.with_file_name("cache").to_string_lossy().to_string());
    let mut all = vec!["--kubeconfig", kc.as_str(), "--cache-dir", cache.as_str()];
    all.extend_from_slice(args);
    run(&kubectl_bin(), &all).await
}

fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("berth-chart-{}-{}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn start() -> LocalCluster {
    LocalCluster::start(ClusterConfig { nodes: 2, ..Default::default() }).await.unwrap()
}

fn kubeconfig(c: &LocalCluster) -> PathBuf {
    let kc = temp_dir().join("kubeconfig");
    c.write_kubeconfig(&kc).unwrap();
    kc
}

fn chart() -> String {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/charts/berth")).to_string_lossy().to_string()
}

#[tokio::test]
#[cfg_attr(berth_no_helm, ignore = "helm is not here (ci/validate.sh installs Helm 4 under /opt/berth-tools/helm; BERTH_HELM names another)")]
async fn helm_install_upgrade_uninstall() {
    let helm = helm_bin();
    let c = LocalCluster::start(ClusterConfig { nodes: 2, ..Default::default() }).await.unwrap();
    // Helm's release storage is Secrets, and the chart creates a
    // ServiceAccount and RBAC objects: all must be served.
    let store = c.store().clone();
    let needed = [
        ("", "v1", "secrets"),
        ("", "v1", "serviceaccounts"),
        ("", "v1", "configmaps"),
        ("rbac.authorization.k8s.io", "v1", "clusterroles"),
        ("rbac.authorization.k8s.io", "v1", "rolebindings"),
        ("policy", "v1", "poddisruptionbudgets"),
    ];
    let missing: Vec<String> = needed.iter().filter(|(g, v, p)| store.lookup(g, v, p).is_none()).map(|(g, v, p)| format!("{p}.{g}/{v}")).collect();
    assert!(missing.is_empty(), "the local cluster does not serve {missing:?}");
    let dir = temp_dir();
    let kc = dir.join("kubeconfig");
    c.write_kubeconfig(&kc).unwrap();
    let kc = kc.to_string_lossy().to_string();
    let cache = dir.join("helm-cache").to_string_lossy().to_string();
    let config = dir.join("helm-config").to_string_lossy().to_string();
    let chart = chart();
    let helm_args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        a.extend(["--kubeconfig".into(), kc.clone(), "--namespace".into(), "default".into()]);
        a.extend(["--repository-cache".into(), cache.clone(), "--repository-config".into(), format!("{config}/repositories.yaml")]);
        a
    };
    let go = |extra: &[&str]| {
        let args = helm_args(extra);
        let helm = helm.clone();
        async move {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            run(&helm, &refs).await
        }
    };

    let (ok, out) = go(&["install", "berth", &chart]).await;
    assert!(ok, "helm install: {out}");
    let deployment = store.get(store.lookup("apps", "v1", "deployments").unwrap(), "default", "berth").unwrap();
    assert_eq!(deployment.value["spec"]["replicas"], 2, "{}", deployment.value);
    let wire: serde_json::Value = serde_json::from_slice(&deployment.bytes).unwrap();
    let managers: Vec<&str> = wire["metadata"]["managedFields"].as_array().unwrap().iter().filter_map(|e| e["manager"].as_str()).collect();
    assert!(managers.contains(&"helm"), "Helm applies server-side as manager helm: {managers:?}");
    for (g, v, p, ns, name) in [
        ("", "v1", "serviceaccounts", "default", "berth"),
        ("", "v1", "configmaps", "default", "berth-config"),
        ("rbac.authorization.k8s.io", "v1", "clusterroles", "", "berth"),
        ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "", "berth"),
    ] {
        let r = store.lookup(g, v, p).unwrap();
        assert!(store.get(r, ns, name).is_ok(), "{p} {name} after install");
    }
    let secrets = store.lookup("", "v1", "secrets").unwrap();
    assert!(store.get(secrets, "default", "sh.helm.release.v1.berth.v1").is_ok(), "release secret");

    // Upgrade: replicas 3 (leader election stays on).
    let (ok, out) = go(&["upgrade", "berth", &chart, "--set", "replicas=3"]).await;
    assert!(ok, "helm upgrade: {out}");
    let deployment = store.get(store.lookup("apps", "v1", "deployments").unwrap(), "default", "berth").unwrap();
    assert_eq!(deployment.value["spec"]["replicas"], 3, "{}", deployment.value);
    assert!(store.get(secrets, "default", "sh.helm.release.v1.berth.v2").is_ok(), "second release secret");

    let (ok, out) = go(&["uninstall", "berth"]).await;
    assert!(ok, "helm uninstall: {out}");
    assert!(store.get(store.lookup("apps", "v1", "deployments").unwrap(), "default", "berth").is_err(), "deployment gone");
    let r = store.lookup("", "v1", "serviceaccounts").unwrap();
    assert!(store.get(r, "default", "berth").is_err(), "service account gone");
    assert!(store.get(secrets, "default", "sh.helm.release.v1.berth.v1").is_err(), "release secrets gone");
    assert!(store.get(secrets, "default", "sh.helm.release.v1.berth.v2").is_err(), "release secrets gone");
    c.shutdown().await;
}

#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_applies_berths_own_manifests() {
    let c = start().await;
    let kc = kubeconfig(&c);
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/berth.yaml");
    let (ok, out) = kubectl(&kc, &["apply", "-f", manifest]).await;
    assert!(ok, "{out}");
    for expected in [
        "serviceaccount/berth created",
        "configmap/berth-config created",
        "clusterrolebinding.rbac.authorization.k8s.io/berth created",
        "role.rbac.authorization.k8s.io/berth-leader-election created",
        "rolebinding.rbac.authorization.k8s.io/berth-leader-election created",
        "deployment.apps/berth created",
    ] {
        assert!(out.contains(expected), "{expected:?} missing from:\n{out}");
    }
    let (ok, out) = kubectl(&kc, &["get", "serviceaccount,role,rolebinding", "-n", "kube-system", "-o", "name"]).await;
    assert!(ok && out.contains("serviceaccount/berth") && out.contains("role.rbac.authorization.k8s.io/berth-leader-election"), "{out}");
    // A second apply changes nothing.
    let (ok, out) = kubectl(&kc, &["apply", "-f", manifest]).await;
    assert!(ok && out.contains("serviceaccount/berth unchanged"), "{out}");
    c.shutdown().await;
}
