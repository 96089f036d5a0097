//! PostgreSQL stops answering on the relay's connections without closing them: a failover
//! whose old primary went dark (or a partition that drops packets). The relay's connection
//! that holds its shards and runs every batch then waits on a socket nothing will answer; the
//! kernel gives up after about 15 minutes, a frozen server never. The relay gives up on a
//! round trip after the statement timeout plus a margin, drops that connection, connects again
//! (to the new primary) and ships what was committed meanwhile. Settings as shipped.

use std::path::Path;
use std::time::{Duration, Instant};

use hookstream_testkit::partition::Partition;
use hookstream_testkit::process::{admin_get, free_port, service_env, ServiceProcess};
use hookstream_testkit::{eventually, TestEnv};

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_goes_dark_under_the_relay_is_left_for_a_new_connection() {
    let env = TestEnv::new(3).await.unwrap();
    let tenant = env.tenant("t").await.unwrap();
    let (partition, url) = Partition::database(&env.database.url).await.unwrap();
    let mut vars = service_env(&env);
    let port = free_port();
    vars.retain(|(k, _)| k != "HOOKSTREAM_DATABASE__URL" && k != "HOOKSTREAM_TELEMETRY__LISTEN");
    vars.push(("HOOKSTREAM_DATABASE__URL".into(), url));
    vars.push(("HOOKSTREAM_TELEMETRY__LISTEN".into(), format!("127.0.0.1:{port}")));
    let log = env.log_path("relay");
    let relay = ServiceProcess::spawn(Path::new(env!("CARGO_BIN_EXE_outbox-relay")), &vars, &log).unwrap();
    let mut published = common::publish(&env, tenant, 100).await;
    assert!(
        eventually(Duration::from_secs(30), || async {
            env.outbox_len().await.unwrap() == 0
        })
        .await,
        "the first rows shipped: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    partition.cut();
    let cut = Instant::now();
    published.extend(common::publish(&env, tenant, 100).await);
    // The statement timeout as shipped (30 s), the margin, the relay's backoff, and slack for
    // a loaded machine.
    let bound = Duration::from_secs(30 + 5 + 2 + 15);
    // Meanwhile the backlog gauge (what the backlog alert reads) sees the rows waiting: its
    // reads do not wait on a dark connection either.
    let backlog = || async {
        let (_, body) = admin_get(port, "/metrics").await?;
        body.lines()
            .find_map(|l| l.strip_prefix("hookstream_relay_backlog_rows "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let mut seen_waiting = 0.0f64;
    let mut shipped = false;
    while !shipped && cut.elapsed() < bound {
        if let Some(rows) = backlog().await {
            seen_waiting = seen_waiting.max(rows);
        }
        shipped = env.outbox_len().await.unwrap() == 0;
        if !shipped {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        shipped,
        "the rows committed after the cut shipped within {bound:?}: {}",
        output
    );
    println!(
        "database gone dark: the relay shipped again {:?} after the cut; the backlog gauge showed {seen_waiting} rows meanwhile",
        cut.elapsed()
    );
    assert!(
        seen_waiting >= 100.0,
        "the backlog gauge showed the rows waiting (at most {seen_waiting})"
    );
    assert!(
        output.contains("postgresql did not answer"),
        "the relay says why it reconnected: {output}"
    );
    common::all_in_kafka(&env, &published).await;
    assert_eq!(relay.terminate().await, Some(0));
}
