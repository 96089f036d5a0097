//! The outbox-relay as a separate process against real PostgreSQL and Kafka: several relays
//! share the shards and keep per-aggregate order; SIGKILL mid-batch loses nothing; the
//! producer API refuses bad input with typed errors.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use hookstream_producer::{EnqueueError, Event};
use hookstream_proto::{EventEnvelope, Message as _};
use hookstream_store::outbox::NewEvent;
use hookstream_store::sqlx;
use hookstream_testkit::process::{service_env, ServiceProcess};
use hookstream_testkit::{counts, eventually, TestEnv};
use rand::Rng;
use serde_json::json;
use uuid::Uuid;

const RELAY: &str = env!("CARGO_BIN_EXE_outbox-relay");
/// The relay's shard advisory-lock namespace ("HkSt").
const SHARD_LOCK_NAMESPACE: i32 = 0x486b_5374;

fn spawn_relay(env: &TestEnv, name: &str) -> ServiceProcess {
    let mut vars = service_env(env);
    vars.push(("HOOKSTREAM_RELAY__POLL_INTERVAL_MS".into(), "200".into()));
    vars.push(("HOOKSTREAM_RELAY__REBALANCE_INTERVAL_MS".into(), "500".into()));
    ServiceProcess::spawn(Path::new(RELAY), &vars, &env.log_path(name)).expect("start outbox-relay")
}

