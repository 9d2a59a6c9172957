//! PreFilter and Filter (required affinity and anti-affinity, and the
//! symmetry of existing pods' required anti-affinity), with the
//! AddPod/RemovePod extensions preemption and nominated pods rely on.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cache::{JournalMark, Snapshot};
use crate::framework::{filter_each, CycleState, PreFilterNodes, Status};
use berth_model::pod::AffinityTerm;
use berth_model::selector::Labels;
use berth_model::{NodeInfo, PodInfo};

use super::common::*;
use super::{InterPodAffinity, REASON_AFFINITY, REASON_ANTI_AFFINITY, REASON_EXISTING_ANTI_AFFINITY};

/// The PreFilter contributions of `other` (on some node) for the incoming `pod`.
pub(super) fn filter_contributions<'a>(pod: &'a PodInfo, other: &'a PodInfo, ns_labels: &Labels, snap: &Snapshot, out: &mut Vec<Contribution<'a>>, delta: i64) {
    for t in &other.required_anti_affinity {
        if existing_term_matches(t, pod, ns_labels) {
            out.push((Kind::ExistingAnti, &t.topology_key, delta));
        }
    }
    if matches_all(&pod.required_affinity, other, snap) {
        for t in &pod.required_affinity {
            out.push((Kind::Affinity, &t.topology_key, delta));
        }
    }
    for t in &pod.required_anti_affinity {
        if incoming_term_matches(t, other, snap) {
            out.push((Kind::Anti, &t.topology_key, delta));
        }
    }
}

/// A change to the counts made by AddPod/RemovePod, kept beside the shared counts.
#[derive(Clone, Debug)]
pub(super) struct Delta {
    pub(super) kind: Kind,
    pub(super) key: String,
    pub(super) value: String,
    pub(super) amount: i64,
}

/// PreFilter state: the shared counts, the incoming pod's terms resolved to
/// them, and the changes AddPod/RemovePod made on this copy.
#[derive(Clone, Debug)]
pub(super) struct PreFilterState {
    pub(super) domains: Arc<Domains>,
    pub(super) slots: Arc<Vec<Slot>>,
    /// Each slot's index by (kind, key index).
    pub(super) slot_of: Arc<HashMap<(Kind, usize), usize, FxBuild>>,
    /// Per required affinity term: its key's table and its slot (None: no count).
    pub(super) affinity: Vec<(usize, Option<usize>)>,
    /// Per required anti-affinity term: the same.
    pub(super) anti: Vec<(usize, Option<usize>)>,
    /// The slots of existing pods' anti-affinity.
    pub(super) existing: Vec<usize>,
    /// Pairs with a count, per kind (ExistingAnti, Affinity, Anti), deltas included.
    pub(super) len: [usize; 3],
    /// The incoming pod matches all its own required affinity terms.
    pub(super) self_match: bool,
    pub(super) deltas: Vec<Delta>,
    /// The snapshot the counts were brought up to date with: its nodes are
    /// those the domain tables were built from.
    pub(super) mark: JournalMark,
}

pub(super) fn kind_index(kind: Kind) -> usize {
    match kind {
        Kind::ExistingAnti => 0,
        Kind::Affinity => 1,
        Kind::Anti | Kind::Score => 2,
    }
}

impl PreFilterState {
    /// The shared count of (kind, key, value).
    pub(super) fn base_count(&self, kind: Kind, key: &str, value: &str) -> i64 {
        self.domains
            .by_key
            .get(key)
            .and_then(|&k| self.slot_of.get(&(kind, k)))
            .and_then(|&s| self.slots.get(s))
            .and_then(|s| self.domains.keys[s.key].ids.get(value).map(|&d| s.get(d)))
            .unwrap_or(0)
    }

    pub(super) fn delta_sum(&self, kind: Kind, key: &str, value: &str) -> i64 {
        self.deltas.iter().filter(|d| d.kind == kind && d.key == key && d.value == value).map(|d| d.amount).sum()
    }

