//! The `hookstream` binary end to end against a running relay and dispatcher (real Kafka and
//! PostgreSQL, a loopback receiver): `dlq list|show|stats|replay` and `event resend`.

use std::collections::HashSet;
use std::time::Duration;

use hookstream_store::dead_letters::{self, Filter};
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;

use crate::common;
use common::Run;

async fn hookstream(env: &TestEnv, args: &[&str]) -> Run {
    let mut c = common::against(env, &env.kafka.brokers);
    c.env("HOOKSTREAM_RETRY__SCHEDULE_MS", common::SCHEDULE)
        .args(args);
    common::run(c).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_list_show_stats_replay_and_event_resend() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let receiver = Receiver::start(Behaviour::Status(500)).await;
    let ep = env.endpoint(tenant, &receiver, &[]).await.unwrap();
    let token = common::start_pipeline(&env);
    let ids = env
        .publish(&[
            NewEvent::new(tenant, "order.created", json!({ "n": 1 })),
            NewEvent::new(tenant, "order.created", json!({ "n": 2 })),
        ])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(40), || async {
            dead_letters::count(&env.pool, &Filter::default()).await.unwrap() == 2
        })
        .await,
        "two dead letters stored"
    );

    // Signed requests the receiver got with this webhook-id.
    let copies = |event: uuid::Uuid| {
        receiver
            .received()
            .iter()
            .filter(|r| r.webhook_id == event.to_string() && r.verified)
            .count()
    };

    // dlq list
    let list = hookstream(&env, &["dlq", "list", "--json"]).await.ok().json();
    let rows = list.as_array().expect("an array");
    assert_eq!(rows.len(), 2);
    let got: HashSet<String> = rows
        .iter()
        .map(|r| r["event_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, ids.iter().map(|i| i.to_string()).collect());
    for r in rows {
        assert_eq!(r["endpoint_id"], json!(ep.to_string()));
        assert_eq!(r["error_class"], "http_5xx");
        assert_eq!(r["last_status"], 500);
        assert_eq!(r["attempts"], 2);
        assert_eq!(r["reason"], "gave up after 2 attempts: HTTP 500");
    }
    let id_of = |event: uuid::Uuid| {
        rows.iter()
            .find(|r| r["event_id"] == json!(event.to_string()))
            .and_then(|r| r["id"].as_i64())
            .unwrap()
    };
    let (first, second) = (id_of(ids[0]), id_of(ids[1]));
    let table = hookstream(&env, &["dlq", "list", "--class", "http_5xx"])
        .await
        .ok();
    assert!(table.stdout.starts_with("ID "), "{}", table.stdout);
    assert_eq!(
        table.stdout.lines().count(),
        3,
        "a header and two rows: {}",
        table.stdout
    );
    let none = hookstream(&env, &["dlq", "list", "--class", "timeout", "--json"])
        .await
        .ok();
    assert_eq!(none.json(), json!([]));

    // dlq stats
    let stats = hookstream(&env, &["dlq", "stats", "--json"]).await.ok().json();
    let stats = stats.as_array().expect("an array");
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(stats[0]["endpoint_id"], json!(ep.to_string()));
    assert_eq!(stats[0]["tenant_id"], json!(tenant.to_string()));
    assert_eq!(stats[0]["count"], 2);
    assert_eq!(stats[0]["top_error_class"], "http_5xx");
    assert_eq!(stats[0]["top_status"], 500);
    assert!(stats[0]["first_seen"].as_str() <= stats[0]["last_seen"].as_str());

    // dlq show
    let show = hookstream(&env, &["dlq", "show", &first.to_string()]).await.ok();
    assert!(
        show.stdout.contains("gave up after 2 attempts: HTTP 500"),
        "{}",
        show.stdout
    );
    assert!(show.stdout.contains("\"n\": 1"), "the payload: {}", show.stdout);
    let missing = hookstream(&env, &["dlq", "show", "999999"]).await;
    assert_eq!(missing.code, Some(1));
    assert_eq!(missing.stderr.trim(), "hookstream: dead letter 999999 not found");

    // dlq replay: refused without a selection, and for a disabled endpoint.
    let unselected = hookstream(&env, &["dlq", "replay"]).await;
    assert_eq!(unselected.code, Some(1));
    assert!(
        unselected.stderr.contains("choose what to replay"),
        "{}",
        unselected.stderr
    );
    hookstream(&env, &["endpoint", "disable", &ep.to_string()])
        .await
        .ok();
    let refused = hookstream(&env, &["dlq", "replay", "--id", &second.to_string()]).await;
    assert_eq!(refused.code, Some(1), "{}", refused.stdout);
    assert!(
        refused
            .stderr
            .contains(&format!("run `hookstream endpoint enable {ep}` first")),
        "{}",
        refused.stderr
    );
    hookstream(&env, &["endpoint", "enable", &ep.to_string()])
        .await
        .ok();

    // The endpoint recovers: replay one dead letter by id.
    receiver.set_behaviour(Behaviour::Ok);
    let dry = hookstream(
        &env,
        &["dlq", "replay", "--id", &first.to_string(), "--dry-run", "--json"],
    )
    .await
    .ok()
    .json();
    assert_eq!(dry["replayed"], json!([first]));
    assert_eq!(dry["dry_run"], true);
    let before = receiver.count();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(receiver.count(), before, "a dry run sends nothing");
    let replay = hookstream(
        &env,
        &["dlq", "replay", "--id", &first.to_string(), "--rate", "50"],
    )
    .await
    .ok();
    assert!(
        replay.stdout.contains("replayed 1 dead letters"),
        "{}",
        replay.stdout
    );
    assert!(
        eventually(Duration::from_secs(20), || async { copies(ids[0]) == 3 }).await,
        "the replay arrived with the event's webhook-id (after two failed attempts)"
    );
    assert_eq!(
        receiver.received().last().unwrap().attempt,
        1,
        "a replay starts a new schedule"
    );
    let shown = hookstream(&env, &["dlq", "show", &first.to_string(), "--json"])
        .await
        .ok()
        .json();
    assert_eq!(shown["replay_count"], 1);
    assert_eq!(shown["event"]["payload"], json!({ "n": 1 }));
    let stats = hookstream(&env, &["dlq", "stats", "--json"]).await.ok().json();
    assert_eq!(stats[0]["replayed"], 1);

    // event resend: an event that was delivered (so only in the events topic), sent again.
    let fresh = env
        .publish(&[NewEvent::new(tenant, "order.paid", json!({ "n": 3 }))])
        .await
        .unwrap()[0];
    assert!(eventually(Duration::from_secs(20), || async { copies(fresh) == 1 }).await);
    let resent = hookstream(
        &env,
        &[
            "event",
            "resend",
            &fresh.to_string(),
            "--endpoint",
            &ep.to_string(),
            "--json",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(resent["found_in"], "events topic");
    assert_eq!(resent["position"]["topic"], json!(env.kafka.topics.events));
    assert!(
        eventually(Duration::from_secs(20), || async { copies(fresh) == 2 }).await,
        "resent with the same webhook-id"
    );
    let other_receiver = Receiver::start(Behaviour::Ok).await;
    let other_tenant = env.tenant("other").await.unwrap();
    let other_ep = env.endpoint(other_tenant, &other_receiver, &[]).await.unwrap();
    let across = hookstream(
        &env,
        &[
            "event",
            "resend",
            &fresh.to_string(),
            "--endpoint",
            &other_ep.to_string(),
        ],
    )
    .await;
    assert_eq!(across.code, Some(1));
    assert!(
        across.stderr.contains("refusing to send it across tenants"),
        "{}",
        across.stderr
    );
    let unknown = hookstream(
        &env,
        &[
            "event",
            "resend",
            &uuid::Uuid::now_v7().to_string(),
            "--endpoint",
            &ep.to_string(),
        ],
    )
    .await;
    assert_eq!(unknown.code, Some(1));
    assert!(unknown.stderr.contains("not found"), "{}", unknown.stderr);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(other_receiver.count(), 0, "nothing crossed tenants");
    token.cancel();
}
