//! Consumer lag, for every consumer group of a process, in messages and in seconds.
//!
//! `kafka_consumergroup_lag{consumergroup,topic,partition}` is the conventional name (what
//! kafka-exporter exports and KEDA's Kafka scaler computes): high watermark minus committed
//! offset. `hookstream_consumer_lag_seconds` is the age of the oldest record begun and not
//! finished (0 when nothing is outstanding). Gauges are set in place, never reset and
//! refilled (a scrape never sees them empty), and a partition's series is removed when the
//! partition is no longer assigned, so nothing stale is exported.

use std::collections::HashSet;
use std::time::Duration;

use prometheus::{GaugeVec, IntGaugeVec, Opts, Registry};
use rdkafka::consumer::{Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::Offset;

use crate::tracker::PartitionSnapshot;

/// The lag gauges, registered once per process and shared by its consumers.
#[derive(Clone)]
pub struct ConsumerMetrics {
    pub lag_messages: IntGaugeVec,
    pub lag_seconds: GaugeVec,
    /// Records begun and not finished per partition (what holds the committed offset back),
    /// including records waiting for their due time or for a permit.
    pub uncommitted: IntGaugeVec,
}

impl ConsumerMetrics {
    pub fn register(registry: &Registry) -> Self {
        let labels = &["consumergroup", "topic", "partition"];
        let m = Self {
            lag_messages: IntGaugeVec::new(
                Opts::new(
                    "kafka_consumergroup_lag",
                    "Consumer lag in messages per partition (high watermark minus committed offset)",
                ),
                labels,
            )
            .expect("valid metric"),
            lag_seconds: GaugeVec::new(
                Opts::new(
                    "hookstream_consumer_lag_seconds",
                    "Age of the oldest record begun and not finished, per partition (0 when none)",
                ),
                labels,
            )
            .expect("valid metric"),
            uncommitted: IntGaugeVec::new(
                Opts::new(
                    "hookstream_consumer_uncommitted_messages",
                    "Records begun and not finished per partition",
                ),
                labels,
            )
            .expect("valid metric"),
        };
        for c in [
            Box::new(m.lag_messages.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(m.lag_seconds.clone()),
            Box::new(m.uncommitted.clone()),
        ] {
            if let Err(e) = registry.register(c) {
                tracing::warn!(error = %e, "consumer metrics registered twice in one registry");
            }
        }
        m
    }
}

/// One partition's lag.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub messages: i64,
}

/// Lag in messages of every assigned partition. Blocking (it asks the group coordinator and
/// the partition leaders): call it from `spawn_blocking`.
pub fn measure<C: ConsumerContext + 'static>(
    consumer: &StreamConsumer<C>,
) -> Result<Vec<PartitionLag>, KafkaError> {
    let assignment = consumer.assignment()?;
    if assignment.count() == 0 {
        return Ok(Vec::new());
    }
    let committed = consumer.committed_offsets(assignment, Duration::from_secs(5))?;
    let mut out = Vec::with_capacity(committed.count());
    for el in committed.elements() {
        let (low, high) = consumer.fetch_watermarks(el.topic(), el.partition(), Duration::from_secs(5))?;
        let position = match el.offset() {
            Offset::Offset(o) => o,
            _ => low,
        };
        out.push(PartitionLag {
            topic: el.topic().to_string(),
            partition: el.partition(),
            messages: (high - position).max(0),
        });
    }
    Ok(out)
}

/// What one consumer exports; it remembers its series to remove them when they go stale.
pub(crate) struct LagGauges {
    metrics: ConsumerMetrics,
    group: String,
    exported: HashSet<(String, i32)>,
}

impl LagGauges {
    pub(crate) fn new(metrics: ConsumerMetrics, group: String) -> Self {
        Self {
            metrics,
            group,
            exported: HashSet::new(),
        }
    }

    /// Sets every assigned partition's gauges and removes those of partitions no longer
    /// assigned.
    pub(crate) fn update(&mut self, lags: &[PartitionLag], tracked: &[PartitionSnapshot], now_ms: i64) {
        let mut seen = HashSet::new();
        for lag in lags {
            let p = lag.partition.to_string();
            let labels = [self.group.as_str(), lag.topic.as_str(), p.as_str()];
            let state = tracked
                .iter()
                .find(|s| s.topic == lag.topic && s.partition == lag.partition);
            let age = state
                .and_then(|s| s.oldest_timestamp_ms)
                .map(|ts| (now_ms - ts).max(0) as f64 / 1000.0)
                .unwrap_or(0.0);
            self.metrics
                .lag_messages
                .with_label_values(&labels)
                .set(lag.messages);
            self.metrics.lag_seconds.with_label_values(&labels).set(age);
            self.metrics
                .uncommitted
                .with_label_values(&labels)
                .set(state.map_or(0, |s| s.depth) as i64);
            seen.insert((lag.topic.clone(), lag.partition));
        }
        let stale: Vec<(String, i32)> = self.exported.difference(&seen).cloned().collect();
        for key in stale {
            self.remove(&key);
        }
        self.exported = seen;
    }

    fn remove(&self, (topic, partition): &(String, i32)) {
        let p = partition.to_string();
        let labels = [self.group.as_str(), topic.as_str(), p.as_str()];
        let _ = self.metrics.lag_messages.remove_label_values(&labels);
        let _ = self.metrics.lag_seconds.remove_label_values(&labels);
        let _ = self.metrics.uncommitted.remove_label_values(&labels);
    }

    /// Removes every series of this consumer (it stopped).
    pub(crate) fn clear(&mut self) {
        for key in std::mem::take(&mut self.exported) {
            self.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(registry: &Registry, name: &str, partition: &str) -> Option<f64> {
        registry
            .gather()
            .iter()
            .find(|f| f.name() == name)?
            .get_metric()
            .iter()
            .find(|m| {
                m.get_label()
                    .iter()
                    .any(|l| l.name() == "partition" && l.value() == partition)
            })
            .map(|m| m.get_gauge().get_value())
    }

    #[test]
    fn gauges_are_set_in_place_and_stale_partitions_removed() {
        let registry = Registry::new();
        let mut g = LagGauges::new(ConsumerMetrics::register(&registry), "g".into());
        let lag = |p: i32, m: i64| PartitionLag {
            topic: "t".into(),
            partition: p,
            messages: m,
        };
        let tracked = [PartitionSnapshot {
            topic: "t".into(),
            partition: 0,
            depth: 2,
            oldest_timestamp_ms: Some(7_000),
        }];
        g.update(&[lag(0, 5), lag(1, 0)], &tracked, 10_000);
        assert_eq!(value(&registry, "kafka_consumergroup_lag", "0"), Some(5.0));
        assert_eq!(
            value(&registry, "hookstream_consumer_lag_seconds", "0"),
            Some(3.0)
        );
        assert_eq!(
            value(&registry, "hookstream_consumer_lag_seconds", "1"),
            Some(0.0),
            "idle reads 0"
        );
        g.update(&[lag(0, 0)], &[], 11_000);
        assert_eq!(value(&registry, "kafka_consumergroup_lag", "0"), Some(0.0));
        assert_eq!(
            value(&registry, "kafka_consumergroup_lag", "1"),
            None,
            "revoked: removed"
        );
        g.clear();
        assert_eq!(value(&registry, "kafka_consumergroup_lag", "0"), None);
    }
}
