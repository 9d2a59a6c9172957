//! Compact views of pods and nodes, computed once per object version.

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
