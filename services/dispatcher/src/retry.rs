//! The retry role: it delivers the retry records (`DeliveryTask`) a failure or a refusal
//! became (`schedule`) when they are due, never early and not late.
//!
//! Each tier topic has one fixed delay and takes the broker's append time as timestamp, so a
//! record's hop is due exactly its tier's delay after it was appended and a partition's head
//! is always its earliest hop: holding the head (partition paused) until then makes nothing
//! behind it late. A record due at any other time (jitter, `Retry-After`, a deferral, a
//! replay) hops: at its hop it goes on to the longest tier not longer than what remains
//! (`RetryConfig::next_tier`), and a remainder shorter than the shortest tier is waited out in
//! memory, in its task. Records are taken up one shortest-tier delay before they wake (the
//! shortest tier's at once), so a resume's fetch never makes a retry late. Records waiting in
//! memory hold a permit from `retry.max_waiting`; deliveries, one from
//! `dispatcher.max_in_flight_events`. Retry lag is mostly waiting, by design: do not
//! autoscale on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hookstream_kafka::{Done, Fatal, Handler, Record, Start};
use hookstream_proto::{DeadLetter, DeliveryTask, Message as _, SourcePosition};
use hookstream_replay::{INTERVAL_HEADER, REPLAY_HEADER};
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::attempt_log::Trigger;
use crate::context::Context;
use crate::fanout::{self, Reroute};
use crate::work::{done, now_ms, Finished, Read};
use crate::{handoff, outcome, payloads};

pub use crate::schedule::{due_at_ms, next_delay};

/// `dead_letter` or `resend` when a retry record is a replay, from its header.
fn replay_kind(record: &Record) -> Option<&'static str> {
    match record.header(REPLAY_HEADER)? {
        b"dead_letter" => Some("dead_letter"),
        b"resend" => Some("resend"),
        _ => None,
    }
}

/// The replay interval a retry record asks for, from its header (clamped to 1 ms … 1 h).
fn replay_interval_ms(record: &Record) -> Option<i64> {
    std::str::from_utf8(record.header(INTERVAL_HEADER)?)
        .ok()?
        .parse::<i64>()
        .ok()
        .map(|ms| ms.clamp(1, 3_600_000))
}

/// The retry role's memory of when it last started a replayed delivery to each endpoint.
/// All of one endpoint's tasks are in one partition per tier (keyed by endpoint), and replays
/// go to the shortest tier, so one retry-role consumer sees them all.
#[derive(Debug, Default)]
pub(crate) struct ReplayPacer {
    last_start_ms: HashMap<String, i64>,
}

impl ReplayPacer {
    /// When a replayed task for `endpoint` may start: not before its due time, and at least
    /// `interval_ms` after the previous one started (which is taken to be its slot, or now
    /// when that slot has passed).
    pub(crate) fn slot(&mut self, endpoint: &str, due_ms: i64, interval_ms: i64, now_ms: i64) -> i64 {
        if self.last_start_ms.len() >= 10_000 {
            self.last_start_ms.retain(|_, t| *t > now_ms - 3_600_000);
        }
        let slot = match self.last_start_ms.get(endpoint) {
            Some(prev) => due_ms.max(prev.saturating_add(interval_ms)),
            None => due_ms,
        };
        self.last_start_ms.insert(endpoint.to_string(), slot.max(now_ms));
        slot
    }
}

/// The retry role: a handler for the tracked consumer of every tier.
pub(crate) struct RetryRole {
    ctx: Arc<Context>,
    pacer: Mutex<ReplayPacer>,
    /// The shortest tier's delay: a remainder shorter than this is waited out in memory, and
    /// records are taken up this long before they wake.
    horizon_ms: i64,
    /// Deliveries at once (`dispatcher.max_in_flight_events`).
    delivering: Arc<Semaphore>,
}

impl RetryRole {
    pub(crate) fn new(ctx: Arc<Context>) -> Self {
        let horizon_ms = ctx
            .retry
            .shortest_tier()
            .map_or(0, |t| i64::try_from(t.delay_ms).unwrap_or(i64::MAX));
        let delivering = Arc::new(Semaphore::new(ctx.settings.max_in_flight_events.max(1)));
        Self {
            ctx,
            pacer: Mutex::default(),
            horizon_ms,
            delivering,
        }
    }
}

