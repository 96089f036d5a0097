//! The outbox-relay: ships committed outbox rows from PostgreSQL into Kafka.
//!
//! Rows are claimed per shard, oldest first, with `FOR UPDATE SKIP LOCKED` in a transaction;
//! produced (idempotent producer) keyed by tenant and aggregate; and deleted in the same
//! transaction only after Kafka acknowledged every one of them (invariant 1). A shard has one
//! owner at a time (a session-level advisory lock held on the connection that runs the
//! claims), so an aggregate's events reach Kafka in commit order even with several relays.
//! Rows that can never be shipped move to `hookstream.outbox_quarantine` with a reason
//! instead of blocking their shard (invariant 5). Every payload is sealed with its tenant's (or
//! subject's) data key before it is produced, and the message store's copy is sealed in the
//! same transaction (`hookstream_store::payload_keys`): from here on, no copy is in clear.

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
mod config;
mod maintenance;
mod metrics;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hookstream_kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use hookstream_kafka::rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use hookstream_proto::{EventEnvelope, Message as _};
use hookstream_store::messages::{self, SealedCopy};
use hookstream_store::outbox::{self, OutboxRow};
use hookstream_store::payload_keys::{self, DataKey, KeyScope};
use hookstream_store::sealing::Sealer;
use hookstream_store::sqlx::postgres::PgConnection;
use hookstream_store::sqlx::{self, Connection, PgPool};
use hookstream_store::wakeup::Wakeup;
use hookstream_store::{answered, StoreError};
use hookstream_telemetry::prometheus::Registry;
use hookstream_telemetry::{Health, ServiceError, Supervisor};
use tokio_util::sync::CancellationToken;

pub use config::{Config, RelaySettings};
pub use metrics::RelayMetrics;

