//! `report.html`: one self-contained page (inline SVG, no scripts, no network): the headline
//! figures, the baseline comparison, charts over every phase (deliveries per second, latency
//! CDF on a log scale), then per phase throughput, latency CDF and backlog/consumer lag over
//! time, and the JSON report. The same charts are written as SVG files for the docs.

use std::fmt::Write as _;

use crate::engine::{self, Outcome};

const W: f64 = 720.0;
const H: f64 = 250.0;
const PAD: f64 = 56.0;
const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// (x, y) points of a line.
pub type Points = Vec<(f64, f64)>;
/// (name, colour, points).
type Series<'a> = (String, &'a str, Points);

/// One chart, ready for the page and for a file.
pub struct Chart {
    /// File stem under `charts/`.
    pub name: String,
    pub title: String,
    pub svg: String,
}

fn num(v: f64) -> String {
    if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A step of 1, 2 or 5 × 10^k that cuts `0..max` into at most five parts.
fn nice_step(max: f64) -> f64 {
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// A line chart of one or more series; with `x_log`, x is drawn on a log10 scale (positive
/// x only); `y_top` fixes the top of the y axis (a CDF's 1).
fn svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_log: bool,
    y_top: Option<f64>,
) -> String {
    let fx = |x: f64| if x_log { x.max(1e-3).log10() } else { x };
    let finite = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!x_log || x > 0.0);
    let (mut x_min, mut x_max, mut y_max) = (f64::INFINITY, f64::NEG_INFINITY, 0.0_f64);
    for p in series.iter().flat_map(|s| s.2.iter()).filter(|p| finite(p)) {
        x_min = x_min.min(fx(p.0));
        x_max = x_max.max(fx(p.0));
        y_max = y_max.max(p.1);
    }
    let x_step;
    if x_log {
        x_min = if x_min.is_finite() { x_min.floor() } else { 0.0 };
        x_max = if x_max.is_finite() {
            x_max.ceil().max(x_min + 1.0)
        } else {
            x_min + 1.0
        };
        x_step = 1.0;
    } else {
        x_min = 0.0;
        let top = if x_max.is_finite() && x_max > 0.0 {
            x_max
        } else {
            1.0
        };
        x_step = nice_step(top);
        x_max = (top / x_step).ceil() * x_step;
    }
    let (y_max, y_step) = match y_top {
        Some(t) => (t, t / 4.0),
        None => {
            let top = if y_max > 0.0 { y_max } else { 1.0 };
            let step = nice_step(top);
            ((top / step).ceil() * step, step)
        }
    };
    let height = H + 14.0 * series.len() as f64;
    let (top, bottom) = (34.0 + 14.0 * series.len() as f64, height - 40.0);
    let sx = |x: f64| PAD + (fx(x) - x_min) / (x_max - x_min) * (W - 2.0 * PAD);
    let sy = |y: f64| bottom - y / y_max * (bottom - top);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="#fff"/><text x="{:.1}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{}</text>"##,
        W / 2.0,
        escape(title)
    );
    let (x0, x1) = (PAD, W - PAD);
    let _ = write!(
        s,
        r##"<line x1="{x0}" y1="{bottom:.1}" x2="{x1}" y2="{bottom:.1}" stroke="#444"/><line x1="{x0}" y1="{bottom:.1}" x2="{x0}" y2="{top:.1}" stroke="#444"/>"##
    );
    let mut t = x_min;
    while t <= x_max + x_step / 2.0 {
        let (x, label) = if x_log {
            (sx(10f64.powf(t)), num(10f64.powf(t)))
        } else {
            (sx(t), num(t))
        };
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="{bottom:.1}" x2="{x:.1}" y2="{:.1}" stroke="#444"/><line x1="{x:.1}" y1="{bottom:.1}" x2="{x:.1}" y2="{top:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            bottom + 4.0,
            bottom + 16.0,
        );
        t += x_step;
    }
    let mut v = 0.0;
    while v <= y_max + y_step / 2.0 {
        let _ = write!(
            s,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{x0}" y2="{y:.1}" stroke="#444"/><line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 4.0,
            x0 - 6.0,
            sy(v) + 4.0,
            num(v),
            y = sy(v),
        );
        v += y_step;
    }
    let _ = write!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"##,
        W / 2.0,
        height - 8.0,
        escape(x_label),
        (top + bottom) / 2.0,
        (top + bottom) / 2.0,
        escape(y_label)
    );
    for (i, (name, colour, points)) in series.iter().enumerate() {
        let path: Vec<String> = points
            .iter()
            .filter(|p| finite(p))
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let ly = 26.0 + 14.0 * i as f64;
        let _ = write!(
            s,
            r##"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/><rect x="{x0}" y="{:.1}" width="12" height="3" fill="{colour}"/><text x="{:.1}" y="{:.1}">{}</text>"##,
            path.join(" "),
            ly - 4.0,
            x0 + 16.0,
            ly,
            escape(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// Deliveries (2xx) and requests per second over 1 s windows of the samples.
fn rates(o: &Outcome) -> (Points, Points) {
    let tl = &o.timeline;
    let mut delivered = Vec::new();
    let mut requests = Vec::new();
    for (i, s) in tl.iter().enumerate() {
        if let Some(p) = tl[..i].iter().rev().find(|p| s.t_s - p.t_s >= 1.0) {
            let dt = s.t_s - p.t_s;
            delivered.push((s.t_s, (s.delivered - p.delivered) as f64 / dt));
            requests.push((s.t_s, (s.requests - p.requests) as f64 / dt));
        }
    }
    (delivered, requests)
}

/// The latency CDF as a fraction of the deliveries expected (so what never arrived keeps the
/// curve below 1), at most ~400 points.
fn cdf(o: &Outcome) -> Points {
    let expected: usize = o
        .classes
        .iter()
        .filter(|c| c.expects_delivery)
        .map(|c| c.endpoints * o.events)
        .sum();
    cdf_of(engine::latency_samples(o), expected)
}

/// The CDF of latency samples (ms) as a fraction of `expected`, at most ~400 points.
pub fn cdf_of(mut samples: Vec<f64>, expected: usize) -> Points {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let of = expected.max(n).max(1) as f64;
    let step = (n / 400).max(1);
    samples
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i + 1 == n)
        .map(|(i, &ms)| (ms, (i + 1) as f64 / of))
        .collect()
}

/// A line chart of named series, coloured in turn from the palette.
fn line_chart(
    name: String,
    title: String,
    axes: (&str, &str),
    series: Vec<(String, Points)>,
    x_log: bool,
    y_top: Option<f64>,
) -> Chart {
    let series: Vec<Series> = series
        .into_iter()
        .enumerate()
        .map(|(i, (label, points))| (label, PALETTE[i % PALETTE.len()], points))
        .collect();
    let svg = svg(&title, axes.0, axes.1, &series, x_log, y_top);
    Chart { name, title, svg }
}

/// A latency CDF chart (log scale) of one or more named sample sets.
pub fn latency_chart(name: &str, title: &str, series: Vec<(String, Points)>) -> Chart {
    line_chart(
        name.into(),
        title.into(),
        ("ms", "fraction of expected"),
        series,
        true,
        Some(1.0),
    )
}

/// A line chart over time of one or more named series.
pub fn time_chart(name: &str, title: &str, y_label: &str, series: Vec<(String, Points)>) -> Chart {
    line_chart(
        name.into(),
        title.into(),
        ("seconds", y_label),
        series,
        false,
        None,
    )
}

/// Every chart of a report: overlays across phases first (when there are several), then
/// each phase's own.
pub fn charts(phases: &[&Outcome]) -> Vec<Chart> {
    const SINCE: &str = "seconds since measuring started";
    const LATENCY: &str = "ms, outbox commit → first 2xx";
    let mut out = Vec::new();
    if phases.len() > 1 {
        out.push(line_chart(
            "all-throughput".into(),
            "2xx deliveries per second, every phase".into(),
            (SINCE, "deliveries/s"),
            phases.iter().map(|o| (o.label.clone(), rates(o).0)).collect(),
            false,
            None,
        ));
        out.push(line_chart(
            "all-latency".into(),
            "Latency CDF, every phase (log scale)".into(),
            (LATENCY, "fraction of expected"),
            phases.iter().map(|o| (o.label.clone(), cdf(o))).collect(),
            true,
            Some(1.0),
        ));
    }
    for o in phases {
        let (delivered, requests) = rates(o);
        out.push(line_chart(
            format!("{}-throughput", o.label),
            format!("{}: throughput over time", o.label),
            (SINCE, "per second"),
            vec![
                ("2xx deliveries/s".into(), delivered),
                ("requests/s".into(), requests),
            ],
            false,
            None,
        ));
        out.push(line_chart(
            format!("{}-latency", o.label),
            format!("{}: latency CDF (log scale)", o.label),
            (LATENCY, "fraction of expected deliveries"),
            vec![("CDF".into(), cdf(o))],
            true,
            Some(1.0),
        ));
        let backlog: Points = o
            .timeline
            .iter()
            .filter(|s| s.backlog >= 0)
            .map(|s| (s.t_s, s.backlog as f64))
            .collect();
        let lag: Points = o
            .timeline
            .iter()
            .filter_map(|s| s.lag.map(|l| (s.t_s, l as f64)))
            .collect();
        out.push(line_chart(
            format!("{}-backlog", o.label),
            format!("{}: backlog and consumer lag over time", o.label),
            (SINCE, "rows / messages"),
            vec![
                ("outbox (or queue) rows".into(), backlog),
                ("consumer lag (messages)".into(), lag),
            ],
            false,
            None,
        ));
    }
    out
}

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
    fn log_scale_ticks_are_decades_and_points_stay_inside() {
        let s = svg(
            "t",
            "x",
            "y",
            &[("a".into(), "#000", vec![(2.0, 0.1), (30.0, 0.5), (4000.0, 1.0)])],
            true,
            Some(1.0),
        );
        for tick in [">1<", ">10<", ">100<", ">1000<", ">10000<"] {
            assert!(s.contains(tick), "tick {tick} in {s}");
        }
        let points = s.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        for p in points.split(' ') {
            let (x, y) = p.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            assert!(
                (PAD..=W - PAD).contains(&x) && (0.0..=H + 14.0).contains(&y),
                "{p}"
            );
        }
    }

    #[test]
    fn steps_are_one_two_or_five() {
        assert_eq!(nice_step(525.0), 200.0);
        assert_eq!(nice_step(5.3), 2.0);
        assert_eq!(nice_step(30_000.0), 10_000.0);
        assert_eq!(nice_step(1.0), 0.2);
    }

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
