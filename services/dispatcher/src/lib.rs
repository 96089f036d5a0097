//! The dispatcher: consumes `hookstream.events` in a consumer group and delivers each event,
//! signed, to every subscribed endpoint.
//!
//! Many events are in flight per partition. An offset is stored only when every delivery of
//! every event up to it finished or was durably handed on (a dead letter acknowledged by
//! Kafka), using the per-partition tracker of `hookstream-kafka` (invariant 1). One endpoint
//! cannot starve others: each delivery has its own timeout and each endpoint a cap on
//! concurrent requests (invariant 3). Undecodable records and unknown tenants become dead
//! letters with a reason; the partition moves on (invariant 5).

#![forbid(unsafe_code)]

pub mod dlq_sink;
pub mod isolation;
mod metrics;
pub mod replay;
pub mod retry;
pub mod subscriptions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hookstream_config::{DatabaseConfig, KafkaConfig, RetryConfig, SecretsConfig, TelemetryConfig};
use hookstream_delivery::{DeliveryConfig, Engine, ErrorClass, Message, Outcome, Target, Verdict};
use hookstream_kafka::rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use hookstream_kafka::rdkafka::error::KafkaError;
use hookstream_kafka::rdkafka::message::DeliveryResult;
use hookstream_kafka::rdkafka::producer::{
    BaseRecord, FutureProducer, FutureRecord, ProducerContext, ThreadedProducer,
};
use hookstream_kafka::rdkafka::{ClientContext, Message as _, Offset, TopicPartitionList};
use hookstream_kafka::tracker::{OffsetTracker, Ticket};
use hookstream_proto::{AttemptRecord, DeadLetter, EventEnvelope, Message as _, SourcePosition};
use hookstream_store::endpoints::ActiveEndpoint;
use hookstream_store::sealing::Sealer;
use hookstream_store::StoreError;
use hookstream_telemetry::prometheus::Registry;
use hookstream_telemetry::Health;
use isolation::{Isolation, IsolationSettings};
use serde::{Deserialize, Serialize};
use subscriptions::{Route, Subscriptions};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

pub use metrics::DispatcherMetrics;

/// The dispatcher's configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub database: DatabaseConfig,
    pub kafka: KafkaConfig,
    pub telemetry: TelemetryConfig,
    pub delivery: DeliveryConfig,
    pub dispatcher: DispatcherSettings,
    pub retry: RetryConfig,
    pub dlq: dlq_sink::DlqConfig,
    /// Keys that open the endpoints' signing secrets (sealed at rest).
    pub secrets: SecretsConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DispatcherSettings {
    /// Events processed at once by this instance (each may fan out to many endpoints).
    pub max_in_flight_events: usize,
    /// Deliveries (event × endpoint) processed at once by this instance: what bounds memory
    /// when events fan out widely. An event takes as many as it has endpoints (at most this
    /// many) before its first attempt, so one event wider than the window still proceeds.
    pub max_in_flight_deliveries: usize,
    /// Fallback refresh of the subscription snapshot (changes also arrive by NOTIFY).
    pub subscription_refresh_ms: u64,
    /// How long SIGTERM waits for in-flight deliveries before exiting (keep it below the
    /// pod's termination grace period). Unfinished work is redelivered by the next owner.
    pub shutdown_grace_ms: u64,
    /// An endpoint failing with no success for this long is disabled (default: 5 days).
    pub disable_after_failing_ms: u64,
    /// Publish an `endpoint.disabled` event to the tenant (through the outbox, in the same
    /// transaction as the change) when the dispatcher disables one of its endpoints.
    pub publish_endpoint_disabled: bool,
    /// Circuit breakers, rate limits and concurrency caps per endpoint.
    pub isolation: IsolationSettings,
}

