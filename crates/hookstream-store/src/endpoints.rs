//! Endpoints: where a tenant's events are delivered, with their filters, limits and secrets.

use chrono::{DateTime, Utc};
use hookstream_egress::AddressPolicy;
use hookstream_signing::Secret;
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use hookstream_routing::{PayloadFilter, Subscription};

use crate::endpoint_headers::EndpointHeaders;
use crate::sealing::Sealer;
use crate::{EventFilter, StoreError};

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Endpoint {
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// The URL as people may see it: userinfo, query values and token-looking path segments
    /// redacted (`hookstream_egress::redact`). The full URL is sealed at rest and only the
    /// dispatcher opens it (`ActiveEndpoint::target_url`).
    pub url: String,
    pub description: String,
    pub event_types: Vec<String>,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub rate_limit_per_s: Option<i32>,
    pub timeout_ms: i32,
    pub max_in_flight: i32,
    pub created_at: DateTime<Utc>,
    /// When deliveries started failing with no success since (None: healthy).
    pub failing_since: Option<DateTime<Utc>>,
    /// Channels it listens on (empty: every message).
    pub channels: Vec<String>,
    /// The payload filter (a JSON object), if any.
    pub payload_filter: Option<serde_json::Value>,
    /// Names of its custom headers (values are sealed).
    pub header_names: Vec<String>,
}

/// What it takes to create an endpoint; limits left `None` take the defaults.
#[derive(Debug, Clone, Default)]
pub struct NewEndpoint {
    pub tenant_id: Uuid,
    pub url: String,
    pub description: String,
    pub event_types: Vec<String>,
    pub rate_limit_per_s: Option<i32>,
    pub timeout_ms: Option<i32>,
    pub max_in_flight: Option<i32>,
    /// Channels to listen on (empty: every message).
    pub channels: Vec<String>,
    /// A payload filter (`hookstream_routing::payload_filter`).
    pub payload_filter: Option<serde_json::Value>,
    pub headers: Option<EndpointHeaders>,
}

/// An enabled endpoint as the dispatcher delivers to it: what it subscribes to (compiled),
/// its full URL and custom headers (opened from their sealed forms: secrets, never logged) and
/// its active signing secrets.
#[derive(Clone)]
pub struct ActiveEndpoint {
    pub endpoint: Endpoint,
    /// The URL to POST to, with whatever token it carries.
    pub target_url: String,
    pub subscription: Subscription,
    /// Custom headers every delivery carries.
    pub headers: Vec<(String, String)>,
    pub secrets: Vec<Secret>,
    /// When the first of `secrets` expires (ms since the epoch), if one does: the snapshot
    /// reloads the endpoint then, so an expired secret stops signing.
    pub secrets_expire_at_ms: Option<i64>,
}

impl std::fmt::Debug for ActiveEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveEndpoint")
            .field("endpoint", &self.endpoint)
            .field("target_url", &"<sealed>")
            .field("subscription", &self.subscription)
            .field("headers", &self.headers.len())
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

pub(crate) const COLUMNS: &str = "id, tenant_id, url, description, event_types, enabled, disabled_reason, \
                       rate_limit_per_s, timeout_ms, max_in_flight, created_at, failing_since, channels, \
                       payload_filter, header_names";

/// An endpoint row with its sealed URL.
#[derive(sqlx::FromRow)]
pub(crate) struct EndpointRow {
    #[sqlx(flatten)]
    pub(crate) endpoint: Endpoint,
    pub(crate) url_sealed: Option<Vec<u8>>,
    pub(crate) url_key_id: Option<String>,
    pub(crate) headers_sealed: Option<Vec<u8>>,
    pub(crate) headers_key_id: Option<String>,
}

/// What the row columns of `EndpointRow` are, after `COLUMNS`.
pub(crate) const SEALED_COLUMNS: &str = "url_sealed, url_key_id, headers_sealed, headers_key_id";

impl EndpointRow {
    /// The full URL: opened from its sealed form, or the plaintext of a row written before
    /// URLs were sealed.
    pub(crate) fn target_url(&self, sealer: &Sealer) -> Result<String, crate::sealing::SealError> {
        match (&self.url_sealed, &self.url_key_id) {
            (Some(sealed), Some(key_id)) => sealer.open_url(self.endpoint.id, key_id, sealed),
            _ => Ok(self.endpoint.url.clone()),
        }
    }

