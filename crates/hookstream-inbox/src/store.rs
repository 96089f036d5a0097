//! Every query on `hookstream_inbox.inbox`: the idempotent multi-row insert, the claim, the
//! marks a batch commits with its handlers' changes, quarantine listing and replay, pruning
//! and the gauges' figures. The same statements are written out in docs/receiving.md for
//! receivers in other languages.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool, Row as _};

/// A row to store, verified and checked to be JSON.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub message_id: String,
    pub event_type: Option<String>,
    pub ordering_key: Option<String>,
    /// The exact body (valid UTF-8 JSON).
    pub payload: String,
    pub webhook_timestamp: i64,
}

/// Stores `rows` of `source`, skipping those already there (`ON CONFLICT DO NOTHING`), in one
/// statement, in `message_id` order: two batches holding the same ids (duplicates arriving
/// together) then wait for each other in the same order instead of deadlocking. Returns, per row, whether it was new: false for a duplicate of a stored row and
/// for the second of two equal ids in the same batch.
pub async fn insert_batch(
    pool: &PgPool,
    source: &str,
    rows: &[NewMessage],
) -> Result<Vec<bool>, sqlx::Error> {
    let ids: Vec<&str> = rows.iter().map(|r| r.message_id.as_str()).collect();
    let types: Vec<Option<&str>> = rows.iter().map(|r| r.event_type.as_deref()).collect();
    let keys: Vec<Option<&str>> = rows.iter().map(|r| r.ordering_key.as_deref()).collect();
    let payloads: Vec<&str> = rows.iter().map(|r| r.payload.as_str()).collect();
    let stamps: Vec<i64> = rows.iter().map(|r| r.webhook_timestamp).collect();
    let inserted: Vec<String> = sqlx::query_scalar(
        "INSERT INTO hookstream_inbox.inbox
                (source, message_id, event_type, ordering_key, payload, webhook_timestamp)
         SELECT $1, m, t, k, p::json, s
           FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int8[]) AS u(m, t, k, p, s)
          ORDER BY m
         ON CONFLICT (source, message_id) DO NOTHING
         RETURNING message_id",
    )
    .bind(source)
    .bind(&ids)
    .bind(&types)
    .bind(&keys)
    .bind(&payloads)
    .bind(&stamps)
    .fetch_all(pool)
    .await?;
    let mut new: std::collections::HashSet<String> = inserted.into_iter().collect();
    Ok(rows.iter().map(|r| new.remove(&r.message_id)).collect())
}

/// A claimed row, as the handler sees it.
#[derive(Debug, Clone)]
pub struct Message {
    /// The inbox row's id.
    pub id: i64,
    pub source: String,
    /// The sender's `webhook-id`.
    pub message_id: String,
    pub event_type: Option<String>,
    pub ordering_key: Option<String>,
    pub payload: serde_json::Value,
    pub webhook_timestamp: i64,
    pub received_at: DateTime<Utc>,
    pub pending_since: DateTime<Utc>,
    /// Failures so far (0 on the first try).
    pub attempts: i32,
    /// Deferrals so far.
    pub deferrals: i32,
    /// Times it was replayed out of quarantine.
    pub replays: i32,
}

/// A claimed row whose stored payload does not parse (written by some other tool).
#[derive(Debug, Clone)]
pub struct Unparsable {
    pub id: i64,
    pub message_id: String,
    pub error: String,
}

/// Where each claimed row is (its `ctid`) while the claiming transaction holds its lock:
/// nothing else can update or remove a locked row, so [`mark`] finds it there directly
/// (a TID scan), whatever the planner believes about the table's size.
#[derive(Debug, Default)]
pub struct Locked(HashMap<i64, String>);

