//! `loadtest`: runs a scenario against the real services (release builds) on the local
//! PostgreSQL and Kafka, and writes `DIR/report.json`.
//!
//! ```text
//! cargo run --release -p loadtest -- run relay --events 200000 --rate 2000 --out loadtest/out/relay
//! ```
//!
//! Scenarios: `steady`, `max`, `fanout`, `fleet`, `noisy-neighbour`, `outage-recovery`,
//! `crash` (the engine: receiver fleet, services as child processes, `report.json` with a
//! common contract, `report.html` and its charts as SVG files in `charts/`), and `relay`
//! (outbox → Kafka only). Each run uses a fresh database and fresh topics, so runs do not
//! disturb each other or the `make up` stack.

#![forbid(unsafe_code)]

mod baseline;
mod engine;
mod html;
mod procstat;
mod relay;
mod report;
mod scenarios;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(about = "Hookstream load scenarios with JSON reports")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one scenario.
    Run(RunArgs),
    /// Recompute the medians of a report's runs (after a change to how they merge) and
    /// rewrite DIR/report.json and the JSON in DIR/report.html.
    Remerge {
        /// A run's `--out` directory.
        dir: PathBuf,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Scenario {
    /// Outbox → Kafka only: drain throughput with 1 and 2 relays, and commit → Kafka latency at a fixed rate.
    Relay,
    /// `--events` at `--rate` events/s to `--endpoints` fast receivers: latency.
    Steady,
    /// A backlog of `--events` drained to `--endpoints` fast receivers (the ceiling), then
    /// rate steps of `--seconds` each up to it: the highest sustainable rate.
    Max,
    /// A backlog of `--events` to 10, then to 50 fast receivers.
    Fanout,
    /// One receiver of every behaviour (fast, slow, flaky, down, black hole, 429, 410) at `--rate`.
    Fleet,
    /// 9 fast receivers + 1 black hole, then the 9 alone: healthy latency with and without.
    NoisyNeighbour,
    /// `--endpoints` fast receivers + one that is down for `--outage-s`, then back.
    OutageRecovery,
    /// Steady load while the relay and the dispatcher are SIGKILLed at random moments.
    Crash,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Self::Relay => "relay",
            Self::Steady => "steady",
            Self::Max => "max",
            Self::Fanout => "fanout",
            Self::Fleet => "fleet",
            Self::NoisyNeighbour => "noisy-neighbour",
            Self::OutageRecovery => "outage-recovery",
            Self::Crash => "crash",
        }
    }
}

/// The naive design `--baseline` runs: with its 500 ms sleep between polls, or without.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum BaselineVariant {
    #[value(name = "polling-500ms")]
    Polling500ms,
    PollingTuned,
}

#[derive(Clone, clap::Args)]
pub struct RunArgs {
    #[arg(value_enum)]
    scenario: Scenario,
    /// Events for the throughput phase.
    #[arg(long, default_value_t = 200_000)]
    pub events: usize,
    /// Events per second for the latency phase.
    #[arg(long, default_value_t = 2_000)]
    pub rate: usize,
    /// relay: seconds of the latency phase; max: seconds of each rate step.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Endpoints subscribed to every event (fan-out) in steady, max, outage-recovery and crash.
    #[arg(long, default_value_t = 1)]
    pub endpoints: usize,
    /// The dispatcher's `max_in_flight_events` (events in flight; deliveries are this × fan-out).
    #[arg(long, default_value_t = 2_000)]
    pub max_in_flight_events: usize,
    /// Relay instances for the throughput phase (runs 1..=N).
    #[arg(long, default_value_t = 2)]
    pub relays: usize,
    #[arg(long, default_value = "loadtest/out")]
    pub out: PathBuf,
    /// Seconds to wait for the pipeline to drain after the last event was committed.
    #[arg(long, default_value_t = 180)]
    pub deadline_s: u64,
    /// outage-recovery: how long the endpoint is down.
    #[arg(long, default_value_t = 60)]
    pub outage_s: u64,
    /// outage-recovery: the recovering endpoint's rate limit (requests/s).
    #[arg(long, default_value_t = 100)]
    pub outage_rate_limit: i32,
    /// crash: seed of the kill schedule (which process, when); run i of `--runs` uses seed + i.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// crash: seconds between kills, drawn from MIN..=MAX.
    #[arg(long, value_parser = parse_range, default_value = "3..8")]
    pub kill_every_s: (f64, f64),
    /// Also run the scenario's plans with the naive polling design, against the same receivers.
    #[arg(long)]
    pub baseline: bool,
    /// Which variants of the baseline run (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "polling-500ms,polling-tuned"
    )]
    pub baseline_variants: Vec<BaselineVariant>,
    /// Concurrent pollers of the baseline (one process).
    #[arg(long, default_value_t = 4)]
    pub baseline_workers: usize,
    /// Seconds a baseline run may take to drain after its last commit (it is then reported
    /// as it stands, `drained: false`).
    #[arg(long, default_value_t = 60)]
    pub baseline_deadline_s: u64,
    /// Repeat the scenario and report the medians.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
}

