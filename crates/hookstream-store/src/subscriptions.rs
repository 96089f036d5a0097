//! The routing view the dispatchers keep in memory: every tenant, every enabled endpoint with
//! its full URL and active signing secrets, and the subscription version the view is at.
//!
//! Every read runs in one REPEATABLE READ, read-only transaction, so the version and the
//! rows agree: a view at version V contains exactly the routing changes numbered up to V
//! (the `subscription_changed` trigger numbers them in commit order: it row-locks the one
//! counter). The relay stamps each event with the version as of its claim; a dispatcher
//! routes it only with a view at least that new (migration 0005). Incremental reads fetch
//! only the tenants and endpoints changed since a version, from the change log.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use hookstream_signing::Secret;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::endpoints::{ActiveEndpoint, EndpointRow, SecretRow, COLUMNS, SEALED_COLUMNS};
use crate::sealing::Sealer;
use crate::StoreError;

/// Everything, at one version.
pub struct View {
    pub version: i64,
    pub tenants: Vec<Uuid>,
    pub endpoints: Vec<ActiveEndpoint>,
}

/// What changed since a version.
pub struct Delta {
    pub version: i64,
    /// Tenants changed: whether each exists now.
    pub tenants: Vec<(Uuid, bool)>,
    /// Endpoints changed: each as it is now, or `None` when deleted or disabled.
    pub endpoints: Vec<(Uuid, Option<ActiveEndpoint>)>,
}

async fn snapshot(pool: &PgPool) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

async fn version_in(conn: &mut PgConnection) -> Result<i64, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT version FROM hookstream.subscription_state")
            .fetch_one(conn)
            .await?,
    )
}

/// The current subscription version.
pub async fn version(pool: &PgPool) -> Result<i64, StoreError> {
    let mut conn = pool.acquire().await?;
    version_in(&mut conn).await
}

/// Every tenant and every enabled endpoint, at one version.
pub async fn load_all(pool: &PgPool, sealer: &Sealer) -> Result<View, StoreError> {
    let mut tx = snapshot(pool).await?;
    let version = version_in(&mut tx).await?;
    let tenants: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM hookstream.tenants")
        .fetch_all(&mut *tx)
        .await?;
    let endpoints = load_endpoints(&mut tx, sealer, None).await?;
    tx.commit().await?;
    Ok(View {
        version,
        tenants,
        endpoints,
    })
}

/// What changed after version `since`, plus the endpoints in `reload` (whose secrets
/// expired). `None` when the change log no longer reaches back to `since` (it was pruned):
/// load everything instead.
pub async fn load_since(
    pool: &PgPool,
    sealer: &Sealer,
    since: i64,
    reload: &[Uuid],
) -> Result<Option<Delta>, StoreError> {
    let mut tx = snapshot(pool).await?;
    let version = version_in(&mut tx).await?;
    if version < since {
        // The database went back in time (restored from a backup): start over.
        return Ok(None);
    }
    let (oldest, changes): (Option<i64>, Vec<(String, Uuid)>) = if version > since {
        let oldest: Option<i64> =
            sqlx::query_scalar("SELECT min(version) FROM hookstream.subscription_changes")
                .fetch_one(&mut *tx)
                .await?;
        let changes = sqlx::query_as(
            "SELECT DISTINCT kind, entity_id FROM hookstream.subscription_changes
              WHERE version > $1 AND version <= $2",
        )
        .bind(since)
        .bind(version)
        .fetch_all(&mut *tx)
        .await?;
        (oldest, changes)
    } else {
        (None, Vec::new())
    };
    if version > since && oldest.is_none_or(|o| o > since + 1) {
        return Ok(None);
    }
    let tenant_ids: Vec<Uuid> = changes
        .iter()
        .filter(|(k, _)| k == "tenant")
        .map(|(_, id)| *id)
        .collect();
    let mut endpoint_ids: Vec<Uuid> = changes
        .iter()
        .filter(|(k, _)| k == "endpoint")
        .map(|(_, id)| *id)
        .chain(reload.iter().copied())
        .collect();
    endpoint_ids.sort_unstable();
    endpoint_ids.dedup();
    let existing: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM hookstream.tenants WHERE id = ANY($1)")
        .bind(&tenant_ids)
        .fetch_all(&mut *tx)
        .await?;
    let tenants = tenant_ids.iter().map(|id| (*id, existing.contains(id))).collect();
    let mut loaded: HashMap<Uuid, ActiveEndpoint> = if endpoint_ids.is_empty() {
        HashMap::new()
    } else {
        load_endpoints(&mut tx, sealer, Some(&endpoint_ids))
            .await?
            .into_iter()
            .map(|e| (e.endpoint.id, e))
            .collect()
    };
    tx.commit().await?;
    let endpoints = endpoint_ids
        .into_iter()
        .map(|id| (id, loaded.remove(&id)))
        .collect();
    Ok(Some(Delta {
        version,
        tenants,
        endpoints,
    }))
}

