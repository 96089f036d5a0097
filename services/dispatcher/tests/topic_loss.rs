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
//! healthy and, once the broker is back, delivers every event, none dead-lettered. That test runs its own broker too, since it stops it; the
//! relay's side of an outage is the relay's `kafka_outage.rs`.

use std::path::Path;
use std::time::{Duration, Instant};

use hookstream_store::outbox::NewEvent;
use hookstream_telemetry::ServiceError as _;
use hookstream_testkit::broker::PrivateKafka;
use hookstream_testkit::process::{admin_get, dispatcher_env, free_port, ServiceProcess};
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common;

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
    // The broker applies an ACL change from its metadata log: wait until the principal may
    // see the topic again, or the restart below could still be refused at start.
    let names = [dlq.clone()];
    let seen = eventually(Duration::from_secs(30), || async {
        hookstream_kafka::topics::check_exist(&sasl, &names).await.is_ok()
    })
    .await;
    assert!(seen, "the ACL's removal reached the broker");
    let (stop_back, back) = spawn_dispatcher(&env, &sasl);
    assert!(
        eventually(Duration::from_secs(60), || async {
            env.read_all(&dlq).await.map(|r| r.len()).unwrap_or(0) == 1
        })
        .await,
        "the dead letter reaches the DLQ"
    );
    // Stopped while the broker still runs (with it gone, leaving the group could not finish).
    stop_back.cancel();
    tokio::time::timeout(Duration::from_secs(60), back)
        .await
        .expect("the dispatcher stops")
        .unwrap()
        .expect("and cleanly");
    stop.cancel();
    relay.cancel();
}

