//! Endpoints as the admin API manages them: always within one tenant, with their `uid` and
//! metadata, a caller-given first secret, full and partial updates, deletion, keyset pages in
//! id (creation) order, and the current signing secret opened for its owner.
//!
//! URLs are validated with the SSRF policy and sealed like `create_from` does; the
//! stored `url` is the redacted form, and that is all this module returns.

use chrono::{DateTime, Utc};
use hookstream_egress::AddressPolicy;
use hookstream_signing::Secret;
use serde::Serialize;
use sqlx::{PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use hookstream_routing::{channels, PayloadFilter};

use crate::endpoint_headers::{self, EndpointHeaders};
use crate::endpoints::{insert_secret, validate_url, Endpoint, NewEndpoint, SecretRow};
use crate::sealing::Sealer;
use crate::{EventFilter, StoreError};

/// Why an endpoint is disabled when the API disables it.
pub const DISABLED_BY_API: &str = "disabled through the API";

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ManagedEndpoint {
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// Redacted (see `endpoints::Endpoint::url`).
    pub url: String,
    pub description: String,
    pub event_types: Vec<String>,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub rate_limit_per_s: Option<i32>,
    pub timeout_ms: i32,
    pub max_in_flight: i32,
    pub uid: Option<String>,
    pub metadata: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub failing_since: Option<DateTime<Utc>>,
    /// Channels it listens on (empty: every message).
    pub channels: Vec<String>,
    /// Its payload filter, as given.
    pub payload_filter: Option<serde_json::Value>,
    /// The names of its custom headers (the values are sealed: `endpoint_headers`).
    pub header_names: Vec<String>,
}

impl ManagedEndpoint {
    /// What it subscribes to, compiled.
    pub fn subscription(&self) -> Result<hookstream_routing::Subscription, String> {
        crate::endpoints::subscription_of(&self.event_types, &self.channels, self.payload_filter.as_ref())
    }
}

const COLUMNS: &str =
    "id, tenant_id, url, description, event_types, enabled, disabled_reason, rate_limit_per_s, \
                       timeout_ms, max_in_flight, uid, metadata, created_at, updated_at, failing_since, \
                       channels, payload_filter, header_names";

/// An endpoint named by its id or, within its tenant, by its uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointRef {
    Id(Uuid),
    Uid(String),
}

impl EndpointRef {
    pub fn parse(segment: &str) -> Self {
        match Uuid::parse_str(segment) {
            Ok(id) => EndpointRef::Id(id),
            Err(_) => EndpointRef::Uid(segment.to_string()),
        }
    }
}

/// An endpoint's fields (create and full update). Limits left `None` keep their current value
/// (or take the defaults at creation).
#[derive(Debug, Clone, Default)]
pub struct EndpointFields {
    pub url: String,
    pub description: String,
    pub event_types: Vec<String>,
    pub disabled: bool,
    pub rate_limit_per_s: Option<i32>,
    pub uid: Option<String>,
    pub metadata: serde_json::Value,
    pub timeout_ms: Option<i32>,
    pub max_in_flight: Option<i32>,
    /// Channels to listen on (empty: every message).
    pub channels: Vec<String>,
    /// A payload filter (`hookstream_routing::payload_filter`).
    pub payload_filter: Option<serde_json::Value>,
    /// Custom headers: set at creation; `None` on an update keeps the current ones.
    pub headers: Option<EndpointHeaders>,
}

fn clash(e: sqlx::Error, uid: Option<&str>) -> StoreError {
    if let sqlx::Error::Database(db) = &e {
        if db.is_unique_violation() {
            return StoreError::Conflict(format!(
                "an endpoint with uid {:?} already exists in this application",
                uid.unwrap_or_default()
            ));
        }
        if db.is_foreign_key_violation() {
            return StoreError::NotFound("application".into());
        }
    }
    StoreError::from_db(e)
}

/// Most event types (or patterns) one endpoint may filter on: each is matched against every
/// event the endpoint's tenant sends, on shared dispatchers.
pub const MAX_EVENT_TYPES: usize = 100;

