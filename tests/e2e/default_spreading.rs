//! Default topology spreading over HTTP: PodTopologySpread's `List` defaults
//! apply to pods a Service and a ReplicaSet select, with the selector built
//! from those objects, and not to the same pods without them.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use berth_cluster::{FaultConfig, LocalCluster};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::e2e_support::*;

const DEFAULTS: &str = "  pluginConfig:
  - name: PodTopologySpread
    args:
      defaultingType: List
      defaultConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
";

/// 30 nodes: 20 in zone-a, 5 in zone-b, 5 in zone-c.
async fn skewed_cluster() -> LocalCluster {
    let c = cluster(0, 3, "8", 110, FaultConfig::default()).await;
    for i in 0..30 {
        let zone = match i {
            0..20 => 0,
            20..25 => 1,
            _ => 2,
        };
        c.add_custom_node(&format!("node-{i:02}"), zone, 3, "8", "64Gi", 110).unwrap();
    }
    c
}

/// Runs 60 pods labelled app=web through the daemon and returns pods per zone.
/// With `owned`, a Service selects them and a ReplicaSet owns them.
async fn place(owned: bool) -> BTreeMap<String, usize> {
    let c = skewed_cluster().await;
    let client = c.client().unwrap();
    let mut owner = None;
    if owned {
        let svc: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}
        }))
        .unwrap();
        Api::<Service>::default_namespaced(client.clone()).create(&PostParams::default(), &svc).await.unwrap();
        let rs: ReplicaSet = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-6d4b"},
            "spec": {
                "replicas": 60,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
            }
        }))
        .unwrap();
        let rs = Api::<ReplicaSet>::default_namespaced(client.clone()).create(&PostParams::default(), &rs).await.unwrap();
        owner = Some(json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6d4b",
            "uid": rs.metadata.uid.clone().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true
        }]));
    }
    let d = start_daemon(&c, &config(DEFAULTS), if owned { "spread-owned" } else { "spread-bare" }).await;
    until_leading(&d, 20).await;
    let api: Api<Pod> = Api::default_namespaced(client);
    let mut meta = json!({"labels": {"app": "web"}});
    if let Some(o) = owner {
        meta["ownerReferences"] = o;
    }
    let all: Vec<Pod> = (0..60).map(|i| pod(&format!("web-{i:02}"), "500m", json!({"metadata": meta.clone()}))).collect();
    create_all(&api, all, 8).await;
    let bound = eventually(40, "60 pods bound", || async {
        let ps = pods(&api).await;
        (ps.iter().filter(|p| node_of(p).is_some()).count() == 60).then_some(ps)
    })
    .await;
    let zone_of: BTreeMap<String, String> = nodes(&c)
        .await
        .into_iter()
        .map(|n| (n.metadata.name.clone().unwrap(), n.metadata.labels.unwrap()["topology.kubernetes.io/zone"].clone()))
        .collect();
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for p in &bound {
        *per.entry(zone_of[node_of(p).unwrap()].clone()).or_default() += 1;
    }
    d.shutdown().await;
    c.shutdown().await;
    per
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_defaults_spread_pods_of_a_service_and_replica_set() {
    let per = place(true).await;
    let want: BTreeMap<String, usize> = [("zone-a", 20), ("zone-b", 20), ("zone-c", 20)].into_iter().map(|(z, n)| (z.to_string(), n)).collect();
    assert_eq!(per, want, "default zone constraint (maxSkew 1) levels the zones");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_service_or_owner_only_resource_scores_decide() {
    // No default constraint applies: the least-allocated scores put two pods
    // on every node, so zone-a (20 of the 30 nodes) takes 40.
    let per = place(false).await;
    let want: BTreeMap<String, usize> = [("zone-a", 40), ("zone-b", 10), ("zone-c", 10)].into_iter().map(|(z, n)| (z.to_string(), n)).collect();
    assert_eq!(per, want);
}
