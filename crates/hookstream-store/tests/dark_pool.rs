//! A pooled connection given up on a server gone dark (`answered`) must free its pool slot.
//! sqlx tests a released connection with a ping that has no deadline; against a dark server
//! (here a `Partition` that reads and drops what the client sends) that ping never returns,
//! and with the pool's one slot taken every later `acquire` times out: the service could
//! never reach the new primary. Real PostgreSQL (`HOOKSTREAM_TEST_DATABASE_URL`).
//!
//! A statement timeout of 2 s (answer deadline 7 s) instead of the shipped 30 s (35 s) keeps
//! the test short; the services' own failover tests run with the shipped settings.

use std::time::{Duration, Instant};

use hookstream_config::DatabaseConfig;
use hookstream_store::{answered, sqlx, StoreError};
use hookstream_testkit::partition::Partition;

fn database_url() -> String {
    std::env::var("HOOKSTREAM_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

#[tokio::test]
async fn a_connection_given_up_on_a_dark_server_frees_its_pool_slot() {
    let (partition, url) = Partition::database(&database_url()).await.unwrap();
    let cfg = DatabaseConfig {
        url,
        max_connections: 1,
        migrate_on_start: false,
        statement_timeout_ms: 2_000,
        acquire_timeout_ms: 60_000,
        ..Default::default()
    };
    let deadline = cfg.answer_deadline();
    let pool = hookstream_store::connect(&cfg).await.unwrap();
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *conn).await.unwrap();

    partition.cut();
    let started = Instant::now();
    let given_up = answered(deadline, sqlx::query("SELECT 1").execute(&mut *conn)).await;
    assert!(
        matches!(given_up, Err(StoreError::Unanswered(_))),
        "the round trip is given up: {given_up:?}"
    );
    assert!(started.elapsed() < deadline + Duration::from_secs(2));

    // Back to the pool with the answer never read: the release check gives it up too, and
    // the slot serves a new connection, which reaches the server (the new primary).
    drop(conn);
    let released = Instant::now();
    let next = tokio::time::timeout(deadline * 3, pool.acquire())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the pool's one slot is still taken {:?} after the release",
                deadline * 3
            )
        })
        .expect("a new connection");
    let waited = released.elapsed();
    assert!(
        waited < deadline + Duration::from_secs(5),
        "the slot was freed {waited:?} after the release (deadline {deadline:?})"
    );
    let mut next = next;
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut *next)
        .await
        .unwrap();
    assert_eq!(one, 1);
}
