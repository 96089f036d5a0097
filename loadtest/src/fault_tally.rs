//! The `chaos` scenario's figures from what a run recorded: the faults as they struck, the
//! commits, every request the receivers got, every record of the events and DLQ topics and
//! the stored dead letters. Pure (no I/O), so every rule is tested here.
//!
//! - **Lost**, stage by stage, by id: committed events never on the events topic; expected
//!   (event, endpoint) pairs never answered 2xx; rejected pairs never dead-lettered; DLQ
//!   records not stored once (by topic position; a record whose decision, the record the
//!   dispatcher handled and the endpoint, is stored from another position is a repeat a
//!   dispatcher produced after a crash, and stored once). A loss belongs to the fault window (from a
//!   fault to the next) holding the event's commit, or the dead letter's making.
//! - **Duplicates** are 2xx answers beyond the first per (event, endpoint). Each is blamed on
//!   the fault that made the pipeline redo the work: the pair went through extra chains of
//!   work, each ending in at most one extra 2xx: an extra copy of the event on the events
//!   topic (a relay re-shipped a batch whose commit it never saw; blamed on the last fault
//!   before the copy was produced that can do that), or an attempt made more often than what
//!   came before explains (attempt 1 more than once per copy: the events role redid it;
//!   attempt n more than once per failed attempt n − 1: the retry role did), blamed on the last
//!   fault before the extra request that can make that role redo work. A fault's window
//!   holds the duplicates that arrive in it (`duplicates_in_window`), but with faults 1–3 s
//!   apart that blames the wrong kind: a killed consumer's partitions wait out the session
//!   timeout (6 s), so its redone work arrives several faults later.
//! - **Ceilings**: a fault can make the pipeline redo only what was not yet durable. A relay
//!   commits a batch's deletes after Kafka acknowledged it, so a fault redoes at most one
//!   claimed batch per relay it hits (`relay.batch_size`), and each extra copy is delivered
//!   at most once more to each endpoint. A consumer stores an offset when the work up to it
//!   is done and commits stored offsets every second; in a rebalance a member drops its work
//!   in flight on the partitions it gives up, for the next owner to redo. So a fault makes a
//!   consumer group redo at most the attempts it made from 2 s before the fault began (the
//!   commit interval, plus 1 s for work in flight and the commit's round trip) until the
//!   group settled: 9 s after the fault was over (a dead member's session expires after 6 s,
//!   then the rebalance's two rounds), or, for a fault the harness lets the pipeline recover
//!   from, until it caught up. Each such attempt is redone once for the fault and ends in at
//!   most one more 2xx; they are counted at the receivers, each (event, endpoint, attempt)
//!   once, so that redone work does not raise its own ceiling.
//! - **Resume**: for most kinds, commit → first 2xx at the fast endpoints of the events
//!   committed in the first second of commits at or after the fault; for a retry-role kill,
//!   how late the retries due in the second after it came; for a DLQ-sink kill, dead-lettered
//!   → stored for the dead letters made in the second after it.

use std::collections::{BTreeMap, HashMap, HashSet};

use hookstream_testkit::Received;
use serde::Deserialize;
use uuid::Uuid;

use crate::faults::{FaultKind, Redo};
use crate::report::{ChaosLost, FaultRecord, KindFigures, Measures, Spread};
use crate::schedule::{RETRY_JITTER, RETRY_SCHEDULE_MS};

/// Consumer work at risk before a fault: the auto-commit interval plus 1 s.
const AT_RISK_BEFORE_MS: f64 = 2_000.0;
/// Consumer work at risk after a fault is over: a dead member's session expires (6 s), the
/// group rebalances and the survivors hand partitions over, dropping their work in flight on
/// them; 3 s for the two rounds of a cooperative rebalance and margin.
const AT_RISK_AFTER_MS: f64 = 9_000.0;
/// The window after a fault whose events (or retries, or dead letters) measure the resume.
const RESUME_WINDOW_MS: f64 = 1_000.0;

/// A fault as the harness carried it out.
#[derive(Debug, Clone)]
pub struct Struck {
    pub kind: FaultKind,
    /// When the harness began it (a rolling restart starts the new instance first).
    pub begun_ms: f64,
    /// When it struck (ms since the Unix epoch).
    pub at_ms: f64,
    /// When it was over: the replacement started, the old instance exited, the broker or
    /// PostgreSQL back.
    pub back_ms: f64,
    /// When the pipeline had caught up after it (isolated faults: the harness waits for it).
    pub settled_ms: Option<f64>,
    pub target: Option<String>,
    /// Relays whose batch in progress it can undo (1 for a relay kill, every relay for the
    /// broker and PostgreSQL).
    pub relays_hit: usize,
}

/// One transaction the producers committed.
#[derive(Debug, Clone)]
pub struct Commit {
    /// When the commit returned (ms since the Unix epoch).
    pub done_ms: f64,
    pub ids: Vec<Uuid>,
}

/// Which class an endpoint is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Answers 2xx: every event must arrive; measures resume.
    Fast,
    /// Answers 503 to some: every event must arrive, through the retry tiers.
    Flaky,
    /// Answers 404: every event must become a dead letter.
    Rejecting,
}

/// What one endpoint received.
pub struct Seen<'a> {
    pub endpoint: Uuid,
    pub class: Class,
    pub received: &'a [Received],
}

/// One record of the events topic.
#[derive(Debug, Clone, Copy)]
pub struct Shipped {
    pub event: Uuid,
    /// The record's timestamp: when the relay produced it.
    pub at_ms: f64,
}

