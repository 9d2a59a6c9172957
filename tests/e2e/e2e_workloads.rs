//! Real workloads on the local cluster with its controllers on and berth
//! scheduling what they create: a Deployment of 30 scaled to 10, a
//! StatefulSet created, rolled and scaled down in order with its claims, a
//! DaemonSet through the scheduler on every eligible node (and a new one),
//! a Job of 5 completions two at a time.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::e2e_support::*;

fn live(ps: Vec<Pod>) -> Vec<Pod> {
    ps.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

async fn labelled(api: &Api<Pod>, selector: &str) -> Vec<Pod> {
    live(api.list(&ListParams::default().labels(selector)).await.unwrap().items)
}

fn scheduler_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref())
}

fn ready(p: &Pod) -> bool {
    has_condition(p, "Ready")
}

/// One pod event a watch saw: (event, pod name, ready, terminating, terminal).
type SeenEvent = (&'static str, String, bool, bool, bool);
/// What a watch saw of the pods, in order.
type Seen = Arc<Mutex<Vec<SeenEvent>>>;

/// Records every pod event of the default namespace from now on.
async fn record_pods(api: &Api<Pod>) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap_or_default();
    let mut stream = api.watch(&WatchParams::default().timeout(290), &rv).await.unwrap().boxed();
    let out = seen.clone();
    let task = tokio::spawn(async move {
        while let Some(Ok(ev)) = stream.next().await {
            let (ty, p) = match ev {
                WatchEvent::Added(p) => ("ADDED", p),
                WatchEvent::Modified(p) => ("MODIFIED", p),
                WatchEvent::Deleted(p) => ("DELETED", p),
                _ => continue,
            };
            let name = p.metadata.name.clone().unwrap_or_default();
            let terminal = matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
            out.lock().unwrap().push((ty, name, ready(&p), p.metadata.deletion_timestamp.is_some(), terminal));
        }
    });
    (seen, task)
}

#[tokio::test]
async fn a_deployment_of_30_is_bound_by_berth_and_scaled_to_10() {
    let c = cluster_with_controllers(6, 3, "8", 110).await;
    let d = start_daemon(&c, &config(""), "workloads-deploy").await;
    until_leading(&d, 20).await;
    let client = c.client().unwrap();
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deploy = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 30, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"schedulerName": PROFILE, "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}
    }))
    .unwrap();
    deploys.create(&PostParams::default(), &deploy).await.unwrap();
    eventually(60, "30 pods bound", || async {
        let ps = labelled(&pods, "app=web").await;
        (ps.len() == 30 && ps.iter().all(|p| node_of(p).is_some())).then_some(())
    })
    .await;
    assert!(labelled(&pods, "app=web").await.iter().all(|p| scheduler_of(p) == Some(PROFILE)));
    let scheduled = event_counts(&c, "Scheduled").await;
    assert_eq!(scheduled.values().sum::<usize>(), 30, "each pod bound by berth once: {scheduled:?}");

    deploys.patch("web", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"replicas": 10}}))).await.unwrap();
    eventually(30, "10 pods left", || async { (labelled(&pods, "app=web").await.len() == 10).then_some(()) }).await;
    eventually(30, "status shows 10", || async {
        let s = deploys.get("web").await.unwrap().status?;
        (s.replicas == Some(10) && s.available_replicas == Some(10)).then_some(())
    })
    .await;
    d.shutdown().await;
    c.shutdown().await;
}

