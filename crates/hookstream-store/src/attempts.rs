//! The delivery log: every HTTP attempt, stored by the attempt sink from the attempts topic
//! (`hookstream.attempts`, partitioned by UTC day of `started_at`), and what it answers: the
//! attempts of an event or an endpoint, and each (event, endpoint)'s delivery status. Per
//! endpoint statistics are kept beside them as the rows are stored (`crate::attempt_stats`).
//!
//! Rows are keyed by (started_at, event, endpoint, attempt): a record stored twice (read again
//! after a sink crash) is stored once. Retention drops whole day partitions
//! (`drop_partitions_before`), never deletes rows one by one.

use std::collections::HashSet;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use sqlx::{PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use crate::copy::BinaryCopy;
use crate::StoreError;

/// Rows per insert (one COPY and one statement).
pub const MAX_ROWS_PER_INSERT: usize = 1_000;
/// Longest error message stored.
const MAX_ERROR_CHARS: usize = 1_000;
/// Longest label (trigger, outcome, class, next, tier) stored.
const MAX_LABEL_CHARS: usize = 64;

pub use crate::attempt_row::NewAttempt;

fn clean(s: &str, max_chars: usize) -> String {
    s.chars().filter(|c| *c != '\0').take(max_chars).collect()
}

/// Creates the day partition of `day` if it is missing.
pub async fn ensure_partition(pool: &PgPool, day: NaiveDate) -> Result<(), StoreError> {
    sqlx::query("SELECT hookstream.ensure_attempt_partition($1)")
        .bind(day)
        .execute(pool)
        .await?;
    Ok(())
}

/// Drops the day partitions before `day`; returns their names.
pub async fn drop_partitions_before(pool: &PgPool, day: NaiveDate) -> Result<Vec<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT hookstream.drop_attempt_partitions($1)")
            .bind(day)
            .fetch_all(pool)
            .await?,
    )
}

/// The day partitions that exist, oldest first.
pub async fn partitions(pool: &PgPool) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i
         JOIN pg_class c ON c.oid = i.inhrelid
         JOIN pg_class p ON p.oid = i.inhparent
         JOIN pg_namespace n ON n.oid = p.relnamespace
         WHERE n.nspname = 'hookstream' AND p.relname = 'attempts'
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await?)
}

/// The UTC days `rows` fall on.
pub fn days_of(rows: &[NewAttempt]) -> HashSet<NaiveDate> {
    rows.iter().map(|r| r.started_at.date_naive()).collect()
}

/// The columns the sink writes, in COPY order (a macro so that the statements below are
/// literals, not formatted per batch).
macro_rules! columns {
    () => {
        "started_at, event_id, endpoint_id, attempt, tenant_id, trigger, duration_ms, status, \
         outcome, error_class, error, response_headers, response_body, response_truncated, next, \
         next_due_at, next_tier, event_type, aggregate_id, payload_bytes, committed_at, relayed_at"
    };
}
/// How many of them.
const FIELDS: i16 = 22;
const COPY_IN: &str = concat!(
    "COPY pg_temp.attempts_in (",
    columns!(),
    ") FROM STDIN (FORMAT binary)"
);
const INSERT_STAGED: &str = concat!(
    "INSERT INTO hookstream.attempts (",
    columns!(),
    ") SELECT ",
    columns!(),
    " FROM pg_temp.attempts_in ON CONFLICT DO NOTHING \
     RETURNING started_at, event_id, endpoint_id, attempt"
);

/// Stores `rows` (their day partitions must exist: `ensure_partition`): copied (binary
/// `COPY`) into a temporary table of the connection's, emptied at every commit, then inserted
/// from it in one statement whose text never changes, so that PostgreSQL neither binds 22
/// parameters per row nor plans a statement per batch size. Adds those stored for the first
/// time to the per endpoint statistics (`crate::attempt_stats`) in the same transaction.
/// Returns per row whether it was stored (`false`: stored before, or a repeat in the batch).
pub async fn insert_many(pool: &PgPool, rows: &[NewAttempt]) -> Result<Vec<bool>, StoreError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    if rows.len() > MAX_ROWS_PER_INSERT {
        return Err(StoreError::Invalid(format!(
            "{} attempts in one insert, at most {MAX_ROWS_PER_INSERT}",
            rows.len()
        )));
    }
    let data = copy_data(rows)?;
    let mut tx = pool.begin().await?;
    // Made once per connection (kept after the commit that made it; its rows are not).
    let staged: bool = sqlx::query_scalar("SELECT to_regclass('pg_temp.attempts_in') IS NOT NULL")
        .fetch_one(&mut *tx)
        .await?;
    if !staged {
        sqlx::query(
            "CREATE TEMPORARY TABLE attempts_in (LIKE hookstream.attempts INCLUDING DEFAULTS) \
             ON COMMIT DELETE ROWS",
        )
        .execute(&mut *tx)
        .await?;
    }
    let mut copy = tx.copy_in_raw(COPY_IN).await?;
    if let Err(e) = copy.send(data.as_slice()).await {
        copy.abort("the attempts could not be sent").await.ok();
        return Err(StoreError::from_db(e));
    }
    copy.finish().await.map_err(StoreError::from_db)?;
    let stored: Vec<(DateTime<Utc>, Uuid, Uuid, i32)> = sqlx::query_as(INSERT_STAGED)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::from_db)?;
    // PostgreSQL keeps microseconds: compare keys at that precision.
    let mut stored: HashSet<(i64, Uuid, Uuid, i32)> = stored
        .into_iter()
        .map(|(t, e, p, n)| (t.timestamp_micros(), e, p, n))
        .collect();
    // The first row of a key gets the credit; a repeat within the batch was a duplicate.
    let fresh: Vec<bool> = rows
        .iter()
        .map(|a| {
            stored.remove(&(
                a.started_at.timestamp_micros(),
                a.event_id,
                a.endpoint_id,
                a.attempt,
            ))
        })
        .collect();
    let counted: Vec<&NewAttempt> = rows
        .iter()
        .zip(&fresh)
        .filter(|(_, f)| **f)
        .map(|(a, _)| a)
        .collect();
    crate::attempt_stats::add(&mut tx, &counted).await?;
    tx.commit().await?;
    Ok(fresh)
}

