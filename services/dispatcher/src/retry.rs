//! The retry role: failed deliveries wait in delay-tier topics (`hookstream.retry.<delay>`,
//! one fixed delay per topic), and a dispatcher consumer group delivers each when it is due.
//!
//! Because a tier has one delay, the head of a partition is always its earliest-due message:
//! the consumer holds the head until it is due (pausing that partition and polling on), then
//! resumes it (invariant 4: never early). A record due within a couple of seconds (a deferral
//! spaced at an endpoint's rate, a paced replay) waits in its own task instead: a resume costs
//! a fetch, which would cap a partition at a few records per second. A held or waiting
//! record's offset is outstanding in the tracker, so nothing past it is committed until it is
//! delivered or handed on. Retry lag is mostly waiting, by design: do not autoscale on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hookstream_config::{KafkaConfig, RetryConfig};
use hookstream_delivery::{ErrorClass, Outcome};
use hookstream_kafka::rdkafka::consumer::{
    BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use hookstream_kafka::rdkafka::producer::FutureRecord;
use hookstream_kafka::rdkafka::{ClientContext, Message as _, TopicPartitionList};
use hookstream_kafka::tracker::{OffsetTracker, Ticket};
use hookstream_proto::{DeadLetter, DeliveryTask, EventEnvelope, Message as _, SourcePosition};
use rand::Rng;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::isolation::Refusal;
use crate::{attempt, dead_letter, now_ms, DispatchError, Shared};

/// How long to wait before the attempt after `failed_attempt` (1-based), or `None` when the
/// schedule is exhausted. `spread` in [-1, 1] scales the jitter. Never shorter than the
/// receiver's `Retry-After` (clamped) nor, after a timeout or a 429, the throttle minimum.
pub fn next_delay(
    cfg: &RetryConfig,
    failed_attempt: u32,
    outcome: &Outcome,
    spread: f64,
) -> Option<Duration> {
    let base = *cfg.schedule_ms.get(failed_attempt.checked_sub(1)? as usize)?;
    let mut ms = (base as f64 * (1.0 + cfg.jitter * spread.clamp(-1.0, 1.0))).max(0.0) as u64;
    if matches!(outcome.class, ErrorClass::Timeout | ErrorClass::Http429) {
        ms = ms.max(cfg.min_throttled_delay_ms);
    }
    if let Some(ra) = outcome.retry_after {
        // Saturating: `as u64` wrapped a huge `Retry-After` to a short delay.
        ms = ms.max(
            u64::try_from(ra.as_millis())
                .unwrap_or(u64::MAX)
                .min(cfg.max_retry_after_ms),
        );
    }
    Some(Duration::from_millis(ms))
}

/// The due time of a retry `delay` after `now_ms`, saturating (a delay past `i64::MAX` ms is
/// never due, rather than wrapping into the past).
pub fn due_at_ms(now_ms: i64, delay: Duration) -> i64 {
    // +1: `now_ms` truncates, and a due time must never fall short of the delay.
    let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    now_ms.saturating_add(delay_ms).saturating_add(1)
}

/// Hands a failed delivery to the tier that fits its delay; true once Kafka acknowledged it.
/// Returns `None` when the schedule is exhausted (the caller dead-letters it).
pub(crate) async fn schedule(
    shared: &Shared,
    event: &EventEnvelope,
    endpoint_id: Uuid,
    failed_attempt: u32,
    first_attempt_at_ms: i64,
    origin: &SourcePosition,
    outcome: &Outcome,
) -> Option<bool> {
    let spread = rand::thread_rng().gen_range(-1.0..=1.0);
    let delay = next_delay(&shared.retry, failed_attempt, outcome, spread)?;
    let task = DeliveryTask {
        event: Some(event.clone()),
        endpoint_id: endpoint_id.to_string(),
        attempt: failed_attempt,
        due_at_ms: due_at_ms(now_ms(), delay),
        first_attempt_at_ms,
        origin: Some(origin.clone()),
        last_status: outcome.status.map(i32::from).unwrap_or(0),
        last_error_class: outcome.class.as_str().into(),
        last_error: outcome.error.clone().unwrap_or_default(),
    };
    Some(hand_on(shared, &task).await)
}

/// Hands a delivery the endpoint's guard refused (open breaker, rate limit, full cap) to the
/// tier that fits `refusal.retry_at_ms`, without counting an attempt: `attempts_made` stays
/// what it was. True once Kafka acknowledged it.
pub(crate) async fn defer(
    shared: &Shared,
    event: &EventEnvelope,
    endpoint_id: Uuid,
    attempts_made: u32,
    first_attempt_at_ms: i64,
    origin: &SourcePosition,
    refusal: Refusal,
) -> bool {
    let task = DeliveryTask {
        event: Some(event.clone()),
        endpoint_id: endpoint_id.to_string(),
        attempt: attempts_made,
        due_at_ms: refusal.retry_at_ms,
        first_attempt_at_ms,
        origin: Some(origin.clone()),
        last_status: 0,
        last_error_class: refusal.reason.as_str().into(),
        last_error: format!("deferred: {}", refusal.reason.as_str().replace('_', " ")),
    };
    hand_on(shared, &task).await
}

/// Produces `task` to the tier that fits its due time, retrying until Kafka acknowledges it
/// (true) or the dispatcher shuts down (false: the caller's offset stays unstored).
async fn hand_on(shared: &Shared, task: &DeliveryTask) -> bool {
    let delay_ms = task.due_at_ms.saturating_sub(now_ms()).max(0) as u64;
    let topic = shared.retry.tier_for(delay_ms);
    let bytes = task.encode_to_vec();
    loop {
        match shared
            .producer
            .send(
                FutureRecord::to(&topic).key(&task.endpoint_id).payload(&bytes),
                Duration::from_secs(5),
            )
            .await
        {
            Ok(_) => {
                shared
                    .metrics
                    .retry_produced
                    .with_label_values(&[tier_label(&topic, &shared.retry)])
                    .inc();
                return true;
            }
            Err((e, _)) => {
                tracing::warn!(error = %e, topic = %topic, "retry record not acknowledged, retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shared.shutdown.cancelled() => return false,
                }
            }
        }
    }
}

fn tier_label<'a>(topic: &'a str, cfg: &RetryConfig) -> &'a str {
    topic.strip_prefix(cfg.topic_prefix.as_str()).unwrap_or(topic)
}

