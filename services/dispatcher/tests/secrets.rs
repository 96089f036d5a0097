//! Endpoint signing secrets and URLs at rest and in rotation, on real PostgreSQL and Kafka:
//! stored sealed (AES-256-GCM, never in plaintext), opened by the dispatcher to sign and to
//! deliver, legacy plaintext rows still honoured and sealed by `reseal`, and a rotation signs
//! with both the old and the new secret during its overlap.

use std::time::Duration;

use hookstream_signing::Secret;
use hookstream_store::endpoints;
use hookstream_store::outbox::NewEvent;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;

use crate::common;

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
    // ...and its URL, with a token in it, in clear as before URLs were sealed.
    let legacy_url = format!("{}?token=legacy-t0ken-8d1f", legacy_receiver.url());
    hookstream_store::sqlx::query(
        "UPDATE hookstream.endpoints SET url = $2, url_sealed = NULL, url_key_id = NULL WHERE id = $1",
    )
    .bind(legacy_ep)
    .bind(&legacy_url)
    .execute(&env.pool)
    .await
    .unwrap();

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

    // Sealing the legacy rows removes their plaintext and keeps them working.
    let sealer = env.sealer();
    assert_eq!(
        endpoints::reseal(&env.pool, &sealer).await.unwrap(),
        endpoints::Resealed { secrets: 1, urls: 1 }
    );
    let rows = secret_rows(&env, legacy_ep).await;
    assert!(rows[0].0.is_none() && rows[0].2.as_deref() == Some("test"));
    let (url, url_sealed): (String, Option<Vec<u8>>) =
        hookstream_store::sqlx::query_as("SELECT url, url_sealed FROM hookstream.endpoints WHERE id = $1")
            .bind(legacy_ep)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert!(
        !url.contains("legacy-t0ken"),
        "only the redacted url stays in clear: {url}"
    );
    assert!(url_sealed.is_some_and(|b| !b.windows(12).any(|w| w == b"legacy-t0ken")));
    let all_urls: Vec<String> = hookstream_store::sqlx::query_scalar("SELECT url FROM hookstream.endpoints")
        .fetch_all(&env.pool)
        .await
        .unwrap();
    assert!(all_urls.iter().all(|u| !u.contains("legacy-t0ken")));

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
        "the re-sealed secret signs, to the re-sealed url"
    );
    sealed_receiver.set_secret(&new_secret.expose());
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 3 }))])
        .await
        .unwrap();
    assert!(eventually(Duration::from_secs(30), || async { sealed_receiver.count() == 3 }).await);
    assert!(sealed_receiver.received()[2].verified, "the new secret verifies");

    // Rotating in a loop does not make each delivery cost one HMAC per rotation: past
    // `MAX_LIVE_SECRETS` the oldest retire early, and the newest signs.
    let mut last = new_secret;
    for _ in 0..25 {
        last = endpoints::rotate_secret(&env.pool, &sealer, sealed_ep, Duration::from_secs(3600))
            .await
            .unwrap();
    }
    let live: i64 = hookstream_store::sqlx::query_scalar(
        "SELECT count(*) FROM hookstream.endpoint_secrets
          WHERE endpoint_id = $1 AND (expires_at IS NULL OR expires_at > now())",
    )
    .bind(sealed_ep)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(live, endpoints::MAX_LIVE_SECRETS as i64);
    tokio::time::sleep(Duration::from_millis(500)).await; // the NOTIFY refresh
    sealed_receiver.set_secret(&last.expose());
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "n": 4 }))])
        .await
        .unwrap();
    assert!(eventually(Duration::from_secs(30), || async { sealed_receiver.count() == 4 }).await);
    let fourth = &sealed_receiver.received()[3];
    assert!(fourth.verified, "the newest secret verifies");
    assert_eq!(
        fourth.signature.split(' ').count(),
        endpoints::MAX_LIVE_SECRETS,
        "signed with the live secrets only: {}",
        fourth.signature
    );
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
