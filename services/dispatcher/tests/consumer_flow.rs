//! The tracked consumer's flow control, on real Kafka: a member whose work is stuck (every
//! permit held, the ready queue full) stops taking records, then pauses the partitions that
//! feed it and goes on polling, so a rebalance still gets through, and nothing is lost or
//! skipped once the work moves again. A member that took no records while its queue was
//! full (instead of pausing at once, which cost a drain most of its speed: see
//! `hookstream_kafka::consumer`) must still not hold its group hostage.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookstream_kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use hookstream_kafka::{ConsumerMetrics, ConsumerSettings, Done, Fatal, Handler, Record, Start};
use hookstream_testkit::{eventually, TestEnv};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Who finished which (partition, offset).
type Finished = Arc<Mutex<Vec<(&'static str, i32, i64)>>>;

/// Records every offset it finished; its work waits while the gate is shut.
struct Gated {
    name: &'static str,
    gate: watch::Receiver<bool>,
    finished: Finished,
}

impl Handler for Gated {
    type Work = (i32, i64);

    fn prepare(&self, record: Record) -> Start<(i32, i64)> {
        Start::Now((record.partition, record.offset))
    }

    async fn run(self: Arc<Self>, (partition, offset): (i32, i64)) -> Result<Done, Fatal> {
        let mut gate = self.gate.clone();
        if gate.wait_for(|open| *open).await.is_err() {
            return Ok(Done::Unfinished);
        }
        self.finished.lock().unwrap().push((self.name, partition, offset));
        Ok(Done::Finished)
    }
}

fn member(
    env: &TestEnv,
    name: &'static str,
    gate: watch::Receiver<bool>,
    finished: &Finished,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<Result<(), hookstream_kafka::ConsumerError>> {
    let kafka = env.kafka.clone();
    let settings = ConsumerSettings {
        role: "events",
        group_id: env.kafka.group_id.clone(),
        topics: vec![env.kafka.topics.events.clone()],
        max_in_flight: 8,
        grace: Duration::from_secs(5),
    };
    let handler = Arc::new(Gated {
        name,
        gate,
        finished: finished.clone(),
    });
    let metrics = ConsumerMetrics::register(&prometheus::Registry::new());
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        hookstream_kafka::consumer::run(&kafka, settings, handler, metrics, shutdown).await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_every_permit_stuck_still_serves_a_rebalance_and_loses_nothing() {
    let env = TestEnv::new(4).await.unwrap();
    let producer: FutureProducer = hookstream_kafka::producer_config(&env.kafka, Duration::from_secs(10))
        .create()
        .unwrap();
    let total = 400;
    for n in 0..total {
        producer
            .send(
                FutureRecord::to(&env.kafka.topics.events)
                    .key(&format!("k{n}"))
                    .payload("x"),
                Duration::from_secs(10),
            )
            .await
            .expect("acknowledged");
    }

    let finished: Finished = Arc::default();
    let shutdown = CancellationToken::new();
    // A: every permit (8) and the ready queue (8) fill with records whose work waits.
    let (open_a, gate_a) = watch::channel(false);
    let a = member(&env, "a", gate_a, &finished, &shutdown);
    tokio::time::sleep(hookstream_kafka::consumer::PAUSE_AFTER * 4).await;
    assert!(finished.lock().unwrap().is_empty(), "A's work is stuck");

    // B joins: the group can only hand it partitions if A, stuck as it is, takes part in
    // the rebalance (it polls; a member that stopped polling would hold it up).
    let (_open_b, gate_b) = watch::channel(true);
    let b = member(&env, "b", gate_b, &finished, &shutdown);
    let b_works = eventually(Duration::from_secs(30), || async {
        finished.lock().unwrap().iter().any(|(who, _, _)| *who == "b")
    })
    .await;
    assert!(b_works, "B got no partition while A's work was stuck");
    let b_partitions: HashSet<i32> = finished
        .lock()
        .unwrap()
        .iter()
        .filter(|(who, _, _)| *who == "b")
        .map(|(_, p, _)| *p)
        .collect();
    assert!(
        b_partitions.len() < 4,
        "A kept none of its partitions: {b_partitions:?}"
    );

    // A's work moves again: every record is finished, none skipped.
    open_a.send(true).unwrap();
    let done = || -> HashSet<(i32, i64)> {
        finished
            .lock()
            .unwrap()
            .iter()
            .map(|(_, p, o)| (*p, *o))
            .collect()
    };
    let all_done = eventually(Duration::from_secs(30), || async { done().len() == total }).await;
    let done = done();
    assert!(all_done, "{} of {total} records finished", done.len());
    let ends = env.end_offsets(&env.kafka.topics.events).await.unwrap();
    for (partition, end) in ends.iter().enumerate() {
        for offset in 0..*end {
            assert!(
                done.contains(&(partition as i32, offset)),
                "partition {partition} offset {offset} never finished"
            );
        }
    }
    // Both leave the group having committed everything they finished.
    shutdown.cancel();
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    let committed = env.committed_offsets(&env.kafka.topics.events).await.unwrap();
    for (partition, (end, committed)) in ends.iter().zip(&committed).enumerate() {
        assert!(
            *end == 0 || end == committed,
            "partition {partition}: committed {committed}, end {end}"
        );
    }
}
