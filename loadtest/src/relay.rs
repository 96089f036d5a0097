//! The `relay` scenario: outbox → Kafka only.
//!
//! Throughput: a backlog of `--events` rows is written through `hookstream.enqueue` in
//! transactions of 5,000, then 1..=`--relays` relay processes drain it; rows/s is the backlog
//! divided by the time from the relays' start to an empty outbox (watched through the topic's
//! end offsets, which cost the database nothing). Latency: one relay, a
//! producer committing `--rate` rows/s in transactions of `rate/100` rows every 10 ms for
//! `--seconds`, and a consumer that stamps each record on arrival: created → consumed is an
//! upper bound of commit → Kafka acknowledgement.
//!
//! Loss is counted by event id in both: every record is read back from Kafka and decoded,
//! and the distinct ids are compared with the ids `hookstream.enqueue` returned for the
//! committed rows (`tally.rs`), so a duplicate cannot hide a missing row.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hookstream_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use hookstream_kafka::rdkafka::{Message as _, Offset, TopicPartitionList};
use hookstream_proto::{EventEnvelope, Message as _};
use hookstream_store::sqlx;
use hookstream_testkit::process::{service_env, ServiceProcess};
use hookstream_testkit::TestEnv;
use uuid::Uuid;

use crate::chart::{self, Chart, Points};
use crate::cli::{Pad, PayloadForm, RunArgs};
use crate::procstat;
use crate::report::{
    BucketQuantiles, Drain, Latency, Machine, RelayLatency, RelayReport, RelayUsage, RunReport,
};
use crate::scrape;
use crate::stack::{prepare, service_bin};
use crate::tally::tally;

fn relay_bin() -> PathBuf {
    service_bin("outbox-relay")
}

/// The report and its charts (the outbox draining with 1..=N relays; the latency CDF).
pub async fn run(args: &RunArgs) -> anyhow::Result<(RunReport, Vec<Chart>)> {
    prepare()?;
    let mut throughput = Vec::new();
    let mut backlogs = Vec::new();
    for relays in 1..=args.relays.max(1) {
        let backlog_of = Backlog {
            form: args.payload_form,
            pad_bytes: args.payload_bytes.saturating_sub(150),
            pad: args.pad,
            seal: args.seal_payloads,
            store_messages: args.store_messages,
        };
        let (figures, backlog) = drain(args.events(), relays, backlog_of, &args.out).await?;
        throughput.push(figures);
        backlogs.push((format!("{relays} relay(s)"), backlog));
    }
    let (latency, samples) = steady(args.rate(), args.seconds, &args.out).await?;
    let charts = vec![
        chart::time_chart(
            "relay-drain",
            &format!("Outbox rows left while {} rows drain", args.events()),
            "rows",
            backlogs,
        ),
        chart::latency_chart(
            "relay-latency",
            &format!(
                "Row created → record consumed from Kafka, {} rows/s (log scale)",
                args.rate()
            ),
            vec![("consumer-observed".into(), chart::cdf_of(samples, latency.events))],
        ),
    ];
    // The common contract, from the latency phase (records in Kafka stand for deliveries;
    // there are no receivers, signatures or retries in this scenario).
    let report = RelayReport {
        events: latency.events,
        expected_deliveries: latency.events,
        delivered: latency.distinct,
        lost: latency.lost,
        duplicates: latency.duplicates,
        early_retries: None,
        invalid_signatures: None,
        duration_s: latency.duration_s,
        throughput_per_s: if latency.duration_s > 0.0 {
            latency.events as f64 / latency.duration_s
        } else {
            0.0
        },
        latency_ms: latency.latency_ms,
        latency_measures: latency.latency_measures.clone(),
        delivered_measures: "distinct events read back from Kafka in the latency phase".into(),
        per_class: Default::default(),
        processes: [(
            "relay".to_string(),
            RelayUsage {
                cpu_s: latency.cpu_s,
                max_rss_mb: latency.max_rss_mb,
            },
        )]
        .into(),
        machine: Machine::read(),
        payload_form: args.payload_form,
        payload_bytes: args.payload_bytes,
        pad: args.pad,
        sealed: args.seal_payloads,
        store_messages: args.store_messages,
        throughput,
        latency,
    };
    Ok((RunReport::Relay(report), charts))
}

/// The events topic's records so far (the sum of its partitions' end offsets), read with one
/// client for the whole run.
struct Watermarks {
    consumer: std::sync::Arc<BaseConsumer>,
    topic: String,
    partitions: i32,
}

impl Watermarks {
    fn new(env: &TestEnv) -> anyhow::Result<Self> {
        Ok(Self {
            consumer: std::sync::Arc::new(hookstream_kafka::client_config(&env.kafka).create()?),
            topic: env.kafka.topics.events.clone(),
            partitions: env.partitions,
        })
    }