/// Namespace (first key) of the shard advisory locks.
const SHARD_LOCK_NAMESPACE: i32 = 0x486b_5374; // "HkSt"
/// Every live relay holds this advisory lock (shared); their number sets the fair share.
const MEMBERS_LOCK_NAMESPACE: i32 = 0x486b_5375;
/// How long releasing the shards at shutdown may wait for the server.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("kafka error: {0}")]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    TaskFailed(#[from] hookstream_telemetry::TaskFailed),
    #[error(transparent)]
    KafkaUnusable(#[from] hookstream_kafka::ProbeError),
    #[error(transparent)]
    Topic(#[from] hookstream_kafka::TopicError),
    #[error("configuration: {0}")]
    Config(String),
}

impl ServiceError for RelayError {
    fn exit_code(&self) -> u8 {
        match self {
            // Wrong credentials or certificates: an operator must fix them.
            RelayError::KafkaUnusable(e) if e.is_configuration() => 2,
            // A missing or refused events topic.
            RelayError::Topic(e) if e.is_configuration() => 2,
            RelayError::Config(_) => 2,
            _ => 1,
        }
    }
}

/// Runs the relay until `shutdown` is cancelled (or one of its tasks fails); then finishes
/// the batch in flight, releases its shards and returns.
pub async fn run(
    cfg: Config,
    registry: &Registry,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), RelayError> {
    let sealer = Arc::new(Sealer::from_config(&cfg.secrets).map_err(|e| RelayError::Config(e.to_string()))?);
    // Wrong credentials or an unreachable cluster stop the start here, saying which.
    if !hookstream_kafka::probe_at_start(&cfg.kafka, &shutdown).await? {
        return Ok(()); // asked to stop while waiting for Kafka
    }
    // Else every batch would wait out the produce timeout and be shipped again, for ever.
    hookstream_kafka::topics::check_exist(&cfg.kafka, std::slice::from_ref(&cfg.kafka.topics.events)).await?;
    let metrics = RelayMetrics::register(registry);
    let pool = hookstream_store::connect(&cfg.database).await?;
    if cfg.database.migrate_on_start {
        hookstream_store::migrate(&pool).await?;
    }
    let producer: FutureProducer =
        hookstream_kafka::producer_config(&cfg.kafka, Duration::from_millis(cfg.relay.produce_timeout_ms))
            .create()?;
    let mut supervisor = Supervisor::new(
        health.clone(),
        shutdown.clone(),
        Duration::from_millis(cfg.relay.produce_timeout_ms) + Duration::from_secs(10),
    );
    supervisor.spawn(
        "backlog watcher",
        maintenance::watch_backlog(pool.clone(), metrics.clone(), shutdown.clone()),
    );
    supervisor.spawn(
        "idempotency key pruner",
        maintenance::prune_idempotency_keys(pool.clone(), cfg.relay.clone(), shutdown.clone()),
    );
    let relay = Relay {
        loss: hookstream_kafka::TopicLoss::new(&cfg.kafka),
        cfg,
        pool,
        producer,
        sealer,
        metrics,
        shutdown: shutdown.clone(),
        owner: None,
        shards: vec![],
    };
    let ready = health.clone();
    supervisor.spawn("relay", async move {
        ready.set_ready(true);
        let mut relay = relay;
        let result = relay.run_loop().await;
        ready.set_ready(false);
        relay.release().await;
        // Flush whatever the producer still holds (only acknowledged rows were deleted
        // anyway); flushing blocks, so off the runtime's worker threads.
        let producer = relay.producer.clone();
        let _ = tokio::task::spawn_blocking(move || producer.flush(Duration::from_secs(5))).await;
        result
    });
    supervisor.wait().await?;
    Ok(())
}

struct Relay {
    cfg: Config,
    pool: PgPool,
    producer: FutureProducer,
    /// Opens and seals the payloads' data keys.
    sealer: Arc<Sealer>,
    metrics: RelayMetrics,
    shutdown: CancellationToken,
    /// The connection that holds the shard locks and runs every claim transaction.
    owner: Option<PgConnection>,
    shards: Vec<i32>,
    /// Whether the events topic was lost while running (`hookstream_kafka::lost`).
    loss: hookstream_kafka::TopicLoss,
}

/// What one batch did.
struct BatchResult {
    claimed: usize,
}

impl Relay {
    async fn run_loop(&mut self) -> Result<(), RelayError> {
        let mut wakeup = Wakeup::new(self.pool.clone(), outbox::NOTIFY_CHANNEL);
        let mut backoff = Backoff::new(Duration::from_millis(self.cfg.relay.max_backoff_ms));
        let mut last_rebalance = Instant::now() - Duration::from_secs(3600);
        let rebalance_every = Duration::from_millis(self.cfg.relay.rebalance_interval_ms);
        let poll = Duration::from_millis(self.cfg.relay.poll_interval_ms);
        while !self.shutdown.is_cancelled() {
            if self.owner.is_none() || last_rebalance.elapsed() >= rebalance_every {
                last_rebalance = Instant::now();
                if let Err(e) = self.rebalance().await {
                    tracing::warn!(error = %e, "cannot reach postgresql to own shards, retrying");
                    self.owner = None;
                    self.shards.clear();
                    self.metrics.shards_owned.set(0);
                    self.sleep(backoff.next()).await;
                    continue;
                }
            }
            let result = if self.shards.is_empty() {
                Ok(BatchResult { claimed: 0 })
            } else {
                self.ship_batch().await
            };
            match result {
                Ok(batch) => {
                    backoff.reset();
                    if batch.claimed as i64 >= self.cfg.relay.batch_size {
                        continue; // more is waiting: no pause under load
                    }
                }
                Err(e) => {
                    let delay = backoff.next();
                    tracing::warn!(error = %e, backoff_ms = delay.as_millis() as u64, "batch failed, rows stay in the outbox");
                    if matches!(e, RelayError::Kafka(_)) {
                        // Rows would be claimed and timed out for ever if the topic is gone.
                        tokio::select! {
                            lost = self.loss.after_failure(&self.cfg.kafka.topics.events) => { lost?; }
                            _ = self.shutdown.cancelled() => {}
                        }
                    }
                    if matches!(e, RelayError::Database(_) | RelayError::Store(_)) {
                        // The connection may be broken; its locks are gone with it then.
                        self.owner = None;
                        self.shards.clear();
                        self.metrics.shards_owned.set(0);
                        wakeup.reset();
                    }
                    self.sleep(delay).await;
                    continue;
                }
            }
            // Idle: wait for a commit notification, the fallback poll, or shutdown.
            tokio::select! {
                _ = wakeup.wait(poll) => {}
                _ = self.shutdown.cancelled() => {}
            }
        }
        Ok(())
    }

    async fn sleep(&self, d: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = self.shutdown.cancelled() => {}
        }
    }

    /// Joins the relay group if needed and moves towards a fair share of the shards:
    /// `ceil(shards / live relays)`. Membership is a shared advisory lock per relay, counted
    /// in `pg_locks`, so a relay that dies leaves the count (and its shards) the moment its
    /// connection closes. Extra shards are released between batches, never during one.
    async fn rebalance(&mut self) -> Result<(), RelayError> {
        let deadline = self.cfg.database.answer_deadline();
        if self.owner.is_none() {
            let options = hookstream_store::connect_options(&self.cfg.database)?;
            let mut conn = answered(deadline, PgConnection::connect_with(&options)).await?;
            answered(
                deadline,
                sqlx::query("SELECT pg_advisory_lock_shared($1, 0)")
                    .bind(MEMBERS_LOCK_NAMESPACE)
                    .execute(&mut conn),
            )
            .await?;
            self.owner = Some(conn);
            self.shards.clear();
        }
        let conn = self.owner.as_mut().expect("owner connection");
        let (count, members): (i32, i64) = answered(
            deadline,
            sqlx::query_as(
                "SELECT hookstream.shard_count(),
                    (SELECT count(*) FROM pg_locks
                      WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND objid = 0
                        AND classid = $1::integer::oid
                        AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))",
            )
            .bind(MEMBERS_LOCK_NAMESPACE)
            .fetch_one(&mut *conn),
        )
        .await?;
        let target = fair_share(count, members);
        while self.shards.len() > target {
            let shard = self.shards.pop().expect("non-empty");
            answered(
                deadline,
                sqlx::query("SELECT pg_advisory_unlock($1, $2)")
                    .bind(SHARD_LOCK_NAMESPACE)
                    .bind(shard)
                    .execute(&mut *conn),
            )
            .await?;
            tracing::info!(shard, members, "shard released to another relay");
        }
        for shard in 0..count {
            if self.shards.len() >= target {
                break;
            }
            if self.shards.contains(&shard) {
                continue;
            }
            let got: bool = answered(
                deadline,
                sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
                    .bind(SHARD_LOCK_NAMESPACE)
                    .bind(shard)
                    .fetch_one(&mut *conn),
            )
            .await?;
            if got {
                tracing::info!(shard, members, "shard acquired");
                self.shards.push(shard);
            }
        }
        self.shards.sort_unstable();
        self.metrics.shards_owned.set(self.shards.len() as i64);
        Ok(())
    }

    async fn release(&mut self) {
        if let Some(mut conn) = self.owner.take() {
            // Best effort: the locks go with the connection anyway, and a server gone dark
            // must not hold the shutdown.
            let unlocked = answered(
                RELEASE_WAIT,
                sqlx::query("SELECT pg_advisory_unlock_all()").execute(&mut conn),
            )
            .await;
            if unlocked.is_ok() {
                let _ = answered(RELEASE_WAIT, conn.close()).await;
            }
            tracing::info!(shards = self.shards.len(), "shards released");
        }
        self.shards.clear();
        self.metrics.shards_owned.set(0);
    }

    async fn ship_batch(&mut self) -> Result<BatchResult, RelayError> {
        let started = Instant::now();
        let topic = self.cfg.kafka.topics.events.clone();
        let max_bytes = self.cfg.relay.max_record_bytes;
        let deadline = self.cfg.database.answer_deadline();
        let conn = self.owner.as_mut().expect("owner connection");
        let mut tx = answered(deadline, conn.begin()).await?;
        let rows = answered(
            deadline,
            outbox::claim(&mut tx, &self.shards, self.cfg.relay.batch_size),
        )
        .await?;
        if rows.is_empty() {
            answered(deadline, tx.commit()).await?;
            return Ok(BatchResult { claimed: 0 });
        }
        let keys = if self.cfg.relay.seal_payloads {
            let mut scopes: Vec<KeyScope> = rows
                .iter()
                .filter(|r| unshippable(r).is_none())
                .map(key_scope)
                .collect();
            scopes.sort_unstable();
            scopes.dedup();
            answered(
                deadline,
                payload_keys::sealing_keys(&mut tx, &self.pool, &self.sealer, &scopes),
            )
            .await?
        } else {
            HashMap::new()
        };
        let mut quarantined: Vec<(i64, String)> = Vec::new();
        let mut pending: Vec<(i64, DeliveryFuture)> = Vec::with_capacity(rows.len());
        let mut copies: HashMap<i64, SealedCopy> = HashMap::new();
        let relayed_at_ms = chrono::Utc::now().timestamp_millis();
        for row in &rows {
            if let Some(reason) = unshippable(row) {
                quarantined.push((row.id, reason));
                continue;
            }
            // The scope once per row: with a subject it is a SHA-256.
            let key = if keys.is_empty() {
                None
            } else {
                keys.get(&key_scope(row))
            };
            let event = envelope(row, relayed_at_ms, key);
            if let (true, Some(key)) = (row.stored, key) {
                copies.insert(
                    row.id,
                    SealedCopy {
                        tenant: row.tenant_id,
                        event: row.event_id,
                        key: key.id,
                        sealed: event.payload.to_vec(),
                    },
                );
            }
            let record = event.encode_to_vec();
            if record.len() > max_bytes {
                quarantined.push((
                    row.id,
                    format!(
                        "record of {} bytes exceeds the {max_bytes}-byte limit",
                        record.len()
                    ),
                ));
                continue;
            }
            let key = kafka_key(row);
            // Enqueue strictly in id order; per-partition order then holds end to end.
            let future = loop {
                match self
                    .producer
                    .send_result(FutureRecord::to(&topic).key(&key).payload(&record))
                {
                    Ok(f) => break Some(f),
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    // Refused before sending (`message.max.bytes`): never sendable, and failing
                    // the batch would claim it first again for good.
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), _)) => {
                        break None
                    }
                    Err((e, _)) => return Err(e.into()),
                }
            };
            match future {
                Some(future) => pending.push((row.id, future)),
                None => quarantined.push((
                    row.id,
                    format!(
                        "record of {} bytes is larger than the producer sends (message.max.bytes)",
                        record.len()
                    ),
                )),
            }
        }
        let mut shipped = Vec::with_capacity(pending.len());
        let mut failure: Option<KafkaError> = None;
        for (id, future) in pending {
            match future.await {
                Ok(Ok(_)) => shipped.push(id),
                Ok(Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), _))) => {
                    quarantined.push((id, "record too large for the events topic".into()));
                }
                Ok(Err((e, _))) => {
                    failure.get_or_insert(e);
                }
                Err(_canceled) => {
                    failure.get_or_insert(KafkaError::Canceled);
                }
            }
        }
        let acked_at = chrono::Utc::now();
        if let Some(e) = failure {
            // Nothing is deleted: rows stay and are shipped again (acknowledged ones twice).
            self.metrics.produce_errors.inc();
            answered(deadline, tx.rollback()).await?;
            return Err(e.into());
        }
        let sealed: Vec<SealedCopy> = shipped.iter().filter_map(|id| copies.remove(id)).collect();
        answered(deadline, messages::seal_copies(&mut tx, &sealed)).await?;
        answered(deadline, outbox::finish(&mut tx, &shipped, &quarantined)).await?;
        answered(deadline, tx.commit()).await?;
        for (id, reason) in &quarantined {
            tracing::warn!(outbox_id = id, reason = %reason, "outbox row quarantined");
        }
        // `shipped` is in id order, like `rows`.
        let now = acked_at;
        for row in rows.iter().filter(|r| shipped.binary_search(&r.id).is_ok()) {
            let age = (now - row.created_at).num_microseconds().unwrap_or(0).max(0) as f64 / 1e6;
            self.metrics.commit_to_ack.observe(age);
        }
        self.metrics
            .record_batch(rows.len(), shipped.len(), quarantined.len(), started.elapsed());
        Ok(BatchResult { claimed: rows.len() })
    }
}

