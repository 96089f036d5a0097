//! Dead letters written in batches on a real PostgreSQL: one statement stores many rows, a
//! record seen twice (in one batch or across batches) is stored once, and the batch writer
//! hands a refused row back alone while the rest of its batch is stored.

use chrono::{TimeZone, Utc};
use hookstream_store::batch::{Batcher, Refused};
use hookstream_store::dead_letters::{self, NewDeadLetter, Position};
use hookstream_testkit::TestEnv;

fn letter(offset: i64) -> NewDeadLetter {
    NewDeadLetter {
        tenant_id: None,
        endpoint_id: None,
        event_id: None,
        event_type: "order.created".into(),
        reason: "HTTP 500".into(),
        error_class: "http_5xx".into(),
        last_status: 500,
        attempts: 3,
        first_attempt_at: None,
        dead_at: Utc::now(),
        source: Position {
            topic: "dlq".into(),
            partition: 0,
            offset,
        },
        origin: None,
        event: None,
        raw: Some(vec![1, 2, 3]),
        last_response: None,
    }
}

async fn rows(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM hookstream.dead_letters")
        .fetch_one(&env.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_batch_stores_each_record_once_and_says_which_were_new() {
    let env = TestEnv::new(1).await.unwrap();
    let first: Vec<_> = (0..500).map(letter).collect();
    let ids = dead_letters::insert_many(&env.pool, &first).await.unwrap();
    assert_eq!(ids.iter().filter(|id| id.is_some()).count(), 500);
    assert_eq!(rows(&env).await, 500);

    // Half seen before, and one record twice within the batch.
    let mut again: Vec<_> = (250..750).map(letter).collect();
    again.push(letter(700));
    let ids = dead_letters::insert_many(&env.pool, &again).await.unwrap();
    assert_eq!(ids.len(), 501);
    assert!(
        ids[..250].iter().all(Option::is_none),
        "stored before: duplicates"
    );
    assert!(ids[250..500].iter().all(Option::is_some), "new: stored");
    assert_eq!(ids[500], None, "the second copy within a batch is a duplicate");
    assert_eq!(rows(&env).await, 750);

    let too_many: Vec<_> = (0..(dead_letters::MAX_ROWS_PER_INSERT as i64 + 1))
        .map(letter)
        .collect();
    assert!(dead_letters::insert_many(&env.pool, &too_many).await.is_err());
}

#[tokio::test]
async fn the_batch_writer_stores_the_good_rows_and_hands_back_the_refused_one() {
    let env = TestEnv::new(1).await.unwrap();
    let pool = env.pool.clone();
    let (writer, write) = Batcher::new(64, move |rows: Vec<NewDeadLetter>| {
        let pool = pool.clone();
        async move {
            let result = dead_letters::insert_many(&pool, &rows).await;
            (rows, result)
        }
    });
    // 10,001 BC is before PostgreSQL's timestamptz range (4713 BC): the database refuses it.
    let mut bad = letter(31);
    bad.dead_at = Utc.with_ymd_and_hms(-10_000, 1, 1, 0, 0, 0).unwrap();
    let submits: Vec<_> = (0..64)
        .map(|i| {
            let (w, row) = (writer.clone(), if i == 31 { bad.clone() } else { letter(i) });
            tokio::spawn(async move { w.submit(row).await })
        })
        .collect();
    drop(writer);
    let write = tokio::spawn(write);
    for (i, s) in submits.into_iter().enumerate() {
        match s.await.unwrap() {
            Ok(id) => assert!(i != 31 && id.is_some(), "row {i}"),
            Err(Refused::Invalid(why, row)) => {
                assert_eq!(i, 31, "only the bad row is refused ({why})");
                assert_eq!(row.source.offset, 31, "and it comes back");
            }
            Err(e) => panic!("row {i}: {e}"),
        }
    }
    write.await.unwrap();
    assert_eq!(rows(&env).await, 63);
}
