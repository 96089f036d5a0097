//! Tenant isolation, route by route: every operation of the OpenAPI document (which is built
//! from the same list as the router) must have a case here, or this test fails. Each case
//! calls the route with another tenant's key on tenant A's ids (and on the caller's own
//! application with A's ids below it) and expects 404 (never 403, which would tell that the id
//! exists), or, for the installation-wide routes, that nothing of A is shown or changed; and
//! without credentials, 401.

use std::collections::BTreeMap;

use chrono::Utc;
use hookstream_store::attempts::{self, NewAttempt};
use hookstream_testkit::TestEnv;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common;
use common::Api;

/// What a route must answer tenant B's key.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Scoped by an application in the path: 404 for A's ids.
    NotFound,
    /// Installation-wide and readable (the catalogue, health): any 2xx, and A's tenant data
    /// must not appear in the body.
    ReadableNoTenantData,
    /// Installation-wide and operator-only: 403 whatever the ids.
    Forbidden,
}

fn body_for(op: &str) -> Option<Value> {
    let url = json!({"url": "https://example.com/hook"});
    Some(match op {
        "POST /api/v1/app" | "PUT /api/v1/app/{app_id}" => json!({"name": "x"}),
        "PATCH /api/v1/app/{app_id}" => json!({"name": "x"}),
        "POST /api/v1/app/{app_id}/endpoint" | "PUT /api/v1/app/{app_id}/endpoint/{endpoint_id}" => url,
        "PATCH /api/v1/app/{app_id}/endpoint/{endpoint_id}" => json!({"description": "x"}),
        "POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/secret/rotate" => json!({}),
        "POST /api/v1/auth/app/{app_id}/expire-all" => json!({}),
        "POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/recover"
        | "POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/replay-missing"
        | "POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/bulk-replay" => {
            json!({"since": "2020-01-01T00:00:00Z"})
        }
        "POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/send-example" => {
            json!({"eventType": "order.created"})
        }
        "PUT /api/v1/app/{app_id}/endpoint/{endpoint_id}/headers"
        | "PATCH /api/v1/app/{app_id}/endpoint/{endpoint_id}/headers" => json!({"headers": {}}),
        "POST /api/v1/app/{app_id}/msg" => json!({"eventType": "order.created", "payload": {}}),
        "POST /api/v1/event-type" => json!({"name": "b.c", "description": "x"}),
        "PUT /api/v1/event-type/{event_type_name}" | "PATCH /api/v1/event-type/{event_type_name}" => {
            json!({"description": "x"})
        }
        "POST /api/v1/auth/app-portal-access/{app_id}" => json!({}),
        "POST /api/v1/app/{app_id}/api-key" => json!({}),
        "POST /api/v1/operational-webhook/endpoint"
        | "PUT /api/v1/operational-webhook/endpoint/{endpoint_id}" => {
            json!({"url": "https://example.com/ops"})
        }
        "POST /api/v1/operational-webhook/endpoint/{endpoint_id}/secret/rotate" => json!({}),
        "PUT /api/v1/operational-webhook/endpoint/{endpoint_id}/headers" => json!({"headers": {}}),
        "POST /api/v1/app/{app_id}/dead-letter/replay" => json!({}),
        _ => return None,
    })
}

