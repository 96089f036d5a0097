//! Authentication and tenant scoping.
//!
//! `Authorization: Bearer <token>`. An operator token (configured as its SHA-256, compared in
//! constant time) may do everything. A tenant key (`hsk_…`, or an app-portal token `hsp_…`)
//! is looked up by its SHA-256 (the lookup, positive or negative, is cached for
//! `api.key_cache_ms`, so a revoked key stops working within that time, in two bounded LRUs:
//! keys found and hashes that matched none) and sees only its
//! tenant: every handler resolves the application in its path through `Principal::scope`, and
//! another tenant's application is "not found", never "forbidden". Read-only keys may only
//! GET. Each key has its own request rate (governor; 429 with `Retry-After`), and each client
//! address a budget of failed authentications (`crate::failed_auth`).
//!
//! Tokens are never logged: only a key's id appears in logs.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, Method};
use chrono::Utc;
use governor::clock::{Clock, DefaultClock};
use governor::{Quota, RateLimiter};
use hashlink::LruCache;
use hookstream_store::api_keys::{self, ApiKey, KeyKind};
use hookstream_store::sqlx::PgPool;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::config::{parse_token_hash, ApiSettings};
use crate::error::ApiError;
use crate::failed_auth::{Client, FailedAuth};
use crate::metrics::ApiMetrics;
use crate::AppState;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// An operator token (its index in `api.operator_token_hashes`).
    Operator { token: usize },
    /// A tenant key or app-portal token.
    Tenant {
        key_id: Uuid,
        tenant: Uuid,
        kind: KeyKind,
        read_only: bool,
    },
}

impl Principal {
    /// The tenant every query must stay within (None: an operator, any tenant).
    pub fn scope(&self) -> Option<Uuid> {
        match self {
            Principal::Operator { .. } => None,
            Principal::Tenant { tenant, .. } => Some(*tenant),
        }
    }

    pub fn is_operator(&self) -> bool {
        matches!(self, Principal::Operator { .. })
    }

