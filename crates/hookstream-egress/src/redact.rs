//! A form of an endpoint URL that is safe to log, to put in errors and dead-letter reasons,
//! and to store beside the sealed URL; and the removal of a URL from free text (a library's
//! error message).
//!
//! Endpoint URLs are often capabilities: Slack and Discord webhooks carry their token in the
//! path, others in the query, and anyone holding the URL can post to it. So the display form
//! `scheme://host[:port]/path[?query]` keeps the host, the port, readable path segments and
//! query keys, and hides the rest:
//!
//! - userinfo is removed and the fragment dropped;
//! - every query value becomes `***` (keys are kept unless they look like a token);
//! - every path segment that looks like a token becomes `***`.
//!
//! A segment (or query key, or scheme) looks like a token when it
//!
//! 1. contains a percent-encoded byte or `=`: encoded bytes are how binary and base64 secrets
//!    appear in a URL, and `=` is base64 padding or a `key=value` parameter;
//! 2. is 8+ characters mixing letters and digits (`T0000000`, a UUID, a hex digest);
//! 3. is 16+ characters, unless it is lowercase words of at most 15 letters joined by `-`,
//!    `_` or `.` (`order-created-events` stays; `XXXXXXXXXXXXXXXXXXXXXXXX`, a long number or
//!    `abcDEF-ghiJKL_mnoPQR` do not); or
//! 4. is 8+ characters with 3 or more lowercase-to-uppercase changes (`aBcDeFgH`), which
//!    words in camelCase rarely have.
//!
//! Short words and numbers (`webhooks`, `orders`, `v1`, `42`) stay readable. The heuristic
//! errs on the side of hiding: a false positive costs a `***` in a log line, a false negative
//! leaks a credential. What it can miss is a secret of fewer than 16 characters that is
//! letters only with little case mixing, or lowercase words joined by dashes.

use ::url::Url;

/// What [`redact`] returns for a string that does not parse as a URL.
pub const INVALID_URL: &str = "<invalid url>";

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// Secret parts shorter than this are not removed from free text: they are too short to be
/// secrets and too common to replace (`?v=1` would turn every `1` of a message into `***`).
const MIN_SECRET_LEN: usize = 4;

/// Whether `s` (a path segment, a query key, a scheme) looks like a token; see the module
/// documentation for the rules.
pub(crate) fn looks_like_token(s: &str) -> bool {
    if s.contains(['%', '=']) {
        return true;
    }
    let len = s.chars().count();
    let has_letter = s.chars().any(char::is_alphabetic);
    let has_digit = s.chars().any(|c| c.is_ascii_digit());
    if len >= 8 && has_letter && has_digit {
        return true;
    }
    if len >= 16 && !is_lowercase_words(s) {
        return true;
    }
    len >= 8 && case_changes(s) >= 3
}

fn is_lowercase_words(s: &str) -> bool {
    s.split(['-', '_', '.'])
        .all(|w| (1..=15).contains(&w.len()) && w.bytes().all(|b| b.is_ascii_lowercase()))
}

fn case_changes(s: &str) -> usize {
    s.chars()
        .zip(s.chars().skip(1))
        .filter(|(a, b)| a.is_lowercase() && b.is_uppercase())
        .count()
}

fn mask_token(s: &str) -> &str {
    if looks_like_token(s) {
        MASK
    } else {
        s
    }
}

/// The display form of `raw`: `scheme://host[:port]/path[?query]` without userinfo, fragment,
/// query values or token-looking path segments; [`INVALID_URL`] when `raw` does not parse.
pub fn redact(raw: &str) -> String {
    match Url::parse(raw) {
        Ok(url) => redact_url(&url),
        Err(_) => INVALID_URL.to_string(),
    }
}

