//! The caps on what one tenant holds (migration 0021): the installation's defaults
//! (`hookstream.settings`), a tenant's overrides (`hookstream.tenant_limits`), and how much
//! of each it holds now. The caps themselves are enforced by the table triggers, for every
//! writer; this module only reads and changes them.

use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::StoreError;

/// The capped resources, by the suffix of their columns (`max_<name>`).
pub const RESOURCES: [&str; 4] = ["endpoints", "api_keys", "portal_tokens", "portal_sessions"];

/// One resource of one tenant: its cap, whether that is an override, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cap {
    pub resource: &'static str,
    pub max: i32,
    pub overridden: bool,
    pub held: i64,
}

/// Every cap of `tenant`, in [`RESOURCES`] order.
pub async fn caps(pool: &PgPool, tenant: Uuid) -> Result<Vec<Cap>, StoreError> {
    crate::tenants::get(pool, tenant).await?;
    let row: (Vec<i32>, Vec<bool>, Vec<i64>) = sqlx::query_as(
        "SELECT ARRAY[coalesce(l.max_endpoints, s.max_endpoints_per_tenant),
                      coalesce(l.max_api_keys, s.max_api_keys_per_tenant),
                      coalesce(l.max_portal_tokens, s.max_portal_tokens_per_tenant),
                      coalesce(l.max_portal_sessions, s.max_portal_sessions_per_tenant)],
                ARRAY[l.max_endpoints IS NOT NULL, l.max_api_keys IS NOT NULL,
                      l.max_portal_tokens IS NOT NULL, l.max_portal_sessions IS NOT NULL],
                ARRAY[(SELECT count(*) FROM hookstream.endpoints WHERE tenant_id = $1),
                      (SELECT count(*) FROM hookstream.api_keys WHERE tenant_id = $1 AND kind = 'tenant'
                          AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())),
                      (SELECT count(*) FROM hookstream.api_keys WHERE tenant_id = $1 AND kind <> 'tenant'
                          AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())),
                      (SELECT count(*) FROM hookstream.portal_sessions
                        WHERE tenant_id = $1 AND expires_at > now())]
           FROM hookstream.settings s
           LEFT JOIN hookstream.tenant_limits l ON l.tenant_id = $1",
    )
    .bind(tenant)
    .fetch_one(pool)
    .await?;
    Ok(RESOURCES
        .iter()
        .enumerate()
        .map(|(i, resource)| Cap {
            resource,
            max: row.0[i],
            overridden: row.1[i],
            held: row.2[i],
        })
        .collect())
}

/// Sets `tenant`'s override of `resource` (one of [`RESOURCES`]): `Some(max)` (at least 1),
/// or `None` for the installation's default. Lowering a cap below what the tenant holds
/// removes nothing; it only refuses new ones until it is under again.
pub async fn set(pool: &PgPool, tenant: Uuid, resource: &str, max: Option<i32>) -> Result<(), StoreError> {
    let Some(resource) = RESOURCES.iter().find(|r| **r == resource) else {
        return Err(StoreError::Invalid(format!(
            "no cap named {resource:?} (one of {})",
            RESOURCES.join(", ")
        )));
    };
    if max.is_some_and(|m| m < 1) {
        return Err(StoreError::Invalid(format!("max_{resource} must be at least 1")));
    }
    crate::tenants::get(pool, tenant).await?;
    // The column name comes from RESOURCES, never from the caller's text.
    sqlx::query(&format!(
        "INSERT INTO hookstream.tenant_limits (tenant_id, max_{resource}) VALUES ($1, $2)
         ON CONFLICT (tenant_id) DO UPDATE SET max_{resource} = excluded.max_{resource}"
    ))
    .bind(tenant)
    .bind(max)
    .execute(pool)
    .await
    .map_err(StoreError::from_db)?;
    Ok(())
}
