//! librdkafka client configuration with Hookstream's safe defaults. The operator's
//! `kafka.client` overrides are applied last; the safety settings themselves cannot be
//! overridden (`hookstream_config::PROTECTED_CLIENT_KEYS`, refused at load time).

use std::time::Duration;

use hookstream_config::KafkaConfig;
use rdkafka::config::ClientConfig;

/// The brokers, then `kafka.security`, then the operator's overrides (applied last).
fn base(cfg: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers)
        // A producer's default is true: on a broker with auto-creation on, a hand-off to a
        // deleted topic would create it with the broker's defaults (one partition, no
        // append-time timestamps, a 1 MB limit) instead of finding it lost (`lost.rs`).
        .set("allow.auto.create.topics", "false");
    match cfg.security.client_properties() {
        Ok(props) => {
            for (k, v) in props {
                c.set(k, v);
            }
        }
        // Validated at start; a secret file that vanished since is the operator's to see.
        Err(e) => tracing::error!(error = %e, "kafka.security cannot be applied"),
    }
    c
}

fn overrides(c: &mut ClientConfig, cfg: &KafkaConfig) {
    for (k, v) in &cfg.client {
        c.set(k, v);
    }
}

/// Base client configuration: brokers, security, and the operator's overrides (applied last).
pub fn client_config(cfg: &KafkaConfig) -> ClientConfig {
    let mut c = base(cfg);
    overrides(&mut c, cfg);
    c
}

/// An idempotent producer: acks=all, no reordering or duplicates on internal retries.
/// A delivery future resolving `Ok` is Kafka's acknowledgement.
pub fn producer_config(cfg: &KafkaConfig, message_timeout: Duration) -> ClientConfig {
    let mut c = base(cfg);
    c.set("compression.type", "lz4")
        .set("linger.ms", "2")
        // Hand-offs carry an events record and more (`topics::HANDOFF_RECORD_BYTES`); the
        // topic's own limit still decides.
        .set(
            "message.max.bytes",
            crate::topics::HANDOFF_RECORD_BYTES.to_string(),
        )
        .set("message.timeout.ms", message_timeout.as_millis().to_string());
    overrides(&mut c, cfg);
    c.set("enable.idempotence", "true").set("acks", "all");
    c
}

/// A consumer that only commits offsets the application stored explicitly
/// (`enable.auto.offset.store=false`), with cooperative-sticky assignment. The session
/// timeout is the broker's least by default (6 s): a member killed without leaving has its
/// partitions reassigned that soon after its last heartbeat. The other members learn of the
/// rebalance at their next heartbeat, so a short heartbeat (250 ms, four small requests a
/// second per member) keeps that part of the hand-over short too.
pub fn consumer_config(cfg: &KafkaConfig, group_id: &str) -> ClientConfig {
    let mut c = base(cfg);
    c.set("auto.commit.interval.ms", "1000")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "250")
        .set("max.poll.interval.ms", "300000");
    overrides(&mut c, cfg);
    c.set("group.id", group_id)
        .set("enable.auto.commit", "true")
        .set("enable.auto.offset.store", "false")
        .set("partition.assignment.strategy", "cooperative-sticky");
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that may create topics would, on a broker with auto-creation on, make a deleted
    /// topic again with the broker's defaults instead of finding it lost (`lost.rs`).
    #[test]
    fn no_client_creates_topics() {
        let cfg = KafkaConfig::default();
        for (what, c) in [
            ("client", client_config(&cfg)),
            ("producer", producer_config(&cfg, Duration::from_secs(30))),
            ("consumer", consumer_config(&cfg, "g")),
        ] {
            assert_eq!(c.get("allow.auto.create.topics"), Some("false"), "{what}");
        }
    }
}
