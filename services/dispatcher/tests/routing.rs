//! Routing never misses an endpoint that existed when its event committed, on real Kafka and
//! PostgreSQL: each event carries the subscription version its relay claim saw, and the
//! dispatcher routes it only with a snapshot at least that new. Before, the snapshot was
//! refreshed on NOTIFY at most every 200 ms and an event could beat its endpoint's refresh
//! (routed to nobody, or dead-lettered as `unknown_tenant`, which could not be replayed): run
//! on the old code, the thousand rounds below delivered 850 events (118 routed to nobody, 32
//! dead-lettered).
//! An unknown tenant is now routed again for a bounded time, and its dead letters replay.

use std::collections::HashSet;
use std::time::Duration;

use hookstream_kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use hookstream_proto::{EventEnvelope, Message as _};
use hookstream_replay::{ReplayOptions, Replayer};
use hookstream_store::dead_letters::{self, Filter};
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use uuid::Uuid;

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_new_tenants_each_get_the_event_published_right_after_their_endpoint() {
    const ROUNDS: usize = 1_000;
    let env = TestEnv::new(3).await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    let registry = prometheus::Registry::new();
    let token =
        common::start_observed_pipeline(&env, common::retrying_config(&env, vec![1_000]), registry.clone());
    // One tenant first, so the dispatcher is up and routing before the rounds start.
    let warm = env.tenant("warm-up").await.unwrap();
    env.endpoint(warm, &receiver, &[]).await.unwrap();
    env.publish(&[NewEvent::new(warm, "order.created", json!({}))])
        .await
        .unwrap();
    assert!(eventually(Duration::from_secs(30), || async { receiver.count() == 1 }).await);

    let mut want = HashSet::new();
    for round in 0..ROUNDS {
        let tenant = env.tenant(&format!("t{round}")).await.unwrap();
        env.endpoint(tenant, &receiver, &[]).await.unwrap();
        let ids = env
            .publish(&[NewEvent::new(tenant, "order.created", json!({ "round": round }))])
            .await
            .unwrap();
        want.insert(ids[0].to_string());
    }
    assert!(
        eventually(Duration::from_secs(120), || async {
            receiver.distinct().0.is_superset(&want)
        })
        .await,
        "every event delivered to the endpoint created just before it ({} of {ROUNDS})",
        receiver.distinct().0.intersection(&want).count()
    );
    assert!(
        receiver.received().iter().all(|r| r.verified),
        "signed with each endpoint's own secret"
    );
    let metric = |result: &str| {
        common::metric(
            &registry,
            "hookstream_dispatcher_events_total",
            &[("result", result)],
        )
    };
    assert_eq!(metric("unsubscribed"), 0.0, "no event routed to nobody");
    assert_eq!(metric("unknown_tenant") + metric("unknown_tenant_rerouted"), 0.0);
    println!(
        "{ROUNDS} rounds: {} routes waited for a newer snapshot; refreshes: {} incremental, {} full",
        common::metric(&registry, "hookstream_dispatcher_route_waits_total", &[]),
        common::metric(
            &registry,
            "hookstream_dispatcher_subscription_refreshes_total",
            &[("kind", "incremental")]
        ),
        common::metric(
            &registry,
            "hookstream_dispatcher_subscription_refreshes_total",
            &[("kind", "full")]
        ),
    );
    token.cancel();
}

fn producer(env: &TestEnv) -> FutureProducer {
    hookstream_kafka::producer_config(&env.kafka, Duration::from_secs(10))
        .create()
        .unwrap()
}

