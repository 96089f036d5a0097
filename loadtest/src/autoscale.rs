//! The `autoscale` scenario (issue #13, "autoscaling on lag, shown"): KEDA's role played with
//! KEDA's own Kafka-scaler rule and the HPA behaviour the Helm chart configures (`keda.rs`
//! states the rules), starting and stopping real events-role dispatchers, against a load
//! step; then the same step with one fixed dispatcher, for comparison.
//!
//! Longer than 800 lines: the scenario and its emulation of KEDA's scaler and the HPA's
//! behaviour are read together, step by step; the rules themselves are in `keda.rs`. Issue 44.2
//! moves the harness onto libraries, which shortens it.
//!
//! - **Bound by I/O, not by the cores.** The receivers answer after 100 ms and each
//!   dispatcher holds at most `--max-in-flight-events` (50) events, so one dispatcher
//!   delivers about 50 ÷ 0.1 s = 500 events/s while using a fraction of a core: adding
//!   dispatchers raises throughput on this 2-core machine. The run first measures that
//!   capacity C (one dispatcher draining a backlog alone) and reports the machine's CPU, so
//!   the claim is checked, not assumed. One endpoint takes every event; its concurrency cap
//!   (1,000, the most an endpoint may have, split among the live replicas) never binds
//!   before the dispatchers' in-flight cap.
//! - **Topology**, per run: a fresh database and topics (6 partitions), one relay, one
//!   dispatcher for the retry and DLQ-sink roles (fixed, as the chart's `dispatcher-retry`;
//!   nothing should reach it), and the events role, scaled. A replica is started as a pod
//!   would be (the same configuration, a process of its own) and stopped as Kubernetes
//!   stops one: SIGTERM, and its drain waited for; scaling in stops the newest first.
//! - **KEDA** reads the events group's offsets from outside the group (`group.rs`: a client
//!   with the group's id that never joins, off the async runtime), every `pollingInterval`.
//!   The chart's settings are used as they are except: the time constants (polling
//!   interval, policy periods, stabilization windows, cooldown) are divided by
//!   `--time-scale` (5) to keep the run short; `minReplicas` is 1 (the chart's 2), so the
//!   single dispatcher is the starting point of both runs; and `lagThreshold` keeps the
//!   chart's rule, one dispatcher's capacity × 2 s (10,000 = 5,000/s × 2 s in the chart),
//!   with this run's measured capacity. A poll whose offsets cannot be read is skipped and
//!   counted.
//! - **Load**: `--idle-s` (30) without load, then three times C for `--step-s` (120), then
//!   none until every event is delivered and, autoscaled, the replicas are back to the
//!   minimum.
//! - **Measured**, once a second: replicas running, group members owning partitions (while
//!   the group is stable), the lag in messages (high watermark − committed offset, summed:
//!   what the dispatchers export as `kafka_consumergroup_lag`), deliveries and commits per
//!   second, the machine's CPU. Lag in seconds is computed afterwards from the receivers'
//!   records, by id: at each second, the age of the oldest committed event (its
//!   `created_ms`) not yet answered 2xx. Duplicates (2xx answers beyond the first per
//!   event) are attributed to the last scale event at most 30 s before them; none may be
//!   left unattributed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hookstream_testkit::process::service_env;
use hookstream_testkit::{Behaviour, Received, Receiver, TestEnv};
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::chart::{self, Chart, Markers, Points};
use crate::cli::RunArgs;
use crate::engine::{self, Class, Kind, Outcome, Sample, Service};
use crate::group::{self, GroupView};
use crate::keda::{Autoscaler, PartitionOffsets, PolicyKind, Rules, ScaledObject, Select};
use crate::procstat;
use crate::report::{
    AutoscaleFigures, AutoscaleMeasures, AutoscalePhase, AutoscaleSection, Calibration, KedaSettings,
    Machine, PollRecord, RunReport, ScaleEvent, ScalingRules, ScenarioReport, SecondPoint, Usage,
};
use crate::stack::service_bin;

/// Partitions of the events topic: the most replicas KEDA will ask for.
const PARTITIONS: i32 = 6;
/// The step, in multiples of one dispatcher's capacity.
const STEP_FACTOR: f64 = 3.0;
/// The endpoint's concurrency cap: the most the schema allows, split among live replicas.
const ENDPOINT_CAP: i32 = 1_000;
/// Seconds of one dispatcher's capacity the calibration backlog holds.
const CALIBRATION_S: f64 = 20.0;
/// The chart's rule for `lagThreshold`: one dispatcher's capacity × this.
const LAG_THRESHOLD_S: f64 = 2.0;
const MIN_REPLICAS: u32 = 1;
/// A duplicate arriving this long after a scale event is blamed on it.
const ATTRIBUTION_WINDOW_S: f64 = 30.0;
/// How long after the step the run may go on (draining, scaling in) before it gives up.
const TAIL_LIMIT_S: f64 = 900.0;

