//! The receiving route: verify, check the body is JSON, store it once, answer. Nothing of the
//! application runs here: a 2xx means the row is committed, and processing happens later in
//! the workers. A duplicate (`webhook-id` already stored for the source) is answered 2xx too
//! and stores nothing.
//!
//! Answers: 204 stored or duplicate; 401 signature, timestamp or header (nothing stored); 413
//! body over the limit; 400 not JSON (or a value the database refuses); 503 the database did
//! not store it (the sender retries).
//!
//! Requests arriving together share one INSERT and one commit (`hookstream-store`'s group
//! writer), so the commit cost is paid per batch, not per request; a pool of `writers` shares
//! one queue, so while one batch commits the next free writer gathers the next.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{FromRef, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use axum::Router;
use futures::future::BoxFuture;
use hookstream_store::batch::{Batcher, Refused};
use hookstream_store::StoreError;
use prometheus::Histogram;
use sqlx::PgPool;
use tokio::sync::Notify;

use crate::config::InboxConfig;
use crate::metrics::InboxMetrics;
use crate::store::{self, NewMessage};
use crate::verify::{Rejection, Secrets, VerifiedWebhook, Verifier};

/// What storing a verified delivery did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    New,
    Duplicate,
}

/// Why a verified delivery was not stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreRejection {
    /// 400: the body is not JSON.
    #[error("body is not JSON: {0}")]
    NotJson(String),
    /// 400: the database refused the value (PostgreSQL's JSON is stricter in places).
    #[error("payload refused by the database: {0}")]
    Refused(String),
    /// 400: a value too long to be a key (`webhook-id`, the ordering key); both are indexed,
    /// and PostgreSQL refuses index entries beyond about 2.7 kB.
    #[error("{0} longer than {MAX_KEY_BYTES} bytes")]
    TooLong(&'static str),
    /// 503: the database is unavailable; the sender should retry.
    #[error("inbox unavailable, retry later")]
    Unavailable,
}

