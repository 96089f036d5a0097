//! `hookstream api-key`: a key is printed once, stored as its SHA-256 with a visible prefix,
//! listed without the key, revoked; `hash-token` prints what `api.operator_token_hashes` takes.

use std::process::Stdio;

use hookstream_store::api_keys;
use hookstream_testkit::process::service_env;
use hookstream_testkit::TestEnv;
use serde_json::Value;
use tokio::io::AsyncWriteExt as _;

async fn hookstream(env: &TestEnv, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_hookstream"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(service_env(env))
        .output()
        .await
        .expect("run hookstream");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_shown_once_stored_hashed_listed_and_revoked() {
    let env = TestEnv::new(1).await.unwrap();
    let tenant = env.tenant("acme").await.unwrap();
    let (ok, out, err) = hookstream(
        &env,
        &["api-key", "create", "--tenant", "acme", "--name", "ci", "--json"],
    )
    .await;
    assert!(ok, "{err}");
    let made: Value = serde_json::from_str(&out).unwrap();
    let key = made["key"].as_str().unwrap();
    assert!(key.starts_with("hsk_") && key.len() > 40, "{key}");
    assert_eq!(made["tenant_id"], tenant.to_string());
    let stored = api_keys::find_by_hash(&env.pool, &api_keys::hash(key))
        .await
        .unwrap()
        .expect("stored by its hash");
    assert_eq!(stored.prefix, &key[..api_keys::PREFIX_LEN]);
    let raw: Vec<u8> = hookstream_store::sqlx::query_scalar("SELECT hash FROM hookstream.api_keys")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert!(
        !raw.windows(8).any(|w| key.as_bytes().windows(8).any(|k| k == w)),
        "the key itself is not stored"
    );

    let (ok, out, _) = hookstream(&env, &["api-key", "list", "--tenant", "acme"]).await;
    assert!(ok);
    assert!(
        out.contains(&stored.prefix) && !out.contains(key),
        "listed by prefix, never the key: {out}"
    );
    assert!(out.contains("never used") && out.contains("active"), "{out}");

    let (ok, out, err) = hookstream(&env, &["api-key", "revoke", &stored.id.to_string()]).await;
    assert!(ok && out.contains("revoked"), "{out}{err}");
    let again = api_keys::find_by_hash(&env.pool, &api_keys::hash(key))
        .await
        .unwrap()
        .unwrap();
    assert!(again.revoked_at.is_some());
    let (ok, out, _) = hookstream(&env, &["api-key", "list"]).await;
    assert!(ok && out.contains("revoked"), "{out}");

    let (ok, _, err) = hookstream(&env, &["api-key", "create", "--tenant", "nobody"]).await;
    assert!(!ok && err.contains("unknown tenant"), "{err}");

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_hookstream"))
        .args(["api-key", "hash-token"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"an-operator-token-of-the-test").await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let printed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        printed.trim(),
        format!(
            "sha256:{}",
            hex::encode(api_keys::hash("an-operator-token-of-the-test"))
        )
    );
}