/// One record of the DLQ topic.
#[derive(Debug, Clone, Copy)]
pub struct DeadLetter {
    pub partition: i32,
    pub offset: i64,
    pub event: Option<Uuid>,
    pub endpoint: Option<Uuid>,
    pub dead_at_ms: f64,
    /// Its decision (`decision_key`), when the record names the record it was decided on.
    pub decision: Option<u64>,
}

/// One dead-lettering decision: the record the dispatcher handled, and the endpoint. The DLQ
/// sink stores one row per decision, however many DLQ records carry it.
pub fn decision_key(topic: &str, partition: i32, offset: i64, endpoint: Option<Uuid>) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (topic, partition, offset, endpoint).hash(&mut h);
    h.finish()
}

/// The rows `hookstream.dead_letters` holds for one DLQ position.
#[derive(Debug, Clone, Copy)]
pub struct Stored {
    pub partition: i32,
    pub offset: i64,
    pub rows: usize,
    /// The first row's `stored_at`.
    pub stored_at_ms: f64,
    /// The first row's decision (`decision_key`), when it has one.
    pub decision: Option<u64>,
}

/// Everything a run recorded.
pub struct Observed<'a> {
    pub faults: &'a [Struck],
    pub commits: &'a [Commit],
    pub endpoints: Vec<Seen<'a>>,
    pub shipped: &'a [Shipped],
    pub dead_letters: &'a [DeadLetter],
    pub stored: &'a [Stored],
    /// `relay.batch_size`.
    pub batch_size: usize,
    /// When measuring started (ms since the Unix epoch), for `at_s`.
    pub started_ms: f64,
}

/// The figures.
#[derive(Debug, Clone)]
pub struct Tallied {
    pub lost: ChaosLost,
    pub per_kind: BTreeMap<String, KindFigures>,
    pub unattributed_duplicates: usize,
    pub unattributed_examples: Vec<String>,
    /// (event id, endpoint) pairs that failed every attempt and were dead-lettered.
    pub retries_exhausted: Vec<(String, Uuid)>,
    pub in_doubt: usize,
    pub faults: Vec<FaultRecord>,
}

/// The payload field the latency is measured from (see `engine.rs`).
#[derive(Deserialize)]
struct Stamped {
    created_ms: f64,
}

/// Per fault, what was blamed on it and measured after it.
#[derive(Debug, Clone, Default)]
struct PerFault {
    lost: usize,
    duplicates: usize,
    in_window: usize,
    reshipped: usize,
    first_delivery_ms: Option<f64>,
    retry_late_ms: Option<f64>,
    dead_letter_stored_ms: Option<f64>,
    commits_blocked_ms: Option<f64>,
}

/// The faults in time order, to find the one a moment belongs to.
struct Timeline<'a> {
    faults: &'a [Struck],
}

impl Timeline<'_> {
    /// The last fault at or before `t_ms` (its window holds `t_ms`).
    fn window(&self, t_ms: f64) -> Option<usize> {
        self.faults.partition_point(|f| f.at_ms <= t_ms).checked_sub(1)
    }

    /// The last fault at or before `t_ms` that can cause `redo`.
    fn cause(&self, t_ms: f64, redo: Redo) -> Option<usize> {
        let last = self.window(t_ms)?;
        (0..=last).rev().find(|&i| self.faults[i].kind.can_cause(redo))
    }
}

/// Sorted times, counted in ranges.
struct Times(Vec<f64>);

impl Times {
    fn new(mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        Self(v)
    }

    fn count(&self, from: f64, to: f64) -> usize {
        self.0.partition_point(|&t| t < to) - self.0.partition_point(|&t| t < from)
    }
}

fn max_opt(a: Option<f64>, b: f64) -> Option<f64> {
    Some(a.map_or(b, |a| a.max(b)))
}

fn spread(values: impl Iterator<Item = Option<f64>>) -> Spread {
    let mut v: Vec<f64> = values.flatten().collect();
    v.sort_by(f64::total_cmp);
    Spread {
        p50: v.get(v.len().saturating_sub(1) / 2).copied(),
        max: v.last().copied(),
        faults: v.len(),
    }
}

/// How late a retry came at least: its arrival after the latest moment it could have been
/// due (the previous attempt's arrival plus the longest jittered delay).
fn latest_due(previous_ms: f64, attempt: u32) -> Option<f64> {
    let base = *RETRY_SCHEDULE_MS.get(attempt.checked_sub(2)? as usize)? as f64;
    Some(previous_ms + base * (1.0 + RETRY_JITTER))
}

