//! Routing and fan-out: an event goes to every enabled endpoint of its tenant whose
//! subscription matches (event types, channels, payload filter: `hookstream_routing`), each
//! delivery under the deliveries window. An event filtered out by every endpoint is not an
//! attempt, nor a failure. An event scheduled for later (`deliver_at_ms`) waits in the retry
//! tiers, whole, and is routed when it is due (never early: the tiers' promise). An event whose
//! tenant is unknown is routed again through the retry tiers, backing off, for
//! `unknown_tenant_retry_ms`, then dead-lettered (`unknown_tenant`, with the event, so it can
//! be replayed). Used by the events role, and by the retry role for events that are due or to
//! be routed again.

use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt as _};
use hookstream_proto::{DeadLetter, DeliveryTask, EventEnvelope};
use hookstream_routing::Candidate;
use uuid::Uuid;

use crate::attempt_log::Trigger;
use crate::context::Context;
use crate::subscriptions::Route;
use crate::work::{now_ms, pause, Finished, Read};
use crate::{handoff, outcome, payloads};

/// An event routed again: how many times it was, and when its tenant was first missing.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reroute {
    pub(crate) tries: u32,
    pub(crate) first_seen_ms: i64,
}

/// Routes `event` and delivers it to every matching endpoint.
pub(crate) async fn route_and_deliver(
    ctx: &Context,
    event: EventEnvelope,
    read: Read,
    reroute: Reroute,
) -> Finished {
    if event.deliver_at_ms > now_ms() {
        return Box::pin(schedule(ctx, event, read)).await;
    }
    // Opened only here, in memory: what is handed on below stays sealed.
    let body = match payloads::open(ctx, &event, "", reroute.tries, &read).await {
        Ok(body) => body,
        Err(finished) => return finished,
    };
    let candidate = Candidate::new(&event.event_type, &event.channels, &body);
    let route = match Uuid::parse_str(&event.tenant_id) {
        Err(_) => Route::UnknownTenant,
        Ok(tenant) => loop {
            match ctx
                .subs
                .route(tenant, &candidate, event.subscription_version)
                .await
            {
                Ok(r) => break r,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read subscriptions, retrying");
                    if !pause(&ctx.shutdown, Duration::from_secs(1)).await {
                        return Ok(false);
                    }
                }
            }
        },
    };
    let endpoints = match route {
        Route::UnknownTenant => return Box::pin(unknown_tenant(ctx, event, read, reroute)).await,
        Route::Endpoints(eps) if eps.is_empty() => {
            ctx.metrics.events.with_label_values(&["unsubscribed"]).inc();
            return Ok(true);
        }
        Route::Endpoints(eps) => eps,
    };
    ctx.metrics.events.with_label_values(&["routed"]).inc();
    // Memory follows deliveries in flight, not events: a wide fan-out waits for room.
    let width = endpoints.len().min(ctx.settings.max_in_flight_deliveries.max(1));
    let window = ctx
        .deliveries
        .clone()
        .acquire_many_owned(u32::try_from(width).unwrap_or(u32::MAX));
    let _window = tokio::select! {
        permits = window => match permits {
            Ok(p) => p,
            Err(_) => return Ok(false), // closed: never, but not worth a panic
        },
        _ = ctx.shutdown.cancelled() => return Ok(false),
    };
    let deliver = |ep| outcome::attempt(ctx, &event, &body, ep, 1, 0, &read, Trigger::First);
    if let [ep] = endpoints.as_slice() {
        return deliver(ep).await;
    }
    // Polled as they wake: `join_all` polls every delivery of the event whenever any one of
    // them wakes (its small-set form), ten polls of reqwest futures for each response at
    // fan-out 10. Every delivery still runs to its end before an error is returned.
    let mut deliveries: FuturesUnordered<_> = endpoints.iter().map(|ep| deliver(ep)).collect();
    let mut finished = Ok(true);
    while let Some(result) = deliveries.next().await {
        finished = match (finished, result) {
            (Err(e), _) | (Ok(_), Err(e)) => Err(e),
            (Ok(all), Ok(this)) => Ok(all && this),
        };
    }
    finished
}