/// Shards one relay should own: every shard is owned while the targets add up to at least
/// the shard count.
fn fair_share(shards: i32, members: i64) -> usize {
    let members = members.max(1);
    ((shards as i64 + members - 1) / members) as usize
}

/// Why a row can never be shipped, if it cannot.
fn unshippable(row: &OutboxRow) -> Option<String> {
    if !row.tenant_known {
        return Some(format!("unknown tenant {}", row.tenant_id));
    }
    if !row.payload_is_object {
        return Some("payload is not a JSON object".into());
    }
    if row.event_type.is_empty() {
        return Some("empty event type".into());
    }
    None
}

/// Events of one aggregate share a key, hence a partition, hence an order.
fn kafka_key(row: &OutboxRow) -> String {
    if row.aggregate_id.is_empty() {
        format!("{}/{}", row.tenant_id, row.event_id)
    } else {
        format!("{}/{}", row.tenant_id, row.aggregate_id)
    }
}

/// The data key a row's payload is sealed with: its tenant's, its subject's if it names one,
/// of the day it is due (retention erases whole days).
fn key_scope(row: &OutboxRow) -> KeyScope {
    (
        row.tenant_id,
        row.subject.as_deref().map(payload_keys::subject_digest),
        row.deliver_at.unwrap_or(row.created_at).date_naive(),
    )
}