/// Checks the fields; returns the event-type patterns and the channels as stored.
fn check(f: &EndpointFields) -> Result<(Vec<String>, Vec<String>), StoreError> {
    if f.event_types.len() > MAX_EVENT_TYPES {
        return Err(StoreError::InvalidField {
            field: "eventTypes",
            message: format!(
                "at most {MAX_EVENT_TYPES} event types per endpoint (endpoint_event_types), not {}",
                f.event_types.len()
            ),
        });
    }
    let filter = EventFilter::new(&f.event_types).map_err(|message| StoreError::InvalidField {
        field: "eventTypes",
        message,
    })?;
    let channels = channels::check_channels(&f.channels).map_err(|message| StoreError::InvalidField {
        field: "channels",
        message,
    })?;
    if let Some(filter) = &f.payload_filter {
        PayloadFilter::from_value(filter.clone()).map_err(|e| StoreError::InvalidField {
            field: "filter",
            message: format!("invalid payload filter {e}"),
        })?;
    }
    if f.rate_limit_per_s.is_some_and(|r| r <= 0) {
        return Err(StoreError::Invalid("rate limit must be positive".into()));
    }
    if f.timeout_ms.is_some_and(|t| !(100..=30_000).contains(&t)) {
        return Err(StoreError::Invalid("timeout must be 100 to 30000 ms".into()));
    }
    if f.max_in_flight.is_some_and(|c| !(1..=1000).contains(&c)) {
        return Err(StoreError::Invalid("concurrency cap must be 1 to 1000".into()));
    }
    if f.description.len() > 10_000 {
        return Err(StoreError::Invalid(
            "description must be at most 10000 bytes".into(),
        ));
    }
    Ok((filter.patterns().to_vec(), channels))
}

/// Creates an endpoint of `tenant` with its first secret (`secret`, or a new one) and its
/// custom headers; returns the secret once. The URL is checked against `policy` before
/// anything is written.
pub async fn create(
    pool: &PgPool,
    sealer: &Sealer,
    policy: &AddressPolicy,
    tenant: Uuid,
    f: &EndpointFields,
    secret: Option<Secret>,
) -> Result<(ManagedEndpoint, Secret), StoreError> {
    let url = validate_url(&f.url, policy)?;
    let (patterns, channels) = check(f)?;
    let id = Uuid::now_v7();
    let (url_key_id, url_sealed) = sealer.seal_url(id, url.as_str());
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO hookstream.endpoints
            (id, tenant_id, url, url_sealed, url_key_id, description, event_types, enabled, disabled_reason,
             rate_limit_per_s, timeout_ms, max_in_flight, uid, metadata, channels, payload_filter)
         VALUES ($1, $2, $3, $4, $5, $6, $7, NOT $8, CASE WHEN $8 THEN $9 END, $10, coalesce($11, 15000),
                 coalesce($12, 32), $13, $14, $15, $16)",
    )
    .bind(id)
    .bind(tenant)
    .bind(hookstream_egress::redact(url.as_str()))
    .bind(url_sealed)
    .bind(url_key_id)
    .bind(&f.description)
    .bind(&patterns)
    .bind(f.disabled)
    .bind(DISABLED_BY_API)
    .bind(f.rate_limit_per_s)
    .bind(f.timeout_ms)
    .bind(f.max_in_flight)
    .bind(&f.uid)
    .bind(&f.metadata)
    .bind(&channels)
    .bind(&f.payload_filter)
    .execute(&mut *tx)
    .await
    .map_err(|e| clash(e, f.uid.as_deref()))?;
    if let Some(headers) = f.headers.as_ref().filter(|h| !h.headers.is_empty()) {
        endpoint_headers::store(&mut tx, sealer, id, headers).await?;
    }
    let endpoint = sqlx::query_as::<_, ManagedEndpoint>(&format!(
        "SELECT {COLUMNS} FROM hookstream.endpoints WHERE id = $1"
    ))
    .bind(id)
    .fetch_one(&mut *tx)
    .await?;
    let secret = secret.unwrap_or_else(Secret::generate);
    insert_secret(&mut tx, sealer, id, &secret, None).await?;
    tx.commit().await?;
    Ok((endpoint, secret))
}

