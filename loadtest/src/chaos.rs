//! The `chaos` scenario: steady load with fan-out, retries and dead letters while faults
//! strike one after another (`faults.rs` plans them): SIGKILLs of every service, rolling
//! restarts of the events role, broker SIGKILL-and-restarts, PostgreSQL restarts (fast and
//! immediate) and a database outage. Then everything is read back and counted by id
//! (`fault_tally.rs`).
//!
//! Longer than 800 lines: one scenario's run, in the order its faults strike; planning is in
//! `faults.rs` and counting in `fault_tally.rs`. Issue 44.2 moves the harness onto libraries,
//! which shortens it.
//!
//! Topology: two relays and two dispatchers of each role (`dispatcher.roles`), so a kill never
//! stops a kind of work entirely. Load: `--rate` events/s (200), each to three fast endpoints,
//! one that answers 503 to 30 % of requests (retries through the tiers) and one that answers
//! 404 (dead letters the sink stores). The broker and PostgreSQL are restarted through
//! `scripts/stack/` on the stack the environment names, which must be the run's own
//! (`stack::own_stack`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hookstream_proto::{DeadLetter as DeadLetterProto, EventEnvelope, Message as _};
use hookstream_store::sqlx::{self, PgPool};
use hookstream_testkit::process::service_env;
use hookstream_testkit::{Behaviour, Received, Receiver, TestEnv};
use uuid::Uuid;

use crate::brokers;
use crate::chart::{self, Chart, Markers, Points};
use crate::cli::RunArgs;
use crate::engine::{self, Class, Kind, Outcome, Sample, Service};
use crate::fault_tally::{self, Commit, DeadLetter, Observed, Seen, Shipped, Stored, Struck};
use crate::faults::{self, Before, FaultKind, Planned, Role};
use crate::group;
use crate::phase_charts;
use crate::report::{
    ChaosFigures, ChaosSection, Crash, DrainFigures, HandoverFigures, Machine, ProducerFigures, RunReport,
    ScenarioReport,
};
use crate::schedule::RETRY_SCHEDULE_MS;
use crate::stack::{self, service_bin};

/// Instances of each service kind.
const INSTANCES: usize = 2;
/// The relay's `batch_size` (its default, which the run keeps).
const RELAY_BATCH_SIZE: usize = 1000;
/// The limits the events role is held to, alone: a killed member's partitions resume within
/// the session timeout (6 s) and a rebalance; a stopped one hands over at once.
const SIGKILL_RESUME_LIMIT_MS: f64 = 7_000.0;
const SIGTERM_HANDOVER_LIMIT_MS: f64 = 1_000.0;
/// In a rolling restart, how long the new instance runs beside the old one before the old
/// one gets SIGTERM (it joins the group and takes its share).
const OVERLAP: Duration = Duration::from_secs(5);
/// The longest wait for the pipeline to catch up before an isolated fault.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(180);
/// A crashed service is restarted no sooner than this after it exited (a service that cannot
/// start, while PostgreSQL is down, say, is not restarted in a tight loop).
const CRASH_RESTART_AFTER: Duration = Duration::from_secs(2);
/// Producer connections, as in the engine.
const PRODUCERS: usize = 4;
/// The longest wait for a restarted broker to be back in every partition's in-sync replicas.
const IN_SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// The receiver classes: three fast endpoints, one flaky, one rejecting.
fn classes() -> Vec<Class> {
    vec![
        Class::new("fast", Kind::Http(Behaviour::Ok), 3, true),
        Class::new("flaky_30pct", Kind::Http(Behaviour::Flaky(30)), 1, true),
        Class::new("rejecting_404", Kind::Http(Behaviour::Status(404)), 1, false),
    ]
}

fn class_of(name: &str) -> fault_tally::Class {
    match name {
        "fast" => fault_tally::Class::Fast,
        "rejecting_404" => fault_tally::Class::Rejecting,
        _ => fault_tally::Class::Flaky,
    }
}

/// One service process of the topology.
struct Slot {
    role: Role,
    index: usize,
    svc: Service,
    /// Set when it exited by itself: when, to restart it after `CRASH_RESTART_AFTER`.
    down_since: Option<Instant>,
}

impl Slot {
    fn name(&self) -> String {
        format!("{}-{}", self.role.name(), self.index)
    }
}

/// The environment of a service of `role`.
fn vars(env: &TestEnv, role: Role, max_in_flight_events: usize) -> Vec<(String, String)> {
    let roles = match role {
        Role::Relay => return service_env(env),
        Role::Events => "events",
        Role::Retry => "retry",
        Role::DlqSink => "dlq_sink",
    };
    engine::role_vars(env, max_in_flight_events, &[roles])
}

fn start_topology(env: &TestEnv, args: &RunArgs) -> anyhow::Result<Vec<Slot>> {
    let mut slots = Vec::new();
    for role in Role::ALL {
        let bin = service_bin(match role {
            Role::Relay => "outbox-relay",
            _ => "dispatcher",
        });
        for index in 0..INSTANCES {
            let name = format!("{}-{index}", role.name());
            let log = args.out.join(format!("chaos-seed{}-{name}.log", args.seed));
            let svc = Service::start(
                name,
                bin.clone(),
                vars(env, role, args.max_in_flight_events()),
                log,
            )?;
            slots.push(Slot {
                role,
                index,
                svc,
                down_since: None,
            });
        }
    }
    Ok(slots)
}

/// What the producers did.
#[derive(Default)]
struct Produced {
    commits: Vec<Commit>,
    not_committed: usize,
}

