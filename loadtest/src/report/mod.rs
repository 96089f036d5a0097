//! The report contract: what `report.json` holds, as types. The scenarios build these, the
//! verdict and the medians read them, and a report read back (`remerge`, and every run
//! after writing its report) is parsed into them, so a report missing a field is an error
//! that names the field, never a silent default.
//!
//! The rule for reading: every key the harness writes is required. A nullable field
//! (`Option`) must still be present, as `null` ([`present`]); only the keys that are written
//! only sometimes (`baseline`, a phase's `figures`, `median_of_runs`, `runs`) may be absent.
//! The JSON is written with its keys sorted ([`to_json`]), as it always was.

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
mod autoscale;
mod chaos;
mod headline;
mod relay;
mod scenario;

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

pub use autoscale::{
    AutoscaleFigures, AutoscaleMeasures, AutoscalePhase, AutoscaleSection, Calibration, KedaSettings,
    PollRecord, ScaleEvent, ScalingRules, SecondPoint,
};
pub use chaos::{
    ChaosFigures, ChaosLost, ChaosSection, Crash, DrainFigures, FaultRecord, HandoverFigures, KindFigures,
    Measures, ProducerFigures, Spread,
};
pub use headline::HeadlineFigure;
pub use relay::{BucketQuantiles, Drain, RelayLatency, RelayReport, RelayUsage};
pub use scenario::{
    AfterRecovery, AttemptLogFigures, BaselineFigures, ClassFigures, Contract, CrashFigures, CrashSection,
    EarlyRetry, FanoutSection, HealthyPhase, Kill, KillsPhase, LadderStep, MaxFigures, MaxSection, NoFigures,
    NoisyFigures, NoisySection, OutageFigures, OutageSection, PhaseExtra, PhaseFigures, QuietRun, Ratios,
    RecoveryPhase, ScenarioReport, SteadyFigures, SteadySection,
};

/// `report.json`: one run's report, or the medians of several runs with the runs kept; and
/// the verdict over every run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The scenario's headline figure (of `figures`), named: what the scenario measures.
    /// Absent from reports written before it (`remerge` adds it).
    #[serde(default)]
    pub headline: HeadlineFigure,
    /// The run's figures, or the medians of the runs' figures, field by field.
    #[serde(flatten)]
    pub figures: RunReport,
    /// How many runs `figures` is the median of (absent for a single run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_of_runs: Option<usize>,
    /// The runs themselves (absent for a single run): a median could hide one run's loss, so
    /// the verdict and `remerge` read these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunReport>,
    /// Settings given to the services through `LOADTEST_SET_…` (absent when none): a report
    /// made with them is not one of the defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings_overridden: Vec<(String, String)>,
    pub verdict: Verdict,
}

/// One run of a scenario, tagged by its `scenario` key: each scenario's own figures are
/// required for that scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "scenario")]
pub enum RunReport {
    #[serde(rename = "relay")]
    Relay(RelayReport),
    #[serde(rename = "steady")]
    Steady(ScenarioReport<SteadySection>),
    #[serde(rename = "max")]
    Max(ScenarioReport<MaxSection>),
    #[serde(rename = "fanout")]
    Fanout(ScenarioReport<FanoutSection>),
    #[serde(rename = "fleet")]
    Fleet(ScenarioReport<NoFigures>),
    #[serde(rename = "noisy-neighbour")]
    NoisyNeighbour(ScenarioReport<NoisySection>),
    #[serde(rename = "outage-recovery")]
    OutageRecovery(ScenarioReport<OutageSection>),
    #[serde(rename = "crash")]
    Crash(ScenarioReport<CrashSection>),
    #[serde(rename = "chaos")]
    Chaos(ScenarioReport<ChaosSection>),
    /// The chaos run's report, from a cluster's broker faults.
    #[serde(rename = "broker-kill")]
    BrokerKill(ScenarioReport<ChaosSection>),
    #[serde(rename = "autoscale")]
    Autoscale(ScenarioReport<AutoscaleSection>),
}

