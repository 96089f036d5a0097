//! The DLQ sink: consumes the DLQ topic in its own consumer group and stores every record in
//! PostgreSQL (`hookstream.dead_letters`), where `hookstream dlq …` lists, shows and replays
//! them. It runs inside each dispatcher process that has the `dlq_sink` role (the group
//! shares the partitions).
//!
//! Rows are written in batches (`hookstream_store::batch`: whatever gathered while the last
//! batch was written goes in one statement and one commit), so the sink stores thousands of
//! dead letters per second, not the few hundred of a commit per row. A record's offset is
//! stored only after the batch holding its row is committed (invariant 1); while the
//! database is down the sink keeps retrying with backoff and never skips a record (at most
//! `MAX_IN_FLIGHT` records wait at once; then its partitions wait in Kafka). Records that are
//! not valid dead letters are stored too, as class `decode` with their raw bytes; nothing on
//! this topic stops the sink (invariant 5). A row is keyed by the record's position, so a
//! record read twice after a crash is stored once, and by its decision (the record the
//! dispatcher handled, and the endpoint), so a dead letter a dispatcher produced twice, having
//! handled the same record again after a crash, is stored once too. Rows older than `retention_days` are
//! deleted every `prune_interval_ms`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use hookstream_config::{ConfigError, Validate};
use hookstream_kafka::{Done, Fatal, Handler, Record, Start};
use hookstream_proto::{DeadLetter, Message as _};
use hookstream_store::batch::Batcher;
use hookstream_store::dead_letters::{self, NewDeadLetter, Position};
use hookstream_store::sqlx::PgPool;
use hookstream_store::{answered, StoreError};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::sink::{self, OnRefused, Stored};
use crate::DispatcherMetrics;

/// Records being stored at once (each holds its event: up to the largest event a producer
/// may enqueue).
pub(crate) const MAX_IN_FLIGHT: usize = 512;
/// Rows written in one statement.
pub(crate) const BATCH_ROWS: usize = 256;
/// Most of a last response kept in the table.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// The `[dlq]` section of the dispatcher's configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct DlqConfig {
    /// Store every DLQ record in PostgreSQL (`hookstream.dead_letters`). Turn it off only
    /// where another process does it: without it `hookstream dlq` sees nothing new.
    pub sink_enabled: bool,
    /// Consumer group of the sink on the DLQ topic.
    pub sink_group_id: String,
    /// Dead letters older than this (by `dead_at`) are deleted; 0 keeps them for ever.
    pub retention_days: u32,
    /// How often the sink looks for dead letters past their retention.
    pub prune_interval_ms: u64,
}

impl Default for DlqConfig {
    fn default() -> Self {
        Self {
            sink_enabled: true,
            sink_group_id: hookstream_config::DEFAULT_DLQ_SINK_GROUP.into(),
            retention_days: 90,
            prune_interval_ms: 3_600_000,
        }
    }
}

impl Validate for DlqConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.sink_group_id.trim().is_empty() {
            return Err(ConfigError::new("dlq.sink_group_id must not be empty"));
        }
        if self.prune_interval_ms == 0 {
            return Err(ConfigError::new("dlq.prune_interval_ms must be at least 1"));
        }
        Ok(())
    }
}

/// Rows deleted per statement while pruning (short transactions, no long locks).
const PRUNE_BATCH: i64 = 1_000;

