//! The reports of the engine scenarios: the common contract every one has, each scenario's
//! own figures under its own key, and the baseline's figures beside them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{present, Headline, Latency, Machine, Usage};

/// An engine scenario's report: the common contract, the scenario's figures `F` (a struct
/// with one field, named as the scenario's key), the baseline with `--baseline`, the machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioReport<F> {
    #[serde(flatten)]
    pub contract: Contract,
    #[serde(flatten)]
    pub figures: F,
    /// By variant (`polling_500ms`, `polling_tuned`); only compared, never judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BTreeMap<String, BaselineFigures>>,
    pub machine: Machine,
}

/// The common contract: what the receivers saw, over the phases the figures cover.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Contract {
    pub events: usize,
    /// Events × endpoints of the classes that must receive every event.
    pub expected_deliveries: usize,
    /// Distinct (endpoint, event) pairs answered 2xx.
    pub delivered: usize,
    /// Expected deliveries never answered 2xx, with nothing left in the pipeline that could
    /// still deliver them. The verdict reads it.
    pub lost: usize,
    /// Expected deliveries missing when a phase hit its deadline with records still in the
    /// pipeline (`held_at_deadline`): not yet delivered, perhaps not lost. The verdict reads it.
    #[serde(default)]
    pub not_delivered: usize,
    /// Records the pipeline still held at the deadlines of the phases that did not drain
    /// (outbox rows, events and retry-tier records not consumed); absent when all drained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_at_deadline: Option<i64>,
    /// 2xx answers beyond the first for the same (endpoint, event).
    pub duplicates: usize,
    /// Retries that reached a receiver before the schedule (or Retry-After) allowed. The
    /// verdict reads it.
    pub early_retries: usize,
    /// Requests whose signature did not verify. The verdict reads it.
    pub invalid_signatures: usize,
    /// Every request received, including failed answers and retries.
    pub requests: usize,
    /// Whether every phase delivered everything before its deadline.
    pub drained: bool,
    pub duration_s: f64,
    /// Delivered ÷ `duration_s`.
    pub throughput_per_s: f64,
    pub latency_ms: Latency,
    pub duration_measures: String,
    /// From the services' start to the end of each phase, summed.
    pub wall_s: f64,
    pub latency_measures: String,
    /// The same counts per receiver class (`PHASE/CLASS` when there are several phases).
    pub per_class: BTreeMap<String, ClassFigures>,
    /// Per service (or the baseline's poller process).
    pub processes: BTreeMap<String, Usage>,
    /// What the attempt log cost and how the attempt sink kept up (Hookstream's runs;
    /// absent from reports older than the figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_log: Option<AttemptLogFigures>,
}

/// The attempt log of a run: which attempts were produced (`attempts.log`), and the attempt
/// sink's lag behind them, sampled every second from outside its group.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptLogFigures {
    /// `all`, `failures` or `off`.
    pub mode: String,
    /// Kafka records of the attempts topic not yet stored, at the worst (one per attempt; a
    /// batching producer would make it count batches).
    pub sink_max_lag_messages: i64,
    /// Age of the oldest attempt record the sink had not stored, at its worst.
    pub sink_max_lag_s: f64,
    /// Rows in `hookstream.attempts` at the end of the run.
    pub stored: i64,
}

impl Contract {
    pub fn headline(&self) -> Headline<'_> {
        Headline {
            delivered: self.delivered,
            expected_deliveries: self.expected_deliveries,
            lost: self.lost,
            duplicates: self.duplicates,
            early_retries: Some(self.early_retries),
            invalid_signatures: Some(self.invalid_signatures),
            throughput_per_s: self.throughput_per_s,
            latency_ms: &self.latency_ms,
        }
    }
}

/// The contract's counts for one class of receivers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClassFigures {
    /// What its receivers do (`Ok`, `Flaky(20)`, `connection refused`, …).
    pub behaviour: String,
    /// Whether every event must reach these endpoints (only then is a miss `lost`).
    pub expects_delivery: bool,
    pub endpoints: usize,
    pub events: usize,
    pub expected_deliveries: usize,
    pub delivered: usize,
    pub lost: usize,
    /// Missing at a deadline with records still in the pipeline (see `Contract`).
    #[serde(default)]
    pub not_delivered: usize,
    pub duplicates: usize,
    pub early_retries: usize,
    /// The first few early retries, to look into.
    pub early_retry_examples: Vec<EarlyRetry>,
    pub invalid_signatures: usize,
    pub requests: usize,
    pub latency_ms: Latency,
    /// The endpoints' configured rate limit, if any.
    #[serde(deserialize_with = "present")]
    pub rate_limit_per_s: Option<i32>,
}

/// A retry that came sooner after the previous attempt than it was allowed to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EarlyRetry {
    pub webhook_id: String,
    pub attempt: u32,
    pub previous_status: u16,
    pub gap_ms: f64,
    pub min_gap_ms: f64,
}

/// `fleet` has no figures of its own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NoFigures {}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SteadySection {
    pub steady: SteadyFigures,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SteadyFigures {
    pub rate_per_s: usize,
    pub endpoints: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MaxSection {
    pub max: MaxFigures,
}

/// The highest sustainable rate: the backlog's drain rate, then the ladder of rate steps
/// (in the order run: the fractions of the drain rate up to the first step not kept up with,
/// then the steps halving the gap below it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MaxFigures {
    pub backlog_events: usize,
    pub endpoints: usize,
    pub drain_rate_events_per_s: f64,
    pub sustainable_rate_events_per_s: f64,
    pub sustainable_rate_deliveries_per_s: f64,
    /// Why the ladder stopped.
    pub limited_by: String,
    pub step_s: u64,
    pub kept_up_means: String,
    pub ladder: Vec<LadderStep>,
}

