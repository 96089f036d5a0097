//! An HTTP receiver on 127.0.0.1:0 that records every delivery and verifies its signature
//! with the independent `standardwebhooks` crate.

use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// This status after a delay (milliseconds): a failure that arrives later.
    DelayStatus(u64, u16),
    /// 204 after a delay spread evenly over `lo..=hi` milliseconds (deterministic, like
    /// `Flaky`: any 100 consecutive requests cover the range).
    DelaySpread(u64, u64),
    /// 302 to this location (which must not be followed).
    Redirect(&'static str),
    /// The first `n` requests get `status`, later ones 204.
    FailTimes(usize, u16),
    /// The first request gets 503 with `Retry-After: secs`, later ones 204.
    RetryAfter(u64),
    /// Never answers (a black hole): the connection stays open until the client gives up.
    Hang,
    /// About this percentage (0–100) of requests get 503, spread evenly over the request
    /// sequence (deterministic); the others 204.
    Flaky(u8),
    /// About this percentage (0–100) of requests get 429 with `Retry-After: secs`, spread
    /// like `Flaky`; the others 204.
    Throttle(u8, u64),
    /// Every event's first attempt (`hookstream-attempt: 1`) gets `status`; later ones 204.
    FailFirst(u16),
    /// Every event's first attempt gets 503 with `Retry-After: secs`; later ones 204.
    RetryAfterFirst(u64),
}

/// Whether the `nth` request (1-based) falls in the failing `percent` of a sequence: an even
/// spread (a multiplicative walk over 0..100), so any 100 consecutive requests hold `percent`.
fn in_failing_share(nth: usize, percent: u8) -> bool {
    ((nth.wrapping_mul(37)) % 100) < usize::from(percent.min(100))
}

/// The delay of the `nth` request (1-based) of `DelaySpread(lo, hi)`: the same walk over
/// 0..100 as `in_failing_share`, scaled onto `lo..=hi`.
fn spread_delay(nth: usize, lo: u64, hi: u64) -> u64 {
    let step = (nth.wrapping_mul(37) % 100) as u64;
    lo + hi.saturating_sub(lo) * step / 99
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
    /// The status the receiver answered with (0 when it never answers: `Hang`).
    pub status: u16,
}

struct Inner {
    behaviour: Mutex<Behaviour>,
    /// A delivery verifies when any of these verifies it (one receiver may serve several
    /// endpoints, each with its own secret).
    secrets: Mutex<Vec<String>>,
    received: Mutex<Vec<Received>>,
    /// Requests answered 2xx.
    successes: AtomicUsize,
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    addr: std::net::SocketAddr,
    inner: Arc<Inner>,
    stop: CancellationToken,
}

impl Receiver {
    pub async fn start(behaviour: Behaviour) -> Self {
        Self::start_at(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), behaviour)
            .await
            .expect("bind receiver")
    }

    /// A receiver on a given address (an endpoint that comes back on its old port, say).
    pub async fn start_at(addr: std::net::SocketAddr, behaviour: Behaviour) -> std::io::Result<Self> {
        let inner = Arc::new(Inner {
            behaviour: Mutex::new(behaviour),
            secrets: Mutex::new(Vec::new()),
            received: Mutex::new(Vec::new()),
            successes: AtomicUsize::new(0),
        });
        let app = Router::new().fallback(handle).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { token.cancelled().await })
                .await;
        });
        Ok(Self { addr, inner, stop })
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Verifies with this secret only from now on.
    pub fn set_secret(&self, secret: &str) {
        *self.inner.secrets.lock().unwrap() = vec![secret.to_string()];
    }

    /// Also verifies with this secret (another endpoint delivering here).
    pub fn add_secret(&self, secret: &str) {
        self.inner.secrets.lock().unwrap().push(secret.to_string());
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

    /// Requests answered with a 2xx status so far.
    pub fn successes(&self) -> usize {
        self.inner.successes.load(Ordering::Relaxed)
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
        .secrets
        .lock()
        .unwrap()
        .iter()
        .filter_map(|s| standardwebhooks::Webhook::new(s).ok())
        .any(|wh| wh.verify(&body, &headers).is_ok());
    let first_attempt = get("hookstream-attempt") == "1";
    let behaviour = *inner.behaviour.lock().unwrap();
    let (status, retry_after, nth) = {
        let mut received = inner.received.lock().unwrap();
        let nth = received.len() + 1; // this request's 1-based position
        let (status, retry_after) = match behaviour {
            Behaviour::Ok | Behaviour::Delay(_) | Behaviour::DelaySpread(..) => (204, None),
            Behaviour::FailTimes(n, status) if nth <= n => (status, None),
            Behaviour::FailTimes(..) => (204, None),
            Behaviour::RetryAfter(secs) if nth == 1 => (503, Some(secs)),
            Behaviour::RetryAfter(_) => (204, None),
            Behaviour::Status(s) | Behaviour::DelayStatus(_, s) => (s, None),
            Behaviour::Redirect(_) => (302, None),
            Behaviour::Hang => (0, None),
            Behaviour::Flaky(percent) if in_failing_share(nth, percent) => (503, None),
            Behaviour::Flaky(_) => (204, None),
            Behaviour::Throttle(percent, secs) if in_failing_share(nth, percent) => (429, Some(secs)),
            Behaviour::Throttle(..) => (204, None),
            Behaviour::FailFirst(status) if first_attempt => (status, None),
            Behaviour::FailFirst(_) => (204, None),
            Behaviour::RetryAfterFirst(secs) if first_attempt => (503, Some(secs)),
            Behaviour::RetryAfterFirst(_) => (204, None),
        };
        received.push(Received {
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
            status,
        });
        (status, retry_after, nth)
    };
    if (200..300).contains(&status) {
        inner.successes.fetch_add(1, Ordering::Relaxed);
    }
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match behaviour {
        Behaviour::Delay(ms) | Behaviour::DelayStatus(ms, _) => {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            code.into_response()
        }
        Behaviour::DelaySpread(lo, hi) => {
            tokio::time::sleep(std::time::Duration::from_millis(spread_delay(nth, lo, hi))).await;
            code.into_response()
        }
        Behaviour::Redirect(to) => (code, [("location", to)]).into_response(),
        Behaviour::Hang => {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            StatusCode::NO_CONTENT.into_response()
        }
        _ => match retry_after {
            Some(secs) => (code, [("retry-after", secs.to_string())]).into_response(),
            None => code.into_response(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::{in_failing_share, spread_delay};

    #[test]
    fn spread_delays_cover_the_range() {
        let mut d: Vec<u64> = (1..=100).map(|n| spread_delay(n, 10, 200)).collect();
        d.sort_unstable();
        assert_eq!((d[0], d[99]), (10, 200));
        assert!((100..=110).contains(&d[50]), "median {}", d[50]);
    }

    #[test]
    fn failing_share_is_even() {
        for percent in [0u8, 1, 10, 33, 50, 100] {
            for start in [1usize, 7, 250] {
                let n = (start..start + 100)
                    .filter(|&i| in_failing_share(i, percent))
                    .count();
                assert_eq!(n, usize::from(percent), "percent {percent} from {start}");
            }
        }
    }
}
