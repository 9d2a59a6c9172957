//! The scheduling queue, as upstream's PriorityQueue runs it. Three structures:
//!
//! - **activeQ**: pods ready to be tried, ordered by priority (higher first),
//!   then by the time they entered the queue (earlier first).
//! - **backoffQ**: pods that failed and wait out their backoff
//!   (`podInitialBackoffSeconds` doubling per attempt up to `podMaxBackoffSeconds`)
//!   before going back to activeQ.
//! - **unschedulable pool**: pods no node could take. A cluster event that could
//!   make one schedulable (one of the events its rejecting plugins declared)
//!   moves it to backoffQ (or activeQ when its backoff is over); none stays
//!   longer than five minutes. Gated pods (PreEnqueue failed) wait here too:
//!   an update of the pod releases them, and so does one of the gating
//!   plugin's events once recorded ([`SchedulingQueue::set_gate_events`]):
//!   the caller then runs PreEnqueue again for each pod
//!   [`SchedulingQueue::gated_for`] names (upstream's GatingPluginEvents).
//!
//! A pod that fails while a move request happened during its cycle goes to
//! backoffQ rather than the pool, so that no event is lost. Time is passed in,
//! so the queue is tested without sleeping.
//!
//! The queue holds the one record of each pending pod (upstream's
//! QueuedPodInfo): the compiled pod, a digest of the last object the watch
//! delivered (for change detection, see [`Seen`]), attempts, when it was first seen and which plugins
//! rejected it last. Every update of a pending pod, status-only ones included,
//! goes through here: a status-only update replaces the pod in place (it keeps
//! its nomination, for instance) without moving it.
//!
//! Pod groups (gang scheduling) are a view over these records: an index from
//! group to member uids. Popping one member takes the group's other waiting
//! members with it ([`SchedulingQueue::take_group`]), so the group cycle sees
//! them all; the caller then moves each to the pool or backoffQ, together.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::framework::{Events, QueuedPod};
use berth_model::pod::GroupRef;
use berth_model::PodInfo;

/// Upstream's `podMaxInUnschedulablePodsDuration`.
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(300);

/// Where a pod waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// activeQ.
    Active,
    /// backoffQ.
    Backoff,
    /// The unschedulable pool.
    Unschedulable,
    /// Gated by PreEnqueue.
    Gated,
    /// Popped and being scheduled.
    InFlight,
}

#[derive(Clone, Debug)]
struct Entry {
    qp: QueuedPod,
    place: Place,
    seq: u64,
    /// activeQ key when active.
    active_key: (Reverse<i32>, i64, u64),
    /// backoff expiry.
    backoff_until: Option<Instant>,
    /// When it entered the pool.
    since: Instant,
    /// Events that could make it schedulable.
    events: Events,
    /// When the pod was first seen pending (for the scheduling SLI).
    first_seen: Instant,
    /// What the queue keeps of the last object the watch delivered.
    seen: Option<Seen>,
    /// The profile and plugins that rejected it last.
    rejected: Option<Rejection>,
}

/// The profile and plugins that rejected a pod in its last attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The profile that tried it.
    pub profile: String,
    /// The plugins that found no node for it.
    pub plugins: Vec<&'static str>,
}

/// How a new object of a pending pod compares with the one the queue holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The queue does not hold the pod.
    New,
    /// Something the scheduler reads changed (upstream's `isPodUpdated`).
    Updated,
    /// Only the status (or bookkeeping metadata) changed.
    StatusOnly,
}

/// Upstream's `isPodUpdated`, without copying: true when anything but
/// resourceVersion, generation, managedFields, finalizers and the status
/// (resourceClaimStatuses aside) differs.
pub fn is_pod_updated(old: &core::Pod, new: &core::Pod) -> bool {
    let (a, b) = (&old.metadata, &new.metadata);
    let claims = |p: &core::Pod| p.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref()).filter(|v| !v.is_empty()).cloned();
    a.name != b.name
        || a.namespace != b.namespace
        || a.uid != b.uid
        || a.labels != b.labels
        || a.annotations != b.annotations
        || a.owner_references != b.owner_references
        || a.deletion_timestamp != b.deletion_timestamp
        || a.deletion_grace_period_seconds != b.deletion_grace_period_seconds
        || a.generate_name != b.generate_name
        || a.creation_timestamp != b.creation_timestamp
        || old.spec != new.spec
        || claims(old) != claims(new)
}

