//! The attempt log's producer (real Kafka and PostgreSQL): a dispatcher stopped with SIGTERM
//! while deliveries are under way still produces an attempt for every request its receiver
//! saw (the attempts recorded last, while the roles finished, are flushed before the process
//! exits instead of being purged with the producer).

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use hookstream_proto::{AttemptBatch, AttemptRecord, Message as _, BATCH_HEADER, BATCH_OF_ATTEMPTS};
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::process::{dispatcher_env, ServiceProcess};
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common;

/// Every attempt on the attempts topic (one per record, or a batch's).
async fn attempts_on_topic(env: &TestEnv) -> Vec<AttemptRecord> {
    let records = env.read_all(&env.kafka.topics.attempts).await.unwrap();
    let mut attempts = Vec::new();
    for r in &records {
        if r.header(BATCH_HEADER) == Some(BATCH_OF_ATTEMPTS.as_bytes()) {
            attempts.extend(AttemptBatch::decode(r.payload.as_slice()).unwrap().records);
        } else {
            attempts.push(AttemptRecord::decode(r.payload.as_slice()).unwrap());
        }
    }
    attempts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_stopped_mid_delivery_produces_every_attempt_it_made() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    // Slow answers: when SIGTERM comes, hundreds of deliveries are under way, and their
    // attempts are recorded during the shutdown grace, moments before the process exits.
    let receiver = Receiver::start(Behaviour::Delay(400)).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let relay = CancellationToken::new();
    common::start_relay(&env, &relay);

    let mut vars = dispatcher_env(&env);
    // Every role (deferred deliveries come back from the tiers), the sinks off: the test
    // reads the topic itself.
    vars.push(("HOOKSTREAM_ATTEMPTS__SINK_ENABLED".into(), "false".into()));
    vars.push(("HOOKSTREAM_DLQ__SINK_ENABLED".into(), "false".into()));
    // A long linger: what the producer holds at the stop is a second of attempts, which a
    // stop without the flush would lose (with the default 20 ms the race is too short to see).
    let config = env.log_path("dispatcher.toml");
    std::fs::write(&config, "[kafka.client]\n\"linger.ms\" = \"1000\"\n").unwrap();
    vars.push(("HOOKSTREAM_CONFIG".into(), config.display().to_string()));
    let dispatcher = ServiceProcess::spawn(
        Path::new(env!("CARGO_BIN_EXE_dispatcher")),
        &vars,
        &env.log_path("dispatcher"),
    )
    .unwrap();
    let events: Vec<NewEvent> = (0..3_000)
        .map(|i| NewEvent::new(tenant, "order.created", json!({ "n": i })).aggregate("order", i.to_string()))
        .collect();
    for chunk in events.chunks(500) {
        env.publish(chunk).await.unwrap();
    }
    assert!(
        eventually(Duration::from_secs(60), || async { receiver.count() >= 500 }).await,
        "deliveries under way: {}",
        receiver.count()
    );
    assert_eq!(dispatcher.terminate().await, Some(0), "a clean stop");
    relay.cancel();

    let seen = receiver.count();
    assert!(seen < 3_000, "stopped mid-way ({seen} requests)");
    let attempts = attempts_on_topic(&env).await;
    let ids: HashSet<&str> = attempts.iter().map(|a| a.event_id.as_str()).collect();
    assert_eq!(ids.len(), attempts.len(), "one attempt per event, none twice");
    assert_eq!(
        attempts.len(),
        seen,
        "an attempt for every request the receiver saw"
    );
    assert!(
        attempts.iter().all(|a| a.status == 204 && a.next == "delivered"),
        "every one delivered"
    );
}
