//! Applications: Hookstream tenants. Operators create, list and delete them; a tenant key sees
//! (and may rename) only its own.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hookstream_store::applications::{self, AppFields, AppRef, Application};
use hookstream_store::StoreError;

use super::{check_uid, metadata_json, metadata_of, tenant_of, Errors};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::models::{
    AppCreateParams, ApplicationIn, ApplicationOut, ApplicationPatch, ListParams, ListResponse, Ordering,
};
use crate::page::PageReq;
use crate::AppState;

pub(crate) fn out(a: Application) -> ApplicationOut {
    ApplicationOut {
        id: a.id.to_string(),
        name: a.name,
        uid: a.uid,
        metadata: metadata_of(&a.metadata),
        throttle_rate: None,
        created_at: a.created_at,
        updated_at: a.updated_at,
    }
}

pub(crate) fn fields(input: ApplicationIn) -> ApiResult<AppFields> {
    if !matches!(input.throttle_rate, None | Some(serde_json::Value::Null)) {
        return Err(ApiError::unsupported(
            "throttleRate",
            "application-wide rate limits",
        ));
    }
    if let Some(uid) = &input.uid {
        check_uid(uid, "uid")?;
    }
    let name = input.name.trim();
    if name.is_empty() || name.len() > 200 {
        return Err(ApiError::body("name", "must be 1 to 200 characters"));
    }
    Ok(AppFields {
        name: name.to_string(),
        uid: input.uid,
        metadata: metadata_json(input.metadata),
    })
}

/// Only an operator may change an application's uid or name. Both are unique across tenants:
/// a tenant's key could otherwise take a uid that an operator's route creates on first use
/// (`POST /app/{uid}/msg` with `application`, `get_if_exists`, a portal link) and so receive
/// another customer's traffic, and the conflict it meets would tell whether another tenant has
/// that uid or name.
fn check_identity_kept(who: &Principal, current: &applications::Application, f: &AppFields) -> ApiResult<()> {
    if f.uid != current.uid || f.name != current.name {
        who.require_operator("change an application's uid or name")?;
    }
    Ok(())
}

fn stored(e: StoreError) -> ApiError {
    ApiError::store(e, "name")
}

/// List applications
///
/// Operators see every application; a tenant key only its own.
#[utoipa::path(get, path = "/api/v1/app", operation_id = "v1.application.list", tag = "Application",
    params(ListParams),
    responses((status = 200, body = ListResponse<ApplicationOut>), Errors))]
pub async fn list(
    State(state): State<AppState>,
    who: Principal,
    Query(p): Query<ListParams>,
) -> ApiResult<axum::Json<ListResponse<ApplicationOut>>> {
    let req = PageReq::new(p.limit, p.iterator)?;
    let cursor = req.cursor_as(|c| uuid::Uuid::parse_str(c).ok())?;
    let descending = req.descending(p.order == Some(Ordering::Descending));
    let rows = applications::list(&state.pool, who.scope(), cursor, descending, req.fetch()).await?;
    Ok(axum::Json(
        req.finish(rows.into_iter().map(out).collect(), |a| a.id.clone()),
    ))
}

/// Create an application
///
/// With `get_if_exists=true` and a `uid` that exists, answers that application (200).
#[utoipa::path(post, path = "/api/v1/app", operation_id = "v1.application.create", tag = "Application",
    params(AppCreateParams), request_body = ApplicationIn,
    responses((status = 201, body = ApplicationOut), (status = 200, body = ApplicationOut), Errors))]
pub async fn create(
    State(state): State<AppState>,
    who: Principal,
    Query(p): Query<AppCreateParams>,
    Json(input): Json<ApplicationIn>,
) -> ApiResult<impl IntoResponse> {
    who.require_operator("create applications")?;
    let f = fields(input)?;
    if p.get_if_exists == Some(true) {
        if let Some(uid) = &f.uid {
            if let Some(existing) = applications::find(&state.pool, &AppRef::Uid(uid.clone()), None).await? {
                return Ok((StatusCode::OK, axum::Json(out(existing))));
            }
        }
    }
    let app = applications::create(&state.pool, &f).await.map_err(stored)?;
    Ok((StatusCode::CREATED, axum::Json(out(app))))
}

