//! The verdict: what counts against a run (Hookstream's figures; the baseline's are only
//! compared), over every run of a report.

/// What counts against a run (Hookstream's figures; the baseline's are only compared): an
/// invalid signature, an early retry, an event lost, or a recovering endpoint sent more than
/// its rate limit allows.
pub fn failures(report: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let count = |k: &str| report.get(k).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
    for (key, what) in [
        ("invalid_signatures", "deliveries with an invalid signature"),
        (
            "early_retries",
            "retries earlier than the schedule or Retry-After allowed",
        ),
        ("lost", "deliveries lost (never answered 2xx)"),
    ] {
        if count(key) > 0.0 {
            out.push(format!("{} {what}", count(key)));
        }
    }
    // The relay scenario's drains: rows that never reached Kafka.
    if let Some(drains) = report["throughput"].as_array() {
        for d in drains {
            if d["lost"].as_f64().unwrap_or(0.0) > 0.0 {
                out.push(format!(
                    "{} rows lost draining with {} relay(s)",
                    d["lost"], d["relays"]
                ));
            }
        }
    }
    let recovery = &report["outage_recovery"]["after_recovery"];
    if recovery["within_rate_limit"] == serde_json::Value::Bool(false) {
        out.push(format!(
            "the recovered endpoint got {}/s over 5 s, more than the {}/s its rate limit allows",
            recovery["max_rate_over_5s_per_s"], recovery["allowed_rate_over_5s_per_s"]
        ));
    }
    out
}

/// `{passed, failures}` over every run (a median could hide one run's loss).
pub fn verdict(runs: &[serde_json::Value]) -> serde_json::Value {
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
    serde_json::json!({ "passed": failures.is_empty(), "failures": failures })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_name_what_counts_against_a_run() {
        let ok = serde_json::json!({"lost": 0, "invalid_signatures": 0, "early_retries": 0});
        assert!(failures(&ok).is_empty());
        let bad = serde_json::json!({
            "lost": 2, "invalid_signatures": 1, "early_retries": null,
            "outage_recovery": {"after_recovery": {"within_rate_limit": false,
                "max_rate_over_5s_per_s": 500.0, "allowed_rate_over_5s_per_s": 240.0}},
        });
        let f = failures(&bad);
        assert_eq!(f.len(), 3, "{f:?}");
        let relay = serde_json::json!({"lost": 0, "throughput": [{"relays": 1, "lost": 0}, {"relays": 2, "lost": 5}]});
        assert_eq!(
            failures(&relay),
            vec!["5 rows lost draining with 2 relay(s)".to_string()]
        );
        assert!(f[0].contains("invalid signature") && f[1].contains("lost") && f[2].contains("500"));
    }
}
