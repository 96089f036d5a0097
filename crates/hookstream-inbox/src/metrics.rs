//! The inbox's Prometheus metrics (`hookstream_inbox_*`), labelled by `source` (a receiver's
//! few configured routes) and, where a count has causes, a `reason` from a small fixed set.
//! Register them once per registry ([`InboxMetrics::register`]) and hand clones to every
//! inbox of the process.

use prometheus::{
    exponential_buckets, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

/// Fine enough to quote an acknowledgement p99 against a 5 ms objective.
const ACK_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
];

/// Every inbox metric, for all sources.
#[derive(Clone)]
pub struct InboxMetrics {
    /// New messages stored (first delivery of a `webhook-id`).
    pub received: IntCounterVec,
    /// Deliveries of a message already stored: answered 2xx, stored nothing.
    pub duplicates: IntCounterVec,
    /// Deliveries refused with 401; `reason`: header, timestamp, signature,
    /// oversized_signature (a `webhook-signature` over the verified limits, refused before
    /// any HMAC).
    pub verification_failures: IntCounterVec,
    /// Deliveries refused otherwise; `reason`: too_large (413), unreadable, not_json and
    /// too_long (400), unavailable (503: the database did not store it).
    pub rejected: IntCounterVec,
    /// Request arrival to answer, for stored and duplicate deliveries.
    pub ack_seconds: HistogramVec,
    /// Rows whose handler returned `Done`, committed.
    pub processed: IntCounterVec,
    /// Receipt to the commit that marked the row processed.
    pub processing_latency_seconds: HistogramVec,
    /// Deferrals (`Defer`) committed.
    pub deferrals: IntCounterVec,
    /// Failures (`Fail`, an error, a panic or a timeout of the handler) committed.
    pub failures: IntCounterVec,
    /// Rows quarantined; `reason`: deferred (a bound was reached), failed (attempts used up),
    /// invalid (a stored payload that does not parse).
    pub quarantined_total: IntCounterVec,
    /// Quarantined rows put back to pending.
    pub replayed: IntCounterVec,
    /// Worker or maintenance rounds that hit a database error (retried after a backoff).
    pub errors: IntCounterVec,
    /// Processed rows deleted past the retention window.
    pub pruned: IntCounterVec,
    /// Rows waiting to be processed (including deferred ones).
    pub pending: IntGaugeVec,
    /// Pending rows deferred at least once.
    pub deferred: IntGaugeVec,
    /// Rows in quarantine now.
    pub quarantined: IntGaugeVec,
    /// Age of the oldest pending row, in seconds (0 when none).
    pub oldest_pending_age_seconds: GaugeVec,
}

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn gauge(name: &str, help: &str) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), &["source"]).expect("valid metric")
}

impl InboxMetrics {
    /// Creates the metrics and registers them in `registry` (ignoring ones already there).
    pub fn register(registry: &Registry) -> Self {
        let m = Self::unregistered();
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(m.received.clone()),
            Box::new(m.duplicates.clone()),
            Box::new(m.verification_failures.clone()),
            Box::new(m.rejected.clone()),
            Box::new(m.ack_seconds.clone()),
            Box::new(m.processed.clone()),
            Box::new(m.processing_latency_seconds.clone()),
            Box::new(m.deferrals.clone()),
            Box::new(m.failures.clone()),
            Box::new(m.quarantined_total.clone()),
            Box::new(m.replayed.clone()),
            Box::new(m.errors.clone()),
            Box::new(m.pruned.clone()),
            Box::new(m.pending.clone()),
            Box::new(m.deferred.clone()),
            Box::new(m.quarantined.clone()),
            Box::new(m.oldest_pending_age_seconds.clone()),
        ];
        for c in collectors {
            let _ = registry.register(c);
        }
        m
    }

    /// The metrics, registered nowhere (tools and tests that export nothing).
    pub fn unregistered() -> Self {
        let source = &["source"];
        let reason = &["source", "reason"];
        Self {
            received: counter("hookstream_inbox_received_total", "New messages stored", source),
            duplicates: counter(
                "hookstream_inbox_duplicates_total",
                "Deliveries of an already stored message (answered 2xx, nothing stored)",
                source,
            ),
            verification_failures: counter(
                "hookstream_inbox_verification_failures_total",
                "Deliveries refused with 401 (header, timestamp, signature, oversized_signature)",
                reason,
            ),
            rejected: counter(
                "hookstream_inbox_rejected_total",
                "Deliveries refused for their body or because nothing could be stored (too_large, unreadable, not_json, too_long, unavailable)",
                reason,
            ),
            ack_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "hookstream_inbox_ack_seconds",
                    "Request arrival to the 2xx answer (stored or duplicate)",
                )
                .buckets(ACK_BUCKETS.to_vec()),
                source,
            )
            .expect("valid metric"),
            processed: counter(
                "hookstream_inbox_processed_total",
                "Messages processed (handler done, committed with the processed mark)",
                source,
            ),
            processing_latency_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "hookstream_inbox_processing_latency_seconds",
                    "Receipt of a message to the commit that processed it",
                )
                .buckets(exponential_buckets(0.001, 2.0, 22).expect("valid buckets")),
                source,
            )
            .expect("valid metric"),
            deferrals: counter(
                "hookstream_inbox_deferrals_total",
                "Deferrals committed (the handler said: not yet)",
                source,
            ),
            failures: counter(
                "hookstream_inbox_failures_total",
                "Handler failures committed (retried with backoff)",
                source,
            ),
            quarantined_total: counter(
                "hookstream_inbox_quarantined_total",
                "Messages quarantined (deferred, failed, invalid)",
                reason,
            ),
            replayed: counter(
                "hookstream_inbox_replayed_total",
                "Quarantined messages put back to pending",
                source,
            ),
            errors: counter(
                "hookstream_inbox_errors_total",
                "Worker and maintenance rounds that hit a database error",
                source,
            ),
            pruned: counter(
                "hookstream_inbox_pruned_total",
                "Processed messages deleted past the retention window",
                source,
            ),
            pending: gauge("hookstream_inbox_pending", "Messages waiting to be processed"),
            deferred: gauge("hookstream_inbox_deferred", "Pending messages deferred at least once"),
            quarantined: gauge("hookstream_inbox_quarantined", "Messages in quarantine"),
            oldest_pending_age_seconds: GaugeVec::new(
                Opts::new(
                    "hookstream_inbox_oldest_pending_age_seconds",
                    "Age of the oldest pending message (0 when none)",
                ),
                source,
            )
            .expect("valid metric"),
        }
    }
}
