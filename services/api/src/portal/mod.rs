//! The tenant portal (issue 16): a tenant's developers manage their endpoints and read their
//! delivery log in a browser, under `/portal`, on top of the same store functions and
//! validation as the API's routes (`crate::routes`).
//!
//! Access starts with a login link from `POST /api/v1/auth/app-portal-access/{app_id}`
//! (short-lived, single-use, consumed only by the button of the page it opens: `login.rs`),
//! which becomes a session cookie scoped to one tenant.
//! Every handler takes the session's tenant as the scope of every query: another tenant's id
//! is "not found". Every form carries the session's CSRF token (`csrf.rs`); pages are
//! server-rendered HTML (maud, escaped by default: `layout.rs`, `pages/`), with a strict
//! Content-Security-Policy (the CSS and the little JavaScript are static files: `assets.rs`),
//! and read well without JavaScript. Charts are SVG drawn on the server (`chart.rs`).
//!
//! Nothing here logs a token, a session id or a query string: the request metrics name the
//! route template only (`crate::track`).

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
mod assets;
mod chart;
mod document;
mod error;
mod session;
mod csrf;
mod layout;
mod login;
mod pages;

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

pub use session::{PortalState, CLEAR_COOKIE};

use crate::AppState;

/// The Content-Security-Policy of every portal response.
pub const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; \
                       form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Every portal route (method, template): `tests/isolation.rs` checks each one with another
/// tenant's ids, so a route added to `router` must be added here.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/portal"),
    ("GET", "/portal/login"),
    ("POST", "/portal/login"),
    ("POST", "/portal/logout"),
    ("GET", "/portal/endpoints/new"),
    ("POST", "/portal/endpoints"),
    ("GET", "/portal/endpoints/{endpoint_id}"),
    ("GET", "/portal/endpoints/{endpoint_id}/edit"),
    ("POST", "/portal/endpoints/{endpoint_id}"),
    ("POST", "/portal/endpoints/{endpoint_id}/disable"),
    ("POST", "/portal/endpoints/{endpoint_id}/enable"),
    ("POST", "/portal/endpoints/{endpoint_id}/delete"),
    ("POST", "/portal/endpoints/{endpoint_id}/secret"),
    ("POST", "/portal/endpoints/{endpoint_id}/secret/rotate"),
    ("POST", "/portal/endpoints/{endpoint_id}/test"),
    ("POST", "/portal/endpoints/{endpoint_id}/replay"),
    ("GET", "/portal/event-types"),
    ("GET", "/portal/deliveries"),
    ("GET", "/portal/events/{event_id}"),
    ("POST", "/portal/events/{event_id}/resend/{endpoint_id}"),
    ("POST", "/portal/erase"),
    ("GET", "/portal/assets/{file}"),
];

/// The portal's routes, with its security headers.
pub fn router(state: AppState) -> Router<AppState> {
    use pages::{deliveries, endpoints, event_types};
    Router::new()
        .route("/portal", get(endpoints::list))
        .route("/portal/login", get(login::login).post(login::login_confirmed))
        .route("/portal/logout", post(login::logout))
        .route("/portal/endpoints/new", get(endpoints::new_form))
        .route("/portal/endpoints", post(endpoints::create))
        .route(
            "/portal/endpoints/{endpoint_id}",
            get(endpoints::show).post(endpoints::update),
        )
        .route("/portal/endpoints/{endpoint_id}/edit", get(endpoints::edit_form))
        .route(
            "/portal/endpoints/{endpoint_id}/disable",
            post(endpoints::disable),
        )
        .route("/portal/endpoints/{endpoint_id}/enable", post(endpoints::enable))
        .route("/portal/endpoints/{endpoint_id}/delete", post(endpoints::delete))
        .route(
            "/portal/endpoints/{endpoint_id}/secret",
            post(endpoints::reveal_secret),
        )
        .route(
            "/portal/endpoints/{endpoint_id}/secret/rotate",
            post(endpoints::rotate_secret),
        )
        .route("/portal/endpoints/{endpoint_id}/test", post(endpoints::send_test))
        .route(
            "/portal/endpoints/{endpoint_id}/replay",
            post(endpoints::replay_since),
        )
        .route("/portal/event-types", get(event_types::list))
        .route("/portal/deliveries", get(deliveries::list))
        .route("/portal/events/{event_id}", get(deliveries::event))
        .route(
            "/portal/events/{event_id}/resend/{endpoint_id}",
            post(deliveries::resend),
        )
        .route("/portal/erase", post(deliveries::erase))
        .route("/portal/assets/{file}", get(assets::serve))
        .with_state(state)
}

/// Every response under `/portal` (the routes', and the router's 404 and 405 for paths there:
/// hence a layer of the whole router, see `crate::router`): CSP, no sniffing, no framing, no
/// referrer (a login URL must not leak), pages never cached (assets set their own caching),
/// and when the portal is served over https, HSTS: a browser that once reached it never sends
/// its session cookie over plain http.
pub async fn security_headers(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let portal = req.uri().path() == "/portal" || req.uri().path().starts_with("/portal/");
    let mut r = next.run(req).await;
    if !portal {
        return r;
    }
    let h = r.headers_mut();
    if state.cfg.portal_url.starts_with("https://") {
        h.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    r
}
