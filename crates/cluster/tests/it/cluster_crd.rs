//! The local cluster's run-time resources: scheduling.k8s.io/v1beta1
//! PodGroups and Workloads, CustomResourceDefinitions and the objects they
//! define (through kube-rs's typed and dynamic APIs, and kubectl), and the
//! immutability of `pod.spec.schedulingGroup`.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use berth_cluster::{ClusterConfig, LocalCluster};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::discovery::Discovery;
use serde_json::{Value, json};

use crate::cluster_kubectl::kubectl;

async fn start() -> LocalCluster {
    LocalCluster::start(ClusterConfig { nodes: 2, ..Default::default() }).await.unwrap()
}

fn api_error(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A PodGroup CRD shaped like scheduler-plugins' (written for this test):
/// namespaced, one version with a status subresource and printer columns.
fn podgroup_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
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
                "additionalPrinterColumns": [
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "MinMember", "type": "integer", "jsonPath": ".spec.minMember"}
                ],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": {"type": "object", "properties": {
                        "minMember": {"type": "integer", "format": "int32", "minimum": 1},
                        "minResources": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}},
                        "scheduleTimeoutSeconds": {"type": "integer", "format": "int32"}
                    }},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"},
                        "running": {"type": "integer", "format": "int32"},
                        "scheduleStartTime": {"type": "string", "format": "date-time"}
                    }}
                }}}
            }]
        }
    }))
    .unwrap()
}

fn gvk_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup"), "podgroups")
}

fn dynamic(name: &str, min_member: Value) -> DynamicObject {
    let mut o = DynamicObject::new(name, &gvk_resource());
    o.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
    o.data = json!({"spec": {"minMember": min_member, "minResources": {"cpu": "2", "pods": 4}, "surplus": true}, "junk": 1});
    o
}

/// Next non-bookmark watch event within 5 s.
/// The next event that is not a BOOKMARK (the server sends those on a
/// timer, so one may come before any object event).
async fn next_event<K, S>(s: &mut S) -> WatchEvent<K>
where
    S: futures::Stream<Item = Result<WatchEvent<K>, kube::Error>> + Unpin,
{
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), s.next()).await.expect("watch event").expect("stream open").unwrap();
        if !matches!(ev, WatchEvent::Bookmark(_)) {
            return ev;
        }
    }
}

#[tokio::test]
async fn crd_objects_are_served_with_discovery_watch_status_and_schema() {
    let c = start().await;
    let client = c.client().unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let created = crds.create(&PostParams::default(), &podgroup_crd()).await.unwrap();
    let conds = created.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    assert!(conds.iter().any(|c| c.type_ == "Established" && c.status == "True"), "{conds:?}");
    assert!(conds.iter().any(|c| c.type_ == "NamesAccepted" && c.status == "True"), "{conds:?}");

    // Discovery finds it, as kube-rs (and kubectl) look it up.
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let group = discovery.groups().find(|g| g.name() == "scheduling.x-k8s.io").expect("group discovered");
    let (ar, caps) = group.recommended_kind("PodGroup").expect("kind discovered");
    assert_eq!(ar.plural, "podgroups");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    assert!(caps.subresources.iter().any(|(r, _)| r.plural.ends_with("status")), "{:?}", caps.subresources);

    let pgs: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let mut watch = pgs.watch(&WatchParams::default(), "0").await.unwrap().boxed();

    // Create: unknown fields are pruned, the rest kept.
    let pg = pgs.create(&PostParams::default(), &dynamic("pg-a", json!(3))).await.unwrap();
    assert_eq!(pg.data["spec"]["minMember"], 3);
    assert_eq!(pg.data["spec"]["minResources"]["pods"], 4);
    assert!(pg.data["spec"].get("surplus").is_none() && pg.data.get("junk").is_none(), "{:?}", pg.data);
    assert_eq!(pg.metadata.generation, Some(1));
    match next_event(&mut watch).await {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("pg-a")),
        other => panic!("expected ADDED, got {other:?}"),
    }

    // The schema refuses a bad value, naming the field.
    let (code, msg) = api_error(pgs.create(&PostParams::default(), &dynamic("pg-bad", json!(0))).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(msg.contains("spec.minMember: Invalid value: 0: spec.minMember in body should be greater than or equal to 1"), "{msg}");
    let (code, msg) = api_error(pgs.create(&PostParams::default(), &dynamic("pg-bad", json!("three"))).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(msg.contains("spec.minMember in body must be of type integer"), "{msg}");

    // Status through its subresource; a main-resource write keeps it.
    let st = json!({"status": {"phase": "Scheduling", "running": 0}});
    let pg = pgs.patch_status("pg-a", &PatchParams::default(), &Patch::Merge(&st)).await.unwrap();
    assert_eq!(pg.data["status"]["phase"], "Scheduling");
    let pg = pgs.patch("pg-a", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"minMember": 4}, "status": {"phase": "Nope"}}))).await.unwrap();
    assert_eq!(pg.data["status"]["phase"], "Scheduling");
    assert_eq!(pg.data["spec"]["minMember"], 4);
    assert_eq!(pg.metadata.generation, Some(2));
    for expected in ["Scheduling", "Scheduling"] {
        match next_event(&mut watch).await {
            WatchEvent::Modified(o) => assert_eq!(o.data["status"]["phase"], expected),
            other => panic!("expected MODIFIED, got {other:?}"),
        }
    }

    // Selectors and pages as for any other resource.
    pgs.create(&PostParams::default(), &dynamic("pg-b", json!(1))).await.unwrap();
    let mut other = dynamic("pg-c", json!(1));
    other.metadata.labels = Some([("team".to_string(), "b".to_string())].into());
    pgs.create(&PostParams::default(), &other).await.unwrap();
    let names = |l: kube::core::ObjectList<DynamicObject>| l.items.into_iter().filter_map(|o| o.metadata.name).collect::<Vec<_>>();
    assert_eq!(names(pgs.list(&ListParams::default().labels("team=a")).await.unwrap()), vec!["pg-a", "pg-b"]);
    let page = pgs.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let token = page.metadata.continue_.clone().unwrap();
    assert_eq!(names(pgs.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap()), vec!["pg-c"]);
    let fields = pgs.list(&ListParams::default().fields("metadata.name=pg-b")).await.unwrap();
    assert_eq!(names(fields), vec!["pg-b"]);

    // Deleting the CRD deletes its objects (their watchers see it) and
    // stops serving the resource.
    crds.delete("podgroups.scheduling.x-k8s.io", &DeleteParams::default()).await.unwrap();
    let mut deleted = 0;
    while deleted < 3 {
        if let WatchEvent::Deleted(_) = next_event(&mut watch).await {
            deleted += 1;
        }
    }
    let (code, _) = api_error(pgs.get("pg-a").await.unwrap_err());
    assert_eq!(code, 404);
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    assert!(discovery.groups().all(|g| g.name() != "scheduling.x-k8s.io"));

    // Defined again: served again, empty.
    crds.create(&PostParams::default(), &podgroup_crd()).await.unwrap();
    assert!(pgs.list(&ListParams::default()).await.unwrap().items.is_empty());
    c.shutdown().await;
}

