//! The dispatcher's Prometheus metrics (`hookstream_dispatcher_*`). Labels come from small
//! fixed sets (outcome, error class), never from URLs or tenant ids.

use hookstream_telemetry::prometheus::{
    exponential_buckets, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry,
};

#[derive(Clone)]
pub struct DispatcherMetrics {
    /// Events consumed, by what happened to them: routed, unsubscribed, unknown_tenant, undecodable.
    pub events: IntCounterVec,
    /// Delivery attempts by verdict: delivered, retryable, permanent, gone.
    pub deliveries: IntCounterVec,
    pub attempt_duration: HistogramVec,
    /// Records written to the DLQ, by error class.
    pub dead_letters: IntCounterVec,
    /// Events being processed right now.
    pub in_flight: IntGauge,
    /// Endpoints disabled because the receiver answered 410.
    pub endpoints_disabled: IntCounterVec,
    /// Consumer lag in messages per assigned partition: high watermark minus committed
    /// offset (the conventional name, as kafka-exporter exports it; what KEDA scales on).
    pub lag_messages: IntGaugeVec,
    /// Age of the oldest unfinished message per assigned partition.
    pub lag_seconds: GaugeVec,
    /// Messages begun and not completed per partition (what blocks the committed offset).
    pub uncommitted: IntGaugeVec,
    /// Attempt records Kafka did not acknowledge (the attempt log misses them).
    pub attempt_records_dropped: IntCounter,
    /// Deliveries handed to a retry tier, by tier (`5s`, `5m`, …).
    pub retry_produced: IntCounterVec,
    /// Retry records consumed, by tier.
    pub retry_consumed: IntCounterVec,
    /// How late after its due time a retry was attempted (never negative: never early).
    pub retry_lateness: Histogram,
    /// DLQ records the DLQ sink wrote to PostgreSQL, by result: `stored`, or `duplicate`
    /// (seen before, e.g. re-read after a crash; nothing written).
    pub dlq_stored: IntCounterVec,
    /// Failed attempts to store a DLQ record (the sink retries: it never skips one).
    pub dlq_store_errors: IntCounter,
    /// Dead letters deleted past their retention (`dlq.retention_days`).
    pub dlq_pruned: IntCounter,
    /// Replayed tasks the retry role took up, by kind: `dead_letter` (`hookstream dlq
    /// replay`) or `resend` (`hookstream event resend`).
    pub dlq_replayed: IntCounterVec,
    /// Deliveries handed to the retry tiers without an attempt, by reason: breaker_open,
    /// rate_limited, endpoint_busy.
    pub deferrals: IntCounterVec,
    /// Circuit breaker transitions, by the state entered: open, half_open, closed.
    pub breaker_transitions: IntCounterVec,
    /// Endpoints whose breaker is open or half-open right now.
    pub breakers_open: IntGauge,
    /// HTTP requests under way right now.
    pub requests_in_flight: IntGauge,
}

