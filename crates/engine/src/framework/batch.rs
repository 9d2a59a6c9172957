//! Opportunistic batching (upstream KEP-5598, "pod scheduling signatures"):
//! the per-node results of the last cycle, kept for the next pod with the
//! same signature.
//!
//! After a pod is placed, only the node that received it changed; a pod with
//! the same signature gets the same Filter verdict and the same raw Score
//! from every node-local plugin ([`super::Plugin::reusable`]) on every other
//! node. So a cycle recomputes the node-local results only for the nodes the
//! snapshot's journal lists as changed since ([`Snapshot::changed_since`]),
//! and reads the rest from here. Plugins that are not node-local (spreading,
//! inter-pod affinity) still run over every node each cycle; normalization,
//! weights and the choice among the best are still done over every feasible
//! node, so the decision is the one a full cycle makes.
//!
//! Any change to a node *object* (labels, taints, images, allocatable) or to
//! the set of nodes drops everything: ImageLocality's score on one node
//! depends on how many nodes have the image.
//!
//! Devices count as part of a node: a device taken or given back marks the
//! nodes its pool serves as changed (the snapshot's device journal,
//! [`crate::cache::devices::Devices::changed_since`]), and a change that
//! can reach any node (a shared pool, a taint rule, a class) drops
//! everything. Pods whose claims differ never share a signature: the
//! DynamicResources plugin signs what the claims ask for
//! ([`super::Plugin::sign_pod`]).
//!
//! The weighted sum of the node-local scores that need no normalization is
//! kept per node, so a cycle adds one number per node for all of them.
//!
//! When no node fit and every Filter was node-local, the whole outcome is
//! kept too: a pod of the same signature, with no node changed since and the
//! window starting at the same node, gets the same statuses, message and
//! PostFilter answer (preemption reads the pod's priority, part of the
//! signature, and the nodes' pods; with reuse on, nothing is nominated). Only
//! an outcome where PostFilter found nothing is kept: a pod that preempts gets
//! nominated and is not the same pod again.

use std::sync::Arc;

use super::{CycleOutcome, Status};
use crate::cache::devices::DeviceMark;
use crate::cache::{JournalMark, Snapshot};

/// `rej` of a node every node-local Filter passed.
pub(crate) const PASS: u8 = u8::MAX;

/// `base` of a node with a node-local score out of range.
pub(crate) const BAD: i64 = i64::MIN;

/// How many signatures keep their results at once (queues often hold a few
/// kinds of pods in turn).
const SIGNATURES: usize = 4;

/// The per-node results of the last few signatures.
#[derive(Debug, Default)]
pub(crate) struct BatchCaches {
    caches: Vec<(u64, BatchCache)>,
    clock: u64,
}

impl BatchCaches {
    /// The results kept for `signature`, or the least recently used ones to
    /// be replaced (refresh then starts them over).
    pub(crate) fn for_signature(&mut self, signature: u64) -> &mut BatchCache {
        self.clock += 1;
        let k = match self.caches.iter().position(|(_, c)| c.signature == signature) {
            Some(k) => k,
            None if self.caches.len() < SIGNATURES => {
                self.caches.push((0, BatchCache::default()));
                self.caches.len() - 1
            }
            None => self.caches.iter().enumerate().min_by_key(|(_, (used, _))| *used).map_or(0, |(k, _)| k),
        };
        let e = &mut self.caches[k];
        e.0 = self.clock;
        &mut e.1
    }

    /// Cycles that reused results, over every signature.
    pub(crate) fn reused(&self) -> u64 {
        self.caches.iter().map(|(_, c)| c.reused).sum()
    }
}

