//! Where a run's processes come from: the PostgreSQL and Kafka stack (started if needed) and
//! the service binaries (release builds, or those in `LOADTEST_SERVICES_DIR`).

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Set to a directory holding `outbox-relay` and `dispatcher` to run those builds instead of
/// building and running the release builds (the harness's own test runs the debug builds
/// `cargo test --workspace` made).
pub const SERVICES_DIR_VAR: &str = "LOADTEST_SERVICES_DIR";

/// Starts PostgreSQL and Kafka if needed and builds the release binaries. When both
/// `HOOKSTREAM_TEST_DATABASE_URL` and `HOOKSTREAM_TEST_KAFKA_BROKERS` are set, the caller
/// named a running stack (as `make test` does after starting it) and none is started: from
/// another checkout, the stack scripts would see that stack's ports taken by a state
/// directory not theirs and fail.
pub fn prepare() -> anyhow::Result<()> {
    let root = repo_root();
    let given = ["HOOKSTREAM_TEST_DATABASE_URL", "HOOKSTREAM_TEST_KAFKA_BROKERS"]
        .iter()
        .all(|v| std::env::var_os(v).is_some());
    if !given {
        let ok = std::process::Command::new("bash")
            .arg(root.join("scripts/stack/infra.sh"))
            .arg("start")
            .status()?;
        anyhow::ensure!(ok.success(), "could not start PostgreSQL and Kafka");
    }
    if std::env::var_os(SERVICES_DIR_VAR).is_none() {
        let ok = std::process::Command::new("cargo")
            .args([
                "build",
                "--release",
                "--quiet",
                "-p",
                "outbox-relay",
                "-p",
                "dispatcher",
            ])
            .current_dir(&root)
            .status()?;
        anyhow::ensure!(ok.success(), "cargo build --release failed");
    }
    // The stack the scripts started (their HOOKSTREAM_PG_PORT / HOOKSTREAM_KAFKA_PORT).
    let port = |var: &str, default: &str| std::env::var(var).unwrap_or_else(|_| default.into());
    if std::env::var("HOOKSTREAM_TEST_DATABASE_URL").is_err() {
        let url = format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            port("HOOKSTREAM_PG_PORT", "5432")
        );
        std::env::set_var("HOOKSTREAM_TEST_DATABASE_URL", url);
    }
    if std::env::var("HOOKSTREAM_TEST_KAFKA_BROKERS").is_err() {
        let brokers = format!("127.0.0.1:{}", port("HOOKSTREAM_KAFKA_PORT", "9092"));
        std::env::set_var("HOOKSTREAM_TEST_KAFKA_BROKERS", brokers);
    }
    Ok(())
}

/// A service binary of the workspace: the release build, or the one in `LOADTEST_SERVICES_DIR`.
pub fn service_bin(name: &str) -> PathBuf {
    match std::env::var_os(SERVICES_DIR_VAR) {
        Some(dir) => PathBuf::from(dir).join(name),
        None => repo_root().join("target/release").join(name),
    }
}
