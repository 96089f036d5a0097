//! Operational webhooks (Svix's `/operational-webhook/endpoint`): endpoints that receive
//! `endpoint.*` and `message.attempt.*` events. They are endpoints of the operational tenant
//! (`hookstream_store::operational`, migration 0019), delivered by the same dispatchers; an
//! operator's get every tenant's events, a tenant's only its own (and only that tenant sees
//! and changes them). Triggers write the events; this module only manages the endpoints.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hookstream_store::endpoint_admin::{self, EndpointFields, EndpointRef, ManagedEndpoint};
use hookstream_store::endpoint_headers::EndpointHeaders;
use hookstream_store::operational::{self, OPERATIONAL_TENANT};
use hookstream_store::EventFilter;
use uuid::Uuid;

use super::endpoints::{parse_secret, rotate, secret_of, stored};
use super::{check_uid, metadata_json, metadata_of, Errors};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::models::{
    EndpointHeadersIn, EndpointHeadersOut, EndpointSecretOut, EndpointSecretRotateIn, ListParams,
    ListResponse, OperationalWebhookEndpointIn, OperationalWebhookEndpointOut, Ordering,
};
use crate::page::PageReq;
use crate::AppState;

/// Operational endpoints one scope (a tenant, or the operators) may have.
pub const MAX_PER_SCOPE: i64 = operational::MAX_ENDPOINTS_PER_SCOPE;

fn out(e: ManagedEndpoint) -> OperationalWebhookEndpointOut {
    OperationalWebhookEndpointOut {
        id: e.id.to_string(),
        url: e.url,
        description: e.description,
        throttle_rate: e.rate_limit_per_s.map(|r| r.clamp(0, i32::from(u16::MAX)) as u16),
        uid: e.uid,
        disabled: !e.enabled,
        event_types: (!e.event_types.is_empty()).then_some(e.event_types),
        metadata: metadata_of(&e.metadata),
        created_at: e.created_at,
        updated_at: e.updated_at,
    }
}

/// The channel `who`'s operational endpoints listen on (none for an operator: every tenant).
fn channels_of(who: &Principal) -> Vec<String> {
    who.scope().map(operational::channel_of).into_iter().collect()
}

/// One of the operational endpoints `who` may see.
async fn find(state: &AppState, who: &Principal, endpoint_id: &str) -> ApiResult<Option<ManagedEndpoint>> {
    Ok(
        endpoint_admin::find(&state.pool, OPERATIONAL_TENANT, &EndpointRef::parse(endpoint_id))
            .await?
            .filter(|e| operational::visible_to(&e.channels, who.scope())),
    )
}

async fn endpoint(state: &AppState, who: &Principal, endpoint_id: &str) -> ApiResult<ManagedEndpoint> {
    find(state, who, endpoint_id)
        .await?
        .ok_or_else(|| ApiError::not_found("operational webhook endpoint"))
}

/// Only operational event types (or patterns over them).
fn check_event_types(types: &[String]) -> ApiResult<()> {
    EventFilter::new(types).map_err(|e| ApiError::body("eventTypes", e))?;
    let unknown = operational::not_operational(types);
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(ApiError::body(
            "eventTypes",
            format!(
                "{unknown:?} are not operational events (one of {:?})",
                operational::EVENT_TYPES
            ),
        ))
    }
}

fn fields(
    who: &Principal,
    input: OperationalWebhookEndpointIn,
) -> ApiResult<(EndpointFields, Option<hookstream_signing::Secret>)> {
    if let Some(uid) = &input.uid {
        check_uid(uid, "uid")?;
    }
    if input.throttle_rate == Some(0) {
        return Err(ApiError::body("throttleRate", "must be at least 1"));
    }
    let event_types = input.event_types.unwrap_or_default();
    check_event_types(&event_types)?;
    let headers = input
        .headers
        .map(|h| EndpointHeaders::new(h, &[]))
        .transpose()
        .map_err(super::endpoint_headers::refused)?;
    let secret = input
        .secret
        .as_deref()
        .map(|s| parse_secret(s, "secret"))
        .transpose()?;
    Ok((
        EndpointFields {
            url: input.url,
            description: input.description.unwrap_or_default(),
            event_types,
            disabled: input.disabled.unwrap_or(false),
            rate_limit_per_s: input.throttle_rate.map(i32::from),
            uid: input.uid,
            metadata: metadata_json(input.metadata),
            channels: channels_of(who),
            headers,
            ..Default::default()
        },
        secret,
    ))
}

