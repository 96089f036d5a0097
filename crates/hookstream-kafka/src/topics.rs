//! Hookstream's topics: what each must look like (partitions, replication, retention, and for
//! the retry tiers the broker's append time as timestamp), creating the missing ones, and
//! checking existing ones, so that a tier never deletes a record before it is due.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hookstream_config::{KafkaConfig, RetryConfig, TopicSettings};
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::client_config;

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("kafka admin error: {0}")]
    Kafka(#[from] KafkaError),
    #[error("could not create topic {topic}: {code}")]
    Create { topic: String, code: RDKafkaErrorCode },
    #[error("could not read or change the configuration of topic {topic}: {code}")]
    Config { topic: String, code: RDKafkaErrorCode },
    #[error("topic {0} has partitions without a leader after 30 s")]
    NotReady(String),
    #[error("topic {0} does not exist: `hookstream topics create` makes every topic Hookstream uses")]
    Missing(String),
    #[error(
        "kafka refuses this client access to topic {0}: grant its principal the ACLs in docs/deploy/cloud.md"
    )]
    Unauthorized(String),
    #[error(
        "retry tier topic {topic} keeps records {retention} (retention.ms={retention_ms}), less than its delay {delay} plus \
         retry.retention_headroom_ms: a record could be deleted before it is due; give it at least retention.ms={required_ms} \
         (`hookstream topics create --fix` does it)"
    )]
    RetentionTooShort {
        topic: String,
        retention_ms: i64,
        retention: String,
        delay: String,
        required_ms: u64,
    },
    #[error(
        "topic {topic} has {have} partitions but the configuration asks for {want}: Kafka cannot take partitions \
         away, and adding them is an operator's decision (aggregates move to other partitions): add them with \
         kafka-topics.sh --alter --partitions {want}, or set the configuration to {have}"
    )]
    FewerPartitions { topic: String, have: i32, want: i32 },
    #[error("internal error: {0}")]
    Internal(String),
}

impl TopicError {
    /// Whether an operator must change something (restarting will not help).
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            TopicError::RetentionTooShort { .. }
                | TopicError::FewerPartitions { .. }
                | TopicError::Missing(_)
                | TopicError::Unauthorized(_)
        )
    }
}

/// What a topic must look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    /// -1: the broker's default.
    pub replication: i32,
    /// Topic-level configuration set at creation (and by `fix`).
    pub configs: Vec<(String, String)>,
}

impl TopicSpec {
    pub fn new(name: impl Into<String>, partitions: i32) -> Self {
        Self {
            name: name.into(),
            partitions,
            replication: -1,
            configs: Vec::new(),
        }
    }

    pub fn replication(mut self, replication: i32) -> Self {
        self.replication = replication;
        self
    }

    pub fn config(mut self, key: &str, value: impl ToString) -> Self {
        self.configs.push((key.to_string(), value.to_string()));
        self
    }

    /// Replication and `min.insync.replicas` as `kafka.topic_settings` says (-1: the
    /// broker's default, so no topic-level setting).
    fn replicated(self, s: &TopicSettings) -> Self {
        let spec = self.replication(s.replication_factor);
        match s.min_insync_replicas {
            n if n > 0 => spec.config("min.insync.replicas", n),
            _ => spec,
        }
    }
}

/// The largest record the retry tiers and the DLQ accept, and the least a producer's
/// `message.max.bytes` may be (`hookstream_config`, where configuration checks it).
pub use hookstream_config::HANDOFF_RECORD_BYTES;

/// The events, DLQ and attempts topics, as `kafka.topic_settings` says.
pub fn main_specs(kafka: &KafkaConfig) -> Vec<TopicSpec> {
    let s = &kafka.topic_settings;
    let spec = |name: &str, retention: i64| {
        TopicSpec::new(name, s.partitions)
            .replicated(s)
            .config("cleanup.policy", "delete")
            .config("retention.ms", retention)
    };
    vec![
        spec(&kafka.topics.events, s.events_retention_ms),
        spec(&kafka.topics.dlq, s.dlq_retention_ms).config("max.message.bytes", HANDOFF_RECORD_BYTES),
        spec(&kafka.topics.attempts, s.attempts_retention_ms),
    ]
}

/// The retry tiers: `retry.partitions` each, `retry.tier_retention_ms`, and the broker's
/// append time as the record timestamp, so a record's hop is due exactly its tier's delay
/// after it was appended and a partition's head is always its earliest hop.
pub fn tier_specs(kafka: &KafkaConfig, retry: &RetryConfig) -> Vec<TopicSpec> {
    retry
        .tiers()
        .into_iter()
        .map(|t| {
            TopicSpec::new(t.topic, retry.partitions)
                .replicated(&kafka.topic_settings)
                .config("cleanup.policy", "delete")
                .config("retention.ms", retry.tier_retention_ms)
                .config("message.timestamp.type", "LogAppendTime")
                .config("max.message.bytes", HANDOFF_RECORD_BYTES)
        })
        .collect()
}

