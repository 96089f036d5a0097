//! The delivery log (`hookstream.attempts`) as the admin API pages through it: attempts of an
//! endpoint or of a message, newest first, with a keyset cursor (an attempt's key), one attempt
//! by key, the messages an endpoint was sent with each one's latest state, and per endpoint
//! counts of messages by state. Every query is scoped by a tenant.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use crate::attempts::Attempt;
use crate::StoreError;

/// What identifies an attempt (the table's primary key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptKey {
    pub started_at: DateTime<Utc>,
    pub event_id: Uuid,
    pub endpoint_id: Uuid,
    pub attempt: i32,
}

impl AttemptKey {
    pub fn of(a: &Attempt) -> Self {
        Self {
            started_at: a.started_at,
            event_id: a.event_id,
            endpoint_id: a.endpoint_id,
            attempt: a.attempt,
        }
    }
}

/// Which attempts to page through.
#[derive(Debug, Clone, Default)]
pub struct AttemptFilter {
    pub endpoint_id: Option<Uuid>,
    pub event_id: Option<Uuid>,
    /// Only delivered attempts (true) or only failed ones (false).
    pub delivered: Option<bool>,
    /// HTTP status class: 0 for no response, 1 for 1xx … 5 for 5xx.
    pub status_class: Option<i32>,
    pub before: Option<DateTime<Utc>>,
    pub after: Option<DateTime<Utc>>,
    /// Only attempts of this event type (the tenant portal's delivery log filters by it).
    pub event_type: Option<String>,
    /// Only attempts of messages with this tag (Svix's `tag`), or sent to this channel.
    pub tag: Option<String>,
    pub channel: Option<String>,
}

/// A page of `tenant`'s attempts, newest first, after `cursor`.
pub async fn attempts(
    pool: &PgPool,
    tenant: Uuid,
    f: &AttemptFilter,
    cursor: Option<AttemptKey>,
    limit: i64,
) -> Result<Vec<Attempt>, StoreError> {
    let mut q = QueryBuilder::<Postgres>::new("SELECT * FROM hookstream.attempts WHERE tenant_id = ");
    q.push_bind(tenant);
    if let Some(e) = f.endpoint_id {
        q.push(" AND endpoint_id = ").push_bind(e);
    }
    if let Some(e) = f.event_id {
        q.push(" AND event_id = ").push_bind(e);
    }
    match f.delivered {
        Some(true) => {
            q.push(" AND outcome = 'delivered'");
        }
        Some(false) => {
            q.push(" AND outcome <> 'delivered'");
        }
        None => {}
    }
    match f.status_class {
        Some(0) => {
            q.push(" AND status IS NULL");
        }
        Some(c) => {
            q.push(" AND status / 100 = ").push_bind(c);
        }
        None => {}
    }
    if let Some(t) = &f.event_type {
        q.push(" AND event_type = ").push_bind(t.clone());
    }
    for (column, value) in [("tags", &f.tag), ("channels", &f.channel)] {
        if let Some(v) = value {
            // The message's row, found by its id's time (a second either side, as `messages::get`).
            q.push(format!(
                " AND EXISTS (SELECT 1 FROM hookstream.messages m
                    WHERE m.tenant_id = attempts.tenant_id AND m.event_id = attempts.event_id
                      AND m.created_at >= hookstream.uuid_v7_time(attempts.event_id) - interval '1 second'
                      AND m.created_at < hookstream.uuid_v7_time(attempts.event_id) + interval '1 second'
                      AND m.{column} @> ARRAY["
            ))
            .push_bind(v.clone())
            .push("]::text[])");
        }
    }
    if let Some(b) = f.before {
        q.push(" AND started_at < ").push_bind(b);
    }
    if let Some(a) = f.after {
        q.push(" AND started_at > ").push_bind(a);
    }
    if let Some(c) = cursor {
        q.push(" AND (started_at, event_id, endpoint_id, attempt) < (")
            .push_bind(c.started_at)
            .push(", ")
            .push_bind(c.event_id)
            .push(", ")
            .push_bind(c.endpoint_id)
            .push(", ")
            .push_bind(c.attempt)
            .push(")");
    }
    q.push(" ORDER BY started_at DESC, event_id DESC, endpoint_id DESC, attempt DESC LIMIT ")
        .push_bind(limit);
    Ok(q.build_query_as().fetch_all(pool).await?)
}

/// One of `tenant`'s attempts.
pub async fn attempt(pool: &PgPool, tenant: Uuid, key: &AttemptKey) -> Result<Option<Attempt>, StoreError> {
    Ok(sqlx::query_as::<_, Attempt>(
        "SELECT * FROM hookstream.attempts
          WHERE tenant_id = $1 AND started_at = $2 AND event_id = $3 AND endpoint_id = $4 AND attempt = $5",
    )
    .bind(tenant)
    .bind(key.started_at)
    .bind(key.event_id)
    .bind(key.endpoint_id)
    .bind(key.attempt)
    .fetch_optional(pool)
    .await?)
}

/// Where one message stands at one endpoint, from its latest attempt.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct MessageState {
    pub event_id: Uuid,
    /// delivered, retry, dead_lettered (the latest attempt's `next`).
    pub next: String,
    pub next_due_at: Option<DateTime<Utc>>,
    pub last_attempt_at: DateTime<Utc>,
    pub last_status: Option<i32>,
}

