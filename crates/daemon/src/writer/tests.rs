use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;
use serde_json::json;

use berth_engine::cache::storage as vol;

use super::claims::*;
use super::events::*;
use super::volumes::*;
use super::*;


#[test]
fn namespaced_paths_are_kubes() {
    use kube::Resource as _;
    assert_eq!(namespaced_path("/api/v1/namespaces/", "ns-1", "/pods"), core::Pod::url_path(&(), Some("ns-1")));
    assert_eq!(namespaced_path("/apis/events.k8s.io/v1/namespaces/", "ns-1", "/events"), events::Event::url_path(&(), Some("ns-1")));
}

#[test]
fn event_series_stay_bounded_and_keep_the_newest() {
    let t0 = Instant::now();
    let mut series: HashMap<usize, Instant> = HashMap::new();
    for i in 0..20_000 {
        trim_series(&mut series, |v| *v, t0 + Duration::from_millis(i as u64));
        series.insert(i, t0 + Duration::from_millis(i as u64));
        assert!(series.len() <= SERIES_CAP, "{i}: {}", series.len());
    }
    assert!(series.contains_key(&19_999) && series.len() > SERIES_CAP / 4);
    // Series past their window go first: nothing else is dropped then.
    let late = t0 + SERIES_WINDOW + Duration::from_secs(60);
    let mut old: HashMap<usize, Instant> = (0..SERIES_CAP).map(|i| (i, if i < SERIES_CAP / 2 + 10 { t0 } else { late })).collect();
    trim_series(&mut old, |v| *v, late);
    assert_eq!(old.len(), SERIES_CAP / 2 - 10);
}

#[tokio::test]
async fn rate_limiter_paces_after_burst() {
    let rl = RateLimiter::new(20.0, 2);
    let t0 = tokio::time::Instant::now();
    for _ in 0..4 {
        rl.acquire().await;
    }
    // Two from the burst, two more at 20/s (≥ ~100 ms).
    let took = tokio::time::Instant::now().duration_since(t0);
    assert!(took >= Duration::from_millis(90), "{took:?}");
    let unlimited = RateLimiter::new(0.0, 1);
    let t1 = tokio::time::Instant::now();
    for _ in 0..1000 {
        unlimited.acquire().await;
    }
    assert!(t1.elapsed() < Duration::from_millis(90));
}

