//! The verdict: what counts against a run, over every run of a report. It reads the typed
//! reports only, so a figure it needs cannot be missing (a report without it does not parse).

use crate::report::{
    AfterRecovery, AutoscaleFigures, ChaosFigures, Contract, RelayReport, RunReport, Verdict,
};

/// The verdict over every run (a median could hide one run's loss).
pub fn of(runs: &[RunReport]) -> Verdict {
    let several = runs.len() > 1;
    let failures: Vec<String> = runs
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            failures(r).into_iter().map(move |f| match several {
                true => format!("run {}: {f}", i + 1),
                false => f,
            })
        })
        .collect();
    Verdict {
        passed: failures.is_empty(),
        failures,
    }
}

/// What counts against one run (Hookstream's figures; the baseline's are only compared): an
/// invalid signature, an early retry, a delivery or row lost, a recovering endpoint sent
/// more than its rate limit allows; in `chaos`, also a loss at any stage, a service that
/// exited by itself, duplicates above a fault kind's ceiling, and an events-role hand-over
/// slower than its limit.
pub fn failures(run: &RunReport) -> Vec<String> {
    let mut out = Vec::new();
    match run {
        RunReport::Relay(r) => relay(r, &mut out),
        RunReport::Chaos(r) | RunReport::BrokerKill(r) => {
            contract(&r.contract, &mut out);
            chaos(&r.figures.chaos, &mut out);
        }
        RunReport::Autoscale(r) => {
            contract(&r.contract, &mut out);
            autoscale(&r.figures.autoscale, &mut out);
        }
        RunReport::OutageRecovery(r) => {
            contract(&r.contract, &mut out);
            if let Some(after) = &r.figures.outage_recovery.after_recovery {
                recovery(after, &mut out);
            }
        }
        other => {
            if let Some(c) = other.contract() {
                contract(c, &mut out);
            }
        }
    }
    out
}

fn contract(c: &Contract, out: &mut Vec<String>) {
    counts(
        Some(c.invalid_signatures),
        Some(c.early_retries),
        c.lost,
        "deliveries lost (never answered 2xx)",
        out,
    );
    if c.not_delivered > 0 {
        out.push(format!(
            "did not drain before the deadline: {} deliveries not yet delivered, {} records still in the pipeline (not counted as lost)",
            c.not_delivered,
            c.held_at_deadline
                .map(|h| h.to_string())
                .unwrap_or_else(|| "?".into())
        ));
    }
}

fn relay(r: &RelayReport, out: &mut Vec<String>) {
    counts(
        r.invalid_signatures,
        r.early_retries,
        r.lost,
        "rows lost at the fixed rate (never read back from Kafka)",
        out,
    );
    for d in r.throughput.iter().filter(|d| d.lost > 0) {
        out.push(format!(
            "{} rows lost draining with {} relay(s)",
            d.lost, d.relays
        ));
    }
}

/// The counts every report has: invalid signatures and early retries (where the scenario
/// has them), and what was lost.
fn counts(
    invalid_signatures: Option<usize>,
    early_retries: Option<usize>,
    lost: usize,
    lost_means: &str,
    out: &mut Vec<String>,
) {
    if let Some(n) = invalid_signatures.filter(|&n| n > 0) {
        out.push(format!("{n} deliveries with an invalid signature"));
    }
    if let Some(n) = early_retries.filter(|&n| n > 0) {
        out.push(format!(
            "{n} retries earlier than the schedule or Retry-After allowed"
        ));
    }
    if lost > 0 {
        out.push(format!("{lost} {lost_means}"));
    }
}

