//! Nothing dies silently: a role that stops at run time makes `/healthz` and `/readyz`
//! answer 503 with the reason, the other roles drain, and the process exits non-zero (an
//! orchestrator restarts it). The failure here is real, not injected: the dispatcher runs with
//! a static `group.instance.id` (as operators set to avoid rebalances on restarts), and
//! another consumer joins the retry role's group with the same id, which fences the retry
//! role's consumer (a fatal consumer error). Before, the role's error surfaced only at
//! shutdown and `/healthz` said ok while its records waited for retention to delete them.

use std::path::Path;
use std::time::Duration;

use hookstream_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::process::{admin_get as get, dispatcher_env, free_port, ServiceProcess};
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_dies_at_run_time_fails_health_and_the_process_exits_non_zero() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    // A slow receiver keeps the events role busy while the process drains, so the failed
    // health can be seen before the process exits.
    let slow = Receiver::start(Behaviour::Delay(4_000)).await;
    env.endpoint(tenant, &slow, &[]).await.unwrap();
    let instance = format!("static-{}", uuid::Uuid::new_v4().simple());
    let config = env.log_path("dispatcher.toml");
    std::fs::write(
        &config,
        format!("[kafka.client]\n\"group.instance.id\" = \"{instance}\"\n"),
    )
    .unwrap();
    let port = free_port();
    let mut vars = dispatcher_env(&env);
    vars.push(("HOOKSTREAM_CONFIG".into(), config.display().to_string()));
    vars.push(("HOOKSTREAM_TELEMETRY__LISTEN".into(), format!("127.0.0.1:{port}")));
    vars.push(("HOOKSTREAM_DISPATCHER__SHUTDOWN_GRACE_MS".into(), "8000".into()));
    let mut dispatcher = ServiceProcess::spawn(
        Path::new(env!("CARGO_BIN_EXE_dispatcher")),
        &vars,
        &env.log_path("dispatcher"),
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            get(port, "/readyz").await.map(|r| r.0) == Some(200)
        })
        .await,
        "the dispatcher becomes ready"
    );
    assert_eq!(get(port, "/healthz").await.map(|r| r.0), Some(200));
    let relay = CancellationToken::new();
    common::start_relay(&env, &relay);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || async { slow.count() == 1 }).await);

    // Another member with the same static id joins the retry role's group.
    let (kafka, group, tier) = (
        env.kafka.clone(),
        env.retry.group_id.clone(),
        env.retry.tiers()[0].topic.clone(),
    );
    let rival_instance = instance.clone();
    let stop_rival = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = stop_rival.clone();
    let rival = tokio::task::spawn_blocking(move || {
        let mut cfg = hookstream_kafka::consumer_config(&kafka, &group);
        cfg.set("group.instance.id", &rival_instance);
        let consumer: BaseConsumer = cfg.create().unwrap();
        consumer.subscribe(&[tier.as_str()]).unwrap();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = consumer.poll(Duration::from_millis(100));
        }
    });

    // The fenced role fails the process's health while the rest drains...
    let body = dispatcher
        .unhealthy_within(port, Duration::from_secs(60))
        .await
        .expect("/healthz turned 503 before the process exited");
    assert!(body.contains("retry role"), "the reason names the role: {body}");
    assert_eq!(
        get(port, "/readyz").await.map(|r| r.0),
        Some(503),
        "not ready either"
    );
    // ...and the process exits non-zero once it has drained.
    let code = dispatcher.wait().await;
    assert_eq!(code, Some(1), "exit code of a failed service");
    let log = std::fs::read_to_string(env.log_path("dispatcher")).unwrap();
    assert!(
        log.contains("task stopped unexpectedly") && log.contains("retry role"),
        "the failure is logged"
    );
    stop_rival.store(true, std::sync::atomic::Ordering::Relaxed);
    rival.await.unwrap();
    relay.cancel();
}
