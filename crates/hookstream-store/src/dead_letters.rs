//! Dead letters in PostgreSQL (`hookstream.dead_letters`): what the dispatcher's DLQ sink
//! stores from the DLQ topic, and what `hookstream dlq list|show|stats|replay` read.
//!
//! A row is keyed twice. By the Kafka position of its DLQ record, so storing the same record
//! twice (the sink re-reads after a crash) writes one row. And by its decision, the record
//! whose handling made it plus the endpoint, so the same dead letter produced twice (a
//! dispatcher that handled the same record again after a crash) writes one row too.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use crate::StoreError;

/// Longest reason kept, in characters (reasons quote receivers' error messages).
const MAX_REASON_CHARS: usize = 4_000;
/// Longest event type or error class kept.
const MAX_LABEL_CHARS: usize = 200;

/// A Kafka record position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Position {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// A dead letter to store.
#[derive(Debug, Clone)]
pub struct NewDeadLetter {
    pub tenant_id: Option<Uuid>,
    pub endpoint_id: Option<Uuid>,
    pub event_id: Option<Uuid>,
    pub event_type: String,
    pub reason: String,
    pub error_class: String,
    pub last_status: i32,
    pub attempts: i32,
    pub first_attempt_at: Option<DateTime<Utc>>,
    pub dead_at: DateTime<Utc>,
    /// Where the DLQ record is: the idempotency key.
    pub source: Position,
    /// Where the event was originally read from.
    pub origin: Option<Position>,
    /// The record whose handling made this dead letter; with `endpoint_id`, the decision it
    /// records (stored once). `None` for poison on the DLQ topic and for records written
    /// before dispatchers named it.
    pub handled: Option<Position>,
    /// The encoded `EventEnvelope`, when there is one.
    pub event: Option<Vec<u8>>,
    /// Undecodable bytes, for poison records.
    pub raw: Option<Vec<u8>>,
    pub last_response: Option<Vec<u8>>,
}

/// A stored dead letter without its byte columns (what lists show).
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct DeadLetter {
    pub id: i64,
    pub tenant_id: Option<Uuid>,
    pub endpoint_id: Option<Uuid>,
    pub event_id: Option<Uuid>,
    pub event_type: String,
    pub reason: String,
    pub error_class: String,
    pub last_status: i32,
    pub attempts: i32,
    pub first_attempt_at: Option<DateTime<Utc>>,
    pub dead_at: DateTime<Utc>,
    pub stored_at: DateTime<Utc>,
    pub source_topic: String,
    pub source_partition: i32,
    pub source_offset: i64,
    pub origin_topic: Option<String>,
    pub origin_partition: Option<i32>,
    pub origin_offset: Option<i64>,
    pub handled_topic: Option<String>,
    pub handled_partition: Option<i32>,
    pub handled_offset: Option<i64>,
    pub replayed_at: Option<DateTime<Utc>>,
    pub replay_count: i32,
}

/// A stored dead letter with its bytes: the event envelope, poison bytes, the response.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeadLetterDetail {
    #[sqlx(flatten)]
    pub letter: DeadLetter,
    pub event: Option<Vec<u8>>,
    pub raw: Option<Vec<u8>>,
    pub last_response: Option<Vec<u8>>,
}

/// Which dead letters; every field narrows the selection, `None` does not filter.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub ids: Option<Vec<i64>>,
    pub tenant: Option<Uuid>,
    pub endpoint: Option<Uuid>,
    /// `dead_at >= since`.
    pub since: Option<DateTime<Utc>>,
    /// `dead_at < until`.
    pub until: Option<DateTime<Utc>>,
    pub class: Option<String>,
    /// Only rows never replayed.
    pub unreplayed_only: bool,
    /// `id <= max_id`: a replay reads only the rows that existed when it started, not the
    /// dead letters its own sends make when they fail again.
    pub max_id: Option<i64>,
}

/// Dead letters of one endpoint (or of no endpoint: poison), for `dlq stats`.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct EndpointStats {
    pub tenant_id: Option<Uuid>,
    pub endpoint_id: Option<Uuid>,
    pub count: i64,
    /// The most common error class.
    pub top_error_class: String,
    /// The most common last HTTP status (0: no response).
    pub top_status: i32,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    /// How many of them were replayed at least once.
    pub replayed: i64,
}