fn redact_url(url: &Url) -> String {
    let scheme = mask_token(url.scheme());
    if url.cannot_be_a_base() {
        // `mailto:…`, `data:…`: no structure to keep.
        return format!("{scheme}:{MASK}");
    }
    let mut out = format!("{scheme}://{}", redact_host(url));
    if let Some(port) = url.port() {
        out.push(':');
        out.push_str(&port.to_string());
    }
    let path: Vec<&str> = url.path().split('/').map(mask_token).collect();
    out.push_str(&path.join("/"));
    if let Some(query) = url.query() {
        let items: Vec<String> = query
            .split('&')
            .map(|item| match item.split_once('=') {
                Some((key, _)) => format!("{}={MASK}", mask_token(key)),
                None => mask_token(item).to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&items.join("&"));
    }
    out
}

/// The host of `url` as it may be shown: an IP literal as it is, a domain name with every
/// label that looks like a token (`tok3n-abc123.hooks.example`: a receiver that puts its
/// secret in a subdomain) replaced by [`MASK`]. The tenant-facing form of a host (the
/// SSRF guard's refusal names it so).
pub fn redact_host(url: &Url) -> String {
    match url.host() {
        Some(::url::Host::Domain(domain)) => domain.split('.').map(mask_token).collect::<Vec<_>>().join("."),
        Some(_) => url.host_str().unwrap_or_default().to_string(),
        None => String::new(),
    }
}

/// `text` (an error message from a library, say) without the URL `url` in any form it may
/// take there: as given, as the URL parser serialises it (with and without its fragment), and
/// percent-decoded, each replaced by [`redact`]`(url)`; then without each secret part of it
/// (userinfo, query values, the fragment, token-looking path segments, query keys and pieces
/// of an unparseable input, raw and percent-decoded), each replaced by [`MASK`].
pub fn redact_text(text: &str, url: &str) -> String {
    let trimmed = url.trim();
    let mut whole = vec![url.to_string(), trimmed.to_string(), percent_decode(trimmed)];
    let mut parts = Vec::new();
    if let Ok(parsed) = Url::parse(url) {
        whole.push(parsed.as_str().to_string());
        whole.push(percent_decode(parsed.as_str()));
        let mut bare = parsed.clone();
        bare.set_fragment(None);
        whole.push(bare.as_str().to_string());
        whole.push(percent_decode(bare.as_str()));
        secret_parts(&parsed, &mut parts);
    }
    // The input as given may differ from the parser's form (case, encoding, backslashes), and
    // may not parse at all: its token-looking pieces are secrets too.
    for piece in trimmed.split(|c: char| c.is_whitespace() || "/\\?&=#@:;,".contains(c)) {
        if looks_like_token(piece) {
            push_decoded(&mut parts, piece);
        }
    }
    let out = replace_all(text.to_string(), whole, &redact(url));
    replace_all(out, parts, MASK)
}

fn secret_parts(url: &Url, parts: &mut Vec<String>) {
    push_decoded(parts, url.username());
    if let Some(password) = url.password() {
        push_decoded(parts, password);
    }
    if looks_like_token(url.scheme()) {
        parts.push(url.scheme().to_string());
    }
    if let Some(::url::Host::Domain(domain)) = url.host() {
        for label in domain.split('.').filter(|l| looks_like_token(l)) {
            parts.push(label.to_string());
        }
    }
    if let Some(segments) = url.path_segments() {
        for segment in segments.filter(|s| looks_like_token(s)) {
            push_decoded(parts, segment);
        }
    }
    if url.cannot_be_a_base() {
        push_decoded(parts, url.path());
    }
    if let Some(query) = url.query() {
        push_query_secrets(parts, query);
    }
    if let Some(fragment) = url.fragment() {
        // The display form drops the fragment, so all of it is secret.
        push_decoded(parts, fragment);
        push_query_secrets(parts, fragment);
    }
}

fn push_query_secrets(parts: &mut Vec<String>, query: &str) {
    for item in query.split('&') {
        match item.split_once('=') {
            Some((key, value)) => {
                if looks_like_token(key) {
                    push_decoded(parts, key);
                }
                push_decoded(parts, value);
                // form encoding: `+` is a space (and a sloppy decoder may replace it last)
                parts.push(percent_decode(&value.replace('+', " ")));
                parts.push(percent_decode(value).replace('+', " "));
            }
            None if looks_like_token(item) => push_decoded(parts, item),
            None => {}
        }
    }
}

/// Pushes `s` and its percent-decoded form.
fn push_decoded(parts: &mut Vec<String>, s: &str) {
    parts.push(s.to_string());
    parts.push(percent_decode(s));
}

/// Replaces every pattern (longest first, so a part of a longer one does not break it up)
/// by `with`, skipping patterns too short to be secrets.
fn replace_all(mut text: String, mut patterns: Vec<String>, with: &str) -> String {
    patterns.retain(|p| p.chars().count() >= MIN_SECRET_LEN);
    patterns.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    patterns.dedup();
    for pattern in &patterns {
        if text.contains(pattern.as_str()) {
            text = text.replace(pattern.as_str(), with);
        }
    }
    text
}

/// Decodes `%XX` sequences (invalid ones are kept as they are), lossily as UTF-8.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
        if bytes[i] == b'%' {
            if let (Some(hi), Some(lo)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
                // Two hex digits make at most 0xff.
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SLACK: &str = "https://hooks.slack.com/services/T0000000/B0000000/XXXXXXXXXXXXXXXXXXXXXXXX";
    const DISCORD: &str = "https://discord.com/api/webhooks/123456789012345678/abcDEF-ghiJKL_mnoPQR";

    #[test]
    fn capability_paths_are_hidden() {
        assert_eq!(redact(SLACK), "https://hooks.slack.com/services/***/***/***");
        assert_eq!(redact(DISCORD), "https://discord.com/api/webhooks/***/***");
        assert_eq!(
            redact("https://webhook.site/3f9a1c0e-2b7d-4c5a-9e8f-5d6c7b8a9f01"),
            "https://webhook.site/***"
        );
        assert_eq!(
            redact("https://example.com/h/abc%2Fdef%2Bghi/x"),
            "https://example.com/h/***/x"
        );
        assert_eq!(
            redact("https://example.com/h/aBcDeFgHi"),
            "https://example.com/h/***"
        );
    }

    // A receiver that puts its token in a subdomain: the label goes wherever the URL is
    // shown, the rest of the name stays.
    #[test]
    fn token_looking_host_labels_are_hidden() {
        let url = "https://tok3n-abc123.hooks.example/in";
        assert_eq!(redact(url), "https://***.hooks.example/in");
        assert_eq!(
            redact("https://a1b2c3d4e5f6a7b8.webhook.example.com/"),
            "https://***.webhook.example.com/"
        );
        for text in [
            format!("error sending request for url ({url})"),
            "dns error: failed to lookup address information for tok3n-abc123.hooks.example".into(),
            "tcp connect error: tok3n-abc123".into(),
        ] {
            let out = redact_text(&text, url);
            assert!(!out.contains("tok3n-abc123"), "{out}");
        }
        let host = |u: &str| redact_host(&Url::parse(u).unwrap());
        assert_eq!(host(url), "***.hooks.example");
        assert_eq!(host("http://10.0.0.1:8080/"), "10.0.0.1");
        assert_eq!(host("http://[::1]/"), "[::1]");
        // Ordinary names stay readable, short numbered ones too.
        for name in [
            "api.example.com",
            "hooks.slack.com",
            "api2.example.com",
            "hooks-prod.example.com",
        ] {
            assert_eq!(host(&format!("https://{name}/")), name);
        }
    }

    #[test]
    fn query_values_userinfo_and_fragment_are_hidden() {
        assert_eq!(
            redact("https://example.com/hook?token=abc&v=1&flag"),
            "https://example.com/hook?token=***&v=***&flag"
        );
        assert_eq!(
            redact("https://example.com/hook?sk9live9abcdefgh&x="),
            "https://example.com/hook?***&x=***"
        );
        assert_eq!(
            redact("https://user:hunter2@example.com:8443/hook#access_token=s3cr3t"),
            "https://example.com:8443/hook"
        );
        assert_eq!(redact("https://example.com:443/hook"), "https://example.com/hook");
    }

    #[test]
    fn ordinary_urls_stay_readable() {
        for raw in [
            "https://example.com/webhooks/orders",
            "https://api.example.com/v1/hooks/42",
            "https://example.com/",
            "http://127.0.0.1:8080/order-created-events/1234567",
            "https://[2606:4700::1111]/orderCreated",
        ] {
            assert_eq!(redact(raw), raw);
        }
        assert_eq!(redact("HTTPS://Example.COM/hooks"), "https://example.com/hooks");
    }

    #[test]
    fn unparseable_and_opaque_inputs() {
        assert_eq!(redact("not a url"), INVALID_URL);
        assert_eq!(redact(""), INVALID_URL);
        assert_eq!(redact("https://"), INVALID_URL);
        assert_eq!(redact("mailto:ops@example.com"), "mailto:***");
        assert_eq!(redact("sk9live9abcdefgh:x"), "***:***");
    }

    #[test]
    fn token_heuristic() {
        for token in [
            "T0000000",
            "B0000000",
            "XXXXXXXXXXXXXXXXXXXXXXXX",
            "123456789012345678",
            "abcDEF-ghiJKL_mnoPQR",
            "3f9a1c0e-2b7d-4c5a-9e8f-5d6c7b8a9f01",
            "a%20b",
            "c2VjcmV0==",
            "aBcDeFgH",
            "internationalization",
        ] {
            assert!(looks_like_token(token), "{token}");
        }
        for word in [
            "",
            "webhooks",
            "orders",
            "v1",
            "42",
            "1234567890",
            "2024-05-01",
            "order-created-events",
            "github_integration.v",
            "orderCreated",
            "OrderCreated",
            "services",
        ] {
            assert!(!looks_like_token(word), "{word}");
        }
    }

    #[test]
    fn text_loses_the_url_in_every_form() {
        let url = "https://user:hunter22@Example.com/hooks/T0KEN9path9secret/x?sig=a%2Bb%3Dc&token=qs9secret9token#frag9secret9abc";
        let parsed = Url::parse(url).unwrap();
        let safe = redact(url);
        assert_eq!(safe, "https://example.com/hooks/***/x?sig=***&token=***");
        for text in [
            format!("error sending request for url ({url}): connection refused"),
            format!("error sending request for url ({parsed}): connection refused"),
            format!("error for {}", percent_decode(url)),
            "request to /hooks/T0KEN9path9secret/x?sig=a+b=c failed".to_string(),
            "signature a b=c rejected, token qs9secret9token, fragment frag9secret9abc".to_string(),
            "auth user hunter22 failed".to_string(),
        ] {
            let out = redact_text(&text, url);
            for secret in [
                "hunter22",
                "T0KEN9path9secret",
                "a%2Bb%3Dc",
                "a+b=c",
                "a b=c",
                "qs9secret9token",
                "frag9secret9abc",
            ] {
                assert!(!out.contains(secret), "{secret} in {out:?}");
            }
        }
        assert_eq!(
            redact_text(&format!("error sending request for url ({parsed})"), url),
            format!("error sending request for url ({safe})")
        );
        assert_eq!(
            redact_text("connection refused (os error 111)", url),
            "connection refused (os error 111)"
        );
    }

    #[test]
    fn text_with_an_unparseable_url_loses_its_tokens() {
        let url = "htp:/ /example.com/hooks/T0KEN9path9secret";
        let out = redact_text(&format!("bad url {url}, token T0KEN9path9secret"), url);
        assert!(!out.contains("T0KEN9path9secret"), "{out}");
        assert_eq!(
            redact_text("short parts stay: v=1", "https://e.com/?v=1"),
            "short parts stay: v=1"
        );
    }

    proptest! {
        #[test]
        fn never_panics(raw in "\\PC{0,80}", text in "\\PC{0,80}") {
            let _ = redact(&raw);
            let _ = redact_text(&text, &raw);
            let _ = redact_text(&raw, &raw);
        }

        /// A secret anywhere a capability URL carries one never shows in the display form,
        /// nor in a message that quotes the URL.
        #[test]
        fn secrets_never_show(
            secret in "[A-Za-z]{2,6}[0-9][A-Za-z0-9_-]{9,30}",
            place in 0usize..5,
            path in "(/[a-z]{1,8}){0,3}",
        ) {
            let url = match place {
                0 => format!("https://example.com{path}/{secret}"),
                1 => format!("https://example.com{path}?token={secret}"),
                2 => format!("https://example.com{path}?a=1&{secret}"),
                3 => format!("https://user:{secret}@example.com{path}"),
                _ => format!("https://example.com{path}#{secret}"),
            };
            let safe = redact(&url);
            prop_assert!(!safe.contains(&secret), "{safe}");
            let text = format!("error sending request for url ({url}): boom {secret}");
            let out = redact_text(&text, &url);
            prop_assert!(!out.contains(&secret), "{out}");
            prop_assert_eq!(redact(&safe), safe.clone(), "the display form is stable");
        }
    }
}
