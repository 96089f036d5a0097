//! Tenant API keys for the admin API: each sees only its own tenant. A key is shown once, when
//! it is made; only its SHA-256 is stored, with a visible prefix to tell keys apart, and the
//! time it was last used. Revoked or expired keys no longer authenticate.
//!
//! Keys are `hsk_` (tenant keys, made by an operator) or `hsp_` (app-portal tokens, minted by
//! `POST /api/v1/auth/app-portal-access/{app_id}`, expiring) followed by 43 characters of
//! base62 (256 random bits).

use chrono::{DateTime, Utc};
use rand::Rng;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use crate::StoreError;

/// Characters of a key shown in lists (`hsk_` and the first 8 random ones).
pub const PREFIX_LEN: usize = 12;
const RANDOM_LEN: usize = 43;
const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// What a key is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyKind {
    /// Made by an operator for a tenant's developers.
    Tenant,
    /// Minted for an app-portal session (expires).
    Portal,
}

impl KeyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Tenant => "tenant",
            KeyKind::Portal => "portal",
        }
    }

    fn token_prefix(self) -> &'static str {
        match self {
            KeyKind::Tenant => "hsk_",
            KeyKind::Portal => "hsp_",
        }
    }

    fn parse(s: &str) -> Self {
        if s == "portal" {
            KeyKind::Portal
        } else {
            KeyKind::Tenant
        }
    }
}

/// A key as lists show it (never the key itself).
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ApiKey {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub kind: String,
    pub name: String,
    pub prefix: String,
    pub read_only: bool,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// The tenant key that minted this app-portal token (none for tenant keys, and for
    /// tokens an operator minted): revoking it revokes this one.
    pub minted_by: Option<Uuid>,
}

impl ApiKey {
    pub fn kind(&self) -> KeyKind {
        KeyKind::parse(&self.kind)
    }

    /// Usable now: not revoked, not expired.
    pub fn is_active(&self, now: DateTime<Utc>) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| e > now)
    }
}

const COLUMNS: &str =
    "id, tenant_id, kind, name, prefix, read_only, created_at, expires_at, last_used_at, revoked_at, minted_by";

/// The SHA-256 of a presented key: what is stored and looked up.
pub fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn generate(kind: KeyKind) -> String {
    let mut rng = rand::rngs::OsRng;
    let random: String = (0..RANDOM_LEN)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{}{random}", kind.token_prefix())
}

/// What a new key is.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub tenant_id: Uuid,
    pub kind: KeyKind,
    pub name: String,
    pub read_only: bool,
    pub expires_at: Option<DateTime<Utc>>,
    /// The tenant key minting this app-portal token, if a tenant key did.
    pub minted_by: Option<Uuid>,
}

/// Makes a key; returns it with the key itself, which is not stored and not shown again.
pub async fn create(pool: &PgPool, new: &NewKey) -> Result<(ApiKey, String), StoreError> {
    if new.name.len() > 200 {
        return Err(StoreError::Invalid(
            "key name must be at most 200 characters".into(),
        ));
    }
    let token = generate(new.kind);
    let key = sqlx::query_as::<_, ApiKey>(&format!(
        "INSERT INTO hookstream.api_keys (id, tenant_id, kind, name, prefix, hash, read_only, expires_at, minted_by)
         SELECT $1, t.id, $3, $4, $5, $6, $7, $8, $9 FROM hookstream.tenants t WHERE t.id = $2
         RETURNING {COLUMNS}"
    ))
    .bind(Uuid::now_v7())
    .bind(new.tenant_id)
    .bind(new.kind.as_str())
    .bind(&new.name)
    .bind(&token[..PREFIX_LEN])
    .bind(hash(&token).as_slice())
    .bind(new.read_only)
    .bind(new.expires_at)
    .bind(new.minted_by)
    .fetch_optional(pool)
    .await
    .map_err(StoreError::from_db)?
    .ok_or_else(|| StoreError::NotFound(format!("tenant {}", new.tenant_id)))?;
    Ok((key, token))
}

