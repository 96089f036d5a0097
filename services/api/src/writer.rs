//! Message creates, written in groups: each request submits its message to one queue and
//! waits for its own answer, while whichever of the `api.message_writers` writers is free
//! stores whatever has gathered in one statement, one transaction
//! (`messages::enqueue_many`). A request is answered only after its message committed, so a
//! 202 means the event is durable; concurrent requests share the round trip and the WAL flush,
//! which is what makes thousands of creates per second possible on one database.

use std::future::Future;
use std::time::Duration;

use hookstream_store::answered;
use hookstream_store::batch::{Batcher, Refused};
use hookstream_store::messages::{self, Enqueued, NewMessage};
use hookstream_store::sqlx::PgPool;

use crate::error::ApiError;
use crate::metrics::ApiMetrics;

#[derive(Clone)]
pub struct MessageWriter {
    batcher: Batcher<NewMessage, Enqueued>,
}

impl MessageWriter {
    /// The writer handle and the writer tasks to supervise (each ends once every handle is
    /// dropped and the queue is answered).
    ///
    /// A write the database does not answer within `deadline` (`DatabaseConfig::answer_deadline`)
    /// fails as unavailable: a writer never waits for ever on a server gone dark.
    pub fn new(
        pool: PgPool,
        writers: usize,
        max_rows: usize,
        deadline: Duration,
        metrics: ApiMetrics,
    ) -> (Self, Vec<impl Future<Output = ()> + Send>) {
        let (batcher, tasks) =
            Batcher::pool(writers, max_rows, Duration::ZERO, move |rows: Vec<NewMessage>| {
                let pool = pool.clone();
                let metrics = metrics.clone();
                async move {
                    metrics.message_batch_rows.observe(rows.len() as f64);
                    let result = answered(deadline, messages::enqueue_many(&pool, &rows)).await;
                    (rows, result)
                }
            });
        (Self { batcher }, tasks)
    }

    /// Stores one message; returns its id and whether it is new.
    pub async fn write(&self, m: NewMessage) -> Result<Enqueued, ApiError> {
        match self.batcher.submit(m).await {
            Ok(done) => Ok(done),
            Err(Refused::Invalid(why, _)) => Err(refusal(why)),
            Err(Refused::Unavailable(why, _)) => Err(ApiError::Unavailable(why)),
            Err(Refused::Closed) => Err(ApiError::Unavailable("the server is shutting down".into())),
        }
    }
}

/// The group enqueue's refusal (`hookstream.enqueue`'s checks), on the field it is about (the API checks these
/// before writing; this is for what only the database knows: the payload limit, a tenant
/// deleted meanwhile).
fn refusal(why: String) -> ApiError {
    if why.starts_with("unknown tenant") {
        ApiError::not_found("application")
    } else if why.starts_with("invalid event type") {
        ApiError::body("eventType", why)
    } else if why.starts_with("idempotency key") {
        ApiError::body("eventId", why)
    } else {
        ApiError::body("payload", why)
    }
}
