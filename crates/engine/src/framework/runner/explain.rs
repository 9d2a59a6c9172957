//! What explain asks of a cycle ([`CycleOptions::explain`]): every node
//! evaluated from the first (no rotating window, no nominated fast path, no
//! reuse of an identical pod's results), the feasible nodes scored even when
//! there is one, and every Score plugin's normalized scores recorded.
//!
//! [`CycleOptions::explain`]: super::CycleOptions::explain

use super::cycle::Cycle;
use super::CycleOutcome;

impl Cycle<'_> {
    /// Does this cycle record every Score plugin's scores?
    pub(super) fn records_scores(&self) -> bool {
        self.opts.explain
    }

    /// Does this cycle explain (every node, from the first, nothing skipped)?
    pub(super) fn explains(&self) -> bool {
        self.opts.explain
    }
}

impl CycleOutcome {
    /// explain: the next Score plugin, whose scores follow.
    pub(super) fn record_score_plugin(&mut self, name: &'static str) {
        self.score_plugins.push(name);
    }

    /// explain: the last recorded Score plugin's scores, per feasible node.
    pub(super) fn record_scores(&mut self, scores: impl Iterator<Item = i64>) {
        self.scores.push(scores.collect());
    }
}
