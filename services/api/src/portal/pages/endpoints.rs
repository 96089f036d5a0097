//! Endpoints: the list (with 24 h statistics, breaker and health), the add/edit form (the
//! API's validation and SSRF rules, errors by the field), an endpoint's page (facts, chart,
//! signing secret, test event, replay of its failed deliveries), and the changes.
//!
//! Longer than 800 lines: the list, the form, an endpoint's page and the changes share the
//! form's fields, its validation and its error rendering.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use chrono::{TimeDelta, Utc};
use hookstream_signing::Secret;
use hookstream_store::endpoint_admin::{self, EndpointPatch, ManagedEndpoint};
use hookstream_store::endpoint_headers::{self, EndpointHeaders};
use hookstream_store::{attempt_stats, breakers, event_types};
use maud::{html, Markup};
use serde::Deserialize;
use uuid::Uuid;

use super::{id, notice, parse_time, query};
use crate::error::ApiError;
use crate::models::EndpointIn;
use crate::portal::chart;
use crate::portal::csrf::Mutation;
use crate::portal::error::{PortalError, PortalResult};
use crate::portal::layout::{self, csrf_field, field_error, opt_time, page, post_button, Nav};
use crate::portal::session::{see_other, Session};
use crate::routes;
use crate::AppState;

/// Endpoints shown on one page of the list.
const PAGE: i64 = 100;

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    notice: Option<String>,
    after: Option<String>,
}

fn status_badge(e: &ManagedEndpoint) -> Markup {
    html! {
        @if e.enabled {
            @if e.failing_since.is_some() { span.status.warn { "failing" } } @else { span.status.ok { "enabled" } }
        } @else {
            span.status.off { "disabled" }
        }
    }
}

fn filter_text(e: &ManagedEndpoint) -> Markup {
    html! {
        @if e.event_types.is_empty() { span.muted { "all event types" } }
        @else { code { (e.event_types.join(", ")) } }
    }
}

fn breaker_badge(state: &str) -> Markup {
    html! {
        @match state {
            "open" => span.status.bad { "open" },
            "half_open" => span.status.warn { "half-open" },
            _ => span.status.ok { "closed" },
        }
    }
}

/// `GET /portal`: the tenant's endpoints.
pub async fn list(State(state): State<AppState>, s: Session, RawQuery(raw): RawQuery) -> PortalResult {
    let q: ListQuery = query(&raw)?;
    let after = q.after.as_deref().and_then(|a| Uuid::parse_str(a).ok());
    let mut eps = endpoint_admin::list(&state.pool, s.tenant, after, false, PAGE + 1).await?;
    let more = eps.len() as i64 > PAGE;
    eps.truncate(PAGE as usize);
    let since = Utc::now() - TimeDelta::hours(24);
    let stats: HashMap<Uuid, attempt_stats::EndpointStats> =
        attempt_stats::endpoint_stats(&state.pool, Some(s.tenant), since)
            .await?
            .into_iter()
            .map(|st| (st.endpoint_id, st))
            .collect();
    let breakers: HashMap<Uuid, String> = breakers::not_closed(&state.pool, Some(s.tenant))
        .await?
        .into_iter()
        .map(|b| (b.endpoint_id, b.state))
        .collect();
    let body = html! {
        div.actions {
            @if !s.read_only { a.button href="/portal/endpoints/new" { "Add endpoint" } }
        }
        @if eps.is_empty() {
            p { "No endpoints yet." @if !s.read_only { " Add one to start receiving webhooks." } }
        } @else {
            table {
                caption.visually-hidden { "Endpoints, with the last 24 hours' deliveries" }
                thead { tr {
                    th scope="col" { "URL" } th scope="col" { "Filter" } th scope="col" { "Status" }
                    th.num scope="col" { "Success (24 h)" } th.num scope="col" { "p50 / p99" }
                    th scope="col" { "Breaker" } th scope="col" { "Failing since" } th scope="col" { "Disabled reason" }
                } }
                tbody {
                    @for e in &eps {
                        @let st = stats.get(&e.id);
                        tr {
                            td.url { a href=(format!("/portal/endpoints/{}", e.id)) { (e.url) }
                                @if !e.description.is_empty() { br; span.muted { (e.description) } } }
                            td { (filter_text(e)) }
                            td { (status_badge(e)) }
                            td.num { @if let Some(st) = st { (format!("{:.1} %", st.success_rate * 100.0)) br; span.muted { (st.attempts) " attempts" } } @else { span.muted { "no attempts" } } }
                            td.num { @if let Some(st) = st { (format!("{:.0} / {:.0} ms", st.p50_ms, st.p99_ms)) } @else { span.muted { "—" } } }
                            td { (breaker_badge(breakers.get(&e.id).map(String::as_str).or(st.map(|s| s.breaker.as_str())).unwrap_or("closed"))) }
                            td { (opt_time(e.failing_since)) }
                            td { @if let Some(r) = &e.disabled_reason { (r) } @else { span.muted { "—" } } }
                        }
                    }
                }
            }
            @if more { @if let Some(last) = eps.last() {
                nav.pager aria-label="Pages" { a href=(format!("/portal?after={}", last.id)) { "More endpoints →" } }
            } }
        }
    };
    Ok(page(
        &s,
        Nav::Endpoints,
        "Endpoints",
        notice(q.notice.as_deref()),
        body,
    ))
}