/// Enabled endpoints (all, or those in `ids`) with their unexpired secrets, opened. A secret
/// that does not open or parse is skipped with a warning (which never includes the secret);
/// an endpoint whose URL does not open keeps an empty `target_url` (its deliveries then fail
/// with a reason and are dead-lettered, replayable once the key is configured).
async fn load_endpoints(
    conn: &mut PgConnection,
    sealer: &Sealer,
    ids: Option<&[Uuid]>,
) -> Result<Vec<ActiveEndpoint>, StoreError> {
    let rows: Vec<EndpointRow> = sqlx::query_as(&format!(
        "SELECT {COLUMNS}, {SEALED_COLUMNS} FROM hookstream.endpoints
          WHERE enabled AND ($1::uuid[] IS NULL OR id = ANY($1)) ORDER BY id"
    ))
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?;
    let secrets: Vec<SecretRow> = sqlx::query_as(
        "SELECT s.id, s.endpoint_id, s.secret, s.sealed, s.key_id, s.expires_at
           FROM hookstream.endpoint_secrets s
           JOIN hookstream.endpoints e ON e.id = s.endpoint_id
          WHERE e.enabled AND (s.expires_at IS NULL OR s.expires_at > now())
            AND ($1::uuid[] IS NULL OR e.id = ANY($1))
          ORDER BY s.endpoint_id, s.id",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?;
    let mut by_endpoint: HashMap<Uuid, (Vec<Secret>, Option<DateTime<Utc>>)> = HashMap::new();
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
            Ok(s) => {
                let entry = by_endpoint.entry(endpoint_id).or_default();
                entry.0.push(s);
                if let Some(at) = row.expires_at {
                    entry.1 = Some(entry.1.map_or(at, |e| e.min(at)));
                }
            }
            Err(e) => tracing::warn!(%endpoint_id, error = %e, "skipping unparseable endpoint secret"),
        }
    }
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let subscription = match row.subscription() {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(endpoint_id = %row.endpoint.id, error = %e, "skipping endpoint with a bad filter");
                    return None;
                }
            };
            // Headers that do not open leave the endpoint without them: its receiver refuses
            // the deliveries, which then retry and dead-letter with the receiver's reason.
            let headers = row.headers(sealer).map(|h| h.pairs()).unwrap_or_else(|e| {
                tracing::error!(endpoint_id = %row.endpoint.id, error = %e,
                    "endpoint headers do not open; delivering without them");
                Vec::new()
            });
            let target_url = row.target_url(sealer).unwrap_or_else(|e| {
                tracing::error!(endpoint_id = %row.endpoint.id, error = %e,
                    "endpoint url does not open; its deliveries will be dead-lettered");
                String::new()
            });
            let (secrets, expires) = by_endpoint.remove(&row.endpoint.id).unwrap_or_default();
            Some(ActiveEndpoint {
                endpoint: row.endpoint,
                target_url,
                subscription,
                headers,
                secrets,
                secrets_expire_at_ms: expires.map(|t| t.timestamp_millis()),
            })
        })
        .collect())
}

/// Deletes change-log entries older than `before`, `batch` at a time, keeping the newest
/// (a dispatcher further behind than what is kept reloads everything). Returns how many.
pub async fn prune_changes(pool: &PgPool, before: DateTime<Utc>, batch: i64) -> Result<u64, StoreError> {
    let mut total = 0;
    loop {
        let done = sqlx::query(
            "DELETE FROM hookstream.subscription_changes WHERE version IN (
                SELECT version FROM hookstream.subscription_changes
                 WHERE changed_at < $1
                   AND version < (SELECT max(version) FROM hookstream.subscription_changes)
                 ORDER BY version LIMIT $2)",
        )
        .bind(before)
        .bind(batch)
        .execute(pool)
        .await?
        .rows_affected();
        total += done;
        if done < batch as u64 {
            return Ok(total);
        }
    }
}
