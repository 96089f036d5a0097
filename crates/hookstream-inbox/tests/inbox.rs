//! The inbox against real PostgreSQL, over real HTTP on port 0: what each request is
//! answered and stores, what the workers make of each handler outcome, ordering per key,
//! quarantine and replay, retention, and the migrations beside Hookstream's own.
//!
//! Longer than 800 lines: every case drives the same server fixture; splitting by endpoint and
//! worker would repeat it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookstream_inbox::{Batched, Handler, HandlerError, InboxConfig, Message, Outcome, Selection};
use hookstream_signing::Secret;
use hookstream_testkit::{eventually, TestEnv};
use sqlx::PgConnection;

use crate::common;
use common::{post_signed, post_signed_at, serve, statuses, test_config};

/// Processes everything.
struct Accept;

impl Handler for Accept {
    async fn handle(&self, _: &mut PgConnection, _: &Message) -> Result<Outcome, HandlerError> {
        Ok(Outcome::Done)
    }
}

#[tokio::test]
async fn each_request_is_answered_for_what_it_is_and_stored_at_most_once() {
    let env = TestEnv::new(1).await.unwrap();
    let secret = Secret::generate();
    let served = serve(&env.pool, test_config("answers", &secret), Accept).await;
    let client = reqwest::Client::new();
    let url = &served.url;
    let rows = |id: &'static str| {
        let pool = env.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM hookstream_inbox.inbox WHERE message_id = $1")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };

    // Stored, then a duplicate: both 2xx, one row.
    let body = br#"{"type":"order.paid","order_id":1}"#;
    assert_eq!(
        post_signed(&client, url, &secret, "msg_1", body).await.status(),
        204
    );
    assert_eq!(
        post_signed(&client, url, &secret, "msg_1", body).await.status(),
        204
    );
    assert_eq!(rows("msg_1").await, 1);
    let (payload, event_type): (String, Option<String>) = sqlx::query_as(
        "SELECT payload::text, event_type FROM hookstream_inbox.inbox WHERE message_id = 'msg_1'",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(payload.as_bytes(), body, "the exact body is kept");
    assert_eq!(event_type.as_deref(), Some("order.paid"));

    // JSON that jsonb would refuse (a NUL escape) is kept as sent.
    let nul = br#"{"s":"a\u0000b"}"#;
    assert_eq!(
        post_signed(&client, url, &secret, "msg_nul", nul).await.status(),
        204
    );
    assert_eq!(rows("msg_nul").await, 1);

    // Another secret: 401, nothing stored.
    let other = Secret::generate();
    let r = post_signed(&client, url, &other, "msg_2", body).await;
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("no signature matches"));
    assert_eq!(rows("msg_2").await, 0);
    // A stale timestamp: 401.
    let old = chrono::Utc::now().timestamp() - 301;
    let r = post_signed_at(&client, url, &secret, "msg_3", body, old).await;
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("webhook-timestamp"));
    // No signature header at all: 401 naming it.
    let r = client
        .post(url)
        .header("webhook-id", "msg_4")
        .header("webhook-timestamp", chrono::Utc::now().timestamp().to_string())
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("webhook-signature"));
    // The valid signature behind 16 decoys: 17 entries, refused before any HMAC.
    let now = chrono::Utc::now().timestamp();
    let sig = common::oversized_signature(&secret, "msg_7", now, body, 16);
    let r = common::post_with_signature(&client, url, "msg_7", now, &sig, body).await;
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("more than 16 `v1` signatures"));
    // Signed, but not JSON: 400. Too large: 413 (before verification: nothing read).
    let r = post_signed(&client, url, &secret, "msg_5", b"hello").await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("not JSON"));
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(1024 * 1024));
    let r = post_signed(&client, url, &secret, "msg_6", big.as_bytes()).await;
    assert_eq!(r.status(), 413);
    // A webhook-id too long to index: 400 naming it.
    let long_id = "i".repeat(300);
    let r = post_signed(&client, url, &secret, &long_id, body).await;
    assert_eq!(r.status(), 400);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("webhook-id longer than 256 bytes"));
    // Only POST.
    assert_eq!(client.get(url).send().await.unwrap().status(), 405);
    for id in ["msg_2", "msg_3", "msg_4", "msg_5", "msg_6", "msg_7"] {
        assert_eq!(rows(id).await, 0, "{id} must not be stored");
    }

    let src = ("source", "answers");
    assert_eq!(served.metric("hookstream_inbox_received_total", &[src]), 2.0);
    assert_eq!(served.metric("hookstream_inbox_duplicates_total", &[src]), 1.0);
    assert_eq!(
        served.metric(
            "hookstream_inbox_verification_failures_total",
            &[src, ("reason", "signature")]
        ),
        1.0
    );
    assert_eq!(
        served.metric(
            "hookstream_inbox_verification_failures_total",
            &[src, ("reason", "timestamp")]
        ),
        1.0
    );
    assert_eq!(
        served.metric(
            "hookstream_inbox_verification_failures_total",
            &[src, ("reason", "header")]
        ),
        1.0
    );
    assert_eq!(
        served.metric(
            "hookstream_inbox_verification_failures_total",
            &[src, ("reason", "oversized_signature")]
        ),
        1.0
    );
    assert_eq!(
        served.metric("hookstream_inbox_rejected_total", &[src, ("reason", "not_json")]),
        1.0
    );
    assert_eq!(
        served.metric("hookstream_inbox_rejected_total", &[src, ("reason", "too_large")]),
        1.0
    );
    assert_eq!(served.metric("hookstream_inbox_ack_seconds_count", &[src]), 3.0);

    // Both stored rows get processed.
    assert!(
        eventually(Duration::from_secs(10), || async {
            statuses(&env.pool, "answers").await == (0, 2, 0)
        })
        .await,
        "{:?}",
        statuses(&env.pool, "answers").await
    );
    assert_eq!(served.metric("hookstream_inbox_processed_total", &[src]), 2.0);
    served.stop().await.expect("clean shutdown");
}

