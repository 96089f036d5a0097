//! The one SIGTERM/SIGINT handler: the first signal cancels the shutdown token (the service
//! drains), a second one exits at once.

use tokio_util::sync::CancellationToken;

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
