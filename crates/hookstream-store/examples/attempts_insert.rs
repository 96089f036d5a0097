//! Bench: N attempt rows through `attempts::insert_many` in batches of B (prints wall time;
//! PostgreSQL's CPU is measured from outside). Usage: attempts_insert URL N B
use chrono::Utc;
use hookstream_store::attempts::{self, NewAttempt};
use hookstream_testkit::fixtures::attempt_row;
use uuid::Uuid;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (url, n, b): (&str, usize, usize) = (&a[1], a[2].parse().unwrap(), a[3].parse().unwrap());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap();
    hookstream_store::migrate(&pool).await.unwrap();
    attempts::ensure_partition(&pool, Utc::now().date_naive())
        .await
        .unwrap();
    let eps: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    let tenant = Uuid::new_v4();
    let t0 = Utc::now();
    let rows: Vec<NewAttempt> = (0..n)
        .map(|i| NewAttempt {
            started_at: t0 + chrono::Duration::microseconds((i / 10) as i64 * 50),
            event_id: Uuid::from_u128((i / 10) as u128 + 1),
            endpoint_id: eps[i % 10],
            response_headers: vec![
                ("date".into(), "Wed, 02 Dec 2026 07:00:00 GMT".into()),
                ("content-length".into(), "0".into()),
            ],
            aggregate_id: Some("order-1".into()),
            payload_bytes: Some(120),
            ..attempt_row(t0, tenant)
        })
        .collect();
    let w = std::time::Instant::now();
    for chunk in rows.chunks(b) {
        attempts::insert_many(&pool, chunk).await.unwrap();
    }
    println!(
        "{} rows in batches of {} in {:.2} s",
        n,
        b,
        w.elapsed().as_secs_f64()
    );
}