/// Scripted by the payload's `do`: `ok`, `defer`, `fail`, `panic`, `flaky` (fails twice,
/// then done), `gate` (deferred until `open`). Every run first writes a `scripted` row on
/// the transaction, so a rolled-back outcome leaves nothing.
#[derive(Default)]
struct Scripted {
    open: AtomicBool,
    runs: Mutex<HashMap<String, u32>>,
}

impl Handler for Scripted {
    async fn handle(&self, conn: &mut PgConnection, m: &Message) -> Result<Outcome, HandlerError> {
        sqlx::query("INSERT INTO scripted (message_id) VALUES ($1)")
            .bind(&m.message_id)
            .execute(&mut *conn)
            .await?;
        let run = {
            let mut runs = self.runs.lock().unwrap();
            let n = runs.entry(m.message_id.clone()).or_default();
            *n += 1;
            *n
        };
        Ok(match m.payload["do"].as_str().unwrap_or("ok") {
            "defer" => Outcome::defer("waiting for nothing"),
            "fail" => return Err("the business said no".into()),
            "panic" => panic!("handler bug"),
            // Its recorded failures, not its runs: a run may be rolled back and redone.
            "flaky" if m.attempts < 2 => Outcome::fail(format!("flaky run {run}")),
            "gate" if !self.open.load(Ordering::SeqCst) => Outcome::defer("gate closed"),
            _ => Outcome::Done,
        })
    }
}

