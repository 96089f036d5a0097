//! Endpoints of an application: CRUD (with channels, custom headers at creation and the
//! payload-filter extension), the signing secret and its rotation, statistics and example
//! messages. The headers routes are in `endpoint_headers`; replays and recoveries (background
//! tasks) in `background_tasks`.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::Utc;
use hookstream_signing::Secret;
use hookstream_store::endpoint_admin::{self, EndpointFields, EndpointPatch as StorePatch, ManagedEndpoint};
use hookstream_store::endpoint_headers::EndpointHeaders;
use hookstream_store::{attempt_stats, delivery_pages, event_types, messages, StoreError};
use uuid::Uuid;

use super::{check_catalogue, check_uid, endpoint_of, metadata_json, metadata_of, tenant_of, Errors};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::models::{
    EndpointIn, EndpointOut, EndpointPatch, EndpointSecretOut, EndpointSecretRotateIn, EndpointStats,
    EventExampleIn, ListParams, ListResponse, MessageOut, Ordering, StatsParams,
};
use crate::page::PageReq;
use crate::AppState;

pub(crate) fn out(e: ManagedEndpoint) -> EndpointOut {
    EndpointOut {
        id: e.id.to_string(),
        url: e.url,
        description: e.description,
        uid: e.uid,
        metadata: metadata_of(&e.metadata),
        disabled: !e.enabled,
        throttle_rate: e.rate_limit_per_s.map(|r| r.clamp(0, i32::from(u16::MAX)) as u16),
        event_types: (!e.event_types.is_empty()).then_some(e.event_types),
        channels: (!e.channels.is_empty()).then_some(e.channels),
        filter: e.payload_filter,
        created_at: e.created_at,
        updated_at: e.updated_at,
        timeout_ms: e.timeout_ms,
        max_in_flight: e.max_in_flight,
        disabled_reason: e.disabled_reason,
        failing_since: e.failing_since,
    }
}

/// Maps a store refusal to the field it is about.
pub(crate) fn stored(e: StoreError) -> ApiError {
    match e {
        StoreError::Invalid(m) => {
            let field = if m.contains("filter") {
                "eventTypes"
            } else if m.contains("rate limit") {
                "throttleRate"
            } else if m.contains("timeout") {
                "timeoutMs"
            } else if m.contains("concurrency") {
                "maxInFlight"
            } else if m.contains("description") {
                "description"
            } else {
                "url"
            };
            ApiError::body(field, m)
        }
        other => other.into(),
    }
}

/// `whsec_…` or bare base64 (Svix accepts both), as a secret.
pub(crate) fn parse_secret(raw: &str, field: &str) -> ApiResult<Secret> {
    let text = if raw.starts_with("whsec_") {
        raw.to_string()
    } else {
        format!("whsec_{raw}")
    };
    Secret::parse(&text).map_err(|e| ApiError::body(field, format!("not a valid secret: {e}")))
}

pub(crate) async fn fields(
    state: &AppState,
    input: EndpointIn,
) -> ApiResult<(EndpointFields, Option<Secret>)> {
    let headers = input
        .headers
        .map(|h| EndpointHeaders::new(h, &[]))
        .transpose()
        .map_err(super::endpoint_headers::refused)?;
    if let Some(uid) = &input.uid {
        check_uid(uid, "uid")?;
    }
    if input.throttle_rate == Some(0) {
        return Err(ApiError::body("throttleRate", "must be at least 1"));
    }
    let event_types = input.event_types.unwrap_or_default();
    check_catalogue(state, &event_types, "eventTypes").await?;
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
            timeout_ms: input.timeout_ms,
            max_in_flight: input.max_in_flight,
            channels: input.channels.unwrap_or_default(),
            payload_filter: input.filter,
            headers,
        },
        secret,
    ))
}

/// List endpoints
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint", operation_id = "v1.endpoint.list", tag = "Endpoint",
    params(("app_id" = String, Path, description = "The application's id or uid"), ListParams),
    responses((status = 200, body = ListResponse<EndpointOut>), Errors))]
