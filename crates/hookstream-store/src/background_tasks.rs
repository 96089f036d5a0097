//! Background tasks (Svix's `/background-task`): rows that any API process may run. A task is
//! taken under a lease (`claim`), renewed with each progress write (`progress`), and ended
//! once (`end`). An API that stops or dies simply stops renewing; when the lease lapses the
//! next `claim` (on any API) hands the task out again, with the cursor it had reached.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{FromRow, PgPool};
use uuid::Uuid;

use crate::StoreError;

/// The kinds of task, as Svix names them.
pub const REPLAY: &str = "endpoint.replay";
pub const BULK_REPLAY: &str = "endpoint.bulk-replay";
pub const RECOVER: &str = "endpoint.recover";
/// Svix's expunge-all-contents: done at once (`payload_keys::erase`), recorded finished.
pub const PURGE_CONTENT: &str = "application.purge_content";

/// How many tasks a tenant may have running at once unless configured otherwise
/// (`api.max_running_tasks_per_tenant`).
pub const DEFAULT_MAX_RUNNING_PER_TENANT: u32 = 3;

/// A task's id as the API and the CLI show it (Svix's ids carry a type prefix).
pub fn public_id(id: Uuid) -> String {
    format!("qtask_{id}")
}

/// The task id in `text`: `qtask_<uuid>` as shown, or the bare uuid.
pub fn parse_public_id(text: &str) -> Option<Uuid> {
    Uuid::parse_str(text.strip_prefix("qtask_").unwrap_or(text)).ok()
}

/// What a task replays: its window and (bulk replays) the filters on what was sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Params {
    pub since: DateTime<Utc>,
    pub until: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_types: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Svix's message status of the endpoint's latest attempt: 0 success, 1 pending, 2 fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u8>,
    /// The class of the latest attempt's HTTP status: 0 (no response), 100, 200, ... 500.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code_class: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct Task {
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// None: every endpoint of the tenant (a dead-letter replay of a whole application).
    pub endpoint_id: Option<Uuid>,
    pub kind: String,
    pub status: String,
    pub params: sqlx::types::Json<Params>,
    pub cursor: Option<Uuid>,
    pub sent: i64,
    pub skipped: i64,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLUMNS: &str =
    "id, tenant_id, endpoint_id, kind, status, params, cursor, sent, skipped, error, created_at, updated_at";

/// A field of [`Params`], for naming the bad one (each caller spells it its own way: the
/// API as Svix's body field, the CLI as its flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamField {
    Since,
    Until,
    EventTypes,
    Channel,
    Tag,
    Status,
    StatusCodeClass,
}

/// Parameters no task can run with: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field:?}: {reason}")]
pub struct BadParam {
    pub field: ParamField,
    pub reason: &'static str,
}

/// At most this many event types in a bulk replay's filter.
pub const MAX_EVENT_TYPES: usize = 100;
/// A channel or tag filter is 1 to this many characters.
pub const MAX_LABEL_LEN: usize = 128;

impl Params {
    /// The checks every way of starting a task applies: a window that can be (`until` after
    /// `since`, `since` not after `now`) and filters in range.
    pub fn check(&self, now: DateTime<Utc>) -> Result<(), BadParam> {
        let bad = |field, reason| Err(BadParam { field, reason });
        if self.until.is_some_and(|u| u <= self.since) {
            return bad(ParamField::Until, "must be after since");
        }
        if self.since > now {
            return bad(ParamField::Since, "must not be in the future");
        }
        if self.event_types.len() > MAX_EVENT_TYPES {
            return bad(ParamField::EventTypes, "at most 100 event types");
        }
        for (field, v) in [(ParamField::Channel, &self.channel), (ParamField::Tag, &self.tag)] {
            if v.as_ref()
                .is_some_and(|v| v.is_empty() || v.len() > MAX_LABEL_LEN)
            {
                return bad(field, "must be 1 to 128 characters");
            }
        }
        if self.status.is_some_and(|s| s > 2) {
            return bad(ParamField::Status, "must be 0 (success), 1 (pending) or 2 (fail)");
        }
        if self
            .status_code_class
            .is_some_and(|c| ![0, 100, 200, 300, 400, 500].contains(&c))
        {
            return bad(
                ParamField::StatusCodeClass,
                "must be 0, 100, 200, 300, 400 or 500",
            );
        }
        Ok(())
    }
}

