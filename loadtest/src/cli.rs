//! The command line: `loadtest run SCENARIO [flags]` and `loadtest remerge DIR`, and the
//! run's settings every scenario reads (`RunArgs`).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(about = "Hookstream load scenarios with JSON reports")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run one scenario.
    Run(Box<RunArgs>),
    /// Recompute the medians of a report's runs (after a change to how they merge) and
    /// rewrite DIR/report.json and the JSON in DIR/report.html.
    Remerge {
        /// A run's `--out` directory.
        dir: PathBuf,
    },
}

/// How the relay scenario's backlog hands payloads to `hookstream.enqueue`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadForm {
    #[default]
    Jsonb,
    Text,
}

/// What the relay scenario pads its payloads with (`--pad`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pad {
    /// One run of `x` (what reports from before the option used): compresses to almost nothing.
    #[default]
    Repeat,
    /// Order line items with SKUs, quantities and prices, as real payloads are: lz4 halves it.
    Items,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Scenario {
    /// The admin API: message creates at `--connections` concurrent connections while delivery runs.
    Api,
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
    /// Steady load with retries and fan-out while every service (2 relays, 2 dispatchers of
    /// each role) is SIGKILLed `--kills-per-service` times, the broker and PostgreSQL are
    /// restarted and the database is down for `--db-outage-s`: loss, duplicates and resume
    /// time per fault kind. Restarts Kafka and PostgreSQL: needs a stack of its own.
    Chaos,
    /// The chaos run on a Kafka cluster (`HOOKSTREAM_KAFKA_BROKERS=3`, a stack of its own):
    /// `--broker-leader-kills` SIGKILLs of the broker leading most events partitions, each
    /// restarted, then `--broker-rolling-restarts` rolling restarts of all brokers (SIGTERM,
    /// one at a time): loss, duplicates and the delivery stall per fault.
    BrokerKill,
    /// KEDA's Kafka scaler and the HPA emulated with the chart's rules (time constants ÷
    /// `--time-scale`), starting and stopping real events-role dispatchers, against a load step
    /// (idle `--idle-s`, then three times one dispatcher's measured capacity for `--step-s`,
    /// then idle); then the same step with one fixed dispatcher. Receivers answer after 100 ms,
    /// so a dispatcher is bound by `--max-in-flight-events` (50), not by the cores.
    Autoscale,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Relay => "relay",
            Self::Steady => "steady",
            Self::Max => "max",
            Self::Fanout => "fanout",
            Self::Fleet => "fleet",
            Self::NoisyNeighbour => "noisy-neighbour",
            Self::OutageRecovery => "outage-recovery",
            Self::Crash => "crash",
            Self::Chaos => "chaos",
            Self::BrokerKill => "broker-kill",
            Self::Autoscale => "autoscale",
        }
    }
}

/// Which attempts the dispatchers produce to the attempts topic (`attempts.log`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AttemptLog {
    All,
    Failures,
    Off,
}

