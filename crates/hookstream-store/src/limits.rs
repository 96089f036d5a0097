//! What dispatchers share so that an endpoint's limits hold for the whole group: one-second
//! rate windows handed out by the database (`hookstream.take_rate_tokens`), and the list of
//! live dispatcher processes that split each concurrency cap (migration 0006).

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use crate::StoreError;

/// Tokens granted from an endpoint's current window, and how long that window lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub granted: u32,
    /// Time left in the window the tokens belong to; unused tokens lapse with it.
    pub left: Duration,
}

/// Takes up to `want` of the current `window` of an endpoint whose windows hold `cap` tokens.
pub async fn take_rate_tokens(
    pool: &PgPool,
    endpoint: Uuid,
    want: u32,
    cap: u32,
    window: Duration,
) -> Result<Grant, StoreError> {
    let clamp = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
    let window_ms = i32::try_from(window.as_millis()).unwrap_or(i32::MAX).max(1);
    let (granted, ms_left): (i32, i32) =
        sqlx::query_as("SELECT granted, ms_left FROM hookstream.take_rate_tokens($1, $2, $3, $4)")
            .bind(endpoint)
            .bind(clamp(want))
            .bind(clamp(cap))
            .bind(window_ms)
            .fetch_one(pool)
            .await?;
    Ok(Grant {
        granted: granted.max(0) as u32,
        left: Duration::from_millis(ms_left.max(0) as u64),
    })
}

/// Deletes rate windows that ended more than `keep` ago; returns how many.
pub async fn prune_rate_windows(pool: &PgPool, keep: Duration) -> Result<u64, StoreError> {
    let done = sqlx::query(
        "DELETE FROM hookstream.rate_windows
          WHERE window_ms < (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $1",
    )
    .bind(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX))
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Records that `member` is alive and returns how many members were seen within `live`
/// (itself included); members silent for ten times that are forgotten.
pub async fn heartbeat(pool: &PgPool, member: Uuid, live: Duration) -> Result<u32, StoreError> {
    let live_ms = i64::try_from(live.as_millis()).unwrap_or(i64::MAX);
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO hookstream.dispatcher_members (member_id, seen_at) VALUES ($1, clock_timestamp())
         ON CONFLICT (member_id) DO UPDATE SET seen_at = excluded.seen_at",
    )
    .bind(member)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "DELETE FROM hookstream.dispatcher_members
          WHERE seen_at < clock_timestamp() - make_interval(secs => $1::double precision / 100)",
    )
    .bind(live_ms)
    .execute(&mut *tx)
    .await?;
    let count: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM hookstream.dispatcher_members
          WHERE seen_at >= clock_timestamp() - make_interval(secs => $1::double precision / 1000)",
    )
    .bind(live_ms)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(u32::try_from(count).unwrap_or(u32::MAX).max(1))
}

/// Removes `member` at shutdown, so the others take up its share at their next heartbeat.
pub async fn leave(pool: &PgPool, member: Uuid) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM hookstream.dispatcher_members WHERE member_id = $1")
        .bind(member)
        .execute(pool)
        .await?;
    Ok(())
}
