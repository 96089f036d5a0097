//! Background tasks on the real stack: a replay of what an endpoint missed while it was
//! disabled outlives the API that started it (stopped half-way, a second API carries it on
//! from its cursor: every message once, none twice), a tenant runs at most
//! `api.max_running_tasks_per_tenant` at once (one more is a 429 naming the key), and a
//! window that cannot be is a 422 naming its field.

use std::time::Duration;

use chrono::Utc;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common;
use common::Api;

const MESSAGES: usize = 20;

async fn task(api: &Api, id: &str) -> Value {
    let (s, t) = api
        .op(Method::GET, &format!("/api/v1/background-task/{id}"), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_outlives_the_api_that_ran_it_and_a_tenant_runs_at_most_its_cap() {
    let env = TestEnv::new(2).await.unwrap();
    let mut cfg = common::api_config(&env);
    // Slow enough that the first API is stopped half-way (20 messages take 5 s).
    cfg.api.recover_rate_per_s = 4.0;
    cfg.api.max_running_tasks_per_tenant = 1;
    let mut api = Api::start(cfg.clone()).await;
    let pipeline = common::start_pipeline(&env);
    let receiver = Receiver::start(Behaviour::Ok).await;
    api.op(
        Method::POST,
        "/api/v1/app",
        Some(json!({"name": "shop", "uid": "shop"})),
    )
    .await;
    let (s, ep) = api
        .op(
            Method::POST,
            "/api/v1/app/shop/endpoint",
            Some(json!({"url": receiver.url(), "disabled": true})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{ep}");
    let ep_id = ep["id"].as_str().unwrap().to_string();
    let (_, secret) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/shop/endpoint/{ep_id}/secret"),
            None,
        )
        .await;
    receiver.set_secret(secret["key"].as_str().unwrap());

    let since = Utc::now() - chrono::Duration::seconds(1);
    let mut ids = Vec::new();
    for i in 0..MESSAGES {
        let (s, m) = api
            .op(
                Method::POST,
                "/api/v1/app/shop/msg",
                Some(json!({"eventType": "order.created", "payload": {"i": i}})),
            )
            .await;
        assert_eq!(s, StatusCode::ACCEPTED, "{m}");
        ids.push(m["id"].as_str().unwrap().to_string());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(receiver.received().is_empty(), "a disabled endpoint got messages");

    let replay = format!("/api/v1/app/shop/endpoint/{ep_id}/replay-missing");
    let (s, b) = api.op(Method::POST, &replay, Some(json!({"since": since}))).await;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "a disabled endpoint cannot be replayed to: {b}"
    );
    let (s, b) = api
        .op(
            Method::PATCH,
            &format!("/api/v1/app/shop/endpoint/{ep_id}"),
            Some(json!({"disabled": false})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = api
        .op(
            Method::POST,
            &replay,
            Some(json!({"since": Utc::now() + chrono::Duration::hours(1)})),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["detail"][0]["loc"], json!(["body", "since"]), "{b}");

    let (s, started) = api.op(Method::POST, &replay, Some(json!({"since": since}))).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{started}");
    assert_eq!(
        (&started["task"], &started["status"]),
        (&json!("endpoint.replay"), &json!("running"))
    );
    let task_id = started["id"].as_str().unwrap().to_string();
    let (s, b) = api.op(Method::POST, &replay, Some(json!({"since": since}))).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{b}");
    assert!(
        b["detail"]
            .as_str()
            .unwrap()
            .contains("api.max_running_tasks_per_tenant"),
        "the 429 names its limit: {b}"
    );

    // Stop the API a few messages in.
    assert!(
        eventually(Duration::from_secs(30), || async {
            receiver.distinct().0.len() >= 3
        })
        .await,
        "the replay started delivering"
    );
    api.stop.cancel();
    api.task.take().unwrap().await.unwrap();
    let at_stop = task_from_db(&env, &task_id).await;
    assert_eq!(at_stop.0, "running", "a stopped API leaves its task running");
    assert!(
        (1..MESSAGES as i64).contains(&at_stop.1),
        "stopped half-way: {} sent",
        at_stop.1
    );

    // Another API carries it on from its cursor.
    let api = Api::start(cfg).await;
    let done = eventually(Duration::from_secs(60), || async {
        task(&api, &task_id).await["status"] == "finished"
    })
    .await;
    let t = task(&api, &task_id).await;
    assert!(done, "the task finished on the second API: {t}");
    assert_eq!(t["data"]["messagesSent"], json!(MESSAGES), "{t}");
    assert!(
        eventually(Duration::from_secs(30), || async {
            receiver.distinct().0.len() >= MESSAGES
        })
        .await,
        "every missed message delivered"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (got, dups) = receiver.distinct();
    assert_eq!(dups, 0, "no message sent twice across the restart");
    for id in &ids {
        assert!(got.contains(id), "{id} was replayed with its own webhook-id");
    }
    assert!(
        receiver.received().iter().all(|r| r.verified),
        "every replay is signed"
    );

    // The slot is free again; the task is in the tenant's list.
    let (s, b) = api.op(Method::POST, &replay, Some(json!({"since": since}))).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let (s, list) = api
        .op(
            Method::GET,
            "/api/v1/background-task?task=endpoint.replay&limit=10",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{list}");
    let listed: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        vec![b["id"].as_str().unwrap(), task_id.as_str()],
        "newest first"
    );
    pipeline.cancel();
}

/// The task's status and sent count as its row has them.
async fn task_from_db(env: &TestEnv, id: &str) -> (String, i64) {
    let id: uuid::Uuid = id.strip_prefix("qtask_").unwrap().parse().unwrap();
    hookstream_store::sqlx::query_as("SELECT status, sent FROM hookstream.background_tasks WHERE id = $1")
        .bind(id)
        .fetch_one(&env.pool)
        .await
        .unwrap()
}
