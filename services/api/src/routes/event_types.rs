//! The event-type catalogue: installation-wide (like a Svix organisation's). Every key may read
//! it; only operators change it (it is every tenant's).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hookstream_store::event_types::{self, EventType, EventTypeFields};

use super::Errors;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::models::{
    EventTypeDeleteParams, EventTypeIn, EventTypeListParams, EventTypeOut, EventTypePatch, EventTypeUpdate,
    ListResponse, Ordering,
};
use crate::page::PageReq;
use crate::AppState;

fn out(t: EventType, with_content: bool) -> EventTypeOut {
    EventTypeOut {
        name: t.name,
        description: t.description,
        archived: t.archived,
        deprecated: t.deprecated,
        schemas: if with_content { t.schemas } else { None },
        feature_flag: t.feature_flag,
        group_name: t.group_name,
        created_at: t.created_at,
        updated_at: t.updated_at,
    }
}

fn check_name(name: &str) -> ApiResult<()> {
    if event_types::valid_name(name) {
        Ok(())
    } else {
        Err(ApiError::body(
            "name",
            "must be dot-separated words of letters, digits, '_' and '-' (at most 200 characters)",
        ))
    }
}

fn check_fields(f: &EventTypeFields) -> ApiResult<()> {
    if f.description.len() > 10_000 {
        return Err(ApiError::body("description", "must be at most 10000 bytes"));
    }
    if let Some(s) = &f.schemas {
        let versions = s.as_object().ok_or_else(|| {
            ApiError::body("schemas", "must be an object of versions (\"1\": a JSON schema)")
        })?;
        if versions.values().any(|v| !v.is_object()) {
            return Err(ApiError::body(
                "schemas",
                "each version must be a JSON schema (an object)",
            ));
        }
    }
    for (field, v) in [("featureFlag", &f.feature_flag), ("groupName", &f.group_name)] {
        if v.as_ref().is_some_and(|v| v.is_empty() || v.len() > 256) {
            return Err(ApiError::body(field, "must be 1 to 256 characters"));
        }
    }
    Ok(())
}

fn fields_of(u: EventTypeUpdate) -> EventTypeFields {
    EventTypeFields {
        description: u.description,
        schemas: u.schemas,
        archived: u.archived.unwrap_or(false),
        deprecated: u.deprecated.unwrap_or(false),
        feature_flag: u.feature_flag,
        group_name: u.group_name,
    }
}

/// List event types
#[utoipa::path(get, path = "/api/v1/event-type", operation_id = "v1.event-type.list", tag = "Event Type",
    params(EventTypeListParams),
    responses((status = 200, body = ListResponse<EventTypeOut>), Errors))]
pub async fn list(
    State(state): State<AppState>,
    _who: Principal,
    Query(p): Query<EventTypeListParams>,
) -> ApiResult<axum::Json<ListResponse<EventTypeOut>>> {
    let req = PageReq::new(p.limit, p.iterator)?;
    let descending = req.descending(p.order == Some(Ordering::Descending));
    let with_content = p.with_content.unwrap_or(true);
    let rows = event_types::list(
        &state.pool,
        req.cursor.as_deref(),
        descending,
        p.include_archived.unwrap_or(false),
        req.fetch(),
    )
    .await?;
    Ok(axum::Json(req.finish(
        rows.into_iter().map(|t| out(t, with_content)).collect(),
        |t| t.name.clone(),
    )))
}

/// Create an event type
#[utoipa::path(post, path = "/api/v1/event-type", operation_id = "v1.event-type.create", tag = "Event Type",
    request_body = EventTypeIn,
    responses((status = 201, body = EventTypeOut), Errors))]
