//! The group cycle: the pending members of a pod group are decided together,
//! all or nothing (gang scheduling).
//!
//! The members, in queue order, each run through the normal cycle
//! ([`Framework::schedule`], without PostFilter) against the snapshot with the
//! members placed so far assumed (the framework's one assume step,
//! [`Framework::reserve_and_assume`], into the host's [`AssumeView`]). If at
//! least the group's minCount members have a place (members already bound
//! count), the placed ones stay assumed and the caller binds them; otherwise
//! every placed member is undone in reverse order ([`Framework::unassume`])
//! and the whole group waits.
//!
//! Nothing is held between attempts, unlike upstream's PodGroup cycle, which
//! also reserves: two gangs cannot deadlock, and a gang that does not fit never
//! holds nodes a smaller pod could use. With a topology constraint the group is
//! tried in every domain of the label (nodes narrowed to it through the
//! snapshot's `groups.placement`, which the GangScheduling plugin's PreFilter reads) and
//! the best domain wins: most members placed, then the highest sum of the
//! members' chosen-node scores, then the domain name.
//!
//! The engine is kube-free: the daemon, `simulate`, `explain` and `bench` each
//! provide a [`GroupHost`] over their own state.
//!
//! The gang vocabulary the cycle and the GangScheduling plugin share (the
//! plugin's name, which the cycle's rejections carry for requeueing, and the
//! missing-group message) lives here; the plugin imports it, never the reverse.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::assume::{AssumeView, Assumed, ScheduledOne};
use super::{CycleOptions, CycleState, Framework};
use crate::cache::groups::GroupPolicy;
use crate::cache::Snapshot;
use berth_model::pod::GroupRef;
use berth_model::PodInfo;

/// The name of the plugin that enforces pod groups per pod (GangScheduling):
/// the group cycle's own rejections are recorded under it, so that its
/// events requeue the members.
pub const GANG_PLUGIN: &str = "GangScheduling";

/// Upstream's message for a member whose PodGroup does not exist.
pub fn missing_group_message(name: &str) -> String {
    format!("waiting for pod's pod group {name:?} to appear in scheduling queue")
}

/// Where the group cycle reads the cluster and assumes its members.
pub trait GroupHost {
    /// The profile's framework.
    fn framework(&self) -> &Framework;
    /// The cluster as cycles read it.
    fn snapshot(&self) -> &Snapshot;
    /// The cluster, to set the topology domain being tried.
    fn snapshot_mut(&mut self) -> &mut Snapshot;
    /// The profile's framework and the view members are assumed into (through
    /// [`Framework::reserve_and_assume`] and undone with [`Framework::unassume`]).
    fn assume_view(&mut self) -> (&Framework, &mut dyn AssumeView);
}

/// A member that has a place (assumed in the host when the group fits).
pub struct Placed {
    /// The member.
    pub pod: Arc<PodInfo>,
    /// Its node.
    pub node: String,
    /// Its cycle state (for the binding cycle).
    pub state: CycleState,
    /// The chosen node's weighted score.
    pub score: i64,
}

/// A member without a place, and why.
#[derive(Clone, Debug)]
pub struct Unplaced {
    /// The member.
    pub pod: Arc<PodInfo>,
    /// Its own failure ("0/3 nodes are available: ..."), or the group's reason
    /// when it was not tried.
    pub message: String,
    /// The plugins that rejected it (for requeueing on events).
    pub plugins: Vec<&'static str>,
    /// The cycle failed with an internal error.
    pub error: bool,
}

/// What the group cycle decided.
pub struct GroupOutcome {
    /// "namespace/name" of the group.
    pub group: String,
    /// The group's minCount (0 when the group object is missing or unreadable).
    pub min_count: u32,
    /// Enough members have a place: `placed` are assumed and to be bound.
    pub fits: bool,
    /// Members with a place (empty when the group does not fit).
    pub placed: Vec<Placed>,
    /// Members without a place (every member when the group does not fit).
    pub unplaced: Vec<Unplaced>,
    /// Why the group does not fit (for the PodGroup's status and the pods).
    pub message: String,
    /// The topology domain (label key, value) chosen.
    pub domain: Option<(String, String)>,
    /// Members already bound.
    pub bound: u32,
    /// The group failed because members found no node (not for a reason
    /// preemption cannot change: a missing group object, mixed schedulers,
    /// too few members, minResources, a topology constraint).
    pub preemptable: bool,
    /// Fewer members exist than minCount: as upstream's PreEnqueue, the
    /// members wait for the rest without an attempt being reported.
    pub waiting: bool,
}