/// Commits `rate` events/s until `stop`, from `PRODUCERS` connections: every 10 ms the events
/// due go as one transaction to a free producer. When none is free (PostgreSQL down: each
/// gives up after 1 s) the events due are not committed and counted as such, so the offered
/// rate stays steady and no burst follows an outage.
async fn produce(
    url: String,
    tenant: Uuid,
    rate: usize,
    stop: Arc<AtomicBool>,
    committed: Arc<AtomicUsize>,
) -> anyhow::Result<Produced> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(PRODUCERS as u32)
        .acquire_timeout(Duration::from_secs(1))
        .connect_lazy(&url)?;
    let produced = Arc::new(Mutex::new(Produced::default()));
    let (tx, rx) = tokio::sync::mpsc::channel::<(usize, usize)>(PRODUCERS);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut workers = tokio::task::JoinSet::new();
    let last_error = Arc::new(Mutex::new(Instant::now() - Duration::from_secs(10)));
    for _ in 0..PRODUCERS {
        let (pool, rx, produced, committed, last_error) = (
            pool.clone(),
            rx.clone(),
            produced.clone(),
            committed.clone(),
            last_error.clone(),
        );
        workers.spawn(async move {
            loop {
                let Some((n, seq)) = rx.lock().await.recv().await else {
                    return;
                };
                match enqueue(&pool, tenant, n, seq).await {
                    Ok(ids) => {
                        let done_ms = engine::unix_ms();
                        committed.fetch_add(ids.len(), Ordering::Relaxed);
                        lock(&produced).commits.push(Commit { done_ms, ids });
                    }
                    Err(e) => {
                        lock(&produced).not_committed += n;
                        let mut last = lock(&last_error);
                        if last.elapsed() >= Duration::from_secs(2) {
                            eprintln!("[chaos] producer: {n} events not committed: {e:#}");
                            *last = Instant::now();
                        }
                    }
                }
            }
        });
    }
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut scheduled = 0;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let due = (start.elapsed().as_secs_f64() * rate as f64) as usize;
        if due > scheduled {
            let n = (due - scheduled).min(2_000);
            if tx.try_send((n, scheduled)).is_err() {
                lock(&produced).not_committed += n;
            }
            scheduled = due;
        }
    }
    drop(tx);
    while workers.join_next().await.is_some() {}
    let mut out = lock(&produced);
    Ok(std::mem::take(&mut *out))
}

/// `n` events in one transaction; their ids. Aggregates follow `seq` so that small
/// transactions still spread over every partition.
async fn enqueue(pool: &PgPool, tenant: Uuid, n: usize, seq: usize) -> anyhow::Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar(
        "SELECT hookstream.enqueue($1, 'order.updated',
                jsonb_build_object('n', $3 + g, 'note', 'a typical small webhook payload', 'amount', g * 3,
                                   'created_ms', extract(epoch FROM clock_timestamp()) * 1000),
                'order', 'agg-' || (($3 + g) % 1000))
           FROM generate_series(1, $2) g",
    )
    .bind(tenant)
    .bind(i32::try_from(n).context("batch too large")?)
    .bind(i64::try_from(seq).unwrap_or(0))
    .fetch_all(pool)
    .await?)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The outbox's backlog, sampled every 500 ms (`None` while PostgreSQL does not answer).
fn backlog_sampler(
    pool: PgPool,
    stop: Arc<AtomicBool>,
) -> (Arc<Mutex<Option<i64>>>, tokio::task::JoinHandle<()>) {
    let latest = Arc::new(Mutex::new(None));
    let out = latest.clone();
    let handle = tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let count =
                sqlx::query_scalar::<_, i64>("SELECT count(*) FROM hookstream.outbox").fetch_one(&pool);
            let v = tokio::time::timeout(Duration::from_millis(400), count)
                .await
                .ok()
                .and_then(Result::ok);
            *lock(&out) = v;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    (latest, handle)
}

/// What the run's driver shares with its samplers.
struct Shared {
    receivers: Vec<Arc<Receiver>>,
    backlog: Arc<Mutex<Option<i64>>>,
    /// The events role's lag on the events topic, and the DLQ sink's on the DLQ topic.
    lag: engine::SharedLag,
    sink_lag: engine::SharedLag,
    committed: Arc<AtomicUsize>,
    timeline: Mutex<Vec<Sample>>,
    /// The DLQ sink's lag beside each sample (the engine's samples have one lag).
    sink_lags: Mutex<Vec<Option<i64>>>,
}

/// Samples the run every 250 ms (the charts' data) and prints progress every 2 s.
async fn sample_timeline(
    shared: Arc<Shared>,
    started: Instant,
    stop: Arc<AtomicBool>,
    faults: Arc<AtomicUsize>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let (mut last_print, mut last_delivered) = (Instant::now(), 0);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let delivered: usize = shared.receivers.iter().map(|r| r.successes()).sum();
        let requests: usize = shared.receivers.iter().map(|r| r.count()).sum();
        let backlog = *lock(&shared.backlog);
        let lag = *lock(&shared.lag);
        lock(&shared.timeline).push(Sample {
            t_s: started.elapsed().as_secs_f64(),
            delivered,
            requests,
            backlog: backlog.unwrap_or(-1),
            lag,
        });
        lock(&shared.sink_lags).push(*lock(&shared.sink_lag));
        if last_print.elapsed() >= Duration::from_secs(2) {
            let rate = (delivered - last_delivered) as f64 / last_print.elapsed().as_secs_f64();
            let show = |v: Option<i64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
            eprintln!(
                "[chaos] {:6.1} s  faults {:>4}  committed {:>7}  2xx {:>8}  {rate:>6.0}/s  outbox {:>6}  lag {:>6}  sink lag {:>6}",
                started.elapsed().as_secs_f64(),
                faults.load(Ordering::Relaxed),
                shared.committed.load(Ordering::Relaxed),
                delivered,
                show(backlog),
                show(lag),
                show(*lock(&shared.sink_lag)),
            );
            (last_print, last_delivered) = (Instant::now(), delivered);
        }
    }
}

