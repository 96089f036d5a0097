//! The `[inbox]` section: how one route receives (its source name, the secrets that verify it,
//! the body limit, the ordering key) and how its rows are processed (workers, batches, the
//! deferral and failure bounds, retention). Validated before anything is bound or connected,
//! with messages that name the key.

use std::time::Duration;

use hookstream_config::{ConfigError, Validate};
use hookstream_signing::Secret;
use serde::{Deserialize, Serialize};

/// A signing secret as written in configuration (`whsec_…`). `Debug` never prints it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretText(pub String);

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<&str> for SecretText {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

/// Most rows per claim: PostgreSQL's per-transaction cache of subtransaction ids
/// (`PGPROC_MAX_CACHED_SUBXIDS`).
pub const MAX_BATCH_SIZE: i64 = 64;

/// Longest `write_linger_us` accepted (20 ms).
pub const MAX_WRITE_LINGER_US: u64 = 20_000;

/// Longest `claim_linger_ms` accepted.
pub const MAX_CLAIM_LINGER_MS: u64 = 1_000;

/// One inbox route and its workers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InboxConfig {
    /// Who sends to this route; stored with every row and part of the dedup key
    /// (`UNIQUE (source, message_id)`), so two senders' ids never collide.
    pub source: String,
    /// The endpoint's signing secrets (`whsec_…`). During a rotation list the old and the new
    /// one: a delivery verifies when any signature matches any of them.
    pub secrets: Vec<SecretText>,
    /// Accepted distance between `webhook-timestamp` and this clock, in seconds (the
    /// specification's 5 minutes by default).
    pub tolerance_secs: i64,
    /// Larger bodies are answered 413 without being read further.
    pub max_body_bytes: usize,
    /// A JSON pointer (RFC 6901, such as `/order_id`) into the payload naming the ordering
    /// key. When set, rows of one key are processed one at a time in arrival order, and a
    /// deferred or failing row holds back the later rows of its key (until it is processed or
    /// quarantined). Unset: no ordering, every row is processed as soon as it is due.
    pub ordering_key: Option<String>,
    /// Most rows one INSERT stores (requests that arrive together share one statement and
    /// commit).
    pub write_batch: usize,
    /// Writers storing batches concurrently (while one commits, the next batch gathers).
    pub writers: usize,
    /// Microseconds a batch waits after its first request for more before it is stored (0:
    /// store what has gathered at once). Larger batches cost the database less per row, and
    /// every acknowledgement waits this much longer.
    pub write_linger_us: u64,
    /// Worker tasks processing rows of this source.
    pub workers: usize,
    /// Most rows one worker claims in one transaction (1 to 64: each row that writes runs in
    /// a subtransaction, and PostgreSQL caches 64 subtransaction ids per transaction; past
    /// that every session's snapshots get slower while the batch runs).
    pub batch_size: i64,
    /// How often an idle worker looks for due rows written elsewhere (another process, or a
    /// deferral that became due); rows this process stores wake a worker at once.
    pub poll_interval_ms: u64,
    /// After a claim that was not full, a worker waits this long before it claims again, so
    /// that rows gather into fewer, larger transactions: each one costs a WAL flush that the
    /// acknowledgements' commits queue behind. Processing takes up to this much longer; 0
    /// claims again at once. Not applied with an `ordering_key` (there a claim holds at
    /// most one row per key however long the backlog, and waiting would slow each key).
    pub claim_linger_ms: u64,
    /// A handler running longer than this is abandoned and its row counts as a failure (a
    /// statement it was running goes on in the database until it ends or the connection's
    /// `statement_timeout` cancels it; the row's savepoint is rolled back after that).
    pub handler_timeout_ms: u64,
    /// First wait after a deferral without an explicit time; doubles with every deferral.
    pub defer_backoff_ms: u64,
    /// Ceiling of the deferral backoff.
    pub max_defer_backoff_ms: u64,
    /// Deferrals a row may have; the next one quarantines it with its reason.
    pub max_deferrals: u32,
    /// How long a row may stay pending while deferred (since it was received or replayed),
    /// in seconds; a deferral after that quarantines it.
    pub max_deferral_age_secs: u64,
    /// First wait after a failure; doubles with every failure.
    pub retry_backoff_ms: u64,
    /// Ceiling of the failure backoff.
    pub max_retry_backoff_ms: u64,
    /// Failures a row may have; the last one quarantines it.
    pub max_attempts: u32,
    /// Processed rows are deleted this many hours after processing: the dedup window (a
    /// duplicate arriving later is stored and processed again). 0 keeps them for ever.
    pub retention_hours: u64,
    /// How often processed rows past retention are pruned.
    pub prune_interval_ms: u64,
    /// How often the pending, deferred, quarantined and oldest-age gauges are refreshed.
    pub stats_interval_ms: u64,
}