/// The add/edit form's fields, as typed.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EndpointForm {
    #[serde(default)]
    url: String,
    #[serde(default)]
    description: String,
    /// Comma- or space-separated event types (`a.*` patterns too); empty: all.
    #[serde(default)]
    event_types: String,
    #[serde(default)]
    rate: String,
    #[serde(default)]
    timeout_ms: String,
    #[serde(default)]
    max_in_flight: String,
    /// Comma- or space-separated channels; empty: every message.
    #[serde(default)]
    channels: String,
    /// A payload filter (JSON); empty: none.
    #[serde(default)]
    filter: String,
    /// Custom headers, one `Name: value` a line; a sensitive one shows `MASK` as its value,
    /// which, saved back, keeps the stored value.
    #[serde(default)]
    headers: String,
}

/// What a sensitive header's value shows in the form (and, saved back unchanged, keeps).
const MASK: &str = "(hidden)";

impl EndpointForm {
    fn of(e: &ManagedEndpoint, headers: &EndpointHeaders) -> Self {
        Self {
            url: e.url.clone(),
            description: e.description.clone(),
            event_types: e.event_types.join(", "),
            rate: e.rate_limit_per_s.map(|r| r.to_string()).unwrap_or_default(),
            timeout_ms: e.timeout_ms.to_string(),
            max_in_flight: e.max_in_flight.to_string(),
            channels: e.channels.join(", "),
            filter: e
                .payload_filter
                .as_ref()
                .map(|f| f.to_string())
                .unwrap_or_default(),
            headers: headers_text(headers),
        }
    }

    fn channels(&self) -> Vec<String> {
        words(&self.channels)
    }