/// What the queue keeps of a waiting pod's object: a digest of what
/// [`is_pod_updated`] compares, and since when the pod is unschedulable (the
/// PodScheduled=False condition's lastTransitionTime, kept on the next
/// report). A pod's object is kilobytes; this is a few bytes, and a backlog of
/// tens of thousands of pending pods holds one each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// None when the object could not be serialized: it then compares as updated.
    digest: Option<u64>,
    unschedulable_since: Option<Time>,
}


impl Seen {
    fn of(object: &core::Pod, keys: &RandomState) -> Seen {
        let m = &object.metadata;
        let claims = object.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref()).filter(|v| !v.is_empty());
        // The fields `is_pod_updated` compares, in one JSON array: equal
        // objects give equal bytes, and the array's structure keeps one
        // field's text from passing for another's.
        let compared = (
            (&m.name, &m.namespace, &m.uid, &m.labels, &m.annotations, &m.owner_references),
            (&m.deletion_timestamp, &m.deletion_grace_period_seconds, &m.generate_name, &m.creation_timestamp),
            &object.spec,
            claims,
        );
        // Serialized whole, then hashed in one call: a hasher fed as the
        // serializer writes pays its per-call cost on every quote and comma.
        let digest = serde_json::to_vec(&compared).ok().map(|bytes| keys.hash_one(&bytes));
        let unschedulable_since = object
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False"))
            .and_then(|c| c.last_transition_time.clone());
        Seen { digest, unschedulable_since }
    }
}

/// Counts per structure, for the `scheduler_pending_pods{queue}` gauge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    /// activeQ.
    pub active: usize,
    /// backoffQ.
    pub backoff: usize,
    /// The unschedulable pool.
    pub unschedulable: usize,
    /// Gated pods.
    pub gated: usize,
}

/// The scheduling queue.
#[derive(Debug)]
pub struct SchedulingQueue {
    entries: HashMap<String, Entry>,
    active: BTreeSet<(Reverse<i32>, i64, u64, String)>,
    backoff: BTreeSet<(Instant, u64, String)>,
    seq: u64,
    initial_backoff: Duration,
    max_backoff: Duration,
    /// Bumped on every move request; a pod popped before it goes to backoffQ on failure.
    move_cycle: u64,
    popped_at: HashMap<String, u64>,
    epoch: Instant,
    /// Pod group (namespace, group) → uids of its queued members.
    groups: HashMap<(String, GroupRef), BTreeSet<String>>,
    /// The keys of [`Seen`]'s digests (random per process).
    digest_keys: RandomState,
    /// How many entries wait in the unschedulable pool, so that
    /// [`SchedulingQueue::next_deadline`], asked on every turn of the loop,
    /// scans the entries only when some do.
    pool_len: usize,
}

/// A map that grew for a burst of pending pods gives its room back once the
/// burst has drained (a hash map never shrinks by itself: 50,000 pods created
/// at once left 15 MB of empty queue table behind). Shrinking only when less
/// than an eighth is used keeps the cost amortized over the removals.
fn shrink_sparse<K: Eq + std::hash::Hash, V>(m: &mut HashMap<K, V>) {
    if m.capacity() > 1024 && m.len() < m.capacity() / 8 {
        m.shrink_to(m.len() * 2);
    }
}

fn group_key(p: &PodInfo) -> Option<(String, GroupRef)> {
    p.group.clone().map(|g| (p.namespace.clone(), g))
}

impl SchedulingQueue {
    /// An empty queue with these backoff bounds.
    pub fn new(initial_backoff: Duration, max_backoff: Duration, now: Instant) -> Self {
        SchedulingQueue {
            entries: HashMap::new(),
            active: BTreeSet::new(),
            backoff: BTreeSet::new(),
            seq: 0,
            initial_backoff,
            max_backoff,
            move_cycle: 0,
            popped_at: HashMap::new(),
            epoch: now,
            groups: HashMap::new(),
            digest_keys: RandomState::new(),
            pool_len: 0,
        }
    }

    fn ms(&self, t: Instant) -> i64 {
        t.saturating_duration_since(self.epoch).as_millis() as i64
    }

    /// Backoff after `attempts` failed attempts.
    pub fn backoff_for(&self, attempts: u32) -> Duration {
        let mut d = self.initial_backoff;
        for _ in 1..attempts.max(1) {
            d = d.saturating_mul(2);
            if d >= self.max_backoff {
                return self.max_backoff;
            }
        }
        d.min(self.max_backoff)
    }

