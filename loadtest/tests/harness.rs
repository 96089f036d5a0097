//! The harness end to end, small: `loadtest run steady --baseline` against the real stack
//! (PostgreSQL and Kafka from `make test`), with the services `cargo test --workspace` built
//! (debug), and the report it writes.

use std::path::PathBuf;
use std::process::Command;

/// The directory of this test's `loadtest` binary, where `cargo test --workspace` also puts
/// `dispatcher` and `outbox-relay`.
fn services_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_loadtest"));
    exe.parent().expect("the binary has a directory").to_path_buf()
}

#[test]
fn steady_beside_the_baseline_delivers_everything_and_writes_the_report() {
    let dir = services_dir();
    for bin in ["dispatcher", "outbox-relay"] {
        assert!(
            dir.join(bin).exists(),
            "{} is missing: run through `cargo test --workspace` (make test), which builds it",
            dir.join(bin).display()
        );
    }
    let out = std::env::temp_dir().join(format!("loadtest-{}", uuid::Uuid::new_v4().simple()));
    let status = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args([
            "run",
            "steady",
            "--events",
            "300",
            "--rate",
            "150",
            "--baseline",
            "--baseline-variants",
            "polling-tuned",
            "--baseline-deadline-s",
            "30",
            "--deadline-s",
            "60",
            "--out",
        ])
        .arg(&out)
        .env("LOADTEST_SERVICES_DIR", &dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("loadtest runs");
    assert!(status.success(), "loadtest run steady failed");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("report.json"))
            .expect("report.json is JSON");
    for key in [
        "scenario",
        "events",
        "expected_deliveries",
        "delivered",
        "lost",
        "duplicates",
        "early_retries",
        "invalid_signatures",
        "duration_s",
        "throughput_per_s",
        "latency_ms",
        "per_class",
        "processes",
        "baseline",
        "verdict",
    ] {
        assert!(report.get(key).is_some(), "report.json has {key}");
    }
    assert_eq!(report["scenario"], "steady");
    assert_eq!(report["verdict"]["passed"], true, "{}", report["verdict"]);
    assert_eq!(report["expected_deliveries"], 300);
    assert_eq!(report["delivered"], 300, "every event delivered: {report}");
    assert_eq!(report["lost"], 0);
    assert_eq!(report["invalid_signatures"], 0);
    assert_eq!(report["early_retries"], 0);
    assert!(report["latency_ms"]["p99"].as_f64().unwrap_or(0.0) > 0.0);
    assert!(report["processes"]["dispatcher"]["cpu_s"].as_f64().unwrap_or(0.0) > 0.0);
    let tuned = &report["baseline"]["polling_tuned"];
    assert_eq!(
        tuned["delivered"], 300,
        "the baseline delivered everything: {tuned}"
    );
    assert_eq!(tuned["invalid_signatures"], 0);
    assert!(tuned["hookstream_over_baseline"]["throughput_per_s"]
        .as_f64()
        .is_some());

    let page = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(page.contains("<svg") && page.contains("baseline, polling_tuned"));
    for chart in ["all-throughput", "all-latency", "steady-backlog"] {
        assert!(
            out.join("charts").join(format!("{chart}.svg")).exists(),
            "chart {chart}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// `loadtest run ARGS --out DIR` with the debug service builds and `envs`; asserts it passed
/// its verdict, and returns its report and its output directory.
fn run_fault_scenario(args: &[&str], envs: &[(&str, String)]) -> (serde_json::Value, PathBuf) {
    let out = std::env::temp_dir().join(format!("loadtest-{}-{}", args[0], uuid::Uuid::new_v4().simple()));
    let status = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(&out)
        .env("LOADTEST_SERVICES_DIR", services_dir())
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("loadtest runs");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("report.json"))
            .expect("report.json is JSON");
    assert!(
        status.success(),
        "loadtest run {} failed: {}",
        args[0],
        report["verdict"]
    );
    assert_eq!(report["scenario"], args[0]);
    (report, out)
}

/// `loadtest run chaos` with SIGKILLs of the services only (no broker or PostgreSQL restarts,
/// which would disturb the other tests on the shared stack): nothing lost, every duplicate
/// explained and under its kind's ceiling, nothing crashed.
#[test]
fn chaos_with_kills_only_loses_nothing_and_bounds_duplicates() {
    let (report, out) = run_fault_scenario(
        &[
            "chaos",
            "--rate",
            "50",
            "--kills-per-service",
            "2",
            "--handovers",
            "0",
            "--broker-restarts",
            "0",
            "--pg-restarts",
            "0",
            "--db-outage-s",
            "0",
            // Longer than the retry schedule (150 s from first attempt to last): an event
            // committed last that needs every attempt, slowed by the kills' rebalances on a
            // busy machine, must still be able to arrive. (A run that drains ends sooner.)
            "--deadline-s",
            "300",
        ],
        &[],
    );
    let chaos = &report["chaos"];
    for (stage, lost) in chaos["lost"].as_object().expect("lost by stage") {
        assert_eq!(lost, 0, "{stage}: {}", chaos["lost"]);
    }
    assert_eq!(
        chaos["crashes"].as_array().map(Vec::len),
        Some(0),
        "{}",
        chaos["crashes"]
    );
    let kinds = chaos["per_kind"].as_object().expect("per kind");
    for kind in [
        "relay_kill",
        "events_role_kill",
        "retry_role_kill",
        "dlq_sink_kill",
    ] {
        let k = &kinds[kind];
        assert_eq!(k["faults"], 2, "{kind}: {k}");
        assert!(
            k["duplicates"].as_u64() <= k["duplicate_ceiling"].as_u64(),
            "{kind}: {k}"
        );
    }
    assert_eq!(
        kinds["dlq_sink_kill"]["duplicates"], 0,
        "the sink delivers nothing"
    );
    assert_eq!(report["lost"], 0);
    assert_eq!(report["invalid_signatures"], 0);
    assert_eq!(report["early_retries"], 0);
    for chart in ["faults-deliveries", "faults-latency", "faults-backlog"] {
        assert!(
            out.join("charts").join(format!("{chart}.svg")).exists(),
            "chart {chart}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// `loadtest run broker-kill` small, on a private cluster of three brokers (replication 3,
/// `min.insync.replicas=2`): the broker leading most events partitions SIGKILLed and
/// restarted, then every broker restarted in turn (SIGTERM). Nothing lost, no early retry,
/// every duplicate explained and under its fault's ceiling, no service crashed.
#[test]
fn broker_kill_on_three_brokers_loses_nothing() {
    let cluster = hookstream_testkit::broker::PrivateKafka::cluster(3);
    let database = std::env::var("HOOKSTREAM_TEST_DATABASE_URL").expect("make test sets the database");
    let pg_port = database
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .expect("the database URL has a port")
        .to_string();
    let mut envs = cluster.stack_env();
    envs.push(("HOOKSTREAM_TEST_KAFKA_BROKERS", cluster.brokers()));
    // PostgreSQL is the shared one: this run restarts only Kafka.
    envs.push(("HOOKSTREAM_PG_PORT", pg_port));
    let (report, out) = run_fault_scenario(
        &[
            "broker-kill",
            "--rate",
            "50",
            "--broker-leader-kills",
            "1",
            "--broker-rolling-restarts",
            "1",
            "--deadline-s",
            "300",
        ],
        &envs,
    );
    assert_eq!(report["lost"], 0, "{}", report["chaos"]["lost"]);
    assert_eq!(report["early"], 0);
    for (stage, lost) in report["chaos"]["lost"].as_object().expect("lost by stage") {
        assert_eq!(lost, 0, "{stage}: {}", report["chaos"]["lost"]);
    }
    assert_eq!(
        report["chaos"]["crashes"].as_array().map(Vec::len),
        Some(0),
        "{}",
        report["chaos"]["crashes"]
    );
    let kinds = report["chaos"]["per_kind"].as_object().expect("per kind");
    for kind in ["broker_leader_kill", "broker_rolling_restart"] {
        let k = &kinds[kind];
        assert_eq!(k["faults"], 1, "{kind}: {k}");
        assert!(
            k["duplicates"].as_u64() <= k["duplicate_ceiling"].as_u64(),
            "{kind}: {k}"
        );
    }
    assert!(report["stall_s"].as_f64().is_some(), "a stall was measured");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&out);
}