fn expect_for(op: &str) -> Option<Expect> {
    if op.contains("{app_id}") {
        return Some(Expect::NotFound);
    }
    Some(match op {
        "GET /api/v1/app" => Expect::ReadableNoTenantData,
        "POST /api/v1/app" => Expect::Forbidden,
        "GET /api/v1/event-type" | "GET /api/v1/event-type/{event_type_name}" => Expect::ReadableNoTenantData,
        "POST /api/v1/event-type"
        | "PUT /api/v1/event-type/{event_type_name}"
        | "PATCH /api/v1/event-type/{event_type_name}"
        | "DELETE /api/v1/event-type/{event_type_name}" => Expect::Forbidden,
        // B's own (non-portal) key: there is nothing of A to reach.
        "POST /api/v1/auth/logout" => Expect::Forbidden,
        "GET /api/v1/health" | "GET /api/v1/health/ping" => Expect::ReadableNoTenantData,
        // Scoped by the key: B's list shows none of A's tasks, and A's task is not found.
        "GET /api/v1/background-task" => Expect::ReadableNoTenantData,
        "GET /api/v1/background-task/{task_id}" => Expect::NotFound,
        // B's own operational endpoints: the list and a create show none of A's; A's
        // operational endpoint (by id) is not found, whatever B does to it.
        "GET /api/v1/operational-webhook/endpoint" | "POST /api/v1/operational-webhook/endpoint" => {
            Expect::ReadableNoTenantData
        }
        op if op.contains("/operational-webhook/endpoint/{endpoint_id}") => Expect::NotFound,
        _ => return None,
    })
}

