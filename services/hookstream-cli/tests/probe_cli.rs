//! `hookstream probe URL`, the health check of the distroless image, against a loopback
//! server on port 0: 2xx passes, anything else (503, nothing listening, no answer in time)
//! fails, each with one line; no configuration is read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::Router;

use crate::common;
use common::Run;

/// Runs `hookstream probe URL ARGS…` with a configuration that would fail to load.
async fn probe(url: &str, args: &[&str]) -> Run {
    let mut c = common::command();
    c.env("HOOKSTREAM_CONFIG", "/nonexistent/hookstream.toml")
        .env("HOOKSTREAM_DATABASE__URL", "not-a-database-url")
        .args(["probe", url])
        .args(args);
    common::run(c).await
}

/// A server whose first answer is 200 and every later one 503 (a service that stops being ready).
async fn ready_then_unavailable() -> String {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = Router::new().route(
        "/readyz",
        axum::routing::get(move || {
            let calls = calls.clone();
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "draining")
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/readyz")
}

#[tokio::test]
async fn a_2xx_passes_and_anything_else_fails_with_one_line() {
    let url = ready_then_unavailable().await;

    let ok = probe(&url, &[]).await;
    assert_eq!(ok.code, Some(0), "stdout: {} stderr: {}", ok.stdout, ok.stderr);
    assert_eq!(ok.stdout, format!("probe {url}: 200 OK\n"));
    assert_eq!(ok.stderr, "");

    let unavailable = probe(&url, &[]).await;
    assert_eq!(unavailable.code, Some(1), "stdout: {}", unavailable.stdout);
    assert_eq!(unavailable.stdout, "");
    assert_eq!(
        unavailable.stderr,
        format!("hookstream: probe {url}: 503 Service Unavailable\n")
    );
}

#[tokio::test]
async fn nothing_listening_fails() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/readyz", listener.local_addr().unwrap());
    drop(listener);
    let run = probe(&url, &[]).await;
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr
            .starts_with(&format!("hookstream: probe {url}: cannot connect")),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
}

#[tokio::test]
async fn no_answer_in_time_fails_after_the_timeout() {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/readyz", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            open.push(conn);
        }
    });
    let started = Instant::now();
    let run = probe(&url, &["--timeout-ms", "300"]).await;
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr
            .starts_with(&format!("hookstream: probe {url}: no answer within 300 ms")),
        "{}",
        run.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}
