//! In-process services for the API's integration tests: the API on port 0 against a test's
//! own database and topics, and (for delivery) a relay and a dispatcher.

#![allow(dead_code)] // each test binary uses a part

use std::time::Duration;

use hookstream_testkit::TestEnv;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

pub const OPERATOR_TOKEN: &str = "test-operator-token-0123456789";

/// The API's configuration for this test's database, topics and tiers (loopback allowed).
pub fn api_config(env: &TestEnv) -> api::Config {
    let mut cfg = api::Config {
        database: env.database.clone(),
        kafka: env.kafka.clone(),
        retry: retry(env),
        secrets: env.secrets.clone(),
        ..Default::default()
    };
    cfg.delivery.allow_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    cfg.api.listen = "127.0.0.1:0".into();
    cfg.api.operator_token_hashes = vec![format!("sha256:{}", hex::encode(Sha256::digest(OPERATOR_TOKEN)))];
    cfg.api.key_cache_ms = 200;
    cfg.api.shutdown_grace_ms = 2_000;
    cfg
}

/// A compressed retry schedule (what the test dispatchers use).
pub fn retry(env: &TestEnv) -> hookstream_config::RetryConfig {
    hookstream_config::RetryConfig {
        schedule_ms: vec![1_000, 2_000],
        jitter: 0.0,
        min_throttled_delay_ms: 1_000,
        ..env.retry.clone()
    }
}

/// A running API.
pub struct Api {
    pub base: String,
    pub client: reqwest::Client,
    pub stop: CancellationToken,
    pub registry: prometheus::Registry,
    /// Ends when `api::run` returns (after `stop`).
    pub task: Option<tokio::task::JoinHandle<()>>,
}

