//! Endpoint limits that hold for the whole dispatcher group (every replica KEDA or an operator
//! starts), not per instance.
//!
//! - **Rate limits**: the database hands out each endpoint's tokens per one-second window
//!   (`hookstream_store::limits::take_rate_tokens`), at most its rate per window, whichever
//!   replicas ask. A replica takes a small lease at a time (a tenth of the window, or what is
//!   waiting) and spends it before the window ends; what it does not spend lapses. So over any
//!   five seconds an endpoint receives at most 5 × rate plus one window (its burst), and a
//!   replica that owns all of an endpoint's traffic can still use all of its rate. Only
//!   endpoints with a rate limit cost a database round trip, about ten per second per replica
//!   at most. If the database cannot answer (an error, or no answer within `LEASE_ANSWER`: a
//!   lease is taken with the endpoint's deliveries waiting), each replica falls back to its
//!   own token bucket (the endpoint's full rate per replica) for `FALL_BACK_FOR`, without
//!   asking again meanwhile, and counts each such decision in
//!   `hookstream_dispatcher_rate_limit_fallbacks_total`.
//! - **Concurrency caps**: each replica that delivers says it is alive every `HEARTBEAT`
//!   (`hookstream.dispatcher_members`); an endpoint's cap is split evenly among the live ones
//!   (cap / live, at least one each). When a replica joins or leaves, the others resize within
//!   a heartbeat; requests already under way finish under the old size. A cap smaller than the
//!   number of replicas still lets each replica one request. A heartbeat the database does
//!   not answer is given up after the database's answer deadline; the last count stays.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use hookstream_store::limits;
use hookstream_store::sqlx::PgPool;
use hookstream_store::{answered, StoreError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::DispatcherMetrics;

/// The length of a rate window (an endpoint's rate is per second).
pub const WINDOW: Duration = Duration::from_secs(1);
/// How often a replica says it is alive; one silent for `LIVE` no longer counts.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
pub const LIVE: Duration = Duration::from_secs(7);
/// How long ended rate windows are kept before they are deleted.
const KEEP_WINDOWS: Duration = Duration::from_secs(60);
/// A lease asks for at least this share of an endpoint's window.
const LEASE_SHARE: u32 = 10;
/// How long a lease may take to be granted (the endpoint's deliveries wait for it) before
/// the database counts as not answering.
pub const LEASE_ANSWER: Duration = Duration::from_secs(2);
/// After the database failed to grant a lease, how long every endpoint uses its own bucket
/// before a lease is asked for again.
pub const FALL_BACK_FOR: Duration = Duration::from_secs(5);
/// How long leaving the member list may take at shutdown (the others notice within `LIVE`).
const LEAVE_ANSWER: Duration = Duration::from_secs(3);

/// What the replicas of the group share.
pub struct GroupLimits {
    pool: PgPool,
    member: Uuid,
    live: AtomicU32,
    metrics: DispatcherMetrics,
    /// How long a heartbeat or a prune may wait for the database (its answer deadline).
    answer: Duration,
    /// Until when the replica's own buckets decide alone (the database did not grant a lease).
    own_buckets_until: Mutex<Option<Instant>>,
}

/// One endpoint's tokens leased from the current window.
#[derive(Default)]
pub struct Lease {
    tokens: u32,
    expires: Option<Instant>,
}

/// What the group says about one more request to an endpoint.
pub enum RateAnswer {
    Go,
    /// The window is used up: the next one starts in this long.
    NotFor(Duration),
    /// The database did not answer: the replica's own bucket decides alone.
    Unknown,
}

impl GroupLimits {
    /// `answer`: the database's answer deadline (`DatabaseConfig::answer_deadline`).
    pub fn new(pool: PgPool, metrics: DispatcherMetrics, answer: Duration) -> Self {
        Self {
            pool,
            member: Uuid::now_v7(),
            live: AtomicU32::new(1),
            metrics,
            answer,
            own_buckets_until: Mutex::new(None),
        }
    }

    /// Live replicas, as of the last heartbeat (at least 1: this one).
    /// This process's id among the live dispatchers.
    pub fn member(&self) -> Uuid {
        self.member
    }

    pub fn live(&self) -> u32 {
        self.live.load(Ordering::Relaxed).max(1)
    }

    /// This replica's share of a concurrency cap.
    pub fn cap_share(&self, cap: u32) -> u32 {
        (cap / self.live()).max(1)
    }

    /// Takes one token of `endpoint`'s current window (rate `rate` per second), leasing more
    /// from the database when the lease is spent. `waiting` is how many requests queue behind.
    pub async fn take(
        &self,
        lease: &tokio::sync::Mutex<Lease>,
        endpoint: Uuid,
        rate: u32,
        waiting: u32,
    ) -> RateAnswer {
        let mut lease = lease.lock().await;
        let now = Instant::now();
        if lease.tokens > 0 && lease.expires.is_some_and(|e| now < e) {
            lease.tokens -= 1;
            return RateAnswer::Go;
        }
        if self
            .own_buckets_until
            .lock()
            .expect("fallback lock")
            .is_some_and(|until| now < until)
        {
            self.metrics.rate_limit_fallbacks.inc();
            return RateAnswer::Unknown;
        }
        let want = (rate.div_ceil(LEASE_SHARE)).max(waiting + 1).min(rate);
        let granted = answered(
            LEASE_ANSWER,
            limits::take_rate_tokens(&self.pool, endpoint, want, rate, WINDOW),
        )
        .await;
        match granted {
            Ok(grant) if grant.granted > 0 => {
                lease.tokens = grant.granted - 1;
                lease.expires = Some(now + grant.left);
                RateAnswer::Go
            }
            Ok(grant) => {
                lease.tokens = 0;
                RateAnswer::NotFor(grant.left.max(Duration::from_millis(1)))
            }
            Err(e) => {
                *self.own_buckets_until.lock().expect("fallback lock") = Some(Instant::now() + FALL_BACK_FOR);
                self.metrics.rate_limit_fallbacks.inc();
                tracing::warn!(error = %e, endpoint = %endpoint, fall_back_for = ?FALL_BACK_FOR,
                    "cannot take rate-limit tokens from the database; this replica's own buckets decide");
                RateAnswer::Unknown
            }
        }
    }

    /// Says this replica is alive before it delivers anything, so its first requests already
    /// use its share (a failure is logged; `run` keeps trying).
    pub async fn join(&self) {
        self.beat().await;
    }

    async fn beat(&self) {
        match answered(self.answer, limits::heartbeat(&self.pool, self.member, LIVE)).await {
            Ok(live) => {
                let before = self.live.swap(live, Ordering::Relaxed);
                self.metrics.group_replicas.set(i64::from(live));
                if before != live {
                    tracing::info!(
                        replicas = live,
                        "live dispatcher replicas changed: concurrency caps re-shared"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed; keeping the last replica count"),
        }
    }

    /// Says this replica is alive every `HEARTBEAT` and reads how many are, until `shutdown`;
    /// then leaves, so the others take up its share. Deletes ended rate windows meanwhile.
    /// Database errors are logged and retried: the last known count stays in force.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Result<(), StoreError> {
        let mut every = tokio::time::interval(HEARTBEAT);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_prune = Instant::now();
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = shutdown.cancelled() => break,
            }
            self.beat().await;
            if last_prune.elapsed() >= KEEP_WINDOWS {
                last_prune = Instant::now();
                let pruned = answered(self.answer, limits::prune_rate_windows(&self.pool, KEEP_WINDOWS));
                if let Err(e) = pruned.await {
                    tracing::warn!(error = %e, "cannot delete old rate windows, trying later");
                }
            }
        }
        if let Err(e) = answered(LEAVE_ANSWER, limits::leave(&self.pool, self.member)).await {
            tracing::warn!(error = %e, "could not leave the member list; the others notice within 7 s");
        }
        Ok(())
    }
}
