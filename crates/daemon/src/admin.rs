//! The admin port, served as kube-scheduler serves 10259: HTTPS (a
//! self-signed certificate unless `--tls-cert-file`/`--tls-private-key-file`
//! are given), delegated authentication (TokenReview) and authorization
//! (SubjectAccessReview on the non-resource path and the request's verb)
//! with short-lived caches of both, `/healthz`, `/livez` and `/readyz`
//! always allowed (upstream's `--authorization-always-allow-paths`) and the
//! group `system:masters` always allowed (upstream's default
//! `AlwaysAllowGroups`).
//!
//! Routes: /healthz, /livez, /readyz (200 exactly while every required
//! watch is synced and the loop has its caches; `?verbose` lists every
//! watch with its state), /metrics, and /debug/explain?pod=ns/name (explain's JSON for a
//! pending pod), and /debug/shadow (shadow mode's verdicts). Explain never runs on the scheduling loop: the loop
//! publishes a copy of its snapshot and pending pods at most once a second,
//! and only when a request asked for one ([`ExplainHub`]); explain runs on a
//! blocking thread, one at a time, behind a token bucket (429 beyond it).
//!
//! Connections are bounded, and no client can starve the probes:
//!
//! - at most [`AdminOptions::max_connections`] are held. Every connection
//!   is accepted at once; when the limit is reached, the new one takes the
//!   slot of the held connection that has been idle the longest: one that
//!   has finished its requests (a keep-alive connection between requests)
//!   or has not sent a whole request yet (a silent socket, a slow
//!   handshake, unfinished headers), oldest first. Only a connection with
//!   a request in flight keeps its slot; requests are short (explain
//!   waits at most 5 s, a TokenReview or SubjectAccessReview 10 s), so a
//!   new connection waits at most [`AdminOptions::handshake_timeout`] for
//!   one of them to end. A kubelet probe, which opens a new connection
//!   each time, is therefore answered whatever idle sockets or keep-alive
//!   connections others hold. kube-scheduler's Go server has no limit at
//!   all (one goroutine per connection); this is that behaviour with a
//!   bound on descriptors.
//! - a connection is closed when its TLS handshake (from the accept)
//!   takes longer than [`AdminOptions::handshake_timeout`] (5 s), when a
//!   request's headers take longer than
//!   [`AdminOptions::header_read_timeout`] (10 s), or when it sits idle
//!   between requests for [`AdminOptions::idle_timeout`] (30 s).
//!   Upstream's are 32 s for headers (the handshake included) and 90 s
//!   idle; shorter ones cost a scraper a reconnection, and free slots
//!   sooner.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use berth_tls::tokio_rustls::rustls::{self, pki_types};
use berth_tls::tokio_rustls::{TlsAcceptor, TlsConnector};
use berth_tls::rcgen;

use super::leader::Lease;
use super::metrics::Metrics;
use super::shadow::ShadowLog;
use super::watch::WatchHealth;

/// What /healthz and /readyz read.
#[derive(Clone, Debug)]
pub struct Health {
    /// This replica's lease (healthz: a leader that stopped renewing is unhealthy).
    pub lease: Lease,
    /// The watches (readyz, and berth_watch_state at scrape time).
    pub watches: WatchHealth,
    /// Upstream's leader-election healthz tolerance past leaseDuration.
    pub tolerance: std::time::Duration,
}
use berth_engine::cache::Snapshot;
use berth_engine::offline::explain_member;
use berth_engine::framework::Framework;
use berth_model::PodInfo;

/// Why the admin port could not start, or a client request failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listener could not bind.
    #[error("binding the admin listener on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Only one of the certificate and the key was given.
    #[error("--tls-cert-file and --tls-private-key-file must be given together (or neither, for a self-signed certificate)")]
    HalfPair,
    /// A certificate or key file could not be read.
    #[error("{flag} {path}: {message}")]
    Pem {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The self-signed certificate could not be made.
    #[error("making a self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    /// rustls refused the certificate or key.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// A client request (tests, `berth demo`) failed.
    #[error("GET {path}: {message}")]
    Client {
        /// The path.
        path: String,
        /// What went wrong.
        message: String,
    },
}

/// How the admin port is served (the defaults are upstream's).
#[derive(Clone, Debug)]
pub struct AdminOptions {
    /// PEM certificate chain (`--tls-cert-file`); self-signed when absent.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key (`--tls-private-key-file`).
    pub tls_private_key_file: Option<PathBuf>,
    /// Connections held at once; beyond it a new connection takes the
    /// slot of the one idle the longest (see the module's doc).
    pub max_connections: usize,
    /// Time allowed from the accept to the end of the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time allowed for each request's headers, from their first byte.
    pub header_read_timeout: Duration,
    /// An idle keep-alive connection is closed after this long.
    pub idle_timeout: Duration,
    /// Paths served without authorization (a trailing `*` matches a prefix).
    pub always_allow_paths: Vec<String>,
    /// Groups authorized without a SubjectAccessReview.
    pub always_allow_groups: Vec<String>,
    /// How long a TokenReview answer is reused.
    pub authn_cache_ttl: Duration,
    /// How long an allowing SubjectAccessReview answer is reused.
    pub authz_allow_ttl: Duration,
    /// How long a denying SubjectAccessReview answer is reused.
    pub authz_deny_ttl: Duration,
    /// Explain requests admitted per second (token bucket refill).
    pub explain_per_second: f64,
    /// Explain requests admitted in a burst (token bucket size).
    pub explain_burst: f64,
}

