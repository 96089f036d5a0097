//! Per endpoint statistics of the delivery log, kept as it is written (migration 0011): per
//! minute and per hour, the attempts, the delivered ones, a latency histogram and the failures
//! by class and status (`hookstream.attempt_stats`). `crate::attempts::insert_many` adds the
//! attempts it stores for the first time in the same transaction, so the figures never count
//! an attempt twice nor miss one. A window's figures come from the hours it covers and the
//! minutes at its edges (whole minutes: a window from 10:00:30 counts all of 10:00).
//!
//! Latency percentiles come from the histogram: eight buckets per doubling of
//! `1 + duration_ms`, each reported at its geometric middle, so a percentile is within about
//! 4.5 % of the true one.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde::Serialize;
use sqlx::{PgPool, Postgres, QueryBuilder, Transaction};
use uuid::Uuid;

use crate::attempt_row::NewAttempt;
use crate::StoreError;

/// Buckets per doubling of `1 + duration_ms`.
const PER_DOUBLING: f64 = 8.0;

/// The latency bucket of a duration.
pub fn bucket_of(duration_ms: i32) -> i16 {
    let d = f64::from(duration_ms.max(0));
    (PER_DOUBLING * (1.0 + d).log2()).floor() as i16
}

/// The duration (ms) a bucket stands for: the geometric middle of its range (the arithmetic
/// one for the first buckets, which start at 0), kept within the whole milliseconds the range
/// holds (durations are whole milliseconds: bucket 8 holds only 1 ms).
pub fn bucket_value(bucket: i16) -> f64 {
    let edge = |b: f64| (b / PER_DOUBLING).exp2() - 1.0;
    let (lo, hi) = (edge(f64::from(bucket)), edge(f64::from(bucket) + 1.0));
    let middle = if lo < 1.0 {
        (lo + hi) / 2.0
    } else {
        (lo * hi).sqrt()
    };
    let (first, last) = (lo.ceil(), (hi.ceil() - 1.0).max(lo.ceil()));
    middle.clamp(first, last)
}

/// The `q` quantile (0..=1) of a histogram of `(bucket, count)` in ascending bucket order.
pub fn quantile(histogram: &[(i16, i64)], q: f64) -> f64 {
    let total: i64 = histogram.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return 0.0;
    }
    let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as i64;
    let mut seen = 0;
    for (b, n) in histogram {
        seen += n;
        if seen >= rank {
            return bucket_value(*b);
        }
    }
    histogram.last().map_or(0.0, |(b, _)| bucket_value(*b))
}

/// What a set of attempts adds to one (endpoint, span, start) row.
#[derive(Debug, Default, Clone, PartialEq)]
struct Tally {
    tenant_id: Uuid,
    attempts: i32,
    delivered: i32,
    duration_ms_sum: i64,
    buckets: BTreeMap<i16, i32>,
    failures: BTreeMap<String, i32>,
    statuses: BTreeMap<String, i32>,
}

const SPANS: [(&str, TimeDelta); 2] = [("minute", TimeDelta::minutes(1)), ("hour", TimeDelta::hours(1))];