/// Refused: the tenant already has this many tasks running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtCap(pub i64);

/// Creates a running task, unless its tenant already has `max_running` running (checked under
/// a per-tenant lock, so concurrent creates cannot both slip under the cap).
pub async fn create(
    pool: &PgPool,
    tenant: Uuid,
    endpoint: Option<Uuid>,
    kind: &str,
    params: &Params,
    max_running: i64,
) -> Result<Result<Task, AtCap>, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "SELECT pg_advisory_xact_lock(hashtextextended('hookstream.background_tasks:' || $1::text, 0))",
    )
    .bind(tenant)
    .execute(&mut *tx)
    .await?;
    let running: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM hookstream.background_tasks WHERE tenant_id = $1 AND status = 'running'",
    )
    .bind(tenant)
    .fetch_one(&mut *tx)
    .await?;
    if running >= max_running {
        return Ok(Err(AtCap(max_running)));
    }
    let task = sqlx::query_as(&format!(
        "INSERT INTO hookstream.background_tasks (id, tenant_id, endpoint_id, kind, params)
         VALUES ($1, $2, $3, $4, $5) RETURNING {COLUMNS}"
    ))
    .bind(Uuid::now_v7())
    .bind(tenant)
    .bind(endpoint)
    .bind(kind)
    .bind(sqlx::types::Json(params))
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Ok(task))
}

/// Records a task that was done at once (an erasure), finished, `sent` being what it reached.
pub async fn record_finished(pool: &PgPool, tenant: Uuid, kind: &str, sent: i64) -> Result<Task, StoreError> {
    Ok(sqlx::query_as(&format!(
        "INSERT INTO hookstream.background_tasks (id, tenant_id, kind, params, status, sent)
         VALUES ($1, $2, $3, $4, 'finished', $5) RETURNING {COLUMNS}"
    ))
    .bind(Uuid::now_v7())
    .bind(tenant)
    .bind(kind)
    .bind(sqlx::types::Json(Params {
        since: chrono::Utc::now(),
        ..Default::default()
    }))
    .bind(sent)
    .fetch_one(pool)
    .await?)
}

/// One task, within `scope` (a tenant; `None` for every tenant).
pub async fn get(pool: &PgPool, id: Uuid, scope: Option<Uuid>) -> Result<Option<Task>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM hookstream.background_tasks
         WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)"
    ))
    .bind(id)
    .bind(scope)
    .fetch_optional(pool)
    .await?)
}

/// What a list asks for.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub scope: Option<Uuid>,
    pub status: Option<String>,
    pub kind: Option<String>,
}

/// A page of tasks in id (creation) order after `cursor` in that order.
pub async fn list(
    pool: &PgPool,
    filter: &ListFilter,
    cursor: Option<Uuid>,
    descending: bool,
    limit: i64,
) -> Result<Vec<Task>, StoreError> {
    let (cmp, order) = if descending { ("<", "DESC") } else { (">", "ASC") };
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM hookstream.background_tasks
         WHERE ($1::uuid IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR status = $2)
           AND ($3::text IS NULL OR kind = $3) AND ($4::uuid IS NULL OR id {cmp} $4)
         ORDER BY id {order} LIMIT $5"
    ))
    .bind(filter.scope)
    .bind(&filter.status)
    .bind(&filter.kind)
    .bind(cursor)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Takes up to `max` running tasks nobody holds (never taken, or their lease lapsed) for
/// `owner`, for `lease`.
pub async fn claim(
    pool: &PgPool,
    owner: Uuid,
    lease: std::time::Duration,
    max: i64,
) -> Result<Vec<Task>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "UPDATE hookstream.background_tasks
         SET lease_owner = $1, lease_until = now() + make_interval(secs => $2)
         WHERE id IN (SELECT id FROM hookstream.background_tasks
                      WHERE status = 'running' AND (lease_until IS NULL OR lease_until < now())
                      ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED)
         RETURNING {COLUMNS}"
    ))
    .bind(owner)
    .bind(lease.as_secs_f64())
    .bind(max)
    .fetch_all(pool)
    .await?)
}