impl Default for AdminOptions {
    fn default() -> Self {
        AdminOptions {
            tls_cert_file: None,
            tls_private_key_file: None,
            max_connections: 256,
            handshake_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            always_allow_paths: vec!["/healthz".into(), "/readyz".into(), "/livez".into()],
            always_allow_groups: vec!["system:masters".into()],
            authn_cache_ttl: Duration::from_secs(10),
            authz_allow_ttl: Duration::from_secs(10),
            authz_deny_ttl: Duration::from_secs(10),
            explain_per_second: 2.0,
            explain_burst: 4.0,
        }
    }
}

/// Counters of the admin port, for tests and logs.
#[derive(Clone, Debug, Default)]
pub struct AdminStats {
    open: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    accepted: Arc<AtomicU64>,
    evicted: Arc<AtomicU64>,
    snapshots: Arc<AtomicU64>,
    explained: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

impl AdminStats {
    /// Connections held now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
    /// The most connections ever held at once.
    pub fn peak_connections(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
    /// Connections accepted so far.
    pub fn accepted_connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
    /// Idle connections closed to free a slot for a new one.
    pub fn evicted_connections(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
    /// Snapshots the scheduling loop published for explain.
    pub fn explain_snapshots(&self) -> u64 {
        self.snapshots.load(Ordering::Relaxed)
    }
    /// Explain requests answered from a snapshot.
    pub fn explain_answered(&self) -> u64 {
        self.explained.load(Ordering::Relaxed)
    }
    /// Explain requests refused with 429.
    pub fn explain_refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// What a running admin port tells its owner.
#[derive(Clone, Debug)]
pub struct AdminInfo {
    /// The bound address.
    pub addr: SocketAddr,
    /// The serving certificate (DER), for clients that pin it.
    pub cert_der: Vec<u8>,
    /// Counters.
    pub stats: AdminStats,
}

// ---------------------------------------------------------------- explain

/// The scheduling loop's data, as published for explain.
#[derive(Debug)]
pub struct ExplainView {
    at: Instant,
    snapshot: Snapshot,
    pending: Vec<Arc<PodInfo>>,
}

/// Where the scheduling loop publishes its data for explain, at most once a
/// second and only when asked, and where explain requests are admitted.
pub struct ExplainHub {
    wanted: AtomicBool,
    last: Mutex<Option<Instant>>,
    view: watch::Sender<Option<Arc<ExplainView>>>,
    frameworks: Vec<Framework>,
    bucket: Mutex<Bucket>,
    busy: Arc<Semaphore>,
    stats: AdminStats,
}

impl std::fmt::Debug for ExplainHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExplainHub").field("wanted", &self.wanted).finish_non_exhaustive()
    }
}

/// The loop publishes at most this often; a view this old is fresh.
const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);

impl ExplainHub {
    fn new(frameworks: Vec<Framework>, opts: &AdminOptions, stats: AdminStats) -> Self {
        ExplainHub {
            wanted: AtomicBool::new(false),
            last: Mutex::new(None),
            view: watch::channel(None).0,
            frameworks,
            bucket: Mutex::new(Bucket::new(opts.explain_burst, opts.explain_per_second)),
            busy: Arc::new(Semaphore::new(1)),
            stats,
        }
    }

    /// True when an explain request waits for data and the last publication
    /// is at least a second old: the loop should call [`ExplainHub::publish`].
    pub fn wanted(&self) -> bool {
        if !self.wanted.load(Ordering::Acquire) {
            return false;
        }
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.is_none_or(|t| t.elapsed() >= PUBLISH_INTERVAL)
    }

    /// Publishes the loop's snapshot and pending pods (the loop's only part in explain).
    pub fn publish(&self, snapshot: Snapshot, pending: Vec<Arc<PodInfo>>) {
        let now = Instant::now();
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        self.wanted.store(false, Ordering::Release);
        self.stats.snapshots.fetch_add(1, Ordering::Relaxed);
        self.view.send_replace(Some(Arc::new(ExplainView { at: now, snapshot, pending })));
    }

    /// A view at most a second old, asking the loop for one when needed.
    async fn fresh_view(&self, wait: Duration) -> Option<Arc<ExplainView>> {
        let fresh = |v: &Option<Arc<ExplainView>>| v.as_ref().is_some_and(|v| v.at.elapsed() < PUBLISH_INTERVAL);
        let mut rx = self.view.subscribe();
        if let Some(v) = rx.borrow().as_ref().filter(|v| v.at.elapsed() < PUBLISH_INTERVAL) {
            return Some(v.clone());
        }
        self.wanted.store(true, Ordering::Release);
        match tokio::time::timeout(wait, rx.wait_for(fresh)).await {
            Ok(Ok(v)) => v.clone(),
            _ => None,
        }
    }
}

/// A token bucket.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    size: f64,
    rate: f64,
    at: Instant,
}