pub fn tally(o: &Observed) -> Tallied {
    let line = Timeline { faults: o.faults };
    let mut per: Vec<PerFault> = vec![PerFault::default(); o.faults.len()];
    let mut lost = ChaosLost {
        events_not_shipped: 0,
        deliveries: 0,
        rejections_not_dead_lettered: 0,
        dead_letters_not_stored: 0,
        dead_letters_stored_twice: 0,
    };
    let lose = |per: &mut Vec<PerFault>, at_ms: f64| {
        if let Some(i) = line.window(at_ms) {
            per[i].lost += 1;
        }
    };

    // Commits, in order of their return.
    let mut committed: HashMap<String, f64> = HashMap::new();
    let mut commits: Vec<(f64, &[Uuid])> = Vec::new();
    for c in o.commits {
        for id in &c.ids {
            committed.insert(id.to_string(), c.done_ms);
        }
        commits.push((c.done_ms, &c.ids));
    }
    commits.sort_by(|a, b| a.0.total_cmp(&b.0));

    // The events topic: copies per event; extra copies are re-ships.
    let mut copies: HashMap<String, Vec<f64>> = HashMap::new();
    for s in o.shipped {
        copies.entry(s.event.to_string()).or_default().push(s.at_ms);
    }
    for (id, at) in &committed {
        if !copies.contains_key(id) {
            lost.events_not_shipped += 1;
            lose(&mut per, *at);
        }
    }
    for times in copies.values_mut() {
        times.sort_by(f64::total_cmp);
        for &t in times.iter().skip(1) {
            if let Some(i) = line.cause(t, Redo::Reship) {
                per[i].reshipped += 1;
            }
        }
    }
    let mut in_doubt: HashSet<&str> = copies
        .keys()
        .filter(|id| !committed.contains_key(*id))
        .map(String::as_str)
        .collect();

    // The receivers.
    let mut created: HashMap<&str, f64> = HashMap::new();
    // Per fast endpoint: the first 2xx of each event.
    let mut first_ok: Vec<HashMap<&str, f64>> = Vec::new();
    // Arrivals of each (event, endpoint, attempt)'s first request: the work that was done,
    // once, and could be redone.
    let mut first_attempts = Vec::new();
    let mut retries = Vec::new();
    // (latest due, lateness) of every retry.
    let mut due_retries: Vec<(f64, f64)> = Vec::new();
    let mut expecting = 0;
    let mut unattributed = 0;
    let mut examples = Vec::new();
    let mut retries_exhausted = Vec::new();
    let mut dead_lettered: HashSet<(Uuid, Uuid)> = HashSet::new();
    for d in o.dead_letters {
        if let (Some(e), Some(ep)) = (d.event, d.endpoint) {
            dead_lettered.insert((e, ep));
        }
    }
    for seen in &o.endpoints {
        let mut by_id: HashMap<&str, Vec<&Received>> = HashMap::new();
        for r in seen.received {
            by_id.entry(r.webhook_id.as_str()).or_default().push(r);
            if !created.contains_key(r.webhook_id.as_str()) {
                if let Ok(s) = serde_json::from_slice::<Stamped>(&r.body) {
                    created.insert(r.webhook_id.as_str(), s.created_ms);
                }
            }
        }
        if seen.class == Class::Rejecting {
            for (id, at) in &committed {
                let ok = Uuid::parse_str(id).is_ok_and(|e| dead_lettered.contains(&(e, seen.endpoint)));
                if !ok {
                    lost.rejections_not_dead_lettered += 1;
                    lose(&mut per, *at);
                }
            }
            for id in by_id.keys() {
                if !committed.contains_key(*id) {
                    in_doubt.insert(*id);
                }
            }
            continue;
        }
        expecting += 1;
        let mut firsts = HashMap::new();
        for (id, tries) in by_id.iter_mut() {
            if !committed.contains_key(*id) {
                in_doubt.insert(*id);
            }
            tries.sort_by(|a, b| a.received_unix_ms.total_cmp(&b.received_unix_ms));
            let mut made = HashSet::new();
            for r in tries.iter() {
                let original = made.insert(r.attempt);
                match r.attempt {
                    1 if original => first_attempts.push(r.received_unix_ms),
                    a if a >= 2 => {
                        if original {
                            retries.push(r.received_unix_ms);
                        }
                        let previous = tries
                            .iter()
                            .find(|p| p.attempt + 1 == a && p.received_unix_ms <= r.received_unix_ms);
                        if let Some(due) = previous.and_then(|p| latest_due(p.received_unix_ms, a)) {
                            due_retries.push((due, (r.received_unix_ms - due).max(0.0)));
                        }
                    }
                    _ => {}
                }
            }
            let ok: Vec<&&Received> = tries.iter().filter(|r| (200..300).contains(&r.status)).collect();
            let Some(first) = ok.first() else { continue };
            firsts.insert(*id, first.received_unix_ms);
            if ok.len() < 2 {
                continue;
            }
            let extra = ok.len() - 1;
            for d in &ok[1..] {
                if let Some(i) = line.window(d.received_unix_ms) {
                    per[i].in_window += 1;
                }
            }
            // The extra chains of work the pair went through, in time order: each extra copy
            // on the events topic, each attempt made more often than what came before it
            // explains. Each ends in at most one extra 2xx; the duplicates are theirs.
            let shipped_copies = copies.get(*id).map_or(&[][..], Vec::as_slice);
            let mut chains: Vec<(Redo, f64)> = shipped_copies
                .iter()
                .skip(1)
                .map(|&t| (Redo::Reship, t))
                .collect();
            chains.extend(redone(tries, shipped_copies.len().max(1)));
            chains.sort_by(|a, b| a.1.total_cmp(&b.1));
            let mut blamed = 0;
            for &(redo, at) in chains.iter().take(extra) {
                if let Some(i) = line.cause(at, redo) {
                    per[i].duplicates += 1;
                    blamed += 1;
                }
            }
            if blamed < extra {
                unattributed += extra - blamed;
                if examples.len() < MAX_EXAMPLES {
                    examples.push(example(id, seen.class, tries, shipped_copies, o.started_ms));
                }
            }
        }
        for (id, at) in &committed {
            if firsts.contains_key(id.as_str()) {
                continue;
            }
            // Every attempt of the schedule failed and the pair was dead-lettered: what must
            // happen, not a loss (a 30 % flaky endpoint fails ten in a row about once in
            // 170,000 events).
            let exhausted = by_id.get(id.as_str()).is_some_and(|t| every_attempt_failed(t))
                && Uuid::parse_str(id).is_ok_and(|e| dead_lettered.contains(&(e, seen.endpoint)));
            if exhausted {
                retries_exhausted.push((id.clone(), seen.endpoint));
            } else {
                lost.deliveries += 1;
                lose(&mut per, *at);
            }
        }
        if seen.class == Class::Fast {
            first_ok.push(firsts);
        }
    }
    let first_attempts = Times::new(first_attempts);
    let retries = Times::new(retries);
    due_retries.sort_by(|a, b| a.0.total_cmp(&b.0));

    // Dead letters: each DLQ record stored once, by position, or by its decision from another
    // position (a repeat); a decision stored twice is a duplicate.
    let stored: HashMap<(i32, i64), &Stored> =
        o.stored.iter().map(|s| ((s.partition, s.offset), s)).collect();
    let mut decided: HashMap<u64, &Stored> = HashMap::new();
    for s in o.stored {
        if let Some(k) = s.decision {
            if decided.insert(k, s).is_some() {
                lost.dead_letters_stored_twice += 1;
            }
        }
    }
    let stored_as = |d: &DeadLetter| {
        stored
            .get(&(d.partition, d.offset))
            .or_else(|| d.decision.and_then(|k| decided.get(&k)))
            .copied()
    };
    let mut dead_sorted: Vec<&DeadLetter> = o.dead_letters.iter().collect();
    dead_sorted.sort_by(|a, b| a.dead_at_ms.total_cmp(&b.dead_at_ms));
    for d in &dead_sorted {
        match stored_as(d) {
            None => {
                lost.dead_letters_not_stored += 1;
                lose(&mut per, d.dead_at_ms);
            }
            Some(s) if s.rows > 1 => {
                lost.dead_letters_stored_twice += 1;
                lose(&mut per, d.dead_at_ms);
            }
            Some(_) => {}
        }
    }

    // Resume after each fault.
    for (i, f) in o.faults.iter().enumerate() {
        let p = &mut per[i];
        let from = commits.partition_point(|c| c.0 < f.at_ms);
        if let Some(&(t_c, _)) = commits.get(from) {
            p.commits_blocked_ms = Some(t_c - f.at_ms);
            for (_, ids) in commits[from..]
                .iter()
                .take_while(|c| c.0 < t_c + RESUME_WINDOW_MS)
            {
                for id in ids.iter().map(Uuid::to_string) {
                    let Some(&made) = created.get(id.as_str()) else {
                        continue;
                    };
                    for firsts in &first_ok {
                        if let Some(&at) = firsts.get(id.as_str()) {
                            p.first_delivery_ms = max_opt(p.first_delivery_ms, at - made);
                        }
                    }
                }
            }
        }
        let from = due_retries.partition_point(|r| r.0 < f.at_ms);
        for &(_, late) in due_retries[from..]
            .iter()
            .take_while(|r| r.0 < f.at_ms + RESUME_WINDOW_MS)
        {
            p.retry_late_ms = max_opt(p.retry_late_ms, late);
        }
        let from = dead_sorted.partition_point(|d| d.dead_at_ms < f.at_ms);
        for d in dead_sorted[from..]
            .iter()
            .take_while(|d| d.dead_at_ms < f.at_ms + RESUME_WINDOW_MS)
        {
            if let Some(s) = stored_as(d) {
                p.dead_letter_stored_ms = max_opt(p.dead_letter_stored_ms, s.stored_at_ms - d.dead_at_ms);
            }
        }
    }

    // Ceilings, and the figures per fault and per kind.
    let mut records = Vec::new();
    let mut kinds: BTreeMap<FaultKind, Vec<(usize, usize, usize)>> = BTreeMap::new();
    for (i, f) in o.faults.iter().enumerate() {
        let p = &per[i];
        let reship_ceiling = if f.kind.can_cause(Redo::Reship) {
            f.relays_hit * o.batch_size
        } else {
            0
        };
        let from = f.begun_ms - AT_RISK_BEFORE_MS;
        let to = (f.back_ms + AT_RISK_AFTER_MS).max(f.settled_ms.unwrap_or(0.0));
        let mut ceiling = 0;
        if f.kind.can_cause(Redo::Reship) {
            ceiling += expecting * p.reshipped;
        }
        if f.kind.can_cause(Redo::EventsRole) {
            ceiling += first_attempts.count(from, to);
        }
        if f.kind.can_cause(Redo::RetryRole) {
            ceiling += retries.count(from, to);
        }
        kinds
            .entry(f.kind)
            .or_default()
            .push((i, ceiling, reship_ceiling));
        records.push(FaultRecord {
            kind: f.kind.key().to_string(),
            at_s: (f.at_ms - o.started_ms) / 1000.0,
            target: f.target.clone(),
            took_ms: f.back_ms - f.at_ms,
            resume_ms: resume_of(f.kind, p),
            duplicates: p.duplicates,
            duplicate_ceiling: ceiling,
            reshipped_events: p.reshipped,
        });
    }
    let per_kind = kinds
        .into_iter()
        .map(|(kind, faults)| {
            let of = |f: &dyn Fn(&PerFault) -> Option<f64>| spread(faults.iter().map(|(i, ..)| f(&per[*i])));
            let figures = KindFigures {
                faults: faults.len(),
                lost: faults.iter().map(|(i, ..)| per[*i].lost).sum(),
                duplicates: faults.iter().map(|(i, ..)| per[*i].duplicates).sum(),
                duplicate_ceiling: faults.iter().map(|f| f.1).sum(),
                duplicates_max_per_fault: faults.iter().map(|(i, ..)| per[*i].duplicates).max().unwrap_or(0),
                duplicates_in_window: faults.iter().map(|(i, ..)| per[*i].in_window).sum(),
                reshipped_events: faults.iter().map(|(i, ..)| per[*i].reshipped).sum(),
                reshipped_ceiling: faults.iter().map(|f| f.2).sum(),
                resume_ms: of(&|p| resume_of(kind, p)),
                resume_measures: resume_measures(kind).to_string(),
                first_delivery_ms: of(&|p| p.first_delivery_ms),
                retry_late_ms: of(&|p| p.retry_late_ms),
                dead_letter_stored_ms: of(&|p| p.dead_letter_stored_ms),
                commits_blocked_ms: of(&|p| p.commits_blocked_ms),
            };
            (kind.key().to_string(), figures)
        })
        .collect();
    Tallied {
        lost,
        per_kind,
        unattributed_duplicates: unattributed,
        unattributed_examples: examples,
        retries_exhausted,
        in_doubt: in_doubt.len(),
        faults: records,
    }
}

