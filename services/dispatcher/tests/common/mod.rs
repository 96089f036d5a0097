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
        ..Default::default()
    }
}

/// Runs an outbox-relay in this process until the token is cancelled.
pub fn start_relay(env: &TestEnv, token: &CancellationToken) {
    let cfg = outbox_relay::Config {
        database: env.database.clone(),
        kafka: env.kafka.clone(),
        ..Default::default()
    };
    let t = token.clone();
    tokio::spawn(async move {
        outbox_relay::run(cfg, &prometheus::Registry::new(), Default::default(), t)
            .await
            .expect("relay runs");
    });
}

/// Runs a relay and a dispatcher with `cfg` in this process; cancel the token to stop both.
pub fn start_pipeline(env: &TestEnv, cfg: dispatcher::Config) -> CancellationToken {
    let token = CancellationToken::new();
    start_relay(env, &token);
    let t = token.clone();
    tokio::spawn(async move {
        dispatcher::run(cfg, &prometheus::Registry::new(), Default::default(), t)
            .await
            .expect("dispatcher runs");
    });
    token
}
