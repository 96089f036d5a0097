//! A topic lost while a service runs: deleted, or its ACLs revoked. At start
//! `topics::check_exist` refuses a missing topic; afterwards the only symptoms are records
//! Kafka never acknowledges and consumer errors, which a broker restarting also causes. So
//! after such a failure `TopicLoss` asks the broker about the topic itself: a topic its
//! metadata calls missing (or refused to this client) in checks spanning `CONFIRM_FOR`, with no
//! check in between finding it, is lost. The caller then fails its task, which makes the
//! service unhealthy and exit; restarted, it stops at the start-up check naming the topic,
//! until an operator acts. Before, a hand-off to a deleted topic was retried for ever behind
//! a green `/healthz`, its partition stuck.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hookstream_config::KafkaConfig;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::topics::{check_exist, TopicError};

/// How long the broker must keep saying a topic is gone before it is called lost: longer
/// than a topic's deletion and re-creation by hand, shorter than anyone waits for an alert.
pub const CONFIRM_FOR: Duration = Duration::from_secs(20);

/// At most one metadata check per topic this often, however many tasks report failures.
const CHECK_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
enum Gone {
    Missing,
    Unauthorized,
}

impl Gone {
    fn error(self, topic: &str) -> TopicError {
        match self {
            Gone::Missing => TopicError::Missing(topic.to_string()),
            Gone::Unauthorized => TopicError::Unauthorized(topic.to_string()),
        }
    }
}

/// What the last checks said about one topic.
struct Seen {
    checked: Instant,
    /// Since when every check found the topic gone, and how.
    gone_since: Option<(Instant, Gone)>,
}

/// Tells a lost topic from a passing failure; one per client, shared by its tasks.
pub struct TopicLoss {
    kafka: KafkaConfig,
    seen: tokio::sync::Mutex<HashMap<String, Seen>>,
}

impl TopicLoss {
    pub fn new(kafka: &KafkaConfig) -> Self {
        Self {
            kafka: kafka.clone(),
            seen: Default::default(),
        }
    }

    /// Called after using `topic` failed. `Err` (the topic missing or refused, naming it) once
    /// the topic is lost; `Ok` while it exists, may be passing through, or the broker cannot
    /// be asked (an outage is not a loss).
    pub async fn after_failure(&self, topic: &str) -> Result<(), TopicError> {
        // Held across the check: tasks failing together wait for one answer.
        let mut seen = self.seen.lock().await;
        let stale = seen.get(topic).is_none_or(|s| s.checked.elapsed() >= CHECK_EVERY);
        if stale {
            let verdict = match check_exist(&self.kafka, &[topic.to_string()]).await {
                Ok(()) => Some(None),
                Err(TopicError::Missing(_)) => Some(Some(Gone::Missing)),
                Err(TopicError::Unauthorized(_)) => Some(Some(Gone::Unauthorized)),
                Err(e) => {
                    tracing::debug!(topic, error = %e, "cannot tell whether the topic still exists");
                    None
                }
            };
            let entry = seen.entry(topic.to_string()).or_insert(Seen {
                checked: Instant::now(),
                gone_since: None,
            });
            entry.checked = Instant::now();
            match verdict {
                Some(None) => entry.gone_since = None,
                Some(Some(gone)) => {
                    if entry.gone_since.is_none() {
                        tracing::warn!(topic, error = %gone.error(topic),
                            "the broker says this topic is gone; stopping unless it is back within {CONFIRM_FOR:?}");
                    }
                    let since = entry.gone_since.map_or_else(Instant::now, |(since, _)| since);
                    entry.gone_since = Some((since, gone));
                }
                None => {}
            }
        }
        match seen.get(topic).and_then(|s| s.gone_since) {
            Some((since, gone)) if since.elapsed() >= CONFIRM_FOR => Err(gone.error(topic)),
            _ => Ok(()),
        }
    }
}

/// Whether a consumer error may mean one of its topics is gone (the consumer's error does not
/// say which).
pub fn may_be_lost(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownTopic
                | RDKafkaErrorCode::UnknownPartition
                | RDKafkaErrorCode::TopicAuthorizationFailed
        )
    )
}
