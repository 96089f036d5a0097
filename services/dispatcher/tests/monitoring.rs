//! The dashboard and the alert rules cannot rot: every metric they use (name and labels) is
//! exported by the running services, scraped over HTTP as Prometheus does. The lag gauges are
//! exported for every consumer group (events, retry tiers, DLQ sink), never vanish between
//! scrapes while a partition is owned, and read 0 once the pipeline is idle.
//!
//! The dashboard is `helm/hookstream/dashboards/hookstream.json`, the rules
//! `helm/hookstream/alerts/*.yml`. A metric is required by name exactly as written (a
//! histogram's `_bucket`, `_count`); its labels are those its selector matches (`=`, `=~`) and
//! those an aggregation's `by (…)` groups on when the aggregated expression holds that one
//! metric alone. `job`, `instance` (added by Prometheus) and `le` are not the services'.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hookstream_store::outbox::NewEvent;
use hookstream_telemetry::Health;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::common;

/// Metric name → label names, from a scrape (or from what the dashboard and rules use).
type Metrics = BTreeMap<String, BTreeSet<String>>;

fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../helm/hookstream")
}

/// Every PromQL expression of the dashboard and the rule files.
fn expressions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let dashboard = chart_dir().join("dashboards/hookstream.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dashboard).unwrap()).unwrap();
    fn walk(v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(m) => {
                if let (Some(serde_json::Value::String(e)), true) = (m.get("expr"), m.contains_key("refId")) {
                    out.push(("dashboard".into(), e.clone()));
                }
                m.values().for_each(|v| walk(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(&json, &mut out);
    let dashboard_exprs = out.len();
    assert!(
        dashboard_exprs > 30,
        "the dashboard's queries were found ({dashboard_exprs})"
    );
    for entry in std::fs::read_dir(chart_dir().join("alerts")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let exprs = rule_expressions(&text);
        let alerts = text
            .lines()
            .filter(|l| l.trim_start().starts_with("- alert:"))
            .count();
        assert_eq!(
            exprs.len(),
            alerts,
            "one expression per alert in {}",
            path.display()
        );
        out.extend(exprs.into_iter().map(|e| (path.display().to_string(), e)));
    }
    out
}

/// The `expr:` values of a rules file (one line, or a `|` block).
fn rule_expressions(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        if let Some(rest) = line.trim_start().strip_prefix("expr:") {
            let rest = rest.trim();
            if rest == "|" {
                let mut block = Vec::new();
                i += 1;
                while i < lines.len()
                    && (lines[i].trim().is_empty() || lines[i].len() - lines[i].trim_start().len() > indent)
                {
                    block.push(lines[i].trim());
                    i += 1;
                }
                out.push(block.join(" "));
                continue;
            }
            out.push(rest.to_string());
        }
        i += 1;
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Metrics (ours: `hookstream_*`, `kafka_*`) and the labels one expression requires of them.
fn required(expr: &str, into: &mut Metrics) {
    let chars: Vec<char> = expr.chars().collect();
    let word_at = |i: usize| -> (String, usize) {
        let mut j = i;
        while j < chars.len() && is_ident(chars[j]) {
            j += 1;
        }
        (chars[i..j].iter().collect(), j)
    };
    let skip_ws = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        i
    };
    // The index after the parenthesis that closes the one at `open`.
    let close = |open: usize| {
        let mut depth = 0;
        for (k, c) in chars.iter().enumerate().skip(open) {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return k + 1;
                    }
                }
                _ => {}
            }
        }
        chars.len()
    };
    let ours = |w: &str| w.starts_with("hookstream_") || w.starts_with("kafka_");
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            // Skip strings (label values, Grafana variables).
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        // Ranges, and matchers (read with their metric below): label names, not metrics.
        if c == '[' || c == '{' {
            let closing = if c == '[' { ']' } else { '}' };
            while i < chars.len() && chars[i] != closing {
                i += 1;
            }
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_') || (i > 0 && is_ident(chars[i - 1])) {
            i += 1;
            continue;
        }
        let (word, end) = word_at(i);
        if ours(&word) {
            let labels = into.entry(word.clone()).or_default();
            let j = skip_ws(end);
            if j < chars.len() && chars[j] == '{' {
                let inner: String = chars[j + 1..].iter().take_while(|c| **c != '}').collect();
                for matcher in inner.split(',') {
                    let name: String = matcher.trim().chars().take_while(|c| is_ident(*c)).collect();
                    let op = matcher.trim()[name.len()..].trim_start();
                    if !name.is_empty()
                        && (op.starts_with("=~") || (op.starts_with('=') && !op.starts_with("=\"\"")))
                    {
                        labels.insert(name);
                    }
                }
            }
        } else if ["on", "ignoring", "group_left", "group_right", "without"].contains(&word.as_str())
            && skip_ws(end) < chars.len()
            && chars[skip_ws(end)] == '('
        {
            // A list of label names.
            i = close(skip_ws(end));
            continue;
        } else if word == "by" {
            let j = skip_ws(end);
            if j < chars.len() && chars[j] == '(' {
                let list_end = close(j);
                let grouped: Vec<String> = chars[j + 1..list_end - 1]
                    .iter()
                    .collect::<String>()
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect();
                let k = skip_ws(list_end);
                if k < chars.len() && chars[k] == '(' {
                    let arg: String = chars[k..close(k)].iter().collect();
                    let mut names = BTreeSet::new();
                    let mut inner = Metrics::new();
                    required(&arg, &mut inner);
                    names.extend(inner.keys().cloned());
                    let words: BTreeSet<&str> = arg.split(|c: char| !is_ident(c)).collect();
                    let relabels = [
                        "label_replace",
                        "label_join",
                        "absent",
                        "vector",
                        "on",
                        "group_left",
                    ]
                    .iter()
                    .any(|f| words.contains(f));
                    if names.len() == 1 && !relabels {
                        let metric = names.into_iter().next().unwrap();
                        into.entry(metric).or_default().extend(grouped);
                    }
                }
                i = list_end;
                continue;
            }
        }
        i = end;
    }
}

