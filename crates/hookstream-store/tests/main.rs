//! The store's integration tests, as one test binary: linked once instead of once per file (the
//! workspace had 62 integration test binaries). Each module is the file of that name beside this
//! one, one concern each; run one with `cargo test -p hookstream-store --test integration
//! <module>::`.

mod attempts;
mod dark_pool;
mod dead_letters;
mod messages;
mod portal;
mod subscriptions;
mod tls;
mod wakeup;