/// The driver: the services, and what happened to them.
struct Driver<'a> {
    args: &'a RunArgs,
    /// The run's Kafka (where the cluster faults look up leaders).
    kafka: hookstream_config::KafkaConfig,
    shared: Arc<Shared>,
    slots: Vec<Slot>,
    started: Instant,
    struck: Vec<Struck>,
    crashes: Vec<Crash>,
    unclean_exits: usize,
    faults_done: Arc<AtomicUsize>,
}

impl Driver<'_> {
    fn t_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Services that exited by themselves: recorded (as a crash, and as a fault that can
    /// explain what it made the pipeline redo) and restarted.
    async fn check(&mut self) -> anyhow::Result<()> {
        let t_s = self.t_s();
        for slot in &mut self.slots {
            slot.svc.sample();
            if let Some(code) = slot.svc.exited().await {
                let now = engine::unix_ms();
                eprintln!(
                    "[chaos] {t_s:.1} s: {} EXITED BY ITSELF (exit code {code:?}); log: {}",
                    slot.name(),
                    slot.svc.log().display()
                );
                self.crashes.push(Crash {
                    at_s: t_s,
                    process: slot.name(),
                    exit_code: code,
                    log: slot.svc.log().display().to_string(),
                });
                self.struck.push(Struck {
                    kind: FaultKind::UnplannedExit,
                    begun_ms: now,
                    at_ms: now,
                    back_ms: now,
                    settled_ms: None,
                    target: Some(slot.name()),
                    relays_hit: usize::from(slot.role == Role::Relay),
                });
                slot.down_since = Some(Instant::now());
            }
            if slot
                .down_since
                .is_some_and(|d| d.elapsed() >= CRASH_RESTART_AFTER)
            {
                slot.svc.restart()?;
                slot.down_since = None;
            }
        }
        Ok(())
    }

    /// Waits `d`, watching the services.
    async fn wait(&mut self, d: Duration) -> anyhow::Result<()> {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.check().await?;
            tokio::time::sleep((until - Instant::now()).min(Duration::from_millis(250))).await;
        }
        Ok(())
    }

    /// Whether deliveries have caught up: nothing waits in the outbox or the events topic
    /// beyond what the offered rate keeps there. (Not the DLQ sink: it drains a backlog barely
    /// faster than dead letters come at this rate, see docs/benchmarks.md; its lag is charted.)
    fn caught_up(&self) -> bool {
        let rate = self.args.rate() as i64;
        let backlog = *lock(&self.shared.backlog);
        let lag = *lock(&self.shared.lag);
        matches!((backlog, lag), (Some(b), Some(l)) if b <= (rate / 2).max(50) && l <= rate.max(100))
    }

    /// Waits until the pipeline caught up (or `CATCH_UP_TIMEOUT`), then `SETTLE`; an isolated
    /// fault before it settled then.
    async fn catch_up(&mut self) -> anyhow::Result<()> {
        let since = Instant::now();
        while !self.caught_up() {
            if since.elapsed() >= CATCH_UP_TIMEOUT {
                eprintln!(
                    "[chaos] {:.1} s: not caught up after {} s, going on",
                    self.t_s(),
                    CATCH_UP_TIMEOUT.as_secs()
                );
                break;
            }
            self.wait(Duration::from_millis(250)).await?;
        }
        if let Some(last) = self
            .struck
            .iter_mut()
            .rev()
            .find(|f| f.kind != FaultKind::UnplannedExit)
        {
            if last.kind.isolated() && last.settled_ms.is_none() {
                last.settled_ms = Some(engine::unix_ms());
            }
        }
        self.wait(faults::SETTLE).await
    }

    fn slot(&mut self, role: Role, index: usize) -> &mut Slot {
        let i = self
            .slots
            .iter()
            .position(|s| s.role == role && s.index == index)
            .unwrap_or(0);
        &mut self.slots[i]
    }

    async fn strike(&mut self, f: &Planned) -> anyhow::Result<()> {
        let (pg_port, kafka_port) = stack::stack_ports();
        let begun_ms = engine::unix_ms();
        let mut at_ms = begun_ms;
        let mut target = None;
        let mut relays_hit = 0;
        match f.kind {
            FaultKind::RelayKill
            | FaultKind::EventsKill
            | FaultKind::RetryKill
            | FaultKind::DlqSinkKill
            | FaultKind::EventsKillAlone => {
                let role = f.kind.role().unwrap_or(Role::Relay);
                relays_hit = usize::from(role == Role::Relay);
                let slot = self.slot(role, f.instance);
                target = Some(slot.name());
                slot.svc.kill9().await;
                slot.svc.restart()?;
                slot.down_since = None;
            }
            FaultKind::EventsSigterm => {
                let successor = self.slot(Role::Events, f.instance).svc.spawn_successor()?;
                self.wait(OVERLAP).await?;
                let slot = self.slot(Role::Events, f.instance);
                target = Some(slot.name());
                at_ms = engine::unix_ms();
                let code = slot.svc.hand_over(successor).await;
                slot.down_since = None;
                if code != Some(0) {
                    eprintln!("[chaos] {} exited with {code:?} after SIGTERM", slot.name());
                    self.unclean_exits += 1;
                }
            }
            FaultKind::BrokerRestart => {
                relays_hit = INSTANCES;
                stack::script("kafka.sh", &["kill9"]).await?;
                ensure_down(&kafka_port, "kafka.sh kill9").await?;
                stack::script("kafka.sh", &["start"]).await?;
            }
            FaultKind::BrokerLeaderKill => {
                relays_hit = INSTANCES;
                // As an operator would: the next broker goes only once the last one is back in
                // every partition's in-sync replicas.
                brokers::wait_in_sync(&self.kafka, &self.kafka.topics.events, IN_SYNC_TIMEOUT).await?;
                let leading = brokers::busiest_leader(&self.kafka, &self.kafka.topics.events).await?;
                let node = leading.node.to_string();
                target = Some(format!(
                    "broker {node} (leading {} of {} partitions)",
                    leading.led, leading.partitions
                ));
                at_ms = engine::unix_ms();
                stack::script("kafka.sh", &["kill9", &node]).await?;
                ensure_down(&stack::node_port(&kafka_port, leading.node), "kafka.sh kill9").await?;
                stack::script("kafka.sh", &["start", &node]).await?;
            }
            FaultKind::BrokerRollingRestart => {
                relays_hit = INSTANCES;
                brokers::wait_in_sync(&self.kafka, &self.kafka.topics.events, IN_SYNC_TIMEOUT).await?;
                target = Some(format!("brokers 1 to {}", stack::brokers()));
                at_ms = engine::unix_ms();
                for node in 1..=stack::brokers() {
                    let n = node.to_string();
                    stack::script("kafka.sh", &["stop", &n]).await?;
                    stack::script("kafka.sh", &["start", &n]).await?;
                    let took = brokers::wait_in_sync(&self.kafka, &self.kafka.topics.events, IN_SYNC_TIMEOUT)
                        .await?;
                    eprintln!(
                        "[chaos] {:.1} s: broker {n} restarted, in sync {:.1} s later",
                        self.t_s(),
                        took.as_secs_f64()
                    );
                    self.check().await?;
                }
            }
            FaultKind::PgRestartFast | FaultKind::PgRestartImmediate | FaultKind::DbOutage => {
                relays_hit = INSTANCES;
                let mode = match f.kind {
                    FaultKind::PgRestartImmediate => "immediate",
                    _ => "fast",
                };
                stack::script("postgres.sh", &["stop", mode]).await?;
                ensure_down(&pg_port, "postgres.sh stop").await?;
                if f.kind == FaultKind::DbOutage {
                    self.wait(Duration::from_secs(self.args.fault_counts().db_outage_s))
                        .await?;
                }
                stack::script("postgres.sh", &["start"]).await?;
            }
            FaultKind::UnplannedExit => {}
        }
        let back_ms = engine::unix_ms();
        eprintln!(
            "[chaos] {:.1} s: {}{} ({:.0} ms)",
            (at_ms - back_ms) / 1000.0 + self.t_s(),
            f.kind.key(),
            target.as_ref().map(|t| format!(" {t}")).unwrap_or_default(),
            back_ms - at_ms
        );
        self.struck.push(Struck {
            kind: f.kind,
            begun_ms,
            at_ms,
            back_ms,
            settled_ms: None,
            target,
            relays_hit,
        });
        self.faults_done.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// A fault through the stack scripts must have taken the service down: if the port still
/// answers, the scripts acted on another stack than the run's (another state directory).
async fn ensure_down(port: &str, what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !stack::listening(port).await,
        "{what} left 127.0.0.1:{port} answering: the scripts' HOOKSTREAM_STATE_DIR is not the stack this run uses"
    );
    Ok(())
}

