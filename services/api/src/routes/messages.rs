//! Messages: events enqueued through `hookstream.enqueue` (the API is one more producer), read
//! back from the message store.

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use hookstream_routing::channels;
use hookstream_store::applications::{self, AppRef};
use hookstream_store::event_types;
use hookstream_store::messages::{self, ListFilter, Message, NewMessage};
use hookstream_store::{background_tasks, payload_keys};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::{check_catalogue, check_uid, refuse_set, tenant_of, Errors};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::models::{
    BackgroundTaskOut, ListResponse, MessageIn, MessageListParams, MessageOut, WithContentParams,
};
use crate::page::PageReq;
use crate::AppState;

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_string())
        .unwrap_or_else(|_| RawValue::from_string("{}".into()).expect("{} is JSON"))
}

pub(crate) fn out(m: &Message, with_content: bool) -> MessageOut {
    let at: DateTime<Utc> = messages::v7_time(m.event_id).unwrap_or(m.created_at);
    MessageOut {
        id: m.event_id.to_string(),
        event_type: m.event_type.clone(),
        payload: raw(if with_content { &m.payload } else { "{}" }),
        event_id: m
            .idempotency_key
            .clone()
            .filter(|k| !k.starts_with(REQUEST_KEY_PREFIX)),
        channels: (!m.channels.is_empty()).then(|| m.channels.clone()),
        tags: (!m.tags.is_empty()).then(|| m.tags.clone()),
        deliver_at: m.deliver_at,
        timestamp: at,
        aggregate_type: m.aggregate_type.clone(),
        aggregate_id: m.aggregate_id.clone(),
    }
}

/// Idempotency keys made from an `idempotency-key` header (no `eventId`): they cannot clash
/// with an `eventId`, which has no `:`.
const REQUEST_KEY_PREFIX: &str = "api-request:";

fn check_event_id(id: &str) -> ApiResult<()> {
    let ok = (1..=255).contains(&id.len())
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::body(
            "eventId",
            "must be 1 to 255 letters, digits, '-', '_' or '.'",
        ))
    }
}

/// Create a message
///
/// Enqueues the event (answered once it committed) for every endpoint of the application
/// whose filter matches. `eventId` is the idempotency key: another message with it is a 409,
/// a retry of the same request (same `idempotency-key` header) gets the first answer.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/msg", operation_id = "v1.message.create", tag = "Message",
    params(("app_id" = String, Path, description = "The application's id or uid"), WithContentParams,
           ("idempotency-key" = Option<String>, Header, description = "Makes a retried request safe")),
    request_body = MessageIn,
    responses((status = 202, body = MessageOut), Errors))]
