//! The relay's background chores: the backlog gauges, and pruning idempotency keys past
//! their window (`relay.idempotency_window_days`) in small batches.

use std::time::Duration;

use hookstream_store::outbox;
use hookstream_store::sqlx::PgPool;
use hookstream_store::StoreError;
use tokio_util::sync::CancellationToken;

use crate::{RelayMetrics, RelaySettings};

/// Rows deleted per statement while pruning (short transactions, no long locks).
const PRUNE_BATCH: i64 = 1_000;

/// Refreshes the backlog gauges every 5 s until `shutdown`.
pub(crate) async fn watch_backlog(
    pool: PgPool,
    metrics: RelayMetrics,
    shutdown: CancellationToken,
) -> Result<(), StoreError> {
    loop {
        match outbox::backlog(&pool).await {
            Ok((rows, age)) => {
                metrics.backlog_rows.set(rows);
                metrics.oldest_age_seconds.set(age);
            }
            Err(e) => tracing::debug!(error = %e, "cannot read the outbox backlog"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = shutdown.cancelled() => return Ok(()),
        }
    }
}

/// Deletes idempotency keys older than the window every `prune_interval_ms` until `shutdown`.
pub(crate) async fn prune_idempotency_keys(
    pool: PgPool,
    cfg: RelaySettings,
    shutdown: CancellationToken,
) -> Result<(), StoreError> {
    if cfg.idempotency_window_days == 0 {
        shutdown.cancelled().await;
        return Ok(());
    }
    let window = chrono::Duration::days(i64::from(cfg.idempotency_window_days));
    let mut every = tokio::time::interval(Duration::from_millis(cfg.prune_interval_ms.max(1)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.cancelled() => return Ok(()),
        }
        match outbox::prune_idempotency_keys(&pool, chrono::Utc::now() - window, PRUNE_BATCH).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                deleted = n,
                window_days = cfg.idempotency_window_days,
                "idempotency keys past their window deleted"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "cannot prune idempotency keys, trying at the next interval")
            }
        }
    }
}
