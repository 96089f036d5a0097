//! Kafka behind TLS and SASL, on the local broker's secured listeners (`scripts/stack/kafka.sh`
//! gives it a CA of its own, a SASL_SSL listener with SCRAM and PLAIN users, and a TLS listener
//! that requires client certificates): the relay and the dispatcher deliver end to end over
//! SASL/SCRAM with TLS, mutual TLS is accepted with the client certificate and refused without,
//! and a wrong password or a CA that does not match stops the start at once, saying which, with
//! exit code 2 (restarting would not help).

use std::time::{Duration, Instant};

use hookstream_config::KafkaConfig;
use hookstream_kafka::{probe, ProbeError};
use hookstream_store::outbox::NewEvent;
use hookstream_telemetry::ServiceError;
use hookstream_testkit::{eventually, secured, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common;

use hookstream_kafka::PROBE_TIMEOUT as PROBE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_and_dispatcher_deliver_over_sasl_scram_with_tls() {
    let env = TestEnv::new(2).await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    let tenant = env.tenant("secured").await.unwrap();
    env.endpoint(tenant, &receiver, &[]).await.unwrap();

    let kafka = secured::sasl(&env.kafka, "SCRAM-SHA-512");
    let mut cfg = common::retrying_config(&env, vec![1_000]);
    cfg.kafka = kafka.clone();
    let token = CancellationToken::new();
    common::start_relay_with(&env, secured::sasl(&env.kafka, "SCRAM-SHA-256"), &token);
    let t = token.clone();
    let dispatcher = tokio::spawn(async move {
        dispatcher::run(cfg, &prometheus::Registry::new(), Default::default(), t).await
    });

    let events: Vec<NewEvent> = (0..20)
        .map(|i| NewEvent::new(tenant, "order.created", json!({ "i": i })))
        .collect();
    env.publish(&events).await.unwrap();
    let delivered = eventually(Duration::from_secs(60), || async {
        receiver.distinct().0.len() == 20
    })
    .await;
    token.cancel();
    let ended = dispatcher.await.unwrap();
    assert!(
        delivered,
        "{} of 20 delivered over SASL_SSL",
        receiver.distinct().0.len()
    );
    ended.expect("the dispatcher drained and stopped cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_stops_the_start_at_once_saying_so() {
    let env = TestEnv::new(1).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    for mechanism in ["SCRAM-SHA-512", "PLAIN"] {
        let mut kafka = secured::sasl(&env.kafka, mechanism);
        kafka.security.sasl_password_file = Some(wrong.clone());
        let mut cfg = common::dispatcher_config(&env);
        cfg.kafka = kafka;
        let started = Instant::now();
        let err = dispatcher::run(
            cfg,
            &prometheus::Registry::new(),
            Default::default(),
            CancellationToken::new(),
        )
        .await
        .expect_err("a wrong password");
        let took = started.elapsed();
        let text = err.to_string();
        assert!(
            text.contains("refused to authenticate"),
            "{mechanism}: says why: {text}"
        );
        assert!(
            !text.contains("not-the-password"),
            "{mechanism}: never prints the password: {text}"
        );
        assert_eq!(err.exit_code(), 2, "{mechanism}: an operator must act");
        assert!(
            took < Duration::from_secs(5),
            "{mechanism}: failed fast, not at the {PROBE:?} deadline: {took:?}"
        );
    }
}

async fn probed(kafka: &KafkaConfig) -> Result<Duration, ProbeError> {
    let started = Instant::now();
    probe(kafka, PROBE).await.map(|()| started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_is_accepted_with_the_client_certificate_and_refused_without() {
    let env = TestEnv::new(1).await.unwrap();
    let with = secured::mtls(&env.kafka);
    probed(&with).await.expect("the client certificate is accepted");

    let mut without = with.clone();
    (without.security.cert_file, without.security.key_file) = (None, None);
    let started = Instant::now();
    let err = probed(&without).await.expect_err("no client certificate");
    assert!(err.is_configuration(), "refused, not unreachable: {err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "fast: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_that_does_not_sign_the_brokers_certificate_is_a_tls_failure() {
    let env = TestEnv::new(1).await.unwrap();
    let mut kafka = secured::sasl(&env.kafka, "SCRAM-SHA-256");
    probed(&kafka).await.expect("the stack's CA verifies the broker");
    // The client certificate is no CA, and certainly not the broker's issuer.
    kafka.security.ca_file = Some(secured::tls_dir().join("client.crt"));
    let err = probed(&kafka).await.expect_err("an unverifiable broker");
    assert!(matches!(err, ProbeError::Tls(_)), "{err}");
    assert!(err.is_configuration());
}
