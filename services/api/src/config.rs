//! The API's configuration: the shared sections (`database`, `kafka`, `telemetry`, `secrets`),
//! `[retry]` (the tier resends and recoveries go to, as the dispatchers read it), `[delivery]`
//! (only `allow_cidrs` is used: the SSRF policy endpoint URLs are checked against at creation,
//! the same allow-list the dispatchers connect with) and `[api]`, each validated before
//! anything is bound or connected.

use hookstream_config::{
    ConfigError, DatabaseConfig, KafkaConfig, RetryConfig, SecretsConfig, TelemetryConfig, Validate,
};
use hookstream_delivery::DeliveryConfig;
use serde::{Deserialize, Serialize};

/// The API's configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub database: DatabaseConfig,
    pub kafka: KafkaConfig,
    pub telemetry: TelemetryConfig,
    pub retry: RetryConfig,
    pub delivery: DeliveryConfig,
    pub secrets: SecretsConfig,
    pub api: ApiSettings,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSettings {
    /// `host:port` the API listens on; port 0 picks a free port.
    pub listen: String,
    /// Operator tokens, as `sha256:<64 hex digits>` of the token (`hookstream api-key
    /// hash-token` prints it). An operator may do everything, for every tenant.
    pub operator_token_hashes: Vec<String>,
    /// Requests per key (an operator token or a tenant key).
    pub rate_limit: RateLimitSettings,
    /// Failed authentications per client address (API tokens, portal links and sessions).
    pub auth_failures: AuthFailureSettings,
    /// Largest request body. 0: the payload limit (`hookstream.settings.max_payload_bytes`,
    /// read at start) plus 64 KiB for the rest of a message.
    pub max_body_bytes: usize,
    /// Refuse messages (and endpoint filters) naming an event type that is not in the
    /// catalogue, or is archived.
    pub enforce_event_types: bool,
    /// Messages are kept this many days (whole UTC days are dropped).
    pub message_retention_days: u32,
    /// Day partitions of the message store are created this many days ahead.
    pub partition_days_ahead: u32,
    /// How often the message store's partitions are created and dropped.
    pub maintenance_interval_ms: u64,
    /// Message creates are written in batches by this many writers, each its own connection,
    /// sharing one queue (whichever is free takes what has gathered).
    pub message_writers: usize,
    /// Most messages one writer stores in one statement.
    pub message_batch_rows: usize,
    /// How long a tenant key's lookup (or its absence) is remembered: a revoked key stops
    /// working within this time.
    pub key_cache_ms: u64,
    /// Deliveries per second of a recovery (`endpoint/{id}/recover`) or a dead-letter replay.
    pub recover_rate_per_s: f64,
    /// Where the tenant portal is served (this service's `/portal`, as browsers reach it);
    /// `app-portal-access` answers `<portal_url>/login?token=<single-use link token>`. An
    /// https URL makes the session cookie `Secure`.
    pub portal_url: String,
    /// Lifetime of an app-portal API token (`hsp_…`) when the request names none.
    pub portal_token_ttl_s: u64,
    /// Lifetime of a portal login link: it starts a session once, within this time.
    pub portal_link_ttl_s: u64,
    /// Lifetime of a portal session (the browser's cookie), from its login.
    pub portal_session_ttl_s: u64,
    /// Portal requests per second per session (0: no limit), and the burst above it.
    pub portal_rate_per_s: u32,
    pub portal_rate_burst: u32,
    /// Origins allowed to call the API from a browser (CORS). Empty: CORS off.
    pub cors_allowed_origins: Vec<String>,
    /// How long SIGTERM waits for requests and background recoveries in flight.
    pub shutdown_grace_ms: u64,
    /// A request not answered within this time is answered 503 (`unavailable`) and its work
    /// given up, so that a database gone dark (a failover's old primary) cannot hold clients
    /// and connections for the 15 minutes the kernel takes. 0: the database's answer
    /// deadline (`database.statement_timeout_ms` plus 5 s).
    pub request_timeout_ms: u64,
    /// How far ahead a message's `deliverAt` may be (Svix allows 24 hours; the tiers wait
    /// any time, through hops). At most 30 days, `hookstream.enqueue`'s own bound.
    pub max_deliver_at_ahead_s: u64,
    /// Background tasks (replays, bulk replays, recoveries) one tenant may have running at
    /// once; one more is a 429 naming this key.
    pub max_running_tasks_per_tenant: u32,
    /// Background tasks one API process runs at once (the rest wait for a free slot here or
    /// on another API).
    pub background_task_slots: u32,
}

