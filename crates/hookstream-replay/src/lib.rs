//! Replay: puts dead letters (or any event, for a manual resend) back into the normal
//! delivery path. Used by the `hookstream dlq replay` and `hookstream event resend` commands
//! (and, later, the API); the dispatchers' retry role reads the headers defined here.
//!
//! Longer than 800 lines: replay, resend and send share one `Replayer` (its rate, its sealing,
//! its hand-off to the first tier), and each path is short.
//!
//! A replay produces a `DeliveryTask` with `attempt: 0` and the stored event envelope (so the
//! same `webhook-id`) to the first (shortest) retry tier, keyed by endpoint; the dispatchers'
//! retry role delivers it when due with the same engine, signing and schedule as any
//! delivery, and a failure goes round the retry tiers and back to the DLQ. A dead letter of an
//! unknown tenant (no endpoint) is replayed as a task without an endpoint: the retry role
//! routes its event again, to every endpoint its tenant has by then.
//!
//! Replays are rate-limited twice. Task k of a replay is due `k / rate` seconds after the
//! start and is produced when it is due, so the retry role takes it up at once: a replay
//! never makes the tier hold (pause) a partition, and the tier's ordinary retries behind it
//! are not held up. And each task carries the replay's interval
//! (`1 / rate`) in a header: the retry role starts replayed deliveries to one endpoint at
//! least that far apart (`ReplayPacer`), even when it took several up at once after a slow
//! fetch, so a replay cannot flood an endpoint that just recovered. A dead letter is marked
//! replayed only after Kafka acknowledged its task.

#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use hookstream_config::{KafkaConfig, RetryConfig};
use hookstream_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use hookstream_kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use hookstream_kafka::rdkafka::message::{Header, OwnedHeaders};
use hookstream_kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use hookstream_kafka::rdkafka::{Message, Offset, TopicPartitionList};
use hookstream_proto::{DeliveryTask, EventEnvelope, Message as _, SourcePosition};
use hookstream_store::dead_letters::{self, DeadLetterDetail, Filter};
use hookstream_store::sqlx::PgPool;
use hookstream_store::{endpoints, payload_keys, tenants, EventFilter, StoreError};
use serde::Serialize;
use uuid::Uuid;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Kafka header on replayed tasks: `dead_letter` or `resend`.
pub const REPLAY_HEADER: &str = "hookstream-replay";
/// Kafka header on replayed tasks: the id of the dead letter replayed.
pub const DEAD_LETTER_ID_HEADER: &str = "hookstream-dead-letter-id";
/// Kafka header on replayed tasks: the least time between two replayed deliveries to one
/// endpoint, in milliseconds (the replay's rate).
pub const INTERVAL_HEADER: &str = "hookstream-replay-interval-ms";
/// The default replay rate, deliveries per second.
pub const DEFAULT_RATE_PER_S: f64 = 10.0;
/// The slowest pace accepted: one delivery a day.
pub const MIN_RATE_PER_S: f64 = 1.0 / 86_400.0;
/// How far ahead of its due time a replayed task is produced. Zero: the shortest tier's
/// consumer takes every record up at once and waits in memory, so a task produced early would
/// only hold memory longer.
const LEAD_MS: i64 = 0;
/// Dead letters read from the database at a time.
const PAGE: i64 = 500;
/// Dead letters marked replayed per UPDATE.
const MARK_BATCH: usize = 100;
/// The longest an acknowledged dead letter waits to be marked (at slow paces a batch takes
/// long to fill, and the claim that keeps other replays off it must not lapse first).
const MARK_WITHIN: Duration = Duration::from_secs(5);
/// A replay claims the dead letters due in the next minute (at least one) at a time, so that
/// a slow replay that dies does not hold what it had not reached for long.
const CLAIM_AHEAD_MS: i64 = 60_000;
/// A claim lasts until its last task is due, plus this: time for Kafka to acknowledge and for
/// the marking, before another replay may take what is left of it.
const CLAIM_MARGIN_MS: i64 = 10 * 60 * 1000;
/// A resend looks for the event from this long before its id's timestamp (clock skew).
const SKEW_MS: i64 = 60_000;
/// A resend gives up scanning the events topic after this long.
const SCAN_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("kafka error: {0}")]
    Kafka(#[from] KafkaError),
    #[error(
        "retries are disabled (retry.enabled = false): replays are delivered by the dispatchers' retry role"
    )]
    RetriesDisabled,
    #[error("retry.schedule_ms is empty: there is no retry tier to replay into")]
    NoTier,
    #[error(
        "topic {0} does not exist: are the dispatchers running with the same [retry] and [kafka] settings as this command?"
    )]
    TopicMissing(String),
    #[error("the rate must be at least one delivery a day (1/86400 per second), not {0}")]
    BadRate(f64),
    #[error("endpoint {id} is disabled ({reason}): run `hookstream endpoint enable {id}` first")]
    EndpointDisabled { id: Uuid, reason: String },
    #[error("event {event} belongs to tenant {event_tenant}, endpoint {endpoint} to tenant {endpoint_tenant}: refusing to send it across tenants")]
    TenantMismatch {
        event: Uuid,
        event_tenant: String,
        endpoint: Uuid,
        endpoint_tenant: Uuid,
    },
    #[error("{0} is not a UUIDv7 event id (its creation time is where the search starts)")]
    NotV7(Uuid),
    #[error("event {event} not found: not in {topic} within {window_s} s after its creation, nor among the dead letters")]
    EventNotFound {
        event: Uuid,
        topic: String,
        window_s: u64,
    },
    #[error("kafka did not acknowledge the task: {0}")]
    NotAcknowledged(String),
    #[error("event {event} cannot be sent again: {reason}")]
    Erased { event: String, reason: &'static str },
    #[error("internal error: {0}")]
    Internal(String),
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Deliveries per second, over the whole replay.
    pub rate_per_s: f64,
    /// Report what would be replayed; produce nothing, mark nothing.
    pub dry_run: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            rate_per_s: DEFAULT_RATE_PER_S,
            dry_run: false,
        }
    }
}

