//! The admin listener: `/metrics` (Prometheus text), `/healthz` (liveness: 503 once a task of
//! the service stopped unexpectedly) and `/readyz` (readiness: 503 until ready, while
//! draining, and after a failure).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use hookstream_config::TelemetryConfig;
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::Health;

#[derive(Clone)]
struct AdminState {
    registry: Registry,
    health: Health,
}

/// Binds the admin listener (metrics and health).
pub async fn bind_admin(cfg: &TelemetryConfig) -> std::io::Result<TcpListener> {
    TcpListener::bind(&cfg.listen).await
}

/// Serves `/metrics`, `/healthz` and `/readyz` until `stop` is cancelled.
pub async fn serve_admin(
    listener: TcpListener,
    registry: Registry,
    health: Health,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AdminState { registry, health });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let mut buf = Vec::new();
    let families = state.registry.gather();
    match TextEncoder::new().encode(&families, &mut buf) {
        Ok(()) => (
            StatusCode::OK,
            [("content-type", "text/plain; version=0.0.4")],
            buf,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "failed to encode metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

async fn healthz(State(state): State<AdminState>) -> impl IntoResponse {
    match state.health.failure() {
        None => (StatusCode::OK, "ok".to_string()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {why}")),
    }
}

async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    match state.health.failure() {
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {why}")),
        None if state.health.is_ready() => (StatusCode::OK, "ready".to_string()),
        None => (StatusCode::SERVICE_UNAVAILABLE, "not ready".to_string()),
    }
}
