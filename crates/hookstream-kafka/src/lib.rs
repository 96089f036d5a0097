//! Kafka plumbing shared by the services: client configuration with safe defaults, topic
//! creation, and the per-partition completion tracker that decides which offset may be stored.

#![forbid(unsafe_code)]

pub mod tracker;

use std::time::Duration;

use hookstream_config::KafkaConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

pub use rdkafka;
pub use tracker::OffsetTracker;

/// Base client configuration: brokers plus the operator's overrides (applied last).
pub fn client_config(cfg: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers);
    for (k, v) in &cfg.client {
        c.set(k, v);
    }
    c
}

/// An idempotent producer: acks=all, no reordering or duplicates on internal retries.
/// A delivery future resolving `Ok` is Kafka's acknowledgement.
pub fn producer_config(cfg: &KafkaConfig, message_timeout: Duration) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.type", "lz4")
        .set("linger.ms", "2")
        .set("message.timeout.ms", message_timeout.as_millis().to_string());
    for (k, v) in &cfg.client {
        c.set(k, v);
    }
    c
}

/// A consumer that only commits offsets the application stored explicitly
/// (`enable.auto.offset.store=false`), with cooperative-sticky assignment.
pub fn consumer_config(cfg: &KafkaConfig, group_id: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers)
        .set("group.id", group_id)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .set("max.poll.interval.ms", "300000");
    for (k, v) in &cfg.client {
        c.set(k, v);
    }
    c
}

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("kafka admin error: {0}")]
    Kafka(#[from] KafkaError),
    #[error("could not create topic {topic}: {code}")]
    Create { topic: String, code: RDKafkaErrorCode },
    #[error("topic {0} has partitions without a leader after 30 s")]
    NotReady(String),
}

/// Creates topics that do not exist yet (existing ones are left as they are).
pub async fn ensure_topics(
    cfg: &KafkaConfig,
    topics: &[(&str, i32)],
    replication: i32,
) -> Result<(), TopicError> {
    let admin: AdminClient<DefaultClientContext> = client_config(cfg).create()?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|(name, partitions)| NewTopic::new(name, *partitions, TopicReplication::Fixed(replication)))
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.create_topics(&new, &opts).await? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(TopicError::Create { topic, code }),
        }
    }
    // Creation is acknowledged before every broker's metadata has the partitions; wait until
    // each one has a leader so the first produce or watermark query does not fail.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for (name, partitions) in topics {
        loop {
            let ready = admin
                .inner()
                .fetch_metadata(Some(name), Duration::from_secs(5))
                .map(|md| {
                    md.topics().iter().any(|t| {
                        t.name() == *name
                            && t.error().is_none()
                            && t.partitions().len() as i32 >= *partitions
                            && t.partitions()
                                .iter()
                                .all(|p| p.leader() >= 0 && p.error().is_none())
                    })
                })
                .unwrap_or(false);
            if ready {
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(TopicError::NotReady(name.to_string()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}
