//! The local cluster driven by kubectl. Skips (with a message) when
//! kubectl is not installed; CI installs it.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_cluster::{ClusterConfig, KubeletConfig, LocalCluster};
use k8s_openapi::api::core::v1::{Event, Pod};
use serde_json::json;

/// The kubectl binary: `$BERTH_KUBECTL` or `kubectl` on PATH.
fn kubectl_bin() -> String {
    std::env::var("BERTH_KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

pub(crate) fn kubectl_available() -> bool {
    std::process::Command::new(kubectl_bin()).arg("version").arg("--client").output().is_ok_and(|o| o.status.success())
}

/// Run kubectl against `kubeconfig` (its discovery and OpenAPI cache beside
/// it, so tests never share one): whether it succeeded, and what it printed.
pub(crate) async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let cache = kubeconfig.with_file_name("cache");
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(&cache)
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
    .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

pub(crate) fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("berth-kubectl-{}-{}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test]
async fn kubectl_get_create_delete_events() {
    if !kubectl_available() {
        eprintln!("SKIPPED: kubectl is not installed (CI installs it: see README of the cluster module)");
        return;
    }
    let cfg = ClusterConfig { nodes: 4, kubelet: KubeletConfig { enabled: true, start_delay: Duration::from_millis(10) }, ..Default::default() };
    let c = LocalCluster::start(cfg).await.unwrap();
    let dir = temp_dir();
    let kc = dir.join("kubeconfig");
    c.write_kubeconfig(&kc).unwrap();

    let (ok, out) = kubectl(&kc, &["get", "nodes"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("node-3") && out.contains("Ready"), "{out}");

    let (ok, out) = kubectl(&kc, &["get", "nodes", "-l", "topology.kubernetes.io/zone=zone-b", "-o", "name"]).await;
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "node/node-1");

    let pod_yaml = dir.join("pod.yaml");
    std::fs::write(
        &pod_yaml,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kp\n  labels:\n    app: k\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: nginx\n",
    )
    .unwrap();
    let (ok, out) = kubectl(&kc, &["create", "-f", pod_yaml.to_str().unwrap()]).await;
    assert!(ok, "{out}");
    assert!(out.contains("pod/kp created"), "{out}");
    let (ok, out) = kubectl(&kc, &["create", "-f", pod_yaml.to_str().unwrap()]).await;
    assert!(!ok && out.contains("AlreadyExists"), "{out}");

    let (ok, out) = kubectl(&kc, &["get", "pods", "-o", "wide"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("kp") && out.contains("Pending"), "{out}");

    // Bind it (as a scheduler would) and watch kubectl show it running there.
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "kp"}, "target": {"kind": "Node", "name": "node-2"}});
    c.store().bind("default", "kp", binding).unwrap();
    // kubectl wait watches the pod until the kubelet makes it Ready.
    let (ok, out) = kubectl(&kc, &["wait", "--for=condition=Ready", "pod/kp", "--timeout=10s"]).await;
    assert!(ok && out.contains("condition met"), "{out}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (ok, out) = kubectl(&kc, &["get", "pods", "-o", "wide"]).await;
        assert!(ok, "{out}");
        if out.contains("Running") && out.contains("node-2") && out.contains("1/1") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{out}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (ok, out) = kubectl(&kc, &["get", "pod", "kp", "-o", "json"]).await;
    assert!(ok, "{out}");
    let p: Pod = serde_json::from_str(&out).unwrap();
    assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("node-2"));

    let (ok, out) = kubectl(&kc, &["label", "pod", "kp", "tier=web"]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&kc, &["get", "pods", "-l", "tier=web", "-o", "name"]).await;
    assert!(ok && out.trim() == "pod/kp", "{out}");

    // Events (core/v1), as `kubectl get events` reads them.
    let ev: Event = serde_json::from_value(json!({
        "metadata": {"name": "kp.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "kp", "namespace": "default"},
        "reason": "Scheduled", "message": "Successfully assigned default/kp to node-2", "type": "Normal",
        "source": {"component": "berth"}, "count": 1
    }))
    .unwrap();
    c.store().create_typed(&ev).unwrap();
    let (ok, out) = kubectl(&kc, &["get", "events"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("Scheduled") && out.contains("pod/kp"), "{out}");
    // events.k8s.io/v1 events (what a scheduler writes) show up too.
    let ev1: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "kp.2", "namespace": "default"},
        "regarding": {"kind": "Pod", "name": "kp", "namespace": "default"},
        "reason": "Preempted", "note": "by a higher priority pod", "type": "Normal",
        "action": "Preempting", "reportingController": "berth", "reportingInstance": "berth-0",
        "eventTime": "2026-01-01T00:00:00.000000Z"
    }))
    .unwrap();
    c.store().create_typed(&ev1).unwrap();
    let (ok, out) = kubectl(&kc, &["get", "events"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("Preempted") && out.contains("by a higher priority pod"), "{out}");

    // Graceful delete (1s grace): kubectl waits for it to disappear.
    let (ok, out) = kubectl(&kc, &["delete", "pod", "kp"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("pod \"kp\" deleted"), "{out}");
    let (ok, out) = kubectl(&kc, &["get", "pods"]).await;
    assert!(ok && out.contains("No resources found"), "{out}");
    let (ok, out) = kubectl(&kc, &["delete", "pod", "kp"]).await;
    assert!(!ok && out.contains("NotFound"), "{out}");

    let (ok, out) = kubectl(&kc, &["api-resources"]).await;
    assert!(ok && out.contains("poddisruptionbudgets") && out.contains("priorityclasses"), "{out}");
    let (ok, out) = kubectl(&kc, &["get", "ns"]).await;
    assert!(ok && out.contains("kube-system") && out.contains("Active"), "{out}");

    let _ = std::fs::remove_dir_all(&dir);
    c.shutdown().await;
}