/// Attempts made more often than what came before explains, with their arrivals: attempt 1
/// once per copy of the event on the events topic (more: the events role redid it), a later
/// attempt once per failed attempt before it (more: the retry role redid it).
fn redone(tries: &[&Received], copies: usize) -> Vec<(Redo, f64)> {
    let mut by_attempt: BTreeMap<u32, Vec<&Received>> = BTreeMap::new();
    for r in tries {
        by_attempt.entry(r.attempt).or_default().push(r);
    }
    let mut out = Vec::new();
    for (&attempt, made) in &by_attempt {
        let explained = match attempt {
            0 | 1 => copies,
            a => by_attempt.get(&(a - 1)).map_or(0, |prev| {
                prev.iter().filter(|r| !(200..300).contains(&r.status)).count()
            }),
        };
        let redo = if attempt <= 1 {
            Redo::EventsRole
        } else {
            Redo::RetryRole
        };
        // `made` is in arrival order (the caller sorted `tries`).
        out.extend(made.iter().skip(explained).map(|r| (redo, r.received_unix_ms)));
    }
    out
}

/// Whether a pair's requests hold every attempt of the retry schedule (1 to its length + 1),
/// none answered 2xx.
fn every_attempt_failed(tries: &[&Received]) -> bool {
    let last = RETRY_SCHEDULE_MS.len() as u32 + 1;
    tries.iter().all(|r| !(200..300).contains(&r.status))
        && (1..=last).all(|a| tries.iter().any(|r| r.attempt == a))
}

