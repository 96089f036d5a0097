//! Receivers on the inbox with a real Hookstream delivering to them (outbox, relay, Kafka,
//! dispatcher, signed POSTs): a duplicate storm (fan-out, a DLQ replay, resends and a
//! SIGKILLed dispatcher) processed exactly once, 1,000 orders shipped before they are paid, a
//! receiver SIGKILLed while it processes, and the Python and Node receivers of `examples/`
//! judged by the same rules on the same table, their metrics and retention included.
//!
//! Longer than 800 lines: the receivers' end-to-end cases share one pipeline and one judge (the
//! same rules for the Rust, Python and Node receivers), which a split would have to export.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use hookstream_inbox::demo::Shop;
use hookstream_inbox::InboxConfig;
use hookstream_replay::{ReplayOptions, Replayer};
use hookstream_signing::Secret;
use hookstream_store::dead_letters::Filter;
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::process::ServiceProcess;
use hookstream_testkit::{eventually, TestEnv};
use serde_json::json;
use sqlx::PgPool;
use tokio::process::{Child, Command};

use crate::common;
use common::{
    dispatcher_bin, dispatcher_config, dispatcher_process_env, endpoint, log_lines, post_signed, serve,
    start_pipeline, start_relay, statuses, test_config,
};

/// `shop_log` rows and distinct message ids among them.
async fn processed(pool: &PgPool) -> (i64, i64) {
    sqlx::query_as("SELECT count(*), count(DISTINCT message_id) FROM shop_log")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn publish_chunked(env: &TestEnv, events: Vec<NewEvent>) -> Vec<uuid::Uuid> {
    let mut ids = Vec::new();
    for chunk in events.chunks(500) {
        ids.extend(env.publish(chunk).await.unwrap());
    }
    ids
}

fn order_event(tenant: uuid::Uuid, kind: &str, order: i64) -> NewEvent {
    NewEvent::new(tenant, kind, json!({ "order_id": order })).aggregate("order", order.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_storm_is_processed_exactly_once() {
    let env = TestEnv::new(2).await.unwrap();
    hookstream_inbox::demo::migrate(&env.pool).await.unwrap();
    let served = serve(
        &env.pool,
        test_config("storm", &Secret::generate()),
        Shop::default(),
    )
    .await;
    let tenant = env.tenant("storm").await.unwrap();
    // Event type storm.nK reaches K - 1 of the endpoints 1..=9 (endpoint j takes K > j), all
    // delivering to the one inbox: K - 1 concurrent deliveries of one webhook-id.
    let mut known = Vec::new();
    for j in 1..=9 {
        let types: Vec<String> = (j + 1..=10).map(|k| format!("storm.n{k}")).collect();
        let types: Vec<&str> = types.iter().map(String::as_str).collect();
        let (_, secret) = endpoint(&env, tenant, &served.url, &types).await;
        known.push(secret);
    }
    let endpoint_1 = {
        // Endpoint 1's id, for resends.
        let eps = hookstream_store::endpoints::list(&env.pool, Some(tenant))
            .await
            .unwrap();
        eps.iter().find(|e| e.event_types.len() == 9).unwrap().id
    };
    // One more endpoint whose secret the receiver does not know yet: every delivery is
    // refused (401), dead-lettered, and replayed once the receiver learned the secret.
    let (late, late_secret) = endpoint(&env, tenant, &served.url, &["storm.*"]).await;
    served.receiver.secrets().replace(known);
    // The relay in this process; the dispatcher as a process of its own, SIGKILLed mid-storm.
    let schedule = [1_000, 2_000];
    let retry = dispatcher_config(&env, schedule.to_vec()).retry;
    let relay = start_relay(&env);
    let dispatcher_vars = dispatcher_process_env(&env, &schedule);
    let spawn_dispatcher = |name: &str| {
        ServiceProcess::spawn(&dispatcher_bin(), &dispatcher_vars, &env.log_path(name))
            .expect("start dispatcher")
    };
    let first = spawn_dispatcher("dispatcher-1");

    let n = 160usize;
    let k_of = |i: usize| 3 + i % 8; // deliveries of event i in the end: 3..=10
    let events: Vec<NewEvent> = (0..n)
        .map(|i| {
            NewEvent::new(tenant, format!("storm.n{}", k_of(i)), json!({ "i": i }))
                .aggregate("storm", format!("a{}", i % 13))
        })
        .collect();
    let ids = publish_chunked(&env, events).await;
    let fanout: usize = (0..n).map(|i| k_of(i) - 1).sum();
    let src = ("source", "storm");
    let seen = |served: &common::Served| {
        served.metric("hookstream_inbox_received_total", &[src])
            + served.metric("hookstream_inbox_duplicates_total", &[src])
    };
    // Events dead-lettered for the late endpoint (some twice: redelivered after the kill).
    let dead = |pool: PgPool| async move {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(DISTINCT event_id) FROM hookstream.dead_letters WHERE endpoint_id = $1",
        )
        .bind(late)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    // SIGKILL the dispatcher while the fan-out is being delivered: what it delivered since
    // its last offset commit (auto-commit every second, of records finished) and what was in
    // flight is delivered again by its successor, once it takes the partitions over (after
    // the 6 s session timeout).
    let started = eventually(Duration::from_secs(60), || async {
        seen(&served) as usize >= fanout / 4
    })
    .await;
    assert!(started, "fan-out deliveries {} of {fanout}", seen(&served));
    first.kill9().await;
    let at_kill = seen(&served) as usize;
    assert!(
        at_kill < fanout,
        "the storm was delivered before the kill ({at_kill} of {fanout}): nothing was in flight"
    );
    let second = spawn_dispatcher("dispatcher-2");
    // The successor has finished every record (offsets committed to the end: each delivered
    // to its endpoints or dead-lettered), and the DLQ sink has stored every event's dead letter.
    assert!(
        env.committed_to_end(Duration::from_secs(60)).await,
        "the second dispatcher never finished the events topic: {} of {fanout} fan-out deliveries",
        seen(&served)
    );
    let fanned = eventually(Duration::from_secs(30), || async {
        dead(env.pool.clone()).await as usize == n
    })
    .await;
    assert!(
        fanned,
        "dead letters for {} of {n} events",
        dead(env.pool.clone()).await
    );
    assert!(
        seen(&served) as usize >= fanout,
        "fan-out deliveries {} of {fanout}",
        seen(&served)
    );
    // Each at least once (the kill redelivers some), and stored nothing (received, below).
    assert!(
        served.metric("hookstream_inbox_verification_failures_total", &[src]) as usize >= n,
        "the unknown secret's deliveries were refused: {} of {n}",
        served.metric("hookstream_inbox_verification_failures_total", &[src])
    );

    // The receiver learns the secret (a rotation); the dead letters are replayed, and ten
    // events of three deliveries are resent once more.
    served.receiver.secrets().add(late_secret);
    let replayer = Replayer::new(env.pool.clone(), &env.kafka, &retry).unwrap();
    let report = replayer
        .replay(
            &Filter {
                endpoint: Some(late),
                ..Default::default()
            },
            &ReplayOptions {
                rate_per_s: 400.0,
                dry_run: false,
            },
        )
        .await
        .unwrap();
    // Every dead letter replayed: one per event, and those the kill made twice.
    assert!(report.replayed.len() >= n, "{report:?}");
    let resent: Vec<uuid::Uuid> = (0..n)
        .filter(|i| k_of(*i) == 3)
        .take(10)
        .map(|i| ids[i])
        .collect();
    for id in &resent {
        replayer
            .resend(*id, endpoint_1, Duration::from_secs(600))
            .await
            .unwrap();
    }
    // Planned: the fan-out, the replays, the resends (without the kill's redeliveries).
    let total: usize = fanout + report.replayed.len() + resent.len();
    assert!(
        eventually(Duration::from_secs(60), || async {
            seen(&served) as usize >= total
        })
        .await,
        "deliveries {} of {total}",
        seen(&served)
    );
    assert!(
        eventually(Duration::from_secs(30), || async {
            statuses(&env.pool, "storm").await == (0, n as i64, 0)
        })
        .await,
        "{:?}",
        statuses(&env.pool, "storm").await
    );
    assert_eq!(
        second.terminate().await,
        Some(0),
        "the second dispatcher drains and exits"
    );
    relay.cancel();
    assert_eq!(
        processed(&env.pool).await,
        (n as i64, n as i64),
        "each event processed exactly once"
    );
    let received = served.metric("hookstream_inbox_received_total", &[src]) as usize;
    let duplicates = served.metric("hookstream_inbox_duplicates_total", &[src]) as usize;
    println!(
        "storm: {n} events, {total} deliveries planned, {received} received and {duplicates} duplicates counted, {} dead letters replayed; {at_kill} deliveries seen at the kill",
        report.replayed.len()
    );
    // Counted where the rows are stored: a request whose sender (the killed dispatcher) hung
    // up while its row was being written still counts once.
    assert_eq!(received, n, "every event received (stored) once");
    // More duplicates than the storm planned (every delivery but each event's first): the
    // deliveries the killed dispatcher had made but not committed, made again by its
    // successor, and stored nothing.
    assert!(
        duplicates > total - n,
        "{duplicates} duplicates, {} planned: the kill caused no redelivery (at the kill: {at_kill})",
        total - n
    );
    let logged: Vec<String> = sqlx::query_scalar("SELECT message_id FROM shop_log")
        .fetch_all(&env.pool)
        .await
        .unwrap();
    let mut want: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    let mut got = logged;
    want.sort();
    got.sort();
    assert_eq!(got, want, "exactly the published events");
    served.stop().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_shipped_before_they_are_paid_all_end_shipped_and_an_orphan_is_quarantined() {
    let env = TestEnv::new(2).await.unwrap();
    hookstream_inbox::demo::migrate(&env.pool).await.unwrap();
    let _ = common::logs();
    let cfg = InboxConfig {
        defer_backoff_ms: 100,
        max_defer_backoff_ms: 2_000,
        max_deferrals: 10,
        ..test_config("ooo", &Secret::generate())
    };
    let served = serve(&env.pool, cfg, Shop::default()).await;
    let tenant = env.tenant("shop").await.unwrap();
    let (_, secret) = endpoint(&env, tenant, &served.url, &["order.*"]).await;
    served.receiver.secrets().replace(vec![secret]);
    let pipeline = start_pipeline(&env, dispatcher_config(&env, vec![1_000, 2_000]));

    let orders = 1_000i64;
    let orphan = 1_000_000i64;
    let mut shipped: Vec<NewEvent> = (1..=orders)
        .map(|o| order_event(tenant, "order.shipped", o))
        .collect();
    shipped.push(order_event(tenant, "order.shipped", orphan));
    publish_chunked(&env, shipped).await;
    let paid: Vec<NewEvent> = (1..=orders)
        .map(|o| order_event(tenant, "order.paid", o))
        .collect();
    publish_chunked(&env, paid).await;

    let pool = &env.pool;
    let all_shipped = eventually(Duration::from_secs(90), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM shop_orders WHERE status = 'shipped'")
            .fetch_one(pool)
            .await
            .unwrap()
            == orders
    })
    .await;
    assert!(all_shipped, "{:?}", statuses(pool, "ooo").await);
    let orphan_quarantined = eventually(Duration::from_secs(60), || async {
        statuses(pool, "ooo").await == (0, 2 * orders, 1)
    })
    .await;
    assert!(orphan_quarantined, "{:?}", statuses(pool, "ooo").await);
    pipeline.cancel();

    let (reason, deferrals): (String, i32) = sqlx::query_as(
        "SELECT last_reason, deferrals FROM hookstream_inbox.inbox WHERE source = 'ooo' AND status = 'quarantined'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(
        reason,
        format!("deferred 10 times (inbox.max_deferrals 10): order {orphan} not paid yet")
    );
    assert_eq!(deferrals, 11);
    assert_eq!(
        processed(pool).await,
        (2 * orders, 2 * orders),
        "every event processed once, none rejected"
    );

    // Shipped before paid: deferred, each deferral with its reason in the row and in the log.
    let (deferred_rows, total_deferrals, wrong_reasons): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE deferrals > 0), coalesce(sum(deferrals), 0),
                count(*) FILTER (WHERE deferrals > 0 AND last_reason NOT LIKE 'order % not paid yet'
                                                     AND last_reason NOT LIKE 'deferred %')
           FROM hookstream_inbox.inbox WHERE source = 'ooo'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(
        deferred_rows > orders / 2,
        "most shipped events arrived first: {deferred_rows} deferred"
    );
    assert_eq!(wrong_reasons, 0);
    // Logged right after the commit that the counts above saw: give the last line a moment.
    let logs_of = || {
        (
            log_lines(&["inbox: message deferred", "source=\"ooo\"", "not paid yet"]),
            log_lines(&["inbox: message quarantined", "source=\"ooo\"", "not paid yet"]),
        )
    };
    eventually(Duration::from_secs(5), || async {
        let (d, q) = logs_of();
        (d.len() + q.len()) as i64 >= total_deferrals
    })
    .await;
    let (deferral_logs, quarantine_logs) = logs_of();
    assert_eq!(
        deferral_logs.len() as i64 + quarantine_logs.len() as i64,
        total_deferrals,
        "one log line per deferral"
    );
    assert_eq!(quarantine_logs.len(), 1);
    assert_eq!(
        served.metric("hookstream_inbox_deferrals_total", &[("source", "ooo")]) as i64,
        total_deferrals
    );
    // Every order was shipped after it was paid (the stamps are the statements' clocks).
    let early: i64 = sqlx::query_scalar("SELECT count(*) FROM shop_orders WHERE shipped_at < paid_at")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(early, 0);
    served.stop().await.expect("clean shutdown");
}

/// A free port on 127.0.0.1 (for a receiver that must come back on the same address).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn wait_listening(port: u16, child: &mut Child, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "receiver exited with {status} before listening:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "receiver not listening on {port}:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// Starts `program args` with `vars` (and PATH only), its output appended to `log`.
fn spawn_logged(program: &Path, args: &[&str], vars: &[(String, String)], dir: &Path, log: &Path) -> Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .kill_on_drop(true);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()))
}

