//! Hookstream's extensions (not in Svix's API): tenant API keys, and dead letters (list and
//! replay). Keys are made and revoked by operators only.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use hookstream_store::api_keys::{self, ApiKey, KeyKind, NewKey};
use hookstream_store::background_tasks::Params;
use hookstream_store::dead_letters;
use uuid::Uuid;

use super::background_tasks::start;
use super::{endpoint_of, tenant_of, Errors};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::models::{
    ApiKeyCreatedOut, ApiKeyIn, ApiKeyOut, BackgroundTaskType, DeadLetterListParams, DeadLetterOut,
    DeadLetterReplayIn, ListResponse, RecoverOut,
};
use crate::page::PageReq;
use crate::AppState;

fn key_out(k: ApiKey) -> ApiKeyOut {
    ApiKeyOut {
        id: k.id.to_string(),
        app_id: k.tenant_id.to_string(),
        kind: k.kind,
        name: k.name,
        prefix: k.prefix,
        read_only: k.read_only,
        created_at: k.created_at,
        expires_at: k.expires_at,
        last_used_at: k.last_used_at,
        revoked_at: k.revoked_at,
    }
}

/// List an application's API keys (Hookstream)
///
/// Tenant keys, newest first (never the keys themselves). Operators only.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/api-key", operation_id = "hookstream.api-key.list", tag = "Hookstream",
    params(("app_id" = String, Path)),
    responses((status = 200, body = ListResponse<ApiKeyOut>), Errors))]
pub async fn list_keys(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
) -> ApiResult<axum::Json<ListResponse<ApiKeyOut>>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    who.require_operator("manage API keys")?;
    let keys = api_keys::list(&state.pool, Some(tenant), false).await?;
    Ok(axum::Json(ListResponse {
        data: keys.into_iter().map(key_out).collect(),
        iterator: None,
        prev_iterator: None,
        done: true,
    }))
}

/// Create an API key for an application (Hookstream)
///
/// The key sees only this application; it is in the answer once and never again. Operators
/// only.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/api-key", operation_id = "hookstream.api-key.create", tag = "Hookstream",
    params(("app_id" = String, Path)),
    request_body = ApiKeyIn,
    responses((status = 201, body = ApiKeyCreatedOut), Errors))]
pub async fn create_key(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
    Json(input): Json<ApiKeyIn>,
) -> ApiResult<impl IntoResponse> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    who.require_operator("manage API keys")?;
    let (key, token) = api_keys::create(
        &state.pool,
        &NewKey {
            tenant_id: tenant,
            kind: KeyKind::Tenant,
            name: input.name.unwrap_or_default(),
            read_only: input.read_only.unwrap_or(false),
            expires_at: input.expires_at,
            minted_by: None,
        },
    )
    .await
    .map_err(|e| ApiError::store(e, "name"))?;
    Ok((
        StatusCode::CREATED,
        axum::Json(ApiKeyCreatedOut {
            key: key_out(key),
            token,
        }),
    ))
}

/// Revoke an API key (Hookstream)
///
/// Operators only. The key stops working within `api.key_cache_ms` on every API replica (at
/// once on this one).
#[utoipa::path(delete, path = "/api/v1/app/{app_id}/api-key/{key_id}", operation_id = "hookstream.api-key.revoke", tag = "Hookstream",
    params(("app_id" = String, Path), ("key_id" = String, Path)),
    responses((status = 204), Errors))]
pub async fn revoke_key(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, key_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    who.require_operator("manage API keys")?;
    let id = Uuid::parse_str(&key_id).map_err(|_| ApiError::not_found("api key"))?;
    api_keys::revoke(&state.pool, id, Some(tenant)).await?;
    state.auth.forget(id);
    Ok(StatusCode::NO_CONTENT)
}

/// List dead letters (Hookstream)
///
/// The application's deliveries that failed for good, oldest first.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/dead-letter", operation_id = "hookstream.dead-letter.list", tag = "Hookstream",
    params(("app_id" = String, Path), DeadLetterListParams),
    responses((status = 200, body = ListResponse<DeadLetterOut>), Errors))]
pub async fn list_dead_letters(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
    Query(p): Query<DeadLetterListParams>,
) -> ApiResult<axum::Json<ListResponse<DeadLetterOut>>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let req = PageReq::new(p.limit, p.iterator)?;
    if req.backwards {
        return Err(ApiError::field(
            &["query", "iterator"],
            "this list pages forwards only",
        ));
    }
    let after = req.cursor_as(|c| c.parse::<i64>().ok())?.unwrap_or(0);
    let endpoint = match &p.endpoint_id {
        Some(e) => Some(endpoint_of(&state, tenant, e).await?.id),
        None => None,
    };
    let filter = dead_letters::Filter {
        tenant: Some(tenant),
        endpoint,
        since: p.since,
        until: p.until,
        ..Default::default()
    };
    let rows = dead_letters::page_for_replay(&state.pool, &filter, after, req.fetch()).await?;
    let data = rows
        .into_iter()
        .map(|r| {
            let l = r.letter;
            DeadLetterOut {
                id: l.id.to_string(),
                msg_id: l.event_id.map(|e| e.to_string()),
                endpoint_id: l.endpoint_id.map(|e| e.to_string()),
                event_type: l.event_type,
                reason: l.reason,
                error_class: l.error_class,
                last_status: l.last_status,
                attempts: l.attempts,
                dead_at: l.dead_at,
                replayed_at: l.replayed_at,
                replay_count: l.replay_count,
            }
        })
        .collect();
    Ok(axum::Json(req.finish(data, |d: &DeadLetterOut| d.id.clone())))
}

/// Replay dead letters (Hookstream)
///
/// Replays the application's dead letters (of one endpoint, and in a window, when given) not
/// yet replayed, in the background, rate-limited, with the same `webhook-id`s.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/dead-letter/replay", operation_id = "hookstream.dead-letter.replay", tag = "Hookstream",
    params(("app_id" = String, Path)),
    request_body = DeadLetterReplayIn,
    responses((status = 202, body = RecoverOut), Errors))]
pub async fn replay_dead_letters(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
    Json(input): Json<DeadLetterReplayIn>,
) -> ApiResult<impl IntoResponse> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let endpoint = match &input.endpoint_id {
        Some(e) => Some(endpoint_of(&state, tenant, e).await?.id),
        None => None,
    };
    let params = Params {
        since: input.since.unwrap_or(DateTime::<Utc>::UNIX_EPOCH),
        until: input.until,
        ..Params::default()
    };
    let out = start(
        &state,
        tenant,
        endpoint,
        BackgroundTaskType::EndpointRecover,
        params,
    )
    .await?;
    Ok((StatusCode::ACCEPTED, axum::Json(out)))
}
