//! `outbox-relay`: loads configuration and runs the relay (see the library for how it works).

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser)]
#[command(version, about = "Ships committed outbox rows from PostgreSQL to Kafka")]
struct Args {
    /// TOML configuration file; `HOOKSTREAM_<SECTION>__<KEY>` environment variables override it.
    #[arg(long, short, env = "HOOKSTREAM_CONFIG")]
    config: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cfg: outbox_relay::Config = match hookstream_config::load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("outbox-relay: {e}");
            std::process::exit(2);
        }
    };
    hookstream_telemetry::init_logging(&cfg.telemetry);
    let registry = hookstream_telemetry::prometheus::Registry::new();
    let health = hookstream_telemetry::Health::default();
    let shutdown = hookstream_telemetry::shutdown_on_signal();
    let listener = hookstream_telemetry::bind_admin(&cfg.telemetry).await?;
    tracing::info!(admin = %hookstream_telemetry::local_addr(&listener), "outbox-relay starting");
    let admin = tokio::spawn(hookstream_telemetry::serve_admin(
        listener,
        registry.clone(),
        health.clone(),
        shutdown.clone(),
    ));
    let result = outbox_relay::run(cfg, &registry, health, shutdown.clone()).await;
    shutdown.cancel();
    let _ = admin.await;
    if let Err(e) = &result {
        tracing::error!(error = %e, "outbox-relay stopped with an error");
    }
    result.map_err(Into::into)
}
