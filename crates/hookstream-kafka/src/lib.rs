//! Kafka plumbing shared by the services: client configuration with safe defaults, the
//! topics and their checks (at start, and a topic lost while running), the tracked consumer
//! every consumer group runs, the hand-off that produces until Kafka acknowledged, the
//! per-partition completion tracker that decides which offset may be stored, and consumer
//! lag (from inside a group, and from outside it).

#![forbid(unsafe_code)]

mod config;
pub mod consumer;
pub mod group_view;
pub mod handoff;
pub mod lag;
pub mod lost;
pub mod probe;
pub mod topics;
pub mod tracker;

pub use config::{client_config, consumer_config, producer_config};
pub use consumer::{ConsumerError, ConsumerSettings, Done, Fatal, Handler, Record, Start};
pub use group_view::{GroupView, Membership, PartitionOffsets};
pub use handoff::{produce_until_acked, HandoffError, HandoffProducer};
pub use lag::ConsumerMetrics;
pub use lost::TopicLoss;
pub use probe::{probe, probe_at_start, ProbeError, PROBE_TIMEOUT};
pub use rdkafka;
pub use topics::{ensure_topics, TopicError, TopicSpec};
pub use tracker::OffsetTracker;
