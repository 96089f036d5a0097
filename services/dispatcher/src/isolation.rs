//! Per-endpoint isolation (invariant 3): one slow or broken endpoint never holds up another.
//!
//! Every endpoint gets a [`Guard`] with three gates, checked before each attempt:
//!
//! 1. A circuit breaker (`failsafe`'s state machine and failure policies behind our own type).
//!    It opens after `consecutive_failures` failures in a row, or when the failure ratio over
//!    a sliding window exceeds `failure_ratio` (once `min_requests` were seen). While open it
//!    refuses without any HTTP call; after the cooldown one probe is let through (half-open):
//!    success closes it, failure reopens it with the cooldown doubled, up to `max_cooldown`.
//! 2. A token bucket (`governor`) with the endpoint's own quota (`rate_limit_per_s`, burst
//!    of `rate_limit_burst_s` seconds' worth), then the group's window for that endpoint
//!    ([`crate::group_limits`]), so that the quota holds across every replica; endpoints
//!    without a quota are not limited.
//! 3. A cap on concurrent requests (`max_in_flight`, shared evenly among the live replicas). An attempt queues for a slot only when
//!    the expected wait (queue length ÷ cap × the endpoint's recent latency) is within
//!    `busy_wait`, and never longer than twice that: a fast endpoint's queue drains in
//!    milliseconds, a slow one's would hold the events behind it. A longer wait is refused
//!    only when it is this endpoint's doing: its wait is more than twice what all the
//!    queued attempts of this dispatcher wait (everything queued ÷ attempts finished per
//!    second; in the first fifth of a second, before that rate is known: its latency is more
//!    than twice everyone's), or it holds more than half of the attempts under way.
//!    When every endpoint waits alike the dispatcher itself is the bottleneck (its cores),
//!    and a deferral would only add a round trip through a retry tier to a queue it does not
//!    shorten: under a fan-out backlog that feedback once deferred more deliveries than it
//!    made.
//!
//! A refused delivery is not failed: the caller hands it to the retry tiers with its due time
//! and without using up an attempt (a [`Refusal`]). Refusals of one endpoint are spaced out on
//! a per-endpoint virtual clock, so what comes back later does not arrive as one burst.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use failsafe::backoff::{self, Constant};
use failsafe::failure_policy::{
    consecutive_failures, success_rate_over_time_window, ConsecutiveFailures, SuccessRateOverTimeWindow,
};
use failsafe::{FailurePolicy, Instrument, StateMachine};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use hookstream_delivery::{ErrorClass, Verdict};
use hookstream_store::endpoints::Endpoint;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::group_limits::{GroupLimits, Lease, RateAnswer};
use crate::metrics::DispatcherMetrics;
use crate::now_ms;

/// Circuit breaker and concurrency settings, the same for every endpoint (quotas and caps are
/// per endpoint, in the database).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IsolationSettings {
    /// Failures in a row that open an endpoint's breaker.
    pub consecutive_failures: u32,
    /// Failure ratio over `window_ms` that opens the breaker (0 < ratio ≤ 1)...
    pub failure_ratio: f64,
    /// ...once at least this many attempts were made in the window.
    pub min_requests: u32,
    pub window_ms: u64,
    /// First cooldown of an open breaker; doubles each time a probe fails.
    pub cooldown_ms: u64,
    pub max_cooldown_ms: u64,
    /// Longest expected wait for a free slot under the endpoint's concurrency cap before an
    /// attempt is deferred to the retry tiers instead. An attempt that queues gives up after
    /// twice this. (A fast endpoint's queue of thousands drains within it; a slow one's not.)
    pub busy_wait_ms: u64,
    /// Longest wait for a rate-limit token (known exactly) before an attempt is deferred.
    pub rate_wait_ms: u64,
    /// How far a delivery refused for a full concurrency cap is deferred (±50 % jitter).
    pub busy_defer_ms: u64,
    /// Token-bucket burst, in seconds of the endpoint's rate (at least one request).
    pub rate_limit_burst_s: f64,
    /// Guards of endpoints unused this long, with a closed breaker, are dropped.
    pub idle_evict_ms: u64,
}

impl Default for IsolationSettings {
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
            failure_ratio: 0.5,
            min_requests: 20,
            window_ms: 30_000,
            cooldown_ms: 5_000,
            max_cooldown_ms: 3_600_000,
            busy_wait_ms: 1_000,
            rate_wait_ms: 50,
            busy_defer_ms: 1_000,
            rate_limit_burst_s: 1.0,
            idle_evict_ms: 600_000,
        }
    }
}