/// The retry schedule: short enough for a test, with the production jitter (±20 %).
const SCHEDULE_MS: [u64; 4] = [3_000, 6_000, 12_000, 24_000];
/// Long enough for failed hand-offs to ask the broker twice, more than the loss rule's
/// confirmation (20 s) apart: they fail after the producer's delivery timeout (30 s, as
/// shipped) and are tried again. A rule which took "no answer" for "gone" would fire.
const OUTAGE: Duration = Duration::from_secs(90);
/// Under the endpoint's default concurrency cap (32): every first attempt is under way at once.
const EVENTS: usize = 30;
/// How long the receiver takes to fail an attempt: the broker's clean stop must be over by
/// then, even on a loaded machine (it takes about a second when idle).
const FAIL_AFTER: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_down_under_failing_hand_offs_is_not_a_lost_topic_and_loses_nothing() {
    let kafka = PrivateKafka::start();
    let env = TestEnv::on_brokers(2, &kafka.brokers()).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    // Each attempt fails, but only after FAIL_AFTER (within the endpoint's timeout): the first
    // ones are under way when the broker stops, so their hand-offs go unacknowledged.
    let receiver = Receiver::start(Behaviour::DelayStatus(FAIL_AFTER.as_millis() as u64, 500)).await;
    env.endpoint_with(
        &receiver,
        hookstream_store::endpoints::NewEndpoint {
            tenant_id: tenant,
            timeout_ms: Some(30_000),
            ..Default::default()
        },
    )
    .await
    .unwrap();

    let mut vars = dispatcher_env(&env);
    vars.push((
        "HOOKSTREAM_RETRY__SCHEDULE_MS".into(),
        serde_json::to_string(&SCHEDULE_MS).unwrap(),
    ));
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
    let (mut dispatcher, port) =
        ServiceProcess::spawn_ready(Path::new(env!("CARGO_BIN_EXE_dispatcher")), &vars, &log).await;
    let unhealthy = |why: String| -> ! {
        panic!(
            "the dispatcher is not healthy {why}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    };
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
    let first_fails = receiver.received()[0].at + FAIL_AFTER;
    assert!(
        Instant::now() < first_fails,
        "the broker stopped ({:?}) before the first attempt failed",
        down.elapsed()
    );
    eprintln!("broker stopped in {:?}", down.elapsed());
    if let Err(why) = dispatcher
        .healthy_for(port, OUTAGE.saturating_sub(down.elapsed()))
        .await
    {
        unhealthy(why)
    }
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
        if let Err(why) = dispatcher.healthy_for(port, Duration::from_secs(2)).await {
            unhealthy(why)
        }
        all = delivered() == want;
    }
    assert!(
        all,
        "every event delivered after the broker came back ({} of {EVENTS}): {}",
        delivered().len(),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let output = std::fs::read_to_string(&log).unwrap();
    assert!(
        !output.contains("does not exist") && !output.contains("refuses this client access"),
        "no topic was called lost: {output}"
    );
    assert!(
        env.read_all(&env.kafka.topics.dlq).await.unwrap().is_empty(),
        "nothing was dead-lettered"
    );
    // Whether a retry is ever early is `retry.rs`'s subject (jitter on); here every retry
    // waited out the outage. What the outage costs: what was under way when the members
    // lost their partitions (the 6 s session) is delivered again.
    let successes = receiver.successes();
    eprintln!(
        "kafka outage: {EVENTS} events, all delivered {:?} after the broker was back; {} of them twice or more ({successes} successful deliveries)",
        up.elapsed(),
        successes - delivered().len()
    );
    relay.cancel();

    // Stopped while Kafka is away, it still exits, and cleanly: leaving the group cannot
    // complete, and waiting for it is bounded.
    kafka.stop();
    let (code, took) = dispatcher.terminate_within(Duration::from_secs(90), &log).await;
    eprintln!("SIGTERM with the broker down: exited {code:?} after {took:?}");
    assert_eq!(code, Some(0));
}

/// A broker that hangs (frozen: connections open, nothing answered) while the dispatcher
/// stops. Committing and leaving the group cannot complete; the process must still exit, and
/// cleanly, within its drain grace plus the bounded wait for those goodbyes, not when
/// librdkafka gives up or Kubernetes kills it. The broker's group expires the members after
/// the session timeout; their stored offsets were committed by the last auto-commit, so what
/// is redelivered is at most the last second's work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_hangs_while_the_dispatcher_stops_does_not_hold_its_exit() {
    let kafka = PrivateKafka::start();
    let env = TestEnv::on_brokers(2, &kafka.brokers()).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let log = env.log_path("dispatcher");
    let (dispatcher, _) = ServiceProcess::spawn_ready(
        Path::new(env!("CARGO_BIN_EXE_dispatcher")),
        &dispatcher_env(&env),
        &log,
    )
    .await;
    let relay = CancellationToken::new();
    let relay_run = common::spawn_relay(&env, env.kafka.clone(), &relay);
    let events: Vec<NewEvent> = (0..10)
        .map(|i| NewEvent::new(tenant, "order.created", json!({ "i": i })).aggregate("order", i.to_string()))
        .collect();
    env.publish(&events).await.unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async { receiver.successes() >= 10 }).await,
        "every event delivered before the broker hangs"
    );
    // The relay stops while the broker still answers: this test is about the dispatcher.
    relay.cancel();
    relay_run.await.unwrap();
    // Offsets stored since the last auto-commit are what the final commit would send.
    tokio::time::sleep(Duration::from_millis(200)).await;

    kafka.freeze();
    let (code, took) = dispatcher.terminate_within(Duration::from_secs(180), &log).await;
    eprintln!("SIGTERM with the broker frozen: exited {code:?} after {took:?}");
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(code, Some(0), "a clean exit: {output}");
    // Nothing was under way, so no drain grace: the wait for the goodbyes, the runtime's
    // wait for the blocked calls, and a few seconds for a loaded machine.
    let bound = hookstream_kafka::consumer::CLOSE_WAIT
        + hookstream_telemetry::RUNTIME_SHUTDOWN
        + Duration::from_secs(5);
    assert!(
        took < bound,
        "exited {took:?} after SIGTERM (bound {bound:?}): {output}"
    );
    assert!(
        output.contains("kafka did not answer the final commit or the leave-group request"),
        "says why it stopped without leaving the group: {output}"
    );
    kafka.thaw();
}
