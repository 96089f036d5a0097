//! Background tasks: starting them (an endpoint's replay-missing, bulk-replay and recover; the
//! dead-letter replay extension and the portal's replay) and reading them back
//! (`/background-task`). Starting only writes the task's row; `crate::background` runs it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::Utc;
use hookstream_store::background_tasks::{self, ListFilter, ParamField, Params, Task};
use uuid::Uuid;

use super::{check_catalogue, endpoint_of, tenant_of, Errors};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::models::{
    BackgroundTaskListParams, BackgroundTaskOut, BackgroundTaskStatus, BackgroundTaskType, BulkReplayIn,
    ListResponse, Ordering, RecoverIn, RecoverOut, ReplayIn,
};
use crate::page::PageReq;
use crate::AppState;

fn task_id(id: Uuid) -> String {
    background_tasks::public_id(id)
}

/// Only the prefixed form: the API's ids are typed.
fn parse_task_id(s: &str) -> Option<Uuid> {
    s.starts_with("qtask_")
        .then(|| background_tasks::parse_public_id(s))
        .flatten()
}

fn status_of(t: &Task) -> BackgroundTaskStatus {
    BackgroundTaskStatus::parse(&t.status).unwrap_or(BackgroundTaskStatus::Failed)
}

fn kind_of(t: &Task) -> BackgroundTaskType {
    BackgroundTaskType::parse(&t.kind).unwrap_or(BackgroundTaskType::EndpointRecover)
}

pub(crate) fn out(t: Task) -> BackgroundTaskOut {
    let mut data = if t.kind == background_tasks::PURGE_CONTENT {
        serde_json::json!({ "messagesPurged": t.sent })
    } else {
        serde_json::json!({ "messagesSent": t.sent, "messagesSkipped": t.skipped })
    };
    if let Some(e) = &t.error {
        data["error"] = e.clone().into();
    }
    BackgroundTaskOut {
        id: task_id(t.id),
        status: status_of(&t),
        task: kind_of(&t),
        data,
        updated_at: t.updated_at,
    }
}

/// Writes a running task for `crate::background` to take up; a 429 naming
/// `api.max_running_tasks_per_tenant` when the tenant already runs that many.
pub(crate) async fn start(
    state: &AppState,
    tenant: Uuid,
    endpoint: Option<Uuid>,
    kind: BackgroundTaskType,
    params: Params,
) -> ApiResult<RecoverOut> {
    if state.replayer.is_none() {
        return Err(ApiError::Unavailable(
            "retries are disabled: replays cannot be delivered".into(),
        ));
    }
    let cap = i64::from(state.cfg.max_running_tasks_per_tenant);
    let task = background_tasks::create(&state.pool, tenant, endpoint, kind.as_str(), &params, cap)
        .await?
        .map_err(|at| {
            ApiError::OverLimit(format!(
                "this application's tenant already has {} background tasks running \
                 (api.max_running_tasks_per_tenant): wait for one to finish",
                at.0
            ))
        })?;
    Ok(RecoverOut {
        id: task_id(task.id),
        status: BackgroundTaskStatus::Running,
        task: kind,
        updated_at: task.updated_at,
    })
}

/// The store's checks of a task's parameters, as a 422 naming Svix's body field.
fn check(params: &Params) -> ApiResult<()> {
    params.check(Utc::now()).map_err(|e| {
        let field = match e.field {
            ParamField::Since => "since",
            ParamField::Until => "until",
            ParamField::EventTypes => "eventTypes",
            ParamField::Channel => "channel",
            ParamField::Tag => "tag",
            ParamField::Status => "status",
            ParamField::StatusCodeClass => "statusCodeClass",
        };
        ApiError::body(field, e.reason)
    })
}

/// Replay missing webhooks
///
/// Sends the endpoint, once each and paced at `api.recover_rate_per_s`, the messages created
/// in the window that it never had an attempt at and that its subscription (event types,
/// channels, payload filter) takes: those sent while it was disabled or before it subscribed.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/replay-missing", operation_id = "v1.endpoint.replay-missing", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path)),
    request_body = ReplayIn,
    responses((status = 202, body = RecoverOut), Errors))]
pub async fn replay_missing(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Json(input): Json<ReplayIn>,
) -> ApiResult<impl IntoResponse> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    let params = Params {
        since: input.since,
        until: input.until,
        ..Params::default()
    };
    check(&params)?;
    if !ep.enabled {
        return Err(ApiError::Conflict(
            "the endpoint is disabled: enable it first".into(),
        ));
    }
    let out = start(
        &state,
        tenant,
        Some(ep.id),
        BackgroundTaskType::EndpointReplay,
        params,
    )
    .await?;
    Ok((StatusCode::ACCEPTED, axum::Json(out)))
}

