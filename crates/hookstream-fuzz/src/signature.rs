//! `signature`: the `webhook-signature` parser and verifier, and secret parsing.
//!
//! Input: `now` (8 bytes, little-endian Unix seconds), then `\n`-separated fields
//! `webhook-id`, `webhook-timestamp`, `webhook-signature`, a secret text, then the body.

use hookstream_signing::{signature_header, verify, Secret, VerifyError, HEADER_ID};

use crate::input::Input;

/// The receiver's tolerance (the default of the specification).
const TOLERANCE: i64 = hookstream_signing::DEFAULT_TOLERANCE_SECS;
/// A fixed, valid secret (24 bytes), so runs are reproducible.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

pub fn signature(data: &[u8]) {
    let mut input = Input::new(data);
    let now = input.i64();
    let id = input.text_field();
    let timestamp = input.text_field();
    let header = input.text_field();
    let secret_text = input.text_field();
    let body = input.rest();
    let secret = Secret::parse(SECRET).expect("the fixed secret is valid");

    // Whatever the headers say: an answer, never a panic.
    let _ = verify(&secret, &id, &timestamp, &header, body, now, TOLERANCE);

    let other = Secret::parse(&secret_text).ok();
    if let Some(other) = &other {
        assert_eq!(
            Secret::parse(&other.expose()).as_ref(),
            Ok(other),
            "a parsed secret round-trips through its `whsec_` form"
        );
        let _ = verify(other, &id, &timestamp, &header, body, now, TOLERANCE);
    }

    // What we sign verifies, with any of the secrets it was signed with, at the timestamp
    // the header carries (as sent: `verify` parses it the same way), and not with another
    // body or outside the tolerance.
    let parsed = timestamp.trim().parse::<i64>().ok();
    let stamp = parsed.unwrap_or(now);
    let signers: Vec<&Secret> = std::iter::once(&secret).chain(other.as_ref()).collect();
    let signed = signature_header(signers.iter().copied(), &id, stamp, body);
    let sent = if parsed.is_some() {
        timestamp.to_string()
    } else {
        stamp.to_string()
    };
    let expected = if id.is_empty() {
        Err(VerifyError::BadHeader(HEADER_ID))
    } else {
        Ok(())
    };
    for signer in &signers {
        assert_eq!(
            verify(signer, &id, &sent, &signed, body, stamp, TOLERANCE),
            expected,
            "our own signature verifies"
        );
    }
    if id.is_empty() {
        return;
    }
    if let Some(edge) = stamp.checked_add(TOLERANCE) {
        assert_eq!(
            verify(&secret, &id, &sent, &signed, body, edge, TOLERANCE),
            Ok(()),
            "the tolerance is inclusive"
        );
    }
    for late in [stamp.checked_add(TOLERANCE + 1), stamp.checked_sub(TOLERANCE + 1)]
        .into_iter()
        .flatten()
    {
        assert_eq!(
            verify(&secret, &id, &sent, &signed, body, late, TOLERANCE),
            Err(VerifyError::StaleTimestamp)
        );
    }
    let mut tampered = body.to_vec();
    tampered.push(b'!');
    assert_eq!(
        verify(&secret, &id, &sent, &signed, &tampered, stamp, TOLERANCE),
        Err(VerifyError::NoMatch),
        "another body does not verify"
    );
}
