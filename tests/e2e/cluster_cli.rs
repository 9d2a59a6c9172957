//! `berth cluster` as a process: it serves, writes its kubeconfig and stops on SIGTERM.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use crate::e2e_support::eventually;

#[tokio::test]
async fn cli_binary_serves_and_stops_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("berth-cli-{}-{}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = dir.join("kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["cluster", "--listen", "127.0.0.1:0", "--nodes", "5", "--zones", "2", "--write-kubeconfig"])
        .arg(&kc)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let text = eventually(10, "the kubeconfig written", || async { std::fs::read_to_string(&kc).ok().filter(|t| t.contains("server: https://127.0.0.1:")) }).await;
    // HTTPS with the cluster's CA and the admin token (RBAC is on).
    assert!(text.contains("certificate-authority-data: ") && text.contains("token: berth-admin."), "{text}");
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    // Without the token: anonymous, refused as kube-apiserver refuses it.
    let mut anonymous = cfg.clone();
    anonymous.auth_info.token = None;
    let anon: Api<Node> = Api::all(kube::Client::try_from(anonymous).unwrap());
    match anon.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("expected 403, got {other:?}"),
    }
    let client = kube::Client::try_from(cfg).unwrap();
    let nodes: Api<Node> = Api::all(client);
    let list = nodes.list(&ListParams::default().labels("topology.kubernetes.io/zone=zone-b")).await.unwrap();
    assert_eq!(list.items.len(), 2);
    // SIGTERM: clean exit.
    let pid = child.id().unwrap().to_string();
    let st = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(st.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Start `berth cluster` on a free port with `args`; its kubeconfig is
/// written to `kc` (removed first) and a client for it returned.
pub(crate) async fn spawn_cluster(args: &[&str], kc: &std::path::Path) -> (tokio::process::Child, kube::Client) {
    let _ = std::fs::remove_file(kc);
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["cluster", "--listen", "127.0.0.1:0", "--write-kubeconfig"])
        .arg(kc)
        .args(args)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let text = eventually(20, "the kubeconfig written", || async { std::fs::read_to_string(kc).ok().filter(|t| t.contains("server: https://127.0.0.1:")) }).await;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    (child, kube::Client::try_from(cfg).unwrap())
}

/// `berth cluster --data-dir` killed with SIGKILL while clients write:
/// every write it acknowledged is there after a restart (with its uid),
/// the nodes of the first start are kept (`--nodes` only seeds a new
/// directory), and a watch from before the crash gets 410 Gone.
#[tokio::test]
async fn data_dir_survives_kill_9() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{PostParams, WatchEvent, WatchParams};
    use futures::StreamExt;

    let dir = std::env::temp_dir().join(format!("berth-kill9-{}-{}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = dir.join("kubeconfig");
    let data = dir.join("data");
    let data_arg = data.to_str().unwrap();
    let (child, client) = spawn_cluster(&["--nodes", "4", "--data-dir", data_arg], &kc).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let rv_before = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut writers = Vec::new();
    for w in 0..6 {
        let cms = cms.clone();
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..100_000 {
                let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": format!("cm-{w}-{i}")}})).unwrap();
                match cms.create(&PostParams::default(), &cm).await {
                    Ok(cm) => acked.push((cm.metadata.name.unwrap(), cm.metadata.uid.unwrap())),
                    Err(_) => break,
                }
            }
            acked
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(tokio::time::timeout(Duration::from_secs(30), w).await.unwrap().unwrap());
    }
    drop(child);
    assert!(acked.len() > 10, "only {} writes acknowledged", acked.len());

    let (mut child, client) = spawn_cluster(&["--nodes", "1", "--data-dir", data_arg], &kc).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let kept: std::collections::HashMap<String, String> =
        cms.list(&ListParams::default()).await.unwrap().items.into_iter().map(|c| (c.metadata.name.unwrap(), c.metadata.uid.unwrap())).collect();
    for (name, uid) in &acked {
        assert_eq!(kept.get(name), Some(uid), "acknowledged {name} lost");
    }
    assert_eq!(Api::<Node>::all(client.clone()).list(&ListParams::default()).await.unwrap().items.len(), 4);
    let mut stream = cms.watch(&WatchParams::default(), &rv_before).await.unwrap().boxed();
    match stream.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("expected 410, got {other:?}"),
    }
    drop(stream);
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
