//! berth's structured device allocator for dynamic resource allocation (DRA).
//!
//! Upstream kube-scheduler's DynamicResources plugin calls the "incubating"
//! structured allocator of `k8s.io/dynamic-resource-allocation`; this crate
//! makes the same decisions from compact views:
//!
//! - [`inventory`]: ResourceSlices and DeviceTaintRules, kept incrementally,
//!   and the pools that can serve a node;
//! - [`claims`]: DeviceClasses and ResourceClaims with API defaults applied;
//! - [`cel`]: device selectors on cel-rust with Kubernetes' DRA environment;
//! - [`allocator`]: the devices in use, and the per-pod prepare / per-node
//!   allocate search.
//!
//! No kube, no tokio: the plugin, the cache and the daemon wire it up.
//!
//! Must never depend on: kube, tokio, axum, hyper, schemars, or a berth
//! crate above the model (`ci/deps.sh` checks it).

pub mod allocator;
pub mod cel;
pub mod claims;
pub mod intern;
pub mod inventory;
pub mod quantity;
pub mod semver;


pub use claims::{ClaimView, Classes, ClassView};
pub use inventory::{DeviceId, Inventory, NodeRef};
pub use allocator::{AllocError, AllocateInput, ClaimAllocation, DeviceResult, InUse, NodeVerdict, Prepared, RequestDiagnosis, prepare};