    /// The count of (kind, key, the node's value of key); None when the node lacks the key.
    pub(super) fn count(&self, kind: Kind, k: usize, slot: Option<usize>, ni: &NodeInfo) -> Option<i64> {
        let dom = self.domains.domain(k, ni);
        if dom == NO_DOMAIN {
            return None;
        }
        let mut c = slot.map_or(0, |s| self.slots[s].get(dom));
        if !self.deltas.is_empty() {
            let key = &self.domains.keys[k].key;
            if let Some(v) = ni.node.labels.get(key) {
                c += self.delta_sum(kind, key, v);
            }
        }
        Some(c)
    }

    /// Counts `other` on `ni` with `delta` (±1) on this copy.
    pub(super) fn update_with_pod(&mut self, pod: &PodInfo, other: &PodInfo, ni: &NodeInfo, delta: i64, snap: &Snapshot) {
        let ns_labels = namespace_labels(snap, &pod.namespace);
        let mut found = Vec::new();
        filter_contributions(pod, other, ns_labels, snap, &mut found, delta);
        for (kind, key, amount) in found {
            let Some(value) = ni.node.labels.get(key) else { continue };
            let before = self.base_count(kind, key, value) + self.delta_sum(kind, key, value);
            let after = before + amount;
            let len = &mut self.len[kind_index(kind)];
            if before == 0 && after != 0 {
                *len += 1;
            } else if before != 0 && after == 0 {
                *len = len.saturating_sub(1);
            }
            match self.deltas.iter_mut().find(|d| d.kind == kind && d.key == key && d.value == *value) {
                Some(d) => d.amount += amount,
                None => self.deltas.push(Delta { kind, key: key.to_string(), value: value.clone(), amount }),
            }
        }
    }

    /// Does an existing pod's required anti-affinity forbid the node?
    pub(super) fn existing_forbids(&self, ni: &NodeInfo) -> bool {
        if self.deltas.is_empty() {
            return self.existing.iter().any(|&s| {
                let slot = &self.slots[s];
                let dom = self.domains.domain(slot.key, ni);
                dom != NO_DOMAIN && slot.get(dom) > 0
            });
        }
        // Slow path (preemption's copies): every key with a count, shared or changed here.
        let mut keys: Vec<&str> = self.existing.iter().map(|&s| self.domains.keys[self.slots[s].key].key.as_str()).collect();
        for d in self.deltas.iter().filter(|d| d.kind == Kind::ExistingAnti) {
            if !keys.contains(&d.key.as_str()) {
                keys.push(&d.key);
            }
        }
        keys.iter().any(|key| {
            ni.node
                .labels
                .get(*key)
                .is_some_and(|v| self.base_count(Kind::ExistingAnti, key, v) + self.delta_sum(Kind::ExistingAnti, key, v) > 0)
        })
    }

    /// Filter over nodes of the snapshot the tables were built from, for a
    /// pod without required affinity and with no AddPod/RemovePod changes:
    /// `check` with the domains read by node index.
    pub(super) fn filter_known(&self, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
        // (domain per node, count per domain) of each check, in Filter's order.
        let table = |k: usize, s: usize| (self.domains.keys[k].of_node.as_slice(), self.slots[s].counts.as_slice());
        let anti: Vec<(&[u32], &[i64])> = if self.len[2] != 0 { self.anti.iter().filter_map(|&(k, slot)| slot.map(|s| table(k, s))).collect() } else { Vec::new() };
        let existing: Vec<(&[u32], &[i64])> = if self.len[0] != 0 { self.existing.iter().map(|&s| table(self.slots[s].key, s)).collect() } else { Vec::new() };
        let hit = |list: &[(&[u32], &[i64])], i: usize| {
            list.iter().any(|(of_node, counts)| of_node.get(i).and_then(|&d| counts.get(d as usize)).is_some_and(|&c| c > 0))
        };
        nodes.retain(|&i| {
            if hit(&anti, i) {
                rejected.push((i, Status::unschedulable(REASON_ANTI_AFFINITY)));
                return false;
            }
            if hit(&existing, i) {
                rejected.push((i, Status::unschedulable(REASON_EXISTING_ANTI_AFFINITY)));
                return false;
            }
            true
        });
    }