/// Per-node results of the last cycle of one signature.
#[derive(Debug, Default)]
pub(crate) struct BatchCache {
    signature: u64,
    /// The node-local Filter plugins (entry indexes) the verdicts come from.
    filters: Vec<usize>,
    /// The snapshot's history (nodes, devices) when the results were last
    /// brought up to date (None: nothing kept).
    mark: Option<(JournalMark, DeviceMark)>,
    /// Per node index: when its node-local results were last recomputed.
    stamp: Vec<u64>,
    next_stamp: u64,
    /// `next_stamp` when the current cycle began.
    cycle_from: u64,
    /// Per node index: the position, in the cycle's active Filter list, of
    /// the node-local plugin that rejected it, or [`PASS`].
    rej: Vec<u8>,
    /// Per node index: the rejecting status (None: passed), shared with the
    /// outcomes of cycles that need nothing else.
    statuses: Arc<Vec<Option<Status>>>,
    /// Nodes some node-local plugin rejected.
    rejected: usize,
    /// The node-local Score plugins (entry indexes, with their weights and
    /// whether they normalize) the raw scores come from.
    scorers: Vec<(usize, i64, bool)>,
    /// Nodes whose node-local results were recomputed since their raw
    /// scores were (each once; `listed` says which).
    unscored: Vec<usize>,
    listed: Vec<bool>,
    /// Per `scorers` position: raw score by node index.
    raw: Vec<Vec<i64>>,
    /// Per node index: the weighted sum of the raw scores of the scorers
    /// that do not normalize.
    base: Vec<i64>,
    /// Nodes whose `base` is [`BAD`], with the plugin and the score.
    bad: Vec<(usize, &'static str, i64)>,
    /// Cycles that reused results (for tests and figures).
    reused: u64,
    /// The last cycle's outcome when no node fit, with the window's start
    /// and whether PostFilter was skipped; dropped as soon as any node changes.
    failed: Option<((usize, bool), CycleOutcome)>,
    /// Every Filter of the current cycle is node-local: its failure may be
    /// replayed.
    replayable: bool,
    /// A buffer for the rejections of the Filter plugins that are not
    /// node-local, kept across cycles (its contents mean nothing between them).
    scratch: Vec<(usize, Status)>,
}

impl BatchCache {
    /// Readies the cache for a pod with `signature` whose node-local Filter
    /// plugins are `filters`, and lists in `changed` the nodes whose
    /// verdicts must be recomputed (every node when nothing could be kept).
    /// `replayable`: every Filter of the cycle is node-local, so that a
    /// failure may be kept and replayed ([`Self::set_failure`]).
    pub(crate) fn refresh(&mut self, signature: u64, filters: &[usize], replayable: bool, snap: &Snapshot, changed: &mut Vec<usize>) {
        self.replayable = replayable;
        let n = snap.nodes.len();
        let kept = self.signature == signature
            && self.filters == filters
            && self.stamp.len() == n
            && self.mark.is_some_and(|(m, d)| {
                snap.changed_since(m, changed).is_some() && {
                    let before = changed.len();
                    let known = snap.devices.changed_since(d, |name| changed.extend(snap.node_index(name))).is_some();
                    if changed.len() > before {
                        changed.sort_unstable();
                        changed.dedup();
                    }
                    known
                }
            });
        self.mark = Some((snap.journal_mark(), snap.devices.mark()));
        self.cycle_from = self.next_stamp;
        if kept {
            self.reused += 1;
            if !changed.is_empty() {
                self.failed = None;
            }
            return;
        }
        self.failed = None;
        self.signature = signature;
        self.filters.clear();
        self.filters.extend_from_slice(filters);
        self.stamp.clear();
        self.stamp.resize(n, 0);
        self.rej.clear();
        self.rej.resize(n, PASS);
        self.statuses = Arc::new(vec![None; n]);
        self.rejected = 0;
        self.scorers.clear();
        self.unscored.clear();
        self.listed.clear();
        self.listed.resize(n, false);
        changed.clear();
        changed.extend(0..n);
    }

    /// Records node `i`'s node-local verdict: [`PASS`], or the position of
    /// the rejecting plugin and its status.
    pub(crate) fn set_verdict(&mut self, i: usize, verdict: Option<(u8, Status)>) {
        self.next_stamp += 1;
        self.stamp[i] = self.next_stamp;
        if !self.listed[i] {
            self.listed[i] = true;
            self.unscored.push(i);
        }
        let was = self.rej[i] != PASS;
        match verdict {
            None => {
                self.rej[i] = PASS;
                if was {
                    self.rejected -= 1;
                    Arc::make_mut(&mut self.statuses)[i] = None;
                }
            }
            Some((at, s)) => {
                self.rej[i] = at;
                if !was {
                    self.rejected += 1;
                }
                Arc::make_mut(&mut self.statuses)[i] = Some(s);
            }
        }
    }

    /// Node `i`'s node-local verdict: the position, in the cycle's active
    /// Filter list, of the plugin that rejected it, or [`PASS`].
    pub(crate) fn verdict(&self, i: usize) -> u8 {
        self.rej[i]
    }

    /// Every node's verdict (see [`Self::verdict`]), by node index.
    pub(crate) fn verdicts(&self) -> &[u8] {
        &self.rej
    }

    /// Node `i`'s rejecting status (None: it passed).
    pub(crate) fn status(&self, i: usize) -> Option<&Status> {
        self.statuses.get(i).and_then(Option::as_ref)
    }

    /// Every node's rejecting status, shared (a cycle's outcome holds it
    /// without a copy per node).
    pub(crate) fn statuses(&self) -> Arc<Vec<Option<Status>>> {
        Arc::clone(&self.statuses)
    }

    /// How many nodes some node-local plugin rejected.
    pub(crate) fn rejected(&self) -> usize {
        self.rejected
    }