impl AttemptLog {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptLog::All => "all",
            AttemptLog::Failures => "failures",
            AttemptLog::Off => "off",
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
    pub scenario: Scenario,
    /// Events for the throughput phase (each scenario's default is the run
    /// `loadtest/publish.sh` publishes, one that can pass on a 2-core machine in minutes).
    #[arg(long)]
    pub events: Option<usize>,
    /// The dispatchers' `attempts.log` (engine scenarios): every attempt recorded and stored
    /// by the attempt sink, only failures, or none. The report gives the sink's lag.
    #[arg(long, value_enum, default_value = "all")]
    pub attempt_log: AttemptLog,
    /// Events per second for the latency phase (by scenario: steady 1,000, noisy-neighbour
    /// 500, outage-recovery 100, crash 500, fleet 250, chaos 200, else 2,000).
    #[arg(long)]
    pub rate: Option<usize>,
    /// relay: seconds of the latency phase; max: seconds of each rate step.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Endpoints subscribed to every event (fan-out) in steady, max, outage-recovery and crash
    /// (1); fanout runs only this fan-out when given (else 10, then 50).
    #[arg(long)]
    pub endpoints: Option<usize>,
    /// The dispatcher's `max_in_flight_events` (events in flight; deliveries are this × fan-out;
    /// 2,000; autoscale: 50).
    #[arg(long)]
    pub max_in_flight_events: Option<usize>,
    /// Relay instances for the throughput phase (runs 1..=N).
    #[arg(long, default_value_t = 2)]
    pub relays: usize,
    /// relay: which overload of `hookstream.enqueue` writes the throughput phase's backlog, the
    /// jsonb one (the value is reprinted as jsonb prints it) or the text one (the bytes as
    /// written). The latency phase always uses the jsonb one.
    #[arg(long, value_enum, default_value_t)]
    pub payload_form: PayloadForm,
    /// relay and the delivery scenarios: pad payloads to about this many bytes (0: the
    /// ~150-byte payload), to measure what sealing costs at a size (the delivery scenarios pad
    /// with line items, whatever `--pad`).
    #[arg(long, default_value_t = 0)]
    pub payload_bytes: usize,
    /// relay: what the padding is (`items`: line items like a real order's; `repeat`: one run
    /// of `x`, which compression makes vanish).
    #[arg(long, value_enum, default_value = "items")]
    pub pad: Pad,
    /// relay and the delivery scenarios: whether the relays seal payloads
    /// (`relay.seal_payloads`; `false` only to measure what sealing costs).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub seal_payloads: bool,
    /// relay: whether `hookstream.enqueue` keeps the message store's copy
    /// (`hookstream.settings.store_messages`), which the relay then seals too.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub store_messages: bool,
    #[arg(long, default_value = "loadtest/out")]
    pub out: PathBuf,
    /// api: concurrent client connections.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Seconds to wait for the pipeline to drain after the last event was committed.
    #[arg(long, default_value_t = 180)]
    pub deadline_s: u64,
    /// fanout: every endpoint carries a payload filter (two conditions) that every payload
    /// passes, so the run measures what matching costs against the same run without.
    #[arg(long)]
    pub payload_filter: bool,
    /// outage-recovery: how long the endpoint is down.
    #[arg(long, default_value_t = 60)]
    pub outage_s: u64,
    /// outage-recovery: the recovering endpoint's rate limit (requests/s).
    #[arg(long, default_value_t = 200)]
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
    /// chaos: SIGKILLs of each service kind (relay, events role, retry role, DLQ sink),
    /// interleaved (chaos: 100; broker-kill: 0).
    #[arg(long)]
    pub kills_per_service: Option<usize>,
    /// chaos: seconds between the interleaved kills, drawn from MIN..=MAX.
    #[arg(long, value_parser = parse_range, default_value = "1..3")]
    pub fault_every_s: (f64, f64),
    /// chaos: events-role hand-overs measured alone: this many SIGKILLs, and as many rolling
    /// restarts (a new instance joins, then the old one gets SIGTERM) (chaos: 5; broker-kill: 0).
    #[arg(long)]
    pub handovers: Option<usize>,
    /// chaos: SIGKILL-and-restarts of the whole Kafka stack (chaos: 5; broker-kill: 0).
    #[arg(long)]
    pub broker_restarts: Option<usize>,
    /// chaos, broker-kill: SIGKILLs (and restarts) of the broker leading most of the events
    /// topic's partitions; needs a cluster (chaos: 0; broker-kill: 3).
    #[arg(long)]
    pub broker_leader_kills: Option<usize>,
    /// chaos, broker-kill: rolling restarts of every broker, one at a time (chaos: 0;
    /// broker-kill: 1).
    #[arg(long)]
    pub broker_rolling_restarts: Option<usize>,
    /// chaos: restarts of PostgreSQL, alternating `stop -m fast` and `stop -m immediate`
    /// (chaos: 5; broker-kill: 0).
    #[arg(long)]
    pub pg_restarts: Option<usize>,
    /// chaos: seconds PostgreSQL stays down in the database outage (0: none) (chaos: 30;
    /// broker-kill: 0).
    #[arg(long)]
    pub db_outage_s: Option<u64>,
    /// autoscale: how long the receivers take to answer (ms).
    #[arg(long, default_value_t = 100)]
    pub receiver_delay_ms: u64,
    /// autoscale: seconds without load before the step.
    #[arg(long, default_value_t = 30)]
    pub idle_s: u64,
    /// autoscale: seconds of the step (three times one dispatcher's capacity, or `--rate`).
    #[arg(long, default_value_t = 120)]
    pub step_s: u64,
    /// autoscale: the chart's time constants (polling interval, policy periods, stabilization
    /// windows, cooldown) are divided by this to keep the run short.
    #[arg(long, default_value_t = 5.0)]
    pub time_scale: f64,
    /// autoscale: KEDA's `lagThreshold` (messages); by default the chart's rule, one
    /// dispatcher's capacity × 2 s, with the capacity measured at the start of the run.
    #[arg(long)]
    pub lag_threshold: Option<i64>,
}