/// A message held until its due time, its partition paused.
struct Held {
    task: DeliveryTask,
    ticket: Ticket,
    origin: SourcePosition,
}

type HeldMap = Arc<Mutex<HashMap<(String, i32), Held>>>;

struct RetryContext {
    tracker: Arc<Mutex<OffsetTracker>>,
    held: HeldMap,
}

impl ClientContext for RetryContext {}

impl ConsumerContext for RetryContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut tracker = self.tracker.lock().expect("tracker lock");
        let mut held = self.held.lock().expect("held lock");
        match rebalance {
            Rebalance::Revoke(tpl) => {
                for el in tpl.elements() {
                    tracker.revoke(el.topic(), el.partition());
                    held.remove(&(el.topic().to_string(), el.partition()));
                }
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(_) => {
                tracker.revoke_all();
                held.clear();
            }
        }
    }
}

/// Creates the tier topics that do not exist yet (replication: the broker's default). The
/// dispatcher does this before it consumes anything: without them no retry can be handed on.
pub(crate) async fn ensure_tier_topics(
    kafka: &KafkaConfig,
    retry: &RetryConfig,
) -> Result<(), DispatchError> {
    let tiers = retry.tiers();
    let topics: Vec<(&str, i32)> = tiers
        .iter()
        .map(|(_, t)| (t.as_str(), retry.partitions))
        .collect();
    hookstream_kafka::ensure_topics(kafka, &topics, -1)
        .await
        .map_err(|e| DispatchError::Topics(e.to_string()))
}

