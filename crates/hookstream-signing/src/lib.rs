//! Standard Webhooks v1 signing and verification.
//!
//! The signed content is `"{id}.{timestamp}.{body}"` over the exact body bytes, HMAC-SHA256
//! keyed by the decoded secret. `webhook-signature` carries one `v1,<base64>` entry per
//! active secret, space separated, so receivers keep working through a secret rotation.
//! Secrets are `whsec_` + base64 of 24 to 64 random bytes.
//!
//! Verification costs one HMAC over the body per secret the receiver holds, never per entry
//! of the header: a header longer than [`MAX_SIGNATURE_HEADER_BYTES`] or with more than
//! [`MAX_SIGNATURE_ENTRIES`] `v1` entries is refused before any HMAC.

#![forbid(unsafe_code)]

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::digest::CtOutput;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Header carrying the event id (stable across retries and replays).
pub const HEADER_ID: &str = "webhook-id";
/// Header carrying the signing time in Unix seconds.
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// Header carrying the space-separated `v1,<base64>` signatures.
pub const HEADER_SIGNATURE: &str = "webhook-signature";
/// Receivers accept timestamps this far from their own clock, in seconds.
pub const DEFAULT_TOLERANCE_SECS: i64 = 5 * 60;

/// Longest `webhook-signature` value verified, in bytes. A Standard Webhooks `v1` entry is
/// 47 bytes; this is room for [`MAX_SIGNATURE_ENTRIES`] of them and other schemes' entries
/// (an ed25519 `v1a` is 92). A longer header is refused before anything is decoded or MACed.
pub const MAX_SIGNATURE_HEADER_BYTES: usize = 4096;
/// Most `v1` entries compared in one `webhook-signature`: one per secret the sender signs
/// with during a rotation (Hookstream sends at most 3). More is refused, not truncated.
pub const MAX_SIGNATURE_ENTRIES: usize = 16;

const PREFIX: &str = "whsec_";
const MIN_KEY_LEN: usize = 24;
const MAX_KEY_LEN: usize = 64;
const GENERATED_KEY_LEN: usize = 32;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("secret must start with `whsec_`")]
    MissingPrefix,
    #[error("secret is not valid base64")]
    NotBase64,
    #[error("secret key must be {MIN_KEY_LEN} to {MAX_KEY_LEN} bytes, got {0}")]
    BadLength(usize),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("missing or malformed `{0}` header")]
    BadHeader(&'static str),
    #[error("timestamp outside the tolerance window")]
    StaleTimestamp,
    #[error("no signature matches")]
    NoMatch,
    /// The `webhook-signature` value is longer than [`MAX_SIGNATURE_HEADER_BYTES`].
    #[error("`webhook-signature` header is {0} bytes, more than the {MAX_SIGNATURE_HEADER_BYTES} accepted")]
    SignatureHeaderTooLong(usize),
    /// The `webhook-signature` value has more than [`MAX_SIGNATURE_ENTRIES`] `v1` entries.
    #[error("`webhook-signature` header has more than {MAX_SIGNATURE_ENTRIES} `v1` signatures")]
    TooManySignatures,
}

/// A signing secret. `Debug` never prints the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    key: Vec<u8>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Secret {
    /// A new random secret (32 bytes).
    pub fn generate() -> Self {
        let mut key = vec![0u8; GENERATED_KEY_LEN];
        rand::rngs::OsRng.fill_bytes(&mut key);
        Self { key }
    }

    /// Parses `whsec_<base64>`.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let b64 = text
            .trim()
            .strip_prefix(PREFIX)
            .ok_or(SecretError::MissingPrefix)?;
        let key = B64.decode(b64).map_err(|_| SecretError::NotBase64)?;
        if !(MIN_KEY_LEN..=MAX_KEY_LEN).contains(&key.len()) {
            return Err(SecretError::BadLength(key.len()));
        }
        Ok(Self { key })
    }

    /// The `whsec_...` form, for showing once to the endpoint's owner and for storage.
    pub fn expose(&self) -> String {
        format!("{PREFIX}{}", B64.encode(&self.key))
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
        #[cfg(test)]
        tests::MACS.with(|n| n.set(n.get() + 1));
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("hmac takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// The base64 HMAC of one message.
    pub fn sign_one(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        B64.encode(self.mac(id, timestamp, body).finalize().into_bytes())
    }
}

/// The `webhook-signature` value: one `v1,<sig>` per secret, space separated.
pub fn signature_header<'a>(
    secrets: impl IntoIterator<Item = &'a Secret>,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    let mut out = String::new();
    for secret in secrets {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str("v1,");
        out.push_str(&secret.sign_one(id, timestamp, body));
    }
    out
}

