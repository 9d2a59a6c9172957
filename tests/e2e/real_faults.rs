//! Faults the real server makes (issue 38, section 3), on the real control
//! plane of `tools/kube/up` only (`real_*`, ignored unless asked for, one at
//! a time with the other real scenarios through [`Backend::real`]):
//!
//! 1. kube-apiserver killed (SIGKILL) mid-burst and started again 20 s later
//!    with the same command line (`tools/kube/restart`);
//! 2. watches answered 410 Gone: etcd compacted past every resourceVersion
//!    berth holds, and kube-apiserver restarted so that every watch resumes
//!    from one;
//! 3. 429s from the API server's own priority and fairness: a FlowSchema
//!    sends the daemon's ServiceAccount to a PriorityLevelConfiguration of a
//!    few seats that rejects the rest, during a burst.
//!
//! Each asserts that no pod is bound twice (every binding watched), no node
//! is over capacity, every pod is bound in the end, and the daemon is ready
//! again (every watch synced, as `/readyz`) within 15 s of the server being
//! back. The daemon's client is the one berth builds (kube's, its retries
//! on), under a layer that counts the 429s and 410s reaching berth.
//! Whatever happens, a test leaves kube-apiserver running and removes what
//! it created (namespace, nodes, FlowSchema).
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use berth_daemon::{self as daemon, Handle, Options};
use berth_engine::config::Config;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams, WatchParams};
use serde_json::json;

use crate::backend::{Backend, BindLog, NodeSpec, assert_capacity, pods_in};
use crate::e2e_support::{PROFILE, eventually, node_of, pod};

const APISERVER: &str = "kube-apiserver";

// ---------------------------------------------------------------------------
// The control plane's processes (DIR/pids, DIR/env, tools/kube/restart).

fn kube_dir(b: &Backend) -> PathBuf {
    match b {
        Backend::Real { dir, .. } => dir.clone(),
        Backend::Local(_) => panic!("faults need the real control plane"),
    }
}