impl Default for DispatcherSettings {
    fn default() -> Self {
        Self {
            max_in_flight_events: 1000,
            max_in_flight_deliveries: 10_000,
            subscription_refresh_ms: 5_000,
            shutdown_grace_ms: 20_000,
            disable_after_failing_ms: 5 * 86_400_000,
            publish_endpoint_disabled: false,
            isolation: IsolationSettings::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("kafka error: {0}")]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    Engine(#[from] hookstream_delivery::EngineError),
    #[error("retry topics: {0}")]
    Topics(String),
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// Clears a partition's tracking state when it is revoked, before anyone else owns it (the
/// events consumer and the DLQ sink).
pub(crate) struct RebalanceContext {
    pub(crate) tracker: Arc<Mutex<OffsetTracker>>,
}

impl ClientContext for RebalanceContext {}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut tracker = self.tracker.lock().expect("tracker lock");
        match rebalance {
            Rebalance::Revoke(tpl) => {
                for el in tpl.elements() {
                    tracker.revoke(el.topic(), el.partition());
                }
                tracing::info!(partitions = tpl.count(), "partitions revoked");
            }
            Rebalance::Assign(tpl) => tracing::info!(partitions = tpl.count(), "partitions assigned"),
            Rebalance::Error(e) => {
                tracing::warn!(error = %e, "rebalance error, dropping all partition state");
                tracker.revoke_all();
            }
        }
    }
}

/// What every event task shares.
pub(crate) struct Shared {
    engine: Engine,
    subs: Arc<Subscriptions>,
    producer: FutureProducer,
    /// The attempt log's own producer: fire and forget, failures counted by its context.
    attempt_log: ThreadedProducer<AttemptLogContext>,
    pool: hookstream_store::sqlx::PgPool,
    dlq_topic: String,
    attempts_topic: String,
    retry: RetryConfig,
    metrics: DispatcherMetrics,
    shutdown: CancellationToken,
    /// Per-endpoint breakers, rate limits and concurrency caps.
    isolation: Isolation,
    /// Since when each endpoint has been failing (ms), as far as this instance knows; absent
    /// means "as the subscription snapshot says".
    failing_since: Mutex<HashMap<Uuid, Option<i64>>>,
    /// The deliveries window (`max_in_flight_deliveries`), taken per event by its fan-out.
    deliveries: Arc<Semaphore>,
    settings: DispatcherSettings,
}

/// Runs the dispatcher until `shutdown` is cancelled, then drains (see `DispatcherSettings`).
pub async fn run(
    cfg: Config,
    registry: &Registry,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), DispatchError> {
    cfg.dispatcher
        .isolation
        .validate()
        .map_err(DispatchError::Config)?;
    let sealer = Sealer::from_config(&cfg.secrets).map_err(|e| DispatchError::Config(e.to_string()))?;
    let metrics = DispatcherMetrics::register(registry);
    let pool = hookstream_store::connect(&cfg.database).await?;
    if cfg.database.migrate_on_start {
        hookstream_store::migrate(&pool).await?;
    }
    let subs = Subscriptions::load(pool.clone(), sealer).await?;
    let watcher = tokio::spawn(subs.clone().watch(
        Duration::from_millis(cfg.dispatcher.subscription_refresh_ms),
        shutdown.clone(),
    ));
    let tracker = Arc::new(Mutex::new(OffsetTracker::new()));
    let consumer: Arc<StreamConsumer<RebalanceContext>> = Arc::new(
        hookstream_kafka::consumer_config(&cfg.kafka, &cfg.kafka.group_id).create_with_context(
            RebalanceContext {
                tracker: tracker.clone(),
            },
        )?,
    );
    consumer.subscribe(&[cfg.kafka.topics.events.as_str()])?;
    let producer: FutureProducer =
        hookstream_kafka::producer_config(&cfg.kafka, Duration::from_secs(30)).create()?;
    let attempt_log = hookstream_kafka::producer_config(&cfg.kafka, Duration::from_secs(30))
        .set("linger.ms", "20")
        .create_with_context(AttemptLogContext {
            dropped: metrics.attempt_records_dropped.clone(),
        })?;
    let shared = Arc::new(Shared {
        engine: Engine::new(&cfg.delivery)?,
        subs,
        producer,
        attempt_log,
        pool,
        dlq_topic: cfg.kafka.topics.dlq.clone(),
        attempts_topic: cfg.kafka.topics.attempts.clone(),
        retry: cfg.retry.clone(),
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
        isolation: Isolation::new(cfg.dispatcher.isolation.clone(), metrics.clone()),
        failing_since: Mutex::new(HashMap::new()),
        deliveries: Arc::new(Semaphore::new(cfg.dispatcher.max_in_flight_deliveries.max(1))),
        settings: cfg.dispatcher.clone(),
    });
    let evictor = tokio::spawn(evict_idle_guards(shared.clone(), shutdown.clone()));

    let lag = tokio::spawn(watch_lag(
        consumer.clone(),
        tracker.clone(),
        metrics.clone(),
        cfg.kafka.group_id.clone(),
        shutdown.clone(),
    ));
    if cfg.retry.enabled {
        retry::ensure_tier_topics(&cfg.kafka, &cfg.retry).await?;
    }
    let retry_role = cfg.retry.enabled.then(|| {
        tokio::spawn(retry::run_role(
            shared.clone(),
            cfg.kafka.clone(),
            cfg.dispatcher.max_in_flight_events,
            Duration::from_millis(cfg.dispatcher.shutdown_grace_ms),
            shutdown.clone(),
        ))
    });
    let dlq_sink = cfg.dlq.sink_enabled.then(|| {
        let grace = Duration::from_millis(cfg.dispatcher.shutdown_grace_ms);
        let sink = dlq_sink::run(
            shared.pool.clone(),
            cfg.kafka.clone(),
            cfg.dlq.clone(),
            metrics.clone(),
            grace,
            shutdown.clone(),
        );
        tokio::spawn(sink)
    });
    let slots = Arc::new(Semaphore::new(cfg.dispatcher.max_in_flight_events.max(1)));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Ticket>();
    let tasks = TaskTracker::new();
    health.set_ready(true);
    tracing::info!(topic = %cfg.kafka.topics.events, group = %cfg.kafka.group_id, "dispatcher consuming");

    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            Some(ticket) = done_rx.recv() => complete(&consumer, &tracker, &ticket),
            received = consumer.recv(), if slots.available_permits() > 0 => {
                let msg = match received {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(error = %e, "kafka consumer error");
                        continue;
                    }
                };
                let permit = slots.clone().try_acquire_owned().expect("a permit is available");
                let timestamp_ms = msg.timestamp().to_millis().unwrap_or_else(now_ms);
                let ticket = tracker.lock().expect("tracker lock").begin(msg.topic(), msg.partition(), msg.offset(), timestamp_ms);
                let origin = SourcePosition { topic: msg.topic().to_string(), partition: msg.partition(), offset: msg.offset() };
                let payload = msg.payload().map(Bytes::copy_from_slice).unwrap_or_default();
                let shared = shared.clone();
                let done_tx = done_tx.clone();
                tasks.spawn(async move {
                    if process(&shared, payload, origin, permit).await {
                        let _ = done_tx.send(ticket);
                    }
                });
            }
        }
    }

    // Drain: no new messages; let in-flight deliveries finish within the grace period, store
    // the offsets they complete, commit, leave the group.
    health.set_ready(false);
    drain(
        &consumer,
        &tracker,
        &mut done_rx,
        &tasks,
        Duration::from_millis(cfg.dispatcher.shutdown_grace_ms),
    )
    .await;
    if let Some(role) = retry_role {
        match role.await {
            Ok(Err(e)) => tracing::error!(error = %e, "retry role stopped with an error"),
            Err(e) => tracing::error!(error = %e, "retry role panicked"),
            Ok(Ok(())) => {}
        }
    }
    if let Some(sink) = dlq_sink {
        match sink.await {
            Ok(Err(e)) => tracing::error!(error = %e, "DLQ sink stopped with an error"),
            Err(e) => tracing::error!(error = %e, "DLQ sink panicked"),
            Ok(Ok(())) => {}
        }
    }
    watcher.abort();
    lag.abort();
    evictor.abort();
    tracing::info!("dispatcher stopped");
    Ok(())
}