fn admin(cfg: &KafkaConfig) -> Result<AdminClient<DefaultClientContext>, TopicError> {
    Ok(client_config(cfg).create()?)
}

fn options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)))
}

/// Creates the topics that do not exist yet, with their configuration (existing ones are
/// left as they are: `check_tiers` and `fix` look at those), and waits until every
/// partition has a leader.
pub async fn ensure_topics(cfg: &KafkaConfig, specs: &[TopicSpec]) -> Result<(), TopicError> {
    let admin = admin(cfg)?;
    let new: Vec<NewTopic<'_>> = specs
        .iter()
        .map(|s| {
            s.configs.iter().fold(
                NewTopic::new(&s.name, s.partitions, TopicReplication::Fixed(s.replication)),
                |t, (k, v)| t.set(k, v),
            )
        })
        .collect();
    let mut existing = std::collections::HashSet::new();
    for result in admin.create_topics(&new, &options()).await? {
        match result {
            Ok(_) => {}
            Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => {
                existing.insert(topic);
            }
            Err((topic, code)) => return Err(TopicError::Create { topic, code }),
        }
    }
    // Creation is acknowledged before every broker's metadata has the partitions; wait until
    // each one has a leader so the first produce or watermark query does not fail. Metadata
    // calls block: off the runtime's worker threads.
    let cfg = cfg.clone();
    let wanted: Vec<(String, i32, bool)> = specs
        .iter()
        .map(|s| (s.name.clone(), s.partitions, existing.contains(&s.name)))
        .collect();
    tokio::task::spawn_blocking(move || wait_for_leaders(&cfg, &wanted))
        .await
        .map_err(|e| TopicError::Internal(e.to_string()))?
}