impl IsolationSettings {
    pub fn validate(&self) -> Result<(), String> {
        if self.consecutive_failures == 0 {
            return Err("dispatcher.isolation.consecutive_failures must be at least 1".into());
        }
        if !(self.failure_ratio > 0.0 && self.failure_ratio <= 1.0) {
            return Err("dispatcher.isolation.failure_ratio must be in (0, 1]".into());
        }
        if self.window_ms < 1_000 {
            return Err("dispatcher.isolation.window_ms must be at least 1000".into());
        }
        if self.cooldown_ms == 0 || self.max_cooldown_ms < self.cooldown_ms {
            return Err("dispatcher.isolation: need 0 < cooldown_ms <= max_cooldown_ms".into());
        }
        if self.rate_limit_burst_s.is_nan()
            || self.rate_limit_burst_s <= 0.0
            || self.rate_limit_burst_s > 3600.0
        {
            return Err("dispatcher.isolation.rate_limit_burst_s must be positive, at most 3600".into());
        }
        // Durations are added to clocks: keep them where no addition can overflow.
        const DAY_MS: u64 = 86_400_000;
        for (key, value) in [
            ("window_ms", self.window_ms),
            ("cooldown_ms", self.cooldown_ms),
            ("max_cooldown_ms", self.max_cooldown_ms),
            ("busy_wait_ms", self.busy_wait_ms),
            ("rate_wait_ms", self.rate_wait_ms),
            ("busy_defer_ms", self.busy_defer_ms),
            ("idle_evict_ms", self.idle_evict_ms),
        ] {
            if value > DAY_MS {
                return Err(format!(
                    "dispatcher.isolation.{key} must be at most {DAY_MS} (a day), not {value}"
                ));
            }
        }
        Ok(())
    }
}

/// Why a delivery was not attempted now (the retry record's `last_error_class`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    BreakerOpen,
    RateLimited,
    EndpointBusy,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::BreakerOpen => "breaker_open",
            RefusalReason::RateLimited => "rate_limited",
            RefusalReason::EndpointBusy => "endpoint_busy",
        }
    }
}

/// A delivery the guard refused, and when to try it again.
#[derive(Debug, Clone, Copy)]
pub struct Refusal {
    pub reason: RefusalReason,
    pub retry_at_ms: i64,
}

/// Permission to make one attempt; hold it for the attempt's duration, then `finish` it.
pub struct Pass {
    guard: Arc<Guard>,
    probe: bool,
    _slot: OwnedSemaphorePermit,
    under_way: UnderWay,
}

/// What every attempt of this dispatcher goes through, whatever its endpoint: how many are
/// under way (asking for admission, queued or in flight), how many queue for a slot, and how
/// many finish per second. The yardstick for "is this endpoint's queue its own doing".
#[derive(Default)]
struct Pace {
    under_way: AtomicU64,
    queued: AtomicU64,
    /// Attempts finished since `window_ms` began.
    finished: AtomicU64,
    window_ms: AtomicI64,
    /// Moving average of attempts finished per second (0 until a window closed).
    per_s: AtomicU64,
    /// Moving average of every endpoint's attempt latency, µs: the yardstick until `per_s`
    /// is known.
    latency_us: AtomicU64,
}

/// How often the finishing rate is taken.
const PACE_WINDOW_MS: i64 = 200;