/// The end of a consumer's life: no new messages; in-flight work finishes within `grace`
/// and its offsets are stored; then a final commit, and the group is left. Work unfinished
/// after `grace` stores nothing and is redelivered to the partitions' next owner.
pub(crate) async fn drain<C: ConsumerContext + 'static>(
    consumer: &StreamConsumer<C>,
    tracker: &Mutex<OffsetTracker>,
    done_rx: &mut mpsc::UnboundedReceiver<Ticket>,
    tasks: &TaskTracker,
    grace: Duration,
) {
    tasks.close();
    let deadline = tokio::time::sleep(grace);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            Some(ticket) = done_rx.recv() => store_completed(consumer, tracker, &ticket),
            _ = tasks.wait() => {
                while let Ok(ticket) = done_rx.try_recv() {
                    store_completed(consumer, tracker, &ticket);
                }
                break;
            }
            _ = &mut deadline => {
                tracing::warn!(in_flight = tracker.lock().expect("tracker lock").total_depth(),
                    "grace period over; unfinished work will be redelivered");
                break;
            }
        }
    }
    if let Err(e) = consumer.commit_consumer_state(CommitMode::Sync) {
        // Nothing stored since the last auto-commit is a normal case.
        tracing::debug!(error = %e, "final commit");
    }
    consumer.unsubscribe();
}

