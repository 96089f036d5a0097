//! The admin API against real PostgreSQL (and, for deliveries, Kafka with an in-process relay
//! and dispatcher): every resource's routes, Svix's error shapes, bad input refused naming the
//! field with nothing written, and keys that see only their tenant.

use std::time::Duration;

use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

mod common;
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
    let (s, _) = api.call(Some("hsk_0000000000000000000000000000000000000000000"), Method::GET, "/api/v1/app", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // Unknown routes and methods: 404 / 405 with a message.
    let (s, b) = api.op(Method::GET, "/api/v1/nothing-here", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(b["detail"].as_str().unwrap().contains("/api/v1/nothing-here"), "{b}");
    let (s, b) = api.op(Method::PATCH, "/api/v1/app", None).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{b}");

    // Applications.
    let (s, app) = api
        .op(Method::POST, "/api/v1/app", Some(json!({"name": "Acme", "uid": "acme", "metadata": {"plan": "pro"}})))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{app}");
    let app_id = app["id"].as_str().unwrap().to_string();
    assert_eq!(app["uid"], "acme");
    assert_eq!(app["metadata"]["plan"], "pro");
    let (s, again) = api.op(Method::POST, "/api/v1/app?get_if_exists=true", Some(json!({"name": "Acme", "uid": "acme"}))).await;
    assert_eq!((s, &again["id"]), (StatusCode::OK, &app["id"]), "get-or-create answers the existing one");
    let (s, b) = api.op(Method::POST, "/api/v1/app", Some(json!({"name": "Other", "uid": "acme"}))).await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["code"], "conflict");
    let (s, b) = api.op(Method::GET, "/api/v1/app/acme", None).await;
    assert_eq!((s, &b["id"]), (StatusCode::OK, &app["id"]), "a uid works in paths");
    let (s, b) = api.op(Method::PATCH, "/api/v1/app/acme", Some(json!({"name": "Acme Inc"}))).await;
    assert_eq!((s, b["name"].as_str()), (StatusCode::OK, Some("Acme Inc")), "{b}");
    assert_eq!(b["uid"], "acme", "a patch keeps what it does not name");
    let (s, b) = api.op(Method::PUT, "/api/v1/app/new-one", Some(json!({"name": "New"}))).await;
    assert_eq!((s, b["uid"].as_str()), (StatusCode::CREATED, Some("new-one")), "PUT on a missing uid creates");
    let (s, b) = api.op(Method::PUT, "/api/v1/app/new-one", Some(json!({"name": "Newer"}))).await;
    assert_eq!((s, b["name"].as_str()), (StatusCode::OK, Some("Newer")));
    // Bad input names the field.
    let (s, b) = api.op(Method::POST, "/api/v1/app", Some(json!({"name": 5}))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(loc(&b), ["body", "name"]);
    let (s, b) = api.op(Method::POST, "/api/v1/app", Some(json!({"uid": "x"}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "name".into()]));
    let (s, b) = api.op(Method::POST, "/api/v1/app", Some(json!({"name": "x", "uid": "has space"}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "uid".into()]));
    let (s, b) = api.op(Method::POST, "/api/v1/app", Some(json!({"name": "x", "throttleRate": 5}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "throttleRate".into()]));
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
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["query".into(), "limit".into()]));
    let (_, list) = api.op(Method::GET, "/api/v1/app?limit=1", None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert_eq!(list["done"], false);
    let (_, next) = api
        .op(Method::GET, &format!("/api/v1/app?limit=5&iterator={}", list["iterator"].as_str().unwrap()), None)
        .await;
    assert_eq!(next["done"], true, "{list} {next}");
    assert_eq!(next["data"][0]["uid"], "new-one", "{list} {next}");

    // Endpoints.
    let ep_path = format!("/api/v1/app/{app_id}/endpoint");
    let (s, b) = api.op(Method::POST, &ep_path, Some(json!({"url": "http://169.254.169.254/latest"}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "url".into()]), "{b}");
    let (s, b) = api.op(Method::POST, &ep_path, Some(json!({"url": "ftp://example.com/x"}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "url".into()]), "{b}");
    let (s, b) = api.op(Method::POST, &ep_path, Some(json!({"url": "https://example.com/h", "secret": "short"}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "secret".into()]), "{b}");
    let (s, b) = api.op(Method::POST, &ep_path, Some(json!({"url": "https://example.com/h", "channels": ["a"]}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "channels".into()]), "{b}");
    let (s, b) = api.op(Method::POST, &ep_path, Some(json!({"url": "https://example.com/h", "eventTypes": ["bad type"]}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "eventTypes".into()]), "{b}");
    let (_, none) = api.op(Method::GET, &ep_path, None).await;
    assert_eq!(none["data"].as_array().unwrap().len(), 0, "nothing half-written: {none}");
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
    assert!(!ep["url"].as_str().unwrap().contains("s3cr3t"), "the URL's token is never shown: {ep}");
    assert_eq!((ep["throttleRate"].as_i64(), ep["timeoutMs"].as_i64()), (Some(5), Some(2000)));
    assert_eq!(ep["eventTypes"], json!(["order.created"]));
    let ep_id = ep["id"].as_str().unwrap().to_string();
    let (s, b) = api.op(Method::GET, &format!("{ep_path}/main/secret"), None).await;
    assert_eq!((s, b["key"].as_str()), (StatusCode::OK, Some(secret.as_str())), "the given secret, read back by uid");
    let (s, b) = api.op(Method::PATCH, &format!("{ep_path}/{ep_id}"), Some(json!({"disabled": true, "description": "d"}))).await;
    assert_eq!((s, &b["disabled"], &b["description"]), (StatusCode::OK, &json!(true), &json!("d")), "{b}");
    assert_eq!(b["throttleRate"], 5, "a patch keeps what it does not name");
    let (s, b) = api.op(Method::PUT, &format!("{ep_path}/{ep_id}"), Some(json!({"url": "https://hooks.example.com/v2"}))).await;
    assert_eq!((s, &b["disabled"], &b["throttleRate"]), (StatusCode::OK, &json!(false), &Value::Null), "PUT replaces: {b}");
    assert_eq!(b["timeoutMs"], 2000, "PUT keeps the extensions it does not name");
    let (s, _) = api
        .op(Method::POST, &format!("{ep_path}/{ep_id}/secret/rotate"), Some(json!({"gracePeriodSeconds": 60})))
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, rotated) = api.op(Method::GET, &format!("{ep_path}/{ep_id}/secret"), None).await;
    assert_ne!(rotated["key"].as_str(), Some(secret.as_str()), "the new secret after a rotation");
    let (s, b) = api.op(Method::GET, &format!("{ep_path}/{ep_id}/headers"), None).await;
    assert_eq!((s, b), (StatusCode::OK, json!({"headers": {}, "sensitive": []})));
    let (s, b) = api.op(Method::PUT, &format!("{ep_path}/{ep_id}/headers"), Some(json!({"headers": {"x-a": "b"}}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "headers".into()]));
    let (s, b) = api.op(Method::GET, &format!("{ep_path}/{ep_id}/stats"), None).await;
    assert_eq!((s, &b["success"], &b["attempts"]), (StatusCode::OK, &json!(0), &json!(0)), "{b}");
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
    let (s, _) = api.op(Method::POST, "/api/v1/event-type", Some(json!({"name": "order.created", "description": "x"}))).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, b) = api.op(Method::POST, "/api/v1/event-type", Some(json!({"name": "no spaces", "description": "x"}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "name".into()]));
    let (s, b) = api.op(Method::PUT, "/api/v1/event-type/order.paid", Some(json!({"description": "Paid"}))).await;
    assert_eq!((s, &b["name"]), (StatusCode::CREATED, &json!("order.paid")));
    let (s, b) = api.op(Method::PATCH, "/api/v1/event-type/order.paid", Some(json!({"deprecated": true}))).await;
    assert_eq!((s, &b["deprecated"], &b["description"]), (StatusCode::OK, &json!(true), &json!("Paid")));
    let (s, _) = api.op(Method::DELETE, "/api/v1/event-type/order.paid", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, b) = api.op(Method::GET, "/api/v1/event-type", None).await;
    assert_eq!(b["data"].as_array().unwrap().len(), 1, "archived types are not listed: {b}");
    let (_, b) = api.op(Method::GET, "/api/v1/event-type?include_archived=true", None).await;
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
    let (_, app) = api.op(Method::POST, "/api/v1/app", Some(json!({"name": "a"}))).await;
    let msg = format!("/api/v1/app/{}/msg", app["id"].as_str().unwrap());
    let (s, b) = api
        .op(Method::POST, &msg, Some(json!({"eventType": "a.b", "payload": {"x": "y".repeat(20_000)}})))
        .await;
    assert_eq!((s, &b["code"]), (StatusCode::PAYLOAD_TOO_LARGE, &json!("payload_too_large")), "{b}");
    let (s, b) = api.op(Method::POST, &msg, Some(json!({"eventType": "a.b", "payload": {}}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "eventType".into()]), "{b}");
    api.op(Method::POST, "/api/v1/event-type", Some(json!({"name": "a.b", "description": "x"}))).await;
    let (s, b) = api.op(Method::POST, &msg, Some(json!({"eventType": "a.b", "payload": []}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "payload".into()]), "{b}");
    let (s, b) = api.op(Method::POST, &msg, Some(json!({"eventType": "a.b", "payload": {}, "channels": ["c"]}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "channels".into()]), "{b}");
    let (s, b) = api.op(Method::POST, &msg, Some(json!({"eventType": "a.b", "payload": {}, "eventId": "has space"}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "eventId".into()]), "{b}");
    let (_, list) = api.op(Method::GET, &msg, None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 0, "nothing written: {list}");
    let (s, b) = api.op(Method::POST, &msg, Some(json!({"eventType": "a.b", "payload": {"ok": true}}))).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    api.op(Method::DELETE, "/api/v1/event-type/a.b", None).await;
    let (s, b) = api.op(Method::POST, &msg, Some(json!({"eventType": "a.b", "payload": {}}))).await;
    assert_eq!((s, loc(&b)), (StatusCode::UNPROCESSABLE_ENTITY, vec!["body".into(), "eventType".into()]), "archived: {b}");
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
        let r = api.client.get(format!("{}{path}", api.base)).bearer_auth(&key).send().await.unwrap();
        statuses.push(r.status().as_u16());
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            retry_after = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
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
    assert_eq!(api.call(Some(&other), Method::GET, &path, None).await.0, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(api.call(Some(&key), Method::GET, &path, None).await.0, StatusCode::OK, "after Retry-After");
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
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|x| x["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [a.to_string()], "a tenant lists only itself");
    assert_eq!(api.call(Some(&key_a), Method::GET, &format!("/api/v1/app/{b}"), None).await.0, StatusCode::NOT_FOUND);
    let (s, _) = api.call(Some(&key_a), Method::POST, "/api/v1/app", Some(json!({"name": "c"}))).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "tenant keys do not create tenants");
    let (s, _) = api.call(Some(&ro_a), Method::POST, &format!("/api/v1/app/{a}/endpoint"), Some(json!({"url": "https://example.com/x"}))).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "a read-only key");
    let (s, _) = api.call(Some(&ro_a), Method::GET, &format!("/api/v1/app/{a}/endpoint"), None).await;
    assert_eq!(s, StatusCode::OK);
    // Revoked keys stop working (at once on this replica).
    let keys = hookstream_store::api_keys::list(&env.pool, Some(a), false).await.unwrap();
    let (s, _) = api.op(Method::DELETE, &format!("/api/v1/app/{a}/api-key/{}", keys[0].id), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let revoked = if keys[0].read_only { &ro_a } else { &key_a };
    assert_eq!(api.call(Some(revoked), Method::GET, "/api/v1/app", None).await.0, StatusCode::UNAUTHORIZED);
    // Keys made through the API work, and their last use is recorded.
    let (s, made) = api.op(Method::POST, &format!("/api/v1/app/{b}/api-key"), Some(json!({"name": "ci"}))).await;
    assert_eq!(s, StatusCode::CREATED, "{made}");
    let token = made["token"].as_str().unwrap();
    assert!(token.starts_with(made["prefix"].as_str().unwrap()));
    assert_eq!(api.call(Some(token), Method::GET, &format!("/api/v1/app/{b}"), None).await.0, StatusCode::OK);
    assert!(
        eventually(Duration::from_secs(15), || async {
            let (_, keys) = api.op(Method::GET, &format!("/api/v1/app/{b}/api-key"), None).await;
            !keys["data"][0]["lastUsedAt"].is_null()
        })
        .await,
        "last use recorded"
    );
    let (_, keys) = api.op(Method::GET, &format!("/api/v1/app/{b}/api-key"), None).await;
    assert!(keys.to_string().find(token).is_none(), "a key is never shown again");
    // Portal tokens: scoped, expiring, and they log out.
    let (s, portal) = api.op(Method::POST, &format!("/api/v1/auth/app-portal-access/{a}"), Some(json!({"expiry": 60}))).await;
    assert_eq!(s, StatusCode::OK, "{portal}");
    let pt = portal["token"].as_str().unwrap();
    assert!(portal["url"].as_str().unwrap().ends_with(&format!("#key={pt}")));
    assert_eq!(api.call(Some(pt), Method::GET, &format!("/api/v1/app/{a}"), None).await.0, StatusCode::OK);
    assert_eq!(api.call(Some(pt), Method::GET, &format!("/api/v1/app/{b}"), None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(api.call(Some(pt), Method::POST, "/api/v1/auth/logout", None).await.0, StatusCode::NO_CONTENT);
    assert_eq!(api.call(Some(pt), Method::GET, &format!("/api/v1/app/{a}"), None).await.0, StatusCode::UNAUTHORIZED);
    let _ = Receiver::start(Behaviour::Ok).await;
}
