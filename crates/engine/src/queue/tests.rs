use super::*;
use crate::testing::pod;

fn q(now: Instant) -> SchedulingQueue {
    SchedulingQueue::new(Duration::from_secs(1), Duration::from_secs(10), now)
}

#[test]
fn priority_then_age() {
    let t0 = Instant::now();
    let mut sq = q(t0);
    sq.add(pod("low").priority(1).info(), false, t0);
    sq.add(pod("high").priority(10).info(), false, t0 + Duration::from_millis(5));
    sq.add(pod("low2").priority(1).info(), false, t0 + Duration::from_millis(10));
    let order: Vec<String> = std::iter::from_fn(|| sq.pop(t0 + Duration::from_secs(1)).map(|p| p.pod.name.clone())).collect();
    assert_eq!(order, vec!["high", "low", "low2"]);
}

#[test]
fn backoff_doubles_and_caps() {
    let t0 = Instant::now();
    let sq = q(t0);
    let got: Vec<u64> = (1..=6).map(|a| sq.backoff_for(a).as_secs()).collect();
    assert_eq!(got, vec![1, 2, 4, 8, 10, 10]);
}

#[test]
fn unschedulable_waits_for_a_matching_event() {
    let t0 = Instant::now();
    let mut sq = q(t0);
    sq.add(pod("p").info(), false, t0);
    let p = sq.pop(t0).expect("pod");
    sq.unschedulable(&p.pod.uid, Events::NODE_ADD, t0);
    assert_eq!(sq.place(&p.pod.uid), Some(Place::Unschedulable));
    // An event its rejector does not care about leaves it there.
    sq.on_event(Events::POD_ADD, t0 + Duration::from_secs(2));
    assert_eq!(sq.place(&p.pod.uid), Some(Place::Unschedulable));
    // A node added: backoff (1s) is over, so straight to activeQ.
    sq.on_event(Events::NODE_ADD, t0 + Duration::from_secs(2));
    assert_eq!(sq.place(&p.pod.uid), Some(Place::Active));
}

#[test]
fn event_during_cycle_sends_failure_to_backoff() {
    let t0 = Instant::now();
    let mut sq = q(t0);
    sq.add(pod("p").info(), false, t0);
    let p = sq.pop(t0).expect("pod");
    sq.on_event(Events::NODE_ADD, t0);
    sq.unschedulable(&p.pod.uid, Events::NODE_ADD, t0);
    assert_eq!(sq.place(&p.pod.uid), Some(Place::Backoff));
    assert!(sq.pop(t0 + Duration::from_millis(500)).is_none());
    assert!(sq.pop(t0 + Duration::from_millis(1001)).is_some());
}

#[test]
fn five_minute_flush() {
    let t0 = Instant::now();
    let mut sq = q(t0);
    sq.add(pod("p").info(), false, t0);
    let p = sq.pop(t0).expect("pod");
    sq.unschedulable(&p.pod.uid, Events::NODE_ADD, t0);
    sq.tick(t0 + Duration::from_secs(299));
    assert_eq!(sq.place(&p.pod.uid), Some(Place::Unschedulable));
    assert_eq!((sq.pool_len, sq.sizes().unschedulable), (1, 1));
    assert_eq!(sq.next_deadline(), Some(t0 + MAX_IN_UNSCHEDULABLE));
    sq.tick(t0 + Duration::from_secs(300));
    assert_eq!(sq.place(&p.pod.uid), Some(Place::Active));
    // The pool is empty again, and its count says so.
    assert_eq!((sq.pool_len, sq.sizes().unschedulable), (0, 0));
    assert_eq!(sq.next_deadline(), None);
    let p = sq.pop(t0 + Duration::from_secs(300)).expect("pod");
    sq.unschedulable(&p.pod.uid, Events::NODE_ADD, t0 + Duration::from_secs(300));
    sq.delete(&p.pod.uid);
    assert_eq!((sq.pool_len, sq.sizes().unschedulable), (0, 0));
}

#[test]
fn gates_updates_and_deletes() {
    let t0 = Instant::now();
    let mut sq = q(t0);
    sq.add(pod("g").gate("wait").info(), true, t0);
    assert_eq!(sq.place("uid-g"), Some(Place::Gated));
    assert!(sq.pop(t0).is_none());
    sq.update(pod("g").info(), false, t0);
    assert_eq!(sq.place("uid-g"), Some(Place::Active));
    sq.update(pod("g").label("a", "b").info(), false, t0);
    assert_eq!(sq.get("uid-g").map(|p| p.pod.labels.len()), Some(1));
    assert_eq!(sq.len(), 1);
    sq.delete("uid-g");
    assert!(sq.is_empty());
    assert_eq!(sq.sizes(), Sizes::default());
}

#[test]
fn errors_back_off() {
    let t0 = Instant::now();
    let mut sq = q(t0);
    sq.add(pod("p").info(), false, t0);
    let p = sq.pop(t0).expect("pod");
    sq.error(&p.pod.uid, t0);
    assert_eq!(sq.sizes().backoff, 1);
    let again = sq.pop(t0 + Duration::from_secs(1)).expect("retried after 1s");
    assert_eq!(again.attempts, 2);
}

