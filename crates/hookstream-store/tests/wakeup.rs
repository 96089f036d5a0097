//! `Wakeup` on a real PostgreSQL (`HOOKSTREAM_TEST_DATABASE_URL`, as `make test` sets).

use std::time::{Duration, Instant};

use hookstream_store::sqlx::{self, PgPool};
use hookstream_store::wakeup::Wakeup;

fn database_url() -> String {
    std::env::var("HOOKSTREAM_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

#[tokio::test]
async fn connecting_returns_at_once_then_a_notification_wakes_the_waiter() {
    let pool = PgPool::connect(&database_url())
        .await
        .expect("PostgreSQL is running");
    let channel: &'static str =
        Box::leak(format!("wakeup_test_{}", uuid::Uuid::new_v4().simple()).into_boxed_str());
    let mut wakeup = Wakeup::new(pool.clone(), channel);
    let poll = Duration::from_secs(30);

    // Changes made before LISTEN took effect notified nobody: the first wait must not sleep
    // through the poll interval.
    let started = Instant::now();
    wakeup.wait(poll).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the first wait returned after {:?}, not at once",
        started.elapsed()
    );

    // Listening now: a NOTIFY ends the wait.
    let notifier = {
        let pool = pool.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            sqlx::query("SELECT pg_notify($1, 'x')")
                .bind(channel)
                .execute(&pool)
                .await
                .expect("notify");
        })
    };
    let started = Instant::now();
    wakeup.wait(poll).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the notification woke the waiter (after {:?})",
        started.elapsed()
    );
    notifier.await.unwrap();
}
