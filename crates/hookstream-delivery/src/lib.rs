//! The delivery engine: one signed HTTP POST of one event to one endpoint, and what its
//! outcome means. The main path and the retry path use the same engine.
//!
//! Outcomes follow the receivers' contract: 2xx is success; 410 means the endpoint is gone;
//! 408, 425, 429, 5xx, timeouts, connect and TLS errors are worth retrying (`Retry-After` is
//! parsed); redirects are not followed and count, like other 4xx, as permanent failures.

#![forbid(unsafe_code)]

pub mod ssrf;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use hookstream_egress::{redact, redact_text, validate_endpoint_url, UrlError};
use hookstream_signing::{signature_header, Secret, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub use ssrf::{AddressPolicy, SsrfBlocked};

/// Delivery settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct DeliveryConfig {
    pub connect_timeout_ms: u64,
    /// Upper bound on any endpoint's own timeout.
    pub max_timeout_ms: u64,
    /// CIDRs exempt from the SSRF guard. Empty by default: only public addresses.
    pub allow_cidrs: Vec<IpNet>,
    /// Optional egress proxy (`http://host:port`); it then resolves and connects for us.
    pub proxy: Option<String>,
    /// How much of a response body is kept for the attempt log.
    pub max_response_bytes: usize,
    pub user_agent: String,
    /// Idle keep-alive connections kept per host. At least the largest endpoint
    /// `max_in_flight` (1,000): fewer, and a busy endpoint opens and closes a TCP connection
    /// for most deliveries.
    pub pool_max_idle_per_host: usize,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            connect_timeout_ms: 5_000,
            max_timeout_ms: 30_000,
            allow_cidrs: Vec::new(),
            proxy: None,
            max_response_bytes: 64 * 1024,
            user_agent: concat!("Hookstream/", env!("CARGO_PKG_VERSION")).into(),
            pool_max_idle_per_host: 1000,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("invalid egress proxy: {0}")]
    Proxy(String),
    #[error("cannot build the http client: {0}")]
    Client(#[from] reqwest::Error),
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Delivered,
    /// Worth another attempt later.
    Retryable,
    /// Will not succeed by retrying: dead-letter it.
    Permanent,
    /// HTTP 410: the receiver asked us to stop; disable the endpoint.
    Gone,
}

/// Why an attempt failed, from a small fixed set (used as a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    None,
    Http3xx,
    Http4xx,
    Http429,
    Http5xx,
    Http410,
    Timeout,
    Connect,
    Tls,
    SsrfBlocked,
    InvalidUrl,
    NoSecret,
    Other,
}

impl ErrorClass {
    /// Every class, for exporting each label value from the start.
    pub const ALL: [ErrorClass; 13] = [
        ErrorClass::None,
        ErrorClass::Http3xx,
        ErrorClass::Http4xx,
        ErrorClass::Http429,
        ErrorClass::Http5xx,
        ErrorClass::Http410,
        ErrorClass::Timeout,
        ErrorClass::Connect,
        ErrorClass::Tls,
        ErrorClass::SsrfBlocked,
        ErrorClass::InvalidUrl,
        ErrorClass::NoSecret,
        ErrorClass::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::None => "none",
            ErrorClass::Http3xx => "http_3xx",
            ErrorClass::Http4xx => "http_4xx",
            ErrorClass::Http429 => "http_429",
            ErrorClass::Http5xx => "http_5xx",
            ErrorClass::Http410 => "http_410",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Connect => "connect",
            ErrorClass::Tls => "tls",
            ErrorClass::SsrfBlocked => "ssrf_blocked",
            ErrorClass::InvalidUrl => "invalid_url",
            ErrorClass::NoSecret => "no_secret",
            ErrorClass::Other => "other",
        }
    }
}

