//! Test builders: the model's fluent pod and node builders, and snapshots of them.

pub use berth_model::testing::*;

use crate::cache::Snapshot;

/// A snapshot holding these nodes and bound pods.
pub fn snapshot(nodes: &[NodeBuilder], pods: &[PodBuilder]) -> Snapshot {
    let mut s = Snapshot::new();
    for n in nodes {
        s.upsert_node(n.spec());
    }
    for p in pods {
        s.add_pod(p.info());
    }
    s
}
