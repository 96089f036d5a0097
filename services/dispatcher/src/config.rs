//! The dispatcher's configuration: the shared sections, `[delivery]`, `[dispatcher]`,
//! `[retry]`, `[dlq]`, `[attempts]` and `[secrets]`, each validated before anything is bound or connected.

use hookstream_config::{
    ConfigError, DatabaseConfig, KafkaConfig, RetryConfig, SecretsConfig, TelemetryConfig, Validate,
};
use hookstream_delivery::DeliveryConfig;
use serde::{Deserialize, Serialize};

use crate::attempt_sink::AttemptsConfig;
use crate::dlq_sink::DlqConfig;
use crate::isolation::IsolationSettings;

/// The dispatcher's configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub database: DatabaseConfig,
    pub kafka: KafkaConfig,
    pub telemetry: TelemetryConfig,
    pub delivery: DeliveryConfig,
    pub dispatcher: DispatcherSettings,
    pub retry: RetryConfig,
    pub dlq: DlqConfig,
    /// The attempt log and its sink (the delivery log).
    pub attempts: AttemptsConfig,
    /// Keys that open the endpoints' signing secrets and URLs (sealed at rest).
    pub secrets: SecretsConfig,
}

/// What a dispatcher process does. Every role by default; a deployment may run them as
/// separate processes (to scale the events role on lag alone, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Consumes `hookstream.events` and delivers each event to its endpoints.
    Events,
    /// Consumes the retry tiers and delivers each record when it is due.
    Retry,
    /// Stores the DLQ topic in PostgreSQL.
    DlqSink,
    /// Stores the attempts topic in PostgreSQL (the delivery log).
    AttemptSink,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Events => "events",
            Role::Retry => "retry",
            Role::DlqSink => "dlq_sink",
            Role::AttemptSink => "attempt_sink",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DispatcherSettings {
    /// The roles this process runs.
    pub roles: Vec<Role>,
    /// Events processed at once by this instance (each may fan out to many endpoints); also
    /// the retry role's deliveries at once.
    pub max_in_flight_events: usize,
    /// Deliveries (event × endpoint) processed at once by this instance: what bounds memory
    /// when events fan out widely. An event takes as many as it has endpoints (at most this
    /// many) before its first attempt, so one event wider than the window still proceeds.
    pub max_in_flight_deliveries: usize,
    /// Fallback refresh of the subscription snapshot (changes also arrive by NOTIFY, and an
    /// event newer than the snapshot makes it refresh at once).
    pub subscription_refresh_ms: u64,
    /// How long SIGTERM waits for in-flight deliveries before exiting (keep it below the
    /// pod's termination grace period). Unfinished work is redelivered by the next owner.
    pub shutdown_grace_ms: u64,
    /// An endpoint failing with no success for this long is disabled (default: 5 days).
    pub disable_after_failing_ms: u64,
    /// Publish an `endpoint.disabled` event to the tenant (through the outbox, in the same
    /// transaction as the change) when the dispatcher disables one of its endpoints.
    pub publish_endpoint_disabled: bool,
    /// An event whose tenant is unknown is routed again (through the retry tiers, backing
    /// off) for this long before it is dead-lettered (`unknown_tenant`, replayable).
    pub unknown_tenant_retry_ms: u64,
    /// Circuit breakers, rate limits and concurrency caps per endpoint.
    pub isolation: IsolationSettings,
}

impl Default for DispatcherSettings {
    fn default() -> Self {
        Self {
            roles: vec![Role::Events, Role::Retry, Role::DlqSink, Role::AttemptSink],
            max_in_flight_events: 1000,
            max_in_flight_deliveries: 10_000,
            subscription_refresh_ms: 5_000,
            shutdown_grace_ms: 20_000,
            disable_after_failing_ms: 5 * 86_400_000,
            publish_endpoint_disabled: false,
            unknown_tenant_retry_ms: 60_000,
            isolation: IsolationSettings::default(),
        }
    }
}

