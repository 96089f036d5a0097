//! The workers: claim due pending rows (`FOR UPDATE SKIP LOCKED`, in batches), run the
//! application's [`Handler`] for each inside the claiming transaction, and commit the
//! handler's changes together with the row's new state. A crash before the commit undoes
//! both (the row is claimed again, and nothing was applied); after it, both are done. So
//! every row's business change is applied exactly once.
//!
//! While every row comes out `Done`, a batch runs its handlers straight on its transaction:
//! the whole batch at once when the handler processes batches ([`Handler::handle_batch`]),
//! else each row in turn. When one does not (or the batch handler cannot do them all), that
//! batch is rolled back whole and run again with a savepoint per row: after `Done` the
//! change stays in the batch's transaction; `Defer` and `Fail` roll back to it (whatever the
//! handler wrote is undone) and schedule the row again with a backoff. The next batches keep
//! their savepoints until one comes out all `Done`. So a handler may run more than once for
//! a message, each run but the last rolled back (as after a crash): keep its effects in the
//! transaction. PostgreSQL keeps 64 subtransaction ids per transaction in
//! shared memory; a transaction with more (rows that wrote) makes every session's snapshots
//! slower while it runs, so a batch holds at most 64 rows (`batch_size`).
//!
//! Deferrals are bounded by count and by age, failures by count; past a bound the row is
//! quarantined with its reason. A panic, an error or a timeout of the handler is a failure of
//! that row only.
//!
//! Database errors end nothing: the batch is rolled back (its rows are claimed again), the
//! error is logged and counted, and the worker retries after a backoff until shutdown.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt as _;
use sqlx::{PgConnection, PgPool};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::InboxConfig;
use crate::metrics::InboxMetrics;
use crate::store::{self, Mark, Message};

/// What the handler decided for a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Processed: its changes commit with the processed mark.
    Done,
    /// Not yet (state-aware deferral: an `order.shipped` before its `order.paid`). Its changes
    /// are rolled back; it is tried again at `until`, or after the deferral backoff when
    /// `None`. Counts against `max_deferrals` and `max_deferral_age_secs`.
    Defer {
        until: Option<DateTime<Utc>>,
        reason: String,
    },
    /// Failed: its changes are rolled back and it is retried after the failure backoff, then
    /// quarantined after `max_attempts` failures.
    Fail(String),
}

impl Outcome {
    /// `Defer` after the deferral backoff.
    pub fn defer(reason: impl Into<String>) -> Self {
        Outcome::Defer {
            until: None,
            reason: reason.into(),
        }
    }

    /// `Defer` until a given time.
    pub fn defer_until(until: DateTime<Utc>, reason: impl Into<String>) -> Self {
        Outcome::Defer {
            until: Some(until),
            reason: reason.into(),
        }
    }

    pub fn fail(reason: impl Into<String>) -> Self {
        Outcome::Fail(reason.into())
    }
}

/// An error from a handler: the row counts as failed with its text.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// What [`Handler::handle_batch`] made of a whole batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batched {
    /// The handler does not process batches (the default): each message goes to
    /// [`Handler::handle`]. Return it only before writing anything.
    No,
    /// Every message is processed: the changes are on the connection and commit with the
    /// rows' processed marks.
    AllDone,
    /// Not every message can be processed now (one would be deferred or fail): the batch is
    /// rolled back, whatever was written included, and its messages run one by one through
    /// [`Handler::handle`], each with its own outcome.
    OneByOne,
}