impl GroupOutcome {
    /// Every rejecting plugin of every member, deduplicated.
    pub fn plugins(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = Vec::new();
        for u in &self.unplaced {
            for p in &u.plugins {
                if !v.contains(p) {
                    v.push(p);
                }
            }
        }
        v
    }

    /// The message a member's PodScheduled=False condition carries.
    pub fn pod_message(&self, u: &Unplaced) -> String {
        if self.fits || u.message == self.message {
            u.message.clone()
        } else {
            format!("pod group {:?}: {}; this pod: {}", self.group, self.message, u.message)
        }
    }
}

/// The policy of the members' group as the snapshot knows it.
pub fn policy_of(snap: &Snapshot, namespace: &str, r: &GroupRef) -> Result<Arc<GroupPolicy>, String> {
    match snap.groups.get(namespace, r) {
        None => Err(missing_group_message(&r.name)),
        Some(Err(e)) => Err(e.to_string()),
        Some(Ok(g)) => Ok(g.clone()),
    }
}

fn reject_all(members: &[Arc<PodInfo>], group: String, min_count: u32, bound: u32, message: String, plugin: &'static str) -> GroupOutcome {
    let unplaced = members.iter().map(|p| Unplaced { pod: p.clone(), message: message.clone(), plugins: vec![plugin], error: false }).collect();
    GroupOutcome { group, min_count, fits: false, placed: vec![], unplaced, message, domain: None, bound, preemptable: false, waiting: false }
}

/// Members of `r` in `namespace` bound in the snapshot (assumed ones
/// included): their schedulerNames and node indexes.
fn bound_members(snap: &Snapshot, namespace: &str, r: &GroupRef) -> Vec<(String, usize)> {
    let mut seen = Vec::new();
    for (i, ni) in snap.nodes.iter().enumerate() {
        for p in &ni.pods {
            if p.namespace == namespace && p.group.as_ref() == Some(r) {
                seen.push((p.scheduler_name.clone(), i));
            }
        }
    }
    seen
}

/// One try of every member in the current placement.
struct Attempt {
    placed: Vec<Placed>,
    unplaced: Vec<Unplaced>,
    score: i64,
    stopped: Option<String>,
}

fn attempt<H: GroupHost>(host: &mut H, members: &[Arc<PodInfo>], min_count: u32, bound: u32) -> Attempt {
    let mut a = Attempt { placed: Vec::new(), unplaced: Vec::new(), score: 0, stopped: None };
    let opts = CycleOptions { skip_post_filter: true, ..Default::default() };
    for (k, pod) in members.iter().enumerate() {
        let remaining = (members.len() - k) as u32;
        let scheduled = bound + a.placed.len() as u32;
        if scheduled + remaining < min_count {
            // Upstream's PlacementFeasible: the rest cannot make up minCount.
            let m = format!("minCount ({min_count}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining");
            for p in &members[k..] {
                a.unplaced.push(Unplaced { pod: p.clone(), message: m.clone(), plugins: vec![GANG_PLUGIN], error: false });
            }
            a.stopped = Some(m);
            break;
        }
        let (fw, view) = host.assume_view();
        let ScheduledOne { outcome: o, state, assumed } = fw.schedule_one(view, pod, opts);
        match assumed {
            Assumed::NoNode => {
                let error = o.error.is_some();
                a.unplaced.push(Unplaced { pod: pod.clone(), message: o.message.clone().unwrap_or_default(), plugins: o.unschedulable_plugins.clone(), error });
            }
            Assumed::On(node) => {
                let score = o.selected.and_then(|i| o.feasible.iter().position(|&f| f == i)).and_then(|k| o.totals.get(k)).copied().unwrap_or(0);
                a.score += score;
                a.placed.push(Placed { pod: pod.clone(), node, state, score });
            }
            Assumed::Refused { node, .. } => {
                a.unplaced.push(Unplaced { pod: pod.clone(), message: format!("a Reserve or Permit plugin refused node {node}"), plugins: vec![], error: true });
            }
        }
    }
    if a.stopped.is_none() && bound + (a.placed.len() as u32) < min_count {
        let scheduled = bound + a.placed.len() as u32;
        a.stopped = Some(format!("minCount ({min_count}) cannot be satisfied: {scheduled} scheduled, 0 remaining"));
    }
    a
}

