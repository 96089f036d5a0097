//! Consumer lag, for every consumer group of a process, in messages and in seconds.
//!
//! `kafka_consumergroup_lag{consumergroup,topic,partition}` is the conventional name (what
//! kafka-exporter exports and KEDA's Kafka scaler computes): high watermark minus committed
//! offset. `hookstream_consumer_lag_seconds` is the age of the oldest record begun and not
//! finished (0 when nothing is outstanding). `kafka_consumergroup_current_offset` is the
//! committed offset (a partition whose lag stays above 0 while it does not move is stuck),
//! and `hookstream_consumer_topic_partitions` the partition count of each consumed topic (a
//! partition no member exports is not consumed). Every series carries the member's `role`
//! (`events`, `retry`, `dlq_sink`), so dashboards and alerts need not know group names.
//!
//! Gauges are set in place, never reset and refilled (a scrape never sees them empty), and a
//! partition's series is removed when the partition is no longer assigned, so nothing stale
//! is exported.

use std::collections::{BTreeMap, HashSet};
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
    /// The committed offset per partition.
    pub committed: IntGaugeVec,
    /// Partitions of each consumed topic.
    pub topic_partitions: IntGaugeVec,
}

impl ConsumerMetrics {
    pub fn register(registry: &Registry) -> Self {
        let labels = &["consumergroup", "topic", "partition", "role"];
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
            committed: IntGaugeVec::new(
                Opts::new(
                    "kafka_consumergroup_current_offset",
                    "Committed offset of the consumer group per partition",
                ),
                labels,
            )
            .expect("valid metric"),
            topic_partitions: IntGaugeVec::new(
                Opts::new(
                    "hookstream_consumer_topic_partitions",
                    "Partitions of each topic the consumer group reads",
                ),
                &["consumergroup", "topic", "role"],
            )
            .expect("valid metric"),
        };
        for c in [
            Box::new(m.lag_messages.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(m.lag_seconds.clone()),
            Box::new(m.uncommitted.clone()),
            Box::new(m.committed.clone()),
            Box::new(m.topic_partitions.clone()),
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
    /// The committed offset (the log start when the group has none yet).
    pub committed: i64,
}

/// What one measurement found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    /// Every assigned partition's lag.
    pub partitions: Vec<PartitionLag>,
    /// Partition count of each assigned topic.
    pub topic_partitions: BTreeMap<String, i32>,
}

/// Lag in messages of every assigned partition, and the partition counts of their topics.
/// Blocking (it asks the group coordinator and the partition leaders): call it from
/// `spawn_blocking`.
pub fn measure<C: ConsumerContext + 'static>(consumer: &StreamConsumer<C>) -> Result<Measured, KafkaError> {
    let assignment = consumer.assignment()?;
    if assignment.count() == 0 {
        return Ok(Measured::default());
    }
    let mut topic_partitions = BTreeMap::new();
    for el in assignment.elements() {
        if !topic_partitions.contains_key(el.topic()) {
            let md = consumer.fetch_metadata(Some(el.topic()), Duration::from_secs(5))?;
            let count = md.topics().first().map_or(0, |t| t.partitions().len() as i32);
            topic_partitions.insert(el.topic().to_string(), count);
        }
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
            committed: position,
        });
    }
    Ok(Measured {
        partitions: out,
        topic_partitions,
    })
}

/// What one consumer exports; it remembers its series to remove them when they go stale.
pub(crate) struct LagGauges {
    metrics: ConsumerMetrics,
    group: String,
    role: &'static str,
    exported: HashSet<(String, i32)>,
    topics: HashSet<String>,
}

impl LagGauges {
    pub(crate) fn new(metrics: ConsumerMetrics, group: String, role: &'static str) -> Self {
        Self {
            metrics,
            group,
            role,
            exported: HashSet::new(),
            topics: HashSet::new(),
        }
    }

    /// Sets every assigned partition's gauges and removes those of partitions no longer
    /// assigned.
    pub(crate) fn update(&mut self, measured: &Measured, tracked: &[PartitionSnapshot], now_ms: i64) {
        let mut topics = HashSet::new();
        for (topic, count) in &measured.topic_partitions {
            self.metrics
                .topic_partitions
                .with_label_values(&[self.group.as_str(), topic.as_str(), self.role])
                .set(i64::from(*count));
            topics.insert(topic.clone());
        }
        for gone in self.topics.difference(&topics) {
            let _ = self.metrics.topic_partitions.remove_label_values(&[
                self.group.as_str(),
                gone.as_str(),
                self.role,
            ]);
        }
        self.topics = topics;
        let mut seen = HashSet::new();
        for lag in &measured.partitions {
            let p = lag.partition.to_string();
            let labels = [self.group.as_str(), lag.topic.as_str(), p.as_str(), self.role];
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
            self.metrics
                .committed
                .with_label_values(&labels)
                .set(lag.committed);
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
        let labels = [self.group.as_str(), topic.as_str(), p.as_str(), self.role];
        let _ = self.metrics.lag_messages.remove_label_values(&labels);
        let _ = self.metrics.lag_seconds.remove_label_values(&labels);
        let _ = self.metrics.uncommitted.remove_label_values(&labels);
        let _ = self.metrics.committed.remove_label_values(&labels);
    }

    /// Removes every series of this consumer (it stopped).
    pub(crate) fn clear(&mut self) {
        for key in std::mem::take(&mut self.exported) {
            self.remove(&key);
        }
        for topic in std::mem::take(&mut self.topics) {
            let _ = self.metrics.topic_partitions.remove_label_values(&[
                self.group.as_str(),
                topic.as_str(),
                self.role,
            ]);
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
        let mut g = LagGauges::new(ConsumerMetrics::register(&registry), "g".into(), "events");
        let lag = |p: i32, m: i64| PartitionLag {
            topic: "t".into(),
            partition: p,
            messages: m,
            committed: 100 + i64::from(p),
        };
        let measured = |lags: Vec<PartitionLag>| Measured {
            partitions: lags,
            topic_partitions: BTreeMap::from([("t".to_string(), 2)]),
        };
        let tracked = [PartitionSnapshot {
            topic: "t".into(),
            partition: 0,
            depth: 2,
            oldest_timestamp_ms: Some(7_000),
        }];
        g.update(&measured(vec![lag(0, 5), lag(1, 0)]), &tracked, 10_000);
        assert_eq!(value(&registry, "kafka_consumergroup_lag", "0"), Some(5.0));
        assert_eq!(
            value(&registry, "kafka_consumergroup_current_offset", "1"),
            Some(101.0)
        );
        assert_eq!(
            value(&registry, "hookstream_consumer_lag_seconds", "0"),
            Some(3.0)
        );
        assert_eq!(
            value(&registry, "hookstream_consumer_lag_seconds", "1"),
            Some(0.0),
            "idle reads 0"
        );
        g.update(&measured(vec![lag(0, 0)]), &[], 11_000);
        assert_eq!(value(&registry, "kafka_consumergroup_lag", "0"), Some(0.0));
        assert_eq!(
            value(&registry, "kafka_consumergroup_lag", "1"),
            None,
            "revoked: removed"
        );
        let partitions = |r: &Registry| {
            r.gather()
                .iter()
                .find(|f| f.name() == "hookstream_consumer_topic_partitions")
                .map(|f| f.get_metric().len())
        };
        assert_eq!(partitions(&registry), Some(1));
        g.clear();
        assert_eq!(value(&registry, "kafka_consumergroup_lag", "0"), None);
        assert_eq!(partitions(&registry), None, "a stopped consumer exports nothing");
    }
}
