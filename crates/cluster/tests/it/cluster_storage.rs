//! Storage in the local cluster: the default class, CSINodes, the PV
//! controller, the simulated provisioner, protection finalizers and the
//! kubelet's volume checks, through kube-rs.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_cluster::{ClusterConfig, KubeletConfig, LocalCluster, StorageConfig};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use super::support::{eventually, api_err};

async fn start() -> LocalCluster {
    let cfg = ClusterConfig {
        nodes: 3,
        kubelet: KubeletConfig { enabled: true, start_delay: Duration::from_millis(20) },
        storage: StorageConfig { attach_limit: 7, ..Default::default() },
        ..Default::default()
    };
    LocalCluster::start(cfg).await.unwrap()
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn claim(name: &str, size: &str, class: Option<&str>, modes: &[&str]) -> PersistentVolumeClaim {
    let mut v = json!({"metadata": {"name": name}, "spec": {"accessModes": modes, "resources": {"requests": {"storage": size}}}});
    if let Some(c) = class {
        v["spec"]["storageClassName"] = json!(c);
    }
    from(v)
}

fn volume(name: &str, size: &str, class: &str, extra: Value) -> PersistentVolume {
    let mut v = json!({"metadata": {"name": name}, "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
        "storageClassName": class, "hostPath": {"path": format!("/data/{name}")}}});
    json_patch::merge(&mut v, &extra);
    from(v)
}