/// `$engine` with `$r` bound to the `ScenarioReport` of whichever engine scenario `$report`
/// is, or `$relay` with `$rr` bound to the relay's report.
macro_rules! by_kind {
    ($report:expr, $r:ident => $engine:expr, $rr:ident => $relay:expr) => {
        match $report {
            RunReport::Relay($rr) => $relay,
            RunReport::Steady($r) => $engine,
            RunReport::Max($r) => $engine,
            RunReport::Fanout($r) => $engine,
            RunReport::Fleet($r) => $engine,
            RunReport::NoisyNeighbour($r) => $engine,
            RunReport::OutageRecovery($r) => $engine,
            RunReport::Crash($r) => $engine,
            RunReport::Chaos($r) => $engine,
            RunReport::BrokerKill($r) => $engine,
            RunReport::Autoscale($r) => $engine,
        }
    };
}

impl RunReport {
    /// The scenario's name, as the command line and the `scenario` key spell it.
    pub fn scenario(&self) -> &'static str {
        match self {
            Self::Relay(_) => "relay",
            Self::Steady(_) => "steady",
            Self::Max(_) => "max",
            Self::Fanout(_) => "fanout",
            Self::Fleet(_) => "fleet",
            Self::NoisyNeighbour(_) => "noisy-neighbour",
            Self::OutageRecovery(_) => "outage-recovery",
            Self::Crash(_) => "crash",
            Self::Chaos(_) => "chaos",
            Self::BrokerKill(_) => "broker-kill",
            Self::Autoscale(_) => "autoscale",
        }
    }

    /// The common contract of an engine scenario (`None` for the relay, which has its own).
    pub fn contract(&self) -> Option<&Contract> {
        by_kind!(self, r => Some(&r.contract), _relay => None)
    }

    /// The baseline's figures, by variant (`polling_500ms`, `polling_tuned`), with `--baseline`.
    pub fn baseline(&self) -> Option<&BTreeMap<String, BaselineFigures>> {
        by_kind!(self, r => r.baseline.as_ref(), _relay => None)
    }

    /// The figures the page's summary table shows.
    pub fn headline(&self) -> Headline<'_> {
        by_kind!(self, r => r.contract.headline(), relay => relay.headline())
    }
}

/// A row of the page's summary table (Hookstream's, or a baseline's).
#[derive(Debug, Clone, Copy)]
pub struct Headline<'a> {
    pub delivered: usize,
    pub expected_deliveries: usize,
    pub lost: usize,
    pub duplicates: usize,
    /// `None` where the scenario has no retries (the relay).
    pub early_retries: Option<usize>,
    /// `None` where the scenario has no signatures (the relay).
    pub invalid_signatures: Option<usize>,
    pub throughput_per_s: f64,
    pub latency_ms: &'a Latency,
}

/// Whether the runs passed: an invalid signature, an early retry, a loss or a recovering
/// endpoint sent past its rate limit, in any run, fails them (`verdict.rs` decides).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub passed: bool,
    /// What failed, one line each (prefixed `run N:` when there are several runs).
    pub failures: Vec<String>,
}

/// Latency percentiles in milliseconds (nearest rank).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latency {
    /// Percentiles (nearest rank) of samples in milliseconds; all 0 without samples.
    pub fn of(mut samples: Vec<f64>) -> Self {
        samples.sort_by(f64::total_cmp);
        let Some(&max) = samples.last() else {
            return Self::default();
        };
        let at = |q: f64| samples[((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1];
        Self {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max,
        }
    }
}

/// CPU and peak memory of a service over all its incarnations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub cpu_s: f64,
    pub max_rss_mb: f64,
    /// Restarts after a SIGKILL (`crash`).
    pub restarts: usize,
}

/// The machine a report was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gb: f64,
    pub kernel: String,
}

impl Machine {
    /// This machine, from /proc (empty or 0 where /proc does not say).
    pub fn read() -> Self {
        let mem_kb: f64 = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .next()
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0.0);
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default();
        Self {
            cpu,
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            memory_gb: (mem_kb / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
        }
    }
}

