//! End-to-end: outbox row → outbox-relay → Kafka → dispatcher → signed HTTP POST, on real
//! PostgreSQL, real Kafka and real HTTP receivers on port 0. Each test has its own database,
//! topics and consumer group, and runs the services in-process.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use hookstream_proto::{DeadLetter, EventEnvelope, Message as _};
use hookstream_store::outbox::NewEvent;
use hookstream_store::sqlx;
use hookstream_testkit::{counts, eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A service running in this process; stopped (gracefully) on `stop`.
struct Service {
    shutdown: CancellationToken,
    handle: JoinHandle<anyhow::Result<()>>,
}

impl Service {
    async fn stop(self) {
        self.shutdown.cancel();
        self.handle
            .await
            .expect("service task")
            .expect("service exits cleanly");
    }
}

fn start_relay(env: &TestEnv) -> Service {
    let cfg = outbox_relay::Config {
        database: env.database.clone(),
        secrets: env.secrets.clone(),
        kafka: env.kafka.clone(),
        relay: outbox_relay::RelaySettings {
            poll_interval_ms: 200,
            ..Default::default()
        },
        ..Default::default()
    };
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let handle = tokio::spawn(async move {
        let registry = prometheus::Registry::new();
        outbox_relay::run(cfg, &registry, Default::default(), token)
            .await
            .map_err(Into::into)
    });
    Service { shutdown, handle }
}

fn start_dispatcher(env: &TestEnv) -> Service {
    let mut cfg = dispatcher::Config {
        database: env.database.clone(),
        kafka: env.kafka.clone(),
        // A compressed schedule: two retries, 200 ms and 400 ms.
        retry: hookstream_config::RetryConfig {
            schedule_ms: vec![200, 400],
            jitter: 0.0,
            ..env.retry.clone()
        },
        secrets: env.secrets.clone(),
        ..Default::default()
    };
    // Receivers run on loopback: allow-list it explicitly, as the local stack does.
    cfg.delivery.allow_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    cfg.dispatcher.shutdown_grace_ms = 5_000;
    // An unknown tenant is routed again for 3 s (1 s, then 2 s later), then dead-lettered.
    cfg.dispatcher.unknown_tenant_retry_ms = 3_000;
    cfg.dlq.sink_group_id = env.dlq_sink_group();
    cfg.attempts.sink_group_id = env.attempt_sink_group();
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let handle = tokio::spawn(async move {
        let registry = prometheus::Registry::new();
        dispatcher::run(cfg, &registry, Default::default(), token)
            .await
            .map_err(Into::into)
    });
    Service { shutdown, handle }
}

/// Waits until the dispatcher's group has committed every record of the events topic.
async fn wait_committed_to_end(env: &TestEnv) -> bool {
    env.committed_to_end(Duration::from_secs(30)).await
}

async fn dead_letters(env: &TestEnv, expected: usize) -> Vec<DeadLetter> {
    env.read_topic(&env.kafka.topics.dlq, expected, Duration::from_secs(15))
        .await
        .unwrap()
        .into_iter()
        .map(|r| DeadLetter::decode(r.payload.as_slice()).expect("dead letters decode"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_1000_events_to_exactly_the_subscribed_endpoints() {
    let env = TestEnv::new(4).await.unwrap();
    let acme = env.tenant("acme").await.unwrap();
    let globex = env.tenant("globex").await.unwrap();
    let orders = Receiver::start(Behaviour::Ok).await; // acme, order.*
    let users = Receiver::start(Behaviour::Ok).await; // acme, user.created
    let everything = Receiver::start(Behaviour::Ok).await; // globex, every type
    let orders_ep = env.endpoint(acme, &orders, &["order.*"]).await.unwrap();
    let users_ep = env.endpoint(acme, &users, &["user.created"]).await.unwrap();
    let _all_ep = env.endpoint(globex, &everything, &[]).await.unwrap();
    assert_ne!(orders_ep, users_ep);

    let relay = start_relay(&env);
    let dispatcher = start_dispatcher(&env);

    // 1,000 events over two tenants and five types, in 10 transactions of 100.
    let types = [
        "order.created",
        "order.item.added",
        "user.created",
        "user.deleted",
        "invoice.paid",
    ];
    let mut expected: HashMap<&str, HashSet<String>> = HashMap::new();
    let mut bodies: HashMap<String, String> = HashMap::new();
    for batch in 0..10 {
        let mut events = Vec::new();
        for i in 0..100 {
            let n = batch * 100 + i;
            let tenant = if n % 2 == 0 { acme } else { globex };
            let payload = json!({ "n": n, "note": "naïve café ✓" });
            events.push(
                NewEvent::new(tenant, types[n % types.len()], payload)
                    .aggregate("order", format!("agg-{}", n % 17)),
            );
        }
        let ids = env.publish(&events).await.unwrap();
        for (id, e) in ids.iter().zip(&events) {
            let id = id.to_string();
            bodies.insert(id.clone(), e.payload.clone());
            let receiver = if e.tenant_id == globex {
                Some("everything")
            } else if e.event_type.starts_with("order.") {
                Some("orders")
            } else if e.event_type == "user.created" {
                Some("users")
            } else {
                None
            };
            if let Some(r) = receiver {
                expected.entry(r).or_default().insert(id);
            }
        }
    }
    let total: usize = expected.values().map(HashSet::len).sum();
    assert_eq!(
        total,
        500 + 200 + 100,
        "globex gets its 500, acme 200 order.* and 100 user.created"
    );

    let all_arrived = eventually(Duration::from_secs(60), || {
        let n = orders.count() + users.count() + everything.count();
        async move { n >= total }
    })
    .await;
    assert!(
        all_arrived,
        "only {} of {total} deliveries arrived",
        orders.count() + users.count() + everything.count()
    );
    // Anything extra (a wrong route) would arrive with the rest; give it a moment to show.
    assert!(
        wait_committed_to_end(&env).await,
        "offsets never reached the end of the topic"
    );

    for (name, receiver) in [
        ("orders", &orders),
        ("users", &users),
        ("everything", &everything),
    ] {
        let got = receiver.received();
        let ids: HashSet<String> = got.iter().map(|r| r.webhook_id.clone()).collect();
        assert_eq!(
            &ids, &expected[name],
            "{name} received exactly its subscribed events"
        );
        let dups = counts(got.iter().map(|r| r.webhook_id.clone()))
            .values()
            .filter(|c| **c > 1)
            .count();
        assert_eq!(dups, 0, "{name}: no duplicates without a crash");
        for r in &got {
            assert!(
                r.verified,
                "{name}: signature of {} verifies with the standardwebhooks crate",
                r.webhook_id
            );
            assert_eq!(
                r.body.as_ref(),
                bodies[&r.webhook_id].as_bytes(),
                "payload delivered byte for byte as published"
            );
        }
    }
    assert_eq!(env.outbox_len().await.unwrap(), 0, "the relay emptied the outbox");
    assert!(
        dead_letters(&env, 1).await.is_empty(),
        "nothing was dead-lettered"
    );

    dispatcher.stop().await;
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsubscribed_event_goes_nowhere_and_its_offset_still_advances() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &receiver, &["order.*"]).await.unwrap();
    let relay = start_relay(&env);
    let dispatcher = start_dispatcher(&env);

    let events: Vec<NewEvent> = (0..20)
        .map(|i| NewEvent::new(tenant, "user.deleted", json!({ "i": i })).aggregate("user", i.to_string()))
        .collect();
    env.publish(&events).await.unwrap();

    assert!(
        eventually(Duration::from_secs(30), || async {
            let ends: i64 = env
                .end_offsets(&env.kafka.topics.events)
                .await
                .unwrap()
                .iter()
                .sum();
            ends == 20
        })
        .await,
        "all 20 events reached Kafka"
    );
    assert!(
        wait_committed_to_end(&env).await,
        "the group's committed offsets reach the end"
    );
    assert_eq!(receiver.count(), 0, "no endpoint subscribes to user.deleted");
    assert!(
        dead_letters(&env, 1).await.is_empty(),
        "an unsubscribed event is not an error"
    );

    dispatcher.stop().await;
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_outbox_rows_are_quarantined_and_do_not_block_the_rows_behind_them() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();

    // Rows written around `hookstream.enqueue` (which would refuse them), on the same
    // aggregate (so the same shard) as the good rows that follow.
    sqlx::query(
        "INSERT INTO hookstream.outbox (event_id, tenant_id, event_type, aggregate_id, payload)
         VALUES ($1, $2, 'order.created', 'a1', '{\"ok\":false}'),
                ($3, $4, 'order.created', 'a1', '[1, 2, 3]')",
    )
    .bind(Uuid::now_v7())
    .bind(Uuid::new_v4()) // a tenant that does not exist
    .bind(Uuid::now_v7())
    .bind(tenant)
    .execute(&env.pool)
    .await
    .unwrap();
    let good: Vec<NewEvent> = (0..10)
        .map(|i| NewEvent::new(tenant, "order.created", json!({ "i": i })).aggregate("order", "a1"))
        .collect();
    let good_ids = env.publish(&good).await.unwrap();

    let relay = start_relay(&env);
    let dispatcher = start_dispatcher(&env);
    assert!(
        eventually(Duration::from_secs(30), || async { receiver.count() >= 10 }).await,
        "good rows delivered"
    );
    let got: HashSet<String> = receiver.received().iter().map(|r| r.webhook_id.clone()).collect();
    let want: Vec<String> = good_ids.iter().map(Uuid::to_string).collect();
    assert_eq!(
        got,
        want.iter().cloned().collect::<HashSet<_>>(),
        "every good row is delivered"
    );
    // One aggregate, one key: the events topic holds them in commit order.
    let in_kafka: Vec<String> = env
        .read_topic(&env.kafka.topics.events, 10, Duration::from_secs(10))
        .await
        .unwrap()
        .iter()
        .map(|r| EventEnvelope::decode(r.payload.as_slice()).unwrap().event_id)
        .collect();
    assert_eq!(in_kafka, want, "per-aggregate order holds into Kafka");

    let quarantined = hookstream_store::outbox::quarantined(&env.pool).await.unwrap();
    let reasons: Vec<&str> = quarantined.iter().map(|q| q.reason.as_str()).collect();
    assert_eq!(quarantined.len(), 2, "{reasons:?}");
    assert!(reasons[0].starts_with("unknown tenant"), "{reasons:?}");
    assert_eq!(reasons[1], "payload is not a JSON object");
    assert_eq!(env.outbox_len().await.unwrap(), 0);

    dispatcher.stop().await;
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_deliveries_and_poison_records_are_dead_lettered_with_a_reason() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let broken = Receiver::start(Behaviour::Status(500)).await;
    let rejecting = Receiver::start(Behaviour::Status(404)).await;
    let broken_ep = env.endpoint(tenant, &broken, &["order.*"]).await.unwrap();
    let rejecting_ep = env.endpoint(tenant, &rejecting, &["user.*"]).await.unwrap();
    let relay = start_relay(&env);
    let dispatcher = start_dispatcher(&env);

    // Poison bytes and an event of an unknown tenant, straight into the events topic.
    let producer: hookstream_kafka::rdkafka::producer::FutureProducer =
        hookstream_kafka::producer_config(&env.kafka, Duration::from_secs(10))
            .create()
            .unwrap();
    let ghost = EventEnvelope {
        event_id: Uuid::now_v7().to_string(),
        tenant_id: Uuid::new_v4().to_string(),
        event_type: "order.created".into(),
        payload: b"{}".to_vec().into(),
        ..Default::default()
    }
    .encode_to_vec();
    for payload in [b"\xff\xfe not protobuf".to_vec(), ghost] {
        producer
            .send(
                hookstream_kafka::rdkafka::producer::FutureRecord::<(), _>::to(&env.kafka.topics.events)
                    .payload(&payload),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
    let ids = env
        .publish(&[
            NewEvent::new(tenant, "order.created", json!({ "a": 1 })),
            NewEvent::new(tenant, "user.created", json!({ "b": 2 })),
        ])
        .await
        .unwrap();

    let letters = dead_letters(&env, 4).await;
    assert_eq!(letters.len(), 4, "{letters:?}");
    let by_class: HashMap<&str, &DeadLetter> = letters.iter().map(|l| (l.error_class.as_str(), l)).collect();
    let decode = by_class["decode"];
    assert!(decode.reason.contains("undecodable"), "{}", decode.reason);
    assert_eq!(&decode.raw[..], b"\xff\xfe not protobuf", "raw bytes are kept");
    let ghost = by_class["unknown_tenant"];
    assert!(ghost.reason.starts_with("unknown tenant"), "{}", ghost.reason);
    assert!(
        ghost.reason.contains("routed again for"),
        "retried before it was given up: {}",
        ghost.reason
    );
    assert!(
        ghost.event.is_some(),
        "kept with its event, so it can be replayed"
    );
    let http5 = by_class["http_5xx"];
    assert_eq!(http5.endpoint_id, broken_ep.to_string());
    assert_eq!(http5.last_status, 500);
    assert_eq!(http5.attempts, 3, "first attempt and two retries");
    assert_eq!(http5.reason, "gave up after 3 attempts: HTTP 500");
    assert_eq!(broken.count(), 3);
    assert_eq!(http5.event.as_ref().unwrap().event_id, ids[0].to_string());
    let http4 = by_class["http_4xx"];
    assert_eq!(http4.endpoint_id, rejecting_ep.to_string());
    assert_eq!(http4.last_status, 404);
    assert_eq!(http4.attempts, 1, "a permanent failure is not retried");
    assert!(
        http4.reason.contains("permanent failure: HTTP 404"),
        "{}",
        http4.reason
    );
    assert!(
        wait_committed_to_end(&env).await,
        "the partition moved on past the poison"
    );

    dispatcher.stop().await;
    relay.stop().await;
}
