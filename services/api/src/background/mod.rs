//! Background tasks: the replays, bulk replays and recoveries that `/replay-missing`,
//! `/bulk-replay` and `/recover` start. A request only writes the task's row
//! (`hookstream_store::background_tasks`); this runner, in every API process, takes rows up
//! under a lease, runs them (`replay` walks messages, `recover` replays dead letters) and
//! writes their progress as it goes. A task survives the API that ran it: its lease lapses and
//! another API (or this one, restarted) carries on from the task's cursor.
//!
//! Shutdown stops the tasks at their next message, writes their cursor and gives their
//! leases up, so another API takes them at once.

mod recover;
mod replay;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hookstream_replay::Replayer;
use hookstream_store::background_tasks::{self, Task};
use hookstream_store::sqlx::PgPool;
use hookstream_store::StoreError;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::ApiSettings;

/// How long a task is held without a progress write.
const LEASE: Duration = Duration::from_secs(30);
/// Progress is written (and the lease renewed) at least this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// How often the runner looks for tasks to take up.
const POLL: Duration = Duration::from_millis(500);
/// How long a task waits after a fault it may get over (the database or Kafka away).
const FAULT_PAUSE: Duration = Duration::from_secs(5);

/// How a task ended its turn on this process.
enum Outcome {
    /// Done: `finished`, with the counts.
    Finished,
    /// It cannot be done (the endpoint is gone or disabled...): `failed`, with this reason.
    Failed(String),
    /// Stopped (shutdown, the lease lost, a fault it may get over): left `running` for
    /// whoever takes it up next.
    Paused,
}

/// A task's counts and cursor, written back as it goes.
struct Progress {
    pool: PgPool,
    id: Uuid,
    owner: Uuid,
    cursor: Option<Uuid>,
    sent: i64,
    skipped: i64,
    written: Instant,
}

impl Progress {
    fn of(pool: &PgPool, task: &Task, owner: Uuid) -> Self {
        Self {
            pool: pool.clone(),
            id: task.id,
            owner,
            cursor: task.cursor,
            sent: task.sent,
            skipped: task.skipped,
            written: Instant::now(),
        }
    }

    /// Writes progress when it is due (or `now`); false when the lease was lost.
    async fn save(&mut self, now: bool) -> Result<bool, StoreError> {
        if !now && self.written.elapsed() < PROGRESS_EVERY {
            return Ok(true);
        }
        let held = background_tasks::progress(
            &self.pool,
            self.id,
            self.owner,
            self.cursor,
            self.sent,
            self.skipped,
            LEASE,
        )
        .await?;
        self.written = Instant::now();
        Ok(held)
    }

    async fn end(&self, error: Option<&str>) -> Result<bool, StoreError> {
        background_tasks::end(&self.pool, self.id, self.owner, self.sent, self.skipped, error).await
    }
}

/// What the jobs need.
#[derive(Clone)]
pub(crate) struct Runner {
    pub(crate) pool: PgPool,
    pub(crate) replayer: Option<Arc<Replayer>>,
    pub(crate) cfg: Arc<ApiSettings>,
    pub(crate) payloads: crate::payloads::Payloads,
}

impl Runner {
    /// Takes tasks up and runs them until `shutdown`; returns once they stopped and their
    /// leases were given up.
    pub(crate) async fn run(self, shutdown: CancellationToken) -> Result<(), StoreError> {
        let owner = Uuid::now_v7();
        let slots = self.cfg.background_task_slots as usize;
        let mut running: JoinSet<()> = JoinSet::new();
        let stop = shutdown.child_token();
        loop {
            while running.try_join_next().is_some() {}
            let free = slots.saturating_sub(running.len());
            if free > 0 {
                match background_tasks::claim(&self.pool, owner, LEASE, free as i64).await {
                    Ok(tasks) => {
                        for task in tasks {
                            let (runner, stop) = (self.clone(), stop.clone());
                            running.spawn(async move { runner.take(task, owner, stop).await });
                        }
                    }
                    // The database away: the API's health says so; try again next round.
                    Err(e) => tracing::warn!(error = %e, "cannot look for background tasks"),
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(POLL) => {}
            }
        }
        stop.cancel();
        while running.join_next().await.is_some() {}
        if let Err(e) = background_tasks::release(&self.pool, owner).await {
            tracing::warn!(error = %e, "background task leases not given up: they lapse in {LEASE:?}");
        }
        Ok(())
    }

    /// Runs one task's turn and records how it ended.
    async fn take(self, task: Task, owner: Uuid, stop: CancellationToken) {
        let mut progress = Progress::of(&self.pool, &task, owner);
        tracing::info!(task = %task.id, kind = %task.kind, tenant = %task.tenant_id, "background task taken up");
        let outcome = match self.replayer.clone() {
            None => Outcome::Failed("retries are disabled: nothing can be replayed".into()),
            Some(replayer) => {
                let job = Job {
                    pool: &self.pool,
                    replayer: &replayer,
                    cfg: &self.cfg,
                    payloads: &self.payloads,
                    task: &task,
                    stop: &stop,
                };
                let r = match task.kind.as_str() {
                    background_tasks::RECOVER => recover::run(&job, &mut progress).await,
                    _ => replay::run(&job, &mut progress).await,
                };
                r.unwrap_or_else(|fault| {
                    tracing::warn!(task = %task.id, error = %fault, "background task paused by a fault");
                    Outcome::Paused
                })
            }
        };
        let ended = match &outcome {
            Outcome::Finished => progress.end(None).await,
            Outcome::Failed(reason) => progress.end(Some(reason)).await,
            Outcome::Paused => {
                // Let the fault pass before anyone tries again (unless we are stopping).
                if !stop.is_cancelled() {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = tokio::time::sleep(FAULT_PAUSE) => {}
                    }
                }
                progress.save(true).await
            }
        };
        match (ended, &outcome) {
            (Ok(true), Outcome::Finished) => tracing::info!(
                task = %task.id, sent = progress.sent, skipped = progress.skipped, "background task finished"
            ),
            (Ok(true), Outcome::Failed(reason)) => {
                tracing::warn!(task = %task.id, %reason, "background task failed")
            }
            (Ok(true), Outcome::Paused) => {}
            (Ok(false), _) => {
                tracing::warn!(task = %task.id, "background task lease lost: another API has it")
            }
            (Err(e), _) => tracing::warn!(
                task = %task.id, error = %e,
                "background task state not written: it is taken up again when its lease lapses"
            ),
        }
    }
}

/// One task's turn.
struct Job<'a> {
    pool: &'a PgPool,
    replayer: &'a Replayer,
    cfg: &'a ApiSettings,
    payloads: &'a crate::payloads::Payloads,
    task: &'a Task,
    stop: &'a CancellationToken,
}

/// Why a turn stopped early: the caller pauses the task.
#[derive(Debug, thiserror::Error)]
enum Fault {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Replay(#[from] hookstream_replay::ReplayError),
    #[error("cannot seal the payload: {0}")]
    Seal(String),
}
