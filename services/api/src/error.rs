//! Every error the API answers, in Svix's shapes: `{"code", "detail"}` (`HttpErrorOut`) for
//! 400/401/403/404/409/413/429/5xx, and `{"detail": [{"loc", "msg", "type"}]}`
//! (`HTTPValidationError`) for 422, naming the field. Internal errors are logged with their
//! cause and answered with a generic message: nothing internal leaks into a 500.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hookstream_store::StoreError;
use serde::Serialize;
use utoipa::ToSchema;

/// Svix's error body.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HttpErrorOut {
    pub code: String,
    pub detail: String,
}

/// One field's validation error.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ValidationErrorItem {
    /// Where: `["body", "url"]`, `["query", "limit"]`, `["path", "app_id"]`.
    pub loc: Vec<String>,
    pub msg: String,
    #[serde(rename = "type")]
    pub kind: String,
}

/// Svix's 422 body.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = HTTPValidationError)]
pub struct HttpValidationError {
    pub detail: Vec<ValidationErrorItem>,
}

#[derive(Debug)]
pub enum ApiError {
    /// 400: the request cannot be read (malformed JSON, say).
    BadRequest(String),
    /// 401: no credentials, or not valid ones.
    Unauthorized(String),
    /// 403: valid credentials that may not do this.
    Forbidden(String),
    /// 404: no such thing (or not this tenant's: never told apart).
    NotFound(String),
    /// 409: clashes with an existing thing.
    Conflict(String),
    /// 413: the body is larger than the limit.
    TooLarge(usize),
    /// 422: a field's value is refused.
    Validation(Vec<ValidationErrorItem>),
    /// 429: over a rate (`limit` names its config key); retry after `wait`.
    RateLimited { wait: Duration, limit: &'static str },
    /// 429: a tenant limit reached (the message names its config key); retry when something
    /// the tenant holds ends.
    OverLimit(String),
    /// 503: a dependency is down (the database, Kafka); the SDKs retry.
    Unavailable(String),
    /// 500: logged with its cause, answered without it.
    Internal(String),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn field(loc: &[&str], msg: impl Into<String>) -> Self {
        ApiError::Validation(vec![ValidationErrorItem {
            loc: loc.iter().map(|s| s.to_string()).collect(),
            msg: msg.into(),
            kind: "value_error".into(),
        }])
    }

    /// A body field's error.
    pub fn body(field: &str, msg: impl Into<String>) -> Self {
        Self::field(&["body", field], msg)
    }

    /// A feature Svix has and Hookstream does not, asked for in a body field.
    pub fn unsupported(field: &str, what: &str) -> Self {
        Self::body(
            field,
            format!("{what} are not supported by Hookstream (see docs/api.md)"),
        )
    }

    pub fn not_found(what: &str) -> Self {
        ApiError::NotFound(format!("{what} not found"))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Validation(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RateLimited { .. } | ApiError::OverLimit(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Maps a store error, naming `field` when the input was refused.
    pub fn store(e: StoreError, field: &str) -> Self {
        match e {
            StoreError::Invalid(m) => ApiError::body(field, m),
            StoreError::InvalidField { field, message } => ApiError::body(field, message),
            other => other.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => ApiError::NotFound(format!("{what} not found")),
            StoreError::Conflict(m) => ApiError::Conflict(m),
            StoreError::LimitReached(m) => ApiError::OverLimit(m),
            StoreError::Invalid(m) => ApiError::field(&["body"], m),
            StoreError::InvalidField { field, message } => ApiError::body(field, message),
            StoreError::Database(sqlx_error) if is_unavailable(&sqlx_error) => {
                ApiError::Unavailable(format!("the database is unavailable: {sqlx_error}"))
            }
            unanswered @ StoreError::Unanswered(_) => {
                ApiError::Unavailable(format!("the database is unavailable: {unanswered}"))
            }
            // The data exceptions a value from the request causes (NUL in text, a time out of
            // range or malformed, text too long): the caller's input, not a fault of ours, and
            // their messages name no internals. The rest of class 22 (a division by zero, an
            // overflow in an aggregate) stays a 500.
            StoreError::Database(hookstream_store::sqlx::Error::Database(db))
                if db
                    .code()
                    .is_some_and(|c| ["22021", "22P05", "22008", "22007", "22001"].contains(&c.as_ref())) =>
            {
                ApiError::BadRequest(format!("a value in the request cannot be used: {}", db.message()))
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

fn is_unavailable(e: &hookstream_store::sqlx::Error) -> bool {
    use hookstream_store::sqlx::Error;
    matches!(e, Error::PoolTimedOut | Error::PoolClosed | Error::Io(_))
}

impl From<hookstream_replay::ReplayError> for ApiError {
    fn from(e: hookstream_replay::ReplayError) -> Self {
        use hookstream_replay::ReplayError as R;
        match e {
            R::Store(s) => s.into(),
            R::EndpointDisabled { .. } => {
                ApiError::Conflict("the endpoint is disabled: enable it first".into())
            }
            R::RetriesDisabled | R::NoTier | R::TopicMissing(_) => {
                ApiError::Unavailable(format!("resends cannot be delivered: {e}"))
            }
            R::Kafka(_) | R::NotAcknowledged(_) => ApiError::Unavailable(format!("kafka: {e}")),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

fn code(e: &ApiError) -> &'static str {
    match e {
        ApiError::BadRequest(_) => "bad_request",
        ApiError::Unauthorized(_) => "authentication_failed",
        ApiError::Forbidden(_) => "forbidden",
        ApiError::NotFound(_) => "not_found",
        ApiError::Conflict(_) => "conflict",
        ApiError::TooLarge(_) => "payload_too_large",
        ApiError::Validation(_) => "validation",
        ApiError::RateLimited { .. } => "rate_limited",
        ApiError::OverLimit(_) => "limit_reached",
        ApiError::Unavailable(_) => "unavailable",
        ApiError::Internal(_) => "internal",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let code = code(&self).to_string();
        match self {
            ApiError::Validation(detail) => {
                (status, axum::Json(HttpValidationError { detail })).into_response()
            }
            ApiError::RateLimited { wait, limit } => {
                let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
                let mut r = (
                    status,
                    axum::Json(HttpErrorOut {
                        code,
                        detail: format!("rate limit exceeded ({limit}): retry in {secs} s"),
                    }),
                )
                    .into_response();
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                r
            }
            ApiError::Internal(cause) => {
                tracing::error!(error = %cause, "internal error answering a request");
                (
                    status,
                    axum::Json(HttpErrorOut {
                        code,
                        detail: "internal error (logged by the server)".into(),
                    }),
                )
                    .into_response()
            }
            ApiError::Unavailable(cause) => {
                tracing::warn!(error = %cause, "a dependency is unavailable");
                (
                    status,
                    axum::Json(HttpErrorOut {
                        code,
                        detail: "temporarily unavailable, retry".into(),
                    }),
                )
                    .into_response()
            }
            ApiError::TooLarge(limit) => (
                status,
                axum::Json(HttpErrorOut {
                    code,
                    detail: format!("the request body is larger than {limit} bytes"),
                }),
            )
                .into_response(),
            ApiError::BadRequest(d)
            | ApiError::Unauthorized(d)
            | ApiError::Forbidden(d)
            | ApiError::NotFound(d)
            | ApiError::OverLimit(d)
            | ApiError::Conflict(d) => (status, axum::Json(HttpErrorOut { code, detail: d })).into_response(),
        }
    }
}
