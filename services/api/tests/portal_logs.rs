//! No secret of the portal reaches a log: with every crate logging at DEBUG (the API, sqlx's
//! statements, hyper, tower), a login, pages, a form post, an endpoint whose URL carries a
//! token, and a revealed secret leave no link token, session id, CSRF token, signing secret or
//! URL secret in the log. (Its own binary: it installs the process's tracing subscriber.)

use std::io::Write;
use std::sync::{Arc, Mutex};

use hookstream_testkit::TestEnv;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portal_logs_no_secret() {
    let log = Captured::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let env = TestEnv::new(1).await.unwrap();
    let api = common::Api::start(common::api_config(&env)).await;
    api.op(
        Method::POST,
        "/api/v1/app",
        Some(json!({"name": "Acme", "uid": "acme"})),
    )
    .await;
    let url = common::portal_link(&api, "acme", false).await;
    let token = url.split("token=").nth(1).unwrap().to_string();
    let http = common::no_redirects();
    let cookie = common::open_portal_link(&api, &url).await;
    let session_id = cookie.trim_start_matches("hs_portal=").to_string();
    let page = http
        .get(format!("{}/portal", api.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = common::csrf_of(&page);
    let url_secret = "s3cr3t-in-the-url-0123456789";
    let r = http
        .post(format!("{}/portal/endpoints", api.base))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "csrf={csrf}&url=https%3A%2F%2Fexample.com%2Fhook%3Fkey%3D{url_secret}"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let endpoint_page = r.headers()["location"].to_str().unwrap().to_string();
    let endpoint_path = endpoint_page.split('?').next().unwrap().to_string();
    let revealed = http
        .post(format!("{}{endpoint_path}/secret", api.base))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let at = revealed.find("whsec_").expect("the secret is shown");
    let secret: String = revealed[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '/' | '='))
        .collect();
    // Refused attempts log nothing of what they carried either.
    http.get(format!("{}/portal/login?token={token}", api.base))
        .send()
        .await
        .unwrap();

    let text = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    assert!(
        text.contains("portal session started"),
        "the log is captured: {} bytes",
        text.len()
    );
    for (what, value) in [
        ("the link token", token.as_str()),
        ("the session id", session_id.as_str()),
        ("the CSRF token", csrf.as_str()),
        ("the signing secret", secret.as_str()),
        ("the URL's secret", url_secret),
    ] {
        assert!(value.len() >= 16, "{what}: {value:?}");
        assert!(!text.contains(value), "{what} is in the log");
    }
    println!("{} bytes of DEBUG log checked", text.len());
}
