//! Custom headers an endpoint's deliveries carry (Svix's endpoint headers): how receivers
//! authenticate their callers (`Authorization: Bearer …`, `X-Api-Key: …`).
//!
//! They are credentials, so they are sealed at rest like the URL (`Sealer::seal_headers`, the
//! endpoint id as associated data) and exist in clear only in the dispatcher's memory and in
//! the API's answer to the endpoint's owner — and there only the ones that are not sensitive.
//! A header is sensitive when its name looks like a credential ([`looks_sensitive`]) or when
//! the tenant marked it; a sensitive value is never returned, shown or logged. The row keeps
//! the names in clear (`header_names`) for lists and limits.
//!
//! Names the delivery itself sets or that HTTP reserves ([`reserved`]) are refused, as are
//! more than [`MAX_HEADERS`] headers or more than [`MAX_HEADERS_BYTES`] of them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::sealing::Sealer;
use crate::StoreError;

/// At most this many custom headers per endpoint.
pub const MAX_HEADERS: usize = 20;
/// The longest header name.
pub const MAX_NAME_BYTES: usize = 128;
/// The longest header value.
pub const MAX_VALUE_BYTES: usize = 4096;
/// Names and values together.
pub const MAX_HEADERS_BYTES: usize = 16 * 1024;

/// An endpoint's custom headers: names as the tenant wrote them, and which are sensitive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointHeaders {
    pub headers: BTreeMap<String, String>,
    /// Lower-case names whose values are never shown.
    #[serde(default)]
    pub sensitive: BTreeSet<String>,
}

/// A header refused: which one and why (the API answers 422 naming it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("header {name:?}: {reason}")]
pub struct HeaderError {
    pub name: String,
    pub reason: String,
}

/// Whether a name belongs to the delivery or to HTTP itself: `webhook-*` (the signature),
/// `hookstream-*`, the body's framing, the host, the client, and hop-by-hop headers.
pub fn reserved(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.starts_with("webhook-")
        || n.starts_with("hookstream-")
        || n.starts_with("svix-")
        || n.starts_with("proxy-")
        || n.starts_with("sec-")
        || matches!(
            n.as_str(),
            "content-type"
                | "content-length"
                | "content-encoding"
                | "host"
                | "user-agent"
                | "connection"
                | "keep-alive"
                | "te"
                | "trailer"
                | "trailers"
                | "transfer-encoding"
                | "upgrade"
                | "expect"
                | "date"
        )
}

/// Whether a name looks like it carries a credential: `Authorization`, `Cookie`, and names
/// ending in `token`, `key`, `secret`, `password` or `auth` (`X-Api-Key`, `X-Auth-Token`).
pub fn looks_sensitive(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(n.as_str(), "authorization" | "cookie")
        || [
            "token",
            "key",
            "secret",
            "password",
            "passwd",
            "auth",
            "signature",
            "credential",
            "credentials",
        ]
        .iter()
        .any(|s| n.ends_with(s))
}

fn token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

impl EndpointHeaders {
    /// Checks headers (names, values, reserved names, limits) and marks the sensitive ones:
    /// those that look like credentials and those in `marked`. Names are unique regardless of
    /// case (the last one given wins).
    pub fn new(
        given: impl IntoIterator<Item = (String, String)>,
        marked: &[String],
    ) -> Result<Self, HeaderError> {
        let mut out = EndpointHeaders::default();
        let mut total = 0usize;
        for (name, value) in given {
            let err = |reason: String| HeaderError {
                name: name.chars().take(MAX_NAME_BYTES).collect(),
                reason,
            };
            if name.is_empty() || name.len() > MAX_NAME_BYTES || !name.bytes().all(token_char) {
                return Err(err(format!(
                    "a header name is 1 to {MAX_NAME_BYTES} letters, digits or !#$%&'*+-.^_`|~"
                )));
            }
            if reserved(&name) {
                return Err(err(
                    "reserved: webhook-*, hookstream-*, svix-*, proxy-*, sec-*, content-type, content-length, \
                     content-encoding, host, user-agent, date, expect and hop-by-hop headers are set by the \
                     delivery itself"
                        .into(),
                ));
            }
            if value.len() > MAX_VALUE_BYTES {
                return Err(err(format!(
                    "a value is at most {MAX_VALUE_BYTES} bytes (limit endpoint_header_value_bytes)"
                )));
            }
            if !value.bytes().all(|c| c == b'\t' || (b' '..=b'~').contains(&c)) {
                return Err(err("a value holds printable ASCII only (no line breaks)".into()));
            }
            out.headers.retain(|n, _| !n.eq_ignore_ascii_case(&name));
            total += name.len() + value.len();
            out.headers.insert(name, value);
        }
        if out.headers.len() > MAX_HEADERS {
            return Err(HeaderError {
                name: String::new(),
                reason: format!(
                    "at most {MAX_HEADERS} headers per endpoint (limit endpoint_headers), got {}",
                    out.headers.len()
                ),
            });
        }
        if total > MAX_HEADERS_BYTES {
            return Err(HeaderError {
                name: String::new(),
                reason: format!(
                    "headers are at most {MAX_HEADERS_BYTES} bytes together (limit endpoint_headers_bytes)"
                ),
            });
        }
        for name in out.headers.keys() {
            let lower = name.to_ascii_lowercase();
            if looks_sensitive(name) || marked.iter().any(|m| m.eq_ignore_ascii_case(name)) {
                out.sensitive.insert(lower);
            }
        }
        Ok(out)
    }