/// An event not to be delivered before its `deliver_at_ms`: handed, whole, to the retry tiers,
/// due then, with no endpoint (so it is routed when due, to the endpoints subscribed then) and
/// no attempt used. Without tiers (`retry.enabled` off) it cannot wait: dead-lettered with the
/// reason rather than delivered early.
async fn schedule(ctx: &Context, event: EventEnvelope, read: Read) -> Finished {
    if !ctx.retry.enabled {
        ctx.metrics.events.with_label_values(&["scheduled"]).inc();
        let letter = DeadLetter {
            tenant_id: event.tenant_id.clone(),
            reason: "scheduled for later (deliverAt), and this dispatcher has no retry tiers to wait in"
                .into(),
            error_class: "scheduled".into(),
            origin: Some(read.origin),
            handled: Some(read.record),
            dead_at_ms: now_ms(),
            event: Some(event),
            ..Default::default()
        };
        let key = letter.tenant_id.clone();
        return handoff::dead_letter(ctx, letter, &key).await;
    }
    ctx.metrics.events.with_label_values(&["scheduled"]).inc();
    let task = DeliveryTask {
        endpoint_id: String::new(),
        attempt: 0,
        due_at_ms: event.deliver_at_ms,
        first_attempt_at_ms: 0,
        origin: Some(read.origin),
        last_status: 0,
        last_error_class: "scheduled".into(),
        last_error: String::new(),
        event: Some(event),
    };
    handoff::to_retry_tier(ctx, &task, &read.record).await
}

/// The tenant is unknown to a snapshot at least as new as the event: routed again later
/// (the tenant may be restored, or the event predates versions), then dead-lettered.
async fn unknown_tenant(ctx: &Context, event: EventEnvelope, read: Read, reroute: Reroute) -> Finished {
    let now = now_ms();
    let first_seen = if reroute.first_seen_ms > 0 {
        reroute.first_seen_ms
    } else {
        now
    };
    let waited = now.saturating_sub(first_seen);
    let bound = i64::try_from(ctx.settings.unknown_tenant_retry_ms).unwrap_or(i64::MAX);
    if ctx.retry.enabled && waited < bound {
        ctx.metrics
            .events
            .with_label_values(&["unknown_tenant_rerouted"])
            .inc();
        // 1 s, 2 s, 4 s, … 32 s, within the bound.
        let backoff = (1_000i64 << reroute.tries.min(5)).min(bound - waited).max(1);
        let task = DeliveryTask {
            endpoint_id: String::new(),
            attempt: reroute.tries.saturating_add(1),
            due_at_ms: now.saturating_add(backoff),
            first_attempt_at_ms: first_seen,
            origin: Some(read.origin),
            last_status: 0,
            last_error_class: "unknown_tenant".into(),
            last_error: format!("unknown tenant {}", event.tenant_id),
            event: Some(event),
        };
        return handoff::to_retry_tier(ctx, &task, &read.record).await;
    }
    ctx.metrics.events.with_label_values(&["unknown_tenant"]).inc();
    let reason = if waited > 0 {
        format!(
            "unknown tenant {} (routed again for {} s)",
            event.tenant_id,
            waited / 1000
        )
    } else {
        format!("unknown tenant {}", event.tenant_id)
    };
    let letter = DeadLetter {
        tenant_id: event.tenant_id.clone(),
        reason,
        error_class: "unknown_tenant".into(),
        attempts: reroute.tries,
        first_attempt_at_ms: first_seen,
        origin: Some(read.origin),
        handled: Some(read.record),
        dead_at_ms: now_ms(),
        event: Some(event),
        ..Default::default()
    };
    let key = letter.tenant_id.clone();
    handoff::dead_letter(ctx, letter, &key).await
}
