//! Dead letters in PostgreSQL and replay, on real Kafka and PostgreSQL with loopback
//! receivers: a dead letter is stored with its reason and replays with the same webhook-id;
//! poison on the DLQ topic is stored and the partition moves on; replays keep to their rate;
//! messages waiting in a retry tier do not slow the main path.
//!
//! Longer than 800 lines: every way into and out of the DLQ (storage, poison, replays, erasure)
//! on the same pipeline helpers; each case stands alone.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use hookstream_kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use hookstream_proto::{DeadLetter, DeliveryTask, EventEnvelope, Message as _};
use hookstream_replay::{ReplayOptions, Replayer};
use hookstream_store::dead_letters::{self, Filter, NewDeadLetter, Position};
use hookstream_store::outbox::NewEvent;
use hookstream_store::payload_keys;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use prometheus::Registry;
use serde_json::json;
use uuid::Uuid;

use crate::common;
use common::{retrying_config as config, start_observed_pipeline as start};

fn producer(env: &TestEnv) -> FutureProducer {
    hookstream_kafka::producer_config(&env.kafka, Duration::from_secs(10))
        .create()
        .unwrap()
}

async fn produce(p: &FutureProducer, topic: &str, key: &str, payload: &[u8]) {
    p.send(
        FutureRecord::to(topic).key(key).payload(payload),
        Duration::from_secs(10),
    )
    .await
    .expect("acknowledged");
}

fn event(tenant: Uuid, n: usize) -> EventEnvelope {
    EventEnvelope {
        event_id: Uuid::now_v7().to_string(),
        tenant_id: tenant.to_string(),
        event_type: "order.created".into(),
        payload: Bytes::from(json!({ "n": n }).to_string()),
        created_at_ms: chrono::Utc::now().timestamp_millis(),
        ..Default::default()
    }
}

