//! Scenarios on the engine: each builds one or more plans (phases), runs them and adds its
//! own figures under its own key next to the common contract. With `--baseline` every
//! scenario's plans also run against the naive polling design (`baseline.rs`).

use std::time::Duration;

use hookstream_testkit::Behaviour;
use serde_json::{json, Value};

use crate::baseline;
use crate::cli::{BaselineVariant, RunArgs};
use crate::engine::{self, Chaos, Class, Kind, Load, Outcome, Plan, System};
use crate::report::Latency;

/// A scenario's report and the phases it measured (for the HTML page).
pub struct Measured {
    pub report: Value,
    pub phases: Vec<Outcome>,
}

/// A scenario's own figures for one run (Hookstream's or the baseline's).
type Figures = fn(&RunArgs, &Outcome) -> Value;

fn no_figures(_: &RunArgs, _: &Outcome) -> Value {
    Value::Null
}

fn plan(args: &RunArgs, label: &str, load: Load, classes: Vec<Class>) -> Plan {
    Plan {
        system: System::Hookstream,
        label: label.into(),
        events: args.events,
        load,
        classes,
        chaos: None,
        drain_deadline: Duration::from_secs(args.deadline_s),
        max_in_flight_events: args.max_in_flight_events,
        out: args.out.clone(),
    }
}

fn fast(n: usize) -> Class {
    Class::new("fast", Kind::Http(Behaviour::Ok), n, true)
}

fn black_hole() -> Class {
    let mut c = Class::new("black_hole", Kind::Http(Behaviour::Hang), 1, false);
    c.timeout_ms = Some(1000);
    c
}

/// The contract figures of one phase, with the scenario's own beside them.
fn phase_figures(args: &RunArgs, scenario: &str, o: &Outcome, figures: Figures) -> Value {
    let c = engine::contract(scenario, &[o]);
    let mut v = json!({
        "phase": o.label,
        "events": c["events"],
        "expected_deliveries": c["expected_deliveries"],
        "delivered": c["delivered"],
        "lost": c["lost"],
        "duplicates": c["duplicates"],
        "drained": c["drained"],
        "duration_s": c["duration_s"],
        "throughput_per_s": c["throughput_per_s"],
        "latency_ms": c["latency_ms"],
        "processes": c["processes"],
    });
    let extra = figures(args, o);
    if !extra.is_null() {
        v["figures"] = extra;
    }
    v
}

/// Hookstream ÷ baseline for a number at `path` in both reports (null when either is missing
/// or the baseline's is 0).
fn ratio(hookstream: &Value, baseline: &Value, path: &[&str]) -> Value {
    let get = |v: &Value| path.iter().try_fold(v, |v, k| v.get(*k)).and_then(Value::as_f64);
    match (get(hookstream), get(baseline)) {
        (Some(h), Some(b)) if b > 0.0 => json!(h / b),
        _ => Value::Null,
    }
}

/// With `--baseline`: `plans` run again by the naive polling design (each variant asked for),
/// against fresh receivers of the same fleet, stopped `--baseline-deadline-s` after the last
/// commit; `report["baseline"]` gets each variant's contract figures, its phases (with the
/// scenario's `figures`) and Hookstream ÷ baseline ratios.
async fn baseline(
    args: &RunArgs,
    plans: &[&Plan],
    report: &mut Value,
    phases: &mut Vec<Outcome>,
    figures: Figures,
) -> anyhow::Result<()> {
    if !args.baseline {
        return Ok(());
    }
    let scenario = report["scenario"].as_str().unwrap_or_default().to_string();
    let mut out = serde_json::Map::new();
    for variant in &args.baseline_variants {
        let (key, sleep_ms) = match variant {
            BaselineVariant::Polling500ms => ("polling_500ms", 500),
            BaselineVariant::PollingTuned => ("polling_tuned", 0),
        };
        let mut runs = Vec::new();
        for p in plans {
            let mut b = (*p).clone();
            b.system = System::Baseline {
                sleep_ms,
                workers: args.baseline_workers,
            };
            b.label = format!("{}-baseline-{}", p.label, key.replace('_', "-"));
            b.drain_deadline = Duration::from_secs(args.baseline_deadline_s);
            runs.push(engine::run(&b).await?);
        }
        let refs: Vec<&Outcome> = runs.iter().collect();
        let c = engine::contract(&scenario, &refs);
        out.insert(
            key.into(),
            json!({
                "sleep_ms": sleep_ms,
                "pollers": args.baseline_workers,
                "batch": baseline::BATCH,
                "deadline_s": args.baseline_deadline_s,
                "expected_deliveries": c["expected_deliveries"],
                "delivered": c["delivered"],
                "lost": c["lost"],
                "drained": c["drained"],
                "duplicates": c["duplicates"],
                "early_retries": c["early_retries"],
                "invalid_signatures": c["invalid_signatures"],
                "duration_s": c["duration_s"],
                "throughput_per_s": c["throughput_per_s"],
                "latency_ms": c["latency_ms"],
                "processes": c["processes"],
                "phases": runs.iter().map(|o| phase_figures(args, &scenario, o, figures)).collect::<Vec<_>>(),
                "hookstream_over_baseline": {
                    "throughput_per_s": ratio(report, &c, &["throughput_per_s"]),
                    "latency_p50": ratio(report, &c, &["latency_ms", "p50"]),
                    "latency_p99": ratio(report, &c, &["latency_ms", "p99"]),
                    "reads": "above 1 for throughput and below 1 for latency favour Hookstream",
                },
            }),
        );
        phases.extend(runs);
    }
    report["baseline"] = Value::Object(out);
    Ok(())
}

