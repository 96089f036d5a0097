//! `hookstream dlq list|show|replay|stats` and `hookstream event resend`: dead letters in
//! PostgreSQL, and putting them (or any event) back into the delivery path.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context as _};
use base64::Engine as _;
use chrono::{DateTime, NaiveDate, Utc};
use clap::{Args, Subcommand};
use hookstream_config::{KafkaConfig, RetryConfig};
use hookstream_proto::{EventEnvelope, Message as _};
use hookstream_replay::{ReplayOptions, ReplayReport, Replayer, DEFAULT_RATE_PER_S};
use hookstream_store::dead_letters::{self, DeadLetter, DeadLetterDetail, Filter};
use hookstream_store::sqlx::PgPool;
use hookstream_store::StoreError;
use uuid::Uuid;

/// How much of a response body `dlq show` prints.
const SHOW_RESPONSE_BYTES: usize = 2_048;

#[derive(Subcommand)]
pub enum DlqCmd {
    /// List dead letters, newest first.
    List {
        #[command(flatten)]
        sel: Selection,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Show one dead letter: reason, status, attempts, times, the response and the payload.
    Show {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// Send dead letters again through the normal delivery path, with the same webhook-id,
    /// at a limited rate. Rows are marked replayed once Kafka has the task.
    Replay(ReplayArgs),
    /// Per endpoint: how many dead letters, the most common error class and status code,
    /// first and last seen.
    Stats {
        #[command(flatten)]
        sel: Selection,
        #[arg(long)]
        json: bool,
    },
}

/// Which dead letters (every flag narrows the selection).
#[derive(Args, Default)]
pub struct Selection {
    /// Tenant id or name.
    #[arg(long)]
    tenant: Option<String>,
    /// Endpoint id.
    #[arg(long)]
    endpoint: Option<Uuid>,
    /// Dead since: RFC 3339 (`2025-01-31T12:00:00Z`), a date (`2025-01-31`, UTC) or an age
    /// (`90s`, `30m`, `6h`, `7d`, `2w` ago).
    #[arg(long)]
    since: Option<String>,
    /// Dead before: same forms as --since.
    #[arg(long)]
    until: Option<String>,
    /// Error class: http_4xx, http_5xx, http_429, timeout, connect, tls, decode, unknown_tenant, …
    #[arg(long)]
    class: Option<String>,
}

impl Selection {
    fn is_empty(&self) -> bool {
        self.tenant.is_none()
            && self.endpoint.is_none()
            && self.since.is_none()
            && self.until.is_none()
            && self.class.is_none()
    }

    async fn filter(&self, pool: &PgPool) -> anyhow::Result<Filter> {
        let tenant = match &self.tenant {
            Some(t) => Some(crate::resolve_tenant(pool, t).await?),
            None => None,
        };
        let since = self
            .since
            .as_deref()
            .map(parse_time)
            .transpose()
            .context("--since")?;
        let until = self
            .until
            .as_deref()
            .map(parse_time)
            .transpose()
            .context("--until")?;
        if let (Some(s), Some(u)) = (since, until) {
            if s >= u {
                bail!("--since ({s}) must be before --until ({u})");
            }
        }
        Ok(Filter {
            tenant,
            endpoint: self.endpoint,
            since,
            until,
            class: self.class.clone(),
            ..Default::default()
        })
    }
}

#[derive(Args)]
pub struct ReplayArgs {
    /// Dead letter ids (repeat the flag or separate with commas).
    #[arg(long = "id", value_delimiter = ',')]
    ids: Vec<i64>,
    #[command(flatten)]
    sel: Selection,
    /// Deliveries per second over the whole replay.
    #[arg(long, default_value_t = DEFAULT_RATE_PER_S)]
    rate: f64,
    /// Show what would be replayed; send nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also replay dead letters that were replayed before (always so with --id).
    #[arg(long)]
    include_replayed: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ResendArgs {
    /// The event id (the `webhook-id` receivers saw).
    event_id: Uuid,
    /// The endpoint to send it to (it must belong to the event's tenant and be enabled).
    #[arg(long)]
    endpoint: Uuid,
    /// How far after the event's creation to look for it in the events topic (`30m`, `6h`, `2d`).
    #[arg(long, default_value = "1h")]
    window: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(
    cmd: DlqCmd,
    pool: &PgPool,
    kafka: &KafkaConfig,
    retry: &RetryConfig,
    secrets: &hookstream_config::SecretsConfig,
) -> anyhow::Result<()> {
    match cmd {
        DlqCmd::List { sel, limit, json } => {
            if limit <= 0 {
                bail!("--limit must be positive");
            }
            let filter = sel.filter(pool).await?;
            let rows = dead_letters::list(pool, &filter, limit).await?;
            if json {
                println!("{}", serde_json::to_string(&rows)?);
            } else if rows.is_empty() {
                println!("no dead letters match");
            } else {
                print_list(&rows);
            }
        }
        DlqCmd::Show { id, json } => {
            let mut d = match dead_letters::get(pool, id).await {
                Err(StoreError::NotFound(_)) => bail!("dead letter {id} not found"),
                other => other?,
            };
            if let Some(why) = open_payload(pool, secrets, &mut d).await? {
                eprintln!("its payload cannot be shown: {why}");
            }
            if json {
                println!("{}", serde_json::to_string(&show_json(&d)?)?);
            } else {
                print_show(&d);
            }
        }
        DlqCmd::Stats { sel, json } => {
            let filter = sel.filter(pool).await?;
            let stats = dead_letters::stats(pool, &filter).await?;
            if json {
                println!("{}", serde_json::to_string(&stats)?);
            } else if stats.is_empty() {
                println!("no dead letters match");
            } else {
                let rows = stats
                    .iter()
                    .map(|s| {
                        vec![
                            opt_id(s.endpoint_id),
                            opt_id(s.tenant_id),
                            s.count.to_string(),
                            s.top_error_class.clone(),
                            status(s.top_status),
                            when(s.first_seen),
                            when(s.last_seen),
                            s.replayed.to_string(),
                        ]
                    })
                    .collect();
                print_table(
                    &[
                        "ENDPOINT",
                        "TENANT",
                        "COUNT",
                        "TOP CLASS",
                        "TOP STATUS",
                        "FIRST SEEN",
                        "LAST SEEN",
                        "REPLAYED",
                    ],
                    rows,
                );
            }
        }
        DlqCmd::Replay(a) => replay(a, pool, kafka, retry).await?,
    }
    Ok(())
}

async fn replay(
    a: ReplayArgs,
    pool: &PgPool,
    kafka: &KafkaConfig,
    retry: &RetryConfig,
) -> anyhow::Result<()> {
    if a.ids.is_empty() && a.sel.is_empty() {
        bail!("choose what to replay: --id, --endpoint, --tenant, --since/--until or --class");
    }
    if !(a.rate.is_finite() && a.rate >= hookstream_replay::MIN_RATE_PER_S) {
        bail!("--rate must be at least one delivery a day (1/86400 per second)");
    }
    let mut filter = a.sel.filter(pool).await?;
    if !a.ids.is_empty() {
        let mut ids = a.ids.clone();
        ids.sort_unstable();
        ids.dedup();
        let found = dead_letters::list(
            pool,
            &Filter {
                ids: Some(ids.clone()),
                ..Default::default()
            },
            ids.len() as i64,
        )
        .await?;
        let missing: Vec<String> = ids
            .iter()
            .filter(|id| !found.iter().any(|r| r.id == **id))
            .map(|id| id.to_string())
            .collect();
        if !missing.is_empty() {
            bail!("dead letter {} not found", missing.join(", "));
        }
        filter.ids = Some(ids);
    } else {
        filter.unreplayed_only = !a.include_replayed;
    }
    let selected = dead_letters::count(pool, &filter).await?;
    if selected == 0 {
        if a.json {
            println!("{}", serde_json::to_string(&ReplayReport::default())?);
        } else {
            println!("no dead letters match (already replayed ones need --include-replayed)");
        }
        return Ok(());
    }
    let replayer = Replayer::new(pool.clone(), kafka, retry)?;
    if !a.json && !a.dry_run {
        eprintln!(
            "replaying up to {selected} dead letters into {} at {}/s (about {:.0} s)…",
            replayer.tier(),
            a.rate,
            selected as f64 / a.rate
        );
    }
    let report = replayer
        .replay(
            &filter,
            &ReplayOptions {
                rate_per_s: a.rate,
                dry_run: a.dry_run,
            },
        )
        .await?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_report(&report, a.rate);
    }
    if !report.failed.is_empty() {
        bail!(
            "{} dead letters were not replayed: Kafka refused them",
            report.failed.len()
        );
    }
    if !report.unmarked.is_empty() {
        bail!(
            "{} dead letters were replayed but could not be marked so (a later replay sends them again)",
            report.unmarked.len()
        );
    }
    if report.replayed.is_empty() {
        let why = report
            .skipped
            .first()
            .map(|s| s.reason.as_str())
            .unwrap_or("nothing matched");
        bail!("nothing replayed: {why}");
    }
    Ok(())
}

fn print_report(r: &ReplayReport, rate: f64) {
    let n = r.replayed.len();
    if n == 0 {
        // Nothing to say on stdout; the reasons follow on stderr.
    } else if r.dry_run {
        let shown: Vec<String> = r.replayed.iter().take(20).map(|i| i.to_string()).collect();
        let more = if n > 20 { ", …" } else { "" };
        println!(
            "dry run: would replay {n} dead letters into {} at {rate}/s (about {:.1} s): {}{more}",
            r.tier,
            n as f64 / rate,
            shown.join(", ")
        );
    } else {
        println!("replayed {n} dead letters into {} at {rate}/s", r.tier);
    }
    let mut by_reason: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for s in &r.skipped {
        by_reason.entry(s.reason.as_str()).or_default().push(s.id);
    }
    for (reason, ids) in by_reason {
        let shown: Vec<String> = ids.iter().take(10).map(|i| i.to_string()).collect();
        let more = if ids.len() > 10 { ", …" } else { "" };
        eprintln!("skipped {} ({}{more}): {reason}", ids.len(), shown.join(", "));
    }
    for f in &r.failed {
        eprintln!("failed {}: {}", f.id, f.reason);
    }
}

pub async fn resend(
    a: ResendArgs,
    pool: &PgPool,
    kafka: &KafkaConfig,
    retry: &RetryConfig,
) -> anyhow::Result<()> {
    let window = parse_duration(&a.window).context("--window")?;
    let replayer = Replayer::new(pool.clone(), kafka, retry)?;
    let sent = replayer.resend(a.event_id, a.endpoint, window).await?;
    if a.json {
        println!("{}", serde_json::to_string(&sent)?);
    } else {
        let from = match &sent.position {
            Some(p) => format!("{} partition {} offset {}", p.topic, p.partition, p.offset),
            None => "the dead letters".into(),
        };
        println!(
            "event {} ({}) from {from} queued for endpoint {} on {}",
            sent.event_id, sent.event_type, sent.endpoint_id, sent.tier
        );
        if !sent.filter_matches {
            eprintln!(
                "note: the endpoint's event-type filter does not match {}; sent anyway",
                sent.event_type
            );
        }
    }
    Ok(())
}

/// RFC 3339, a date (midnight UTC), or an age such as `30m` (that long ago).
pub(crate) fn parse_time(text: &str) -> anyhow::Result<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        if let Some(t) = d.and_hms_opt(0, 0, 0) {
            return Ok(t.and_utc());
        }
    }
    let age = parse_duration(text).map_err(|_| {
        anyhow::anyhow!("{text:?} is not a time: use RFC 3339, YYYY-MM-DD, or an age like 30m, 6h, 7d")
    })?;
    chrono::Duration::from_std(age)
        .ok()
        .and_then(|age| Utc::now().checked_sub_signed(age))
        .ok_or_else(|| anyhow::anyhow!("{text:?} is too long ago"))
}

/// `90s`, `30m`, `6h`, `7d`, `2w`.
fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| anyhow::anyhow!("{text:?} is not a duration: use a number and s, m, h, d or w"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => bail!("{text:?} is not a duration: use a number and s, m, h, d or w"),
    };
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| anyhow::anyhow!("{text:?} is too long"))
}

fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

fn opt_id(id: Option<Uuid>) -> String {
    id.map_or_else(|| "-".into(), |i| i.to_string())
}

fn status(s: i32) -> String {
    if s == 0 {
        "-".into()
    } else {
        s.to_string()
    }
}

fn shorten(text: &str, max: usize) -> String {
    let one_line = text.replace(['\n', '\r'], " ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

pub(crate) fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let text: Vec<String> = cells
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                if i == last {
                    c
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        println!("{}", text.join("  "));
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

fn print_list(rows: &[DeadLetter]) {
    let table = rows
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                when(r.dead_at),
                opt_id(r.endpoint_id),
                if r.event_type.is_empty() {
                    "-".into()
                } else {
                    r.event_type.clone()
                },
                r.error_class.clone(),
                status(r.last_status),
                r.attempts.to_string(),
                if r.replay_count > 0 {
                    format!("{}x", r.replay_count)
                } else {
                    "-".into()
                },
                shorten(&r.reason, 60),
            ]
        })
        .collect();
    print_table(
        &[
            "ID",
            "DEAD AT (UTC)",
            "ENDPOINT",
            "EVENT TYPE",
            "CLASS",
            "STATUS",
            "ATTEMPTS",
            "REPLAYED",
            "REASON",
        ],
        table,
    );
}