/// The result of one attempt.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub verdict: Verdict,
    pub class: ErrorClass,
    /// HTTP status, when a response arrived.
    pub status: Option<u16>,
    /// A readable description of the failure (never contains secrets).
    pub error: Option<String>,
    /// The receiver's `Retry-After`, when it sent one.
    pub retry_after: Option<Duration>,
    pub latency: Duration,
    /// Up to `max_response_bytes` of the response body.
    pub response: Bytes,
    /// The body was longer than `response` (cut at `max_response_bytes`).
    pub response_truncated: bool,
    /// The response's headers (see [`response_headers`]).
    pub response_headers: Vec<(String, String)>,
}

impl Outcome {
    fn failed(verdict: Verdict, class: ErrorClass, error: String, latency: Duration) -> Self {
        Self {
            verdict,
            class,
            status: None,
            error: Some(error),
            retry_after: None,
            latency,
            response: Bytes::new(),
            response_truncated: false,
            response_headers: Vec::new(),
        }
    }
}

/// Where and how to deliver.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// May be a capability (a token in the path or query): shown only redacted.
    pub url: &'a str,
    pub timeout: Duration,
    /// Every active secret signs (rotation window).
    pub secrets: &'a [Secret],
    /// The endpoint's custom headers (checked when they were set: no reserved names). Values
    /// may be credentials: never logged.
    pub headers: &'a [(String, String)],
}

impl fmt::Debug for Target<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("url", &hookstream_egress::redact(self.url))
            .field("timeout", &self.timeout)
            .field("secrets", &self.secrets.len())
            .field("headers", &self.headers.len())
            .finish()
    }
}

/// What to deliver.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// The event id, sent as `webhook-id`; stable across retries and replays.
    pub id: &'a str,
    pub event_type: &'a str,
    pub body: &'a Bytes,
    pub attempt: u32,
}

/// The HTTP engine. Cheap to clone; all clones share one connection pool.
#[derive(Clone)]
pub struct Engine {
    client: reqwest::Client,
    policy: Arc<AddressPolicy>,
    max_timeout: Duration,
    max_response_bytes: usize,
}

