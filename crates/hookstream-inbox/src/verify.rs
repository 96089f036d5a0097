//! Verification of one request, before anything is stored: the body within its limit (413),
//! then the Standard Webhooks signature with any of the route's secrets (401). The
//! cryptography is `hookstream-signing`'s `verify` (the signed content `id.timestamp.body`,
//! the ± tolerance, the constant-time comparison), the same code Hookstream's own `listen`
//! uses; this module adds what a receiver needs around it: several secrets during a
//! rotation, swapped at run time, a body limit, and answers a sender understands.
//!
//! [`VerifiedWebhook`] is the axum extractor for applications that want the verified
//! delivery and to store it themselves; [`crate::Receiver`] uses the same [`Verifier`].

use std::sync::{Arc, RwLock};

use axum::body::{Body, Bytes};
use axum::extract::{FromRef, FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use hookstream_signing::{Secret, VerifyError, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP};

/// The header Hookstream names the event type in.
pub const HEADER_EVENT_TYPE: &str = "hookstream-event-type";

/// Why a request was refused, and the answer it gets. The body of the answer names the
/// problem (a header, the limit), never a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// 413: the body is larger than the route accepts.
    #[error("body larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// 400: the body could not be read (the client went away mid-body).
    #[error("cannot read the body: {0}")]
    Unreadable(String),
    /// 401: a header is missing or malformed.
    #[error("missing or malformed `{0}` header")]
    BadHeader(&'static str),
    /// 401: `webhook-timestamp` is too far from this clock.
    #[error("`webhook-timestamp` outside the tolerance window")]
    StaleTimestamp,
    /// 401: no signature matches any of the route's secrets.
    #[error("no signature matches")]
    BadSignature,
    /// 401: `webhook-signature` is longer, or has more `v1` entries, than is verified
    /// (`hookstream_signing::MAX_SIGNATURE_HEADER_BYTES`, `MAX_SIGNATURE_ENTRIES`). Refused
    /// before any HMAC: no sender needs more, and each entry would cost a comparison.
    #[error("{0}")]
    OversizedSignature(String),
}

impl From<VerifyError> for Rejection {
    fn from(e: VerifyError) -> Self {
        match e {
            VerifyError::BadHeader(h) => Rejection::BadHeader(h),
            VerifyError::StaleTimestamp => Rejection::StaleTimestamp,
            VerifyError::NoMatch => Rejection::BadSignature,
            VerifyError::SignatureHeaderTooLong(_) | VerifyError::TooManySignatures => {
                Rejection::OversizedSignature(e.to_string())
            }
        }
    }
}

impl Rejection {
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::Unreadable(_) => StatusCode::BAD_REQUEST,
            Rejection::BadHeader(_)
            | Rejection::StaleTimestamp
            | Rejection::BadSignature
            | Rejection::OversizedSignature(_) => StatusCode::UNAUTHORIZED,
        }
    }

    /// The metric reason: `too_large`, `unreadable`, or for a 401 `header`, `timestamp`,
    /// `signature`, `oversized_signature`.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::TooLarge { .. } => "too_large",
            Rejection::Unreadable(_) => "unreadable",
            Rejection::BadHeader(_) => "header",
            Rejection::StaleTimestamp => "timestamp",
            Rejection::BadSignature => "signature",
            Rejection::OversizedSignature(_) => "oversized_signature",
        }
    }

    /// Whether this is a verification failure (401).
    pub fn is_unauthorized(&self) -> bool {
        self.status() == StatusCode::UNAUTHORIZED
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        (self.status(), self.to_string()).into_response()
    }
}

/// A delivery whose signature verified.
#[derive(Debug, Clone)]
pub struct VerifiedWebhook {
    /// `webhook-id`: the dedup key.
    pub id: String,
    /// `webhook-timestamp`, Unix seconds.
    pub timestamp: i64,
    /// `hookstream-event-type`, when sent.
    pub event_type: Option<String>,
    /// The exact body bytes the signature covers.
    pub body: Bytes,
}

