//! `hookstream event publish --data @file|@-` keeps the payload byte for byte (a 1 MB one
//! too, which no argument list holds), with channels and `--deliver-at`. Only the database is
//! read: no relay, no dispatcher.

use std::process::Stdio;

use chrono::{DateTime, Utc};
use hookstream_store::sqlx;
use hookstream_testkit::TestEnv;
use tokio::io::AsyncWriteExt as _;
use uuid::Uuid;

mod common;
use common::Run;

async fn cli(env: &TestEnv, args: &[&str]) -> Run {
    let mut c = common::against(env, &env.kafka.brokers);
    c.args(args);
    common::run(c).await
}

/// Runs it with `input` on standard input.
async fn cli_with_stdin(env: &TestEnv, args: &[&str], input: &[u8]) -> Run {
    let mut c = common::against(env, &env.kafka.brokers);
    c.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("run hookstream");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn event_id(run: &Run) -> Uuid {
    let ids = run.json()["event_ids"].clone();
    assert_eq!(ids.as_array().map(Vec::len), Some(1), "{ids}");
    ids[0].as_str().unwrap().parse().unwrap()
}

async fn stored_payload(env: &TestEnv, id: Uuid) -> String {
    sqlx::query_scalar("SELECT payload FROM hookstream.outbox WHERE event_id = $1")
        .bind(id)
        .fetch_one(&env.pool)
        .await
        .unwrap()
}

/// A payload of exactly `size` bytes, formatted as no serialiser would write it.
fn big_payload(size: usize) -> String {
    let head = "{\n  \"zeta\" : 1.50,\t\"u\":\"\\u00e9 é\", \"n\": 1e2, \"blob\": \"";
    let tail = "\"  }\n";
    let filler = size - head.len() - tail.len();
    format!("{head}{}{tail}", "x".repeat(filler))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_are_kept_byte_for_byte_with_channels_and_schedules() {
    let env = TestEnv::new(1).await.unwrap();
    env.tenant("acme").await.unwrap();
    let publish = [
        "event",
        "publish",
        "--tenant",
        "acme",
        "--type",
        "order.paid",
        "--json",
    ];

    // 1 MB from a file: no argument list would hold it.
    let big = big_payload(1_000_000);
    let dir = std::env::temp_dir().join("hookstream-tests").join(&env.name);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("big.json");
    std::fs::write(&file, &big).unwrap();
    let arg = format!("@{}", file.display());
    let run = cli(&env, &[&publish[..], &["--data", &arg]].concat()).await.ok();
    assert_eq!(
        stored_payload(&env, event_id(&run)).await.as_bytes(),
        big.as_bytes()
    );

    // The same from standard input.
    let run = cli_with_stdin(&env, &[&publish[..], &["--data", "@-"]].concat(), big.as_bytes())
        .await
        .ok();
    assert_eq!(
        stored_payload(&env, event_id(&run)).await.as_bytes(),
        big.as_bytes()
    );

    // Inline, with formatting a JSON round trip would change.
    let odd = r#"{"zeta":1,  "alpha":2.50,"n":1e2,"u":"\u00e9"}"#;
    let run = cli(
        &env,
        &[
            &publish[..],
            &["--data", odd, "--channel", "eu,us", "--channel", "eu"],
        ]
        .concat(),
    )
    .await
    .ok();
    let id = event_id(&run);
    assert_eq!(stored_payload(&env, id).await, odd);
    let (channels, deliver_at): (Option<Vec<String>>, Option<DateTime<Utc>>) =
        sqlx::query_as("SELECT channels, deliver_at FROM hookstream.outbox WHERE event_id = $1")
            .bind(id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(channels, Some(vec!["eu".to_string(), "us".to_string()]));
    assert_eq!(deliver_at, None);

    // `--deliver-at +1h` schedules it an hour from now.
    let before = Utc::now();
    let run = cli(
        &env,
        &[&publish[..], &["--data", "{}", "--deliver-at", "+1h"]].concat(),
    )
    .await
    .ok();
    let at: Option<DateTime<Utc>> =
        sqlx::query_scalar("SELECT deliver_at FROM hookstream.outbox WHERE event_id = $1")
            .bind(event_id(&run))
            .fetch_one(&env.pool)
            .await
            .unwrap();
    let ahead = at.expect("deliver_at set") - before;
    assert!(
        (3_590..=3_660).contains(&ahead.num_seconds()),
        "deliver_at {at:?}, {ahead} ahead"
    );
    let run = cli(
        &env,
        &[&publish[..], &["--data", "{}", "--deliver-at", "+31d"]].concat(),
    )
    .await;
    assert_ne!(run.code, Some(0), "more than 30 days ahead is refused");
    assert!(run.stderr.contains("30 days"), "{}", run.stderr);

    // What is not a JSON object is refused before the database sees it, with a clear reason.
    let rows_before: i64 = sqlx::query_scalar("SELECT count(*) FROM hookstream.outbox")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    for (data, says) in [
        ("[1, 2]", "must be a JSON object"),
        ("{\"a\":", "not valid JSON"),
        ("@/nonexistent/p.json", "reading the file"),
    ] {
        let run = cli(&env, &[&publish[..], &["--data", data]].concat()).await;
        assert_eq!(run.code, Some(1), "{data}");
        assert!(run.stderr.contains(says), "{data}: {}", run.stderr);
    }
    let run = cli(
        &env,
        &[&publish[..], &["--data", "{}", "--channel", "e u"]].concat(),
    )
    .await;
    assert!(
        run.code == Some(1) && run.stderr.contains("invalid channel \"e u\""),
        "{}",
        run.stderr
    );
    let rows_after: i64 = sqlx::query_scalar("SELECT count(*) FROM hookstream.outbox")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(rows_after, rows_before);
}