/// Produces an event of `tenant` straight to the events topic (no relay, no version: as an
/// older relay or another producer would).
async fn produce_event(env: &TestEnv, tenant: Uuid) -> String {
    let event = EventEnvelope {
        event_id: Uuid::now_v7().to_string(),
        tenant_id: tenant.to_string(),
        event_type: "order.created".into(),
        payload: b"{\"n\":1}".to_vec().into(),
        ..Default::default()
    };
    producer(env)
        .send(
            FutureRecord::to(&env.kafka.topics.events)
                .key(&event.tenant_id)
                .payload(&event.encode_to_vec()),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    event.event_id
}

/// A tenant with a given id (as a restore from a backup would bring back).
async fn tenant_with_id(env: &TestEnv, id: Uuid) {
    hookstream_store::sqlx::query("INSERT INTO hookstream.tenants (id, name) VALUES ($1, $2)")
        .bind(id)
        .bind(format!("tenant-{id}"))
        .execute(&env.pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tenant_is_routed_again_and_its_dead_letter_can_be_replayed() {
    let env = TestEnv::new(2).await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    let mut cfg = common::retrying_config(&env, vec![1_000]);
    cfg.dispatcher.unknown_tenant_retry_ms = 4_000;
    let registry = prometheus::Registry::new();
    // The endpoint the late tenant will get, made now under a stand-in tenant.
    let stand_in = env.tenant("stand-in").await.unwrap();
    let ep = env.endpoint(stand_in, &receiver, &[]).await.unwrap();
    let token = common::start_observed_pipeline(&env, cfg.clone(), registry.clone());

    // A tenant that appears within the bound gets the event. It appears with its endpoint in
    // one transaction, as a restore brings them back: a snapshot that saw the tenant without
    // its endpoint would rightly route the event to nobody (and did, now and then).
    let late = Uuid::now_v7();
    let caught = produce_event(&env, late).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut tx = env.pool.begin().await.unwrap();
    hookstream_store::sqlx::query("INSERT INTO hookstream.tenants (id, name) VALUES ($1, 'late')")
        .bind(late)
        .execute(&mut *tx)
        .await
        .unwrap();
    hookstream_store::sqlx::query("UPDATE hookstream.endpoints SET tenant_id = $1 WHERE id = $2")
        .bind(late)
        .bind(ep)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            receiver.received().iter().any(|r| r.webhook_id == caught)
        })
        .await,
        "routed again once its tenant existed"
    );

    // One that does not is dead-lettered with its event after the bound...
    let missing = Uuid::now_v7();
    let lost = produce_event(&env, missing).await;
    let unknown = Filter {
        class: Some("unknown_tenant".into()),
        ..Default::default()
    };
    assert!(
        eventually(Duration::from_secs(30), || async {
            dead_letters::count(&env.pool, &unknown).await.unwrap() == 1
        })
        .await,
        "dead-lettered after the bound"
    );
    let letter = dead_letters::page_for_replay(&env.pool, &unknown, 0, 10)
        .await
        .unwrap();
    assert!(
        letter[0].letter.reason.contains("routed again for"),
        "{}",
        letter[0].letter.reason
    );
    assert!(
        letter[0].letter.dead_at - letter[0].letter.first_attempt_at.unwrap()
            >= chrono::Duration::milliseconds(3_500),
        "routed again for the whole bound"
    );
    // ...and replays to the tenant's endpoints once it exists, with the same webhook-id.
    tenant_with_id(&env, missing).await;
    env.endpoint(missing, &receiver, &[]).await.unwrap();
    let report = Replayer::new(env.pool.clone(), &env.kafka, &cfg.retry)
        .unwrap()
        .replay(&unknown, &ReplayOptions::default())
        .await
        .unwrap();
    assert_eq!(report.replayed.len(), 1, "{report:?}");
    assert!(
        eventually(Duration::from_secs(20), || async {
            receiver
                .received()
                .iter()
                .any(|r| r.webhook_id == lost && r.verified)
        })
        .await,
        "the replayed dead letter is delivered"
    );
    assert!(
        common::metric(
            &registry,
            "hookstream_dispatcher_events_total",
            &[("result", "unknown_tenant_rerouted")]
        ) >= 2.0
    );
    token.cancel();
}
