//! PostgreSQL stops answering on the API's connections without closing them (a failover whose
//! old primary went dark, a partition dropping packets) while requests are under way. Before,
//! each such request waited for the kernel to give the socket up (about 15 minutes; for ever
//! here), its client with it, and its pooled connection stayed taken after that: with every
//! slot taken, the API answered nothing but pool timeouts even once the new primary was up.
//! Now a request is answered 503 (`unavailable`) at `api.request_timeout_ms` (by default the
//! database's answer deadline, statement timeout plus 5 s), and its connection, checked on
//! its way back to the pool, is replaced. Settings as shipped (35 s).
//!
//! To have every slot's request under way at the cut, the test locks the tenants table (applications):
//! the reads wait for it on the server, the connections are cut, the lock is let go.

use std::time::{Duration, Instant};

use hookstream_store::sqlx;
use hookstream_testkit::partition::Partition;
use hookstream_testkit::{eventually, TestEnv};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common;
use common::{api_config, Api, OPERATOR_TOKEN};

/// Reads the applications with the operator token: the status, the body and how long it took.
async fn list_apps(client: reqwest::Client, base: String) -> (StatusCode, Value, Duration) {
    let started = Instant::now();
    let response = client
        .get(format!("{base}/api/v1/app/"))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .expect("the API answers before the test's client gives up");
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_on_a_database_gone_dark_are_answered_503_and_the_api_recovers() {
    let env = TestEnv::new(1).await.unwrap();
    let (partition, url) = Partition::database(&env.database.url).await.unwrap();
    let mut cfg = api_config(&env);
    cfg.database.url = url;
    let deadline = cfg.database.answer_deadline();
    assert_eq!(
        deadline,
        Duration::from_secs(35),
        "the shipped statement timeout, plus 5 s"
    );
    let slots = cfg.database.max_connections as usize;
    let mut api = Api::start(cfg).await;
    let (status, _) = api
        .op(Method::POST, "/api/v1/app/", Some(json!({"name": "dark"})))
        .await;
    assert_eq!(status, StatusCode::CREATED);

    // The test's own client gives up well after the API should have answered.
    let client = reqwest::Client::builder().timeout(deadline * 3).build().unwrap();

    let mut lock = env.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE hookstream.tenants IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let requests: Vec<_> = (0..slots)
        .map(|_| tokio::spawn(list_apps(client.clone(), api.base.clone())))
        .collect();
    let waiting = || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock'",
        )
        .fetch_one(&env.pool)
        .await
        .unwrap();
        n as usize >= slots
    };
    assert!(
        eventually(Duration::from_secs(20), waiting).await,
        "every pooled connection waits on the lock"
    );

    partition.cut();
    let cut = Instant::now();
    lock.rollback().await.unwrap();

    for request in requests {
        let (status, body, took) = request.await.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["code"], "unavailable", "{body}");
        assert!(
            took < deadline + Duration::from_secs(5),
            "answered {took:?} after it was sent (deadline {deadline:?})"
        );
    }
    let answered_at = cut.elapsed();

    // The given-up connections are replaced within another deadline; then every slot serves.
    let recovered = eventually(deadline * 2 + Duration::from_secs(15), || {
        let (client, base) = (client.clone(), api.base.clone());
        async move { list_apps(client, base).await.0 == StatusCode::OK }
    })
    .await;
    let recovered_at = cut.elapsed();
    assert!(
        recovered,
        "the API still cannot reach the database {recovered_at:?} after the cut"
    );
    let all: Vec<_> = (0..slots)
        .map(|_| tokio::spawn(list_apps(client.clone(), api.base.clone())))
        .collect();
    for request in all {
        let (status, body, _) = request.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["data"][0]["name"], "dark", "{body}");
    }
    eprintln!("answered 503 by {answered_at:?} after the cut; serving again by {recovered_at:?}");

    // Dark again, and stopped: closing the pool must not wait on connections nothing answers.
    partition.cut();
    api.stop.cancel();
    let stopping = Instant::now();
    let stop_within = Duration::from_secs(2 + 15);
    let task = api.task.take().expect("the API's task");
    tokio::time::timeout(stop_within, task)
        .await
        .unwrap_or_else(|_| panic!("the API still runs {stop_within:?} after it was told to stop"))
        .expect("the API stops without an error");
    eprintln!(
        "stopped {:?} after the stop, the database dark",
        stopping.elapsed()
    );
}
