//! Health, without credentials: 204 when the database answers.

use axum::extract::State;
use axum::http::StatusCode;

use crate::error::{ApiError, ApiResult};
use crate::AppState;

/// Health
///
/// 204 when the API can reach its database, 503 otherwise.
#[utoipa::path(get, path = "/api/v1/health", operation_id = "v1.health.get", tag = "Health", security(()),
    responses((status = 204), (status = 503, body = crate::error::HttpErrorOut)))]
pub async fn health(State(state): State<AppState>) -> ApiResult<StatusCode> {
    hookstream_store::sqlx::query("SELECT 1")
        .execute(&state.pool)
        .await
        .map_err(|e| ApiError::Unavailable(format!("database: {e}")))?;
    Ok(StatusCode::NO_CONTENT)
}

/// Ping
///
/// 204 while the server runs (no dependency is checked).
#[utoipa::path(get, path = "/api/v1/health/ping", operation_id = "v1.health.ping", tag = "Health", security(()),
    responses((status = 204)))]
pub async fn ping() -> StatusCode {
    StatusCode::NO_CONTENT
}