/// One of `tenant`'s endpoints.
pub async fn find(
    pool: &PgPool,
    tenant: Uuid,
    ep: &EndpointRef,
) -> Result<Option<ManagedEndpoint>, StoreError> {
    let (id, uid) = match ep {
        EndpointRef::Id(id) => (Some(*id), None),
        EndpointRef::Uid(uid) => (None, Some(uid.as_str())),
    };
    let sql = if id.is_some() {
        format!("SELECT {COLUMNS} FROM hookstream.endpoints WHERE tenant_id = $1 AND id = $2")
    } else {
        format!("SELECT {COLUMNS} FROM hookstream.endpoints WHERE tenant_id = $1 AND uid = $3")
    };
    Ok(sqlx::query_as::<_, ManagedEndpoint>(&sql)
        .bind(tenant)
        .bind(id)
        .bind(uid)
        .fetch_optional(pool)
        .await?)
}

/// Several of `tenant`'s endpoints by id (those that exist).
pub async fn find_many(
    pool: &PgPool,
    tenant: Uuid,
    ids: &[Uuid],
) -> Result<Vec<ManagedEndpoint>, StoreError> {
    Ok(sqlx::query_as::<_, ManagedEndpoint>(&format!(
        "SELECT {COLUMNS} FROM hookstream.endpoints WHERE tenant_id = $1 AND id = ANY($2)"
    ))
    .bind(tenant)
    .bind(ids)
    .fetch_all(pool)
    .await?)
}

/// A page of `tenant`'s endpoints in id order after (descending: before) `cursor`.
pub async fn list(
    pool: &PgPool,
    tenant: Uuid,
    cursor: Option<Uuid>,
    descending: bool,
    limit: i64,
) -> Result<Vec<ManagedEndpoint>, StoreError> {
    list_on(pool, tenant, None, cursor, descending, limit).await
}

/// `list`, only of the endpoints listening on exactly `channel` when given.
pub async fn list_on(
    pool: &PgPool,
    tenant: Uuid,
    channel: Option<&str>,
    cursor: Option<Uuid>,
    descending: bool,
    limit: i64,
) -> Result<Vec<ManagedEndpoint>, StoreError> {
    let mut q = QueryBuilder::<Postgres>::new(format!(
        "SELECT {COLUMNS} FROM hookstream.endpoints WHERE tenant_id = "
    ));
    q.push_bind(tenant);
    if let Some(c) = channel {
        q.push(" AND channels = ARRAY[")
            .push_bind(c.to_string())
            .push("]::text[]");
    }
    if let Some(c) = cursor {
        q.push(if descending { " AND id < " } else { " AND id > " })
            .push_bind(c);
    }
    q.push(if descending {
        " ORDER BY id DESC"
    } else {
        " ORDER BY id"
    });
    q.push(" LIMIT ").push_bind(limit);
    Ok(q.build_query_as().fetch_all(pool).await?)
}

/// Every enabled endpoint of `tenant` (for the destinations of a message not yet attempted).
pub async fn enabled_of(pool: &PgPool, tenant: Uuid) -> Result<Vec<ManagedEndpoint>, StoreError> {
    Ok(sqlx::query_as::<_, ManagedEndpoint>(&format!(
        "SELECT {COLUMNS} FROM hookstream.endpoints WHERE tenant_id = $1 AND enabled ORDER BY id"
    ))
    .bind(tenant)
    .fetch_all(pool)
    .await?)
}

/// Replaces an endpoint's fields. A URL is validated and sealed again; enabling an endpoint
/// clears its failure record, disabling records `DISABLED_BY_API` (an endpoint disabled for
/// another reason keeps that reason). Headers are replaced only when `f.headers` is given.
pub async fn update(
    pool: &PgPool,
    sealer: &Sealer,
    policy: &AddressPolicy,
    tenant: Uuid,
    id: Uuid,
    f: &EndpointFields,
) -> Result<ManagedEndpoint, StoreError> {
    let mut tx = pool.begin().await?;
    let current = locked(&mut tx, tenant, id).await?;
    let sealed_url = sealed_unless_shown(sealer, policy, id, &f.url, &current.url)?;
    let row = write(&mut tx, sealer, tenant, id, f, sealed_url).await?;
    tx.commit().await?;
    Ok(row)
}

