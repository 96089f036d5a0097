//! A topic lost while the dispatcher runs (deleted, or its ACL revoked). Before, a dead
//! letter's hand-off to a deleted DLQ topic was retried every 30 s for ever: the event's
//! partition stuck, `/healthz` green, the process running. Now the broker is asked, and once
//! it has said for `lost::CONFIRM_FOR` that the topic is gone the process turns unhealthy,
//! names the topic and exits; nothing is lost, since the event's offset was never stored.
//! Both ways of finding out are tested alone: a hand-off that is never acknowledged (the
//! events role, as the chart's scaled dispatchers run it) and a consumer whose topic is gone
//! (the DLQ sink).

use std::path::Path;
use std::time::{Duration, Instant};

use hookstream_store::outbox::NewEvent;
use hookstream_testkit::process::{admin_get, dispatcher_env, free_port, ServiceProcess};
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlq_topic_deleted_at_run_time_stops_the_dispatcher_naming_it_and_loses_nothing() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let refusing = Receiver::start(Behaviour::Status(400)).await;
    env.endpoint(tenant, &refusing, &[]).await.unwrap();
    let port = free_port();
    let mut vars = dispatcher_env(&env);
    vars.push(("HOOKSTREAM_TELEMETRY__LISTEN".into(), format!("127.0.0.1:{port}")));
    // Not the DLQ sink: its consumer would find the loss too.
    vars.push((
        "HOOKSTREAM_DISPATCHER__ROLES".into(),
        r#"["events", "retry"]"#.into(),
    ));
    let log = env.log_path("dispatcher");
    let bin = Path::new(env!("CARGO_BIN_EXE_dispatcher"));
    let mut dispatcher = ServiceProcess::spawn(bin, &vars, &log).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            admin_get(port, "/readyz").await.map(|r| r.0) == Some(200)
        })
        .await,
        "the dispatcher becomes ready"
    );

    env.delete_topic(&env.kafka.topics.dlq).await.unwrap();
    let relay = CancellationToken::new();
    common::start_relay(&env, &relay);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || async { refusing.count() == 1 }).await);

    // The 400 dead-letters the event; its hand-off cannot be acknowledged. Within the
    // producer's timeout (30 s), the confirmation (20 s) and a drain, the process says why and
    // exits.
    let started = Instant::now();
    let unhealthy = dispatcher.unhealthy_within(port, Duration::from_secs(150)).await;
    let body = unhealthy.unwrap_or_else(|| {
        panic!(
            "/healthz did not turn 503 within {:?}: {}",
            started.elapsed(),
            std::fs::read_to_string(&log).unwrap()
        )
    });
    let dlq = &env.kafka.topics.dlq;
    assert!(
        body.contains(&format!("topic {dlq} does not exist")) && body.contains("events role"),
        "/healthz names the lost topic and the role whose hand-off found it: {body}"
    );
    let code = tokio::time::timeout(Duration::from_secs(60), dispatcher.wait())
        .await
        .expect("exits once drained");
    assert_eq!(code, Some(1), "exit code of a failed service");
    let output = std::fs::read_to_string(&log).unwrap();
    assert!(
        output.contains(&format!("topic {dlq} does not exist")),
        "the log names the topic: {output}"
    );
    eprintln!("unhealthy {:?} after the delivery", started.elapsed());
    assert_eq!(
        env.committed_offsets(&env.kafka.topics.events).await.unwrap(),
        vec![-1],
        "the event's offset was not stored"
    );

    // Restarted without the topic, it refuses to start, naming it...
    let mut again = ServiceProcess::spawn(bin, &dispatcher_env(&env), &env.log_path("restarted")).unwrap();
    let code = tokio::time::timeout(Duration::from_secs(30), again.wait())
        .await
        .expect("refused at start");
    assert_eq!(code, Some(2));
    // ...and once the topic is back the event is dead-lettered after all.
    env.create_main_topics().await.unwrap();
    let _back = ServiceProcess::spawn(bin, &dispatcher_env(&env), &env.log_path("back")).unwrap();
    assert!(
        eventually(Duration::from_secs(60), || async {
            env.read_all(dlq).await.map(|r| r.len()).unwrap_or(0) == 1
        })
        .await,
        "the dead letter reaches the DLQ"
    );
    relay.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumed_topic_deleted_at_run_time_stops_the_dispatcher_naming_it() {
    let env = TestEnv::new(1).await.unwrap();
    let mut vars = dispatcher_env(&env);
    vars.push(("HOOKSTREAM_DISPATCHER__ROLES".into(), r#"["dlq_sink"]"#.into()));
    let log = env.log_path("dlq-sink");
    let mut sink = ServiceProcess::spawn(Path::new(env!("CARGO_BIN_EXE_dispatcher")), &vars, &log).unwrap();
    let dlq = &env.kafka.topics.dlq;
    assert!(
        eventually(Duration::from_secs(30), || async {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("partitions assigned"))
        })
        .await,
        "the DLQ sink consumes"
    );
    env.delete_topic(dlq).await.unwrap();
    let code = tokio::time::timeout(Duration::from_secs(120), sink.wait())
        .await
        .unwrap_or_else(|_| panic!("still running: {}", std::fs::read_to_string(&log).unwrap()));
    let output = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains(&format!("dlq_sink consumer failed: topic {dlq} does not exist")),
        "names the role and the topic: {output}"
    );
}
