//! Scenarios on the engine: each builds one or more plans (phases), runs them and adds its
//! own figures under its own key next to the common contract. With `--baseline` every
//! scenario's plans also run against the naive polling design (`baseline.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use hookstream_testkit::Behaviour;

use crate::baseline;
use crate::cli::{BaselineVariant, RunArgs};
use crate::engine::{self, Chaos, Class, Kind, Load, Outcome, Payload, Plan, System};
use crate::report::{
    AfterRecovery, BaselineFigures, Contract, CrashFigures, CrashSection, FanoutSection, HealthyPhase,
    KillsPhase, LadderStep, Latency, Machine, MaxFigures, MaxSection, NoFigures, NoisyFigures, NoisySection,
    OutageFigures, OutageSection, PhaseExtra, PhaseFigures, QuietRun, Ratios, RecoveryPhase, RunReport,
    ScenarioReport, SteadyFigures, SteadySection,
};

/// A scenario's report and the phases it measured (for the HTML page).
pub struct Measured {
    pub report: RunReport,
    pub phases: Vec<Outcome>,
}

/// A scenario's own figures for one phase (Hookstream's or the baseline's), if it has any.
type Figures = fn(&RunArgs, &Outcome) -> Option<PhaseExtra>;

fn no_figures(_: &RunArgs, _: &Outcome) -> Option<PhaseExtra> {
    None
}

