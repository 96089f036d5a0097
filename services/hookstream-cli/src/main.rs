//! `hookstream`: the command-line tool for operators and developers.
//!
//! With no flags it talks to the local stack that `make up` starts; `--config`, flags and
//! `HOOKSTREAM_<SECTION>__<KEY>` environment variables point it elsewhere. Errors print one
//! line and exit non-zero.

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
mod api_keys;
mod listen;
mod payload_arg;
mod probe;
mod publish;
mod secrets;
mod dlq;
mod attempts;
mod health;
mod tasks;
mod endpoint_cmd;

use std::path::PathBuf;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use hookstream_config::{DatabaseConfig, KafkaConfig, RetryConfig, SecretsConfig, Validate};
use hookstream_kafka::topics;
use hookstream_store::sqlx::PgPool;
use hookstream_store::{outbox, tenant_limits, tenants, StoreError};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Parser)]
#[command(
    name = "hookstream",
    version,
    about = "Hookstream webhook dispatcher: operate and develop against it"
)]
struct Cli {
    /// TOML file with [database] and [kafka] sections (other sections are ignored).
    #[arg(long, global = true, env = "HOOKSTREAM_CONFIG")]
    config: Option<PathBuf>,
    /// PostgreSQL URL (overrides the config).
    #[arg(long, global = true)]
    database_url: Option<String>,
    /// Kafka bootstrap servers (overrides the config).
    #[arg(long, global = true)]
    brokers: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply the database migrations.
    Migrate,
    /// Manage Kafka topics.
    #[command(subcommand)]
    Topics(TopicsCmd),
    /// Manage tenants.
    #[command(subcommand)]
    Tenant(TenantCmd),
    /// Manage endpoints.
    #[command(subcommand)]
    Endpoint(endpoint_cmd::EndpointCmd),
    /// Publish events through the outbox.
    #[command(subcommand)]
    Event(EventCmd),
    /// Inspect the outbox.
    #[command(subcommand)]
    Outbox(OutboxCmd),
    /// Dead letters: list, show, replay, stats.
    #[command(subcommand)]
    Dlq(dlq::DlqCmd),
    /// The delivery log: every attempt, with why it was made and what happened next.
    #[command(subcommand)]
    Attempts(AttemptsCmd),
    /// The pipeline at a glance: outbox backlog, consumer lag per group, retry tiers' next
    /// due records, dead letters in the last hour, disabled endpoints and open breakers.
    /// Exits 1 when a figure is past its `[health]` threshold or cannot be read.
    Health(health::HealthArgs),
    /// Run a receiver that verifies each delivery's signature and prints it.
    Listen(listen::ListenArgs),
    /// Keys that seal endpoint secrets at rest.
    #[command(subcommand)]
    Secrets(secrets::SecretsCmd),
    /// Erase every payload of a tenant, or of one subject of it: destroys their data keys, so
    /// no copy in Kafka, the dead-letter store or the message store opens again, and deletes
    /// what the outbox still holds of them. Written to the audit log (`hookstream.erasures`).
    Erase {
        /// The tenant whose payloads are erased.
        #[arg(long)]
        tenant: uuid::Uuid,
        /// Only the payloads the producer enqueued with this subject.
        #[arg(long)]
        subject: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Tenant API keys for the admin API.
    #[command(subcommand)]
    ApiKey(api_keys::ApiKeyCmd),
    /// Background tasks (replays and recoveries) that API processes run: list, get, wait.
    #[command(subcommand)]
    Task(tasks::TaskCmd),
    /// GET a health URL (e.g. http://127.0.0.1:9100/readyz): exit 0 on a 2xx answer, else 1.
    /// For health checks in images without a shell or curl; reads no configuration.
    Probe(probe::ProbeArgs),
}

#[derive(Subcommand)]
enum TopicsCmd {
    /// Create the events, DLQ, attempts and retry-tier topics if missing, with the partitions,
    /// replication and retention of `[kafka.topic_settings]` and `[retry]`; check that every
    /// tier keeps its records long enough (its delay plus `retry.retention_headroom_ms`).
    Create {
        /// Partitions of the events, DLQ and attempts topics (default: kafka.topic_settings.partitions).
        #[arg(long)]
        partitions: Option<i32>,
        /// Replication factor of every topic (default: kafka.topic_settings.replication_factor).
        #[arg(long)]
        replication: Option<i32>,
        /// `min.insync.replicas` of every topic (default: kafka.topic_settings.min_insync_replicas).
        #[arg(long)]
        min_insync_replicas: Option<i32>,
        /// Also bring existing topics' retention, timestamp type and record size limit in line.
        #[arg(long)]
        fix: bool,
    },
}

#[derive(Subcommand)]
enum AttemptsCmd {
    /// List the attempts of an event or at an endpoint, newest first.
    List(attempts::ListArgs),
}

#[derive(Subcommand)]
enum TenantCmd {
    /// Create a tenant.
    Create {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// List tenants.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show a tenant's caps (endpoints, API keys, portal tokens, portal sessions) and what it
    /// holds; with `--set`, override some first (docs/limits.md).
    Limits {
        tenant: uuid::Uuid,
        /// `RESOURCE=N` to override a cap, `RESOURCE=default` to drop the override
        /// (RESOURCE: endpoints, api_keys, portal_tokens, portal_sessions). Repeatable.
        #[arg(long = "set", value_name = "RESOURCE=N")]
        set: Vec<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum EventCmd {
    /// Write events to the outbox in one transaction; prints their ids.
    Publish(publish::EventPublish),
    /// Send one event again to one endpoint (same webhook-id), through the retry path.
    Resend(dlq::ResendArgs),
    /// An event from the delivery log: type, payload size, committed and relayed, and per
    /// endpoint its status (delivered, retrying, dead-lettered, disabled) and every attempt.
    Show(attempts::ShowArgs),
}

#[derive(Subcommand)]
enum OutboxCmd {
    /// Rows waiting and the oldest row's age.
    Backlog,
    /// Rows the relay quarantined, with reasons.
    Quarantined {
        #[arg(long)]
        json: bool,
    },
}

/// The CLI reads the services' [database], [kafka], [retry], [secrets], [api].max_running_tasks_per_tenant,
/// [delivery].allow_cidrs, the sinks' group ids and its own [health], and ignores the rest.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct CliConfig {
    database: DatabaseConfig,
    kafka: KafkaConfig,
    retry: RetryConfig,
    secrets: SecretsConfig,
    delivery: CliDelivery,
    dlq: CliSink,
    attempts: CliSink,
    health: health::HealthThresholds,
    api: CliApi,
}

/// What the CLI needs of `[api]`: the cap on a tenant's running background tasks, which
/// tasks started from the CLI count against as the API's do.
#[derive(Debug, Serialize, Deserialize)]
#[serde(default)]
struct CliApi {
    max_running_tasks_per_tenant: u32,
}

impl Default for CliApi {
    fn default() -> Self {
        Self {
            max_running_tasks_per_tenant: hookstream_store::background_tasks::DEFAULT_MAX_RUNNING_PER_TENANT,
        }
    }
}

/// What the CLI needs of `[dlq]` and `[attempts]`: the sink's consumer group (empty: the
/// default group of that sink).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct CliSink {
    sink_group_id: String,
}

impl CliSink {
    fn group_or(&self, default: &str) -> String {
        if self.sink_group_id.trim().is_empty() {
            default.to_string()
        } else {
            self.sink_group_id.clone()
        }
    }
}

/// What the CLI needs of `[delivery]`: the SSRF allow-list, which endpoint creation applies
/// to IP-literal URLs as the dispatcher does.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct CliDelivery {
    allow_cidrs: Vec<ipnet::IpNet>,
}

impl Validate for CliConfig {
    fn validate(&self) -> Result<(), hookstream_config::ConfigError> {
        self.database.validate()?;
        self.kafka.validate()?;
        self.retry.validate()?;
        self.secrets.validate()
    }
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli).await {
        eprintln!("hookstream: {}", one_line(&e));
        std::process::exit(1);
    }
}