/// DIR/env's assignments.
fn kube_env(dir: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(dir.join("env")).unwrap();
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The pid DIR/pids has for `comp`.
fn pid_of(dir: &Path, comp: &str) -> u32 {
    let text = std::fs::read_to_string(dir.join("pids")).unwrap();
    text.lines().find_map(|l| l.strip_prefix(comp)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or_else(|| panic!("{comp} not in {}/pids", dir.display()))
}

/// Running (and not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

fn kill9(pid: u32) {
    let st = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    assert!(st.success(), "kill -KILL {pid}");
}

/// `tools/kube/restart DIR COMP ARGS...`: returns once the component serves again.
async fn restart(dir: &Path, comp: &str, args: &[&str]) {
    try_restart(dir, comp, args).await.unwrap_or_else(|e| panic!("{e}"));
}

async fn try_restart(dir: &Path, comp: &str, args: &[&str]) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/kube/restart");
    let out = tokio::process::Command::new(script).arg(dir).arg(comp).args(args).output().await.map_err(|e| e.to_string())?;
    if out.status.success() { Ok(()) } else { Err(format!("tools/kube/restart {comp}: {}", String::from_utf8_lossy(&out.stderr))) }
}

/// Stops kube-apiserver as a rolling restart would: TERM, and KILL when it
/// has not exited after 10 s (its graceful shutdown can wait 60 s for its
/// HTTP server's connections to close).
async fn stop_apiserver(dir: &Path) {
    let pid = pid_of(dir, APISERVER);
    let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    if time_until(10, || !alive(pid)).await.is_none() {
        kill9(pid);
        time_until(10, || !alive(pid)).await.expect("kube-apiserver does not stop on KILL");
    }
}

/// Starts again every component that is not running: kube-apiserver if a
/// test left it stopped, and kube-controller-manager (or kube-scheduler),
/// which exit when they cannot renew their Lease while kube-apiserver is
/// away (in a real cluster the kubelet restarts them).
async fn ensure_control_plane(dir: &Path) {
    let text = std::fs::read_to_string(dir.join("pids")).unwrap();
    for comp in text.lines().filter_map(|l| l.split_whitespace().next()) {
        // Twice: a controller started while kube-apiserver is still coming up may exit.
        for _ in 0..2 {
            if alive(pid_of(dir, comp)) {
                break;
            }
            eprintln!("real_faults: {comp} is not running; starting it again");
            match try_restart(dir, comp, &[]).await {
                Ok(()) => break,
                Err(e) => eprintln!("real_faults: {e}"),
            }
        }
    }
}

/// The revision etcd is at (`etcdctl endpoint status`).
fn etcd_revision(env: &HashMap<String, String>) -> u64 {
    let out = std::process::Command::new(format!("{}/etcdctl", env["ETCD_BIN"])).args(["--endpoints", &env["ETCD_ENDPOINT"], "endpoint", "status", "-w", "json"]).output().unwrap();
    assert!(out.status.success(), "etcdctl endpoint status: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["Status"]["header"]["revision"].as_u64().unwrap()
}

fn etcd_compact(env: &HashMap<String, String>, rev: u64) {
    let out = std::process::Command::new(format!("{}/etcdctl", env["ETCD_BIN"])).args(["--endpoints", &env["ETCD_ENDPOINT"], "compact", &rev.to_string()]).output().unwrap();
    assert!(out.status.success(), "etcdctl compact {rev}: {}", String::from_utf8_lossy(&out.stderr));
}

// ---------------------------------------------------------------------------
// What reaches berth: a layer under kube's client (outside its retries).

/// Answers seen by the daemon's client, after kube's own retries.
#[derive(Clone, Default)]
struct Seen {
    /// 429 responses.
    too_many: Arc<AtomicUsize>,
    /// 410 responses, and watch streams carrying an ERROR of code 410.
    expired: Arc<AtomicUsize>,
    /// POSTs to pods/binding.
    binds: Arc<AtomicUsize>,
    /// Of them, answered 409 (the pod bound already).
    binds_conflict: Arc<AtomicUsize>,
}

impl Seen {
    fn get(a: &AtomicUsize) -> usize {
        a.load(Ordering::Relaxed)
    }
}

struct CountLayer(Seen);

impl<S> tower_layer::Layer<S> for CountLayer {
    type Service = CountService<S>;
    fn layer(&self, inner: S) -> CountService<S> {
        CountService { inner, seen: self.0.clone() }
    }
}

#[derive(Clone)]
struct CountService<S> {
    inner: S,
    seen: Seen,
}

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower_service::Service<http::Request<kube::client::Body>> for CountService<S>
where
    S: tower_service::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
{
    type Response = http::Response<Counted<B>>;
    type Error = S::Error;
    type Future = BoxFut<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let watch = req.uri().query().is_some_and(|q| q.contains("watch=true") || q.contains("watch=1"));
        let bind = req.method() == http::Method::POST && req.uri().path().ends_with("/binding");
        let seen = self.seen.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            match resp.status().as_u16() {
                429 => {
                    seen.too_many.fetch_add(1, Ordering::Relaxed);
                }
                410 => {
                    seen.expired.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
            if bind {
                seen.binds.fetch_add(1, Ordering::Relaxed);
                if resp.status().as_u16() == 409 {
                    seen.binds_conflict.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(resp.map(|b| Counted { inner: Box::pin(b), seen, watch }))
        })
    }
}

/// A response body; a watch's is scanned for an ERROR event of code 410.
struct Counted<B> {
    inner: Pin<Box<B>>,
    seen: Seen,
    watch: bool,
}

impl<B: http_body::Body<Data = bytes::Bytes>> http_body::Body for Counted<B> {
    type Data = bytes::Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, B::Error>>> {
        let this = self.get_mut();
        let r = this.inner.as_mut().poll_frame(cx);
        if this.watch
            && let Poll::Ready(Some(Ok(f))) = &r
            && let Some(d) = f.data_ref()
            && d.windows(11).any(|w| w == b"\"code\":410}" || w == b"\"code\":410,")
        {
            this.seen.expired.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A client as berth builds its own (kube's defaults, retries included),
/// from the admin kubeconfig of `dir`, as `token`'s user when given, under
/// the counting layer.
async fn daemon_client(dir: &Path, token: Option<String>, seen: &Seen) -> kube::Client {
    daemon_client_with(dir, token, true, seen).await
}

/// As [`daemon_client`]; `retries: false` turns kube's retries of 429, 503
/// and 504 off, so that every 429 reaches berth's own code.
async fn daemon_client_with(dir: &Path, token: Option<String>, retries: bool, seen: &Seen) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(dir.join("kubeconfig")).unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.unwrap();
    if let Some(t) = token {
        cfg.auth_info.token = Some(t.into());
    }
    cfg.default_retry = retries;
    kube::client::ClientBuilder::try_from(cfg).unwrap().with_layer(&CountLayer(seen.clone())).build()
}

// ---------------------------------------------------------------------------
// The daemon and what the tests assert.

/// As both.rs's: one profile, short backoffs, a Lease of its own.
fn config(scenario: &str) -> Config {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npodInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 2\n\
         clientConnection:\n  qps: 2000\n  burst: 4000\nleaderElection:\n  leaderElect: true\n  resourceName: berth-e2e-{scenario}-{nanos:x}\n  resourceNamespace: kube-system\n  \
         leaseDuration: 15s\n  renewDeadline: 10s\n  retryPeriod: 2s\nprofiles:\n- schedulerName: {PROFILE}\n"
    );
    Config::parse(&yaml).unwrap()
}

async fn start(client: kube::Client, scenario: &str) -> Handle {
    let opts = Options { bind_address: std::net::SocketAddr::from(([127, 0, 0, 1], 0)), identity: format!("faults-{scenario}"), ..Options::default() };
    daemon::start(client, &config(scenario), opts).await.unwrap()
}

/// Ready as `/readyz` says it: synced once and every watch synced now.
fn ready(h: &Handle) -> bool {
    *h.ready.borrow() && h.watch_health.ready()
}

fn leading(h: &Handle) -> bool {
    *h.leading.borrow()
}

/// When the daemon was ready again after having been unready (sampled
/// every 20 ms from its start until it is dropped).
struct Recovery {
    at: Arc<Mutex<Option<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recovery {
    fn watch(h: &Handle) -> Recovery {
        let at = Arc::new(Mutex::new(None));
        let (mut r, health) = (h.ready.clone(), h.watch_health.clone());
        let a = at.clone();
        let task = tokio::spawn(async move {
            let mut was_unready = false;
            loop {
                let ok = *r.borrow_and_update() && health.ready();
                if !ok {
                    was_unready = true;
                } else if was_unready {
                    *a.lock().unwrap() = Some(Instant::now());
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Recovery { at, task }
    }

    /// Seconds from `from` to the recovery (negative: before it).
    fn since(&self, from: Instant) -> Option<f64> {
        let at = (*self.at.lock().unwrap())?;
        Some(if at >= from { at.duration_since(from).as_secs_f64() } else { -from.duration_since(at).as_secs_f64() })
    }
}

impl Drop for Recovery {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits up to `secs` for `f`; how long it took.
async fn time_until(secs: u64, f: impl Fn() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        if f() {
            return Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// The end state: every one of `n` pods bound, none twice, no node over capacity.
async fn assert_end(client: &kube::Client, ns: &str, n: usize, log: &BindLog, nodes: &[NodeSpec]) -> (i64, i64) {
    let pods = pods_in(client, ns).await;
    assert_eq!(pods.len(), n, "pods lost");
    let unbound: Vec<&str> = pods.iter().filter(|p| node_of(p).is_none()).filter_map(|p| p.metadata.name.as_deref()).collect();
    assert!(unbound.is_empty(), "not bound: {unbound:?}");
    assert!(log.rebinds().is_empty(), "bound twice: {:?}", log.rebinds());
    assert_capacity(&pods, nodes)
}

/// Creates `p`, retrying while the server is away (bounded); a 409 is a
/// create of ours whose reply was lost.
async fn create_patiently(api: &Api<Pod>, p: &Pod) {
    let t0 = Instant::now();
    loop {
        match api.create(&PostParams::default(), p).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) => {
                assert!(t0.elapsed() < Duration::from_secs(120), "creating {:?}: {e}", p.metadata.name);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// Runs `body` under a deadline, then `cleanup` whatever happened; how
/// `body` ended (see [`fail_as`]).
async fn guarded<F, C>(secs: u64, body: F, cleanup: C) -> Result<(), Box<dyn std::any::Any + Send>>
where
    F: Future<Output = ()>,
    C: Future<Output = ()>,
{
    let r = tokio::time::timeout(Duration::from_secs(secs), AssertUnwindSafe(body).catch_unwind()).await;
    cleanup.await;
    match r {
        Err(_) => Err(Box::new(format!("test deadline ({secs} s) exceeded"))),
        Ok(r) => r,
    }
}

/// Fails as the body did.
fn fail_as(r: Result<(), Box<dyn std::any::Any + Send>>) {
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
}

fn zoned_nodes(prefix: &str, n: usize, cpu: &str) -> Vec<NodeSpec> {
    (0..n).map(|i| NodeSpec::new(&format!("{prefix}-{i:02}"), ["zone-a", "zone-b", "zone-c"][i % 3], cpu)).collect()
}

// ---------------------------------------------------------------------------
// 1. kube-apiserver killed mid-burst, started again 20 s later.

async fn apiserver_killed(b: &Backend, ns: &str, nodes: &[NodeSpec]) {
    const N: usize = 500;
    let dir = kube_dir(b);
    b.namespace(ns).await;
    b.add_nodes(nodes).await;
    let seen = Seen::default();
    let d = start(daemon_client(&dir, None, &seen).await, "restart").await;
    crate::e2e_support::until_leading(&d, 60).await;
    let client = b.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (log, watch_task) = BindLog::start(client.clone(), ns);

    // 500 pods of 150m on 20 nodes of 4 cores: 75 of 80 cores.
    let t0 = Instant::now();
    let creator = {
        let api = api.clone();
        tokio::spawn(async move {
            for chunk in 0..(N / 25) {
                let pods: Vec<Pod> = (0..25).map(|i| pod(&format!("r-{:03}", chunk * 25 + i), "150m", json!({}))).collect();
                futures::stream::iter(pods).for_each_concurrent(8, |p| { let api = api.clone(); async move { create_patiently(&api, &p).await } }).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    eventually(120, "100 pods bound before the kill", || async { (log.bound() >= 100).then_some(()) }).await;
    let pid = pid_of(&dir, APISERVER);
    let recovery = Recovery::watch(&d);
    kill9(pid);
    let killed = Instant::now();
    let bound_at_kill = log.bound();
    // Down for 20 s: the daemon must see it (its watches retrying).
    let went_unready = time_until(20, || !ready(&d)).await;
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(killed.elapsed())).await;
    assert!(!alive(pid));
    let bound_while_down = log.bound();
    let started = Instant::now();
    restart(&dir, APISERVER, &[]).await;
    let back = Instant::now();
    let to_ready = time_until(60, || ready(&d)).await;
    ensure_control_plane(&dir).await;
    let to_leading = time_until(60, || ready(&d) && leading(&d)).await;
    creator.await.unwrap();
    eventually(240, "every pod bound after the restart", || async { (log.bound() == N).then_some(()) }).await;
    let all_bound = t0.elapsed();
    let (used, cap) = assert_end(&client, ns, N, &log, nodes).await;
    let w = d.write_counts();
    println!(
        "apiserver killed: {N} pods; killed at {bound_at_kill} bound ({bound_while_down} when started again); daemon unready {:.2} s after the kill; \
         kube-apiserver down {:.1} s, then {:.1} s from its start to /readyz; daemon ready again {:.2} s after its start, {:.2} s after its /readyz \
         (leading {:.2} s after); all bound {:.1} s after the burst began; binds answered {} (409: {}; outcome unknown and read back: {}; failed and retried: {}); \
         {used}m of {cap}m CPU used",
        went_unready.map_or(f64::NAN, |d| d.as_secs_f64()),
        started.duration_since(killed).as_secs_f64(),
        back.duration_since(started).as_secs_f64(),
        recovery.since(started).unwrap_or(f64::NAN),
        recovery.since(back).unwrap_or(f64::NAN),
        to_leading.map_or(f64::NAN, |d| d.as_secs_f64()),
        all_bound.as_secs_f64(),
        Seen::get(&seen.binds),
        Seen::get(&seen.binds_conflict),
        w.binds_unknown,
        w.failures,
    );
    assert!(went_unready.is_some(), "the daemon stayed ready with kube-apiserver down");
    let to_ready = to_ready.expect("the daemon never became ready again");
    assert!(to_ready <= Duration::from_secs(15), "ready again {to_ready:?} after kube-apiserver was back (more than 15 s)");
    assert!(to_leading.is_some(), "the daemon never led again");
    watch_task.abort();
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_faults:: -- --ignored"]
async fn real_apiserver_killed_mid_burst_and_restarted() {
    let b = Backend::real().await;
    let dir = kube_dir(&b);
    let ns = "e2e-fault-restart";
    let nodes = zoned_nodes("fault-restart", 20, "4");
    let r = guarded(480, apiserver_killed(&b, ns, &nodes), ensure_control_plane(&dir)).await;
    b.finish(ns, &nodes).await;
    fail_as(r);
}

// ---------------------------------------------------------------------------
// 2. Watches answered 410 Gone after etcd's compaction.

async fn compacted(b: &Backend, ns: &str, nodes: &[NodeSpec]) {
    let dir = kube_dir(b);
    let env = kube_env(&dir);
    b.namespace(ns).await;
    b.add_nodes(nodes).await;
    let seen = Seen::default();
    let d = start(daemon_client(&dir, None, &seen).await, "compact").await;
    crate::e2e_support::until_leading(&d, 60).await;
    let client = b.client();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (log, watch_task) = BindLog::start(client.clone(), ns);
    let batch = |from: usize| (from..from + 100).map(|i| pod(&format!("c-{i:03}"), "100m", json!({}))).collect::<Vec<_>>();
    crate::e2e_support::create_all(&api, batch(0), 16).await;
    eventually(120, "100 pods bound", || async { (log.bound() == 100).then_some(()) }).await;
    // The version berth's pod watch is at, or older.
    let old_rv = api.list_metadata(&Default::default()).await.unwrap().metadata.resource_version.unwrap();

    // Churn elsewhere (ConfigMaps, which berth does not watch), so the
    // revision moves past every version berth holds, then compact to it.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(0..150)
        .for_each_concurrent(16, |i| {
            let cms = cms.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("churn-{i}")}, "data": {"k": "v"}})).unwrap();
                cms.create(&PostParams::default(), &cm).await.unwrap();
                cms.delete(&format!("churn-{i}"), &DeleteParams::default()).await.unwrap();
            }
        })
        .await;
    let rev = etcd_revision(&env);
    etcd_compact(&env, rev);
    let expired_before = Seen::get(&seen.expired);
    let recovery = Recovery::watch(&d);
    // kube-apiserver stopped (TERM, KILL after 10 s) and started again: every watch is
    // dropped and resumes from a compacted version.
    stop_apiserver(&dir).await;
    let t_restart = Instant::now();
    restart(&dir, APISERVER, &[]).await;
    let back = Instant::now();
    let to_ready = time_until(60, || ready(&d)).await;
    ensure_control_plane(&dir).await;

    // The fault is there: a watch from the old version is answered 410.
    let answered = match api.watch(&WatchParams::default(), &old_rv).await {
        Err(kube::Error::Api(s)) => Some(s.code),
        Err(e) => panic!("watch from {old_rv}: {e}"),
        Ok(s) => match tokio::time::timeout(Duration::from_secs(10), s.boxed().next()).await {
            Ok(Some(Ok(kube::core::WatchEvent::Error(s)))) => Some(s.code),
            Ok(Some(Err(kube::Error::Api(s)))) => Some(s.code),
            other => panic!("watch from {old_rv} (compacted at {rev}) answered {other:?}"),
        },
    };
    assert_eq!(answered, Some(410), "a watch from the compacted version {old_rv} must be answered 410 Gone");

    crate::e2e_support::create_all(&api, batch(100), 16).await;
    eventually(120, "the 100 pods created after the compaction bound", || async { (log.bound() == 200).then_some(()) }).await;
    let to_leading = time_until(60, || ready(&d) && leading(&d)).await;
    let (used, cap) = assert_end(&client, ns, 200, &log, nodes).await;
    let expired = Seen::get(&seen.expired) - expired_before;
    println!(
        "410 after compaction: compacted at revision {rev} (berth's pods at {old_rv} or older); restart took {:.1} s; \
         410s reaching the daemon {expired}; daemon ready again {:.2} s after kube-apiserver's start, {:.2} s after its /readyz (ready {to_ready:?}, \
         leading {to_leading:?} after it); 200 pods bound (binds answered {}, 409: {}); {used}m of {cap}m CPU used",
        back.duration_since(t_restart).as_secs_f64(),
        recovery.since(t_restart).unwrap_or(f64::NAN),
        recovery.since(back).unwrap_or(f64::NAN),
        Seen::get(&seen.binds),
        Seen::get(&seen.binds_conflict),
    );
    assert!(expired > 0, "no watch of the daemon was answered 410 after the compaction");
    let to_ready = to_ready.expect("the daemon never became ready again");
    assert!(to_ready <= Duration::from_secs(15), "ready again {to_ready:?} after kube-apiserver was back (more than 15 s)");
    watch_task.abort();
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_faults:: -- --ignored"]
async fn real_watch_410_after_etcd_compaction() {
    let b = Backend::real().await;
    let dir = kube_dir(&b);
    let ns = "e2e-fault-compact";
    let nodes = zoned_nodes("fault-compact", 10, "4");
    let r = guarded(420, compacted(&b, ns, &nodes), ensure_control_plane(&dir)).await;
    b.finish(ns, &nodes).await;
    fail_as(r);
}

// ---------------------------------------------------------------------------
// 3. 429s from the API server's priority and fairness.

const PF_NAME: &str = "berth-e2e-faults";
const SA: &str = "berth-faults";

/// The ServiceAccount the daemon runs as (cluster-admin: RBAC is not what
/// this tests), and a token for it.
async fn service_account(client: &kube::Client, ns: &str) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    sas.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": SA}})).unwrap()).await.unwrap();
    let crbs: Api<ClusterRoleBinding> = Api::all(client.clone());
    let _ = crbs.delete(PF_NAME, &DeleteParams::default()).await;
    let crb = json!({"metadata": {"name": PF_NAME}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": ns}]});
    crbs.create(&PostParams::default(), &serde_json::from_value(crb).unwrap()).await.unwrap();
    let tr: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}})).unwrap();
    let tr = sas.create_token_request(SA, &PostParams::default(), &tr).await.unwrap();
    tr.status.unwrap().token.unwrap()
}

/// A priority level of a few seats that rejects what does not fit, and a
/// FlowSchema sending every request of the ServiceAccount there.
async fn throttle(client: &kube::Client, ns: &str) {
    let plc = json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration", "metadata": {"name": PF_NAME},
        "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}}}});
    let fs = json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": PF_NAME},
        "spec": {"priorityLevelConfiguration": {"name": PF_NAME}, "matchingPrecedence": 500, "distinguisherMethod": {"type": "ByUser"},
            "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": SA, "namespace": ns}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}});
    for (path, body) in [("prioritylevelconfigurations", plc), ("flowschemas", fs)] {
        let req = http::Request::post(format!("/apis/flowcontrol.apiserver.k8s.io/v1/{path}")).header("Content-Type", "application/json").body(serde_json::to_vec(&body).unwrap()).unwrap();
        client.request_text(req).await.unwrap_or_else(|e| panic!("creating {path}/{PF_NAME}: {e}"));
    }
}

async fn unthrottle(client: &kube::Client) {
    for path in ["flowschemas", "prioritylevelconfigurations"] {
        let req = http::Request::delete(format!("/apis/flowcontrol.apiserver.k8s.io/v1/{path}/{PF_NAME}")).body(Vec::new()).unwrap();
        let _ = client.request_text(req).await;
    }
    let crbs: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    let _ = crbs.delete(PF_NAME, &DeleteParams::default()).await;
}

/// The priority level `client`'s requests are put in (the server says so
/// in a response header), by uid.
async fn priority_level_of(client: &kube::Client) -> Option<String> {
    let req = http::Request::get("/api/v1/namespaces/default").body(kube::client::Body::empty()).unwrap();
    let resp = client.send(req).await.ok()?;
    resp.headers().get("X-Kubernetes-PF-PriorityLevel-UID").and_then(|v| v.to_str().ok()).map(str::to_string)
}

async fn uid_of_level(client: &kube::Client) -> String {
    let req = http::Request::get(format!("/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/{PF_NAME}")).body(Vec::new()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap();
    v["metadata"]["uid"].as_str().unwrap().to_string()
}

/// Requests the server rejected in the priority level, by its own count.
async fn rejected(client: &kube::Client) -> u64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_rejected_requests_total{") && l.contains(&format!("priority_level=\"{PF_NAME}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

async fn throttled(b: &Backend, ns: &str, nodes: &[NodeSpec], retries: bool) {
    const N: usize = 500;
    let dir = kube_dir(b);
    b.namespace(ns).await;
    b.add_nodes(nodes).await;
    let client = b.client();
    let token = service_account(&client, ns).await;
    throttle(&client, ns).await;
    let seen = Seen::default();
    let dclient = daemon_client_with(&dir, Some(token), retries, &seen).await;
    let level = uid_of_level(&client).await;
    eventually(60, "the FlowSchema in effect for the daemon's ServiceAccount", || async { (priority_level_of(&dclient).await? == level).then_some(()) }).await;
    let rejected_before = rejected(&client).await;
    let t_start = Instant::now();
    let d = start(dclient, "throttle").await;
    crate::e2e_support::until_leading(&d, 120).await;
    let to_leading = t_start.elapsed();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (log, watch_task) = BindLog::start(client.clone(), ns);
    // 500 pods of 100m on 10 nodes of 8 cores: 50 of 80 cores, created at once.
    let t0 = Instant::now();
    crate::e2e_support::create_all(&api, (0..N).map(|i| pod(&format!("t-{i:03}"), "100m", json!({}))).collect(), 32).await;
    let mut unready = false;
    eventually(300, "every pod bound under the limit", || {
        unready |= !ready(&d);
        async { (log.bound() == N).then_some(()) }
    })
    .await;
    let all_bound = t0.elapsed();
    let rejected_during = rejected(&client).await - rejected_before;
    let (used, cap) = assert_end(&client, ns, N, &log, nodes).await;
    // The limit lifted: ready within 15 s.
    unthrottle(&client).await;
    let lifted = Instant::now();
    let to_ready = time_until(60, || ready(&d)).await;
    let w = d.write_counts();
    println!(
        "429 under priority and fairness (kube's retries {}): {N} pods bound in {:.1} s (daemon ready and leading {:.1} s after start); 429s: {rejected_during} by the server's count, \
         {} reaching berth past kube's retries; binds {} (409 {}, failed {}, unknown outcome {}); unready during the burst: {unready}; ready {to_ready:?} after the limit was lifted; {used}m of {cap}m CPU used",
        if retries { "on" } else { "off" },
        all_bound.as_secs_f64(),
        to_leading.as_secs_f64(),
        Seen::get(&seen.too_many),
        Seen::get(&seen.binds),
        Seen::get(&seen.binds_conflict),
        w.failures,
        w.binds_unknown,
    );
    let _ = lifted;
    assert!(rejected_during > 0, "the API server answered no 429: the priority level is not tight enough for this test");
    if !retries {
        assert!(Seen::get(&seen.too_many) > 0, "no 429 reached berth with kube's retries off");
    }
    let to_ready = to_ready.expect("the daemon never became ready again");
    assert!(to_ready <= Duration::from_secs(15), "ready again {to_ready:?} after the limit was lifted (more than 15 s)");
    watch_task.abort();
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_faults:: -- --ignored"]
async fn real_429_from_priority_and_fairness() {
    let b = Backend::real().await;
    let client = b.client();
    let ns = "e2e-fault-429";
    let nodes = zoned_nodes("fault-429", 10, "8");
    let r = guarded(480, throttled(&b, ns, &nodes, true), unthrottle(&client)).await;
    b.finish(ns, &nodes).await;
    fail_as(r);
}

/// The same with kube's own retries off: every 429 reaches berth (its
/// writer, its watches, its leader election), which must retry by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: tools/kube/up DIR, then BERTH_KUBE_DIR=DIR cargo test --test e2e real_faults:: -- --ignored"]
async fn real_429_from_priority_and_fairness_without_client_retries() {
    let b = Backend::real().await;
    let client = b.client();
    let ns = "e2e-fault-429-bare";
    let nodes = zoned_nodes("fault-429-bare", 10, "8");
    let r = guarded(480, throttled(&b, ns, &nodes, false), unthrottle(&client)).await;
    b.finish(ns, &nodes).await;
    fail_as(r);
}