pub async fn create(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
    Query(p): Query<WithContentParams>,
    headers: HeaderMap,
    Json(input): Json<MessageIn>,
) -> ApiResult<impl IntoResponse> {
    let tenant = match state
        .apps
        .resolve(&state.pool, &AppRef::parse(&app_id), who.scope())
        .await?
    {
        Some(t) => t,
        None => create_app_for(&state, &who, &app_id, input.application.clone()).await?,
    };
    let channels = channels::check_channels(input.channels.as_deref().unwrap_or_default())
        .map_err(|m| ApiError::body("channels", m))?;
    let tags = channels::check_tags(input.tags.as_deref().unwrap_or_default())
        .map_err(|m| ApiError::body("tags", m))?;
    let deliver_at = match input.deliver_at {
        Some(at) if at > Utc::now() + state.cfg.max_deliver_at_ahead() => {
            return Err(ApiError::body(
                "deliverAt",
                format!(
                    "must be at most {} s ahead (limit api.max_deliver_at_ahead_s)",
                    state.cfg.max_deliver_at_ahead_s
                ),
            ))
        }
        // A time already past delivers at once, as a message without one.
        Some(at) if at > Utc::now() => Some(at),
        _ => None,
    };
    refuse_set(
        &input.payload_retention_hours,
        "payloadRetentionHours",
        "per-message retention",
    )?;
    refuse_set(
        &input.transformations_params,
        "transformationsParams",
        "transformations",
    )?;
    if let Some(days) = input.payload_retention_period {
        if !(1..=90).contains(&days) {
            return Err(ApiError::body("payloadRetentionPeriod", "must be 1 to 90 days"));
        }
    }
    if !event_types::valid_name(&input.event_type) {
        return Err(ApiError::body(
            "eventType",
            "must be dot-separated words of letters, digits, '_' and '-' (at most 200 characters)",
        ));
    }
    check_catalogue(&state, std::slice::from_ref(&input.event_type), "eventType").await?;
    let payload = input.payload.get();
    if !payload.trim_start().starts_with('{') {
        return Err(ApiError::body("payload", "must be a JSON object"));
    }
    if let Some(id) = &input.event_id {
        check_event_id(id)?;
    }
    let request_key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => {
            let v = v
                .to_str()
                .ok()
                .filter(|v| (1..=200).contains(&v.len()))
                .ok_or_else(|| {
                    ApiError::field(
                        &["header", "idempotency-key"],
                        "must be 1 to 200 visible characters",
                    )
                })?;
            Some(v.to_string())
        }
    };
    let idempotency_key = input
        .event_id
        .clone()
        .or_else(|| request_key.as_ref().map(|k| format!("{REQUEST_KEY_PREFIX}{k}")));
    for (field, v) in [
        ("aggregateType", &input.aggregate_type),
        ("aggregateId", &input.aggregate_id),
    ] {
        if v.as_ref().is_some_and(|v| v.len() > 200) {
            return Err(ApiError::body(field, "must be at most 200 characters"));
        }
    }
    let new = NewMessage {
        tenant_id: tenant,
        event_type: input.event_type.clone(),
        payload: payload.to_string(),
        aggregate_type: input.aggregate_type.clone().unwrap_or_default(),
        aggregate_id: input.aggregate_id.clone().unwrap_or_default(),
        idempotency_key: idempotency_key.clone(),
        request_key: request_key.clone(),
        channels: channels.clone(),
        tags: tags.clone(),
        deliver_at,
    };
    let done = state.writer.write(new).await?;
    if !done.created && (request_key.is_none() || done.request_key != request_key) {
        return Err(ApiError::Conflict(format!(
            "a message with eventId {:?} already exists (id {})",
            input.event_id.as_deref().unwrap_or_default(),
            done.id
        )));
    }
    if done.created {
        state.metrics.messages_created.inc();
    }
    let at = messages::v7_time(done.id).unwrap_or_else(Utc::now);
    let with_content = p.with_content.unwrap_or(true);
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(MessageOut {
            id: done.id.to_string(),
            event_type: input.event_type,
            payload: if with_content { input.payload } else { raw("{}") },
            event_id: input.event_id,
            channels: (!channels.is_empty()).then_some(channels),
            tags: (!tags.is_empty()).then_some(tags),
            deliver_at,
            timestamp: at,
            aggregate_type: input.aggregate_type.unwrap_or_default(),
            aggregate_id: input.aggregate_id.unwrap_or_default(),
        }),
    ))
}

/// The application a message create names by uid, created from its `application` field
/// (operators only).
async fn create_app_for(
    state: &AppState,
    who: &Principal,
    app_id: &str,
    application: Option<crate::models::ApplicationIn>,
) -> ApiResult<Uuid> {
    let (Some(mut input), true, Err(_)) = (application, who.is_operator(), Uuid::parse_str(app_id)) else {
        return Err(ApiError::not_found("application"));
    };
    check_uid(app_id, "application.uid")?;
    input.uid = Some(app_id.to_string());
    let f = super::apps::fields(input)?;
    match applications::create(&state.pool, &f).await {
        Ok(app) => Ok(app.id),
        // Created meanwhile by another request.
        Err(hookstream_store::StoreError::Conflict(_)) => {
            applications::resolve(&state.pool, &AppRef::parse(app_id), None)
                .await?
                .ok_or_else(|| ApiError::not_found("application"))
        }
        Err(e) => Err(ApiError::store(e, "application")),
    }
}

/// `event_types` from a query string: repeated, `event_types[]`, or comma-separated.
fn event_types_of(query: Option<&str>) -> Vec<String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == "event_types" || k == "event_types[]")
        .flat_map(|(_, v)| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// List messages
///
/// Newest first. `before` / `after` bound the creation time; `event_types` narrows.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg", operation_id = "v1.message.list", tag = "Message",
    params(("app_id" = String, Path, description = "The application's id or uid"), MessageListParams),
    responses((status = 200, body = ListResponse<MessageOut>), Errors))]
