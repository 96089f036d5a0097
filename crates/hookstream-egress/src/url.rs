//! Whether a string may be an endpoint URL: the check made when an endpoint is stored and
//! again before every delivery.
//!
//! Only the URL itself is judged here. Host names are not resolved: the dispatcher checks the
//! addresses a name resolves to when it connects, so a name that later resolves elsewhere
//! (DNS rebinding) is still refused. IP-literal hosts never reach a resolver, so they are
//! judged here, in every notation the URL parser accepts (`0x7f.1`, `2130706433` and
//! `[::ffff:127.0.0.1]` all parse to the address they mean).
//!
//! No error message contains the URL, its path, query or userinfo: a URL may be a capability
//! (a token in the path or the query), and error messages reach logs and dead letters.

use std::net::IpAddr;

use ::url::{Host, Url};

use crate::policy::{AddressPolicy, Forbidden};
use crate::redact::looks_like_token;

/// The longest endpoint URL accepted, in bytes.
pub const MAX_URL_LEN: usize = 2048;

/// Why a string is not an acceptable endpoint URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("url is {len} bytes long, more than the {max} allowed")]
    TooLong { len: usize, max: usize },
    /// The parser's messages name what is wrong, never the input.
    #[error("invalid url: {0}")]
    Parse(#[from] ::url::ParseError),
    /// `scheme` is `***` when it looks like a secret (someone pasted a token).
    #[error("unsupported scheme {scheme:?}, only http and https are allowed")]
    Scheme { scheme: String },
    #[error("url has no host")]
    NoHost,
    #[error("url carries credentials (user:password@), which would be stored with it")]
    Credentials,
    #[error("destination address {ip} is forbidden: {reason}")]
    Forbidden { ip: IpAddr, reason: Forbidden },
}

