//! The message store (`hookstream.messages`, migration 0010): every event enqueued, kept for
//! reading back after the relay deleted its outbox row. `hookstream.enqueue` writes it in the
//! producer's own transaction; the admin API enqueues many messages per statement through
//! `enqueue_many` (one set-based statement with `hookstream.enqueue`'s checks, which also says
//! whether a message is new or an idempotency key's earlier one).
//!
//! Ids are UUIDv7 and `created_at` is the millisecond the id encodes, so a lookup by id goes
//! to one day partition, and pages in id order are pages in time order: keyset pagination on
//! the id is stable while messages are added (new ones sort after every page already read).
//! Retention drops whole day partitions (`drop_partitions_before`), created ahead of time by
//! `ensure_partitions`.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde::Serialize;
use sqlx::{PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use crate::payload_keys;
use crate::sealing::Sealer;
use crate::StoreError;

/// A message to enqueue.
#[derive(Debug, Clone, Default)]
pub struct NewMessage {
    pub tenant_id: Uuid,
    pub event_type: String,
    /// The payload's JSON text (an object): stored, signed and delivered byte for byte.
    pub payload: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    /// The idempotency key (the API's `eventId`): enqueuing it again returns the first id.
    pub idempotency_key: Option<String>,
    /// The creating request's key (the API's `idempotency-key` header).
    pub request_key: Option<String>,
    /// Channels it is sent to (Svix's `channels`; checked by `hookstream_routing::channels`).
    pub channels: Vec<String>,
    /// Tags to find it by (Svix's `tags`).
    pub tags: Vec<String>,
    /// Not delivered before this time.
    pub deliver_at: Option<DateTime<Utc>>,
}

/// What enqueuing one message did.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Enqueued {
    #[sqlx(rename = "out_id")]
    pub id: Uuid,
    /// False: the idempotency key had been used; `id` is the earlier message's.
    #[sqlx(rename = "out_created")]
    pub created: bool,
    /// The request key the message was created with.
    #[sqlx(rename = "out_request")]
    pub request_key: Option<String>,
}

/// Maps `hookstream.enqueue`'s refusals (SQLSTATE class HS) to input errors.
fn from_enqueue(e: sqlx::Error) -> StoreError {
    if let sqlx::Error::Database(db) = &e {
        if db.code().is_some_and(|c| c.starts_with("HS")) {
            return StoreError::Invalid(db.message().to_string());
        }
    }
    StoreError::from_db(e)
}

