//! Payloads in a dispatcher: records stay sealed as they were read (every hand-off to a retry
//! tier or the DLQ writes the sealed payload it got, so no topic ever holds one in clear), and
//! a payload is opened only in memory, where routing (the payload filter) and the request need
//! it. One whose data key was erased is dead-lettered (`erased`) instead of delivered.

use std::time::Duration;

use bytes::Bytes;
use hookstream_proto::{DeadLetter, EventEnvelope};
use hookstream_store::payload_keys::Unreadable;

use crate::context::Context;
use crate::handoff;
use crate::work::{now_ms, pause, Finished, Read};

/// The dead-letter class of a payload that no longer opens because it was erased.
pub(crate) const ERASED: &str = "erased";
/// The dead-letter class of a payload that does not open for another reason.
pub(crate) const UNREADABLE: &str = "unreadable_payload";

/// `event`'s payload in clear, or what became of the event when it cannot be had: dead-lettered
/// with the reason (erased, or not opening), or left undone by shutdown.
pub(crate) async fn open(
    ctx: &Context,
    event: &EventEnvelope,
    endpoint_id: &str,
    attempts: u32,
    read: &Read,
) -> Result<Bytes, Finished> {
    if event.payload_key.is_empty() {
        return Ok(event.payload.clone());
    }
    let opened = loop {
        match ctx
            .keys
            .open(
                &event.payload_key,
                &event.event_id,
                &event.tenant_id,
                &event.payload,
            )
            .await
        {
            Ok(opened) => break opened,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the payload's data key, retrying");
                if !pause(&ctx.shutdown, Duration::from_secs(1)).await {
                    return Err(Ok(false));
                }
            }
        }
    };
    let why = match opened {
        Ok(plain) => return Ok(plain.into()),
        Err(why) => why,
    };
    let class = if why == Unreadable::Erased {
        ERASED
    } else {
        UNREADABLE
    };
    ctx.metrics.events.with_label_values(&[class]).inc();
    let letter = DeadLetter {
        endpoint_id: endpoint_id.to_string(),
        tenant_id: event.tenant_id.clone(),
        reason: why.to_string(),
        error_class: class.into(),
        attempts,
        origin: Some(read.origin.clone()),
        handled: Some(read.record.clone()),
        dead_at_ms: now_ms(),
        event: Some(event.clone()),
        ..Default::default()
    };
    let key = if endpoint_id.is_empty() {
        letter.tenant_id.clone()
    } else {
        endpoint_id.to_string()
    };
    Err(handoff::dead_letter(ctx, letter, &key).await)
}
