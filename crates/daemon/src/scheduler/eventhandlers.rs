//! Watch events into the cache and the queue (upstream's
//! `eventhandlers.go`): each change of a watched kind updates the cache,
//! and the cluster events it amounts to move the pods that wait for them.

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;

use berth_engine::cache::Pdb;
use berth_engine::framework::Events;
use berth_engine::queue;
use berth_model::{NodeSpec, PodInfo};

use super::Loop;
use crate::shadow;
use super::kinds::key;
use crate::watch::{Change, WatchEvent};

fn node_events(old: Option<&NodeSpec>, new: &NodeSpec) -> Events {
    let Some(old) = old else { return Events::NODE_ADD };
    let mut e = Events::default();
    if old.allocatable != new.allocatable {
        e = e.or(Events::NODE_ALLOCATABLE);
    }
    if old.labels != new.labels {
        e = e.or(Events::NODE_LABEL);
    }
    if old.taints != new.taints {
        e = e.or(Events::NODE_TAINT);
    }
    if old.unschedulable != new.unschedulable {
        e = e.or(Events::NODE_UNSCHEDULABLE);
    }
    if old.images.len() != new.images.len() {
        e = e.or(Events::NODE_IMAGES);
    }
    e
}

impl Loop {
    pub(super) fn event(&mut self, e: Events) {
        if e == Events::default() {
            return;
        }
        let now = Self::now();
        self.queue.on_event(e, now);
        // Gated pods whose gate cares about the event ask PreEnqueue again
        // (upstream's GatingPluginEvents): a pod whose claim is created
        // after the pod goes to activeQ now, the others stay gated.
        for pod in self.queue.gated_for(e) {
            let gate = self.gate(&pod);
            self.queue.update(pod.clone(), gate.is_some(), now);
            if let Some(events) = gate {
                self.queue.set_gate_events(&pod.uid, events);
            }
        }
    }

    /// PreEnqueue over the cluster as the cache shows it: None when the pod
    /// may enter activeQ, else the events its gate waits for. Upstream
    /// reports no condition for a gated pod (it only logs the message).
    fn gate(&self, pod: &PodInfo) -> Option<Events> {
        if self.waits_for_victims(&pod.uid) {
            return Some(Events::POD_DELETE);
        }
        let fw = self.framework(pod)?;
        let s = fw.run_pre_enqueue_in(pod, self.cache.snapshot());
        if s.is_success() {
            return None;
        }
        tracing::debug!(pod = %pod.key(), plugin = s.plugin, message = %s.message(), "gated by PreEnqueue");
        Some(fw.gate_events(s.plugin))
    }

    /// The preemptor `uid` still waits for a victim: one is bound in the
    /// cache and not terminating, and the hold has not run out.
    pub(super) fn waits_for_victims(&self, uid: &str) -> bool {
        let Some(p) = self.preempting.get(uid) else {
            return false;
        };
        let snap = self.cache.snapshot();
        Self::now() < p.until
            && p.victims
                .iter()
                .any(|v| snap.bound_pod(v).is_some_and(|b| !b.terminating))
    }

    /// Lets go the preemptors whose victims are gone or terminating (a
    /// victim's delete event lets its preemptor go at once through its
    /// gate; a graceful deletion shows as an update, seen here), and those
    /// whose hold ran out.
    pub(super) fn release_preemptors(&mut self) {
        let done: Vec<String> = self
            .preempting
            .keys()
            .filter(|u| !self.waits_for_victims(u))
            .cloned()
            .collect();
        let now = Self::now();
        for uid in done {
            self.preempting.remove(&uid);
            if self.queue.place(&uid) != Some(queue::Place::Gated) {
                continue;
            }
            if let Some(pod) = self.queue.get(&uid).map(|q| q.pod.clone()) {
                let gate = self.gate(&pod);
                self.queue.update(pod, gate.is_some(), now);
                if let Some(events) = gate {
                    self.queue.set_gate_events(&uid, events);
                }
            }
        }
    }