    /// Its custom headers, opened.
    pub(crate) fn headers(&self, sealer: &Sealer) -> Result<EndpointHeaders, StoreError> {
        EndpointHeaders::open(
            sealer,
            self.endpoint.id,
            self.headers_key_id.as_deref(),
            self.headers_sealed.as_deref(),
        )
    }

    /// What it subscribes to, compiled (an error names what does not compile).
    pub(crate) fn subscription(&self) -> Result<Subscription, String> {
        let e = &self.endpoint;
        subscription_of(&e.event_types, &e.channels, e.payload_filter.as_ref())
    }
}

/// An endpoint's subscription compiled from its stored columns (the dispatchers' routing view
/// and the API's replays both ask this).
pub fn subscription_of(
    event_types: &[String],
    channels: &[String],
    payload_filter: Option<&serde_json::Value>,
) -> Result<Subscription, String> {
    Ok(Subscription {
        event_types: EventFilter::new(event_types)?,
        channels: channels.to_vec(),
        payload: payload_filter
            .cloned()
            .map(PayloadFilter::from_value)
            .transpose()
            .map_err(|e| format!("payload filter {e}"))?,
    })
}

/// Checks that a URL is something we may POST to: http(s), a host, no credentials, and no
/// IP literal in a refused range (`policy`). Host names are checked again after DNS
/// resolution, at connect time, in the dispatcher. Errors never repeat the URL's secrets.
pub fn validate_url(raw: &str, policy: &AddressPolicy) -> Result<url::Url, StoreError> {
    hookstream_egress::validate_endpoint_url(raw, policy).map_err(|e| StoreError::Invalid(e.to_string()))
}

pub(crate) async fn insert_secret(
    conn: &mut sqlx::PgConnection,
    sealer: &Sealer,
    endpoint: Uuid,
    secret: &Secret,
    expires_in: Option<std::time::Duration>,
) -> Result<(), StoreError> {
    let (key_id, sealed) = sealer.seal(endpoint, &secret.expose());
    sqlx::query(
        "INSERT INTO hookstream.endpoint_secrets (endpoint_id, sealed, key_id, expires_at)
         VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')",
    )
    .bind(endpoint)
    .bind(sealed)
    .bind(key_id)
    .bind(expires_in.map(|d| d.as_millis() as i64))
    .execute(conn)
    .await?;
    Ok(())
}

/// Secrets that sign an endpoint's deliveries at once: the current one and the two before it
/// still in their grace period. A rotation past this retires the oldest early (as if its grace
/// period had ended) rather than being refused: rotating is what a tenant does when a secret
/// leaked, and must never fail for that reason.
pub const MAX_LIVE_SECRETS: usize = 3;

/// Starts a secret rotation: a new secret signs from now on, beside the current ones, which
/// expire after `overlap` (receivers update their copy meanwhile; every unexpired secret
/// signs each delivery). Returns the new secret, shown once.
pub async fn rotate_secret(
    pool: &PgPool,
    sealer: &Sealer,
    id: Uuid,
    overlap: std::time::Duration,
) -> Result<Secret, StoreError> {
    rotate_secret_to(pool, sealer, id, Secret::generate(), overlap).await
}

