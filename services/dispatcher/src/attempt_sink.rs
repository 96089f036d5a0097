//! The attempt sink: consumes the attempts topic in its own consumer group and stores every
//! attempt record in PostgreSQL (`hookstream.attempts`, partitioned by day), where
//! `hookstream attempts`, `event show` and `endpoint stats` read it. It runs inside each
//! dispatcher process with the `attempt_sink` role (the group shares the partitions).
//!
//! Why in the dispatcher and not a service of its own: it is the same mechanism as the DLQ
//! sink (a tracked consumer handing rows to a batch writer, `sink.rs`), it needs the same
//! configuration, and a deployment that wants it apart runs a dispatcher with only this role
//! (the Helm chart runs it beside the retry role and the DLQ sink, never in the replicas
//! scaled on lag). Delivery never waits for it: the attempt log is produced without waiting
//! and the sink merely lags (its lag is exported like every group's) and catches up. Nor does
//! it take CPU from delivery in the same process: it runs on a thread of its own with its own
//! runtime and database pool, `sink_niceness` (19) below the process's CPU priority, with the
//! librdkafka threads of its consumer. On an idle machine that costs nothing; when delivery
//! needs every core (a backlog drain), the sink stores less until the burst is over. Its
//! niceness does not reach the PostgreSQL backend it writes through, so while the delivery
//! runtime's workers are busy (`pressure.rs`, `sink_hold_busy_percent`) the sink also holds
//! what it read, for at most `sink_hold_max_ms`, and writes it once the drain is over.
//!
//! A record is one `AttemptRecord` (what dispatchers produce) or an `AttemptBatch` (header
//! `hookstream-batch: attempts`, read so that a batching producer can be switched on without a
//! reader change); it is finished when all its rows are stored. Rows are
//! written in batches, their day partitions created first; while PostgreSQL is down
//! the sink waits and skips nothing; a record read twice after a crash is stored once (the
//! row's key). A record that does not decode, or whose row the database refuses, is counted
//! and logged, and skipped: the delivery it describes happened, and one bad record must not
//! stop the log. Day partitions older than `retention_days` are dropped every hour.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use hookstream_config::{ConfigError, DatabaseConfig, KafkaConfig, Validate};
use hookstream_kafka::{ConsumerMetrics, ConsumerSettings, Done, Fatal, Handler, Record, Start};
use hookstream_proto::{AttemptBatch, AttemptRecord, Message as _, BATCH_HEADER, BATCH_OF_ATTEMPTS};
use hookstream_store::attempts::{self, NewAttempt};
use hookstream_store::batch::Batcher;
use hookstream_store::sqlx::PgPool;
use hookstream_store::{answered, StoreError};
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Mutex};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::attempt_log::LogMode;
use crate::sink::{self, OnRefused, Stored};
use crate::DispatcherMetrics;

/// Records being stored at once (enough to keep the writer's 500-row statements full). Each
/// is one attempt today; a batching producer would make each up to 128, and this bound would
/// have to shrink with it.
pub(crate) const MAX_IN_FLIGHT: usize = 2_048;
/// Most database connections of the sink's own pool (one batch is written at a time).
const SINK_CONNECTIONS: u32 = 2;
/// Rows written in one statement.
const BATCH_ROWS: usize = 500;
/// How often old partitions are dropped and the next days' created.
const MAINTAIN_EVERY: Duration = Duration::from_secs(3_600);

/// The `[attempts]` section of the dispatcher's configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct AttemptsConfig {
    /// Which attempts are produced to the attempts topic: `all`, `failures` or `off`.
    pub log: LogMode,
    /// Store the attempts topic in PostgreSQL (`hookstream.attempts`).
    pub sink_enabled: bool,
    /// Consumer group of the sink on the attempts topic.
    pub sink_group_id: String,
    /// Days of attempts kept (whole day partitions are dropped); at least 1.
    pub retention_days: u32,
    /// Most of a response body stored per attempt (bytes; the rest is cut and the row says
    /// so). 0 stores none.
    pub max_body_bytes: usize,
    /// How much lower than the process's the sink's CPU priority is (nice +N, 0..=19): when
    /// delivery needs every core, the sink lags and catches up after.
    pub sink_niceness: i32,
    /// While the delivery runtime's workers are busy at least this share of the time
    /// (percent; 0 never), the sink holds what it has read instead of storing it: its
    /// database writes then wait for delivery to ease.
    pub sink_hold_busy_percent: u8,
    /// The longest a record is held that way (ms): the sink's lag stays bounded under
    /// pressure that does not ease.
    pub sink_hold_max_ms: u64,
}

