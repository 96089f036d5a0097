//! The event-type catalogue: names with a description and example payloads (`schemas`, in
//! Svix's shape), installation-wide. Archiving keeps a type (and its history) but, when the API
//! enforces the catalogue, refuses new messages of it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgPool, Postgres, QueryBuilder};

use crate::StoreError;

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct EventType {
    pub name: String,
    pub description: String,
    pub schemas: Option<serde_json::Value>,
    pub archived: bool,
    pub deprecated: bool,
    pub feature_flag: Option<String>,
    pub group_name: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLUMNS: &str =
    "name, description, schemas, archived, deprecated, feature_flag, group_name, created_at, updated_at";

/// An event type's fields (create and full update).
#[derive(Debug, Clone, Default)]
pub struct EventTypeFields {
    pub description: String,
    pub schemas: Option<serde_json::Value>,
    pub archived: bool,
    pub deprecated: bool,
    pub feature_flag: Option<String>,
    pub group_name: Option<String>,
}

/// Whether `name` is a valid event type (what `hookstream.enqueue` accepts).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name.split('.').all(|w| {
            !w.is_empty()
                && w.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        })
}

/// Creates a type; `Conflict` when the name exists.
pub async fn create(pool: &PgPool, name: &str, f: &EventTypeFields) -> Result<EventType, StoreError> {
    sqlx::query_as::<_, EventType>(&format!(
        "INSERT INTO hookstream.event_types
            (name, description, schemas, archived, deprecated, feature_flag, group_name)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {COLUMNS}"
    ))
    .bind(name)
    .bind(&f.description)
    .bind(&f.schemas)
    .bind(f.archived)
    .bind(f.deprecated)
    .bind(&f.feature_flag)
    .bind(&f.group_name)
    .fetch_one(pool)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict(format!("event type {name:?} already exists"))
        }
        _ => StoreError::from_db(e),
    })
}

/// Creates or replaces a type; true when it was created.
pub async fn upsert(pool: &PgPool, name: &str, f: &EventTypeFields) -> Result<(EventType, bool), StoreError> {
    let (row, created): (EventType, bool) = {
        let row = sqlx::query_as::<_, EventTypeWithFlag>(&format!(
            "INSERT INTO hookstream.event_types
                (name, description, schemas, archived, deprecated, feature_flag, group_name)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description, schemas = EXCLUDED.schemas,
                archived = EXCLUDED.archived, deprecated = EXCLUDED.deprecated,
                feature_flag = EXCLUDED.feature_flag, group_name = EXCLUDED.group_name, updated_at = now()
             RETURNING {COLUMNS}, (xmax = 0) AS inserted"
        ))
        .bind(name)
        .bind(&f.description)
        .bind(&f.schemas)
        .bind(f.archived)
        .bind(f.deprecated)
        .bind(&f.feature_flag)
        .bind(&f.group_name)
        .fetch_one(pool)
        .await
        .map_err(StoreError::from_db)?;
        (row.event_type, row.inserted)
    };
    Ok((row, created))
}

#[derive(sqlx::FromRow)]
struct EventTypeWithFlag {
    #[sqlx(flatten)]
    event_type: EventType,
    inserted: bool,
}

pub async fn get(pool: &PgPool, name: &str) -> Result<Option<EventType>, StoreError> {
    Ok(sqlx::query_as::<_, EventType>(&format!(
        "SELECT {COLUMNS} FROM hookstream.event_types WHERE name = $1"
    ))
    .bind(name)
    .fetch_optional(pool)
    .await?)
}

/// Which of `names` are in the catalogue and not archived.
pub async fn active_among(pool: &PgPool, names: &[String]) -> Result<Vec<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT name FROM hookstream.event_types WHERE name = ANY($1) AND NOT archived")
            .bind(names)
            .fetch_all(pool)
            .await?,
    )
}

/// A page of types in name order after (or, descending, before) `cursor`.
pub async fn list(
    pool: &PgPool,
    cursor: Option<&str>,
    descending: bool,
    include_archived: bool,
    limit: i64,
) -> Result<Vec<EventType>, StoreError> {
    let mut q =
        QueryBuilder::<Postgres>::new(format!("SELECT {COLUMNS} FROM hookstream.event_types WHERE true"));
    if !include_archived {
        q.push(" AND NOT archived");
    }
    if let Some(c) = cursor {
        q.push(if descending {
            " AND name < "
        } else {
            " AND name > "
        })
        .push_bind(c.to_string());
    }
    q.push(if descending {
        " ORDER BY name DESC"
    } else {
        " ORDER BY name"
    });
    q.push(" LIMIT ").push_bind(limit);
    Ok(q.build_query_as().fetch_all(pool).await?)
}

/// Replaces a type's fields (it must exist).
pub async fn update(pool: &PgPool, name: &str, f: &EventTypeFields) -> Result<EventType, StoreError> {
    sqlx::query_as::<_, EventType>(&format!(
        "UPDATE hookstream.event_types SET description = $2, schemas = $3, archived = $4, deprecated = $5,
                feature_flag = $6, group_name = $7, updated_at = now()
          WHERE name = $1 RETURNING {COLUMNS}"
    ))
    .bind(name)
    .bind(&f.description)
    .bind(&f.schemas)
    .bind(f.archived)
    .bind(f.deprecated)
    .bind(&f.feature_flag)
    .bind(&f.group_name)
    .fetch_optional(pool)
    .await
    .map_err(StoreError::from_db)?
    .ok_or_else(|| StoreError::NotFound(format!("event type {name:?}")))
}

/// Archives a type, or with `expunge` deletes it.
pub async fn remove(pool: &PgPool, name: &str, expunge: bool) -> Result<(), StoreError> {
    let sql = if expunge {
        "DELETE FROM hookstream.event_types WHERE name = $1"
    } else {
        "UPDATE hookstream.event_types SET archived = true, updated_at = now() WHERE name = $1"
    };
    let done = sqlx::query(sql).bind(name).execute(pool).await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("event type {name:?}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_follow_the_enqueue_rule() {
        for ok in ["a", "order.created", "user_signed-up.v2"] {
            assert!(super::valid_name(ok), "{ok}");
        }
        for bad in ["", ".", "a..b", "a.", "a b", "a/b", "a.*"] {
            assert!(!super::valid_name(bad), "{bad}");
        }
        assert!(!super::valid_name(&"a".repeat(201)));
    }
}