fn class(delay_ms: u64) -> Class {
    let mut c = Class::new(
        &format!("slow_{delay_ms}ms"),
        Kind::Http(Behaviour::Delay(delay_ms)),
        1,
        true,
    );
    c.max_in_flight = Some(ENDPOINT_CAP);
    c
}

/// What one run starts: a database and topics of its own, the receiver, the relay, the retry
/// and DLQ-sink dispatcher, and the events-role replicas.
struct Stack {
    env: TestEnv,
    tenant: Uuid,
    receiver: Arc<Receiver>,
    label: String,
    out: PathBuf,
    max_in_flight_events: usize,
    relay: Service,
    retry: Service,
    replicas: Vec<Service>,
    /// Replicas started so far (names and logs).
    started: usize,
    /// Replicas sent SIGTERM: their usage and exit code once they are gone.
    stopping: JoinSet<(Usage, Option<i32>)>,
    /// The usage of stopped replicas.
    stopped: Vec<Usage>,
    unclean_exits: usize,
}

impl Stack {
    async fn start(args: &RunArgs, label: &str) -> anyhow::Result<Self> {
        let env = TestEnv::new(PARTITIONS).await?;
        let tenant = env.tenant("bench").await?;
        let mut fleet = engine::fleet(&env, tenant, &[class(args.receiver_delay_ms)]).await?;
        let receiver = fleet
            .first_mut()
            .and_then(|e| e.receiver.take())
            .context("the fleet has its receiver")?;
        let log = |name: &str| args.out.join(format!("autoscale-{label}-{name}.log"));
        let max_in_flight_events = args.max_in_flight_events();
        let relay = Service::start(
            "relay",
            service_bin("outbox-relay"),
            service_env(&env),
            log("relay"),
        )?;
        let retry = Service::start(
            "retry+dlq_sink",
            service_bin("dispatcher"),
            engine::role_vars(&env, max_in_flight_events, &["retry", "dlq_sink"]),
            log("retry"),
        )?;
        let mut stack = Self {
            env,
            tenant,
            receiver: Arc::new(receiver),
            label: label.into(),
            out: args.out.clone(),
            max_in_flight_events,
            relay,
            retry,
            replicas: Vec::new(),
            started: 0,
            stopping: JoinSet::new(),
            stopped: Vec::new(),
            unclean_exits: 0,
        };
        stack.add_replica()?;
        let kafka = &stack.env.kafka;
        group::wait_for_group(
            kafka,
            &kafka.group_id,
            &kafka.topics.events,
            1,
            Duration::from_secs(120),
        )
        .await?;
        Ok(stack)
    }

    fn add_replica(&mut self) -> anyhow::Result<()> {
        let name = format!("events-{}", self.started);
        self.started += 1;
        let log = self.out.join(format!("autoscale-{}-{name}.log", self.label));
        self.replicas.push(Service::start(
            name,
            service_bin("dispatcher"),
            engine::role_vars(&self.env, self.max_in_flight_events, &["events"]),
            log,
        )?);
        Ok(())
    }

    /// SIGTERMs the newest replica without waiting for it (a ReplicaSet scaling in deletes
    /// the newest pods first).
    fn remove_replica(&mut self) {
        if let Some(svc) = self.replicas.pop() {
            self.stopping.spawn(svc.terminate());
        }
    }

    fn replicas(&self) -> u32 {
        self.replicas.len() as u32
    }

    /// Reaps the replicas that finished stopping; restarts a process that exited by itself
    /// (as a pod's container would be), counting it.
    async fn check(&mut self) -> anyhow::Result<()> {
        while let Some(done) = self.stopping.try_join_next() {
            let (usage, code) = done?;
            if code != Some(0) {
                eprintln!(
                    "[autoscale/{}] a replica exited with {code:?} after SIGTERM",
                    self.label
                );
                self.unclean_exits += 1;
            }
            self.stopped.push(usage);
        }
        for svc in self.replicas.iter_mut().chain([&mut self.relay, &mut self.retry]) {
            svc.sample();
            if let Some(code) = svc.exited().await {
                eprintln!(
                    "[autoscale/{}] a process EXITED BY ITSELF ({code:?}); log {}",
                    self.label,
                    svc.log().display()
                );
                self.unclean_exits += 1;
                svc.restart()?;
            }
        }
        Ok(())
    }

