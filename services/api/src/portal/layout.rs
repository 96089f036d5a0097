//! The page shell every portal page shares (skip link, header, navigation, main landmark) and
//! the small pieces forms repeat. maud escapes every interpolated value; nothing here builds
//! HTML from strings.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};

use super::session::Session;

/// Which navigation entry is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Endpoints,
    Deliveries,
    EventTypes,
}

fn html_response(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="referrer" content="no-referrer";
            title { (title) " · Hookstream portal" }
            link rel="stylesheet" href="/portal/assets/portal.css";
            script src="/portal/assets/portal.js" defer {}
        }
    }
}

/// A page of a signed-in session.
pub fn page(session: &Session, nav: Nav, title: &str, notice: Option<&str>, body: Markup) -> Response {
    let item = |n: Nav, href: &str, label: &str| {
        html! {
            li { a href=(href) aria-current=[(n == nav).then_some("page")] { (label) } }
        }
    };
    html_response(
        StatusCode::OK,
        html! {
            (DOCTYPE)
            html lang="en" {
                (head(title))
                body {
                    a.skip href="#main" { "Skip to content" }
                    header.top {
                        span.brand { "Hookstream" }
                        span.tenant { (session.tenant_name) }
                        @if session.read_only { span.badge.ro { "read-only" } }
                        nav aria-label="Portal" {
                            ul {
                                (item(Nav::Endpoints, "/portal", "Endpoints"))
                                (item(Nav::Deliveries, "/portal/deliveries", "Delivery log"))
                                (item(Nav::EventTypes, "/portal/event-types", "Event types"))
                            }
                        }
                        form.logout method="post" action="/portal/logout" {
                            (csrf_field(session))
                            button type="submit" { "Sign out" }
                        }
                    }
                    main #main tabindex="-1" {
                        h1 { (title) }
                        @if let Some(n) = notice { p.notice role="status" { (n) } }
                        (body)
                    }
                }
            }
        },
    )
}

/// A page outside a session (errors, signed out).
pub fn message_page(status: StatusCode, title: &str, detail: &str) -> Response {
    html_response(
        status,
        html! {
            (DOCTYPE)
            html lang="en" {
                (head(title))
                body {
                    main #main.message {
                        h1 { (title) }
                        p.detail { (detail) }
                        p { a href="/portal" { "Back to the portal" } }
                    }
                }
            }
        },
    )
}

/// What a login link opens: the application it signs in to, and a button that posts the
/// link's token. Only that post starts a session.
pub fn login_page(tenant_name: &str, read_only: bool, token: &str) -> Response {
    html_response(
        StatusCode::OK,
        html! {
            (DOCTYPE)
            html lang="en" {
                (head("Sign in"))
                body {
                    main #main.message {
                        h1 { "Sign in to " (tenant_name) }
                        p.detail {
                            "This link opens the Hookstream portal of " strong { (tenant_name) }
                            @if read_only { ", read-only" } "."
                            " If you did not ask for it, close this page: nothing has happened yet."
                        }
                        form method="post" action="/portal/login" {
                            input type="hidden" name="token" value=(token);
                            button type="submit" #continue.primary { "Continue to the portal" }
                        }
                    }
                }
            }
        },
    )
}

pub fn error_page(status: StatusCode, title: &str, detail: &str) -> Response {
    message_page(status, title, detail)
}

/// The session's CSRF token, for every form.
pub fn csrf_field(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

/// A one-button form that posts to `action` (the button can ask to confirm with JavaScript).
pub fn post_button(
    session: &Session,
    action: &str,
    label: &str,
    confirm: Option<&str>,
    class: &str,
) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            (csrf_field(session))
            button type="submit" class=(class) data-confirm=[confirm] { (label) }
        }
    }
}

/// A time as UTC, machine-readable too.
pub fn time(at: DateTime<Utc>) -> Markup {
    html! { time datetime=(at.to_rfc3339()) { (at.format("%Y-%m-%d %H:%M:%S UTC")) } }
}

pub fn opt_time(at: Option<DateTime<Utc>>) -> Markup {
    match at {
        Some(t) => time(t),
        None => html! { span.muted { "—" } },
    }
}

/// An error message below a field (tied to it with `aria-describedby`).
pub fn field_error(id: &str, error: Option<&String>) -> Markup {
    html! {
        @if let Some(e) = error {
            p.field-error id=(format!("{id}-error")) role="alert" { (e) }
        }
    }
}

/// A JSON value pretty-printed (escaped) for a `<pre>`.
pub fn pretty_json(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_string())
}
