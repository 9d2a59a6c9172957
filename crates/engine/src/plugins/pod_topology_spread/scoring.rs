//! PreScore, Score and NormalizeScore (soft constraints, `ScheduleAnyway`),
//! with upstream's exact scores.

use std::sync::Arc;

use crate::cache::{JournalMark, Snapshot};
use crate::framework::{CycleState, NodeScore, ScorePlugin, Status, MAX_NODE_SCORE};
use berth_model::pod::{SpreadConstraint, WhenUnsatisfiable};
use berth_model::selector::Labels;
use berth_model::{NodeInfo, PodInfo};

use super::common::*;
use super::{PodTopologySpread, LABEL_HOSTNAME};

/// NormalizeScore for one constraint whose key is not the hostname, with
/// nodes missing the key ignored, while the snapshot is the one PreScore
/// read: a node's raw score is its domain's, so each domain present among
/// the scored nodes is normalized once and every node takes its domain's
/// value. False (and `scores` untouched) when that does not hold, or when a
/// raw score is not its domain's (then the caller normalizes node by node).
pub(super) fn normalize_by_domain(s: &PreScoreState, scores: &mut [NodeScore]) -> bool {
    let [sc] = s.constraints.as_slice() else { return false };
    if sc.hostname {
        return false;
    }
    let slot = sc.layout.slot.as_slice();
    // Per domain: its raw score when a scored node is in it, else ABSENT
    // (no raw score is negative). Flat tables, so that the pass over the
    // nodes is a few loads, a compare and a store each.
    const ABSENT: i64 = -1;
    let raw: Vec<i64> = sc.counts.iter().enumerate().map(|(d, c)| if c.is_some() { sc.domain_part(d as u32).round() as i64 } else { ABSENT }).collect();
    // The domains of the scored nodes (min and max are taken over them):
    // PreScore's nodes are the usual ones, so their domains are assumed and
    // every node normalized in the same pass that checks its raw score; the
    // domains actually seen are compared after.
    let bounds = |present: &dyn Fn(usize) -> bool| {
        let seen = || raw.iter().enumerate().filter(|&(d, &r)| r != ABSENT && present(d)).map(|(_, &r)| r);
        let (min, max) = (seen().min().unwrap_or(0), seen().max().unwrap_or(0));
        raw.iter().enumerate().map(|(d, &r)| if r == ABSENT || !present(d) { 0 } else if max == 0 { MAX_NODE_SCORE } else { MAX_NODE_SCORE * (max + min - r) / max }).collect::<Vec<i64>>()
    };
    // Per domain: (raw, normalized, seen among the scored nodes).
    let mut table: Vec<(i64, i64, bool)> = raw.iter().zip(bounds(&|_| true)).map(|(&r, v)| (r, v, false)).collect();
    let mut done = 0;
    for ns in scores.iter_mut() {
        // A node past the snapshot reads as UNKNOWN: neither a slot nor MISSING.
        let d = slot.get(ns.node).copied().unwrap_or(UNKNOWN);
        match table.get_mut(d as usize) {
            Some((r, v, seen)) if *r != ABSENT && *r == ns.score => {
                *seen = true;
                ns.score = *v;
            }
            // Missing the key: ignored, whatever its raw score.
            None if d == MISSING => ns.score = 0,
            _ => break,
        }
        done += 1;
    }
    let raw_of = |ns: &NodeScore| slot.get(ns.node).and_then(|&d| raw.get(d as usize)).copied();
    if done < scores.len() {
        // Not a raw score by domain: put back the ones overwritten (an
        // ignored node's raw score does not matter, it normalizes to 0).
        for ns in scores[..done].iter_mut() {
            ns.score = raw_of(ns).unwrap_or(0);
        }
        return false;
    }
    if table.iter().any(|&(r, _, seen)| r != ABSENT && !seen) {
        // Fewer domains than PreScore's: min and max over those seen.
        let norm = bounds(&|d| table.get(d).is_some_and(|t| t.2));
        for ns in scores.iter_mut() {
            let d = slot.get(ns.node).copied().unwrap_or(MISSING);
            ns.score = norm.get(d as usize).copied().unwrap_or(0);
        }
    }
    true
}

/// NormalizeScore: how many distinct raw scores are normalized once and
/// looked up.
pub(super) const SEEN_SCORES: usize = 16;

