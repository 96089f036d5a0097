//! What the dispatcher's table sinks (the DLQ sink, the attempt sink) share: a row submitted to
//! a batch writer (`hookstream_store::batch`) until it is committed, with backoff while the
//! database is unavailable, never skipped for that reason (invariant 1: a record's offset is
//! stored only once its row is). A row whose values the database refuses goes to the sink's
//! `refused` hook, which returns a row to store instead or gives the row up.

use std::time::Duration;

use hookstream_kafka::{Done, Fatal};
use hookstream_store::batch::{Batcher, Refused};
use hookstream_telemetry::prometheus::IntCounter;
use tokio_util::sync::CancellationToken;

/// What to do with a row the database refused as invalid.
pub(crate) enum OnRefused<T> {
    /// Store this one instead (e.g. the record as raw bytes).
    Replace(T),
    /// Keep trying the same row (with backoff).
    Retry(T),
    /// Give it up (counted and logged by the hook).
    GiveUp,
}

/// How a submission ended.
pub(crate) enum Stored<R> {
    /// Committed; the writer's result for the row.
    Row(R),
    /// The row was given up (`OnRefused::GiveUp`).
    GivenUp,
    /// Shutdown came first: the record stays unfinished and is read again.
    Unfinished,
}

impl<R> Stored<R> {
    pub(crate) fn done(&self) -> Done {
        match self {
            Stored::Unfinished => Done::Unfinished,
            _ => Done::Finished,
        }
    }
}

/// Submits `row` until it is stored (see the module docs). `errors` counts failed tries.
pub(crate) async fn store<T, R>(
    writer: &Batcher<T, R>,
    mut row: T,
    what: &'static str,
    errors: &IntCounter,
    shutdown: &CancellationToken,
    mut refused: impl FnMut(String, T) -> OnRefused<T>,
) -> Result<Stored<R>, Fatal>
where
    T: Send + 'static,
    R: Send + 'static,
{
    let mut backoff = Duration::from_millis(200);
    loop {
        let why = match writer.submit(row).await {
            Ok(r) => return Ok(Stored::Row(r)),
            Err(Refused::Invalid(why, r)) => match refused(why.clone(), r) {
                OnRefused::Replace(next) => {
                    row = next;
                    continue;
                }
                OnRefused::Retry(same) => {
                    row = same;
                    why
                }
                OnRefused::GiveUp => return Ok(Stored::GivenUp),
            },
            Err(Refused::Unavailable(why, r)) => {
                row = r;
                why
            }
            Err(Refused::Closed) => return Err(Fatal(format!("the {what} writer stopped"))),
        };
        errors.inc();
        tracing::warn!(error = %why, retry_in_ms = backoff.as_millis() as u64, "cannot store {what}, retrying");
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.cancelled() => return Ok(Stored::Unfinished),
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}
