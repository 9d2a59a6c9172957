//! Requests in flight, bounded as kube-apiserver bounds them with
//! `--max-requests-inflight` and `--max-mutating-requests-inflight`
//! (upstream's `WithMaxInFlightLimit`, `staging/src/k8s.io/apiserver/pkg/
//! server/filters/maxinflight.go`):
//!
//! - two pools: read-only requests (`get`, `list`, and any GET or HEAD,
//!   discovery included) and mutating ones (everything else); a limit of
//!   0 leaves that pool unbounded;
//! - long-running requests are not counted: watches, and the `exec`,
//!   `attach`, `portforward`, `proxy` and `log` subresources (upstream's
//!   `BasicLongRunningRequestCheck`);
//! - a request that finds its pool full is answered at once with 429,
//!   `Retry-After: 1` and upstream's plain-text body ("Too many requests,
//!   please try again later."), unless its user is in `system:masters`,
//!   which upstream always serves ("a super-admin or a loopback
//!   connection");
//! - a request holds its place until its answer is written (a list's
//!   body streamed to the end), as upstream's handler returns only then.
//!
//! kube-apiserver runs API Priority and Fairness by default, which splits
//! the same total (the sum of both flags) into priority levels and queues
//! before it rejects; the local cluster rejects at once, which is what a
//! client must be ready for either way.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::authn::Authenticator;
use crate::rbac::SYSTEM_MASTERS;

/// kube-apiserver's default `--max-requests-inflight`.
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 400;
/// kube-apiserver's default `--max-mutating-requests-inflight`.
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 200;

/// Upstream's answer to a request over the limit (`http.Error` adds the newline).
pub const TOO_MANY: &str = "Too many requests, please try again later.\n";

/// The two pools and what they refused.
#[derive(Debug)]
pub struct Inflight {
    read_only: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
    authn: Authenticator,
    refused_read_only: AtomicU64,
    refused_mutating: AtomicU64,
}

/// Requests refused with 429 so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refused {
    /// Read-only requests.
    pub read_only: u64,
    /// Mutating requests.
    pub mutating: u64,
}

impl Inflight {
    /// Pools of `read_only` and `mutating` places (0: unbounded);
    /// `authn` tells who a refused request's user is.
    pub fn new(read_only: usize, mutating: usize, authn: Authenticator) -> Self {
        let pool = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        Inflight { read_only: pool(read_only), mutating: pool(mutating), authn, refused_read_only: AtomicU64::new(0), refused_mutating: AtomicU64::new(0) }
    }

    /// Requests refused with 429 so far.
    pub fn refused(&self) -> Refused {
        Refused { read_only: self.refused_read_only.load(Ordering::Relaxed), mutating: self.refused_mutating.load(Ordering::Relaxed) }
    }
}

/// Is this request long-running (not counted)? Watches (`?watch=true`, or
/// the old `/watch/` paths), and the streaming subresources.
pub fn long_running(method: &Method, path: &str, query: Option<&str>) -> bool {
    if method == Method::GET {
        let watch = query.unwrap_or("").split('&').any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True" | "watch"));
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let legacy = match segs.first() {
            Some(&"api") => segs.get(2) == Some(&"watch"),
            Some(&"apis") => segs.get(3) == Some(&"watch"),
            _ => false,
        };
        if watch || legacy {
            return true;
        }
    }
    // `/api/v1/namespaces/NS/RESOURCE/NAME/SUB`, `/apis/G/V/namespaces/NS/RESOURCE/NAME/SUB`.
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let sub = match (segs.first(), segs.len()) {
        (Some(&"api"), 7) if segs[2] == "namespaces" => segs[6],
        (Some(&"apis"), 8) if segs[3] == "namespaces" => segs[7],
        _ => "",
    };
    matches!(sub, "exec" | "attach" | "portforward" | "proxy" | "log")
}

fn is_mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The 429 upstream writes: plain text, `Retry-After: 1`.
fn too_many() -> Response {
    let mut r = (StatusCode::TOO_MANY_REQUESTS, TOO_MANY).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    r
}

/// The layer: a place in the request's pool for as long as its answer is
/// written, or 429.
pub async fn middleware(State(limits): State<Arc<Inflight>>, req: Request, next: Next) -> Response {
    if long_running(req.method(), req.uri().path(), req.uri().query()) {
        return next.run(req).await;
    }
    let mutating = is_mutating(req.method());
    let pool = if mutating { &limits.mutating } else { &limits.read_only };
    let Some(pool) = pool else { return next.run(req).await };
    let permit = match pool.clone().try_acquire_owned() {
        Ok(p) => p,
        Err(_) => {
            // Upstream serves system:masters whatever the load.
            let privileged = limits.authn.authenticate(req.headers()).is_ok_and(|u| u.groups.iter().any(|g| g == SYSTEM_MASTERS));
            if privileged {
                return next.run(req).await;
            }
            let counter = if mutating { &limits.refused_mutating } else { &limits.refused_read_only };
            counter.fetch_add(1, Ordering::Relaxed);
            return too_many();
        }
    };
    let resp = next.run(req).await;
    held_until_written(resp, permit)
}

/// The response, its body holding `permit` until it is written (or dropped).
/// The body's size is kept, so that an answer written whole still goes out
/// with `Content-Length` (as kube-apiserver's do), not chunked.
fn held_until_written(resp: Response, permit: OwnedSemaphorePermit) -> Response {
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, Body::new(Held { body, _permit: permit }))
}

/// A body that holds its place in a pool until it is dropped.
struct Held {
    body: Body,
    _permit: OwnedSemaphorePermit,
}

impl http_body::Body for Held {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_and_streams_are_long_running() {
        let get = Method::GET;
        assert!(long_running(&get, "/api/v1/pods", Some("watch=true&resourceVersion=1")));
        assert!(long_running(&get, "/api/v1/namespaces/default/pods", Some("labelSelector=a&watch=1")));
        assert!(long_running(&get, "/api/v1/watch/pods", None));
        assert!(long_running(&get, "/apis/apps/v1/watch/deployments", None));
        assert!(long_running(&get, "/api/v1/namespaces/default/pods/p/log", Some("follow=true")));
        assert!(long_running(&Method::POST, "/api/v1/namespaces/default/pods/p/exec", None));
        assert!(!long_running(&get, "/api/v1/pods", None));
        assert!(!long_running(&get, "/api/v1/pods", Some("watch=false")));
        assert!(!long_running(&get, "/api/v1/namespaces/watch/pods", None), "a namespace named watch");
        assert!(!long_running(&get, "/api/v1/namespaces/default/pods/log", None), "a pod named log");
    }

    #[test]
    fn verbs_split_into_read_only_and_mutating() {
        assert!(!is_mutating(&Method::GET));
        assert!(!is_mutating(&Method::HEAD));
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(is_mutating(&m), "{m}");
        }
    }
}
