//! A consumer group seen from outside, as KEDA's scaler and an operator see it: the group's
//! committed offsets against the topic's watermarks, and its members. The client carries the
//! group's id but never subscribes, so it never joins the group. Its calls block: run them on
//! a thread of their own or in `spawn_blocking`.

use std::time::{Duration, Instant};

use hookstream_config::KafkaConfig;
use hookstream_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use hookstream_kafka::rdkafka::{Offset, TopicPartitionList};

use crate::keda::PartitionOffsets;

/// How long one request to the broker may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// A group's membership at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Membership {
    /// The group is `Stable` (not rebalancing).
    pub stable: bool,
    pub members: usize,
    /// Members whose assignment names at least one topic.
    pub assigned: usize,
}

pub struct GroupView {
    client: BaseConsumer,
    group: String,
    topic: String,
    partitions: i32,
}

impl GroupView {
    pub fn new(kafka: &KafkaConfig, group: &str, topic: &str, partitions: i32) -> anyhow::Result<Self> {
        let mut cfg = hookstream_kafka::client_config(kafka);
        cfg.set("group.id", group);
        Ok(Self {
            client: cfg.create()?,
            group: group.to_string(),
            topic: topic.to_string(),
            partitions,
        })
    }

    /// Every partition's committed offset and watermarks (`None` when the broker did not
    /// answer in time).
    pub fn offsets(&self) -> Option<Vec<PartitionOffsets>> {
        let mut tpl = TopicPartitionList::new();
        for p in 0..self.partitions {
            tpl.add_partition(&self.topic, p);
        }
        let committed = self.client.committed_offsets(tpl, REQUEST_TIMEOUT).ok()?;
        (0..self.partitions)
            .map(|p| {
                let (low, high) = self
                    .client
                    .fetch_watermarks(&self.topic, p, REQUEST_TIMEOUT)
                    .ok()?;
                let committed = match committed.find_partition(&self.topic, p).map(|e| e.offset()) {
                    Some(Offset::Offset(o)) => Some(o),
                    _ => None,
                };
                Some(PartitionOffsets { committed, low, high })
            })
            .collect()
    }

    /// The group's membership (`None` when the broker did not answer, or does not know the
    /// group).
    pub fn membership(&self) -> Option<Membership> {
        let list = self
            .client
            .fetch_group_list(Some(&self.group), REQUEST_TIMEOUT)
            .ok()?;
        let g = list.groups().iter().find(|g| g.name() == self.group)?;
        Some(Membership {
            stable: g.state() == "Stable",
            members: g.members().len(),
            assigned: g
                .members()
                .iter()
                .filter(|m| m.assignment().is_some_and(assigns_topics))
                .count(),
        })
    }

    /// Waits until the group is stable with `members` members, each with partitions assigned.
    pub fn wait_until_settled(&self, members: usize, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self
                .membership()
                .is_some_and(|m| m.stable && m.members == members && m.assigned == members)
            {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "consumer group {} did not settle with {members} members within {timeout:?}",
                self.group
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Whether a member's assignment (Kafka's consumer protocol: an i16 version, then an i32 count
/// of topics) names at least one topic.
fn assigns_topics(assignment: &[u8]) -> bool {
    assignment
        .get(2..6)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .is_some_and(|b| i32::from_be_bytes(b) > 0)
}

/// Waits (off the async runtime) until consumer group `group` has `members` members, each with
/// partitions of `topic` assigned.
pub async fn wait_for_group(
    kafka: &KafkaConfig,
    group: &str,
    topic: &str,
    members: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let view = GroupView::new(kafka, group, topic, 0)?;
    tokio::task::spawn_blocking(move || view.wait_until_settled(members, timeout)).await?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assignment_names_topics_when_its_count_is_positive() {
        assert!(assigns_topics(&[0, 1, 0, 0, 0, 1, 0, 3]));
        assert!(!assigns_topics(&[0, 1, 0, 0, 0, 0]));
        assert!(!assigns_topics(&[0, 1]));
    }
}
