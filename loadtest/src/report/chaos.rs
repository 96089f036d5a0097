//! The `chaos` scenario's figures: what was lost at each stage, and per fault kind the
//! faults, their duplicates against a ceiling, and how long deliveries took to resume.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::present;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChaosSection {
    /// Boxed: the largest figures of any report (so `RunReport` stays small).
    pub chaos: Box<ChaosFigures>,
    /// The longest delivery stall of a broker fault, in seconds: over the broker faults, the
    /// most their `resume_ms` measure took (commit → first 2xx at the fast endpoints of the
    /// events committed in the first second at or after the fault). `None` without one.
    #[serde(default)]
    pub stall_s: Option<f64>,
    /// Retries made before they were due (the contract's `early_retries`, beside `lost`).
    #[serde(default)]
    pub early: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChaosFigures {
    /// The fault plan's seed (run i of `--runs` uses seed + i).
    pub seed: u64,
    pub rate_per_s: usize,
    /// Instances per service kind (`relay`, `events`, `retry`, `dlq_sink`).
    pub topology: BTreeMap<String, usize>,
    /// Seconds between interleaved kills, drawn from this range.
    pub fault_every_min_s: f64,
    pub fault_every_max_s: f64,
    pub db_outage_s: u64,
    /// What the producers committed, and what they could not.
    pub producer: ProducerFigures,
    /// Every loss, stage by stage. The verdict reads it.
    pub lost: ChaosLost,
    /// How the pipeline drained after the producers stopped.
    pub drain: DrainFigures,
    /// (event, flaky endpoint) pairs that failed every attempt of the schedule and were
    /// dead-lettered, as they must be: not lost, and not counted as expected deliveries.
    pub retries_exhausted: usize,
    /// Per fault kind (`relay_kill`, `events_role_kill`, …). The verdict reads it.
    pub per_kind: BTreeMap<String, KindFigures>,
    /// Duplicate deliveries no fault could have caused (none before the first fault, say).
    /// The verdict reads it.
    pub unattributed_duplicates: usize,
    /// A few of them, told in full (copies shipped, requests), to look into.
    pub unattributed_examples: Vec<String>,
    /// Services that exited by themselves (restarted by the harness). The verdict reads it.
    pub crashes: Vec<Crash>,
    /// The events role alone: SIGKILL resume and SIGTERM hand-over against their limits.
    /// The verdict reads it.
    pub events_role: HandoverFigures,
    /// How the figures are measured, and what the ceilings rest on.
    pub measures: Measures,
    /// Every fault, in order.
    pub faults: Vec<FaultRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProducerFigures {
    /// Events committed (their ids known).
    pub committed: usize,
    /// Events the producers tried to commit and could not (PostgreSQL down): not events.
    pub not_committed: usize,
    /// Ids that reached the events topic or a receiver without a commit the producers saw
    /// (a commit whose answer was lost with the connection). Counted nowhere else.
    pub in_doubt: usize,
}

/// After the producers stopped: how long until everything arrived.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DrainFigures {
    /// Until every expecting pair was delivered and the outbox empty (`null`: not within
    /// `deliveries_deadline_s`).
    #[serde(deserialize_with = "present")]
    pub deliveries_s: Option<f64>,
    pub deliveries_deadline_s: u64,
    /// Until every DLQ record was stored (`null`: the sink stopped making progress first).
    #[serde(deserialize_with = "present")]
    pub dead_letters_s: Option<f64>,
    /// DLQ records not stored yet when the producers stopped.
    pub dead_letters_backlog: i64,
    /// Records the pipeline still held when the deliveries' deadline passed (outbox rows,
    /// events and retry-tier records not finished; `null`: drained, or not readable).
    #[serde(default)]
    pub held_at_deadline: Option<i64>,
    /// Expecting pairs not answered 2xx at that deadline while records were still held: not
    /// yet delivered, and not counted as lost (the run fails all the same).
    #[serde(default)]
    pub deliveries_not_yet: usize,
}

/// What never arrived, stage by stage; all must be 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChaosLost {
    /// Committed events never read back from the events topic (counted by id).
    pub events_not_shipped: usize,
    /// (event, endpoint) pairs of the fast and flaky classes never answered 2xx.
    pub deliveries: usize,
    /// (event, rejecting endpoint) pairs with no dead letter on the DLQ topic.
    pub rejections_not_dead_lettered: usize,
    /// DLQ records with no row in `hookstream.dead_letters` (by topic position).
    pub dead_letters_not_stored: usize,
    /// DLQ records with more than one row (by topic position): must be 0 as well.
    pub dead_letters_stored_twice: usize,
}

