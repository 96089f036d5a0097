//! Hookstream's PostgreSQL schema and the queries the services and the CLI run against it.
//!
//! Migrations are embedded (`migrations/`) and run by `migrate`. The outbox functions are
//! what producers and the relay use; tenants and endpoints are the control plane;
//! `subscriptions` is the routing view the dispatchers read.

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
pub mod api_keys;
pub mod applications;
pub mod attempt_row;
pub mod background_tasks;
pub mod batch;
pub mod breakers;
pub mod attempt_stats;
pub mod copy;
pub mod attempts;
pub mod dead_letters;
pub mod deadline;
pub mod event_types;
pub mod filter;
pub mod limits;
pub mod operational;
pub mod outbox;
pub mod portal;
pub mod sealing;
pub mod endpoint_headers;
pub mod endpoints;
pub mod endpoint_admin;
pub mod payload_keys;
pub mod messages;
pub mod delivery_pages;
pub mod subscriptions;
pub mod tenants;
pub mod tenant_limits;
pub mod wakeup;

use std::time::Duration;

use hookstream_config::DatabaseConfig;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use sqlx::{Connection, PgConnection, PgPool};

pub use deadline::{answered, within};
pub use filter::EventFilter;
pub use sqlx;

/// Errors the store reports. Input errors carry a message fit for a user.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Invalid(String),
    /// Input refused, and the field it is about (in the API's terms: `channels`, `filter`,
    /// `headers`, …), so an answer can point at it.
    #[error("{message}")]
    InvalidField { field: &'static str, message: String },
    #[error("{0} not found")]
    NotFound(String),
    /// The row would clash with an existing one (a unique name, uid or key).
    #[error("{0}")]
    Conflict(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(transparent)]
    Seal(#[from] sealing::SealError),
    #[error("{0}")]
    Connect(String),
    /// A tenant holds as many of something as it may (SQLSTATE HS009 from the caps of
    /// migration 0021): the message names the limit and how to raise it.
    #[error("{0}")]
    LimitReached(String),
    /// The server did not answer a round trip in time (`answered`): the connection is given up.
    #[error("postgresql did not answer within {0:?} (a server gone dark, e.g. the old primary after a failover); giving the connection up")]
    Unanswered(Duration),
}

impl StoreError {
    /// Maps an error raised by `hookstream.enqueue` (or a constraint) into a user error.
    pub(crate) fn from_db(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e {
            let code = db.code().unwrap_or_default();
            if code == "HS009" {
                let hint = db
                    .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                    .and_then(|pg| pg.hint())
                    .map(|h| format!(" ({h})"))
                    .unwrap_or_default();
                return StoreError::LimitReached(format!("{}{hint}", db.message()));
            }
            // 22xxx: data exception, 23xxx: integrity violation: the caller's input.
            if code.starts_with("22") || code.starts_with("23") {
                return StoreError::Invalid(db.message().to_string());
            }
        }
        StoreError::Database(e)
    }
}

/// How to connect, from the `[database]` section: the URL, then TLS (`ssl_mode` and the
/// certificate files override what the URL says) and the statement timeout.
pub fn connect_options(cfg: &DatabaseConfig) -> Result<PgConnectOptions, StoreError> {
    let mut options: PgConnectOptions = cfg
        .url
        .parse()
        .map_err(|e| StoreError::Invalid(format!("bad database.url ({}): {e}", cfg.redacted_url())))?;
    options = options.application_name("hookstream");
    if let Some(password) = cfg
        .file_password()
        .map_err(|e| StoreError::Invalid(e.to_string()))?
    {
        options = options.password(&password);
    }
    if let Some(mode) = &cfg.ssl_mode {
        let mode: PgSslMode = mode
            .parse()
            .map_err(|_| StoreError::Invalid(format!("bad database.ssl_mode {mode:?}")))?;
        options = options.ssl_mode(mode);
    }
    if let Some(ca) = &cfg.ssl_root_cert {
        options = options.ssl_root_cert(ca);
    }
    if let (Some(cert), Some(key)) = (&cfg.ssl_client_cert, &cfg.ssl_client_key) {
        options = options.ssl_client_cert(cert).ssl_client_key(key);
    }
    if cfg.statement_timeout_ms > 0 {
        options = options.options([("statement_timeout", cfg.statement_timeout_ms.to_string())]);
    }
    Ok(options)
}

/// Opens a connection pool. One direct connection is made first, so that a wrong password,
/// an unreachable host or a TLS failure is reported as what it is, not as a pool timeout.
pub async fn connect(cfg: &DatabaseConfig) -> Result<PgPool, StoreError> {
    let options = connect_options(cfg)?;
    PgConnection::connect_with(&options)
        .await
        .map_err(|e| StoreError::Connect(format!("cannot connect to {}: {e}", cfg.redacted_url())))?
        .close()
        .await?;
    Ok(pool_options(cfg, &options).connect_with(options).await?)
}

/// A pool that connects when first used: for a task started after the service checked the
/// database with [`connect`], which must not fail because the database went away meanwhile
/// (its writes retry while it is unavailable).
pub fn connect_lazy(cfg: &DatabaseConfig) -> Result<PgPool, StoreError> {
    let options = connect_options(cfg)?;
    Ok(pool_options(cfg, &options).connect_lazy_with(options))
}

/// Every pool's settings: its size, how long to wait for a connection, and the check that
/// frees a connection given up on a server gone dark (`deadline::release_check`).
fn pool_options(cfg: &DatabaseConfig, connect: &PgConnectOptions) -> PgPoolOptions {
    let options = PgPoolOptions::new()
        .max_connections(cfg.max_connections)
        .acquire_timeout(Duration::from_millis(cfg.acquire_timeout_ms));
    deadline::release_check(options, connect.clone(), cfg.answer_deadline())
}

/// Applies the embedded migrations (idempotent; concurrent callers serialise on a lock). They
/// run on a connection of their own without the statement timeout: building an index on a
/// large table may take longer.
pub async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    let mut conn = pool.acquire().await?;
    sqlx::query("SET statement_timeout = 0")
        .execute(&mut *conn)
        .await?;
    let result = sqlx::migrate!("./migrations").run_direct(&mut *conn).await;
    // Back to the pool with the session's usual timeout.
    let _ = sqlx::query("RESET statement_timeout").execute(&mut *conn).await;
    result?;
    Ok(())
}
