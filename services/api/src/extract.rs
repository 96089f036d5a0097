//! Extractors whose refusals are Svix-shaped and name what is wrong: a JSON body (400 when it
//! is not JSON, 422 naming the field whose value has the wrong type or is missing, 413 over
//! the body limit), a query string (422 naming the parameter) and path segments.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ValidationErrorItem};

/// A JSON body.
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req.extensions().get::<BodyLimit>().map(|l| l.0);
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::TooLarge(limit.unwrap_or_default())
            } else {
                ApiError::BadRequest(format!("cannot read the request body: {e}"))
            }
        })?;
        parse_json(&bytes).map(Json)
    }
}

/// The body limit in force, for the 413 message (set by the router's layer).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// Parses a JSON body; errors name the field (`loc: ["body", ...path]`).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::BadRequest("the request needs a JSON body".into()));
    }
    // Nesting is refused before any parser sees it: serde_json skips a raw `payload` without
    // a depth limit, and PostgreSQL's JSON parser then runs out of stack (a 5xx a client
    // would retry forever).
    if let Some(TooDeep { at }) = deeper_than(bytes, MAX_BODY_DEPTH) {
        return Err(ApiError::BadRequest(format!(
            "the request body nests arrays and objects deeper than {MAX_BODY_DEPTH} levels \
             (limit body_depth), at byte {at}"
        )));
    }
    // Every string of a body ends up in PostgreSQL text or jsonb, which cannot hold NUL: say
    // which field has one (`\u0000`, the only way JSON carries it) instead of failing the
    // statement. The scan is cheap; the walk runs only when the escape is there.
    if has_nul_escape(bytes) {
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) {
            let mut path = vec!["body".to_string()];
            if nul_in(&value, &mut path) {
                return Err(ApiError::Validation(vec![ValidationErrorItem {
                    loc: path,
                    msg: "must not contain NUL (\\u0000)".into(),
                    kind: "value_error".into(),
                }]));
            }
        }
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let inner = e.inner();
        match inner.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                ApiError::BadRequest(format!("the request body is not valid JSON: {inner}"))
            }
            _ => {
                let mut loc = vec!["body".to_string()];
                loc.extend(path_segments(e.path()));
                let msg = strip_position(&inner.to_string());
                if let Some(field) = missing_field(&msg) {
                    loc.push(field);
                }
                ApiError::Validation(vec![ValidationErrorItem {
                    loc,
                    msg,
                    kind: "type_error".into(),
                }])
            }
        }
    })
}

/// Deepest nesting of arrays and objects a body (payload included) may have: serde_json's
/// own recursion limit, so every field parsed as a value parses.
pub const MAX_BODY_DEPTH: usize = 128;

/// Where a body first nests past the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    pub at: usize,
}

/// Whether the JSON text nests arrays and objects deeper than `max` (a single scan that
/// skips strings; malformed text is left to the parser).
pub fn deeper_than(bytes: &[u8], max: usize) -> Option<TooDeep> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (at, &b) in bytes.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Some(TooDeep { at });
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Whether `\u0000` appears in the bytes (perhaps as the text of an escaped backslash: the
/// walk decides).
fn has_nul_escape(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\\')
        .any(|(i, _)| bytes.get(i + 1..i + 6) == Some(b"u0000"))
}

/// Whether a key or string in `value` holds NUL; `path` then ends with where.
fn nul_in(value: &serde_json::Value, path: &mut Vec<String>) -> bool {
    use serde_json::Value;
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
            path.push(i.to_string());
            let found = nul_in(item, path);
            if !found {
                path.pop();
            }
            found
        }),
        Value::Object(map) => map.iter().any(|(key, item)| {
            path.push(key.clone());
            let found = key.contains('\0') || nul_in(item, path);
            if !found {
                path.pop();
            }
            found
        }),
        _ => false,
    }
}

fn path_segments(path: &serde_path_to_error::Path) -> Vec<String> {
    path.iter()
        .filter_map(|s| match s {
            serde_path_to_error::Segment::Seq { index } => Some(index.to_string()),
            serde_path_to_error::Segment::Map { key } => Some(key.clone()),
            serde_path_to_error::Segment::Enum { variant } => Some(variant.clone()),
            serde_path_to_error::Segment::Unknown => None,
        })
        .collect()
}

/// serde_json appends " at line 1 column 9": the field already says where.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

fn missing_field(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_string())
}

/// A query string.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let q = parts.uri.query().unwrap_or_default();
        check_query(q)?;
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(q.as_bytes()));
        serde_path_to_error::deserialize(de).map(Query).map_err(|e| {
            let mut loc = vec!["query".to_string()];
            loc.extend(path_segments(e.path()));
            let msg = e.inner().to_string();
            if let Some(field) = missing_field(&msg) {
                loc.push(field);
            }
            ApiError::Validation(vec![ValidationErrorItem {
                loc,
                msg,
                kind: "type_error".into(),
            }])
        })
    }
}

