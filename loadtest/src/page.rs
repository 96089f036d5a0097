//! `report.html`: one self-contained page (inline SVG, no scripts, no network): the headline
//! figures, the baseline comparison, the charts, and the JSON report.

use std::fmt::Write as _;

use crate::chart::{escape, num, Chart};
use crate::report::{AutoscaleFigures, ChaosFigures, Headline, Report, RunReport};

/// A count, a figure, or "–" where the report has none.
fn cell(v: Option<f64>) -> String {
    v.map(num).unwrap_or_else(|| "–".into())
}

fn row(html: &mut String, name: &str, h: &Headline) {
    let count = |n: usize| cell(Some(n as f64));
    let _ = write!(
        html,
        "<tr><td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        escape(name),
        count(h.delivered),
        count(h.expected_deliveries),
        count(h.lost),
        count(h.duplicates),
        cell(h.early_retries.map(|n| n as f64)),
        cell(h.invalid_signatures.map(|n| n as f64)),
        cell(Some(h.throughput_per_s)),
        cell(Some(h.latency_ms.p50)),
        cell(Some(h.latency_ms.p99)),
        cell(Some(h.latency_ms.max)),
    );
}

fn summary(report: &Report) -> String {
    let h = &report.headline;
    let mut html = format!(
        "<p class=\"headline\"><b>{}</b>: {} {} — {}</p>",
        escape(&h.name),
        cell(h.value),
        escape(&h.unit),
        escape(&h.measures)
    );
    html.push_str(
        "<table><tr><th>system</th><th>delivered / expected</th><th>lost</th><th>duplicates</th>\
         <th>early retries</th><th>invalid signatures</th><th>throughput/s</th><th>p50 ms</th><th>p99 ms</th><th>max ms</th></tr>",
    );
    row(&mut html, "Hookstream", &report.figures.headline());
    let mut ratios = String::new();
    for (variant, b) in report.figures.baseline().into_iter().flatten() {
        row(&mut html, &format!("baseline, {variant}"), &b.headline());
        let r = &b.hookstream_over_baseline;
        let _ = write!(
            ratios,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(variant),
            cell(r.throughput_per_s),
            cell(r.latency_p50),
            cell(r.latency_p99),
        );
    }
    html.push_str("</table>");
    if !ratios.is_empty() {
        let _ = write!(
            html,
            "<h3>Hookstream ÷ baseline</h3><p>Above 1 for throughput and below 1 for latency favour Hookstream.</p>\
             <table><tr><th>baseline</th><th>throughput</th><th>p50</th><th>p99</th></tr>{ratios}</table>"
        );
    }
    if let RunReport::Chaos(r) | RunReport::BrokerKill(r) = &report.figures {
        html += &chaos_table(&r.figures.chaos);
    }
    if let RunReport::Autoscale(r) = &report.figures {
        html += &autoscale_table(&r.figures.autoscale);
    }
    if report.verdict.passed {
        html.push_str("<p><b>Checks passed</b>: nothing lost, no invalid signature, no early retry.</p>");
    } else {
        let _ = write!(
            html,
            "<p><b>Checks failed</b>: {}</p>",
            escape(&serde_json::to_string(&report.verdict.failures).unwrap_or_default())
        );
    }
    if let Some(runs) = report.median_of_runs {
        let _ = write!(
            html,
            "<p>Every number is the median of {} runs.</p>",
            cell(Some(runs as f64))
        );
    }
    html
}

/// The chaos scenario's figures per fault kind.
fn chaos_table(c: &ChaosFigures) -> String {
    let ms = |v: Option<f64>| cell(v);
    let mut html = String::from(
        "<h3>Per fault kind</h3><table><tr><th>fault</th><th>faults</th><th>lost</th>\
         <th>duplicates / ceiling</th><th>by arrival window</th><th>re-shipped / ceiling</th>\
         <th>resume p50 ms</th><th>resume max ms</th></tr>",
    );
    for (kind, k) in &c.per_kind {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} / {}</td><td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td></tr>",
            escape(kind),
            k.faults,
            k.lost,
            k.duplicates,
            k.duplicate_ceiling,
            k.duplicates_in_window,
            k.reshipped_events,
            k.reshipped_ceiling,
            ms(k.resume_ms.p50),
            ms(k.resume_ms.max),
        );
    }
    let l = &c.lost;
    let h = &c.events_role;
    let _ = write!(
        html,
        "</table><p>Lost: {} events not shipped, {} deliveries, {} rejections not dead-lettered, {} dead letters \
         not stored, {} stored twice. Unattributed duplicates: {}. Services that exited by themselves: {}. \
         Events role alone: SIGKILL resume max {} ms (limit {}), SIGTERM hand-over max {} ms (limit {}). \
         After the producers stopped: deliveries drained in {} s, dead letters stored in {} s ({} were \
         waiting).</p>",
        l.events_not_shipped,
        l.deliveries,
        l.rejections_not_dead_lettered,
        l.dead_letters_not_stored,
        l.dead_letters_stored_twice,
        c.unattributed_duplicates,
        c.crashes.len(),
        ms(h.sigkill_resume_max_ms),
        num(h.sigkill_limit_ms),
        ms(h.sigterm_handover_max_ms),
        num(h.sigterm_limit_ms),
        ms(c.drain.deliveries_s),
        ms(c.drain.dead_letters_s),
        c.drain.dead_letters_backlog,
    );
    html
}