/// Unattributed duplicates shown in the report, to look into.
const MAX_EXAMPLES: usize = 10;

/// One pair's story: its copies on the events topic and its requests (attempt, seconds since
/// the start, status).
fn example(id: &str, class: Class, tries: &[&Received], copies: &[f64], started_ms: f64) -> String {
    let s = |ms: f64| (ms - started_ms) / 1000.0;
    let shipped: Vec<String> = copies.iter().map(|&t| format!("{:.2}", s(t))).collect();
    let requests: Vec<String> = tries
        .iter()
        .map(|r| format!("a{}@{:.2}:{}", r.attempt, s(r.received_unix_ms), r.status))
        .collect();
    format!(
        "{id} at a {class:?} endpoint: shipped at [{}] s, requests [{}]",
        shipped.join(", "),
        requests.join(", ")
    )
}

/// A kind's resume measure.
fn resume_of(kind: FaultKind, p: &PerFault) -> Option<f64> {
    match kind {
        FaultKind::RetryKill => p.retry_late_ms,
        FaultKind::DlqSinkKill => p.dead_letter_stored_ms,
        _ => p.first_delivery_ms,
    }
}

fn resume_measures(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::RetryKill => "retry_late_ms: how late the retries due in the second after the kill came",
        FaultKind::DlqSinkKill => {
            "dead_letter_stored_ms: dead-lettered → stored, of the dead letters made in the second after the kill"
        }
        _ => "first_delivery_ms: commit → first 2xx at the fast endpoints, of the events committed in the first second of commits at or after the fault",
    }
}