impl Pace {
    fn finished_one(&self, latency: Duration) {
        let sample = latency.as_micros().min(u64::MAX as u128) as u64;
        let old = self.latency_us.load(Ordering::Relaxed);
        let new = if old == 0 { sample } else { (old * 4 + sample) / 5 };
        self.latency_us.store(new, Ordering::Relaxed);
        self.finished.fetch_add(1, Ordering::Relaxed);
        let now = now_ms();
        let began = self.window_ms.load(Ordering::Relaxed);
        let elapsed = now - began;
        if elapsed < PACE_WINDOW_MS
            || self
                .window_ms
                .compare_exchange(began, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let n = self.finished.swap(0, Ordering::AcqRel);
        if began == 0 {
            return; // the first window has no start: it only starts the clock
        }
        let sample = n * 1000 / elapsed.max(1) as u64;
        let old = self.per_s.load(Ordering::Relaxed);
        let new = if old == 0 { sample } else { (old * 3 + sample) / 4 };
        self.per_s.store(new, Ordering::Relaxed);
    }

    /// How long the attempts queued now wait, all told, at the recent finishing rate (`None`
    /// before the rate is known).
    fn queue_wait(&self) -> Option<Duration> {
        let per_s = self.per_s.load(Ordering::Relaxed);
        (per_s > 0).then(|| {
            Duration::from_micros(self.queued.load(Ordering::Relaxed).saturating_mul(1_000_000) / per_s)
        })
    }
}

/// One attempt counted as queued for a slot, in its endpoint's count and the dispatcher's,
/// until it is dropped (admitted, timed out, or its caller gave up on it at shutdown).
struct InQueue<'a>(&'a AtomicU64, &'a AtomicU64);

impl<'a> InQueue<'a> {
    fn new(endpoint: &'a AtomicU64, all: &'a AtomicU64) -> Self {
        endpoint.fetch_add(1, Ordering::Relaxed);
        all.fetch_add(1, Ordering::Relaxed);
        Self(endpoint, all)
    }
}

impl Drop for InQueue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        self.1.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One attempt counted in [`Pace::under_way`] from the moment it asks until it is dropped.
struct UnderWay {
    pace: Arc<Pace>,
}

impl UnderWay {
    fn new(pace: &Arc<Pace>) -> Self {
        pace.under_way.fetch_add(1, Ordering::Relaxed);
        Self { pace: pace.clone() }
    }
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        self.pace.under_way.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pass {
    /// Tells the breaker how the attempt went. Receiver-side failures (5xx, 408/425/429,
    /// timeouts, connection and TLS errors) count against the endpoint; other permanent
    /// answers (a 4xx) show the endpoint is up and count as neither.
    pub fn finish(self, verdict: Verdict, class: ErrorClass, latency: Duration) {
        self.guard.observe_latency(latency);
        self.under_way.pace.finished_one(latency);
        match verdict {
            Verdict::Delivered => self.guard.breaker.on_success(),
            Verdict::Retryable => self.guard.breaker.on_error(),
            Verdict::Permanent | Verdict::Gone => {
                if matches!(class, ErrorClass::Http410) {
                    self.guard.breaker.on_error();
                }
            }
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        if self.probe {
            self.guard.state.probing.store(false, Ordering::Release);
        }
        self.guard.last_used_ms.store(now_ms(), Ordering::Relaxed);
    }
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

/// What the breaker's instrument keeps: the state and, when open, until when.
struct BreakerState {
    state: AtomicU8,
    /// When it last left the closed state (ms since the epoch).
    since_ms: AtomicI64,
    open_until_ms: AtomicI64,
    /// The delay the policy chose for the current opening (read by `on_open`).
    last_cooldown_ms: Arc<AtomicU64>,
    /// Only one probe at a time while half-open.
    probing: AtomicBool,
}

#[derive(Clone)]
struct Observer {
    state: Arc<BreakerState>,
    metrics: DispatcherMetrics,
}

impl Observer {
    fn transit(&self, to: u8) {
        let from = self.state.state.swap(to, Ordering::AcqRel);
        let label = match to {
            OPEN => "open",
            HALF_OPEN => "half_open",
            _ => "closed",
        };
        if from != to {
            self.metrics.breaker_transitions.with_label_values(&[label]).inc();
        }
        if from == CLOSED && to != CLOSED {
            self.state.since_ms.store(now_ms(), Ordering::Release);
        }
        match (from == CLOSED, to == CLOSED) {
            (true, false) => self.metrics.breakers_open.inc(),
            (false, true) => self.metrics.breakers_open.dec(),
            _ => {}
        }
    }
}

impl Instrument for Observer {
    fn on_call_rejected(&self) {}

    fn on_open(&self) {
        let cooldown = self.state.last_cooldown_ms.load(Ordering::Acquire) as i64;
        self.state
            .open_until_ms
            .store(now_ms() + cooldown, Ordering::Release);
        self.transit(OPEN);
    }

    fn on_half_open(&self) {
        self.transit(HALF_OPEN);
    }

    fn on_closed(&self) {
        self.transit(CLOSED);
    }
}

/// failsafe's two failure detectors, with our own cooldown: it doubles on every failed probe
/// up to the maximum (failsafe's own backoffs count in whole seconds), and the instrument can
/// read it to tell refused deliveries when to come back.
struct Policy {
    consecutive: ConsecutiveFailures<Constant>,
    ratio: SuccessRateOverTimeWindow<Constant>,
    initial: Duration,
    max: Duration,
    next: Duration,
    last: Arc<AtomicU64>,
}

impl FailurePolicy for Policy {
    fn record_success(&mut self) {
        self.consecutive.record_success();
        self.ratio.record_success();
    }

    fn mark_dead_on_failure(&mut self) -> Option<Duration> {
        let consecutive = self.consecutive.mark_dead_on_failure().is_some();
        let ratio = self.ratio.mark_dead_on_failure().is_some();
        if !(consecutive || ratio) {
            return None;
        }
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        self.last.store(delay.as_millis() as u64, Ordering::Release);
        Some(delay)
    }

    fn revived(&mut self) {
        self.consecutive.revived();
        self.ratio.revived();
        self.next = self.initial;
    }
}

/// What the guard was built from; a change of the endpoint's limits rebuilds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limits {
    rate_per_s: Option<i32>,
    max_in_flight: i32,
}

impl Limits {
    fn of(ep: &Endpoint) -> Self {
        Self {
            rate_per_s: ep.rate_limit_per_s.filter(|r| *r > 0),
            max_in_flight: ep.max_in_flight.max(1),
        }
    }
}

/// One endpoint's breaker, token bucket and concurrency cap.
pub struct Guard {
    limits: Limits,
    breaker: StateMachine<Policy, Observer>,
    state: Arc<BreakerState>,
    limiter: Option<DefaultDirectRateLimiter>,
    /// Tokens leased from the group's current rate window, and how many wait for them.
    lease: tokio::sync::Mutex<Lease>,
    lease_waiting: AtomicU32,
    /// This replica's share of the concurrency cap, and its semaphore (replaced when the
    /// share changes; permits of the old one go back to it as requests finish).
    slots: Mutex<(u32, Arc<Semaphore>)>,
    /// The next free slot on this endpoint's deferral clock (ms since the epoch).
    next_deferral_ms: Mutex<i64>,
    last_used_ms: AtomicI64,
    /// Attempts queued for a slot right now.
    queued: AtomicU64,
    /// Moving average of attempt latency, µs (0 until the first attempt finishes).
    latency_us: AtomicU64,
}

impl Guard {
    fn new(limits: Limits, cfg: &IsolationSettings, metrics: &DispatcherMetrics) -> Self {
        let last = Arc::new(AtomicU64::new(cfg.cooldown_ms));
        let never = || backoff::constant(Duration::from_millis(cfg.cooldown_ms));
        let policy = Policy {
            consecutive: consecutive_failures(cfg.consecutive_failures, never()),
            ratio: success_rate_over_time_window(
                1.0 - cfg.failure_ratio,
                cfg.min_requests,
                Duration::from_millis(cfg.window_ms),
                never(),
            ),
            initial: Duration::from_millis(cfg.cooldown_ms),
            max: Duration::from_millis(cfg.max_cooldown_ms),
            next: Duration::from_millis(cfg.cooldown_ms),
            last: last.clone(),
        };
        let state = Arc::new(BreakerState {
            state: AtomicU8::new(CLOSED),
            since_ms: AtomicI64::new(0),
            open_until_ms: AtomicI64::new(0),
            last_cooldown_ms: last,
            probing: AtomicBool::new(false),
        });
        let observer = Observer {
            state: state.clone(),
            metrics: metrics.clone(),
        };
        let limiter = limits.rate_per_s.map(|rate| {
            let rate = NonZeroU32::new(rate as u32).unwrap_or(NonZeroU32::MIN);
            let burst = ((rate.get() as f64 * cfg.rate_limit_burst_s).ceil() as u32).max(1);
            RateLimiter::direct(Quota::per_second(rate).allow_burst(NonZeroU32::new(burst).unwrap_or(rate)))
        });
        Self {
            limits,
            breaker: StateMachine::new(policy, observer),
            state,
            limiter,
            lease: tokio::sync::Mutex::new(Lease::default()),
            lease_waiting: AtomicU32::new(0),
            slots: Mutex::new((
                limits.max_in_flight as u32,
                Arc::new(Semaphore::new(limits.max_in_flight as usize)),
            )),
            next_deferral_ms: Mutex::new(0),
            last_used_ms: AtomicI64::new(now_ms()),
            queued: AtomicU64::new(0),
            latency_us: AtomicU64::new(0),
        }
    }

    /// A due time for a refused delivery: no earlier than `earliest`, and at least `spacing`
    /// after the previous refusal of this endpoint.
    fn next_slot(&self, earliest: i64, spacing: Duration) -> i64 {
        let mut next = self.next_deferral_ms.lock().expect("deferral clock lock");
        let due = earliest.max(*next);
        *next = due + (spacing.as_millis() as i64).max(1);
        due
    }

    fn observe_latency(&self, latency: Duration) {
        let sample = latency.as_micros().min(u64::MAX as u128) as u64;
        let old = self.latency_us.load(Ordering::Relaxed);
        let new = if old == 0 { sample } else { (old * 4 + sample) / 5 };
        self.latency_us.store(new, Ordering::Relaxed);
    }

    /// The semaphore for `share` concurrent requests (a new one when the share changed).
    fn slots(&self, share: u32) -> (u32, Arc<Semaphore>) {
        let mut slots = self.slots.lock().expect("slots lock");
        if slots.0 != share {
            *slots = (share, Arc::new(Semaphore::new(share as usize)));
        }
        (slots.0, slots.1.clone())
    }

    /// How long one more attempt would queue for one of `share` slots, at the recent latency.
    fn expected_queueing(&self, share: u32) -> Duration {
        let ahead = self.queued.load(Ordering::Relaxed) + 1;
        let per_slot = self.latency_us.load(Ordering::Relaxed) / u64::from(share.max(1));
        Duration::from_micros(ahead.saturating_mul(per_slot))
    }

    fn breaker_state(&self) -> u8 {
        self.state.state.load(Ordering::Acquire)
    }
}

/// A breaker that is not closed: open (refusing until `open_until_ms`) or half-open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSnapshot {
    pub endpoint_id: Uuid,
    pub open: bool,
    pub since_ms: i64,
    pub open_until_ms: Option<i64>,
}

/// The guards of every endpoint this dispatcher delivers to.
pub struct Isolation {
    cfg: IsolationSettings,
    metrics: DispatcherMetrics,
    guards: Mutex<HashMap<Uuid, Arc<Guard>>>,
    /// The replicas' shared limits; `None`: this instance's limits only (unit tests).
    group: Option<Arc<GroupLimits>>,
    pace: Arc<Pace>,
}

impl Isolation {
    pub fn new(cfg: IsolationSettings, metrics: DispatcherMetrics, group: Option<Arc<GroupLimits>>) -> Self {
        Self {
            cfg,
            metrics,
            guards: Mutex::new(HashMap::new()),
            group,
            pace: Arc::default(),
        }
    }

