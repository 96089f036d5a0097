//! Per-endpoint isolation on real Kafka, PostgreSQL and loopback receivers: the circuit
//! breaker, the per-endpoint rate limit, a black-hole endpoint beside healthy ones, and the
//! endpoint auto-disable.

use std::time::{Duration, Instant};

use dispatcher::isolation::IsolationSettings;
use hookstream_proto::{DeadLetter, Message as _};
use hookstream_store::endpoints::NewEndpoint;
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;

use crate::common;
use common::metric;

use common::retrying_config as config;

fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_opens_refuses_without_calls_half_opens_and_closes() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Status(503)).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let mut cfg = config(&env, vec![500; 30]);
    cfg.dispatcher.isolation = IsolationSettings {
        consecutive_failures: 3,
        cooldown_ms: 4_000,
        ..Default::default()
    };
    let registry = prometheus::Registry::new();
    let token = common::start_observed_pipeline(&env, cfg, registry.clone());
    let events: Vec<NewEvent> = (0..5)
        .map(|n| NewEvent::new(tenant, "order.created", json!({ "n": n })))
        .collect();
    let ids = env.publish(&events).await.unwrap();

    // Five first attempts fail; the breaker opens; the retries due 0.5 s later are refused.
    assert!(
        eventually(Duration::from_secs(20), || async {
            metric(
                &registry,
                "hookstream_dispatcher_deferrals_total",
                &[("reason", "breaker_open")],
            ) > 0.0
        })
        .await,
        "retries refused by the open breaker"
    );
    let opened = metric(
        &registry,
        "hookstream_dispatcher_breaker_transitions_total",
        &[("to", "open")],
    );
    assert_eq!(opened, 1.0);
    assert_eq!(metric(&registry, "hookstream_dispatcher_breakers_open", &[]), 1.0);
    let calls_when_open = receiver.count();
    // Three failures open it. Calls admitted before that may still finish: each event has at
    // most one call under way, and the one whose failure opened it has none, so at most four
    // more. (On a loaded machine the relay may ship the events in two batches, so a retry of
    // an early one can be among them: a CI run saw 6.) Whatever was admitted, none is made
    // while it is open (below).
    assert!(
        (3..=7).contains(&calls_when_open),
        "three failures open it; calls already under way may finish ({calls_when_open} calls)"
    );
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(
        receiver.count(),
        calls_when_open,
        "an open breaker makes no HTTP call"
    );

    // After the cooldown: one probe (half-open), which fails and reopens the breaker.
    assert!(
        eventually(Duration::from_secs(10), || async {
            receiver.count() > calls_when_open
        })
        .await,
        "a probe after the cooldown"
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(receiver.count(), calls_when_open + 1, "one probe at a time");
    assert_eq!(
        metric(
            &registry,
            "hookstream_dispatcher_breaker_transitions_total",
            &[("to", "half_open")]
        ),
        1.0
    );
    assert_eq!(
        metric(
            &registry,
            "hookstream_dispatcher_breaker_transitions_total",
            &[("to", "open")]
        ),
        2.0,
        "the failed probe reopened it"
    );

    // The endpoint recovers: the next probe (after the doubled cooldown, 8 s) closes the
    // breaker and every event is delivered.
    receiver.set_behaviour(Behaviour::Ok);
    let reopened = Instant::now();
    assert!(
        eventually(Duration::from_secs(30), || async {
            metric(
                &registry,
                "hookstream_dispatcher_breaker_transitions_total",
                &[("to", "closed")],
            ) >= 1.0
        })
        .await,
        "the breaker closes on a successful probe"
    );
    assert!(
        reopened.elapsed() >= Duration::from_millis(6_000),
        "the second cooldown was doubled ({:?} after the failed probe)",
        reopened.elapsed()
    );
    assert!(
        eventually(Duration::from_secs(20), || async {
            let delivered: std::collections::HashSet<String> = receiver
                .received()
                .iter()
                .skip(calls_when_open + 1)
                .map(|r| r.webhook_id.clone())
                .collect();
            delivered.len() == ids.len()
        })
        .await,
        "every event delivered once the endpoint recovered"
    );
    assert_eq!(metric(&registry, "hookstream_dispatcher_breakers_open", &[]), 0.0);
    let max_attempt = receiver.received().iter().map(|r| r.attempt).max().unwrap();
    assert!(
        max_attempt <= 3,
        "refusals by the breaker use no attempt (highest attempt number seen: {max_attempt})"
    );
    assert!(env
        .read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(1))
        .await
        .unwrap()
        .is_empty());
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_observed_rate_stays_within_quota_plus_burst() {
    const RATE: f64 = 20.0;
    const EVENTS: usize = 200;
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    env.endpoint_with(
        &receiver,
        NewEndpoint {
            tenant_id: tenant,
            rate_limit_per_s: Some(RATE as i32),
            timeout_ms: Some(5_000),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let registry = prometheus::Registry::new();
    let token = common::start_observed_pipeline(&env, config(&env, vec![1_000; 3]), registry.clone());
    let events: Vec<NewEvent> = (0..EVENTS)
        .map(|n| NewEvent::new(tenant, "order.created", json!({ "n": n })))
        .collect();
    env.publish(&events).await.unwrap();

    assert!(
        eventually(Duration::from_secs(60), || async {
            receiver.distinct().0.len() == EVENTS
        })
        .await,
        "all {EVENTS} delivered ({} so far)",
        receiver.distinct().0.len()
    );
    let got = receiver.received();
    let first = got[0].at;
    let burst = RATE; // rate_limit_burst_s = 1
    for (i, r) in got.iter().enumerate() {
        let allowed = burst + RATE * (r.at - first).as_secs_f64() + 1.0;
        assert!(
            (i + 1) as f64 <= allowed,
            "request {} arrived {:?} after the first: more than quota + burst ({allowed:.1})",
            i + 1,
            r.at - first
        );
    }
    let span = (got.last().unwrap().at - first).as_secs_f64();
    let observed = got.len() as f64 / span;
    println!(
        "rate limit {RATE}/s: {} requests in {span:.2} s = {observed:.1}/s",
        got.len()
    );
    assert!(
        metric(
            &registry,
            "hookstream_dispatcher_deferrals_total",
            &[("reason", "rate_limited")]
        ) > 0.0
    );
    assert!(
        got.iter().all(|r| r.verified && r.attempt == 1),
        "a deferral uses no attempt"
    );
    assert_eq!(got.len(), EVENTS, "no failures, so no duplicates");
    token.cancel();
}

/// Latencies (ms, publish → receiver) of the deliveries `receivers` got.
fn latencies(receivers: &[Receiver]) -> Vec<f64> {
    let mut all: Vec<f64> = receivers
        .iter()
        .flat_map(|r| r.received())
        .filter_map(|r| {
            let body: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
            Some(r.received_unix_ms - body["sent_ms"].as_f64()?)
        })
        .collect();
    all.sort_by(|a, b| a.partial_cmp(b).unwrap());
    all
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Publishes `events` events at `per_s`, each carrying its send time.
async fn publish_steadily(env: &TestEnv, tenant: uuid::Uuid, events: usize, per_s: usize) {
    let batch = (per_s / 50).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let mut sent = 0;
    while sent < events {
        tick.tick().await;
        let n = batch.min(events - sent);
        let batch: Vec<NewEvent> = (0..n)
            .map(|_| NewEvent::new(tenant, "order.created", json!({ "sent_ms": now_ms() })))
            .collect();
        env.publish(&batch).await.unwrap();
        sent += n;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_hole_endpoint_does_not_slow_nine_healthy_ones() {
    const EVENTS: usize = 600;
    const PER_S: usize = 100;
    const HOLE_TIMEOUT_MS: i32 = 1_000;
    let env = TestEnv::new(4).await.unwrap();
    let cfg = config(&env, vec![1_000, 2_000, 4_000, 8_000]);
    let token = common::start_pipeline(&env, cfg);

    // Warm up (consumer assignment, connection pools) so the baseline measures steady state.
    let warm = env.tenant("warm-up").await.unwrap();
    let warm_receiver = Receiver::start(Behaviour::Ok).await;
    env.endpoint(warm, &warm_receiver, &[]).await.unwrap();
    publish_steadily(&env, warm, 100, PER_S).await;
    assert!(
        eventually(Duration::from_secs(30), || async {
            warm_receiver.distinct().0.len() == 100
        })
        .await
    );

    // Baseline: nine healthy endpoints alone.
    let quiet = env.tenant("quiet").await.unwrap();
    let mut baseline = Vec::new();
    for _ in 0..9 {
        let r = Receiver::start(Behaviour::Ok).await;
        env.endpoint(quiet, &r, &[]).await.unwrap();
        baseline.push(r);
    }
    publish_steadily(&env, quiet, EVENTS, PER_S).await;
    assert!(
        eventually(Duration::from_secs(30), || async {
            baseline.iter().all(|r| r.distinct().0.len() == EVENTS)
        })
        .await,
        "baseline delivered"
    );

    // The same load with a tenth endpoint that never answers (1 s timeout).
    let noisy = env.tenant("noisy").await.unwrap();
    let mut healthy = Vec::new();
    for _ in 0..9 {
        let r = Receiver::start(Behaviour::Ok).await;
        env.endpoint(noisy, &r, &[]).await.unwrap();
        healthy.push(r);
    }
    let hole = Receiver::start(Behaviour::Hang).await;
    env.endpoint_with(
        &hole,
        NewEndpoint {
            tenant_id: noisy,
            timeout_ms: Some(HOLE_TIMEOUT_MS),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let started = Instant::now();
    publish_steadily(&env, noisy, EVENTS, PER_S).await;
    assert!(
        eventually(Duration::from_secs(30), || async {
            healthy.iter().all(|r| r.distinct().0.len() == EVENTS)
        })
        .await,
        "every healthy endpoint got every event"
    );
    let took = started.elapsed();

    let (b, n) = (latencies(&baseline), latencies(&healthy));
    let (b50, b99, n50, n99) = (pct(&b, 0.5), pct(&b, 0.99), pct(&n, 0.5), pct(&n, 0.99));
    println!(
        "healthy endpoints, publish → receiver: alone p50 {b50:.1} ms p99 {b99:.1} ms; \
         beside a black hole p50 {n50:.1} ms p99 {n99:.1} ms (slowdown p50 {:+.1} ms, p99 {:+.1} ms); \
         {EVENTS} events at {PER_S}/s took {:.1} s; the black hole saw {} requests",
        n50 - b50,
        n99 - b99,
        took.as_secs_f64(),
        hole.count()
    );
    // Generous bounds: this checks isolation, not speed (the benchmark measures speed). A
    // healthy delivery held behind the black hole waits for its 1 s timeout, so coupling shows
    // as a tail near a second; the bound sits at half that. The tail is not held to a multiple
    // of the baseline's: one scheduler stall of the shared 2-core CI machine during the second
    // phase lifts the p99 of 100 events/s by its length (a CI run saw 20.9 → 176.7 ms while
    // local runs of the same build were within ±4 ms).
    assert!(n50 <= b50 * 2.0 + 20.0, "median slowed: {b50:.1} → {n50:.1} ms");
    let held = f64::from(HOLE_TIMEOUT_MS) / 2.0;
    assert!(n99 <= b99 + held, "tail slowed: {b99:.1} → {n99:.1} ms");
    assert!(
        hole.count() < EVENTS,
        "the black hole was not sent every event at once ({} requests): its cap and breaker held",
        hole.count()
    );
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_failing_past_the_window_is_disabled_and_the_tenant_told() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let failing = Receiver::start(Behaviour::Status(500)).await;
    let failing_id = env.endpoint(tenant, &failing, &["order.*"]).await.unwrap();
    let ops = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &ops, &["endpoint.disabled"]).await.unwrap();
    let mut cfg = config(&env, vec![1_000; 10]);
    cfg.dispatcher.disable_after_failing_ms = 3_000;
    cfg.dispatcher.publish_endpoint_disabled = true;
    cfg.dispatcher.isolation.consecutive_failures = 100;
    let token = common::start_pipeline(&env, cfg);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({}))])
        .await
        .unwrap();

    assert!(
        eventually(Duration::from_secs(30), || async {
            !hookstream_store::endpoints::get(&env.pool, failing_id)
                .await
                .unwrap()
                .enabled
        })
        .await,
        "disabled after failing for longer than the window"
    );
    let ep = hookstream_store::endpoints::get(&env.pool, failing_id)
        .await
        .unwrap();
    assert!(
        ep.disabled_reason
            .as_deref()
            .unwrap_or("")
            .contains("no successful delivery for 3 s"),
        "reason: {:?}",
        ep.disabled_reason
    );
    let attempts = failing.count();
    assert!(
        attempts >= 4,
        "it failed for 3 s at 1 s intervals ({attempts} attempts)"
    );
    assert!(
        eventually(Duration::from_secs(20), || async { ops.count() == 1 }).await,
        "the tenant's other endpoint got endpoint.disabled"
    );
    let notice = &ops.received()[0];
    assert_eq!(notice.event_type, "endpoint.disabled");
    let body: serde_json::Value = serde_json::from_slice(&notice.body).unwrap();
    assert_eq!(body["endpoint_id"], failing_id.to_string());
    assert!(body["reason"]
        .as_str()
        .unwrap()
        .contains("no successful delivery"));
    // The pending retry finds the endpoint disabled: dead-lettered, not attempted again.
    let letters = env
        .read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(letters.len(), 1);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(failing.count(), attempts, "no attempt after it was disabled");
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_before_the_window_resets_the_failing_clock() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::FailTimes(2, 500)).await;
    let id = env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let mut cfg = config(&env, vec![1_000; 5]);
    cfg.dispatcher.disable_after_failing_ms = 60_000;
    let token = common::start_pipeline(&env, cfg);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({}))])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            hookstream_store::endpoints::get(&env.pool, id)
                .await
                .unwrap()
                .failing_since
                .is_some()
        })
        .await,
        "a failure marks the endpoint failing"
    );
    assert!(
        eventually(Duration::from_secs(20), || async { receiver.count() == 3 }).await,
        "delivered on the third attempt"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            hookstream_store::endpoints::get(&env.pool, id)
                .await
                .unwrap()
                .failing_since
                .is_none()
        })
        .await,
        "the success cleared it"
    );
    assert!(
        hookstream_store::endpoints::get(&env.pool, id)
            .await
            .unwrap()
            .enabled
    );
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_disables_the_endpoint_at_once_and_the_tenant_is_told() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let gone = Receiver::start(Behaviour::Status(410)).await;
    let gone_id = env.endpoint(tenant, &gone, &["order.*"]).await.unwrap();
    let ops = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &ops, &["endpoint.disabled"]).await.unwrap();
    let mut cfg = config(&env, vec![1_000; 3]);
    cfg.dispatcher.publish_endpoint_disabled = true;
    let token = common::start_pipeline(&env, cfg);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({}))])
        .await
        .unwrap();

    assert!(
        eventually(Duration::from_secs(20), || async {
            !hookstream_store::endpoints::get(&env.pool, gone_id)
                .await
                .unwrap()
                .enabled
        })
        .await,
        "disabled by its 410"
    );
    let ep = hookstream_store::endpoints::get(&env.pool, gone_id)
        .await
        .unwrap();
    assert_eq!(ep.disabled_reason.as_deref(), Some("receiver answered 410 Gone"));
    let letters = env
        .read_topic(&env.kafka.topics.dlq, 1, Duration::from_secs(10))
        .await
        .unwrap();
    let letter = DeadLetter::decode(&letters[0].payload[..]).unwrap();
    assert_eq!(
        (letter.error_class.as_str(), letter.last_status, letter.attempts),
        ("http_410", 410, 1)
    );
    assert!(
        eventually(Duration::from_secs(20), || async { ops.count() == 1 }).await,
        "endpoint.disabled published to the tenant"
    );
    assert_eq!(ops.received()[0].event_type, "endpoint.disabled");

    // Later events skip the disabled endpoint.
    env.publish(&[NewEvent::new(tenant, "order.created", json!({}))])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(gone.count(), 1, "no request after the 410");
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deliveries_window_bounds_requests_in_flight_under_fan_out() {
    const WINDOW: usize = 20;
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let mut receivers = Vec::new();
    for _ in 0..10 {
        // Each request is answered 300 ms after it arrives.
        let r = Receiver::start(Behaviour::Delay(300)).await;
        env.endpoint(tenant, &r, &[]).await.unwrap();
        receivers.push(r);
    }
    let mut cfg = config(&env, vec![1_000; 3]);
    cfg.dispatcher.max_in_flight_events = 1_000; // the events window alone would allow 400
    cfg.dispatcher.max_in_flight_deliveries = WINDOW;
    let token = common::start_pipeline(&env, cfg);
    let events: Vec<NewEvent> = (0..40)
        .map(|n| NewEvent::new(tenant, "order.created", json!({ "n": n })))
        .collect();
    env.publish(&events).await.unwrap();
    assert!(
        eventually(Duration::from_secs(60), || async {
            receivers.iter().all(|r| r.successes() >= events.len())
        })
        .await,
        "every event reaches all ten endpoints"
    );
    token.cancel();

    // Requests that arrived within 250 ms of each other were all in flight together at the
    // end of that span (each is answered 300 ms after arriving).
    let mut at: Vec<f64> = receivers
        .iter()
        .flat_map(|r| r.received())
        .map(|d| d.received_unix_ms)
        .collect();
    at.sort_by(f64::total_cmp);
    let together = (0..at.len())
        .map(|i| at[i..].iter().take_while(|&&t| t - at[i] < 250.0).count())
        .max()
        .unwrap_or(0);
    assert_eq!(at.len(), 400, "one request per delivery");
    assert!(
        (10..=WINDOW).contains(&together),
        "{together} requests in flight together; the window is {WINDOW} (one event is 10)"
    );
}
