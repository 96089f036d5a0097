//! Shared by the inbox's integration tests: an inbox served on port 0 in this process, a
//! signing client (the independent `standardwebhooks` crate, as any sender would sign), a
//! Hookstream pipeline (relay and dispatcher) in this process, and log capture.

#![allow(dead_code)] // each test binary uses a part

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use hookstream_inbox::{Handler, InboxConfig, InboxMetrics, Receiver};
use hookstream_signing::Secret;
use hookstream_telemetry::{Health, Supervisor, TaskFailed};
use hookstream_testkit::TestEnv;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// An inbox route served in this process.
pub struct Served {
    pub url: String,
    pub addr: std::net::SocketAddr,
    pub receiver: Receiver,
    pub registry: prometheus::Registry,
    pub shutdown: CancellationToken,
    pub done: tokio::task::JoinHandle<Result<(), TaskFailed>>,
}

impl Served {
    /// Shuts down and returns what the supervisor said.
    pub async fn stop(self) -> Result<(), TaskFailed> {
        self.shutdown.cancel();
        drop(self.receiver);
        self.done.await.expect("supervisor task")
    }

    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric(&self.registry, name, labels)
    }
}

/// Migrates the inbox in `pool`'s database and serves `cfg` with `handler` at `/hook`.
pub async fn serve<H: Handler>(pool: &PgPool, cfg: InboxConfig, handler: H) -> Served {
    hookstream_inbox::migrate(pool).await.expect("inbox migrates");
    let registry = prometheus::Registry::new();
    let metrics = InboxMetrics::register(&registry);
    let shutdown = CancellationToken::new();
    let mut supervisor = Supervisor::new(Health::default(), shutdown.clone(), Duration::from_secs(10));
    let receiver = hookstream_inbox::start(pool.clone(), cfg, handler, &metrics, &mut supervisor);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = receiver.router("/hook");
    let stop = shutdown.clone();
    supervisor.spawn("http", async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    });
    let done = tokio::spawn(supervisor.wait());
    Served {
        url: format!("http://{addr}/hook"),
        addr,
        receiver,
        registry,
        shutdown,
        done,
    }
}

/// An inbox configuration for tests: one fresh secret, quick polling and backoff.
pub fn test_config(source: &str, secret: &Secret) -> InboxConfig {
    InboxConfig {
        source: source.into(),
        secrets: vec![secret.expose().as_str().into()],
        poll_interval_ms: 50,
        defer_backoff_ms: 50,
        max_defer_backoff_ms: 500,
        retry_backoff_ms: 50,
        max_retry_backoff_ms: 500,
        stats_interval_ms: 100,
        ..Default::default()
    }
}

/// Signs `body` for `id` now with `secret` (the `standardwebhooks` crate) and POSTs it.
pub async fn post_signed(
    client: &reqwest::Client,
    url: &str,
    secret: &Secret,
    id: &str,
    body: &[u8],
) -> reqwest::Response {
    post_signed_at(client, url, secret, id, body, chrono::Utc::now().timestamp()).await
}

pub async fn post_signed_at(
    client: &reqwest::Client,
    url: &str,
    secret: &Secret,
    id: &str,
    body: &[u8],
    ts: i64,
) -> reqwest::Response {
    let sig = signed(secret, id, ts, body);
    post_with_signature(client, url, id, ts, &sig, body).await
}

/// The `webhook-signature` an independent sender (the `standardwebhooks` crate) computes.
pub fn signed(secret: &Secret, id: &str, ts: i64, body: &[u8]) -> String {
    standardwebhooks::Webhook::new(&secret.expose())
        .unwrap()
        .sign(id, ts, body)
        .unwrap()
}

/// A delivery whose `webhook-signature` is exactly `sig`.
pub async fn post_with_signature(
    client: &reqwest::Client,
    url: &str,
    id: &str,
    ts: i64,
    sig: &str,
    body: &[u8],
) -> reqwest::Response {
    client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", sig)
        .body(body.to_vec())
        .send()
        .await
        .expect("request sent")
}

/// The value of metric `name`, summed over the series whose labels include every `labels`
/// pair (read from the text exposition, as Prometheus would).
pub fn metric(registry: &prometheus::Registry, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("metrics encode");
    metric_in(&text, name, labels)
}

/// `metric` over an exposition text (a scraped `/metrics`).
pub fn metric_in(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// Counts of the inbox rows of `source` by status.
pub async fn statuses(pool: &PgPool, source: &str) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'pending'),
                count(*) FILTER (WHERE status = 'processed'),
                count(*) FILTER (WHERE status = 'quarantined')
           FROM hookstream_inbox.inbox WHERE source = $1",
    )
    .bind(source)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Every log line of this test binary, captured (installs the subscriber on first use).
pub fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("info,sqlx=warn")
            .with_ansi(false)
            .with_writer(move || LogWriter(writer.clone()))
            .try_init();
        buf
    })
    .clone()
}