#[tokio::test]
async fn every_served_version_of_a_crd_shows_the_same_objects() {
    let c = start().await;
    let client = c.client().unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}});
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Gadget", "plural": "gadgets"}, "scope": "Cluster",
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false, "schema": schema},
                {"name": "v1", "served": true, "storage": true, "schema": schema}
            ]}
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let v1b1 = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1beta1", "Gadget"), "gadgets");
    let v1 = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Gadget"), "gadgets");
    let old: Api<DynamicObject> = Api::all_with(client.clone(), &v1b1);
    let new: Api<DynamicObject> = Api::all_with(client.clone(), &v1);
    let mut o = DynamicObject::new("g1", &v1b1);
    o.data = json!({"spec": {"anything": {"goes": true}}});
    let made = old.create(&PostParams::default(), &o).await.unwrap();
    assert_eq!(made.types.as_ref().map(|t| t.api_version.as_str()), Some("example.com/v1beta1"));
    let read = new.get("g1").await.unwrap();
    assert_eq!(read.types.as_ref().map(|t| t.api_version.as_str()), Some("example.com/v1"));
    assert_eq!(read.data["spec"]["anything"]["goes"], true);
    let listed = old.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items[0].types.as_ref().map(|t| t.api_version.as_str()), Some("example.com/v1beta1"));

    // The group offers both, v1 preferred.
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let g = discovery.groups().find(|g| g.name() == "example.com").unwrap();
    assert_eq!(g.preferred_version_or_latest(), "v1");
    assert_eq!(g.versions().collect::<Vec<_>>(), vec!["v1", "v1beta1"]);
    c.shutdown().await;
}

