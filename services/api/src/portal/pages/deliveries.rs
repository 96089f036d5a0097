//! The delivery log (every attempt, newest first, filtered by status, event type, endpoint and
//! time, in keyset pages) and an event's page (its payload, each endpoint's status, every
//! attempt with its response), with the replay of a failed delivery.

use std::collections::HashMap;

use axum::extract::{Path, RawQuery, State};
use hookstream_store::attempts::{self, Attempt};
use hookstream_store::delivery_pages::{self, AttemptFilter};
use hookstream_store::endpoint_admin::{self, ManagedEndpoint};
use hookstream_store::{event_types, messages};
use maud::{html, Markup};
use serde::Deserialize;
use uuid::Uuid;

use super::endpoints::Empty;
use super::{id, notice, parse_time, query};
use crate::error::ApiError;
use crate::portal::csrf::Mutation;
use crate::portal::error::{PortalError, PortalResult};
use crate::portal::layout::{self, page, post_button, pretty_json, Nav};
use crate::portal::session::{see_other, Session};
use crate::routes;
use crate::AppState;

/// Attempts on one page of the log.
const PAGE: i64 = 50;
/// Characters of a response body shown.
const BODY_EXCERPT: usize = 2_000;

#[derive(Debug, Default, Deserialize)]
pub struct LogQuery {
    #[serde(default)]
    status: String,
    #[serde(default)]
    event_type: String,
    #[serde(default)]
    endpoint: String,
    #[serde(default)]
    after: String,
    #[serde(default)]
    before: String,
    #[serde(default)]
    cursor: String,
    #[serde(default)]
    notice: Option<String>,
}

fn outcome_badge(a: &Attempt) -> Markup {
    html! {
        @if a.outcome == "delivered" { span.status.ok { "delivered" } }
        @else if a.next == "retry" { span.status.warn { "failed, will retry" } }
        @else { span.status.bad { "failed" } }
    }
}

fn state_badge(state: &str) -> Markup {
    html! {
        @match state {
            "delivered" => span.status.ok { "delivered" },
            "dead_lettered" => span.status.bad { "failed" },
            "disabled" => span.status.off { "endpoint disabled" },
            _ => span.status.warn { "retrying" },
        }
    }
}

async fn endpoints_of(
    state: &AppState,
    tenant: Uuid,
    ids: impl Iterator<Item = Uuid>,
) -> PortalResult<HashMap<Uuid, ManagedEndpoint>> {
    let mut ids: Vec<Uuid> = ids.collect();
    ids.sort();
    ids.dedup();
    Ok(endpoint_admin::find_many(&state.pool, tenant, &ids)
        .await?
        .into_iter()
        .map(|e| (e.id, e))
        .collect())
}

