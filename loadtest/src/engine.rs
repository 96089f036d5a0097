//! The scenario engine: a receiver fleet of behaviour classes, the services as child
//! processes, a producer writing outbox rows in transactions, a sampler (every 250 ms), and
//! the report's common contract computed from what the receivers saw.
//!
//! Longer than 800 lines: the fleet, the producer, the sampler and the report share one run's
//! state. Issue 44.2 replaces its hand-written quantiles, scraping and process figures with
//! libraries, which shortens it.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hookstream_store::endpoint_admin;
use hookstream_store::endpoints::NewEndpoint;
use hookstream_store::sqlx::{self, PgPool};
use hookstream_testkit::process::{dispatcher_env, service_env, ServiceProcess};
use hookstream_testkit::{Behaviour, Received, Receiver, TestEnv};
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use uuid::Uuid;

use crate::baseline;
use crate::cli::AttemptLog;
use crate::group::GroupView;
use crate::keda::PartitionOffsets;
use crate::procstat;
use crate::report::{AttemptLogFigures, ClassFigures, Contract, EarlyRetry, Kill, Latency, Usage};
use crate::schedule::{MIN_THROTTLED_DELAY_MS, RETRY_JITTER, RETRY_SCHEDULE_MS};
use crate::stack::service_bin;

/// Retry due times travel as whole milliseconds (Kafka timestamps), so a retry may arrive up
/// to 1 ms before the exact receiver-side gap; only earlier than that counts as early.
const DUE_RESOLUTION_MS: f64 = 1.0;
/// Time the services get before a rate-driven run starts producing.
const SETTLE: Duration = Duration::from_secs(3);
/// How long a run waits, after it drained, for the attempt sink to store what is left.
const SINK_CATCH_UP: Duration = Duration::from_secs(60);

/// How one class of receivers behaves.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// An HTTP receiver answering with this behaviour.
    Http(Behaviour),
    /// Nothing listens on the port: connection refused.
    Down,
    /// Down (connection refused) until `after`, then a fast receiver on the same port.
    DownThenUp(Duration),
}

#[derive(Debug, Clone)]
pub struct Class {
    pub name: String,
    pub kind: Kind,
    pub endpoints: usize,
    /// Whether every event must eventually be delivered to these endpoints (`lost` counts them).
    pub expects_delivery: bool,
    pub rate_limit_per_s: Option<i32>,
    pub timeout_ms: Option<i32>,
    pub max_in_flight: Option<i32>,
    /// A payload filter on each of its endpoints.
    pub payload_filter: Option<serde_json::Value>,
}

/// A payload filter every payload `enqueue` writes passes (two conditions to evaluate).
pub fn passing_filter() -> serde_json::Value {
    serde_json::json!({"amount": {"$gte": 0}, "note": {"$startsWith": "a typical"}})
}

impl Class {
    pub fn new(name: &str, kind: Kind, endpoints: usize, expects_delivery: bool) -> Self {
        Self {
            name: name.into(),
            kind,
            endpoints,
            expects_delivery,
            rate_limit_per_s: None,
            timeout_ms: None,
            max_in_flight: Some(256),
            payload_filter: None,
        }
    }

    fn behaviour(&self) -> String {
        match self.kind {
            Kind::Http(b) => format!("{b:?}"),
            Kind::Down => "connection refused".into(),
            Kind::DownThenUp(d) => format!("connection refused for {} s, then 204", d.as_secs()),
        }
    }

    fn retry_after_ms(&self) -> u64 {
        match self.kind {
            Kind::Http(Behaviour::Throttle(_, secs)) | Kind::Http(Behaviour::RetryAfter(secs)) => secs * 1000,
            _ => 0,
        }
    }
}

/// How load is produced.
#[derive(Debug, Clone, Copy)]
pub enum Load {
    /// All events committed before the services start (throughput from a backlog).
    Backlog,
    /// This many events per second: every 10 ms the events due go as one transaction to one of
    /// `PRODUCERS` connections.
    Rate(usize),
}

/// Random SIGKILLs of the relay and the dispatcher during the run.
#[derive(Debug, Clone, Copy)]
pub struct Chaos {
    pub seed: u64,
    /// Seconds between kills, drawn uniformly from this range.
    pub every_s: (f64, f64),
}

/// What delivers the events.
#[derive(Debug, Clone, Copy)]
pub enum System {
    /// The outbox relay and the dispatcher (release builds).
    Hookstream,
    /// The naive polling design (`baseline.rs`) with this sleep between polls.
    Baseline { sleep_ms: u64, workers: usize },
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub system: System,
    pub label: String,
    pub events: usize,
    pub load: Load,
    pub classes: Vec<Class>,
    pub chaos: Option<Chaos>,
    /// How long to wait for the pipeline to drain after the last event was committed.
    pub drain_deadline: Duration,
    pub max_in_flight_events: usize,
    /// The dispatchers' `attempts.log`.
    pub attempt_log: AttemptLog,
    pub payload: Payload,
    pub out: PathBuf,
}

/// What the producer's payloads are and whether the relay seals them (`--payload-bytes`,
/// `--seal-payloads`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Payload {
    /// Bytes of line items (`relay::ITEMS_PAD_SQL`) beyond the ~150-byte payload.
    pub pad_bytes: usize,
    pub seal: bool,
}

/// One endpoint of the fleet: its class, where it listens, its secret and its receiver
/// (`None` while nothing listens: `Kind::Down`, or `Kind::DownThenUp` before it is up).
pub(crate) struct Endpoint {
    pub(crate) class: usize,
    pub(crate) id: Uuid,
    pub(crate) addr: SocketAddr,
    pub(crate) secret: String,
    pub(crate) timeout_ms: i32,
    pub(crate) receiver: Option<Receiver>,
}

/// One 250 ms sample of the run.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub t_s: f64,
    /// Requests answered 2xx, every receiver.
    pub delivered: usize,
    /// Requests received, every receiver.
    pub requests: usize,
    /// Rows in the outbox.
    pub backlog: i64,
    /// Dispatcher consumer lag on the events topic (messages), sampled every second.
    pub lag: Option<i64>,
}

