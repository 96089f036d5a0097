//! `hookstream event publish --data @file|@-` keeps the payload byte for byte (a 1 MB one
//! too, which no argument list holds), with channels and `--deliver-at`; `hookstream endpoint`
//! takes channels, payload filters and custom headers, shows sensitive headers by name only,
//! and refuses reserved headers and malformed filters naming them. Only the database is read:
//! no relay, no dispatcher.

use std::process::Stdio;

use chrono::{DateTime, Utc};
use hookstream_store::sqlx;
use hookstream_testkit::TestEnv;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt as _;
use uuid::Uuid;

use crate::common;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_take_channels_filters_and_headers_shown_without_secrets() {
    let env = TestEnv::new(1).await.unwrap();
    env.tenant("acme").await.unwrap();
    let create = [
        "endpoint",
        "create",
        "--tenant",
        "acme",
        "--url",
        "https://example.com/hooks",
        "--json",
    ];
    let run = cli(
        &env,
        &[
            &create[..],
            &[
                "--header",
                "Authorization: Bearer x",
                "--header",
                "X-Team: a",
                "--channel",
                "eu",
                "--filter",
                r#"{"amount":{"$gte":10}}"#,
            ],
        ]
        .concat(),
    )
    .await
    .ok();
    let id = run.json()["id"].as_str().unwrap().to_string();
    let uuid: Uuid = id.parse().unwrap();

    let (channels, filter, names): (Vec<String>, Option<Value>, Vec<String>) = sqlx::query_as(
        "SELECT channels, payload_filter, header_names FROM hookstream.endpoints WHERE id = $1",
    )
    .bind(uuid)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(channels, ["eu"]);
    assert_eq!(filter, Some(json!({"amount": {"$gte": 10}})));
    assert_eq!(names, ["Authorization", "X-Team"]);
    let mut conn = env.pool.acquire().await.unwrap();
    let sealed = hookstream_store::endpoint_headers::get(&mut conn, &env.sealer(), uuid)
        .await
        .unwrap();
    assert_eq!(sealed.headers["Authorization"], "Bearer x", "stored as given");

    let run = cli(&env, &["endpoint", "headers", &id, "--json"]).await.ok();
    assert_eq!(
        run.json(),
        json!({"headers": {"X-Team": "a"}, "sensitive": ["Authorization"]})
    );
    let run = cli(&env, &["endpoint", "headers", &id]).await.ok();
    assert!(
        run.stdout.contains("Authorization: ********") && run.stdout.contains("X-Team: a"),
        "{}",
        run.stdout
    );
    let run = cli(&env, &["endpoint", "list"]).await.ok();
    assert!(
        run.stdout.contains("channels=eu")
            && run.stdout.contains("filter=yes")
            && run.stdout.contains("headers=Authorization,X-Team"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("Bearer"), "{}", run.stdout);

    // Refused, naming what is wrong, and nothing is created.
    let run = cli(&env, &[&create[..], &["--header", "Content-Type: x"]].concat()).await;
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr.contains("\"Content-Type\"") && run.stderr.contains("reserved"),
        "{}",
        run.stderr
    );
    let run = cli(
        &env,
        &[&create[..], &["--filter", r#"{"amount":{"$gtx":10}}"#]].concat(),
    )
    .await;
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr.contains("at /amount/$gtx") && run.stderr.contains("unknown operator"),
        "{}",
        run.stderr
    );
    let run = cli(
        &env,
        &[&create[..], &["--header", "X-A: 1", "--sensitive-header", "X-B"]].concat(),
    )
    .await;
    assert!(
        run.code == Some(1) && run.stderr.contains("\"X-B\""),
        "{}",
        run.stderr
    );
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM hookstream.endpoints")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(count, 1);

    // A patch: given ones set, removed ones removed, marks kept, the others untouched.
    let run = cli(
        &env,
        &[
            "endpoint",
            "set-headers",
            &id,
            "--header",
            "X-Plan: gold",
            "--sensitive-header",
            "X-Plan",
            "--header",
            "X-Region: eu-1",
            "--remove-header",
            "x-team",
            "--json",
        ],
    )
    .await
    .ok();
    assert_eq!(
        run.json(),
        json!({"headers": {"X-Region": "eu-1"}, "sensitive": ["Authorization", "X-Plan"]})
    );
    assert!(!run.stdout.contains("gold"));
    let run = cli(
        &env,
        &["endpoint", "set-headers", &id, "--header", "webhook-id: x"],
    )
    .await;
    assert!(
        run.code == Some(1) && run.stderr.contains("\"webhook-id\"") && run.stderr.contains("reserved"),
        "{}",
        run.stderr
    );
    let run = cli(
        &env,
        &[
            "endpoint",
            "set-headers",
            &id,
            "--replace",
            "--header",
            "X-Only: 1",
            "--json",
        ],
    )
    .await
    .ok();
    assert_eq!(run.json(), json!({"headers": {"X-Only": "1"}, "sensitive": []}));

    // Update: channels, filter (from a file) and event types; the headers stay.
    let run = cli(
        &env,
        &[
            "endpoint",
            "update",
            &id,
            "--channel",
            "us,ap",
            "--no-filter",
            "--event-types",
            "order.*",
        ],
    )
    .await
    .ok();
    assert!(run.stdout.contains("channels=us,ap"), "{}", run.stdout);
    let file = std::env::temp_dir()
        .join("hookstream-tests")
        .join(format!("{}-filter.json", env.name));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, r#"{"tier": {"$in": ["gold", "silver"]}}"#).unwrap();
    let arg = format!("@{}", file.display());
    cli(
        &env,
        &["endpoint", "update", &id, "--no-channels", "--filter", &arg],
    )
    .await
    .ok();
    let (channels, filter, types, names): (Vec<String>, Option<Value>, Vec<String>, Vec<String>) =
        sqlx::query_as(
            "SELECT channels, payload_filter, event_types, header_names FROM hookstream.endpoints WHERE id = $1",
        )
        .bind(uuid)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert!(channels.is_empty());
    assert_eq!(filter, Some(json!({"tier": {"$in": ["gold", "silver"]}})));
    assert_eq!(types, ["order.*"]);
    assert_eq!(names, ["X-Only"]);
    let run = cli(&env, &["endpoint", "update", &id]).await;
    assert!(
        run.code == Some(1) && run.stderr.contains("nothing to change"),
        "{}",
        run.stderr
    );
    let run = cli(
        &env,
        &["endpoint", "update", &id, "--filter", r#"{"a":{"$in":3}}"#],
    )
    .await;
    assert!(
        run.code == Some(1) && run.stderr.contains("at /a/$in"),
        "{}",
        run.stderr
    );
}
