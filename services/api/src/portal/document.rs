//! The HTML document every portal page is: its head (styles, script, no-referrer), and the
//! pages shown outside a session (errors, sign-in, signed out). Below everything else in the
//! portal: errors render with it, and the signed-in shell (`layout`) builds on it. maud escapes
//! every interpolated value.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

pub(super) fn html_response(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

pub(super) fn head(title: &str) -> Markup {
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
