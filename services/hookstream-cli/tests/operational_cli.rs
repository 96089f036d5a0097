//! `hookstream endpoint create --operational` from the shell against the real stack: an
//! operational-webhook endpoint for one tenant gets that tenant's `endpoint.disabled` and
//! `endpoint.enabled` (Svix's shapes), signed with its own secret, and nothing about another
//! tenant; names that are no operational event are refused naming them.

use std::time::Duration;

use hookstream_testkit::{eventually, Behaviour, Receiver, TestEnv};
use serde_json::Value;

use crate::common;
use common::Run;

async fn hookstream(env: &TestEnv, args: &[&str]) -> Run {
    let mut c = common::against(env, &env.kafka.brokers);
    // Receivers on loopback, which the SSRF rules refuse by default.
    c.env("HOOKSTREAM_DELIVERY__ALLOW_CIDRS", r#"["127.0.0.0/8"]"#)
        .args(args);
    common::run(c).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operational_endpoint_made_with_the_cli_gets_its_tenants_events() {
    let env = TestEnv::new(2).await.unwrap();
    let shop = env.tenant("shop").await.unwrap();
    let other = env.tenant("other").await.unwrap();
    let tenant_rx = Receiver::start(Behaviour::Ok).await;
    let ep = env.endpoint(shop, &tenant_rx, &[]).await.unwrap().to_string();
    let other_ep = env.endpoint(other, &tenant_rx, &[]).await.unwrap().to_string();

    let r = hookstream(
        &env,
        &[
            "endpoint",
            "create",
            "--operational",
            "--url",
            "http://127.0.0.1:1/",
            "--event-types",
            "order.created",
        ],
    )
    .await;
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(
        r.stderr
            .contains("[\"order.created\"] are not operational events"),
        "{}",
        r.stderr
    );

    let ops = Receiver::start(Behaviour::Ok).await;
    let made = hookstream(
        &env,
        &[
            "endpoint",
            "create",
            "--operational",
            "--tenant",
            "shop",
            "--url",
            &ops.url(),
            "--event-types",
            "endpoint.disabled,endpoint.enabled",
            "--json",
        ],
    )
    .await
    .ok()
    .json();
    ops.set_secret(made["secret"].as_str().unwrap());
    let listed = hookstream(&env, &["endpoint", "list", "--operational", "--json"])
        .await
        .ok()
        .json();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["channels"][0], format!("tenant.{shop}"), "{listed:?}");

    let pipeline = common::start_pipeline(&env);
    for id in [&ep, &other_ep] {
        hookstream(&env, &["endpoint", "disable", id]).await.ok();
    }
    hookstream(&env, &["endpoint", "enable", &ep]).await.ok();
    assert!(
        eventually(Duration::from_secs(40), || async { ops.count() >= 2 }).await,
        "both events delivered: {}",
        ops.count()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = ops.received();
    assert!(
        got.iter().all(|r| r.verified),
        "signed with the operational endpoint's own secret"
    );
    let bodies: Vec<Value> = got
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let types: Vec<&str> = bodies.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(types.len(), 2, "nothing about the other tenant: {bodies:?}");
    assert!(
        types.contains(&"endpoint.disabled") && types.contains(&"endpoint.enabled"),
        "{types:?}"
    );
    for b in &bodies {
        assert_eq!(b["data"]["endpointId"], ep, "{b}");
        assert_eq!(b["data"]["appId"], shop.to_string(), "{b}");
    }
    let disabled = bodies.iter().find(|b| b["type"] == "endpoint.disabled").unwrap();
    assert_eq!(disabled["data"]["trigger"], "manual", "{disabled}");
    pipeline.cancel();
}
