//! `loadtest`: runs a scenario against the real services (release builds) on the local
//! PostgreSQL and Kafka, and writes `DIR/report.json`.
//!
//! ```text
//! cargo run --release -p loadtest -- run relay --events 200000 --rate 2000 --out loadtest/out/relay
//! ```
//!
//! Scenarios: `steady`, `max`, `fanout`, `fleet`, `noisy-neighbour`, `outage-recovery`,
//! `crash` (the engine: receiver fleet, services as child processes, `report.json` with a
//! common contract, `report.html` and its charts as SVG files in `charts/`), `chaos` (on
//! the engine's pieces: every service SIGKILLed, the broker and PostgreSQL restarted, with
//! figures per fault kind), `autoscale` (on the engine's pieces: KEDA's Kafka scaler and the
//! HPA emulated, starting and stopping real dispatchers against a load step), and `relay`
//! (outbox → Kafka only). Each run uses a fresh database
//! and fresh topics, so runs do not disturb each other or the `make up` stack; `chaos`
//! restarts Kafka and PostgreSQL, so it runs only on a stack the environment names as its own.
//!
//! # Modules
//!
//! What each is, and the modules it uses (`use crate::…`, tests included); the edges form a
//! DAG, leaves first, and nothing but `main` uses `main`:
//!
//! ```text
//! cli           the command line and RunArgs                          uses nothing
//! stack         PostgreSQL/Kafka to run on and restart, binaries      uses nothing
//! schedule      the retry schedule every run configures and checks    uses nothing
//! faults        chaos's fault kinds and seeded plan                   uses nothing
//! procstat      CPU and peak RSS of a process from /proc              uses nothing
//! scrape        a Prometheus page and a histogram's quantiles         uses nothing
//! tally         loss and duplicates counted by id                     uses nothing
//! chart         SVG line charts of named series, moments marked       uses nothing
//! keda          KEDA's Kafka scaler and the HPA's behaviour, emulated  uses nothing
//! report        the report contract: serde types, reading, writing    uses nothing
//! verdict       what counts against a run                             uses report
//! merge         report.json of one run, or the medians of several     uses report, verdict
//! fault_tally   chaos's figures per fault kind from what it recorded  uses faults, report, schedule
//! page          report.html                                           uses chart, report
//! group         waiting for a consumer group to settle, from outside  uses nothing
//! baseline      the polled-queue design --baseline runs               uses schedule
//! engine        a plan run against the services and a receiver fleet  uses baseline, cli, group, keda, procstat,
//!                                                                     report, schedule, stack
//! phase_charts  the charts of engine runs                             uses chart, engine
//! scenarios     the engine scenarios and their own figures            uses baseline, cli, engine, report
//! api           the admin API scenario (its own report)              uses cli, stack
//! relay         the outbox → Kafka scenario                           uses chart, cli, procstat, report, scrape, stack, tally
//! chaos         faults under steady load, carried out and read back   uses chart, cli, engine, fault_tally, faults,
//!                                                                     group, phase_charts, report, schedule, stack
//! autoscale     KEDA's role against a load step, and a fixed run      uses chart, cli, engine, group, keda, procstat,
//!                                                                     report, stack
//! main          wires the command line to the rest                    uses api, autoscale, baseline, chaos, chart, cli,
//!                                                                     engine, merge, page, phase_charts, relay, report,
//!                                                                     scenarios, stack
//! ```

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
mod chart;
mod faults;
mod cli;
mod brokers;
mod group;
mod keda;
mod procstat;
mod report;
mod page;
mod schedule;
mod baseline;
mod fault_tally;
mod scrape;
mod stack;
mod api;
mod tally;
mod relay;
mod engine;
mod autoscale;
mod phase_charts;
mod chaos;
mod scenarios;
mod verdict;
mod merge;

use std::path::Path;

use anyhow::Context as _;
use clap::Parser as _;

use crate::cli::{Cli, Command, RunArgs, Scenario};
use crate::report::RunReport;