    /// Stops everything; the environment, every process's usage, the events role's CPU, and
    /// the unclean exits.
    async fn stop(mut self) -> (TestEnv, Vec<(String, Usage)>, f64, usize) {
        while !self.replicas.is_empty() {
            self.remove_replica();
        }
        while let Some(done) = self.stopping.join_next().await {
            if let Ok((usage, code)) = done {
                if code != Some(0) {
                    self.unclean_exits += 1;
                }
                self.stopped.push(usage);
            }
        }
        let events = self.stopped.iter().fold(Usage::default(), |mut a, u| {
            a.cpu_s += u.cpu_s;
            a.max_rss_mb = a.max_rss_mb.max(u.max_rss_mb);
            a.restarts += u.restarts;
            a
        });
        let processes = vec![
            ("events".to_string(), events),
            ("relay".to_string(), self.relay.stop().await),
            ("retry+dlq_sink".to_string(), self.retry.stop().await),
        ];
        (self.env, processes, events.cpu_s, self.unclean_exits)
    }

    async fn discard(env: TestEnv, label: &str) {
        if let Err(e) = env.discard().await {
            eprintln!("[autoscale/{label}] could not drop its database and topics: {e:#}");
        }
    }
}

/// One dispatcher draining a backlog of `CALIBRATION_S` seconds of its expected capacity:
/// the rate between 20 % and 90 % delivered.
async fn calibrate(args: &RunArgs) -> anyhow::Result<Calibration> {
    let cap = args.max_in_flight_events();
    let little_law_per_s = cap as f64 * 1000.0 / args.receiver_delay_ms as f64;
    let events = (little_law_per_s * CALIBRATION_S) as usize;
    let mut stack = Stack::start(args, "calibration").await?;
    let measured = async {
        let mut left = events;
        while left > 0 {
            let n = left.min(5_000);
            engine::enqueue(&stack.env.pool, stack.tenant, n, 0).await?;
            left -= n;
        }
        let begun = Instant::now();
        let snapshot = |stack: &Stack| {
            (
                Instant::now(),
                stack.receiver.successes(),
                stack.replicas.iter().map(Service::cpu_s).sum::<f64>(),
                procstat::machine(),
            )
        };
        let mut from = None;
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            stack.check().await?;
            let delivered = stack.receiver.successes();
            if from.is_none() && delivered >= events / 5 {
                from = Some(snapshot(&stack));
            }
            if let (Some(a), true) = (from, delivered >= events * 9 / 10) {
                let b = snapshot(&stack);
                let dt = (b.0 - a.0).as_secs_f64();
                return anyhow::Ok(Calibration {
                    max_in_flight_events: cap,
                    receiver_delay_ms: args.receiver_delay_ms,
                    events,
                    capacity_per_s: (b.1 - a.1) as f64 / dt,
                    little_law_per_s,
                    dispatcher_cores: (b.2 - a.2) / dt,
                    machine_busy_pct: a.3.zip(b.3).and_then(|(x, y)| procstat::busy_pct(x, y)),
                });
            }
            anyhow::ensure!(
                begun.elapsed() < Duration::from_secs(300),
                "calibration: {delivered} of {events} delivered after 300 s"
            );
        }
    }
    .await;
    let (env, ..) = stack.stop().await;
    Stack::discard(env, "calibration").await;
    let c = measured?;
    eprintln!(
        "[autoscale] one dispatcher (in-flight cap {cap}): {:.0} events/s ({:.0} by Little's law), {:.2} cores, machine {:.0} % busy",
        c.capacity_per_s,
        c.little_law_per_s,
        c.dispatcher_cores,
        c.machine_busy_pct.unwrap_or(f64::NAN)
    );
    Ok(c)
}

/// One sample of a run (once a second).
#[derive(Debug, Clone, Copy)]
struct Tick {
    t_s: f64,
    replicas: u32,
    members: Option<u32>,
    lag: Option<i64>,
    delivered: usize,
    requests: usize,
    committed: usize,
    backlog: i64,
    busy_pct: Option<f64>,
}

/// The step's shape and what a run is held to.
#[derive(Debug, Clone, Copy)]
struct Step {
    rate: usize,
    idle_s: f64,
    step_s: f64,
    needed: u32,
    threshold: i64,
}

/// What one run measured, before it is turned into figures.
struct Run {
    label: String,
    ticks: Vec<Tick>,
    polls: Vec<crate::keda::Decision>,
    failed_polls: usize,
    /// (time, from, to, KEDA's total lag).
    scale_events: Vec<(f64, u32, u32, i64)>,
    received: Vec<Received>,
    events: usize,
    started_ms: f64,
    /// When the producers finished (s since the run started).
    produced_s: f64,
    wall_s: f64,
    drained: bool,
    processes: Vec<(String, Usage)>,
    dispatcher_cpu_s: f64,
    unclean_exits: usize,
}

