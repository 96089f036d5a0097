//! What the relay's failure tests share: committing outbox rows, and checking that every
//! committed event reached Kafka.

use hookstream_producer::Event;
use hookstream_proto::{EventEnvelope, Message as _};
use hookstream_testkit::{counts, TestEnv};
use serde_json::json;

/// Commits `n` outbox rows in one transaction (ten aggregates); returns their event ids.
pub async fn publish(env: &TestEnv, tenant: uuid::Uuid, n: usize) -> Vec<String> {
    let mut tx = env.pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let e =
            Event::new(tenant, "order.updated", json!({ "i": i })).aggregate("order", format!("o{}", i % 10));
        ids.push(
            hookstream_producer::enqueue(&mut tx, &e)
                .await
                .unwrap()
                .to_string(),
        );
    }
    tx.commit().await.unwrap();
    ids
}

/// Asserts that every event of `published` is in the events topic; returns how many records
/// were duplicates.
pub async fn all_in_kafka(env: &TestEnv, published: &[String]) -> usize {
    let records = env.read_all(&env.kafka.topics.events).await.unwrap();
    let seen = counts(
        records
            .iter()
            .map(|r| EventEnvelope::decode(r.payload.as_slice()).unwrap().event_id),
    );
    let missing = published.iter().filter(|id| !seen.contains_key(*id)).count();
    assert_eq!(
        missing,
        0,
        "every one of {} events reached Kafka",
        published.len()
    );
    records.len() - seen.len()
}