impl Default for AttemptsConfig {
    fn default() -> Self {
        Self {
            log: LogMode::All,
            sink_enabled: true,
            sink_group_id: hookstream_config::DEFAULT_ATTEMPT_SINK_GROUP.into(),
            retention_days: 30,
            max_body_bytes: 4 * 1024,
            sink_niceness: 19,
            sink_hold_busy_percent: 50,
            sink_hold_max_ms: 30_000,
        }
    }
}

impl Validate for AttemptsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.sink_group_id.trim().is_empty() {
            return Err(ConfigError::new("attempts.sink_group_id must not be empty"));
        }
        if self.retention_days == 0 {
            return Err(ConfigError::new("attempts.retention_days must be at least 1"));
        }
        if self.max_body_bytes > 64 * 1024 {
            return Err(ConfigError::new("attempts.max_body_bytes must be at most 65536"));
        }
        if !(0..=19).contains(&self.sink_niceness) {
            return Err(ConfigError::new(
                "attempts.sink_niceness must be between 0 and 19",
            ));
        }
        if self.sink_hold_busy_percent > 100 {
            return Err(ConfigError::new(
                "attempts.sink_hold_busy_percent must be between 0 and 100",
            ));
        }
        Ok(())
    }
}

/// Writes attempts in batches.
pub(crate) type AttemptWriter = Batcher<NewAttempt, bool>;

/// What the sink runs with.
pub(crate) struct Setup {
    pub(crate) kafka: KafkaConfig,
    pub(crate) consumer: ConsumerSettings,
    pub(crate) database: DatabaseConfig,
    pub(crate) attempts: AttemptsConfig,
    pub(crate) metrics: DispatcherMetrics,
    pub(crate) consumer_metrics: ConsumerMetrics,
    /// Whether delivery is pressed (`pressure.rs`).
    pub(crate) pressed: watch::Receiver<bool>,
}

/// The sink until shutdown: its own database pool (its I/O runs on the sink's runtime), the
/// batch writer, the tracked consumer of the attempts topic, and the hourly partition upkeep.
pub(crate) async fn run(setup: Setup, shutdown: CancellationToken) -> Result<(), String> {
    let database = DatabaseConfig {
        max_connections: setup.database.max_connections.clamp(1, SINK_CONNECTIONS),
        ..setup.database
    };
    // Lazy: the service checked the database at start, and the writes retry while it is down.
    let pool = hookstream_store::connect_lazy(&database).map_err(|e| format!("database settings: {e}"))?;
    let (writer, write_rows) = writer(pool.clone(), database.answer_deadline());
    let writing = tokio::spawn(write_rows);
    let upkeep = tokio::spawn(maintain(
        pool,
        setup.attempts.clone(),
        setup.metrics.clone(),
        shutdown.clone(),
    ));
    let hold = (setup.attempts.sink_hold_busy_percent > 0).then(|| Hold {
        pressed: setup.pressed,
        max: Duration::from_millis(setup.attempts.sink_hold_max_ms),
    });
    let handler = Arc::new(AttemptSink {
        writer,
        hold,
        max_body_bytes: setup.attempts.max_body_bytes,
        metrics: setup.metrics,
        shutdown: shutdown.clone(),
    });
    let consumed = hookstream_kafka::consumer::run(
        &setup.kafka,
        setup.consumer,
        handler,
        setup.consumer_metrics,
        shutdown,
    )
    .await;
    upkeep.abort();
    // A consumer that failed is reported now: tasks it left behind may still hold a writer
    // handle while they wait out a database outage, and waiting for them would hide the
    // failure until the database is back. What they had not stored is read again after the
    // restart (offsets are stored only once rows are written).
    consumed.map_err(|e| e.to_string())?;
    // Stopped: the consumer has dropped the last writer handle, what it submitted is
    // written, then the writer ends.
    writing
        .await
        .map_err(|e| format!("the attempt writer failed: {e}"))
}

/// The writer of the sink's rows (it creates the day partitions a batch needs first), and the
/// task that writes them. A write not answered within `deadline` fails and is retried (see
/// `dlq_sink::writer`).
pub(crate) fn writer(
    pool: PgPool,
    deadline: Duration,
) -> (AttemptWriter, impl std::future::Future<Output = ()> + Send) {
    let known: Arc<Mutex<HashSet<NaiveDate>>> = Arc::default();
    Batcher::new(BATCH_ROWS, move |rows: Vec<NewAttempt>| {
        let (pool, known) = (pool.clone(), known.clone());
        async move {
            let result = answered(deadline, write(&pool, &known, &rows)).await;
            (rows, result)
        }
    })
}

