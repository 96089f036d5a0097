//! `config`: the services' configuration loader (TOML text over the defaults), and what a
//! service derives from a loaded configuration before it connects anywhere.
//!
//! Input: the file's text (lossy UTF-8). Errors are fine; panics are not.

use std::time::Duration;

use bytes::Bytes;
use hookstream_config::{load_toml_str, RetryConfig, SecretsConfig};
use hookstream_delivery::{ErrorClass, Outcome, Verdict};
use hookstream_store::sealing::Sealer;

pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(cfg) = load_toml_str::<dispatcher::Config>(&text) {
        let _ = cfg.dispatcher.isolation.validate();
        secrets(&cfg.secrets);
        retry(&cfg.retry);
        let _ = hookstream_kafka::consumer_config(&cfg.kafka, &cfg.kafka.group_id);
        let _ = hookstream_kafka::consumer_config(&cfg.kafka, &cfg.retry.group_id);
        let _ = hookstream_kafka::producer_config(&cfg.kafka, Duration::from_secs(5));
    }
    if let Ok(cfg) = load_toml_str::<outbox_relay::Config>(&text) {
        let _ = hookstream_kafka::producer_config(
            &cfg.kafka,
            Duration::from_millis(cfg.relay.produce_timeout_ms),
        );
    }
}

/// The sealing keys, as the dispatcher opens them at start-up (without reading `key_file`:
/// a fuzzer does not get to read files).
fn secrets(cfg: &SecretsConfig) {
    let cfg = SecretsConfig {
        key_file: None,
        ..cfg.clone()
    };
    let _ = Sealer::from_config(&cfg);
}

/// The tiers are distinct and sorted, and every delay of the schedule (with any jitter and
/// `Retry-After`) has a due time and a next tier that does not overshoot it.
fn retry(cfg: &RetryConfig) {
    let tiers = cfg.tiers();
    assert!(
        tiers.windows(2).all(|w| w[0].delay_ms < w[1].delay_ms),
        "tiers sorted and distinct"
    );
    let outcome = Outcome {
        verdict: Verdict::Retryable,
        class: ErrorClass::Timeout,
        status: None,
        error: None,
        retry_after: Some(Duration::MAX),
        latency: Duration::ZERO,
        response: Bytes::new(),
        response_truncated: false,
        response_headers: Vec::new(),
    };
    let attempts = u32::try_from(cfg.schedule_ms.len()).unwrap_or(u32::MAX).min(32);
    for attempt in 0..=attempts.saturating_add(1) {
        for spread in [-1.0, 1.0] {
            let Some(delay) = dispatcher::retry::next_delay(cfg, attempt, &outcome, spread) else {
                continue;
            };
            let _ = dispatcher::retry::due_at_ms(1_700_000_000_000, delay);
            let remaining = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
            let tier = cfg
                .next_tier(remaining)
                .expect("a schedule with a delay has a tier");
            assert!(tier.topic.starts_with(&cfg.topic_prefix));
            // A hop never overshoots what remains, unless nothing shorter exists.
            assert!(tier.delay_ms <= remaining || Some(&tier) == cfg.shortest_tier().as_ref());
        }
    }
}
