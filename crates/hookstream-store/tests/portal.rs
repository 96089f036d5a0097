//! The tenant portal's login links and sessions on a real PostgreSQL: a link starts one
//! session, however many open it at once; a used, expired or unknown link is refused with its
//! reason; sessions expire and end, and end with the app-portal token they belong to;
//! pruning removes what expired.

use chrono::{DateTime, TimeDelta, Utc};
use hookstream_store::api_keys::{self, KeyKind, NewKey};
use hookstream_store::portal::{self, Grant, LinkRefused};
use hookstream_testkit::TestEnv;
use uuid::Uuid;

/// A new app-portal key of `tenant` (what `app-portal-access` mints beside a link).
async fn portal_key(env: &TestEnv, tenant: Uuid, expires_at: Option<DateTime<Utc>>) -> Uuid {
    let (key, _token) = api_keys::create(
        &env.pool,
        &NewKey {
            tenant_id: tenant,
            kind: KeyKind::Portal,
            name: String::new(),
            read_only: false,
            expires_at,
            minted_by: None,
        },
    )
    .await
    .unwrap();
    key.id
}

fn grant(key_id: Uuid, tenant_id: Uuid) -> Grant {
    Grant {
        key_id,
        tenant_id,
        read_only: false,
        expires_at: Utc::now() + TimeDelta::minutes(10),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_are_single_use_and_sessions_expire() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("acme").await.unwrap();
    let soon = Utc::now() + TimeDelta::minutes(10);
    let key = portal_key(&env, tenant, Some(soon + TimeDelta::hours(1))).await;

    // Eight browsers open the same link at once: exactly one gets a session.
    let token = portal::create_link(&env.pool, key, true, soon).await.unwrap();
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
    let past = portal::create_link(&env.pool, key, false, Utc::now() - TimeDelta::seconds(1))
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
    let id = portal::create_session(&env.pool, &grant(key, tenant), soon)
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
    let old = portal::create_session(&env.pool, &grant(key, tenant), Utc::now() - TimeDelta::seconds(1))
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

#[tokio::test]
async fn links_and_sessions_end_with_their_app_portal_token() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("acme").await.unwrap();
    let soon = Utc::now() + TimeDelta::minutes(10);
    let key = portal_key(&env, tenant, None).await;
    let link = portal::create_link(&env.pool, key, false, soon).await.unwrap();
    let unused = portal::create_link(&env.pool, key, false, soon).await.unwrap();
    let g = portal::consume_link(&env.pool, &link)
        .await
        .unwrap()
        .expect("opens");
    assert_eq!((g.key_id, g.tenant_id), (key, tenant));
    let session = portal::create_session(&env.pool, &g, soon).await.unwrap();
    assert!(portal::find_session(&env.pool, &session).await.unwrap().is_some());

    // The token is logged out: its session is gone at once, its other link opens nothing.
    sqlx::query("UPDATE hookstream.api_keys SET revoked_at = now() WHERE id = $1")
        .bind(key)
        .execute(&env.pool)
        .await
        .unwrap();
    assert!(portal::find_session(&env.pool, &session).await.unwrap().is_none());
    assert_eq!(
        portal::consume_link(&env.pool, &unused).await.unwrap(),
        Err(LinkRefused::Revoked)
    );

    // A session never outlasts its token: it expires with it.
    let short = Utc::now() + TimeDelta::seconds(1);
    let brief = portal_key(&env, tenant, Some(short)).await;
    let s = portal::create_session(&env.pool, &grant(brief, tenant), soon)
        .await
        .unwrap();
    let expires: DateTime<Utc> =
        sqlx::query_scalar("SELECT expires_at FROM hookstream.portal_sessions WHERE hash = $1")
            .bind(portal::hash(&s).as_slice())
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert!(
        expires <= short + TimeDelta::milliseconds(1),
        "{expires} after the token's {short}"
    );

    // A tenant key (not an app-portal token) cannot own a link; nor another tenant's session.
    let (tenant_key, _) = api_keys::create(
        &env.pool,
        &NewKey {
            tenant_id: tenant,
            kind: KeyKind::Tenant,
            name: String::new(),
            read_only: false,
            expires_at: None,
            minted_by: None,
        },
    )
    .await
    .unwrap();
    assert!(portal::create_link(&env.pool, tenant_key.id, false, soon)
        .await
        .is_err());
    let other = env.tenant("other").await.unwrap();
    assert!(portal::create_session(&env.pool, &grant(key, other), soon)
        .await
        .is_err());
}
