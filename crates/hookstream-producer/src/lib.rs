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
//! so the checks (tenant, event type, payload size) are the same everywhere. The payload is
//! passed as text, so what receivers get is byte for byte what the event holds: build it with
//! [`Event::from_json_text`] to keep your own formatting and key order.

#![forbid(unsafe_code)]

use chrono::{DateTime, Utc};
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
    /// A JSON object's text: the webhook body, exactly as delivered and signed.
    pub payload: String,
    /// Metadata carried with the event (not sent to receivers).
    pub headers: Value,
    /// Enqueuing the same key twice for a tenant returns the first event's id.
    pub idempotency_key: Option<String>,
    /// Channels the event is sent to: endpoints that listen on channels get it only when they
    /// share one (at most 10 names of letters, digits and `-_.:`).
    pub channels: Vec<String>,
    /// Not delivered before this time (at most 30 days ahead).
    pub deliver_at: Option<DateTime<Utc>>,
    /// Whose data the payload is (a customer id, say; 1 to 255 bytes): its payloads are sealed
    /// with a key of their own, which `hookstream erase --subject` destroys. The subject is
    /// not delivered, and is kept only as a digest once shipped.
    pub subject: Option<String>,
}

impl Event {
    /// An event whose payload is `payload` serialised (compact, serde_json's key order).
    pub fn new(tenant_id: Uuid, event_type: impl Into<String>, payload: Value) -> Self {
        Self::from_json_text(tenant_id, event_type, payload.to_string())
    }

    /// An event whose payload is this JSON text, delivered exactly as given (spacing, key
    /// order, number formatting). `hookstream.enqueue` checks it is a JSON object.
    pub fn from_json_text(
        tenant_id: Uuid,
        event_type: impl Into<String>,
        payload: impl Into<String>,
    ) -> Self {
        Self {
            tenant_id,
            event_type: event_type.into(),
            aggregate_type: String::new(),
            aggregate_id: String::new(),
            payload: payload.into(),
            headers: Value::Object(Default::default()),
            idempotency_key: None,
            channels: Vec::new(),
            deliver_at: None,
            subject: None,
        }
    }

    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    pub fn channels<S: Into<String>>(mut self, channels: impl IntoIterator<Item = S>) -> Self {
        self.channels = channels.into_iter().map(Into::into).collect();
        self
    }

    pub fn deliver_at(mut self, at: DateTime<Utc>) -> Self {
        self.deliver_at = Some(at);
        self
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
    /// Not JSON, or JSON but not an object.
    #[error("{0}")]
    PayloadNotObject(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    InvalidHeaders(String),
    #[error("{0}")]
    InvalidIdempotencyKey(String),
    #[error("{0}")]
    InvalidChannels(String),
    #[error("{0}")]
    InvalidDeliverAt(String),
    #[error("{0}")]
    InvalidSubject(String),
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
            "HS007" => EnqueueError::InvalidChannels(message),
            "HS008" => EnqueueError::InvalidDeliverAt(message),
            "HS010" => EnqueueError::InvalidSubject(message),
            // PostgreSQL's JSON parser refusing the payload text.
            "22P02" => EnqueueError::PayloadNotObject(format!("payload is not valid JSON: {message}")),
            _ => EnqueueError::Database(e),
        }
    }
}

/// Writes the event into the outbox on `conn` (normally inside the caller's transaction) and
/// returns its id, a UUIDv7 that receivers see as `webhook-id`.
pub async fn enqueue(conn: &mut PgConnection, event: &Event) -> Result<Uuid, EnqueueError> {
    let channels = (!event.channels.is_empty()).then_some(&event.channels);
    sqlx::query_scalar("SELECT hookstream.enqueue($1, $2, $3::text, $4, $5, $6, $7, $8, $9, $10)")
        .bind(event.tenant_id)
        .bind(&event.event_type)
        .bind(&event.payload)
        .bind(&event.aggregate_type)
        .bind(&event.aggregate_id)
        .bind(&event.headers)
        .bind(&event.idempotency_key)
        .bind(channels)
        .bind(event.deliver_at)
        .bind(&event.subject)
        .fetch_one(conn)
        .await
        .map_err(EnqueueError::from_db)
}