/// Marks a message done and stores the partition's new committable offset, if it advanced.
fn complete(consumer: &StreamConsumer<RebalanceContext>, tracker: &Mutex<OffsetTracker>, ticket: &Ticket) {
    store_completed(consumer, tracker, ticket);
}

pub(crate) fn store_completed<C: ConsumerContext + 'static>(
    consumer: &StreamConsumer<C>,
    tracker: &Mutex<OffsetTracker>,
    ticket: &Ticket,
) {
    let Some(offset) = tracker.lock().expect("tracker lock").complete(ticket) else {
        return;
    };
    let mut tpl = TopicPartitionList::new();
    if tpl
        .add_partition_offset(&ticket.topic, ticket.partition, Offset::Offset(offset))
        .is_ok()
    {
        if let Err(e) = consumer.store_offsets(&tpl) {
            // The partition was revoked meanwhile; its new owner redoes the work.
            tracing::debug!(error = %e, topic = %ticket.topic, partition = ticket.partition, "offset not stored");
        }
    }
}

/// Processes one record to the end. Returns false only when shutting down left work undone
/// (then the offset must not be stored).
async fn process(
    shared: &Shared,
    payload: Bytes,
    origin: SourcePosition,
    _permit: OwnedSemaphorePermit,
) -> bool {
    shared.metrics.in_flight.inc();
    let finished = process_inner(shared, payload, origin).await;
    shared.metrics.in_flight.dec();
    finished
}

