//! For producer services: write a webhook event into Hookstream's outbox inside the same
//! PostgreSQL transaction as the business change, so the event exists if and only if the
//! change committed.
//!
//! ```no_run
//! # async fn example(pool: sqlx::PgPool, tenant: uuid::Uuid) -> Result<(), Box<dyn std::error::Error>> {
//! let mut tx = pool.begin().await?;
//! sqlx::query("UPDATE orders SET status = 'paid' WHERE id = 1001").execute(&mut *tx).await?;
//! let event = hookstream_producer::Event::new(tenant, "order.paid", serde_json::json!({ "order_id": 1001 }))
//!     .aggregate("order", "1001")
//!     .idempotency_key("order-1001-paid");
//! let event_id = hookstream_producer::enqueue(&mut tx, &event).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! It calls the SQL function `hookstream.enqueue`, which every other language calls directly,
//! so the checks (tenant, event type, payload size) are the same everywhere.

#![forbid(unsafe_code)]

use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// An event to deliver to the tenant's subscribed endpoints.
#[derive(Debug, Clone)]
pub struct Event {
    pub tenant_id: Uuid,
    /// Dot-separated words of letters, digits, `_` and `-`, e.g. `order.paid`.
    pub event_type: String,
    /// Events of one aggregate reach Kafka in commit order.
    pub aggregate_type: String,
    pub aggregate_id: String,
    /// A JSON object: the webhook body.
    pub payload: Value,
    /// Metadata carried with the event (not sent to receivers).
    pub headers: Value,
    /// Enqueuing the same key twice for a tenant returns the first event's id.
    pub idempotency_key: Option<String>,
}

impl Event {
    pub fn new(tenant_id: Uuid, event_type: impl Into<String>, payload: Value) -> Self {
        Self {
            tenant_id,
            event_type: event_type.into(),
            aggregate_type: String::new(),
            aggregate_id: String::new(),
            payload,
            headers: Value::Object(Default::default()),
            idempotency_key: None,
        }
    }

    pub fn aggregate(mut self, aggregate_type: impl Into<String>, aggregate_id: impl Into<String>) -> Self {
        self.aggregate_type = aggregate_type.into();
        self.aggregate_id = aggregate_id.into();
        self
    }

    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    pub fn headers(mut self, headers: Value) -> Self {
        self.headers = headers;
        self
    }
}

/// Why an event was refused. Every variant but `Database` is the caller's input.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    #[error("{0}")]
    UnknownTenant(String),
    #[error("{0}")]
    InvalidEventType(String),
    #[error("{0}")]
    PayloadNotObject(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    InvalidHeaders(String),
    #[error("{0}")]
    InvalidIdempotencyKey(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl EnqueueError {
    /// True when the input, not the database, is at fault.
    pub fn is_invalid_input(&self) -> bool {
        !matches!(self, EnqueueError::Database(_))
    }

    fn from_db(e: sqlx::Error) -> Self {
        let (code, message) = match &e {
            sqlx::Error::Database(db) => (
                db.code().unwrap_or_default().to_string(),
                db.message().to_string(),
            ),
            _ => return EnqueueError::Database(e),
        };
        match code.as_str() {
            "HS001" => EnqueueError::UnknownTenant(message),
            "HS002" => EnqueueError::InvalidEventType(message),
            "HS003" => EnqueueError::PayloadNotObject(message),
            "HS004" => EnqueueError::PayloadTooLarge(message),
            "HS005" => EnqueueError::InvalidHeaders(message),
            "HS006" => EnqueueError::InvalidIdempotencyKey(message),
            _ => EnqueueError::Database(e),
        }
    }
}

/// Writes the event into the outbox on `conn` (normally inside the caller's transaction) and
/// returns its id, a UUIDv7 that receivers see as `webhook-id`.
pub async fn enqueue(conn: &mut PgConnection, event: &Event) -> Result<Uuid, EnqueueError> {
    sqlx::query_scalar("SELECT hookstream.enqueue($1, $2, $3, $4, $5, $6, $7)")
        .bind(event.tenant_id)
        .bind(&event.event_type)
        .bind(&event.payload)
        .bind(&event.aggregate_type)
        .bind(&event.aggregate_id)
        .bind(&event.headers)
        .bind(&event.idempotency_key)
        .fetch_one(conn)
        .await
        .map_err(EnqueueError::from_db)
}
