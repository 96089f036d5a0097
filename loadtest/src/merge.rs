//! Several runs of a scenario merged into one report: the median of every number, field by
//! field (nested figures too), the rest from the first run; the runs are kept beside it and
//! the verdict is taken over each of them.
//!
//! Rules, per type ([`Merge`]): a number is the median (an integer's rounded to the nearest
//! integer when the count of runs is even); text, flags and a variant that differs between
//! runs come from the first run; an optional figure absent in the first run stays absent,
//! otherwise it is merged over the runs that have it; lists of the same length in every run
//! merge entry by entry, lists whose length varies (a ladder that stopped earlier) come from
//! the first run; maps merge the keys every run has, the first run's value otherwise.

use std::collections::BTreeMap;

use crate::report::{
    AfterRecovery, AttemptLogFigures, BaselineFigures, BucketQuantiles, ChaosFigures, ChaosLost,
    ChaosSection, ClassFigures, Contract, Crash, CrashFigures, CrashSection, Drain, DrainFigures, EarlyRetry,
    FanoutSection, FaultRecord, HandoverFigures, HealthyPhase, Kill, KillsPhase, KindFigures, LadderStep,
    Latency, Machine, MaxFigures, MaxSection, Measures, NoFigures, NoisyFigures, NoisySection, OutageFigures,
    OutageSection, PhaseExtra, PhaseFigures, ProducerFigures, QuietRun, Ratios, RecoveryPhase, RelayLatency,
    RelayReport, RelayUsage, Report, RunReport, ScenarioReport, Spread, SteadyFigures, SteadySection, Usage,
};
use crate::report::{
    AutoscaleFigures, AutoscaleMeasures, AutoscalePhase, AutoscaleSection, Calibration, KedaSettings,
    PollRecord, ScaleEvent, ScalingRules, SecondPoint,
};
use crate::verdict;

/// Nothing to merge.
#[derive(Debug, thiserror::Error)]
#[error("no runs to merge")]
pub struct NoRuns;

/// `report.json` for one run: the run itself and its verdict.
pub fn single(run: RunReport) -> Report {
    let verdict = verdict::of(std::slice::from_ref(&run));
    Report {
        headline: run.headline_figure(),
        figures: run,
        median_of_runs: None,
        settings_overridden: crate::engine::setting_overrides(),
        runs: Vec::new(),
        verdict,
    }
}

/// `report.json` for several runs: the medians, the runs, and the verdict over every run.
pub fn medians(runs: Vec<RunReport>) -> Result<Report, NoRuns> {
    if runs.is_empty() {
        return Err(NoRuns);
    }
    let refs: Vec<&RunReport> = runs.iter().collect();
    let figures = RunReport::merge(&refs);
    Ok(Report {
        headline: figures.headline_figure(),
        figures,
        median_of_runs: Some(runs.len()),
        settings_overridden: crate::engine::setting_overrides(),
        verdict: verdict::of(&runs),
        runs,
    })
}

/// A report figure that several runs merge into one. `runs` is never empty.
pub trait Merge: Clone {
    fn merge(runs: &[&Self]) -> Self;
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[m],
        _ => (v[m - 1] + v[m]) / 2.0,
    }
}

impl Merge for f64 {
    fn merge(runs: &[&Self]) -> Self {
        median(runs.iter().map(|v| **v).collect())
    }
}

macro_rules! merge_integers {
    ($($t:ty),*) => {$(
        impl Merge for $t {
            fn merge(runs: &[&Self]) -> Self {
                // Integers of a report are far below 2^53: exact as f64.
                median(runs.iter().map(|v| **v as f64).collect()).round() as $t
            }
        }
    )*};
}
merge_integers!(usize, u64, u32, u16, i64, i32);

/// From the first run.
macro_rules! merge_first {
    ($($t:ty),*) => {$(
        impl Merge for $t {
            fn merge(runs: &[&Self]) -> Self {
                runs[0].clone()
            }
        }
    )*};
}
merge_first!(String, bool, NoFigures, crate::cli::PayloadForm, crate::cli::Pad);

impl<T: Merge> Merge for Option<T> {
    fn merge(runs: &[&Self]) -> Self {
        runs[0].as_ref()?;
        let present: Vec<&T> = runs.iter().filter_map(|r| r.as_ref()).collect();
        Some(T::merge(&present))
    }
}

impl<T: Merge> Merge for Box<T> {
    fn merge(runs: &[&Self]) -> Self {
        Box::new(T::merge(&runs.iter().map(|r| r.as_ref()).collect::<Vec<_>>()))
    }
}

