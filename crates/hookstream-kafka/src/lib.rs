//! Kafka plumbing shared by the services: client configuration with safe defaults, the
//! topics and their checks (at start, and a topic lost while running), the tracked consumer
//! every consumer group runs, the hand-off that produces until Kafka acknowledged, the
//! per-partition completion tracker that decides which offset may be stored, and consumer
//! lag (from inside a group, and from outside it).

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
pub mod group_view;
pub mod probe;
pub mod topics;
mod config;
pub mod lost;
pub mod handoff;
pub mod tracker;
pub mod lag;
pub mod consumer;

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
