//! What an attempt keeps of the receiver's answer, against a real server on 127.0.0.1: the
//! body up to `max_response_bytes` and whether it was cut, the headers with names lower-case,
//! long values cut, and set-cookie values redacted.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use bytes::Bytes;
use hookstream_delivery::{
    DeliveryConfig, Engine, Message, Outcome, Target, Verdict, MAX_HEADER_VALUE_BYTES,
};
use hookstream_signing::Secret;

/// A server that answers `status` with a body of `len` bytes and a few headers.
async fn server(status: StatusCode, len: usize) -> String {
    let app = axum::Router::new().fallback(move || async move {
        let mut headers = HeaderMap::new();
        headers.insert("X-Request-Id", HeaderValue::from_static("req-42"));
        headers.insert("set-cookie", HeaderValue::from_static("session=very-secret"));
        headers.insert("x-long", HeaderValue::from_str(&"v".repeat(1_000)).unwrap());
        (status, headers, vec![b'a'; len])
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://127.0.0.1:{port}/hook")
}

async fn deliver(max_response_bytes: usize, url: &str) -> Outcome {
    let engine = Engine::new(&DeliveryConfig {
        allow_cidrs: vec!["127.0.0.0/8".parse().unwrap()],
        max_response_bytes,
        ..Default::default()
    })
    .unwrap();
    let secrets = [Secret::generate()];
    let body = Bytes::from_static(b"{}");
    engine
        .deliver(
            Target {
                url,
                timeout: Duration::from_secs(5),
                secrets: &secrets,
                headers: &[],
            },
            Message {
                id: "evt_1",
                event_type: "order.created",
                body: &body,
                attempt: 1,
            },
        )
        .await
}

fn header<'a>(out: &'a Outcome, name: &str) -> Option<&'a str> {
    out.response_headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn a_long_body_is_cut_and_says_so_and_headers_are_kept_safely() {
    let url = server(StatusCode::SERVICE_UNAVAILABLE, 100_000).await;
    let out = deliver(4_096, &url).await;
    assert_eq!((out.verdict, out.status), (Verdict::Retryable, Some(503)));
    assert_eq!(out.response.len(), 4_096);
    assert!(out.response_truncated, "a 100 kB body cut at 4 KiB says so");
    assert_eq!(
        header(&out, "x-request-id"),
        Some("req-42"),
        "names lower-case, values kept"
    );
    assert_eq!(header(&out, "set-cookie"), Some("[redacted]"));
    assert!(!format!("{out:?}").contains("very-secret"));
    assert_eq!(header(&out, "x-long").map(str::len), Some(MAX_HEADER_VALUE_BYTES));
}

#[tokio::test]
async fn a_body_within_the_limit_is_whole() {
    let url = server(StatusCode::OK, 4_096).await;
    let out = deliver(4_096, &url).await;
    assert_eq!(out.verdict, Verdict::Delivered);
    assert_eq!(out.response.len(), 4_096);
    assert!(!out.response_truncated, "exactly the limit is not cut");
}