/// A dead letter that was not replayed, and why.
#[derive(Debug, Clone, Serialize)]
pub struct NotReplayed {
    pub id: i64,
    pub reason: String,
}

/// What a replay did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayReport {
    pub dry_run: bool,
    /// The tier topic the tasks went to.
    pub tier: String,
    /// Replayed (acknowledged by Kafka and marked), or, in a dry run, would be.
    pub replayed: Vec<i64>,
    /// Dead letters that cannot or should not be replayed (poison, a disabled endpoint…).
    pub skipped: Vec<NotReplayed>,
    /// Kafka refused the task; the dead letter is not marked (replay it again).
    pub failed: Vec<NotReplayed>,
    /// Replayed, but the database did not record it (replaying again sends a duplicate).
    pub unmarked: Vec<i64>,
    /// Due times of the first and last task (ms since the Unix epoch).
    pub first_due_ms: Option<i64>,
    pub last_due_ms: Option<i64>,
}

/// What a resend did.
#[derive(Debug, Clone, Serialize)]
pub struct Resent {
    pub event_id: Uuid,
    pub endpoint_id: Uuid,
    pub event_type: String,
    /// `events topic` (with `position`) or `dead letters`.
    pub found_in: String,
    pub position: Option<SourcePositionView>,
    pub tier: String,
    /// Whether the endpoint's event-type filter matches (a resend ignores the filter).
    pub filter_matches: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourcePositionView {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Produces replays and resends into the first retry tier.
pub struct Replayer {
    pool: PgPool,
    kafka: KafkaConfig,
    /// Connected on first use (a dry run, or a selection with nothing replayable, needs none).
    producer: tokio::sync::OnceCell<FutureProducer>,
    tier: String,
}

impl Replayer {
    /// Checks that replays can be delivered at all: retries on, a tier to replay into.
    pub fn new(pool: PgPool, kafka: &KafkaConfig, retry: &RetryConfig) -> Result<Self, ReplayError> {
        if !retry.enabled {
            return Err(ReplayError::RetriesDisabled);
        }
        let tier = retry
            .shortest_tier()
            .map(|t| t.topic)
            .ok_or(ReplayError::NoTier)?;
        Ok(Self {
            pool,
            kafka: kafka.clone(),
            producer: tokio::sync::OnceCell::new(),
            tier,
        })
    }

    /// The producer, after checking that the tier topic exists (producing to a missing topic
    /// could create it with the broker's defaults, and no retry role would read it).
    async fn producer(&self) -> Result<&FutureProducer, ReplayError> {
        self.producer
            .get_or_try_init(|| async {
                let (k, t) = (self.kafka.clone(), self.tier.clone());
                let partitions = tokio::task::spawn_blocking(move || topic_partitions(&k, &t))
                    .await
                    .map_err(|e| ReplayError::Internal(e.to_string()))??;
                if partitions == 0 {
                    return Err(ReplayError::TopicMissing(self.tier.clone()));
                }
                Ok(hookstream_kafka::producer_config(&self.kafka, Duration::from_secs(30)).create()?)
            })
            .await
    }

    /// The tier topic replays go to.
    pub fn tier(&self) -> &str {
        &self.tier
    }

    /// Replays every dead letter matching `filter`, oldest first, at `opts.rate_per_s`.
    /// Dead letters without an endpoint or an event (poison, unknown tenants) and those of
    /// disabled or deleted endpoints are skipped with the reason.
    pub async fn replay(&self, filter: &Filter, opts: &ReplayOptions) -> Result<ReplayReport, ReplayError> {
        // At least one a day: slower paces overflow the due times' arithmetic.
        if !(opts.rate_per_s.is_finite() && opts.rate_per_s >= MIN_RATE_PER_S) {
            return Err(ReplayError::BadRate(opts.rate_per_s));
        }
        let interval_ms = 1000.0 / opts.rate_per_s;
        let interval_header = (interval_ms.ceil() as i64).max(1).to_string();
        let mut report = ReplayReport {
            dry_run: opts.dry_run,
            tier: self.tier.clone(),
            ..Default::default()
        };
        let mut target_state: HashMap<Target, Result<(), String>> = HashMap::new();
        let mut pending = FuturesUnordered::new();
        let mut acked = Unmarked::default();
        let start_ms = now_ms();
        let mut k: u64 = 0;
        let mut after = 0;
        // This replay's claim on what it sends: another replay at the same time skips it.
        let claim = Uuid::new_v4();
        // What exists now: the dead letters this replay's own sends make when they fail again
        // match the filter too, and must not be sent again by it.
        let (max_id, started) = dead_letters::max_id_and_now(&self.pool).await?;
        let filter = &Filter {
            max_id: Some(max_id),
            ..filter.clone()
        };
        // An error part-way ends the walk, but what Kafka acknowledged is still marked below:
        // unmarked, it would be sent again by the next replay.
        let walked: Result<(), ReplayError> = async {
        loop {
            let page = dead_letters::page_for_replay(&self.pool, filter, after, PAGE).await?;
            let Some(last) = page.last() else { break };
            after = last.letter.id;
            // What each row is: a task to send, or the reason it is skipped.
            let mut decided = Vec::with_capacity(page.len());
            for row in page {
                let mut verdict = replayable(&row);
                if let Ok((_, event)) = &verdict {
                    if let Some(reason) =
                        payload_keys::why_erased(&self.pool, &event.payload_key, &event.event_id).await?
                    {
                        verdict = Err(reason.to_string());
                    }
                }
                let verdict = match verdict {
                    Ok((target, event)) => {
                        if let std::collections::hash_map::Entry::Vacant(slot) = target_state.entry(target) {
                            slot.insert(self.target_usable(target).await?);
                        }
                        match &target_state[&target] {
                            Ok(()) => Ok((target, event)),
                            Err(reason) => Err(reason.clone()),
                        }
                    }
                    Err(reason) => Err(reason),
                };
                decided.push((row, verdict));
            }
            // Claimed as they come due, a minute's worth at a time: what this replay would send
            // (what it skips, another replay should see skipped for its own reason).
            let sendable: Vec<i64> = decided
                .iter()
                .filter(|(_, verdict)| verdict.is_ok())
                .map(|(row, _)| row.letter.id)
                .collect();
            let per_claim = ((CLAIM_AHEAD_MS as f64 / interval_ms) as usize).clamp(1, sendable.len().max(1));
            let mut asked = 0; // sendable[..asked] were asked for
            let mut claimed: HashSet<i64> = HashSet::new();
            for (row, verdict) in decided {
                let id = row.letter.id;
                let (target, event) = match verdict {
                    Ok(v) => v,
                    Err(reason) => {
                        report.skipped.push(NotReplayed { id, reason });
                        continue;
                    }
                };
                if asked < sendable.len() && sendable[asked] == id {
                    let chunk = &sendable[asked..(asked + per_claim).min(sendable.len())];
                    asked += chunk.len();
                    if opts.dry_run {
                        claimed.extend(chunk);
                    } else {
                        // Until the chunk's last task is due (at most one per row), plus the margin.
                        let last_due_ms =
                            start_ms + ((k + chunk.len() as u64) as f64 * interval_ms).round() as i64;
                        let for_ms = (last_due_ms - now_ms()).max(0) + CLAIM_MARGIN_MS;
                        claimed.extend(
                            dead_letters::claim_for_replay(&self.pool, chunk, claim, started, for_ms).await?,
                        );
                    }
                }
                if !claimed.contains(&id) {
                    report.skipped.push(NotReplayed {
                        id,
                        reason: "another replay is sending it, or sent it since this one started".into(),
                    });
                    continue;
                }
                let due_ms = start_ms + (k as f64 * interval_ms).round() as i64;
                k += 1;
                report.first_due_ms.get_or_insert(due_ms);
                report.last_due_ms = Some(due_ms);
                if opts.dry_run {
                    report.replayed.push(id);
                    continue;
                }
                // Pace: produce no earlier than LEAD_MS before the due time, taking acks
                // meanwhile, and marking them within MARK_WITHIN (a slow replay's claims must
                // not lapse before what it sent is marked).
                loop {
                    if acked.due() {
                        self.mark(&mut acked, &mut report).await;
                    }
                    let wait = due_ms - LEAD_MS - now_ms();
                    if wait <= 0 {
                        break;
                    }
                    let wait = acked.mark_in_ms().map_or(wait, |m| wait.min(m));
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(wait as u64)) => {}
                        Some((id, result)) = pending.next() => settle(id, result, &mut acked, &mut report),
                    }
                }
                let task = DeliveryTask {
                    event: Some(event),
                    endpoint_id: match target {
                        Target::Endpoint(endpoint) => endpoint.to_string(),
                        Target::Tenant(_) => String::new(),
                    },
                    attempt: 0,
                    due_at_ms: due_ms,
                    first_attempt_at_ms: 0,
                    origin: origin_of(&row),
                    last_status: row.letter.last_status,
                    last_error_class: row.letter.error_class.clone(),
                    last_error: row.letter.reason.clone(),
                }
                .encode_to_vec();
                let key = match target {
                    Target::Endpoint(id) | Target::Tenant(id) => id.to_string(),
                };
                let id_text = id.to_string();
                loop {
                    let headers = OwnedHeaders::new()
                        .insert(Header {
                            key: REPLAY_HEADER,
                            value: Some("dead_letter"),
                        })
                        .insert(Header {
                            key: DEAD_LETTER_ID_HEADER,
                            value: Some(id_text.as_str()),
                        })
                        .insert(Header {
                            key: INTERVAL_HEADER,
                            value: Some(interval_header.as_str()),
                        });
                    let record = FutureRecord::to(&self.tier)
                        .key(&key)
                        .payload(&task)
                        .headers(headers);
                    match self.producer().await?.send_result(record) {
                        Ok(ack) => {
                            pending.push(async move { (id, ack.await) });
                            break;
                        }
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                            match pending.next().await {
                                Some((id, result)) => settle(id, result, &mut acked, &mut report),
                                None => tokio::time::sleep(Duration::from_millis(50)).await,
                            }
                        }
                        Err((e, _)) => {
                            report.failed.push(NotReplayed {
                                id,
                                reason: e.to_string(),
                            });
                            break;
                        }
                    }
                }
                if acked.due() {
                    self.mark(&mut acked, &mut report).await;
                }
            }
        }
        Ok(())
        }
        .await;
        while let Some((id, result)) = pending.next().await {
            settle(id, result, &mut acked, &mut report);
        }
        self.mark(&mut acked, &mut report).await;
        if !opts.dry_run {
            // What was not sent (refused by Kafka, skipped, or behind an error) is free again;
            // should this fail, the claims expire on their own.
            if let Err(e) = dead_letters::release_replay_claims(&self.pool, claim).await {
                tracing::warn!(error = %e, "could not release the replay's claims; they expire on their own");
            }
        }
        walked?;
        report.replayed.sort_unstable();
        Ok(report)
    }

    /// Marks acknowledged dead letters replayed; what the database refuses is reported.
    async fn mark(&self, acked: &mut Unmarked, report: &mut ReplayReport) {
        if acked.ids.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut acked.ids);
        acked.oldest = None;
        let mut tries = 0;
        loop {
            match dead_letters::mark_replayed(&self.pool, &ids).await {
                Ok(_) => {
                    report.replayed.extend(&ids);
                    return;
                }
                Err(e) if tries < 3 => {
                    tries += 1;
                    tracing::warn!(error = %e, "could not mark dead letters replayed, retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not mark dead letters replayed");
                    report.unmarked.extend(&ids);
                    return;
                }
            }
        }
    }

    /// Ok when the endpoint exists and is enabled (or the tenant exists), else the reason to
    /// skip its dead letters.
    async fn target_usable(&self, target: Target) -> Result<Result<(), String>, ReplayError> {
        let id = match target {
            Target::Endpoint(id) => id,
            Target::Tenant(tenant) => {
                return match tenants::get(&self.pool, tenant).await {
                    Ok(_) => Ok(Ok(())),
                    Err(StoreError::NotFound(_)) => Ok(Err(format!("tenant {tenant} does not exist"))),
                    Err(e) => Err(e.into()),
                }
            }
        };
        match endpoints::get(&self.pool, id).await {
            Ok(ep) if ep.enabled => Ok(Ok(())),
            Ok(ep) => Ok(Err(ReplayError::EndpointDisabled {
                id,
                reason: ep.disabled_reason.unwrap_or_else(|| "no reason recorded".into()),
            }
            .to_string())),
            Err(StoreError::NotFound(_)) => Ok(Err(format!("endpoint {id} no longer exists"))),
            Err(e) => Err(e.into()),
        }
    }

    /// Sends one event to one endpoint again, through the first retry tier, now. The event
    /// is looked up in the events topic from its id's timestamp (UUIDv7) for `window`, then
    /// among the dead letters. The endpoint must be enabled and the event's tenant's.
    pub async fn resend(
        &self,
        event_id: Uuid,
        endpoint_id: Uuid,
        window: Duration,
    ) -> Result<Resent, ReplayError> {
        let ep = endpoints::get(&self.pool, endpoint_id).await?;
        if !ep.enabled {
            return Err(ReplayError::EndpointDisabled {
                id: endpoint_id,
                reason: ep.disabled_reason.unwrap_or_else(|| "no reason recorded".into()),
            });
        }
        let created_ms = v7_millis(event_id).ok_or(ReplayError::NotV7(event_id))?;
        let (kafka, topic) = (self.kafka.clone(), self.kafka.topics.events.clone());
        let found =
            tokio::task::spawn_blocking(move || find_event(&kafka, &topic, event_id, created_ms, window))
                .await
                .map_err(|e| ReplayError::Internal(e.to_string()))??;
        let (event, position) = match found {
            Some((event, pos)) => (event, Some(pos)),
            None => {
                let stored = dead_letters::event_envelope(&self.pool, event_id).await?;
                match stored.and_then(|b| EventEnvelope::decode(b.as_slice()).ok()) {
                    Some(event) => (event, None),
                    None => {
                        return Err(ReplayError::EventNotFound {
                            event: event_id,
                            topic: self.kafka.topics.events.clone(),
                            window_s: window.as_secs(),
                        })
                    }
                }
            }
        };
        if Uuid::parse_str(&event.tenant_id).ok() != Some(ep.tenant_id) {
            return Err(ReplayError::TenantMismatch {
                event: event_id,
                event_tenant: event.tenant_id.clone(),
                endpoint: endpoint_id,
                endpoint_tenant: ep.tenant_id,
            });
        }
        let filter_matches = EventFilter::new(&ep.event_types)
            .map(|f| f.matches(&event.event_type))
            .unwrap_or(false);
        let event_type = event.event_type.clone();
        self.send_event(event, endpoint_id, position.clone()).await?;
        Ok(Resent {
            event_id,
            endpoint_id,
            event_type,
            found_in: if position.is_some() {
                "events topic".into()
            } else {
                "dead letters".into()
            },
            position: position.map(|p| SourcePositionView {
                topic: p.topic,
                partition: p.partition,
                offset: p.offset,
            }),
            tier: self.tier.clone(),
            filter_matches,
        })
    }
}