/// The error chain on one line, skipping causes that the previous message already quotes.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in e.chain() {
        let text = cause.to_string().replace('\n', " ");
        if !last.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        last = text;
    }
    out
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // A health check must not fail on the service's configuration, nor need any.
    let command = match cli.command {
        Command::Probe(args) => return probe::run(args).await,
        command => command,
    };
    let mut cfg: CliConfig = hookstream_config::load(cli.config.as_deref())?;
    if let Some(url) = cli.database_url {
        cfg.database.url = url;
    }
    if let Some(brokers) = cli.brokers {
        cfg.kafka.brokers = brokers;
    }
    cfg.database.max_connections = 2;
    match command {
        Command::Listen(args) => listen::run(args).await,
        Command::Secrets(secrets::SecretsCmd::GenerateKey { id }) => secrets::generate_key(&id),
        Command::ApiKey(api_keys::ApiKeyCmd::HashToken) => api_keys::hash_token(),
        Command::Topics(TopicsCmd::Create {
            partitions,
            replication,
            min_insync_replicas,
            fix,
        }) => {
            if let Some(p) = partitions {
                cfg.kafka.topic_settings.partitions = p;
            }
            if let Some(r) = replication {
                cfg.kafka.topic_settings.replication_factor = r;
            }
            if let Some(n) = min_insync_replicas {
                cfg.kafka.topic_settings.min_insync_replicas = n;
            }
            if replication.is_some() || min_insync_replicas.is_some() {
                cfg.kafka.validate()?;
            }
            let mut specs = topics::main_specs(&cfg.kafka);
            if cfg.retry.enabled {
                specs.extend(topics::tier_specs(&cfg.kafka, &cfg.retry));
            }
            hookstream_kafka::ensure_topics(&cfg.kafka, &specs)
                .await
                .with_context(|| format!("creating topics on {}", cfg.kafka.brokers))?;
            if fix {
                for f in topics::fix(&cfg.kafka, &specs).await? {
                    println!(
                        "{}: {} {} -> {}",
                        f.topic,
                        f.key,
                        f.from.as_deref().unwrap_or("(default)"),
                        f.to
                    );
                }
            }
            if cfg.retry.enabled {
                topics::check_tiers(&cfg.kafka, &cfg.retry).await?;
            }
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            println!("topics ready: {}", names.join(", "));
            Ok(())
        }
        command => {
            let pool = hookstream_store::connect(&cfg.database)
                .await
                .with_context(|| format!("connecting to {}", cfg.database.redacted_url()))?;
            match command {
                Command::Dlq(cmd) => dlq::run(cmd, &pool, &cfg.kafka, &cfg.retry, &cfg.secrets).await,
                Command::ApiKey(cmd) => api_keys::run(cmd, &pool).await,
                Command::Health(a) => {
                    let groups = health::Groups {
                        dlq_sink: cfg.dlq.group_or(hookstream_config::DEFAULT_DLQ_SINK_GROUP),
                        attempt_sink: cfg
                            .attempts
                            .group_or(hookstream_config::DEFAULT_ATTEMPT_SINK_GROUP),
                    };
                    let thresholds = cfg.health.clone();
                    if !health::run(a, &pool, &cfg.kafka, &cfg.retry, groups, thresholds).await? {
                        std::process::exit(1);
                    }
                    Ok(())
                }
                Command::Attempts(AttemptsCmd::List(a)) => attempts::list(a, &pool).await,
                Command::Event(EventCmd::Show(a)) => attempts::show(a, &pool).await,
                Command::Endpoint(endpoint_cmd::EndpointCmd::Stats(a)) => attempts::stats(a, &pool).await,
                Command::Endpoint(endpoint_cmd::EndpointCmd::ReplayMissing(w)) => {
                    tasks::start(tasks::Start::ReplayMissing(w), &pool, cap(&cfg)?).await
                }
                Command::Endpoint(endpoint_cmd::EndpointCmd::BulkReplay(b)) => {
                    tasks::start(tasks::Start::BulkReplay(b), &pool, cap(&cfg)?).await
                }
                Command::Endpoint(endpoint_cmd::EndpointCmd::Recover(w)) => {
                    tasks::start(tasks::Start::Recover(w), &pool, cap(&cfg)?).await
                }
                Command::Task(cmd) => tasks::run(cmd, &pool).await,
                Command::Endpoint(cmd) => {
                    let policy = hookstream_egress::AddressPolicy::new(cfg.delivery.allow_cidrs.clone());
                    endpoint_cmd::run(cmd, &pool, &cfg.secrets, &policy).await
                }
                Command::Event(EventCmd::Publish(a)) => publish::run(a, &pool).await,
                Command::Event(EventCmd::Resend(a)) => dlq::resend(a, &pool, &cfg.kafka, &cfg.retry).await,
                command => run_db(command, &pool, &cfg).await,
            }
        }
    }
}

