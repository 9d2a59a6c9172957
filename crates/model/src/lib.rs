//! Compact views of pods and nodes, computed once per object version.
//!
//! What it is for: the scheduler's compiled views of Kubernetes objects
//! (`PodInfo`, `NodeInfo`, requests as integers, interned labels, compiled
//! selectors, taints, volumes, the one quantity parser), shared by the
//! engine, the DRA allocator and the local cluster.
//!
//! Must never depend on: kube, tokio, axum, hyper, schemars, or any other
//! berth crate (it is the bottom of the stack; `ci/deps.sh` checks it).

pub mod node;
pub mod pod;
pub mod quantity;
pub mod resources;
pub mod selector;
pub mod taints;
pub mod volumes;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use node::{NodeInfo, NodeSpec};
pub use pod::PodInfo;
pub use resources::Resources;
pub use selector::{LabelSet, Labels, PodLabels, Selector};