/// The secrets of a route, swappable while it runs (a rotation: add the new secret, later
/// drop the old one). Cheap to clone; clones share the set.
#[derive(Clone, Default)]
pub struct Secrets(Arc<RwLock<Arc<Vec<Secret>>>>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} redacted)", self.current().len())
    }
}

impl Secrets {
    pub fn new(secrets: Vec<Secret>) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(secrets))))
    }

    /// Verifies with these from now on.
    pub fn replace(&self, secrets: Vec<Secret>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(secrets);
    }

    /// Also verifies with `secret` from now on.
    pub fn add(&self, secret: Secret) {
        let mut guard = self.0.write().unwrap_or_else(|p| p.into_inner());
        let mut next = guard.as_ref().clone();
        next.push(secret);
        *guard = Arc::new(next);
    }

    pub fn current(&self) -> Arc<Vec<Secret>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Checks requests for one route: body limit, then signature.
#[derive(Clone, Debug)]
pub struct Verifier {
    pub secrets: Secrets,
    pub tolerance_secs: i64,
    pub max_body_bytes: usize,
}

fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

impl Verifier {
    /// Reads the body (at most `max_body_bytes`) and verifies the signature against `now`.
    pub async fn verify_request(
        &self,
        request: Request,
        now_unix: i64,
    ) -> Result<VerifiedWebhook, Rejection> {
        let (parts, body) = request.into_parts();
        let body = read_limited(&parts.headers, body, self.max_body_bytes).await?;
        self.verify_parts(&parts.headers, body, now_unix)
    }

    /// Verifies a body already read.
    pub fn verify_parts(
        &self,
        headers: &HeaderMap,
        body: Bytes,
        now_unix: i64,
    ) -> Result<VerifiedWebhook, Rejection> {
        let id = header_str(headers, HEADER_ID).unwrap_or("");
        let ts = header_str(headers, HEADER_TIMESTAMP).ok_or(Rejection::BadHeader(HEADER_TIMESTAMP))?;
        let sig = header_str(headers, HEADER_SIGNATURE).ok_or(Rejection::BadHeader(HEADER_SIGNATURE))?;
        let secrets = self.secrets.current();
        // One HMAC over the body per secret, whatever the header carries; a header over
        // the signing crate's limits is refused before any.
        hookstream_signing::verify_any(&secrets, id, ts, sig, &body, now_unix, self.tolerance_secs)
            .map_err(Rejection::from)?;
        // `verify` parsed it already.
        let timestamp = ts
            .trim()
            .parse()
            .map_err(|_| Rejection::BadHeader(HEADER_TIMESTAMP))?;
        Ok(VerifiedWebhook {
            id: id.to_string(),
            timestamp,
            event_type: header_str(headers, crate::verify::HEADER_EVENT_TYPE).map(str::to_string),
            body,
        })
    }
}

/// Reads a body of at most `limit` bytes: refused at once when `content-length` says more,
/// and as soon as more arrived otherwise (chunked bodies).
pub async fn read_limited(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, Rejection> {
    let declared = header_str(headers, header::CONTENT_LENGTH.as_str()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(Rejection::TooLarge { limit });
    }
    let mut stream = body.into_data_stream();
    let mut buf = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Rejection::Unreadable(e.to_string()))?;
        if buf.len() + chunk.len() > limit {
            return Err(Rejection::TooLarge { limit });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(buf))
}