    fn unlink(&mut self, uid: &str) -> Option<Entry> {
        let e = self.entries.remove(uid)?;
        match e.place {
            Place::Unschedulable => self.pool_len -= 1,
            Place::Active => {
                let k = e.active_key;
                self.active.remove(&(k.0, k.1, k.2, uid.to_string()));
            }
            Place::Backoff => {
                if let Some(t) = e.backoff_until {
                    self.backoff.remove(&(t, e.seq, uid.to_string()));
                }
            }
            _ => {}
        }
        Some(e)
    }

    fn put(&mut self, mut e: Entry, place: Place, now: Instant) {
        let uid = e.qp.pod.uid.clone();
        e.place = place;
        match place {
            Place::Active => {
                e.active_key = (Reverse(e.qp.pod.priority), e.qp.timestamp_ms, e.seq);
                self.active.insert((e.active_key.0, e.active_key.1, e.active_key.2, uid.clone()));
            }
            Place::Backoff => {
                let t = e.backoff_until.unwrap_or(now);
                self.backoff.insert((t, e.seq, uid.clone()));
            }
            Place::Unschedulable | Place::Gated => e.since = now,
            Place::InFlight => {}
        }
        if place == Place::Unschedulable {
            self.pool_len += 1;
        }
        if self.entries.insert(uid, e).is_some_and(|old| old.place == Place::Unschedulable) {
            self.pool_len -= 1;
        }
    }

    /// A new pending pod. `gated`: PreEnqueue refused it.
    pub fn add(&mut self, pod: Arc<PodInfo>, gated: bool, now: Instant) {
        if let Some(e) = self.entries.get_mut(&pod.uid) {
            if e.place == Place::InFlight {
                // Updated while being scheduled: keep the newer object for the retry.
                e.qp.pod = pod;
                return;
            }
            return self.update(pod, gated, now);
        }
        self.seq += 1;
        self.index_group(&pod, true);
        let e = Entry {
            qp: QueuedPod { pod, timestamp_ms: self.ms(now), attempts: 0 },
            place: Place::Active,
            seq: self.seq,
            active_key: (Reverse(0), 0, 0),
            backoff_until: None,
            since: now,
            events: Events::ALL,
            first_seen: now,
            seen: None,
            rejected: None,
        };
        let mut e = e;
        if gated {
            // Only an update of the pod releases it until its gate's events are set.
            e.events = Events::default();
        }
        self.put(e, if gated { Place::Gated } else { Place::Active }, now);
    }

    /// An update of a pending pod: it replaces the queued one; a pod waiting
    /// in the pool (or gated) is moved, since the change may make it schedulable.
    pub fn update(&mut self, pod: Arc<PodInfo>, gated: bool, now: Instant) {
        let Some(mut e) = self.unlink(&pod.uid) else {
            return self.add(pod, gated, now);
        };
        let place = e.place;
        if e.qp.pod.group != pod.group {
            let old = e.qp.pod.clone();
            self.index_group(&old, false);
            self.index_group(&pod, true);
        }
        e.qp.pod = pod;
        let to = match place {
            Place::InFlight => Place::InFlight,
            _ if gated => Place::Gated,
            Place::Active | Place::Gated => Place::Active,
            Place::Backoff | Place::Unschedulable => self.after_backoff(&mut e, now),
        };
        if to == Place::Gated && place != Place::Gated {
            e.events = Events::default();
        }
        self.put(e, to, now);
    }

    fn after_backoff(&self, e: &mut Entry, now: Instant) -> Place {
        let until = e.backoff_until.unwrap_or(now);
        if until > now {
            Place::Backoff
        } else {
            Place::Active
        }
    }

    /// A pod left (deleted, or bound by someone else).
    pub fn delete(&mut self, uid: &str) {
        if let Some(e) = self.unlink(uid) {
            self.index_group(&e.qp.pod, false);
        }
        self.popped_at.remove(uid);
        shrink_sparse(&mut self.entries);
        shrink_sparse(&mut self.popped_at);
    }

    fn index_group(&mut self, pod: &PodInfo, add: bool) {
        let Some(k) = group_key(pod) else { return };
        if add {
            self.groups.entry(k).or_default().insert(pod.uid.clone());
        } else if let Some(set) = self.groups.get_mut(&k) {
            set.remove(&pod.uid);
            if set.is_empty() {
                self.groups.remove(&k);
            }
        }
    }

