//! Service binaries run as child processes, for tests that SIGKILL them.

use std::path::Path;
use std::process::Stdio;

use tokio::process::{Child, Command};

/// A running service binary. Killed (SIGKILL) when dropped.
pub struct ServiceProcess {
    child: Child,
    pub name: String,
}

impl ServiceProcess {
    /// Starts `bin` with configuration in `env` (`HOOKSTREAM_<SECTION>__<KEY>` variables);
    /// its log goes to `log_file`.
    pub fn spawn(bin: &Path, env: &[(String, String)], log_file: &Path) -> std::io::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_file)?;
        let mut cmd = Command::new(bin);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn()?;
        Ok(Self {
            child,
            name: bin
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        })
    }

    /// `spawn`, with its admin listener on a free port (any `HOOKSTREAM_TELEMETRY__LISTEN` in
    /// `env` is replaced); returns once `/readyz` answers 200, with that port. Panics with the
    /// service's log when it is not ready within 60 s.
    pub async fn spawn_ready(bin: &Path, env: &[(String, String)], log_file: &Path) -> (Self, u16) {
        let port = free_port();
        let mut vars: Vec<(String, String)> = env
            .iter()
            .filter(|(k, _)| k != "HOOKSTREAM_TELEMETRY__LISTEN")
            .cloned()
            .collect();
        vars.push(("HOOKSTREAM_TELEMETRY__LISTEN".into(), format!("127.0.0.1:{port}")));
        let process = Self::spawn(bin, &vars, log_file).expect("start the service");
        let ready = crate::eventually(std::time::Duration::from_secs(60), || async {
            admin_get(port, "/readyz").await.map(|r| r.0) == Some(200)
        })
        .await;
        assert!(
            ready,
            "{} becomes ready: {}",
            process.name,
            std::fs::read_to_string(log_file).unwrap_or_default()
        );
        (process, port)
    }

    /// SIGTERM, then waits at most `limit` for the exit: its code and how long it took.
    /// Panics with the service's log when it is still running after `limit`.
    pub async fn terminate_within(
        self,
        limit: std::time::Duration,
        log_file: &Path,
    ) -> (Option<i32>, std::time::Duration) {
        let started = std::time::Instant::now();
        let name = self.name.clone();
        match tokio::time::timeout(limit, self.terminate()).await {
            Ok(code) => (code, started.elapsed()),
            Err(_) => panic!(
                "{name} still running {limit:?} after SIGTERM: {}",
                std::fs::read_to_string(log_file).unwrap_or_default()
            ),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// SIGKILL, and reap.
    pub async fn kill9(mut self) {
        let _ = self.child.kill().await;
    }

    /// SIGTERM, then wait for a clean exit; returns the exit code.
    pub async fn terminate(mut self) -> Option<i32> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        self.child.wait().await.ok().and_then(|s| s.code())
    }

    /// Waits for the process to exit by itself; returns its exit code.
    pub async fn wait(&mut self) -> Option<i32> {
        self.child.wait().await.ok().and_then(|s| s.code())
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Polls its `/healthz` (admin listener on `port`) every half second for `span`: `Err`
    /// with what was seen at the first answer that is not 200 (or none), or once it exits.
    pub async fn healthy_for(&mut self, port: u16, span: std::time::Duration) -> Result<(), String> {
        let started = std::time::Instant::now();
        while started.elapsed() < span {
            let answer = admin_get(port, "/healthz").await;
            if !self.is_running() || answer.as_ref().map(|a| a.0) != Some(200) {
                return Err(format!("{:?} into the span: {answer:?}", started.elapsed()));
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        Ok(())
    }

    /// Polls its `/healthz` (admin listener on `port`) until it answers 503, for at most
    /// `within` and while it runs; the 503's body (the reason), or `None`.
    pub async fn unhealthy_within(&mut self, port: u16, within: std::time::Duration) -> Option<String> {
        let started = std::time::Instant::now();
        while started.elapsed() < within && self.is_running() {
            if let Some((503, body)) = admin_get(port, "/healthz").await {
                return Some(body);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        None
    }
}

/// The configuration environment shared by every service of a test.
pub fn service_env(env: &crate::TestEnv) -> Vec<(String, String)> {
    let t = &env.kafka.topics;
    [
        ("HOOKSTREAM_DATABASE__URL", env.database.url.as_str()),
        ("HOOKSTREAM_DATABASE__MIGRATE_ON_START", "false"),
        ("HOOKSTREAM_KAFKA__BROKERS", env.kafka.brokers.as_str()),
        ("HOOKSTREAM_KAFKA__TOPICS__EVENTS", t.events.as_str()),
        ("HOOKSTREAM_KAFKA__TOPICS__DLQ", t.dlq.as_str()),
        ("HOOKSTREAM_KAFKA__TOPICS__ATTEMPTS", t.attempts.as_str()),
        ("HOOKSTREAM_KAFKA__GROUP_ID", env.kafka.group_id.as_str()),
        ("HOOKSTREAM_TELEMETRY__LISTEN", "127.0.0.1:0"),
        ("HOOKSTREAM_RETRY__TOPIC_PREFIX", env.retry.topic_prefix.as_str()),
        ("HOOKSTREAM_RETRY__GROUP_ID", env.retry.group_id.as_str()),
        ("HOOKSTREAM_SECRETS__KEY", env.secrets.key.as_str()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .chain([
        (
            "HOOKSTREAM_RETRY__PARTITIONS".to_string(),
            env.partitions.to_string(),
        ),
        ("HOOKSTREAM_DLQ__SINK_GROUP_ID".to_string(), env.dlq_sink_group()),
        (
            "HOOKSTREAM_ATTEMPTS__SINK_GROUP_ID".to_string(),
            env.attempt_sink_group(),
        ),
    ])
    .collect()
}

/// `service_env` plus what a dispatcher under test needs: loopback receivers allow-listed
/// (the built-in policy refuses them).
pub fn dispatcher_env(env: &crate::TestEnv) -> Vec<(String, String)> {
    let mut vars = service_env(env);
    vars.push((
        "HOOKSTREAM_DELIVERY__ALLOW_CIDRS".into(),
        "[\"127.0.0.0/8\"]".into(),
    ));
    vars
}

/// `GET path` from a service's admin listener on `port`: the status code and the body (`None`:
/// not answering).
pub async fn admin_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nhost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    Some((status, body))
}

/// A loopback port free a moment ago, for a child process's listener (it cannot be handed a
/// bound socket).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("binding a loopback port")
        .local_addr()
        .expect("a bound socket's address")
        .port()
}
