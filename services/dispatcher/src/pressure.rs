//! Delivery pressure: whether the runtime that delivers is busy, from tokio's own per-worker
//! busy time sampled every `every`. The share of the last `WINDOW` intervals the workers spent
//! busy is exported (`hookstream_dispatcher_delivery_busy_ratio`); delivery counts as pressed
//! from the first interval at or above `threshold` until the whole window is below it. The
//! attempt sink holds its writes while it is (see `attempt_sink.rs`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::{Duration, Instant};

use hookstream_telemetry::prometheus::Gauge;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often the workers' busy time is sampled.
pub(crate) const EVERY: Duration = Duration::from_millis(100);
/// The share is taken over this many of the last samples.
const WINDOW: usize = 5;

/// Samples `runtime`'s workers every `every` until shutdown (the returned task): delivery is
/// pressed while the latest interval or the last `WINDOW` were at least `threshold` busy.
pub(crate) fn sample(
    runtime: Handle,
    threshold: f64,
    every: Duration,
    gauge: Gauge,
    shutdown: CancellationToken,
) -> (
    watch::Receiver<bool>,
    impl std::future::Future<Output = Result<(), Infallible>>,
) {
    let (tx, rx) = watch::channel(false);
    let task = async move {
        let metrics = runtime.metrics();
        let workers = metrics.num_workers().max(1) as f64;
        let busy_total = || {
            (0..metrics.num_workers())
                .map(|w| metrics.worker_total_busy_duration(w))
                .sum::<Duration>()
        };
        // tokio credits a worker's busy time in steps (when it parks, or every few dozen
        // polls): a share over one short interval jumps about, one over `WINDOW` does not.
        let mut samples = VecDeque::with_capacity(WINDOW + 1);
        samples.push_back((Instant::now(), busy_total()));
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.cancelled() => return Ok(()),
            }
            samples.push_back((Instant::now(), busy_total()));
            if samples.len() > WINDOW + 1 {
                samples.pop_front();
            }
            let (Some(first), Some(last)) = (samples.front(), samples.back()) else {
                continue;
            };
            let window = busy_share(first, last, workers);
            let latest = samples
                .len()
                .checked_sub(2)
                .and_then(|i| samples.get(i))
                .map_or(0.0, |before| busy_share(before, last, workers));
            gauge.set(window);
            // Pressed as soon as the latest interval is busy (a drain gains from every
            // interval the sink stays out of its way), released only once the whole window
            // is not (a single interval credited little does not let the writes through).
            let next = latest >= threshold || window >= threshold;
            tx.send_if_modified(|pressed| std::mem::replace(pressed, next) != next);
        }
    };
    (rx, task)
}

/// The share of the time between two samples the workers spent busy.
fn busy_share(from: &(Instant, Duration), to: &(Instant, Duration), workers: f64) -> f64 {
    let wall = to.0.duration_since(from.0).as_secs_f64() * workers;
    if wall > 0.0 {
        (to.1.saturating_sub(from.1).as_secs_f64() / wall).min(1.0)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_kept_busy_press_delivery_and_idle_ones_release_it() {
        let delivery = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let shutdown = CancellationToken::new();
        let gauge = Gauge::new("busy", "busy").unwrap();
        let (mut pressed, sampling) = sample(
            delivery.handle().clone(),
            0.5,
            Duration::from_millis(50),
            gauge.clone(),
            shutdown.clone(),
        );
        delivery.spawn(sampling);
        let watching = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        watching.block_on(async {
            let within = Duration::from_secs(10);
            // Idle: a few samples, none pressed.
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!*pressed.borrow(), "idle workers: {}", gauge.get());
            let stop = CancellationToken::new();
            for _ in 0..2 {
                delivery.spawn(hookstream_testkit::busy::spin(stop.clone()));
            }
            tokio::time::timeout(within, pressed.wait_for(|p| *p))
                .await
                .expect("busy workers press delivery")
                .unwrap();
            // The exported share (over the window) follows.
            let deadline = Instant::now() + within;
            while gauge.get() < 0.5 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(gauge.get() >= 0.5, "{}", gauge.get());
            stop.cancel();
            tokio::time::timeout(within, pressed.wait_for(|p| !*p))
                .await
                .expect("idle again: released")
                .unwrap();
        });
        shutdown.cancel();
    }
}