/// The farthest `api.max_deliver_at_ahead_s` (what `hookstream.enqueue` accepts).
const MAX_DELIVER_AT_AHEAD_S: u64 = 30 * 86_400;

impl ApiSettings {
    pub fn max_deliver_at_ahead(&self) -> chrono::Duration {
        chrono::Duration::seconds(self.max_deliver_at_ahead_s.min(MAX_DELIVER_AT_AHEAD_S) as i64)
    }
}

/// The shortest `api.request_timeout_ms` taken (other than 0).
const MIN_REQUEST_TIMEOUT_MS: u64 = 1_000;

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            operator_token_hashes: Vec::new(),
            rate_limit: RateLimitSettings::default(),
            auth_failures: AuthFailureSettings::default(),
            max_body_bytes: 0,
            enforce_event_types: false,
            message_retention_days: 30,
            partition_days_ahead: 7,
            maintenance_interval_ms: 3_600_000,
            message_writers: 4,
            message_batch_rows: 256,
            key_cache_ms: 5_000,
            recover_rate_per_s: hookstream_replay::DEFAULT_RATE_PER_S,
            portal_url: "http://127.0.0.1:8080/portal".into(),
            portal_token_ttl_s: 7 * 86_400,
            portal_link_ttl_s: 600,
            portal_session_ttl_s: 8 * 3_600,
            portal_rate_per_s: 20,
            portal_rate_burst: 60,
            cors_allowed_origins: Vec::new(),
            shutdown_grace_ms: 10_000,
            request_timeout_ms: 0,
            max_deliver_at_ahead_s: 7 * 86_400,
            max_running_tasks_per_tenant: hookstream_store::background_tasks::DEFAULT_MAX_RUNNING_PER_TENANT,
            background_task_slots: 8,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitSettings {
    /// Sustained requests per second per key; 0 turns the limit off.
    pub per_key_per_s: u32,
    /// Requests a key may make at once above the sustained rate.
    pub burst: u32,
    /// Whether operator tokens are limited too.
    pub operators: bool,
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        Self {
            per_key_per_s: 1_000,
            burst: 2_000,
            operators: false,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthFailureSettings {
    /// Failed authentications a client address may have per minute, sustained; past its
    /// burst the address is answered 429 (without a key lookup) until the budget refills.
    /// 0 turns the throttle off.
    pub per_address_per_min: u32,
    /// Failures an address may have at once above the sustained rate.
    pub burst: u32,
    /// A header naming the client when the API runs behind a proxy (`x-forwarded-for`: its
    /// last address is used, the one the nearest proxy added). Empty: the TCP peer. Set it
    /// only behind a proxy that sets the header, or clients choose their own address.
    pub client_address_header: String,
}

impl Default for AuthFailureSettings {
    fn default() -> Self {
        Self {
            per_address_per_min: 60,
            burst: 30,
            client_address_header: String::new(),
        }
    }
}

/// The digest bytes of an `operator_token_hashes` entry.
pub fn parse_token_hash(entry: &str) -> Result<[u8; 32], String> {
    let hex_part = entry
        .strip_prefix("sha256:")
        .ok_or_else(|| "must start with \"sha256:\"".to_string())?;
    let bytes = hex::decode(hex_part).map_err(|_| "must be sha256: and 64 hex digits".to_string())?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| "must be sha256: and 64 hex digits".to_string())
}

impl Validate for ApiSettings {
    fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError::new(m));
        match self.listen.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
            _ => return err(format!("api.listen must be host:port, not {:?}", self.listen)),
        }
        for (i, h) in self.operator_token_hashes.iter().enumerate() {
            if let Err(why) = parse_token_hash(h) {
                return err(format!("api.operator_token_hashes[{i}] {why}"));
            }
        }
        if self.rate_limit.per_key_per_s > 0 && self.rate_limit.burst == 0 {
            return err("api.rate_limit.burst must be at least 1 when a rate is set".into());
        }
        if self.auth_failures.per_address_per_min > 0 && self.auth_failures.burst == 0 {
            return err("api.auth_failures.burst must be at least 1 when a rate is set".into());
        }
        let header = &self.auth_failures.client_address_header;
        if !header.is_empty() && axum::http::HeaderName::try_from(header.as_str()).is_err() {
            return err(format!(
                "api.auth_failures.client_address_header must be a header name, not {header:?}"
            ));
        }
        for (key, value) in [
            (
                "api.message_retention_days",
                u64::from(self.message_retention_days),
            ),
            ("api.partition_days_ahead", u64::from(self.partition_days_ahead)),
            ("api.maintenance_interval_ms", self.maintenance_interval_ms),
            ("api.message_writers", self.message_writers as u64),
            ("api.message_batch_rows", self.message_batch_rows as u64),
            ("api.portal_token_ttl_s", self.portal_token_ttl_s),
            ("api.portal_link_ttl_s", self.portal_link_ttl_s),
            ("api.portal_session_ttl_s", self.portal_session_ttl_s),
        ] {
            if value == 0 {
                return err(format!("{key} must be at least 1"));
            }
        }
        if !(1..=MAX_DELIVER_AT_AHEAD_S).contains(&self.max_deliver_at_ahead_s) {
            return err(format!(
                "api.max_deliver_at_ahead_s must be 1 to {MAX_DELIVER_AT_AHEAD_S} (30 days), not {}",
                self.max_deliver_at_ahead_s
            ));
        }
        if self.portal_rate_per_s > 0 && self.portal_rate_burst == 0 {
            return err("api.portal_rate_burst must be at least 1 when a rate is set".into());
        }
        if self.message_batch_rows > 1000 {
            return err("api.message_batch_rows must be at most 1000".into());
        }
        if self.request_timeout_ms > 0 && self.request_timeout_ms < MIN_REQUEST_TIMEOUT_MS {
            return err(format!(
                "api.request_timeout_ms must be 0 (the database's answer deadline) or at least \
                 {MIN_REQUEST_TIMEOUT_MS}, not {}: shorter, ordinary requests are cut",
                self.request_timeout_ms
            ));
        }
        if self.max_running_tasks_per_tenant == 0 || self.background_task_slots == 0 {
            return err(
                "api.max_running_tasks_per_tenant and api.background_task_slots must be at least 1".into(),
            );
        }
        if !(self.recover_rate_per_s.is_finite()
            && self.recover_rate_per_s >= hookstream_replay::MIN_RATE_PER_S)
        {
            return err(
                "api.recover_rate_per_s must be at least one delivery a day (1/86400 per second)".into(),
            );
        }
        match url::Url::parse(&self.portal_url) {
            Ok(u) if u.scheme() == "https" => {}
            // Plain http only where nothing crosses a network: the session cookie would travel
            // in clear and without `Secure`.
            Ok(u) if u.scheme() == "http" && is_loopback(&u) => {}
            Ok(u) if u.scheme() == "http" => {
                return err(format!(
                    "api.portal_url must be https unless its host is loopback, not {:?}: over plain http the \
                     portal's session cookie travels in clear (put the portal behind TLS and give its https URL)",
                    self.portal_url
                ))
            }
            _ => {
                return err(format!(
                    "api.portal_url must be an http(s) URL, not {:?}",
                    self.portal_url
                ))
            }
        }
        for o in &self.cors_allowed_origins {
            if o.parse::<axum::http::HeaderValue>().is_err()
                || !(o.starts_with("http://") || o.starts_with("https://"))
            {
                return err(format!(
                    "api.cors_allowed_origins: {o:?} is not an origin (https://host[:port])"
                ));
            }
        }
        Ok(())
    }
}