/// `rotate_secret` to a given new secret (the API's rotation with a `key`).
pub async fn rotate_secret_to(
    pool: &PgPool,
    sealer: &Sealer,
    id: Uuid,
    secret: Secret,
    overlap: std::time::Duration,
) -> Result<Secret, StoreError> {
    let mut tx = pool.begin().await?;
    let locked: Option<Uuid> =
        sqlx::query_scalar("SELECT id FROM hookstream.endpoints WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    if locked.is_none() {
        return Err(StoreError::NotFound(format!("endpoint {id}")));
    }
    sqlx::query(
        "UPDATE hookstream.endpoint_secrets
            SET expires_at = least(coalesce(expires_at, 'infinity'), now() + $2 * interval '1 millisecond')
          WHERE endpoint_id = $1 AND (expires_at IS NULL OR expires_at > now())",
    )
    .bind(id)
    .bind(overlap.as_millis() as i64)
    .execute(&mut *tx)
    .await?;
    insert_secret(&mut tx, sealer, id, &secret, None).await?;
    // Every live secret signs every delivery: past the cap, the oldest still in their grace
    // period retire now, so a tenant rotating in a loop costs the dispatchers at most
    // `MAX_LIVE_SECRETS` HMACs per attempt.
    sqlx::query(
        "UPDATE hookstream.endpoint_secrets SET expires_at = now()
          WHERE endpoint_id = $1 AND (expires_at IS NULL OR expires_at > now())
            AND id NOT IN (SELECT id FROM hookstream.endpoint_secrets
                            WHERE endpoint_id = $1 AND (expires_at IS NULL OR expires_at > now())
                            ORDER BY id DESC LIMIT $2)",
    )
    .bind(id)
    .bind(MAX_LIVE_SECRETS as i64)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(secret)
}

/// A stored signing secret: sealed, or plaintext if written before sealing existed
/// (`hookstream secrets seal` seals those).
#[derive(sqlx::FromRow)]
pub(crate) struct SecretRow {
    pub(crate) id: i64,
    pub(crate) endpoint_id: Uuid,
    pub(crate) secret: Option<String>,
    pub(crate) sealed: Option<Vec<u8>>,
    pub(crate) key_id: Option<String>,
    pub(crate) expires_at: Option<DateTime<Utc>>,
}

impl SecretRow {
    pub(crate) fn plaintext(&self, sealer: &Sealer) -> Result<Option<String>, crate::sealing::SealError> {
        match (&self.secret, &self.sealed, &self.key_id) {
            (Some(plain), _, _) => Ok(Some(plain.clone())),
            (None, Some(sealed), Some(key_id)) => sealer.open(self.endpoint_id, key_id, sealed).map(Some),
            _ => Ok(None), // ruled out by the table's CHECK constraint
        }
    }
}

/// What `reseal` changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Resealed {
    pub secrets: u64,
    pub urls: u64,
}

/// Seals every secret and endpoint URL not sealed with the sealing key: plaintext rows from
/// before sealing existed (a plaintext URL's row then keeps only its redacted form in
/// clear), and rows sealed with a previous key (key rotation).
pub async fn reseal(pool: &PgPool, sealer: &Sealer) -> Result<Resealed, StoreError> {
    let mut tx = pool.begin().await?;
    let rows: Vec<SecretRow> = sqlx::query_as(
        "SELECT id, endpoint_id, secret, sealed, key_id, expires_at FROM hookstream.endpoint_secrets
          WHERE key_id IS DISTINCT FROM $1 FOR UPDATE",
    )
    .bind(sealer.active_key_id())
    .fetch_all(&mut *tx)
    .await?;
    let mut done = Resealed::default();
    for row in rows {
        let Some(text) = row.plaintext(sealer)? else {
            continue;
        };
        let (key_id, sealed) = sealer.seal(row.endpoint_id, &text);
        sqlx::query(
            "UPDATE hookstream.endpoint_secrets SET secret = NULL, sealed = $2, key_id = $3 WHERE id = $1",
        )
        .bind(row.id)
        .bind(sealed)
        .bind(key_id)
        .execute(&mut *tx)
        .await?;
        done.secrets += 1;
    }
    let endpoints: Vec<EndpointRow> = sqlx::query_as(&format!(
        "SELECT {COLUMNS}, {SEALED_COLUMNS} FROM hookstream.endpoints
          WHERE url_key_id IS DISTINCT FROM $1
             OR (headers_key_id IS NOT NULL AND headers_key_id <> $1) FOR UPDATE"
    ))
    .bind(sealer.active_key_id())
    .fetch_all(&mut *tx)
    .await?;
    for row in endpoints {
        let url = row.target_url(sealer)?;
        let (key_id, sealed) = sealer.seal_url(row.endpoint.id, &url);
        sqlx::query(
            "UPDATE hookstream.endpoints SET url = $2, url_sealed = $3, url_key_id = $4 WHERE id = $1",
        )
        .bind(row.endpoint.id)
        .bind(hookstream_egress::redact(&url))
        .bind(sealed)
        .bind(key_id)
        .execute(&mut *tx)
        .await?;
        done.urls += 1;
        if row.headers_key_id.is_some() {
            let headers = row.headers(sealer)?;
            crate::endpoint_headers::store(&mut tx, sealer, row.endpoint.id, &headers).await?;
        }
    }
    tx.commit().await?;
    Ok(done)
}