pub async fn steady(args: &RunArgs) -> anyhow::Result<Measured> {
    let p = plan(args, "steady", Load::Rate(args.rate), vec![fast(args.endpoints)]);
    let o = engine::run(&p).await?;
    let mut report = engine::contract("steady", &[&o]);
    report["steady"] = json!({ "rate_per_s": args.rate, "endpoints": args.endpoints });
    let mut phases = vec![o];
    baseline(args, &[&p], &mut report, &mut phases, no_figures).await?;
    Ok(Measured { report, phases })
}

/// A rate step of `max` is kept up with when everything committed was delivered within this
/// long after the last commit and p99 stayed under a second.
const SUSTAIN_DRAIN_S: u64 = 5;
const SUSTAIN_P99_MS: f64 = 1000.0;
/// The steps, as fractions of the backlog's drain rate.
const LADDER: [f64; 4] = [0.5, 0.7, 0.85, 1.0];

/// The highest sustainable rate: a backlog drained as fast as it goes gives the ceiling, then
/// rate steps at fractions of it, each for `--seconds`. The sustainable rate is the highest
/// rate committed by the producers and kept up with; the ladder stops at the first step not
/// kept up with, or when the producers (on the same machine) cannot reach the step's rate.
pub async fn max(args: &RunArgs) -> anyhow::Result<Measured> {
    let p = plan(args, "max", Load::Backlog, vec![fast(args.endpoints)]);
    let o = engine::run(&p).await?;
    let mut report = engine::contract("max", &[&o]);
    let endpoints = args.endpoints.max(1);
    let drain_events_per_s = report["throughput_per_s"].as_f64().unwrap_or(0.0) / endpoints as f64;
    let mut phases = vec![o];
    let mut ladder = Vec::new();
    let mut sustained: f64 = 0.0;
    let mut limited_by = "none: every step was kept up with";
    for f in LADDER {
        let rate = ((drain_events_per_s * f / 100.0).round() as usize * 100).max(100);
        let mut step = plan(
            args,
            &format!("max-step-{rate}"),
            Load::Rate(rate),
            vec![fast(endpoints)],
        );
        step.events = rate * args.seconds as usize;
        step.drain_deadline = Duration::from_secs(SUSTAIN_DRAIN_S);
        let o = engine::run(&step).await?;
        let c = engine::contract("max", &[&o]);
        let achieved = o.production_s.map_or(0.0, |s| o.events as f64 / s.max(0.01));
        let p99 = c["latency_ms"]["p99"].as_f64().unwrap_or(f64::INFINITY);
        let kept_up = o.drained && p99 <= SUSTAIN_P99_MS;
        let producer_kept_rate = achieved >= 0.95 * rate as f64;
        ladder.push(json!({
            "rate_per_s": rate,
            "fraction_of_drain_rate": f,
            "producer_achieved_per_s": achieved,
            "producer_kept_rate": producer_kept_rate,
            "delivered": c["delivered"],
            "expected_deliveries": c["expected_deliveries"],
            "kept_up": kept_up,
            "latency_ms": c["latency_ms"],
            "duplicates": c["duplicates"],
            "invalid_signatures": c["invalid_signatures"],
        }));
        phases.push(o);
        if !kept_up {
            limited_by = "delivery: a step was not delivered within the drain window or its p99 passed 1 s";
            break;
        }
        sustained = sustained.max(achieved.min(rate as f64));
        if !producer_kept_rate {
            limited_by = "producers: they could not commit the step's rate on this machine";
            break;
        }
    }
    report["max"] = json!({
        "backlog_events": args.events,
        "endpoints": endpoints,
        "drain_rate_events_per_s": drain_events_per_s,
        "sustainable_rate_events_per_s": sustained,
        "sustainable_rate_deliveries_per_s": sustained * endpoints as f64,
        "limited_by": limited_by,
        "step_s": args.seconds,
        "kept_up_means": format!(
            "every event committed was delivered within {SUSTAIN_DRAIN_S} s of the last commit, p99 ≤ {SUSTAIN_P99_MS} ms"
        ),
        "ladder": ladder,
    });
    // The baseline is compared on the backlog (its throughput ceiling).
    baseline(args, &[&p], &mut report, &mut phases, no_figures).await?;
    Ok(Measured { report, phases })
}