/// Publishes `total` events over `aggregates` aggregates in transactions of `per_tx`, and
/// returns, per aggregate, the event ids in commit order.
async fn publish_load(
    env: &TestEnv,
    tenant: Uuid,
    total: usize,
    aggregates: usize,
    per_tx: usize,
    pause: Duration,
) -> HashMap<String, Vec<String>> {
    let mut order: HashMap<String, Vec<String>> = HashMap::new();
    let mut n = 0;
    while n < total {
        let mut tx = env.pool.begin().await.unwrap();
        let mut batch = Vec::new();
        for _ in 0..per_tx.min(total - n) {
            let agg = format!("agg-{}", n % aggregates);
            let e = Event::new(tenant, "order.updated", json!({ "n": n })).aggregate("order", agg.clone());
            batch.push((
                agg,
                hookstream_producer::enqueue(&mut tx, &e)
                    .await
                    .unwrap()
                    .to_string(),
            ));
            n += 1;
        }
        tx.commit().await.unwrap();
        for (agg, id) in batch {
            order.entry(agg).or_default().push(id);
        }
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    order
}

/// Reads the events topic and checks: every event present, per-aggregate first occurrences in
/// commit order. Returns the number of duplicate records.
async fn check_kafka(env: &TestEnv, tenant: Uuid, expected: &HashMap<String, Vec<String>>) -> usize {
    let total: usize = expected.values().map(Vec::len).sum();
    let records = env.read_all(&env.kafka.topics.events).await.unwrap();
    let mut seen: HashMap<String, Vec<String>> = HashMap::new();
    for r in &records {
        let e = EventEnvelope::decode(r.payload.as_slice()).expect("envelope decodes");
        assert_eq!(
            r.key,
            format!("{tenant}/{}", e.aggregate_id),
            "keyed by tenant/aggregate"
        );
        seen.entry(e.aggregate_id).or_default().push(e.event_id);
    }
    let ids = counts(seen.values().flatten().cloned());
    assert_eq!(
        ids.len(),
        total,
        "every committed event reached Kafka ({} records read)",
        records.len()
    );
    for (agg, want) in expected {
        let mut first: Vec<String> = Vec::new();
        for id in &seen[agg] {
            if !first.contains(id) {
                first.push(id.clone());
            }
        }
        assert_eq!(&first, want, "aggregate {agg}: Kafka order equals commit order");
    }
    records.len() - total
}

async fn shard_owners(env: &TestEnv) -> Vec<(i32, i64)> {
    sqlx::query_as(
        "SELECT pid, count(*) FROM pg_locks
          WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::integer::oid
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          GROUP BY pid ORDER BY pid",
    )
    .bind(SHARD_LOCK_NAMESPACE)
    .fetch_all(&env.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_refuses_bad_input_with_typed_errors_and_honours_idempotency_keys() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let mut conn = env.pool.acquire().await.unwrap();

    let err = hookstream_producer::enqueue(&mut conn, &Event::new(Uuid::new_v4(), "a.b", json!({}))).await;
    assert!(matches!(err, Err(EnqueueError::UnknownTenant(_))), "{err:?}");
    for bad in ["", "a b", "a..b", ".a", "a.", "ä.b"] {
        let err = hookstream_producer::enqueue(&mut conn, &Event::new(tenant, bad, json!({}))).await;
        assert!(
            matches!(err, Err(EnqueueError::InvalidEventType(_))),
            "{bad:?}: {err:?}"
        );
    }
    let err = hookstream_producer::enqueue(&mut conn, &Event::new(tenant, "a.b", json!([1]))).await;
    assert!(matches!(err, Err(EnqueueError::PayloadNotObject(_))), "{err:?}");

    // The limit is 1 MiB by default and configurable.
    let big = json!({ "blob": "x".repeat(1024 * 1024) });
    let err = hookstream_producer::enqueue(&mut conn, &Event::new(tenant, "a.b", big.clone())).await;
    match err {
        Err(EnqueueError::PayloadTooLarge(msg)) => {
            assert!(msg.contains("exceeds the limit of 1048576 bytes"), "{msg}")
        }
        other => panic!("{other:?}"),
    }
    sqlx::query("UPDATE hookstream.settings SET max_payload_bytes = 2000000")
        .execute(&env.pool)
        .await
        .unwrap();
    hookstream_producer::enqueue(&mut conn, &Event::new(tenant, "a.b", big))
        .await
        .unwrap();

    let keyed = Event::new(tenant, "order.paid", json!({ "o": 1 })).idempotency_key("order-1-paid");
    let first = hookstream_producer::enqueue(&mut conn, &keyed).await.unwrap();
    let again = hookstream_producer::enqueue(&mut conn, &keyed).await.unwrap();
    assert_eq!(first, again, "the same key returns the first event's id");
    let other_tenant = env.tenant("u").await.unwrap();
    let elsewhere = hookstream_producer::enqueue(
        &mut conn,
        &Event {
            tenant_id: other_tenant,
            ..keyed.clone()
        },
    )
    .await
    .unwrap();
    assert_ne!(first, elsewhere, "keys are per tenant");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM hookstream.outbox")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(
        rows, 3,
        "the big payload, the keyed event once, and the other tenant's"
    );

    // A rolled-back enqueue leaves nothing behind, key included.
    let mut tx = env.pool.begin().await.unwrap();
    let rolled = Event::new(tenant, "a.b", json!({})).idempotency_key("k2");
    let id1 = hookstream_producer::enqueue(&mut tx, &rolled).await.unwrap();
    tx.rollback().await.unwrap();
    let id2 = hookstream_producer::enqueue(&mut conn, &rolled).await.unwrap();
    assert_ne!(id1, id2);
    // Event ids are UUIDv7: time-ordered.
    assert_eq!(id2.get_version_num(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_relays_share_shards_keep_per_aggregate_order_and_take_over_a_killed_one() {
    let env = TestEnv::new(6).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let mut a = spawn_relay(&env, "relay-a");
    let b = spawn_relay(&env, "relay-b");

    let producer = publish_load(&env, tenant, 4_000, 100, 100, Duration::from_millis(20)).await;
    // A third relay joins mid-stream; then one of the first two dies.
    let c = spawn_relay(&env, "relay-c");
    assert!(
        eventually(Duration::from_secs(15), || async {
            let o = shard_owners(&env).await;
            o.len() == 3 && o.iter().map(|(_, n)| n).sum::<i64>() == 16
        })
        .await,
        "three relays share all 16 shards: {:?}",
        shard_owners(&env).await
    );
    let owners = shard_owners(&env).await;
    assert_eq!(
        owners.iter().map(|(_, n)| n).sum::<i64>(),
        16,
        "every shard owned once: {owners:?}"
    );
    assert!(
        owners.iter().all(|(_, n)| *n <= 6),
        "fair share is at most ceil(16/3): {owners:?}"
    );
    let more = publish_load(&env, tenant, 6_000, 100, 100, Duration::from_millis(5)).await;
    assert!(a.is_running());
    a.kill9().await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            let o = shard_owners(&env).await;
            o.len() == 2 && o.iter().map(|(_, n)| n).sum::<i64>() == 16
        })
        .await,
        "the survivors took over every shard within 10 s: {:?}",
        shard_owners(&env).await
    );
    assert!(
        eventually(Duration::from_secs(60), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "the outbox drained"
    );
    let mut expected = producer;
    for (agg, ids) in more {
        expected.entry(agg).or_default().extend(ids);
    }
    let duplicates = check_kafka(&env, tenant, &expected).await;
    println!("10,000 events, 3 relays, one SIGKILLed: {duplicates} duplicate records");
    assert_eq!(b.terminate().await, Some(0), "graceful exit on SIGTERM");
    assert_eq!(c.terminate().await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_batch_twenty_times_loses_nothing() {
    let env = TestEnv::new(3).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let load = publish_load(&env, tenant, 8_000, 50, 50, Duration::from_millis(10));
    let kills = async {
        let mut killed = 0;
        for i in 0..20 {
            let relay = spawn_relay(&env, &format!("relay-{i}"));
            let wait = rand::thread_rng().gen_range(150..700);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            relay.kill9().await;
            killed += 1;
        }
        killed
    };
    let (expected, killed) = tokio::join!(load, kills);
    assert_eq!(killed, 20);
    let last = spawn_relay(&env, "relay-final");
    assert!(
        eventually(Duration::from_secs(60), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "the outbox drained after 20 SIGKILLs"
    );
    let duplicates = check_kafka(&env, tenant, &expected).await;
    println!("8,000 events, relay SIGKILLed 20 times: {duplicates} duplicate records");
    assert_eq!(last.terminate().await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_too_large_for_the_topic_is_quarantined_and_the_rows_behind_it_flow() {
    let env = TestEnv::new(1).await.unwrap();
    let ids = publish_big_then_five(&env, 5_000).await;
    let mut vars = service_env(&env);
    vars.push(("HOOKSTREAM_RELAY__MAX_RECORD_BYTES".into(), "2000".into()));
    let relay = ServiceProcess::spawn(Path::new(RELAY), &vars, &env.log_path("relay")).unwrap();
    first_quarantined_rest_shipped(&env, &ids, "exceeds the 2000-byte limit").await;
    assert_eq!(relay.terminate().await, Some(0));
}

/// A row with a `blob` of `blob_bytes` (random hex: the relay compresses payloads before
/// sealing them, and a run of one letter would shrink far under any limit), then five small
/// ones, all of one aggregate; their ids.
async fn publish_big_then_five(env: &TestEnv, blob_bytes: usize) -> Vec<Uuid> {
    let tenant = env.tenant("t").await.unwrap();
    let blob: String = std::iter::repeat_with(|| Uuid::new_v4().simple().to_string())
        .flat_map(|hex| hex.chars().collect::<Vec<_>>())
        .take(blob_bytes)
        .collect();
    let mut events = vec![Event::new(tenant, "doc.saved", json!({ "blob": blob })).aggregate("doc", "d1")];
    for i in 0..5 {
        events.push(Event::new(tenant, "doc.saved", json!({ "i": i })).aggregate("doc", "d1"));
    }
    env.publish(&events).await.unwrap()
}

/// The outbox drains; the first of `ids` is quarantined with a reason containing `reason`,
/// and the rows behind it are in the events topic, in order.
async fn first_quarantined_rest_shipped(env: &TestEnv, ids: &[Uuid], reason: &str) {
    assert!(
        eventually(Duration::from_secs(30), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "the outbox drained past the row"
    );
    let quarantined = hookstream_store::outbox::quarantined(&env.pool).await.unwrap();
    assert_eq!(quarantined.len(), 1);
    assert_eq!(quarantined[0].event_id, ids[0]);
    assert!(
        quarantined[0].reason.contains(reason),
        "{}",
        quarantined[0].reason
    );
    let shipped: Vec<String> = env
        .read_all(&env.kafka.topics.events)
        .await
        .unwrap()
        .iter()
        .map(|r| EventEnvelope::decode(r.payload.as_slice()).unwrap().event_id)
        .collect();
    let behind: Vec<String> = ids[1..].iter().map(Uuid::to_string).collect();
    assert_eq!(shipped, behind, "the rows behind it were shipped, in order");
}

/// A record the producer itself refuses is quarantined as well; failing the batch would claim
/// the same row first again, for good. Configuration no longer lets `kafka.client` lower
/// `message.max.bytes` under what hand-offs carry (so under `relay.max_record_bytes`); this
/// config is built in code, past that check, to keep the defence tested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_the_producer_refuses_is_quarantined_and_the_rows_behind_it_flow() {
    let env = TestEnv::new(1).await.unwrap();
    let ids = publish_big_then_five(&env, 20_000).await;
    let mut kafka = env.kafka.clone();
    kafka.client.insert("message.max.bytes".into(), "10000".into());
    let cfg = outbox_relay::Config {
        database: env.database.clone(),
        secrets: env.secrets.clone(),
        kafka,
        ..Default::default()
    };
    let token = tokio_util::sync::CancellationToken::new();
    let stop = token.clone();
    let relay = tokio::spawn(async move {
        outbox_relay::run(cfg, &prometheus::Registry::new(), Default::default(), stop).await
    });
    first_quarantined_rest_shipped(&env, &ids, "larger than the producer sends (message.max.bytes)").await;
    token.cancel();
    relay.await.unwrap().unwrap();
}

/// Without its events topic (auto-creation off) every batch used to wait out the produce
/// timeout and be claimed again, for ever, with the relay healthy. It is refused at start.
#[tokio::test]
async fn a_missing_events_topic_is_refused_at_start_naming_it() {
    let env = TestEnv::new(1).await.unwrap();
    let absent = format!("{}-absent", env.kafka.topics.events);
    let mut vars = service_env(&env);
    vars.push(("HOOKSTREAM_KAFKA__TOPICS__EVENTS".into(), absent.clone()));
    let log = env.log_path("absent-events");
    let mut p = ServiceProcess::spawn(Path::new(RELAY), &vars, &log).unwrap();
    let code = tokio::time::timeout(Duration::from_secs(30), p.wait())
        .await
        .expect("exits instead of retrying for ever");
    let output = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, Some(2), "{output}");
    assert!(
        output.contains(&format!("topic {absent} does not exist")),
        "{output}"
    );
}

/// The events topic deleted while the relay runs: before, every batch timed out and was
/// claimed again for ever with the relay healthy. Now the relay asks the broker, and once the
/// topic has been gone for `lost::CONFIRM_FOR` it exits naming it; the rows wait in the
/// outbox and are shipped when the topic is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_topic_deleted_at_run_time_stops_the_relay_naming_it_and_loses_nothing() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let mut relay = spawn_relay(&env, "relay");
    let events = env.kafka.topics.events.clone();
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 0 }))])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "the relay ships"
    );
    env.delete_topic(&events).await.unwrap();
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let code = tokio::time::timeout(Duration::from_secs(150), relay.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "still running: {}",
                std::fs::read_to_string(env.log_path("relay")).unwrap()
            )
        });
    let output = std::fs::read_to_string(env.log_path("relay")).unwrap();
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains(&format!("topic {events} does not exist")),
        "names the topic: {output}"
    );
    eprintln!("exited {:?} after the row was committed", started.elapsed());
    assert_eq!(env.outbox_len().await.unwrap(), 1, "the row waits in the outbox");

    env.create_main_topics().await.unwrap();
    let _back = spawn_relay(&env, "back");
    assert!(
        eventually(Duration::from_secs(60), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "shipped once the topic is back"
    );
    let records = env.read_all(&events).await.unwrap();
    assert_eq!(records.len(), 1, "the recreated topic holds the waiting event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_past_their_window_are_pruned_in_batches() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    // 2,500 keys from eight days ago (more than two pruning batches), and three fresh ones.
    sqlx::query(
        "INSERT INTO hookstream.idempotency_keys (tenant_id, key, event_id, created_at)
         SELECT $1, 'old-' || g, gen_random_uuid(), now() - interval '8 days' FROM generate_series(1, 2500) g",
    )
    .bind(tenant)
    .execute(&env.pool)
    .await
    .unwrap();
    let mut tx = env.pool.begin().await.unwrap();
    for n in 0..3 {
        let e = Event::new(tenant, "order.paid", json!({ "n": n })).idempotency_key(format!("fresh-{n}"));
        hookstream_producer::enqueue(&mut tx, &e).await.unwrap();
    }
    tx.commit().await.unwrap();
    let keys = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM hookstream.idempotency_keys")
            .fetch_one(&env.pool)
            .await
            .unwrap()
    };
    assert_eq!(keys().await, 2_503);

    let cfg = outbox_relay::Config {
        database: env.database.clone(),
        secrets: env.secrets.clone(),
        kafka: env.kafka.clone(),
        relay: outbox_relay::RelaySettings {
            prune_interval_ms: 200,
            ..Default::default()
        },
        ..Default::default()
    };
    let token = tokio_util::sync::CancellationToken::new();
    let stop = token.clone();
    let relay = tokio::spawn(async move {
        outbox_relay::run(cfg, &prometheus::Registry::new(), Default::default(), stop).await
    });
    assert!(
        eventually(Duration::from_secs(20), || async { keys().await == 3 }).await,
        "the old keys are gone, the fresh ones kept ({} left)",
        keys().await
    );
    // Past its window a key no longer de-duplicates: the same key makes a new event.
    let mut tx = env.pool.begin().await.unwrap();
    let again = Event::new(tenant, "order.paid", json!({})).idempotency_key("old-1");
    hookstream_producer::enqueue(&mut tx, &again).await.unwrap();
    let fresh = Event::new(tenant, "order.paid", json!({})).idempotency_key("fresh-0");
    let first: Uuid =
        sqlx::query_scalar("SELECT event_id FROM hookstream.idempotency_keys WHERE key = 'fresh-0'")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    assert_eq!(
        hookstream_producer::enqueue(&mut tx, &fresh).await.unwrap(),
        first,
        "a fresh key still de-duplicates"
    );
    tx.commit().await.unwrap();
    token.cancel();
    relay.await.unwrap().unwrap();
}