pub async fn get(pool: &PgPool, id: Uuid) -> Result<Endpoint, StoreError> {
    sqlx::query_as::<_, Endpoint>(&format!(
        "SELECT {COLUMNS} FROM hookstream.endpoints WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("endpoint {id}")))
}

pub async fn list(pool: &PgPool, tenant: Option<Uuid>) -> Result<Vec<Endpoint>, StoreError> {
    Ok(sqlx::query_as::<_, Endpoint>(&format!(
        "SELECT {COLUMNS} FROM hookstream.endpoints WHERE $1::uuid IS NULL OR tenant_id = $1 ORDER BY created_at"
    ))
    .bind(tenant)
    .fetch_all(pool)
    .await?)
}

/// Enables or disables an endpoint; `reason` is kept for people reading the endpoint list.
/// How many endpoints are disabled (by an operator, a 410, or failing for too long).
pub async fn count_disabled(pool: &PgPool) -> Result<i64, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM hookstream.endpoints WHERE NOT enabled")
            .fetch_one(pool)
            .await?,
    )
}

pub async fn set_enabled(
    pool: &PgPool,
    id: Uuid,
    enabled: bool,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE hookstream.endpoints SET enabled = $2, disabled_reason = CASE WHEN $2 THEN NULL ELSE $3 END,
                failing_since = CASE WHEN $2 THEN NULL ELSE failing_since END,
                updated_at = now() WHERE id = $1",
    )
    .bind(id)
    .bind(enabled)
    .bind(reason)
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("endpoint {id}")));
    }
    Ok(())
}

/// Records a failed delivery: the endpoint is failing since now unless it already was.
/// Returns when it started failing (None if the endpoint is gone or disabled).
pub async fn mark_failing(pool: &PgPool, id: Uuid) -> Result<Option<DateTime<Utc>>, StoreError> {
    Ok(sqlx::query_scalar(
        "UPDATE hookstream.endpoints SET failing_since = coalesce(failing_since, now())
          WHERE id = $1 AND enabled RETURNING failing_since",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?
    .flatten())
}

/// Records a successful delivery: the endpoint is healthy again.
pub async fn mark_healthy(pool: &PgPool, id: Uuid) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE hookstream.endpoints SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL",
    )
    .bind(id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Disables an enabled endpoint and, in the same transaction, publishes `notice` (an
/// `endpoint.disabled` event, say) to the endpoint's tenant through the outbox. Returns false
/// when the endpoint was already disabled (someone else did it; nothing is published twice).
///
/// With `failing_for`, only an endpoint that has been failing at least that long is disabled
/// (checked in the same statement, so a success seen by another instance wins).
pub async fn disable(
    pool: &PgPool,
    id: Uuid,
    reason: &str,
    failing_for: Option<std::time::Duration>,
    notice: Option<hookstream_producer::Event>,
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    // The operational webhook `endpoint.disabled` says `"trigger": "automatic"` (migration 0019).
    sqlx::query("SELECT set_config('hookstream.disable_trigger', 'automatic', true)")
        .execute(&mut *tx)
        .await?;
    let done = sqlx::query(
        "UPDATE hookstream.endpoints SET enabled = false, disabled_reason = $2, updated_at = now()
          WHERE id = $1 AND enabled
            AND ($3::bigint IS NULL OR failing_since <= now() - $3 * interval '1 millisecond')",
    )
    .bind(id)
    .bind(reason)
    .bind(failing_for.map(|d| d.as_millis() as i64))
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    if let Some(event) = notice {
        hookstream_producer::enqueue(&mut tx, &event)
            .await
            .map_err(|e| StoreError::Invalid(format!("cannot publish the endpoint.disabled event: {e}")))?;
    }
    tx.commit().await?;
    Ok(true)
}
