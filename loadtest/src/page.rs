//! `report.html`: one self-contained page (inline SVG, no scripts, no network): the headline
//! figures, the baseline comparison, the charts, and the JSON report.

use std::fmt::Write as _;

use crate::chart::{escape, num, Chart};

fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Number(n) => n.as_f64().map(num).unwrap_or_else(|| n.to_string()),
        serde_json::Value::Null => "–".into(),
        other => escape(&other.to_string()),
    }
}

fn summary(report: &serde_json::Value) -> String {
    let mut html = String::from(
        "<table><tr><th>system</th><th>delivered / expected</th><th>lost</th><th>duplicates</th>\
         <th>early retries</th><th>invalid signatures</th><th>throughput/s</th><th>p50 ms</th><th>p99 ms</th><th>max ms</th></tr>",
    );
    let mut row = |name: &str, r: &serde_json::Value| {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(name),
            cell(&r["delivered"]),
            cell(&r["expected_deliveries"]),
            cell(&r["lost"]),
            cell(&r["duplicates"]),
            cell(&r["early_retries"]),
            cell(&r["invalid_signatures"]),
            cell(&r["throughput_per_s"]),
            cell(&r["latency_ms"]["p50"]),
            cell(&r["latency_ms"]["p99"]),
            cell(&r["latency_ms"]["max"]),
        );
    };
    row("Hookstream", report);
    let mut ratios = String::new();
    if let Some(b) = report.get("baseline").and_then(|b| b.as_object()) {
        for (variant, v) in b {
            row(&format!("baseline, {variant}"), v);
            let r = &v["hookstream_over_baseline"];
            let _ = write!(
                ratios,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(variant),
                cell(&r["throughput_per_s"]),
                cell(&r["latency_p50"]),
                cell(&r["latency_p99"]),
            );
        }
    }
    html.push_str("</table>");
    if !ratios.is_empty() {
        let _ = write!(
            html,
            "<h3>Hookstream ÷ baseline</h3><p>Above 1 for throughput and below 1 for latency favour Hookstream.</p>\
             <table><tr><th>baseline</th><th>throughput</th><th>p50</th><th>p99</th></tr>{ratios}</table>"
        );
    }
    match report.get("verdict") {
        Some(v) if v["passed"] == true => {
            html.push_str("<p><b>Checks passed</b>: nothing lost, no invalid signature, no early retry.</p>")
        }
        Some(v) => {
            let _ = write!(
                html,
                "<p><b>Checks failed</b>: {}</p>",
                escape(&v["failures"].to_string())
            );
        }
        None => {}
    }
    if let Some(runs) = report.get("median_of_runs") {
        let _ = write!(html, "<p>Every number is the median of {} runs.</p>", cell(runs));
    }
    html
}

const JSON_START: &str = "<h2>report.json</h2><pre>";

/// `page` with its JSON section replaced by `report`'s.
pub fn with_json(page: &str, report: &serde_json::Value) -> String {
    let head = page.split(JSON_START).next().unwrap_or(page);
    format!(
        "{head}{JSON_START}{}</pre></body></html>",
        escape(&serde_json::to_string_pretty(report).unwrap_or_default())
    )
}

pub fn render(report: &serde_json::Value, charts: &[Chart]) -> String {
    let title = format!(
        "Hookstream load test: {}",
        report.get("scenario").and_then(|s| s.as_str()).unwrap_or("?")
    );
    let mut html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:sans-serif;max-width:760px;margin:2em auto}}\
         table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}\
         pre{{background:#f4f4f4;padding:1em;overflow:auto;font-size:12px}}</style>\
         </head><body><h1>{t}</h1>",
        t = escape(&title)
    );
    html += &summary(report);
    for c in charts {
        // The chart draws its own title; the figure names it for readers and tools.
        let _ = write!(html, "<figure title=\"{}\">{}</figure>", escape(&c.title), c.svg);
    }
    with_json(&html, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_shows_baseline_ratios() {
        let report = serde_json::json!({
            "delivered": 10, "expected_deliveries": 10, "throughput_per_s": 2000.0,
            "latency_ms": {"p50": 5.0, "p99": 9.0, "max": 12.0},
            "baseline": {"polling_tuned": {"delivered": 10, "throughput_per_s": 1000.0,
                "hookstream_over_baseline": {"throughput_per_s": 2.0, "latency_p50": 0.5, "latency_p99": 0.25}}},
        });
        let html = summary(&report);
        assert!(html.contains("baseline, polling_tuned"));
        assert!(html.contains("<td>polling_tuned</td><td>2</td><td>0.50</td><td>0.25</td>"));
    }
}
