//! A fault-injecting HTTP proxy between one daemon and the local cluster.
//! It forwards every request with its own kube client (no retries) and can:
//!
//! - answer a fraction of matching requests with a status (429, 500) without
//!   forwarding them, or reset them before forwarding;
//! - forward a request and then lose its reply (the client sees the
//!   connection die after the commit), or answer 500 after the commit;
//! - hold the bodies of watch streams (no event reaches the client until
//!   released), and end every open watch;
//! - black out: every request is reset;
//! - an outage: connections are refused (nothing listens) and every open
//!   one is reset, until it ends (a TCP relay in front of the HTTP proxy);
//! - hold matching requests until released (e.g. all event writes).
//!
//! It records every write that passed (method, path, when) and the status of
//! every reply from upstream, so a test can count the writes of one client
//! after a given instant, or find the requests the server refused.
#![allow(clippy::unwrap_used, dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{Method, Request, Response, StatusCode};
use futures::StreamExt;
use rand::Rng;
use tokio::sync::watch;

/// What a rule does to a matching request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer this status without forwarding.
    Status(u16),
    /// Kill the connection without forwarding.
    ResetBefore,
    /// Forward, then kill the connection instead of replying (reply lost after commit).
    DropReplyAfterCommit,
    /// Forward, then answer 500 (the commit happened; the client cannot know).
    ErrorAfterCommit,
}

/// A fault for a fraction of the requests whose method matches and whose path contains `path`.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Method, None for any.
    pub method: Option<Method>,
    /// A substring of the path.
    pub path: String,
    /// What to do.
    pub fault: Fault,
    /// Fraction 0..=1.
    pub fraction: f64,
}

impl Rule {
    /// A rule.
    pub fn new(method: Option<Method>, path: &str, fault: Fault, fraction: f64) -> Rule {
        Rule { method, path: path.into(), fault, fraction }
    }
}

/// One write that reached the cluster.
#[derive(Clone, Debug)]
pub struct Write {
    /// When it was forwarded.
    pub at: Instant,
    /// Method.
    pub method: Method,
    /// Path and query.
    pub path: String,
}

impl Write {
    /// A write to a Lease.
    pub fn is_lease(&self) -> bool {
        self.path.contains("/leases")
    }
}

struct State {
    upstream: kube::Client,
    rules: Mutex<Vec<Rule>>,
    writes: Mutex<Vec<Write>>,
    /// Every request the upstream answered: (method, path, status).
    replies: Mutex<Vec<(Method, String, u16)>>,
    /// The bodies of the error replies (status 400 and above): (method, path, status, body).
    errors: Mutex<Vec<(Method, String, u16, String)>>,
    blackout: AtomicBool,
    /// Watch bodies pause while true.
    hold_watches: watch::Sender<bool>,
    /// Bumped to end every open watch.
    cut: watch::Sender<u64>,
    /// Requests whose path contains one of these wait while held.
    held: Mutex<Vec<(Method, String)>>,
    release: watch::Sender<u64>,
    injected: AtomicU64,
    /// Requests waiting while held now.
    holding: AtomicI64,
    /// True during an outage (and once the proxy is dropped).
    outage: watch::Sender<bool>,
}

/// The proxy. Dropping it stops serving.
pub struct FaultProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<State>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.state.outage.send_replace(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Accepts on `addr` and relays each connection to the HTTP proxy at
/// `inner`. During an outage nothing listens on `addr` (connections are
/// refused) and every relayed connection is reset.
async fn front(addr: SocketAddr, first: tokio::net::TcpListener, inner: SocketAddr, st: Arc<State>) {
    let mut outage = st.outage.subscribe();
    let mut listener = Some(first);
    loop {
        match &listener {
            Some(l) => tokio::select! {
                r = l.accept() => {
                    if let Ok((c, _)) = r {
                        tokio::spawn(relay(c, inner, st.outage.subscribe()));
                    }
                }
                r = outage.changed() => {
                    if r.is_err() {
                        return;
                    }
                    if *outage.borrow() {
                        listener = None;
                    }
                }
            },
            None => {
                if outage.changed().await.is_err() {
                    return;
                }
                if !*outage.borrow() {
                    for _ in 0..100 {
                        match tokio::net::TcpListener::bind(addr).await {
                            Ok(l) => {
                                listener = Some(l);
                                break;
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                        }
                    }
                    assert!(listener.is_some(), "fault proxy: could not listen on {addr} again");
                }
            }
        }
    }
}

async fn relay(mut client: tokio::net::TcpStream, inner: SocketAddr, mut outage: watch::Receiver<bool>) {
    let Ok(mut server) = tokio::net::TcpStream::connect(inner).await else {
        let _ = client.set_zero_linger();
        return;
    };
    let cut = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
        _ = outage.wait_for(|o| *o) => true,
    };
    if cut {
        // Closed with SO_LINGER 0: the client sees a reset, not an end of stream.
        let _ = client.set_zero_linger();
    }
}

fn reset_body() -> Body {
    Body::from_stream(futures::stream::once(async { Err::<Bytes, std::io::Error>(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "fault proxy: connection reset")) }))
}

