//! The receiving side of Hookstream: turn at-least-once deliveries into exactly-once effects.
//!
//! A receiver built on this crate does three things, each its own module:
//!
//! - **Receive** ([`receive`], [`verify`]): per request, verify the Standard Webhooks
//!   signature (any of the route's secrets, ± 5 minutes, constant time), check the body is
//!   JSON within the size limit, and store it in the receiver's own PostgreSQL table
//!   `hookstream_inbox.inbox` with `INSERT … ON CONFLICT (source, message_id) DO NOTHING`.
//!   The answer (204) comes once the row is committed and before any business logic runs; a
//!   duplicate is answered 204 and stores nothing. 401 bad signature (nothing stored), 413
//!   too large, 400 not JSON, 503 when the database did not store it.
//! - **Process** ([`worker`]): workers claim due rows (`FOR UPDATE SKIP LOCKED`, batches) and
//!   call the application's [`Handler`] inside the transaction that marks each row
//!   processed, so the business change and "processed" commit together. The handler answers
//!   [`Outcome::Done`], [`Outcome::Defer`] (not yet: retried with backoff, bounded by count
//!   and age, then quarantined) or [`Outcome::Fail`] (retried with backoff, then
//!   quarantined). Optionally one row at a time per ordering key. A handler may also
//!   process a whole batch in a few statements ([`Handler::handle_batch`]); a batch it
//!   cannot finish whole goes row by row through `handle`.
//! - **Keep** ([`maintenance`], [`store`]): gauges, retention of processed rows (the dedup
//!   window), listing and replaying quarantined rows (also the `hookstream-inbox` binary).
//!
//! The schema is the embedded migration in `migrations/`, plain SQL that receivers in other
//! languages apply as it is (`examples/inbox-python`, `examples/inbox-node`); `docs/receiving.md`
//! describes the table and every query. The table lives in the schema `hookstream_inbox`, and
//! so does its migration history: sqlx 0.8 keeps one `_sqlx_migrations` table per schema, so
//! the application's own migrations and Hookstream's (in the same database, for a service
//! that both sends and receives) never see the inbox's.
//!
//! ```no_run
//! # async fn example(pool: sqlx::PgPool, mut supervisor: hookstream_telemetry::Supervisor) -> anyhow::Result<()> {
//! use hookstream_inbox::{Handler, HandlerError, InboxConfig, InboxMetrics, Message, Outcome};
//!
//! struct Orders;
//! impl Handler for Orders {
//!     async fn handle(&self, conn: &mut sqlx::PgConnection, m: &Message) -> Result<Outcome, HandlerError> {
//!         sqlx::query("INSERT INTO orders (id) VALUES ($1) ON CONFLICT DO NOTHING")
//!             .bind(m.payload["order_id"].as_i64())
//!             .execute(conn)
//!             .await?;
//!         Ok(Outcome::Done)
//!     }
//! }
//!
//! hookstream_inbox::migrate(&pool).await?;
//! let metrics = InboxMetrics::register(&prometheus::Registry::new());
//! let cfg = InboxConfig { secrets: vec!["whsec_…".into()], ..Default::default() };
//! let receiver = hookstream_inbox::start(pool, cfg, Orders, &metrics, &mut supervisor);
//! let app: axum::Router = axum::Router::new().route("/webhooks/hookstream", receiver.method_router());
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
pub mod config;
pub mod metrics;
pub mod store;
pub mod maintenance;
pub mod verify;
pub mod receive;
pub mod worker;
pub mod demo;

use std::sync::Arc;

use hookstream_telemetry::Supervisor;
use sqlx::PgPool;
use tokio::sync::Notify;

pub use config::{InboxConfig, SecretText};
pub use metrics::InboxMetrics;
pub use receive::{Receiver, StoreRejection, Stored};
pub use store::{Message, Quarantined, Selection, Stats};
pub use verify::{Rejection, Secrets, VerifiedWebhook, Verifier};
pub use worker::{Batched, Handler, HandlerError, Outcome};

/// The schema and table the inbox lives in.
pub const TABLE: &str = "hookstream_inbox.inbox";

