//! `hookstream endpoint replay-missing|bulk-replay|recover` and `hookstream task list|get`:
//! the API's background tasks from the shell. Starting one writes the same row the API's
//! `/replay-missing`, `/bulk-replay` and `/recover` write, under the same per-tenant cap and
//! checks; the API processes take it up and run it (paced at their `api.recover_rate_per_s`,
//! carried on by another API if one stops). So a task needs an API running, and `--wait`
//! says so when nothing takes it up.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use hookstream_store::background_tasks::{self, ListFilter, ParamField, Params, Task};
use hookstream_store::sqlx::PgPool;
use hookstream_store::{endpoints, StoreError};
use uuid::Uuid;

use crate::dlq::parse_time;

/// How often `--wait` reads the task back.
const POLL: Duration = Duration::from_millis(500);
/// A task nobody has taken up (no progress written) for this long: no API is running.
const UNCLAIMED_WARNING: Duration = Duration::from_secs(60);

/// The window of a replay or recovery.
#[derive(Args)]
pub(crate) struct Window {
    /// The endpoint.
    id: Uuid,
    /// Messages (dead letters, for recover) since: RFC 3339, a date (UTC) or an age (`30m`,
    /// `6h`, `7d`).
    #[arg(long)]
    since: String,
    /// And before: same forms as --since (default: now).
    #[arg(long)]
    until: Option<String>,
    /// Wait for the task to end and print its counts; exit 1 if it failed.
    #[arg(long)]
    wait: bool,
    #[arg(long)]
    json: bool,
}

/// `endpoint bulk-replay`: a window and filters on what was sent.
#[derive(Args)]
pub(crate) struct BulkReplay {
    #[command(flatten)]
    window: Window,
    /// Only these event types (comma-separated or repeated).
    #[arg(long = "event-type", value_delimiter = ',')]
    event_types: Vec<String>,
    /// Only messages sent to this channel.
    #[arg(long)]
    channel: Option<String>,
    /// Only messages with this tag.
    #[arg(long)]
    tag: Option<String>,
    /// Only messages whose latest attempt here succeeded, is pending, or failed.
    #[arg(long, value_enum)]
    status: Option<Status>,
    /// Only messages whose latest attempt's HTTP status is of this class (0: no response,
    /// 100, 200, 300, 400, 500).
    #[arg(long)]
    status_code_class: Option<u16>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum Status {
    Success,
    Pending,
    Fail,
}

#[derive(Subcommand)]
pub(crate) enum TaskCmd {
    /// Background tasks, newest first.
    List {
        /// Tenant id or name (default: every tenant).
        #[arg(long)]
        tenant: Option<String>,
        /// running, finished or failed.
        #[arg(long)]
        status: Option<String>,
        /// endpoint.replay, endpoint.bulk-replay or endpoint.recover.
        #[arg(long)]
        kind: Option<String>,
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=250))]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// One task: its kind, status and counts.
    Get {
        /// `qtask_…` as listed, or its uuid.
        id: String,
        /// Wait for it to end; exit 1 if it failed.
        #[arg(long)]
        wait: bool,
        #[arg(long)]
        json: bool,
    },
}

/// Which task `endpoint replay-missing|bulk-replay|recover` starts.
pub(crate) enum Start {
    ReplayMissing(Window),
    BulkReplay(BulkReplay),
    Recover(Window),
}

/// Starts the task (and with `--wait`, follows it to its end).
pub(crate) async fn start(cmd: Start, pool: &PgPool, max_running: u32) -> anyhow::Result<()> {
    let (kind, window, params) = match cmd {
        Start::ReplayMissing(w) => {
            let p = window_params(&w)?;
            (background_tasks::REPLAY, w, p)
        }
        Start::Recover(w) => {
            let p = window_params(&w)?;
            (background_tasks::RECOVER, w, p)
        }
        Start::BulkReplay(b) => {
            let p = Params {
                event_types: b.event_types,
                channel: b.channel,
                tag: b.tag,
                status: b.status.map(|s| match s {
                    Status::Success => 0,
                    Status::Pending => 1,
                    Status::Fail => 2,
                }),
                status_code_class: b.status_code_class,
                ..window_params(&b.window)?
            };
            (background_tasks::BULK_REPLAY, b.window, p)
        }
    };
    p_check(&params)?;
    let ep = match endpoints::get(pool, window.id).await {
        Ok(ep) => ep,
        Err(StoreError::NotFound(_)) => bail!("unknown endpoint {}", window.id),
        Err(e) => return Err(e.into()),
    };
    // A recovery replays dead letters and may run while the endpoint is off (as the API's).
    if kind != background_tasks::RECOVER && !ep.enabled {
        bail!(
            "endpoint {} is disabled: enable it first (hookstream endpoint enable {})",
            ep.id,
            ep.id
        );
    }
    let task = background_tasks::create(
        pool,
        ep.tenant_id,
        Some(ep.id),
        kind,
        &params,
        i64::from(max_running),
    )
    .await?
    .map_err(|at| {
        anyhow::anyhow!(
            "the endpoint's tenant already has {} background tasks running \
             (api.max_running_tasks_per_tenant): wait for one to finish",
            at.0
        )
    })?;
    if window.wait {
        return follow(pool, task, window.json).await;
    }
    print(&task, window.json);
    Ok(())
}

