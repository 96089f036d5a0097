//! The attempt log's producer (real Kafka and PostgreSQL): a fan-out event's attempts go out
//! as one batch record without a slow endpoint holding its siblings' back; a dispatcher
//! stopped with SIGTERM while deliveries are under way still produces an attempt for every
//! request its receiver saw (the attempts recorded last, while the roles finished, are
//! flushed before the process exits instead of being purged with the producer).

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use hookstream_proto::{AttemptBatch, AttemptRecord, Message as _, BATCH_HEADER, BATCH_OF_ATTEMPTS};
use hookstream_store::endpoints::NewEndpoint;
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::process::{dispatcher_env, ServiceProcess};
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

mod common;

/// The records on the attempts topic, each as its attempts (one, or a batch's).
async fn records_on_topic(env: &TestEnv) -> Vec<Vec<AttemptRecord>> {
    let records = env.read_all(&env.kafka.topics.attempts).await.unwrap();
    records
        .iter()
        .map(|r| {
            if r.header(BATCH_HEADER) == Some(BATCH_OF_ATTEMPTS.as_bytes()) {
                AttemptBatch::decode(r.payload.as_slice()).unwrap().records
            } else {
                vec![AttemptRecord::decode(r.payload.as_slice()).unwrap()]
            }
        })
        .collect()
}

/// Every attempt on the attempts topic.
async fn attempts_on_topic(env: &TestEnv) -> Vec<AttemptRecord> {
    records_on_topic(env).await.into_iter().flatten().collect()
}

/// The attempts of `tenant`'s events, record by record.
async fn records_of(env: &TestEnv, tenant: Uuid) -> Vec<Vec<AttemptRecord>> {
    let tenant = tenant.to_string();
    let mut records = records_on_topic(env).await;
    records.retain(|r| r.iter().any(|a| a.tenant_id == tenant));
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_events_attempts_go_as_one_record_and_a_slow_endpoint_holds_none_back() {
    let env = TestEnv::new(2).await.unwrap();
    let mut cfg = common::retrying_config(&env, vec![1_000]);
    cfg.attempts.sink_enabled = false; // the test reads the topic
    let token = common::start_pipeline(&env, cfg);

    // Five quick endpoints: the event's five attempts are one batch record.
    let quick = env.tenant("quick").await.unwrap();
    let mut receivers = Vec::new();
    for _ in 0..5 {
        let r = Receiver::start(Behaviour::Ok).await;
        env.endpoint(quick, &r, &[]).await.unwrap();
        receivers.push(r);
    }
    env.publish(&[NewEvent::new(quick, "order.created", json!({}))])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            records_of(&env, quick).await.iter().flatten().count() == 5
        })
        .await,
        "five attempts recorded: {:?}",
        records_of(&env, quick).await
    );
    let records = records_of(&env, quick).await;
    assert_eq!(records.len(), 1, "one record for the event: {records:?}");
    let endpoints: HashSet<&str> = records[0].iter().map(|a| a.endpoint_id.as_str()).collect();
    assert_eq!(endpoints.len(), 5, "an attempt per endpoint");
    assert!(records[0]
        .iter()
        .all(|a| a.next == "delivered" && a.trigger == "first"));

    // Beside an endpoint that answers after 3 s, the four quick endpoints' attempts are on the
    // topic long before it answers (the batch waits 100 ms for siblings), and the slow one's
    // comes on its own when it does.
    let mixed = env.tenant("mixed").await.unwrap();
    let mut quick_ones = Vec::new();
    for _ in 0..4 {
        let r = Receiver::start(Behaviour::Ok).await;
        env.endpoint(mixed, &r, &[]).await.unwrap();
        quick_ones.push(r);
    }
    let slow = Receiver::start(Behaviour::Delay(3_000)).await;
    let slow_ep = env
        .endpoint_with(
            &slow,
            NewEndpoint {
                tenant_id: mixed,
                timeout_ms: Some(10_000),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let published = Instant::now();
    env.publish(&[NewEvent::new(mixed, "order.created", json!({}))])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            records_of(&env, mixed).await.iter().flatten().count() >= 4
        })
        .await,
        "the quick endpoints' attempts recorded"
    );
    let seen_after = published.elapsed();
    let records = records_of(&env, mixed).await;
    assert!(
        seen_after < Duration::from_millis(2_500),
        "the quick attempts were recorded {seen_after:?} after the publish, not held for the slow endpoint (3 s)"
    );
    assert_eq!(records.len(), 1, "the quick ones in one record: {records:?}");
    assert_eq!(records[0].len(), 4);
    assert!(records[0].iter().all(|a| a.endpoint_id != slow_ep.to_string()));
    assert!(
        eventually(Duration::from_secs(30), || async {
            records_of(&env, mixed).await.len() == 2
        })
        .await,
        "the slow endpoint's attempt recorded"
    );
    assert!(published.elapsed() >= Duration::from_secs(3));
    // (Read back in partition order: the batch is keyed by the event, the single record by
    // its endpoint.)
    let records = records_of(&env, mixed).await;
    let alone: Vec<&AttemptRecord> = records.iter().filter(|r| r.len() == 1).flatten().collect();
    assert_eq!(alone.len(), 1, "on its own: {records:?}");
    assert_eq!(
        (alone[0].endpoint_id.as_str(), alone[0].status),
        (slow_ep.to_string().as_str(), 204)
    );
    token.cancel();
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
