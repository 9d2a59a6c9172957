//! berth: a Kubernetes scheduler.

pub mod cluster;
