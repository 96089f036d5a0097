//! The inbox's acknowledgement benchmark: an open-loop load of signed deliveries at a fixed
//! rate against the demo shop receiver (`hookstream_inbox::demo`, served in this process on
//! its own runtime), measuring each answer's latency from the moment the request was due (so
//! a stall counts against every request it delays), while the workers process into the shop's
//! tables. Reports the acknowledgement percentiles, whether processing kept up (the backlog
//! sampled every second, the time to drain after the load), and processing latency.
//!
//! ```sh
//! cargo run --release -p hookstream-inbox --example inbox_bench -- --rate 5000 --seconds 30
//! ```
//!
//! It creates a database of its own on `--database-url`'s server and drops it at the end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use hookstream_inbox::{InboxConfig, InboxMetrics};
use hookstream_signing::Secret;
use hookstream_telemetry::{Health, Supervisor};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
struct Args {
    /// Deliveries per second offered.
    #[arg(long, default_value_t = 5000)]
    rate: u64,
    /// Length of the measured load.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Unmeasured load before it, at the same rate.
    #[arg(long, default_value_t = 3)]
    warmup_seconds: u64,
    /// Every Nth delivery repeats an earlier webhook-id (a duplicate); 0 for none.
    #[arg(long, default_value_t = 20)]
    duplicate_every: u64,
    /// The PostgreSQL server (a database is created on it for the run).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    database_url: String,
    /// Inbox workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Rows per worker batch (at most 64).
    #[arg(long, default_value_t = 50)]
    batch_size: i64,
    /// Concurrent group writers.
    #[arg(long, default_value_t = 2)]
    writers: usize,
    /// Microseconds a write batch waits for more requests (`inbox.write_linger_us`).
    #[arg(long, default_value_t = 0)]
    write_linger_us: u64,
    /// Milliseconds a worker waits after a partial claim (`inbox.claim_linger_ms`).
    #[arg(long, default_value_t = hookstream_inbox::InboxConfig::default().claim_linger_ms)]
    claim_linger_ms: u64,
    /// Threads of the receiver's runtime.
    #[arg(long, default_value_t = 2)]
    server_threads: usize,
    /// Most requests in flight at once (connections the client opens).
    #[arg(long, default_value_t = 512)]
    max_in_flight: usize,
    /// Receive only: no workers (the acknowledgement path alone).
    #[arg(long)]
    no_processing: bool,
    /// Process message by message (the shop's `handle` only, as a handler without
    /// `handle_batch`), instead of a claimed batch in a few statements.
    #[arg(long)]
    per_message: bool,
    /// Keep the database afterwards.
    #[arg(long)]
    keep: bool,
    /// Let the pool test each connection with a round trip before handing it out (sqlx's
    /// default; off here, as docs/receiving.md recommends for a receiver's pool).
    #[arg(long)]
    ping_on_acquire: bool,
}

/// The demo shop without its batch handler: every message goes through `handle`.
#[derive(Default)]
struct PerMessage(hookstream_inbox::demo::Shop);

