//! The proof with a real client: the official Svix Python SDK (PyPI `svix`, installed into
//! ~/.cache/hookstream by scripts/setup/svix-sdk.sh) drives the API, with a relay and a
//! dispatcher delivering to a receiver the script runs (`tests/sdk/svix_sdk_check.py`): an
//! application and an endpoint, signed deliveries verified with the SDK's own verifier and the
//! secret the SDK reads back, attempts, a secret rotation (both signatures on the next
//! delivery), a recovery of failed deliveries, and 250 messages paged through.

use std::path::Path;
use std::process::Stdio;

use hookstream_testkit::TestEnv;

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_svix_python_sdk_works_unchanged() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let setup = tokio::process::Command::new("bash")
        .arg(root.join("scripts/setup/svix-sdk.sh"))
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("run scripts/setup/svix-sdk.sh");
    assert!(setup.status.success(), "scripts/setup/svix-sdk.sh failed");
    let python = String::from_utf8(setup.stdout).unwrap();
    let python = python
        .lines()
        .last()
        .expect("the script prints the python")
        .trim()
        .to_string();

    let env = TestEnv::new(2).await.unwrap();
    // The test tiers retry twice: `message.attempt.failing` at the second failure (Svix: fourth).
    hookstream_store::sqlx::query("UPDATE hookstream.settings SET operational_failing_after = 2")
        .execute(&env.pool)
        .await
        .unwrap();
    let api = common::Api::start(common::api_config(&env)).await;
    let pipeline = common::start_pipeline(&env);
    let run = tokio::process::Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/svix_sdk_check.py"))
        .env("HOOKSTREAM_API_URL", &api.base)
        .env("HOOKSTREAM_API_TOKEN", common::OPERATOR_TOKEN)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(180), run)
        .await
        .expect("the SDK script finishes within 3 minutes")
        .expect("the SDK script runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "the SDK script failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("\"ok\": true"), "{stdout}");
    pipeline.cancel();
}