/// `api.max_running_tasks_per_tenant`, checked as the API checks it.
fn cap(cfg: &CliConfig) -> anyhow::Result<u32> {
    match cfg.api.max_running_tasks_per_tenant {
        0 => bail!("api.max_running_tasks_per_tenant must be at least 1"),
        n => Ok(n),
    }
}

async fn run_db(command: Command, pool: &PgPool, cfg: &CliConfig) -> anyhow::Result<()> {
    let secrets_cfg = &cfg.secrets;
    match command {
        Command::Migrate => {
            hookstream_store::migrate(pool).await?;
            println!("migrations applied");
        }
        Command::Tenant(TenantCmd::Create { name, json }) => {
            let t = tenants::create(pool, &name).await?;
            if json {
                println!("{}", serde_json::json!({ "id": t.id, "name": t.name }));
            } else {
                println!("tenant {} created: {}", t.name, t.id);
            }
        }
        Command::Tenant(TenantCmd::Limits { tenant, set, json }) => {
            for change in &set {
                let (resource, value) = change.split_once('=').ok_or_else(|| {
                    StoreError::Invalid(format!(
                        "--set {change:?}: expected RESOURCE=N or RESOURCE=default"
                    ))
                })?;
                let max = match value {
                    "default" => None,
                    n => Some(n.parse::<i32>().map_err(|_| {
                        StoreError::Invalid(format!("--set {change:?}: {n:?} is not a number or `default`"))
                    })?),
                };
                tenant_limits::set(pool, tenant, resource, max).await?;
            }
            let caps = tenant_limits::caps(pool, tenant).await?;
            if json {
                println!("{}", serde_json::to_string(&caps)?);
            } else {
                for c in caps {
                    let source = if c.overridden { "override" } else { "default" };
                    println!("{:<16} {:>6} of {:<6} ({source})", c.resource, c.held, c.max);
                }
            }
        }
        Command::Tenant(TenantCmd::List { json }) => {
            let all = tenants::list(pool).await?;
            if json {
                println!("{}", serde_json::to_string(&all)?);
            } else {
                for t in all {
                    println!("{}  {}", t.id, t.name);
                }
            }
        }
        Command::Secrets(secrets::SecretsCmd::Seal) => secrets::seal(pool, secrets_cfg).await?,
        Command::Erase {
            tenant,
            subject,
            json,
        } => {
            let erased =
                hookstream_store::payload_keys::erase(pool, tenant, subject.as_deref(), "cli").await?;
            if json {
                println!("{}", serde_json::to_string(&erased)?);
            } else {
                println!(
                    "erased: {} data key(s) destroyed, {} outbox row(s) deleted, {} stored message(s) emptied; \
                     dispatchers stop delivering them within {} s",
                    erased.keys,
                    erased.outbox_deleted,
                    erased.messages,
                    hookstream_store::payload_keys::KEY_CACHE_TTL.as_secs()
                );
            }
        }
        Command::Outbox(OutboxCmd::Backlog) => {
            let (rows, age) = outbox::backlog(pool).await?;
            println!("{rows} rows waiting, oldest {age:.1} s");
        }
        Command::Outbox(OutboxCmd::Quarantined { json }) => {
            let rows = outbox::quarantined(pool).await?;
            if json {
                println!("{}", serde_json::to_string(&rows)?);
            } else {
                for r in rows {
                    println!("{}  {}  {}  {}", r.id, r.event_id, r.event_type, r.reason);
                }
            }
        }
        Command::Listen(_)
        | Command::Probe(_)
        | Command::Topics(_)
        | Command::Secrets(secrets::SecretsCmd::GenerateKey { .. }) => {
            unreachable!("handled without a database")
        }
        Command::Dlq(_) | Command::Event(EventCmd::Resend(_)) => unreachable!("handled in dlq.rs"),
        Command::ApiKey(_) => unreachable!("handled in api_keys.rs"),
        Command::Health(_) => unreachable!("handled in health.rs"),
        Command::Attempts(_) | Command::Event(EventCmd::Show(_)) => {
            unreachable!("handled in attempts.rs")
        }
        Command::Endpoint(_) => unreachable!("handled in endpoint_cmd.rs"),
        Command::Task(_) => unreachable!("handled in tasks.rs"),
        Command::Event(EventCmd::Publish(_)) => unreachable!("handled in publish.rs"),
    }
    Ok(())
}

/// Accepts a tenant id or a tenant name.
pub(crate) async fn resolve_tenant(pool: &PgPool, text: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = Uuid::parse_str(text) {
        return match tenants::get(pool, id).await {
            Ok(t) => Ok(t.id),
            Err(StoreError::NotFound(_)) => bail!("unknown tenant {id}"),
            Err(e) => Err(e.into()),
        };
    }
    match tenants::find_by_name(pool, text).await? {
        Some(t) => Ok(t.id),
        None => bail!("unknown tenant {text:?}"),
    }
}