fn sigterm(child: &Child) {
    let pid = child.id().expect("running");
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_killed_while_it_processes_loses_nothing_and_processes_nothing_twice() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("crash").await.unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/webhooks/hookstream");
    let (_, secret) = endpoint(&env, tenant, &url, &["order.*"]).await;
    let log = env.log_path("inbox-demo");
    let vars: Vec<(String, String)> = [
        ("HOOKSTREAM_DATABASE__URL", env.database.url.clone()),
        ("HOOKSTREAM_INBOX__SOURCE", "crash".into()),
        ("HOOKSTREAM_INBOX__SECRETS", format!("[\"{}\"]", secret.expose())),
        ("HOOKSTREAM_INBOX__POLL_INTERVAL_MS", "50".into()),
        ("HOOKSTREAM_INBOX__BATCH_SIZE", "20".into()),
        ("HOOKSTREAM_DEMO__LISTEN", format!("127.0.0.1:{port}")),
        // Slow processing (in the transaction), so that the kills land mid-batch.
        ("HOOKSTREAM_DEMO__HANDLER_DELAY_MS", "3".into()),
        ("RUST_LOG", "info".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_hookstream-inbox-demo"));
    let spawn = || spawn_logged(&bin, &[], &vars, &repo_root(), &log);
    let mut child = spawn();
    wait_listening(port, &mut child, &log).await;
    let pipeline = start_pipeline(
        &env,
        dispatcher_config(&env, vec![300, 600, 1_000, 2_000, 3_000, 5_000, 5_000, 10_000]),
    );

    let orders = 1_500i64;
    let events: Vec<NewEvent> = (1..=orders)
        .map(|o| order_event(tenant, "order.paid", o))
        .collect();
    let ids = publish_chunked(&env, events).await;
    let pool = &env.pool;
    // SIGKILL twice while it processes: once a fifth is processed, once more than half is.
    let mut kills = Vec::new();
    for threshold in [orders / 5, orders * 3 / 5] {
        let reached = eventually(Duration::from_secs(60), || async {
            processed(pool).await.0 >= threshold
        })
        .await;
        assert!(
            reached,
            "processing stalled before {threshold}: {:?}",
            processed(pool).await
        );
        let (done, _) = processed(pool).await;
        let in_flight: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
                AND (query LIKE '%pg_sleep%' OR query LIKE '%shop_%')",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        child.kill().await.unwrap();
        kills.push((done, in_flight));
        assert!(done < orders, "killed after processing had finished");
        tokio::time::sleep(Duration::from_millis(700)).await;
        child = spawn();
        wait_listening(port, &mut child, &log).await;
    }
    let finished = eventually(Duration::from_secs(90), || async {
        processed(pool).await.0 >= orders
    })
    .await;
    assert!(finished, "{:?} after kills at {kills:?}", processed(pool).await);
    assert!(
        eventually(Duration::from_secs(30), || async {
            statuses(pool, "crash").await == (0, orders, 0)
        })
        .await,
        "{:?}",
        statuses(pool, "crash").await
    );
    pipeline.cancel();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        processed(pool).await,
        (orders, orders),
        "nothing lost, nothing twice (kills at {kills:?})"
    );
    let paid: i64 = sqlx::query_scalar("SELECT count(*) FROM shop_orders WHERE status = 'paid'")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(paid, orders);
    let logged: Vec<String> = sqlx::query_scalar("SELECT message_id FROM shop_log")
        .fetch_all(pool)
        .await
        .unwrap();
    let logged: std::collections::HashSet<String> = logged.into_iter().collect();
    assert!(ids.iter().all(|id| logged.contains(&id.to_string())));
    assert!(
        kills.iter().any(|(_, in_flight)| *in_flight > 0),
        "no kill caught a transaction in flight: {kills:?}"
    );
    sigterm(&child);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the receiver drains and exits")
        .unwrap();
    assert!(status.success(), "exit {status}");
}

/// `GET /metrics` of a receiver listening on `port`, as Prometheus would scrape it.
async fn scrape(client: &reqwest::Client, port: u16) -> String {
    let r = client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .expect("metrics answered");
    assert_eq!(r.status(), 200);
    let kind = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        kind.starts_with("text/plain") && kind.contains("version=0.0.4"),
        "Prometheus text format: {kind}"
    );
    r.text().await.unwrap()
}