/// Verifies a delivery the way a receiver must: timestamp within `tolerance_secs` of `now`,
/// and at least one `v1` signature equal (in constant time) to ours. [`verify_any`] with
/// one secret.
pub fn verify(
    secret: &Secret,
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now_unix: i64,
    tolerance_secs: i64,
) -> Result<(), VerifyError> {
    verify_any(
        std::slice::from_ref(secret),
        id,
        timestamp,
        signatures,
        body,
        now_unix,
        tolerance_secs,
    )
}

/// Verifies a delivery against any of `secrets` (a rotation): the headers are checked and
/// `signatures` parsed once ([`parse_signatures`], refused over its limits before any HMAC),
/// then the body is MACed once per secret and each MAC compared in constant time with every
/// entry. The work is one pass over the body per secret, whatever the header carries.
pub fn verify_any(
    secrets: &[Secret],
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now_unix: i64,
    tolerance_secs: i64,
) -> Result<(), VerifyError> {
    if id.is_empty() {
        return Err(VerifyError::BadHeader(HEADER_ID));
    }
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::BadHeader(HEADER_TIMESTAMP))?;
    // `abs_diff` cannot overflow, whatever the header says (`(now - ts).abs()` did for
    // timestamps near `i64::MIN`/`i64::MAX`); a negative tolerance accepts nothing.
    let within = u64::try_from(tolerance_secs).is_ok_and(|tol| now_unix.abs_diff(ts) <= tol);
    if !within {
        return Err(VerifyError::StaleTimestamp);
    }
    let entries = parse_signatures(signatures)?;
    for secret in secrets {
        // `CtOutput`'s equality is constant time.
        let ours = secret.mac(id, ts, body).finalize();
        if entries
            .iter()
            .any(|theirs| ours == CtOutput::new((*theirs).into()))
        {
            return Ok(());
        }
    }
    Err(VerifyError::NoMatch)
}

