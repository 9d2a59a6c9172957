//! Storage end to end: the daemon over HTTP against the local cluster, whose
//! PV controller and provisioner play a real cluster's. Claims of the
//! default class (WaitForFirstConsumer) are provisioned where their pods
//! land; a missing class and a ReadWriteOncePod conflict leave pods Pending
//! with upstream's messages; PV/PVC writes that fail (through the fault
//! proxy) never bind a pod without its volumes and never leak a PV.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::http::Method;
use berth_cluster::{FaultConfig, LocalCluster};
use berth_daemon::{self as daemon, Options};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use crate::e2e_support::*;
use crate::fault_proxy::{Fault, FaultProxy, Rule};

const ZONE: &str = "topology.kubernetes.io/zone";

async fn deadline<F: std::future::Future<Output = ()>>(secs: u64, f: F) {
    tokio::time::timeout(Duration::from_secs(secs), f).await.unwrap_or_else(|_| panic!("test deadline ({secs} s) exceeded"));
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// A claim of `size`; `class` None leaves storageClassName unset (the default class).
fn claim(name: &str, size: &str, class: Option<&str>, modes: &[&str]) -> PersistentVolumeClaim {
    let mut v = json!({"metadata": {"name": name}, "spec": {"accessModes": modes, "resources": {"requests": {"storage": size}}}});
    if let Some(c) = class {
        v["spec"]["storageClassName"] = json!(c);
    }
    from(v)
}

/// A pod of the test profile mounting `claim`, with `extra` merged in.
fn pod_with_claim(name: &str, claim: &str, extra: Value) -> Pod {
    let mut p = json!({"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}});
    merge(&mut p, &extra);
    pod(name, "100m", p)
}

fn claim_phase(c: &PersistentVolumeClaim) -> &str {
    c.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn claim_volume(c: &PersistentVolumeClaim) -> Option<&str> {
    c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty())
}

/// The zone a PV's node affinity requires (the provisioner writes one term).
fn pv_zone(pv: &PersistentVolume) -> Option<String> {
    let terms = &pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref()?.node_selector_terms;
    terms.iter().flat_map(|t| t.match_expressions.iter().flatten()).find(|e| e.key == ZONE).and_then(|e| e.values.as_ref()?.first().cloned())
}

async fn zones_of_nodes(c: &LocalCluster) -> HashMap<String, String> {
    nodes(c).await.into_iter().map(|n| (n.metadata.name.clone().unwrap(), n.metadata.labels.unwrap_or_default().get(ZONE).cloned().unwrap_or_default())).collect()
}

/// Every claim of a bound pod is Bound: the pod was bound only after its
/// volumes (PreBind waits for them; a claim never goes back to Pending).
async fn bound_pods_have_bound_claims(pods_api: &Api<Pod>, claims: &Api<PersistentVolumeClaim>) {
    for p in pods(pods_api).await {
        if node_of(&p).is_none() {
            continue;
        }
        for v in p.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
            let Some(src) = &v.persistent_volume_claim else { continue };
            let c = claims.get(&src.claim_name).await.unwrap();
            assert_eq!(claim_phase(&c), "Bound", "pod {:?} is bound but its claim {:?} is {:?}", p.metadata.name, src.claim_name, claim_phase(&c));
        }
    }
}

// 30 pods over 3 zones, each with its own claim of the default class: all
// bound, every claim Bound, each pod in its volume's zone; a pod deleted and
// recreated with the same claim lands in the same zone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_claims_are_provisioned_in_the_zones_of_their_pods() {
    deadline(90, async {
        let c = cluster(6, 3, "8", 110, FaultConfig::default()).await;
        let d = start_daemon(&c, &config(""), "storage").await;
        until_leading(&d, 20).await;
        let client = c.client().unwrap();
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let zone_of = zones_of_nodes(&c).await;
        let spread = json!({"metadata": {"labels": {"app": "stateful"}}, "spec": {"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "stateful"}}}]}});
        for i in 0..30 {
            claims.create(&PostParams::default(), &claim(&format!("data-{i:02}"), "1Gi", None, &["ReadWriteOnce"])).await.unwrap();
        }
        create_all(&pods_api, (0..30).map(|i| pod_with_claim(&format!("db-{i:02}"), &format!("data-{i:02}"), spread.clone())).collect(), 10).await;
        eventually(60, "30 pods bound and 30 claims Bound", || async {
            let bound = pods(&pods_api).await.iter().filter(|p| node_of(p).is_some()).count();
            let claims_bound = claims.list(&ListParams::default()).await.unwrap().items.iter().filter(|c| claim_phase(c) == "Bound").count();
            (bound == 30 && claims_bound == 30).then_some(())
        })
        .await;
        bound_pods_have_bound_claims(&pods_api, &claims).await;
        let mut per_zone: HashMap<String, usize> = HashMap::new();
        for p in pods(&pods_api).await {
            let name = p.metadata.name.clone().unwrap();
            let node = node_of(&p).unwrap().to_string();
            let claim_name = name.replace("db-", "data-");
            let cl = claims.get(&claim_name).await.unwrap();
            let pv = pvs.get(claim_volume(&cl).unwrap()).await.unwrap();
            let selected = cl.metadata.annotations.as_ref().and_then(|a| a.get("volume.kubernetes.io/selected-node")).cloned();
            assert_eq!(selected.as_deref(), Some(node.as_str()), "{claim_name} was provisioned for another node than its pod's");
            assert_eq!(pv_zone(&pv).as_deref(), Some(zone_of[&node].as_str()), "{name} on {node} but its volume is elsewhere");
            *per_zone.entry(zone_of[&node].clone()).or_default() += 1;
        }
        assert_eq!(per_zone.len(), 3, "pods over three zones: {per_zone:?}");
        // Delete one pod and create it again with the same claim: its volume pins it to the same zone.
        let first = pods_api.get("db-00").await.unwrap();
        let zone = zone_of[node_of(&first).unwrap()].clone();
        pods_api.delete("db-00", &DeleteParams::default()).await.unwrap();
        eventually(20, "db-00 gone", || async { pods_api.get_opt("db-00").await.unwrap().is_none().then_some(()) }).await;
        pods_api.create(&PostParams::default(), &pod_with_claim("db-00", "data-00", json!({}))).await.unwrap();
        let again = eventually(20, "db-00 bound again", || async { pods_api.get("db-00").await.ok().and_then(|p| node_of(&p).map(str::to_string)) }).await;
        assert_eq!(zone_of[&again], zone, "recreated pod left its volume's zone");
        assert_eq!(d.write_counts().volume_writes_unknown, 0);
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// A claim naming a missing StorageClass, and two pods sharing one
// ReadWriteOncePod claim: Pending with upstream's messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_class_and_read_write_once_pod_conflict_stay_pending() {
    deadline(90, async {
        let c = cluster(3, 3, "8", 110, FaultConfig::default()).await;
        let d = start_daemon(&c, &config(""), "storage-pending").await;
        until_leading(&d, 20).await;
        let client = c.client().unwrap();
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
        claims.create(&PostParams::default(), &claim("classless", "1Gi", Some("no-such-class"), &["ReadWriteOnce"])).await.unwrap();
        claims.create(&PostParams::default(), &claim("solo", "1Gi", None, &["ReadWriteOncePod"])).await.unwrap();
        pods_api.create(&PostParams::default(), &pod_with_claim("orphan", "classless", json!({}))).await.unwrap();
        create_all(&pods_api, vec![pod_with_claim("rwop-1", "solo", json!({})), pod_with_claim("rwop-2", "solo", json!({}))], 2).await;
        // Upstream treats a claim whose class does not exist as Immediate binding.
        let (status, reason, message) = eventually(20, "orphan reported unschedulable", || async {
            pods_api.get("orphan").await.ok().as_ref().and_then(scheduled_condition).filter(|c| c.0 == "False")
        })
        .await;
        assert_eq!((status.as_str(), reason.as_str()), ("False", "Unschedulable"));
        assert!(message.starts_with("0/3 nodes are available: ") && message.contains("pod has unbound immediate PersistentVolumeClaims"), "{message}");
        eventually(10, "FailedScheduling event for orphan", || async {
            events(&c).await.into_iter().any(|(p, r, n)| p == "orphan" && r == "FailedScheduling" && n.contains("pod has unbound immediate PersistentVolumeClaims")).then_some(())
        })
        .await;
        // ReadWriteOncePod: exactly one of the two is bound, the other waits.
        // The first pod placed may fail PreBind once, as upstream's does, when
        // the claim names its new volume before the volume reaches the
        // scheduler's cache ("persistentvolume ... not found"); it is then
        // retried and loses to the other. Wait for that final verdict.
        let loser = eventually(30, "one rwop pod bound, the other reported unschedulable", || async {
            let all = pods(&pods_api).await;
            let rw: Vec<&Pod> = all.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("rwop-"))).collect();
            let bound = rw.iter().filter(|p| node_of(p).is_some()).count();
            // The final verdict, not the PreBind failure of a first attempt
            // (which is also reported Unschedulable, with its own message).
            let waiting = rw.iter().find(|p| {
                node_of(p).is_none()
                    && scheduled_condition(p).is_some_and(|c| c.0 == "False" && c.1 == "Unschedulable" && c.2.contains("ReadWriteOncePod access mode already in-use"))
            });
            (bound == 1).then_some(waiting.map(|p| p.metadata.name.clone().unwrap())).flatten()
        })
        .await;
        let (_, reason, message) = scheduled_condition(&pods_api.get(&loser).await.unwrap()).unwrap();
        assert_eq!(reason, "Unschedulable");
        assert!(message.contains("node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"), "{message}");
        // Still so a little later (retries with backoff keep the decision).
        tokio::time::sleep(Duration::from_secs(3)).await;
        let all = pods(&pods_api).await;
        assert_eq!(all.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("rwop-")) && node_of(p).is_some()).count(), 1);
        assert!(node_of(&pods_api.get("orphan").await.unwrap()).is_none());
        assert_eq!(claim_phase(&claims.get("solo").await.unwrap()), "Bound");
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}

// PV and PVC writes through a fault proxy. Refused writes (500 before the
// API server): the pods stay unbound, reported with PreBind's error, nothing
// is written, and the PV is not leaked: once its pod gives the claim up,
// another pod takes the PV. Writes whose reply is lost after the commit:
// read back, the pods are bound with their volumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_volume_writes_never_bind_a_pod_without_its_volumes_nor_leak_a_volume() {
    deadline(90, async {
        let c = cluster(3, 3, "8", 110, FaultConfig::default()).await;
        let client = c.client().unwrap();
        let sc: Api<StorageClass> = Api::all(client.clone());
        sc.create(&PostParams::default(), &from(json!({"metadata": {"name": "manual"}, "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}))).await.unwrap();
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        pvs.create(&PostParams::default(), &from(json!({"metadata": {"name": "pv-static"}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "manual", "hostPath": {"path": "/data/pv-static"}}}))).await.unwrap();
        let proxy = FaultProxy::start(client.clone()).await;
        let opts = Options { bind_address: SocketAddr::from(([127, 0, 0, 1], 0)), identity: "storage-faults".into(), ..Options::default() };
        let d = daemon::start(proxy.client(), &config(""), opts).await.unwrap();
        until_leading(&d, 20).await;
        let pods_api: Api<Pod> = Api::default_namespaced(client.clone());
        let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());

        // 1. Every PV write refused.
        proxy.set_rules(vec![
            Rule::new(Some(Method::PATCH), "/persistentvolumes/", Fault::Status(500), 1.0),
            Rule::new(Some(Method::PATCH), "/persistentvolumeclaims/", Fault::Status(500), 1.0),
        ]);
        claims.create(&PostParams::default(), &claim("claim-a", "1Gi", Some("manual"), &["ReadWriteOnce"])).await.unwrap();
        claims.create(&PostParams::default(), &claim("claim-d", "1Gi", None, &["ReadWriteOnce"])).await.unwrap();
        create_all(&pods_api, vec![pod_with_claim("pod-a", "claim-a", json!({})), pod_with_claim("pod-d", "claim-d", json!({}))], 2).await;
        // A claim to provision whose selected-node write is refused: not provisioned, the pod not bound.
        eventually(20, "pod-d reported failed in PreBind", || async {
            pods_api.get("pod-d").await.ok().as_ref().and_then(scheduled_condition).filter(|c| c.1 == "SchedulerError" && c.2.starts_with("running PreBind plugin \"VolumeBinding\": "))
        })
        .await;
        assert!(node_of(&pods_api.get("pod-d").await.unwrap()).is_none(), "pod-d bound although its claim write failed");
        let cd = claims.get("claim-d").await.unwrap();
        assert!(cd.metadata.annotations.as_ref().is_none_or(|a| !a.contains_key("volume.kubernetes.io/selected-node")), "claim-d got a selected node");
        let (_, reason, message) = eventually(20, "pod-a reported failed in PreBind", || async {
            pods_api.get("pod-a").await.ok().as_ref().and_then(scheduled_condition).filter(|c| c.1 == "SchedulerError")
        })
        .await;
        assert_eq!(reason, "SchedulerError");
        assert!(message.starts_with("running PreBind plugin \"VolumeBinding\": "), "{message}");
        // Retried with backoff, never bound, the PV never written.
        eventually(20, "pod-a retried", || async { (proxy.injected() >= 2).then_some(()) }).await;
        assert!(node_of(&pods_api.get("pod-a").await.unwrap()).is_none(), "pod-a bound although its PV write failed");
        assert!(pvs.get("pv-static").await.unwrap().spec.unwrap().claim_ref.is_none());
        // pod-a gives its claim up (the claim is being deleted: pod-a is now
        // unschedulable for that reason, while it still exists). Nothing it
        // assumed may keep the PV from the next pod.
        claims.delete("claim-a", &DeleteParams::default()).await.unwrap();
        eventually(20, "pod-a blocked by its deleting claim", || async {
            pods_api.get("pod-a").await.ok().as_ref().and_then(scheduled_condition).filter(|c| c.1 == "Unschedulable" && c.2.contains("is being deleted"))
        })
        .await;

        // 2. Writes committed but their replies lost: read back, not failed.
        proxy.set_rules(vec![
            Rule::new(Some(Method::PATCH), "/persistentvolumes/", Fault::ErrorAfterCommit, 1.0),
            Rule::new(Some(Method::PATCH), "/persistentvolumeclaims/", Fault::DropReplyAfterCommit, 1.0),
        ]);
        let injected = proxy.injected();
        claims.create(&PostParams::default(), &claim("claim-b", "1Gi", Some("manual"), &["ReadWriteOnce"])).await.unwrap();
        claims.create(&PostParams::default(), &claim("claim-c", "1Gi", None, &["ReadWriteOnce"])).await.unwrap();
        create_all(&pods_api, vec![pod_with_claim("pod-b", "claim-b", json!({})), pod_with_claim("pod-c", "claim-c", json!({}))], 2).await;
        eventually(30, "pod-b, pod-c and pod-d bound", || async {
            let all = pods(&pods_api).await;
            let bound = |n: &str| all.iter().any(|p| p.metadata.name.as_deref() == Some(n) && node_of(p).is_some());
            (bound("pod-b") && bound("pod-c") && bound("pod-d")).then_some(())
        })
        .await;
        assert!(proxy.injected() >= injected + 2, "both kinds of write went through the faults");
        bound_pods_have_bound_claims(&pods_api, &claims).await;
        let pv = pvs.get("pv-static").await.unwrap();
        assert_eq!(pv.spec.unwrap().claim_ref.and_then(|r| r.name).as_deref(), Some("claim-b"), "the PV pod-a failed to take went to pod-b");
        assert!(d.write_counts().volume_writes_unknown >= 2);
        assert!(node_of(&pods_api.get("pod-a").await.unwrap()).is_none());
        d.shutdown().await;
        c.shutdown().await;
    })
    .await;
}