/// Creates it, within its scope's limit (`f.channels` is the scope).
async fn create_in_scope(
    state: &AppState,
    f: &EndpointFields,
    secret: Option<hookstream_signing::Secret>,
) -> ApiResult<ManagedEndpoint> {
    if operational::count_on(&state.pool, &f.channels).await? >= MAX_PER_SCOPE {
        return Err(ApiError::OverLimit(format!(
            "at most {MAX_PER_SCOPE} operational webhook endpoints per tenant (and for the operators)"
        )));
    }
    let (ep, _) = endpoint_admin::create(
        &state.pool,
        &state.sealer,
        &state.policy,
        OPERATIONAL_TENANT,
        f,
        secret,
    )
    .await
    .map_err(stored)?;
    Ok(ep)
}

/// List operational webhook endpoints
///
/// The key's tenant's (an operator's key: every one, the tenants' included).
#[utoipa::path(get, path = "/api/v1/operational-webhook/endpoint", operation_id = "v1.operational-webhook.endpoint.list", tag = "Webhook Endpoint",
    params(ListParams),
    responses((status = 200, body = ListResponse<OperationalWebhookEndpointOut>), Errors))]
pub async fn list(
    State(state): State<AppState>,
    who: Principal,
    Query(p): Query<ListParams>,
) -> ApiResult<axum::Json<ListResponse<OperationalWebhookEndpointOut>>> {
    let req = PageReq::new(p.limit, p.iterator)?;
    let cursor = req.cursor_as(|c| Uuid::parse_str(c).ok())?;
    let descending = req.descending(p.order == Some(Ordering::Descending));
    let channel = channels_of(&who).pop();
    let rows = endpoint_admin::list_on(
        &state.pool,
        OPERATIONAL_TENANT,
        channel.as_deref(),
        cursor,
        descending,
        req.fetch(),
    )
    .await?;
    Ok(axum::Json(
        req.finish(rows.into_iter().map(out).collect(), |e| e.id.clone()),
    ))
}

/// Create an operational webhook endpoint
///
/// Checked against the SSRF rules like any endpoint; signed with its own secret.
#[utoipa::path(post, path = "/api/v1/operational-webhook/endpoint", operation_id = "v1.operational-webhook.endpoint.create", tag = "Webhook Endpoint",
    request_body = OperationalWebhookEndpointIn,
    responses((status = 201, body = OperationalWebhookEndpointOut), Errors))]
pub async fn create(
    State(state): State<AppState>,
    who: Principal,
    Json(input): Json<OperationalWebhookEndpointIn>,
) -> ApiResult<impl IntoResponse> {
    let (f, secret) = fields(&who, input)?;
    let ep = create_in_scope(&state, &f, secret).await?;
    Ok((StatusCode::CREATED, axum::Json(out(ep))))
}

/// Get an operational webhook endpoint
#[utoipa::path(get, path = "/api/v1/operational-webhook/endpoint/{endpoint_id}", operation_id = "v1.operational-webhook.endpoint.get", tag = "Webhook Endpoint",
    params(("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 200, body = OperationalWebhookEndpointOut), Errors))]
pub async fn get(
    State(state): State<AppState>,
    who: Principal,
    Path(endpoint_id): Path<String>,
) -> ApiResult<axum::Json<OperationalWebhookEndpointOut>> {
    Ok(axum::Json(out(endpoint(&state, &who, &endpoint_id).await?)))
}

/// Update (or create, for an unknown uid) an operational webhook endpoint
#[utoipa::path(put, path = "/api/v1/operational-webhook/endpoint/{endpoint_id}", operation_id = "v1.operational-webhook.endpoint.update", tag = "Webhook Endpoint",
    params(("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    request_body = OperationalWebhookEndpointIn,
    responses((status = 200, body = OperationalWebhookEndpointOut), (status = 201, body = OperationalWebhookEndpointOut), Errors))]
pub async fn update(
    State(state): State<AppState>,
    who: Principal,
    Path(endpoint_id): Path<String>,
    Json(input): Json<OperationalWebhookEndpointIn>,
) -> ApiResult<impl IntoResponse> {
    if input.secret.is_some() {
        return Err(ApiError::body(
            "secret",
            "an update does not change the secret: use secret/rotate",
        ));
    }
    let (mut f, _) = fields(&who, input)?;
    match find(&state, &who, &endpoint_id).await? {
        Some(ep) => {
            // Headers are changed through their own route; the scope stays whoever's it was.
            f.headers = None;
            f.channels = ep.channels.clone();
            let ep = endpoint_admin::update(
                &state.pool,
                &state.sealer,
                &state.policy,
                OPERATIONAL_TENANT,
                ep.id,
                &f,
            )
            .await
            .map_err(stored)?;
            Ok((StatusCode::OK, axum::Json(out(ep))))
        }
        None if Uuid::parse_str(&endpoint_id).is_err() => {
            check_uid(&endpoint_id, "uid")?;
            f.uid = Some(endpoint_id);
            let ep = create_in_scope(&state, &f, None).await?;
            Ok((StatusCode::CREATED, axum::Json(out(ep))))
        }
        None => Err(ApiError::not_found("operational webhook endpoint")),
    }
}

/// Delete an operational webhook endpoint
#[utoipa::path(delete, path = "/api/v1/operational-webhook/endpoint/{endpoint_id}", operation_id = "v1.operational-webhook.endpoint.delete", tag = "Webhook Endpoint",
    params(("endpoint_id" = String, Path)),
    responses((status = 204), Errors))]