/// Operations that need no credentials.
const PUBLIC: &[&str] = &["GET /api/v1/health", "GET /api/v1/health/ping"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_refuses_another_tenants_key_and_ids() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;

    // Tenant A, with one of everything.
    let (_, a) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "victim", "uid": "victim"})),
        )
        .await;
    let a_id: Uuid = a["id"].as_str().unwrap().parse().unwrap();
    let (_, ep) = api
        .op(
            Method::POST,
            "/api/v1/app/victim/endpoint",
            Some(json!({"url": "https://example.com/a"})),
        )
        .await;
    let ep_id: Uuid = ep["id"].as_str().unwrap().parse().unwrap();
    let (_, msg) = api
        .op(
            Method::POST,
            "/api/v1/app/victim/msg",
            Some(json!({"eventType": "order.created", "payload": {"secret": "of-a"}})),
        )
        .await;
    let msg_id: Uuid = msg["id"].as_str().unwrap().parse().unwrap();
    let started_at = Utc::now();
    attempts::ensure_partition(&env.pool, started_at.date_naive())
        .await
        .unwrap();
    attempts::insert_many(
        &env.pool,
        &[NewAttempt {
            started_at,
            event_id: msg_id,
            endpoint_id: ep_id,
            attempt: 1,
            tenant_id: a_id,
            trigger: "first".into(),
            duration_ms: 5,
            status: Some(500),
            outcome: "retryable".into(),
            error_class: "http_5xx".into(),
            error: String::new(),
            response_headers: vec![],
            response_body: Some(b"a's answer".to_vec()),
            response_truncated: false,
            next: "retry".into(),
            next_due_at: None,
            next_tier: None,
            event_type: Some("order.created".into()),
            aggregate_id: None,
            payload_bytes: None,
            committed_at: None,
            relayed_at: None,
        }],
    )
    .await
    .unwrap();
    let (_, atts) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/victim/attempt/msg/{msg_id}"),
            None,
        )
        .await;
    let attempt_id = atts["data"][0]["id"].as_str().expect("A's attempt").to_string();
    api.op(
        Method::POST,
        "/api/v1/event-type",
        Some(json!({"name": "order.created", "description": "x"})),
    )
    .await;
    let (_, key) = api
        .op(
            Method::POST,
            "/api/v1/app/victim/api-key",
            Some(json!({"name": "a"})),
        )
        .await;
    let key_id = key["id"].as_str().unwrap().to_string();
    let (s, task) = api
        .op(
            Method::POST,
            &format!("/api/v1/app/victim/endpoint/{ep_id}/recover"),
            Some(json!({"since": "2020-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{task}");
    let task_id = task["id"].as_str().unwrap().to_string();
    // A's own operational endpoint, made with A's key.
    let a_key = common::tenant_key(&env, a_id, false).await;
    let (s, oep) = api
        .call(
            Some(&a_key),
            Method::POST,
            "/api/v1/operational-webhook/endpoint",
            Some(json!({"url": "https://example.com/a-ops", "uid": "a-ops"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{oep}");
    let oep_id = oep["id"].as_str().unwrap().to_string();

    // Tenant B and its key.
    let b_id = env.tenant("attacker").await.unwrap();
    let b_key = common::tenant_key(&env, b_id, false).await;

    let doc: Value = reqwest::get(format!("{}/api/v1/openapi.json", api.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut ops: Vec<(Method, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in item.as_object().unwrap().keys() {
            if let Ok(method) = m.to_uppercase().parse::<Method>() {
                ops.push((method, path.clone()));
            }
        }
    }
    assert!(ops.len() >= 40, "the document lists every route: {}", ops.len());
    let missing: Vec<String> = ops
        .iter()
        .map(|(m, p)| format!("{m} {p}"))
        .filter(|op| expect_for(op).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "routes without a cross-tenant case: {missing:?}"
    );

    let fill = |p: &str, app: &str| {
        let endpoint = if p.starts_with("/api/v1/operational-webhook/") {
            oep_id.clone()
        } else {
            ep_id.to_string()
        };
        p.replace("{app_id}", app)
            .replace("{endpoint_id}", &endpoint)
            .replace("{msg_id}", &msg_id.to_string())
            .replace("{attempt_id}", &attempt_id)
            .replace("{key_id}", &key_id)
            .replace("{event_type_name}", "order.created")
            .replace("{task_id}", &task_id)
    };
    let mut results: BTreeMap<String, (u16, u16, Option<u16>)> = BTreeMap::new();
    for (method, template) in &ops {
        let op = format!("{method} {template}");
        let expect = expect_for(&op).unwrap();
        let body = body_for(&op);
        // A's ids, by id and by uid.
        for app in [a_id.to_string(), "victim".to_string()] {
            let path = fill(template, &app);
            let (status, resp) = api.call(Some(&b_key), method.clone(), &path, body.clone()).await;
            match expect {
                Expect::NotFound => assert_eq!(status, StatusCode::NOT_FOUND, "{op} as {path}: {resp}"),
                Expect::Forbidden => assert_eq!(status, StatusCode::FORBIDDEN, "{op}: {resp}"),
                Expect::ReadableNoTenantData => {
                    assert!(status.is_success(), "{op}: {status} {resp}");
                    let text = resp.to_string();
                    for leak in [
                        a_id.to_string(),
                        "victim".into(),
                        ep_id.to_string(),
                        msg_id.to_string(),
                        "of-a".into(),
                        task_id.clone(),
                        oep_id.clone(),
                        "a-ops".into(),
                    ] {
                        assert!(!text.contains(&leak), "{op} shows A's {leak}: {text}");
                    }
                }
            }
            results.entry(op.clone()).or_default().0 = status.as_u16();
        }
        // B's own application with A's ids below it.
        if template.contains("{app_id}/")
            && ["{endpoint_id}", "{msg_id}", "{attempt_id}", "{key_id}"]
                .iter()
                .any(|s| template.contains(s))
        {
            let path = fill(template, &b_id.to_string());
            let (status, resp) = api.call(Some(&b_key), method.clone(), &path, body.clone()).await;
            let operator_only = template.contains("api-key");
            assert!(
                status == StatusCode::NOT_FOUND || (operator_only && status == StatusCode::FORBIDDEN),
                "{op} under B's own application with A's ids: {status} {resp}"
            );
            results.entry(op.clone()).or_default().2 = Some(status.as_u16());
        }
        // No credentials.
        if !PUBLIC.contains(&op.as_str()) {
            let (status, _) = api
                .call(
                    None,
                    method.clone(),
                    &fill(template, &a_id.to_string()),
                    body.clone(),
                )
                .await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{op} without credentials");
            results.entry(op.clone()).or_default().1 = status.as_u16();
        }
    }
    // Nothing of A changed: its application, endpoint, message and key are as they were.
    let (s, still) = api.op(Method::GET, "/api/v1/app/victim", None).await;
    assert_eq!((s, &still["name"]), (StatusCode::OK, &json!("victim")));
    assert_eq!(
        api.op(Method::GET, &format!("/api/v1/app/victim/endpoint/{ep_id}"), None)
            .await
            .0,
        StatusCode::OK
    );
    let (_, m) = api
        .op(Method::GET, &format!("/api/v1/app/victim/msg/{msg_id}"), None)
        .await;
    assert_eq!(m["payload"], json!({"secret": "of-a"}));
    let (_, keys) = api.op(Method::GET, "/api/v1/app/victim/api-key", None).await;
    assert!(keys["data"][0]["revokedAt"].is_null());
    println!(
        "{} operations checked (status with B's key, without credentials, under B's app):",
        results.len()
    );
    for (op, r) in &results {
        println!("  {op}: {r:?}");
    }
}

// The OpenAPI document is generated from the handlers; `services/api/openapi.json` is its
// committed copy, and this test fails when they differ. After changing a route or a model,
// run `UPDATE_OPENAPI=1 cargo test -p api --test integration isolation::` and commit the file.

#[test]
fn the_committed_openapi_document_is_what_the_code_generates() {
    let doc = api::openapi();
    let generated = format!("{}\n", doc.to_pretty_json().expect("the document serialises"));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "services/api/openapi.json differs from what the code generates: run \
         `UPDATE_OPENAPI=1 cargo test -p api --test integration isolation::` and commit it"
    );
    let value: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert!(
        value["openapi"].as_str().unwrap().starts_with("3.1"),
        "OpenAPI 3.1"
    );
    for path in [
        "/api/v1/app",
        "/api/v1/app/{app_id}/msg",
        "/api/v1/event-type/{event_type_name}",
    ] {
        assert!(value["paths"].get(path).is_some(), "{path} documented");
    }
}

/// The portal's routes (`api::portal::ROUTES`, every one of them): with tenant B's session,
/// tenant A's ids are 404 and nothing of A shows or changes; without a session, 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_portal_route_refuses_another_tenants_ids() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let (_, a) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "victim", "uid": "victim"})),
        )
        .await;
    let a_id: Uuid = a["id"].as_str().unwrap().parse().unwrap();
    let (_, ep) = api
        .op(
            Method::POST,
            "/api/v1/app/victim/endpoint",
            Some(json!({"url": "https://example.com/a"})),
        )
        .await;
    let ep_id: Uuid = ep["id"].as_str().unwrap().parse().unwrap();
    let (_, secret) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/victim/endpoint/{ep_id}/secret"),
            None,
        )
        .await;
    let (_, msg) = api
        .op(
            Method::POST,
            "/api/v1/app/victim/msg",
            Some(json!({"eventType": "order.created", "payload": {"secret": "of-a"}})),
        )
        .await;
    let msg_id: Uuid = msg["id"].as_str().unwrap().parse().unwrap();
    let started_at = Utc::now();
    attempts::ensure_partition(&env.pool, started_at.date_naive())
        .await
        .unwrap();
    attempts::insert_many(
        &env.pool,
        &[NewAttempt {
            started_at,
            event_id: msg_id,
            endpoint_id: ep_id,
            attempt: 1,
            tenant_id: a_id,
            trigger: "first".into(),
            duration_ms: 5,
            status: Some(500),
            outcome: "dead_lettered".into(),
            error_class: "http_5xx".into(),
            error: String::new(),
            response_headers: vec![],
            response_body: Some(b"a's answer".to_vec()),
            response_truncated: false,
            next: "dead_lettered".into(),
            next_due_at: None,
            next_tier: None,
            event_type: Some("order.created".into()),
            aggregate_id: None,
            payload_bytes: None,
            committed_at: None,
            relayed_at: None,
        }],
    )
    .await
    .unwrap();
    api.op(
        Method::POST,
        "/api/v1/app",
        Some(json!({"name": "attacker", "uid": "attacker"})),
    )
    .await;
    let (b_cookie, csrf) = common::portal_session(&api, "attacker", false).await;

    let http = common::no_redirects();
    let leaks = [
        a_id.to_string(),
        "victim".to_string(),
        ep_id.to_string(),
        msg_id.to_string(),
        "of-a".to_string(),
        "a's answer".to_string(),
        "example.com/a".to_string(),
    ];
    let form_for = |template: &str| -> String {
        let extra = match template {
            "/portal/endpoints" | "/portal/endpoints/{endpoint_id}" => "&url=https%3A%2F%2Fexample.com%2Fb",
            "/portal/endpoints/{endpoint_id}/test" => "&example=ping",
            "/portal/endpoints/{endpoint_id}/replay" => "&since=2020-01-01T00%3A00",
            "/portal/endpoints/{endpoint_id}/secret/rotate" => "&grace_s=0",
            _ => "",
        };
        format!("csrf={csrf}{extra}")
    };
    let mut checked = 0;
    for (method, template) in api::portal::ROUTES {
        let path = template
            .replace("{endpoint_id}", &ep_id.to_string())
            .replace("{event_id}", &msg_id.to_string())
            .replace("{file}", "portal.css");
        let send = |cookie: Option<&str>| {
            let mut req = match *method {
                "GET" => http.get(format!("{}{path}", api.base)),
                _ => http
                    .post(format!("{}{path}", api.base))
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(form_for(template)),
            };
            if let Some(c) = cookie {
                req = req.header("cookie", c);
            }
            req.send()
        };
        // Logout would end B's session: it is checked last, below.
        if *template != "/portal/logout" {
            let r = send(Some(&b_cookie)).await.unwrap();
            let status = r.status();
            let body = r.text().await.unwrap();
            let names_a = template.contains("{endpoint_id}") || template.contains("{event_id}");
            if names_a {
                assert_eq!(
                    status,
                    StatusCode::NOT_FOUND,
                    "{method} {template} with A's ids: {body}"
                );
            } else {
                match *template {
                    // No token: refused.
                    "/portal/login" => assert_eq!(status, StatusCode::UNAUTHORIZED, "{template}"),
                    // B's own new endpoint.
                    "/portal/endpoints" => assert_eq!(status, StatusCode::SEE_OTHER, "{template}: {body}"),
                    // B's own payloads erased (A's are checked below).
                    "/portal/erase" => assert_eq!(status, StatusCode::SEE_OTHER, "{template}: {body}"),
                    _ => assert!(status.is_success(), "{method} {template}: {status} {body}"),
                }
            }
            for leak in &leaks {
                assert!(
                    !body.contains(leak.as_str()),
                    "{method} {template} shows A's {leak}: {body}"
                );
            }
        }
        // Without a session: 401 (the login and the static files need none).
        if !matches!(*template, "/portal/login" | "/portal/assets/{file}") {
            let r = send(None).await.unwrap();
            assert_eq!(
                r.status(),
                StatusCode::UNAUTHORIZED,
                "{method} {template} without a session"
            );
        }
        checked += 1;
    }
    let r = http
        .post(format!("{}/portal/logout", api.base))
        .header("cookie", &b_cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(checked, api::portal::ROUTES.len());

    // Nothing of A changed: its endpoint is enabled, with its URL and secret.
    let (s, still) = api
        .op(Method::GET, &format!("/api/v1/app/victim/endpoint/{ep_id}"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(still["disabled"], json!(false));
    assert_eq!(still["url"], json!("https://example.com/a"));
    let (_, secret_now) = api
        .op(
            Method::GET,
            &format!("/api/v1/app/victim/endpoint/{ep_id}/secret"),
            None,
        )
        .await;
    assert_eq!(secret_now, secret);
    // B's erasure reached B only: A's message still shows its payload.
    let (_, msg_now) = api
        .op(Method::GET, &format!("/api/v1/app/victim/msg/{msg_id}"), None)
        .await;
    assert_eq!(msg_now["payload"], json!({"secret": "of-a"}), "{msg_now}");
    println!("{checked} portal routes checked");
}