    /// After popping `popped`, a member of a pod group: takes the group's other
    /// members that wait in activeQ, backoffQ or the pool (not gated ones, not
    /// those already in flight), marks them in flight like `pop` does, and
    /// returns them in queue order (priority, then arrival). Empty for a pod
    /// of no group.
    pub fn take_group(&mut self, popped: &PodInfo, now: Instant) -> Vec<QueuedPod> {
        let Some(k) = group_key(popped) else { return vec![] };
        let uids: Vec<String> = self.groups.get(&k).map(|s| s.iter().filter(|u| **u != popped.uid).cloned().collect()).unwrap_or_default();
        let mut out: Vec<(Reverse<i32>, i64, u64, QueuedPod)> = Vec::new();
        for u in uids {
            if !matches!(self.place(&u), Some(Place::Active | Place::Backoff | Place::Unschedulable)) {
                continue;
            }
            let Some(mut e) = self.unlink(&u) else { continue };
            e.qp.attempts += 1;
            let key = (Reverse(e.qp.pod.priority), e.qp.timestamp_ms, e.seq);
            let qp = e.qp.clone();
            self.put(e, Place::InFlight, now);
            self.popped_at.insert(u, self.move_cycle);
            out.push((key.0, key.1, key.2, qp));
        }
        out.sort_by_key(|x| (x.0, x.1, x.2));
        out.into_iter().map(|x| x.3).collect()
    }

    /// The next pod to schedule (after moving expired backoffs in).
    pub fn pop(&mut self, now: Instant) -> Option<QueuedPod> {
        self.flush_backoff(now);
        let first = self.active.iter().next().cloned()?;
        self.active.remove(&first);
        let uid = first.3;
        let e = self.entries.get_mut(&uid)?;
        e.place = Place::InFlight;
        e.qp.attempts += 1;
        self.popped_at.insert(uid, self.move_cycle);
        Some(e.qp.clone())
    }

    /// The popped pod was bound (or given up): it leaves the queue.
    pub fn done(&mut self, uid: &str) {
        self.delete(uid);
    }

    /// The popped pod did not fit: it waits for one of `events` (or five
    /// minutes) in the pool, or in backoffQ if a move request came meanwhile.
    pub fn unschedulable(&mut self, uid: &str, events: Events, now: Instant) {
        let popped = self.popped_at.remove(uid);
        let Some(mut e) = self.unlink(uid) else { return };
        e.events = events;
        e.backoff_until = Some(now + self.backoff_for(e.qp.attempts));
        let moved_meanwhile = popped.is_some_and(|c| c < self.move_cycle);
        let to = if moved_meanwhile { Place::Backoff } else { Place::Unschedulable };
        self.put(e, to, now);
    }

    /// The popped pod failed with an error (or its bind failed): backoffQ.
    pub fn error(&mut self, uid: &str, now: Instant) {
        self.popped_at.remove(uid);
        let Some(mut e) = self.unlink(uid) else { return };
        e.backoff_until = Some(now + self.backoff_for(e.qp.attempts));
        self.put(e, Place::Backoff, now);
    }

    /// A gated pod waits for `events` (those of the plugin whose PreEnqueue
    /// refused it); no-op for a pod that is not gated.
    pub fn set_gate_events(&mut self, uid: &str, events: Events) {
        if let Some(e) = self.entries.get_mut(uid).filter(|e| e.place == Place::Gated) {
            e.events = events;
        }
    }

    /// The gated pods waiting for one of `event` ([`Self::set_gate_events`]).
    /// The caller runs PreEnqueue again for each and hands the verdict to
    /// [`Self::update`], which lets a pod that passes into activeQ and keeps
    /// the others gated.
    pub fn gated_for(&self, event: Events) -> Vec<Arc<PodInfo>> {
        self.entries.values().filter(|e| e.place == Place::Gated && e.events.intersects(event)).map(|e| e.qp.pod.clone()).collect()
    }

