//! The delivery log: attempts by endpoint and by message, one attempt, the messages an
//! endpoint was sent and the endpoints a message went to (each with its latest state), and a
//! resend of a message to one endpoint.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::StatusCode;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use hookstream_store::attempts::{self, Attempt};
use hookstream_store::delivery_pages::{self, AttemptFilter, AttemptKey};
use hookstream_store::endpoint_admin::{self, ManagedEndpoint};
use hookstream_store::{messages, EventFilter};
use uuid::Uuid;

use super::messages::message_of;
use super::{endpoint_of, tenant_of, Errors};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Path, Query};
use crate::models::{
    AttemptListParams, EndpointMessageOut, ListParams, ListResponse, MessageAttemptOut,
    MessageAttemptTriggerType, MessageEndpointOut, MessageStatus,
};
use crate::page::PageReq;
use crate::AppState;

const ATTEMPT_PREFIX: &str = "atmpt_";

/// An attempt's id: its key (time in µs, message, endpoint, number), base64url.
pub(crate) fn attempt_id(k: &AttemptKey) -> String {
    let mut b = Vec::with_capacity(44);
    b.extend_from_slice(&k.started_at.timestamp_micros().to_be_bytes());
    b.extend_from_slice(k.event_id.as_bytes());
    b.extend_from_slice(k.endpoint_id.as_bytes());
    b.extend_from_slice(&k.attempt.to_be_bytes());
    format!("{ATTEMPT_PREFIX}{}", URL_SAFE_NO_PAD.encode(b))
}

pub(crate) fn parse_attempt_id(s: &str) -> Option<AttemptKey> {
    let b = URL_SAFE_NO_PAD.decode(s.strip_prefix(ATTEMPT_PREFIX)?).ok()?;
    if b.len() != 44 {
        return None;
    }
    Some(AttemptKey {
        started_at: DateTime::from_timestamp_micros(i64::from_be_bytes(b[..8].try_into().ok()?))?,
        event_id: Uuid::from_slice(&b[8..24]).ok()?,
        endpoint_id: Uuid::from_slice(&b[24..40]).ok()?,
        attempt: i32::from_be_bytes(b[40..44].try_into().ok()?),
    })
}

fn status_of(a: &Attempt) -> MessageStatus {
    if a.outcome == "delivered" {
        MessageStatus::Success
    } else {
        MessageStatus::Fail
    }
}

fn out(a: Attempt, urls: &HashMap<Uuid, String>, with_content: bool) -> MessageAttemptOut {
    let status = status_of(&a);
    MessageAttemptOut {
        id: attempt_id(&AttemptKey::of(&a)),
        msg_id: a.event_id.to_string(),
        endpoint_id: a.endpoint_id.to_string(),
        url: urls.get(&a.endpoint_id).cloned().unwrap_or_default(),
        response: if with_content {
            a.response_body
                .as_deref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        } else {
            String::new()
        },
        response_status_code: a.status.unwrap_or(0),
        response_duration_ms: i64::from(a.duration_ms),
        status,
        status_text: status.text(),
        trigger_type: if matches!(a.trigger.as_str(), "resend" | "replay") {
            MessageAttemptTriggerType::Manual
        } else {
            MessageAttemptTriggerType::Scheduled
        },
        timestamp: a.started_at,
        attempt: a.attempt,
        error_class: a.error_class,
        next: a.next.clone(),
        next_attempt: (a.next == "retry").then_some(a.next_due_at).flatten(),
    }
}

async fn urls(
    state: &AppState,
    tenant: Uuid,
    ids: impl Iterator<Item = Uuid>,
) -> ApiResult<HashMap<Uuid, String>> {
    let mut ids: Vec<Uuid> = ids.collect();
    ids.sort();
    ids.dedup();
    Ok(endpoint_admin::find_many(&state.pool, tenant, &ids)
        .await?
        .into_iter()
        .map(|e| (e.id, e.url))
        .collect())
}

/// The attempts a list asks for (None: nothing can match).
fn filter_of(p: &AttemptListParams) -> ApiResult<Option<AttemptFilter>> {
    let delivered = match p.status {
        None => None,
        Some(0) => Some(true),
        Some(2) => Some(false),
        // Pending and sending: an attempt is always finished.
        Some(1 | 3) => return Ok(None),
        Some(_) => return Err(ApiError::field(&["query", "status"], "must be 0, 1, 2 or 3")),
    };
    let status_class = match p.status_code_class {
        None => None,
        Some(0) => Some(0),
        Some(c @ (100 | 200 | 300 | 400 | 500)) => Some(i32::from(c / 100)),
        Some(_) => {
            return Err(ApiError::field(
                &["query", "status_code_class"],
                "must be 0, 100, 200, 300, 400 or 500",
            ))
        }
    };
    Ok(Some(AttemptFilter {
        delivered,
        status_class,
        before: p.before,
        after: p.after,
        tag: p.tag.clone(),
        channel: p.channel.clone(),
        ..Default::default()
    }))
}

