//! SSRF protection end to end (invariant 6): endpoint creation refuses IP-literal URLs in
//! refused ranges at once, naming the range; a dispatcher with the built-in policy refuses
//! every non-public destination at connect time too (host names after DNS resolution, and
//! literals in rows created under a looser policy), whatever notation the URL uses, and
//! dead-letters the delivery with the class `ssrf_blocked`; no connection reaches the target.
//! Redirects are never followed, even to an allowed address.

use std::collections::HashMap;
use std::time::Duration;

use hookstream_egress::AddressPolicy;
use hookstream_proto::{DeadLetter, Message as _};
use hookstream_store::endpoint_admin;
use hookstream_store::endpoints::NewEndpoint;
use hookstream_store::outbox::NewEvent;
use hookstream_store::sqlx;
use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::common;

fn start(env: &TestEnv, allow_loopback: bool) -> CancellationToken {
    let mut cfg = common::dispatcher_config(env);
    if allow_loopback {
        cfg.delivery.allow_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    }
    common::start_pipeline(env, cfg)
}

/// Creates an endpoint under `policy`.
async fn endpoint_under(env: &TestEnv, policy: &AddressPolicy, tenant: Uuid, url: &str) -> Uuid {
    endpoint_admin::create_from(
        &env.pool,
        &env.sealer(),
        policy,
        NewEndpoint {
            tenant_id: tenant,
            url: url.into(),
            ..Default::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{url}: {e}"))
    .0
    .id
}

/// Creates an endpoint under the test's policy (loopback allowed).
async fn endpoint(env: &TestEnv, tenant: Uuid, url: &str) -> Uuid {
    endpoint_under(env, &env.address_policy(), tenant, url).await
}

async fn dead_letters(env: &TestEnv, n: usize) -> Vec<DeadLetter> {
    env.read_topic(&env.kafka.topics.dlq, n, Duration::from_secs(30))
        .await
        .unwrap()
        .iter()
        .map(|r| DeadLetter::decode(r.payload.as_slice()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_destinations_are_refused_before_any_connection() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let target = Receiver::start(Behaviour::Ok).await;
    let port = target
        .url()
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let urls = [
        format!("http://127.0.0.1:{port}/hook"),
        format!("http://localhost:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        format!("http://[::1]:{port}/hook"),
        format!("http://0.0.0.0:{port}/hook"),
        format!("http://0x7f.0.0.1:{port}/hook"),
        format!("http://2130706433:{port}/hook"),
        "http://10.0.0.1/hook".to_string(),
        "http://169.254.169.254/latest/meta-data/".to_string(),
    ];
    // Creation with the built-in policy refuses every IP literal at once, naming the range,
    // and never echoing the URL.
    for url in urls.iter().filter(|u| !u.contains("localhost")) {
        let refused = endpoint_admin::create_from(
            &env.pool,
            &env.sealer(),
            &AddressPolicy::default(),
            NewEndpoint {
                tenant_id: tenant,
                url: format!("{url}?token=t0ps3cret"),
                ..Default::default()
            },
        )
        .await
        .expect_err(url);
        let msg = refused.to_string();
        assert!(
            msg.contains("refused") || msg.contains("forbidden"),
            "{url}: {msg}"
        );
        assert!(
            !msg.contains("t0ps3cret"),
            "{url}: the error repeats the token: {msg}"
        );
    }
    // Rows created under a looser policy (or before it existed) are refused when delivering.
    let anything = AddressPolicy::new(vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()]);
    let mut by_endpoint = HashMap::new();
    for url in &urls {
        by_endpoint.insert(
            endpoint_under(&env, &anything, tenant, url).await.to_string(),
            url.clone(),
        );
    }
    let token = start(&env, false);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "x": 1 }))])
        .await
        .unwrap();

    let letters = dead_letters(&env, urls.len()).await;
    assert_eq!(
        letters.len(),
        urls.len(),
        "one dead letter per forbidden endpoint"
    );
    // The tenant sees a fixed reason and the host it wrote; never what the name resolved
    // to (internal DNS answers) nor the range that refused it: those are in the log.
    let reason = |url: &str| {
        let host = url::Url::parse(url).unwrap().host_str().unwrap().to_string();
        format!("blocked_address: {host} is not an address deliveries may reach")
    };
    for l in &letters {
        let url = &by_endpoint[&l.endpoint_id];
        assert_eq!(l.error_class, "ssrf_blocked", "{url}: {}", l.reason);
        assert_eq!(l.reason, format!("permanent failure: {}", reason(url)), "{url}");
    }
    let localhost = by_endpoint.iter().find(|(_, u)| u.contains("localhost")).unwrap();
    let errors = || async {
        sqlx::query_scalar::<_, String>("SELECT error FROM hookstream.attempts WHERE endpoint_id = $1::uuid")
            .bind(localhost.0)
            .fetch_all(&env.pool)
            .await
            .unwrap()
    };
    // The attempt log is written in batches, after the dead letter.
    assert!(
        eventually(Duration::from_secs(15), || async { !errors().await.is_empty() }).await,
        "the refused attempt is in the attempt log"
    );
    let errors = errors().await;
    for e in &errors {
        assert_eq!(e, &reason(localhost.1));
        assert!(!e.contains("127.0.0.1") && !e.contains("::1"), "{e}");
    }
    assert_eq!(target.count(), 0, "no request reached the loopback target");
    token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_not_followed() {
    let env = TestEnv::new(2).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let target = Receiver::start(Behaviour::Ok).await;
    let to: &'static str = Box::leak(target.url().into_boxed_str());
    let redirector = Receiver::start(Behaviour::Redirect(to)).await;
    let ep = endpoint(&env, tenant, &redirector.url()).await;
    let token = start(&env, true);
    env.publish(&[NewEvent::new(tenant, "order.created", json!({ "x": 1 }))])
        .await
        .unwrap();

    let letters = dead_letters(&env, 1).await;
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].endpoint_id, ep.to_string());
    assert_eq!(letters[0].error_class, "http_3xx");
    assert_eq!(letters[0].last_status, 302);
    assert!(eventually(Duration::from_secs(2), || async { redirector.count() == 1 }).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(target.count(), 0, "the redirect target was never contacted");
    token.cancel();
}