    /// The buffer kept across cycles for the other plugins' rejections
    /// (empty); give it back with [`Self::keep_scratch`].
    pub(crate) fn take_scratch(&mut self) -> Vec<(usize, Status)> {
        let mut s = std::mem::take(&mut self.scratch);
        s.clear();
        s
    }

    /// Keeps `scratch` for the next cycle.
    pub(crate) fn keep_scratch(&mut self, scratch: Vec<(usize, Status)>) {
        self.scratch = scratch;
    }

    /// Were node `i`'s node-local verdicts recomputed in the current cycle
    /// (rather than reused)?
    pub(crate) fn fresh(&self, i: usize) -> bool {
        self.stamp.get(i).is_some_and(|&s| s > self.cycle_from)
    }

    /// Forgets everything (a cycle failed half-way).
    pub(crate) fn clear(&mut self) {
        self.signature = 0;
        self.mark = None;
        self.failed = None;
        self.scorers.clear();
    }

    /// The outcome of the last cycle of this signature, from the same
    /// `start` and with PostFilter run or skipped alike, when no node fit and
    /// nothing changed since (call after `refresh`).
    pub(crate) fn failure(&self, start: usize, skip_post_filter: bool) -> Option<&CycleOutcome> {
        self.failed.as_ref().filter(|(k, _)| *k == (start, skip_post_filter)).map(|(_, o)| o)
    }

    /// Keeps a cycle's outcome where no node fit, for the next identical pod;
    /// one where PostFilter found a way (or that failed) is not kept, nor one
    /// where a Filter that is not node-local ran (its answer can change with
    /// objects the journal does not follow, such as Services).
    pub(crate) fn set_failure(&mut self, start: usize, skip_post_filter: bool, out: &CycleOutcome) {
        self.failed = (self.replayable && out.post_filter.is_none() && out.error.is_none() && out.feasible.is_empty()).then(|| ((start, skip_post_filter), out.clone()));
    }

    /// Readies the raw scores for the node-local Score plugins `scorers`
    /// (entry, weight, normalizes) and lists in `stale` the nodes whose raw
    /// scores must be computed: those every node-local Filter passed and
    /// that changed since their scores were computed (every such node when
    /// the plugins differ from last time). Nodes a node-local Filter
    /// rejected are left out until their verdict is recomputed.
    pub(crate) fn stale_scores(&mut self, scorers: &[(usize, i64, bool)], stale: &mut Vec<usize>) {
        let n = self.stamp.len();
        stale.clear();
        if self.scorers != scorers || self.base.len() != n {
            self.scorers.clear();
            self.scorers.extend_from_slice(scorers);
            self.raw.resize_with(scorers.len(), Vec::new);
            for r in &mut self.raw {
                r.clear();
                r.resize(n, 0);
            }
            self.base.clear();
            self.base.resize(n, 0);
            self.bad.clear();
            self.unscored.clear();
            self.listed.iter_mut().for_each(|l| *l = false);
            stale.extend((0..n).filter(|&i| self.rej[i] == PASS));
            return;
        }
        for i in self.unscored.drain(..) {
            self.listed[i] = false;
            if self.rej[i] == PASS {
                stale.push(i);
            }
        }
    }

    /// Records the raw score of the plugin at `scorers` position `k` for node `i`.
    pub(crate) fn set_raw(&mut self, k: usize, i: usize, score: i64) {
        self.raw[k][i] = score;
    }

    /// Sums the weighted raw scores that need no normalization of the
    /// `stale` nodes, now scored; a score out of range (`bad`) is kept as
    /// [`BAD`], to fail the cycle that finds the node feasible.
    pub(crate) fn scored(&mut self, stale: &[usize], bad: &[(usize, &'static str, i64)]) {
        for &i in stale {
            self.base[i] = self.scorers.iter().zip(&self.raw).filter(|((_, _, norm), _)| !norm).map(|((_, w, _), r)| r[i] * w).sum();
        }
        for &(i, _, _) in bad {
            self.base[i] = BAD;
        }
        self.bad.extend_from_slice(bad);
        let base = &self.base;
        self.bad.retain(|&(i, _, _)| base[i] == BAD);
    }

    /// Some node's node-local score is out of range: the plugin and score
    /// for one of them.
    pub(crate) fn bad(&self) -> &[(usize, &'static str, i64)] {
        &self.bad
    }

    /// Per node index: the weighted sum of the current raw scores that need
    /// no normalization.
    pub(crate) fn base(&self) -> &[i64] {
        &self.base
    }

    /// The raw scores of the plugin at `scorers` position `k`, by node index.
    pub(crate) fn raw(&self, k: usize) -> &[i64] {
        &self.raw[k]
    }
}