fn window_params(w: &Window) -> anyhow::Result<Params> {
    Ok(Params {
        since: parse_time(&w.since).context("--since")?,
        until: w
            .until
            .as_deref()
            .map(parse_time)
            .transpose()
            .context("--until")?,
        ..Params::default()
    })
}

/// The store's checks, naming the flag.
fn p_check(p: &Params) -> anyhow::Result<()> {
    p.check(Utc::now()).map_err(|e| {
        let flag = match e.field {
            ParamField::Since => "--since",
            ParamField::Until => "--until",
            ParamField::EventTypes => "--event-type",
            ParamField::Channel => "--channel",
            ParamField::Tag => "--tag",
            ParamField::Status => "--status",
            ParamField::StatusCodeClass => "--status-code-class",
        };
        anyhow::anyhow!("{flag}: {}", e.reason)
    })
}

pub(crate) async fn run(cmd: TaskCmd, pool: &PgPool) -> anyhow::Result<()> {
    match cmd {
        TaskCmd::List {
            tenant,
            status,
            kind,
            limit,
            json,
        } => {
            if let Some(s) = &status {
                if !["running", "finished", "failed"].contains(&s.as_str()) {
                    bail!("--status: {s:?} is not running, finished or failed");
                }
            }
            if let Some(k) = &kind {
                let kinds = [
                    background_tasks::REPLAY,
                    background_tasks::BULK_REPLAY,
                    background_tasks::RECOVER,
                ];
                if !kinds.contains(&k.as_str()) {
                    bail!("--kind: {k:?} is not one of {}", kinds.join(", "));
                }
            }
            let scope = match tenant {
                Some(t) => Some(crate::resolve_tenant(pool, &t).await?),
                None => None,
            };
            let filter = ListFilter { scope, status, kind };
            let rows = background_tasks::list(pool, &filter, None, true, limit).await?;
            if json {
                let all: Vec<_> = rows.iter().map(to_json).collect();
                println!("{}", serde_json::Value::Array(all));
            } else if rows.is_empty() {
                println!("no background tasks");
            } else {
                for t in &rows {
                    println!("{}", line(t));
                }
            }
            Ok(())
        }
        TaskCmd::Get { id, wait, json } => {
            let uuid = background_tasks::parse_public_id(&id)
                .ok_or_else(|| anyhow::anyhow!("{id:?} is not a task id (qtask_<uuid>)"))?;
            let task = background_tasks::get(pool, uuid, None)
                .await?
                .ok_or_else(|| anyhow::anyhow!("unknown background task {id}"))?;
            if wait {
                return follow(pool, task, json).await;
            }
            print(&task, json);
            Ok(())
        }
    }
}

/// Reads the task back until it ends, then prints it; an error if it failed.
async fn follow(pool: &PgPool, mut task: Task, json: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut warned = false;
    if !json {
        eprintln!(
            "{} started; waiting for it to end",
            background_tasks::public_id(task.id)
        );
    }
    while task.status == "running" {
        if !warned && task.updated_at == task.created_at && started.elapsed() > UNCLAIMED_WARNING {
            eprintln!(
                "nothing has taken the task up for {} s: API processes run background tasks; is one running?",
                UNCLAIMED_WARNING.as_secs()
            );
            warned = true;
        }
        tokio::time::sleep(POLL).await;
        task = background_tasks::get(pool, task.id, None)
            .await?
            .context("the task was deleted while waiting for it")?;
    }
    print(&task, json);
    if task.status == "failed" {
        bail!(
            "the task failed: {}",
            task.error.as_deref().unwrap_or("no reason recorded")
        );
    }
    Ok(())
}

fn to_json(t: &Task) -> serde_json::Value {
    serde_json::json!({
        "id": background_tasks::public_id(t.id),
        "tenant_id": t.tenant_id,
        "endpoint_id": t.endpoint_id,
        "task": t.kind,
        "status": t.status,
        "since": t.params.since,
        "until": t.params.until,
        "messages_sent": t.sent,
        "messages_skipped": t.skipped,
        "error": t.error,
        "created_at": t.created_at,
        "updated_at": t.updated_at,
    })
}

fn line(t: &Task) -> String {
    let endpoint = t
        .endpoint_id
        .map_or_else(|| "every endpoint".to_string(), |e| e.to_string());
    let mut s = format!(
        "{}  {}  {}  {}  sent {} skipped {}  since {}  updated {}",
        background_tasks::public_id(t.id),
        t.kind,
        t.status,
        endpoint,
        t.sent,
        t.skipped,
        ms(t.params.since),
        ms(t.updated_at),
    );
    if let Some(e) = &t.error {
        s.push_str(&format!("  error: {e}"));
    }
    s
}

fn ms(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn print(t: &Task, json: bool) {
    if json {
        println!("{}", to_json(t));
    } else {
        println!("{}", line(t));
    }
}
