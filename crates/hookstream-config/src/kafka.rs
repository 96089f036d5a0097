//! The `[kafka]` section: where Kafka is, the topic names, how topics are created, and the
//! operator's librdkafka overrides (which may not switch off what Hookstream's guarantees
//! rest on).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{ConfigError, Validate};

const DAY_MS: i64 = 86_400_000;

/// librdkafka properties `kafka.client` may not set, and why: Hookstream's guarantees rest
/// on them (no loss, no reordering, offsets stored only for finished work).
pub const PROTECTED_CLIENT_KEYS: &[(&str, &str)] = &[
    (
        "enable.idempotence",
        "producers must be idempotent (no duplicates or reordering on retries)",
    ),
    (
        "acks",
        "every acknowledgement must come from all in-sync replicas",
    ),
    (
        "request.required.acks",
        "every acknowledgement must come from all in-sync replicas",
    ),
    (
        "enable.auto.offset.store",
        "offsets are stored only for finished work",
    ),
    (
        "enable.auto.commit",
        "stored offsets are committed in the background",
    ),
    (
        "group.id",
        "set kafka.group_id, retry.group_id or dlq.sink_group_id instead",
    ),
    ("bootstrap.servers", "set kafka.brokers instead"),
    ("metadata.broker.list", "set kafka.brokers instead"),
    (
        "partition.assignment.strategy",
        "the consumers rely on cooperative-sticky assignment",
    ),
];

/// Topic names; overridable so several deployments (or tests) can share one cluster.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TopicsConfig {
    pub events: String,
    pub dlq: String,
    pub attempts: String,
}

impl Default for TopicsConfig {
    fn default() -> Self {
        Self {
            events: "hookstream.events".into(),
            dlq: "hookstream.dlq".into(),
            attempts: "hookstream.attempts".into(),
        }
    }
}

/// How topics are created (`hookstream topics create`, and the dispatcher for the retry
/// tiers): partitions, replication and retention.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TopicSettings {
    /// Partitions of the events, DLQ and attempts topics (the retry tiers: `retry.partitions`).
    /// The events topic's partitions bound how many dispatchers share the work.
    pub partitions: i32,
    /// Replication factor of every topic; -1 takes the broker's default.
    pub replication_factor: i32,
    /// How long events stay in the events topic (a dispatcher outage longer than this loses them).
    pub events_retention_ms: i64,
    /// How long dead letters stay in the DLQ topic (they are also stored in PostgreSQL).
    pub dlq_retention_ms: i64,
    /// How long attempt records stay in the attempts topic.
    pub attempts_retention_ms: i64,
}

impl Default for TopicSettings {
    fn default() -> Self {
        Self {
            partitions: 6,
            replication_factor: -1,
            events_retention_ms: 7 * DAY_MS,
            dlq_retention_ms: 30 * DAY_MS,
            attempts_retention_ms: 7 * DAY_MS,
        }
    }
}

/// How to reach Kafka.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    pub brokers: String,
    pub topics: TopicsConfig,
    pub topic_settings: TopicSettings,
    /// Consumer group of the dispatcher on the events topic.
    pub group_id: String,
    /// Extra librdkafka properties (e.g. `security.protocol`), applied last; the safety
    /// settings in `PROTECTED_CLIENT_KEYS` are refused.
    pub client: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            brokers: "127.0.0.1:9092".into(),
            topics: TopicsConfig::default(),
            topic_settings: TopicSettings::default(),
            group_id: "hookstream-dispatcher".into(),
            client: Default::default(),
        }
    }
}

impl Validate for KafkaConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError::new(m));
        if self.brokers.trim().is_empty() {
            return err("kafka.brokers must not be empty".into());
        }
        for (name, value) in [
            ("kafka.topics.events", &self.topics.events),
            ("kafka.topics.dlq", &self.topics.dlq),
            ("kafka.topics.attempts", &self.topics.attempts),
            ("kafka.group_id", &self.group_id),
        ] {
            if value.trim().is_empty() {
                return err(format!("{name} must not be empty"));
            }
        }
        for key in self.client.keys() {
            let normalised = key.trim().to_ascii_lowercase();
            if let Some((_, why)) = PROTECTED_CLIENT_KEYS.iter().find(|(k, _)| *k == normalised) {
                return err(format!("kafka.client.\"{key}\" cannot be overridden: {why}"));
            }
        }
        let t = &self.topic_settings;
        if t.partitions < 1 {
            return err(format!(
                "kafka.topic_settings.partitions must be at least 1, not {}",
                t.partitions
            ));
        }
        if t.replication_factor == 0 || t.replication_factor < -1 {
            return err(format!(
                "kafka.topic_settings.replication_factor must be -1 (broker default) or at least 1, not {}",
                t.replication_factor
            ));
        }
        for (name, ms) in [
            ("events_retention_ms", t.events_retention_ms),
            ("dlq_retention_ms", t.dlq_retention_ms),
            ("attempts_retention_ms", t.attempts_retention_ms),
        ] {
            if ms != -1 && ms < 3_600_000 {
                return err(format!(
                    "kafka.topic_settings.{name} must be -1 (forever) or at least one hour, not {ms}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safety_overrides_are_refused_by_name() {
        for key in [
            "enable.idempotence",
            "acks",
            "enable.auto.offset.store",
            "Enable.Auto.Commit",
        ] {
            let mut cfg = KafkaConfig::default();
            cfg.client.insert(key.into(), "false".into());
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(&format!("kafka.client.\"{key}\"")), "{err}");
        }
        let mut cfg = KafkaConfig::default();
        cfg.client.insert("security.protocol".into(), "SASL_SSL".into());
        cfg.validate().unwrap();
    }

    #[test]
    fn topic_settings_are_checked() {
        let mut cfg = KafkaConfig::default();
        cfg.topic_settings.partitions = 0;
        assert!(cfg.validate().unwrap_err().to_string().contains("partitions"));
        let mut cfg = KafkaConfig::default();
        cfg.topic_settings.events_retention_ms = 1000;
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("events_retention_ms"));
    }
}
