//! Candidates: upstream `DryRunPreemption` over the potential nodes, with
//! each node's dry run kept for the next preemptor of the same shape.

use std::hash::Hasher;
use std::sync::{Arc, TryLockError};

use crate::cache::Snapshot;
use crate::framework::{Code, CycleState, Framework, Points, Status};
use berth_model::{NodeInfo, NodeSpec, PodInfo};

use super::victims::select_victims;
use super::DefaultPreemption;

/// One node's dry-run outcome: the victims and PDB violations, or the node's status.
pub(super) type Victims = Result<(Vec<Arc<PodInfo>>, usize), Status>;

/// What a node's dry run depends on besides the node itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DryRunKey {
    /// The framework (its address while it runs this cycle).
    pub(super) framework: usize,
    /// The preemptor's signature: every field of the pod but its identity,
    /// with what plugins signed of the objects it names (the cycle's).
    pub(super) signature: u64,
    /// The snapshot's device journal (a dry run's DynamicResources verdict
    /// reads the devices of the node's pools, which the node's generation
    /// does not follow).
    pub(super) devices: crate::cache::devices::DeviceMark,
    /// The Filter plugins that run, all node-local.
    pub(super) filters: Vec<&'static str>,
    /// The PreFilter plugins that answered Skip (their AddPod/RemovePod do not run).
    pub(super) skipped: Vec<&'static str>,
    /// A fingerprint of the PodDisruptionBudgets.
    pub(super) pdbs: u64,
    /// Number of nodes.
    pub(super) nodes: usize,
}

/// Dry-run results kept for the next preemptor of the same shape.
///
/// When every Filter plugin that runs is node-local ([`Plugin::reusable`]:
/// its verdict is a function of the pod's signature and of the one node),
/// a node's dry run (which removes and re-adds that node's pods and runs
/// those filters) is a function of the pod's signature, the node (its
/// object and pods), the PodDisruptionBudgets and the pods nominated to the
/// node. So a node that has not changed since, with no nominated pods,
/// gives the result it gave then.
#[derive(Debug, Default)]
pub(super) struct DryRuns {
    pub(super) key: Option<DryRunKey>,
    /// Per node index: the node object and generation the result was found at, and the result.
    pub(super) nodes: Vec<Option<(Arc<NodeSpec>, u64, Victims)>>,
}

impl DryRuns {
    pub(super) fn get(&self, i: usize, node: &NodeInfo) -> Option<&Victims> {
        match self.nodes.get(i) {
            Some(Some((spec, generation, v))) if Arc::ptr_eq(spec, &node.node) && *generation == node.generation => Some(v),
            _ => None,
        }
    }

    pub(super) fn set(&mut self, i: usize, node: &NodeInfo, v: &Victims) {
        if let Some(slot) = self.nodes.get_mut(i) {
            *slot = Some((node.node.clone(), node.generation, v.clone()));
        }
    }
}

/// Feeds formatted text to a hasher.
pub(super) struct HashWriter<'a, H: Hasher>(&'a mut H);

impl<H: Hasher> std::fmt::Write for HashWriter<'_, H> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// What a dry run over this cycle depends on beyond the nodes, or None when
/// a Filter plugin that runs is not node-local (or the pod has no signature).
pub(super) fn dry_run_key(fw: &Framework, state: &CycleState, _pod: &PodInfo, snap: &Snapshot) -> Option<DryRunKey> {
    if state.signature() == 0 {
        return None;
    }
    let filters: Vec<&'static str> = fw.plugins_at(Points::FILTER).into_iter().filter(|n| !state.filter_skipped(n)).collect();
    let node_local = |name: &str| fw.plugins().find(|p| p.name() == name).is_some_and(|p| p.reusable());
    if !filters.iter().all(|n| node_local(n)) {
        return None;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if !snap.pdbs.is_empty() {
        use std::fmt::Write;
        write!(HashWriter(&mut h), "{:?}", snap.pdbs).ok()?;
    }
    Some(DryRunKey {
        framework: fw as *const Framework as usize,
        signature: state.signature(),
        devices: snap.devices.mark(),
        filters,
        skipped: state.skip_filter.clone(),
        pdbs: h.finish(),
        nodes: snap.nodes.len(),
    })
}

/// A node where preemption lets the pod fit, with the pods to evict.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Node index in the snapshot.
    pub node: usize,
    /// Victims, most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// How many victims' eviction violates a PodDisruptionBudget.
    pub pdb_violations: usize,
}

