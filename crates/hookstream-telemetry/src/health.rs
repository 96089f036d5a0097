//! What `/healthz` and `/readyz` answer: ready once the service works, and unhealthy for good
//! once one of its tasks has stopped unexpectedly (the process then drains and exits non-zero,
//! and an orchestrator restarts it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Readiness and liveness of a service, shared by its tasks and its admin listener.
#[derive(Clone, Default)]
pub struct Health {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    ready: AtomicBool,
    /// Why the service is unhealthy (the first failure), if it is.
    failure: Mutex<Option<String>>,
}

impl Health {
    /// Ready means: connected and working; flipped off while draining.
    pub fn set_ready(&self, ready: bool) {
        self.inner.ready.store(ready, Ordering::Relaxed);
    }

    /// Ready and not failed.
    pub fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::Relaxed) && self.failure().is_none()
    }

    /// Marks the service unhealthy for the rest of its life; the first reason is kept.
    pub fn fail(&self, reason: impl Into<String>) {
        let mut failure = self.inner.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.get_or_insert_with(|| reason.into());
    }

    /// Why the service is unhealthy, if it is.
    pub fn failure(&self) -> Option<String> {
        self.inner
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_final_and_keeps_the_first_reason() {
        let h = Health::default();
        assert!(!h.is_ready());
        h.set_ready(true);
        assert!(h.is_ready());
        h.fail("retry role: consumer fenced");
        h.fail("second");
        assert!(!h.is_ready(), "a failed service is not ready");
        h.set_ready(true);
        assert!(!h.is_ready(), "and stays so");
        assert_eq!(h.failure().as_deref(), Some("retry role: consumer fenced"));
    }
}
