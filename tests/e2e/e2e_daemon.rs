//! End to end: the daemon (`berth run`) in-process against the local
//! cluster over HTTP — topology spread, preemption, unschedulable pods and
//! event-driven requeueing, leader election failover, API faults, bad
//! objects, and the admin listener. Every test has a hard deadline.
#![allow(clippy::unwrap_used)]



use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berth_cluster::{ErrorRule, FaultConfig, FaultKind, LocalCluster};
use crate::e2e_support::*;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

/// Runs `f` under a hard deadline.
async fn deadline<F: std::future::Future<Output = ()>>(secs: u64, f: F) {
    tokio::time::timeout(Duration::from_secs(secs), f).await.unwrap_or_else(|_| panic!("test deadline ({secs} s) exceeded"));
}

/// Records every pod's node as bindings happen (through a watch), and flags
/// any pod whose node changed after it was first bound.
#[derive(Clone, Default)]
struct BindLog {
    inner: Arc<Mutex<BindLogInner>>,
}

#[derive(Default)]
struct BindLogInner {
    /// pod name -> node, in binding order.
    order: Vec<(String, String)>,
    node: HashMap<String, String>,
    rebinds: Vec<String>,
}

impl BindLog {
    /// Watches pods of the default namespace until the returned task is aborted.
    fn start(c: &LocalCluster) -> (BindLog, tokio::task::JoinHandle<()>) {
        let log = BindLog::default();
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        let l = log.clone();
        let task = tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default()).applied_objects().boxed();
            while let Some(ev) = s.next().await {
                let Ok(p) = ev else { continue };
                let (Some(name), Some(node)) = (p.metadata.name.clone(), node_of(&p).map(str::to_string)) else { continue };
                let mut g = l.inner.lock().unwrap();
                match g.node.get(&name).cloned() {
                    None => {
                        g.node.insert(name.clone(), node.clone());
                        g.order.push((name, node));
                    }
                    Some(prev) if prev != node => g.rebinds.push(format!("{name}: {prev} -> {node}")),
                    Some(_) => {}
                }
            }
        });
        (log, task)
    }

    fn bound(&self) -> usize {
        self.inner.lock().unwrap().node.len()
    }

    fn order(&self) -> Vec<(String, String)> {
        self.inner.lock().unwrap().order.clone()
    }

    fn rebinds(&self) -> Vec<String> {
        self.inner.lock().unwrap().rebinds.clone()
    }
}

async fn priority_class(c: &LocalCluster, name: &str, value: i32) {
    let api: Api<PriorityClass> = Api::all(c.client().unwrap());
    let pc: PriorityClass = serde_json::from_value(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value})).unwrap();
    api.create(&PostParams::default(), &pc).await.unwrap();
}

async fn get(api: &Api<Pod>, name: &str) -> Option<Pod> {
    api.get_opt(name).await.unwrap()
}