/// Consumes every tier until `shutdown`, then drains within `grace`.
pub(crate) async fn run_role(
    shared: Arc<Shared>,
    kafka: KafkaConfig,
    max_in_flight: usize,
    grace: Duration,
    shutdown: CancellationToken,
) -> Result<(), DispatchError> {
    let tiers = shared.retry.tiers();
    let tracker = Arc::new(Mutex::new(OffsetTracker::new()));
    let held: HeldMap = Arc::default();
    let consumer: Arc<StreamConsumer<RetryContext>> = Arc::new(
        hookstream_kafka::consumer_config(&kafka, &shared.retry.group_id).create_with_context(
            RetryContext {
                tracker: tracker.clone(),
                held: held.clone(),
            },
        )?,
    );
    let names: Vec<&str> = tiers.iter().map(|(_, t)| t.as_str()).collect();
    let mut replay_pacer = crate::replay::ReplayPacer::default();
    consumer.subscribe(&names)?;
    tracing::info!(tiers = ?names, group = %shared.retry.group_id, "retry role consuming");

    let slots = Arc::new(Semaphore::new(max_in_flight.max(1)));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Ticket>();
    let tasks = TaskTracker::new();
    let spawn = |task: DeliveryTask, ticket: Ticket, origin: SourcePosition| {
        let shared = shared.clone();
        let done_tx = done_tx.clone();
        let permit = slots.clone().try_acquire_owned();
        tasks.spawn(async move {
            let _permit = permit;
            // Records due within PACE_HORIZON_MS are taken up early and wait here.
            let early = task.due_at_ms.saturating_sub(now_ms());
            if early > 0 {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(early as u64)) => {}
                    _ = shared.shutdown.cancelled() => return,
                }
            }
            let late = now_ms().saturating_sub(task.due_at_ms).max(0) as f64 / 1000.0;
            shared.metrics.retry_lateness.observe(late);
            if deliver_task(&shared, task, &origin).await {
                let _ = done_tx.send(ticket);
            }
        });
    };

    loop {
        let next_due = held
            .lock()
            .expect("held lock")
            .values()
            .map(|h| h.task.due_at_ms)
            .min();
        let wait = next_due.map(|due| Duration::from_millis(due.saturating_sub(now_ms()).max(0) as u64));
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            Some(ticket) = done_rx.recv() => complete(&consumer, &tracker, &ticket),
            _ = tokio::time::sleep(wait.unwrap_or(Duration::from_secs(3600))), if wait.is_some() => {
                let now = now_ms();
                let due: Vec<((String, i32), Held)> = {
                    let mut held = held.lock().expect("held lock");
                    let keys: Vec<(String, i32)> =
                        held.iter().filter(|(_, h)| h.task.due_at_ms <= now).map(|(k, _)| k.clone()).collect();
                    keys.into_iter().filter_map(|k| held.remove(&k).map(|h| (k, h))).collect()
                };
                for ((topic, partition), h) in due {
                    let mut tpl = TopicPartitionList::new();
                    tpl.add_partition(&topic, partition);
                    if let Err(e) = consumer.resume(&tpl) {
                        tracing::debug!(error = %e, %topic, partition, "resume failed (revoked?)");
                    }
                    spawn(h.task, h.ticket, h.origin);
                }
            }
            received = consumer.recv(), if slots.available_permits() > 0 => {
                let msg = match received {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(error = %e, "kafka consumer error (retry role)");
                        continue;
                    }
                };
                let origin = SourcePosition { topic: msg.topic().to_string(), partition: msg.partition(), offset: msg.offset() };
                let timestamp_ms = msg.timestamp().to_millis().unwrap_or_else(now_ms);
                let ticket = tracker.lock().expect("tracker lock").begin(msg.topic(), msg.partition(), msg.offset(), timestamp_ms);
                let payload = msg.payload().map(Bytes::copy_from_slice).unwrap_or_default();
                shared.metrics.retry_consumed.with_label_values(&[tier_label(msg.topic(), &shared.retry)]).inc();
                if let Some(kind) = crate::replay::replay_kind(&msg) {
                    shared.metrics.dlq_replayed.with_label_values(&[kind]).inc();
                }
                let mut task = match DeliveryTask::decode(payload.clone()) {
                    Ok(t) if t.event.is_some() => t,
                    decoded => {
                        let reason = match decoded {
                            Err(e) => format!("undecodable retry record: {e}"),
                            Ok(_) => "retry record without an event".to_string(),
                        };
                        let shared = shared.clone();
                        let done_tx = done_tx.clone();
                        tasks.spawn(async move {
                            let letter = DeadLetter {
                                reason,
                                error_class: "decode".into(),
                                raw: payload,
                                origin: Some(origin),
                                dead_at_ms: now_ms(),
                                ..Default::default()
                            };
                            if dead_letter(&shared, letter, "").await {
                                let _ = done_tx.send(ticket);
                            }
                        });
                        continue;
                    }
                };
                if let Some(interval) = crate::replay::replay_interval_ms(&msg) {
                    // A replay: at most its rate to one endpoint, however many arrived at once.
                    task.due_at_ms = replay_pacer.slot(&task.endpoint_id, task.due_at_ms, interval, now_ms());
                }
                // A short wait (a paced replay, a deferral spaced at an endpoint's rate) is
                // slept in its task rather than held with a pause: every resume costs a fetch,
                // which would cap a partition at a few messages per second.
                if task.due_at_ms.saturating_sub(now_ms()) > crate::replay::PACE_HORIZON_MS {
                    // Hold the head of this partition until it is due; keep polling the others.
                    let mut tpl = TopicPartitionList::new();
                    tpl.add_partition(msg.topic(), msg.partition());
                    consumer.pause(&tpl)?;
                    held.lock().expect("held lock").insert((msg.topic().to_string(), msg.partition()), Held { task, ticket, origin });
                } else {
                    spawn(task, ticket, origin);
                }
            }
        }
    }

    crate::drain(&consumer, &tracker, &mut done_rx, &tasks, grace).await;
    Ok(())
}