/// One soft constraint with its counts and weight.
#[derive(Debug)]
pub(super) struct SoftConstraint {
    pub(super) c: SpreadConstraint,
    /// The key is the hostname label: counted per node at Score time.
    pub(super) hostname: bool,
    /// The nodes' domains and which nodes count.
    pub(super) layout: Arc<Layout>,
    /// Matching pods per node index at PreScore (hostname keys).
    pub(super) per_node: Arc<Vec<i64>>,
    /// Matching pods per slot; None for domains of no scored node.
    pub(super) counts: Vec<Option<i64>>,
    /// log(number of domains + 2).
    pub(super) weight: f64,
}

impl SoftConstraint {
    /// The constraint's part of a node's raw score given its matching pods.
    pub(super) fn part(&self, cnt: i64) -> f64 {
        cnt as f64 * self.weight + (self.c.max_skew - 1) as f64
    }

    /// The part of a node in domain `d` (not hostname).
    pub(super) fn domain_part(&self, d: u32) -> f64 {
        self.part(self.counts.get(d as usize).copied().flatten().unwrap_or(0))
    }
}

/// PreScore state.
#[derive(Clone, Debug)]
pub(super) struct PreScoreState {
    pub(super) constraints: Arc<Vec<SoftConstraint>>,
    /// Nodes missing a topology key are ignored (always, except for system defaults).
    pub(super) require_all: bool,
    /// The snapshot's journal at PreScore (see `PreFilterState::mark`).
    pub(super) mark: JournalMark,
}

impl PreScoreState {
    pub(super) fn ignored(&self, labels: &Labels) -> bool {
        self.require_all && !self.constraints.iter().all(|s| labels.contains_key(&s.c.topology_key))
    }

    /// Is snapshot node `i` ignored, by the layouts (valid for the snapshot)?
    /// With require_all, a node counts in every layout or in none.
    pub(super) fn ignored_at(&self, i: usize) -> bool {
        self.require_all && self.constraints.first().is_some_and(|sc| sc.layout.slot(i) == MISSING)
    }
}