/// The binary COPY stream of `rows`, cleaned and cut as stored.
fn copy_data(rows: &[NewAttempt]) -> Result<Vec<u8>, StoreError> {
    let mut copy = BinaryCopy::default();
    for a in rows {
        let headers = serde_json::to_value(
            a.response_headers
                .iter()
                .map(|(n, v)| [clean(n, 256), clean(v, 1024)])
                .collect::<Vec<_>>(),
        )
        .unwrap_or_default();
        copy.row(FIELDS)
            .field(&a.started_at)?
            .field(&a.event_id)?
            .field(&a.endpoint_id)?
            .field(&a.attempt)?
            .field(&a.tenant_id)?
            .field(&clean(&a.trigger, MAX_LABEL_CHARS))?
            .field(&a.duration_ms)?
            .field(&a.status)?
            .field(&clean(&a.outcome, MAX_LABEL_CHARS))?
            .field(&clean(&a.error_class, MAX_LABEL_CHARS))?
            .field(&clean(&a.error, MAX_ERROR_CHARS))?
            .field(&headers)?
            .field(&a.response_body.as_deref())?
            .field(&a.response_truncated)?
            .field(&clean(&a.next, MAX_LABEL_CHARS))?
            .field(&a.next_due_at)?
            .field(&a.next_tier.as_deref().map(|t| clean(t, MAX_LABEL_CHARS)))?
            .field(&a.event_type.as_deref().map(|t| clean(t, 256)))?
            .field(&a.aggregate_id.as_deref().map(|t| clean(t, 256)))?
            .field(&a.payload_bytes)?
            .field(&a.committed_at)?
            .field(&a.relayed_at)?;
    }
    Ok(copy.finish())
}

/// A stored attempt.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Attempt {
    pub started_at: DateTime<Utc>,
    pub event_id: Uuid,
    pub endpoint_id: Uuid,
    pub attempt: i32,
    pub tenant_id: Uuid,
    pub trigger: String,
    pub duration_ms: i32,
    pub status: Option<i32>,
    pub outcome: String,
    pub error_class: String,
    pub error: String,
    pub response_headers: serde_json::Value,
    #[serde(skip)]
    pub response_body: Option<Vec<u8>>,
    pub response_truncated: bool,
    pub next: String,
    pub next_due_at: Option<DateTime<Utc>>,
    pub next_tier: Option<String>,
    pub event_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub payload_bytes: Option<i32>,
    pub committed_at: Option<DateTime<Utc>>,
    pub relayed_at: Option<DateTime<Utc>>,
}

/// Which attempts to list. Every filter narrows; `tenant_id` scopes to one tenant.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub tenant_id: Option<Uuid>,
    pub event_id: Option<Uuid>,
    pub endpoint_id: Option<Uuid>,
    pub since: Option<DateTime<Utc>>,
    /// HTTP status class: 2 for 2xx … 5 for 5xx.
    pub status_class: Option<i32>,
    pub error_class: Option<String>,
    pub limit: i64,
}