impl Default for InboxConfig {
    fn default() -> Self {
        Self {
            source: "hookstream".into(),
            secrets: Vec::new(),
            tolerance_secs: hookstream_signing::DEFAULT_TOLERANCE_SECS,
            max_body_bytes: 1024 * 1024,
            ordering_key: None,
            write_batch: 256,
            writers: 2,
            write_linger_us: 0,
            workers: 2,
            batch_size: 50,
            poll_interval_ms: 250,
            claim_linger_ms: 10,
            handler_timeout_ms: 30_000,
            defer_backoff_ms: 1_000,
            max_defer_backoff_ms: 300_000,
            max_deferrals: 20,
            max_deferral_age_secs: 24 * 3600,
            retry_backoff_ms: 1_000,
            max_retry_backoff_ms: 600_000,
            max_attempts: 10,
            retention_hours: 7 * 24,
            prune_interval_ms: 600_000,
            stats_interval_ms: 5_000,
        }
    }
}

impl InboxConfig {
    /// The parsed secrets (call after `validate`; an invalid one is skipped).
    pub fn parsed_secrets(&self) -> Vec<Secret> {
        self.secrets
            .iter()
            .filter_map(|s| Secret::parse(&s.0).ok())
            .collect()
    }

    /// The wait after the `n`th deferral (1-based) without an explicit time.
    pub fn defer_backoff(&self, n: u32) -> Duration {
        doubling(self.defer_backoff_ms, self.max_defer_backoff_ms, n)
    }

    /// The wait after the `n`th failure (1-based).
    pub fn retry_backoff(&self, n: u32) -> Duration {
        doubling(self.retry_backoff_ms, self.max_retry_backoff_ms, n)
    }
}

fn doubling(base_ms: u64, max_ms: u64, n: u32) -> Duration {
    let factor = 1u64.checked_shl(n.saturating_sub(1).min(40)).unwrap_or(u64::MAX);
    Duration::from_millis(base_ms.saturating_mul(factor).min(max_ms))
}

/// Whether `s` is a JSON pointer (RFC 6901): empty, or `/`-separated tokens where `~` is
/// only followed by `0` or `1`.
fn is_json_pointer(s: &str) -> bool {
    if s.is_empty() {
        return true;
    }
    if !s.starts_with('/') {
        return false;
    }
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return false;
        }
    }
    true
}

