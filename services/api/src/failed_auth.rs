//! Failed authentications, throttled per client address: the API's bearer tokens and the
//! portal's login links and session cookies.
//!
//! Each failure from an address takes one cell of its budget (`api.auth_failures`: a
//! sustained rate per minute and a burst, governor). The failure that finds the budget empty
//! is answered 429 instead of 401, and the address is *blocked* until a cell is back: while
//! blocked, a request from it whose credential would need a database lookup is answered 429
//! at once, without the lookup. Credentials that need none (an operator token, a tenant key
//! already in the cache as valid) still pass, so a client sharing an address with a flood
//! (a NAT, an office) keeps working with the keys it already used.
//!
//! The address is the TCP peer, or the last entry of `api.auth_failures.client_address_header`
//! when the API runs behind a proxy that sets it (`X-Forwarded-For`: the last entry is the one
//! the nearest proxy added). IPv6 addresses count per /64, what one host is usually given.
//! Blocked addresses are kept in a bounded LRU (`MAX_BLOCKED`); the budgets' own state is
//! dropped for addresses idle long enough to be full again (`tidy`, every few seconds).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use axum::http::HeaderName;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use hashlink::LruCache;

use crate::config::AuthFailureSettings;
use crate::metrics::ApiMetrics;

/// Most blocked addresses remembered at once; past it the least recently refused is
/// forgotten (and must spend a burst again before it is blocked again).
pub const MAX_BLOCKED: usize = 100_000;

/// The config key named in the 429.
pub const LIMIT_KEY: &str = "api.auth_failures.per_address_per_min";

/// An address as it is throttled: IPv4 whole, IPv6 by its /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Client(IpAddr);

impl Client {
    pub fn new(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Client(IpAddr::V4(v4)),
                None => {
                    let s = v6.segments();
                    Client(IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0)))
                }
            },
            v4 => Client(v4),
        }
    }
}

/// The per-address budgets of failed authentications.
pub struct FailedAuth {
    limiter: Option<DefaultKeyedRateLimiter<Client>>,
    blocked: Mutex<LruCache<Client, Instant>>,
    header: Option<HeaderName>,
    metrics: ApiMetrics,
}

impl FailedAuth {
    /// `cfg` is validated (`client_address_header` a header name).
    pub fn new(cfg: &AuthFailureSettings, metrics: ApiMetrics) -> Self {
        let limiter = NonZeroU32::new(cfg.per_address_per_min).map(|rate| {
            let burst = NonZeroU32::new(cfg.burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_minute(rate).allow_burst(burst))
        });
        let header = (!cfg.client_address_header.is_empty())
            .then(|| HeaderName::try_from(cfg.client_address_header.as_str()).ok())
            .flatten();
        Self {
            limiter,
            blocked: Mutex::new(LruCache::new(MAX_BLOCKED)),
            header,
            metrics,
        }
    }

    /// The client of a request: the configured header's last address, else the TCP peer.
    /// None when neither is known (a request handed to the router in-process).
    pub fn client(&self, parts: &Parts) -> Option<Client> {
        if let Some(name) = &self.header {
            let last = parts
                .headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .filter_map(|s| parse_address(s.trim()))
                .next_back();
            if let Some(ip) = last {
                return Some(Client::new(ip));
            }
        }
        parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| Client::new(peer.ip()))
    }

    /// How long `client` is still blocked, if it is.
    pub fn blocked(&self, client: Option<Client>) -> Option<Duration> {
        let client = client?;
        self.limiter.as_ref()?;
        let mut blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
        let until = *blocked.peek(&client)?;
        let now = Instant::now();
        if until > now {
            self.metrics.auth_throttled.inc();
            Some(until - now)
        } else {
            blocked.remove(&client);
            None
        }
    }

    /// Records a failed authentication from `client`: `Some(wait)` when it was over the
    /// budget (answer 429; the address is blocked for `wait`), `None` otherwise (answer 401).
    pub fn failed(&self, client: Option<Client>) -> Option<Duration> {
        self.metrics.auth_failures.inc();
        let (client, limiter) = (client?, self.limiter.as_ref()?);
        let not_until = limiter.check_key(&client).err()?;
        let wait = not_until.wait_time_from(DefaultClock::default().now());
        self.blocked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(client, Instant::now() + wait);
        self.metrics.auth_throttled.inc();
        tracing::warn!(client = ?client.0, wait = ?wait, "failed authentications over the budget: address blocked");
        Some(wait)
    }

    /// Drops the budgets of addresses idle long enough to be full again.
    pub fn tidy(&self) {
        if let Some(l) = &self.limiter {
            l.retain_recent();
        }
    }
}

