//! `hookstream health`: the whole pipeline's figures in one look, for people and for cron or a
//! probe. It reads the database (outbox backlog, quarantine, dead letters, endpoints and the
//! breakers the dispatchers publish) and Kafka (every consumer group's lag, read from outside
//! the groups, and the retry tiers' next due records), compares them with the thresholds of
//! the `[health]` section, and exits 1 when one is past its threshold or cannot be read.

use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, TimeZone as _, Utc};
use clap::Args;
use hookstream_config::{KafkaConfig, RetryConfig};
use hookstream_kafka::{GroupView, PartitionOffsets};
use hookstream_store::sqlx::PgPool;
use hookstream_store::{breakers, dead_letters, endpoints, outbox};
use serde::{Deserialize, Serialize};

use crate::dlq::print_table;

/// How long reading one record's timestamp may take.
const PEEK_TIMEOUT: Duration = Duration::from_secs(3);
/// How long Kafka may take to answer at all.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request to Kafka may take (a group's first coordinator look-up can take
/// seconds).
const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Args)]
pub struct HealthArgs {
    #[arg(long)]
    json: bool,
}

/// `[health]`: the thresholds past which `hookstream health` exits 1. A threshold set to
/// `"off"` is not checked.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HealthThresholds {
    /// Rows waiting in the outbox.
    #[serde(deserialize_with = "off_or", serialize_with = "number_or_off")]
    pub outbox_backlog: Option<i64>,
    /// Age of the oldest outbox row (seconds): the relay is behind or down.
    #[serde(deserialize_with = "off_or", serialize_with = "number_or_off")]
    pub outbox_oldest_age_s: Option<f64>,
    /// Rows the relay quarantined.
    #[serde(deserialize_with = "off_or", serialize_with = "number_or_off")]
    pub quarantined_rows: Option<i64>,
    /// Messages the events group has not finished.
    #[serde(deserialize_with = "off_or", serialize_with = "number_or_off")]
    pub events_lag_messages: Option<i64>,
    /// Age (seconds) of the oldest record the events group has not finished.
    #[serde(deserialize_with = "off_or", serialize_with = "number_or_off")]
    pub events_lag_s: Option<f64>,
    /// Age (seconds) of the oldest record the DLQ sink or the attempt sink has not stored.
    #[serde(deserialize_with = "off_or", serialize_with = "number_or_off")]
    pub sink_lag_s: Option<f64>,
    /// How long past its hop (seconds) a retry tier's head may be: the retry role is behind
    /// or down.
    #[serde(deserialize_with = "off_or", serialize_with = "number_or_off")]
    pub retry_overdue_s: Option<f64>,
    /// Dead letters made in the last hour.
    #[serde(deserialize_with = "off_or", serialize_with = "number_or_off")]
    pub dead_letters_last_hour: Option<i64>,
    /// Endpoints disabled.
    #[serde(deserialize_with = "off_or", serialize_with = "number_or_off")]
    pub disabled_endpoints: Option<i64>,
    /// Endpoints whose breaker is open in some dispatcher.
    #[serde(deserialize_with = "off_or", serialize_with = "number_or_off")]
    pub open_breakers: Option<i64>,
}

/// A threshold as configured: the number, or `"off"` (also what the defaults layer and the
/// JSON report carry).
fn number_or_off<S, T>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error>
where
    S: serde::Serializer,
    T: Serialize,
{
    match v {
        Some(v) => v.serialize(s),
        None => s.serialize_str("off"),
    }
}

/// A threshold: a number, or `"off"`.
fn off_or<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either<T> {
        Value(T),
        Word(String),
    }
    match Either::<T>::deserialize(d)? {
        Either::Value(v) => Ok(Some(v)),
        Either::Word(w) if w.eq_ignore_ascii_case("off") => Ok(None),
        Either::Word(w) => Err(serde::de::Error::custom(format!(
            "expected a number or \"off\", found {w:?}"
        ))),
    }
}

