//! Group writes: many tasks each submit one row and wait for its own result, while one writer
//! stores whatever has gathered in a single statement. A commit per row costs a round trip and
//! a WAL flush; a commit per batch shares them, so a sink keeps up with thousands of rows per
//! second where row-at-a-time managed a few hundred.
//!
//! Batches form greedily: the writer takes the first waiting row, then every row already
//! queued behind it (up to `max_rows`), and writes. No row waits for a batch to fill: while one
//! batch is being written the next one gathers. A writer made `with_linger` waits up to that
//! long after a batch's first row for more (or until `max_rows`): fewer, larger statements for
//! that much more latency. A batch the database refuses as invalid is
//! written again row by row, so one bad row fails alone. Any other failure is handed back to
//! every submitter of the batch with its row, and each decides whether to retry (they own the
//! backoff and the shutdown). The writer stops when every `Batcher` handle is dropped: rows
//! submitted before that are always answered.
//!
//! A [`Batcher::pool`] runs several writers on one queue: whichever writer is free gathers
//! the next batch, so while one commits another is already gathering, and a row never waits
//! behind a busy writer while another one idles (as it would with a handle per writer, taken
//! in turn).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Mutex};

use crate::StoreError;

/// Why a submitted row was not written; the row comes back when the caller may retry it.
#[derive(Debug, thiserror::Error)]
pub enum Refused<T> {
    /// The database refused this row's values (retrying it as is will not help).
    #[error("{0}")]
    Invalid(String, T),
    /// The batch failed for a reason that may pass (the database is down, a timeout).
    #[error("{0}")]
    Unavailable(String, T),
    /// The writer is gone: it stopped or was dropped while rows were waiting.
    #[error("batch writer stopped")]
    Closed,
}

type Reply<T, R> = oneshot::Sender<Result<R, Refused<T>>>;

/// A handle that submits rows to a writer (or a pool of them). Cheap to clone.
pub struct Batcher<T, R> {
    tx: mpsc::Sender<(T, Reply<T, R>)>,
}

impl<T, R> Clone for Batcher<T, R> {
    fn clone(&self) -> Self {
        Self { tx: self.tx.clone() }
    }
}

impl<T: Send + 'static, R: Send + 'static> Batcher<T, R> {
    /// A handle and the writer to run (spawn or supervise it). `write` stores a batch and
    /// returns one result per row, in order. At most `max_rows` rows go in one call, and at
    /// most `max_rows` more wait behind it.
    pub fn new<W, Fut>(max_rows: usize, write: W) -> (Self, impl Future<Output = ()> + Send)
    where
        W: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = (Vec<T>, Result<Vec<R>, StoreError>)> + Send,
    {
        Self::with_linger(max_rows, Duration::ZERO, write)
    }

    /// As [`Batcher::new`], and a batch waits up to `linger` after its first row for more
    /// rows (until `max_rows` have gathered) before it is written.
    pub fn with_linger<W, Fut>(
        max_rows: usize,
        linger: Duration,
        write: W,
    ) -> (Self, impl Future<Output = ()> + Send)
    where
        W: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = (Vec<T>, Result<Vec<R>, StoreError>)> + Send,
    {
        let (batcher, mut writers) = Self::pool(1, max_rows, linger, write);
        (batcher, writers.remove(0))
    }

    /// `writers` writers sharing one queue (see the module's text), each as
    /// [`Batcher::with_linger`]; at most `max_rows` rows per writer wait in the queue.
    pub fn pool<W, Fut>(
        writers: usize,
        max_rows: usize,
        linger: Duration,
        write: W,
    ) -> (Self, Vec<impl Future<Output = ()> + Send>)
    where
        W: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = (Vec<T>, Result<Vec<R>, StoreError>)> + Send,
    {
        let (max_rows, writers) = (max_rows.max(1), writers.max(1));
        let (tx, rx) = mpsc::channel(max_rows * writers);
        let (rx, write) = (Arc::new(Mutex::new(rx)), Arc::new(write));
        let tasks = (0..writers)
            .map(|_| writer(rx.clone(), max_rows, linger, write.clone()))
            .collect();
        (Self { tx }, tasks)
    }

    /// Submits a row and waits until it is written (or refused).
    pub async fn submit(&self, row: T) -> Result<R, Refused<T>> {
        let (reply, answer) = oneshot::channel();
        if self.tx.send((row, reply)).await.is_err() {
            return Err(Refused::Closed);
        }
        // No answer: the writer was dropped (say, aborted) with the row.
        answer.await.unwrap_or(Err(Refused::Closed))
    }
}