    pub(super) fn apply_pod(&mut self, pod: &core::Pod) {
        let info = PodInfo::from_pod(pod);
        let uid = info.uid.clone();
        if info.node_name.is_some() || info.terminating || info.terminated {
            self.cache.snapshot_mut().groups.forget_foreign(&uid);
        }
        if info.node_name.is_some() {
            if self.shadow.is_some() {
                self.judge_binding(&info);
            }
            // A pod whose bind is in flight keeps its record until the bind
            // result arrives (it carries attempts and first-seen for the SLI).
            if self.queue.place(&uid) != Some(queue::Place::InFlight) {
                self.queue.delete(&uid);
            }
            let snap = self.cache.snapshot();
            let old_pod = snap.bound_pod(&uid);
            let old = old_pod.is_some();
            let relabeled = old_pod.is_some_and(|p| p.labels != info.labels);
            let terminated = info.terminated;
            self.cache.upsert_bound_pod(info);
            if terminated {
                self.event(Events::POD_DELETE);
            } else if !old {
                self.event(Events::POD_ADD);
            } else if relabeled {
                self.event(Events::POD_LABEL);
            }
            return;
        }
        // Pending.
        let snap = self.cache.snapshot_mut();
        match &info.nominated_node {
            Some(n) => snap.nominate(info.clone(), &n.clone()),
            None => snap.clear_nomination(&uid),
        }
        if !self.profiles.contains(&info.scheduler_name) {
            if let Some(r) = &info.group
                && !info.terminating
                && !info.terminated
            {
                self.cache.snapshot_mut().groups.note_foreign(&info.namespace, r, &uid, &info.scheduler_name);
            }
            return;
        }
        if info.terminating || info.terminated {
            self.queue.delete(&uid);
            return;
        }
        let seen = self.queue.seen(pod);
        let change = self.queue.classify(&uid, &seen);
        if change == queue::Change::StatusOnly {
            // Only the status changed (our own PodScheduled=False patch, a
            // nomination): the record takes the newer pod where it waits.
            self.queue.refresh(info, seen);
            return;
        }
        let gate = self.gate(&info);
        let gated = gate.is_some();
        let q = if gated { "gated" } else { "active" };
        if change == queue::Change::New {
            self.metrics.incoming_pods.with_label_values(&[q, "PodAdd"]).inc();
            // A new member may complete its group (GangScheduling's pod-add event).
            let member = info.group.is_some();
            self.queue.add(info, gated, Self::now());
            if member {
                self.event(Events::POD_GROUP);
            }
        } else {
            self.metrics.incoming_pods.with_label_values(&[q, "PodUpdate"]).inc();
            self.queue.update(info, gated, Self::now());
        }
        if let Some(events) = gate {
            self.queue.set_gate_events(&uid, events);
        }
        self.queue.set_seen(&uid, seen);
    }

    /// Shadow mode: a pod of a judged profile that this loop saw pending is
    /// now bound (by another scheduler). Runs one cycle for it on the cache
    /// as it stands, before the binding is applied (earlier bindings in,
    /// the pod itself not yet bound), and records the verdict.
    fn judge_binding(&mut self, bound: &Arc<PodInfo>) {
        let Some(node) = bound.node_name.as_deref() else { return };
        // Only a binding seen happen: the pod waits in the queue (pending,
        // of a judged profile) and is not bound in the cache yet.
        let Some(qp) = self.queue.get(&bound.uid) else { return };
        if self.cache.pod_state(&bound.uid).is_some() {
            return;
        }
        let Some(fw) = self.frameworks.iter().find(|f| f.profile == bound.scheduler_name) else { return };
        // The pod as it waited (no nodeName: NodeName would reject every other node).
        let mut pending = (*qp.pod).clone();
        pending.node_name = None;
        let pending = Arc::new(pending);
        let now = Self::now();
        let detail = self.shadow.as_mut().map(|sh| &mut sh.detail);
        let j = shadow::judge_with(fw, self.cache.snapshot(), &pending, node, || detail.is_some_and(|d| d.take(now)));
        let profile = fw.profile.as_str();
        self.metrics.shadow_decisions.with_label_values(&[profile, j.verdict.as_str()]).inc();
        if let Some(g) = j.score_gap {
            self.metrics.shadow_score_gap.with_label_values(&[profile]).observe(g as f64);
        }
        if let Some(sh) = &mut self.shadow {
            sh.record(&j, Self::now());
        }
    }

