//! The API's and the portal's integration tests, as one test binary: linked once instead of once
//! per file (the workspace had 62 integration test binaries). Each module is the file of that name
//! beside this one, one concern each; run one with `cargo test -p api --test integration
//! <module>::`.

mod common;
mod api;
mod auth_flood;
mod background_tasks;
mod database_failover;
mod erasure;
mod hostile_bodies;
mod isolation;
mod portal_bench;
mod portal_browser;
mod portal_guards;
mod portal_logs;
mod portal_tokens;
mod sdk;
mod tenant_caps;
mod url_tokens;