pub(crate) enum RetryWork {
    Task {
        task: Box<DeliveryTask>,
        /// Where the tier record is.
        position: SourcePosition,
        /// When to look at it again: its hop, or its due time if sooner.
        wake_ms: i64,
        /// Why it is attempted (a retry, or a replayed dead letter or resent event).
        trigger: Trigger,
    },
    Poison {
        payload: Bytes,
        position: SourcePosition,
        reason: String,
    },
}

impl Handler for RetryRole {
    type Work = RetryWork;

    fn prepare(&self, record: Record) -> Start<RetryWork> {
        let ctx = &self.ctx;
        let tier = ctx.retry.tier_label(&record.topic).to_string();
        ctx.metrics
            .retry_consumed
            .with_label_values(&[tier.as_str()])
            .inc();
        if let Some(kind) = replay_kind(&record) {
            ctx.metrics.dlq_replayed.with_label_values(&[kind]).inc();
        }
        let position = SourcePosition {
            topic: record.topic.clone(),
            partition: record.partition,
            offset: record.offset,
        };
        let mut task = match DeliveryTask::decode(record.payload.clone()) {
            Ok(t) if t.event.is_some() => t,
            decoded => {
                let reason = match decoded {
                    Err(e) => format!("undecodable retry record: {e}"),
                    Ok(_) => "retry record without an event".to_string(),
                };
                return Start::Now(RetryWork::Poison {
                    payload: record.payload,
                    position,
                    reason,
                });
            }
        };
        let now = now_ms();
        if let Some(interval) = replay_interval_ms(&record) {
            // A replay: at most its rate to one endpoint, however many arrived at once.
            task.due_at_ms =
                self.pacer
                    .lock()
                    .expect("pacer lock")
                    .slot(&task.endpoint_id, task.due_at_ms, interval, now);
        }
        let delay = ctx.retry.tier_of_topic(&record.topic).unwrap_or(0);
        let appended = record.timestamp_ms.unwrap_or(now);
        let hop_ms = appended.saturating_add(i64::try_from(delay).unwrap_or(i64::MAX));
        let wake_ms = hop_ms.min(task.due_at_ms);
        let trigger = match replay_kind(&record) {
            Some("dead_letter") => Trigger::Replay,
            Some(_) => Trigger::Resend,
            None => Trigger::Retry,
        };
        let work = RetryWork::Task {
            task: Box::new(task),
            position,
            wake_ms,
            trigger,
        };
        let take_up_at = wake_ms.saturating_sub(self.horizon_ms);
        if take_up_at > now {
            Start::At {
                at_ms: take_up_at,
                work,
            }
        } else {
            Start::Now(work)
        }
    }

    async fn run(self: Arc<Self>, work: RetryWork) -> Result<Done, Fatal> {
        done(self.handle(work).await)
    }
}

impl RetryRole {
    async fn handle(&self, work: RetryWork) -> Finished {
        let ctx = &*self.ctx;
        let (task, position, wake_ms, trigger) = match work {
            RetryWork::Poison {
                payload,
                position,
                reason,
            } => {
                let letter = DeadLetter {
                    reason,
                    error_class: "decode".into(),
                    raw: payload,
                    origin: Some(position.clone()),
                    handled: Some(position),
                    dead_at_ms: now_ms(),
                    ..Default::default()
                };
                return handoff::dead_letter(ctx, letter, "").await;
            }
            RetryWork::Task {
                task,
                position,
                wake_ms,
                trigger,
            } => (*task, position, wake_ms, trigger),
        };
        if !self.sleep_until(wake_ms).await {
            return Ok(false);
        }
        let remaining = task.due_at_ms.saturating_sub(now_ms());
        if remaining >= self.horizon_ms && self.horizon_ms > 0 {
            // Hop on: the longest tier not longer than what remains.
            ctx.metrics.retry_hops.inc();
            return handoff::to_retry_tier(ctx, &task, &position).await;
        }
        if !self.sleep_until(task.due_at_ms).await {
            return Ok(false);
        }
        let _delivering = tokio::select! {
            permit = self.delivering.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return Ok(false),
            },
            _ = ctx.shutdown.cancelled() => return Ok(false),
        };
        let late_ms = now_ms().saturating_sub(task.due_at_ms);
        if late_ms < 0 {
            // Unreachable unless the clock stepped back: never attempt early.
            ctx.metrics.retry_early.inc();
            if !self.sleep_until(task.due_at_ms).await {
                return Ok(false);
            }
        }
        ctx.metrics.retry_lateness.observe(late_ms.max(0) as f64 / 1000.0);
        deliver(ctx, task, position, trigger).await
    }

    /// Sleeps until `at_ms` (now if past); false when shutdown came first.
    async fn sleep_until(&self, at_ms: i64) -> bool {
        let wait = at_ms.saturating_sub(now_ms());
        if wait <= 0 {
            return true;
        }
        crate::work::pause(&self.ctx.shutdown, Duration::from_millis(wait as u64)).await
    }
}