/// Waits until every partition of each `(topic, partitions, existed before)` has a leader; a
/// topic that existed before with fewer partitions than asked is an error at once.
fn wait_for_leaders(cfg: &KafkaConfig, topics: &[(String, i32, bool)]) -> Result<(), TopicError> {
    let consumer: BaseConsumer = client_config(cfg).create()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    for (name, partitions, existed) in topics {
        loop {
            let md = consumer.fetch_metadata(Some(name), Duration::from_secs(5)).ok();
            let topic = md.as_ref().and_then(|md| {
                md.topics()
                    .iter()
                    .find(|t| t.name() == name && t.error().is_none())
            });
            let led = topic.is_some_and(|t| {
                !t.partitions().is_empty()
                    && t.partitions()
                        .iter()
                        .all(|p| p.leader() >= 0 && p.error().is_none())
            });
            let have = topic.map_or(0, |t| t.partitions().len() as i32);
            // An existing topic with fewer partitions never gets more by waiting.
            if *existed && led && have < *partitions {
                return Err(TopicError::FewerPartitions {
                    topic: name.clone(),
                    have,
                    want: *partitions,
                });
            }
            if led && have >= *partitions {
                break;
            }
            if Instant::now() > deadline {
                return Err(TopicError::NotReady(name.clone()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// Refuses to go on when one of `names` does not exist or this client may not use it, so
/// that a service finds out at start, saying which topic, instead of retrying a hand-off to
/// it for ever (a stuck partition behind a green health check). Asks for the topics'
/// metadata, which needs no more than the access a service has to use the topic anyway.
pub async fn check_exist(cfg: &KafkaConfig, names: &[String]) -> Result<(), TopicError> {
    let cfg = cfg.clone();
    let names = names.to_vec();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = client_config(&cfg).create()?;
        names
            .iter()
            .try_for_each(|name| exists(&consumer, name, Duration::from_secs(10)))
    })
    .await
    .map_err(|e| TopicError::Internal(e.to_string()))?
}

/// Whether the broker has topic `name` and lets this client use it, from its metadata
/// (blocking, at most `timeout`): `Missing`, `Unauthorized`, or another error when it cannot
/// tell.
pub(crate) fn exists(consumer: &BaseConsumer, name: &str, timeout: Duration) -> Result<(), TopicError> {
    let md = consumer.fetch_metadata(Some(name), timeout)?;
    let code = md
        .topics()
        .iter()
        .find(|t| t.name() == name)
        .map(|t| t.error().map(RDKafkaErrorCode::from));
    match code {
        // Present (a partition without a leader yet is waited for by the producer).
        Some(None | Some(RDKafkaErrorCode::LeaderNotAvailable)) => Ok(()),
        None | Some(Some(RDKafkaErrorCode::UnknownTopicOrPartition)) => {
            Err(TopicError::Missing(name.to_string()))
        }
        Some(Some(RDKafkaErrorCode::TopicAuthorizationFailed)) => {
            Err(TopicError::Unauthorized(name.to_string()))
        }
        Some(Some(code)) => Err(TopicError::Config {
            topic: name.to_string(),
            code,
        }),
    }
}

/// The current configuration of each topic (name → key → value); a missing topic is an error.
pub async fn describe(
    cfg: &KafkaConfig,
    names: &[String],
) -> Result<HashMap<String, HashMap<String, String>>, TopicError> {
    let admin = admin(cfg)?;
    let resources: Vec<ResourceSpecifier<'_>> = names.iter().map(|n| ResourceSpecifier::Topic(n)).collect();
    let mut out = HashMap::new();
    for (name, result) in names
        .iter()
        .zip(admin.describe_configs(&resources, &options()).await?)
    {
        match result {
            Ok(resource) => {
                let entries = resource
                    .entries
                    .iter()
                    .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
                    .collect();
                out.insert(name.clone(), entries);
            }
            Err(RDKafkaErrorCode::UnknownTopicOrPartition) => return Err(TopicError::Missing(name.clone())),
            Err(code) => {
                return Err(TopicError::Config {
                    topic: name.clone(),
                    code,
                })
            }
        }
    }
    Ok(out)
}

/// Refuses tiers whose retention is shorter than their delay plus the headroom
/// (`RetryConfig::required_retention_ms`). Warns about tiers whose timestamps are the
/// producers' (`CreateTime`): their hops then follow the producers' clocks. Returns each
/// tier topic's retention in ms (-1: unlimited), for the retention guard's gauge.
pub async fn check_tiers(kafka: &KafkaConfig, retry: &RetryConfig) -> Result<Vec<(String, i64)>, TopicError> {
    let tiers = retry.tiers();
    let names: Vec<String> = tiers.iter().map(|t| t.topic.clone()).collect();
    let configs = describe(kafka, &names).await?;
    let mut retentions = Vec::with_capacity(tiers.len());
    for tier in &tiers {
        let Some(c) = configs.get(&tier.topic) else {
            return Err(TopicError::Missing(tier.topic.clone()));
        };
        let retention_ms: i64 = c.get("retention.ms").and_then(|v| v.parse().ok()).unwrap_or(-1);
        let required = retry.required_retention_ms(tier.delay_ms);
        if retention_ms >= 0 && (retention_ms as u64) < required {
            return Err(TopicError::RetentionTooShort {
                topic: tier.topic.clone(),
                retention_ms,
                retention: hookstream_config::human_delay(retention_ms as u64),
                delay: hookstream_config::human_delay(tier.delay_ms),
                required_ms: required,
            });
        }
        if c.get("message.timestamp.type").map(String::as_str) != Some("LogAppendTime") {
            tracing::warn!(topic = %tier.topic,
                "retry tier uses the producers' timestamps (CreateTime): hops follow the dispatchers' clocks; \
                 `hookstream topics create --fix` sets LogAppendTime");
        }
        retentions.push((tier.topic.clone(), retention_ms));
    }
    Ok(retentions)
}

/// What `fix` changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    pub topic: String,
    pub key: String,
    pub from: Option<String>,
    pub to: String,
}

/// Brings existing topics' configuration in line with their specs (retention, timestamp
/// type, record size limit). Kafka's AlterConfigs replaces a topic's whole dynamic configuration, so every key
/// of the spec is written, together with the topic's other dynamic settings as they were.
pub async fn fix(cfg: &KafkaConfig, specs: &[TopicSpec]) -> Result<Vec<Fixed>, TopicError> {
    let admin = admin(cfg)?;
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let resources: Vec<ResourceSpecifier<'_>> = names.iter().map(|n| ResourceSpecifier::Topic(n)).collect();
    let described = admin.describe_configs(&resources, &options()).await?;
    let mut changes = Vec::new();
    for (spec, result) in specs.iter().zip(described) {
        let resource = result.map_err(|code| TopicError::Config {
            topic: spec.name.clone(),
            code,
        })?;
        let current = resource.entry_map();
        let differs: Vec<Fixed> = spec
            .configs
            .iter()
            .filter(|(k, v)| current.get(k.as_str()).and_then(|e| e.value.as_deref()) != Some(v.as_str()))
            .map(|(k, v)| Fixed {
                topic: spec.name.clone(),
                key: k.clone(),
                from: current.get(k.as_str()).and_then(|e| e.value.clone()),
                to: v.clone(),
            })
            .collect();
        if differs.is_empty() {
            continue;
        }
        // Keep the topic's other dynamic settings (AlterConfigs resets what it is not given).
        let mut keep: Vec<(String, String)> = resource
            .entries
            .iter()
            .filter(|e| {
                e.source == rdkafka::admin::ConfigSource::DynamicTopic
                    && !e.is_sensitive
                    && !spec.configs.iter().any(|(k, _)| *k == e.name)
            })
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .collect();
        keep.extend(spec.configs.iter().cloned());
        let alter = keep.iter().fold(
            AlterConfig::new(ResourceSpecifier::Topic(&spec.name)),
            |a, (k, v)| a.set(k, v),
        );
        for result in admin.alter_configs([&alter], &options()).await? {
            result.map_err(|(_, code)| TopicError::Config {
                topic: spec.name.clone(),
                code,
            })?;
        }
        changes.extend(differs);
    }
    Ok(changes)
}
