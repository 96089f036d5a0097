//! Tenants as the admin API shows them (Svix's applications): with their `uid` (the caller's
//! own unique name, accepted in paths beside the id), metadata, and keyset pages in id order
//! (ids are UUIDv7, so that is creation order, and a page boundary never moves when tenants
//! are added).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use crate::StoreError;

/// The operational tenant (migration 0019) is not an application: no route reaches it as one.
const NOT_OPERATIONAL: &str = "id <> hookstream.operational_tenant()";

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Application {
    pub id: Uuid,
    pub name: String,
    pub uid: Option<String>,
    /// A JSON object of strings.
    pub metadata: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLUMNS: &str = "id, name, uid, metadata, created_at, updated_at";

/// A tenant named by its id or by its uid (a path segment that is not a UUID is a uid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppRef {
    Id(Uuid),
    Uid(String),
}

impl AppRef {
    pub fn parse(segment: &str) -> Self {
        match Uuid::parse_str(segment) {
            Ok(id) => AppRef::Id(id),
            Err(_) => AppRef::Uid(segment.to_string()),
        }
    }
}

/// What an application is made of (create and full update).
#[derive(Debug, Clone, Default)]
pub struct AppFields {
    pub name: String,
    pub uid: Option<String>,
    pub metadata: serde_json::Value,
}

fn clash(e: sqlx::Error, fields: &AppFields) -> StoreError {
    if let sqlx::Error::Database(db) = &e {
        if db.is_unique_violation() {
            let what = match db.constraint() {
                Some(c) if c.contains("uid") => format!(
                    "an application with uid {:?} already exists",
                    fields.uid.as_deref().unwrap_or_default()
                ),
                _ => format!("an application named {:?} already exists", fields.name),
            };
            return StoreError::Conflict(what);
        }
    }
    StoreError::from_db(e)
}

fn check(fields: &AppFields) -> Result<(), StoreError> {
    let name = fields.name.trim();
    if name.is_empty() || name.len() > 200 {
        return Err(StoreError::Invalid("name must be 1 to 200 characters".into()));
    }
    Ok(())
}

pub async fn create(pool: &PgPool, fields: &AppFields) -> Result<Application, StoreError> {
    check(fields)?;
    sqlx::query_as::<_, Application>(&format!(
        "INSERT INTO hookstream.tenants (id, name, uid, metadata) VALUES ($1, $2, $3, $4) RETURNING {COLUMNS}"
    ))
    .bind(Uuid::now_v7())
    .bind(fields.name.trim())
    .bind(&fields.uid)
    .bind(&fields.metadata)
    .fetch_one(pool)
    .await
    .map_err(|e| clash(e, fields))
}

/// The tenant `app` names, if it exists (and, with `scope`, only if it is that tenant).
pub async fn find(
    pool: &PgPool,
    app: &AppRef,
    scope: Option<Uuid>,
) -> Result<Option<Application>, StoreError> {
    let (id, uid) = match app {
        AppRef::Id(id) => (Some(*id), None),
        AppRef::Uid(uid) => (None, Some(uid.as_str())),
    };
    let by = if id.is_some() { "id = $1" } else { "uid = $2" };
    let sql =
        format!("SELECT {COLUMNS} FROM hookstream.tenants WHERE {by} AND ($3::uuid IS NULL OR id = $3) AND {NOT_OPERATIONAL}");
    Ok(sqlx::query_as::<_, Application>(&sql)
        .bind(id)
        .bind(uid)
        .bind(scope)
        .fetch_optional(pool)
        .await?)
}

/// Resolves an application reference to its tenant id (scoped like `find`).
pub async fn resolve(pool: &PgPool, app: &AppRef, scope: Option<Uuid>) -> Result<Option<Uuid>, StoreError> {
    Ok(match app {
        AppRef::Id(id) => match scope {
            Some(s) if s != *id => None,
            _ => {
                sqlx::query_scalar(&format!(
                    "SELECT id FROM hookstream.tenants WHERE id = $1 AND {NOT_OPERATIONAL}"
                ))
                .bind(*id)
                .fetch_optional(pool)
                .await?
            }
        },
        AppRef::Uid(uid) => {
            sqlx::query_scalar(
                "SELECT id FROM hookstream.tenants WHERE uid = $1 AND ($2::uuid IS NULL OR id = $2)",
            )
            .bind(uid)
            .bind(scope)
            .fetch_optional(pool)
            .await?
        }
    })
}

/// One page of applications in id order: after (or, `before`, preceding) the cursor, at most
/// `limit`, only `scope` when given.
pub async fn list(
    pool: &PgPool,
    scope: Option<Uuid>,
    cursor: Option<Uuid>,
    descending: bool,
    limit: i64,
) -> Result<Vec<Application>, StoreError> {
    let mut q = QueryBuilder::<Postgres>::new(format!(
        "SELECT {COLUMNS} FROM hookstream.tenants WHERE {NOT_OPERATIONAL}"
    ));
    if let Some(s) = scope {
        q.push(" AND id = ").push_bind(s);
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

/// Replaces an application's name, uid and metadata.
pub async fn update(pool: &PgPool, id: Uuid, fields: &AppFields) -> Result<Application, StoreError> {
    check(fields)?;
    sqlx::query_as::<_, Application>(&format!(
        "UPDATE hookstream.tenants SET name = $2, uid = $3, metadata = $4, updated_at = now()
          WHERE id = $1 RETURNING {COLUMNS}"
    ))
    .bind(id)
    .bind(fields.name.trim())
    .bind(&fields.uid)
    .bind(&fields.metadata)
    .fetch_optional(pool)
    .await
    .map_err(|e| clash(e, fields))?
    .ok_or_else(|| StoreError::NotFound(format!("application {id}")))
}

/// Deletes a tenant with its endpoints, secrets and API keys. Its messages and attempts stay
/// until their day partitions are dropped (nothing shows them: every query is scoped by a
/// tenant that exists); events still in the outbox are quarantined as of an unknown tenant.
pub async fn delete(pool: &PgPool, id: Uuid) -> Result<(), StoreError> {
    let done = sqlx::query(&format!(
        "DELETE FROM hookstream.tenants WHERE id = $1 AND {NOT_OPERATIONAL}"
    ))
    .bind(id)
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("application {id}")));
    }
    Ok(())
}
