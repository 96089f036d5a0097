//! Tokens in endpoint URLs (issue 41.8), end to end: a receiver that puts its token in a host
//! label (`tok3n-…`) as well as in the path and the query. Its deliveries fail (the name does
//! not resolve), are retried and dead-lettered; the token is in no stored attempt, no dead
//! letter, no API answer and no portal page, though each of them names the endpoint's URL.

use crate::common;

use std::time::Duration;

use common::{portal_session, start_pipeline, Api};
use hookstream_testkit::{eventually, TestEnv};
use reqwest::{Method, StatusCode};
use serde_json::json;

const HOST_TOKEN: &str = "tok3n-abc123";
const PATH_TOKEN: &str = "Xq7PmW2kLr9sVt4b";
const QUERY_TOKEN: &str = "s3cr3tQu3ryV4lue";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_in_a_host_label_path_or_query_is_shown_nowhere() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let stop = start_pipeline(&env);
    let (s, app) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "tokens", "uid": "tokens"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{app}");
    // `.invalid` never resolves (RFC 6761): every attempt fails at the lookup, whose error
    // names the host.
    let url = format!("https://{HOST_TOKEN}.hooks.invalid/in/{PATH_TOKEN}?key={QUERY_TOKEN}");
    let (s, ep) = api
        .op(
            Method::POST,
            "/api/v1/app/tokens/endpoint",
            Some(json!({"url": url})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{ep}");
    let ep_id = ep["id"].as_str().unwrap().to_string();
    let (s, msg) = api
        .op(
            Method::POST,
            "/api/v1/app/tokens/msg",
            Some(json!({"eventType": "order.created", "payload": {"n": 1}})),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{msg}");
    let msg_id = msg["id"].as_str().unwrap().to_string();
    let dead = eventually(Duration::from_secs(60), || async {
        hookstream_store::sqlx::query_scalar::<_, i64>("SELECT count(*) FROM hookstream.dead_letters")
            .fetch_one(&env.pool)
            .await
            .unwrap()
            == 1
    })
    .await;
    assert!(dead, "the deliveries failed and were dead-lettered");
    let stored = eventually(Duration::from_secs(30), || async {
        hookstream_store::sqlx::query_scalar::<_, i64>("SELECT count(*) FROM hookstream.attempts")
            .fetch_one(&env.pool)
            .await
            .unwrap()
            >= 3
    })
    .await;
    assert!(stored, "the attempts were stored");

    let leaks = |what: &str, text: &str| {
        for token in [HOST_TOKEN, PATH_TOKEN, QUERY_TOKEN] {
            assert!(!text.contains(token), "{what} shows {token}: {text}");
        }
    };
    // Stored rows, every column as text.
    for table in ["attempts", "dead_letters"] {
        let rows: Vec<String> = hookstream_store::sqlx::query_scalar(&format!(
            "SELECT row_to_json(t)::text FROM hookstream.{table} t"
        ))
        .fetch_all(&env.pool)
        .await
        .unwrap();
        assert!(!rows.is_empty(), "{table} has rows");
        for row in rows {
            leaks(table, &row);
        }
    }
    let reason: String = hookstream_store::sqlx::query_scalar("SELECT reason FROM hookstream.dead_letters")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert!(
        reason.contains("dns error"),
        "the lookup of the host failed: {reason}"
    );
    // API answers that show the URL or the attempts' errors.
    for path in [
        format!("/api/v1/app/tokens/endpoint/{ep_id}"),
        "/api/v1/app/tokens/endpoint".to_string(),
        format!("/api/v1/app/tokens/attempt/msg/{msg_id}"),
        format!("/api/v1/app/tokens/attempt/endpoint/{ep_id}"),
        format!("/api/v1/app/tokens/msg/{msg_id}/endpoint"),
    ] {
        let (s, body) = api.op(Method::GET, &path, None).await;
        assert_eq!(s, StatusCode::OK, "{path}: {body}");
        leaks(&path, &body.to_string());
    }
    let (_, one) = api
        .op(Method::GET, &format!("/api/v1/app/tokens/endpoint/{ep_id}"), None)
        .await;
    assert!(
        one["url"].as_str().unwrap().contains("***.hooks.invalid"),
        "the API shows the URL, masked: {one}"
    );
    // Portal pages.
    let (cookie, _) = portal_session(&api, "tokens", true).await;
    let http = reqwest::Client::new();
    for path in [
        "/portal".to_string(),
        format!("/portal/endpoints/{ep_id}"),
        "/portal/deliveries".to_string(),
        format!("/portal/events/{msg_id}"),
    ] {
        let page = http
            .get(format!("{}{path}", api.base))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), StatusCode::OK, "{path}");
        leaks(&path, &page.text().await.unwrap());
    }
    stop.cancel();
}
