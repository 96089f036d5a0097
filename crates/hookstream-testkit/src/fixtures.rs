//! Rows for tests that write the store directly.

use chrono::{DateTime, Utc};
use hookstream_store::attempts::NewAttempt;
use uuid::Uuid;

/// A first attempt of a new event to a new endpoint of `tenant`, delivered (204) at
/// `started_at`; override fields with struct update syntax.
pub fn attempt_row(started_at: DateTime<Utc>, tenant: Uuid) -> NewAttempt {
    NewAttempt {
        started_at,
        event_id: Uuid::now_v7(),
        endpoint_id: Uuid::now_v7(),
        attempt: 1,
        tenant_id: tenant,
        trigger: "first".into(),
        duration_ms: 5,
        status: Some(204),
        outcome: "delivered".into(),
        error_class: "none".into(),
        error: String::new(),
        response_headers: vec![],
        response_body: None,
        response_truncated: false,
        next: "delivered".into(),
        next_due_at: None,
        next_tier: None,
        event_type: Some("order.created".into()),
        aggregate_id: None,
        payload_bytes: Some(2),
        committed_at: Some(started_at),
        relayed_at: Some(started_at),
    }
}
