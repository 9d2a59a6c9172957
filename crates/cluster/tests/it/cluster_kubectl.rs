//! The local cluster driven by kubectl. Ignored, with the reason, where
//! kubectl is not here (crates/cluster/build.rs looks); CI installs it.
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
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_get_create_delete_events() {
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

/// kubectl's header line of `get KIND -o wide`: the column names, as the
/// Table's columnDefinitions name them (upper-cased by kubectl).
fn header(out: &str) -> Vec<String> {
    let line = out.lines().next().unwrap_or("");
    line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(str::to_string).collect()
}

/// One object of each kind below, applied in one go.
const PRINTED: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
data: {a: "1"}
---
apiVersion: v1
kind: Secret
metadata: {name: sec}
stringData: {a: "1"}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa}
---
apiVersion: v1
kind: Service
metadata: {name: svc}
spec:
  selector: {app: web}
  ports: [{port: 80, protocol: TCP}]
---
apiVersion: v1
kind: ReplicationController
metadata: {name: rc}
spec:
  replicas: 0
  selector: {app: rc}
  template:
    metadata: {labels: {app: rc}}
    spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: lease}
spec: {holderIdentity: me}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pdb}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: sc}
provisioner: example.com/sc
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: drv.example.com}
spec: {attachRequired: false}
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {name: va}
spec:
  attacher: drv.example.com
  nodeName: node-0
  source: {persistentVolumeName: pv-1}