type Queue<T, R> = Arc<Mutex<mpsc::Receiver<(T, Reply<T, R>)>>>;

/// Gathers the next batch into `pending`, holding the queue only while gathering (so the
/// next free writer of a pool gathers while this one writes). False once every handle is
/// dropped and the queue is empty.
async fn gather<T, R>(
    queue: &Queue<T, R>,
    pending: &mut Vec<(T, Reply<T, R>)>,
    max_rows: usize,
    linger: Duration,
) -> bool {
    let mut rx = queue.lock().await;
    if rx.recv_many(pending, max_rows).await == 0 {
        return false;
    }
    if !linger.is_zero() {
        let until = tokio::time::Instant::now() + linger;
        while pending.len() < max_rows {
            let room = max_rows - pending.len();
            match tokio::time::timeout_at(until, rx.recv_many(pending, room)).await {
                Ok(0) | Err(_) => break, // every handle dropped, or the linger is over
                Ok(_) => {}
            }
        }
    }
    true
}

async fn writer<T, R, W, Fut>(queue: Queue<T, R>, max_rows: usize, linger: Duration, write: Arc<W>)
where
    W: Fn(Vec<T>) -> Fut,
    Fut: Future<Output = (Vec<T>, Result<Vec<R>, StoreError>)>,
{
    let mut pending = Vec::with_capacity(max_rows);
    while gather(&queue, &mut pending, max_rows, linger).await {
        let (rows, replies): (Vec<T>, Vec<Reply<T, R>>) = pending.drain(..).unzip();
        let (rows, result) = write(rows).await;
        match result {
            Ok(results) if results.len() == rows.len() => {
                for (reply, r) in replies.into_iter().zip(results) {
                    let _ = reply.send(Ok(r));
                }
            }
            Ok(results) => {
                let why = format!(
                    "batch write returned {} results for {} rows",
                    results.len(),
                    rows.len()
                );
                answer_all(rows, replies, |row| Refused::Unavailable(why.clone(), row));
            }
            Err(StoreError::Invalid(why)) if rows.len() == 1 => {
                answer_all(rows, replies, |row| Refused::Invalid(why.clone(), row));
            }
            // One row spoils the statement: write them one by one so it fails alone.
            Err(StoreError::Invalid(_)) => {
                for (row, reply) in rows.into_iter().zip(replies) {
                    let (mut back, result) = write(vec![row]).await;
                    let answer = match (result, back.pop()) {
                        (Ok(mut r), _) if r.len() == 1 => Ok(r.remove(0)),
                        (Err(StoreError::Invalid(why)), Some(row)) => Err(Refused::Invalid(why, row)),
                        (Err(e), Some(row)) => Err(Refused::Unavailable(e.to_string(), row)),
                        (Ok(_), Some(row)) => {
                            Err(Refused::Unavailable("batch write returned no result".into(), row))
                        }
                        (_, None) => Err(Refused::Closed),
                    };
                    let _ = reply.send(answer);
                }
            }
            Err(e) => {
                let why = e.to_string();
                answer_all(rows, replies, |row| Refused::Unavailable(why.clone(), row));
            }
        }
    }
}

