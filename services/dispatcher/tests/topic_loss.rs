//! A topic lost while the dispatcher runs (deleted, or its ACL revoked). Before, a dead
//! letter's hand-off to a deleted DLQ topic was retried every 30 s for ever: the event's
//! partition stuck, `/healthz` green, the process running. Now the broker is asked, and once
//! it has said for `lost::CONFIRM_FOR` that the topic is gone the process turns unhealthy,
//! names the topic and exits; nothing is lost, since the event's offset was never stored.
//! Both ways of finding out are tested alone: a hand-off that is never acknowledged (the
//! events role, as the chart's scaled dispatchers run it) and a consumer whose topic is gone
//! (the DLQ sink). A revoked ACL is the hand-off's path too, on a private broker that checks
//! ACLs (`testkit::broker`), the dispatcher signed in over SASL_SSL: its principal denied the
//! DLQ topic, it stops naming the topic and the refusal, and exits 2 at start until the ACL
//! is gone.
//!
//! And the other side: a broker that does not answer at all is an outage, not a loss. Kafka
//! stopped for 90 s under a dispatcher whose retries keep failing: every hand-off to a retry
//! tier goes unacknowledged and asks the broker, which does not answer. The dispatcher stays
//! healthy and, once the broker is back, delivers every event, none early and none
//! dead-lettered. That test runs its own broker too, since it stops it; the
//! relay's side of an outage is the relay's `kafka_outage.rs`.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use hookstream_store::outbox::NewEvent;
use hookstream_telemetry::ServiceError as _;
use hookstream_testkit::broker::PrivateKafka;
use hookstream_testkit::process::{admin_get, dispatcher_env, free_port, ServiceProcess};
use hookstream_testkit::{eventually, Behaviour, Received, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlq_topic_deleted_at_run_time_stops_the_dispatcher_naming_it_and_loses_nothing() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let refusing = Receiver::start(Behaviour::Status(400)).await;
    env.endpoint(tenant, &refusing, &[]).await.unwrap();
    let port = free_port();
    let mut vars = dispatcher_env(&env);
    vars.push(("HOOKSTREAM_TELEMETRY__LISTEN".into(), format!("127.0.0.1:{port}")));
    // Not the DLQ sink: its consumer would find the loss too.
    vars.push((
        "HOOKSTREAM_DISPATCHER__ROLES".into(),
        r#"["events", "retry"]"#.into(),
    ));
    let log = env.log_path("dispatcher");
    let bin = Path::new(env!("CARGO_BIN_EXE_dispatcher"));
    let mut dispatcher = ServiceProcess::spawn(bin, &vars, &log).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            admin_get(port, "/readyz").await.map(|r| r.0) == Some(200)
        })
        .await,
        "the dispatcher becomes ready"
    );

    env.delete_topic(&env.kafka.topics.dlq).await.unwrap();
    let relay = CancellationToken::new();
    common::start_relay(&env, &relay);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || async { refusing.count() == 1 }).await);

    // The 400 dead-letters the event; its hand-off cannot be acknowledged. Within the
    // producer's timeout (30 s), the confirmation (20 s) and a drain, the process says why and
    // exits.
    let started = Instant::now();
    let unhealthy = dispatcher.unhealthy_within(port, Duration::from_secs(150)).await;
    let body = unhealthy.unwrap_or_else(|| {
        panic!(
            "/healthz did not turn 503 within {:?}: {}",
            started.elapsed(),
            std::fs::read_to_string(&log).unwrap()
        )
    });
    let dlq = &env.kafka.topics.dlq;
    assert!(
        body.contains(&format!("topic {dlq} does not exist")) && body.contains("events role"),
        "/healthz names the lost topic and the role whose hand-off found it: {body}"
    );
    let code = tokio::time::timeout(Duration::from_secs(60), dispatcher.wait())
        .await
        .expect("exits once drained");
    assert_eq!(code, Some(1), "exit code of a failed service");
    let output = std::fs::read_to_string(&log).unwrap();
    assert!(
        output.contains(&format!("topic {dlq} does not exist")),
        "the log names the topic: {output}"
    );
    eprintln!("unhealthy {:?} after the delivery", started.elapsed());
    assert_eq!(
        env.committed_offsets(&env.kafka.topics.events).await.unwrap(),
        vec![-1],
        "the event's offset was not stored"
    );

    // Restarted without the topic, it refuses to start, naming it...
    let mut again = ServiceProcess::spawn(bin, &dispatcher_env(&env), &env.log_path("restarted")).unwrap();
    let code = tokio::time::timeout(Duration::from_secs(30), again.wait())
        .await
        .expect("refused at start");
    assert_eq!(code, Some(2));
    // ...and once the topic is back the event is dead-lettered after all.
    env.create_main_topics().await.unwrap();
    let _back = ServiceProcess::spawn(bin, &dispatcher_env(&env), &env.log_path("back")).unwrap();
    assert!(
        eventually(Duration::from_secs(60), || async {
            env.read_all(dlq).await.map(|r| r.len()).unwrap_or(0) == 1
        })
        .await,
        "the dead letter reaches the DLQ"
    );
    relay.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumed_topic_deleted_at_run_time_stops_the_dispatcher_naming_it() {
    let env = TestEnv::new(1).await.unwrap();
    let mut vars = dispatcher_env(&env);
    vars.push(("HOOKSTREAM_DISPATCHER__ROLES".into(), r#"["dlq_sink"]"#.into()));
    let log = env.log_path("dlq-sink");
    let mut sink = ServiceProcess::spawn(Path::new(env!("CARGO_BIN_EXE_dispatcher")), &vars, &log).unwrap();
    let dlq = &env.kafka.topics.dlq;
    assert!(
        eventually(Duration::from_secs(30), || async {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("partitions assigned"))
        })
        .await,
        "the DLQ sink consumes"
    );
    env.delete_topic(dlq).await.unwrap();
    let code = tokio::time::timeout(Duration::from_secs(120), sink.wait())
        .await
        .unwrap_or_else(|_| panic!("still running: {}", std::fs::read_to_string(&log).unwrap()));
    let output = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains(&format!("dlq_sink consumer failed: topic {dlq} does not exist")),
        "names the role and the topic: {output}"
    );
}