impl ChaosLost {
    pub fn total(&self) -> usize {
        self.events_not_shipped
            + self.deliveries
            + self.rejections_not_dead_lettered
            + self.dead_letters_not_stored
            + self.dead_letters_stored_twice
    }
}

/// One fault kind's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KindFigures {
    pub faults: usize,
    /// Losses of the events committed (or dead-lettered) in this kind's windows (from the
    /// fault to the next one).
    pub lost: usize,
    /// Deliveries beyond the first per (event, endpoint) that this kind's faults caused (see
    /// `Measures::duplicates`).
    pub duplicates: usize,
    /// What this kind's faults can cause at most: the sum of their ceilings. The verdict reads it.
    pub duplicate_ceiling: usize,
    pub duplicates_max_per_fault: usize,
    /// Duplicates by arrival alone (the window from a fault to the next one that holds the
    /// duplicate's arrival): for comparison, not judged.
    pub duplicates_in_window: usize,
    /// Extra copies of events on the events topic that this kind's faults caused.
    pub reshipped_events: usize,
    /// One claimed batch per relay hit, per fault. The verdict reads it.
    pub reshipped_ceiling: usize,
    /// This kind's resume measure (one of the three below), over its faults.
    pub resume_ms: Spread,
    pub resume_measures: String,
    /// Commit → first 2xx at the fast endpoints, of the events committed in the first second
    /// of commits at or after the fault.
    pub first_delivery_ms: Spread,
    /// How late the retries due in the second after the fault came (at least).
    pub retry_late_ms: Spread,
    /// Dead-lettered → stored, of the dead letters made in the second after the fault.
    pub dead_letter_stored_ms: Spread,
    /// From the fault to the first commit after it (PostgreSQL faults: how long producers
    /// could not commit).
    pub commits_blocked_ms: Spread,
}

/// The median and the largest of one figure over a kind's faults (`null` without samples).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    #[serde(deserialize_with = "present")]
    pub p50: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub max: Option<f64>,
    /// Faults with a sample.
    pub faults: usize,
}

/// A service that exited without being told to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Crash {
    /// Seconds since measuring started.
    pub at_s: f64,
    /// The slot (`events-1`, …).
    pub process: String,
    /// `null`: ended by a signal.
    #[serde(deserialize_with = "present")]
    pub exit_code: Option<i32>,
    pub log: String,
}

/// The events role's hand-overs, measured alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HandoverFigures {
    /// Longest resume after a SIGKILL with nothing else going on (`null`: none measured).
    #[serde(deserialize_with = "present")]
    pub sigkill_resume_max_ms: Option<f64>,
    pub sigkill_limit_ms: f64,
    /// Longest resume after an interleaved SIGKILL (other faults around it); not judged.
    #[serde(deserialize_with = "present")]
    pub interleaved_sigkill_resume_max_ms: Option<f64>,
    /// Longest hand-over after a SIGTERM (`null`: none measured).
    #[serde(deserialize_with = "present")]
    pub sigterm_handover_max_ms: Option<f64>,
    pub sigterm_limit_ms: f64,
    /// Exit codes of the SIGTERMed instances that were not 0. The verdict reads it.
    pub unclean_exits: usize,
}

/// How the figures are measured (for readers of the JSON alone).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measures {
    pub duplicates: String,
    pub ceilings: String,
    pub resume: String,
    pub lost: String,
}

/// One fault as it happened.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultRecord {
    pub kind: String,
    /// Seconds since measuring started.
    pub at_s: f64,
    /// The instance it hit (`events-1`, …), or `null` for the broker and PostgreSQL.
    #[serde(deserialize_with = "present")]
    pub target: Option<String>,
    /// How long the fault itself took: the kill and the replacement's start, or the broker
    /// or PostgreSQL down and back.
    pub took_ms: f64,
    #[serde(deserialize_with = "present")]
    pub resume_ms: Option<f64>,
    pub duplicates: usize,
    pub duplicate_ceiling: usize,
    pub reshipped_events: usize,
}
