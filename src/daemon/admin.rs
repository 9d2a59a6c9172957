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

use super::metrics::Metrics;

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
}

async fn ok() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<AppState>) -> Response {
    if *s.ready.borrow() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced").into_response()
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
pub fn router(metrics: Metrics, ready: watch::Receiver<bool>, explain_tx: mpsc::Sender<ExplainRequest>) -> Router {
    Router::new()
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .route("/metrics", get(self::metrics))
        .route("/debug/explain", get(self::explain))
        .with_state(AppState { metrics, ready, explain: explain_tx })
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
