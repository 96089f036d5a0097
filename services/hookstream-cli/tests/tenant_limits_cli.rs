//! `hookstream tenant limits`: a tenant's caps, overridden and reset, and the cap refusing
//! one more key through the CLI itself (the trigger holds for every writer).

use hookstream_testkit::process::service_env;
use hookstream_testkit::TestEnv;
use serde_json::Value;

use crate::common;

/// Whether `hookstream args…` succeeded, and what it printed.
async fn hookstream(env: &TestEnv, args: &[&str]) -> (bool, String, String) {
    let mut c = common::command();
    c.args(args).envs(service_env(env));
    let run = common::run(c).await;
    (run.code == Some(0), run.stdout, run.stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_are_shown_overridden_enforced_and_reset() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("acme").await.unwrap().to_string();
    let (ok, out, err) = hookstream(&env, &["tenant", "limits", &tenant, "--json"]).await;
    assert!(ok, "{err}");
    let caps: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(caps[1]["resource"], "api_keys");
    assert_eq!(
        (caps[1]["max"].as_i64(), caps[1]["overridden"].as_bool()),
        (Some(100), Some(false))
    );

    let (ok, out, err) = hookstream(&env, &["tenant", "limits", &tenant, "--set", "api_keys=1"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("api_keys") && out.contains("0 of 1") && out.contains("override"),
        "{out}"
    );
    let key = ["api-key", "create", "--tenant", "acme", "--name", "ci"];
    let (ok, _, err) = hookstream(&env, &key).await;
    assert!(ok, "{err}");
    let (ok, _, err) = hookstream(&env, &key).await;
    assert!(!ok, "a second key is over the cap");
    assert!(
        err.contains("at most 1 api keys") && err.contains("tenant_limits"),
        "{err}"
    );

    let (ok, out, err) = hookstream(&env, &["tenant", "limits", &tenant, "--set", "api_keys=default"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("1 of 100") && out.contains("default"), "{out}");
    assert!(hookstream(&env, &key).await.0, "room again");

    for bad in ["api_keys=0", "widgets=5", "api_keys=lots", "api_keys"] {
        let (ok, _, err) = hookstream(&env, &["tenant", "limits", &tenant, "--set", bad]).await;
        assert!(!ok, "{bad}");
        assert!(!err.is_empty() && !err.contains("panicked"), "{bad}: {err}");
    }
}
