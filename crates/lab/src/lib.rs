//! berth's lab: `berth demo`, the in-process benchmarks (`berth bench`), the
//! end-to-end benchmark over HTTP (`berth bench --e2e`), the shadow's
//! throughput (`berth bench --shadow`) and the local
//! cluster's own benchmark (`berth cluster-bench`). Everything here drives the
//! crates below it; nothing below depends on it.
//!
//! Must never be a dependency of the crates below it, nor of the production
//! binary (`berth --no-default-features`; `ci/deps.sh` checks it).

pub mod bench;
pub mod bench_e2e;
pub mod bench_shadow;
pub mod cluster_bench;
pub mod demo;
pub mod differential;
pub mod kwok;
