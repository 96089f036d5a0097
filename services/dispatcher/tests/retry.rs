//! Retries through the delay-tier topics, with a compressed schedule (1 s, 2 s, 4 s), on real
//! Kafka and PostgreSQL: delivered on the fourth attempt and never early, `Retry-After`
//! honoured, dead-lettered with the reason once the schedule is exhausted.

use std::time::Duration;

use hookstream_config::RetryConfig;
use hookstream_proto::{DeadLetter, Message as _};
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;

mod common;

fn start(env: &TestEnv, schedule_ms: Vec<u64>) -> CancellationToken {
    common::start_pipeline(env, common::retrying_config(env, schedule_ms))
}

/// Gaps between consecutive arrivals, in seconds.
fn gaps(r: &Receiver) -> Vec<f64> {
    let got = r.received();
    got.windows(2)
        .map(|w| (w[1].at - w[0].at).as_secs_f64())
        .collect()
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
        .read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(2)).await
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
        .read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(40)).await
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
            .expect("first attempt")
            .at;
        for retry in got.iter().filter(|r| &r.webhook_id == id && r.attempt >= 2) {
            let gap = (retry.at - first_try).as_secs_f64();
            assert!(
                gap >= 4.0,
                "event {id}: retried {gap:.2} s after its first attempt, before the 4 s due time"
            );
        }
    }
    assert!(
        env.read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(2)).await
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
    hookstream_kafka::ensure_topics(&env.kafka, &hookstream_kafka::topics::tier_specs(&env.kafka, &retry))
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
        .read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(10)).await
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
