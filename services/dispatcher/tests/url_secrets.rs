//! Capability URLs are secrets: a token in an endpoint's path or query never appears in the
//! dispatcher's logs (at debug level), in dead letters (the DLQ topic and the table), in
//! attempt records, in the `endpoint.disabled` event, or in clear in the endpoints table. Before,
//! reqwest's error text carried the full URL ("for url (…)") into all of them.

use std::path::Path;
use std::time::Duration;

use hookstream_store::endpoints::NewEndpoint;
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::process::{dispatcher_env, ServiceProcess};
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common;

const TOKENS: [&str; 5] = [
    "T0KpathAAA1234567",
    "XyZtokenPath999abc",
    "QueryTok3nSecret42",
    "capabilityT0ken77",
    "GoneQueryT0ken555",
];

fn contains_token(haystack: &[u8]) -> Option<&'static str> {
    TOKENS
        .iter()
        .find(|t| haystack.windows(t.len()).any(|w| w == t.as_bytes()))
        .copied()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_an_endpoint_url_appears_in_no_log_dead_letter_or_attempt_record() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let failing = Receiver::start(Behaviour::Status(500)).await;
    let rejecting = Receiver::start(Behaviour::Status(404)).await;
    let gone = Receiver::start(Behaviour::Status(410)).await;
    let nobody = Receiver::start(Behaviour::Ok).await; // only holds the refused one's secret
    let new = |url: String| NewEndpoint {
        tenant_id: tenant,
        url,
        timeout_ms: Some(2_000),
        ..Default::default()
    };
    for (receiver, url) in [
        (
            &nobody,
            format!("http://{closed}/hooks/{}/B00/{}", TOKENS[0], TOKENS[1]),
        ),
        (&failing, format!("{}?token={}&v=1", failing.url(), TOKENS[2])),
        (&rejecting, format!("{}/{}", rejecting.url(), TOKENS[3])),
        (&gone, format!("{}?key={}", gone.url(), TOKENS[4])),
    ] {
        env.endpoint_with(receiver, new(url)).await.unwrap();
    }

    let mut vars = dispatcher_env(&env);
    vars.extend(
        [
            ("RUST_LOG", "debug"),
            ("HOOKSTREAM_RETRY__SCHEDULE_MS", "[200, 400]"),
            ("HOOKSTREAM_RETRY__JITTER", "0"),
            ("HOOKSTREAM_DISPATCHER__PUBLISH_ENDPOINT_DISABLED", "true"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let log = env.log_path("dispatcher");
    let dispatcher = ServiceProcess::spawn(Path::new(env!("CARGO_BIN_EXE_dispatcher")), &vars, &log).unwrap();
    let relay = CancellationToken::new();
    common::start_relay(&env, &relay);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();

    // Refused (connect), 500 (gave up), 404 (permanent), 410 (gone): four dead letters of
    // the first event, stored by the sink; then endpoint.disabled goes to the others.
    let stored = || async {
        hookstream_store::sqlx::query_scalar::<_, i64>("SELECT count(*) FROM hookstream.dead_letters")
            .fetch_one(&env.pool)
            .await
            .unwrap()
    };
    assert!(
        eventually(Duration::from_secs(60), || async { stored().await >= 7 }).await,
        "dead letters of the event and of endpoint.disabled ({} stored)",
        stored().await
    );
    assert_eq!(dispatcher.terminate().await, Some(0));
    relay.cancel();

    let classes: Vec<String> = hookstream_store::sqlx::query_scalar(
        "SELECT DISTINCT error_class FROM hookstream.dead_letters ORDER BY 1",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(classes, ["connect", "http_410", "http_4xx", "http_5xx"]);

    // Every column of every table, as PostgreSQL prints it, and the byte columns raw.
    for table in [
        "hookstream.dead_letters",
        "hookstream.endpoints",
        "hookstream.outbox",
        "hookstream.outbox_quarantine",
    ] {
        let rows: Vec<String> =
            hookstream_store::sqlx::query_scalar(&format!("SELECT t::text FROM {table} t"))
                .fetch_all(&env.pool)
                .await
                .unwrap();
        for row in rows {
            assert_eq!(contains_token(row.as_bytes()), None, "{table}: {row}");
        }
    }
    type Bytes3 = (Option<Vec<u8>>, Option<Vec<u8>>, Option<Vec<u8>>);
    let blobs: Vec<Bytes3> =
        hookstream_store::sqlx::query_as("SELECT event, raw, last_response FROM hookstream.dead_letters")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    for (a, b, c) in blobs {
        for bytes in [a, b, c].into_iter().flatten() {
            assert_eq!(contains_token(&bytes), None, "a dead letter's bytes");
        }
    }
    let reasons: Vec<String> =
        hookstream_store::sqlx::query_scalar("SELECT reason FROM hookstream.dead_letters")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("connect") || r.contains("refused")),
        "the reasons still say what happened: {reasons:?}"
    );
    for topic in [
        &env.kafka.topics.dlq,
        &env.kafka.topics.attempts,
        &env.kafka.topics.events,
    ] {
        let records = env.read_all(topic).await.unwrap();
        assert!(!records.is_empty(), "{topic} has records");
        for r in records {
            assert_eq!(contains_token(&r.payload), None, "{topic} offset {}", r.offset);
        }
    }
    let text = std::fs::read(&log).unwrap();
    assert!(text.len() > 10_000, "a debug log was written");
    assert_eq!(contains_token(&text), None, "the dispatcher's log");
}
