//! The example application every receiver of this repository runs (the `hookstream-inbox-demo`
//! binary, the tests, the benchmark, and the same logic in `examples/inbox-python` and
//! `examples/inbox-node`), so one test body can judge all of them: a shop whose orders are
//! paid, then shipped.
//!
//! - `order.paid` (`{"order_id": N}`): the order exists and is paid (a paid order already
//!   shipped stays shipped).
//! - `order.shipped`: ships a paid order. An order not paid yet is deferred with the reason
//!   `order N not paid yet` (state-aware deferral: the paid event may still be on its way).
//! - anything else: recorded only.
//!
//! Every processed message adds one row to `shop_log` (no unique key on purpose: a message
//! processed twice would show as two rows), in the same transaction as the order change.
//!
//! The Rust shop processes a claimed batch in three statements when it can do all of it
//! (`handle_batch`: every paid order upserted, every shipped order updated, every message
//! logged); a batch holding a shipment of an order not paid yet, or a malformed order event,
//! goes message by message through `handle`, which defers or fails that one. (Paying before
//! shipping within a batch is what `handle` does over the batches that follow: the order ends
//! shipped either way.) The Python and Node shops process message by message.

use std::time::Duration;

use sqlx::{PgConnection, PgPool};

use crate::store::Message;
use crate::worker::{Batched, Handler, HandlerError, Outcome};

/// The business tables (idempotent).
pub const SCHEMA_SQL: &str = "
CREATE TABLE IF NOT EXISTS shop_orders (
    id          bigint PRIMARY KEY,
    status      text NOT NULL CHECK (status IN ('paid', 'shipped')),
    paid_at     timestamptz,
    shipped_at  timestamptz
);
CREATE TABLE IF NOT EXISTS shop_log (
    message_id   text NOT NULL,
    event_type   text,
    order_id     bigint,
    processed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
";

/// Creates the business tables.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('hookstream_inbox.demo'))")
        .execute(&mut *tx)
        .await?;
    // One statement at a time (`raw_sql`'s future is not `Send` in sqlx 0.8).
    for statement in SCHEMA_SQL.split(';').filter(|s| !s.trim().is_empty()) {
        sqlx::query(statement).execute(&mut *tx).await?;
    }
    tx.commit().await
}

/// The shop's handler.
#[derive(Debug, Clone, Default)]
pub struct Shop {
    /// Extra time each message takes inside its transaction (`pg_sleep`): slow processing,
    /// for tests that kill the receiver while it processes.
    pub delay: Duration,
}

impl Handler for Shop {
    async fn handle(&self, conn: &mut PgConnection, m: &Message) -> Result<Outcome, HandlerError> {
        if !self.delay.is_zero() {
            sqlx::query("SELECT pg_sleep($1)")
                .bind(self.delay.as_secs_f64())
                .execute(&mut *conn)
                .await?;
        }
        let order = m.payload.get("order_id").and_then(|v| v.as_i64());
        match (m.event_type.as_deref(), order) {
            (Some("order.paid"), Some(id)) => {
                sqlx::query(
                    "INSERT INTO shop_orders (id, status, paid_at) VALUES ($1, 'paid', clock_timestamp())
                     ON CONFLICT (id) DO UPDATE SET paid_at = clock_timestamp()",
                )
                .bind(id)
                .execute(&mut *conn)
                .await?;
            }
            (Some("order.shipped"), Some(id)) => {
                let status: Option<String> =
                    sqlx::query_scalar("SELECT status FROM shop_orders WHERE id = $1 FOR UPDATE")
                        .bind(id)
                        .fetch_optional(&mut *conn)
                        .await?;
                if status.is_none() {
                    return Ok(Outcome::defer(format!("order {id} not paid yet")));
                }
                sqlx::query(
                    "UPDATE shop_orders SET status = 'shipped', shipped_at = clock_timestamp() WHERE id = $1",
                )
                .bind(id)
                .execute(&mut *conn)
                .await?;
            }
            (Some(t @ ("order.paid" | "order.shipped")), None) => {
                return Ok(Outcome::fail(format!("{t} without a numeric order_id")));
            }
            _ => {}
        }
        sqlx::query("INSERT INTO shop_log (message_id, event_type, order_id) VALUES ($1, $2, $3)")
            .bind(&m.message_id)
            .bind(&m.event_type)
            .bind(order)
            .execute(&mut *conn)
            .await?;
        Ok(Outcome::Done)
    }

