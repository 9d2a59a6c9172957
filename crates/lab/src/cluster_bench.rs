//! `berth cluster-bench`: pod creates/s and bindings/s over loopback HTTPS
//! (the admin token, authorized by RBAC, as `berth cluster` serves by
//! default) from concurrent clients, while several watchers receive every
//! pod event. `--authorization-mode AlwaysAllow` and `--plain-http`
//! measure what authorization and TLS cost.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt};

use berth_cluster::{ClusterConfig, Error, KubeletConfig, LocalCluster, StoreConfig, resources};

/// Arguments of `berth cluster-bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Nodes stored before the run.
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,
    /// Pods created, then bound.
    #[arg(long, default_value_t = 50_000)]
    pub pods: usize,
    /// Concurrent clients (each its own connection pool).
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Requests in flight per client.
    #[arg(long, default_value_t = 4)]
    pub inflight: usize,
    /// Watchers of all pods.
    #[arg(long, default_value_t = 4)]
    pub watchers: usize,
    /// Run the kubelet simulation during the run (adds Running updates).
    #[arg(long)]
    pub kubelet: bool,
    /// Keep the cluster in a data directory (as `berth cluster
    /// --data-dir`): a new directory is made inside this one for the run
    /// and removed after it.
    #[arg(long)]
    pub data_dir: Option<std::path::PathBuf>,
    /// How the cluster authorizes requests (as `berth cluster`).
    #[arg(long, value_enum, default_value_t = berth_cluster::authz::AuthorizationMode::Rbac)]
    pub authorization_mode: berth_cluster::authz::AuthorizationMode,
    /// Serve plain HTTP instead of HTTPS.
    #[arg(long)]
    pub plain_http: bool,
}

impl Default for BenchArgs {
    fn default() -> Self {
        Self { nodes: 5000, pods: 50_000, clients: 8, inflight: 4, watchers: 4, kubelet: false, data_dir: None, authorization_mode: Default::default(), plain_http: false }
    }
}

/// Figures measured by the benchmark.
#[derive(Debug, Clone, Default)]
pub struct BenchReport {
    /// Nodes stored.
    pub nodes: usize,
    /// Kept in a data directory (`--data-dir`).
    pub persistent: bool,
    /// The authorization mode and transport, as printed (`RBAC over HTTPS`).
    pub access: String,
    /// Pods created and bound.
    pub pods: usize,
    /// Clients.
    pub clients: usize,
    /// Pod creates per second.
    pub creates_per_sec: f64,
    /// Bindings per second.
    pub binds_per_sec: f64,
    /// Requests that failed (should be 0).
    pub errors: u64,
    /// Watchers.
    pub watchers: usize,
    /// Events each watcher was expected to receive.
    pub events_expected: u64,
    /// Fewest events received by a watcher.
    pub events_min_received: u64,
    /// Events delivered per second, summed over watchers, over the run.
    pub delivered_events_per_sec: f64,
    /// Largest distance (in resourceVersions) between the store head and
    /// an event as a watcher received it.
    pub max_lag_events: u64,
    /// Time from the last write to the last watcher having everything.
    pub drain_ms: f64,
    /// Time to list all pods once over HTTP (ms) at the end.
    pub list_all_ms: f64,
    /// Growth of the process's resident memory from before the first
    /// create to after the last binding, per pod (bytes; Linux only, 0
    /// elsewhere): the store's objects, their history and watch buffers.
    pub rss_per_pod_bytes: f64,
}

/// The process's resident set size (Linux `/proc/self/status` VmRSS).
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = if self.persistent { ", kept in a data directory" } else { "" };
        writeln!(f, "cluster-bench: {} nodes, {} pods, {} clients, {} watchers{kept}, {}", self.nodes, self.pods, self.clients, self.watchers, self.access)?;
        writeln!(f, "  pod creates/s:      {:>10.0}", self.creates_per_sec)?;
        writeln!(f, "  memory per pod:     {:>10.0} bytes (resident growth over the run / pods)", self.rss_per_pod_bytes)?;
        writeln!(f, "  bindings/s:         {:>10.0}", self.binds_per_sec)?;
        writeln!(f, "  request errors:     {:>10}", self.errors)?;
        writeln!(f, "  watch events/s:     {:>10.0} (delivered, all watchers)", self.delivered_events_per_sec)?;
        writeln!(f, "  events per watcher: {:>10} of {} expected (min)", self.events_min_received, self.events_expected)?;
        writeln!(f, "  max watch lag:      {:>10} events behind the store head", self.max_lag_events)?;
        writeln!(f, "  watch drain:        {:>10.1} ms after the last write", self.drain_ms)?;
        write!(f, "  list all pods:      {:>10.1} ms (one HTTP GET /api/v1/pods)", self.list_all_ms)
    }
}

