//! Signing in and out: a login link (`GET /portal/login?token=…`, from `app-portal-access`)
//! opens a page naming the application; only its post (from this portal's own page, checked by
//! `csrf::same_origin`) consumes the link and starts a session (`session`); logout ends it.

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use chrono::Utc;
use hookstream_store::applications::{self, AppRef};
use hookstream_store::portal;

use super::csrf;
use super::document;
use super::error::{PortalError, PortalResult};
use super::session::{cookie_value, failed, refuse_blocked, Session, CLEAR_COOKIE, COOKIE};
use crate::failed_auth::{Client, ClientAddress};
use crate::AppState;

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
    Ok(document::login_page(&name, grant.read_only, &token))
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
    let mut r = document::message_page(
        StatusCode::OK,
        "Signed out",
        "You are signed out of the portal. Open a new portal link to come back.",
    );
    r.headers_mut()
        .insert(header::SET_COOKIE, HeaderValue::from_static(CLEAR_COOKIE));
    Ok(r)
}

/// A link refused; a made-up one (no such token) counts as a failed authentication. Used,
/// expired and revoked links are real links a person opened late or twice.
fn failed_link(state: &AppState, client: Option<Client>, why: portal::LinkRefused) -> PortalError {
    match why {
        portal::LinkRefused::Unknown => failed(state, client, PortalError::Link(why)),
        other => PortalError::Link(other),
    }
}
