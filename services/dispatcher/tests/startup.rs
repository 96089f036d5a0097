//! What a dispatcher refuses to start with, on real Kafka and PostgreSQL: a retry tier whose
//! retention is shorter than its delay plus the headroom (records would be deleted before
//! they are due) until `topics::fix` aligns it; and configuration that parses but cannot
//! work, refused before any port is bound, with exit code 2 and the key named.

use std::path::Path;
use std::time::Duration;

use hookstream_kafka::topics::{self, TopicSpec};
use hookstream_kafka::TopicError;
use hookstream_telemetry::ServiceError;
use hookstream_testkit::process::{dispatcher_env, ServiceProcess};
use hookstream_testkit::TestEnv;
use tokio_util::sync::CancellationToken;

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_that_would_delete_records_before_they_are_due_is_refused_until_fixed() {
    let env = TestEnv::new(1).await.unwrap();
    let cfg = common::retrying_config(&env, vec![1_000, 7_200_000]);
    // The 2 h tier exists already, created by hand with the broker's usual 1-day retention:
    // shorter than 2 h plus the 24 h headroom.
    let short: Vec<TopicSpec> = topics::tier_specs(&env.kafka, &cfg.retry)
        .into_iter()
        .map(|mut s| {
            s.configs = vec![("retention.ms".into(), "86400000".into())];
            s
        })
        .collect();
    hookstream_kafka::ensure_topics(&env.kafka, &short).await.unwrap();
    let err = dispatcher::run(
        cfg.clone(),
        &prometheus::Registry::new(),
        Default::default(),
        CancellationToken::new(),
    )
    .await
    .expect_err("a tier too short for its delay");
    let text = err.to_string();
    assert!(
        matches!(
            err,
            dispatcher::DispatchError::Topics(TopicError::RetentionTooShort { .. })
        ),
        "{text}"
    );
    assert!(
        text.contains(&cfg.retry.tiers()[0].topic),
        "names the topic: {text}"
    );
    assert!(
        text.contains("hookstream topics create --fix"),
        "says how to fix it: {text}"
    );
    assert_eq!(
        err.exit_code(),
        2,
        "an operator must act: not a crash loop's exit code"
    );

    // `topics create --fix` brings them in line (retention and append-time timestamps)...
    let fixed = topics::fix(&env.kafka, &topics::tier_specs(&env.kafka, &cfg.retry))
        .await
        .unwrap();
    assert!(
        fixed
            .iter()
            .any(|f| f.key == "retention.ms" && f.to == cfg.retry.tier_retention_ms.to_string()),
        "{fixed:?}"
    );
    assert!(fixed
        .iter()
        .any(|f| f.key == "message.timestamp.type" && f.to == "LogAppendTime"));
    let described = topics::describe(&env.kafka, &[cfg.retry.tiers()[1].topic.clone()])
        .await
        .unwrap();
    let tier = &described[&cfg.retry.tiers()[1].topic];
    assert_eq!(tier["retention.ms"], cfg.retry.tier_retention_ms.to_string());
    assert_eq!(tier["message.timestamp.type"], "LogAppendTime");
    // ...and the dispatcher starts.
    let token = CancellationToken::new();
    let stop = token.clone();
    let running = tokio::spawn(async move {
        dispatcher::run(cfg, &prometheus::Registry::new(), Default::default(), stop).await
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!running.is_finished(), "running");
    token.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn configuration_that_cannot_work_exits_2_naming_the_key_before_binding_anything() {
    let env = TestEnv::new(1).await.unwrap();
    // The admin port is held by this test: a service that bound before validating would fail
    // with "address in use" (exit 1), not with the configuration error.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    for (key, value, named) in [
        ("HOOKSTREAM_RETRY__JITTER", "1.5", "retry.jitter"),
        ("HOOKSTREAM_RETRY__SCHEDULE_MS", "[]", "retry.schedule_ms"),
        (
            "HOOKSTREAM_DISPATCHER__MAX_IN_FLIGHT_EVENTS",
            "0",
            "dispatcher.max_in_flight_events",
        ),
    ] {
        let mut vars = dispatcher_env(&env);
        vars.push(("HOOKSTREAM_TELEMETRY__LISTEN".into(), format!("127.0.0.1:{port}")));
        vars.push((key.into(), value.into()));
        let log = env.log_path(&format!("bad-{key}"));
        let mut p = ServiceProcess::spawn(Path::new(env!("CARGO_BIN_EXE_dispatcher")), &vars, &log).unwrap();
        let code = tokio::time::timeout(Duration::from_secs(20), p.wait())
            .await
            .expect("exits at once");
        let output = std::fs::read_to_string(&log).unwrap();
        assert_eq!(code, Some(2), "{key}={value}: {output}");
        assert!(output.contains(named), "{key}={value}: names the key: {output}");
    }
    // A safety override, from a file.
    let file = env.log_path("unsafe.toml");
    std::fs::write(&file, "[kafka.client]\n\"enable.auto.offset.store\" = \"true\"\n").unwrap();
    let mut vars = dispatcher_env(&env);
    vars.push(("HOOKSTREAM_CONFIG".into(), file.display().to_string()));
    let log = env.log_path("unsafe");
    let mut p = ServiceProcess::spawn(Path::new(env!("CARGO_BIN_EXE_dispatcher")), &vars, &log).unwrap();
    assert_eq!(p.wait().await, Some(2));
    let output = std::fs::read_to_string(&log).unwrap();
    assert!(
        output.contains("kafka.client.\"enable.auto.offset.store\""),
        "{output}"
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_topic_with_fewer_partitions_than_configured_is_refused_at_once() {
    let env = TestEnv::new(1).await.unwrap();
    let mut cfg = common::retrying_config(&env, vec![1_000]);
    // The tier exists with one partition; the configuration asks for three.
    hookstream_kafka::ensure_topics(&env.kafka, &topics::tier_specs(&env.kafka, &cfg.retry))
        .await
        .unwrap();
    cfg.retry.partitions = 3;
    let started = std::time::Instant::now();
    let err = dispatcher::run(
        cfg.clone(),
        &prometheus::Registry::new(),
        Default::default(),
        CancellationToken::new(),
    )
    .await
    .expect_err("fewer partitions than configured");
    let text = err.to_string();
    assert!(
        matches!(
            err,
            dispatcher::DispatchError::Topics(TopicError::FewerPartitions { have: 1, want: 3, .. })
        ),
        "{text}"
    );
    assert!(
        text.contains(&cfg.retry.tiers()[0].topic),
        "names the topic: {text}"
    );
    assert_eq!(err.exit_code(), 2, "an operator must act");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "said at once, not after waiting for partitions that never come: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_that_does_not_answer_is_waited_for_not_a_reason_to_exit() {
    let env = TestEnv::new(1).await.unwrap();
    let mut cfg = common::dispatcher_config(&env);
    // Nothing listens here: a broker that is down, as during an outage.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    cfg.kafka.brokers = format!("127.0.0.1:{port}");
    let shutdown = CancellationToken::new();
    let registry = prometheus::Registry::new();
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { dispatcher::run(cfg, &registry, Default::default(), shutdown).await }
    });
    // Longer than one probe: it must still be waiting, not have exited into a restart loop.
    tokio::time::sleep(hookstream_kafka::PROBE_TIMEOUT + Duration::from_secs(3)).await;
    assert!(
        !run.is_finished(),
        "the dispatcher gave up on a Kafka that may come back"
    );
    let asked = std::time::Instant::now();
    shutdown.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("a SIGTERM ends the wait at once")
        .unwrap();
    ended.expect("stopping while waiting is a clean stop");
    assert!(asked.elapsed() < Duration::from_secs(2), "{:?}", asked.elapsed());
}

/// A topic the dispatcher writes to that does not exist (auto-creation is off, as on any
/// managed cluster) used to show only when the first dead letter or attempt record was
/// retried for ever, its partition stuck and `/healthz` green. It is refused at start, with
/// the topic named and exit code 2.
#[tokio::test]
async fn a_missing_dlq_or_attempts_topic_is_refused_at_start_naming_it() {
    let env = TestEnv::new(1).await.unwrap();
    for key in [
        "HOOKSTREAM_KAFKA__TOPICS__DLQ",
        "HOOKSTREAM_KAFKA__TOPICS__ATTEMPTS",
    ] {
        let absent = format!("{}-absent-{}", env.kafka.topics.events, key.len());
        let mut vars = dispatcher_env(&env);
        vars.push((key.into(), absent.clone()));
        let log = env.log_path(&format!("absent-{key}"));
        let mut p = ServiceProcess::spawn(Path::new(env!("CARGO_BIN_EXE_dispatcher")), &vars, &log).unwrap();
        let code = tokio::time::timeout(Duration::from_secs(30), p.wait())
            .await
            .unwrap_or_else(|_| panic!("{key}: still running with topic {absent} missing"));
        let output = std::fs::read_to_string(&log).unwrap();
        assert_eq!(code, Some(2), "{key}: {output}");
        assert!(
            output.contains(&format!("topic {absent} does not exist")),
            "{key}: names the topic: {output}"
        );
        assert!(output.contains("hookstream topics create"), "says how: {output}");
    }
}
