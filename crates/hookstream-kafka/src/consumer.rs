//! The tracked consumer: the one consume loop every Hookstream consumer group runs (the
//! dispatchers' events role, the retry role, the DLQ sink).
//!
//! receive → track → run under a permit → store completed offsets → drain:
//!
//! - Every record received is begun in the [`OffsetTracker`]; its offset is stored only when
//!   the handler finished it and every record before it in its partition is finished too
//!   (invariant 1).
//! - The handler turns a record into work and says when it may start: now, or at a time (a
//!   retry tier's hop). Work runs in its own task under a permit from a fixed pool. A record
//!   that must wait for its time is held at the head of its partition, which is paused
//!   meanwhile. A record that is due but finds no free permit joins the ready queue (first in,
//!   first out, across partitions). When that queue holds `max_in_flight` records, the loop
//!   stops taking records (librdkafka's prefetch queue holds the rest) until a permit frees
//!   one; only if it stays full for [`PAUSE_AFTER`] are the partitions that feed it paused,
//!   so that polling can go on (`max.poll.interval.ms`, and rebalances are served only by
//!   polls), and they are resumed once it is half empty. Pausing is the last resort, not the
//!   flow control of a busy drain: librdkafka drops a paused partition's prefetched records
//!   and fetches them again on resume, and the resumed partition waits for the fetch in
//!   flight (up to `fetch.wait.max.ms`) — a drain that paused every few thousand records
//!   spent most of its time waiting for fetches (7,500 against 16,500 deliveries/s, see
//!   docs/benchmarks.md).
//! - A partition revoked in a rebalance is forgotten at once: what waited in it is dropped,
//!   and completions of work still running for it are ignored (the new owner redoes it).
//! - Nothing dies silently: a handler's fatal error, a panic in a task, a fatal consumer
//!   error, or a subscribed topic lost while running (deleted or refused, confirmed with the
//!   broker by `lost.rs` after a consumer error) ends `run` with an error (the service's
//!   supervisor then fails the process).
//! - On shutdown no new record is taken; running work gets `grace` to finish, its offsets
//!   are stored and committed, and the group is left. Unfinished work is redelivered to the
//!   partition's next owner.
//!
//! Lag in messages and seconds is exported for the group (`lag.rs`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt as _;
use hookstream_config::KafkaConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers as _};
use rdkafka::{ClientContext, Message as _, Offset, TopicPartitionList};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::lag::{self, ConsumerMetrics, LagGauges};
use crate::tracker::{OffsetTracker, Ticket};

/// How often lag is measured.
const LAG_EVERY: Duration = Duration::from_secs(5);

/// How long a full ready queue stops the loop from polling before the partitions that feed
/// it are paused instead (a rebalance waits at most this long for the member).
pub const PAUSE_AFTER: Duration = Duration::from_millis(250);

/// How long a stopping member waits for its final commit and for leaving the group. Within
/// the dispatcher's 10 s between its drain grace and its supervisor's deadline; librdkafka
/// gives up a leave-group request after 5 s itself.
pub const CLOSE_WAIT: Duration = Duration::from_secs(6);

/// One record as a handler sees it (owned: it outlives the poll that returned it).
#[derive(Debug, Clone)]
pub struct Record {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp (ms since the Unix epoch), when it has one.
    pub timestamp_ms: Option<i64>,
    pub key: Option<Bytes>,
    pub payload: Bytes,
    pub headers: Vec<(String, Bytes)>,
}

impl Record {
    fn from_message(msg: &BorrowedMessage<'_>) -> Self {
        let headers = msg
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| {
                        (
                            h.key.to_string(),
                            h.value.map(Bytes::copy_from_slice).unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            topic: msg.topic().to_string(),
            partition: msg.partition(),
            offset: msg.offset(),
            timestamp_ms: msg.timestamp().to_millis(),
            key: msg.key().map(Bytes::copy_from_slice),
            payload: msg.payload().map(Bytes::copy_from_slice).unwrap_or_default(),
            headers,
        }
    }

    /// The value of a header, if the record has it.
    pub fn header(&self, key: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }
}

/// When a record's work may start.
#[derive(Debug)]
pub enum Start<W> {
    /// As soon as a permit is free.
    Now(W),
    /// Not before `at_ms` (ms since the Unix epoch): the record is held at the head of its
    /// partition, which is paused until then.
    At { at_ms: i64, work: W },
}

/// How a record's work ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// Finished or durably handed on: its offset may be stored.
    Finished,
    /// Left undone (shutdown): its offset must not be stored; the record is redelivered.
    Unfinished,
}