/// The step against the events role, autoscaled by `so` or (`None`) one fixed dispatcher.
async fn run_step(args: &RunArgs, label: &str, so: Option<ScaledObject>, step: Step) -> anyhow::Result<Run> {
    let mut stack = Stack::start(args, label).await?;
    let view = {
        let k = &stack.env.kafka;
        Arc::new(GroupView::new(k, &k.group_id, &k.topics.events, PARTITIONS)?)
    };
    let committed = Arc::new(AtomicUsize::new(0));
    let events = (step.rate as f64 * step.step_s) as usize;
    let started = Instant::now();
    let started_ms = engine::unix_ms();
    let mut producer = tokio::spawn({
        let (pool, tenant, committed) = (stack.env.pool.clone(), stack.tenant, committed.clone());
        let idle = Duration::from_secs_f64(step.idle_s);
        async move {
            tokio::time::sleep(idle).await;
            engine::produce_outbox(pool, tenant, step.rate, events, committed).await
        }
    });
    let driven = drive(&mut stack, &view, so, step, started, &committed, &mut producer).await;
    producer.abort();
    let received = stack.receiver.received();
    let (env, processes, dispatcher_cpu_s, unclean_exits) = stack.stop().await;
    Stack::discard(env, label).await;
    let d = driven?;
    Ok(Run {
        label: label.into(),
        ticks: d.ticks,
        polls: d.polls,
        failed_polls: d.failed_polls,
        scale_events: d.scale_events,
        received,
        events: committed.load(Ordering::Relaxed),
        started_ms,
        produced_s: d.produced_s,
        wall_s: started.elapsed().as_secs_f64(),
        drained: d.drained,
        processes,
        dispatcher_cpu_s,
        unclean_exits,
    })
}

/// What `drive` measured.
#[derive(Default)]
struct Driven {
    ticks: Vec<Tick>,
    polls: Vec<crate::keda::Decision>,
    failed_polls: usize,
    scale_events: Vec<(f64, u32, u32, i64)>,
    produced_s: f64,
    drained: bool,
}

/// Samples the run once a second and, autoscaled, polls like KEDA and scales, until every
/// event is delivered and the replicas are back to the minimum (or `TAIL_LIMIT_S` after the
/// step).
async fn drive(
    stack: &mut Stack,
    view: &Arc<GroupView>,
    so: Option<ScaledObject>,
    step: Step,
    started: Instant,
    committed: &AtomicUsize,
    producer: &mut tokio::task::JoinHandle<anyhow::Result<f64>>,
) -> anyhow::Result<Driven> {
    let label = stack.label.clone();
    let mut d = Driven::default();
    let mut autoscaler = so.map(|so| Autoscaler::new(so, 0.0, stack.replicas()));
    let polling_s = autoscaler
        .as_ref()
        .map_or(f64::INFINITY, |a| a.scaled_object().polling_s);
    let mut next_poll = polling_s;
    let mut machine = procstat::machine();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut produced: Option<f64> = None;
    let mut printed: Option<Tick> = None;
    loop {
        tick.tick().await;
        let t_s = started.elapsed().as_secs_f64();
        stack.check().await?;
        let v = view.clone();
        let (offsets, membership) =
            tokio::task::spawn_blocking(move || (v.offsets(), v.membership())).await?;
        let now = procstat::machine();
        let busy_pct = machine.zip(now).and_then(|(a, b)| procstat::busy_pct(a, b));
        machine = now;
        let t = Tick {
            t_s,
            replicas: stack.replicas(),
            members: membership.filter(|m| m.stable).map(|m| m.assigned as u32),
            lag: offsets
                .as_ref()
                .map(|o| o.iter().map(PartitionOffsets::lag).sum()),
            delivered: stack.receiver.successes(),
            requests: stack.receiver.count(),
            committed: committed.load(Ordering::Relaxed),
            backlog: stack.env.outbox_len().await.unwrap_or(-1),
            busy_pct,
        };
        d.ticks.push(t);
        if let Some(a) = autoscaler.as_mut().filter(|_| t_s >= next_poll) {
            next_poll += polling_s;
            match offsets.as_deref() {
                Some(parts) => {
                    let reading = a.scaled_object().trigger.read(parts);
                    let current = stack.replicas();
                    let decision = a.poll(t_s, current, reading);
                    if decision.replicas != current {
                        eprintln!(
                            "[autoscale/{label}] {t_s:6.1} s: lag {} → {current} → {} replicas (desired {})",
                            reading.total_lag, decision.replicas, decision.desired
                        );
                        d.scale_events
                            .push((t_s, current, decision.replicas, reading.total_lag));
                        while stack.replicas() < decision.replicas {
                            stack.add_replica()?;
                        }
                        while stack.replicas() > decision.replicas {
                            stack.remove_replica();
                        }
                    }
                    d.polls.push(decision);
                }
                None => d.failed_polls += 1,
            }
        }
        if printed.is_none_or(|p| t_s - p.t_s >= 5.0) {
            let per_s = |now: usize, then: usize, dt: f64| (now - then) as f64 / dt.max(1e-3);
            let (dr, cr) = printed.map_or((0.0, 0.0), |p| {
                (
                    per_s(t.delivered, p.delivered, t_s - p.t_s),
                    per_s(t.committed, p.committed, t_s - p.t_s),
                )
            });
            let show = |v: Option<String>| v.unwrap_or_else(|| "?".into());
            eprintln!(
                "[autoscale/{label}] {t_s:6.1} s  replicas {} (members {})  lag {:>7}  committed {cr:>5.0}/s  2xx {dr:>5.0}/s  outbox {:>6}  cpu {} %",
                t.replicas,
                show(t.members.map(|m| m.to_string())),
                show(t.lag.map(|l| l.to_string())),
                t.backlog,
                show(t.busy_pct.map(|b| format!("{b:.0}"))),
            );
            printed = Some(t);
        }
        if produced.is_none() && producer.is_finished() {
            (&mut *producer).await??;
            produced = Some(t_s);
        }
        let Some(p) = produced else {
            anyhow::ensure!(
                t_s < step.idle_s + step.step_s + TAIL_LIMIT_S,
                "the producers did not finish"
            );
            continue;
        };
        if !d.drained && t.delivered >= t.committed {
            d.drained = all_delivered(&stack.receiver, t.committed);
        }
        let scaled_in =
            autoscaler.is_none() || (stack.replicas() <= MIN_REPLICAS && stack.stopping.is_empty());
        if d.drained && scaled_in {
            d.produced_s = p;
            return Ok(d);
        }
        if t_s - p > TAIL_LIMIT_S {
            eprintln!(
                "[autoscale/{label}] giving up {TAIL_LIMIT_S} s after the step (drained: {}, replicas {})",
                d.drained,
                stack.replicas()
            );
            d.produced_s = p;
            return Ok(d);
        }
    }
}

