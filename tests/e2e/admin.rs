//! The admin port as kube-scheduler serves 10259: HTTPS only, delegated
//! authentication (TokenReview) and authorization (SubjectAccessReview)
//! through the local cluster, health paths always allowed, idle and slow
//! connections closed, a connection limit that protects the daemon's API
//! client, and explain answered off the scheduling loop under a flood.
//!
//! Figures asserted: status codes per credential; connections held ≤ the
//! limit while 1,100 idle connections knock; probes answered within a
//! second while more idle sockets and keep-alive connections than the
//! limit are open; explain answers ∈ {200, 429}
//! with every pod of a wave bound; snapshots published ≤ one a second.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use berth_cluster::FaultConfig;
use berth_daemon::admin::AdminOptions;
use berth_daemon::{self as daemon, Handle, Options};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::e2e_support::*;

async fn start_with(c: &berth_cluster::LocalCluster, identity: &str, admin: AdminOptions) -> Handle {
    let opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: identity.into(), admin, ..Options::default() };
    daemon::start(c.client().unwrap(), &config(""), opts).await.unwrap()
}

/// Reads until the peer closes; true when it closed within `secs`.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(s: &mut S, secs: u64) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(Duration::from_secs(secs), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

async fn tls(addr: SocketAddr) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("localhost").unwrap();
    berth_daemon::admin::connector(None).unwrap().connect(name, tcp).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn https_with_delegated_authentication_and_authorization() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let c = cluster(3, 3, "4", 110, FaultConfig::default()).await;
        let d = start_daemon(&c, &config(""), "auth").await;
        let a = d.admin_addr;

        // Plain HTTP is refused (Go's answer), never served.
        let (code, body) = plain_http_get_addr(a, "/healthz").await;
        assert_eq!(code, 400, "plain HTTP: {body}");
        assert!(body.contains("Client sent an HTTP request to an HTTPS server"), "{body}");

        // Health paths are always allowed, even anonymously.
        for p in ["/healthz", "/livez"] {
            assert_eq!(admin_get(a, p, None).await, (200, "ok".to_string()), "{p}");
        }
        eventually(20, "/readyz 200", || async { (admin_get(a, "/readyz", None).await.0 == 200).then_some(()) }).await;

        // Anonymous: authenticated as system:anonymous, then forbidden (upstream's Status).
        let (code, body) = admin_get(a, "/metrics", None).await;
        assert_eq!(code, 403, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["reason"], "Forbidden");
        assert_eq!(v["message"], r#"forbidden: User "system:anonymous" cannot get path "/metrics""#);

        // A token the cluster does not know: 401, on every path.
        for p in ["/metrics", "/healthz"] {
            let (code, body) = admin_get(a, p, Some("not-a-token")).await;
            assert_eq!(code, 401, "{p}: {body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!((v["reason"].as_str(), v["message"].as_str()), (Some("Unauthorized"), Some("Unauthorized")));
        }

        // A known user without permission: 403 naming the user.
        let (code, body) = admin_get(a, "/metrics", Some(NOBODY_TOKEN)).await;
        assert_eq!(code, 403, "{body}");
        assert!(body.contains(r#"User \"nobody\" cannot get path \"/metrics\""#), "{body}");

        // The scraper may get /metrics, and nothing else.
        let (code, body) = admin_get(a, "/metrics", Some(METRICS_TOKEN)).await;
        assert_eq!(code, 200);
        assert!(body.contains("scheduler_pending_pods"), "{body}");
        assert_eq!(admin_get(a, "/debug/explain?pod=default/x", Some(METRICS_TOKEN)).await.0, 403);

        // README's monitoring instructions, on the cluster's RBAC: a
        // ServiceAccount bound to a ClusterRole with nonResourceURLs
        // /metrics get reads /metrics; an unbound one gets 403.
        let sa_token = |name: &'static str| {
            let client = c.client().unwrap();
            async move {
                let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::default_namespaced(client);
                sas.create(&kube::api::PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()).await.unwrap();
                let tr: k8s_openapi::api::authentication::v1::TokenRequest =
                    sas.create_subresource("token", name, &kube::api::PostParams::default(), &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})).await.unwrap();
                serde_json::to_value(tr.status).unwrap()["token"].as_str().unwrap().to_string()
            }
        };
        let (scraper, unbound) = (sa_token("scraper").await, sa_token("unbound").await);
        grant_metrics(&c, "ServiceAccount", "scraper", "default").await;
        let (code, body) = admin_get(a, "/metrics", Some(&scraper)).await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("scheduler_pending_pods"), "{body}");
        let (code, body) = admin_get(a, "/metrics", Some(&unbound)).await;
        assert_eq!(code, 403, "{body}");
        assert!(body.contains(r#"User \"system:serviceaccount:default:unbound\" cannot get path \"/metrics\""#), "{body}");

        // system:masters may do everything; an unknown path is a 404 once authorized.
        assert_eq!(admin_get(a, "/metrics", Some(ADMIN_TOKEN)).await.0, 200);
        assert_eq!(admin_get(a, "/debug/explain?pod=default/none", Some(ADMIN_TOKEN)).await.0, 404);
        assert_eq!(admin_get(a, "/nope", Some(ADMIN_TOKEN)).await.0, 404);
        assert_eq!(admin_get(a, "/nope", None).await.0, 403);

        // The certificate is the one the handle reports; another pinned one is refused.
        assert!(berth_daemon::admin::https_get(a, "/healthz", None, Some(&d.admin.cert_der)).await.is_ok());
        assert!(berth_daemon::admin::https_get(a, "/healthz", None, Some(b"not this one")).await.is_err());

        // --tls-cert-file / --tls-private-key-file: served as given.
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let dir = std::env::temp_dir().join(format!("berth-admin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cf, kf) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cf, cert.cert.pem()).unwrap();
        std::fs::write(&kf, cert.signing_key.serialize_pem()).unwrap();
        let d2 = start_with(&c, "auth-2", AdminOptions { tls_cert_file: Some(cf), tls_private_key_file: Some(kf), ..AdminOptions::default() }).await;
        assert_eq!(d2.admin.cert_der, cert.cert.der().to_vec());
        let (code, _) = berth_daemon::admin::https_get(d2.admin_addr, "/healthz", None, Some(cert.cert.der())).await.unwrap();
        assert_eq!(code, 200);
        let _ = std::fs::remove_dir_all(&dir);
        d2.shutdown().await;
        d.shutdown().await;
        c.shutdown().await;
    })
    .await
    .expect("test deadline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_and_slow_connections_are_closed() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let c = cluster(1, 1, "4", 110, FaultConfig::default()).await;
        let opts = AdminOptions {
            idle_timeout: Duration::from_millis(500),
            header_read_timeout: Duration::from_millis(500),
            handshake_timeout: Duration::from_millis(500),
            ..AdminOptions::default()
        };
        let d = start_with(&c, "idle", opts).await;
        let a = d.admin_addr;

        // A connection that never starts its TLS handshake.
        let mut raw = TcpStream::connect(a).await.unwrap();
        assert!(closed_within(&mut raw, 10).await, "a silent connection stays open");

        // A request whose headers never end (slowloris).
        let mut slow = tls(a).await;
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        assert!(closed_within(&mut slow, 10).await, "a connection with unfinished headers stays open");

        // A keep-alive connection left idle after a request.
        let mut idle = tls(a).await;
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 1024];
        let n = idle.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
        assert!(closed_within(&mut idle, 10).await, "an idle keep-alive connection stays open");

        eventually(10, "every connection released", || async { (d.admin.stats.open_connections() == 0).then_some(()) }).await;
        d.shutdown().await;
        c.shutdown().await;
    })
    .await
    .expect("test deadline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_connection_flood_is_bounded_and_the_api_client_keeps_working() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let c = cluster(10, 2, "8", 110, FaultConfig::default()).await;
        const LIMIT: usize = 64;
        let d = start_with(&c, "flood", AdminOptions { max_connections: LIMIT, ..AdminOptions::default() }).await;
        until_leading(&d, 20).await;
        let a = d.admin_addr;

        // 1,100 idle connections (those beyond the backlog may not even connect).
        let conns: Vec<TcpStream> = futures::future::join_all((0..1100).map(|_| async move { tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(a)).await.ok().and_then(Result::ok) })).await.into_iter().flatten().collect();
        assert!(conns.len() > LIMIT, "only {} connections made", conns.len());
        eventually(10, "the limit reached", || async { (d.admin.stats.open_connections() == LIMIT).then_some(()) }).await;

        // The daemon's API client still works: a wave of pods gets bound.
        let api: Api<Pod> = Api::namespaced(c.client().unwrap(), "default");
        create_all(&api, (0..60).map(|i| pod(&format!("w-{i}"), "100m", json!({}))).collect(), 16).await;
        eventually(30, "60 pods bound", || async { (pods(&api).await.iter().filter(|p| node_of(p).is_some()).count() == 60).then_some(()) }).await;
        let held = d.admin.stats.peak_connections();
        println!("idle flood: {} connections made, {} held at most (limit {LIMIT}), 60 of 60 pods bound", conns.len(), held);
        assert!(held <= LIMIT, "{held} connections held, limit {LIMIT}");

        // Once they go, the port serves again.
        drop(conns);
        eventually(20, "/healthz after the flood", || async { (admin_get(a, "/healthz", None).await.0 == 200).then_some(()) }).await;
        d.shutdown().await;
        c.shutdown().await;
    })
    .await
    .expect("test deadline");
}