/// Writes a group of messages: checks every row (`hookstream.enqueue`'s checks and refusals,
/// raised through `hookstream.refuse`), inserts the idempotency keys, and writes the outbox
/// and message rows of the new ones, in input order, in one statement. A row whose key was
/// taken (earlier, or by a row before it in the same group) writes nothing and comes back
/// with `out_created` false and its own would-be id. The checks repeat `hookstream.enqueue`'s
/// (migration 0010): change both together. (Public for a test of its plan.)
#[doc(hidden)]
pub const ENQUEUE_MANY: &str = r#"
WITH parsed AS MATERIALIZED (
    -- Channels and tags come as one comma-joined text per row (neither name may hold a comma:
    -- `hookstream_routing::channels`); NULL for none.
    SELECT t.n, t.tenant, t.event_type, t.payload AS raw, json_typeof(t.payload::json) AS kind,
           coalesce(t.agg_type, '') AS agg_type, coalesce(t.agg_id, '') AS agg_id, t.key, t.request,
           string_to_array(t.channels, ',') AS channels, string_to_array(t.tags, ',') AS tags, t.deliver_at
      FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                  $8::text[], $9::text[], $10::timestamptz[])
           WITH ORDINALITY AS t(tenant, event_type, payload, agg_type, agg_id, key, request, channels, tags,
                                deliver_at, n)
), limits AS MATERIALIZED (
    -- One row (LIMIT says so to the planner: without it, an estimate of thousands made the
    -- statement's cost pass jit_above_cost, and every group paid ~100 ms of JIT compiling).
    SELECT max_payload_bytes AS max_bytes, store_messages AS store FROM hookstream.settings LIMIT 1
), checked AS MATERIALIZED (
    SELECT p.*, clock_timestamp() AS at,
           CASE
             WHEN NOT EXISTS (SELECT 1 FROM hookstream.tenants x WHERE x.id = p.tenant)
               THEN hookstream.refuse('HS001', format('unknown tenant %s', p.tenant))
             WHEN p.event_type IS NULL OR length(p.event_type) > 200
                  OR p.event_type !~ '^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$'
               THEN hookstream.refuse('HS002', format(
                   'invalid event type %s: use dot-separated words of letters, digits, _ and -',
                   quote_literal(coalesce(p.event_type, ''))))
             WHEN p.kind IS NULL OR p.kind <> 'object'
               THEN hookstream.refuse('HS003', 'payload must be a JSON object')
             WHEN octet_length(p.raw) > s.max_bytes
               THEN hookstream.refuse('HS004', format('payload of %s bytes exceeds the limit of %s bytes',
                                                      octet_length(p.raw), s.max_bytes))
             WHEN p.key IS NOT NULL AND length(p.key) NOT BETWEEN 1 AND 255
               THEN hookstream.refuse('HS006', 'idempotency key must be 1 to 255 characters')
             ELSE true
           END AS ok
      FROM parsed p CROSS JOIN limits s
), ids AS MATERIALIZED (
    SELECT c.*, hookstream.uuid_v7_at(c.at) AS id FROM checked c WHERE c.ok
), keyed AS (
    -- A concurrent transaction holding the same key makes this wait for it to end. In key
    -- order, so two groups holding the same keys wait in the same order instead of
    -- deadlocking; among equal keys in one group, the first row takes it.
    INSERT INTO hookstream.idempotency_keys (tenant_id, key, event_id)
    SELECT tenant, key, id FROM ids WHERE key IS NOT NULL ORDER BY tenant, key, n
    ON CONFLICT (tenant_id, key) DO NOTHING
    RETURNING event_id
), fresh AS MATERIALIZED (
    SELECT i.* FROM ids i WHERE i.key IS NULL OR i.id IN (SELECT event_id FROM keyed)
), outboxed AS (
    INSERT INTO hookstream.outbox (event_id, tenant_id, event_type, aggregate_type, aggregate_id, payload, headers,
                                   channels, deliver_at)
    SELECT id, tenant, event_type, agg_type, agg_id, raw, '{}'::jsonb, channels, deliver_at FROM fresh ORDER BY n
    RETURNING 1
), stored AS (
    INSERT INTO hookstream.messages (tenant_id, event_id, created_at, event_type, aggregate_type, aggregate_id,
                                     body, idempotency_key, request_key, channels, tags, deliver_at)
    SELECT tenant, id, at, event_type, agg_type, agg_id, raw, key, request, channels, tags, deliver_at
      FROM fresh WHERE (SELECT store FROM limits) ORDER BY n
    RETURNING 1
)
SELECT i.id AS out_id, (i.key IS NULL OR i.id IN (SELECT id FROM fresh)) AS out_created,
       i.request AS out_request
  FROM ids i ORDER BY i.n
"#;

/// For the rows whose idempotency key was taken: the event that holds it and the request key
/// that created that event (run after the group's statement, which waited for any
/// transaction holding one of the keys, so the holder is committed and visible).
const TAKEN_KEYS: &str = r#"
SELECT k.event_id AS out_id, false AS out_created, m.request_key AS out_request
  FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS t(tenant, key, n)
  LEFT JOIN hookstream.idempotency_keys k ON k.tenant_id = t.tenant AND k.key = t.key
  LEFT JOIN hookstream.messages m
         ON m.tenant_id = k.tenant_id AND m.event_id = k.event_id
        AND m.created_at >= hookstream.uuid_v7_time(k.event_id) - interval '1 second'
        AND m.created_at < hookstream.uuid_v7_time(k.event_id) + interval '1 second'
 ORDER BY t.n
"#;

/// Enqueues every message in one statement (one transaction): all are written, or none.
/// Returns one result per message, in order.
pub async fn enqueue_many(pool: &PgPool, rows: &[NewMessage]) -> Result<Vec<Enqueued>, StoreError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let tenants: Vec<Uuid> = rows.iter().map(|r| r.tenant_id).collect();
    let types: Vec<&str> = rows.iter().map(|r| r.event_type.as_str()).collect();
    let payloads: Vec<&str> = rows.iter().map(|r| r.payload.as_str()).collect();
    let agg_types: Vec<&str> = rows.iter().map(|r| r.aggregate_type.as_str()).collect();
    let agg_ids: Vec<&str> = rows.iter().map(|r| r.aggregate_id.as_str()).collect();
    let keys: Vec<Option<&str>> = rows.iter().map(|r| r.idempotency_key.as_deref()).collect();
    let requests: Vec<Option<&str>> = rows.iter().map(|r| r.request_key.as_deref()).collect();
    let joined = |names: &[String]| (!names.is_empty()).then(|| names.join(","));
    let channels: Vec<Option<String>> = rows.iter().map(|r| joined(&r.channels)).collect();
    let tags: Vec<Option<String>> = rows.iter().map(|r| joined(&r.tags)).collect();
    let deliver_at: Vec<Option<DateTime<Utc>>> = rows.iter().map(|r| r.deliver_at).collect();
    let mut done = sqlx::query_as::<_, Enqueued>(ENQUEUE_MANY)
        .bind(&tenants)
        .bind(&types)
        .bind(&payloads)
        .bind(&agg_types)
        .bind(&agg_ids)
        .bind(&keys)
        .bind(&requests)
        .bind(&channels)
        .bind(&tags)
        .bind(&deliver_at)
        .fetch_all(pool)
        .await
        .map_err(from_enqueue)?;
    let taken: Vec<usize> = (0..done.len()).filter(|&i| !done[i].created).collect();
    if taken.is_empty() {
        return Ok(done);
    }
    let tenants: Vec<Uuid> = taken.iter().map(|&i| rows[i].tenant_id).collect();
    let keys: Vec<Option<&str>> = taken
        .iter()
        .map(|&i| rows[i].idempotency_key.as_deref())
        .collect();
    let holders = sqlx::query_as::<_, (Option<Uuid>, bool, Option<String>)>(TAKEN_KEYS)
        .bind(&tenants)
        .bind(&keys)
        .fetch_all(pool)
        .await
        .map_err(StoreError::from_db)?;
    for (&i, (holder, _, request)) in taken.iter().zip(holders) {
        // The key's row is gone only if retention dropped it since; the id stays our own.
        if let Some(id) = holder {
            done[i].id = id;
        }
        done[i].request_key = request;
    }
    Ok(done)
}

