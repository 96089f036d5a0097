//! Retries through the delay-tier topics, with a compressed schedule (1 s, 2 s, 4 s), on real
//! Kafka and PostgreSQL: delivered on the fourth attempt and never early, `Retry-After`
//! honoured, dead-lettered with the reason once the schedule is exhausted.

use std::time::Duration;

use hookstream_config::RetryConfig;
use hookstream_proto::{DeadLetter, Message as _};
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::{eventually, Behaviour, Received, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common;

fn start(env: &TestEnv, schedule_ms: Vec<u64>) -> CancellationToken {
    common::start_pipeline(env, common::retrying_config(env, schedule_ms))
}

/// Gaps between consecutive arrivals, in seconds.
fn gaps(r: &Receiver) -> Vec<f64> {
    let got = r.received();
    got.windows(2).map(|w| wall_gap(&w[0], &w[1])).collect()
}

/// Seconds from `a`'s arrival to `b`'s by the receiver's wall clock. A retry's due time is a
/// wall-clock instant (it travels between processes in the tier record; `Retry-After` is one
/// too), so "never early" is judged on the wall clock, as the load harness does. The
/// monotonic clock can disagree: this machine's wall clock is corrected after the host forks
/// the VM ("crng reseeded due to virtual machine fork" in the kernel log), and a correction
/// during a test once ran it 0.3 % ahead of the monotonic clock for some seconds.
fn wall_gap(a: &Received, b: &Received) -> f64 {
    (b.received_unix_ms - a.received_unix_ms) / 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_three_times_then_delivered_on_the_fourth_attempt_never_early() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::FailTimes(3, 503)).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let token = start(&env, vec![1_000, 2_000, 4_000]);
    let ids = env
        .publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();

    assert!(
        eventually(Duration::from_secs(40), || async { receiver.count() >= 4 }).await,
        "four attempts"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = receiver.received();
    assert_eq!(got.len(), 4, "no fifth attempt after the success");
    assert!(
        got.iter().all(|r| r.webhook_id == ids[0].to_string()),
        "the same webhook-id on every attempt"
    );
    assert!(got.iter().all(|r| r.verified));
    assert_eq!(got.iter().map(|r| r.attempt).collect::<Vec<_>>(), [1, 2, 3, 4]);
    let g = gaps(&receiver);
    for (gap, due) in g.iter().zip([1.0, 2.0, 4.0]) {
        assert!(
            *gap >= due,
            "attempt gaps {g:?}: never before the due time ({due} s)"
        );
        assert!(
            *gap < due + 3.0,
            "attempt gaps {g:?}: not much later than due either"
        );
    }
    assert!(env
        .read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(2))
        .await
        .unwrap()
        .is_empty());
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::RetryAfter(10)).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let token = start(&env, vec![1_000, 2_000]);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();

    assert!(eventually(Duration::from_secs(30), || async { receiver.count() >= 2 }).await);
    let g = gaps(&receiver);
    assert!(
        g[0] >= 10.0,
        "the second attempt waited for Retry-After: 10 (gap {:.2} s)",
        g[0]
    );
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_failing_is_dead_lettered_after_the_last_tier_with_the_reason() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Status(500)).await;
    let ep = env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let token = start(&env, vec![1_000, 2_000, 4_000]);
    let ids = env
        .publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();

    let letters: Vec<DeadLetter> = env
        .read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(40))
        .await
        .unwrap()
        .iter()
        .map(|r| DeadLetter::decode(r.payload.as_slice()).unwrap())
        .collect();
    assert_eq!(letters.len(), 1);
    let l = &letters[0];
    assert_eq!(l.endpoint_id, ep.to_string());
    assert_eq!(l.event.as_ref().unwrap().event_id, ids[0].to_string());
    assert_eq!(l.attempts, 4);
    assert_eq!(l.reason, "gave up after 4 attempts: HTTP 500");
    assert_eq!(l.error_class, "http_5xx");
    assert_eq!(l.last_status, 500);
    assert_eq!(
        l.origin.as_ref().unwrap().topic,
        env.kafka.topics.events,
        "the dead letter points at the event's place in the events topic, not at a tier"
    );
    assert!(
        l.dead_at_ms - l.first_attempt_at_ms >= 7_000,
        "the whole schedule was waited out"
    );
    assert_eq!(receiver.count(), 4);
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_holding_due_messages_loses_none_and_retries_none_early() {
    use hookstream_testkit::process::{dispatcher_env, ServiceProcess};
    let env = TestEnv::new(3).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    // Every event's first attempt fails; the retries succeed.
    let receiver = Receiver::start(Behaviour::FailTimes(50, 503)).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let mut vars = dispatcher_env(&env);
    vars.push(("HOOKSTREAM_RETRY__SCHEDULE_MS".into(), "[4000]".into()));
    vars.push(("HOOKSTREAM_RETRY__JITTER".into(), "0.0".into()));
    // Fifty failures in a row would open the endpoint's breaker; this test is about the
    // retry role holding due messages, so keep it closed.
    vars.push((
        "HOOKSTREAM_DISPATCHER__ISOLATION__CONSECUTIVE_FAILURES".into(),
        "1000".into(),
    ));
    vars.push((
        "HOOKSTREAM_DISPATCHER__ISOLATION__MIN_REQUESTS".into(),
        "1000".into(),
    ));
    let spawn = |name: &str| {
        ServiceProcess::spawn(
            std::path::Path::new(env!("CARGO_BIN_EXE_dispatcher")),
            &vars,
            &env.log_path(name),
        )
        .unwrap()
    };
    let relay = CancellationToken::new();
    common::start_relay(&env, &relay);

    let first = spawn("dispatcher-1");
    let events: Vec<NewEvent> = (0..50)
        .map(|i| NewEvent::new(tenant, "order.created", json!({ "i": i })).aggregate("order", i.to_string()))
        .collect();
    let ids = env.publish(&events).await.unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async { receiver.count() >= 50 }).await,
        "50 first attempts failed"
    );
    // The 50 retries now sit in the 4 s tier, held by the retry role: kill it.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    first.kill9().await;
    let second = spawn("dispatcher-2");

    let want: std::collections::HashSet<String> = ids.iter().map(|i| i.to_string()).collect();
    assert!(
        eventually(Duration::from_secs(60), || async {
            receiver
                .received()
                .iter()
                .filter(|r| r.attempt >= 2)
                .map(|r| r.webhook_id.clone())
                .collect::<std::collections::HashSet<_>>()
                == want
        })
        .await,
        "every held retry was delivered after the restart"
    );
    let got = receiver.received();
    for id in &want {
        let first_try = got
            .iter()
            .find(|r| &r.webhook_id == id && r.attempt == 1)
            .expect("first attempt");
        for retry in got.iter().filter(|r| &r.webhook_id == id && r.attempt >= 2) {
            let gap = wall_gap(first_try, retry);
            assert!(
                gap >= 4.0,
                "event {id}: retried {gap:.2} s after its first attempt, before the 4 s due time"
            );
        }
    }
    assert!(
        env.read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(2))
            .await
            .unwrap()
            .is_empty(),
        "nothing dead-lettered"
    );
    assert_eq!(second.terminate().await, Some(0));
    relay.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_bytes_in_a_tier_topic_are_dead_lettered_and_the_partition_moves_on() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::FailTimes(1, 500)).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let token = start(&env, vec![1_000]);
    // Wait for the retry role to create its tiers, then write garbage into the only tier.
    let retry = RetryConfig {
        schedule_ms: vec![1_000],
        ..env.retry.clone()
    };
    let tier = retry.tiers()[0].topic.clone();
    hookstream_kafka::ensure_topics(
        &env.kafka,
        &hookstream_kafka::topics::tier_specs(&env.kafka, &retry),
    )
    .await
    .unwrap();
    let producer: hookstream_kafka::rdkafka::producer::FutureProducer =
        hookstream_kafka::producer_config(&env.kafka, Duration::from_secs(10))
            .create()
            .unwrap();
    producer
        .send(
            hookstream_kafka::rdkafka::producer::FutureRecord::<(), _>::to(&tier).payload(b"\x00\x01garbage"),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    // A real retry behind the poison still gets through.
    let ids = env
        .publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async { receiver.count() >= 2 }).await,
        "the retry behind it"
    );
    assert_eq!(receiver.received()[1].webhook_id, ids[0].to_string());
    let letters: Vec<DeadLetter> = env
        .read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(10))
        .await
        .unwrap()
        .iter()
        .map(|r| DeadLetter::decode(r.payload.as_slice()).unwrap())
        .collect();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].error_class, "decode");
    assert_eq!(&letters[0].raw[..], b"\x00\x01garbage");
    assert_eq!(letters[0].origin.as_ref().unwrap().topic, tier);
    token.cancel();
}