async fn write(
    pool: &PgPool,
    known: &Mutex<HashSet<NaiveDate>>,
    rows: &[NewAttempt],
) -> Result<Vec<bool>, StoreError> {
    let mut known = known.lock().await;
    for day in attempts::days_of(rows) {
        if !known.contains(&day) {
            attempts::ensure_partition(pool, day).await?;
            known.insert(day);
        }
    }
    drop(known);
    attempts::insert_many(pool, rows).await
}

/// Drops partitions past retention and creates today's and the next two days' every hour.
pub(crate) async fn maintain(
    pool: PgPool,
    cfg: AttemptsConfig,
    metrics: DispatcherMetrics,
    shutdown: CancellationToken,
) -> Result<(), StoreError> {
    let mut every = tokio::time::interval(MAINTAIN_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.cancelled() => return Ok(()),
        }
        if let Err(e) = maintain_once(&pool, &cfg, &metrics, Utc::now().date_naive()).await {
            tracing::warn!(error = %e, "cannot maintain the attempt partitions, trying in an hour");
        }
    }
}

/// One round of partition upkeep as of `today` (UTC).
pub(crate) async fn maintain_once(
    pool: &PgPool,
    cfg: &AttemptsConfig,
    metrics: &DispatcherMetrics,
    today: NaiveDate,
) -> Result<(), StoreError> {
    for ahead in 0..3 {
        attempts::ensure_partition(pool, today + chrono::Days::new(ahead)).await?;
    }
    let before = today - chrono::Days::new(u64::from(cfg.retention_days));
    let dropped = attempts::drop_partitions_before(pool, before).await?;
    if !dropped.is_empty() {
        metrics.attempt_partitions_dropped.inc_by(dropped.len() as u64);
        tracing::info!(partitions = ?dropped, retention_days = cfg.retention_days, "attempt partitions past retention dropped");
    }
    Ok(())
}

/// The sink: a handler for the tracked consumer of the attempts topic.
pub(crate) struct AttemptSink {
    pub(crate) writer: AttemptWriter,
    /// Holds records while delivery is pressed (none: store at once).
    pub(crate) hold: Option<Hold>,
    pub(crate) max_body_bytes: usize,
    pub(crate) metrics: DispatcherMetrics,
    pub(crate) shutdown: CancellationToken,
}

impl AttemptSink {
    fn skipped(&self, record: &Record, why: &str) {
        self.metrics
            .attempt_sink_rows
            .with_label_values(&["undecodable"])
            .inc();
        tracing::warn!(topic = %record.topic, partition = record.partition, offset = record.offset,
            reason = %why, "attempt record skipped");
    }

    /// Stores one row until it is committed (or refused, or shutdown comes first).
    async fn store(&self, row: NewAttempt) -> Result<Done, Fatal> {
        let metrics = &self.metrics;
        let stored = sink::store(
            &self.writer,
            row,
            "attempt",
            &metrics.attempt_sink_errors,
            &self.shutdown,
            |why, row| {
                metrics.attempt_sink_rows.with_label_values(&["refused"]).inc();
                tracing::warn!(error = %why, event_id = %row.event_id, endpoint_id = %row.endpoint_id,
                    attempt = row.attempt, "attempt refused by the database, skipped");
                OnRefused::GiveUp
            },
        )
        .await?;
        if let Stored::Row(new) = &stored {
            let result = if *new { "stored" } else { "duplicate" };
            metrics.attempt_sink_rows.with_label_values(&[result]).inc();
        }
        Ok(stored.done())
    }
}

impl Handler for AttemptSink {
    /// The rows of the record's attempts (one, or a batch's).
    type Work = Vec<NewAttempt>;

    fn prepare(&self, record: Record) -> Start<Vec<NewAttempt>> {
        let records = match decode(&record) {
            Ok(records) => records,
            Err(why) => {
                self.skipped(&record, &why);
                return Start::Now(Vec::new());
            }
        };
        let mut rows = Vec::with_capacity(records.len());
        for r in records {
            match to_row(r, self.max_body_bytes) {
                Ok(row) => rows.push(row),
                // One bad attempt in a batch skips only itself.
                Err(why) => self.skipped(&record, &why),
            }
        }
        Start::Now(rows)
    }