    async fn handle_batch(
        &self,
        conn: &mut PgConnection,
        messages: &[Message],
    ) -> Result<Batched, HandlerError> {
        if !self.delay.is_zero() {
            // The slow shop sleeps per message: leave it to `handle`.
            return Ok(Batched::No);
        }
        let (mut paid, mut shipped) = (Vec::new(), Vec::new());
        let (mut ids, mut types, mut orders) = (Vec::new(), Vec::new(), Vec::new());
        for m in messages {
            let order = m.payload.get("order_id").and_then(|v| v.as_i64());
            match (m.event_type.as_deref(), order) {
                (Some("order.paid"), Some(id)) => paid.push(id),
                (Some("order.shipped"), Some(id)) => shipped.push(id),
                // A failure: `handle` fails that message alone.
                (Some("order.paid" | "order.shipped"), None) => return Ok(Batched::OneByOne),
                _ => {}
            }
            ids.push(m.message_id.as_str());
            types.push(m.event_type.as_deref());
            orders.push(order);
        }
        // Sorted and distinct: an upsert may touch a row once per statement, and batches of
        // concurrent workers lock orders in the same order.
        for list in [&mut paid, &mut shipped] {
            list.sort_unstable();
            list.dedup();
        }
        if !paid.is_empty() {
            sqlx::query(
                "INSERT INTO shop_orders (id, status, paid_at)
                 SELECT id, 'paid', clock_timestamp() FROM unnest($1::int8[]) AS u(id)
                 ON CONFLICT (id) DO UPDATE SET paid_at = clock_timestamp()",
            )
            .bind(&paid)
            .execute(&mut *conn)
            .await?;
        }
        if !shipped.is_empty() {
            let updated = sqlx::query(
                "UPDATE shop_orders SET status = 'shipped', shipped_at = clock_timestamp()
                  WHERE id = ANY($1::int8[])",
            )
            .bind(&shipped)
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if updated != shipped.len() as u64 {
                // An order not paid yet: `handle` defers that shipment.
                return Ok(Batched::OneByOne);
            }
        }
        sqlx::query(
            "INSERT INTO shop_log (message_id, event_type, order_id)
             SELECT * FROM unnest($1::text[], $2::text[], $3::int8[])",
        )
        .bind(&ids)
        .bind(&types)
        .bind(&orders)
        .execute(&mut *conn)
        .await?;
        Ok(Batched::AllDone)
    }
}

/// The demo receiver's configuration: the shared `[database]` and `[telemetry]` sections,
/// `[inbox]`, and `[demo]`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub database: hookstream_config::DatabaseConfig,
    pub telemetry: hookstream_config::TelemetryConfig,
    pub inbox: crate::InboxConfig,
    pub demo: DemoSettings,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DemoSettings {
    /// `host:port` the webhook route listens on (port 0 picks one; it is logged).
    pub listen: String,
    /// The route's path.
    pub path: String,
    /// Extra processing time per message (see [`Shop::delay`]).
    pub handler_delay_ms: u64,
    /// How long the HTTP server and the workers may take to drain on shutdown.
    pub drain_ms: u64,
}

impl Default for DemoSettings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8088".into(),
            path: "/webhooks/hookstream".into(),
            handler_delay_ms: 0,
            drain_ms: 10_000,
        }
    }
}

impl hookstream_config::Validate for Config {
    fn validate(&self) -> Result<(), hookstream_config::ConfigError> {
        use hookstream_config::ConfigError;
        self.database.validate()?;
        self.telemetry.validate()?;
        self.inbox.validate()?;
        if self.demo.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(ConfigError::new(format!(
                "demo.listen must be ip:port, not {:?}",
                self.demo.listen
            )));
        }
        if !self.demo.path.starts_with('/') {
            return Err(ConfigError::new("demo.path must start with /"));
        }
        Ok(())
    }
}

/// Why the demo receiver stopped.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Store(#[from] hookstream_store::StoreError),
    #[error(transparent)]
    Inbox(#[from] crate::InboxError),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("cannot listen on {0}: {1}")]
    Listen(String, std::io::Error),
    #[error(transparent)]
    Task(#[from] hookstream_telemetry::TaskFailed),
}

impl hookstream_telemetry::ServiceError for DemoError {}

/// Runs the demo receiver until `shutdown`: migrates the inbox and the shop's tables,
/// serves the route, processes with [`Shop`]. Ready once it listens.
pub async fn run(
    cfg: Config,
    registry: &prometheus::Registry,
    health: hookstream_telemetry::Health,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), DemoError> {
    let pool = hookstream_store::connect(&cfg.database).await?;
    crate::migrate(&pool).await?;
    migrate(&pool).await?;
    let metrics = crate::InboxMetrics::register(registry);
    let drain = Duration::from_millis(cfg.demo.drain_ms);
    let mut supervisor = hookstream_telemetry::Supervisor::new(health.clone(), shutdown.clone(), drain);
    let shop = Shop {
        delay: Duration::from_millis(cfg.demo.handler_delay_ms),
    };
    let receiver = crate::start(pool, cfg.inbox.clone(), shop, &metrics, &mut supervisor);
    let app = receiver.router(&cfg.demo.path);
    drop(receiver);
    let listener = tokio::net::TcpListener::bind(&cfg.demo.listen)
        .await
        .map_err(|e| DemoError::Listen(cfg.demo.listen.clone(), e))?;
    let addr = hookstream_telemetry::local_addr(&listener);
    tracing::info!(%addr, path = %cfg.demo.path, source = %cfg.inbox.source, "inbox demo receiving");
    let stop = shutdown.clone();
    supervisor.spawn("http", async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    });
    health.set_ready(true);
    supervisor.wait().await?;
    Ok(())
}