/// Every committed event delivered to every expecting endpoint (distinct ids answered 2xx), or
/// failed at every attempt of the retry schedule (it is dead-lettered then; the tally checks).
fn all_delivered(receivers: &[(fault_tally::Class, Arc<Receiver>)], committed: &HashSet<String>) -> bool {
    let last = RETRY_SCHEDULE_MS.len() as u32 + 1;
    receivers
        .iter()
        .filter(|(c, _)| *c != fault_tally::Class::Rejecting)
        .all(|(_, r)| {
            if r.count() < committed.len() {
                return false;
            }
            // Per event: answered 2xx, and the attempts made.
            let mut seen: HashMap<String, (bool, HashSet<u32>)> = HashMap::new();
            for d in r.received() {
                let e = seen.entry(d.webhook_id).or_default();
                e.0 |= (200..300).contains(&d.status);
                e.1.insert(d.attempt);
            }
            committed.iter().all(|id| {
                seen.get(id)
                    .is_some_and(|(ok, attempts)| *ok || (1..=last).all(|a| attempts.contains(&a)))
            })
        })
}

async fn dead_letter_rows(pool: &PgPool) -> Option<i64> {
    let q = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM hookstream.dead_letters").fetch_one(pool);
    tokio::time::timeout(Duration::from_secs(5), q).await.ok()?.ok()
}