/// The work cannot go on in this process (a producer that failed for good, say): the
/// consumer stops and the service fails, so that an orchestrator restarts it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Fatal(pub String);

/// What a consumer does with its records.
pub trait Handler: Send + Sync + 'static {
    type Work: Send + 'static;
    /// Turns a record into work and says when it may start. Runs in the consume loop: it must
    /// not block (decode, look at headers, decide).
    fn prepare(&self, record: Record) -> Start<Self::Work>;
    /// Does the work, in its own task, holding a permit.
    fn run(self: Arc<Self>, work: Self::Work) -> impl Future<Output = Result<Done, Fatal>> + Send;
}

/// A consumer group member's settings.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// For logs: `events`, `retry`, `dlq_sink`.
    pub role: &'static str,
    pub group_id: String,
    pub topics: Vec<String>,
    /// Records taken up at once (running or waiting in their task).
    pub max_in_flight: usize,
    /// How long running work may take to finish at shutdown.
    pub grace: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error("kafka error: {0}")]
    Kafka(#[from] KafkaError),
    #[error("{role} consumer failed: {reason}")]
    Fatal { role: &'static str, reason: String },
}

/// A record held at the head of its (paused) partition until its time.
struct Waiting<W> {
    work: W,
    ticket: Ticket,
    until_ms: i64,
}

/// A due record waiting for a permit.
struct Ready<W> {
    key: Key,
    work: W,
    ticket: Ticket,
}

type Key = (String, i32);

struct State<W> {
    tracker: OffsetTracker,
    waiting: HashMap<Key, Waiting<W>>,
    /// Due records waiting for a permit, oldest first.
    ready: VecDeque<Ready<W>>,
    /// Partitions paused because the ready queue was full.
    paused_full: HashSet<Key>,
    /// Partitions assigned since the loop last looked (to resume: a partition may come back
    /// paused from an earlier assignment).
    assigned: Vec<Key>,
}

/// Forgets a partition's state the moment it is revoked, before anyone else owns it.
struct TrackedContext<W> {
    state: Arc<Mutex<State<W>>>,
    role: &'static str,
}

impl<W: Send + 'static> ClientContext for TrackedContext<W> {}

impl<W: Send + 'static> ConsumerContext for TrackedContext<W> {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut state = lock(&self.state);
        match rebalance {
            Rebalance::Revoke(tpl) => {
                for el in tpl.elements() {
                    let key = (el.topic().to_string(), el.partition());
                    state.tracker.revoke(el.topic(), el.partition());
                    state.waiting.remove(&key);
                    state.ready.retain(|r| r.key != key);
                    state.paused_full.remove(&key);
                }
                tracing::info!(role = self.role, partitions = tpl.count(), "partitions revoked");
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(e) => {
                tracing::warn!(role = self.role, error = %e, "rebalance error, dropping all partition state");
                state.tracker.revoke_all();
                state.waiting.clear();
                state.ready.clear();
                state.paused_full.clear();
            }
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let mut state = lock(&self.state);
            for el in tpl.elements() {
                state.assigned.push((el.topic().to_string(), el.partition()));
            }
            tracing::info!(role = self.role, partitions = tpl.count(), "partitions assigned");
        }
    }
}

fn lock<W>(state: &Mutex<State<W>>) -> std::sync::MutexGuard<'_, State<W>> {
    // A panic while holding this lock would be a bug in this module; the state stays usable.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

enum Completion {
    Done(Ticket),
    Fatal(String),
}

/// Runs a consumer group member until `shutdown`, then drains (see the module docs).
pub async fn run<H: Handler>(
    kafka: &KafkaConfig,
    settings: ConsumerSettings,
    handler: Arc<H>,
    metrics: ConsumerMetrics,
    shutdown: CancellationToken,
) -> Result<(), ConsumerError> {
    let state = Arc::new(Mutex::new(State::<H::Work> {
        tracker: OffsetTracker::new(),
        waiting: HashMap::new(),
        ready: VecDeque::new(),
        paused_full: HashSet::new(),
        assigned: Vec::new(),
    }));
    let consumer: Arc<StreamConsumer<TrackedContext<H::Work>>> = Arc::new(
        crate::consumer_config(kafka, &settings.group_id).create_with_context(TrackedContext {
            state: state.clone(),
            role: settings.role,
        })?,
    );
    let topics: Vec<&str> = settings.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics)?;
    tracing::info!(role = settings.role, group = %settings.group_id, topics = ?settings.topics, "consuming");

    // Moved, not cloned: the member holds the last reference, so closing the consumer (which
    // blocks until the group is left) happens off the runtime in `drain`, not when this
    // function returns (seen: a worker thread blocked for minutes in that close, the broker
    // gone).
    let mut member = Member {
        role: settings.role,
        consumer,
        state,
        handler,
        permits: Arc::new(Semaphore::new(settings.max_in_flight.max(1))),
        ready_cap: settings.max_in_flight.max(1),
        tasks: TaskTracker::new(),
        done: mpsc::unbounded_channel(),
        lag: LagGauges::new(metrics, settings.group_id.clone(), settings.role),
        topics: settings.topics.clone(),
        loss: Arc::new(crate::TopicLoss::new(kafka)),
    };
    let result = member.consume(&shutdown).await;
    member.drain(settings.grace).await;
    result
}

