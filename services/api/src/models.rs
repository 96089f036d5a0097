//! The wire types: Svix's API v1 field names and shapes (camelCase, `ListResponse` pages,
//! integer statuses), plus Hookstream's documented extensions (`aggregateType`/`aggregateId` on
//! messages, `timeoutMs`/`maxInFlight` on endpoints, dead letters, latency percentiles, API
//! keys). Inputs ignore unknown fields (newer SDKs send more than this server knows); a Svix
//! feature Hookstream lacks is refused with a 422 naming the field when it is set.
//!
//! Longer than 800 lines: one struct per JSON shape of Svix's API, kept together so that field
//! names and cases are reviewed against the reference (`../shared/reference/`) in one place.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

/// `Some(None)` for an explicit `null`, `None` when the field is absent (PATCH semantics).
pub fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

pub type Metadata = BTreeMap<String, String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum Ordering {
    #[default]
    Ascending,
    Descending,
}

/// A page (Svix's `ListResponse_*`): pass `iterator` back to get the next page until `done`;
/// `prevIterator` gets the page before this one.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListResponse<T: ToSchema> {
    pub data: Vec<T>,
    pub iterator: Option<String>,
    pub prev_iterator: Option<String>,
    pub done: bool,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Items per page, 1 to 250 (default 50).
    pub limit: Option<u32>,
    /// The `iterator` (or `prevIterator`) of the page before.
    pub iterator: Option<String>,
    /// Order of the items.
    pub order: Option<Ordering>,
}

// ---- applications ----

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationIn {
    pub name: String,
    /// Your own unique identifier (letters, digits, `-`, `_`, `.`; not UUID-shaped).
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// Not supported (no application-wide rate limit): refused when set.
    #[serde(default)]
    #[schema(value_type = Option<u16>)]
    pub throttle_rate: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationPatch {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub uid: Option<Option<String>>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    #[serde(default)]
    #[schema(value_type = Option<u16>)]
    pub throttle_rate: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationOut {
    /// The tenant's id.
    pub id: String,
    pub name: String,
    pub uid: Option<String>,
    pub metadata: Metadata,
    /// Always null (no application-wide rate limit).
    pub throttle_rate: Option<u16>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AppCreateParams {
    /// Answer the existing application (200) when one with this `uid` exists.
    pub get_if_exists: Option<bool>,
}

// ---- endpoints ----

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointIn {
    /// Checked at creation: https or http, no credentials, no private or special-purpose IP
    /// literal unless the operator allow-listed it.
    pub url: String,
    #[serde(default)]
    pub description: Option<String>,
    /// Deliveries per second at most (also accepted as `rateLimit`).
    #[serde(default, alias = "rateLimit")]
    pub throttle_rate: Option<u16>,
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default)]
    pub disabled: Option<bool>,
    /// Event types delivered (all when absent); `a.*` and `*` patterns are accepted too. Also
    /// accepted as `filterTypes`.
    #[serde(default, alias = "filterTypes")]
    pub event_types: Option<Vec<String>>,
    /// Only messages sent to at least one of these channels (at most 10; each 1 to 128
    /// letters, digits or `-_.:`). Absent or empty: every message, with or without channels.
    #[serde(default)]
    pub channels: Option<Vec<String>>,
    /// `whsec_` and base64 of 24 to 64 bytes; generated when absent.
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// Custom headers sent with every delivery (at creation; later through the headers
    /// routes). Credentials in them are sealed at rest and never returned.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Hookstream extension: a payload filter, a JSON object matched against each message's
    /// payload (docs/api.md, "Payload filters"); messages it refuses are not sent (nor
    /// counted as failures).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<serde_json::Value>,
    /// Hookstream extension: the delivery timeout, 100 to 30000 ms (default 15000).
    #[serde(default)]
    pub timeout_ms: Option<i32>,
    /// Hookstream extension: deliveries in flight at once, 1 to 1000 (default 32).
    #[serde(default)]
    pub max_in_flight: Option<i32>,
}

/// A full update (PUT): absent optional fields are reset to their defaults (the extensions
/// `timeoutMs` and `maxInFlight` keep their value when absent).
pub type EndpointUpdate = EndpointIn;

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPatch {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default, alias = "rateLimit", deserialize_with = "nullable")]
    #[schema(value_type = Option<u16>)]
    pub throttle_rate: Option<Option<u16>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub uid: Option<Option<String>>,
    #[serde(default)]
    pub disabled: Option<bool>,
    #[serde(default, alias = "filterTypes", deserialize_with = "nullable")]
    #[schema(value_type = Option<Vec<String>>)]
    pub event_types: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Vec<String>>)]
    pub channels: Option<Option<Vec<String>>>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    #[serde(default)]
    pub timeout_ms: Option<i32>,
    #[serde(default)]
    pub max_in_flight: Option<i32>,
    /// Hookstream extension: the payload filter; null removes it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<Option<serde_json::Value>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointOut {
    pub id: String,
    /// The URL as stored for display: tokens and credentials it carries are redacted (the
    /// full URL is sealed at rest and never returned).
    pub url: String,
    pub description: String,
    pub uid: Option<String>,
    pub metadata: Metadata,
    pub disabled: bool,
    pub throttle_rate: Option<u16>,
    pub event_types: Option<Vec<String>>,
    pub channels: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Hookstream extension: the payload filter.
    #[schema(value_type = Option<Object>)]
    pub filter: Option<serde_json::Value>,
    /// Hookstream extension.
    pub timeout_ms: i32,
    /// Hookstream extension.
    pub max_in_flight: i32,
    /// Hookstream extension: why it is disabled (by the API, after failing for days, a 410).
    pub disabled_reason: Option<String>,
    /// Hookstream extension: failing with no success since then.
    pub failing_since: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EndpointSecretOut {
    /// `whsec_…`: the secret that signs from now on (during a rotation the previous one also
    /// signs until its overlap ends).
    pub key: String,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSecretRotateIn {
    /// The new secret; generated when absent.
    #[serde(default)]
    pub key: Option<String>,
    /// How long the current secret keeps signing beside the new one, 0 to 604800 s (default
    /// 86400).
    #[serde(default)]
    pub grace_period_seconds: Option<u32>,
}

/// An endpoint's custom headers: the values of those that are not sensitive, and the names of
/// those that are (their values are never returned).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EndpointHeadersOut {
    pub headers: BTreeMap<String, String>,
    pub sensitive: Vec<String>,
}