/// The application's processing of messages. `conn` is inside the transaction that will
/// mark the messages processed: make the business change on it (and nowhere else) so that
/// both commit together.
pub trait Handler: Send + Sync + 'static {
    /// Processes one message.
    fn handle(
        &self,
        conn: &mut PgConnection,
        message: &Message,
    ) -> impl Future<Output = Result<Outcome, HandlerError>> + Send;

    /// Processes a whole claimed batch at once, when every message of it can be `Done`:
    /// a few statements for the batch instead of a few per message, which is most of the
    /// database's work at thousands of messages a second. Optional (the default answers
    /// [`Batched::No`]). Its effect must be what `handle` on each message, in order, would
    /// have done; anything it cannot decide for the whole batch it leaves to `handle` by
    /// answering [`Batched::OneByOne`]. An error, a panic or a timeout counts as `OneByOne`
    /// (logged): `handle` then decides each message's outcome.
    fn handle_batch(
        &self,
        conn: &mut PgConnection,
        messages: &[Message],
    ) -> impl Future<Output = Result<Batched, HandlerError>> + Send {
        let _ = (conn, messages);
        std::future::ready(Ok(Batched::No))
    }
}

/// A shared handler (the application keeps a handle to it).
impl<H: Handler> Handler for Arc<H> {
    fn handle(
        &self,
        conn: &mut PgConnection,
        message: &Message,
    ) -> impl Future<Output = Result<Outcome, HandlerError>> + Send {
        self.as_ref().handle(conn, message)
    }

    fn handle_batch(
        &self,
        conn: &mut PgConnection,
        messages: &[Message],
    ) -> impl Future<Output = Result<Batched, HandlerError>> + Send {
        self.as_ref().handle_batch(conn, messages)
    }
}

/// What a batch did, for metrics and logs after it committed.
struct Decided {
    message_id: String,
    received_at: DateTime<Utc>,
    mark: Mark,
    /// Invalid payload, quarantined without running the handler.
    invalid: bool,
}

impl Decided {
    /// A row the handler decided.
    fn handled(message: &Message, mark: Mark) -> Self {
        Self {
            message_id: message.message_id.clone(),
            received_at: message.received_at,
            mark,
            invalid: false,
        }
    }
}

/// How long a worker waits after a partial claim (`claim_linger_ms`); never with an ordering
/// key, where a claim holds at most one row per key however long the backlog.
fn claim_linger(cfg: &InboxConfig) -> Duration {
    match cfg.ordering_key {
        None => Duration::from_millis(cfg.claim_linger_ms),
        Some(_) => Duration::ZERO,
    }
}

/// Runs `cfg.workers` workers for `cfg.source` until `shutdown`; they finish the batch in
/// hand, commit it and return. Never returns an error for a database problem (that is
/// retried); returns when shut down.
pub async fn run_workers<H: Handler>(
    pool: PgPool,
    cfg: Arc<InboxConfig>,
    handler: Arc<H>,
    metrics: InboxMetrics,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) -> Result<(), std::convert::Infallible> {
    let mut set = tokio::task::JoinSet::new();
    for n in 0..cfg.workers.max(1) {
        set.spawn(worker(
            n,
            pool.clone(),
            cfg.clone(),
            handler.clone(),
            metrics.clone(),
            wake.clone(),
            shutdown.clone(),
        ));
    }
    while let Some(joined) = set.join_next().await {
        // A worker ends only at shutdown; a panic outside the handler (a bug here) ends this
        // task with it, which the supervisor reports.
        if let Err(e) = joined {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
    Ok(())
}

async fn worker<H: Handler>(
    n: usize,
    pool: PgPool,
    cfg: Arc<InboxConfig>,
    handler: Arc<H>,
    metrics: InboxMetrics,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let source = cfg.source.as_str();
    let errors = metrics.errors.with_label_values(&[source]);
    let poll = Duration::from_millis(cfg.poll_interval_ms);
    let linger = claim_linger(&cfg);
    let mut error_streak = 0u32;
    // Batches run without savepoints while every row comes out `Done` (one statement less
    // per row); a batch where one does not is rolled back whole and run again with them, and
    // so are the next ones until a batch with savepoints comes out all `Done` (an empty
    // claim says nothing either way, and keeps the mode).
    let mut careful = false;
    while !shutdown.is_cancelled() {
        match run_batch(&pool, &cfg, handler.as_ref(), careful).await {
            Ok(Batch::Redo) => {
                error_streak = 0;
                careful = true;
            }
            Ok(Batch::Decided(decided)) => {
                error_streak = 0;
                if careful && !decided.is_empty() && decided.iter().all(|d| d.mark == Mark::Processed) {
                    careful = false;
                }
                let claimed = decided.len();
                record(&cfg, &metrics, decided);
                if claimed as i64 >= cfg.batch_size.clamp(1, crate::config::MAX_BATCH_SIZE) {
                    // More may be waiting: let a colleague help, and go on at once.
                    wake.notify_one();
                    continue;
                }
                if claimed > 0 {
                    // A partial claim: let rows gather before the next one (fewer commits).
                    if !linger.is_zero() {
                        tokio::select! {
                            _ = tokio::time::sleep(linger) => {}
                            _ = shutdown.cancelled() => {}
                        }
                    }
                    continue;
                }
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep(poll) => {}
                    _ = shutdown.cancelled() => {}
                }
            }
            Err(e) => {
                error_streak += 1;
                errors.inc();
                let wait = Duration::from_millis((100u64 << error_streak.min(8)).min(10_000));
                tracing::warn!(source, worker = n, error = %e, retry_in_ms = wait.as_millis() as u64, "inbox worker: database error, batch rolled back");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.cancelled() => {}
                }
            }
        }
    }
    tracing::debug!(source, worker = n, "inbox worker stopped");
}

