//! `hookstream-inbox`: administration of a receiver's inbox — apply the schema, show the
//! counts, list and replay quarantined messages. Talks to the receiver's database
//! (`--database-url` or `HOOKSTREAM_DATABASE__URL`), whichever language the receiver is in.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hookstream_inbox::Selection;
use sqlx::postgres::PgPoolOptions;

#[derive(Parser)]
#[command(version, about = "Administration of a receiver's hookstream_inbox.inbox")]
struct Cli {
    /// The receiver's database.
    #[arg(long, env = "HOOKSTREAM_DATABASE__URL")]
    database_url: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Creates or upgrades the inbox table (idempotent).
    Migrate,
    /// Pending, deferred, quarantined and processed counts per source.
    Stats {
        #[arg(long)]
        json: bool,
    },
    /// Deletes processed messages older than the retention (what a Rust receiver's
    /// maintenance does by itself; for receivers in other languages, from cron).
    Prune {
        #[arg(long)]
        source: String,
        #[arg(long, default_value_t = 168)]
        retention_hours: u64,
    },
    /// Quarantined messages.
    Quarantine {
        #[command(subcommand)]
        command: QuarantineCommand,
    },
}

#[derive(Subcommand)]
enum QuarantineCommand {
    /// Lists quarantined messages, oldest quarantine first, with their reasons.
    List {
        #[arg(long)]
        source: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Puts quarantined messages back to pending, due now (their bounds start afresh).
    Replay {
        #[arg(long)]
        source: String,
        /// Inbox row ids (from `list`); repeat the flag for several.
        #[arg(long = "id", required_unless_present = "all", conflicts_with = "all")]
        ids: Vec<i64>,
        /// Every quarantined message of the source.
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hookstream-inbox: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let options: sqlx::postgres::PgConnectOptions = cli
        .database_url
        .parse()
        .map_err(|e| anyhow::anyhow!("--database-url is not a PostgreSQL URL: {e}"))?;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to the database: {e}"))?;
    match cli.command {
        Command::Migrate => {
            hookstream_inbox::migrate(&pool).await?;
            println!("{} is up to date", hookstream_inbox::TABLE);
        }
        Command::Stats { json } => {
            let stats = hookstream_inbox::store::stats_all(&pool).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                println!(
                    "{:<24} {:>10} {:>10} {:>12} {:>12} {:>12}",
                    "SOURCE", "PENDING", "DEFERRED", "QUARANTINED", "PROCESSED", "OLDEST (s)"
                );
                for s in stats {
                    println!(
                        "{:<24} {:>10} {:>10} {:>12} {:>12} {:>12.1}",
                        s.source,
                        s.pending,
                        s.deferred,
                        s.quarantined,
                        s.processed,
                        s.oldest_pending_age_seconds
                    );
                }
            }
        }
        Command::Prune {
            source,
            retention_hours,
        } => {
            anyhow::ensure!(retention_hours > 0, "--retention-hours must be at least 1");
            let cfg = hookstream_inbox::InboxConfig {
                source: source.clone(),
                retention_hours,
                ..Default::default()
            };
            let metrics = hookstream_inbox::InboxMetrics::unregistered();
            let n = hookstream_inbox::maintenance::prune_once(&pool, &cfg, &metrics).await?;
            println!("pruned {n} processed message(s) of {source} older than {retention_hours} h");
        }
        Command::Quarantine {
            command: QuarantineCommand::List { source, limit, json },
        } => {
            let rows = hookstream_inbox::list_quarantined(&pool, source.as_deref(), limit).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!(
                    "{:>8}  {:<16}  {:<38}  {:<18}  {:>3}/{:<3}  REASON",
                    "ID", "SOURCE", "MESSAGE ID", "EVENT TYPE", "DEF", "ERR"
                );
                for r in rows {
                    println!(
                        "{:>8}  {:<16}  {:<38}  {:<18}  {:>3}/{:<3}  {}",
                        r.id,
                        r.source,
                        r.message_id,
                        r.event_type.unwrap_or_default(),
                        r.deferrals,
                        r.attempts,
                        r.reason.unwrap_or_default()
                    );
                }
            }
        }
        Command::Quarantine {
            command:
                QuarantineCommand::Replay {
                    source,
                    ids,
                    all,
                    json,
                },
        } => {
            let selection = if all { Selection::All } else { Selection::Ids(ids) };
            let replayed = hookstream_inbox::replay_quarantined(&pool, &source, &selection, None).await?;
            if json {
                println!("{}", serde_json::json!({ "replayed": replayed }));
            } else {
                println!("replayed {} message(s) of {source}", replayed.len());
            }
        }
    }
    Ok(())
}
