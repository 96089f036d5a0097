//! Report pieces shared by scenarios.

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latency {
    /// Percentiles (nearest rank) of samples in milliseconds.
    pub fn of(mut samples: Vec<f64>) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1];
        Self {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: *samples.last().unwrap(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gb: f64,
    pub kernel: String,
}

impl Machine {
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

/// Fetches a Prometheus text page over plain HTTP (the services' admin listener).
pub fn scrape(addr: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Quantiles (bucket upper bounds, in ms) of a Prometheus histogram named `name`.
pub fn histogram_quantiles(page: &str, name: &str) -> Option<(f64, f64, f64, u64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    let mut buckets: Vec<(f64, u64)> = page
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let q = |q: f64| {
        let rank = (q * total as f64).ceil() as u64;
        buckets
            .iter()
            .find(|(_, c)| *c >= rank)
            .map(|(le, _)| le * 1000.0)
            .unwrap_or(f64::INFINITY)
    };
    Some((q(0.5), q(0.9), q(0.99), total))
}

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

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// Medians of the numbers of several runs' reports, field by field (nested objects too);
/// non-numeric fields come from the first run. The runs themselves are kept under `runs`.
pub fn medians(reports: Vec<serde_json::Value>) -> serde_json::Value {
    fn merge(values: &[&serde_json::Value]) -> serde_json::Value {
        let first = values[0];
        match first {
            serde_json::Value::Number(_) => {
                let nums: Vec<f64> = values.iter().filter_map(|v| v.as_f64()).collect();
                median(nums)
                    .map(serde_json::Value::from)
                    .unwrap_or(serde_json::Value::Null)
            }
            serde_json::Value::Object(map) => {
                let mut out = serde_json::Map::new();
                for (k, v) in map {
                    let same: Vec<&serde_json::Value> = values.iter().filter_map(|r| r.get(k)).collect();
                    out.insert(
                        k.clone(),
                        if same.len() == values.len() {
                            merge(&same)
                        } else {
                            v.clone()
                        },
                    );
                }
                serde_json::Value::Object(out)
            }
            // Lists of the same length (e.g. one entry per relay count) merge entry by entry;
            // lists whose length varies between runs (a ladder that stopped earlier) come
            // from the first run.
            serde_json::Value::Array(items)
                if values
                    .iter()
                    .all(|v| v.as_array().is_some_and(|a| a.len() == items.len())) =>
            {
                let merged = (0..items.len())
                    .map(|i| {
                        let column: Vec<&serde_json::Value> = values.iter().map(|v| &v[i]).collect();
                        merge(&column)
                    })
                    .collect();
                serde_json::Value::Array(merged)
            }
            other => other.clone(),
        }
    }
    let refs: Vec<&serde_json::Value> = reports.iter().collect();
    let mut out = merge(&refs);
    out["median_of_runs"] = serde_json::Value::from(reports.len());
    out["runs"] = serde_json::Value::Array(reports);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let l = Latency::of((1..=100).map(f64::from).collect());
        assert_eq!((l.p50, l.p90, l.p99, l.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(Latency::of(vec![]).max, 0.0);
    }

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

    #[test]
    fn medians_field_by_field() {
        let runs = vec![
            serde_json::json!({"scenario": "max", "delivered": 10, "latency_ms": {"p99": 3.0}}),
            serde_json::json!({"scenario": "max", "delivered": 30, "latency_ms": {"p99": 1.0}}),
            serde_json::json!({"scenario": "max", "delivered": 20, "latency_ms": {"p99": 2.0}}),
        ];
        let m = medians(runs);
        assert_eq!(m["delivered"], 20.0);
        let lists = medians(vec![
            serde_json::json!({"t": [{"n": 1}, {"n": 5}], "ladder": [1]}),
            serde_json::json!({"t": [{"n": 3}, {"n": 4}], "ladder": [2, 3]}),
            serde_json::json!({"t": [{"n": 2}, {"n": 6}], "ladder": [4]}),
        ]);
        assert_eq!(lists["t"][0]["n"], 2.0);
        assert_eq!(lists["t"][1]["n"], 5.0);
        assert_eq!(
            lists["ladder"],
            serde_json::json!([1]),
            "lengths differ: the first run's"
        );
        assert_eq!(m["latency_ms"]["p99"], 2.0);
        assert_eq!(m["scenario"], "max");
        assert_eq!(m["runs"].as_array().map(Vec::len), Some(3));
    }
}
