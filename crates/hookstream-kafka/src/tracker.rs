//! Exact offset tracking for consumers that process many messages of a partition at once.
//!
//! Kafka commits one offset per partition: "everything before this is done". With many
//! messages in flight, they finish out of order, so the committable offset is the lowest
//! offset still outstanding (or one past the highest begun, when none is). Storing anything
//! higher would lose the unfinished messages on a crash (invariant 1).
//!
//! Each assignment of a partition gets a new epoch; completions from an earlier epoch (work
//! that was running when the partition was revoked) are ignored, because the partition's new
//! owner redoes that work from the last committed offset.

use std::collections::{BTreeMap, HashMap};

/// One partition's outstanding offsets.
#[derive(Debug)]
struct PartitionState {
    epoch: u64,
    /// Outstanding offsets and their record timestamps (ms), for lag in seconds.
    outstanding: BTreeMap<i64, i64>,
    /// One past the highest offset begun; what may be stored when nothing is outstanding.
    next: i64,
    /// The last offset handed back as committable, so callers store only on progress.
    stored: i64,
}

/// Tracks outstanding offsets per (topic, partition).
#[derive(Debug, Default)]
pub struct OffsetTracker {
    partitions: HashMap<(String, i32), PartitionState>,
    next_epoch: u64,
}

/// A ticket for one begun message; hand it back to `complete`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    epoch: u64,
}

impl OffsetTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets a partition (on revoke). Unfinished work of it stores nothing.
    pub fn revoke(&mut self, topic: &str, partition: i32) {
        self.partitions.remove(&(topic.to_string(), partition));
    }

    /// Forgets every partition (on shutdown or a lost assignment).
    pub fn revoke_all(&mut self) {
        self.partitions.clear();
    }

    /// Records that a message is being processed.
    /// Records that a message is being processed; `timestamp_ms` is the record's timestamp.
    pub fn begin(&mut self, topic: &str, partition: i32, offset: i64, timestamp_ms: i64) -> Ticket {
        let next_epoch = &mut self.next_epoch;
        let state = self
            .partitions
            .entry((topic.to_string(), partition))
            .or_insert_with(|| {
                *next_epoch += 1;
                PartitionState {
                    epoch: *next_epoch,
                    outstanding: BTreeMap::new(),
                    next: offset,
                    stored: offset,
                }
            });
        state.outstanding.insert(offset, timestamp_ms);
        state.next = state.next.max(offset + 1);
        Ticket {
            topic: topic.to_string(),
            partition,
            offset,
            epoch: state.epoch,
        }
    }

    /// Marks a message done. Returns the offset to store when the committable position
    /// advanced, `None` otherwise (including for stale tickets from a revoked assignment).
    pub fn complete(&mut self, ticket: &Ticket) -> Option<i64> {
        let state = self
            .partitions
            .get_mut(&(ticket.topic.clone(), ticket.partition))?;
        if state.epoch != ticket.epoch || state.outstanding.remove(&ticket.offset).is_none() {
            return None;
        }
        let committable = state
            .outstanding
            .first_key_value()
            .map(|(o, _)| *o)
            .unwrap_or(state.next);
        if committable > state.stored {
            state.stored = committable;
            Some(committable)
        } else {
            None
        }
    }

    /// Messages begun and not yet completed on a partition.
    pub fn depth(&self, topic: &str, partition: i32) -> usize {
        self.partitions
            .get(&(topic.to_string(), partition))
            .map_or(0, |s| s.outstanding.len())
    }

    /// Messages in flight over all partitions.
    pub fn total_depth(&self) -> usize {
        self.partitions.values().map(|s| s.outstanding.len()).sum()
    }

    /// Every tracked partition's state, for the depth and lag gauges.
    pub fn snapshot(&self) -> Vec<PartitionSnapshot> {
        self.partitions
            .iter()
            .map(|((topic, partition), s)| PartitionSnapshot {
                topic: topic.clone(),
                partition: *partition,
                depth: s.outstanding.len(),
                oldest_timestamp_ms: s.outstanding.values().min().copied(),
            })
            .collect()
    }
}

/// One partition as the gauges see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSnapshot {
    pub topic: String,
    pub partition: i32,
    /// Messages begun and not completed.
    pub depth: usize,
    /// Timestamp of the oldest of them.
    pub oldest_timestamp_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_only_the_lowest_contiguous_completed_offset_plus_one() {
        let mut t = OffsetTracker::new();
        let a = t.begin("e", 0, 10, 0);
        let b = t.begin("e", 0, 11, 0);
        let c = t.begin("e", 0, 12, 0);
        assert_eq!(t.complete(&c), None, "10 and 11 are still running");
        assert_eq!(t.complete(&a), Some(11));
        assert_eq!(t.complete(&b), Some(13));
        assert_eq!(t.depth("e", 0), 0);
    }

    #[test]
    fn partitions_are_independent() {
        let mut t = OffsetTracker::new();
        let a = t.begin("e", 0, 5, 0);
        let b = t.begin("e", 1, 7, 0);
        assert_eq!(t.complete(&b), Some(8));
        assert_eq!(t.depth("e", 0), 1);
        assert_eq!(t.complete(&a), Some(6));
    }

    #[test]
    fn completions_from_before_a_revoke_store_nothing() {
        let mut t = OffsetTracker::new();
        let old = t.begin("e", 0, 3, 0);
        t.revoke("e", 0);
        assert_eq!(t.complete(&old), None);
        // Re-assigned: the same offset is consumed again under a new epoch.
        let again = t.begin("e", 0, 3, 0);
        assert_eq!(
            t.complete(&old),
            None,
            "a stale ticket must not complete new work"
        );
        assert_eq!(t.complete(&again), Some(4));
    }

    #[test]
    fn duplicate_completion_is_ignored() {
        let mut t = OffsetTracker::new();
        let a = t.begin("e", 0, 0, 0);
        let _b = t.begin("e", 0, 1, 0);
        assert_eq!(t.complete(&a), Some(1));
        assert_eq!(t.complete(&a), None);
        assert_eq!(t.total_depth(), 1);
    }
}