/// Bulk replay messages
///
/// Sends the endpoint again, paced, the messages created in the window that it had attempts
/// at (delivered or not), optionally only those of the event types, channel or tag given, or
/// whose latest attempt has `status` (0 success, 1 pending, 2 fail) or `statusCodeClass`.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/bulk-replay", operation_id = "v1.endpoint.bulk-replay", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path)),
    request_body = BulkReplayIn,
    responses((status = 202, body = RecoverOut), Errors))]
pub async fn bulk_replay(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Json(input): Json<BulkReplayIn>,
) -> ApiResult<impl IntoResponse> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    if input.status.is_some_and(|s| s > 3) {
        return Err(ApiError::body(
            "status",
            "must be 0 (success), 1 (pending), 2 (fail) or 3 (sending)",
        ));
    }
    let params = Params {
        since: input.since,
        until: input.until,
        event_types: input.event_types.unwrap_or_default(),
        channel: input.channel,
        tag: input.tag,
        // Svix's 3 (sending) is an attempt in flight: Hookstream's pending.
        status: input.status.map(|s| if s == 3 { 1 } else { s }),
        status_code_class: input.status_code_class,
    };
    check(&params)?;
    if !ep.enabled {
        return Err(ApiError::Conflict(
            "the endpoint is disabled: enable it first".into(),
        ));
    }
    check_catalogue(&state, &params.event_types, "eventTypes").await?;
    let out = start(
        &state,
        tenant,
        Some(ep.id),
        BackgroundTaskType::EndpointBulkReplay,
        params,
    )
    .await?;
    Ok((StatusCode::ACCEPTED, axum::Json(out)))
}

/// Recover failed messages
///
/// Replays the endpoint's dead letters since `since` (not yet replayed), in the background, at
/// `api.recover_rate_per_s`, with the same `webhook-id`s.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/recover", operation_id = "v1.endpoint.recover", tag = "Endpoint",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path)),
    request_body = RecoverIn,
    responses((status = 202, body = RecoverOut), Errors))]
pub async fn recover(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Json(input): Json<RecoverIn>,
) -> ApiResult<impl IntoResponse> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    let params = Params {
        since: input.since,
        until: input.until,
        ..Params::default()
    };
    check(&params)?;
    let out = start(
        &state,
        tenant,
        Some(ep.id),
        BackgroundTaskType::EndpointRecover,
        params,
    )
    .await?;
    Ok((StatusCode::ACCEPTED, axum::Json(out)))
}

/// List background tasks
///
/// The tasks of the key's tenant (every tenant's, for an operator key), newest first unless
/// `order=ascending`; ended tasks are kept 90 days.
#[utoipa::path(get, path = "/api/v1/background-task", operation_id = "v1.background-task.list", tag = "Background Task",
    params(BackgroundTaskListParams),
    responses((status = 200, body = ListResponse<BackgroundTaskOut>), Errors))]
pub async fn list(
    State(state): State<AppState>,
    who: Principal,
    Query(p): Query<BackgroundTaskListParams>,
) -> ApiResult<axum::Json<ListResponse<BackgroundTaskOut>>> {
    let req = PageReq::new(p.limit, p.iterator)?;
    let cursor = req.cursor_as(parse_task_id)?;
    let newest_first = !matches!(p.order, Some(Ordering::Ascending));
    let filter = ListFilter {
        scope: who.scope(),
        status: p.status.map(|s| s.as_str().to_string()),
        kind: p.task.map(|t| t.as_str().to_string()),
    };
    let rows = background_tasks::list(
        &state.pool,
        &filter,
        cursor,
        req.descending(newest_first),
        req.fetch(),
    )
    .await?;
    let data = rows.into_iter().map(out).collect();
    Ok(axum::Json(req.finish(data, |t: &BackgroundTaskOut| t.id.clone())))
}

/// Get a background task
#[utoipa::path(get, path = "/api/v1/background-task/{task_id}", operation_id = "v1.background-task.get", tag = "Background Task",
    params(("task_id" = String, Path)),
    responses((status = 200, body = BackgroundTaskOut), Errors))]
pub async fn get(
    State(state): State<AppState>,
    who: Principal,
    Path(task_id): Path<String>,
) -> ApiResult<axum::Json<BackgroundTaskOut>> {
    let id = parse_task_id(&task_id).ok_or_else(|| ApiError::not_found("background task"))?;
    let task = background_tasks::get(&state.pool, id, who.scope())
        .await?
        .ok_or_else(|| ApiError::not_found("background task"))?;
    Ok(axum::Json(out(task)))
}