/// One service process of a run, restarted in place after a kill; its usage is summed over
/// its incarnations.
pub(crate) struct Service {
    name: String,
    bin: PathBuf,
    env: Vec<(String, String)>,
    log: PathBuf,
    proc: Option<ServiceProcess>,
    /// CPU of dead incarnations, plus the last sample of the live one.
    dead_cpu: f64,
    live: (f64, f64),
    usage: Usage,
}

impl Service {
    pub(crate) fn start(
        name: impl Into<String>,
        bin: PathBuf,
        env: Vec<(String, String)>,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let proc =
            ServiceProcess::spawn(&bin, &env, &log).with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self {
            name: name.into(),
            bin,
            env,
            log,
            proc: Some(proc),
            dead_cpu: 0.0,
            live: (0.0, 0.0),
            usage: Usage::default(),
        })
    }

    pub(crate) fn sample(&mut self) {
        if let Some(s) = self
            .proc
            .as_ref()
            .and_then(ServiceProcess::pid)
            .and_then(procstat::sample)
        {
            self.live = s;
        }
        self.usage.cpu_s = self.dead_cpu + self.live.0;
        self.usage.max_rss_mb = self.usage.max_rss_mb.max(self.live.1);
    }

    pub(crate) async fn kill9(&mut self) {
        self.retire();
        if let Some(p) = self.proc.take() {
            p.kill9().await;
        }
    }

    /// Counts the CPU of the live incarnation as spent (it is about to end).
    fn retire(&mut self) {
        self.sample();
        self.dead_cpu += self.live.0;
        self.live = (0.0, 0.0);
    }

    pub(crate) fn restart(&mut self) -> anyhow::Result<()> {
        self.proc = Some(ServiceProcess::spawn(&self.bin, &self.env, &self.log)?);
        self.usage.restarts += 1;
        Ok(())
    }

    /// The exit code of an incarnation that ended by itself (`Some(None)`: killed by a
    /// signal), or `None` while it runs (or none was started).
    pub(crate) async fn exited(&mut self) -> Option<Option<i32>> {
        let p = self.proc.as_mut()?;
        if p.is_running() {
            return None;
        }
        let code = p.wait().await;
        self.retire();
        self.proc = None;
        Some(code)
    }

    /// Starts a second incarnation beside the live one (a rolling restart's new instance);
    /// `hand_over` then stops the old one.
    pub(crate) fn spawn_successor(&self) -> anyhow::Result<ServiceProcess> {
        Ok(ServiceProcess::spawn(&self.bin, &self.env, &self.log)?)
    }

    /// SIGTERMs the live incarnation and waits for it to exit (its exit code), then keeps
    /// `successor` as the live one.
    pub(crate) async fn hand_over(&mut self, successor: ServiceProcess) -> Option<i32> {
        self.retire();
        let code = match self.proc.replace(successor) {
            Some(old) => old.terminate().await,
            None => None,
        };
        self.usage.restarts += 1;
        code
    }

    /// CPU seconds over every incarnation, as of the last `sample`.
    pub(crate) fn cpu_s(&self) -> f64 {
        self.usage.cpu_s
    }

    pub(crate) fn log(&self) -> &std::path::Path {
        &self.log
    }

    pub(crate) async fn stop(self) -> Usage {
        self.terminate().await.0
    }

    /// SIGTERM and wait, as Kubernetes stops a pod: the usage, and the exit code (`None`
    /// when no incarnation was running, or it died of a signal).
    pub(crate) async fn terminate(mut self) -> (Usage, Option<i32>) {
        self.sample();
        let code = match self.proc.take() {
            Some(p) => p.terminate().await,
            None => None,
        };
        (self.usage, code)
    }
}

/// Everything measured in one engine run.
pub struct Outcome {
    pub label: String,
    pub events: usize,
    pub classes: Vec<Class>,
    /// Per class: the deliveries of each endpoint.
    pub received: Vec<Vec<Vec<Received>>>,
    /// Per class, per endpoint: when (ms since the Unix epoch) the receiver came back up.
    pub recovered_at_ms: Vec<Option<f64>>,
    /// When measuring started (ms since the Unix epoch): the services' start for a backlog,
    /// the first commit (services started 3 s earlier) for a rate.
    pub started_ms: f64,
    /// From the services' start to the end of the run (drained, or the deadline).
    pub wall_s: f64,
    pub timeline: Vec<Sample>,
    /// Per process (name, usage).
    pub processes: Vec<(String, Usage)>,
    pub kills: Vec<Kill>,
    pub drained: bool,
    /// At the deadline of a run that did not drain: records the pipeline still held (outbox
    /// rows, and the events topic's and retry tiers' records not consumed); `None` when it
    /// drained or the figure could not be read.
    pub held_at_deadline: Option<i64>,
    /// A rate-driven run: seconds from the first commit to the last (the producers finished).
    pub production_s: Option<f64>,
    /// Hookstream's runs: the attempt log and how the sink kept up.
    pub attempt_log: Option<AttemptLogFigures>,
}

pub(crate) fn unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// A free loopback port with nothing listening on it (bound, then released).
async fn vacant_addr() -> anyhow::Result<SocketAddr> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    Ok(l.local_addr()?)
}

/// Where the producer writes: Hookstream's outbox, or the baseline's queue (a row per endpoint).
#[derive(Clone)]
enum Sink {
    /// The tenant, and the padding's bytes.
    Outbox(Uuid, usize),
    Queue(Arc<Vec<baseline::Target>>),
}

async fn produce(pool: &PgPool, sink: &Sink, n: usize) -> anyhow::Result<()> {
    match sink {
        Sink::Outbox(tenant, pad) => enqueue(pool, *tenant, n, *pad).await,
        Sink::Queue(endpoints) => baseline::enqueue(pool, endpoints, n).await,
    }
}

/// Producers committing at once in a rate-driven run, as several producer services would.
const PRODUCERS: usize = 4;