/// One HTTPS GET of `path` that must answer 200 within `within`.
async fn answered_within(a: SocketAddr, path: &str, within: Duration) -> Result<Duration, String> {
    let t = Instant::now();
    match tokio::time::timeout(within, berth_daemon::admin::https_get(a, path, None, None)).await {
        Ok(Ok((200, _))) => Ok(t.elapsed()),
        Ok(Ok((code, body))) => Err(format!("{path}: {code} {body}")),
        Ok(Err(e)) => Err(format!("{path}: {e}")),
        Err(_) => Err(format!("{path}: no answer within {within:?}")),
    }
}

/// Idle raw sockets and keep-alive TLS connections, each more than the
/// limit, with the default timeouts (so that no timeout is what frees a
/// slot): probes are still answered within a second, because a new
/// connection takes the slot of the one idle the longest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn probes_are_answered_while_idle_and_keep_alive_connections_hold_every_slot() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let c = cluster(1, 1, "4", 110, FaultConfig::default()).await;
        const LIMIT: usize = 32;
        let d = start_with(&c, "starve", AdminOptions { max_connections: LIMIT, ..AdminOptions::default() }).await;
        let a = d.admin_addr;
        eventually(20, "/readyz 200", || async { (admin_get(a, "/readyz", None).await.0 == 200).then_some(()) }).await;

        // More silent TCP sockets than the limit.
        let mut raw = Vec::new();
        for _ in 0..LIMIT + 8 {
            raw.push(TcpStream::connect(a).await.unwrap());
        }
        // More keep-alive TLS connections than the limit, each having asked
        // once and kept open (a scraper that never closes).
        let mut kept = Vec::new();
        for i in 0..LIMIT + 8 {
            let mut s = tls(a).await;
            s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
            let mut buf = [0u8; 1024];
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.unwrap().unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "keep-alive connection {i}: {}", String::from_utf8_lossy(&buf[..n]));
            kept.push(s);
        }
        // And silent sockets again, the newest connections.
        for _ in 0..LIMIT + 8 {
            raw.push(TcpStream::connect(a).await.unwrap());
        }
        eventually(10, "every slot held", || async { (d.admin.stats.open_connections() == LIMIT).then_some(()) }).await;

        let mut took = Vec::new();
        for path in ["/readyz", "/livez", "/healthz", "/readyz", "/readyz"] {
            took.push(answered_within(a, path, Duration::from_secs(1)).await.unwrap());
        }
        let slowest = took.iter().max().copied().unwrap_or_default();
        let (held, evicted) = (d.admin.stats.peak_connections(), d.admin.stats.evicted_connections());
        println!("starved port: {} raw sockets and {} keep-alive connections (limit {LIMIT}); 5 probes answered, slowest {slowest:?}; {evicted} idle connections closed for a slot; {held} held at most", raw.len(), kept.len());
        assert!(held <= LIMIT, "{held} connections held, limit {LIMIT}");
        assert!(evicted >= (LIMIT + 8) as u64, "{evicted} evictions");
        drop(raw);
        drop(kept);
        d.shutdown().await;
        c.shutdown().await;
    })
    .await
    .expect("test deadline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_flood_is_rate_limited_and_scheduling_continues() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let c = cluster(20, 2, "8", 110, FaultConfig::default()).await;
        let d = start_daemon(&c, &config(""), "explain").await;
        until_leading(&d, 20).await;
        let a = d.admin_addr;
        let api: Api<Pod> = Api::namespaced(c.client().unwrap(), "default");
        create_all(&api, vec![pod("stuck", "100", json!({}))], 1).await;
        eventually(20, "stuck explained", || async { (http_get(a, "/debug/explain?pod=default/stuck").await.0 == 200).then_some(()) }).await;

        let t0 = Instant::now();
        let snapshots0 = d.admin.stats.explain_snapshots();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let clients: Vec<_> = (0..16)
            .map(|_| {
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut codes = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        codes.push(http_get(a, "/debug/explain?pod=default/stuck").await.0);
                    }
                    codes
                })
            })
            .collect();
        create_all(&api, (0..300).map(|i| pod(&format!("wave-{i}"), "100m", json!({}))).collect(), 16).await;
        eventually(60, "300 pods bound during the flood", || async { (pods(&api).await.iter().filter(|p| node_of(p).is_some()).count() == 300).then_some(()) }).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut codes = Vec::new();
        for c in clients {
            codes.extend(c.await.unwrap());
        }
        let secs = t0.elapsed().as_secs_f64();
        let ok = codes.iter().filter(|c| **c == 200).count();
        let limited = codes.iter().filter(|c| **c == 429).count();
        let published = d.admin.stats.explain_snapshots() - snapshots0;
        println!("explain flood: {} requests in {secs:.1}s: {ok} answered, {limited} refused (429); {published} snapshots published; 300 of 300 pods bound", codes.len());
        assert_eq!(ok + limited, codes.len(), "answers other than 200/429: {codes:?}");
        assert!(ok >= 1 && limited >= 1, "{ok} answered, {limited} refused");
        // The loop only copies its state, at most once a second, and only when asked.
        assert!(published as f64 <= secs + 2.0, "{published} snapshots in {secs:.1}s");
        d.shutdown().await;
        c.shutdown().await;
    })
    .await
    .expect("test deadline");
}
