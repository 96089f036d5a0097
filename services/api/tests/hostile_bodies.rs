//! Request bodies built to hurt, against real PostgreSQL: 100,000 nested arrays, numbers no
//! float holds, invalid UTF-8 inside a string, bodies over the limit with and without a
//! length. Each is a 4xx with a reason on every route that takes a body (never a 5xx, which
//! a client retries forever, never a crash), and the server answers the next request.

use hookstream_testkit::TestEnv;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common;
use common::{Api, OPERATOR_TOKEN};

/// Sends raw bytes as a JSON body.
async fn send(api: &Api, method: Method, path: &str, body: Vec<u8>) -> (StatusCode, String) {
    let r = api
        .client
        .request(method, format!("{}{path}", api.base))
        .bearer_auth(OPERATOR_TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

/// `{"eventType": "a.b", "payload": <inner>}` and friends: each route's body with a hostile
/// value where a free-form JSON value goes.
fn bodies(inner: &[u8]) -> Vec<(Method, String, Vec<u8>)> {
    let wrap = |prefix: &str, suffix: &str| {
        let mut b = prefix.as_bytes().to_vec();
        b.extend_from_slice(inner);
        b.extend_from_slice(suffix.as_bytes());
        b
    };
    vec![
        (
            Method::POST,
            "/api/v1/app/acme/msg".into(),
            wrap(r#"{"eventType": "a.b", "payload": "#, "}"),
        ),
        (
            Method::POST,
            "/api/v1/app/acme/endpoint".into(),
            wrap(r#"{"url": "https://example.com/h", "metadata": {"k": "#, "}}"),
        ),
        (
            Method::POST,
            "/api/v1/app/acme/endpoint".into(),
            wrap(r#"{"url": "https://example.com/h", "filter": "#, "}"),
        ),
        (
            Method::POST,
            "/api/v1/app".into(),
            wrap(r#"{"name": "x", "metadata": {"k": "#, "}}"),
        ),
        (
            Method::POST,
            "/api/v1/event-type".into(),
            wrap(r#"{"name": "x.y", "description": "d", "schemas": "#, "}"),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_are_4xx_with_a_reason_on_every_route() {
    let env = TestEnv::new(1).await.unwrap();
    let mut cfg = common::api_config(&env);
    cfg.api.max_body_bytes = 2 * 1024 * 1024;
    let api = Api::start(cfg).await;
    let (s, _) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "Acme", "uid": "acme"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);

    let deep = [vec![b'['; 100_000], vec![b']'; 100_000]].concat();
    let deep_objects = {
        let mut b = Vec::new();
        for _ in 0..50_000 {
            b.extend_from_slice(br#"{"a":"#);
        }
        b.push(b'1');
        b.extend(std::iter::repeat_n(b'}', 50_000));
        b
    };
    let huge_exponent = b"1e999999999".to_vec();
    let long_number = [b"1".to_vec(), vec![b'0'; 200_000]].concat();
    let bad_utf8 = b"\"caf\xc3\x28\"".to_vec();
    let lone_surrogate = br#""\ud800""#.to_vec();
    let cases: [(&str, &[u8]); 6] = [
        ("100,000 nested arrays", &deep),
        ("50,000 nested objects", &deep_objects),
        ("a number no float holds", &huge_exponent),
        ("a 200,000-digit number", &long_number),
        ("invalid UTF-8 in a string", &bad_utf8),
        ("a lone surrogate escape", &lone_surrogate),
    ];
    for (what, inner) in cases {
        for (method, path, body) in bodies(inner) {
            let (s, text) = send(&api, method.clone(), &path, body).await;
            assert!(
                s.is_client_error(),
                "{what} to {method} {path}: {s} {}",
                &text[..text.len().min(300)]
            );
            assert!(
                !text.is_empty() && !text.contains("temporarily unavailable"),
                "{what} to {method} {path}: a reason, not a retry: {text}"
            );
        }
    }

    // Over the limit: refused with 413, declared or streamed without a length.
    let big = vec![b' '; 3 * 1024 * 1024];
    let (s, _) = send(&api, Method::POST, "/api/v1/app/acme/msg", big.clone()).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        big.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    let r = api
        .client
        .post(format!("{}/api/v1/app/acme/msg", api.base))
        .bearer_auth(OPERATOR_TOKEN)
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);

    // Still answering, and a plain message still goes in.
    let (s, got) = api
        .op(
            Method::POST,
            "/api/v1/app/acme/msg",
            Some(json!({"eventType": "a.b", "payload": {"ok": true}})),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{got}");
}
