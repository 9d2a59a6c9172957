//! PreScore, Score and NormalizeScore: preferred pod (anti-)affinity, the
//! symmetry of existing pods' preferred terms and, weighted by
//! `hardPodAffinityWeight`, their required affinity.

use std::sync::Arc;

use crate::cache::Snapshot;
use crate::framework::{CycleState, NodeScore, Status, MAX_NODE_SCORE};
use berth_model::pod::WeightedAffinityTerm;
use berth_model::selector::Labels;
use berth_model::{NodeInfo, PodInfo};

use super::common::*;
use super::InterPodAffinity;

/// PreScore state: scores per topology domain.
#[derive(Clone, Debug)]
pub(super) struct PreScoreState {
    pub(super) domains: Arc<Domains>,
    /// Score slots that some term hit.
    pub(super) slots: Arc<Vec<Slot>>,
}

impl PreScoreState {
    pub(super) fn score(&self, ni: &NodeInfo) -> i64 {
        let mut score = 0;
        for s in self.slots.iter().filter(|s| s.hits > 0) {
            let dom = self.domains.domain(s.key, ni);
            if dom != NO_DOMAIN {
                score += s.get(dom);
            }
        }
        score
    }

    pub(super) fn is_empty(&self) -> bool {
        self.slots.iter().all(|s| s.hits == 0)
    }
}

impl InterPodAffinity {
    /// Adds an existing pod's contribution to the topology scores.
    pub(super) fn process_existing_pod<'a>(&self, out: &mut Vec<Contribution<'a>>, pod: &'a PodInfo, existing: &'a PodInfo, ns_labels: &Labels, snap: &Snapshot) {
        let mut weighted = |terms: &'a [WeightedAffinityTerm], sign: i64| {
            for t in terms {
                if incoming_term_matches(&t.term, existing, snap) {
                    out.push((Kind::Score, &t.term.topology_key, sign * t.weight));
                }
            }
        };
        weighted(&pod.preferred_affinity, 1);
        weighted(&pod.preferred_anti_affinity, -1);
        if self.hard_pod_affinity_weight > 0 {
            for t in &existing.required_affinity {
                if existing_term_matches(t, pod, ns_labels) {
                    out.push((Kind::Score, &t.topology_key, self.hard_pod_affinity_weight));
                }
            }
        }
        for (terms, sign) in [(&existing.preferred_affinity, 1), (&existing.preferred_anti_affinity, -1)] {
            for t in terms {
                if existing_term_matches(&t.term, pod, ns_labels) {
                    out.push((Kind::Score, &t.term.topology_key, sign * t.weight));
                }
            }
        }
    }
}

pub(super) fn pre_score(pl: &InterPodAffinity, state: &mut CycleState, pod: &PodInfo, nodes: &[usize], snap: &Snapshot) -> Status {
    if nodes.is_empty() {
        return Status::skip();
    }
    let has_constraints = !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
    if pl.ignore_preferred_terms_of_existing_pods && !has_constraints {
        return Status::skip();
    }
    if !has_constraints && snap.pods_with_affinity() == 0 {
        return Status::skip();
    }
    let ns_labels = namespace_labels(snap, &pod.namespace);
    let keep = !pod.preferred_affinity.iter().chain(&pod.preferred_anti_affinity).any(|t| reads_namespaces(&t.term));
    let owner = if keep { owner_of(pod, ns_labels) } else { None };
    let mut t = take_tally(&pl.score_cache, owner.as_ref());
    t.refresh(owner, snap, |ni, out| {
        // Unless the pod has preferred terms, only pods with affinity matter.
        if (!has_constraints && ni.pods_with_affinity == 0) || ni.node.labels.is_empty() {
            return;
        }
        for p in &ni.pods {
            if !has_constraints && !p.has_affinity() {
                continue;
            }
            pl.process_existing_pod(out, pod, p, ns_labels, snap);
        }
    });
    let s = PreScoreState { domains: t.domains.clone(), slots: t.slots.clone() };
    put_tally(&pl.score_cache, t);
    if s.is_empty() {
        return Status::skip();
    }
    state.insert(s);
    Status::success()
}

pub(super) fn score(state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
    let Some(s) = state.get::<PreScoreState>() else { return Err(Status::error("InterPodAffinity: no PreScore state")) };
    Ok(s.score(node))
}

pub(super) fn score_nodes(state: &CycleState, _: &PodInfo, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
    let Some(s) = state.get::<PreScoreState>() else { return Err(Status::error("InterPodAffinity: no PreScore state")) };
    for ns in scores.iter_mut() {
        ns.score = s.score(&snap.nodes[ns.node]);
    }
    Ok(())
}