#[tokio::test]
async fn outcomes_commit_with_their_mark_and_bounded_ones_end_in_quarantine_until_replayed() {
    let env = TestEnv::new(1).await.unwrap();
    sqlx::query("CREATE TABLE scripted (message_id text NOT NULL)")
        .execute(&env.pool)
        .await
        .unwrap();
    let secret = Secret::generate();
    let cfg = InboxConfig {
        max_deferrals: 4,
        max_attempts: 3,
        ..test_config("outcomes", &secret)
    };
    let handler = Arc::new(Scripted::default());
    let served = serve(&env.pool, cfg, handler.clone()).await;
    let client = reqwest::Client::new();
    for what in ["ok", "defer", "fail", "panic", "flaky", "gate"] {
        let body = serde_json::to_vec(&serde_json::json!({ "do": what })).unwrap();
        assert_eq!(
            post_signed(&client, &served.url, &secret, what, &body)
                .await
                .status(),
            204
        );
    }
    let pool = &env.pool;
    let state = |id: &'static str| async move {
        sqlx::query_as::<_, (String, i32, i32, Option<String>)>(
            "SELECT status, deferrals, attempts, last_reason FROM hookstream_inbox.inbox
              WHERE source = 'outcomes' AND message_id = $1",
        )
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
    };
    let settled = eventually(Duration::from_secs(20), || async {
        let mut done = true;
        for id in ["ok", "defer", "fail", "panic", "flaky", "gate"] {
            done &= state(id).await.0 != "pending";
        }
        done
    })
    .await;
    assert!(settled, "every row should be processed or quarantined");
    assert_eq!(state("ok").await.0, "processed");
    assert_eq!(state("flaky").await.0, "processed");
    assert_eq!(state("flaky").await.2, 2, "two failures before it went through");
    let (status, deferrals, _, reason) = state("defer").await;
    assert_eq!(status, "quarantined");
    assert_eq!(deferrals, 5, "four deferrals, and the fifth quarantined it");
    assert_eq!(
        reason.as_deref(),
        Some("deferred 4 times (inbox.max_deferrals 4): waiting for nothing")
    );
    let (status, _, attempts, reason) = state("fail").await;
    assert_eq!((status.as_str(), attempts), ("quarantined", 3));
    assert!(reason.unwrap().contains("handler error: the business said no"));
    let (status, _, _, reason) = state("panic").await;
    assert_eq!(status, "quarantined");
    assert!(reason.unwrap().contains("handler panicked: handler bug"));
    assert_eq!(state("gate").await.0, "quarantined");

    // Only committed outcomes left their business row: one per processed message.
    let written: Vec<String> = sqlx::query_scalar("SELECT message_id FROM scripted ORDER BY 1")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(written, ["flaky", "ok"]);

    // Listed with their reasons, counted, then the gate opens and a replay processes it.
    let listed = hookstream_inbox::list_quarantined(pool, Some("outcomes"), 100)
        .await
        .unwrap();
    let ids: Vec<&str> = listed.iter().map(|q| q.message_id.as_str()).collect();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(listed.iter().all(|q| q.reason.is_some()));
    assert!(
        eventually(Duration::from_secs(5), || async {
            served.metric("hookstream_inbox_quarantined", &[("source", "outcomes")]) == 4.0
        })
        .await
    );
    assert_eq!(
        served.metric("hookstream_inbox_quarantined_total", &[("reason", "deferred")]),
        2.0
    );
    assert_eq!(
        served.metric("hookstream_inbox_quarantined_total", &[("reason", "failed")]),
        2.0
    );
    // The administration binary sees the same.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookstream-inbox"))
            .args(["--database-url", &env.database.url])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let listed_by_cli = cli(&["quarantine", "list", "--source", "outcomes", "--json"]);
    assert_eq!(listed_by_cli.as_array().map(Vec::len), Some(4));
    assert!(listed_by_cli[0]["reason"].as_str().is_some());
    let stats = cli(&["stats", "--json"]);
    let mine = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == "outcomes")
        .unwrap();
    assert_eq!(
        (mine["quarantined"].as_i64(), mine["processed"].as_i64()),
        (Some(4), Some(2))
    );
    handler.open.store(true, Ordering::SeqCst);
    let gate = listed.iter().find(|q| q.message_id == "gate").unwrap().id;
    let replayed = hookstream_inbox::replay_quarantined(pool, "outcomes", &Selection::Ids(vec![gate]), None)
        .await
        .unwrap();
    assert_eq!(replayed, vec![gate]);
    assert!(
        eventually(Duration::from_secs(10), || async {
            state("gate").await.0 == "processed"
        })
        .await
    );
    let (_, deferrals, _, _) = state("gate").await;
    assert_eq!(deferrals, 0, "a replay starts the bounds afresh");
    // Replaying everything puts the rest back; they end in quarantine again.
    let again = hookstream_inbox::replay_quarantined(pool, "outcomes", &Selection::All, None)
        .await
        .unwrap();
    assert_eq!(again.len(), 3);
    served.stop().await.expect("clean shutdown");
}

/// Writes a `swallowed` row, then for `{"swallow": true}` runs a statement that fails, ignores
/// the error and answers `Done` (the "catch the unique violation, it was a duplicate" mistake):
/// the transaction is aborted by then.
struct Swallower;

