//! `retry_after`: the receiver's `Retry-After` header, and what the dispatcher does with it
//! (the retry delay, the due time, the tier).
//!
//! Input: `now` (8 bytes of Unix seconds, 4 of nanoseconds), a date offset (4 bytes of
//! seconds, signed), a byte choosing the retry clamp, then the header's text.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use chrono::DateTime;
use dispatcher::retry::{due_at_ms, next_delay};
use hookstream_config::RetryConfig;
use hookstream_delivery::{parse_retry_after, ErrorClass, Outcome, Verdict, MAX_RETRY_AFTER};

use crate::input::Input;

pub fn retry_after(data: &[u8]) {
    let mut input = Input::new(data);
    let now_secs = input.i64();
    let now_nanos = input.u32() % 1_000_000_000;
    let offset = input.u32() as i32;
    let clamp = input.byte();
    let text = String::from_utf8_lossy(input.rest());
    let now = system_time(now_secs, now_nanos);

    let parsed = parse_retry_after(&text, now);
    if let Some(p) = parsed {
        assert!(p <= MAX_RETRY_AFTER, "{p:?} over the cap");
    }
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        let secs = trimmed.parse::<u64>().unwrap_or(u64::MAX);
        assert_eq!(
            parsed,
            Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER)),
            "delay-seconds"
        );
    }
    caller(parsed, now, clamp);
    http_date(now_secs, offset);
}

/// What the dispatcher does with a parsed `Retry-After`: the delay is never shorter than the
/// header asked (up to the clamp), the due time never earlier than now plus the delay, and
/// nothing overflows.
fn caller(retry_after: Option<Duration>, now: SystemTime, clamp: u8) {
    let cfg = RetryConfig {
        max_retry_after_ms: match clamp % 3 {
            0 => RetryConfig::default().max_retry_after_ms,
            1 => u64::MAX,
            _ => u64::from(clamp),
        },
        ..RetryConfig::default()
    };
    let outcome = Outcome {
        verdict: Verdict::Retryable,
        class: ErrorClass::Http429,
        status: Some(429),
        error: None,
        retry_after,
        latency: Duration::ZERO,
        response: Bytes::new(),
        response_truncated: false,
        response_headers: Vec::new(),
    };
    let now_ms = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_else(|before| i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms));
    for spread in [-1.0, 0.0, 1.0] {
        let delay = next_delay(&cfg, 1, &outcome, spread).expect("the default schedule has attempts");
        if let Some(asked) = retry_after {
            let floor = Duration::from_millis(cfg.retry_after_cap_ms()).min(asked);
            // Whole milliseconds: the delay is kept in ms.
            let floor = Duration::from_millis(u64::try_from(floor.as_millis()).unwrap_or(u64::MAX));
            assert!(
                delay >= floor,
                "delay {delay:?} shorter than Retry-After {asked:?} (clamp {floor:?})"
            );
        }
        let due = due_at_ms(now_ms, delay);
        let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        assert!(
            due >= now_ms.saturating_add(delay_ms),
            "due {due} before {now_ms} + {delay:?}"
        );
        let _ = now.checked_add(delay);
        let tier = cfg.next_tier(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        assert!(tier.is_some(), "the default schedule has tiers");
    }
}

/// An HTTP date `offset` seconds from `now` gives that delay (zero when it is past, at most
/// the cap).
fn http_date(now_secs: i64, offset: i32) {
    let now = now_secs.rem_euclid(253_402_300_799 - i64::from(u32::MAX)); // keep years <= 9999
    let Some(date) = DateTime::from_timestamp(now.saturating_add(i64::from(offset)), 0) else {
        return;
    };
    if date.timestamp() < 0 {
        return; // HTTP dates start in 1970 for `httpdate`
    }
    let text = date.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
    let base = system_time(now, 0);
    let expected = Duration::from_secs(u64::try_from(offset).unwrap_or(0)).min(MAX_RETRY_AFTER);
    assert_eq!(parse_retry_after(&text, base), Some(expected), "{text}");
}

/// `UNIX_EPOCH` moved by `secs` (either way) and `nanos`, or the epoch when out of range.
fn system_time(secs: i64, nanos: u32) -> SystemTime {
    let moved = if secs >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs.unsigned_abs(), nanos))
    } else {
        SystemTime::UNIX_EPOCH
            .checked_sub(Duration::from_secs(secs.unsigned_abs()))
            .and_then(|t| t.checked_add(Duration::from_nanos(u64::from(nanos))))
    };
    moved.unwrap_or(SystemTime::UNIX_EPOCH)
}
