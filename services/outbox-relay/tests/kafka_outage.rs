//! Kafka stopped for 30 seconds under load: the backlog grows in the outbox, then drains by
//! itself when Kafka is back; nothing is lost. Runs its own broker (the shared one serves the
//! other tests) with the project's stack script, on free ports.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hookstream_producer::Event;
use hookstream_proto::{EventEnvelope, Message as _};
use hookstream_testkit::process::{free_port, service_env, ServiceProcess};
use hookstream_testkit::{counts, eventually, TestEnv};
use serde_json::json;

/// A private single-node Kafka, stopped when dropped.
struct PrivateKafka {
    state: PathBuf,
    port: u16,
    controller: u16,
    /// The stack's secured listeners (SASL_SSL, mutual TLS), on free ports of their own.
    secured: (u16, u16),
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/stack/kafka.sh")
}

impl PrivateKafka {
    fn start() -> Self {
        let state = std::env::temp_dir().join(format!("hookstream-kafka-{}", uuid::Uuid::new_v4().simple()));
        let k = Self {
            state,
            port: free_port(),
            controller: free_port(),
            secured: (free_port(), free_port()),
        };
        k.run("start");
        k
    }

    fn run(&self, action: &str) {
        let status = Command::new("bash")
            .arg(script())
            .arg(action)
            .env("HOOKSTREAM_STATE_DIR", &self.state)
            .env("HOOKSTREAM_KAFKA_PORT", self.port.to_string())
            .env("HOOKSTREAM_KAFKA_CONTROLLER_PORT", self.controller.to_string())
            .env("HOOKSTREAM_KAFKA_SASL_PORT", self.secured.0.to_string())
            .env("HOOKSTREAM_KAFKA_MTLS_PORT", self.secured.1.to_string())
            .status()
            .expect("run kafka.sh");
        assert!(status.success(), "kafka.sh {action} failed");
    }

    fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateKafka {
    fn drop(&mut self) {
        self.run("stop");
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_down_for_thirty_seconds_under_load_loses_nothing() {
    let kafka = PrivateKafka::start();
    std::env::set_var("HOOKSTREAM_TEST_KAFKA_BROKERS", kafka.brokers());
    let env = TestEnv::new(3).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let mut vars = service_env(&env);
    vars.push(("HOOKSTREAM_RELAY__MAX_BACKOFF_MS".into(), "2000".into()));
    vars.push(("HOOKSTREAM_RELAY__PRODUCE_TIMEOUT_MS".into(), "5000".into()));
    let relay = ServiceProcess::spawn(
        Path::new(env!("CARGO_BIN_EXE_outbox-relay")),
        &vars,
        &env.log_path("relay"),
    )
    .unwrap();

    let mut published = Vec::new();
    let publish = |n: usize| {
        let pool = env.pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let mut ids = Vec::new();
            for i in 0..n {
                let e = Event::new(tenant, "order.updated", json!({ "i": i }))
                    .aggregate("order", format!("o{}", i % 10));
                ids.push(
                    hookstream_producer::enqueue(&mut tx, &e)
                        .await
                        .unwrap()
                        .to_string(),
                );
            }
            tx.commit().await.unwrap();
            ids
        }
    };
    for _ in 0..10 {
        published.extend(publish(100).await);
    }
    assert!(
        eventually(Duration::from_secs(30), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await
    );

    kafka.run("stop");
    let down = std::time::Instant::now();
    while down.elapsed() < Duration::from_secs(30) {
        published.extend(publish(100).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let backlog = env.outbox_len().await.unwrap();
    assert!(
        backlog >= 5_000,
        "rows stay in the outbox while Kafka is down (backlog {backlog})"
    );
    kafka.run("start");
    assert!(
        eventually(Duration::from_secs(90), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "the backlog drained by itself after Kafka came back"
    );
    let records = env.read_all(&env.kafka.topics.events).await.unwrap();
    let seen = counts(
        records
            .iter()
            .map(|r| EventEnvelope::decode(r.payload.as_slice()).unwrap().event_id),
    );
    let missing = published.iter().filter(|id| !seen.contains_key(*id)).count();
    assert_eq!(
        missing,
        0,
        "every one of {} events reached Kafka",
        published.len()
    );
    println!(
        "kafka outage: {} events, backlog peaked at {backlog}, {} duplicate records",
        published.len(),
        records.len() - seen.len()
    );
    assert_eq!(relay.terminate().await, Some(0));
}
