//! The daemon under faults (issue 10): no needless preemption victim, no
//! node over capacity after lost bind replies, no write after the lease is
//! lost, events that neither starve binds nor get lost, health that means
//! something, and PodScheduled's lastTransitionTime kept across failures.
//! Faults go through `fault_proxy` between a daemon and the local cluster.
#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::Method;
use berth_cluster::{FaultConfig, LocalCluster};
use berth_engine::config::Config;
use berth_daemon::{self as daemon, Handle, Options};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::e2e_recovery::{Logs, run_logged};
use crate::e2e_support::*;
use crate::fault_proxy::{Fault, FaultProxy, Rule, Write};

async fn deadline<F: std::future::Future<Output = ()>>(secs: u64, f: F) {
    tokio::time::timeout(Duration::from_secs(secs), f).await.unwrap_or_else(|_| panic!("test deadline ({secs} s) exceeded"));
}

/// The e2e configuration with the client's qps/burst set.
fn config_qps(qps: u32, burst: u32) -> Config {
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npodInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 2\nclientConnection:\n  qps: {qps}\n  burst: {burst}\nleaderElection:\n  leaderElect: true\n  leaseDuration: 3s\n  renewDeadline: 2s\n  retryPeriod: 500ms\nprofiles:\n- schedulerName: {PROFILE}\n"
    );
    Config::parse(&yaml).unwrap()
}

async fn start_via(proxy: &FaultProxy, cfg: &Config, identity: &str, tolerance: Option<Duration>) -> Handle {
    let mut opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: identity.into(), ..Options::default() };
    if let Some(t) = tolerance {
        opts.leader_healthz_tolerance = t;
    }
    daemon::start(proxy.client(), cfg, opts).await.unwrap()
}

async fn priority_class(c: &LocalCluster, name: &str, value: i32) {
    let api: Api<PriorityClass> = Api::all(c.client().unwrap());
    let pc: PriorityClass = serde_json::from_value(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value})).unwrap();
    api.create(&PostParams::default(), &pc).await.unwrap();
}

/// Nodes holding more bound pods than `slots`.
fn over_capacity(all: &[Pod], slots: usize) -> usize {
    let mut per: HashMap<&str, usize> = HashMap::new();
    for p in all {
        if let Some(n) = node_of(p) {
            *per.entry(n).or_insert(0) += 1;
        }
    }
    per.values().filter(|n| **n > slots).count()
}