/// Whether `committed` distinct events were answered 2xx.
fn all_delivered(r: &Receiver, committed: usize) -> bool {
    let ids: std::collections::HashSet<String> = r
        .received()
        .into_iter()
        .filter(|d| (200..300).contains(&d.status))
        .map(|d| d.webhook_id)
        .collect();
    ids.len() >= committed
}

/// Per event its `created_ms` and first 2xx (ms since the epoch), sorted by creation; and
/// the arrival of every 2xx beyond the first, sorted.
fn deliveries(received: &[Received]) -> (Vec<(f64, f64)>, Vec<f64>) {
    let mut by_id: HashMap<&str, (Option<f64>, Vec<f64>)> = HashMap::new();
    for d in received.iter().filter(|d| (200..300).contains(&d.status)) {
        let e = by_id.entry(d.webhook_id.as_str()).or_default();
        if e.0.is_none() {
            e.0 = serde_json::from_slice::<serde_json::Value>(&d.body)
                .ok()
                .and_then(|v| v.get("created_ms").and_then(serde_json::Value::as_f64));
        }
        e.1.push(d.received_unix_ms);
    }
    let mut events = Vec::new();
    let mut duplicates = Vec::new();
    for (created, mut oks) in by_id.into_values() {
        oks.sort_by(f64::total_cmp);
        if let (Some(c), Some(first)) = (created, oks.first()) {
            events.push((c, *first));
        }
        duplicates.extend(oks.into_iter().skip(1));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    duplicates.sort_by(f64::total_cmp);
    (events, duplicates)
}

/// At each of `at_ms` (increasing), the age in seconds of the oldest event created by then
/// and not yet delivered; `events` are (created, delivered) sorted by creation.
fn oldest_waiting_s(events: &[(f64, f64)], at_ms: &[f64]) -> Vec<f64> {
    // The first event not delivered by T only moves forward as T does: every event before it
    // was delivered by an earlier T.
    let mut first = 0;
    at_ms
        .iter()
        .map(|&t| {
            while first < events.len() && events[first].1 <= t {
                first += 1;
            }
            match events.get(first) {
                Some(&(created, _)) if created <= t => (t - created) / 1000.0,
                _ => 0.0,
            }
        })
        .collect()
}

/// Per scale event (times sorted), the duplicates within `window` after it and before the
/// next; and the duplicates no scale event precedes within the window.
fn attribute(duplicates: &[f64], scale_events: &[f64], window: f64) -> (Vec<usize>, usize) {
    let mut per = vec![0; scale_events.len()];
    let mut unattributed = 0;
    for &d in duplicates {
        match scale_events.iter().rposition(|&e| e <= d) {
            Some(i) if d - scale_events[i] <= window => per[i] += 1,
            _ => unattributed += 1,
        }
    }
    (per, unattributed)
}

/// Seconds from `from` until the lag fell under `threshold` for good (0 if it never rose
/// above it after `from`; `None` if it is still above it at the end).
fn recovered_after(lags: &[(f64, i64)], threshold: i64, from: f64) -> Option<f64> {
    let after: Vec<&(f64, i64)> = lags.iter().filter(|(t, _)| *t >= from).collect();
    match after.iter().rposition(|(_, l)| *l > threshold) {
        None => Some(0.0),
        Some(i) => after.get(i + 1).map(|(t, _)| t - from),
    }
}

/// The run's figures.
fn phase(run: &Run, step: Step) -> AutoscalePhase {
    let (events, duplicates) = deliveries(&run.received);
    let at_ms: Vec<f64> = run
        .ticks
        .iter()
        .map(|t| run.started_ms + t.t_s * 1000.0)
        .collect();
    let lag_s = oldest_waiting_s(&events, &at_ms);
    let scale_at_ms: Vec<f64> = run
        .scale_events
        .iter()
        .map(|e| run.started_ms + e.0 * 1000.0)
        .collect();
    let (per_event, unattributed) = attribute(&duplicates, &scale_at_ms, ATTRIBUTION_WINDOW_S * 1000.0);
    let lags: Vec<(f64, i64)> = run
        .ticks
        .iter()
        .filter_map(|t| t.lag.map(|l| (t.t_s, l)))
        .collect();
    let in_step: Vec<f64> = run
        .ticks
        .iter()
        .filter(|t| t.t_s >= step.idle_s && t.t_s <= run.produced_s)
        .filter_map(|t| t.busy_pct)
        .collect();
    let first_after_step = |f: &dyn Fn(&Tick) -> bool| {
        run.ticks
            .iter()
            .find(|t| t.t_s >= step.idle_s && f(t))
            .map(|t| t.t_s - step.idle_s)
    };
    let last_delivery_ms = events.iter().map(|e| e.1).fold(f64::NAN, f64::max);
    let series = run
        .ticks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let prev = i.checked_sub(1).map(|j| run.ticks[j]);
            let rate = |now: usize, then: Option<usize>, t0: Option<f64>| match (then, t0) {
                (Some(then), Some(t0)) if t.t_s > t0 => now.saturating_sub(then) as f64 / (t.t_s - t0),
                _ => 0.0,
            };
            SecondPoint {
                t_s: t.t_s,
                replicas: t.replicas,
                members: t.members,
                lag_messages: t.lag,
                lag_s: lag_s[i],
                committed_per_s: rate(t.committed, prev.map(|p| p.committed), prev.map(|p| p.t_s)),
                delivered_per_s: rate(t.delivered, prev.map(|p| p.delivered), prev.map(|p| p.t_s)),
                cpu_busy_pct: t.busy_pct,
            }
        })
        .collect();
    let delivered = events.len();
    AutoscalePhase {
        label: run.label.clone(),
        events: run.events,
        delivered,
        lost: run.events.saturating_sub(delivered),
        duplicates: duplicates.len(),
        duplicates_after_scaling: duplicates.len() - unattributed,
        unattributed_duplicates: unattributed,
        replicas_max: run.ticks.iter().map(|t| t.replicas).max().unwrap_or(0),
        scale_out_s: first_after_step(&|t| t.replicas >= step.needed),
        members_out_s: first_after_step(&|t| t.members.is_some_and(|m| m >= step.needed)),
        lag_recovered_s: recovered_after(&lags, step.threshold, step.idle_s),
        drained_s: last_delivery_ms
            .is_finite()
            .then(|| (last_delivery_ms - run.started_ms) / 1000.0 - step.idle_s),
        max_lag_messages: lags.iter().map(|l| l.1).max().unwrap_or(0),
        max_lag_s: lag_s.iter().copied().fold(0.0, f64::max),
        scaled_in_s: run
            .scale_events
            .iter()
            .rev()
            .find(|e| e.2 <= MIN_REPLICAS && e.0 >= run.produced_s)
            .filter(|_| run.ticks.last().is_some_and(|t| t.replicas <= MIN_REPLICAS))
            .map(|e| e.0 - run.produced_s),
        failed_polls: run.failed_polls,
        unclean_exits: run.unclean_exits,
        cpu_busy_max_pct: in_step.iter().copied().reduce(f64::max),
        cpu_busy_mean_pct: (!in_step.is_empty()).then(|| in_step.iter().sum::<f64>() / in_step.len() as f64),
        dispatcher_cpu_s: run.dispatcher_cpu_s,
        wall_s: run.wall_s,
        scale_events: run
            .scale_events
            .iter()
            .zip(per_event)
            .map(|(&(at_s, from, to, lag), duplicates)| ScaleEvent {
                at_s,
                from,
                to,
                lag,
                duplicates,
            })
            .collect(),
        polls: run
            .polls
            .iter()
            .map(|p| PollRecord {
                t_s: p.t_s,
                total_lag: p.reading.total_lag,
                metric: p.reading.metric,
                active: p.reading.active,
                desired: p.desired,
                replicas: p.replicas,
            })
            .collect(),
        series,
    }
}

