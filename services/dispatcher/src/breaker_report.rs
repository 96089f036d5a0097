//! Publishes this dispatcher's circuit breakers that are not closed
//! (`hookstream_store::breakers`), so that `hookstream endpoint stats`, `hookstream health`
//! and the API show them: every second what changed, every `REPORT_EVERY` all of them again
//! (readers forget rows older than `FRESH`, which is how a dead dispatcher's rows go away).
//!
//! Delivery never waits for this: the breakers are read from memory and written by this task
//! alone. While PostgreSQL is unavailable the report is retried every second; a stop withdraws
//! this dispatcher's rows.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone as _, Utc};
use hookstream_store::breakers::{self, Reported, REPORT_EVERY};
use hookstream_store::sqlx::PgPool;
use hookstream_store::{answered, StoreError};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::context::Context;
use crate::isolation::BreakerSnapshot;

const CHECK_EVERY: Duration = Duration::from_secs(1);

fn time(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_else(Utc::now)
}

fn reported(s: &BreakerSnapshot) -> Reported {
    Reported {
        endpoint_id: s.endpoint_id,
        state: if s.open { "open" } else { "half_open" },
        since: time(s.since_ms),
        open_until: s.open_until_ms.map(time),
    }
}

/// What to write to go from `published` to `now`: rows to upsert (all of them when
/// `everything`) and endpoints whose breaker closed.
fn diff(
    published: &HashMap<Uuid, BreakerSnapshot>,
    now: &HashMap<Uuid, BreakerSnapshot>,
    everything: bool,
) -> (Vec<Reported>, Vec<Uuid>) {
    let upserts = now
        .values()
        .filter(|s| everything || published.get(&s.endpoint_id) != Some(s))
        .map(reported)
        .collect();
    let closed = published
        .keys()
        .filter(|id| !now.contains_key(id))
        .copied()
        .collect();
    (upserts, closed)
}

pub(crate) async fn run(
    ctx: Arc<Context>,
    pool: PgPool,
    member: Uuid,
    shutdown: CancellationToken,
) -> Result<(), StoreError> {
    let mut published: HashMap<Uuid, BreakerSnapshot> = HashMap::new();
    let mut last_full: Option<Instant> = None;
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CHECK_EVERY) => {}
            _ = shutdown.cancelled() => break,
        }
        let now: HashMap<Uuid, BreakerSnapshot> = ctx
            .isolation
            .not_closed()
            .into_iter()
            .map(|s| (s.endpoint_id, s))
            .collect();
        let everything = last_full.is_none_or(|t| t.elapsed() >= REPORT_EVERY);
        let (upserts, closed) = diff(&published, &now, everything);
        if upserts.is_empty() && closed.is_empty() && !everything {
            continue;
        }
        match answered(
            ctx.answer_deadline,
            breakers::publish(&pool, member, &upserts, &closed),
        )
        .await
        {
            Ok(()) => {
                if failing {
                    tracing::info!("breaker states published again");
                }
                failing = false;
                published = now;
                if everything {
                    last_full = Some(Instant::now());
                }
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "cannot publish breaker states, retrying every second");
                }
                failing = true;
            }
        }
    }
    // Bounded like leaving the member list: readers forget a silent member's states anyway.
    let withdrawn = answered(Duration::from_secs(3), breakers::withdraw(&pool, member));
    if let Err(e) = withdrawn.await {
        tracing::warn!(error = %e, "could not withdraw breaker states; readers forget them within 90 s");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(id: u128, open: bool, until: Option<i64>) -> BreakerSnapshot {
        BreakerSnapshot {
            endpoint_id: Uuid::from_u128(id),
            open,
            since_ms: 1_000,
            open_until_ms: until,
        }
    }

    fn map(s: &[BreakerSnapshot]) -> HashMap<Uuid, BreakerSnapshot> {
        s.iter().map(|s| (s.endpoint_id, *s)).collect()
    }

    #[test]
    fn only_changes_are_written_until_a_full_report_is_due() {
        let before = map(&[snap(1, true, Some(5_000)), snap(2, true, Some(6_000))]);
        // 1 went half-open, 2 closed, 3 opened.
        let now = map(&[snap(1, false, None), snap(3, true, Some(9_000))]);
        let (up, closed) = diff(&before, &now, false);
        let mut ids: Vec<_> = up.iter().map(|r| (r.endpoint_id, r.state)).collect();
        ids.sort();
        assert_eq!(
            ids,
            vec![(Uuid::from_u128(1), "half_open"), (Uuid::from_u128(3), "open")]
        );
        assert_eq!(closed, vec![Uuid::from_u128(2)]);

        let (up, closed) = diff(&now, &now, false);
        assert!(up.is_empty() && closed.is_empty(), "nothing changed");
        let (up, _) = diff(&now, &now, true);
        assert_eq!(up.len(), 2, "a full report rewrites every row");
    }
}