    /// Whether a wait of `expected` for one of `share` slots of `guard` is the endpoint's own
    /// doing (see the module docs): only then is it worth a deferral.
    fn endpoint_is_the_bottleneck(
        &self,
        guard: &Guard,
        share: u32,
        slots: &Semaphore,
        expected: Duration,
    ) -> bool {
        match self.pace.queue_wait() {
            Some(everyone) if expected > everyone * 2 => return true,
            Some(_) => {}
            // The finishing rate is known a fifth of a second after the first attempt
            // finished; until then, whether this endpoint is slower than the others.
            None => {
                let all = self.pace.latency_us.load(Ordering::Relaxed);
                if guard.latency_us.load(Ordering::Relaxed) > all.saturating_mul(2) {
                    return true;
                }
            }
        }
        let held = u64::from(share).saturating_sub(slots.available_permits() as u64);
        let mine = guard.queued.load(Ordering::Relaxed) + held;
        mine * 2 > self.pace.under_way.load(Ordering::Relaxed)
    }

    fn cap_share(&self, guard: &Guard) -> u32 {
        let cap = guard.limits.max_in_flight.max(1) as u32;
        self.group.as_ref().map_or(cap, |g| g.cap_share(cap))
    }

    fn guard(&self, ep: &Endpoint) -> Arc<Guard> {
        let limits = Limits::of(ep);
        let mut guards = self.guards.lock().expect("guards lock");
        match guards.get(&ep.id) {
            Some(g) if g.limits == limits => g.clone(),
            _ => {
                // New, or its limits changed: a fresh guard (in-flight permits of the old one
                // are released into the old semaphore, which is then dropped).
                let g = Arc::new(Guard::new(limits, &self.cfg, &self.metrics));
                guards.insert(ep.id, g.clone());
                g
            }
        }
    }

