//! `report.html`: one self-contained page (inline SVG, no scripts, no network) with, per
//! phase, throughput over time, the latency CDF, and the outbox backlog and consumer lag over
//! time, followed by the JSON report.

use std::fmt::Write as _;

use crate::engine::{self, Outcome};

const W: f64 = 640.0;
const H: f64 = 220.0;
const PAD: f64 = 48.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A line chart of one or more series of (x, y) points.
/// (name, colour, points).
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

fn chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let pts = series.iter().flat_map(|s| s.2.iter());
    let (mut x_max, mut y_max) = (0.0_f64, 0.0_f64);
    for &(x, y) in pts {
        if x.is_finite() && y.is_finite() {
            x_max = x_max.max(x);
            y_max = y_max.max(y);
        }
    }
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let y_max = if y_max > 0.0 { y_max * 1.05 } else { 1.0 };
    let sx = |x: f64| PAD + x / x_max * (W - 2.0 * PAD);
    let sy = |y: f64| H - PAD + 10.0 - y / y_max * (H - 2.0 * PAD);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<h3>{}</h3><svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"##,
        escape(title)
    );
    let (x0, y0, x1, y1) = (sx(0.0), sy(0.0), sx(x_max), sy(y_max));
    let _ = write!(
        svg,
        r##"<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#444"/><line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#444"/>"##
    );
    for i in 0..=4 {
        let f = f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{:.4}</text><text x="{:.1}" y="{:.1}" text-anchor="end">{:.4}</text>"##,
            sx(f * x_max),
            y0 + 14.0,
            num(f * x_max),
            x0 - 4.0,
            sy(f * y_max) + 4.0,
            num(f * y_max)
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="12" y="{:.1}" transform="rotate(-90 12 {:.1})" text-anchor="middle">{}</text>"##,
        W / 2.0,
        H - 6.0,
        escape(x_label),
        H / 2.0,
        H / 2.0,
        escape(y_label)
    );
    for (i, (name, colour, points)) in series.iter().enumerate() {
        let path: Vec<String> = points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = write!(
            svg,
            r##"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/><text x="{:.1}" y="{:.1}" fill="{colour}">{}</text>"##,
            path.join(" "),
            W - PAD - 150.0,
            20.0 + 14.0 * i as f64,
            escape(name)
        );
    }
    svg.push_str("</svg>");
    svg
}

fn num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn phase(o: &Outcome) -> String {
    let mut html = format!("<h2>Phase {}</h2>", escape(&o.label));
    // Throughput: deliveries (2xx) and requests per second, over 1 s windows of samples.
    let tl = &o.timeline;
    let mut delivered = Vec::new();
    let mut requests = Vec::new();
    for (i, s) in tl.iter().enumerate() {
        let back = tl[..i].iter().rev().find(|p| s.t_s - p.t_s >= 1.0);
        if let Some(p) = back {
            let dt = s.t_s - p.t_s;
            delivered.push((s.t_s, (s.delivered - p.delivered) as f64 / dt));
            requests.push((s.t_s, (s.requests - p.requests) as f64 / dt));
        }
    }
    html += &chart(
        "Throughput over time",
        "seconds since the services started",
        "per second",
        &[
            ("2xx deliveries/s", "#1f77b4", delivered),
            ("requests/s", "#ff7f0e", requests),
        ],
    );
    let mut samples = engine::latency_samples(o);
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let step = (n / 400).max(1);
    let cdf: Vec<(f64, f64)> = samples
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i + 1 == n)
        .map(|(i, &ms)| (ms, (i + 1) as f64 / n as f64))
        .collect();
    html += &chart(
        "Latency CDF (outbox commit → first 2xx delivery)",
        "milliseconds",
        "fraction of deliveries",
        &[("CDF", "#2ca02c", cdf)],
    );
    let backlog: Vec<(f64, f64)> = tl
        .iter()
        .filter(|s| s.backlog >= 0)
        .map(|s| (s.t_s, s.backlog as f64))
        .collect();
    let lag: Vec<(f64, f64)> = tl
        .iter()
        .filter_map(|s| s.lag.map(|l| (s.t_s, l as f64)))
        .collect();
    html += &chart(
        "Backlog over time",
        "seconds since the services started",
        "rows / messages",
        &[
            ("outbox rows", "#d62728", backlog),
            ("consumer lag (messages)", "#9467bd", lag),
        ],
    );
    html
}

pub fn render(report: &serde_json::Value, phases: &[&Outcome]) -> String {
    let title = format!(
        "Hookstream load test: {}",
        report.get("scenario").and_then(|s| s.as_str()).unwrap_or("?")
    );
    let mut html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:sans-serif;max-width:720px;margin:2em auto}}pre{{background:#f4f4f4;padding:1em;overflow:auto;font-size:12px}}</style>\
         </head><body><h1>{t}</h1>",
        t = escape(&title)
    );
    for k in [
        "events",
        "expected_deliveries",
        "delivered",
        "lost",
        "duplicates",
        "early_retries",
        "invalid_signatures",
        "throughput_per_s",
    ] {
        if let Some(v) = report.get(k) {
            let _ = write!(html, "<b>{k}</b>: {} &nbsp; ", escape(&v.to_string()));
        }
    }
    for o in phases {
        html += &phase(o);
    }
    let _ = write!(
        html,
        "<h2>report.json</h2><pre>{}</pre></body></html>",
        escape(&serde_json::to_string_pretty(report).unwrap_or_default())
    );
    html
}