fn plan(args: &RunArgs, label: &str, load: Load, classes: Vec<Class>) -> Plan {
    Plan {
        system: System::Hookstream,
        label: label.into(),
        events: args.events(),
        load,
        classes,
        chaos: None,
        drain_deadline: Duration::from_secs(args.deadline_s),
        max_in_flight_events: args.max_in_flight_events(),
        attempt_log: args.attempt_log,
        payload: Payload {
            pad_bytes: args.payload_bytes.saturating_sub(150),
            seal: args.seal_payloads,
        },
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

/// An engine scenario's report on this machine.
fn scenario_report<F>(
    contract: Contract,
    figures: F,
    baseline: Option<BTreeMap<String, BaselineFigures>>,
) -> ScenarioReport<F> {
    ScenarioReport {
        contract,
        figures,
        baseline,
        machine: Machine::read(),
    }
}

/// The contract figures of one phase, with the scenario's own beside them.
fn phase_figures(args: &RunArgs, o: &Outcome, figures: Figures) -> PhaseFigures {
    let c = engine::contract(&[o]);
    PhaseFigures {
        phase: o.label.clone(),
        events: c.events,
        expected_deliveries: c.expected_deliveries,
        delivered: c.delivered,
        lost: c.lost,
        duplicates: c.duplicates,
        drained: c.drained,
        duration_s: c.duration_s,
        throughput_per_s: c.throughput_per_s,
        latency_ms: c.latency_ms,
        processes: c.processes,
        figures: figures(args, o),
    }
}

/// Hookstream ÷ baseline (`None` when the baseline's is 0).
fn ratio(hookstream: f64, baseline: f64) -> Option<f64> {
    (baseline > 0.0).then(|| hookstream / baseline)
}

/// With `--baseline`: `plans` run again by the naive polling design (each variant asked for),
/// against fresh receivers of the same fleet, stopped `--baseline-deadline-s` after the last
/// commit: each variant's contract figures, its phases (with the scenario's `figures`) and
/// Hookstream ÷ baseline ratios against `hookstream`. The baseline's phases are appended to
/// `phases`.
async fn baseline(
    args: &RunArgs,
    plans: &[&Plan],
    hookstream: &Contract,
    phases: &mut Vec<Outcome>,
    figures: Figures,
) -> anyhow::Result<Option<BTreeMap<String, BaselineFigures>>> {
    if !args.baseline {
        return Ok(None);
    }
    let mut out = BTreeMap::new();
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
        let c = engine::contract(&refs);
        out.insert(
            key.to_string(),
            BaselineFigures {
                sleep_ms,
                pollers: args.baseline_workers,
                batch: baseline::BATCH,
                deadline_s: args.baseline_deadline_s,
                expected_deliveries: c.expected_deliveries,
                delivered: c.delivered,
                lost: c.lost,
                drained: c.drained,
                duplicates: c.duplicates,
                early_retries: c.early_retries,
                invalid_signatures: c.invalid_signatures,
                duration_s: c.duration_s,
                throughput_per_s: c.throughput_per_s,
                latency_ms: c.latency_ms,
                phases: runs.iter().map(|o| phase_figures(args, o, figures)).collect(),
                hookstream_over_baseline: Ratios {
                    throughput_per_s: ratio(hookstream.throughput_per_s, c.throughput_per_s),
                    latency_p50: ratio(hookstream.latency_ms.p50, c.latency_ms.p50),
                    latency_p99: ratio(hookstream.latency_ms.p99, c.latency_ms.p99),
                    reads: "above 1 for throughput and below 1 for latency favour Hookstream".into(),
                },
                processes: c.processes,
            },
        );
        phases.extend(runs);
    }
    Ok(Some(out))
}

pub async fn steady(args: &RunArgs) -> anyhow::Result<Measured> {
    let p = plan(
        args,
        "steady",
        Load::Rate(args.rate()),
        vec![fast(args.endpoints())],
    );
    let o = engine::run(&p).await?;
    let contract = engine::contract(&[&o]);
    let mut phases = vec![o];
    let baseline = baseline(args, &[&p], &contract, &mut phases, no_figures).await?;
    let steady = SteadyFigures {
        rate_per_s: args.rate(),
        endpoints: args.endpoints(),
    };
    let report = RunReport::Steady(scenario_report(contract, SteadySection { steady }, baseline));
    Ok(Measured { report, phases })
}

/// A rate step of `max` is kept up with when everything committed was delivered within this
/// long after the last commit and p99 stayed under a second.
const SUSTAIN_DRAIN_S: u64 = 5;
const SUSTAIN_P99_MS: f64 = 1000.0;
/// The steps, as fractions of the backlog's drain rate.
const LADDER: [f64; 4] = [0.5, 0.7, 0.85, 1.0];
/// Steps halving the gap between the last step kept up with and the first one that was not:
/// the ladder's steps are 18–40 % apart, too coarse to compare two configurations by.
const REFINE_STEPS: usize = 2;

/// Which rate `max` tries next: the ladder's fractions of the drain rate until a step is not
/// kept up with, then `REFINE_STEPS` steps in the middle of the gap between the highest rate
/// kept up with and the lowest that was not (rates in whole hundreds).
struct Ladder {
    drain_per_s: f64,
    kept_below: usize,
    failed_at: Option<usize>,
    refined: usize,
}

impl Ladder {
    fn new(drain_per_s: f64) -> Self {
        Self {
            drain_per_s,
            kept_below: 0,
            failed_at: None,
            refined: 0,
        }
    }

    fn to_step(rate: f64) -> usize {
        ((rate / 100.0).round() as usize * 100).max(100)
    }

    fn first(&self) -> usize {
        Self::to_step(self.drain_per_s * LADDER[0])
    }

    /// The rate after `rate`, given whether it was kept up with (none: the ladder is done).
    fn next(&mut self, rate: usize, kept_up: bool) -> Option<usize> {
        if kept_up {
            self.kept_below = self.kept_below.max(rate);
        } else {
            self.failed_at = Some(self.failed_at.map_or(rate, |f| f.min(rate)));
        }
        match self.failed_at {
            None => LADDER
                .iter()
                .map(|f| Self::to_step(self.drain_per_s * f))
                .find(|r| *r > rate),
            Some(failed) if self.refined < REFINE_STEPS => {
                self.refined += 1;
                Some(Self::to_step((self.kept_below + failed) as f64 / 2.0))
                    .filter(|mid| *mid > self.kept_below && *mid < failed)
            }
            Some(_) => None,
        }
    }
}

/// The highest sustainable rate: a backlog drained as fast as it goes gives the ceiling, then
/// rate steps at fractions of it, each for `--seconds`. The sustainable rate is the highest
/// rate committed by the producers and kept up with; the ladder stops at the first step not
/// kept up with (then halves the gap below it `REFINE_STEPS` times), or when the producers
/// (on the same machine) cannot reach the step's rate.
pub async fn max(args: &RunArgs) -> anyhow::Result<Measured> {
    let p = plan(args, "max", Load::Backlog, vec![fast(args.endpoints())]);
    let o = engine::run(&p).await?;
    let contract = engine::contract(&[&o]);
    let endpoints = args.endpoints();
    let drain_events_per_s = contract.throughput_per_s / endpoints as f64;
    let mut phases = vec![o];
    let mut ladder = Vec::new();
    let mut sustained: f64 = 0.0;
    let mut limited_by = "none: every step was kept up with";
    let mut rates = Ladder::new(drain_events_per_s);
    let mut next = Some(rates.first());
    while let Some(rate) = next.take() {
        let mut step = plan(
            args,
            &format!("max-step-{rate}"),
            Load::Rate(rate),
            vec![fast(endpoints)],
        );
        step.events = rate * args.seconds as usize;
        step.drain_deadline = Duration::from_secs(SUSTAIN_DRAIN_S);
        let o = engine::run(&step).await?;
        let c = engine::contract(&[&o]);
        let achieved = o.production_s.map_or(0.0, |s| o.events as f64 / s.max(0.01));
        let kept_up = o.drained && c.latency_ms.p99 <= SUSTAIN_P99_MS;
        let producer_kept_rate = achieved >= 0.95 * rate as f64;
        ladder.push(LadderStep {
            rate_per_s: rate,
            fraction_of_drain_rate: rate as f64 / drain_events_per_s.max(1.0),
            producer_achieved_per_s: achieved,
            producer_kept_rate,
            delivered: c.delivered,
            expected_deliveries: c.expected_deliveries,
            kept_up,
            latency_ms: c.latency_ms,
            duplicates: c.duplicates,
            invalid_signatures: c.invalid_signatures,
        });
        phases.push(o);
        if kept_up {
            sustained = sustained.max(achieved.min(rate as f64));
            if !producer_kept_rate {
                limited_by = "producers: they could not commit the step's rate on this machine";
                break;
            }
        } else {
            limited_by = "delivery: a step was not delivered within the drain window or its p99 passed 1 s";
        }
        next = rates.next(rate, kept_up);
    }
    let max = MaxFigures {
        backlog_events: args.events(),
        endpoints,
        drain_rate_events_per_s: drain_events_per_s,
        sustainable_rate_events_per_s: sustained,
        sustainable_rate_deliveries_per_s: sustained * endpoints as f64,
        limited_by: limited_by.into(),
        step_s: args.seconds,
        kept_up_means: format!(
            "every event committed was delivered within {SUSTAIN_DRAIN_S} s of the last commit, p99 ≤ {SUSTAIN_P99_MS} ms"
        ),
        ladder,
    };
    // The baseline is compared on the backlog (its throughput ceiling).
    let baseline = baseline(args, &[&p], &contract, &mut phases, no_figures).await?;
    let report = RunReport::Max(scenario_report(contract, MaxSection { max }, baseline));
    Ok(Measured { report, phases })
}

pub async fn fanout(args: &RunArgs) -> anyhow::Result<Measured> {
    // The product's default concurrency cap per endpoint (32): with many endpoints the total
    // is already high, and each connection costs memory on both sides.
    let class = |n| {
        let mut c = fast(n);
        c.max_in_flight = None;
        c.payload_filter = args.payload_filter.then(engine::passing_filter);
        c
    };
    let fanouts = match args.endpoints {
        Some(n) => vec![n.max(1)],
        None => vec![10, 50],
    };
    let suffix = if args.payload_filter { "-filtered" } else { "" };
    let plans: Vec<Plan> = fanouts
        .into_iter()
        .map(|n| plan(args, &format!("fanout{n}{suffix}"), Load::Backlog, vec![class(n)]))
        .collect();
    let mut phases = Vec::new();
    for p in &plans {
        phases.push(engine::run(p).await?);
    }
    let fanout: Vec<PhaseFigures> = phases
        .iter()
        .map(|o| phase_figures(args, o, no_figures))
        .collect();
    let refs: Vec<&Outcome> = phases.iter().collect();
    let contract = engine::contract(&refs);
    let plan_refs: Vec<&Plan> = plans.iter().collect();
    let baseline = baseline(args, &plan_refs, &contract, &mut phases, no_figures).await?;
    let report = RunReport::Fanout(scenario_report(contract, FanoutSection { fanout }, baseline));
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
    let p = plan(args, "fleet", Load::Rate(args.rate()), classes);
    let o = engine::run(&p).await?;
    let contract = engine::contract(&[&o]);
    let mut phases = vec![o];
    let baseline = baseline(args, &[&p], &contract, &mut phases, no_figures).await?;
    let report = RunReport::Fleet(scenario_report(contract, NoFigures {}, baseline));
    Ok(Measured { report, phases })
}

/// The healthy (fast) endpoints' latency in a run.
fn healthy_latency(_: &RunArgs, o: &Outcome) -> Option<PhaseExtra> {
    Some(PhaseExtra::Healthy(HealthyPhase {
        healthy_latency_ms: Latency::of(engine::latency_samples(o)),
    }))
}

pub async fn noisy_neighbour(args: &RunArgs) -> anyhow::Result<Measured> {
    let noisy = plan(
        args,
        "noisy",
        Load::Rate(args.rate()),
        vec![fast(9), black_hole()],
    );
    let with = engine::run(&noisy).await?;
    let without = engine::run(&plan(args, "quiet", Load::Rate(args.rate()), vec![fast(9)])).await?;
    let healthy = |o: &Outcome| Latency::of(engine::latency_samples(o));
    let (lw, lo) = (healthy(&with), healthy(&without));
    let contract = engine::contract(&[&with]);
    let quiet = engine::contract(&[&without]);
    let noisy_neighbour = NoisyFigures {
        healthy_latency_ms_with_black_hole: lw,
        healthy_latency_ms_without_black_hole: lo,
        p99_ratio_with_over_without: if lo.p99 > 0.0 { lw.p99 / lo.p99 } else { 0.0 },
        run_without_black_hole: QuietRun {
            delivered: quiet.delivered,
            lost: quiet.lost,
            duration_s: quiet.duration_s,
            throughput_per_s: quiet.throughput_per_s,
            processes: quiet.processes,
        },
    };
    let mut phases = vec![with, without];
    // The baseline runs the noisy plan: its pollers wait out the black hole's timeout.
    let baseline = baseline(args, &[&noisy], &contract, &mut phases, healthy_latency).await?;
    let report = RunReport::NoisyNeighbour(scenario_report(
        contract,
        NoisySection { noisy_neighbour },
        baseline,
    ));
    Ok(Measured { report, phases })
}

/// The recovering endpoint's class in the outage plan.
const OUTAGE_CLASS: usize = 1;

/// Requests to the recovering endpoint after it came back: per second, the highest 1 s and
/// 5 s rates against its rate limit, and how long it took to drain. `None` when it never
/// came back during the run.
fn after_recovery(args: &RunArgs, o: &Outcome) -> Option<AfterRecovery> {
    let limit = f64::from(args.outage_rate_limit);
    let up = o.recovered_at_ms.get(OUTAGE_CLASS).copied().flatten()?;
    let got = o.received.get(OUTAGE_CLASS)?.first()?;
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
    Some(AfterRecovery {
        requests: got.iter().filter(|d| d.received_unix_ms >= up).count(),
        requests_per_s: bins,
        first_request_after_s: first.is_finite().then(|| (first - up) / 1000.0),
        max_requests_in_1s: max_1s,
        max_rate_over_5s_per_s: max_5s,
        allowed_rate_over_5s_per_s: allowed_5s,
        within_rate_limit: max_5s <= allowed_5s,
        drain_s: (last - up) / 1000.0,
    })
}

/// `after_recovery` as a baseline phase's figures.
fn recovery_figures(args: &RunArgs, o: &Outcome) -> Option<PhaseExtra> {
    let after_recovery = after_recovery(args, o)?;
    Some(PhaseExtra::Recovery(RecoveryPhase { after_recovery }))
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
        Load::Rate(args.rate()),
        vec![fast(args.endpoints()), outage],
    );
    let o = engine::run(&p).await?;
    let contract = engine::contract(&[&o]);
    let outage_recovery = OutageFigures {
        outage_s: args.outage_s,
        rate_limit_per_s: args.outage_rate_limit,
        after_recovery: after_recovery(args, &o),
    };
    let mut phases = vec![o];
    // The baseline has no rate limit: what reaches the endpoint when it comes back.
    let baseline = baseline(args, &[&p], &contract, &mut phases, recovery_figures).await?;
    let report = RunReport::OutageRecovery(scenario_report(
        contract,
        OutageSection { outage_recovery },
        baseline,
    ));
    Ok(Measured { report, phases })
}