pub async fn run(args: &RunArgs) -> anyhow::Result<(RunReport, Vec<Chart>)> {
    let counts = args.fault_counts();
    let cluster_faults = counts.broker_leader_kills + counts.broker_rolling_restarts;
    if counts.broker_restarts + counts.pg_restarts + cluster_faults > 0 || counts.db_outage_s > 0 {
        stack::own_stack()?;
    }
    if cluster_faults > 0 {
        anyhow::ensure!(
            stack::brokers() >= 3,
            "leader kills and rolling restarts need a cluster: start the run's stack with HOOKSTREAM_KAFKA_BROKERS=3"
        );
    }
    let plan = faults::plan(args.seed, counts, args.fault_every_s, INSTANCES);
    let rate = args.rate();
    let env = TestEnv::new(6).await?;
    let tenant = env.tenant("bench").await?;
    let classes = classes();
    let mut fleet = engine::fleet(&env, tenant, &classes).await?;
    let receivers: Vec<(fault_tally::Class, Uuid, Arc<Receiver>)> = fleet
        .iter_mut()
        .filter_map(|e| {
            let r = e.receiver.take()?;
            Some((class_of(&classes[e.class].name), e.id, Arc::new(r)))
        })
        .collect();
    let slots = start_topology(&env, args)?;
    eprintln!(
        "[chaos] {} faults planned (seed {}), {rate} events/s; services: {}",
        plan.len(),
        args.seed,
        slots.iter().map(Slot::name).collect::<Vec<_>>().join(", ")
    );
    // Every events-role instance must own partitions before the producers start: one joining
    // later moves partitions with deliveries under way, whose duplicates no fault explains.
    // (A fixed pause was not enough on a loaded machine.) Then the relays take their shards.
    group::wait_for_group(
        &env.kafka,
        &env.kafka.group_id,
        &env.kafka.topics.events,
        INSTANCES,
        Duration::from_secs(120),
    )
    .await?;
    // The retry role likewise: an instance joining after the first retries were taken moves
    // tier partitions with attempts under way, and redoes them with no fault to blame (seen
    // on a loaded machine, three brokers starting beside the services).
    if let Some(tier) = env.retry.tiers().into_iter().next() {
        group::wait_for_group(
            &env.kafka,
            &env.retry.group_id,
            &tier.topic,
            INSTANCES,
            Duration::from_secs(120),
        )
        .await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let stop_producing = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicUsize::new(0));
    let (backlog, backlog_task) = backlog_sampler(env.pool.clone(), stop.clone());
    let (lag, lag_thread) =
        engine::lag_sampler(&env, &env.kafka.group_id, &env.kafka.topics.events, stop.clone())?;
    let (sink_lag, sink_lag_thread) =
        engine::lag_sampler(&env, &env.dlq_sink_group(), &env.kafka.topics.dlq, stop.clone())?;
    let shared = Arc::new(Shared {
        receivers: receivers.iter().map(|r| r.2.clone()).collect(),
        backlog,
        lag,
        sink_lag,
        committed: committed.clone(),
        timeline: Mutex::new(Vec::new()),
        sink_lags: Mutex::new(Vec::new()),
    });
    let started = Instant::now();
    let started_ms = engine::unix_ms();
    let faults_done = Arc::new(AtomicUsize::new(0));
    let sampler = tokio::spawn(sample_timeline(
        shared.clone(),
        started,
        stop.clone(),
        faults_done.clone(),
    ));
    let producer = tokio::spawn(produce(
        env.database.url.clone(),
        tenant,
        rate,
        stop_producing.clone(),
        committed.clone(),
    ));
    let mut driver = Driver {
        args,
        kafka: env.kafka.clone(),
        shared: shared.clone(),
        slots,
        started,
        struck: Vec::new(),
        crashes: Vec::new(),
        unclean_exits: 0,
        faults_done,
    };
    let driven = drive(&mut driver, &plan).await;
    stop_producing.store(true, Ordering::Relaxed);
    let produced = producer.await??;
    let production_s = started.elapsed().as_secs_f64();
    let drained = match driven {
        Ok(()) => drain_pipeline(&mut driver, &env, &receivers, &produced).await,
        Err(e) => Err(e),
    };
    stop.store(true, Ordering::Relaxed);
    let mut processes = Vec::new();
    for slot in driver.slots.drain(..) {
        let name = slot.name();
        processes.push((name, slot.svc.stop().await));
    }
    let _ = sampler.await;
    let _ = backlog_task.await;
    let _ = tokio::task::spawn_blocking(move || (lag_thread.join(), sink_lag_thread.join())).await;
    let drained = drained?;
    let wall_s = started.elapsed().as_secs_f64();

    eprintln!("[chaos] reading back the events and DLQ topics and the stored dead letters");
    let shipped = read_shipped(&env).await?;
    let (dead_letters, stored) = read_dead_letters(&env).await?;
    let received: Vec<Vec<Received>> = receivers.iter().map(|r| r.2.received()).collect();
    let tallied = fault_tally::tally(&Observed {
        faults: &driver.struck,
        commits: &produced.commits,
        endpoints: receivers
            .iter()
            .zip(&received)
            .map(|((class, id, _), got)| Seen {
                endpoint: *id,
                class: *class,
                received: got,
            })
            .collect(),
        shipped: &shipped,
        dead_letters: &dead_letters,
        stored: &stored,
        batch_size: RELAY_BATCH_SIZE,
        started_ms,
    });

    // The contract over the committed events only: an in-doubt id delivered must not stand in
    // for a committed one that was lost.
    let ids: HashSet<String> = produced
        .commits
        .iter()
        .flat_map(|c| c.ids.iter().map(Uuid::to_string))
        .collect();
    let mut by_class: Vec<Vec<Vec<Received>>> = vec![Vec::new(); classes.len()];
    for (e, got) in fleet.iter().zip(received) {
        by_class[e.class].push(got.into_iter().filter(|d| ids.contains(&d.webhook_id)).collect());
    }
    let timeline = std::mem::take(&mut *lock(&shared.timeline));
    let outcome = Outcome {
        label: "chaos".into(),
        events: ids.len(),
        classes: classes.clone(),
        received: by_class,
        recovered_at_ms: vec![None; classes.len()],
        started_ms,
        wall_s,
        timeline,
        processes,
        kills: Vec::new(),
        drained: drained.deliveries_s.is_some() && drained.dead_letters_s.is_some(),
        held_at_deadline: drained.held_at_deadline,
        production_s: Some(production_s),
        attempt_log: None,
    };
    let mut contract = engine::contract(&[&outcome]);
    // A pair that failed every attempt of the schedule and was dead-lettered was never to be
    // delivered: not expected, not lost (the tally checked its dead letter).
    let exhausted = tallied.retries_exhausted.len();
    contract.expected_deliveries -= exhausted;
    contract.lost = contract.lost.saturating_sub(exhausted);
    if let Some(c) = contract.per_class.get_mut("flaky_30pct") {
        c.expected_deliveries -= exhausted;
        c.lost = c.lost.saturating_sub(exhausted);
    }
    for (id, endpoint) in &tallied.retries_exhausted {
        eprintln!("[chaos] {id} failed every attempt at endpoint {endpoint} and was dead-lettered");
    }
    // Cut off by the deadline while the pipeline still held records: the pairs missing may
    // still arrive, so they are not yet delivered rather than lost (as in the contract).
    let mut lost = tallied.lost.clone();
    // (Held is read only when the deliveries' deadline passed.)
    let deliveries_not_yet = if drained.held_at_deadline.is_some_and(|h| h > 0) {
        std::mem::take(&mut lost.deliveries)
    } else {
        0
    };
    let kind_max = |k: FaultKind| tallied.per_kind.get(k.key()).and_then(|f| f.resume_ms.max);
    let chaos = ChaosFigures {
        seed: args.seed,
        rate_per_s: rate,
        topology: Role::ALL
            .iter()
            .map(|r| (r.name().to_string(), INSTANCES))
            .collect(),
        fault_every_min_s: args.fault_every_s.0,
        fault_every_max_s: args.fault_every_s.1,
        db_outage_s: counts.db_outage_s,
        producer: ProducerFigures {
            committed: ids.len(),
            not_committed: produced.not_committed,
            in_doubt: tallied.in_doubt,
        },
        lost,
        retries_exhausted: exhausted,
        drain: DrainFigures {
            deliveries_s: drained.deliveries_s,
            dead_letters_s: drained.dead_letters_s,
            dead_letters_backlog: drained.sink_backlog,
            deliveries_deadline_s: args.deadline_s,
            held_at_deadline: drained.held_at_deadline,
            deliveries_not_yet,
        },
        per_kind: tallied.per_kind.clone(),
        unattributed_duplicates: tallied.unattributed_duplicates,
        unattributed_examples: tallied.unattributed_examples.clone(),
        crashes: driver.crashes.clone(),
        events_role: HandoverFigures {
            sigkill_resume_max_ms: kind_max(FaultKind::EventsKillAlone),
            sigkill_limit_ms: SIGKILL_RESUME_LIMIT_MS,
            interleaved_sigkill_resume_max_ms: kind_max(FaultKind::EventsKill),
            sigterm_handover_max_ms: kind_max(FaultKind::EventsSigterm),
            sigterm_limit_ms: SIGTERM_HANDOVER_LIMIT_MS,
            unclean_exits: driver.unclean_exits,
        },
        measures: fault_tally::measures(),
        faults: tallied.faults.clone(),
    };
    let mut charts = phase_charts::charts(&[&outcome]);
    let sink_lags = std::mem::take(&mut *lock(&shared.sink_lags));
    charts.extend(fault_charts(
        &outcome,
        &sink_lags,
        &driver.struck,
        &produced.commits,
        started_ms,
    ));
    // Keep the database and topics of a run that lost something or crashed, for a post-mortem.
    if chaos.lost.total() > 0
        || chaos.drain.deliveries_not_yet > 0
        || !chaos.crashes.is_empty()
        || contract.lost > 0
    {
        eprintln!(
            "[chaos] kept database {} and topics {}* for a post-mortem; logs in {}",
            env.name,
            env.kafka.topics.events.trim_end_matches("events"),
            args.out.display()
        );
    } else if let Err(e) = env.discard().await {
        eprintln!("[chaos] could not drop its database and topics: {e:#}");
    }
    // The cluster faults' figures at the top: the longest delivery stall of a broker fault,
    // and the early retries.
    let stall_s = tallied
        .per_kind
        .iter()
        .filter(|(k, _)| k.starts_with("broker_"))
        .filter_map(|(_, f)| f.resume_ms.max)
        .reduce(f64::max)
        .map(|ms| ms / 1000.0);
    let early = Some(contract.early_retries);
    let report = ScenarioReport {
        contract,
        figures: ChaosSection {
            chaos: Box::new(chaos),
            stall_s,
            early,
        },
        baseline: None,
        machine: Machine::read(),
    };
    let report = match args.scenario {
        crate::cli::Scenario::BrokerKill => RunReport::BrokerKill(report),
        _ => RunReport::Chaos(report),
    };
    Ok((report, charts))
}

