//! Keeps the message store's day partitions: creates today's and `api.partition_days_ahead`
//! days ahead, and drops the days older than `api.message_retention_days` (and erases those
//! days' payload data keys, so their copies in Kafka and the dead-letter store go too), every
//! `api.maintenance_interval_ms` (and at start). A round that fails is logged and tried again
//! at the next one: producers never depend on it (rows of a day without a partition land in the
//! default partition). Each round also deletes the tenant portal's login links and sessions
//! that expired more than a day ago. Each step waits at most the database's answer deadline.

use std::time::Duration;

use chrono::Utc;
use hookstream_store::sqlx::PgPool;
use hookstream_store::{answered, messages, StoreError};
use tokio_util::sync::CancellationToken;

use crate::config::ApiSettings;

pub async fn run(
    pool: PgPool,
    cfg: ApiSettings,
    answer: Duration,
    shutdown: CancellationToken,
) -> Result<(), std::convert::Infallible> {
    let every = Duration::from_millis(cfg.maintenance_interval_ms);
    loop {
        if let Err(e) = round(&pool, &cfg, answer).await {
            tracing::warn!(error = %e, "message partitions: round failed, will retry");
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(every) => {}
        }
    }
}

async fn round(pool: &PgPool, cfg: &ApiSettings, answer: Duration) -> Result<(), StoreError> {
    let today = Utc::now().date_naive();
    let missed = answered(
        answer,
        messages::ensure_partitions(pool, today, cfg.partition_days_ahead + 1),
    )
    .await?;
    if !missed.is_empty() {
        tracing::warn!(days = ?missed, "message partitions: some days could not be created yet");
    }
    let cutoff = today - chrono::Days::new(u64::from(cfg.message_retention_days));
    let dropped = answered(answer, messages::drop_partitions_before(pool, cutoff)).await?;
    if !dropped.is_empty() {
        tracing::info!(partitions = ?dropped, "message partitions: dropped past retention");
    }
    // The same days' payloads everywhere else (Kafka, dead letters): their data keys go.
    let keys = answered(
        answer,
        hookstream_store::payload_keys::erase_days_before(pool, cutoff),
    )
    .await?;
    if keys > 0 {
        tracing::info!(keys, before = %cutoff, "payload keys past retention erased");
    }
    let expired = Utc::now() - chrono::Duration::days(1);
    let pruned = answered(answer, hookstream_store::portal::prune(pool, expired)).await?;
    if pruned > 0 {
        tracing::info!(rows = pruned, "portal: expired links and sessions deleted");
    }
    Ok(())
}
