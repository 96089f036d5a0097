//! `hookstream attempts list` and `hookstream endpoint stats`: the delivery log
//! (`hookstream.attempts`, stored by the dispatchers' attempt sink).

use anyhow::{bail, Context as _};
use chrono::{DateTime, Utc};
use clap::Args;
use hookstream_store::attempts::{self, Filter};
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
                    state,
                ]
            })
            .collect(),
    );
    Ok(())
}
