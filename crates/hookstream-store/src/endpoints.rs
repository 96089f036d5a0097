//! Endpoints: where a tenant's events are delivered, with their filters, limits and secrets.

use chrono::{DateTime, Utc};
use hookstream_signing::Secret;
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::sealing::Sealer;
use crate::{EventFilter, StoreError};

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Endpoint {
    pub id: Uuid,
    pub tenant_id: Uuid,
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
}

/// An enabled endpoint with its compiled filter and its active signing secrets.
#[derive(Debug, Clone)]
pub struct ActiveEndpoint {
    pub endpoint: Endpoint,
    pub filter: EventFilter,
    pub secrets: Vec<Secret>,
}

const COLUMNS: &str = "id, tenant_id, url, description, event_types, enabled, disabled_reason, \
                       rate_limit_per_s, timeout_ms, max_in_flight, created_at, failing_since";

/// Checks that a URL is something we can POST to. Address checks (SSRF) happen at connect
/// time in the dispatcher, after DNS resolution, where they cannot be bypassed.
pub fn validate_url(raw: &str) -> Result<url::Url, StoreError> {
    let url = url::Url::parse(raw).map_err(|e| StoreError::Invalid(format!("invalid url {raw:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(StoreError::Invalid(format!(
            "invalid url {raw:?}: scheme must be http or https"
        )));
    }
    if url.host().is_none() {
        return Err(StoreError::Invalid(format!("invalid url {raw:?}: no host")));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(StoreError::Invalid(format!(
            "invalid url {raw:?}: credentials in the url are not allowed"
        )));
    }
    Ok(url)
}

/// Creates an endpoint and its first secret, sealed at rest; returns the secret once (it is
/// not shown again).
pub async fn create(
    pool: &PgPool,
    sealer: &Sealer,
    new: NewEndpoint,
) -> Result<(Endpoint, Secret), StoreError> {
    let url = validate_url(&new.url)?;
    let filter = EventFilter::new(&new.event_types).map_err(StoreError::Invalid)?;
    if let Some(rate) = new.rate_limit_per_s {
        if rate <= 0 {
            return Err(StoreError::Invalid("rate limit must be positive".into()));
        }
    }
    let mut tx = pool.begin().await?;
    let tenant_exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM hookstream.tenants WHERE id = $1)")
            .bind(new.tenant_id)
            .fetch_one(&mut *tx)
            .await?;
    if !tenant_exists {
        return Err(StoreError::NotFound(format!("tenant {}", new.tenant_id)));
    }
    let endpoint = sqlx::query_as::<_, Endpoint>(&format!(
        "INSERT INTO hookstream.endpoints
            (id, tenant_id, url, description, event_types, rate_limit_per_s, timeout_ms, max_in_flight)
         VALUES ($1, $2, $3, $4, $5, $6, coalesce($7, 15000), coalesce($8, 32))
         RETURNING {COLUMNS}"
    ))
    .bind(Uuid::now_v7())
    .bind(new.tenant_id)
    .bind(url.as_str())
    .bind(&new.description)
    .bind(filter.patterns())
    .bind(new.rate_limit_per_s)
    .bind(new.timeout_ms)
    .bind(new.max_in_flight)
    .fetch_one(&mut *tx)
    .await
    .map_err(StoreError::from_db)?;
    let secret = Secret::generate();
    insert_secret(&mut tx, sealer, endpoint.id, &secret, None).await?;
    tx.commit().await?;
    Ok((endpoint, secret))
}

