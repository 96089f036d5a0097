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

fn start(env: &TestEnv, schedule_ms: Vec<u64>) -> CancellationToken {
    let mut cfg = dispatcher::Config {
        database: env.database.clone(),
        kafka: env.kafka.clone(),
        retry: RetryConfig {
            schedule_ms,
            jitter: 0.0,
            min_throttled_delay_ms: 1_000,
            ..env.retry.clone()
        },
        ..Default::default()
    };
    cfg.delivery.allow_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    let relay_cfg = outbox_relay::Config {
        database: env.database.clone(),
        kafka: env.kafka.clone(),
        ..Default::default()
    };
    let token = CancellationToken::new();
    let (t1, t2) = (token.clone(), token.clone());
    tokio::spawn(async move {
        dispatcher::run(cfg, &prometheus::Registry::new(), Default::default(), t1)
            .await
            .expect("dispatcher runs");
    });
    tokio::spawn(async move {
        outbox_relay::run(relay_cfg, &prometheus::Registry::new(), Default::default(), t2)
            .await
            .expect("relay runs");
    });
    token
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
        .read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(2))
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
    assert!(
        l.dead_at_ms - l.first_attempt_at_ms >= 7_000,
        "the whole schedule was waited out"
    );
    assert_eq!(receiver.count(), 4);
    token.cancel();
}
