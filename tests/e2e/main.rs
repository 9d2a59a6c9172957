//! berth's end-to-end tests, in one binary (each test binary links kube and
//! tokio again, so areas are modules here rather than files of their own).
//!
//! - `cli`: the offline commands from the outside;
//! - `conformance`: the shared cases that pin decisions to upstream's;
//! - `e2e_*`, `default_spreading`, `gangs`: the daemon over HTTP against the local cluster
//!   (`e2e_recovery`: outages between them; `e2e_shadow`: `--shadow` judging another binder);
//! - `admin`: the daemon's secure port (TLS, delegated auth, limits, explain);
//! - `inflight`: the daemon against the local cluster's in-flight limits (429s), and its memory under 1,000 lists;
//! - `chart_rbac`: `berth run` with the chart's RBAC and no more (each rule needed);
//! - `cluster_bench`: the local cluster's benchmark;
//! - `live`: explain, simulate and dump against the local cluster's API;
//! - `versions`: the daemon against a cluster of an older release (1.34).
//!
//! The local cluster's own tests live with it (`crates/cluster/tests`), the
//! engine's with the engine.

mod admin;
mod chart_rbac;
mod cli;
mod cluster_bench;
mod cluster_cli;
mod cluster_controllers;
use berth_cluster::testing as cluster_support;
mod data_dir;
mod conformance;
mod default_spreading;
mod dra;
mod e2e_daemon;
mod e2e_recovery;
mod e2e_shadow;
mod e2e_storage;
mod e2e_support;
mod e2e_throughput;
mod e2e_trust;
mod e2e_workloads;
mod fault_proxy;
mod gangs;
mod inflight;
mod live;
mod versions;
