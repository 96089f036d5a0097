//! One attempt as the delivery log stores it: the row type that the store (`attempts`) and the
//! per-endpoint statistics kept beside it (`attempt_stats`) both take, below either.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// One attempt to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAttempt {
    pub started_at: DateTime<Utc>,
    pub event_id: Uuid,
    pub endpoint_id: Uuid,
    pub attempt: i32,
    pub tenant_id: Uuid,
    pub trigger: String,
    pub duration_ms: i32,
    pub status: Option<i32>,
    pub outcome: String,
    pub error_class: String,
    pub error: String,
    pub response_headers: Vec<(String, String)>,
    pub response_body: Option<Vec<u8>>,
    pub response_truncated: bool,
    pub next: String,
    pub next_due_at: Option<DateTime<Utc>>,
    pub next_tier: Option<String>,
    pub event_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub payload_bytes: Option<i32>,
    pub committed_at: Option<DateTime<Utc>>,
    pub relayed_at: Option<DateTime<Utc>>,
}