fn object(name: &str, extra: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
    let mut v = serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "resourceVersion": "1", "labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    });
    if let (Some(a), Some(b)) = (v.as_object_mut(), extra.as_object()) {
        for (k, x) in b {
            match (a.get_mut(k), x) {
                (Some(serde_json::Value::Object(inner)), serde_json::Value::Object(add)) => inner.extend(add.clone()),
                _ => {
                    a.insert(k.clone(), x.clone());
                }
            }
        }
    }
    serde_json::from_value(v).expect("pod")
}

#[test]
fn one_record_status_only_updates_refresh_in_place() {
    let t0 = Instant::now();
    let mut sq = q(t0);
    let o = object("p", serde_json::json!({}));
    assert_eq!(sq.classify("uid-p", &sq.seen(&o)), Change::New);
    sq.add(pod("p").info(), false, t0);
    sq.set_seen("uid-p", sq.seen(&o));
    let popped = sq.pop(t0).expect("popped");
    assert_eq!(popped.attempts, 1);
    sq.unschedulable("uid-p", Events::NODE_ADD, t0);
    // Status-only: a new resourceVersion, a condition and a nomination.
    let status_only = object("p", serde_json::json!({
        "metadata": {"resourceVersion": "2", "managedFields": []},
        "status": {"nominatedNodeName": "n1", "conditions": [{"type": "PodScheduled", "status": "False"}]},
    }));
    assert_eq!(sq.classify("uid-p", &sq.seen(&status_only)), Change::StatusOnly);
    sq.refresh(pod("p").nominated("n1").info(), sq.seen(&status_only));
    assert_eq!(sq.place("uid-p"), Some(Place::Unschedulable), "a status-only update does not move the pod");
    assert_eq!(sq.get("uid-p").and_then(|q| q.pod.nominated_node.clone()).as_deref(), Some("n1"), "the record holds the newer pod");
    assert_eq!(sq.get("uid-p").map(|q| q.attempts), Some(1));
    assert_eq!(sq.first_seen("uid-p"), Some(t0));
    // Labels (or spec, annotations) changing is an update.
    let relabeled = object("p", serde_json::json!({"metadata": {"labels": {"app": "b"}}}));
    assert_eq!(sq.classify("uid-p", &sq.seen(&relabeled)), Change::Updated);
    let respec = object("p", serde_json::json!({"spec": {"containers": [{"name": "c", "image": "j"}]}}));
    assert_eq!(sq.classify("uid-p", &sq.seen(&respec)), Change::Updated);
}

#[test]
fn the_queue_keeps_a_digest_and_the_unschedulable_time_of_the_object() {
    let t0 = Instant::now();
    let mut sq = q(t0);
    sq.add(pod("p").info(), false, t0);
    let full = object("p", serde_json::json!({
        "metadata": {"managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "PodScheduled", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ]},
    }));
    sq.set_seen("uid-p", sq.seen(&full));
    let since = sq.unschedulable_since("uid-p").expect("the condition's time is kept");
    assert_eq!(serde_json::to_value(&since).unwrap(), serde_json::json!("2026-01-01T00:00:00Z"));
    // Comparisons against what is kept answer as `is_pod_updated` against the whole object.
    assert_eq!(sq.classify("uid-p", &sq.seen(&full)), Change::StatusOnly);
    let variants = [
        serde_json::json!({"metadata": {"labels": {"app": "b"}}}),
        serde_json::json!({"metadata": {"annotations": {"a": "b"}}}),
        serde_json::json!({"metadata": {"resourceVersion": "9", "generation": 3}}),
        serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        serde_json::json!({"metadata": {"finalizers": ["x"]}}),
        serde_json::json!({"spec": {"priority": 5}}),
        serde_json::json!({"spec": {"nodeSelector": {"z": "a"}}}),
        serde_json::json!({"status": {"phase": "Running", "nominatedNodeName": "n9"}}),
        serde_json::json!({"status": {"resourceClaimStatuses": [{"name": "c", "resourceClaimName": "rc"}]}}),
        serde_json::json!({"status": {"resourceClaimStatuses": []}}),
    ];
    for v in variants {
        let other = object("p", v.clone());
        let want = if is_pod_updated(&full, &other) { Change::Updated } else { Change::StatusOnly };
        assert_eq!(sq.classify("uid-p", &sq.seen(&other)), want, "{v}");
    }
    // No condition, or a True one: no time.
    sq.set_seen("uid-p", sq.seen(&object("p", serde_json::json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}))));
    assert_eq!(sq.unschedulable_since("uid-p"), None);
}