const SUMMARY_COLUMNS: &str = "id, tenant_id, endpoint_id, event_id, event_type, reason, error_class, \
     last_status, attempts, first_attempt_at, dead_at, stored_at, source_topic, source_partition, \
     source_offset, origin_topic, origin_partition, origin_offset, handled_topic, \
     handled_partition, handled_offset, replayed_at, replay_count";

/// PostgreSQL text cannot hold NUL; records come from Kafka and may contain anything.
fn clean(text: &str, max_chars: usize) -> String {
    text.chars().filter(|c| *c != '\0').take(max_chars).collect()
}

/// Deletes up to `batch` dead letters that died before `before` (oldest first); returns how
/// many. Rows another pruner holds are skipped, so several dispatchers may prune at once.
pub async fn prune(pool: &PgPool, before: DateTime<Utc>, batch: i64) -> Result<u64, StoreError> {
    let done = sqlx::query(
        "DELETE FROM hookstream.dead_letters WHERE id IN (
             SELECT id FROM hookstream.dead_letters WHERE dead_at < $1
              ORDER BY dead_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind(before)
    .bind(batch)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Stores a dead letter; returns its id, or `None` when this DLQ record, or the same decision
/// from another record, was stored before.
pub async fn insert(pool: &PgPool, d: &NewDeadLetter) -> Result<Option<i64>, StoreError> {
    Ok(insert_many(pool, std::slice::from_ref(d)).await?.remove(0))
}

/// Rows per statement: 22 parameters each, under PostgreSQL's 65,535.
pub const MAX_ROWS_PER_INSERT: usize = 1_000;

/// Stores dead letters in one statement (one commit); returns, per row in order, its id or
/// `None` when that DLQ record or its decision was stored before (the same record or decision
/// twice in `rows` is stored once). At most `MAX_ROWS_PER_INSERT` rows.
pub async fn insert_many(pool: &PgPool, rows: &[NewDeadLetter]) -> Result<Vec<Option<i64>>, StoreError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    if rows.len() > MAX_ROWS_PER_INSERT {
        return Err(StoreError::Invalid(format!(
            "{} dead letters in one insert, at most {MAX_ROWS_PER_INSERT}",
            rows.len()
        )));
    }
    let mut q = QueryBuilder::<Postgres>::new(
        "INSERT INTO hookstream.dead_letters
            (tenant_id, endpoint_id, event_id, event_type, reason, error_class, last_status, attempts,
             first_attempt_at, dead_at, source_topic, source_partition, source_offset,
             origin_topic, origin_partition, origin_offset, handled_topic, handled_partition,
             handled_offset, event, raw, last_response) ",
    );
    q.push_values(rows, |mut b, d| {
        let origin = d.origin.as_ref();
        let handled = d.handled.as_ref();
        b.push_bind(d.tenant_id)
            .push_bind(d.endpoint_id)
            .push_bind(d.event_id)
            .push_bind(clean(&d.event_type, MAX_LABEL_CHARS))
            .push_bind(clean(&d.reason, MAX_REASON_CHARS))
            .push_bind(clean(&d.error_class, MAX_LABEL_CHARS))
            .push_bind(d.last_status)
            .push_bind(d.attempts)
            .push_bind(d.first_attempt_at)
            .push_bind(d.dead_at)
            .push_bind(clean(&d.source.topic, MAX_LABEL_CHARS * 2))
            .push_bind(d.source.partition)
            .push_bind(d.source.offset)
            .push_bind(origin.map(|o| clean(&o.topic, MAX_LABEL_CHARS * 2)))
            .push_bind(origin.map(|o| o.partition))
            .push_bind(origin.map(|o| o.offset))
            .push_bind(handled.map(|h| clean(&h.topic, MAX_LABEL_CHARS * 2)))
            .push_bind(handled.map(|h| h.partition))
            .push_bind(handled.map(|h| h.offset))
            .push_bind(d.event.as_deref())
            .push_bind(d.raw.as_deref())
            .push_bind(d.last_response.as_deref());
    });
    // No conflict target: a row is skipped when either key (position or decision) is taken.
    q.push(
        " ON CONFLICT DO NOTHING
         RETURNING id, source_topic, source_partition, source_offset",
    );
    let stored: Vec<(i64, String, i32, i64)> = q
        .build_query_as()
        .fetch_all(pool)
        .await
        .map_err(StoreError::from_db)?;
    let mut ids: std::collections::HashMap<(String, i32, i64), i64> =
        stored.into_iter().map(|(id, t, p, o)| ((t, p, o), id)).collect();
    // The first row of a position gets the id; a repeat within the batch, or a row whose
    // decision was stored, was a duplicate.
    Ok(rows
        .iter()
        .map(|d| {
            ids.remove(&(
                clean(&d.source.topic, MAX_LABEL_CHARS * 2),
                d.source.partition,
                d.source.offset,
            ))
        })
        .collect())
}

fn push_filter<'a>(q: &mut QueryBuilder<'a, Postgres>, f: &'a Filter) {
    q.push(" WHERE true");
    if let Some(ids) = &f.ids {
        q.push(" AND id = ANY(").push_bind(ids).push(")");
    }
    if let Some(t) = f.tenant {
        q.push(" AND tenant_id = ").push_bind(t);
    }
    if let Some(e) = f.endpoint {
        q.push(" AND endpoint_id = ").push_bind(e);
    }
    if let Some(s) = f.since {
        q.push(" AND dead_at >= ").push_bind(s);
    }
    if let Some(u) = f.until {
        q.push(" AND dead_at < ").push_bind(u);
    }
    if let Some(c) = &f.class {
        q.push(" AND error_class = ").push_bind(c);
    }
    if f.unreplayed_only {
        q.push(" AND replayed_at IS NULL");
    }
    if let Some(m) = f.max_id {
        q.push(" AND id <= ").push_bind(m);
    }
}

