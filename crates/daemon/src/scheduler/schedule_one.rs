//! One scheduling cycle and its binding (upstream's `schedule_one.go`): pop
//! a pod, schedule it (or its whole group), assume it, then hand PreBind's
//! API work and the bind to the writer, off the loop; the result comes back
//! as a [`BindResult`] and is applied here.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::time::Instant;

use berth_engine::framework::group::{preempt_for_group, schedule_group, GroupHost, GroupOutcome};
use berth_engine::framework::{ApiWrite, AssumeView, Assumed, CycleOptions, CycleState, Events, Framework, QueuedPod, ScheduledOne};
use berth_engine::queue::Rejection;
use berth_model::PodInfo;

use super::Loop;
use crate::writer::{seen_claim, BindOutcome, BindResult};

/// The daemon's side of the group cycle: its cache and one profile.
struct LoopHost<'a> {
    lp: &'a mut Loop,
    fi: usize,
}

impl GroupHost for LoopHost<'_> {
    fn framework(&self) -> &Framework {
        &self.lp.frameworks[self.fi]
    }
    fn snapshot(&self) -> &berth_engine::cache::Snapshot {
        self.lp.cache.snapshot()
    }
    fn snapshot_mut(&mut self) -> &mut berth_engine::cache::Snapshot {
        self.lp.cache.snapshot_mut()
    }
    fn assume_view(&mut self) -> (&Framework, &mut dyn AssumeView) {
        let lp = &mut *self.lp;
        (&lp.frameworks[self.fi], &mut lp.cache)
    }
}