    /// Asks to attempt a delivery to `ep` now. With `can_defer` false (retries disabled) it
    /// waits instead of refusing.
    pub async fn admit(&self, ep: &Endpoint, can_defer: bool) -> Result<Pass, Refusal> {
        let under_way = UnderWay::new(&self.pace);
        let guard = self.guard(ep);
        guard.last_used_ms.store(now_ms(), Ordering::Relaxed);
        let probe = loop {
            if guard.breaker.is_call_permitted() {
                if guard.breaker_state() != HALF_OPEN {
                    break false;
                }
                if guard
                    .state
                    .probing
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    break true;
                }
            }
            // Open, or half-open with its probe under way.
            let until = guard
                .state
                .open_until_ms
                .load(Ordering::Acquire)
                .max(now_ms() + 1_000);
            if can_defer {
                return Err(self.refuse(&guard, RefusalReason::BreakerOpen, until, Duration::ZERO));
            }
            tokio::time::sleep(Duration::from_millis((until - now_ms()).clamp(10, 1_000) as u64)).await;
        };
        let release_probe = |g: &Guard| {
            if probe {
                g.state.probing.store(false, Ordering::Release);
            }
        };

        // Waiting for a token is bounded in total, not per try: many waiters would otherwise
        // take turns forever and hold their events' slots.
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.cfg.rate_wait_ms);
        if let Some(limiter) = &guard.limiter {
            while let Err(not_until) = limiter.check() {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                if tokio::time::Instant::now() + wait <= deadline || !can_defer {
                    tokio::time::sleep(wait).await;
                    continue;
                }
                release_probe(&guard);
                let spacing = Duration::from_secs_f64(1.0 / limiter_rate(&guard));
                let earliest = now_ms() + wait.as_millis() as i64;
                return Err(self.refuse(&guard, RefusalReason::RateLimited, earliest, spacing));
            }
        }
        // Then the group's window, so the quota holds across replicas.
        if let (Some(group), Some(rate)) = (&self.group, guard.limits.rate_per_s) {
            loop {
                let waiting = guard.lease_waiting.fetch_add(1, Ordering::Relaxed);
                let answer = group.take(&guard.lease, ep.id, rate as u32, waiting).await;
                guard.lease_waiting.fetch_sub(1, Ordering::Relaxed);
                let wait = match answer {
                    RateAnswer::Go | RateAnswer::Unknown => break,
                    RateAnswer::NotFor(wait) => wait,
                };
                if tokio::time::Instant::now() + wait <= deadline || !can_defer {
                    tokio::time::sleep(wait).await;
                    continue;
                }
                release_probe(&guard);
                let spacing = Duration::from_secs_f64(1.0 / limiter_rate(&guard));
                let earliest = now_ms() + wait.as_millis() as i64;
                return Err(self.refuse(&guard, RefusalReason::RateLimited, earliest, spacing));
            }
        }

