//! `hookstream-api`: loads configuration, binds `api.listen` and runs the admin API (see the
//! library for how it works).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "Hookstream's admin REST API (wire-compatible with Svix's API v1)"
)]
struct Args {
    /// TOML configuration file; `HOOKSTREAM_<SECTION>__<KEY>` environment variables override it.
    #[arg(long, short, env = "HOOKSTREAM_CONFIG")]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg: api::Config = hookstream_config::load_or_exit("hookstream-api", args.config.as_deref());
    let telemetry = cfg.telemetry.clone();
    hookstream_telemetry::run_service("api", &telemetry, |registry, health, shutdown| async move {
        let listener = api::bind(&cfg).await.map_err(api::ApiServiceError::Io)?;
        api::run(cfg, listener, &registry, health, shutdown).await
    })
}