async fn page(
    state: &AppState,
    tenant: Uuid,
    filter: Option<AttemptFilter>,
    p: AttemptListParams,
) -> ApiResult<ListResponse<MessageAttemptOut>> {
    let req = PageReq::new(p.limit, p.iterator.clone())?;
    if req.backwards {
        return Err(ApiError::field(
            &["query", "iterator"],
            "attempt lists page forwards only",
        ));
    }
    let cursor = req.cursor_as(parse_attempt_id)?;
    let with_content = p.with_content.unwrap_or(true);
    let rows = match filter {
        Some(f) => delivery_pages::attempts(&state.pool, tenant, &f, cursor, req.fetch()).await?,
        None => Vec::new(),
    };
    let urls = urls(state, tenant, rows.iter().map(|a| a.endpoint_id)).await?;
    let data = rows.into_iter().map(|a| out(a, &urls, with_content)).collect();
    Ok(req.finish(data, |a: &MessageAttemptOut| a.id.clone()))
}

/// List attempts by endpoint
///
/// Newest first.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/attempt/endpoint/{endpoint_id}", operation_id = "v1.message-attempt.list-by-endpoint", tag = "Message Attempt",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path), AttemptListParams),
    responses((status = 200, body = ListResponse<MessageAttemptOut>), Errors))]
pub async fn list_by_endpoint(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Query(p): Query<AttemptListParams>,
) -> ApiResult<axum::Json<ListResponse<MessageAttemptOut>>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    let filter = filter_of(&p)?.map(|f| AttemptFilter {
        endpoint_id: Some(ep.id),
        ..f
    });
    Ok(axum::Json(page(&state, tenant, filter, p).await?))
}

/// List attempts by message
///
/// Newest first; `endpoint_id` narrows to one endpoint.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/attempt/msg/{msg_id}", operation_id = "v1.message-attempt.list-by-msg", tag = "Message Attempt",
    params(("app_id" = String, Path), ("msg_id" = String, Path), AttemptListParams),
    responses((status = 200, body = ListResponse<MessageAttemptOut>), Errors))]
pub async fn list_by_msg(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, msg_id)): Path<(String, String)>,
    Query(p): Query<AttemptListParams>,
) -> ApiResult<axum::Json<ListResponse<MessageAttemptOut>>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let msg = message_of(&state, tenant, &msg_id, false).await?;
    let endpoint_id = match &p.endpoint_id {
        Some(ep) => Some(endpoint_of(&state, tenant, ep).await?.id),
        None => None,
    };
    let filter = filter_of(&p)?.map(|f| AttemptFilter {
        event_id: Some(msg.event_id),
        endpoint_id,
        ..f
    });
    Ok(axum::Json(page(&state, tenant, filter, p).await?))
}

/// Get an attempt
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}", operation_id = "v1.message-attempt.get", tag = "Message Attempt",
    params(("app_id" = String, Path), ("msg_id" = String, Path), ("attempt_id" = String, Path)),
    responses((status = 200, body = MessageAttemptOut), Errors))]
pub async fn get(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, msg_id, attempt_id)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<MessageAttemptOut>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let a = attempt_of(&state, tenant, &msg_id, &attempt_id).await?;
    let urls = urls(&state, tenant, std::iter::once(a.endpoint_id)).await?;
    Ok(axum::Json(out(a, &urls, true)))
}

async fn attempt_of(state: &AppState, tenant: Uuid, msg_id: &str, attempt_id: &str) -> ApiResult<Attempt> {
    let key = parse_attempt_id(attempt_id)
        .filter(|k| Uuid::parse_str(msg_id).ok() == Some(k.event_id))
        .ok_or_else(|| ApiError::not_found("attempt"))?;
    delivery_pages::attempt(&state.pool, tenant, &key)
        .await?
        .ok_or_else(|| ApiError::not_found("attempt"))
}

/// Delete an attempt's response body
#[utoipa::path(delete, path = "/api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}/content", operation_id = "v1.message-attempt.expunge-content", tag = "Message Attempt",
    params(("app_id" = String, Path), ("msg_id" = String, Path), ("attempt_id" = String, Path)),
    responses((status = 204), Errors))]