/// A receiver of `examples/` (python or node) judged like the Rust one: verify, store once,
/// defer until paid, quarantine the orphan, the business table written once per message;
/// the Rust library's metrics (names, labels, values) on `/metrics`, and retention.
async fn foreign_receiver(lang: &str) {
    let env = TestEnv::new(2).await.unwrap();
    let installed = install(lang);
    let tenant = env.tenant(lang).await.unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/webhooks/hookstream");
    // Two endpoints to the one receiver: every event arrives twice, with different secrets.
    let (_, a) = endpoint(&env, tenant, &url, &["order.*"]).await;
    let (_, b) = endpoint(&env, tenant, &url, &["order.*"]).await;
    let source = format!("{lang}-shop");
    let mut vars: Vec<(String, String)> = [
        ("DATABASE_URL", env.database.url.clone()),
        ("INBOX_SOURCE", source.clone()),
        ("INBOX_SECRETS", format!("{} {}", a.expose(), b.expose())),
        ("INBOX_LISTEN", format!("127.0.0.1:{port}")),
        ("INBOX_MAX_BODY_BYTES", "65536".into()),
        ("INBOX_POLL_MS", "50".into()),
        ("INBOX_DEFER_BACKOFF_MS", "100".into()),
        ("INBOX_MAX_DEFER_BACKOFF_MS", "1000".into()),
        ("INBOX_MAX_DEFERRALS", "8".into()),
        ("INBOX_STATS_INTERVAL_MS", "100".into()),
        // An hour's dedup window, pruned every 200 ms: a row backdated by two hours goes.
        ("INBOX_RETENTION_S", "3600".into()),
        ("INBOX_PRUNE_INTERVAL_MS", "200".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let (program, script, dir) = match lang {
        "python" => (
            installed.clone(),
            "shop.py",
            repo_root().join("examples/inbox-python"),
        ),
        "node" => {
            vars.push(("NODE_PATH".into(), installed.display().to_string()));
            (
                PathBuf::from("node"),
                "shop.js",
                repo_root().join("examples/inbox-node"),
            )
        }
        other => panic!("no receiver for {other}"),
    };
    let program = if program.is_relative() {
        which(&program)
    } else {
        program
    };
    let log = env.log_path(&format!("inbox-{lang}"));
    let mut child = spawn_logged(&program, &[script], &vars, &dir, &log);
    wait_listening(port, &mut child, &log).await;

    // Straight at it: what is refused stores nothing; a duplicate is a success.
    let client = reqwest::Client::new();
    let r = post_signed(&client, &url, &Secret::generate(), "direct-bad", b"{}").await;
    assert_eq!(r.status(), 401, "{lang}: another secret");
    let r = post_signed(&client, &url, &a, "direct-text", b"not json").await;
    assert_eq!(r.status(), 400, "{lang}: not JSON");
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(70_000));
    let r = post_signed(&client, &url, &a, "direct-big", big.as_bytes()).await;
    assert_eq!(r.status(), 413, "{lang}: too large");
    let stale = chrono::Utc::now().timestamp() - 400;
    let r = common::post_signed_at(&client, &url, &a, "direct-stale", b"{}", stale).await;
    assert_eq!(r.status(), 401, "{lang}: stale timestamp");
    let r = post_signed(&client, &url, &a, &"i".repeat(300), b"{}").await;
    assert_eq!(r.status(), 400, "{lang}: webhook-id too long to index");
    // A valid signature behind decoys: over the entry or byte limit, refused before any HMAC.
    let now = chrono::Utc::now().timestamp();
    for (entries, what) in [(17, "17 v1 entries"), (120, "over 4,096 bytes")] {
        let sig = common::oversized_signature(&a, "direct-decoys", now, b"{}", entries);
        let r = common::post_with_signature(&client, &url, "direct-decoys", now, &sig, b"{}").await;
        assert_eq!(r.status(), 401, "{lang}: {what}");
    }
    for _ in 0..2 {
        let r = post_signed(&client, &url, &b, "direct-ok", br#"{"type":"note.added"}"#).await;
        assert_eq!(r.status(), 204, "{lang}: stored, then a duplicate");
    }
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT message_id FROM hookstream_inbox.inbox WHERE source = $1 ORDER BY 1")
            .bind(&source)
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(
        stored,
        ["direct-ok"],
        "{lang}: only the valid delivery is stored, once"
    );

    // From Hookstream: shipped before paid, each delivered twice, and an orphan.
    let pipeline = start_pipeline(&env, dispatcher_config(&env, vec![1_000, 2_000]));
    let orders = 100i64;
    let orphan = 9_999i64;
    let mut shipped: Vec<NewEvent> = (1..=orders)
        .map(|o| order_event(tenant, "order.shipped", o))
        .collect();
    shipped.push(order_event(tenant, "order.shipped", orphan));
    publish_chunked(&env, shipped).await;
    let paid: Vec<NewEvent> = (1..=orders)
        .map(|o| order_event(tenant, "order.paid", o))
        .collect();
    publish_chunked(&env, paid).await;
    let pool = &env.pool;
    let done = eventually(Duration::from_secs(90), || async {
        statuses(pool, &source).await == (0, 2 * orders + 1, 1)
    })
    .await;
    assert!(
        done,
        "{lang}: {:?}\n{}",
        statuses(pool, &source).await,
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    pipeline.cancel();
    // Let anything still in flight land before the metrics are read.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shipped: i64 = sqlx::query_scalar("SELECT count(*) FROM shop_orders WHERE status = 'shipped'")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(shipped, orders, "{lang}: every order ends shipped");
    let early: i64 = sqlx::query_scalar("SELECT count(*) FROM shop_orders WHERE shipped_at < paid_at")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(early, 0, "{lang}: shipped only once paid");
    assert_eq!(
        processed(pool).await,
        (2 * orders + 1, 2 * orders + 1),
        "{lang}: once each"
    );
    let (reason,): (String,) = sqlx::query_as(
        "SELECT last_reason FROM hookstream_inbox.inbox WHERE source = $1 AND status = 'quarantined'",
    )
    .bind(&source)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(
        reason,
        format!("deferred 8 times (max_deferrals 8): order {orphan} not paid yet")
    );
    let total_deferrals: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(deferrals), 0) FROM hookstream_inbox.inbox WHERE source = $1",
    )
    .bind(&source)
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(
        total_deferrals > 9,
        "{lang}: shipped events waited for their payment"
    );
    // Each deferral logged with its reason (the quarantining one as the quarantine), right
    // after the commit the counts above saw: give the last line a moment.
    let lines = || {
        let text = std::fs::read_to_string(&log).unwrap();
        let count = |what: &str| {
            text.lines()
                .filter(|l| l.contains(what) && l.contains("not paid yet"))
                .count() as i64
        };
        (
            count("inbox: message deferred"),
            count("inbox: message quarantined"),
        )
    };
    eventually(Duration::from_secs(5), || async {
        let (d, q) = lines();
        d + q >= total_deferrals
    })
    .await;
    let (deferred_lines, quarantined_lines) = lines();
    assert_eq!(
        (deferred_lines + quarantined_lines, quarantined_lines),
        (total_deferrals, 1),
        "{lang}"
    );

    // The metrics, by the Rust library's names and labels. Stored: direct-ok and every
    // event; each event came twice (two endpoints), direct-ok too.
    let src = ("source", source.as_str());
    let events = 2 * orders + 1;
    let stored = events + 1;
    // The gauges follow the table every 100 ms.
    let settled = eventually(Duration::from_secs(10), || async {
        let text = scrape(&client, port).await;
        let g = |name: &str| common::metric_in(&text, name, &[src]);
        (g("hookstream_inbox_pending"), g("hookstream_inbox_quarantined")) == (0.0, 1.0)
    })
    .await;
    let text = scrape(&client, port).await;
    assert!(
        settled,
        "{lang}: gauges never showed 0 pending, 1 quarantined:\n{text}"
    );
    let m = |name: &str, labels: &[(&str, &str)]| {
        let mut all = vec![src];
        all.extend_from_slice(labels);
        common::metric_in(&text, name, &all) as i64
    };
    let received = m("hookstream_inbox_received_total", &[]);
    let duplicates = m("hookstream_inbox_duplicates_total", &[]);
    assert_eq!(received, stored, "{lang}: received, once per stored row");
    assert!(
        duplicates > events,
        "{lang}: {duplicates} duplicates, every event came twice and direct-ok too"
    );
    assert_eq!(
        m("hookstream_inbox_ack_seconds_count", &[]),
        received + duplicates,
        "{lang}: every 2xx timed"
    );
    let refused = |name: &str, reason: &str| m(name, &[("reason", reason)]);
    let verification = "hookstream_inbox_verification_failures_total";
    assert_eq!(
        (
            refused(verification, "signature"),
            refused(verification, "timestamp"),
            refused(verification, "header"),
            refused(verification, "oversized_signature"),
        ),
        (1, 1, 0, 2),
        "{lang}: the other secret, the stale timestamp, the two decoy headers"
    );
    let rejected = "hookstream_inbox_rejected_total";
    assert_eq!(
        (
            refused(rejected, "not_json"),
            refused(rejected, "too_long"),
            refused(rejected, "too_large"),
            refused(rejected, "unavailable"),
        ),
        (1, 1, 1, 0),
        "{lang}: not JSON, the long webhook-id, the large body"
    );
    assert_eq!(
        m("hookstream_inbox_processed_total", &[]),
        stored - 1,
        "{lang}: all but the orphan"
    );
    assert_eq!(
        m("hookstream_inbox_processing_latency_seconds_count", &[]),
        stored - 1
    );
    assert_eq!(
        m("hookstream_inbox_deferrals_total", &[]),
        total_deferrals,
        "{lang}: every deferral counted, the quarantining one too"
    );
    assert_eq!(
        (
            refused("hookstream_inbox_quarantined_total", "deferred"),
            refused("hookstream_inbox_quarantined_total", "failed"),
        ),
        (1, 0),
        "{lang}: the orphan"
    );
    assert_eq!(m("hookstream_inbox_failures_total", &[]), 0, "{lang}");
    assert_eq!(m("hookstream_inbox_errors_total", &[]), 0, "{lang}");
    assert_eq!(
        common::metric_in(&text, "hookstream_inbox_oldest_pending_age_seconds", &[src]),
        0.0,
        "{lang}: nothing pending"
    );
    assert_eq!(
        m("hookstream_inbox_pruned_total", &[]),
        0,
        "{lang}: everything is younger than the window"
    );

    // The Rust administration binary replays the foreign receiver's quarantine (same table).
    let admin = std::process::Command::new(env!("CARGO_BIN_EXE_hookstream-inbox"))
        .args([
            "--database-url",
            &env.database.url,
            "quarantine",
            "replay",
            "--source",
            &source,
            "--all",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        admin.status.success(),
        "{}",
        String::from_utf8_lossy(&admin.stderr)
    );
    let replayed: serde_json::Value = serde_json::from_slice(&admin.stdout).unwrap();
    assert_eq!(replayed["replayed"].as_array().map(Vec::len), Some(1));
    // Paid at last: the replayed orphan ships.
    sqlx::query("INSERT INTO shop_orders (id, status, paid_at) VALUES ($1, 'paid', now())")
        .bind(orphan)
        .execute(pool)
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            statuses(pool, &source).await == (0, 2 * orders + 2, 0)
        })
        .await,
        "{lang}: {:?}",
        statuses(pool, &source).await
    );

    // Retention: a row processed two hours ago is past the one-hour window and goes at the
    // next prune; the others, processed seconds ago, stay.
    sqlx::query(
        "UPDATE hookstream_inbox.inbox SET processed_at = now() - interval '2 hours'
          WHERE source = $1 AND message_id = 'direct-ok'",
    )
    .bind(&source)
    .execute(pool)
    .await
    .unwrap();
    let gone = eventually(Duration::from_secs(10), || async {
        statuses(pool, &source).await == (0, 2 * orders + 1, 0)
    })
    .await;
    assert!(gone, "{lang}: {:?}", statuses(pool, &source).await);
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM hookstream_inbox.inbox WHERE source = $1 AND message_id = 'direct-ok'",
    )
    .bind(&source)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(left, 0, "{lang}: the backdated row is the one pruned");
    let counted = eventually(Duration::from_secs(5), || async {
        common::metric_in(
            &scrape(&client, port).await,
            "hookstream_inbox_pruned_total",
            &[src],
        ) == 1.0
    })
    .await;
    assert!(
        counted,
        "{lang}: pruned_total is not 1:\n{}",
        scrape(&client, port).await
    );
    // The replayed orphan processed, out of quarantine (the gauge at its next refresh).
    let figures = || async {
        let text = scrape(&client, port).await;
        (
            common::metric_in(&text, "hookstream_inbox_quarantined", &[src]),
            common::metric_in(&text, "hookstream_inbox_processed_total", &[src]),
        )
    };
    let want = (0.0, stored as f64);
    let replayed = eventually(Duration::from_secs(5), || async { figures().await == want }).await;
    assert!(replayed, "{lang}: {:?}, want {want:?}", figures().await);

    sigterm(&child);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the receiver stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{lang}: exit {status}");
}