    /// Filter on one node.
    pub(super) fn check(&self, ni: &NodeInfo) -> Option<Status> {
        // The incoming pod's required affinity.
        if !self.affinity.is_empty() {
            let mut pods_exist = true;
            for &(k, slot) in &self.affinity {
                match self.count(Kind::Affinity, k, slot, ni) {
                    None => return Some(Status::unresolvable(REASON_AFFINITY)),
                    Some(c) => {
                        if c <= 0 {
                            pods_exist = false;
                        }
                    }
                }
            }
            // The first pod of a group with affinity to itself may go
            // anywhere that has the topology keys.
            let first_of_collection = self.len[1] == 0 && self.self_match;
            if !pods_exist && !first_of_collection {
                return Some(Status::unresolvable(REASON_AFFINITY));
            }
        }
        // The incoming pod's required anti-affinity.
        if self.len[2] != 0 {
            for &(k, slot) in &self.anti {
                if self.count(Kind::Anti, k, slot, ni).is_some_and(|c| c > 0) {
                    return Some(Status::unschedulable(REASON_ANTI_AFFINITY));
                }
            }
        }
        // Existing pods' required anti-affinity.
        if self.len[0] != 0 && self.existing_forbids(ni) {
            return Some(Status::unschedulable(REASON_EXISTING_ANTI_AFFINITY));
        }
        None
    }
}

pub(super) fn pre_filter(pl: &InterPodAffinity, state: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
    let has_terms = !pod.required_affinity.is_empty() || !pod.required_anti_affinity.is_empty();
    if !has_terms && snap.pods_with_required_anti_affinity() == 0 {
        // No existing pod's anti-affinity to count and no term of its own.
        return (Status::skip(), None);
    }
    let ns_labels = namespace_labels(snap, &pod.namespace);
    let keep = !pod.required_affinity.iter().chain(&pod.required_anti_affinity).any(reads_namespaces);
    let owner = if keep { owner_of(pod, ns_labels) } else { None };
    let mut t = take_tally(&pl.filter_cache, owner.as_ref());
    t.refresh(owner, snap, |ni, out| {
        if !has_terms && ni.pods_with_required_anti_affinity == 0 {
            return;
        }
        for p in &ni.pods {
            if !has_terms && p.required_anti_affinity.is_empty() {
                continue;
            }
            filter_contributions(pod, p, ns_labels, snap, out, 1);
        }
    });
    let mut len = [0; 3];
    let mut existing = Vec::new();
    for (s, slot) in t.slots.iter().enumerate() {
        len[kind_index(slot.kind)] += slot.nonzero;
        if slot.kind == Kind::ExistingAnti && slot.nonzero > 0 {
            existing.push(s);
        }
    }
    if len[0] == 0 && !has_terms {
        put_tally(&pl.filter_cache, t);
        return (Status::skip(), None);
    }
    let slot_of = Arc::new(slot_index(&t.slots));
    let mut resolve = |terms: &[AffinityTerm], kind: Kind| -> Vec<(usize, Option<usize>)> {
        terms
            .iter()
            .map(|term| {
                let k = key_index(&mut t.domains, &term.topology_key, snap);
                (k, slot_of.get(&(kind, k)).copied())
            })
            .collect()
    };
    let affinity = resolve(&pod.required_affinity, Kind::Affinity);
    let anti = resolve(&pod.required_anti_affinity, Kind::Anti);
    state.insert(PreFilterState {
        domains: t.domains.clone(),
        slots: t.slots.clone(),
        slot_of,
        affinity,
        anti,
        existing,
        len,
        self_match: matches_all(&pod.required_affinity, pod, snap),
        deltas: Vec::new(),
        mark: snap.journal_mark(),
    });
    put_tally(&pl.filter_cache, t);
    (Status::success(), None)
}

pub(super) fn add_pod(state: &mut CycleState, pod: &PodInfo, added: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
    let Some(s) = state.get_mut::<PreFilterState>() else { return Status::error("InterPodAffinity: no PreFilter state") };
    s.update_with_pod(pod, added, node, 1, snap);
    Status::success()
}

pub(super) fn remove_pod(state: &mut CycleState, pod: &PodInfo, removed: &Arc<PodInfo>, node: &NodeInfo, snap: &Snapshot) -> Status {
    let Some(s) = state.get_mut::<PreFilterState>() else { return Status::error("InterPodAffinity: no PreFilter state") };
    s.update_with_pod(pod, removed, node, -1, snap);
    Status::success()
}

