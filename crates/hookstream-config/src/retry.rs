//! The `[retry]` section: the retry schedule and its delay-tier topics, and how a record due
//! at any time travels through tiers of fixed delays.
//!
//! Each tier topic has one fixed delay: a record produced to tier `d` is due for its hop at
//! its (broker) timestamp + `d`, so the head of every partition is always its earliest hop,
//! and a consumer that holds the head until then is never late for anything behind it. A
//! record due at any other time (jitter, `Retry-After`, a deferral) reaches its due time by
//! hopping: the longest tier not longer than what remains, then again, and a remainder
//! shorter than the shortest tier is waited out in memory.

use serde::{Deserialize, Serialize};

use crate::{ConfigError, Validate};

const S: u64 = 1000;
const HOUR_MS: u64 = 3_600 * S;
const DAY_MS: u64 = 24 * HOUR_MS;
/// The most `retry.max_retry_after_ms` may be set to.
pub const RETRY_AFTER_CAP_LIMIT_MS: u64 = 7 * DAY_MS;
/// A `Retry-After` is honoured up to this many times the longest tier, so that a record
/// reaches its due time in a bounded number of hops whatever the schedule.
pub const HOPS_PER_DELAY: u64 = 1_000;

/// The retry schedule and its delay-tier topics (one topic per distinct delay).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Hand retryable failures to the delay tiers (false: dead-letter them at once).
    pub enabled: bool,
    /// Delay before attempt 2, 3, … in milliseconds; after the last, the DLQ.
    pub schedule_ms: Vec<u64>,
    /// Each delay is multiplied by a random factor in [1 − jitter, 1 + jitter]; 0 ≤ jitter < 1.
    pub jitter: f64,
    /// Timeouts and HTTP 429 wait at least this long.
    pub min_throttled_delay_ms: u64,
    /// A receiver's `Retry-After` is honoured up to this long (longer values are clamped to
    /// it); at most 7 days, and never more than `HOPS_PER_DELAY` times the longest tier
    /// (`retry_after_cap_ms`).
    pub max_retry_after_ms: u64,
    /// Tier topics are `<prefix><delay>`, e.g. `hookstream.retry.5m`.
    pub topic_prefix: String,
    /// Consumer group of the dispatchers' retry role.
    pub group_id: String,
    /// Partitions of each tier topic when it is created.
    pub partitions: i32,
    /// Records a dispatcher holds in memory waiting for their due time (a remainder shorter
    /// than the shortest tier, or a head taken up just before its hop). Above it, the tier
    /// partitions wait in Kafka.
    pub max_waiting: usize,
    /// Retention given to tier topics when they are created.
    pub tier_retention_ms: u64,
    /// How long the retry role may be down or behind without a record being deleted before
    /// its hop: a tier's retention must be at least its delay plus this, or the dispatcher
    /// refuses to start.
    pub retention_headroom_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            schedule_ms: vec![
                5 * S,
                300 * S,
                1800 * S,
                7200 * S,
                18000 * S,
                36000 * S,
                36000 * S,
            ],
            jitter: 0.2,
            min_throttled_delay_ms: 60 * S,
            max_retry_after_ms: DAY_MS,
            topic_prefix: "hookstream.retry.".into(),
            group_id: "hookstream-dispatcher-retry".into(),
            partitions: 6,
            max_waiting: 10_000,
            tier_retention_ms: 7 * DAY_MS,
            retention_headroom_ms: DAY_MS,
        }
    }
}

/// One delay tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    pub delay_ms: u64,
    pub topic: String,
}

impl RetryConfig {
    /// The tiers: distinct delays, shortest first, with their topic names.
    pub fn tiers(&self) -> Vec<Tier> {
        let mut delays = self.schedule_ms.clone();
        delays.sort_unstable();
        delays.dedup();
        delays
            .into_iter()
            .map(|d| Tier {
                delay_ms: d,
                topic: format!("{}{}", self.topic_prefix, human_delay(d)),
            })
            .collect()
    }

    /// The shortest tier: records due sooner than its delay wait in memory.
    pub fn shortest_tier(&self) -> Option<Tier> {
        self.tiers().into_iter().next()
    }