/// The hardening issue's timing target, with production-like settings: jitter on (±20 %),
/// Retry-After values that need several hops, and the longer tiers holding thousands of
/// records due later, on one partition per tier (every endpoint hashed together, as many
/// endpoints share a partition in production). Every retry is attempted after its due time,
/// never before, and 99 % of them within a second of it. (The old placement, "the shortest
/// tier at least as long as the delay", put a 13 s Retry-After in the 30 s tier behind
/// thousands of records due later: run on the old code, this scenario had them 19–21 s late.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_on_time_with_jitter_through_tiers_holding_thousands() {
    const BACKGROUND: usize = 3_000;
    const TIMED: usize = 60;
    const RETRY_AFTER_S: u64 = 13;
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    // Always failing: its retries fill the 2 s, 8 s and 30 s tiers.
    let background = Receiver::start(Behaviour::Status(503)).await;
    // Each event fails once: a jittered first retry (1.6 to 2.4 s), through the 2 s tier.
    let jittered = Receiver::start(Behaviour::FailFirst(503)).await;
    // Each event is asked to come back after 13 s: 8 s + 2 s + 2 s hops and 1 s in memory.
    let told = Receiver::start(Behaviour::RetryAfterFirst(RETRY_AFTER_S)).await;
    env.endpoint(tenant, &background, &["bg.*"]).await.unwrap();
    env.endpoint(tenant, &jittered, &["jit.*"]).await.unwrap();
    env.endpoint(tenant, &told, &["told.*"]).await.unwrap();
    let mut cfg = common::retrying_config(&env, vec![2_000, 8_000, 30_000]);
    cfg.retry.jitter = 0.2;
    // The background endpoint fails on purpose: keep its breaker closed so its retries are
    // real attempts that fill the tiers (deferrals are timed the same way, but rarer).
    cfg.dispatcher.isolation.consecutive_failures = 1_000_000;
    cfg.dispatcher.isolation.min_requests = 1_000_000;
    let registry = prometheus::Registry::new();
    let token = common::start_observed_pipeline(&env, cfg, registry.clone());

    let background_events: Vec<NewEvent> = (0..BACKGROUND)
        .map(|i| NewEvent::new(tenant, "bg.x", json!({ "i": i })).aggregate("bg", (i % 50).to_string()))
        .collect();
    for chunk in background_events.chunks(500) {
        env.publish(chunk).await.unwrap();
    }
    // Timed events trickle in while the background's retries move through the tiers.
    for i in 0..TIMED {
        let kind = if i % 2 == 0 { "jit.x" } else { "told.x" };
        env.publish(&[NewEvent::new(tenant, kind, json!({ "i": i })).aggregate("t", i.to_string())])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let retried = |r: &Receiver| {
        r.received()
            .iter()
            .filter(|x| x.attempt >= 2)
            .map(|x| x.webhook_id.clone())
            .collect::<std::collections::HashSet<_>>()
            .len()
    };
    assert!(
        eventually(Duration::from_secs(90), || async {
            retried(&jittered) == TIMED / 2 && retried(&told) == TIMED / 2
        })
        .await,
        "every timed event retried ({} jittered, {} told)",
        retried(&jittered),
        retried(&told)
    );
    assert!(
        background.count() >= 2 * BACKGROUND,
        "the background's retries went through the tiers too ({})",
        background.count()
    );

    // Retry-After: the due time is known at the receiver (it sent it).
    let mut told_late = Vec::new();
    let got = told.received();
    for first in got.iter().filter(|r| r.attempt == 1) {
        let second = got
            .iter()
            .find(|r| r.webhook_id == first.webhook_id && r.attempt == 2)
            .expect("a second attempt");
        let gap = wall_gap(first, second);
        assert!(
            gap >= RETRY_AFTER_S as f64,
            "retried {gap:.3} s after Retry-After: {RETRY_AFTER_S}"
        );
        told_late.push(gap - RETRY_AFTER_S as f64);
    }
    told_late.sort_by(f64::total_cmp);
    // Jittered: never before the least the schedule allows.
    let got = jittered.received();
    for first in got.iter().filter(|r| r.attempt == 1) {
        let second = got
            .iter()
            .find(|r| r.webhook_id == first.webhook_id && r.attempt == 2)
            .expect("a second attempt");
        let gap = wall_gap(first, second);
        assert!(gap >= 1.6, "a jittered 2 s retry came after {gap:.3} s");
        assert!(
            gap <= 2.4 + 1.0,
            "a jittered 2 s retry came after {gap:.3} s: late"
        );
    }
    // Every retry, as the dispatcher measured it against its exact due time.
    let total = common::metric(&registry, "hookstream_retry_lateness_seconds_count", &[]);
    let within_1s = common::metric(
        &registry,
        "hookstream_retry_lateness_seconds_bucket",
        &[("le", "1")],
    );
    let early = common::metric(&registry, "hookstream_retry_early_total", &[]);
    let hops = common::metric(&registry, "hookstream_retry_hops_total", &[]);
    println!(
        "retries timed: {total}; within 1 s of due: {within_1s} ({:.3} %); early: {early}; hops: {hops}; \
         Retry-After lateness p50 {:.3} s, max {:.3} s",
        100.0 * within_1s / total,
        told_late[told_late.len() / 2],
        told_late[told_late.len() - 1]
    );
    assert!(total >= (BACKGROUND + TIMED) as f64, "{total} retries measured");
    assert_eq!(early, 0.0, "no retry was taken up before its due time");
    assert!(
        within_1s / total >= 0.99,
        "p99 lateness over 1 s: {within_1s} of {total} within 1 s"
    );
    assert!(hops >= (TIMED / 2 * 3) as f64, "the 13 s retries hopped: {hops}");
    let p99 = told_late[(told_late.len() * 99).div_ceil(100) - 1];
    assert!(
        p99 <= 1.0,
        "Retry-After retries late by {p99:.3} s at p99: {told_late:?}"
    );
    token.cancel();
}

