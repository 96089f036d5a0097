//! Kafka stopped for 30 seconds under load: the backlog grows in the outbox, then drains by
//! itself when Kafka is back; nothing is lost. And Kafka frozen (connections open, nothing
//! answered) while the relay stops: it exits within its drain deadline, and what it had not
//! shipped is shipped by the next relay. Each runs its own broker (`testkit::broker`).

use std::path::Path;
use std::time::Duration;

use hookstream_testkit::broker::PrivateKafka;
use hookstream_testkit::process::{service_env, ServiceProcess};
use hookstream_testkit::{eventually, TestEnv};

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_down_for_thirty_seconds_under_load_loses_nothing() {
    let kafka = PrivateKafka::start();
    let env = TestEnv::on_brokers(3, &kafka.brokers()).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let mut vars = service_env(&env);
    vars.push(("HOOKSTREAM_RELAY__MAX_BACKOFF_MS".into(), "2000".into()));
    vars.push(("HOOKSTREAM_RELAY__PRODUCE_TIMEOUT_MS".into(), "5000".into()));
    let relay = ServiceProcess::spawn(
        Path::new(env!("CARGO_BIN_EXE_outbox-relay")),
        &vars,
        &env.log_path("relay"),
    )
    .unwrap();

    let mut published = Vec::new();
    let publish = |n: usize| common::publish(&env, tenant, n);
    for _ in 0..10 {
        published.extend(publish(100).await);
    }
    assert!(
        eventually(Duration::from_secs(30), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await
    );

    kafka.stop();
    let down = std::time::Instant::now();
    while down.elapsed() < Duration::from_secs(30) {
        published.extend(publish(100).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let backlog = env.outbox_len().await.unwrap();
    assert!(
        backlog >= 5_000,
        "rows stay in the outbox while Kafka is down (backlog {backlog})"
    );
    kafka.resume();
    assert!(
        eventually(Duration::from_secs(90), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "the backlog drained by itself after Kafka came back"
    );
    let duplicates = common::all_in_kafka(&env, &published).await;
    println!(
        "kafka outage: {} events, backlog peaked at {backlog}, {} duplicate records",
        published.len(),
        duplicates
    );
    assert_eq!(relay.terminate().await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_hangs_while_the_relay_stops_does_not_hold_its_exit_and_loses_nothing() {
    let kafka = PrivateKafka::start();
    let env = TestEnv::on_brokers(3, &kafka.brokers()).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let mut vars = service_env(&env);
    vars.push(("HOOKSTREAM_RELAY__PRODUCE_TIMEOUT_MS".into(), "5000".into()));
    let spawn = |name: &str| {
        ServiceProcess::spawn(
            Path::new(env!("CARGO_BIN_EXE_outbox-relay")),
            &vars,
            &env.log_path(name),
        )
        .unwrap()
    };
    let relay = spawn("relay");
    let mut published = common::publish(&env, tenant, 500).await;
    assert!(
        eventually(Duration::from_secs(30), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "the first rows shipped"
    );
    kafka.freeze();
    // Rows the relay takes and cannot get acknowledged: its batch is under way when it stops.
    published.extend(common::publish(&env, tenant, 500).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = env.log_path("relay");
    let (code, took) = relay.terminate_within(Duration::from_secs(180), &log).await;
    println!("SIGTERM with the broker frozen: the relay exited {code:?} after {took:?}");
    // The chart's drain for the relay (produce timeout + 10 s + the 5 s flush), the runtime's
    // wait for blocking calls, and a few seconds for a loaded machine.
    let bound =
        Duration::from_secs(5 + 10 + 5) + hookstream_telemetry::RUNTIME_SHUTDOWN + Duration::from_secs(5);
    assert!(
        took < bound,
        "exited {took:?} after SIGTERM (bound {bound:?}): {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        env.outbox_len().await.unwrap() > 0,
        "rows not acknowledged stay in the outbox"
    );

    kafka.thaw();
    let next = spawn("relay-2");
    assert!(
        eventually(Duration::from_secs(90), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "the next relay ships what was left"
    );
    common::all_in_kafka(&env, &published).await;
    assert_eq!(next.terminate().await, Some(0));
}