pub async fn fanout(args: &RunArgs) -> anyhow::Result<Measured> {
    // The product's default concurrency cap per endpoint (32): with many endpoints the total
    // is already high, and each connection costs memory on both sides.
    let class = |n| {
        let mut c = fast(n);
        c.max_in_flight = None;
        c
    };
    let plans: Vec<Plan> = [10, 50]
        .into_iter()
        .map(|n| plan(args, &format!("fanout{n}"), Load::Backlog, vec![class(n)]))
        .collect();
    let mut phases = Vec::new();
    for p in &plans {
        phases.push(engine::run(p).await?);
    }
    let per: Vec<Value> = phases
        .iter()
        .map(|o| phase_figures(args, "fanout", o, no_figures))
        .collect();
    let refs: Vec<&Outcome> = phases.iter().collect();
    let mut report = engine::contract("fanout", &refs);
    report["fanout"] = json!(per);
    let plan_refs: Vec<&Plan> = plans.iter().collect();
    baseline(args, &plan_refs, &mut report, &mut phases, no_figures).await?;
    Ok(Measured { report, phases })
}

/// One endpoint of every receiver behaviour, at `--rate`.
pub async fn fleet(args: &RunArgs) -> anyhow::Result<Measured> {
    let mut gone = Class::new("gone_410", Kind::Http(Behaviour::Status(410)), 1, false);
    gone.max_in_flight = Some(32);
    let classes = vec![
        fast(1),
        Class::new("slow_50ms", Kind::Http(Behaviour::Delay(50)), 1, true),
        Class::new(
            "slow_10_to_500ms",
            Kind::Http(Behaviour::DelaySpread(10, 500)),
            1,
            true,
        ),
        Class::new("flaky_20pct", Kind::Http(Behaviour::Flaky(20)), 1, true),
        Class::new(
            "throttle_429_20pct",
            Kind::Http(Behaviour::Throttle(20, 1)),
            1,
            true,
        ),
        Class::new("down", Kind::Down, 1, false),
        black_hole(),
        gone,
    ];
    let p = plan(args, "fleet", Load::Rate(args.rate), classes);
    let o = engine::run(&p).await?;
    let mut report = engine::contract("fleet", &[&o]);
    let mut phases = vec![o];
    baseline(args, &[&p], &mut report, &mut phases, no_figures).await?;
    Ok(Measured { report, phases })
}

/// The healthy (fast) endpoints' latency in a run.
fn healthy_latency(_: &RunArgs, o: &Outcome) -> Value {
    json!({ "healthy_latency_ms": Latency::of(engine::latency_samples(o)) })
}

pub async fn noisy_neighbour(args: &RunArgs) -> anyhow::Result<Measured> {
    let noisy = plan(args, "noisy", Load::Rate(args.rate), vec![fast(9), black_hole()]);
    let with = engine::run(&noisy).await?;
    let without = engine::run(&plan(args, "quiet", Load::Rate(args.rate), vec![fast(9)])).await?;
    let healthy = |o: &Outcome| Latency::of(engine::latency_samples(o));
    let (lw, lo) = (healthy(&with), healthy(&without));
    let mut report = engine::contract("noisy-neighbour", &[&with]);
    let quiet = engine::contract("noisy-neighbour", &[&without]);
    report["noisy_neighbour"] = json!({
        "healthy_latency_ms_with_black_hole": lw,
        "healthy_latency_ms_without_black_hole": lo,
        "p99_ratio_with_over_without": if lo.p99 > 0.0 { lw.p99 / lo.p99 } else { 0.0 },
        "run_without_black_hole": {
            "delivered": quiet["delivered"],
            "lost": quiet["lost"],
            "duration_s": quiet["duration_s"],
            "throughput_per_s": quiet["throughput_per_s"],
            "processes": quiet["processes"],
        },
    });
    let mut phases = vec![with, without];
    // The baseline runs the noisy plan: its pollers wait out the black hole's timeout.
    baseline(args, &[&noisy], &mut report, &mut phases, healthy_latency).await?;
    Ok(Measured { report, phases })
}

