//! Bounded watches, measured: 1,000 watchers that never read, on 3,000
//! pods, while the pods change. Prints the server's memory above its
//! level without them (peak, and after they close) and checks that a
//! watcher too far behind is closed. Ignored by default: it measures the
//! whole process, so it runs alone:
//!
//! `cargo test --release -p berth-cluster --test it slow_watchers -- --ignored --nocapture`
//!
//! The baseline is the server after the same changes without watchers,
//! after a few watchers have come and gone (its HTTP code paths paged in:
//! about 1 MB of the binary's text, in RssFile) and after the same idle
//! time as the figures after the watchers close (so that the allocator has
//! purged in both). What stays after 1,000 watchers close (about 4 MB,
//! all of it anonymous memory) is not held by the server: under heaptrack
//! (the system allocator in place of jemalloc), the memory still allocated
//! after they close is the same as at the baseline, to 10 KB. It is the
//! allocator's: pages of its slabs that the objects written while the
//! watchers were open keep partly used.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use berth_cluster::resources::PODS;
use berth_cluster::store::{PatchType, StoreConfig};
use berth_cluster::{ClusterConfig, KubeletConfig, LocalCluster};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The process's resident set, in bytes.
fn rss() -> u64 {
    status_kb("VmRSS:")
}

/// A line of /proc/self/status in kB, as bytes.
fn status_kb(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).unwrap_or(0) * 1024
}

/// The process's threads.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

fn mb(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measures the process's memory: run alone with --ignored --nocapture"]
async fn slow_watchers_are_bounded_and_closed() {
    const PODS_N: usize = 3_000;
    const WATCHERS: usize = 1_000;
    const CAPACITY: usize = 8_192;
    let cfg = ClusterConfig {
        nodes: 1,
        kubelet: KubeletConfig { enabled: false, ..Default::default() },
        // A short history, so that the same changes leave the same
        // history with and without watchers.
        store: StoreConfig { channel_capacity: CAPACITY, history_limit: 2_000, ..Default::default() },
        // Plain HTTP: the figure is the server's watch buffers, not 1,000 TLS sessions'.
        tls: false,
        ..Default::default()
    };
    let c = LocalCluster::start(cfg).await.unwrap();
    let store = c.store().clone();
    let filler = "x".repeat(600);
    for i in 0..PODS_N {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p-{i}"), "labels": {"app": "a", "round": "0"}, "annotations": {"filler": filler}},
            "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}});
        store.create(PODS, "default", pod).unwrap();
    }
    // The pods change: more events than a watcher may fall behind by.
    let rounds = CAPACITY / PODS_N + 2;
    let churn = |first_round: usize| {
        for round in first_round..first_round + rounds {
            for i in 0..PODS_N {
                let patch = json!({"metadata": {"labels": {"round": round.to_string()}}}).to_string();
                store.patch(PODS, "default", &format!("p-{i}"), PatchType::Merge, patch.as_bytes(), false).unwrap();
            }
        }
    };
    // jemalloc gives freed pages back after its decay time (1 s here,
    // `dirty_decay_ms` in .cargo/config.toml), as the allocator is used:
    // the server serves a little meanwhile. Both the baseline and the
    // figures after the watchers close are read after this, so that they
    // compare the same state (read 1 s after the churn, the baseline
    // varied by 6 MB from run to run with what was not purged yet).
    let settle = || async {
        for i in 0..120 {
            let patch = json!({"metadata": {"labels": {"idle": i.to_string()}}}).to_string();
            store.patch(PODS, "default", "p-0", PatchType::Merge, patch.as_bytes(), false).unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    // The same changes once without watchers: the baseline is the server
    // in its steady state.
    churn(1);
    settle().await;
    let cold = rss();
    println!("before any request: {:.1} MB (anon {:.1}, file {:.1})", mb(cold), mb(status_kb("RssAnon:")), mb(status_kb("RssFile:")));
    // A server that has served: a few watchers read their snapshot and
    // close (the code paths, and what the server builds on its first
    // requests, are then in memory, as in any running server).
    for _ in 0..10 {
        let mut s = tokio::net::TcpStream::connect(c.addr()).await.unwrap();
        s.write_all(format!("GET /api/v1/pods?watch=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n", c.admin_token()).as_bytes()).await.unwrap();
        let mut sink = vec![0u8; 1 << 16];
        let mut got = 0;
        while got < 1 << 20 {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
    }
    settle().await;
    let baseline = rss();
    let threads_before = threads();
    println!("baseline: {:.1} MB (anon {:.1}, file {:.1})", mb(baseline), mb(status_kb("RssAnon:")), mb(status_kb("RssFile:")));

    // Sample the peak while the watchers are open.
    let peak = Arc::new(AtomicU64::new(baseline));
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // Two sets of watchers, one after the other: what the first leaves
    // behind that the second does not add to is the allocator's cache,
    // not the server's.
    let mut after = Vec::new();
    let mut read = 0usize;
    let mut with_watchers = 0;
    for set in 0..2 {
        let mut conns = Vec::with_capacity(WATCHERS);
        for _ in 0..WATCHERS {
            let mut s = tokio::net::TcpStream::connect(c.addr()).await.unwrap();
            s.write_all(format!("GET /api/v1/pods?watch=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n", c.admin_token()).as_bytes()).await.unwrap();
            conns.push(s);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        with_watchers = with_watchers.max(rss());
        churn((set + 1) * rounds + 1);
        tokio::time::sleep(Duration::from_secs(1)).await;
        // A watcher that never read is too far behind: once it reads what
        // was ready for it, its stream ends (the client would relist).
        let mut first = conns.swap_remove(0);
        let mut sink = vec![0u8; 1 << 16];
        read = 0;
        let ended = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                match first.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        read += n;
                        if sink[..n].windows(5).any(|w| w == b"0\r\n\r\n") {
                            break;
                        }
                    }
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "a watcher far behind was not closed ({read} bytes read)");
        drop(first);
        drop(conns);
        settle().await;
        after.push(rss());
        println!("after set {set}: {:.1} MB (anon {:.1}, file {:.1}), {} threads (baseline {} threads)", mb(rss()), mb(status_kb("RssAnon:")), mb(status_kb("RssFile:")), threads(), threads_before);
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::Relaxed);
    let above = |b: u64| mb(b) - mb(baseline);
    println!(
        "slow watchers: {WATCHERS} on {PODS_N} pods ({} events each behind): baseline {:.1} MB; with watchers {:+.1} MB; peak {:+.1} MB ({:.0} KB per watcher); after the first set closed {:+.1} MB, after a second set closed {:+.1} MB ({:+.1}%); a lagging watcher got {} KB before its stream ended",
        rounds * PODS_N,
        mb(baseline),
        above(with_watchers),
        above(peak),
        (peak.saturating_sub(baseline)) as f64 / 1024.0 / WATCHERS as f64,
        above(after[0]),
        above(after[1]),
        (after[1] as f64 / baseline as f64 - 1.0) * 100.0,
        read / 1024,
    );
    c.shutdown().await;
}