/// Carries the plan out, then lets the load run on until the pipeline caught up.
async fn drive(d: &mut Driver<'_>, plan: &[Planned]) -> anyhow::Result<()> {
    // Steady load before the first fault.
    d.wait(Duration::from_secs(5)).await?;
    for f in plan {
        match f.before {
            Before::Pause(p) => d.wait(p).await?,
            Before::CaughtUp => d.catch_up().await?,
        }
        d.strike(f).await?;
    }
    d.catch_up().await
}

/// How the pipeline drained after the producers stopped.
#[derive(Debug, Clone, Copy, Default)]
struct Drained {
    /// Seconds until every committed event was delivered to every expecting endpoint and the
    /// outbox was empty (`None`: not within `--deadline-s`).
    deliveries_s: Option<f64>,
    /// Seconds until every DLQ record was stored (`None`: the sink stopped making progress).
    dead_letters_s: Option<f64>,
    /// DLQ records not yet stored when the producers stopped (-1: not known).
    sink_backlog: i64,
    /// At the deadline of deliveries that did not drain: records the pipeline still held
    /// (outbox rows, events and retry-tier records not finished).
    held_at_deadline: Option<i64>,
}

/// The DLQ sink may take this long without storing a row before the drain gives up on it.
const SINK_STALL: Duration = Duration::from_secs(60);
/// And this long in all (it drains a backlog slowly: docs/benchmarks.md).
const SINK_DRAIN_CAP: Duration = Duration::from_secs(3_600);

