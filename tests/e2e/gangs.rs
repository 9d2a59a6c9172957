//! Gang scheduling end to end: the daemon over HTTP against the local
//! cluster, with upstream's `scheduling.k8s.io/v1beta1` PodGroups and
//! scheduler-plugins' `scheduling.x-k8s.io/v1alpha1` PodGroup CRD.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use berth_cluster::{FaultConfig, LocalCluster};
use berth_daemon::watch::group_api_resource;
use berth_model::pod::GroupApi;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

use crate::e2e_support::*;

/// scheduler-plugins' PodGroup CRD, as its manifest declares it (the schema
/// trimmed to what these tests write).
async fn install_coscheduling_crd(c: &LocalCluster) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
        "spec": {
            "group": "scheduling.x-k8s.io",
            "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups", "singular": "podgroup", "shortNames": ["pg", "pgs"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(c.client().unwrap()).create(&PostParams::default(), &crd).await.unwrap();
    // Served once established.
    let groups: Api<DynamicObject> = Api::namespaced_with(c.client().unwrap(), "default", &group_api_resource(GroupApi::V1alpha1));
    eventually(10, "the CRD is served", || {
        let groups = groups.clone();
        async move { groups.list(&Default::default()).await.ok() }
    })
    .await;
}

/// Creates a PodGroup of `api` with minCount/minMember `min`.
async fn create_group(c: &LocalCluster, api: GroupApi, name: &str, min: i32, topology: Option<&str>) {
    let ar = group_api_resource(api);
    let body = match api {
        GroupApi::V1beta1 => {
            let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": min}}});
            if let Some(k) = topology {
                spec["schedulingConstraints"] = json!({"topology": [{"key": k}]});
            }
            json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
        }
        GroupApi::V1alpha1 => json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": name, "namespace": "default"}, "spec": {"minMember": min, "scheduleTimeoutSeconds": 60}}),
    };
    let obj: DynamicObject = serde_json::from_value(body).unwrap();
    let groups: Api<DynamicObject> = Api::namespaced_with(c.client().unwrap(), "default", &ar);
    groups.create(&PostParams::default(), &obj).await.unwrap();
}

async fn group_status(c: &LocalCluster, api: GroupApi, name: &str) -> serde_json::Value {
    let groups: Api<DynamicObject> = Api::namespaced_with(c.client().unwrap(), "default", &group_api_resource(api));
    groups.get(name).await.unwrap().data.get("status").cloned().unwrap_or_default()
}

/// `n` members of group `g` (through `api`'s way of naming it), `cpu` each.
fn members(api: GroupApi, g: &str, n: usize, cpu: &str) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let extra = match api {
                GroupApi::V1beta1 => json!({"spec": {"schedulingGroup": {"podGroupName": g}}}),
                GroupApi::V1alpha1 => json!({"metadata": {"labels": {"scheduling.x-k8s.io/pod-group": g}}}),
            };
            pod(&format!("{g}-{i}"), cpu, extra)
        })
        .collect()
}

fn bound_in(all: &[Pod], prefix: &str) -> usize {
    all.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with(prefix)) && node_of(p).is_some()).count()
}