impl Handler for Swallower {
    async fn handle(&self, conn: &mut PgConnection, m: &Message) -> Result<Outcome, HandlerError> {
        sqlx::query("INSERT INTO swallowed (message_id) VALUES ($1)")
            .bind(&m.message_id)
            .execute(&mut *conn)
            .await?;
        if m.payload["swallow"] == true {
            let _ = sqlx::query("SELECT 1 / 0").execute(&mut *conn).await;
        }
        Ok(Outcome::Done)
    }
}

/// A handler that answers `Done` over a failed statement fails that row alone: the rows
/// beside it are processed, it is failed and, at `max_attempts`, quarantined with a reason
/// that says so. (It used to leave the batch aborted at the next statement, and the batch was
/// rolled back and claimed again, with every row in it, for good.)
#[tokio::test]
async fn a_handler_answering_done_over_a_failed_statement_fails_that_row_alone() {
    let env = TestEnv::new(1).await.unwrap();
    sqlx::query("CREATE TABLE swallowed (message_id text NOT NULL)")
        .execute(&env.pool)
        .await
        .unwrap();
    let secret = Secret::generate();
    let cfg = InboxConfig {
        max_attempts: 2,
        // Rows gather into one batch: the swallowing row has neighbours on both sides.
        claim_linger_ms: 300,
        ..test_config("swallow", &secret)
    };
    let served = serve(&env.pool, cfg, Swallower).await;
    let client = reqwest::Client::new();
    for (id, swallow) in [("before", false), ("bad", true), ("after", false)] {
        let body = serde_json::to_vec(&serde_json::json!({ "swallow": swallow })).unwrap();
        assert_eq!(
            post_signed(&client, &served.url, &secret, id, &body)
                .await
                .status(),
            204
        );
    }
    let pool = &env.pool;
    let state = |id: &'static str| async move {
        sqlx::query_as::<_, (String, i32, Option<String>)>(
            "SELECT status, attempts, last_reason FROM hookstream_inbox.inbox
              WHERE source = 'swallow' AND message_id = $1",
        )
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
    };
    assert!(
        eventually(Duration::from_secs(20), || async {
            state("bad").await.0 == "quarantined"
        })
        .await,
        "the swallowing row is quarantined: {:?}",
        state("bad").await
    );
    let (_, attempts, reason) = state("bad").await;
    assert_eq!(attempts, 2);
    let reason = reason.unwrap();
    assert!(
        reason.contains("the handler answered Done, but one of its statements had failed"),
        "{reason}"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            state("before").await.0 == "processed" && state("after").await.0 == "processed"
        })
        .await,
        "its neighbours are processed: {:?} {:?}",
        state("before").await,
        state("after").await
    );
    let written: Vec<String> = sqlx::query_scalar("SELECT message_id FROM swallowed ORDER BY 1")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(
        written,
        ["after", "before"],
        "the bad row's writes were rolled back"
    );
    served.stop().await.expect("clean shutdown");
}

/// Records, on the transaction, the order rows are processed in (runs rolled back leave no
/// record); the first message of key `b` is deferred twice. Runs of one key must never
/// overlap.
#[derive(Default)]
struct Recorder {
    active: Mutex<HashMap<String, u32>>,
    overlap: AtomicBool,
}

