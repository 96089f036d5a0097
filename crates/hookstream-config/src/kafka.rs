//! The `[kafka]` section: where Kafka is, the topic names, how topics are created, and the
//! operator's librdkafka overrides (which may not switch off what Hookstream's guarantees
//! rest on).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{ConfigError, Validate};

const DAY_MS: i64 = 86_400_000;

/// The largest record the retry tiers and the DLQ accept (their `max.message.bytes`), and the
/// largest a Hookstream producer sends (`message.max.bytes`). An events record of the relay's
/// largest (`relay.max_record_bytes`, 1,000,000 by default, under the broker's default limit
/// that the events topic keeps) grows on its way: a retry record adds a few fields, a dead
/// letter its reason and up to 64 KiB of the last response. At the broker's default such a
/// record would be refused; with 2 MiB it fits with room to spare. A record refused anyway
/// (a topic made elsewhere with a lower limit) is made smaller by the dispatcher, never
/// retried as it is. `kafka.client."message.max.bytes"` may not be set lower.
pub const HANDOFF_RECORD_BYTES: usize = 2 * 1024 * 1024;

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
    (
        "allow.auto.create.topics",
        "Hookstream's topics are made by `hookstream topics create` with the settings they need; one a client \
         creates gets the broker's defaults",
    ),
    ("bootstrap.servers", "set kafka.brokers instead"),
    ("metadata.broker.list", "set kafka.brokers instead"),
    (
        "partition.assignment.strategy",
        "the consumers rely on cooperative-sticky assignment",
    ),
    (
        "auto.offset.reset",
        "a group without committed offsets starts at the earliest record; any other start skips what the topic \
         already holds",
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
    /// `min.insync.replicas` of every topic: how many copies must have a record before the
    /// producers' `acks=all` write is acknowledged. With replication 3, set 2: an acknowledged
    /// record survives the loss of one broker and writes go on while one is down. -1 takes
    /// the broker's default.
    pub min_insync_replicas: i32,
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
            min_insync_replicas: -1,
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
    /// TLS and SASL, by name.
    pub security: KafkaSecurity,
    /// Extra librdkafka properties, applied last; the safety settings in
    /// `PROTECTED_CLIENT_KEYS`, and keys `security` already sets, are refused.
    pub client: BTreeMap<String, String>,
}

/// SASL mechanisms librdkafka speaks that Hookstream is built for.
pub const SASL_MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];
/// `security.protocol` values.
pub const SECURITY_PROTOCOLS: &[&str] = &["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"];

/// How clients encrypt and authenticate: TLS (a CA, mutual TLS), SASL PLAIN, SCRAM-SHA-256/512,
/// or OAUTHBEARER with OIDC client credentials. Everything else goes through `kafka.client`.
/// Passwords and secrets never appear in `Debug` output or messages.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaSecurity {
    /// `plaintext`, `ssl`, `sasl_plaintext` or `sasl_ssl`.
    pub protocol: String,
    /// CA certificate(s) (PEM) the brokers' certificates must chain to; unset: the system's.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM), for mutual TLS.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub key_password: Option<String>,
    /// Check that a broker's certificate names the host it was reached by.
    pub verify_hostname: bool,
    /// `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER`.
    pub sasl_mechanism: Option<String>,
    pub sasl_username: Option<String>,
    pub sasl_password: Option<String>,
    /// A file holding the SASL password (a mounted secret), read at start when
    /// `sasl_password` is unset.
    pub sasl_password_file: Option<PathBuf>,
    /// OAUTHBEARER (OIDC client credentials): the token endpoint, client id, client secret
    /// (or a file holding it) and scope.
    pub oauth_token_endpoint: Option<String>,
    pub oauth_client_id: Option<String>,
    pub oauth_client_secret: Option<String>,
    pub oauth_client_secret_file: Option<PathBuf>,
    pub oauth_scope: Option<String>,
}

impl Default for KafkaSecurity {
    fn default() -> Self {
        Self {
            protocol: "plaintext".into(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            key_password: None,
            verify_hostname: true,
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
            sasl_password_file: None,
            oauth_token_endpoint: None,
            oauth_client_id: None,
            oauth_client_secret: None,
            oauth_client_secret_file: None,
            oauth_scope: None,
        }
    }
}

impl std::fmt::Debug for KafkaSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("KafkaSecurity")
            .field("protocol", &self.protocol)
            .field("ca_file", &self.ca_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("key_password", &hidden(&self.key_password))
            .field("verify_hostname", &self.verify_hostname)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("sasl_username", &self.sasl_username)
            .field("sasl_password", &hidden(&self.sasl_password))
            .field("sasl_password_file", &self.sasl_password_file)
            .field("oauth_token_endpoint", &self.oauth_token_endpoint)
            .field("oauth_client_id", &self.oauth_client_id)
            .field("oauth_client_secret", &hidden(&self.oauth_client_secret))
            .field("oauth_client_secret_file", &self.oauth_client_secret_file)
            .field("oauth_scope", &self.oauth_scope)
            .finish()
    }
}