/// Where the DLQ sink stands: records on the topic, records the sink has finished (its
/// group's committed offsets: stored, or found stored already), and rows stored. The kills
/// hand some dead letters off twice and the sink stores each once, so rows alone never
/// reach the records.
#[derive(Debug, Clone, Copy)]
struct SinkProgress {
    records: i64,
    finished: i64,
    rows: i64,
    /// Every partition's committed offset at its end.
    done: bool,
}

async fn sink_progress(env: &TestEnv) -> SinkProgress {
    let topic = &env.kafka.topics.dlq;
    let ends = env.end_offsets(topic).await.ok();
    let committed = env.group_offsets(&env.dlq_sink_group(), topic).await.ok();
    // -1: not known (Kafka did not answer).
    let (records, finished, done) = match (ends, committed) {
        (Some(e), Some(c)) if e.len() == c.len() => (
            e.iter().sum(),
            c.iter().map(|o| (*o).max(0)).sum(),
            hookstream_testkit::committed_at_end(&e, &c),
        ),
        _ => (-1, -1, false),
    };
    SinkProgress {
        records,
        finished,
        rows: dead_letter_rows(&env.pool).await.unwrap_or(-1),
        done,
    }
}

/// After the producers stopped: waits until every committed event was delivered to every
/// expecting endpoint and the outbox is empty (or `--deadline-s`), then until every DLQ
/// record is stored, for as long as the sink makes progress (a loss is what never arrives,
/// not what arrives slowly; how long it took is reported).
async fn drain_pipeline(
    d: &mut Driver<'_>,
    env: &TestEnv,
    receivers: &[(fault_tally::Class, Uuid, Arc<Receiver>)],
    produced: &Produced,
) -> anyhow::Result<Drained> {
    let ids: HashSet<String> = produced
        .commits
        .iter()
        .flat_map(|c| c.ids.iter().map(Uuid::to_string))
        .collect();
    let classes: Vec<(fault_tally::Class, Arc<Receiver>)> =
        receivers.iter().map(|r| (r.0, r.2.clone())).collect();
    let stopped = Instant::now();
    let deadline = stopped + Duration::from_secs(d.args.deadline_s);
    let sink = sink_progress(env).await;
    let mut out = Drained {
        sink_backlog: if sink.records < 0 {
            -1
        } else {
            sink.records - sink.finished
        },
        ..Default::default()
    };
    eprintln!(
        "[chaos] {:.1} s: producers stopped; draining ({} dead letters not stored yet)",
        d.t_s(),
        out.sink_backlog
    );
    loop {
        d.wait(Duration::from_secs(5)).await?;
        let outbox_empty = *lock(&d.shared.backlog) == Some(0);
        if outbox_empty && all_delivered(&classes, &ids) {
            out.deliveries_s = Some(stopped.elapsed().as_secs_f64());
            eprintln!("[chaos] {:.1} s: deliveries drained", d.t_s());
            break;
        }
        if Instant::now() >= deadline {
            // What is missing while records are still on their way is "not yet delivered",
            // not lost: the report counts the two apart.
            out.held_at_deadline = engine::hookstream_holds(env).await;
            eprintln!(
                "[chaos] deadline: deliveries not drained {} s after the producers stopped (outbox empty: {outbox_empty}; records still in the pipeline: {})",
                d.args.deadline_s,
                out.held_at_deadline.map_or_else(|| "?".into(), |h| h.to_string())
            );
            break;
        }
    }
    let (mut last_finished, mut progressed) = (-1, Instant::now());
    loop {
        let sink = sink_progress(env).await;
        if sink.done {
            out.dead_letters_s = Some(stopped.elapsed().as_secs_f64());
            eprintln!(
                "[chaos] {:.1} s: every dead letter stored ({} records, {} rows)",
                d.t_s(),
                sink.records,
                sink.rows
            );
            return Ok(out);
        }
        if sink.finished > last_finished {
            (last_finished, progressed) = (sink.finished, Instant::now());
        }
        if progressed.elapsed() >= SINK_STALL || stopped.elapsed() >= SINK_DRAIN_CAP {
            eprintln!(
                "[chaos] {:.1} s: the DLQ sink stopped at {} of {} dead-letter records ({} rows)",
                d.t_s(),
                sink.finished,
                sink.records,
                sink.rows
            );
            return Ok(out);
        }
        d.wait(Duration::from_secs(5)).await?;
    }
}

/// Every record of the events topic: its event and when the relay produced it.
async fn read_shipped(env: &TestEnv) -> anyhow::Result<Vec<Shipped>> {
    let records = env.read_all(&env.kafka.topics.events).await?;
    records
        .iter()
        .map(|r| {
            let e = EventEnvelope::decode(r.payload.as_slice()).with_context(|| {
                format!(
                    "events record {}/{} is not an EventEnvelope",
                    r.partition, r.offset
                )
            })?;
            Ok(Shipped {
                event: Uuid::parse_str(&e.event_id)?,
                at_ms: r.timestamp_ms.unwrap_or(0) as f64,
            })
        })
        .collect()
}

