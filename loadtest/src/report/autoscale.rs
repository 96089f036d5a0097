//! The `autoscale` scenario's figures: one dispatcher's measured capacity, the KEDA/HPA
//! settings emulated (the chart's and the time-scaled ones the run used), and for the
//! autoscaled run and the fixed single dispatcher: replicas, lag and deliveries over time,
//! time to scale out, time for the lag to recover, what was lost and the duplicates each
//! scale event caused.

use serde::{Deserialize, Serialize};

use super::present;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AutoscaleSection {
    /// Boxed: the time series make it large (so `RunReport` stays small).
    pub autoscale: Box<AutoscaleFigures>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AutoscaleFigures {
    pub calibration: Calibration,
    /// The step's rate (events/s): three times the measured capacity, or `--rate`.
    pub rate_per_s: usize,
    pub idle_s: u64,
    pub step_s: u64,
    /// Dispatchers the step needs: ceil(rate ÷ capacity).
    pub needed_replicas: u32,
    pub partitions: i32,
    /// The chart's settings, and the ones the run emulated (time constants ÷ `time_scale`,
    /// the lag threshold for this run's capacity).
    pub chart: KedaSettings,
    pub emulated: KedaSettings,
    pub time_scale: f64,
    /// The verdict reads both.
    pub autoscaled: AutoscalePhase,
    pub fixed: AutoscalePhase,
    pub measures: AutoscaleMeasures,
}

/// One dispatcher draining a backlog alone: its capacity with the run's in-flight cap.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Calibration {
    pub max_in_flight_events: usize,
    pub receiver_delay_ms: u64,
    pub events: usize,
    /// Deliveries per second between 20 % and 90 % of the backlog delivered.
    pub capacity_per_s: f64,
    /// The in-flight cap ÷ the receivers' delay: the capacity if nothing but the receivers
    /// took time.
    pub little_law_per_s: f64,
    /// CPU cores the dispatcher used meanwhile.
    pub dispatcher_cores: f64,
    /// The machine's CPU busy meanwhile (both cores, %).
    #[serde(deserialize_with = "present")]
    pub machine_busy_pct: Option<f64>,
}

/// A ScaledObject's settings, as the chart names them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KedaSettings {
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub lag_threshold: i64,
    pub activation_lag_threshold: i64,
    pub polling_interval_s: f64,
    pub cooldown_period_s: f64,
    pub scale_up: ScalingRules,
    pub scale_down: ScalingRules,
}

/// One direction of the HPA behaviour.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScalingRules {
    pub stabilization_window_s: f64,
    /// `Pods 2 per 60 s`, one per policy.
    pub policies: Vec<String>,
    pub select_policy: String,
}

/// One run of the step: autoscaled, or one fixed dispatcher.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AutoscalePhase {
    pub label: String,
    pub events: usize,
    pub delivered: usize,
    /// Committed events never answered 2xx. The verdict reads it.
    pub lost: usize,
    /// 2xx answers beyond the first per (event, endpoint).
    pub duplicates: usize,
    /// Of those, the ones that arrived within `attribution_window_s` after a scale event.
    pub duplicates_after_scaling: usize,
    /// The others. The verdict reads it.
    pub unattributed_duplicates: usize,
    pub replicas_max: u32,
    /// Step start → KEDA had started `needed_replicas` dispatchers (`null`: never).
    #[serde(deserialize_with = "present")]
    pub scale_out_s: Option<f64>,
    /// Step start → the group had that many members with partitions, stable.
    #[serde(deserialize_with = "present")]
    pub members_out_s: Option<f64>,
    /// Step start → the lag fell under the lag threshold for good. The verdict reads it.
    #[serde(deserialize_with = "present")]
    pub lag_recovered_s: Option<f64>,
    /// Step start → the last event's first 2xx.
    #[serde(deserialize_with = "present")]
    pub drained_s: Option<f64>,
    pub max_lag_messages: i64,
    pub max_lag_s: f64,
    /// Step end → the dispatchers were back to the minimum (`null`: not within the run).
    #[serde(deserialize_with = "present")]
    pub scaled_in_s: Option<f64>,
    /// Polls whose offsets could not be read (KEDA would count them toward its fallback).
    pub failed_polls: usize,
    /// Dispatchers that did not exit 0 after SIGTERM, or exited by themselves. The verdict
    /// reads it.
    pub unclean_exits: usize,
    /// The machine's CPU busy (%), highest and mean over the step's seconds.
    #[serde(deserialize_with = "present")]
    pub cpu_busy_max_pct: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub cpu_busy_mean_pct: Option<f64>,
    /// Events-role CPU, every incarnation (s).
    pub dispatcher_cpu_s: f64,
    pub wall_s: f64,
    pub scale_events: Vec<ScaleEvent>,
    /// Every poll of the emulated KEDA (empty for the fixed run).
    pub polls: Vec<PollRecord>,
    /// One point per second since the run started (the step starts at `idle_s`).
    pub series: Vec<SecondPoint>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleEvent {
    pub at_s: f64,
    pub from: u32,
    pub to: u32,
    /// KEDA's total lag at the poll that decided it.
    pub lag: i64,
    /// Duplicates attributed to it.
    pub duplicates: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PollRecord {
    pub t_s: f64,
    pub total_lag: i64,
    pub metric: i64,
    pub active: bool,
    pub desired: u32,
    pub replicas: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SecondPoint {
    pub t_s: f64,
    /// Dispatchers running (started and not yet stopping).
    pub replicas: u32,
    /// Group members with partitions, while the group is stable (`null`: rebalancing or no
    /// answer).
    #[serde(deserialize_with = "present")]
    pub members: Option<u32>,
    #[serde(deserialize_with = "present")]
    pub lag_messages: Option<i64>,
    pub lag_s: f64,
    pub committed_per_s: f64,
    pub delivered_per_s: f64,
    #[serde(deserialize_with = "present")]
    pub cpu_busy_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AutoscaleMeasures {
    pub lag_messages: String,
    pub lag_s: String,
    pub scale_out: String,
    pub lag_recovered: String,
    pub duplicates: String,
    pub attribution_window_s: f64,
}
