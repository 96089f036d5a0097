//! The retry schedule: how long to wait after a failed attempt (`next_delay`, jittered, never
//! under a `Retry-After` or the throttle minimum), and the retry record (`DeliveryTask`) a
//! failure or a guard's refusal becomes. Pure functions, below the retry role (`retry`) and
//! the outcome of an attempt (`outcome`), which both use them.

use std::time::Duration;

use hookstream_config::RetryConfig;
use hookstream_delivery::{ErrorClass, Outcome};
use hookstream_proto::{DeliveryTask, EventEnvelope, SourcePosition};
use rand::Rng;
use uuid::Uuid;

use crate::isolation::Refusal;
use crate::work::now_ms;

/// How long to wait before the attempt after `failed_attempt` (1-based), or `None` when the
/// schedule is exhausted. `spread` in [-1, 1] scales the jitter. Never shorter than the
/// receiver's `Retry-After` (clamped to `RetryConfig::retry_after_cap_ms`) nor, after a timeout
/// or a 429, the throttle minimum. Saturating: no input overflows.
pub fn next_delay(
    cfg: &RetryConfig,
    failed_attempt: u32,
    outcome: &Outcome,
    spread: f64,
) -> Option<Duration> {
    let base = *cfg.schedule_ms.get(failed_attempt.checked_sub(1)? as usize)?;
    let spread = if spread.is_nan() {
        0.0
    } else {
        spread.clamp(-1.0, 1.0)
    };
    // `as` from a float saturates (and the factor is never negative: jitter < 1).
    let mut ms = (base as f64 * (1.0 + cfg.jitter * spread)).max(0.0) as u64;
    if matches!(outcome.class, ErrorClass::Timeout | ErrorClass::Http429) {
        ms = ms.max(cfg.min_throttled_delay_ms);
    }
    if let Some(ra) = outcome.retry_after {
        let ra = u64::try_from(ra.as_millis()).unwrap_or(u64::MAX);
        ms = ms.max(ra.min(cfg.retry_after_cap_ms()));
    }
    Some(Duration::from_millis(ms))
}

/// The due time of a retry `delay` after `now_ms`, saturating (a delay past `i64::MAX` ms is
/// never due, rather than wrapping into the past). +1: `now_ms` truncates, and a due time
/// must never fall short of the delay.
pub fn due_at_ms(now_ms: i64, delay: Duration) -> i64 {
    let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    now_ms.saturating_add(delay_ms).saturating_add(1)
}

/// The retry record for a failed attempt, or `None` when the schedule is exhausted.
pub(crate) fn after_failure(
    cfg: &RetryConfig,
    event: &EventEnvelope,
    endpoint_id: Uuid,
    failed_attempt: u32,
    first_attempt_at_ms: i64,
    origin: &SourcePosition,
    outcome: &Outcome,
) -> Option<DeliveryTask> {
    let spread = rand::thread_rng().gen_range(-1.0..=1.0);
    let delay = next_delay(cfg, failed_attempt, outcome, spread)?;
    Some(DeliveryTask {
        event: Some(event.clone()),
        endpoint_id: endpoint_id.to_string(),
        attempt: failed_attempt,
        due_at_ms: due_at_ms(now_ms(), delay),
        first_attempt_at_ms,
        origin: Some(origin.clone()),
        last_status: outcome.status.map(i32::from).unwrap_or(0),
        last_error_class: outcome.class.as_str().into(),
        last_error: outcome.error.clone().unwrap_or_default(),
    })
}

