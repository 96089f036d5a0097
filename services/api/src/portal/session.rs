//! Portal sessions. A login link (`GET /portal/login?token=…`, from `app-portal-access`) opens
//! a page naming the application, whose button posts the token; only that post (from this
//! portal's own page) consumes the link, once, in one conditional UPDATE, and it becomes a
//! session: a random id in a cookie
//! (`HttpOnly`, `SameSite=Strict`, `Path=/portal`, `Secure` over TLS or when `portal_url` is
//! https), whose SHA-256 is stored with the tenant, the read-only flag and the expiry
//! (`api.portal_session_ttl_s`). The login answers 303 to `/portal`, so the token leaves the
//! address bar (and `Referrer-Policy: no-referrer` keeps it out of any Referer).
//!
//! `Session` is the extractor every page takes: the cookie's live session, its tenant (the
//! scope of every query) and its request rate (governor, per session). A made-up session
//! cookie or login token counts against its address's budget of failed authentications
//! (`crate::failed_auth`), shared with the API's bearer tokens.

use std::num::NonZeroU32;

use axum::extract::{FromRequestParts, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use hookstream_store::applications::{self, AppRef};
use hookstream_store::portal;
use uuid::Uuid;

use super::csrf;
use super::error::{PortalError, PortalResult};
use crate::config::ApiSettings;
use crate::failed_auth::{Client, ClientAddress};
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
    fn tidy(&self) {
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
    id: String,
}

/// The session id in the request's cookies. Two cookies of that name mean one was set by
/// someone else (a sibling subdomain can set one for a longer path, which browsers send
/// first): the request then has no session rather than perhaps the other one.
fn cookie_value(headers: &HeaderMap) -> Option<String> {
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
            csrf: csrf::token_for(&id),
            id,
        })
    }
}

/// Whether the session cookie must be `Secure`: the portal is https, or the request came over
/// TLS (a proxy in front says so).
fn secure(state: &AppState, headers: &HeaderMap) -> bool {
    state.cfg.portal_url.starts_with("https://")
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// The token of a login link, from a query string or a form.
fn link_token(encoded: &[u8]) -> Result<String, PortalError> {
    form_urlencoded::parse(encoded)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
        .filter(|t| !t.is_empty() && t.len() <= 128)
        .ok_or(PortalError::Link(portal::LinkRefused::Unknown))
}

/// `GET /portal/login?token=…`: names the application the link signs in to and asks to
/// continue; consumes nothing. A mail scanner that opens links, or another tenant who puts
/// their own link in front of someone (who would then work in their tenant unawares), starts
/// no session.
pub async fn login(
    State(state): State<AppState>,
    ClientAddress(client): ClientAddress,
    RawQuery(q): RawQuery,
) -> PortalResult {
    refuse_blocked(&state, client)?;
    let token = link_token(q.unwrap_or_default().as_bytes())?;
    let grant = portal::peek_link(&state.pool, &token)
        .await?
        .map_err(|why| failed_link(&state, client, why))?;
    let name = applications::find(&state.pool, &AppRef::Id(grant.tenant_id), Some(grant.tenant_id))
        .await?
        .map(|a| a.name)
        .ok_or(PortalError::Link(portal::LinkRefused::Revoked))?;
    Ok(super::layout::login_page(&name, grant.read_only, &token))
}

/// `POST /portal/login` (the form of `login`): from this portal's own page only, consumes the
/// link, ends the session the browser had, starts one, 303 to `/portal` (the token leaves
/// the address bar; `Referrer-Policy: no-referrer` keeps it out of any Referer).
pub async fn login_confirmed(
    State(state): State<AppState>,
    ClientAddress(client): ClientAddress,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> PortalResult {
    csrf::same_origin(&state, &headers)?;
    refuse_blocked(&state, client)?;
    let token = link_token(&body)?;
    let grant = portal::consume_link(&state.pool, &token)
        .await?
        .map_err(|why| failed_link(&state, client, why))?;
    if let Some(previous) = cookie_value(&headers) {
        portal::end_session(&state.pool, &previous).await?;
    }
    let ttl = chrono::Duration::seconds(state.cfg.portal_session_ttl_s as i64);
    let expires_at = Utc::now() + ttl;
    let id = portal::create_session(&state.pool, &grant, expires_at).await?;
    state.portal.tidy();
    tracing::info!(tenant = %grant.tenant_id, read_only = grant.read_only, "portal session started");
    let cookie = format!(
        "{COOKIE}={id}; Path=/portal; HttpOnly; SameSite=Strict; Max-Age={}{}",
        state.cfg.portal_session_ttl_s,
        if secure(&state, &headers) { "; Secure" } else { "" }
    );
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/portal")]).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(|_| PortalError::BadRequest("bad cookie".into()))?,
    );
    Ok(r)
}

/// `POST /portal/logout`: ends the session (read-only sessions may too) and clears the cookie.
pub async fn logout(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> PortalResult {
    csrf::verify(&state, &session, &headers, &body)?;
    portal::end_session(&state.pool, &session.id).await?;
    let mut r = super::layout::message_page(
        StatusCode::OK,
        "Signed out",
        "You are signed out of the portal. Open a new portal link to come back.",
    );
    r.headers_mut()
        .insert(header::SET_COOKIE, HeaderValue::from_static(CLEAR_COOKIE));
    Ok(r)
}

/// A 429 for a client blocked by its failed authentications (before any lookup).
fn refuse_blocked(state: &AppState, client: Option<Client>) -> Result<(), PortalError> {
    match state.auth.failures.blocked(client) {
        Some(wait) => Err(PortalError::RateLimited(wait.as_secs_f64().ceil().max(1.0) as u64)),
        None => Ok(()),
    }
}

/// `refusal`, counted against the client's budget of failed authentications: a 429 instead
/// when it is over.
fn failed(state: &AppState, client: Option<Client>, refusal: PortalError) -> PortalError {
    match state.auth.failures.failed(client) {
        Some(wait) => PortalError::RateLimited(wait.as_secs_f64().ceil().max(1.0) as u64),
        None => refusal,
    }
}

/// A link refused; a made-up one (no such token) counts as a failed authentication. Used,
/// expired and revoked links are real links a person opened late or twice.
fn failed_link(state: &AppState, client: Option<Client>, why: portal::LinkRefused) -> PortalError {
    match why {
        portal::LinkRefused::Unknown => failed(state, client, PortalError::Link(why)),
        other => PortalError::Link(other),
    }
}

/// A 303 to `to`: every change answers with one, so reloading the page it lands on does not
/// repeat the change.
pub fn see_other(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_string())]).into_response()
}