impl DefaultPreemption {
    /// Upstream `DryRunPreemption` over the potential nodes from `offset`:
    /// the candidates (non-violating first) and the statuses of the nodes
    /// where preemption does not help.
    pub(super) fn dry_run(
        &self,
        fw: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
        potential: &[usize],
        offset: usize,
    ) -> (Vec<Candidate>, Vec<(usize, Status)>, Vec<String>) {
        let want = self.num_candidates(potential.len());
        let mut non_violating: Vec<Candidate> = Vec::new();
        let mut violating: Vec<Candidate> = Vec::new();
        let mut failed = Vec::new();
        let mut errors = Vec::new();
        // Results kept from the last preemptor of this shape (see DryRuns).
        let mut kept = match self.kept.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => {
                let mut g = p.into_inner();
                *g = DryRuns::default();
                self.kept.clear_poison();
                Some(g)
            }
            Err(TryLockError::WouldBlock) => None,
        };
        let key = kept.as_ref().and_then(|_| dry_run_key(fw, state, pod, snap));
        match (kept.as_deref_mut(), &key) {
            (Some(k), Some(key)) => {
                if k.key.as_ref() != Some(key) {
                    k.key = Some(key.clone());
                    k.nodes.clear();
                    k.nodes.resize(snap.nodes.len(), None);
                }
            }
            _ => kept = None,
        }
        for k in 0..potential.len() {
            let idx = potential[(offset + k) % potential.len()];
            let node = &snap.nodes[idx];
            // Pods nominated to the node are counted by the filters: such a node is not kept.
            let keep = !snap.nominated.contains_key(node.name());
            let found = match kept.as_deref_mut() {
                Some(c) if keep => match c.get(idx, node) {
                    Some(v) => v.clone(),
                    None => {
                        let v = select_victims(fw, state, pod, node, snap);
                        if v.as_ref().err().is_none_or(|s| s.code != Code::Error) {
                            c.set(idx, node, &v);
                        }
                        v
                    }
                },
                _ => select_victims(fw, state, pod, node, snap),
            };
            let status = match found {
                Ok((victims, _)) if victims.is_empty() => Status::error(format!("expected at least one victim pod on node {:?}", node.name())),
                Ok((victims, pdb_violations)) => {
                    let c = Candidate { node: idx, victims, pdb_violations };
                    let list = if pdb_violations == 0 { &mut non_violating } else { &mut violating };
                    if list.len() < want {
                        list.push(c);
                    }
                    if !non_violating.is_empty() && non_violating.len() + violating.len() >= want {
                        break;
                    }
                    continue;
                }
                Err(s) => s,
            };
            if status.code == Code::Error {
                errors.push(status.message());
            }
            failed.push((idx, status));
        }
        non_violating.extend(violating);
        (non_violating, failed, errors)
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use super::super::test_support::*;


    #[test]
    fn dry_run_stops_after_enough_candidates() {
        // Every node needs a victim; with absolute 2 and 0 %, two candidates suffice.
        let nodes: Vec<NodeBuilder> = (0..5).map(|i| node(&format!("n{i}"))).collect();
        let pods: Vec<PodBuilder> = (0..5).map(|i| low(&format!("a{i}"), &format!("n{i}"), 0, "4")).collect();
        let snap = snapshot(&nodes, &pods);
        let fw = framework();
        let p = pod("p").priority(10).req("1", "").info();
        let (o, state) = fw.schedule(&p, &snap, CycleOptions { explain: true, skip_post_filter: true, ..Default::default() });
        let pl = DefaultPreemption { min_percentage: 0, min_absolute: 2, ..Default::default() };
        let potential: Vec<usize> = (0..5).filter(|&i| o.statuses.get(i).is_some_and(|s| s.code == Code::Unschedulable)).collect();
        let (cs, failed, _) = pl.dry_run(&fw, &state, &p, &snap, &potential, 3);
        assert_eq!(cs.iter().map(|c| c.node).collect::<Vec<_>>(), vec![3, 4]);
        assert!(failed.is_empty());
    }