/// The highest dead-letter id so far (0 when there is none), and the database's time: where
/// a replay starts.
pub async fn max_id_and_now(pool: &PgPool) -> Result<(i64, DateTime<Utc>), StoreError> {
    Ok(
        sqlx::query_as("SELECT coalesce(max(id), 0), now() FROM hookstream.dead_letters")
            .fetch_one(pool)
            .await?,
    )
}

/// Matching dead letters, newest first, at most `limit`.
pub async fn list(pool: &PgPool, filter: &Filter, limit: i64) -> Result<Vec<DeadLetter>, StoreError> {
    let mut q = QueryBuilder::new(format!("SELECT {SUMMARY_COLUMNS} FROM hookstream.dead_letters"));
    push_filter(&mut q, filter);
    q.push(" ORDER BY dead_at DESC, id DESC LIMIT ")
        .push_bind(limit.max(0));
    Ok(q.build_query_as::<DeadLetter>().fetch_all(pool).await?)
}

/// Matching dead letters with their bytes, oldest first, with ids above `after_id`: a page
/// of what a replay sends (call again with the last id until it returns nothing).
pub async fn page_for_replay(
    pool: &PgPool,
    filter: &Filter,
    after_id: i64,
    limit: i64,
) -> Result<Vec<DeadLetterDetail>, StoreError> {
    let mut q = QueryBuilder::new(format!(
        "SELECT {SUMMARY_COLUMNS}, event, raw, last_response FROM hookstream.dead_letters"
    ));
    push_filter(&mut q, filter);
    q.push(" AND id > ").push_bind(after_id);
    q.push(" ORDER BY id LIMIT ").push_bind(limit.max(0));
    Ok(q.build_query_as::<DeadLetterDetail>().fetch_all(pool).await?)
}

/// How many dead letters match.
pub async fn count(pool: &PgPool, filter: &Filter) -> Result<i64, StoreError> {
    let mut q = QueryBuilder::new("SELECT count(*) FROM hookstream.dead_letters");
    push_filter(&mut q, filter);
    Ok(q.build_query_scalar::<i64>().fetch_one(pool).await?)
}