/// Every record of the DLQ topic, and the rows stored per DLQ position.
async fn read_dead_letters(env: &TestEnv) -> anyhow::Result<(Vec<DeadLetter>, Vec<Stored>)> {
    let topic = &env.kafka.topics.dlq;
    let records = env.read_all(topic).await?;
    let dead = records
        .iter()
        .map(|r| {
            let dl = DeadLetterProto::decode(r.payload.as_slice()).ok();
            let event = dl
                .as_ref()
                .and_then(|d| d.event.as_ref())
                .and_then(|e| Uuid::parse_str(&e.event_id).ok());
            let endpoint = dl.as_ref().and_then(|d| Uuid::parse_str(&d.endpoint_id).ok());
            let decision = dl
                .as_ref()
                .and_then(|d| d.handled.as_ref())
                .map(|h| fault_tally::decision_key(&h.topic, h.partition, h.offset, endpoint));
            DeadLetter {
                partition: r.partition,
                offset: r.offset,
                event,
                endpoint,
                dead_at_ms: dl.as_ref().map_or(r.timestamp_ms.unwrap_or(0), |d| d.dead_at_ms) as f64,
                decision,
            }
        })
        .collect();
    type Row = (
        i32,
        i64,
        f64,
        Option<String>,
        Option<i32>,
        Option<i64>,
        Option<Uuid>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT source_partition, source_offset, (extract(epoch FROM stored_at) * 1000)::float8,
                handled_topic, handled_partition, handled_offset, endpoint_id
           FROM hookstream.dead_letters WHERE source_topic = $1 ORDER BY id",
    )
    .bind(topic)
    .fetch_all(&env.pool)
    .await?;
    let mut stored: Vec<Stored> = Vec::new();
    let mut at: HashMap<(i32, i64), usize> = HashMap::new();
    for (partition, offset, stored_at_ms, h_topic, h_partition, h_offset, endpoint) in rows {
        match at.get(&(partition, offset)) {
            Some(&i) => stored[i].rows += 1,
            None => {
                at.insert((partition, offset), stored.len());
                let decision = match (h_topic, h_partition, h_offset) {
                    (Some(t), Some(p), Some(o)) => Some(fault_tally::decision_key(&t, p, o, endpoint)),
                    _ => None,
                };
                stored.push(Stored {
                    partition,
                    offset,
                    rows: 1,
                    stored_at_ms,
                    decision,
                });
            }
        }
    }
    Ok((dead, stored))
}

/// Deliveries per second, latency, and backlogs over time, with the faults marked.
fn fault_charts(
    o: &Outcome,
    sink_lags: &[Option<i64>],
    struck: &[Struck],
    commits: &[Commit],
    started_ms: f64,
) -> Vec<Chart> {
    const SINCE: &str = "seconds since measuring started";
    let mut kinds: Vec<String> = Vec::new();
    let mut markers = Markers::default();
    for f in struck {
        let key = f.kind.key().to_string();
        let k = match kinds.iter().position(|x| *x == key) {
            Some(k) => k,
            None => {
                kinds.push(key);
                kinds.len() - 1
            }
        };
        markers.at.push(((f.at_ms - started_ms) / 1000.0, k));
    }
    markers.kinds = kinds;
    let tl = &o.timeline;
    let mut delivered: Points = Vec::new();
    for (i, s) in tl.iter().enumerate() {
        if let Some(p) = tl[..i].iter().rev().find(|p| s.t_s - p.t_s >= 1.0) {
            delivered.push((s.t_s, (s.delivered - p.delivered) as f64 / (s.t_s - p.t_s)));
        }
    }
    // Latency of the fast class by second of commit: per event the slowest fast endpoint.
    let fast = o
        .classes
        .iter()
        .position(|c| c.name == "fast")
        .and_then(|i| o.received.get(i));
    let mut first: BTreeMap<&str, f64> = BTreeMap::new();
    for got in fast.into_iter().flatten() {
        let mut mine: BTreeMap<&str, f64> = BTreeMap::new();
        for d in got.iter().filter(|d| (200..300).contains(&d.status)) {
            let at = mine.entry(d.webhook_id.as_str()).or_insert(d.received_unix_ms);
            *at = at.min(d.received_unix_ms);
        }
        for (id, at) in mine {
            let e = first.entry(id).or_insert(at);
            *e = e.max(at);
        }
    }
    let mut made: BTreeMap<String, f64> = BTreeMap::new();
    for c in commits {
        for id in &c.ids {
            made.insert(id.to_string(), c.done_ms);
        }
    }
    let mut by_second: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    for (id, at) in &first {
        if let Some(&m) = made.get(*id) {
            by_second
                .entry(((m - started_ms) / 1000.0).floor() as i64)
                .or_default()
                .push(at - m);
        }
    }
    let (mut p50, mut max): (Points, Points) = (Vec::new(), Vec::new());
    for (s, mut v) in by_second {
        v.sort_by(f64::total_cmp);
        let x = s as f64 + 0.5;
        p50.push((x, v[(v.len() - 1) / 2]));
        max.push((x, v[v.len() - 1]));
    }
    let series = |f: &dyn Fn(usize, &Sample) -> Option<i64>| -> Points {
        tl.iter()
            .enumerate()
            .filter_map(|(i, s)| f(i, s).map(|v| (s.t_s, v as f64)))
            .collect()
    };
    let backlogs = vec![
        (
            "outbox rows".to_string(),
            series(&|_, s| (s.backlog >= 0).then_some(s.backlog)),
        ),
        ("events lag (messages)".to_string(), series(&|_, s| s.lag)),
        (
            "DLQ sink lag (messages)".to_string(),
            series(&|i, _| sink_lags.get(i).copied().flatten()),
        ),
    ];
    vec![
        chart::marked_time_chart(
            "faults-backlog",
            "Outbox, events-role lag and DLQ-sink lag, faults marked",
            (SINCE, "rows / messages"),
            backlogs,
            &markers,
        ),
        chart::marked_time_chart(
            "faults-deliveries",
            "2xx deliveries per second, faults marked",
            (SINCE, "deliveries/s"),
            vec![("2xx deliveries/s".into(), delivered)],
            &markers,
        ),
        chart::marked_time_chart(
            "faults-latency",
            "Commit → 2xx at the fast endpoints, by second of commit, faults marked",
            (SINCE, "ms"),
            vec![("median".into(), p50), ("slowest".into(), max)],
            &markers,
        ),
    ]
}