async fn process_inner(shared: &Shared, payload: Bytes, origin: SourcePosition) -> bool {
    let event = match EventEnvelope::decode(payload.clone()) {
        Ok(e) => e,
        Err(e) => {
            shared.metrics.events.with_label_values(&["undecodable"]).inc();
            let letter = DeadLetter {
                reason: format!("undecodable event record: {e}"),
                error_class: "decode".into(),
                raw: payload,
                origin: Some(origin),
                dead_at_ms: now_ms(),
                ..Default::default()
            };
            return dead_letter(shared, letter, "").await;
        }
    };
    let route = match Uuid::parse_str(&event.tenant_id) {
        Err(_) => Route::UnknownTenant,
        Ok(tenant) => loop {
            match shared.subs.route(tenant, &event.event_type).await {
                Ok(r) => break r,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read subscriptions, retrying");
                    if !pause(shared, Duration::from_secs(1)).await {
                        return false;
                    }
                }
            }
        },
    };
    let endpoints = match route {
        Route::UnknownTenant => {
            shared.metrics.events.with_label_values(&["unknown_tenant"]).inc();
            let letter = DeadLetter {
                tenant_id: event.tenant_id.clone(),
                reason: format!("unknown tenant {}", event.tenant_id),
                error_class: "unknown_tenant".into(),
                origin: Some(origin),
                dead_at_ms: now_ms(),
                event: Some(event),
                ..Default::default()
            };
            return dead_letter(shared, letter, "").await;
        }
        Route::Endpoints(eps) if eps.is_empty() => {
            shared.metrics.events.with_label_values(&["unsubscribed"]).inc();
            return true;
        }
        Route::Endpoints(eps) => eps,
    };
    shared.metrics.events.with_label_values(&["routed"]).inc();
    // Memory follows deliveries in flight, not events: a wide fan-out waits for room.
    let width = endpoints
        .len()
        .min(shared.settings.max_in_flight_deliveries.max(1));
    let window = shared
        .deliveries
        .clone()
        .acquire_many_owned(u32::try_from(width).unwrap_or(u32::MAX));
    let _window = tokio::select! {
        permits = window => match permits {
            Ok(p) => p,
            Err(_) => return false, // closed: never, but not worth a panic
        },
        _ = shared.shutdown.cancelled() => return false,
    };
    let deliveries = endpoints
        .iter()
        .map(|ep| attempt(shared, &event, ep, 1, 0, &origin));
    futures::future::join_all(deliveries)
        .await
        .into_iter()
        .all(|finished| finished)
}

/// One event to one endpoint, attempt number `attempt` (1 on the main path). A retryable
/// failure is handed to the retry tiers (or, when the schedule is exhausted or retries are
/// off, dead-lettered); a permanent one is dead-lettered. True once the delivery is done or
/// durably handed on.
pub(crate) async fn attempt(
    shared: &Shared,
    event: &EventEnvelope,
    ep: &ActiveEndpoint,
    attempt: u32,
    first_attempt_at_ms: i64,
    origin: &SourcePosition,
) -> bool {
    let admitted = tokio::select! {
        admitted = shared.isolation.admit(&ep.endpoint, shared.retry.enabled) => admitted,
        _ = shared.shutdown.cancelled() => return false,
    };
    let pass = match admitted {
        Ok(pass) => pass,
        // Refused by the breaker, the rate limit or the concurrency cap: no attempt was made.
        Err(refusal) => {
            // (Boxed, like every rarely taken await below: many attempts wait for admission at
            // once, and each reserves the size of its largest state.)
            return Box::pin(retry::defer(
                shared,
                event,
                ep.endpoint.id,
                attempt - 1,
                first_attempt_at_ms,
                origin,
                refusal,
            ))
            .await;
        }
    };
    let started_ms = now_ms();
    let target = Target {
        url: &ep.endpoint.url,
        timeout: Duration::from_millis(ep.endpoint.timeout_ms.max(1) as u64),
        secrets: &ep.secrets,
    };
    let msg = Message {
        id: &event.event_id,
        event_type: &event.event_type,
        body: &event.payload,
        attempt,
    };
    shared.metrics.requests_in_flight.inc();
    let outcome = Box::pin(shared.engine.deliver(target, msg)).await;
    shared.metrics.requests_in_flight.dec();
    pass.finish(outcome.verdict, outcome.class, outcome.latency);
    record(shared, &outcome);
    log_attempt(shared, event, ep, attempt, started_ms, &outcome);
    Box::pin(track_health(shared, ep, &outcome)).await;
    let first_attempt_at_ms = if attempt == 1 {
        started_ms
    } else {
        first_attempt_at_ms
    };
    let reason = match outcome.verdict {
        Verdict::Delivered => return true,
        Verdict::Retryable if shared.retry.enabled => {
            match Box::pin(retry::schedule(
                shared,
                event,
                ep.endpoint.id,
                attempt,
                first_attempt_at_ms,
                origin,
                &outcome,
            ))
            .await
            {
                Some(handed_on) => return handed_on,
                None => format!(
                    "gave up after {attempt} attempts: {}",
                    outcome.error.as_deref().unwrap_or("failed")
                ),
            }
        }
        Verdict::Gone => {
            Box::pin(disable(
                shared,
                ep,
                "gone",
                "receiver answered 410 Gone".into(),
                None,
            ))
            .await;
            describe(&outcome)
        }
        _ => describe(&outcome),
    };
    tracing::info!(event_id = %event.event_id, endpoint_id = %ep.endpoint.id,
        class = outcome.class.as_str(), reason = %reason, "delivery failed, dead-lettering");
    let letter = DeadLetter {
        event: Some(event.clone()),
        endpoint_id: ep.endpoint.id.to_string(),
        tenant_id: event.tenant_id.clone(),
        reason,
        error_class: outcome.class.as_str().into(),
        last_status: outcome.status.map(i32::from).unwrap_or(0),
        attempts: attempt,
        first_attempt_at_ms,
        dead_at_ms: now_ms(),
        origin: Some(origin.clone()),
        raw: Bytes::new(),
        last_response: outcome.response.clone(),
    };
    Box::pin(dead_letter(shared, letter, &ep.endpoint.id.to_string())).await
}

