//! The API's group enqueue (`messages::enqueue_many`) on a real PostgreSQL: one statement
//! writes the outbox and message rows of a group, in order; an idempotency key used before,
//! or twice in one group, writes nothing more and answers with the event that holds it and the
//! request that created it; and `hookstream.enqueue`'s refusals come back as input errors.

use hookstream_store::messages::{enqueue_many, NewMessage};
use hookstream_store::{tenants, StoreError};
use hookstream_testkit::TestEnv;
use uuid::Uuid;

fn message(tenant: Uuid, payload: &str, key: Option<&str>, request: Option<&str>) -> NewMessage {
    NewMessage {
        tenant_id: tenant,
        event_type: "order.created".into(),
        payload: payload.into(),
        aggregate_type: "order".into(),
        aggregate_id: "1".into(),
        idempotency_key: key.map(Into::into),
        request_key: request.map(Into::into),
        ..Default::default()
    }
}

async fn count(env: &TestEnv, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM hookstream.{table}"))
        .fetch_one(&env.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_group_is_written_in_order_and_taken_keys_answer_with_their_holder() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = tenants::create(&env.pool, "shop").await.unwrap().id;
    let first = enqueue_many(
        &env.pool,
        &[message(tenant, r#"{"n": 0}"#, Some("k-0"), Some("req-0"))],
    )
    .await
    .unwrap();
    assert!(first[0].created);

    let group = [
        message(tenant, r#"{"n": 1}"#, None, None),
        message(tenant, r#"{"n": 2}"#, Some("k-0"), Some("req-x")), // used before
        message(tenant, r#"{"n": 3}"#, Some("k-3"), Some("req-3")),
        message(tenant, r#"{"n": 4}"#, Some("k-3"), Some("req-4")), // used earlier in the group
        message(tenant, r#"{ "n" :  5 }"#, None, None),
    ];
    let done = enqueue_many(&env.pool, &group).await.unwrap();
    let created: Vec<bool> = done.iter().map(|d| d.created).collect();
    assert_eq!(created, [true, false, true, false, true]);
    assert_eq!(done[1].id, first[0].id, "the key's holder");
    assert_eq!(
        done[1].request_key.as_deref(),
        Some("req-0"),
        "the holder's request"
    );
    assert_eq!(
        done[3].id, done[2].id,
        "the earlier row of the group holds the key"
    );
    assert_eq!(done[3].request_key.as_deref(), Some("req-3"));
    assert_eq!(done[0].request_key, None);

    // Written once each, in input order, the message rows with their keys.
    let outbox: Vec<(Uuid, String)> =
        sqlx::query_as("SELECT event_id, payload::text FROM hookstream.outbox ORDER BY id")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    let expect: Vec<(Uuid, String)> = vec![
        (first[0].id, r#"{"n": 0}"#.into()),
        (done[0].id, r#"{"n": 1}"#.into()),
        (done[2].id, r#"{"n": 3}"#.into()),
        // The producer's bytes, spacing and all (the outbox used to hold jsonb's form).
        (done[4].id, r#"{ "n" :  5 }"#.into()),
    ];
    assert_eq!(outbox, expect);
    let stored: Vec<String> = sqlx::query_scalar("SELECT body FROM hookstream.messages ORDER BY event_id")
        .fetch_all(&env.pool)
        .await
        .unwrap();
    assert!(stored.contains(&r#"{ "n" :  5 }"#.to_string()), "{stored:?}");
    assert_eq!(count(&env, "messages").await, 4);
    assert_eq!(count(&env, "idempotency_keys").await, 2);
    let (key, request, at_ms): (Option<String>, Option<String>, bool) = sqlx::query_as(
        "SELECT idempotency_key, request_key,
                date_trunc('milliseconds', created_at) = hookstream.uuid_v7_time(event_id)
           FROM hookstream.messages WHERE event_id = $1",
    )
    .bind(done[2].id)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        (key.as_deref(), request.as_deref(), at_ms),
        (Some("k-3"), Some("req-3"), true)
    );
}

#[tokio::test]
async fn refusals_name_what_is_wrong_and_write_nothing() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = tenants::create(&env.pool, "shop").await.unwrap().id;
    sqlx::query("UPDATE hookstream.settings SET max_payload_bytes = 64")
        .execute(&env.pool)
        .await
        .unwrap();
    let big = format!(r#"{{"pad": "{}"}}"#, "x".repeat(80));
    // The limit is on the bytes as sent, which are the bytes stored and delivered: spaces
    // count (jsonb used to drop them).
    let airy = format!(r#"{{ "pad" :{}"{}" }}"#, " ".repeat(40), "x".repeat(30));
    let fits = format!(r#"{{ "pad" : "{}" }}"#, "x".repeat(40));
    let mut bad_type = message(tenant, "{}", None, None);
    bad_type.event_type = "has space".into();
    let cases: Vec<(NewMessage, &str)> = vec![
        (message(Uuid::new_v4(), "{}", None, None), "unknown tenant"),
        (bad_type, "invalid event type 'has space'"),
        (
            message(tenant, "[1]", None, None),
            "payload must be a JSON object",
        ),
        (message(tenant, &big, None, None), "exceeds the limit of 64 bytes"),
        (
            message(tenant, &airy, None, None),
            "payload of 83 bytes exceeds the limit of 64 bytes",
        ),
        (
            message(tenant, "{}", Some(""), None),
            "idempotency key must be 1 to 255",
        ),
    ];
    for (bad, why) in cases {
        // With a good row beside it: the whole group is refused, and nothing is written.
        let group = [message(tenant, "{}", None, None), bad];
        match enqueue_many(&env.pool, &group).await {
            Err(StoreError::Invalid(msg)) => assert!(msg.contains(why), "{msg:?} should say {why:?}"),
            other => panic!("expected a refusal saying {why:?}, got {other:?}"),
        }
    }
    assert_eq!(count(&env, "outbox").await, 0);
    assert_eq!(count(&env, "messages").await, 0);
    let ok = enqueue_many(&env.pool, &[message(tenant, &fits, None, None)])
        .await
        .unwrap();
    assert!(ok[0].created, "within the limit");
}

#[tokio::test]
async fn a_full_group_is_planned_cheap_enough_never_to_be_jit_compiled() {
    // JIT compiling the group's statement cost ~100 ms a group (the API fell to 128
    // requests/s) when the planner took the one-row settings table for thousands of rows.
    let env = TestEnv::new(1).await.unwrap();
    let tenant = tenants::create(&env.pool, "shop").await.unwrap().id;
    let jit_above: f64 = sqlx::query_scalar("SELECT current_setting('jit_above_cost')::float8")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    let n = 256;
    let tenants: Vec<Uuid> = vec![tenant; n];
    let texts: Vec<&str> = vec!["a.b"; n];
    let payloads: Vec<&str> = vec!["{}"; n];
    let keys: Vec<Option<&str>> = vec![Some("k"); n];
    let none: Vec<Option<&str>> = vec![None; n];
    let at: Vec<Option<chrono::DateTime<chrono::Utc>>> = vec![None; n];
    let plan: serde_json::Value = sqlx::query_scalar(&format!(
        "EXPLAIN (FORMAT JSON) {}",
        hookstream_store::messages::ENQUEUE_MANY
    ))
    .bind(&tenants)
    .bind(&texts)
    .bind(&payloads)
    .bind(&texts)
    .bind(&texts)
    .bind(&keys)
    .bind(&keys)
    .bind(&none)
    .bind(&none)
    .bind(&at)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    let cost = plan[0]["Plan"]["Total Cost"].as_f64().unwrap();
    assert!(
        cost < jit_above,
        "a group of {n} costs {cost}, above jit_above_cost {jit_above}"
    );
}

#[tokio::test]
async fn groups_holding_the_same_keys_in_opposite_orders_do_not_deadlock() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = tenants::create(&env.pool, "shop").await.unwrap().id;
    let keys: Vec<String> = (0..64).map(|k| format!("k-{k}")).collect();
    let group = |reversed: bool| -> Vec<NewMessage> {
        let mut ks: Vec<&String> = keys.iter().collect();
        if reversed {
            ks.reverse();
        }
        ks.into_iter()
            .map(|k| message(tenant, "{}", Some(k), None))
            .collect()
    };
    for _ in 0..10 {
        sqlx::query("TRUNCATE hookstream.idempotency_keys, hookstream.outbox")
            .execute(&env.pool)
            .await
            .unwrap();
        let (forward, reversed) = (group(false), group(true));
        let (a, b) = tokio::join!(
            enqueue_many(&env.pool, &forward),
            enqueue_many(&env.pool, &reversed)
        );
        let (a, b) = (a.expect("forward group"), b.expect("reversed group"));
        let created = a.iter().chain(&b).filter(|d| d.created).count();
        assert_eq!(created, 64, "each key taken once");
    }
}
