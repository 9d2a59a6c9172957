//! The one plain-HTTP listener: /healthz, /livez, /readyz (true only when
//! every watcher has synced), /metrics, and /debug/explain?pod=ns/name
//! (explain's JSON for a pod in the live cache, answered by the scheduling loop).

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::{mpsc, oneshot, watch};

use super::leader::Lease;
use super::metrics::Metrics;
use super::watch::WatchHealth;

/// What /healthz and /readyz read.
#[derive(Clone, Debug)]
pub struct Health {
    /// This replica's lease (healthz: a leader that stopped renewing is unhealthy).
    pub lease: Lease,
    /// The watchers (readyz: not synced or disconnected watches, by name).
    pub watches: WatchHealth,
    /// Upstream's leader-election healthz tolerance past leaseDuration.
    pub tolerance: std::time::Duration,
}

/// A request for explain, answered by the scheduling loop.
#[derive(Debug)]
pub struct ExplainRequest {
    /// "ns/name".
    pub pod: String,
    /// The JSON answer, or an error message.
    pub reply: oneshot::Sender<Result<serde_json::Value, String>>,
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    ready: watch::Receiver<bool>,
    explain: mpsc::Sender<ExplainRequest>,
    health: Health,
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

/// /readyz: every watch synced and connected; otherwise 503 naming each one that is not.
async fn readyz(State(s): State<AppState>) -> Response {
    let problems = s.health.watches.problems();
    if *s.ready.borrow() && problems.is_empty() {
        (StatusCode::OK, "ok").into_response()
    } else if problems.is_empty() {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{}\nreadyz check failed\n", problems.join("\n"))).into_response()
    }
}

async fn metrics(State(s): State<AppState>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render()).into_response()
}

async fn explain(State(s): State<AppState>, Query(q): Query<HashMap<String, String>>) -> Response {
    let Some(pod) = q.get("pod").filter(|p| p.contains('/')) else {
        return (StatusCode::BAD_REQUEST, "query parameter pod=namespace/name is required").into_response();
    };
    let (tx, rx) = oneshot::channel();
    if s.explain.send(ExplainRequest { pod: pod.clone(), reply: tx }).await.is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "scheduler is stopping").into_response();
    }
    match tokio::time::timeout(std::time::Duration::from_secs(10), rx).await {
        Ok(Ok(Ok(v))) => ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response(),
        Ok(Ok(Err(m))) => (StatusCode::NOT_FOUND, m).into_response(),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "no answer from the scheduling loop").into_response(),
    }
}

/// The admin routes.
pub fn router(metrics: Metrics, ready: watch::Receiver<bool>, explain_tx: mpsc::Sender<ExplainRequest>, health: Health) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .route("/metrics", get(self::metrics))
        .route("/debug/explain", get(self::explain))
        .with_state(AppState { metrics, ready, explain: explain_tx, health })
}

/// Serves the admin routes on `addr` until `stop` changes.
pub async fn serve(listener: tokio::net::TcpListener, app: Router, mut stop: watch::Receiver<bool>) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.changed().await;
        })
        .await
}

/// Binds the admin listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