impl Replayer {
    /// Sends `event` to one endpoint through the first retry tier, now, as a resend: the
    /// caller has the event (the API reads it from the message store) and has checked that
    /// the endpoint is enabled and of the event's tenant. Returns once Kafka acknowledged it.
    pub async fn send_event(
        &self,
        event: EventEnvelope,
        endpoint_id: Uuid,
        origin: Option<SourcePosition>,
    ) -> Result<(), ReplayError> {
        self.send_resend(event, endpoint_id, origin, None).await
    }

    /// `send_event` for one of a series (a replay of what an endpoint missed): the retry role
    /// starts the series' deliveries to the endpoint at least `interval` apart.
    pub async fn send_paced(
        &self,
        event: EventEnvelope,
        endpoint_id: Uuid,
        interval: Duration,
    ) -> Result<(), ReplayError> {
        self.send_resend(event, endpoint_id, None, Some(interval)).await
    }

    async fn send_resend(
        &self,
        event: EventEnvelope,
        endpoint_id: Uuid,
        origin: Option<SourcePosition>,
        interval: Option<Duration>,
    ) -> Result<(), ReplayError> {
        if let Some(reason) =
            payload_keys::why_erased(&self.pool, &event.payload_key, &event.event_id).await?
        {
            return Err(ReplayError::Erased {
                event: event.event_id,
                reason,
            });
        }
        let task = DeliveryTask {
            event: Some(event),
            endpoint_id: endpoint_id.to_string(),
            attempt: 0,
            due_at_ms: now_ms(),
            origin,
            ..Default::default()
        }
        .encode_to_vec();
        let key = endpoint_id.to_string();
        let interval_ms = interval.map(|i| i.as_millis().max(1).to_string());
        let mut headers = OwnedHeaders::new().insert(Header {
            key: REPLAY_HEADER,
            value: Some("resend"),
        });
        if let Some(ms) = &interval_ms {
            headers = headers.insert(Header {
                key: INTERVAL_HEADER,
                value: Some(ms.as_str()),
            });
        }
        let record = FutureRecord::to(&self.tier)
            .key(&key)
            .payload(&task)
            .headers(headers);
        self.producer()
            .await?
            .send(record, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| ReplayError::NotAcknowledged(e.to_string()))?;
        Ok(())
    }
}