    /// The tier a record with `remaining_ms` until its due time goes to next: the longest
    /// tier not longer than what remains (after its hop, less remains than before, and never
    /// less than zero); when even the shortest tier is longer, the shortest, whose consumer
    /// takes every record up at once and waits out the remainder in memory. `None` when
    /// there is no tier.
    pub fn next_tier(&self, remaining_ms: u64) -> Option<Tier> {
        let tiers = self.tiers();
        let pos = tiers.partition_point(|t| t.delay_ms <= remaining_ms);
        match pos {
            0 => tiers.into_iter().next(),
            n => tiers.into_iter().nth(n - 1),
        }
    }

    /// The delay of the tier a topic is, if it is one.
    pub fn tier_of_topic(&self, topic: &str) -> Option<u64> {
        self.tiers()
            .into_iter()
            .find(|t| t.topic == topic)
            .map(|t| t.delay_ms)
    }

    /// The tier's label in metrics (`5s`, `5m`, …): its topic without the prefix.
    pub fn tier_label<'a>(&self, topic: &'a str) -> &'a str {
        topic.strip_prefix(self.topic_prefix.as_str()).unwrap_or(topic)
    }

    /// The longest `Retry-After` honoured: `max_retry_after_ms`, or `HOPS_PER_DELAY` times the
    /// longest tier if that is shorter (a schedule of short tiers would otherwise make a far
    /// due time hop thousands of times).
    pub fn retry_after_cap_ms(&self) -> u64 {
        let longest = self.schedule_ms.iter().copied().max().unwrap_or(0);
        self.max_retry_after_ms
            .min(longest.saturating_mul(HOPS_PER_DELAY))
    }

    /// The least retention a tier of `delay_ms` may have.
    pub fn required_retention_ms(&self, delay_ms: u64) -> u64 {
        delay_ms.saturating_add(self.retention_headroom_ms)
    }
}

impl Validate for RetryConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError::new(m));
        if !(0.0..1.0).contains(&self.jitter) {
            return err(format!(
                "retry.jitter must be at least 0 and less than 1, not {}",
                self.jitter
            ));
        }
        if self.max_retry_after_ms < S || self.max_retry_after_ms > RETRY_AFTER_CAP_LIMIT_MS {
            return err(format!(
                "retry.max_retry_after_ms must be between 1000 and {RETRY_AFTER_CAP_LIMIT_MS} (7 days), not {}",
                self.max_retry_after_ms
            ));
        }
        if self.min_throttled_delay_ms > self.max_retry_after_ms {
            return err("retry.min_throttled_delay_ms must not exceed retry.max_retry_after_ms".into());
        }
        if self.topic_prefix.trim().is_empty() {
            return err("retry.topic_prefix must not be empty".into());
        }
        if self.group_id.trim().is_empty() {
            return err("retry.group_id must not be empty".into());
        }
        if self.partitions < 1 {
            return err(format!(
                "retry.partitions must be at least 1, not {}",
                self.partitions
            ));
        }
        if self.max_waiting == 0 || self.max_waiting > 10_000_000 {
            return err(format!(
                "retry.max_waiting must be between 1 and 10000000, not {}",
                self.max_waiting
            ));
        }
        if !self.enabled {
            return Ok(());
        }
        if self.schedule_ms.is_empty() {
            return err(
                "retry.schedule_ms is empty: give at least one delay, or set retry.enabled = false".into(),
            );
        }
        if let Some(d) = self.schedule_ms.iter().find(|d| **d < 100 || **d > 30 * DAY_MS) {
            return err(format!(
                "retry.schedule_ms: every delay must be between 100 ms and 30 days, not {d}"
            ));
        }
        let longest = self.schedule_ms.iter().copied().max().unwrap_or(0);
        if self.tier_retention_ms < self.required_retention_ms(longest) {
            return err(format!(
                "retry.tier_retention_ms ({}) is shorter than the longest tier ({longest} ms) plus retry.retention_headroom_ms ({}): records could be deleted before they are due",
                self.tier_retention_ms, self.retention_headroom_ms
            ));
        }
        Ok(())
    }
}