/// Opens the stored event's sealed payload, in memory only, for showing it; the reason when it
/// does not open (then the payload shown is `{}`).
async fn open_payload(
    pool: &PgPool,
    secrets: &hookstream_config::SecretsConfig,
    d: &mut DeadLetterDetail,
) -> anyhow::Result<Option<String>> {
    let Some(mut e) = d.event.as_deref().and_then(|b| EventEnvelope::decode(b).ok()) else {
        return Ok(None);
    };
    if e.payload_key.is_empty() {
        return Ok(None);
    }
    let keys = hookstream_store::payload_keys::Keyring::new(
        pool.clone(),
        std::sync::Arc::new(crate::secrets::sealer(secrets)?),
    );
    let opened = keys
        .open(&e.payload_key, &e.event_id, &e.tenant_id, &e.payload)
        .await?;
    let why = match opened {
        Ok(plain) => {
            e.payload = plain.into();
            None
        }
        Err(why) => {
            e.payload = bytes::Bytes::from_static(b"{}");
            Some(why.to_string())
        }
    };
    e.payload_key.clear();
    d.event = Some(e.encode_to_vec());
    Ok(why)
}

fn print_show(d: &DeadLetterDetail) {
    let l = &d.letter;
    let event = d.event.as_deref().and_then(|b| EventEnvelope::decode(b).ok());
    println!("dead letter {}", l.id);
    println!("  reason:        {}", l.reason);
    println!("  error class:   {}", l.error_class);
    println!("  last status:   {}", status(l.last_status));
    println!("  attempts:      {}", l.attempts);
    println!("  tenant:        {}", opt_id(l.tenant_id));
    println!("  endpoint:      {}", opt_id(l.endpoint_id));
    println!(
        "  event:         {}",
        format!("{} {}", opt_id(l.event_id), l.event_type).trim_end()
    );
    if let Some(t) = l.first_attempt_at {
        println!("  first attempt: {} UTC", when(t));
    }
    println!("  dead at:       {} UTC", when(l.dead_at));
    println!("  stored at:     {} UTC", when(l.stored_at));
    match l.replayed_at {
        Some(t) => println!("  replayed:      {} times, last {} UTC", l.replay_count, when(t)),
        None => println!("  replayed:      never"),
    }
    if let (Some(t), Some(p), Some(o)) = (&l.origin_topic, l.origin_partition, l.origin_offset) {
        println!("  origin:        {t} partition {p} offset {o}");
    }
    if let (Some(t), Some(p), Some(o)) = (&l.handled_topic, l.handled_partition, l.handled_offset) {
        println!("  decided on:    {t} partition {p} offset {o}");
    }
    println!(
        "  dlq record:    {} partition {} offset {}",
        l.source_topic, l.source_partition, l.source_offset
    );
    if let Some(r) = d.last_response.as_deref().filter(|r| !r.is_empty()) {
        let shown = &r[..r.len().min(SHOW_RESPONSE_BYTES)];
        let more = if r.len() > shown.len() { " …" } else { "" };
        println!(
            "last response ({} bytes):\n{}{more}",
            r.len(),
            String::from_utf8_lossy(shown)
        );
    }
    if let Some(e) = &event {
        let text = String::from_utf8_lossy(&e.payload);
        let pretty = serde_json::from_slice::<serde_json::Value>(&e.payload)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| text.into_owned());
        println!("payload ({} bytes):\n{pretty}", e.payload.len());
    }
    if let Some(raw) = d.raw.as_deref() {
        let shown = &raw[..raw.len().min(SHOW_RESPONSE_BYTES)];
        println!("raw bytes ({}): {}", raw.len(), shown.escape_ascii());
    }
}

