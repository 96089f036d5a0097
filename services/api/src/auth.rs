//! Authentication and tenant scoping.
//!
//! `Authorization: Bearer <token>`. An operator token (configured as its SHA-256, compared in
//! constant time) may do everything. A tenant key (`hsk_…`, or an app-portal token `hsp_…`)
//! is looked up by its SHA-256 (the lookup, positive or negative, is cached for
//! `api.key_cache_ms`, so a revoked key stops working within that time) and sees only its
//! tenant: every handler resolves the application in its path through `Principal::scope`, and
//! another tenant's application is "not found", never "forbidden". Read-only keys may only
//! GET. Each key has its own request rate (governor; 429 with `Retry-After`).
//!
//! Tokens are never logged: only a key's id appears in logs.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, Method};
use chrono::Utc;
use governor::clock::{Clock, DefaultClock};
use governor::{Quota, RateLimiter};
use hookstream_store::api_keys::{self, ApiKey, KeyKind};
use hookstream_store::sqlx::PgPool;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::config::{parse_token_hash, ApiSettings};
use crate::error::ApiError;
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

/// A cached key lookup: the key, or none with that hash.
#[derive(Clone)]
struct Cached {
    key: Option<ApiKey>,
    at: Instant,
}

/// Most cached lookups kept (beyond it the cache starts afresh).
const CACHE_MAX: usize = 50_000;

pub struct Authenticator {
    operators: Vec<[u8; 32]>,
    pool: PgPool,
    cache: Mutex<HashMap<[u8; 32], Cached>>,
    cache_ttl: Duration,
    limiter: Option<KeyedLimiter>,
    limit_operators: bool,
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
            cache: Mutex::new(HashMap::new()),
            cache_ttl: Duration::from_millis(cfg.key_cache_ms),
            limiter,
            limit_operators: cfg.rate_limit.operators,
            used: Mutex::new(HashSet::new()),
            metrics,
            answer,
        }
    }

    /// Who `token` is, if anyone.
    pub async fn authenticate(&self, token: &str) -> Result<Option<Principal>, ApiError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Every configured hash is compared, in constant time, whatever matches.
        let mut operator = None;
        for (i, h) in self.operators.iter().enumerate() {
            if bool::from(h.ct_eq(&digest)) && operator.is_none() {
                operator = Some(i);
            }
        }
        if let Some(token) = operator {
            return Ok(Some(Principal::Operator { token }));
        }
        if !(token.starts_with("hsk_") || token.starts_with("hsp_")) {
            return Ok(None);
        }
        let key = self.lookup(digest).await?;
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

    async fn lookup(&self, digest: [u8; 32]) -> Result<Option<ApiKey>, ApiError> {
        {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = cache.get(&digest) {
                if c.at.elapsed() < self.cache_ttl {
                    return Ok(c.key.clone());
                }
            }
        }
        let key = api_keys::find_by_hash(&self.pool, &digest).await?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(
            digest,
            Cached {
                key: key.clone(),
                at: Instant::now(),
            },
        );
        Ok(key)
    }

    /// Forgets a key, and the portal tokens it minted, at once (after revoking it here).
    pub fn forget(&self, key_id: Uuid) {
        self.forget_where(|k| k.id == key_id || k.minted_by == Some(key_id));
    }

    /// Forgets every cached key that `gone` says has changed.
    pub fn forget_where(&self, gone: impl Fn(&ApiKey) -> bool) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.retain(|_, c| c.key.as_ref().is_none_or(|k| !gone(k)));
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
            ApiError::RateLimited(not_until.wait_time_from(DefaultClock::default().now()))
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
        let Some(token) = bearer(parts) else {
            state.metrics.auth_failures.inc();
            return Err(ApiError::Unauthorized(
                "missing credentials: send Authorization: Bearer <token>".into(),
            ));
        };
        let Some(who) = state.auth.authenticate(token).await? else {
            state.metrics.auth_failures.inc();
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