impl Bucket {
    fn new(size: f64, rate: f64) -> Self {
        let size = size.max(1.0);
        Bucket { tokens: size, size, rate: rate.max(0.0), at: Instant::now() }
    }

    fn take(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.size);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

// ---------------------------------------------------------------- authn/authz

/// A cache of answers with an expiry each, bounded in size.
#[derive(Debug)]
struct TtlCache<K, V> {
    map: HashMap<K, (Instant, V)>,
    cap: usize,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    fn new(cap: usize) -> Self {
        TtlCache { map: HashMap::new(), cap }
    }

    fn get(&self, k: &K, now: Instant) -> Option<V> {
        self.map.get(k).filter(|(exp, _)| *exp > now).map(|(_, v)| v.clone())
    }

    fn insert(&mut self, k: K, v: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        if self.map.len() >= self.cap {
            self.map.retain(|_, (exp, _)| *exp > now);
            if self.map.len() >= self.cap {
                self.map.clear();
            }
        }
        self.map.insert(k, (now + ttl, v));
    }
}

/// Outcome of authorization.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Decision {
    Allow,
    /// Denied or no opinion, with the authorizer's reason.
    Deny(String),
}

/// Delegated authentication and authorization through the API server.
struct Guard {
    client: kube::Client,
    opts: AdminOptions,
    tokens: Mutex<TtlCache<[u8; 32], Option<UserInfo>>>,
    reviews: Mutex<TtlCache<String, Decision>>,
    /// Bounds the reviews in flight (each connection has at most one request).
    calls: Semaphore,
}

/// How long one TokenReview or SubjectAccessReview may take.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Guard {
    /// The user a bearer token belongs to; None when the token is not valid.
    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, String> {
        let key: [u8; 32] = {
            let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
            let mut k = [0u8; 32];
            k.copy_from_slice(d.as_ref());
            k
        };
        if let Some(u) = lock(&self.tokens).get(&key, Instant::now()) {
            return Ok(u);
        }
        let _permit = self.calls.acquire().await.map_err(|e| e.to_string())?;
        let review = TokenReview { spec: TokenReviewSpec { token: token.to_string(), audiences: None }, ..Default::default() };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review))
            .await
            .map_err(|_| "TokenReview timed out".to_string())?
            .map_err(|e| format!("TokenReview: {e}"))?;
        let status = answer.status.unwrap_or_default();
        let user = if status.authenticated == Some(true) { Some(status.user.unwrap_or_default()) } else { None };
        if user.is_none()
            && let Some(e) = status.error.filter(|e| !e.is_empty())
        {
            tracing::debug!(error = %e, "TokenReview did not authenticate the token");
        }
        lock(&self.tokens).insert(key, user.clone(), self.opts.authn_cache_ttl, Instant::now());
        Ok(user)
    }

    /// Whether `user` may `verb` the non-resource `path`.
    async fn authorize(&self, user: &UserInfo, verb: &str, path: &str) -> Result<Decision, String> {
        let groups = user.groups.clone().unwrap_or_default();
        if groups.iter().any(|g| self.opts.always_allow_groups.contains(g)) {
            return Ok(Decision::Allow);
        }
        let spec = SubjectAccessReviewSpec {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes { path: Some(path.to_string()), verb: Some(verb.to_string()) }),
            resource_attributes: None,
        };
        let key = serde_json::to_string(&spec).map_err(|e| e.to_string())?;
        if let Some(d) = lock(&self.reviews).get(&key, Instant::now()) {
            return Ok(d);
        }
        let _permit = self.calls.acquire().await.map_err(|e| e.to_string())?;
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let review = SubjectAccessReview { spec, ..Default::default() };
        let answer = tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review))
            .await
            .map_err(|_| "SubjectAccessReview timed out".to_string())?
            .map_err(|e| format!("SubjectAccessReview: {e}"))?;
        let status = answer.status.unwrap_or_default();
        let (decision, ttl) = if status.allowed {
            (Decision::Allow, self.opts.authz_allow_ttl)
        } else {
            (Decision::Deny(status.reason.unwrap_or_default()), self.opts.authz_deny_ttl)
        };
        lock(&self.reviews).insert(key, decision.clone(), ttl, Instant::now());
        Ok(decision)
    }

}

/// Whether `path` is one of `allowed` (a trailing `*` matches a prefix).
fn path_allowed(allowed: &[String], path: &str) -> bool {
    allowed.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => p == path,
    })
}