---
apiVersion: apps/v1
kind: ControllerRevision
metadata: {name: cr}
revision: 1
data: {}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: r}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: rb}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: r}
subjects: [{kind: ServiceAccount, name: sa, namespace: default}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cr-test}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: crb-test}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cr-test}
subjects: [{kind: Group, name: testers, apiGroup: rbac.authorization.k8s.io}]
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec: {}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: claim}
spec:
  devices:
    requests: [{name: r, exactly: {deviceClassName: gpu}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: tmpl}
spec:
  spec:
    devices:
      requests: [{name: r, exactly: {deviceClassName: gpu}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: slice}
spec:
  driver: drv.example.com
  nodeName: node-0
  pool: {name: node-0, generation: 1, resourceSliceCount: 1}
  devices: [{name: d0}]
"#;

#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_get_wide_prints_upstream_columns() {
    let c = LocalCluster::start(ClusterConfig { nodes: 1, ..Default::default() }).await.unwrap();
    let dir = temp_dir();
    let kc = dir.join("kubeconfig");
    c.write_kubeconfig(&kc).unwrap();
    let manifest = dir.join("all.yaml");
    std::fs::write(&manifest, PRINTED).unwrap();
    let (ok, out) = kubectl(&kc, &["apply", "-f", manifest.to_str().unwrap()]).await;
    assert!(ok, "{out}");
    let cases: &[(&str, &[&str])] = &[
        ("configmaps", &["NAME", "DATA", "AGE"]),
        ("secrets", &["NAME", "TYPE", "DATA", "AGE"]),
        ("serviceaccounts", &["NAME", "SECRETS", "AGE"]),
        ("services", &["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "SELECTOR"]),
        ("replicationcontrollers", &["NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]),
        ("leases", &["NAME", "HOLDER", "AGE"]),
        ("priorityclasses", &["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]),
        ("poddisruptionbudgets", &["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"]),
        ("storageclasses", &["NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"]),
        ("csinodes", &["NAME", "DRIVERS", "AGE"]),
        (
            "csidrivers",
            &["NAME", "ATTACHREQUIRED", "PODINFOONMOUNT", "STORAGECAPACITY", "TOKENREQUESTS", "REQUIRESREPUBLISH", "SELINUXMOUNT", "MODES", "AGE"],
        ),
        ("volumeattachments", &["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"]),
        ("controllerrevisions", &["NAME", "CONTROLLER", "REVISION", "AGE"]),
        ("roles", &["NAME", "CREATED AT"]),
        ("rolebindings", &["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]),
        ("clusterroles", &["NAME", "CREATED AT"]),
        ("clusterrolebindings", &["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]),
        ("deviceclasses", &["NAME", "AGE"]),
        ("resourceclaims", &["NAME", "STATE", "AGE"]),
        ("resourceclaimtemplates", &["NAME", "AGE"]),
        ("resourceslices", &["NAME", "NODE", "DRIVER", "POOL", "AGE"]),
    ];
    for (kind, want) in cases {
        let (ok, out) = kubectl(&kc, &["get", kind, "-o", "wide"]).await;
        assert!(ok, "{kind}: {out}");
        assert_eq!(header(&out), *want, "{kind}: {out}");
    }
    // Cells, not only headers: the RoleBinding's subjects and the Service's ports.
    let (_, out) = kubectl(&kc, &["get", "rolebinding", "rb", "-o", "wide"]).await;
    assert!(out.contains("Role/r") && out.contains("default:sa"), "{out}");
    let (_, out) = kubectl(&kc, &["get", "service", "svc", "-o", "wide"]).await;
    assert!(out.contains("80/TCP") && out.contains("app=web"), "{out}");
    let (_, out) = kubectl(&kc, &["get", "resourceclaim", "claim"]).await;
    assert!(out.contains("pending"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
    c.shutdown().await;
}

/// Bind every unbound pod to `node-0`, or a DaemonSet's pod to its node
/// (a stand-in scheduler), until aborted.
fn binder(c: &LocalCluster) -> tokio::task::JoinHandle<()> {
    let store = c.store().clone();
    tokio::spawn(async move {
        loop {
            if let Ok(lr) = store.list(berth_cluster::resources::PODS, &berth_cluster::selector::Filter::default(), None, None) {
                for p in &lr.items {
                    let bound = p.value.pointer("/spec/nodeName").and_then(|n| n.as_str()).is_some_and(|n| !n.is_empty());
                    if !bound && p.value.pointer("/metadata/deletionTimestamp").is_none() {
                        // A DaemonSet's pod names its node in a matchFields term.
                        let node = p
                            .value
                            .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
                            .and_then(|n| n.as_str())
                            .unwrap_or("node-0");
                        let b = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": p.name()}, "target": {"kind": "Node", "name": node}});
                        let _ = store.bind(p.namespace(), p.name(), b);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

async fn kubectl_cluster() -> (LocalCluster, PathBuf, PathBuf) {
    let cfg = ClusterConfig {
        nodes: 2,
        kubelet: KubeletConfig { enabled: true, start_delay: Duration::from_millis(10) },
        controllers: berth_cluster::controllers::ControllersConfig { resync: Duration::from_millis(200), ..Default::default() },
        ..Default::default()
    };
    let c = LocalCluster::start(cfg).await.unwrap();
    let dir = temp_dir();
    let kc = dir.join("kubeconfig");
    c.write_kubeconfig(&kc).unwrap();
    (c, dir, kc)
}

#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_rollout_status_restart_undo_history_pause() {
    let (c, dir, kc) = kubectl_cluster().await;
    let bind = binder(&c);
    let (ok, out) = kubectl(&kc, &["create", "deployment", "web", "--image=nginx:1.0", "--replicas=3"]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "status", "deployment/web", "--timeout=30s"]).await;
    assert!(ok && out.contains("successfully rolled out"), "{out}");

    let (ok, out) = kubectl(&kc, &["set", "image", "deployment/web", "nginx=nginx:2.0"]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "status", "deployment/web", "--timeout=30s"]).await;
    assert!(ok && out.contains("successfully rolled out"), "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "restart", "deployment/web"]).await;
    assert!(ok && out.contains("restarted"), "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "status", "deployment/web", "--timeout=30s"]).await;
    assert!(ok && out.contains("successfully rolled out"), "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "history", "deployment/web"]).await;
    assert!(ok, "{out}");
    for rev in ["1", "2", "3"] {
        assert!(out.lines().any(|l| l.split_whitespace().next() == Some(rev)), "revision {rev}: {out}");
    }
    // Undo to revision 1 (nginx:1.0): its ReplicaSet comes back as revision 4.
    let (ok, out) = kubectl(&kc, &["rollout", "undo", "deployment/web", "--to-revision=1"]).await;
    assert!(ok && out.contains("rolled back"), "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "status", "deployment/web", "--timeout=30s"]).await;
    assert!(ok && out.contains("successfully rolled out"), "{out}");
    let (ok, out) = kubectl(&kc, &["get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"]).await;
    assert!(ok && out.trim() == "nginx:1.0", "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "history", "deployment/web"]).await;
    assert!(ok && out.lines().any(|l| l.split_whitespace().next() == Some("4")) && !out.lines().any(|l| l.split_whitespace().next() == Some("1")), "{out}");
    let (ok, out) = kubectl(&kc, &["get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.containers[0].image}"]).await;
    assert!(ok, "{out}");

    // Paused: a template change makes no new ReplicaSet until resumed.
    let (ok, out) = kubectl(&kc, &["rollout", "pause", "deployment/web"]).await;
    assert!(ok && out.contains("paused"), "{out}");
    let (ok, out) = kubectl(&kc, &["set", "image", "deployment/web", "nginx=nginx:3.0"]).await;
    assert!(ok, "{out}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (ok, out) = kubectl(&kc, &["get", "rs", "-o", "jsonpath={.items[*].spec.template.spec.containers[0].image}"]).await;
    assert!(ok && !out.contains("nginx:3.0"), "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "resume", "deployment/web"]).await;
    assert!(ok && out.contains("resumed"), "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "status", "deployment/web", "--timeout=30s"]).await;
    assert!(ok && out.contains("successfully rolled out"), "{out}");
    let (ok, out) = kubectl(&kc, &["get", "rs", "-o", "jsonpath={.items[*].spec.template.spec.containers[0].image}"]).await;
    assert!(ok && out.contains("nginx:3.0"), "{out}");

    bind.abort();
    let _ = std::fs::remove_dir_all(&dir);
    c.shutdown().await;
}

/// The Deployment controller's revision history limit and progress
/// deadline: beyond `revisionHistoryLimit` old ReplicaSets are deleted,
/// and a rollout whose pods never become ready is reported by `kubectl
/// rollout status` as a real cluster reports it.
#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_rollout_status_reports_a_stalled_rollout() {
    let (c, dir, kc) = kubectl_cluster().await;
    let bind = binder(&c);
    let manifest = |image: &str, gated: bool| {
        let gates = if gated { "\n      readinessGates:\n      - conditionType: example.com/never" } else { "" };
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: stall\nspec:\n  replicas: 2\n  revisionHistoryLimit: 1\n  progressDeadlineSeconds: 3\n  selector:\n    matchLabels:\n      app: stall\n  template:\n    metadata:\n      labels:\n        app: stall\n    spec:{gates}\n      containers:\n      - name: c\n        image: {image}\n"
        )
    };
    let file = dir.join("stall.yaml");
    for image in ["nginx:1", "nginx:2", "nginx:3"] {
        std::fs::write(&file, manifest(image, false)).unwrap();
        let (ok, out) = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]).await;
        assert!(ok, "{out}");
        let (ok, out) = kubectl(&kc, &["rollout", "status", "deployment/stall", "--timeout=30s"]).await;
        assert!(ok && out.contains("successfully rolled out"), "{out}");
    }
    // Three revisions, a history of one: the newest and one old ReplicaSet stay.
    crate::support::eventually(20, "old ReplicaSets beyond revisionHistoryLimit deleted", || async {
        let (ok, out) = kubectl(&kc, &["get", "rs", "-l", "app=stall", "-o", "jsonpath={.items[*].spec.template.spec.containers[0].image}"]).await;
        let mut images: Vec<String> = out.split_whitespace().map(str::to_string).collect();
        images.sort();
        (ok && images == ["nginx:2", "nginx:3"]).then_some(())
    })
    .await;
    // A template whose pods never become ready: no progress for 3 s.
    std::fs::write(&file, manifest("nginx:4", true)).unwrap();
    let (ok, out) = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "status", "deployment/stall", "--timeout=60s"]).await;
    assert!(!ok && out.contains("error: deployment \"stall\" exceeded its progress deadline"), "{out}");
    let (ok, out) = kubectl(&kc, &["get", "deployment", "stall", "-o", "jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}"]).await;
    assert!(ok && out.trim() == "ProgressDeadlineExceeded", "{out}");
    // A new template starts a new rollout, which completes.
    std::fs::write(&file, manifest("nginx:5", false)).unwrap();
    let (ok, out) = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "status", "deployment/stall", "--timeout=30s"]).await;
    assert!(ok && out.contains("successfully rolled out"), "{out}");
    bind.abort();
    let _ = std::fs::remove_dir_all(&dir);
    c.shutdown().await;
}

#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_logs_and_exec_say_no_containers_run() {
    let (c, dir, kc) = kubectl_cluster().await;
    let pod_yaml = dir.join("pod.yaml");
    std::fs::write(&pod_yaml, "apiVersion: v1\nkind: Pod\nmetadata: {name: lp}\nspec:\n  containers:\n  - {name: a, image: nginx}\n  - {name: b, image: nginx}\n").unwrap();
    let (ok, out) = kubectl(&kc, &["create", "-f", pod_yaml.to_str().unwrap()]).await;
    assert!(ok, "{out}");
    // Not bound yet: no node to ask, so no logs (upstream's empty answer).
    let (ok, out) = kubectl(&kc, &["logs", "lp", "-c", "a"]).await;
    assert!(ok && out.trim().is_empty(), "{out}");
    let (ok, out) = kubectl(&kc, &["logs", "lp", "-c", "zz"]).await;
    assert!(!ok && out.contains("container zz is not valid for pod lp"), "{out}");
    let (ok, out) = kubectl(&kc, &["exec", "lp", "-c", "a", "--", "true"]).await;
    assert!(!ok && out.contains("pod lp does not have a host assigned"), "{out}");
    let bind = binder(&c);
    let (ok, out) = kubectl(&kc, &["wait", "--for=condition=Ready", "pod/lp", "--timeout=20s"]).await;
    assert!(ok && out.contains("condition met"), "{out}");
    let (ok, out) = kubectl(&kc, &["logs", "lp", "-c", "a"]).await;
    assert!(!ok && out.contains("BadRequest") && out.contains("run no containers") && !out.contains("NotFound"), "{out}");
    let (ok, out) = kubectl(&kc, &["exec", "lp", "-c", "b", "--", "ls"]).await;
    assert!(!ok && out.contains("run no containers") && !out.contains("NotFound"), "{out}");
    let (ok, out) = kubectl(&kc, &["attach", "lp", "-c", "b"]).await;
    assert!(!ok && out.contains("run no containers"), "{out}");
    bind.abort();
    let _ = std::fs::remove_dir_all(&dir);
    c.shutdown().await;
}

#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_cordon_drain_describe() {
    let (c, dir, kc) = kubectl_cluster().await;
    let bind = binder(&c);
    let (ok, out) = kubectl(&kc, &["create", "deployment", "web", "--image=nginx", "--replicas=2"]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&kc, &["rollout", "status", "deployment/web", "--timeout=30s"]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&kc, &["create", "pdb", "web", "--selector=app=web", "--min-available=2"]).await;
    assert!(ok, "{out}");

    for (what, needle) in [("pod", "Containers:"), ("node/node-0", "Allocated resources"), ("deployment/web", "NewReplicaSet:")] {
        let args: Vec<&str> = if what == "pod" { vec!["describe", "pods", "-l", "app=web"] } else { vec!["describe", what] };
        let (ok, out) = kubectl(&kc, &args).await;
        assert!(ok && out.contains(needle), "describe {what}: {out}");
    }

    let (ok, out) = kubectl(&kc, &["cordon", "node-0"]).await;
    assert!(ok && out.contains("cordoned"), "{out}");
    let (ok, out) = kubectl(&kc, &["get", "node", "node-0"]).await;
    assert!(ok && out.contains("SchedulingDisabled"), "{out}");
    // The PDB allows no disruption: drain keeps retrying the evictions.
    let (ok, out) = kubectl(&kc, &["drain", "node-0", "--ignore-daemonsets", "--grace-period=1", "--timeout=3s"]).await;
    assert!(!ok && out.contains("disruption budget"), "{out}");
    let (ok, out) = kubectl(&kc, &["delete", "pdb", "web"]).await;
    assert!(ok, "{out}");
    bind.abort();
    let (ok, out) = kubectl(&kc, &["drain", "node-0", "--ignore-daemonsets", "--grace-period=1", "--timeout=30s"]).await;
    assert!(ok && out.contains("drained"), "{out}");
    let (ok, out) = kubectl(&kc, &["uncordon", "node-0"]).await;
    assert!(ok && out.contains("uncordoned"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
    c.shutdown().await;
}

const STS_DS: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {terminationGracePeriodSeconds: 0, containers: [{name: c, image: "db:1"}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {terminationGracePeriodSeconds: 0, containers: [{name: c, image: "agent:1"}]}
"#;

#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_rollout_statefulset_and_daemonset() {
    let (c, dir, kc) = kubectl_cluster().await;
    let bind = binder(&c);
    let manifest = dir.join("sts.yaml");
    std::fs::write(&manifest, STS_DS).unwrap();
    let (ok, out) = kubectl(&kc, &["apply", "-f", manifest.to_str().unwrap()]).await;
    assert!(ok, "{out}");
    for (w, image) in [("statefulset/db", "c=db:2"), ("daemonset/agent", "c=agent:2")] {
        let (ok, out) = kubectl(&kc, &["rollout", "status", w, "--timeout=30s"]).await;
        assert!(ok, "{w}: {out}");
        let (ok, out) = kubectl(&kc, &["set", "image", w, image]).await;
        assert!(ok, "{w}: {out}");
        let (ok, out) = kubectl(&kc, &["rollout", "status", w, "--timeout=30s"]).await;
        // A StatefulSet's defaulted partition (0) makes kubectl say "partitioned roll out complete", as against any cluster.
        assert!(ok && (out.contains("roll out complete") || out.contains("rolling update complete") || out.contains("successfully rolled out")), "{w}: {out}");
        let (ok, out) = kubectl(&kc, &["rollout", "history", w]).await;
        assert!(ok && out.lines().any(|l| l.split_whitespace().next() == Some("2")), "{w}: {out}");
        let (ok, out) = kubectl(&kc, &["rollout", "undo", w]).await;
        assert!(ok && out.contains("rolled back"), "{w}: {out}");
        let (ok, out) = kubectl(&kc, &["rollout", "status", w, "--timeout=30s"]).await;
        assert!(ok, "{w}: {out}");
        let (ok, out) = kubectl(&kc, &["get", w, "-o", "jsonpath={.spec.template.spec.containers[0].image}"]).await;
        assert!(ok && out.trim().ends_with(":1"), "{w}: {out}");
        let (ok, out) = kubectl(&kc, &["rollout", "restart", w]).await;
        assert!(ok && out.contains("restarted"), "{w}: {out}");
        let (ok, out) = kubectl(&kc, &["rollout", "status", w, "--timeout=30s"]).await;
        assert!(ok, "{w}: {out}");
    }
    let (ok, out) = kubectl(&kc, &["get", "controllerrevisions", "-l", "app=db", "-o", "wide"]).await;
    assert!(ok && out.contains("statefulset.apps/db"), "{out}");
    bind.abort();
    let _ = std::fs::remove_dir_all(&dir);
    c.shutdown().await;
}

/// StatefulSets and DaemonSets keep `revisionHistoryLimit` old
/// ControllerRevisions (default 10, read back as upstream defaults it):
/// four template changes with a limit of 2 leave the current revision and
/// the two before it, and `kubectl rollout history` agrees.
#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn kubectl_rollout_history_is_truncated_to_the_limit() {
    let (c, dir, kc) = kubectl_cluster().await;
    let bind = binder(&c);
    let manifest = dir.join("sts.yaml");
    std::fs::write(&manifest, STS_DS).unwrap();
    let (ok, out) = kubectl(&kc, &["apply", "-f", manifest.to_str().unwrap()]).await;
    assert!(ok, "{out}");
    for (w, container) in [("statefulset/db", "c=db"), ("daemonset/agent", "c=agent")] {
        let (ok, out) = kubectl(&kc, &["get", w, "-o", "jsonpath={.spec.revisionHistoryLimit}"]).await;
        assert!(ok && out.trim() == "10", "{w}: {out}");
        let (ok, out) = kubectl(&kc, &["patch", w, "--type=merge", "-p", r#"{"spec":{"revisionHistoryLimit":2}}"#]).await;
        assert!(ok, "{w}: {out}");
        let (ok, out) = kubectl(&kc, &["rollout", "status", w, "--timeout=30s"]).await;
        assert!(ok, "{w}: {out}");
        for version in 2..=5 {
            let (ok, out) = kubectl(&kc, &["set", "image", w, &format!("{container}:{version}")]).await;
            assert!(ok, "{w}: {out}");
            let (ok, out) = kubectl(&kc, &["rollout", "status", w, "--timeout=30s"]).await;
            assert!(ok, "{w}: {out}");
        }
        let name = w.split('/').nth(1).unwrap();
        let owned = || {
            let lr = c.store().list(berth_cluster::resources::CONTROLLERREVISIONS, &berth_cluster::selector::Filter::default(), None, None).unwrap();
            let mut n: Vec<i64> = lr
                .items
                .iter()
                .filter(|r| r.value.pointer("/metadata/ownerReferences/0/name").and_then(|v| v.as_str()) == Some(name))
                .map(|r| r.value["revision"].as_i64().unwrap())
                .collect();
            n.sort_unstable();
            n
        };
        crate::support::eventually(20, "revisions beyond revisionHistoryLimit deleted", || async { (owned() == [3, 4, 5]).then_some(()) }).await;
        let (ok, out) = kubectl(&kc, &["rollout", "history", w]).await;
        let shown: Vec<&str> = out.lines().filter_map(|l| l.split_whitespace().next()).filter(|f| f.parse::<u32>().is_ok()).collect();
        assert!(ok && shown == ["3", "4", "5"], "{w}: {out}");
    }
    bind.abort();
    let _ = std::fs::remove_dir_all(&dir);
    c.shutdown().await;
}