pub(super) fn pre_score(pl: &PodTopologySpread, state: &mut CycleState, pod: &PodInfo, nodes: &[usize], snap: &Snapshot) -> Status {
    if snap.nodes.is_empty() {
        return Status::skip();
    }
    let cs = pl.constraints(pod, WhenUnsatisfiable::ScheduleAnyway, snap);
    if cs.is_empty() {
        return Status::skip();
    }
    // Nodes missing a key are ignored, except under system defaults,
    // where a node without the key counts in the domain of the empty
    // value (upstream reads the missing label as "").
    let require_all = !pod.spread_constraints.is_empty() || !pl.system_defaulted;
    let owned: Vec<String> = if require_all { cs.iter().map(|c| c.topology_key.clone()).collect() } else { Vec::new() };
    let keys: Vec<&str> = owned.iter().map(String::as_str).collect();
    let required = pl.required(&keys);
    let every_node = cs.iter().all(|c| admits_every_node(pod, c));
    let mut soft = Vec::with_capacity(cs.len());
    let mut sums = Vec::with_capacity(cs.len());
    for c in cs {
        let k = TallyKey { ns: &pod.namespace, sel: &c.selector, key: &c.topology_key, required: &required, missing_as_empty: !require_all };
        let (layout, per_node, s) = pl.with_tally(&k, snap, |t| (Arc::clone(&t.layout), Arc::clone(&t.per_node), if every_node { t.sums.clone() } else { Vec::new() }));
        sums.push(s);
        soft.push(SoftConstraint {
            hostname: c.topology_key == LABEL_HOSTNAME,
            counts: vec![None; layout.slots()],
            c,
            layout,
            per_node,
            weight: 0.0,
        });
    }
    // Domains of the scored nodes; nodes missing a key are ignored. With
    // require_all a node counts in every layout or in none; else in all.
    let n = snap.nodes.len();
    let first = Arc::clone(&soft[0].layout);
    let counted = |ni: usize| !require_all || first.slot(ni) != MISSING;
    let mut seen: Vec<Vec<bool>> = soft.iter().map(|s| if s.hostname { Vec::new() } else { vec![false; s.counts.len()] }).collect();
    // The nodes ignored (with require_all: missing from the first
    // layout) are counted in the same pass as the first layout's domains.
    let mut ignored = 0;
    let mut ignored_counted = !require_all;
    // PreScore's nodes are distinct snapshot indexes: as many as the
    // snapshot has are all of them.
    let every_scored = nodes.len() == n;
    for (k, (s, seen)) in soft.iter().zip(seen.iter_mut()).enumerate().filter(|(_, (s, _))| !s.hostname) {
        let slot = s.layout.slot.as_slice();
        let count_missing = require_all && k == 0;
        if every_scored && slot.len() == n && s.layout.present.len() == seen.len() {
            // Every node scored: the domains seen are those some node counts in.
            seen.copy_from_slice(&s.layout.present);
            if count_missing {
                ignored += slot.iter().filter(|&&d| d == MISSING).count();
            }
            ignored_counted |= count_missing;
            continue;
        }
        for &ni in nodes {
            match slot.get(ni) {
                Some(&d) if d != MISSING => {
                    if let Some(x) = seen.get_mut(d as usize) {
                        *x = true;
                    }
                }
                _ if count_missing && ni < n => ignored += 1,
                _ => {}
            }
        }
        ignored_counted |= count_missing;
    }
    if !ignored_counted {
        ignored = nodes.iter().filter(|&&ni| ni < n && first.slot(ni) == MISSING).count();
    }
    for ((s, seen), sums) in soft.iter_mut().zip(&seen).zip(&sums) {
        if s.hostname {
            s.weight = ((nodes.len().saturating_sub(ignored) + 2) as f64).ln();
            continue;
        }
        for (d, _) in seen.iter().enumerate().filter(|(_, x)| **x) {
            s.counts[d] = Some(if every_node { sums.get(d).copied().unwrap_or(0) } else { 0 });
        }
        s.weight = ((s.counts.iter().filter(|c| c.is_some()).count() + 2) as f64).ln();
    }
    // Not every node counts: matching pods per domain over the nodes that do.
    if !every_node && soft.iter().any(|s| !s.hostname) {
        for (ni, node) in snap.nodes.iter().enumerate() {
            if node.pods.is_empty() || !counted(ni) {
                continue;
            }
            let mut inc = Inclusion::new(pod, node);
            for s in soft.iter_mut().filter(|s| !s.hostname) {
                let d = s.layout.slot(ni) as usize;
                if s.counts.get(d).is_none_or(|c| c.is_none()) || !inc.admits(&s.c) {
                    continue;
                }
                let m = s.per_node[ni];
                if let Some(c) = s.counts[d].as_mut() {
                    *c += m;
                }
            }
        }
    }
    state.insert(PreScoreState { constraints: Arc::new(soft), require_all, mark: snap.journal_mark() });
    Status::success()
}

pub(super) fn score(state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
    let Some(s) = state.get::<PreScoreState>() else {
        return Err(Status::error("PodTopologySpread: PreScore state missing"));
    };
    if s.ignored(&node.node.labels) {
        return Ok(0);
    }
    let mut score = 0f64;
    for sc in s.constraints.iter() {
        let d = sc.layout.domain_of(node, &sc.c.topology_key);
        if d == MISSING {
            continue;
        }
        score += if sc.hostname { sc.part(count_matching(node, &sc.c.selector, &pod.namespace)) } else { sc.domain_part(d) };
    }
    Ok(score.round() as i64)
}