/// The bearer token of a request, as upstream reads it: `Bearer <token>`,
/// the scheme case-insensitive; anything else is no token (anonymous).
fn bearer(h: &HeaderMap) -> Option<&str> {
    let v = h.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = v.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn anonymous() -> UserInfo {
    UserInfo { username: Some("system:anonymous".into()), groups: Some(vec!["system:unauthenticated".into()]), uid: None, extra: None }
}

fn status(code: StatusCode, reason: &str, message: &str, details: bool) -> Response {
    let mut v = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()});
    if details {
        v["details"] = serde_json::json!({});
    }
    (code, [(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

/// Authentication, then authorization, as upstream's filters order them.
async fn guard(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let verb = req.method().as_str().to_ascii_lowercase();
    let user = match bearer(req.headers()) {
        None => anonymous(),
        Some(token) => match g.authenticate(token).await {
            Ok(Some(u)) => u,
            Ok(None) => return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized", false),
            Err(e) => {
                tracing::warn!(error = %e, "unable to authenticate the request");
                return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized", false);
            }
        },
    };
    if path_allowed(&g.opts.always_allow_paths, &path) {
        return next.run(req).await;
    }
    match g.authorize(&user, &verb, &path).await {
        Ok(Decision::Allow) => next.run(req).await,
        Ok(Decision::Deny(reason)) => {
            let name = user.username.as_deref().unwrap_or_default();
            let mut msg = format!("forbidden: User {name:?} cannot {verb} path {path:?}");
            if !reason.is_empty() {
                msg.push_str(&format!(": {reason:?}"));
            }
            status(StatusCode::FORBIDDEN, "Forbidden", &msg, true)
        }
        Err(e) => {
            tracing::warn!(error = %e, %path, "authorization failed");
            (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], format!("Internal Server Error: {path:?}: {e}")).into_response()
        }
    }
}

// ---------------------------------------------------------------- routes

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    ready: watch::Receiver<bool>,
    explain: Arc<ExplainHub>,
    health: Health,
    shadow: Option<Arc<ShadowLog>>,
}

async fn ok() -> &'static str {
    "ok"
}

/// /healthz: fails when this replica believes it leads but has not renewed
/// its lease within leaseDuration + tolerance (upstream's leaderElection check).
async fn healthz(State(s): State<AppState>) -> Response {
    match s.health.lease.check(s.health.tolerance) {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(m) => (StatusCode::INTERNAL_SERVER_ERROR, format!("[-]leaderElection failed: {m}\nhealthz check failed\n")).into_response(),
    }
}

/// /readyz: 200 while every required watch is synced (and every optional
/// one has answered once) and the loop has applied the first lists;
/// otherwise 503 naming each watch that holds it back. `?verbose` lists
/// every watch, as upstream's verbose checks do:
///
/// ```text
/// [+]watch pods synced
/// [-]watch nodes retrying for 2.1s (4 attempts): ServiceError: connection refused
/// [+]watch podgroups.scheduling.x-k8s.io not served (rechecked every 10s); optional: gang scheduling ... off
/// [+]caches synced
/// readyz check failed
/// ```
async fn readyz(State(s): State<AppState>, Query(q): Query<HashMap<String, String>>) -> Response {
    let watches = &s.health.watches;
    let caches = *s.ready.borrow();
    let ok = caches && watches.ready();
    let code = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    if q.contains_key("verbose") {
        let mut lines = watches.verbose();
        lines.push(if caches { "[+]caches synced".into() } else { "[-]caches not synced: the first lists are not applied yet".into() });
        lines.push(s.health.lease.readyz_line());
        lines.push(if ok { "readyz check passed".into() } else { "readyz check failed".into() });
        return (code, lines.join("\n") + "\n").into_response();
    }
    let problems = watches.problems();
    if ok {
        (StatusCode::OK, "ok").into_response()
    } else if problems.is_empty() {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{}\nreadyz check failed\n", problems.join("\n"))).into_response()
    }
}

async fn metrics(State(s): State<AppState>) -> Response {
    s.health.watches.export(&s.metrics.watch_state);
    s.metrics.leader_waiting.set(i64::from(s.health.lease.waiting()));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render()).into_response()
}

async fn not_found(req: Request) -> Response {
    (StatusCode::NOT_FOUND, format!("404 page not found: {}", req.uri().path())).into_response()
}

fn too_many() -> Response {
    let mut r = (StatusCode::TOO_MANY_REQUESTS, "too many explain requests; retry in a second").into_response();
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

async fn explain(State(s): State<AppState>, Query(q): Query<HashMap<String, String>>) -> Response {
    let Some(pod) = q.get("pod").filter(|p| p.contains('/')).cloned() else {
        return (StatusCode::BAD_REQUEST, "query parameter pod=namespace/name is required").into_response();
    };
    let hub = s.explain;
    if !lock(&hub.bucket).take(Instant::now()) {
        hub.stats.refused.fetch_add(1, Ordering::Relaxed);
        return too_many();
    }
    let Ok(permit) = hub.busy.clone().try_acquire_owned() else {
        hub.stats.refused.fetch_add(1, Ordering::Relaxed);
        return too_many();
    };
    let Some(view) = hub.fresh_view(Duration::from_secs(5)).await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no data from the scheduling loop yet; retry").into_response();
    };
    let worker = hub.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let Some(p) = view.pending.iter().find(|p| p.key() == pod) else {
            return Err(format!("pod {pod} is not a pending pod of this scheduler"));
        };
        let fw = worker.frameworks.iter().find(|f| f.profile == p.scheduler_name);
        serde_json::to_string(&explain_member(fw, &view.snapshot, p, &view.pending)).map_err(|e| e.to_string())
    })
    .await;
    hub.stats.explained.fetch_add(1, Ordering::Relaxed);
    match answer {
        Ok(Ok(v)) => ([(header::CONTENT_TYPE, "application/json")], v).into_response(),
        Ok(Err(m)) => (StatusCode::NOT_FOUND, m).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("explain failed: {e}")).into_response(),
    }
}