/// Stores a message that is not enqueued (the API's send-example: delivered to one endpoint
/// through a retry tier, not routed).
pub async fn insert(pool: &PgPool, id: Uuid, m: &NewMessage) -> Result<DateTime<Utc>, StoreError> {
    let at = v7_time(id).ok_or_else(|| StoreError::Invalid(format!("{id} is not a UUIDv7")))?;
    sqlx::query(
        "INSERT INTO hookstream.messages (tenant_id, event_id, created_at, event_type, aggregate_type,
                                          aggregate_id, body, idempotency_key, request_key, channels, tags)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, '{}'::text[]), nullif($11, '{}'::text[]))",
    )
    .bind(m.tenant_id)
    .bind(id)
    .bind(at)
    .bind(&m.event_type)
    .bind(&m.aggregate_type)
    .bind(&m.aggregate_id)
    .bind(&m.payload)
    .bind(&m.idempotency_key)
    .bind(&m.request_key)
    .bind(&m.channels)
    .bind(&m.tags)
    .execute(pool)
    .await
    .map_err(StoreError::from_db)?;
    Ok(at)
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Message {
    pub tenant_id: Uuid,
    pub event_id: Uuid,
    pub created_at: DateTime<Utc>,
    pub event_type: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    /// The payload's JSON text as the producer wrote it (`{}` when listed without content).
    pub payload: String,
    pub idempotency_key: Option<String>,
    pub channels: Vec<String>,
    pub tags: Vec<String>,
    pub deliver_at: Option<DateTime<Utc>>,
    /// Once the relay shipped it, the payload is sealed (`payload_keys`): `payload` is empty
    /// then, and `Keyring::open` with `payload_key` gives the text.
    pub body_sealed: Option<Vec<u8>>,
    pub payload_key: Option<Uuid>,
    /// Its content was erased (expunged, its tenant's or subject's erasure, or its data key's
    /// retention): `payload` is `{}`, and it is neither resent nor replayed.
    pub erased: bool,
}