/// A message expunged (Svix's `DELETE …/msg/{id}/content`) between its commit and the relay
/// stays expunged: the relay still ships the record, but does not write its sealed payload back
/// over the erasure (it did: the API then showed the content again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_expunged_before_the_relay_ships_it_stays_expunged() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let ids = env
        .publish(&[
            NewEvent::from_json_text(tenant, "doc.saved", r#"{"note":"erase me"}"#),
            NewEvent::from_json_text(tenant, "doc.saved", r#"{"note":"keep me"}"#),
        ])
        .await
        .unwrap();
    hookstream_store::messages::expunge(&env.pool, tenant, ids[0])
        .await
        .unwrap();

    let relay = spawn_relay(&env, "relay");
    assert!(
        eventually(Duration::from_secs(30), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "the outbox drained"
    );
    let shipped = env.read_all(&env.kafka.topics.events).await.unwrap().len();
    assert_eq!(shipped, 2, "both records shipped");
    let copies: Vec<(Uuid, Option<String>, bool, bool)> = sqlx::query_as(
        "SELECT event_id, body, body_sealed IS NOT NULL, erased_at IS NOT NULL
           FROM hookstream.messages WHERE tenant_id = $1 ORDER BY event_id",
    )
    .bind(tenant)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        copies,
        vec![
            (ids[0], Some("{}".to_string()), false, true),
            (ids[1], None, true, false),
        ],
        "the expunged copy keeps `{{}}`; the other is replaced by its sealed payload"
    );
    assert_eq!(relay.terminate().await, Some(0));
}