type Ack = Result<
    hookstream_kafka::rdkafka::producer::future_producer::OwnedDeliveryResult,
    futures::channel::oneshot::Canceled,
>;

/// Dead letters Kafka acknowledged and not yet marked replayed.
#[derive(Default)]
struct Unmarked {
    ids: Vec<i64>,
    /// When the oldest of them was acknowledged.
    oldest: Option<Instant>,
}

impl Unmarked {
    fn push(&mut self, id: i64) {
        self.oldest.get_or_insert_with(Instant::now);
        self.ids.push(id);
    }

    /// A batch's worth, or one waiting MARK_WITHIN.
    fn due(&self) -> bool {
        self.ids.len() >= MARK_BATCH || self.oldest.is_some_and(|t| t.elapsed() >= MARK_WITHIN)
    }

    /// Milliseconds until the oldest is due for marking (None: none waits).
    fn mark_in_ms(&self) -> Option<i64> {
        self.oldest
            .map(|t| MARK_WITHIN.saturating_sub(t.elapsed()).as_millis() as i64)
            .map(|ms| ms.max(1))
    }
}

fn settle(id: i64, result: Ack, acked: &mut Unmarked, report: &mut ReplayReport) {
    match result {
        Ok(Ok(_)) => acked.push(id),
        Ok(Err((e, _))) => report.failed.push(NotReplayed {
            id,
            reason: e.to_string(),
        }),
        Err(_) => report.failed.push(NotReplayed {
            id,
            reason: "the producer stopped before Kafka answered".into(),
        }),
    }
}

