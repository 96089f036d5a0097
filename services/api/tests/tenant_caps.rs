//! Caps on what one tenant may hold (issue 41.3), on real PostgreSQL: endpoints, tenant API
//! keys, live app-portal tokens and live portal sessions, each refused one past its cap with
//! a 429 `limit_reached` naming the limit and how to raise it; per-tenant overrides in
//! `hookstream.tenant_limits`; the cap holds under concurrent creates; freeing one (delete,
//! revoke) makes room; other tenants keep the installation's defaults. Event types per
//! endpoint are bounded too (422 naming `eventTypes`).

use futures::future::join_all;
use hookstream_store::sqlx;
use hookstream_testkit::TestEnv;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common;
use common::Api;

async fn limit(env: &TestEnv, tenant: &str, column: &str, max: i32) {
    sqlx::query(&format!(
        "INSERT INTO hookstream.tenant_limits (tenant_id, {column}) VALUES ($1::uuid, $2)
         ON CONFLICT (tenant_id) DO UPDATE SET {column} = $2"
    ))
    .bind(tenant)
    .bind(max)
    .execute(&env.pool)
    .await
    .unwrap();
}

async fn endpoint(api: &Api, app: &str) -> (StatusCode, Value) {
    api.op(
        Method::POST,
        &format!("/api/v1/app/{app}/endpoint"),
        Some(json!({"url": "http://127.0.0.1:9/hook"})),
    )
    .await
}

fn refused(status: StatusCode, body: &Value, what: &str) {
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], "limit_reached", "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains(what), "{detail}");
    assert!(
        detail.contains("hookstream.tenant_limits"),
        "says how to raise it: {detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_and_keys_stop_at_their_cap_and_free_up_when_removed() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let a = env.tenant("a").await.unwrap().to_string();
    let b = env.tenant("b").await.unwrap().to_string();
    limit(&env, &a, "max_endpoints", 3).await;
    limit(&env, &a, "max_api_keys", 2).await;
    limit(&env, &a, "max_portal_tokens", 2).await;

    let mut made = Vec::new();
    for _ in 0..3 {
        let (s, ep) = endpoint(&api, &a).await;
        assert_eq!(s, StatusCode::CREATED, "{ep}");
        made.push(ep["id"].as_str().unwrap().to_string());
    }
    let (s, body) = endpoint(&api, &a).await;
    refused(s, &body, "at most 3 endpoints");
    // Another tenant has the default (1000).
    assert_eq!(endpoint(&api, &b).await.0, StatusCode::CREATED);
    // Deleting one makes room for one.
    let (s, _) = api
        .op(
            Method::DELETE,
            &format!("/api/v1/app/{a}/endpoint/{}", made[0]),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_eq!(endpoint(&api, &a).await.0, StatusCode::CREATED);
    assert_eq!(endpoint(&api, &a).await.0, StatusCode::TOO_MANY_REQUESTS);

    // Tenant keys: 2, then refused; revoking one frees it.
    let key = |n: u32| {
        let api = &api;
        let a = a.clone();
        async move {
            api.op(
                Method::POST,
                &format!("/api/v1/app/{a}/api-key"),
                Some(json!({"name": format!("k{n}")})),
            )
            .await
        }
    };
    let (s, first) = key(1).await;
    assert_eq!(s, StatusCode::CREATED, "{first}");
    assert_eq!(key(2).await.0, StatusCode::CREATED);
    let (s, body) = key(3).await;
    refused(s, &body, "at most 2 api keys");
    let (s, _) = api
        .op(
            Method::DELETE,
            &format!("/api/v1/app/{a}/api-key/{}", first["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert!(s.is_success(), "{s}");
    assert_eq!(key(4).await.0, StatusCode::CREATED);

    // Live portal tokens are capped apart from tenant keys.
    let access = format!("/api/v1/auth/app-portal-access/{a}");
    let portal = || api.op(Method::POST, &access, Some(json!({})));
    assert_eq!(portal().await.0, StatusCode::OK);
    assert_eq!(portal().await.0, StatusCode::OK);
    let (s, body) = portal().await;
    refused(s, &body, "at most 2 portal tokens");

    // Too many event types on one endpoint: 422 naming the field.
    let types: Vec<String> = (0..101).map(|i| format!("type.{i}")).collect();
    let (s, body) = api
        .op(
            Method::POST,
            &format!("/api/v1/app/{b}/endpoint"),
            Some(json!({"url": "http://127.0.0.1:9/hook", "filterTypes": types})),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["detail"][0]["loc"], json!(["body", "eventTypes"]), "{body}");
    assert!(body["detail"][0]["msg"].as_str().unwrap().contains("at most 100"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_under_concurrent_creates() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let a = env.tenant("a").await.unwrap().to_string();
    limit(&env, &a, "max_endpoints", 5).await;
    let answers = join_all((0..20).map(|_| endpoint(&api, &a))).await;
    let created = answers.iter().filter(|(s, _)| *s == StatusCode::CREATED).count();
    let capped = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((created, capped), (5, 15), "{answers:?}");
    let held: i64 =
        sqlx::query_scalar("SELECT count(*) FROM hookstream.endpoints WHERE tenant_id = $1::uuid")
            .bind(&a)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(held, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_portal_sessions_are_capped() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let a = env.tenant("a").await.unwrap().to_string();
    limit(&env, &a, "max_portal_sessions", 1).await;
    let first = common::portal_link(&api, &a, false).await;
    let second = common::portal_link(&api, &a, false).await;
    common::open_portal_link(&api, &first).await;
    let r = common::follow_portal_link(&common::no_redirects(), &api, &second).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let page = r.text().await.unwrap();
    assert!(page.contains("at most 1 portal sessions"), "{page}");
}