impl<T: Merge> Merge for Vec<T> {
    fn merge(runs: &[&Self]) -> Self {
        let len = runs[0].len();
        if runs.iter().any(|r| r.len() != len) {
            return runs[0].clone();
        }
        (0..len)
            .map(|i| T::merge(&runs.iter().map(|r| &r[i]).collect::<Vec<_>>()))
            .collect()
    }
}

impl<T: Merge> Merge for BTreeMap<String, T> {
    fn merge(runs: &[&Self]) -> Self {
        runs[0]
            .iter()
            .map(|(k, first)| {
                let same: Vec<&T> = runs.iter().filter_map(|r| r.get(k)).collect();
                let v = if same.len() == runs.len() {
                    T::merge(&same)
                } else {
                    first.clone()
                };
                (k.clone(), v)
            })
            .collect()
    }
}

/// `Merge` for structs, field by field (every field listed, or the struct literal does not
/// compile).
macro_rules! merge_fields {
    ($($t:ident { $($f:ident),* $(,)? })*) => {$(
        impl Merge for $t {
            fn merge(runs: &[&Self]) -> Self {
                Self {
                    $($f: Merge::merge(&runs.iter().map(|r| &r.$f).collect::<Vec<_>>()),)*
                }
            }
        }
    )*};
}

merge_fields! {
    Latency { p50, p90, p99, max }
    Usage { cpu_s, max_rss_mb, restarts }
    Machine { cpu, cores, memory_gb, kernel }
    Contract {
        events, expected_deliveries, delivered, lost, not_delivered, held_at_deadline,
        duplicates, early_retries, invalid_signatures, requests, drained, duration_s,
        throughput_per_s, latency_ms, duration_measures, wall_s, latency_measures, per_class,
        processes, attempt_log,
    }
    AttemptLogFigures { mode, sink_max_lag_messages, sink_max_lag_s, stored }
    ClassFigures {
        behaviour, expects_delivery, endpoints, events, expected_deliveries, delivered, lost,
        not_delivered, duplicates, early_retries, early_retry_examples, invalid_signatures, requests,
        latency_ms, rate_limit_per_s,
    }
    EarlyRetry { webhook_id, attempt, previous_status, gap_ms, min_gap_ms }
    SteadySection { steady }
    SteadyFigures { rate_per_s, endpoints }
    MaxSection { max }
    MaxFigures {
        backlog_events, endpoints, drain_rate_events_per_s, sustainable_rate_events_per_s,
        sustainable_rate_deliveries_per_s, limited_by, step_s, kept_up_means, ladder,
    }
    LadderStep {
        rate_per_s, fraction_of_drain_rate, producer_achieved_per_s, producer_kept_rate,
        delivered, expected_deliveries, kept_up, latency_ms, duplicates, invalid_signatures,
    }
    FanoutSection { fanout }
    NoisySection { noisy_neighbour }
    NoisyFigures {
        healthy_latency_ms_with_black_hole, healthy_latency_ms_without_black_hole,
        p99_ratio_with_over_without, run_without_black_hole,
    }
    QuietRun { delivered, lost, duration_s, throughput_per_s, processes }
    OutageSection { outage_recovery }
    OutageFigures { outage_s, rate_limit_per_s, after_recovery }
    AfterRecovery {
        requests, requests_per_s, first_request_after_s, max_requests_in_1s,
        max_rate_over_5s_per_s, allowed_rate_over_5s_per_s, within_rate_limit, drain_s,
    }
    HealthyPhase { healthy_latency_ms }
    RecoveryPhase { after_recovery }
    KillsPhase { kills, restarts }
    CrashSection { crash }
    CrashFigures { kills, restarts, seed }
    Kill { at_s, process, down_ms }
    BaselineFigures {
        sleep_ms, pollers, batch, deadline_s, expected_deliveries, delivered, lost, drained,
        duplicates, early_retries, invalid_signatures, duration_s, throughput_per_s, latency_ms,
        processes, phases, hookstream_over_baseline,
    }
    Ratios { throughput_per_s, latency_p50, latency_p99, reads }
    PhaseFigures {
        phase, events, expected_deliveries, delivered, lost, duplicates, drained, duration_s,
        throughput_per_s, latency_ms, processes, figures,
    }
    RelayReport {
        events, expected_deliveries, delivered, lost, duplicates, early_retries,
        invalid_signatures, duration_s, throughput_per_s, latency_ms, latency_measures,
        delivered_measures, per_class, processes, machine, payload_form, payload_bytes, pad, sealed, store_messages,
        throughput,
        latency,
    }
    RelayUsage { cpu_s, max_rss_mb }
    Drain {
        relays, events, in_kafka, duplicates, lost, duration_s, throughput_per_s, enqueue_per_s,
        cpu_s, max_rss_mb,
    }
    RelayLatency {
        rate_per_s, achieved_rate_per_s, events, received, distinct, duplicates, lost,
        duration_s, latency_ms, latency_measures, relay_commit_to_ack_ms,
        relay_batch_duration_ms, cpu_s, max_rss_mb,
    }
    BucketQuantiles { p50_le_ms, p90_le_ms, p99_le_ms, count }
    ChaosSection { chaos, stall_s, early }
    ChaosFigures {
        seed, rate_per_s, topology, fault_every_min_s, fault_every_max_s, db_outage_s, producer,
        lost, drain, retries_exhausted, per_kind, unattributed_duplicates, unattributed_examples, crashes, events_role, measures, faults,
    }
    ProducerFigures { committed, not_committed, in_doubt }
    DrainFigures {
        deliveries_s, deliveries_deadline_s, dead_letters_s, dead_letters_backlog, held_at_deadline,
        deliveries_not_yet,
    }
    ChaosLost {
        events_not_shipped, deliveries, rejections_not_dead_lettered, dead_letters_not_stored,
        dead_letters_stored_twice,
    }
    KindFigures {
        faults, lost, duplicates, duplicate_ceiling, duplicates_max_per_fault, duplicates_in_window,
        reshipped_events, reshipped_ceiling, resume_ms, resume_measures, first_delivery_ms,
        retry_late_ms, dead_letter_stored_ms, commits_blocked_ms,
    }
    Spread { p50, max, faults }
    Crash { at_s, process, exit_code, log }
    HandoverFigures {
        sigkill_resume_max_ms, sigkill_limit_ms, interleaved_sigkill_resume_max_ms,
        sigterm_handover_max_ms, sigterm_limit_ms, unclean_exits,
    }
    Measures { duplicates, ceilings, resume, lost }
    FaultRecord {
        kind, at_s, target, took_ms, resume_ms, duplicates, duplicate_ceiling, reshipped_events,
    }
    AutoscaleSection { autoscale }
    AutoscaleFigures {
        calibration, rate_per_s, idle_s, step_s, needed_replicas, partitions, chart, emulated,
        time_scale, autoscaled, fixed, measures,
    }
    Calibration {
        max_in_flight_events, receiver_delay_ms, events, capacity_per_s, little_law_per_s,
        dispatcher_cores, machine_busy_pct,
    }
    KedaSettings {
        min_replicas, max_replicas, lag_threshold, activation_lag_threshold, polling_interval_s,
        cooldown_period_s, scale_up, scale_down,
    }
    ScalingRules { stabilization_window_s, policies, select_policy }
    AutoscalePhase {
        label, events, delivered, lost, duplicates, duplicates_after_scaling,
        unattributed_duplicates, replicas_max, scale_out_s, members_out_s, lag_recovered_s,
        drained_s, max_lag_messages, max_lag_s, scaled_in_s, failed_polls, unclean_exits,
        cpu_busy_max_pct, cpu_busy_mean_pct, dispatcher_cpu_s, wall_s, scale_events, polls, series,
    }
    ScaleEvent { at_s, from, to, lag, duplicates }
    PollRecord { t_s, total_lag, metric, active, desired, replicas }
    SecondPoint {
        t_s, replicas, members, lag_messages, lag_s, committed_per_s, delivered_per_s, cpu_busy_pct,
    }
    AutoscaleMeasures { lag_messages, lag_s, scale_out, lag_recovered, duplicates, attribution_window_s }
}