/// One of `tenant`'s endpoints, locked for the transaction's update.
async fn locked(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    tenant: Uuid,
    id: Uuid,
) -> Result<ManagedEndpoint, StoreError> {
    sqlx::query_as::<_, ManagedEndpoint>(&format!(
        "SELECT {COLUMNS} FROM hookstream.endpoints WHERE tenant_id = $1 AND id = $2 FOR UPDATE"
    ))
    .bind(tenant)
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("endpoint {id}")))
}

/// Writes every field of a locked endpoint (the URL only when `sealed_url` is given: redacted,
/// sealed, key id), then its headers when `f.headers` is given.
async fn write(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    sealer: &Sealer,
    tenant: Uuid,
    id: Uuid,
    f: &EndpointFields,
    sealed_url: Option<(String, Vec<u8>, String)>,
) -> Result<ManagedEndpoint, StoreError> {
    let (patterns, channels) = check(f)?;
    let (redacted, url_sealed, url_key_id) = match sealed_url {
        Some((r, s, k)) => (Some(r), Some(s), Some(k)),
        None => (None, None, None),
    };
    if let Some(headers) = &f.headers {
        endpoint_headers::store(tx, sealer, id, headers).await?;
    }
    sqlx::query_as::<_, ManagedEndpoint>(&format!(
        "UPDATE hookstream.endpoints SET
            url = coalesce($3, url), url_sealed = coalesce($4, url_sealed),
            url_key_id = coalesce($5, url_key_id), description = $6, event_types = $7,
            enabled = NOT $8,
            disabled_reason = CASE WHEN NOT $8 THEN NULL WHEN enabled THEN $9 ELSE disabled_reason END,
            failing_since = CASE WHEN NOT $8 AND NOT enabled THEN NULL ELSE failing_since END,
            rate_limit_per_s = $10, timeout_ms = coalesce($11, timeout_ms),
            max_in_flight = coalesce($12, max_in_flight), uid = $13, metadata = $14, channels = $15,
            payload_filter = $16, updated_at = now()
          WHERE tenant_id = $1 AND id = $2
          RETURNING {COLUMNS}"
    ))
    .bind(tenant)
    .bind(id)
    .bind(redacted)
    .bind(url_sealed)
    .bind(url_key_id)
    .bind(&f.description)
    .bind(&patterns)
    .bind(f.disabled)
    .bind(DISABLED_BY_API)
    .bind(f.rate_limit_per_s)
    .bind(f.timeout_ms)
    .bind(f.max_in_flight)
    .bind(&f.uid)
    .bind(&f.metadata)
    .bind(&channels)
    .bind(&f.payload_filter)
    .fetch_one(&mut **tx)
    .await
    .map_err(|e| clash(e, f.uid.as_deref()))
}

/// The URL to store, validated and sealed (redacted text, sealed bytes, key id); `None` when
/// `given` is the URL as it is shown (`shown`, its query values and credentials masked):
/// a client that saves back what it read (a Svix SDK's update sends the whole endpoint)
/// keeps the real URL instead of overwriting it with the masked one.
fn sealed_unless_shown(
    sealer: &Sealer,
    policy: &AddressPolicy,
    id: Uuid,
    given: &str,
    shown: &str,
) -> Result<Option<(String, Vec<u8>, String)>, StoreError> {
    if given == shown {
        return Ok(None);
    }
    let url = validate_url(given, policy)?;
    let (key_id, sealed) = sealer.seal_url(id, url.as_str());
    Ok(Some((hookstream_egress::redact(url.as_str()), sealed, key_id)))
}

/// Changes what a partial update names and keeps the rest; the URL, when it changes, is
/// validated and sealed again.
#[derive(Debug, Clone, Default)]
pub struct EndpointPatch {
    pub url: Option<String>,
    pub description: Option<String>,
    pub event_types: Option<Vec<String>>,
    pub disabled: Option<bool>,
    /// `Some(None)` removes the limit.
    pub rate_limit_per_s: Option<Option<i32>>,
    /// `Some(None)` removes the uid.
    pub uid: Option<Option<String>>,
    pub metadata: Option<serde_json::Value>,
    pub timeout_ms: Option<i32>,
    pub max_in_flight: Option<i32>,
    pub channels: Option<Vec<String>>,
    /// `Some(None)` removes the filter.
    pub payload_filter: Option<Option<serde_json::Value>>,
}

