//! The local cluster's in-flight limits against berth's own clients: the
//! daemon, whose kube client backs off on 429 (`Retry-After`), binds every
//! pod while the cluster refuses what exceeds a tiny limit; and the memory
//! of the local cluster under 1,000 concurrent lists (ignored: it prints
//! the figures).
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use berth_cluster::authz::AuthorizationMode;
use berth_cluster::{ClusterConfig, LocalCluster};
use berth_daemon::{self as daemon, Options};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::e2e_support::*;

/// A kube client of this cluster that is not system:masters (an unknown
/// token is anonymous under AlwaysAllow), so the limits apply to it.
fn unprivileged(c: &LocalCluster, retry: bool) -> kube::Client {
    let mut cfg = c.client_config().unwrap();
    cfg.auth_info.token = Some(NOBODY_TOKEN.to_string().into());
    cfg.default_retry = retry;
    kube::Client::try_from(cfg).unwrap()
}

/// The daemon, through an identity the limits apply to, against a cluster
/// that allows 2 read-only and 1 mutating request at once while other
/// clients keep both pools full: its lists, binds, status writes and events
/// get 429s (kube-rs retries them after `Retry-After`), and every pod is
/// bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_daemon_backs_off_on_429_and_binds_every_pod() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let c = LocalCluster::start(ClusterConfig {
            max_requests_inflight: 2,
            max_mutating_requests_inflight: 1,
            authorization: AuthorizationMode::AlwaysAllow,
            ..cluster_config(10, 2, "8", 110)
        })
        .await
        .unwrap();
        let admin: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        // Other clients keep both pools busy (no retries: they just go on).
        let stop = Arc::new(AtomicBool::new(false));
        let mut flood = Vec::new();
        for i in 0..6 {
            let (stop, client) = (stop.clone(), unprivileged(&c, false));
            flood.push(tokio::spawn(async move {
                let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
                let pods: Api<Pod> = Api::default_namespaced(client);
                let name = format!("flood-{i}");
                while !stop.load(Ordering::Relaxed) {
                    let _ = pods.list(&Default::default()).await;
                    let patch = json!({"data": {"at": format!("{:?}", Instant::now())}});
                    let _ = cms.patch(&name, &PatchParams::apply("flood").force(), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": patch["data"]}))).await;
                }
            }));
        }
        let opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: "limited".into(), ..Options::default() };
        let d = daemon::start(unprivileged(&c, true), &config(""), opts).await.unwrap();
        until_leading(&d, 30).await;
        const N: usize = 60;
        create_all(&admin, (0..N).map(|i| pod(&format!("p-{i}"), "100m", json!({}))).collect(), 8).await;
        eventually(90, "every pod bound", || async { (pods(&admin).await.iter().filter(|p| node_of(p).is_some()).count() == N).then_some(()) }).await;
        stop.store(true, Ordering::Relaxed);
        for f in flood {
            let _ = f.await;
        }
        let refused = c.inflight_refused();
        let counts = d.write_counts();
        println!("429s: {} read-only, {} mutating refused; {N} of {N} pods bound; daemon binds {}, failed writes {}", refused.read_only, refused.mutating, counts.binds, counts.failures);
        assert!(refused.read_only > 0 && refused.mutating > 0, "the limits never refused anything: {refused:?}");
        d.shutdown().await;
        c.shutdown().await;
    })
    .await
    .expect("test deadline");
}

/// Reads `/proc/PID/status` field `field` (kB) as MB.
fn status_mb(pid: u32, field: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: f64 = text.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    kb / 1024.0
}

/// One list of every pod over TLS, its body read and dropped as it comes:
/// the status code.
async fn list_discarding(addr: SocketAddr, token: &str) -> u16 {
    let Ok(tcp) = TcpStream::connect(addr).await else { return 0 };
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let Ok(mut s) = berth_daemon::admin::connector(None).unwrap().connect(name, tcp).await else { return 0 };
    let req = format!("GET /api/v1/pods HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n");
    // rustls keeps what the socket did not take: flush, or the request
    // may never leave.
    if s.write_all(req.as_bytes()).await.is_err() || s.flush().await.is_err() {
        return 0;
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut head = Vec::new();
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) if head.len() < 16 => head.extend_from_slice(&buf[..n.min(16)]),
            Ok(_) => {}
        }
    }
    String::from_utf8_lossy(&head).split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// 1,000 concurrent lists of 2,000 pods against `berth cluster` (a
/// process of its own, so its memory is its own), without a limit and
/// with kube-apiserver's default: the peak RSS, and how many got 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement (minutes): cargo test --profile ci -p berth --test e2e thousand_concurrent_lists -- --ignored --nocapture"]
async fn thousand_concurrent_lists_memory() {
    for limit in ["0", "400"] {
        let dir = std::env::temp_dir().join(format!("berth-lists-{}-{limit}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kc = dir.join("kubeconfig");
        let (child, client) = crate::cluster_cli::spawn_cluster(&["--nodes", "0", "--no-kubelet", "--authorization-mode", "AlwaysAllow", "--max-requests-inflight", limit], &kc).await;
        let pid = child.id().unwrap();
        let pods: Api<Pod> = Api::default_namespaced(client);
        let env: Vec<_> = (0..8).map(|i| json!({"name": format!("SETTING_{i}"), "value": "v".repeat(100)})).collect();
        let labels = json!({"app": "web", "tier": "frontend", "release": "stable", "team": "platform"});
        create_all(&pods, (0..2000).map(|i| pod(&format!("p-{i:04}"), "100m", json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "registry.example.com/web:1.2.3", "env": env}]}}))).collect(), 32).await;
        let text = std::fs::read_to_string(&kc).unwrap();
        let server = text.lines().find_map(|l| l.trim().strip_prefix("server: https://")).unwrap().to_string();
        let addr: SocketAddr = server.parse().unwrap();
        let before = status_mb(pid, "VmRSS:");
        let peak = Arc::new(AtomicU64::new(0));
        let sampling = Arc::new(AtomicBool::new(true));
        let sampler = {
            let (peak, sampling) = (peak.clone(), sampling.clone());
            tokio::spawn(async move {
                while sampling.load(Ordering::Relaxed) {
                    peak.fetch_max(status_mb(pid, "VmRSS:") as u64, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        let t = Instant::now();
        let codes = futures::future::join_all((0..1000).map(|_| async { tokio::time::timeout(Duration::from_secs(180), list_discarding(addr, "not-a-master")).await.unwrap_or(0) })).await;
        let took = t.elapsed();
        sampling.store(false, Ordering::Relaxed);
        let _ = sampler.await;
        let ok = codes.iter().filter(|c| **c == 200).count();
        let limited = codes.iter().filter(|c| **c == 429).count();
        println!(
            "--max-requests-inflight {limit}: 1,000 concurrent lists of 2,000 pods in {took:.1?}: {ok} answered 200, {limited} answered 429, {} other; RSS {before:.0} MB before, peak {} MB",
            1000 - ok - limited,
            peak.load(Ordering::Relaxed)
        );
        drop(child);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
