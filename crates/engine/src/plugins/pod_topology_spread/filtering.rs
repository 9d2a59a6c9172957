//! PreFilter and Filter (hard constraints, `DoNotSchedule`), with the
//! AddPod/RemovePod extensions preemption and nominated pods rely on.

use std::sync::Arc;

use crate::cache::{JournalMark, Snapshot};
use crate::framework::{filter_each, CycleState, PreFilterNodes, Status};
use berth_model::pod::{SpreadConstraint, WhenUnsatisfiable};
use berth_model::{NodeInfo, PodInfo};

use super::common::*;
use super::{PodTopologySpread, REASON_CONSTRAINTS, REASON_MISSING_LABEL};

/// What PreFilter computed that never changes within the cycle.
#[derive(Debug)]
pub(super) struct HardConstraint {
    pub(super) c: SpreadConstraint,
    /// The incoming pod matches the constraint's selector.
    pub(super) self_match: bool,
    /// The nodes' domains (counted nodes have every constraint's key).
    pub(super) layout: Arc<Layout>,
}

/// Per-cycle counts of one hard constraint.
#[derive(Clone, Debug)]
pub(super) struct Counts {
    /// Matching pods per domain id (0 for domains not present).
    pub(super) counts: Vec<i64>,
    /// Domains of nodes that pass the inclusion policies and have every key.
    pub(super) present: Vec<bool>,
    /// Number of present domains.
    pub(super) domains: i64,
    /// Smallest count over present domains (i64::MAX when there is none).
    pub(super) min: i64,
}

impl Counts {
    pub(super) fn recompute_min(&mut self) {
        self.min = self.counts.iter().zip(&self.present).filter(|(_, p)| **p).map(|(c, _)| *c).min().unwrap_or(i64::MAX);
    }

    /// Matching pods of domain `d` (0 for a domain not present or unknown).
    pub(super) fn count(&self, d: u32) -> i64 {
        let d = d as usize;
        if self.present.get(d).copied().unwrap_or(false) { self.counts[d] } else { 0 }
    }
}

/// One hard constraint's Filter table: each node's domain, whether each
/// domain is within maxSkew, and whether a domain unknown to it would be.
pub(super) type DomainVerdicts<'a> = (&'a [u32], Vec<bool>, bool);

/// Why node `i` fails by the tables of every hard constraint: None when it
/// passes, else the first failing constraint's: true for a missing key
/// (unresolvable), false for a domain over maxSkew.
pub(super) fn rejection(tables: &[DomainVerdicts], i: usize) -> Option<bool> {
    for (dom, ok, ok_unknown) in tables {
        let d = dom[i];
        if d == MISSING {
            return Some(true);
        }
        if !ok.get(d as usize).copied().unwrap_or(*ok_unknown) {
            return Some(false);
        }
    }
    None
}

/// PreFilter state: matching pods per domain and the global minimum, per
/// hard constraint. Cloned per nominated-pod and preemption trial, so the
/// fixed part is shared.
///
/// The minimum is kept exact across AddPod/RemovePod. Upstream tracks only two
/// "critical paths", which can overstate the minimum after several AddPods
/// when more than two domains tie for it (and which ones it keeps depends on
/// Go's map order); where its two paths are right, both agree.
#[derive(Clone, Debug)]
pub(super) struct PreFilterState {
    pub(super) fixed: Arc<Vec<HardConstraint>>,
    pub(super) counts: Vec<Counts>,
    /// The snapshot's journal when the layouts were read: while the snapshot
    /// can say what changed since, its node indexes are the layouts' ones.
    pub(super) mark: JournalMark,
}