impl<S> FromRequest<S> for VerifiedWebhook
where
    Verifier: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = Rejection;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let verifier = Verifier::from_ref(state);
        verifier.verify_request(req, chrono::Utc::now().timestamp()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(id: &str, ts: i64, sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HEADER_ID, id.parse().unwrap());
        h.insert(HEADER_TIMESTAMP, ts.to_string().parse().unwrap());
        h.insert(HEADER_SIGNATURE, sig.parse().unwrap());
        h
    }

    fn verifier(secrets: Vec<Secret>) -> Verifier {
        Verifier {
            secrets: Secrets::new(secrets),
            tolerance_secs: 300,
            max_body_bytes: 64,
        }
    }

    /// Signed by the independent `standardwebhooks` crate, as any sender would.
    fn signed(secret: &Secret, id: &str, ts: i64, body: &[u8]) -> String {
        standardwebhooks::Webhook::new(&secret.expose())
            .unwrap()
            .sign(id, ts, body)
            .unwrap()
    }

    #[test]
    fn any_of_the_route_secrets_verifies_during_a_rotation() {
        let (old, new) = (Secret::generate(), Secret::generate());
        let v = verifier(vec![old.clone(), new.clone()]);
        let body = Bytes::from_static(br#"{"a":1}"#);
        for s in [&old, &new] {
            let h = headers("msg_1", 1000, &signed(s, "msg_1", 1000, &body));
            let ok = v.verify_parts(&h, body.clone(), 1000).unwrap();
            assert_eq!((ok.id.as_str(), ok.timestamp), ("msg_1", 1000));
        }
        // The sender signs with both during its own rotation; one known secret is enough.
        let both = format!(
            "{} {}",
            signed(&Secret::generate(), "msg_1", 1000, &body),
            signed(&new, "msg_1", 1000, &body)
        );
        v.verify_parts(&headers("msg_1", 1000, &both), body.clone(), 1000)
            .unwrap();
        // Dropping the old secret at run time.
        v.secrets.replace(vec![new.clone()]);
        let h = headers("msg_1", 1000, &signed(&old, "msg_1", 1000, &body));
        assert_eq!(
            v.verify_parts(&h, body, 1000).unwrap_err(),
            Rejection::BadSignature
        );
    }

    #[test]
    fn refusals_are_401_and_name_the_header() {
        let s = Secret::generate();
        let v = verifier(vec![s.clone()]);
        let body = Bytes::from_static(b"{}");
        let good = signed(&s, "m", 1000, &body);
        let stale = v.verify_parts(&headers("m", 1000, &good), body.clone(), 1000 + 301);
        assert_eq!(stale.unwrap_err(), Rejection::StaleTimestamp);
        let tampered = v.verify_parts(&headers("m", 1000, &good), Bytes::from_static(b"{ }"), 1000);
        assert_eq!(tampered.unwrap_err(), Rejection::BadSignature);
        let no_id = v.verify_parts(&headers("", 1000, &good), body.clone(), 1000);
        assert_eq!(no_id.unwrap_err(), Rejection::BadHeader(HEADER_ID));
        let mut h = headers("m", 1000, &good);
        h.remove(HEADER_SIGNATURE);
        let e = v.verify_parts(&h, body, 1000).unwrap_err();
        assert_eq!(e, Rejection::BadHeader(HEADER_SIGNATURE));
        assert_eq!(e.status(), StatusCode::UNAUTHORIZED);
        assert!(e.to_string().contains("webhook-signature"));
    }

    #[tokio::test]
    async fn bodies_over_the_limit_are_413_declared_or_not() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, "65".parse().unwrap());
        let e = read_limited(&h, Body::from(vec![b'x'; 65]), 64)
            .await
            .unwrap_err();
        assert_eq!(e.status(), StatusCode::PAYLOAD_TOO_LARGE);
        // No content-length (chunked): counted as it arrives.
        let chunks = futures::stream::iter(vec![
            Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; 40])),
            Ok(Bytes::from(vec![b'x'; 40])),
        ]);
        let e = read_limited(&HeaderMap::new(), Body::from_stream(chunks), 64)
            .await
            .unwrap_err();
        assert_eq!(e, Rejection::TooLarge { limit: 64 });
        let ok = read_limited(&HeaderMap::new(), Body::from(vec![b'x'; 64]), 64)
            .await
            .unwrap();
        assert_eq!(ok.len(), 64);
    }
}