/// Where a replayed dead letter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Target {
    /// To this endpoint.
    Endpoint(Uuid),
    /// Routed again to every endpoint of this tenant (the dead letter of an unknown tenant).
    Tenant(Uuid),
}

/// Where a dead letter goes and its event, or why it cannot be replayed.
fn replayable(row: &DeadLetterDetail) -> Result<(Target, EventEnvelope), String> {
    let bytes = row.event.as_deref().ok_or_else(|| {
        format!(
            "no event stored with it (class {}: a poison record)",
            row.letter.error_class
        )
    })?;
    let event =
        EventEnvelope::decode(bytes).map_err(|e| format!("its stored event cannot be decoded: {e}"))?;
    // An event's payload is JSON, never empty: an empty one was left out of a dead letter the
    // DLQ topic refused as too large (its reason says so and where the event is).
    if event.payload.is_empty() {
        return Err(
            "its event's payload was not kept (the dead letter was larger than the DLQ topic accepts)".into(),
        );
    }
    let target = match row.letter.endpoint_id {
        Some(endpoint) => Target::Endpoint(endpoint),
        None if row.letter.error_class == "unknown_tenant" => Target::Tenant(
            Uuid::parse_str(&event.tenant_id)
                .map_err(|_| format!("its event names no valid tenant ({:?})", event.tenant_id))?,
        ),
        None => {
            return Err(format!(
                "no endpoint to deliver to (class {})",
                row.letter.error_class
            ))
        }
    };
    Ok((target, event))
}