/// One dead letter with its bytes.
pub async fn get(pool: &PgPool, id: i64) -> Result<DeadLetterDetail, StoreError> {
    sqlx::query_as::<_, DeadLetterDetail>(&format!(
        "SELECT {SUMMARY_COLUMNS}, event, raw, last_response FROM hookstream.dead_letters WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("dead letter {id}")))
}

/// The encoded envelope of an event, from its most recent dead letter, if it has one.
pub async fn event_envelope(pool: &PgPool, event_id: Uuid) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT event FROM hookstream.dead_letters
          WHERE event_id = $1 AND event IS NOT NULL ORDER BY id DESC LIMIT 1",
    )
    .bind(event_id)
    .fetch_optional(pool)
    .await?)
}

/// Claims for the replay `claim`, which started at `started` (the database's clock), those of
/// `ids` that no other replay holds and none has replayed since `started`, until `for_ms` from
/// now; returns the ids claimed. A replay reads a page before it claims its rows: one another
/// replay sent (and marked, which ends its claim) in between is not taken again. Rows are
/// taken in id order and a row another replay is claiming at this instant is skipped, not
/// waited for: two replays claiming overlapping pages never deadlock, and each row goes to
/// one of them.
pub async fn claim_for_replay(
    pool: &PgPool,
    ids: &[i64],
    claim: Uuid,
    started: DateTime<Utc>,
    for_ms: i64,
) -> Result<Vec<i64>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_scalar(
        "UPDATE hookstream.dead_letters
            SET replay_claim = $2,
                replay_claimed_until = now() + make_interval(secs => $3::float8 / 1000)
          WHERE id IN (SELECT id FROM hookstream.dead_letters
                        WHERE id = ANY($1)
                          AND (replay_claim IS NULL OR replay_claim = $2
                               OR replay_claimed_until < now())
                          AND (replayed_at IS NULL OR replayed_at < $4)
                        ORDER BY id
                        FOR UPDATE SKIP LOCKED)
          RETURNING id",
    )
    .bind(ids)
    .bind(claim)
    .bind(for_ms.max(0))
    .bind(started)
    .fetch_all(pool)
    .await?)
}

/// Gives up what the replay `claim` still holds (what it did not send).
pub async fn release_replay_claims(pool: &PgPool, claim: Uuid) -> Result<u64, StoreError> {
    let done = sqlx::query(
        "UPDATE hookstream.dead_letters SET replay_claim = NULL, replay_claimed_until = NULL
          WHERE replay_claim = $1",
    )
    .bind(claim)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Records that these dead letters were put back into the pipeline (after Kafka's ack), and
/// clears their replay claim.
pub async fn mark_replayed(pool: &PgPool, ids: &[i64]) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query(
        "UPDATE hookstream.dead_letters
            SET replayed_at = now(), replay_count = replay_count + 1,
                replay_claim = NULL, replay_claimed_until = NULL
          WHERE id = ANY($1)",
    )
    .bind(ids)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Per endpoint: how many dead letters, the most common error class and status, first and
/// last seen; the endpoints with the most first.
pub async fn stats(pool: &PgPool, filter: &Filter) -> Result<Vec<EndpointStats>, StoreError> {
    let mut q = QueryBuilder::new(
        "SELECT tenant_id, endpoint_id, count(*) AS count,
                mode() WITHIN GROUP (ORDER BY error_class) AS top_error_class,
                mode() WITHIN GROUP (ORDER BY last_status) AS top_status,
                min(dead_at) AS first_seen, max(dead_at) AS last_seen,
                count(*) FILTER (WHERE replayed_at IS NOT NULL) AS replayed
           FROM hookstream.dead_letters",
    );
    push_filter(&mut q, filter);
    q.push(" GROUP BY tenant_id, endpoint_id ORDER BY count DESC, last_seen DESC");
    Ok(q.build_query_as::<EndpointStats>().fetch_all(pool).await?)
}

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn clean_drops_nul_and_caps_length() {
        assert_eq!(clean("a\0b", 10), "ab");
        assert_eq!(clean("héllo", 2), "hé");
    }
}
