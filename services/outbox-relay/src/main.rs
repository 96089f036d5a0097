//! `outbox-relay`: loads configuration and runs the service (see the library for how it works).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(version, about = "Ships committed outbox rows from PostgreSQL to Kafka")]
struct Args {
    /// TOML configuration file; `HOOKSTREAM_<SECTION>__<KEY>` environment variables override it.
    #[arg(long, short, env = "HOOKSTREAM_CONFIG")]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg: outbox_relay::Config = hookstream_config::load_or_exit("outbox-relay", args.config.as_deref());
    let telemetry = cfg.telemetry.clone();
    hookstream_telemetry::run_service(
        "outbox-relay",
        &telemetry,
        |registry, health, shutdown| async move { outbox_relay::run(cfg, &registry, health, shutdown).await },
    )
}