/// Errors of the inbox's own operations (migrations, administration).
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("inbox migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Creates or upgrades `hookstream_inbox.inbox` (idempotent; concurrent callers wait for each
/// other). Runs on a connection of its own whose `search_path` is `hookstream_inbox`, so
/// that sqlx's migration history is `hookstream_inbox._sqlx_migrations`.
pub async fn migrate(pool: &PgPool) -> Result<(), InboxError> {
    let mut conn = pool.acquire().await?;
    let lock = "SELECT pg_advisory_lock(hashtext('hookstream_inbox.migrate'))";
    sqlx::query(lock).execute(&mut *conn).await?;
    let result = migrate_on(&mut conn).await;
    let mut reset = Ok(());
    for sql in [
        "RESET search_path",
        "RESET statement_timeout",
        "SELECT pg_advisory_unlock(hashtext('hookstream_inbox.migrate'))",
    ] {
        if let Err(e) = sqlx::query(sql).execute(&mut *conn).await {
            reset = Err(e);
            break;
        }
    }
    if reset.is_err() {
        // Never hand a connection with another search path back to the pool.
        conn.detach();
    }
    result
}

async fn migrate_on(conn: &mut sqlx::PgConnection) -> Result<(), InboxError> {
    sqlx::query("SET statement_timeout = 0")
        .execute(&mut *conn)
        .await?;
    sqlx::query("CREATE SCHEMA IF NOT EXISTS hookstream_inbox")
        .execute(&mut *conn)
        .await?;
    sqlx::query("SET search_path TO hookstream_inbox")
        .execute(&mut *conn)
        .await?;
    MIGRATOR.run_direct(conn).await?;
    Ok(())
}

/// Starts one inbox route under `supervisor`: its batch writers, `cfg.workers` workers
/// running `handler`, and the maintenance (gauges, retention). Returns the receiver to route
/// (`receiver.method_router()`). Each task runs until the supervisor's shutdown token is
/// cancelled; the writers end once the receiver and every clone of it are dropped (after the
/// HTTP server drained).
pub fn start<H: Handler>(
    pool: PgPool,
    cfg: InboxConfig,
    handler: H,
    metrics: &InboxMetrics,
    supervisor: &mut Supervisor,
) -> Receiver {
    let wake = Arc::new(Notify::new());
    let cfg = Arc::new(cfg);
    let (receiver, writers) = Receiver::new(pool.clone(), &cfg, metrics, wake.clone());
    let name =
        |what: &str| -> &'static str { Box::leak(format!("inbox {what} ({})", cfg.source).into_boxed_str()) };
    for writer in writers {
        supervisor.spawn(name("writer"), async move {
            writer.await;
            Ok::<(), std::convert::Infallible>(())
        });
    }
    let shutdown = supervisor.shutdown().clone();
    supervisor.spawn(
        name("workers"),
        worker::run_workers(
            pool.clone(),
            cfg.clone(),
            Arc::new(handler),
            metrics.clone(),
            wake,
            shutdown.clone(),
        ),
    );
    supervisor.spawn(
        name("maintenance"),
        maintenance::run_maintenance(pool, cfg.clone(), metrics.clone(), shutdown),
    );
    receiver
}

/// Quarantined rows (of one source, or all), oldest quarantine first.
pub async fn list_quarantined(
    pool: &PgPool,
    source: Option<&str>,
    limit: i64,
) -> Result<Vec<Quarantined>, InboxError> {
    Ok(store::list_quarantined(pool, source, limit).await?)
}

/// Puts quarantined rows of `source` back to pending (due now, bounds afresh). Returns the
/// ids replayed; `metrics`, when given, counts them.
pub async fn replay_quarantined(
    pool: &PgPool,
    source: &str,
    selection: &Selection,
    metrics: Option<&InboxMetrics>,
) -> Result<Vec<i64>, InboxError> {
    let ids = store::replay_quarantined(pool, source, selection).await?;
    if let Some(m) = metrics {
        m.replayed.with_label_values(&[source]).inc_by(ids.len() as u64);
    }
    tracing::info!(source, rows = ids.len(), "inbox: quarantined messages replayed");
    Ok(ids)
}