impl PreFilterState {
    /// Per constraint: each node's domain, and whether each domain (then an
    /// unknown one) is within maxSkew; None unless the layouts still hold
    /// for `snap` (nothing changed since PreFilter).
    pub(super) fn domain_verdicts<'a>(&'a self, snap: &Snapshot) -> Option<Vec<DomainVerdicts<'a>>> {
        if !same_nodes(snap, self.mark, false) || self.fixed.iter().any(|f| f.layout.dom.len() != snap.nodes.len()) {
            return None;
        }
        let tables = self
            .fixed
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let limit = f.c.max_skew - i64::from(f.self_match) + self.min_match(i);
                let k = &self.counts[i];
                let ok = (0..k.counts.len()).map(|d| k.count(d as u32) <= limit).collect();
                (f.layout.dom.as_slice(), ok, 0 <= limit)
            })
            .collect();
        Some(tables)
    }

    /// The global minimum of constraint `i`, with minDomains applied.
    pub(super) fn min_match(&self, i: usize) -> i64 {
        let c = &self.counts[i];
        if c.domains < self.fixed[i].c.min_domains { 0 } else { c.min }
    }

    /// Filter of one node given each constraint's domain for it.
    pub(super) fn verdict(&self, dom: impl Fn(usize, &HardConstraint) -> u32) -> Status {
        for (i, f) in self.fixed.iter().enumerate() {
            let d = dom(i, f);
            if d == MISSING {
                return Status::unresolvable(REASON_MISSING_LABEL);
            }
            if self.counts[i].count(d) + i64::from(f.self_match) - self.min_match(i) > f.c.max_skew {
                return Status::unschedulable(REASON_CONSTRAINTS);
            }
        }
        Status::success()
    }

    /// Counts (delta 1) or uncounts (delta -1) `other` on `node` (upstream
    /// `updateWithPod`, which, unlike PreFilter, does not look at deletionTimestamp).
    pub(super) fn update(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64) {
        if other.namespace != pod.namespace {
            return;
        }
        let labels = &node.node.labels;
        if !self.fixed.iter().all(|f| labels.contains_key(&f.c.topology_key)) {
            return;
        }
        let mut inc = Inclusion::new(pod, node);
        let fixed = Arc::clone(&self.fixed);
        for (i, f) in fixed.iter().enumerate() {
            if !f.c.selector.matches(&other.labels) || !inc.admits(&f.c) {
                continue;
            }
            // Every value of a snapshot node has an id.
            let Some(&d) = labels.get(&f.c.topology_key).and_then(|v| f.layout.ids.get(v)) else { continue };
            let c = &mut self.counts[i];
            let d = d as usize;
            if d >= c.counts.len() {
                continue;
            }
            if !c.present[d] {
                // As upstream, a domain first seen here becomes one.
                c.present[d] = true;
                c.domains += 1;
                c.counts[d] = 0;
            }
            let old = c.counts[d];
            let new = old + delta;
            c.counts[d] = new;
            if new < c.min {
                c.min = new;
            } else if old == c.min && new > old {
                c.recompute_min();
            }
        }
    }
}


pub(super) fn pre_filter(pl: &PodTopologySpread, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
    let cs = pl.constraints(pod, WhenUnsatisfiable::DoNotSchedule, snap);
    if cs.is_empty() {
        return (Status::skip(), None);
    }
    // Nodes count when they have every constraint's key.
    let keys: Vec<&str> = cs.iter().map(|c| c.topology_key.as_str()).collect();
    let required = pl.required(&keys);
    let every_node = cs.iter().all(|c| admits_every_node(pod, c));
    let mut layouts = Vec::with_capacity(cs.len());
    let mut counts = Vec::with_capacity(cs.len());
    let mut per_node = Vec::new();
    for c in &cs {
        let k = TallyKey { ns: &pod.namespace, sel: &c.selector, key: &c.topology_key, required: &required, missing_as_empty: false };
        pl.with_tally(&k, snap, |t| {
            let l = &t.layout;
            if every_node {
                // Every node with all the keys counts: the tally's sums are the counts.
                counts.push(Counts { counts: t.sums.clone(), present: l.present.clone(), domains: l.domains, min: i64::MAX });
            } else {
                counts.push(Counts { counts: vec![0; l.slots()], present: vec![false; l.slots()], domains: 0, min: i64::MAX });
                per_node.push(Arc::clone(&t.per_node));
            }
            layouts.push(Arc::clone(l));
        });
    }
    if !every_node {
        for (ni, node) in snap.nodes.iter().enumerate() {
            // Every layout has the same counted nodes (those with every key).
            if layouts.iter().any(|l| l.slot(ni) == MISSING) {
                continue;
            }
            let mut inc = Inclusion::new(pod, node);
            for (i, c) in cs.iter().enumerate() {
                if !inc.admits(c) {
                    continue;
                }
                let d = layouts[i].dom[ni] as usize;
                let k = &mut counts[i];
                if !k.present[d] {
                    k.present[d] = true;
                    k.domains += 1;
                }
                k.counts[d] += per_node[i][ni];
            }
        }
    }
    for k in counts.iter_mut() {
        k.recompute_min();
    }
    let fixed = cs
        .into_iter()
        .zip(layouts)
        .map(|(c, layout)| HardConstraint { self_match: c.selector.matches(&pod.labels), c, layout })
        .collect();
    state.insert(PreFilterState { fixed: Arc::new(fixed), counts, mark: snap.journal_mark() });
    (Status::success(), None)
}