/// One run: its report and its charts.
async fn run_once(args: &RunArgs) -> anyhow::Result<(RunReport, Vec<chart::Chart>)> {
    let measured = match args.scenario {
        Scenario::Relay => return relay::run(args).await,
        Scenario::Api => anyhow::bail!("the api scenario writes its own report (api.rs)"),
        Scenario::Chaos | Scenario::BrokerKill => return chaos::run(args).await,
        Scenario::Autoscale => return autoscale::run(args).await,
        Scenario::Steady => scenarios::steady(args).await?,
        Scenario::Max => scenarios::max(args).await?,
        Scenario::Fanout => scenarios::fanout(args).await?,
        Scenario::Fleet => scenarios::fleet(args).await?,
        Scenario::NoisyNeighbour => scenarios::noisy_neighbour(args).await?,
        Scenario::OutageRecovery => scenarios::outage_recovery(args).await?,
        Scenario::Crash => scenarios::crash(args).await?,
    };
    let refs: Vec<&engine::Outcome> = measured.phases.iter().collect();
    Ok((measured.report, phase_charts::charts(&refs)))
}

/// `loadtest run`: every run, then `report.json` (the run, or the medians and the runs),
/// `report.html` and the charts; exits 1 when the verdict failed.
async fn run(args: RunArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    if matches!(args.scenario, Scenario::Api) {
        return api::run(&args).await;
    }
    if !matches!(args.scenario, Scenario::Relay) {
        stack::prepare()?;
    }
    let mut runs = Vec::new();
    let mut charts = Vec::new();
    for i in 0..args.runs.max(1) {
        if args.runs > 1 {
            eprintln!("=== {} run {} of {}", args.scenario.name(), i + 1, args.runs);
        }
        // Each run of `crash` and `chaos` draws its own fault schedule (seed, seed + 1, …).
        let mut this = args.clone();
        this.seed = args.seed + i as u64;
        let (r, c) = run_once(&this).await?;
        runs.push(r);
        charts = c; // the page shows the last run's charts
    }
    let report = match runs.len() {
        1 => runs.into_iter().map(merge::single).next().ok_or(merge::NoRuns)?,
        _ => merge::medians(runs)?,
    };
    let json = report::to_json(&report)?;
    let path = args.out.join("report.json");
    std::fs::write(&path, &json)?;
    let dir = args.out.join("charts");
    std::fs::create_dir_all(&dir)?;
    for c in &charts {
        std::fs::write(dir.join(format!("{}.svg", c.name)), &c.svg)?;
    }
    let page = args.out.join("report.html");
    std::fs::write(&page, page::render(&report, &json, &charts))?;
    println!("{json}");
    eprintln!("report written to {} and {}", path.display(), page.display());
    // What was written must read back as `remerge` will read it: a report missing a field
    // fails here, with the field's name, not later.
    let written = report::parse(&std::fs::read_to_string(&path)?)
        .with_context(|| format!("{} does not read back", path.display()))?;
    anyhow::ensure!(
        written.verdict.passed,
        "the run failed its checks: {}",
        written.verdict.failures.join("; ")
    );
    Ok(())
}

/// `loadtest remerge DIR`: the medians and the verdict again, from the runs `DIR/report.json`
/// keeps; rewrites it and the JSON in `DIR/report.html`.
fn remerge(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join("report.json");
    let runs = report::parse_runs(&std::fs::read_to_string(&path)?)
        .with_context(|| format!("cannot read the runs of {}", path.display()))?;
    let report = merge::medians(runs).with_context(|| format!("remerging {}", path.display()))?;
    let json = report::to_json(&report)?;
    std::fs::write(&path, &json)?;
    let page = dir.join("report.html");
    if let Ok(old) = std::fs::read_to_string(&page) {
        std::fs::write(&page, page::with_json(&old, &json))?;
    }
    eprintln!("{} rewritten", path.display());
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::var_os(baseline::ROLE_VAR).is_some() {
        return baseline::worker_from_env().await;
    }
    match Cli::parse().command {
        Command::Run(args) => run(*args).await,
        Command::Remerge { dir } => remerge(&dir),
    }
}