    async fn total(&self) -> anyhow::Result<i64> {
        let (consumer, topic, partitions) = (self.consumer.clone(), self.topic.clone(), self.partitions);
        tokio::task::spawn_blocking(move || {
            (0..partitions)
                .map(|p| Ok(consumer.fetch_watermarks(&topic, p, Duration::from_secs(10))?.1))
                .sum::<anyhow::Result<i64>>()
        })
        .await?
    }
}

/// Drops a phase's database and topics (a warning if it cannot).
async fn discard(env: TestEnv) {
    if let Err(e) = env.discard().await {
        eprintln!("[relay] could not drop its database and topics: {e:#}");
    }
}

/// What the throughput phase's backlog is and how the relays treat it.
#[derive(Debug, Clone, Copy)]
struct Backlog {
    form: PayloadForm,
    /// Bytes of padding (a `pad` field) beyond the ~150-byte payload.
    pad_bytes: usize,
    /// What the padding is.
    pad: Pad,
    /// Whether the relays seal payloads (`relay.seal_payloads`).
    seal: bool,
    /// Whether the message store keeps a copy (which the relay seals too).
    store_messages: bool,
}

/// A JSON array (as text) of order line items of about `$3` bytes (90 bytes an item) for row
/// `g`: SKUs, quantities and prices, which lz4 compresses about as much as real payloads.
pub(crate) const ITEMS_PAD_SQL: &str =
    "(SELECT '[' || string_agg(format('{\"sku\": \"SKU-%s\", \"title\": \"item %s of order %s\", '
                                     '\"qty\": %s, \"unit_cents\": %s}', left(md5(g || ':' || i), 10), i, g,
                                     1 + (g + i) % 7, 100 + (g * i * 37) % 99900), ', ') || ']'
       FROM generate_series(1, greatest(1, $3 / 90)) i)";

/// The backlog's statement for each payload form: the same payload (about 150 bytes, plus a
/// `pad` field of about `$3` bytes when that is not 0), as a jsonb value or as JSON text with
/// its own key order and spacing.
fn prefill_sql(form: PayloadForm, pad: Pad) -> String {
    // The pad as JSON text.
    let pad = match pad {
        Pad::Repeat => "'\"' || repeat('x', $3) || '\"'",
        Pad::Items => ITEMS_PAD_SQL,
    };
    match form {
        PayloadForm::Jsonb => format!(
            "SELECT hookstream.enqueue($1, 'order.updated',
                    jsonb_build_object('n', g, 'note', 'a typical small webhook payload of about two hundred bytes',
                                       'amount', g * 3, 'currency', 'EUR', 'status', 'paid')
                    || CASE WHEN $3 > 0 THEN jsonb_build_object('pad', ({pad})::jsonb) ELSE '{{}}'::jsonb END,
                    'order', 'agg-' || (g % 1000))
               FROM generate_series(1, $2) g"
        ),
        PayloadForm::Text => format!(
            "SELECT hookstream.enqueue($1, 'order.updated',
                    format('{{\"n\": %s, \"note\": \"a typical small webhook payload of about two hundred bytes\", '
                           '\"amount\": %s, \"currency\": \"EUR\", \"status\": \"paid\"%s}}', g, g * 3,
                           CASE WHEN $3 > 0 THEN ', \"pad\": ' || {pad} ELSE '' END)::text,
                    'order', 'agg-' || (g % 1000))
               FROM generate_series(1, $2) g"
        ),
    }
}

/// Commits a backlog of `events` rows; returns their event ids and the rows per second
/// committed.
async fn prefill(
    env: &TestEnv,
    tenant: Uuid,
    events: usize,
    backlog: Backlog,
) -> anyhow::Result<(HashSet<Uuid>, f64)> {
    let mut ids = HashSet::with_capacity(events);
    let mut left = events;
    let started = Instant::now();
    while left > 0 {
        let n = left.min(5_000) as i32;
        // The real producer path: hookstream.enqueue, many rows per transaction.
        let committed: Vec<Uuid> = sqlx::query_scalar(&prefill_sql(backlog.form, backlog.pad))
            .bind(tenant)
            .bind(n)
            .bind(i32::try_from(backlog.pad_bytes).unwrap_or(i32::MAX))
            .fetch_all(&env.pool)
            .await?;
        ids.extend(committed);
        left -= n as usize;
    }
    Ok((ids, events as f64 / started.elapsed().as_secs_f64().max(1e-9)))
}

/// A record on the events topic that is not an `EventEnvelope` with a UUID event id.
#[derive(Debug, thiserror::Error)]
pub enum Undecodable {
    #[error("record at partition {partition} offset {offset} is not an EventEnvelope")]
    Envelope {
        partition: i32,
        offset: i64,
        #[source]
        source: prost::DecodeError,
    },
    #[error("record at partition {partition} offset {offset} has event id {id:?}, not a UUID")]
    EventId { partition: i32, offset: i64, id: String },
}

