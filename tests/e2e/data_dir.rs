//! A daemon running through a restart of `berth cluster --data-dir`: the
//! cluster comes back on the same address with every object (same uids,
//! same nodeNames), the daemon's watches get 410 Gone and relist, it is
//! ready again and binds new pods, and no pod is bound twice.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use berth_daemon::{self as daemon, Options};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::e2e_support::*;

/// `berth cluster` on `listen` with `--data-dir data`, writing `kc`; a client for it.
async fn start_cluster(listen: &str, data: &Path, kc: &Path) -> (tokio::process::Child, kube::Client) {
    let _ = std::fs::remove_file(kc);
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["cluster", "--listen", listen, "--nodes", "4", "--data-dir"])
        .arg(data)
        .arg("--write-kubeconfig")
        .arg(kc)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let text = eventually(30, "the kubeconfig written", || async { std::fs::read_to_string(kc).ok().filter(|t| t.contains("server: https://127.0.0.1:")) }).await;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    (child, kube::Client::try_from(cfg).unwrap())
}

/// Pod name to (uid, node) for every bound pod.
async fn placements(api: &Api<Pod>) -> HashMap<String, (String, String)> {
    pods(api)
        .await
        .iter()
        .filter_map(|p| Some((p.metadata.name.clone()?, (p.metadata.uid.clone()?, node_of(p)?.to_string()))))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_carries_on_through_a_data_dir_restart() {
    let dir = std::env::temp_dir().join(format!("berth-datadir-{}-{}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let (data, kc) = (dir.join("data"), dir.join("kubeconfig"));
    // A fixed address, so the restarted cluster is where the daemon looks.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");

    let (mut cluster, client) = start_cluster(&listen, &data, &kc).await;
    let opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: "through-restart".into(), ..Options::default() };
    let d = daemon::start(client.clone(), &config(""), opts).await.unwrap();
    let ready = |addr| async move { admin_get(addr, "/readyz", None).await.0 == 200 };
    eventually(20, "/readyz 200", || async { ready(d.admin_addr).await.then_some(()) }).await;
    until_leading(&d, 20).await;

    let api: Api<Pod> = Api::default_namespaced(client.clone());
    create_all(&api, (0..20).map(|i| pod(&format!("before-{i:02}"), "100m", json!({}))).collect(), 8).await;
    let before = eventually(30, "20 pods bound before the restart", || async {
        let p = placements(&api).await;
        (p.len() == 20).then_some(p)
    })
    .await;

    // A graceful stop (SIGTERM), then the same command on the same address.
    let pid = cluster.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = tokio::time::timeout(Duration::from_secs(15), cluster.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
    let (mut cluster, client) = start_cluster(&listen, &data, &kc).await;
    let api: Api<Pod> = Api::default_namespaced(client.clone());

    // Every pod is back with its uid and node.
    let back = placements(&api).await;
    for (name, placed) in &before {
        assert_eq!(back.get(name), Some(placed), "{name} changed across the restart");
    }
    // The daemon relists and is ready again, then binds new pods.
    eventually(30, "/readyz 200 after the restart", || async { ready(d.admin_addr).await.then_some(()) }).await;
    create_all(&api, (0..20).map(|i| pod(&format!("after-{i:02}"), "100m", json!({}))).collect(), 8).await;
    let after = eventually(40, "40 pods bound after the restart", || async {
        let p = placements(&api).await;
        (p.len() == 40).then_some(p)
    })
    .await;
    for (name, placed) in &before {
        assert_eq!(after.get(name), Some(placed), "{name} moved after the restart");
    }

    // Bound once each: one Scheduled event per pod (events are written
    // after the binding, so wait for all 40).
    let events: Api<Event> = Api::default_namespaced(client.clone());
    let scheduled = eventually(30, "a Scheduled event for each of the 40 pods", || async {
        let mut scheduled: HashMap<String, usize> = HashMap::new();
        for e in events.list(&ListParams::default()).await.unwrap().items {
            if e.reason.as_deref() == Some("Scheduled")
                && let Some(name) = e.regarding.and_then(|r| r.name)
            {
                *scheduled.entry(name).or_default() += 1;
            }
        }
        (scheduled.len() == 40).then_some(scheduled)
    })
    .await;
    let twice: Vec<_> = scheduled.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "pods bound more than once: {twice:?}");

    d.shutdown().await;
    let pid = cluster.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let _ = tokio::time::timeout(Duration::from_secs(15), cluster.wait()).await;
    let _ = std::fs::remove_dir_all(&dir);
}