#[tokio::test]
async fn scheduling_v1beta1_podgroups_and_workloads_are_served() {
    let c = start().await;
    let client = c.client().unwrap();
    let wls: Api<Workload> = Api::namespaced(client.clone(), "default");
    let wl: Workload = serde_json::from_value(json!({
        "metadata": {"name": "train"},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}}]}
    }))
    .unwrap();
    let wl = wls.create(&PostParams::default(), &wl).await.unwrap();
    assert_eq!(wl.spec.pod_group_templates.unwrap()[0].name, "workers");

    let pgs: Api<PodGroup> = Api::namespaced(client.clone(), "default");
    let mut watch = pgs.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let pg: PodGroup = serde_json::from_value(json!({
        "metadata": {"name": "train-workers"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}
    }))
    .unwrap();
    pgs.create(&PostParams::default(), &pg).await.unwrap();
    let added = next_event(&mut watch).await;
    assert!(matches!(added, WatchEvent::Added(ref p) if p.metadata.name.as_deref() == Some("train-workers")), "{added:?}");

    // Status only through its subresource.
    let cond = json!({"status": {"conditions": [{"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/2 nodes are available", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    let got = pgs.patch_status("train-workers", &PatchParams::default(), &Patch::Merge(&cond)).await.unwrap();
    assert_eq!(got.status.unwrap().conditions.unwrap()[0].reason, "Unschedulable");
    let got = pgs.patch("train-workers", &PatchParams::default(), &Patch::Merge(&json!({"status": null}))).await.unwrap();
    assert!(got.status.is_some_and(|s| s.conditions.is_some()));

    // Discovery: scheduling.k8s.io offers v1 (preferred) and v1beta1.
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let g = discovery.groups().find(|g| g.name() == "scheduling.k8s.io").unwrap();
    assert_eq!(g.preferred_version_or_latest(), "v1");
    assert!(g.versions().any(|v| v == "v1beta1"));
    let kinds: Vec<String> = g.versioned_resources("v1beta1").into_iter().map(|(r, _)| r.kind).collect();
    assert!(kinds.contains(&"PodGroup".to_string()) && kinds.contains(&"Workload".to_string()), "{kinds:?}");
    c.shutdown().await;
}

#[tokio::test]
async fn pod_scheduling_group_is_immutable() {
    let c = start().await;
    let pods: Api<Pod> = Api::namespaced(c.client().unwrap(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "member"},
        "spec": {"schedulingGroup": {"podGroupName": "train-workers"}, "containers": [{"name": "c", "image": "x"}]}
    }))
    .unwrap();
    let made = pods.create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(made.spec.unwrap().scheduling_group.unwrap().pod_group_name.as_deref(), Some("train-workers"));
    for patch in [json!({"spec": {"schedulingGroup": {"podGroupName": "other"}}}), json!({"spec": {"schedulingGroup": null}})] {
        let (code, msg) = api_error(pods.patch("member", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap_err());
        assert_eq!(code, 422);
        assert!(msg.starts_with("Pod \"member\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"), "{msg}");
        assert!(msg.contains("SchedulingGroup"), "{msg}");
    }
    // Other updates still go through.
    pods.patch("member", &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"labels": {"a": "b"}}}))).await.unwrap();
    c.shutdown().await;
}

/// scheduler-plugins' own PodGroup CRD manifest (kubernetes-sigs/scheduler-plugins,
/// `manifests/crds/scheduling.x-k8s.io_podgroups.yaml`), from `$BERTH_SP_CRD` or
/// the copy under `tests/fixtures` (unchanged, Apache-2.0).
/// scheduler-plugins' PodGroup CRD, as its project ships it (a fixture of
/// this crate; `BERTH_SP_CRD` names another): missing, the test fails.
fn scheduler_plugins_crd() -> PathBuf {
    let p = std::env::var("BERTH_SP_CRD")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/scheduler-plugins/scheduling.x-k8s.io_podgroups.yaml")));
    assert!(p.is_file(), "scheduler-plugins' CRD manifest {} is missing", p.display());
    p
}

#[tokio::test]
#[cfg_attr(berth_no_kubectl, ignore = "kubectl is not on PATH (CI installs it; BERTH_KUBECTL names another)")]
async fn scheduler_plugins_crd_manifest_applies_unchanged_with_kubectl() {
    let manifest = scheduler_plugins_crd();
    let c = start().await;
    let dir = std::env::temp_dir().join(format!("berth-crd-{}-{}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = dir.join("kubeconfig");
    c.write_kubeconfig(&kc).unwrap();
    let cache = dir.join("cache");
    let cache = cache.to_str().unwrap();
    let (ok, out) = kubectl(&kc, &["--cache-dir", cache, "apply", "-f", manifest.to_str().unwrap()]).await;
    assert!(ok && out.contains("customresourcedefinition.apiextensions.k8s.io/podgroups.scheduling.x-k8s.io created"), "{out}");
    let (ok, out) = kubectl(&kc, &["--cache-dir", cache, "wait", "--for=condition=Established", "crd/podgroups.scheduling.x-k8s.io", "--timeout=10s"]).await;
    assert!(ok, "{out}");
    let pg = dir.join("pg.yaml");
    std::fs::write(&pg, "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata:\n  name: nginx\nspec:\n  minMember: 3\n  scheduleTimeoutSeconds: 10\n").unwrap();
    let (ok, out) = kubectl(&kc, &["--cache-dir", cache, "apply", "-f", pg.to_str().unwrap()]).await;
    assert!(ok && out.contains("podgroup.scheduling.x-k8s.io/nginx created"), "{out}");
    // Short name and printer columns from the CRD.
    let (ok, out) = kubectl(&kc, &["--cache-dir", cache, "get", "pg"]).await;
    assert!(ok, "{out}");
    let header = out.lines().next().unwrap_or("");
    assert!(header.contains("NAME") && header.contains("PHASE") && header.contains("MINMEMBER"), "{out}");
    assert!(out.lines().nth(1).is_some_and(|l| l.starts_with("nginx") && l.contains('3')), "{out}");
    let (ok, out) = kubectl(&kc, &["--cache-dir", cache, "get", "podgroups.scheduling.x-k8s.io", "nginx", "-o", "jsonpath={.spec.minMember}"]).await;
    assert!(ok && out.trim() == "3", "{out}");
    c.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
