//! The dispatcher: delivers every event, signed, to every subscribed endpoint.
//!
//! A process runs up to four roles, each a tracked consumer (`hookstream_kafka::consumer`):
//! the events role on `hookstream.events` (`events.rs`), the retry role on the delay tiers
//! (`retry.rs`), the DLQ sink (`dlq_sink.rs`) and the attempt sink (`attempt_sink.rs`; both
//! sinks store rows through `sink.rs`). An event is routed with the subscription
//! snapshot (`subscriptions.rs`) and fanned out (`fanout.rs`); each attempt's outcome
//! becomes delivered, a retry-tier record or a dead letter (`outcome.rs`, `handoff.rs`); the
//! attempt log (`attempt_log.rs`) and endpoint health (`endpoint_health.rs`) follow every
//! attempt; per-endpoint guards (`isolation.rs`) keep one endpoint from hurting another, and
//! the breakers that are not closed are published for operators (`breaker_report.rs`).
//!
//! Every long-running task is supervised: one that stops unexpectedly makes `/healthz` fail
//! and the process exit non-zero. An offset is stored only when every delivery of every event
//! up to it finished or was durably handed on (invariant 1).

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
mod attempt_log;
mod failing_since;
pub mod group_limits;
mod pressure;
mod sink;
pub mod attempt_sink;
pub mod dlq_sink;
mod work;
mod metrics;
pub mod isolation;
pub mod config;
mod schedule;
pub mod subscriptions;
mod context;
mod breaker_report;
mod endpoint_health;
mod handoff;
mod outcome;
mod payloads;
mod fanout;
mod events;
pub mod retry;

use std::sync::Arc;
use std::time::Duration;

use hookstream_delivery::Engine;
use hookstream_kafka::{ConsumerMetrics, ConsumerSettings, TopicError};
use hookstream_store::sealing::Sealer;
use hookstream_store::StoreError;
use hookstream_telemetry::prometheus::Registry;
use hookstream_telemetry::{Health, ServiceError, Supervisor, TaskFailed};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use config::{Config, DispatcherSettings, Role};
pub use metrics::DispatcherMetrics;

use context::Context;
pub(crate) use work::now_ms;