/// A `/metrics` scrape: series name → label names, and the text.
async fn scrape(addr: SocketAddr) -> (Metrics, String) {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("scrape body");
    (parse(&text), text)
}

/// The metric names of a text exposition, with the label names each carries.
fn parse(text: &str) -> Metrics {
    let mut out = Metrics::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let set = out.entry(name.to_string()).or_default();
        for pair in labels.trim_end_matches('}').split("\",") {
            if let Some((k, _)) = pair.split_once('=') {
                set.insert(k.trim().to_string());
            }
        }
    }
    out
}

/// Sum (or max) of a gauge's samples whose label text contains every `filter`.
fn samples(text: &str, name: &str, filter: &[&str]) -> Vec<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| filter.iter().all(|f| l.contains(f)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect()
}

/// The admin listener each service's `main` runs (`run_service`), on port 0.
async fn serve_admin(
    service: &'static str,
    registry: prometheus::Registry,
    health: Health,
    stop: &CancellationToken,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(hookstream_telemetry::serve_admin(
        service,
        listener,
        registry,
        health,
        stop.clone(),
    ));
    addr
}

#[test]
fn the_extraction_finds_names_selector_labels_and_grouping() {
    let mut m = Metrics::new();
    required(
        r#"count by (consumergroup, topic) (count by (consumergroup, topic, partition) (kafka_consumergroup_lag{role="events",x!="y"}[5m]))
           and sum by (hookstream_service) (hookstream_ready * on (instance) group_left (hookstream_service) hookstream_build_info)"#,
        &mut m,
    );
    let labels = |n: &str| m[n].iter().cloned().collect::<Vec<_>>();
    assert_eq!(
        labels("kafka_consumergroup_lag"),
        ["consumergroup", "partition", "role", "topic"]
    );
    assert!(
        labels("hookstream_ready").is_empty(),
        "a join's grouping is not claimed"
    );
    assert!(labels("hookstream_build_info").is_empty());
    assert_eq!(m.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alerts_use_is_exported() {
    let env = TestEnv::new(3).await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    let stop = CancellationToken::new();

    let (relay_registry, relay_health) = (prometheus::Registry::new(), Health::default());
    let relay_admin = serve_admin(
        "outbox-relay",
        relay_registry.clone(),
        relay_health.clone(),
        &stop,
    )
    .await;
    let relay_cfg = outbox_relay::Config {
        database: env.database.clone(),
        secrets: env.secrets.clone(),
        kafka: env.kafka.clone(),
        ..Default::default()
    };
    let t = stop.clone();
    tokio::spawn(async move {
        outbox_relay::run(relay_cfg, &relay_registry, relay_health, t)
            .await
            .expect("relay runs")
    });

    let (registry, health) = (prometheus::Registry::new(), Health::default());
    let dispatcher_admin = serve_admin("dispatcher", registry.clone(), health.clone(), &stop).await;
    let cfg = common::retrying_config(&env, vec![1_000, 5_000]);
    let t = stop.clone();
    tokio::spawn(async move {
        dispatcher::run(cfg, &registry, health, t)
            .await
            .expect("dispatcher runs")
    });

    let tenant = env.tenant("monitoring").await.unwrap();
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    env.publish(&[NewEvent::new(tenant, "order.created", json!({}))])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(60), || async { receiver.count() == 1 }).await,
        "delivered"
    );

    // Every group measured its lag at least once (every 5 s), and both services are ready.
    let roles = ["role=\"events\"", "role=\"retry\"", "role=\"dlq_sink\""];
    assert!(
        eventually(Duration::from_secs(30), || async {
            let (_, text) = scrape(dispatcher_admin).await;
            roles
                .iter()
                .all(|r| !samples(&text, "kafka_consumergroup_lag", &[r]).is_empty())
                && text.lines().any(|l| l == "hookstream_ready 1")
        })
        .await,
        "lag exported for the events, retry and DLQ-sink groups; ready"
    );
    // Idle: lag 0 in messages and seconds for the events group.
    assert!(
        eventually(Duration::from_secs(30), || async {
            let (_, text) = scrape(dispatcher_admin).await;
            let lag = samples(&text, "kafka_consumergroup_lag", &[roles[0]]);
            let secs = samples(&text, "hookstream_consumer_lag_seconds", &[roles[0]]);
            lag.len() == 3 && lag.iter().all(|v| *v == 0.0) && secs.iter().all(|v| *v == 0.0)
        })
        .await,
        "the events group's lag reads 0 once idle"
    );

    // Scrape across several lag measurements: the series never vanish, stay 0, and the union
    // of what was exported is what the dashboard and the rules may use.
    let mut exported = Metrics::new();
    for _ in 0..12 {
        for addr in [relay_admin, dispatcher_admin] {
            let (m, text) = scrape(addr).await;
            if addr == dispatcher_admin {
                for role in roles {
                    assert!(
                        !samples(&text, "kafka_consumergroup_lag", &[role]).is_empty()
                            && !samples(&text, "hookstream_consumer_lag_seconds", &[role]).is_empty(),
                        "{role}: lag series present in every scrape"
                    );
                }
                let lag = samples(&text, "kafka_consumergroup_lag", &[roles[0]]);
                assert_eq!(
                    lag,
                    vec![0.0; 3],
                    "idle events lag stays 0, one series per partition"
                );
                assert_eq!(
                    samples(&text, "hookstream_consumer_topic_partitions", &[roles[0]]),
                    vec![3.0],
                    "the events topic's partition count"
                );
            }
            for (name, labels) in m {
                exported.entry(name).or_default().extend(labels);
            }
        }
        tokio::time::sleep(Duration::from_millis(1_000)).await;
    }

    // The API's own series (its label-free counters exist from registration on): what the
    // API alerts use. The API process is tested on its own; its registry is the same code.
    let api_registry = prometheus::Registry::new();
    api::metrics::ApiMetrics::register(&api_registry);
    let api_text = prometheus::TextEncoder::new()
        .encode_to_string(&api_registry.gather())
        .expect("encodes");
    for (name, labels) in parse(&api_text) {
        exported.entry(name).or_default().extend(labels);
    }

    let mut missing = Vec::new();
    let mut checked = 0;
    for (source, expr) in expressions() {
        let mut used = Metrics::new();
        required(&expr, &mut used);
        for (name, labels) in used {
            checked += 1;
            match exported.get(&name) {
                None => missing.push(format!("{source}: {name} is not exported (in `{expr}`)")),
                Some(have) => {
                    for label in labels
                        .iter()
                        .filter(|l| !["job", "instance", "le"].contains(&l.as_str()))
                    {
                        if !have.contains(label) {
                            missing.push(format!("{source}: {name} has no label {label} (in `{expr}`)"));
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 60, "the expressions named our metrics ({checked})");
    assert!(
        missing.is_empty(),
        "used but not exported:\n{}",
        missing.join("\n")
    );
    stop.cancel();
}
