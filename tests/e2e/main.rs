//! berth's end-to-end tests, in one binary (each test binary links kube and
//! tokio again, so areas are modules here rather than files of their own).
//!
//! - `cli`: the offline commands from the outside;
//! - `docs_commands`: every shell command of README.md and docs/ run (or skipped by a stated rule), every flag documented;
//! - `conformance`: the shared cases that pin decisions to upstream's;
//! - `e2e_*`, `default_spreading`, `gangs`: the daemon over HTTP against the local cluster
//!   (`e2e_recovery`: outages between them; `e2e_shadow`: `--shadow` judging another binder);
//! - `admin`: the daemon's secure port (TLS, delegated auth, limits, explain);
//! - `inflight`: the daemon against the local cluster's in-flight limits (429s), and its memory under 1,000 lists;
//! - `chart`: the chart by the real Helm and deploy/berth.yaml by the real kubectl, on the local cluster;
//! - `chart_rbac`: `berth run` with the chart's RBAC and no more (each rule needed);
//! - `cluster_bench`: the local cluster's benchmark;
//! - `live`: explain, simulate and dump against the local cluster's API;
//! - `versions`: the daemon against a cluster of an older release (1.34);
//! - `both` (over `backend`): scenarios written once, run on the local cluster
//!   (`local_*`) and on a real control plane from `tools/kube/up` (`real_*`,
//!   ignored unless `BERTH_KUBE_DIR` names one and `--ignored` is given);
//!   `both_workloads` adds volumes, gangs, the chart's RBAC and shadow mode.
//! - `real_faults`: faults of the real control plane (kube-apiserver killed
//!   and restarted, watches answered 410 after etcd's compaction, 429s from
//!   priority and fairness), `real_*` only.
//!
//! The local cluster's own tests live with it (`crates/cluster/tests`), the
//! engine's with the engine.

mod admin;
mod backend;
mod both;
mod both_workloads;
mod chart;
mod chart_rbac;
mod cli;
mod cluster_bench;
mod cluster_cli;
mod cluster_controllers;
use berth_cluster::testing as cluster_support;
mod data_dir;
mod conformance;
mod default_spreading;
mod docs_commands;
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
mod real_faults;
mod versions;