    pub(super) fn delete_pod(&mut self, uid: &str) {
        self.cache.snapshot_mut().groups.forget_foreign(uid);
        let was_bound = self.cache.pod_state(uid).is_some();
        self.cache.remove_pod(uid);
        self.queue.delete(uid);
        if was_bound {
            self.event(Events::POD_DELETE);
        }
    }

    /// A change of one watched kind: applied (see `super::kinds`), and a
    /// relist reported to the watches' health once it is in the cache.
    pub(super) fn apply(&mut self, ev: WatchEvent<Loop>) {
        if let Some(kind) = ev.apply(self) {
            self.mark_synced(kind);
        }
    }

    pub(super) fn apply_node(&mut self, n: &core::Node) {
        let spec = NodeSpec::from_node(n);
        for e in &spec.errors {
            tracing::warn!(node = %spec.name, error = %e, "node field ignored");
        }
        let ev = node_events(self.cache.snapshot().node(&spec.name).map(|ni| &*ni.node), &spec);
        self.cache.upsert_node(spec);
        self.event(ev);
    }

    pub(super) fn apply_pdb(&mut self, p: &policy::PodDisruptionBudget) {
        match Pdb::from_api(p) {
            Ok(pdb) => {
                self.pdbs.insert(key(&p.metadata), pdb);
            }
            Err(e) => {
                // Upstream skips such a budget during preemption; so do we.
                tracing::warn!(pdb = %key(&p.metadata), error = %e, "PodDisruptionBudget ignored");
                self.pdbs.remove(&key(&p.metadata));
            }
        }
    }

    /// A PodGroup change (either API). Members waiting in the pool move only
    /// when what the scheduler reads changed (minCount, topology, ...), not
    /// on the status writes that follow each attempt.
    pub(super) fn apply_groups(&mut self, api: berth_model::pod::GroupApi, c: Change<kube::api::DynamicObject>) {
        use berth_engine::cache::groups::GroupPolicy;
        fn compile(api: berth_model::pod::GroupApi, o: &kube::api::DynamicObject) -> (String, String, Result<GroupPolicy, berth_engine::cache::groups::Error>) {
            let ns = o.metadata.namespace.clone().unwrap_or_else(|| "default".into());
            let name = o.metadata.name.clone().unwrap_or_default();
            let value = serde_json::to_value(o).unwrap_or_default();
            let g = match api {
                berth_model::pod::GroupApi::V1alpha1 => GroupPolicy::from_v1alpha1(&ns, &name, &value),
                berth_model::pod::GroupApi::V1beta1 => match serde_json::from_value::<k8s_openapi::api::scheduling::v1beta1::PodGroup>(value) {
                    Ok(pg) => GroupPolicy::from_v1beta1(&pg),
                    Err(e) => Err(berth_engine::cache::groups::Error::Field { key: format!("{ns}/{name}"), field: "spec", message: e.to_string() }),
                },
            };
            (ns, name, g)
        }
        let mut changed = false;
        let groups = &mut self.cache.snapshot_mut().groups;
        match c {
            Change::Apply(o) => {
                let (ns, name, g) = compile(api, &o);
                let r = berth_model::pod::GroupRef { api, name: name.clone() };
                changed = groups.get(&ns, &r).is_none_or(|old| old.as_ref().map(|a| &**a) != g.as_ref());
                if let Err(e) = &g {
                    tracing::warn!(error = %e, "PodGroup cannot be used; its pods stay pending with the reason");
                }
                groups.upsert(api, &ns, &name, g);
            }
            Change::Delete(o) => {
                let ns = o.metadata.namespace.clone().unwrap_or_else(|| "default".into());
                groups.remove(api, &ns, o.metadata.name.as_deref().unwrap_or_default());
            }
            Change::Relist(all) => {
                let before = groups.len();
                groups.clear(api);
                for o in &all {
                    let (ns, name, g) = compile(api, o);
                    groups.upsert(api, &ns, &name, g);
                }
                changed = before != 0 || !all.is_empty();
            }
        }
        if changed {
            self.event(Events::POD_GROUP);
        }
    }
}