impl hookstream_inbox::Handler for PerMessage {
    async fn handle(
        &self,
        conn: &mut sqlx::PgConnection,
        m: &hookstream_inbox::Message,
    ) -> Result<hookstream_inbox::Outcome, hookstream_inbox::HandlerError> {
        self.0.handle(conn, m).await
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// The first three fields of /proc/loadavg: how busy the machine was.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let load_at_start = loadavg();
    let name = format!("inbox_bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.server_threads)
        .enable_all()
        .thread_name("receiver")
        .build()?;
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;

    // The receiver: its database, the demo shop, served on port 0.
    let secret = Secret::generate();
    let (url, pool, registry, shutdown, done) = server_rt.block_on(async {
        let admin = PgPool::connect(&args.database_url).await.context("connecting")?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await?;
        admin.close().await;
        let mut db = url::Url::parse(&args.database_url)?;
        db.set_path(&name);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(32)
            .test_before_acquire(args.ping_on_acquire)
            .connect(db.as_str())
            .await?;
        hookstream_inbox::migrate(&pool).await?;
        hookstream_inbox::demo::migrate(&pool).await?;
        let registry = prometheus::Registry::new();
        let metrics = InboxMetrics::register(&registry);
        let shutdown = CancellationToken::new();
        let mut supervisor = Supervisor::new(Health::default(), shutdown.clone(), Duration::from_secs(30));
        let cfg = InboxConfig {
            source: "bench".into(),
            secrets: vec![secret.expose().as_str().into()],
            workers: args.workers,
            batch_size: args.batch_size,
            writers: args.writers,
            write_linger_us: args.write_linger_us,
            claim_linger_ms: args.claim_linger_ms,
            poll_interval_ms: 50,
            stats_interval_ms: 1_000,
            ..Default::default()
        };
        let receiver = if args.no_processing {
            let wake = Arc::new(tokio::sync::Notify::new());
            let (receiver, writers) = hookstream_inbox::Receiver::new(pool.clone(), &cfg, &metrics, wake);
            for writer in writers {
                supervisor.spawn("writer", async move {
                    writer.await;
                    Ok::<(), std::convert::Infallible>(())
                });
            }
            receiver
        } else if args.per_message {
            hookstream_inbox::start(
                pool.clone(),
                cfg,
                PerMessage::default(),
                &metrics,
                &mut supervisor,
            )
        } else {
            hookstream_inbox::start(
                pool.clone(),
                cfg,
                hookstream_inbox::demo::Shop::default(),
                &metrics,
                &mut supervisor,
            )
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = receiver.router("/hook");
        drop(receiver);
        let stop = shutdown.clone();
        supervisor.spawn("http", async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        });
        let done = tokio::spawn(supervisor.wait());
        anyhow::Ok((format!("http://{addr}/hook"), pool, registry, shutdown, done))
    })?;

    // Backlog samples, once a second, on the receiver's runtime.
    let sampling = CancellationToken::new();
    let samples = {
        let (pool, stop) = (pool.clone(), sampling.clone());
        server_rt.spawn(async move {
            let mut out = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return out,
                    _ = tick.tick() => {
                        let pending: i64 = sqlx::query_scalar(
                            "SELECT count(*) FROM hookstream_inbox.inbox WHERE source = 'bench' AND status = 'pending'",
                        )
                        .fetch_one(&pool)
                        .await
                        .unwrap_or(-1);
                        out.push(pending);
                    }
                }
            }
        })
    };