fn complete(consumer: &StreamConsumer<RetryContext>, tracker: &Mutex<OffsetTracker>, ticket: &Ticket) {
    crate::store_completed(consumer, tracker, ticket);
}

/// Delivers one due retry; false only when shutdown left it unfinished.
async fn deliver_task(shared: &Shared, task: DeliveryTask, origin: &SourcePosition) -> bool {
    let event = task.event.clone().unwrap_or_default();
    // Retry and dead-letter records keep pointing at the event's place in the events topic.
    let original = task.origin.clone().unwrap_or_else(|| origin.clone());
    let endpoint = match Uuid::parse_str(&task.endpoint_id) {
        Ok(id) => shared.subs.endpoint(id).await,
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
            origin: Some(original),
            event: Some(event),
            ..Default::default()
        };
        return dead_letter(shared, letter, &task.endpoint_id).await;
    };
    attempt(
        shared,
        &event,
        &ep,
        task.attempt + 1,
        task.first_attempt_at_ms,
        &original,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookstream_delivery::Verdict;

    fn outcome(class: ErrorClass, retry_after: Option<u64>) -> Outcome {
        Outcome {
            verdict: Verdict::Retryable,
            class,
            status: None,
            error: None,
            retry_after: retry_after.map(Duration::from_secs),
            latency: Duration::ZERO,
            response: Bytes::new(),
        }
    }

    #[test]
    fn follows_the_schedule_then_gives_up() {
        let cfg = RetryConfig {
            jitter: 0.0,
            ..Default::default()
        };
        let o = outcome(ErrorClass::Http5xx, None);
        let delays: Vec<u64> = (1..=7)
            .map(|a| next_delay(&cfg, a, &o, 0.0).unwrap().as_secs())
            .collect();
        assert_eq!(delays, [5, 300, 1800, 7200, 18000, 36000, 36000]);
        assert_eq!(next_delay(&cfg, 8, &o, 0.0), None, "seven retries, then the DLQ");
    }

    #[test]
    fn jitter_stays_within_its_band() {
        let cfg = RetryConfig::default();
        let o = outcome(ErrorClass::Http5xx, None);
        assert_eq!(next_delay(&cfg, 1, &o, -1.0), Some(Duration::from_secs(4)));
        assert_eq!(next_delay(&cfg, 1, &o, 1.0), Some(Duration::from_secs(6)));
    }

    #[test]
    fn throttling_and_retry_after_push_the_delay_out_within_the_clamp() {
        let cfg = RetryConfig {
            jitter: 0.0,
            ..Default::default()
        };
        assert_eq!(
            next_delay(&cfg, 1, &outcome(ErrorClass::Timeout, None), 0.0),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            next_delay(&cfg, 1, &outcome(ErrorClass::Http429, None), 0.0),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            next_delay(&cfg, 1, &outcome(ErrorClass::Http5xx, Some(10)), 0.0),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            next_delay(&cfg, 1, &outcome(ErrorClass::Http5xx, Some(10 * 86_400)), 0.0),
            Some(Duration::from_secs(86_400)),
            "Retry-After is clamped"
        );
    }

    // `Retry-After: 18446744073709552` (seconds) is 18446744073709552000 ms, which `as u64`
    // wrapped to 384 ms, so the header was ignored instead of clamped (the `retry_after`
    // fuzz target's property; `fuzz/regressions/retry_after/` keeps the input).
    #[test]
    fn a_huge_retry_after_is_clamped_not_wrapped() {
        let cfg = RetryConfig {
            jitter: 0.0,
            ..Default::default()
        };
        let huge = outcome(ErrorClass::Http5xx, Some(18_446_744_073_709_552));
        assert_eq!(next_delay(&cfg, 1, &huge, 0.0), Some(Duration::from_secs(86_400)));
        let mut unclamped = cfg.clone();
        unclamped.max_retry_after_ms = u64::MAX;
        assert_eq!(
            next_delay(&unclamped, 1, &huge, 0.0),
            Some(Duration::from_millis(u64::MAX))
        );
    }

    #[test]
    fn due_times_saturate_instead_of_wrapping_into_the_past() {
        assert_eq!(due_at_ms(1_000, Duration::from_millis(5)), 1_006);
        assert_eq!(due_at_ms(1_000, Duration::from_millis(u64::MAX)), i64::MAX);
        assert_eq!(due_at_ms(i64::MAX - 1, Duration::from_millis(10)), i64::MAX);
        assert_eq!(due_at_ms(i64::MIN, Duration::ZERO), i64::MIN + 1);
    }
}