impl DispatcherMetrics {
    pub fn register(registry: &Registry) -> Self {
        let m = Self {
            events: IntCounterVec::new(
                Opts::new(
                    "hookstream_dispatcher_events_total",
                    "Events consumed, by routing result",
                ),
                &["result"],
            )
            .unwrap(),
            deliveries: IntCounterVec::new(
                Opts::new(
                    "hookstream_dispatcher_deliveries_total",
                    "Delivery attempts, by outcome",
                ),
                &["outcome"],
            )
            .unwrap(),
            attempt_duration: HistogramVec::new(
                HistogramOpts::new(
                    "hookstream_dispatcher_attempt_duration_seconds",
                    "HTTP attempt latency",
                )
                .buckets(exponential_buckets(0.001, 2.0, 16).unwrap()),
                &["outcome"],
            )
            .unwrap(),
            dead_letters: IntCounterVec::new(
                Opts::new(
                    "hookstream_dispatcher_dead_letters_total",
                    "Records sent to the DLQ, by error class",
                ),
                &["error_class"],
            )
            .unwrap(),
            in_flight: IntGauge::new("hookstream_dispatcher_in_flight_events", "Events being processed")
                .unwrap(),
            endpoints_disabled: IntCounterVec::new(
                Opts::new(
                    "hookstream_dispatcher_endpoints_disabled_total",
                    "Endpoints disabled, by reason",
                ),
                &["reason"],
            )
            .unwrap(),
            lag_messages: IntGaugeVec::new(
                Opts::new(
                    "kafka_consumergroup_lag",
                    "Consumer lag in messages per partition",
                ),
                &["consumergroup", "topic", "partition"],
            )
            .unwrap(),
            lag_seconds: GaugeVec::new(
                Opts::new(
                    "hookstream_dispatcher_consumer_lag_seconds",
                    "Age of the oldest unfinished message per partition",
                ),
                &["topic", "partition"],
            )
            .unwrap(),
            uncommitted: IntGaugeVec::new(
                Opts::new(
                    "hookstream_dispatcher_uncommitted_messages",
                    "Messages in flight per partition",
                ),
                &["topic", "partition"],
            )
            .unwrap(),
            attempt_records_dropped: IntCounter::new(
                "hookstream_dispatcher_attempt_records_dropped_total",
                "Attempt records Kafka did not acknowledge",
            )
            .unwrap(),
            retry_produced: IntCounterVec::new(
                Opts::new(
                    "hookstream_retry_produced_total",
                    "Deliveries handed to a retry tier",
                ),
                &["tier"],
            )
            .unwrap(),
            retry_consumed: IntCounterVec::new(
                Opts::new("hookstream_retry_consumed_total", "Retry records consumed"),
                &["tier"],
            )
            .unwrap(),
            retry_lateness: Histogram::with_opts(
                HistogramOpts::new(
                    "hookstream_retry_lateness_seconds",
                    "Retry attempt time minus due time",
                )
                .buckets(exponential_buckets(0.01, 2.0, 14).unwrap()),
            )
            .unwrap(),
            dlq_stored: IntCounterVec::new(
                Opts::new(
                    "hookstream_dlq_stored_total",
                    "DLQ records stored in PostgreSQL, by result",
                ),
                &["result"],
            )
            .unwrap(),
            dlq_store_errors: IntCounter::new(
                "hookstream_dlq_store_errors_total",
                "Failed attempts to store a DLQ record (retried)",
            )
            .unwrap(),
            dlq_pruned: IntCounter::new(
                "hookstream_dlq_pruned_total",
                "Dead letters deleted past their retention",
            )
            .unwrap(),
            dlq_replayed: IntCounterVec::new(
                Opts::new(
                    "hookstream_dlq_replayed_total",
                    "Replayed deliveries taken up by the retry role, by kind",
                ),
                &["kind"],
            )
            .unwrap(),
            deferrals: IntCounterVec::new(
                Opts::new(
                    "hookstream_dispatcher_deferrals_total",
                    "Deliveries deferred to the retry tiers without using an attempt, by reason",
                ),
                &["reason"],
            )
            .unwrap(),
            breaker_transitions: IntCounterVec::new(
                Opts::new(
                    "hookstream_dispatcher_breaker_transitions_total",
                    "Circuit breaker transitions, by the state entered",
                ),
                &["to"],
            )
            .unwrap(),
            breakers_open: IntGauge::new(
                "hookstream_dispatcher_breakers_open",
                "Endpoints whose circuit breaker is open or half-open",
            )
            .unwrap(),
            requests_in_flight: IntGauge::new(
                "hookstream_dispatcher_requests_in_flight",
                "HTTP delivery requests under way",
            )
            .unwrap(),
        };
        let _ = registry.register(Box::new(m.dlq_stored.clone()));
        let _ = registry.register(Box::new(m.dlq_store_errors.clone()));
        let _ = registry.register(Box::new(m.dlq_pruned.clone()));
        let _ = registry.register(Box::new(m.dlq_replayed.clone()));
        let _ = registry.register(Box::new(m.deferrals.clone()));
        let _ = registry.register(Box::new(m.breaker_transitions.clone()));
        let _ = registry.register(Box::new(m.breakers_open.clone()));
        let _ = registry.register(Box::new(m.requests_in_flight.clone()));
        let _ = registry.register(Box::new(m.retry_produced.clone()));
        let _ = registry.register(Box::new(m.retry_consumed.clone()));
        let _ = registry.register(Box::new(m.retry_lateness.clone()));
        let _ = registry.register(Box::new(m.lag_messages.clone()));
        let _ = registry.register(Box::new(m.lag_seconds.clone()));
        let _ = registry.register(Box::new(m.uncommitted.clone()));
        let _ = registry.register(Box::new(m.attempt_records_dropped.clone()));
        let _ = registry.register(Box::new(m.events.clone()));
        let _ = registry.register(Box::new(m.deliveries.clone()));
        let _ = registry.register(Box::new(m.attempt_duration.clone()));
        let _ = registry.register(Box::new(m.dead_letters.clone()));
        let _ = registry.register(Box::new(m.in_flight.clone()));
        let _ = registry.register(Box::new(m.endpoints_disabled.clone()));
        m
    }
}
