//! Plugin status codes and statuses.

use std::borrow::Cow;
use std::fmt;

use smallvec::SmallVec;

/// A status's reasons: up to two inline, so that a plugin rejecting
/// thousands of nodes (one or two fixed reasons each) allocates nothing.
pub type Reasons = SmallVec<[Cow<'static, str>; 2]>;

/// The outcome kind of a plugin call (upstream `framework.Code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// The plugin ran and the pod may go on.
    Success,
    /// An internal error: the cycle fails and the pod is retried with backoff.
    Error,
    /// The pod does not fit, and preemption may help.
    Unschedulable,
    /// The pod does not fit, and preemption cannot help.
    UnschedulableAndUnresolvable,
    /// Permit: wait.
    Wait,
    /// PreFilter/PreScore: this plugin's Filter/Score need not run for this pod.
    Skip,
    /// The pod waits for something outside the scheduler (PreEnqueue gates).
    Pending,
}

/// A plugin's answer: a code, the reasons and the plugin that gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The code.
    pub code: Code,
    /// Human-readable reasons ("Insufficient cpu"); fixed reasons are
    /// borrowed and up to two sit inline, so rejecting thousands of nodes
    /// allocates nothing.
    pub reasons: Reasons,
    /// The plugin that answered (empty for success).
    pub plugin: &'static str,
}

impl Status {
    /// Success.
    pub fn success() -> Self {
        Status { code: Code::Success, reasons: Reasons::new(), plugin: "" }
    }

    /// Skip.
    pub fn skip() -> Self {
        Status { code: Code::Skip, reasons: Reasons::new(), plugin: "" }
    }

    /// A status with one reason.
    pub fn new(code: Code, reason: impl Into<Cow<'static, str>>) -> Self {
        let mut reasons = Reasons::new();
        reasons.push(reason.into());
        Status { code, reasons, plugin: "" }
    }

    /// Unschedulable with one reason.
    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::Unschedulable, reason)
    }

    /// UnschedulableAndUnresolvable with one reason.
    pub fn unresolvable(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::UnschedulableAndUnresolvable, reason)
    }

    /// Error with one reason.
    pub fn error(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::Error, reason)
    }

    /// Sets the plugin that answered.
    pub fn with_plugin(mut self, plugin: &'static str) -> Self {
        self.plugin = plugin;
        self
    }

    /// Is this Success?
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// Is this Skip?
    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    /// Is this Unschedulable or UnschedulableAndUnresolvable?
    pub fn is_rejected(&self) -> bool {
        matches!(self.code, Code::Unschedulable | Code::UnschedulableAndUnresolvable)
    }

    /// The reasons joined by ", " (upstream `Status.Message`).
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.code)?;
        if !self.plugin.is_empty() {
            write!(f, " from {}", self.plugin)?;
        }
        if !self.reasons.is_empty() {
            write!(f, ": {}", self.message())?;
        }
        Ok(())
    }
}

/// How many nodes gave each reason (upstream `FitError`'s histogram), for the
/// "0/N nodes are available: ..." message.
///
/// Rejected nodes nearly always repeat a few fixed reasons, so a reason is
/// first compared by address with the last one counted, then looked up among
/// the few distinct ones (a map takes over past a handful); no string is
/// compared per node in the common case and nothing is allocated per node.
#[derive(Debug, Default)]
pub struct ReasonCounts<'a> {
    counts: Vec<(&'a str, usize)>,
    index: std::collections::HashMap<&'a str, usize>,
    last: usize,
}

/// Past this many distinct reasons, lookups go through a map.
const LINEAR_REASONS: usize = 16;

impl<'a> ReasonCounts<'a> {
    /// Counts `reason` `n` times.
    pub fn add(&mut self, reason: &'a str, n: usize) {
        let same = |r: &str| std::ptr::eq(r.as_ptr(), reason.as_ptr()) && r.len() == reason.len();
        if let Some(c) = self.counts.get_mut(self.last).filter(|c| same(c.0)) {
            c.1 += n;
            return;
        }
        let found = if self.counts.len() > LINEAR_REASONS {
            self.index.get(reason).copied()
        } else {
            self.counts.iter().position(|c| same(c.0)).or_else(|| self.counts.iter().position(|c| c.0 == reason))
        };
        let k = match found {
            Some(k) => k,
            None => {
                self.counts.push((reason, 0));
                let k = self.counts.len() - 1;
                if self.counts.len() > LINEAR_REASONS {
                    if self.index.is_empty() {
                        self.index.extend(self.counts.iter().enumerate().map(|(k, c)| (c.0, k)));
                    } else {
                        self.index.insert(reason, k);
                    }
                }
                k
            }
        };
        self.counts[k].1 += n;
        self.last = k;
    }

    /// Counts every reason of `s` once.
    pub fn add_status(&mut self, s: &'a Status) {
        for r in &s.reasons {
            self.add(r, 1);
        }
    }

    /// The "N reason" parts, sorted as strings (as upstream sorts them).
    pub fn parts(&self) -> Vec<String> {
        let mut parts: Vec<String> = self.counts.iter().map(|(r, c)| format!("{c} {r}")).collect();
        parts.sort();
        parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts are those of a plain map over the reasons' text, whether the
    /// same reason comes back by address or as an equal string, below and past
    /// the number of distinct reasons kept in a list.
    #[test]
    fn reason_counts_match_a_map() {
        let owned: Vec<String> = (0..40).map(|i| format!("reason {}", i % 23)).collect();
        let mut statuses: Vec<Status> = Vec::new();
        for (k, o) in owned.iter().enumerate() {
            statuses.push(Status::unschedulable("Insufficient cpu"));
            let mut s = Status::unresolvable(o.clone());
            if k % 3 == 0 {
                s.reasons.push(Cow::Borrowed("Insufficient cpu"));
            }
            statuses.push(s);
        }
        let mut counts = ReasonCounts::default();
        let mut map = std::collections::BTreeMap::<&str, usize>::new();
        for s in &statuses {
            counts.add_status(s);
            for r in &s.reasons {
                *map.entry(r.as_ref()).or_default() += 1;
            }
        }
        counts.add("reason 3", 5);
        *map.entry("reason 3").or_default() += 5;
        let mut want: Vec<String> = map.iter().map(|(r, c)| format!("{c} {r}")).collect();
        want.sort();
        assert_eq!(counts.parts(), want);
    }
}
