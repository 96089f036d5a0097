//! Hand-offs: a delivery that cannot be finished now goes to a retry tier, one that never will
//! goes to the DLQ, and the caller's offset is stored only after Kafka acknowledged it
//! (`hookstream_kafka::produce_until_acked`, the one "produce until acknowledged").

use hookstream_delivery::ErrorClass;
use hookstream_kafka::Fatal;
use hookstream_proto::{DeadLetter, DeliveryTask, Message as _};

use crate::context::{handed, now_ms, Context, Finished};

/// The label (`5s`, `5m`, …) of the tier a task due at `due_at_ms` waits in first.
pub(crate) fn first_tier_label(ctx: &Context, due_at_ms: i64) -> String {
    let remaining = u64::try_from(due_at_ms.saturating_sub(now_ms())).unwrap_or(0);
    ctx.retry
        .next_tier(remaining)
        .map(|t| ctx.retry.tier_label(&t.topic).to_string())
        .unwrap_or_default()
}

/// Hands `task` to the tier its due time calls for: the longest tier not longer than what
/// remains (or the shortest, whose consumer waits out a short remainder in memory).
pub(crate) async fn to_retry_tier(ctx: &Context, task: &DeliveryTask) -> Finished {
    let remaining = u64::try_from(task.due_at_ms.saturating_sub(now_ms())).unwrap_or(0);
    let Some(tier) = ctx.retry.next_tier(remaining) else {
        return Err(Fatal("retry.schedule_ms is empty but retries are enabled".into()));
    };
    let bytes = task.encode_to_vec();
    // One endpoint's retries share a partition per tier (replays are paced per endpoint); an
    // event to be routed again goes by its tenant.
    let key = if task.endpoint_id.is_empty() {
        task.event.as_ref().map_or("", |e| e.tenant_id.as_str())
    } else {
        task.endpoint_id.as_str()
    };
    let result = hookstream_kafka::produce_until_acked(
        &ctx.producer,
        &tier.topic,
        key.as_bytes(),
        &bytes,
        None,
        &ctx.shutdown,
    )
    .await;
    if result.is_ok() {
        ctx.metrics
            .retry_produced
            .with_label_values(&[ctx.retry.tier_label(&tier.topic)])
            .inc();
    }
    handed(result)
}

/// Produces a dead letter and waits for Kafka's acknowledgement.
pub(crate) async fn dead_letter(ctx: &Context, letter: DeadLetter, key: &str) -> Finished {
    let class = if letter.error_class.is_empty() {
        ErrorClass::Other.as_str().to_string()
    } else {
        letter.error_class.clone()
    };
    let bytes = letter.encode_to_vec();
    let result = hookstream_kafka::produce_until_acked(
        &ctx.producer,
        &ctx.topics.dlq,
        key.as_bytes(),
        &bytes,
        None,
        &ctx.shutdown,
    )
    .await;
    if result.is_ok() {
        ctx.metrics
            .dead_letters
            .with_label_values(&[class.as_str()])
            .inc();
    }
    handed(result)
}