/// Opens the sealed copies among `msgs` in place: `payload` becomes the text, or `{}` with
/// `erased` set when its data key is gone.
pub async fn open_all(keys: &payload_keys::Keyring, msgs: &mut [Message]) -> Result<(), StoreError> {
    for m in msgs.iter_mut() {
        let (Some(key), Some(sealed)) = (m.payload_key, m.body_sealed.as_deref()) else {
            continue;
        };
        match keys
            .open(
                &key.to_string(),
                &m.event_id.to_string(),
                &m.tenant_id.to_string(),
                sealed,
            )
            .await?
        {
            Ok(plain) => m.payload = String::from_utf8(plain).unwrap_or_else(|_| "{}".into()),
            Err(_) => {
                m.payload = "{}".into();
                m.erased = true;
            }
        }
    }
    Ok(())
}

fn columns(with_content: bool) -> &'static str {
    // `body` is the exact text; rows written before it existed have only the jsonb `payload`.
    if with_content {
        "tenant_id, event_id, created_at, event_type, aggregate_type, aggregate_id, \
         coalesce(body, payload::text, '') AS payload, idempotency_key, coalesce(channels, '{}') AS channels, \
         coalesce(tags, '{}') AS tags, deliver_at, body_sealed, payload_key, erased_at IS NOT NULL AS erased"
    } else {
        "tenant_id, event_id, created_at, event_type, aggregate_type, aggregate_id, '{}'::text AS payload, \
         idempotency_key, coalesce(channels, '{}') AS channels, coalesce(tags, '{}') AS tags, deliver_at, \
         NULL::bytea AS body_sealed, NULL::uuid AS payload_key, erased_at IS NOT NULL AS erased"
    }
}

/// The time a UUIDv7 encodes (None for other versions).
pub fn v7_time(id: Uuid) -> Option<DateTime<Utc>> {
    if id.get_version_num() != 7 {
        return None;
    }
    let (secs, nanos) = id.get_timestamp()?.to_unix();
    DateTime::from_timestamp(secs as i64, nanos)
}

/// The smallest UUIDv7 of the millisecond of `at`: every id made at or after `at`'s
/// millisecond is at least this, every id made before is smaller.
pub fn v7_floor(at: DateTime<Utc>) -> Uuid {
    // A UUIDv7 holds 48 bits of milliseconds (until the year 10889): times beyond clamp to its
    // last millisecond rather than wrap around to 1970.
    let ms = at.timestamp_millis().clamp(0, (1 << 48) - 1) as u64;
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    Uuid::from_bytes(b)
}