/// Parses and checks an endpoint URL: `http` or `https`, a host, no userinfo, at most
/// [`MAX_URL_LEN`] bytes, and an IP-literal host only where `policy` permits it.
pub fn validate_endpoint_url(raw: &str, policy: &AddressPolicy) -> Result<Url, UrlError> {
    let too_long = |len: usize| UrlError::TooLong {
        len,
        max: MAX_URL_LEN,
    };
    if raw.len() > MAX_URL_LEN {
        return Err(too_long(raw.len()));
    }
    let url = Url::parse(raw)?;
    // Percent-encoding can make the stored form longer than the input.
    if url.as_str().len() > MAX_URL_LEN {
        return Err(too_long(url.as_str().len()));
    }
    let scheme = url.scheme();
    if !matches!(scheme, "http" | "https") {
        let scheme = if looks_like_token(scheme) { "***" } else { scheme };
        return Err(UrlError::Scheme {
            scheme: scheme.to_string(),
        });
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlError::Credentials);
    }
    let ip = match url.host() {
        Some(Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(Host::Ipv6(v6)) => IpAddr::V6(v6),
        Some(Host::Domain(d)) if !d.is_empty() => return Ok(url),
        Some(Host::Domain(_)) | None => return Err(UrlError::NoHost),
    };
    policy
        .check(ip)
        .map_err(|reason| UrlError::Forbidden { ip, reason })?;
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn loopback() -> AddressPolicy {
        AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()])
    }

    fn err(raw: &str) -> UrlError {
        validate_endpoint_url(raw, &AddressPolicy::default()).unwrap_err()
    }

    #[test]
    fn accepts_http_and_https_urls_with_a_host() {
        for raw in [
            "https://example.com/webhooks/orders",
            "http://example.com:8080/h?x=1",
            "https://api.example.com/v1/hooks/42#frag",
            "https://1.1.1.1/",
            "https://[2606:4700::1111]:8443/hook",
            "HTTPS://EXAMPLE.COM/Hook",
            "https://localhost/",
        ] {
            let url = validate_endpoint_url(raw, &AddressPolicy::default())
                .unwrap_or_else(|e| panic!("{raw}: {e}"));
            assert!(url.as_str().starts_with("http"), "{raw}");
        }
        assert!(validate_endpoint_url("http://127.0.0.1:9/", &loopback()).is_ok());
    }

    #[test]
    fn refuses_other_schemes_credentials_and_garbage() {
        assert!(matches!(err("ftp://example.com/x"), UrlError::Scheme { scheme } if scheme == "ftp"));
        assert!(matches!(err("file:///etc/passwd"), UrlError::Scheme { .. }));
        assert!(matches!(err("mailto:ops@example.com"), UrlError::Scheme { .. }));
        assert!(
            matches!(err("sk9live9secret9token:x"), UrlError::Scheme { scheme } if scheme == "***"),
            "a pasted token as scheme is not echoed"
        );
        assert_eq!(err("https://user:hunter2@example.com/"), UrlError::Credentials);
        assert_eq!(err("https://user@example.com/"), UrlError::Credentials);
        assert_eq!(err("https://:hunter2@example.com/"), UrlError::Credentials);
        assert!(matches!(err("example.com/hook"), UrlError::Parse(_)));
        assert!(matches!(err("https://"), UrlError::Parse(_)));
        assert!(matches!(err("http://exa mple.com/"), UrlError::Parse(_)));
        assert!(matches!(err(""), UrlError::Parse(_)));
    }

    #[test]
    fn refuses_urls_longer_than_the_limit() {
        let base = "https://example.com/";
        let fits = format!("{base}{}", "a".repeat(MAX_URL_LEN - base.len()));
        assert!(validate_endpoint_url(&fits, &AddressPolicy::default()).is_ok());
        let long = format!("{fits}a");
        assert_eq!(
            err(&long),
            UrlError::TooLong {
                len: MAX_URL_LEN + 1,
                max: MAX_URL_LEN
            }
        );
        // 1000 bytes that encode to 3000 when stored
        let encoded = format!("{base}{}", "é".repeat(500));
        assert!(encoded.len() < MAX_URL_LEN);
        assert!(matches!(err(&encoded), UrlError::TooLong { len, .. } if len > MAX_URL_LEN));
    }

    #[test]
    fn refuses_forbidden_ip_literals_in_every_notation() {
        for (raw, range) in [
            ("http://127.0.0.1/", "127.0.0.0/8 (loopback)"),
            ("http://0x7f.1/", "127.0.0.0/8 (loopback)"),
            ("http://0x7f.0.0.1:8080/", "127.0.0.0/8 (loopback)"),
            ("http://2130706433/", "127.0.0.0/8 (loopback)"),
            ("http://017700000001/", "127.0.0.0/8 (loopback)"),
            ("http://127.1/", "127.0.0.0/8 (loopback)"),
            ("http://[::ffff:127.0.0.1]/", "127.0.0.0/8 (loopback)"),
            ("http://[::ffff:7f00:1]/", "127.0.0.0/8 (loopback)"),
            (
                "http://[64:ff9b::a9fe:a9fe]/",
                "169.254.0.0/16 (link-local, cloud metadata)",
            ),
            (
                "http://169.254.169.254/latest/meta-data/",
                "169.254.0.0/16 (link-local, cloud metadata)",
            ),
            ("http://0.0.0.0/", "0.0.0.0/32 (this host on this network)"),
            ("http://0/", "0.0.0.0/32 (this host on this network)"),
            ("http://[::1]/", "::1/128 (loopback)"),
            ("http://[::]/", "::/128 (unspecified)"),
            ("http://[fd00:ec2::254]/", "fc00::/7 (unique-local)"),
            ("http://10.0.0.1/", "10.0.0.0/8 (private-use)"),
        ] {
            match err(raw) {
                UrlError::Forbidden { reason, .. } => assert_eq!(reason.range.label, range, "{raw}"),
                other => panic!("{raw}: {other}"),
            }
        }
        let e = err("http://0x7f.1/path/T0KEN9secret9abc?sig=S3CRET9value");
        assert_eq!(
            e.to_string(),
            "destination address 127.0.0.1 is forbidden: 127.0.0.0/8 (loopback)"
        );
    }

    #[test]
    fn the_allow_list_admits_literals_and_their_mapped_form() {
        for raw in [
            "http://127.0.0.1:1/",
            "http://0x7f.1/",
            "http://[::ffff:127.0.0.1]/",
        ] {
            assert!(validate_endpoint_url(raw, &loopback()).is_ok(), "{raw}");
        }
        assert!(validate_endpoint_url("http://[::1]/", &loopback()).is_err());
    }

    proptest! {
        /// Whatever the input, the answer is a value (no panic) and no error message repeats
        /// the secret parts of the input.
        #[test]
        fn errors_never_repeat_secret_parts(
            scheme in "(https?|ftp|ws|[a-z][a-z0-9+.-]{0,12})",
            userinfo in proptest::option::of("[a-z]{1,6}(:9[A-Za-z0-9]{5,10})?"),
            host in "(example\\.com|127\\.0\\.0\\.1|0x7f\\.1|\\[::1\\]|10\\.1\\.2\\.3|2130706433|)",
            secret in "[A-Za-z0-9]{12,24}",
            tail in "[/?=&#a-z]{0,8}",
        ) {
            let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
            let raw = format!("{scheme}://{userinfo}{host}/hooks/{secret}?token={secret}{tail}");
            if let Err(e) = validate_endpoint_url(&raw, &AddressPolicy::default()) {
                let text = e.to_string();
                prop_assert!(!text.contains(&secret), "{text}");
                prop_assert!(!text.contains(&raw), "{text}");
                if let Some(password) = raw.split_once("://").and_then(|(_, r)| r.split_once('@')).and_then(|(u, _)| u.split_once(':')).map(|(_, p)| p) {
                    prop_assert!(!text.contains(password), "{text}");
                }
            }
        }

        #[test]
        fn never_panics(raw in "\\PC{0,64}") {
            let _ = validate_endpoint_url(&raw, &AddressPolicy::default());
        }
    }
}
