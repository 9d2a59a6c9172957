//! The local cluster's workload controllers with berth scheduling what
//! they create: a Deployment's pods come from its ReplicaSet with the
//! template's schedulerName, scale up and down, roll to a new template,
//! and go with their owner.
#![allow(clippy::unwrap_used)]

use berth_cluster::controllers::POD_TEMPLATE_HASH;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::e2e_support::*;

fn deployment(replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"schedulerName": PROFILE, "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": image, "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
            }
        }
    }))
    .unwrap()
}

/// e2e_support's cluster, with the workload controllers on.
async fn cluster_with_controllers() -> berth_cluster::LocalCluster {
    crate::e2e_support::cluster_with_controllers(6, 3, "8", 110).await
}

async fn web_pods(api: &Api<Pod>) -> Vec<Pod> {
    api.list(&ListParams::default().labels("app=web")).await.unwrap().items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

#[tokio::test]
async fn a_deployment_of_30_is_scheduled_by_berth_scaled_to_10_rolled_and_collected() {
    let c = cluster_with_controllers().await;
    let d = start_daemon(&c, &config(""), "controllers").await;
    until_leading(&d, 20).await;
    let client = c.client().unwrap();
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    deploys.create(&PostParams::default(), &deployment(30, "nginx:1")).await.unwrap();

    // 30 pods, each bound by berth (the template's schedulerName), and the Deployment available.
    eventually(60, "30 pods bound", || async {
        let ps = web_pods(&pods).await;
        (ps.len() == 30 && ps.iter().all(|p| node_of(p).is_some())).then_some(())
    })
    .await;
    for p in web_pods(&pods).await {
        assert_eq!(p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()), Some(PROFILE));
        let owner = p.metadata.owner_references.as_ref().and_then(|o| o.first()).unwrap();
        assert_eq!(owner.kind, "ReplicaSet");
        assert!(p.metadata.labels.as_ref().unwrap().contains_key(POD_TEMPLATE_HASH));
    }
    let scheduled = event_counts(&c, "Scheduled").await;
    assert_eq!(scheduled.values().sum::<usize>(), 30, "{scheduled:?}");
    eventually(30, "deployment available", || async {
        let s = deploys.get("web").await.unwrap().status?;
        (s.available_replicas == Some(30) && s.updated_replicas == Some(30)).then_some(())
    })
    .await;

    // Scale to 10: 20 go.
    deploys.patch("web", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"replicas": 10}}))).await.unwrap();
    eventually(30, "10 pods left", || async { (web_pods(&pods).await.len() == 10).then_some(()) }).await;
    assert_eq!(rss.list(&ListParams::default()).await.unwrap().items.len(), 1);

    // A new template rolls to a second ReplicaSet; the old one ends at 0.
    deploys.patch("web", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}))).await.unwrap();
    eventually(60, "rolled to nginx:2", || async {
        let ps = web_pods(&pods).await;
        let new = ps.iter().filter(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("nginx:2") && node_of(p).is_some()).count();
        (ps.len() == 10 && new == 10).then_some(())
    })
    .await;
    let sets = rss.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(sets.len(), 2);
    assert_eq!(sets.iter().map(|r| r.spec.replicas.unwrap_or(1)).sum::<i32>(), 10);

    // Deleting the Deployment takes its ReplicaSets and their pods.
    deploys.delete("web", &DeleteParams::default()).await.unwrap();
    eventually(30, "all collected", || async {
        (rss.list(&ListParams::default()).await.unwrap().items.is_empty() && web_pods(&pods).await.is_empty()).then_some(())
    })
    .await;
    d.shutdown().await;
    c.shutdown().await;
}

#[tokio::test]
async fn a_job_runs_its_pods_to_completion() {
    let c = cluster_with_controllers().await;
    let client = c.client().unwrap();
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), "default");
    let job = serde_json::from_value(json!({
        "metadata": {"name": "calc"},
        "spec": {"completions": 3, "parallelism": 2, "template": {
            "metadata": {"annotations": {berth_cluster::COMPLETE_AFTER: "100ms"}},
            "spec": {"restartPolicy": "Never", "nodeName": "node-0", "containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let status = eventually(30, "job complete", || async {
        let s = jobs.get("calc").await.unwrap().status?;
        s.conditions.as_ref()?.iter().any(|c| c.type_ == "Complete" && c.status == "True").then_some(s)
    })
    .await;
    assert_eq!(status.succeeded, Some(3));
    assert!(status.completion_time.is_some());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let owned = pods.list(&ListParams::default().labels("batch.kubernetes.io/job-name=calc")).await.unwrap().items;
    assert_eq!(owned.len(), 3, "{owned:?}");
    assert!(owned.iter().all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")));
    // Deleting the Job takes its pods.
    jobs.delete("calc", &DeleteParams::default()).await.unwrap();
    eventually(30, "pods collected", || async {
        pods.list(&ListParams::default().labels("batch.kubernetes.io/job-name=calc")).await.unwrap().items.is_empty().then_some(())
    })
    .await;
    c.shutdown().await;
}