/// Commits `events` at `rate` per second: every 10 ms the events due by then (exactly, not
/// rounded per tick) go as one transaction to the next free of `PRODUCERS` connections.
async fn produce_at_rate(
    pool: PgPool,
    sink: Sink,
    rate: usize,
    events: usize,
    committed: Arc<AtomicUsize>,
) -> anyhow::Result<f64> {
    let (tx, rx) = tokio::sync::mpsc::channel::<usize>(PRODUCERS * 4);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..PRODUCERS {
        let (pool, sink, rx, committed) = (pool.clone(), sink.clone(), rx.clone(), committed.clone());
        workers.spawn(async move {
            loop {
                let Some(n) = rx.lock().await.recv().await else {
                    return anyhow::Ok(());
                };
                produce(&pool, &sink, n).await?;
                committed.fetch_add(n, Ordering::Relaxed);
            }
        });
    }
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut scheduled = 0;
    while scheduled < events {
        tick.tick().await;
        let due = ((start.elapsed().as_secs_f64() * rate as f64) as usize).min(events);
        while due > scheduled {
            // Waits when every producer is busy: the achieved rate then falls behind.
            let n = (due - scheduled).min(2_000);
            tx.send(n).await?;
            scheduled += n;
        }
    }
    drop(tx);
    while let Some(r) = workers.join_next().await {
        r??;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Commits `events` to the outbox of `tenant` at `rate` per second (as a rate-driven plan
/// does); the seconds it took.
pub(crate) async fn produce_outbox(
    pool: PgPool,
    tenant: Uuid,
    rate: usize,
    events: usize,
    committed: Arc<AtomicUsize>,
) -> anyhow::Result<f64> {
    produce_at_rate(pool, Sink::Outbox(tenant, 0), rate, events, committed).await
}

/// Commits `n` events, their payloads padded with `pad_bytes` of line items (0: none).
pub(crate) async fn enqueue(pool: &PgPool, tenant: Uuid, n: usize, pad_bytes: usize) -> anyhow::Result<()> {
    // Aggregates (the Kafka key, hence the partition) follow one sequence over every call: a
    // rate-driven producer commits a few events per call, and numbering them from 1 in each
    // call put a 300 events/s load on three aggregates, so on two or three partitions (the
    // autoscale run's six dispatchers delivered what two do).
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let first = NEXT.fetch_add(n, Ordering::Relaxed) % 1000;
    // The real producer path: hookstream.enqueue inside a transaction (one statement).
    let pad = if pad_bytes == 0 {
        "'{}'::jsonb".to_string()
    } else {
        format!(
            "jsonb_build_object('items', ({})::jsonb)",
            crate::relay::ITEMS_PAD_SQL.replace("$3", "$4")
        )
    };
    sqlx::query(&format!(
        "SELECT count(hookstream.enqueue($1, 'order.updated',
                jsonb_build_object('n', g, 'note', 'a typical small webhook payload', 'amount', g * 3,
                                   'created_ms', extract(epoch FROM clock_timestamp()) * 1000) || {pad},
                'order', 'agg-' || (($3 + g) % 1000)))
           FROM generate_series(1, $2) g"
    ))
    .bind(tenant)
    .bind(i32::try_from(n).context("batch too large")?)
    .bind(i32::try_from(first).expect("under 1000"))
    // jsonb prints an item in about 80 bytes, not the 90 of the text form.
    .bind(i32::try_from(pad_bytes * 9 / 8).context("padding too large")?)
    .execute(pool)
    .await?;
    Ok(())
}

pub(crate) fn dispatcher_vars(env: &TestEnv, max_in_flight_events: usize) -> Vec<(String, String)> {
    let mut vars = dispatcher_env(env);
    let schedule = format!(
        "[{}]",
        RETRY_SCHEDULE_MS
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    vars.extend(
        [
            (
                "HOOKSTREAM_DISPATCHER__MAX_IN_FLIGHT_EVENTS",
                max_in_flight_events.to_string(),
            ),
            ("HOOKSTREAM_DISPATCHER__SHUTDOWN_GRACE_MS", "3000".to_string()),
            ("HOOKSTREAM_RETRY__SCHEDULE_MS", schedule),
            (
                "HOOKSTREAM_RETRY__MIN_THROTTLED_DELAY_MS",
                MIN_THROTTLED_DELAY_MS.to_string(),
            ),
            ("HOOKSTREAM_RETRY__JITTER", RETRY_JITTER.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v)),
    );
    vars.extend(setting_overrides());
    vars
}

/// The services start with a cleared environment; `LOADTEST_SET_<NAME>` in the load test's own
/// environment reaches every dispatcher as `<NAME>` (`HOOKSTREAM_<SECTION>__<KEY>` for a
/// setting, `MIMALLOC_…` for the allocator), after (over) the scenario's settings: a change
/// tried without a rebuild. Reports name what was set.
pub(crate) fn setting_overrides() -> Vec<(String, String)> {
    let mut set: Vec<(String, String)> = std::env::vars()
        .filter_map(|(k, v)| Some((k.strip_prefix("LOADTEST_SET_")?.to_string(), v)))
        .filter(|(k, _)| !k.is_empty())
        .collect();
    set.sort();
    set
}

/// `dispatcher_vars` for a dispatcher that runs only `roles` (`events`, `retry`, `dlq_sink`).
pub(crate) fn role_vars(env: &TestEnv, max_in_flight_events: usize, roles: &[&str]) -> Vec<(String, String)> {
    let mut v = dispatcher_vars(env, max_in_flight_events);
    let list: Vec<String> = roles.iter().map(|r| format!("\"{r}\"")).collect();
    v.push((
        "HOOKSTREAM_DISPATCHER__ROLES".into(),
        format!("[{}]", list.join(",")),
    ));
    v
}

pub(crate) type SharedLag = Arc<Mutex<Option<i64>>>;

/// Samples a consumer group's lag on a topic every second, on its own thread (the dispatchers'
/// on the events topic, say).
pub(crate) fn lag_sampler(
    env: &TestEnv,
    group: &str,
    topic: &str,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<(SharedLag, std::thread::JoinHandle<()>)> {
    let view = GroupView::new(&env.kafka, group, topic, env.partitions)?;
    let latest = Arc::new(Mutex::new(None));
    let out = latest.clone();
    let handle = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let lag = view
                .offsets()
                .map(|parts| parts.iter().map(PartitionOffsets::lag).sum());
            if let Ok(mut l) = out.lock() {
                *l = lag;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    Ok((latest, handle))
}

/// The attempt sink's worst lag, in messages and in seconds (age of the oldest record it had
/// not stored), sampled every second from outside its group on a thread of its own.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SinkLag {
    pub(crate) max_messages: i64,
    pub(crate) max_s: f64,
}

pub(crate) fn sink_lag_sampler(
    env: &TestEnv,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<SinkLag>> {
    let kafka = env.kafka.clone();
    let view = GroupView::new(
        &kafka,
        &env.attempt_sink_group(),
        &kafka.topics.attempts,
        env.partitions,
    )?;
    Ok(std::thread::spawn(move || {
        let mut worst = SinkLag::default();
        while !stop.load(Ordering::Relaxed) {
            if let Some(parts) = view.offsets() {
                worst.max_messages = worst
                    .max_messages
                    .max(parts.iter().map(PartitionOffsets::lag).sum());
                if let Ok(found) = view.heads(&kafka, &parts, Duration::from_secs(1)) {
                    let now = unix_ms() as i64;
                    for (_, ts) in found {
                        worst.max_s = worst.max_s.max((now - ts).max(0) as f64 / 1000.0);
                    }
                }
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        worst
    }))
}

/// Waits up to `timeout` until the attempt sink has stored every record produced so far.
async fn wait_for_sink(env: &TestEnv, timeout: Duration) {
    let Ok(view) = GroupView::new(
        &env.kafka,
        &env.attempt_sink_group(),
        &env.kafka.topics.attempts,
        env.partitions,
    ) else {
        return;
    };
    let _ = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if view
                .offsets()
                .is_some_and(|parts| parts.iter().all(|p| p.lag() == 0))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    })
    .await;
}

/// The receivers of `classes` (one per endpoint) and their endpoints, created for `tenant`.
pub(crate) async fn fleet(env: &TestEnv, tenant: Uuid, classes: &[Class]) -> anyhow::Result<Vec<Endpoint>> {
    let sealer = env.sealer();
    let mut fleet = Vec::new();
    for (ci, class) in classes.iter().enumerate() {
        for _ in 0..class.endpoints {
            let (addr, receiver) = match class.kind {
                Kind::Http(b) => {
                    let r = Receiver::start_at(SocketAddr::from(([127, 0, 0, 1], 0)), b).await?;
                    let addr: SocketAddr = r
                        .url()
                        .trim_start_matches("http://")
                        .trim_end_matches("/hook")
                        .parse()?;
                    (addr, Some(r))
                }
                Kind::Down | Kind::DownThenUp(_) => (vacant_addr().await?, None),
            };
            let (created, secret) = endpoint_admin::create_from(
                &env.pool,
                &sealer,
                &env.address_policy(),
                NewEndpoint {
                    tenant_id: tenant,
                    url: format!("http://{addr}/hook"),
                    rate_limit_per_s: class.rate_limit_per_s,
                    timeout_ms: class.timeout_ms,
                    max_in_flight: class.max_in_flight,
                    payload_filter: class.payload_filter.clone(),
                    ..Default::default()
                },
            )
            .await?;
            let secret = secret.expose().to_string();
            if let Some(r) = &receiver {
                r.set_secret(&secret);
            }
            fleet.push(Endpoint {
                class: ci,
                id: created.id,
                addr,
                secret,
                timeout_ms: created.timeout_ms,
                receiver,
            });
        }
    }
    Ok(fleet)
}

pub async fn run(plan: &Plan) -> anyhow::Result<Outcome> {
    let env = TestEnv::new(6).await?;
    let tenant = env.tenant("bench").await?;
    let mut fleet = fleet(&env, tenant, &plan.classes).await?;
    let label = &plan.label;
    let sink = match plan.system {
        System::Hookstream => Sink::Outbox(tenant, plan.payload.pad_bytes),
        System::Baseline { .. } => {
            sqlx::query(baseline::DDL).execute(&env.pool).await?;
            Sink::Queue(Arc::new(
                fleet
                    .iter()
                    .map(|e| baseline::Target {
                        url: format!("http://{}/hook", e.addr),
                        secret: e.secret.clone(),
                        timeout_ms: e.timeout_ms,
                    })
                    .collect(),
            ))
        }
    };
    let committed = Arc::new(AtomicUsize::new(0));
    if let Load::Backlog = plan.load {
        eprintln!(
            "[{label}] writing a backlog of {} events × {} endpoints",
            plan.events,
            fleet.len()
        );
        let mut left = plan.events;
        while left > 0 {
            let n = left.min(5_000);
            produce(&env.pool, &sink, n).await?;
            left -= n;
            committed.fetch_add(n, Ordering::Relaxed);
        }
    }
    let mut services = Vec::new();
    let started_services = start_services(plan, &env, &mut services);
    if let Err(e) = started_services {
        for s in services {
            s.stop().await;
        }
        return Err(e);
    }
    if let Load::Rate(_) = plan.load {
        // Let the dispatcher join its group and load its routing snapshot before measuring
        // latency (a backlog run measures from the start instead).
        tokio::time::sleep(SETTLE).await;
    }
    let started = Instant::now();
    let started_ms = unix_ms();
    let producer = match plan.load {
        Load::Backlog => None,
        Load::Rate(rate) => Some(tokio::spawn(produce_at_rate(
            env.pool.clone(),
            sink.clone(),
            rate,
            plan.events,
            committed.clone(),
        ))),
    };
    let stop_lag = Arc::new(AtomicBool::new(false));
    let (lag, lag_thread) = match plan.system {
        System::Hookstream => {
            let (l, t) = lag_sampler(
                &env,
                &env.kafka.group_id,
                &env.kafka.topics.events,
                stop_lag.clone(),
            )?;
            (l, Some(t))
        }
        System::Baseline { .. } => (Arc::new(Mutex::new(None)), None),
    };
    let sink_thread = match plan.system {
        System::Hookstream => Some(sink_lag_sampler(&env, stop_lag.clone())?),
        System::Baseline { .. } => None,
    };
    let result = drive(plan, &env, &mut fleet, &committed, &lag, &mut services, started).await;
    if result.is_ok() && sink_thread.is_some() && plan.attempt_log != AttemptLog::Off {
        // Delivery is measured; the sink catches up after it (its lag is a figure, not a
        // wait): give it a moment before the count.
        wait_for_sink(&env, SINK_CATCH_UP).await;
    }
    stop_lag.store(true, Ordering::Relaxed);
    let duration_s = started.elapsed().as_secs_f64();
    if let Some(p) = &producer {
        p.abort();
    }
    let mut processes = Vec::new();
    for s in services {
        let name = s.name.clone();
        processes.push((name, s.stop().await));
    }
    if let Some(t) = lag_thread {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
    let attempt_log = match sink_thread {
        Some(t) => {
            let worst = tokio::task::spawn_blocking(move || t.join())
                .await?
                .unwrap_or_default();
            let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM hookstream.attempts")
                .fetch_one(&env.pool)
                .await
                .unwrap_or(-1);
            Some(AttemptLogFigures {
                mode: plan.attempt_log.as_str().into(),
                sink_max_lag_messages: worst.max_messages,
                sink_max_lag_s: worst.max_s,
                stored,
            })
        }
        None => None,
    };
    let (timeline, kills, drained, recovered, held_at_deadline) = result?;
    let mut production_s = None;
    if let Some(p) = producer {
        match p.await {
            Ok(r) => production_s = Some(r?),
            Err(e) if e.is_cancelled() => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut received = vec![Vec::new(); plan.classes.len()];
    let mut recovered_at_ms = vec![None; plan.classes.len()];
    for (i, ep) in fleet.iter().enumerate() {
        received[ep.class].push(ep.receiver.as_ref().map(Receiver::received).unwrap_or_default());
        if let Some(at) = recovered.get(&i) {
            recovered_at_ms[ep.class] = Some(*at);
        }
    }
    // Each phase makes a database and topics of its own: without this a `make bench` leaves
    // hundreds of them in the stack (and Kafka starts slower for each).
    if let Err(e) = env.discard().await {
        eprintln!("[{}] could not drop its database and topics: {e:#}", plan.label);
    }
    Ok(Outcome {
        label: plan.label.clone(),
        events: committed.load(Ordering::Relaxed),
        classes: plan.classes.clone(),
        received,
        recovered_at_ms,
        started_ms,
        wall_s: duration_s,
        timeline,
        processes,
        kills,
        drained,
        held_at_deadline,
        production_s,
        attempt_log,
    })
}

/// Starts the processes of the plan's system, pushing each onto `services` as it starts.
fn start_services(plan: &Plan, env: &TestEnv, services: &mut Vec<Service>) -> anyhow::Result<()> {
    let (out, label) = (&plan.out, &plan.label);
    match plan.system {
        System::Hookstream => {
            let mut relay = service_env(env);
            relay.push((
                "HOOKSTREAM_RELAY__SEAL_PAYLOADS".into(),
                plan.payload.seal.to_string(),
            ));
            services.push(Service::start(
                "relay",
                service_bin("outbox-relay"),
                relay,
                out.join(format!("{label}-relay.log")),
            )?);
            let mut vars = dispatcher_vars(env, plan.max_in_flight_events);
            vars.push((
                "HOOKSTREAM_ATTEMPTS__LOG".into(),
                plan.attempt_log.as_str().into(),
            ));
            services.push(Service::start(
                "dispatcher",
                service_bin("dispatcher"),
                vars,
                out.join(format!("{label}-dispatcher.log")),
            )?);
        }
        System::Baseline { sleep_ms, workers } => {
            let vars = baseline::worker_env(&env.database.url, sleep_ms, workers);
            services.push(Service::start(
                "baseline",
                std::env::current_exe()?,
                vars,
                out.join(format!("{label}-baseline.log")),
            )?);
        }
    }
    Ok(())
}

/// What `drive` saw: the samples, the kills, whether everything arrived, when endpoints came
/// back, and (at a deadline) how many records the pipeline still held.
type Driven = (Vec<Sample>, Vec<Kill>, bool, HashMap<usize, f64>, Option<i64>);

/// Records the pipeline still holds: outbox rows not relayed, and records of the events topic
/// and of every retry tier its groups have not finished (`None` when it could not be read).
/// Deliveries missing at a deadline while this is above 0 may still arrive: they are counted
/// as not yet delivered, not as lost.
async fn pipeline_holds(plan: &Plan, env: &TestEnv) -> Option<i64> {
    if let System::Baseline { .. } = plan.system {
        return baseline::backlog(&env.pool).await.ok();
    }
    hookstream_holds(env).await
}

/// What Hookstream's pipeline still holds (see [`pipeline_holds`]).
pub(crate) async fn hookstream_holds(env: &TestEnv) -> Option<i64> {
    let outbox = env.outbox_len().await.ok()?;
    let mut groups = vec![(env.kafka.group_id.clone(), env.kafka.topics.events.clone())];
    for tier in env.retry.tiers() {
        groups.push((env.retry.group_id.clone(), tier.topic));
    }
    let kafka = env.kafka.clone();
    let in_kafka = tokio::task::spawn_blocking(move || {
        let mut sum = 0;
        for (group, topic) in groups {
            let view = GroupView::of_topic(&kafka, &group, &topic, Duration::from_secs(5)).ok()?;
            sum += view.offsets()?.iter().map(PartitionOffsets::lag).sum::<i64>();
        }
        Some(sum)
    })
    .await
    .ok()??;
    Some(outbox + in_kafka)
}

/// Samples, prints progress, injects chaos and recoveries, until drained or the deadline.
#[allow(clippy::too_many_arguments)]
async fn drive(
    plan: &Plan,
    env: &TestEnv,
    fleet: &mut [Endpoint],
    committed: &AtomicUsize,
    lag: &Mutex<Option<i64>>,
    services: &mut [Service],
    started: Instant,
) -> anyhow::Result<Driven> {
    let label = &plan.label;
    let mut timeline: Vec<Sample> = Vec::new();
    let mut kills = Vec::new();
    let mut recovered = HashMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(plan.chaos.map(|c| c.seed).unwrap_or(0));
    let next_kill_in = |rng: &mut rand::rngs::StdRng, c: &Chaos| {
        Duration::from_secs_f64(rng.gen_range(c.every_s.0..=c.every_s.1))
    };
    let mut next_kill = plan.chaos.as_ref().map(|c| started + next_kill_in(&mut rng, c));
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut last_print = Instant::now();
    let mut last_printed_delivered = 0;
    let mut produced_at: Option<Instant> = None;
    let mut last_full_check = Instant::now() - Duration::from_secs(10);
    let expecting: Vec<usize> = (0..fleet.len())
        .filter(|&i| plan.classes[fleet[i].class].expects_delivery)
        .collect();
    loop {
        tick.tick().await;
        let now = Instant::now();
        let t_s = started.elapsed().as_secs_f64();
        let sent = committed.load(Ordering::Relaxed);
        // Endpoints coming back after an outage.
        for (i, ep) in fleet.iter_mut().enumerate() {
            if let Kind::DownThenUp(after) = plan.classes[ep.class].kind {
                if ep.receiver.is_none() && started.elapsed() >= after {
                    let r = Receiver::start_at(ep.addr, Behaviour::Ok)
                        .await
                        .with_context(|| format!("restarting the receiver on {}", ep.addr))?;
                    r.set_secret(&ep.secret);
                    ep.receiver = Some(r);
                    recovered.insert(i, unix_ms());
                    eprintln!("[{label}] {:.1} s: endpoint {} is back up", t_s, ep.addr);
                }
            }
        }
        // Chaos: SIGKILL one of the services, restart it a moment later.
        if let (Some(c), Some(at)) = (plan.chaos.as_ref(), next_kill) {
            if now >= at && produced_at.is_none() {
                let svc = &mut services[rng.gen_range(0..services.len())];
                let which = svc.name.clone();
                svc.kill9().await;
                let down_ms = rng.gen_range(200..=1500);
                tokio::time::sleep(Duration::from_millis(down_ms)).await;
                svc.restart()?;
                eprintln!("[{label}] {t_s:.1} s: SIGKILL {which}, restarted after {down_ms} ms");
                kills.push(Kill {
                    at_s: t_s,
                    process: which,
                    down_ms,
                });
                next_kill = Some(Instant::now() + next_kill_in(&mut rng, c));
            }
        }
        for svc in services.iter_mut() {
            svc.sample();
            // A service that ends by itself (a refused configuration exits 2 at once) would
            // leave the run waiting out its deadline for deliveries that cannot come.
            if let Some(code) = svc.exited().await {
                let tail = std::fs::read_to_string(&svc.log).unwrap_or_default();
                let last: Vec<&str> = tail.lines().rev().take(5).collect();
                anyhow::bail!(
                    "[{label}] {} exited by itself ({}) at {t_s:.1} s; the end of {}:\n{}",
                    svc.name,
                    code.map_or("killed by a signal".to_string(), |c| format!("exit code {c}")),
                    svc.log.display(),
                    last.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
        }
        let delivered: usize = fleet
            .iter()
            .filter_map(|e| e.receiver.as_ref())
            .map(Receiver::successes)
            .sum();
        let requests: usize = fleet
            .iter()
            .filter_map(|e| e.receiver.as_ref())
            .map(Receiver::count)
            .sum();
        let backlog = match plan.system {
            System::Hookstream => env.outbox_len().await.unwrap_or(-1),
            System::Baseline { .. } => baseline::backlog(&env.pool).await.unwrap_or(-1),
        };
        let lag_now = lag.lock().ok().and_then(|l| *l);
        timeline.push(Sample {
            t_s,
            delivered,
            requests,
            backlog,
            lag: lag_now,
        });
        if last_print.elapsed() >= Duration::from_secs(2) {
            let rate = (delivered - last_printed_delivered) as f64 / last_print.elapsed().as_secs_f64();
            eprintln!(
                "[{label}] {t_s:6.1} s  committed {sent:>8}  delivered {delivered:>8}  {rate:>8.0}/s  outbox {backlog:>7}  lag {}",
                lag_now.map(|l| l.to_string()).unwrap_or_else(|| "?".into())
            );
            last_print = Instant::now();
            last_printed_delivered = delivered;
        }
        let producing_done = sent >= plan.events;
        if producing_done && produced_at.is_none() {
            produced_at = Some(now);
        }
        if !producing_done {
            continue;
        }
        // Cheap test first (2xx answers per endpoint), then distinct webhook ids.
        let enough = expecting.iter().all(|&i| {
            fleet[i]
                .receiver
                .as_ref()
                .is_some_and(|r| r.successes() >= plan.events)
        });
        if enough && last_full_check.elapsed() >= Duration::from_secs(1) {
            last_full_check = Instant::now();
            let complete = expecting.iter().all(|&i| {
                fleet[i].receiver.as_ref().is_some_and(|r| {
                    let got = r.received();
                    let ids: std::collections::HashSet<&str> = got
                        .iter()
                        .filter(|d| (200..300).contains(&d.status))
                        .map(|d| d.webhook_id.as_str())
                        .collect();
                    ids.len() >= plan.events
                })
            });
            if complete {
                return Ok((timeline, kills, true, recovered, None));
            }
        }
        if produced_at.is_some_and(|p| p.elapsed() >= plan.drain_deadline) {
            let held = pipeline_holds(plan, env).await;
            eprintln!(
                "[{label}] deadline: not drained {} s after the last commit; the pipeline still holds {} records",
                plan.drain_deadline.as_secs(),
                held.map(|h| h.to_string()).unwrap_or_else(|| "?".into())
            );
            return Ok((timeline, kills, false, recovered, held));
        }
    }
}

/// The contract's counts for one set of endpoints.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub endpoints: usize,
    pub expected_deliveries: usize,
    /// Distinct (endpoint, event) pairs answered 2xx.
    pub delivered: usize,
    pub lost: usize,
    /// Expected deliveries missing at the deadline of a run whose pipeline still held records
    /// (they may yet arrive; whether any is lost is not known). `lost` is 0 then.
    pub not_delivered: usize,
    /// 2xx answers beyond the first for the same (endpoint, event).
    pub duplicates: usize,
    /// Retries that reached the receiver before the schedule (or Retry-After) allowed.
    pub early_retries: usize,
    pub invalid_signatures: usize,
    /// Every request received, including failed answers and retries.
    pub requests: usize,
    /// The first few early retries.
    pub early_examples: Vec<EarlyRetry>,
}

/// The field of a delivered payload the latency is measured from: the row's creation time
/// (ms since the Unix epoch), stamped by the producer's `clock_timestamp()`.
#[derive(Deserialize)]
struct Stamped {
    created_ms: f64,
}

/// Counts and latency samples (ms, outbox commit → first 2xx delivery) of one class.
pub fn measure_class(class: &Class, endpoints: &[Vec<Received>], events: usize) -> (Counts, Vec<f64>, f64) {
    let mut last_ms: f64 = 0.0;
    let mut c = Counts {
        endpoints: endpoints.len(),
        ..Default::default()
    };
    let mut samples = Vec::new();
    for got in endpoints {
        c.requests += got.len();
        c.invalid_signatures += got.iter().filter(|d| !d.verified).count();
        let mut by_id: HashMap<&str, Vec<&Received>> = HashMap::new();
        for d in got {
            by_id.entry(d.webhook_id.as_str()).or_default().push(d);
        }
        let mut delivered = 0;
        for tries in by_id.values_mut() {
            tries.sort_by(|a, b| a.received_unix_ms.total_cmp(&b.received_unix_ms));
            let ok: Vec<&&Received> = tries.iter().filter(|d| (200..300).contains(&d.status)).collect();
            if let Some(first) = ok.first() {
                delivered += 1;
                last_ms = last_ms.max(first.received_unix_ms);
                c.duplicates += ok.len() - 1;
                // A body without the stamp (not ours) gives no latency sample.
                if let Ok(body) = serde_json::from_slice::<Stamped>(&first.body) {
                    samples.push(first.received_unix_ms - body.created_ms);
                }
            }
            for b in tries.iter().filter(|d| d.attempt >= 2) {
                // The attempt before it. After a crash an attempt may have been made twice
                // (redone by the next owner); which one scheduled this retry is unknown, and
                // the earliest is the lenient comparison: a retry early against it is early
                // against either.
                let Some(a) = tries
                    .iter()
                    .find(|a| a.attempt + 1 == b.attempt && a.received_unix_ms <= b.received_unix_ms)
                else {
                    continue;
                };
                let base = RETRY_SCHEDULE_MS
                    .get(a.attempt as usize - 1)
                    .copied()
                    .unwrap_or(u64::MAX / 2) as f64;
                let mut min_gap = base * (1.0 - RETRY_JITTER);
                if a.status == 429 || a.status == 0 {
                    min_gap = min_gap.max(MIN_THROTTLED_DELAY_MS as f64);
                }
                if a.status == 429 || a.status == 503 {
                    min_gap = min_gap.max(class.retry_after_ms() as f64);
                }
                let gap = b.received_unix_ms - a.received_unix_ms;
                if gap + DUE_RESOLUTION_MS < min_gap {
                    c.early_retries += 1;
                    if c.early_examples.len() < 10 {
                        c.early_examples.push(EarlyRetry {
                            webhook_id: b.webhook_id.clone(),
                            attempt: b.attempt,
                            previous_status: a.status,
                            gap_ms: gap,
                            min_gap_ms: min_gap,
                        });
                    }
                }
            }
        }
        c.delivered += delivered;
        if class.expects_delivery {
            c.expected_deliveries += events;
            c.lost += events.saturating_sub(delivered);
        }
    }
    (c, samples, last_ms)
}

/// The report contract for a set of measured runs (one, or the phases of a scenario).
pub fn contract(outcomes: &[&Outcome]) -> Contract {
    let mut total = Counts::default();
    let mut all_samples = Vec::new();
    let mut per_class = BTreeMap::new();
    let mut events = 0;
    let mut duration_s = 0.0;
    let mut wall_s = 0.0;
    let mut processes: BTreeMap<String, Usage> = BTreeMap::new();
    let mut held_at_deadline: Option<i64> = None;
    for o in outcomes {
        events += o.events;
        let mut last_ms = o.started_ms;
        // A run cut off at its deadline while records were still on their way cannot say
        // what is lost: what is missing is "not yet delivered".
        let undecided = !o.drained && o.held_at_deadline.is_some_and(|h| h > 0);
        if let Some(h) = o.held_at_deadline {
            *held_at_deadline.get_or_insert(0) += h;
        }
        for (ci, class) in o.classes.iter().enumerate() {
            let (mut c, samples, last) = measure_class(class, &o.received[ci], o.events);
            if undecided {
                c.not_delivered = std::mem::take(&mut c.lost);
            }
            if class.expects_delivery {
                last_ms = last_ms.max(last);
            }
            let key = if outcomes.len() > 1 {
                format!("{}/{}", o.label, class.name)
            } else {
                class.name.clone()
            };
            per_class.insert(
                key,
                ClassFigures {
                    behaviour: class.behaviour(),
                    expects_delivery: class.expects_delivery,
                    endpoints: c.endpoints,
                    events: o.events,
                    expected_deliveries: c.expected_deliveries,
                    delivered: c.delivered,
                    lost: c.lost,
                    not_delivered: c.not_delivered,
                    duplicates: c.duplicates,
                    early_retries: c.early_retries,
                    early_retry_examples: c.early_examples.clone(),
                    invalid_signatures: c.invalid_signatures,
                    requests: c.requests,
                    latency_ms: Latency::of(samples.clone()),
                    rate_limit_per_s: class.rate_limit_per_s,
                },
            );
            total.endpoints += c.endpoints;
            total.requests += c.requests;
            total.invalid_signatures += c.invalid_signatures;
            total.early_retries += c.early_retries;
            total.duplicates += c.duplicates;
            if class.expects_delivery {
                total.expected_deliveries += c.expected_deliveries;
                total.delivered += c.delivered;
                total.lost += c.lost;
                total.not_delivered += c.not_delivered;
                all_samples.extend(samples);
            }
        }
        duration_s += (last_ms - o.started_ms) / 1000.0;
        wall_s += o.wall_s;
        for (name, u) in &o.processes {
            let p = processes.entry(name.clone()).or_default();
            p.cpu_s += u.cpu_s;
            p.max_rss_mb = p.max_rss_mb.max(u.max_rss_mb);
            p.restarts += u.restarts;
        }
    }
    let logs: Vec<&AttemptLogFigures> = outcomes.iter().filter_map(|o| o.attempt_log.as_ref()).collect();
    let attempt_log = (!logs.is_empty()).then(|| AttemptLogFigures {
        mode: logs[0].mode.clone(),
        sink_max_lag_messages: logs.iter().map(|l| l.sink_max_lag_messages).max().unwrap_or(0),
        sink_max_lag_s: logs.iter().map(|l| l.sink_max_lag_s).fold(0.0, f64::max),
        stored: logs.iter().map(|l| l.stored).sum(),
    });
    Contract {
        attempt_log,
        events,
        expected_deliveries: total.expected_deliveries,
        delivered: total.delivered,
        lost: total.lost,
        not_delivered: total.not_delivered,
        held_at_deadline,
        duplicates: total.duplicates,
        early_retries: total.early_retries,
        invalid_signatures: total.invalid_signatures,
        requests: total.requests,
        drained: outcomes.iter().all(|o| o.drained),
        duration_s,
        throughput_per_s: if duration_s > 0.0 {
            total.delivered as f64 / duration_s
        } else {
            0.0
        },
        latency_ms: Latency::of(all_samples),
        duration_measures: "backlog: services started → last first-delivery; rate: first commit → last first-delivery (expected classes)".into(),
        wall_s,
        latency_measures: "outbox row committed (created in a one-statement transaction) → first 2xx delivery at the receiver".into(),
        per_class,
        processes,
    }
}

/// Latency samples of the classes that expect delivery, for the CDF.
pub fn latency_samples(o: &Outcome) -> Vec<f64> {
    let mut all = Vec::new();
    for (ci, class) in o.classes.iter().enumerate() {
        if class.expects_delivery {
            all.extend(measure_class(class, &o.received[ci], o.events).1);
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn got(id: &str, attempt: u32, at_ms: f64, status: u16, created_ms: f64) -> Received {
        Received {
            webhook_id: id.into(),
            timestamp: String::new(),
            signature: String::new(),
            event_type: String::new(),
            attempt,
            body: serde_json::to_vec(&serde_json::json!({ "created_ms": created_ms }))
                .unwrap_or_default()
                .into(),
            verified: true,
            at: Instant::now(),
            received_unix_ms: at_ms,
            status,
        }
    }

    #[test]
    fn counts_delivered_lost_duplicates_and_early_retries() {
        let class = Class::new("flaky", Kind::Http(Behaviour::Flaky(50)), 1, true);
        let endpoint = vec![
            // a: failed, retried on time (schedule[0] = 1000 ms, × 0.8 = 800 ms), delivered twice.
            got("a", 1, 1000.0, 503, 990.0),
            got("a", 2, 1900.0, 204, 990.0),
            got("a", 2, 1950.0, 204, 990.0),
            // b: failed, retried 500 ms later: early.
            got("b", 1, 1000.0, 503, 995.0),
            got("b", 2, 1500.0, 204, 995.0),
        ];
        let (c, samples, last) = measure_class(&class, &[endpoint], 3);
        assert_eq!(c.expected_deliveries, 3);
        assert_eq!(c.delivered, 2);
        assert_eq!(c.lost, 1);
        assert_eq!(c.duplicates, 1);
        assert_eq!(c.early_retries, 1);
        assert_eq!(c.requests, 5);
        assert_eq!(last, 1900.0);
        let mut samples = samples;
        samples.sort_by(f64::total_cmp);
        assert_eq!(samples, vec![505.0, 910.0]);
    }

    /// A phase of 3 events of which one endpoint got 2, cut off at its deadline holding `held`.
    fn cut_off(held: Option<i64>) -> Outcome {
        Outcome {
            label: "p".into(),
            events: 3,
            classes: vec![Class::new("fast", Kind::Http(Behaviour::Ok), 1, true)],
            received: vec![vec![vec![
                got("a", 1, 10.0, 204, 0.0),
                got("b", 1, 20.0, 204, 0.0),
            ]]],
            recovered_at_ms: vec![None],
            started_ms: 0.0,
            wall_s: 1.0,
            timeline: Vec::new(),
            processes: Vec::new(),
            kills: Vec::new(),
            drained: false,
            held_at_deadline: held,
            production_s: None,
            attempt_log: None,
        }
    }

    #[test]
    fn missing_deliveries_are_lost_only_when_the_pipeline_holds_nothing() {
        let c = contract(&[&cut_off(Some(5))]);
        assert_eq!((c.lost, c.not_delivered, c.held_at_deadline), (0, 1, Some(5)));
        assert_eq!(c.per_class["fast"].not_delivered, 1);
        let c = contract(&[&cut_off(Some(0))]);
        assert_eq!((c.lost, c.not_delivered), (1, 0));
        // Unknown (the figure could not be read): the strict reading.
        let c = contract(&[&cut_off(None)]);
        assert_eq!((c.lost, c.not_delivered), (1, 0));
    }

    #[test]
    fn an_attempt_redone_after_a_crash_does_not_make_its_retry_early() {
        let class = Class::new("flaky", Kind::Http(Behaviour::Flaky(50)), 1, true);
        // Attempt 1 failed at 0 and was redone at 600 ms by the next owner; the retry the
        // first one scheduled (1,000 ms) came at 1,000 ms: on time, though 400 ms after the redo.
        let endpoint = vec![
            got("a", 1, 0.0, 503, 0.0),
            got("a", 1, 600.0, 503, 0.0),
            got("a", 2, 1000.0, 204, 0.0),
        ];
        assert_eq!(measure_class(&class, &[endpoint], 1).0.early_retries, 0);
        let endpoint = vec![got("a", 1, 0.0, 503, 0.0), got("a", 2, 700.0, 204, 0.0)];
        assert_eq!(measure_class(&class, &[endpoint], 1).0.early_retries, 1);
    }

    #[test]
    fn a_429_retry_must_wait_for_retry_after() {
        let class = Class::new("throttle", Kind::Http(Behaviour::Throttle(100, 3)), 1, true);
        let endpoint = vec![got("a", 1, 0.0, 429, 0.0), got("a", 2, 2000.0, 204, 0.0)];
        assert_eq!(measure_class(&class, &[endpoint], 1).0.early_retries, 1);
    }
}
