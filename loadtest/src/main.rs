//! `loadtest`: runs a scenario against the real services (release builds) on the local
//! PostgreSQL and Kafka, and writes `DIR/report.json`.
//!
//! ```text
//! cargo run --release -p loadtest -- run relay --events 200000 --rate 2000 --out loadtest/out/relay
//! ```
//!
//! Scenarios so far: `relay` (outbox → Kafka only) and `dispatch` (outbox → receivers). Each run uses a fresh database and fresh
//! topics, so runs do not disturb each other or the `make up` stack.

#![forbid(unsafe_code)]

mod dispatch;
mod procstat;
mod relay;
mod report;

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
}

#[derive(Clone, Copy, ValueEnum)]
enum Scenario {
    /// Outbox → Kafka only: drain throughput with 1 and 2 relays, and commit → Kafka latency at a fixed rate.
    Relay,
    /// Outbox → receivers: delivery throughput at a fan-out of `--endpoints`, and latency at `--rate`.
    Dispatch,
}

#[derive(clap::Args)]
pub struct RunArgs {
    #[arg(value_enum)]
    scenario: Scenario,
    /// Events for the throughput phase.
    #[arg(long, default_value_t = 200_000)]
    pub events: usize,
    /// Events per second for the latency phase.
    #[arg(long, default_value_t = 2_000)]
    pub rate: usize,
    /// Seconds of the latency phase.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// Endpoints subscribed to every event (fan-out) in the dispatch scenario.
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            std::fs::create_dir_all(&args.out)?;
            let report = match args.scenario {
                Scenario::Relay => relay::run(&args).await?,
                Scenario::Dispatch => dispatch::run(&args).await?,
            };
            let path = args.out.join("report.json");
            std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            eprintln!("report written to {}", path.display());
        }
    }
    Ok(())
}
