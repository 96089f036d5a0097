//! Published circuit-breaker states (migration 0009). Breakers live in each dispatcher's
//! memory; every dispatcher publishes the ones that are not closed, so that operators' tools
//! see them. A row is trusted while it is fresher than `FRESH` (dispatchers re-report every
//! `REPORT_EVERY`), so a dispatcher that died without cleaning up is forgotten soon.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::StoreError;

/// How often a dispatcher re-reports every breaker it holds open.
pub const REPORT_EVERY: Duration = Duration::from_secs(30);
/// Rows older than this are a dead dispatcher's: ignored by readers, deleted by writers.
pub const FRESH: Duration = Duration::from_secs(90);

/// A breaker that is not closed, as one dispatcher holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    pub endpoint_id: Uuid,
    /// `open` or `half_open`.
    pub state: &'static str,
    pub since: DateTime<Utc>,
    pub open_until: Option<DateTime<Utc>>,
}

fn fresh_secs() -> f64 {
    FRESH.as_secs_f64()
}

/// Publishes `member`'s breakers: `open` rows are written (or refreshed), `closed` endpoints'
/// rows removed, and rows of members silent for longer than `FRESH` deleted. One transaction.
pub async fn publish(
    pool: &PgPool,
    member: Uuid,
    open: &[Reported],
    closed: &[Uuid],
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    if !closed.is_empty() {
        sqlx::query(
            "DELETE FROM hookstream.endpoint_breakers WHERE member_id = $1 AND endpoint_id = ANY($2)",
        )
        .bind(member)
        .bind(closed)
        .execute(&mut *tx)
        .await?;
    }
    if !open.is_empty() {
        let ids: Vec<Uuid> = open.iter().map(|r| r.endpoint_id).collect();
        let states: Vec<&str> = open.iter().map(|r| r.state).collect();
        let since: Vec<DateTime<Utc>> = open.iter().map(|r| r.since).collect();
        let until: Vec<Option<DateTime<Utc>>> = open.iter().map(|r| r.open_until).collect();
        sqlx::query(
            "INSERT INTO hookstream.endpoint_breakers (endpoint_id, member_id, state, since, open_until, reported_at)
             SELECT e, $1, s, t, u, now() FROM unnest($2::uuid[], $3::text[], $4::timestamptz[], $5::timestamptz[]) AS x(e, s, t, u)
             ON CONFLICT (endpoint_id, member_id) DO UPDATE
               SET state = EXCLUDED.state, since = EXCLUDED.since, open_until = EXCLUDED.open_until,
                   reported_at = EXCLUDED.reported_at",
        )
        .bind(member)
        .bind(&ids)
        .bind(&states)
        .bind(&since)
        .bind(&until)
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query(
        "DELETE FROM hookstream.endpoint_breakers WHERE reported_at < now() - make_interval(secs => $1)",
    )
    .bind(fresh_secs())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Removes every row of `member` (a dispatcher stopping cleanly).
pub async fn withdraw(pool: &PgPool, member: Uuid) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM hookstream.endpoint_breakers WHERE member_id = $1")
        .bind(member)
        .execute(pool)
        .await?;
    Ok(())
}

/// An endpoint's breaker across the dispatchers that report one: `open` if any holds it
/// open, else `half_open`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct BreakerView {
    pub endpoint_id: Uuid,
    pub tenant_id: Uuid,
    pub state: String,
    /// The earliest time a dispatcher's breaker for it left the closed state.
    pub since: DateTime<Utc>,
    /// While open: the latest time a dispatcher lets a probe through.
    pub open_until: Option<DateTime<Utc>>,
    /// How many dispatchers report it.
    pub dispatchers: i64,
}

/// Endpoints whose breaker is open or half-open in some live dispatcher (scoped to
/// `tenant_id` when given), open ones first.
pub async fn not_closed(pool: &PgPool, tenant_id: Option<Uuid>) -> Result<Vec<BreakerView>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT b.endpoint_id, e.tenant_id,
                CASE WHEN bool_or(b.state = 'open') THEN 'open' ELSE 'half_open' END AS state,
                min(b.since) AS since, max(b.open_until) AS open_until, count(*) AS dispatchers
         FROM hookstream.endpoint_breakers b
         JOIN hookstream.endpoints e ON e.id = b.endpoint_id
         WHERE b.reported_at >= now() - make_interval(secs => $2)
           AND ($1::uuid IS NULL OR e.tenant_id = $1)
         GROUP BY b.endpoint_id, e.tenant_id
         ORDER BY state DESC, since, b.endpoint_id",
    )
    .bind(tenant_id)
    .bind(fresh_secs())
    .fetch_all(pool)
    .await?)
}
