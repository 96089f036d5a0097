//! The API's metrics. Labels come from fixed sets only: the route is the matched path template
//! (or `unmatched`), never a concrete path with ids in it; the status is its class.

use hookstream_telemetry::prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
};

#[derive(Clone)]
pub struct ApiMetrics {
    /// `hookstream_api_requests_total{route,method,status}` (status: 2xx … 5xx).
    pub requests: IntCounterVec,
    /// `hookstream_api_request_duration_seconds{route}`.
    pub duration: HistogramVec,
    /// Requests refused for missing or invalid credentials (401, and the 429s below).
    pub auth_failures: IntCounter,
    /// Requests refused 429 because their address had too many failed authentications
    /// (`api.auth_failures`): the failure over the budget and every request while blocked.
    pub auth_throttled: IntCounter,
    /// Tenant-key lookups that went to the database (a cache miss).
    pub key_lookups: IntCounter,
    pub rate_limited: IntCounter,
    /// Messages created (not idempotent repeats).
    pub messages_created: IntCounter,
    /// Messages per statement of the message writers.
    pub message_batch_rows: Histogram,
}

fn register<T: hookstream_telemetry::prometheus::core::Collector + Clone + 'static>(r: &Registry, c: T) -> T {
    if let Err(e) = r.register(Box::new(c.clone())) {
        tracing::warn!(error = %e, "metric registered twice");
    }
    c
}

impl ApiMetrics {
    pub fn register(r: &Registry) -> Self {
        Self {
            requests: register(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "hookstream_api_requests_total",
                        "API requests answered, by route template and status class",
                    ),
                    &["route", "method", "status"],
                )
                .expect("valid metric"),
            ),
            duration: register(
                r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "hookstream_api_request_duration_seconds",
                        "Time to answer an API request, by route template",
                    )
                    .buckets(vec![
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                    ]),
                    &["route"],
                )
                .expect("valid metric"),
            ),
            auth_failures: register(
                r,
                IntCounter::new(
                    "hookstream_api_auth_failures_total",
                    "Requests refused for missing or invalid credentials",
                )
                .expect("valid metric"),
            ),
            auth_throttled: register(
                r,
                IntCounter::new(
                    "hookstream_api_auth_throttled_total",
                    "Requests refused with 429 for too many failed authentications from their address",
                )
                .expect("valid metric"),
            ),
            key_lookups: register(
                r,
                IntCounter::new(
                    "hookstream_api_key_lookups_total",
                    "Tenant-key lookups that missed the cache and went to the database",
                )
                .expect("valid metric"),
            ),
            rate_limited: register(
                r,
                IntCounter::new("hookstream_api_rate_limited_total", "Requests refused with 429")
                    .expect("valid metric"),
            ),
            messages_created: register(
                r,
                IntCounter::new(
                    "hookstream_api_messages_created_total",
                    "Messages created through the API",
                )
                .expect("valid metric"),
            ),
            message_batch_rows: register(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "hookstream_api_message_batch_rows",
                        "Messages stored per statement by the API's message writers",
                    )
                    .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]),
                )
                .expect("valid metric"),
            ),
        }
    }
}
