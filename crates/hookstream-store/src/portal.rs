//! The tenant portal's login links and sessions (migration 0012). A link token and a session
//! id are 256 random bits shown once (in the link, in the cookie); only their SHA-256 is
//! stored. A link is consumed by one conditional UPDATE, so two browsers opening it at once
//! cannot both get a session.

use chrono::{DateTime, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use crate::StoreError;

/// What a link or a session grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct Grant {
    pub tenant_id: Uuid,
    pub read_only: bool,
    pub expires_at: DateTime<Utc>,
}

/// Why a link did not start a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRefused {
    /// No link has this token.
    Unknown,
    /// Used before.
    Used,
    /// Past its expiry.
    Expired,
}

/// A new random token (256 bits, hex).
pub fn random_token() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

/// What is stored of a token.
pub fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Makes a login link for `tenant`; returns its token (not stored).
pub async fn create_link(
    pool: &PgPool,
    tenant: Uuid,
    read_only: bool,
    expires_at: DateTime<Utc>,
) -> Result<String, StoreError> {
    let token = random_token();
    let done = sqlx::query(
        "INSERT INTO hookstream.portal_links (hash, tenant_id, read_only, expires_at)
         SELECT $1, t.id, $3, $4 FROM hookstream.tenants t WHERE t.id = $2",
    )
    .bind(hash(&token).as_slice())
    .bind(tenant)
    .bind(read_only)
    .bind(expires_at)
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("tenant {tenant}")));
    }
    Ok(token)
}

/// Consumes a link: what it grants, once, before it expires.
pub async fn consume_link(pool: &PgPool, token: &str) -> Result<Result<Grant, LinkRefused>, StoreError> {
    let h = hash(token);
    let grant: Option<Grant> = sqlx::query_as(
        "UPDATE hookstream.portal_links SET used_at = now()
          WHERE hash = $1 AND used_at IS NULL AND expires_at > now()
          RETURNING tenant_id, read_only, expires_at",
    )
    .bind(h.as_slice())
    .fetch_optional(pool)
    .await?;
    if let Some(g) = grant {
        return Ok(Ok(g));
    }
    // Refused: say why (the UPDATE above is what decides; this only explains).
    let why: Option<(Option<DateTime<Utc>>,)> =
        sqlx::query_as("SELECT used_at FROM hookstream.portal_links WHERE hash = $1")
            .bind(h.as_slice())
            .fetch_optional(pool)
            .await?;
    Ok(Err(match why {
        None => LinkRefused::Unknown,
        Some((Some(_),)) => LinkRefused::Used,
        Some((None,)) => LinkRefused::Expired,
    }))
}

/// Starts a session; returns its id (the cookie's value, not stored).
pub async fn create_session(
    pool: &PgPool,
    tenant: Uuid,
    read_only: bool,
    expires_at: DateTime<Utc>,
) -> Result<String, StoreError> {
    let id = random_token();
    sqlx::query(
        "INSERT INTO hookstream.portal_sessions (hash, tenant_id, read_only, expires_at)
         VALUES ($1, $2, $3, $4)",
    )
    .bind(hash(&id).as_slice())
    .bind(tenant)
    .bind(read_only)
    .bind(expires_at)
    .execute(pool)
    .await?;
    Ok(id)
}

/// The live session with this id.
pub async fn find_session(pool: &PgPool, id: &str) -> Result<Option<Grant>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT tenant_id, read_only, expires_at FROM hookstream.portal_sessions
          WHERE hash = $1 AND expires_at > now()",
    )
    .bind(hash(id).as_slice())
    .fetch_optional(pool)
    .await?)
}

/// Ends a session.
pub async fn end_session(pool: &PgPool, id: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM hookstream.portal_sessions WHERE hash = $1")
        .bind(hash(id).as_slice())
        .execute(pool)
        .await?;
    Ok(())
}

/// Deletes links and sessions that expired before `before`; returns how many.
pub async fn prune(pool: &PgPool, before: DateTime<Utc>) -> Result<u64, StoreError> {
    let links = sqlx::query("DELETE FROM hookstream.portal_links WHERE expires_at < $1")
        .bind(before)
        .execute(pool)
        .await?
        .rows_affected();
    let sessions = sqlx::query("DELETE FROM hookstream.portal_sessions WHERE expires_at < $1")
        .bind(before)
        .execute(pool)
        .await?
        .rows_affected();
    Ok(links + sessions)
}
