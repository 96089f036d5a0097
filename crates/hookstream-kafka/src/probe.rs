//! The start-up check of the Kafka connection: a service asks for the cluster's metadata
//! before it does anything else, so that a wrong password, a TLS failure or an unreachable
//! broker stops it at once with a message that says which, instead of a consumer that
//! retries quietly for ever.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hookstream_config::KafkaConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use tokio_util::sync::CancellationToken;

/// Why Kafka cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The brokers refused our credentials or our certificate: an operator must fix it.
    #[error("kafka refused to authenticate this client: {0}")]
    Authentication(String),
    /// TLS could not be set up (a CA that does not match, a bad client key…).
    #[error("kafka TLS failed: {0}")]
    Tls(String),
    /// The configuration itself is refused by the client library.
    #[error("kafka client configuration refused: {0}")]
    Config(String),
    /// No broker answered in time.
    #[error("no kafka broker at {brokers} answered within {secs} s: {detail}")]
    Unreachable {
        brokers: String,
        secs: u64,
        detail: String,
    },
}

impl ProbeError {
    /// Whether restarting could help (an unreachable broker may come back; wrong credentials
    /// will not).
    pub fn is_configuration(&self) -> bool {
        !matches!(self, ProbeError::Unreachable { .. })
    }
}

/// Remembers the errors the client reports while the probe runs.
#[derive(Default, Clone)]
struct Seen(Arc<Mutex<Vec<(RDKafkaErrorCode, String)>>>);

impl ClientContext for Seen {
    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail);
        self.push(code, reason);
    }

    /// librdkafka reports a failed handshake or login in its log as well, sometimes only
    /// there (an error event can be folded into "all brokers down"): both are read.
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Error as i32) {
            self.push(RDKafkaErrorCode::Fail, &format!("{facility}: {message}"));
        }
    }
}

impl Seen {
    fn push(&self, code: RDKafkaErrorCode, reason: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((code, reason.to_string()));
    }
}

impl ConsumerContext for Seen {}

/// How long a service waits at start for Kafka to answer before giving up.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// The start-up check every service runs: `probe` until Kafka answers. A refused login or
/// TLS failure is returned at once (an operator must act); brokers that do not answer are
/// waited for, with a warning every `PROBE_TIMEOUT`, so a service started during a Kafka
/// outage begins when Kafka is back instead of exiting into an orchestrator's growing restart
/// back-off. `Ok(false)`: `shutdown` came first.
pub async fn probe_at_start(cfg: &KafkaConfig, shutdown: &CancellationToken) -> Result<bool, ProbeError> {
    loop {
        tokio::select! {
            probed = probe(cfg, PROBE_TIMEOUT) => match probed {
                Ok(()) => return Ok(true),
                Err(e) if e.is_configuration() => return Err(e),
                Err(e) => tracing::warn!(error = %e, "kafka does not answer yet; waiting for it before starting"),
            },
            _ = shutdown.cancelled() => return Ok(false),
        }
    }
}

/// Connects with the service's own settings and fetches the cluster's metadata within
/// `timeout`. Blocking work runs off the runtime's worker threads.
pub async fn probe(cfg: &KafkaConfig, timeout: Duration) -> Result<(), ProbeError> {
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || probe_blocking(&cfg, timeout))
        .await
        .map_err(|e| ProbeError::Config(format!("probe task failed: {e}")))?
}

/// How often the probe looks at what the client reported while it waits for metadata.
const LOOK_EVERY: Duration = Duration::from_millis(250);

fn probe_blocking(cfg: &KafkaConfig, timeout: Duration) -> Result<(), ProbeError> {
    let seen = Seen::default();
    let consumer: BaseConsumer<Seen> = crate::client_config(cfg)
        .create_with_context(seen.clone())
        .map_err(|e| ProbeError::Config(e.to_string()))?;
    let deadline = Instant::now() + timeout;
    // Short metadata requests, so that a refused login or a failed handshake (reported to the
    // context within a second) ends the probe at once instead of at the deadline.
    loop {
        let fetched = consumer.fetch_metadata(None, LOOK_EVERY);
        // Errors reach the context only when the client's queue is served.
        let _ = consumer.poll(Duration::ZERO);
        let errors = seen.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(refused) = refusal(&errors) {
            return Err(refused);
        }
        match fetched {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(ProbeError::Unreachable {
                    brokers: cfg.brokers.clone(),
                    secs: timeout.as_secs(),
                    detail: errors
                        .last()
                        .map(|(_, reason)| reason.clone())
                        .unwrap_or_else(|| e.to_string()),
                })
            }
            Err(_) => {}
        }
    }
}

/// The first error that says the brokers refused us (credentials, certificates), not that
/// they are away.
fn refusal(errors: &[(RDKafkaErrorCode, String)]) -> Option<ProbeError> {
    let auth = errors.iter().find(|(code, reason)| {
        matches!(
            code,
            RDKafkaErrorCode::Authentication
                | RDKafkaErrorCode::SaslAuthenticationFailed
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed
        ) || reason.contains("SASL authentication error")
            || reason.contains("Authentication failed")
    });
    if let Some((_, reason)) = auth {
        return Some(ProbeError::Authentication(reason.clone()));
    }
    errors
        .iter()
        .find(|(code, reason)| {
            // TLS 1.3 reports a refused client certificate after the handshake, as an alert on
            // the first read: OpenSSL's "SSL routines" text is what says it was TLS.
            *code == RDKafkaErrorCode::SSL
                || reason.contains("SSL handshake failed")
                || reason.contains("SSL routines")
        })
        .map(|(_, reason)| ProbeError::Tls(reason.clone()))
}