#[test]
fn nomination_recorded_and_rejections_counted_from_the_pool() {
    let t0 = Instant::now();
    let mut sq = q(t0);
    sq.add(pod("p").info(), false, t0);
    sq.add(pod("r").info(), false, t0);
    sq.pop(t0);
    sq.pop(t0);
    sq.set_nominated("uid-p", Some("n2".into()));
    sq.set_rejected("uid-p", Some(Rejection { profile: "x".into(), plugins: vec!["NodeResourcesFit"] }));
    sq.set_rejected("uid-r", Some(Rejection { profile: "x".into(), plugins: vec!["TaintToleration"] }));
    sq.unschedulable("uid-p", Events::ALL, t0);
    sq.error("uid-r", t0);
    assert_eq!(sq.get("uid-p").and_then(|q| q.pod.nominated_node.clone()).as_deref(), Some("n2"));
    let pool: Vec<_> = sq.pool_rejections().flat_map(|r| r.plugins.clone()).collect();
    assert_eq!(pool, vec!["NodeResourcesFit"], "only pool pods count");
    assert_eq!(sq.pods().count(), 2);
}

#[test]
fn a_group_is_popped_and_parked_together() {
    use berth_model::pod::POD_GROUP_LABEL;
    let t0 = Instant::now();
    let mut sq = q(t0);
    sq.add(pod("a").label(POD_GROUP_LABEL, "g").info(), false, t0);
    sq.add(pod("solo").info(), false, t0 + Duration::from_millis(1));
    sq.add(pod("b").label(POD_GROUP_LABEL, "g").info(), false, t0 + Duration::from_millis(2));
    sq.add(pod("c").label(POD_GROUP_LABEL, "g").priority(5).info(), false, t0 + Duration::from_millis(3));
    sq.add(pod("other").label(POD_GROUP_LABEL, "h").info(), false, t0 + Duration::from_millis(4));
    // The highest priority member comes first, the rest of its group with it, in queue order.
    let first = sq.pop(t0).expect("pod");
    assert_eq!(first.pod.name, "c");
    let rest: Vec<String> = sq.take_group(&first.pod, t0).iter().map(|q| q.pod.name.clone()).collect();
    assert_eq!(rest, vec!["a", "b"]);
    for n in ["a", "b", "c"] {
        assert_eq!(sq.place(&format!("uid-{n}")), Some(Place::InFlight));
    }
    // The group does not fit: all three wait in the pool, and move together.
    for n in ["a", "b", "c"] {
        sq.unschedulable(&format!("uid-{n}"), Events::NODE_ADD, t0);
    }
    assert_eq!(sq.pop(t0).map(|q| q.pod.name.clone()), Some("solo".into()));
    sq.on_event(Events::NODE_ADD, t0 + Duration::from_secs(5));
    let again = sq.pop(t0 + Duration::from_secs(5)).expect("pod");
    assert_eq!(sq.take_group(&again.pod, t0 + Duration::from_secs(5)).len(), 2);
    // A member that leaves leaves the index.
    sq.delete("uid-a");
    assert_eq!(sq.take_group(&again.pod, t0).len(), 0);
    assert!(sq.take_group(&pod("solo").info(), t0).is_empty());
}

#[test]
fn a_drained_burst_gives_its_room_back() {
    let t0 = Instant::now();
    let mut sq = q(t0);
    for i in 0..20_000 {
        sq.add(pod(&format!("p{i}")).info(), false, t0);
    }
    for _ in 0..19_990 {
        let p = sq.pop(t0).expect("pod");
        sq.done(&p.pod.uid);
    }
    assert_eq!(sq.len(), 10);
    assert!(sq.entries.capacity() < 1_000 && sq.popped_at.capacity() < 1_000, "{} {}", sq.entries.capacity(), sq.popped_at.capacity());
    // What is left is still there, in order.
    let left: Vec<String> = std::iter::from_fn(|| sq.pop(t0).map(|p| p.pod.name.clone())).collect();
    assert_eq!(left.len(), 10);
}

#[test]
fn a_gated_pod_waits_for_its_gate_events() {
    let t0 = Instant::now();
    let mut sq = q(t0);
    let p = pod("p").info();
    sq.add(p.clone(), true, t0);
    assert!(sq.gated_for(Events::RESOURCE_CLAIM).is_empty(), "no gate events recorded yet");
    sq.set_gate_events(&p.uid, Events::RESOURCE_CLAIM.or(Events::POD_SELF));
    assert!(sq.gated_for(Events::NODE_ADD).is_empty());
    let waiting = sq.gated_for(Events::RESOURCE_CLAIM);
    assert_eq!(waiting.len(), 1);
    // PreEnqueue refuses it again: still gated, still waiting for claims.
    sq.update(waiting[0].clone(), true, t0);
    assert_eq!(sq.place(&p.uid), Some(Place::Gated));
    assert_eq!(sq.gated_for(Events::RESOURCE_CLAIM).len(), 1);
    // Now it passes: activeQ.
    sq.update(p.clone(), false, t0);
    assert_eq!(sq.place(&p.uid), Some(Place::Active));
    assert!(sq.gated_for(Events::RESOURCE_CLAIM).is_empty());
    // set_gate_events leaves a pod that is not gated alone.
    sq.set_gate_events(&p.uid, Events::ALL);
    assert_eq!(sq.place(&p.uid), Some(Place::Active));
}
