//! Where a delivery may go, and how an endpoint URL is shown without leaking its secrets.
//!
//! A pure building block (no I/O, no async) shared by everything that accepts, stores,
//! delivers to or logs an endpoint URL:
//!
//! - [`policy`]: which IP addresses are forbidden (the IANA special-purpose registries as
//!   tables, IPv6 forms of IPv4 addresses judged by the IPv4 address) and the allow-list
//!   around them, [`AddressPolicy`];
//! - [`mod@url`]: [`validate_endpoint_url`], what an endpoint URL must be;
//! - [`redact`](mod@redact): [`redact()`], the display form of a URL that hides capability
//!   tokens and credentials, and [`redact_text`], which removes a URL from an error message.
//!
//! Resolving host names and checking the resolved addresses at connect time is the HTTP
//! client's job (`hookstream-delivery`'s resolver), over the same [`AddressPolicy`].

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
pub mod policy;
pub mod redact;
pub mod url;

pub use crate::policy::{forbidden_range, is_forbidden, why_forbidden, AddressPolicy, Forbidden};
pub use crate::redact::{redact, redact_host, redact_text, INVALID_URL, MASK};
pub use crate::url::{validate_endpoint_url, UrlError, MAX_URL_LEN};
