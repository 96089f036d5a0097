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

/// The variables that place the stack the scripts act on (`scripts/stack/lib.sh`).
const STACK_VARS: [&str; 4] = [
    "HOOKSTREAM_STATE_DIR",
    "HOOKSTREAM_PG_PORT",
    "HOOKSTREAM_KAFKA_PORT",
    "HOOKSTREAM_KAFKA_CONTROLLER_PORT",
];

/// Why a run that restarts the stack may not run.
#[derive(Debug, thiserror::Error)]
pub enum NotOwnStack {
    #[error(
        "{0} is not set: this run restarts Kafka and PostgreSQL, so it needs a stack of its own \
         (set {vars}, e.g. HOOKSTREAM_STATE_DIR=$PWD/.chaos-stack HOOKSTREAM_PG_PORT=55432 \
         HOOKSTREAM_KAFKA_PORT=59092 HOOKSTREAM_KAFKA_CONTROLLER_PORT=59093)",
        vars = STACK_VARS.join(", ")
    )]
    Unset(&'static str),
    #[error("{var} is {given}, but the stack scripts act on port {port} (set by {port_var})")]
    Elsewhere {
        var: &'static str,
        given: String,
        port: String,
        port_var: &'static str,
    },
}

/// The port at the end of `host:port`, or of the authority of a `scheme://user@host:port/db` URL.
fn port_of(addr: &str) -> Option<&str> {
    let rest = addr.split_once("://").map_or(addr, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let host_port = authority.rsplit('@').next()?;
    host_port.rsplit_once(':').map(|(_, p)| p)
}

/// For runs that restart Kafka and PostgreSQL (`chaos`): the stack the scripts act on must be
/// named explicitly (never the default one others may be using), and the run's PostgreSQL and
/// Kafka (`HOOKSTREAM_TEST_*`, if given) must be that stack.
pub fn own_stack() -> Result<(), NotOwnStack> {
    let get = |var: &'static str| std::env::var(var).map_err(|_| NotOwnStack::Unset(var));
    for var in STACK_VARS {
        get(var)?;
    }
    for (var, port_var) in [
        ("HOOKSTREAM_TEST_DATABASE_URL", "HOOKSTREAM_PG_PORT"),
        ("HOOKSTREAM_TEST_KAFKA_BROKERS", "HOOKSTREAM_KAFKA_PORT"),
    ] {
        let port = get(port_var)?;
        if let Ok(given) = std::env::var(var) {
            // Every broker of the list must be a node of the stack (`kafka.sh bootstrap`).
            let ours: Vec<String> = if var == "HOOKSTREAM_TEST_KAFKA_BROKERS" {
                (1..=brokers() as i32).map(|n| node_port(&port, n)).collect()
            } else {
                vec![port.clone()]
            };
            let ok = given
                .split(',')
                .all(|a| port_of(a.trim()).is_some_and(|p| ours.iter().any(|o| o == p)));
            if !ok {
                return Err(NotOwnStack::Elsewhere {
                    var,
                    given,
                    port,
                    port_var,
                });
            }
        }
    }
    Ok(())
}

/// `scripts/stack/SCRIPT ARGS…` on the stack the environment names; fails when the script does.
pub async fn script(name: &str, args: &[&str]) -> anyhow::Result<()> {
    let path = repo_root().join("scripts/stack").join(name);
    let out = tokio::process::Command::new("bash")
        .arg(&path)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "{name} {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Whether something accepts TCP connections on 127.0.0.1:`port` (within a second).
pub async fn listening(port: &str) -> bool {
    let Ok(port) = port.parse::<u16>() else {
        return false;
    };
    let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
    matches!(
        tokio::time::timeout(std::time::Duration::from_secs(1), connect).await,
        Ok(Ok(_))
    )
}

/// How many Kafka brokers the stack the scripts act on runs (`HOOKSTREAM_KAFKA_BROKERS`, 1).
pub fn brokers() -> usize {
    std::env::var("HOOKSTREAM_KAFKA_BROKERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// The plaintext port of node `node` of a stack whose first broker listens on `base`
/// (`scripts/stack/kafka.sh`: node i at base + 100 (i - 1)).
pub fn node_port(base: &str, node: i32) -> String {
    let base: i32 = base.parse().unwrap_or(9092);
    (base + 100 * (node - 1)).to_string()
}

/// The PostgreSQL and Kafka ports of the stack the scripts act on.
pub fn stack_ports() -> (String, String) {
    let port = |var: &str, default: &str| std::env::var(var).unwrap_or_else(|_| default.into());
    (
        port("HOOKSTREAM_PG_PORT", "5432"),
        port("HOOKSTREAM_KAFKA_PORT", "9092"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_of_urls_and_broker_lists() {
        assert_eq!(
            port_of("postgres://postgres@127.0.0.1:55432/postgres"),
            Some("55432")
        );
        assert_eq!(port_of("postgres://u:pw@host:5432"), Some("5432"));
        assert_eq!(port_of("127.0.0.1:59092"), Some("59092"));
        assert_eq!(port_of("postgres://host/db"), None);
        assert_eq!(node_port("59092", 1), "59092");
        assert_eq!(node_port("59092", 3), "59292");
    }
}
