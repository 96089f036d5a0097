//! A private Kafka for tests that stop and start the broker or refuse a client a topic (the
//! shared one serves every other test): the project's stack script on ports of its own, in a
//! state directory of its own; one node, or a cluster of three (`cluster`).

use std::path::{Path, PathBuf};
use std::process::Command;

use hookstream_config::KafkaConfig;

/// A private broker, stopped and its state removed when dropped (kept, logs included, when
/// the test is panicking).
pub struct PrivateKafka {
    state: PathBuf,
    port: u16,
    controller: u16,
    /// The stack's secured listeners (SASL_SSL, mutual TLS).
    secured: (u16, u16),
    /// Whether the broker checks ACLs (`start_with_acls`).
    acls: bool,
    /// Nodes (`HOOKSTREAM_KAFKA_BROKERS`): node i listens at port + 100 (i - 1).
    nodes: usize,
}

/// Private brokers' state directories: `<temp>/hookstream-kafka-<uuid>`.
const STATE_PREFIX: &str = "hookstream-kafka-";
/// The pid of the test process that started the broker, in its state directory.
const OWNER_FILE: &str = "owner.pid";

/// Stops the brokers of test processes that are gone. A panicking test stops its broker (in
/// `Drop`); one killed outright (a timeout, SIGKILL) cannot, and its broker (a 1 GB heap)
/// would run until the machine restarts. Their state directories stay, logs included.
fn stop_orphans() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let state = entry.path();
        let ours = entry.file_name().to_string_lossy().starts_with(STATE_PREFIX);
        let running = state.join("run/kafka.pid").exists() || state.join("run/kafka.brokers").exists();
        if !ours || !running {
            continue;
        }
        let Some(owner) = std::fs::read_to_string(state.join(OWNER_FILE))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        let orphan = PrivateKafka {
            state,
            port: 0,
            controller: 0,
            secured: (0, 0),
            acls: false,
            // `kafka.sh stop` reads the size that runs from the state directory.
            nodes: 0,
        };
        eprintln!(
            "stopping the broker of test process {owner}, which is gone ({})",
            orphan.state.display()
        );
        orphan.thaw_quietly();
        let _ = orphan.run(&["stop"]);
        // Not dropped: that would remove its logs.
        std::mem::forget(orphan);
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/stack/kafka.sh")
}

