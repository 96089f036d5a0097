//! The portal's pages: endpoints (list, form, detail with secret, test event, replay and
//! chart), the delivery log and an event's page, and the event-type catalogue.

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
pub mod endpoints;
pub mod deliveries;
pub mod event_types;

use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::error::{PortalError, PortalResult};
use crate::error::ApiError;

/// A query string as `T` (every field optional), or a 400 page.
pub fn query<T: DeserializeOwned>(raw: &Option<String>) -> PortalResult<T> {
    serde_urlencoded::from_str(raw.as_deref().unwrap_or_default())
        .map_err(|e| PortalError::BadRequest(format!("cannot read the query: {e}")))
}

/// An id from the path: anything that is not a UUID is simply not found.
pub fn id(raw: &str) -> PortalResult<Uuid> {
    Uuid::parse_str(raw).map_err(|_| PortalError::Api(ApiError::not_found("page")))
}

/// The text of a notice code (notices are fixed texts: nothing from the query is shown).
pub fn notice(code: Option<&str>) -> Option<&'static str> {
    Some(match code? {
        "created" => "Endpoint created.",
        "saved" => "Changes saved.",
        "disabled" => "Endpoint disabled: nothing is delivered to it until it is enabled.",
        "enabled" => "Endpoint enabled.",
        "deleted" => "Endpoint deleted.",
        "sent" => "Test event sent. This page shows its deliveries as they happen.",
        "resent" => "Delivery replayed: the new attempt shows below when it is made.",
        "replay" => "Replay started: the endpoint's failed deliveries since that time are being sent again.",
        "erased" => "Every message payload of this application was erased: none can be read, resent or replayed again.",
        _ => return None,
    })
}

/// `YYYY-MM-DDTHH:MM` (a `datetime-local` input, read as UTC) or RFC 3339.
pub fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&chrono::Utc));
    }
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(s, f).ok())
        .map(|n| n.and_utc())
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_from_forms_are_utc() {
        let t = super::parse_time("2026-01-02T03:04").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-01-02T03:04:00+00:00");
        assert!(super::parse_time("").is_none());
        assert!(super::parse_time("yesterday").is_none());
        assert!(super::notice(Some("<script>")).is_none());
    }
}
