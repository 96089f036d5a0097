//! Payloads at rest and erasure (issue 41.9), on real PostgreSQL and Kafka: a payload with a
//! unique marker goes through the events topic, both retry tiers and the DLQ into the
//! dead-letter store; the receiver gets it in clear, but no Kafka log segment on disk and no
//! dump of the database ever holds it in clear (nor as the hex a dump writes bytea in). After
//! the subject is erased, the API, the portal, replay and resend cannot produce it, and the
//! tenant-wide erasure (Svix's `expunge-all-contents`) reaches what the tenant has left.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::{portal_session, start_pipeline, Api};
use hookstream_kafka::rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use hookstream_kafka::rdkafka::client::DefaultClientContext;
use hookstream_kafka::rdkafka::ClientConfig;
use hookstream_store::payload_keys;
use hookstream_testkit::receiver::{Behaviour, Receiver};
use hookstream_testkit::{eventually, TestEnv};
use reqwest::Method;
use reqwest::StatusCode;

/// The broker's log directories (`log.dirs`), as it describes them.
async fn kafka_log_dirs(env: &TestEnv) -> Vec<PathBuf> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &env.kafka.brokers)
        .create()
        .expect("an admin client");
    let metadata = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(10))
        .expect("cluster metadata");
    let mut dirs = Vec::new();
    for broker in metadata.brokers() {
        let described = admin
            .describe_configs(&[ResourceSpecifier::Broker(broker.id())], &AdminOptions::new())
            .await
            .expect("broker configs");
        for resource in described.into_iter().flatten() {
            let value = |name: &str| {
                resource
                    .entries
                    .iter()
                    .find(|e| e.name == name)
                    .and_then(|e| e.value.clone())
            };
            // `log.dirs` when set, else `log.dir`.
            let listed = value("log.dirs").or_else(|| value("log.dir")).unwrap_or_default();
            dirs.extend(listed.split(',').filter(|d| !d.is_empty()).map(PathBuf::from));
        }
    }
    assert!(!dirs.is_empty(), "the broker names its log directories");
    dirs
}

/// Every file of this test's topics (`test.<id>.*`) under the broker's log directories.
fn segment_files(dirs: &[PathBuf], env: &TestEnv) -> Vec<PathBuf> {
    let prefix = env.kafka.topics.events.trim_end_matches("events").to_string();
    let mut files = Vec::new();
    for dir in dirs {
        for partition in std::fs::read_dir(dir).expect("a log directory").flatten() {
            if !partition.file_name().to_string_lossy().starts_with(&prefix) {
                continue;
            }
            for file in std::fs::read_dir(partition.path())
                .expect("a partition directory")
                .flatten()
            {
                files.push(file.path());
            }
        }
    }
    files
}

fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Where the marker is in clear (or hex-encoded): Kafka segment files and a pg_dump.
async fn clear_copies(env: &TestEnv, dirs: &[PathBuf], marker: &str) -> Vec<String> {
    let hex_marker = hex::encode(marker);
    let mut found = Vec::new();
    let files = segment_files(dirs, env);
    let topics: std::collections::HashSet<String> = files
        .iter()
        .filter_map(|f| f.parent()?.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    for topic in [&env.kafka.topics.events, &env.kafka.topics.dlq] {
        assert!(
            topics.iter().any(|t| t.starts_with(topic.as_str())),
            "segments of {topic} are on disk: {topics:?}"
        );
    }
    for file in files {
        let bytes = std::fs::read(&file).unwrap_or_default();
        if holds(&bytes, marker.as_bytes()) || holds(&bytes, hex_marker.as_bytes()) {
            found.push(file.display().to_string());
        }
    }
    let dump = tokio::process::Command::new("pg_dump")
        .arg("--no-owner")
        .arg(&env.database.url)
        .output()
        .await
        .expect("pg_dump runs");
    assert!(
        dump.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    assert!(
        holds(&dump.stdout, b"COPY hookstream.dead_letters"),
        "the dump holds the dead-letter store"
    );
    if holds(&dump.stdout, marker.as_bytes()) || holds(&dump.stdout, hex_marker.as_bytes()) {
        found.push("pg_dump of the database".into());
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_payload_is_never_at_rest_in_clear_and_erasure_makes_every_copy_unreadable() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("erasure").await.unwrap();
    let receiver = Receiver::start(Behaviour::Status(500)).await;
    let ep = env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let stop = start_pipeline(&env);
    let api = Api::start(common::api_config(&env)).await;
    let dirs = kafka_log_dirs(&env).await;

    let marker = format!("MARKER-{}", uuid::Uuid::new_v4().simple());
    let payload = format!(r#"{{"customer":"cust-7","note":"{marker}"}}"#);
    let event =
        hookstream_store::outbox::NewEvent::from_json_text(tenant, "customer.updated", payload.clone())
            .subject("cust-7");
    let id = env.publish(&[event]).await.unwrap()[0];

    // Three attempts (first, 1 s tier, 2 s tier), then the DLQ and the dead-letter store.
    let stored = eventually(Duration::from_secs(60), || async {
        hookstream_store::sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM hookstream.dead_letters WHERE event_id = $1",
        )
        .bind(id)
        .fetch_one(&env.pool)
        .await
        .unwrap()
            == 1
    })
    .await;
    assert!(stored, "the event was dead-lettered and stored");
    let bodies: Vec<_> = receiver.received().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 3, "three attempts");
    assert!(
        bodies.iter().all(|b| b.as_ref() == payload.as_bytes()),
        "the receiver gets the payload in clear, byte for byte"
    );
    // Give the attempt log and the sinks a moment to write what they write.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The scan finds what is in clear: the event type travels in clear in every record.
    let event_type = clear_copies(&env, &dirs, "customer.updated").await;
    assert!(
        [".events-", ".retry.", ".dlq-"]
            .iter()
            .all(|t| event_type.iter().any(|f| f.contains(t))),
        "the scan reads the events, retry tier and DLQ segments: {event_type:?}"
    );
    let before = clear_copies(&env, &dirs, &marker).await;
    assert!(before.is_empty(), "the marker is in clear at rest: {before:?}");

    // The API opens what it stores for the tenant.
    let app = tenant.to_string();
    let msg_path = format!("/api/v1/app/{app}/msg/{id}");
    let (s, msg) = api.op(Method::GET, &msg_path, None).await;
    assert_eq!(s, StatusCode::OK, "{msg}");
    assert_eq!(
        msg["payload"]["note"],
        marker.as_str(),
        "the API shows the payload: {msg}"
    );

    // Erase the subject.
    let erased = payload_keys::erase(&env.pool, tenant, Some("cust-7"), "test")
        .await
        .unwrap();
    assert_eq!(erased.keys, 1, "{erased:?}");
    assert_eq!(erased.messages, 1, "{erased:?}");
    let audit: (String, String, i32) = hookstream_store::sqlx::query_as(
        "SELECT scope, actor, keys_erased FROM hookstream.erasures WHERE tenant_id = $1",
    )
    .bind(tenant)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(audit, ("subject".into(), "test".into(), 1), "an audit record");

    // The API, the portal, replay and resend cannot produce it any more.
    let (s, msg) = api.op(Method::GET, &msg_path, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(msg["payload"], serde_json::json!({}), "erased: {msg}");
    let (s, answer) = api
        .op(Method::POST, &format!("{msg_path}/endpoint/{ep}/resend"), None)
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "a resend is refused: {answer}");
    assert!(answer.to_string().contains("erased"), "{answer}");
    let (cookie, _) = portal_session(&api, &app, true).await;
    let page = reqwest::Client::new()
        .get(format!("{}/portal/events/{id}", api.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        !page.text().await.unwrap().contains(&marker),
        "the portal shows no marker"
    );
    let replayer =
        hookstream_replay::Replayer::new(env.pool.clone(), &env.kafka, &common::retry(&env)).unwrap();
    let report = replayer
        .replay(
            &hookstream_store::dead_letters::Filter {
                tenant: Some(tenant),
                ..Default::default()
            },
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(report.replayed.is_empty(), "{report:?}");
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert!(report.skipped[0].reason.contains("erased"), "{report:?}");
    let resent = replayer.resend(id, ep, Duration::from_secs(60)).await;
    assert!(
        matches!(resent, Err(hookstream_replay::ReplayError::Erased { .. })),
        "{resent:?}"
    );
    let after = clear_copies(&env, &dirs, &marker).await;
    assert!(
        after.is_empty(),
        "the marker is in clear after erasure: {after:?}"
    );

    // A new event of the subject gets a new key and is delivered; the tenant-wide erasure
    // (Svix's expunge-all-contents) then reaches it, and writes an audit record too.
    receiver.set_behaviour(Behaviour::Ok);
    let again = hookstream_store::outbox::NewEvent::from_json_text(tenant, "customer.updated", r#"{"n":2}"#)
        .subject("cust-7");
    let id2 = env.publish(&[again]).await.unwrap()[0];
    let delivered = eventually(Duration::from_secs(30), || async { receiver.successes() == 1 }).await;
    assert!(delivered, "an event after the erasure is delivered");
    let (s, task) = api
        .op(
            Method::POST,
            &format!("/api/v1/app/{app}/msg/expunge-all-contents"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{task}");
    assert_eq!(task["task"], "application.purge_content", "{task}");
    assert_eq!(task["status"], "finished", "{task}");
    assert_eq!(task["data"]["messagesPurged"], 1, "{task}");
    let (s, msg) = api
        .op(Method::GET, &format!("/api/v1/app/{app}/msg/{id2}"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(msg["payload"], serde_json::json!({}), "{msg}");
    let live: i64 = hookstream_store::sqlx::query_scalar(
        "SELECT count(*) FROM hookstream.payload_keys WHERE tenant_id = $1 AND erased_at IS NULL",
    )
    .bind(tenant)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(live, 0, "no live key of the tenant is left");
    let scopes: Vec<String> = hookstream_store::sqlx::query_scalar(
        "SELECT scope FROM hookstream.erasures WHERE tenant_id = $1 ORDER BY id",
    )
    .bind(tenant)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(scopes, ["subject", "tenant"]);
    stop.cancel();
}