/// The retry record for a delivery the endpoint's guard refused (open breaker, rate limit,
/// full cap): due when the refusal says, with `attempts_made` unchanged (no attempt was made).
pub(crate) fn deferred(
    event: &EventEnvelope,
    endpoint_id: Uuid,
    attempts_made: u32,
    first_attempt_at_ms: i64,
    origin: &SourcePosition,
    refusal: Refusal,
) -> DeliveryTask {
    DeliveryTask {
        event: Some(event.clone()),
        endpoint_id: endpoint_id.to_string(),
        attempt: attempts_made,
        due_at_ms: refusal.retry_at_ms,
        first_attempt_at_ms,
        origin: Some(origin.clone()),
        last_status: 0,
        last_error_class: refusal.reason.as_str().into(),
        last_error: format!("deferred: {}", refusal.reason.as_str().replace('_', " ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hookstream_delivery::Verdict;

    fn outcome(class: ErrorClass, retry_after: Option<Duration>) -> Outcome {
        Outcome {
            verdict: Verdict::Retryable,
            class,
            status: None,
            error: None,
            retry_after,
            latency: Duration::ZERO,
            response: Bytes::new(),
            response_truncated: false,
            response_headers: Vec::new(),
        }
    }

    #[test]
    fn follows_the_schedule_then_gives_up() {
        let cfg = RetryConfig {
            jitter: 0.0,
            ..Default::default()
        };
        let o = outcome(ErrorClass::Http5xx, None);
        let delays: Vec<u64> = (1..=7)
            .map(|a| next_delay(&cfg, a, &o, 0.0).unwrap().as_secs())
            .collect();
        assert_eq!(delays, [5, 300, 1800, 7200, 18000, 36000, 36000]);
        assert_eq!(next_delay(&cfg, 8, &o, 0.0), None, "seven retries, then the DLQ");
        assert_eq!(next_delay(&cfg, 0, &o, 0.0), None);
    }

    #[test]
    fn jitter_stays_within_its_band() {
        let cfg = RetryConfig::default();
        let o = outcome(ErrorClass::Http5xx, None);
        assert_eq!(next_delay(&cfg, 1, &o, -1.0), Some(Duration::from_secs(4)));
        assert_eq!(next_delay(&cfg, 1, &o, 1.0), Some(Duration::from_secs(6)));
        assert_eq!(next_delay(&cfg, 1, &o, f64::NAN), Some(Duration::from_secs(5)));
        assert_eq!(next_delay(&cfg, 1, &o, 1e300), Some(Duration::from_secs(6)));
    }

    #[test]
    fn throttling_and_retry_after_push_the_delay_out_within_the_clamp() {
        let cfg = RetryConfig {
            jitter: 0.0,
            ..Default::default()
        };
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(
            next_delay(&cfg, 1, &outcome(ErrorClass::Timeout, None), 0.0),
            secs(60)
        );
        assert_eq!(
            next_delay(&cfg, 1, &outcome(ErrorClass::Http429, None), 0.0),
            secs(60)
        );
        assert_eq!(
            next_delay(&cfg, 1, &outcome(ErrorClass::Http5xx, secs(10)), 0.0),
            secs(10)
        );
        assert_eq!(
            next_delay(&cfg, 1, &outcome(ErrorClass::Http5xx, secs(10 * 86_400)), 0.0),
            secs(86_400),
            "Retry-After is clamped"
        );
        assert_eq!(
            next_delay(&cfg, 1, &outcome(ErrorClass::Http5xx, Some(Duration::MAX)), 0.0),
            secs(86_400),
            "even an absurd one, without overflow"
        );
    }

    // `Retry-After: 18446744073709552` (seconds) is 18446744073709552000 ms, which `as u64`
    // wrapped to 384 ms, so the header was ignored instead of clamped (found by the
    // `retry_after` fuzz target's property; `fuzz/regressions/retry_after/` keeps the input).
    #[test]
    fn a_huge_retry_after_is_clamped_not_wrapped() {
        let cfg = RetryConfig {
            jitter: 0.0,
            ..Default::default()
        };
        let huge = outcome(
            ErrorClass::Http5xx,
            Some(Duration::from_secs(18_446_744_073_709_552)),
        );
        assert_eq!(next_delay(&cfg, 1, &huge, 0.0), Some(Duration::from_secs(86_400)));
        let unclamped = RetryConfig {
            max_retry_after_ms: u64::MAX,
            ..cfg
        };
        assert_eq!(
            next_delay(&unclamped, 1, &huge, 0.0),
            Some(Duration::from_millis(
                36_000_000 * hookstream_config::HOPS_PER_DELAY
            )),
            "still 1,000 times the longest tier at most"
        );
    }

    #[test]
    fn due_times_saturate_instead_of_wrapping_into_the_past() {
        assert_eq!(due_at_ms(1_000, Duration::from_millis(5)), 1_006);
        assert_eq!(due_at_ms(1_000, Duration::from_millis(u64::MAX)), i64::MAX);
        assert_eq!(due_at_ms(i64::MAX - 1, Duration::from_millis(10)), i64::MAX);
        assert_eq!(due_at_ms(i64::MIN, Duration::ZERO), i64::MIN + 1);
    }
}
