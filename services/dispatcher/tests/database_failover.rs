//! PostgreSQL stops answering on the dispatcher's connections without closing them (a
//! failover whose old primary went dark, a partition dropping packets) while the DLQ sink's
//! write is under way. Its one batch writer then waits on a socket nothing will answer (about
//! 15 minutes until the kernel gives up; for ever here), and every later dead letter waits
//! behind it, `/healthz` green. The write is given up after the statement timeout plus a
//! margin, and the sink's retry reaches the database on a new connection. Settings as shipped.
//!
//! To have the write under way at the cut, the test holds a lock on the dead-letter table:
//! the sink's insert waits for it on the server, the connections are cut, the lock is let go.
//!
//! The same for the routing snapshot's refresh: it holds the refresh lock while it reads, and
//! an event newer than the snapshot waits for a refresh, so a refresh cut under way would
//! stop every such event (an endpoint created after the cut would never get its events).
//!
//! And for an endpoint with a rate limit: its deliveries wait while a lease of the group's
//! tokens is taken from the database, so a lease under way at the cut held every one of them.
//! Now the replica's own bucket decides after `LEASE_ANSWER` (2 s), for 5 s at a time.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hookstream_store::outbox::NewEvent;
use hookstream_store::sqlx;
use hookstream_testkit::partition::Partition;
use hookstream_testkit::process::{dispatcher_env, ServiceProcess};
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common;

/// A dispatcher on `env` whose database connections go through a `Partition`, once ready;
/// its admin port and its log.
async fn dispatcher_through(env: &TestEnv) -> (ServiceProcess, Partition, u16, PathBuf) {
    let (partition, url) = Partition::database(&env.database.url).await.unwrap();
    let mut vars = dispatcher_env(env);
    vars.retain(|(k, _)| k != "HOOKSTREAM_DATABASE__URL");
    vars.push(("HOOKSTREAM_DATABASE__URL".into(), url));
    let log = env.log_path("dispatcher");
    let (dispatcher, port) =
        ServiceProcess::spawn_ready(Path::new(env!("CARGO_BIN_EXE_dispatcher")), &vars, &log).await;
    (dispatcher, partition, port, log)
}

/// `dispatcher_through`, and a relay on the test's own connection (cancel the token to stop it).
async fn dispatcher_and_relay(env: &TestEnv) -> (ServiceProcess, Partition, u16, PathBuf, CancellationToken) {
    let (dispatcher, partition, port, log) = dispatcher_through(env).await;
    let relay = CancellationToken::new();
    common::start_relay(env, &relay);
    (dispatcher, partition, port, log, relay)
}

/// Holds `table` locked (on the test's own connection, not through the partition) until the
/// transaction is rolled back.
async fn lock<'e>(env: &'e TestEnv, table: &str) -> sqlx::Transaction<'e, sqlx::Postgres> {
    let mut lock = env.pool.begin().await.unwrap();
    sqlx::query(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
        .execute(&mut *lock)
        .await
        .unwrap();
    lock
}

/// The end of every test: the dispatcher said why it gave a connection up, stayed healthy,
/// and stops cleanly.
async fn said_why_and_stops_cleanly(
    mut dispatcher: ServiceProcess,
    port: u16,
    log: &Path,
    relay: CancellationToken,
) {
    let output = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        output.contains("postgresql did not answer"),
        "the dispatcher says why: {output}"
    );
    if let Err(why) = dispatcher.healthy_for(port, Duration::from_secs(1)).await {
        panic!("the dispatcher stays healthy: {why}: {output}");
    }
    relay.cancel();
    let (code, _) = dispatcher.terminate_within(Duration::from_secs(60), log).await;
    assert_eq!(code, Some(0));
}

/// Whether a statement of another session matching `pattern` (SQL `LIKE`) waits for a lock.
async fn waits_on(env: &TestEnv, pattern: &str) -> bool {
    sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1",
    )
    .bind(pattern)
    .fetch_one(&env.pool)
    .await
    .unwrap()
        > 0
}

/// The statement timeout as shipped (30 s) and the margin, a new connection (the pool's idle
/// ones are dark too: each costs an acquire timeout, 10 s), a retry's backoff, and slack for
/// a loaded machine.
const RECOVERY: Duration = Duration::from_secs(35 + 30 + 15);

