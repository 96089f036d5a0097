//! `dispatcher`: loads configuration and runs the service (see the library for how it works).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(version, about = "Delivers events from Kafka to subscribed HTTP endpoints")]
struct Args {
    /// TOML configuration file; `HOOKSTREAM_<SECTION>__<KEY>` environment variables override it.
    #[arg(long, short, env = "HOOKSTREAM_CONFIG")]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg: dispatcher::Config = hookstream_config::load_or_exit("dispatcher", args.config.as_deref());
    let telemetry = cfg.telemetry.clone();
    hookstream_telemetry::run_service(
        "dispatcher",
        &telemetry,
        |registry, health, shutdown| async move { dispatcher::run(cfg, &registry, health, shutdown).await },
    )
}
