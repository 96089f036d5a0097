//! The charts of engine runs: deliveries per second, the latency CDF and backlog/consumer lag
//! of every phase, and overlays across phases. The time charts mark the faults a phase
//! injected: each SIGKILL (by process) and each endpoint coming back after its outage.

use crate::chart::{cdf_of, line_chart, marked_time_chart, Chart, Markers, Points};
use crate::engine::{self, Outcome};

/// The moments of the faults injected in a phase, in seconds since measuring started.
fn fault_markers(o: &Outcome) -> Markers {
    let mut m = Markers::default();
    let kind = |m: &mut Markers, name: String| match m.kinds.iter().position(|k| *k == name) {
        Some(i) => i,
        None => {
            m.kinds.push(name);
            m.kinds.len() - 1
        }
    };
    for k in &o.kills {
        let i = kind(&mut m, format!("SIGKILL {}", k.process));
        m.at.push((k.at_s, i));
    }
    for at in o.recovered_at_ms.iter().flatten() {
        let i = kind(&mut m, "endpoint back up".into());
        m.at.push(((at - o.started_ms) / 1000.0, i));
    }
    m
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
        let faults = fault_markers(o);
        out.push(marked_time_chart(
            &format!("{}-throughput", o.label),
            &format!("{}: throughput over time", o.label),
            (SINCE, "per second"),
            vec![
                ("2xx deliveries/s".into(), delivered),
                ("requests/s".into(), requests),
            ],
            &faults,
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
        out.push(marked_time_chart(
            &format!("{}-backlog", o.label),
            &format!("{}: backlog and consumer lag over time", o.label),
            (SINCE, "rows / messages"),
            vec![
                ("outbox (or queue) rows".into(), backlog),
                ("consumer lag (messages)".into(), lag),
            ],
            &faults,
        ));
    }
    out
}
