//! `hookstream erase`: by subject, then the whole tenant, through the CLI on a real database;
//! what the outbox still held of the scope is deleted, the data keys are destroyed, and each
//! erasure is audited as the CLI's. (The proof that no copy opens afterwards, in Kafka
//! included, is `services/api/tests/erasure.rs`.)

use hookstream_store::outbox::NewEvent;
use hookstream_store::payload_keys;
use hookstream_testkit::process::service_env;
use hookstream_testkit::TestEnv;
use serde_json::Value;

use crate::common;

async fn erase(env: &TestEnv, args: &[&str]) -> Value {
    let mut c = common::command();
    c.arg("erase").args(args).arg("--json").envs(service_env(env));
    let run = common::run(c).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_a_subject_then_its_tenant_reaches_their_outbox_rows_and_keys() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("acme").await.unwrap();
    // A live key of the tenant's own (as the relay makes one), and three unshipped events:
    // two of subject cust-1, one without a subject.
    let mut tx = env.pool.begin().await.unwrap();
    let scope = (tenant, None, chrono::Utc::now().date_naive());
    payload_keys::sealing_keys(&mut tx, &env.pool, &env.sealer(), &[scope])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let of = |subject: Option<&str>| {
        let e = NewEvent::from_json_text(tenant, "customer.updated", r#"{"n":1}"#);
        match subject {
            Some(s) => e.subject(s),
            None => e,
        }
    };
    env.publish(&[of(Some("cust-1")), of(Some("cust-1")), of(None)])
        .await
        .unwrap();

    let t = tenant.to_string();
    let by_subject = erase(&env, &["--tenant", &t, "--subject", "cust-1"]).await;
    assert_eq!(by_subject["outbox_deleted"], 2, "{by_subject}");
    assert_eq!(
        by_subject["keys"], 0,
        "the tenant's own key is not the subject's: {by_subject}"
    );
    assert_eq!(env.outbox_len().await.unwrap(), 1, "the other event stays");
    let whole = erase(&env, &["--tenant", &t]).await;
    assert_eq!(whole["outbox_deleted"], 1, "{whole}");
    assert_eq!(whole["keys"], 1, "{whole}");
    assert_eq!(env.outbox_len().await.unwrap(), 0);
    let audit: Vec<(String, String, i32)> = hookstream_store::sqlx::query_as(
        "SELECT scope, actor, outbox_deleted FROM hookstream.erasures WHERE tenant_id = $1 ORDER BY id",
    )
    .bind(tenant)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        audit,
        [
            ("subject".into(), "cli".into(), 2),
            ("tenant".into(), "cli".into(), 1)
        ]
    );
    // A subject is kept only as its digest.
    let clear: i64 = hookstream_store::sqlx::query_scalar(
        "SELECT count(*) FROM hookstream.erasures WHERE subject_digest = convert_to('cust-1', 'UTF8')",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(clear, 0);
    // A malformed tenant id is refused, naming the flag.
    let mut c = common::command();
    c.args(["erase", "--tenant", "not-a-uuid"])
        .envs(service_env(&env));
    let run = common::run(c).await;
    assert_ne!(run.code, Some(0));
    assert!(run.stderr.contains("tenant"), "{}", run.stderr);
}
