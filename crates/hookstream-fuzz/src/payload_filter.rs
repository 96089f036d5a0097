//! `payload_filter`: endpoint payload filters (`hookstream_routing::payload_filter`), the
//! JSON documents tenants send in `filter`.
//!
//! Input: a first line with the filter's text, then the payload's text.

use hookstream_routing::PayloadFilter;
use serde_json::{json, Value};

use crate::input::Input;

pub fn payload_filter(data: &[u8]) {
    let mut input = Input::new(data);
    let filter_text = input.text_field();
    let payload_text = String::from_utf8_lossy(input.rest()).into_owned();

    let filter = match PayloadFilter::parse(&filter_text) {
        Ok(f) => f,
        Err(e) => {
            // A refusal points into the filter (a JSON pointer) or at it as a whole.
            assert!(e.pointer.is_empty() || e.pointer.starts_with('/'), "{e}");
            assert!(!e.reason.is_empty(), "a refusal says why");
            return;
        }
    };
    // What is stored and shown back compiles to the same filter.
    let again = PayloadFilter::from_value(filter.source().clone()).expect("a filter's own source parses");
    assert_eq!(again, filter, "the source round-trips");

    let Ok(payload) = serde_json::from_str::<Value>(&payload_text) else {
        return;
    };
    let verdict = filter.matches(&payload);
    assert_eq!(
        again.matches(&payload),
        verdict,
        "the same filter, the same verdict"
    );
    // `$not` negates, and `$and` / `$or` of one filter are that filter (when still in bounds).
    if let Ok(not) = PayloadFilter::from_value(json!({"$not": filter.source()})) {
        assert_eq!(
            not.matches(&payload),
            !verdict,
            "$not of {filter_text} on {payload_text}"
        );
    }
    for op in ["$and", "$or"] {
        if let Ok(one) = PayloadFilter::from_value(json!({op: [filter.source()]})) {
            assert_eq!(one.matches(&payload), verdict, "{op} of one on {payload_text}");
        }
    }
}