async fn dead_letters_of(env: &TestEnv, event: uuid::Uuid) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM hookstream.dead_letters WHERE event_id = $1")
        .bind(event)
        .fetch_one(&env.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_goes_dark_under_a_dlq_sink_write_does_not_stop_the_sink() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    // Every attempt is refused for good: each event is dead-lettered at once.
    let receiver = Receiver::start(Behaviour::Status(400)).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let (dispatcher, partition, port, log, relay) = dispatcher_and_relay(&env).await;
    let event = |i: i32| NewEvent::new(tenant, "order.created", json!({ "i": i }));

    let first = env.publish(&[event(0)]).await.unwrap()[0];
    assert!(
        eventually(Duration::from_secs(30), || async {
            dead_letters_of(&env, first).await == 1
        })
        .await,
        "the sink stores dead letters: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    let lock = lock(&env, "hookstream.dead_letters").await;
    let second = env.publish(&[event(1)]).await.unwrap()[0];
    assert!(
        eventually(Duration::from_secs(30), || waits_on(
            &env,
            "%INSERT INTO hookstream.dead_letters%"
        ))
        .await,
        "the sink's insert waits for the lock"
    );
    partition.cut();
    let cut = Instant::now();
    lock.rollback().await.unwrap();

    // A dead letter made after the cut: it waits behind the write that was cut.
    let third = env.publish(&[event(2)]).await.unwrap()[0];
    let stored = eventually(RECOVERY, || async {
        dead_letters_of(&env, third).await == 1 && dead_letters_of(&env, second).await == 1
    })
    .await;
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        stored,
        "the dead letter whose write was cut, and the one made after the cut, were stored within {RECOVERY:?} \
         ({} and {}): {output}",
        dead_letters_of(&env, second).await,
        dead_letters_of(&env, third).await
    );
    println!(
        "database gone dark: the DLQ sink stored both {:?} after the cut",
        cut.elapsed()
    );
    said_why_and_stops_cleanly(dispatcher, port, &log, relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_goes_dark_under_a_routing_refresh_does_not_stop_routing() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let first = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &first, &[]).await.unwrap();
    let (dispatcher, partition, port, log, relay) = dispatcher_and_relay(&env).await;
    let event = |i: i32| NewEvent::new(tenant, "order.created", json!({ "i": i }));
    env.publish(&[event(0)]).await.unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async { first.successes() == 1 }).await,
        "routing works: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    // The fallback refresh (every 5 s) reads the version first, alone, and waits for the
    // lock (the relay's claim, which reads it inside a larger statement, waits too).
    let lock = lock(&env, "hookstream.subscription_state").await;
    assert!(
        eventually(Duration::from_secs(30), || waits_on(
            &env,
            "SELECT version FROM hookstream.subscription_state"
        ))
        .await,
        "a refresh waits for the lock"
    );
    partition.cut();
    let cut = Instant::now();
    lock.rollback().await.unwrap();

    // An endpoint created after the cut: its event is newer than the snapshot, so routing it
    // waits for a refresh.
    let second = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &second, &[]).await.unwrap();
    env.publish(&[event(1)]).await.unwrap();
    let routed = eventually(RECOVERY, || async { second.successes() == 1 }).await;
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        routed,
        "the event for the endpoint created after the cut was delivered within {RECOVERY:?}: {output}"
    );
    println!(
        "database gone dark: routing refreshed again {:?} after the cut",
        cut.elapsed()
    );
    said_why_and_stops_cleanly(dispatcher, port, &log, relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_goes_dark_does_not_stop_a_rate_limited_endpoint() {
    const RATE: i32 = 50;
    const EVENTS: i32 = 40;
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    let limited = hookstream_store::endpoints::NewEndpoint {
        tenant_id: tenant,
        rate_limit_per_s: Some(RATE),
        ..Default::default()
    };
    env.endpoint_with(&receiver, limited).await.unwrap();
    let (dispatcher, partition, port, log, relay) = dispatcher_and_relay(&env).await;
    let event = |i: i32| NewEvent::new(tenant, "order.created", json!({ "i": i }));
    env.publish(&[event(0)]).await.unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async { receiver.successes() == 1 }).await,
        "the endpoint's first event is delivered under a lease: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    // The lease taken for the first event lapses within its window (1 s); the next one waits
    // for the lock on the server, and is under way at the cut.
    let lock = lock(&env, "hookstream.rate_windows").await;
    env.publish(&(1..=EVENTS).map(event).collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || waits_on(&env, "%take_rate_tokens%")).await,
        "a lease waits for the lock"
    );
    partition.cut();
    let cut = Instant::now();
    lock.rollback().await.unwrap();
    // Two seconds for the lease given up, the events at the endpoint's rate, and slack.
    let within = Duration::from_secs(2 + (EVENTS / RATE) as u64 + 15);
    let delivered = eventually(within, || async { receiver.successes() == 1 + EVENTS as usize }).await;
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        delivered,
        "{} of {EVENTS} events delivered to the rate-limited endpoint within {within:?} of the cut: {output}",
        receiver.successes() - 1
    );
    println!(
        "database gone dark: the rate-limited endpoint got every event {:?} after the cut",
        cut.elapsed()
    );
    assert!(
        output.contains("this replica's own buckets decide"),
        "the dispatcher says the group's limits are not in force: {output}"
    );
    said_why_and_stops_cleanly(dispatcher, port, &log, relay).await;
}