fn describe(outcome: &Outcome) -> String {
    let what = match outcome.verdict {
        Verdict::Gone => "endpoint gone (HTTP 410), endpoint disabled",
        Verdict::Permanent => "permanent failure",
        Verdict::Retryable => "failed (retries are disabled)",
        Verdict::Delivered => "delivered",
    };
    match &outcome.error {
        Some(e) => format!("{what}: {e}"),
        None => what.to_string(),
    }
}

fn verdict_label(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Delivered => "delivered",
        Verdict::Retryable => "retryable",
        Verdict::Permanent => "permanent",
        Verdict::Gone => "gone",
    }
}

fn record(shared: &Shared, outcome: &Outcome) {
    let label = verdict_label(outcome.verdict);
    shared.metrics.deliveries.with_label_values(&[label]).inc();
    shared
        .metrics
        .attempt_duration
        .with_label_values(&[label])
        .observe(outcome.latency.as_secs_f64());
}

/// Produces the attempt record without waiting: the attempt log must never slow deliveries.
/// Records Kafka refuses are counted in `attempt_records_dropped`.
fn log_attempt(
    shared: &Shared,
    event: &EventEnvelope,
    ep: &ActiveEndpoint,
    attempt: u32,
    at_ms: i64,
    outcome: &Outcome,
) {
    let record = AttemptRecord {
        event_id: event.event_id.clone(),
        tenant_id: event.tenant_id.clone(),
        endpoint_id: ep.endpoint.id.to_string(),
        attempt,
        status: outcome.status.map(i32::from).unwrap_or(0),
        outcome: verdict_label(outcome.verdict).into(),
        error_class: outcome.class.as_str().into(),
        error: outcome.error.clone().unwrap_or_default(),
        latency_ms: outcome.latency.as_millis() as u64,
        attempted_at_ms: at_ms,
        response: outcome.response.clone(),
    }
    .encode_to_vec();
    let key = ep.endpoint.id.to_string();
    if shared
        .attempt_log
        .send(BaseRecord::to(&shared.attempts_topic).key(&key).payload(&record))
        .is_err()
    {
        // Queue full or the topic unknown: counted, never waited for.
        shared.metrics.attempt_records_dropped.inc();
    }
}

