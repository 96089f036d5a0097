//! In-process services for the dispatcher's integration tests.

#![allow(dead_code)] // each test binary uses a part

use hookstream_testkit::TestEnv;
use tokio_util::sync::CancellationToken;

/// A dispatcher configuration for this test's database, topics and retry tiers.
pub fn dispatcher_config(env: &TestEnv) -> dispatcher::Config {
    dispatcher::Config {
        database: env.database.clone(),
        kafka: env.kafka.clone(),
        retry: env.retry.clone(),
        dlq: dispatcher::dlq_sink::DlqConfig {
            sink_group_id: env.dlq_sink_group(),
            ..Default::default()
        },
        attempts: dispatcher::attempt_sink::AttemptsConfig {
            sink_group_id: env.attempt_sink_group(),
            ..Default::default()
        },
        secrets: env.secrets.clone(),
        ..Default::default()
    }
}

/// `dispatcher_config` with a compressed retry schedule (no jitter, 1 s throttle minimum)
/// and loopback receivers allow-listed.
pub fn retrying_config(env: &TestEnv, schedule_ms: Vec<u64>) -> dispatcher::Config {
    let mut cfg = dispatcher_config(env);
    cfg.retry = hookstream_config::RetryConfig {
        schedule_ms,
        jitter: 0.0,
        min_throttled_delay_ms: 1_000,
        ..env.retry.clone()
    };
    cfg.delivery.allow_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    cfg
}

/// Runs an outbox-relay in this process until the token is cancelled.
pub fn start_relay(env: &TestEnv, token: &CancellationToken) {
    start_relay_with(env, env.kafka.clone(), token)
}

/// `start_relay`, reaching Kafka as `kafka` says (another listener, credentials).
pub fn start_relay_with(env: &TestEnv, kafka: hookstream_config::KafkaConfig, token: &CancellationToken) {
    drop(spawn_relay(env, kafka, token));
}

/// `start_relay_with`, with a handle that finishes once the relay has stopped (for a test
/// that must not leave it running against a broker it is about to take away).
pub fn spawn_relay(
    env: &TestEnv,
    kafka: hookstream_config::KafkaConfig,
    token: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let cfg = outbox_relay::Config {
        database: env.database.clone(),
        secrets: env.secrets.clone(),
        kafka,
        ..Default::default()
    };
    let t = token.clone();
    tokio::spawn(async move {
        outbox_relay::run(cfg, &prometheus::Registry::new(), Default::default(), t)
            .await
            .expect("relay runs");
    })
}

/// Runs a relay and a dispatcher with `cfg` in this process; cancel the token to stop both.
pub fn start_pipeline(env: &TestEnv, cfg: dispatcher::Config) -> CancellationToken {
    start_observed_pipeline(env, cfg, prometheus::Registry::new())
}

/// `start_pipeline`, with the dispatcher's metrics registered in `registry`.
pub fn start_observed_pipeline(
    env: &TestEnv,
    cfg: dispatcher::Config,
    registry: prometheus::Registry,
) -> CancellationToken {
    let token = CancellationToken::new();
    start_relay(env, &token);
    let t = token.clone();
    tokio::spawn(async move {
        dispatcher::run(cfg, &registry, Default::default(), t)
            .await
            .expect("dispatcher runs");
    });
    token
}

/// The value of metric `name`, summed over the series whose labels include every `labels`
/// pair (read from the text exposition, as Prometheus would).
pub fn metric(registry: &prometheus::Registry, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("metrics encode");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}