    pub fn is_sensitive(&self, name: &str) -> bool {
        self.sensitive.contains(&name.to_ascii_lowercase())
    }

    /// What may be shown: the values of the headers that are not sensitive, and the names of
    /// those that are.
    pub fn shown(&self) -> (BTreeMap<String, String>, Vec<String>) {
        let mut open = BTreeMap::new();
        let mut hidden = Vec::new();
        for (name, value) in &self.headers {
            if self.is_sensitive(name) {
                hidden.push(name.clone());
            } else {
                open.insert(name.clone(), value.clone());
            }
        }
        (open, hidden)
    }

    /// These headers with `set` applied (a `None` value removes the header), then `delete`
    /// removed, then checked again. A sensitive header keeps its mark when its value changes.
    pub fn patched(
        &self,
        set: impl IntoIterator<Item = (String, Option<String>)>,
        delete: &[String],
        marked: &[String],
    ) -> Result<Self, HeaderError> {
        let mut headers = self.headers.clone();
        for (name, value) in set {
            headers.retain(|n, _| !n.eq_ignore_ascii_case(&name));
            if let Some(v) = value {
                headers.insert(name, v);
            }
        }
        headers.retain(|n, _| !delete.iter().any(|d| d.eq_ignore_ascii_case(n)));
        let mut keep: Vec<String> = self.sensitive.iter().cloned().collect();
        keep.extend(marked.iter().cloned());
        Self::new(headers, &keep)
    }

    /// Pairs for the request, in name order.
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.headers.iter().map(|(n, v)| (n.clone(), v.clone())).collect()
    }

    /// Sealed for `endpoint`: (key id, bytes), or `None` when there are none.
    pub(crate) fn seal(&self, sealer: &Sealer, endpoint: Uuid) -> Option<(String, Vec<u8>)> {
        if self.headers.is_empty() {
            return None;
        }
        let json = serde_json::to_string(self).expect("headers serialise");
        Some(sealer.seal_headers(endpoint, &json))
    }

    /// Opened from a row's sealed form (none when the row has none).
    pub(crate) fn open(
        sealer: &Sealer,
        endpoint: Uuid,
        key_id: Option<&str>,
        sealed: Option<&[u8]>,
    ) -> Result<Self, StoreError> {
        match (key_id, sealed) {
            (Some(key_id), Some(sealed)) => {
                let json = sealer.open_headers(endpoint, key_id, sealed)?;
                serde_json::from_str(&json).map_err(|e| {
                    StoreError::Invalid(format!("endpoint {endpoint}: stored headers do not parse: {e}"))
                })
            }
            _ => Ok(Self::default()),
        }
    }
}

/// An endpoint's headers, opened (the caller has checked the endpoint is its tenant's).
pub async fn get(
    conn: &mut PgConnection,
    sealer: &Sealer,
    endpoint: Uuid,
) -> Result<EndpointHeaders, StoreError> {
    let row: Option<(Option<String>, Option<Vec<u8>>)> =
        sqlx::query_as("SELECT headers_key_id, headers_sealed FROM hookstream.endpoints WHERE id = $1")
            .bind(endpoint)
            .fetch_optional(&mut *conn)
            .await?;
    let (key_id, sealed) = row.ok_or_else(|| StoreError::NotFound(format!("endpoint {endpoint}")))?;
    EndpointHeaders::open(sealer, endpoint, key_id.as_deref(), sealed.as_deref())
}

