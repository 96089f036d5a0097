//! `hookstream endpoint replay-missing|bulk-replay|recover` and `hookstream task list|get`
//! from the shell against the real stack: the CLI writes the task, a running API takes it up
//! and sends through the dispatcher's retry path. Messages an endpoint missed while disabled
//! arrive once each with their own webhook-ids; a bulk replay resends what was delivered; a
//! recovery replays a dead letter; `--wait` ends with the counts; the tenant's cap on running
//! tasks holds for the CLI as for the API; bad flags are named.

use std::collections::HashSet;
use std::time::Duration;

use hookstream_store::dead_letters::{self, Filter};
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::common;
use common::Run;

const MISSED: usize = 5;

async fn hookstream(env: &TestEnv, args: &[&str]) -> Run {
    let mut c = common::against(env, &env.kafka.brokers);
    c.env("HOOKSTREAM_RETRY__SCHEDULE_MS", common::SCHEDULE)
        .env("HOOKSTREAM_API__MAX_RUNNING_TASKS_PER_TENANT", "1")
        .args(args);
    common::run(c).await
}

/// An API process: what runs the tasks the CLI starts.
async fn start_api(env: &TestEnv) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let mut cfg = api::Config {
        database: env.database.clone(),
        kafka: env.kafka.clone(),
        retry: common::retry(env),
        secrets: env.secrets.clone(),
        ..Default::default()
    };
    cfg.api.listen = "127.0.0.1:0".into();
    cfg.api.recover_rate_per_s = 50.0;
    cfg.api.shutdown_grace_ms = 2_000;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let token = CancellationToken::new();
    let t = token.clone();
    let task = tokio::spawn(async move {
        api::run(cfg, listener, &prometheus::Registry::new(), Default::default(), t)
            .await
            .expect("api runs");
    });
    (token, task)
}

/// Signed copies the receiver got of each webhook-id.
fn copies(receiver: &Receiver, id: &str) -> usize {
    receiver
        .received()
        .iter()
        .filter(|r| r.webhook_id == id && r.verified)
        .count()
}

