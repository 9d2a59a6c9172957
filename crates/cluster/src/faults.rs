//! Fault injection: error answers for a fraction of requests per (verb,
//! resource), periodic watch cuts, history compaction and whole-server
//! restarts. Settable at start ([`FaultConfig`]) and at run time
//! ([`Faults`], from `LocalCluster::faults()`).

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::store::Store;

/// Errors from fault configuration and run-time fault actions.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A fault rule string could not be parsed.
    #[error("invalid fault rule {0:?}: expected VERB:RESOURCE:KIND:FRACTION, e.g. create:pods:429:0.1 (KIND is 429, 500 or 409; * matches any verb or resource)")]
    BadRule(String),
    /// The server could not be restarted.
    #[error("server restart failed: {0}")]
    Restart(String),
    /// The cluster has been shut down.
    #[error("the cluster is not running")]
    NotRunning,
}

/// What an injected failure answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// 429 TooManyRequests with a Retry-After header.
    TooManyRequests {
        /// Seconds in Retry-After.
        retry_after_seconds: u32,
    },
    /// 500 InternalError.
    InternalError,
    /// 409 Conflict.
    Conflict,
}

/// Answer a fraction of matching requests with a fault.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorRule {
    /// Verb (get, list, watch, create, update, patch, delete, deletecollection); None = any.
    pub verb: Option<String>,
    /// Resource (`pods`, `pods/binding`, `leases`); None = any.
    pub resource: Option<String>,
    /// The answer.
    pub kind: FaultKind,
    /// Fraction of matching requests, 0.0..=1.0.
    pub fraction: f64,
}

impl FromStr for ErrorRule {
    type Err = Error;

    /// Parse `VERB:RESOURCE:KIND:FRACTION` (`*` for any verb/resource).
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::BadRule(s.to_string());
        let parts: Vec<&str> = s.split(':').collect();
        let [verb, resource, kind, fraction] = parts.as_slice() else { return Err(bad()) };
        let any = |x: &str| if x == "*" || x.is_empty() { None } else { Some(x.to_string()) };
        let kind = match *kind {
            "429" => FaultKind::TooManyRequests { retry_after_seconds: 1 },
            "500" => FaultKind::InternalError,
            "409" => FaultKind::Conflict,
            _ => return Err(bad()),
        };
        let fraction: f64 = fraction.parse().map_err(|_| bad())?;
        if !(0.0..=1.0).contains(&fraction) {
            return Err(bad());
        }
        Ok(ErrorRule { verb: any(verb), resource: any(resource), kind, fraction })
    }
}

/// Faults configured at start.
#[derive(Debug, Clone, Default)]
pub struct FaultConfig {
    /// Error rules.
    pub error_rules: Vec<ErrorRule>,
    /// End every watch after this long.
    pub watch_cut_interval: Option<Duration>,
}

/// Something that can restart the HTTP server (implemented by the cluster).
pub(crate) trait Restarter: Send + Sync {
    fn restart(self: Arc<Self>) -> futures::future::BoxFuture<'static, Result<(), String>>;
}

struct Inner {
    rules: RwLock<Vec<ErrorRule>>,
    any_rules: AtomicBool,
    cut: RwLock<Option<Duration>>,
    injected: AtomicU64,
    watch_gen: Arc<watch::Sender<u64>>,
    store: Arc<Store>,
    server: OnceLock<Weak<dyn Restarter>>,
}

/// Run-time fault handle. Cheap to clone.
#[derive(Clone)]
pub struct Faults {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").field("rules", &self.rules()).field("watch_cut", &self.watch_cut_interval()).finish()
    }
}

impl Faults {
    pub(crate) fn new(cfg: &FaultConfig, store: Arc<Store>, watch_gen: Arc<watch::Sender<u64>>) -> Self {
        let f = Faults {
            inner: Arc::new(Inner {
                rules: RwLock::new(Vec::new()),
                any_rules: AtomicBool::new(false),
                cut: RwLock::new(cfg.watch_cut_interval),
                injected: AtomicU64::new(0),
                watch_gen,
                store,
                server: OnceLock::new(),
            }),
        };
        f.set_error_rules(cfg.error_rules.clone());
        f
    }

    pub(crate) fn set_server(&self, s: Weak<dyn Restarter>) {
        let _ = self.inner.server.set(s);
    }

    /// Replace all error rules.
    pub fn set_error_rules(&self, rules: Vec<ErrorRule>) {
        let any = !rules.is_empty();
        match self.inner.rules.write() {
            Ok(mut g) => *g = rules,
            Err(p) => *p.into_inner() = rules,
        }
        self.inner.any_rules.store(any, Ordering::Release);
    }

    /// Add one error rule.
    pub fn add_error_rule(&self, rule: ErrorRule) {
        let mut rules = self.rules();
        rules.push(rule);
        self.set_error_rules(rules);
    }

    /// Remove all error rules.
    pub fn clear_error_rules(&self) {
        self.set_error_rules(Vec::new());
    }

    /// Current error rules.
    pub fn rules(&self) -> Vec<ErrorRule> {
        match self.inner.rules.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// How many faults have been injected so far.
    pub fn injected_count(&self) -> u64 {
        self.inner.injected.load(Ordering::Relaxed)
    }

    /// Decide whether this request gets a fault.
    pub(crate) fn check(&self, verb: &str, resource: &str) -> Result<(), FaultKind> {
        if !self.inner.any_rules.load(Ordering::Acquire) {
            return Ok(());
        }
        let rules = match self.inner.rules.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        for r in rules.iter() {
            if r.verb.as_deref().is_some_and(|v| v != verb) || r.resource.as_deref().is_some_and(|x| x != resource) {
                continue;
            }
            if r.fraction > 0.0 && rand::random::<f64>() < r.fraction {
                self.inner.injected.fetch_add(1, Ordering::Relaxed);
                return Err(r.kind);
            }
        }
        Ok(())
    }

    /// End every watch after `d` (None: never); applies to new watches.
    /// Call [`Faults::cut_watches`] to also end the open ones now.
    pub fn set_watch_cut_interval(&self, d: Option<Duration>) {
        match self.inner.cut.write() {
            Ok(mut g) => *g = d,
            Err(p) => *p.into_inner() = d,
        }
    }

    /// The current watch cut interval.
    pub fn watch_cut_interval(&self) -> Option<Duration> {
        match self.inner.cut.read() {
            Ok(g) => *g,
            Err(p) => *p.into_inner(),
        }
    }

    /// End every open watch now.
    pub fn cut_watches(&self) {
        self.inner.watch_gen.send_modify(|g| *g += 1);
    }

    /// Drop all retained watch history: resuming from an older
    /// resourceVersion then answers 410 Gone.
    pub fn compact_history(&self) {
        self.inner.store.compact();
    }

    /// Restart the whole server: stop the listener and every connection
    /// and watch, then listen again on the same port. State is kept.
    pub async fn restart_server(&self) -> Result<(), Error> {
        let server = self.inner.server.get().and_then(Weak::upgrade).ok_or(Error::NotRunning)?;
        server.restart().await.map_err(Error::Restart)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_rules() {
        let r: ErrorRule = "create:pods:429:0.5".parse().expect("valid");
        assert_eq!(r.verb.as_deref(), Some("create"));
        assert_eq!(r.kind, FaultKind::TooManyRequests { retry_after_seconds: 1 });
        let r: ErrorRule = "*:*:500:1".parse().expect("valid");
        assert_eq!(r.verb, None);
        assert!("x:y:418:0.1".parse::<ErrorRule>().is_err());
        assert!("a:b:409:2".parse::<ErrorRule>().is_err());
    }
}