/// Claims up to `limit` due pending rows of `source` on `tx` (locked until it ends; rows
/// other workers hold are skipped). A row with an ordering key is claimable only while no
/// older pending row of its key exists, so a key's rows go one at a time, in arrival order.
pub async fn claim(
    tx: &mut PgConnection,
    source: &str,
    limit: i64,
) -> Result<(Vec<Message>, Vec<Unparsable>, Locked), sqlx::Error> {
    let rows = sqlx::query(
        "SELECT i.id, i.ctid::text AS tid, i.message_id, i.event_type, i.ordering_key, i.payload::text AS payload,
                i.webhook_timestamp, i.received_at, i.pending_since, i.attempts, i.deferrals,
                i.replays
           FROM hookstream_inbox.inbox i
          WHERE i.source = $1 AND i.status = 'pending' AND i.next_attempt_at <= now()
            AND (i.ordering_key IS NULL OR NOT EXISTS (
                  SELECT 1 FROM hookstream_inbox.inbox e
                   WHERE e.source = i.source AND e.ordering_key = i.ordering_key
                     AND e.status = 'pending' AND e.id < i.id))
          ORDER BY i.next_attempt_at
          LIMIT $2
          FOR UPDATE OF i SKIP LOCKED",
    )
    .bind(source)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    let mut messages = Vec::with_capacity(rows.len());
    let mut bad = Vec::new();
    let mut locked = Locked(HashMap::with_capacity(rows.len()));
    for row in rows {
        let id: i64 = row.try_get("id")?;
        locked.0.insert(id, row.try_get("tid")?);
        let message_id: String = row.try_get("message_id")?;
        let text: String = row.try_get("payload")?;
        match serde_json::from_str(&text) {
            Ok(payload) => messages.push(Message {
                id,
                source: source.to_string(),
                message_id,
                event_type: row.try_get("event_type")?,
                ordering_key: row.try_get("ordering_key")?,
                payload,
                webhook_timestamp: row.try_get("webhook_timestamp")?,
                received_at: row.try_get("received_at")?,
                pending_since: row.try_get("pending_since")?,
                attempts: row.try_get("attempts")?,
                deferrals: row.try_get("deferrals")?,
                replays: row.try_get("replays")?,
            }),
            Err(e) => bad.push(Unparsable {
                id,
                message_id,
                error: e.to_string(),
            }),
        }
    }
    Ok((messages, bad, locked))
}

/// What a batch decided for one row.
#[derive(Debug, Clone, PartialEq)]
pub enum Mark {
    Processed,
    /// Pending again from `next_at`; `deferred` says whether it counts as a deferral (else a
    /// failure).
    Retry {
        next_at: DateTime<Utc>,
        reason: String,
        deferred: bool,
    },
    /// Given up; `deferred` as above (the last deferral or failure is counted too).
    Quarantine {
        reason: String,
        deferred: bool,
    },
}

/// Longest reason stored; handlers' error texts can be long.
const MAX_REASON_BYTES: usize = 2_000;

/// A reason fit for a text column: no NUL (PostgreSQL text cannot hold one), at most
/// `MAX_REASON_BYTES`.
fn clean_reason(reason: &str) -> String {
    let mut out: String = reason.replace('\0', "\u{fffd}");
    if out.len() > MAX_REASON_BYTES {
        let mut end = MAX_REASON_BYTES;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push('…');
    }
    out
}

/// Writes every row's mark in one statement (on the batch's transaction that claimed them,
/// which `locked` comes from). Fails, so the batch rolls back, unless every row was marked.
pub async fn mark(tx: &mut PgConnection, locked: &Locked, marks: &[(i64, Mark)]) -> Result<(), sqlx::Error> {
    if marks.is_empty() {
        return Ok(());
    }
    let mut ids = Vec::with_capacity(marks.len());
    let mut tids = Vec::with_capacity(marks.len());
    let mut statuses = Vec::with_capacity(marks.len());
    let mut next_at: Vec<Option<DateTime<Utc>>> = Vec::with_capacity(marks.len());
    let mut reasons: Vec<Option<String>> = Vec::with_capacity(marks.len());
    let mut deferred = Vec::with_capacity(marks.len());
    let mut failed = Vec::with_capacity(marks.len());
    for (id, m) in marks {
        ids.push(*id);
        let tid = locked
            .0
            .get(id)
            .ok_or_else(|| sqlx::Error::Protocol(format!("inbox row {id} was not claimed by this batch")))?;
        tids.push(tid.as_str());
        match m {
            Mark::Processed => {
                statuses.push("processed");
                next_at.push(None);
                reasons.push(None);
                deferred.push(0i32);
                failed.push(0i32);
            }
            Mark::Retry {
                next_at: at,
                reason,
                deferred: d,
            } => {
                statuses.push("pending");
                next_at.push(Some(*at));
                reasons.push(Some(clean_reason(reason)));
                deferred.push(i32::from(*d));
                failed.push(i32::from(!*d));
            }
            Mark::Quarantine { reason, deferred: d } => {
                statuses.push("quarantined");
                next_at.push(None);
                reasons.push(Some(clean_reason(reason)));
                deferred.push(i32::from(*d));
                failed.push(i32::from(!*d));
            }
        }
    }
    // By `ctid` (checked against the id), and planned afresh each time: a cached generic
    // plan made while the table was small (a new receiver's first seconds, before autovacuum
    // analyzed it) joined by a sequential scan of the whole table, and stayed cached while the
    // table grew, so every batch read every row: most of the benchmark's PostgreSQL time.
    let cols = MarkColumns {
        ids,
        statuses,
        next_at,
        reasons,
        deferred,
        failed,
    };
    let marked = cols.update(tx, Some(&tids)).await?;
    if marked.len() == marks.len() {
        return Ok(());
    }
    // A row not where it was claimed: something updated it in this transaction (a handler
    // that writes to the inbox itself). Those rows are marked by id, so the batch still ends.
    let marked: std::collections::HashSet<i64> = marked.into_iter().collect();
    let rest = cols.without(&marked);
    let count = rest.ids.len();
    let again = rest.update(tx, None).await?;
    if again.len() != count {
        return Err(sqlx::Error::Protocol(format!(
            "marked {} of {} claimed inbox rows",
            marks.len() - count + again.len(),
            marks.len()
        )));
    }
    Ok(())
}