/// `5000` → `5s`, `300000` → `5m`, `7200000` → `2h`, `1500` → `1500ms`.
pub fn human_delay(ms: u64) -> String {
    match ms {
        0 => "0s".into(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_tiers_are_distinct_delays_with_readable_names() {
        let r = RetryConfig::default();
        let names: Vec<String> = r.tiers().into_iter().map(|t| t.topic).collect();
        assert_eq!(
            names,
            ["5s", "5m", "30m", "2h", "5h", "10h"]
                .map(|d| format!("hookstream.retry.{d}"))
                .to_vec()
        );
        assert_eq!(human_delay(1_500), "1500ms");
        assert_eq!(r.tier_of_topic("hookstream.retry.30m"), Some(1_800_000));
        assert_eq!(r.tier_of_topic("hookstream.events"), None);
        assert_eq!(r.tier_label("hookstream.retry.5m"), "5m");
    }

    #[test]
    fn the_next_tier_is_the_longest_not_longer_than_what_remains() {
        let r = RetryConfig::default();
        let next = |ms: u64| r.next_tier(ms).unwrap().delay_ms;
        assert_eq!(next(0), 5_000, "due now: the shortest tier, waited out in memory");
        assert_eq!(next(4_000), 5_000, "shorter than every tier: the shortest");
        assert_eq!(next(5_000), 5_000);
        assert_eq!(
            next(5_500),
            5_000,
            "a jittered first retry hops 5 s, then waits 0.5 s"
        );
        assert_eq!(next(299_999), 5_000);
        assert_eq!(next(300_000), 300_000);
        assert_eq!(next(13 * 3_600_000), 36_000_000);
        assert_eq!(next(100 * 3_600_000), 36_000_000);
        assert_eq!(
            RetryConfig {
                schedule_ms: vec![],
                ..r
            }
            .next_tier(1),
            None
        );
    }

    #[test]
    fn hops_never_overshoot_and_end_within_the_shortest_tier() {
        // Whatever remains, hopping through next_tier lands at most one shortest-tier delay
        // before the due time and never after it.
        let r = RetryConfig::default();
        let shortest = r.shortest_tier().unwrap().delay_ms;
        for remaining in [
            0,
            1,
            4_999,
            5_000,
            5_001,
            61_000,
            299_999,
            7_199_999,
            86_400_000,
            604_800_000,
        ] {
            let (mut left, mut hops) = (remaining, 0);
            while left >= shortest {
                let d = r.next_tier(left).unwrap().delay_ms;
                assert!(d <= left, "a hop of {d} with {left} left would be late");
                left -= d;
                hops += 1;
            }
            assert!(hops <= 80, "{remaining} ms took {hops} hops");
        }
    }

    #[test]
    fn retry_after_is_capped_by_the_longest_tier_too() {
        assert_eq!(RetryConfig::default().retry_after_cap_ms(), DAY_MS);
        let short = RetryConfig {
            schedule_ms: vec![1_000, 4_000],
            ..Default::default()
        };
        assert_eq!(short.retry_after_cap_ms(), 4_000_000);
    }

    #[test]
    fn validation_names_the_key() {
        let bad = |c: RetryConfig| c.validate().unwrap_err().to_string();
        let d = RetryConfig::default();
        d.validate().unwrap();
        assert!(bad(RetryConfig {
            schedule_ms: vec![],
            ..d.clone()
        })
        .contains("retry.schedule_ms"));
        assert!(bad(RetryConfig {
            jitter: 1.0,
            ..d.clone()
        })
        .contains("retry.jitter"));
        assert!(bad(RetryConfig {
            jitter: -0.1,
            ..d.clone()
        })
        .contains("retry.jitter"));
        assert!(bad(RetryConfig {
            jitter: f64::NAN,
            ..d.clone()
        })
        .contains("retry.jitter"));
        assert!(bad(RetryConfig {
            max_waiting: 0,
            ..d.clone()
        })
        .contains("retry.max_waiting"));
        assert!(bad(RetryConfig {
            partitions: 0,
            ..d.clone()
        })
        .contains("retry.partitions"));
        assert!(bad(RetryConfig {
            max_retry_after_ms: 30 * DAY_MS,
            ..d.clone()
        })
        .contains("max_retry_after_ms"));
        assert!(bad(RetryConfig {
            tier_retention_ms: DAY_MS,
            ..d.clone()
        })
        .contains("retry.tier_retention_ms"));
        RetryConfig {
            schedule_ms: vec![],
            enabled: false,
            ..d
        }
        .validate()
        .unwrap();
    }
}
