//! The relay's configuration: the shared sections, `[secrets]` and `[relay]`.

use hookstream_config::{ConfigError, DatabaseConfig, KafkaConfig, SecretsConfig, TelemetryConfig, Validate};
use serde::{Deserialize, Serialize};

/// The relay's configuration file (see `config/` for examples).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub database: DatabaseConfig,
    pub kafka: KafkaConfig,
    pub telemetry: TelemetryConfig,
    /// The master keys: the relay seals every payload with its tenant's (or subject's) data
    /// key, itself sealed by `secrets.key` (`hookstream_store::payload_keys`).
    pub secrets: SecretsConfig,
    pub relay: RelaySettings,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelaySettings {
    /// Most rows claimed in one transaction.
    pub batch_size: i64,
    /// Fallback poll when no NOTIFY arrives.
    pub poll_interval_ms: u64,
    /// How long Kafka may take to acknowledge before the batch is rolled back and retried.
    pub produce_timeout_ms: u64,
    /// Largest encoded record shipped; larger rows are quarantined (keep below the topic's
    /// `max.message.bytes`).
    pub max_record_bytes: usize,
    /// Ceiling of the exponential backoff after Kafka or PostgreSQL errors.
    pub max_backoff_ms: u64,
    /// How often to try to take over shards that have no owner.
    pub rebalance_interval_ms: u64,
    /// Idempotency keys (`hookstream.enqueue`'s last argument) are kept this many days; a key
    /// used again after that enqueues a new event. 0 keeps them for ever.
    pub idempotency_window_days: u32,
    /// How often old idempotency keys are pruned.
    pub prune_interval_ms: u64,
    /// Seal payloads before they reach Kafka (on by default). Off, payloads travel and rest in
    /// clear and erasure cannot reach Kafka: only for measuring what sealing costs.
    pub seal_payloads: bool,
}

impl Default for RelaySettings {
    fn default() -> Self {
        Self {
            batch_size: 1000,
            poll_interval_ms: 500,
            produce_timeout_ms: 30_000,
            max_record_bytes: 1_000_000,
            max_backoff_ms: 30_000,
            rebalance_interval_ms: 2_000,
            idempotency_window_days: 7,
            prune_interval_ms: 3_600_000,
            seal_payloads: true,
        }
    }
}

impl Validate for Config {
    fn validate(&self) -> Result<(), ConfigError> {
        self.database.validate()?;
        self.kafka.validate()?;
        self.telemetry.validate()?;
        self.secrets.validate()?;
        if self.secrets.keys()?.is_empty() {
            return Err(ConfigError::new(
                "secrets.key (or secrets.key_file) is required: it seals the payloads' data keys",
            ));
        }
        self.relay.validate()
    }
}

/// What a retry record or a dead letter adds to its event at most: the last response (64 KiB)
/// and a reason, with room to spare.
const HANDOFF_HEADROOM_BYTES: usize = 128 * 1024;

impl Validate for RelaySettings {
    fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("relay.batch_size", self.batch_size.max(0) as u64),
            ("relay.poll_interval_ms", self.poll_interval_ms),
            ("relay.produce_timeout_ms", self.produce_timeout_ms),
            ("relay.max_record_bytes", self.max_record_bytes as u64),
            ("relay.max_backoff_ms", self.max_backoff_ms),
            ("relay.rebalance_interval_ms", self.rebalance_interval_ms),
            ("relay.prune_interval_ms", self.prune_interval_ms),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::new(format!("{key} must be at least 1")));
        }
        let most = hookstream_kafka::topics::HANDOFF_RECORD_BYTES - HANDOFF_HEADROOM_BYTES;
        if self.max_record_bytes > most {
            return Err(ConfigError::new(format!(
                "relay.max_record_bytes must be at most {most}: a dispatcher's retry record or dead letter carries the \
                 event and more, and Hookstream's producers and topics take {} bytes",
                hookstream_kafka::topics::HANDOFF_RECORD_BYTES
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "[secrets]\nkey = \"k:0000000000000000000000000000000000000000000000000000000000000000\"\n";

    fn load(text: &str) -> Result<Config, ConfigError> {
        hookstream_config::load_toml_str::<Config>(&format!("{KEY}{text}"))
    }

    #[test]
    fn zero_batches_and_intervals_are_refused_by_name() {
        let err = load("[relay]\nbatch_size = 0\n").unwrap_err();
        assert!(err.to_string().contains("relay.batch_size"), "{err}");
        load("").unwrap();
    }

    #[test]
    fn a_master_key_is_required() {
        let err = hookstream_config::load_toml_str::<Config>("").unwrap_err();
        assert!(err.to_string().contains("secrets.key"), "{err}");
    }

    #[test]
    fn a_record_limit_past_what_hand_offs_can_carry_is_refused() {
        let err = load("[relay]\nmax_record_bytes = 2097152\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("relay.max_record_bytes must be at most 1966080"),
            "{err}"
        );
        load("[relay]\nmax_record_bytes = 1966080\n").unwrap();
    }
}
