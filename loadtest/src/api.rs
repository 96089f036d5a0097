//! The `api` scenario: message creates through the admin API while delivery runs.
//!
//! The API, a relay and a dispatcher run as release child processes on a fresh database and
//! topics; one application has one endpoint at a local receiver (`hookstream_testkit`), so
//! every message created is also relayed and delivered during the run. `--connections` (64)
//! clients each keep one HTTP/1.1 connection and POST `/api/v1/app/{id}/msg` back to back, as
//! the Svix SDKs do (with an `idempotency-key` header), for `--seconds` after a 3 s warm-up;
//! latency is each request's round trip. Afterwards the run waits for the receiver to have
//! every created message and counts deliveries by id (none may be missing).
//!
//! Its report (`DIR/report.json`) is its own shape, not the engine scenarios' contract:
//! requests/s, latency percentiles, errors, and the delivery count.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use hookstream_testkit::process::{dispatcher_env, service_env, ServiceProcess};
use hookstream_testkit::{Behaviour, Receiver, TestEnv};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::cli::RunArgs;
use crate::stack::{prepare, service_bin};

const TOKEN: &str = "loadtest-operator-token-0000000000";
const WARMUP: Duration = Duration::from_secs(3);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(18_080)
}

fn quantile(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() as f64 - 1.0) * q).round() as usize;
    f64::from(sorted_us[i]) / 1000.0
}