/// The millisecond after `at`, the first one a strict "after" bound admits; chrono's own
/// addition panics past its last representable time, which a query may ask for.
pub fn after_next_ms(at: DateTime<Utc>) -> DateTime<Utc> {
    at.checked_add_signed(Duration::milliseconds(1)).unwrap_or(at)
}

/// One of a tenant's messages.
pub async fn get(
    pool: &PgPool,
    tenant: Uuid,
    id: Uuid,
    with_content: bool,
) -> Result<Option<Message>, StoreError> {
    let Some(at) = v7_time(id) else {
        return Ok(None);
    };
    Ok(sqlx::query_as::<_, Message>(&format!(
        "SELECT {} FROM hookstream.messages
          WHERE tenant_id = $1 AND event_id = $2 AND created_at >= $3 AND created_at < $4",
        columns(with_content)
    ))
    .bind(tenant)
    .bind(id)
    .bind(at - Duration::seconds(1))
    .bind(at + Duration::seconds(1))
    .fetch_optional(pool)
    .await?)
}

/// Several of a tenant's messages by id (those that exist).
pub async fn get_many(
    pool: &PgPool,
    tenant: Uuid,
    ids: &[Uuid],
    with_content: bool,
) -> Result<Vec<Message>, StoreError> {
    let times: Vec<DateTime<Utc>> = ids.iter().filter_map(|id| v7_time(*id)).collect();
    let (Some(lo), Some(hi)) = (times.iter().min(), times.iter().max()) else {
        return Ok(Vec::new());
    };
    Ok(sqlx::query_as::<_, Message>(&format!(
        "SELECT {} FROM hookstream.messages
          WHERE tenant_id = $1 AND event_id = ANY($2) AND created_at >= $3 AND created_at < $4",
        columns(with_content)
    ))
    .bind(tenant)
    .bind(ids)
    .bind(*lo - Duration::seconds(1))
    .bind(*hi + Duration::seconds(1))
    .fetch_all(pool)
    .await?)
}

/// A shipped message's sealed payload, for its message-store copy.
#[derive(Debug, Clone)]
pub struct SealedCopy {
    pub tenant: Uuid,
    pub event: Uuid,
    pub key: Uuid,
    pub sealed: Vec<u8>,
}

/// Replaces the clear text of shipped messages' store copies with their sealed payloads, in
/// the relay's (claiming) transaction. Copies that do not exist (`store_messages` off) are
/// skipped, and so are copies erased since the commit (an expunge between the commit and the
/// relay): writing the sealed payload back would bring the content back.
pub async fn seal_copies(conn: &mut sqlx::PgConnection, copies: &[SealedCopy]) -> Result<(), StoreError> {
    let times: Vec<DateTime<Utc>> = copies.iter().filter_map(|c| v7_time(c.event)).collect();
    let (Some(lo), Some(hi)) = (times.iter().min(), times.iter().max()) else {
        return Ok(());
    };
    sqlx::query(
        "UPDATE hookstream.messages m
            SET body_sealed = u.sealed, payload_key = u.key, body = NULL, payload = NULL
           FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::bytea[]) AS u(tenant_id, event_id, key, sealed)
          WHERE m.tenant_id = u.tenant_id AND m.event_id = u.event_id
            AND m.created_at >= $5 AND m.created_at < $6
            AND m.erased_at IS NULL",
    )
    .bind(copies.iter().map(|c| c.tenant).collect::<Vec<_>>())
    .bind(copies.iter().map(|c| c.event).collect::<Vec<_>>())
    .bind(copies.iter().map(|c| c.key).collect::<Vec<_>>())
    .bind(copies.iter().map(|c| c.sealed.clone()).collect::<Vec<_>>())
    .bind(*lo - Duration::seconds(1))
    .bind(*hi + Duration::seconds(1))
    .execute(conn)
    .await?;
    Ok(())
}