impl Validate for InboxConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.source.is_empty() || self.source.len() > 200 {
            return Err(ConfigError::new("inbox.source must be 1 to 200 characters"));
        }
        if self.secrets.is_empty() {
            return Err(ConfigError::new(
                "inbox.secrets must list at least one signing secret (whsec_…)",
            ));
        }
        for (i, s) in self.secrets.iter().enumerate() {
            Secret::parse(&s.0).map_err(|e| ConfigError::new(format!("inbox.secrets[{i}]: {e}")))?;
        }
        if !(0..=86_400).contains(&self.tolerance_secs) {
            return Err(ConfigError::new(
                "inbox.tolerance_secs must be between 0 and 86400",
            ));
        }
        if let Some(p) = &self.ordering_key {
            if p.is_empty() || !is_json_pointer(p) {
                return Err(ConfigError::new(format!(
                    "inbox.ordering_key must be a JSON pointer such as \"/order_id\", not {p:?}"
                )));
            }
        }
        let positive = [
            ("inbox.max_body_bytes", self.max_body_bytes as u64),
            ("inbox.write_batch", self.write_batch as u64),
            ("inbox.writers", self.writers as u64),
            ("inbox.workers", self.workers as u64),
            ("inbox.batch_size", self.batch_size.max(0) as u64),
            ("inbox.poll_interval_ms", self.poll_interval_ms),
            ("inbox.handler_timeout_ms", self.handler_timeout_ms),
            ("inbox.defer_backoff_ms", self.defer_backoff_ms),
            ("inbox.max_defer_backoff_ms", self.max_defer_backoff_ms),
            ("inbox.max_deferral_age_secs", self.max_deferral_age_secs),
            ("inbox.retry_backoff_ms", self.retry_backoff_ms),
            ("inbox.max_retry_backoff_ms", self.max_retry_backoff_ms),
            ("inbox.max_attempts", u64::from(self.max_attempts)),
            ("inbox.prune_interval_ms", self.prune_interval_ms),
            ("inbox.stats_interval_ms", self.stats_interval_ms),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::new(format!("{key} must be at least 1")));
        }
        if self.write_linger_us > MAX_WRITE_LINGER_US {
            return Err(ConfigError::new(format!(
                "inbox.write_linger_us must be at most {MAX_WRITE_LINGER_US} (every acknowledgement waits it)"
            )));
        }
        if self.claim_linger_ms > MAX_CLAIM_LINGER_MS {
            return Err(ConfigError::new(format!(
                "inbox.claim_linger_ms must be at most {MAX_CLAIM_LINGER_MS} (processing waits it)"
            )));
        }
        if self.batch_size > MAX_BATCH_SIZE {
            return Err(ConfigError::new(format!(
                "inbox.batch_size must be at most {MAX_BATCH_SIZE} (one subtransaction per row; PostgreSQL caches 64 per transaction)"
            )));
        }
        if self.max_defer_backoff_ms < self.defer_backoff_ms {
            return Err(ConfigError::new(
                "inbox.max_defer_backoff_ms must not be below inbox.defer_backoff_ms",
            ));
        }
        if self.max_retry_backoff_ms < self.retry_backoff_ms {
            return Err(ConfigError::new(
                "inbox.max_retry_backoff_ms must not be below inbox.retry_backoff_ms",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> InboxConfig {
        InboxConfig {
            secrets: vec![SecretText(Secret::generate().expose())],
            ..Default::default()
        }
    }

    #[test]
    fn defaults_with_a_secret_are_valid_and_debug_hides_it() {
        let cfg = valid();
        cfg.validate().unwrap();
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("whsec_"), "{shown}");
        assert_eq!(cfg.parsed_secrets().len(), 1);
    }

    #[test]
    fn refusals_name_the_key() {
        let cases: Vec<(InboxConfig, &str)> = vec![
            (InboxConfig::default(), "inbox.secrets"),
            (
                InboxConfig {
                    secrets: vec!["whsec_short".into()],
                    ..valid()
                },
                "inbox.secrets[0]",
            ),
            (
                InboxConfig {
                    source: String::new(),
                    ..valid()
                },
                "inbox.source",
            ),
            (
                InboxConfig {
                    ordering_key: Some("order_id".into()),
                    ..valid()
                },
                "inbox.ordering_key",
            ),
            (
                InboxConfig {
                    ordering_key: Some("/a~2".into()),
                    ..valid()
                },
                "inbox.ordering_key",
            ),
            (
                InboxConfig {
                    write_linger_us: MAX_WRITE_LINGER_US + 1,
                    ..valid()
                },
                "inbox.write_linger_us",
            ),
            (
                InboxConfig {
                    claim_linger_ms: MAX_CLAIM_LINGER_MS + 1,
                    ..valid()
                },
                "inbox.claim_linger_ms",
            ),
            (
                InboxConfig {
                    workers: 0,
                    ..valid()
                },
                "inbox.workers",
            ),
            (
                InboxConfig {
                    batch_size: 65,
                    ..valid()
                },
                "inbox.batch_size",
            ),
            (
                InboxConfig {
                    max_defer_backoff_ms: 1,
                    ..valid()
                },
                "inbox.max_defer_backoff_ms",
            ),
        ];
        for (cfg, key) in cases {
            let err = cfg.validate().expect_err(key).to_string();
            assert!(err.contains(key), "{err} should name {key}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_ceiling() {
        let cfg = InboxConfig {
            defer_backoff_ms: 100,
            max_defer_backoff_ms: 1_000,
            ..valid()
        };
        let waits: Vec<u128> = (1..=6).map(|n| cfg.defer_backoff(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(cfg.defer_backoff(u32::MAX).as_millis(), 1000);
        assert_eq!(cfg.defer_backoff(0).as_millis(), 100);
    }

    #[test]
    fn loads_from_toml_like_every_section() {
        #[derive(Debug, Default, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        struct Cfg {
            inbox: InboxConfig,
        }
        impl Validate for Cfg {
            fn validate(&self) -> Result<(), ConfigError> {
                self.inbox.validate()
            }
        }
        let secret = Secret::generate().expose();
        let cfg: Cfg = hookstream_config::load_toml_str(&format!(
            "[inbox]\nsource = \"shop\"\nsecrets = [\"{secret}\"]\nordering_key = \"/order/id\"\n"
        ))
        .unwrap();
        assert_eq!(cfg.inbox.source, "shop");
        assert_eq!(cfg.inbox.ordering_key.as_deref(), Some("/order/id"));
        let err = hookstream_config::load_toml_str::<Cfg>("[inbox]\nsecretz = []\n").unwrap_err();
        assert!(err.to_string().contains("secretz"), "{err}");
    }
}