fn chaos(c: &ChaosFigures, out: &mut Vec<String>) {
    if c.drain.deliveries_not_yet > 0 {
        out.push(format!(
            "did not drain before the deadline: {} deliveries to the fast and flaky endpoints not yet delivered, {} records still in the pipeline (not counted as lost)",
            c.drain.deliveries_not_yet,
            c.drain.held_at_deadline.map_or_else(|| "?".into(), |h| h.to_string())
        ));
    }
    let l = &c.lost;
    for (n, what) in [
        (
            l.events_not_shipped,
            "committed events never reached the events topic",
        ),
        (
            l.deliveries,
            "deliveries to the fast and flaky endpoints never answered 2xx",
        ),
        (
            l.rejections_not_dead_lettered,
            "rejected deliveries never dead-lettered",
        ),
        (l.dead_letters_not_stored, "dead letters never stored"),
        (l.dead_letters_stored_twice, "dead letters stored more than once"),
    ] {
        if n > 0 {
            out.push(format!("{n} {what}"));
        }
    }
    for crash in &c.crashes {
        out.push(format!(
            "{} exited by itself at {:.1} s (exit code {}; log {})",
            crash.process,
            crash.at_s,
            crash
                .exit_code
                .map_or_else(|| "none: a signal".into(), |c| c.to_string()),
            crash.log
        ));
    }
    for (kind, k) in &c.per_kind {
        if k.duplicates > k.duplicate_ceiling {
            out.push(format!(
                "{kind}: {} duplicate deliveries, above its ceiling of {}",
                k.duplicates, k.duplicate_ceiling
            ));
        }
        if k.reshipped_events > k.reshipped_ceiling {
            out.push(format!(
                "{kind}: {} events re-shipped, above its ceiling of {}",
                k.reshipped_events, k.reshipped_ceiling
            ));
        }
    }
    if c.unattributed_duplicates > 0 {
        out.push(format!(
            "{} duplicate deliveries that no fault can have caused",
            c.unattributed_duplicates
        ));
    }
    let h = &c.events_role;
    if let Some(ms) = h.sigkill_resume_max_ms.filter(|&ms| ms > h.sigkill_limit_ms) {
        out.push(format!(
            "an events-role instance's partitions resumed {ms:.0} ms after its SIGKILL (limit {:.0} ms)",
            h.sigkill_limit_ms
        ));
    }
    if let Some(ms) = h.sigterm_handover_max_ms.filter(|&ms| ms > h.sigterm_limit_ms) {
        out.push(format!(
            "an events-role instance handed over {ms:.0} ms after its SIGTERM (limit {:.0} ms)",
            h.sigterm_limit_ms
        ));
    }
    if h.unclean_exits > 0 {
        out.push(format!(
            "{} events-role instances did not exit with 0 after SIGTERM",
            h.unclean_exits
        ));
    }
}

/// Autoscaling must pay off and cost nothing: the lag recovers sooner than with one fixed
/// dispatcher, nothing is lost (the contract), no duplicate arrives that no scale event
/// explains, and every dispatcher stopped exits cleanly.
fn autoscale(a: &AutoscaleFigures, out: &mut Vec<String>) {
    match (a.autoscaled.lag_recovered_s, a.fixed.lag_recovered_s) {
        (Some(auto), Some(fixed)) if auto < fixed => {}
        (Some(auto), Some(fixed)) => out.push(format!(
            "autoscaled, the lag recovered in {auto:.0} s, not sooner than one fixed dispatcher's {fixed:.0} s"
        )),
        (None, _) => out.push("autoscaled, the lag never fell back under the threshold".into()),
        (Some(_), None) => {} // the fixed dispatcher never recovered: autoscaling did sooner
    }
    for p in [&a.autoscaled, &a.fixed] {
        if p.unattributed_duplicates > 0 {
            out.push(format!(
                "{}: {} duplicate deliveries that no scale event explains",
                p.label, p.unattributed_duplicates
            ));
        }
        if p.unclean_exits > 0 {
            out.push(format!(
                "{}: {} dispatchers did not exit 0 after SIGTERM or exited by themselves",
                p.label, p.unclean_exits
            ));
        }
    }
}