pub(super) fn add_pod(state: &mut CycleState, pod: &PodInfo, added: &Arc<PodInfo>, node: &NodeInfo, _: &Snapshot) -> Status {
    match state.get_mut::<PreFilterState>() {
        Some(s) => {
            s.update(pod, added, node, 1);
            Status::success()
        }
        None => Status::error("PodTopologySpread: PreFilter state missing"),
    }
}

pub(super) fn remove_pod(state: &mut CycleState, pod: &PodInfo, removed: &Arc<PodInfo>, node: &NodeInfo, _: &Snapshot) -> Status {
    match state.get_mut::<PreFilterState>() {
        Some(s) => {
            s.update(pod, removed, node, -1);
            Status::success()
        }
        None => Status::error("PodTopologySpread: PreFilter state missing"),
    }
}

pub(super) fn filter(state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
    let Some(s) = state.get::<PreFilterState>() else {
        return Status::error("PodTopologySpread: PreFilter state missing");
    };
    s.verdict(|_, f| f.layout.domain_of(node, &f.c.topology_key))
}

pub(super) fn filter_nodes(pl: &PodTopologySpread, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
    let Some(tables) = state.get::<PreFilterState>().and_then(|s| s.domain_verdicts(snap)) else {
        return filter_each(pl, state, pod, snap, nodes, rejected, |_, _| true);
    };
    nodes.retain(|&i| match rejection(&tables, i) {
        None => true,
        Some(missing) => {
            rejected.push((i, if missing { Status::unresolvable(REASON_MISSING_LABEL) } else { Status::unschedulable(REASON_CONSTRAINTS) }));
            false
        }
    });
}

pub(super) fn retain_feasible(state: &CycleState, _: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>) -> bool {
    let Some(tables) = state.get::<PreFilterState>().and_then(|s| s.domain_verdicts(snap)) else { return false };
    // As filter_nodes, without the statuses.
    nodes.retain(|&i| rejection(&tables, i).is_none());
    true
}


#[cfg(test)]
mod tests {
    use super::*;
    use super::super::test_support::*;

