//! What a portal request can fail with, rendered as an HTML page with the right status (the
//! API's JSON errors are for programs). Internal causes are logged, never shown.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hookstream_store::portal::LinkRefused;
use hookstream_store::StoreError;

use super::document;
use crate::error::ApiError;

#[derive(Debug)]
pub enum PortalError {
    /// No session cookie (or two: see `session::cookie_value`).
    NoSession,
    /// A session cookie whose session expired or was ended: refused like `NoSession`.
    SessionEnded,
    /// A login link that cannot start a session.
    Link(LinkRefused),
    /// A read-only session asked to change something.
    ReadOnly,
    /// The form's CSRF token or the request's origin is wrong.
    Csrf(&'static str),
    /// Over the session's request rate; retry after this many seconds.
    RateLimited(u64),
    /// A malformed request (a query or form that cannot be read).
    BadRequest(String),
    Api(ApiError),
}

impl From<ApiError> for PortalError {
    fn from(e: ApiError) -> Self {
        PortalError::Api(e)
    }
}

impl From<StoreError> for PortalError {
    fn from(e: StoreError) -> Self {
        PortalError::Api(e.into())
    }
}

pub type PortalResult<T = Response> = Result<T, PortalError>;

const SIGNED_OUT: &str = "Your portal session has ended or was never started. Ask for a new portal link.";

impl IntoResponse for PortalError {
    fn into_response(self) -> Response {
        let (status, title, detail): (StatusCode, &str, String) = match self {
            PortalError::NoSession => (StatusCode::UNAUTHORIZED, "Signed out", SIGNED_OUT.into()),
            // The dead cookie is left alone: a deletion cannot say which cookie it deletes, and
            // a refusal arriving late (another tab's request made with the old cookie) would
            // delete the one a new sign-in just set. The next sign-in replaces it.
            PortalError::SessionEnded => (StatusCode::UNAUTHORIZED, "Signed out", SIGNED_OUT.into()),
            PortalError::Link(LinkRefused::Unknown) => (
                StatusCode::UNAUTHORIZED,
                "Invalid link",
                "This portal link is not valid. Ask for a new portal link.".into(),
            ),
            PortalError::Link(LinkRefused::Used) => (
                StatusCode::GONE,
                "Link already used",
                "This portal link was already used: each link opens one session. Ask for a new portal link."
                    .into(),
            ),
            PortalError::Link(LinkRefused::Expired) => (
                StatusCode::GONE,
                "Link expired",
                "This portal link has expired. Ask for a new portal link.".into(),
            ),
            PortalError::Link(LinkRefused::Revoked) => (
                StatusCode::GONE,
                "Access revoked",
                "The access this portal link belongs to was signed out or has expired. Ask for a new portal link."
                    .into(),
            ),
            PortalError::ReadOnly => (
                StatusCode::FORBIDDEN,
                "Read-only access",
                "This portal session is read-only: it can look but not change anything.".into(),
            ),
            PortalError::Csrf(why) => (
                StatusCode::FORBIDDEN,
                "Request refused",
                format!("The form could not be verified ({why}). Go back, reload the page and try again."),
            ),
            PortalError::RateLimited(secs) => {
                let mut r = document::error_page(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many requests",
                    &format!("Slow down: retry in {secs} s."),
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                return r;
            }
            PortalError::BadRequest(m) => (StatusCode::BAD_REQUEST, "Bad request", m),
            PortalError::Api(e) => {
                let status = e.status();
                let detail = match e {
                    ApiError::NotFound(_) => "There is nothing here (or it is not yours).".to_string(),
                    ApiError::Validation(items) => {
                        items.iter().map(|i| i.msg.clone()).collect::<Vec<_>>().join("; ")
                    }
                    ApiError::Internal(cause) => {
                        tracing::error!(error = %cause, "internal error answering a portal request");
                        "Something went wrong on our side (it was logged).".into()
                    }
                    ApiError::Unavailable(cause) => {
                        tracing::warn!(error = %cause, "a dependency is unavailable (portal)");
                        "A service this page needs is unavailable: retry in a moment.".into()
                    }
                    ApiError::RateLimited { wait, .. } => {
                        format!("Slow down: retry in {} s.", wait.as_secs().max(1))
                    }
                    ApiError::TooLarge(limit) => format!("The form is larger than {limit} bytes."),
                    ApiError::BadRequest(d)
                    | ApiError::Unauthorized(d)
                    | ApiError::Forbidden(d)
                    | ApiError::OverLimit(d)
                    | ApiError::Conflict(d) => d,
                };
                let title = match status {
                    StatusCode::NOT_FOUND => "Not found",
                    StatusCode::CONFLICT => "Cannot do that now",
                    StatusCode::UNPROCESSABLE_ENTITY => "Invalid input",
                    StatusCode::SERVICE_UNAVAILABLE => "Unavailable",
                    StatusCode::FORBIDDEN => "Forbidden",
                    _ if status.is_server_error() => "Error",
                    _ => "Request refused",
                };
                (status, title, detail)
            }
        };
        document::error_page(status, title, &detail)
    }
}
