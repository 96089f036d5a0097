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
use figment::{Figment, Provider};
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
    "secrets",
];

/// Loads a configuration: defaults, then `file` (if given), then the environment.
pub fn load<T>(file: Option<&Path>) -> Result<T, ConfigError>
where
    T: DeserializeOwned + Serialize + Default,
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
    figment.extract().map_err(|e| ConfigError(e.to_string()))
}

/// Defaults, then `text` as the file's contents (TOML); no environment. The same parsing and
/// rejection of unknown keys as `load`, for tests and the fuzzer.
pub fn load_toml_str<T>(text: &str) -> Result<T, ConfigError>
where
    T: DeserializeOwned + Serialize + Default,
{
    Figment::from(Serialized::defaults(T::default()))
        .merge(Toml::string(text))
        .extract()
        .map_err(|e| ConfigError(e.to_string()))
}

/// `load` for a service's `main`: on a bad configuration, prints `<program>: <error>` and
/// exits with code 2 before anything is bound or connected.
pub fn load_or_exit<T>(program: &str, file: Option<&Path>) -> T
where
    T: DeserializeOwned + Serialize + Default,
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

/// The retry schedule and its delay-tier topics (one topic per distinct delay).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Hand retryable failures to the delay tiers (false: dead-letter them at once).
    pub enabled: bool,
    /// Delay before attempt 2, 3, … in milliseconds; after the last, the DLQ.
    pub schedule_ms: Vec<u64>,
    /// Each delay is multiplied by a random factor in [1 − jitter, 1 + jitter].
    pub jitter: f64,
    /// Timeouts and HTTP 429 wait at least this long.
    pub min_throttled_delay_ms: u64,
    /// A receiver's `Retry-After` is honoured up to this long.
    pub max_retry_after_ms: u64,
    /// Tier topics are `<prefix><delay>`, e.g. `hookstream.retry.5m`.
    pub topic_prefix: String,
    /// Consumer group of the dispatchers' retry role.
    pub group_id: String,
    /// Partitions of each tier topic when the dispatcher creates it.
    pub partitions: i32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        const S: u64 = 1000;
        Self {
            enabled: true,
            schedule_ms: vec![
                5 * S,
                300 * S,
                1800 * S,
                7200 * S,
                18000 * S,
                36000 * S,
                36000 * S,
            ],
            jitter: 0.2,
            min_throttled_delay_ms: 60 * S,
            max_retry_after_ms: 86_400 * S,
            topic_prefix: "hookstream.retry.".into(),
            group_id: "hookstream-dispatcher-retry".into(),
            partitions: 6,
        }
    }
}

impl RetryConfig {
    /// The tiers: distinct delays, shortest first, with their topic names.
    pub fn tiers(&self) -> Vec<(u64, String)> {
        let mut delays = self.schedule_ms.clone();
        delays.sort_unstable();
        delays.dedup();
        delays
            .into_iter()
            .map(|d| (d, format!("{}{}", self.topic_prefix, human_delay(d))))
            .collect()
    }

    /// The tier for a message due `delay_ms` from now: the shortest tier at least that long
    /// (so the head of a tier is always the earliest due), else the longest.
    pub fn tier_for(&self, delay_ms: u64) -> String {
        let tiers = self.tiers();
        tiers
            .iter()
            .find(|(d, _)| *d >= delay_ms)
            .or(tiers.last())
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| format!("{}0s", self.topic_prefix))
    }
}

/// The keys that seal endpoint signing secrets at rest (AES-256-GCM). A key is written
/// `<id>:<64 hex digits>` (32 random bytes; `hookstream secrets generate-key` makes one).
/// `key` seals new secrets; it and `previous_keys` open existing ones, so a key can be
/// rotated: add the new key as `key`, move the old one to `previous_keys`, run
/// `hookstream secrets seal` to re-seal every secret, then drop the old key.
/// `key_file` names a file with one key per line (first line: the sealing key), for keys
/// mounted from a secret store; it is read when `key` is empty.
#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsConfig {
    pub key: String,
    pub previous_keys: Vec<String>,
    pub key_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for SecretsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsConfig")
            .field("key", &if self.key.is_empty() { "" } else { "<redacted>" })
            .field(
                "previous_keys",
                &format!("<{} redacted>", self.previous_keys.len()),
            )
            .field("key_file", &self.key_file)
            .finish()
    }
}

impl SecretsConfig {
    /// Every configured key, the sealing key first (empty when none is configured).
    pub fn keys(&self) -> Result<Vec<String>, ConfigError> {
        let mut keys = Vec::new();
        if !self.key.is_empty() {
            keys.push(self.key.trim().to_string());
        } else if let Some(path) = &self.key_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("cannot read secrets.key_file {}: {e}", path.display())))?;
            keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(String::from),
            );
        }
        keys.extend(self.previous_keys.iter().map(|k| k.trim().to_string()));
        Ok(keys)
    }
}

/// `5000` → `5s`, `300000` → `5m`, `7200000` → `2h`, `1500` → `1500ms`.
fn human_delay(ms: u64) -> String {
    match ms {
        0 => "0s".into(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn retry_tiers_are_distinct_delays_with_readable_names() {
        let r = RetryConfig::default();
        let names: Vec<String> = r.tiers().into_iter().map(|(_, t)| t).collect();
        assert_eq!(
            names,
            ["5s", "5m", "30m", "2h", "5h", "10h"]
                .map(|d| format!("hookstream.retry.{d}"))
                .to_vec()
        );
        assert_eq!(r.tier_for(4_000), "hookstream.retry.5s");
        assert_eq!(r.tier_for(61_000), "hookstream.retry.5m");
        assert_eq!(r.tier_for(100 * 3_600_000), "hookstream.retry.10h");
        assert_eq!(human_delay(1_500), "1500ms");
    }

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
    fn missing_file_is_an_error() {
        assert!(load::<Cfg>(Some(Path::new("/nope/none.toml"))).is_err());
    }
}