    #[test]
    fn filter_table() {
        let zones = || vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2"), zn("node-y", "zone2")];
        let spread_2103 = || vec![on("a1", "node-a"), on("a2", "node-a"), on("b1", "node-b"), on("y1", "node-y"), on("y2", "node-y"), on("y3", "node-y")];
        let cases: Vec<FilterCase> = vec![
            ("no constraints: skip", pod("p"), zones(), vec![on("a1", "node-a")], vec!["node-a", "node-b", "node-x", "node-y"]),
            ("soft only: skip", incoming().spread(1, "zone", SA, &[("foo", "")]), zones(), spread_2103(), vec!["node-a", "node-b", "node-x", "node-y"]),
            ("no existing pods", incoming().spread(1, "zone", DNS, &[("foo", "")]), zones(), vec![], vec!["node-a", "node-b", "node-x", "node-y"]),
            ("zones 3/3 all fit", incoming().spread(1, "zone", DNS, &[("foo", "")]), zones(), vec![on("a1", "node-a"), on("b1", "node-b"), on("b2", "node-b"), on("x1", "node-x"), on("y1", "node-y"), on("y2", "node-y")], vec!["node-a", "node-b", "node-x", "node-y"]),
            ("zones 3/1: only zone2", incoming().spread(1, "zone", DNS, &[("foo", "")]), zones(), vec![on("a1", "node-a"), on("a2", "node-a"), on("b1", "node-b"), on("x1", "node-x")], vec!["node-x", "node-y"]),
            ("hosts 2/1/0/3: only node-x", incoming().spread(1, HOST, DNS, &[("foo", "")]), zones(), spread_2103(), vec!["node-x"]),
            ("hosts 2/1/0/3, maxSkew 2", incoming().spread(2, HOST, DNS, &[("foo", "")]), zones(), spread_2103(), vec!["node-b", "node-x"]),
            ("hosts 2/1/0/3, no self match", pod("p").spread(1, HOST, DNS, &[("foo", "")]), zones(), spread_2103(), vec!["node-b", "node-x"]),
            ("other namespace not counted", incoming().spread(1, HOST, DNS, &[("foo", "")]), zones(), vec![on("a1", "node-a").namespace("ns1"), on("b1", "node-b"), on("x1", "node-x"), on("y1", "node-y")], vec!["node-a"]),
            ("terminating not counted", incoming().spread(1, HOST, DNS, &[("foo", "")]), zones(), vec![on("a1", "node-a").terminating(), on("b1", "node-b"), on("x1", "node-x"), on("y1", "node-y")], vec!["node-a"]),
            ("missing zone label rejects node", incoming().spread(1, "zone", DNS, &[("foo", "")]), vec![zn("node-a", "zone1"), node("node-b")], vec![], vec!["node-a"]),
            ("node without all keys is not a domain", incoming().spread(1, "zone", DNS, &[("foo", "")]).spread(1, HOST, DNS, &[("foo", "")]), vec![zn("node-a", "zone1"), zn("node-x", "zone2").label(HOST, "")], vec![on("a1", "node-a")], vec!["node-x"]),
            ("two constraints both must hold", incoming().spread(1, "zone", DNS, &[("foo", "")]).spread(1, HOST, DNS, &[("foo", "")]), zones(), vec![on("a1", "node-a"), on("b1", "node-b"), on("x1", "node-x")], vec!["node-y"]),
            // minDomains 3 > 2 zones: the global minimum counts as 0.
            ("minDomains above domains", incoming().spread_constraint(tsc(1, "zone", DNS, Some(3), None, None)), zones(), vec![on("a1", "node-a"), on("x1", "node-x")], vec![]),
            ("minDomains met", incoming().spread_constraint(tsc(1, "zone", DNS, Some(2), None, None)), zones(), vec![on("a1", "node-a"), on("x1", "node-x")], vec!["node-a", "node-b", "node-x", "node-y"]),
            // nodeAffinityPolicy Honor: zone2 is not a domain (only zone1 nodes match), so the minimum
            // is zone1's count and node-a fits; node-x (count 0) too, NodeAffinity rejects it.
            ("affinity policy honor", incoming().node_selector("pool", "p").spread(1, "zone", DNS, &[("foo", "")]), vec![zn("node-a", "zone1").label("pool", "p"), zn("node-x", "zone2")], vec![on("a1", "node-a"), on("a2", "node-a")], vec!["node-a", "node-x"]),
            ("affinity policy ignore", incoming().node_selector("pool", "p").spread_constraint(tsc(1, "zone", DNS, None, Some("Ignore"), None)), vec![zn("node-a", "zone1").label("pool", "p"), zn("node-x", "zone2")], vec![on("a1", "node-a"), on("a2", "node-a")], vec!["node-x"]),
            ("taints policy ignore (default)", incoming().spread(1, "zone", DNS, &[("foo", "")]), vec![zn("node-a", "zone1"), zn("node-x", "zone2").taint("k", "v", "NoSchedule")], vec![on("a1", "node-a")], vec!["node-x"]),
            ("taints policy honor", incoming().spread_constraint(tsc(1, "zone", DNS, None, None, Some("Honor"))), vec![zn("node-a", "zone1"), zn("node-x", "zone2").taint("k", "v", "NoSchedule")], vec![on("a1", "node-a"), on("a2", "node-a")], vec!["node-a", "node-x"]),
            ("taints policy honor, tolerated", incoming().toleration("k", Some("v"), "NoSchedule").spread_constraint(tsc(1, "zone", DNS, None, None, Some("Honor"))), vec![zn("node-a", "zone1"), zn("node-x", "zone2").taint("k", "v", "NoSchedule")], vec![on("a1", "node-a"), on("a2", "node-a")], vec!["node-x"]),
        ];
        for (name, p, nodes, pods, want) in cases {
            assert_eq!(feasible(&p, &nodes, &pods), want, "{name}");
        }
    }

