//! `hookstream-inbox-demo`: the example shop receiver (`hookstream_inbox::demo`) as a
//! service: `[database]`, `[telemetry]`, `[inbox]` and `[demo]` from defaults, `--config FILE`
//! and `HOOKSTREAM_<SECTION>__<KEY>` variables.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(version, about = "The example shop receiver on hookstream-inbox")]
struct Args {
    /// TOML configuration file; `HOOKSTREAM_<SECTION>__<KEY>` environment variables override it.
    #[arg(long, short, env = "HOOKSTREAM_CONFIG")]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg: hookstream_inbox::demo::Config =
        hookstream_config::load_or_exit("hookstream-inbox-demo", args.config.as_deref());
    let telemetry = cfg.telemetry.clone();
    hookstream_telemetry::run_service(
        "hookstream-inbox-demo",
        &telemetry,
        |registry, health, shutdown| async move {
            hookstream_inbox::demo::run(cfg, &registry, health, shutdown).await
        },
    )
}