/// What one batch did.
enum Batch {
    /// Committed, with what was decided per row.
    Decided(Vec<Decided>),
    /// Run without savepoints, a row did not come out `Done`: rolled back whole, to be run
    /// again with savepoints.
    Redo,
}

/// Claims one batch, runs the handler on each row and commits. With `careful`, each row runs
/// under a savepoint; without, the first row that is not `Done` rolls the batch back
/// ([`Batch::Redo`]).
async fn run_batch<H: Handler>(
    pool: &PgPool,
    cfg: &InboxConfig,
    handler: &H,
    careful: bool,
) -> Result<Batch, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let limit = cfg.batch_size.clamp(1, crate::config::MAX_BATCH_SIZE);
    let (messages, invalid, locked) = store::claim(&mut tx, &cfg.source, limit).await?;
    if messages.is_empty() && invalid.is_empty() {
        tx.rollback().await?;
        return Ok(Batch::Decided(Vec::new()));
    }
    let mut decided = Vec::with_capacity(messages.len() + invalid.len());
    let mut marks: Vec<(i64, Mark)> = Vec::with_capacity(messages.len() + invalid.len());
    for bad in invalid {
        let mark = Mark::Quarantine {
            reason: format!("stored payload is not JSON: {}", bad.error),
            deferred: false,
        };
        marks.push((bad.id, mark.clone()));
        decided.push(Decided {
            message_id: bad.message_id,
            received_at: Utc::now(),
            mark,
            invalid: true,
        });
    }
    if !careful && !messages.is_empty() {
        match run_batch_handler(handler, &mut tx, &messages, cfg).await {
            Batched::No => {}
            Batched::AllDone => {
                for message in &messages {
                    marks.push((message.id, Mark::Processed));
                    decided.push(Decided::handled(message, Mark::Processed));
                }
                return redo_if_aborted(commit(tx, &locked, marks, decided).await);
            }
            Batched::OneByOne => {
                tx.rollback().await?;
                return Ok(Batch::Redo);
            }
        }
    }
    for (n, message) in messages.iter().enumerate() {
        // A savepoint per row, never released: `Done` keeps the row's changes in the batch,
        // anything else rolls back to it. (Releasing would cost a round trip per row and
        // gain nothing: a released subtransaction still holds its id until the commit.)
        if careful {
            savepoint(
                &mut tx,
                cfg,
                n.checked_sub(1).map(|p| &messages[p]),
                &mut marks,
                &mut decided,
            )
            .await?;
        }
        let outcome = run_handler(handler, &mut tx, message, cfg.handler_timeout_ms).await;
        if !careful && outcome != Outcome::Done {
            tx.rollback().await?;
            return Ok(Batch::Redo);
        }
        let mark = match outcome {
            Outcome::Done => Mark::Processed,
            Outcome::Defer { until, reason } => {
                sqlx::Executor::execute(&mut *tx, "ROLLBACK TO SAVEPOINT hookstream_inbox_row").await?;
                defer_mark(cfg, message, until, reason)
            }
            Outcome::Fail(reason) => {
                sqlx::Executor::execute(&mut *tx, "ROLLBACK TO SAVEPOINT hookstream_inbox_row").await?;
                fail_mark(cfg, message, reason)
            }
        };
        marks.push((message.id, mark.clone()));
        decided.push(Decided::handled(message, mark));
    }
    if careful && !messages.is_empty() {
        // The last row's `Done` is checked like the others'.
        savepoint(&mut tx, cfg, messages.last(), &mut marks, &mut decided).await?;
    }
    redo_if_aborted(commit(tx, &locked, marks, decided).await)
}