    #[test]
    fn filter_statuses() {
        let pl = plugin();
        let snap = snapshot(&[zn("node-a", "zone1"), node("node-b"), zn("node-x", "zone2")], &[on("a1", "node-a"), on("a2", "node-a")]);
        let p = incoming().spread(1, "zone", DNS, &[("foo", "")]).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        let s = pl.filter(&st, &p, &snap.nodes[0]);
        assert_eq!((s.code, s.message()), (Code::Unschedulable, REASON_CONSTRAINTS.to_string()));
        let s = pl.filter(&st, &p, &snap.nodes[1]);
        assert_eq!((s.code, s.message()), (Code::UnschedulableAndUnresolvable, REASON_MISSING_LABEL.to_string()));
        assert!(pl.filter(&st, &p, &snap.nodes[2]).is_success());
        assert_eq!(pl.filter(&CycleState::new(), &p, &snap.nodes[2]).code, Code::Error);
    }

    #[test]
    fn add_and_remove_pod() {
        let pl = plugin();
        let nodes = [node("node-a"), node("node-b"), node("node-c")];
        let snap = snapshot(&nodes, &[]);
        let p = incoming().spread(1, HOST, DNS, &[("foo", "")]).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        let fits = |st: &CycleState| -> Vec<bool> { snap.nodes.iter().map(|n| pl.filter(st, &p, n).is_success()).collect() };
        assert_eq!(fits(&st), vec![true, true, true]);
        // Adding on a and b leaves c at the minimum 0.
        let mut st2 = st.clone();
        for (i, name) in [(0, "x1"), (1, "x2")] {
            let added = on(name, snap.nodes[i].name()).info();
            assert!(pl.add_pod(&mut st2, &p, &added, &snap.nodes[i], &snap).is_success());
        }
        assert_eq!(fits(&st2), vec![false, false, true]);
        // The original state is untouched.
        assert_eq!(fits(&st), vec![true, true, true]);
        // Another on c: every domain at 1.
        let added = on("x3", "node-c").info();
        pl.add_pod(&mut st2, &p, &added, &snap.nodes[2], &snap);
        assert_eq!(fits(&st2), vec![true, true, true]);
        // Removing from a: a is the minimum again.
        let removed = on("x1", "node-a").info();
        pl.remove_pod(&mut st2, &p, &removed, &snap.nodes[0], &snap);
        assert_eq!(fits(&st2), vec![true, false, false]);
        // Pods of another namespace or not selected change nothing.
        for other in [on("o1", "node-a").namespace("other"), pod("o2").node("node-a").label("bar", "")] {
            pl.add_pod(&mut st2, &p, &other.info(), &snap.nodes[0], &snap);
            pl.add_pod(&mut st2, &p, &other.info(), &snap.nodes[0], &snap);
        }
        assert_eq!(fits(&st2), vec![true, false, false]);
    }

    #[test]
    fn add_pod_honors_inclusion_policies() {
        let pl = plugin();
        let nodes = [zn("node-a", "zone1").label("pool", "p"), zn("node-x", "zone2").label("pool", "p"), zn("node-z", "zone3")];
        let snap = snapshot(&nodes, &[]);
        let p = incoming().node_selector("pool", "p").spread(1, "zone", DNS, &[("foo", "")]).info();
        let mut st = CycleState::new();
        pl.pre_filter(&mut st, &p, &snap);
        // node-z does not match the pod's nodeSelector: a pod added there is not counted.
        pl.add_pod(&mut st, &p, &on("z1", "node-z").info(), &snap.nodes[2], &snap);
        assert!(pl.filter(&st, &p, &snap.nodes[0]).is_success());
        pl.add_pod(&mut st, &p, &on("a1", "node-a").info(), &snap.nodes[0], &snap);
        assert!(!pl.filter(&st, &p, &snap.nodes[0]).is_success());
        assert!(pl.filter(&st, &p, &snap.nodes[1]).is_success());
    }
}