pub(super) fn score_nodes(pl: &PodTopologySpread, state: &CycleState, pod: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
    let Some(s) = state.get::<PreScoreState>() else {
        return Err(Status::error("PodTopologySpread: PreScore state missing"));
    };
    let n = snap.nodes.len();
    // The layouts and the per-node counts hold for this snapshot only
    // while nothing changed since PreScore.
    if !same_nodes(snap, s.mark, true) || s.constraints.iter().any(|sc| sc.layout.dom.len() != n || sc.per_node.len() != n) || scores.iter().any(|ns| ns.node >= n) {
        for ns in scores.iter_mut() {
            ns.score = pl.score(state, pod, &snap.nodes[ns.node])?;
        }
        return Ok(());
    }
    // Each domain's part of the raw score, per constraint.
    let parts: Vec<Vec<f64>> = s.constraints.iter().map(|sc| if sc.hostname { Vec::new() } else { (0..sc.counts.len()).map(|d| sc.domain_part(d as u32)).collect() }).collect();
    if let ([sc], [part]) = (s.constraints.as_slice(), parts.as_slice())
        && !sc.hostname
    {
        // One constraint: each domain's score, rounded once. With
        // require_all a node that does not count is ignored (0); else a
        // node without the key gets no part (0). Either way its index
        // (MISSING) is past the table.
        let table: Vec<i64> = part.iter().map(|p| p.round() as i64).collect();
        let by = if s.require_all { sc.layout.slot.as_slice() } else { sc.layout.dom.as_slice() };
        for ns in scores.iter_mut() {
            ns.score = by.get(ns.node).and_then(|&d| table.get(d as usize)).copied().unwrap_or(0);
        }
        return Ok(());
    }
    for ns in scores.iter_mut() {
        let i = ns.node;
        if s.ignored_at(i) {
            ns.score = 0;
            continue;
        }
        let mut score = 0f64;
        for (sc, part) in s.constraints.iter().zip(&parts) {
            let d = sc.layout.dom[i];
            if d == MISSING {
                continue;
            }
            score += if sc.hostname { sc.part(sc.per_node[i]) } else { part.get(d as usize).copied().unwrap_or_else(|| sc.part(0)) };
        }
        ns.score = score.round() as i64;
    }
    Ok(())
}