/// The record shipped for `row`, its payload sealed with `key` (in clear without one: sealing
/// switched off).
fn envelope(row: &OutboxRow, relayed_at_ms: i64, key: Option<&DataKey>) -> EventEnvelope {
    let headers = match &row.headers {
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()),
                )
            })
            .collect(),
        _ => Default::default(),
    };
    let (event_id, tenant_id) = (row.event_id.to_string(), row.tenant_id.to_string());
    let (payload, payload_key) = match key {
        Some(k) => (
            k.seal(&event_id, &tenant_id, row.payload.as_bytes()),
            k.id.to_string(),
        ),
        None => (row.payload.clone().into_bytes(), String::new()),
    };
    EventEnvelope {
        event_id,
        tenant_id,
        event_type: row.event_type.clone(),
        aggregate_type: row.aggregate_type.clone(),
        aggregate_id: row.aggregate_id.clone(),
        payload: payload.into(),
        payload_key,
        headers,
        created_at_ms: row.created_at.timestamp_millis(),
        outbox_id: row.id,
        subscription_version: row.subscription_version,
        relayed_at_ms,
        channels: row.channels.clone(),
        deliver_at_ms: row.deliver_at.map_or(0, |t| t.timestamp_millis()),
    }
}

/// Exponential backoff from 100 ms to a ceiling.
struct Backoff {
    current: Duration,
    max: Duration,
}

impl Backoff {
    fn new(max: Duration) -> Self {
        Self {
            current: Duration::ZERO,
            max,
        }
    }
    fn next(&mut self) -> Duration {
        self.current = (self.current * 2).clamp(Duration::from_millis(100), self.max);
        self.current
    }
    fn reset(&mut self) {
        self.current = Duration::ZERO;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_share_covers_every_shard() {
        assert_eq!(fair_share(16, 1), 16);
        assert_eq!(fair_share(16, 2), 8);
        assert_eq!(fair_share(16, 3), 6);
        assert_eq!(fair_share(16, 0), 16);
        for members in 1..40 {
            assert!(fair_share(16, members) * members as usize >= 16);
        }
    }

    #[test]
    fn backoff_doubles_to_its_ceiling_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(500));
        assert_eq!(b.next(), Duration::from_millis(100));
        assert_eq!(b.next(), Duration::from_millis(200));
        assert_eq!(b.next(), Duration::from_millis(400));
        assert_eq!(b.next(), Duration::from_millis(500));
        b.reset();
        assert_eq!(b.next(), Duration::from_millis(100));
    }
}
