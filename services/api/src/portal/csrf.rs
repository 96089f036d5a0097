//! CSRF protection of every state-changing request: each form carries the session's token (a
//! hash of the session id, which only the cookie holds), compared in constant time; and when
//! the browser says where the request came from (`Origin`, `Sec-Fetch-Site`), it must be this
//! portal (an opaque `Origin: null` counts only with `Sec-Fetch-Site: same-origin`). `SameSite=Strict` on the cookie is a third layer, not the only one.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::HeaderMap;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::error::PortalError;
use super::session::Session;
use crate::AppState;

#[derive(Deserialize)]
struct Token {
    #[serde(default)]
    csrf: String,
}

/// The origin a same-site request names: the portal URL's, or this request's `Host`. Pages
/// are served with `Referrer-Policy: no-referrer`, under which browsers send `Origin: null` on
/// form posts: then `Sec-Fetch-Site` (which pages cannot forge) must say same-origin.
fn origin_ok(state: &AppState, headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get("origin").and_then(|v| v.to_str().ok()) else {
        return true;
    };
    if origin == "null" {
        return headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|s| s == "same-origin");
    }
    let configured = url::Url::parse(&state.cfg.portal_url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default();
    if origin == configured {
        return true;
    }
    let host = headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    !host.is_empty() && (origin == format!("http://{host}") || origin == format!("https://{host}"))
}

/// Refuses a request a browser says comes from another site (`Sec-Fetch-Site`, `Origin`).
pub fn same_origin(state: &AppState, headers: &HeaderMap) -> Result<(), PortalError> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if !matches!(site, "same-origin" | "none") {
            return Err(PortalError::Csrf("cross-site request"));
        }
    }
    if !origin_ok(state, headers) {
        return Err(PortalError::Csrf("foreign origin"));
    }
    Ok(())
}

/// Checks the origin headers and the form's token against the session's.
pub fn verify(
    state: &AppState,
    session: &Session,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), PortalError> {
    same_origin(state, headers)?;
    let t: Token = serde_urlencoded::from_bytes(body).map_err(|_| PortalError::Csrf("unreadable form"))?;
    if t.csrf.len() != session.csrf.len() || !bool::from(t.csrf.as_bytes().ct_eq(session.csrf.as_bytes())) {
        return Err(PortalError::Csrf("missing or wrong token"));
    }
    Ok(())
}

/// A state-changing form post: a writable session, a verified origin and token, and the form.
pub struct Mutation<T> {
    pub session: Session,
    pub form: T,
}

impl<T: DeserializeOwned> FromRequest<AppState> for Mutation<T> {
    type Rejection = PortalError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let session = Session::from_request_parts(&mut parts, state).await?;
        let headers = parts.headers.clone();
        let req = Request::from_parts(parts, body);
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| PortalError::BadRequest(format!("cannot read the form: {e}")))?;
        verify(state, &session, &headers, &bytes)?;
        if session.read_only {
            return Err(PortalError::ReadOnly);
        }
        let form: T = serde_urlencoded::from_bytes(&bytes)
            .map_err(|e| PortalError::BadRequest(format!("cannot read the form: {e}")))?;
        Ok(Mutation { session, form })
    }
}