// 10.1: 3 nodes × 2 slots of low-priority pods (grace 1 s); three
// high-priority pods 0.2 s apart: exactly three victims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_evicts_exactly_three_victims_for_three_preemptors() {
    deadline(60, async {
        let c = cluster(3, 1, "64", 2, FaultConfig::default()).await;
        priority_class(&c, "low", 10).await;
        priority_class(&c, "high", 1000).await;
        let d = start_daemon(&c, &config(""), "victims").await;
        until_leading(&d, 20).await;
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        let lows: Vec<Pod> = (0..6).map(|i| pod(&format!("low-{i}"), "100m", json!({"spec": {"priorityClassName": "low", "terminationGracePeriodSeconds": 1}}))).collect();
        create_all(&api, lows, 6).await;
        eventually(15, "low pods bound", || async { (pods(&api).await.iter().filter(|p| node_of(p).is_some()).count() == 6).then_some(()) }).await;
        let (deleted, task) = {
            // Record every low pod that gets a deletionTimestamp or disappears.
            let seen: Arc<Mutex<HashSet<String>>> = Arc::default();
            let s2 = seen.clone();
            let wapi = api.clone();
            let task = tokio::spawn(async move {
                let mut s = watcher(wapi, watcher::Config::default()).touched_objects().boxed();
                while let Some(ev) = s.next().await {
                    let Ok(p) = ev else { continue };
                    let name = p.metadata.name.clone().unwrap_or_default();
                    if name.starts_with("low-") && p.metadata.deletion_timestamp.is_some() {
                        s2.lock().unwrap().insert(name);
                    }
                }
            });
            (seen, task)
        };
        for i in 0..3 {
            api.create(&PostParams::default(), &pod(&format!("high-{i}"), "100m", json!({"spec": {"priorityClassName": "high"}}))).await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eventually(30, "high pods bound", || async {
            let all = pods(&api).await;
            (all.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("high-")) && node_of(p).is_some()).count() == 3).then_some(())
        })
        .await;
        // Let any late, needless preemption show up.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let all = pods(&api).await;
        let lows_left = all.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("low-")) && p.metadata.deletion_timestamp.is_none()).count();
        let victims = deleted.lock().unwrap().len().max(6 - lows_left);
        let preempted = event_counts(&c, "Preempted").await.len();
        println!("preemption: victims {victims} (Preempted events for {preempted} pods), low pods left {lows_left}");
        assert_eq!(victims, 3, "victims: {:?}", deleted.lock().unwrap());
        assert_eq!(over_capacity(&all, 2), 0);
        task.abort();
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 10.2: replies of committed binds are lost and the pod watch is held (it
// lags), on nodes that are exactly full: no node over capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_bind_replies_never_overfill_a_node() {
    deadline(90, async {
        const NODES: usize = 10;
        const SLOTS: u32 = 6;
        let c = cluster(NODES, 2, "64", SLOTS, FaultConfig::default()).await;
        let proxy = FaultProxy::start(c.client_without_retry().unwrap()).await;
        let (log, task) = crate::backend::BindLog::start(c.client().unwrap(), "default");
        // The pods exist before berth starts: it learns them from its initial
        // lists, and from then on every watch lags (held at the proxy), so no
        // watch event confirms a bind.
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        let n = NODES * SLOTS as usize;
        create_all(&api, (0..n).map(|i| pod(&format!("l-{i:03}"), "100m", json!({}))).collect(), 20).await;
        // Pods beyond capacity: they must stay pending.
        create_all(&api, (0..10).map(|i| pod(&format!("extra-{i}"), "100m", json!({}))).collect(), 10).await;
        proxy.hold_watches(true);
        // Bind replies lost after the commit, or a 500 after it.
        proxy.set_rules(vec![
            Rule::new(Some(Method::POST), "/binding", Fault::DropReplyAfterCommit, 0.25),
            Rule::new(Some(Method::POST), "/binding", Fault::ErrorAfterCommit, 0.1),
        ]);
        let d = start_via(&proxy, &config(""), "lost-replies", None).await;
        until_leading(&d, 20).await;
        eventually(40, "every slot taken", || async { (log.bound() >= n).then_some(()) }).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        // The watch catches up: an outage, then it resumes.
        proxy.blackout(true);
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.blackout(false);
        proxy.hold_watches(false);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let all = pods(&api).await;
        let over = over_capacity(&all, SLOTS as usize);
        let bound = all.iter().filter(|p| node_of(p).is_some()).count();
        let counts = d.write_counts();
        println!("lost replies: {} faults injected, {} binds read back, {bound} pods bound on {n} slots, nodes over capacity {over}", proxy.injected(), counts.binds_unknown);
        assert!(proxy.injected() > 5, "only {} faults injected", proxy.injected());
        assert_eq!(over, 0, "nodes over capacity");
        assert_eq!(bound, n);
        assert!(log.rebinds().is_empty(), "{:?}", log.rebinds());
        task.abort();
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 10.3: a leader that cannot renew stops writing before anyone else may
// lead, even with writes queued behind its rate limiter; after SIGTERM-style
// shutdown (lease released) it writes nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deposed_leader_writes_nothing_after_losing_the_lease() {
    deadline(90, async {
        let c = cluster(20, 2, "64", 110, FaultConfig::default()).await;
        let pa = FaultProxy::start(c.client_without_retry().unwrap()).await;
        let pb = FaultProxy::start(c.client_without_retry().unwrap()).await;
        // A slow client: binds, status and events queue behind the limiter.
        let cfg = config_qps(10, 1);
        let a = start_via(&pa, &cfg, "replica-a", None).await;
        until_leading(&a, 20).await;
        let b = start_via(&pb, &cfg, "replica-b", None).await;
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        // Schedulable pods and unschedulable ones (status patches and events).
        create_all(&api, (0..150).map(|i| pod(&format!("w-{i:03}"), "100m", json!({}))).collect(), 25).await;
        create_all(&api, (0..50).map(|i| pod(&format!("big-{i:03}"), "1000", json!({}))).collect(), 25).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!pa.writes_since(Instant::now() - Duration::from_secs(2)).is_empty(), "replica-a wrote nothing");
        // Replica-a can no longer reach its Lease.
        pa.set_rules(vec![Rule::new(None, "/leases", Fault::Status(500), 1.0)]);
        let mut al = a.leading.clone();
        tokio::time::timeout(Duration::from_secs(10), al.wait_for(|l| !*l)).await.unwrap().unwrap();
        let a_stepped_down = Instant::now();
        let mut bl = b.leading.clone();
        tokio::time::timeout(Duration::from_secs(15), bl.wait_for(|l| *l)).await.expect("replica-b never took over").unwrap();
        let b_leads = Instant::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after_loss = pa.writes_since(b_leads).len();
        let after_step_down = pa.writes_since(a_stepped_down).len();
        println!("lease loss: replica-a writes after replica-b leads {after_loss}, after it stepped down {after_step_down}; refused {}", a.write_counts().refused_not_leader);
        assert_eq!(after_loss, 0, "writes by the deposed leader: {:?}", pa.writes_since(b_leads));
        assert_eq!(after_step_down, 0, "writes after stepping down: {:?}", pa.writes_since(a_stepped_down));
        // Replica-b leads and writes; shut it down: nothing after its release.
        eventually(20, "replica-b writes", || async { (!pb.writes_since(b_leads).is_empty()).then_some(()) }).await;
        b.shutdown().await;
        let writes = pb.writes();
        let release = writes.iter().rposition(|w| w.is_lease()).expect("replica-b never wrote its lease");
        let after_release: Vec<_> = writes[release + 1..].to_vec();
        println!("shutdown: replica-b writes after releasing the lease {}", after_release.len());
        assert!(after_release.is_empty(), "{after_release:?}");
        a.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

/// The pods a daemon holds pending (every queue), from its metrics.
fn pending_in(d: &Handle) -> i64 {
    d.metrics.render().lines().filter(|l| l.starts_with("scheduler_pending_pods{")).filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok()).sum()
}

// A replica that takes the Lease while its watches lag behind the previous
// leader's binds decides on a fresh view, never on its old one. The
// follower sees 15 pods pending, then its watches are held; the leader
// fills both nodes (10 bound, 5 left with no room) and hands the Lease over
// on shutdown. The follower, still seeing 15 pending pods and two empty
// nodes, relists on taking the Lease: it binds none of the 5, and no node
// is over capacity. (Found by the fault soak under load: a successor bound
// on a view a few hundred binds old.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_behind_on_its_watches_relists_before_binding() {
    deadline(90, async {
        const SLOTS: u32 = 5;
        let c = cluster(2, 4, "64", SLOTS, FaultConfig::default()).await;
        let pa = FaultProxy::start(c.client_without_retry().unwrap()).await;
        let pb = FaultProxy::start(c.client_without_retry().unwrap()).await;
        let cfg = config_short_lease("");
        let a = start_via(&pa, &cfg, "ahead", None).await;
        until_leading(&a, 20).await;
        let b = start_via(&pb, &cfg, "behind", None).await;
        let mut b_ready = b.ready.clone();
        tokio::time::timeout(Duration::from_secs(20), b_ready.wait_for(|r| *r)).await.unwrap().unwrap();
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        // The leader's binds wait at its proxy until the follower has seen every pod pending.
        pa.hold(Method::POST, "/binding");
        create_all(&api, (0..15).map(|i| pod(&format!("h-{i:02}"), "100m", json!({}))).collect(), 15).await;
        eventually(30, "the follower holds 15 pending pods", || async { (pending_in(&b) == 15).then_some(()) }).await;
        pb.hold_watches(true);
        pa.release();
        let bound = |all: &[Pod]| all.iter().filter(|p| node_of(p).is_some()).count();
        eventually(30, "the leader fills both nodes", || async { (bound(&pods(&api).await) == 2 * SLOTS as usize).then_some(()) }).await;
        a.shutdown().await;
        let mut bl = b.leading.clone();
        tokio::time::timeout(Duration::from_secs(15), bl.wait_for(|l| *l)).await.expect("the follower never took over").unwrap();
        // Time enough to bind on its old view, had it kept it.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let all = pods(&api).await;
        let over = over_capacity(&all, SLOTS as usize);
        let binds_by_b = pb.writes().iter().filter(|w| w.path.contains("/binding")).count();
        println!("handover behind: bound {}, nodes over capacity {over}, binds sent by the successor {binds_by_b}", bound(&all));
        assert_eq!(over, 0, "nodes over capacity");
        assert_eq!(bound(&all), 2 * SLOTS as usize);
        assert_eq!(binds_by_b, 0, "the successor bound pods on its old view");
        pb.hold_watches(false);
        b.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 10.6: events held at the proxy never hold up binds; then, with event writes
// failing half the time, every bound pod still gets its one Scheduled event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_never_delay_binds_and_are_not_lost() {
    deadline(90, async {
        let c = cluster(10, 2, "64", 110, FaultConfig::default()).await;
        let proxy = FaultProxy::start(c.client_without_retry().unwrap()).await;
        let d = start_via(&proxy, &config(""), "events", None).await;
        until_leading(&d, 20).await;
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        // No event gets through for now; a flood of FailedScheduling events queues up.
        proxy.hold(Method::POST, "/events");
        create_all(&api, (0..100).map(|i| pod(&format!("big-{i:03}"), "1000", json!({}))).collect(), 25).await;
        const N: usize = 150;
        create_all(&api, (0..N).map(|i| pod(&format!("e-{i:03}"), "100m", json!({}))).collect(), 25).await;
        eventually(30, "every pod bound while events are held", || async {
            (pods(&api).await.iter().filter(|p| node_of(p).is_some()).count() == N).then_some(())
        })
        .await;
        assert!(event_counts(&c, "Scheduled").await.is_empty(), "events were not held");
        // Release them, failing half of the event writes.
        proxy.set_rules(vec![Rule::new(Some(Method::POST), "/events", Fault::Status(500), 0.3)]);
        proxy.release();
        let sched = eventually(60, "a Scheduled event for every bound pod", || async {
            let m = event_counts(&c, "Scheduled").await;
            (m.len() == N).then_some(m)
        })
        .await;
        let counts = d.write_counts();
        println!("events: {} injected failures, {} retries, lost {}, Scheduled events for {} of {N} bound pods", proxy.injected(), counts.event_retries, counts.events_lost, sched.len());
        assert!(sched.values().all(|n| *n == 1), "a pod has two Scheduled events");
        assert!(proxy.injected() > 10);
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 10.7: /readyz names a disconnected watch and recovers; /healthz is ok while
// renewing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_disconnected_watches() {
    deadline(60, async {
        let c = cluster(3, 1, "8", 110, FaultConfig::default()).await;
        let proxy = FaultProxy::start(c.client_without_retry().unwrap()).await;
        let d = start_via(&proxy, &config(""), "health", None).await;
        until_leading(&d, 20).await;
        assert_eq!(http_get(d.admin_addr, "/readyz").await.0, 200);
        assert_eq!(http_get(d.admin_addr, "/healthz").await.0, 200);
        proxy.blackout(true);
        // Each watch notices on its own (a cut stream, then a reset retry);
        // on a loaded machine that can take a while.
        let body = eventually(30, "readyz failing", || async {
            let (code, body) = http_get(d.admin_addr, "/readyz").await;
            // Each watch notices the outage on its own: wait until both have.
            (code == 503 && body.contains("watch pods: disconnected") && body.contains("watch nodes: disconnected")).then_some(body)
        })
        .await;
        println!("readyz during the outage:\n{body}");
        assert!(body.contains("watch nodes: disconnected"), "{body}");
        proxy.blackout(false);
        eventually(15, "readyz ok again", || async { (http_get(d.admin_addr, "/readyz").await.0 == 200).then_some(()) }).await;
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 9.6: PodScheduled's lastTransitionTime stays put across failed attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_scheduled_transition_time_kept_across_failures() {
    deadline(60, async {
        let c = cluster(2, 1, "4", 110, FaultConfig::default()).await;
        let d = start_daemon(&c, &config(""), "transition").await;
        until_leading(&d, 20).await;
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        api.create(&PostParams::default(), &pod("huge", "100", json!({}))).await.unwrap();
        let ltt = |p: &Pod| {
            p.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled")).and_then(|c| c.last_transition_time.clone())
        };
        let (first, msg) = eventually(15, "unschedulable", || async {
            let p = api.get_opt("huge").await.unwrap()?;
            let (status, _, msg) = scheduled_condition(&p)?;
            (status == "False").then(|| (ltt(&p), msg))
        })
        .await;
        assert!(first.is_some());
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Another node: a new attempt, failing again with a new message.
        c.add_node("node-extra").unwrap();
        let (second, msg2) = eventually(15, "second failed attempt", || async {
            let p = api.get_opt("huge").await.unwrap()?;
            let (_, _, m) = scheduled_condition(&p)?;
            (m != msg).then(|| (ltt(&p), m))
        })
        .await;
        println!("lastTransitionTime {first:?} then {second:?}; messages {msg:?} then {msg2:?}");
        assert_eq!(first, second, "lastTransitionTime changed without a transition");
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

/// The writes of replicas (each behind its own proxy) made while they did
/// not hold the Lease, as far as the proxies show. A follower only reads
/// the Lease, and writes it first when it finds it expired and takes it;
/// a leader renews it every retry period and stops writing before it can
/// expire. So a write (not to the Lease, not a review of an admin-port
/// caller) is by a non-leader when its replica has not written the Lease
/// before it, or when another replica has written the Lease (taken it)
/// since its replica's last Lease write. Leadership may pass back and
/// forth on a loaded machine; each replica's writes are judged against
/// its own Lease writes.
fn non_leader_writes(replicas: &[(&str, Vec<Write>)]) -> Vec<String> {
    let leases: Vec<(usize, Instant)> = replicas.iter().enumerate().flat_map(|(i, (_, ws))| ws.iter().filter(|w| w.is_lease()).map(move |w| (i, w.at))).collect();
    let mut out = Vec::new();
    for (i, (name, writes)) in replicas.iter().enumerate() {
        for w in writes.iter().filter(|w| !w.is_lease() && !w.path.contains("reviews")) {
            let own = leases.iter().filter(|(j, at)| *j == i && *at <= w.at).map(|(_, at)| *at).max();
            let taken_since = |own: Instant| leases.iter().any(|(j, at)| *j != i && *at > own && *at < w.at);
            if own.is_none_or(taken_since) {
                out.push(format!("{name}: {} {}", w.method, w.path));
            }
        }
    }
    out
}

// The fault soak (CI): 1,200 pods onto 60 nodes that are exactly full, two
// replicas each behind a faulty proxy (lost bind replies, 5xx after commit,
// 429s, failing status and event writes, watch cuts, a short blackout), the
// leader killed mid-burst and started again (a new process, the same
// identity), then the new leader restarted (stopped, so it hands the
// Lease back, and started again), then a 10 s API outage for both replicas
// (connections refused, every open one reset) while pods keep coming:
// every pod bound exactly once, no node over capacity, no write by a
// replica that did not lead, no panic, `/readyz` 200 on both replicas
// within 15 s of the API's return, and few log lines once recovered.
// Each replica runs on the test's runtime, whose threads log the daemon's
// crate into a buffer (see `e2e_recovery::run_logged`).
#[test]
fn fault_soak_two_replicas_leader_killed() {
    let logs = Logs::default();
    let l = logs.clone();
    run_logged(&logs, 240, async move {
        const NODES: usize = 60;
        const SLOTS: u32 = 20;
        const N: usize = NODES * SLOTS as usize;
        let c = cluster(NODES, 4, "64", SLOTS, FaultConfig::default()).await;
        let rules = || {
            vec![
                Rule::new(Some(Method::POST), "/binding", Fault::DropReplyAfterCommit, 0.03),
                Rule::new(Some(Method::POST), "/binding", Fault::ErrorAfterCommit, 0.02),
                Rule::new(Some(Method::POST), "/binding", Fault::Status(429), 0.03),
                Rule::new(Some(Method::POST), "/binding", Fault::ResetBefore, 0.02),
                Rule::new(Some(Method::PATCH), "/status", Fault::Status(500), 0.05),
                Rule::new(Some(Method::POST), "/events", Fault::Status(500), 0.1),
            ]
        };
        let pa = FaultProxy::start(c.client_without_retry().unwrap()).await;
        let pb = FaultProxy::start(c.client_without_retry().unwrap()).await;
        // The restarted replicas' links (each process's writes on its own proxy).
        let pc = FaultProxy::start(c.client_without_retry().unwrap()).await;
        let pd = FaultProxy::start(c.client_without_retry().unwrap()).await;
        for p in [&pa, &pb, &pc, &pd] {
            p.set_rules(rules());
        }
        let cfg = config_short_lease("");
        let a = start_via(&pa, &cfg, "soak-a", None).await;
        until_leading(&a, 20).await;
        let b = start_via(&pb, &cfg, "soak-b", None).await;
        let mut b_ready = b.ready.clone();
        tokio::time::timeout(Duration::from_secs(20), b_ready.wait_for(|r| *r)).await.unwrap().unwrap();
        let (log, task) = crate::backend::BindLog::start(c.client().unwrap(), "default");
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        let t0 = Instant::now();
        let creator = {
            let api = api.clone();
            tokio::spawn(async move {
                for chunk in 0..(N / 100) {
                    create_all(&api, (0..100).map(|i| pod(&format!("s-{:04}", chunk * 100 + i), "100m", json!({}))).collect(), 50).await;
                    // Pods keep coming through the outage below.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            })
        };
        eventually(60, "a quarter bound by the first leader", || async { (log.bound() >= N / 4).then_some(()) }).await;
        // Watch cuts and a short blackout on both sides, then the leader dies.
        pa.cut_watches();
        pb.cut_watches();
        pa.blackout(true);
        pb.blackout(true);
        tokio::time::sleep(Duration::from_millis(800)).await;
        pa.blackout(false);
        pb.blackout(false);
        eventually(60, "two fifths bound", || async { (log.bound() >= 2 * N / 5).then_some(()) }).await;
        a.abort();
        let mut bl = b.leading.clone();
        tokio::time::timeout(Duration::from_secs(15), bl.wait_for(|l| *l)).await.expect("replica-b never took over").unwrap();
        pb.cut_watches();
        // A restarts (same identity, a new process), mid-burst.
        let a = start_via(&pc, &cfg, "soak-a", None).await;
        let mut a_ready = a.ready.clone();
        tokio::time::timeout(Duration::from_secs(20), a_ready.wait_for(|r| *r)).await.expect("restarted replica-a never ready").unwrap();
        eventually(60, "half bound", || async { (log.bound() >= N / 2).then_some(()) }).await;
        // The leader B restarts too (stopped: it hands the Lease back; then
        // a new process, the same identity); one of the two takes over.
        let mut panics = b.shutdown().await;
        let b = start_via(&pd, &cfg, "soak-b", None).await;
        let mut b_ready = b.ready.clone();
        tokio::time::timeout(Duration::from_secs(20), b_ready.wait_for(|r| *r)).await.expect("restarted replica-b never ready").unwrap();
        eventually(15, "a restarted replica leads", || async { (*a.leading.borrow() || *b.leading.borrow()).then_some(()) }).await;
        eventually(60, "three fifths bound", || async { (log.bound() >= 3 * N / 5).then_some(()) }).await;
        // The API server goes away for both replicas, mid-burst.
        pc.outage(true);
        pd.outage(true);
        tokio::time::sleep(Duration::from_secs(10)).await;
        pc.outage(false);
        pd.outage(false);
        let back = Instant::now();
        let ready = |d: &Handle| {
            let addr = d.admin_addr;
            async move { (http_get(addr, "/readyz").await.0 == 200).then_some(()) }
        };
        eventually(15, "restarted replica-b /readyz 200 after the outage", || ready(&b)).await;
        eventually(15u64.saturating_sub(back.elapsed().as_secs()).max(1), "restarted replica-a /readyz 200 after the outage", || ready(&a)).await;
        let ready_after = back.elapsed();
        assert!(ready_after <= Duration::from_secs(15), "readiness back {ready_after:?} after the API's return");
        let mark = l.mark();
        creator.await.unwrap();
        eventually(90, "every pod bound", || async { (log.bound() == N).then_some(()) }).await;
        let took = t0.elapsed();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let all = pods(&api).await;
        let over = over_capacity(&all, SLOTS as usize);
        let non_leader = non_leader_writes(&[("soak-a", pa.writes()), ("soak-b", pb.writes()), ("soak-a restarted", pc.writes()), ("soak-b restarted", pd.writes())]);
        let after = l.lines_since(mark);
        let warnings: Vec<&String> = after.iter().filter(|x| x.contains(" WARN ") || x.contains(" ERROR ")).collect();
        // Lines about one pod (a bind fault injected after recovery) come
        // with the faults, which go on; the rest (watches, leadership,
        // readiness) must have quietened down.
        let general: Vec<&String> = after.iter().filter(|x| !x.contains(" pod=")).collect();
        panics += b.shutdown().await + a.shutdown().await;
        println!(
            "fault soak: {N} pods on {NODES} nodes x {SLOTS} in {took:?}; bound {}, rebound {}, nodes over capacity {over}, writes by a non-leader {}, panics {panics}; /readyz 200 on both {:.1}s after a 10 s outage; log lines after recovery {} ({} warnings, {} not about one pod); faults injected {} + {} + {} + {}",
            log.bound(),
            log.rebinds().len(),
            non_leader.len(),
            ready_after.as_secs_f64(),
            after.len(),
            warnings.len(),
            general.len(),
            pa.injected(),
            pb.injected(),
            pc.injected(),
            pd.injected()
        );
        for line in general.iter().take(40) {
            println!("  {line}");
        }
        assert_eq!(all.len(), N);
        assert!(all.iter().all(|p| node_of(p).is_some()));
        assert!(log.rebinds().is_empty(), "{:?}", log.rebinds());
        assert_eq!(over, 0, "nodes over capacity");
        assert!(non_leader.is_empty(), "writes by a non-leader: {non_leader:#?}");
        assert_eq!(panics, 0);
        // Once recovered, the log holds a few lines, not one per retry or per pod.
        assert!(general.len() <= 20, "{} log lines after recovery not about one pod:\n{general:#?}", general.len());
        assert!(after.len() <= N / 4, "{} log lines after recovery", after.len());
        task.abort();
        c.shutdown().await;
    });
}
