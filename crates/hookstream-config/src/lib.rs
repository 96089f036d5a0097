//! Layered configuration shared by every Hookstream service.
//!
//! Layers, later ones win: built-in defaults, then an optional TOML file, then environment
//! variables `HOOKSTREAM_<SECTION>__<KEY>` (double underscore between levels, e.g.
//! `HOOKSTREAM_DATABASE__URL`, `HOOKSTREAM_KAFKA__TOPICS__EVENTS`). Unknown keys are errors,
//! so a typo fails at start-up instead of silently falling back to a default. Environment
//! variables without a `__` (such as `HOOKSTREAM_STATE_DIR`, used by the scripts) are not
//! configuration and are ignored.

#![forbid(unsafe_code)]

use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Prefix of every configuration environment variable.
pub const ENV_PREFIX: &str = "HOOKSTREAM_";

#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(String);

impl ConfigError {
    pub fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

/// Loads a configuration: defaults, then `file` (if given), then the environment.
pub fn load<T>(file: Option<&Path>) -> Result<T, ConfigError>
where
    T: DeserializeOwned + Serialize + Default,
{
    let mut figment = Figment::from(Serialized::defaults(T::default()));
    if let Some(path) = file {
        if !path.exists() {
            return Err(ConfigError(format!(
                "config file {} does not exist",
                path.display()
            )));
        }
        figment = figment.merge(Toml::file(path));
    }
    figment = figment.merge(env_provider());
    figment.extract().map_err(|e| ConfigError(e.to_string()))
}

fn env_provider() -> Env {
    Env::prefixed(ENV_PREFIX)
        .filter(|key| key.as_str().contains("__"))
        .split("__")
}

/// Where the PostgreSQL database is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    pub url: String,
    pub max_connections: u32,
    /// Run the embedded migrations at start-up (safe with several instances: sqlx takes a lock).
    pub migrate_on_start: bool,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: "postgres://postgres@127.0.0.1:5432/hookstream".into(),
            max_connections: 10,
            migrate_on_start: true,
        }
    }
}

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

/// How to reach Kafka.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    pub brokers: String,
    pub topics: TopicsConfig,
    /// Consumer group of the dispatcher on the events topic.
    pub group_id: String,
    /// Extra librdkafka properties (e.g. `security.protocol`), applied last.
    pub client: std::collections::BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            brokers: "127.0.0.1:9092".into(),
            topics: TopicsConfig::default(),
            group_id: "hookstream-dispatcher".into(),
            client: Default::default(),
        }
    }
}

/// Logs, and the HTTP listener for `/metrics` and `/healthz`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// `host:port` of the metrics and health listener; port 0 picks a free port.
    pub listen: String,
    /// `text` or `json`.
    pub log_format: String,
    /// A `tracing` filter such as `info,hookstream=debug`; `RUST_LOG` overrides it.
    pub log_level: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:0".into(),
            log_format: "text".into(),
            log_level: "info".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Cfg {
        database: DatabaseConfig,
        kafka: KafkaConfig,
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API returns its own large error
    fn layers_defaults_file_env_and_rejects_unknown_keys() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "c.toml",
                "[database]\nurl = \"postgres://file\"\n[kafka.topics]\nevents = \"e\"\n",
            )?;
            jail.set_env("HOOKSTREAM_KAFKA__BROKERS", "k:1");
            jail.set_env("HOOKSTREAM_STATE_DIR", "/not/config");
            let cfg: Cfg = load(Some(Path::new("c.toml"))).unwrap();
            assert_eq!(cfg.database.url, "postgres://file");
            assert_eq!(cfg.kafka.topics.events, "e");
            assert_eq!(cfg.kafka.topics.dlq, "hookstream.dlq");
            assert_eq!(cfg.kafka.brokers, "k:1");

            jail.set_env("HOOKSTREAM_DATABASE__URLL", "typo");
            let err = load::<Cfg>(Some(Path::new("c.toml"))).unwrap_err();
            assert!(err.to_string().contains("urll"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn missing_file_is_an_error() {
        assert!(load::<Cfg>(Some(Path::new("/nope/none.toml"))).is_err());
    }
}