/// Seals `plain`, the payload of `tenant`'s stored message `event` still in clear (written
/// before payloads were sealed, or an example the API sends itself), with the tenant's key of
/// today, and its store copy with it. Returns the key id and the sealed bytes.
pub async fn seal_stored(
    pool: &PgPool,
    sealer: &Sealer,
    tenant: Uuid,
    event: Uuid,
    plain: &[u8],
) -> Result<(Uuid, Vec<u8>), StoreError> {
    let mut tx = pool.begin().await?;
    let scope: payload_keys::KeyScope = (tenant, None, chrono::Utc::now().date_naive());
    let keys = payload_keys::sealing_keys(&mut tx, pool, sealer, std::slice::from_ref(&scope)).await?;
    let key = &keys[&scope];
    let sealed = key.seal(&event.to_string(), &tenant.to_string(), plain);
    seal_copies(
        &mut tx,
        &[SealedCopy {
            tenant,
            event,
            key: key.id,
            sealed: sealed.clone(),
        }],
    )
    .await?;
    tx.commit().await?;
    Ok((key.id, sealed))
}

/// Replaces a message's stored payload with `{}` (Svix's expunge-content).
pub async fn expunge(pool: &PgPool, tenant: Uuid, id: Uuid) -> Result<(), StoreError> {
    let at = v7_time(id).ok_or_else(|| StoreError::NotFound(format!("message {id}")))?;
    let done = sqlx::query(
        "UPDATE hookstream.messages SET body = '{}', payload = NULL, body_sealed = NULL, payload_key = NULL,
                erased_at = coalesce(erased_at, now())
          WHERE tenant_id = $1 AND event_id = $2 AND created_at >= $3 AND created_at < $4",
    )
    .bind(tenant)
    .bind(id)
    .bind(at - Duration::seconds(1))
    .bind(at + Duration::seconds(1))
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("message {id}")));
    }
    Ok(())
}

/// Which messages to list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only these event types (any, when empty).
    pub event_types: Vec<String>,
    /// Created before this time.
    pub before: Option<DateTime<Utc>>,
    /// Created after this time.
    pub after: Option<DateTime<Utc>>,
    pub with_content: bool,
    /// Only messages sent to this channel.
    pub channel: Option<String>,
    /// Only messages with this tag.
    pub tag: Option<String>,
}

/// A page of a tenant's messages in id (time) order, after the cursor in that order
/// (newest first when `descending`).
pub async fn list(
    pool: &PgPool,
    tenant: Uuid,
    cursor: Option<Uuid>,
    descending: bool,
    filter: &ListFilter,
    limit: i64,
) -> Result<Vec<Message>, StoreError> {
    let mut q = QueryBuilder::<Postgres>::new(format!(
        "SELECT {} FROM hookstream.messages WHERE tenant_id = ",
        columns(filter.with_content)
    ));
    q.push_bind(tenant);
    // Id bounds, each with a time bound a second wider so the planner skips whole days.
    let mut upper: Option<Uuid> = cursor.filter(|_| descending);
    let mut lower: Option<Uuid> = cursor.filter(|_| !descending);
    if let Some(before) = filter.before {
        let b = v7_floor(before);
        upper = Some(upper.map_or(b, |u| u.min(b)));
    }
    if let Some(after) = filter.after {
        // Strictly after: from the next millisecond.
        let a = v7_floor(after_next_ms(after));
        let a = Uuid::from_u128(a.as_u128().saturating_sub(1));
        lower = Some(lower.map_or(a, |l| l.max(a)));
    }
    if let Some(u) = upper {
        q.push(" AND event_id < ").push_bind(u);
        if let Some(t) = v7_time_any(u) {
            q.push(" AND created_at < ").push_bind(t + Duration::seconds(1));
        }
    }
    if let Some(l) = lower {
        q.push(" AND event_id > ").push_bind(l);
        if let Some(t) = v7_time_any(l) {
            q.push(" AND created_at >= ").push_bind(t - Duration::seconds(1));
        }
    }
    if !filter.event_types.is_empty() {
        q.push(" AND event_type = ANY(")
            .push_bind(filter.event_types.clone())
            .push(")");
    }
    if let Some(channel) = &filter.channel {
        q.push(" AND channels @> ARRAY[")
            .push_bind(channel.clone())
            .push("]::text[]");
    }
    if let Some(tag) = &filter.tag {
        q.push(" AND tags @> ARRAY[")
            .push_bind(tag.clone())
            .push("]::text[]");
    }
    q.push(if descending {
        " ORDER BY event_id DESC"
    } else {
        " ORDER BY event_id"
    });
    q.push(" LIMIT ").push_bind(limit);
    Ok(q.build_query_as().fetch_all(pool).await?)
}

