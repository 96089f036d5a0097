//! Waiting on a server that may have gone dark. The server's statement timeout ends a slow
//! statement, but only a server that answers can enforce it: one gone dark (a failover's old
//! primary, a partition dropping packets, a frozen process) leaves the socket open and the
//! caller waiting, for about 15 minutes until the kernel gives up, or for ever.
//!
//! `answered` bounds one round trip (or a short sequence of them); `within` bounds any work
//! (an API request). Both remember that they gave something up, and the pools built by this
//! crate act on it: a pooled connection dropped with its round trip under way goes back to
//! sqlx's pool, which tests it with a ping that has no deadline of its own, so against a dark
//! server the connection's slot would stay taken until the kernel gives up. For a while after
//! anything was given up (`RELEASE_WATCH`), a released connection is pinged with the answer
//! deadline first, and replaced by a new connection if it does not answer (`release_check`).
//! Outside that window a release costs nothing more than sqlx's own ping.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection as _, PgConnection};

use crate::StoreError;

/// How long after work was given up released connections are pinged with a deadline.
pub const RELEASE_WATCH: Duration = Duration::from_secs(60);

/// When this process last gave work up, in milliseconds after `epoch()` (0: never).
static GAVE_UP_AT_MS: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Records that work holding a connection is being given up: called before that work is
/// dropped, so that its connection's release already sees it.
fn gave_up() {
    let now = epoch().elapsed().as_millis() as u64;
    GAVE_UP_AT_MS.store(now.max(1), Ordering::SeqCst);
}

/// Whether work was given up within the last `RELEASE_WATCH`.
fn gave_up_recently() -> bool {
    let at = GAVE_UP_AT_MS.load(Ordering::SeqCst);
    at != 0 && epoch().elapsed().saturating_sub(Duration::from_millis(at)) < RELEASE_WATCH
}

/// Runs `work` for at most `deadline`; `None` if it did not finish (it is then dropped, after
/// the release check is armed).
pub async fn within<T>(deadline: Duration, work: impl Future<Output = T>) -> Option<T> {
    // Pinned here, so that `work` is dropped when this returns, after `gave_up`.
    let mut work = std::pin::pin!(work);
    tokio::select! {
        biased;
        done = &mut work => Some(done),
        () = tokio::time::sleep(deadline) => {
            gave_up();
            None
        }
    }
}

/// Waits for one database round trip (or a short sequence of them) on a connection for at
/// most `deadline` (`DatabaseConfig::answer_deadline`). On `Unanswered` a caller holding its
/// own connection must drop it; a pooled connection goes back to its pool, which replaces it
/// if it does not answer a ping within the same deadline (see the module's text).
pub async fn answered<T, E>(
    deadline: Duration,
    round_trip: impl Future<Output = Result<T, E>>,
) -> Result<T, StoreError>
where
    E: Into<StoreError>,
{
    match within(deadline, round_trip).await {
        Some(result) => result.map_err(Into::into),
        None => Err(StoreError::Unanswered(deadline)),
    }
}

/// The pool's `after_release` hook: while `gave_up_recently`, a released connection must
/// answer a ping within `deadline` (it may first have to finish a statement that was under
/// way, which the server's statement timeout bounds). One that does not is replaced in place
/// by a new connection (the server's address may now lead to the new primary), and dropped.
///
/// Why replaced, not closed: whatever the hook answers, sqlx then either pings the connection
/// or closes it, without a deadline, and closing a TLS connection (rustls) first flushes,
/// which waits to read from the server: against a dark server both wait until the kernel
/// gives up. Dropping the connection closes its socket without a word. If no new connection
/// can be made either, the hook gives up and sqlx closes the old one (what it did before).
pub(crate) fn release_check(
    options: PgPoolOptions,
    connect: PgConnectOptions,
    deadline: Duration,
) -> PgPoolOptions {
    options.after_release(move |conn, _| {
        let connect = connect.clone();
        Box::pin(async move {
            if !gave_up_recently() {
                return Ok(true);
            }
            match tokio::time::timeout(deadline, conn.ping()).await {
                Ok(Ok(())) => return Ok(true),
                Ok(Err(e)) => return Err(e),
                Err(_) => {}
            }
            match tokio::time::timeout(deadline, PgConnection::connect_with(&connect)).await {
                Ok(Ok(fresh)) => {
                    tracing::warn!(
                        ?deadline,
                        "a pooled connection did not answer after a round trip was given up; \
                         replaced by a new connection"
                    );
                    drop(std::mem::replace(conn, fresh));
                    Ok(true)
                }
                Ok(Err(e)) => Err(e),
                Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "a pooled connection did not answer within {deadline:?} after a round \
                         trip was given up, and no new connection could be made"
                    ),
                ))),
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use super::*;

    /// One test, since the mark is the process's: what finished is given back; what did not
    /// is given up on time, and dropped only after the mark is set, so a connection it holds
    /// is released with the check on.
    #[tokio::test]
    async fn within_gives_up_on_time_and_marks_before_it_drops() {
        assert_eq!(within(Duration::from_secs(5), async { 7 }).await, Some(7));
        assert!(!gave_up_recently(), "nothing was given up yet");

        struct SeesTheMark(Arc<AtomicBool>);
        impl Drop for SeesTheMark {
            fn drop(&mut self) {
                self.0.store(gave_up_recently(), Ordering::SeqCst);
            }
        }
        let seen = Arc::new(AtomicBool::new(false));
        let guard = SeesTheMark(seen.clone());
        let work = async move {
            let _guard = guard;
            std::future::pending::<()>().await
        };
        let started = Instant::now();
        assert_eq!(within(Duration::from_millis(50), work).await, None);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(
            seen.load(Ordering::SeqCst),
            "the mark was set before the work was dropped"
        );
        assert!(gave_up_recently());
    }
}