pub(super) fn filter(state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
    let Some(s) = state.get::<PreFilterState>() else { return Status::error("InterPodAffinity: no PreFilter state") };
    s.check(node).unwrap_or_else(Status::success)
}

pub(super) fn filter_nodes(pl: &InterPodAffinity, state: &CycleState, pod: &PodInfo, snap: &Snapshot, nodes: &mut Vec<usize>, rejected: &mut Vec<(usize, Status)>) {
    let Some(s) = state.get::<PreFilterState>() else {
        filter_each(pl, state, pod, snap, nodes, rejected, |_, _| true);
        return;
    };
    if s.deltas.is_empty() && s.mark == snap.journal_mark() && s.affinity.is_empty() {
        // The nodes are those of the tables: a node's domain is read by its index.
        s.filter_known(nodes, rejected);
        return;
    }
    nodes.retain(|&i| match s.check(&snap.nodes[i]) {
        None => true,
        Some(st) => {
            rejected.push((i, st));
            false
        }
    });
}


#[cfg(test)]
mod tests {
    use super::*;
    use super::super::test_support::*;


    #[test]
    fn filter_table() {
        use Code::{Success as S, Unschedulable as U, UnschedulableAndUnresolvable as R};
        let zones = || vec![node("n1").label(ZONE, "a"), node("n2").label(ZONE, "b"), node("n3")];
        let web = |name: &str, n: &str| pod(name).label("app", "web").node(n);
        let no_ns: Namespaces = &[];
        let team_ns: Namespaces = &[("team", &[("tier", "x")]), ("default", &[("tier", "y")])];
        let cases: Vec<FilterCase> = vec![
            ("no terms anywhere", zones(), vec![web("e", "n1")], no_ns, pod("p"), vec![S, S, S]),
            ("affinity matches existing pod's zone", zones(), vec![web("e", "n1")], no_ns, pod("p").affinity(aff().req(term(&[("app", "web")], ZONE)).build()), vec![S, R, R]),
            ("affinity: node without the key", zones(), vec![web("e", "n1")], no_ns, pod("p").affinity(aff().req(term(&[("app", "web")], HOST)).build()), vec![S, R, R]),
            ("first pod of a collection", zones(), vec![], no_ns, pod("p").label("app", "web").affinity(aff().req(term(&[("app", "web")], ZONE)).build()), vec![S, S, R]),
            ("no match and not matching itself", zones(), vec![], no_ns, pod("p").affinity(aff().req(term(&[("app", "web")], ZONE)).build()), vec![R, R, R]),
            (
                "one pod must match all affinity terms",
                zones(),
                vec![web("e1", "n1"), pod("e2").label("tier", "db").node("n1")],
                no_ns,
                pod("p").affinity(aff().req(term(&[("app", "web")], ZONE)).req(term(&[("tier", "db")], ZONE)).build()),
                vec![R, R, R],
            ),
            (
                "affinity in another namespace does not count",
                zones(),
                vec![web("e", "n1").namespace("other")],
                no_ns,
                pod("p").affinity(aff().req(term(&[("app", "web")], ZONE)).build()),
                vec![R, R, R],
            ),
            ("anti-affinity", zones(), vec![web("e", "n1")], no_ns, pod("p").affinity(aff().anti(term(&[("app", "web")], ZONE)).build()), vec![U, S, S]),
            (
                "anti-affinity ignores other namespaces",
                zones(),
                vec![web("e", "n1").namespace("other")],
                no_ns,
                pod("p").affinity(aff().anti(term(&[("app", "web")], ZONE)).build()),
                vec![S, S, S],
            ),
            (
                "anti-affinity with namespaceSelector",
                zones(),
                vec![web("e", "n1").namespace("team"), web("f", "n2").namespace("unknown")],
                team_ns,
                pod("p").affinity(aff().anti(term_ns_sel(&[("app", "web")], ZONE, &[("tier", "x")])).build()),
                vec![U, S, S],
            ),
            (
                "anti-affinity with empty namespaceSelector selects all namespaces",
                zones(),
                vec![web("f", "n2").namespace("unknown")],
                team_ns,
                pod("p").affinity(aff().anti(term_ns_sel(&[("app", "web")], ZONE, &[])).build()),
                vec![S, U, S],
            ),
            (
                "existing pod's anti-affinity (symmetry)",
                zones(),
                vec![pod("e").node("n1").affinity(aff().anti(term(&[("app", "web")], ZONE)).build())],
                no_ns,
                pod("p").label("app", "web"),
                vec![U, S, S],
            ),
            (
                "existing pod's anti-affinity in another namespace selects only its own",
                zones(),
                vec![pod("e").namespace("other").node("n1").affinity(aff().anti(term(&[("app", "web")], ZONE)).build())],
                no_ns,
                pod("p").label("app", "web"),
                vec![S, S, S],
            ),
            (
                "existing pod's anti-affinity with namespaceSelector on the incoming pod's namespace",
                zones(),
                vec![pod("e").namespace("team").node("n2").affinity(aff().anti(term_ns_sel(&[("app", "web")], ZONE, &[("tier", "y")])).build())],
                team_ns,
                pod("p").label("app", "web"),
                vec![S, U, S],
            ),
            (
                "affinity checked before anti-affinity",
                zones(),
                vec![web("e", "n1")],
                no_ns,
                pod("p").affinity(aff().req(term(&[("app", "web")], ZONE)).anti(term(&[("app", "web")], ZONE)).build()),
                vec![U, R, R],
            ),
        ];
        let pl = InterPodAffinity::default();
        for (name, nodes, pods, ns, p, want) in cases {
            let snap = snap_with_ns(&nodes, &pods, ns);
            assert_eq!(filter_codes(&pl, &snap, &p.info()), want, "{name}");
        }
    }

