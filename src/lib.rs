//! berth: a Kubernetes scheduler that makes upstream kube-scheduler's
//! decisions, faster, and explains them.
//!
//! Data flows one way: cluster objects (from a watch or a YAML dump) are
//! compiled into [`model`] views and kept in the [`cache`]; a scheduling cycle
//! runs the [`framework`] with the configured [`plugins`] over a snapshot and
//! yields a decision; the front door (daemon, `explain`, `simulate`, `bench`)
//! acts on it.

pub mod bench;
pub mod bench_e2e;
pub mod cache;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod engine;
pub mod framework;
pub mod model;
pub mod plugins;
pub mod queue;

#[cfg(test)]
pub mod testing;