    /// A cluster event: pool pods whose rejectors care about it move on.
    pub fn on_event(&mut self, event: Events, now: Instant) {
        self.move_cycle += 1;
        let uids: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| e.place == Place::Unschedulable && e.events.intersects(event))
            .map(|(u, _)| u.clone())
            .collect();
        for u in uids {
            if let Some(mut e) = self.unlink(&u) {
                let to = self.after_backoff(&mut e, now);
                self.put(e, to, now);
            }
        }
    }

    fn flush_backoff(&mut self, now: Instant) {
        while let Some(first) = self.backoff.iter().next().cloned() {
            if first.0 > now {
                break;
            }
            self.backoff.remove(&first);
            if let Some(e) = self.entries.remove(&first.2) {
                let mut e = e;
                e.place = Place::Backoff; // already unlinked from the set above
                self.put(e, Place::Active, now);
            }
        }
    }

    /// Periodic work: backoffs that expired go active; pool pods older than
    /// five minutes are retried.
    pub fn tick(&mut self, now: Instant) {
        self.flush_backoff(now);
        let stale: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| e.place == Place::Unschedulable && now.saturating_duration_since(e.since) >= MAX_IN_UNSCHEDULABLE)
            .map(|(u, _)| u.clone())
            .collect();
        for u in stale {
            if let Some(mut e) = self.unlink(&u) {
                let to = self.after_backoff(&mut e, now);
                self.put(e, to, now);
            }
        }
    }

    /// When the queue next needs a tick (earliest backoff expiry or pool deadline).
    pub fn next_deadline(&self) -> Option<Instant> {
        let b = self.backoff.iter().next().map(|x| x.0);
        let pool = self.entries.values().filter(|e| e.place == Place::Unschedulable);
        let u = if self.pool_len == 0 { None } else { pool.map(|e| e.since + MAX_IN_UNSCHEDULABLE).min() };
        match (b, u) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Where a pod is.
    pub fn place(&self, uid: &str) -> Option<Place> {
        self.entries.get(uid).map(|e| e.place)
    }

    /// The queued pod, wherever it waits.
    pub fn get(&self, uid: &str) -> Option<&QueuedPod> {
        self.entries.get(uid).map(|e| &e.qp)
    }

    /// What the queue would keep of `object` (compute it once per watch event).
    pub fn seen(&self, object: &core::Pod) -> Seen {
        Seen::of(object, &self.digest_keys)
    }

    /// How an object, as [`SchedulingQueue::seen`] gives it, compares with the
    /// pod's record (upstream's `isPodUpdated`).
    pub fn classify(&self, uid: &str, seen: &Seen) -> Change {
        match self.entries.get(uid) {
            None => Change::New,
            Some(e) => match &e.seen {
                Some(old) if old.digest.is_some() && old.digest == seen.digest => Change::StatusOnly,
                _ => Change::Updated,
            },
        }
    }

    /// A status-only update: the record takes the newer pod and object where
    /// it waits (no move, no requeue).
    pub fn refresh(&mut self, pod: Arc<PodInfo>, seen: Seen) {
        if let Some(e) = self.entries.get_mut(&pod.uid) {
            // The activeQ key reads the priority (spec), which a status update cannot change.
            e.qp.pod = pod;
            e.seen = Some(seen);
        }
    }

    /// Keeps what matters of the last object seen of a queued pod.
    pub fn set_seen(&mut self, uid: &str, seen: Seen) {
        if let Some(e) = self.entries.get_mut(uid) {
            e.seen = Some(seen);
        }
    }

    /// Since when the last object seen of a queued pod says it is
    /// unschedulable (its PodScheduled=False condition's lastTransitionTime).
    pub fn unschedulable_since(&self, uid: &str) -> Option<Time> {
        self.entries.get(uid)?.seen.as_ref()?.unschedulable_since.clone()
    }

    /// Records the node preemption nominated the pod to, in the record itself,
    /// so that its next attempt sees it before the watch brings the status back.
    pub fn set_nominated(&mut self, uid: &str, node: Option<String>) {
        if let Some(e) = self.entries.get_mut(uid)
            && e.qp.pod.nominated_node != node
        {
            let mut p = (*e.qp.pod).clone();
            p.nominated_node = node;
            e.qp.pod = Arc::new(p);
        }
    }

    /// Records which profile and plugins rejected the pod in its last attempt.
    pub fn set_rejected(&mut self, uid: &str, rejection: Option<Rejection>) {
        if let Some(e) = self.entries.get_mut(uid) {
            e.rejected = rejection;
        }
    }

    /// Rejections of the pods in the unschedulable pool.
    pub fn pool_rejections(&self) -> impl Iterator<Item = &Rejection> {
        self.entries.values().filter(|e| e.place == Place::Unschedulable).filter_map(|e| e.rejected.as_ref())
    }

    /// When the pod was first seen pending.
    pub fn first_seen(&self, uid: &str) -> Option<Instant> {
        self.entries.get(uid).map(|e| e.first_seen)
    }

    /// Every queued pod (in flight included), in no particular order.
    pub fn pods(&self) -> impl Iterator<Item = &Arc<PodInfo>> {
        self.entries.values().map(|e| &e.qp.pod)
    }

    /// Sizes per structure.
    pub fn sizes(&self) -> Sizes {
        let mut s = Sizes::default();
        for e in self.entries.values() {
            match e.place {
                Place::Active => s.active += 1,
                Place::Backoff => s.backoff += 1,
                Place::Unschedulable => s.unschedulable += 1,
                Place::Gated => s.gated += 1,
                Place::InFlight => {}
            }
        }
        s
    }

    /// Number of pods held, in flight included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Is the queue empty?
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests;