pub async fn list(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
    Query(p): Query<ListParams>,
) -> ApiResult<axum::Json<ListResponse<EndpointOut>>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let req = PageReq::new(p.limit, p.iterator)?;
    let cursor = req.cursor_as(|c| Uuid::parse_str(c).ok())?;
    let descending = req.descending(p.order == Some(Ordering::Descending));
    let rows = endpoint_admin::list(&state.pool, tenant, cursor, descending, req.fetch()).await?;
    Ok(axum::Json(
        req.finish(rows.into_iter().map(out).collect(), |e| e.id.clone()),
    ))
}

/// Create an endpoint
///
/// The URL is checked against the SSRF policy before anything is stored.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint", operation_id = "v1.endpoint.create", tag = "Endpoint",
    params(("app_id" = String, Path, description = "The application's id or uid")),
    request_body = EndpointIn,
    responses((status = 201, body = EndpointOut), Errors))]
pub async fn create(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
    Json(input): Json<EndpointIn>,
) -> ApiResult<impl IntoResponse> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let (f, secret) = fields(&state, input).await?;
    let (ep, _) = endpoint_admin::create(&state.pool, &state.sealer, &state.policy, tenant, &f, secret)
        .await
        .map_err(stored)?;
    Ok((StatusCode::CREATED, axum::Json(out(ep))))
}

/// Get an endpoint
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", operation_id = "v1.endpoint.get", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 200, body = EndpointOut), Errors))]
pub async fn get(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
) -> ApiResult<axum::Json<EndpointOut>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    Ok(axum::Json(out(endpoint_of(&state, tenant, &endpoint_id).await?)))
}

/// Update an endpoint
///
/// Replaces every Svix field; creates the endpoint (201) when the path names a uid that does
/// not exist.
#[utoipa::path(put, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", operation_id = "v1.endpoint.update", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    request_body = EndpointIn,
    responses((status = 200, body = EndpointOut), (status = 201, body = EndpointOut), Errors))]
pub async fn update(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Json(input): Json<EndpointIn>,
) -> ApiResult<impl IntoResponse> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let secret_given = input.secret.is_some();
    let (mut f, secret) = fields(&state, input).await?;
    match endpoint_admin::find(
        &state.pool,
        tenant,
        &endpoint_admin::EndpointRef::parse(&endpoint_id),
    )
    .await?
    {
        Some(ep) => {
            if secret_given {
                return Err(ApiError::body(
                    "secret",
                    "an update does not change the secret: use secret/rotate",
                ));
            }
            let ep = endpoint_admin::update(&state.pool, &state.sealer, &state.policy, tenant, ep.id, &f)
                .await
                .map_err(stored)?;
            Ok((StatusCode::OK, axum::Json(out(ep))))
        }
        None if Uuid::parse_str(&endpoint_id).is_err() => {
            check_uid(&endpoint_id, "uid")?;
            f.uid = Some(endpoint_id);
            let (ep, _) =
                endpoint_admin::create(&state.pool, &state.sealer, &state.policy, tenant, &f, secret)
                    .await
                    .map_err(stored)?;
            Ok((StatusCode::CREATED, axum::Json(out(ep))))
        }
        None => Err(ApiError::not_found("endpoint")),
    }
}

/// Patch an endpoint
#[utoipa::path(patch, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", operation_id = "v1.endpoint.patch", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    request_body = EndpointPatch,
    responses((status = 200, body = EndpointOut), Errors))]
