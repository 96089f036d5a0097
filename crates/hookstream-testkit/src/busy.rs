//! Keeping a tokio runtime busy, for tests of what a busy runtime changes.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// Keeps one worker of the current runtime busy until `stop`, yielding every millisecond so
/// that the runtime's other tasks still run (and tokio credits the busy time as it goes).
pub async fn spin(stop: CancellationToken) {
    while !stop.is_cancelled() {
        let until = Instant::now() + Duration::from_millis(1);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        tokio::task::yield_now().await;
    }
}
