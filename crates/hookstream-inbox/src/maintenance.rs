//! The inbox's housekeeping for one source: the gauges (pending, deferred, quarantined, oldest
//! pending age) refreshed every `stats_interval_ms`, and retention: processed rows older than
//! `retention_hours` deleted every `prune_interval_ms`, a bounded batch at a time. Database
//! errors are logged, counted and tried again at the next tick.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::config::InboxConfig;
use crate::metrics::InboxMetrics;
use crate::store;

/// Rows one prune statement deletes at most (short transactions, whatever the backlog).
const PRUNE_BATCH: i64 = 5_000;

/// Refreshes the gauges of `cfg.source` once.
pub async fn refresh_gauges(
    pool: &PgPool,
    cfg: &InboxConfig,
    metrics: &InboxMetrics,
) -> Result<store::Stats, sqlx::Error> {
    let s = store::stats(pool, &cfg.source).await?;
    let l = [cfg.source.as_str()];
    metrics.pending.with_label_values(&l).set(s.pending);
    metrics.deferred.with_label_values(&l).set(s.deferred);
    metrics.quarantined.with_label_values(&l).set(s.quarantined);
    metrics
        .oldest_pending_age_seconds
        .with_label_values(&l)
        .set(s.oldest_pending_age_seconds);
    Ok(s)
}

/// Deletes every processed row of `cfg.source` past retention; returns how many.
pub async fn prune_once(
    pool: &PgPool,
    cfg: &InboxConfig,
    metrics: &InboxMetrics,
) -> Result<u64, sqlx::Error> {
    if cfg.retention_hours == 0 {
        return Ok(0);
    }
    let mut total = 0;
    loop {
        let n = store::prune(pool, &cfg.source, cfg.retention_hours, PRUNE_BATCH).await?;
        metrics.pruned.with_label_values(&[&cfg.source]).inc_by(n);
        total += n;
        if (n as i64) < PRUNE_BATCH {
            break;
        }
    }
    if total > 0 {
        tracing::info!(source = %cfg.source, rows = total, retention_hours = cfg.retention_hours, "inbox: pruned processed messages");
    }
    Ok(total)
}

/// Runs the gauges and retention until `shutdown`.
pub async fn run_maintenance(
    pool: PgPool,
    cfg: Arc<InboxConfig>,
    metrics: InboxMetrics,
    shutdown: CancellationToken,
) -> Result<(), std::convert::Infallible> {
    let errors = metrics.errors.with_label_values(&[&cfg.source]);
    let mut stats = tokio::time::interval(Duration::from_millis(cfg.stats_interval_ms));
    let mut prune = tokio::time::interval(Duration::from_millis(cfg.prune_interval_ms));
    stats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = stats.tick() => {
                if let Err(e) = refresh_gauges(&pool, &cfg, &metrics).await {
                    errors.inc();
                    tracing::warn!(source = %cfg.source, error = %e, "inbox: cannot refresh the gauges");
                }
            }
            _ = prune.tick() => {
                if let Err(e) = prune_once(&pool, &cfg, &metrics).await {
                    errors.inc();
                    tracing::warn!(source = %cfg.source, error = %e, "inbox: cannot prune processed messages");
                }
            }
        }
    }
}