fn show_json(d: &DeadLetterDetail) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(&d.letter)?;
    let b64 = base64::engine::general_purpose::STANDARD;
    if let Some(obj) = v.as_object_mut() {
        let event = d.event.as_deref().and_then(|b| EventEnvelope::decode(b).ok());
        if let Some(e) = event {
            let payload = serde_json::from_slice::<serde_json::Value>(&e.payload).unwrap_or_else(|_| {
                serde_json::Value::String(String::from_utf8_lossy(&e.payload).into_owned())
            });
            obj.insert(
                "event".into(),
                serde_json::json!({
                    "event_id": e.event_id,
                    "tenant_id": e.tenant_id,
                    "event_type": e.event_type,
                    "aggregate_type": e.aggregate_type,
                    "aggregate_id": e.aggregate_id,
                    "created_at_ms": e.created_at_ms,
                    "headers": e.headers,
                    "payload": payload,
                }),
            );
        }
        if let Some(r) = &d.last_response {
            obj.insert(
                "last_response".into(),
                serde_json::Value::String(String::from_utf8_lossy(r).into_owned()),
            );
        }
        if let Some(raw) = &d.raw {
            obj.insert("raw_base64".into(), serde_json::Value::String(b64.encode(raw)));
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_times_parse_or_explain() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("99999999999999999w").is_err());
        let t = parse_time("2025-01-31T12:00:00Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2025-01-31T12:00:00+00:00");
        assert_eq!(
            parse_time("2025-01-31").unwrap().to_rfc3339(),
            "2025-01-31T00:00:00+00:00"
        );
        let ago = Utc::now() - parse_time("1h").unwrap();
        assert!((3_599..=3_601).contains(&ago.num_seconds()));
        assert!(parse_time("yesterday").is_err());
    }
}
