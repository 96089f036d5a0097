//! Supervision of a service's long-running tasks: nothing dies silently.
//!
//! Every task a service runs for its whole life (a consumer role, a watcher, a producer's
//! health) is spawned through a [`Supervisor`]. A task that returns an error, panics, or
//! simply returns before shutdown was asked for is a failure: the service is marked unhealthy
//! (`/healthz` and `/readyz` answer 503 with the reason), the shutdown token is cancelled so
//! the other tasks drain, and [`Supervisor::wait`] returns the failure, which makes the process
//! exit non-zero (an orchestrator restarts it). A task that merely waits forever after a
//! failure is aborted once the drain deadline has passed.

use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::Health;

/// A supervised task stopped unexpectedly.
#[derive(Debug, Clone, thiserror::Error)]
#[error("task {task} stopped unexpectedly: {reason}")]
pub struct TaskFailed {
    pub task: &'static str,
    pub reason: String,
}

/// Spawns and watches a service's long-running tasks.
pub struct Supervisor {
    health: Health,
    shutdown: CancellationToken,
    drain_deadline: Duration,
    tasks: JoinSet<Result<(), String>>,
    names: HashMap<Id, &'static str>,
}

impl Supervisor {
    /// `drain_deadline`: how long tasks may take to end once shutdown began, before they are
    /// aborted (keep it above every task's own drain time).
    pub fn new(health: Health, shutdown: CancellationToken, drain_deadline: Duration) -> Self {
        Self {
            health,
            shutdown,
            drain_deadline,
            tasks: JoinSet::new(),
            names: HashMap::new(),
        }
    }

    /// The shutdown token the supervised tasks must watch.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Spawns a task that is meant to run until shutdown.
    pub fn spawn<F, E>(&mut self, name: &'static str, task: F)
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        let handle = self
            .tasks
            .spawn(async move { task.await.map_err(|e| e.to_string()) });
        self.names.insert(handle.id(), name);
    }