impl RunArgs {
    /// The faults a chaos or broker-kill run plans: the flags given, else the scenario's
    /// defaults (chaos strikes everything but the cluster faults; broker-kill only those).
    pub fn fault_counts(&self) -> crate::faults::Counts {
        let cluster = matches!(self.scenario, Scenario::BrokerKill);
        let or = |given: Option<usize>, chaos: usize, broker_kill: usize| {
            given.unwrap_or(if cluster { broker_kill } else { chaos })
        };
        crate::faults::Counts {
            kills_per_service: or(self.kills_per_service, 100, 0),
            handovers: or(self.handovers, 5, 0),
            broker_restarts: or(self.broker_restarts, 5, 0),
            broker_leader_kills: or(self.broker_leader_kills, 0, 3),
            broker_rolling_restarts: or(self.broker_rolling_restarts, 0, 1),
            pg_restarts: or(self.pg_restarts, 5, 0),
            db_outage_s: self.db_outage_s.unwrap_or(if cluster { 0 } else { 30 }),
        }
    }

    /// `--max-in-flight-events`, or the scenario's default.
    pub fn max_in_flight_events(&self) -> usize {
        self.max_in_flight_events.unwrap_or(match self.scenario {
            Scenario::Autoscale => 50,
            _ => 2_000,
        })
    }

    /// `--rate`, or the scenario's default.
    /// Endpoints per event (1 unless `--endpoints` says).
    pub fn endpoints(&self) -> usize {
        self.endpoints.unwrap_or(1).max(1)
    }

    pub fn rate(&self) -> usize {
        self.rate.unwrap_or(match self.scenario {
            Scenario::Steady => 1_000,
            Scenario::NoisyNeighbour => 500,
            Scenario::OutageRecovery => 100,
            Scenario::Crash => 500,
            Scenario::Fleet => 250,
            Scenario::Chaos | Scenario::BrokerKill => 200,
            _ => 2_000,
        })
    }

    /// Events of the throughput phase: `--events`, or the scenario's published run.
    pub fn events(&self) -> usize {
        self.events.unwrap_or(match self.scenario {
            Scenario::Relay => 200_000,
            Scenario::Steady | Scenario::Crash => 20_000,
            Scenario::Max => 50_000,
            Scenario::NoisyNeighbour => 10_000,
            // 70 s of production at 100/s: the endpoint is down for the first 60 s, then
            // takes the ~6,000 held back at its 200/s limit, within the deadline.
            Scenario::OutageRecovery => 7_000,
            _ => 5_000,
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> RunArgs {
        let argv = ["loadtest", "run"].iter().chain(args).copied();
        match Cli::parse_from(argv).command {
            Command::Run(a) => *a,
            Command::Remerge { .. } => unreachable!("parsed a run"),
        }
    }

    #[test]
    fn outage_recovery_by_default_can_drain_before_its_deadline() {
        // The recovering endpoint gets everything held back during the outage at its rate
        // limit: production, then the backlog at the limit, must end before the deadline.
        let a = run(&["outage-recovery"]);
        let (events, rate) = (a.events() as f64, a.rate() as f64);
        let produced_s = events / rate;
        let held_back = (a.outage_s as f64).min(produced_s) * rate;
        let drain_s = held_back / f64::from(a.outage_rate_limit);
        let done_after_last_commit = (a.outage_s as f64 + drain_s - produced_s).max(0.0);
        assert!(
            done_after_last_commit < a.deadline_s as f64 / 2.0,
            "{events} events at {rate}/s, {}/s after {} s down: done {done_after_last_commit} s after the last commit, deadline {} s",
            a.outage_rate_limit,
            a.outage_s,
            a.deadline_s
        );
    }

    #[test]
    fn explicit_flags_win_over_the_scenario_defaults() {
        let a = run(&["steady"]);
        assert_eq!((a.events(), a.rate()), (20_000, 1_000));
        let a = run(&["steady", "--events", "10", "--rate", "5"]);
        assert_eq!((a.events(), a.rate()), (10, 5));
    }

    #[test]
    fn broker_kill_plans_only_the_cluster_faults_and_chaos_none_of_them() {
        let c = run(&["broker-kill"]).fault_counts();
        assert_eq!((c.broker_leader_kills, c.broker_rolling_restarts), (3, 1));
        assert_eq!(
            (
                c.kills_per_service,
                c.handovers,
                c.broker_restarts,
                c.pg_restarts,
                c.db_outage_s
            ),
            (0, 0, 0, 0, 0)
        );
        let c = run(&["chaos"]).fault_counts();
        assert_eq!((c.broker_leader_kills, c.broker_rolling_restarts), (0, 0));
        assert_eq!((c.kills_per_service, c.db_outage_s), (100, 30));
        let c = run(&["broker-kill", "--broker-leader-kills", "1", "--pg-restarts", "2"]).fault_counts();
        assert_eq!((c.broker_leader_kills, c.pg_restarts), (1, 2));
    }
}