/// A nullable field that must be present: `null` reads as `None`, a missing key is an error
/// naming the field. (Serde reads a missing `Option` field as `None` unless the field has a
/// `deserialize_with`.)
pub fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::deserialize(d)
}

/// A report that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The JSON is not a report of this contract (a field missing, or of the wrong type); the
    /// message names the field.
    #[error("not a complete report")]
    Parse(#[source] serde_json::Error),
    /// A report that could not be turned into JSON.
    #[error("could not write the report as JSON")]
    Write(#[source] serde_json::Error),
}

/// `report.json` as a run or `remerge` wrote it.
pub fn parse(json: &str) -> Result<Report, ReportError> {
    serde_json::from_str(json).map_err(ReportError::Parse)
}

/// The runs a report keeps (its `runs`), which `remerge` merges again; nothing else of the
/// report is read.
pub fn parse_runs(json: &str) -> Result<Vec<RunReport>, ReportError> {
    #[derive(Deserialize)]
    struct Runs {
        runs: Vec<RunReport>,
    }
    serde_json::from_str::<Runs>(json)
        .map(|r| r.runs)
        .map_err(ReportError::Parse)
}

/// Pretty JSON with every object's keys sorted (how `report.json` has always been written).
pub fn to_json<T: Serialize>(report: &T) -> Result<String, ReportError> {
    let sorted = serde_json::to_value(report).map_err(ReportError::Write)?;
    serde_json::to_string_pretty(&sorted).map_err(ReportError::Write)
}

/// Reports to test with: one valid report of each kind, and JSON surgery.
#[cfg(test)]
pub mod fixtures {
    use std::collections::BTreeMap;

    use super::*;

    pub fn latency() -> Latency {
        Latency {
            p50: 5.0,
            p90: 6.0,
            p99: 9.0,
            max: 12.0,
        }
    }

    pub fn machine() -> Machine {
        Machine {
            cpu: "test".into(),
            cores: 2,
            memory_gb: 1.0,
            kernel: "test".into(),
        }
    }

    /// A clean engine contract: 10 events, all delivered.
    pub fn contract() -> Contract {
        Contract {
            events: 10,
            expected_deliveries: 10,
            delivered: 10,
            lost: 0,
            not_delivered: 0,
            held_at_deadline: None,
            duplicates: 0,
            early_retries: 0,
            invalid_signatures: 0,
            requests: 10,
            drained: true,
            duration_s: 1.0,
            throughput_per_s: 10.0,
            latency_ms: latency(),
            duration_measures: "d".into(),
            wall_s: 1.5,
            latency_measures: "l".into(),
            per_class: BTreeMap::new(),
            processes: BTreeMap::from([("dispatcher".to_string(), Usage::default())]),
            attempt_log: None,
        }
    }

    pub fn steady() -> RunReport {
        RunReport::Steady(ScenarioReport {
            contract: contract(),
            figures: SteadySection {
                steady: SteadyFigures {
                    rate_per_s: 10,
                    endpoints: 1,
                },
            },
            baseline: None,
            machine: machine(),
        })
    }

    pub fn after_recovery(max_rate: f64, allowed: f64) -> AfterRecovery {
        AfterRecovery {
            requests: 10,
            requests_per_s: vec![5, 5],
            first_request_after_s: Some(1.0),
            max_requests_in_1s: 5,
            max_rate_over_5s_per_s: max_rate,
            allowed_rate_over_5s_per_s: allowed,
            within_rate_limit: max_rate <= allowed,
            drain_s: 2.0,
        }
    }

    pub fn outage(max_rate: f64) -> RunReport {
        RunReport::OutageRecovery(ScenarioReport {
            contract: contract(),
            figures: OutageSection {
                outage_recovery: OutageFigures {
                    outage_s: 5,
                    rate_limit_per_s: 200,
                    after_recovery: Some(after_recovery(max_rate, 240.0)),
                },
            },
            baseline: None,
            machine: machine(),
        })
    }

    pub fn drain(relays: usize, lost: usize) -> Drain {
        Drain {
            relays,
            events: 100,
            in_kafka: 100 - lost,
            duplicates: 0,
            lost,
            duration_s: 1.0,
            throughput_per_s: 100.0,
            enqueue_per_s: Some(1000.0),
            cpu_s: vec![0.1; relays],
            max_rss_mb: vec![20.0; relays],
        }
    }

    pub fn relay(drain_lost: [usize; 2]) -> RunReport {
        RunReport::Relay(RelayReport {
            events: 10,
            expected_deliveries: 10,
            delivered: 10,
            lost: 0,
            duplicates: 0,
            early_retries: None,
            invalid_signatures: None,
            duration_s: 1.0,
            throughput_per_s: 10.0,
            latency_ms: latency(),
            latency_measures: "l".into(),
            delivered_measures: "d".into(),
            per_class: BTreeMap::new(),
            processes: BTreeMap::from([(
                "relay".to_string(),
                RelayUsage {
                    cpu_s: Some(0.1),
                    max_rss_mb: None,
                },
            )]),
            machine: machine(),
            payload_form: crate::cli::PayloadForm::Jsonb,
            payload_bytes: 0,
            pad: crate::cli::Pad::Repeat,
            sealed: true,
            store_messages: true,
            throughput: vec![drain(1, drain_lost[0]), drain(2, drain_lost[1])],
            latency: RelayLatency {
                rate_per_s: 10,
                achieved_rate_per_s: 10.0,
                events: 10,
                received: 10,
                distinct: 10,
                duplicates: 0,
                lost: 0,
                duration_s: 1.0,
                latency_ms: latency(),
                latency_measures: "l".into(),
                relay_commit_to_ack_ms: Some(BucketQuantiles {
                    p50_le_ms: Some(5.0),
                    p90_le_ms: Some(7.5),
                    p99_le_ms: None,
                    count: 10,
                }),
                relay_batch_duration_ms: None,
                cpu_s: Some(0.1),
                max_rss_mb: None,
            },
        })
    }

    pub fn spread(ms: f64) -> Spread {
        Spread {
            p50: Some(ms),
            max: Some(ms),
            faults: 1,
        }
    }

    /// A clean chaos run: one relay kill within its ceiling, hand-overs within their limits.
    pub fn chaos() -> RunReport {
        let kind = KindFigures {
            faults: 1,
            lost: 0,
            duplicates: 4,
            duplicate_ceiling: 40,
            duplicates_max_per_fault: 4,
            duplicates_in_window: 4,
            reshipped_events: 1,
            reshipped_ceiling: 1000,
            resume_ms: spread(900.0),
            resume_measures: "m".into(),
            first_delivery_ms: spread(900.0),
            retry_late_ms: Spread::default(),
            dead_letter_stored_ms: spread(20.0),
            commits_blocked_ms: spread(5.0),
        };
        RunReport::Chaos(ScenarioReport {
            contract: contract(),
            figures: ChaosSection {
                chaos: Box::new(ChaosFigures {
                    seed: 1,
                    rate_per_s: 200,
                    topology: BTreeMap::from([("relay".to_string(), 2)]),
                    fault_every_min_s: 1.0,
                    fault_every_max_s: 3.0,
                    db_outage_s: 30,
                    producer: ProducerFigures {
                        committed: 10,
                        not_committed: 0,
                        in_doubt: 0,
                    },
                    lost: ChaosLost {
                        events_not_shipped: 0,
                        deliveries: 0,
                        rejections_not_dead_lettered: 0,
                        dead_letters_not_stored: 0,
                        dead_letters_stored_twice: 0,
                    },
                    per_kind: BTreeMap::from([("relay_kill".to_string(), kind)]),
                    unattributed_duplicates: 0,
                    retries_exhausted: 0,
                    drain: DrainFigures {
                        deliveries_s: Some(30.0),
                        deliveries_deadline_s: 180,
                        dead_letters_s: Some(40.0),
                        dead_letters_backlog: 100,
                        held_at_deadline: None,
                        deliveries_not_yet: 0,
                    },
                    unattributed_examples: Vec::new(),
                    crashes: Vec::new(),
                    events_role: HandoverFigures {
                        sigkill_resume_max_ms: Some(6100.0),
                        sigkill_limit_ms: 7000.0,
                        interleaved_sigkill_resume_max_ms: Some(6500.0),
                        sigterm_handover_max_ms: Some(400.0),
                        sigterm_limit_ms: 1000.0,
                        unclean_exits: 0,
                    },
                    measures: Measures {
                        duplicates: "d".into(),
                        ceilings: "c".into(),
                        resume: "r".into(),
                        lost: "l".into(),
                    },
                    faults: vec![FaultRecord {
                        kind: "relay_kill".into(),
                        at_s: 10.0,
                        target: Some("relay-0".into()),
                        took_ms: 12.0,
                        resume_ms: Some(900.0),
                        duplicates: 4,
                        duplicate_ceiling: 40,
                        reshipped_events: 1,
                    }],
                }),
                stall_s: None,
                early: None,
            },
            baseline: None,
            machine: machine(),
        })
    }

    pub fn autoscale_phase(label: &str, lag_recovered_s: Option<f64>) -> AutoscalePhase {
        AutoscalePhase {
            label: label.into(),
            events: 10,
            delivered: 10,
            lost: 0,
            duplicates: 3,
            duplicates_after_scaling: 3,
            unattributed_duplicates: 0,
            replicas_max: 3,
            scale_out_s: Some(4.0),
            members_out_s: Some(8.0),
            lag_recovered_s,
            drained_s: Some(100.0),
            max_lag_messages: 5_000,
            max_lag_s: 10.0,
            scaled_in_s: Some(200.0),
            failed_polls: 0,
            unclean_exits: 0,
            cpu_busy_max_pct: Some(80.0),
            cpu_busy_mean_pct: Some(50.0),
            dispatcher_cpu_s: 12.0,
            wall_s: 300.0,
            scale_events: vec![ScaleEvent {
                at_s: 33.0,
                from: 1,
                to: 3,
                lag: 2_500,
                duplicates: 3,
            }],
            polls: vec![PollRecord {
                t_s: 33.0,
                total_lag: 2_500,
                metric: 2_500,
                active: true,
                desired: 3,
                replicas: 3,
            }],
            series: vec![SecondPoint {
                t_s: 1.0,
                replicas: 1,
                members: Some(1),
                lag_messages: Some(0),
                lag_s: 0.0,
                committed_per_s: 0.0,
                delivered_per_s: 0.0,
                cpu_busy_pct: None,
            }],
        }
    }

    /// A clean autoscale run: autoscaled recovers in `auto` s, the fixed one in `fixed` s.
    pub fn autoscale(auto: Option<f64>, fixed: Option<f64>) -> RunReport {
        let settings = KedaSettings {
            min_replicas: 1,
            max_replicas: 6,
            lag_threshold: 1_000,
            activation_lag_threshold: 0,
            polling_interval_s: 3.0,
            cooldown_period_s: 60.0,
            scale_up: ScalingRules {
                stabilization_window_s: 0.0,
                policies: vec!["Pods 2 per 12 s".into()],
                select_policy: "Max".into(),
            },
            scale_down: ScalingRules {
                stabilization_window_s: 120.0,
                policies: vec!["Pods 1 per 60 s".into()],
                select_policy: "Min".into(),
            },
        };
        RunReport::Autoscale(ScenarioReport {
            contract: contract(),
            figures: AutoscaleSection {
                autoscale: Box::new(AutoscaleFigures {
                    calibration: Calibration {
                        max_in_flight_events: 50,
                        receiver_delay_ms: 100,
                        events: 10_000,
                        capacity_per_s: 480.0,
                        little_law_per_s: 500.0,
                        dispatcher_cores: 0.1,
                        machine_busy_pct: Some(30.0),
                    },
                    rate_per_s: 1_440,
                    idle_s: 30,
                    step_s: 120,
                    needed_replicas: 3,
                    partitions: 6,
                    chart: settings.clone(),
                    emulated: settings,
                    time_scale: 5.0,
                    autoscaled: autoscale_phase("autoscaled", auto),
                    fixed: autoscale_phase("fixed", fixed),
                    measures: AutoscaleMeasures {
                        lag_messages: "l".into(),
                        lag_s: "s".into(),
                        scale_out: "o".into(),
                        lag_recovered: "r".into(),
                        duplicates: "d".into(),
                        attribution_window_s: 30.0,
                    },
                }),
            },
            baseline: None,
            machine: machine(),
        })
    }

    /// `report` as JSON with the key at `path` removed (objects only).
    pub fn without(report: &impl Serialize, path: &[&str]) -> String {
        let mut v = serde_json::to_value(report).expect("a fixture serialises");
        let (last, parents) = path.split_last().expect("a path");
        let mut at = &mut v;
        for k in parents {
            at = at.get_mut(*k).expect("the path exists");
        }
        let removed = at.as_object_mut().and_then(|o| o.remove(*last));
        assert!(removed.is_some(), "{path:?} was in the report");
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let l = Latency::of((1..=100).map(f64::from).collect());
        assert_eq!((l.p50, l.p90, l.p99, l.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(Latency::of(vec![]).max, 0.0);
    }

    #[test]
    fn every_kind_of_report_reads_back_as_written() {
        for run in [
            steady(),
            outage(100.0),
            relay([0, 0]),
            chaos(),
            autoscale(Some(100.0), Some(300.0)),
        ] {
            let json = to_json(&run).expect("serialises");
            let back: RunReport = serde_json::from_str(&json).expect("reads back");
            assert_eq!(to_json(&back).expect("serialises"), json);
        }
        let report = Report {
            headline: steady().headline_figure(),
            figures: steady(),
            median_of_runs: Some(2),
            settings_overridden: Vec::new(),
            runs: vec![steady(), steady()],
            verdict: Verdict {
                passed: true,
                failures: vec![],
            },
        };
        let json = to_json(&report).expect("serialises");
        let back = parse(&json).expect("reads back");
        assert_eq!(back.runs.len(), 2);
        assert_eq!(back.figures.scenario(), "steady");
        assert_eq!(parse_runs(&json).expect("runs").len(), 2);
    }

    #[test]
    fn keys_are_written_sorted_and_flat() {
        let json = to_json(&steady()).expect("serialises");
        let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        assert_eq!(v["scenario"], "steady");
        assert_eq!(v["steady"]["rate_per_s"], 10);
        assert_eq!(v["lost"], 0);
        let keys: Vec<&str> = json
            .lines()
            .filter(|l| l.starts_with("  \"")) // top-level keys only
            .filter_map(|l| l.trim().split('"').nth(1))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(keys, sorted);
        assert!(
            !json.contains("\"baseline\""),
            "no baseline key without --baseline"
        );
    }

    #[test]
    fn a_missing_key_is_an_error_naming_it_even_where_null_is_allowed() {
        let err = |json: String| match serde_json::from_str::<RunReport>(&json) {
            Ok(_) => panic!("parsed without the key: {json}"),
            Err(e) => e.to_string(),
        };
        // Nullable for the relay (it has no signatures), but the key must be there.
        let e = err(without(&relay([0, 0]), &["invalid_signatures"]));
        assert!(e.contains("missing field `invalid_signatures`"), "{e}");
        let e = err(without(&steady(), &["steady"]));
        assert!(e.contains("missing field `steady`"), "{e}");
        let e = err(without(&steady(), &["scenario"]));
        assert!(e.contains("scenario"), "{e}");
        let e = err(without(&outage(1.0), &["outage_recovery", "after_recovery"]));
        assert!(e.contains("missing field `after_recovery`"), "{e}");
    }
}