/// Whether the transaction was aborted by an earlier statement (SQLSTATE 25P02): a handler
/// answered `Done` although one of its statements had failed (it caught a unique violation
/// and took it for a duplicate, say), so nothing more runs on the transaction.
fn aborted(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some("25P02"))
}

/// A batch run without savepoints that a handler's `Done` left aborted is run again with them
/// (where the row that did it fails alone), not retried whole for good.
fn redo_if_aborted(committed: Result<Vec<Decided>, sqlx::Error>) -> Result<Batch, sqlx::Error> {
    match committed {
        Ok(decided) => Ok(Batch::Decided(decided)),
        Err(e) if aborted(&e) => Ok(Batch::Redo),
        Err(e) => Err(e),
    }
}

/// Sets the next row's savepoint. A transaction aborted by then was aborted by `previous`, the
/// row just handled, whose handler answered `Done` over a failed statement: it is rolled back
/// to its own savepoint and failed instead, and the savepoint is set again.
async fn savepoint(
    tx: &mut PgConnection,
    cfg: &InboxConfig,
    previous: Option<&Message>,
    marks: &mut [(i64, Mark)],
    decided: &mut [Decided],
) -> Result<(), sqlx::Error> {
    const SET: &str = "SAVEPOINT hookstream_inbox_row";
    match sqlx::Executor::execute(&mut *tx, SET).await {
        Ok(_) => Ok(()),
        Err(e) if aborted(&e) => {
            let Some(previous) = previous else { return Err(e) };
            sqlx::Executor::execute(&mut *tx, "ROLLBACK TO SAVEPOINT hookstream_inbox_row").await?;
            let mark = fail_mark(
                cfg,
                previous,
                "the handler answered Done, but one of its statements had failed and aborted the transaction \
                 (was a database error caught?)"
                    .into(),
            );
            if let (Some(m), Some(d)) = (marks.last_mut(), decided.last_mut()) {
                *m = (previous.id, mark.clone());
                *d = Decided::handled(previous, mark);
            }
            sqlx::Executor::execute(&mut *tx, SET).await?;
            Ok(())
        }
        Err(e) => Err(e),
    }
}

async fn commit(
    mut tx: sqlx::Transaction<'static, sqlx::Postgres>,
    locked: &store::Locked,
    marks: Vec<(i64, Mark)>,
    decided: Vec<Decided>,
) -> Result<Vec<Decided>, sqlx::Error> {
    store::mark(&mut tx, locked, &marks).await?;
    tx.commit().await?;
    Ok(decided)
}

/// The batch handler's answer; an error, a panic or a timeout is `OneByOne` (the messages'
/// own handler then decides each one's outcome).
async fn run_batch_handler<H: Handler>(
    handler: &H,
    conn: &mut PgConnection,
    messages: &[Message],
    cfg: &InboxConfig,
) -> Batched {
    let timeout_ms = cfg.handler_timeout_ms;
    let run = AssertUnwindSafe(handler.handle_batch(conn, messages)).catch_unwind();
    let why = match tokio::time::timeout(Duration::from_millis(timeout_ms), run).await {
        Ok(Ok(Ok(batched))) => return batched,
        Ok(Ok(Err(e))) => format!("error: {e}"),
        Ok(Err(panic)) => format!("panicked: {}", panic_message(&panic)),
        Err(_) => format!("timed out after {timeout_ms} ms"),
    };
    tracing::warn!(source = %cfg.source, messages = messages.len(), why = %why, "inbox: batch handler failed, handling the batch's messages one by one");
    Batched::OneByOne
}