/// Get an application
#[utoipa::path(get, path = "/api/v1/app/{app_id}", operation_id = "v1.application.get", tag = "Application",
    params(("app_id" = String, Path, description = "The application's id or uid")),
    responses((status = 200, body = ApplicationOut), Errors))]
pub async fn get(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
) -> ApiResult<axum::Json<ApplicationOut>> {
    let app = applications::find(&state.pool, &AppRef::parse(&app_id), who.scope())
        .await?
        .ok_or_else(|| ApiError::not_found("application"))?;
    Ok(axum::Json(out(app)))
}

/// Update an application
///
/// Replaces its name and metadata (and its uid, when the body names one). Creates it (201) when the path names a uid that does not exist (operators only). A tenant key may change the metadata only: a new name or uid is refused (403).
#[utoipa::path(put, path = "/api/v1/app/{app_id}", operation_id = "v1.application.update", tag = "Application",
    params(("app_id" = String, Path, description = "The application's id or uid")),
    request_body = ApplicationIn,
    responses((status = 200, body = ApplicationOut), (status = 201, body = ApplicationOut), Errors))]
pub async fn update(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
    Json(input): Json<ApplicationIn>,
) -> ApiResult<impl IntoResponse> {
    let app_ref = AppRef::parse(&app_id);
    let mut f = fields(input)?;
    match applications::find(&state.pool, &app_ref, who.scope()).await? {
        Some(current) => {
            // An update that names no uid keeps the application's.
            if f.uid.is_none() {
                f.uid = current.uid.clone();
            }
            check_identity_kept(&who, &current, &f)?;
            let app = applications::update(&state.pool, current.id, &f)
                .await
                .map_err(stored)?;
            state.apps.forget(current.id);
            Ok((StatusCode::OK, axum::Json(out(app))))
        }
        None => match app_ref {
            AppRef::Uid(uid) if who.is_operator() => {
                check_uid(&uid, "uid")?;
                f.uid = Some(uid);
                let app = applications::create(&state.pool, &f).await.map_err(stored)?;
                Ok((StatusCode::CREATED, axum::Json(out(app))))
            }
            _ => Err(ApiError::not_found("application")),
        },
    }
}

/// Patch an application
#[utoipa::path(patch, path = "/api/v1/app/{app_id}", operation_id = "v1.application.patch", tag = "Application",
    params(("app_id" = String, Path, description = "The application's id or uid")),
    request_body = ApplicationPatch,
    responses((status = 200, body = ApplicationOut), Errors))]
pub async fn patch(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
    Json(p): Json<ApplicationPatch>,
) -> ApiResult<axum::Json<ApplicationOut>> {
    let current = applications::find(&state.pool, &AppRef::parse(&app_id), who.scope())
        .await?
        .ok_or_else(|| ApiError::not_found("application"))?;
    let f = fields(ApplicationIn {
        name: p.name.unwrap_or_else(|| current.name.clone()),
        uid: p.uid.unwrap_or_else(|| current.uid.clone()),
        metadata: Some(p.metadata.unwrap_or_else(|| metadata_of(&current.metadata))),
        throttle_rate: p.throttle_rate,
    })?;
    check_identity_kept(&who, &current, &f)?;
    let app = applications::update(&state.pool, current.id, &f)
        .await
        .map_err(stored)?;
    state.apps.forget(current.id);
    Ok(axum::Json(out(app)))
}

/// Delete an application
///
/// Deletes the tenant with its endpoints and keys (operators only).
#[utoipa::path(delete, path = "/api/v1/app/{app_id}", operation_id = "v1.application.delete", tag = "Application",
    params(("app_id" = String, Path, description = "The application's id or uid")),
    responses((status = 204), Errors))]
pub async fn delete(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
) -> ApiResult<StatusCode> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    who.require_operator("delete applications")?;
    applications::delete(&state.pool, tenant).await?;
    state.apps.forget(tenant);
    Ok(StatusCode::NO_CONTENT)
}