#[tokio::test]
async fn a_statefulset_of_3_starts_in_order_with_claims_rolls_and_scales_down_in_reverse() {
    let c = cluster_with_controllers(3, 3, "8", 110).await;
    let d = start_daemon(&c, &config(""), "workloads-sts").await;
    until_leading(&d, 20).await;
    let client = c.client().unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let (seen, watch) = record_pods(&pods).await;
    let set = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"schedulerName": PROFILE, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "postgres", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}
    }))
    .unwrap();
    sets.create(&PostParams::default(), &set).await.unwrap();
    eventually(60, "3 pods ready", || async {
        let ps = labelled(&pods, "app=db").await;
        (ps.len() == 3 && ps.iter().all(ready)).then_some(())
    })
    .await;
    // Identity, claims bound, status.
    for i in 0..3 {
        let p = pods.get(&format!("db-{i}")).await.unwrap();
        assert_eq!(scheduler_of(&p), Some(PROFILE));
        let labels = p.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("statefulset.kubernetes.io/pod-name").map(String::as_str), Some(format!("db-{i}").as_str()));
        assert_eq!(labels.get("apps.kubernetes.io/pod-index").map(String::as_str), Some(i.to_string().as_str()));
        assert!(labels.get("controller-revision-hash").is_some_and(|h| h.starts_with("db-")));
        let spec = p.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some(format!("db-{i}").as_str()));
        assert_eq!(spec.subdomain.as_deref(), Some("db"));
        let claim = format!("data-db-{i}");
        assert!(spec.volumes.unwrap_or_default().iter().any(|v| v.persistent_volume_claim.as_ref().is_some_and(|c| c.claim_name == claim)));
        let pvc = claims.get(&claim).await.unwrap();
        assert_eq!(pvc.status.and_then(|s| s.phase).as_deref(), Some("Bound"), "{claim}");
        assert_eq!(pvc.metadata.labels.unwrap_or_default().get("app").map(String::as_str), Some("db"));
    }
    eventually(30, "status", || async {
        let s = sets.get("db").await.unwrap().status?;
        (s.ready_replicas == Some(3) && s.updated_replicas == Some(3) && s.current_revision.is_some() && s.current_revision == s.update_revision).then_some(())
    })
    .await;
    // Order of creation: db-i is added only once db-(i-1) was seen Ready.
    {
        let seen = seen.lock().unwrap();
        let mut ready_seen = [false; 3];
        for (ty, name, is_ready, _, _) in seen.iter() {
            let Some(i) = name.strip_prefix("db-").and_then(|n| n.parse::<usize>().ok()) else { continue };
            if *ty == "ADDED" && i > 0 {
                assert!(ready_seen[i - 1], "{name} created before db-{} was Ready: {seen:?}", i - 1);
            }
            if *is_ready {
                ready_seen[i] = true;
            }
        }
    }

    // A new template rolls from the highest ordinal down, one pod at a time.
    let old_revision = sets.get("db").await.unwrap().status.unwrap().update_revision.unwrap();
    let mark = seen.lock().unwrap().len();
    sets.patch("db", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "postgres:2"}]}}}}))).await.unwrap();
    eventually(60, "rolled to postgres:2", || async {
        let s = sets.get("db").await.unwrap().status?;
        let ps = labelled(&pods, "app=db").await;
        let new = ps.iter().filter(|p| ready(p) && p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("postgres:2")).count();
        (new == 3 && s.updated_replicas == Some(3) && s.current_revision == s.update_revision && s.update_revision.as_ref() != Some(&old_revision)).then_some(())
    })
    .await;
    {
        let seen = seen.lock().unwrap();
        let deleted: Vec<&str> = seen[mark..].iter().filter(|e| e.0 == "DELETED").map(|e| e.1.as_str()).collect();
        assert_eq!(deleted, ["db-2", "db-1", "db-0"], "{:?}", &seen[mark..]);
    }

    // Scale to 1: db-2 goes, then db-1, each only once the one above is gone
    // (a grace period of one second makes each deletion visible as terminating first).
    let mark = seen.lock().unwrap().len();
    sets.patch("db", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"replicas": 1}}))).await.unwrap();
    eventually(60, "one pod left", || async {
        let names: Vec<String> = pods.list(&ListParams::default().labels("app=db")).await.unwrap().items.into_iter().filter_map(|p| p.metadata.name).collect();
        (names == ["db-0"]).then_some(())
    })
    .await;
    {
        let seen = seen.lock().unwrap();
        let pos = |pred: &dyn Fn(&SeenEvent) -> bool| seen[mark..].iter().position(pred).unwrap_or_else(|| panic!("{seen:?}"));
        let db2_terminating = pos(&|e| e.1 == "db-2" && e.3);
        let db2_gone = pos(&|e| e.1 == "db-2" && e.0 == "DELETED");
        let db1_terminating = pos(&|e| e.1 == "db-1" && e.3);
        assert!(db2_terminating < db2_gone && db2_gone < db1_terminating, "db-1 deleted before db-2 was gone: {:?}", &seen[mark..]);
        assert!(!seen[mark..].iter().any(|e| e.1 == "db-0" && e.3), "db-0 stays");
    }
    // whenScaled: Delete takes the surplus claims; db-0's stays.
    eventually(30, "surplus claims deleted", || async {
        let names: Vec<String> = claims.list(&ListParams::default()).await.unwrap().items.into_iter().filter(|c| c.metadata.deletion_timestamp.is_none()).filter_map(|c| c.metadata.name).collect();
        (names == ["data-db-0"]).then_some(())
    })
    .await;
    watch.abort();
    d.shutdown().await;
    c.shutdown().await;
}