async fn run_handler<H: Handler>(
    handler: &H,
    conn: &mut PgConnection,
    message: &Message,
    timeout_ms: u64,
) -> Outcome {
    let run = AssertUnwindSafe(handler.handle(conn, message)).catch_unwind();
    match tokio::time::timeout(Duration::from_millis(timeout_ms), run).await {
        Ok(Ok(Ok(outcome))) => outcome,
        Ok(Ok(Err(e))) => Outcome::Fail(format!("handler error: {e}")),
        Ok(Err(panic)) => Outcome::Fail(format!("handler panicked: {}", panic_message(&panic))),
        Err(_) => Outcome::Fail(format!("handler timed out after {timeout_ms} ms")),
    }
}

fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

/// A deferral: again at `until` (or after the backoff), unless it is past a bound.
pub(crate) fn defer_mark(
    cfg: &InboxConfig,
    message: &Message,
    until: Option<DateTime<Utc>>,
    reason: String,
) -> Mark {
    let count = message.deferrals.max(0) as u32 + 1;
    let now = Utc::now();
    let age = (now - message.pending_since).to_std().unwrap_or_default();
    if count > cfg.max_deferrals {
        return Mark::Quarantine {
            reason: format!(
                "deferred {} times (inbox.max_deferrals {}): {reason}",
                count - 1,
                cfg.max_deferrals
            ),
            deferred: true,
        };
    }
    if age >= Duration::from_secs(cfg.max_deferral_age_secs) {
        return Mark::Quarantine {
            reason: format!(
                "deferred for {} s (inbox.max_deferral_age_secs {}): {reason}",
                age.as_secs(),
                cfg.max_deferral_age_secs
            ),
            deferred: true,
        };
    }
    let next_at = until.unwrap_or_else(|| now + cfg.defer_backoff(count));
    Mark::Retry {
        next_at,
        reason,
        deferred: true,
    }
}

/// A failure: retried after the backoff, or quarantined once `max_attempts` are used.
pub(crate) fn fail_mark(cfg: &InboxConfig, message: &Message, reason: String) -> Mark {
    let count = message.attempts.max(0) as u32 + 1;
    if count >= cfg.max_attempts {
        return Mark::Quarantine {
            reason: format!(
                "failed {count} times (inbox.max_attempts {}): {reason}",
                cfg.max_attempts
            ),
            deferred: false,
        };
    }
    Mark::Retry {
        next_at: Utc::now() + cfg.retry_backoff(count),
        reason,
        deferred: false,
    }
}