impl Validate for Config {
    fn validate(&self) -> Result<(), ConfigError> {
        self.database.validate()?;
        self.kafka.validate()?;
        self.telemetry.validate()?;
        self.retry.validate()?;
        self.secrets.validate()?;
        self.api.validate()?;
        if self.secrets.keys()?.is_empty() {
            return Err(ConfigError::new(
                "secrets.key (or secrets.key_file) is required: it seals and opens the endpoints' signing secrets and URLs",
            ));
        }
        Ok(())
    }
}

/// Whether a URL's host is this machine (`localhost`, 127.0.0.0/8 or ::1).
fn is_loopback(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
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
    fn bad_values_are_refused_naming_the_key() {
        let cfg = load("").unwrap();
        assert_eq!(cfg.api.listen, "127.0.0.1:8080");
        for (toml, key) in [
            ("[api]\nlisten = \"nope\"\n", "api.listen"),
            (
                "[api]\noperator_token_hashes = [\"abc\"]\n",
                "api.operator_token_hashes[0]",
            ),
            (
                "[api]\noperator_token_hashes = [\"sha256:abcd\"]\n",
                "api.operator_token_hashes[0]",
            ),
            ("[api]\nmessage_writers = 0\n", "api.message_writers"),
            ("[api]\nmessage_batch_rows = 5000\n", "api.message_batch_rows"),
            ("[api]\nrequest_timeout_ms = 50\n", "api.request_timeout_ms"),
            ("[api]\nportal_url = \"ftp://x\"\n", "api.portal_url"),
            (
                "[api]\nportal_url = \"http://portal.example.com/portal\"\n",
                "api.portal_url must be https unless its host is loopback",
            ),
            (
                "[api]\nportal_url = \"http://10.0.0.5:8080/portal\"\n",
                "api.portal_url must be https",
            ),
            ("[api]\nportal_link_ttl_s = 0\n", "api.portal_link_ttl_s"),
            ("[api]\nportal_session_ttl_s = 0\n", "api.portal_session_ttl_s"),
            ("[api.rate_limit]\nburst = 0\n", "api.rate_limit.burst"),
            ("[api.auth_failures]\nburst = 0\n", "api.auth_failures.burst"),
            (
                "[api.auth_failures]\nclient_address_header = \"x forwarded\"\n",
                "api.auth_failures.client_address_header",
            ),
            (
                "[api]\ncors_allowed_origins = [\"*\"]\n",
                "api.cors_allowed_origins",
            ),
            ("[api]\nunknown = 1\n", "unknown"),
        ] {
            let e = load(toml).expect_err(toml).to_string();
            assert!(e.contains(key), "{toml}: {e}");
        }
        let e = hookstream_config::load_toml_str::<Config>("")
            .unwrap_err()
            .to_string();
        assert!(e.contains("secrets.key"), "{e}");
        let ok = load(&format!(
            "[api]\noperator_token_hashes = [\"sha256:{}\"]\n",
            "ab".repeat(32)
        ))
        .unwrap();
        assert_eq!(
            parse_token_hash(&ok.api.operator_token_hashes[0]).unwrap(),
            [0xab; 32]
        );
    }

    #[test]
    fn plain_http_portal_urls_are_taken_on_loopback_only() {
        for url in [
            "https://portal.example.com/portal",
            "http://127.0.0.1:8080/portal",
            "http://127.3.0.1/portal",
            "http://LOCALHOST:8080/portal",
            "http://[::1]:8080/portal",
        ] {
            load(&format!("[api]\nportal_url = \"{url}\"\n")).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
    }
}