struct Member<H: Handler> {
    role: &'static str,
    consumer: Arc<StreamConsumer<TrackedContext<H::Work>>>,
    state: Arc<Mutex<State<H::Work>>>,
    handler: Arc<H>,
    permits: Arc<Semaphore>,
    /// Due records that may wait for a permit before their partitions are paused.
    ready_cap: usize,
    tasks: TaskTracker,
    done: (
        mpsc::UnboundedSender<Completion>,
        mpsc::UnboundedReceiver<Completion>,
    ),
    lag: LagGauges,
    /// What it subscribed to, and whether one of those is lost.
    topics: Vec<String>,
    loss: Arc<crate::TopicLoss>,
}

impl<H: Handler> Member<H> {
    async fn consume(&mut self, shutdown: &CancellationToken) -> Result<(), ConsumerError> {
        let mut lag_tick = tokio::time::interval(LAG_EVERY);
        lag_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut measuring: Option<tokio::task::JoinHandle<Result<lag::Measured, KafkaError>>> = None;
        // Whether a consumer error meant a topic is lost (`lost.rs`), asked off the loop until
        // the broker has found every topic again; aborted when the loop ends.
        let mut checking: tokio::task::JoinSet<Result<(), crate::TopicError>> = tokio::task::JoinSet::new();
        // Since when the ready queue has been full without a pause (see the module docs).
        let mut full_since: Option<tokio::time::Instant> = None;
        loop {
            self.resume_assigned();
            self.resume_if_drained();
            let (next_hold, parked, full) = {
                let state = lock(&self.state);
                (
                    state.waiting.values().map(|w| w.until_ms).min(),
                    !state.ready.is_empty(),
                    state.ready.len() >= self.ready_cap,
                )
            };
            let hold_sleep = next_hold.map(|at| Duration::from_millis((at - now_ms()).max(0) as u64));
            full_since = if full {
                full_since.or_else(|| Some(tokio::time::Instant::now()))
            } else {
                None
            };
            // Full and not yet for long: take no record; wake when it is time to pause.
            let held_back = full_since
                .map(|since| since + PAUSE_AFTER)
                .filter(|at| *at > tokio::time::Instant::now());
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                Some(completion) = self.done.1.recv() => match completion {
                    Completion::Done(ticket) => self.store(&ticket),
                    Completion::Fatal(reason) => return Err(ConsumerError::Fatal { role: self.role, reason }),
                },
                _ = tokio::time::sleep(hold_sleep.unwrap_or(Duration::ZERO)), if hold_sleep.is_some() => {
                    self.release_held();
                }
                permit = self.permits.clone().acquire_owned(), if parked => {
                    if let Ok(permit) = permit {
                        self.start_parked(permit);
                    }
                }
                _ = tokio::time::sleep_until(held_back.unwrap_or_else(tokio::time::Instant::now)), if held_back.is_some() => {}
                received = self.consumer.recv(), if held_back.is_none() => {
                    match received {
                        Ok(msg) => {
                            let record = Record::from_message(&msg);
                            drop(msg);
                            self.take(record);
                        }
                        Err(e) => {
                            if let Some((code, reason)) = self.consumer.client().fatal_error() {
                                return Err(ConsumerError::Fatal { role: self.role, reason: format!("{code:?}: {reason}") });
                            }
                            tracing::warn!(role = self.role, error = %e, "kafka consumer error");
                            if checking.is_empty() && crate::lost::may_be_lost(&e) {
                                let (loss, topics) = (self.loss.clone(), self.topics.clone());
                                checking.spawn(async move { loss.watch(&topics).await });
                            }
                        }
                    }
                }
                Some(checked) = checking.join_next(), if !checking.is_empty() => {
                    match checked {
                        Ok(Ok(())) => {}
                        Ok(Err(lost)) => return Err(ConsumerError::Fatal { role: self.role, reason: lost.to_string() }),
                        Err(e) => return Err(ConsumerError::Fatal { role: self.role, reason: format!("topic check panicked: {e}") }),
                    }
                }
                _ = lag_tick.tick(), if measuring.is_none() => {
                    let c = self.consumer.clone();
                    measuring = Some(tokio::task::spawn_blocking(move || lag::measure(&c)));
                }
                measured = async { measuring.as_mut().expect("guarded").await }, if measuring.is_some() => {
                    measuring = None;
                    match measured {
                        Ok(Ok(measured)) => {
                            let tracked = lock(&self.state).tracker.snapshot();
                            self.lag.update(&measured, &tracked, now_ms());
                        }
                        Ok(Err(e)) => tracing::debug!(role = self.role, error = %e, "cannot measure lag"),
                        Err(e) => return Err(ConsumerError::Fatal { role: self.role, reason: format!("lag measurement panicked: {e}") }),
                    }
                }
            }
        }
    }

    /// Begins a received record and starts it, holds it, or parks it.
    fn take(&mut self, record: Record) {
        let (topic, partition) = (record.topic.clone(), record.partition);
        let ticket = lock(&self.state).tracker.begin(
            &topic,
            partition,
            record.offset,
            record.timestamp_ms.unwrap_or_else(now_ms),
        );
        let (work, until_ms) = match self.handler.prepare(record) {
            Start::Now(work) => (work, None),
            Start::At { at_ms, work } if at_ms > now_ms() => (work, Some(at_ms)),
            Start::At { work, .. } => (work, None),
        };
        let Some(until_ms) = until_ms else {
            self.start_or_queue((topic, partition), work, ticket);
            return;
        };
        // Held at the head of the partition: nothing behind it is fetched meanwhile.
        self.set_paused(&topic, partition, true);
        lock(&self.state).waiting.insert(
            (topic, partition),
            Waiting {
                work,
                ticket,
                until_ms,
            },
        );
    }

    /// Starts a due record if a permit is free (and nobody queued before it), else queues
    /// it; an overfull queue pauses the record's partition.
    fn start_or_queue(&mut self, key: Key, work: H::Work, ticket: Ticket) {
        if lock(&self.state).ready.is_empty() {
            if let Ok(permit) = self.permits.clone().try_acquire_owned() {
                self.spawn(work, ticket, permit);
                return;
            }
        }
        let full = {
            let mut state = lock(&self.state);
            state.ready.push_back(Ready {
                key: key.clone(),
                work,
                ticket,
            });
            // Beyond the cap only when taken after `PAUSE_AFTER` (or released from a hold).
            state.ready.len() > self.ready_cap && state.paused_full.insert(key.clone())
        };
        if full {
            self.set_paused(&key.0, key.1, true);
        }
    }

    /// Held records whose time has come start, or join the ready queue; their partitions
    /// fetch again.
    fn release_held(&mut self) {
        let now = now_ms();
        let due: Vec<(Key, Waiting<H::Work>)> = {
            let mut state = lock(&self.state);
            let keys: Vec<Key> = state
                .waiting
                .iter()
                .filter(|(_, w)| w.until_ms <= now)
                .map(|(k, _)| k.clone())
                .collect();
            keys.into_iter()
                .filter_map(|k| state.waiting.remove(&k).map(|w| (k, w)))
                .collect()
        };
        for (key, held) in due {
            self.start_or_queue(key.clone(), held.work, held.ticket);
            if !lock(&self.state).paused_full.contains(&key) {
                self.set_paused(&key.0, key.1, false);
            }
        }
    }

    /// Starts the record that has waited longest for a permit.
    fn start_parked(&mut self, permit: OwnedSemaphorePermit) {
        let Some(ready) = lock(&self.state).ready.pop_front() else {
            return; // revoked meanwhile: the permit goes back
        };
        self.spawn(ready.work, ready.ticket, permit);
    }

    /// Once the ready queue is half empty (however it emptied: started, or revoked), resumes
    /// the partitions a full queue paused (unless a record is held at their head).
    fn resume_if_drained(&self) {
        let resume: Vec<Key> = {
            let mut state = lock(&self.state);
            if state.paused_full.is_empty() || state.ready.len() > self.ready_cap / 2 {
                return;
            }
            let keys: Vec<Key> = state.paused_full.drain().collect();
            keys.into_iter()
                .filter(|k| !state.waiting.contains_key(k))
                .collect()
        };
        for (topic, partition) in resume {
            self.set_paused(&topic, partition, false);
        }
    }

    fn spawn(&self, work: H::Work, ticket: Ticket, permit: OwnedSemaphorePermit) {
        let handler = self.handler.clone();
        let done = self.done.0.clone();
        self.tasks.spawn(async move {
            let _permit = permit;
            let completion = match AssertUnwindSafe(handler.run(work)).catch_unwind().await {
                Ok(Ok(Done::Finished)) => Completion::Done(ticket),
                Ok(Ok(Done::Unfinished)) => return,
                Ok(Err(Fatal(reason))) => Completion::Fatal(reason),
                Err(panic) => Completion::Fatal(format!("a task panicked: {}", panic_message(panic))),
            };
            let _ = done.send(completion);
        });
    }

    /// Resumes partitions assigned since the last turn (unless one of their records waits).
    fn resume_assigned(&self) {
        let assigned: Vec<Key> = {
            let mut state = lock(&self.state);
            let assigned = std::mem::take(&mut state.assigned);
            assigned
                .into_iter()
                .filter(|k| !state.waiting.contains_key(k))
                .collect()
        };
        for (topic, partition) in assigned {
            self.set_paused(&topic, partition, false);
        }
    }

    fn set_paused(&self, topic: &str, partition: i32, pause: bool) {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, partition);
        let result = if pause {
            self.consumer.pause(&tpl)
        } else {
            self.consumer.resume(&tpl)
        };
        if let Err(e) = result {
            // Revoked meanwhile: its new owner starts from the committed offset.
            tracing::debug!(role = self.role, error = %e, topic, partition, pause, "pause/resume failed");
        }
    }

    /// Marks a record finished and stores its partition's new committable offset, if it advanced.
    fn store(&self, ticket: &Ticket) {
        let Some(offset) = lock(&self.state).tracker.complete(ticket) else {
            return;
        };
        let mut tpl = TopicPartitionList::new();
        if tpl
            .add_partition_offset(&ticket.topic, ticket.partition, Offset::Offset(offset))
            .is_ok()
        {
            if let Err(e) = self.consumer.store_offsets(&tpl) {
                // Revoked meanwhile; the new owner redoes the work.
                tracing::debug!(role = self.role, error = %e, topic = %ticket.topic, partition = ticket.partition, "offset not stored");
            }
        }
    }

    /// No new records; running work finishes within `grace` and its offsets are stored; then
    /// a final commit, and the group is left (off the runtime: these calls block).
    async fn drain(mut self, grace: Duration) {
        self.tasks.close();
        {
            let mut state = lock(&self.state);
            state.waiting.clear();
            state.ready.clear();
        }
        let deadline = tokio::time::sleep(grace);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                Some(completion) = self.done.1.recv() => {
                    if let Completion::Done(ticket) = completion {
                        self.store(&ticket);
                    }
                }
                _ = self.tasks.wait() => {
                    while let Ok(completion) = self.done.1.try_recv() {
                        if let Completion::Done(ticket) = completion {
                            self.store(&ticket);
                        }
                    }
                    break;
                }
                _ = &mut deadline => {
                    tracing::warn!(role = self.role, in_flight = lock(&self.state).tracker.total_depth(),
                        "grace period over; unfinished work will be redelivered");
                    break;
                }
            }
        }
        self.lag.clear();
        let consumer = self.consumer;
        let role = self.role;
        let closing = tokio::task::spawn_blocking(move || {
            if let Err(e) = consumer.commit_consumer_state(CommitMode::Sync) {
                // Nothing stored since the last auto-commit is a normal case.
                tracing::debug!(role, error = %e, "final commit");
            }
            consumer.unsubscribe();
            drop(consumer); // closes: leaves the group
        });
        // A broker that holds the connection but does not answer makes the synchronous commit
        // wait for ever (seen: minutes, the process stuck after SIGTERM). Give up after
        // CLOSE_WAIT: the group drops this member after its session timeout, and what is
        // redelivered is what was stored since the last auto-commit (a second's work). The
        // thread stays blocked; the service's runtime does not wait for it at exit.
        match tokio::time::timeout(CLOSE_WAIT, closing).await {
            Ok(Ok(())) => tracing::info!(role, "consumer stopped"),
            Ok(Err(e)) => tracing::warn!(role, error = %e, "closing the consumer failed"),
            Err(_) => tracing::warn!(
                role,
                waited = ?CLOSE_WAIT,
                "kafka did not answer the final commit or the leave-group request; stopping without them \
                 (the group drops this member after its session timeout, and work since the last commit is redelivered)"
            ),
        }
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