/// The run as the engine's contract counts it (by id, at the receiver).
fn outcome(run: &Run, delay_ms: u64) -> Outcome {
    Outcome {
        label: run.label.clone(),
        events: run.events,
        classes: vec![class(delay_ms)],
        received: vec![vec![run.received.clone()]],
        recovered_at_ms: vec![None],
        started_ms: run.started_ms,
        wall_s: run.wall_s,
        timeline: run
            .ticks
            .iter()
            .map(|t| Sample {
                t_s: t.t_s,
                delivered: t.delivered,
                requests: t.requests,
                backlog: t.backlog,
                lag: t.lag,
            })
            .collect(),
        processes: run.processes.clone(),
        kills: Vec::new(),
        drained: run.drained,
        held_at_deadline: None,
        production_s: Some(run.produced_s),
        attempt_log: None,
    }
}

fn settings(so: &ScaledObject) -> KedaSettings {
    let rules = |r: &Rules| ScalingRules {
        stabilization_window_s: r.stabilization_s,
        policies: r
            .policies
            .iter()
            .map(|p| {
                let kind = match p.kind {
                    PolicyKind::Pods => "Pods",
                    PolicyKind::Percent => "Percent",
                };
                format!("{kind} {} per {} s", p.value, chart::num(p.period_s))
            })
            .collect(),
        select_policy: match r.select {
            Select::Max => "Max",
            Select::Min => "Min",
            Select::Disabled => "Disabled",
        }
        .into(),
    };
    KedaSettings {
        min_replicas: so.min_replicas,
        max_replicas: so.max_replicas,
        lag_threshold: so.trigger.lag_threshold,
        activation_lag_threshold: so.trigger.activation_lag_threshold,
        polling_interval_s: so.polling_s,
        cooldown_period_s: so.cooldown_s,
        scale_up: rules(&so.scale_up),
        scale_down: rules(&so.scale_down),
    }
}

