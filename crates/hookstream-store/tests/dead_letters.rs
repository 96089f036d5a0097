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
        handled: None,
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

/// The dead letter a dispatcher produces when it handles `handled` (offset of a retry tier's
/// record) for `endpoint`, stored from DLQ position `offset`.
fn decision(offset: i64, handled: i64, endpoint: Option<uuid::Uuid>) -> NewDeadLetter {
    NewDeadLetter {
        endpoint_id: endpoint,
        handled: Some(Position {
            topic: "retry.30s".into(),
            partition: 3,
            offset: handled,
        }),
        ..letter(offset)
    }
}

#[tokio::test]
async fn the_same_decision_from_two_dlq_records_is_stored_once() {
    let env = TestEnv::new(1).await.unwrap();
    let (a, b) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());

    let first = dead_letters::insert(&env.pool, &decision(0, 7, Some(a)))
        .await
        .unwrap();
    assert!(first.is_some());
    // A dispatcher killed after its dead letter was acknowledged handles the tier record
    // again and produces the same dead letter at another DLQ position.
    assert_eq!(
        dead_letters::insert(&env.pool, &decision(1, 7, Some(a)))
            .await
            .unwrap(),
        None,
        "the repeat is a duplicate"
    );
    // The same record's dead letter for another endpoint (a fan-out), and another record's
    // for the same endpoint (a later failure, a replay that failed again) are decisions of
    // their own.
    assert!(dead_letters::insert(&env.pool, &decision(2, 7, Some(b)))
        .await
        .unwrap()
        .is_some());
    assert!(dead_letters::insert(&env.pool, &decision(3, 8, Some(a)))
        .await
        .unwrap()
        .is_some());
    // Poison has no endpoint: handled twice, it is one row as well.
    assert!(dead_letters::insert(&env.pool, &decision(4, 9, None))
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        dead_letters::insert(&env.pool, &decision(5, 9, None))
            .await
            .unwrap(),
        None
    );
    // Both keys within one batch: the first of each is stored, in order.
    let ids = dead_letters::insert_many(
        &env.pool,
        &[
            decision(6, 10, Some(a)),
            decision(7, 10, Some(a)),
            decision(8, 7, Some(a)),
            decision(9, 11, Some(a)),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        ids.iter().map(Option::is_some).collect::<Vec<_>>(),
        [true, false, false, true]
    );
    // Records that name no handled record (written before dispatchers did) are keyed by
    // position alone, as before.
    assert!(dead_letters::insert(&env.pool, &letter(10))
        .await
        .unwrap()
        .is_some());
    assert!(dead_letters::insert(&env.pool, &letter(11))
        .await
        .unwrap()
        .is_some());
    assert_eq!(rows(&env).await, 8);

    let stored = dead_letters::list(&env.pool, &dead_letters::Filter::default(), 100)
        .await
        .unwrap();
    let kept = stored
        .iter()
        .find(|d| d.source_offset == 0)
        .expect("the first of the pair");
    assert_eq!(
        (
            kept.handled_topic.as_deref(),
            kept.handled_partition,
            kept.handled_offset
        ),
        (Some("retry.30s"), Some(3), Some(7))
    );
}
