//! Cross-cutting plumbing every service uses: logging, the Prometheus registry and its HTTP
//! listener (`/metrics`, `/healthz`, `/readyz`), and the one SIGTERM/SIGINT handler.
//!
//! Metrics follow `hookstream_<subsystem>_<name>_<unit>[_total]`, with labels from small fixed
//! sets only. The registry is created in `main` (or a test) and passed down, never global.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use hookstream_config::TelemetryConfig;
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use prometheus;

/// Initialises `tracing` once per process (later calls are no-ops, which tests rely on).
pub fn init_logging(cfg: &TelemetryConfig) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&cfg.log_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if cfg.log_format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Readiness flag flipped by the service once it is connected and working.
#[derive(Clone, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
}

impl Health {
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Registry,
    health: Health,
}

/// Binds the admin listener (metrics and health); returns the bound address.
pub async fn bind_admin(cfg: &TelemetryConfig) -> std::io::Result<TcpListener> {
    TcpListener::bind(&cfg.listen).await
}

/// Serves `/metrics`, `/healthz` and `/readyz` until `shutdown` is cancelled.
pub async fn serve_admin(
    listener: TcpListener,
    registry: Registry,
    health: Health,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(AdminState { registry, health });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
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

async fn ready(State(state): State<AdminState>) -> impl IntoResponse {
    if state.health.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// A token cancelled on the first SIGTERM or SIGINT. A second signal exits at once.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let child = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received, draining");
        child.cancel();
        wait_for_signal().await;
        tracing::warn!("second signal, exiting immediately");
        std::process::exit(130);
    });
    token
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// What every service's `main` does around its `run`: logging, a registry, the signal
/// handler, the admin listener (`/metrics`, `/healthz`, `/readyz`); then `run` until the
/// shutdown token is cancelled, and a clean stop of the listener.
pub async fn run_service<F, Fut, E>(
    name: &'static str,
    cfg: &TelemetryConfig,
    run: F,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    F: FnOnce(Registry, Health, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    init_logging(cfg);
    let registry = Registry::new();
    let health = Health::default();
    let shutdown = shutdown_on_signal();
    let listener = bind_admin(cfg)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
    tracing::info!(admin = %local_addr(&listener), "{name} starting");
    let admin = tokio::spawn(serve_admin(
        listener,
        registry.clone(),
        health.clone(),
        shutdown.clone(),
    ));
    let result = run(registry, health, shutdown.clone()).await;
    shutdown.cancel();
    let _ = admin.await;
    match result {
        Ok(()) => {
            tracing::info!("{name} stopped");
            Ok(())
        }
        Err(e) => {
            tracing::error!(error = %e, "{name} stopped with an error");
            Err(Box::new(e))
        }
    }
}

/// The local address a listener was bound to, for logs and tests.
pub fn local_addr(listener: &TcpListener) -> SocketAddr {
    listener.local_addr().expect("bound listener has an address")
}