fn origin_of(row: &DeadLetterDetail) -> Option<SourcePosition> {
    let l = &row.letter;
    Some(SourcePosition {
        topic: l.origin_topic.clone()?,
        partition: l.origin_partition?,
        offset: l.origin_offset?,
    })
}

/// Milliseconds since the Unix epoch in a UUIDv7.
fn v7_millis(id: Uuid) -> Option<i64> {
    if id.get_version_num() != 7 {
        return None;
    }
    let (secs, nanos) = id.get_timestamp()?.to_unix();
    Some(secs as i64 * 1000 + i64::from(nanos / 1_000_000))
}

/// A consumer for metadata and scans: no group membership, nothing committed, never
/// creates topics.
fn reader(kafka: &KafkaConfig) -> Result<BaseConsumer, KafkaError> {
    let mut cfg = hookstream_kafka::client_config(kafka);
    cfg.set("group.id", format!("hookstream-cli-{}", Uuid::new_v4()))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("allow.auto.create.topics", "false");
    cfg.create()
}

/// How many partitions `topic` has (0: it does not exist).
fn topic_partitions(kafka: &KafkaConfig, topic: &str) -> Result<usize, KafkaError> {
    let consumer = reader(kafka)?;
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    Ok(md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map_or(0, |t| t.partitions().len()))
}

