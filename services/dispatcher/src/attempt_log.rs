//! The attempt log: every HTTP attempt is produced to `hookstream.attempts` (protobuf
//! `AttemptRecord`) without waiting, so it never slows delivery. Records Kafka refuses are
//! counted (`hookstream_dispatcher_attempt_records_dropped_total`), never retried. A producer
//! that fails for good (a fatal idempotence error) stops the log: `watch` then returns an
//! error and the supervisor restarts the process, instead of dropping every record silently.
//! At shutdown, once every role has stopped, `flush` waits for Kafka to take what is queued
//! (dropping the producer would purge its queue). A SIGKILL loses what the producer still
//! held (its `linger.ms`, 20 ms).
//!
//! One record per attempt, keyed by endpoint. The sink also reads `AttemptBatch` records
//! (many attempts in one), but producing them is not switched on: a version that batched
//! (branch history: commit `f6207d4`) doubled the p50 and p99 commit → receipt at a steady
//! 1,000 events/s with the sink running, for no fan-out gain shown (docs/benchmarks.md).
//!
//! `attempts.log` says which attempts are recorded: `all`, `failures` (every attempt that was
//! not delivered) or `off`. Each record says why the attempt was made (`trigger`) and what
//! happens next (`next`: delivered, retry at a due time in a tier, or dead-lettered); the
//! attempt sink (`attempt_sink.rs`) stores them for `hookstream attempts` and `event show`.

use std::time::Duration;

use hookstream_config::KafkaConfig;
use hookstream_delivery::{Outcome, Verdict};
use hookstream_kafka::rdkafka::error::KafkaError;
use hookstream_kafka::rdkafka::message::DeliveryResult;
use hookstream_kafka::rdkafka::producer::{BaseRecord, Producer as _, ProducerContext, ThreadedProducer};
use hookstream_kafka::rdkafka::types::RDKafkaErrorCode;
use hookstream_kafka::rdkafka::ClientContext;
use hookstream_proto::{AttemptRecord, EventEnvelope, Message as _, ResponseHeader};
use hookstream_telemetry::prometheus::IntCounter;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Which attempts the log records (`attempts.log`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogMode {
    /// Every attempt.
    #[default]
    All,
    /// Attempts that were not delivered.
    Failures,
    /// None (nothing is produced to the attempts topic).
    Off,
}

/// Why an attempt was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The event's first attempt at this endpoint (from the events topic).
    First,
    /// A retry from a tier.
    Retry,
    /// A dead letter replayed (`hookstream dlq replay`).
    Replay,
    /// An event sent again (`hookstream event resend`).
    Resend,
}

impl Trigger {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Trigger::First => "first",
            Trigger::Retry => "retry",
            Trigger::Replay => "replay",
            Trigger::Resend => "resend",
        }
    }
}

/// What happens after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    Delivered,
    /// Attempted again at `due_at_ms`, waiting in `tier` first.
    Retry {
        due_at_ms: i64,
        tier: String,
    },
    DeadLettered,
}

/// The attempt log's producer.
pub(crate) struct AttemptLog {
    producer: ThreadedProducer<LogContext>,
    topic: String,
    mode: LogMode,
    dropped: IntCounter,
    fatal: watch::Receiver<Option<String>>,
}

/// One attempt, as the log records it.
pub(crate) struct Attempt<'a> {
    pub(crate) event: &'a EventEnvelope,
    /// The payload's length in clear (`event` carries it sealed and compressed).
    pub(crate) payload_bytes: usize,
    pub(crate) endpoint_id: Uuid,
    pub(crate) attempt: u32,
    pub(crate) started_ms: i64,
    pub(crate) outcome: &'a Outcome,
    pub(crate) trigger: Trigger,
    pub(crate) next: Next,
}

impl AttemptLog {
    pub(crate) fn new(kafka: &KafkaConfig, mode: LogMode, dropped: IntCounter) -> Result<Self, KafkaError> {
        let (tx, fatal) = watch::channel(None);
        let mut config = hookstream_kafka::producer_config(kafka, Duration::from_secs(30));
        // Records are small and many: a longer linger than the hand-off producer's, unless
        // the operator set one in `[kafka.client]`.
        if !kafka.client.contains_key("linger.ms") {
            config.set("linger.ms", "20");
        }
        let producer = config
            // A delivery report (and a callback on the poll thread) only for a record Kafka
            // did not take: the only ones counted.
            .set("delivery.report.only.error", "true")
            .create_with_context(LogContext {
                dropped: dropped.clone(),
                fatal: tx,
            })?;
        Ok(Self {
            producer,
            topic: kafka.topics.attempts.clone(),
            mode,
            dropped,
            fatal,
        })
    }

