//! A consumer group seen from outside, as KEDA's scaler and an operator see it: the group's
//! committed offsets against the topic's watermarks, its members, and the record each
//! partition would hand out next. The client carries the group's id but never subscribes, so
//! it never joins the group (and it never commits). Its calls block: run them on a thread of
//! their own or in `spawn_blocking`.

use std::time::Duration;

use hookstream_config::KafkaConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message as _, Offset, TopicPartitionList};

/// How long one request to the broker may take, unless `GroupView::timeout` says.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// One partition's offsets as a group sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// The group's committed offset (`None`: nothing committed yet).
    pub committed: Option<i64>,
    /// The low and high watermarks.
    pub low: i64,
    pub high: i64,
}

impl PartitionOffsets {
    /// The lag as the group's own consumers see it (`kafka_consumergroup_lag`): a partition
    /// without a committed offset starts at its low watermark.
    pub fn lag(&self) -> i64 {
        (self.high - self.next()).max(0)
    }

    /// The offset the group reads next.
    pub fn next(&self) -> i64 {
        self.committed.unwrap_or(self.low).max(self.low)
    }
}

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
    timeout: Duration,
}

impl GroupView {
    /// A view of `group` on `topic`, whose first `partitions` partitions it reads.
    pub fn new(kafka: &KafkaConfig, group: &str, topic: &str, partitions: i32) -> Result<Self, KafkaError> {
        let mut cfg = crate::client_config(kafka);
        cfg.set("group.id", group).set("enable.auto.commit", "false");
        Ok(Self {
            client: cfg.create()?,
            group: group.to_string(),
            topic: topic.to_string(),
            partitions,
            timeout: REQUEST_TIMEOUT,
        })
    }

    /// How long each request to the broker may take (the first look-up of a group's
    /// coordinator can take seconds on a broker that never had a group).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// A view of every partition of `topic` (its count read from the cluster; an unknown
    /// topic has none), each request allowed `timeout`.
    pub fn of_topic(
        kafka: &KafkaConfig,
        group: &str,
        topic: &str,
        timeout: Duration,
    ) -> Result<Self, KafkaError> {
        let mut view = Self::new(kafka, group, topic, 0)?.timeout(timeout);
        let md = view.client.fetch_metadata(Some(topic), timeout)?;
        view.partitions = md
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map_or(0, |t| t.partitions().len() as i32);
        Ok(view)
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    /// Every partition's committed offset and watermarks (`None` when the broker did not
    /// answer in time).
    pub fn offsets(&self) -> Option<Vec<PartitionOffsets>> {
        let mut tpl = TopicPartitionList::new();
        for p in 0..self.partitions {
            tpl.add_partition(&self.topic, p);
        }
        let committed = self.client.committed_offsets(tpl, self.timeout).ok()?;
        (0..self.partitions)
            .map(|p| {
                let (low, high) = self.client.fetch_watermarks(&self.topic, p, self.timeout).ok()?;
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
            .fetch_group_list(Some(&self.group), self.timeout)
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

    /// The timestamps (ms since the epoch) of the next record of every partition of
    /// `offsets` (indexed by partition) that lags: the oldest record the group has not
    /// finished there.
    pub fn heads(
        &self,
        kafka: &KafkaConfig,
        offsets: &[PartitionOffsets],
        timeout: Duration,
    ) -> Result<Vec<(i32, i64)>, KafkaError> {
        let positions: Vec<(i32, i64)> = offsets
            .iter()
            .enumerate()
            .filter(|(_, o)| o.lag() > 0)
            .map(|(p, o)| (p as i32, o.next()))
            .collect();
        self.timestamps_at(kafka, &positions, timeout)
    }

    /// The timestamps (ms since the epoch) of the records at the given `(partition, offset)`
    /// positions: the next ones the group would read. A position that cannot be read within
    /// `timeout` (past the end, or deleted by retention) is left out. Reads through a client
    /// of its own, which the group never sees.
    pub fn timestamps_at(
        &self,
        kafka: &KafkaConfig,
        positions: &[(i32, i64)],
        timeout: Duration,
    ) -> Result<Vec<(i32, i64)>, KafkaError> {
        if positions.is_empty() {
            return Ok(Vec::new());
        }
        let mut cfg = crate::client_config(kafka);
        cfg.set("group.id", format!("{}.peek", self.group))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true");
        let reader: BaseConsumer = cfg.create()?;
        let mut tpl = TopicPartitionList::new();
        for (p, o) in positions {
            tpl.add_partition_offset(&self.topic, *p, Offset::Offset(*o))?;
        }
        reader.assign(&tpl)?;
        let mut wanted: std::collections::HashMap<i32, i64> = positions.iter().copied().collect();
        let mut found = Vec::new();
        let deadline = std::time::Instant::now() + timeout;
        while !wanted.is_empty() {
            let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else {
                break;
            };
            match reader.poll(left.min(Duration::from_millis(200))) {
                Some(Ok(m)) if wanted.get(&m.partition()).is_some_and(|o| m.offset() >= *o) => {
                    wanted.remove(&m.partition());
                    if let Some(ts) = m.timestamp().to_millis() {
                        found.push((m.partition(), ts));
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    wanted.remove(&p);
                }
                Some(Err(e)) => return Err(e),
                None => {}
            }
        }
        Ok(found)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assignment_names_topics_when_its_count_is_positive() {
        assert!(assigns_topics(&[0, 1, 0, 0, 0, 1, 0, 3]));
        assert!(!assigns_topics(&[0, 1, 0, 0, 0, 0]));
        assert!(!assigns_topics(&[0, 1]));
    }

    #[test]
    fn lag_counts_from_the_committed_offset_or_the_low_watermark() {
        let p = |committed, low, high| PartitionOffsets { committed, low, high };
        assert_eq!(p(Some(7), 0, 10).lag(), 3);
        assert_eq!(p(None, 4, 10).lag(), 6);
        assert_eq!(p(Some(2), 4, 10).lag(), 6, "committed below what retention kept");
        assert_eq!(p(Some(12), 0, 10).lag(), 0);
    }
}