/// Delivers one due retry record: to its endpoint, or routed again when it has none.
async fn deliver(ctx: &Context, task: DeliveryTask, position: SourcePosition, trigger: Trigger) -> Finished {
    let event = task.event.clone().unwrap_or_default();
    // Retry and dead-letter records keep pointing at the event's place in the events topic.
    let read = Read {
        origin: task.origin.clone().unwrap_or_else(|| position.clone()),
        record: position,
    };
    if task.endpoint_id.is_empty() {
        let reroute = Reroute {
            tries: task.attempt,
            first_seen_ms: task.first_attempt_at_ms,
        };
        return fanout::route_and_deliver(ctx, event, read, reroute).await;
    }
    let endpoint = match Uuid::parse_str(&task.endpoint_id) {
        Ok(id) => loop {
            match ctx.subs.endpoint(id, event.subscription_version).await {
                Ok(ep) => break ep,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read subscriptions, retrying");
                    if !crate::work::pause(&ctx.shutdown, Duration::from_secs(1)).await {
                        return Ok(false);
                    }
                }
            }
        },
        Err(_) => None,
    };
    let Some(ep) = endpoint else {
        let letter = DeadLetter {
            endpoint_id: task.endpoint_id.clone(),
            tenant_id: event.tenant_id.clone(),
            reason: format!(
                "endpoint {} is disabled or deleted; last error: {}",
                task.endpoint_id, task.last_error
            ),
            error_class: "endpoint_disabled".into(),
            last_status: task.last_status,
            attempts: task.attempt,
            first_attempt_at_ms: task.first_attempt_at_ms,
            dead_at_ms: now_ms(),
            origin: Some(read.origin),
            handled: Some(read.record),
            event: Some(event),
            ..Default::default()
        };
        return handoff::dead_letter(ctx, letter, &task.endpoint_id).await;
    };
    let body = match payloads::open(ctx, &event, &task.endpoint_id, task.attempt, &read).await {
        Ok(body) => body,
        Err(finished) => return finished,
    };
    outcome::attempt(
        ctx,
        &event,
        &body,
        &ep,
        task.attempt.saturating_add(1),
        task.first_attempt_at_ms,
        &read,
        trigger,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pacer_spaces_one_endpoints_replays_and_leaves_others_alone() {
        let mut p = ReplayPacer::default();
        // Three tasks taken up at once at t=1000, all already due.
        assert_eq!(p.slot("a", 900, 100, 1_000), 900, "the first goes now");
        assert_eq!(p.slot("a", 950, 100, 1_000), 1_100);
        assert_eq!(p.slot("a", 990, 100, 1_000), 1_200);
        assert_eq!(
            p.slot("b", 990, 100, 1_000),
            990,
            "another endpoint is not held back"
        );
        // A task due later than the spacing keeps its due time.
        assert_eq!(p.slot("a", 5_000, 100, 1_000), 5_000);
        // Long after: the previous start was its slot, nothing to wait for.
        assert_eq!(p.slot("a", 9_000, 100, 9_000), 9_000);
    }
}