/// The envelope of the record at (`partition`, `offset`) and its event id.
fn decode(payload: &[u8], partition: i32, offset: i64) -> Result<(EventEnvelope, Uuid), Undecodable> {
    let e = EventEnvelope::decode(payload).map_err(|source| Undecodable::Envelope {
        partition,
        offset,
        source,
    })?;
    let id = Uuid::parse_str(&e.event_id).map_err(|_| Undecodable::EventId {
        partition,
        offset,
        id: e.event_id.clone(),
    })?;
    Ok((e, id))
}

/// Drains a backlog of `events` rows with `relays` relays: the figures, and the rows left
/// over time (every 100 ms).
async fn drain(
    events: usize,
    relays: usize,
    backlog_of: Backlog,
    out: &Path,
) -> anyhow::Result<(Drain, Points)> {
    let env = TestEnv::new(6).await?;
    let tenant = env.tenant("bench").await?;
    if !backlog_of.store_messages {
        sqlx::query("UPDATE hookstream.settings SET store_messages = false")
            .execute(&env.pool)
            .await?;
    }
    eprintln!("[relay] writing a backlog of {events} rows ({backlog_of:?})");
    let (committed, enqueue_per_s) = prefill(&env, tenant, events, backlog_of).await?;
    eprintln!("[relay] backlog committed at {enqueue_per_s:.0} rows/s");
    let mut vars = service_env(&env);
    vars.push((
        "HOOKSTREAM_RELAY__SEAL_PAYLOADS".into(),
        backlog_of.seal.to_string(),
    ));
    let started = Instant::now();
    let procs: Vec<ServiceProcess> = (0..relays)
        .map(|i| {
            ServiceProcess::spawn(
                &relay_bin(),
                &vars,
                &out.join(format!("relay-drain{relays}-{i}.log")),
            )
        })
        .collect::<Result<_, _>>()?;
    let mut last_report = Instant::now();
    let mut backlog: Points = vec![(0.0, events as f64)];
    let shipped = Watermarks::new(&env)?;
    loop {
        // Rows not yet in Kafka, from the topic's end offsets: a `count(*)` of the outbox every
        // 20 ms kept a core of this 2-core machine busy and slowed the relays it measured.
        let left = (events as i64 - shipped.total().await?).max(0);
        let t = started.elapsed().as_secs_f64();
        if t - backlog.last().map_or(0.0, |p| p.0) >= 0.1 {
            backlog.push((t, left as f64));
        }
        // Drained once the outbox is empty too (acknowledged rows are deleted in the batch's
        // commit, just after).
        if left == 0 && env.outbox_len().await? == 0 {
            backlog.push((started.elapsed().as_secs_f64(), 0.0));
            break;
        }
        if last_report.elapsed() > Duration::from_secs(2) {
            eprintln!(
                "[relay] {relays} relay(s): {left} rows left, {:.0} s",
                started.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "the backlog did not drain in 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed().as_secs_f64();
    let usage: Vec<(f64, f64)> = procs
        .iter()
        .filter_map(|p| p.pid().and_then(procstat::sample))
        .collect();
    for p in procs {
        p.terminate().await;
    }
    // Every record of the topic, read back and counted by event id.
    let records = env.read_all(&env.kafka.topics.events).await;
    discard(env).await;
    let ids = records?
        .iter()
        .map(|r| decode(&r.payload, r.partition, r.offset).map(|(_, id)| id))
        .collect::<Result<Vec<Uuid>, _>>()?;
    let read = tally(&committed, ids);
    let result = Drain {
        relays,
        events,
        in_kafka: read.records,
        duplicates: read.duplicates,
        lost: read.lost,
        duration_s: took,
        throughput_per_s: events as f64 / took,
        enqueue_per_s: Some(enqueue_per_s),
        cpu_s: usage.iter().map(|u| u.0).collect(),
        max_rss_mb: usage.iter().map(|u| u.1).collect(),
    };
    eprintln!(
        "[relay] {relays} relay(s): {events} rows in {took:.2} s = {:.0} rows/s; read back {} records, {} lost, {} duplicates",
        events as f64 / took,
        read.records,
        read.lost,
        read.duplicates
    );
    Ok((result, backlog))
}

/// One relay at `rate` rows/s: the figures and the latency samples (ms).
async fn steady(rate: usize, seconds: u64, out: &Path) -> anyhow::Result<(RelayLatency, Vec<f64>)> {
    let env = TestEnv::new(6).await?;
    let tenant = env.tenant("bench").await?;
    let admin = "127.0.0.1:19181";
    let mut vars = service_env(&env);
    vars.push(("HOOKSTREAM_TELEMETRY__LISTEN".into(), admin.into()));
    let relay = ServiceProcess::spawn(&relay_bin(), &vars, &out.join("relay-steady.log"))?;
    let expected = rate * seconds as usize;
    let consumer_env = (env.kafka.clone(), env.partitions);
    let consumer =
        tokio::task::spawn_blocking(move || consume_latencies(consumer_env.0, consumer_env.1, expected));
    // The relay and the measuring consumer both settle (connections, metadata, first fetch)
    // before the first row: otherwise the first rows wait for the consumer's start-up.
    tokio::time::sleep(Duration::from_secs(3)).await;

    eprintln!("[relay] latency phase: {rate} rows/s for {seconds} s");
    let per_tick = (rate / 100).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let start = Instant::now();
    let mut sent = 0;
    let mut committed = HashSet::with_capacity(expected);
    while sent < expected {
        tick.tick().await;
        let n = per_tick.min(expected - sent) as i32;
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT hookstream.enqueue($1, 'order.updated', jsonb_build_object('n', g), 'order', 'agg-' || (g % 100))
               FROM generate_series(1, $2) g",
        )
        .bind(tenant)
        .bind(n)
        .fetch_all(&env.pool)
        .await?;
        committed.extend(ids);
        sent += n as usize;
    }
    let produce_s = start.elapsed().as_secs_f64();
    let (samples, seen) = consumer.await??;
    let read = tally(&committed, seen);
    let duration_s = start.elapsed().as_secs_f64();
    let usage = relay.pid().and_then(procstat::sample);
    let page = scrape::metrics_page(admin).unwrap_or_default();
    // A quantile in the +Inf bucket has no finite bound: null.
    let bound = |ms: f64| ms.is_finite().then_some(ms);
    let relay_view = |name: &str| {
        scrape::histogram_quantiles(&page, name).map(|(p50, p90, p99, count)| BucketQuantiles {
            p50_le_ms: bound(p50),
            p90_le_ms: bound(p90),
            p99_le_ms: bound(p99),
            count,
        })
    };
    let commit_to_ack = relay_view("hookstream_relay_commit_to_ack_seconds");
    let batch = relay_view("hookstream_relay_batch_duration_seconds");
    relay.terminate().await;
    discard(env).await;
    let latency = Latency::of(samples.clone());
    eprintln!(
        "[relay] latency at {rate}/s: p50 {} ms, p99 {} ms, max {} ms",
        latency.p50, latency.p99, latency.max
    );
    let figures = RelayLatency {
        rate_per_s: rate,
        achieved_rate_per_s: sent as f64 / produce_s,
        events: sent,
        received: read.records,
        distinct: read.distinct,
        duplicates: read.duplicates,
        lost: read.lost,
        duration_s,
        latency_ms: latency,
        latency_measures: "row created (insert, ≈ commit for these one-statement transactions) → record consumed from Kafka; an upper bound of commit → acknowledgement".into(),
        relay_commit_to_ack_ms: commit_to_ack,
        relay_batch_duration_ms: batch,
        cpu_s: usage.map(|u| u.0),
        max_rss_mb: usage.map(|u| u.1),
    };
    Ok((figures, samples))
}

/// Reads records until `expected` distinct event ids were seen (or nothing came for 30 s);
/// returns each record's created → consumed time in ms and its event id.
fn consume_latencies(
    kafka: hookstream_config::KafkaConfig,
    partitions: i32,
    expected: usize,
) -> anyhow::Result<(Vec<f64>, Vec<Uuid>)> {
    let mut cfg = hookstream_kafka::client_config(&kafka);
    cfg.set("group.id", format!("loadtest.{}", Uuid::new_v4()))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "1")
        .set("fetch.min.bytes", "1");
    let consumer: BaseConsumer = cfg.create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(&kafka.topics.events, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut samples = Vec::with_capacity(expected);
    let mut seen = Vec::with_capacity(expected);
    // Stop on distinct ids, not records: a duplicate must not end the read one row short.
    let mut distinct = HashSet::with_capacity(expected);
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut idle_since = Instant::now();
    while distinct.len() < expected && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let now_ms = chrono::Utc::now().timestamp_micros() as f64 / 1000.0;
                let (e, id) = decode(m.payload().unwrap_or_default(), m.partition(), m.offset())?;
                samples.push(now_ms - e.created_at_ms as f64);
                seen.push(id);
                distinct.insert(id);
                idle_since = Instant::now();
            }
            Some(Err(e)) => return Err(e.into()),
            None if idle_since.elapsed() > Duration::from_secs(30) => break,
            None => {}
        }
    }
    Ok((samples, seen))
}