fn undo<H: GroupHost>(host: &mut H, placed: &mut Vec<Placed>) {
    while let Some(mut p) = placed.pop() {
        let (fw, view) = host.assume_view();
        fw.unassume(view, &mut p.state, &p.pod, &p.node);
    }
}

/// Runs the group cycle for the pending `members` of one group (queue order).
pub fn schedule_group<H: GroupHost>(host: &mut H, members: &[Arc<PodInfo>]) -> GroupOutcome {
    let Some(first) = members.first() else {
        return GroupOutcome { group: String::new(), min_count: 0, fits: true, placed: vec![], unplaced: vec![], message: String::new(), domain: None, bound: 0, preemptable: false, waiting: false };
    };
    let namespace = first.namespace.clone();
    let Some(r) = first.group.clone() else {
        return reject_all(members, String::new(), 0, 0, "not a member of a pod group".into(), GANG_PLUGIN);
    };
    let group = format!("{namespace}/{}", r.name);
    let policy = match policy_of(host.snapshot(), &namespace, &r) {
        Ok(p) => p,
        Err(m) => return reject_all(members, group, 0, 0, m, GANG_PLUGIN),
    };
    let min_count = policy.min_count;
    let bound_list = bound_members(host.snapshot(), &namespace, &r);
    let bound = bound_list.len() as u32;
    // All members must share one schedulerName.
    let foreign = host.snapshot().groups.foreign_schedulers(&namespace, &r);
    let names: BTreeSet<&str> = members.iter().map(|p| p.scheduler_name.as_str()).chain(bound_list.iter().map(|(s, _)| s.as_str())).chain(foreign.iter().map(String::as_str)).collect();
    if names.len() > 1 {
        let list: Vec<&str> = names.into_iter().collect();
        let m = format!("pods of pod group {:?} name different schedulers ({}): all must share one schedulerName", r.name, list.join(", "));
        return reject_all(members, group, min_count, bound, m, GANG_PLUGIN);
    }
    if (members.len() as u32) + bound < min_count {
        let m = "waiting for minCount pods from a gang to appear in scheduling queue".to_string();
        let mut out = reject_all(members, group, min_count, bound, m, GANG_PLUGIN);
        out.waiting = true;
        return out;
    }
    if let Some(min) = &policy.min_resources
        && let Some(m) = resource_gap(host.snapshot(), min)
    {
        let m = format!("PodGroup {group}: minResources cannot be met: {m}");
        return reject_all(members, group, min_count, bound, m, "NodeResourcesFit");
    }
    let Some(key) = policy.topology_key.clone() else {
        let mut a = attempt(host, members, min_count, bound);
        return finish(host, a.stopped.take(), a, GroupFacts { group, min_count, bound }, None, false);
    };
    // Topology: every domain of the key, the best one wins.
    // Members already bound fix the domain.
    let snap = host.snapshot();
    let domains: BTreeSet<String> = if bound_list.is_empty() {
        snap.nodes.iter().filter_map(|n| n.node.labels.get(&key).cloned()).collect()
    } else {
        bound_list.iter().filter_map(|(_, i)| snap.nodes[*i].node.labels.get(&key).cloned()).collect()
    };
    if domains.is_empty() {
        let m = format!("no node has the topology label {key:?} of the pod group's schedulingConstraints");
        return reject_all(members, group, min_count, bound, m, "NodeAffinity");
    }
    let mut best: Option<(usize, i64, String)> = None;
    let mut first_failure: Option<Attempt> = None;
    for d in &domains {
        host.snapshot_mut().groups.placement = Some((key.clone(), d.clone()));
        let mut a = attempt(host, members, min_count, bound);
        let n = a.placed.len();
        let score = a.score;
        let was_placed: Vec<Arc<PodInfo>> = a.placed.iter().map(|p| p.pod.clone()).collect();
        undo(host, &mut a.placed);
        if let Some(m) = &a.stopped {
            for p in was_placed {
                a.unplaced.push(Unplaced { pod: p, message: m.clone(), plugins: vec![GANG_PLUGIN], error: false });
            }
        }
        if a.stopped.is_none() {
            let better = best.as_ref().is_none_or(|(bn, bs, _)| (n, score) > (*bn, *bs));
            if better {
                best = Some((n, score, d.clone()));
            }
        } else if first_failure.is_none() {
            first_failure = Some(a);
        }
    }
    let out = match best {
        Some((_, _, d)) => {
            host.snapshot_mut().groups.placement = Some((key.clone(), d.clone()));
            let mut a = attempt(host, members, min_count, bound);
            finish(host, a.stopped.take(), a, GroupFacts { group, min_count, bound }, Some((key, d)), true)
        }
        None => {
            let mut a = first_failure.unwrap_or(Attempt { placed: vec![], unplaced: vec![], score: 0, stopped: None });
            let why = a.stopped.take().unwrap_or_default();
            let m = format!("no domain of topology key {key:?} fits the pod group ({} tried; in the first: {why})", domains.len());
            finish(host, Some(m), a, GroupFacts { group, min_count, bound }, None, true)
        }
    };
    host.snapshot_mut().groups.placement = None;
    out
}