/// /debug/shadow (shadow mode only): the verdicts so far by verdict, the
/// last disagreements, oldest first, and berth's view of the pods the other
/// scheduler leaves Pending, as JSON:
///
/// ```text
/// {"counts": {"same": 97, "lower": 3},
///  "disagreements": [{"at": "...", "pod": "ns/name", "profile": "default-scheduler",
///    "verdict": "lower", "bound_node": "n1", "berth_node": "n4", "score_gap": 12,
///    "bound": {"name": "n1", "feasible": true, "total": 170, "scores": {...}},
///    "berth": {"name": "n4", "feasible": true, "total": 182, "scores": {...}}}],
///  "pending": {"counts": {"placeable": 1, "unplaceable": 1},
///    "pods": [{"pod": "ns/a", "profile": "default-scheduler", "view": "placeable",
///      "berth_node": "n2", "waiting_seconds": 40, "at": "..."},
///     {"pod": "ns/b", "profile": "default-scheduler", "view": "unplaceable",
///      "message": "0/8 nodes are available: ...", "waiting_seconds": 95, "at": "..."}]}}
/// ```
async fn shadow(State(s): State<AppState>) -> Response {
    let Some(log) = s.shadow else {
        return (StatusCode::NOT_FOUND, "not running in shadow mode (berth run --shadow)").into_response();
    };
    match log.to_json() {
        Ok(v) => ([(header::CONTENT_TYPE, "application/json")], v).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn router(state: AppState, guard_state: Arc<Guard>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .route("/metrics", get(self::metrics))
        .route("/debug/explain", get(self::explain))
        .route("/debug/shadow", get(self::shadow))
        .fallback(not_found)
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(guard_state, guard))
}

// ---------------------------------------------------------------- TLS

fn pem_err(flag: &'static str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Pem { flag, path: path.to_path_buf(), message: e.to_string() }
}

/// The serving certificate chain and key: the given files, or a fresh
/// self-signed certificate for localhost and 127.0.0.1 (as upstream makes
/// one in memory when no certificate is given), valid for a year.
fn certificate(opts: &AdminOptions) -> Result<(Vec<pki_types::CertificateDer<'static>>, pki_types::PrivateKeyDer<'static>), Error> {
    use pki_types::pem::PemObject;
    match (&opts.tls_cert_file, &opts.tls_private_key_file) {
        (Some(c), Some(k)) => {
            let certs = pki_types::CertificateDer::pem_file_iter(c)
                .map_err(|e| pem_err("--tls-cert-file", c, e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| pem_err("--tls-cert-file", c, e))?;
            if certs.is_empty() {
                return Err(pem_err("--tls-cert-file", c, "no CERTIFICATE block"));
            }
            let key = pki_types::PrivateKeyDer::from_pem_file(k).map_err(|e| pem_err("--tls-private-key-file", k, e))?;
            Ok((certs, key))
        }
        (None, None) => {
            let name = format!("localhost@{}", chrono::Utc::now().timestamp());
            Ok(berth_tls::self_signed(&["localhost"], &[std::net::IpAddr::from([127, 0, 0, 1])], &name, 365)?)
        }
        _ => Err(Error::HalfPair),
    }
}

fn server_tls(opts: &AdminOptions) -> Result<(Arc<rustls::ServerConfig>, Vec<u8>), Error> {
    let (certs, key) = certificate(opts)?;
    let leaf = certs.first().map(|c| c.as_ref().to_vec()).unwrap_or_default();
    Ok((berth_tls::server_config(certs, key)?, leaf))
}

// ---------------------------------------------------------------- serving

/// Activity of one connection, for the idle and header timeouts.
#[derive(Debug)]
struct Activity {
    base: Instant,
    /// Millis since `base` of the last byte read or written, or response finished.
    last: AtomicU64,
    /// Millis since `base` (+1) of the first byte of a request whose headers
    /// are not complete yet; 0 when none.
    partial_since: AtomicU64,
    in_flight: AtomicUsize,
    /// Millis since `base` (+1) of the end of the last request; 0 when none.
    served: AtomicU64,
}

impl Activity {
    /// `base` is the accept.
    fn new() -> Self {
        Activity { base: Instant::now(), last: AtomicU64::new(0), partial_since: AtomicU64::new(0), in_flight: AtomicUsize::new(0), served: AtomicU64::new(0) }
    }
    /// Since when the connection holds its slot without a request in
    /// flight: the end of its last request, or its accept when it has
    /// finished none. None while a request is in flight (never evicted).
    fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let served = self.served.load(Ordering::Relaxed);
        Some(self.base + Duration::from_millis(served.saturating_sub(1)))
    }
    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX) + 1
    }
    fn read(&self) {
        let now = self.now();
        self.last.store(now, Ordering::Relaxed);
        let _ = self.partial_since.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }
    fn wrote(&self) {
        self.last.store(self.now(), Ordering::Relaxed);
    }
    fn begin(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.partial_since.store(0, Ordering::Relaxed);
    }
    fn end(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.partial_since.store(0, Ordering::Relaxed);
        self.served.store(self.now(), Ordering::Relaxed);
        self.wrote();
    }
    /// Why the connection should be closed now, if it should.
    fn expired(&self, header: Duration, idle: Duration) -> Option<&'static str> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let now = self.now();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let partial = self.partial_since.load(Ordering::Relaxed);
        if partial != 0 {
            return (now.saturating_sub(partial) >= ms(header)).then_some("request headers not received in time");
        }
        (now.saturating_sub(self.last.load(Ordering::Relaxed)) >= ms(idle)).then_some("idle")
    }
}

