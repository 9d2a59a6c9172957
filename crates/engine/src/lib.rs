//! berth's scheduling engine: upstream kube-scheduler's decisions over
//! compiled views of pods and nodes, with no kube, tokio or axum.
//!
//! Data flows one way: cluster objects (from a watch or a YAML dump) are
//! compiled into [`berth_model`] views and kept in the [`cache`]; a scheduling
//! cycle runs the [`framework`] with the [`plugins`] a [`config`] profile
//! names (resolved into frameworks by [`profile`]) over a snapshot and yields a decision; the front door (the daemon,
//! [`offline`] `explain` and `simulate`, the benchmarks) acts on it.
//!
//! Must never depend on: kube, tokio, axum, hyper, schemars, the daemon, the
//! local cluster or the lab (`ci/deps.sh` checks it); it uses the model and
//! the DRA allocator only.

pub mod cache;
pub mod config;
pub mod framework;
pub mod offline;
pub mod plugins;
pub mod profile;
pub mod queue;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
