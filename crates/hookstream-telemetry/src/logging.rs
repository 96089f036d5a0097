//! Logging: one `tracing` subscriber per process, text or JSON, to stderr.

use hookstream_config::TelemetryConfig;

/// Initialises `tracing` once per process (later calls are no-ops, which tests rely on).
pub fn init_logging(cfg: &TelemetryConfig) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&cfg.log_level));
    use std::io::IsTerminal as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colours for people at a terminal, none in files and log collectors.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = if cfg.log_format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