/// Replaces every custom header.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct EndpointHeadersIn {
    pub headers: BTreeMap<String, String>,
    /// Hookstream extension: names to treat as sensitive besides those that look like
    /// credentials (`Authorization`, `Cookie`, `*-token`, `*-key`, `*-secret`, …).
    #[serde(default)]
    pub sensitive: Vec<String>,
}

/// Sets (a string) or removes (null) the headers named; the others stay.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointHeadersPatchIn {
    pub headers: BTreeMap<String, Option<String>>,
    /// Headers to remove.
    #[serde(default)]
    pub delete_headers: Vec<String>,
    /// Hookstream extension: names to treat as sensitive.
    #[serde(default)]
    pub sensitive: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverIn {
    pub since: DateTime<Utc>,
    #[serde(default)]
    pub until: Option<DateTime<Utc>>,
}

/// Svix's `ReplayIn`: messages created in the window, `until` defaulting to when the task
/// was asked for.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplayIn {
    pub since: DateTime<Utc>,
    #[serde(default)]
    pub until: Option<DateTime<Utc>>,
}

/// Svix's `BulkReplayIn`: messages created in the window that were sent to the endpoint,
/// optionally only those of these event types, channel or tag, or whose latest attempt at the
/// endpoint has this status (0 success, 1 pending, 2 fail) or HTTP status class.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkReplayIn {
    pub since: DateTime<Utc>,
    #[serde(default)]
    pub until: Option<DateTime<Utc>>,
    #[serde(default)]
    pub event_types: Option<Vec<String>>,
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub tag: Option<String>,
    #[serde(default)]
    pub status: Option<u8>,
    #[serde(default)]
    pub status_code_class: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackgroundTaskStatus {
    Running,
    Finished,
    Failed,
}

impl BackgroundTaskStatus {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "running" => Some(Self::Running),
            "finished" => Some(Self::Finished),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Failed => "failed",
        }
    }
}

/// The task types Hookstream runs (Svix has more: listing by one of those finds nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum BackgroundTaskType {
    #[serde(rename = "endpoint.replay")]
    EndpointReplay,
    #[serde(rename = "endpoint.recover")]
    EndpointRecover,
    #[serde(rename = "endpoint.bulk-replay")]
    EndpointBulkReplay,
    #[serde(rename = "application.purge_content")]
    ApplicationPurgeContent,
}

