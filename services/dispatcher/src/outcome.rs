//! One attempt of one event to one endpoint, and what its outcome becomes: delivered, handed
//! to a retry tier (a retryable failure with schedule left, or a refusal by the endpoint's
//! guard, which uses no attempt), or dead-lettered with the reason (a permanent failure, a
//! 410, or the schedule exhausted). This is where an outcome turns into what happens next.

use std::time::Duration;

use bytes::Bytes;
use hookstream_delivery::{ErrorClass, Message, Outcome, Target, Verdict};
use hookstream_proto::{DeadLetter, EventEnvelope};
use hookstream_store::endpoints::ActiveEndpoint;

use crate::attempt_log::{verdict_label, Attempt, Next, Trigger};
use crate::context::Context;
use crate::work::{now_ms, Finished, Read};
use crate::{endpoint_health, handoff, schedule};

/// Attempt number `attempt` (1 on the main path) of `event` to `ep`, `body` being its payload
/// opened (`event` keeps it sealed, for the hand-offs). `Ok(true)` once the delivery is done or
/// durably handed on; `Ok(false)` when shutdown left it undone.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn attempt(
    ctx: &Context,
    event: &EventEnvelope,
    body: &Bytes,
    ep: &ActiveEndpoint,
    attempt: u32,
    first_attempt_at_ms: i64,
    read: &Read,
    trigger: Trigger,
) -> Finished {
    let admitted = tokio::select! {
        admitted = ctx.isolation.admit(&ep.endpoint, ctx.retry.enabled) => admitted,
        _ = ctx.shutdown.cancelled() => return Ok(false),
    };
    let pass = match admitted {
        Ok(pass) => pass,
        // Refused by the breaker, the rate limit or the concurrency cap: no attempt was made.
        Err(refusal) => {
            // (Boxed, like every rarely taken await below: many attempts wait for admission at
            // once, and each reserves the size of its largest state.)
            let task = schedule::deferred(
                event,
                ep.endpoint.id,
                attempt - 1,
                first_attempt_at_ms,
                &read.origin,
                refusal,
            );
            return Box::pin(handoff::to_retry_tier(ctx, &task, &read.record)).await;
        }
    };
    let started_ms = now_ms();
    let outcome = if ep.target_url.is_empty() {
        // The URL is sealed with a key this dispatcher does not have (logged at load time).
        Outcome {
            verdict: Verdict::Permanent,
            class: ErrorClass::InvalidUrl,
            status: None,
            error: Some("the endpoint's sealed url does not open with the configured secrets keys".into()),
            retry_after: None,
            latency: Duration::ZERO,
            response: Bytes::new(),
            response_truncated: false,
            response_headers: Vec::new(),
        }
    } else {
        let target = Target {
            url: &ep.target_url,
            timeout: Duration::from_millis(ep.endpoint.timeout_ms.max(1) as u64),
            secrets: &ep.secrets,
            headers: &ep.headers,
        };
        let msg = Message {
            id: &event.event_id,
            event_type: &event.event_type,
            body,
            attempt,
        };
        ctx.metrics.requests_in_flight.inc();
        let outcome = Box::pin(ctx.engine.deliver(target, msg)).await;
        ctx.metrics.requests_in_flight.dec();
        outcome
    };
    pass.finish(outcome.verdict, outcome.class, outcome.latency);
    record(ctx, &outcome);
    // The attempt log says what happens next, so it is written once that is decided.
    let log = |next: Next| {
        ctx.attempt_log.record(Attempt {
            event,
            payload_bytes: body.len(),
            endpoint_id: ep.endpoint.id,
            attempt,
            started_ms,
            outcome: &outcome,
            trigger,
            next,
        })
    };
    Box::pin(endpoint_health::track(ctx, ep, &outcome)).await;
    let first_attempt_at_ms = if attempt == 1 {
        started_ms
    } else {
        first_attempt_at_ms
    };
    let reason = match outcome.verdict {
        Verdict::Delivered => {
            log(Next::Delivered);
            return Ok(true);
        }
        Verdict::Retryable if ctx.retry.enabled => {
            match schedule::after_failure(
                &ctx.retry,
                event,
                ep.endpoint.id,
                attempt,
                first_attempt_at_ms,
                &read.origin,
                &outcome,
            ) {
                Some(task) => {
                    log(Next::Retry {
                        due_at_ms: task.due_at_ms,
                        tier: handoff::first_tier_label(ctx, task.due_at_ms),
                    });
                    return Box::pin(handoff::to_retry_tier(ctx, &task, &read.record)).await;
                }
                None => format!(
                    "gave up after {attempt} attempts: {}",
                    outcome.error.as_deref().unwrap_or("failed")
                ),
            }
        }
        Verdict::Gone => {
            Box::pin(endpoint_health::disable(
                ctx,
                ep,
                "gone",
                "receiver answered 410 Gone".into(),
                None,
            ))
            .await;
            describe(&outcome)
        }
        _ => describe(&outcome),
    };
    tracing::info!(event_id = %event.event_id, endpoint_id = %ep.endpoint.id,
        class = outcome.class.as_str(), reason = %reason, "delivery failed, dead-lettering");
    log(Next::DeadLettered);
    let letter = DeadLetter {
        event: Some(event.clone()),
        endpoint_id: ep.endpoint.id.to_string(),
        tenant_id: event.tenant_id.clone(),
        reason,
        error_class: outcome.class.as_str().into(),
        last_status: outcome.status.map(i32::from).unwrap_or(0),
        attempts: attempt,
        first_attempt_at_ms,
        dead_at_ms: now_ms(),
        origin: Some(read.origin.clone()),
        handled: Some(read.record.clone()),
        raw: Bytes::new(),
        last_response: outcome.response.clone(),
        payload_omitted_bytes: 0,
    };
    Box::pin(handoff::dead_letter(ctx, letter, &ep.endpoint.id.to_string())).await
}

fn describe(outcome: &Outcome) -> String {
    let what = match outcome.verdict {
        Verdict::Gone => "endpoint gone (HTTP 410), endpoint disabled",
        Verdict::Permanent => "permanent failure",
        Verdict::Retryable => "failed (retries are disabled)",
        Verdict::Delivered => "delivered",
    };
    match &outcome.error {
        Some(e) => format!("{what}: {e}"),
        None => what.to_string(),
    }
}

fn record(ctx: &Context, outcome: &Outcome) {
    let label = verdict_label(outcome.verdict);
    ctx.metrics.deliveries.with_label_values(&[label]).inc();
    ctx.metrics
        .attempt_duration
        .with_label_values(&[label])
        .observe(outcome.latency.as_secs_f64());
}
