//! The retry schedule every run uses, shared by the dispatcher's settings (`engine.rs`), the
//! early-retry check (`engine.rs`) and the baseline's pollers (`baseline.rs`).

/// Milliseconds before attempt 2, 3, …; 150 s in all, so an event survives a 60 s outage.
pub const RETRY_SCHEDULE_MS: [u64; 9] = [1000, 2000, 4000, 8000, 15000, 30000, 30000, 30000, 30000];
/// The shortest wait after a 429 or a timeout.
pub const MIN_THROTTLED_DELAY_MS: u64 = 1000;
/// A retry may come this fraction of its delay early.
pub const RETRY_JITTER: f64 = 0.2;
