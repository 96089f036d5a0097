//! Endpoint signing secrets at rest and in rotation, on real PostgreSQL and Kafka: stored
//! sealed (AES-256-GCM, never in plaintext), opened by the dispatcher to sign, legacy
//! plaintext rows still honoured and sealed by `reseal_secrets`, and a rotation signs with
//! both the old and the new secret during its overlap.

use std::time::Duration;

use hookstream_signing::Secret;
use hookstream_store::endpoints;
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;

mod common;

type Row = (Option<String>, Option<Vec<u8>>, Option<String>);

async fn secret_rows(env: &TestEnv, endpoint: uuid::Uuid) -> Vec<Row> {
    hookstream_store::sqlx::query_as(
        "SELECT secret, sealed, key_id FROM hookstream.endpoint_secrets WHERE endpoint_id = $1 ORDER BY id",
    )
    .bind(endpoint)
    .fetch_all(&env.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_sealed_at_rest_and_rotate_with_an_overlap() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let sealed_receiver = Receiver::start(Behaviour::Ok).await;
    let sealed_ep = env.endpoint(tenant, &sealed_receiver, &[]).await.unwrap();

    // At rest: no plaintext, the test's key id, and the sealed bytes do not contain it.
    let rows = secret_rows(&env, sealed_ep).await;
    assert_eq!(rows.len(), 1);
    let (plain, sealed, key_id) = &rows[0];
    assert!(plain.is_none(), "no plaintext column");
    assert_eq!(key_id.as_deref(), Some("test"));
    assert!(!sealed.as_ref().unwrap().windows(6).any(|w| w == b"whsec_"));

    // A row from before sealing existed (plaintext) is still used to sign.
    let legacy_receiver = Receiver::start(Behaviour::Ok).await;
    let legacy_ep = env.endpoint(tenant, &legacy_receiver, &[]).await.unwrap();
    let legacy = Secret::generate();
    hookstream_store::sqlx::query("UPDATE hookstream.endpoint_secrets SET secret = $2, sealed = NULL, key_id = NULL WHERE endpoint_id = $1")
        .bind(legacy_ep)
        .bind(legacy.expose())
        .execute(&env.pool)
        .await
        .unwrap();
    legacy_receiver.set_secret(&legacy.expose());

    let mut cfg = common::dispatcher_config(&env);
    cfg.delivery.allow_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    let token = common::start_pipeline(&env, cfg);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 1 }))])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            sealed_receiver.count() == 1 && legacy_receiver.count() == 1
        })
        .await,
        "both delivered"
    );
    assert!(
        sealed_receiver.received()[0].verified,
        "signed with the opened sealed secret"
    );
    assert!(
        legacy_receiver.received()[0].verified,
        "signed with the legacy plaintext secret"
    );

    // Sealing the legacy row removes its plaintext and keeps it working.
    let sealer = env.sealer();
    assert_eq!(endpoints::reseal_secrets(&env.pool, &sealer).await.unwrap(), 1);
    let rows = secret_rows(&env, legacy_ep).await;
    assert!(rows[0].0.is_none() && rows[0].2.as_deref() == Some("test"));

    // Rotation: the new secret and the old one both sign during the overlap, so a receiver
    // holding either verifies.
    let new_secret = endpoints::rotate_secret(&env.pool, &sealer, sealed_ep, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(secret_rows(&env, sealed_ep).await.len(), 2);
    tokio::time::sleep(Duration::from_millis(500)).await; // the NOTIFY refresh
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 2 }))])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            sealed_receiver.count() == 2 && legacy_receiver.count() == 2
        })
        .await
    );
    let second = &sealed_receiver.received()[1];
    assert!(
        second.verified,
        "the old secret still verifies during the overlap"
    );
    assert_eq!(
        second.signature.split(' ').count(),
        2,
        "signed with both secrets: {}",
        second.signature
    );
    assert!(
        legacy_receiver.received()[1].verified,
        "the re-sealed secret signs"
    );
    sealed_receiver.set_secret(&new_secret.expose());
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 3 }))])
        .await
        .unwrap();
    assert!(eventually(Duration::from_secs(30), || async { sealed_receiver.count() == 3 }).await);
    assert!(sealed_receiver.received()[2].verified, "the new secret verifies");
    token.cancel();
}

#[tokio::test]
async fn a_dispatcher_without_a_key_refuses_to_start() {
    let env = TestEnv::new(1).await.unwrap();
    let mut cfg = common::dispatcher_config(&env);
    cfg.secrets = Default::default();
    let err = dispatcher::run(
        cfg,
        &prometheus::Registry::new(),
        Default::default(),
        Default::default(),
    )
    .await
    .expect_err("no key, no start");
    assert!(err.to_string().contains("secrets.key"), "{err}");
}
