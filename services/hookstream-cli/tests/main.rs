//! The CLI's integration tests, as one test binary: linked once instead of once per file (the
//! workspace had 62 integration test binaries). Each module is the file of that name beside this
//! one, one concern each; run one with `cargo test -p hookstream-cli --test integration
//! <module>::`.

mod common;
mod api_key_cli;
mod dlq_cli;
mod erase_cli;
mod health_cli;
mod operational_cli;
mod payload_endpoint_cli;
mod probe_cli;
mod task_cli;
mod tenant_limits_cli;