impl Engine {
    pub fn new(cfg: &DeliveryConfig) -> Result<Self, EngineError> {
        let policy = Arc::new(AddressPolicy::new(cfg.allow_cidrs.clone()));
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_millis(cfg.connect_timeout_ms))
            .pool_max_idle_per_host(cfg.pool_max_idle_per_host)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .user_agent(&cfg.user_agent)
            .dns_resolver(Arc::new(ssrf::GuardedResolver::new(policy.clone())));
        builder = match &cfg.proxy {
            // reqwest is built without `socks`: it would take the URL and fail every
            // connection. Refused here, where every service builds its engine at start-up.
            Some(p) if !(p.starts_with("http://") || p.starts_with("https://")) => {
                return Err(EngineError::Proxy(format!(
                    "{} is not an http:// or https:// proxy (socks5 is not supported)",
                    redact(p)
                )));
            }
            // The proxy URL may carry credentials: the error names it only in redacted form.
            Some(p) => builder.proxy(
                reqwest::Proxy::all(p)
                    .map_err(|e| EngineError::Proxy(redact_text(&e.without_url().to_string(), p)))?,
            ),
            // Never pick up HTTP_PROXY from the environment by accident.
            None => builder.no_proxy(),
        };
        Ok(Self {
            client: builder.build()?,
            policy,
            max_timeout: Duration::from_millis(cfg.max_timeout_ms),
            max_response_bytes: cfg.max_response_bytes,
        })
    }

    /// Makes one attempt. Never panics and never returns an error: every failure is an
    /// `Outcome` that says what to do next.
    pub async fn deliver(&self, target: Target<'_>, msg: Message<'_>) -> Outcome {
        let started = Instant::now();
        let url = match self.check_url(target.url) {
            Ok(url) => url,
            Err((class, error)) => {
                return Outcome::failed(Verdict::Permanent, class, error, started.elapsed())
            }
        };
        if target.secrets.is_empty() {
            return Outcome::failed(
                Verdict::Permanent,
                ErrorClass::NoSecret,
                "endpoint has no active signing secret".into(),
                started.elapsed(),
            );
        }
        let timestamp = unix_now();
        let signature = signature_header(target.secrets.iter(), msg.id, timestamp, msg.body);
        let mut request = self.client.post(url);
        for (name, value) in target.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let request = request
            .timeout(target.timeout.min(self.max_timeout))
            .header("content-type", "application/json")
            .header(HEADER_ID, msg.id)
            .header(HEADER_TIMESTAMP, timestamp.to_string())
            .header(HEADER_SIGNATURE, signature)
            .header("hookstream-event-type", msg.event_type)
            .header("hookstream-attempt", msg.attempt.to_string())
            .body(msg.body.clone());
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                let (class, error) = classify_error(e, target.url);
                return Outcome::failed(
                    Verdict::Retryable.unless_blocked(class),
                    class,
                    error,
                    started.elapsed(),
                );
            }
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let headers = response_headers(response.headers());
        let (body, truncated) = self.read_capped(response).await;
        let (verdict, class) = classify_status(status);
        Outcome {
            verdict,
            class,
            status: Some(status),
            error: (verdict != Verdict::Delivered).then(|| format!("HTTP {status}")),
            retry_after,
            latency: started.elapsed(),
            response: body,
            response_truncated: truncated,
            response_headers: headers,
        }
    }

    /// Checks the URL before any connection: forbidden IP literals are `SsrfBlocked` (they
    /// never reach the resolver that checks host names), anything else wrong is `InvalidUrl`.
    /// The error text never contains the URL.
    fn check_url(&self, raw: &str) -> Result<reqwest::Url, (ErrorClass, String)> {
        validate_endpoint_url(raw, &self.policy).map_err(|e| match e {
            UrlError::Forbidden { ip, reason } => {
                tracing::warn!(address = %ip, range = %reason, "ssrf guard: the endpoint's address is forbidden");
                (ErrorClass::SsrfBlocked, blocked_reason(raw))
            }
            other => (ErrorClass::InvalidUrl, other.to_string()),
        })
    }

    /// Up to `max_response_bytes` of the body, and whether there was more.
    async fn read_capped(&self, mut response: reqwest::Response) -> (Bytes, bool) {
        let mut out = BytesMut::new();
        let mut truncated = false;
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = self.max_response_bytes.saturating_sub(out.len());
            if chunk.len() > room {
                truncated = true;
            }
            out.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if truncated {
                break;
            }
        }
        (out.freeze(), truncated)
    }
}

/// Response headers kept per attempt.
pub const MAX_RESPONSE_HEADERS: usize = 32;
/// Longest response header value kept (bytes; cut on a character boundary).
pub const MAX_HEADER_VALUE_BYTES: usize = 256;

/// A response's headers as the attempt log keeps them: names lower-case, at most
/// `MAX_RESPONSE_HEADERS`, values cut at `MAX_HEADER_VALUE_BYTES` (non-UTF-8 bytes replaced),
/// and `set-cookie` values redacted (a receiver's session is not ours to store).
pub fn response_headers(headers: &reqwest::header::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .take(MAX_RESPONSE_HEADERS)
        .map(|(name, value)| {
            let name = name.as_str().to_ascii_lowercase();
            let value = if name == "set-cookie" {
                "[redacted]".to_string()
            } else {
                let text = String::from_utf8_lossy(value.as_bytes());
                let mut end = text.len().min(MAX_HEADER_VALUE_BYTES);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text[..end].to_string()
            };
            (name, value)
        })
        .collect()
}

impl Verdict {
    fn unless_blocked(self, class: ErrorClass) -> Verdict {
        if class == ErrorClass::SsrfBlocked {
            Verdict::Permanent
        } else {
            self
        }
    }
}

