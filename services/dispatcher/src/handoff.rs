//! Hand-offs: a delivery that cannot be finished now goes to a retry tier, one that never will
//! goes to the DLQ, and the caller's offset is stored only after Kafka acknowledged it
//! (`hookstream_kafka::produce_until_acked`, the one "produce until acknowledged").

use hookstream_delivery::ErrorClass;
use hookstream_kafka::{Fatal, HandoffError};
use hookstream_proto::{DeadLetter, DeliveryTask, Message as _, SourcePosition};

use crate::context::Context;
use crate::work::{handed, now_ms, Finished, TOO_LARGE};

/// The label (`5s`, `5m`, …) of the tier a task due at `due_at_ms` waits in first.
pub(crate) fn first_tier_label(ctx: &Context, due_at_ms: i64) -> String {
    let remaining = u64::try_from(due_at_ms.saturating_sub(now_ms())).unwrap_or(0);
    ctx.retry
        .next_tier(remaining)
        .map(|t| ctx.retry.tier_label(&t.topic).to_string())
        .unwrap_or_default()
}

/// Hands `task` to the tier its due time calls for: the longest tier not longer than what
/// remains (or the shortest, whose consumer waits out a short remainder in memory). A task the
/// tier refuses as too large cannot wait anywhere: it is dead-lettered (`record_too_large`),
/// `handled` being the record whose handling made it.
pub(crate) async fn to_retry_tier(ctx: &Context, task: &DeliveryTask, handled: &SourcePosition) -> Finished {
    let remaining = u64::try_from(task.due_at_ms.saturating_sub(now_ms())).unwrap_or(0);
    let Some(tier) = ctx.retry.next_tier(remaining) else {
        return Err(Fatal("retry.schedule_ms is empty but retries are enabled".into()));
    };
    let bytes = task.encode_to_vec();
    // One endpoint's retries share a partition per tier (replays are paced per endpoint); an
    // event to be routed again goes by its tenant.
    let tenant = task.event.as_ref().map_or("", |e| e.tenant_id.as_str());
    let key = if task.endpoint_id.is_empty() {
        tenant
    } else {
        task.endpoint_id.as_str()
    };
    match produce(ctx, &tier.topic, key, &bytes).await {
        Err(HandoffError::TooLarge { topic, bytes, error }) => {
            ctx.metrics.too_large.with_label_values(&["retry"]).inc();
            tracing::warn!(topic, bytes, error = %error, endpoint_id = task.endpoint_id,
                "retry record too large for its tier, dead-lettering");
            let letter = DeadLetter {
                event: task.event.clone(),
                endpoint_id: task.endpoint_id.clone(),
                tenant_id: tenant.to_string(),
                reason: format!(
                    "cannot wait for a retry: Kafka refused its record of {bytes} bytes for the retry tier {topic} \
                     as too large; last error: {}",
                    if task.last_error.is_empty() { "none" } else { task.last_error.as_str() }
                ),
                error_class: TOO_LARGE.into(),
                last_status: task.last_status,
                attempts: task.attempt,
                first_attempt_at_ms: task.first_attempt_at_ms,
                dead_at_ms: now_ms(),
                origin: task.origin.clone(),
                handled: Some(handled.clone()),
                ..Default::default()
            };
            Box::pin(dead_letter(ctx, letter, key)).await
        }
        result => {
            if result.is_ok() {
                ctx.metrics
                    .retry_produced
                    .with_label_values(&[ctx.retry.tier_label(&tier.topic)])
                    .inc();
            }
            handed(result)
        }
    }
}

/// One hand-off of `bytes` to `topic`, until Kafka acknowledges it (or refuses it for good).
async fn produce(ctx: &Context, topic: &str, key: &str, bytes: &[u8]) -> Result<(i32, i64), HandoffError> {
    hookstream_kafka::produce_until_acked(&ctx.producer, topic, key.as_bytes(), bytes, None, &ctx.shutdown)
        .await
}

