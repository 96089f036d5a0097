//! Scenarios on the engine: each builds one or more plans (phases), runs them and adds its
//! own figures under its own key next to the common contract.

use std::time::Duration;

use hookstream_testkit::Behaviour;
use serde_json::json;

use crate::engine::{self, Chaos, Class, Kind, Load, Outcome, Plan, System};
use crate::report::Latency;
use crate::RunArgs;

/// A scenario's report and the phases it measured (for the HTML page).
pub struct Measured {
    pub report: serde_json::Value,
    pub phases: Vec<Outcome>,
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

/// With `--baseline`: the same plan run by the naive polling design (500 ms sleep, then
/// tuned without it), and Hookstream / baseline ratios.
async fn baseline(
    args: &RunArgs,
    p: &Plan,
    report: &mut serde_json::Value,
    phases: &mut Vec<Outcome>,
) -> anyhow::Result<()> {
    if !args.baseline {
        return Ok(());
    }
    let mut out = serde_json::Map::new();
    for (key, sleep_ms) in [("polling_500ms", 500), ("polling_tuned", 0)] {
        let mut b = p.clone();
        b.system = System::Baseline {
            sleep_ms,
            workers: args.baseline_workers,
        };
        b.label = format!("{}-baseline-{key}", p.label);
        let o = engine::run(&b).await?;
        let c = engine::contract(&p.label, &[&o]);
        let ratio = |k: &str, sub: Option<&str>| {
            let get = |v: &serde_json::Value| match sub {
                Some(s) => v[k][s].as_f64(),
                None => v[k].as_f64(),
            };
            match (get(report), get(&c)) {
                (Some(h), Some(b)) if b > 0.0 => json!(h / b),
                _ => serde_json::Value::Null,
            }
        };
        out.insert(
            key.into(),
            json!({
                "sleep_ms": sleep_ms,
                "pollers": args.baseline_workers,
                "batch": crate::baseline::BATCH,
                "delivered": c["delivered"],
                "lost": c["lost"],
                "duplicates": c["duplicates"],
                "invalid_signatures": c["invalid_signatures"],
                "duration_s": c["duration_s"],
                "throughput_per_s": c["throughput_per_s"],
                "latency_ms": c["latency_ms"],
                "processes": c["processes"],
                "hookstream_over_baseline": {
                    "throughput_per_s": ratio("throughput_per_s", None),
                    "latency_p50": ratio("latency_ms", Some("p50")),
                    "latency_p99": ratio("latency_ms", Some("p99")),
                },
            }),
        );
        phases.push(o);
    }
    report["baseline"] = serde_json::Value::Object(out);
    Ok(())
}

pub async fn steady(args: &RunArgs) -> anyhow::Result<Measured> {
    let p = plan(args, "steady", Load::Rate(args.rate), vec![fast(args.endpoints)]);
    let o = engine::run(&p).await?;
    let mut report = engine::contract("steady", &[&o]);
    report["steady"] = json!({ "rate_per_s": args.rate, "endpoints": args.endpoints });
    let mut phases = vec![o];
    baseline(args, &p, &mut report, &mut phases).await?;
    Ok(Measured { report, phases })
}

pub async fn max(args: &RunArgs) -> anyhow::Result<Measured> {
    let p = plan(args, "max", Load::Backlog, vec![fast(args.endpoints)]);
    let o = engine::run(&p).await?;
    let mut report = engine::contract("max", &[&o]);
    report["max"] = json!({ "backlog_events": args.events, "endpoints": args.endpoints });
    let mut phases = vec![o];
    baseline(args, &p, &mut report, &mut phases).await?;
    Ok(Measured { report, phases })
}

pub async fn fanout(args: &RunArgs) -> anyhow::Result<Measured> {
    let mut phases = Vec::new();
    let mut per = Vec::new();
    for n in [10, 50] {
        let o = engine::run(&plan(args, &format!("fanout{n}"), Load::Backlog, vec![fast(n)])).await?;
        let c = engine::contract("fanout", &[&o]);
        per.push(json!({
            "endpoints": n,
            "events": c["events"],
            "expected_deliveries": c["expected_deliveries"],
            "delivered": c["delivered"],
            "lost": c["lost"],
            "duration_s": c["duration_s"],
            "throughput_per_s": c["throughput_per_s"],
            "latency_ms": c["latency_ms"],
            "processes": c["processes"],
        }));
        phases.push(o);
    }
    let refs: Vec<&Outcome> = phases.iter().collect();
    let mut report = engine::contract("fanout", &refs);
    report["fanout"] = json!(per);
    Ok(Measured { report, phases })
}

/// One endpoint of every receiver behaviour, at `--rate`.
pub async fn fleet(args: &RunArgs) -> anyhow::Result<Measured> {
    let mut gone = Class::new("gone_410", Kind::Http(Behaviour::Status(410)), 1, false);
    gone.max_in_flight = Some(32);
    let classes = vec![
        fast(1),
        Class::new("slow_50ms", Kind::Http(Behaviour::Delay(50)), 1, true),
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
    let o = engine::run(&plan(args, "fleet", Load::Rate(args.rate), classes)).await?;
    let report = engine::contract("fleet", &[&o]);
    Ok(Measured {
        report,
        phases: vec![o],
    })
}

pub async fn noisy_neighbour(args: &RunArgs) -> anyhow::Result<Measured> {
    let with = engine::run(&plan(
        args,
        "noisy",
        Load::Rate(args.rate),
        vec![fast(9), black_hole()],
    ))
    .await?;
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
    Ok(Measured {
        report,
        phases: vec![with, without],
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
    let o = engine::run(&plan(
        args,
        "outage",
        Load::Rate(args.rate),
        vec![fast(args.endpoints), outage],
    ))
    .await?;
    let mut report = engine::contract("outage-recovery", &[&o]);
    let oi = 1;
    let limit = f64::from(args.outage_rate_limit);
    let mut figures = json!({
        "outage_s": args.outage_s,
        "rate_limit_per_s": args.outage_rate_limit,
    });
    if let (Some(up), Some(got)) = (o.recovered_at_ms[oi], o.received[oi].first()) {
        // Requests per second after the recovery, in 1 s bins.
        let mut bins: Vec<usize> = Vec::new();
        for d in got.iter().filter(|d| d.received_unix_ms >= up) {
            let b = ((d.received_unix_ms - up) / 1000.0) as usize;
            if bins.len() <= b {
                bins.resize(b + 1, 0);
            }
            bins[b] += 1;
        }
        let max_1s = bins.iter().copied().max().unwrap_or(0);
        let max_5s = bins
            .windows(5.min(bins.len()).max(1))
            .map(|w| w.iter().sum::<usize>())
            .max()
            .unwrap_or(0) as f64
            / 5.0_f64.min(bins.len().max(1) as f64);
        let last = got.iter().map(|d| d.received_unix_ms).fold(up, f64::max);
        // The token bucket allows a burst of one second's worth on top of the rate.
        let allowed_5s = limit * 1.2;
        figures["after_recovery"] = json!({
            "requests": got.iter().filter(|d| d.received_unix_ms >= up).count(),
            "requests_per_s": bins,
            "max_requests_in_1s": max_1s,
            "max_rate_over_5s_per_s": max_5s,
            "allowed_rate_over_5s_per_s": allowed_5s,
            "within_rate_limit": max_5s <= allowed_5s,
            "drain_s": (last - up) / 1000.0,
        });
    }
    report["outage_recovery"] = figures;
    Ok(Measured {
        report,
        phases: vec![o],
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
    report["crash"] = json!({
        "seed": args.seed,
        "kills": o.kills,
        "restarts": o.processes.iter().map(|(n, u)| (n.clone(), u.restarts)).collect::<std::collections::BTreeMap<_, _>>(),
    });
    Ok(Measured {
        report,
        phases: vec![o],
    })
}
