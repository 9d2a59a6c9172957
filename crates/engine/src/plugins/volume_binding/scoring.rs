//! VolumeBinding's PreScore and Score (upstream StorageCapacityScoring, on
//! by default from v1.37): nodes whose volumes fit tightly win, through the
//! args' shape over each storage class's utilization.

use super::common::{NodeVolumes, State};
use super::VolumeBinding;
use crate::cache::Snapshot;
use crate::framework::{CycleState, NodeScore, Status};

impl VolumeBinding {
    pub(super) fn shape_at(&self, u: i64) -> i64 {
        for (i, &(x, s)) in self.shape.iter().enumerate() {
            if u <= x {
                if i == 0 {
                    return s;
                }
                let (px, ps) = self.shape[i - 1];
                return ps + (s - ps) * (u - px) / (x - px);
            }
        }
        self.shape.last().map(|p| p.1).unwrap_or(0)
    }

    /// Upstream's volume capacity scorer: the mean, over storage classes, of
    /// the shape at requested/capacity (rounded half away from zero).
    pub(super) fn class_score(&self, classes: &[(String, i64, i64)]) -> i64 {
        if classes.is_empty() {
            return 0;
        }
        let sum: i64 = classes
            .iter()
            .map(|(_, req, cap)| if *cap == 0 || req > cap { self.shape_at(100) } else { self.shape_at(req * 100 / cap) })
            .sum();
        let n = classes.len() as i64;
        (sum * 2 + n).div_euclid(2 * n)
    }
}

pub(super) fn pre_score(state: &CycleState) -> Status {
    // StorageCapacityScoring is on: every pod with claims is scored.
    if state.get::<State>().is_none() { Status::skip() } else { Status::success() }
}

pub(super) fn score_nodes(pl: &VolumeBinding, state: &CycleState, snap: &Snapshot, scores: &mut [NodeScore]) -> Result<(), Status> {
    let Some(s) = state.get::<State>() else { return Ok(()) };
    let m = s.by_node.lock().unwrap_or_else(|e| e.into_inner());
    for ns in scores.iter_mut() {
        ns.score = m.get(snap.nodes[ns.node].name()).map_or(0, |v| node_score(pl, v));
    }
    Ok(())
}

/// Score for one node (the per-node body of [`score_nodes`]).
pub(super) fn score(pl: &VolumeBinding, state: &CycleState, node: &str) -> i64 {
    let Some(s) = state.get::<State>() else { return 0 };
    let m = s.by_node.lock().unwrap_or_else(|e| e.into_inner());
    m.get(node).map_or(0, |v| node_score(pl, v))
}

/// The score of the node whose decisions are `v`: per storage class, the
/// capacity its claims would use.
fn node_score(pl: &VolumeBinding, v: &NodeVolumes) -> i64 {
    // Per storage class: (class, requested, capacity).
    let mut classes: Vec<(String, i64, i64)> = Vec::new();
    fn entry<'a>(classes: &'a mut Vec<(String, i64, i64)>, class: &str) -> &'a mut (String, i64, i64) {
        let i = match classes.iter().position(|c| c.0 == class) {
            Some(i) => i,
            None => {
                classes.push((class.to_string(), 0, 0));
                classes.len() - 1
            }
        };
        &mut classes[i]
    }
    if !v.bindings.is_empty() {
        for (c, pv) in &v.bindings {
            let e = entry(&mut classes, &pv.class);
            e.1 += c.request;
            e.2 += pv.capacity;
        }
    } else {
        for (c, cap) in &v.provisions {
            let Some(cap) = cap else { continue };
            let e = entry(&mut classes, &c.class);
            e.2 = cap.capacity.unwrap_or(0);
            e.1 += c.request;
        }
    }
    pl.class_score(&classes)
}

#[cfg(test)]
mod tests {
    use super::super::tests_support::*;
    use super::super::REASON_NOT_ENOUGH_SPACE;
    use crate::framework::{NodeScore, PreScorePlugin, ScorePlugin};

    #[test]
    fn capacity_and_score() {
        let mut snap = snapshot_with(
            &[("n1", vec![("k", "1")]), ("n2", vec![("k", "2")])],
            &[claim("c", "10Gi", Some("csi"))],
            &[],
            &[("csi", true, "drv")],
        );
        let mut drv = k8s_openapi::api::storage::v1::CSIDriver::default();
        drv.metadata.name = Some("drv".into());
        drv.spec.storage_capacity = Some(true);
        snap.storage.upsert_csi_driver(&drv);
        let cap = |name: &str, k: &str, capacity: &str, max: Option<&str>| {
            let mut c = k8s_openapi::api::storage::v1::CSIStorageCapacity { storage_class_name: "csi".into(), ..Default::default() };
            c.metadata.name = Some(name.into());
            c.metadata.namespace = Some("kube-system".into());
            c.capacity = Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(capacity.into()));
            c.maximum_volume_size = max.map(|m| k8s_openapi::apimachinery::pkg::api::resource::Quantity(m.into()));
            c.node_topology = Some(crate::testing::selector(&[("k", k)]));
            c
        };
        assert!(snap.storage.upsert_capacity(&cap("c1", "1", "40Gi", None)).is_ok());
        assert!(snap.storage.upsert_capacity(&cap("c2", "2", "100Gi", Some("5Gi"))).is_ok());
        let p = pod_with_claims("p", &["c"]);
        let (_, mut st, res) = run(&snap, &p);
        assert_eq!(feasible(&res), vec!["n1"]);
        assert_eq!(res[1].1.message(), REASON_NOT_ENOUGH_SPACE);
        let pl = plugin();
        assert!(pl.pre_score(&mut st, &p, &[0], &snap).is_success());
        let mut scores = vec![NodeScore { node: 0, score: 0 }];
        assert!(pl.score_nodes(&st, &p, &snap, &mut scores).is_ok());
        // 10Gi of 40Gi: utilization 25 on the default shape (0,100)..(100,0).
        assert_eq!(scores[0].score, 75);
        // A bad quantity is refused with the field named.
        let e = snap.storage.upsert_capacity(&cap("c3", "1", "lots", None)).expect_err("malformed");
        assert!(e.to_string().contains("capacity"), "{e}");
    }

    #[test]
    fn class_score_is_the_mean_of_the_shape() {
        let pl = plugin();
        assert_eq!(pl.class_score(&[("a".into(), 50, 200), ("b".into(), 100, 100)]), 38);
        assert_eq!(pl.class_score(&[("a".into(), 300, 200)]), 0);
        assert_eq!(pl.class_score(&[]), 0);
    }
}