/// The autoscale scenario's two runs side by side.
fn autoscale_table(a: &AutoscaleFigures) -> String {
    let c = &a.calibration;
    let mut html = format!(
        "<h3>Autoscaling on lag</h3><p>One dispatcher (in-flight cap {}, receivers answering after {} ms): \
         <b>{}</b> events/s measured ({} by Little's law). Step: {} events/s for {} s after {} s idle; \
         {} dispatchers needed. KEDA emulated with the chart's rules, time constants ÷ {}, lag threshold {}.</p>\
         <table><tr><th>run</th><th>replicas max</th><th>scale-out s</th><th>members s</th><th>lag recovered s</th>\
         <th>drained s</th><th>max lag</th><th>max lag s</th><th>lost</th><th>duplicates (after scaling)</th></tr>",
        c.max_in_flight_events,
        c.receiver_delay_ms,
        num(c.capacity_per_s),
        num(c.little_law_per_s),
        a.rate_per_s,
        a.step_s,
        a.idle_s,
        a.needed_replicas,
        num(a.time_scale),
        a.emulated.lag_threshold,
    );
    for p in [&a.autoscaled, &a.fixed] {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ({})</td></tr>",
            escape(&p.label),
            p.replicas_max,
            cell(p.scale_out_s),
            cell(p.members_out_s),
            cell(p.lag_recovered_s),
            cell(p.drained_s),
            p.max_lag_messages,
            num(p.max_lag_s),
            p.lost,
            p.duplicates,
            p.duplicates_after_scaling,
        );
    }
    html.push_str("</table>");
    html
}

const JSON_START: &str = "<h2>report.json</h2><pre>";

/// `page` with its JSON section replaced by `json` (the report as written to `report.json`).
pub fn with_json(page: &str, json: &str) -> String {
    let head = page.split(JSON_START).next().unwrap_or(page);
    format!("{head}{JSON_START}{}</pre></body></html>", escape(json))
}

/// The page of `report`, whose `report.json` text is `json`.
pub fn render(report: &Report, json: &str, charts: &[Chart]) -> String {
    let title = format!("Hookstream load test: {}", report.figures.scenario());
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
    with_json(&html, json)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::report::{fixtures, BaselineFigures, Ratios, RunReport, Verdict};

    fn report(figures: RunReport, failures: &[&str]) -> Report {
        Report {
            headline: figures.headline_figure(),
            figures,
            median_of_runs: None,
            settings_overridden: Vec::new(),
            runs: Vec::new(),
            verdict: Verdict {
                passed: failures.is_empty(),
                failures: failures.iter().map(|f| f.to_string()).collect(),
            },
        }
    }

    #[test]
    fn summary_shows_baseline_ratios() {
        let mut run = fixtures::steady();
        if let RunReport::Steady(r) = &mut run {
            let mut contract = fixtures::contract();
            contract.throughput_per_s = 1000.0;
            r.baseline = Some(BTreeMap::from([(
                "polling_tuned".to_string(),
                BaselineFigures {
                    sleep_ms: 0,
                    pollers: 4,
                    batch: 50,
                    deadline_s: 60,
                    expected_deliveries: 10,
                    delivered: 10,
                    lost: 0,
                    drained: true,
                    duplicates: 0,
                    early_retries: 0,
                    invalid_signatures: 0,
                    duration_s: 1.0,
                    throughput_per_s: 1000.0,
                    latency_ms: fixtures::latency(),
                    processes: BTreeMap::new(),
                    phases: Vec::new(),
                    hookstream_over_baseline: Ratios {
                        throughput_per_s: Some(2.0),
                        latency_p50: Some(0.5),
                        latency_p99: Some(0.25),
                        reads: String::new(),
                    },
                },
            )]));
        }
        let html = summary(&report(run, &[]));
        assert!(html.contains("baseline, polling_tuned"));
        assert!(html.contains("<td>polling_tuned</td><td>2</td><td>0.50</td><td>0.25</td>"));
        assert!(html.contains("<td>Hookstream</td><td>10 / 10</td><td>0</td>"));
        assert!(html.contains("<b>latency_p99_ms</b>: 9 ms"), "{html}");
        assert!(html.contains("Checks passed"));
    }

    #[test]
    fn the_relay_has_no_retries_or_signatures_to_show() {
        let html = summary(&report(
            fixtures::relay([0, 3]),
            &["3 rows lost draining with 2 relay(s)"],
        ));
        assert!(
            html.contains("<td>0</td><td>0</td><td>–</td><td>–</td>"),
            "{html}"
        );
        assert!(html.contains("Checks failed"), "{html}");
        assert!(html.contains("3 rows lost draining with 2 relay(s)"), "{html}");
    }

    #[test]
    fn a_chaos_page_has_its_table() {
        let html = summary(&report(fixtures::chaos(), &[]));
        assert!(
            html.contains("<td>relay_kill</td><td>1</td><td>0</td><td>4 / 40</td><td>4</td><td>1 / 1000</td><td>900</td><td>900</td>"),
            "{html}"
        );
        assert!(
            html.contains("SIGTERM hand-over max 400 ms (limit 1000)"),
            "{html}"
        );
    }

    #[test]
    fn the_json_section_is_replaced() {
        let page = render(&report(fixtures::steady(), &[]), "{\"a\": 1}", &[]);
        assert!(page.contains("{&quot;a&quot;: 1}</pre></body></html>"));
        let again = with_json(&page, "{}");
        assert!(again.ends_with("<pre>{}</pre></body></html>") && !again.contains("&quot;a&quot;"));
    }
}