/// What a status code means for the delivery.
pub fn classify_status(status: u16) -> (Verdict, ErrorClass) {
    match status {
        200..=299 => (Verdict::Delivered, ErrorClass::None),
        410 => (Verdict::Gone, ErrorClass::Http410),
        429 => (Verdict::Retryable, ErrorClass::Http429),
        408 | 425 => (Verdict::Retryable, ErrorClass::Http4xx),
        500..=599 => (Verdict::Retryable, ErrorClass::Http5xx),
        300..=399 => (Verdict::Permanent, ErrorClass::Http3xx),
        _ => (Verdict::Permanent, ErrorClass::Http4xx),
    }
}

/// What a tenant is told when the SSRF guard refuses its endpoint: a fixed reason and the
/// URL's host as the tenant wrote it (token-looking labels masked), never what it resolved
/// to or which range refused it.
pub fn blocked_reason(url: &str) -> String {
    let host = reqwest::Url::parse(url)
        .map(|u| hookstream_egress::redact_host(&u))
        .unwrap_or_else(|_| hookstream_egress::INVALID_URL.to_string());
    format!("blocked_address: {host} is not an address deliveries may reach")
}

/// The class of a transport failure and a readable description of it. The description is
/// built from the error without its URL and from its source chain, then stripped of `url` in
/// any form and of its secret parts: a library may quote the URL anywhere.
fn classify_error(e: reqwest::Error, url: &str) -> (ErrorClass, String) {
    let e = e.without_url();
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    let mut chain = String::new();
    while let Some(err) = source {
        if let Some(blocked) = err.downcast_ref::<SsrfBlocked>() {
            // What the name resolved to is the operator's business (internal DNS answers):
            // the log has it, the tenant's attempt and dead letter do not.
            tracing::warn!(
                host = %redact_text(&blocked.host, url),
                refused = %blocked.addrs,
                "ssrf guard: the endpoint's host resolves only to forbidden addresses"
            );
            return (ErrorClass::SsrfBlocked, blocked_reason(url));
        }
        if !chain.is_empty() {
            chain.push_str(": ");
        }
        chain.push_str(&err.to_string());
        source = err.source();
    }
    let lower = chain.to_ascii_lowercase();
    let class = if e.is_timeout() {
        ErrorClass::Timeout
    } else if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake") {
        ErrorClass::Tls
    } else if e.is_connect() {
        ErrorClass::Connect
    } else {
        ErrorClass::Other
    };
    (class, redact_text(&chain, url))
}

