//! `hookstream attempts list` and `hookstream endpoint stats`: the delivery log
//! (`hookstream.attempts`, stored by the dispatchers' attempt sink).

use anyhow::{bail, Context as _};
use chrono::{DateTime, Utc};
use clap::Args;
use hookstream_store::attempts::{self, Filter, NotYetAttempted};
use hookstream_store::sqlx::PgPool;
use uuid::Uuid;

use crate::dlq::{parse_time, print_table};

#[derive(Args)]
pub struct ListArgs {
    /// The attempts of this event (the `webhook-id` receivers saw).
    #[arg(long)]
    event: Option<Uuid>,
    /// The attempts at this endpoint.
    #[arg(long)]
    endpoint: Option<Uuid>,
    /// Only this tenant's attempts (id or name).
    #[arg(long)]
    tenant: Option<String>,
    /// Started since: RFC 3339, a date (UTC) or an age (`90s`, `30m`, `6h`, `7d`).
    #[arg(long)]
    since: Option<String>,
    /// HTTP status class: 2xx, 3xx, 4xx or 5xx.
    #[arg(long)]
    status: Option<String>,
    /// Error class: http_4xx, http_5xx, http_429, timeout, connect, tls, ssrf_blocked, …
    #[arg(long)]
    class: Option<String>,
    /// At most this many (newest first).
    #[arg(long, default_value_t = 100)]
    limit: i64,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ShowArgs {
    /// The event id (the `webhook-id` receivers saw).
    event_id: Uuid,
    /// Only if it is this tenant's (id or name).
    #[arg(long)]
    tenant: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct StatsArgs {
    /// Only this tenant's endpoints (id or name).
    #[arg(long)]
    tenant: Option<String>,
    /// The window: attempts started since (RFC 3339, a date, or an age such as 1h, 7d).
    #[arg(long, default_value = "1h")]
    since: String,
    #[arg(long)]
    json: bool,
}

fn status_class(text: &str) -> anyhow::Result<i32> {
    match text.trim().to_ascii_lowercase().as_str() {
        "2xx" => Ok(2),
        "3xx" => Ok(3),
        "4xx" => Ok(4),
        "5xx" => Ok(5),
        other => bail!("--status {other:?}: use 2xx, 3xx, 4xx or 5xx"),
    }
}

fn ms(t: Option<DateTime<Utc>>) -> String {
    t.map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())
        .unwrap_or_else(|| "-".into())
}

pub async fn list(a: ListArgs, pool: &PgPool) -> anyhow::Result<()> {
    if a.event.is_none() && a.endpoint.is_none() {
        bail!("say whose attempts: --event ID or --endpoint ID");
    }
    let filter = Filter {
        tenant_id: match &a.tenant {
            Some(t) => Some(crate::resolve_tenant(pool, t).await?),
            None => None,
        },
        event_id: a.event,
        endpoint_id: a.endpoint,
        since: a
            .since
            .as_deref()
            .map(parse_time)
            .transpose()
            .context("--since")?,
        status_class: a.status.as_deref().map(status_class).transpose()?,
        error_class: a.class.clone(),
        limit: a.limit,
    };
    let rows = attempts::list(pool, &filter).await?;
    if a.json {
        println!("{}", serde_json::to_string(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!("no attempts match");
        return Ok(());
    }
    print_table(
        &[
            "started", "event", "endpoint", "#", "trigger", "ms", "status", "class", "next", "due",
        ],
        rows.iter()
            .map(|r| {
                vec![
                    ms(Some(r.started_at)),
                    r.event_id.to_string(),
                    r.endpoint_id.to_string(),
                    r.attempt.to_string(),
                    r.trigger.clone(),
                    r.duration_ms.to_string(),
                    r.status.map_or("-".into(), |s| s.to_string()),
                    r.error_class.clone(),
                    if r.next.is_empty() {
                        "-".into()
                    } else {
                        r.next.clone()
                    },
                    r.next_tier
                        .as_ref()
                        .map_or_else(|| ms(r.next_due_at), |t| format!("{} ({t})", ms(r.next_due_at))),
                ]
            })
            .collect(),
    );
    Ok(())
}

pub async fn stats(a: StatsArgs, pool: &PgPool) -> anyhow::Result<()> {
    let tenant = match &a.tenant {
        Some(t) => Some(crate::resolve_tenant(pool, t).await?),
        None => None,
    };
    let since = parse_time(&a.since).context("--since")?;
    let rows = attempts::endpoint_stats(pool, tenant, since).await?;
    if a.json {
        println!("{}", serde_json::to_string(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!("no attempts since {}", ms(Some(since)));
        return Ok(());
    }
    print_table(
        &[
            "endpoint",
            "attempts",
            "success",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "top error",
            "top status",
            "breaker",
            "state",
        ],
        rows.iter()
            .map(|s| {
                let state = match (s.enabled, s.failing_since) {
                    (Some(false), _) => "disabled".to_string(),
                    (_, Some(t)) => format!("failing since {}", ms(Some(t))),
                    (None, _) => "deleted".to_string(),
                    _ => "ok".to_string(),
                };
                vec![
                    s.endpoint_id.to_string(),
                    s.attempts.to_string(),
                    format!("{:.1}%", s.success_rate * 100.0),
                    format!("{:.0}", s.p50_ms),
                    format!("{:.0}", s.p95_ms),
                    format!("{:.0}", s.p99_ms),
                    s.top_error_class.as_ref().map_or("-".into(), |c| {
                        format!("{c} ({})", s.top_error_count.unwrap_or(0))
                    }),
                    s.top_status.map_or("-".into(), |c| {
                        format!("{c} ({})", s.top_status_count.unwrap_or(0))
                    }),
                    s.breaker.clone(),
                    state,
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `hookstream event show ID`: the event and, per endpoint, its status and every attempt.
pub async fn show(a: ShowArgs, pool: &PgPool) -> anyhow::Result<()> {
    let tenant = match &a.tenant {
        Some(t) => Some(crate::resolve_tenant(pool, t).await?),
        None => None,
    };
    let filter = Filter {
        tenant_id: tenant,
        event_id: Some(a.event_id),
        limit: 10_000,
        ..Default::default()
    };
    let mut rows = attempts::list(pool, &filter).await?;
    rows.reverse(); // oldest first
    let status = attempts::status(pool, a.event_id, tenant).await?;
    let before = if rows.is_empty() {
        attempts::before_delivery(pool, a.event_id, tenant).await?
    } else {
        None
    };
    if a.json {
        let endpoints: Vec<serde_json::Value> = status
            .iter()
            .map(|s| {
                let of: Vec<&attempts::Attempt> =
                    rows.iter().filter(|r| r.endpoint_id == s.endpoint_id).collect();
                serde_json::json!({ "status": s, "attempts": of })
            })
            .collect();
        let first = rows.first();
        println!(
            "{}",
            serde_json::json!({
                "event_id": a.event_id,
                "tenant_id": first.map(|r| r.tenant_id),
                "event_type": first.and_then(|r| r.event_type.clone()),
                "aggregate_id": first.and_then(|r| r.aggregate_id.clone()),
                "payload_bytes": first.and_then(|r| r.payload_bytes),
                "committed_at": first.and_then(|r| r.committed_at),
                "relayed_at": first.and_then(|r| r.relayed_at),
                "before_delivery": before,
                "endpoints": endpoints,
            })
        );
        return Ok(());
    }
    let Some(first) = rows.first() else {
        match before {
            Some(NotYetAttempted::InOutbox { committed_at }) => {
                println!("event {}: committed {}, waiting in the outbox (not yet relayed)", a.event_id, ms(Some(committed_at)))
            }
            Some(NotYetAttempted::Quarantined { reason }) => {
                println!("event {}: quarantined by the relay, not delivered: {reason}", a.event_id)
            }
            None => bail!(
                "no attempts of event {} in the delivery log (unknown, not this tenant's, routed to no endpoint, \
                 past attempts.retention_days, or the attempt sink is behind)",
                a.event_id
            ),
        }
        return Ok(());
    };
    println!("event      {}", a.event_id);
    println!("tenant     {}", first.tenant_id);
    println!(
        "type       {}{}",
        first.event_type.as_deref().unwrap_or("-"),
        first
            .aggregate_id
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|g| format!("  (aggregate {g})"))
            .unwrap_or_default()
    );
    if let Some(n) = first.payload_bytes {
        println!("payload    {n} bytes");
    }
    println!("committed  {}", ms(first.committed_at));
    let relay_ms = first
        .committed_at
        .zip(first.relayed_at)
        .map(|(c, r)| format!("  (+{} ms)", (r - c).num_milliseconds()))
        .unwrap_or_default();
    println!("relayed    {}{relay_ms}", ms(first.relayed_at));
    for s in &status {
        let detail = match s.state.as_str() {
            "retrying" => format!("next attempt due {}", ms(s.next_due_at)),
            _ => format!(
                "last answer {}",
                s.last_status
                    .map_or(s.last_error_class.clone(), |c| c.to_string())
            ),
        };
        println!();
        println!(
            "endpoint {}: {} after {} attempt(s), {detail}",
            s.endpoint_id, s.state, s.attempts
        );
        print_table(
            &[
                "#", "started", "trigger", "ms", "status", "class", "next", "error",
            ],
            rows.iter()
                .filter(|r| r.endpoint_id == s.endpoint_id)
                .map(|r| {
                    vec![
                        r.attempt.to_string(),
                        ms(Some(r.started_at)),
                        r.trigger.clone(),
                        r.duration_ms.to_string(),
                        r.status.map_or("-".into(), |c| c.to_string()),
                        r.error_class.clone(),
                        if r.next.is_empty() {
                            "-".into()
                        } else {
                            r.next.clone()
                        },
                        r.error.clone(),
                    ]
                })
                .collect(),
        );
    }
    Ok(())
}