/// Produces a dead letter and waits for Kafka's acknowledgement. One the DLQ topic refuses as
/// too large is made smaller (`shrink`) and produced again, so it is never retried as it is.
pub(crate) async fn dead_letter(ctx: &Context, mut letter: DeadLetter, key: &str) -> Finished {
    let class = if letter.error_class.is_empty() {
        ErrorClass::Other.as_str().to_string()
    } else {
        letter.error_class.clone()
    };
    loop {
        match produce(ctx, &ctx.topics.dlq, key, &letter.encode_to_vec()).await {
            Err(HandoffError::TooLarge { topic, bytes, error }) => {
                ctx.metrics.too_large.with_label_values(&["dlq"]).inc();
                let Some(dropped) = shrink(&mut letter, bytes) else {
                    return Err(Fatal(format!(
                        "the DLQ topic {topic} refuses a dead letter of {bytes} bytes that holds no payload any more \
                         ({error}): its max.message.bytes is far too low (Hookstream creates it with {})",
                        hookstream_kafka::topics::HANDOFF_RECORD_BYTES
                    )));
                };
                tracing::warn!(topic, bytes, error = %error, dropped,
                    "dead letter too large for the DLQ topic, producing it without that");
            }
            result => {
                if result.is_ok() {
                    ctx.metrics
                        .dead_letters
                        .with_label_values(&[class.as_str()])
                        .inc();
                }
                return handed(result);
            }
        }
    }
}

/// Makes a dead letter the DLQ topic refused (`bytes` long) smaller: first without the last
/// response, then without the event's payload (or the undecodable record's bytes). The reason
/// says what was left out; a dead letter without its payload cannot be replayed (its event
/// is still at `origin` while the events topic keeps it). Returns what was dropped, `None`
/// when nothing is left to drop.
fn shrink(letter: &mut DeadLetter, bytes: usize) -> Option<&'static str> {
    if !letter.last_response.is_empty() {
        let n = letter.last_response.len();
        letter.last_response = Default::default();
        letter.reason = format!(
            "{}; the last response ({n} bytes) is not kept: Kafka refused the dead letter of {bytes} bytes as too \
             large",
            letter.reason
        );
        return Some("last response");
    }
    let omitted = match letter.event.as_mut() {
        Some(event) if !event.payload.is_empty() => std::mem::take(&mut event.payload).len(),
        _ if !letter.raw.is_empty() => std::mem::take(&mut letter.raw).len(),
        _ => return None,
    };
    letter.payload_omitted_bytes = omitted as u64;
    let at = letter
        .origin
        .as_ref()
        .map(|o| format!(" (the event is at {}/{}@{})", o.topic, o.partition, o.offset))
        .unwrap_or_default();
    letter.reason = format!(
        "{}; its payload ({omitted} bytes) is not kept, so it cannot be replayed{at}: Kafka refused the dead \
         letter of {bytes} bytes as too large",
        letter.reason
    );
    Some("payload")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hookstream_proto::EventEnvelope;

    #[test]
    fn a_refused_dead_letter_loses_the_response_then_the_payload_then_gives_up() {
        let mut letter = DeadLetter {
            event: Some(EventEnvelope {
                event_id: "e".into(),
                payload: Bytes::from(vec![b'x'; 1000]),
                ..Default::default()
            }),
            reason: "permanent failure: HTTP 400".into(),
            last_response: Bytes::from(vec![b'y'; 500]),
            origin: Some(SourcePosition {
                topic: "events".into(),
                partition: 3,
                offset: 42,
            }),
            ..Default::default()
        };
        assert_eq!(shrink(&mut letter, 1600), Some("last response"));
        assert!(letter.last_response.is_empty());
        assert_eq!(letter.event.as_ref().unwrap().payload.len(), 1000);
        assert!(
            letter.reason.contains("last response (500 bytes) is not kept"),
            "{}",
            letter.reason
        );

        assert_eq!(shrink(&mut letter, 1100), Some("payload"));
        assert!(letter.event.as_ref().unwrap().payload.is_empty());
        assert_eq!(
            letter.event.as_ref().unwrap().event_id,
            "e",
            "the event's identity stays"
        );
        assert_eq!(letter.payload_omitted_bytes, 1000);
        assert!(
            letter
                .reason
                .starts_with("permanent failure: HTTP 400; the last response"),
            "{}",
            letter.reason
        );
        assert!(
            letter.reason.contains(
                "payload (1000 bytes) is not kept, so it cannot be replayed (the event is at events/3@42)"
            ),
            "{}",
            letter.reason
        );

        assert_eq!(shrink(&mut letter, 100), None);
    }

    #[test]
    fn a_refused_poison_dead_letter_loses_its_raw_bytes() {
        let mut letter = DeadLetter {
            reason: "undecodable event record".into(),
            error_class: "decode".into(),
            raw: Bytes::from(vec![0u8; 700]),
            ..Default::default()
        };
        assert_eq!(shrink(&mut letter, 800), Some("payload"));
        assert!(letter.raw.is_empty());
        assert_eq!(letter.payload_omitted_bytes, 700);
        assert_eq!(shrink(&mut letter, 100), None);
    }
}
