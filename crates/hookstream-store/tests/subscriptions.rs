//! The routing view on a real PostgreSQL: versions number routing changes only, an
//! incremental read returns exactly what changed (not every endpoint and secret again), and
//! a reader further behind than the change log reaches is told to load everything.

use std::time::Duration;

use hookstream_store::endpoints;
use hookstream_store::subscriptions::{self, load_all, load_since};
use hookstream_testkit::{Behaviour, Receiver, TestEnv};

#[tokio::test]
async fn an_incremental_read_returns_only_what_changed_since_a_version() {
    let env = TestEnv::new(1).await.unwrap();
    let sealer = env.sealer();
    let receiver = Receiver::start(Behaviour::Ok).await;
    let tenant = env.tenant("t").await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..200 {
        ids.push(env.endpoint(tenant, &receiver, &[]).await.unwrap());
    }
    let all = load_all(&env.pool, &sealer).await.unwrap();
    assert_eq!(all.endpoints.len(), 200);
    assert!(
        all.endpoints.iter().all(|e| e.target_url == receiver.url()),
        "full urls opened"
    );
    let v0 = all.version;

    // Health bookkeeping is not a routing change.
    endpoints::mark_failing(&env.pool, ids[0]).await.unwrap();
    assert_eq!(subscriptions::version(&env.pool).await.unwrap(), v0);
    let nothing = load_since(&env.pool, &sealer, v0, &[]).await.unwrap().unwrap();
    assert!(nothing.tenants.is_empty() && nothing.endpoints.is_empty());

    // One disabled, one secret rotated, one tenant created: three changes, three entries.
    endpoints::set_enabled(&env.pool, ids[1], false, Some("test"))
        .await
        .unwrap();
    endpoints::rotate_secret(&env.pool, &sealer, ids[2], Duration::from_secs(60))
        .await
        .unwrap();
    let other = env.tenant("u").await.unwrap();
    let delta = load_since(&env.pool, &sealer, v0, &[]).await.unwrap().unwrap();
    assert!(delta.version > v0);
    assert_eq!(delta.tenants, vec![(other, true)]);
    let mut changed: Vec<_> = delta
        .endpoints
        .iter()
        .map(|(id, now)| (*id, now.as_ref().map(|e| e.secrets.len())))
        .collect();
    changed.sort();
    let mut want = vec![(ids[1], None), (ids[2], Some(2))];
    want.sort();
    assert_eq!(
        changed, want,
        "the disabled one is gone, the rotated one has two secrets"
    );
    assert!(
        delta
            .endpoints
            .iter()
            .flat_map(|(_, e)| e)
            .all(|e| e.secrets_expire_at_ms.is_some()),
        "the overlap's expiry is known, so the snapshot reloads the endpoint then"
    );
    // Asked to reload an endpoint (its secret expired), it comes back even unchanged.
    let again = load_since(&env.pool, &sealer, delta.version, &[ids[3]])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.endpoints.len(), 1);

    // A reader behind a pruned change log reloads everything.
    hookstream_store::sqlx::query(
        "UPDATE hookstream.subscription_changes SET changed_at = now() - interval '2 days'",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    let pruned = subscriptions::prune_changes(&env.pool, chrono::Utc::now() - chrono::Duration::days(1), 50)
        .await
        .unwrap();
    assert!(pruned > 200, "pruned {pruned}");
    assert!(load_since(&env.pool, &sealer, v0, &[]).await.unwrap().is_none());
    let current = subscriptions::version(&env.pool).await.unwrap();
    assert!(
        load_since(&env.pool, &sealer, current, &[])
            .await
            .unwrap()
            .is_some(),
        "a reader at the current version needs nothing from the log"
    );
}
