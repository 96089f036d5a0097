//! Waiting for a consumer group to settle, seen from outside it
//! (`hookstream_kafka::GroupView`, which the harness uses as KEDA's scaler would). Its calls
//! block: run them on a thread of their own or in `spawn_blocking`.

use std::time::{Duration, Instant};

use hookstream_config::KafkaConfig;
pub use hookstream_kafka::GroupView;

/// Waiting for a group to settle, on top of `hookstream_kafka::GroupView`.
pub trait Settle {
    /// Waits until the group is stable with `members` members, each with partitions assigned.
    fn wait_until_settled(&self, members: usize, timeout: Duration) -> anyhow::Result<()>;
}

impl Settle for GroupView {
    fn wait_until_settled(&self, members: usize, timeout: Duration) -> anyhow::Result<()> {
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
                self.group()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
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