/// The kills of a run and the restarts per process.
fn kills(o: &Outcome) -> KillsPhase {
    KillsPhase {
        kills: o.kills.clone(),
        restarts: o.processes.iter().map(|(n, u)| (n.clone(), u.restarts)).collect(),
    }
}

/// `kills` as a baseline phase's figures.
fn kills_figures(_: &RunArgs, o: &Outcome) -> Option<PhaseExtra> {
    Some(PhaseExtra::Kills(kills(o)))
}

pub async fn crash(args: &RunArgs) -> anyhow::Result<Measured> {
    let mut p = plan(
        args,
        "crash",
        Load::Rate(args.rate()),
        vec![fast(args.endpoints())],
    );
    p.chaos = Some(Chaos {
        seed: args.seed,
        every_s: (args.kill_every_s.0, args.kill_every_s.1),
    });
    let o = engine::run(&p).await?;
    let contract = engine::contract(&[&o]);
    let KillsPhase { kills, restarts } = kills(&o);
    let crash = CrashFigures {
        kills,
        restarts,
        seed: args.seed,
    };
    let mut phases = vec![o];
    // The same kill schedule, aimed at the baseline's poller process.
    let baseline = baseline(args, &[&p], &contract, &mut phases, kills_figures).await?;
    let report = RunReport::Crash(scenario_report(contract, CrashSection { crash }, baseline));
    Ok(Measured { report, phases })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rates `max` runs for a drain rate, when every rate at or below `limit` is kept up
    /// with and every rate above it is not.
    fn steps(drain_per_s: f64, limit: usize) -> Vec<usize> {
        let mut ladder = Ladder::new(drain_per_s);
        let mut rates = Vec::new();
        let mut next = Some(ladder.first());
        while let Some(rate) = next {
            rates.push(rate);
            next = ladder.next(rate, rate <= limit);
        }
        rates
    }

    #[test]
    fn the_ladder_climbs_to_the_first_failure_then_halves_the_gap_below_it_twice() {
        // 50 % kept, 70 % not: then 60 % (kept), then the middle of 60–70 %.
        assert_eq!(steps(25_000.0, 16_000), vec![12_500, 17_500, 15_000, 16_300]);
        // 60 % not kept either: the second halving is between 50 and 60 %.
        assert_eq!(steps(25_000.0, 14_000), vec![12_500, 17_500, 15_000, 13_800]);
        // The first step fails: halving between nothing and it.
        assert_eq!(steps(25_000.0, 5_000), vec![12_500, 6_300, 3_200]);
        // Every step kept: the ladder alone, no halving.
        assert_eq!(steps(25_000.0, 100_000), vec![12_500, 17_500, 21_300, 25_000]);
    }

    #[test]
    fn halving_stops_when_the_gap_is_one_step_of_a_hundred() {
        assert_eq!(steps(200.0, 100), vec![100, 200]);
    }
}