    /// Dry-run results kept across cycles (for nodes unchanged since) give
    /// the nomination, victims and message a fresh dry run gives, over a random
    /// sequence of preemptions, placements, removals, nominations and PDB changes.
    #[test]
    fn kept_dry_runs_match_fresh_ones() {
        let nodes: Vec<NodeBuilder> = (0..12).map(|i| node(&format!("n{i}")).alloc(if i % 3 == 0 { "2" } else { "4" }, "32Gi", 110)).collect();
        let mut snap = snapshot(&nodes, &[]);
        let mut rng = crate::testing::Rng(0x2545_F491_4F6C_DD1D);
        let mut below = |n: u64| rng.below(n as usize) as u64;
        let mut k = 0;
        let mut low_pod = |n: usize, prio: i32, cpu: u64, app: &str| {
            k += 1;
            pod(&format!("l{k}")).node(&format!("n{n}")).priority(prio).req(&format!("{}m", cpu * 500), "").label("app", app).created(k).info()
        };
        for i in 0..40 {
            let p = low_pod(i % 12, (i % 4) as i32, 1 + (i as u64 % 3), if i % 5 == 0 { "db" } else { "web" });
            let n = &snap.nodes[i % 12];
            if n.requested.milli_cpu + p.requests.milli_cpu <= n.allocatable.milli_cpu {
                snap.add_pod(p);
            }
        }
        let shapes = [pod("hi").priority(10).req("1", ""), pod("mid").priority(3).req("1500m", ""), pod("big").priority(10).req("3", "")];
        let kept = framework();
        let explain = CycleOptions { explain: true, ..Default::default() };
        let mut preempted = 0;
        for step in 0..300 {
            let shape = &shapes[below(3) as usize];
            let p = shape.clone().info();
            let (a, _) = kept.schedule(&p, &snap, explain);
            let (b, _) = framework().schedule(&p, &snap, explain);
            assert_eq!(a.selected.is_some(), b.selected.is_some(), "step {step}");
            let pf = |o: &CycleOutcome| o.post_filter.as_ref().map(|r| (r.nominated_node.clone(), r.victims.iter().map(|v| v.uid.clone()).collect::<Vec<_>>()));
            assert_eq!(pf(&a), pf(&b), "step {step}");
            assert_eq!(a.message, b.message, "step {step}");
            let target = match (a.selected, a.post_filter.and_then(|r| r.nominated_node.map(|n| (n, r.victims)))) {
                (Some(i), _) => Some(i),
                (None, Some((n, victims))) => {
                    preempted += 1;
                    for v in &victims {
                        snap.remove_pod(&v.uid);
                    }
                    snap.node_index(&n)
                }
                _ => None,
            };
            if let Some(i) = target {
                let mut b = (*p).clone();
                b.uid = format!("s{step}");
                b.node_name = Some(snap.nodes[i].name().to_string());
                let n = &snap.nodes[i];
                if n.requested.milli_cpu + b.requests.milli_cpu <= n.allocatable.milli_cpu {
                    snap.add_pod(Arc::new(b));
                }
            }
            match below(8) {
                0 => {
                    // A low pod comes where it fits.
                    let n = below(12) as usize;
                    let lp = low_pod(n, below(4) as i32, 1 + below(2), if below(3) == 0 { "db" } else { "web" });
                    let ni = &snap.nodes[n];
                    if ni.requested.milli_cpu + lp.requests.milli_cpu <= ni.allocatable.milli_cpu {
                        snap.add_pod(lp);
                    }
                }
                1 => snap.pdbs = if snap.pdbs.is_empty() { vec![pdb("db", ("app", "db"), below(2) as i64)] } else { vec![] },
                2 => {
                    let other = pod("nom").priority(20).req("1", "").info();
                    if snap.nominated.is_empty() {
                        snap.nominate(other, &format!("n{}", below(12)));
                    } else {
                        snap.clear_nomination(&other.uid);
                    }
                }
                _ => {}
            }
        }
        assert!(preempted > 20, "only {preempted} preemptions");
    }
}
