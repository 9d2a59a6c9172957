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
    let text = eventually(10, "the kubeconfig written", || async { std::fs::read_to_string(&kc).ok().filter(|t| t.contains("server: http://127.0.0.1:")) }).await;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
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