fn pod_with_claim(name: &str, claim: &str, node: &str) -> Pod {
    from(json!({"metadata": {"name": name}, "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "nginx"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}))
}



fn phase_of_claim(c: &PersistentVolumeClaim) -> &str {
    c.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

async fn bound_claim(claims: &Api<PersistentVolumeClaim>, name: &str) -> PersistentVolumeClaim {
    eventually(5, "condition", || async {
        let c = claims.get(name).await.ok()?;
        (phase_of_claim(&c) == "Bound").then_some(c)
    })
    .await
}

fn phase_of_pod(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

#[tokio::test]
async fn default_class_driver_and_csinodes_out_of_the_box() {
    let c = start().await;
    let client = c.client().unwrap();
    let classes: Api<StorageClass> = Api::all(client.clone());
    let sc = classes.get("standard").await.unwrap();
    assert_eq!(sc.metadata.annotations.unwrap()["storageclass.kubernetes.io/is-default-class"], "true");
    assert_eq!(sc.volume_binding_mode.as_deref(), Some("WaitForFirstConsumer"));
    assert_eq!(sc.provisioner, "csi.berth.dev");
    let drivers: Api<CSIDriver> = Api::all(client.clone());
    assert!(drivers.get("csi.berth.dev").await.is_ok());
    let csinodes: Api<CSINode> = Api::all(client.clone());
    let all = csinodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 3);
    let d = &all.items[0].spec.drivers[0];
    assert_eq!((d.name.as_str(), d.allocatable.as_ref().and_then(|a| a.count)), ("csi.berth.dev", Some(7)));
    c.add_node("late").unwrap();
    assert!(csinodes.get("late").await.is_ok(), "a node added later registers its CSINode too");

    // DefaultStorageClass admission: no class, the default; an explicit "" stays.
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let a = claims.create(&PostParams::default(), &claim("a", "1Gi", None, &["ReadWriteOnce"])).await.unwrap();
    assert_eq!(a.spec.as_ref().unwrap().storage_class_name.as_deref(), Some("standard"));
    assert_eq!(phase_of_claim(&a), "Pending");
    assert!(a.metadata.finalizers.unwrap().contains(&"kubernetes.io/pvc-protection".to_string()));
    let b = claims.create(&PostParams::default(), &claim("b", "1Gi", Some(""), &["ReadWriteOnce"])).await.unwrap();
    assert_eq!(b.spec.unwrap().storage_class_name.as_deref(), Some(""));
    c.shutdown().await;
}

#[tokio::test]
async fn immediate_claims_bind_to_the_smallest_matching_volume() {
    let c = start().await;
    let client = c.client().unwrap();
    let classes: Api<StorageClass> = Api::all(client.clone());
    classes
        .create(&PostParams::default(), &from(json!({"metadata": {"name": "manual"}, "provisioner": "kubernetes.io/no-provisioner"})))
        .await
        .unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for (name, size, extra) in [
        ("pv-1g", "1Gi", json!({})),
        ("pv-5g", "5Gi", json!({})),
        ("pv-10g", "10Gi", json!({})),
        ("pv-fast", "20Gi", json!({"metadata": {"labels": {"tier": "fast"}}})),
        ("pv-block", "5Gi", json!({"spec": {"volumeMode": "Block"}})),
    ] {
        pvs.create(&PostParams::default(), &volume(name, size, "manual", extra)).await.unwrap();
    }
    eventually(5, "condition", || async {
        let pv = pvs.get("pv-5g").await.ok()?;
        (pv.status?.phase.as_deref() == Some("Available")).then_some(())
    })
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    claims.create(&PostParams::default(), &claim("three", "3Gi", Some("manual"), &["ReadWriteOnce"])).await.unwrap();
    let mut fast = claim("fast", "1Gi", Some("manual"), &["ReadWriteOnce"]);
    fast.spec.as_mut().unwrap().selector = Some(from(json!({"matchLabels": {"tier": "fast"}})));
    claims.create(&PostParams::default(), &fast).await.unwrap();
    claims.create(&PostParams::default(), &claim("shared", "1Gi", Some("manual"), &["ReadWriteMany"])).await.unwrap();

    let three = bound_claim(&claims, "three").await;
    assert_eq!(three.spec.as_ref().unwrap().volume_name.as_deref(), Some("pv-5g"));
    let st = three.status.as_ref().unwrap();
    assert_eq!(st.capacity.as_ref().unwrap()["storage"].0, "5Gi");
    let ann = three.metadata.annotations.as_ref().unwrap();
    assert_eq!((ann["pv.kubernetes.io/bind-completed"].as_str(), ann["pv.kubernetes.io/bound-by-controller"].as_str()), ("yes", "yes"));
    let pv = pvs.get("pv-5g").await.unwrap();
    assert_eq!(pv.status.as_ref().unwrap().phase.as_deref(), Some("Bound"));
    let cref = pv.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
    assert_eq!((cref.name.as_deref(), cref.uid.as_deref()), (Some("three"), three.metadata.uid.as_deref()));
    assert_eq!(bound_claim(&claims, "fast").await.spec.unwrap().volume_name.as_deref(), Some("pv-fast"));
    // No volume offers ReadWriteMany: the claim stays Pending.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(phase_of_claim(&claims.get("shared").await.unwrap()), "Pending");

    // Deleting an unused claim releases its volume (Retain by default).
    claims.delete("three", &DeleteParams::default()).await.unwrap();
    eventually(5, "condition", || async {
        let pv = pvs.get("pv-5g").await.ok()?;
        (pv.status?.phase.as_deref() == Some("Released")).then_some(())
    })
    .await;
    assert_eq!(api_err(claims.get("three").await.unwrap_err()).code, 404);
    c.shutdown().await;
}

#[tokio::test]
async fn wait_for_first_consumer_claims_are_provisioned_in_the_selected_nodes_zone() {
    let c = start().await;
    let client = c.client().unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let created = claims.create(&PostParams::default(), &claim("data", "2Gi", None, &["ReadWriteOnce"])).await.unwrap();
    // No consumer yet: nothing happens.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(phase_of_claim(&claims.get("data").await.unwrap()), "Pending");
    assert!(pvs.list(&ListParams::default()).await.unwrap().items.is_empty());

    // The scheduler's PreBind: the selected node (node-1 is in zone-b).
    let ann = json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "node-1"}}});
    claims.patch("data", &PatchParams::default(), &Patch::Merge(ann)).await.unwrap();
    let bound = bound_claim(&claims, "data").await;
    let pv_name = format!("pvc-{}", created.metadata.uid.unwrap());
    assert_eq!(bound.spec.as_ref().unwrap().volume_name.as_deref(), Some(pv_name.as_str()));
    assert_eq!(bound.metadata.annotations.as_ref().unwrap()["volume.kubernetes.io/storage-provisioner"], "csi.berth.dev");
    let pv = pvs.get(&pv_name).await.unwrap();
    let spec = pv.spec.as_ref().unwrap();
    assert_eq!(spec.capacity.as_ref().unwrap()["storage"].0, "2Gi");
    assert_eq!(spec.csi.as_ref().unwrap().driver, "csi.berth.dev");
    assert_eq!(spec.persistent_volume_reclaim_policy.as_deref(), Some("Delete"));
    let term = &spec.node_affinity.as_ref().unwrap().required.as_ref().unwrap().node_selector_terms[0];
    let expr = &term.match_expressions.as_ref().unwrap()[0];
    assert_eq!((expr.key.as_str(), expr.values.as_deref()), ("topology.kubernetes.io/zone", Some(&["zone-b".to_string()][..])));

    // The kubelet runs a consumer in that zone; one in another zone never starts.
    pods.create(&PostParams::default(), &pod_with_claim("right", "data", "node-1")).await.unwrap();
    pods.create(&PostParams::default(), &pod_with_claim("wrong", "data", "node-0")).await.unwrap();
    eventually(5, "condition", || async { (phase_of_pod(&pods.get("right").await.ok()?) == "Running").then_some(()) }).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(phase_of_pod(&pods.get("wrong").await.unwrap()), "Pending");

    // In use: deleting the claim only marks it; once its pods are gone, it
    // goes, and its dynamically provisioned volume with it.
    pods.delete("wrong", &DeleteParams::default()).await.unwrap();
    claims.delete("data", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(claims.get("data").await.unwrap().metadata.deletion_timestamp.is_some(), "a claim in use stays");
    pods.delete("right", &DeleteParams::default()).await.unwrap();
    eventually(6, "condition", || async { claims.get("data").await.is_err().then_some(()) }).await;
    eventually(5, "condition", || async { pvs.get(&pv_name).await.is_err().then_some(()) }).await;
    c.shutdown().await;
}

#[tokio::test]
async fn wait_for_first_consumer_claims_bind_to_the_volume_the_scheduler_picked() {
    let c = start().await;
    let client = c.client().unwrap();
    let classes: Api<StorageClass> = Api::all(client.clone());
    classes
        .create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"})),
        )
        .await
        .unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let zone_a = json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]}}}});
    pvs.create(&PostParams::default(), &volume("local-a", "10Gi", "local", zone_a)).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let cl = claims.create(&PostParams::default(), &claim("db", "5Gi", Some("local"), &["ReadWriteOnce"])).await.unwrap();
    // Delayed binding: the PV controller leaves a matching volume alone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(phase_of_claim(&claims.get("db").await.unwrap()), "Pending");
    // The scheduler's PreBind for a static volume: the PV's claimRef.
    let cref = json!({"spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": "default", "name": "db",
        "uid": cl.metadata.uid}}, "metadata": {"annotations": {"pv.kubernetes.io/bound-by-controller": "yes"}}});
    pvs.patch("local-a", &PatchParams::default(), &Patch::Merge(cref)).await.unwrap();
    let bound = bound_claim(&claims, "db").await;
    assert_eq!(bound.spec.unwrap().volume_name.as_deref(), Some("local-a"));
    let pv = eventually(5, "condition", || async {
        let pv = pvs.get("local-a").await.ok()?;
        (pv.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(pv)
    })
    .await;
    assert!(pv.status.unwrap().last_phase_transition_time.is_some());
    c.shutdown().await;
}

