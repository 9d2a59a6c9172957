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
    assert_eq!(sq.next_deadline(), Some(t0 + MAX_IN_UNSCHEDULABLE));
    sq.tick(t0 + Duration::from_secs(300));
    assert_eq!(sq.place(&p.pod.uid), Some(Place::Active));
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
