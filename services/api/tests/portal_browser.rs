//! The tenant portal in a real browser: Debian's `chromium`, headless, driven through
//! `chromedriver` (WebDriver, fantoccini), against a real API, relay and dispatcher, delivering
//! to a receiver that checks every signature (Standard Webhooks) and answers 200, or 500 with a
//! body, on demand.
//!
//! Longer than 800 lines: one browser walk, step by step, with the WebDriver helpers it needs:
//! Chromium starts once for the whole walk.
//!
//! The scenario of issue 16: open a portal link, add an endpoint (first refused by the SSRF
//! rule, the error by the field), reveal its secret, send a test event and see it delivered,
//! break the endpoint and see the failure with the receiver's response body, rotate the secret,
//! replay the failed delivery and see it delivered (signed with the new secret), replay the
//! endpoint's failed deliveries since a time (its dead letters); an expired or
//! reused link is refused; another tenant's event id gives a 404. A screenshot of each page is
//! saved to `<target>/portal-screenshots/`.
//!
//! Needs `chromium` and `chromedriver` (`scripts/setup/build-deps.sh` installs them): without
//! them the test fails, saying so.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use fantoccini::{Client, ClientBuilder, Locator};
use hookstream_testkit::TestEnv;
use reqwest::Method;
use serde_json::json;

use crate::common;

// ---- the verifying receiver ----

#[derive(Default)]
struct ReceiverState {
    /// Secrets a delivery may be signed with (`whsec_…`).
    secrets: Mutex<Vec<String>>,
    /// Answer 500 with a body instead of 200.
    failing: AtomicBool,
    /// Every request: webhook-id, verified, status answered.
    got: Mutex<Vec<(String, bool, u16)>>,
    /// Every request's `Authorization` header (the endpoint's custom header).
    auth: Mutex<Vec<String>>,
}

const FAILURE_BODY: &str = "receiver says: out of cheese (error 42)";

async fn receive(State(st): State<Arc<ReceiverState>>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    let verified = st
        .secrets
        .lock()
        .unwrap()
        .iter()
        .filter_map(|s| standardwebhooks::Webhook::new(s).ok())
        .any(|wh| wh.verify(&body, &headers).is_ok());
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let (status, text) = if !verified {
        (StatusCode::UNAUTHORIZED, "bad signature".to_string())
    } else if st.failing.load(Ordering::SeqCst) {
        (StatusCode::INTERNAL_SERVER_ERROR, FAILURE_BODY.to_string())
    } else {
        (StatusCode::OK, "ok".to_string())
    };
    st.got.lock().unwrap().push((id, verified, status.as_u16()));
    if let Some(a) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        st.auth.lock().unwrap().push(a.to_string());
    }
    (status, [("x-receiver", "portal-test")], text)
}

async fn start_receiver() -> (String, Arc<ReceiverState>) {
    let st = Arc::new(ReceiverState::default());
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(st.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, st)
}