/// How long a stopping dispatcher waits for Kafka to take the attempt log's last records.
const ATTEMPT_LOG_FLUSH: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("kafka error: {0}")]
    Kafka(#[from] hookstream_kafka::rdkafka::error::KafkaError),
    #[error(transparent)]
    Engine(#[from] hookstream_delivery::EngineError),
    #[error("topics: {0}")]
    Topics(#[from] TopicError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(transparent)]
    TaskFailed(#[from] TaskFailed),
    #[error(transparent)]
    KafkaUnusable(#[from] hookstream_kafka::ProbeError),
}

impl ServiceError for DispatchError {
    fn exit_code(&self) -> u8 {
        match self {
            // Restarting will not help: an operator must change something.
            DispatchError::Config(_) => 2,
            DispatchError::Topics(e) if e.is_configuration() => 2,
            DispatchError::KafkaUnusable(e) if e.is_configuration() => 2,
            _ => 1,
        }
    }
}

/// The topics other than the retry tiers that the roles this process runs read or write.
fn topics_used(cfg: &Config) -> Vec<String> {
    let topics = &cfg.kafka.topics;
    let delivers =
        cfg.dispatcher.runs(Role::Events) || (cfg.dispatcher.runs(Role::Retry) && cfg.retry.enabled);
    let mut used = Vec::new();
    if cfg.dispatcher.runs(Role::Events) {
        used.push(topics.events.clone());
    }
    if delivers || (cfg.dispatcher.runs(Role::DlqSink) && cfg.dlq.sink_enabled) {
        used.push(topics.dlq.clone());
    }
    if (delivers && cfg.attempts.log != attempt_log::LogMode::Off)
        || (cfg.dispatcher.runs(Role::AttemptSink) && cfg.attempts.sink_enabled)
    {
        used.push(topics.attempts.clone());
    }
    used
}

/// Runs the dispatcher's roles until `shutdown` is cancelled (then drains, see
/// `DispatcherSettings`) or one of its tasks stops unexpectedly (then it drains the others and
/// returns the failure).
pub async fn run(
    cfg: Config,
    registry: &Registry,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), DispatchError> {
    let sealer = Sealer::from_config(&cfg.secrets).map_err(|e| DispatchError::Config(e.to_string()))?;
    // Wrong credentials or an unreachable cluster stop the start here, saying which.
    if !hookstream_kafka::probe_at_start(&cfg.kafka, &shutdown).await? {
        return Ok(()); // asked to stop while waiting for Kafka
    }
    // A topic this process uses that is missing or refused would otherwise show only as a
    // hand-off retried for ever behind a green health check (the tiers are made below).
    hookstream_kafka::topics::check_exist(&cfg.kafka, &topics_used(&cfg)).await?;
    let metrics = DispatcherMetrics::register(registry);
    for role in [Role::Events, Role::Retry, Role::DlqSink, Role::AttemptSink] {
        let runs = cfg.dispatcher.runs(role)
            && match role {
                Role::Retry => cfg.retry.enabled,
                Role::DlqSink => cfg.dlq.sink_enabled,
                Role::AttemptSink => cfg.attempts.sink_enabled,
                Role::Events => true,
            };
        metrics
            .roles
            .with_label_values(&[role.as_str()])
            .set(i64::from(runs));
    }
    let consumer_metrics = ConsumerMetrics::register(registry);
    let pool = hookstream_store::connect(&cfg.database).await?;
    if cfg.database.migrate_on_start {
        hookstream_store::migrate(&pool).await?;
    }
    let retrying = cfg.retry.enabled;
    // Only the roles that hand records to the tiers or read them need the tier topics (a
    // process running only the sinks does not).
    let uses_tiers = cfg.dispatcher.runs(Role::Events) || cfg.dispatcher.runs(Role::Retry);
    if retrying && uses_tiers {
        // Without the tiers no retry can be handed on; with too short a retention a record
        // could be deleted before it is due.
        hookstream_kafka::ensure_topics(
            &cfg.kafka,
            &hookstream_kafka::topics::tier_specs(&cfg.kafka, &cfg.retry),
        )
        .await?;
        for (topic, retention_ms) in hookstream_kafka::topics::check_tiers(&cfg.kafka, &cfg.retry).await? {
            if retention_ms >= 0 {
                metrics
                    .tier_retention
                    .with_label_values(&[topic.as_str()])
                    .set(retention_ms as f64 / 1000.0);
            }
        }
        metrics.init_tiers(cfg.retry.tiers().iter().map(|t| cfg.retry.tier_label(&t.topic)));
    }
    let keys = hookstream_store::payload_keys::Keyring::new(
        pool.clone(),
        Arc::new(Sealer::from_config(&cfg.secrets).map_err(|e| DispatchError::Config(e.to_string()))?),
    );
    let subs = subscriptions::Subscriptions::load(
        pool.clone(),
        sealer,
        metrics.clone(),
        cfg.database.answer_deadline(),
    )
    .await?;
    let producer = hookstream_kafka::HandoffProducer::new(&cfg.kafka, Duration::from_secs(30))?;
    let attempt_log = attempt_log::AttemptLog::new(
        &cfg.kafka,
        cfg.attempts.log,
        metrics.attempt_records_dropped.clone(),
    )?;
    // Replicas that deliver share the endpoints' rate limits and concurrency caps.
    let delivers = cfg.dispatcher.runs(Role::Events) || cfg.dispatcher.runs(Role::Retry);
    let group = if delivers {
        let group = Arc::new(group_limits::GroupLimits::new(
            pool.clone(),
            metrics.clone(),
            cfg.database.answer_deadline(),
        ));
        group.join().await;
        Some(group)
    } else {
        None
    };
    let ctx = Arc::new(Context {
        engine: Engine::new(&cfg.delivery)?,
        subs: subs.clone(),
        keys,
        producer,
        attempt_log,
        pool: pool.clone(),
        topics: cfg.kafka.topics.clone(),
        retry: cfg.retry.clone(),
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
        isolation: isolation::Isolation::new(
            cfg.dispatcher.isolation.clone(),
            metrics.clone(),
            group.clone(),
        ),
        health: Default::default(),
        deliveries: Arc::new(Semaphore::new(cfg.dispatcher.max_in_flight_deliveries.max(1))),
        settings: cfg.dispatcher.clone(),
        answer_deadline: cfg.database.answer_deadline(),
    });

    let grace = Duration::from_millis(cfg.dispatcher.shutdown_grace_ms);
    let mut sup = Supervisor::new(health.clone(), shutdown.clone(), grace + Duration::from_secs(10));
    if let Some(group) = group {
        sup.spawn(
            "breaker report",
            breaker_report::run(ctx.clone(), pool.clone(), group.member(), shutdown.clone()),
        );
        sup.spawn("group limits", group.run(shutdown.clone()));
    }
    sup.spawn(
        "subscription watcher",
        subs.watch(
            Duration::from_millis(cfg.dispatcher.subscription_refresh_ms),
            shutdown.clone(),
        ),
    );
    sup.spawn("guard evictor", evict_idle_guards(ctx.clone(), shutdown.clone()));
    sup.spawn("attempt log", ctx.attempt_log.watch(shutdown.clone()));
    let consumer = |role: Role, group: &str, topics: Vec<String>, max_in_flight: usize| ConsumerSettings {
        role: role.as_str(),
        group_id: group.to_string(),
        topics,
        max_in_flight,
        grace,
    };
    if cfg.dispatcher.runs(Role::Events) {
        let settings = consumer(
            Role::Events,
            &cfg.kafka.group_id,
            vec![cfg.kafka.topics.events.clone()],
            cfg.dispatcher.max_in_flight_events,
        );
        let handler = Arc::new(events::EventsRole { ctx: ctx.clone() });
        spawn_role(
            &mut sup,
            "events role",
            &cfg.kafka,
            settings,
            handler,
            &consumer_metrics,
            &shutdown,
        );
    }
    if cfg.dispatcher.runs(Role::Retry) && retrying {
        let tiers = cfg.retry.tiers().into_iter().map(|t| t.topic).collect();
        let settings = consumer(Role::Retry, &cfg.retry.group_id, tiers, cfg.retry.max_waiting);
        let handler = Arc::new(retry::RetryRole::new(ctx.clone()));
        spawn_role(
            &mut sup,
            "retry role",
            &cfg.kafka,
            settings,
            handler,
            &consumer_metrics,
            &shutdown,
        );
    }
    if cfg.dispatcher.runs(Role::DlqSink) && cfg.dlq.sink_enabled {
        let settings = consumer(
            Role::DlqSink,
            &cfg.dlq.sink_group_id,
            vec![cfg.kafka.topics.dlq.clone()],
            dlq_sink::MAX_IN_FLIGHT,
        );
        let (writer, write_rows) = dlq_sink::writer(pool.clone(), cfg.database.answer_deadline());
        sup.spawn("dead-letter writer", async move {
            write_rows.await;
            Ok::<(), std::convert::Infallible>(())
        });
        let handler = Arc::new(dlq_sink::DlqSink {
            writer,
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
        });
        spawn_role(
            &mut sup,
            "dlq sink",
            &cfg.kafka,
            settings,
            handler,
            &consumer_metrics,
            &shutdown,
        );
        sup.spawn(
            "dead-letter pruner",
            dlq_sink::prune_loop(pool.clone(), cfg.dlq.clone(), metrics.clone(), shutdown.clone()),
        );
    }
    if cfg.dispatcher.runs(Role::AttemptSink) && cfg.attempts.sink_enabled {
        // Today's partitions exist before the first row (and a database that refuses that
        // fails the start, as the migrations would).
        attempt_sink::maintain_once(&pool, &cfg.attempts, &metrics, chrono::Utc::now().date_naive()).await?;
        let settings = consumer(
            Role::AttemptSink,
            &cfg.attempts.sink_group_id,
            vec![cfg.kafka.topics.attempts.clone()],
            attempt_sink::MAX_IN_FLIGHT,
        );
        // On a thread of its own at a lower CPU priority: on a busy machine the sink lags
        // (and catches up) rather than taking CPU from delivery (see attempt_sink.rs).
        // Sampled on this runtime, the one that delivers.
        let (pressed, sampling) = pressure::sample(
            tokio::runtime::Handle::current(),
            f64::from(cfg.attempts.sink_hold_busy_percent) / 100.0,
            pressure::EVERY,
            metrics.delivery_busy_ratio.clone(),
            shutdown.clone(),
        );
        sup.spawn("delivery pressure", sampling);
        let sink = attempt_sink::Setup {
            kafka: cfg.kafka.clone(),
            pressed,
            consumer: settings,
            database: cfg.database.clone(),
            attempts: cfg.attempts.clone(),
            metrics: metrics.clone(),
            consumer_metrics: consumer_metrics.clone(),
        };
        let sink_shutdown = shutdown.clone();
        sup.spawn_niced("attempt sink", cfg.attempts.sink_niceness, move || {
            attempt_sink::run(sink, sink_shutdown)
        });
    }
    health.set_ready(true);
    tracing::info!(roles = ?cfg.dispatcher.roles, "dispatcher running");
    let stopped = sup.wait().await;
    // Every role has stopped recording: what the attempt log holds goes to Kafka now (a
    // dropped producer would purge it).
    let log = ctx.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || log.attempt_log.flush(ATTEMPT_LOG_FLUSH)).await {
        tracing::warn!(error = %e, "attempt log not flushed at shutdown");
    }
    stopped?;
    tracing::info!("dispatcher stopped");
    Ok(())
}

/// Runs a role's tracked consumer under the supervisor (the one way every role is started).
fn spawn_role<H: hookstream_kafka::Handler>(
    sup: &mut Supervisor,
    name: &'static str,
    kafka: &hookstream_config::KafkaConfig,
    settings: ConsumerSettings,
    handler: Arc<H>,
    metrics: &ConsumerMetrics,
    shutdown: &CancellationToken,
) {
    let (kafka, metrics, shutdown) = (kafka.clone(), metrics.clone(), shutdown.clone());
    sup.spawn(name, async move {
        hookstream_kafka::consumer::run(&kafka, settings, handler, metrics, shutdown).await
    });
}

/// Drops idle endpoint guards every minute.
async fn evict_idle_guards(ctx: Arc<Context>, shutdown: CancellationToken) -> Result<(), String> {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(60)) => ctx.isolation.evict_idle(),
            _ = shutdown.cancelled() => return Ok(()),
        }
    }
}
