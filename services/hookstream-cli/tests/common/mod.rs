//! Running the `hookstream` binary in tests: a clean environment, and what it printed.

#![allow(dead_code)] // each test binary uses a part

use hookstream_testkit::process::service_env;
use hookstream_testkit::TestEnv;
use serde_json::Value;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// What one run printed, and its exit code.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }

    pub fn ok(self) -> Self {
        assert_eq!(
            self.code,
            Some(0),
            "stdout: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
        self
    }
}

/// `hookstream` with nothing of this process's environment but `PATH`.
pub fn command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hookstream"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    c
}

/// `hookstream` configured for this test's database, topics and groups, with `brokers`.
pub fn against(env: &TestEnv, brokers: &str) -> Command {
    let mut c = command();
    c.envs(service_env(env))
        .args(["--database-url", &env.database.url, "--brokers", brokers]);
    c
}

/// Runs it to the end.
pub async fn run(mut c: Command) -> Run {
    let out = c.output().await.expect("run hookstream");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The retry schedule the CLI tests run with (one retry after a second): what
/// `start_pipeline`'s dispatcher uses, and what `HOOKSTREAM_RETRY__SCHEDULE_MS` gives the CLI.
pub const SCHEDULE: &str = "[1000]";

pub fn retry(env: &TestEnv) -> hookstream_config::RetryConfig {
    hookstream_config::RetryConfig {
        schedule_ms: vec![1_000],
        jitter: 0.0,
        ..env.retry.clone()
    }
}

/// The relay and a dispatcher (loopback receivers allowed), until the token is cancelled.
pub fn start_pipeline(env: &TestEnv) -> CancellationToken {
    let token = CancellationToken::new();
    let relay = outbox_relay::Config {
        database: env.database.clone(),
        secrets: env.secrets.clone(),
        kafka: env.kafka.clone(),
        ..Default::default()
    };
    let mut cfg = dispatcher::Config {
        database: env.database.clone(),
        kafka: env.kafka.clone(),
        retry: retry(env),
        secrets: env.secrets.clone(),
        ..Default::default()
    };
    cfg.delivery.allow_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    cfg.dlq.sink_group_id = env.dlq_sink_group();
    cfg.attempts.sink_group_id = env.attempt_sink_group();
    let t = token.clone();
    tokio::spawn(async move {
        outbox_relay::run(relay, &prometheus::Registry::new(), Default::default(), t)
            .await
            .expect("relay runs");
    });
    let t = token.clone();
    tokio::spawn(async move {
        dispatcher::run(cfg, &prometheus::Registry::new(), Default::default(), t)
            .await
            .expect("dispatcher runs");
    });
    token
}