/// How the figures are measured, for the report.
pub fn measures() -> Measures {
    Measures {
        duplicates: "2xx answers beyond the first per (event, endpoint), each blamed on the fault that made \
                     the pipeline redo it: an event on the events topic twice on the last fault that can make \
                     a relay re-ship before its second copy was produced; otherwise the earliest attempt made \
                     twice, attempt 1 on the last fault that can make the events role redo work, later ones \
                     on the last that can make the retry role redo work, before the second one arrived. \
                     duplicates_in_window counts by arrival alone (the window from a fault to the next)"
            .into(),
        ceilings: "per fault: one claimed batch (relay.batch_size) per relay it hits can be re-shipped, each \
                   extra copy delivered at most once more per endpoint (re-shipped events × expecting \
                   endpoints); a consumer commits stored offsets every second and drops its work in flight \
                   on partitions it gives up in a rebalance, so a group redoes at most the attempts of its \
                   role made from 2 s before the fault until the group settled (9 s after the fault was \
                   over: session timeout and rebalance; isolated faults: until the pipeline caught up), \
                   each (event, endpoint, attempt) counted once at the expecting endpoints and ending in at \
                   most one more 2xx. A kind's ceiling is the sum over its faults"
            .into(),
        resume: "relay, events-role, broker and PostgreSQL faults: commit → first 2xx at the fast endpoints \
                 of the events committed in the first second of commits at or after the fault (PostgreSQL: \
                 after it came back); retry-role kill: arrival − latest due time (previous attempt + delay × \
                 1.2) of the retries due in the second after it; DLQ-sink kill: stored_at − dead_at of the \
                 dead letters made in the second after it"
            .into(),
        lost: "by id: committed events never on the events topic; (event, endpoint) pairs of the fast and \
               flaky classes never answered 2xx (unless every attempt of the schedule failed and the pair \
               was dead-lettered: retries_exhausted); (event, rejecting endpoint) pairs never on the DLQ topic; \
               DLQ records without exactly one row in hookstream.dead_letters (by topic position, or by \
               decision for a repeat a dispatcher produced after a crash). A loss \
               belongs to the window holding its commit (or its dead letter's making)"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn req(event: Uuid, attempt: u32, at_ms: f64, status: u16, created_ms: f64) -> Received {
        Received {
            webhook_id: event.to_string(),
            timestamp: String::new(),
            signature: String::new(),
            event_type: String::new(),
            attempt,
            body: serde_json::to_vec(&serde_json::json!({ "created_ms": created_ms }))
                .unwrap_or_default()
                .into(),
            verified: true,
            at: Instant::now(),
            received_unix_ms: at_ms,
            status,
        }
    }

    fn fault(kind: FaultKind, at_ms: f64) -> Struck {
        Struck {
            kind,
            begun_ms: at_ms,
            at_ms,
            back_ms: at_ms + 10.0,
            settled_ms: None,
            target: None,
            relays_hit: 1,
        }
    }

    fn shipped(events: &[(Uuid, f64)]) -> Vec<Shipped> {
        events
            .iter()
            .map(|&(event, at_ms)| Shipped { event, at_ms })
            .collect()
    }

    struct Run {
        faults: Vec<Struck>,
        commits: Vec<Commit>,
        fast: Vec<Received>,
        flaky: Vec<Received>,
        rejecting: Vec<Received>,
        shipped: Vec<Shipped>,
        dead_letters: Vec<DeadLetter>,
        stored: Vec<Stored>,
    }

    const FAST: u128 = 1001;
    const FLAKY: u128 = 1002;
    const REJECTING: u128 = 1003;

    /// Two events committed at 1,000 and 5,000 ms, each shipped, delivered and dead-lettered
    /// once; a DLQ-sink kill at 3,000 ms.
    fn clean() -> Run {
        let (a, b) = (id(1), id(2));
        Run {
            faults: vec![fault(FaultKind::DlqSinkKill, 3_000.0)],
            commits: vec![
                Commit {
                    done_ms: 1_000.0,
                    ids: vec![a],
                },
                Commit {
                    done_ms: 5_000.0,
                    ids: vec![b],
                },
            ],
            fast: vec![req(a, 1, 1_005.0, 204, 1_000.0), req(b, 1, 5_006.0, 204, 5_000.0)],
            flaky: vec![
                req(a, 1, 1_005.0, 503, 1_000.0),
                req(a, 2, 2_000.0, 204, 1_000.0),
                req(b, 1, 5_005.0, 204, 5_000.0),
            ],
            rejecting: vec![req(a, 1, 1_005.0, 404, 1_000.0), req(b, 1, 5_005.0, 404, 5_000.0)],
            shipped: shipped(&[(a, 1_001.0), (b, 5_001.0)]),
            dead_letters: vec![
                DeadLetter {
                    partition: 0,
                    offset: 0,
                    event: Some(a),
                    endpoint: Some(id(REJECTING)),
                    dead_at_ms: 1_006.0,
                    decision: None,
                },
                DeadLetter {
                    partition: 0,
                    offset: 1,
                    event: Some(b),
                    endpoint: Some(id(REJECTING)),
                    dead_at_ms: 5_006.0,
                    decision: None,
                },
            ],
            stored: vec![
                Stored {
                    partition: 0,
                    offset: 0,
                    rows: 1,
                    stored_at_ms: 1_010.0,
                    decision: None,
                },
                Stored {
                    partition: 0,
                    offset: 1,
                    rows: 1,
                    stored_at_ms: 9_000.0,
                    decision: None,
                },
            ],
        }
    }

    fn tally_of(r: &Run) -> Tallied {
        tally(&Observed {
            faults: &r.faults,
            commits: &r.commits,
            endpoints: vec![
                Seen {
                    endpoint: id(FAST),
                    class: Class::Fast,
                    received: &r.fast,
                },
                Seen {
                    endpoint: id(FLAKY),
                    class: Class::Flaky,
                    received: &r.flaky,
                },
                Seen {
                    endpoint: id(REJECTING),
                    class: Class::Rejecting,
                    received: &r.rejecting,
                },
            ],
            shipped: &r.shipped,
            dead_letters: &r.dead_letters,
            stored: &r.stored,
            batch_size: 1000,
            started_ms: 0.0,
        })
    }

    #[test]
    fn a_clean_run_loses_nothing_and_measures_resume() {
        let t = tally_of(&clean());
        assert_eq!(t.lost.total(), 0, "{:?}", t.lost);
        assert_eq!(t.unattributed_duplicates, 0);
        assert_eq!(t.in_doubt, 0);
        let k = &t.per_kind["dlq_sink_kill"];
        assert_eq!(
            (k.faults, k.lost, k.duplicates, k.duplicate_ceiling),
            (1, 0, 0, 0)
        );
        // The dead letter made at 5,006 ms (after the kill at 3,000) waited: but it is not in
        // the second after the kill. Nothing was: no sample.
        assert_eq!(k.resume_ms.faults, 0);
        // The first commit after the kill (5,000) was delivered 6 ms later.
        assert_eq!(k.first_delivery_ms.max, Some(6.0));
        assert_eq!(k.commits_blocked_ms.max, Some(2_000.0));
        assert_eq!(t.faults[0].at_s, 3.0);
    }

    #[test]
    fn every_stage_loses_by_id_and_a_duplicate_hides_nothing() {
        let mut r = clean();
        let a = id(1);
        // b never shipped, yet a was shipped twice: as many records as events.
        r.shipped = shipped(&[(a, 1_001.0), (a, 4_000.0)]);
        // b's fast delivery missing, a's twice.
        r.fast = vec![req(a, 1, 1_005.0, 204, 1_000.0), req(a, 1, 4_005.0, 204, 1_000.0)];
        // b's dead letter never made; a's stored twice.
        r.dead_letters.truncate(1);
        r.stored[0].rows = 2;
        let t = tally_of(&r);
        assert_eq!(t.lost.events_not_shipped, 1);
        assert_eq!(t.lost.deliveries, 1);
        assert_eq!(t.lost.rejections_not_dead_lettered, 1);
        assert_eq!(t.lost.dead_letters_stored_twice, 1);
        assert_eq!(t.lost.dead_letters_not_stored, 0);
        // b's losses are in the sink kill's window (committed at 5,000); a's stored-twice dead
        // letter before any fault belongs to none.
        assert_eq!(t.per_kind["dlq_sink_kill"].lost, 3);
    }

    #[test]
    fn duplicates_are_blamed_on_the_fault_that_can_redo_them_not_the_window_they_arrive_in() {
        let mut r = clean();
        let a = id(1);
        // An events-role kill at 900 ms: attempt 1 to the fast endpoint is redone by the next
        // owner after the session timeout, at 7,000 ms, which is after the sink kill (3,000).
        r.faults.insert(0, fault(FaultKind::EventsKill, 900.0));
        r.fast.push(req(a, 1, 7_000.0, 204, 1_000.0));
        // A relay kill at 6,000: b re-shipped at 6,500, delivered again to the flaky endpoint.
        let b = id(2);
        r.faults.push(fault(FaultKind::RelayKill, 6_000.0));
        r.shipped.push(Shipped {
            event: b,
            at_ms: 6_500.0,
        });
        r.flaky.push(req(b, 1, 6_505.0, 204, 5_000.0));
        let t = tally_of(&r);
        let k = |key: &str| &t.per_kind[key];
        assert_eq!(k("events_role_kill").duplicates, 1);
        assert_eq!(k("dlq_sink_kill").duplicates, 0, "the sink delivers nothing");
        assert_eq!(k("relay_kill").duplicates, 1);
        assert_eq!(k("relay_kill").reshipped_events, 1);
        // By arrival, both land in the relay kill's window.
        assert_eq!(k("relay_kill").duplicates_in_window, 2);
        assert_eq!(k("events_role_kill").duplicates_in_window, 0);
        // Ceilings: the relay's re-shipped event × 2 expecting endpoints; the events role's
        // first attempts from 2 s before the kill to 9 s after it, each once (a's and b's at
        // both endpoints; not the redone ones at 6,505 and 7,000).
        assert_eq!(k("relay_kill").duplicate_ceiling, 2);
        assert_eq!(k("relay_kill").reshipped_ceiling, 1000);
        assert_eq!(k("events_role_kill").duplicate_ceiling, 4);
        assert_eq!(t.unattributed_duplicates, 0);
    }

    #[test]
    fn a_reshipped_event_redone_by_the_events_role_is_blamed_on_both() {
        let mut r = clean();
        let b = id(2);
        // Relay kill at 5,500: b shipped again at 5,600 and delivered again; an events-role
        // kill at 6,000 makes the next owner redo both copies' deliveries at 12,000.
        r.faults.push(fault(FaultKind::RelayKill, 5_500.0));
        r.faults.push(fault(FaultKind::EventsKill, 6_000.0));
        r.shipped.push(Shipped {
            event: b,
            at_ms: 5_600.0,
        });
        r.fast.push(req(b, 1, 5_605.0, 204, 5_000.0));
        r.fast.push(req(b, 1, 12_000.0, 204, 5_000.0));
        r.fast.push(req(b, 1, 12_001.0, 204, 5_000.0));
        let t = tally_of(&r);
        assert_eq!(t.per_kind["relay_kill"].duplicates, 1);
        assert_eq!(t.per_kind["events_role_kill"].duplicates, 2);
        assert_eq!(t.unattributed_duplicates, 0);
        // A failed attempt redone starts a second chain: its retry is explained, not redone.
        let a = id(1);
        let mut r = clean();
        r.faults.insert(0, fault(FaultKind::EventsKill, 1_100.0));
        r.flaky = vec![
            req(a, 1, 1_005.0, 503, 1_000.0),
            req(a, 1, 7_000.0, 503, 1_000.0),
            req(a, 2, 2_000.0, 204, 1_000.0),
            req(a, 2, 8_000.0, 204, 1_000.0),
            req(id(2), 1, 5_005.0, 204, 5_000.0),
        ];
        let t = tally_of(&r);
        assert_eq!(t.per_kind["events_role_kill"].duplicates, 1);
        assert_eq!(t.unattributed_duplicates, 0);
    }

    #[test]
    fn an_isolated_faults_ceiling_runs_until_the_pipeline_caught_up() {
        let mut r = clean();
        // A broker restart whose at-risk period ends at 3,000 ms: a's attempts (1,005 and
        // 2,000) are at risk, b's (5,005) only because the pipeline caught up at 12,000.
        r.faults = vec![fault(FaultKind::BrokerRestart, 0.0)];
        r.faults[0].back_ms = -6_000.0;
        let t = tally_of(&r);
        // a at the fast and the flaky endpoint, a's retry.
        assert_eq!(t.per_kind["broker_restart"].duplicate_ceiling, 3);
        r.faults[0].settled_ms = Some(12_000.0);
        let t = tally_of(&r);
        assert_eq!(t.per_kind["broker_restart"].duplicate_ceiling, 5);
    }

    #[test]
    fn a_dead_letter_produced_again_after_a_crash_is_stored_once_by_its_decision() {
        let mut r = clean();
        let key = decision_key("events", 0, 7, Some(id(REJECTING)));
        r.dead_letters[0].decision = Some(key);
        r.stored[0].decision = Some(key);
        // The same decision again at another DLQ position, which the sink did not store.
        let mut repeat = r.dead_letters[0];
        repeat.offset = 2;
        repeat.dead_at_ms = 1_500.0;
        r.dead_letters.push(repeat);
        let t = tally_of(&r);
        assert_eq!(t.lost.total(), 0, "a repeat is stored once: {:?}", t.lost);
        // A DLQ record whose decision nobody stored is lost.
        r.dead_letters[2].decision = Some(decision_key("events", 0, 8, Some(id(REJECTING))));
        assert_eq!(tally_of(&r).lost.dead_letters_not_stored, 1);
        // One decision in rows at two positions is stored twice.
        r.dead_letters.pop();
        r.dead_letters[1].decision = Some(key);
        r.stored[1].decision = Some(key);
        assert_eq!(tally_of(&r).lost.dead_letters_stored_twice, 1);
    }

    #[test]
    fn a_pair_that_failed_every_attempt_and_was_dead_lettered_is_not_lost() {
        let mut r = clean();
        let b = id(2);
        r.flaky.retain(|d| d.webhook_id != b.to_string());
        let attempts = RETRY_SCHEDULE_MS.len() as u32 + 1;
        for a in 1..=attempts {
            r.flaky.push(req(b, a, 5_000.0 + f64::from(a), 503, 5_000.0));
        }
        // Not dead-lettered: lost.
        let t = tally_of(&r);
        assert_eq!((t.lost.deliveries, t.retries_exhausted.len()), (1, 0));
        r.dead_letters.push(DeadLetter {
            partition: 1,
            offset: 0,
            event: Some(b),
            endpoint: Some(id(FLAKY)),
            dead_at_ms: 6_000.0,
            decision: None,
        });
        r.stored.push(Stored {
            partition: 1,
            offset: 0,
            rows: 1,
            stored_at_ms: 6_001.0,
            decision: None,
        });
        let t = tally_of(&r);
        assert_eq!(t.lost.total(), 0, "{:?}", t.lost);
        assert_eq!(t.retries_exhausted, vec![(b.to_string(), id(FLAKY))]);
        // One attempt short of the schedule: lost, dead letter or not.
        r.flaky.retain(|d| d.attempt != attempts);
        assert_eq!(tally_of(&r).lost.deliveries, 1);
    }

    #[test]
    fn a_duplicate_no_fault_explains_is_unattributed() {
        let mut r = clean();
        let a = id(1);
        r.fast.push(req(a, 1, 1_500.0, 204, 1_000.0));
        let t = tally_of(&r);
        assert_eq!(t.unattributed_duplicates, 1);
        assert_eq!(t.unattributed_examples.len(), 1);
        assert!(
            t.unattributed_examples[0].contains("requests [a1@1.00:204, a1@1.50:204]"),
            "{:?}",
            t.unattributed_examples
        );
        // A redone retry is not the events role's doing.
        let mut r = clean();
        r.faults.insert(0, fault(FaultKind::EventsKill, 1_500.0));
        r.flaky.push(req(a, 2, 2_100.0, 204, 1_000.0));
        let t = tally_of(&r);
        assert_eq!(t.per_kind["events_role_kill"].duplicates, 0);
        assert_eq!(t.unattributed_duplicates, 1);
    }

    #[test]
    fn resume_per_kind() {
        let mut r = clean();
        let (a, b) = (id(1), id(2));
        // A retry-role kill at 1,000: a's retry (attempt 1 at 1,005, due by 1,005 + 1,200 =
        // 2,205) is not due in the second after it.
        r.faults = vec![
            fault(FaultKind::RetryKill, 1_000.0),
            fault(FaultKind::DlqSinkKill, 4_950.0),
            fault(FaultKind::BrokerRestart, 4_990.0),
        ];
        // Late: b's retry due by 5,005 + 1,200 arrives at 12,205.
        r.flaky = vec![
            req(a, 1, 1_005.0, 503, 1_000.0),
            req(a, 2, 2_000.0, 204, 1_000.0),
            req(b, 1, 5_005.0, 503, 5_000.0),
            req(b, 2, 12_205.0, 204, 5_000.0),
        ];
        let t = tally_of(&r);
        let k = |key: &str| &t.per_kind[key];
        assert_eq!(k("retry_role_kill").resume_ms.faults, 0);
        // b's dead letter was made at 5,006 and stored at 9,000.
        assert_eq!(k("dlq_sink_kill").resume_ms.max, Some(3_994.0));
        // The broker restart: b committed at 5,000 and delivered at 5,006.
        assert_eq!(k("broker_restart").resume_ms.max, Some(6.0));
        assert_eq!(k("broker_restart").retry_late_ms.max, None);
        // At 1,300 it is, and came on time; b's retry (due by 6,205) came 6 s late.
        r.faults[0].at_ms = 1_300.0;
        r.faults.push(fault(FaultKind::RetryKill, 6_000.0));
        let t = tally_of(&r);
        assert_eq!(t.per_kind["retry_role_kill"].resume_ms.max, Some(6_000.0));
        assert_eq!(t.per_kind["retry_role_kill"].resume_ms.faults, 2);
        assert_eq!(t.per_kind["retry_role_kill"].resume_ms.p50, Some(0.0));
    }

    #[test]
    fn spreads_take_the_lower_median() {
        let s = spread([Some(3.0), None, Some(1.0), Some(2.0), Some(9.0)].into_iter());
        assert_eq!((s.p50, s.max, s.faults), (Some(2.0), Some(9.0), 4));
        assert_eq!(spread(std::iter::empty()), Spread::default());
    }
}