/// Applies a partial update (read, merge, full update, in one transaction).
pub async fn patch(
    pool: &PgPool,
    sealer: &Sealer,
    policy: &AddressPolicy,
    tenant: Uuid,
    id: Uuid,
    p: &EndpointPatch,
) -> Result<ManagedEndpoint, StoreError> {
    let mut tx = pool.begin().await?;
    let current = locked(&mut tx, tenant, id).await?;
    let merged = EndpointFields {
        url: p.url.clone().unwrap_or_default(),
        description: p.description.clone().unwrap_or(current.description.clone()),
        event_types: p.event_types.clone().unwrap_or(current.event_types.clone()),
        disabled: p.disabled.unwrap_or(!current.enabled),
        rate_limit_per_s: p.rate_limit_per_s.unwrap_or(current.rate_limit_per_s),
        uid: p.uid.clone().unwrap_or(current.uid.clone()),
        metadata: p.metadata.clone().unwrap_or(current.metadata.clone()),
        timeout_ms: p.timeout_ms,
        max_in_flight: p.max_in_flight,
        channels: p.channels.clone().unwrap_or(current.channels.clone()),
        payload_filter: p.payload_filter.clone().unwrap_or(current.payload_filter.clone()),
        headers: None,
    };
    let sealed_url = match &p.url {
        Some(raw) => sealed_unless_shown(sealer, policy, id, raw, &current.url)?,
        None => None,
    };
    let row = write(&mut tx, sealer, tenant, id, &merged, sealed_url).await?;
    tx.commit().await?;
    Ok(row)
}

/// Deletes one of `tenant`'s endpoints (with its secrets).
pub async fn delete(pool: &PgPool, tenant: Uuid, id: Uuid) -> Result<(), StoreError> {
    let done = sqlx::query("DELETE FROM hookstream.endpoints WHERE tenant_id = $1 AND id = $2")
        .bind(tenant)
        .bind(id)
        .execute(pool)
        .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("endpoint {id}")));
    }
    Ok(())
}

/// The newest secret that signs now (during a rotation, the new one), opened.
pub async fn current_secret(pool: &PgPool, sealer: &Sealer, id: Uuid) -> Result<Secret, StoreError> {
    let row: Option<SecretRow> = sqlx::query_as(
        "SELECT id, endpoint_id, secret, sealed, key_id, expires_at FROM hookstream.endpoint_secrets
          WHERE endpoint_id = $1 AND (expires_at IS NULL OR expires_at > now())
          ORDER BY created_at DESC, id DESC LIMIT 1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    let row = row.ok_or_else(|| StoreError::NotFound(format!("secret of endpoint {id}")))?;
    let text = row
        .plaintext(sealer)?
        .ok_or_else(|| StoreError::NotFound(format!("secret of endpoint {id}")))?;
    Secret::parse(&text).map_err(|e| StoreError::Invalid(format!("stored secret of endpoint {id}: {e}")))
}

/// Creates an endpoint and its first secret, both sealed at rest with its URL (and its
/// headers), from a `NewEndpoint`; returns the secret once (it is not shown again). The CLI's
/// and tests' form of `create`, which does the work.
pub async fn create_from(
    pool: &PgPool,
    sealer: &Sealer,
    policy: &AddressPolicy,
    new: NewEndpoint,
) -> Result<(Endpoint, Secret), StoreError> {
    if let Some(rate) = new.rate_limit_per_s {
        if rate <= 0 {
            return Err(StoreError::Invalid("rate limit must be positive".into()));
        }
    }
    let fields = EndpointFields {
        url: new.url,
        description: new.description,
        event_types: new.event_types,
        rate_limit_per_s: new.rate_limit_per_s,
        timeout_ms: new.timeout_ms,
        max_in_flight: new.max_in_flight,
        channels: new.channels,
        payload_filter: new.payload_filter,
        headers: new.headers,
        metadata: serde_json::json!({}),
        ..Default::default()
    };
    let (made, secret) = create(pool, sealer, policy, new.tenant_id, &fields, None)
        .await
        .map_err(|e| match e {
            StoreError::NotFound(_) => StoreError::NotFound(format!("tenant {}", new.tenant_id)),
            other => other,
        })?;
    Ok((crate::endpoints::get(pool, made.id).await?, secret))
}
