//! Fuzz targets: one function per target, each taking arbitrary bytes.
//!
//! A target must never panic on any input. While it is at it, it checks properties of what it
//! calls (a signature we make verifies, a decoded record re-encodes to itself, ...) with
//! `assert!`: a panic here is a bug found, in the code under test or in the property.
//!
//! The same functions run three ways: under libFuzzer by `fuzz/` (`make fuzz`, nightly), on
//! the saved corpus and regressions by `tests/corpus.rs` (`make test`, stable), and as a short
//! seeded smoke run in that same test.

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
mod config;
mod input;
mod event_filter;
mod payload_filter;
mod proto;
mod retry_after;
mod signature;
mod ssrf;

pub use config::config;
pub use event_filter::event_filter;
pub use payload_filter::payload_filter;
pub use proto::proto;
pub use retry_after::retry_after;
pub use signature::signature;
pub use ssrf::ssrf;

/// A fuzz target.
pub type Target = fn(&[u8]);

/// Every target by name; the name is the cargo-fuzz target and the corpus folder
/// (`fuzz/corpus/<name>/`, `fuzz/regressions/<name>/`).
pub const TARGETS: &[(&str, Target)] = &[
    ("signature", signature),
    ("proto", proto),
    ("event_filter", event_filter),
    ("payload_filter", payload_filter),
    ("ssrf", ssrf),
    ("retry_after", retry_after),
    ("config", config),
];
