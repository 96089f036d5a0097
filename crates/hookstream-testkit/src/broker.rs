//! A private single-node Kafka for tests that stop and start the broker (the shared one serves
//! every other test): the project's stack script on free ports, in a state directory of its own.

use std::path::{Path, PathBuf};
use std::process::Command;

use hookstream_config::KafkaConfig;

use crate::process::free_port;

/// A private broker, stopped and its state removed when dropped.
pub struct PrivateKafka {
    state: PathBuf,
    port: u16,
    controller: u16,
    /// The stack's secured listeners (SASL_SSL, mutual TLS), on free ports of their own.
    secured: (u16, u16),
    /// Whether the broker checks ACLs (`start_with_acls`).
    acls: bool,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/stack/kafka.sh")
}

impl PrivateKafka {
    /// Starts it; returns once the broker is ready.
    pub fn start() -> Self {
        Self::started(false)
    }

    /// `start`, with a broker that checks ACLs: a topic without ACLs is open to every client,
    /// and the plaintext listener (the test's own admin) is a super user. `acl` changes them.
    pub fn start_with_acls() -> Self {
        Self::started(true)
    }

    fn started(acls: bool) -> Self {
        let state = std::env::temp_dir().join(format!("hookstream-kafka-{}", uuid::Uuid::new_v4().simple()));
        let k = Self {
            state,
            port: free_port(),
            controller: free_port(),
            secured: (free_port(), free_port()),
            acls,
        };
        k.run(&["start"]);
        k
    }

    /// Runs kafka-acls against it, e.g. `["--add", "--deny-principal", "User:hookstream",
    /// "--operation", "All", "--topic", t]`.
    pub fn acl(&self, args: &[&str]) {
        let mut all = vec!["acl"];
        all.extend_from_slice(args);
        self.run(&all);
    }

    /// `kafka` reached as the stack's SASL user (`hookstream`, SCRAM-SHA-512 over TLS) on this
    /// broker's SASL_SSL listener.
    pub fn sasl(&self, kafka: &KafkaConfig) -> KafkaConfig {
        crate::secured::sasl_via(
            kafka,
            "SCRAM-SHA-512",
            format!("127.0.0.1:{}", self.secured.0),
            &self.state.join("data/kafka/tls"),
        )
    }

    /// Stops the broker (a clean shutdown); its data stays for `resume`.
    pub fn stop(&self) {
        self.run(&["stop"]);
    }

    /// Starts the stopped broker again on the same ports and data; returns once it is ready.
    pub fn resume(&self) {
        self.run(&["start"]);
    }

    /// The bootstrap address of its plaintext listener.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn run(&self, args: &[&str]) {
        let status = Command::new("bash")
            .arg(script())
            .args(args)
            .env("HOOKSTREAM_KAFKA_AUTHORIZER", if self.acls { "1" } else { "0" })
            .env("HOOKSTREAM_STATE_DIR", &self.state)
            .env("HOOKSTREAM_KAFKA_PORT", self.port.to_string())
            .env("HOOKSTREAM_KAFKA_CONTROLLER_PORT", self.controller.to_string())
            .env("HOOKSTREAM_KAFKA_SASL_PORT", self.secured.0.to_string())
            .env("HOOKSTREAM_KAFKA_MTLS_PORT", self.secured.1.to_string())
            .status()
            .expect("run kafka.sh");
        assert!(status.success(), "kafka.sh {} failed", args.join(" "));
    }
}

impl Drop for PrivateKafka {
    fn drop(&mut self) {
        self.run(&["stop"]);
        let _ = std::fs::remove_dir_all(&self.state);
    }
}
