//! The attempt sink under faults (real Kafka and PostgreSQL): delivery never waits for it (it
//! goes on with no sink at all, and while the sink cannot reach the database); the sink lags,
//! exports its lag, waits out a database it cannot log in to, and catches up storing every
//! attempt once; a sink process SIGKILLed while it stores loses nothing and stores nothing
//! twice; while the runtime that delivers is kept busy, the sink stores nothing, and it stores
//! everything once that eases; a sink whose consumer fails while the database is away says so
//! at once, not when the database is back.

use std::path::Path;
use std::time::Duration;

use hookstream_store::outbox::NewEvent;
use hookstream_store::sqlx;
use hookstream_testkit::process::{dispatcher_env, ServiceProcess};
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use prometheus::Registry;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::common;

/// Attempts stored, and how many distinct (event, endpoint, attempt) they are.
async fn stored(env: &TestEnv) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*), count(DISTINCT (event_id, endpoint_id, attempt)) FROM hookstream.attempts",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap()
}

async fn publish(env: &TestEnv, tenant: Uuid, n: usize, from: usize) -> Vec<Uuid> {
    let events: Vec<NewEvent> = (from..from + n)
        .map(|i| NewEvent::new(tenant, "order.created", json!({ "n": i })).aggregate("order", i.to_string()))
        .collect();
    let mut ids = Vec::new();
    for chunk in events.chunks(500) {
        ids.extend(env.publish(chunk).await.unwrap());
    }
    ids
}

/// Runs a relay and an events-only dispatcher (the attempt log on, no sink).
fn start_delivery(env: &TestEnv) -> CancellationToken {
    let mut cfg = common::dispatcher_config(env);
    cfg.delivery.allow_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    cfg.dispatcher.roles = vec![dispatcher::Role::Events];
    common::start_pipeline(env, cfg)
}

/// A dispatcher running only the attempt sink, in this process (on the test's runtime).
struct InProcessSink {
    registry: Registry,
    health: hookstream_telemetry::Health,
    token: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), dispatcher::DispatchError>>,
}

fn sink_in_process(mut cfg: dispatcher::Config) -> InProcessSink {
    cfg.dispatcher.roles = vec![dispatcher::Role::AttemptSink];
    let registry = Registry::new();
    let health = hookstream_telemetry::Health::default();
    let token = CancellationToken::new();
    let task = {
        let (registry, health, t) = (registry.clone(), health.clone(), token.clone());
        tokio::spawn(async move { dispatcher::run(cfg, &registry, health, t).await })
    };
    InProcessSink {
        registry,
        health,
        token,
        task,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_goes_on_without_the_sink_which_lags_waits_out_the_database_and_catches_up() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let delivery = start_delivery(&env);

    // No sink anywhere: every event is delivered all the same.
    publish(&env, tenant, 1_000, 0).await;
    assert!(
        eventually(Duration::from_secs(60), || async {
            receiver.distinct().0.len() == 1_000
        })
        .await,
        "delivered without a sink: {}",
        receiver.distinct().0.len()
    );
    assert_eq!(stored(&env).await, (0, 0), "nothing stores the log yet");

    // The sink starts and catches up.
    let (role, database) = env.login_role("sink").await.unwrap();
    let mut cfg = common::dispatcher_config(&env);
    cfg.database = database;
    let sink = sink_in_process(cfg);
    assert!(
        eventually(Duration::from_secs(60), || async {
            stored(&env).await.0 == 1_000
        })
        .await,
        "caught up: {:?}",
        stored(&env).await
    );

    // The database goes away from the sink; delivery goes on, the sink waits and lags.
    env.set_reachable(&role, false).await.unwrap();
    publish(&env, tenant, 1_000, 1_000).await;
    assert!(
        eventually(Duration::from_secs(60), || async {
            receiver.distinct().0.len() == 2_000
        })
        .await,
        "delivered while the sink cannot write: {}",
        receiver.distinct().0.len()
    );
    // The sink measures its lag every 5 s.
    assert!(
        eventually(Duration::from_secs(15), || async {
            common::metric(
                &sink.registry,
                "kafka_consumergroup_lag",
                &[("role", "attempt_sink")],
            ) > 0.0
        })
        .await,
        "the sink's lag shows"
    );
    assert_eq!(
        stored(&env).await.0,
        1_000,
        "nothing stored while the database is away"
    );
    assert!(
        sink.health.failure().is_none(),
        "an outage is waited out, not a failure"
    );
    assert!(!sink.task.is_finished(), "the sink runs on");

    // Back: every attempt stored once, and the lag is gone.
    env.set_reachable(&role, true).await.unwrap();
    assert!(
        eventually(Duration::from_secs(90), || async {
            stored(&env).await.0 >= 2_000
        })
        .await,
        "caught up again: {:?}",
        stored(&env).await
    );
    assert!(
        eventually(Duration::from_secs(30), || async {
            common::metric(
                &sink.registry,
                "kafka_consumergroup_lag",
                &[("role", "attempt_sink")],
            ) == 0.0
        })
        .await,
        "lag back to 0"
    );
    assert_eq!(stored(&env).await, (2_000, 2_000), "each attempt stored once");

    sink.token.cancel();
    sink.task.await.unwrap().expect("the sink stops cleanly");
    delivery.cancel();
    sqlx::query(&format!("DROP ROLE IF EXISTS {role}"))
        .execute(&env.pool)
        .await
        .ok();
}

/// The sink's consumer fails (its topic deleted) while its writes wait out a database outage.
/// Before `d047d06` the sink's task waited for its writer, whose last handles the consumer's
/// stuck tasks held until the database came back: `/healthz` stayed green for the whole
/// outage. The consumer's failure is now reported first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_whose_consumer_fails_during_a_database_outage_reports_it_at_once() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let delivery = start_delivery(&env);
    let (role, database) = env.login_role("sink").await.unwrap();
    let mut cfg = common::dispatcher_config(&env);
    cfg.database = database;
    let sink = sink_in_process(cfg);
    publish(&env, tenant, 100, 0).await;
    assert!(
        eventually(Duration::from_secs(60), || async { stored(&env).await.0 == 100 }).await,
        "the sink stores"
    );

    env.set_reachable(&role, false).await.unwrap();
    publish(&env, tenant, 100, 100).await;
    assert!(
        eventually(Duration::from_secs(60), || async {
            receiver.distinct().0.len() == 200
        })
        .await,
        "delivered while the sink cannot write"
    );
    // The sink has read some of the new attempts and waits to write them.
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.delete_topic(&env.kafka.topics.attempts).await.unwrap();
    let started = std::time::Instant::now();
    assert!(
        eventually(Duration::from_secs(120), || async {
            sink.health.failure().is_some()
        })
        .await,
        "the failed consumer is reported while the database is still away"
    );
    let failure = sink.health.failure().unwrap();
    eprintln!(
        "reported {:?} after the topic was deleted: {failure}",
        started.elapsed()
    );
    assert!(
        failure.contains(&format!("topic {} does not exist", env.kafka.topics.attempts)),
        "{failure}"
    );
    assert_eq!(stored(&env).await.0, 100, "the database was away all along");
    let ended = tokio::time::timeout(Duration::from_secs(60), sink.task)
        .await
        .expect("the sink's process ends");
    assert!(ended.unwrap().is_err(), "with an error");

    env.set_reachable(&role, true).await.unwrap();
    delivery.cancel();
    sqlx::query(&format!("DROP ROLE IF EXISTS {role}"))
        .execute(&env.pool)
        .await
        .ok();
}