    /// The headers typed, with masked values taken from `current` (the stored headers).
    fn header_pairs(&self, current: &EndpointHeaders) -> Result<BTreeMap<String, String>, String> {
        let stored: HashMap<String, String> = current
            .pairs()
            .into_iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v))
            .collect();
        let mut out = BTreeMap::new();
        for line in self.headers.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| format!("{line:?}: write each header as Name: value"))?;
            let (name, value) = (name.trim(), value.trim());
            let value = match stored.get(&name.to_ascii_lowercase()) {
                Some(v) if value == MASK && current.is_sensitive(name) => v.clone(),
                _ => value.to_string(),
            };
            out.insert(name.to_string(), value);
        }
        Ok(out)
    }

    fn event_types(&self) -> Vec<String> {
        words(&self.event_types)
    }

    /// The API's input, or the fields that are not numbers.
    fn to_api(&self) -> Result<EndpointIn, FieldErrors> {
        let mut errors = FieldErrors::default();
        let num = |field: &str, v: &str, errors: &mut FieldErrors| -> Option<i64> {
            let v = v.trim();
            if v.is_empty() {
                return None;
            }
            match v.parse::<i64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    errors
                        .0
                        .insert(field.to_string(), "must be a whole number".into());
                    None
                }
            }
        };
        let filter = match self.filter.trim() {
            "" => None,
            text => match serde_json::from_str::<serde_json::Value>(text) {
                Ok(v) => Some(v),
                Err(e) => {
                    errors.0.insert("filter".into(), format!("must be JSON: {e}"));
                    None
                }
            },
        };
        let rate = num("rate", &self.rate, &mut errors);
        let timeout = num("timeout_ms", &self.timeout_ms, &mut errors);
        let cap = num("max_in_flight", &self.max_in_flight, &mut errors);
        if rate.is_some_and(|r| !(1..=i64::from(u16::MAX)).contains(&r)) {
            errors
                .0
                .insert("rate".into(), format!("must be 1 to {}", u16::MAX));
        }
        if !errors.0.is_empty() {
            return Err(errors);
        }
        let types = self.event_types();
        Ok(EndpointIn {
            url: self.url.trim().to_string(),
            description: Some(self.description.clone()),
            throttle_rate: rate.map(|r| r as u16),
            uid: None,
            disabled: None,
            event_types: (!types.is_empty()).then_some(types),
            channels: Some(self.channels()),
            secret: None,
            metadata: None,
            headers: None,
            filter,
            timeout_ms: timeout.map(|t| t.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32),
            max_in_flight: cap.map(|t| t.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32),
        })
    }
}

/// Comma- or space-separated words.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Headers as the form shows them: sensitive values masked.
fn headers_text(h: &EndpointHeaders) -> String {
    h.pairs()
        .into_iter()
        .map(|(n, v)| {
            let v = if h.is_sensitive(&n) { MASK.to_string() } else { v };
            format!("{n}: {v}\n")
        })
        .collect()
}

/// Errors by form field (and `""` for the form as a whole).
#[derive(Debug, Default)]
pub struct FieldErrors(HashMap<String, String>);

impl FieldErrors {
    fn one(field: &str, msg: String) -> Self {
        let mut out = Self::default();
        out.0.insert(field.to_string(), msg);
        out
    }

    /// The API's refusal, by the form field it is about; other errors pass through.
    fn from_api(e: ApiError) -> Result<Self, PortalError> {
        match e {
            ApiError::Validation(items) => {
                let mut out = FieldErrors::default();
                for i in items {
                    let field = match i.loc.get(1).map(String::as_str) {
                        Some("url") => "url",
                        Some("description") => "description",
                        Some("eventTypes") => "event_types",
                        Some("throttleRate") => "rate",
                        Some("timeoutMs") => "timeout_ms",
                        Some("maxInFlight") => "max_in_flight",
                        Some("channels") => "channels",
                        Some("filter") => "filter",
                        Some("headers") => "headers",
                        _ => "",
                    };
                    out.0.insert(field.to_string(), i.msg);
                }
                Ok(out)
            }
            ApiError::Conflict(m) => {
                let mut out = FieldErrors::default();
                out.0.insert(String::new(), m);
                Ok(out)
            }
            other => Err(other.into()),
        }
    }
}