// 2. Topology spread over three zones, maxSkew 1, DoNotSchedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_spread_skew_holds_after_every_binding() {
    deadline(60, async {
        // 3 small nodes per zone, plus 3 big nodes in zone-a that scoring alone would prefer.
        let c = cluster(9, 3, "2", 110, FaultConfig::default()).await;
        for i in 0..3 {
            c.add_custom_node(&format!("big-{i}"), 0, 3, "32", "64Gi", 110).unwrap();
        }
        let d = start_daemon(&c, &config(""), "spread").await;
        until_leading(&d, 20).await;
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        let (log, watch_task) = BindLog::start(&c);
        let zone_of: HashMap<String, String> = nodes(&c)
            .await
            .into_iter()
            .map(|n| (n.metadata.name.clone().unwrap(), n.metadata.labels.unwrap()["topology.kubernetes.io/zone"].clone()))
            .collect();
        let spread = |name: &str| {
            pod(
                name,
                "100m",
                json!({"metadata": {"labels": {"app": "spread"}}, "spec": {"topologySpreadConstraints": [{
                    "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "spread"}}
                }]}}),
            )
        };
        let skew = |order: &[(String, String)]| {
            let mut per: BTreeMap<&str, usize> = ["zone-a", "zone-b", "zone-c"].iter().map(|z| (*z, 0)).collect();
            for (_, n) in order {
                *per.get_mut(zone_of[n].as_str()).unwrap() += 1;
            }
            per.values().max().unwrap() - per.values().min().unwrap()
        };
        // Phase 1: one at a time; the skew is checked after every binding.
        for i in 0..12 {
            api.create(&PostParams::default(), &spread(&format!("s-{i:02}"))).await.unwrap();
            eventually(10, "sequential spread pod bound", || async { (log.bound() > i).then_some(()) }).await;
            let order = log.order();
            assert!(skew(&order) <= 1, "skew {} after binding {:?}", skew(&order), order.last());
        }
        // Phase 2: waves of 3 created at once. Within a wave the binds run
        // concurrently; once a wave is bound the zones must be level again.
        for w in 0..6 {
            let first = 12 + w * 3;
            create_all(&api, (first..first + 3).map(|i| spread(&format!("s-{i:02}"))).collect(), 3).await;
            eventually(10, "wave bound", || async { (log.bound() == first + 3).then_some(()) }).await;
            let order = log.order();
            assert_eq!(skew(&order), 0, "after wave {w}: {order:?}");
        }
        // Phase 3: a burst of 12. The API may see concurrent binds slightly
        // out of decision order, so intermediate states are reported, and the
        // final state must be level.
        create_all(&api, (30..42).map(|i| spread(&format!("s-{i:02}"))).collect(), 12).await;
        eventually(20, "burst spread pods bound", || async { (log.bound() == 42).then_some(()) }).await;
        let order = log.order();
        let transient = (31..=order.len()).filter(|k| skew(&order[..*k]) > 1).count();
        println!("topology spread: {transient} of 12 intermediate states of the burst (API binding order) had skew > 1");
        assert_eq!(skew(&order), 0, "42 pods over 3 zones must be 14/14/14");
        assert!(log.rebinds().is_empty());
        watch_task.abort();
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 3. Preemption: nomination, DisruptionTarget, graceful deletion, then the
// preemptor lands; a preemptionPolicy Never pod waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_nominates_evicts_gracefully_then_binds() {
    deadline(60, async {
        let c = cluster(2, 1, "1", 110, FaultConfig::default()).await;
        priority_class(&c, "low", 10).await;
        priority_class(&c, "mid", 100).await;
        priority_class(&c, "high", 1000).await;
        let d = start_daemon(&c, &config(""), "preempt").await;
        until_leading(&d, 20).await;
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        let filler = |name: &str, class: &str, node: &str| {
            pod(name, "500m", json!({"spec": {"priorityClassName": class, "terminationGracePeriodSeconds": 2, "nodeSelector": {"kubernetes.io/hostname": node}}}))
        };
        create_all(&api, vec![filler("low-0", "low", "node-0"), filler("low-1", "low", "node-0"), filler("mid-0", "mid", "node-1"), filler("mid-1", "mid", "node-1")], 4).await;
        eventually(15, "fillers bound", || async { (pods(&api).await.iter().filter(|p| node_of(p).is_some()).count() == 4).then_some(()) }).await;

        let t0 = Instant::now();
        api.create(&PostParams::default(), &pod("high", "1", json!({"spec": {"priorityClassName": "high"}}))).await.unwrap();
        // Nominated to node-0, where the victims have the lowest priority.
        let nominated = eventually(10, "high nominated", || async { get(&api, "high").await?.status?.nominated_node_name }).await;
        assert_eq!(nominated, "node-0");
        // Victims: DisruptionTarget, then a graceful delete (deletionTimestamp set, not yet gone).
        for v in ["low-0", "low-1"] {
            let p = eventually(10, "victim terminating", || async { get(&api, v).await.filter(|p| p.metadata.deletion_timestamp.is_some()) }).await;
            assert!(has_condition(&p, "DisruptionTarget"), "{v} lacks DisruptionTarget: {:?}", p.status);
            assert_eq!(p.metadata.deletion_grace_period_seconds, Some(2));
        }
        let terminating_seen = t0.elapsed();
        // The preemptor is not bound while its victims still hold the node.
        let victims_gone_at = std::cell::Cell::new(None);
        let bound_at = eventually(15, "high bound", || async {
            let all = pods(&api).await;
            let names: HashSet<_> = all.iter().filter_map(|p| p.metadata.name.clone()).collect();
            let gone = !names.contains("low-0") && !names.contains("low-1");
            if gone && victims_gone_at.get().is_none() {
                victims_gone_at.set(Some(t0.elapsed()));
            }
            let high = all.iter().find(|p| p.metadata.name.as_deref() == Some("high"))?;
            let node = node_of(high)?;
            assert!(gone, "high was bound to {node} while its victims still existed");
            Some((t0.elapsed(), node.to_string()))
        })
        .await;
        assert_eq!(bound_at.1, "node-0");
        println!("preemption: victims terminating after {terminating_seen:?}, gone after {:?}, preemptor bound after {:?}", victims_gone_at.get(), bound_at.0);
        assert!(bound_at.0 >= Duration::from_secs(1), "victims had a 2 s grace period; bound after {:?}", bound_at.0);
        // The mid pods were not touched.
        for m in ["mid-0", "mid-1"] {
            assert!(get(&api, m).await.unwrap().metadata.deletion_timestamp.is_none(), "{m} was preempted");
        }
        let preempted = event_counts(&c, "Preempted").await;
        assert_eq!(preempted.get("low-0"), Some(&1));

        // preemptionPolicy Never: waits, no victims, no nomination.
        api.create(&PostParams::default(), &pod("never", "1", json!({"spec": {"priorityClassName": "high", "preemptionPolicy": "Never"}}))).await.unwrap();
        let cond = eventually(10, "never pod unschedulable", || async { scheduled_condition(&get(&api, "never").await?).filter(|c| c.0 == "False") }).await;
        assert_eq!(cond.1, "Unschedulable");
        tokio::time::sleep(Duration::from_secs(3)).await;
        let p = get(&api, "never").await.unwrap();
        assert!(node_of(&p).is_none());
        assert!(p.status.as_ref().unwrap().nominated_node_name.is_none(), "a Never pod was nominated");
        for m in ["mid-0", "mid-1"] {
            assert!(get(&api, m).await.unwrap().metadata.deletion_timestamp.is_none(), "{m} was preempted by a Never pod");
        }
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 4. Unschedulable: condition, message, event; bound within seconds of a fitting node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_then_bound_when_a_node_is_added() {
    deadline(60, async {
        let c = cluster(2, 1, "1", 110, FaultConfig::default()).await;
        let d = start_daemon(&c, &config(""), "unsched").await;
        until_leading(&d, 20).await;
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        api.create(&PostParams::default(), &pod("big", "3", json!({}))).await.unwrap();
        let cond = eventually(10, "PodScheduled=False", || async { scheduled_condition(&get(&api, "big").await?).filter(|c| c.0 == "False") }).await;
        assert_eq!(cond.1, "Unschedulable");
        assert!(cond.2.starts_with("0/2 nodes are available:"), "{}", cond.2);
        assert!(cond.2.contains("Insufficient cpu"), "{}", cond.2);
        let failed = eventually(10, "FailedScheduling event", || async {
            events(&c).await.into_iter().find(|(p, r, _)| p == "big" && r == "FailedScheduling")
        })
        .await;
        assert!(failed.2.starts_with("0/2 nodes are available:"), "{}", failed.2);
        // It waits in the unschedulable pool: no retries while nothing changes,
        // even past its backoff (1-2 s) and despite our own status patch.
        let unsched = || d.metrics.schedule_attempts.with_label_values(&["unschedulable", PROFILE]).get();
        let before = unsched();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(unsched(), before, "the pod was retried without a cluster event");
        assert_eq!(before, 1);
        assert!(node_of(&get(&api, "big").await.unwrap()).is_none());
        let (_, m) = http_get(d.admin_addr, "/metrics").await;
        assert!(m.contains(&format!("scheduler_unschedulable_pods{{plugin=\"NodeResourcesFit\",profile=\"{PROFILE}\"}} 1")), "{m}");
        let t = Instant::now();
        c.add_custom_node("roomy", 5, 1, "4", "64Gi", 110).unwrap();
        let node = eventually(10, "bound after the node was added", || async { node_of(&get(&api, "big").await?).map(str::to_string) }).await;
        let took = t.elapsed();
        println!("unschedulable pod bound {took:?} after a fitting node was added");
        assert_eq!(node, "roomy");
        assert!(took < Duration::from_secs(5), "took {took:?}");
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

/// A bound pod whose labels change is a cluster event (upstream's
/// `AssignedPodUpdate` with a label change): a pod waiting in the
/// unschedulable pool for a pod with those labels is retried at once, not
/// at the pool's five-minute flush.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relabelled_bound_pod_requeues_the_pods_waiting_for_its_labels() {
    deadline(60, async {
        let c = cluster(2, 1, "4", 110, FaultConfig::default()).await;
        let d = start_daemon(&c, &config(""), "relabel").await;
        until_leading(&d, 20).await;
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        // Bound by someone else, without the labels the follower wants.
        let anchor = pod("anchor", "100m", json!({"metadata": {"labels": {"app": "other"}}, "spec": {"schedulerName": "default-scheduler", "nodeName": "node-1"}}));
        api.create(&PostParams::default(), &anchor).await.unwrap();
        let affinity = json!({"spec": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}}});
        api.create(&PostParams::default(), &pod("follower", "100m", affinity)).await.unwrap();
        let cond = eventually(10, "PodScheduled=False", || async { scheduled_condition(&get(&api, "follower").await?).filter(|c| c.0 == "False") }).await;
        assert_eq!(cond.1, "Unschedulable", "{}", cond.2);
        // Past its backoff (1-2 s) it still waits: nothing has changed.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(node_of(&get(&api, "follower").await.unwrap()).is_none());
        let t = Instant::now();
        let relabel = json!({"metadata": {"labels": {"app": "db"}}});
        api.patch("anchor", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(relabel)).await.unwrap();
        let node = eventually(10, "bound after the anchor was relabelled", || async { node_of(&get(&api, "follower").await?).map(str::to_string) }).await;
        let took = t.elapsed();
        println!("pod bound {took:?} after the pod it needs was relabelled");
        assert_eq!(node, "node-1");
        assert!(took < Duration::from_secs(5), "took {took:?}");
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 5. Two replicas: the leader is killed mid-run; the other takes over; every
// pod is bound exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_failover_binds_every_pod_exactly_once() {
    deadline(90, async {
        let c = cluster(20, 3, "8", 110, FaultConfig::default()).await;
        let cfg = config_short_lease("");
        let a = start_daemon(&c, &cfg, "replica-a").await;
        until_leading(&a, 20).await;
        let b = start_daemon(&c, &cfg, "replica-b").await;
        let mut b_ready = b.ready.clone();
        tokio::time::timeout(Duration::from_secs(20), b_ready.wait_for(|r| *r)).await.unwrap().unwrap();
        assert!(!*b.leading.borrow(), "two leaders");
        let (log, watch_task) = BindLog::start(&c);
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        const N: usize = 300;
        // Pods arrive steadily; the leader is killed partway through.
        let creator = {
            let api = api.clone();
            tokio::spawn(async move {
                for chunk in 0..(N / 20) {
                    create_all(&api, (0..20).map(|i| pod(&format!("f-{:03}", chunk * 20 + i), "50m", json!({}))).collect(), 20).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        eventually(30, "some pods bound by the first leader", || async { (log.bound() >= 60).then_some(()) }).await;
        let killed = Instant::now();
        a.abort();
        let mut bl = b.leading.clone();
        tokio::time::timeout(Duration::from_secs(10), bl.wait_for(|l| *l)).await.expect("replica-b never took over").unwrap();
        let takeover = killed.elapsed();
        println!("failover: replica-b leads {takeover:?} after replica-a was killed (leaseDuration 3s)");
        // Judged by its own clock, b waits one lease duration after it last saw
        // a change; allow one retry period and some load on top.
        assert!(takeover <= Duration::from_millis(3000 + 500 + 1500), "takeover took {takeover:?}");
        creator.await.unwrap();
        eventually(40, "every pod bound", || async { (log.bound() == N).then_some(()) }).await;
        let all = pods(&api).await;
        assert_eq!(all.len(), N, "pods lost");
        assert!(all.iter().all(|p| node_of(p).is_some()));
        assert!(log.rebinds().is_empty(), "rebound: {:?}", log.rebinds());
        // A bind succeeds once per pod (a second one gets 409), and each
        // success writes one Scheduled event: never two.
        let sched = event_counts(&c, "Scheduled").await;
        assert!(sched.values().all(|n| *n == 1), "a pod has two Scheduled events");
        let by_b = b.metrics.schedule_attempts.with_label_values(&["scheduled", PROFILE]).get();
        println!("failover: replica-b scheduled {by_b} pods; Scheduled events for {} of {N}", sched.len());
        assert!(by_b > 0);
        watch_task.abort();
        b.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 6. API faults: watches cut, 410 on resume, 429/500/409 on binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_every_pod_bound_exactly_once() {
    deadline(90, async {
        let rule = |kind, fraction| ErrorRule { verb: Some("create".into()), resource: Some("pods/binding".into()), kind, fraction };
        let faults = FaultConfig {
            error_rules: vec![
                rule(FaultKind::TooManyRequests { retry_after_seconds: 0 }, 0.15),
                rule(FaultKind::InternalError, 0.15),
                rule(FaultKind::Conflict, 0.05),
            ],
            watch_cut_interval: Some(Duration::from_millis(1500)),
        };
        let c = cluster(20, 3, "8", 110, faults).await;
        let d = start_daemon(&c, &config(""), "faulty").await;
        until_leading(&d, 20).await;
        let (log, watch_task) = BindLog::start(&c);
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        const N: usize = 300;
        for chunk in 0..(N / 50) {
            create_all(&api, (0..50).map(|i| pod(&format!("x-{:03}", chunk * 50 + i), "50m", json!({}))).collect(), 25).await;
            // Compaction: watches resuming from an older resourceVersion get 410.
            c.faults().compact_history();
            c.faults().cut_watches();
            if chunk == 3 {
                // And once, the whole API server goes away and comes back.
                c.faults().restart_server().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eventually(60, "every pod bound despite faults", || async { (log.bound() == N).then_some(()) }).await;
        let injected = c.faults().injected_count();
        println!("faults: {injected} binding faults injected; all {N} pods bound");
        assert!(injected > 10, "only {injected} faults injected");
        assert!(log.rebinds().is_empty(), "rebound: {:?}", log.rebinds());
        let all = pods(&api).await;
        assert_eq!(all.len(), N);
        assert!(all.iter().all(|p| node_of(p).is_some()));
        c.faults().clear_error_rules();
        let sched = eventually(20, "Scheduled events", || async {
            let m = event_counts(&c, "Scheduled").await;
            (m.len() == N).then_some(m)
        })
        .await;
        assert!(sched.values().all(|n| *n == 1), "a pod has two Scheduled events");
        watch_task.abort();
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 7. Bad objects get a clear reason; the others are scheduled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_objects_get_clear_reasons_others_schedule() {
    deadline(60, async {
        let c = cluster(3, 3, "4", 110, FaultConfig::default()).await;
        let d = start_daemon(&c, &config(""), "bad").await;
        until_leading(&d, 20).await;
        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        // A label selector with an unknown operator no longer reaches the
        // daemon: the cluster refuses it (422, as kube-apiserver does;
        // cluster_validation), and the model's error for it is unit-tested
        // (berth_model::selector). A node affinity `Gt` whose value is no
        // integer passes the API and is the scheduler's to reject.
        let bad_node_selector = pod(
            "bad-node-affinity",
            "100m",
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                "matchExpressions": [{"key": "type", "operator": "Gt", "values": ["many"]}]
            }]}}}}}),
        );
        let absurd = pod("absurd", "1000000", json!({}));
        let mut all = vec![bad_node_selector, absurd];
        all.extend((0..20).map(|i| pod(&format!("ok-{i:02}"), "100m", json!({}))));
        create_all(&api, all, 8).await;
        eventually(20, "good pods bound", || async {
            (pods(&api).await.iter().filter(|p| p.metadata.name.as_deref().unwrap().starts_with("ok-") && node_of(p).is_some()).count() == 20).then_some(())
        })
        .await;
        let reason = |name: &'static str| {
            let api = api.clone();
            async move {
                eventually(10, name, || async { scheduled_condition(&get(&api, name).await?).filter(|c| c.0 == "False") }).await
            }
        };
        let na = reason("bad-node-affinity").await;
        println!("bad node affinity: {na:?}");
        assert!(na.2.contains("nodeSelectorTerms[0].matchExpressions[0]"), "{}", na.2);
        let big = reason("absurd").await;
        println!("absurd request: {big:?}");
        assert_eq!(big.1, "Unschedulable");
        assert!(big.2.starts_with("0/3 nodes are available: 3 Insufficient cpu"), "{}", big.2);
        for n in ["bad-node-affinity", "absurd"] {
            assert!(node_of(&get(&api, n).await.unwrap()).is_none(), "{n} was bound");
        }
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 7b. A second replica on the same Lease waits, and says so: whom it waits
// for in /readyz?verbose and berth_leader_election_waiting (the log line is
// written once per holder).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waiting_on_a_lease_names_the_holder() {
    deadline(60, async {
        let c = cluster(3, 3, "2", 110, FaultConfig::default()).await;
        let cfg = config_short_lease("");
        let a = start_daemon(&c, &cfg, "replica-a").await;
        until_leading(&a, 20).await;
        let b = start_daemon(&c, &cfg, "replica-b").await;
        let waiting = eventually(20, "replica-b waiting in /readyz?verbose", || async {
            let (_, body) = http_get(b.admin_addr, "/readyz?verbose").await;
            body.contains("leaderElection waiting").then_some(body)
        })
        .await;
        assert!(waiting.contains(r#"[+]leaderElection waiting: the Lease kube-system/berth is held by "replica-a""#), "{waiting}");
        let (_, leader) = http_get(a.admin_addr, "/readyz?verbose").await;
        assert!(leader.contains("[+]leaderElection leading"), "{leader}");
        let (_, text) = http_get(b.admin_addr, "/metrics").await;
        assert!(text.contains("berth_leader_election_waiting 1"), "{text}");
        let (_, text) = http_get(a.admin_addr, "/metrics").await;
        assert!(text.contains("berth_leader_election_waiting 0"), "{text}");
        a.shutdown().await;
        b.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// 8. The admin listener and shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_and_shutdown_releases_the_lease() {
    deadline(60, async {
        let c = cluster(3, 3, "2", 110, FaultConfig::default()).await;
        // Node lists fail until cleared: the caches cannot sync.
        c.faults().set_error_rules(vec!["list:nodes:500:1".parse().unwrap()]);
        let d = start_daemon(&c, &config(""), "admin").await;
        let (code, body) = http_get(d.admin_addr, "/readyz").await;
        assert_eq!(code, 503, "{body}");
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(http_get(d.admin_addr, "/readyz").await.0, 503);
        assert_eq!(http_get(d.admin_addr, "/healthz").await.0, 200);
        assert_eq!(http_get(d.admin_addr, "/livez").await.0, 200);
        c.faults().clear_error_rules();
        eventually(20, "/readyz 200", || async { (http_get(d.admin_addr, "/readyz").await.0 == 200).then_some(()) }).await;
        until_leading(&d, 20).await;

        let api: Api<Pod> = Api::default_namespaced(c.client().unwrap());
        create_all(&api, (0..10).map(|i| pod(&format!("m-{i}"), "100m", json!({}))).collect(), 10).await;
        api.create(&PostParams::default(), &pod("stuck", "64", json!({}))).await.unwrap();
        eventually(20, "pods bound", || async { (pods(&api).await.iter().filter(|p| node_of(p).is_some()).count() == 10).then_some(()) }).await;
        eventually(10, "stuck unschedulable", || async { scheduled_condition(&get(&api, "stuck").await?).filter(|c| c.0 == "False") }).await;

        let (code, text) = http_get(d.admin_addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(text.contains(&format!("scheduler_schedule_attempts_total{{profile=\"{PROFILE}\",result=\"scheduled\"}} 10")), "{text}");
        assert!(text.contains(&format!("scheduler_schedule_attempts_total{{profile=\"{PROFILE}\",result=\"unschedulable\"}}")), "{text}");
        for name in [
            "scheduler_scheduling_attempt_duration_seconds_bucket",
            "scheduler_pending_pods{queue=\"unschedulable\"}",
            "scheduler_pod_scheduling_sli_duration_seconds_count",
            "scheduler_queue_incoming_pods_total",
            "scheduler_framework_extension_point_duration_seconds_bucket{extension_point=\"Bind\"",
            "scheduler_preemption_attempts_total",
        ] {
            assert!(text.contains(name), "{name} missing from /metrics");
        }
        promtool_check(&text).await;

        let (code, body) = http_get(d.admin_addr, "/debug/explain?pod=default/stuck").await;
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("explain is not JSON ({e}): {body}"));
        assert!(body.contains("Insufficient cpu"), "{v:#}");
        let (code, _) = http_get(d.admin_addr, "/debug/explain?pod=default/m-0").await;
        assert_eq!(code, 404, "a bound pod is not pending");
        assert_eq!(http_get(d.admin_addr, "/debug/explain").await.0, 400);

        // Shutdown: prompt, and the lease is released.
        let leases: Api<Lease> = Api::namespaced(c.client().unwrap(), "kube-system");
        let held = leases.get("berth").await.unwrap();
        assert_eq!(held.spec.unwrap().holder_identity.as_deref(), Some("admin"));
        let admin = d.admin_addr;
        let t = Instant::now();
        d.shutdown().await;
        let took = t.elapsed();
        println!("shutdown took {took:?}");
        assert!(took < Duration::from_secs(3), "shutdown took {took:?}");
        let released = leases.get("berth").await.unwrap();
        assert_eq!(released.spec.unwrap().holder_identity, None, "lease not released");
        assert!(tokio::net::TcpStream::connect(admin).await.is_err(), "admin listener still open");
        c.shutdown().await;
    })
    .await;
}

/// `promtool check metrics` on the text, when promtool is installed.
async fn promtool_check(text: &str) {
    use tokio::io::AsyncWriteExt;
    let child = tokio::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        println!("promtool not installed: skipping `promtool check metrics`");
        return;
    };
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("promtool check metrics: {report}");
    assert!(out.status.success(), "promtool check metrics failed: {report}");
}