/// [`mark`]'s statement parameters, one entry per row.
struct MarkColumns<'a> {
    ids: Vec<i64>,
    statuses: Vec<&'a str>,
    next_at: Vec<Option<DateTime<Utc>>>,
    reasons: Vec<Option<String>>,
    deferred: Vec<i32>,
    failed: Vec<i32>,
}

impl<'a> MarkColumns<'a> {
    /// The rows whose id is not in `done`.
    fn without(&self, done: &std::collections::HashSet<i64>) -> MarkColumns<'a> {
        let keep: Vec<usize> = (0..self.ids.len())
            .filter(|&i| !done.contains(&self.ids[i]))
            .collect();
        MarkColumns {
            ids: keep.iter().map(|&i| self.ids[i]).collect(),
            statuses: keep.iter().map(|&i| self.statuses[i]).collect(),
            next_at: keep.iter().map(|&i| self.next_at[i]).collect(),
            reasons: keep.iter().map(|&i| self.reasons[i].clone()).collect(),
            deferred: keep.iter().map(|&i| self.deferred[i]).collect(),
            failed: keep.iter().map(|&i| self.failed[i]).collect(),
        }
    }

    /// Updates the rows (found by `ctid` and id with `tids`, else by id); returns the ids
    /// updated.
    async fn update(&self, tx: &mut PgConnection, tids: Option<&[&str]>) -> Result<Vec<i64>, sqlx::Error> {
        let find = if tids.is_some() {
            "i.ctid = u.tid AND i.id = u.id"
        } else {
            "i.id = u.id"
        };
        let sql = format!(
            "UPDATE hookstream_inbox.inbox AS i
                SET status = u.status,
                    next_attempt_at = coalesce(u.next_at, i.next_attempt_at),
                    last_reason = coalesce(u.reason, i.last_reason),
                    deferrals = i.deferrals + u.deferred,
                    attempts = i.attempts + u.failed,
                    processed_at = CASE WHEN u.status = 'processed' THEN clock_timestamp() END,
                    quarantined_at = CASE WHEN u.status = 'quarantined' THEN clock_timestamp() END
               FROM unnest($1::int8[], $2::text[], $3::timestamptz[], $4::text[], $5::int4[], $6::int4[],
                           $7::text[]::tid[])
                    AS u(id, status, next_at, reason, deferred, failed, tid)
              WHERE {find}
             RETURNING i.id"
        );
        let none: Vec<&str> = Vec::new();
        sqlx::query_scalar(&sql)
            .bind(&self.ids)
            .bind(&self.statuses)
            .bind(&self.next_at)
            .bind(&self.reasons)
            .bind(&self.deferred)
            .bind(&self.failed)
            .bind(tids.unwrap_or(&none))
            .persistent(false)
            .fetch_all(&mut *tx)
            .await
    }
}

/// A quarantined row, for people.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Quarantined {
    pub id: i64,
    pub source: String,
    pub message_id: String,
    pub event_type: Option<String>,
    pub reason: Option<String>,
    pub attempts: i32,
    pub deferrals: i32,
    pub replays: i32,
    pub received_at: DateTime<Utc>,
    pub quarantined_at: Option<DateTime<Utc>>,
}

/// Quarantined rows, oldest quarantine first; of one source, or of all.
pub async fn list_quarantined(
    pool: &PgPool,
    source: Option<&str>,
    limit: i64,
) -> Result<Vec<Quarantined>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, source, message_id, event_type, last_reason AS reason, attempts, deferrals,
                replays, received_at, quarantined_at
           FROM hookstream_inbox.inbox
          WHERE status = 'quarantined' AND ($1::text IS NULL OR source = $1)
          ORDER BY quarantined_at, id
          LIMIT $2",
    )
    .bind(source)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Which quarantined rows to replay.