/// A retry role that does not know the endpoint yet and cannot read the subscriptions (its
/// database is away) waits for the database; it used to dead-letter the retry as
/// `endpoint_disabled`, a final decision taken on a transient error. Once it can read them it
/// delivers, and nothing is dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_role_that_cannot_read_the_subscriptions_waits_instead_of_dead_lettering() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::FailTimes(1, 503)).await;

    // The retry role alone, on a login of its own, started before the endpoint exists; then
    // its database goes away.
    let (role, database) = env.login_role("retry").await.unwrap();
    let mut retry_cfg = common::retrying_config(&env, vec![2_000]);
    retry_cfg.database = database;
    retry_cfg.dispatcher.roles = vec![dispatcher::Role::Retry];
    let retry_token = CancellationToken::new();
    let retrying = {
        let t = retry_token.clone();
        tokio::spawn(async move {
            dispatcher::run(retry_cfg, &prometheus::Registry::new(), Default::default(), t).await
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await; // joined its groups, snapshot loaded
    env.set_reachable(&role, false).await.unwrap();
    env.endpoint(tenant, &receiver, &[]).await.unwrap();

    // The events role and the DLQ sink, on the test's login: the first attempt fails and goes
    // to the 2 s tier.
    let mut cfg = common::retrying_config(&env, vec![2_000]);
    cfg.dispatcher.roles = vec![dispatcher::Role::Events, dispatcher::Role::DlqSink];
    let token = common::start_pipeline(&env, cfg);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async { receiver.count() == 1 }).await,
        "the first attempt"
    );
    let dead_letters = |env: &TestEnv| {
        let pool = env.pool.clone();
        async move {
            hookstream_store::dead_letters::list(&pool, &Default::default(), 10)
                .await
                .unwrap()
        }
    };
    tokio::time::sleep(Duration::from_secs(6)).await; // well past its due time
    let early = dead_letters(&env).await;
    assert!(
        early.is_empty(),
        "dead-lettered while the subscriptions could not be read: {:?}",
        early.iter().map(|d| &d.reason).collect::<Vec<_>>()
    );
    assert_eq!(receiver.count(), 1, "nothing attempted without the endpoint");
    assert!(!retrying.is_finished(), "the retry role waits, it does not fail");

    env.set_reachable(&role, true).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async { receiver.successes() == 1 }).await,
        "delivered once the subscriptions can be read"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(dead_letters(&env).await.is_empty(), "and nothing dead-lettered");
    assert_eq!(receiver.count(), 2);
    retry_token.cancel();
    token.cancel();
    retrying.await.unwrap().unwrap();
}

