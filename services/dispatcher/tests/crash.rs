//! The dispatcher as a separate process: SIGKILL with thousands of deliveries in flight, and
//! a second instance joining and leaving mid-stream. Nothing may be lost (invariant 1);
//! duplicates are allowed after a crash and are counted.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use hookstream_store::endpoint_admin;
use hookstream_store::endpoints::NewEndpoint;
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::process::{dispatcher_env, ServiceProcess};
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::common;

fn spawn_dispatcher(env: &TestEnv, name: &str, max_in_flight: usize) -> ServiceProcess {
    let mut vars = dispatcher_env(env);
    vars.push((
        "HOOKSTREAM_DISPATCHER__MAX_IN_FLIGHT_EVENTS".into(),
        max_in_flight.to_string(),
    ));
    vars.push(("HOOKSTREAM_DISPATCHER__SHUTDOWN_GRACE_MS".into(), "5000".into()));
    ServiceProcess::spawn(
        Path::new(env!("CARGO_BIN_EXE_dispatcher")),
        &vars,
        &env.log_path(name),
    )
    .expect("start dispatcher")
}

/// The relay runs in-process: these tests are about the dispatcher.
fn start_relay(env: &TestEnv) -> CancellationToken {
    let token = CancellationToken::new();
    common::start_relay(env, &token);
    token
}