fn spawn_sink(env: &TestEnv, name: &str) -> ServiceProcess {
    let mut vars = dispatcher_env(env);
    vars.push(("HOOKSTREAM_DISPATCHER__ROLES".into(), "[\"attempt_sink\"]".into()));
    ServiceProcess::spawn(
        Path::new(env!("CARGO_BIN_EXE_dispatcher")),
        &vars,
        &env.log_path(name),
    )
    .expect("start the sink")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_sigkilled_while_it_stores_loses_nothing_and_stores_nothing_twice() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let delivery = start_delivery(&env);
    publish(&env, tenant, 5_000, 0).await;
    assert!(
        eventually(Duration::from_secs(90), || async {
            receiver.distinct().0.len() == 5_000
        })
        .await,
        "delivered: {}",
        receiver.distinct().0.len()
    );
    let attempts_made = receiver.count() as i64;

    // Three sinks killed while they store, each as soon as it stored more than the one
    // before (watched every 5 ms: a batch is 500 rows, the backlog ten batches).
    let mut before = 0;
    for kill in 0..3 {
        let sink = spawn_sink(&env, &format!("sink-{kill}"));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while stored(&env).await.0 <= before && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sink.kill9().await;
        let (rows, _) = stored(&env).await;
        assert!(
            rows > before && rows < attempts_made,
            "killed mid-way: {rows} of {attempts_made} (kill {kill})"
        );
        before = rows;
    }
    let sink = spawn_sink(&env, "sink-last");
    assert!(
        eventually(Duration::from_secs(90), || async {
            stored(&env).await.0 >= attempts_made
        })
        .await,
        "caught up after the kills: {:?} of {attempts_made}",
        stored(&env).await
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        stored(&env).await,
        (attempts_made, attempts_made),
        "every attempt stored, once"
    );
    assert_eq!(sink.terminate().await, Some(0));
    delivery.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_delivery_is_pressed_the_sink_stores_nothing_and_it_stores_everything_once_that_eases() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let delivery = start_delivery(&env);

    // The sink in this process: the runtime it measures is this test's, which delivers.
    let mut cfg = common::dispatcher_config(&env);
    cfg.attempts.sink_hold_max_ms = 300_000;
    let sink = sink_in_process(cfg);

    // Both workers kept busy: delivery is pressed.
    let stop = CancellationToken::new();
    for _ in 0..2 {
        tokio::spawn(hookstream_testkit::busy::spin(stop.clone()));
    }
    assert!(
        eventually(Duration::from_secs(30), || async {
            common::metric(&sink.registry, "hookstream_dispatcher_delivery_busy_ratio", &[]) >= 0.5
        })
        .await,
        "the busy workers show"
    );
    publish(&env, tenant, 200, 0).await;
    assert!(
        eventually(Duration::from_secs(90), || async {
            receiver.distinct().0.len() == 200
        })
        .await,
        "delivered while pressed: {}",
        receiver.distinct().0.len()
    );
    assert!(
        eventually(Duration::from_secs(30), || async {
            common::metric(&sink.registry, "hookstream_attempt_sink_held_total", &[]) > 0.0
        })
        .await,
        "the sink read the attempts and held them"
    );
    // Unpressed, the sink stores 200 rows well within this.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(stored(&env).await, (0, 0), "nothing stored while pressed");

    // Eased: everything stored, once.
    stop.cancel();
    assert!(
        eventually(Duration::from_secs(60), || async { stored(&env).await.0 >= 200 }).await,
        "stored once delivery eased: {:?}",
        stored(&env).await
    );
    assert_eq!(stored(&env).await, (200, 200), "each attempt stored once");
    assert!(sink.health.failure().is_none());

    sink.token.cancel();
    sink.task.await.unwrap().expect("the sink stops cleanly");
    delivery.cancel();
}