/// Finds an event in the events topic: on every partition from the first record at most
/// `SKEW_MS` older than the event's creation time, until a record newer than creation +
/// `window`, the partition's end, or `SCAN_TIMEOUT`.
fn find_event(
    kafka: &KafkaConfig,
    topic: &str,
    event_id: Uuid,
    created_ms: i64,
    window: Duration,
) -> Result<Option<(EventEnvelope, SourcePosition)>, ReplayError> {
    let partitions = topic_partitions(kafka, topic)?;
    if partitions == 0 {
        return Err(ReplayError::TopicMissing(topic.to_string()));
    }
    let consumer = reader(kafka)?;
    let mut wanted = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        wanted.add_partition_offset(topic, p, Offset::Offset(created_ms - SKEW_MS))?;
    }
    let starts = consumer.offsets_for_times(wanted, Duration::from_secs(10))?;
    let mut ends: HashMap<i32, i64> = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for el in starts.elements() {
        let Offset::Offset(start) = el.offset() else {
            continue; // nothing at or after that time
        };
        let (low, high) = consumer.fetch_watermarks(topic, el.partition(), Duration::from_secs(10))?;
        let start = start.max(low);
        if start < high {
            assignment.add_partition_offset(topic, el.partition(), Offset::Offset(start))?;
            ends.insert(el.partition(), high);
        }
    }
    if ends.is_empty() {
        return Ok(None);
    }
    consumer.assign(&assignment)?;
    let stop_ms = created_ms.saturating_add(window.as_millis() as i64);
    let deadline = Instant::now() + SCAN_TIMEOUT;
    while !ends.is_empty() && Instant::now() < deadline {
        let msg = match consumer.poll(Duration::from_millis(200)) {
            None => continue,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "scan: consumer error");
                continue;
            }
            Some(Ok(m)) => m,
        };
        let p = msg.partition();
        let Some(&end) = ends.get(&p) else { continue };
        if let Ok(event) = EventEnvelope::decode(msg.payload().unwrap_or_default()) {
            if Uuid::parse_str(&event.event_id).ok() == Some(event_id) {
                let pos = SourcePosition {
                    topic: topic.to_string(),
                    partition: p,
                    offset: msg.offset(),
                };
                return Ok(Some((event, pos)));
            }
        }
        let past_window = msg.timestamp().to_millis().is_some_and(|t| t > stop_ms);
        if msg.offset() + 1 >= end || past_window {
            ends.remove(&p);
            let mut done = TopicPartitionList::new();
            done.add_partition(topic, p);
            let _ = consumer.pause(&done);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v7_timestamps_are_read_and_other_versions_refused() {
        let before = now_ms();
        let id = Uuid::now_v7();
        let ms = v7_millis(id).unwrap();
        assert!((before..=now_ms()).contains(&ms));
        assert_eq!(v7_millis(Uuid::new_v4()), None);
    }
}
