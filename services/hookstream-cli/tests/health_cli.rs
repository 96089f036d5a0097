//! `hookstream health` end to end (real Kafka and PostgreSQL, the `hookstream` binary): each
//! figure follows what the pipeline does, a figure past its `[health]` threshold exits 1
//! naming it, `"off"` turns a threshold off, and an unreachable Kafka is a failure, not a
//! silent zero.

use std::time::Duration;

use hookstream_kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// One retry tier of one second.
const SCHEDULE: &str = "[1000]";

use crate::common;
use common::Run;

fn problems_of(run: &Run) -> Vec<String> {
    run.json()["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

async fn health(env: &TestEnv, brokers: &str, vars: &[(&str, &str)]) -> Run {
    let mut c = common::against(env, brokers);
    c.env("HOOKSTREAM_RETRY__SCHEDULE_MS", SCHEDULE)
        .envs(
            vars.iter()
                .map(|(k, v)| (format!("HOOKSTREAM_HEALTH__{k}"), v.to_string())),
        )
        .args(["health", "--json"]);
    common::run(c).await
}

fn group<'a>(report: &'a Value, role: &str) -> &'a Value {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["role"] == role)
        .unwrap_or_else(|| panic!("no {role} group in {report}"))
}

fn dispatcher_config(env: &TestEnv) -> dispatcher::Config {
    let mut cfg = dispatcher::Config {
        database: env.database.clone(),
        kafka: env.kafka.clone(),
        retry: hookstream_config::RetryConfig {
            schedule_ms: vec![1_000],
            ..env.retry.clone()
        },
        secrets: env.secrets.clone(),
        ..Default::default()
    };
    cfg.delivery.allow_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    cfg.dlq.sink_group_id = env.dlq_sink_group();
    cfg.attempts.sink_group_id = env.attempt_sink_group();
    cfg.dispatcher.isolation.consecutive_failures = 2;
    cfg.dispatcher.isolation.cooldown_ms = 60_000;
    cfg.dispatcher.isolation.max_cooldown_ms = 60_000;
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_pipeline_and_fails_past_a_threshold() {
    let env = TestEnv::new(2).await.unwrap();
    let brokers = env.kafka.brokers.clone();
    let tier = format!("{}1s", env.retry.topic_prefix);
    let tiers = hookstream_config::RetryConfig {
        schedule_ms: vec![1_000],
        ..env.retry.clone()
    };
    hookstream_kafka::ensure_topics(
        &env.kafka,
        &hookstream_kafka::topics::tier_specs(&env.kafka, &tiers),
    )
    .await
    .unwrap();

    // Nothing happened yet: every figure is zero and health passes.
    let idle = health(&env, &brokers, &[]).await;
    assert_eq!(idle.code, Some(0), "{}\n{}", idle.stdout, idle.stderr);
    let r = idle.json();
    assert_eq!(r["ok"], true);
    assert_eq!(r["outbox"]["backlog"], 0);
    assert_eq!(r["dead_letters_last_hour"], 0);
    assert_eq!(r["endpoints"]["breakers_open"], 0);
    for role in ["events", "dlq_sink", "attempt_sink"] {
        assert_eq!(group(&r, role)["lag_messages"], 0, "{role}");
        assert_eq!(group(&r, role)["partitions"], 2, "{role}");
    }
    assert_eq!(r["retry_tiers"][0]["topic"], json!(tier));
    assert_eq!(r["retry_tiers"][0]["waiting"], 0);

    // Three events in the outbox and no relay: the backlog shows, and fails a threshold of 2.
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Status(503)).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    env.publish(
        &(0..3)
            .map(|n| NewEvent::new(tenant, "order.created", json!({ "n": n })))
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    let backlog = health(&env, &brokers, &[("OUTBOX_BACKLOG", "2")]).await;
    assert_eq!(backlog.code, Some(1), "{}", backlog.stdout);
    assert_eq!(backlog.json()["outbox"]["backlog"], 3);
    assert!(
        problems_of(&backlog)
            .iter()
            .any(|p| p.starts_with("outbox backlog: 3 rows")),
        "{:?}",
        problems_of(&backlog)
    );

    // A relay and no dispatcher: the events group lags 3 messages, older and older.
    let token = CancellationToken::new();
    let relay = outbox_relay::Config {
        database: env.database.clone(),
        secrets: env.secrets.clone(),
        kafka: env.kafka.clone(),
        ..Default::default()
    };
    let t = token.clone();
    tokio::spawn(async move {
        outbox_relay::run(relay, &prometheus::Registry::new(), Default::default(), t)
            .await
            .expect("relay runs");
    });
    assert!(
        eventually(Duration::from_secs(20), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "relayed"
    );
    // A record in the tier that no retry role takes: its hop (append time + 1 s) passes.
    let producer: FutureProducer = hookstream_kafka::producer_config(&env.kafka, Duration::from_secs(10))
        .create()
        .unwrap();
    producer
        .send(
            FutureRecord::to(&tier).key("k").payload(b"not a delivery task"),
            Duration::from_secs(5),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let behind = health(&env, &brokers, &[("EVENTS_LAG_S", "1"), ("RETRY_OVERDUE_S", "1")]).await;
    assert_eq!(behind.code, Some(1), "{}", behind.stdout);
    let r = behind.json();
    let events = group(&r, "events");
    assert_eq!(events["lag_messages"], 3);
    assert!(events["lag_seconds"].as_f64().unwrap() >= 1.5, "{events}");
    let t0 = &r["retry_tiers"][0];
    assert_eq!(t0["waiting"], 1);
    assert!(t0["overdue_s"].as_f64().unwrap() >= 1.0, "{t0}");
    assert!(t0["next_due_at"].is_string(), "{t0}");
    let problems = problems_of(&behind);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("events group") && p.ends_with("threshold of 1 s")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with(&format!("retry tier {tier}"))),
        "{problems:?}"
    );

    // A dispatcher against a 503 endpoint: the events are taken up (lag 0), the breaker opens
    // after two failures (published by the dispatcher), and the record in the tier, which is
    // no delivery task, becomes a dead letter.
    let registry = prometheus::Registry::new();
    let cfg = dispatcher_config(&env);
    let t = token.clone();
    tokio::spawn(async move {
        dispatcher::run(cfg, &registry, Default::default(), t)
            .await
            .expect("dispatcher runs");
    });
    let last = std::sync::Mutex::new(None);
    let settled = eventually(Duration::from_secs(40), || async {
        let run = health(&env, &brokers, &[("OPEN_BREAKERS", "0")]).await;
        let r = run.json();
        let done = group(&r, "events")["lag_messages"] == 0
            && r["endpoints"]["breakers_open"] == 1
            && r["dead_letters_last_hour"].as_i64().unwrap_or(0) >= 1;
        *last.lock().unwrap() = Some(run);
        done
    })
    .await;
    let last = last.into_inner().unwrap().unwrap();
    assert!(settled, "{}", last.stdout);
    assert_eq!(last.code, Some(1));
    assert!(
        problems_of(&last)
            .iter()
            .any(|p| p.starts_with("open breakers: 1, past the threshold of 0")),
        "{:?}",
        problems_of(&last)
    );

    // `endpoint stats` shows the published breaker beside the stored attempts.
    let stats = std::sync::Mutex::new(Value::Null);
    let shown = eventually(Duration::from_secs(20), || async {
        let mut c = common::against(&env, &brokers);
        c.args(["endpoint", "stats", "--json"]);
        let out = common::run(c).await;
        let v: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
        let done = v[0]["attempts"].as_i64().unwrap_or(0) >= 2;
        *stats.lock().unwrap() = v;
        done
    })
    .await;
    let stats = stats.into_inner().unwrap();
    assert!(shown, "{stats}");
    assert_eq!(stats[0]["breaker"], "open", "{stats}");
    assert_eq!(stats[0]["delivered"], 0, "{stats}");

    // Thresholds turned off pass.
    let off = health(&env, &brokers, &[("OPEN_BREAKERS", "off")]).await;
    assert_eq!(off.code, Some(0), "{}", off.stdout);
    assert_eq!(off.json()["thresholds"]["open_breakers"], "off");
    token.cancel();

    // A Kafka nobody answers at is a failure naming what could not be read.
    let unreachable = health(&env, "127.0.0.1:1", &[]).await;
    assert_eq!(unreachable.code, Some(1), "{}", unreachable.stdout);
    let problems = problems_of(&unreachable);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("kafka: ") && p.contains("no group or retry tier figure was read")),
        "{problems:?}"
    );
    assert_eq!(
        unreachable.json()["outbox"]["backlog"],
        0,
        "the database figures are still there"
    );
}