#[tokio::test]
async fn a_daemonset_runs_one_pod_per_eligible_node_through_berth() {
    let c = cluster_with_controllers(4, 2, "8", 110).await;
    let d = start_daemon(&c, &config(""), "workloads-ds").await;
    until_leading(&d, 20).await;
    let client = c.client().unwrap();
    let nodes_api: Api<Node> = Api::all(client.clone());
    nodes_api
        .patch("node-3", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}})))
        .await
        .unwrap();
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let ds = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                "spec": {"schedulerName": PROFILE, "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "agent", "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}]}}}
    }))
    .unwrap();
    daemonsets.create(&PostParams::default(), &ds).await.unwrap();
    let expect_on = |want: Vec<&'static str>| {
        let pods = pods.clone();
        async move {
            eventually(60, "one pod per eligible node", || async {
                let ps = labelled(&pods, "app=agent").await;
                let mut on: Vec<String> = ps.iter().filter(|p| ready(p)).filter_map(|p| node_of(p).map(str::to_string)).collect();
                on.sort();
                (ps.len() == want.len() && on == want).then_some(ps)
            })
            .await
        }
    };
    let ps = expect_on(vec!["node-0", "node-1", "node-2"]).await;
    for p in &ps {
        assert_eq!(scheduler_of(p), Some(PROFILE));
        // Placed by the scheduler on the node its affinity names.
        let term = &p.spec.as_ref().unwrap().affinity.as_ref().unwrap().node_affinity.as_ref().unwrap().required_during_scheduling_ignored_during_execution.as_ref().unwrap().node_selector_terms[0];
        let field = &term.match_fields.as_ref().unwrap()[0];
        assert_eq!((field.key.as_str(), field.operator.as_str()), ("metadata.name", "In"));
        assert_eq!(field.values.as_deref(), Some(&[node_of(p).unwrap().to_string()][..]));
        assert!(p.spec.as_ref().unwrap().tolerations.as_ref().unwrap().iter().any(|t| t.key.as_deref() == Some("node.kubernetes.io/unschedulable")));
    }
    let scheduled = event_counts(&c, "Scheduled").await;
    assert_eq!(scheduled.values().sum::<usize>(), 3, "{scheduled:?}");
    eventually(30, "status", || async {
        let s = daemonsets.get("agent").await.unwrap().status?;
        (s.desired_number_scheduled == 3 && s.current_number_scheduled == 3 && s.number_ready == 3 && s.updated_number_scheduled == Some(3) && s.number_misscheduled == 0)
            .then_some(())
    })
    .await;

    // A new node gets its pod.
    c.add_node("node-4").unwrap();
    expect_on(vec!["node-0", "node-1", "node-2", "node-4"]).await;
    d.shutdown().await;
    c.shutdown().await;
}

#[tokio::test]
async fn a_job_of_5_completions_runs_2_at_a_time_to_completion() {
    let c = cluster_with_controllers(3, 3, "8", 110).await;
    let d = start_daemon(&c, &config(""), "workloads-job").await;
    until_leading(&d, 20).await;
    let client = c.client().unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let (seen, watch) = record_pods(&pods).await;
    let job = serde_json::from_value(json!({
        "metadata": {"name": "calc"},
        "spec": {"completions": 5, "parallelism": 2, "template": {
            "metadata": {"annotations": {berth_cluster::COMPLETE_AFTER: "200ms"}},
            "spec": {"restartPolicy": "Never", "schedulerName": PROFILE,
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let status = eventually(60, "job complete", || async {
        let s = jobs.get("calc").await.unwrap().status?;
        s.conditions.as_ref()?.iter().any(|c| c.type_ == "Complete" && c.status == "True").then_some(s)
    })
    .await;
    assert_eq!(status.succeeded, Some(5));
    let owned = pods.list(&ListParams::default().labels("batch.kubernetes.io/job-name=calc")).await.unwrap().items;
    assert_eq!(owned.len(), 5);
    assert!(owned.iter().all(|p| scheduler_of(p) == Some(PROFILE) && node_of(p).is_some()));
    // Never more than two created and not yet finished.
    let seen = seen.lock().unwrap().clone();
    let mut running = std::collections::HashSet::new();
    let mut finished = std::collections::HashSet::new();
    for (ty, name, _, _, terminal) in &seen {
        if *terminal {
            finished.insert(name.clone());
        }
        if *ty == "ADDED" {
            running.insert(name.clone());
            assert!(running.difference(&finished).count() <= 2, "more than 2 at once: {seen:?}");
        }
    }
    watch.abort();
    d.shutdown().await;
    c.shutdown().await;
}