/// The key with this hash, whatever its state (the caller checks `is_active`).
pub async fn find_by_hash(pool: &PgPool, hash: &[u8; 32]) -> Result<Option<ApiKey>, StoreError> {
    Ok(sqlx::query_as::<_, ApiKey>(&format!(
        "SELECT {COLUMNS} FROM hookstream.api_keys WHERE hash = $1"
    ))
    .bind(hash.as_slice())
    .fetch_optional(pool)
    .await?)
}

/// A tenant's keys (every tenant's without one), newest first.
pub async fn list(
    pool: &PgPool,
    tenant: Option<Uuid>,
    include_portal: bool,
) -> Result<Vec<ApiKey>, StoreError> {
    Ok(sqlx::query_as::<_, ApiKey>(&format!(
        "SELECT {COLUMNS} FROM hookstream.api_keys
          WHERE ($1::uuid IS NULL OR tenant_id = $1) AND ($2 OR kind = 'tenant')
          ORDER BY created_at DESC, id DESC"
    ))
    .bind(tenant)
    .bind(include_portal)
    .fetch_all(pool)
    .await?)
}

/// Revokes a key (of `tenant` only, when given) and every app-portal token it minted, and so
/// their portal sessions and unopened links; revoking twice keeps the first time. Returns the
/// key.
pub async fn revoke(pool: &PgPool, id: Uuid, tenant: Option<Uuid>) -> Result<ApiKey, StoreError> {
    let mut revoked = sqlx::query_as::<_, ApiKey>(&format!(
        "UPDATE hookstream.api_keys SET revoked_at = coalesce(revoked_at, now())
          WHERE (id = $1 OR minted_by = $1) AND ($2::uuid IS NULL OR tenant_id = $2)
            AND (id = $1 OR revoked_at IS NULL)
          RETURNING {COLUMNS}"
    ))
    .bind(id)
    .bind(tenant)
    .fetch_all(pool)
    .await?;
    revoked
        .iter()
        .position(|k| k.id == id)
        .map(|at| revoked.swap_remove(at))
        .ok_or_else(|| StoreError::NotFound(format!("api key {id}")))
}

/// Ends a tenant's app-portal tokens (Svix's `expire-all`): those expiring later than `at`
/// expire then, `at` being now or a moment ahead (tokens in use get a grace period). With
/// `names`, only tokens minted with one of those `sessionId`s. Returns the tokens changed.
pub async fn expire_portal_tokens(
    pool: &PgPool,
    tenant: Uuid,
    at: DateTime<Utc>,
    names: Option<&[String]>,
) -> Result<Vec<Uuid>, StoreError> {
    Ok(sqlx::query_scalar(
        "UPDATE hookstream.api_keys SET expires_at = $2
          WHERE tenant_id = $1 AND kind = 'portal' AND revoked_at IS NULL
            AND (expires_at IS NULL OR expires_at > $2)
            AND ($3::text[] IS NULL OR name = ANY($3))
          RETURNING id",
    )
    .bind(tenant)
    .bind(at)
    .bind(names)
    .fetch_all(pool)
    .await?)
}

/// Records that these keys were used at `at` (never moves a time back).
pub async fn touch(pool: &PgPool, ids: &[Uuid], at: DateTime<Utc>) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE hookstream.api_keys SET last_used_at = $2
          WHERE id = ANY($1) AND (last_used_at IS NULL OR last_used_at < $2)",
    )
    .bind(ids)
    .bind(at)
    .execute(pool)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_long_random_and_prefixed_by_kind() {
        let a = generate(KeyKind::Tenant);
        let b = generate(KeyKind::Tenant);
        assert!(a.starts_with("hsk_") && a.len() == 4 + RANDOM_LEN, "{a}");
        assert_ne!(a, b);
        assert!(generate(KeyKind::Portal).starts_with("hsp_"));
        assert!(a[4..].bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(hash(&a), hash(&b));
    }
}