/// Counts attempt records Kafka did not acknowledge (no task or future per record: the log
/// is written at the delivery rate).
struct AttemptLogContext {
    dropped: hookstream_telemetry::prometheus::IntCounter,
}

impl ClientContext for AttemptLogContext {}

impl ProducerContext for AttemptLogContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.dropped.inc();
        }
    }
}

/// Every 5 s: lag in messages (high watermark − committed) and in seconds (age of the oldest
/// unfinished message) for each assigned partition, and the in-flight depth.
async fn watch_lag(
    consumer: Arc<StreamConsumer<RebalanceContext>>,
    tracker: Arc<Mutex<OffsetTracker>>,
    metrics: DispatcherMetrics,
    group: String,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = shutdown.cancelled() => return,
        }
        let c = consumer.clone();
        let lags = tokio::task::spawn_blocking(move || -> Result<Vec<(String, i32, i64)>, KafkaError> {
            let assignment = c.assignment()?;
            let committed = c.committed_offsets(assignment, Duration::from_secs(5))?;
            let mut out = Vec::new();
            for el in committed.elements() {
                let (low, high) = c.fetch_watermarks(el.topic(), el.partition(), Duration::from_secs(5))?;
                let position = match el.offset() {
                    Offset::Offset(o) => o,
                    _ => low,
                };
                out.push((el.topic().to_string(), el.partition(), (high - position).max(0)));
            }
            Ok(out)
        })
        .await;
        let Ok(Ok(lags)) = lags else { continue };
        let snapshot = tracker.lock().expect("tracker lock").snapshot();
        metrics.lag_messages.reset();
        metrics.lag_seconds.reset();
        metrics.uncommitted.reset();
        let now = now_ms();
        for (topic, partition, lag) in lags {
            let p = partition.to_string();
            metrics
                .lag_messages
                .with_label_values(&[group.as_str(), topic.as_str(), p.as_str()])
                .set(lag);
            let state = snapshot
                .iter()
                .find(|s| s.topic == topic && s.partition == partition);
            let age = state
                .and_then(|s| s.oldest_timestamp_ms)
                .map(|ts| (now - ts).max(0) as f64 / 1000.0);
            metrics
                .lag_seconds
                .with_label_values(&[topic.as_str(), p.as_str()])
                .set(age.unwrap_or(0.0));
            metrics
                .uncommitted
                .with_label_values(&[topic.as_str(), p.as_str()])
                .set(state.map_or(0, |s| s.depth) as i64);
        }
    }
}

/// Keeps `failing_since` (in the database and in memory) in step with outcomes, touching
/// the database only when an endpoint turns from healthy to failing or back. An endpoint
/// failing with no success for `disable_after_failing_ms` is disabled.
async fn track_health(shared: &Shared, ep: &ActiveEndpoint, outcome: &Outcome) {
    let id = ep.endpoint.id;
    let known = shared
        .failing_since
        .lock()
        .expect("health lock")
        .get(&id)
        .copied()
        .unwrap_or_else(|| ep.endpoint.failing_since.map(|t| t.timestamp_millis()));
    match outcome.verdict {
        Verdict::Delivered => {
            if known.is_some() {
                if let Err(e) = hookstream_store::endpoints::mark_healthy(&shared.pool, id).await {
                    tracing::warn!(endpoint_id = %id, error = %e, "could not record the endpoint's recovery");
                    return;
                }
                tracing::info!(endpoint_id = %id, "endpoint recovered");
            }
            shared.failing_since.lock().expect("health lock").insert(id, None);
        }
        Verdict::Gone => {}
        Verdict::Retryable | Verdict::Permanent => {
            let since = match known {
                Some(since) => since,
                None => match hookstream_store::endpoints::mark_failing(&shared.pool, id).await {
                    Ok(Some(since)) => since.timestamp_millis(),
                    Ok(None) => return, // disabled or deleted meanwhile
                    Err(e) => {
                        tracing::warn!(endpoint_id = %id, error = %e, "could not record the endpoint's failure");
                        return;
                    }
                },
            };
            shared
                .failing_since
                .lock()
                .expect("health lock")
                .insert(id, Some(since));
            let window = shared.settings.disable_after_failing_ms;
            if now_ms() - since >= window as i64 {
                let reason = format!(
                    "no successful delivery for {} (failing since {})",
                    humanize_ms(window),
                    chrono::DateTime::from_timestamp_millis(since)
                        .unwrap_or_default()
                        .to_rfc3339()
                );
                disable(shared, ep, "failing", reason, Some(Duration::from_millis(window))).await;
            }
        }
    }
}