fn parse_range(s: &str) -> Result<(f64, f64), String> {
    let (a, b) = s.split_once("..").ok_or("expected MIN..MAX")?;
    let a: f64 = a.trim().parse().map_err(|e| format!("{e}"))?;
    let b: f64 = b.trim().parse().map_err(|e| format!("{e}"))?;
    if !(a > 0.0 && b >= a) {
        return Err("expected 0 < MIN <= MAX".into());
    }
    Ok((a, b))
}

/// One run: its report and its charts.
async fn run_once(args: &RunArgs) -> anyhow::Result<(serde_json::Value, Vec<html::Chart>)> {
    let measured = match args.scenario {
        Scenario::Relay => return relay::run(args).await,
        Scenario::Steady => scenarios::steady(args).await?,
        Scenario::Max => scenarios::max(args).await?,
        Scenario::Fanout => scenarios::fanout(args).await?,
        Scenario::Fleet => scenarios::fleet(args).await?,
        Scenario::NoisyNeighbour => scenarios::noisy_neighbour(args).await?,
        Scenario::OutageRecovery => scenarios::outage_recovery(args).await?,
        Scenario::Crash => scenarios::crash(args).await?,
    };
    let mut report = measured.report;
    report["machine"] = serde_json::to_value(report::Machine::read())?;
    let refs: Vec<&engine::Outcome> = measured.phases.iter().collect();
    Ok((report, html::charts(&refs)))
}

/// Set in the environment of the baseline's poller process (a child of the load generator).
pub const BASELINE_ROLE_VAR: &str = "LOADTEST_BASELINE_WORKER";

async fn baseline_worker() -> anyhow::Result<()> {
    let var = |k: &str| std::env::var(k).map_err(|_| anyhow::anyhow!("{k} is not set"));
    let url = var("LOADTEST_BASELINE_DATABASE_URL")?;
    let sleep_ms: u64 = var("LOADTEST_BASELINE_SLEEP_MS")?.parse()?;
    let workers: usize = var("LOADTEST_BASELINE_WORKERS")?.parse()?;
    baseline::worker(&url, workers, sleep_ms).await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::var_os(BASELINE_ROLE_VAR).is_some() {
        return baseline_worker().await;
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            std::fs::create_dir_all(&args.out)?;
            if !matches!(args.scenario, Scenario::Relay) {
                relay::prepare()?;
            }
            let mut reports = Vec::new();
            let mut charts = Vec::new();
            for i in 0..args.runs.max(1) {
                if args.runs > 1 {
                    eprintln!("=== {} run {} of {}", args.scenario.name(), i + 1, args.runs);
                }
                // Each run of `crash` draws its own kill schedule (seed, seed + 1, …).
                let mut this = args.clone();
                this.seed = args.seed + i as u64;
                let (r, c) = run_once(&this).await?;
                reports.push(r);
                charts = c; // the page shows the last run's charts
            }
            let verdict = report::verdict(&reports);
            let mut report = if reports.len() > 1 {
                report::medians(reports)
            } else {
                reports.remove(0)
            };
            report["verdict"] = verdict.clone();
            let path = args.out.join("report.json");
            std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
            let dir = args.out.join("charts");
            std::fs::create_dir_all(&dir)?;
            for c in &charts {
                std::fs::write(dir.join(format!("{}.svg", c.name)), &c.svg)?;
            }
            let page = args.out.join("report.html");
            std::fs::write(&page, html::render(&report, &charts))?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            eprintln!("report written to {} and {}", path.display(), page.display());
            anyhow::ensure!(
                verdict["passed"] == true,
                "the run failed its checks: {}",
                verdict["failures"]
            );
        }
        Command::Remerge { dir } => {
            let path = dir.join("report.json");
            let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
            let Some(runs) = report.get("runs").and_then(|r| r.as_array()).cloned() else {
                anyhow::bail!("{} has no runs to merge", path.display());
            };
            let verdict = report::verdict(&runs);
            let mut report = report::medians(runs);
            report["verdict"] = verdict;
            std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
            let page = dir.join("report.html");
            if let Ok(old) = std::fs::read_to_string(&page) {
                std::fs::write(&page, html::with_json(&old, &report))?;
            }
            eprintln!("{} rewritten", path.display());
        }
    }
    Ok(())
}