impl Loop {
    pub(super) async fn schedule_one(&mut self) -> bool {
        let now = Self::now();
        let Some(qp) = self.queue.pop(now) else { return false };
        let pod = qp.pod.clone();
        if self.cache.pod_state(&pod.uid).is_some() {
            self.queue.done(&pod.uid);
            return true;
        }
        let Some(fi) = self.frameworks.iter().position(|f| f.profile == pod.scheduler_name) else {
            self.queue.done(&pod.uid);
            return true;
        };
        if pod.group.is_some() {
            self.schedule_group(fi, qp, now).await;
            return true;
        }
        let start = Instant::now();
        let fw = &self.frameworks[fi];
        let profile = fw.profile.clone();
        // The cycle, then Reserve and Permit and the framework's assume step
        // into the cache: the pod and whatever its Reserve plugins decided
        // (volume and device decisions), which `Cache::forget` reverts with it.
        let ScheduledOne { outcome: o, state, assumed } = fw.schedule_one(&mut self.cache, &pod, CycleOptions::default());
        let elapsed = start.elapsed().as_secs_f64();
        match assumed {
            Assumed::On(node) => {
                self.metrics.schedule_attempts.with_label_values(&["scheduled", &profile]).inc();
                self.metrics.attempt_duration.with_label_values(&["scheduled", &profile]).observe(elapsed);
                self.bind_assumed(fi, state, pod, node, start).await;
                return true;
            }
            Assumed::Refused { .. } => {
                self.metrics.schedule_attempts.with_label_values(&["error", &profile]).inc();
                self.queue.error(&pod.uid, now);
                return true;
            }
            Assumed::NoNode => {}
        }
        if let Some(err) = &o.error {
            tracing::warn!(pod = %pod.key(), error = %err, "scheduling error");
            self.metrics.schedule_attempts.with_label_values(&["error", &profile]).inc();
            self.metrics.attempt_duration.with_label_values(&["error", &profile]).observe(elapsed);
            let since = self.queue.unschedulable_since(&pod.uid);
            if let Some(w) = &self.writer {
            w.report_failure(pod.clone(), "SchedulerError", o.message.clone().unwrap_or_else(|| err.message()), None, since).await;
        }
            self.queue.error(&pod.uid, now);
            return true;
        }
        self.metrics.schedule_attempts.with_label_values(&["unschedulable", &profile]).inc();
        self.metrics.attempt_duration.with_label_values(&["unschedulable", &profile]).observe(elapsed);
        let mut nominated = None;
        if let Some(pf) = &o.post_filter {
            self.metrics.preemption_attempts.inc();
            if let Some(n) = &pf.nominated_node {
                self.metrics.preemption_victims.observe(pf.victims.len() as f64);
                nominated = Some(n.clone());
                // A victim whose graceful deletion has begun needs no second
                // call (as upstream skips it).
                let victims: Vec<&Arc<PodInfo>> =
                    pf.victims.iter().filter(|v| !v.terminating).collect();
                if let Some(w) = &self.writer {
                    for v in &victims {
                        w.preempt((*v).clone(), pod.clone(), n.clone(), profile.clone())
                            .await;
                    }
                    if !victims.is_empty() {
                        self.preempting.insert(
                            pod.uid.clone(),
                            super::Preempting {
                                victims: victims.iter().map(|v| v.uid.clone()).collect(),
                                until: now + super::PREEMPTION_HOLD,
                            },
                        );
                    }
                }
                // Lower-priority pods nominated to the same node lose their nomination.
                let lower: Vec<Arc<PodInfo>> = self.cache.snapshot().nominated.get(n).map(|v| v.iter().filter(|p| p.priority < pod.priority && p.uid != pod.uid).cloned().collect()).unwrap_or_default();
                for p in lower {
                    self.cache.snapshot_mut().clear_nomination(&p.uid);
                    if let Some(w) = &self.writer {
            w.clear_nomination(p).await;
        }
                }
                let mut np = (*pod).clone();
                np.nominated_node = Some(n.clone());
                self.cache.snapshot_mut().nominate(Arc::new(np), n);
                // The record carries the nomination from now on: the next
                // attempt sees it (PodEligibleToPreemptOthers) even before the
                // watch brings the status back.
                self.queue.set_nominated(&pod.uid, Some(n.clone()));
            }
        }
        // PostFilter's deallocations (DynamicResources): the claim's update
        // event requeues the pod, which then allocates anew.
        if let Some(w) = &self.writer {
            for d in &o.deallocations {
                w.deallocate_claim(d.clone()).await;
            }
        }
        let message = o.message.clone().unwrap_or_default();
        tracing::info!(pod = %pod.key(), %message, "unschedulable");
        let was_nominated = nominated.is_some();
        let since = self.queue.unschedulable_since(&pod.uid);
        if let Some(w) = &self.writer {
            w.report_failure(pod.clone(), "Unschedulable", message, nominated, since).await;
        }
        let mut mask = Events::default();
        for name in &o.unschedulable_plugins {
            match fw.plugins().find(|p| p.name() == *name) {
                Some(p) => mask = mask.or(p.events()),
                None => mask = Events::ALL,
            }
        }
        if mask == Events::default() {
            mask = Events::ALL;
        }
        // A nominated preemptor waits for its victims to go.
        if was_nominated {
            mask = mask.or(Events::POD_DELETE);
        }
        self.queue.set_rejected(&pod.uid, Some(Rejection { profile, plugins: o.unschedulable_plugins.clone() }));
        self.queue.unschedulable(&pod.uid, mask, now);
        // A preemptor whose victims' deletions are in flight waits gated
        // until they show (see `Preempting`).
        if self.waits_for_victims(&pod.uid)
            && let Some(p) = self.queue.get(&pod.uid).map(|q| q.pod.clone())
        {
            self.queue.update(p, true, now);
            self.queue.set_gate_events(&pod.uid, Events::POD_DELETE);
        }
        true
    }