/// A group of 4 with minCount 4 on room for 3 binds none and says why (on
/// the pods and the PodGroup); a node added binds all 4, moved by the node
/// event (the pool's own timeout is five minutes).
async fn waits_whole_then_a_node_binds_all(api: GroupApi) {
    let c = cluster(3, 1, "1", 110, FaultConfig::default()).await;
    if api == GroupApi::V1alpha1 {
        install_coscheduling_crd(&c).await;
    }
    let h = start_daemon(&c, &config(""), "gang-a").await;
    until_leading(&h, 20).await;
    create_group(&c, api, "g4", 4, None).await;
    let pods_api: Api<Pod> = Api::namespaced(c.client().unwrap(), "default");
    create_all(&pods_api, members(api, "g4", 4, "1"), 4).await;
    // Every member says why; none is bound.
    eventually(20, "all four report the group's reason", || {
        let pods_api = pods_api.clone();
        async move {
            let all = pods(&pods_api).await;
            let reasons: Vec<String> = all.iter().filter_map(|p| scheduled_condition(p).filter(|c| c.0 == "False").map(|c| c.2)).collect();
            (reasons.len() == 4 && reasons.iter().all(|m| m.contains("minCount (4) cannot be satisfied"))).then_some(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(bound_in(&pods(&pods_api).await, "g4-"), 0, "a partial gang was bound");
    // explain answers for a member with the group's decision.
    let (code, body) = http_get(h.admin_addr, "/debug/explain?pod=default/g4-0").await;
    assert_eq!(code, 200, "{body}");
    let x: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(x["group"]["fits"], false, "{body}");
    assert_eq!(x["group"]["min_count"], 4, "{body}");
    assert!(x["message"].as_str().unwrap_or("").contains("minCount (4) cannot be satisfied"), "{body}");
    let status = eventually(10, "the PodGroup's status", || {
        let c = &c;
        async move {
            let s = group_status(c, api, "g4").await;
            let ok = match api {
                GroupApi::V1beta1 => s["conditions"][0]["type"] == "PodGroupInitiallyScheduled" && s["conditions"][0]["status"] == "False",
                GroupApi::V1alpha1 => s["phase"] == "Pending",
            };
            ok.then_some(s)
        }
    })
    .await;
    if api == GroupApi::V1beta1 {
        assert_eq!(status["conditions"][0]["reason"], "Unschedulable");
        assert!(status["conditions"][0]["message"].as_str().unwrap_or("").contains("minCount (4)"), "{status}");
    }
    // Room for the fourth.
    c.add_node("node-extra").unwrap();
    eventually(15, "all four bound after the node add", || {
        let pods_api = pods_api.clone();
        async move { (bound_in(&pods(&pods_api).await, "g4-") == 4).then_some(()) }
    })
    .await;
    eventually(10, "the PodGroup says scheduled", || {
        let c = &c;
        async move {
            let s = group_status(c, api, "g4").await;
            let ok = match api {
                GroupApi::V1beta1 => s["conditions"][0]["status"] == "True",
                GroupApi::V1alpha1 => s["phase"] == "Scheduled",
            };
            ok.then_some(())
        }
    })
    .await;
    assert_eq!(h.shutdown().await, 0);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_v1beta1_waits_whole_then_a_node_binds_all() {
    waits_whole_then_a_node_binds_all(GroupApi::V1beta1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_v1alpha1_waits_whole_then_a_node_binds_all() {
    waits_whole_then_a_node_binds_all(GroupApi::V1alpha1).await;
}

/// Two gangs of 6 on room for 8: one fully bound, the other fully pending,
/// and it stays so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_two_gangs_on_room_for_one() {
    let c = cluster(4, 1, "2", 110, FaultConfig::default()).await;
    install_coscheduling_crd(&c).await;
    let h = start_daemon(&c, &config(""), "gang-b").await;
    until_leading(&h, 20).await;
    create_group(&c, GroupApi::V1beta1, "ga", 6, None).await;
    create_group(&c, GroupApi::V1alpha1, "gb", 6, None).await;
    let pods_api: Api<Pod> = Api::namespaced(c.client().unwrap(), "default");
    let mut all = members(GroupApi::V1beta1, "ga", 6, "1");
    all.extend(members(GroupApi::V1alpha1, "gb", 6, "1"));
    create_all(&pods_api, all, 12).await;
    eventually(20, "one gang bound", || {
        let pods_api = pods_api.clone();
        async move {
            let all = pods(&pods_api).await;
            (bound_in(&all, "ga-") + bound_in(&all, "gb-") == 6).then_some(())
        }
    })
    .await;
    // Several retries later, still whole gangs only.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all = pods(&pods_api).await;
    let (a, b) = (bound_in(&all, "ga-"), bound_in(&all, "gb-"));
    assert!((a, b) == (6, 0) || (a, b) == (0, 6), "ga {a} bound, gb {b} bound");
    // No node over its 2 cores.
    let mut used: HashMap<String, i64> = HashMap::new();
    for p in &all {
        if let Some(n) = node_of(p) {
            *used.entry(n.to_string()).or_default() += pod_milli_cpu(p);
        }
    }
    assert!(used.values().all(|&m| m <= 2000), "{used:?}");
    assert_eq!(h.shutdown().await, 0);
    c.shutdown().await;
}

/// A group of 8 with a topology constraint lands in one zone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_topology_group_lands_in_one_zone() {
    let c = cluster(6, 3, "4", 110, FaultConfig::default()).await;
    let h = start_daemon(&c, &config(""), "gang-c").await;
    until_leading(&h, 20).await;
    create_group(&c, GroupApi::V1beta1, "tz", 8, Some("topology.kubernetes.io/zone")).await;
    let pods_api: Api<Pod> = Api::namespaced(c.client().unwrap(), "default");
    create_all(&pods_api, members(GroupApi::V1beta1, "tz", 8, "1"), 8).await;
    let all = eventually(20, "the group bound", || {
        let pods_api = pods_api.clone();
        async move {
            let all = pods(&pods_api).await;
            (bound_in(&all, "tz-") == 8).then_some(all)
        }
    })
    .await;
    let zone_of: HashMap<String, String> = nodes(&c)
        .await
        .into_iter()
        .map(|n: Node| {
            let z = n.metadata.labels.as_ref().and_then(|l| l.get("topology.kubernetes.io/zone").cloned()).unwrap_or_default();
            (n.metadata.name.unwrap_or_default(), z)
        })
        .collect();
    let zones: BTreeSet<&str> = all.iter().filter_map(node_of).filter_map(|n| zone_of.get(n).map(String::as_str)).collect();
    assert_eq!(zones.len(), 1, "{zones:?}");
    assert_eq!(h.shutdown().await, 0);
    c.shutdown().await;
}

/// A high-priority gang preempts exactly enough lower-priority pods for the
/// whole group, then binds; nothing else is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_high_priority_preempts_exactly_enough() {
    let c = cluster(2, 1, "2", 110, FaultConfig::default()).await;
    let h = start_daemon(&c, &config(""), "gang-d").await;
    until_leading(&h, 20).await;
    let pods_api: Api<Pod> = Api::namespaced(c.client().unwrap(), "default");
    let classes: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(c.client().unwrap());
    for (name, value) in [("low", 1), ("high", 1000)] {
        let pc = serde_json::from_value(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value})).unwrap();
        classes.create(&PostParams::default(), &pc).await.unwrap();
    }
    // Four low-priority pods fill both nodes.
    let low: Vec<Pod> = (0..4).map(|i| pod(&format!("low-{i}"), "1", json!({"spec": {"priorityClassName": "low"}}))).collect();
    create_all(&pods_api, low, 4).await;
    eventually(20, "the low pods bound", || {
        let pods_api = pods_api.clone();
        async move { (bound_in(&pods(&pods_api).await, "low-") == 4).then_some(()) }
    })
    .await;
    create_group(&c, GroupApi::V1beta1, "hp", 2, None).await;
    let mut high = members(GroupApi::V1beta1, "hp", 2, "1");
    for p in &mut high {
        if let Some(s) = p.spec.as_mut() {
            s.priority_class_name = Some("high".into());
        }
    }
    create_all(&pods_api, high, 2).await;
    eventually(30, "the gang bound after preemption", || {
        let pods_api = pods_api.clone();
        async move { (bound_in(&pods(&pods_api).await, "hp-") == 2).then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let all = pods(&pods_api).await;
    let low_left = all.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("low-")) && p.metadata.deletion_timestamp.is_none()).count();
    assert_eq!(low_left, 2, "exactly two victims");
    assert_eq!(h.shutdown().await, 0);
    c.shutdown().await;
}

/// Offline: a dump with PodGroups of both APIs; `simulate` places groups all
/// or nothing and `explain` answers for a member with the group's reason.
#[test]
fn gang_offline_simulate_and_explain() {
    let dump = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
status: {allocatable: {cpu: "2", memory: 8Gi, pods: "110"}}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: big, namespace: default}
spec: {schedulingPolicy: {gang: {minCount: 3}}}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: pair, namespace: default}
spec: {minMember: 2}
"#;
    let mut text = dump.to_string();
    for (name, group) in [("big-0", "big"), ("big-1", "big"), ("big-2", "big")] {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec: {{schedulingGroup: {{podGroupName: {group}}}, containers: [{{name: c, resources: {{requests: {{cpu: '1'}}}}}}]}}\n"
        ));
    }
    for name in ["pair-0", "pair-1"] {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{scheduling.x-k8s.io/pod-group: pair}}}}\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: '1'}}}}}}]}}\n"
        ));
    }
    let cluster = berth_engine::offline::Cluster::parse(&text, "dump.yaml").unwrap();
    assert!(cluster.warnings.is_empty(), "{:?}", cluster.warnings);
    let config = berth_engine::config::Config::parse("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n").unwrap();
    let engine = berth_engine::offline::Engine::new(&config, cluster, 1);
    let e = engine.explain("default/big-0").unwrap();
    let g = e.group.as_ref().expect("the group's decision");
    assert!(!g.fits && g.min_count == 3, "{g:?}");
    assert!(e.selected.is_none());
    assert!(e.message.as_deref().unwrap_or("").contains("minCount (3) cannot be satisfied: 2 scheduled, 0 remaining"), "{:?}", e.message);
    let mut engine = engine;
    let sim = engine.simulate();
    let node = |k: &str| sim.placements.iter().find(|p| p.pod == k).and_then(|p| p.node.clone());
    // The group of three never fits the two cores; the pair does, whole.
    assert!(["default/big-0", "default/big-1", "default/big-2"].iter().all(|k| node(k).is_none()), "{:?}", sim.placements);
    assert!(node("default/pair-0").is_some() && node("default/pair-1").is_some(), "{:?}", sim.placements);
}