/// The client address of a request, as the throttle sees it (for handlers that
/// authenticate by something other than a bearer token: the portal's links and sessions).
pub struct ClientAddress(pub Option<Client>);

impl axum::extract::FromRequestParts<crate::AppState> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &crate::AppState) -> Result<Self, Self::Rejection> {
        Ok(ClientAddress(state.auth.failures.client(parts)))
    }
}

/// An address as a proxy header carries it: `1.2.3.4`, `1.2.3.4:5678`, `::1`, `[::1]:5678`.
fn parse_address(s: &str) -> Option<IpAddr> {
    s.parse::<IpAddr>()
        .ok()
        .or_else(|| s.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookstream_telemetry::prometheus::Registry;

    fn throttle(per_min: u32, burst: u32, header: &str) -> FailedAuth {
        let cfg = AuthFailureSettings {
            per_address_per_min: per_min,
            burst,
            client_address_header: header.into(),
        };
        FailedAuth::new(&cfg, ApiMetrics::register(&Registry::new()))
    }

    fn parts(headers: &[(&str, &str)], peer: Option<&str>) -> Parts {
        let mut b = axum::http::Request::builder();
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let (mut parts, ()) = b.body(()).unwrap().into_parts();
        if let Some(p) = peer {
            parts
                .extensions
                .insert(ConnectInfo(p.parse::<SocketAddr>().unwrap()));
        }
        parts
    }

    #[test]
    fn the_burst_is_spent_then_the_address_is_blocked_and_others_are_not() {
        let t = throttle(6, 3, "");
        let a = Some(Client::new("10.0.0.1".parse().unwrap()));
        let b = Some(Client::new("10.0.0.2".parse().unwrap()));
        for _ in 0..3 {
            assert_eq!(t.blocked(a), None);
            assert_eq!(t.failed(a), None);
        }
        let wait = t.failed(a).expect("the fourth failure is over the burst");
        // 6 a minute: a cell every 10 s.
        assert!(
            wait > Duration::from_secs(8) && wait <= Duration::from_secs(10),
            "{wait:?}"
        );
        assert!(t.blocked(a).is_some());
        assert_eq!(t.blocked(b), None);
        assert_eq!(t.failed(b), None);
    }

    #[test]
    fn off_and_unknown_clients_are_never_blocked() {
        let off = throttle(0, 0, "");
        let a = Some(Client::new("10.0.0.1".parse().unwrap()));
        for _ in 0..100 {
            assert_eq!(off.failed(a), None);
        }
        let on = throttle(1, 1, "");
        for _ in 0..100 {
            assert_eq!(on.failed(None), None);
        }
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let c = |s: &str| Client::new(s.parse().unwrap());
        assert_eq!(c("2001:db8:1:2:aaaa::1"), c("2001:db8:1:2:bbbb::2"));
        assert_ne!(c("2001:db8:1:2::1"), c("2001:db8:1:3::1"));
        assert_eq!(c("::ffff:10.0.0.1"), c("10.0.0.1"));
    }

    #[test]
    fn the_client_is_the_last_proxy_entry_when_configured_else_the_peer() {
        let behind = throttle(1, 1, "x-forwarded-for");
        let p = parts(
            &[
                ("x-forwarded-for", "203.0.113.9, 198.51.100.7"),
                ("x-forwarded-for", "192.0.2.1:443"),
            ],
            Some("127.0.0.1:5000"),
        );
        assert_eq!(behind.client(&p), Some(Client::new("192.0.2.1".parse().unwrap())));
        // A header that says nothing usable: the peer.
        let p = parts(&[("x-forwarded-for", "unknown")], Some("127.0.0.1:5000"));
        assert_eq!(behind.client(&p), Some(Client::new("127.0.0.1".parse().unwrap())));
        // Not configured: the header is a client's claim, ignored.
        let direct = throttle(1, 1, "");
        let p = parts(&[("x-forwarded-for", "203.0.113.9")], Some("[::1]:5000"));
        assert_eq!(direct.client(&p), Some(Client::new("::1".parse().unwrap())));
        assert_eq!(direct.client(&parts(&[], None)), None);
    }
}