fn reset() -> Response<Body> {
    // The head goes out, then the body fails: the client sees the exchange die.
    Response::builder().status(StatusCode::OK).header("content-type", "application/json").body(reset_body()).unwrap()
}

fn status(code: u16) -> Response<Body> {
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "injected by the fault proxy", "reason": if code == 429 { "TooManyRequests" } else { "InternalError" }, "code": code});
    let mut r = Response::builder().status(code).header("content-type", "application/json");
    if code == 429 {
        r = r.header("retry-after", "0");
    }
    r.body(Body::from(body.to_string())).unwrap()
}

impl FaultProxy {
    /// Starts a proxy in front of `cluster_url`.
    pub async fn start(upstream: kube::Client) -> FaultProxy {
        let state = Arc::new(State {
            upstream,
            rules: Mutex::new(Vec::new()),
            writes: Mutex::new(Vec::new()),
            replies: Mutex::new(Vec::new()),
            errors: Mutex::new(Vec::new()),
            blackout: AtomicBool::new(false),
            hold_watches: watch::channel(false).0,
            cut: watch::channel(0).0,
            held: Mutex::new(Vec::new()),
            release: watch::channel(0).0,
            injected: AtomicU64::new(0),
            holding: AtomicI64::new(0),
            outage: watch::channel(false).0,
        });
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let inner = listener.local_addr().unwrap();
        let st = state.clone();
        let app = axum::Router::new().fallback(move |req: Request<Body>| {
            let st = st.clone();
            async move { handle(st, req).await }
        });
        let serve = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let public = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let addr = public.local_addr().unwrap();
        let relay = tokio::spawn(front(addr, public, inner, state.clone()));
        FaultProxy { addr, state, tasks: vec![serve, relay] }
    }

    /// An outage while on: connections are refused and every open one
    /// (watches, idle keep-alive connections, requests in flight) is reset.
    pub fn outage(&self, on: bool) {
        self.state.outage.send_replace(on);
    }

    /// Requests waiting at [`FaultProxy::hold`] now.
    pub fn holding(&self) -> i64 {
        self.state.holding.load(Ordering::SeqCst)
    }

    /// A kube client that goes through the proxy (kube's default retries on).
    pub fn client(&self) -> kube::Client {
        let uri: axum::http::Uri = format!("http://{}", self.addr).parse().unwrap();
        let mut cfg = kube::Config::new(uri);
        cfg.default_namespace = "default".into();
        cfg.read_timeout = Some(Duration::from_secs(60));
        kube::Client::try_from(cfg).unwrap()
    }

    /// Replaces the fault rules.
    pub fn set_rules(&self, rules: Vec<Rule>) {
        *self.state.rules.lock().unwrap() = rules;
    }

    /// Every request is reset while on.
    pub fn blackout(&self, on: bool) {
        self.state.blackout.store(on, Ordering::SeqCst);
        if on {
            self.cut_watches();
        }
    }

    /// Watch bodies stop flowing while on.
    pub fn hold_watches(&self, on: bool) {
        self.state.hold_watches.send_replace(on);
    }

    /// Ends every open watch stream.
    pub fn cut_watches(&self) {
        self.state.cut.send_modify(|g| *g += 1);
    }

    /// Requests with `method` whose path contains `path` wait until [`FaultProxy::release`].
    pub fn hold(&self, method: Method, path: &str) {
        self.state.held.lock().unwrap().push((method, path.into()));
    }

    /// Lets held requests through and holds no more.
    pub fn release(&self) {
        self.state.held.lock().unwrap().clear();
        self.state.release.send_modify(|g| *g += 1);
    }

    /// Writes forwarded so far.
    pub fn writes(&self) -> Vec<Write> {
        self.state.writes.lock().unwrap().clone()
    }

    /// Writes (leases excluded) forwarded at or after `t`.
    pub fn writes_since(&self, t: Instant) -> Vec<Write> {
        self.writes().into_iter().filter(|w| w.at >= t && !w.is_lease()).collect()
    }

    /// Every request the upstream answered so far, as (method, path, status).
    pub fn replies(&self) -> Vec<(Method, String, u16)> {
        self.state.replies.lock().unwrap().clone()
    }