pub async fn patch(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Json(p): Json<EndpointPatch>,
) -> ApiResult<axum::Json<EndpointOut>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    if let Some(Some(uid)) = &p.uid {
        check_uid(uid, "uid")?;
    }
    if let Some(Some(0)) = p.throttle_rate {
        return Err(ApiError::body("throttleRate", "must be at least 1"));
    }
    if let Some(Some(types)) = &p.event_types {
        check_catalogue(&state, types, "eventTypes").await?;
    }
    let patch = StorePatch {
        url: p.url,
        description: p.description,
        event_types: p.event_types.map(Option::unwrap_or_default),
        disabled: p.disabled,
        rate_limit_per_s: p.throttle_rate.map(|r| r.map(i32::from)),
        uid: p.uid,
        metadata: p.metadata.map(Some).map(metadata_json),
        timeout_ms: p.timeout_ms,
        max_in_flight: p.max_in_flight,
        channels: p.channels.map(Option::unwrap_or_default),
        payload_filter: p.filter,
    };
    let ep = endpoint_admin::patch(&state.pool, &state.sealer, &state.policy, tenant, ep.id, &patch)
        .await
        .map_err(stored)?;
    Ok(axum::Json(out(ep)))
}

/// Delete an endpoint
#[utoipa::path(delete, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", operation_id = "v1.endpoint.delete", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 204), Errors))]
pub async fn delete(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    endpoint_admin::delete(&state.pool, tenant, ep.id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Get the endpoint's signing secret
///
/// The newest secret (during a rotation, the new one).
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/secret", operation_id = "v1.endpoint.get-secret", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path)),
    responses((status = 200, body = EndpointSecretOut), Errors))]
pub async fn get_secret(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
) -> ApiResult<axum::Json<EndpointSecretOut>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    secret_of(&state, &who, &ep).await
}

/// An endpoint's current secret (also an operational-webhook endpoint's).
pub(crate) async fn secret_of(
    state: &AppState,
    who: &Principal,
    ep: &ManagedEndpoint,
) -> ApiResult<axum::Json<EndpointSecretOut>> {
    // The secret signs webhooks: whoever holds it can forge them. Read-only access (a
    // read-only key, a read-only portal link) shows everything but it.
    if matches!(who, Principal::Tenant { read_only: true, .. }) {
        return Err(ApiError::Forbidden(
            "a read-only key cannot read signing secrets".into(),
        ));
    }
    let secret = endpoint_admin::current_secret(&state.pool, &state.sealer, ep.id).await?;
    Ok(axum::Json(EndpointSecretOut { key: secret.expose() }))
}

/// Rotate the endpoint's signing secret
///
/// The new secret signs from now on; the current one keeps signing beside it for
/// `gracePeriodSeconds` (every delivery carries both signatures meanwhile).
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/secret/rotate", operation_id = "v1.endpoint.rotate-secret", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path)),
    request_body = EndpointSecretRotateIn,
    responses((status = 200, body = EndpointSecretOut, description = "The new secret (Svix's 1.x document says 204; its SDKs v2 read this body)"), Errors))]
pub async fn rotate_secret(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Json(input): Json<EndpointSecretRotateIn>,
) -> ApiResult<axum::Json<EndpointSecretOut>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    rotate(&state, &ep, input).await
}

/// Rotates an endpoint's secret (also an operational-webhook endpoint's).
pub(crate) async fn rotate(
    state: &AppState,
    ep: &ManagedEndpoint,
    input: EndpointSecretRotateIn,
) -> ApiResult<axum::Json<EndpointSecretOut>> {
    let grace = input.grace_period_seconds.unwrap_or(86_400);
    if grace > 604_800 {
        return Err(ApiError::body(
            "gracePeriodSeconds",
            "must be at most 604800 (7 days)",
        ));
    }
    let secret = match input.key.as_deref() {
        Some(k) => parse_secret(k, "key")?,
        None => Secret::generate(),
    };
    let secret = hookstream_store::endpoints::rotate_secret_to(
        &state.pool,
        &state.sealer,
        ep.id,
        secret,
        Duration::from_secs(u64::from(grace)),
    )
    .await?;
    Ok(axum::Json(EndpointSecretOut { key: secret.expose() }))
}

/// Endpoint statistics
///
/// Messages by the state of their latest attempt in the window (default the last 24 hours),
/// and Hookstream's attempt figures (count, success rate, p50/p95/p99 duration).
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/stats", operation_id = "v1.endpoint.get-stats", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path), StatsParams),
    responses((status = 200, body = EndpointStats), Errors))]