fn ended(run: &Run) -> Value {
    let t = run.json();
    assert!(
        t["id"].as_str().unwrap().starts_with("qtask_"),
        "the id as the API shows it: {t}"
    );
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_missing_bulk_replay_and_recover_from_the_shell() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("shop").await.unwrap();
    let receiver = Receiver::start(Behaviour::Ok).await;
    let ep = env.endpoint(tenant, &receiver, &[]).await.unwrap().to_string();
    hookstream(&env, &["endpoint", "disable", &ep]).await.ok();
    let pipeline = common::start_pipeline(&env);

    let events: Vec<NewEvent> = (0..MISSED)
        .map(|i| NewEvent::new(tenant, "order.created", json!({ "i": i })))
        .collect();
    let ids: Vec<String> = env
        .publish(&events)
        .await
        .unwrap()
        .iter()
        .map(|i| i.to_string())
        .collect();
    assert!(
        eventually(Duration::from_secs(30), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "relayed"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(receiver.count(), 0, "a disabled endpoint got messages");

    // Refused, naming why.
    let r = hookstream(&env, &["endpoint", "replay-missing", &ep, "--since", "10m"]).await;
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(r.stderr.contains("is disabled: enable it first"), "{}", r.stderr);
    hookstream(&env, &["endpoint", "enable", &ep]).await.ok();
    let future = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let r = hookstream(&env, &["endpoint", "replay-missing", &ep, "--since", &future]).await;
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("--since: must not be in the future"),
        "{}",
        r.stderr
    );
    let r = hookstream(
        &env,
        &[
            "endpoint",
            "bulk-replay",
            &ep,
            "--since",
            "10m",
            "--status-code-class",
            "250",
        ],
    )
    .await;
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("--status-code-class: must be 0, 100"),
        "{}",
        r.stderr
    );

    let (api_stop, api_task) = start_api(&env).await;

    // replay-missing: each missed message once, with its own webhook-id.
    let run = hookstream(
        &env,
        &[
            "endpoint",
            "replay-missing",
            &ep,
            "--since",
            "10m",
            "--wait",
            "--json",
        ],
    )
    .await
    .ok();
    let replay = ended(&run);
    assert_eq!(
        (&replay["task"], &replay["status"], &replay["messages_sent"]),
        (&json!("endpoint.replay"), &json!("finished"), &json!(MISSED)),
        "{replay}"
    );
    assert!(
        eventually(Duration::from_secs(30), || async {
            ids.iter().all(|id| copies(&receiver, id) == 1)
        })
        .await,
        "every missed message delivered: {:?}",
        receiver.distinct()
    );

    // Nothing is missing any more: a second replay sends nothing.
    let again = hookstream(
        &env,
        &[
            "endpoint",
            "replay-missing",
            &ep,
            "--since",
            "10m",
            "--wait",
            "--json",
        ],
    )
    .await
    .ok();
    assert_eq!(ended(&again)["messages_sent"], json!(0), "{}", again.stdout);

    // bulk-replay of what succeeded: each once more.
    let run = hookstream(
        &env,
        &[
            "endpoint",
            "bulk-replay",
            &ep,
            "--since",
            "10m",
            "--status",
            "success",
            "--event-type",
            "order.created",
            "--wait",
            "--json",
        ],
    )
    .await
    .ok();
    let bulk = ended(&run);
    assert_eq!(
        (&bulk["task"], &bulk["status"], &bulk["messages_sent"]),
        (&json!("endpoint.bulk-replay"), &json!("finished"), &json!(MISSED)),
        "{bulk}"
    );
    assert!(
        eventually(Duration::from_secs(30), || async {
            ids.iter().all(|id| copies(&receiver, id) == 2)
        })
        .await,
        "each delivered message sent once more"
    );

    // recover: a dead letter goes out again once the receiver is back.
    receiver.set_behaviour(Behaviour::Status(500));
    let dead = env
        .publish(&[NewEvent::new(tenant, "order.created", json!({ "dead": true }))])
        .await
        .unwrap()[0]
        .to_string();
    assert!(
        eventually(Duration::from_secs(40), || async {
            dead_letters::count(&env.pool, &Filter::default()).await.unwrap() == 1
        })
        .await,
        "dead-lettered"
    );
    receiver.set_behaviour(Behaviour::Ok);
    let before = copies(&receiver, &dead);
    let run = hookstream(&env, &["endpoint", "recover", &ep, "--since", "10m", "--wait"])
        .await
        .ok();
    assert!(
        run.stdout.contains("endpoint.recover  finished"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("sent 1 "), "{}", run.stdout);
    assert!(
        eventually(Duration::from_secs(30), || async {
            copies(&receiver, &dead) == before + 1
        })
        .await,
        "the dead letter recovered with its webhook-id"
    );

    // With no API running a task stays running, and the tenant's cap (1 here) holds.
    api_stop.cancel();
    api_task.await.unwrap();
    let pending = hookstream(
        &env,
        &["endpoint", "replay-missing", &ep, "--since", "10m", "--json"],
    )
    .await
    .ok();
    let pending = ended(&pending);
    assert_eq!(pending["status"], "running", "{pending}");
    let r = hookstream(&env, &["endpoint", "recover", &ep, "--since", "10m"]).await;
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(
        r.stderr
            .contains("already has 1 background tasks running (api.max_running_tasks_per_tenant)"),
        "{}",
        r.stderr
    );

    // task list and get.
    let list = hookstream(&env, &["task", "list", "--tenant", "shop", "--json"])
        .await
        .ok()
        .json();
    let listed: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 5, "{list}");
    assert_eq!(listed[0], pending["id"].as_str().unwrap(), "newest first");
    let kinds: HashSet<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        HashSet::from(["endpoint.replay", "endpoint.bulk-replay", "endpoint.recover"])
    );
    let finished = hookstream(&env, &["task", "list", "--status", "finished", "--json"])
        .await
        .ok()
        .json();
    assert_eq!(finished.as_array().unwrap().len(), 4, "{finished}");
    let got = hookstream(&env, &["task", "get", bulk["id"].as_str().unwrap(), "--json"])
        .await
        .ok()
        .json();
    assert_eq!(got["messages_sent"], json!(MISSED), "{got}");
    assert_eq!(got["endpoint_id"], json!(ep), "{got}");
    let r = hookstream(&env, &["task", "get", "qtask_nope"]).await;
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("is not a task id"), "{}", r.stderr);
    let r = hookstream(&env, &["task", "list", "--status", "done"]).await;
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("--status"), "{}", r.stderr);
    pipeline.cancel();
}