pub async fn run(args: &RunArgs) -> anyhow::Result<()> {
    prepare()?;
    std::fs::create_dir_all(&args.out)?;
    let env = TestEnv::new(6).await?;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut api_env = service_env(&env);
    api_env.extend([
        ("HOOKSTREAM_API__LISTEN".to_string(), format!("127.0.0.1:{port}")),
        (
            "HOOKSTREAM_API__OPERATOR_TOKEN_HASHES".to_string(),
            format!("[\"sha256:{}\"]", hex::encode(Sha256::digest(TOKEN))),
        ),
        (
            "HOOKSTREAM_DELIVERY__ALLOW_CIDRS".to_string(),
            "[\"127.0.0.0/8\"]".to_string(),
        ),
        (
            "HOOKSTREAM_DATABASE__MAX_CONNECTIONS".to_string(),
            "16".to_string(),
        ),
    ]);
    let log = |n: &str| args.out.join(format!("{n}.log"));
    let _api = ServiceProcess::spawn(&service_bin("hookstream-api"), &api_env, &log("api"))?;
    let _relay = ServiceProcess::spawn(&service_bin("outbox-relay"), &service_env(&env), &log("relay"))?;
    let _dispatcher = ServiceProcess::spawn(
        &service_bin("dispatcher"),
        &dispatcher_env(&env),
        &log("dispatcher"),
    )?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.connections)
        .build()?;
    let ready = Instant::now();
    while client
        .get(format!("{base}/api/v1/health"))
        .send()
        .await
        .map_or(true, |r| !r.status().is_success())
    {
        anyhow::ensure!(
            ready.elapsed() < Duration::from_secs(30),
            "the API did not start (log: {})",
            log("api").display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let receiver = Receiver::start(Behaviour::Ok).await;
    let app: serde_json::Value = client
        .post(format!("{base}/api/v1/app"))
        .bearer_auth(TOKEN)
        .json(&json!({"name": "loadtest"}))
        .send()
        .await?
        .json()
        .await?;
    let app_id = app["id"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no application: {app}"))?
        .to_string();
    let ep: serde_json::Value = client
        .post(format!("{base}/api/v1/app/{app_id}/endpoint"))
        .bearer_auth(TOKEN)
        .json(&json!({"url": receiver.url()}))
        .send()
        .await?
        .json()
        .await?;
    let ep_id = ep["id"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no endpoint: {ep}"))?;
    let secret: serde_json::Value = client
        .get(format!("{base}/api/v1/app/{app_id}/endpoint/{ep_id}/secret"))
        .bearer_auth(TOKEN)
        .send()
        .await?
        .json()
        .await?;
    receiver.set_secret(secret["key"].as_str().unwrap_or_default());
    // Let the dispatcher's snapshot take the endpoint in before the clock starts.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let url = format!("{base}/api/v1/app/{app_id}/msg");
    // LOADTEST_API_IDEMPOTENCY_KEY=0: without the header (each create then stores no key).
    let with_key = std::env::var("LOADTEST_API_IDEMPOTENCY_KEY").map_or(true, |v| v != "0");
    let start = Instant::now();
    let measure_from = start + WARMUP;
    let until = measure_from + Duration::from_secs(args.seconds);
    let mut clients = Vec::new();
    for c in 0..args.connections {
        let (client, url) = (client.clone(), url.clone());
        clients.push(tokio::spawn(async move {
            let mut lat_us: Vec<u32> = Vec::new();
            let (mut ids, mut errors, mut n) = (Vec::new(), 0u64, 0u64);
            while Instant::now() < until {
                n += 1;
                let sent = Instant::now();
                let mut req = client.post(&url).bearer_auth(TOKEN);
                if with_key {
                    req = req.header("idempotency-key", format!("lt-{c}-{n}"));
                }
                let r = req
                    .json(&json!({"eventType": "order.updated", "payload": {"order": n, "client": c, "note": "a payload of about a hundred bytes"}}))
                    .send()
                    .await;
                let took = sent.elapsed();
                match r {
                    Ok(r) if r.status() == reqwest::StatusCode::ACCEPTED => {
                        let body: serde_json::Value = r.json().await.unwrap_or_default();
                        if let Some(id) = body["id"].as_str() {
                            ids.push(id.to_string());
                        }
                        if sent >= measure_from {
                            lat_us.push(took.as_micros().min(u128::from(u32::MAX)) as u32);
                        }
                    }
                    _ => errors += 1,
                }
            }
            (lat_us, ids, errors)
        }));
    }
    let mut lat: Vec<u32> = Vec::new();
    let mut created: Vec<String> = Vec::new();
    let mut errors = 0;
    for c in clients {
        let (l, i, e) = c.await?;
        lat.extend(l);
        created.extend(i);
        errors += e;
    }
    let measured_s = args.seconds as f64;
    lat.sort_unstable();
    let rps = lat.len() as f64 / measured_s;
    let delivered_during = receiver.distinct().0.len();
    // Every created message must reach the receiver.
    let wanted: HashSet<String> = created.iter().cloned().collect();
    let drain = Instant::now();
    let missing = loop {
        let got = receiver.distinct().0;
        let missing = wanted.iter().filter(|id| !got.contains(*id)).count();
        if missing == 0 || drain.elapsed() > Duration::from_secs(120) {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let report = json!({
        "scenario": "api",
        "connections": args.connections,
        "idempotency_key_header": with_key,
        "seconds": args.seconds,
        "requests_measured": lat.len(),
        "requests_per_s": rps,
        "latency_ms": {
            "p50": quantile(&lat, 0.50), "p95": quantile(&lat, 0.95), "p99": quantile(&lat, 0.99),
            "max": quantile(&lat, 1.0),
        },
        "errors": errors,
        "messages_created": wanted.len(),
        "delivered_during_run": delivered_during,
        "missing_after_drain": missing,
        "drain_s": drain.elapsed().as_secs_f64(),
        "all_signatures_verified": receiver.received().iter().all(|r| r.verified),
    });
    let text = serde_json::to_string_pretty(&report)?;
    std::fs::write(args.out.join("report.json"), &text)?;
    println!("{text}");
    anyhow::ensure!(missing == 0, "{missing} created messages were not delivered");
    anyhow::ensure!(errors == 0, "{errors} requests failed");
    env.discard().await?;
    Ok(())
}