fn form_page(s: &Session, title: &str, action: &str, f: &EndpointForm, errors: &FieldErrors) -> Response {
    let field = |id: &str, label: &str, kind: &str, value: &str, hint: &str, required: bool| {
        let err = errors.0.get(id);
        let described: Vec<String> = [
            err.is_some().then(|| format!("{id}-error")),
            (!hint.is_empty()).then(|| format!("{id}-hint")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let described = (!described.is_empty()).then(|| described.join(" "));
        html! {
            div {
                label for=(id) { (label) }
                input type=(kind) id=(id) name=(id) value=(value) required[required]
                    aria-invalid=[err.is_some().then_some("true")] aria-describedby=[described];
                (field_error(id, err))
                @if !hint.is_empty() { p.hint id=(format!("{id}-hint")) { (hint) } }
            }
        }
    };
    let body = html! {
        @if let Some(e) = errors.0.get("") { p.form-error role="alert" { (e) } }
        form.stack method="post" action=(action) novalidate {
            (csrf_field(s))
            (field("url", "URL", "url", &f.url, "https://… where the webhooks are POSTed. Private and special-purpose addresses are refused.", true))
            (field("description", "Description", "text", &f.description, "", false))
            (field("event_types", "Event types", "text", &f.event_types, "Comma-separated, e.g. order.created, invoice.* — empty for all.", false))
            (field("rate", "Rate limit (deliveries per second)", "number", &f.rate, "Empty for no limit.", false))
            (field("timeout_ms", "Timeout (ms)", "number", &f.timeout_ms, "100 to 30000; empty for the default.", false))
            (field("max_in_flight", "Deliveries at once", "number", &f.max_in_flight, "1 to 1000; empty for the default.", false))
            (field("channels", "Channels", "text", &f.channels, "Comma-separated; only messages sent to one of them are delivered. Empty for every message.", false))
            (field("filter", "Payload filter", "text", &f.filter, "JSON, e.g. {\"amount\": {\"$gte\": 100}}; only payloads that match are delivered. Empty for none.", false))
            div {
                label for="headers" { "Custom headers" }
                textarea id="headers" name="headers" rows="4" aria-invalid=[errors.0.get("headers").map(|_| "true")]
                    aria-describedby="headers-hint" { (f.headers) }
                (field_error("headers", errors.0.get("headers")))
                p.hint id="headers-hint" { "One " code { "Name: value" } " a line, sent with every delivery (an " code { "Authorization" } " header, say). Secret values show as " code { (MASK) } ": leave it to keep the value." }
            }
            div.actions {
                button type="submit" { "Save" }
                a.button.secondary href="/portal" { "Cancel" }
            }
        }
    };
    let mut r = page(s, Nav::Endpoints, title, None, body);
    if !errors.0.is_empty() {
        *r.status_mut() = axum::http::StatusCode::UNPROCESSABLE_ENTITY;
    }
    r
}

/// `GET /portal/endpoints/new`.
pub async fn new_form(s: Session) -> PortalResult {
    if s.read_only {
        return Err(PortalError::ReadOnly);
    }
    Ok(form_page(
        &s,
        "Add endpoint",
        "/portal/endpoints",
        &EndpointForm::default(),
        &FieldErrors::default(),
    ))
}

/// `POST /portal/endpoints`: the API's create (same checks, same store function).
pub async fn create(State(state): State<AppState>, m: Mutation<EndpointForm>) -> PortalResult {
    let (s, f) = (m.session, m.form);
    let mut input = match f.to_api() {
        Ok(i) => i,
        Err(errors) => return Ok(form_page(&s, "Add endpoint", "/portal/endpoints", &f, &errors)),
    };
    match f.header_pairs(&EndpointHeaders::default()) {
        Ok(h) => input.headers = (!h.is_empty()).then_some(h),
        Err(e) => {
            return Ok(form_page(
                &s,
                "Add endpoint",
                "/portal/endpoints",
                &f,
                &FieldErrors::one("headers", e),
            ))
        }
    }
    let result = async {
        let (fields, secret) = routes::endpoints::fields(&state, input).await?;
        endpoint_admin::create(
            &state.pool,
            &state.sealer,
            &state.policy,
            s.tenant,
            &fields,
            secret,
        )
        .await
        .map_err(routes::endpoints::stored)
    }
    .await;
    match result {
        Ok((ep, _)) => Ok(see_other(&format!("/portal/endpoints/{}?notice=created", ep.id))),
        Err(e) => Ok(form_page(
            &s,
            "Add endpoint",
            "/portal/endpoints",
            &f,
            &FieldErrors::from_api(e)?,
        )),
    }
}

/// An endpoint's custom headers, opened (only to show them masked or to keep masked values).
async fn headers_of(state: &AppState, endpoint: Uuid) -> PortalResult<EndpointHeaders> {
    let mut conn = state
        .pool
        .acquire()
        .await
        .map_err(hookstream_store::StoreError::from)
        .map_err(ApiError::from)?;
    Ok(endpoint_headers::get(&mut conn, &state.sealer, endpoint)
        .await
        .map_err(ApiError::from)?)
}

async fn endpoint(state: &AppState, s: &Session, raw: &str) -> PortalResult<ManagedEndpoint> {
    Ok(routes::endpoint_of(state, s.tenant, &id(raw)?.to_string()).await?)
}

/// `GET /portal/endpoints/{id}/edit`.
pub async fn edit_form(State(state): State<AppState>, s: Session, Path(raw): Path<String>) -> PortalResult {
    let ep = endpoint(&state, &s, &raw).await?;
    if s.read_only {
        return Err(PortalError::ReadOnly);
    }
    let headers = headers_of(&state, ep.id).await?;
    Ok(form_page(
        &s,
        "Edit endpoint",
        &format!("/portal/endpoints/{}", ep.id),
        &EndpointForm::of(&ep, &headers),
        &FieldErrors::default(),
    ))
}

/// `POST /portal/endpoints/{id}`: the API's patch. The URL shown is the redacted one: left as
/// it is, the stored URL (with its secrets) is kept.
pub async fn update(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    m: Mutation<EndpointForm>,
) -> PortalResult {
    let (s, f) = (m.session, m.form);
    let ep = endpoint(&state, &s, &raw).await?;
    let action = format!("/portal/endpoints/{}", ep.id);
    let input = match f.to_api() {
        Ok(i) => i,
        Err(errors) => return Ok(form_page(&s, "Edit endpoint", &action, &f, &errors)),
    };
    // The headers typed (masked values kept), checked before anything is saved.
    let current = headers_of(&state, ep.id).await?;
    let next = match f
        .header_pairs(&current)
        .and_then(|h| EndpointHeaders::new(h, &current.shown().1).map_err(|e| e.to_string()))
    {
        Ok(h) => h,
        Err(e) => {
            return Ok(form_page(
                &s,
                "Edit endpoint",
                &action,
                &f,
                &FieldErrors::one("headers", e),
            ))
        }
    };
    let result = async {
        let types = input.event_types.clone().unwrap_or_default();
        routes::check_catalogue(&state, &types, "eventTypes").await?;
        let patch = EndpointPatch {
            url: (input.url != ep.url).then(|| input.url.clone()),
            description: input.description.clone(),
            event_types: Some(types),
            rate_limit_per_s: Some(input.throttle_rate.map(i32::from)),
            timeout_ms: input.timeout_ms,
            max_in_flight: input.max_in_flight,
            channels: input.channels.clone(),
            payload_filter: Some(input.filter.clone()),
            ..Default::default()
        };
        let ep = endpoint_admin::patch(&state.pool, &state.sealer, &state.policy, s.tenant, ep.id, &patch)
            .await
            .map_err(routes::endpoints::stored)?;
        endpoint_headers::update(&state.pool, &state.sealer, ep.id, |_| Ok(next))
            .await?
            .map_err(routes::endpoint_headers::refused)?;
        Ok::<_, ApiError>(ep)
    }
    .await;
    match result {
        Ok(ep) => Ok(see_other(&format!("/portal/endpoints/{}?notice=saved", ep.id))),
        Err(e) => Ok(form_page(
            &s,
            "Edit endpoint",
            &action,
            &f,
            &FieldErrors::from_api(e)?,
        )),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct Empty {}

async fn set_disabled(state: &AppState, s: &Session, raw: &str, disabled: bool) -> PortalResult {
    let ep = endpoint(state, s, raw).await?;
    let patch = EndpointPatch {
        disabled: Some(disabled),
        ..Default::default()
    };
    endpoint_admin::patch(&state.pool, &state.sealer, &state.policy, s.tenant, ep.id, &patch)
        .await
        .map_err(routes::endpoints::stored)?;
    let code = if disabled { "disabled" } else { "enabled" };
    Ok(see_other(&format!("/portal/endpoints/{}?notice={code}", ep.id)))
}

pub async fn disable(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    m: Mutation<Empty>,
) -> PortalResult {
    set_disabled(&state, &m.session, &raw, true).await
}

pub async fn enable(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    m: Mutation<Empty>,
) -> PortalResult {
    set_disabled(&state, &m.session, &raw, false).await
}

pub async fn delete(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    m: Mutation<Empty>,
) -> PortalResult {
    let ep = endpoint(&state, &m.session, &raw).await?;
    endpoint_admin::delete(&state.pool, m.session.tenant, ep.id).await?;
    Ok(see_other("/portal?notice=deleted"))
}

#[derive(Debug, Default, Deserialize)]
pub struct ShowQuery {
    notice: Option<String>,
}

/// A secret just revealed or rotated, shown once on the page.
struct Shown {
    secret: String,
    rotated: bool,
}

/// `GET /portal/endpoints/{id}`.
pub async fn show(
    State(state): State<AppState>,
    s: Session,
    Path(raw): Path<String>,
    RawQuery(q): RawQuery,
) -> PortalResult {
    let q: ShowQuery = query(&q)?;
    let ep = endpoint(&state, &s, &raw).await?;
    detail(&state, &s, ep, None, notice(q.notice.as_deref())).await
}

async fn detail(
    state: &AppState,
    s: &Session,
    ep: ManagedEndpoint,
    shown: Option<Shown>,
    notice: Option<&str>,
) -> PortalResult {
    let now = Utc::now();
    let since = now - TimeDelta::hours(24);
    let stats = attempt_stats::one_endpoint_stats(&state.pool, ep.id, since).await?;
    let series = attempt_stats::series(&state.pool, ep.id, since, 60).await?;
    let breaker = breakers::not_closed(&state.pool, Some(s.tenant))
        .await?
        .into_iter()
        .find(|b| b.endpoint_id == ep.id);
    let examples: Vec<(String, usize)> = event_types::list(&state.pool, None, false, false, 250)
        .await?
        .into_iter()
        .flat_map(|t| {
            let n = t
                .schemas
                .as_ref()
                .and_then(|s| s.get("1"))
                .and_then(|s| s.get("examples"))
                .and_then(|e| e.as_array())
                .map_or(0, |a| a.iter().filter(|e| e.is_object()).count());
            (0..n).map(move |i| (t.name.clone(), i))
        })
        .collect();
    let headers = headers_of(state, ep.id).await?;
    let failed_default = (now - TimeDelta::hours(24)).format("%Y-%m-%dT%H:%M").to_string();
    let base = format!("/portal/endpoints/{}", ep.id);
    let body = html! {
        dl.facts {
            dt { "URL" } dd.url { code { (ep.url) } }
            @if !ep.description.is_empty() { dt { "Description" } dd { (ep.description) } }
            dt { "Event types" } dd { (filter_text(&ep)) }
            dt { "Channels" } dd { @if ep.channels.is_empty() { span.muted { "every message" } } @else { code { (ep.channels.join(", ")) } } }
            dt { "Payload filter" } dd { @if let Some(f) = &ep.payload_filter { code { (f.to_string()) } } @else { span.muted { "none" } } }
            dt { "Custom headers" } dd { @if headers.pairs().is_empty() { span.muted { "none" } } @else {
                ul.plain { @for (n, v) in headers.pairs() { li { code { (n) ": " @if headers.is_sensitive(&n) { span.muted { (MASK) } } @else { (v) } } } } } } }
            dt { "Status" } dd { (status_badge(&ep)) }
            @if let Some(r) = &ep.disabled_reason { dt { "Disabled reason" } dd { (r) } }
            dt { "Failing since" } dd { (opt_time(ep.failing_since)) }
            dt { "Breaker" } dd { (breaker_badge(breaker.as_ref().map_or("closed", |b| b.state.as_str())))
                @if let Some(b) = &breaker { " since " (layout::time(b.since)) } }
            dt { "Rate limit" } dd { @if let Some(r) = ep.rate_limit_per_s { (r) " / s" } @else { "none" } }
            dt { "Timeout" } dd { (ep.timeout_ms) " ms" }
            dt { "Deliveries at once" } dd { (ep.max_in_flight) }
            dt { "Created" } dd { (layout::time(ep.created_at)) }
        }
        @if !s.read_only {
            div.actions {
                a.button.secondary href=(format!("{base}/edit")) { "Edit" }
                @if ep.enabled {
                    (post_button(s, &format!("{base}/disable"), "Disable", None, "secondary"))
                } @else {
                    (post_button(s, &format!("{base}/enable"), "Enable", None, "secondary"))
                }
                (post_button(s, &format!("{base}/delete"), "Delete", Some("Delete this endpoint? Its deliveries stop at once."), "danger"))
                a.button.secondary href=(format!("/portal/deliveries?endpoint={}", ep.id)) { "Its deliveries" }
            }
        }
        section.panel aria-labelledby="h-stats" {
            h2 #h-stats { "Last 24 hours" }
            @if let Some(st) = &stats {
                p { (st.attempts) " attempts, " (format!("{:.1} %", st.success_rate * 100.0)) " delivered; latency p50 "
                    (format!("{:.0}", st.p50_ms)) " ms, p95 " (format!("{:.0}", st.p95_ms)) " ms, p99 " (format!("{:.0}", st.p99_ms)) " ms."
                    @if let (Some(c), Some(n)) = (&st.top_error_class, st.top_error_count) { " Most frequent failure: " code { (c) } " (" (n) ")." } }
            } @else { p.muted { "No attempts in the last 24 hours." } }
            (chart::render(&series, now))
        }
        section.panel aria-labelledby="h-secret" {
            h2 #h-secret { "Signing secret" }
            p { "Deliveries are signed (Standard Webhooks: " code { "webhook-signature" } ") with this secret." }
            @if let Some(sh) = &shown {
                @if sh.rotated { p.notice role="status" { "Secret rotated. This is the new secret; copy it now." } }
                p { span.secret #secret { (sh.secret) } " " button.secondary type="button" data-copy="secret" hidden { "Copy" } }
            }
            @if !s.read_only {
                div.actions {
                    @if shown.is_none() { (post_button(s, &format!("{base}/secret"), "Reveal secret", None, "secondary")) }
                    form.inline method="post" action=(format!("{base}/secret/rotate")) {
                        (csrf_field(s))
                        label for="grace" { "Old secret keeps signing for " }
                        select #grace name="grace_s" {
                            option value="0" { "no time (stop at once)" }
                            option value="3600" { "1 hour" }
                            option value="86400" selected { "24 hours" }
                        }
                        " "
                        button type="submit" data-confirm="Rotate the signing secret?" { "Rotate secret" }
                    }
                }
            } @else { p.muted { "A read-only session cannot see or change the secret." } }
        }
        @if !s.read_only {
            section.panel aria-labelledby="h-test" {
                h2 #h-test { "Send a test event" }
                form.inline method="post" action=(format!("{base}/test")) {
                    (csrf_field(s))
                    label for="example" { "Event " }
                    select #example name="example" {
                        @for (name, i) in &examples {
                            option value=(format!("{name}#{i}")) { (name) @if *i > 0 { " (example " (i + 1) ")" } }
                        }
                        option value="ping" { (PING_TYPE) " (a ping)" }
                    }
                    " "
                    button type="submit" { "Send test event" }
                }
            }
            section.panel aria-labelledby="h-replay" {
                h2 #h-replay { "Replay failed deliveries" }
                p { "Sends again every delivery to this endpoint that failed for good since this time (UTC), with the same " code { "webhook-id" } "." }
                form.inline method="post" action=(format!("{base}/replay")) {
                    (csrf_field(s))
                    label for="since" { "Since " }
                    input #since type="datetime-local" name="since" value=(failed_default) required;
                    " "
                    button type="submit" { "Replay failed deliveries" }
                }
            }
        }
    };
    Ok(page(s, Nav::Endpoints, "Endpoint", notice, body))
}

/// `POST /portal/endpoints/{id}/secret`: shows the current secret (a POST, so it is never in a
/// URL or the history).
pub async fn reveal_secret(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    m: Mutation<Empty>,
) -> PortalResult {
    let ep = endpoint(&state, &m.session, &raw).await?;
    let secret = endpoint_admin::current_secret(&state.pool, &state.sealer, ep.id).await?;
    let shown = Shown {
        secret: secret.expose(),
        rotated: false,
    };
    detail(&state, &m.session, ep, Some(shown), None).await
}

#[derive(Debug, Default, Deserialize)]
pub struct RotateForm {
    #[serde(default)]
    grace_s: Option<String>,
}

/// `POST /portal/endpoints/{id}/secret/rotate`: a new secret, the old one signing beside it for
/// the grace period chosen.
pub async fn rotate_secret(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    m: Mutation<RotateForm>,
) -> PortalResult {
    let ep = endpoint(&state, &m.session, &raw).await?;
    let grace: u64 = m
        .form
        .grace_s
        .as_deref()
        .unwrap_or("86400")
        .parse()
        .ok()
        .filter(|g| *g <= 604_800)
        .ok_or_else(|| PortalError::BadRequest("the grace period must be 0 to 604800 seconds".into()))?;
    let secret = hookstream_store::endpoints::rotate_secret_to(
        &state.pool,
        &state.sealer,
        ep.id,
        Secret::generate(),
        Duration::from_secs(grace),
    )
    .await?;
    let shown = Shown {
        secret: secret.expose(),
        rotated: true,
    };
    detail(&state, &m.session, ep, Some(shown), None).await
}

/// The event type of a portal ping (a test event needing no catalogue entry).
const PING_TYPE: &str = "hookstream.ping";

#[derive(Debug, Default, Deserialize)]
pub struct TestForm {
    #[serde(default)]
    example: String,
}

/// `POST /portal/endpoints/{id}/test`: a catalogue example (the API's send-example) or a
/// ping, to this endpoint only; then the event's page.
pub async fn send_test(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    m: Mutation<TestForm>,
) -> PortalResult {
    let s = m.session;
    let ep = endpoint(&state, &s, &raw).await?;
    let msg = match m.form.example.rsplit_once('#') {
        Some((name, i)) => {
            let index = i
                .parse()
                .map_err(|_| PortalError::BadRequest("not an example".into()))?;
            routes::endpoints::send_example_to(&state, s.tenant, &ep, name, index).await?
        }
        None => {
            let payload = serde_json::json!({
                "type": PING_TYPE,
                "message": "a test event from the Hookstream portal",
                "sentAt": Utc::now().to_rfc3339(),
            });
            routes::endpoints::send_to(&state, s.tenant, &ep, PING_TYPE, payload.to_string()).await?
        }
    };
    Ok(see_other(&format!("/portal/events/{}?notice=sent", msg.event_id)))
}

#[derive(Debug, Default, Deserialize)]
pub struct ReplayForm {
    #[serde(default)]
    since: String,
}

/// `POST /portal/endpoints/{id}/replay`: the API's recover (dead letters since a time, not yet
/// replayed, in the background, rate-limited).
pub async fn replay_since(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    m: Mutation<ReplayForm>,
) -> PortalResult {
    let s = m.session;
    let ep = endpoint(&state, &s, &raw).await?;
    let since = parse_time(&m.form.since)
        .ok_or_else(|| PortalError::BadRequest("since must be a date and time".into()))?;
    let params = hookstream_store::background_tasks::Params {
        since,
        ..Default::default()
    };
    routes::background_tasks::start(
        &state,
        s.tenant,
        Some(ep.id),
        crate::models::BackgroundTaskType::EndpointRecover,
        params,
    )
    .await?;
    Ok(see_other(&format!("/portal/endpoints/{}?notice=replay", ep.id)))
}