pub async fn create(
    State(state): State<AppState>,
    who: Principal,
    Json(input): Json<EventTypeIn>,
) -> ApiResult<impl IntoResponse> {
    who.require_operator("change the event-type catalogue")?;
    check_name(&input.name)?;
    let f = fields_of(EventTypeUpdate {
        description: input.description,
        archived: input.archived,
        deprecated: input.deprecated,
        schemas: input.schemas,
        feature_flag: input.feature_flag,
        group_name: input.group_name,
    });
    check_fields(&f)?;
    let t = event_types::create(&state.pool, &input.name, &f).await?;
    Ok((StatusCode::CREATED, axum::Json(out(t, true))))
}

/// Get an event type
#[utoipa::path(get, path = "/api/v1/event-type/{event_type_name}", operation_id = "v1.event-type.get", tag = "Event Type",
    params(("event_type_name" = String, Path)),
    responses((status = 200, body = EventTypeOut), Errors))]
pub async fn get(
    State(state): State<AppState>,
    _who: Principal,
    Path(name): Path<String>,
) -> ApiResult<axum::Json<EventTypeOut>> {
    let t = event_types::get(&state.pool, &name)
        .await?
        .ok_or_else(|| ApiError::not_found("event type"))?;
    Ok(axum::Json(out(t, true)))
}

/// Update an event type
///
/// Creates it (201) when missing.
#[utoipa::path(put, path = "/api/v1/event-type/{event_type_name}", operation_id = "v1.event-type.update", tag = "Event Type",
    params(("event_type_name" = String, Path)),
    request_body = EventTypeUpdate,
    responses((status = 200, body = EventTypeOut), (status = 201, body = EventTypeOut), Errors))]
pub async fn update(
    State(state): State<AppState>,
    who: Principal,
    Path(name): Path<String>,
    Json(input): Json<EventTypeUpdate>,
) -> ApiResult<impl IntoResponse> {
    who.require_operator("change the event-type catalogue")?;
    check_name(&name)
        .map_err(|_| ApiError::field(&["path", "event_type_name"], "not a valid event type name"))?;
    let f = fields_of(input);
    check_fields(&f)?;
    let (t, created) = event_types::upsert(&state.pool, &name, &f).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(out(t, true))))
}

/// Patch an event type
#[utoipa::path(patch, path = "/api/v1/event-type/{event_type_name}", operation_id = "v1.event-type.patch", tag = "Event Type",
    params(("event_type_name" = String, Path)),
    request_body = EventTypePatch,
    responses((status = 200, body = EventTypeOut), Errors))]
pub async fn patch(
    State(state): State<AppState>,
    who: Principal,
    Path(name): Path<String>,
    Json(p): Json<EventTypePatch>,
) -> ApiResult<axum::Json<EventTypeOut>> {
    who.require_operator("change the event-type catalogue")?;
    let current = event_types::get(&state.pool, &name)
        .await?
        .ok_or_else(|| ApiError::not_found("event type"))?;
    let f = EventTypeFields {
        description: p.description.unwrap_or(current.description),
        schemas: p.schemas.unwrap_or(current.schemas),
        archived: p.archived.unwrap_or(current.archived),
        deprecated: p.deprecated.unwrap_or(current.deprecated),
        feature_flag: p.feature_flag.unwrap_or(current.feature_flag),
        group_name: p.group_name.unwrap_or(current.group_name),
    };
    check_fields(&f)?;
    Ok(axum::Json(out(
        event_types::update(&state.pool, &name, &f).await?,
        true,
    )))
}

/// Archive (or, with `expunge=true`, delete) an event type
#[utoipa::path(delete, path = "/api/v1/event-type/{event_type_name}", operation_id = "v1.event-type.delete", tag = "Event Type",
    params(("event_type_name" = String, Path), EventTypeDeleteParams),
    responses((status = 204), Errors))]
pub async fn delete(
    State(state): State<AppState>,
    who: Principal,
    Path(name): Path<String>,
    Query(p): Query<EventTypeDeleteParams>,
) -> ApiResult<StatusCode> {
    who.require_operator("change the event-type catalogue")?;
    event_types::remove(&state.pool, &name, p.expunge.unwrap_or(false)).await?;
    Ok(StatusCode::NO_CONTENT)
}