/// A page of the messages `endpoint` was attempted with, newest message first (by id), after
/// `cursor`, each with its latest attempt.
pub async fn attempted_messages(
    pool: &PgPool,
    tenant: Uuid,
    endpoint: Uuid,
    cursor: Option<Uuid>,
    before: Option<DateTime<Utc>>,
    after: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<MessageState>, StoreError> {
    let mut q = QueryBuilder::<Postgres>::new(
        "SELECT DISTINCT ON (event_id) event_id, next, next_due_at, started_at AS last_attempt_at,
                status AS last_status
           FROM hookstream.attempts WHERE tenant_id = ",
    );
    q.push_bind(tenant)
        .push(" AND endpoint_id = ")
        .push_bind(endpoint);
    if let Some(c) = cursor {
        q.push(" AND event_id < ").push_bind(c);
    }
    if let Some(b) = before {
        q.push(" AND event_id < ").push_bind(crate::messages::v7_floor(b));
    }
    if let Some(a) = after {
        q.push(" AND event_id >= ")
            .push_bind(crate::messages::v7_floor(crate::messages::after_next_ms(a)));
    }
    q.push(" ORDER BY event_id DESC, started_at DESC, attempt DESC LIMIT ")
        .push_bind(limit);
    Ok(q.build_query_as().fetch_all(pool).await?)
}

/// How many messages an endpoint has in each state (latest attempt per message) among those
/// attempted in `[since, until)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct StateCounts {
    pub delivered: i64,
    pub retrying: i64,
    pub dead_lettered: i64,
}

pub async fn endpoint_state_counts(
    pool: &PgPool,
    tenant: Uuid,
    endpoint: Uuid,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
) -> Result<StateCounts, StoreError> {
    Ok(sqlx::query_as::<_, StateCounts>(
        "WITH latest AS (
             SELECT DISTINCT ON (event_id) next FROM hookstream.attempts
              WHERE tenant_id = $1 AND endpoint_id = $2
                AND ($3::timestamptz IS NULL OR started_at >= $3)
                AND ($4::timestamptz IS NULL OR started_at < $4)
              ORDER BY event_id, started_at DESC, attempt DESC)
         SELECT count(*) FILTER (WHERE next = 'delivered') AS delivered,
                count(*) FILTER (WHERE next NOT IN ('delivered', 'dead_lettered')) AS retrying,
                count(*) FILTER (WHERE next = 'dead_lettered') AS dead_lettered
           FROM latest",
    )
    .bind(tenant)
    .bind(endpoint)
    .bind(since)
    .bind(until)
    .fetch_one(pool)
    .await?)
}

/// Forgets the response body of one of `tenant`'s attempts (Svix's expunge-content).
pub async fn expunge_response(pool: &PgPool, tenant: Uuid, key: &AttemptKey) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE hookstream.attempts SET response_body = NULL
          WHERE tenant_id = $1 AND started_at = $2 AND event_id = $3 AND endpoint_id = $4 AND attempt = $5",
    )
    .bind(tenant)
    .bind(key.started_at)
    .bind(key.event_id)
    .bind(key.endpoint_id)
    .bind(key.attempt)
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound("attempt".into()));
    }
    Ok(())
}