/// After the commit: count and log what the batch did (each decision one place that does
/// both).
fn record(cfg: &InboxConfig, metrics: &InboxMetrics, decided: Vec<Decided>) {
    let source = cfg.source.as_str();
    let now = Utc::now();
    for d in decided {
        match &d.mark {
            Mark::Processed => {
                metrics.processed.with_label_values(&[source]).inc();
                let latency = (now - d.received_at).to_std().unwrap_or_default();
                metrics
                    .processing_latency_seconds
                    .with_label_values(&[source])
                    .observe(latency.as_secs_f64());
            }
            Mark::Retry {
                next_at,
                reason,
                deferred: true,
            } => {
                metrics.deferrals.with_label_values(&[source]).inc();
                tracing::info!(source, message_id = %d.message_id, reason = %reason, next_attempt_at = %next_at, "inbox: message deferred");
            }
            Mark::Retry {
                next_at,
                reason,
                deferred: false,
            } => {
                metrics.failures.with_label_values(&[source]).inc();
                tracing::warn!(source, message_id = %d.message_id, reason = %reason, next_attempt_at = %next_at, "inbox: message failed, will retry");
            }
            Mark::Quarantine { reason, deferred } => {
                let cause = if d.invalid {
                    "invalid"
                } else if *deferred {
                    metrics.deferrals.with_label_values(&[source]).inc();
                    "deferred"
                } else {
                    metrics.failures.with_label_values(&[source]).inc();
                    "failed"
                };
                metrics
                    .quarantined_total
                    .with_label_values(&[source, cause])
                    .inc();
                tracing::warn!(source, message_id = %d.message_id, cause, reason = %reason, "inbox: message quarantined");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(deferrals: i32, attempts: i32, pending_for: chrono::Duration) -> Message {
        Message {
            id: 1,
            source: "s".into(),
            message_id: "m".into(),
            event_type: None,
            ordering_key: None,
            payload: serde_json::json!({}),
            webhook_timestamp: 0,
            received_at: Utc::now() - pending_for,
            pending_since: Utc::now() - pending_for,
            attempts,
            deferrals,
            replays: 0,
        }
    }

    fn cfg() -> InboxConfig {
        InboxConfig {
            max_deferrals: 3,
            max_deferral_age_secs: 60,
            defer_backoff_ms: 100,
            max_defer_backoff_ms: 10_000,
            max_attempts: 3,
            ..Default::default()
        }
    }

    #[test]
    fn deferrals_back_off_then_quarantine_at_the_count_bound() {
        let cfg = cfg();
        let zero = chrono::Duration::zero();
        for (done, wait_ms) in [(0, 100), (1, 200), (2, 400)] {
            match defer_mark(&cfg, &message(done, 0, zero), None, "not paid".into()) {
                Mark::Retry {
                    next_at, deferred, ..
                } => {
                    assert!(deferred);
                    let ms = (next_at - Utc::now()).num_milliseconds();
                    assert!((wait_ms - 50..=wait_ms).contains(&ms), "{done}: {ms}");
                }
                other => panic!("{other:?}"),
            }
        }
        match defer_mark(&cfg, &message(3, 0, zero), None, "not paid".into()) {
            Mark::Quarantine { reason, deferred } => {
                assert!(deferred);
                assert_eq!(reason, "deferred 3 times (inbox.max_deferrals 3): not paid");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn deferrals_quarantine_at_the_age_bound_and_honour_until() {
        let cfg = cfg();
        let old = message(0, 0, chrono::Duration::seconds(61));
        assert!(matches!(
            defer_mark(&cfg, &old, None, "x".into()),
            Mark::Quarantine { .. }
        ));
        let at = Utc::now() + chrono::Duration::seconds(5);
        let fresh = message(0, 0, chrono::Duration::zero());
        assert!(matches!(
            defer_mark(&cfg, &fresh, Some(at), "x".into()),
            Mark::Retry { next_at, .. } if next_at == at
        ));
    }

    #[test]
    fn workers_linger_after_a_partial_claim_except_with_an_ordering_key() {
        let cfg = InboxConfig {
            claim_linger_ms: 10,
            ..Default::default()
        };
        assert_eq!(claim_linger(&cfg), Duration::from_millis(10));
        let ordered = InboxConfig {
            ordering_key: Some("/order_id".into()),
            ..cfg
        };
        assert_eq!(claim_linger(&ordered), Duration::ZERO);
    }

    #[test]
    fn failures_retry_then_quarantine_after_max_attempts() {
        let cfg = cfg();
        let zero = chrono::Duration::zero();
        assert!(matches!(
            fail_mark(&cfg, &message(0, 1, zero), "boom".into()),
            Mark::Retry { deferred: false, .. }
        ));
        match fail_mark(&cfg, &message(0, 2, zero), "boom".into()) {
            Mark::Quarantine { reason, deferred } => {
                assert!(!deferred);
                assert_eq!(reason, "failed 3 times (inbox.max_attempts 3): boom");
            }
            other => panic!("{other:?}"),
        }
    }
}