    #[test]
    fn filter_reasons() {
        let pl = InterPodAffinity::default();
        let snap = snapshot(&[node("n1").label(ZONE, "a"), node("n2")], &[pod("e").label("app", "web").node("n1")]);
        let p = pod("p").affinity(aff().anti(term(&[("app", "web")], ZONE)).build()).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        assert_eq!(pl.filter(&st, &p, &snap.nodes[0]).message(), REASON_ANTI_AFFINITY);
        let p = pod("p").affinity(aff().req(term(&[("app", "db")], ZONE)).build()).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        assert_eq!(pl.filter(&st, &p, &snap.nodes[1]).message(), REASON_AFFINITY);
        let snap = snapshot(&[node("n1")], &[pod("e").node("n1").affinity(aff().anti(term(&[], HOST)).build())]);
        let p = pod("p").info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        assert_eq!(pl.filter(&st, &p, &snap.nodes[0]).message(), REASON_EXISTING_ANTI_AFFINITY);
    }

    #[test]
    fn add_and_remove_pod() {
        let pl = InterPodAffinity::default();
        let blocker = pod("e").node("n1").affinity(aff().anti(term(&[("app", "web")], HOST)).build());
        let snap = snapshot(&[node("n1"), node("n2").label(ZONE, "a")], std::slice::from_ref(&blocker));
        let p = pod("p").label("app", "web").affinity(aff().req(term(&[("app", "db")], ZONE)).build()).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p, &snap).0.is_success());
        let codes = |st: &CycleState| snap.nodes.iter().map(|n| pl.filter(st, &p, n).code).collect::<Vec<_>>();
        assert_eq!(codes(&st), vec![Code::UnschedulableAndUnresolvable; 2]);
        // A pod matching the affinity is nominated to n2; the original state is untouched.
        let mut st2 = st.clone();
        let db = pod("db").label("app", "db").node("n2").info();
        assert!(pl.add_pod(&mut st2, &p, &db, &snap.nodes[1], &snap).is_success());
        assert_eq!(codes(&st2), vec![Code::UnschedulableAndUnresolvable, Code::Success]);
        assert_eq!(codes(&st), vec![Code::UnschedulableAndUnresolvable; 2]);
        // Removing the blocker (preemption) lifts the existing anti-affinity on n1.
        let p2 = pod("p2").label("app", "web").info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p2, &snap).0.is_success());
        assert_eq!(pl.filter(&st, &p2, &snap.nodes[0]).code, Code::Unschedulable);
        let mut st3 = st.clone();
        assert!(pl.remove_pod(&mut st3, &p2, &blocker.info(), &snap.nodes[0], &snap).is_success());
        assert!(pl.filter(&st3, &p2, &snap.nodes[0]).is_success());
        assert!(pl.add_pod(&mut st3, &p2, &blocker.info(), &snap.nodes[0], &snap).is_success());
        assert_eq!(pl.filter(&st3, &p2, &snap.nodes[0]).code, Code::Unschedulable);
        // The incoming pod's own anti-affinity against an added pod.
        let p3 = pod("p3").affinity(aff().anti(term(&[("app", "db")], ZONE)).build()).info();
        let mut st = CycleState::new();
        assert!(pl.pre_filter(&mut st, &p3, &snap).0.is_success());
        assert!(pl.filter(&st, &p3, &snap.nodes[1]).is_success());
        assert!(pl.add_pod(&mut st, &p3, &db, &snap.nodes[1], &snap).is_success());
        assert_eq!(pl.filter(&st, &p3, &snap.nodes[1]).code, Code::Unschedulable);
        assert!(pl.remove_pod(&mut st, &p3, &db, &snap.nodes[1], &snap).is_success());
        assert!(pl.filter(&st, &p3, &snap.nodes[1]).is_success());
    }


    /// AddPod/RemovePod on a copy of the state give the verdicts of a
    /// PreFilter over the snapshot with the pod added or removed.
    #[test]
    fn add_and_remove_match_a_recount() {
        let nodes: Vec<NodeBuilder> = (0..8).map(|i| node(&format!("n{i}")).label(HOST, &format!("n{i}")).label(ZONE, &format!("z{}", i % 3))).collect();
        let mut r = Rng(12345);
        let shapes: Vec<PodBuilder> = (0..8).map(|k| random_shape(&mut r, k)).collect();
        for round in 0..60 {
            let mut snap = snapshot(&nodes, &[]);
            for j in 0..6 {
                let mut pi = (*shapes[r.below(8)].info()).clone();
                pi.uid = format!("e{j}");
                pi.node_name = Some(format!("n{}", r.below(8)));
                snap.add_pod(Arc::new(pi));
            }
            let p = shapes[r.below(8)].info();
            let pl = InterPodAffinity::default();
            let mut st = CycleState::new();
            if !pl.pre_filter(&mut st, &p, &snap).0.is_success() {
                continue;
            }
            let mut moved = (*shapes[r.below(8)].info()).clone();
            moved.uid = "moved".into();
            let n = r.below(8);
            moved.node_name = Some(format!("n{n}"));
            let moved = Arc::new(moved);
            // Added.
            let mut added = st.clone();
            assert!(pl.add_pod(&mut added, &p, &moved, &snap.nodes[n], &snap).is_success());
            let mut with = snap.clone();
            with.add_pod(moved.clone());
            let codes = |st: &CycleState, s: &Snapshot| s.nodes.iter().map(|ni| pl.filter(st, &p, ni).code).collect::<Vec<_>>();
            assert_eq!(codes(&added, &snap), filter_codes(&InterPodAffinity::default(), &with, &p), "round {round}: add");
            // And removed again.
            assert!(pl.remove_pod(&mut added, &p, &moved, &snap.nodes[n], &snap).is_success());
            assert_eq!(codes(&added, &snap), codes(&st, &snap), "round {round}: add then remove");
            // Removing an existing pod.
            let victim = snap.nodes.iter().flat_map(|ni| ni.pods.iter()).next().cloned();
            if let Some(v) = victim {
                let vn = snap.node_index(v.node_name.as_deref().unwrap_or("")).unwrap_or(0);
                let mut removed = st.clone();
                assert!(pl.remove_pod(&mut removed, &p, &v, &snap.nodes[vn], &snap).is_success());
                let mut without = snap.clone();
                without.remove_pod(&v.uid);
                assert_eq!(codes(&removed, &snap), filter_codes(&InterPodAffinity::default(), &without, &p), "round {round}: remove");
            }
        }
    }
}
