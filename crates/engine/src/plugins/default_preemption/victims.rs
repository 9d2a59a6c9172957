//! Victims on one node: upstream `SelectVictimsOnNode`, with the
//! PodDisruptionBudget split (`filterPodsWithPDBViolation`) and the order of
//! importance among pods (`MoreImportantPod`).

use std::cmp::Ordering;
use std::sync::Arc;

use crate::cache::{Pdb, Snapshot};
use crate::framework::{CycleState, Framework, Status};
use berth_model::{NodeInfo, PodInfo};

use super::REASON_NO_VICTIMS;

/// Upstream `MoreImportantPod`: higher priority first, then the earlier start.
pub fn more_important(a: &PodInfo, b: &PodInfo) -> Ordering {
    b.priority.cmp(&a.priority).then(a.start_ms.cmp(&b.start_ms))
}

/// Upstream `filterPodsWithPDBViolation`: splits pods (order kept) into those
/// whose eviction would take some matching budget below zero, and the others.
pub fn split_by_pdb(pods: Vec<Arc<PodInfo>>, pdbs: &[Pdb]) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i64> = pdbs.iter().map(|p| p.disruptions_allowed).collect();
    let mut violating = Vec::new();
    let mut ok = Vec::new();
    for p in pods {
        let mut violated = false;
        if !p.labels.is_empty() {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.namespace != p.namespace || pdb.selector.is_everything() || !pdb.selector.matches(&p.labels) {
                    continue;
                }
                // Already being disrupted: counted by the budget already.
                if pdb.disrupted_pods.iter().any(|n| *n == p.name) {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated { violating.push(p) } else { ok.push(p) }
    }
    (violating, ok)
}

pub(super) fn as_error(s: Status) -> Status {
    Status::error(s.message())
}

/// Upstream `SelectVictimsOnNode`: the pods to evict from `node` so that `pod`
/// fits, with the number of PDB violations; Err is the node's status when
/// preemption there cannot help.
pub fn select_victims(fw: &Framework, state: &CycleState, pod: &PodInfo, node: &NodeInfo, snap: &Snapshot) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
    let mut potential: Vec<Arc<PodInfo>> = node.pods.iter().filter(|p| p.priority < pod.priority).cloned().collect();
    if potential.is_empty() {
        return Err(Status::unresolvable(REASON_NO_VICTIMS));
    }
    let mut ni = node.clone();
    let mut st = state.clone();
    for v in &potential {
        ni.remove_pod(&v.uid);
        let s = fw.run_remove_pod(&mut st, pod, v, &ni, snap);
        if !s.is_success() {
            return Err(as_error(s));
        }
    }
    let s = fw.run_filter_with_nominated(&st, pod, &ni, snap);
    if !s.is_success() {
        return Err(s);
    }
    potential.sort_by(|a, b| more_important(a, b));
    let (violating, non_violating) = split_by_pdb(potential, &snap.pdbs);
    let both = !violating.is_empty() && !non_violating.is_empty();
    let mut victims = Vec::new();
    let mut violations = 0;
    for (group, counts) in [(violating, true), (non_violating, false)] {
        for p in group {
            ni.add_pod(p.clone());
            let s = fw.run_add_pod(&mut st, pod, &p, &ni, snap);
            if !s.is_success() {
                return Err(as_error(s));
            }
            if fw.run_filter_with_nominated(&st, pod, &ni, snap).is_success() {
                continue;
            }
            ni.remove_pod(&p.uid);
            let s = fw.run_remove_pod(&mut st, pod, &p, &ni, snap);
            if !s.is_success() {
                return Err(as_error(s));
            }
            if counts {
                violations += 1;
            }
            victims.push(p);
        }
    }
    if both {
        victims.sort_by(|a, b| more_important(a, b));
    }
    Ok((victims, violations))
}


#[cfg(test)]
mod tests {
    use super::*;
    use super::super::test_support::*;


    #[test]
    fn pdb_split_table() {
        let p = |n: &str, app: &str| {
            let mut b = pod(n);
            if !app.is_empty() {
                b = b.label("app", app);
            }
            b.info()
        };
        let mut disrupted = pdb("web", ("app", "web"), 0);
        disrupted.disrupted_pods = vec!["w0".into()];
        type PdbRow = (&'static str, Vec<Arc<PodInfo>>, Vec<Pdb>, Vec<&'static str>);
        let rows: Vec<PdbRow> = vec![
            ("no pdb", vec![p("a", "db")], vec![], vec![]),
            ("budget 1: second pod violates", vec![p("a", "db"), p("b", "db")], vec![pdb("db", ("app", "db"), 1)], vec!["b"]),
            ("no labels never matches", vec![p("a", "")], vec![pdb("db", ("app", "db"), 0)], vec![]),
            ("other namespace", vec![pod("a").namespace("x").label("app", "db").info()], vec![pdb("db", ("app", "db"), 0)], vec![]),
            ("already disrupted pod is not counted", vec![p("w0", "web"), p("w1", "web")], vec![disrupted], vec!["w1"]),
        ];
        for (name, pods, pdbs, want) in rows {
            let (v, _) = split_by_pdb(pods, &pdbs);
            assert_eq!(v.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), want, "{name}");
        }
    }
}
