//! What every role of a dispatcher process shares: the delivery engine, the routing snapshot,
//! the producers, the per-endpoint guards and health, and the settings.

use std::sync::Arc;

use hookstream_config::{RetryConfig, TopicsConfig};
use hookstream_delivery::Engine;
use hookstream_store::sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::attempt_log::AttemptLog;
use crate::config::DispatcherSettings;
use crate::failing_since::EndpointHealth;
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
