//! An endpoint's custom headers (Svix's `…/endpoint/{id}/headers`): read (sensitive values
//! never shown), replaced, patched. The rules (reserved names, what is sensitive, limits) are
//! `hookstream_store::endpoint_headers`'s; headers are sealed at rest and only the dispatcher
//! opens them to deliver.

use axum::extract::State;
use axum::http::StatusCode;
use hookstream_store::endpoint_headers::{self, EndpointHeaders, HeaderError};

use super::{endpoint_of, tenant_of, Errors};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path};
use crate::models::{EndpointHeadersIn, EndpointHeadersOut, EndpointHeadersPatchIn};
use crate::AppState;

/// A refused header as a 422 naming it (`["body", "headers", name]`).
pub(crate) fn refused(e: HeaderError) -> ApiError {
    if e.name.is_empty() {
        ApiError::body("headers", e.reason)
    } else {
        ApiError::field(&["body", "headers", &e.name], e.to_string())
    }
}

fn shown(h: &EndpointHeaders) -> EndpointHeadersOut {
    let (headers, sensitive) = h.shown();
    EndpointHeadersOut { headers, sensitive }
}

/// Get the endpoint's custom headers
///
/// The values of headers that are not sensitive, and the names of those that are (their
/// values are never returned).
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers", operation_id = "v1.endpoint.get-headers", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path)),
    responses((status = 200, body = EndpointHeadersOut), Errors))]
pub async fn get_headers(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
) -> ApiResult<axum::Json<EndpointHeadersOut>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    headers_of(&state, ep.id).await
}

/// An endpoint's headers as shown (also an operational-webhook endpoint's).
pub(crate) async fn headers_of(
    state: &AppState,
    endpoint: uuid::Uuid,
) -> ApiResult<axum::Json<EndpointHeadersOut>> {
    let mut conn = state
        .pool
        .acquire()
        .await
        .map_err(hookstream_store::StoreError::from)?;
    let headers = endpoint_headers::get(&mut conn, &state.sealer, endpoint).await?;
    Ok(axum::Json(shown(&headers)))
}

/// Set the endpoint's custom headers
///
/// Replaces every header. Reserved names (`webhook-*`, `content-type`, `host`, hop-by-hop
/// headers, …) are refused with a 422 naming them; credentials are kept sensitive.
#[utoipa::path(put, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers", operation_id = "v1.endpoint.update-headers", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path)),
    request_body = EndpointHeadersIn,
    responses((status = 204), Errors))]
pub async fn update_headers(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Json(input): Json<EndpointHeadersIn>,
) -> ApiResult<StatusCode> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    replace_headers(&state, ep.id, input).await
}

/// Replaces an endpoint's headers (also an operational-webhook endpoint's).
pub(crate) async fn replace_headers(
    state: &AppState,
    endpoint: uuid::Uuid,
    input: EndpointHeadersIn,
) -> ApiResult<StatusCode> {
    let next = EndpointHeaders::new(input.headers, &input.sensitive).map_err(refused)?;
    endpoint_headers::update(&state.pool, &state.sealer, endpoint, |_| Ok(next))
        .await?
        .map_err(refused)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Patch the endpoint's custom headers
///
/// Sets the headers given a value, removes those given null and those in `deleteHeaders`;
/// the others stay (a sensitive one stays sensitive).
#[utoipa::path(patch, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers", operation_id = "v1.endpoint.patch-headers", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path)),
    request_body = EndpointHeadersPatchIn,
    responses((status = 204), Errors))]
pub async fn patch_headers(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Json(input): Json<EndpointHeadersPatchIn>,
) -> ApiResult<StatusCode> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    endpoint_headers::update(&state.pool, &state.sealer, ep.id, |now| {
        now.patched(input.headers, &input.delete_headers, &input.sensitive)
    })
    .await?
    .map_err(refused)?;
    Ok(StatusCode::NO_CONTENT)
}