    /// Refuses tenant keys (for what only an operator may do).
    pub fn require_operator(&self, what: &str) -> Result<(), ApiError> {
        if self.is_operator() {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!("only an operator token may {what}")))
        }
    }

    fn rate_key(&self) -> RateKey {
        match self {
            Principal::Operator { token } => RateKey::Operator(*token),
            Principal::Tenant { key_id, .. } => RateKey::Key(*key_id),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum RateKey {
    Operator(usize),
    Key(Uuid),
}

type KeyedLimiter = RateLimiter<
    RateKey,
    governor::state::keyed::DefaultKeyedStateStore<RateKey>,
    DefaultClock,
    governor::middleware::NoOpMiddleware,
>;

/// A cached key lookup (a key found, or a hash that matched none) and when it was made.
#[derive(Clone)]
struct Cached<T> {
    value: T,
    at: Instant,
}

/// Most keys found that are cached; the least recently used go first.
pub const KEY_CACHE_MAX: usize = 50_000;
/// Most hashes that matched no key that are cached. Kept apart from the keys found, so a
/// flood of made-up tokens evicts only its own kind, never a key in use.
pub const NEGATIVE_CACHE_MAX: usize = 10_000;

/// The two caches of key lookups, both bounded LRUs.
struct KeyCache {
    found: LruCache<[u8; 32], Cached<ApiKey>>,
    absent: LruCache<[u8; 32], Cached<()>>,
}

impl KeyCache {
    fn new() -> Self {
        Self {
            found: LruCache::new(KEY_CACHE_MAX),
            absent: LruCache::new(NEGATIVE_CACHE_MAX),
        }
    }

    /// `Some(lookup)` when a lookup younger than `ttl` is cached.
    fn get(&mut self, digest: &[u8; 32], ttl: Duration) -> Option<Option<ApiKey>> {
        if let Some(c) = self.found.get(digest) {
            if c.at.elapsed() < ttl {
                return Some(Some(c.value.clone()));
            }
        }
        if let Some(c) = self.absent.get(digest) {
            if c.at.elapsed() < ttl {
                return Some(None);
            }
        }
        None
    }

    fn put(&mut self, digest: [u8; 32], key: Option<ApiKey>) {
        let at = Instant::now();
        match key {
            Some(value) => {
                self.absent.remove(&digest);
                self.found.insert(digest, Cached { value, at });
            }
            None => {
                self.found.remove(&digest);
                self.absent.insert(digest, Cached { value: (), at });
            }
        }
    }
}

pub struct Authenticator {
    operators: Vec<[u8; 32]>,
    pool: PgPool,
    cache: Mutex<KeyCache>,
    cache_ttl: Duration,
    limiter: Option<KeyedLimiter>,
    limit_operators: bool,
    /// Failed authentications per client address.
    pub(crate) failures: FailedAuth,
    /// Keys used since the last flush of `last_used_at`.
    used: Mutex<HashSet<Uuid>>,
    metrics: ApiMetrics,
    /// How long a flush waits for the database (its answer deadline).
    answer: Duration,
}

impl Authenticator {
    /// `answer`: the database's answer deadline (`DatabaseConfig::answer_deadline`).
    pub fn new(cfg: &ApiSettings, pool: PgPool, metrics: ApiMetrics, answer: Duration) -> Self {
        let operators = cfg
            .operator_token_hashes
            .iter()
            .filter_map(|h| parse_token_hash(h).ok())
            .collect();
        let limiter = NonZeroU32::new(cfg.rate_limit.per_key_per_s).map(|rate| {
            let burst = NonZeroU32::new(cfg.rate_limit.burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Self {
            operators,
            pool,
            cache: Mutex::new(KeyCache::new()),
            cache_ttl: Duration::from_millis(cfg.key_cache_ms),
            limiter,
            limit_operators: cfg.rate_limit.operators,
            failures: FailedAuth::new(&cfg.auth_failures, metrics.clone()),
            used: Mutex::new(HashSet::new()),
            metrics,
            answer,
        }
    }

    /// Who `token`, sent from `client`, is: `Ok(None)` for no one (counted against the
    /// client's budget of failures), a 429 naming `api.auth_failures` when the client is
    /// over it.
    pub async fn authenticate_from(
        &self,
        token: &str,
        client: Option<Client>,
    ) -> Result<Option<Principal>, ApiError> {
        let found = match self.authenticate_unthrottled(token, client).await? {
            Some(who) => Some(who),
            None => match self.failures.failed(client) {
                Some(wait) => return Err(throttled(wait)),
                None => None,
            },
        };
        Ok(found)
    }

    /// `authenticate_from` without the failure's accounting: an operator token or a cached
    /// key answers even for a blocked client; anything that needs the database does not.
    async fn authenticate_unthrottled(
        &self,
        token: &str,
        client: Option<Client>,
    ) -> Result<Option<Principal>, ApiError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(token) = self.operator(&digest) {
            return Ok(Some(Principal::Operator { token }));
        }
        if !(token.starts_with("hsk_") || token.starts_with("hsp_")) {
            return Ok(None);
        }
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&digest, self.cache_ttl);
        let key = match cached {
            Some(Some(key)) => Some(key),
            not_a_cached_key => {
                // A blocked client learns nothing more, from the cache or the database.
                if let Some(wait) = self.failures.blocked(client) {
                    return Err(throttled(wait));
                }
                match not_a_cached_key {
                    Some(_) => None,
                    None => self.lookup(digest).await?,
                }
            }
        };
        let now = Utc::now();
        Ok(key.filter(|k| k.is_active(now)).map(|k| {
            self.used.lock().unwrap_or_else(|p| p.into_inner()).insert(k.id);
            Principal::Tenant {
                key_id: k.id,
                tenant: k.tenant_id,
                kind: k.kind(),
                read_only: k.read_only,
            }
        }))
    }

    /// Which operator token `digest` is. Every configured hash is compared, in constant
    /// time, whatever matches.
    fn operator(&self, digest: &[u8; 32]) -> Option<usize> {
        let mut operator = None;
        for (i, h) in self.operators.iter().enumerate() {
            if bool::from(h.ct_eq(digest)) && operator.is_none() {
                operator = Some(i);
            }
        }
        operator
    }

    /// The database's answer for `digest`, cached.
    async fn lookup(&self, digest: [u8; 32]) -> Result<Option<ApiKey>, ApiError> {
        self.metrics.key_lookups.inc();
        let key = api_keys::find_by_hash(&self.pool, &digest).await?;
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(digest, key.clone());
        Ok(key)
    }

    /// Forgets a key, and the portal tokens it minted, at once (after revoking it here).
    pub fn forget(&self, key_id: Uuid) {
        self.forget_where(|k| k.id == key_id || k.minted_by == Some(key_id));
    }

    /// Forgets every cached key that `gone` says has changed.
    pub fn forget_where(&self, gone: impl Fn(&ApiKey) -> bool) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let stale: Vec<[u8; 32]> = cache
            .found
            .iter()
            .filter(|(_, c)| gone(&c.value))
            .map(|(digest, _)| *digest)
            .collect();
        for digest in stale {
            cache.found.remove(&digest);
        }
    }

    /// Takes one request from the principal's rate.
    pub fn admit(&self, who: &Principal) -> Result<(), ApiError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        if who.is_operator() && !self.limit_operators {
            return Ok(());
        }
        limiter.check_key(&who.rate_key()).map_err(|not_until| {
            self.metrics.rate_limited.inc();
            ApiError::RateLimited {
                wait: not_until.wait_time_from(DefaultClock::default().now()),
                limit: "api.rate_limit.per_key_per_s",
            }
        })
    }

    /// Writes the keys used since the last call to `last_used_at`; drops idle rate-limit state.
    pub async fn flush(&self) -> Result<(), hookstream_store::StoreError> {
        let ids: Vec<Uuid> = std::mem::take(&mut *self.used.lock().unwrap_or_else(|p| p.into_inner()))
            .into_iter()
            .collect();
        if let Some(l) = &self.limiter {
            l.retain_recent();
        }
        self.failures.tidy();
        let result =
            hookstream_store::answered(self.answer, api_keys::touch(&self.pool, &ids, Utc::now())).await;
        if result.is_err() {
            // Kept for the next flush.
            self.used.lock().unwrap_or_else(|p| p.into_inner()).extend(ids);
        }
        result
    }
}

/// The bearer token of a request.
fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let client = state.auth.failures.client(parts);
        let Some(token) = bearer(parts) else {
            state.metrics.auth_failures.inc();
            return Err(ApiError::Unauthorized(
                "missing credentials: send Authorization: Bearer <token>".into(),
            ));
        };
        let Some(who) = state.auth.authenticate_from(token, client).await? else {
            return Err(ApiError::Unauthorized("invalid token".into()));
        };
        state.auth.admit(&who)?;
        if let Principal::Tenant { read_only: true, .. } = who {
            if !matches!(parts.method, Method::GET | Method::HEAD) {
                return Err(ApiError::Forbidden("this key is read-only".into()));
            }
        }
        Ok(who)
    }
}

