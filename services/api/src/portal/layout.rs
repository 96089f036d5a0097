//! The shell of a signed-in session's pages (skip link, header, navigation, main landmark), on
//! `document`, and the small pieces forms repeat. maud escapes every interpolated value;
//! nothing here builds HTML from strings.

use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};

use super::document::{head, html_response};
use super::session::Session;

/// Which navigation entry is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Endpoints,
    Deliveries,
    EventTypes,
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
