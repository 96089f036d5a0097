//! Layered configuration shared by every Hookstream service.
//!
//! Layers, later ones win: built-in defaults, then an optional TOML file, then environment
//! variables `HOOKSTREAM_<SECTION>__<KEY>` (double underscore between levels, e.g.
//! `HOOKSTREAM_DATABASE__URL`, `HOOKSTREAM_KAFKA__TOPICS__EVENTS`). Unknown keys are errors,
//! so a typo fails at start-up instead of silently falling back to a default. Environment
//! variables without a `__` (such as `HOOKSTREAM_STATE_DIR`, used by the scripts) are not
//! configuration and are ignored.

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
mod database;
mod kafka;
mod retry;
mod secrets;

use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::{Figment, Provider};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use database::DatabaseConfig;
pub use kafka::{
    KafkaConfig, KafkaSecurity, TopicSettings, TopicsConfig, HANDOFF_RECORD_BYTES, PROTECTED_CLIENT_KEYS,
    SASL_MECHANISMS, SECURITY_PROTOCOLS,
};
pub use retry::{human_delay, RetryConfig, Tier, HOPS_PER_DELAY, RETRY_AFTER_CAP_LIMIT_MS};
pub use secrets::SecretsConfig;

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

/// Every top-level section any Hookstream service reads. One environment (a shared
/// ConfigMap, say) may configure several services: a service ignores the variables of
/// sections that belong to the others, and still rejects sections nobody knows (typos).
pub const SECTIONS: &[&str] = &[
    "database",
    "kafka",
    "telemetry",
    "relay",
    "delivery",
    "dispatcher",
    "retry",
    "dlq",
    "attempts",
    "secrets",
    "api",
    "health",
    // A receiver's inbox (`hookstream-inbox`), which may share the services' environment.
    "inbox",
];

/// The DLQ sink's consumer group unless `dlq.sink_group_id` says otherwise.
pub const DEFAULT_DLQ_SINK_GROUP: &str = "hookstream-dlq-sink";
/// The attempt sink's consumer group unless `attempts.sink_group_id` says otherwise.
pub const DEFAULT_ATTEMPT_SINK_GROUP: &str = "hookstream-attempt-sink";

/// A configuration (or a section of one) that can tell whether its values can work: values
/// that parse but cannot (an empty retry schedule, a jitter of 1, a zero cap, a safety
/// setting switched off) are refused before anything is bound or connected, with a message
/// that names the key.
pub trait Validate {
    fn validate(&self) -> Result<(), ConfigError>;
}

/// Loads a configuration: defaults, then `file` (if given), then the environment; then
/// validates it.
pub fn load<T>(file: Option<&Path>) -> Result<T, ConfigError>
where
    T: DeserializeOwned + Serialize + Default + Validate,
{
    let defaults = Figment::from(Serialized::defaults(T::default()));
    let own: Vec<String> = defaults
        .data()
        .ok()
        .and_then(|d| d.into_values().next())
        .map(|dict| dict.into_keys().collect())
        .unwrap_or_default();
    let mut figment = defaults;
    if let Some(path) = file {
        if !path.exists() {
            return Err(ConfigError(format!(
                "config file {} does not exist",
                path.display()
            )));
        }
        figment = figment.merge(Toml::file(path));
    }
    figment = figment.merge(env_provider(own));
    let cfg: T = figment.extract().map_err(|e| ConfigError(e.to_string()))?;
    cfg.validate()?;
    Ok(cfg)
}

/// Defaults, then `text` as the file's contents (TOML); no environment. The same parsing,
/// rejection of unknown keys and validation as `load`, for tests and the fuzzer.
pub fn load_toml_str<T>(text: &str) -> Result<T, ConfigError>
where
    T: DeserializeOwned + Serialize + Default + Validate,
{
    let cfg: T = Figment::from(Serialized::defaults(T::default()))
        .merge(Toml::string(text))
        .extract()
        .map_err(|e| ConfigError(e.to_string()))?;
    cfg.validate()?;
    Ok(cfg)
}

/// `load` for a service's `main`: on a bad configuration, prints `<program>: <error>` and
/// exits with code 2 before anything is bound or connected.
pub fn load_or_exit<T>(program: &str, file: Option<&Path>) -> T
where
    T: DeserializeOwned + Serialize + Default + Validate,
{
    load(file).unwrap_or_else(|e| {
        eprintln!("{program}: {e}");
        std::process::exit(2);
    })
}

fn env_provider(own: Vec<String>) -> Env {
    Env::prefixed(ENV_PREFIX)
        .filter(move |key| {
            let Some((section, _)) = key.as_str().split_once("__") else {
                return false; // not configuration (e.g. HOOKSTREAM_STATE_DIR)
            };
            let section = section.to_ascii_lowercase();
            own.contains(&section) || !SECTIONS.contains(&section.as_str())
        })
        .split("__")
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

impl Validate for TelemetryConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if !matches!(self.log_format.as_str(), "text" | "json") {
            return Err(ConfigError::new(format!(
                "telemetry.log_format must be \"text\" or \"json\", not {:?}",
                self.log_format
            )));
        }
        match self.listen.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
            _ => Err(ConfigError::new(format!(
                "telemetry.listen must be host:port, not {:?}",
                self.listen
            ))),
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

    impl Validate for Cfg {
        fn validate(&self) -> Result<(), ConfigError> {
            self.database.validate()?;
            self.kafka.validate()
        }
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

            // Another service's section is not an error; an unknown section or key is.
            jail.set_env("HOOKSTREAM_RELAY__BATCH_SIZE", "5");
            let _: Cfg = load(Some(Path::new("c.toml"))).unwrap();
            jail.set_env("HOOKSTREAM_RELAYY__BATCH_SIZE", "5");
            assert!(load::<Cfg>(Some(Path::new("c.toml"))).is_err(), "unknown section");
            jail.set_env("HOOKSTREAM_RELAYY__BATCH_SIZE", "");
            std::env::remove_var("HOOKSTREAM_RELAYY__BATCH_SIZE");
            jail.set_env("HOOKSTREAM_DATABASE__URLL", "typo");
            let err = load::<Cfg>(Some(Path::new("c.toml"))).unwrap_err();
            assert!(err.to_string().contains("urll"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn values_that_cannot_work_are_refused_after_parsing() {
        let err = load_toml_str::<Cfg>("[kafka.client]\n\"enable.idempotence\" = \"false\"\n").unwrap_err();
        assert!(
            err.to_string().contains("kafka.client.\"enable.idempotence\""),
            "{err}"
        );
        let err = load_toml_str::<Cfg>("[database]\nmax_connections = 0\n").unwrap_err();
        assert!(err.to_string().contains("database.max_connections"), "{err}");
        load_toml_str::<Cfg>("").unwrap();
    }

    #[test]
    fn missing_file_is_an_error() {
        assert!(load::<Cfg>(Some(Path::new("/nope/none.toml"))).is_err());
    }
}