/// What a group cycle knows of its group before it places anyone.
struct GroupFacts {
    /// The group's key.
    group: String,
    /// Members that must fit together.
    min_count: u32,
    /// Members already bound.
    bound: u32,
}

/// The group cycle's outcome from its last attempt: every member assumed,
/// or (with `failed`) every assumed member undone and the group's reason
/// given to each.
fn finish<H: GroupHost>(host: &mut H, failed: Option<String>, mut a: Attempt, facts: GroupFacts, domain: Option<(String, String)>, topology: bool) -> GroupOutcome {
    let GroupFacts { group, min_count, bound } = facts;
    match failed {
        None => GroupOutcome { group, min_count, fits: true, placed: a.placed, unplaced: a.unplaced, message: String::new(), domain, bound, preemptable: false, waiting: false },
        Some(m) => {
            let was_placed: Vec<Arc<PodInfo>> = a.placed.iter().map(|p| p.pod.clone()).collect();
            undo(host, &mut a.placed);
            let mut unplaced = a.unplaced;
            for u in unplaced.iter_mut() {
                if u.message.is_empty() {
                    u.message = m.clone();
                }
            }
            // Members that had a place but will not be bound: the group's reason.
            for p in was_placed {
                unplaced.push(Unplaced { pod: p, message: m.clone(), plugins: vec![GANG_PLUGIN], error: false });
            }
            // Preemption is tried for groups without a topology constraint.
            let preemptable = !topology;
            GroupOutcome { group, min_count, fits: false, placed: vec![], unplaced, message: m, domain: None, bound, preemptable, waiting: false }
        }
    }
}

/// The first resource the cluster's free capacity (allocatable minus
/// requested, over every schedulable node) cannot cover, as scheduler-plugins'
/// Coscheduling checks `minResources`.
fn resource_gap(snap: &Snapshot, min: &berth_model::Resources) -> Option<String> {
    for name in min.names() {
        let need = min.get(name);
        let free: i64 = snap.nodes.iter().filter(|n| !n.node.unschedulable).map(|n| (n.node.allocatable.get(name) - n.requested.get(name)).max(0)).sum();
        if free < need {
            return Some(format!("{name}: {need} needed, {free} free"));
        }
    }
    None
}

/// What gang preemption found: evicting `victims` lets the whole group fit,
/// with `nominations` the nodes its members would go to once they are gone.
#[derive(Clone, Debug, Default)]
pub struct GroupPreemption {
    /// Pods to evict (lower priority, PDB-aware, as DefaultPreemption chose them).
    pub victims: Vec<Arc<PodInfo>>,
    /// Members placed only thanks to the evictions, and their nodes.
    pub nominations: Vec<(Arc<PodInfo>, String)>,
}

