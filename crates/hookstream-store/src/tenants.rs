//! Tenants: the owners of endpoints and events. Every query an API makes is scoped by one.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::StoreError;

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Tenant {
    pub id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

pub async fn create(pool: &PgPool, name: &str) -> Result<Tenant, StoreError> {
    let name = name.trim();
    if name.is_empty() || name.len() > 200 {
        return Err(StoreError::Invalid(
            "tenant name must be 1 to 200 characters".into(),
        ));
    }
    sqlx::query_as::<_, Tenant>(
        "INSERT INTO hookstream.tenants (id, name) VALUES ($1, $2) RETURNING id, name, created_at",
    )
    .bind(Uuid::now_v7())
    .bind(name)
    .fetch_one(pool)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Invalid(format!("a tenant named {name:?} already exists"))
        }
        _ => StoreError::from_db(e),
    })
}

pub async fn get(pool: &PgPool, id: Uuid) -> Result<Tenant, StoreError> {
    sqlx::query_as::<_, Tenant>("SELECT id, name, created_at FROM hookstream.tenants WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("tenant {id}")))
}

pub async fn find_by_name(pool: &PgPool, name: &str) -> Result<Option<Tenant>, StoreError> {
    Ok(
        sqlx::query_as::<_, Tenant>("SELECT id, name, created_at FROM hookstream.tenants WHERE name = $1")
            .bind(name)
            .fetch_optional(pool)
            .await?,
    )
}

pub async fn list(pool: &PgPool) -> Result<Vec<Tenant>, StoreError> {
    Ok(sqlx::query_as::<_, Tenant>(
        // The operational tenant (migration 0019) is internal.
        "SELECT id, name, created_at FROM hookstream.tenants
              WHERE id <> hookstream.operational_tenant() ORDER BY created_at",
    )
    .fetch_all(pool)
    .await?)
}