fn humanize_ms(ms: u64) -> String {
    match ms {
        ms if ms >= 86_400_000 && ms % 86_400_000 == 0 => format!("{} days", ms / 86_400_000),
        ms if ms >= 3_600_000 && ms % 3_600_000 == 0 => format!("{} h", ms / 3_600_000),
        ms if ms % 1_000 == 0 => format!("{} s", ms / 1_000),
        ms => format!("{ms} ms"),
    }
}

/// Disables an endpoint (on 410, or failing too long: `failing_for` re-checks that in the
/// database, where another instance may have seen a success) and, when configured, publishes
/// `endpoint.disabled` to its tenant in the same transaction.
async fn disable(
    shared: &Shared,
    ep: &ActiveEndpoint,
    label: &str,
    reason: String,
    failing_for: Option<Duration>,
) {
    let id = ep.endpoint.id;
    let notice = shared.settings.publish_endpoint_disabled.then(|| {
        hookstream_producer::Event::new(
            ep.endpoint.tenant_id,
            "endpoint.disabled",
            serde_json::json!({
                "endpoint_id": id,
                "url": ep.endpoint.url,
                "reason": reason,
                "disabled_at": chrono::Utc::now().to_rfc3339(),
            }),
        )
        .idempotency_key(format!("endpoint.disabled:{id}:{}", now_ms()))
    });
    match hookstream_store::endpoints::disable(&shared.pool, id, &reason, failing_for, notice).await {
        Ok(true) => {
            shared
                .metrics
                .endpoints_disabled
                .with_label_values(&[label])
                .inc();
            shared.failing_since.lock().expect("health lock").remove(&id);
            tracing::warn!(endpoint_id = %id, reason = %reason, "endpoint disabled");
        }
        Ok(false) => tracing::debug!(endpoint_id = %id, "endpoint already disabled (or recovered meanwhile)"),
        Err(e) => tracing::warn!(endpoint_id = %id, error = %e, "could not disable endpoint"),
    }
}

/// Drops idle endpoint guards every minute.
async fn evict_idle_guards(shared: Arc<Shared>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(60)) => shared.isolation.evict_idle(),
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Produces a dead letter and waits for Kafka's acknowledgement, retrying until it is
/// acknowledged or the dispatcher shuts down (then returns false: the offset stays unstored).
pub(crate) async fn dead_letter(shared: &Shared, letter: DeadLetter, key: &str) -> bool {
    let class = if letter.error_class.is_empty() {
        ErrorClass::Other.as_str().to_string()
    } else {
        letter.error_class.clone()
    };
    let bytes = letter.encode_to_vec();
    loop {
        let record = FutureRecord::to(&shared.dlq_topic).key(key).payload(&bytes);
        match shared.producer.send(record, Duration::from_secs(5)).await {
            Ok(_) => {
                shared
                    .metrics
                    .dead_letters
                    .with_label_values(&[class.as_str()])
                    .inc();
                return true;
            }
            Err((e, _)) => {
                tracing::warn!(error = %e, "dead letter not acknowledged, retrying");
                if !pause(shared, Duration::from_secs(1)).await {
                    return false;
                }
            }
        }
    }
}

/// Sleeps unless shutting down; false when shutting down.
async fn pause(shared: &Shared, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = shared.shutdown.cancelled() => false,
    }
}

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