/// The millisecond in the first 48 bits of any UUID (v7 or a bound made by `v7_floor`).
fn v7_time_any(id: Uuid) -> Option<DateTime<Utc>> {
    let b = id.as_bytes();
    let mut ms = [0u8; 8];
    ms[2..].copy_from_slice(&b[..6]);
    DateTime::from_timestamp_millis(i64::from_be_bytes(ms))
}

/// Creates the day partitions of `from` and the `days - 1` days after it; returns the days that
/// could not be created now (locked, or rows of that day already in the default partition).
pub async fn ensure_partitions(
    pool: &PgPool,
    from: NaiveDate,
    days: u32,
) -> Result<Vec<NaiveDate>, StoreError> {
    let mut missed = Vec::new();
    for d in 0..days {
        let day = from + chrono::Days::new(u64::from(d));
        let made: Result<bool, sqlx::Error> =
            sqlx::query_scalar("SELECT hookstream.ensure_message_partition($1)")
                .bind(day)
                .fetch_one(pool)
                .await;
        match made {
            Ok(true) => {}
            Ok(false) => missed.push(day),
            // lock_timeout: producers held the table; try again at the next round.
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("55P03") => missed.push(day),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(missed)
}

/// Drops the day partitions before `day` (and deletes older rows of the default partition);
/// returns the partitions dropped.
pub async fn drop_partitions_before(pool: &PgPool, day: NaiveDate) -> Result<Vec<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT hookstream.drop_message_partitions($1)")
            .bind(day)
            .fetch_all(pool)
            .await?,
    )
}

/// The day partitions that exist, oldest first (the default partition last).
pub async fn partitions(pool: &PgPool) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i
         JOIN pg_class c ON c.oid = i.inhrelid
         JOIN pg_class p ON p.oid = i.inhparent
         JOIN pg_namespace n ON n.oid = p.relnamespace
         WHERE n.nspname = 'hookstream' AND p.relname = 'messages'
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v7_bounds_order_like_time() {
        let id = Uuid::now_v7();
        let at = v7_time(id).unwrap();
        assert!(v7_floor(at) <= id);
        assert!(v7_floor(at + Duration::milliseconds(1)) > id);
        assert_eq!(
            v7_time_any(v7_floor(at)).unwrap().timestamp_millis(),
            at.timestamp_millis()
        );
        assert_eq!(v7_time(Uuid::new_v4()), None);
    }

    #[test]
    fn bounds_past_what_a_v7_id_holds_clamp_instead_of_wrapping_or_panicking() {
        // What a query string deserializes to (`FromStr`, as serde does).
        let far: DateTime<Utc> = "+262142-12-31T23:59:59.999Z".parse().unwrap();
        assert_eq!(after_next_ms(DateTime::<Utc>::MAX_UTC), DateTime::<Utc>::MAX_UTC);
        let last = v7_floor(after_next_ms(far));
        assert!(last > Uuid::now_v7(), "not wrapped around to 1970");
        assert_eq!(last, v7_floor(DateTime::<Utc>::MAX_UTC));
        assert_eq!(v7_floor(DateTime::<Utc>::MIN_UTC), Uuid::nil());
    }
}