impl Handler for Recorder {
    async fn handle(&self, conn: &mut PgConnection, m: &Message) -> Result<Outcome, HandlerError> {
        let key = m.ordering_key.clone().unwrap_or_default();
        let seq = m.payload["seq"].as_i64().unwrap();
        {
            let mut active = self.active.lock().unwrap();
            let n = active.entry(key.clone()).or_default();
            if *n > 0 {
                self.overlap.store(true, Ordering::SeqCst);
            }
            *n += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.active
            .lock()
            .unwrap()
            .entry(key.clone())
            .and_modify(|n| *n -= 1);
        if key == "b" && seq == 0 && m.deferrals < 2 {
            return Ok(Outcome::defer("b0 not ready"));
        }
        sqlx::query("INSERT INTO recorded (key, seq) VALUES ($1, $2)")
            .bind(&key)
            .bind(seq)
            .execute(&mut *conn)
            .await?;
        Ok(Outcome::Done)
    }
}

#[tokio::test]
async fn an_ordering_key_processes_its_rows_one_at_a_time_in_arrival_order() {
    let env = TestEnv::new(1).await.unwrap();
    let secret = Secret::generate();
    let cfg = InboxConfig {
        ordering_key: Some("/key".into()),
        workers: 4,
        batch_size: 10,
        ..test_config("ordered", &secret)
    };
    sqlx::query("CREATE TABLE recorded (n bigserial PRIMARY KEY, key text NOT NULL, seq bigint NOT NULL)")
        .execute(&env.pool)
        .await
        .unwrap();
    let recorder = Arc::new(Recorder::default());
    let served = serve(&env.pool, cfg, recorder.clone()).await;
    let client = reqwest::Client::new();
    // Requests of one key one after the other (arrival order), keys in parallel.
    let per_key = 30;
    let mut sends = Vec::new();
    for key in ["a", "b", "c", "d"] {
        let (client, url, secret) = (client.clone(), served.url.clone(), secret.clone());
        sends.push(tokio::spawn(async move {
            for seq in 0..per_key {
                let body = serde_json::to_vec(&serde_json::json!({ "key": key, "seq": seq })).unwrap();
                let r = post_signed(&client, &url, &secret, &format!("{key}-{seq}"), &body).await;
                assert_eq!(r.status(), 204);
            }
        }));
    }
    for s in sends {
        s.await.unwrap();
    }
    let recorded = || async {
        sqlx::query_as::<_, (String, i64)>("SELECT key, seq FROM recorded ORDER BY n")
            .fetch_all(&env.pool)
            .await
            .unwrap()
    };
    assert!(
        eventually(Duration::from_secs(20), || async {
            recorded().await.len() == 4 * per_key as usize
        })
        .await,
        "processed {}",
        recorded().await.len()
    );
    let order = recorded().await;
    for key in ["a", "b", "c", "d"] {
        let seqs: Vec<i64> = order.iter().filter(|(k, _)| k == key).map(|(_, s)| *s).collect();
        assert_eq!(seqs, (0..per_key).collect::<Vec<_>>(), "key {key} out of order");
    }
    assert!(
        !recorder.overlap.load(Ordering::SeqCst),
        "two rows of one key ran at once"
    );
    let b0: i32 = sqlx::query_scalar(
        "SELECT deferrals FROM hookstream_inbox.inbox WHERE source = 'ordered' AND message_id = 'b-0'",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(b0, 2, "b's head was deferred and held b back");
    served.stop().await.expect("clean shutdown");
}

#[tokio::test]
async fn processed_rows_are_pruned_after_the_retention_window_and_nothing_else() {
    let env = TestEnv::new(1).await.unwrap();
    let secret = Secret::generate();
    let cfg = InboxConfig {
        retention_hours: 24,
        ..test_config("retention", &secret)
    };
    let served = serve(&env.pool, cfg.clone(), Accept).await;
    let client = reqwest::Client::new();
    for i in 0..6 {
        let r = post_signed(&client, &served.url, &secret, &format!("r{i}"), b"{}").await;
        assert_eq!(r.status(), 204);
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            statuses(&env.pool, "retention").await.1 == 6
        })
        .await
    );
    served.stop().await.unwrap();
    // Two processed long ago, one quarantined long ago; the rest recent.
    sqlx::raw_sql(
        "UPDATE hookstream_inbox.inbox SET processed_at = now() - interval '25 hours'
          WHERE source = 'retention' AND message_id IN ('r0', 'r1');
         UPDATE hookstream_inbox.inbox SET status = 'quarantined', processed_at = now() - interval '25 hours',
                quarantined_at = now() - interval '25 hours'
          WHERE source = 'retention' AND message_id = 'r2';",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    let metrics = hookstream_inbox::InboxMetrics::unregistered();
    let pruned = hookstream_inbox::maintenance::prune_once(&env.pool, &cfg, &metrics)
        .await
        .unwrap();
    assert_eq!(pruned, 2);
    let left: Vec<String> = sqlx::query_scalar(
        "SELECT message_id FROM hookstream_inbox.inbox WHERE source = 'retention' ORDER BY 1",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(left, ["r2", "r3", "r4", "r5"]);
}

#[tokio::test]
async fn the_inbox_migrates_beside_hookstreams_own_schema_and_the_sql_file_applies_again() {
    let env = TestEnv::new(1).await.unwrap();
    // The test database already has Hookstream's migrations (a service that sends and
    // receives in one database).
    hookstream_inbox::migrate(&env.pool).await.unwrap();
    hookstream_inbox::migrate(&env.pool).await.unwrap();
    hookstream_store::migrate(&env.pool)
        .await
        .expect("Hookstream's migrator does not see the inbox's history");
    // What receivers in other languages do: the file as it is, in one transaction.
    let sql =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/0001_inbox.sql")).unwrap();
    let mut tx = env.pool.begin().await.unwrap();
    sqlx::raw_sql(&sql).execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    let inbox_history: i64 = sqlx::query_scalar("SELECT count(*) FROM hookstream_inbox._sqlx_migrations")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(inbox_history, 1);
    // Connections of the pool still see the default search path.
    for _ in 0..12 {
        let path: String = sqlx::query_scalar("SHOW search_path")
            .fetch_one(&env.pool)
            .await
            .unwrap();
        assert!(!path.contains("hookstream_inbox"), "{path}");
    }
    // Concurrent migrations (several replicas starting) wait for each other.
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let pool = env.pool.clone();
            tokio::spawn(async move { hookstream_inbox::migrate(&pool).await })
        })
        .collect();
    for r in runs {
        r.await.unwrap().unwrap();
    }
}