/// Records progress and renews the lease. False when `owner` no longer holds the task (its
/// lease lapsed and another API took it): the caller stops.
pub async fn progress(
    pool: &PgPool,
    id: Uuid,
    owner: Uuid,
    cursor: Option<Uuid>,
    sent: i64,
    skipped: i64,
    lease: std::time::Duration,
) -> Result<bool, StoreError> {
    let n = sqlx::query(
        "UPDATE hookstream.background_tasks
         SET cursor = $3, sent = $4, skipped = $5, updated_at = now(),
             lease_until = now() + make_interval(secs => $6)
         WHERE id = $1 AND lease_owner = $2 AND status = 'running'",
    )
    .bind(id)
    .bind(owner)
    .bind(cursor)
    .bind(sent)
    .bind(skipped)
    .bind(lease.as_secs_f64())
    .execute(pool)
    .await?
    .rows_affected();
    Ok(n == 1)
}

/// Ends a task `finished` (no error) or `failed` (with the reason); false when `owner` no
/// longer holds it.
pub async fn end(
    pool: &PgPool,
    id: Uuid,
    owner: Uuid,
    sent: i64,
    skipped: i64,
    error: Option<&str>,
) -> Result<bool, StoreError> {
    let n = sqlx::query(
        "UPDATE hookstream.background_tasks
         SET status = CASE WHEN $5::text IS NULL THEN 'finished' ELSE 'failed' END,
             sent = $3, skipped = $4, error = left($5, 1000), updated_at = now(),
             lease_owner = NULL, lease_until = NULL
         WHERE id = $1 AND lease_owner = $2 AND status = 'running'",
    )
    .bind(id)
    .bind(owner)
    .bind(sent)
    .bind(skipped)
    .bind(error)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(n == 1)
}

/// Gives up `owner`'s leases at shutdown, so another API takes its tasks up at once instead
/// of when the leases lapse.
pub async fn release(pool: &PgPool, owner: Uuid) -> Result<u64, StoreError> {
    Ok(sqlx::query(
        "UPDATE hookstream.background_tasks SET lease_owner = NULL, lease_until = NULL
         WHERE lease_owner = $1 AND status = 'running'",
    )
    .bind(owner)
    .execute(pool)
    .await?
    .rows_affected())
}

/// Drops ended tasks last updated before `before` (Svix lists the past 90 days), in batches.
pub async fn prune(pool: &PgPool, before: DateTime<Utc>, batch: i64) -> Result<u64, StoreError> {
    Ok(sqlx::query(
        "DELETE FROM hookstream.background_tasks WHERE id IN (
             SELECT id FROM hookstream.background_tasks
             WHERE status <> 'running' AND updated_at < $1 LIMIT $2)",
    )
    .bind(before)
    .bind(batch)
    .execute(pool)
    .await?
    .rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_the_field_that_cannot_be() {
        let now = Utc::now();
        let ok = Params {
            since: now - chrono::Duration::hours(1),
            ..Params::default()
        };
        assert_eq!(ok.check(now), Ok(()));
        let field = |p: Params| p.check(now).unwrap_err().field;
        assert_eq!(
            field(Params {
                until: Some(ok.since),
                ..ok.clone()
            }),
            ParamField::Until
        );
        assert_eq!(
            field(Params {
                since: now + chrono::Duration::seconds(5),
                ..ok.clone()
            }),
            ParamField::Since
        );
        assert_eq!(
            field(Params {
                event_types: vec!["a".into(); 101],
                ..ok.clone()
            }),
            ParamField::EventTypes
        );
        assert_eq!(
            field(Params {
                channel: Some(String::new()),
                ..ok.clone()
            }),
            ParamField::Channel
        );
        assert_eq!(
            field(Params {
                tag: Some("t".repeat(129)),
                ..ok.clone()
            }),
            ParamField::Tag
        );
        assert_eq!(
            field(Params {
                status: Some(3),
                ..ok.clone()
            }),
            ParamField::Status
        );
        assert_eq!(
            field(Params {
                status_code_class: Some(250),
                ..ok.clone()
            }),
            ParamField::StatusCodeClass
        );
    }
}