impl Api {
    pub async fn start(cfg: api::Config) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(cfg, listener).await
    }

    /// The API on a listener bound beforehand (to put its address in `api.portal_url`).
    pub async fn start_on(cfg: api::Config, listener: tokio::net::TcpListener) -> Self {
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let registry = prometheus::Registry::new();
        let (t, r) = (stop.clone(), registry.clone());
        let task = tokio::spawn(async move {
            api::run(cfg, listener, &r, Default::default(), t)
                .await
                .expect("api runs");
        });
        let client = reqwest::Client::new();
        for _ in 0..100 {
            if let Ok(r) = client.get(format!("{base}/api/v1/health")).send().await {
                if r.status() == StatusCode::NO_CONTENT {
                    return Self {
                        base,
                        client,
                        stop,
                        registry,
                        task: Some(task),
                    };
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the API did not become healthy");
    }

    /// A request with `token` (None: no credentials); the status and the JSON body (Null when
    /// empty).
    pub async fn call(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request sent");
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, json)
    }

    pub async fn op(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.call(Some(OPERATOR_TOKEN), method, path, body).await
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A relay and a dispatcher (compressed retries, loopback allowed); cancel the token to stop.
pub fn start_pipeline(env: &TestEnv) -> CancellationToken {
    let token = CancellationToken::new();
    let relay = outbox_relay::Config {
        database: env.database.clone(),
        secrets: env.secrets.clone(),
        kafka: env.kafka.clone(),
        ..Default::default()
    };
    let t = token.clone();
    tokio::spawn(async move {
        outbox_relay::run(relay, &prometheus::Registry::new(), Default::default(), t)
            .await
            .expect("relay runs");
    });
    let mut cfg = dispatcher::Config {
        database: env.database.clone(),
        kafka: env.kafka.clone(),
        retry: retry(env),
        dlq: dispatcher::dlq_sink::DlqConfig {
            sink_group_id: env.dlq_sink_group(),
            ..Default::default()
        },
        attempts: dispatcher::attempt_sink::AttemptsConfig {
            sink_group_id: env.attempt_sink_group(),
            ..Default::default()
        },
        secrets: env.secrets.clone(),
        ..Default::default()
    };
    cfg.delivery.allow_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    let t = token.clone();
    tokio::spawn(async move {
        dispatcher::run(cfg, &prometheus::Registry::new(), Default::default(), t)
            .await
            .expect("dispatcher runs");
    });
    token
}

/// A tenant key for `tenant` (made as `hookstream api-key create` does).
pub async fn tenant_key(env: &TestEnv, tenant: uuid::Uuid, read_only: bool) -> String {
    hookstream_store::api_keys::create(
        &env.pool,
        &hookstream_store::api_keys::NewKey {
            tenant_id: tenant,
            kind: hookstream_store::api_keys::KeyKind::Tenant,
            name: "test".into(),
            read_only,
            expires_at: None,
            minted_by: None,
        },
    )
    .await
    .unwrap()
    .1
}

/// A portal session for `app` (by id or uid), as a browser gets one: a link from
/// A portal login link for `app` (`app-portal-access`, asked with the operator token).
pub async fn portal_link(api: &Api, app: &str, read_only: bool) -> String {
    let (s, link) = api
        .op(
            Method::POST,
            &format!("/api/v1/auth/app-portal-access/{app}"),
            Some(serde_json::json!({"readOnly": read_only})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{link}");
    link["url"].as_str().expect("a url").to_string()
}

/// An HTTP client that shows redirects instead of following them (the portal's login is one).
pub fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

/// `app-portal-access`, opened once. Returns the cookie (`hs_portal=…`) and the CSRF token of
/// its forms.
pub async fn portal_session(api: &Api, app: &str, read_only: bool) -> (String, String) {
    let url = portal_link(api, app, read_only).await;
    let cookie = open_portal_link(api, &url).await;
    let client = no_redirects();
    let page = client
        .get(format!("{}/portal", api.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    (cookie, csrf_of(&page))
}

/// Opens a portal login link (`app-portal-access`'s `url`) as a browser does: the page it
/// opens (which consumes nothing), then its "Continue" form. Expects the 303 and returns the
/// session cookie (`hs_portal=…`).
pub async fn open_portal_link(api: &Api, url: &str) -> String {
    let r = follow_portal_link(&no_redirects(), api, url).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    r.headers()
        .get("set-cookie")
        .expect("a session cookie")
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string()
}

/// The link's page (200, naming the application, with a form that posts the token), then
/// that form's post as the browser sends it: the post's response.
pub async fn follow_portal_link(http: &reqwest::Client, api: &Api, url: &str) -> reqwest::Response {
    follow_portal_link_with(http, api, url, None).await
}

/// `follow_portal_link` from a browser holding `cookie` (a session it already has).
pub async fn follow_portal_link_with(
    http: &reqwest::Client,
    api: &Api,
    url: &str,
    cookie: Option<&str>,
) -> reqwest::Response {
    let path = &url[url.find("/portal/login").expect("a portal login link")..];
    let page = http.get(format!("{}{path}", api.base)).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK, "the link's page");
    assert!(
        page.headers().get("set-cookie").is_none(),
        "the page starts no session"
    );
    let page = page.text().await.unwrap();
    let needle = "name=\"token\" value=\"";
    let at = page.find(needle).expect("a form with the link's token") + needle.len();
    let token = &page[at..at + page[at..].find('"').unwrap()];
    let mut post = http
        .post(format!("{}/portal/login", api.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin")
        .body(format!("token={token}"));
    if let Some(c) = cookie {
        post = post.header("cookie", c);
    }
    post.send().await.unwrap()
}

/// The CSRF token in a portal page's forms.
pub fn csrf_of(page: &str) -> String {
    let needle = "name=\"csrf\" value=\"";
    let at = page.find(needle).expect("a form with a csrf field") + needle.len();
    page[at..at + 64].to_string()
}

/// A tenant key of `app`'s tenant made through the API: its id and the key itself.
pub async fn api_tenant_key(api: &Api, app: &str) -> (String, String) {
    let (s, made) = api
        .op(
            Method::POST,
            &format!("/api/v1/app/{app}/api-key"),
            Some(serde_json::json!({"name": "k"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{made}");
    (
        made["id"].as_str().unwrap().to_string(),
        made["token"].as_str().unwrap().to_string(),
    )
}