/// Installs the `lang` receiver's packages (scripts/setup/inbox-receivers.sh); returns what it
/// printed: the venv's python, or the node_modules directory.
fn install(lang: &str) -> PathBuf {
    let setup = std::process::Command::new("bash")
        .arg(repo_root().join("scripts/setup/inbox-receivers.sh"))
        .arg(lang)
        .output()
        .expect("run scripts/setup/inbox-receivers.sh");
    assert!(
        setup.status.success(),
        "installing the {lang} receiver's packages failed:\n{}",
        String::from_utf8_lossy(&setup.stderr)
    );
    PathBuf::from(
        String::from_utf8(setup.stdout)
            .unwrap()
            .trim()
            .lines()
            .last()
            .unwrap(),
    )
}

/// The Python or Node receiver with a handler that answers DONE over a failed statement
/// (tests/fixtures/swallow.*), judged like the Rust library in tests/inbox.rs: that row fails
/// alone and ends in quarantine with the reason, its neighbours are processed, its writes are
/// rolled back. (Both used to roll the whole batch back and claim it again, for good.)
async fn foreign_handler_answering_done_over_a_failed_statement(lang: &str) {
    let env = TestEnv::new(1).await.unwrap();
    sqlx::query("CREATE TABLE swallowed (message_id text NOT NULL)")
        .execute(&env.pool)
        .await
        .unwrap();
    let installed = install(lang);
    let fixtures = repo_root().join("crates/hookstream-inbox/tests/fixtures");
    let source = format!("{lang}-swallow");
    let mut cmd = match lang {
        "python" => {
            let mut c = Command::new(&installed);
            c.arg(fixtures.join("swallow.py"))
                .env("PYTHONPATH", repo_root().join("examples/inbox-python"));
            c
        }
        "node" => {
            let mut c = Command::new(which(Path::new("node")));
            c.arg(fixtures.join("swallow.js"))
                .env("NODE_PATH", &installed)
                .env("INBOX_LIB", repo_root().join("examples/inbox-node/inbox.js"));
            c
        }
        other => panic!("no receiver for {other}"),
    };
    let out = cmd
        .env("DATABASE_URL", &env.database.url)
        .env("INBOX_SOURCE", &source)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{lang}: {said}");
    let rows: Vec<(String, String, i32, Option<String>)> = sqlx::query_as(
        "SELECT message_id, status, attempts, last_reason FROM hookstream_inbox.inbox
          WHERE source = $1 ORDER BY message_id",
    )
    .bind(&source)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let states: Vec<(&str, &str, i32)> = rows
        .iter()
        .map(|(id, status, attempts, _)| (id.as_str(), status.as_str(), *attempts))
        .collect();
    assert_eq!(
        states,
        [
            ("after", "processed", 0),
            ("bad", "quarantined", 2),
            ("before", "processed", 0)
        ],
        "{lang}: {said}"
    );
    let reason = rows[1].3.as_deref().unwrap_or_default();
    assert!(
        reason.contains("the handler answered DONE, but one of its statements had failed"),
        "{lang}: {reason}"
    );
    let written: Vec<String> = sqlx::query_scalar("SELECT message_id FROM swallowed ORDER BY 1")
        .fetch_all(&env.pool)
        .await
        .unwrap();
    assert_eq!(
        written,
        ["after", "before"],
        "{lang}: the bad row's writes rolled back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_receiver_fails_alone_a_row_whose_handler_swallowed_a_database_error() {
    foreign_handler_answering_done_over_a_failed_statement("python").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_receiver_fails_alone_a_row_whose_handler_swallowed_a_database_error() {
    foreign_handler_answering_done_over_a_failed_statement("node").await;
}

fn which(program: &Path) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("{} is not on PATH", program.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_receiver_takes_real_deliveries_by_the_same_rules() {
    foreign_receiver("python").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_receiver_takes_real_deliveries_by_the_same_rules() {
    foreign_receiver("node").await;
}
