//! `endpoint.recover`: the endpoint's dead letters of the window, not yet replayed, go back
//! through the retry tiers (`hookstream_replay::Replayer::replay`, the CLI's `dlq replay`).
//! The replay claims and marks dead letters as it goes, so a recovery taken up again after a
//! crash or a shutdown sends only what the first turn had not.

use hookstream_store::dead_letters;

use super::{Fault, Job, Outcome, Progress};

pub(super) async fn run(job: &Job<'_>, progress: &mut Progress) -> Result<Outcome, Fault> {
    let task = job.task;
    let filter = dead_letters::Filter {
        tenant: Some(task.tenant_id),
        endpoint: task.endpoint_id,
        since: Some(task.params.since),
        until: task.params.until,
        unreplayed_only: true,
        ..Default::default()
    };
    let opts = hookstream_replay::ReplayOptions {
        rate_per_s: job.cfg.recover_rate_per_s,
        dry_run: false,
    };
    let replay = job.replayer.replay(&filter, &opts);
    tokio::pin!(replay);
    // The replay runs as one call: the lease is renewed beside it.
    let mut renew = tokio::time::interval(super::PROGRESS_EVERY);
    let report = loop {
        tokio::select! {
            r = &mut replay => break r?,
            _ = job.stop.cancelled() => return Ok(Outcome::Paused),
            _ = renew.tick() => {
                if !progress.save(true).await? {
                    return Ok(Outcome::Paused);
                }
            }
        }
    };
    progress.sent += report.replayed.len() as i64;
    progress.skipped += report.skipped.len() as i64;
    if !report.failed.is_empty() {
        // Kafka refused some: they stay unreplayed; the next turn sends them.
        tracing::warn!(task = %task.id, failed = report.failed.len(), "recovery: Kafka refused some replays");
        return Ok(Outcome::Paused);
    }
    Ok(Outcome::Finished)
}
