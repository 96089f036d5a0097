//! Hookstream's PostgreSQL schema and the queries the services and the CLI run against it.
//!
//! Migrations are embedded (`migrations/`) and run by `migrate`. The outbox functions are
//! what producers and the relay use; tenants and endpoints are the control plane;
//! `subscriptions` is the routing view the dispatchers read.

#![forbid(unsafe_code)]

pub mod dead_letters;
pub mod endpoints;
pub mod filter;
pub mod outbox;
pub mod sealing;
pub mod subscriptions;
pub mod tenants;
pub mod wakeup;

use std::time::Duration;

use hookstream_config::DatabaseConfig;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

pub use filter::EventFilter;
pub use sqlx;

/// Errors the store reports. Input errors carry a message fit for a user.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(transparent)]
    Seal(#[from] sealing::SealError),
}

impl StoreError {
    /// Maps an error raised by `hookstream.enqueue` (or a constraint) into a user error.
    pub(crate) fn from_db(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e {
            let code = db.code().unwrap_or_default();
            // 22xxx: data exception, 23xxx: integrity violation: the caller's input.
            if code.starts_with("22") || code.starts_with("23") {
                return StoreError::Invalid(db.message().to_string());
            }
        }
        StoreError::Database(e)
    }
}

/// Opens a connection pool.
pub async fn connect(cfg: &DatabaseConfig) -> Result<PgPool, StoreError> {
    let options: PgConnectOptions = cfg
        .url
        .parse()
        .map_err(|e| StoreError::Invalid(format!("bad database url: {e}")))?;
    let options = options.application_name("hookstream");
    // One direct connection first: a pool hides why it cannot connect behind a timeout.
    PgConnection::connect_with(&options).await?.close().await?;
    let pool = PgPoolOptions::new()
        .max_connections(cfg.max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await?;
    Ok(pool)
}

/// Applies the embedded migrations (idempotent; concurrent callers serialise on a lock).
pub async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    sqlx::migrate!("./migrations").run(pool).await?;
    Ok(())
}