/// Preemption for a group that did not fit: on a copy of the snapshot, each
/// member in turn either fits (and is assumed there) or runs the profile's
/// PostFilter (DefaultPreemption), whose victims leave the copy and whose
/// node takes the member. Only when enough members then have a place (at
/// least minCount, counting bound ones) are the victims returned; otherwise
/// nothing is evicted. Members whose preemptionPolicy is Never, groups that
/// failed for a reason evictions cannot change and profiles without
/// PostFilter get None.
pub fn preempt_for_group(fw: &Framework, snap: &Snapshot, members: &[Arc<PodInfo>], out: &GroupOutcome) -> Option<GroupPreemption> {
    if out.fits || !out.preemptable || out.min_count == 0 || members.iter().any(|m| m.preemption_never) {
        return None;
    }
    if fw.plugins_at(super::Points::POST_FILTER).is_empty() {
        return None;
    }
    // Someone must be of lower priority than the group for anything to be evicted.
    let top = members.iter().map(|m| m.priority).max().unwrap_or(i32::MIN);
    if !snap.nodes.iter().any(|n| n.pods.iter().any(|p| p.priority < top)) {
        return None;
    }
    let mut copy = snap.clone();
    copy.groups.placement = None;
    let mut found = GroupPreemption::default();
    let mut placed = 0u32;
    for m in members {
        let (o, _) = fw.schedule(m, &copy, CycleOptions::default());
        let node = match (o.selected, o.post_filter) {
            (Some(i), _) => copy.nodes[i].name().to_string(),
            (None, Some(pf)) => {
                let Some(n) = pf.nominated_node else { continue };
                for v in pf.victims {
                    copy.remove_pod(&v.uid);
                    found.victims.push(v);
                }
                found.nominations.push((m.clone(), n.clone()));
                n
            }
            (None, None) => continue,
        };
        let mut b = (**m).clone();
        b.node_name = Some(node);
        b.nominated_node = None;
        copy.clear_nomination(&b.uid);
        copy.add_pod(Arc::new(b));
        placed += 1;
    }
    (!found.victims.is_empty() && out.bound + placed >= out.min_count).then_some(found)
}

/// A [`GroupHost`] over a plain snapshot (`simulate`, `explain`, `bench`):
/// members are assumed into the snapshot itself (see
/// [`AssumeView`]'s implementation for [`Snapshot`]).
pub struct SnapshotHost<'a> {
    /// The profile.
    pub fw: &'a Framework,
    /// The cluster.
    pub snap: &'a mut Snapshot,
}