/// What PostgreSQL cannot take, refused naming the parameter instead of failing the query:
/// NUL (U+0000) in text, and times before the year 1 (chrono parses years back to -262143;
/// PostgreSQL's timestamps end at 4713 BC). Far-future times are fine: bounds clamp them.
fn check_query(q: &str) -> Result<(), ApiError> {
    for (key, value) in form_urlencoded::parse(q.as_bytes()) {
        if key.contains('\0') || value.contains('\0') {
            return Err(ApiError::field(&["query", &key], "must not contain NUL (U+0000)"));
        }
        if let Ok(at) = value.parse::<chrono::DateTime<chrono::FixedOffset>>() {
            if chrono::Datelike::year(&at.naive_utc()) < 1 {
                return Err(ApiError::field(
                    &["query", &key],
                    "must be a time in the year 1 or later",
                ));
            }
        }
    }
    Ok(())
}

/// Path segments.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        // No id, uid or name can hold NUL (PostgreSQL text cannot).
        if parts.uri.path().contains("%00") {
            return Err(ApiError::field(&["path"], "must not contain NUL (%00)"));
        }
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| ApiError::field(&["path"], e.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_counted_outside_strings_only() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(deeper_than(nested(128).as_bytes(), 128), None);
        assert_eq!(
            deeper_than(nested(129).as_bytes(), 128),
            Some(TooDeep { at: 128 })
        );
        let in_string = format!(r#"{{"a": "{}\" [[[", "b": [1]}}"#, "[".repeat(1000));
        assert_eq!(deeper_than(in_string.as_bytes(), 2), None, "brackets in strings");
        assert_eq!(
            deeper_than(br#"{"a": {"b": {"c": 1}}}"#, 2),
            Some(TooDeep { at: 12 })
        );
        let deep = format!(r#"{{"eventType": "a", "payload": {}}}"#, nested(100_000));
        assert!(
            matches!(parse_json::<serde_json::Value>(deep.as_bytes()), Err(ApiError::BadRequest(m)) if m.contains("body_depth"))
        );
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct In {
        url: String,
        #[serde(default)]
        n: Option<u16>,
        #[serde(default)]
        tags: Vec<String>,
    }

    fn loc(e: ApiError) -> Vec<String> {
        match e {
            ApiError::Validation(items) => items[0].loc.clone(),
            other => panic!("not a validation error: {other:?}"),
        }
    }

    #[test]
    fn errors_name_the_field() {
        assert!(parse_json::<In>(br#"{"url":"x"}"#).is_ok());
        assert_eq!(
            loc(parse_json::<In>(br#"{"url":5}"#).unwrap_err()),
            ["body", "url"]
        );
        assert_eq!(loc(parse_json::<In>(br#"{"n":1}"#).unwrap_err()), ["body", "url"]);
        assert_eq!(
            loc(parse_json::<In>(br#"{"url":"x","n":70000}"#).unwrap_err()),
            ["body", "n"]
        );
        assert_eq!(
            loc(parse_json::<In>(br#"{"url":"x","tags":["a",2]}"#).unwrap_err()),
            ["body", "tags", "1"]
        );
        assert!(matches!(
            parse_json::<In>(b"{\"url\":"),
            Err(ApiError::BadRequest(_))
        ));
        assert!(matches!(
            parse_json::<In>(b"not json"),
            Err(ApiError::BadRequest(_))
        ));
        assert!(matches!(parse_json::<In>(b""), Err(ApiError::BadRequest(_))));
    }

    #[test]
    fn nul_in_a_body_is_refused_naming_the_field() {
        assert_eq!(
            loc(parse_json::<In>(br#"{"url":"x","tags":["a","b\u0000c"]}"#).unwrap_err()),
            ["body", "tags", "1"]
        );
        assert_eq!(
            loc(parse_json::<serde_json::Value>(br#"{"payload":{"k\u0000":1}}"#).unwrap_err()),
            ["body", "payload", "k\u{0}"]
        );
        // The text of an escaped backslash is not NUL.
        let ok: In = parse_json(br#"{"url":"a\\u0000b"}"#).unwrap();
        assert_eq!(ok.url, "a\\u0000b");
    }

    #[test]
    fn query_values_postgresql_cannot_take_are_refused_by_name() {
        assert!(check_query("limit=5&before=2025-01-01T00:00:00Z&iterator=abc").is_ok());
        assert!(check_query("since=0001-01-01T00:00:00Z&until=9999-12-31T23:59:59Z").is_ok());
        assert!(
            check_query("after=%2B262142-12-31T23:59:59.999Z").is_ok(),
            "clamped later"
        );
        for (q, name) in [
            ("iterator=a%00b", "iterator"),
            ("before=-5000-01-01T00:00:00Z", "before"),
            ("since=0000-12-31T00:00:00Z", "since"),
        ] {
            assert_eq!(loc(check_query(q).unwrap_err()), ["query", name], "{q}");
        }
    }
}