impl DispatcherSettings {
    pub fn runs(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

impl Validate for DispatcherSettings {
    fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError::new(m));
        if self.roles.is_empty() {
            return err(
                "dispatcher.roles must name at least one of \"events\", \"retry\", \"dlq_sink\", \"attempt_sink\"".into(),
            );
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = self.roles.iter().find(|r| !seen.insert(**r)) {
            return err(format!("dispatcher.roles names {:?} twice", dup.as_str()));
        }
        for (key, value) in [
            (
                "dispatcher.max_in_flight_events",
                self.max_in_flight_events as u64,
            ),
            (
                "dispatcher.max_in_flight_deliveries",
                self.max_in_flight_deliveries as u64,
            ),
            ("dispatcher.subscription_refresh_ms", self.subscription_refresh_ms),
            (
                "dispatcher.disable_after_failing_ms",
                self.disable_after_failing_ms,
            ),
        ] {
            if value == 0 {
                return err(format!("{key} must be at least 1"));
            }
        }
        self.isolation.validate().map_err(ConfigError::new)
    }
}

/// `[delivery]`: values that parse but cannot work.
fn validate_delivery(d: &DeliveryConfig) -> Result<(), ConfigError> {
    let err = |m: String| Err(ConfigError::new(m));
    if d.connect_timeout_ms == 0 {
        return err("delivery.connect_timeout_ms must be at least 1".into());
    }
    if d.max_timeout_ms < 100 {
        return err(format!(
            "delivery.max_timeout_ms must be at least 100, not {}",
            d.max_timeout_ms
        ));
    }
    if d.user_agent.is_empty() || !d.user_agent.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return err("delivery.user_agent must be printable ASCII".into());
    }
    if let Some(proxy) = &d.proxy {
        let ok = url::Url::parse(proxy)
            // Only what the HTTP client speaks (reqwest is built without `socks`): a socks5
            // proxy would be accepted here and fail every delivery at its first connection.
            .map(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .unwrap_or(false);
        if !ok {
            return err(
                "delivery.proxy must be an http:// or https:// URL with a host (socks5 is not supported)"
                    .into(),
            );
        }
    }
    Ok(())
}

impl Validate for Config {
    fn validate(&self) -> Result<(), ConfigError> {
        self.database.validate()?;
        self.kafka.validate()?;
        self.telemetry.validate()?;
        validate_delivery(&self.delivery)?;
        self.dispatcher.validate()?;
        self.retry.validate()?;
        self.dlq.validate()?;
        self.attempts.validate()?;
        self.secrets.validate()?;
        if self.secrets.keys()?.is_empty() {
            return Err(ConfigError::new(
                "secrets.key (or secrets.key_file) is required: it opens the endpoints' signing secrets and URLs",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "[secrets]\nkey = \"k:0000000000000000000000000000000000000000000000000000000000000000\"\n";

    fn load(extra: &str) -> Result<Config, ConfigError> {
        hookstream_config::load_toml_str(&format!("{KEY}{extra}"))
    }

    #[test]
    fn every_section_is_validated_before_anything_starts() {
        load("").unwrap();
        for (toml, key) in [
            ("[retry]\nschedule_ms = []\n", "retry.schedule_ms"),
            ("[retry]\njitter = 1.5\n", "retry.jitter"),
            (
                "[dispatcher]\nmax_in_flight_events = 0\n",
                "dispatcher.max_in_flight_events",
            ),
            (
                "[dispatcher]\nmax_in_flight_deliveries = 0\n",
                "dispatcher.max_in_flight_deliveries",
            ),
            ("[dispatcher]\nroles = []\n", "dispatcher.roles"),
            ("[dispatcher.isolation]\nfailure_ratio = 0.0\n", "failure_ratio"),
            (
                "[kafka.client]\n\"enable.auto.offset.store\" = \"true\"\n",
                "enable.auto.offset.store",
            ),
            ("[kafka.client]\nacks = \"1\"\n", "acks"),
            ("[delivery]\nproxy = \"not a url\"\n", "delivery.proxy"),
            (
                "[delivery]\nproxy = \"socks5://127.0.0.1:1080\"\n",
                "delivery.proxy must be an http:// or https:// URL with a host (socks5 is not supported)",
            ),
            ("[dlq]\nprune_interval_ms = 0\n", "dlq.prune_interval_ms"),
        ] {
            let err = load(toml).expect_err(toml).to_string();
            assert!(err.contains(key), "{toml}: {err}");
        }
        let err = hookstream_config::load_toml_str::<Config>("")
            .unwrap_err()
            .to_string();
        assert!(err.contains("secrets.key"), "{err}");
    }
}