async fn rows(env: &TestEnv, filter: &Filter) -> Vec<dead_letters::DeadLetter> {
    dead_letters::list(&env.pool, filter, 1_000).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_stored_with_its_reason_and_a_replay_delivers_it_with_the_same_webhook_id() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Status(500)).await;
    let ep = env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let cfg = config(&env, vec![1_000, 2_000]);
    let registry = Registry::new();
    let token = start(&env, cfg.clone(), registry.clone());
    let ids = env
        .publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();

    let by_endpoint = Filter {
        endpoint: Some(ep),
        ..Default::default()
    };
    assert!(
        eventually(Duration::from_secs(40), || async {
            rows(&env, &by_endpoint).await.len() == 1
        })
        .await,
        "the dead letter reached PostgreSQL"
    );
    let row = rows(&env, &by_endpoint).await.remove(0);
    assert_eq!(row.reason, "gave up after 3 attempts: HTTP 500");
    assert_eq!(row.error_class, "http_5xx");
    assert_eq!(row.last_status, 500);
    assert_eq!(row.attempts, 3);
    assert_eq!(row.tenant_id, Some(tenant));
    assert_eq!(row.event_id, Some(ids[0]));
    assert_eq!(row.event_type, "order.created");
    assert_eq!(
        row.origin_topic.as_deref(),
        Some(env.kafka.topics.events.as_str())
    );
    assert_eq!(row.source_topic, env.kafka.topics.dlq);
    let handled = row
        .handled_topic
        .as_deref()
        .expect("the record it was decided on");
    assert!(
        cfg.retry.tiers().iter().any(|t| t.topic == handled),
        "the last attempt was a retry: its tier's record ({handled})"
    );
    let first = row.first_attempt_at.expect("first attempt time");
    assert!(
        (row.dead_at - first).num_milliseconds() >= 3_000,
        "the schedule (1 s + 2 s) was waited out"
    );
    assert_eq!((row.replay_count, row.replayed_at), (0, None));
    let detail = dead_letters::get(&env.pool, row.id).await.unwrap();
    let stored = EventEnvelope::decode(detail.event.as_deref().unwrap()).unwrap();
    assert_eq!(stored.event_id, ids[0].to_string());
    // Queryable by tenant, class and time range too; not by another class or range.
    let pool = &env.pool;
    let matches = |f: Filter| async move { dead_letters::list(pool, &f, 10).await.unwrap().len() };
    let now = chrono::Utc::now();
    assert_eq!(
        matches(Filter {
            tenant: Some(tenant),
            ..Default::default()
        })
        .await,
        1
    );
    assert_eq!(
        matches(Filter {
            class: Some("http_5xx".into()),
            ..Default::default()
        })
        .await,
        1
    );
    assert_eq!(
        matches(Filter {
            class: Some("timeout".into()),
            ..Default::default()
        })
        .await,
        0
    );
    let recent = Filter {
        since: Some(now - chrono::Duration::minutes(5)),
        until: Some(now + chrono::Duration::seconds(1)),
        ..Default::default()
    };
    assert_eq!(matches(recent).await, 1);
    assert_eq!(
        matches(Filter {
            until: Some(first),
            ..Default::default()
        })
        .await,
        0
    );
    assert_eq!(
        common::metric(&registry, "hookstream_dlq_stored_total", &[("result", "stored")]),
        1.0
    );
    assert_eq!(receiver.count(), 3);

    // The endpoint recovers; replay the dead letter by id.
    receiver.set_behaviour(Behaviour::Ok);
    let replayer = Replayer::new(env.pool.clone(), &env.kafka, &cfg.retry).unwrap();
    let report = replayer
        .replay(
            &Filter {
                ids: Some(vec![row.id]),
                ..Default::default()
            },
            &ReplayOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(report.replayed, vec![row.id]);
    assert!(report.skipped.is_empty() && report.failed.is_empty());
    assert!(
        eventually(Duration::from_secs(20), || async { receiver.count() >= 4 }).await,
        "the replay was delivered"
    );
    let replayed = receiver.received().remove(3);
    assert_eq!(replayed.webhook_id, ids[0].to_string(), "the same webhook-id");
    assert!(replayed.verified, "signed like any delivery");
    assert_eq!(&replayed.body[..], br#"{"n":1}"#, "the payload, opened");
    assert!(!stored.payload_key.is_empty(), "stored sealed");
    assert_ne!(&stored.payload[..], br#"{"n":1}"#, "stored sealed");
    let after = dead_letters::get(&env.pool, row.id).await.unwrap().letter;
    assert_eq!(after.replay_count, 1);
    assert!(after.replayed_at.is_some());
    assert!(
        eventually(Duration::from_secs(5), || async {
            common::metric(
                &registry,
                "hookstream_dlq_replayed_total",
                &[("kind", "dead_letter")],
            ) == 1.0
        })
        .await
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.count(), 4, "delivered once");
    assert_eq!(rows(&env, &by_endpoint).await.len(), 1, "not dead-lettered again");
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_on_the_dlq_topic_is_stored_as_decode_with_its_bytes_and_the_partition_moves_on() {
    let env = TestEnv::new(1).await.unwrap();
    let registry = Registry::new();
    let token = start(&env, config(&env, vec![1_000]), registry.clone());
    let p = producer(&env);
    produce(&p, &env.kafka.topics.dlq, "", b"\x00\x01garbage").await;
    let tenant = Uuid::now_v7();
    let endpoint = Uuid::now_v7();
    let letter = DeadLetter {
        event: Some(event(tenant, 1)),
        endpoint_id: endpoint.to_string(),
        tenant_id: tenant.to_string(),
        reason: "permanent failure: HTTP 404".into(),
        error_class: "http_4xx".into(),
        last_status: 404,
        attempts: 1,
        dead_at_ms: chrono::Utc::now().timestamp_millis(),
        last_response: Bytes::from_static(b"no such hook"),
        ..Default::default()
    };
    produce(
        &p,
        &env.kafka.topics.dlq,
        &endpoint.to_string(),
        &letter.encode_to_vec(),
    )
    .await;

    assert!(
        eventually(Duration::from_secs(30), || async {
            rows(&env, &Filter::default()).await.len() == 2
        })
        .await,
        "both records stored"
    );
    let mut all = rows(&env, &Filter::default()).await;
    all.sort_by_key(|r| r.source_offset);
    let poison = dead_letters::get(&env.pool, all[0].id).await.unwrap();
    assert_eq!(poison.letter.error_class, "decode");
    assert!(
        poison.letter.reason.starts_with("undecodable dead-letter record"),
        "{}",
        poison.letter.reason
    );
    assert_eq!(poison.raw.as_deref(), Some(&b"\x00\x01garbage"[..]));
    assert_eq!((poison.letter.tenant_id, poison.letter.endpoint_id), (None, None));
    let good = dead_letters::get(&env.pool, all[1].id).await.unwrap();
    assert_eq!(good.letter.error_class, "http_4xx");
    assert_eq!(good.letter.endpoint_id, Some(endpoint));
    assert_eq!(good.letter.last_status, 404);
    assert_eq!(good.last_response.as_deref(), Some(&b"no such hook"[..]));

    // The sink committed past both records.
    assert!(
        eventually(Duration::from_secs(10), || async {
            sink_committed(&env).await == Some(2)
        })
        .await,
        "the sink's offset moved past the poison: {:?}",
        sink_committed(&env).await
    );
    assert_eq!(
        common::metric(&registry, "hookstream_dlq_stored_total", &[("result", "stored")]),
        2.0
    );
    token.cancel();
}

/// A poison dead letter (class `decode`) stored from `offset` of topic `dlq`, dead at `dead_at`.
fn poison_row(offset: i64, dead_at: chrono::DateTime<chrono::Utc>) -> NewDeadLetter {
    NewDeadLetter {
        tenant_id: None,
        endpoint_id: None,
        event_id: None,
        event_type: String::new(),
        reason: "undecodable".into(),
        error_class: "decode".into(),
        last_status: 0,
        attempts: 0,
        first_attempt_at: None,
        dead_at,
        source: Position {
            topic: "dlq".into(),
            partition: 0,
            offset,
        },
        origin: None,
        handled: None,
        event: None,
        raw: Some(vec![0, 1, 2]),
        last_response: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_past_their_retention_are_deleted_and_newer_ones_kept() {
    let env = TestEnv::new(1).await.unwrap();
    let now = chrono::Utc::now();
    for offset in 0..5 {
        let old = poison_row(offset, now - chrono::Duration::days(3));
        dead_letters::insert(&env.pool, &old).await.unwrap();
    }
    for offset in 5..8 {
        let recent = poison_row(offset, now - chrono::Duration::hours(47));
        dead_letters::insert(&env.pool, &recent).await.unwrap();
    }
    let mut cfg = config(&env, vec![1_000]);
    cfg.dlq.retention_days = 2;
    cfg.dlq.prune_interval_ms = 1_000;
    let registry = Registry::new();
    let token = start(&env, cfg, registry.clone());
    assert!(
        eventually(Duration::from_secs(20), || async {
            rows(&env, &Filter::default()).await.len() == 3
        })
        .await,
        "the five dead letters older than two days are deleted"
    );
    // Another prune pass finds nothing more to delete.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let kept = rows(&env, &Filter::default()).await;
    let mut offsets: Vec<i64> = kept.iter().map(|r| r.source_offset).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, vec![5, 6, 7], "the recent ones stay");
    assert_eq!(common::metric(&registry, "hookstream_dlq_pruned_total", &[]), 5.0);
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storing_the_same_dlq_record_twice_writes_one_row() {
    let env = TestEnv::new(1).await.unwrap();
    let row = NewDeadLetter {
        reason: "r\0with a NUL".into(),
        ..poison_row(42, chrono::Utc::now())
    };
    let first = dead_letters::insert(&env.pool, &row).await.unwrap();
    assert!(first.is_some());
    assert_eq!(dead_letters::insert(&env.pool, &row).await.unwrap(), None);
    let all = rows(&env, &Filter::default()).await;
    assert_eq!(all.len(), 1);
    assert_eq!(
        all[0].reason, "rwith a NUL",
        "NUL cannot be stored in text; it is dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_handled_again_after_a_crash_is_dead_lettered_once() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Status(404)).await;
    let ep = env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let cfg = config(&env, vec![1_000]);
    let relay = tokio_util::sync::CancellationToken::new();
    common::start_relay(&env, &relay);
    let run_dispatcher = || {
        let (cfg, token) = (cfg.clone(), tokio_util::sync::CancellationToken::new());
        let t = token.clone();
        let handle =
            tokio::spawn(async move { dispatcher::run(cfg, &Registry::new(), Default::default(), t).await });
        (token, handle)
    };
    let ids = env
        .publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();
    let by_endpoint = Filter {
        endpoint: Some(ep),
        ..Default::default()
    };
    let (token, handle) = run_dispatcher();
    assert!(
        eventually(Duration::from_secs(30), || async {
            rows(&env, &by_endpoint).await.len() == 1
        })
        .await,
        "the 404 was dead-lettered and stored"
    );
    assert!(env.committed_to_end(Duration::from_secs(20)).await);
    token.cancel();
    handle.await.unwrap().expect("the dispatcher stopped cleanly");

    // As if the dispatcher had been killed after its dead letter was acknowledged and before
    // its offset was stored: the next one handles the event's record again.
    env.rewind_group(&env.kafka.group_id, &env.kafka.topics.events)
        .await
        .unwrap();
    let (token, handle) = run_dispatcher();
    assert!(
        eventually(Duration::from_secs(30), || async { receiver.count() == 2 }).await,
        "the record was handled again: a second attempt"
    );
    let dlq = &env.kafka.topics.dlq;
    assert!(
        eventually(Duration::from_secs(30), || async {
            env.end_offsets(dlq).await.unwrap().iter().sum::<i64>() == 2
        })
        .await,
        "and a second dead letter produced"
    );
    let records = env.read_all(dlq).await.unwrap();
    let letters: Vec<DeadLetter> = records
        .iter()
        .map(|r| DeadLetter::decode(r.payload.as_slice()).unwrap())
        .collect();
    assert_eq!(letters.len(), 2);
    assert_eq!(
        letters[0].handled, letters[1].handled,
        "both name the record they were decided on"
    );
    let handled = letters[0].handled.clone().expect("a handled record");
    assert_eq!(
        handled.topic, env.kafka.topics.events,
        "on the first path, the event's own record"
    );
    assert!(
        eventually(Duration::from_secs(30), || async {
            env.group_offsets(&env.dlq_sink_group(), dlq)
                .await
                .unwrap()
                .iter()
                .map(|o| (*o).max(0))
                .sum::<i64>()
                == 2
        })
        .await,
        "the sink went past both"
    );
    let stored = rows(&env, &by_endpoint).await;
    assert_eq!(stored.len(), 1, "one decision, one row: {stored:?}");
    assert_eq!(stored[0].event_id, Some(ids[0]));
    assert_eq!(
        (stored[0].handled_topic.as_deref(), stored[0].handled_offset),
        (Some(handled.topic.as_str()), Some(handled.offset))
    );
    token.cancel();
    handle.await.unwrap().expect("the dispatcher stopped cleanly");
    relay.cancel();
}

/// Replays 30 dead letters at 10/s and checks the receiver's arrival times. With
/// `dispatcher_late`, the dispatcher starts only after the whole replay was produced, so the
/// retry role takes every task up overdue at once: the pacing must then come from the
/// retry role itself, not from the tasks' due times.
async fn replay_at_rate(dispatcher_late: bool) {
    const N: usize = 30;
    const RATE: f64 = 10.0;
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    let ep = env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let cfg = config(&env, vec![1_000]);
    let mut want = HashSet::new();
    for n in 0..N {
        let e = event(tenant, n);
        want.insert(e.event_id.clone());
        let row = NewDeadLetter {
            tenant_id: Some(tenant),
            endpoint_id: Some(ep),
            event_id: e.event_id.parse().ok(),
            event_type: e.event_type.clone(),
            reason: "gave up after 8 attempts: HTTP 503".into(),
            error_class: "http_5xx".into(),
            last_status: 503,
            attempts: 8,
            first_attempt_at: None,
            dead_at: chrono::Utc::now(),
            source: Position {
                topic: env.kafka.topics.dlq.clone(),
                partition: 0,
                offset: n as i64,
            },
            origin: None,
            handled: None,
            event: Some(e.encode_to_vec()),
            raw: None,
            last_response: None,
        };
        dead_letters::insert(&env.pool, &row).await.unwrap();
    }
    hookstream_kafka::ensure_topics(
        &env.kafka,
        &hookstream_kafka::topics::tier_specs(&env.kafka, &cfg.retry),
    )
    .await
    .unwrap();
    let mut token = None;
    if !dispatcher_late {
        token = Some(start(&env, cfg.clone(), Registry::new()));
        tokio::time::sleep(Duration::from_secs(3)).await; // let the retry role join its group
    }
    let replayer = Replayer::new(env.pool.clone(), &env.kafka, &cfg.retry).unwrap();
    let by_endpoint = Filter {
        endpoint: Some(ep),
        ..Default::default()
    };
    let report = replayer
        .replay(
            &by_endpoint,
            &ReplayOptions {
                rate_per_s: RATE,
                dry_run: false,
            },
        )
        .await
        .unwrap();
    assert_eq!(report.replayed.len(), N);
    let token = token.unwrap_or_else(|| start(&env, cfg.clone(), Registry::new()));
    assert!(
        eventually(Duration::from_secs(40), || async { receiver.count() >= N }).await,
        "every replay delivered"
    );
    let got = receiver.received();
    let ids: HashSet<String> = got.iter().map(|r| r.webhook_id.clone()).collect();
    assert_eq!(ids, want, "each event once, with its own webhook-id");
    // Any k consecutive arrivals span at least (k - 1) / rate, less 100 ms of tolerance.
    let at: Vec<f64> = got
        .iter()
        .map(|r| r.at.duration_since(got[0].at).as_secs_f64())
        .collect();
    for i in 0..N {
        for j in i + 1..N {
            let span = at[j] - at[i];
            let floor = (j - i) as f64 / RATE - 0.1;
            assert!(
                span >= floor,
                "arrivals {i}..{j} took {span:.3} s, faster than {RATE}/s allows ({floor:.3} s); arrivals {at:.3?}"
            );
        }
    }
    let total = at[N - 1];
    assert!(
        total < (N - 1) as f64 / RATE + 5.0,
        "not much slower either: {total:.2} s"
    );
    println!("{N} replays at {RATE}/s arrived over {total:.2} s: {at:.2?}");
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_reaches_the_receiver_no_faster_than_its_rate() {
    replay_at_rate(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_taken_up_all_at_once_is_still_paced_by_the_retry_role() {
    replay_at_rate(true).await;
}

/// `n` events to an endpoint answering 400, dead-lettered at once by a running pipeline.
struct Rejected {
    receiver: Receiver,
    cfg: dispatcher::Config,
    token: tokio_util::sync::CancellationToken,
    /// The events published.
    ids: Vec<Uuid>,
    by_endpoint: Filter,
    /// Their dead letters.
    original: HashSet<i64>,
}

async fn rejected_at_once(env: &TestEnv, n: usize) -> Rejected {
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Status(400)).await;
    let ep = env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let cfg = config(env, vec![1_000]);
    let token = start(env, cfg.clone(), Registry::new());
    let ids = env
        .publish(
            &(0..n)
                .map(|i| NewEvent::new(tenant, "order.created", json!({ "n": i })))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    let by_endpoint = Filter {
        endpoint: Some(ep),
        ..Default::default()
    };
    assert!(
        eventually(Duration::from_secs(30), || async {
            rows(env, &by_endpoint).await.len() == n
        })
        .await,
        "dead-lettered at once (400)"
    );
    let original = rows(env, &by_endpoint).await.iter().map(|r| r.id).collect();
    Rejected {
        receiver,
        cfg,
        token,
        ids,
        by_endpoint,
        original,
    }
}

/// A replay reads only the dead letters that existed when it started. Those it sends that
/// fail again become new dead letters matching the same filter; read too, they were sent
/// again, and again, for as long as each round came back before the replay ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_does_not_send_again_the_dead_letters_its_own_sends_make() {
    const N: usize = 4;
    let env = TestEnv::new(1).await.unwrap();
    let Rejected {
        receiver,
        cfg,
        token,
        ids,
        by_endpoint,
        original,
    } = rejected_at_once(&env, N).await;

    // At 1/s the replay lasts about N seconds: long enough for its first sends to fail again
    // and be stored as new dead letters while it still reads.
    let replayer = Replayer::new(env.pool.clone(), &env.kafka, &cfg.retry).unwrap();
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        replayer.replay(
            &by_endpoint,
            &ReplayOptions {
                rate_per_s: 1.0,
                dry_run: false,
            },
        ),
    )
    .await
    .expect("the replay ends")
    .unwrap();
    let replayed: HashSet<i64> = report.replayed.iter().copied().collect();
    assert_eq!(replayed, original, "each original once, none of the new ones");
    assert!(
        eventually(Duration::from_secs(30), || async {
            rows(&env, &by_endpoint).await.len() == 2 * N
        })
        .await,
        "each replay failed again and was dead-lettered again"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        receiver.count(),
        2 * N,
        "each event attempted once and replayed once"
    );
    let events: HashSet<String> = receiver.received().iter().map(|r| r.webhook_id.clone()).collect();
    assert_eq!(events.len(), ids.len());
    token.cancel();
}

/// Two replays of the same dead letters at the same time (a double click on "recover", two
/// operators) used to send each of them twice: nothing claimed the rows. Now each dead letter
/// is sent by one of them, and the other reports it skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replays_at_once_send_each_dead_letter_once() {
    const N: usize = 6;
    let env = TestEnv::new(1).await.unwrap();
    let Rejected {
        receiver,
        cfg,
        token,
        by_endpoint,
        original,
        ..
    } = rejected_at_once(&env, N).await;
    receiver.set_behaviour(Behaviour::Ok);

    let (a, b) = (
        Replayer::new(env.pool.clone(), &env.kafka, &cfg.retry).unwrap(),
        Replayer::new(env.pool.clone(), &env.kafka, &cfg.retry).unwrap(),
    );
    let opts = ReplayOptions {
        rate_per_s: 3.0,
        dry_run: false,
    };
    let (a, b) = tokio::time::timeout(
        Duration::from_secs(60),
        futures::future::join(a.replay(&by_endpoint, &opts), b.replay(&by_endpoint, &opts)),
    )
    .await
    .expect("both replays end");
    let (a, b) = (a.unwrap(), b.unwrap());
    let sent_a: HashSet<i64> = a.replayed.iter().copied().collect();
    let sent_b: HashSet<i64> = b.replayed.iter().copied().collect();
    assert!(sent_a.is_disjoint(&sent_b), "sent by both: {sent_a:?} {sent_b:?}");
    assert_eq!(&sent_a | &sent_b, original, "each sent by one of them");
    for (sent, other) in [(&a, &b), (&b, &a)] {
        let skipped: HashSet<i64> = other
            .skipped
            .iter()
            .filter(|s| s.reason.contains("another replay"))
            .map(|s| s.id)
            .collect();
        let mine: HashSet<i64> = sent.replayed.iter().copied().collect();
        assert_eq!(skipped, mine, "the other reports what this one sent as skipped");
    }
    assert!(
        eventually(Duration::from_secs(30), || async { receiver.successes() == N }).await,
        "each replay delivered"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(receiver.successes(), N, "none delivered twice");
    let claimed: i64 = hookstream_store::sqlx::query_scalar(
        "SELECT count(*) FROM hookstream.dead_letters WHERE replay_claim IS NOT NULL",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(claimed, 0, "claims end with the replays");
    token.cancel();
}

/// A database error part-way through a replay ends it with the error, but what Kafka had
/// acknowledged before is still marked replayed (unmarked, the next replay would send it
/// again), and its claims are released. The error here: claiming the second page (a replay
/// reads 500 dead letters a page) fails, by a trigger on the 501st row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_fails_part_way_marks_what_kafka_acknowledged() {
    const N: usize = 501;
    let env = TestEnv::new(1).await.unwrap();
    let (cfg, ep, ids) = replayable_letters(&env, N).await;
    let last = ids[ids.len() - 1];
    sqlx_exec(
        &env,
        &format!(
            "CREATE FUNCTION hookstream.refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.id = {last} AND NEW.replay_claim IS NOT NULL THEN
                 RAISE EXCEPTION 'claim refused for the test';
               END IF;
               RETURN NEW;
             END $$"
        ),
    )
    .await;
    sqlx_exec(
        &env,
        "CREATE TRIGGER refuse_claim BEFORE UPDATE ON hookstream.dead_letters
           FOR EACH ROW EXECUTE FUNCTION hookstream.refuse_claim()",
    )
    .await;

    let replayer = Replayer::new(env.pool.clone(), &env.kafka, &cfg.retry).unwrap();
    let by_endpoint = Filter {
        endpoint: Some(ep),
        ..Default::default()
    };
    let err = replayer
        .replay(
            &by_endpoint,
            &ReplayOptions {
                rate_per_s: 100_000.0,
                dry_run: false,
            },
        )
        .await
        .expect_err("the second page cannot be claimed");
    assert!(err.to_string().contains("claim refused"), "{err}");
    let (marked, claimed): (i64, i64) = hookstream_store::sqlx::query_as(
        "SELECT count(*) FILTER (WHERE replayed_at IS NOT NULL),
                count(*) FILTER (WHERE replay_claim IS NOT NULL)
           FROM hookstream.dead_letters",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(marked as usize, N - 1, "the first page was sent and is marked");
    assert_eq!(claimed, 0, "claims released");
}

/// `n` dead letters of an endpoint (HTTP 400, each with its event) stored directly, and the
/// tiers a replay sends to; the retrying config, the endpoint and the ids in order.
async fn replayable_letters(env: &TestEnv, n: usize) -> (dispatcher::Config, Uuid, Vec<i64>) {
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    let ep = env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let cfg = config(env, vec![1_000]);
    hookstream_kafka::ensure_topics(
        &env.kafka,
        &hookstream_kafka::topics::tier_specs(&env.kafka, &cfg.retry),
    )
    .await
    .unwrap();
    let now = chrono::Utc::now();
    let letters: Vec<NewDeadLetter> = (0..n as i64)
        .map(|offset| {
            let event_id = Uuid::now_v7();
            NewDeadLetter {
                tenant_id: Some(tenant),
                endpoint_id: Some(ep),
                event_id: Some(event_id),
                event_type: "order.created".into(),
                reason: "HTTP 400".into(),
                error_class: "http_4xx".into(),
                last_status: 400,
                attempts: 1,
                event: Some(
                    EventEnvelope {
                        event_id: event_id.to_string(),
                        tenant_id: tenant.to_string(),
                        event_type: "order.created".into(),
                        payload: Bytes::from_static(br#"{"n":1}"#),
                        ..Default::default()
                    }
                    .encode_to_vec(),
                ),
                raw: None,
                ..poison_row(offset, now)
            }
        })
        .collect();
    dead_letters::insert_many(&env.pool, &letters).await.unwrap();
    let ids: Vec<i64> =
        hookstream_store::sqlx::query_scalar("SELECT id FROM hookstream.dead_letters ORDER BY id")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(ids.len(), n);
    (cfg, ep, ids)
}

/// A replay reads a page, then claims its rows a minute's worth at a time; another replay may
/// send and mark one of them in between (marking ends a claim). It is not taken again; a
/// replay started after the marking (`--include-replayed`, `--id`) may take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_another_replay_sent_after_this_one_started_is_not_claimed() {
    let env = TestEnv::new(1).await.unwrap();
    let id = dead_letters::insert(&env.pool, &poison_row(1, chrono::Utc::now()))
        .await
        .unwrap()
        .unwrap();
    let (_, a_started) = dead_letters::max_id_and_now(&env.pool).await.unwrap();
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let ids = [id];
    let claim = |who: Uuid, started| dead_letters::claim_for_replay(&env.pool, &ids, who, started, 60_000);
    assert_eq!(claim(b, a_started).await.unwrap(), [id], "b claims it");
    assert!(claim(a, a_started).await.unwrap().is_empty(), "held by b");
    dead_letters::mark_replayed(&env.pool, &[id]).await.unwrap();
    assert!(
        claim(a, a_started).await.unwrap().is_empty(),
        "sent by b after a started: not again by a"
    );
    let (_, c_started) = dead_letters::max_id_and_now(&env.pool).await.unwrap();
    assert_eq!(claim(c, c_started).await.unwrap(), [id], "a later replay may");
}

/// At a slow pace a batch of acknowledgements takes long to fill; marking waited for it (or
/// the end), past the claim that keeps other replays off what was sent. What Kafka
/// acknowledged is now marked within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_replay_marks_what_it_sent_within_seconds() {
    let env = TestEnv::new(1).await.unwrap();
    let (cfg, ep, ids) = replayable_letters(&env, 2).await;
    let replayer = Replayer::new(env.pool.clone(), &env.kafka, &cfg.retry).unwrap();
    let by_endpoint = Filter {
        endpoint: Some(ep),
        ..Default::default()
    };
    let replay = tokio::spawn(async move {
        replayer
            .replay(
                &by_endpoint,
                &ReplayOptions {
                    rate_per_s: 1.0 / 15.0,
                    dry_run: false,
                },
            )
            .await
    });
    let marked = |id: i64| {
        let pool = env.pool.clone();
        async move {
            hookstream_store::sqlx::query_scalar::<_, bool>(
                "SELECT replayed_at IS NOT NULL FROM hookstream.dead_letters WHERE id = $1",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert!(
        eventually(Duration::from_secs(11), || marked(ids[0])).await,
        "the first, sent at once, is marked before the second is due (15 s)"
    );
    assert!(!replay.is_finished() && !marked(ids[1]).await);
    let report = tokio::time::timeout(Duration::from_secs(30), replay)
        .await
        .expect("the replay ends")
        .unwrap()
        .unwrap();
    assert_eq!(report.replayed, ids);
}

/// Publishes `n` events one by one through the outbox and returns the median latency from
/// commit to arrival, in ms.
async fn main_path_p50(env: &TestEnv, tenant: Uuid, receiver: &Receiver, n: usize) -> f64 {
    let before = receiver.count();
    let mut published: HashMap<String, Instant> = HashMap::new();
    for i in 0..n {
        let ids = env
            .publish(&[
                NewEvent::new(tenant, "order.created", json!({ "i": i })).aggregate("order", i.to_string())
            ])
            .await
            .unwrap();
        published.insert(ids[0].to_string(), Instant::now());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        eventually(Duration::from_secs(60), || async {
            receiver.count() >= before + n
        })
        .await,
        "all {n} delivered"
    );
    let mut latencies: Vec<f64> = receiver
        .received()
        .iter()
        .filter_map(|r| {
            published
                .get(&r.webhook_id)
                .map(|t| r.at.saturating_duration_since(*t).as_secs_f64() * 1000.0)
        })
        .collect();
    assert_eq!(latencies.len(), n);
    latencies.sort_by(f64::total_cmp);
    latencies[n / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_waiting_retries_do_not_slow_the_main_path() {
    const WAITING: usize = 10_000;
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    let ep = env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let cfg = config(&env, vec![5_000, 3_600_000]);
    let registry = Registry::new();
    let token = start(&env, cfg.clone(), registry.clone());
    main_path_p50(&env, tenant, &receiver, 20).await; // warm-up
    let without = main_path_p50(&env, tenant, &receiver, 200).await;

    // 10,000 retries due in an hour, in the hour tier.
    let tier = cfg.retry.tiers()[1].topic.clone();
    let p = producer(&env);
    let due = chrono::Utc::now().timestamp_millis() + 3_600_000;
    let mut acks = FuturesUnordered::new();
    for n in 0..WAITING {
        let task = DeliveryTask {
            event: Some(event(tenant, n)),
            endpoint_id: ep.to_string(),
            attempt: 1,
            due_at_ms: due,
            ..Default::default()
        }
        .encode_to_vec();
        let key = ep.to_string();
        let p = p.clone();
        let tier = tier.clone();
        acks.push(async move { produce(&p, &tier, &key, &task).await });
        if acks.len() >= 500 {
            acks.next().await;
        }
    }
    while acks.next().await.is_some() {}
    assert!(
        eventually(Duration::from_secs(20), || async {
            common::metric(&registry, "hookstream_retry_consumed_total", &[("tier", "1h")]) >= 1.0
        })
        .await,
        "the retry role holds the waiting retries"
    );
    let with = main_path_p50(&env, tenant, &receiver, 200).await;
    println!("main-path p50: {without:.1} ms without, {with:.1} ms with {WAITING} retries waiting");
    assert!(
        with <= 3.0 * without + 50.0,
        "main-path p50 {with:.1} ms with {WAITING} waiting retries, {without:.1} ms without"
    );
    assert_eq!(
        receiver.count(),
        420,
        "none of the waiting retries was delivered early"
    );
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_waits_out_a_database_failure_and_skips_nothing() {
    let env = TestEnv::new(1).await.unwrap();
    let registry = Registry::new();
    let token = start(&env, config(&env, vec![1_000]), registry.clone());
    // Inserts fail (not a data error: the table is gone) until it is renamed back.
    sqlx_exec(
        &env,
        "ALTER TABLE hookstream.dead_letters RENAME TO dead_letters_away",
    )
    .await;
    let p = producer(&env);
    let tenant = Uuid::now_v7();
    for n in 0..3 {
        let letter = DeadLetter {
            event: Some(event(tenant, n)),
            tenant_id: tenant.to_string(),
            endpoint_id: Uuid::now_v7().to_string(),
            reason: "permanent failure: HTTP 400".into(),
            error_class: "http_4xx".into(),
            last_status: 400,
            attempts: 1,
            ..Default::default()
        };
        produce(&p, &env.kafka.topics.dlq, "", &letter.encode_to_vec()).await;
    }
    assert!(
        eventually(Duration::from_secs(20), || async {
            common::metric(&registry, "hookstream_dlq_store_errors_total", &[]) >= 2.0
        })
        .await,
        "the sink keeps trying"
    );
    tokio::time::sleep(Duration::from_secs(2)).await; // auto-commit would have run
    assert_eq!(
        sink_committed(&env).await,
        None,
        "nothing committed while the rows are not stored"
    );
    sqlx_exec(
        &env,
        "ALTER TABLE hookstream.dead_letters_away RENAME TO dead_letters",
    )
    .await;
    assert!(
        eventually(Duration::from_secs(60), || async {
            rows(&env, &Filter::default()).await.len() == 3
        })
        .await,
        "every record stored once the database is back"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            sink_committed(&env).await == Some(3)
        })
        .await,
        "then committed"
    );
    token.cancel();
}

async fn sqlx_exec(env: &TestEnv, sql: &str) {
    hookstream_store::sqlx::query(sql)
        .execute(&env.pool)
        .await
        .unwrap();
}

/// The DLQ sink's committed offset on partition 0 of the DLQ topic.
async fn sink_committed(env: &TestEnv) -> Option<i64> {
    let offsets = env
        .group_offsets(&env.dlq_sink_group(), &env.kafka.topics.dlq)
        .await
        .ok()?;
    offsets.first().copied().filter(|o| *o >= 0)
}

/// An event of `len` bytes in the events topic whose payload is `{"pad":"<hex>"}`: random hex,
/// which LZ4 cannot shrink, so the broker judges the record by its real size.
fn event_of_len(tenant: Uuid, event_type: &str, len: usize) -> EventEnvelope {
    let mut e = EventEnvelope {
        event_type: event_type.into(),
        ..event(tenant, 0)
    };
    let mut hex = String::new();
    while hex.len() < len {
        hex.push_str(&Uuid::new_v4().simple().to_string());
    }
    // The length prefixes grow with the payload: trim until the record is `len` bytes.
    let mut pad = len;
    loop {
        e.payload = Bytes::from(json!({ "pad": &hex[..pad] }).to_string());
        let over = e.encode_to_vec().len() as i64 - len as i64;
        if over == 0 {
            return e;
        }
        pad = (pad as i64 - over) as usize;
    }
}

/// An events record just under the relay's default limit (1,000,000 bytes) grows on its
/// hand-offs: a retry record adds its fields, a dead letter its reason. librdkafka's default
/// `message.max.bytes` (1,000,000) refused such a retry record locally, and the hand-off
/// retried it every second for good. The producers and the tier and DLQ topics now take
/// `HANDOFF_RECORD_BYTES`: the event waits in its tier, is dead-lettered whole, and could be
/// replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_at_the_relays_size_limit_is_retried_and_dead_lettered_whole() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Status(503)).await;
    let ep = env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let cfg = config(&env, vec![1_000]);
    let registry = Registry::new();
    let token = start(&env, cfg.clone(), registry.clone());
    let big = event_of_len(tenant, "order.created", 999_990);
    let record = big.encode_to_vec();
    assert_eq!(record.len(), 999_990);
    // A producer of its own that takes the record whatever the product's producers allow.
    let p: FutureProducer = hookstream_kafka::producer_config(&env.kafka, Duration::from_secs(10))
        .set("message.max.bytes", "1100000")
        .create()
        .unwrap();
    produce(&p, &env.kafka.topics.events, &big.tenant_id, &record).await;

    let by_endpoint = Filter {
        endpoint: Some(ep),
        ..Default::default()
    };
    assert!(
        eventually(Duration::from_secs(40), || async {
            rows(&env, &by_endpoint).await.len() == 1
        })
        .await,
        "dead-lettered after its retry (records too large: {})",
        common::metric(&registry, "hookstream_dispatcher_records_too_large_total", &[])
    );
    let row = rows(&env, &by_endpoint).await.remove(0);
    assert_eq!(row.reason, "gave up after 2 attempts: HTTP 503");
    assert_eq!(receiver.count(), 2, "attempted, then again from its tier");
    let detail = dead_letters::get(&env.pool, row.id).await.unwrap();
    let stored = EventEnvelope::decode(detail.event.as_deref().unwrap()).unwrap();
    assert_eq!(stored.payload, big.payload, "the whole payload is kept");
    for destination in ["retry", "dlq"] {
        assert_eq!(
            common::metric(
                &registry,
                "hookstream_dispatcher_records_too_large_total",
                &[("destination", destination)]
            ),
            0.0
        );
    }
    token.cancel();
}

/// Topics made elsewhere may take less than Hookstream asks for (here 20,000 bytes). A record
/// such a topic refuses is never retried as it is, which would hold its partition for good: a
/// retry record too large for its tier is dead-lettered (`record_too_large`), a dead letter too
/// large for the DLQ is produced without its payload (and cannot be replayed), and the events
/// after them are delivered and committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_too_large_for_topics_made_elsewhere_are_dead_lettered_without_payload_and_the_partition_moves_on(
) {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let refusing = Receiver::start(Behaviour::Status(400)).await;
    let failing = Receiver::start(Behaviour::Status(503)).await;
    let fine = Receiver::start(Behaviour::Ok).await;
    let ep_refusing = env.endpoint(tenant, &refusing, &["big.permanent"]).await.unwrap();
    let ep_failing = env.endpoint(tenant, &failing, &["big.retry"]).await.unwrap();
    env.endpoint(tenant, &fine, &["small.ok"]).await.unwrap();
    let cfg = config(&env, vec![1_000]);
    let small = |specs: Vec<hookstream_kafka::TopicSpec>| -> Vec<hookstream_kafka::TopicSpec> {
        specs
            .into_iter()
            .map(|mut s| {
                s.configs.retain(|(k, _)| k != "max.message.bytes");
                s.config("max.message.bytes", 20_000)
            })
            .collect()
    };
    hookstream_kafka::ensure_topics(
        &env.kafka,
        &small(hookstream_kafka::topics::tier_specs(&env.kafka, &cfg.retry)),
    )
    .await
    .unwrap();
    let dlq: Vec<_> = small(hookstream_kafka::topics::main_specs(&env.kafka))
        .into_iter()
        .filter(|s| s.name == env.kafka.topics.dlq)
        .collect();
    hookstream_kafka::topics::fix(&env.kafka, &dlq).await.unwrap();

    let registry = Registry::new();
    let token = start(&env, cfg.clone(), registry.clone());
    let pad = |n: usize| -> String {
        (0..n / 32 + 1)
            .map(|_| Uuid::new_v4().simple().to_string())
            .collect::<String>()[..n]
            .to_string()
    };
    let ids = env
        .publish(&[
            NewEvent::new(tenant, "big.permanent", json!({ "pad": pad(30_000) })),
            NewEvent::new(tenant, "big.retry", json!({ "pad": pad(30_000) })),
            NewEvent::new(tenant, "small.ok", json!({ "n": 1 })),
        ])
        .await
        .unwrap();

    let all = Filter::default();
    assert!(
        eventually(Duration::from_secs(40), || async {
            rows(&env, &all).await.len() == 2
        })
        .await,
        "both dead-lettered (records too large: retry {}, dlq {})",
        common::metric(
            &registry,
            "hookstream_dispatcher_records_too_large_total",
            &[("destination", "retry")]
        ),
        common::metric(
            &registry,
            "hookstream_dispatcher_records_too_large_total",
            &[("destination", "dlq")]
        ),
    );
    assert!(
        eventually(Duration::from_secs(20), || async { fine.count() == 1 }).await,
        "the event after them delivered"
    );
    assert!(
        env.committed_to_end(Duration::from_secs(20)).await,
        "the events partition committed past both"
    );

    let row_of = |ep: Uuid| {
        let env = &env;
        async move {
            rows(
                env,
                &Filter {
                    endpoint: Some(ep),
                    ..Default::default()
                },
            )
            .await
            .remove(0)
        }
    };
    let permanent = row_of(ep_refusing).await;
    assert_eq!(permanent.error_class, "http_4xx");
    assert_eq!(permanent.event_id, Some(ids[0]));
    assert!(
        permanent
            .reason
            .starts_with("permanent failure: HTTP 400; its payload (")
            && permanent
                .reason
                .contains("bytes) is not kept, so it cannot be replayed (the event is at "),
        "{}",
        permanent.reason
    );
    let retried = row_of(ep_failing).await;
    assert_eq!(retried.error_class, "record_too_large");
    assert_eq!(retried.event_id, Some(ids[1]));
    assert_eq!((retried.attempts, retried.last_status), (1, 503));
    assert!(
        retried
            .reason
            .starts_with("cannot wait for a retry: Kafka refused its record of ")
            && retried.reason.contains(&format!(
                "for the retry tier {} as too large",
                cfg.retry.tiers()[0].topic
            ))
            && retried.reason.contains("last error: HTTP 503")
            && retried.reason.contains("its payload ("),
        "{}",
        retried.reason
    );
    for row in [&permanent, &retried] {
        let detail = dead_letters::get(&env.pool, row.id).await.unwrap();
        let stored = EventEnvelope::decode(detail.event.as_deref().unwrap()).unwrap();
        assert_eq!(
            Some(stored.event_id.parse().unwrap()),
            row.event_id,
            "its identity is kept"
        );
        assert!(stored.payload.is_empty(), "its payload is not");
    }
    assert_eq!(
        common::metric(
            &registry,
            "hookstream_dispatcher_records_too_large_total",
            &[("destination", "retry")]
        ),
        1.0
    );
    assert_eq!(
        common::metric(
            &registry,
            "hookstream_dispatcher_records_too_large_total",
            &[("destination", "dlq")]
        ),
        2.0
    );
    assert_eq!(failing.count(), 1, "no second attempt");

    // Replaying them is refused with the reason, not sent with an empty body.
    let replayer = Replayer::new(env.pool.clone(), &env.kafka, &cfg.retry).unwrap();
    let report = replayer.replay(&all, &ReplayOptions::default()).await.unwrap();
    assert!(report.replayed.is_empty(), "{report:?}");
    let mut skipped: Vec<i64> = report.skipped.iter().map(|s| s.id).collect();
    skipped.sort_unstable();
    let mut want = vec![permanent.id, retried.id];
    want.sort_unstable();
    assert_eq!(skipped, want);
    assert!(
        report
            .skipped
            .iter()
            .all(|s| s.reason.contains("payload was not kept")),
        "{:?}",
        report.skipped
    );
    token.cancel();
}

/// An event erased while it waits in a retry tier is never delivered again: its retry comes
/// after the dispatcher's cached data key expired (`KEY_CACHE_TTL`, how long an erasure may
/// take to stop deliveries), finds the key destroyed, and dead-letters the event `erased`
/// without a request to the endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_erased_while_it_waits_in_a_retry_tier_is_dead_lettered_as_erased() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let failing = Receiver::start(Behaviour::Status(500)).await;
    let ep = env.endpoint(tenant, &failing, &[]).await.unwrap();
    // The production jitter (±20 %): even the earliest retry comes 5 s after the cache expired.
    let mut cfg = config(&env, vec![0]);
    cfg.retry.jitter = 0.2;
    let tier_ms = ((payload_keys::KEY_CACHE_TTL.as_millis() as f64 + 5_000.0) / 0.8) as u64;
    cfg.retry.schedule_ms = vec![tier_ms];
    let token = start(&env, cfg, Registry::new());
    let mut event = NewEvent::new(tenant, "order.created", json!({ "n": 1 }));
    event.subject = Some("cust-9".into());
    env.publish(&[event]).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async { failing.count() == 1 }).await,
        "the first attempt failed"
    );
    let erased = payload_keys::erase(&env.pool, tenant, Some("cust-9"), "test")
        .await
        .unwrap();
    assert_eq!(erased.keys, 1, "{erased:?}");
    // The receiver would take the retry now: only the erasure stops it.
    failing.set_behaviour(Behaviour::Ok);

    let by_endpoint = Filter {
        endpoint: Some(ep),
        ..Default::default()
    };
    assert!(
        eventually(Duration::from_millis(tier_ms * 6 / 5 + 20_000), || async {
            rows(&env, &by_endpoint).await.len() == 1
        })
        .await,
        "the retry was dead-lettered"
    );
    let row = rows(&env, &by_endpoint).await.remove(0);
    assert_eq!(row.error_class, "erased", "{row:?}");
    assert!(row.reason.contains("erased"), "{row:?}");
    assert_eq!(failing.count(), 1, "no request after the erasure");
    token.cancel();
}