/// The recovering endpoint's class in the outage plan.
const OUTAGE_CLASS: usize = 1;

/// Requests to the recovering endpoint after it came back: per second, the highest 1 s and
/// 5 s rates against its rate limit, and how long it took to drain.
fn after_recovery(args: &RunArgs, o: &Outcome) -> Value {
    let limit = f64::from(args.outage_rate_limit);
    let (Some(up), Some(got)) = (o.recovered_at_ms[OUTAGE_CLASS], o.received[OUTAGE_CLASS].first()) else {
        return Value::Null;
    };
    let mut bins: Vec<usize> = Vec::new();
    for d in got.iter().filter(|d| d.received_unix_ms >= up) {
        let b = ((d.received_unix_ms - up) / 1000.0) as usize;
        if bins.len() <= b {
            bins.resize(b + 1, 0);
        }
        bins[b] += 1;
    }
    let max_1s = bins.iter().copied().max().unwrap_or(0);
    let span = 5.min(bins.len()).max(1);
    let max_5s = bins
        .windows(span)
        .map(|w| w.iter().sum::<usize>())
        .max()
        .unwrap_or(0) as f64
        / span as f64;
    let last = got.iter().map(|d| d.received_unix_ms).fold(up, f64::max);
    let first = got
        .iter()
        .map(|d| d.received_unix_ms)
        .filter(|&t| t >= up)
        .fold(f64::INFINITY, f64::min);
    // The token bucket allows a burst of one second's worth on top of the rate.
    let allowed_5s = limit * 1.2;
    json!({
        "after_recovery": {
            "requests": got.iter().filter(|d| d.received_unix_ms >= up).count(),
            "requests_per_s": bins,
            "first_request_after_s": if first.is_finite() { json!((first - up) / 1000.0) } else { Value::Null },
            "max_requests_in_1s": max_1s,
            "max_rate_over_5s_per_s": max_5s,
            "allowed_rate_over_5s_per_s": allowed_5s,
            "within_rate_limit": max_5s <= allowed_5s,
            "drain_s": (last - up) / 1000.0,
        }
    })
}

pub async fn outage_recovery(args: &RunArgs) -> anyhow::Result<Measured> {
    let mut outage = Class::new(
        "outage",
        Kind::DownThenUp(Duration::from_secs(args.outage_s)),
        1,
        true,
    );
    outage.rate_limit_per_s = Some(args.outage_rate_limit);
    let p = plan(
        args,
        "outage",
        Load::Rate(args.rate),
        vec![fast(args.endpoints), outage],
    );
    let o = engine::run(&p).await?;
    let mut report = engine::contract("outage-recovery", &[&o]);
    let mut figures = json!({
        "outage_s": args.outage_s,
        "rate_limit_per_s": args.outage_rate_limit,
    });
    if let (Value::Object(m), Some(f)) = (after_recovery(args, &o), figures.as_object_mut()) {
        f.extend(m);
    }
    report["outage_recovery"] = figures;
    let mut phases = vec![o];
    // The baseline has no rate limit: what reaches the endpoint when it comes back.
    baseline(args, &[&p], &mut report, &mut phases, after_recovery).await?;
    Ok(Measured { report, phases })
}

fn kills(_: &RunArgs, o: &Outcome) -> Value {
    json!({
        "kills": o.kills,
        "restarts": o.processes.iter().map(|(n, u)| (n.clone(), u.restarts)).collect::<std::collections::BTreeMap<_, _>>(),
    })
}

pub async fn crash(args: &RunArgs) -> anyhow::Result<Measured> {
    let mut p = plan(args, "crash", Load::Rate(args.rate), vec![fast(args.endpoints)]);
    p.chaos = Some(Chaos {
        seed: args.seed,
        every_s: (args.kill_every_s.0, args.kill_every_s.1),
    });
    let o = engine::run(&p).await?;
    let mut report = engine::contract("crash", &[&o]);
    let mut figures = kills(args, &o);
    figures["seed"] = json!(args.seed);
    report["crash"] = figures;
    let mut phases = vec![o];
    // The same kill schedule, aimed at the baseline's poller process.
    baseline(args, &[&p], &mut report, &mut phases, kills).await?;
    Ok(Measured { report, phases })
}