/// `GET /portal/deliveries`.
pub async fn list(State(state): State<AppState>, s: Session, RawQuery(raw): RawQuery) -> PortalResult {
    let q: LogQuery = query(&raw)?;
    let endpoint = match q.endpoint.as_str() {
        "" => None,
        e => Some(
            routes::endpoint_of(&state, s.tenant, &id(e)?.to_string())
                .await?
                .id,
        ),
    };
    let filter = AttemptFilter {
        endpoint_id: endpoint,
        delivered: match q.status.as_str() {
            "delivered" => Some(true),
            "failed" => Some(false),
            _ => None,
        },
        event_type: Some(q.event_type.trim().to_string()).filter(|t| !t.is_empty()),
        after: parse_time(&q.after),
        before: parse_time(&q.before),
        ..Default::default()
    };
    let cursor = match q.cursor.as_str() {
        "" => None,
        c => Some(
            routes::attempts::parse_attempt_id(c)
                .ok_or_else(|| PortalError::BadRequest("not a page of this log".into()))?,
        ),
    };
    let mut rows = delivery_pages::attempts(&state.pool, s.tenant, &filter, cursor, PAGE + 1).await?;
    let more = rows.len() as i64 > PAGE;
    rows.truncate(PAGE as usize);
    let all_endpoints = endpoint_admin::list(&state.pool, s.tenant, None, false, 251).await?;
    let urls: HashMap<Uuid, String> = all_endpoints.iter().map(|e| (e.id, e.url.clone())).collect();
    let types = event_types::list(&state.pool, None, false, true, 250).await?;
    let next = rows.last().filter(|_| more).map(|a| {
        let key = delivery_pages::AttemptKey::of(a);
        let mut qs = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("status", &q.status),
            ("event_type", &q.event_type),
            ("endpoint", &q.endpoint),
            ("after", &q.after),
            ("before", &q.before),
        ] {
            if !v.is_empty() {
                qs.append_pair(k, v);
            }
        }
        qs.append_pair("cursor", &routes::attempts::attempt_id(&key));
        format!("/portal/deliveries?{}", qs.finish())
    });
    let body = html! {
        form.filters method="get" action="/portal/deliveries" role="search" aria-label="Filter deliveries" {
            div { label for="f-status" { "Status" }
                select #f-status name="status" {
                    option value="" selected[q.status.is_empty()] { "any" }
                    option value="delivered" selected[q.status == "delivered"] { "delivered" }
                    option value="failed" selected[q.status == "failed"] { "failed" }
                } }
            div { label for="f-type" { "Event type" }
                input #f-type type="text" name="event_type" value=(q.event_type) list="known-types";
                datalist #known-types { @for t in &types { option value=(t.name) {} } } }
            div { label for="f-endpoint" { "Endpoint" }
                select #f-endpoint name="endpoint" {
                    option value="" { "any" }
                    @for e in &all_endpoints {
                        option value=(e.id.to_string()) selected[Some(e.id) == endpoint] { (e.url) }
                    }
                } }
            div { label for="f-after" { "After (UTC)" } input #f-after type="datetime-local" name="after" value=(q.after); }
            div { label for="f-before" { "Before (UTC)" } input #f-before type="datetime-local" name="before" value=(q.before); }
            div { button type="submit" { "Filter" } " " a href="/portal/deliveries" { "Clear" } }
        }
        @if rows.is_empty() {
            p { "No deliveries match." }
        } @else {
            table {
                caption.visually-hidden { "Delivery attempts, newest first" }
                thead { tr {
                    th scope="col" { "Time" } th scope="col" { "Event" } th scope="col" { "Endpoint" }
                    th.num scope="col" { "Attempt" } th scope="col" { "Outcome" } th.num scope="col" { "HTTP" } th.num scope="col" { "Duration" }
                } }
                tbody {
                    @for a in &rows {
                        tr {
                            td { (layout::time(a.started_at)) }
                            td { a href=(format!("/portal/events/{}", a.event_id)) { code { (a.event_type.as_deref().unwrap_or("event")) } }
                                br; span.muted.mono { (a.event_id.to_string()) } }
                            td.url { a href=(format!("/portal/endpoints/{}", a.endpoint_id)) { (urls.get(&a.endpoint_id).map_or("(deleted endpoint)", String::as_str)) } }
                            td.num { (a.attempt) }
                            td { (outcome_badge(a)) @if !a.error_class.is_empty() && a.outcome != "delivered" { br; span.muted { (a.error_class) } } }
                            td.num { @if let Some(st) = a.status { (st) } @else { span.muted { "—" } } }
                            td.num { (a.duration_ms) " ms" }
                        }
                    }
                }
            }
        }
        nav.pager aria-label="Pages" {
            @if !q.cursor.is_empty() { a href="/portal/deliveries" { "← Newest" } }
            @if let Some(n) = &next { a href=(n) rel="next" { "Older →" } }
        }
        @if !s.read_only {
            section aria-labelledby="erase-title" {
                h2 #erase-title { "Erase message contents" }
                p.muted { "Destroys the keys of every message payload of this application: no copy of them, in the delivery pipeline or the message store, can be read, resent or replayed again. Messages sent afterwards are not affected. This cannot be undone." }
                (post_button(&s, "/portal/erase", "Erase all message contents", Some("Erase every message payload of this application? This cannot be undone."), "danger"))
            }
        }
    };
    Ok(page(
        &s,
        Nav::Deliveries,
        "Delivery log",
        notice(q.notice.as_deref()),
        body,
    ))
}

