//! A Kafka cluster's brokers as the fault scenarios see them: which node leads most of a
//! topic's partitions (the one to kill), and whether every partition has all its replicas
//! in sync again (when a rolling restart may take the next node). Metadata requests block:
//! the async functions run them on the blocking pool.

use std::time::{Duration, Instant};

use hookstream_config::KafkaConfig;
use hookstream_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use hookstream_kafka::rdkafka::metadata::Metadata;

/// Who leads a topic's partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leading {
    /// The node leading the most partitions (the lowest id of a tie).
    pub node: i32,
    pub led: usize,
    pub partitions: usize,
}

fn metadata(kafka: &KafkaConfig, topic: &str) -> anyhow::Result<Metadata> {
    let client: BaseConsumer = hookstream_kafka::client_config(kafka).create()?;
    Ok(client.fetch_metadata(Some(topic), Duration::from_secs(10))?)
}

/// Per partition of `topic`: (leader, replicas, in-sync replicas).
fn partitions(kafka: &KafkaConfig, topic: &str) -> anyhow::Result<Vec<(i32, usize, usize)>> {
    let md = metadata(kafka, topic)?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(|| anyhow::anyhow!("no metadata for topic {topic}"))?;
    anyhow::ensure!(t.error().is_none(), "topic {topic}: {:?}", t.error());
    Ok(t.partitions()
        .iter()
        .map(|p| (p.leader(), p.replicas().len(), p.isr().len()))
        .collect())
}

/// The busiest leader of (leader, …) rows.
fn busiest(rows: &[(i32, usize, usize)]) -> Option<Leading> {
    let mut led = std::collections::BTreeMap::<i32, usize>::new();
    for (leader, _, _) in rows.iter().filter(|r| r.0 >= 0) {
        *led.entry(*leader).or_default() += 1;
    }
    // max_by_key keeps the last of equals: go from the highest id down so the lowest wins.
    let (&node, &n) = led.iter().rev().max_by_key(|(_, &n)| n)?;
    Some(Leading {
        node,
        led: n,
        partitions: rows.len(),
    })
}

/// The node leading most of `topic`'s partitions now.
pub async fn busiest_leader(kafka: &KafkaConfig, topic: &str) -> anyhow::Result<Leading> {
    let (kafka, topic) = (kafka.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let rows = partitions(&kafka, &topic)?;
        busiest(&rows).ok_or_else(|| anyhow::anyhow!("no partition of {topic} has a leader"))
    })
    .await?
}

/// Waits until every partition of `topic` has a leader and all its replicas in sync; how long
/// that took. An error after `timeout`.
pub async fn wait_in_sync(kafka: &KafkaConfig, topic: &str, timeout: Duration) -> anyhow::Result<Duration> {
    let (kafka, topic) = (kafka.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let since = Instant::now();
        loop {
            // A node just started may refuse a connection for a moment: try again.
            if let Ok(rows) = partitions(&kafka, &topic) {
                if rows
                    .iter()
                    .all(|&(leader, replicas, isr)| leader >= 0 && isr == replicas)
                {
                    return Ok(since.elapsed());
                }
            }
            anyhow::ensure!(
                since.elapsed() < timeout,
                "{topic} still has partitions with replicas out of sync after {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    })
    .await?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_leader_leads_most_and_a_tie_takes_the_lowest_node() {
        let rows = [(2, 3, 3), (1, 3, 3), (2, 3, 2), (3, 3, 3), (-1, 3, 1)];
        assert_eq!(
            busiest(&rows),
            Some(Leading {
                node: 2,
                led: 2,
                partitions: 5
            })
        );
        let tie = [(3, 3, 3), (1, 3, 3)];
        assert_eq!(busiest(&tie).map(|l| l.node), Some(1));
        assert_eq!(busiest(&[(-1, 3, 0)]), None);
    }
}