impl StoreRejection {
    pub fn status(&self) -> StatusCode {
        match self {
            StoreRejection::NotJson(_) | StoreRejection::Refused(_) | StoreRejection::TooLong(_) => {
                StatusCode::BAD_REQUEST
            }
            StoreRejection::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for StoreRejection {
    fn into_response(self) -> Response {
        (self.status(), self.to_string()).into_response()
    }
}

/// Longest `webhook-id` and ordering key stored (Hookstream's ids are 36 characters).
pub const MAX_KEY_BYTES: usize = 256;

/// A batch writer of the receiver, to run for as long as the receiver serves (supervise it:
/// it returns once every handle of its receiver is dropped).
pub type Writer = BoxFuture<'static, ()>;

struct Counters {
    ack: Histogram,
}

struct Inner {
    source: String,
    verifier: Verifier,
    ordering_key: Option<String>,
    writer: Batcher<NewMessage, bool>,
    metrics: InboxMetrics,
    counters: Counters,
}

/// One route of the inbox: cheap to clone, all clones share the writers and the secrets.
#[derive(Clone)]
pub struct Receiver {
    inner: Arc<Inner>,
}

impl FromRef<Receiver> for Verifier {
    fn from_ref(r: &Receiver) -> Verifier {
        r.inner.verifier.clone()
    }
}

/// Maps the insert's error the way the group writer needs it: a value the database refuses
/// (SQLSTATE class 22, data exception, or 23) is `Invalid`, so that the row fails alone.
fn store_error(e: sqlx::Error) -> StoreError {
    if let sqlx::Error::Database(db) = &e {
        let code = db.code().unwrap_or_default();
        if code.starts_with("22") || code.starts_with("23") {
            return StoreError::Invalid(db.message().to_string());
        }
    }
    StoreError::Database(e)
}

impl Receiver {
    /// A receiver for `cfg.source` and the writers to run beside it. Stored rows wake one
    /// waiting worker through `wake`.
    pub fn new(
        pool: PgPool,
        cfg: &InboxConfig,
        metrics: &InboxMetrics,
        wake: Arc<Notify>,
    ) -> (Self, Vec<Writer>) {
        let source = cfg.source.as_str();
        // Counted where the insert's result is known, not in the request: a sender that
        // hangs up while its row is being written ends the request's future, but the row
        // is stored all the same (and its redelivery is a duplicate).
        let received = metrics.received.with_label_values(&[source]);
        let duplicates = metrics.duplicates.with_label_values(&[source]);
        let ack = metrics.ack_seconds.with_label_values(&[source]);
        let linger = std::time::Duration::from_micros(cfg.write_linger_us);
        let store_source = cfg.source.clone();
        let (batcher, writers) = Batcher::pool(
            cfg.writers,
            cfg.write_batch,
            linger,
            move |rows: Vec<NewMessage>| {
                let (pool, source, wake) = (pool.clone(), store_source.clone(), wake.clone());
                let (received, duplicates) = (received.clone(), duplicates.clone());
                async move {
                    let result = store::insert_batch(&pool, &source, &rows)
                        .await
                        .map_err(store_error);
                    if let Ok(new) = &result {
                        let stored = new.iter().filter(|n| **n).count() as u64;
                        received.inc_by(stored);
                        duplicates.inc_by(new.len() as u64 - stored);
                        if stored > 0 {
                            wake.notify_one();
                        }
                    }
                    (rows, result)
                }
            },
        );
        let writers = writers.into_iter().map(|w| Box::pin(w) as Writer).collect();
        let receiver = Self {
            inner: Arc::new(Inner {
                source: cfg.source.clone(),
                verifier: Verifier {
                    secrets: Secrets::new(cfg.parsed_secrets()),
                    tolerance_secs: cfg.tolerance_secs,
                    max_body_bytes: cfg.max_body_bytes,
                },
                ordering_key: cfg.ordering_key.clone(),
                writer: batcher,
                counters: Counters { ack },
                metrics: metrics.clone(),
            }),
        };
        (receiver, writers)
    }

    /// The route's secrets: replace or add to them while it runs (a rotation).
    pub fn secrets(&self) -> &Secrets {
        &self.inner.verifier.secrets
    }

    pub fn source(&self) -> &str {
        &self.inner.source
    }

    /// `POST` handled by this receiver, for `Router::route(path, …)` in any router.
    pub fn method_router<S: Clone + Send + Sync + 'static>(&self) -> MethodRouter<S> {
        post(receive).with_state(self.clone())
    }

    /// A router serving the receiver at `path`.
    pub fn router(&self, path: &str) -> Router {
        Router::new().route(path, self.method_router())
    }

    /// Stores a verified delivery (for applications that verify with [`VerifiedWebhook`]
    /// and store from their own handler). A duplicate is `Ok(Stored::Duplicate)`.
    pub async fn store(&self, webhook: VerifiedWebhook) -> Result<Stored, StoreRejection> {
        let inner = &self.inner;
        let row = match to_row(webhook, inner.ordering_key.as_deref()) {
            Ok(row) => row,
            Err(e) => {
                self.reject(if matches!(e, StoreRejection::TooLong(_)) {
                    "too_long"
                } else {
                    "not_json"
                });
                return Err(e);
            }
        };
        match inner.writer.submit(row).await {
            Ok(true) => Ok(Stored::New),
            Ok(false) => Ok(Stored::Duplicate),
            Err(Refused::Invalid(why, row)) => {
                tracing::warn!(source = %inner.source, message_id = %row.message_id, error = %why, "inbox: database refused a payload");
                self.reject("not_json");
                Err(StoreRejection::Refused(why))
            }
            Err(Refused::Unavailable(why, _)) => {
                tracing::warn!(source = %inner.source, error = %why, "inbox: cannot store, answering 503");
                self.reject("unavailable");
                Err(StoreRejection::Unavailable)
            }
            Err(Refused::Closed) => {
                tracing::error!(source = %inner.source, "inbox: writer stopped, answering 503");
                self.reject("unavailable");
                Err(StoreRejection::Unavailable)
            }
        }
    }

    fn reject(&self, reason: &str) {
        self.inner
            .metrics
            .rejected
            .with_label_values(&[&self.inner.source, reason])
            .inc();
    }

    fn refused(&self, rejection: &Rejection) {
        let m = &self.inner.metrics;
        let labels = [self.inner.source.as_str(), rejection.reason()];
        if rejection.is_unauthorized() {
            m.verification_failures.with_label_values(&labels).inc();
        } else {
            m.rejected.with_label_values(&labels).inc();
        }
    }
}

/// The row for a verified body: valid UTF-8 JSON, its event type (the header, else the
/// payload's top-level `type`), its ordering key (the pointer's value; a string as is, other
/// scalars as JSON text, absent or null: none).
fn to_row(webhook: VerifiedWebhook, ordering_key: Option<&str>) -> Result<NewMessage, StoreRejection> {
    if webhook.id.len() > MAX_KEY_BYTES {
        return Err(StoreRejection::TooLong("webhook-id"));
    }
    let text =
        String::from_utf8(webhook.body.to_vec()).map_err(|_| StoreRejection::NotJson("not UTF-8".into()))?;
    let needs_value = ordering_key.is_some() || webhook.event_type.is_none();
    let (event_type, key) = if needs_value {
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| StoreRejection::NotJson(e.to_string()))?;
        let event_type = webhook
            .event_type
            .or_else(|| value.get("type").and_then(|t| t.as_str()).map(str::to_string));
        let key = ordering_key.and_then(|p| value.pointer(p)).and_then(|v| match v {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        });
        if key.as_ref().is_some_and(|k| k.len() > MAX_KEY_BYTES) {
            return Err(StoreRejection::TooLong("ordering key"));
        }
        (event_type, key)
    } else {
        serde_json::from_str::<serde::de::IgnoredAny>(&text)
            .map_err(|e| StoreRejection::NotJson(e.to_string()))?;
        (webhook.event_type, None)
    };
    Ok(NewMessage {
        message_id: webhook.id,
        event_type,
        ordering_key: key,
        payload: text,
        webhook_timestamp: webhook.timestamp,
    })
}

async fn receive(State(receiver): State<Receiver>, request: Request) -> Response {
    let started = Instant::now();
    let now = chrono::Utc::now().timestamp();
    let webhook = match receiver.inner.verifier.verify_request(request, now).await {
        Ok(w) => w,
        Err(rejection) => {
            receiver.refused(&rejection);
            if rejection.is_unauthorized() {
                tracing::debug!(source = %receiver.inner.source, reason = rejection.reason(), "inbox: verification failed");
            }
            return rejection.into_response();
        }
    };
    match receiver.store(webhook).await {
        Ok(_) => {
            receiver
                .inner
                .counters
                .ack
                .observe(started.elapsed().as_secs_f64());
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;

    fn webhook(body: &'static [u8], event_type: Option<&str>) -> VerifiedWebhook {
        VerifiedWebhook {
            id: "m1".into(),
            timestamp: 5,
            event_type: event_type.map(str::to_string),
            body: Bytes::from_static(body),
        }
    }

    #[test]
    fn rows_keep_the_exact_body_and_find_type_and_key() {
        let body = br#"{"type":"order.paid", "order": {"id": 17}}"#;
        let row = to_row(webhook(body, None), Some("/order/id")).unwrap();
        assert_eq!(row.payload.as_bytes(), body);
        assert_eq!(row.event_type.as_deref(), Some("order.paid"));
        assert_eq!(row.ordering_key.as_deref(), Some("17"));
        let row = to_row(webhook(br#"{"k":"a"}"#, Some("x.y")), Some("/missing")).unwrap();
        assert_eq!(row.event_type.as_deref(), Some("x.y"));
        assert_eq!(row.ordering_key, None);
        let row = to_row(webhook(br#"{"k":"a"}"#, Some("x.y")), Some("/k")).unwrap();
        assert_eq!(row.ordering_key.as_deref(), Some("a"));
    }

    #[test]
    fn keys_too_long_to_index_are_refused() {
        let mut w = webhook(br#"{"k":"a"}"#, Some("t"));
        w.id = "x".repeat(MAX_KEY_BYTES + 1);
        assert_eq!(
            to_row(w, None).unwrap_err(),
            StoreRejection::TooLong("webhook-id")
        );
        let body = format!(r#"{{"k":"{}"}}"#, "y".repeat(MAX_KEY_BYTES + 1));
        let w = VerifiedWebhook {
            body: Bytes::from(body),
            ..webhook(b"", Some("t"))
        };
        let e = to_row(w, Some("/k")).unwrap_err();
        assert_eq!(
            (e.status(), e),
            (StatusCode::BAD_REQUEST, StoreRejection::TooLong("ordering key"))
        );
    }

    #[test]
    fn bodies_that_are_not_json_are_refused() {
        for body in [&b"not json"[..], b"{\"a\":1} trailing", b"\xff\xfe", b""] {
            let w = VerifiedWebhook {
                body: Bytes::copy_from_slice(body),
                ..webhook(b"", Some("t"))
            };
            let e = to_row(w, None).unwrap_err();
            assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{body:?}");
        }
    }
}
