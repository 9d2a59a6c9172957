//! The shadow's throughput: verdicts per second on a cluster of N nodes
//! (`berth bench --shadow`). In process, on one core: another scheduler (a
//! round-robin binder, the cheapest stand-in) binds each pod, berth judges
//! the binding on the cluster as it stood just before it (the timed part:
//! [`berth_daemon::shadow::judge_with`] with the daemon's frameworks and
//! limiter of explained disagreements, what `berth run --shadow` runs per
//! binding), then the binding is applied, as the shadow's loop does. The
//! cluster and pods are `berth bench`'s SchedulingBasic.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use berth_daemon::shadow::{DetailLimiter, Verdict, judge_every_node, judge_with};
use berth_engine::config::Config;

use crate::bench::{peak_rss_mb, setup};

/// The shadow benchmark's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ShadowFigures {
    /// Nodes.
    pub nodes: usize,
    /// Bindings judged.
    pub verdicts: usize,
    /// Verdicts per second (judging only; binder and bookkeeping excluded).
    pub verdicts_per_second: f64,
    /// Median time to judge one binding.
    pub p50_ms: f64,
    /// 99th percentile time to judge one binding.
    pub p99_ms: f64,
    /// Peak resident memory of the process so far.
    pub peak_rss_mb: f64,
    /// Verdicts by verdict.
    pub counts: BTreeMap<Verdict, usize>,
    /// Disagreements explained with per-plugin scores (at most
    /// `DETAIL_RATE` a second, as in the daemon).
    pub detailed: usize,
}

/// Judges `verdicts` bindings on a cluster of `nodes` nodes (at most one
/// pod per node and round of the binder; SchedulingBasic's pods). None when
/// the cluster cannot be set up.
pub fn run(nodes: usize, verdicts: usize) -> Option<ShadowFigures> {
    let (mut snap, _) = setup("SchedulingBasic", nodes)?;
    let config = Config::parse("").ok()?;
    let mut fws = berth_engine::profile::frameworks(&config, 42);
    judge_every_node(&mut fws);
    let fw = fws.into_iter().next()?;
    let mut detail = DetailLimiter::default();
    let mut detailed = 0;
    let template = setup("SchedulingBasic", 1)?.1.into_iter().next()?;
    let names: Vec<String> = snap.nodes.iter().map(|n| n.name().to_string()).collect();
    let mut lat = Vec::with_capacity(verdicts);
    let mut counts = BTreeMap::new();
    let mut judging = 0.0;
    for i in 0..verdicts {
        let mut p = (*template).clone();
        p.name = format!("shadow-{i}");
        p.uid = p.name.clone();
        let pod = Arc::new(p);
        let bound = &names[i % names.len()];
        let t = Instant::now();
        let j = judge_with(&fw, &snap, &pod, bound, || {
            let d = detail.take(Instant::now());
            detailed += usize::from(d);
            d
        });
        let took = t.elapsed().as_secs_f64();
        judging += took;
        lat.push(took * 1000.0);
        *counts.entry(j.verdict).or_insert(0) += 1;
        let mut b = (*pod).clone();
        b.node_name = Some(bound.clone());
        snap.add_pod(Arc::new(b));
    }
    lat.sort_by(f64::total_cmp);
    let pct = |q: f64| crate::bench::percentile(&lat, q);
    Some(ShadowFigures {
        nodes,
        verdicts,
        verdicts_per_second: verdicts as f64 / judging.max(1e-9),
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        peak_rss_mb: peak_rss_mb(),
        counts,
        detailed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judges_every_binding_small() {
        let f = run(20, 30).expect("the cluster is set up");
        assert_eq!(f.verdicts, 30);
        assert_eq!(f.counts.values().sum::<usize>(), 30);
        assert!(f.verdicts_per_second > 0.0);
        // A round-robin binder on an even cluster: berth never rejects its node.
        assert_eq!(f.counts.get(&Verdict::Infeasible), None, "{:?}", f.counts);
        assert_eq!(
            f.counts.get(&Verdict::Unschedulable),
            None,
            "{:?}",
            f.counts
        );
    }
}
