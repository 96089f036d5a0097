//! Endpoints: where a tenant's events are delivered, with their filters, limits and secrets.

use chrono::{DateTime, Utc};
use hookstream_signing::Secret;
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

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
                       rate_limit_per_s, timeout_ms, max_in_flight, created_at";

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

/// Creates an endpoint and its first secret; returns the secret once (it is not shown again).
pub async fn create(pool: &PgPool, new: NewEndpoint) -> Result<(Endpoint, Secret), StoreError> {
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
    sqlx::query("INSERT INTO hookstream.endpoint_secrets (endpoint_id, secret) VALUES ($1, $2)")
        .bind(endpoint.id)
        .bind(secret.expose())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok((endpoint, secret))
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

/// Everything the dispatcher needs to route: every tenant id, and every enabled endpoint with
/// its unexpired secrets. Secrets that fail to parse are skipped with a warning (never logged).
pub async fn load_active(pool: &PgPool) -> Result<(Vec<Uuid>, Vec<ActiveEndpoint>), StoreError> {
    let tenants: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM hookstream.tenants")
        .fetch_all(pool)
        .await?;
    let endpoints = sqlx::query_as::<_, Endpoint>(&format!(
        "SELECT {COLUMNS} FROM hookstream.endpoints WHERE enabled ORDER BY id"
    ))
    .fetch_all(pool)
    .await?;
    let secrets: Vec<(Uuid, String)> = sqlx::query_as(
        "SELECT s.endpoint_id, s.secret FROM hookstream.endpoint_secrets s
           JOIN hookstream.endpoints e ON e.id = s.endpoint_id
          WHERE e.enabled AND (s.expires_at IS NULL OR s.expires_at > now())
          ORDER BY s.endpoint_id, s.id",
    )
    .fetch_all(pool)
    .await?;
    let mut by_endpoint: std::collections::HashMap<Uuid, Vec<Secret>> = Default::default();
    for (endpoint_id, text) in secrets {
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