    /// Like [`spawn`](Self::spawn), for work that must not take CPU from the rest of the
    /// process (a sink that may lag): `make` runs on a thread of its own, with a
    /// single-threaded tokio runtime of its own, `niceness` below the process's CPU priority
    /// (Linux: the thread's nice value is raised by that much, up to 19; the threads it
    /// starts, librdkafka's among them, inherit it). What `make` builds that does I/O (a
    /// database pool, a Kafka consumer) must be built inside it, so that its I/O is driven by
    /// that runtime. A panic on the thread is a failure like any other.
    pub fn spawn_niced<M, F, E>(&mut self, name: &'static str, niceness: i32, make: M)
    where
        M: FnOnce() -> F + Send + 'static,
        F: Future<Output = Result<(), E>>,
        E: Display,
    {
        let (done, result) = tokio::sync::oneshot::channel::<Result<(), String>>();
        let started = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let me = Some(rustix::thread::gettid());
                let base = rustix::process::getpriority_process(me).unwrap_or(0);
                let lowered = rustix::process::setpriority_process(me, (base + niceness).clamp(base, 19));
                if let Err(e) = lowered {
                    tracing::warn!(task = name, niceness, error = %e, "cannot lower the thread's priority; it runs at the process's");
                }
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = done.send(Err(format!("cannot start its runtime: {e}")));
                        return;
                    }
                };
                let outcome = runtime.block_on(async move { make().await.map_err(|e| e.to_string()) });
                let _ = done.send(outcome);
                // Not a drop, which waits for its blocking calls: one still under way (a
                // Kafka consumer's close against a broker that does not answer) would keep
                // this thread, and the task, from ever ending.
                runtime.shutdown_background();
            });
        let started = started.map_err(|e| format!("cannot start its thread: {e}"));
        self.spawn(name, async move {
            started?;
            result
                .await
                .unwrap_or_else(|_| Err("its thread ended without an outcome (it panicked)".into()))
        });
    }

    /// Waits until every task has ended. Returns the first unexpected end, if any (the
    /// service has then been marked unhealthy and asked to shut down).
    pub async fn wait(mut self) -> Result<(), TaskFailed> {
        let mut failed: Option<TaskFailed> = None;
        loop {
            if self.shutdown.is_cancelled() {
                // Draining: no longer ready (probes and load balancers look elsewhere).
                self.health.set_ready(false);
            }
            let next = if self.shutdown.is_cancelled() {
                match tokio::time::timeout(self.drain_deadline, self.tasks.join_next_with_id()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let left: Vec<&str> = self.names.values().copied().collect();
                        tracing::error!(tasks = ?left, "tasks still running after the drain deadline, aborting them");
                        self.tasks.abort_all();
                        while self.tasks.join_next().await.is_some() {}
                        break;
                    }
                }
            } else {
                tokio::select! {
                    next = self.tasks.join_next_with_id() => next,
                    // Shutdown began: from now on the drain deadline applies.
                    _ = self.shutdown.cancelled() => continue,
                }
            };
            let Some(joined) = next else { break };
            let (id, result) = match joined {
                Ok((id, result)) => (id, result),
                Err(e) => {
                    let id = e.id();
                    let reason = if e.is_panic() {
                        format!("panicked: {}", panic_message(e.into_panic()))
                    } else {
                        "cancelled".to_string()
                    };
                    (id, Err(reason))
                }
            };
            let task = self.names.remove(&id).unwrap_or("unnamed task");
            let reason = match result {
                Err(reason) => Some(reason),
                Ok(()) if !self.shutdown.is_cancelled() => Some("returned before shutdown".into()),
                Ok(()) => None,
            };
            if let Some(reason) = reason {
                tracing::error!(task, reason = %reason, "task stopped unexpectedly, shutting the service down");
                self.health.fail(format!("{task}: {reason}"));
                self.health.set_ready(false);
                failed.get_or_insert(TaskFailed { task, reason });
                self.shutdown.cancel();
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn supervisor() -> (Supervisor, Health, CancellationToken) {
        let health = Health::default();
        health.set_ready(true);
        let shutdown = CancellationToken::new();
        let s = Supervisor::new(health.clone(), shutdown.clone(), Duration::from_secs(5));
        (s, health, shutdown)
    }

    async fn until_cancelled(token: CancellationToken) -> Result<(), String> {
        token.cancelled().await;
        Ok(())
    }

    #[tokio::test]
    async fn a_clean_shutdown_is_not_a_failure() {
        let (mut s, health, shutdown) = supervisor();
        s.spawn("a", until_cancelled(shutdown.clone()));
        s.spawn("b", until_cancelled(shutdown.clone()));
        shutdown.cancel();
        assert!(s.wait().await.is_ok());
        assert_eq!(health.failure(), None);
    }

    #[tokio::test]
    async fn an_error_fails_the_service_and_stops_the_others() {
        let (mut s, health, shutdown) = supervisor();
        s.spawn("steady", until_cancelled(shutdown.clone()));
        s.spawn("dlq sink", async { Err::<(), _>("database gone for good") });
        let failed = s.wait().await.expect_err("the error surfaces");
        assert_eq!(failed.task, "dlq sink");
        assert!(shutdown.is_cancelled(), "the others were asked to stop");
        assert!(!health.is_ready());
        assert_eq!(
            health.failure().as_deref(),
            Some("dlq sink: database gone for good")
        );
    }

    #[tokio::test]
    async fn a_panic_and_an_early_return_are_failures_too() {
        let (mut s, health, _shutdown) = supervisor();
        s.spawn("retry role", async {
            if true {
                panic!("offset tracker poisoned");
            }
            Ok::<(), String>(())
        });
        let failed = s.wait().await.expect_err("a panic surfaces");
        assert!(
            failed.reason.contains("offset tracker poisoned"),
            "{}",
            failed.reason
        );
        assert!(health.failure().is_some());

        let (mut s, _health, _shutdown) = supervisor();
        s.spawn("watcher", async { Ok::<(), String>(()) });
        let failed = s.wait().await.expect_err("returning early is a failure");
        assert_eq!(failed.reason, "returned before shutdown");
    }

    #[tokio::test]
    async fn a_niced_task_runs_on_its_own_thread_at_its_priority_and_its_panic_is_a_failure() {
        let (mut s, health, shutdown) = supervisor();
        let base = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        let (seen, observed) = tokio::sync::oneshot::channel();
        let token = shutdown.clone();
        s.spawn_niced("attempt sink", 7, move || async move {
            let me = rustix::thread::gettid();
            let _ = seen.send((
                std::thread::current().name().map(str::to_string),
                rustix::process::getpriority_process(Some(me)).ok(),
            ));
            token.cancelled().await;
            Ok::<(), String>(())
        });
        let (name, priority) = observed.await.unwrap();
        assert_eq!(name.as_deref(), Some("attempt sink"));
        assert_eq!(
            priority,
            Some((base + 7).min(19)),
            "the thread runs 7 lower (from {base})"
        );
        assert_eq!(
            rustix::process::getpriority_process(Some(rustix::thread::gettid())).ok(),
            Some(base),
            "the caller's priority is untouched"
        );
        shutdown.cancel();
        assert!(s.wait().await.is_ok());
        assert_eq!(health.failure(), None);

        let (mut s, health, _shutdown) = supervisor();
        s.spawn_niced("attempt sink", 7, || async {
            if true {
                panic!("sink broke");
            }
            Ok::<(), String>(())
        });
        let failed = s.wait().await.expect_err("a panic on the thread surfaces");
        assert_eq!(failed.task, "attempt sink");
        assert!(failed.reason.contains("panicked"), "{}", failed.reason);
        assert!(health.failure().is_some());
    }

    #[tokio::test]
    async fn a_task_that_ignores_shutdown_is_aborted_after_the_deadline() {
        let health = Health::default();
        let shutdown = CancellationToken::new();
        let mut s = Supervisor::new(health, shutdown.clone(), Duration::from_millis(100));
        s.spawn("stuck", async {
            std::future::pending::<()>().await;
            Ok::<(), String>(())
        });
        shutdown.cancel();
        let started = std::time::Instant::now();
        assert!(s.wait().await.is_ok());
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
