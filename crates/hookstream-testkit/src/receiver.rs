//! An HTTP receiver on 127.0.0.1:0 that records every delivery and verifies its signature
//! with the independent `standardwebhooks` crate.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio_util::sync::CancellationToken;

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// 204 No Content.
    Ok,
    /// Always this status.
    Status(u16),
    /// 204 after a delay (milliseconds).
    Delay(u64),
    /// 302 to this location (which must not be followed).
    Redirect(&'static str),
    /// The first `n` requests get `status`, later ones 204.
    FailTimes(usize, u16),
    /// The first request gets 503 with `Retry-After: secs`, later ones 204.
    RetryAfter(u64),
    /// Never answers (a black hole): the connection stays open until the client gives up.
    Hang,
}

/// One delivery as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub webhook_id: String,
    pub timestamp: String,
    pub signature: String,
    pub event_type: String,
    /// The `hookstream-attempt` header.
    pub attempt: u32,
    pub body: Bytes,
    /// Whether `standardwebhooks` accepted the signature with the endpoint's secret.
    pub verified: bool,
    pub at: Instant,
    /// Arrival time in ms since the Unix epoch, for end-to-end latency.
    pub received_unix_ms: f64,
}

struct Inner {
    behaviour: Mutex<Behaviour>,
    secret: Mutex<Option<String>>,
    received: Mutex<Vec<Received>>,
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    addr: std::net::SocketAddr,
    inner: Arc<Inner>,
    stop: CancellationToken,
}

impl Receiver {
    pub async fn start(behaviour: Behaviour) -> Self {
        let inner = Arc::new(Inner {
            behaviour: Mutex::new(behaviour),
            secret: Mutex::new(None),
            received: Mutex::new(Vec::new()),
        });
        let app = Router::new().fallback(handle).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { token.cancelled().await })
                .await;
        });
        Self { addr, inner, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn set_secret(&self, secret: &str) {
        *self.inner.secret.lock().unwrap() = Some(secret.to_string());
    }

    /// Changes how later requests are answered (an endpoint that recovers, say).
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        *self.inner.behaviour.lock().unwrap() = behaviour;
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.received.lock().unwrap().clone()
    }

    /// Distinct webhook ids received, and how many deliveries were duplicates.
    pub fn distinct(&self) -> (std::collections::HashSet<String>, usize) {
        let got = self.inner.received.lock().unwrap();
        let ids: std::collections::HashSet<String> = got.iter().map(|r| r.webhook_id.clone()).collect();
        let dups = got.len() - ids.len();
        (ids, dups)
    }

    pub fn count(&self) -> usize {
        self.inner.received.lock().unwrap().len()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn handle(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let verified = inner
        .secret
        .lock()
        .unwrap()
        .as_deref()
        .and_then(|s| standardwebhooks::Webhook::new(s).ok())
        .map(|wh| wh.verify(&body, &headers).is_ok())
        .unwrap_or(false);
    inner.received.lock().unwrap().push(Received {
        webhook_id: get("webhook-id"),
        timestamp: get("webhook-timestamp"),
        signature: get("webhook-signature"),
        event_type: get("hookstream-event-type"),
        attempt: get("hookstream-attempt").parse().unwrap_or(0),
        body,
        verified,
        at: Instant::now(),
        received_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(0.0),
    });
    let nth = inner.received.lock().unwrap().len(); // this request's 1-based position
    let behaviour = *inner.behaviour.lock().unwrap();
    match behaviour {
        Behaviour::Ok => StatusCode::NO_CONTENT.into_response(),
        Behaviour::FailTimes(n, status) if nth <= n => StatusCode::from_u16(status)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response(),
        Behaviour::FailTimes(..) => StatusCode::NO_CONTENT.into_response(),
        Behaviour::RetryAfter(secs) if nth == 1 => (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", secs.to_string())],
        )
            .into_response(),
        Behaviour::RetryAfter(_) => StatusCode::NO_CONTENT.into_response(),
        Behaviour::Status(s) => StatusCode::from_u16(s)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response(),
        Behaviour::Delay(ms) => {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            StatusCode::NO_CONTENT.into_response()
        }
        Behaviour::Redirect(to) => (StatusCode::FOUND, [("location", to)]).into_response(),
        Behaviour::Hang => {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            StatusCode::NO_CONTENT.into_response()
        }
    }
}