impl Default for HealthThresholds {
    /// The alert rules' thresholds (`helm/hookstream/alerts/hookstream.rules.yml`) where there
    /// is one; tenant-driven figures (dead letters, disabled endpoints) are not checked.
    fn default() -> Self {
        Self {
            outbox_backlog: Some(1_000_000),
            outbox_oldest_age_s: Some(60.0),
            quarantined_rows: None,
            events_lag_messages: None,
            events_lag_s: Some(30.0),
            sink_lag_s: Some(300.0),
            retry_overdue_s: Some(60.0),
            dead_letters_last_hour: None,
            disabled_endpoints: None,
            open_breakers: Some(10),
        }
    }
}

/// The consumer groups health looks at.
pub struct Groups {
    pub dlq_sink: String,
    pub attempt_sink: String,
}

#[derive(Debug, Serialize)]
struct Report {
    /// No figure past its threshold, and every figure read.
    ok: bool,
    /// One line per figure past its threshold or that could not be read.
    problems: Vec<String>,
    outbox: Option<OutboxFigures>,
    groups: Vec<GroupFigures>,
    retry_tiers: Vec<TierFigures>,
    dead_letters_last_hour: Option<i64>,
    endpoints: Option<EndpointFigures>,
    thresholds: HealthThresholds,
}

#[derive(Debug, Serialize)]
struct OutboxFigures {
    backlog: i64,
    oldest_age_s: f64,
    quarantined: i64,
}

#[derive(Debug, Serialize)]
struct GroupFigures {
    role: &'static str,
    group: String,
    topic: String,
    partitions: i32,
    members: Option<usize>,
    lag_messages: i64,
    /// Age of the oldest record the group has not finished (0 when it has none).
    lag_seconds: f64,
}

#[derive(Debug, Serialize)]
struct TierFigures {
    topic: String,
    delay_ms: u64,
    /// Records in the tier the retry group has not finished.
    waiting: i64,
    /// The earliest hop among the partitions' heads.
    next_due_at: Option<DateTime<Utc>>,
    /// How long past its hop the latest head is (0 when none is).
    overdue_s: f64,
}

#[derive(Debug, Serialize)]
struct EndpointFigures {
    disabled: i64,
    breakers_open: i64,
    breakers_half_open: i64,
}

fn check<T: PartialOrd + std::fmt::Display + Copy>(
    problems: &mut Vec<String>,
    what: &str,
    value: T,
    threshold: Option<T>,
    unit: &str,
) {
    if let Some(t) = threshold {
        if value > t {
            problems.push(format!("{what}: {value}{unit}, past the threshold of {t}{unit}"));
        }
    }
}

/// A group's lag and the ages (ms since the epoch) of the heads it has not finished.
struct Lagging {
    view_partitions: i32,
    members: Option<usize>,
    lag: i64,
    /// `(partition, timestamp ms)` of every lagging partition's next record.
    heads: Vec<(i32, i64)>,
}

fn read_group(kafka: &KafkaConfig, group: &str, topic: &str) -> anyhow::Result<Lagging> {
    let view = GroupView::of_topic(kafka, group, topic, KAFKA_TIMEOUT)
        .with_context(|| format!("reading group {group} on {topic}"))?;
    anyhow::ensure!(view.partitions() > 0, "topic {topic} does not exist");
    let offsets: Vec<PartitionOffsets> = view
        .offsets()
        .with_context(|| format!("the broker did not give the offsets of group {group} on {topic}"))?;
    let heads = view
        .heads(kafka, &offsets, PEEK_TIMEOUT)
        .with_context(|| format!("reading the next records of {topic}"))?;
    Ok(Lagging {
        view_partitions: view.partitions(),
        members: view.membership().map(|m| m.members),
        lag: offsets.iter().map(PartitionOffsets::lag).sum(),
        heads,
    })
}

