//! What every role of a dispatcher process shares: the delivery engine, the routing snapshot,
//! the producers, the per-endpoint guards and health, and the settings.

use std::sync::Arc;

use hookstream_config::{RetryConfig, TopicsConfig};
use hookstream_delivery::Engine;
use hookstream_kafka::{Fatal, HandoffError};
use hookstream_proto::SourcePosition;
use hookstream_store::sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::attempt_log::AttemptLog;
use crate::config::DispatcherSettings;
use crate::endpoint_health::EndpointHealth;
use crate::isolation::Isolation;
use crate::metrics::DispatcherMetrics;
use crate::subscriptions::Subscriptions;

pub(crate) struct Context {
    pub(crate) engine: Engine,
    pub(crate) subs: Arc<Subscriptions>,
    /// Opens sealed payloads (`hookstream_store::payload_keys`).
    pub(crate) keys: hookstream_store::payload_keys::Keyring,
    /// Hand-offs to the retry tiers and the DLQ (acknowledged before an offset is stored).
    pub(crate) producer: hookstream_kafka::HandoffProducer,
    /// The attempt log: fire and forget.
    pub(crate) attempt_log: AttemptLog,
    pub(crate) pool: PgPool,
    pub(crate) topics: TopicsConfig,
    pub(crate) retry: RetryConfig,
    pub(crate) metrics: DispatcherMetrics,
    pub(crate) shutdown: CancellationToken,
    /// Per-endpoint breakers, rate limits and concurrency caps.
    pub(crate) isolation: Isolation,
    /// Since when each endpoint has been failing, and disabling those failing too long.
    pub(crate) health: EndpointHealth,
    /// The deliveries window (`max_in_flight_deliveries`), taken per event by its fan-out.
    pub(crate) deliveries: Arc<Semaphore>,
    pub(crate) settings: DispatcherSettings,
    /// How long a database round trip on a delivery's path may wait (`answered`).
    pub(crate) answer_deadline: std::time::Duration,
}

/// Where the work in hand was read. `origin` is the event's place in the events topic, kept
/// through retries and replays (what people are shown); `record` is the record handled now:
/// that same record on the first path, a retry tier's record on a retry. Dead letters carry
/// both, and the DLQ sink stores one per handled record and endpoint, so a record handled
/// again after a crash adds no second dead letter.
#[derive(Debug, Clone)]
pub(crate) struct Read {
    pub(crate) origin: SourcePosition,
    pub(crate) record: SourcePosition,
}

impl Read {
    /// The first path: the record handled is the event's origin.
    pub(crate) fn first(record: SourcePosition) -> Self {
        Self {
            origin: record.clone(),
            record,
        }
    }
}

/// How a piece of work ended, for the tracked consumer: `Ok(true)` finished or durably
/// handed on, `Ok(false)` left undone by shutdown, `Err` the process must restart.
pub(crate) type Finished = Result<bool, Fatal>;

/// A hand-off's result as a `Finished`.
pub(crate) fn handed(result: Result<(i32, i64), HandoffError>) -> Finished {
    match result {
        Ok(_) => Ok(true),
        Err(HandoffError::Shutdown) => Ok(false),
        Err(HandoffError::Fatal(reason)) => Err(Fatal(reason)),
        Err(e @ HandoffError::Lost(_)) => Err(Fatal(e.to_string())),
        // The hand-offs make a refused record smaller or dead-letter it before this.
        Err(e @ HandoffError::TooLarge { .. }) => Err(Fatal(e.to_string())),
    }
}

/// Sleeps unless shutting down; false when shutting down.
pub(crate) async fn pause(shutdown: &CancellationToken, d: std::time::Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = shutdown.cancelled() => false,
    }
}

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