/// Captured log lines containing every one of `needles`.
pub fn log_lines(needles: &[&str]) -> Vec<String> {
    let buf = logs();
    let text = String::from_utf8_lossy(&buf.lock().unwrap()).into_owned();
    text.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .map(str::to_string)
        .collect()
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// ---- Hookstream in this process (the pattern of services/dispatcher/tests/common) ----

/// A dispatcher for this test's database and topics, loopback receivers allow-listed, with a
/// compressed retry schedule (no jitter).
pub fn dispatcher_config(env: &TestEnv, schedule_ms: Vec<u64>) -> dispatcher::Config {
    let mut cfg = dispatcher::Config {
        database: env.database.clone(),
        kafka: env.kafka.clone(),
        retry: hookstream_config::RetryConfig {
            schedule_ms,
            jitter: 0.0,
            min_throttled_delay_ms: 1_000,
            ..env.retry.clone()
        },
        dlq: dispatcher::dlq_sink::DlqConfig {
            sink_group_id: env.dlq_sink_group(),
            ..Default::default()
        },
        attempts: dispatcher::attempt_sink::AttemptsConfig {
            sink_group_id: env.attempt_sink_group(),
            ..Default::default()
        },
        secrets: env.secrets.clone(),
        ..Default::default()
    };
    cfg.delivery.allow_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    cfg
}

/// What `dispatcher_config` sets, as the environment of a dispatcher process
/// (`hookstream_testkit::process::dispatcher_env` plus the retry schedule, without jitter).
pub fn dispatcher_process_env(env: &TestEnv, schedule_ms: &[u64]) -> Vec<(String, String)> {
    let mut vars = hookstream_testkit::process::dispatcher_env(env);
    let schedule: Vec<String> = schedule_ms.iter().map(u64::to_string).collect();
    vars.extend([
        (
            "HOOKSTREAM_RETRY__SCHEDULE_MS".to_string(),
            format!("[{}]", schedule.join(", ")),
        ),
        ("HOOKSTREAM_RETRY__JITTER".to_string(), "0.0".to_string()),
        (
            "HOOKSTREAM_RETRY__MIN_THROTTLED_DELAY_MS".to_string(),
            "1000".to_string(),
        ),
    ]);
    vars
}

/// Runs a relay in this process; cancel the token to stop it.
pub fn start_relay(env: &TestEnv) -> CancellationToken {
    let token = CancellationToken::new();
    let relay = outbox_relay::Config {
        database: env.database.clone(),
        secrets: env.secrets.clone(),
        kafka: env.kafka.clone(),
        ..Default::default()
    };
    let t = token.clone();
    tokio::spawn(async move {
        outbox_relay::run(relay, &prometheus::Registry::new(), Default::default(), t)
            .await
            .expect("relay runs");
    });
    token
}

/// Runs a relay and a dispatcher with `cfg` in this process; cancel the token to stop both.
pub fn start_pipeline(env: &TestEnv, cfg: dispatcher::Config) -> CancellationToken {
    let token = start_relay(env);
    let t = token.clone();
    tokio::spawn(async move {
        dispatcher::run(cfg, &prometheus::Registry::new(), Default::default(), t)
            .await
            .expect("dispatcher runs");
    });
    token
}

/// The workspace's `dispatcher` binary, for tests that SIGKILL it (run it with
/// `hookstream_testkit::process::ServiceProcess`). Cargo builds another package's binaries
/// only when that package is built too: `make test` (`cargo test --workspace`) does; to run
/// these tests alone, `cargo build -p dispatcher` first. (A test cannot build it itself:
/// cargo holds the target directory's lock while tests run.) Panics, saying so, when it is
/// missing or older than the dispatcher's sources.
pub fn dispatcher_bin() -> PathBuf {
    // This test binary is `<target>/<profile>/deps/delivery-…`; binaries are in `<profile>`.
    let exe = std::env::current_exe().expect("test binary path");
    let bin = exe
        .ancestors()
        .nth(2)
        .expect("<target>/<profile>")
        .join(format!("dispatcher{}", std::env::consts::EXE_SUFFIX));
    let build = "run `cargo build -p dispatcher` (with this CARGO_TARGET_DIR) first, or `make test`";
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("no dispatcher binary at {}: {build}", bin.display()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../services/dispatcher/src");
    if let Some(newer) = newest_file(&src).filter(|(t, _)| *t > built) {
        panic!("{} is older than {}: {build}", bin.display(), newer.1.display());
    }
    bin
}

/// The most recently modified file under `dir`, with its time.
fn newest_file(dir: &Path) -> Option<(SystemTime, PathBuf)> {
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let found = if path.is_dir() {
            newest_file(&path)
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .map(|t| (t, path))
        };
        if let Some(f) = found {
            if newest.as_ref().is_none_or(|n| f.0 > n.0) {
                newest = Some(f);
            }
        }
    }
    newest
}

/// Creates an endpoint of `tenant` delivering to `url` and returns its id and secret.
pub async fn endpoint(
    env: &TestEnv,
    tenant: uuid::Uuid,
    url: &str,
    event_types: &[&str],
) -> (uuid::Uuid, Secret) {
    let (ep, secret) = hookstream_store::endpoint_admin::create_from(
        &env.pool,
        &env.sealer(),
        &env.address_policy(),
        hookstream_store::endpoints::NewEndpoint {
            tenant_id: tenant,
            url: url.to_string(),
            event_types: event_types.iter().map(|s| s.to_string()).collect(),
            timeout_ms: Some(10_000),
            ..Default::default()
        },
    )
    .await
    .expect("endpoint created");
    (ep.id, secret)
}

/// A `webhook-signature` whose last entry is the valid one, behind `decoys` well-formed `v1`
/// entries that match nothing: what a sender probing a receiver's CPU would send.
pub fn oversized_signature(secret: &Secret, id: &str, ts: i64, body: &[u8], decoys: usize) -> String {
    use base64::Engine as _;
    let mut entries: Vec<String> = (0..decoys)
        .map(|i| {
            format!(
                "v1,{}",
                base64::engine::general_purpose::STANDARD.encode([i as u8; 32])
            )
        })
        .collect();
    entries.push(signed(secret, id, ts, body));
    entries.join(" ")
}
