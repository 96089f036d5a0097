//! The relay scenario's report: the common contract's counts from its latency phase (records
//! read back from Kafka stand for deliveries), the drains and the latency phase's figures.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{present, ClassFigures, Headline, Latency, Machine};
use crate::cli::{Pad, PayloadForm};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RelayReport {
    /// Rows committed in the latency phase.
    pub events: usize,
    pub expected_deliveries: usize,
    /// Distinct committed event ids read back from Kafka in the latency phase.
    pub delivered: usize,
    /// Committed event ids never read back. The verdict reads it.
    pub lost: usize,
    /// Records read back beyond one per event id.
    pub duplicates: usize,
    /// Always `null`: no retries in this scenario. The verdict reads it.
    #[serde(deserialize_with = "present")]
    pub early_retries: Option<usize>,
    /// Always `null`: no signatures in this scenario. The verdict reads it.
    #[serde(deserialize_with = "present")]
    pub invalid_signatures: Option<usize>,
    pub duration_s: f64,
    pub throughput_per_s: f64,
    pub latency_ms: Latency,
    pub latency_measures: String,
    pub delivered_measures: String,
    /// Always empty: no receivers.
    pub per_class: BTreeMap<String, ClassFigures>,
    /// The latency phase's relay.
    pub processes: BTreeMap<String, RelayUsage>,
    pub machine: Machine,
    /// How the producer wrote the payloads (`--payload-form`; `jsonb` in reports from before
    /// the option, which always used that overload).
    #[serde(default)]
    pub payload_form: PayloadForm,
    /// The throughput phase's payload size (`--payload-bytes`; 0: the ~150-byte payload) and
    /// whether the relays sealed payloads (`--seal-payloads`; reports from before sealing:
    /// `false`, they did not).
    #[serde(default)]
    pub payload_bytes: usize,
    /// What the padding was (`--pad`; `repeat` in reports from before the option).
    #[serde(default)]
    pub pad: Pad,
    #[serde(default)]
    pub sealed: bool,
    /// Whether the message store kept a copy of each payload (`--store-messages`).
    #[serde(default = "stored_by_default")]
    pub store_messages: bool,
    /// One drain per relay count (1..=`--relays`). The verdict reads each one's `lost`.
    pub throughput: Vec<Drain>,
    pub latency: RelayLatency,
}

fn stored_by_default() -> bool {
    true
}

impl RelayReport {
    pub fn headline(&self) -> Headline<'_> {
        Headline {
            delivered: self.delivered,
            expected_deliveries: self.expected_deliveries,
            lost: self.lost,
            duplicates: self.duplicates,
            early_retries: self.early_retries,
            invalid_signatures: self.invalid_signatures,
            throughput_per_s: self.throughput_per_s,
            latency_ms: &self.latency_ms,
        }
    }
}

/// CPU and peak memory of the relay (`null` when /proc could not be read).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RelayUsage {
    #[serde(deserialize_with = "present")]
    pub cpu_s: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub max_rss_mb: Option<f64>,
}

/// A backlog drained by `relays` relays, then read back from Kafka and counted by event id.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Drain {
    /// The verdict reads it (for its message).
    pub relays: usize,
    /// Rows in the backlog.
    pub events: usize,
    /// Records read back from the events topic.
    pub in_kafka: usize,
    /// Records beyond one per event id.
    pub duplicates: usize,
    /// Committed event ids never read back. The verdict reads it.
    pub lost: usize,
    pub duration_s: f64,
    pub throughput_per_s: f64,
    /// Rows per second the producer committed the backlog at (transactions of 5,000 rows
    /// through `hookstream.enqueue`; `null` in reports from before it was measured).
    #[serde(default)]
    pub enqueue_per_s: Option<f64>,
    /// Per relay process.
    pub cpu_s: Vec<f64>,
    pub max_rss_mb: Vec<f64>,
}

/// One relay at a fixed rate, with a consumer stamping each record on arrival.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RelayLatency {
    pub rate_per_s: usize,
    pub achieved_rate_per_s: f64,
    /// Rows committed.
    pub events: usize,
    /// Records read back.
    pub received: usize,
    /// Distinct event ids among them.
    pub distinct: usize,
    /// `received - distinct`.
    pub duplicates: usize,
    /// Committed event ids never read back.
    pub lost: usize,
    pub duration_s: f64,
    pub latency_ms: Latency,
    pub latency_measures: String,
    /// The relay's own histogram (`null` when it had no samples or could not be scraped).
    #[serde(deserialize_with = "present")]
    pub relay_commit_to_ack_ms: Option<BucketQuantiles>,
    #[serde(deserialize_with = "present")]
    pub relay_batch_duration_ms: Option<BucketQuantiles>,
    #[serde(deserialize_with = "present")]
    pub cpu_s: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub max_rss_mb: Option<f64>,
}

/// Quantiles of a Prometheus histogram as bucket upper bounds in ms; `null` where the
/// quantile fell in the `+Inf` bucket.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BucketQuantiles {
    #[serde(deserialize_with = "present")]
    pub p50_le_ms: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub p90_le_ms: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub p99_le_ms: Option<f64>,
    pub count: u64,
}