    /// The error replies (status 400 and above) so far, with their bodies:
    /// (method, path, status, body).
    pub fn errors(&self) -> Vec<(Method, String, u16, String)> {
        self.state.errors.lock().unwrap().clone()
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.state.injected.load(Ordering::SeqCst)
    }
}

async fn handle(st: Arc<State>, req: Request<Body>) -> Response<Body> {
    if st.blackout.load(Ordering::SeqCst) {
        return reset();
    }
    let (parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    let is_watch = parts.method == Method::GET && path.contains("watch=true");
    // Held requests wait for a release.
    let mut rel = st.release.subscribe();
    let is_held = || st.held.lock().unwrap().iter().any(|(m, p)| *m == parts.method && path.contains(p.as_str()));
    if is_held() {
        /// Counts a held request until it goes on or is dropped (its client gone).
        struct Holding<'a>(&'a AtomicI64);
        impl Drop for Holding<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        st.holding.fetch_add(1, Ordering::SeqCst);
        let _counted = Holding(&st.holding);
        while is_held() {
            if rel.changed().await.is_err() {
                break;
            }
        }
    }
    let fault = {
        let rules = st.rules.lock().unwrap();
        let mut rng = rand::rng();
        rules.iter().find(|r| r.method.as_ref().is_none_or(|m| *m == parts.method) && path.contains(r.path.as_str()) && rng.random_bool(r.fraction.clamp(0.0, 1.0))).map(|r| r.fault)
    };
    if let Some(f) = fault {
        st.injected.fetch_add(1, Ordering::SeqCst);
        match f {
            Fault::Status(code) => return status(code),
            Fault::ResetBefore => return reset(),
            _ => {}
        }
    }
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(_) => return reset(),
    };
    let mut up = Request::builder().method(parts.method.clone()).uri(path.clone());
    for (k, v) in parts.headers.iter() {
        if k != "host" && k != "content-length" {
            up = up.header(k, v);
        }
    }
    let up = up.body(kube::client::Body::from(bytes.to_vec())).unwrap();
    if parts.method != Method::GET {
        st.writes.lock().unwrap().push(Write { at: Instant::now(), method: parts.method.clone(), path: path.clone() });
    }
    let resp = match st.upstream.send(up).await {
        Ok(r) => r,
        Err(_) => return reset(),
    };
    let code = resp.status().as_u16();
    st.replies.lock().unwrap().push((parts.method.clone(), path.clone(), code));
    // The body is passed on re-framed: the upstream's framing headers go
    // (hyper frames what it sends itself).
    let mut resp = resp;
    for h in [axum::http::header::TRANSFER_ENCODING, axum::http::header::CONTENT_LENGTH, axum::http::header::CONNECTION] {
        resp.headers_mut().remove(h);
    }
    let resp = if code >= 400 && fault.is_none() {
        // An error's body is small: read it, keep it, and pass it on.
        let (rparts, rbody) = resp.into_parts();
        let bytes = axum::body::to_bytes(Body::new(rbody), 1 << 20).await.unwrap_or_default();
        st.errors.lock().unwrap().push((parts.method.clone(), path.clone(), code, String::from_utf8_lossy(&bytes).into_owned()));
        Response::from_parts(rparts, kube::client::Body::from(bytes.to_vec()))
    } else {
        resp
    };
    match fault {
        Some(Fault::DropReplyAfterCommit) => {
            // Let the write finish at the server, then lose the reply.
            let _ = axum::body::to_bytes(Body::new(resp.into_body()), usize::MAX).await;
            return reset();
        }
        Some(Fault::ErrorAfterCommit) => {
            let _ = axum::body::to_bytes(Body::new(resp.into_body()), usize::MAX).await;
            return status(500);
        }
        _ => {}
    }
    let (rparts, rbody) = resp.into_parts();
    let body = if is_watch {
        let hold = st.hold_watches.subscribe();
        let cut = st.cut.subscribe();
        let inner = Body::new(rbody).into_data_stream();
        let s = futures::stream::unfold((inner, hold, cut), move |(mut inner, mut hold, mut cut)| async move {
            loop {
                if cut.has_changed().unwrap_or(true) {
                    return None;
                }
                if !*hold.borrow() {
                    break;
                }
                tokio::select! {
                    r = hold.changed() => if r.is_err() { return None },
                    _ = cut.changed() => return None,
                }
            }
            let item = tokio::select! {
                item = inner.next() => item,
                _ = cut.changed() => None,
            };
            item.map(|i| (i, (inner, hold, cut)))
        });
        Body::from_stream(s)
    } else {
        Body::new(rbody)
    };
    Response::from_parts(rparts, body)
}
