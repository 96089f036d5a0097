//! The delivery log on real Kafka and PostgreSQL: every attempt reaches `hookstream.attempts`
//! through the attempt sink with why it was made and what happened next; each (event,
//! endpoint) has a status derived from it; a record read twice is stored once; old days are
//! dropped as whole partitions; per endpoint percentiles follow the receivers' latency; no
//! query shows another tenant's rows.

use std::time::Duration;

use chrono::{Days, Utc};
use hookstream_store::attempts::{self, Filter};
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::fixtures::attempt_row;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use prometheus::Registry;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::common;

async fn stored(env: &TestEnv, filter: Filter) -> Vec<attempts::Attempt> {
    attempts::list(
        &env.pool,
        &Filter {
            limit: 10_000,
            ..filter
        },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivered_retried_and_dead_lettered_deliveries_show_their_attempts_and_status() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let other = env.tenant("other").await.unwrap();
    let ok = Receiver::start(Behaviour::Ok).await;
    let flaky = Receiver::start(Behaviour::FailTimes(1, 503)).await;
    let rejecting = Receiver::start(Behaviour::Status(404)).await;
    let ep_ok = env.endpoint(tenant, &ok, &[]).await.unwrap();
    let ep_flaky = env.endpoint(tenant, &flaky, &[]).await.unwrap();
    let ep_rejecting = env.endpoint(tenant, &rejecting, &[]).await.unwrap();
    let registry = Registry::new();
    let cfg = common::retrying_config(&env, vec![1_000, 2_000]);
    let token = common::start_observed_pipeline(&env, cfg.clone(), registry.clone());
    let ids = env
        .publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();
    let event = ids[0];

    let by_event = Filter {
        event_id: Some(event),
        ..Default::default()
    };
    assert!(
        eventually(Duration::from_secs(40), || async {
            stored(&env, by_event.clone()).await.len() == 4
        })
        .await,
        "four attempts stored (one each, two for the flaky endpoint); got {:?}",
        stored(&env, by_event.clone()).await
    );
    let status = attempts::status(&env.pool, event, Some(tenant)).await.unwrap();
    let state = |ep: Uuid| {
        let s = status
            .iter()
            .find(|s| s.endpoint_id == ep)
            .expect("a status per endpoint");
        (s.state.as_str(), s.attempts, s.last_status)
    };
    assert_eq!(state(ep_ok), ("delivered", 1, Some(204)));
    assert_eq!(state(ep_flaky), ("delivered", 2, Some(204)));
    assert_eq!(state(ep_rejecting), ("dead_lettered", 1, Some(404)));

    let rows = stored(&env, by_event.clone()).await;
    let of = |ep: Uuid, n: i32| {
        rows.iter()
            .find(|a| a.endpoint_id == ep && a.attempt == n)
            .unwrap()
    };
    let first = of(ep_flaky, 1);
    assert_eq!(
        (
            first.trigger.as_str(),
            first.outcome.as_str(),
            first.error_class.as_str()
        ),
        ("first", "retryable", "http_5xx")
    );
    assert_eq!((first.status, first.next.as_str()), (Some(503), "retry"));
    let due = first.next_due_at.expect("a retry says when");
    let wait = (due - first.started_at).num_milliseconds();
    assert!(
        (1_000..1_500).contains(&wait),
        "due one schedule step (1 s) after the attempt: {wait} ms"
    );
    assert_eq!(first.next_tier.as_deref(), Some("1s"));
    let second = of(ep_flaky, 2);
    assert_eq!(
        (
            second.trigger.as_str(),
            second.outcome.as_str(),
            second.next.as_str()
        ),
        ("retry", "delivered", "delivered")
    );
    assert!(second.started_at >= due, "never early");
    let rejected = of(ep_rejecting, 1);
    assert_eq!(
        (
            rejected.outcome.as_str(),
            rejected.error_class.as_str(),
            rejected.next.as_str()
        ),
        ("permanent", "http_4xx", "dead_lettered")
    );
    let headers = rejected.response_headers.as_array().expect("headers as a list");
    assert!(
        headers.iter().any(|h| h[0] == "content-length"),
        "the receiver's response headers are kept: {headers:?}"
    );
    assert!(rows.iter().all(|a| a.tenant_id == tenant && a.duration_ms >= 0));
    let e = &rows[0];
    // `{"n":1}`: the bytes the producer wrote, exactly what receivers get.
    assert_eq!(
        (e.event_type.as_deref(), e.payload_bytes),
        (Some("order.created"), Some(7))
    );
    let (committed, relayed) = (e.committed_at.unwrap(), e.relayed_at.expect("relay time"));
    assert!(
        committed <= relayed && relayed <= e.started_at,
        "committed, relayed, attempted in order"
    );

    // Another tenant sees none of it.
    let scoped = Filter {
        tenant_id: Some(other),
        ..by_event.clone()
    };
    assert!(
        stored(&env, scoped).await.is_empty(),
        "a tenant filter never shows another tenant's rows"
    );
    assert!(attempts::status(&env.pool, event, Some(other))
        .await
        .unwrap()
        .is_empty());
    let five_xx = Filter {
        status_class: Some(5),
        ..by_event.clone()
    };
    assert_eq!(stored(&env, five_xx).await.len(), 1, "filtered by status class");
    assert_eq!(
        common::metric(
            &registry,
            "hookstream_attempt_sink_rows_total",
            &[("result", "stored")]
        ),
        4.0
    );
    token.cancel();
    // The per endpoint statistics count what was stored, once.
    let since = Utc::now() - chrono::Duration::hours(2);
    let counts = |stats: Vec<attempts::EndpointStats>| -> Vec<(Uuid, i64, i64)> {
        let mut v: Vec<_> = stats
            .iter()
            .map(|s| (s.endpoint_id, s.attempts, s.delivered))
            .collect();
        v.sort();
        v
    };
    let before = counts(
        attempts::endpoint_stats(&env.pool, Some(tenant), since)
            .await
            .unwrap(),
    );
    let mut want = vec![(ep_ok, 1, 1), (ep_flaky, 2, 1), (ep_rejecting, 1, 0)];
    want.sort();
    assert_eq!(before, want, "statistics agree with the stored attempts");

    // A sink that reads the whole topic again (a new group: from the start) stores nothing twice.
    let again = Registry::new();
    let mut cfg = cfg;
    cfg.dispatcher.roles = vec![dispatcher::Role::AttemptSink];
    cfg.attempts.sink_group_id = format!("{}.again", env.attempt_sink_group());
    let stop = CancellationToken::new();
    let (r, t) = (again.clone(), stop.clone());
    tokio::spawn(async move {
        dispatcher::run(cfg, &r, Default::default(), t)
            .await
            .expect("sink runs")
    });
    assert!(
        eventually(Duration::from_secs(30), || async {
            common::metric(
                &again,
                "hookstream_attempt_sink_rows_total",
                &[("result", "duplicate")],
            ) == 4.0
        })
        .await,
        "every record read again was a duplicate"
    );
    assert_eq!(
        common::metric(
            &again,
            "hookstream_attempt_sink_rows_total",
            &[("result", "stored")]
        ),
        0.0
    );
    assert_eq!(stored(&env, by_event).await.len(), 4);
    assert_eq!(
        counts(
            attempts::endpoint_stats(&env.pool, Some(tenant), since)
                .await
                .unwrap()
        ),
        before,
        "a record read again adds nothing to the statistics"
    );
    stop.cancel();
}

#[tokio::test]
async fn days_past_retention_are_dropped_as_whole_partitions() {
    let env = TestEnv::new(1).await.unwrap();
    let now = Utc::now();
    let today = now.date_naive();
    let days_ago = |n: u64| today - Days::new(n);
    for n in [40, 31, 29, 0] {
        attempts::ensure_partition(&env.pool, days_ago(n)).await.unwrap();
    }
    let tenant = Uuid::now_v7();
    let old = attempt_row(now - chrono::Duration::days(40), tenant);
    let recent = attempt_row(now - chrono::Duration::days(29), tenant);
    assert_eq!(
        attempts::insert_many(&env.pool, &[old.clone(), recent.clone(), old.clone()])
            .await
            .unwrap(),
        vec![true, true, false],
        "a repeat is not stored twice"
    );
    let dropped = attempts::drop_partitions_before(&env.pool, days_ago(30))
        .await
        .unwrap();
    let name = |n: u64| format!("attempts_{}", days_ago(n).format("%Y%m%d"));
    assert_eq!(dropped, vec![name(40), name(31)]);
    assert_eq!(
        attempts::partitions(&env.pool).await.unwrap(),
        vec![name(29), name(0)]
    );
    let stats_days: Vec<String> = hookstream_store::sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'hookstream.attempt_stats'::regclass ORDER BY 1",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let stats_name = |n: u64| format!("attempt_stats_{}", days_ago(n).format("%Y%m%d"));
    assert_eq!(
        stats_days,
        vec![stats_name(29), stats_name(0)],
        "their statistics go with them"
    );
    let left = stored(
        &env,
        Filter {
            tenant_id: Some(tenant),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].event_id, recent.event_id);
    // A day without a partition is refused (the sink creates it first), never mis-filed.
    let orphan = attempt_row(now - chrono::Duration::days(60), tenant);
    assert!(attempts::insert_many(&env.pool, &[orphan]).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_percentiles_follow_the_receivers_latency() {
    const EVENTS: usize = 40;
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let mut endpoints = Vec::new();
    let mut receivers = Vec::new();
    for delay in [10, 50, 200] {
        let r = Receiver::start(Behaviour::Delay(delay)).await;
        endpoints.push((delay, env.endpoint(tenant, &r, &[]).await.unwrap()));
        receivers.push(r);
    }
    let token = common::start_pipeline(&env, common::retrying_config(&env, vec![1_000]));
    let events: Vec<NewEvent> = (0..EVENTS)
        .map(|n| NewEvent::new(tenant, "order.created", json!({ "n": n })))
        .collect();
    env.publish(&events).await.unwrap();
    let all = Filter {
        tenant_id: Some(tenant),
        ..Default::default()
    };
    assert!(
        eventually(Duration::from_secs(60), || async {
            stored(&env, all.clone()).await.len() == 3 * EVENTS
        })
        .await,
        "every attempt stored"
    );
    let since = Utc::now() - chrono::Duration::minutes(10);
    let stats = attempts::endpoint_stats(&env.pool, Some(tenant), since)
        .await
        .unwrap();
    assert_eq!(stats.len(), 3);
    // Worst first: all succeed, so the slowest p99 leads.
    let order: Vec<Uuid> = stats.iter().map(|s| s.endpoint_id).collect();
    assert_eq!(order, vec![endpoints[2].1, endpoints[1].1, endpoints[0].1]);
    for (delay, ep) in &endpoints {
        let s = stats.iter().find(|s| s.endpoint_id == *ep).unwrap();
        let d = *delay as f64;
        assert_eq!(
            (s.attempts, s.delivered, s.success_rate),
            (EVENTS as i64, EVENTS as i64, 1.0)
        );
        // Percentiles come from a histogram, within 4.5 % of the durations they stand for.
        assert!(
            s.p50_ms >= d * 0.95 && s.p50_ms < d + 60.0,
            "{delay} ms receiver: p50 {} ms",
            s.p50_ms
        );
        assert!(s.p95_ms >= s.p50_ms && s.p99_ms >= s.p95_ms);
        assert!(s.p99_ms < d + 250.0, "{delay} ms receiver: p99 {} ms", s.p99_ms);
        assert_eq!(s.top_error_class, None);
    }
    // The series a chart draws: every attempt in some step, the slow endpoint slow in each.
    let (slow, slow_ep) = endpoints[2];
    let points = hookstream_store::attempt_stats::series(&env.pool, slow_ep, since, 5)
        .await
        .unwrap();
    assert!(!points.is_empty());
    assert_eq!(points.iter().map(|p| p.attempts).sum::<i64>(), EVENTS as i64);
    assert_eq!(points.iter().map(|p| p.delivered).sum::<i64>(), EVENTS as i64);
    for p in &points {
        assert!(p.p50_ms >= slow as f64 * 0.95 && p.p99_ms >= p.p50_ms, "{p:?}");
        assert_eq!(
            p.start.timestamp() % 300,
            0,
            "steps start on a 5-minute boundary: {p:?}"
        );
    }
    let one = hookstream_store::attempt_stats::one_endpoint_stats(&env.pool, slow_ep, since)
        .await
        .unwrap()
        .expect("the slow endpoint's figures");
    assert_eq!(one.attempts, EVENTS as i64);
    let nobody = attempts::endpoint_stats(&env.pool, Some(Uuid::now_v7()), since)
        .await
        .unwrap();
    assert!(nobody.is_empty(), "another tenant's stats are empty");
    token.cancel();
}