impl BackgroundTaskType {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            hookstream_store::background_tasks::REPLAY => Some(Self::EndpointReplay),
            hookstream_store::background_tasks::RECOVER => Some(Self::EndpointRecover),
            hookstream_store::background_tasks::BULK_REPLAY => Some(Self::EndpointBulkReplay),
            hookstream_store::background_tasks::PURGE_CONTENT => Some(Self::ApplicationPurgeContent),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::EndpointReplay => hookstream_store::background_tasks::REPLAY,
            Self::EndpointRecover => hookstream_store::background_tasks::RECOVER,
            Self::EndpointBulkReplay => hookstream_store::background_tasks::BULK_REPLAY,
            Self::ApplicationPurgeContent => hookstream_store::background_tasks::PURGE_CONTENT,
        }
    }
}

/// What starting a task answers (Svix's `RecoverOut` and `ReplayOut`).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverOut {
    pub id: String,
    pub status: BackgroundTaskStatus,
    pub task: BackgroundTaskType,
    pub updated_at: DateTime<Utc>,
}

/// A background task: `data` holds `messagesSent` (Svix's) and Hookstream's
/// `messagesSkipped` and, for a failed task, `error`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackgroundTaskOut {
    pub id: String,
    pub status: BackgroundTaskStatus,
    pub task: BackgroundTaskType,
    pub data: serde_json::Value,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BackgroundTaskListParams {
    pub status: Option<BackgroundTaskStatus>,
    pub task: Option<BackgroundTaskType>,
    pub limit: Option<u32>,
    pub iterator: Option<String>,
    pub order: Option<Ordering>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatsParams {
    /// Attempts from this time (default: 24 hours ago).
    pub since: Option<DateTime<Utc>>,
    /// Attempts before this time (default: now).
    pub until: Option<DateTime<Utc>>,
}

/// Messages of the endpoint by the state of their latest attempt, plus Hookstream's latency
/// figures over the same window.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointStats {
    pub success: i64,
    pub pending: i64,
    pub sending: i64,
    pub fail: i64,
    pub canceled: i64,
    /// Hookstream extension: attempts in the window.
    pub attempts: i64,
    /// Hookstream extension: the share of attempts delivered.
    pub success_rate: Option<f64>,
    /// Hookstream extension: attempt duration percentiles (ms).
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventExampleIn {
    pub event_type: String,
    /// Which example of the event type's schema (default 0).
    #[serde(default)]
    pub example_index: Option<usize>,
}

// ---- messages ----

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageIn {
    pub event_type: String,
    /// A JSON object: the webhook body.
    #[schema(value_type = Object)]
    pub payload: Box<RawValue>,
    /// The idempotency key: another message with the same `eventId` is a 409 (a retry of the
    /// same request, same `idempotency-key` header, gets the first answer again).
    #[serde(default)]
    pub event_id: Option<String>,
    /// Creates the application (operators only) when the path names a uid that does not exist.
    #[serde(default)]
    pub application: Option<ApplicationIn>,
    /// Accepted for compatibility; retention is installation-wide (`api.message_retention_days`).
    #[serde(default)]
    pub payload_retention_period: Option<i64>,
    /// Hookstream extension: events of one aggregate reach Kafka in commit order.
    #[serde(default)]
    pub aggregate_type: Option<String>,
    #[serde(default)]
    pub aggregate_id: Option<String>,
    /// Only endpoints listening on one of these (or on none) get it: at most 10, each 1 to 128
    /// letters, digits or `-_.:`.
    #[serde(default)]
    pub channels: Option<Vec<String>>,
    /// Tags to find it by in message and attempt lists: at most 5, each 1 to 128 letters,
    /// digits or `-_./\#`.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// No attempt is made before this time (at most `api.max_deliver_at_ahead_s` ahead, 7 days
    /// by default; a time already past delivers at once).
    #[serde(default)]
    pub deliver_at: Option<DateTime<Utc>>,
    #[serde(default)]
    #[schema(value_type = Option<i64>)]
    pub payload_retention_hours: Option<serde_json::Value>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub transformations_params: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageOut {
    /// The event id: receivers get it as `webhook-id`.
    pub id: String,
    pub event_type: String,
    #[schema(value_type = Object)]
    pub payload: Box<RawValue>,
    pub event_id: Option<String>,
    pub channels: Option<Vec<String>>,
    pub tags: Option<Vec<String>>,
    pub deliver_at: Option<DateTime<Utc>>,
    pub timestamp: DateTime<Utc>,
    /// Hookstream extension.
    pub aggregate_type: String,
    pub aggregate_id: String,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WithContentParams {
    /// Include the payload (default true).
    pub with_content: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessageListParams {
    pub limit: Option<u32>,
    pub iterator: Option<String>,
    /// Only these event types (repeat the parameter, or separate with commas).
    #[serde(skip_deserializing, default)]
    pub event_types: Option<String>,
    /// Messages created before this time.
    pub before: Option<DateTime<Utc>>,
    /// Messages created after this time.
    pub after: Option<DateTime<Utc>>,
    /// Include payloads (default true).
    pub with_content: Option<bool>,
    /// Only messages sent to this channel.
    pub channel: Option<String>,
    /// Only messages with this tag.
    pub tag: Option<String>,
}

// ---- attempts ----

/// 0 success, 1 pending, 2 fail, 3 sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSchema)]
#[repr(u8)]
pub enum MessageStatus {
    Success = 0,
    Pending = 1,
    Fail = 2,
    Sending = 3,
}

impl Serialize for MessageStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(*self as u8)
    }
}

impl MessageStatus {
    pub fn text(self) -> MessageStatusText {
        match self {
            MessageStatus::Success => MessageStatusText::Success,
            MessageStatus::Pending => MessageStatusText::Pending,
            MessageStatus::Fail => MessageStatusText::Fail,
            MessageStatus::Sending => MessageStatusText::Sending,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MessageStatusText {
    Success,
    Pending,
    Fail,
    Sending,
}

/// 0 scheduled (the first attempt or a retry), 1 manual (a resend or a recovery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSchema)]
pub enum MessageAttemptTriggerType {
    Scheduled = 0,
    Manual = 1,
}

impl Serialize for MessageAttemptTriggerType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(*self as u8)
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageAttemptOut {
    /// Opaque; names the attempt (its time, message, endpoint and number).
    pub id: String,
    pub msg_id: String,
    pub endpoint_id: String,
    /// The endpoint's URL (redacted).
    pub url: String,
    /// The start of the response body ("" without content or response).
    pub response: String,
    /// 0 when no response arrived.
    pub response_status_code: i32,
    pub response_duration_ms: i64,
    pub status: MessageStatus,
    pub status_text: MessageStatusText,
    pub trigger_type: MessageAttemptTriggerType,
    pub timestamp: DateTime<Utc>,
    /// Hookstream extension: the attempt's number for this message and endpoint (1 first).
    pub attempt: i32,
    /// Hookstream extension: the error class (`none` when delivered).
    pub error_class: String,
    /// Hookstream extension: what happens next: delivered, retry, dead_lettered.
    pub next: String,
    pub next_attempt: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AttemptListParams {
    pub limit: Option<u32>,
    pub iterator: Option<String>,
    /// 0 success, 2 fail (1 and 3 match nothing: an attempt is done).
    pub status: Option<u8>,
    /// 0 no response, 100, 200, 300, 400, 500.
    pub status_code_class: Option<u16>,
    /// By message: only this endpoint's attempts.
    pub endpoint_id: Option<String>,
    pub before: Option<DateTime<Utc>>,
    pub after: Option<DateTime<Utc>>,
    /// Include response bodies (default true).
    pub with_content: Option<bool>,
    /// Accepted; statuses are always expanded.
    pub expanded_statuses: Option<bool>,
    /// Only attempts of messages sent to this channel.
    pub channel: Option<String>,
    /// Only attempts of messages with this tag.
    pub tag: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointMessageOut {
    pub id: String,
    pub event_type: String,
    #[schema(value_type = Object)]
    pub payload: Box<RawValue>,
    pub event_id: Option<String>,
    pub channels: Option<Vec<String>>,
    pub timestamp: DateTime<Utc>,
    pub status: MessageStatus,
    pub status_text: MessageStatusText,
    pub next_attempt: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageEndpointOut {
    pub id: String,
    pub url: String,
    pub description: String,
    pub uid: Option<String>,
    pub disabled: bool,
    pub throttle_rate: Option<u16>,
    pub event_types: Option<Vec<String>>,
    pub channels: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub status: MessageStatus,
    pub status_text: MessageStatusText,
    pub next_attempt: Option<DateTime<Utc>>,
}

// ---- event types ----

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventTypeIn {
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub archived: Option<bool>,
    #[serde(default)]
    pub deprecated: Option<bool>,
    /// `{"1": <JSON schema, with "examples": [...]>}`: the examples are what send-example sends.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub schemas: Option<serde_json::Value>,
    #[serde(default)]
    pub feature_flag: Option<String>,
    #[serde(default)]
    pub group_name: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventTypeUpdate {
    pub description: String,
    #[serde(default)]
    pub archived: Option<bool>,
    #[serde(default)]
    pub deprecated: Option<bool>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub schemas: Option<serde_json::Value>,
    #[serde(default)]
    pub feature_flag: Option<String>,
    #[serde(default)]
    pub group_name: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventTypePatch {
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub archived: Option<bool>,
    #[serde(default)]
    pub deprecated: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Object>)]
    pub schemas: Option<Option<serde_json::Value>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub feature_flag: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub group_name: Option<Option<String>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventTypeOut {
    pub name: String,
    pub description: String,
    pub archived: bool,
    pub deprecated: bool,
    #[schema(value_type = Option<Object>)]
    pub schemas: Option<serde_json::Value>,
    pub feature_flag: Option<String>,
    pub group_name: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventTypeListParams {
    pub limit: Option<u32>,
    pub iterator: Option<String>,
    pub order: Option<Ordering>,
    pub include_archived: Option<bool>,
    /// Include schemas (default true).
    pub with_content: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventTypeDeleteParams {
    /// Delete the type instead of archiving it.
    pub expunge: Option<bool>,
}

// ---- auth ----

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppPortalAccessIn {
    /// Creates the application (operators only) when the path names a uid that does not exist.
    #[serde(default)]
    pub application: Option<ApplicationIn>,
    /// Token lifetime in seconds (default `api.portal_token_ttl_s`, at most a year).
    #[serde(default)]
    pub expiry: Option<u64>,
    /// A read-only token may only GET.
    #[serde(default)]
    pub read_only: Option<bool>,
    /// Accepted and not used.
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>)]
    pub feature_flags: Option<serde_json::Value>,
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AppPortalAccessOut {
    /// A login link to the tenant portal (`<portal_url>/login?token=…`): it starts a browser
    /// session once, within `api.portal_link_ttl_s` (10 minutes by default).
    pub url: String,
    /// A tenant-scoped key for this application (`hsp_…`), expiring.
    pub token: String,
}

/// Svix's `ApplicationTokenExpireIn`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationTokenExpireIn {
    /// Seconds until the tokens expire (default 0: at once; at most 86400).
    #[serde(default)]
    pub expiry: Option<i64>,
    /// Only the tokens minted with one of these `sessionId`s (at most 100).
    #[serde(default)]
    pub session_ids: Option<Vec<String>>,
}

// ---- Hookstream extensions ----

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyIn {
    /// A label for people.
    #[serde(default)]
    pub name: Option<String>,
    /// A read-only key may only GET.
    #[serde(default)]
    pub read_only: Option<bool>,
    /// Expires at this time (never, when absent).
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyOut {
    pub id: String,
    pub app_id: String,
    /// `tenant` or `portal`.
    pub kind: String,
    pub name: String,
    /// The key's visible start.
    pub prefix: String,
    pub read_only: bool,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyCreatedOut {
    #[serde(flatten)]
    pub key: ApiKeyOut,
    /// The key itself: shown once, not stored.
    pub token: String,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeadLetterListParams {
    pub limit: Option<u32>,
    pub iterator: Option<String>,
    pub endpoint_id: Option<String>,
    /// Dead since this time.
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterOut {
    pub id: String,
    pub msg_id: Option<String>,
    pub endpoint_id: Option<String>,
    pub event_type: String,
    pub reason: String,
    pub error_class: String,
    pub last_status: i32,
    pub attempts: i32,
    pub dead_at: DateTime<Utc>,
    pub replayed_at: Option<DateTime<Utc>>,
    pub replay_count: i32,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterReplayIn {
    /// Only this endpoint's dead letters.
    #[serde(default)]
    pub endpoint_id: Option<String>,
    #[serde(default)]
    pub since: Option<DateTime<Utc>>,
    #[serde(default)]
    pub until: Option<DateTime<Utc>>,
}

/// Svix's `OperationalWebhookEndpointIn`: an endpoint that receives operational events
/// (`endpoint.*`, `message.attempt.*`) about the key's tenant (an operator's: every tenant's).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationalWebhookEndpointIn {
    pub url: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default, alias = "rateLimit")]
    pub throttle_rate: Option<u16>,
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default)]
    pub disabled: Option<bool>,
    /// Operational event types delivered (all when absent), `endpoint.*` patterns too. Also
    /// accepted as `filterTypes`.
    #[serde(default, alias = "filterTypes")]
    pub event_types: Option<Vec<String>>,
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationalWebhookEndpointOut {
    pub id: String,
    /// Redacted like an endpoint's.
    pub url: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle_rate: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub disabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<String>>,
    pub metadata: Metadata,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}
