//! Which endpoint gets which event: the three rules an endpoint's subscription combines, each
//! in its own module, and [`Subscription`], which applies them in order of cost.
//!
//! Module order (each uses only those above it): `event_types` (`a.b`, `a.*`, `*`),
//! `channels` (Svix's channel rule and name checks), `payload_filter` (JSON filters over the
//! payload), then this file.
//!
//! The dispatcher routes with it; the API and the CLI validate with it; recoveries ask it which
//! stored messages an endpoint should have had. One implementation, so all of them agree.

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
pub mod channels;
pub mod event_types;
pub mod payload_filter;

use std::sync::OnceLock;

pub use event_types::EventFilter;
pub use payload_filter::{FilterError, PayloadFilter};
use serde_json::Value;

/// What an endpoint subscribes to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Subscription {
    pub event_types: EventFilter,
    /// Empty: every channel (and messages without one).
    pub channels: Vec<String>,
    pub payload: Option<PayloadFilter>,
}

/// An event as routing sees it. The payload is parsed at most once, the first time a payload
/// filter asks, however many endpoints ask.
pub struct Candidate<'a> {
    pub event_type: &'a str,
    pub channels: &'a [String],
    body: &'a [u8],
    parsed: OnceLock<Option<Value>>,
}

impl<'a> Candidate<'a> {
    pub fn new(event_type: &'a str, channels: &'a [String], body: &'a [u8]) -> Self {
        Self {
            event_type,
            channels,
            body,
            parsed: OnceLock::new(),
        }
    }

    /// The payload as JSON; `None` when it is not (such a payload passes no payload filter).
    pub fn payload(&self) -> Option<&Value> {
        self.parsed
            .get_or_init(|| serde_json::from_slice(self.body).ok())
            .as_ref()
    }
}

impl Subscription {
    /// Whether the endpoint gets the event: its type, then its channels, then its payload.
    pub fn matches(&self, event: &Candidate<'_>) -> bool {
        self.event_types.matches(event.event_type)
            && channels::deliverable(&self.channels, event.channels)
            && self
                .payload
                .as_ref()
                .is_none_or(|f| event.payload().is_some_and(|p| f.matches(p)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_must_hold_and_the_payload_is_parsed_once() {
        let sub = Subscription {
            event_types: EventFilter::new(&["order.*"]).unwrap(),
            channels: vec!["eu".into()],
            payload: Some(PayloadFilter::parse(r#"{"amount": {"$gte": 10}}"#).unwrap()),
        };
        let eu = vec!["eu".to_string()];
        let body = br#"{"amount": 12}"#;
        let ok = Candidate::new("order.paid", &eu, body);
        assert!(sub.matches(&ok));
        assert!(sub.matches(&ok), "the parsed payload is reused");
        assert!(!sub.matches(&Candidate::new("user.created", &eu, body)));
        assert!(!sub.matches(&Candidate::new("order.paid", &[], body)));
        assert!(!sub.matches(&Candidate::new("order.paid", &eu, br#"{"amount": 1}"#)));
        assert!(!sub.matches(&Candidate::new("order.paid", &eu, b"not json")));
        assert!(Subscription::default().matches(&Candidate::new("x", &[], b"not json")));
    }
}