/// Touches its own inbox row inside the batch (which moves the row), and counts its runs.
#[derive(Default)]
struct Toucher {
    runs: std::sync::atomic::AtomicUsize,
}

impl Handler for Toucher {
    async fn handle(&self, conn: &mut PgConnection, m: &Message) -> Result<Outcome, HandlerError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        sqlx::query("UPDATE hookstream_inbox.inbox SET event_type = 'touched' WHERE id = $1")
            .bind(m.id)
            .execute(conn)
            .await?;
        Ok(Outcome::Done)
    }
}

#[tokio::test]
async fn a_handler_that_updates_its_own_inbox_row_still_gets_the_row_marked_once() {
    let env = TestEnv::new(1).await.unwrap();
    let secret = Secret::generate();
    let cfg = InboxConfig {
        batch_size: 8,
        ..test_config("toucher", &secret)
    };
    let toucher = Arc::new(Toucher::default());
    let served = serve(&env.pool, cfg, toucher.clone()).await;
    let client = reqwest::Client::new();
    for n in 0..20 {
        let body = serde_json::to_vec(&serde_json::json!({ "n": n })).unwrap();
        let r = post_signed(&client, &served.url, &secret, &format!("t-{n}"), &body).await;
        assert_eq!(r.status(), 204);
    }
    // The mark finds claimed rows by where they were claimed; a row the handler moved is
    // marked by id instead, so the batch still commits (else it would be retried forever).
    assert!(
        eventually(Duration::from_secs(20), || async {
            statuses(&env.pool, "toucher").await.1 == 20
        })
        .await,
        "processed (pending, processed, quarantined) = {:?}",
        statuses(&env.pool, "toucher").await
    );
    assert_eq!(toucher.runs.load(Ordering::SeqCst), 20, "each row handled once");
    let touched: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM hookstream_inbox.inbox WHERE source = 'toucher' AND event_type = 'touched'",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(touched, 20, "the handler's writes committed with the mark");
    served.stop().await.expect("clean shutdown");
}

/// Processes whole batches (`handle_batch`) unless one holds a message it cannot do at once;
/// writes a business row per message either way, so a rolled-back batch would show as twice.
#[derive(Default)]
struct Batching {
    batches: Mutex<Vec<usize>>,
    singles: Mutex<Vec<String>>,
}

impl Handler for Batching {
    async fn handle(&self, conn: &mut PgConnection, m: &Message) -> Result<Outcome, HandlerError> {
        self.singles.lock().unwrap().push(m.message_id.clone());
        sqlx::query("INSERT INTO batched (message_id) VALUES ($1)")
            .bind(&m.message_id)
            .execute(&mut *conn)
            .await?;
        Ok(match m.payload["do"].as_str() {
            Some("later") if m.deferrals == 0 => Outcome::defer("not yet"),
            _ => Outcome::Done,
        })
    }

    async fn handle_batch(
        &self,
        conn: &mut PgConnection,
        messages: &[Message],
    ) -> Result<Batched, HandlerError> {
        self.batches.lock().unwrap().push(messages.len());
        let ids: Vec<&str> = messages.iter().map(|m| m.message_id.as_str()).collect();
        sqlx::query("INSERT INTO batched (message_id) SELECT unnest($1::text[])")
            .bind(&ids)
            .execute(&mut *conn)
            .await?;
        // Written first, then refused: the worker must roll those rows back.
        let what = |w: &str| messages.iter().any(|m| m.payload["do"] == w);
        if what("later") {
            return Ok(Batched::OneByOne);
        }
        if what("error") {
            return Err("the batch said no".into());
        }
        if what("panic") {
            panic!("batch bug");
        }
        Ok(Batched::AllDone)
    }
}

