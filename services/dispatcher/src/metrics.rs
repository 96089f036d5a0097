//! The dispatcher's Prometheus metrics (`hookstream_dispatcher_*`). Labels come from small
//! fixed sets (outcome, error class), never from URLs or tenant ids.

use hookstream_delivery::ErrorClass;
use hookstream_telemetry::prometheus::{
    exponential_buckets, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry,
};

/// Retry lateness buckets: fine below a second (the objective is p99 ≤ 1 s), coarse above.
const LATENESS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0,
    1800.0,
];

#[derive(Clone)]
pub struct DispatcherMetrics {
    /// Events consumed, by what happened to them: routed, unsubscribed (no endpoint's
    /// subscription matched: types, channels or payload filter), scheduled (waiting in the
    /// tiers for its deliverAt), unknown_tenant (dead-lettered), unknown_tenant_rerouted
    /// (routed again later), undecodable.
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
    /// Attempt records Kafka did not acknowledge (the attempt log misses them).
    pub attempt_records_dropped: IntCounter,
    /// Deliveries handed to a retry tier, by tier (`5s`, `5m`, …).
    pub retry_produced: IntCounterVec,
    /// Hand-offs Kafka refused as too large, by destination (`retry`, `dlq`).
    pub too_large: IntCounterVec,
    /// Retry records consumed, by tier.
    pub retry_consumed: IntCounterVec,
    /// How late after its due time a retry was attempted (never negative: never early).
    pub retry_lateness: Histogram,
    /// Retry records passed on to another tier on their way to their due time.
    pub retry_hops: IntCounter,
    /// Retries taken up before their due time (a clock that stepped back); they wait. Stays 0.
    pub retry_early: IntCounter,
    /// The subscription version of this dispatcher's routing snapshot.
    pub subscription_version: IntGauge,
    /// Snapshot refreshes, by kind: incremental, full.
    pub subscription_refreshes: IntCounterVec,
    /// Snapshot refreshes that failed (the last snapshot is kept).
    pub subscription_refresh_errors: IntCounter,
    /// Events that waited for a refresh because they were newer than the snapshot.
    pub route_waits: IntCounter,
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
    /// Rate-limit checks the database could not answer (the replica's own bucket decided).
    pub rate_limit_fallbacks: IntCounter,
    /// Live dispatcher replicas sharing the concurrency caps, as this one last saw.
    pub group_replicas: IntGauge,
    /// Each retry tier topic's retention (seconds), as the broker reported it at start:
    /// a tier whose oldest waiting record nears it is about to lose records.
    pub tier_retention: GaugeVec,
    /// Attempt records the attempt sink handled, by result: stored, duplicate (stored
    /// before), undecodable, refused (by the database).
    pub attempt_sink_rows: IntCounterVec,
    /// Failed tries to store attempts (the sink retries: it never skips one for that).
    pub attempt_sink_errors: IntCounter,
    /// Day partitions of the delivery log dropped past `attempts.retention_days`.
    pub attempt_partitions_dropped: IntCounter,
    /// The share of the last 500 ms the delivery runtime's workers were busy (`pressure.rs`).
    pub delivery_busy_ratio: Gauge,
    /// Attempt records whose storing the sink held because delivery was pressed.
    pub attempt_sink_held: IntCounter,
    /// 1 for each role this replica runs (`events`, `retry`, `dlq_sink`, `attempt_sink`), 0 for
    /// the others.
    pub roles: IntGaugeVec,
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
            attempt_records_dropped: IntCounter::new(
                "hookstream_dispatcher_attempt_records_dropped_total",
                "Attempt records Kafka did not acknowledge",
            )
            .unwrap(),
            too_large: IntCounterVec::new(
                Opts::new(
                    "hookstream_dispatcher_records_too_large_total",
                    "Hand-offs Kafka refused as too large: retry records (then dead-lettered) and dead letters (then \
                     produced without their last response or payload)",
                ),
                &["destination"],
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
                .buckets(LATENESS_BUCKETS.to_vec()),
            )
            .unwrap(),
            retry_hops: IntCounter::new(
                "hookstream_retry_hops_total",
                "Retry records passed on to another tier on their way to their due time",
            )
            .unwrap(),
            retry_early: IntCounter::new(
                "hookstream_retry_early_total",
                "Retries taken up before their due time (they wait; stays 0 unless a clock stepped back)",
            )
            .unwrap(),
            subscription_version: IntGauge::new(
                "hookstream_dispatcher_subscription_version",
                "Subscription version of the routing snapshot",
            )
            .unwrap(),
            subscription_refreshes: IntCounterVec::new(
                Opts::new(
                    "hookstream_dispatcher_subscription_refreshes_total",
                    "Routing snapshot refreshes, by kind",
                ),
                &["kind"],
            )
            .unwrap(),
            subscription_refresh_errors: IntCounter::new(
                "hookstream_dispatcher_subscription_refresh_errors_total",
                "Routing snapshot refreshes that failed",
            )
            .unwrap(),
            route_waits: IntCounter::new(
                "hookstream_dispatcher_route_waits_total",
                "Events that waited for a snapshot refresh because they were newer than the snapshot",
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
            rate_limit_fallbacks: IntCounter::new(
                "hookstream_dispatcher_rate_limit_fallbacks_total",
                "Rate-limit checks the database could not answer (the replica's own bucket decided)",
            )
            .unwrap(),
            attempt_sink_rows: IntCounterVec::new(
                Opts::new(
                    "hookstream_attempt_sink_rows_total",
                    "Attempt records the attempt sink handled, by result",
                ),
                &["result"],
            )
            .unwrap(),
            attempt_sink_errors: IntCounter::new(
                "hookstream_attempt_sink_store_errors_total",
                "Failed tries to store attempts (retried)",
            )
            .unwrap(),
            attempt_partitions_dropped: IntCounter::new(
                "hookstream_attempt_partitions_dropped_total",
                "Day partitions of the delivery log dropped past retention",
            )
            .unwrap(),
            delivery_busy_ratio: Gauge::new(
                "hookstream_dispatcher_delivery_busy_ratio",
                "Share of the last 500 ms the delivery runtime's workers were busy",
            )
            .unwrap(),
            attempt_sink_held: IntCounter::new(
                "hookstream_attempt_sink_held_total",
                "Attempt records whose storing the sink held while delivery was pressed",
            )
            .unwrap(),
            roles: IntGaugeVec::new(
                Opts::new(
                    "hookstream_dispatcher_roles",
                    "1 for each role this replica runs (events, retry, dlq_sink, attempt_sink)",
                ),
                &["role"],
            )
            .unwrap(),
            tier_retention: GaugeVec::new(
                Opts::new(
                    "hookstream_retry_tier_retention_seconds",
                    "Retention of each retry tier topic as the broker reported it at start",
                ),
                &["topic"],
            )
            .unwrap(),
            group_replicas: IntGauge::new(
                "hookstream_dispatcher_group_replicas",
                "Live dispatcher replicas sharing endpoint concurrency caps, as this one last saw",
            )
            .unwrap(),
        };
        let _ = registry.register(Box::new(m.rate_limit_fallbacks.clone()));
        let _ = registry.register(Box::new(m.group_replicas.clone()));
        let _ = registry.register(Box::new(m.tier_retention.clone()));
        let _ = registry.register(Box::new(m.roles.clone()));
        let _ = registry.register(Box::new(m.attempt_sink_rows.clone()));
        let _ = registry.register(Box::new(m.attempt_sink_errors.clone()));
        let _ = registry.register(Box::new(m.attempt_partitions_dropped.clone()));
        let _ = registry.register(Box::new(m.delivery_busy_ratio.clone()));
        let _ = registry.register(Box::new(m.attempt_sink_held.clone()));
        let _ = registry.register(Box::new(m.dlq_stored.clone()));
        let _ = registry.register(Box::new(m.dlq_store_errors.clone()));
        let _ = registry.register(Box::new(m.dlq_pruned.clone()));
        let _ = registry.register(Box::new(m.dlq_replayed.clone()));
        let _ = registry.register(Box::new(m.deferrals.clone()));
        let _ = registry.register(Box::new(m.breaker_transitions.clone()));
        let _ = registry.register(Box::new(m.breakers_open.clone()));
        let _ = registry.register(Box::new(m.requests_in_flight.clone()));
        let _ = registry.register(Box::new(m.retry_produced.clone()));
        let _ = registry.register(Box::new(m.too_large.clone()));
        let _ = registry.register(Box::new(m.retry_consumed.clone()));
        let _ = registry.register(Box::new(m.retry_lateness.clone()));
        let _ = registry.register(Box::new(m.retry_hops.clone()));
        let _ = registry.register(Box::new(m.retry_early.clone()));
        let _ = registry.register(Box::new(m.subscription_version.clone()));
        let _ = registry.register(Box::new(m.subscription_refreshes.clone()));
        let _ = registry.register(Box::new(m.subscription_refresh_errors.clone()));
        let _ = registry.register(Box::new(m.route_waits.clone()));
        let _ = registry.register(Box::new(m.attempt_records_dropped.clone()));
        let _ = registry.register(Box::new(m.events.clone()));
        let _ = registry.register(Box::new(m.deliveries.clone()));
        let _ = registry.register(Box::new(m.attempt_duration.clone()));
        let _ = registry.register(Box::new(m.dead_letters.clone()));
        let _ = registry.register(Box::new(m.in_flight.clone()));
        let _ = registry.register(Box::new(m.endpoints_disabled.clone()));
        m.init_series();
        m
    }

    /// Exports every label value of the fixed sets at 0 from the start, so that dashboards
    /// and alerts see a series (and `rate` a first sample) before the first occurrence.
    fn init_series(&self) {
        let init = |v: &IntCounterVec, values: &[&str]| {
            for value in values {
                v.with_label_values(&[value]);
            }
        };
        init(
            &self.events,
            &[
                "routed",
                "unsubscribed",
                "scheduled",
                "unknown_tenant",
                "unknown_tenant_rerouted",
                "undecodable",
                "erased",
                "unreadable_payload",
            ],
        );
        let verdicts = ["delivered", "retryable", "permanent", "gone"];
        init(&self.deliveries, &verdicts);
        for v in verdicts {
            self.attempt_duration.with_label_values(&[v]);
        }
        let classes: Vec<&str> = ErrorClass::ALL
            .iter()
            .map(|c| c.as_str())
            .chain([
                "decode",
                "unknown_tenant",
                "endpoint_disabled",
                "erased",
                "unreadable_payload",
                crate::work::TOO_LARGE,
            ])
            .collect();
        init(&self.dead_letters, &classes);
        init(&self.endpoints_disabled, &["gone", "failing"]);
        init(&self.dlq_stored, &["stored", "duplicate"]);
        init(&self.too_large, &["retry", "dlq"]);
        init(&self.dlq_replayed, &["dead_letter", "resend"]);
        init(
            &self.deferrals,
            &["breaker_open", "rate_limited", "endpoint_busy"],
        );
        init(&self.breaker_transitions, &["open", "half_open", "closed"]);
        init(&self.subscription_refreshes, &["incremental", "full"]);
        init(
            &self.attempt_sink_rows,
            &["stored", "duplicate", "undecodable", "refused"],
        );
    }

    /// Exports the retry tiers' series (by tier label: `5s`, `5m`, …) at 0.
    pub fn init_tiers<'a>(&self, tiers: impl IntoIterator<Item = &'a str>) {
        for tier in tiers {
            self.retry_produced.with_label_values(&[tier]);
            self.retry_consumed.with_label_values(&[tier]);
        }
    }
}
