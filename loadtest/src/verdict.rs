//! The verdict: what counts against a run, over every run of a report. It reads the typed
//! reports only, so a figure it needs cannot be missing (a report without it does not parse).

use crate::report::{AfterRecovery, Contract, RelayReport, RunReport, Verdict};

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
/// invalid signature, an early retry, a delivery or row lost, or a recovering endpoint sent
/// more than its rate limit allows.
pub fn failures(run: &RunReport) -> Vec<String> {
    let mut out = Vec::new();
    match run {
        RunReport::Relay(r) => relay(r, &mut out),
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
        ] {
            let read = read(&json(&run)).expect("reads");
            let v = of(&[read]);
            assert!(v.passed, "{v:?}");
            assert!(v.failures.is_empty());
        }
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
