//! berth's integration tests, in one binary (each test binary links kube and
//! tokio again, so areas are modules here rather than files of their own).
//!
//! - `cli`: the offline commands from the outside;
//! - `conformance`: the shared cases that pin decisions to upstream's;
//! - `properties`: invariants over random clusters;
//! - `cluster_*`: the local cluster through kube-rs, kubectl and its faults;
//! - `e2e_*`: the daemon over HTTP against the local cluster;
//! - `admin`: the daemon's secure port (TLS, delegated auth, limits, explain).

mod admin;
mod cli;
mod cluster_apply;
mod cluster_bench;
mod cluster_clients;
mod cluster_controllers;
mod cluster_crd;
mod cluster_helm;
mod cluster_faults;
mod cluster_kube;
mod cluster_kubectl;
mod cluster_lifecycle;
mod cluster_openapi;
mod cluster_storage;
mod conformance;
mod default_spreading;
mod e2e_daemon;
mod e2e_storage;
mod e2e_support;
mod e2e_throughput;
mod e2e_trust;
mod e2e_workloads;
mod fault_proxy;
mod gangs;
mod offline_pending;
mod properties;
mod storage;