/// A stream that records its reads and writes in an [`Activity`].
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Resolves once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// A held connection, as the accept loop sees it: what it is doing, and
/// how to close it when a new connection needs its slot.
struct Held {
    activity: Arc<Activity>,
    close: Arc<tokio::sync::Notify>,
}

struct Server {
    acceptor: TlsAcceptor,
    app: Router,
    opts: AdminOptions,
    stats: AdminStats,
    /// The connections holding a slot, by id.
    held: Mutex<HashMap<u64, Held>>,
}

/// How often a new connection that found every slot busy with a request
/// looks again for one to free.
const SLOT_RETRY: Duration = Duration::from_millis(20);

impl Server {
    /// Closes the held connection idle the longest (see the module's doc);
    /// false when every held connection has a request in flight.
    fn evict_one(&self) -> bool {
        let mut held = lock(&self.held);
        let victim = held.iter().filter_map(|(id, h)| h.activity.idle_since().map(|t| (t, *id))).min();
        let Some((_, id)) = victim else { return false };
        if let Some(h) = held.remove(&id) {
            h.close.notify_one();
            self.stats.evicted.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// A slot for a connection just accepted: a free one, or one freed by
    /// closing the connection idle the longest. None when every slot stays
    /// busy with a request for [`AdminOptions::handshake_timeout`], or on stop.
    async fn slot(&self, slots: &Arc<Semaphore>, stop: &mut watch::Receiver<bool>) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let deadline = tokio::time::Instant::now() + self.opts.handshake_timeout;
        loop {
            if let Ok(p) = slots.clone().try_acquire_owned() {
                return Some(p);
            }
            // The evicted connection releases its slot as soon as its task
            // sees the notice; otherwise wait for a request to end.
            let evicted = self.evict_one();
            let wake = if evicted { deadline } else { (tokio::time::Instant::now() + SLOT_RETRY).min(deadline) };
            tokio::select! {
                p = slots.clone().acquire_owned() => return p.ok(),
                _ = tokio::time::sleep_until(wake) => {
                    if tokio::time::Instant::now() >= deadline {
                        return None;
                    }
                }
                _ = stopped(stop) => return None,
            }
        }
    }

    async fn accept_loop(self: Arc<Self>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
        let slots = Arc::new(Semaphore::new(self.opts.max_connections.max(1)));
        let mut next_id = 0u64;
        loop {
            // Accept at once (a connection left in the kernel's backlog
            // would wait behind idle ones), then find it a slot.
            let tcp = tokio::select! {
                r = listener.accept() => match r {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        // EMFILE and friends: wait rather than spin.
                        tracing::warn!(error = %e, "admin listener: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = stopped(&mut stop) => break,
            };
            if *stop.borrow() {
                break;
            }
            let Some(permit) = self.slot(&slots, &mut stop).await else {
                tracing::debug!("admin port: every slot busy with a request; a new connection is closed");
                continue;
            };
            let open = self.stats.open.fetch_add(1, Ordering::Relaxed) + 1;
            self.stats.peak.fetch_max(open, Ordering::Relaxed);
            self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            let id = next_id;
            next_id += 1;
            let activity = Arc::new(Activity::new());
            let close = Arc::new(tokio::sync::Notify::new());
            lock(&self.held).insert(id, Held { activity: activity.clone(), close: close.clone() });
            let me = self.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                // Closing is dropping the connection (and its stream).
                tokio::select! {
                    _ = me.connection(tcp, activity, stop) => {}
                    _ = close.notified() => tracing::debug!("admin port: an idle connection closed to free its slot"),
                }
                lock(&me.held).remove(&id);
                me.stats.open.fetch_sub(1, Ordering::Relaxed);
                drop(permit);
            });
        }
    }

    async fn connection(&self, tcp: TcpStream, activity: Arc<Activity>, mut stop: watch::Receiver<bool>) {
        let _ = tcp.set_nodelay(true);
        let Some(tls) = berth_tls::accept(tcp, &self.acceptor, self.opts.handshake_timeout, "admin port").await else {
            return;
        };
        let io = hyper_util::rt::TokioIo::new(Tracked { inner: tls, activity: activity.clone() });
        let app = self.app.clone();
        let act = activity.clone();
        let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let mut app = app.clone();
            let act = act.clone();
            act.begin();
            async move {
                let r = tower_service::Service::call(&mut app, req.map(axum::body::Body::new)).await;
                act.end();
                r
            }
        });
        let conn = hyper::server::conn::http1::Builder::new().keep_alive(true).max_buf_size(256 * 1024).serve_connection(io, svc);
        tokio::pin!(conn);
        let tick = (self.opts.header_read_timeout.min(self.opts.idle_timeout) / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut iv = tokio::time::interval(tick);
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "admin port: connection ended with an error");
                    }
                    return;
                }
                _ = iv.tick() => {
                    if let Some(why) = activity.expired(self.opts.header_read_timeout, self.opts.idle_timeout) {
                        tracing::debug!(reason = why, "admin port: closing a connection");
                        return;
                    }
                }
                _ = stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(2), conn.as_mut()).await;
                    return;
                }
            }
        }
    }
}

