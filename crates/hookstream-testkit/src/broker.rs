//! A private single-node Kafka for tests that stop and start the broker (the shared one serves
//! every other test): the project's stack script on free ports, in a state directory of its own.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::process::free_port;

/// A private broker, stopped and its state removed when dropped.
pub struct PrivateKafka {
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
    /// Starts it; returns once the broker is ready.
    pub fn start() -> Self {
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

    /// Stops the broker (a clean shutdown); its data stays for `resume`.
    pub fn stop(&self) {
        self.run("stop");
    }

    /// Starts the stopped broker again on the same ports and data; returns once it is ready.
    pub fn resume(&self) {
        self.run("start");
    }

    /// The bootstrap address of its plaintext listener.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
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
}

impl Drop for PrivateKafka {
    fn drop(&mut self) {
        self.run("stop");
        let _ = std::fs::remove_dir_all(&self.state);
    }
}