        let (share, slots) = guard.slots(self.cap_share(&guard));
        let slot = match slots.clone().try_acquire_owned() {
            Ok(s) => s,
            Err(_) if !can_defer => slots
                .clone()
                .acquire_owned()
                .await
                .expect("endpoint semaphores are never closed"),
            Err(_) => {
                let busy_wait = Duration::from_millis(self.cfg.busy_wait_ms);
                let expected = guard.expected_queueing(share);
                // Queue when a fast endpoint's turn comes soon, or when everyone waits about as
                // long (waiting here is then no worse than anywhere; still bounded, should the
                // endpoint slow down meanwhile).
                let bound = if expected <= busy_wait {
                    Some(busy_wait * 2)
                } else if !self.endpoint_is_the_bottleneck(&guard, share, &slots, expected) {
                    Some((expected * 2).max(busy_wait * 2))
                } else {
                    None
                };
                let queued = match bound {
                    Some(bound) => {
                        let _in_queue = InQueue::new(&guard.queued, &self.pace.queued);
                        tokio::time::timeout(bound, slots.clone().acquire_owned())
                            .await
                            .ok()
                            .and_then(Result::ok)
                    }
                    None => None,
                };
                match queued {
                    Some(s) => s,
                    None => {
                        release_probe(&guard);
                        let jitter = rand::thread_rng().gen_range(0.5..1.5);
                        let earliest = now_ms() + (self.cfg.busy_defer_ms as f64 * jitter) as i64;
                        return Err(self.refuse(
                            &guard,
                            RefusalReason::EndpointBusy,
                            earliest,
                            Duration::ZERO,
                        ));
                    }
                }
            }
        };
        Ok(Pass {
            guard,
            probe,
            _slot: slot,
            under_way,
        })
    }

    fn refuse(&self, guard: &Guard, reason: RefusalReason, earliest: i64, spacing: Duration) -> Refusal {
        self.metrics.deferrals.with_label_values(&[reason.as_str()]).inc();
        let retry_at_ms = match reason {
            // Spread what returns after the cooldown over a second or so, at least.
            RefusalReason::BreakerOpen => earliest + rand::thread_rng().gen_range(0..1_000),
            RefusalReason::EndpointBusy => earliest,
            RefusalReason::RateLimited => guard.next_slot(earliest, spacing),
        };
        Refusal { reason, retry_at_ms }
    }

    /// Drops the guards of endpoints idle for `idle_evict_ms` whose breaker is closed.
    pub fn evict_idle(&self) {
        let cutoff = now_ms() - self.cfg.idle_evict_ms as i64;
        self.guards.lock().expect("guards lock").retain(|_, g| {
            Arc::strong_count(g) > 1
                || g.breaker_state() != CLOSED
                || g.last_used_ms.load(Ordering::Relaxed) > cutoff
                || *g.next_deferral_ms.lock().expect("deferral clock lock") > now_ms()
        });
    }

