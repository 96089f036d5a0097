//! The `dispatch` scenario: outbox commit → relay → Kafka → dispatcher → receivers.
//!
//! Throughput: a backlog of `--events` events is written through `hookstream.enqueue`, each
//! subscribed by `--endpoints` receivers (fan-out), then one relay and one dispatcher (release
//! builds) deliver it; deliveries/s is the deliveries divided by the time from the services'
//! start to the last delivery. Latency: `--rate` events/s for `--seconds` to one endpoint,
//! measured from the row's creation to its arrival at the receiver. Receivers run in this
//! process on loopback and verify every signature with the `standardwebhooks` crate.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use hookstream_store::endpoints::{self, NewEndpoint};
use hookstream_testkit::process::{dispatcher_env, service_env, ServiceProcess};
use hookstream_testkit::{Behaviour, Receiver, TestEnv};
use serde_json::json;

use crate::relay::{prepare, release_bin};
use crate::report::{Latency, Machine};
use crate::{procstat, RunArgs};

pub async fn run(args: &RunArgs) -> anyhow::Result<serde_json::Value> {
    prepare()?;
    let in_flight = args.max_in_flight_events;
    let throughput = burst(args.events, args.endpoints, in_flight, &args.out).await?;
    let latency = steady(args.rate, args.seconds, in_flight, &args.out).await?;
    Ok(json!({
        "scenario": "dispatch",
        "machine": Machine::read(),
        "throughput": throughput,
        "latency": latency,
    }))
}

fn bench_dispatcher_env(env: &TestEnv, max_in_flight_events: usize) -> Vec<(String, String)> {
    let mut vars = dispatcher_env(env);
    vars.push((
        "HOOKSTREAM_DISPATCHER__MAX_IN_FLIGHT_EVENTS".into(),
        max_in_flight_events.to_string(),
    ));
    vars
}

async fn receivers(env: &TestEnv, tenant: uuid::Uuid, n: usize) -> anyhow::Result<Vec<Receiver>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let r = Receiver::start(Behaviour::Ok).await;
        let (_, secret) = endpoints::create(
            &env.pool,
            &env.sealer(),
            NewEndpoint {
                tenant_id: tenant,
                url: r.url(),
                max_in_flight: Some(256),
                ..Default::default()
            },
        )
        .await?;
        r.set_secret(&secret.expose());
        out.push(r);
    }
    Ok(out)
}

async fn enqueue(env: &TestEnv, tenant: uuid::Uuid, n: i32) -> anyhow::Result<()> {
    crate::engine::enqueue(&env.pool, tenant, n as usize).await
}

fn start_services(
    env: &TestEnv,
    in_flight: usize,
    out: &Path,
    tag: &str,
) -> anyhow::Result<(ServiceProcess, ServiceProcess)> {
    let relay = ServiceProcess::spawn(
        &release_bin("outbox-relay"),
        &service_env(env),
        &out.join(format!("relay-{tag}.log")),
    )?;
    let dispatcher = ServiceProcess::spawn(
        &release_bin("dispatcher"),
        &bench_dispatcher_env(env, in_flight),
        &out.join(format!("dispatcher-{tag}.log")),
    )?;
    Ok((relay, dispatcher))
}

fn usage(p: &ServiceProcess) -> serde_json::Value {
    match p.pid().and_then(procstat::sample) {
        Some((cpu, rss)) => json!({ "cpu_s": cpu, "max_rss_mb": rss }),
        None => serde_json::Value::Null,
    }
}

async fn burst(
    events: usize,
    fanout: usize,
    in_flight: usize,
    out: &Path,
) -> anyhow::Result<serde_json::Value> {
    let env = TestEnv::new(6).await?;
    let tenant = env.tenant("bench").await?;
    let receivers = receivers(&env, tenant, fanout).await?;
    eprintln!("[dispatch] backlog of {events} events × {fanout} endpoints");
    let mut left = events;
    while left > 0 {
        let n = left.min(5_000);
        enqueue(&env, tenant, n as i32).await?;
        left -= n;
    }
    let expected = events * fanout;
    let started = Instant::now();
    let (relay, dispatcher) = start_services(&env, in_flight, out, &format!("burst{fanout}"))?;
    let mut last = Instant::now();
    loop {
        let got: usize = receivers.iter().map(Receiver::count).sum();
        if got >= expected {
            break;
        }
        if last.elapsed() > Duration::from_secs(2) {
            eprintln!(
                "[dispatch] {got}/{expected} deliveries, {:.0}/s",
                got as f64 / started.elapsed().as_secs_f64()
            );
            last = Instant::now();
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(900),
            "not drained in 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed().as_secs_f64();
    let (relay_use, dispatcher_use) = (usage(&relay), usage(&dispatcher));
    relay.terminate().await;
    dispatcher.terminate().await;
    let mut invalid = 0;
    let mut duplicates = 0;
    for r in &receivers {
        let got = r.received();
        invalid += got.iter().filter(|d| !d.verified).count();
        let distinct: HashSet<&str> = got.iter().map(|d| d.webhook_id.as_str()).collect();
        duplicates += got.len() - distinct.len();
    }
    eprintln!(
        "[dispatch] fan-out {fanout}: {expected} deliveries in {took:.1} s = {:.0}/s",
        expected as f64 / took
    );
    Ok(json!({
        "events": events,
        "endpoints": fanout,
        "expected_deliveries": expected,
        "duplicates": duplicates,
        "invalid_signatures": invalid,
        "duration_s": took,
        "throughput_per_s": expected as f64 / took,
        "relay": relay_use,
        "dispatcher": dispatcher_use,
    }))
}

async fn steady(
    rate: usize,
    seconds: u64,
    in_flight: usize,
    out: &Path,
) -> anyhow::Result<serde_json::Value> {
    let env = TestEnv::new(6).await?;
    let tenant = env.tenant("bench").await?;
    let receivers = receivers(&env, tenant, 1).await?;
    let (relay, dispatcher) = start_services(&env, in_flight, out, "steady")?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    eprintln!("[dispatch] latency phase: {rate} events/s for {seconds} s");
    let expected = rate * seconds as usize;
    let per_tick = (rate / 100).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sent = 0;
    let start = Instant::now();
    while sent < expected {
        tick.tick().await;
        let n = per_tick.min(expected - sent);
        enqueue(&env, tenant, n as i32).await?;
        sent += n;
    }
    let produce_s = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(60);
    while receivers[0].count() < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (relay_use, dispatcher_use) = (usage(&relay), usage(&dispatcher));
    relay.terminate().await;
    dispatcher.terminate().await;
    let got = receivers[0].received();
    let samples: Vec<f64> = got
        .iter()
        .filter_map(|d| {
            let body: serde_json::Value = serde_json::from_slice(&d.body).ok()?;
            Some(d.received_unix_ms - body.get("created_ms")?.as_f64()?)
        })
        .collect();
    let latency = Latency::of(samples);
    eprintln!(
        "[dispatch] latency at {rate}/s: p50 {:.1} ms, p99 {:.1} ms",
        latency.p50, latency.p99
    );
    Ok(json!({
        "rate_per_s": rate,
        "achieved_rate_per_s": sent as f64 / produce_s,
        "events": sent,
        "delivered": got.len(),
        "lost": sent.saturating_sub(got.len()),
        "invalid_signatures": got.iter().filter(|d| !d.verified).count(),
        "latency_ms": latency,
        "latency_measures": "outbox row created → request received by the receiver",
        "relay": relay_use,
        "dispatcher": dispatcher_use,
    }))
}