    /// Produces the record without waiting (if `attempts.log` records it).
    pub(crate) fn record(&self, a: Attempt<'_>) {
        match self.mode {
            LogMode::Off => return,
            LogMode::Failures if a.outcome.verdict == Verdict::Delivered => return,
            _ => {}
        }
        let (next, next_due_at_ms, next_tier) = match a.next {
            Next::Delivered => ("delivered", 0, String::new()),
            Next::Retry { due_at_ms, tier } => ("retry", due_at_ms, tier),
            Next::DeadLettered => ("dead_lettered", 0, String::new()),
        };
        let record = AttemptRecord {
            event_id: a.event.event_id.clone(),
            tenant_id: a.event.tenant_id.clone(),
            endpoint_id: a.endpoint_id.to_string(),
            attempt: a.attempt,
            status: a.outcome.status.map(i32::from).unwrap_or(0),
            outcome: verdict_label(a.outcome.verdict).into(),
            error_class: a.outcome.class.as_str().into(),
            // Never carries the endpoint's URL (the engine's errors do not).
            error: a.outcome.error.clone().unwrap_or_default(),
            latency_ms: u64::try_from(a.outcome.latency.as_millis()).unwrap_or(u64::MAX),
            attempted_at_ms: a.started_ms,
            response: a.outcome.response.clone(),
            response_headers: a
                .outcome
                .response_headers
                .iter()
                .map(|(name, value)| ResponseHeader {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            response_truncated: a.outcome.response_truncated,
            trigger: a.trigger.as_str().into(),
            next: next.into(),
            next_due_at_ms,
            next_tier,
            event_type: a.event.event_type.clone(),
            aggregate_id: a.event.aggregate_id.clone(),
            payload_bytes: u32::try_from(a.payload_bytes).unwrap_or(u32::MAX),
            committed_at_ms: a.event.created_at_ms,
            relayed_at_ms: a.event.relayed_at_ms,
        }
        .encode_to_vec();
        let key = a.endpoint_id.to_string();
        if self
            .producer
            .send(BaseRecord::to(&self.topic).key(&key).payload(&record))
            .is_err()
        {
            // Queue full or the topic unknown: counted, never waited for.
            self.dropped.inc();
        }
    }

    /// At shutdown, once nothing records any more: waits up to `timeout` for Kafka to take
    /// everything queued (what it has not taken by then is lost with the process, and the
    /// warning says how many records).
    pub(crate) fn flush(&self, timeout: Duration) {
        if let Err(e) = self.producer.flush(timeout) {
            let left = self.producer.in_flight_count();
            tracing::warn!(error = %e, records = left, "attempt log not flushed at shutdown");
        }
    }

    /// Returns an error when the producer failed for good; otherwise waits for shutdown.
    pub(crate) fn watch(
        &self,
        shutdown: CancellationToken,
    ) -> impl std::future::Future<Output = Result<(), String>> {
        let mut fatal = self.fatal.clone();
        async move {
            tokio::select! {
                changed = fatal.wait_for(Option::is_some) => match changed {
                    Ok(reason) => Err(format!("attempt-log producer failed: {}", reason.clone().unwrap_or_default())),
                    Err(_) => Err("attempt-log producer gone".into()),
                },
                _ = shutdown.cancelled() => Ok(()),
            }
        }
    }
}

/// The label of a verdict in metrics and attempt records.
pub(crate) fn verdict_label(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Delivered => "delivered",
        Verdict::Retryable => "retryable",
        Verdict::Permanent => "permanent",
        Verdict::Gone => "gone",
    }
}

/// Counts attempt records Kafka did not acknowledge (no task or future per record: the log
/// is written at the delivery rate), and reports a fatal producer error.
struct LogContext {
    dropped: IntCounter,
    fatal: watch::Sender<Option<String>>,
}

impl ClientContext for LogContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error, KafkaError::Global(RDKafkaErrorCode::Fatal)) {
            tracing::error!(%reason, "attempt-log producer: fatal error");
            self.fatal.send_replace(Some(reason.to_string()));
        } else {
            tracing::warn!(error = %error, %reason, "attempt-log producer error");
        }
    }
}

impl ProducerContext for LogContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.dropped.inc();
        }
    }
}