pub async fn expunge_content(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, msg_id, attempt_id)): Path<(String, String, String)>,
) -> ApiResult<StatusCode> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let a = attempt_of(&state, tenant, &msg_id, &attempt_id).await?;
    delivery_pages::expunge_response(&state.pool, tenant, &AttemptKey::of(&a)).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn state_status(next: &str) -> MessageStatus {
    match next {
        "delivered" => MessageStatus::Success,
        "dead_lettered" => MessageStatus::Fail,
        _ => MessageStatus::Pending,
    }
}

/// List the messages sent to an endpoint
///
/// Newest message first, each with the state of its latest attempt.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/msg", operation_id = "v1.message-attempt.list-attempted-messages", tag = "Message Attempt",
    params(("app_id" = String, Path), ("endpoint_id" = String, Path), AttemptListParams),
    responses((status = 200, body = ListResponse<EndpointMessageOut>), Errors))]
pub async fn list_attempted_messages(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    Query(p): Query<AttemptListParams>,
) -> ApiResult<axum::Json<ListResponse<EndpointMessageOut>>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    let req = PageReq::new(p.limit, p.iterator)?;
    if req.backwards {
        return Err(ApiError::field(
            &["query", "iterator"],
            "this list pages forwards only",
        ));
    }
    let cursor = req.cursor_as(|c| Uuid::parse_str(c).ok())?;
    let with_content = p.with_content.unwrap_or(true);
    let states = delivery_pages::attempted_messages(
        &state.pool,
        tenant,
        ep.id,
        cursor,
        p.before,
        p.after,
        req.fetch(),
    )
    .await?;
    let ids: Vec<Uuid> = states.iter().map(|s| s.event_id).collect();
    let mut found = messages::get_many(&state.pool, tenant, &ids, with_content).await?;
    state.payloads.open(&mut found).await?;
    let found: HashMap<Uuid, messages::Message> = found.into_iter().map(|m| (m.event_id, m)).collect();
    let data = states
        .into_iter()
        .map(|s| {
            let status = state_status(&s.next);
            let m = found.get(&s.event_id);
            EndpointMessageOut {
                id: s.event_id.to_string(),
                event_type: m.map(|m| m.event_type.clone()).unwrap_or_default(),
                payload: serde_json::value::RawValue::from_string(
                    m.filter(|_| with_content)
                        .map_or_else(|| "{}".to_string(), |m| m.payload.clone()),
                )
                .unwrap_or_else(|_| serde_json::value::RawValue::from_string("{}".into()).expect("json")),
                event_id: m
                    .and_then(|m| m.idempotency_key.clone())
                    .filter(|k| !k.contains(':')),
                channels: None,
                timestamp: messages::v7_time(s.event_id).unwrap_or(s.last_attempt_at),
                status,
                status_text: status.text(),
                next_attempt: (s.next == "retry").then_some(s.next_due_at).flatten(),
            }
        })
        .collect();
    Ok(axum::Json(
        req.finish(data, |m: &EndpointMessageOut| m.id.clone()),
    ))
}

fn destination(
    e: &ManagedEndpoint,
    status: MessageStatus,
    next_attempt: Option<DateTime<Utc>>,
) -> MessageEndpointOut {
    MessageEndpointOut {
        id: e.id.to_string(),
        url: e.url.clone(),
        description: e.description.clone(),
        uid: e.uid.clone(),
        disabled: !e.enabled,
        throttle_rate: e.rate_limit_per_s.map(|r| r.clamp(0, i32::from(u16::MAX)) as u16),
        event_types: (!e.event_types.is_empty()).then(|| e.event_types.clone()),
        channels: None,
        created_at: e.created_at,
        updated_at: e.updated_at,
        status,
        status_text: status.text(),
        next_attempt,
    }
}

/// List the endpoints a message went to
///
/// Each with the state of the message's latest attempt there; before any attempt, the enabled
/// endpoints whose filter matches, pending.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg/{msg_id}/endpoint", operation_id = "v1.message-attempt.list-attempted-destinations", tag = "Message Attempt",
    params(("app_id" = String, Path), ("msg_id" = String, Path), ListParams),
    responses((status = 200, body = ListResponse<MessageEndpointOut>), Errors))]
