//! The admin listener: `/metrics` (Prometheus text), `/healthz` (liveness: 503 once a task of
//! the service stopped unexpectedly) and `/readyz` (readiness: 503 until ready, while
//! draining, and after a failure).
//!
//! `/metrics` also reads the health at each scrape: `hookstream_ready` and `hookstream_healthy`
//! (1 or 0, what `/readyz` and `/healthz` would answer), so an alert can tell a service that
//! runs but does not work from one that is down (`up == 0`); and
//! `hookstream_build_info{hookstream_service,version}` says which service answers (not
//! `service`: Prometheus Operator's ServiceMonitor sets a `service` target label, the
//! Kubernetes Service's name, and renames a scraped one to `exported_service`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use hookstream_config::TelemetryConfig;
use prometheus::{Encoder, IntGauge, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::Health;

#[derive(Clone)]
struct AdminState {
    registry: Registry,
    health: Health,
    ready: IntGauge,
    healthy: IntGauge,
}

fn health_gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric");
    if let Err(e) = registry.register(Box::new(g.clone())) {
        tracing::warn!(error = %e, metric = name, "health gauge registered twice");
    }
    g
}

/// Binds the admin listener (metrics and health).
pub async fn bind_admin(cfg: &TelemetryConfig) -> std::io::Result<TcpListener> {
    TcpListener::bind(&cfg.listen).await
}

/// Serves `/metrics`, `/healthz` and `/readyz` for `service` until `stop` is cancelled.
pub async fn serve_admin(
    service: &'static str,
    listener: TcpListener,
    registry: Registry,
    health: Health,
    stop: CancellationToken,
) -> std::io::Result<()> {
    register_build_info(&registry, service);
    let ready = health_gauge(
        &registry,
        "hookstream_ready",
        "1 while the service is ready (/readyz answers 200)",
    );
    let healthy = health_gauge(
        &registry,
        "hookstream_healthy",
        "1 until a task of the service stopped unexpectedly (/healthz answers 200)",
    );
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AdminState {
            registry,
            health,
            ready,
            healthy,
        });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
}

/// `hookstream_build_info{hookstream_service,version} 1`: which service and version answer a
/// scrape.
fn register_build_info(registry: &Registry, service: &str) {
    let info = prometheus::IntGaugeVec::new(
        prometheus::Opts::new("hookstream_build_info", "The service and its version (always 1)"),
        &["hookstream_service", "version"],
    )
    .expect("valid metric");
    info.with_label_values(&[service, env!("CARGO_PKG_VERSION")])
        .set(1);
    if let Err(e) = registry.register(Box::new(info)) {
        tracing::warn!(error = %e, "build info registered twice");
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    state.ready.set(i64::from(state.health.is_ready()));
    state.healthy.set(i64::from(state.health.failure().is_none()));
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
