//! The tenant portal's login links and sessions (migration 0012). A link token and a session
//! id are 256 random bits shown once (in the link, in the cookie); only their SHA-256 is
//! stored. A link is consumed by one conditional UPDATE, so two browsers opening it at once
//! cannot both get a session.
//!
//! Both belong to the app-portal token minted with the link (an `hsp_` key, migration 0014):
//! a link opens, and a session is found, only while that key is live (not revoked, not
//! expired), so logging the token out ends its browser sessions at once.

use chrono::{DateTime, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use crate::StoreError;

/// What a link or a session grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct Grant {
    /// The app-portal key the link or session belongs to.
    pub key_id: Uuid,
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
    /// Its app-portal token was logged out, revoked or has expired.
    Revoked,
}

/// The key of `k` is live (the same rule as `ApiKey::is_active`).
const KEY_LIVE: &str = "k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())";

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

/// Makes a login link belonging to the app-portal key `key` (its tenant's); returns its token
/// (not stored).
pub async fn create_link(
    pool: &PgPool,
    key: Uuid,
    read_only: bool,
    expires_at: DateTime<Utc>,
) -> Result<String, StoreError> {
    let token = random_token();
    let done = sqlx::query(
        "INSERT INTO hookstream.portal_links (hash, key_id, tenant_id, read_only, expires_at)
         SELECT $1, k.id, k.tenant_id, $3, $4 FROM hookstream.api_keys k
          WHERE k.id = $2 AND k.kind = 'portal'",
    )
    .bind(hash(&token).as_slice())
    .bind(key)
    .bind(read_only)
    .bind(expires_at)
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("app-portal key {key}")));
    }
    Ok(token)
}

/// Consumes a link: what it grants, once, before it expires.
pub async fn consume_link(pool: &PgPool, token: &str) -> Result<Result<Grant, LinkRefused>, StoreError> {
    granted(
        pool,
        token,
        &format!(
            "UPDATE hookstream.portal_links l SET used_at = now()
               FROM hookstream.api_keys k
              WHERE l.hash = $1 AND l.used_at IS NULL AND l.expires_at > now()
                AND k.id = l.key_id AND {KEY_LIVE}
              RETURNING l.key_id, l.tenant_id, l.read_only, l.expires_at"
        ),
    )
    .await
}

/// What a link would grant if it were consumed now, without consuming it: the page a link
/// opens asks the person to continue, so that a link opened by a mail scanner, or put in
/// front of someone by another tenant, starts no session by itself.
pub async fn peek_link(pool: &PgPool, token: &str) -> Result<Result<Grant, LinkRefused>, StoreError> {
    granted(
        pool,
        token,
        &format!(
            "SELECT l.key_id, l.tenant_id, l.read_only, l.expires_at
               FROM hookstream.portal_links l JOIN hookstream.api_keys k ON k.id = l.key_id
              WHERE l.hash = $1 AND l.used_at IS NULL AND l.expires_at > now() AND {KEY_LIVE}"
        ),
    )
    .await
}

/// The grant `sql` (bound to the token's hash) returns, or why the link grants nothing: the
/// query decides, `refusal` only explains.
async fn granted(pool: &PgPool, token: &str, sql: &str) -> Result<Result<Grant, LinkRefused>, StoreError> {
    let h = hash(token);
    let grant: Option<Grant> = sqlx::query_as(sql)
        .bind(h.as_slice())
        .fetch_optional(pool)
        .await?;
    match grant {
        Some(g) => Ok(Ok(g)),
        None => Ok(Err(refusal(pool, &h).await?)),
    }
}

/// Why the link with this hash grants nothing.
async fn refusal(pool: &PgPool, h: &[u8]) -> Result<LinkRefused, StoreError> {
    let why: Option<(Option<DateTime<Utc>>, bool)> =
        sqlx::query_as("SELECT used_at, expires_at <= now() FROM hookstream.portal_links WHERE hash = $1")
            .bind(h)
            .fetch_optional(pool)
            .await?;
    Ok(match why {
        None => LinkRefused::Unknown,
        Some((Some(_), _)) => LinkRefused::Used,
        Some((None, true)) => LinkRefused::Expired,
        Some((None, false)) => LinkRefused::Revoked,
    })
}

/// Starts a session of what `grant` (a consumed link) grants, until `expires_at` or its key's
/// expiry, whichever is first; returns its id (the cookie's value, not stored).
pub async fn create_session(
    pool: &PgPool,
    grant: &Grant,
    expires_at: DateTime<Utc>,
) -> Result<String, StoreError> {
    let id = random_token();
    let done = sqlx::query(
        "INSERT INTO hookstream.portal_sessions (hash, key_id, tenant_id, read_only, expires_at)
         SELECT $1, k.id, k.tenant_id, $3, least($4, k.expires_at)
           FROM hookstream.api_keys k WHERE k.id = $2 AND k.tenant_id = $5",
    )
    .bind(hash(&id).as_slice())
    .bind(grant.key_id)
    .bind(grant.read_only)
    .bind(expires_at)
    .bind(grant.tenant_id)
    .execute(pool)
    .await
    .map_err(StoreError::from_db)?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("app-portal key {}", grant.key_id)));
    }
    Ok(id)
}

/// The live session with this id: not ended, not expired, and its app-portal key live.
pub async fn find_session(pool: &PgPool, id: &str) -> Result<Option<Grant>, StoreError> {
    Ok(sqlx::query_as(&format!(
        "SELECT s.key_id, s.tenant_id, s.read_only, s.expires_at FROM hookstream.portal_sessions s
           JOIN hookstream.api_keys k ON k.id = s.key_id
          WHERE s.hash = $1 AND s.expires_at > now() AND {KEY_LIVE}"
    ))
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