/// A dispatcher in this process, on `kafka` with the events and retry
/// roles only (the DLQ sink's consumer would find a loss too; this is the hand-off's path).
fn spawn_dispatcher(
    env: &TestEnv,
    kafka: &hookstream_config::KafkaConfig,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), dispatcher::DispatchError>>,
) {
    let mut cfg = common::dispatcher_config(env);
    cfg.kafka = kafka.clone();
    cfg.dispatcher.roles = vec![dispatcher::Role::Events, dispatcher::Role::Retry];
    cfg.delivery.allow_cidrs = vec!["127.0.0.1/32".parse().unwrap()];
    let token = CancellationToken::new();
    let t = token.clone();
    let run = tokio::spawn(async move {
        dispatcher::run(cfg, &prometheus::Registry::new(), Default::default(), t).await
    });
    (token, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlq_topic_refused_at_run_time_stops_the_dispatcher_naming_it_and_loses_nothing() {
    // A broker that checks ACLs; the dispatcher signs in as `hookstream` over SASL_SSL, the
    // test's admin (topics, ACLs, the relay) uses the plaintext listener as a super user.
    let kafka = PrivateKafka::start_with_acls();
    let env = TestEnv::on_brokers(1, &kafka.brokers()).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let sasl = kafka.sasl(&env.kafka);
    let relay = CancellationToken::new();
    common::start_relay(&env, &relay);
    let (stop, run) = spawn_dispatcher(&env, &sasl);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(60), || async { receiver.count() == 1 }).await,
        "the dispatcher delivers over SASL_SSL"
    );

    // Its principal loses the DLQ topic; the next event dead-letters and its hand-off is
    // refused. Within the confirmation (20 s) and a drain, the dispatcher stops naming it.
    let dlq = env.kafka.topics.dlq.clone();
    let deny = [
        "--deny-principal",
        "User:hookstream",
        "--operation",
        "All",
        "--topic",
        dlq.as_str(),
    ];
    kafka.acl(&[&["--add"][..], &deny[..]].concat());
    receiver.set_behaviour(Behaviour::Status(400));
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 2 }))])
        .await
        .unwrap();
    assert!(eventually(Duration::from_secs(30), || async { receiver.count() == 2 }).await);
    let refused = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the dispatcher stops within 120 s of the refused hand-off")
        .unwrap();
    let err = ended.expect_err("a task failed");
    let text = err.to_string();
    assert!(
        text.contains(&format!("kafka refuses this client access to topic {dlq}")),
        "names the topic and why: {text}"
    );
    assert_eq!(err.exit_code(), 1, "a task failed at run time");
    eprintln!(
        "refused topic: stopped {:?} after the delivery",
        refused.elapsed()
    );
    assert_eq!(
        env.committed_offsets(&env.kafka.topics.events).await.unwrap(),
        vec![1],
        "the first event's offset is stored, the dead-lettered one's is not"
    );

    // Started again while refused: it stops at the start, an operator's error...
    let (_, again) = spawn_dispatcher(&env, &sasl);
    let err = tokio::time::timeout(Duration::from_secs(60), again)
        .await
        .expect("refused at start")
        .unwrap()
        .expect_err("refused at start");
    assert!(err.to_string().contains(&format!("topic {dlq}")), "{err}");
    assert_eq!(err.exit_code(), 2, "{err}");
    // ...and once the ACL is gone the event is dead-lettered after all.
    kafka.acl(&[&["--remove", "--force"][..], &deny[..]].concat());
    let (stop_back, _back) = spawn_dispatcher(&env, &sasl);
    assert!(
        eventually(Duration::from_secs(60), || async {
            env.read_all(&dlq).await.map(|r| r.len()).unwrap_or(0) == 1
        })
        .await,
        "the dead letter reaches the DLQ"
    );
    stop_back.cancel();
    stop.cancel();
    relay.cancel();
}

