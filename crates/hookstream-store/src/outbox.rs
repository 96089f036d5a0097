//! The transactional outbox: producers enqueue inside their own transaction; the relay claims
//! committed rows per shard, ships them, and deletes them in the transaction that claimed them.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::StoreError;

/// The channel `hookstream.outbox` notifies on commit (a wake-up only, not durable).
pub const NOTIFY_CHANNEL: &str = "hookstream_outbox";

// Producers' side of the outbox: one implementation, shared with producer services.
pub use hookstream_producer::{enqueue, EnqueueError, Event as NewEvent};

/// A claimed outbox row, with what the relay needs to decide whether it can ship it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OutboxRow {
    pub id: i64,
    pub event_id: Uuid,
    pub tenant_id: Uuid,
    pub event_type: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    /// The payload as JSON text: these exact bytes are signed and delivered.
    pub payload: String,
    pub headers: Value,
    /// The channels the message was sent to (empty: none).
    pub channels: Vec<String>,
    /// Not to be delivered before this time.
    pub deliver_at: Option<DateTime<Utc>>,
    /// Whose data the payload is (its data key is the subject's: `payload_keys`).
    pub subject: Option<String>,
    /// Whether the message store kept a copy (which the relay then seals).
    pub stored: bool,
    pub created_at: DateTime<Utc>,
    pub shard: i32,
    pub tenant_known: bool,
    pub payload_is_object: bool,
    /// The subscription version as of the claim: every routing change committed before this
    /// row's transaction is numbered at most this (see `subscriptions`).
    pub subscription_version: i64,
}

/// Locks up to `limit` rows of the given shards, oldest first. Call inside a transaction;
/// rows locked by another transaction are skipped (they are in flight elsewhere).
pub async fn claim(
    conn: &mut PgConnection,
    shards: &[i32],
    limit: i64,
) -> Result<Vec<OutboxRow>, StoreError> {
    Ok(sqlx::query_as::<_, OutboxRow>(
        "SELECT o.id, o.event_id, o.tenant_id, o.event_type, o.aggregate_type, o.aggregate_id,
                o.payload, o.headers, coalesce(o.channels, '{}') AS channels, o.deliver_at,
                o.subject, o.stored, o.created_at, o.shard,
                EXISTS (SELECT 1 FROM hookstream.tenants t WHERE t.id = o.tenant_id) AS tenant_known,
                -- `hookstream.enqueue` parsed it; a row inserted some other way gets this
                -- much of a check (no second parse on the relay's path).
                ltrim(o.payload, E' \t\r\n') LIKE '{%' AS payload_is_object,
                -- Same statement, same snapshot: it sees every change committed before any
                -- row claimed here.
                (SELECT version FROM hookstream.subscription_state) AS subscription_version
           FROM hookstream.outbox o
          WHERE o.shard = ANY($1)
          ORDER BY o.id
          LIMIT $2
          FOR UPDATE OF o SKIP LOCKED",
    )
    .bind(shards)
    .bind(limit)
    .fetch_all(conn)
    .await?)
}

/// Deletes shipped rows and moves unshippable ones to quarantine with their reasons, in the
/// caller's (claiming) transaction.
pub async fn finish(
    conn: &mut PgConnection,
    shipped: &[i64],
    quarantined: &[(i64, String)],
) -> Result<(), StoreError> {
    if !quarantined.is_empty() {
        let ids: Vec<i64> = quarantined.iter().map(|(id, _)| *id).collect();
        let reasons: Vec<&str> = quarantined.iter().map(|(_, r)| r.as_str()).collect();
        sqlx::query(
            "WITH q AS (SELECT * FROM unnest($1::bigint[], $2::text[]) AS q(id, reason)),
                  moved AS (DELETE FROM hookstream.outbox o USING q WHERE o.id = q.id
                            RETURNING o.*, q.reason)
             INSERT INTO hookstream.outbox_quarantine
                    (id, event_id, tenant_id, event_type, aggregate_type, aggregate_id, payload, headers,
                     channels, deliver_at, subject, created_at, reason)
             SELECT id, event_id, tenant_id, event_type, aggregate_type, aggregate_id, payload, headers,
                    channels, deliver_at, subject, created_at, reason FROM moved
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&ids)
        .bind(&reasons)
        .execute(&mut *conn)
        .await?;
    }
    if !shipped.is_empty() {
        sqlx::query("DELETE FROM hookstream.outbox WHERE id = ANY($1)")
            .bind(shipped)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Rows waiting, and the age in seconds of the oldest, for the backlog gauges.
pub async fn backlog(pool: &PgPool) -> Result<(i64, f64), StoreError> {
    let (rows, age): (i64, Option<f64>) = sqlx::query_as(
        "SELECT count(*), extract(epoch FROM clock_timestamp() - min(created_at))::float8 FROM hookstream.outbox",
    )
    .fetch_one(pool)
    .await?;
    Ok((rows, age.unwrap_or(0.0)))
}

/// How many rows the relay quarantined (they wait for an operator).
pub async fn quarantined_count(pool: &PgPool) -> Result<i64, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM hookstream.outbox_quarantine")
            .fetch_one(pool)
            .await?,
    )
}

/// A quarantined row, for operators and tests.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct QuarantinedRow {
    pub id: i64,
    pub event_id: Uuid,
    pub tenant_id: Uuid,
    pub event_type: String,
    pub reason: String,
    pub quarantined_at: DateTime<Utc>,
}

pub async fn quarantined(pool: &PgPool) -> Result<Vec<QuarantinedRow>, StoreError> {
    Ok(sqlx::query_as::<_, QuarantinedRow>(
        "SELECT id, event_id, tenant_id, event_type, reason, quarantined_at
           FROM hookstream.outbox_quarantine ORDER BY id",
    )
    .fetch_all(pool)
    .await?)
}

/// Deletes idempotency keys older than `before`, `batch` per statement (short transactions;
/// rows locked by a producer are skipped). After that, the same key enqueues a new event.
/// Returns how many were deleted.
pub async fn prune_idempotency_keys(
    pool: &PgPool,
    before: DateTime<Utc>,
    batch: i64,
) -> Result<u64, StoreError> {
    let mut total = 0;
    loop {
        let done = sqlx::query(
            "DELETE FROM hookstream.idempotency_keys k USING (
                SELECT tenant_id, key FROM hookstream.idempotency_keys
                 WHERE created_at < $1 ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED) old
              WHERE k.tenant_id = old.tenant_id AND k.key = old.key",
        )
        .bind(before)
        .bind(batch)
        .execute(pool)
        .await?
        .rows_affected();
        total += done;
        if done < batch as u64 {
            return Ok(total);
        }
    }
}