#[derive(Debug, Clone)]
pub enum Selection {
    /// These rows (by inbox id); ids that are not quarantined are left alone.
    Ids(Vec<i64>),
    /// Every quarantined row of the source.
    All,
}

/// Puts quarantined rows of `source` back to pending, due now, with their counts reset (the
/// bounds apply afresh) and the reason kept until the next outcome. Returns the ids replayed.
pub async fn replay_quarantined(
    pool: &PgPool,
    source: &str,
    selection: &Selection,
) -> Result<Vec<i64>, sqlx::Error> {
    let (all, ids) = match selection {
        Selection::All => (true, Vec::new()),
        Selection::Ids(ids) => (false, ids.clone()),
    };
    sqlx::query_scalar(
        "UPDATE hookstream_inbox.inbox
            SET status = 'pending', next_attempt_at = now(), pending_since = now(),
                attempts = 0, deferrals = 0, quarantined_at = NULL, replays = replays + 1
          WHERE source = $1 AND status = 'quarantined' AND ($2 OR id = ANY($3))
          RETURNING id",
    )
    .bind(source)
    .bind(all)
    .bind(&ids)
    .fetch_all(pool)
    .await
}

/// Deletes up to `limit` processed rows of `source` processed more than `hours` ago.
pub async fn prune(pool: &PgPool, source: &str, hours: u64, limit: i64) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "DELETE FROM hookstream_inbox.inbox
          WHERE id IN (SELECT id FROM hookstream_inbox.inbox
                        WHERE status = 'processed' AND source = $1
                          AND processed_at < now() - $2 * interval '1 hour'
                        LIMIT $3)",
    )
    .bind(source)
    .bind(hours as i64)
    .bind(limit)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// The gauges' figures for one source.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    pub source: String,
    pub pending: i64,
    pub deferred: i64,
    pub quarantined: i64,
    pub processed: i64,
    pub oldest_pending_age_seconds: f64,
}

/// Pending, deferred and quarantined counts and the oldest pending age of `source` (each
/// from its partial index; processed rows are not counted).
pub async fn stats(pool: &PgPool, source: &str) -> Result<Stats, sqlx::Error> {
    let row = sqlx::query(
        "SELECT count(*) AS pending,
                count(*) FILTER (WHERE deferrals > 0) AS deferred,
                coalesce(extract(epoch FROM now() - min(pending_since)), 0)::float8 AS oldest
           FROM hookstream_inbox.inbox WHERE source = $1 AND status = 'pending'",
    )
    .bind(source)
    .fetch_one(pool)
    .await?;
    let quarantined: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM hookstream_inbox.inbox WHERE source = $1 AND status = 'quarantined'",
    )
    .bind(source)
    .fetch_one(pool)
    .await?;
    Ok(Stats {
        source: source.to_string(),
        pending: row.try_get("pending")?,
        deferred: row.try_get("deferred")?,
        quarantined,
        processed: 0,
        oldest_pending_age_seconds: row.try_get::<f64, _>("oldest")?.max(0.0),
    })
}

/// Every source's counts, processed rows included (a full count: for the CLI, not for a
/// periodic gauge).
pub async fn stats_all(pool: &PgPool) -> Result<Vec<Stats>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT source,
                count(*) FILTER (WHERE status = 'pending') AS pending,
                count(*) FILTER (WHERE status = 'pending' AND deferrals > 0) AS deferred,
                count(*) FILTER (WHERE status = 'quarantined') AS quarantined,
                count(*) FILTER (WHERE status = 'processed') AS processed,
                coalesce(extract(epoch FROM now() - min(pending_since) FILTER (WHERE status = 'pending')), 0)::float8 AS oldest
           FROM hookstream_inbox.inbox GROUP BY source ORDER BY source",
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(Stats {
                source: row.try_get("source")?,
                pending: row.try_get("pending")?,
                deferred: row.try_get("deferred")?,
                quarantined: row.try_get("quarantined")?,
                processed: row.try_get("processed")?,
                oldest_pending_age_seconds: row.try_get::<f64, _>("oldest")?.max(0.0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_lose_nul_bytes_and_are_bounded() {
        assert_eq!(clean_reason("a\0b"), "a\u{fffd}b");
        let long = "é".repeat(3_000);
        let cleaned = clean_reason(&long);
        assert!(cleaned.len() <= MAX_REASON_BYTES + '…'.len_utf8());
        assert!(cleaned.ends_with('…'));
    }
}
