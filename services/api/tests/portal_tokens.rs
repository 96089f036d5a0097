//! App-portal tokens (`hsp_`) live only while the tenant key (`hsk_`) that minted them does:
//! revoking the key ends every token it minted, their browser sessions and their unopened
//! login links, on real PostgreSQL; a token another key minted lives on. `expire-all` ends an
//! application's portal tokens the same way, all of them or those of some `sessionId`s.

use hookstream_testkit::TestEnv;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common;
use common::{api_tenant_key, Api};

/// `app-portal-access` called with `key`: the portal token and its login link.
async fn mint(api: &Api, key: &str, app: &str, session_id: &str) -> (String, String) {
    let (s, got) = api
        .call(
            Some(key),
            Method::POST,
            &format!("/api/v1/auth/app-portal-access/{app}"),
            Some(json!({"sessionId": session_id})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{got}");
    (
        got["token"].as_str().unwrap().to_string(),
        got["url"].as_str().unwrap().to_string(),
    )
}

async fn status(api: &Api, token: &str, path: &str) -> StatusCode {
    api.call(Some(token), Method::GET, path, None).await.0
}

async fn portal_page(api: &Api, cookie: &str) -> StatusCode {
    common::no_redirects()
        .get(format!("{}/portal", api.base))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .status()
}

/// What the login link's page answers (410 once the link is dead).
async fn link_page(api: &Api, url: &str) -> StatusCode {
    let path = &url[url.find("/portal/login").expect("a portal login link")..];
    common::no_redirects()
        .get(format!("{}{path}", api.base))
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_key_ends_the_portal_tokens_sessions_and_links_it_minted() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let a = env.tenant("a").await.unwrap().to_string();
    let app = format!("/api/v1/app/{a}");
    let (doomed_id, doomed) = api_tenant_key(&api, &a).await;
    let (_, kept) = api_tenant_key(&api, &a).await;

    // Two tokens of the doomed key (one with a session open, one with its link unopened), one
    // of the kept key.
    let (t1, link1) = mint(&api, &doomed, &a, "s1").await;
    let session1 = common::open_portal_link(&api, &link1).await;
    let (t2, link2) = mint(&api, &doomed, &a, "s2").await;
    assert_eq!(link_page(&api, &link2).await, StatusCode::OK);
    let (t3, link3) = mint(&api, &kept, &a, "s3").await;
    let session3 = common::open_portal_link(&api, &link3).await;
    for t in [&t1, &t2, &t3] {
        assert_eq!(status(&api, t, &app).await, StatusCode::OK);
    }
    assert_eq!(portal_page(&api, &session1).await, StatusCode::OK);

    let (s, body) = api
        .op(Method::DELETE, &format!("{app}/api-key/{doomed_id}"), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(status(&api, &doomed, &app).await, StatusCode::UNAUTHORIZED);
    for t in [&t1, &t2] {
        assert_eq!(
            status(&api, t, &app).await,
            StatusCode::UNAUTHORIZED,
            "a token minted by the revoked key is revoked with it"
        );
    }
    assert_eq!(
        portal_page(&api, &session1).await,
        StatusCode::UNAUTHORIZED,
        "its browser session ended"
    );
    assert_eq!(
        link_page(&api, &link2).await,
        StatusCode::GONE,
        "its unopened link opens nothing"
    );
    let (_, keys) = api.op(Method::GET, &format!("{app}/api-key"), None).await;
    let listed: Vec<&Value> = keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["id"] == doomed_id.as_str())
        .collect();
    assert!(!listed[0]["revokedAt"].is_null(), "{keys}");

    // The other key's token, and its session, live on.
    assert_eq!(status(&api, &t3, &app).await, StatusCode::OK);
    assert_eq!(portal_page(&api, &session3).await, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_all_ends_an_applications_portal_tokens() {
    let env = TestEnv::new(1).await.unwrap();
    let api = Api::start(common::api_config(&env)).await;
    let a = env.tenant("a").await.unwrap().to_string();
    let b = env.tenant("b").await.unwrap().to_string();
    let app = format!("/api/v1/app/{a}");
    let (_, key) = api_tenant_key(&api, &a).await;
    let (_, key_b) = api_tenant_key(&api, &b).await;
    let (t1, link1) = mint(&api, &key, &a, "alice").await;
    let session1 = common::open_portal_link(&api, &link1).await;
    let (t2, _) = mint(&api, &key, &a, "bob").await;
    let (tb, _) = mint(&api, &key_b, &b, "alice").await;
    let expire = format!("/api/v1/auth/app/{a}/expire-all");

    // Bad input names the field; a portal token may not; another tenant's key finds nothing.
    for (body, field) in [
        (json!({"expiry": -1}), "expiry"),
        (json!({"expiry": 86_401}), "expiry"),
        (json!({"sessionIds": vec!["x"; 101]}), "sessionIds"),
    ] {
        let (s, got) = api.call(Some(&key), Method::POST, &expire, Some(body)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{got}");
        assert_eq!(got["detail"][0]["loc"][1], field, "{got}");
    }
    let (s, _) = api.call(Some(&t1), Method::POST, &expire, Some(json!({}))).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _) = api
        .call(Some(&key_b), Method::POST, &expire, Some(json!({})))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Only alice's token, at once.
    let (s, got) = api
        .call(
            Some(&key),
            Method::POST,
            &expire,
            Some(json!({"sessionIds": ["alice"]})),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{got}");
    assert_eq!(status(&api, &t1, &app).await, StatusCode::UNAUTHORIZED);
    assert_eq!(portal_page(&api, &session1).await, StatusCode::UNAUTHORIZED);
    assert_eq!(status(&api, &t2, &app).await, StatusCode::OK, "bob's lives on");
    assert_eq!(
        status(&api, &tb, &format!("/api/v1/app/{b}")).await,
        StatusCode::OK,
        "another application's alice lives on"
    );
    // The rest, by an operator, with a grace period: still open now.
    let (s, _) = api.op(Method::POST, &expire, Some(json!({"expiry": 60}))).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_eq!(status(&api, &t2, &app).await, StatusCode::OK, "within its grace");
    let (s, _) = api.op(Method::POST, &expire, Some(json!({}))).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_eq!(status(&api, &t2, &app).await, StatusCode::UNAUTHORIZED);
    // The tenant key that minted them still works.
    assert_eq!(status(&api, &key, &app).await, StatusCode::OK);
}