fn answer_all<T, R>(rows: Vec<T>, replies: Vec<Reply<T, R>>, refuse: impl Fn(T) -> Refused<T>) {
    for (row, reply) in rows.into_iter().zip(replies) {
        let _ = reply.send(Err(refuse(row)));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    type Written = std::future::Ready<(Vec<u32>, Result<Vec<u32>, StoreError>)>;

    /// Writes even numbers; a batch holding an odd one is refused as invalid.
    fn evens(calls: Arc<AtomicUsize>) -> impl Fn(Vec<u32>) -> Written {
        move |rows: Vec<u32>| {
            calls.fetch_add(1, Ordering::SeqCst);
            let result = if rows.iter().any(|r| r % 2 == 1) {
                Err(StoreError::Invalid("odd".into()))
            } else {
                Ok(rows.iter().map(|r| r * 10).collect())
            };
            std::future::ready((rows, result))
        }
    }

    #[tokio::test]
    async fn rows_submitted_together_share_a_write_and_each_gets_its_own_answer() {
        let calls = Arc::new(AtomicUsize::new(0));
        let (batcher, writer) = Batcher::new(64, evens(calls.clone()));
        let submits: Vec<_> = (0..64u32)
            .map(|i| {
                let b = batcher.clone();
                tokio::spawn(async move { b.submit(i * 2).await.map_err(|r| r.to_string()) })
            })
            .collect();
        drop(batcher);
        let writer = tokio::spawn(writer);
        for (i, s) in submits.into_iter().enumerate() {
            assert_eq!(s.await.unwrap(), Ok(i as u32 * 20));
        }
        writer.await.unwrap();
        let n = calls.load(Ordering::SeqCst);
        assert!(n < 64, "64 rows took {n} writes: not batched");
    }

    #[tokio::test]
    async fn a_lingering_writer_waits_its_linger_for_more_rows() {
        let linger = Duration::from_millis(200);
        let calls = Arc::new(AtomicUsize::new(0));
        let (batcher, writer) = Batcher::with_linger(64, linger, evens(calls.clone()));
        let writer = tokio::spawn(writer);
        // A second row 10 ms after the first: without the linger the first is written alone
        // by then; with it, they share one write.
        let started = std::time::Instant::now();
        let b = batcher.clone();
        let first = tokio::spawn(async move { b.submit(2).await.ok() });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(batcher.submit(4).await.ok(), Some(40));
        assert_eq!(first.await.unwrap(), Some(20));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "one write for rows within the linger"
        );
        assert!(started.elapsed() >= linger, "answered before the linger was over");
        // A row alone waits the linger out, then is written.
        let lone = std::time::Instant::now();
        assert_eq!(batcher.submit(6).await.ok(), Some(60));
        assert!(lone.elapsed() >= linger);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        drop(batcher);
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn a_pool_writes_the_next_batch_while_one_writer_is_stuck_committing() {
        // Row 1's write hangs until released; row 2, submitted behind it, must be written
        // by the other writer meanwhile instead of queueing behind the stuck one.
        let release = Arc::new(tokio::sync::Notify::new());
        let gate = release.clone();
        let (batcher, writers) = Batcher::pool(2, 64, Duration::ZERO, move |rows: Vec<u32>| {
            let gate = gate.clone();
            async move {
                if rows.contains(&1) {
                    gate.notified().await;
                }
                let written = rows.iter().map(|r| r * 10).collect();
                (rows, Ok(written))
            }
        });
        let writers: Vec<_> = writers.into_iter().map(tokio::spawn).collect();
        let b = batcher.clone();
        let stuck = tokio::spawn(async move { b.submit(1).await.ok() });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = tokio::time::timeout(Duration::from_secs(5), batcher.submit(2)).await;
        assert_eq!(
            second.expect("row 2 waited behind the stuck writer").ok(),
            Some(20)
        );
        assert!(!stuck.is_finished(), "row 1's write was meant to be stuck");
        release.notify_one();
        assert_eq!(stuck.await.unwrap(), Some(10));
        drop(batcher);
        for w in writers {
            w.await.unwrap();
        }
    }

    #[tokio::test]
    async fn an_invalid_row_fails_alone_and_comes_back() {
        let calls = Arc::new(AtomicUsize::new(0));
        let (batcher, writer) = Batcher::new(16, evens(calls));
        let submits: Vec<_> = [2u32, 3, 4]
            .into_iter()
            .map(|i| {
                let b = batcher.clone();
                tokio::spawn(async move { b.submit(i).await })
            })
            .collect();
        drop(batcher);
        // Start the writer only now, so all three rows are in one batch.
        tokio::task::yield_now().await;
        let writer = tokio::spawn(writer);
        let mut answers = Vec::new();
        for s in submits {
            answers.push(s.await.unwrap());
        }
        writer.await.unwrap();
        assert_eq!(answers[0].as_ref().ok(), Some(&20));
        assert!(
            matches!(answers[1], Err(Refused::Invalid(_, 3))),
            "{:?}",
            answers[1]
        );
        assert_eq!(answers[2].as_ref().ok(), Some(&40));
    }

    #[tokio::test]
    async fn an_unavailable_database_hands_every_row_back() {
        let (batcher, writer) = Batcher::new(8, |rows: Vec<u32>| {
            std::future::ready((rows, Err::<Vec<u32>, _>(StoreError::Connect("down".into()))))
        });
        let writer = tokio::spawn(writer);
        let refused = batcher.submit(7).await;
        assert!(matches!(refused, Err(Refused::Unavailable(_, 7))), "{refused:?}");
        drop(batcher);
        writer.await.unwrap();
    }
}