    // The load, open loop, on a runtime and thread of its own.
    let total = (args.warmup_seconds + args.seconds) * args.rate;
    let warmup = args.warmup_seconds * args.rate;
    let errors = Arc::new(AtomicU64::new(0));
    let unavailable = Arc::new(AtomicU64::new(0));
    let transport = Arc::new(AtomicU64::new(0));
    let started_wall = chrono::Utc::now();
    // The load is paced by a thread of its own sleeping with the OS's timer (tokio's has a
    // 1 ms resolution: each request would start up to a millisecond after its due time, and
    // that lateness would count as the receiver's). It starts each request on the client's
    // runtime; latency still runs from the due time, so a late start counts.
    let ((latencies, lateness), elapsed, sent) = client_rt.block_on(async {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1024)
            .tcp_nodelay(true)
            .build()?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, u64, u64)>();
        let start = Instant::now() + Duration::from_millis(100);
        let interval_ns = 1_000_000_000 / args.rate.max(1);
        let in_flight = Arc::new(tokio::sync::Semaphore::new(args.max_in_flight));
        let runtime = tokio::runtime::Handle::current();
        let (errors, unavailable, transport) = (errors.clone(), unavailable.clone(), transport.clone());
        let (url, secret, duplicate_every) = (url.clone(), secret.clone(), args.duplicate_every);
        let pacer = std::thread::spawn(move || {
            for i in 0..total {
                let due = start + Duration::from_nanos(i * interval_ns);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let late_us = due.elapsed().as_micros() as u64;
                let id_n = if duplicate_every > 0 && i % duplicate_every == duplicate_every - 1 {
                    i.saturating_sub(duplicate_every / 2)
                } else {
                    i
                };
                let id = format!("bench-{id_n}");
                let body = format!(
                    r#"{{"order_id":{id_n},"amount":"12.50","currency":"EUR","note":"inbox benchmark"}}"#
                );
                let ts = chrono::Utc::now().timestamp();
                let sig = hookstream_signing::signature_header([&secret], &id, ts, body.as_bytes());
                let request = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("webhook-id", id)
                    .header("webhook-timestamp", ts.to_string())
                    .header("webhook-signature", sig)
                    .header("hookstream-event-type", "order.paid")
                    .body(body);
                let (tx, in_flight) = (tx.clone(), in_flight.clone());
                let (errors, unavailable, transport) =
                    (errors.clone(), unavailable.clone(), transport.clone());
                runtime.spawn(async move {
                    // At most this many requests in flight (the client's sockets); waiting
                    // for a slot counts in the latency.
                    let permit = in_flight.acquire_owned().await.expect("semaphore open");
                    match request.send().await {
                        Ok(r) if r.status().is_success() => {}
                        Ok(r) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            if r.status().as_u16() == 503 {
                                unavailable.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            if transport.fetch_add(1, Ordering::Relaxed) == 0 {
                                eprintln!("first transport error: {e:?}");
                            }
                        }
                    }
                    let _ = tx.send((i, due.elapsed().as_micros() as u64, late_us));
                    drop(permit);
                });
            }
        });
        let mut dump = std::env::var_os("INBOX_BENCH_DUMP").and_then(|p| std::fs::File::create(p).ok());
        let mut latencies = Vec::with_capacity(total as usize);
        let mut lateness = Vec::with_capacity(total as usize);
        let mut sent = 0u64;
        while let Some((i, us, late)) = rx.recv().await {
            sent += 1;
            if i >= warmup {
                if let Some(dump) = dump.as_mut() {
                    use std::io::Write as _;
                    let _ = writeln!(dump, "{i} {us}");
                }
                latencies.push(us);
                lateness.push(late);
            }
        }
        pacer.join().expect("pacer thread");
        anyhow::Ok(((latencies, lateness), start.elapsed(), sent))
    })?;
    let load_end = Instant::now();

    // Processing: until the backlog is gone.
    let drained = server_rt.block_on(async {
        if args.no_processing {
            return anyhow::Ok((0, Duration::ZERO));
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let pending: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM hookstream_inbox.inbox WHERE source = 'bench' AND status = 'pending'",
            )
            .fetch_one(&pool)
            .await?;
            if pending == 0 || Instant::now() > deadline {
                return anyhow::Ok((pending, load_end.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })?;
    sampling.cancel();
    let samples = server_rt.block_on(samples)?;
    let (stored, processed, p50_proc, p99_proc, max_proc): (i64, i64, f64, f64, f64) = server_rt.block_on(async {
        sqlx::query_as(
            "SELECT count(*), count(*) FILTER (WHERE status = 'processed'),
                    coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - received_at)), 0)::float8,
                    coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - received_at)), 0)::float8,
                    coalesce(max(extract(epoch FROM processed_at - received_at)), 0)::float8
               FROM hookstream_inbox.inbox WHERE source = 'bench' AND received_at >= $1",
        )
        .bind(started_wall)
        .fetch_one(&pool)
        .await
    })?;
    let shop_rows: i64 = server_rt.block_on(async {
        sqlx::query_scalar("SELECT count(*) FROM shop_log")
            .fetch_one(&pool)
            .await
    })?;
    let text = prometheus::TextEncoder::new().encode_to_string(&registry.gather())?;
    let series = |name: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum()
    };
    let duplicates = series("hookstream_inbox_duplicates_total");
    // The receiver's own view: request arrival to answer (`hookstream_inbox_ack_seconds`,
    // warm-up included), as the bucket that holds each percentile.
    let ack_buckets: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| l.starts_with("hookstream_inbox_ack_seconds_bucket"))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit_once(' ')?.1.parse().ok()?))
        })
        .collect();
    let server_bucket = |p: f64| -> f64 {
        let count = ack_buckets.last().map(|b| b.1).unwrap_or(0.0);
        ack_buckets
            .iter()
            .find(|(_, n)| *n >= p * count)
            .map(|(le, _)| le * 1000.0)
            .unwrap_or(f64::NAN)
    };

    shutdown.cancel();
    let _ = server_rt.block_on(done);
    if !args.keep {
        server_rt.block_on(async {
            pool.close().await;
            let admin = PgPool::connect(&args.database_url).await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&admin)
                .await?;
            anyhow::Ok(())
        })?;
    }

    let mut sorted = latencies;
    sorted.sort_unstable();
    let measured = sorted.len() as f64;
    let achieved = sent as f64 / elapsed.as_secs_f64();
    let max_backlog = samples.iter().copied().max().unwrap_or(0);
    println!("inbox acknowledgement benchmark");
    println!(
        "  load average       {} at the start, {} at the end (/proc/loadavg)",
        load_at_start.trim(),
        loadavg().trim()
    );
    println!(
        "  offered            {} deliveries/s for {} s (+{} s warm-up), every {}th a duplicate",
        args.rate, args.seconds, args.warmup_seconds, args.duplicate_every
    );
    println!(
        "  receiver           {} writers, {} workers of {}-row batches lingering {} ms, processing {}",
        args.writers,
        args.workers,
        args.batch_size,
        args.claim_linger_ms,
        if args.no_processing {
            "off"
        } else if args.per_message {
            "message by message"
        } else {
            "a batch at a time (handle_batch)"
        }
    );
    println!(
        "  sent               {sent} in {:.1} s ({achieved:.0}/s), failed {} (503: {}, transport errors: {})",
        elapsed.as_secs_f64(),
        errors.load(Ordering::Relaxed),
        unavailable.load(Ordering::Relaxed),
        transport.load(Ordering::Relaxed)
    );
    println!(
        "  ack latency (ms)   p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}  (n = {measured}, from each request's due time)",
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.9),
        percentile(&sorted, 0.99),
        percentile(&sorted, 0.999),
        percentile(&sorted, 1.0)
    );
    let mut late = lateness;
    late.sort_unstable();
    println!(
        "  of which the load  p50 {:.2}  p99 {:.2}  max {:.2}  (due time to the request's start: the generator's own lateness)",
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        percentile(&late, 1.0)
    );
    println!(
        "  receiver's view    p50 <= {}  p99 <= {}  p99.9 <= {} ms  (hookstream_inbox_ack_seconds buckets, warm-up included)",
        server_bucket(0.5),
        server_bucket(0.99),
        server_bucket(0.999)
    );
    println!("  stored             {stored} rows ({duplicates} duplicates answered 2xx, stored nothing)");
    println!("  processed          {processed} ({shop_rows} shop_log rows); pending after the load {} -> 0 in {:.2} s", samples.last().copied().unwrap_or(0), drained.1.as_secs_f64());
    println!(
        "  backlog            max {max_backlog} pending over the run (sampled every second: {samples:?})"
    );
    println!(
        "  processing latency p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms (received -> processed)",
        p50_proc * 1000.0,
        p99_proc * 1000.0,
        max_proc * 1000.0
    );
    if drained.0 != 0 {
        println!("  NOT DRAINED: {} still pending after 120 s", drained.0);
    }
    Ok(())
}
