//! Cross-cutting plumbing every service uses: logging, the Prometheus registry and its HTTP
//! listener (`/metrics`, `/healthz`, `/readyz`), the one SIGTERM/SIGINT handler, the
//! supervision of long-running tasks, and `run_service`, what every binary's `main` does.
//!
//! Metrics follow `hookstream_<subsystem>_<name>_<unit>[_total]`, with labels from small fixed
//! sets only. The registry is created in `main` (or a test) and passed down, never global.

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
mod admin;
mod health;
mod logging;
mod signal;
pub mod supervisor;

use std::net::SocketAddr;
use std::process::ExitCode;

use hookstream_config::TelemetryConfig;
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use admin::{bind_admin, serve_admin};
pub use health::Health;
pub use logging::init_logging;
pub use prometheus;
pub use signal::shutdown_on_signal;
pub use supervisor::{Supervisor, TaskFailed};

/// An error that ends a service, and the exit code it deserves: 2 for configuration that
/// cannot work (the orchestrator should not just restart it), 1 for everything else.
pub trait ServiceError: std::error::Error + Send + Sync + 'static {
    fn exit_code(&self) -> u8 {
        1
    }
}

/// What every service's `main` does around its `run`: logging, a registry, the signal
/// handler, the admin listener (`/metrics`, `/healthz`, `/readyz`); then `run` until it
/// returns (after the shutdown token is cancelled, or after a task failed). The admin
/// listener keeps answering while `run` drains, so probes see the service go unready (and
/// unhealthy after a failure) rather than vanish. Returns the process's exit code.
///
/// It owns the runtime: `#[tokio::main]`'s waits at exit for every blocking call still under
/// way, and a Kafka client's close against a broker that holds the connection without
/// answering does not return (seen: a dispatcher still running minutes after SIGTERM, its
/// drain long over). Here such calls get `RUNTIME_SHUTDOWN`, then the process exits anyway.
pub fn run_service<F, Fut, E>(name: &'static str, cfg: &TelemetryConfig, run: F) -> ExitCode
where
    F: FnOnce(Registry, Health, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
    E: ServiceError,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(serve(name, cfg, run));
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    code
}

/// How long a stopped service waits for blocking calls still under way before it exits.
pub const RUNTIME_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(3);

async fn serve<F, Fut, E>(name: &'static str, cfg: &TelemetryConfig, run: F) -> ExitCode
where
    F: FnOnce(Registry, Health, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
    E: ServiceError,
{
    init_logging(cfg);
    let registry = Registry::new();
    let health = Health::default();
    let shutdown = shutdown_on_signal();
    let listener = match bind_admin(cfg).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(listen = %cfg.listen, error = %e, "{name}: cannot bind the admin listener");
            eprintln!("{name}: cannot listen on {}: {e}", cfg.listen);
            return ExitCode::from(1);
        }
    };
    tracing::info!(admin = %local_addr(&listener), "{name} starting");
    let stop_admin = CancellationToken::new();
    let admin = tokio::spawn(serve_admin(
        name,
        listener,
        registry.clone(),
        health.clone(),
        stop_admin.clone(),
    ));
    let result = run(registry, health, shutdown.clone()).await;
    shutdown.cancel();
    stop_admin.cancel();
    let _ = admin.await;
    match result {
        Ok(()) => {
            tracing::info!("{name} stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "{name} stopped with an error");
            eprintln!("{name}: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// The local address a listener was bound to, for logs and tests.
pub fn local_addr(listener: &TcpListener) -> SocketAddr {
    listener.local_addr().expect("bound listener has an address")
}