pub async fn list_attempted_destinations(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, msg_id)): Path<(String, String)>,
    Query(p): Query<ListParams>,
) -> ApiResult<axum::Json<ListResponse<MessageEndpointOut>>> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let msg = message_of(&state, tenant, &msg_id, false).await?;
    let req = PageReq::new(p.limit, p.iterator)?;
    let cursor = req.cursor_as(|c| Uuid::parse_str(c).ok())?;
    let statuses = attempts::status(&state.pool, msg.event_id, Some(tenant)).await?;
    let mut rows: Vec<MessageEndpointOut> = Vec::new();
    let attempted: HashMap<Uuid, &attempts::DeliveryStatus> =
        statuses.iter().map(|s| (s.endpoint_id, s)).collect();
    let ids: Vec<Uuid> = attempted.keys().copied().collect();
    for e in endpoint_admin::find_many(&state.pool, tenant, &ids).await? {
        let s = attempted[&e.id];
        let status = match s.state.as_str() {
            "delivered" => MessageStatus::Success,
            "retrying" => MessageStatus::Pending,
            _ => MessageStatus::Fail,
        };
        rows.push(destination(&e, status, s.next_due_at));
    }
    // Endpoints that will get it and have no attempt yet: while it waits in the outbox, the
    // enabled endpoints that existed when it was created and whose filter matches.
    let waiting = attempts::before_delivery(&state.pool, msg.event_id, Some(tenant)).await?;
    if matches!(waiting, Some(attempts::NotYetAttempted::InOutbox { .. })) {
        for e in endpoint_admin::enabled_of(&state.pool, tenant).await? {
            if attempted.contains_key(&e.id) {
                continue;
            }
            let matches = EventFilter::new(&e.event_types).is_ok_and(|f| f.matches(&msg.event_type));
            let existed = messages::v7_time(msg.event_id).is_some_and(|t| e.created_at <= t);
            if matches && existed {
                rows.push(destination(&e, MessageStatus::Pending, None));
            }
        }
    }
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    let descending = req.descending(false);
    if descending {
        rows.reverse();
    }
    let rows: Vec<MessageEndpointOut> = rows
        .into_iter()
        .filter(|r| match &cursor {
            None => true,
            Some(c) => {
                let c = c.to_string();
                if descending {
                    r.id < c
                } else {
                    r.id > c
                }
            }
        })
        .take(req.fetch() as usize)
        .collect();
    Ok(axum::Json(req.finish(rows, |r| r.id.clone())))
}

/// Resend a message to an endpoint
///
/// Through the first retry tier, now, with the same `webhook-id` (whatever the endpoint's
/// filter).
#[utoipa::path(post, path = "/api/v1/app/{app_id}/msg/{msg_id}/endpoint/{endpoint_id}/resend", operation_id = "v1.message-attempt.resend", tag = "Message Attempt",
    params(("app_id" = String, Path), ("msg_id" = String, Path), ("endpoint_id" = String, Path)),
    responses((status = 202, body = Object, description = "An empty object"), Errors))]
pub async fn resend(
    State(state): State<AppState>,
    who: Principal,
    Path((app_id, msg_id, endpoint_id)): Path<(String, String, String)>,
) -> ApiResult<(StatusCode, axum::Json<serde_json::Value>)> {
    let tenant = tenant_of(&state, &who, &app_id).await?;
    let msg = message_of(&state, tenant, &msg_id, true).await?;
    let ep = endpoint_of(&state, tenant, &endpoint_id).await?;
    resend_to(&state, &msg, &ep).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(serde_json::json!({}))))
}

/// Sends `msg` again to `ep` (an enabled endpoint of the message's tenant), through the first
/// retry tier, with the same `webhook-id` (the API's resend and the portal's replay).
pub(crate) async fn resend_to(
    state: &AppState,
    msg: &messages::Message,
    ep: &ManagedEndpoint,
) -> ApiResult<()> {
    if !ep.enabled {
        return Err(ApiError::Conflict(
            "the endpoint is disabled: enable it first".into(),
        ));
    }
    let replayer = state
        .replayer
        .clone()
        .ok_or_else(|| ApiError::Unavailable("retries are disabled: resends cannot be delivered".into()))?;
    let event = state.payloads.envelope(msg).await?;
    replayer.send_event(event, ep.id, None).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_ids_round_trip_and_junk_is_refused() {
        let k = AttemptKey {
            started_at: DateTime::from_timestamp_micros(1_760_000_000_123_456).unwrap(),
            event_id: Uuid::now_v7(),
            endpoint_id: Uuid::now_v7(),
            attempt: 3,
        };
        let id = attempt_id(&k);
        assert!(id.starts_with("atmpt_"));
        assert_eq!(parse_attempt_id(&id), Some(k));
        assert_eq!(parse_attempt_id("atmpt_abc"), None);
        assert_eq!(parse_attempt_id(&id[6..]), None);
    }
}