fn recovery(after: &AfterRecovery, out: &mut Vec<String>) {
    if !after.within_rate_limit {
        out.push(format!(
            "the recovered endpoint got {}/s over 5 s, more than the {}/s its rate limit allows",
            after.max_rate_over_5s_per_s, after.allowed_rate_over_5s_per_s
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{self, fixtures};

    /// The JSON of `run`, read back as `remerge` reads a report's runs.
    fn read(json: &str) -> Result<RunReport, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    fn json(run: &RunReport) -> String {
        report::to_json(run).expect("serialises")
    }

    #[test]
    fn a_valid_report_passes() {
        for run in [
            fixtures::steady(),
            fixtures::outage(200.0),
            fixtures::relay([0, 0]),
            fixtures::chaos(),
            fixtures::autoscale(Some(100.0), Some(300.0)),
            fixtures::autoscale(Some(100.0), None),
        ] {
            let read = read(&json(&run)).expect("reads");
            let v = of(&[read]);
            assert!(v.passed, "{v:?}");
            assert!(v.failures.is_empty());
        }
    }

    #[test]
    fn autoscaling_that_does_not_recover_sooner_or_duplicates_unexplained_fails() {
        let f = failures(&fixtures::autoscale(Some(300.0), Some(300.0)));
        assert!(f.iter().any(|f| f.contains("not sooner")), "{f:?}");
        let f = failures(&fixtures::autoscale(None, Some(300.0)));
        assert!(f.iter().any(|f| f.contains("never fell back")), "{f:?}");
        let mut run = fixtures::autoscale(Some(100.0), Some(300.0));
        if let RunReport::Autoscale(r) = &mut run {
            r.figures.autoscale.fixed.unattributed_duplicates = 2;
            r.figures.autoscale.autoscaled.unclean_exits = 1;
        }
        let f = failures(&run);
        assert_eq!(f.len(), 2, "{f:?}");
        let e = read(&fixtures::without(
            &run,
            &["autoscale", "autoscaled", "lag_recovered_s"],
        ))
        .unwrap_err();
        assert!(e.contains("missing field `lag_recovered_s`"), "{e}");
    }

    #[test]
    fn a_report_without_a_field_the_verdict_reads_does_not_parse_and_says_which() {
        let cases: Vec<(RunReport, &[&str])> = vec![
            (fixtures::steady(), &["lost"]),
            (fixtures::steady(), &["early_retries"]),
            (fixtures::steady(), &["invalid_signatures"]),
            (fixtures::outage(200.0), &["outage_recovery", "after_recovery"]),
            (fixtures::outage(200.0), &["outage_recovery"]),
            (fixtures::relay([0, 0]), &["lost"]),
            (fixtures::relay([0, 0]), &["early_retries"]),
            (fixtures::relay([0, 0]), &["throughput"]),
        ];
        for (run, path) in cases {
            let Some(field) = path.last() else { continue };
            match read(&fixtures::without(&run, path)) {
                Ok(r) => panic!("{path:?} removed, yet it parsed: {r:?}"),
                Err(e) => assert!(e.contains(&format!("missing field `{field}`")), "{path:?}: {e}"),
            }
        }
        // Inside a list and inside a nested object too.
        let mut v = serde_json::to_value(fixtures::relay([0, 0])).expect("JSON");
        v["throughput"][1]
            .as_object_mut()
            .and_then(|d| d.remove("lost"))
            .expect("the drain had lost");
        let e = read(&v.to_string()).expect_err("a drain without lost");
        assert!(e.contains("missing field `lost`"), "{e}");
        let e = read(&fixtures::without(
            &fixtures::outage(200.0),
            &["outage_recovery", "after_recovery", "within_rate_limit"],
        ))
        .expect_err("after_recovery without within_rate_limit");
        assert!(e.contains("missing field `within_rate_limit`"), "{e}");
    }

    #[test]
    fn one_lost_delivery_fails_the_verdict() {
        let mut run = fixtures::steady();
        if let RunReport::Steady(r) = &mut run {
            r.contract.delivered -= 1;
            r.contract.lost = 1;
        }
        // As written and read back, so the count survives the JSON.
        let v = of(&[read(&json(&run)).expect("reads")]);
        assert!(!v.passed);
        assert_eq!(v.failures, ["1 deliveries lost (never answered 2xx)"]);
    }

    #[test]
    fn a_run_cut_off_with_records_in_flight_fails_without_calling_them_lost() {
        let mut run = fixtures::steady();
        if let RunReport::Steady(r) = &mut run {
            r.contract.delivered -= 4;
            r.contract.drained = false;
            r.contract.not_delivered = 4;
            r.contract.held_at_deadline = Some(7);
        }
        let v = of(&[read(&json(&run)).expect("reads")]);
        assert!(!v.passed);
        assert_eq!(
            v.failures,
            ["did not drain before the deadline: 4 deliveries not yet delivered, 7 records still in the pipeline (not counted as lost)"]
        );
    }

    #[test]
    fn failures_name_what_counts_against_a_run() {
        let mut run = fixtures::outage(500.0);
        if let RunReport::OutageRecovery(r) = &mut run {
            r.contract.lost = 2;
            r.contract.invalid_signatures = 1;
        }
        let f = failures(&run);
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(f[0].contains("invalid signature") && f[1].contains("lost") && f[2].contains("500"));
        assert_eq!(
            failures(&fixtures::relay([0, 5])),
            vec!["5 rows lost draining with 2 relay(s)".to_string()]
        );
        let early = |n| {
            let mut run = fixtures::steady();
            if let RunReport::Steady(r) = &mut run {
                r.contract.early_retries = n;
            }
            run
        };
        assert!(failures(&early(0)).is_empty());
        assert_eq!(failures(&early(3)).len(), 1);
    }

    #[test]
    fn chaos_fails_on_a_loss_a_crash_a_ceiling_or_a_slow_hand_over() {
        let with = |f: &dyn Fn(&mut crate::report::ChaosFigures)| {
            let mut run = fixtures::chaos();
            if let RunReport::Chaos(r) = &mut run {
                f(&mut r.figures.chaos);
            }
            failures(&read(&json(&run)).expect("reads"))
        };
        assert!(with(&|_| {}).is_empty());
        let f = with(&|c| c.lost.dead_letters_not_stored = 2);
        assert_eq!(f, ["2 dead letters never stored"]);
        // Cut off while records were still on their way: not yet delivered, not lost.
        let f = with(&|c| {
            c.drain.deliveries_s = None;
            c.drain.held_at_deadline = Some(3);
            c.drain.deliveries_not_yet = 1;
        });
        assert_eq!(
            f,
            ["did not drain before the deadline: 1 deliveries to the fast and flaky endpoints not yet delivered, 3 records still in the pipeline (not counted as lost)"]
        );
        let f = with(&|c| {
            if let Some(k) = c.per_kind.get_mut("relay_kill") {
                k.duplicates = k.duplicate_ceiling + 1;
            }
        });
        assert_eq!(f.len(), 1);
        assert!(f[0].starts_with("relay_kill: "), "{f:?}");
        let f = with(&|c| c.events_role.sigterm_handover_max_ms = Some(1500.0));
        assert!(f[0].contains("1500 ms after its SIGTERM"), "{f:?}");
        let f = with(&|c| c.events_role.sigkill_resume_max_ms = Some(7001.0));
        assert!(f[0].contains("after its SIGKILL"), "{f:?}");
        let f = with(&|c| {
            c.crashes.push(crate::report::Crash {
                at_s: 12.0,
                process: "events-1".into(),
                exit_code: Some(1),
                log: "x.log".into(),
            })
        });
        assert_eq!(
            f,
            ["events-1 exited by itself at 12.0 s (exit code 1; log x.log)"]
        );
        assert_eq!(with(&|c| c.unattributed_duplicates = 3).len(), 1);
        // Nothing measured is not a failure (a run without hand-overs).
        assert!(with(&|c| c.events_role.sigkill_resume_max_ms = None).is_empty());
    }

    #[test]
    fn a_chaos_report_without_its_figures_does_not_parse() {
        for path in [
            &["chaos", "lost"][..],
            &["chaos", "per_kind"],
            &["chaos", "events_role", "sigkill_resume_max_ms"],
            &["chaos", "crashes"],
        ] {
            let field = path[path.len() - 1];
            let e = read(&fixtures::without(&fixtures::chaos(), path)).expect_err("incomplete");
            assert!(e.contains(&format!("missing field `{field}`")), "{path:?}: {e}");
        }
    }

    #[test]
    fn every_run_counts_and_is_named() {
        let v = of(&[
            fixtures::relay([0, 0]),
            fixtures::relay([1, 0]),
            fixtures::relay([0, 0]),
        ]);
        assert!(!v.passed);
        assert_eq!(v.failures, ["run 2: 1 rows lost draining with 1 relay(s)"]);
    }
}
