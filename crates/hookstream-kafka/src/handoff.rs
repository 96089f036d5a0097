//! The hand-off: produce one record and wait until Kafka acknowledged it. A consumer that
//! hands a record on (to a retry tier, to the DLQ) stores its own offset only after this
//! returned `Ok` (invariant 1); it retries for as long as it takes, and gives up only on
//! shutdown (the offset then stays unstored and the work is redone), when the producer
//! itself can no longer work (a fatal error: the service must restart), when the topic is
//! lost (deleted or refused while the service runs, `lost.rs`: the service must stop), or
//! when the record is larger than the producer or the topic accepts: retrying cannot change
//! that, so the caller must make the record smaller or decide otherwise (else one record
//! would hold its partition forever).

use std::sync::Arc;
use std::time::Duration;

use hookstream_config::KafkaConfig;

use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use tokio_util::sync::CancellationToken;

use crate::lost::TopicLoss;
use crate::topics::TopicError;

/// Why a hand-off did not complete.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("shutting down before kafka acknowledged the record")]
    Shutdown,
    #[error("kafka producer failed for good: {0}")]
    Fatal(String),
    /// The topic was deleted, or this client's access to it revoked, while running.
    #[error("{0}")]
    Lost(TopicError),
    /// Refused as too large, by the producer (`message.max.bytes`) or by the topic
    /// (`max.message.bytes`). Never retried.
    #[error("record of {bytes} bytes is larger than {topic} accepts: {error}")]
    TooLarge {
        topic: String,
        bytes: usize,
        error: KafkaError,
    },
}

/// Whether Kafka refused a record for its size: retrying the same bytes cannot succeed.
fn too_large(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::MessageBatchTooLarge)
    )
}

/// Pause between attempts while Kafka does not acknowledge.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// The producers hand-offs use: one shared by all of them, and one that puts every record in
/// a batch of its own. Kafka refuses a batch over a topic's `max.message.bytes` whole, so a
/// record the shared producer had refused as too large may only have shared a batch with one
/// that is; the solo producer judges it alone before it is called too large.
#[derive(Clone)]
pub struct HandoffProducer {
    shared: FutureProducer,
    solo: FutureProducer,
    loss: Arc<TopicLoss>,
}

impl HandoffProducer {
    pub fn new(cfg: &KafkaConfig, message_timeout: Duration) -> KafkaResult<Self> {
        let shared = crate::producer_config(cfg, message_timeout).create()?;
        let solo = crate::producer_config(cfg, message_timeout)
            .set("batch.num.messages", "1")
            .set("linger.ms", "0")
            .create()?;
        Ok(Self {
            shared,
            solo,
            loss: Arc::new(TopicLoss::new(cfg)),
        })
    }

    /// The shared producer's fatal error, if it had one; else the solo producer's.
    fn fatal_error(&self) -> Option<String> {
        [&self.shared, &self.solo]
            .into_iter()
            .find_map(|p| p.client().fatal_error())
            .map(|(code, reason)| format!("{code:?}: {reason}"))
    }
}

/// Produces `payload` to `topic` with `key` (and `headers`), retrying until Kafka
/// acknowledges it; returns the partition and offset it got.
pub async fn produce_until_acked(
    producer: &HandoffProducer,
    topic: &str,
    key: &[u8],
    payload: &[u8],
    headers: Option<&OwnedHeaders>,
    shutdown: &CancellationToken,
) -> Result<(i32, i64), HandoffError> {
    loop {
        let mut sent = tokio::select! {
            sent = send_once(&producer.shared, topic, key, payload, headers) => sent,
            _ = shutdown.cancelled() => return Err(HandoffError::Shutdown),
        };
        if matches!(&sent, Err((e, _)) if too_large(e)) {
            // Alone in its batch, the verdict is this record's own.
            sent = tokio::select! {
                sent = send_once(&producer.solo, topic, key, payload, headers) => sent,
                _ = shutdown.cancelled() => return Err(HandoffError::Shutdown),
            };
        }
        match sent {
            Ok(delivery) => return Ok((delivery.partition, delivery.offset)),
            Err((e, _)) if too_large(&e) => {
                return Err(HandoffError::TooLarge {
                    topic: topic.to_string(),
                    bytes: payload.len(),
                    error: e,
                });
            }
            Err((e, _)) => {
                if let Some(fatal) = producer.fatal_error() {
                    return Err(HandoffError::Fatal(fatal));
                }
                tracing::warn!(error = %e, topic, "record not acknowledged, retrying");
                tokio::select! {
                    lost = producer.loss.after_failure(topic) => { lost.map_err(HandoffError::Lost)?; }
                    _ = shutdown.cancelled() => return Err(HandoffError::Shutdown),
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_EVERY) => {}
            _ = shutdown.cancelled() => return Err(HandoffError::Shutdown),
        }
    }
}

async fn send_once(
    producer: &FutureProducer,
    topic: &str,
    key: &[u8],
    payload: &[u8],
    headers: Option<&OwnedHeaders>,
) -> OwnedDeliveryResult {
    let mut record = FutureRecord::to(topic).key(key).payload(payload);
    if let Some(h) = headers {
        record = record.headers(h.clone());
    }
    producer
        .send(record, Timeout::After(Duration::from_secs(5)))
        .await
}
