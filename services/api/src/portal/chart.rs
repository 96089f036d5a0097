//! An endpoint's last 24 hours as inline SVG, drawn on the server: attempts per hour (delivered
//! and failed, stacked bars) and the p50/p99 latency per hour (lines, on their own scale).
//! Colours come from the stylesheet (classes), so the CSP needs no inline style. A table of
//! the same figures follows for screen readers.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use hookstream_store::attempt_stats::Point;
use maud::{html, Markup};

const W: f64 = 720.0;
const H: f64 = 180.0;
const LEFT: f64 = 40.0;
const RIGHT: f64 = 40.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 24.0;

/// The 24 hour steps ending with the current one, each with its point (if any attempt).
fn hours(points: &[Point], now: DateTime<Utc>) -> Vec<(DateTime<Utc>, Option<&Point>)> {
    let this_hour = now.duration_trunc(TimeDelta::hours(1)).unwrap_or(now);
    (0..24)
        .rev()
        .map(|i| {
            let start = this_hour - TimeDelta::hours(i);
            (start, points.iter().find(|p| p.start == start))
        })
        .collect()
}

/// A coordinate as SVG text.
fn f(v: f64) -> String {
    format!("{v:.1}")
}

pub fn render(points: &[Point], now: DateTime<Utc>) -> Markup {
    let steps = hours(points, now);
    let max_n = steps
        .iter()
        .filter_map(|(_, p)| p.map(|p| p.attempts))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let max_ms = steps
        .iter()
        .filter_map(|(_, p)| p.map(|p| p.p99_ms))
        .fold(1.0_f64, f64::max);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let slot = plot_w / steps.len() as f64;
    let y_n = |n: f64| TOP + plot_h - n / max_n * plot_h;
    let y_ms = |ms: f64| TOP + plot_h - ms / max_ms * plot_h;
    let line = |pick: fn(&Point) -> f64| -> String {
        steps
            .iter()
            .enumerate()
            .filter_map(|(i, (_, p))| p.map(|p| (i, pick(p))))
            .map(|(i, v)| format!("{:.1},{:.1}", LEFT + slot * (i as f64 + 0.5), y_ms(v)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let total: i64 = steps.iter().filter_map(|(_, p)| p.map(|p| p.attempts)).sum();
    let delivered: i64 = steps.iter().filter_map(|(_, p)| p.map(|p| p.delivered)).sum();
    let summary = format!(
        "{total} attempts in the last 24 hours, {delivered} delivered; busiest hour {} attempts; slowest hourly p99 {:.0} ms",
        max_n as i64, max_ms
    );
    html! {
        figure.chart {
            svg.chart viewBox=(format!("0 0 {W} {H}")) role="img" aria-label=(summary) xmlns="http://www.w3.org/2000/svg" {
                title { (summary) }
                line.axis x1=(f(LEFT)) y1=(f(TOP + plot_h)) x2=(f(W - RIGHT)) y2=(f(TOP + plot_h)) {}
                line.axis x1=(f(LEFT)) y1=(f(TOP)) x2=(f(LEFT)) y2=(f(TOP + plot_h)) {}
                text x="2" y=(f(TOP + 10.0)) { (max_n as i64) }
                text x="2" y=(f(TOP + plot_h)) { "0" }
                text x=(f(W - RIGHT + 4.0)) y=(f(TOP + 10.0)) { (format!("{max_ms:.0}ms")) }
                @for (i, (start, p)) in steps.iter().enumerate() {
                    @let x = LEFT + slot * i as f64 + 1.0;
                    @if let Some(p) = p {
                        @let failed = (p.attempts - p.delivered).max(0) as f64;
                        @let ok_top = y_n(p.delivered as f64);
                        @let bad_top = y_n(p.delivered as f64 + failed);
                        rect.ok x=(format!("{x:.1}")) y=(format!("{ok_top:.1}")) width=(format!("{:.1}", slot - 2.0)) height=(format!("{:.1}", TOP + plot_h - ok_top)) {
                            title { (format!("{} UTC: {} delivered", start.format("%H:00"), p.delivered)) }
                        }
                        @if failed > 0.0 {
                            rect.bad x=(format!("{x:.1}")) y=(format!("{bad_top:.1}")) width=(format!("{:.1}", slot - 2.0)) height=(format!("{:.1}", ok_top - bad_top)) {
                                title { (format!("{} UTC: {} failed", start.format("%H:00"), failed)) }
                            }
                        }
                    }
                    @if i % 4 == 0 {
                        text x=(format!("{x:.1}")) y=(f(H - 6.0)) { (start.format("%H:00")) }
                    }
                }
                polyline.p50 points=(line(|p| p.p50_ms)) {}
                polyline.p99 points=(line(|p| p.p99_ms)) {}
            }
            figcaption.legend {
                span.k-ok { "■ delivered" } span.k-bad { "■ failed" }
                span.k-p50 { "— p50 latency" } span.k-p99 { "- - p99 latency" }
                span.muted { "(hours in UTC; bars: attempts, left scale; lines: latency, right scale)" }
            }
            details {
                summary { "The figures as a table" }
                table {
                    thead { tr { th { "Hour (UTC)" } th.num { "Attempts" } th.num { "Delivered" } th.num { "p50 ms" } th.num { "p99 ms" } } }
                    tbody {
                        @for (start, p) in steps.iter().filter(|(_, p)| p.is_some()) {
                            @if let Some(p) = p {
                                tr {
                                    td { (start.format("%Y-%m-%d %H:00")) }
                                    td.num { (p.attempts) }
                                    td.num { (p.delivered) }
                                    td.num { (format!("{:.0}", p.p50_ms)) }
                                    td.num { (format!("{:.0}", p.p99_ms)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_24_hours_and_escapes_nothing_it_did_not_make() {
        let now = Utc::now();
        let start = now.duration_trunc(TimeDelta::hours(1)).unwrap();
        let p = Point {
            start,
            attempts: 10,
            delivered: 7,
            p50_ms: 12.0,
            p99_ms: 80.0,
        };
        let svg = render(&[p], now).into_string();
        assert!(svg.contains("<svg"));
        assert!(svg.contains("class=\"ok\"") && svg.contains("class=\"bad\""));
        assert!(svg.contains("10 attempts in the last 24 hours, 7 delivered"));
        assert!(!svg.contains("style="), "no inline style: the CSP forbids it");
        let empty = render(&[], now).into_string();
        assert!(empty.contains("0 attempts"));
    }
}