/// The retry schedule: short enough for a test, with the production jitter (±20 %).
const SCHEDULE_MS: [u64; 4] = [3_000, 6_000, 12_000, 24_000];
const JITTER: f64 = 0.2;
/// Long enough for failed hand-offs to ask the broker twice, more than the loss rule's
/// confirmation (20 s) apart: the first fail after the producer's delivery timeout (30 s, as
/// shipped), and are retried. A rule which took "no answer" for "gone" would fire.
const OUTAGE: Duration = Duration::from_secs(90);
/// Under the endpoint's default concurrency cap (32): every first attempt is under way at once.
const EVENTS: usize = 30;
const FAIL_AFTER: Duration = Duration::from_secs(3);

/// Polls `/healthz` (admin listener on `port`) for `span`; the first answer that is not 200,
/// or the process exiting, is a failure named in the panic.
async fn healthy_for(process: &mut ServiceProcess, port: u16, span: Duration, log: &Path) {
    let started = Instant::now();
    while started.elapsed() < span {
        let answer = admin_get(port, "/healthz").await;
        if !process.is_running() || answer.as_ref().map(|a| a.0) != Some(200) {
            panic!(
                "the dispatcher is not healthy {:?} into the span ({answer:?}): {}",
                started.elapsed(),
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_down_under_failing_hand_offs_is_not_a_lost_topic_and_loses_nothing() {
    let kafka = PrivateKafka::start();
    let env = TestEnv::on_brokers(2, &kafka.brokers()).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    // Each attempt fails, but only after FAIL_AFTER: the first ones are under way when the
    // broker stops, so their hand-offs to the first tier go unacknowledged.
    let receiver = Receiver::start(Behaviour::DelayStatus(FAIL_AFTER.as_millis() as u64, 500)).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();

    let port = free_port();
    let mut vars = dispatcher_env(&env);
    vars.push(("HOOKSTREAM_TELEMETRY__LISTEN".into(), format!("127.0.0.1:{port}")));
    vars.push((
        "HOOKSTREAM_RETRY__SCHEDULE_MS".into(),
        serde_json::to_string(&SCHEDULE_MS).unwrap(),
    ));
    vars.push(("HOOKSTREAM_RETRY__JITTER".into(), JITTER.to_string()));
    // Every attempt fails until the broker is back; the breaker would open and defer them
    // (hand-offs too, but at times this test does not control). Keep it closed.
    vars.push((
        "HOOKSTREAM_DISPATCHER__ISOLATION__CONSECUTIVE_FAILURES".into(),
        "100000".into(),
    ));
    vars.push((
        "HOOKSTREAM_DISPATCHER__ISOLATION__MIN_REQUESTS".into(),
        "100000".into(),
    ));
    let log = env.log_path("dispatcher");
    let mut dispatcher =
        ServiceProcess::spawn(Path::new(env!("CARGO_BIN_EXE_dispatcher")), &vars, &log).unwrap();
    assert!(
        eventually(Duration::from_secs(60), || async {
            admin_get(port, "/readyz").await.map(|r| r.0) == Some(200)
        })
        .await,
        "the dispatcher becomes ready: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let relay = CancellationToken::new();
    common::start_relay(&env, &relay);

    let events: Vec<NewEvent> = (0..EVENTS)
        .map(|i| NewEvent::new(tenant, "order.created", json!({ "i": i })).aggregate("order", i.to_string()))
        .collect();
    let ids = env.publish(&events).await.unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async { receiver.count() >= EVENTS }).await,
        "every first attempt is under way"
    );
    let down = Instant::now();
    kafka.stop();
    eprintln!("broker stopped in {:?}", down.elapsed());
    assert!(
        down.elapsed() < FAIL_AFTER,
        "the broker was down before the first attempts failed ({:?})",
        down.elapsed()
    );
    healthy_for(&mut dispatcher, port, OUTAGE.saturating_sub(down.elapsed()), &log).await;
    let output = std::fs::read_to_string(&log).unwrap();
    assert!(
        output.contains("record not acknowledged, retrying"),
        "hand-offs failed while the broker was down: {output}"
    );
    kafka.resume();
    let up = Instant::now();
    eprintln!("broker back {:?} after the stop", up - down);
    receiver.set_behaviour(Behaviour::Ok);

    let want: std::collections::HashSet<String> = ids.iter().map(|i| i.to_string()).collect();
    let delivered = || {
        receiver
            .received()
            .into_iter()
            .filter(|r| (200..300).contains(&r.status))
            .map(|r| r.webhook_id)
            .collect::<std::collections::HashSet<_>>()
    };
    let mut all = false;
    while !all && up.elapsed() < Duration::from_secs(180) {
        healthy_for(&mut dispatcher, port, Duration::from_secs(2), &log).await;
        all = delivered() == want;
    }
    assert!(
        all,
        "every event delivered after the broker came back ({} of {EVENTS}): {}",
        delivered().len(),
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    // Never early: each retry came at least its tier's delay, less the jitter, after the
    // first attempt before it. The outage may only have made them later. (A record held
    // through the outage may be delivered twice: at least once, with the same webhook-id.)
    let mut by_event: HashMap<String, Vec<Received>> = HashMap::new();
    for r in receiver.received() {
        by_event.entry(r.webhook_id.clone()).or_default().push(r);
    }
    let (mut latest, mut duplicates) = (0.0f64, 0);
    for (id, attempts) in by_event {
        let first_of = |n: u32| {
            attempts
                .iter()
                .filter(|r| r.attempt == n)
                .map(|r| r.received_unix_ms)
                .min_by(f64::total_cmp)
        };
        let mut numbers: Vec<u32> = attempts.iter().map(|r| r.attempt).collect();
        numbers.sort_unstable();
        numbers.dedup();
        duplicates += attempts.len() - numbers.len();
        for r in attempts.iter().filter(|r| r.attempt >= 2) {
            let before = first_of(r.attempt - 1)
                .unwrap_or_else(|| panic!("event {id}: attempt {} without the one before", r.attempt));
            let tier = SCHEDULE_MS[(r.attempt as usize - 2).min(SCHEDULE_MS.len() - 1)];
            let gap = r.received_unix_ms - before;
            assert!(
                gap >= tier as f64 * (1.0 - JITTER),
                "event {id}: attempt {} came {gap:.0} ms after attempt {}, before its {tier} ms tier",
                r.attempt,
                r.attempt - 1
            );
            latest = latest.max(gap);
        }
    }
    let output = std::fs::read_to_string(&log).unwrap();
    assert!(
        !output.contains("does not exist") && !output.contains("refuses this client access"),
        "no topic was called lost: {output}"
    );
    assert!(
        env.read_all(&env.kafka.topics.dlq).await.unwrap().is_empty(),
        "nothing was dead-lettered"
    );
    eprintln!(
        "kafka outage: {EVENTS} events, all delivered {:?} after the broker was back; longest gap between attempts {:.1} s; {duplicates} duplicate deliveries",
        up.elapsed(),
        latest / 1000.0
    );
    assert_eq!(dispatcher.terminate().await, Some(0));
    relay.cancel();
}
