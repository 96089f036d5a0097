//! The event-type catalogue (installation-wide, read-only here) with example payloads.

use axum::extract::State;
use hookstream_store::event_types;
use maud::html;

use crate::portal::error::PortalResult;
use crate::portal::layout::{page, Nav};
use crate::portal::session::Session;
use crate::AppState;

/// `GET /portal/event-types`.
pub async fn list(State(state): State<AppState>, s: Session) -> PortalResult {
    let types = event_types::list(&state.pool, None, false, false, 250).await?;
    let body = html! {
        p { "The events an endpoint can subscribe to (its filter), with example payloads." }
        @if types.is_empty() { p.muted { "The catalogue is empty: endpoints receive every event type." } }
        @for t in &types {
            section.panel aria-labelledby=(format!("et-{}", t.name)) {
                h2 id=(format!("et-{}", t.name)) { code { (t.name) }
                    @if t.deprecated { " " span.status.warn { "deprecated" } } }
                @if !t.description.is_empty() { p { (t.description) } }
                @if let Some(g) = &t.group_name { p.muted { "Group: " (g) } }
                @let examples = t.schemas.as_ref().and_then(|s| s.get("1")).and_then(|s| s.get("examples")).and_then(|e| e.as_array()).cloned().unwrap_or_default();
                @if examples.is_empty() { p.muted { "No example payload." } }
                @for (i, e) in examples.iter().enumerate() {
                    h3 { "Example " (i + 1) }
                    pre { (serde_json::to_string_pretty(e).unwrap_or_default()) }
                }
            }
        }
    };
    Ok(page(&s, Nav::EventTypes, "Event types", None, body))
}