/// One rate step of `max`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LadderStep {
    pub rate_per_s: usize,
    pub fraction_of_drain_rate: f64,
    pub producer_achieved_per_s: f64,
    /// Whether the producers committed at least 95 % of the step's rate.
    pub producer_kept_rate: bool,
    pub delivered: usize,
    pub expected_deliveries: usize,
    pub kept_up: bool,
    pub latency_ms: Latency,
    pub duplicates: usize,
    pub invalid_signatures: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FanoutSection {
    /// One entry per fan-out (10, then 50).
    pub fanout: Vec<PhaseFigures>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NoisySection {
    pub noisy_neighbour: NoisyFigures,
}

/// The healthy endpoints with and without a black hole beside them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NoisyFigures {
    pub healthy_latency_ms_with_black_hole: Latency,
    pub healthy_latency_ms_without_black_hole: Latency,
    pub p99_ratio_with_over_without: f64,
    pub run_without_black_hole: QuietRun,
}

/// The run of the healthy endpoints alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuietRun {
    pub delivered: usize,
    pub lost: usize,
    pub duration_s: f64,
    pub throughput_per_s: f64,
    pub processes: BTreeMap<String, Usage>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutageSection {
    pub outage_recovery: OutageFigures,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutageFigures {
    pub outage_s: u64,
    pub rate_limit_per_s: i32,
    /// `null` when the endpoint never came back during the run (its events are then `lost`).
    /// The verdict reads it.
    #[serde(deserialize_with = "present")]
    pub after_recovery: Option<AfterRecovery>,
}

/// Requests to the recovering endpoint after it came back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AfterRecovery {
    pub requests: usize,
    /// Requests in each second since it came back.
    pub requests_per_s: Vec<usize>,
    /// `null` when nothing came after it was back.
    #[serde(deserialize_with = "present")]
    pub first_request_after_s: Option<f64>,
    pub max_requests_in_1s: usize,
    /// The verdict reads it (for its message).
    pub max_rate_over_5s_per_s: f64,
    /// The rate limit plus its one-second burst, over 5 s. The verdict reads it.
    pub allowed_rate_over_5s_per_s: f64,
    /// `max_rate_over_5s_per_s <= allowed_rate_over_5s_per_s`. The verdict reads it.
    pub within_rate_limit: bool,
    pub drain_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CrashSection {
    pub crash: CrashFigures,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CrashFigures {
    pub kills: Vec<Kill>,
    /// Restarts per process.
    pub restarts: BTreeMap<String, usize>,
    /// The kill schedule's seed (run i of `--runs` uses seed + i).
    pub seed: u64,
}

/// One SIGKILL of a service.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Kill {
    /// Seconds since measuring started.
    pub at_s: f64,
    pub process: String,
    /// How long it stayed down before the restart.
    pub down_ms: u64,
}

/// One variant of the polled-queue baseline: its contract figures, its phases, and
/// Hookstream ÷ baseline. Only compared, never judged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaselineFigures {
    pub sleep_ms: u64,
    pub pollers: usize,
    pub batch: i64,
    pub deadline_s: u64,
    pub expected_deliveries: usize,
    pub delivered: usize,
    pub lost: usize,
    pub drained: bool,
    pub duplicates: usize,
    pub early_retries: usize,
    pub invalid_signatures: usize,
    pub duration_s: f64,
    pub throughput_per_s: f64,
    pub latency_ms: Latency,
    pub processes: BTreeMap<String, Usage>,
    pub phases: Vec<PhaseFigures>,
    pub hookstream_over_baseline: Ratios,
}

impl BaselineFigures {
    pub fn headline(&self) -> Headline<'_> {
        Headline {
            delivered: self.delivered,
            expected_deliveries: self.expected_deliveries,
            lost: self.lost,
            duplicates: self.duplicates,
            early_retries: Some(self.early_retries),
            invalid_signatures: Some(self.invalid_signatures),
            throughput_per_s: self.throughput_per_s,
            latency_ms: &self.latency_ms,
        }
    }
}

/// Hookstream ÷ baseline; `null` where either is missing or the baseline's is 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ratios {
    #[serde(deserialize_with = "present")]
    pub throughput_per_s: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub latency_p50: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub latency_p99: Option<f64>,
    /// How to read them.
    pub reads: String,
}

/// The contract figures of one phase, with the scenario's own beside them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseFigures {
    pub phase: String,
    pub events: usize,
    pub expected_deliveries: usize,
    pub delivered: usize,
    pub lost: usize,
    pub duplicates: usize,
    pub drained: bool,
    pub duration_s: f64,
    pub throughput_per_s: f64,
    pub latency_ms: Latency,
    pub processes: BTreeMap<String, Usage>,
    /// The scenario's own figures for the phase, where it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub figures: Option<PhaseExtra>,
}

/// A scenario's own figures for one phase (told apart by their keys).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PhaseExtra {
    Healthy(HealthyPhase),
    Recovery(RecoveryPhase),
    Kills(KillsPhase),
}

/// `noisy-neighbour`: the healthy endpoints' latency.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HealthyPhase {
    pub healthy_latency_ms: Latency,
}

/// `outage-recovery`: what reached the endpoint when it came back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecoveryPhase {
    pub after_recovery: AfterRecovery,
}

/// `crash`: the kills and the restarts per process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KillsPhase {
    pub kills: Vec<Kill>,
    pub restarts: BTreeMap<String, usize>,
}