/// The rows `stored` attempts add to, keyed and ordered by (start, endpoint, span): every
/// writer takes their locks in that order, so two sinks never deadlock on them.
fn tallies<'a>(
    stored: impl Iterator<Item = &'a NewAttempt>,
) -> BTreeMap<(DateTime<Utc>, Uuid, &'static str), Tally> {
    let mut out: BTreeMap<(DateTime<Utc>, Uuid, &'static str), Tally> = BTreeMap::new();
    for a in stored {
        for (span, length) in SPANS {
            let start = a.started_at.duration_trunc(length).unwrap_or(a.started_at);
            let t = out.entry((start, a.endpoint_id, span)).or_default();
            t.tenant_id = a.tenant_id;
            t.attempts += 1;
            t.duration_ms_sum += i64::from(a.duration_ms.max(0));
            *t.buckets.entry(bucket_of(a.duration_ms)).or_default() += 1;
            if a.outcome == "delivered" {
                t.delivered += 1;
            } else {
                *t.failures.entry(a.error_class.clone()).or_default() += 1;
            }
            if let Some(s) = a.status.filter(|s| s / 100 != 2) {
                *t.statuses.entry(s.to_string()).or_default() += 1;
            }
        }
    }
    out
}

/// Adds `stored` (attempts stored for the first time, in this transaction) to their rows.
pub(crate) async fn add(
    tx: &mut Transaction<'_, Postgres>,
    stored: &[&NewAttempt],
) -> Result<(), StoreError> {
    let tallies = tallies(stored.iter().copied());
    if tallies.is_empty() {
        return Ok(());
    }
    let rows: Vec<_> = tallies.into_iter().collect();
    // 11 binds a row, well under PostgreSQL's 65,535 for the sink's batches.
    for chunk in rows.chunks(2_000) {
        let mut q = QueryBuilder::<Postgres>::new(
            "INSERT INTO hookstream.attempt_stats AS s
                (start_at, endpoint_id, span, tenant_id, attempts, delivered, duration_ms_sum,
                 bucket, bucket_n, failures, statuses) ",
        );
        q.push_values(chunk, |mut b, ((start, endpoint, span), t)| {
            let buckets: Vec<i16> = t.buckets.keys().copied().collect();
            let counts: Vec<i32> = t.buckets.values().copied().collect();
            b.push_bind(*start)
                .push_bind(*endpoint)
                .push_bind(*span)
                .push_bind(t.tenant_id)
                .push_bind(t.attempts)
                .push_bind(t.delivered)
                .push_bind(t.duration_ms_sum)
                .push_bind(buckets)
                .push_bind(counts)
                .push_bind(serde_json::to_value(&t.failures).unwrap_or_default())
                .push_bind(serde_json::to_value(&t.statuses).unwrap_or_default());
        });
        q.push(
            " ON CONFLICT (start_at, endpoint_id, span) DO UPDATE SET
                attempts = s.attempts + EXCLUDED.attempts,
                delivered = s.delivered + EXCLUDED.delivered,
                duration_ms_sum = s.duration_ms_sum + EXCLUDED.duration_ms_sum,
                (bucket, bucket_n) = (SELECT bucket, bucket_n FROM hookstream.add_buckets(
                    s.bucket, s.bucket_n, EXCLUDED.bucket, EXCLUDED.bucket_n)),
                failures = hookstream.add_counts(s.failures, EXCLUDED.failures),
                statuses = hookstream.add_counts(s.statuses, EXCLUDED.statuses)",
        );
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

/// One endpoint's attempts over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndpointStats {
    pub endpoint_id: Uuid,
    pub tenant_id: Uuid,
    pub attempts: i64,
    pub delivered: i64,
    pub success_rate: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    /// The most frequent error class of the failed attempts, and how many had it.
    pub top_error_class: Option<String>,
    pub top_error_count: Option<i64>,
    /// The most frequent non-2xx status, and how many had it.
    pub top_status: Option<i32>,
    pub top_status_count: Option<i64>,
    pub enabled: Option<bool>,
    pub failing_since: Option<DateTime<Utc>>,
    /// The circuit breaker across the live dispatchers (`crate::breakers`): `open` if one
    /// holds it open, `half_open` if one is probing, else `closed`.
    pub breaker: String,
}

/// The statistics rows of a window: the hours it covers whole ($4 to $5), the minutes before
/// them ($6 to $7) and after them (from $8). Three range scans, each on an index that leads
/// with the scope or the span.
const WINDOW_ROWS: &str = "
    r AS (SELECT * FROM hookstream.attempt_stats
          WHERE span = 'hour' AND start_at >= $4 AND start_at < $5
            AND ($1::uuid IS NULL OR tenant_id = $1) AND ($2::uuid IS NULL OR endpoint_id = $2)
          UNION ALL
          SELECT * FROM hookstream.attempt_stats
          WHERE span = 'minute' AND start_at >= $6 AND start_at < $7
            AND ($1::uuid IS NULL OR tenant_id = $1) AND ($2::uuid IS NULL OR endpoint_id = $2)
          UNION ALL
          SELECT * FROM hookstream.attempt_stats
          WHERE span = 'minute' AND start_at >= $8
            AND ($1::uuid IS NULL OR tenant_id = $1) AND ($2::uuid IS NULL OR endpoint_id = $2))";

/// The ranges `WINDOW_ROWS` reads for a window from `since` to now: whole hours
/// `[h0, h1)`, minutes `[lo, h0)` and from `h1`; a window within one hour is minutes only.
fn window(since: DateTime<Utc>, now: DateTime<Utc>) -> [DateTime<Utc>; 5] {
    let never = DateTime::<Utc>::from_naive_utc_and_offset(
        chrono::NaiveDate::from_ymd_opt(9999, 12, 31)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .unwrap_or_default(),
        Utc,
    );
    let lo = since.duration_trunc(TimeDelta::minutes(1)).unwrap_or(since);
    let hour = TimeDelta::hours(1);
    let trunc = since.duration_trunc(hour).unwrap_or(since);
    let h0 = if trunc == since { since } else { trunc + hour };
    let h1 = now.duration_trunc(hour).unwrap_or(now);
    if h0 < h1 {
        [h0, h1, lo, h0, h1]
    } else {
        [lo, lo, lo, never, never]
    }
}

#[derive(sqlx::FromRow)]
struct Totals {
    endpoint_id: Uuid,
    tenant_id: Uuid,
    attempts: i64,
    delivered: i64,
    enabled: Option<bool>,
    failing_since: Option<DateTime<Utc>>,
    breaker: String,
}

/// Per endpoint statistics of the attempts since `since` (scoped to `tenant_id`, or to one
/// endpoint, when given), worst first: lowest success rate, then slowest p99.
pub async fn endpoint_stats(
    pool: &PgPool,
    tenant_id: Option<Uuid>,
    since: DateTime<Utc>,
) -> Result<Vec<EndpointStats>, StoreError> {
    stats(pool, tenant_id, None, since).await
}

/// `endpoint_stats` of one endpoint (empty when it had no attempt in the window).
pub async fn one_endpoint_stats(
    pool: &PgPool,
    endpoint_id: Uuid,
    since: DateTime<Utc>,
) -> Result<Option<EndpointStats>, StoreError> {
    Ok(stats(pool, None, Some(endpoint_id), since)
        .await?
        .into_iter()
        .next())
}

async fn stats(
    pool: &PgPool,
    tenant_id: Option<Uuid>,
    endpoint_id: Option<Uuid>,
    since: DateTime<Utc>,
) -> Result<Vec<EndpointStats>, StoreError> {
    let fresh = crate::breakers::FRESH.as_secs_f64();
    let [h0, h1, lo, m1, m2] = window(since, Utc::now());
    let totals: Vec<Totals> = sqlx::query_as(&format!(
        "WITH {WINDOW_ROWS},
         t AS (SELECT endpoint_id, min(tenant_id::text)::uuid AS tenant_id, sum(attempts)::int8 AS attempts,
                      sum(delivered)::int8 AS delivered
               FROM r GROUP BY endpoint_id),
         b AS (SELECT endpoint_id, CASE WHEN bool_or(state = 'open') THEN 'open' ELSE 'half_open' END AS breaker
               FROM hookstream.endpoint_breakers
               WHERE reported_at >= now() - make_interval(secs => $3)
               GROUP BY endpoint_id)
         SELECT t.endpoint_id, t.tenant_id, t.attempts, t.delivered, e.enabled, e.failing_since,
                coalesce(b.breaker, 'closed') AS breaker
         FROM t LEFT JOIN hookstream.endpoints e ON e.id = t.endpoint_id
         LEFT JOIN b USING (endpoint_id)"
    ))
    .bind(tenant_id)
    .bind(endpoint_id)
    .bind(fresh)
    .bind(h0)
    .bind(h1)
    .bind(lo)
    .bind(m1)
    .bind(m2)
    .fetch_all(pool)
    .await?;
    let histograms: Vec<(Uuid, i16, i64)> = sqlx::query_as(&format!(
        "WITH {WINDOW_ROWS}
         SELECT r.endpoint_id, h.b, sum(h.n)::int8
         FROM r, unnest(r.bucket, r.bucket_n) AS h(b, n)
         GROUP BY r.endpoint_id, h.b ORDER BY r.endpoint_id, h.b"
    ))
    .bind(tenant_id)
    .bind(endpoint_id)
    .bind(fresh)
    .bind(h0)
    .bind(h1)
    .bind(lo)
    .bind(m1)
    .bind(m2)
    .fetch_all(pool)
    .await?;
    // The most frequent failure class and non-2xx status of each endpoint.
    let tops: Vec<(Uuid, String, String, i64)> = sqlx::query_as(&format!(
        "WITH {WINDOW_ROWS},
         c AS (SELECT r.endpoint_id, 'class' AS kind, f.key AS label, sum(f.value::int8)::int8 AS n
               FROM r, jsonb_each_text(r.failures) AS f GROUP BY 1, 2, 3
               UNION ALL
               SELECT r.endpoint_id, 'status', f.key, sum(f.value::int8)::int8
               FROM r, jsonb_each_text(r.statuses) AS f GROUP BY 1, 2, 3)
         SELECT DISTINCT ON (endpoint_id, kind) endpoint_id, kind, label, n
         FROM c ORDER BY endpoint_id, kind, n DESC, label"
    ))
    .bind(tenant_id)
    .bind(endpoint_id)
    .bind(fresh)
    .bind(h0)
    .bind(h1)
    .bind(lo)
    .bind(m1)
    .bind(m2)
    .fetch_all(pool)
    .await?;

    let mut hist: HashMap<Uuid, Vec<(i16, i64)>> = HashMap::new();
    for (ep, b, n) in histograms {
        hist.entry(ep).or_default().push((b, n));
    }
    let mut classes: HashMap<Uuid, (String, i64)> = HashMap::new();
    let mut statuses: HashMap<Uuid, (i32, i64)> = HashMap::new();
    for (ep, kind, label, n) in tops {
        if kind == "class" {
            classes.insert(ep, (label, n));
        } else if let Ok(status) = label.parse() {
            statuses.insert(ep, (status, n));
        }
    }
    let mut out: Vec<EndpointStats> = totals
        .into_iter()
        .filter(|t| t.attempts > 0)
        .map(|t| {
            let h = hist.remove(&t.endpoint_id).unwrap_or_default();
            let class = classes.remove(&t.endpoint_id);
            let status = statuses.remove(&t.endpoint_id);
            EndpointStats {
                endpoint_id: t.endpoint_id,
                tenant_id: t.tenant_id,
                attempts: t.attempts,
                delivered: t.delivered,
                success_rate: t.delivered as f64 / t.attempts as f64,
                p50_ms: quantile(&h, 0.50),
                p95_ms: quantile(&h, 0.95),
                p99_ms: quantile(&h, 0.99),
                top_error_class: class.as_ref().map(|c| c.0.clone()),
                top_error_count: class.map(|c| c.1),
                top_status: status.map(|s| s.0),
                top_status_count: status.map(|s| s.1),
                enabled: t.enabled,
                failing_since: t.failing_since,
                breaker: t.breaker,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        a.success_rate
            .total_cmp(&b.success_rate)
            .then(b.p99_ms.total_cmp(&a.p99_ms))
            .then(a.endpoint_id.cmp(&b.endpoint_id))
    });
    Ok(out)
}

/// One step of an endpoint's series: attempts, delivered and latency percentiles of the
/// attempts that started in `[start, start + step)`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub start: DateTime<Utc>,
    pub attempts: i64,
    pub delivered: i64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// An endpoint's attempts since `since` in steps of `step_minutes` (from its per-minute rows;
/// steps without attempts are left out), for charts.
pub async fn series(
    pool: &PgPool,
    endpoint_id: Uuid,
    since: DateTime<Utc>,
    step_minutes: i32,
) -> Result<Vec<Point>, StoreError> {
    let step = step_minutes.max(1);
    // (step start, attempts, delivered, buckets, their counts)
    type Step = (DateTime<Utc>, i64, i64, Vec<i16>, Vec<i64>);
    let rows: Vec<Step> = sqlx::query_as(
        "WITH s AS (
             SELECT to_timestamp(floor(extract(epoch FROM start_at) / ($3 * 60)) * ($3 * 60)) AS step_at, *
             FROM hookstream.attempt_stats
             WHERE endpoint_id = $1 AND span = 'minute' AND start_at >= date_trunc('minute', $2::timestamptz)),
         t AS (SELECT step_at, sum(attempts)::int8 AS attempts, sum(delivered)::int8 AS delivered
               FROM s GROUP BY step_at),
         h AS (SELECT step_at, b, sum(n)::int8 AS n FROM s, unnest(s.bucket, s.bucket_n) AS x(b, n)
               GROUP BY step_at, b)
         SELECT t.step_at, t.attempts, t.delivered,
                coalesce(array_agg(h.b ORDER BY h.b) FILTER (WHERE h.b IS NOT NULL), '{}'),
                coalesce(array_agg(h.n ORDER BY h.b) FILTER (WHERE h.b IS NOT NULL), '{}')
         FROM t LEFT JOIN h USING (step_at)
         GROUP BY t.step_at, t.attempts, t.delivered ORDER BY t.step_at",
    )
    .bind(endpoint_id)
    .bind(since)
    .bind(step)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(start, attempts, delivered, b, n)| {
            let h: Vec<(i16, i64)> = b.into_iter().zip(n).collect();
            Point {
                start,
                attempts,
                delivered,
                p50_ms: quantile(&h, 0.50),
                p99_ms: quantile(&h, 0.99),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_eight_per_doubling_and_a_percentile_is_within_five_percent() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 8);
        assert_eq!(bucket_of(3), 16);
        assert_eq!(bucket_of(-5), 0, "a negative duration counts as 0");
        for d in [1, 7, 10, 50, 200, 999, 15_000, 30_000] {
            let v = bucket_value(bucket_of(d));
            let err = (v - f64::from(d)).abs() / f64::from(d);
            assert!(err < 0.05, "{d} ms is reported as {v:.2} ms");
        }
        // Buckets only grow with the duration.
        let mut last = 0;
        for d in 0..100_000 {
            let b = bucket_of(d);
            assert!(b >= last);
            last = b;
        }
    }

    #[test]
    fn a_window_is_its_whole_hours_and_the_minutes_at_its_edges() {
        use chrono::TimeZone;
        let t = |h, m, s| Utc.with_ymd_and_hms(2026, 12, 1, h, m, s).unwrap();
        let [h0, h1, lo, m1, m2] = window(t(7, 20, 30), t(10, 5, 0));
        assert_eq!((h0, h1), (t(8, 0, 0), t(10, 0, 0)), "hours 08:00 and 09:00");
        assert_eq!(
            (lo, m1, m2),
            (t(7, 20, 0), t(8, 0, 0), t(10, 0, 0)),
            "minutes 07:20-07:59 and from 10:00"
        );
        let [h0, h1, lo, m1, m2] = window(t(10, 1, 0), t(10, 40, 0));
        assert_eq!(h0, h1, "no whole hour");
        assert_eq!(lo, t(10, 1, 0));
        assert!(m1 > t(10, 40, 0) && m2 > t(10, 40, 0), "minutes from 10:01 on");
        let [h0, _, lo, m1, _] = window(t(9, 0, 0), t(11, 30, 0));
        assert_eq!(
            (h0, lo, m1),
            (t(9, 0, 0), t(9, 0, 0), t(9, 0, 0)),
            "a window on the hour starts with it"
        );
    }

    #[test]
    fn quantiles_walk_the_histogram() {
        let h: Vec<(i16, i64)> = vec![(bucket_of(10), 90), (bucket_of(100), 9), (bucket_of(1_000), 1)];
        assert!((quantile(&h, 0.5) - 10.0).abs() < 0.5);
        assert!((quantile(&h, 0.95) - 100.0).abs() < 5.0);
        assert!((quantile(&h, 0.99) - 100.0).abs() < 5.0);
        assert!((quantile(&h, 1.0) - 1_000.0).abs() < 50.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    fn attempt(minute: u32, second: u32, endpoint: u128, ms: i32, delivered: bool) -> NewAttempt {
        use chrono::TimeZone;
        NewAttempt {
            started_at: Utc.with_ymd_and_hms(2026, 12, 1, 10, minute, second).unwrap(),
            event_id: Uuid::now_v7(),
            endpoint_id: Uuid::from_u128(endpoint),
            attempt: 1,
            tenant_id: Uuid::from_u128(9),
            trigger: "first".into(),
            duration_ms: ms,
            status: Some(if delivered { 200 } else { 503 }),
            outcome: if delivered { "delivered" } else { "retryable" }.into(),
            error_class: if delivered { "none" } else { "http_5xx" }.into(),
            error: String::new(),
            response_headers: Vec::new(),
            response_body: None,
            response_truncated: false,
            next: String::new(),
            next_due_at: None,
            next_tier: None,
            event_type: None,
            aggregate_id: None,
            payload_bytes: None,
            committed_at: None,
            relayed_at: None,
        }
    }

    #[test]
    fn attempts_add_to_their_minute_and_their_hour() {
        let rows = [
            attempt(1, 5, 1, 10, true),
            attempt(1, 50, 1, 12, false),
            attempt(2, 0, 1, 10, true),
            attempt(2, 0, 2, 10, true),
        ];
        let t = tallies(rows.iter());
        let minutes: Vec<_> = t.iter().filter(|(k, _)| k.2 == "minute").collect();
        let hours: Vec<_> = t.iter().filter(|(k, _)| k.2 == "hour").collect();
        assert_eq!(
            minutes.len(),
            3,
            "endpoint 1 at 10:01 and 10:02, endpoint 2 at 10:02"
        );
        assert_eq!(hours.len(), 2);
        let first = &t[&(
            rows[0].started_at.duration_trunc(TimeDelta::minutes(1)).unwrap(),
            Uuid::from_u128(1),
            "minute",
        )];
        assert_eq!((first.attempts, first.delivered), (2, 1));
        assert_eq!(first.failures.get("http_5xx"), Some(&1));
        assert_eq!(first.statuses.get("503"), Some(&1));
        assert_eq!(first.duration_ms_sum, 22);
        let hour = &t[&(
            rows[0].started_at.duration_trunc(TimeDelta::hours(1)).unwrap(),
            Uuid::from_u128(1),
            "hour",
        )];
        assert_eq!((hour.attempts, hour.delivered), (3, 2));
        assert!(
            t.keys().zip(t.keys().skip(1)).all(|(a, b)| a < b),
            "locks are taken in key order"
        );
    }
}
