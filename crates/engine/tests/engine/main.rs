//! The engine's tests over whole clusters, in one binary that links no kube
//! and no tokio: invariants over random clusters (`properties`), the
//! offline engine's pending set, and storage decisions.

mod dra;
mod many_constraints;
mod offline_pending;
mod properties;
mod storage;