/// The longest `Retry-After` believed: one year. Longer values (or far-future dates) are
/// saturated to it, so the value is safe to add to any clock; the dispatcher clamps further
/// with `retry.max_retry_after_ms`.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Parses `Retry-After`: delay-seconds (digits only; too large a number saturates) or an HTTP
/// date (a past date is zero). The result is at most [`MAX_RETRY_AFTER`]; `None` when the
/// value is neither.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // All digits: it only fails to parse by overflowing u64.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or_default().min(MAX_RETRY_AFTER))
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes_follow_the_receiver_contract() {
        assert_eq!(classify_status(200).0, Verdict::Delivered);
        assert_eq!(classify_status(204).0, Verdict::Delivered);
        assert_eq!(classify_status(410), (Verdict::Gone, ErrorClass::Http410));
        for s in [408, 425, 429, 500, 502, 503, 504] {
            assert_eq!(classify_status(s).0, Verdict::Retryable, "{s}");
        }
        for s in [301, 302, 400, 401, 403, 404, 422] {
            assert_eq!(classify_status(s).0, Verdict::Permanent, "{s}");
        }
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert_eq!(parse_retry_after("10", now), Some(Duration::from_secs(10)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(120));
        assert_eq!(parse_retry_after(&later, now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after(" 10 ", now), Some(Duration::from_secs(10)));
        for invalid in ["", "-5", "+5", "1.5", "1e9", "0x10"] {
            assert_eq!(parse_retry_after(invalid, now), None, "{invalid:?}");
        }
    }

    #[test]
    fn retry_after_saturates_at_the_cap() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        for huge in [
            "31536001",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999999999999999999999999999",
        ] {
            assert_eq!(parse_retry_after(huge, now), Some(MAX_RETRY_AFTER), "{huge}");
        }
        assert_eq!(
            parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT", now),
            Some(Duration::ZERO),
            "a past date means now"
        );
        assert_eq!(
            parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", SystemTime::UNIX_EPOCH),
            Some(MAX_RETRY_AFTER)
        );
    }

    proptest::proptest! {
        /// Any header value, at any clock: a value no larger than the cap, never a panic.
        #[test]
        fn retry_after_never_panics_and_stays_capped(
            value in "\\PC{0,40}|[0-9]{1,40}|(Mon|Sun), [0-9]{2} (Jan|Dec) [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
            now_secs in 0u64..=(1u64 << 40),
        ) {
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now_secs);
            if let Some(d) = parse_retry_after(&value, now) {
                proptest::prop_assert!(d <= MAX_RETRY_AFTER);
            }
        }
    }

    // Before, a socks5 proxy was taken and every delivery failed at its first connection.
    #[test]
    fn a_proxy_the_client_cannot_speak_is_refused_when_the_engine_is_built() {
        for proxy in [
            "socks5://user:s3cr3tpass@127.0.0.1:1080",
            "socks5h://127.0.0.1:1080",
            "ftp://p:1",
        ] {
            let cfg = DeliveryConfig {
                proxy: Some(proxy.into()),
                ..Default::default()
            };
            let err = Engine::new(&cfg).err().expect(proxy).to_string();
            assert!(err.contains("socks5 is not supported"), "{proxy}: {err}");
            assert!(!err.contains("s3cr3tpass"), "{err}");
        }
        let cfg = DeliveryConfig {
            proxy: Some("http://127.0.0.1:3128".into()),
            ..Default::default()
        };
        assert!(Engine::new(&cfg).is_ok());
    }

    fn engine(allow: &[&str]) -> Engine {
        let cfg = DeliveryConfig {
            allow_cidrs: allow.iter().map(|c| c.parse().unwrap()).collect(),
            ..Default::default()
        };
        Engine::new(&cfg).unwrap()
    }

    async fn receiver() -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let h = hits.clone();
        let app = axum::Router::new().fallback(move || {
            let h = h.clone();
            async move {
                h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                "ok"
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (addr, hits)
    }

    #[tokio::test]
    async fn loopback_is_refused_unless_allow_listed_and_nothing_connects() {
        let (addr, hits) = receiver().await;
        let secrets = [Secret::generate()];
        let body = Bytes::from_static(b"{}");
        let msg = Message {
            id: "evt",
            event_type: "t",
            body: &body,
            attempt: 1,
        };
        let port = addr.port();
        for url in [
            format!("http://127.0.0.1:{port}/"),
            format!("http://localhost:{port}/"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            format!("http://0x7f.1:{port}/"),
            format!("http://2130706433:{port}/"),
            format!("http://0.0.0.0:{port}/"),
            format!("http://[::1]:{port}/"),
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "http://10.0.0.1/".to_string(),
        ] {
            let target = Target {
                url: &url,
                timeout: Duration::from_secs(2),
                secrets: &secrets,
                headers: &[],
            };
            let out = engine(&[]).deliver(target, msg).await;
            assert_eq!(out.class, ErrorClass::SsrfBlocked, "{url}: {:?}", out.error);
            assert_eq!(out.verdict, Verdict::Permanent);
            let host = reqwest::Url::parse(&url).unwrap().host_str().unwrap().to_string();
            assert_eq!(
                out.error.as_deref(),
                Some(format!("blocked_address: {host} is not an address deliveries may reach").as_str()),
                "{url}: a fixed reason naming the host as written, no resolved address or range"
            );
        }
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "no connection may reach the target"
        );

        let url = format!("http://127.0.0.1:{port}/");
        let target = Target {
            url: &url,
            timeout: Duration::from_secs(2),
            secrets: &secrets,
            headers: &[],
        };
        let out = engine(&["127.0.0.0/8"]).deliver(target, msg).await;
        assert_eq!(out.verdict, Verdict::Delivered, "{:?}", out.error);
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