#[test]
fn claims_are_bound_with_a_volume_and_bind_completed() {
    let claim = |v: serde_json::Value| -> core::PersistentVolumeClaim { serde_json::from_value(v).expect("claim") };
    let pending = claim(json!({"metadata": {"name": "c", "annotations": {vol::ANN_SELECTED_NODE: "n1"}}, "spec": {}}));
    assert!(!claim_fully_bound(&pending));
    assert_eq!(selected_node_of(&pending), Some("n1"));
    let half = claim(json!({"metadata": {"name": "c"}, "spec": {"volumeName": "pv-1"}}));
    assert!(!claim_fully_bound(&half));
    assert_eq!(selected_node_of(&half), None);
    let bound = claim(json!({"metadata": {"name": "c", "annotations": {vol::ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "pv-1"}}));
    assert!(claim_fully_bound(&bound));
    assert_eq!(
        stop("binding volumes: context deadline exceeded").outcome("VolumeBinding"),
        BindOutcome::Failed("running PreBind plugin \"VolumeBinding\": binding volumes: context deadline exceeded".into())
    );
}

fn rc(v: serde_json::Value) -> k8s_openapi::api::resource::v1::ResourceClaim {
    serde_json::from_value(v).expect("claim")
}

fn alloc(device: &str) -> k8s_openapi::api::resource::v1::AllocationResult {
    serde_json::from_value(json!({"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "node-0", "device": device}]}})).expect("allocation")
}

#[test]
fn claim_writes_follow_what_the_api_shows() {
    let key = "default/c";
    let fresh = rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "5"}, "spec": {}}));
    let ours = alloc("gpu-0");
    // Unallocated: the finalizer first, then the status.
    assert_eq!(claim_next(&fresh, key, "u1", Some(&ours), "p1"), ClaimNext::Finalizer);
    let protected = rc(json!({"metadata": {"name": "c", "uid": "u1", "finalizers": [CLAIM_FINALIZER]}, "spec": {}}));
    assert_eq!(claim_next(&protected, key, "u1", Some(&ours), "p1"), ClaimNext::Status);
    // Re-created under the same name, or being deleted: the bind fails.
    assert_eq!(claim_next(&protected, key, "u2", Some(&ours), "p1"), ClaimNext::Fail("claim default/c got deleted in the meantime".into()));
    let deleting = rc(json!({"metadata": {"name": "c", "uid": "u1", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}}));
    assert!(matches!(claim_next(&deleting, key, "u1", Some(&ours), "p1"), ClaimNext::Fail(_)));
    // Our allocation and reservation already there (a lost reply): done.
    let mine = rc(json!({"metadata": {"name": "c", "uid": "u1", "finalizers": [CLAIM_FINALIZER]}, "spec": {},
        "status": {"allocation": serde_json::to_value(&ours).expect("json"), "reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}]}}));
    assert_eq!(claim_next(&mine, key, "u1", Some(&ours), "p1"), ClaimNext::Done);
    // Another allocation: the pod goes back to the queue.
    assert_eq!(claim_next(&mine, key, "u1", Some(&alloc("gpu-1")), "p1"), ClaimNext::Fail("claim default/c got allocated elsewhere in the meantime".into()));
    // Allocated already: only the reservation, added to the others.
    assert_eq!(claim_next(&mine, key, "u1", None, "p2"), ClaimNext::Status);
    assert_eq!(claim_next(&mine, key, "u1", None, "p1"), ClaimNext::Done);
    assert!(matches!(claim_next(&protected, key, "u1", None, "p1"), ClaimNext::Fail(m) if m.contains("deallocated")));
    let patch = claim_status_patch(&mine, None, "q", "p2");
    assert_eq!(patch["status"]["reservedFor"].as_array().map(Vec::len), Some(2));
    assert!(patch["status"].get("allocation").is_none());
    assert_eq!(patch["metadata"]["uid"], "u1");
    let patch = claim_status_patch(&fresh, Some(&serde_json::to_value(&ours).expect("json")), "p", "p1");
    assert_eq!(patch["metadata"]["resourceVersion"], "5");
    assert_eq!(patch["status"]["allocation"]["devices"]["results"][0]["device"], "gpu-0");
    assert_eq!(patch["status"]["reservedFor"], json!([{"resource": "pods", "name": "p", "uid": "p1"}]));
}

#[test]
fn the_cache_claim_is_the_base_of_the_first_write_unless_it_has_reservations() {
    use berth_engine::cache::devices::Claim;
    let key = "default/c";
    let ours = alloc("gpu-0");
    let fresh = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "5"}, "spec": {}})));
    let seen = seen_claim(&fresh).expect("seen");
    assert_eq!(seen.metadata.resource_version.as_deref(), Some("5"));
    assert_eq!(claim_next(&seen, key, "u1", Some(&ours), "p1"), ClaimNext::Finalizer);
    // The finalizer there already (an earlier attempt): the status next,
    // under the cache's resourceVersion.
    let protected = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "6", "finalizers": [CLAIM_FINALIZER]}, "spec": {}})));
    let seen = seen_claim(&protected).expect("seen");
    assert_eq!(claim_next(&seen, key, "u1", Some(&ours), "p1"), ClaimNext::Status);
    assert_eq!(claim_status_patch(&seen, None, "p", "p1")["metadata"]["resourceVersion"], "6");
    // Allocated already and unreserved: only the reservation.
    let allocated = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "7", "finalizers": [CLAIM_FINALIZER]}, "spec": {},
        "status": {"allocation": serde_json::to_value(&ours).expect("json")}})));
    let seen = seen_claim(&allocated).expect("seen");
    assert_eq!(claim_next(&seen, key, "u1", None, "p1"), ClaimNext::Status);
    // Reserved for others (the cache drops their API group), being
    // deleted, or without a resourceVersion: read first.
    let shared = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "8"}, "spec": {},
        "status": {"allocation": serde_json::to_value(&ours).expect("json"), "reservedFor": [{"resource": "pods", "name": "q", "uid": "p2"}]}})));
    assert!(seen_claim(&shared).is_none());
    let deleting = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "9", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}})));
    assert!(seen_claim(&deleting).is_none());
    let unversioned = Claim::from_api(&rc(json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1"}, "spec": {}})));
    assert!(seen_claim(&unversioned).is_none());
}

#[test]
fn deallocation_only_of_a_claim_reserved_for_no_other_pod() {
    let d = berth_engine::framework::DeallocateClaim { namespace: "default".into(), name: "c".into(), uid: "u1".into(), pod_uid: "p1".into() };
    let allocation = serde_json::to_value(alloc("gpu-0")).expect("json");
    let claim = |uid: &str, status: serde_json::Value| rc(json!({"metadata": {"name": "c", "uid": uid, "resourceVersion": "7"}, "spec": {}, "status": status}));
    let free = claim("u1", json!({"allocation": allocation}));
    assert_eq!(dealloc_next(&free, &d), DeallocNext::Write);
    let ours = claim("u1", json!({"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}]}));
    assert_eq!(dealloc_next(&ours, &d), DeallocNext::Write);
    // Another pod holds it (alone or beside ours): no write.
    let other = claim("u1", json!({"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "q", "uid": "p2"}]}));
    assert!(matches!(dealloc_next(&other, &d), DeallocNext::Skip(m) if m.contains("another")));
    let both = claim("u1", json!({"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}, {"resource": "pods", "name": "q", "uid": "p2"}]}));
    assert!(matches!(dealloc_next(&both, &d), DeallocNext::Skip(_)));
    // Re-created, or deallocated already: nothing to do.
    assert!(matches!(dealloc_next(&claim("u2", json!({"allocation": allocation})), &d), DeallocNext::Skip(_)));
    assert!(matches!(dealloc_next(&claim("u1", json!({})), &d), DeallocNext::Skip(_)));
    let patch = dealloc_patch(&ours);
    assert_eq!(patch["metadata"], json!({"uid": "u1", "resourceVersion": "7"}));
    assert_eq!(patch["status"], json!({"allocation": null, "reservedFor": null, "devices": null}));
}

#[test]
fn request_mappings_name_the_containers_asking_for_the_resource() {
    let pod: core::Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
        "initContainers": [{"name": "init", "resources": {"limits": {"example.com/gpu": "1"}}}],
        "containers": [{"name": "a", "resources": {"requests": {"example.com/gpu": "2"}}}, {"name": "b", "resources": {"requests": {"example.com/gpu": "0m", "cpu": "1"}}},
            {"name": "c", "resources": {"requests": {"deviceclass.resource.kubernetes.io/nic": "1"}}}]}}))
    .expect("pod");
    let m = |c: &str, r: &str, q: &str| (c.to_string(), r.to_string(), q.to_string());
    let got = request_mappings(&pod, &[m("", "example.com/gpu", "container-0-request-0"), m("", "deviceclass.resource.kubernetes.io/nic", "container-0-request-1"), m("x", "y", "z")]);
    let names: Vec<(&str, &str)> = got.iter().map(|v| (v["containerName"].as_str().unwrap_or(""), v["requestName"].as_str().unwrap_or(""))).collect();
    assert_eq!(names, vec![("init", "container-0-request-0"), ("a", "container-0-request-0"), ("c", "container-0-request-1"), ("x", "z")]);
    assert_eq!(got[2]["resourceName"], "deviceclass.resource.kubernetes.io/nic");
}

#[test]
fn unreserve_removes_only_the_pods_entry() {
    let c = rc(json!({"metadata": {"name": "c", "uid": "u1"}, "spec": {}, "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}, {"resource": "pods", "name": "q", "uid": "p2"}]}}));
    assert_eq!(reserved_without(&c, "p1"), Some(Some(vec![json!({"resource": "pods", "name": "q", "uid": "p2", "apiGroup": null})])));
    assert_eq!(reserved_without(&c, "p3"), None);
    let only = rc(json!({"metadata": {"name": "c", "uid": "u1"}, "spec": {}, "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}]}}));
    assert_eq!(reserved_without(&only, "p1"), Some(None));
}

#[test]
fn unknown_outcomes_are_transport_errors_and_5xx() {
    let api = |code| kube::Error::Api(Box::new(kube::core::Status { code, ..Default::default() }));
    assert!(outcome_unknown(&api(500)));
    assert!(outcome_unknown(&api(504)));
    assert!(!outcome_unknown(&api(429)));
    assert!(!outcome_unknown(&api(409)));
    assert!(!outcome_unknown(&api(422)));
}
