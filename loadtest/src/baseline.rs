//! The naive design `--baseline` compares with: a PostgreSQL queue table with one row per
//! delivery, written by the producer in its transaction, and pollers that claim batches of 50
//! rows with `SELECT … FOR UPDATE SKIP LOCKED`, POST each row (signed the same way, Standard
//! Webhooks v1, with the endpoint's timeout) one after the other, delete it on 2xx or push its
//! `not_before` along the same retry schedule otherwise, commit, and sleep `--sleep-ms`
//! between polls (0: the tuned variant, which only pauses 5 ms when a poll found nothing).
//!
//! The pollers run in a separate process (this binary, started with `ROLE_VAR` set), so its
//! CPU and memory are measured like the services'.

use std::time::Duration;

use anyhow::Context as _;
use hookstream_store::sqlx::{self, PgPool, Row as _};
use uuid::Uuid;

use crate::schedule::RETRY_SCHEDULE_MS;

/// Set in the environment of the poller process (a child of the load generator, started by
/// `engine.rs`): `main` then runs `worker_from_env` instead of the command line.
pub const ROLE_VAR: &str = "LOADTEST_BASELINE_WORKER";
const DATABASE_URL_VAR: &str = "LOADTEST_BASELINE_DATABASE_URL";
const SLEEP_MS_VAR: &str = "LOADTEST_BASELINE_SLEEP_MS";
const WORKERS_VAR: &str = "LOADTEST_BASELINE_WORKERS";

/// The environment of a poller process: its role, database, sleep between polls and pollers.
pub fn worker_env(database_url: &str, sleep_ms: u64, workers: usize) -> Vec<(String, String)> {
    [
        (ROLE_VAR, "1".to_string()),
        (DATABASE_URL_VAR, database_url.to_string()),
        (SLEEP_MS_VAR, sleep_ms.to_string()),
        (WORKERS_VAR, workers.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The poller process, configured by `worker_env`'s variables.
pub async fn worker_from_env() -> anyhow::Result<()> {
    let var = |k: &str| std::env::var(k).map_err(|_| anyhow::anyhow!("{k} is not set"));
    let url = var(DATABASE_URL_VAR)?;
    let sleep_ms: u64 = var(SLEEP_MS_VAR)?.parse()?;
    let workers: usize = var(WORKERS_VAR)?.parse()?;
    worker(&url, workers, sleep_ms).await
}

/// Rows one poll claims.
pub const BATCH: i64 = 50;

pub const DDL: &str = "CREATE TABLE loadtest_baseline_queue (
    id bigserial PRIMARY KEY,
    url text NOT NULL,
    secret text NOT NULL,
    timeout_ms int NOT NULL,
    event_id uuid NOT NULL,
    payload text NOT NULL,
    attempts int NOT NULL DEFAULT 0,
    not_before timestamptz NOT NULL DEFAULT now())";

/// Where a queue row is POSTed: the endpoint's URL, signing secret and request timeout.
pub struct Target {
    pub url: String,
    pub secret: String,
    pub timeout_ms: i32,
}

/// `n` events, one queue row per endpoint, in one transaction (the producer's).
pub async fn enqueue(pool: &PgPool, endpoints: &[Target], n: usize) -> anyhow::Result<()> {
    let urls: Vec<&str> = endpoints.iter().map(|e| e.url.as_str()).collect();
    let secrets: Vec<&str> = endpoints.iter().map(|e| e.secret.as_str()).collect();
    let timeouts: Vec<i32> = endpoints.iter().map(|e| e.timeout_ms).collect();
    sqlx::query(
        "INSERT INTO loadtest_baseline_queue (url, secret, timeout_ms, event_id, payload)
         SELECT e.url, e.secret, e.timeout_ms, ev.id, ev.payload
           FROM unnest($1::text[], $2::text[], $4::int[]) AS e(url, secret, timeout_ms)
           CROSS JOIN (SELECT gen_random_uuid() AS id,
                              jsonb_build_object('n', g, 'note', 'a typical small webhook payload', 'amount', g * 3,
                                                 'created_ms', extract(epoch FROM clock_timestamp()) * 1000)::text AS payload
                         FROM generate_series(1, $3) g) AS ev",
    )
    .bind(&urls)
    .bind(&secrets)
    .bind(i32::try_from(n).context("batch too large")?)
    .bind(&timeouts)
    .execute(pool)
    .await?;
    Ok(())
}

pub async fn backlog(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM loadtest_baseline_queue")
        .fetch_one(pool)
        .await?)
}

/// The poller process: `workers` pollers until killed.
async fn worker(database_url: &str, workers: usize, sleep_ms: u64) -> anyhow::Result<()> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(u32::try_from(workers).unwrap_or(u32::MAX).saturating_add(1))
        .connect(database_url)
        .await
        .context("connecting to PostgreSQL")?;
    let client = reqwest::Client::builder().build()?;
    let mut tasks = Vec::new();
    for _ in 0..workers.max(1) {
        let (pool, client) = (pool.clone(), client.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let claimed = match poll(&pool, &client).await {
                    Ok(n) => n,
                    Err(e) => {
                        eprintln!("baseline poll failed: {e:#}");
                        0
                    }
                };
                let pause = if sleep_ms > 0 {
                    sleep_ms
                } else if claimed == 0 {
                    5
                } else {
                    0
                };
                if pause > 0 {
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok(())
}

/// One poll: claim a batch, POST each row, delete or reschedule, commit. Returns the rows claimed.
async fn poll(pool: &PgPool, client: &reqwest::Client) -> anyhow::Result<usize> {
    let mut tx = pool.begin().await?;
    let rows = sqlx::query(
        "SELECT id, url, secret, timeout_ms, event_id, payload, attempts FROM loadtest_baseline_queue
          WHERE not_before <= now() ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
    )
    .bind(BATCH)
    .fetch_all(&mut *tx)
    .await?;
    let claimed = rows.len();
    for row in rows {
        let id: i64 = row.try_get("id")?;
        let url: String = row.try_get("url")?;
        let secret = hookstream_signing::Secret::parse(&row.try_get::<String, _>("secret")?)?;
        let event_id: Uuid = row.try_get("event_id")?;
        let payload: String = row.try_get("payload")?;
        let attempts: i32 = row.try_get("attempts")?;
        let timeout_ms: i32 = row.try_get("timeout_ms")?;
        let id_text = event_id.to_string();
        let ts = chrono::Utc::now().timestamp();
        let signature = hookstream_signing::signature_header([&secret], &id_text, ts, payload.as_bytes());
        let ok = client
            .post(&url)
            .header("content-type", "application/json")
            .header("webhook-id", &id_text)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", signature)
            .header("hookstream-attempt", (attempts + 1).to_string())
            .timeout(Duration::from_millis(
                u64::try_from(timeout_ms).unwrap_or(1).max(1),
            ))
            .body(payload)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        let delay = RETRY_SCHEDULE_MS.get(usize::try_from(attempts).unwrap_or(usize::MAX));
        match (ok, delay) {
            (false, Some(ms)) => {
                sqlx::query(
                    "UPDATE loadtest_baseline_queue SET attempts = attempts + 1,
                            not_before = now() + $2 * interval '1 millisecond' WHERE id = $1",
                )
                .bind(id)
                .bind(i64::try_from(*ms).unwrap_or(i64::MAX))
                .execute(&mut *tx)
                .await?;
            }
            // Delivered, or out of retries (the naive design drops it).
            _ => {
                sqlx::query("DELETE FROM loadtest_baseline_queue WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
        }
    }
    tx.commit().await?;
    Ok(claimed)
}
