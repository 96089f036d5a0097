//! The dispatcher's integration tests, as one test binary: linked once instead of once per file
//! (the workspace had 62 integration test binaries). Each module is the file of that name beside
//! this one, one concern each; run one with `cargo test -p dispatcher --test integration
//! <module>::`.

mod common;
mod attempt_log;
mod attempt_sink;
mod consumer_flow;
mod crash;
mod database_failover;
mod delivery_log;
mod dlq;
mod group_limits;
mod isolation;
mod monitoring;
mod retry;
mod routing;
mod secrets;
mod secured_kafka;
mod ssrf;
mod startup;
mod supervision;
mod topic_loss;
mod url_secrets;