async fn endpoint(env: &TestEnv, tenant: Uuid, receiver: &Receiver, max_in_flight: i32) {
    let (_, secret) = endpoint_admin::create_from(
        &env.pool,
        &env.sealer(),
        &env.address_policy(),
        NewEndpoint {
            tenant_id: tenant,
            url: receiver.url(),
            max_in_flight: Some(max_in_flight),
            timeout_ms: Some(10_000),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    receiver.set_secret(&secret.expose());
}

async fn publish(env: &TestEnv, tenant: Uuid, n: usize, offset: usize) -> Vec<String> {
    let events: Vec<NewEvent> = (offset..offset + n)
        .map(|i| {
            NewEvent::new(tenant, "order.created", json!({ "i": i }))
                .aggregate("order", format!("o{}", i % 97))
        })
        .collect();
    let mut ids = Vec::new();
    for chunk in events.chunks(500) {
        ids.extend(
            env.publish(chunk)
                .await
                .unwrap()
                .into_iter()
                .map(|id| id.to_string()),
        );
    }
    ids
}

async fn committed_to_end(env: &TestEnv) -> bool {
    env.committed_to_end(Duration::from_secs(30)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_5000_deliveries_in_flight_loses_nothing() {
    let env = TestEnv::new(6).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    // Slow enough that thousands of requests are open at once.
    let receiver = Receiver::start(Behaviour::Delay(3_000)).await;
    endpoint(&env, tenant, &receiver, 1000).await;
    let relay = start_relay(&env);
    let ids = publish(&env, tenant, 5_000, 0).await;

    let first = spawn_dispatcher(&env, "dispatcher-1", 5_000);
    assert!(
        eventually(Duration::from_secs(60), || async { receiver.count() >= 1_000 }).await,
        "deliveries in flight before the kill"
    );
    first.kill9().await;
    // Everything the killed process delivered has reached the receiver by now.
    let delivered_before_kill = receiver.count();

    let second = spawn_dispatcher(&env, "dispatcher-2", 5_000);
    let want: HashSet<String> = ids.iter().cloned().collect();
    assert!(
        eventually(Duration::from_secs(120), || async {
            receiver.distinct().0.is_superset(&want)
        })
        .await,
        "every event delivered after the restart ({} of {})",
        receiver.distinct().0.intersection(&want).count(),
        want.len()
    );
    assert!(
        committed_to_end(&env).await,
        "offsets reach the end after recovery"
    );
    let (got, duplicates) = receiver.distinct();
    assert_eq!(got, want, "nothing unexpected delivered");
    assert!(
        receiver.received().iter().all(|r| r.verified),
        "every delivery is signed correctly"
    );
    println!(
        "dispatcher SIGKILL: {delivered_before_kill} requests had reached the receiver at the kill; {} events, {duplicates} duplicate deliveries",
        want.len()
    );
    // One crash can make each delivery of the killed process happen once more, no more:
    // only work it began can be redone, and the next owner redoes it once.
    assert!(
        duplicates <= delivered_before_kill,
        "{duplicates} duplicates, more than the {delivered_before_kill} deliveries the killed process made"
    );
    assert_eq!(second.terminate().await, Some(0));
    relay.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_dispatcher_joining_and_leaving_mid_stream_loses_nothing() {
    let env = TestEnv::new(6).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Delay(20)).await;
    endpoint(&env, tenant, &receiver, 200).await;
    let relay = start_relay(&env);
    let a = spawn_dispatcher(&env, "dispatcher-a", 1_000);

    let mut ids = Vec::new();
    for round in 0..30 {
        ids.extend(publish(&env, tenant, 100, round * 100).await);
        tokio::time::sleep(Duration::from_millis(150)).await;
        if round == 8 {
            let b = spawn_dispatcher(&env, "dispatcher-b", 1_000);
            // Let it join the group and take partitions, then leave while events flow.
            tokio::time::sleep(Duration::from_secs(4)).await;
            assert_eq!(b.terminate().await, Some(0), "b leaves cleanly");
        }
    }
    let want: HashSet<String> = ids.iter().cloned().collect();
    assert!(
        eventually(Duration::from_secs(90), || async {
            receiver.distinct().0.is_superset(&want)
        })
        .await,
        "every event delivered ({} of {})",
        receiver.distinct().0.intersection(&want).count(),
        want.len()
    );
    assert!(committed_to_end(&env).await);
    let (got, duplicates) = receiver.distinct();
    assert_eq!(got, want);
    println!(
        "join/leave: {} events, {duplicates} duplicate deliveries",
        want.len()
    );
    // Each of the two rebalances can redo only the work in flight on the partitions that
    // moved (what the revoked owner had begun and not finished), which the events window
    // bounds: max_in_flight_events (1,000) per rebalance.
    assert!(
        duplicates <= 2 * 1_000,
        "{duplicates} duplicates for two rebalances"
    );
    assert_eq!(a.terminate().await, Some(0));
    relay.cancel();
}

/// Publishes one event every `every`, on 97 aggregates (so every partition), until `stop`;
/// returns when each was published.
async fn publish_steadily(
    env: &TestEnv,
    tenant: Uuid,
    every: Duration,
    stop: CancellationToken,
) -> std::collections::HashMap<String, std::time::Instant> {
    let mut at = std::collections::HashMap::new();
    let mut i = 0usize;
    while !stop.is_cancelled() {
        let ids = publish(env, tenant, 1, i).await;
        at.insert(ids[0].clone(), std::time::Instant::now());
        i += 1;
        tokio::time::sleep(every).await;
    }
    at
}

/// The longest commit-to-arrival latency of the events published in the second after
/// `from`: how long a fault at `from` held events up.
fn stall_after(
    published: &std::collections::HashMap<String, std::time::Instant>,
    receiver: &Receiver,
    from: std::time::Instant,
) -> Duration {
    let got = receiver.received();
    published
        .iter()
        .filter(|(_, t)| **t >= from && **t < from + Duration::from_secs(1))
        .map(|(id, published)| {
            got.iter()
                .filter(|r| &r.webhook_id == id)
                .map(|r| r.at)
                .min()
                .map_or(Duration::MAX, |arrived| {
                    arrived.saturating_duration_since(*published)
                })
        })
        .max()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_dispatchers_partitions_resume_within_7_s_and_a_stopped_one_hands_over_within_1_s() {
    let env = TestEnv::new(6).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    endpoint(&env, tenant, &receiver, 200).await;
    let relay = start_relay(&env);
    let a = spawn_dispatcher(&env, "dispatcher-a", 1_000);
    let b = spawn_dispatcher(&env, "dispatcher-b", 1_000);
    let stop = CancellationToken::new();
    let publishing = {
        let (env_ref, stop) = (&env, stop.clone());
        async move { publish_steadily(env_ref, tenant, Duration::from_millis(20), stop).await }
    };
    let timeline = async {
        // Both members settle, then one is SIGKILLed mid-stream.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let killed_at = std::time::Instant::now();
        b.kill9().await;
        tokio::time::sleep(Duration::from_secs(12)).await;
        // A new member joins, settles, and is stopped with SIGTERM.
        let c = spawn_dispatcher(&env, "dispatcher-c", 1_000);
        tokio::time::sleep(Duration::from_secs(12)).await;
        let stopped_at = std::time::Instant::now();
        let code = c.terminate().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop.cancel();
        (killed_at, stopped_at, code)
    };
    let (published, (killed_at, stopped_at, code)) = tokio::join!(publishing, timeline);
    assert_eq!(code, Some(0), "c exits cleanly");
    let want: HashSet<String> = published.keys().cloned().collect();
    assert!(
        eventually(Duration::from_secs(60), || async {
            receiver.distinct().0.is_superset(&want)
        })
        .await,
        "every event delivered"
    );
    let after_kill = stall_after(&published, &receiver, killed_at);
    let after_stop = stall_after(&published, &receiver, stopped_at);
    println!("resumed {after_kill:?} after the SIGKILL; handed over {after_stop:?} after the SIGTERM");
    assert!(
        after_kill <= Duration::from_secs(7),
        "a killed member's partitions resumed after {after_kill:?}"
    );
    assert!(
        after_stop <= Duration::from_secs(1),
        "a stopped member handed over after {after_stop:?}"
    );
    assert_eq!(a.terminate().await, Some(0));
    relay.cancel();
}