pub async fn delete(
    State(state): State<AppState>,
    who: Principal,
    Path(endpoint_id): Path<String>,
) -> ApiResult<StatusCode> {
    let ep = endpoint(&state, &who, &endpoint_id).await?;
    endpoint_admin::delete(&state.pool, OPERATIONAL_TENANT, ep.id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Get an operational webhook endpoint's signing secret
#[utoipa::path(get, path = "/api/v1/operational-webhook/endpoint/{endpoint_id}/secret", operation_id = "v1.operational-webhook.endpoint.get-secret", tag = "Webhook Endpoint",
    params(("endpoint_id" = String, Path)),
    responses((status = 200, body = EndpointSecretOut), Errors))]
pub async fn get_secret(
    State(state): State<AppState>,
    who: Principal,
    Path(endpoint_id): Path<String>,
) -> ApiResult<axum::Json<EndpointSecretOut>> {
    let ep = endpoint(&state, &who, &endpoint_id).await?;
    secret_of(&state, &who, &ep).await
}

/// Rotate an operational webhook endpoint's signing secret
#[utoipa::path(post, path = "/api/v1/operational-webhook/endpoint/{endpoint_id}/secret/rotate", operation_id = "v1.operational-webhook.endpoint.rotate-secret", tag = "Webhook Endpoint",
    params(("endpoint_id" = String, Path)),
    request_body = EndpointSecretRotateIn,
    responses((status = 200, body = EndpointSecretOut), Errors))]
pub async fn rotate_secret(
    State(state): State<AppState>,
    who: Principal,
    Path(endpoint_id): Path<String>,
    Json(input): Json<EndpointSecretRotateIn>,
) -> ApiResult<axum::Json<EndpointSecretOut>> {
    let ep = endpoint(&state, &who, &endpoint_id).await?;
    rotate(&state, &ep, input).await
}

/// Get an operational webhook endpoint's custom headers
#[utoipa::path(get, path = "/api/v1/operational-webhook/endpoint/{endpoint_id}/headers", operation_id = "v1.operational-webhook.endpoint.get-headers", tag = "Webhook Endpoint",
    params(("endpoint_id" = String, Path)),
    responses((status = 200, body = EndpointHeadersOut), Errors))]
pub async fn get_headers(
    State(state): State<AppState>,
    who: Principal,
    Path(endpoint_id): Path<String>,
) -> ApiResult<axum::Json<EndpointHeadersOut>> {
    let ep = endpoint(&state, &who, &endpoint_id).await?;
    super::endpoint_headers::headers_of(&state, ep.id).await
}

/// Replace an operational webhook endpoint's custom headers
#[utoipa::path(put, path = "/api/v1/operational-webhook/endpoint/{endpoint_id}/headers", operation_id = "v1.operational-webhook.endpoint.update-headers", tag = "Webhook Endpoint",
    params(("endpoint_id" = String, Path)),
    request_body = EndpointHeadersIn,
    responses((status = 204), Errors))]
pub async fn update_headers(
    State(state): State<AppState>,
    who: Principal,
    Path(endpoint_id): Path<String>,
    Json(input): Json<EndpointHeadersIn>,
) -> ApiResult<StatusCode> {
    let ep = endpoint(&state, &who, &endpoint_id).await?;
    super::endpoint_headers::replace_headers(&state, ep.id, input).await
}