#[tokio::test]
async fn a_batch_handler_processes_whole_batches_and_leaves_what_it_cannot_to_handle() {
    let env = TestEnv::new(1).await.unwrap();
    let pool = &env.pool;
    hookstream_inbox::migrate(pool).await.unwrap();
    sqlx::query("CREATE TABLE batched (message_id text NOT NULL)")
        .execute(pool)
        .await
        .unwrap();
    let row = |id: String, what: &str| hookstream_inbox::store::NewMessage {
        message_id: id,
        event_type: Some("t".into()),
        ordering_key: None,
        payload: serde_json::json!({ "do": what }).to_string(),
        webhook_timestamp: 0,
    };
    // One statement each: a claim sees all of a group's rows or none.
    let store = |rows: Vec<hookstream_inbox::store::NewMessage>| async move {
        hookstream_inbox::store::insert_batch(pool, "batching", &rows)
            .await
            .unwrap();
    };
    store((0..6).map(|n| row(format!("a-{n}"), "ok")).collect()).await;

    let secret = Secret::generate();
    let handler = Arc::new(Batching::default());
    // One worker, so that which batch runs whole and which one by one is deterministic.
    let cfg = InboxConfig {
        workers: 1,
        ..test_config("batching", &secret)
    };
    let served = serve(pool, cfg, handler.clone()).await;
    let processed = |n: i64| async move {
        eventually(Duration::from_secs(20), || async {
            statuses(pool, "batching").await == (0, n, 0)
        })
        .await
    };
    assert!(processed(6).await, "{:?}", statuses(pool, "batching").await);
    assert_eq!(*handler.batches.lock().unwrap(), [6], "the six rows in one call");
    assert!(
        handler.singles.lock().unwrap().is_empty(),
        "handle was not needed"
    );

    // A batch with a message that must wait, one whose batch errs, one whose batch panics:
    // each batch is rolled back and its messages go through `handle` one by one.
    // (One group at a time: after a batch that is not all `Done`, a worker runs the next
    // batches one by one until one is.)
    for (n, (group, odd)) in [("b", "later"), ("c", "error"), ("d", "panic")]
        .into_iter()
        .enumerate()
    {
        let mut rows: Vec<_> = (0..3).map(|n| row(format!("{group}-{n}"), "ok")).collect();
        rows.push(row(format!("{group}-odd"), odd));
        store(rows).await;
        let total = 6 + 4 * (n as i64 + 1);
        assert!(
            processed(total).await,
            "{group}: {:?}",
            statuses(pool, "batching").await
        );
    }
    let batches = handler.batches.lock().unwrap().clone();
    // Each group offered whole once; the waiting message may be offered again alone when it
    // is due (once an empty claim has ended the one-by-one spell).
    assert_eq!(batches[0], 6, "{batches:?}");
    assert_eq!(batches.iter().filter(|n| **n == 4).count(), 3, "{batches:?}");
    assert!(batches[1..].iter().all(|n| *n == 4 || *n == 1), "{batches:?}");
    let singles = handler.singles.lock().unwrap().clone();
    for id in ["b-0", "b-odd", "c-0", "c-odd", "d-0", "d-odd"] {
        assert!(
            singles.iter().any(|s| s == id),
            "{id} went through handle: {singles:?}"
        );
    }
    let deferred: i32 = sqlx::query_scalar(
        "SELECT deferrals FROM hookstream_inbox.inbox WHERE source = 'batching' AND message_id = 'b-odd'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(deferred, 1, "the waiting message was deferred once, by handle");
    // Exactly one business row per message: nothing of a refused batch survived.
    let written: Vec<(String, i64)> =
        sqlx::query_as("SELECT message_id, count(*) FROM batched GROUP BY 1 ORDER BY 1")
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(written.len(), 18, "{written:?}");
    assert!(written.iter().all(|(_, n)| *n == 1), "{written:?}");
    served.stop().await.expect("clean shutdown");
}