/// Scheduled sends (`deliverAt`) through the retry tiers with production settings: the first
/// three production tiers (5 s, 5 min, 30 min), jitter on (±20 %), and an always-failing
/// endpoint's retries loading the 5 s tier meanwhile. Every scheduled event is first attempted
/// after its time, never before, and 99 % of them within a second of it (the receiver's clock,
/// which is the producer's: one machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_sends_are_never_early_and_on_time_through_production_tiers_with_jitter() {
    const SCHEDULED: usize = 40;
    const BACKGROUND: usize = 1_000;
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let background = Receiver::start(Behaviour::Status(503)).await;
    let scheduled = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &background, &["bg.*"]).await.unwrap();
    env.endpoint(tenant, &scheduled, &["at.*"]).await.unwrap();
    let mut cfg = common::retrying_config(&env, vec![5_000, 300_000, 1_800_000]);
    cfg.retry.jitter = 0.2;
    cfg.dispatcher.isolation.consecutive_failures = 1_000_000;
    cfg.dispatcher.isolation.min_requests = 1_000_000;
    let token = common::start_observed_pipeline(&env, cfg, prometheus::Registry::new());

    let background_events: Vec<NewEvent> = (0..BACKGROUND)
        .map(|i| NewEvent::new(tenant, "bg.x", json!({ "i": i })).aggregate("bg", (i % 50).to_string()))
        .collect();
    for chunk in background_events.chunks(500) {
        env.publish(chunk).await.unwrap();
    }
    // Due 2 to 41 s ahead: some within the 5 s tier, most hopping through it several times.
    let mut due_ms = std::collections::HashMap::new();
    for i in 0..SCHEDULED {
        let at = chrono::Utc::now()
            + chrono::Duration::milliseconds(2_000 + 1_000 * i as i64 + 137 * (i as i64 % 7));
        let ids = env
            .publish(&[NewEvent::new(tenant, "at.x", json!({ "i": i })).deliver_at(at)])
            .await
            .unwrap();
        due_ms.insert(ids[0].to_string(), at.timestamp_millis() as f64);
    }
    assert!(
        eventually(Duration::from_secs(90), || async {
            scheduled.distinct().0.len() >= SCHEDULED
        })
        .await,
        "every scheduled event delivered ({} of {SCHEDULED})",
        scheduled.distinct().0.len()
    );
    let mut late: Vec<f64> = Vec::new();
    for r in scheduled.received().iter().filter(|r| r.attempt == 1) {
        let due = due_ms[&r.webhook_id];
        assert!(
            r.received_unix_ms >= due,
            "{} attempted {:.3} s before its deliverAt",
            r.webhook_id,
            (due - r.received_unix_ms) / 1000.0
        );
        late.push((r.received_unix_ms - due) / 1000.0);
    }
    late.sort_by(f64::total_cmp);
    let p99 = late[(late.len() * 99).div_ceil(100) - 1];
    println!(
        "scheduled sends: {} on time; lateness p50 {:.3} s, p99 {p99:.3} s, max {:.3} s; background attempts {}",
        late.len(),
        late[late.len() / 2],
        late[late.len() - 1],
        background.count()
    );
    assert!(p99 <= 1.0, "scheduled sends late by {p99:.3} s at p99: {late:?}");
    assert!(
        background.count() >= BACKGROUND,
        "the background loaded the tiers"
    );
    token.cancel();
}