async fn insert_secret(
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

/// Starts a secret rotation: a new secret signs from now on, beside the current ones, which
/// expire after `overlap` (receivers update their copy meanwhile; every unexpired secret
/// signs each delivery). Returns the new secret, shown once.
pub async fn rotate_secret(
    pool: &PgPool,
    sealer: &Sealer,
    id: Uuid,
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
    let secret = Secret::generate();
    insert_secret(&mut tx, sealer, id, &secret, None).await?;
    tx.commit().await?;
    Ok(secret)
}

/// A stored signing secret: sealed, or plaintext if written before sealing existed
/// (`hookstream secrets seal` seals those).
#[derive(sqlx::FromRow)]
struct SecretRow {
    id: i64,
    endpoint_id: Uuid,
    secret: Option<String>,
    sealed: Option<Vec<u8>>,
    key_id: Option<String>,
}

impl SecretRow {
    fn plaintext(&self, sealer: &Sealer) -> Result<Option<String>, crate::sealing::SealError> {
        match (&self.secret, &self.sealed, &self.key_id) {
            (Some(plain), _, _) => Ok(Some(plain.clone())),
            (None, Some(sealed), Some(key_id)) => sealer.open(self.endpoint_id, key_id, sealed).map(Some),
            _ => Ok(None), // ruled out by the table's CHECK constraint
        }
    }
}

/// Seals every secret not sealed with the sealing key: plaintext rows from before sealing
/// existed, and rows sealed with a previous key (key rotation). Returns how many changed.
pub async fn reseal_secrets(pool: &PgPool, sealer: &Sealer) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await?;
    let rows: Vec<SecretRow> = sqlx::query_as(
        "SELECT id, endpoint_id, secret, sealed, key_id FROM hookstream.endpoint_secrets
          WHERE key_id IS DISTINCT FROM $1 FOR UPDATE",
    )
    .bind(sealer.active_key_id())
    .fetch_all(&mut *tx)
    .await?;
    let mut changed = 0;
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
        changed += 1;
    }
    tx.commit().await?;
    Ok(changed)
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

/// Everything the dispatcher needs to route: every tenant id, and every enabled endpoint with
/// its unexpired secrets, opened. Secrets that do not open or parse are skipped with a
/// warning (which never includes the secret).
pub async fn load_active(
    pool: &PgPool,
    sealer: &Sealer,
) -> Result<(Vec<Uuid>, Vec<ActiveEndpoint>), StoreError> {
    let tenants: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM hookstream.tenants")
        .fetch_all(pool)
        .await?;
    let endpoints = sqlx::query_as::<_, Endpoint>(&format!(
        "SELECT {COLUMNS} FROM hookstream.endpoints WHERE enabled ORDER BY id"
    ))
    .fetch_all(pool)
    .await?;
    let secrets: Vec<SecretRow> = sqlx::query_as(
        "SELECT s.id, s.endpoint_id, s.secret, s.sealed, s.key_id FROM hookstream.endpoint_secrets s
           JOIN hookstream.endpoints e ON e.id = s.endpoint_id
          WHERE e.enabled AND (s.expires_at IS NULL OR s.expires_at > now())
          ORDER BY s.endpoint_id, s.id",
    )
    .fetch_all(pool)
    .await?;
    let mut by_endpoint: std::collections::HashMap<Uuid, Vec<Secret>> = Default::default();
    for row in secrets {
        let endpoint_id = row.endpoint_id;
        let text = match row.plaintext(sealer) {
            Ok(Some(t)) => t,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(%endpoint_id, error = %e, "skipping endpoint secret that does not open");
                continue;
            }
        };
        match Secret::parse(&text) {
            Ok(s) => by_endpoint.entry(endpoint_id).or_default().push(s),
            Err(e) => tracing::warn!(%endpoint_id, error = %e, "skipping unparseable endpoint secret"),
        }
    }
    let active = endpoints
        .into_iter()
        .filter_map(|endpoint| {
            let filter = match EventFilter::new(&endpoint.event_types) {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(endpoint_id = %endpoint.id, error = %e, "skipping endpoint with a bad filter");
                    return None;
                }
            };
            let secrets = by_endpoint.remove(&endpoint.id).unwrap_or_default();
            Some(ActiveEndpoint { endpoint, filter, secrets })
        })
        .collect();
    Ok((tenants, active))
}