/// Deletes dead letters past `retention_days` every `prune_interval_ms` until `shutdown`.
pub(crate) async fn prune_loop(
    pool: PgPool,
    cfg: DlqConfig,
    metrics: DispatcherMetrics,
    shutdown: CancellationToken,
) -> Result<(), StoreError> {
    if cfg.retention_days == 0 {
        shutdown.cancelled().await;
        return Ok(());
    }
    let keep = chrono::Duration::days(i64::from(cfg.retention_days));
    let mut every = tokio::time::interval(Duration::from_millis(cfg.prune_interval_ms.max(1_000)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.cancelled() => return Ok(()),
        }
        let before = Utc::now() - keep;
        loop {
            match dead_letters::prune(&pool, before, PRUNE_BATCH).await {
                Ok(n) => {
                    metrics.dlq_pruned.inc_by(n);
                    if n > 0 {
                        tracing::info!(
                            deleted = n,
                            retention_days = cfg.retention_days,
                            "dead letters past retention deleted"
                        );
                    }
                    if n < PRUNE_BATCH as u64 || shutdown.is_cancelled() {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot prune dead letters, trying at the next interval");
                    break;
                }
            }
        }
    }
}

/// Writes dead letters in batches: the sink submits rows to it, one writer stores them.
pub(crate) type DeadLetterWriter = Batcher<NewDeadLetter, Option<i64>>;

/// The writer of the sink's rows, and the task that writes them (it ends when the sink, the
/// last holder of the handle, is dropped). A write the database does not answer within
/// `deadline` (`DatabaseConfig::answer_deadline`) fails like any other, and is retried: the
/// one writer must not wait for ever on a server gone dark, every dead letter behind it.
pub(crate) fn writer(
    pool: PgPool,
    deadline: Duration,
) -> (DeadLetterWriter, impl std::future::Future<Output = ()> + Send) {
    Batcher::new(BATCH_ROWS, move |rows: Vec<NewDeadLetter>| {
        let pool = pool.clone();
        async move {
            let result = answered(deadline, dead_letters::insert_many(&pool, &rows)).await;
            (rows, result)
        }
    })
}

/// The sink: a handler for the tracked consumer of the DLQ topic.
pub(crate) struct DlqSink {
    pub(crate) writer: DeadLetterWriter,
    pub(crate) metrics: DispatcherMetrics,
    pub(crate) shutdown: CancellationToken,
}

pub(crate) struct SinkWork {
    row: NewDeadLetter,
    payload: Bytes,
}

impl Handler for DlqSink {
    type Work = SinkWork;

    fn prepare(&self, record: Record) -> Start<SinkWork> {
        let source = Position {
            topic: record.topic,
            partition: record.partition,
            offset: record.offset,
        };
        let row = to_row(&record.payload, source, record.timestamp_ms);
        Start::Now(SinkWork {
            row,
            payload: record.payload,
        })
    }

    async fn run(self: Arc<Self>, work: SinkWork) -> Result<Done, Fatal> {
        store(
            &self.writer,
            &self.metrics,
            work.row,
            &work.payload,
            &self.shutdown,
        )
        .await
    }
}

/// Stores one row, retrying with backoff until it is committed (`sink::store`). A row whose
/// values the database refuses is stored as poison, with all the record's bytes.
async fn store(
    writer: &DeadLetterWriter,
    metrics: &DispatcherMetrics,
    row: NewDeadLetter,
    payload: &[u8],
    shutdown: &CancellationToken,
) -> Result<Done, Fatal> {
    let stored = sink::store(
        writer,
        row,
        "dead letter",
        &metrics.dlq_store_errors,
        shutdown,
        |why, row| {
            if row.raw.as_deref() == Some(payload) {
                // Already the raw bytes: keep trying (it is the database that is wrong).
                return OnRefused::Retry(row);
            }
            tracing::warn!(error = %why, topic = %row.source.topic, partition = row.source.partition,
            offset = row.source.offset, "dead letter refused by the database, storing it as raw bytes");
            OnRefused::Replace(poison(
                payload,
                row.source,
                format!("dead-letter record could not be stored as is: {why}"),
                row.dead_at,
            ))
        },
    )
    .await?;
    if let Stored::Row(id) = &stored {
        let result = if id.is_some() { "stored" } else { "duplicate" };
        metrics.dlq_stored.with_label_values(&[result]).inc();
    }
    Ok(stored.done())
}

fn time(ms: i64) -> Option<DateTime<Utc>> {
    (ms > 0).then(|| DateTime::from_timestamp_millis(ms)).flatten()
}

fn position(p: &hookstream_proto::SourcePosition) -> Position {
    Position {
        topic: p.topic.clone(),
        partition: p.partition,
        offset: p.offset,
    }
}

fn parse_id(text: &str) -> Option<Uuid> {
    Uuid::parse_str(text).ok()
}

/// A record that is not a usable dead letter: kept whole, class `decode`.
fn poison(payload: &[u8], source: Position, reason: String, dead_at: DateTime<Utc>) -> NewDeadLetter {
    NewDeadLetter {
        tenant_id: None,
        endpoint_id: None,
        event_id: None,
        event_type: String::new(),
        reason,
        error_class: "decode".into(),
        last_status: 0,
        attempts: 0,
        first_attempt_at: None,
        dead_at,
        source,
        origin: None,
        handled: None,
        event: None,
        raw: Some(payload.to_vec()),
        last_response: None,
    }
}

/// The row for one DLQ record. Never fails: what cannot be decoded is stored as poison.
pub(crate) fn to_row(payload: &[u8], source: Position, record_timestamp_ms: Option<i64>) -> NewDeadLetter {
    let received_at = record_timestamp_ms.and_then(time).unwrap_or_else(Utc::now);
    let letter = match DeadLetter::decode(payload) {
        Ok(l) => l,
        Err(e) => {
            return poison(
                payload,
                source,
                format!("undecodable dead-letter record: {e}"),
                received_at,
            )
        }
    };
    if letter.event.is_none()
        && letter.reason.is_empty()
        && letter.error_class.is_empty()
        && letter.raw.is_empty()
    {
        return poison(
            payload,
            source,
            "dead-letter record without an event, a reason or raw bytes".into(),
            received_at,
        );
    }
    let event = letter.event.as_ref();
    let tenant = if letter.tenant_id.is_empty() {
        event.map(|e| e.tenant_id.as_str()).unwrap_or_default()
    } else {
        letter.tenant_id.as_str()
    };
    NewDeadLetter {
        tenant_id: parse_id(tenant),
        endpoint_id: parse_id(&letter.endpoint_id),
        event_id: event.and_then(|e| parse_id(&e.event_id)),
        event_type: event.map(|e| e.event_type.clone()).unwrap_or_default(),
        reason: if letter.reason.is_empty() {
            "(no reason given)".into()
        } else {
            letter.reason.clone()
        },
        error_class: if letter.error_class.is_empty() {
            "other".into()
        } else {
            letter.error_class.clone()
        },
        last_status: letter.last_status,
        attempts: i32::try_from(letter.attempts).unwrap_or(i32::MAX),
        first_attempt_at: time(letter.first_attempt_at_ms),
        dead_at: time(letter.dead_at_ms).unwrap_or(received_at),
        source,
        origin: letter.origin.as_ref().map(position),
        handled: letter.handled.as_ref().map(position),
        event: event.map(|e| e.encode_to_vec()),
        raw: (!letter.raw.is_empty()).then(|| letter.raw.to_vec()),
        last_response: (!letter.last_response.is_empty())
            .then(|| letter.last_response[..letter.last_response.len().min(MAX_RESPONSE_BYTES)].to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookstream_proto::EventEnvelope;

    fn source() -> Position {
        Position {
            topic: "dlq".into(),
            partition: 1,
            offset: 7,
        }
    }

    #[test]
    fn garbage_becomes_a_decode_row_with_the_bytes() {
        let row = to_row(b"\xff\xff\xff", source(), Some(1_700_000_000_000));
        assert_eq!(row.error_class, "decode");
        assert_eq!(row.raw.as_deref(), Some(&b"\xff\xff\xff"[..]));
        assert!(
            row.reason.starts_with("undecodable dead-letter record"),
            "{}",
            row.reason
        );
        assert_eq!(row.dead_at.timestamp_millis(), 1_700_000_000_000);
        assert_eq!(row.source, source());
    }

    #[test]
    fn an_empty_record_is_poison_too() {
        let row = to_row(b"", source(), None);
        assert_eq!(row.error_class, "decode");
        assert_eq!(row.raw.as_deref(), Some(&b""[..]));
    }

    #[test]
    fn a_dead_letter_keeps_its_fields_and_tolerates_bad_ids() {
        let tenant = Uuid::now_v7();
        let event = EventEnvelope {
            event_id: Uuid::now_v7().to_string(),
            tenant_id: tenant.to_string(),
            event_type: "order.created".into(),
            payload: Bytes::from_static(b"{}"),
            ..Default::default()
        };
        let letter = DeadLetter {
            event: Some(event.clone()),
            endpoint_id: "not-a-uuid".into(),
            reason: "gave up".into(),
            error_class: "http_5xx".into(),
            last_status: 503,
            attempts: 8,
            first_attempt_at_ms: 1_000,
            dead_at_ms: 2_000,
            origin: Some(hookstream_proto::SourcePosition {
                topic: "events".into(),
                partition: 2,
                offset: 40,
            }),
            handled: Some(hookstream_proto::SourcePosition {
                topic: "retry.30s".into(),
                partition: 1,
                offset: 7,
            }),
            ..Default::default()
        };
        let row = to_row(&letter.encode_to_vec(), source(), None);
        assert_eq!(
            row.origin.as_ref().map(|o| (o.topic.as_str(), o.offset)),
            Some(("events", 40))
        );
        assert_eq!(
            row.handled,
            Some(Position {
                topic: "retry.30s".into(),
                partition: 1,
                offset: 7
            }),
            "the decision's record, which the sink stores once"
        );
        assert_eq!(
            row.tenant_id,
            Some(tenant),
            "the tenant comes from the event when unset"
        );
        assert_eq!(row.endpoint_id, None);
        assert_eq!(row.event_type, "order.created");
        assert_eq!((row.last_status, row.attempts), (503, 8));
        assert_eq!(row.dead_at.timestamp_millis(), 2_000);
        assert_eq!(row.event, Some(event.encode_to_vec()));
        assert_eq!(row.raw, None);
    }
}
