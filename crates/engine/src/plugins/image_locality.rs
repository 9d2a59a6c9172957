//! ImageLocality: prefers nodes that already have the pod's images, scaled by
//! how widely each image is spread across the cluster.

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, MAX_NODE_SCORE, Plugin, PreScorePlugin, ScorePlugin, Status};
use berth_model::node::normalized_image_name;
use berth_model::{NodeInfo, PodInfo};

/// Plugin name.
pub const NAME: &str = "ImageLocality";

const MB: i64 = 1024 * 1024;
const MIN_THRESHOLD: i64 = 23 * MB;
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// Image locality.
#[derive(Debug, Default)]
pub struct ImageLocality;

#[derive(Clone)]
struct PreScoreState {
    /// (normalized image, number of nodes having it)
    images: Vec<(String, usize)>,
    total_nodes: usize,
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }

    fn reusable(&self) -> bool {
        // Node-local: see Plugin::reusable.
        true
    }

    fn events(&self) -> Events {
        Events::NODE_ADD.or(Events::NODE_IMAGES)
    }
}

impl PreScorePlugin for ImageLocality {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _: &[usize], snap: &Snapshot) -> Status {
        let images = pod
            .images
            .iter()
            .map(|i| {
                let n = normalized_image_name(i);
                let c = snap.image_node_count(&n);
                (n, c)
            })
            .filter(|(_, c)| *c > 0)
            .collect::<Vec<_>>();
        if images.is_empty() {
            // No node has any of the images: every node would score 0.
            return Status::skip();
        }
        state.insert(PreScoreState { images, total_nodes: snap.nodes.len() });
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.get::<PreScoreState>() else {
            return Err(Status::error("ImageLocality: PreScore state missing"));
        };
        if !node.has_images {
            return Ok(0);
        }
        let mut sum = 0i64;
        for (img, count) in &s.images {
            if let Some(size) = node.node.images.get(img) {
                let spread = *count as f64 / s.total_nodes.max(1) as f64;
                sum += (*size as f64 * spread) as i64;
            }
        }
        let max_threshold = MAX_CONTAINER_THRESHOLD * pod.images.len().max(1) as i64;
        let sum = sum.clamp(MIN_THRESHOLD, max_threshold);
        Ok(MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod, snapshot};

    #[test]
    fn prefers_node_with_image() {
        let snap = snapshot(&[node("a").image("big:1", 500 * MB), node("b")], &[]);
        let mut p = pod("p");
        if let Some(s) = p.pod.spec.as_mut() {
            s.containers[0].image = Some("big:1".into());
        }
        let p = p.info();
        let mut st = CycleState::new();
        ImageLocality.pre_score(&mut st, &p, &[0, 1], &snap);
        // 500MB * 1/2 spread = 250MB → 100 * (250-23)/(1000-23) = 23.
        assert_eq!(ImageLocality.score(&st, &p, &snap.nodes[0]), Ok(23));
        assert_eq!(ImageLocality.score(&st, &p, &snap.nodes[1]), Ok(0));
    }
}
