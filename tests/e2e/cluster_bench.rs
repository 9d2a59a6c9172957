//! Smoke run of the cluster benchmark at a small size (no timing assertions).

use berth_lab::cluster_bench::{BenchArgs, run_bench};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_smoke_200_nodes_2000_pods() {
    let args = BenchArgs { nodes: 200, pods: 2000, clients: 4, inflight: 4, watchers: 2, kubelet: false, data_dir: None, ..Default::default() };
    let report = match run_bench(&args).await {
        Ok(r) => r,
        Err(e) => panic!("bench failed: {e}"),
    };
    println!("{report}");
    assert_eq!(report.errors, 0);
    assert_eq!(report.events_min_received, report.events_expected);
    assert!(report.creates_per_sec > 0.0 && report.binds_per_sec > 0.0);
}