#[tokio::test]
async fn read_write_once_pod_claims_run_one_pod() {
    let c = start().await;
    let client = c.client().unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    claims.create(&PostParams::default(), &claim("solo", "1Gi", None, &["ReadWriteOncePod"])).await.unwrap();
    let ann = json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "node-0"}}});
    claims.patch("solo", &PatchParams::default(), &Patch::Merge(ann)).await.unwrap();
    bound_claim(&claims, "solo").await;
    pods.create(&PostParams::default(), &pod_with_claim("first", "solo", "node-0")).await.unwrap();
    eventually(5, "condition", || async { (phase_of_pod(&pods.get("first").await.ok()?) == "Running").then_some(()) }).await;
    pods.create(&PostParams::default(), &pod_with_claim("second", "solo", "node-0")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(phase_of_pod(&pods.get("second").await.unwrap()), "Pending");
    // Once the first is gone, the second starts.
    pods.delete("first", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    eventually(5, "condition", || async { (phase_of_pod(&pods.get("second").await.ok()?) == "Running").then_some(()) }).await;
    c.shutdown().await;
}

#[tokio::test]
async fn malformed_storage_objects_are_refused_naming_the_field() {
    let c = start().await;
    let client = c.client().unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let e = api_err(claims.create(&PostParams::default(), &claim("bad-size", "lots", None, &["ReadWriteOnce"])).await.unwrap_err());
    // A quantity that does not parse fails decoding, as upstream's does (400).
    assert_eq!(e.code, 400);
    assert!(e.message.starts_with("PersistentVolumeClaim in version \"v1\" cannot be handled as a PersistentVolumeClaim: quantities must match"), "{}", e.message);
    let e = api_err(claims.create(&PostParams::default(), &claim("no-modes", "1Gi", None, &[])).await.unwrap_err());
    assert_eq!(
        e.message,
        "PersistentVolumeClaim \"no-modes\" is invalid: spec.accessModes: Required value: at least 1 access mode is required"
    );
    let e = api_err(claims.create(&PostParams::default(), &claim("odd", "1Gi", None, &["Sometimes"])).await.unwrap_err());
    assert!(e.message.contains("spec.accessModes: Unsupported value: \"Sometimes\""), "{}", e.message);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let empty_affinity = json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": []}}}});
    let e = api_err(pvs.create(&PostParams::default(), &volume("nowhere", "1Gi", "x", empty_affinity)).await.unwrap_err());
    assert_eq!(e.code, 422);
    assert!(e.message.contains("spec.nodeAffinity.required.nodeSelectorTerms"), "{}", e.message);
    c.shutdown().await;
}