    /// The record is finished once every row of it is stored (they share the writer's
    /// batches); unfinished if shutdown left any unstored.
    async fn run(self: Arc<Self>, rows: Vec<NewAttempt>) -> Result<Done, Fatal> {
        if let Some(hold) = &self.hold {
            hold.wait(&self.metrics, &self.shutdown).await;
        }
        let stored = futures::future::join_all(rows.into_iter().map(|row| self.store(row))).await;
        let mut done = Done::Finished;
        for d in stored {
            if d? == Done::Unfinished {
                done = Done::Unfinished;
            }
        }
        Ok(done)
    }
}

/// Storing waits while delivery is pressed, up to a bound.
pub(crate) struct Hold {
    pub(crate) pressed: watch::Receiver<bool>,
    pub(crate) max: Duration,
}

impl Hold {
    /// Returns once delivery is not pressed, `max` has passed, or shutdown began.
    async fn wait(&self, metrics: &DispatcherMetrics, shutdown: &CancellationToken) {
        if !*self.pressed.borrow() {
            return;
        }
        metrics.attempt_sink_held.inc();
        let mut pressed = self.pressed.clone();
        tokio::select! {
            // An error: the sampler is gone (shutdown); store.
            _ = pressed.wait_for(|p| !*p) => {}
            _ = tokio::time::sleep(self.max) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

fn time(ms: i64) -> Option<DateTime<Utc>> {
    (ms > 0).then(|| DateTime::from_timestamp_millis(ms)).flatten()
}

fn id(text: &str, what: &str) -> Result<Uuid, String> {
    Uuid::parse_str(text).map_err(|_| format!("{what} {text:?} is not a UUID"))
}

/// The attempt records a record of the attempts topic holds: an `AttemptBatch` when its
/// header says so, one `AttemptRecord` (what dispatchers produce) when it has none.
pub(crate) fn decode(record: &Record) -> Result<Vec<AttemptRecord>, String> {
    match record.header(BATCH_HEADER) {
        None => AttemptRecord::decode(record.payload.as_ref())
            .map(|r| vec![r])
            .map_err(|e| format!("undecodable attempt record: {e}")),
        Some(v) if v == BATCH_OF_ATTEMPTS.as_bytes() => AttemptBatch::decode(record.payload.as_ref())
            .map(|b| b.records)
            .map_err(|e| format!("undecodable attempt batch: {e}")),
        Some(v) => Err(format!(
            "unknown {BATCH_HEADER} {:?} (a newer dispatcher's format?)",
            String::from_utf8_lossy(v)
        )),
    }
}

/// The row of one attempt record; an error names what is wrong with it.
pub(crate) fn to_row(r: AttemptRecord, max_body_bytes: usize) -> Result<NewAttempt, String> {
    let started_at = time(r.attempted_at_ms).ok_or("attempt record without a start time")?;
    let mut body = r.response.to_vec();
    let truncated = r.response_truncated || body.len() > max_body_bytes;
    body.truncate(max_body_bytes);
    Ok(NewAttempt {
        started_at,
        event_id: id(&r.event_id, "event_id")?,
        endpoint_id: id(&r.endpoint_id, "endpoint_id")?,
        attempt: i32::try_from(r.attempt).unwrap_or(i32::MAX),
        tenant_id: id(&r.tenant_id, "tenant_id")?,
        trigger: r.trigger,
        duration_ms: i32::try_from(r.latency_ms).unwrap_or(i32::MAX),
        status: (r.status > 0).then_some(r.status),
        outcome: r.outcome,
        error_class: r.error_class,
        error: r.error,
        response_headers: r
            .response_headers
            .into_iter()
            .map(|h| (h.name, h.value))
            .collect(),
        response_body: (!body.is_empty()).then_some(body),
        response_truncated: truncated,
        next: r.next,
        next_due_at: time(r.next_due_at_ms),
        next_tier: (!r.next_tier.is_empty()).then_some(r.next_tier),
        event_type: (!r.event_type.is_empty()).then_some(r.event_type),
        aggregate_id: (!r.aggregate_id.is_empty()).then_some(r.aggregate_id),
        payload_bytes: (r.payload_bytes > 0).then(|| i32::try_from(r.payload_bytes).unwrap_or(i32::MAX)),
        committed_at: time(r.committed_at_ms),
        relayed_at: time(r.relayed_at_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> AttemptRecord {
        AttemptRecord {
            event_id: Uuid::from_u128(1).to_string(),
            tenant_id: Uuid::from_u128(2).to_string(),
            endpoint_id: Uuid::from_u128(3).to_string(),
            attempt: 2,
            status: 503,
            outcome: "retryable".into(),
            error_class: "http_5xx".into(),
            latency_ms: 42,
            attempted_at_ms: 1_700_000_000_000,
            response: vec![b'x'; 10].into(),
            next: "retry".into(),
            next_due_at_ms: 1_700_000_005_000,
            next_tier: "5s".into(),
            ..Default::default()
        }
    }

    fn kafka_record(payload: Vec<u8>, header: Option<&str>) -> Record {
        Record {
            topic: "hookstream.attempts".into(),
            partition: 0,
            offset: 7,
            timestamp_ms: None,
            key: None,
            payload: payload.into(),
            headers: header
                .map(|v| vec![(BATCH_HEADER.to_string(), v.as_bytes().to_vec().into())])
                .unwrap_or_default(),
        }
    }

    #[test]
    fn a_record_becomes_its_row_and_the_body_is_cut_at_the_limit() {
        let row = to_row(record(), 4).unwrap();
        assert_eq!(row.attempt, 2);
        assert_eq!(row.status, Some(503));
        assert_eq!(row.response_body.as_deref(), Some(&b"xxxx"[..]));
        assert!(row.response_truncated);
        assert_eq!(row.next_tier.as_deref(), Some("5s"));
        assert_eq!(row.next_due_at.unwrap().timestamp_millis(), 1_700_000_005_000);
        let whole = to_row(record(), 100).unwrap();
        assert!(!whole.response_truncated);
    }

    #[test]
    fn batches_and_single_records_both_decode() {
        let single = decode(&kafka_record(record().encode_to_vec(), None)).unwrap();
        assert_eq!(single, vec![record()]);
        let mut second = record();
        second.attempt = 3;
        let mut bytes = Vec::new();
        hookstream_proto::append_attempt(&record(), &mut bytes);
        hookstream_proto::append_attempt(&second, &mut bytes);
        let batch = decode(&kafka_record(bytes.clone(), Some(BATCH_OF_ATTEMPTS))).unwrap();
        assert_eq!(batch, vec![record(), second]);
        // Without its header a batch is refused, not misread as one record.
        assert!(decode(&kafka_record(bytes.clone(), None))
            .unwrap_err()
            .contains("undecodable"));
        let unknown = decode(&kafka_record(bytes, Some("attempts-v9"))).unwrap_err();
        assert!(unknown.contains("attempts-v9"), "{unknown}");
    }

    #[tokio::test]
    async fn storing_waits_while_delivery_is_pressed_until_it_eases_or_the_bound_passes() {
        let metrics = DispatcherMetrics::register(&hookstream_telemetry::prometheus::Registry::new());
        let shutdown = CancellationToken::new();
        let (press, pressed) = watch::channel(false);
        let hold = Hold {
            pressed,
            max: Duration::from_secs(60),
        };
        // Not pressed: at once, nothing counted.
        let started = std::time::Instant::now();
        hold.wait(&metrics, &shutdown).await;
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(metrics.attempt_sink_held.get(), 0);

        // Pressed: until it eases.
        press.send_replace(true);
        let easing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            press.send_replace(false);
            press
        });
        let started = std::time::Instant::now();
        hold.wait(&metrics, &shutdown).await;
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(250), "held {waited:?}");
        assert!(
            waited < Duration::from_secs(30),
            "released when it eased: {waited:?}"
        );
        assert_eq!(metrics.attempt_sink_held.get(), 1);

        // Pressed for good: no longer than the bound.
        let press = easing.await.unwrap();
        press.send_replace(true);
        let bounded = Hold {
            pressed: press.subscribe(),
            max: Duration::from_millis(200),
        };
        let started = std::time::Instant::now();
        bounded.wait(&metrics, &shutdown).await;
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(30),
            "{waited:?}"
        );

        // Shutdown: at once.
        shutdown.cancel();
        let started = std::time::Instant::now();
        hold.wait(&metrics, &shutdown).await;
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn bad_records_are_refused_with_a_reason() {
        assert!(decode(&kafka_record(b"\xff\xff\xff".to_vec(), None))
            .unwrap_err()
            .contains("undecodable"));
        let mut r = record();
        r.event_id = "nope".into();
        assert!(to_row(r, 10).unwrap_err().contains("event_id"));
        let mut r = record();
        r.attempted_at_ms = 0;
        assert!(to_row(r, 10).unwrap_err().contains("start time"));
    }
}