/// Replicas, lag (messages and seconds) and deliveries over time, both runs, the step marked.
fn charts(a: &AutoscaleFigures) -> Vec<Chart> {
    const SINCE: &str = "seconds since the run started";
    let markers = Markers {
        kinds: vec!["load step".into(), "scale event (autoscaled)".into()],
        at: [(a.idle_s as f64, 0), (a.idle_s as f64 + a.step_s as f64, 0)]
            .into_iter()
            .chain(a.autoscaled.scale_events.iter().map(|e| (e.at_s, 1)))
            .collect(),
    };
    let series = |p: &AutoscalePhase, f: &dyn Fn(&SecondPoint) -> Option<f64>| -> Points {
        p.series.iter().filter_map(|s| f(s).map(|v| (s.t_s, v))).collect()
    };
    let (auto, fixed) = (&a.autoscaled, &a.fixed);
    let threshold = a.emulated.lag_threshold as f64;
    let end = auto
        .series
        .iter()
        .chain(&fixed.series)
        .map(|s| s.t_s)
        .fold(0.0, f64::max);
    vec![
        chart::marked_time_chart(
            "all-replicas",
            "Events-role dispatchers over time",
            (SINCE, "dispatchers"),
            vec![
                (
                    "autoscaled: running".into(),
                    series(auto, &|s| Some(f64::from(s.replicas))),
                ),
                (
                    "autoscaled: group members with partitions".into(),
                    series(auto, &|s| s.members.map(f64::from)),
                ),
                ("fixed".into(), series(fixed, &|s| Some(f64::from(s.replicas)))),
            ],
            &markers,
        ),
        chart::marked_time_chart(
            "all-lag",
            "Events-group lag (messages), high watermark − committed offset",
            (SINCE, "messages"),
            vec![
                (
                    "autoscaled".into(),
                    series(auto, &|s| s.lag_messages.map(|l| l as f64)),
                ),
                (
                    "fixed".into(),
                    series(fixed, &|s| s.lag_messages.map(|l| l as f64)),
                ),
                (
                    format!("lagThreshold ({})", a.emulated.lag_threshold),
                    vec![(0.0, threshold), (end, threshold)],
                ),
            ],
            &markers,
        ),
        chart::marked_time_chart(
            "all-lag-seconds",
            "Lag in seconds: age of the oldest committed event not yet delivered",
            (SINCE, "seconds"),
            vec![
                ("autoscaled".into(), series(auto, &|s| Some(s.lag_s))),
                ("fixed".into(), series(fixed, &|s| Some(s.lag_s))),
            ],
            &markers,
        ),
        chart::marked_time_chart(
            "all-deliveries",
            "Events committed and delivered (2xx) per second",
            (SINCE, "events/s"),
            vec![
                (
                    "autoscaled: delivered".into(),
                    series(auto, &|s| Some(s.delivered_per_s)),
                ),
                (
                    "fixed: delivered".into(),
                    series(fixed, &|s| Some(s.delivered_per_s)),
                ),
                (
                    "committed (autoscaled run)".into(),
                    series(auto, &|s| Some(s.committed_per_s)),
                ),
            ],
            &markers,
        ),
    ]
}

