//! Portal sessions. A login link becomes one when its page's button posts it (`login`): a
//! random id in a cookie
//! (`HttpOnly`, `SameSite=Strict`, `Path=/portal`, `Secure` over TLS or when `portal_url` is
//! https), whose SHA-256 is stored with the tenant, the read-only flag and the expiry
//! (`api.portal_session_ttl_s`).
//!
//! `Session` is the extractor every page takes: the cookie's live session, its tenant (the
//! scope of every query), its CSRF token and its request rate (governor, per session). A
//! made-up session cookie or login token counts against its address's budget of failed
//! authentications (`crate::failed_auth`), shared with the API's bearer tokens.

use std::num::NonZeroU32;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use hookstream_store::applications::{self, AppRef};
use hookstream_store::portal;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::error::PortalError;
use crate::config::ApiSettings;
use crate::failed_auth::Client;
use crate::AppState;

/// The session cookie's name.
pub const COOKIE: &str = "hs_portal";

/// Deletes the session cookie: sent at logout only. A refusal of a cookie whose session has
/// ended leaves it (see `PortalError::SessionEnded`).
pub const CLEAR_COOKIE: &str = "hs_portal=; Path=/portal; HttpOnly; SameSite=Strict; Max-Age=0";

/// What the portal keeps in memory: the per-session request rate.
pub struct PortalState {
    limiter: Option<DefaultKeyedRateLimiter<[u8; 32]>>,
}

impl PortalState {
    pub fn new(cfg: &ApiSettings) -> Self {
        let limiter = NonZeroU32::new(cfg.portal_rate_per_s).map(|rate| {
            let burst = NonZeroU32::new(cfg.portal_rate_burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Self { limiter }
    }

    fn admit(&self, key: &[u8; 32]) -> Result<(), PortalError> {
        let Some(l) = &self.limiter else { return Ok(()) };
        l.check_key(key).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            PortalError::RateLimited(wait.as_secs_f64().ceil().max(1.0) as u64)
        })
    }

    /// Forgets the rate state of idle sessions.
    pub(super) fn tidy(&self) {
        if let Some(l) = &self.limiter {
            l.retain_recent();
        }
    }
}

/// A live portal session.
#[derive(Debug, Clone)]
pub struct Session {
    /// The tenant every query is scoped to.
    pub tenant: Uuid,
    pub tenant_name: String,
    pub read_only: bool,
    /// This session's CSRF token (in every form).
    pub csrf: String,
    /// The cookie's value (to end the session at logout; never logged).
    pub(super) id: String,
}

/// The session id in the request's cookies. Two cookies of that name mean one was set by
/// someone else (a sibling subdomain can set one for a longer path, which browsers send
/// first): the request then has no session rather than perhaps the other one.
pub(super) fn cookie_value(headers: &HeaderMap) -> Option<String> {
    let mut ours = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_string());
    let first = ours.next()?;
    if ours.next().is_some() {
        return None;
    }
    Some(first).filter(|v| !v.is_empty() && v.len() <= 128)
}

impl FromRequestParts<AppState> for Session {
    type Rejection = PortalError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let id = cookie_value(&parts.headers).ok_or(PortalError::NoSession)?;
        let client = state.auth.failures.client(parts);
        refuse_blocked(state, client)?;
        let Some(grant) = portal::find_session(&state.pool, &id).await? else {
            return Err(failed(state, client, PortalError::SessionEnded));
        };
        // Rated per live session only: keyed by any cookie value sent, every made-up one
        // would add a limiter entry that nothing removes until the next login.
        state.portal.admit(&portal::hash(&id))?;
        let tenant_name =
            applications::find(&state.pool, &AppRef::Id(grant.tenant_id), Some(grant.tenant_id))
                .await?
                .map(|a| a.name)
                .ok_or(PortalError::SessionEnded)?;
        Ok(Session {
            tenant: grant.tenant_id,
            tenant_name,
            read_only: grant.read_only,
            csrf: token_for(&id),
            id,
        })
    }
}

/// A 429 for a client blocked by its failed authentications (before any lookup).
pub(super) fn refuse_blocked(state: &AppState, client: Option<Client>) -> Result<(), PortalError> {
    match state.auth.failures.blocked(client) {
        Some(wait) => Err(PortalError::RateLimited(wait.as_secs_f64().ceil().max(1.0) as u64)),
        None => Ok(()),
    }
}

/// `refusal`, counted against the client's budget of failed authentications: a 429 instead
/// when it is over.
pub(super) fn failed(state: &AppState, client: Option<Client>, refusal: PortalError) -> PortalError {
    match state.auth.failures.failed(client) {
        Some(wait) => PortalError::RateLimited(wait.as_secs_f64().ceil().max(1.0) as u64),
        None => refusal,
    }
}

/// The CSRF token of the session with this id.
pub fn token_for(session_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"hookstream-portal-csrf\0");
    h.update(session_id.as_bytes());
    hex::encode(h.finalize())
}

/// A 303 to `to`: every change answers with one, so reloading the page it lands on does not
/// repeat the change.
pub fn see_other(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_string())]).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_per_session_and_not_the_id() {
        let a = token_for("a");
        assert_eq!(a, token_for("a"));
        assert_ne!(a, token_for("b"));
        assert_eq!(a.len(), 64);
    }
}