pub async fn list(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
    Query(p): Query<MessageListParams>,
    RawQuery(query): RawQuery,
) -> ApiResult<axum::Json<ListResponse<MessageOut>>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let req = PageReq::new(p.limit, p.iterator)?;
    let cursor = req.cursor_as(|c| Uuid::parse_str(c).ok())?;
    let with_content = p.with_content.unwrap_or(true);
    let filter = ListFilter {
        event_types: event_types_of(query.as_deref()),
        before: p.before,
        after: p.after,
        with_content,
        channel: p.channel,
        tag: p.tag,
    };
    let mut rows = messages::list(
        &state.pool,
        tenant,
        cursor,
        req.descending(true),
        &filter,
        req.fetch(),
    )
    .await?;
    state.payloads.open(&mut rows).await?;
    let data = rows.iter().map(|m| out(m, with_content)).collect();
    Ok(axum::Json(req.finish(data, |m: &MessageOut| m.id.clone())))
}

/// Get a message
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg/{msg_id}", operation_id = "v1.message.get", tag = "Message",
    params(("app_id" = String, Path), ("msg_id" = String, Path, description = "The message's id"), WithContentParams),
    responses((status = 200, body = MessageOut), Errors))]
pub async fn get(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, msg_id)): Path<(String, String)>,
    Query(p): Query<WithContentParams>,
) -> ApiResult<axum::Json<MessageOut>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let with_content = p.with_content.unwrap_or(true);
    let m = message_of(&state, tenant, &msg_id, with_content).await?;
    Ok(axum::Json(out(&m, with_content)))
}

/// One of `tenant`'s messages by id.
pub(crate) async fn message_of(
    state: &AppState,
    tenant: Uuid,
    msg_id: &str,
    with_content: bool,
) -> ApiResult<Message> {
    let id = Uuid::parse_str(msg_id).map_err(|_| ApiError::not_found("message"))?;
    let mut m = messages::get(&state.pool, tenant, id, with_content)
        .await?
        .ok_or_else(|| ApiError::not_found("message"))?;
    state.payloads.open(std::slice::from_mut(&mut m)).await?;
    Ok(m)
}

/// Delete a message's payload
///
/// The stored payload becomes `{}` and the message can no longer be resent or replayed
/// (deliveries already made are not affected). Copies in Kafka stay sealed under the tenant's
/// data key: `expunge-all-contents` (or an erasure by subject) destroys that.
#[utoipa::path(delete, path = "/api/v1/app/{app_id}/msg/{msg_id}/content", operation_id = "v1.message.expunge-content", tag = "Message",
    params(("app_id" = String, Path), ("msg_id" = String, Path)),
    responses((status = 204), Errors))]
pub async fn expunge_content(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, msg_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let m = message_of(&state, tenant, &msg_id, false).await?;
    messages::expunge(&state.pool, tenant, m.event_id).await?;
    payload_keys::record_message_erasure(&state.pool, tenant, m.event_id, &actor(&who)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Who asked, for the erasure audit (`hookstream.erasures`).
pub(crate) fn actor(who: &Principal) -> String {
    match who {
        Principal::Operator { token } => format!("api:operator-token-{token}"),
        Principal::Tenant { key_id, kind, .. } => format!("api:{kind:?}:{key_id}").to_lowercase(),
    }
}

/// Delete all message payloads of an application
///
/// Erases every payload of the application's tenant at once: its data keys are destroyed, so
/// no copy anywhere (Kafka topics, the dead-letter store, the message store) opens again, and
/// none of its messages can be resent or replayed. Answers with a finished background task
/// whose `data.messagesPurged` counts the message-store copies emptied.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/msg/expunge-all-contents", operation_id = "v1.message.expunge-all-contents", tag = "Message",
    params(("app_id" = String, Path)),
    responses((status = 202, body = BackgroundTaskOut), Errors))]
pub async fn expunge_all_contents(
    State(state): State<AppState>,
    who: Principal,
    Path(app_id): Path<String>,
) -> ApiResult<(StatusCode, axum::Json<BackgroundTaskOut>)> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let erased = payload_keys::erase(&state.pool, tenant, None, &actor(&who)).await?;
    state.payloads.keys().forget();
    let task = background_tasks::record_finished(
        &state.pool,
        tenant,
        background_tasks::PURGE_CONTENT,
        erased.messages,
    )
    .await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(super::background_tasks::out(task)),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn event_types_are_read_every_way() {
        assert_eq!(
            super::event_types_of(Some("event_types=a.b&limit=5&event_types[]=c,d&event_types=")),
            ["a.b", "c", "d"]
        );
        assert!(super::event_types_of(None).is_empty());
    }
}
