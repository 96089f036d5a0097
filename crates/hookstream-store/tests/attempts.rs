//! Attempts stored on a real PostgreSQL through the sink's path (binary COPY into the
//! connection's temporary table, then one insert): every column reads back as written, NULLs
//! included; a key stored before, or twice in one batch, is stored once; later batches on
//! the same connection reuse the table and see none of the earlier batches' rows; a row the
//! database refuses fails its batch, and the batch after it is stored.

use chrono::{DateTime, Duration, TimeZone, Utc};
use hookstream_store::attempts::{self, Filter, NewAttempt};
use hookstream_testkit::fixtures::attempt_row;
use hookstream_testkit::TestEnv;
use uuid::Uuid;

fn full(started_at: DateTime<Utc>, tenant: Uuid) -> NewAttempt {
    NewAttempt {
        attempt: 3,
        trigger: "retry".into(),
        duration_ms: 1_234,
        status: Some(503),
        outcome: "retryable".into(),
        error_class: "http_5xx".into(),
        error: "HTTP 503 with a tab\tand a newline\n, quoted \"x\", and a nul\0 byte".into(),
        response_headers: vec![
            ("retry-after".into(), "30".into()),
            ("x-note".into(), "é ü \\ back".into()),
        ],
        response_body: Some(vec![0, 1, 2, 255, b'\\', b'\n']),
        response_truncated: true,
        next: "retry".into(),
        next_due_at: Some(started_at + Duration::seconds(30)),
        next_tier: Some("30s".into()),
        event_type: Some("order.paid".into()),
        aggregate_id: Some("order-7".into()),
        payload_bytes: Some(321),
        committed_at: Some(started_at - Duration::milliseconds(15)),
        relayed_at: Some(started_at - Duration::milliseconds(5)),
        ..attempt_row(started_at, tenant)
    }
}

/// Every optional field empty.
fn bare(started_at: DateTime<Utc>, tenant: Uuid) -> NewAttempt {
    NewAttempt {
        duration_ms: 0,
        status: None,
        outcome: "retryable".into(),
        error_class: "timeout".into(),
        next: "dead_lettered".into(),
        event_type: None,
        payload_bytes: None,
        committed_at: None,
        relayed_at: None,
        ..attempt_row(started_at, tenant)
    }
}

async fn of_tenant(env: &TestEnv, tenant: Uuid) -> Vec<attempts::Attempt> {
    attempts::list(
        &env.pool,
        &Filter {
            tenant_id: Some(tenant),
            limit: 1_000,
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn every_column_reads_back_and_a_key_is_stored_once() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = Uuid::now_v7();
    // Microseconds: what PostgreSQL keeps.
    let now = Utc.timestamp_micros(Utc::now().timestamp_micros()).unwrap();
    attempts::ensure_partition(&env.pool, now.date_naive())
        .await
        .unwrap();
    let (a, b) = (full(now, tenant), bare(now, tenant));

    // The same key twice in one batch: the first is stored and credited.
    let stored = attempts::insert_many(&env.pool, &[a.clone(), b.clone(), a.clone()])
        .await
        .unwrap();
    assert_eq!(stored, vec![true, true, false]);
    let rows = of_tenant(&env, tenant).await;
    assert_eq!(rows.len(), 2);
    let read_a = rows.iter().find(|r| r.event_id == a.event_id).unwrap();
    assert_eq!(
        (
            read_a.started_at,
            read_a.endpoint_id,
            read_a.attempt,
            read_a.tenant_id
        ),
        (a.started_at, a.endpoint_id, a.attempt, a.tenant_id)
    );
    assert_eq!(
        (read_a.trigger.as_str(), read_a.duration_ms, read_a.status),
        ("retry", 1_234, Some(503))
    );
    assert_eq!(
        (read_a.outcome.as_str(), read_a.error_class.as_str()),
        ("retryable", "http_5xx")
    );
    // Stored as cleaned: the nul byte is dropped, the rest as it was.
    assert_eq!(read_a.error, a.error.replace('\0', ""));
    assert_eq!(
        read_a.response_headers,
        serde_json::json!([["retry-after", "30"], ["x-note", "é ü \\ back"]])
    );
    assert_eq!(read_a.response_body, a.response_body);
    assert!(read_a.response_truncated);
    assert_eq!(
        (
            read_a.next.as_str(),
            read_a.next_due_at,
            read_a.next_tier.as_deref()
        ),
        ("retry", a.next_due_at, Some("30s"))
    );
    assert_eq!(
        (
            read_a.event_type.as_deref(),
            read_a.aggregate_id.as_deref(),
            read_a.payload_bytes
        ),
        (Some("order.paid"), Some("order-7"), Some(321))
    );
    assert_eq!(
        (read_a.committed_at, read_a.relayed_at),
        (a.committed_at, a.relayed_at)
    );
    let read_b = rows.iter().find(|r| r.event_id == b.event_id).unwrap();
    assert_eq!(
        (read_b.status, read_b.response_body.as_ref(), read_b.next_due_at),
        (None, None, None)
    );
    assert_eq!(
        (
            read_b.next_tier.as_ref(),
            read_b.event_type.as_ref(),
            read_b.payload_bytes
        ),
        (None, None, None)
    );
    assert_eq!(read_b.response_headers, serde_json::json!([]));

    // Read again after a crash: stored before, so not stored (nor credited) again.
    let c = bare(now, tenant);
    let stored = attempts::insert_many(&env.pool, &[b.clone(), c.clone(), a.clone()])
        .await
        .unwrap();
    assert_eq!(stored, vec![false, true, false]);
    assert_eq!(of_tenant(&env, tenant).await.len(), 3);
}

#[tokio::test]
async fn batches_on_one_connection_reuse_the_staging_table_and_a_refused_batch_leaves_no_trace() {
    let env = TestEnv::new(1).await.unwrap();
    // One connection: every batch goes through the same session's temporary table.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&env.database.url)
        .await
        .unwrap();
    let tenant = Uuid::now_v7();
    let now = Utc.timestamp_micros(Utc::now().timestamp_micros()).unwrap();
    attempts::ensure_partition(&pool, now.date_naive()).await.unwrap();
    for round in 0..5 {
        let batch: Vec<NewAttempt> = (0..100).map(|_| bare(now, tenant)).collect();
        let stored = attempts::insert_many(&pool, &batch).await.unwrap();
        assert!(stored.iter().all(|s| *s), "round {round}: each row new once");
        assert_eq!(of_tenant(&env, tenant).await.len(), (round + 1) * 100);
        let staged: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_temp.attempts_in")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(staged, 0, "the staging table is emptied at each commit");
    }
    // A day with no partition: the database refuses the batch (as invalid input), and none
    // of its rows are stored, nor left in the staging table for the next batch.
    let orphan = bare(now - Duration::days(400), tenant);
    let refused = attempts::insert_many(&pool, &[bare(now, tenant), orphan])
        .await
        .unwrap_err();
    assert!(
        matches!(refused, hookstream_store::StoreError::Invalid(_)),
        "{refused:?}"
    );
    assert_eq!(of_tenant(&env, tenant).await.len(), 500);
    let after = bare(now, tenant);
    assert_eq!(
        attempts::insert_many(&pool, std::slice::from_ref(&after))
            .await
            .unwrap(),
        vec![true]
    );
    assert_eq!(of_tenant(&env, tenant).await.len(), 501);
}