impl<F: Merge> Merge for ScenarioReport<F> {
    fn merge(runs: &[&Self]) -> Self {
        Self {
            contract: Merge::merge(&runs.iter().map(|r| &r.contract).collect::<Vec<_>>()),
            figures: Merge::merge(&runs.iter().map(|r| &r.figures).collect::<Vec<_>>()),
            baseline: Merge::merge(&runs.iter().map(|r| &r.baseline).collect::<Vec<_>>()),
            machine: Merge::merge(&runs.iter().map(|r| &r.machine).collect::<Vec<_>>()),
        }
    }
}

/// The merge of `runs` when every one is the same variant of an enum (newtype variants),
/// otherwise the first run's.
macro_rules! by_variant {
    ($runs:expr, $($variant:ident)::+) => {
        match $runs
            .iter()
            .map(|r| match r {
                $($variant)::+(x) => Some(x),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
        {
            Some(all) => $($variant)::+(Merge::merge(&all)),
            None => $runs[0].clone(),
        }
    };
}

impl Merge for PhaseExtra {
    fn merge(runs: &[&Self]) -> Self {
        match runs[0] {
            PhaseExtra::Healthy(_) => by_variant!(runs, PhaseExtra::Healthy),
            PhaseExtra::Recovery(_) => by_variant!(runs, PhaseExtra::Recovery),
            PhaseExtra::Kills(_) => by_variant!(runs, PhaseExtra::Kills),
        }
    }
}

impl Merge for RunReport {
    fn merge(runs: &[&Self]) -> Self {
        match runs[0] {
            RunReport::Relay(_) => by_variant!(runs, RunReport::Relay),
            RunReport::Steady(_) => by_variant!(runs, RunReport::Steady),
            RunReport::Max(_) => by_variant!(runs, RunReport::Max),
            RunReport::Fanout(_) => by_variant!(runs, RunReport::Fanout),
            RunReport::Fleet(_) => by_variant!(runs, RunReport::Fleet),
            RunReport::NoisyNeighbour(_) => by_variant!(runs, RunReport::NoisyNeighbour),
            RunReport::OutageRecovery(_) => by_variant!(runs, RunReport::OutageRecovery),
            RunReport::Crash(_) => by_variant!(runs, RunReport::Crash),
            RunReport::Chaos(_) => by_variant!(runs, RunReport::Chaos),
            RunReport::BrokerKill(_) => by_variant!(runs, RunReport::BrokerKill),
            RunReport::Autoscale(_) => by_variant!(runs, RunReport::Autoscale),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    fn steady(delivered: usize, p99: f64, ladder_len: usize) -> RunReport {
        let mut run = fixtures::steady();
        if let RunReport::Steady(r) = &mut run {
            r.contract.delivered = delivered;
            r.contract.latency_ms.p99 = p99;
            r.contract.per_class.insert(
                "fast".into(),
                ClassFigures {
                    behaviour: "Ok".into(),
                    expects_delivery: true,
                    endpoints: 1,
                    events: delivered,
                    expected_deliveries: delivered,
                    delivered,
                    lost: 0,
                    not_delivered: 0,
                    duplicates: 0,
                    early_retries: 0,
                    early_retry_examples: (0..ladder_len)
                        .map(|i| EarlyRetry {
                            webhook_id: format!("e{delivered}-{i}"),
                            attempt: 2,
                            previous_status: 503,
                            gap_ms: 1.0,
                            min_gap_ms: 800.0,
                        })
                        .collect(),
                    invalid_signatures: 0,
                    requests: delivered,
                    latency_ms: Latency::default(),
                    rate_limit_per_s: None,
                },
            );
        }
        run
    }

    #[test]
    fn medians_field_by_field() {
        let m = medians(vec![steady(10, 3.0, 1), steady(30, 1.0, 2), steady(20, 2.0, 1)]).expect("runs");
        assert_eq!(m.median_of_runs, Some(3));
        assert_eq!(m.runs.len(), 3);
        let RunReport::Steady(r) = &m.figures else {
            panic!("a steady report: {m:?}")
        };
        assert_eq!(r.contract.delivered, 20);
        assert_eq!(r.contract.latency_ms.p99, 2.0);
        assert_eq!(r.contract.per_class["fast"].delivered, 20);
        // Lengths differ: the first run's list.
        let examples = &r.contract.per_class["fast"].early_retry_examples;
        assert_eq!(examples.len(), 1);
        assert_eq!(examples[0].webhook_id, "e10-0");
        assert_eq!(m.figures.scenario(), "steady");
        assert!(m.verdict.passed);
    }

    #[test]
    fn lists_of_the_same_length_merge_entry_by_entry() {
        let m = medians(vec![
            fixtures::relay([0, 0]),
            fixtures::relay([0, 4]),
            fixtures::relay([0, 2]),
        ])
        .expect("runs");
        let RunReport::Relay(r) = &m.figures else {
            panic!("a relay report")
        };
        assert_eq!(r.throughput.len(), 2);
        assert_eq!(r.throughput[1].lost, 2);
        assert_eq!(r.throughput[1].relays, 2);
        // Absent in the first run: stays absent.
        assert_eq!(
            r.latency
                .relay_commit_to_ack_ms
                .as_ref()
                .and_then(|q| q.p99_le_ms),
            None
        );
        // The verdict comes from the runs, not the medians.
        assert_eq!(m.verdict.failures.len(), 2, "{:?}", m.verdict);
    }

    #[test]
    fn an_even_count_of_runs_takes_the_middle_two() {
        assert_eq!(f64::merge(&[&1.0, &2.0]), 1.5);
        assert_eq!(usize::merge(&[&10, &13]), 12);
        assert_eq!(Option::<f64>::merge(&[&Some(1.0), &None, &Some(3.0)]), Some(2.0));
        assert_eq!(Option::<f64>::merge(&[&None, &Some(3.0)]), None);
    }

    #[test]
    fn a_single_run_is_its_own_report() {
        let r = single(fixtures::relay([0, 1]));
        assert_eq!(r.median_of_runs, None);
        assert!(r.runs.is_empty());
        assert!(!r.verdict.passed);
        assert!(matches!(medians(Vec::new()), Err(NoRuns)));
    }
}
