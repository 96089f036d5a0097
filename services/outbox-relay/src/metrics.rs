//! The relay's Prometheus metrics (`hookstream_relay_*`).

use std::time::Duration;

use hookstream_telemetry::prometheus::{
    exponential_buckets, Gauge, Histogram, HistogramOpts, IntCounter, IntGauge, Registry,
};

/// Latency buckets fine enough to quote a p99 against a 50 ms objective.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2,
    0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
];

#[derive(Clone)]
pub struct RelayMetrics {
    pub published: IntCounter,
    pub quarantined: IntCounter,
    pub produce_errors: IntCounter,
    pub batch_size: Histogram,
    pub batch_duration: Histogram,
    /// Row creation (≈ producer commit) to Kafka acknowledgement.
    pub commit_to_ack: Histogram,
    pub shards_owned: IntGauge,
    pub backlog_rows: IntGauge,
    pub oldest_age_seconds: Gauge,
}

impl RelayMetrics {
    pub fn register(registry: &Registry) -> Self {
        let m = Self {
            published: IntCounter::new(
                "hookstream_relay_published_total",
                "Outbox rows acknowledged by Kafka and deleted",
            )
            .unwrap(),
            quarantined: IntCounter::new(
                "hookstream_relay_quarantined_total",
                "Outbox rows moved to quarantine",
            )
            .unwrap(),
            produce_errors: IntCounter::new(
                "hookstream_relay_produce_errors_total",
                "Batches rolled back after a Kafka error",
            )
            .unwrap(),
            batch_size: Histogram::with_opts(
                HistogramOpts::new("hookstream_relay_batch_rows", "Rows claimed per batch")
                    .buckets(exponential_buckets(1.0, 2.0, 14).unwrap()),
            )
            .unwrap(),
            batch_duration: Histogram::with_opts(
                HistogramOpts::new(
                    "hookstream_relay_batch_duration_seconds",
                    "Claim to commit time of a batch",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
            )
            .unwrap(),
            commit_to_ack: Histogram::with_opts(
                HistogramOpts::new(
                    "hookstream_relay_commit_to_ack_seconds",
                    "Outbox row creation to Kafka acknowledgement",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
            )
            .unwrap(),
            shards_owned: IntGauge::new("hookstream_relay_shards_owned", "Outbox shards this relay owns")
                .unwrap(),
            backlog_rows: IntGauge::new("hookstream_relay_backlog_rows", "Rows waiting in the outbox")
                .unwrap(),
            oldest_age_seconds: Gauge::new(
                "hookstream_relay_oldest_row_age_seconds",
                "Age of the oldest outbox row",
            )
            .unwrap(),
        };
        for c in [&m.published, &m.quarantined, &m.produce_errors] {
            let _ = registry.register(Box::new(c.clone()));
        }
        let _ = registry.register(Box::new(m.batch_size.clone()));
        let _ = registry.register(Box::new(m.batch_duration.clone()));
        let _ = registry.register(Box::new(m.commit_to_ack.clone()));
        let _ = registry.register(Box::new(m.shards_owned.clone()));
        let _ = registry.register(Box::new(m.backlog_rows.clone()));
        let _ = registry.register(Box::new(m.oldest_age_seconds.clone()));
        m
    }

    pub fn record_batch(&self, claimed: usize, shipped: usize, quarantined: usize, took: Duration) {
        self.batch_size.observe(claimed as f64);
        self.batch_duration.observe(took.as_secs_f64());
        self.published.inc_by(shipped as u64);
        self.quarantined.inc_by(quarantined as u64);
    }
}