fn read_secret(key: &str, path: &PathBuf) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
        .map_err(|e| ConfigError::new(format!("{key}: cannot read {}: {e}", path.display())))
}

impl KafkaSecurity {
    fn uses_tls(&self) -> bool {
        matches!(self.protocol.as_str(), "ssl" | "sasl_ssl")
    }

    fn uses_sasl(&self) -> bool {
        matches!(self.protocol.as_str(), "sasl_plaintext" | "sasl_ssl")
    }

    /// The librdkafka properties these settings mean (secret files read now). None when the
    /// section is left at its defaults (then `kafka.client` may set security the raw way).
    pub fn client_properties(&self) -> Result<Vec<(&'static str, String)>, ConfigError> {
        if *self == Self::default() {
            return Ok(Vec::new());
        }
        let mut props = vec![("security.protocol", self.protocol.clone())];
        let path = |p: &PathBuf| p.display().to_string();
        if self.uses_tls() {
            if let Some(ca) = &self.ca_file {
                props.push(("ssl.ca.location", path(ca)));
            }
            if let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) {
                props.push(("ssl.certificate.location", path(cert)));
                props.push(("ssl.key.location", path(key)));
            }
            if let Some(pw) = &self.key_password {
                props.push(("ssl.key.password", pw.clone()));
            }
            props.push((
                "ssl.endpoint.identification.algorithm",
                if self.verify_hostname { "https" } else { "none" }.into(),
            ));
        }
        if self.uses_sasl() {
            let mechanism = self.sasl_mechanism.clone().unwrap_or_default();
            props.push(("sasl.mechanism", mechanism.clone()));
            if mechanism == "OAUTHBEARER" {
                props.push(("sasl.oauthbearer.method", "oidc".into()));
                if let Some(url) = &self.oauth_token_endpoint {
                    props.push(("sasl.oauthbearer.token.endpoint.url", url.clone()));
                }
                if let Some(id) = &self.oauth_client_id {
                    props.push(("sasl.oauthbearer.client.id", id.clone()));
                }
                let secret = match (&self.oauth_client_secret, &self.oauth_client_secret_file) {
                    (Some(s), _) => Some(s.clone()),
                    (None, Some(f)) => Some(read_secret("kafka.security.oauth_client_secret_file", f)?),
                    (None, None) => None,
                };
                if let Some(secret) = secret {
                    props.push(("sasl.oauthbearer.client.secret", secret));
                }
                if let Some(scope) = &self.oauth_scope {
                    props.push(("sasl.oauthbearer.scope", scope.clone()));
                }
            } else {
                if let Some(user) = &self.sasl_username {
                    props.push(("sasl.username", user.clone()));
                }
                let password = match (&self.sasl_password, &self.sasl_password_file) {
                    (Some(p), _) => Some(p.clone()),
                    (None, Some(f)) => Some(read_secret("kafka.security.sasl_password_file", f)?),
                    (None, None) => None,
                };
                if let Some(password) = password {
                    props.push(("sasl.password", password));
                }
            }
        }
        Ok(props)
    }
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            brokers: "127.0.0.1:9092".into(),
            topics: TopicsConfig::default(),
            topic_settings: TopicSettings::default(),
            group_id: "hookstream-dispatcher".into(),
            security: KafkaSecurity::default(),
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
        // One topic in two roles would feed a role its own output (dead letters read back as
        // events, dead-lettered again, for good).
        let t = &self.topics;
        for (a, b, name) in [
            (&t.events, &t.dlq, "kafka.topics.events and kafka.topics.dlq"),
            (
                &t.events,
                &t.attempts,
                "kafka.topics.events and kafka.topics.attempts",
            ),
            (&t.dlq, &t.attempts, "kafka.topics.dlq and kafka.topics.attempts"),
        ] {
            if a == b {
                return err(format!("{name} must be different topics (both are {a:?})"));
            }
        }
        self.security.validate()?;
        let named: Vec<&str> = self
            .security
            .client_properties()?
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        for key in self.client.keys() {
            let normalised = key.trim().to_ascii_lowercase();
            if let Some((_, why)) = PROTECTED_CLIENT_KEYS.iter().find(|(k, _)| *k == normalised) {
                return err(format!("kafka.client.\"{key}\" cannot be overridden: {why}"));
            }
            if normalised == "message.max.bytes" {
                let value = &self.client[key];
                match value.trim().parse::<usize>() {
                    Ok(n) if n >= HANDOFF_RECORD_BYTES => {}
                    _ => {
                        return err(format!(
                            "kafka.client.\"{key}\" must be a number of bytes of at least {HANDOFF_RECORD_BYTES}, not \
                             {value:?}: a retry record or a dead letter carries a whole events record and more, and a \
                             producer limit below that would dead-letter large events instead of retrying them"
                        ))
                    }
                }
            }
            if named.contains(&normalised.as_str()) {
                return err(format!(
                    "kafka.client.\"{key}\" is set by kafka.security: set it there, once"
                ));
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
        if t.min_insync_replicas == 0 || t.min_insync_replicas < -1 {
            return err(format!(
                "kafka.topic_settings.min_insync_replicas must be -1 (broker default) or at least 1, not {}",
                t.min_insync_replicas
            ));
        }
        if t.replication_factor > 0 && t.min_insync_replicas > t.replication_factor {
            return err(format!(
                "kafka.topic_settings.min_insync_replicas ({}) exceeds replication_factor ({}): every acks=all \
                 write would be refused",
                t.min_insync_replicas, t.replication_factor
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

impl Validate for KafkaSecurity {
    fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError::new(m));
        if !SECURITY_PROTOCOLS.contains(&self.protocol.as_str()) {
            return err(format!(
                "kafka.security.protocol must be one of {}, not {:?}",
                SECURITY_PROTOCOLS.join(", "),
                self.protocol
            ));
        }
        for (key, path) in [
            ("kafka.security.ca_file", &self.ca_file),
            ("kafka.security.cert_file", &self.cert_file),
            ("kafka.security.key_file", &self.key_file),
            ("kafka.security.sasl_password_file", &self.sasl_password_file),
            (
                "kafka.security.oauth_client_secret_file",
                &self.oauth_client_secret_file,
            ),
        ] {
            if let Some(p) = path {
                if std::fs::metadata(p).is_err() {
                    return err(format!("{key}: cannot read {}", p.display()));
                }
            }
        }
        let tls_set = self.ca_file.is_some() || self.cert_file.is_some() || self.key_password.is_some();
        if tls_set && !self.uses_tls() {
            return err(format!(
                "kafka.security: TLS files are set but protocol is {:?} (use ssl or sasl_ssl)",
                self.protocol
            ));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return err("kafka.security.cert_file and kafka.security.key_file go together".into());
        }
        let sasl_set = self.sasl_mechanism.is_some()
            || self.sasl_username.is_some()
            || self.sasl_password.is_some()
            || self.sasl_password_file.is_some();
        if !self.uses_sasl() {
            if sasl_set {
                return err(format!(
                    "kafka.security: SASL settings are set but protocol is {:?} (use sasl_ssl or sasl_plaintext)",
                    self.protocol
                ));
            }
            return Ok(());
        }
        let Some(mechanism) = &self.sasl_mechanism else {
            return err(format!(
                "kafka.security.sasl_mechanism is required with protocol {:?}: one of {}",
                self.protocol,
                SASL_MECHANISMS.join(", ")
            ));
        };
        if !SASL_MECHANISMS.contains(&mechanism.as_str()) {
            return err(format!(
                "kafka.security.sasl_mechanism must be one of {}, not {mechanism:?}",
                SASL_MECHANISMS.join(", ")
            ));
        }
        if mechanism == "OAUTHBEARER" {
            if self.oauth_token_endpoint.is_none() || self.oauth_client_id.is_none() {
                return err(
                    "kafka.security: OAUTHBEARER needs oauth_token_endpoint and oauth_client_id (OIDC client credentials)"
                        .into(),
                );
            }
            if self.oauth_client_secret.is_none() && self.oauth_client_secret_file.is_none() {
                return err(
                    "kafka.security: OAUTHBEARER needs oauth_client_secret or oauth_client_secret_file"
                        .into(),
                );
            }
        } else {
            if self.sasl_username.as_deref().unwrap_or("").is_empty() {
                return err(format!(
                    "kafka.security.sasl_username is required with {mechanism}"
                ));
            }
            if self.sasl_password.is_none() && self.sasl_password_file.is_none() {
                return err(format!(
                    "kafka.security.sasl_password or sasl_password_file is required with {mechanism}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Helm chart's `config.kafka.topic_settings` are these defaults, key for key: one
    /// place (this file) says how topics are made, and the chart repeats it.
    #[test]
    fn the_charts_topic_settings_are_the_defaults() {
        let values = include_str!("../../../helm/hookstream/values.yaml");
        let mut lines = values.lines().skip_while(|l| l.trim() != "topic_settings:");
        let head = lines.next().expect("values.yaml has config.kafka.topic_settings");
        let indent = |l: &str| l.len() - l.trim_start().len();
        let depth = indent(head);
        let chart: BTreeMap<String, i64> = lines
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .take_while(|l| indent(l) > depth)
            .map(|l| {
                let (k, v) = l.trim().split_once(':').expect("key: value");
                let v = v.split('#').next().unwrap_or_default().trim();
                (
                    k.to_string(),
                    v.parse().unwrap_or_else(|_| panic!("{k}: {v} is a number")),
                )
            })
            .collect();
        let ours: BTreeMap<String, i64> =
            figment::Figment::from(figment::providers::Serialized::defaults(TopicSettings::default()))
                .extract()
                .expect("the defaults as a map");
        assert_eq!(chart, ours);
    }

    #[test]
    fn security_settings_become_librdkafka_properties_and_secrets_stay_hidden() {
        let dir = std::env::temp_dir().join(format!("hs-kafka-sec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let pw = dir.join("password");
        std::fs::write(&pw, "from-a-file\n").unwrap();
        let sec = KafkaSecurity {
            protocol: "sasl_ssl".into(),
            ca_file: Some(ca.clone()),
            sasl_mechanism: Some("SCRAM-SHA-512".into()),
            sasl_username: Some("hookstream".into()),
            sasl_password_file: Some(pw),
            ..Default::default()
        };
        sec.validate().unwrap();
        let props: BTreeMap<&str, String> = sec.client_properties().unwrap().into_iter().collect();
        assert_eq!(props["security.protocol"], "sasl_ssl");
        assert_eq!(props["ssl.ca.location"], ca.display().to_string());
        assert_eq!(props["sasl.mechanism"], "SCRAM-SHA-512");
        assert_eq!(
            props["sasl.password"], "from-a-file",
            "read from the file, newline trimmed"
        );
        assert_eq!(props["ssl.endpoint.identification.algorithm"], "https");
        let shown = format!(
            "{:?}",
            KafkaSecurity {
                sasl_password: Some("s3cr3t".into()),
                ..sec.clone()
            }
        );
        assert!(!shown.contains("s3cr3t"), "{shown}");

        let mut cfg = KafkaConfig {
            security: sec,
            ..Default::default()
        };
        cfg.validate().unwrap();
        cfg.client.insert("sasl.username".into(), "other".into());
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("set by kafka.security"));
    }

    #[test]
    fn incomplete_security_settings_are_refused_by_name() {
        let bad = |s: KafkaSecurity| s.validate().unwrap_err().to_string();
        assert!(bad(KafkaSecurity {
            protocol: "SSL".into(),
            ..Default::default()
        })
        .contains("kafka.security.protocol"));
        assert!(bad(KafkaSecurity {
            protocol: "sasl_ssl".into(),
            ..Default::default()
        })
        .contains("sasl_mechanism"));
        assert!(bad(KafkaSecurity {
            protocol: "sasl_ssl".into(),
            sasl_mechanism: Some("SCRAM-SHA-256".into()),
            sasl_username: Some("u".into()),
            ..Default::default()
        })
        .contains("sasl_password"));
        assert!(bad(KafkaSecurity {
            sasl_mechanism: Some("PLAIN".into()),
            ..Default::default()
        })
        .contains("protocol is \"plaintext\""));
        assert!(bad(KafkaSecurity {
            protocol: "ssl".into(),
            cert_file: Some("/nope/cert.pem".into()),
            ..Default::default()
        })
        .contains("kafka.security.cert_file"));
    }

    #[test]
    fn safety_overrides_are_refused_by_name() {
        for key in [
            "enable.idempotence",
            "acks",
            "enable.auto.offset.store",
            "Enable.Auto.Commit",
            "auto.offset.reset",
            "allow.auto.create.topics",
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
    fn a_producer_record_limit_below_what_hand_offs_carry_is_refused() {
        for value in ["1000000", "2097151", "lots", ""] {
            let mut cfg = KafkaConfig::default();
            cfg.client.insert("Message.Max.Bytes".into(), value.into());
            let err = cfg.validate().unwrap_err().to_string();
            assert!(
                err.contains("kafka.client.\"Message.Max.Bytes\"") && err.contains("2097152"),
                "{value}: {err}"
            );
        }
        let mut cfg = KafkaConfig::default();
        cfg.client.insert("message.max.bytes".into(), "4194304".into());
        cfg.validate().unwrap();
    }

    #[test]
    fn one_topic_in_two_roles_is_refused() {
        let mut cfg = KafkaConfig::default();
        cfg.topics.dlq = cfg.topics.events.clone();
        let err = cfg.validate().unwrap_err().to_string();
        assert!(
            err.contains("kafka.topics.events and kafka.topics.dlq must be different"),
            "{err}"
        );
        let mut cfg = KafkaConfig::default();
        cfg.topics.attempts = cfg.topics.dlq.clone();
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("kafka.topics.dlq and kafka.topics.attempts"));
        KafkaConfig::default().validate().unwrap();
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
