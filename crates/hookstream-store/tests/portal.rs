//! The tenant portal's login links and sessions on a real PostgreSQL: a link starts one
//! session, however many open it at once; a used, expired or unknown link is refused with its
//! reason; sessions expire and end; pruning removes what expired.

use chrono::{TimeDelta, Utc};
use hookstream_store::portal::{self, LinkRefused};
use hookstream_testkit::TestEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_are_single_use_and_sessions_expire() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("acme").await.unwrap();
    let soon = Utc::now() + TimeDelta::minutes(10);

    // Eight browsers open the same link at once: exactly one gets a session.
    let token = portal::create_link(&env.pool, tenant, true, soon).await.unwrap();
    let tries: Vec<_> = (0..8)
        .map(|_| {
            let (pool, token) = (env.pool.clone(), token.clone());
            tokio::spawn(async move { portal::consume_link(&pool, &token).await.unwrap() })
        })
        .collect();
    let mut granted = Vec::new();
    let mut refused = Vec::new();
    for t in tries {
        match t.await.unwrap() {
            Ok(g) => granted.push(g),
            Err(why) => refused.push(why),
        }
    }
    assert_eq!(granted.len(), 1, "one session from one link");
    assert_eq!((granted[0].tenant_id, granted[0].read_only), (tenant, true));
    assert!(refused.iter().all(|r| *r == LinkRefused::Used), "{refused:?}");

    // Expired and unknown links.
    let past = portal::create_link(&env.pool, tenant, false, Utc::now() - TimeDelta::seconds(1))
        .await
        .unwrap();
    assert_eq!(
        portal::consume_link(&env.pool, &past).await.unwrap(),
        Err(LinkRefused::Expired)
    );
    assert_eq!(
        portal::consume_link(&env.pool, "nope").await.unwrap(),
        Err(LinkRefused::Unknown)
    );
    // What is stored is the token's SHA-256, not the token.
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM hookstream.portal_links WHERE hash = $1")
        .bind(portal::hash(&token).as_slice())
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(stored, 1);
    assert_ne!(hex_of(&portal::hash(&token)), token);

    // Sessions: found while live, not after they end or expire.
    let id = portal::create_session(&env.pool, tenant, false, soon)
        .await
        .unwrap();
    assert_eq!(
        portal::find_session(&env.pool, &id)
            .await
            .unwrap()
            .map(|g| g.tenant_id),
        Some(tenant)
    );
    portal::end_session(&env.pool, &id).await.unwrap();
    assert!(portal::find_session(&env.pool, &id).await.unwrap().is_none());
    let old = portal::create_session(&env.pool, tenant, false, Utc::now() - TimeDelta::seconds(1))
        .await
        .unwrap();
    assert!(portal::find_session(&env.pool, &old).await.unwrap().is_none());

    // Pruning removes what expired before the cut (the expired link and session), keeps the rest.
    let pruned = portal::prune(&env.pool, Utc::now()).await.unwrap();
    assert_eq!(pruned, 2);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM hookstream.portal_links")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(left, 1, "the used link, not yet expired, is kept");
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