    /// The events that may make a pod the named plugins rejected schedulable.
    fn mask_for(&self, fi: usize, plugins: &[&'static str]) -> Events {
        let fw = &self.frameworks[fi];
        let mut mask = Events::default();
        for name in plugins {
            match fw.plugins().find(|p| p.name() == *name) {
                Some(p) => mask = mask.or(p.events()),
                None => mask = Events::ALL,
            }
        }
        if mask == Events::default() { Events::ALL } else { mask }
    }

    /// The group cycle for the group of `qp` (just popped): its other waiting
    /// members are taken from the queue, the group is decided all or
    /// nothing, the placed members are bound and the others go back to the
    /// pool together, each with its reason.
    async fn schedule_group(&mut self, fi: usize, qp: QueuedPod, now: std::time::Instant) {
        let first = qp.pod.clone();
        let mut members = vec![first.clone()];
        for q in self.queue.take_group(&first, now) {
            if self.cache.pod_state(&q.pod.uid).is_some() {
                self.queue.done(&q.pod.uid);
                continue;
            }
            members.push(q.pod);
        }
        let start = Instant::now();
        let out = schedule_group(&mut LoopHost { lp: self, fi }, &members);
        let elapsed = start.elapsed().as_secs_f64();
        let profile = self.frameworks[fi].profile.clone();
        let result = if out.fits { "scheduled" } else { "unschedulable" };
        self.metrics.schedule_attempts.with_label_values(&[result, &profile]).inc_by(members.len() as u64);
        self.metrics.attempt_duration.with_label_values(&[result, &profile]).observe(elapsed);
        tracing::info!(group = %out.group, members = members.len(), placed = out.placed.len(), fits = out.fits, message = %out.message, "group cycle");
        if out.waiting {
            // Fewer members than minCount exist: they wait for the rest (a
            // member added moves them), unreported, as upstream's PreEnqueue
            // keeps them out of the queue.
            for u in &out.unplaced {
                self.queue.set_rejected(&u.pod.uid, Some(Rejection { profile: profile.clone(), plugins: u.plugins.clone() }));
                self.queue.unschedulable(&u.pod.uid, Events::POD_GROUP, now);
            }
            return;
        }
        self.report_group(&first, &out).await;
        // Preemption for the whole group, or for nobody.
        let mut nominated: HashMap<String, String> = HashMap::new();
        if let Some(gp) = preempt_for_group(&self.frameworks[fi], self.cache.snapshot(), &members, &out) {
            self.metrics.preemption_attempts.inc();
            self.metrics.preemption_victims.observe(gp.victims.len() as f64);
            tracing::info!(group = %out.group, victims = gp.victims.len(), "preempting for a pod group");
            let by = gp.nominations.first().map(|(p, n)| (p.clone(), n.clone()));
            for v in &gp.victims {
                let (preemptor, node) = by.clone().unwrap_or_else(|| (first.clone(), String::new()));
                let node = self.cache.snapshot().pod_node(&v.uid).map(str::to_string).unwrap_or(node);
                if let Some(w) = &self.writer {
            w.preempt(v.clone(), preemptor, node, profile.clone()).await;
        }
            }
            for (m, n) in gp.nominations {
                let mut np = (*m).clone();
                np.nominated_node = Some(n.clone());
                self.cache.snapshot_mut().nominate(Arc::new(np), &n);
                self.queue.set_nominated(&m.uid, Some(n.clone()));
                nominated.insert(m.uid.clone(), n);
            }
        }
        // Members that wait: as one group (the union of every member's
        // rejectors, so any event that could help moves them all), or alone
        // when the group was bound without them.
        let mut group_mask = self.mask_for(fi, &out.plugins()).or(Events::POD_GROUP);
        if !nominated.is_empty() {
            // The group waits for its victims to go.
            group_mask = group_mask.or(Events::POD_DELETE);
        }
        for u in &out.unplaced {
            let since = self.queue.unschedulable_since(&u.pod.uid);
            let (reason, message) = if u.error { ("SchedulerError", u.message.clone()) } else { ("Unschedulable", out.pod_message(u)) };
            if let Some(w) = &self.writer {
            w.report_failure(u.pod.clone(), reason, message, nominated.get(&u.pod.uid).cloned(), since).await;
        }
            self.queue.set_rejected(&u.pod.uid, Some(Rejection { profile: profile.clone(), plugins: u.plugins.clone() }));
            if u.error {
                self.queue.error(&u.pod.uid, now);
            } else {
                let mask = if out.fits { self.mask_for(fi, &u.plugins) } else { group_mask };
                self.queue.unschedulable(&u.pod.uid, mask, now);
            }
        }
        for p in out.placed {
            self.bind_assumed(fi, p.state, p.pod, p.node, start).await;
        }
    }


    /// Writes the group's status when it changed: upstream's
    /// PodGroupInitiallyScheduled condition (v1beta1; never back to False once
    /// True), scheduler-plugins' phase and scheduled count (v1alpha1).
    async fn report_group(&mut self, first: &Arc<PodInfo>, out: &GroupOutcome) {
        use berth_model::pod::GroupApi;
        let Some(r) = &first.group else { return };
        if out.min_count == 0 {
            return; // no usable group object to write to
        }
        let key = format!("{:?}/{}/{}", r.api, first.namespace, r.name);
        let last = self.group_status.get(&key);
        let message = if out.fits { String::new() } else { out.message.clone() };
        if last == Some(&message) || (last.is_some_and(String::is_empty) && !out.fits) {
            return;
        }
        self.group_status.insert(key, message.clone());
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
        let status = match (r.api, out.fits) {
            (GroupApi::V1beta1, true) => serde_json::json!({"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled", "message": "", "lastTransitionTime": now}]}),
            (GroupApi::V1beta1, false) => serde_json::json!({"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable", "message": message, "lastTransitionTime": now}]}),
            (GroupApi::V1alpha1, true) => serde_json::json!({"phase": "Scheduled", "scheduled": out.bound as usize + out.placed.len(), "scheduleStartTime": now}),
            (GroupApi::V1alpha1, false) => serde_json::json!({"phase": "Pending", "scheduled": out.bound, "scheduleStartTime": now}),
        };
        if let Some(w) = &self.writer {
            w.group_status(r.api, first.namespace.clone(), r.name.clone(), status).await;
        }
    }

    /// The binding cycle of an assumed pod: PreBind, whose plugins describe
    /// their API work (VolumeBinding's: PV claimRefs, the claims' selected
    /// node, then the wait until they are bound), then that work and the
    /// bind, off the loop; the outcome comes back as a `BindResult`. A
    /// PreBind plugin that fails here forgets the pod and its reservations
    /// and retries it with backoff.
    async fn bind_assumed(&mut self, fi: usize, mut state: CycleState, pod: Arc<PodInfo>, node: String, start: Instant) {
        let s = self.frameworks[fi].run_pre_bind(&mut state, &pod, &node);
        if !s.is_success() {
            let message = format!("running PreBind plugin {:?}: {}", s.plugin, s.message());
            tracing::warn!(pod = %pod.key(), %node, error = %message, "PreBind failed");
            self.frameworks[fi].unassume(&mut self.cache, &mut state, &pod, &node);
            let since = self.queue.unschedulable_since(&pod.uid);
            if let Some(w) = &self.writer {
            w.report_failure(pod.clone(), "SchedulerError", message, None, since).await;
        }
            self.queue.error(&pod.uid, Self::now());
            return;
        }
        let work = state.take_pre_bind_work();
        if let Some(w) = &self.writer {
            let devices = &self.cache.snapshot().devices;
            let seen = work
                .iter()
                .flat_map(|w| &w.writes)
                .filter_map(|w| match w {
                    ApiWrite::AllocateClaim { namespace, name, .. } => devices.api_claim(namespace, name).and_then(seen_claim),
                    _ => None,
                })
                .collect();
            w.bind_with_work(pod, node, start.into_std(), work, seen).await;
        }
    }

    pub(super) fn bind_result(&mut self, r: BindResult) {
        let uid = r.pod.uid.clone();
        if r.outcome != BindOutcome::NotLeader {
            let status = if matches!(r.outcome, BindOutcome::Bound | BindOutcome::AlreadyBound { .. }) { "Success" } else { "Error" };
            self.metrics.extension_point_duration.with_label_values(&["Bind", status, &r.pod.scheduler_name]).observe(r.took.as_secs_f64());
        }
        match r.outcome {
            BindOutcome::Bound => {
                let attempts = self.queue.get(&uid).map(|q| q.attempts).unwrap_or(1).max(1).to_string();
                if let Some(t) = self.queue.first_seen(&uid) {
                    self.metrics.sli_duration.with_label_values(&[&attempts]).observe(t.elapsed().as_secs_f64());
                }
                self.queue.done(&uid);
                tracing::debug!(pod = %r.pod.key(), node = %r.node, "bound");
            }
            BindOutcome::AlreadyBound { node } => {
                // The API has it bound (409, or read back after an unknown
                // outcome): it holds a slot there, whatever the watch says yet.
                tracing::info!(pod = %r.pod.key(), chosen = %r.node, bound = %node, "pod already bound");
                if node != r.node && self.cache.pod_state(&uid) == Some(berth_engine::cache::PodState::Assumed) {
                    self.cache.forget(&uid);
                    let mut p = (*r.pod).clone();
                    p.node_name = Some(node);
                    p.nominated_node = None;
                    self.cache.assume(Arc::new(p));
                }
                self.queue.done(&uid);
            }
            BindOutcome::Gone => {
                self.cache.forget(&uid);
                self.delete_pod(&uid);
            }
            BindOutcome::NotLeader => {
                self.cache.forget(&uid);
                self.queue.error(&uid, Self::now());
            }
            BindOutcome::Failed(m) => {
                tracing::warn!(pod = %r.pod.key(), node = %r.node, error = %m, "bind failed (known not bound); retrying with backoff");
                self.cache.forget(&uid);
                self.queue.error(&uid, Self::now());
            }
        }
    }
}