// ---- the browser ----

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// `<target>/portal-screenshots`, wherever the target directory is (`CARGO_TARGET_DIR` aware:
/// this binary is `<target>/<profile>/deps/portal_browser-…`).
fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"));
    let dir = target.join("portal-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Browser {
    client: Client,
    _driver: tokio::process::Child,
    shots: PathBuf,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Self {
        let (Some(chromium), Some(driver)) = (
            on_path("chromium").map(|p| {
                // Debian's /usr/bin/chromium is a wrapper script; chromedriver wants the binary.
                let real = PathBuf::from("/usr/lib/chromium/chromium");
                if real.is_file() {
                    real
                } else {
                    p
                }
            }),
            on_path("chromedriver"),
        ) else {
            panic!(
                "the portal's browser test needs Debian's chromium and chromium-driver \
                 (chromium and chromedriver on PATH): run scripts/setup/build-deps.sh"
            );
        };
        // A free port for chromedriver (it cannot take port 0 itself).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = tokio::process::Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let up = Instant::now();
        while http.get(format!("{url}/status")).send().await.is_err() {
            assert!(
                up.elapsed() < Duration::from_secs(20),
                "chromedriver did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,1200", "--no-first-run", "--disable-extensions",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("a chromium session through chromedriver");
        Self {
            client,
            _driver: driver,
            shots: screenshot_dir(),
            _profile: profile,
        }
    }

    async fn shot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(self.shots.join(format!("{name}.png")), png).unwrap();
    }

    async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    async fn source(&self) -> String {
        self.client.source().await.expect("page source")
    }

    async fn h1(&self) -> String {
        self.client
            .find(Locator::Css("h1"))
            .await
            .expect("a heading")
            .text()
            .await
            .unwrap()
    }

    async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    async fn fill(&self, css: &str, text: &str) {
        let el = self
            .client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        el.clear().await.unwrap();
        el.send_keys(text).await.unwrap();
    }

    /// Waits until a navigation (after a click) lands on a path starting with `prefix`.
    async fn landed(&self, prefix: &str) -> url::Url {
        self.landed_where(prefix, |path| path.starts_with(prefix)).await
    }

    /// Waits until the browser is at exactly `path` (a form posted from `path/edit` has landed
    /// back on `path`: a prefix check would pass before the click's navigation starts).
    async fn landed_at(&self, path: &str) -> url::Url {
        self.landed_where(path, |p| p == path).await
    }

    async fn landed_where(&self, prefix: &str, at: impl Fn(&str) -> bool) -> url::Url {
        let start = Instant::now();
        loop {
            let u = self.client.current_url().await.unwrap();
            if at(u.path()) {
                // And the page is there.
                self.client
                    .wait()
                    .at_most(Duration::from_secs(10))
                    .for_element(Locator::Css("h1"))
                    .await
                    .unwrap();
                return u;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "still at {u}, not {prefix}…"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the page's heading is `text` (a click's navigation has landed).
    async fn wait_h1(&self, text: &str) {
        let start = Instant::now();
        loop {
            if let Ok(el) = self.client.find(Locator::Css("h1")).await {
                if el.text().await.is_ok_and(|t| t == text) {
                    return;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "no heading {text:?}:\n{}",
                self.source().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reloads `url` until its page contains `needle` (or panics after `timeout`).
    async fn wait_for(&self, url: &str, needle: &str, timeout: Duration) -> String {
        let start = Instant::now();
        loop {
            self.goto(url).await;
            let src = self.source().await;
            if src.contains(needle) {
                return src;
            }
            assert!(
                start.elapsed() < timeout,
                "{url} did not show {needle:?} within {timeout:?}:\n{src}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// The text of the endpoints table of an event's page (`<main>`'s first table).
async fn destinations(b: &Browser) -> String {
    b.client
        .find(Locator::Css("main table"))
        .await
        .expect("the event's endpoints")
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portal_works_in_chromium() {
    let browser = Browser::start().await;
    let env = TestEnv::new(2).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut cfg = common::api_config(&env);
    cfg.api.portal_url = format!("{base}/portal");
    let api = common::Api::start_on(cfg, listener).await;
    let pipeline = common::start_pipeline(&env);
    let (hook_url, receiver) = start_receiver().await;

    // Tenant A with a catalogue entry that has an example; tenant B with one message.
    let (s, _) = api
        .op(
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "Acme Shop", "uid": "acme"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    api.op(
        Method::POST,
        "/api/v1/event-type",
        Some(json!({
            "name": "order.created", "description": "An order was placed.",
            "schemas": {"1": {"type": "object", "examples": [{"orderId": "o-1001", "total": 42.5, "currency": "EUR"}]}}
        })),
    )
    .await;
    api.op(
        Method::POST,
        "/api/v1/app",
        Some(json!({"name": "Other Corp", "uid": "other"})),
    )
    .await;
    let (s, other_msg) = api
        .op(
            Method::POST,
            "/api/v1/app/other/msg",
            Some(json!({"eventType": "order.created", "payload": {"secret": "of-other"}})),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{other_msg}");
    let other_msg = other_msg["id"].as_str().unwrap().to_string();

    // 1. Open a portal link: a page names the application and starts nothing; its button
    // starts the session, and the token leaves the address bar.
    let login_url = common::portal_link(&api, "acme", false).await;
    assert!(
        login_url.starts_with(&format!("{base}/portal/login?token=")),
        "{login_url}"
    );
    browser.goto(&login_url).await;
    assert_eq!(browser.h1().await, "Sign in to Acme Shop");
    browser.shot("00-sign-in").await;
    browser.click("#continue").await;
    browser.wait_h1("Endpoints").await;
    let now_at = browser.client.current_url().await.unwrap();
    assert_eq!(now_at.path(), "/portal");
    assert!(
        now_at.query().is_none(),
        "the token left the address bar: {now_at}"
    );
    assert_eq!(browser.h1().await, "Endpoints");
    assert!(browser.source().await.contains("Acme Shop"));
    // Keyboard: the first Tab reaches the skip link.
    browser
        .client
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .send_keys("\u{E004}")
        .await
        .unwrap();
    let focused = browser.client.active_element().await.unwrap();
    assert_eq!(focused.text().await.unwrap(), "Skip to content");
    browser.shot("01-endpoints-empty").await;

    // 2. Add an endpoint: an address the SSRF rules refuse is shown by the field; then the
    //    receiver's.
    browser.click("a[href='/portal/endpoints/new']").await;
    browser
        .fill("#url", "http://169.254.169.254/latest/meta-data")
        .await;
    browser.fill("#description", "Order service").await;
    browser.click("form.stack button[type=submit]").await;
    let err = browser
        .client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#url-error"))
        .await;
    if err.is_err() {
        panic!("no error by the URL field:\n{}", browser.source().await);
    }
    let err = err.unwrap().text().await.unwrap();
    assert!(!err.is_empty(), "an error message");
    assert_eq!(
        browser
            .client
            .find(Locator::Css("#url"))
            .await
            .unwrap()
            .attr("aria-invalid")
            .await
            .unwrap()
            .as_deref(),
        Some("true")
    );
    browser.shot("02-add-endpoint-refused").await;
    browser.fill("#url", &hook_url).await;
    browser.fill("#event_types", "order.*").await;
    browser
        .fill("#headers", "Authorization: Bearer portal-s3cret\nX-Team: web")
        .await;
    browser.click("form.stack button[type=submit]").await;
    let endpoint_page = browser.landed("/portal/endpoints/").await;
    assert_eq!(browser.h1().await, "Endpoint");
    let endpoint_path = endpoint_page.path().to_string();
    let endpoint_id = endpoint_path.rsplit('/').next().unwrap().to_string();
    assert!(browser.source().await.contains("Endpoint created."));

    // 3. Reveal the signing secret; the receiver verifies with it.
    browser
        .click(&format!("form[action='{endpoint_path}/secret'] button"))
        .await;
    let secret = browser
        .client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#secret"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(secret.starts_with("whsec_"), "{secret}");
    *receiver.secrets.lock().unwrap() = vec![secret.clone()];
    browser.shot("03-endpoint-secret").await;

    // 4. Send a test event (the catalogue's example): it is delivered.
    browser
        .client
        .find(Locator::Css("#example"))
        .await
        .unwrap()
        .select_by_value("order.created#0")
        .await
        .unwrap();
    browser
        .click(&format!("form[action='{endpoint_path}/test'] button"))
        .await;
    let first_event = browser.landed("/portal/events/").await;
    assert!(first_event.path().starts_with("/portal/events/"), "{first_event}");
    let first_event_url = format!("{base}{}", first_event.path());
    browser
        .wait_for(
            &first_event_url,
            "class=\"status ok\">delivered",
            Duration::from_secs(60),
        )
        .await;
    let dest = destinations(&browser).await;
    assert!(dest.contains("delivered"), "{dest}\n{}", browser.source().await);
    assert!(browser.source().await.contains("o-1001"), "the payload is shown");
    browser.shot("04-event-delivered").await;
    assert!(
        receiver
            .got
            .lock()
            .unwrap()
            .iter()
            .any(|(_, verified, status)| *verified && *status == 200),
        "the receiver got a verified delivery"
    );

    // 4b. Custom headers: sent, shown masked; the edit form keeps a masked value; channels and
    // a payload filter are shown and saved.
    assert!(
        receiver
            .auth
            .lock()
            .unwrap()
            .iter()
            .any(|a| a == "Bearer portal-s3cret"),
        "the custom header was sent"
    );
    browser.goto(&format!("{base}{endpoint_path}")).await;
    let src = browser.source().await;
    assert!(
        src.contains("X-Team: web") && src.contains("Authorization: "),
        "headers shown"
    );
    assert!(
        !src.contains("portal-s3cret"),
        "a sensitive header's value is never shown"
    );
    browser.goto(&format!("{base}{endpoint_path}/edit")).await;
    assert!(
        !browser.source().await.contains("portal-s3cret"),
        "nor in the edit form"
    );
    browser.fill("#filter", r#"{"zzz": {"$exist": false}}"#).await;
    browser.fill("#channels", "").await;
    browser.click("form.stack button[type=submit]").await;
    browser.landed_at(&endpoint_path).await;
    let src = browser.source().await;
    assert!(src.contains("Changes saved."), "{src}");
    assert!(src.contains("$exist"), "the payload filter is shown");
    assert!(src.contains("every message"), "no channels: every message");
    browser.shot("04b-endpoint-headers-filter").await;

    // 5. Break the endpoint: a new test event fails for good, with the receiver's body shown.
    receiver.failing.store(true, Ordering::SeqCst);
    browser.goto(&format!("{base}{endpoint_path}")).await;
    browser
        .client
        .find(Locator::Css("#example"))
        .await
        .unwrap()
        .select_by_value("order.created#0")
        .await
        .unwrap();
    browser
        .click(&format!("form[action='{endpoint_path}/test'] button"))
        .await;
    let failed_event = browser.landed("/portal/events/").await;
    let failed_event_url = format!("{base}{}", failed_event.path());
    let failed_id = failed_event.path().rsplit('/').next().unwrap().to_string();
    let src = browser
        .wait_for(
            &failed_event_url,
            "class=\"status bad\">failed",
            Duration::from_secs(90),
        )
        .await;
    assert!(src.contains(FAILURE_BODY), "the response body is shown");
    assert!(
        receiver
            .auth
            .lock()
            .unwrap()
            .iter()
            .filter(|a| *a == "Bearer portal-s3cret")
            .count()
            >= 2,
        "the masked header saved back kept its value"
    );
    assert!(src.contains("x-receiver"), "the response headers are shown");
    assert!(src.contains("HTTP 500"));
    browser.shot("05-event-failed").await;

    // The delivery log shows it, filtered by status and endpoint.
    browser
        .goto(&format!(
            "{base}/portal/deliveries?status=failed&endpoint={endpoint_id}"
        ))
        .await;
    let log = browser.source().await;
    assert!(
        log.contains(&failed_id),
        "the failed event is in the filtered log"
    );
    assert!(!log.contains("class=\"status ok\">delivered"), "only failures");
    browser.shot("06-delivery-log-failed").await;

    // 6. Rotate the secret (no grace: only the new one signs); the receiver accepts only it.
    browser.goto(&format!("{base}{endpoint_path}")).await;
    browser
        .client
        .find(Locator::Css("#grace"))
        .await
        .unwrap()
        .select_by_value("0")
        .await
        .unwrap();
    browser
        .click(&format!("form[action='{endpoint_path}/secret/rotate'] button"))
        .await;
    // The button asks to confirm (JavaScript).
    browser.client.accept_alert().await.expect("a confirmation");
    let rotated = browser
        .client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#secret"))
        .await
        .expect("the new secret")
        .text()
        .await
        .unwrap();
    assert!(rotated.starts_with("whsec_") && rotated != secret, "{rotated}");
    assert!(browser.source().await.contains("Secret rotated."));
    browser.shot("07-secret-rotated").await;
    *receiver.secrets.lock().unwrap() = vec![rotated.clone()];
    receiver.failing.store(false, Ordering::SeqCst);

    // 7. Replay the failed delivery: delivered, signed with the new secret.
    let before = receiver.got.lock().unwrap().len();
    browser.goto(&failed_event_url).await;
    browser
        .click(&format!(
            "form[action='/portal/events/{failed_id}/resend/{endpoint_id}'] button"
        ))
        .await;
    let replayed = browser
        .client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("p.notice"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(replayed.contains("Delivery replayed"), "{replayed}");
    browser
        .wait_for(
            &failed_event_url,
            "class=\"status ok\">delivered",
            Duration::from_secs(60),
        )
        .await;
    browser.shot("08-event-replayed").await;
    let after: Vec<(String, bool, u16)> = receiver.got.lock().unwrap()[before..].to_vec();
    assert!(
        after
            .iter()
            .any(|(_, verified, status)| *verified && *status == 200),
        "the replay arrived signed with the rotated secret: {after:?}"
    );

    // 8. Replay every failed delivery of the endpoint since a time (its dead letter): the
    //    receiver gets it once more, verified.
    let before = receiver.got.lock().unwrap().len();
    browser.goto(&format!("{base}{endpoint_path}")).await;
    browser
        .click(&format!("form[action='{endpoint_path}/replay'] button"))
        .await;
    let notice = browser
        .client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("p.notice"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(notice.contains("Replay started"), "{notice}");
    let start = Instant::now();
    while !receiver.got.lock().unwrap()[before..]
        .iter()
        .any(|(_, verified, status)| *verified && *status == 200)
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the dead letter was not replayed within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The list, the chart and the catalogue.
    browser.goto(&format!("{base}/portal")).await;
    let list = browser.source().await;
    assert!(list.contains(&hook_url) && list.contains("order.*"));
    browser.shot("09-endpoints").await;
    browser.goto(&format!("{base}{endpoint_path}")).await;
    assert!(browser.source().await.contains("<svg"), "the 24 h chart");
    browser.shot("10-endpoint-chart").await;
    browser.goto(&format!("{base}/portal/event-types")).await;
    assert!(browser.source().await.contains("o-1001"));
    browser.shot("11-event-types").await;
    browser.goto(&format!("{base}/portal/deliveries")).await;
    browser.shot("12-delivery-log").await;

    // 9. Another tenant's event id: not found (in the browser, and its status).
    browser.goto(&format!("{base}/portal/events/{other_msg}")).await;
    assert_eq!(browser.h1().await, "Not found");
    assert!(!browser.source().await.contains("of-other"));
    browser.shot("13-other-tenant-404").await;
    let cookie = browser
        .client
        .get_named_cookie("hs_portal")
        .await
        .expect("the session cookie");
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(cookie.path(), Some("/portal"));
    let http = common::no_redirects();
    let r = http
        .get(format!("{base}/portal/events/{other_msg}"))
        .header("cookie", format!("hs_portal={}", cookie.value()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // 10. A reused link, then an expired one, are refused.
    browser.goto(&login_url).await;
    assert_eq!(browser.h1().await, "Link already used");
    browser.shot("14-link-reused").await;
    assert_eq!(
        http.get(&login_url).send().await.unwrap().status(),
        StatusCode::GONE
    );
    let expired_url = common::portal_link(&api, "acme", false).await;
    let token = expired_url.split("token=").nth(1).unwrap();
    let hash = hookstream_store::portal::hash(token);
    hookstream_store::sqlx::query(
        "UPDATE hookstream.portal_links SET expires_at = now() - interval '1 second' WHERE hash = $1",
    )
    .bind(hash.as_slice())
    .execute(&env.pool)
    .await
    .unwrap();
    browser.goto(&expired_url).await;
    assert_eq!(browser.h1().await, "Link expired");
    browser.shot("15-link-expired").await;
    assert_eq!(
        http.get(&expired_url).send().await.unwrap().status(),
        StatusCode::GONE
    );

    // 10b. A session opened from a link a tenant key minted ends when that key is revoked
    // (and the session of the operator's link, still in the cookie jar, is replaced).
    let login_url2 = common::portal_link(&api, "acme", false).await;
    let (s, made) = api
        .op(
            Method::POST,
            "/api/v1/app/acme/api-key",
            Some(json!({"name": "portal-minter"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{made}");
    let (s, minted) = api
        .call(
            made["token"].as_str(),
            Method::POST,
            "/api/v1/auth/app-portal-access/acme",
            Some(json!({})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{minted}");
    browser.goto(minted["url"].as_str().unwrap()).await;
    browser.click("#continue").await;
    browser.wait_h1("Endpoints").await;
    let (s, _) = api
        .op(
            Method::DELETE,
            &format!("/api/v1/app/acme/api-key/{}", made["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    browser.goto(&format!("{base}/portal")).await;
    assert_eq!(
        browser.h1().await,
        "Signed out",
        "revoking the minting key ended the session"
    );
    browser.shot("15b-minting-key-revoked").await;

    // 11. Signing out ends the session.
    browser.goto(&login_url2).await;
    browser.click("#continue").await;
    browser.wait_h1("Endpoints").await;
    let cookie = browser
        .client
        .get_named_cookie("hs_portal")
        .await
        .expect("the session cookie");
    browser.goto(&format!("{base}/portal")).await;
    browser.click("form.logout button").await;
    browser.wait_h1("Signed out").await;
    let r = http
        .get(format!("{base}/portal"))
        .header("cookie", format!("hs_portal={}", cookie.value()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    println!("screenshots in {}", browser.shots.display());
    browser.client.close().await.unwrap();
    pipeline.cancel();
}

/// What the browser does not show: the cookie's attributes, the security headers, CSRF and
/// read-only refusals (plain HTTP against the same server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portal_sessions_are_guarded() {
    let env = TestEnv::new(1).await.unwrap();
    let api = common::Api::start(common::api_config(&env)).await;
    api.op(
        Method::POST,
        "/api/v1/app",
        Some(json!({"name": "Acme", "uid": "acme"})),
    )
    .await;
    let http = common::no_redirects();

    // The login: 303 to /portal, the cookie's attributes, no referrer.
    let (_, link) = api
        .op(
            Method::POST,
            "/api/v1/auth/app-portal-access/acme",
            Some(json!({})),
        )
        .await;
    let url = link["url"].as_str().unwrap();
    // Opening the link consumes nothing (a mail scanner may open it first), and its form
    // posted from another site (another tenant's page signing someone into their tenant)
    // is refused: the link still works after both.
    let path = &url[url.find("/portal/login").unwrap()..];
    for _ in 0..2 {
        let r = http.get(format!("{}{path}", api.base)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["referrer-policy"], "no-referrer");
        assert!(r.text().await.unwrap().contains("Sign in to Acme"));
    }
    let token = url.split("token=").nth(1).unwrap();
    for (name, value) in [
        ("sec-fetch-site", "cross-site"),
        ("origin", "https://evil.example"),
    ] {
        let r = http
            .post(format!("{}/portal/login", api.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .header(name, value)
            .body(format!("token={token}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{name}: {value}");
        assert!(r.headers().get("set-cookie").is_none());
    }
    let r = common::follow_portal_link(&http, &api, url).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/portal");
    assert_eq!(r.headers()["referrer-policy"], "no-referrer");
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/portal"] {
        assert!(set.contains(attr), "{set}");
    }
    assert!(!set.contains("Secure"), "plain http portal_url: not Secure");
    assert!(r.headers().get("strict-transport-security").is_none(), "nor HSTS");
    let cookie = set.split(';').next().unwrap().to_string();

    // Pages: the CSP and friends.
    let r = http
        .get(format!("{}/portal", api.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-security-policy"], api::portal::CSP);
    // The router's own answers under /portal carry them too: a 405, a 404.
    for (method, path, status) in [
        (Method::GET, "/portal/logout", StatusCode::METHOD_NOT_ALLOWED),
        (Method::GET, "/portal/no-such-page", StatusCode::NOT_FOUND),
    ] {
        let other = http
            .request(method, format!("{}{path}", api.base))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(other.status(), status, "{path}");
        assert_eq!(
            other.headers()["content-security-policy"],
            api::portal::CSP,
            "{path}"
        );
        assert_eq!(other.headers()["x-frame-options"], "DENY", "{path}");
    }
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert_eq!(r.headers()["cache-control"], "no-store");
    let csrf = common::csrf_of(&r.text().await.unwrap());

    // A POST without the token, with a wrong one, or from another origin: 403, nothing made.
    let post = |body: String, origin: Option<&'static str>| {
        let mut req = http
            .post(format!("{}/portal/endpoints", api.base))
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send()
    };
    let form = "url=https%3A%2F%2Fexample.com%2Fhook";
    assert_eq!(
        post(form.into(), None).await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        post(format!("{form}&csrf={}", "0".repeat(64)), None)
            .await
            .unwrap()
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        post(format!("{form}&csrf={csrf}"), Some("https://evil.example"))
            .await
            .unwrap()
            .status(),
        StatusCode::FORBIDDEN
    );
    // An opaque origin (what no-referrer pages send) without Sec-Fetch-Site: refused.
    assert_eq!(
        post(format!("{form}&csrf={csrf}"), Some("null"))
            .await
            .unwrap()
            .status(),
        StatusCode::FORBIDDEN
    );
    let (_, eps) = api.op(Method::GET, "/api/v1/app/acme/endpoint", None).await;
    assert_eq!(eps["data"].as_array().unwrap().len(), 0, "nothing was created");
    // With the token: created (303 to its page).
    let r = post(format!("{form}&csrf={csrf}"), None).await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);

    // A read-only session: pages show, changes are 403.
    let (ro_cookie, ro_csrf) = common::portal_session(&api, "acme", true).await;
    let r = http
        .get(format!("{}/portal", api.base))
        .header("cookie", &ro_cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("read-only"));
    let r = http
        .post(format!("{}/portal/endpoints", api.base))
        .header("cookie", &ro_cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("url=https%3A%2F%2Fexample.com%2Fro&csrf={ro_csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let (_, eps) = api.op(Method::GET, "/api/v1/app/acme/endpoint", None).await;
    assert_eq!(eps["data"].as_array().unwrap().len(), 1);

    // No cookie, a made-up one, or two (one set by someone else, say a sibling subdomain
    // for a longer path, which browsers send first): 401.
    let two = format!("{cookie}; hs_portal=00");
    for c in [None, Some("hs_portal=00"), Some(two.as_str())] {
        let mut req = http.get(format!("{}/portal", api.base));
        if let Some(c) = c {
            req = req.header("cookie", c);
        }
        assert_eq!(req.send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    }
    // An unknown link: 401; the API token is not a link.
    let r = http
        .get(format!(
            "{}/portal/login?token={}",
            api.base,
            link["token"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // Signing in again from a browser that has a session ends that session.
    let again = common::portal_link(&api, "acme", false).await;
    let r = common::follow_portal_link_with(&http, &api, &again, Some(&cookie)).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let old = http
        .get(format!("{}/portal", api.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(
        old.status(),
        StatusCode::UNAUTHORIZED,
        "the previous session ended"
    );
}

/// The per-session request rate (429 with `Retry-After`), and a `Secure` cookie when the
/// portal is served over https.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portal_sessions_are_rate_limited_and_secure_over_https() {
    let env = TestEnv::new(1).await.unwrap();
    let mut cfg = common::api_config(&env);
    cfg.api.portal_rate_per_s = 1;
    cfg.api.portal_rate_burst = 3;
    cfg.api.portal_url = "https://portal.example.com/portal".into();
    let api = common::Api::start(cfg).await;
    api.op(
        Method::POST,
        "/api/v1/app",
        Some(json!({"name": "Acme", "uid": "acme"})),
    )
    .await;
    let url = common::portal_link(&api, "acme", false).await;
    assert!(
        url.starts_with("https://portal.example.com/portal/login?token="),
        "{url}"
    );
    let http = common::no_redirects();
    let r = common::follow_portal_link(&http, &api, &url).await;
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set.contains("; Secure"), "{set}");
    assert_eq!(r.headers()["strict-transport-security"], "max-age=31536000");
    let cookie = set.split(';').next().unwrap().to_string();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let r = http
            .get(format!("{}/portal", api.base))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            assert!(r.headers().contains_key("retry-after"));
        }
        statuses.push(r.status().as_u16());
    }
    assert_eq!(&statuses[..3], [200, 200, 200], "{statuses:?}");
    assert!(statuses[3..].contains(&429), "over the burst: {statuses:?}");
}