impl GroupHost for SnapshotHost<'_> {
    fn framework(&self) -> &Framework {
        self.fw
    }

    fn snapshot(&self) -> &Snapshot {
        self.snap
    }

    fn snapshot_mut(&mut self) -> &mut Snapshot {
        self.snap
    }

    fn assume_view(&mut self) -> (&Framework, &mut dyn AssumeView) {
        (self.fw, &mut *self.snap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, KubeSchedulerConfiguration};
    use berth_model::pod::{GroupApi, POD_GROUP_LABEL};
    use crate::testing::{node, pod, PodBuilder};

    fn fw() -> Framework {
        crate::profile::frameworks(&Config::from_raw(KubeSchedulerConfiguration::default()).expect("default config"), 7).into_iter().next().expect("a profile")
    }

    /// A v1beta1 member of group `g` asking for `cpu`.
    fn member(name: &str, g: &str, cpu: &str) -> PodBuilder {
        let mut b = pod(name).req(cpu, "100Mi");
        if let Some(s) = b.pod.spec.as_mut() {
            s.scheduling_group = Some(k8s_openapi::api::core::v1::PodSchedulingGroup { pod_group_name: Some(g.into()) });
        }
        b
    }

    fn group(snap: &mut Snapshot, name: &str, min: u32, topology: Option<&str>) {
        let g = GroupPolicy { api: GroupApi::V1beta1, namespace: "default".into(), name: name.into(), min_count: min, topology_key: topology.map(String::from), min_resources: None, timeout: None };
        snap.groups.upsert(GroupApi::V1beta1, "default", name, Ok(g));
    }

    fn members(g: &str, n: usize, cpu: &str) -> Vec<Arc<PodInfo>> {
        (0..n).map(|i| member(&format!("{g}-{i}"), g, cpu).info()).collect()
    }

    #[test]
    fn all_or_nothing_then_a_node_makes_room() {
        let f = fw();
        let mut snap = Snapshot::new();
        // Room for 3 members of 1 CPU.
        snap.upsert_node(node("a").alloc("2", "8Gi", 110).spec());
        snap.upsert_node(node("b").alloc("1", "8Gi", 110).spec());
        group(&mut snap, "g", 4, None);
        let ms = members("g", 4, "1");
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &ms);
        assert!(!out.fits);
        assert!(out.placed.is_empty());
        assert_eq!(out.unplaced.len(), 4);
        assert_eq!(out.message, "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining");
        // Nothing was left behind on the nodes.
        assert_eq!(snap.pod_count(), 0);
        assert!(out.plugins().contains(&"NodeResourcesFit"), "{:?}", out.plugins());
        let u = out.unplaced.iter().find(|u| u.message.starts_with("0/2 nodes")).expect("the member that found no node");
        assert!(out.pod_message(u).contains("minCount (4)"), "{}", out.pod_message(u));
        // A node is added: all four go.
        snap.upsert_node(node("c").alloc("1", "8Gi", 110).spec());
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &ms);
        assert!(out.fits, "{}", out.message);
        assert_eq!(out.placed.len(), 4);
        assert_eq!(snap.pod_count(), 4);
    }

    #[test]
    fn two_gangs_on_room_for_one() {
        let f = fw();
        let mut snap = Snapshot::new();
        for n in ["a", "b"] {
            snap.upsert_node(node(n).alloc("4", "8Gi", 110).spec());
        }
        group(&mut snap, "x", 6, None);
        group(&mut snap, "y", 6, None);
        let x = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &members("x", 6, "1"));
        let y = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &members("y", 6, "1"));
        assert!(x.fits && x.placed.len() == 6);
        assert!(!y.fits && y.placed.is_empty() && y.unplaced.len() == 6);
        assert_eq!(snap.pod_count(), 6);
    }

    #[test]
    fn topology_picks_a_domain_that_holds_the_whole_group() {
        let f = fw();
        let mut snap = Snapshot::new();
        // zone-a: room for 4; zone-b: room for 8 (in two nodes); zone-c: room for 16.
        snap.upsert_node(node("a1").label("zone", "zone-a").alloc("4", "8Gi", 110).spec());
        snap.upsert_node(node("b1").label("zone", "zone-b").alloc("4", "8Gi", 110).spec());
        snap.upsert_node(node("b2").label("zone", "zone-b").alloc("4", "8Gi", 110).spec());
        snap.upsert_node(node("c1").label("zone", "zone-c").alloc("16", "32Gi", 110).spec());
        group(&mut snap, "t", 8, Some("zone"));
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &members("t", 8, "1"));
        assert!(out.fits, "{}", out.message);
        let zones: BTreeSet<&str> = out.placed.iter().map(|p| snap.node(&p.node).and_then(|n| n.node.labels.get("zone")).map(String::as_str).unwrap_or("")).collect();
        assert_eq!(zones.len(), 1, "{zones:?}");
        assert!(!zones.contains("zone-a"));
        assert!(snap.groups.placement.is_none());
        assert_eq!(snap.pod_count(), 8);
        // Nowhere big enough: nothing placed, and the message says so.
        group(&mut snap, "big", 40, Some("zone"));
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &members("big", 40, "1"));
        assert!(!out.fits);
        assert!(out.message.contains("no domain of topology key \"zone\""), "{}", out.message);
        assert_eq!(out.unplaced.len(), 40);
        assert_eq!(snap.pod_count(), 8);
    }

    #[test]
    fn refusals_with_their_messages() {
        let f = fw();
        let mut snap = Snapshot::new();
        snap.upsert_node(node("a").spec());
        // No group object yet.
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &members("late", 2, "100m"));
        assert_eq!(out.message, "waiting for pod's pod group \"late\" to appear in scheduling queue");
        // Two schedulers.
        group(&mut snap, "mixed", 2, None);
        let mut ms = members("mixed", 2, "100m");
        let mut other = (*ms[1]).clone();
        other.scheduler_name = "other".into();
        ms[1] = Arc::new(other);
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &ms);
        assert!(out.message.contains("different schedulers (default-scheduler, other)"), "{}", out.message);
        // Fewer members than minCount.
        group(&mut snap, "few", 3, None);
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &members("few", 2, "100m"));
        assert_eq!(out.message, "waiting for minCount pods from a gang to appear in scheduling queue");
        // Members already bound count toward minCount.
        snap.add_pod(member("few-bound", "few", "100m").node("a").info());
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &members("few", 2, "100m"));
        assert!(out.fits && out.bound == 1, "{}", out.message);
        // v1alpha1 through the label, with minResources the cluster cannot give.
        snap.groups.upsert(GroupApi::V1alpha1, "default", "co", GroupPolicy::from_v1alpha1("default", "co", &serde_json::json!({"spec": {"minMember": 1, "minResources": {"cpu": "100"}}})));
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &[pod("co-0").label(POD_GROUP_LABEL, "co").info()]);
        assert!(out.message.contains("minResources cannot be met: cpu"), "{}", out.message);
    }

    #[test]
    fn preemption_evicts_for_the_whole_group_or_nobody() {
        let f = fw();
        let mut snap = Snapshot::new();
        snap.upsert_node(node("a").alloc("2", "8Gi", 110).spec());
        snap.upsert_node(node("b").alloc("2", "8Gi", 110).spec());
        for (i, n) in ["a", "a", "b", "b"].iter().enumerate() {
            snap.add_pod(pod(&format!("low{i}")).req("1", "100Mi").priority(1).node(n).info());
        }
        let high = |g: &str, n: usize| -> Vec<Arc<PodInfo>> { (0..n).map(|i| member(&format!("{g}-{i}"), g, "1").priority(100).info()).collect() };
        group(&mut snap, "hi", 2, None);
        let ms = high("hi", 2);
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &ms);
        assert!(!out.fits && out.preemptable);
        let gp = preempt_for_group(&f, &snap, &ms, &out).expect("preemption for the group");
        assert_eq!(gp.victims.len(), 2, "exactly enough victims: {:?}", gp.victims.iter().map(|v| v.key()).collect::<Vec<_>>());
        assert_eq!(gp.nominations.len(), 2);
        // Five members cannot fit even with every low pod gone: nobody is evicted.
        group(&mut snap, "huge", 5, None);
        let ms = high("huge", 5);
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &ms);
        assert!(!out.fits);
        assert!(preempt_for_group(&f, &snap, &ms, &out).is_none());
        // Equal priority: nothing to preempt.
        let ms: Vec<Arc<PodInfo>> = (0..2).map(|i| member(&format!("hi-{i}"), "hi", "1").priority(1).info()).collect();
        let out = schedule_group(&mut SnapshotHost { fw: &f, snap: &mut snap }, &ms);
        assert!(preempt_for_group(&f, &snap, &ms, &out).is_none());
        assert_eq!(snap.pod_count(), 4);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
            /// Random gangs and single pods on random clusters, through
            /// `simulate`: no group is ever partly bound below its minCount,
            /// no node holds more than it has.
            #[test]
            fn never_a_partial_gang_never_over_capacity(
                nodes in prop::collection::vec(1u32..=4, 1..6),
                groups in prop::collection::vec((1usize..=6, 1u32..=6, 1u32..=3), 0..4),
                singles in prop::collection::vec(1u32..=3, 0..6),
            ) {
                let mut cluster = crate::offline::Cluster::default();
                for (i, cpu) in nodes.iter().enumerate() {
                    cluster.snapshot.upsert_node(node(&format!("n{i}")).alloc(&cpu.to_string(), "64Gi", 110).spec());
                }
                let mut t = 0;
                for (gi, (size, min, half_cpus)) in groups.iter().enumerate() {
                    let name = format!("g{gi}");
                    group(&mut cluster.snapshot, &name, (*min).min(*size as u32), None);
                    for m in 0..*size {
                        t += 1;
                        let mut b = member(&format!("{name}-{m}"), &name, &format!("{}m", half_cpus * 500));
                        b.pod.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + t).expect("time")));
                        cluster.pending.push(b.info());
                    }
                }
                for (i, half_cpus) in singles.iter().enumerate() {
                    cluster.pending.push(pod(&format!("s{i}")).req(&format!("{}m", half_cpus * 500), "100Mi").info());
                }
                let config = Config::from_raw(KubeSchedulerConfiguration::default()).expect("default config");
                let mut engine = crate::offline::Engine::new(&config, cluster, 3);
                let sim = engine.simulate();
                let snap = &engine.cluster.snapshot;
                for n in &snap.nodes {
                    prop_assert!(n.requested.milli_cpu <= n.node.allocatable.milli_cpu, "{} over capacity", n.name());
                }
                for (gi, (size, min, _)) in groups.iter().enumerate() {
                    let name = format!("g{gi}");
                    let bound = sim.placements.iter().filter(|p| p.pod.starts_with(&format!("default/{name}-")) && p.node.is_some()).count();
                    let min = (*min).min(*size as u32) as usize;
                    prop_assert!(bound == 0 || bound >= min, "group {name}: {bound} bound, minCount {min}");
                }
            }
        }
    }
}
