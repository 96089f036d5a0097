//! `hookstream event publish`: events into the outbox, their payload byte for byte as given
//! (inline, `@file` or `@-`), with channels and a time before which they are not delivered.

use chrono::{DateTime, Duration, Utc};
use clap::Args;
use hookstream_routing::channels;
use hookstream_store::outbox::{self, NewEvent};
use hookstream_store::sqlx::PgPool;

use crate::payload_arg;

#[derive(Args)]
pub(crate) struct EventPublish {
    /// Tenant id or name.
    #[arg(long)]
    tenant: String,
    #[arg(long = "type")]
    event_type: String,
    /// Aggregate id: events of one aggregate reach Kafka in commit order (the dispatcher may
    /// still deliver them concurrently: receivers must not rely on arrival order).
    #[arg(long, default_value = "")]
    aggregate: String,
    #[arg(long, default_value = "")]
    aggregate_type: String,
    /// The payload, a JSON object: the text itself, `@FILE` or `@-` (standard input). Delivered
    /// byte for byte as given (spacing, key order, numbers, a final newline).
    #[arg(long)]
    data: String,
    /// A channel to send it to (repeatable, or comma-separated): endpoints that listen on
    /// channels get it only when they share one.
    #[arg(long = "channel", value_name = "NAME", value_delimiter = ',')]
    channels: Vec<String>,
    /// Not delivered before this time: RFC 3339 (`2030-01-02T03:04:05Z`) or from now
    /// (`+30s`, `+5m`, `+2h`, `+1d`); at most 30 days ahead.
    #[arg(long, value_name = "TIME", value_parser = deliver_at_arg)]
    deliver_at: Option<DateTime<Utc>>,
    /// How many copies, in one transaction (at most 100,000).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    count: u32,
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(a: EventPublish, pool: &PgPool) -> anyhow::Result<()> {
    let tenant_id = crate::resolve_tenant(pool, &a.tenant).await?;
    let payload = payload_arg::read("--data", &a.data)?;
    payload_arg::check_object("--data", &payload)?;
    let mut event = NewEvent::from_json_text(tenant_id, a.event_type, payload)
        .aggregate(a.aggregate_type, a.aggregate)
        .channels(checked_channels(&a.channels)?);
    if let Some(at) = a.deliver_at {
        event = event.deliver_at(at);
    }
    let mut tx = pool.begin().await?;
    let mut ids = Vec::with_capacity(a.count as usize);
    for _ in 0..a.count {
        ids.push(outbox::enqueue(&mut tx, &event).await?);
    }
    tx.commit().await?;
    if a.json {
        println!("{}", serde_json::json!({ "event_ids": ids }));
    } else {
        for id in ids {
            println!("{id}");
        }
    }
    Ok(())
}

/// `--channel` values, checked as the API checks them (deduplicated; the error names the bad
/// one).
pub(crate) fn checked_channels(given: &[String]) -> anyhow::Result<Vec<String>> {
    channels::check_channels(given).map_err(|e| anyhow::anyhow!("--channel: {e}"))
}

fn deliver_at_arg(text: &str) -> Result<DateTime<Utc>, String> {
    deliver_at(text, Utc::now())
}

/// `+<n>s|m|h|d` after `now`, or an RFC 3339 time.
fn deliver_at(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let Some(rel) = text.strip_prefix('+') else {
        return DateTime::parse_from_rfc3339(text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| format!("not an RFC 3339 time ({e}) nor +30s, +5m, +2h, +1d"));
    };
    let split = rel.find(|c: char| !c.is_ascii_digit()).unwrap_or(rel.len());
    let (number, unit) = rel.split_at(split);
    let n: i64 = number
        .parse()
        .map_err(|_| "a relative time is +<number><s|m|h|d>, e.g. +30s".to_string())?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(format!("unknown unit {unit:?}: use s, m, h or d")),
    };
    n.checked_mul(unit_secs)
        .filter(|s| *s <= 366 * 86_400)
        .map(|s| now + Duration::seconds(s))
        .ok_or_else(|| "too far ahead (scheduled events are at most 30 days ahead)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliver_at_takes_rfc3339_and_offsets_from_now() {
        let now = DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let at = |s: &str| deliver_at(s, now).map(|t| t.to_rfc3339());
        assert_eq!(at("+30s").unwrap(), "2030-01-01T00:00:30+00:00");
        assert_eq!(at("+5m").unwrap(), "2030-01-01T00:05:00+00:00");
        assert_eq!(at("+2h").unwrap(), "2030-01-01T02:00:00+00:00");
        assert_eq!(at("+1d").unwrap(), "2030-01-02T00:00:00+00:00");
        assert_eq!(
            at("2030-01-02T03:04:05+02:00").unwrap(),
            "2030-01-02T01:04:05+00:00"
        );
        assert!(at("+5").unwrap_err().contains("unknown unit"));
        assert!(at("+m").is_err());
        assert!(at("+5w").is_err());
        assert!(at("+-5s").is_err());
        assert!(at("+99999999999999999d").is_err());
        assert!(at("tomorrow").unwrap_err().contains("RFC 3339"));
    }

    #[test]
    fn channels_are_checked() {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            checked_channels(&v(&["eu", "us", "eu"])).unwrap(),
            v(&["eu", "us"])
        );
        let e = checked_channels(&v(&["e u"])).unwrap_err().to_string();
        assert!(e.starts_with("--channel: invalid channel \"e u\""), "{e}");
    }
}
