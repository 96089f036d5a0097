//! A flood of made-up credentials from one address (issue 41.4), on real PostgreSQL: past
//! its burst of failures the address is answered 429 naming `api.auth_failures`, without a
//! key lookup, until its budget refills; another address is untouched; a key the flooded
//! address already used keeps working (the flood evicts no key in use); the portal's login
//! links count against the same budget; and the metrics say so.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt as _};
use hookstream_testkit::TestEnv;
use reqwest::StatusCode;

use crate::common;
use common::Api;

const FLOOD: usize = 3_000;

/// A client whose connections come from `ip` (any 127.0.0.0/8 address is this host).
fn from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn get(client: &reqwest::Client, api: &Api, token: &str) -> reqwest::Response {
    client
        .get(format!("{}/api/v1/app", api.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

fn metric(api: &Api, name: &str) -> f64 {
    let text = hookstream_telemetry::prometheus::TextEncoder::new()
        .encode_to_string(&api.registry.gather())
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_keys_from_one_address_is_throttled_and_others_are_not() {
    let env = TestEnv::new(1).await.unwrap();
    let mut cfg = common::api_config(&env);
    // Production's budget (the default), and a cache that outlives the test.
    cfg.api.auth_failures = Default::default();
    cfg.api.key_cache_ms = 600_000;
    let (per_min, burst) = (
        cfg.api.auth_failures.per_address_per_min,
        cfg.api.auth_failures.burst,
    );
    let api = Arc::new(Api::start(cfg).await);
    let a = env.tenant("a").await.unwrap().to_string();
    let (_, used) = common::api_tenant_key(&api, &a).await;
    let (_, unused) = common::api_tenant_key(&api, &a).await;
    let flooder = from("127.0.0.1");
    assert_eq!(get(&flooder, &api, &used).await.status(), StatusCode::OK);
    let lookups_before = metric(&api, "hookstream_api_key_lookups_total");

    // 3,000 made-up keys, 16 at a time.
    let started = Instant::now();
    let answers: Vec<(StatusCode, Option<String>, String)> = stream::iter(0..FLOOD)
        .map(|i| {
            let (client, api) = (flooder.clone(), api.clone());
            async move {
                let r = get(&client, &api, &format!("hsk_madeup{i:032}")).await;
                let retry_after = r
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_string());
                (r.status(), retry_after, r.text().await.unwrap())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let elapsed = started.elapsed();
    let unauthorized = answers.iter().filter(|a| a.0 == StatusCode::UNAUTHORIZED).count();
    let throttled: Vec<_> = answers
        .iter()
        .filter(|a| a.0 == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(unauthorized + throttled.len(), FLOOD, "only 401s and 429s");
    // The burst, and what the rate refilled while the flood ran.
    let refilled = (elapsed.as_secs_f64() * f64::from(per_min) / 60.0).ceil() as usize;
    assert!(
        unauthorized >= burst as usize && unauthorized <= burst as usize + refilled + 1,
        "{unauthorized} answered 401 in {elapsed:?}: the burst is {burst}, {per_min}/min"
    );
    for (_, retry_after, body) in &throttled {
        assert!(retry_after.is_some(), "a 429 says when to retry");
        assert!(body.contains("api.auth_failures.per_address_per_min"), "{body}");
    }
    // Blocked requests never reached the database: a lookup per 401, and per request that
    // was already past the block check when the block began (at most the 16 in flight).
    let lookups = metric(&api, "hookstream_api_key_lookups_total") - lookups_before;
    assert!(
        lookups <= (unauthorized + 16) as f64,
        "{lookups} key lookups for {unauthorized} failures allowed"
    );
    assert!(metric(&api, "hookstream_api_auth_throttled_total") >= (FLOOD - unauthorized) as f64);
    assert!(metric(&api, "hookstream_api_auth_failures_total") >= unauthorized as f64);

    // While blocked: the key this address already used still answers (cached, no lookup)...
    assert_eq!(get(&flooder, &api, &used).await.status(), StatusCode::OK);
    // ...a key it never used does not (it would need a lookup), and says why.
    let r = get(&flooder, &api, &unused).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another address is untouched: its keys work, and its failures are its own.
    let neighbour = from("127.0.0.2");
    assert_eq!(get(&neighbour, &api, &unused).await.status(), StatusCode::OK);
    assert_eq!(
        get(&neighbour, &api, "hsk_wrong").await.status(),
        StatusCode::UNAUTHORIZED
    );

    // The block ends when the budget has a cell again: one more failure is a 401.
    let wait: u64 = throttled.last().unwrap().1.as_ref().unwrap().parse().unwrap();
    assert!(wait <= 60 / u64::from(per_min) + 1, "Retry-After {wait} s");
    tokio::time::sleep(Duration::from_secs(wait) + Duration::from_millis(200)).await;
    assert_eq!(
        get(&flooder, &api, "hsk_again").await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_portal_links_spend_the_same_budget() {
    let env = TestEnv::new(1).await.unwrap();
    let mut cfg = common::api_config(&env);
    cfg.api.auth_failures = Default::default();
    let burst = cfg.api.auth_failures.burst as usize;
    let api = Api::start(cfg).await;
    let a = env.tenant("a").await.unwrap().to_string();
    let guesser = from("127.0.0.3");
    let link = |token: &str| format!("{}/portal/login?token={token}", api.base);
    let mut statuses = Vec::new();
    for i in 0..burst + 5 {
        statuses.push(
            guesser
                .get(link(&format!("guess{i}")))
                .send()
                .await
                .unwrap()
                .status(),
        );
    }
    assert!(
        statuses[..burst].iter().all(|s| *s == StatusCode::UNAUTHORIZED),
        "{statuses:?}"
    );
    assert!(
        statuses[burst..]
            .iter()
            .all(|s| *s == StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    // A real link from the blocked address waits too; from elsewhere it opens.
    let url = common::portal_link(&api, &a, false).await;
    let path = &url[url.find("/portal/login").unwrap()..];
    let r = guesser.get(format!("{}{path}", api.base)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().contains_key("retry-after"));
    let r = from("127.0.0.4")
        .get(format!("{}{path}", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Made-up session cookies from the blocked address: 429 too, before any lookup.
    let r = guesser
        .get(format!("{}/portal", api.base))
        .header("cookie", "hs_portal=madeup")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // And the API's bearer tokens share the budget.
    assert_eq!(
        get(&guesser, &api, "hsk_wrong").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}