    /// The breakers of this dispatcher that are not closed, for publishing
    /// (`crate::breaker_report`).
    pub fn not_closed(&self) -> Vec<BreakerSnapshot> {
        self.guards
            .lock()
            .expect("guards lock")
            .iter()
            .filter_map(|(id, g)| {
                let open = match g.breaker_state() {
                    OPEN => true,
                    HALF_OPEN => false,
                    _ => return None,
                };
                Some(BreakerSnapshot {
                    endpoint_id: *id,
                    open,
                    since_ms: g.state.since_ms.load(Ordering::Acquire),
                    open_until_ms: open.then(|| g.state.open_until_ms.load(Ordering::Acquire)),
                })
            })
            .collect()
    }

    /// Number of endpoints with a guard (for tests and the eviction log).
    pub fn len(&self) -> usize {
        self.guards.lock().expect("guards lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn limiter_rate(guard: &Guard) -> f64 {
    guard.limits.rate_per_s.unwrap_or(1).max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookstream_telemetry::prometheus::Registry;

    fn endpoint(rate: Option<i32>, max_in_flight: i32) -> Endpoint {
        Endpoint {
            id: Uuid::now_v7(),
            tenant_id: Uuid::now_v7(),
            url: "https://example.com/hook".into(),
            description: String::new(),
            event_types: vec![],
            enabled: true,
            disabled_reason: None,
            rate_limit_per_s: rate,
            timeout_ms: 1_000,
            max_in_flight,
            created_at: chrono::Utc::now(),
            failing_since: None,
            channels: vec![],
            payload_filter: None,
            header_names: vec![],
        }
    }

    fn isolation(cfg: IsolationSettings) -> Isolation {
        Isolation::new(cfg, DispatcherMetrics::register(&Registry::new()), None)
    }

    #[tokio::test]
    async fn breaker_opens_refuses_probes_once_and_closes() {
        let iso = isolation(IsolationSettings {
            consecutive_failures: 3,
            cooldown_ms: 200,
            ..Default::default()
        });
        let ep = endpoint(None, 8);
        for _ in 0..3 {
            let pass = iso.admit(&ep, true).await.expect("closed breaker admits");
            pass.finish(Verdict::Retryable, ErrorClass::Http5xx, Duration::from_millis(5));
        }
        let refused = iso.admit(&ep, true).await.err().expect("open breaker refuses");
        assert_eq!(refused.reason, RefusalReason::BreakerOpen);
        assert!(
            refused.retry_at_ms >= now_ms() + 150,
            "comes back after the cooldown"
        );

        tokio::time::sleep(Duration::from_millis(250)).await;
        let probe = iso
            .admit(&ep, true)
            .await
            .expect("half-open lets one probe through");
        let second = iso
            .admit(&ep, true)
            .await
            .err()
            .expect("only one probe at a time");
        assert_eq!(second.reason, RefusalReason::BreakerOpen);
        probe.finish(Verdict::Retryable, ErrorClass::Timeout, Duration::from_millis(5));
        // Reopened with the cooldown doubled.
        let refused = iso.admit(&ep, true).await.err().expect("failed probe reopens");
        assert!(
            refused.retry_at_ms >= now_ms() + 350,
            "cooldown doubled to 400 ms"
        );

        tokio::time::sleep(Duration::from_millis(450)).await;
        let probe = iso
            .admit(&ep, true)
            .await
            .expect("probe after the doubled cooldown");
        probe.finish(Verdict::Delivered, ErrorClass::None, Duration::from_millis(5));
        for _ in 0..5 {
            iso.admit(&ep, true).await.expect("closed again").finish(
                Verdict::Delivered,
                ErrorClass::None,
                Duration::from_millis(5),
            );
        }
    }

    #[tokio::test]
    async fn client_errors_do_not_open_the_breaker() {
        let iso = isolation(IsolationSettings {
            consecutive_failures: 2,
            ..Default::default()
        });
        let ep = endpoint(None, 8);
        for _ in 0..10 {
            iso.admit(&ep, true).await.expect("admitted").finish(
                Verdict::Permanent,
                ErrorClass::Http4xx,
                Duration::from_millis(5),
            );
        }
    }

    #[tokio::test]
    async fn rate_limit_spaces_refusals_at_the_endpoint_rate() {
        // Tokens come every 100 ms; waiting up to 50 ms for one is not enough.
        let iso = isolation(IsolationSettings::default());
        let ep = endpoint(Some(10), 100);
        let mut admitted = 0;
        let mut refusals = Vec::new();
        for _ in 0..40 {
            match iso.admit(&ep, true).await {
                Ok(_) => admitted += 1,
                Err(r) => {
                    assert_eq!(r.reason, RefusalReason::RateLimited);
                    refusals.push(r.retry_at_ms);
                }
            }
        }
        // A burst of 10, plus what the 50 ms busy-wait lets through.
        assert!((10..=12).contains(&admitted), "admitted {admitted}");
        for pair in refusals.windows(2) {
            assert!(pair[1] - pair[0] >= 100, "refusals spaced at 1/rate: {pair:?}");
        }
    }

    #[tokio::test]
    async fn a_fast_endpoint_queues_for_its_cap_and_a_slow_one_defers_at_once() {
        let iso = isolation(IsolationSettings::default());
        let fast = endpoint(None, 2);
        let a = iso.admit(&fast, true).await.expect("first slot");
        let _b = iso.admit(&fast, true).await.expect("second slot");
        a.finish(Verdict::Delivered, ErrorClass::None, Duration::from_millis(2));
        let c = iso.admit(&fast, true).await.expect("a slot was freed");
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            drop(c);
        });
        iso.admit(&fast, true)
            .await
            .expect("a 2 ms endpoint is worth queueing for");
        release.await.unwrap();

        let slow = endpoint(None, 2);
        let a = iso.admit(&slow, true).await.expect("first slot");
        a.finish(Verdict::Retryable, ErrorClass::Timeout, Duration::from_secs(4));
        let _a = iso.admit(&slow, true).await.expect("slot");
        let _b = iso.admit(&slow, true).await.expect("slot");
        let started = std::time::Instant::now();
        let refused = iso.admit(&slow, true).await.err().expect("cap reached");
        assert_eq!(refused.reason, RefusalReason::EndpointBusy);
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "a 4 s endpoint is not queued for (2 s expected): deferred at once"
        );
    }

    #[tokio::test]
    async fn a_full_cap_waits_its_turn_when_every_endpoint_waits_alike() {
        let iso = Arc::new(isolation(IsolationSettings::default()));
        let eps: Vec<Endpoint> = (0..10).map(|_| endpoint(None, 1)).collect();
        let mut held = Vec::new();
        let mut queued = Vec::new();
        for ep in &eps {
            // Fast so far: attempts queue for the one slot.
            let first = iso.admit(ep, true).await.expect("slot");
            first.finish(Verdict::Delivered, ErrorClass::None, Duration::from_millis(10));
            held.push(iso.admit(ep, true).await.expect("slot"));
            for _ in 0..2 {
                let (iso, ep) = (iso.clone(), ep.clone());
                queued.push(tokio::spawn(async move { iso.admit(&ep, true).await.is_ok() }));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(iso.pace.queued.load(Ordering::Relaxed), 20);
        // Then every endpoint is as slow as the dispatcher is busy: 3 s per attempt, two
        // attempts finishing per second in all.
        for ep in &eps {
            iso.guard(ep).observe_latency(Duration::from_secs(3));
        }
        iso.pace.per_s.store(2, Ordering::Relaxed);
        // One more for endpoint 0 would wait 9 s (> busy_wait), but so does everyone (10 s).
        let waited = tokio::time::timeout(Duration::from_millis(200), iso.admit(&eps[0], true)).await;
        assert!(waited.is_err(), "waits for its turn instead of being deferred");
        assert_eq!(
            iso.pace.queued.load(Ordering::Relaxed),
            20,
            "a wait its caller gave up on is no longer counted"
        );

        // The same endpoint alone among idle ones is the bottleneck: deferred at once.
        let iso = isolation(IsolationSettings::default());
        let lone = endpoint(None, 1);
        let first = iso.admit(&lone, true).await.expect("slot");
        first.finish(Verdict::Delivered, ErrorClass::None, Duration::from_secs(3));
        let _held = iso.admit(&lone, true).await.expect("slot");
        iso.pace.per_s.store(2, Ordering::Relaxed);
        let refused = iso.admit(&lone, true).await.err().expect("deferred");
        assert_eq!(refused.reason, RefusalReason::EndpointBusy);
        drop(held);
        for q in queued {
            q.abort();
        }
    }

    #[tokio::test]
    async fn changed_limits_rebuild_the_guard_and_idle_guards_are_evicted() {
        let iso = isolation(IsolationSettings {
            idle_evict_ms: 0,
            ..Default::default()
        });
        let mut ep = endpoint(None, 1);
        let _held = iso.admit(&ep, true).await.expect("slot");
        ep.max_in_flight = 2;
        iso.admit(&ep, true)
            .await
            .expect("the raised cap applies at once");
        drop(_held);
        tokio::time::sleep(Duration::from_millis(5)).await;
        iso.evict_idle();
        assert!(iso.is_empty());
    }
}
