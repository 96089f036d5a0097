//! How fast the portal's pages are with 100,000 events in the delivery log (issue 16: under
//! 200 ms server time). Ignored by default (it fills a database for a minute and asserts no
//! timing); run it with
//!
//! ```text
//! cargo test -p api --test integration portal_bench:: -- --ignored --nocapture
//! ```
//!
//! (the test profile: the workspace at opt-level 1, dependencies at 2; `--release` is faster). It
//! stores 100,000 messages of one tenant over the last 24 hours, one attempt each (spread over
//! 5 endpoints, 10 % failed with a 500 and a body) through `attempts::insert_many` (so the
//! per-minute statistics the charts read are filled too), then times every page 20 times from a
//! client on loopback (wall time of the whole request: an upper bound of the server's time) and
//! prints the median and the slowest.

use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use hookstream_store::attempts::{self, NewAttempt};
use hookstream_testkit::TestEnv;
use reqwest::{Method, StatusCode};
use serde_json::json;
use uuid::{NoContext, Timestamp, Uuid};

use crate::common;

const EVENTS: usize = 100_000;
const ENDPOINTS: usize = 5;
const RUNS: usize = 20;

/// 1 % of the events are of a rare type (the event-type filter's worst case: a long scan).
fn event_type_of(id: &Uuid) -> String {
    if id.as_bytes()[15].is_multiple_of(100) {
        "invoice.paid".into()
    } else {
        "order.created".into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: fills 100,000 events; run with --ignored --nocapture"]
async fn portal_pages_with_100k_events() {
    let env = TestEnv::new(1).await.unwrap();
    let mut cfg = common::api_config(&env);
    cfg.api.portal_rate_per_s = 0; // timing, not rate limiting
    let api = common::Api::start(cfg).await;
    let (_, app) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "Bench", "uid": "bench"})),
        )
        .await;
    let tenant: Uuid = app["id"].as_str().unwrap().parse().unwrap();
    api.op(
        Method::POST,
        "/api/v1/event-type",
        Some(json!({"name": "order.created", "description": "x",
                    "schemas": {"1": {"examples": [{"orderId": "o-1"}]}}})),
    )
    .await;
    let mut endpoints = Vec::new();
    for i in 0..ENDPOINTS {
        let (s, ep) = api
            .op(
                Method::POST,
                "/api/v1/app/bench/endpoint",
                Some(json!({"url": format!("https://example.com/hook/{i}")})),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{ep}");
        endpoints.push(ep["id"].as_str().unwrap().parse::<Uuid>().unwrap());
    }

    let fill = Instant::now();
    let now = Utc::now();
    for day in [now - TimeDelta::days(1), now] {
        attempts::ensure_partition(&env.pool, day.date_naive())
            .await
            .unwrap();
    }
    let span_ms = 86_000_000i64; // a little under 24 h
    let mut ids = Vec::with_capacity(EVENTS);
    for i in 0..EVENTS {
        let at = now - TimeDelta::milliseconds(span_ms * i as i64 / EVENTS as i64) - TimeDelta::seconds(5);
        let ts = Timestamp::from_unix(NoContext, at.timestamp() as u64, at.timestamp_subsec_nanos());
        ids.push((Uuid::new_v7(ts), at));
    }
    for chunk in ids.chunks(5_000) {
        let event_ids: Vec<Uuid> = chunk.iter().map(|c| c.0).collect();
        let times: Vec<chrono::DateTime<Utc>> = chunk
            .iter()
            .map(|c| hookstream_store::messages::v7_time(c.0).unwrap())
            .collect();
        hookstream_store::sqlx::query(
            "INSERT INTO hookstream.messages (tenant_id, event_id, created_at, event_type, aggregate_type,
                                              aggregate_id, payload)
             SELECT $1, e, t, ty, 'order', 'o-' || e::text, jsonb_build_object('orderId', e::text)
               FROM unnest($2::uuid[], $3::timestamptz[], $4::text[]) AS x(e, t, ty)",
        )
        .bind(tenant)
        .bind(&event_ids)
        .bind(&times)
        .bind(chunk.iter().map(|c| event_type_of(&c.0)).collect::<Vec<_>>())
        .execute(&env.pool)
        .await
        .unwrap();
    }
    for (n, chunk) in ids.chunks(1_000).enumerate() {
        let rows: Vec<NewAttempt> = chunk
            .iter()
            .enumerate()
            .map(|(j, (id, at))| {
                let i = n * 1_000 + j;
                let failed = i % 10 == 0;
                NewAttempt {
                    started_at: *at + TimeDelta::milliseconds(50),
                    event_id: *id,
                    endpoint_id: endpoints[i % ENDPOINTS],
                    attempt: 1,
                    tenant_id: tenant,
                    trigger: "first".into(),
                    duration_ms: 5 + (i % 200) as i32,
                    status: Some(if failed { 500 } else { 200 }),
                    outcome: if failed {
                        "permanent".into()
                    } else {
                        "delivered".into()
                    },
                    error_class: if failed { "http_5xx".into() } else { String::new() },
                    error: String::new(),
                    response_headers: vec![("content-type".into(), "text/plain".into())],
                    response_body: Some(if failed { b"boom".to_vec() } else { b"ok".to_vec() }),
                    response_truncated: false,
                    next: if failed {
                        "dead_lettered".into()
                    } else {
                        "delivered".into()
                    },
                    next_due_at: None,
                    next_tier: None,
                    event_type: Some(event_type_of(id)),
                    aggregate_id: None,
                    payload_bytes: Some(40),
                    committed_at: None,
                    relayed_at: None,
                }
            })
            .collect();
        attempts::insert_many(&env.pool, &rows).await.unwrap();
    }
    for table in ["attempts", "messages", "attempt_stats"] {
        hookstream_store::sqlx::query(&format!("ANALYZE hookstream.{table}"))
            .execute(&env.pool)
            .await
            .unwrap();
    }
    let (messages, attempts): (i64, i64) = hookstream_store::sqlx::query_as(
        "SELECT (SELECT count(*) FROM hookstream.messages WHERE tenant_id = $1),
                (SELECT count(*) FROM hookstream.attempts WHERE tenant_id = $1)",
    )
    .bind(tenant)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!((messages, attempts), (EVENTS as i64, EVENTS as i64));
    println!(
        "filled {messages} messages and {attempts} attempts in {:.1} s",
        fill.elapsed().as_secs_f64()
    );

    let (cookie, _) = common::portal_session(&api, "bench", false).await;
    let http = reqwest::Client::new();
    let get = |path: String| {
        let req = http
            .get(format!("{}{path}", api.base))
            .header("cookie", cookie.clone());
        async move {
            let start = Instant::now();
            let r = req.send().await.unwrap();
            let status = r.status();
            let body = r.text().await.unwrap();
            (start.elapsed(), status, body)
        }
    };
    // The second page of the log: its "Older" link.
    let (_, _, first) = get("/portal/deliveries".into()).await;
    let older = first
        .split("href=\"")
        .filter_map(|s| s.split('"').next())
        .find(|h| h.contains("cursor="))
        .expect("an older page")
        .replace("&amp;", "&");
    let (old_event, _) = ids[EVENTS - 1];
    let (failed_event, _) = ids[0];
    let pages = vec![
        ("endpoints list", "/portal".to_string()),
        (
            "endpoint page (stats + chart)",
            format!("/portal/endpoints/{}", endpoints[0]),
        ),
        ("delivery log", "/portal/deliveries".to_string()),
        ("delivery log, page 2", older),
        (
            "delivery log, failed only",
            "/portal/deliveries?status=failed".to_string(),
        ),
        (
            "delivery log, one endpoint",
            format!("/portal/deliveries?endpoint={}", endpoints[1]),
        ),
        (
            "delivery log, common event type",
            "/portal/deliveries?event_type=order.created".to_string(),
        ),
        (
            "delivery log, rare event type (1 %)",
            "/portal/deliveries?event_type=invoice.paid".to_string(),
        ),
        (
            "delivery log, failed of an endpoint with none",
            format!("/portal/deliveries?status=failed&endpoint={}", endpoints[2]),
        ),
        (
            "delivery log, time window",
            format!(
                "/portal/deliveries?after={}&before={}",
                (now - TimeDelta::hours(13)).format("%Y-%m-%dT%H:%M"),
                (now - TimeDelta::hours(12)).format("%Y-%m-%dT%H:%M")
            ),
        ),
        ("event page (failed)", format!("/portal/events/{failed_event}")),
        ("event page (oldest event)", format!("/portal/events/{old_event}")),
        ("event types", "/portal/event-types".to_string()),
    ];
    println!(
        "{:<46} {:>9} {:>9} {:>6} {:>7}   ({RUNS} runs each)",
        "page", "median", "slowest", "rows", "KiB"
    );
    for (name, path) in pages {
        let mut times: Vec<Duration> = Vec::with_capacity(RUNS);
        let mut rows = 0;
        let mut size = 0;
        for _ in 0..RUNS {
            let (t, status, body) = get(path.clone()).await;
            assert_eq!(status, StatusCode::OK, "{path}: {body}");
            assert!(body.contains("</html>"));
            // Table rows and attempts shown (a page that shows nothing would be fast too).
            rows = body.matches("<tr>").count() + body.matches("<details class=\"attempt\"").count();
            size = body.len();
            times.push(t);
        }
        times.sort();
        println!(
            "{name:<46} {:>7.1}ms {:>7.1}ms {rows:>6} {:>7.1}",
            times[RUNS / 2].as_secs_f64() * 1e3,
            times[RUNS - 1].as_secs_f64() * 1e3,
            size as f64 / 1024.0
        );
    }
}