pub(super) fn normalize_score(state: &CycleState, _: &PodInfo, scores: &mut [NodeScore], _: &Snapshot) -> Status {
    if state.get::<PreScoreState>().is_none_or(PreScoreState::is_empty) {
        return Status::success();
    }
    let (Some(min), Some(max)) = (scores.iter().map(|s| s.score).min(), scores.iter().map(|s| s.score).max()) else {
        return Status::success();
    };
    let diff = max - min;
    for s in scores.iter_mut() {
        s.score = if diff > 0 { (MAX_NODE_SCORE as f64 * ((s.score - min) as f64 / diff as f64)) as i64 } else { 0 };
    }
    Status::success()
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::test_support::*;


    #[test]
    fn score_table() {
        let nodes = || vec![node("n1").label("region", "r1"), node("n2").label("region", "r2"), node("n3").label("region", "r1"), node("n4")];
        let sec = |name: &str, v: &str, n: &str| pod(name).label("security", v).node(n);
        let req_sym = aff().req(term(&[("security", "S1")], "region")).build();
        let cases: Vec<ScoreCase> = vec![
            ("no terms", Args::default(), vec![sec("e", "S1", "n1")], pod("p"), vec![0, 0, 0, 0]),
            (
                "preferred affinity by topology",
                Args::default(),
                vec![sec("e", "S1", "n1")],
                pod("p").affinity(aff().pref(5, term(&[("security", "S1")], "region")).build()),
                vec![100, 0, 100, 0],
            ),
            (
                "preferred anti-affinity by topology",
                Args::default(),
                vec![sec("e", "S1", "n1")],
                pod("p").affinity(aff().pref_anti(5, term(&[("security", "S1")], "region")).build()),
                vec![0, 100, 0, 100],
            ),
            (
                "affinity and anti-affinity weights add up",
                Args::default(),
                vec![sec("e1", "S1", "n1"), sec("e2", "S2", "n2")],
                pod("p").affinity(aff().pref(8, term(&[("security", "S1")], "region")).pref_anti(2, term(&[("security", "S2")], "region")).build()),
                vec![100, 0, 100, 20],
            ),
            (
                "symmetry of existing preferred affinity",
                Args::default(),
                vec![pod("e").node("n2").affinity(aff().pref(3, term(&[("security", "S1")], "region")).build())],
                pod("p").label("security", "S1"),
                vec![0, 100, 0, 0],
            ),
            (
                "symmetry of existing preferred anti-affinity",
                Args::default(),
                vec![pod("e").node("n2").affinity(aff().pref_anti(3, term(&[("security", "S1")], "region")).build())],
                pod("p").label("security", "S1"),
                vec![100, 0, 100, 100],
            ),
            (
                "symmetry of existing required affinity with hardPodAffinityWeight",
                Args::default(),
                vec![pod("e").node("n2").affinity(req_sym.clone())],
                pod("p").label("security", "S1"),
                vec![0, 100, 0, 0],
            ),
            (
                "hardPodAffinityWeight 0 ignores required affinity",
                Args { hard_pod_affinity_weight: Some(0), ..Default::default() },
                vec![pod("e").node("n2").affinity(req_sym.clone())],
                pod("p").label("security", "S1"),
                vec![0, 0, 0, 0],
            ),
            (
                "existing pods' preferred terms ignored when configured",
                Args { ignore_preferred_terms_of_existing_pods: Some(true), ..Default::default() },
                vec![pod("e").node("n2").affinity(req_sym.clone())],
                pod("p").label("security", "S1"),
                vec![0, 0, 0, 0],
            ),
            (
                "preferred affinity in another namespace does not count",
                Args::default(),
                vec![sec("e", "S1", "n1").namespace("other")],
                pod("p").affinity(aff().pref(5, term(&[("security", "S1")], "region")).build()),
                vec![0, 0, 0, 0],
            ),
        ];
        for (name, args, pods, p, want) in cases {
            let pl = InterPodAffinity::new(args).unwrap_or_default();
            let snap = snapshot(&nodes(), &pods);
            assert_eq!(scores(&pl, &snap, &p.info()), want, "{name}");
        }
    }


    #[test]
    fn normalize_uses_min_and_max() {
        let pl = InterPodAffinity::default();
        let mut st = CycleState::new();
        let slot = Slot { kind: Kind::Score, key: 0, counts: vec![], nonzero: 0, hits: 1 };
        st.insert(PreScoreState { domains: Arc::new(Domains::default()), slots: Arc::new(vec![slot]) });
        let mut s: Vec<NodeScore> = [-3, 0, 7, 4].iter().enumerate().map(|(i, &score)| NodeScore { node: i, score }).collect();
        assert!(pl.normalize_score(&st, &pod("p").info(), &mut s, &Snapshot::new()).is_success());
        assert_eq!(s.iter().map(|x| x.score).collect::<Vec<_>>(), vec![0, 30, 100, 70]);
    }
}
