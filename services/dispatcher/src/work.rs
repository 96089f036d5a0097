//! A piece of work as every role handles it: where it was read (`Read`), how it ended
//! (`Finished`, and `done` for the tracked consumer), and the small helpers each role's loop
//! uses. Below everything else in the dispatcher.

use hookstream_kafka::{Done, Fatal, HandoffError};
use hookstream_proto::SourcePosition;
use tokio_util::sync::CancellationToken;

/// The dead-letter class of a record no topic on its way would take.
pub(crate) const TOO_LARGE: &str = "record_too_large";

/// Where the work in hand was read. `origin` is the event's place in the events topic, kept
/// through retries and replays (what people are shown); `record` is the record handled now:
/// that same record on the first path, a retry tier's record on a retry. Dead letters carry
/// both, and the DLQ sink stores one per handled record and endpoint, so a record handled
/// again after a crash adds no second dead letter.
#[derive(Debug, Clone)]
pub(crate) struct Read {
    pub(crate) origin: SourcePosition,
    pub(crate) record: SourcePosition,
}

impl Read {
    /// The first path: the record handled is the event's origin.
    pub(crate) fn first(record: SourcePosition) -> Self {
        Self {
            origin: record.clone(),
            record,
        }
    }
}

/// How a piece of work ended, for the tracked consumer: `Ok(true)` finished or durably
/// handed on, `Ok(false)` left undone by shutdown, `Err` the process must restart.
pub(crate) type Finished = Result<bool, Fatal>;

/// A hand-off's result as a `Finished`.
pub(crate) fn handed(result: Result<(i32, i64), HandoffError>) -> Finished {
    match result {
        Ok(_) => Ok(true),
        Err(HandoffError::Shutdown) => Ok(false),
        Err(HandoffError::Fatal(reason)) => Err(Fatal(reason)),
        Err(e @ HandoffError::Lost(_)) => Err(Fatal(e.to_string())),
        // The hand-offs make a refused record smaller or dead-letter it before this.
        Err(e @ HandoffError::TooLarge { .. }) => Err(Fatal(e.to_string())),
    }
}

/// Sleeps unless shutting down; false when shutting down.
pub(crate) async fn pause(shutdown: &CancellationToken, d: std::time::Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = shutdown.cancelled() => false,
    }
}

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A `Finished` as the tracked consumer wants it.
pub(crate) fn done(result: Finished) -> Result<Done, Fatal> {
    result.map(|finished| {
        if finished {
            Done::Finished
        } else {
            Done::Unfinished
        }
    })
}