pub async fn run(args: &RunArgs) -> anyhow::Result<(RunReport, Vec<Chart>)> {
    anyhow::ensure!(args.time_scale >= 1.0, "--time-scale must be at least 1");
    let calibration = calibrate(args).await?;
    let capacity = calibration.capacity_per_s;
    anyhow::ensure!(capacity > 0.0, "the calibration measured no capacity");
    let rate = args.rate.unwrap_or((STEP_FACTOR * capacity).round() as usize);
    let chart_so = ScaledObject::chart_defaults();
    let mut emulated = chart_so.time_scaled(args.time_scale);
    emulated.min_replicas = MIN_REPLICAS;
    emulated.max_replicas = chart_so.max_replicas.min(PARTITIONS as u32);
    emulated.trigger.lag_threshold = args
        .lag_threshold
        .unwrap_or((capacity * LAG_THRESHOLD_S).round() as i64);
    let step = Step {
        rate,
        idle_s: args.idle_s as f64,
        step_s: args.step_s as f64,
        needed: (rate as f64 / capacity).ceil() as u32,
        threshold: emulated.trigger.lag_threshold,
    };
    eprintln!(
        "[autoscale] step: {rate} events/s for {} s after {} s idle ({} dispatchers needed); lagThreshold {}, polling {} s, time ÷ {}",
        args.step_s, args.idle_s, step.needed, step.threshold, emulated.polling_s, args.time_scale
    );
    let auto = run_step(args, "autoscaled", Some(emulated.clone()), step).await?;
    let fixed = run_step(args, "fixed", None, step).await?;
    let contract = engine::contract(&[
        &outcome(&auto, args.receiver_delay_ms),
        &outcome(&fixed, args.receiver_delay_ms),
    ]);
    let figures = AutoscaleFigures {
        calibration,
        rate_per_s: rate,
        idle_s: args.idle_s,
        step_s: args.step_s,
        needed_replicas: step.needed,
        partitions: PARTITIONS,
        chart: settings(&chart_so),
        emulated: settings(&emulated),
        time_scale: args.time_scale,
        autoscaled: phase(&auto, step),
        fixed: phase(&fixed, step),
        measures: AutoscaleMeasures {
            lag_messages: "once a second from outside the group, as KEDA reads it: high watermark − committed offset, summed over the partitions".into(),
            lag_s: "after the run, from the receivers' records by id: at each second, now − created_ms of the oldest committed event not yet answered 2xx".into(),
            scale_out: "step start → KEDA had started (scale_out_s), or the stable group had as members with partitions (members_out_s), the dispatchers the step needs".into(),
            lag_recovered: "step start → the last second the lag (messages) was above lagThreshold, plus one sample".into(),
            duplicates: "2xx answers beyond the first per event; attributed to the last scale event at most attribution_window_s before their arrival".into(),
            attribution_window_s: ATTRIBUTION_WINDOW_S,
        },
    };
    let charts = charts(&figures);
    let report = RunReport::Autoscale(ScenarioReport {
        contract,
        figures: AutoscaleSection {
            autoscale: Box::new(figures),
        },
        baseline: None,
        machine: Machine::read(),
    });
    Ok((report, charts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_waiting_event_ages_until_it_is_delivered() {
        // (created, delivered): b is delivered before a.
        let events = [(0.0, 5_000.0), (1_000.0, 2_000.0), (3_000.0, 3_500.0)];
        let at = [500.0, 2_500.0, 4_000.0, 5_000.0, 6_000.0];
        assert_eq!(oldest_waiting_s(&events, &at), vec![0.5, 2.5, 4.0, 0.0, 0.0]);
        // Nothing created yet: 0.
        assert_eq!(oldest_waiting_s(&[(10_000.0, 11_000.0)], &[5_000.0]), vec![0.0]);
    }

    #[test]
    fn duplicates_go_to_the_last_scale_event_within_the_window() {
        let (per, none) = attribute(&[5.0, 12.0, 45.0, 100.0], &[10.0, 40.0], 30.0);
        assert_eq!(per, vec![1, 1]);
        assert_eq!(none, 2, "5 came before any event, 100 long after the last");
    }

    #[test]
    fn the_lag_recovers_at_the_sample_after_its_last_excursion() {
        let lags = [
            (0.0, 0),
            (30.0, 500),
            (35.0, 5_000),
            (40.0, 2_000),
            (45.0, 900),
            (50.0, 1_200),
            (55.0, 10),
        ];
        assert_eq!(recovered_after(&lags, 1_000, 30.0), Some(25.0));
        assert_eq!(
            recovered_after(&lags[..6], 1_000, 30.0),
            None,
            "still above at the end"
        );
        assert_eq!(recovered_after(&lags[..2], 1_000, 30.0), Some(0.0), "never above");
    }
}