/// A free port below the kernel's ephemeral range (32768 and up by default): while the broker
/// is stopped, another test's outgoing connection cannot take it, and a client reconnecting
/// to it cannot end up connected to itself.
fn listener_port() -> u16 {
    loop {
        let random = u16::from_le_bytes(
            uuid::Uuid::new_v4().as_bytes()[..2]
                .try_into()
                .expect("two bytes"),
        );
        let port = 20_000 + random % 12_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
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

    /// A cluster of `nodes` brokers (each a controller too), replication factor 3 and
    /// `min.insync.replicas=2` for every topic (fewer nodes: all of them); returns once every
    /// node is ready. Node i's plaintext listener is at `port + 100 (i - 1)`.
    pub fn cluster(nodes: usize) -> Self {
        stop_orphans();
        // Node i takes base + 100 (i - 1) + 0..3: all of them free.
        let base = loop {
            let base = listener_port();
            let free = (0..nodes as u16).all(|i| {
                (0..4).all(|k| std::net::TcpListener::bind(("127.0.0.1", base + 100 * i + k)).is_ok())
            });
            if free && base + 100 * nodes as u16 + 4 < 32_768 {
                break base;
            }
        };
        Self::launch(Self {
            state: Self::new_state(),
            port: base,
            controller: base + 1,
            secured: (base + 2, base + 3),
            acls: false,
            nodes,
        })
    }

    fn new_state() -> PathBuf {
        std::env::temp_dir().join(format!("{STATE_PREFIX}{}", uuid::Uuid::new_v4().simple()))
    }

    fn started(acls: bool) -> Self {
        stop_orphans();
        Self::launch(Self {
            state: Self::new_state(),
            port: listener_port(),
            controller: listener_port(),
            secured: (listener_port(), listener_port()),
            acls,
            nodes: 1,
        })
    }

    fn launch(k: Self) -> Self {
        std::fs::create_dir_all(&k.state).expect("create the broker's state directory");
        std::fs::write(k.state.join(OWNER_FILE), std::process::id().to_string())
            .expect("write the broker's owner");
        k.must(&["start"]);
        k
    }

    /// Runs kafka-acls against it, e.g. `["--add", "--deny-principal", "User:hookstream",
    /// "--operation", "All", "--topic", t]`.
    pub fn acl(&self, args: &[&str]) {
        let mut all = vec!["acl"];
        all.extend_from_slice(args);
        self.must(&all);
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
        self.must(&["stop"]);
    }

    /// Starts the stopped broker again on the same ports and data; returns once it is ready.
    pub fn resume(&self) {
        self.must(&["start"]);
    }

    /// Freezes the broker (SIGSTOP): its connections stay open and nothing answers, as with
    /// a broker stuck in a long pause or behind a partition that drops packets. `thaw` (or
    /// dropping it) lets it go on.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// Lets a frozen broker go on (SIGCONT).
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    /// `thaw` without a check: for cleaning up, when the broker may be gone already.
    fn thaw_quietly(&self) {
        if let Ok(pid) = std::fs::read_to_string(self.state.join("run/kafka.pid")) {
            let _ = Command::new("kill").args(["-CONT", pid.trim()]).status();
        }
    }

    fn signal(&self, name: &str) {
        let pidfile = self.state.join("run/kafka.pid");
        let pid = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("no broker pid in {}: {e}", pidfile.display()));
        let sent = Command::new("kill")
            .args([&format!("-{name}"), pid.trim()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(sent, "kill -{name} {} failed", pid.trim());
    }

    /// The bootstrap addresses of its plaintext listeners (every node's).
    pub fn brokers(&self) -> String {
        (0..self.nodes.max(1))
            .map(|i| format!("127.0.0.1:{}", self.port as usize + 100 * i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The variables that point `scripts/stack/kafka.sh` (and a program that runs it, as the
    /// loadtest's fault scenarios do) at this broker.
    pub fn stack_env(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![
            (
                "HOOKSTREAM_KAFKA_AUTHORIZER",
                if self.acls { "1" } else { "0" }.to_string(),
            ),
            ("HOOKSTREAM_STATE_DIR", self.state.display().to_string()),
            ("HOOKSTREAM_KAFKA_PORT", self.port.to_string()),
            ("HOOKSTREAM_KAFKA_CONTROLLER_PORT", self.controller.to_string()),
            ("HOOKSTREAM_KAFKA_SASL_PORT", self.secured.0.to_string()),
            ("HOOKSTREAM_KAFKA_MTLS_PORT", self.secured.1.to_string()),
        ];
        if self.nodes > 0 {
            vars.push(("HOOKSTREAM_KAFKA_BROKERS", self.nodes.to_string()));
        }
        vars
    }

    fn must(&self, args: &[&str]) {
        assert!(
            self.run(args),
            "kafka.sh {} failed (logs in {})",
            args.join(" "),
            self.state.join("logs").display()
        );
    }

    fn run(&self, args: &[&str]) -> bool {
        let mut command = Command::new("bash");
        command.arg(script()).args(args).envs(self.stack_env());
        if self.nodes == 0 {
            // An orphan's size is in its state directory, not in this process's environment.
            command.env_remove("HOOKSTREAM_KAFKA_BROKERS");
        }
        command.status().is_ok_and(|s| s.success())
    }
}

impl Drop for PrivateKafka {
    fn drop(&mut self) {
        // No assertion here: a second panic while unwinding would abort the test binary. A
        // frozen broker cannot stop: let it go on first (harmless when it is not frozen).
        self.thaw_quietly();
        let stopped = self.run(&["stop"]);
        if stopped && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.state);
        }
    }
}