/// Keeps `last_used_at` up to date (every few seconds) until shutdown.
pub async fn flush_loop(
    auth: Arc<Authenticator>,
    every: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), std::convert::Infallible> {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = auth.flush().await;
                return Ok(());
            }
            _ = tokio::time::sleep(every) => {
                if let Err(e) = auth.flush().await {
                    tracing::warn!(error = %e, "cannot record api keys' last use (will retry)");
                }
            }
        }
    }
}

/// The 429 of a client over its budget of failed authentications.
pub(crate) fn throttled(wait: Duration) -> ApiError {
    ApiError::RateLimited {
        wait,
        limit: crate::failed_auth::LIMIT_KEY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ApiKey {
        ApiKey {
            id: Uuid::new_v4(),
            tenant_id: Uuid::new_v4(),
            kind: "tenant".into(),
            name: "k".into(),
            prefix: "hsk_".into(),
            read_only: false,
            created_at: Utc::now(),
            expires_at: None,
            last_used_at: None,
            revoked_at: None,
            minted_by: None,
        }
    }

    // Before, the one cache was cleared whole at 50,000 entries: a flood of made-up tokens
    // made every key in use go back to the database.
    #[test]
    fn a_flood_of_unknown_hashes_evicts_no_key_in_use() {
        let ttl = Duration::from_secs(60);
        let mut cache = KeyCache::new();
        let used = key();
        cache.put([1; 32], Some(used.clone()));
        for i in 0..(3 * NEGATIVE_CACHE_MAX as u32) {
            let mut digest = [0u8; 32];
            digest[..4].copy_from_slice(&i.to_be_bytes());
            digest[31] = 0xff;
            cache.put(digest, None);
        }
        assert_eq!(cache.absent.len(), NEGATIVE_CACHE_MAX);
        assert_eq!(cache.get(&[1; 32], ttl).flatten().map(|k| k.id), Some(used.id));
        // The newest absent hashes are remembered, the oldest forgotten.
        let mut newest = [0u8; 32];
        newest[..4].copy_from_slice(&(3 * NEGATIVE_CACHE_MAX as u32 - 1).to_be_bytes());
        newest[31] = 0xff;
        assert!(matches!(cache.get(&newest, ttl), Some(None)));
        let mut oldest = [0u8; 32];
        oldest[31] = 0xff;
        assert!(cache.get(&oldest, ttl).is_none());
    }

    #[test]
    fn keys_found_are_bounded_least_recently_used_first() {
        let ttl = Duration::from_secs(60);
        let mut cache = KeyCache::new();
        let digest = |i: u32| {
            let mut d = [0u8; 32];
            d[..4].copy_from_slice(&i.to_be_bytes());
            d
        };
        let k = key();
        for i in 0..(KEY_CACHE_MAX as u32 + 10) {
            cache.put(digest(i), Some(k.clone()));
            // Used all along: kept when older ones go.
            let _ = cache.get(&digest(0), ttl);
        }
        assert_eq!(cache.found.len(), KEY_CACHE_MAX);
        assert!(
            cache.get(&digest(0), ttl).is_some(),
            "the key used all along stays"
        );
        assert!(
            cache.get(&digest(1), ttl).is_none(),
            "the least recently used went"
        );
        // A lookup that found nothing replaces a cached key (revoked and deleted since).
        cache.put(digest(0), None);
        assert!(matches!(cache.get(&digest(0), ttl), Some(None)));
    }
}
