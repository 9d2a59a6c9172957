//! Plugin status codes and statuses.

use std::borrow::Cow;
use std::fmt;

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
    /// borrowed, so rejecting thousands of nodes allocates no strings.
    pub reasons: Vec<Cow<'static, str>>,
    /// The plugin that answered (empty for success).
    pub plugin: &'static str,
}

impl Status {
    /// Success.
    pub const fn success() -> Self {
        Status { code: Code::Success, reasons: Vec::new(), plugin: "" }
    }

    /// Skip.
    pub const fn skip() -> Self {
        Status { code: Code::Skip, reasons: Vec::new(), plugin: "" }
    }

    /// A status with one reason.
    pub fn new(code: Code, reason: impl Into<Cow<'static, str>>) -> Self {
        Status { code, reasons: vec![reason.into()], plugin: "" }
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
