//! The admin API against real PostgreSQL (and, for deliveries, Kafka with an in-process relay
//! and dispatcher): every resource's routes, Svix's error shapes, bad input refused naming the
//! field with nothing written, and keys that see only their tenant.
//!
//! Longer than 800 lines: one case per operation of the wire contract, on shared fixtures
//! (`common::Api`); a resource whose cases need a setup of their own has its own file
//! (`isolation`, `tenant_caps`, `background_tasks`).

use std::time::Duration;

use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common;
use common::{Api, OPERATOR_TOKEN};

fn loc(body: &Value) -> Vec<String> {
    body["detail"][0]["loc"]
        .as_array()
        .unwrap_or_else(|| panic!("a validation error: {body}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applications_endpoints_and_event_types_with_svix_errors() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;

    // Authentication: none, wrong, right.
    let (s, b) = api.call(None, Method::GET, "/api/v1/app", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(b["code"], "authentication_failed", "{b}");
    let (s, _) = api.call(Some("nope"), Method::GET, "/api/v1/app", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = api
        .call(
            Some("hsk_0000000000000000000000000000000000000000000"),
            Method::GET,
            "/api/v1/app",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // Unknown routes and methods: 404 / 405 with a message.
    let (s, b) = api.op(Method::GET, "/api/v1/nothing-here", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(
        b["detail"].as_str().unwrap().contains("/api/v1/nothing-here"),
        "{b}"
    );
    let (s, b) = api.op(Method::PATCH, "/api/v1/app", None).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{b}");

    // Applications.
    let (s, app) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "Acme", "uid": "acme", "metadata": {"plan": "pro"}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{app}");
    let app_id = app["id"].as_str().unwrap().to_string();
    assert_eq!(app["uid"], "acme");
    assert_eq!(app["metadata"]["plan"], "pro");
    let (s, again) = api
        .op(
            Method::POST,
            "/api/v1/app?get_if_exists=true",
            Some(json!({"name": "Acme", "uid": "acme"})),
        )
        .await;
    assert_eq!(
        (s, &again["id"]),
        (StatusCode::OK, &app["id"]),
        "get-or-create answers the existing one"
    );
    let (s, b) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "Other", "uid": "acme"})),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["code"], "conflict");
    let (s, b) = api.op(Method::GET, "/api/v1/app/acme", None).await;
    assert_eq!(
        (s, &b["id"]),
        (StatusCode::OK, &app["id"]),
        "a uid works in paths"
    );
    let (s, b) = api
        .op(
            Method::PATCH,
            "/api/v1/app/acme",
            Some(json!({"name": "Acme Inc"})),
        )
        .await;
    assert_eq!((s, b["name"].as_str()), (StatusCode::OK, Some("Acme Inc")), "{b}");
    assert_eq!(b["uid"], "acme", "a patch keeps what it does not name");
    let (s, b) = api
        .op(Method::PUT, "/api/v1/app/new-one", Some(json!({"name": "New"})))
        .await;
    assert_eq!(
        (s, b["uid"].as_str()),
        (StatusCode::CREATED, Some("new-one")),
        "PUT on a missing uid creates"
    );
    let (s, b) = api
        .op(Method::PUT, "/api/v1/app/new-one", Some(json!({"name": "Newer"})))
        .await;
    assert_eq!((s, b["name"].as_str()), (StatusCode::OK, Some("Newer")));
    // Bad input names the field.
    let (s, b) = api
        .op(Method::POST, "/api/v1/app", Some(json!({"name": 5})))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(loc(&b), ["body", "name"]);
    let (s, b) = api
        .op(Method::POST, "/api/v1/app", Some(json!({"uid": "x"})))
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "name".into()]
        )
    );
    let (s, b) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "x", "uid": "has space"})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "uid".into()]
        )
    );
    let (s, b) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "x", "throttleRate": 5})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "throttleRate".into()]
        )
    );
    let resp = api
        .client
        .post(format!("{}/api/v1/app", api.base))
        .bearer_auth(OPERATOR_TOKEN)
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let b: Value = resp.json().await.unwrap();
    assert!(b["detail"].as_str().unwrap().contains("not valid JSON"), "{b}");
    let (s, b) = api.op(Method::GET, "/api/v1/app?limit=abc", None).await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["query".into(), "limit".into()]
        )
    );
    let (_, list) = api.op(Method::GET, "/api/v1/app?limit=1", None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert_eq!(list["done"], false);
    let (_, next) = api
        .op(
            Method::GET,
            &format!(
                "/api/v1/app?limit=5&iterator={}",
                list["iterator"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(next["done"], true, "{list} {next}");
    assert_eq!(next["data"][0]["uid"], "new-one", "{list} {next}");

    // Endpoints.
    let ep_path = format!("/api/v1/app/{app_id}/endpoint");
    let (s, b) = api
        .op(
            Method::POST,
            &ep_path,
            Some(json!({"url": "http://169.254.169.254/latest"})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "url".into()]
        ),
        "{b}"
    );
    let (s, b) = api
        .op(
            Method::POST,
            &ep_path,
            Some(json!({"url": "ftp://example.com/x"})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "url".into()]
        ),
        "{b}"
    );
    let (s, b) = api
        .op(
            Method::POST,
            &ep_path,
            Some(json!({"url": "https://example.com/h", "secret": "short"})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "secret".into()]
        ),
        "{b}"
    );
    let (s, b) = api
        .op(
            Method::POST,
            &ep_path,
            Some(json!({"url": "https://example.com/h", "channels": ["a b"]})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "channels".into()]
        ),
        "a channel name with a space: {b}"
    );
    let (s, b) = api
        .op(
            Method::POST,
            &ep_path,
            Some(json!({"url": "https://example.com/h", "filter": {"a": {"$gt": true}}})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "filter".into()]
        ),
        "{b}"
    );
    assert!(
        b["detail"][0]["msg"].as_str().unwrap().contains("/a/$gt"),
        "points at the bad part: {b}"
    );
    let (s, b) = api
        .op(
            Method::POST,
            &ep_path,
            Some(json!({"url": "https://example.com/h", "headers": {"Webhook-Id": "x"}})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "headers".into(), "Webhook-Id".into()]
        ),
        "a reserved header is refused by name: {b}"
    );
    let (s, b) = api
        .op(
            Method::POST,
            &ep_path,
            Some(json!({"url": "https://example.com/h", "eventTypes": ["bad type"]})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "eventTypes".into()]
        ),
        "{b}"
    );
    let (_, none) = api.op(Method::GET, &ep_path, None).await;
    assert_eq!(
        none["data"].as_array().unwrap().len(),
        0,
        "nothing half-written: {none}"
    );
    let secret = format!("whsec_{}", base64_of(&[7u8; 32]));
    let (s, ep) = api
        .op(
            Method::POST,
            &ep_path,
            Some(json!({"url": "https://hooks.example.com/in?token=s3cr3t", "uid": "main", "eventTypes": ["order.created"],
                        "throttleRate": 5, "secret": secret, "metadata": {"k": "v"}, "timeoutMs": 2000})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{ep}");
    assert!(
        !ep["url"].as_str().unwrap().contains("s3cr3t"),
        "the URL's token is never shown: {ep}"
    );
    assert_eq!(
        (ep["throttleRate"].as_i64(), ep["timeoutMs"].as_i64()),
        (Some(5), Some(2000))
    );
    assert_eq!(ep["eventTypes"], json!(["order.created"]));
    let ep_id = ep["id"].as_str().unwrap().to_string();
    let (s, b) = api.op(Method::GET, &format!("{ep_path}/main/secret"), None).await;
    assert_eq!(
        (s, b["key"].as_str()),
        (StatusCode::OK, Some(secret.as_str())),
        "the given secret, read back by uid"
    );
    let (s, b) = api
        .op(
            Method::PATCH,
            &format!("{ep_path}/{ep_id}"),
            Some(json!({"disabled": true, "description": "d"})),
        )
        .await;
    assert_eq!(
        (s, &b["disabled"], &b["description"]),
        (StatusCode::OK, &json!(true), &json!("d")),
        "{b}"
    );
    assert_eq!(b["throttleRate"], 5, "a patch keeps what it does not name");
    let (s, b) = api
        .op(
            Method::PUT,
            &format!("{ep_path}/{ep_id}"),
            Some(json!({"url": "https://hooks.example.com/v2"})),
        )
        .await;
    assert_eq!(
        (s, &b["disabled"], &b["throttleRate"]),
        (StatusCode::OK, &json!(false), &Value::Null),
        "PUT replaces: {b}"
    );
    assert_eq!(b["timeoutMs"], 2000, "PUT keeps the extensions it does not name");
    let (s, new_key) = api
        .op(
            Method::POST,
            &format!("{ep_path}/{ep_id}/secret/rotate"),
            Some(json!({"gracePeriodSeconds": 60})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, rotated) = api
        .op(Method::GET, &format!("{ep_path}/{ep_id}/secret"), None)
        .await;
    assert_ne!(
        rotated["key"].as_str(),
        Some(secret.as_str()),
        "the new secret after a rotation"
    );
    assert_eq!(rotated["key"], new_key["key"]);
    let (s, b) = api
        .op(Method::GET, &format!("{ep_path}/{ep_id}/headers"), None)
        .await;
    assert_eq!((s, b), (StatusCode::OK, json!({"headers": {}, "sensitive": []})));
    let (s, _) = api
        .op(
            Method::PUT,
            &format!("{ep_path}/{ep_id}/headers"),
            Some(
                json!({"headers": {"x-a": "b", "Authorization": "Bearer t0ken", "X-Plan": "gold"},
                        "sensitive": ["x-plan"]}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = api
        .op(
            Method::PATCH,
            &format!("{ep_path}/{ep_id}/headers"),
            Some(json!({"headers": {"x-c": "d", "x-a": null}})),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, b) = api
        .op(Method::GET, &format!("{ep_path}/{ep_id}/headers"), None)
        .await;
    assert_eq!(
        (s, b),
        (
            StatusCode::OK,
            json!({"headers": {"x-c": "d"}, "sensitive": ["Authorization", "X-Plan"]})
        ),
        "sensitive values are never returned"
    );
    let (s, b) = api
        .op(
            Method::PUT,
            &format!("{ep_path}/{ep_id}/headers"),
            Some(json!({"headers": {"Transfer-Encoding": "chunked"}})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "headers".into(), "Transfer-Encoding".into()]
        )
    );
    let (s, b) = api
        .op(Method::GET, &format!("{ep_path}/{ep_id}/stats"), None)
        .await;
    assert_eq!(
        (s, &b["success"], &b["attempts"]),
        (StatusCode::OK, &json!(0), &json!(0)),
        "{b}"
    );
    let (s, _) = api.op(Method::DELETE, &format!("{ep_path}/{ep_id}"), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, b) = api.op(Method::GET, &format!("{ep_path}/{ep_id}"), None).await;
    assert_eq!((s, &b["code"]), (StatusCode::NOT_FOUND, &json!("not_found")));

    // Event types.
    let (s, b) = api
        .op(
            Method::POST,
            "/api/v1/event-type",
            Some(json!({"name": "order.created", "description": "An order", "schemas": {"1": {"examples": [{"id": 1}]}}})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, _) = api
        .op(
            Method::POST,
            "/api/v1/event-type",
            Some(json!({"name": "order.created", "description": "x"})),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, b) = api
        .op(
            Method::POST,
            "/api/v1/event-type",
            Some(json!({"name": "no spaces", "description": "x"})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "name".into()]
        )
    );
    let (s, b) = api
        .op(
            Method::PUT,
            "/api/v1/event-type/order.paid",
            Some(json!({"description": "Paid"})),
        )
        .await;
    assert_eq!((s, &b["name"]), (StatusCode::CREATED, &json!("order.paid")));
    let (s, b) = api
        .op(
            Method::PATCH,
            "/api/v1/event-type/order.paid",
            Some(json!({"deprecated": true})),
        )
        .await;
    assert_eq!(
        (s, &b["deprecated"], &b["description"]),
        (StatusCode::OK, &json!(true), &json!("Paid"))
    );
    let (s, _) = api
        .op(Method::DELETE, "/api/v1/event-type/order.paid", None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, b) = api.op(Method::GET, "/api/v1/event-type", None).await;
    assert_eq!(
        b["data"].as_array().unwrap().len(),
        1,
        "archived types are not listed: {b}"
    );
    let (_, b) = api
        .op(Method::GET, "/api/v1/event-type?include_archived=true", None)
        .await;
    assert_eq!(b["data"].as_array().unwrap().len(), 2);
    let (s, b) = api.op(Method::GET, "/api/v1/event-type/order.paid", None).await;
    assert_eq!((s, &b["archived"]), (StatusCode::OK, &json!(true)));

    // Deleting an application takes its endpoints.
    let (s, _) = api.op(Method::DELETE, "/api/v1/app/new-one", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = api.op(Method::GET, "/api/v1/app/new-one", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = api.op(Method::GET, "/api/v1/health", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_and_unknown_event_types_are_refused() {
    let env = TestEnv::new(1).await.unwrap();
    let mut cfg = common::api_config(&env);
    cfg.api.max_body_bytes = 10_000;
    cfg.api.enforce_event_types = true;
    let api = Api::start(cfg).await;
    let (_, app) = api
        .op(Method::POST, "/api/v1/app", Some(json!({"name": "a"})))
        .await;
    let msg = format!("/api/v1/app/{}/msg", app["id"].as_str().unwrap());
    let (s, b) = api
        .op(
            Method::POST,
            &msg,
            Some(json!({"eventType": "a.b", "payload": {"x": "y".repeat(20_000)}})),
        )
        .await;
    assert_eq!(
        (s, &b["code"]),
        (StatusCode::PAYLOAD_TOO_LARGE, &json!("payload_too_large")),
        "{b}"
    );
    let (s, b) = api
        .op(
            Method::POST,
            &msg,
            Some(json!({"eventType": "a.b", "payload": {}})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "eventType".into()]
        ),
        "{b}"
    );
    api.op(
        Method::POST,
        "/api/v1/event-type",
        Some(json!({"name": "a.b", "description": "x"})),
    )
    .await;
    let (s, b) = api
        .op(
            Method::POST,
            &msg,
            Some(json!({"eventType": "a.b", "payload": []})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "payload".into()]
        ),
        "{b}"
    );
    let (s, b) = api
        .op(
            Method::POST,
            &msg,
            Some(json!({"eventType": "a.b", "payload": {}, "channels": ["c", "d e"]})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "channels".into()]
        ),
        "{b}"
    );
    let (s, b) = api
        .op(
            Method::POST,
            &msg,
            Some(json!({"eventType": "a.b", "payload": {}, "deliverAt": "2999-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "deliverAt".into()]
        ),
        "too far ahead: {b}"
    );
    let (s, b) = api
        .op(
            Method::POST,
            &msg,
            Some(json!({"eventType": "a.b", "payload": {}, "eventId": "has space"})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "eventId".into()]
        ),
        "{b}"
    );
    let (_, list) = api.op(Method::GET, &msg, None).await;
    assert_eq!(
        list["data"].as_array().unwrap().len(),
        0,
        "nothing written: {list}"
    );
    let (s, b) = api
        .op(
            Method::POST,
            &msg,
            Some(json!({"eventType": "a.b", "payload": {"ok": true}})),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    // Within the body limit, over the payload limit (hookstream.settings): the database's word.
    hookstream_store::sqlx::query("UPDATE hookstream.settings SET max_payload_bytes = 100")
        .execute(&env.pool)
        .await
        .unwrap();
    let (s, b) = api
        .op(
            Method::POST,
            &msg,
            Some(json!({"eventType": "a.b", "payload": {"x": "y".repeat(500)}})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "payload".into()]
        ),
        "{b}"
    );
    assert!(
        b["detail"][0]["msg"]
            .as_str()
            .unwrap()
            .contains("exceeds the limit"),
        "{b}"
    );
    api.op(Method::DELETE, "/api/v1/event-type/a.b", None).await;
    let (s, b) = api
        .op(
            Method::POST,
            &msg,
            Some(json!({"eventType": "a.b", "payload": {}})),
        )
        .await;
    assert_eq!(
        (s, loc(&b)),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            vec!["body".into(), "eventType".into()]
        ),
        "archived: {b}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_key_is_rate_limited_with_retry_after() {
    let env = TestEnv::new(1).await.unwrap();
    let mut cfg = common::api_config(&env);
    cfg.api.rate_limit.per_key_per_s = 1;
    cfg.api.rate_limit.burst = 3;
    let api = Api::start(cfg).await;
    let tenant = env.tenant("t").await.unwrap();
    let key = common::tenant_key(&env, tenant, false).await;
    let path = format!("/api/v1/app/{tenant}");
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..5 {
        let r = api
            .client
            .get(format!("{}{path}", api.base))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            retry_after = r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            let b: Value = r.json().await.unwrap();
            assert_eq!(b["code"], "rate_limited");
        }
    }
    assert_eq!(&statuses[..3], [200, 200, 200], "the burst passes: {statuses:?}");
    assert_eq!(statuses[3], 429, "{statuses:?}");
    let secs: u64 = retry_after.expect("Retry-After on a 429").parse().unwrap();
    assert!((1..=2).contains(&secs), "{secs}");
    // Operators are not limited by default; another key has its own budget.
    for _ in 0..10 {
        assert_eq!(api.op(Method::GET, &path, None).await.0, StatusCode::OK);
    }
    let other = common::tenant_key(&env, tenant, false).await;
    assert_eq!(
        api.call(Some(&other), Method::GET, &path, None).await.0,
        StatusCode::OK
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(
        api.call(Some(&key), Method::GET, &path, None).await.0,
        StatusCode::OK,
        "after Retry-After"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_keys_see_only_their_tenant_and_read_only_keys_only_read() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let a = env.tenant("a").await.unwrap();
    let b = env.tenant("b").await.unwrap();
    let key_a = common::tenant_key(&env, a, false).await;
    let ro_a = common::tenant_key(&env, a, true).await;
    let (_, list) = api.call(Some(&key_a), Method::GET, "/api/v1/app", None).await;
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [a.to_string()], "a tenant lists only itself");
    assert_eq!(
        api.call(Some(&key_a), Method::GET, &format!("/api/v1/app/{b}"), None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let (s, _) = api
        .call(
            Some(&key_a),
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "c"})),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "tenant keys do not create tenants");
    let (s, _) = api
        .call(
            Some(&ro_a),
            Method::POST,
            &format!("/api/v1/app/{a}/endpoint"),
            Some(json!({"url": "https://example.com/x"})),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "a read-only key");
    let (s, _) = api
        .call(
            Some(&ro_a),
            Method::GET,
            &format!("/api/v1/app/{a}/endpoint"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    // Revoked keys stop working (at once on this replica).
    let keys = hookstream_store::api_keys::list(&env.pool, Some(a), false)
        .await
        .unwrap();
    let (s, _) = api
        .op(
            Method::DELETE,
            &format!("/api/v1/app/{a}/api-key/{}", keys[0].id),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let revoked = if keys[0].read_only { &ro_a } else { &key_a };
    assert_eq!(
        api.call(Some(revoked), Method::GET, "/api/v1/app", None).await.0,
        StatusCode::UNAUTHORIZED
    );
    // Keys made through the API work, and their last use is recorded.
    let (s, made) = api
        .op(
            Method::POST,
            &format!("/api/v1/app/{b}/api-key"),
            Some(json!({"name": "ci"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{made}");
    let token = made["token"].as_str().unwrap();
    assert!(token.starts_with(made["prefix"].as_str().unwrap()));
    assert_eq!(
        api.call(Some(token), Method::GET, &format!("/api/v1/app/{b}"), None)
            .await
            .0,
        StatusCode::OK
    );
    assert!(
        eventually(Duration::from_secs(15), || async {
            let (_, keys) = api
                .op(Method::GET, &format!("/api/v1/app/{b}/api-key"), None)
                .await;
            !keys["data"][0]["lastUsedAt"].is_null()
        })
        .await,
        "last use recorded"
    );
    let (_, keys) = api
        .op(Method::GET, &format!("/api/v1/app/{b}/api-key"), None)
        .await;
    assert!(
        keys.to_string().find(token).is_none(),
        "a key is never shown again"
    );
    // Portal tokens: scoped, expiring, and they log out.
    let (s, portal) = api
        .op(
            Method::POST,
            &format!("/api/v1/auth/app-portal-access/{a}"),
            Some(json!({"expiry": 60})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{portal}");
    let pt = portal["token"].as_str().unwrap();
    let url = portal["url"].as_str().unwrap();
    assert!(
        url.contains("/portal/login?token=") && !url.contains(pt),
        "a single-use login link, not the API token: {url}"
    );
    assert_eq!(
        api.call(Some(pt), Method::GET, &format!("/api/v1/app/{a}"), None)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        api.call(Some(pt), Method::GET, &format!("/api/v1/app/{b}"), None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    // The link opens a browser session that belongs to the token.
    let browser = common::no_redirects();
    let cookie = common::open_portal_link(&api, url).await;
    let portal_page = || async {
        browser
            .get(format!("{}/portal", api.base))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(portal_page().await, StatusCode::OK);
    assert_eq!(
        api.call(Some(pt), Method::POST, "/api/v1/auth/logout", None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.call(Some(pt), Method::GET, &format!("/api/v1/app/{a}"), None)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        portal_page().await,
        StatusCode::UNAUTHORIZED,
        "the browser session ended with its token"
    );
    let _ = Receiver::start(Behaviour::Ok).await;
}

/// What a tenant's own credentials may not do, and a masked URL saved back.
/// - A tenant key changing its application's uid could take a uid an operator's route
///   creates on first use, and so another customer's traffic; changing its name, learn from
///   the conflict whether another tenant has it. Both are for operators only.
/// - Read-only access shows everything but the signing secret (it forges webhooks).
/// - A portal token cannot mint portal access (a token outliving its own expiry and logout).
/// - An endpoint read back (URL masked) and saved as it is keeps its real URL: a Svix SDK's
///   update sends the whole endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_credentials_keep_to_their_own_and_a_masked_url_saved_back_is_kept() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let a = env.tenant("a").await.unwrap();
    let b = env.tenant("b").await.unwrap();
    let key_a = common::tenant_key(&env, a, false).await;
    let ro_a = common::tenant_key(&env, a, true).await;
    let app_a = format!("/api/v1/app/{a}");

    for (method, body) in [
        (Method::PATCH, json!({"uid": "customer-43"})),
        (Method::PATCH, json!({"name": "b"})),
        (Method::PUT, json!({"name": "a", "uid": "customer-43"})),
    ] {
        let (s, got) = api
            .call(Some(&key_a), method.clone(), &app_a, Some(body.clone()))
            .await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{method} {body}: {got}");
    }
    let (s, got) = api
        .call(
            Some(&key_a),
            Method::PUT,
            &app_a,
            Some(json!({"name": "a", "metadata": {"team": "x"}})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "the rest may change: {got}");
    let (s, created) = api
        .op(
            Method::POST,
            "/api/v1/app?get_if_exists=true",
            Some(json!({"name": "Customer 43", "uid": "customer-43"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "the uid is still free: {created}");
    assert_ne!(created["id"], a.to_string());
    let (s, got) = api
        .op(Method::PATCH, &app_a, Some(json!({"uid": "a-1", "name": "A"})))
        .await;
    assert_eq!(
        (s, &got["uid"]),
        (StatusCode::OK, &json!("a-1")),
        "an operator may"
    );
    let _ = b;

    let real = "https://example.com/hook?token=s3cr3t";
    let (s, ep) = api
        .call(
            Some(&key_a),
            Method::POST,
            &format!("{app_a}/endpoint"),
            Some(json!({"url": real, "description": "d"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{ep}");
    let ep_path = format!("{app_a}/endpoint/{}", ep["id"].as_str().unwrap());
    let sealed = || async {
        hookstream_store::sqlx::query_scalar::<_, Vec<u8>>(
            "SELECT url_sealed FROM hookstream.endpoints WHERE id = $1",
        )
        .bind(uuid::Uuid::parse_str(ep["id"].as_str().unwrap()).unwrap())
        .fetch_one(&env.pool)
        .await
        .unwrap()
    };
    let before = sealed().await;
    let (_, shown) = api.call(Some(&key_a), Method::GET, &ep_path, None).await;
    let masked = shown["url"].as_str().unwrap().to_string();
    assert!(!masked.contains("s3cr3t"), "{masked}");
    let mut back = shown.clone();
    back.as_object_mut().unwrap().retain(|k, _| {
        ["url", "description", "filterTypes", "disabled", "uid", "metadata"].contains(&k.as_str())
    });
    let (s, got) = api.call(Some(&key_a), Method::PUT, &ep_path, Some(back)).await;
    assert_eq!(s, StatusCode::OK, "{got}");
    assert_eq!(sealed().await, before, "PUT of the masked URL kept the real one");
    let (s, got) = api
        .call(
            Some(&key_a),
            Method::PATCH,
            &ep_path,
            Some(json!({"url": masked})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{got}");
    assert_eq!(
        sealed().await,
        before,
        "PATCH of the masked URL kept the real one"
    );
    let (s, _) = api
        .call(
            Some(&key_a),
            Method::PATCH,
            &ep_path,
            Some(json!({"url": "https://example.com/hook?token=other"})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_ne!(sealed().await, before, "a new URL is stored");

    let secret = format!("{ep_path}/secret");
    assert_eq!(
        api.call(Some(&key_a), Method::GET, &secret, None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        api.call(Some(&ro_a), Method::GET, &secret, None).await.0,
        StatusCode::FORBIDDEN,
        "read-only access does not show the secret"
    );

    let (s, portal) = api
        .op(
            Method::POST,
            &format!("/api/v1/auth/app-portal-access/{a}"),
            Some(json!({"expiry": 60})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{portal}");
    let pt = portal["token"].as_str().unwrap();
    let (s, got) = api
        .call(
            Some(pt),
            Method::POST,
            &format!("/api/v1/auth/app-portal-access/{a}"),
            Some(json!({"expiry": 31536000})),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{got}");
}

/// Input PostgreSQL cannot take (NUL in text, times before year 1) answered 500 once the query
/// failed. Path and query values are refused naming where; what reaches the database anyway
/// (a time inside an attempt id) is the caller's 400, not our 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_postgresql_cannot_take_are_the_callers_4xx() {
    use base64::Engine as _;
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let a = env.tenant("a").await.unwrap();
    for (path, at) in [
        ("/api/v1/app/%00".to_string(), vec!["path"]),
        ("/api/v1/event-type/a%00".to_string(), vec!["path"]),
        (
            "/api/v1/event-type?iterator=a%00".to_string(),
            vec!["query", "iterator"],
        ),
        (
            format!("/api/v1/app/{a}/msg?before=-5000-01-01T00:00:00Z"),
            vec!["query", "before"],
        ),
    ] {
        let (s, b) = api.op(Method::GET, &path, None).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {b}");
        assert_eq!(loc(&b), at, "{path}");
    }
    for (path, body, at) in [
        (
            format!("/api/v1/app/{a}/endpoint"),
            json!({"url": "https://example.com/x", "description": "a\u{0}b"}),
            vec!["body", "description"],
        ),
        (
            format!("/api/v1/app/{a}/msg"),
            json!({"eventType": "order.created", "payload": {"note": ["ok", "a\u{0}"]}}),
            vec!["body", "payload", "note", "1"],
        ),
    ] {
        let (s, b) = api.op(Method::POST, &path, Some(body)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {b}");
        assert_eq!(loc(&b), at, "{path}");
    }
    // An attempt id is bytes the caller chose, its start time among them: year -7500.
    let event = uuid::Uuid::now_v7();
    let mut key = (-300_000_000_000_000_000i64).to_be_bytes().to_vec();
    key.extend(event.as_bytes());
    key.extend(uuid::Uuid::now_v7().as_bytes());
    key.extend(1i32.to_be_bytes());
    let id = format!(
        "atmpt_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&key)
    );
    let (s, b) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/{a}/msg/{event}/attempt/{id}"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_eq!(b["code"], "bad_request", "{b}");
}

/// Waits for `n` distinct deliveries at `receiver`.
async fn delivered(receiver: &Receiver, n: usize) -> bool {
    eventually(Duration::from_secs(30), || async {
        receiver.distinct().0.len() >= n
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_are_delivered_read_back_attempted_and_resent() {
    let env = TestEnv::new(2).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let pipeline = common::start_pipeline(&env);
    let receiver = Receiver::start(Behaviour::Ok).await;
    let (_, app) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "shop", "uid": "shop"})),
        )
        .await;
    let app_id = app["id"].as_str().unwrap().to_string();
    let (s, ep) = api
        .op(
            Method::POST,
            "/api/v1/app/shop/endpoint",
            Some(json!({"url": receiver.url(), "eventTypes": ["order.*"]})),
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

    // Create, and read back at once (before the relay ships it).
    let (s, msg) = api
        .op(
            Method::POST,
            "/api/v1/app/shop/msg",
            Some(json!({"eventType": "order.created", "payload": {"order": 1, "note": "é"}, "eventId": "order-1",
                        "aggregateType": "order", "aggregateId": "1"})),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{msg}");
    let msg_id = msg["id"].as_str().unwrap().to_string();
    let (s, got) = api
        .op(Method::GET, &format!("/api/v1/app/shop/msg/{msg_id}"), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{got}");
    assert_eq!(
        (&got["payload"], &got["eventId"], &got["aggregateId"]),
        (&json!({"order": 1, "note": "é"}), &json!("order-1"), &json!("1"))
    );
    assert_eq!(got["timestamp"], msg["timestamp"]);
    // Not routed to this endpoint (its filter), but stored.
    api.op(
        Method::POST,
        "/api/v1/app/shop/msg",
        Some(json!({"eventType": "user.created", "payload": {"u": 1}})),
    )
    .await;

    assert!(delivered(&receiver, 1).await, "delivered");
    let got = &receiver.received()[0];
    assert_eq!(got.webhook_id, msg_id, "webhook-id is the message id");
    assert!(got.verified, "signed with the secret the API reads back");
    assert_eq!(
        serde_json::from_slice::<Value>(&got.body).unwrap(),
        json!({"order": 1, "note": "é"})
    );

    // Idempotency: the same eventId is a conflict, unless it is the same request again.
    let (s, b) = api
        .op(
            Method::POST,
            "/api/v1/app/shop/msg",
            Some(json!({"eventType": "order.created", "payload": {}, "eventId": "order-1"})),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    let send = |key: &'static str, event_id: Option<&'static str>| {
        let mut body = json!({"eventType": "order.created", "payload": {"k": key}});
        if let Some(e) = event_id {
            body["eventId"] = json!(e);
        }
        api.client
            .post(format!("{}/api/v1/app/shop/msg", api.base))
            .bearer_auth(OPERATOR_TOKEN)
            .header("idempotency-key", key)
            .json(&body)
            .send()
    };
    let first: Value = send("req-1", Some("order-2"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let again = send("req-1", Some("order-2")).await.unwrap();
    assert_eq!(
        again.status(),
        StatusCode::ACCEPTED,
        "a retried request gets its answer again"
    );
    assert_eq!(again.json::<Value>().await.unwrap()["id"], first["id"]);
    assert_eq!(
        send("req-2", Some("order-2")).await.unwrap().status(),
        StatusCode::CONFLICT
    );
    let h1: Value = send("req-3", None).await.unwrap().json().await.unwrap();
    let h2: Value = send("req-3", None).await.unwrap().json().await.unwrap();
    assert_eq!(
        h1["id"], h2["id"],
        "the idempotency-key header alone makes a retry safe"
    );
    assert!(delivered(&receiver, 3).await, "three distinct messages delivered");

    // The delivery log.
    let (_, attempts) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/shop/attempt/msg/{msg_id}"),
            None,
        )
        .await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            let (_, a) = api
                .op(
                    Method::GET,
                    &format!("/api/v1/app/shop/attempt/msg/{msg_id}"),
                    None,
                )
                .await;
            a["data"].as_array().is_some_and(|d| !d.is_empty())
        })
        .await,
        "an attempt is listed: {attempts}"
    );
    let (_, attempts) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/shop/attempt/msg/{msg_id}"),
            None,
        )
        .await;
    let a = &attempts["data"][0];
    assert_eq!(
        (
            &a["status"],
            &a["statusText"],
            &a["responseStatusCode"],
            &a["triggerType"]
        ),
        (&json!(0), &json!("success"), &json!(204), &json!(0)),
        "{a}"
    );
    assert_eq!((&a["endpointId"], &a["msgId"]), (&json!(ep_id), &json!(msg_id)));
    let (s, one) = api
        .op(
            Method::GET,
            &format!(
                "/api/v1/app/shop/msg/{msg_id}/attempt/{}",
                a["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!((s, &one["id"]), (StatusCode::OK, &a["id"]));
    let (_, by_ep) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/shop/attempt/endpoint/{ep_id}?status=0"),
            None,
        )
        .await;
    assert!(
        by_ep["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["id"] == a["id"]),
        "{by_ep}"
    );
    let (_, failed) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/shop/attempt/endpoint/{ep_id}?status=2"),
            None,
        )
        .await;
    assert_eq!(failed["data"].as_array().unwrap().len(), 0);
    let (_, dests) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/shop/msg/{msg_id}/endpoint"),
            None,
        )
        .await;
    assert_eq!(
        (&dests["data"][0]["id"], &dests["data"][0]["status"]),
        (&json!(ep_id), &json!(0)),
        "{dests}"
    );
    let (_, sent) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/shop/endpoint/{ep_id}/msg"),
            None,
        )
        .await;
    assert!(
        sent["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == json!(msg_id) && m["status"] == 0),
        "{sent}"
    );
    let (_, stats) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/shop/endpoint/{ep_id}/stats"),
            None,
        )
        .await;
    assert!(
        stats["success"].as_i64().unwrap() >= 1 && stats["p99Ms"].is_number(),
        "{stats}"
    );

    // A resend: the same webhook-id again, marked manual.
    let (s, b) = api
        .op(
            Method::POST,
            &format!("/api/v1/app/shop/msg/{msg_id}/endpoint/{ep_id}/resend"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert!(
        eventually(Duration::from_secs(30), || async {
            receiver
                .received()
                .iter()
                .filter(|r| r.webhook_id == msg_id)
                .count()
                >= 2
        })
        .await,
        "resent"
    );
    assert!(receiver.received().iter().all(|r| r.verified));
    assert!(
        eventually(Duration::from_secs(20), || async {
            let (_, a) = api
                .op(
                    Method::GET,
                    &format!("/api/v1/app/shop/attempt/msg/{msg_id}"),
                    None,
                )
                .await;
            a["data"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["triggerType"] == 1)
        })
        .await,
        "the resend's attempt is manual"
    );

    // Time bounds past what a UUIDv7 holds (chrono parses years beyond 9999): answered, not a
    // dropped connection (adding the millisecond of a strict "after" used to panic).
    let far = "%2B262142-12-31T23:59:59.999Z";
    let (s, none) = api
        .op(Method::GET, &format!("/api/v1/app/shop/msg?after={far}"), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{none}");
    assert!(none["data"].as_array().unwrap().is_empty(), "{none}");
    let (s, all) = api
        .op(Method::GET, &format!("/api/v1/app/shop/msg?before={far}"), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{all}");
    assert!(!all["data"].as_array().unwrap().is_empty(), "{all}");
    let (s, none) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/shop/attempt/endpoint/{ep_id}?after={far}"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{none}");
    assert!(none["data"].as_array().unwrap().is_empty(), "{none}");

    // Filters and content.
    let (_, only) = api
        .op(Method::GET, "/api/v1/app/shop/msg?event_types=user.created", None)
        .await;
    assert_eq!(only["data"].as_array().unwrap().len(), 1, "{only}");
    let (_, bare) = api
        .op(Method::GET, "/api/v1/app/shop/msg?with_content=false", None)
        .await;
    assert!(bare["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["payload"] == json!({})));
    let (s, _) = api
        .op(
            Method::DELETE,
            &format!("/api/v1/app/shop/msg/{msg_id}/content"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, got) = api
        .op(Method::GET, &format!("/api/v1/app/{app_id}/msg/{msg_id}"), None)
        .await;
    assert_eq!(got["payload"], json!({}), "expunged");
    pipeline.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_pages_are_stable_while_messages_are_added() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let tenant = env.tenant("t").await.unwrap();
    let path = format!("/api/v1/app/{tenant}/msg");
    let mut before = Vec::new();
    let creates = (0..300).map(|i| {
        api.op(
            Method::POST,
            &path,
            Some(json!({"eventType": "a.b", "payload": {"i": i}})),
        )
    });
    for (s, m) in futures::future::join_all(creates).await {
        assert_eq!(s, StatusCode::ACCEPTED);
        before.push(m["id"].as_str().unwrap().to_string());
    }
    // Pages of 40 while another 200 messages are created.
    let adding = async {
        for i in 0..200 {
            api.op(
                Method::POST,
                &path,
                Some(json!({"eventType": "a.b", "payload": {"late": i}})),
            )
            .await;
        }
    };
    let walking = async {
        let mut seen: Vec<String> = Vec::new();
        let mut iterator: Option<String> = None;
        loop {
            let q = match &iterator {
                Some(i) => format!("{path}?limit=40&with_content=false&iterator={i}"),
                None => format!("{path}?limit=40&with_content=false"),
            };
            let (_, page) = api.op(Method::GET, &q, None).await;
            seen.extend(
                page["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m["id"].as_str().unwrap().to_string()),
            );
            if page["done"] == true {
                break seen;
            }
            iterator = page["iterator"].as_str().map(str::to_string);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let ((), seen) = tokio::join!(adding, walking);
    let distinct: std::collections::HashSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "no message twice");
    for id in &before {
        assert!(
            distinct.contains(id),
            "every message that existed when the walk started is seen"
        );
    }
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, sorted, "newest first, in id order");
    // A page back from the second page is the first page.
    let (_, p1) = api.op(Method::GET, &format!("{path}?limit=10"), None).await;
    let (_, p2) = api
        .op(
            Method::GET,
            &format!("{path}?limit=10&iterator={}", p1["iterator"].as_str().unwrap()),
            None,
        )
        .await;
    let (_, back) = api
        .op(
            Method::GET,
            &format!(
                "{path}?limit=10&iterator={}",
                p2["prevIterator"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(back["data"], p1["data"]);
}

/// Message creates resolve their application through a cache (`api.key_cache_ms`); a change
/// made through this API is seen by the next create, never a stale resolution: a renamed uid
/// no longer resolves, the new one does, and a deleted application's uid and id are 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_creates_see_application_renames_and_deletes_at_once() {
    let env = TestEnv::new(1).await.unwrap();
    let mut cfg = common::api_config(&env);
    cfg.api.key_cache_ms = 60_000; // long enough that only invalidation can explain a change
    let api = Api::start(cfg).await;
    let (s, app) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "shop", "uid": "shop"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{app}");
    let send = |uid: &'static str| {
        let api = &api;
        async move {
            api.op(
                Method::POST,
                &format!("/api/v1/app/{uid}/msg"),
                Some(json!({"eventType": "order.created", "payload": {"n": 1}})),
            )
            .await
        }
    };
    let (s, b) = send("shop").await; // resolved and cached
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");

    let (s, b) = api
        .op(Method::PATCH, "/api/v1/app/shop", Some(json!({"uid": "store"})))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = send("shop").await;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "the old uid was served from the cache: {b}"
    );
    let (s, b) = send("store").await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");

    let (s, _) = api.op(Method::DELETE, "/api/v1/app/store", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, b) = send("store").await;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "a deleted application took a message: {b}"
    );
    let id = app["id"].as_str().unwrap().to_string();
    let (s, b) = api
        .op(
            Method::POST,
            &format!("/api/v1/app/{id}/msg"),
            Some(json!({"eventType": "order.created", "payload": {"n": 2}})),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "by id too: {b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn svix_routes_hookstream_does_not_implement_answer_404_saying_so() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    for (method, template) in api::unimplemented::ROUTES {
        let path: String = template
            .split('/')
            .map(|s| if s.starts_with('{') { "x1" } else { s })
            .collect::<Vec<_>>()
            .join("/");
        let method: Method = method.parse().unwrap();
        let body = (method != Method::GET && method != Method::DELETE).then(|| json!({}));
        let (s, b) = api.op(method.clone(), &path, body).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{method} {path}: {b}");
        assert!(
            b["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("Hookstream does not implement"),
            "{method} {path} says it is not implemented: {b}"
        );
    }
    // An unknown path is a plain 404.
    let (s, b) = api.op(Method::GET, "/api/v1/nothing-here", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(b["detail"].as_str().unwrap().starts_with("no route"), "{b}");
}