fn age_s(now_ms: i64, ts_ms: i64) -> f64 {
    ((now_ms - ts_ms).max(0)) as f64 / 1000.0
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> anyhow::Result<T> {
    Ok(tokio::task::spawn_blocking(f).await?)
}

pub async fn run(
    a: HealthArgs,
    pool: &PgPool,
    kafka: &KafkaConfig,
    retry: &RetryConfig,
    groups: Groups,
    thresholds: HealthThresholds,
) -> anyhow::Result<bool> {
    let mut problems = Vec::new();
    let t = &thresholds;

    let outbox = async {
        let (backlog, oldest_age_s) = outbox::backlog(pool).await?;
        let quarantined = outbox::quarantined_count(pool).await?;
        anyhow::Ok(OutboxFigures {
            backlog,
            oldest_age_s,
            quarantined,
        })
    }
    .await;
    let outbox = match outbox {
        Ok(o) => {
            check(
                &mut problems,
                "outbox backlog",
                o.backlog,
                t.outbox_backlog,
                " rows",
            );
            check(
                &mut problems,
                "outbox oldest row",
                o.oldest_age_s,
                t.outbox_oldest_age_s,
                " s",
            );
            check(
                &mut problems,
                "quarantined rows",
                o.quarantined,
                t.quarantined_rows,
                "",
            );
            Some(o)
        }
        Err(e) => {
            problems.push(format!("outbox: cannot read: {e:#}"));
            None
        }
    };

    let since = Utc::now() - chrono::Duration::hours(1);
    let dead = dead_letters::count(
        pool,
        &dead_letters::Filter {
            since: Some(since),
            ..Default::default()
        },
    )
    .await;
    let dead_letters_last_hour = match dead {
        Ok(n) => {
            check(
                &mut problems,
                "dead letters in the last hour",
                n,
                t.dead_letters_last_hour,
                "",
            );
            Some(n)
        }
        Err(e) => {
            problems.push(format!("dead letters: cannot read: {e:#}"));
            None
        }
    };

    let eps = async {
        let disabled = endpoints::count_disabled(pool).await?;
        let open = breakers::not_closed(pool, None).await?;
        let breakers_open = open.iter().filter(|b| b.state == "open").count() as i64;
        anyhow::Ok(EndpointFigures {
            disabled,
            breakers_open,
            breakers_half_open: open.len() as i64 - breakers_open,
        })
    }
    .await;
    let endpoints = match eps {
        Ok(e) => {
            check(
                &mut problems,
                "disabled endpoints",
                e.disabled,
                t.disabled_endpoints,
                "",
            );
            check(
                &mut problems,
                "open breakers",
                e.breakers_open,
                t.open_breakers,
                "",
            );
            Some(e)
        }
        Err(e) => {
            problems.push(format!("endpoints: cannot read: {e:#}"));
            None
        }
    };

    // Kafka first answers at all (naming a refused login or TLS failure), or none of its
    // figures is read.
    let kafka_answers = match hookstream_kafka::probe(kafka, PROBE_TIMEOUT).await {
        Ok(()) => true,
        Err(e) => {
            problems.push(format!("kafka: {e}; no group or retry tier figure was read"));
            false
        }
    };
    let now_ms = Utc::now().timestamp_millis();
    let mut group_figures = Vec::new();
    let watched: [(&'static str, &str, &str); 3] = [
        ("events", kafka.group_id.as_str(), kafka.topics.events.as_str()),
        ("dlq_sink", groups.dlq_sink.as_str(), kafka.topics.dlq.as_str()),
        (
            "attempt_sink",
            groups.attempt_sink.as_str(),
            kafka.topics.attempts.as_str(),
        ),
    ];
    for (role, group, topic) in watched.into_iter().filter(|_| kafka_answers) {
        let (k, g, tp) = (kafka.clone(), group.to_string(), topic.to_string());
        match blocking(move || read_group(&k, &g, &tp)).await? {
            Ok(l) => {
                let lag_seconds = l
                    .heads
                    .iter()
                    .map(|(_, ts)| age_s(now_ms, *ts))
                    .fold(0.0, f64::max);
                let what = format!("{role} group {group}");
                if role == "events" {
                    check(
                        &mut problems,
                        &format!("{what} lag"),
                        l.lag,
                        t.events_lag_messages,
                        " messages",
                    );
                    check(
                        &mut problems,
                        &format!("{what} lag"),
                        lag_seconds,
                        t.events_lag_s,
                        " s",
                    );
                } else {
                    check(
                        &mut problems,
                        &format!("{what} lag"),
                        lag_seconds,
                        t.sink_lag_s,
                        " s",
                    );
                }
                group_figures.push(GroupFigures {
                    role,
                    group: group.to_string(),
                    topic: topic.to_string(),
                    partitions: l.view_partitions,
                    members: l.members,
                    lag_messages: l.lag,
                    lag_seconds,
                });
            }
            Err(e) => problems.push(format!("{role} group {group}: cannot read: {e:#}")),
        }
    }

    let mut tiers = Vec::new();
    if retry.enabled && kafka_answers {
        for tier in retry.tiers() {
            let (k, g, tp) = (kafka.clone(), retry.group_id.clone(), tier.topic.clone());
            match blocking(move || read_group(&k, &g, &tp)).await? {
                Ok(l) => {
                    // Tier records carry the broker's append time and wait exactly the tier's
                    // delay: a head's hop is its timestamp plus the delay.
                    let hops: Vec<i64> = l.heads.iter().map(|(_, ts)| ts + tier.delay_ms as i64).collect();
                    let overdue_s = hops.iter().map(|hop| age_s(now_ms, *hop)).fold(0.0, f64::max);
                    check(
                        &mut problems,
                        &format!("retry tier {}: head past its hop by", tier.topic),
                        overdue_s,
                        t.retry_overdue_s,
                        " s",
                    );
                    tiers.push(TierFigures {
                        topic: tier.topic.clone(),
                        delay_ms: tier.delay_ms,
                        waiting: l.lag,
                        next_due_at: hops
                            .iter()
                            .min()
                            .and_then(|ms| Utc.timestamp_millis_opt(*ms).single()),
                        overdue_s,
                    });
                }
                Err(e) => problems.push(format!("retry tier {}: cannot read: {e:#}", tier.topic)),
            }
        }
    }

    let report = Report {
        ok: problems.is_empty(),
        problems,
        outbox,
        groups: group_figures,
        retry_tiers: tiers,
        dead_letters_last_hour,
        endpoints,
        thresholds,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(report.ok)
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("?".into(), |v| v.to_string())
}

fn print_report(r: &Report) {
    if let Some(o) = &r.outbox {
        println!(
            "outbox: {} rows waiting, oldest {:.1} s; {} quarantined",
            o.backlog, o.oldest_age_s, o.quarantined
        );
    }
    println!("dead letters in the last hour: {}", opt(r.dead_letters_last_hour));
    if let Some(e) = &r.endpoints {
        println!(
            "endpoints: {} disabled; breakers: {} open, {} half-open",
            e.disabled, e.breakers_open, e.breakers_half_open
        );
    }
    println!();
    print_table(
        &["role", "group", "topic", "members", "lag", "lag s"],
        r.groups
            .iter()
            .map(|g| {
                vec![
                    g.role.to_string(),
                    g.group.clone(),
                    g.topic.clone(),
                    opt(g.members),
                    g.lag_messages.to_string(),
                    format!("{:.1}", g.lag_seconds),
                ]
            })
            .collect(),
    );
    if !r.retry_tiers.is_empty() {
        println!();
        print_table(
            &["retry tier", "waiting", "next hop", "overdue s"],
            r.retry_tiers
                .iter()
                .map(|t| {
                    vec![
                        t.topic.clone(),
                        t.waiting.to_string(),
                        t.next_due_at
                            .map_or("-".into(), |d| d.format("%Y-%m-%d %H:%M:%S%.3f").to_string()),
                        format!("{:.1}", t.overdue_s),
                    ]
                })
                .collect(),
        );
    }
    println!();
    if r.ok {
        println!("ok");
    } else {
        for p in &r.problems {
            println!("PROBLEM {p}");
        }
    }
}
