//! Capability URLs stay secret: whatever way a delivery fails (connection refused, timeout,
//! HTTP 500, refused by the address policy, refused as a URL), its `Outcome` names the failure
//! without the URL's tokens. Real servers on 127.0.0.1, port 0.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use bytes::Bytes;
use hookstream_delivery::{DeliveryConfig, Engine, ErrorClass, Message, Outcome, Target, Verdict};
use hookstream_signing::Secret;

/// Secret parts of the URLs below, in every form a library could print them.
const SECRETS: &[&str] = &[
    "T0000000",
    "B0000000",
    "PathSecret9XYZ9abcdefgh",
    "QuerySecret9abc9XYZ",
    "a%2Bb%3D%3D",
    "a+b==",
    "3f9a1c0e-2b7d-4c5a-9e8f-5d6c7b8a9f01",
    "UserSecret9pass",
];

/// Capability URLs on `host:port`: a token in the path (Slack style), in the query, and a
/// path that is itself the capability.
fn capability_urls(host: &str, port: u16) -> Vec<String> {
    let base = format!("http://{host}:{port}");
    vec![
        format!("{base}/services/T0000000/B0000000/PathSecret9XYZ9abcdefgh"),
        format!("{base}/hooks/orders?token=QuerySecret9abc9XYZ&sig=a%2Bb%3D%3D"),
        format!("{base}/hooks/3f9a1c0e-2b7d-4c5a-9e8f-5d6c7b8a9f01"),
    ]
}

fn engine(allow_loopback: bool) -> Engine {
    let cfg = DeliveryConfig {
        allow_cidrs: if allow_loopback {
            vec!["127.0.0.0/8".parse().unwrap()]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    Engine::new(&cfg).unwrap()
}

async fn deliver(engine: &Engine, url: &str, timeout: Duration) -> Outcome {
    let secrets = [Secret::generate()];
    let body = Bytes::from_static(b"{\"x\":1}");
    let target = Target {
        url,
        timeout,
        secrets: &secrets,
        headers: &[],
    };
    let msg = Message {
        id: "evt_1",
        event_type: "order.created",
        body: &body,
        attempt: 1,
    };
    engine.deliver(target, msg).await
}

fn assert_no_secret(url: &str, out: &Outcome) {
    let error = out
        .error
        .as_deref()
        .unwrap_or_else(|| panic!("{url}: a failure says why"));
    assert!(!error.is_empty(), "{url}");
    let debug = format!("{out:?}");
    for secret in SECRETS {
        assert!(!error.contains(secret), "{url}: {secret} in error {error:?}");
        assert!(!debug.contains(secret), "{url}: {secret} in {debug}");
    }
}

/// A port nothing listens on (bound, then released).
fn refused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A server that accepts connections and never answers.
async fn silent_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    port
}

/// A server that answers every request with a 500 and counts them.
async fn failing_server() -> (u16, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error")
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, hits)
}

#[tokio::test]
async fn connection_refused_names_no_secret() {
    let port = refused_port();
    let engine = engine(true);
    for host in ["127.0.0.1", "localhost"] {
        for url in capability_urls(host, port) {
            let out = deliver(&engine, &url, Duration::from_secs(5)).await;
            assert_eq!(out.class, ErrorClass::Connect, "{url}: {:?}", out.error);
            assert_eq!(out.verdict, Verdict::Retryable);
            assert_no_secret(&url, &out);
        }
    }
}

#[tokio::test]
async fn timeout_names_no_secret() {
    let port = silent_server().await;
    let engine = engine(true);
    for url in capability_urls("127.0.0.1", port) {
        let out = deliver(&engine, &url, Duration::from_millis(300)).await;
        assert_eq!(out.class, ErrorClass::Timeout, "{url}: {:?}", out.error);
        assert_eq!(out.verdict, Verdict::Retryable);
        assert_no_secret(&url, &out);
    }
}

#[tokio::test]
async fn http_500_names_no_secret() {
    let (port, hits) = failing_server().await;
    let engine = engine(true);
    let urls = capability_urls("127.0.0.1", port);
    for url in &urls {
        let out = deliver(&engine, url, Duration::from_secs(5)).await;
        assert_eq!(out.class, ErrorClass::Http5xx, "{url}: {:?}", out.error);
        assert_eq!(out.status, Some(500));
        assert_eq!(out.verdict, Verdict::Retryable);
        assert_no_secret(url, &out);
    }
    assert_eq!(hits.load(Ordering::SeqCst), urls.len());
}

#[tokio::test]
async fn refused_destinations_name_no_secret() {
    let (port, hits) = failing_server().await;
    let engine = engine(false);
    // An IP literal is refused before the request, a name by the resolver.
    for host in ["127.0.0.1", "0x7f.1", "[::ffff:127.0.0.1]", "localhost"] {
        for url in capability_urls(host, port) {
            let out = deliver(&engine, &url, Duration::from_secs(5)).await;
            assert_eq!(out.class, ErrorClass::SsrfBlocked, "{url}: {:?}", out.error);
            assert_eq!(out.verdict, Verdict::Permanent);
            // A fixed reason naming the host as written: neither the resolved address nor
            // the range (those are in the operator's log).
            let error = out.error.as_deref().unwrap_or_default();
            assert!(error.starts_with("blocked_address: "), "{url}: {error}");
            assert!(
                !error.contains("loopback") && !error.contains("/8"),
                "{url}: {error}"
            );
            if host == "localhost" {
                assert!(
                    !error.contains("127.0.0.1") && !error.contains("::1"),
                    "{url}: {error}"
                );
            }
            assert_no_secret(&url, &out);
        }
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing reached the server");
}

#[tokio::test]
async fn credentials_in_the_url_are_refused_without_being_repeated() {
    let (port, hits) = failing_server().await;
    let engine = engine(true);
    let url = format!("http://user:UserSecret9pass@127.0.0.1:{port}/hooks/PathSecret9XYZ9abcdefgh");
    let out = deliver(&engine, &url, Duration::from_secs(5)).await;
    assert_eq!(out.class, ErrorClass::InvalidUrl, "{:?}", out.error);
    assert_eq!(out.verdict, Verdict::Permanent);
    assert_no_secret(&url, &out);
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    let target = Target {
        url: &url,
        timeout: Duration::from_secs(1),
        secrets: &[],
        headers: &[],
    };
    let debug = format!("{target:?}");
    for secret in SECRETS {
        assert!(!debug.contains(secret), "{secret} in {debug}");
    }
}