/// The admin port, started: its address and what the loop publishes into.
pub struct Started {
    /// Address, certificate, counters.
    pub info: AdminInfo,
    /// Where the scheduling loop publishes data for explain.
    pub explain: Arc<ExplainHub>,
}

/// Binds `addr` and serves the admin routes until `stop` turns true.
/// `client` does the TokenReviews and SubjectAccessReviews; `frameworks`
/// (a copy of the loop's) run explain; `shadow`, in shadow mode, is what
/// /debug/shadow serves.
#[allow(clippy::too_many_arguments)]
pub async fn start(
    opts: &AdminOptions,
    addr: SocketAddr,
    client: kube::Client,
    metrics: Metrics,
    ready: watch::Receiver<bool>,
    frameworks: Vec<Framework>,
    health: Health,
    shadow: Option<Arc<ShadowLog>>,
    stop: watch::Receiver<bool>,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<Started, Error> {
    let (tls, cert_der) = server_tls(opts)?;
    let listener = TcpListener::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
    let bound = listener.local_addr().map_err(|source| Error::Listen { addr, source })?;
    let stats = AdminStats::default();
    let hub = Arc::new(ExplainHub::new(frameworks, opts, stats.clone()));
    let guard = Arc::new(Guard {
        client,
        opts: opts.clone(),
        tokens: Mutex::new(TtlCache::new(4096)),
        reviews: Mutex::new(TtlCache::new(4096)),
        calls: Semaphore::new(16),
    });
    let app = router(AppState { metrics, ready, explain: hub.clone(), health, shadow }, guard);
    let server = Arc::new(Server { acceptor: TlsAcceptor::from(tls), app, opts: opts.clone(), stats: stats.clone(), held: Mutex::new(HashMap::new()) });
    tasks.spawn(server.accept_loop(listener, stop));
    Ok(Started { info: AdminInfo { addr: bound, cert_der, stats }, explain: hub })
}

// ---------------------------------------------------------------- client

/// Accepts the one pinned certificate, or any certificate when none is pinned.
#[derive(Debug)]
struct Pinned {
    cert: Option<Vec<u8>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &pki_types::CertificateDer<'_>,
        _intermediates: &[pki_types::CertificateDer<'_>],
        _server_name: &pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match &self.cert {
            Some(c) if c.as_slice() != end_entity.as_ref() => Err(rustls::Error::General("the server's certificate is not the pinned one".into())),
            _ => Ok(rustls::client::danger::ServerCertVerified::assertion()),
        }
    }
    fn verify_tls12_signature(&self, message: &[u8], cert: &pki_types::CertificateDer<'_>, dss: &rustls::DigitallySignedStruct) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }
    fn verify_tls13_signature(&self, message: &[u8], cert: &pki_types::CertificateDer<'_>, dss: &rustls::DigitallySignedStruct) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS connector that trusts `pinned` only (its DER), or any certificate
/// when None (loopback tests; what `curl -k` does).
pub fn connector(pinned: Option<&[u8]>) -> Result<TlsConnector, Error> {
    let provider = berth_tls::provider();
    let verifier = Arc::new(Pinned { cert: pinned.map(<[u8]>::to_vec), provider: provider.clone() });
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions()?.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(cfg)))
}

/// One HTTPS GET against an admin port (`Connection: close`), with an
/// optional bearer token: (status, body). For tests and `berth demo`.
pub async fn https_get(addr: SocketAddr, path: &str, token: Option<&str>, pinned: Option<&[u8]>) -> Result<(u16, String), Error> {
    let fail = |m: String| Error::Client { path: path.to_string(), message: m };
    let addr = if addr.ip().is_unspecified() { SocketAddr::from(([127, 0, 0, 1], addr.port())) } else { addr };
    let tcp = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await.map_err(|_| fail("connect timed out".into()))?.map_err(|e| fail(format!("connect: {e}")))?;
    let name = pki_types::ServerName::try_from("localhost").map_err(|e| fail(e.to_string()))?;
    let mut s = tokio::time::timeout(Duration::from_secs(5), connector(pinned)?.connect(name, tcp))
        .await
        .map_err(|_| fail("TLS handshake timed out".into()))?
        .map_err(|e| fail(format!("TLS handshake: {e}")))?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n").as_bytes()).await.map_err(|e| fail(format!("write: {e}")))?;
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match s.read(&mut buf).await {
                Ok(0) => return Ok(()),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                // A peer that closes without close_notify: keep what came.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read).await.map_err(|_| fail("read timed out".into()))?.map_err(|e| fail(format!("read: {e}")))?;
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| fail("malformed HTTP response".into()))?;
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| fail("no HTTP status".into()))?;
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(body) } else { body.to_string() };
    Ok((code, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn dechunks() {
        assert_eq!(dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"), "hello world");
    }

    #[test]
    fn bearer_tokens_are_read_as_upstream_reads_them() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            m
        };
        assert_eq!(bearer(&h("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&h("bearer abc")), Some("abc"));
        assert_eq!(bearer(&h("Bearer abc extra")), Some("abc"));
        assert_eq!(bearer(&h("Basic abc")), None);
        assert_eq!(bearer(&h("Bearer")), None);
        assert_eq!(bearer(&h("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn ttl_cache_expires_and_stays_bounded() {
        let now = Instant::now();
        let mut c: TtlCache<u32, bool> = TtlCache::new(2);
        c.insert(1, true, Duration::from_secs(10), now);
        assert_eq!(c.get(&1, now), Some(true));
        assert_eq!(c.get(&1, now + Duration::from_secs(11)), None);
        c.insert(2, false, Duration::from_secs(10), now);
        c.insert(3, false, Duration::from_secs(10), now);
        assert!(c.map.len() <= 2);
        c.insert(4, true, Duration::ZERO, now);
        assert_eq!(c.get(&4, now), None);
    }

    #[test]
    fn bucket_admits_a_burst_then_the_rate() {
        let t = Instant::now();
        let mut b = Bucket::new(2.0, 1.0);
        b.at = t;
        assert!(b.take(t));
        assert!(b.take(t));
        assert!(!b.take(t));
        assert!(b.take(t + Duration::from_secs(1)));
        assert!(!b.take(t + Duration::from_secs(1)));
    }

    #[test]
    fn activity_tells_idle_from_slow_headers() {
        let a = Activity::new();
        let (h, i) = (Duration::ZERO, Duration::from_secs(3600));
        assert_eq!(a.expired(h, i), None, "fresh and idle: not yet");
        a.read();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(a.expired(h, i), Some("request headers not received in time"));
        a.begin();
        assert_eq!(a.expired(h, Duration::ZERO), None, "a request in flight is never cut");
        a.end();
        assert_eq!(a.expired(Duration::from_secs(3600), Duration::ZERO), Some("idle"));
    }

    #[test]
    fn idle_since_ranks_connections_for_eviction() {
        let silent = Activity::new();
        assert_eq!(silent.idle_since(), Some(silent.base), "a connection that sent nothing is idle since its accept");
        let busy = Activity::new();
        busy.begin();
        assert_eq!(busy.idle_since(), None, "a request in flight keeps its slot");
        std::thread::sleep(Duration::from_millis(3));
        busy.end();
        let after = busy.idle_since().unwrap();
        assert!(after > busy.base, "idle since the end of its request");
        assert!(silent.idle_since().unwrap() < after, "the older idle connection goes first");
    }

    #[test]
    fn always_allow_paths_match_exactly_or_by_prefix() {
        let paths = vec!["/healthz".to_string(), "/debug/*".to_string()];
        let allowed = |p: &str| path_allowed(&paths, p);
        assert!(allowed("/healthz"));
        assert!(!allowed("/healthz/x"));
        assert!(allowed("/debug/explain"));
    }

    #[test]
    fn self_signed_certificate_and_half_pairs() {
        let (_, der) = server_tls(&AdminOptions::default()).unwrap();
        assert!(!der.is_empty());
        let half = AdminOptions { tls_cert_file: Some("/nonexistent.crt".into()), ..AdminOptions::default() };
        assert!(matches!(server_tls(&half), Err(Error::HalfPair)));
        let missing = AdminOptions { tls_cert_file: Some("/nonexistent.crt".into()), tls_private_key_file: Some("/nonexistent.key".into()), ..AdminOptions::default() };
        let e = server_tls(&missing).unwrap_err().to_string();
        assert!(e.contains("--tls-cert-file /nonexistent.crt"), "{e}");
    }
}