fn pod_body(i: usize) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"bench-{i}","namespace":"default","labels":{{"app":"bench","shard":"s{}"}}}},"spec":{{"containers":[{{"name":"c","image":"registry.k8s.io/pause:3.10","resources":{{"requests":{{"cpu":"100m","memory":"500Mi"}}}}}}]}}}}"#,
        i % 16
    )
    .into_bytes()
}

fn binding_body(i: usize, nodes: usize) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"v1","kind":"Binding","metadata":{{"name":"bench-{i}","namespace":"default"}},"target":{{"apiVersion":"v1","kind":"Node","name":"node-{}"}}}}"#,
        i % nodes.max(1)
    )
    .into_bytes()
}

fn first_rv(line: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"resourceVersion\":\"";
    let pos = line.windows(KEY.len()).position(|w| w == KEY)?;
    let rest = &line[pos + KEY.len()..];
    let end = rest.iter().position(|b| *b == b'"')?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

async fn phase(clients: &[kube::Client], inflight: usize, n: usize, make: impl Fn(usize) -> (String, Vec<u8>) + Sync, errors: &AtomicU64) -> f64 {
    let started = Instant::now();
    let per = n.div_ceil(clients.len().max(1));
    let make = &make;
    let runs = clients.iter().enumerate().map(|(ci, c)| async move {
        let lo = ci * per;
        let hi = ((ci + 1) * per).min(n);
        futures::stream::iter(lo..hi)
            .map(|i| async move {
                let (uri, body) = make(i);
                let req = axum::http::Request::builder()
                    .method("POST")
                    .uri(uri)
                    .header("content-type", "application/json")
                    .body(body);
                match req {
                    Ok(req) => {
                        if c.request_text(req).await.is_err() {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .buffer_unordered(inflight.max(1))
            .collect::<Vec<()>>()
            .await
    });
    futures::future::join_all(runs).await;
    n as f64 / started.elapsed().as_secs_f64()
}

/// Run the benchmark in-process (server and clients share the machine).
pub async fn run_bench(args: &BenchArgs) -> Result<BenchReport, Error> {
    let data_dir = args.data_dir.as_ref().map(|d| d.join(format!("cluster-bench-{}", std::process::id())));
    if let Some(d) = &data_dir {
        let _ = std::fs::remove_dir_all(d);
    }
    let cfg = ClusterConfig {
        data_dir: data_dir.clone(),
        nodes: args.nodes,
        kubelet: KubeletConfig { enabled: args.kubelet, ..Default::default() },
        store: StoreConfig { history_limit: 200_000, channel_capacity: 262_144, ..Default::default() },
        authorization: args.authorization_mode,
        tls: !args.plain_http,
        ..Default::default()
    };
    let access = format!(
        "{} over {}",
        match args.authorization_mode {
            berth_cluster::authz::AuthorizationMode::Rbac => "RBAC",
            berth_cluster::authz::AuthorizationMode::AlwaysAllow => "AlwaysAllow",
        },
        if args.plain_http { "HTTP" } else { "HTTPS" }
    );
    let cluster = LocalCluster::start(cfg).await?;
    let store = cluster.store().clone();
    let clients: Vec<kube::Client> = (0..args.clients.max(1)).map(|_| cluster.client()).collect::<Result<_, _>>()?;
    let start_rv = store.current_rv();
    // create + bind (+ the kubelet's Running update).
    let expected = (args.pods * if args.kubelet { 3 } else { 2 }) as u64;
    let max_lag = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let mut watchers = Vec::new();
    for _ in 0..args.watchers {
        let client = cluster.client()?;
        let store = store.clone();
        let max_lag = max_lag.clone();
        let mut stop_rx = stop_rx.clone();
        watchers.push(tokio::spawn(async move {
            let uri = format!("/api/v1/pods?watch=true&resourceVersion={start_rv}&timeoutSeconds=600");
            let Ok(req) = axum::http::Request::builder().uri(uri).body(Vec::new()) else { return (0u64, None) };
            let Ok(stream) = client.request_stream(req).await else { return (0, None) };
            let mut lines = stream.lines();
            let mut count = 0u64;
            let mut last_at = None;
            loop {
                tokio::select! {
                    _ = stop_rx.changed() => break,
                    l = lines.next() => match l {
                        Some(Ok(line)) => {
                            if let Some(rv) = first_rv(line.as_bytes()) {
                                let lag = store.current_rv().saturating_sub(rv);
                                max_lag.fetch_max(lag, Ordering::Relaxed);
                            }
                            count += 1;
                            last_at = Some(Instant::now());
                            if count >= expected {
                                break;
                            }
                        }
                        _ => break,
                    }
                }
            }
            (count, last_at)
        }));
    }
    // Give the watchers a moment to connect.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let errors = AtomicU64::new(0);
    let rss_before = rss_bytes();
    let run_started = Instant::now();
    let creates = phase(&clients, args.inflight, args.pods, |i| ("/api/v1/namespaces/default/pods".to_string(), pod_body(i)), &errors).await;
    let nodes = args.nodes;
    let binds = phase(
        &clients,
        args.inflight,
        args.pods,
        |i| (format!("/api/v1/namespaces/default/pods/bench-{i}/binding"), binding_body(i, nodes)),
        &errors,
    )
    .await;
    let writes_done = Instant::now();
    let rss_per_pod_bytes = match (rss_before, rss_bytes()) {
        (Some(a), Some(b)) if args.pods > 0 => b.saturating_sub(a) as f64 / args.pods as f64,
        _ => 0.0,
    };

    // Wait (bounded) for the watchers to receive everything.
    let deadline = tokio::time::sleep(Duration::from_secs(60));
    tokio::pin!(deadline);
    let mut results = Vec::new();
    for w in watchers {
        tokio::select! {
            r = w => results.push(r.unwrap_or((0, None))),
            _ = &mut deadline => { let _ = stop_tx.send(true); results.push((0, None)); }
        }
    }
    let _ = stop_tx.send(true);
    let min_received = results.iter().map(|r| r.0).min().unwrap_or(0);
    let total_received: u64 = results.iter().map(|r| r.0).sum();
    let last = results.iter().filter_map(|r| r.1).max();
    let drain_ms = last.map_or(0.0, |l| l.saturating_duration_since(writes_done).as_secs_f64() * 1000.0);
    let delivered_per_sec = total_received as f64 / last.unwrap_or(writes_done).duration_since(run_started).as_secs_f64();

    let t = Instant::now();
    let listed = match axum::http::Request::builder().uri("/api/v1/pods").body(Vec::new()) {
        Ok(req) => clients[0].request_text(req).await.map(|s| s.len()).unwrap_or(0),
        Err(_) => 0,
    };
    let list_all_ms = t.elapsed().as_secs_f64() * 1000.0;
    tracing::debug!(listed, pods = store.count(resources::PODS), "listed pods");

    let report = BenchReport {
        nodes: args.nodes,
        persistent: data_dir.is_some(),
        access,
        pods: args.pods,
        clients: clients.len(),
        creates_per_sec: creates,
        binds_per_sec: binds,
        errors: errors.load(Ordering::Relaxed),
        watchers: args.watchers,
        events_expected: expected,
        events_min_received: min_received,
        delivered_events_per_sec: delivered_per_sec,
        max_lag_events: max_lag.load(Ordering::Relaxed),
        drain_ms,
        list_all_ms,
        rss_per_pod_bytes,
    };
    drop(clients);
    cluster.shutdown().await;
    if let Some(d) = &data_dir {
        let _ = std::fs::remove_dir_all(d);
    }
    Ok(report)
}

/// Run `berth cluster-bench` and print the figures.
pub async fn run(args: BenchArgs) -> Result<(), Error> {
    let report = run_bench(&args).await?;
    println!("{report}");
    Ok(())
}