/// The decoded `v1` signatures of a `webhook-signature` value, without any HMAC: refused
/// when longer than [`MAX_SIGNATURE_HEADER_BYTES`] (before it is even split) or with more
/// than [`MAX_SIGNATURE_ENTRIES`] `v1` entries, and `BadHeader` without any. Entries of
/// other schemes are skipped; `v1` entries that are not base64 of 32 bytes are counted but
/// dropped, since they can match nothing.
pub fn parse_signatures(signatures: &str) -> Result<Vec<[u8; 32]>, VerifyError> {
    if signatures.len() > MAX_SIGNATURE_HEADER_BYTES {
        return Err(VerifyError::SignatureHeaderTooLong(signatures.len()));
    }
    let mut v1 = 0;
    let mut decoded = Vec::new();
    for entry in signatures.split_whitespace() {
        let Some(sig) = entry.strip_prefix("v1,") else {
            continue;
        };
        v1 += 1;
        if v1 > MAX_SIGNATURE_ENTRIES {
            return Err(VerifyError::TooManySignatures);
        }
        if let Some(raw) = B64
            .decode(sig)
            .ok()
            .and_then(|raw| <[u8; 32]>::try_from(raw).ok())
        {
            decoded.push(raw);
        }
    }
    if v1 == 0 {
        return Err(VerifyError::BadHeader(HEADER_SIGNATURE));
    }
    Ok(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// HMACs computed on this thread (each test runs on its own): the work a request costs.
        pub(super) static MACS: Cell<usize> = const { Cell::new(0) };
    }

    /// Runs `f` and returns what it returned and how many HMACs it computed.
    fn counting_macs<T>(f: impl FnOnce() -> T) -> (T, usize) {
        MACS.with(|n| n.set(0));
        let out = f();
        (out, MACS.with(Cell::get))
    }

    /// `n` well-formed `v1` entries that match nothing.
    fn decoys(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("v1,{}", B64.encode([i as u8; 32])))
            .collect()
    }

    // A sender's thousands of entries cost nothing but the refusal: no HMAC over the body.
    #[test]
    fn headers_over_the_limits_are_refused_before_any_mac() {
        let s = Secret::generate();
        let body = vec![b'x'; 1 << 20];
        let many = decoys(10_000).join(" ");
        let (got, macs) = counting_macs(|| verify(&s, "id", "10", &many, &body, 10, 300));
        assert_eq!(got, Err(VerifyError::SignatureHeaderTooLong(many.len())));
        assert_eq!(macs, 0);
        assert!(got.unwrap_err().to_string().contains("4096"));

        // Within the byte limit but over the entry count: short entries, still refused.
        let short = vec!["v1,AAAA"; MAX_SIGNATURE_ENTRIES + 1].join(" ");
        assert!(short.len() <= MAX_SIGNATURE_HEADER_BYTES);
        let (got, macs) = counting_macs(|| verify(&s, "id", "10", &short, &body, 10, 300));
        assert_eq!(got, Err(VerifyError::TooManySignatures));
        assert_eq!(macs, 0);

        // Exactly at the byte limit is accepted (padding other schemes' entries is not v1).
        let mut at = signature_header([&s], "id", 10, b"{}");
        while at.len() < MAX_SIGNATURE_HEADER_BYTES {
            at.push(' ');
        }
        verify(&s, "id", "10", &at, b"{}", 10, 300).unwrap();
        at.push('x');
        assert_eq!(
            verify(&s, "id", "10", &at, b"{}", 10, 300),
            Err(VerifyError::SignatureHeaderTooLong(
                MAX_SIGNATURE_HEADER_BYTES + 1
            ))
        );
    }

    // The body is MACed once per secret, however many entries the header carries: with the
    // old loop, a header of 16 entries cost 16 passes over a 1 MiB body.
    #[test]
    fn one_mac_per_secret_whatever_the_entries() {
        let s = Secret::generate();
        let body = vec![b'x'; 1 << 20];
        let header = decoys(MAX_SIGNATURE_ENTRIES).join(" ");
        let (got, macs) = counting_macs(|| verify(&s, "id", "10", &header, &body, 10, 300));
        assert_eq!(got, Err(VerifyError::NoMatch));
        assert_eq!(macs, 1);
    }

    #[test]
    fn a_valid_signature_verifies_at_any_position_within_the_cap() {
        let s = Secret::generate();
        let body = br#"{"a":1}"#;
        let good = signature_header([&s], "id", 10, body);
        for at in 0..MAX_SIGNATURE_ENTRIES {
            // A `v1` that is not base64 counts towards the cap (and matches nothing)...
            let mut entries = decoys(MAX_SIGNATURE_ENTRIES - 2);
            entries.push("v1,not-base64!".into());
            entries.insert(at, good.clone());
            // ...another scheme's entry does not.
            entries.push("v1a,c2lnbmF0dXJl".into());
            let header = entries.join(" ");
            let (got, macs) = counting_macs(|| verify(&s, "id", "10", &header, body, 10, 300));
            assert_eq!(got, Ok(()), "at {at}");
            assert_eq!(macs, 1);
        }
    }

    // The example from the Standard Webhooks specification.
    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TS: i64 = 1614265330;
    const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SPEC_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn matches_the_specification_example() {
        let secret = Secret::parse(SPEC_SECRET).unwrap();
        assert_eq!(signature_header([&secret], SPEC_ID, SPEC_TS, SPEC_BODY), SPEC_SIG);
        verify(
            &secret,
            SPEC_ID,
            &SPEC_TS.to_string(),
            SPEC_SIG,
            SPEC_BODY,
            SPEC_TS,
            300,
        )
        .unwrap();
    }

    #[test]
    fn agrees_with_the_standardwebhooks_crate() {
        let secret = Secret::generate();
        let body = br#"{"order":{"id":42,"total":"9.99"}}"#;
        let ts = 1_700_000_000;
        let header = signature_header([&secret], "evt_1", ts, body);
        let theirs = standardwebhooks::Webhook::new(&secret.expose()).unwrap();
        assert_eq!(theirs.sign("evt_1", ts, body).unwrap(), header);
    }

    #[test]
    fn rotation_sends_one_signature_per_secret_and_either_verifies() {
        let old = Secret::generate();
        let new = Secret::generate();
        let header = signature_header([&old, &new], "id", 10, b"{}");
        assert_eq!(header.split(' ').count(), 2);
        verify(&old, "id", "10", &header, b"{}", 10, 300).unwrap();
        verify(&new, "id", "10", &header, b"{}", 10, 300).unwrap();
        let other = Secret::generate();
        assert_eq!(
            verify(&other, "id", "10", &header, b"{}", 10, 300),
            Err(VerifyError::NoMatch)
        );
    }

    #[test]
    fn rejects_tampering_and_stale_timestamps() {
        let s = Secret::generate();
        let header = signature_header([&s], "id", 1000, b"{\"a\":1}");
        assert_eq!(
            verify(&s, "id", "1000", &header, b"{\"a\":2}", 1000, 300),
            Err(VerifyError::NoMatch)
        );
        assert_eq!(
            verify(&s, "id2", "1000", &header, b"{\"a\":1}", 1000, 300),
            Err(VerifyError::NoMatch)
        );
        assert_eq!(
            verify(&s, "id", "1000", &header, b"{\"a\":1}", 1000 + 301, 300),
            Err(VerifyError::StaleTimestamp)
        );
        assert_eq!(
            verify(&s, "id", "x", &header, b"{\"a\":1}", 1000, 300),
            Err(VerifyError::BadHeader(HEADER_TIMESTAMP))
        );
        assert_eq!(
            verify(&s, "id", "1000", "v2,abc", b"{\"a\":1}", 1000, 300),
            Err(VerifyError::BadHeader(HEADER_SIGNATURE))
        );
    }

    // `(now - ts).abs()` overflowed (a panic in debug builds, a wrong answer in release) for
    // timestamps at the ends of `i64`; `fuzz/regressions/signature/` keeps the input.
    #[test]
    fn extreme_timestamps_are_stale_not_a_panic() {
        let s = Secret::generate();
        let min = i64::MIN.to_string();
        let max = i64::MAX.to_string();
        for (ts, now) in [
            (min.as_str(), 1_700_000_000),
            (max.as_str(), -1),
            (min.as_str(), i64::MAX),
            (max.as_str(), i64::MIN),
            ("-9223372036854775808", 0),
        ] {
            assert_eq!(
                verify(&s, "id", ts, "v1,AAAA", b"{}", now, DEFAULT_TOLERANCE_SECS),
                Err(VerifyError::StaleTimestamp),
                "ts {ts}, now {now}"
            );
        }
        assert_eq!(
            verify(&s, "id", "99999999999999999999", "v1,AAAA", b"{}", 0, 300),
            Err(VerifyError::BadHeader(HEADER_TIMESTAMP)),
            "beyond i64 is malformed"
        );
        // The extremes themselves still verify when they are within tolerance.
        let header = signature_header([&s], "id", i64::MIN, b"{}");
        verify(&s, "id", &min, &header, b"{}", i64::MIN, 0).unwrap();
        let header = signature_header([&s], "id", i64::MAX, b"{}");
        verify(&s, "id", &max, &header, b"{}", i64::MAX - 300, 300).unwrap();
        // A negative tolerance accepts nothing.
        let header = signature_header([&s], "id", 10, b"{}");
        assert_eq!(
            verify(&s, "id", "10", &header, b"{}", 10, -1),
            Err(VerifyError::StaleTimestamp)
        );
    }

    #[test]
    fn secret_parsing_is_strict_and_debug_redacts() {
        assert_eq!(Secret::parse("abc"), Err(SecretError::MissingPrefix));
        assert_eq!(Secret::parse("whsec_!!"), Err(SecretError::NotBase64));
        assert_eq!(Secret::parse("whsec_YWJj"), Err(SecretError::BadLength(3)));
        let s = Secret::generate();
        assert_eq!(Secret::parse(&s.expose()).unwrap(), s);
        assert!(!format!("{s:?}").contains(&s.expose()[6..]));
    }
}
