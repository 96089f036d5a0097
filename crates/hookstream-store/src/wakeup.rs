//! A LISTEN/NOTIFY wake-up with a fallback poll. NOTIFY is not durable (a notification sent
//! while the listener was disconnected is gone), so every waiter also polls.

use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;

pub struct Wakeup {
    pool: PgPool,
    channel: &'static str,
    listener: Option<PgListener>,
}

impl Wakeup {
    pub fn new(pool: PgPool, channel: &'static str) -> Self {
        Self {
            pool,
            channel,
            listener: None,
        }
    }

    /// Returns on a notification on the channel or after `poll`, whichever comes first,
    /// (re)connecting the listener when needed. Returns at once when it has just connected:
    /// whatever was committed before LISTEN took effect notified nobody, so the caller must
    /// look now (the dispatcher loads its subscriptions before it listens; an endpoint
    /// created in between was otherwise missed until the fallback poll).
    pub async fn wait(&mut self, poll: Duration) {
        if self.listener.is_none() {
            self.listener = self.connect().await;
            if self.listener.is_some() {
                return;
            }
        }
        let notified = async {
            match self.listener.as_mut() {
                Some(l) => l.recv().await.map(|_| ()),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = notified => if r.is_err() { self.listener = None; },
            _ = tokio::time::sleep(poll) => {}
        }
    }

    /// Drops the listener (after a database error); the next `wait` reconnects.
    pub fn reset(&mut self) {
        self.listener = None;
    }

    async fn connect(&self) -> Option<PgListener> {
        let mut l = PgListener::connect_with(&self.pool).await.ok()?;
        l.listen(self.channel).await.ok()?;
        Some(l)
    }
}