pub(super) fn normalize_score(state: &CycleState, _: &PodInfo, scores: &mut [NodeScore], snap: &Snapshot) -> Status {
    let Some(s) = state.get::<PreScoreState>() else {
        return Status::error("PodTopologySpread: PreScore state missing");
    };
    let n = snap.nodes.len();
    let by_layout = same_nodes(snap, s.mark, false) && s.constraints.iter().all(|sc| sc.layout.dom.len() == n);
    // With require_all, the nodes that count are the same in every layout.
    let counting = s.constraints.first().filter(|_| by_layout && s.require_all).map(|sc| sc.layout.slot.as_slice());
    let ignored = |i: usize| match snap.nodes.get(i) {
        None => true,
        Some(_) if by_layout => counting.is_some_and(|c| c[i] == MISSING),
        Some(node) => s.ignored(&node.node.labels),
    };
    if by_layout && s.require_all && normalize_by_domain(s, scores) {
        return Status::success();
    }
    // Which scored nodes count, each looked up once.
    let counts: Vec<bool> = match (by_layout, counting) {
        (true, Some(c)) => scores.iter().map(|ns| c.get(ns.node).is_some_and(|&d| d != MISSING)).collect(),
        (true, None) => scores.iter().map(|ns| ns.node < n).collect(),
        _ => scores.iter().map(|ns| !ignored(ns.node)).collect(),
    };
    let (mut min, mut max) = (i64::MAX, 0i64);
    for (ns, _) in scores.iter().zip(&counts).filter(|(_, c)| **c) {
        min = min.min(ns.score);
        max = max.max(ns.score);
    }
    let normalized = |raw: i64| if max == 0 { MAX_NODE_SCORE } else { MAX_NODE_SCORE * (max + min - raw) / max };
    // Raw scores take few values (one per domain): the first distinct
    // ones are normalized once and looked up (no division per node).
    let mut seen: Vec<(i64, i64)> = Vec::with_capacity(SEEN_SCORES);
    for (ns, counted) in scores.iter_mut().zip(counts) {
        ns.score = if !counted {
            0
        } else if let Some(&(_, v)) = seen.iter().find(|(raw, _)| *raw == ns.score) {
            v
        } else {
            let v = normalized(ns.score);
            if seen.len() < SEEN_SCORES {
                seen.push((ns.score, v));
            }
            v
        };
    }
    Status::success()
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::test_support::*;

    #[test]
    fn score_table() {
        let hosts = |names: &[&str]| names.iter().map(|n| node(n)).collect::<Vec<_>>();
        let many = |spec: &[(&str, usize)]| {
            spec.iter().flat_map(|(n, k)| (0..*k).map(move |i| on(&format!("p-{n}{i}"), n))).collect::<Vec<_>>()
        };
        let foo = &[("foo", "")];
        let bar = &[("bar", "")];
        let cases: Vec<ScoreCase> = vec![
            ("no constraints: skip", incoming(), hosts(&["node-a", "node-b"]), vec![], many(&[("node-a", 1)]), vec![-1, -1]),
            ("hard only: skip", incoming().spread(1, HOST, DNS, foo), hosts(&["node-a", "node-b"]), vec![], many(&[("node-a", 1)]), vec![-1, -1]),
            ("no existing pods", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b"]), vec![], vec![], vec![100, 100]),
            ("only one candidate", incoming().spread(1, HOST, SA, foo), hosts(&["node-a"]), hosts(&["node-b"]), many(&[("node-a", 2), ("node-b", 1)]), vec![100]),
            ("same count everywhere", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b"]), vec![], many(&[("node-a", 1), ("node-b", 1)]), vec![100, 100]),
            ("2/1/0/3", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b", "node-c", "node-d"]), vec![], many(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]), vec![20, 60, 100, 0]),
            ("2/1/0/3 maxSkew 2", incoming().spread(2, HOST, SA, foo), hosts(&["node-a", "node-b", "node-c", "node-d"]), vec![], many(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]), vec![33, 66, 100, 16]),
            ("4/3/2/1 maxSkew 3", incoming().spread(3, HOST, SA, foo), hosts(&["node-a", "node-b", "node-c", "node-d"]), vec![], many(&[("node-a", 4), ("node-b", 3), ("node-c", 2), ("node-d", 1)]), vec![44, 66, 77, 100]),
            ("4/2/1/~3~", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b", "node-x"]), hosts(&["node-y"]), many(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]), vec![33, 83, 100]),
            ("4/?2?/1/~3~", incoming().spread(1, HOST, SA, foo), vec![node("node-a"), bare("node-b").label("n", "node-b"), node("node-x")], hosts(&["node-y"]), many(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]), vec![16, 0, 100]),
            ("zone, 4/2/1/~3~", incoming().spread(1, "zone", SA, foo), vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")], vec![zn("node-y", "zone2")], many(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]), vec![75, 75, 100]),
            ("zone+host, 2/~1~/2/~4~", incoming().spread(1, "zone", SA, foo).spread(1, HOST, SA, foo), vec![zn("node-a", "zone1"), zn("node-x", "zone2")], vec![zn("node-b", "zone1"), zn("node-y", "zone2")], many(&[("node-a", 2), ("node-b", 1), ("node-x", 2), ("node-y", 4)]), vec![100, 63]),
            (
                "zone+host, different selectors",
                incoming().label("bar", "").spread(1, "zone", SA, foo).spread(1, HOST, SA, bar),
                vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2"), zn("node-y", "zone2")],
                vec![],
                vec![on("p-a1", "node-a"), on("p-b1", "node-b").label("bar", ""), on("p-y1", "node-y"), pod("p-y2").node("node-y").label("bar", "")],
                vec![60, 20, 100, 60],
            ),
            (
                "zone+host, different selectors, some nodes have 0 pods",
                incoming().label("bar", "").spread(1, "zone", SA, foo).spread(1, HOST, SA, bar),
                vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2"), zn("node-y", "zone2")],
                vec![],
                vec![pod("p-b1").node("node-b").label("bar", ""), on("p-x1", "node-x"), on("p-y1", "node-y").label("bar", "")],
                vec![100, 60, 40, 0],
            ),
            (
                "zone+host, different selectors, 3 of 4 candidates",
                incoming().label("bar", "").spread(1, "zone", SA, foo).spread(1, HOST, SA, bar),
                vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")],
                vec![zn("node-y", "zone2")],
                vec![on("p-a1", "node-a"), on("p-b1", "node-b").label("bar", ""), on("p-y1", "node-y"), pod("p-y2").node("node-y").label("bar", "")],
                vec![50, 25, 100],
            ),
            ("other namespace not counted", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b"]), vec![], vec![on("p-a1", "node-a").namespace("ns1"), on("p-a2", "node-a"), on("p-b1", "node-b"), on("p-b2", "node-b")], vec![100, 33]),
            ("terminating excluded", incoming().spread(1, HOST, SA, foo), hosts(&["node-a", "node-b"]), vec![], vec![on("p-a", "node-a").terminating(), on("p-b", "node-b")], vec![100, 0]),
            (
                "affinity policy honor: non-matching nodes not counted",
                incoming().node_selector("foo", "").spread(1, "zone", SA, foo),
                vec![zn("node-a", "zone1").label("foo", ""), zn("node-x", "zone2").label("foo", "")],
                vec![zn("node-b", "zone1"), zn("node-y", "zone2")],
                many(&[("node-b", 2), ("node-x", 1)]),
                vec![100, 0],
            ),
            (
                "affinity policy ignore: every node counted",
                incoming().node_selector("foo", "").spread_constraint(tsc(1, "zone", SA, None, Some("Ignore"), None)),
                vec![zn("node-a", "zone1").label("foo", ""), zn("node-x", "zone2").label("foo", "")],
                vec![zn("node-b", "zone1"), zn("node-y", "zone2")],
                many(&[("node-b", 2), ("node-x", 1)]),
                vec![33, 100],
            ),
            (
                "taints policy honor: untolerated nodes not counted",
                incoming().spread_constraint(tsc(1, "zone", SA, None, None, Some("Honor"))),
                vec![zn("node-a", "zone1"), zn("node-x", "zone2")],
                vec![zn("node-b", "zone1").taint("k", "v", "NoSchedule")],
                many(&[("node-b", 2), ("node-x", 1)]),
                vec![100, 0],
            ),
        ];
        for (name, p, nodes, failed, pods, want) in cases {
            assert_eq!(scores(&p, &nodes, &failed, &pods), want, "{name}");
        }
    }

    /// Normalizing by domain gives what normalizing node by node gives: for
    /// PreScore's nodes, for fewer nodes (a domain without scored nodes),
    /// and for raw scores that are not their domain's (it puts them back
    /// and the node-by-node path runs).
    #[test]
    fn normalize_by_domain_matches_node_by_node() {
        let pl = plugin();
        let nodes = [zn("a1", "z1"), zn("a2", "z1"), zn("b1", "z2"), zn("b2", "z2"), node("x"), zn("c1", "z3"), zn("c2", "z3")];
        let pods = [on("p1", "a1"), on("p2", "a2"), on("p3", "a2"), on("p4", "b1")];
        let snap = snapshot(&nodes, &pods);
        let p = incoming().spread(1, "zone", SA, &[("foo", "")]).info();
        let all: Vec<usize> = (0..snap.nodes.len()).collect();
        let mut st = CycleState::new();
        assert!(pl.pre_score(&mut st, &p, &all, &snap).is_success());
        let mut raw: Vec<NodeScore> = all.iter().map(|&i| NodeScore { node: i, score: 0 }).collect();
        assert!(pl.score_nodes(&st, &p, &snap, &mut raw).is_ok());
        // Upstream's NormalizeScore, node by node; "x" (no zone) is ignored.
        let by_hand = |scores: &[NodeScore]| -> Vec<i64> {
            let counted = |ns: &NodeScore| snap.nodes[ns.node].node.labels.contains_key("zone");
            let kept = || scores.iter().filter(|ns| counted(ns)).map(|ns| ns.score);
            let (min, max) = (kept().min().unwrap_or(0), kept().max().unwrap_or(0));
            scores.iter().map(|ns| if !counted(ns) { 0 } else if max == 0 { MAX_NODE_SCORE } else { MAX_NODE_SCORE * (max + min - ns.score) / max }).collect()
        };
        let normalized = |mut scores: Vec<NodeScore>| -> Vec<i64> {
            assert!(pl.normalize_score(&st, &p, &mut scores, &snap).is_success());
            scores.iter().map(|ns| ns.score).collect()
        };
        let expected = by_hand(&raw);
        assert_ne!(expected.iter().min(), expected.iter().max(), "the domains score differently");
        assert_eq!(normalized(raw.clone()), expected);
        // Without z3's nodes: min and max over z1 and z2 only.
        let fewer: Vec<NodeScore> = raw.iter().copied().filter(|ns| !snap.nodes[ns.node].name().starts_with('c')).collect();
        assert_eq!(normalized(fewer.clone()), by_hand(&fewer));
        // A raw score in the middle that is not its domain's.
        let mut odd = raw.clone();
        odd[3].score += 1;
        assert_eq!(normalized(odd.clone()), by_hand(&odd));
    }
}