fn headers_table(h: &serde_json::Value) -> Markup {
    let pairs: Vec<(String, String)> = match h {
        serde_json::Value::Array(items) => items
            .iter()
            .filter_map(|p| {
                let p = p.as_array()?;
                Some((p.first()?.as_str()?.to_string(), p.get(1)?.as_str()?.to_string()))
            })
            .collect(),
        serde_json::Value::Object(o) => o
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), String::from)))
            .collect(),
        _ => Vec::new(),
    };
    html! {
        @if pairs.is_empty() { p.muted { "No response headers recorded." } }
        @else {
            table { thead { tr { th scope="col" { "Header" } th scope="col" { "Value" } } }
                tbody { @for (k, v) in &pairs { tr { td { code { (k) } } td.mono { (v) } } } } }
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct EventQuery {
    notice: Option<String>,
}

/// `GET /portal/events/{id}`: 404 unless the event is this tenant's.
pub async fn event(
    State(state): State<AppState>,
    s: Session,
    Path(raw): Path<String>,
    RawQuery(q): RawQuery,
) -> PortalResult {
    let q: EventQuery = query(&q)?;
    let event_id = id(&raw)?;
    let mut msg = messages::get(&state.pool, s.tenant, event_id, true).await?;
    if let Some(m) = msg.as_mut() {
        state.payloads.open(std::slice::from_mut(m)).await?;
    }
    let statuses = attempts::status(&state.pool, event_id, Some(s.tenant)).await?;
    let filter = AttemptFilter {
        event_id: Some(event_id),
        ..Default::default()
    };
    let tries = delivery_pages::attempts(&state.pool, s.tenant, &filter, None, 250).await?;
    if msg.is_none() && statuses.is_empty() && tries.is_empty() {
        return Err(ApiError::not_found("event").into());
    }
    let eps = endpoints_of(
        &state,
        s.tenant,
        statuses
            .iter()
            .map(|st| st.endpoint_id)
            .chain(tries.iter().map(|a| a.endpoint_id)),
    )
    .await?;
    let url = |id: &Uuid| {
        eps.get(id)
            .map_or("(deleted endpoint)".to_string(), |e| e.url.clone())
    };
    let in_progress =
        statuses.iter().any(|st| st.state == "retrying") || (statuses.is_empty() && msg.is_some());
    let event_type = msg
        .as_ref()
        .map(|m| m.event_type.clone())
        .or_else(|| tries.first().and_then(|a| a.event_type.clone()))
        .unwrap_or_else(|| "event".into());
    let body = html! {
        @if in_progress { div data-refresh="3" { p.muted { "Deliveries are in progress: this page reloads itself (or reload it)." } } }
        dl.facts {
            dt { "Event id" } dd.mono { (event_id.to_string()) }
            dt { "Event type" } dd { code { (event_type) } }
            @if let Some(m) = &msg {
                dt { "Created" } dd { (layout::time(hookstream_store::messages::v7_time(m.event_id).unwrap_or(m.created_at))) }
                @if !m.aggregate_id.is_empty() { dt { "Aggregate" } dd { code { (m.aggregate_type) " " (m.aggregate_id) } } }
            }
        }
        @if let Some(m) = &msg {
            details { summary { "Payload" } pre { (pretty_json(&m.payload)) } }
        }
        h2 { "Endpoints" }
        @if statuses.is_empty() {
            p.muted { "Not attempted yet." }
        } @else {
            table {
                thead { tr { th scope="col" { "Endpoint" } th scope="col" { "Status" } th.num scope="col" { "Attempts" }
                    th scope="col" { "Last attempt" } th.num scope="col" { "Last HTTP" } th scope="col" { "Next retry" } th scope="col" { "" } } }
                tbody {
                    @for st in &statuses {
                        tr {
                            td.url { a href=(format!("/portal/endpoints/{}", st.endpoint_id)) { (url(&st.endpoint_id)) } }
                            td { (state_badge(&st.state)) }
                            td.num { (st.attempts) }
                            td { (layout::time(st.last_attempt_at)) }
                            td.num { @if let Some(c) = st.last_status { (c) } @else { span.muted { "—" } } }
                            td { (layout::opt_time(st.next_due_at)) }
                            td { @if st.state != "delivered" && !s.read_only && msg.is_some() && eps.get(&st.endpoint_id).is_some_and(|e| e.enabled) {
                                (post_button(&s, &format!("/portal/events/{event_id}/resend/{}", st.endpoint_id), "Replay", None, ""))
                            } }
                        }
                    }
                }
            }
        }
        h2 { "Attempts" }
        @for a in &tries {
            details.attempt open[a.outcome != "delivered"] {
                summary {
                    "Attempt " (a.attempt) " to " span.url { (url(&a.endpoint_id)) } " · " (outcome_badge(a))
                    " · " @if let Some(c) = a.status { "HTTP " (c) } @else { "no response" }
                    " · " (a.duration_ms) " ms · " (layout::time(a.started_at))
                }
                dl.facts {
                    dt { "Trigger" } dd { (a.trigger) }
                    @if !a.error_class.is_empty() { dt { "Error class" } dd { code { (a.error_class) } } }
                    @if !a.error.is_empty() { dt { "Error" } dd { (a.error) } }
                    dt { "Next" } dd { (a.next) @if a.next == "retry" { @if let Some(d) = a.next_due_at { " at " (layout::time(d)) } } }
                }
                h3 { "Response headers" }
                (headers_table(&a.response_headers))
                h3 { "Response body" @if a.response_truncated { span.muted { " (truncated when stored)" } } }
                @match &a.response_body {
                    Some(b) if !b.is_empty() => {
                        @let text = String::from_utf8_lossy(b);
                        pre.response-body { (text.chars().take(BODY_EXCERPT).collect::<String>()) }
                    }
                    _ => p.muted { "Empty." },
                }
            }
        }
    };
    Ok(page(
        &s,
        Nav::Deliveries,
        "Event",
        notice(q.notice.as_deref()),
        body,
    ))
}

/// `POST /portal/erase`: erases every payload of the session's tenant (the API's
/// expunge-all-contents), audited as the portal's.
pub async fn erase(State(state): State<AppState>, m: Mutation<Empty>) -> PortalResult {
    let s = m.session;
    hookstream_store::payload_keys::erase(&state.pool, s.tenant, None, "portal").await?;
    state.payloads.keys().forget();
    Ok(see_other("/portal/deliveries?notice=erased"))
}

/// `POST /portal/events/{id}/resend/{endpoint_id}`: the API's resend of one delivery.
pub async fn resend(
    State(state): State<AppState>,
    Path((raw_event, raw_ep)): Path<(String, String)>,
    m: Mutation<Empty>,
) -> PortalResult {
    let s = m.session;
    let msg = routes::messages::message_of(&state, s.tenant, &id(&raw_event)?.to_string(), true).await?;
    let ep = routes::endpoint_of(&state, s.tenant, &id(&raw_ep)?.to_string()).await?;
    routes::attempts::resend_to(&state, &msg, &ep).await?;
    Ok(see_other(&format!(
        "/portal/events/{}?notice=resent",
        msg.event_id
    )))
}