/// Replaces an endpoint's headers (sealed), in the caller's transaction.
pub async fn store(
    conn: &mut PgConnection,
    sealer: &Sealer,
    endpoint: Uuid,
    headers: &EndpointHeaders,
) -> Result<(), StoreError> {
    let (key_id, sealed) = headers.seal(sealer, endpoint).unzip();
    let names: Vec<&String> = headers.headers.keys().collect();
    let done = sqlx::query(
        "UPDATE hookstream.endpoints
            SET headers_key_id = $2, headers_sealed = $3, header_names = $4, updated_at = now()
          WHERE id = $1",
    )
    .bind(endpoint)
    .bind(key_id)
    .bind(sealed)
    .bind(names)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("endpoint {endpoint}")));
    }
    Ok(())
}

/// Changes an endpoint's headers under its row lock: reads them, applies `change`, stores the
/// result. Returns what was stored.
pub async fn update(
    pool: &sqlx::PgPool,
    sealer: &Sealer,
    endpoint: Uuid,
    change: impl FnOnce(&EndpointHeaders) -> Result<EndpointHeaders, HeaderError>,
) -> Result<Result<EndpointHeaders, HeaderError>, StoreError> {
    let mut tx = pool.begin().await?;
    let row: Option<(Option<String>, Option<Vec<u8>>)> = sqlx::query_as(
        "SELECT headers_key_id, headers_sealed FROM hookstream.endpoints WHERE id = $1 FOR UPDATE",
    )
    .bind(endpoint)
    .fetch_optional(&mut *tx)
    .await?;
    let (key_id, sealed) = row.ok_or_else(|| StoreError::NotFound(format!("endpoint {endpoint}")))?;
    let now = EndpointHeaders::open(sealer, endpoint, key_id.as_deref(), sealed.as_deref())?;
    let next = match change(&now) {
        Ok(next) => next,
        Err(e) => return Ok(Err(e)),
    };
    store(&mut tx, sealer, endpoint, &next).await?;
    tx.commit().await?;
    Ok(Ok(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn credentials_are_sensitive_and_reserved_names_refused() {
        let hs = EndpointHeaders::new(
            h(&[
                ("Authorization", "Bearer x"),
                ("X-Api-Key", "k"),
                ("X-Tenant", "acme"),
                ("X-Plan", "gold"),
            ]),
            &["x-plan".into()],
        )
        .unwrap();
        let (open, hidden) = hs.shown();
        assert_eq!(open.into_iter().collect::<Vec<_>>(), h(&[("X-Tenant", "acme")]));
        assert_eq!(hidden, vec!["Authorization", "X-Api-Key", "X-Plan"]);
        for bad in [
            "webhook-id",
            "Content-Type",
            "host",
            "Transfer-Encoding",
            "hookstream-attempt",
            "user-agent",
        ] {
            let e = EndpointHeaders::new(h(&[(bad, "v")]), &[]).unwrap_err();
            assert_eq!(e.name, bad);
            assert!(e.reason.starts_with("reserved"), "{e}");
        }
        assert!(EndpointHeaders::new(h(&[("a b", "v")]), &[]).is_err());
        assert!(EndpointHeaders::new(h(&[("x", "line\r\nbreak")]), &[]).is_err());
        let many: Vec<(String, String)> = (0..21).map(|i| (format!("x-{i}"), "v".into())).collect();
        assert!(EndpointHeaders::new(many, &[])
            .unwrap_err()
            .reason
            .contains("at most 20"));
    }

    #[test]
    fn a_patch_sets_removes_and_keeps_marks() {
        let hs = EndpointHeaders::new(
            h(&[("X-A", "1"), ("X-Secret-Thing", "s"), ("X-B", "2")]),
            &["x-b".into()],
        )
        .unwrap();
        let next = hs
            .patched(
                vec![
                    ("x-a".to_string(), Some("9".to_string())),
                    ("X-Gone".into(), None),
                ],
                &["x-secret-thing".into()],
                &[],
            )
            .unwrap();
        assert_eq!(next.pairs(), h(&[("X-B", "2"), ("x-a", "9")]));
        assert!(next.is_sensitive("X-B"), "the tenant's mark stays");
    }
}
