//! Opportunistic batching (upstream KEP-5598, "pod scheduling signatures"):
//! the per-node results of the last cycle, kept for the next pod with the
//! same signature.
//!
//! After a pod is placed, only the node that received it changed; a pod with
//! the same signature gets the same Filter verdict and the same raw Score
//! from every node-local plugin ([`super::Plugin::reusable`]) on every other
//! node. So a cycle recomputes only the nodes whose object or pods changed
//! since (tracked by the node's `Arc<NodeSpec>` and its generation) and reads
//! the rest from here. Normalization, weights and the choice among the best
//! are still done over every feasible node, so the decision is the one a full
//! cycle makes.
//!
//! Any change to a node *object* (labels, taints, images, allocatable) or to
//! the number of nodes drops everything: ImageLocality's score on one node
//! depends on how many nodes have the image.
//!
//! When no node fit, the whole outcome is kept too: a pod of the same
//! signature, with no node changed since and the window starting at the same
//! node, gets the same statuses, message and PostFilter answer (preemption
//! reads the pod's priority, part of the signature, and the nodes' pods; with
//! reuse on, nothing is nominated). Only an outcome where PostFilter found
//! nothing is kept: a pod that preempts gets nominated and is not the same
//! pod again.

use std::sync::Arc;

use super::{CycleOutcome, Status};
use crate::model::{NodeInfo, NodeSpec};

/// A cached raw score and the node stamp it was computed at.
#[derive(Clone, Copy, Debug, Default)]
struct Raw {
    score: i64,
    stamp: u64,
}

/// One plugin's cached raw scores, by node index.
pub(crate) struct RawScores<'a>(&'a [Raw]);

impl RawScores<'_> {
    /// The raw score of node `i`.
    pub(crate) fn get(&self, i: usize) -> Option<&i64> {
        self.0.get(i).map(|r| &r.score)
    }
}

/// Per-node results of the last cycle of one signature.
#[derive(Debug, Default)]
pub(crate) struct BatchCache {
    signature: u64,
    /// Per node index: the node object the results were computed from (held,
    /// so that its address cannot be reused by another node) and its generation.
    seen: Vec<(Option<Arc<NodeSpec>>, u64)>,
    /// Per node index: when its results were last recomputed (0: never).
    stamp: Vec<u64>,
    next_stamp: u64,
    /// Per node index: None when feasible, else the rejecting status.
    verdict: Vec<Option<Status>>,
    /// Per plugin entry index: per node index, the raw score.
    raw: Vec<Vec<Raw>>,
    /// Cycles that reused results (for tests and figures).
    pub(crate) reused: u64,
    /// The last cycle's outcome when no node fit, with the window's start
    /// and whether PostFilter was skipped; dropped as soon as any node changes.
    failed: Option<((usize, bool), CycleOutcome)>,
}

impl BatchCache {
    /// Readies the cache for a pod with `signature` over `nodes` and returns
    /// the indexes of the nodes whose verdict must be recomputed.
    pub(crate) fn refresh(&mut self, signature: u64, nodes: &[NodeInfo], changed: &mut Vec<usize>) {
        changed.clear();
        let n = nodes.len();
        let mut reset = self.signature != signature || self.seen.len() != n;
        if !reset {
            for (i, ni) in nodes.iter().enumerate() {
                let (spec, generation) = &self.seen[i];
                if !spec.as_ref().is_some_and(|s| Arc::ptr_eq(s, &ni.node)) {
                    reset = true;
                    break;
                }
                if *generation != ni.generation {
                    changed.push(i);
                }
            }
        }
        if reset || !changed.is_empty() {
            self.failed = None;
        }
        if reset {
            self.signature = signature;
            self.seen.clear();
            self.seen.resize(n, (None, 0));
            self.stamp.clear();
            self.stamp.resize(n, 0);
            self.verdict.clear();
            self.verdict.resize(n, None);
            for r in &mut self.raw {
                r.clear();
            }
            changed.clear();
            changed.extend(0..n);
        } else {
            self.reused += 1;
        }
    }

    /// Records node `i`'s Filter verdict (None: feasible) as computed from `ni`.
    pub(crate) fn set_verdict(&mut self, i: usize, ni: &NodeInfo, verdict: Option<Status>) {
        self.next_stamp += 1;
        self.stamp[i] = self.next_stamp;
        self.seen[i] = (Some(Arc::clone(&ni.node)), ni.generation);
        self.verdict[i] = verdict;
    }

    /// Node `i`'s verdict: None when feasible.
    pub(crate) fn verdict(&self, i: usize) -> Option<&Status> {
        self.verdict.get(i).and_then(Option::as_ref)
    }

    /// Forgets everything (a cycle failed half-way).
    pub(crate) fn clear(&mut self) {
        self.signature = 0;
        self.seen.clear();
        self.failed = None;
    }

    /// The outcome of the last cycle of this signature, from the same
    /// `start` and with PostFilter run or skipped alike, when no node fit and
    /// nothing changed since (call after `refresh`).
    pub(crate) fn failure(&self, start: usize, skip_post_filter: bool) -> Option<&CycleOutcome> {
        self.failed.as_ref().filter(|(k, _)| *k == (start, skip_post_filter)).map(|(_, o)| o)
    }

    /// Keeps a cycle's outcome where no node fit, for the next identical pod;
    /// one where PostFilter found a way (or that failed) is not kept.
    pub(crate) fn set_failure(&mut self, start: usize, skip_post_filter: bool, out: &CycleOutcome) {
        self.failed = (out.post_filter.is_none() && out.error.is_none() && out.feasible.is_empty()).then(|| ((start, skip_post_filter), out.clone()));
    }

    fn plugin(raw: &mut Vec<Vec<Raw>>, entry: usize, n: usize) -> &mut Vec<Raw> {
        if raw.len() <= entry {
            raw.resize(entry + 1, Vec::new());
        }
        let r = &mut raw[entry];
        if r.len() != n {
            r.clear();
            r.resize(n, Raw::default());
        }
        r
    }

    /// The nodes among `feasible` whose raw score from plugin `entry` is not
    /// current.
    pub(crate) fn stale_scores(&mut self, entry: usize, feasible: &[usize], out: &mut Vec<usize>) {
        out.clear();
        let n = self.stamp.len();
        let r = Self::plugin(&mut self.raw, entry, n);
        let stamps = &self.stamp;
        out.extend(feasible.iter().copied().filter(|&i| stamps[i] == 0 || r[i].stamp != stamps[i]));
    }

    /// Records plugin `entry`'s raw score for node `i`.
    pub(crate) fn set_raw(&mut self, entry: usize, i: usize, score: i64) {
        let n = self.stamp.len();
        let stamp = self.stamp[i];
        Self::plugin(&mut self.raw, entry, n)[i] = Raw { score, stamp };
    }

    /// Plugin `entry`'s raw scores by node index (current for the nodes
    /// `stale_scores` did not list and those given to `set_raw` since).
    pub(crate) fn raw_scores(&self, entry: usize) -> RawScores<'_> {
        RawScores(self.raw.get(entry).map_or(&[], Vec::as_slice))
    }

    /// Plugin `entry`'s raw score for node `i` (call after `set_raw` or a
    /// `stale_scores` that did not list it).
    pub(crate) fn raw(&self, entry: usize, i: usize) -> i64 {
        self.raw.get(entry).and_then(|r| r.get(i)).map_or(0, |r| r.score)
    }
}
