//! The start-up check of the Kafka connection: a service asks for the cluster's metadata
//! before it does anything else, so that a wrong password, a TLS failure or an unreachable
//! broker stops it at once with a message that says which, instead of a consumer that
//! retries quietly for ever.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookstream_config::KafkaConfig;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

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
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((code, reason.to_string()));
    }
}

impl ConsumerContext for Seen {}

/// Connects with the service's own settings and fetches the cluster's metadata within
/// `timeout`. Blocking work runs off the runtime's worker threads.
pub async fn probe(cfg: &KafkaConfig, timeout: Duration) -> Result<(), ProbeError> {
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || probe_blocking(&cfg, timeout))
        .await
        .map_err(|e| ProbeError::Config(format!("probe task failed: {e}")))?
}

fn probe_blocking(cfg: &KafkaConfig, timeout: Duration) -> Result<(), ProbeError> {
    let seen = Seen::default();
    let consumer: BaseConsumer<Seen> = crate::client_config(cfg)
        .create_with_context(seen.clone())
        .map_err(|e| ProbeError::Config(e.to_string()))?;
    let fetched = consumer.fetch_metadata(None, timeout);
    let errors = seen.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
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
        return Err(ProbeError::Authentication(reason.clone()));
    }
    if let Some((_, reason)) = errors
        .iter()
        .find(|(code, reason)| *code == RDKafkaErrorCode::SSL || reason.contains("SSL handshake failed"))
    {
        return Err(ProbeError::Tls(reason.clone()));
    }
    match fetched {
        Ok(_) => Ok(()),
        Err(e) => Err(ProbeError::Unreachable {
            brokers: cfg.brokers.clone(),
            secs: timeout.as_secs(),
            detail: errors
                .last()
                .map(|(_, reason)| reason.clone())
                .unwrap_or_else(|| e.to_string()),
        }),
    }
}