pub async fn stats(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Query(p): Query<StatsParams>,
) -> ApiResult<axum::Json<EndpointStats>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    let since = p
        .since
        .unwrap_or_else(|| Utc::now() - chrono::Duration::hours(24));
    let counts =
        delivery_pages::endpoint_state_counts(&state.pool, tenant, ep.id, Some(since), p.until).await?;
    let latency = attempt_stats::one_endpoint_stats(&state.pool, ep.id, since).await?;
    Ok(axum::Json(EndpointStats {
        success: counts.delivered,
        pending: counts.retrying,
        sending: 0,
        fail: counts.dead_lettered,
        canceled: 0,
        attempts: latency.as_ref().map_or(0, |l| l.attempts),
        success_rate: latency.as_ref().map(|l| l.success_rate),
        p50_ms: latency.as_ref().map(|l| l.p50_ms),
        p95_ms: latency.as_ref().map(|l| l.p95_ms),
        p99_ms: latency.as_ref().map(|l| l.p99_ms),
    }))
}

/// Send an example message
///
/// Sends the event type's example payload (`schemas["1"].examples`) to this endpoint only, as a
/// new message.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/send-example", operation_id = "v1.endpoint.send-example", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path)),
    request_body = EventExampleIn,
    responses((status = 200, body = MessageOut), Errors))]
pub async fn send_example(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Json(input): Json<EventExampleIn>,
) -> ApiResult<axum::Json<MessageOut>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    if !ep.enabled {
        return Err(ApiError::Conflict(
            "the endpoint is disabled: enable it first".into(),
        ));
    }
    let stored = send_example_to(
        &state,
        tenant,
        &ep,
        &input.event_type,
        input.example_index.unwrap_or(0),
    )
    .await?;
    Ok(axum::Json(super::messages::out(&stored, true)))
}

/// Sends the event type's example #`index` (`schemas["1"].examples`) to `ep` only, as a new
/// message (the API's send-example and the portal's test event).
pub(crate) async fn send_example_to(
    state: &AppState,
    tenant: Uuid,
    ep: &ManagedEndpoint,
    event_type: &str,
    index: usize,
) -> ApiResult<messages::Message> {
    let et = event_types::get(&state.pool, event_type)
        .await?
        .ok_or_else(|| ApiError::body("eventType", "not in the event-type catalogue"))?;
    let example = et
        .schemas
        .as_ref()
        .and_then(|s| s.get("1"))
        .and_then(|s| s.get("examples"))
        .and_then(|e| e.get(index))
        .filter(|e| e.is_object())
        .ok_or_else(|| {
            ApiError::body(
                "eventType",
                format!("the event type has no example object #{index} in schemas[\"1\"].examples"),
            )
        })?;
    send_to(state, tenant, ep, &et.name, example.to_string()).await
}

/// Stores a new message of `tenant` and sends it to `ep` only (whatever its filter), through
/// the first retry tier.
pub(crate) async fn send_to(
    state: &AppState,
    tenant: Uuid,
    ep: &ManagedEndpoint,
    event_type: &str,
    payload: String,
) -> ApiResult<messages::Message> {
    if !ep.enabled {
        return Err(ApiError::Conflict(
            "the endpoint is disabled: enable it first".into(),
        ));
    }
    let replayer = state
        .replayer
        .clone()
        .ok_or_else(|| ApiError::Unavailable("retries are disabled: examples cannot be delivered".into()))?;
    let id = Uuid::now_v7();
    let new = messages::NewMessage {
        tenant_id: tenant,
        event_type: event_type.to_string(),
        payload,
        ..Default::default()
    };
    messages::insert(&state.pool, id, &new).await?;
    // The stored text is what is delivered (jsonb's form of the payload).
    let stored = messages::get(&state.pool, tenant, id, true)
        .await?
        .ok_or_else(|| ApiError::Internal("the example message vanished".into()))?;
    // Sealed (and its store copy with it) before it reaches Kafka.
    let event = state.payloads.envelope(&stored).await?;
    replayer.send_event(event, ep.id, None).await?;
    Ok(stored)
}
