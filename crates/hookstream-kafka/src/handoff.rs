//! The hand-off: produce one record and wait until Kafka acknowledged it. A consumer that
//! hands a record on (to a retry tier, to the DLQ) stores its own offset only after this
//! returned `Ok` (invariant 1); it retries for as long as it takes, and gives up only on
//! shutdown (the offset then stays unstored and the work is redone) or when the producer
//! itself can no longer work (a fatal error: the service must restart).

use std::time::Duration;

use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use tokio_util::sync::CancellationToken;

/// Why a hand-off did not complete.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("shutting down before kafka acknowledged the record")]
    Shutdown,
    #[error("kafka producer failed for good: {0}")]
    Fatal(String),
}

/// Pause between attempts while Kafka does not acknowledge.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// Produces `payload` to `topic` with `key` (and `headers`), retrying until Kafka
/// acknowledges it; returns the partition and offset it got.
pub async fn produce_until_acked(
    producer: &FutureProducer,
    topic: &str,
    key: &[u8],
    payload: &[u8],
    headers: Option<&OwnedHeaders>,
    shutdown: &CancellationToken,
) -> Result<(i32, i64), HandoffError> {
    loop {
        let mut record = FutureRecord::to(topic).key(key).payload(payload);
        if let Some(h) = headers {
            record = record.headers(h.clone());
        }
        let sent = tokio::select! {
            sent = producer.send(record, Timeout::After(Duration::from_secs(5))) => sent,
            _ = shutdown.cancelled() => return Err(HandoffError::Shutdown),
        };
        match sent {
            Ok(delivery) => return Ok((delivery.partition, delivery.offset)),
            Err((e, _)) => {
                if let Some((code, reason)) = producer.client().fatal_error() {
                    return Err(HandoffError::Fatal(format!("{code:?}: {reason}")));
                }
                tracing::warn!(error = %e, topic, "record not acknowledged, retrying");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_EVERY) => {}
            _ = shutdown.cancelled() => return Err(HandoffError::Shutdown),
        }
    }
}