/// Attempts matching `filter`, newest first.
pub async fn list(pool: &PgPool, filter: &Filter) -> Result<Vec<Attempt>, StoreError> {
    let mut q = QueryBuilder::<Postgres>::new("SELECT * FROM hookstream.attempts WHERE true");
    if let Some(t) = filter.tenant_id {
        q.push(" AND tenant_id = ").push_bind(t);
    }
    if let Some(e) = filter.event_id {
        q.push(" AND event_id = ").push_bind(e);
    }
    if let Some(e) = filter.endpoint_id {
        q.push(" AND endpoint_id = ").push_bind(e);
    }
    if let Some(s) = filter.since {
        q.push(" AND started_at >= ").push_bind(s);
    }
    if let Some(c) = filter.status_class {
        q.push(" AND status / 100 = ").push_bind(c);
    }
    if let Some(c) = &filter.error_class {
        q.push(" AND error_class = ").push_bind(c.clone());
    }
    q.push(" ORDER BY started_at DESC, attempt DESC LIMIT ")
        .push_bind(filter.limit.clamp(1, 10_000));
    Ok(q.build_query_as().fetch_all(pool).await?)
}

/// Where the delivery of one event to one endpoint stands, from its latest attempt.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct DeliveryStatus {
    pub endpoint_id: Uuid,
    /// delivered, retrying, dead_lettered, or disabled (the endpoint was disabled since and
    /// the delivery is not done).
    pub state: String,
    pub attempts: i64,
    pub last_attempt_at: DateTime<Utc>,
    pub last_status: Option<i32>,
    pub last_error_class: String,
    /// With state retrying: when the next attempt is due.
    pub next_due_at: Option<DateTime<Utc>>,
}

/// The delivery status of `event_id` at each endpoint that has an attempt (scoped to
/// `tenant_id` when given).
pub async fn status(
    pool: &PgPool,
    event_id: Uuid,
    tenant_id: Option<Uuid>,
) -> Result<Vec<DeliveryStatus>, StoreError> {
    Ok(sqlx::query_as(
        "WITH latest AS (
             SELECT DISTINCT ON (endpoint_id) endpoint_id, next, next_due_at, started_at, status,
                    error_class, count(*) OVER (PARTITION BY endpoint_id) AS attempts
             FROM hookstream.attempts
             WHERE event_id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)
             ORDER BY endpoint_id, started_at DESC, attempt DESC)
         SELECT l.endpoint_id,
                CASE WHEN l.next = 'delivered' THEN 'delivered'
                     WHEN l.next = 'dead_lettered' THEN 'dead_lettered'
                     WHEN e.enabled IS DISTINCT FROM true THEN 'disabled'
                     ELSE 'retrying' END AS state,
                l.attempts, l.started_at AS last_attempt_at, l.status AS last_status,
                l.error_class AS last_error_class,
                CASE WHEN l.next = 'retry' THEN l.next_due_at END AS next_due_at
         FROM latest l LEFT JOIN hookstream.endpoints e ON e.id = l.endpoint_id
         ORDER BY l.endpoint_id",
    )
    .bind(event_id)
    .bind(tenant_id)
    .fetch_all(pool)
    .await?)
}

/// The latest attempt at one endpoint of each of `event_ids` that has one.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Latest {
    pub event_id: Uuid,
    /// `delivered`, `retry` or `dead_lettered`.
    pub next: String,
    /// The HTTP status it got (None: no response).
    pub status: Option<i32>,
}

pub async fn latest_at_endpoint(
    pool: &PgPool,
    endpoint_id: Uuid,
    event_ids: &[Uuid],
) -> Result<Vec<Latest>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT DISTINCT ON (event_id) event_id, next, status FROM hookstream.attempts
         WHERE endpoint_id = $1 AND event_id = ANY($2)
         ORDER BY event_id, started_at DESC, attempt DESC",
    )
    .bind(endpoint_id)
    .bind(event_ids)
    .fetch_all(pool)
    .await?)
}

/// Where an event is before any attempt: waiting in the outbox, or quarantined there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum NotYetAttempted {
    /// In the outbox since this time: the relay has not shipped it yet.
    InOutbox { committed_at: DateTime<Utc> },
    /// Quarantined by the relay, with its reason: it will not be delivered.
    Quarantined { reason: String },
}

/// The event's place before the dispatchers, if it is still in the outbox or its quarantine
/// (scoped to `tenant_id` when given).
pub async fn before_delivery(
    pool: &PgPool,
    event_id: Uuid,
    tenant_id: Option<Uuid>,
) -> Result<Option<NotYetAttempted>, StoreError> {
    let waiting: Option<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT min(created_at) FROM hookstream.outbox
         WHERE event_id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)",
    )
    .bind(event_id)
    .bind(tenant_id)
    .fetch_one(pool)
    .await?;
    if let Some(committed_at) = waiting {
        return Ok(Some(NotYetAttempted::InOutbox { committed_at }));
    }
    let reason: Option<String> = sqlx::query_scalar(
        "SELECT reason FROM hookstream.outbox_quarantine
         WHERE event_id = $1 AND ($2::uuid IS NULL OR tenant_id = $2) LIMIT 1",
    )
    .bind(event_id)
    .bind(tenant_id)
    .fetch_optional(pool)
    .await?;
    Ok(reason.map(|reason| NotYetAttempted::Quarantined { reason }))
}

pub use crate::attempt_stats::{endpoint_stats, EndpointStats};
