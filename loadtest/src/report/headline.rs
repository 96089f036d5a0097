//! The one figure each scenario exists to measure, named: `report.json`'s top-level
//! `headline` (the page's first line). A scenario's other top-level figures (`throughput_per_s`,
//! `latency_ms`) are the common contract's and mean the same in every report; the relay's, for
//! one, are its paced latency phase, while its headline is the backlog drain.

use serde::{Deserialize, Serialize};

use super::RunReport;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeadlineFigure {
    /// The figure's key (`drain_rows_per_s`, `latency_p99_ms`, …).
    pub name: String,
    /// `null` when the run did not reach it (an endpoint that never came back, say).
    pub value: Option<f64>,
    pub unit: String,
    /// What it measures, in a sentence.
    pub measures: String,
}

fn figure(name: &str, value: Option<f64>, unit: &str, measures: String) -> HeadlineFigure {
    HeadlineFigure {
        name: name.into(),
        value,
        unit: unit.into(),
        measures,
    }
}

impl RunReport {
    /// The scenario's headline figure.
    pub fn headline_figure(&self) -> HeadlineFigure {
        match self {
            Self::Relay(r) => {
                let best = r.throughput.iter().max_by(|a, b| a.throughput_per_s.total_cmp(&b.throughput_per_s));
                figure(
                    "drain_rows_per_s",
                    best.map(|d| d.throughput_per_s),
                    "rows/s",
                    match best {
                        Some(d) => format!(
                            "outbox rows shipped to Kafka per second draining a {}-row backlog with {} relay(s), the best of the drains",
                            d.events, d.relays
                        ),
                        None => "outbox rows shipped to Kafka per second draining a backlog".into(),
                    },
                )
            }
            Self::Steady(r) => figure(
                "latency_p99_ms",
                Some(r.contract.latency_ms.p99),
                "ms",
                format!(
                    "p99 outbox commit → first 2xx at {} events/s to {} endpoint(s)",
                    r.figures.steady.rate_per_s, r.figures.steady.endpoints
                ),
            ),
            Self::Max(r) => figure(
                "sustainable_rate_events_per_s",
                Some(r.figures.max.sustainable_rate_events_per_s),
                "events/s",
                format!(
                    "the highest rate producers commit at that delivery keeps up with, {} endpoint(s) per event",
                    r.figures.max.endpoints
                ),
            ),
            Self::Fanout(r) => figure(
                "deliveries_per_s",
                Some(r.contract.throughput_per_s),
                "deliveries/s",
                format!(
                    "2xx deliveries per second draining the backlog, fan-out {}",
                    r.figures
                        .fanout
                        .iter()
                        .map(|p| p.phase.as_str())
                        .collect::<Vec<_>>()
                        .join(", then ")
                ),
            ),
            Self::NoisyNeighbour(r) => figure(
                "healthy_p99_ratio",
                Some(r.figures.noisy_neighbour.p99_ratio_with_over_without),
                "×",
                "the healthy endpoints' p99 beside a black hole ÷ their p99 without it".into(),
            ),
            Self::OutageRecovery(r) => {
                let o = &r.figures.outage_recovery;
                figure(
                    "recovered_max_rate_over_5s_per_s",
                    o.after_recovery.as_ref().map(|a| a.max_rate_over_5s_per_s),
                    "requests/s",
                    format!(
                        "the highest 5 s request rate at the endpoint after its {} s outage (limit {}/s)",
                        o.outage_s, o.rate_limit_per_s
                    ),
                )
            }
            Self::Fleet(r) => figure(
                "lost",
                Some((r.contract.lost + r.contract.early_retries + r.contract.invalid_signatures) as f64),
                "deliveries",
                "deliveries lost, retries early and signatures invalid across every receiver behaviour".into(),
            ),
            Self::Crash(r) => figure(
                "lost",
                Some(r.contract.lost as f64),
                "deliveries",
                format!(
                    "deliveries never answered 2xx after {} SIGKILLs of the relay and the dispatcher",
                    r.figures.crash.kills.len()
                ),
            ),
            Self::Chaos(r) | Self::BrokerKill(r) => {
                let l = &r.figures.chaos.lost;
                figure(
                    "lost",
                    Some(
                        (l.events_not_shipped
                            + l.deliveries
                            + l.rejections_not_dead_lettered
                            + l.dead_letters_not_stored) as f64,
                    ),
                    "records",
                    "events, deliveries and dead letters lost at any stage under every fault".into(),
                )
            }
            Self::Autoscale(r) => figure(
                "lag_recovered_s",
                r.figures.autoscale.autoscaled.lag_recovered_s,
                "s",
                format!(
                    "from a step to {} events/s until the lag stayed under the threshold, autoscaled (fixed: {})",
                    r.figures.autoscale.rate_per_s,
                    r.figures
                        .autoscale
                        .fixed
                        .lag_recovered_s
                        .map(|s| format!("{s:.0} s"))
                        .unwrap_or_else(|| "never".into())
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::report::fixtures;
    use crate::report::RunReport;

    #[test]
    fn the_relay_headline_is_its_best_drain_not_its_paced_phase() {
        let mut run = fixtures::relay([0, 0]);
        if let RunReport::Relay(r) = &mut run {
            r.throughput[1].throughput_per_s = 250.0;
            assert_eq!(r.throughput_per_s, 10.0, "the paced phase's figure");
        }
        let h = run.headline_figure();
        assert_eq!(
            (h.name.as_str(), h.value, h.unit.as_str()),
            ("drain_rows_per_s", Some(250.0), "rows/s")
        );
        assert!(h.measures.contains("with 2 relay(s)"), "{}", h.measures);
    }

    #[test]
    fn every_scenario_names_its_headline() {
        for run in [
            fixtures::steady(),
            fixtures::outage(100.0),
            fixtures::relay([0, 0]),
            fixtures::chaos(),
            fixtures::autoscale(Some(100.0), Some(300.0)),
        ] {
            let h = run.headline_figure();
            assert!(
                !h.name.is_empty() && !h.unit.is_empty() && !h.measures.is_empty(),
                "{h:?}"
            );
            assert!(h.value.is_some(), "{}: {h:?}", run.scenario());
        }
    }
}
