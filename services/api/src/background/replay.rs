//! `endpoint.replay` (Svix's replay-missing) and `endpoint.bulk-replay`: a walk over the
//! tenant's stored messages of the window, in id order, sending some of them to the endpoint
//! again through the first retry tier (the same `webhook-id`, the same engine and signing).
//!
//! - replay-missing sends what the endpoint never had an attempt at and, by its subscription
//!   as it is now (event types, channels, payload filter: `hookstream_routing`, the
//!   dispatchers' own rules), should have had: messages sent while it was disabled or before
//!   it subscribed. Messages whose `deliverAt` is still ahead are left to their schedule.
//! - bulk-replay sends what the endpoint did have attempts at, optionally only those whose
//!   latest attempt has a status (or HTTP status class), as Svix's does.
//!
//! Sends are paced at `api.recover_rate_per_s`, here and again in the retry role (per
//! endpoint). The cursor moves past a message only once Kafka acknowledged it; a task taken
//! up again after a crash may send the message it was on a second time, with the same
//! `webhook-id` (receivers deduplicate on it).

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use hookstream_routing::Candidate;
use hookstream_store::attempts;
use hookstream_store::background_tasks::{self, Params};
use hookstream_store::endpoint_admin::{self, EndpointRef};
use hookstream_store::messages::{self, ListFilter};

use super::{Fault, Job, Outcome, Progress};

/// Messages read at a time.
const PAGE: i64 = 200;

pub(super) async fn run(job: &Job<'_>, progress: &mut Progress) -> Result<Outcome, Fault> {
    let task = job.task;
    let bulk = task.kind == background_tasks::BULK_REPLAY;
    let Some(endpoint) = task.endpoint_id else {
        return Ok(Outcome::Failed("a replay needs an endpoint".into()));
    };
    let Some(ep) = endpoint_admin::find(job.pool, task.tenant_id, &EndpointRef::Id(endpoint)).await? else {
        return Ok(Outcome::Failed("the endpoint was deleted".into()));
    };
    if !ep.enabled {
        return Ok(Outcome::Failed(
            "the endpoint is disabled: enable it and replay again".into(),
        ));
    }
    let subscription = match ep.subscription() {
        Ok(s) => s,
        Err(e) => {
            return Ok(Outcome::Failed(format!(
                "the endpoint's subscription does not compile: {e}"
            )))
        }
    };
    let params: &Params = &task.params;
    let filter = ListFilter {
        event_types: if bulk {
            params.event_types.clone()
        } else {
            Vec::new()
        },
        // The window: from `since` (inclusive) to `until`, or to when the task was asked for.
        after: Some(params.since - chrono::Duration::milliseconds(1)),
        before: Some(params.until.unwrap_or(task.created_at)),
        with_content: true,
        channel: if bulk { params.channel.clone() } else { None },
        tag: if bulk { params.tag.clone() } else { None },
    };
    let interval = Duration::from_secs_f64(1.0 / job.cfg.recover_rate_per_s);
    let mut pace = tokio::time::interval(interval);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut page =
            messages::list(job.pool, task.tenant_id, progress.cursor, false, &filter, PAGE).await?;
        messages::open_all(job.payloads.keys(), &mut page).await?;
        if page.is_empty() {
            return Ok(Outcome::Finished);
        }
        let ids: Vec<_> = page.iter().map(|m| m.event_id).collect();
        let latest: HashMap<_, _> = attempts::latest_at_endpoint(job.pool, ep.id, &ids)
            .await?
            .into_iter()
            .map(|a| (a.event_id, a))
            .collect();
        for m in &page {
            let send = match latest.get(&m.event_id) {
                // Erased content is not sent again.
                _ if m.erased => false,
                None if bulk => false,
                None => {
                    m.deliver_at.is_none_or(|at| at <= Utc::now())
                        && subscription.matches(&Candidate::new(
                            &m.event_type,
                            &m.channels,
                            m.payload.as_bytes(),
                        ))
                }
                Some(_) if !bulk => false,
                Some(a) => wanted(params, a),
            };
            // Erased since it was listed: skipped like one erased before.
            let event = match send {
                false => None,
                true => match job.payloads.envelope(m).await {
                    Ok(event) => Some(event),
                    Err(crate::error::ApiError::Conflict(_)) => None,
                    Err(e) => return Err(Fault::Seal(format!("{e:?}"))),
                },
            };
            if let Some(event) = event {
                tokio::select! {
                    _ = job.stop.cancelled() => return Ok(Outcome::Paused),
                    _ = pace.tick() => {}
                }
                job.replayer.send_paced(event, ep.id, interval).await?;
                progress.sent += 1;
            } else {
                progress.skipped += 1;
            }
            progress.cursor = Some(m.event_id);
            if !progress.save(false).await? {
                return Ok(Outcome::Paused);
            }
            if job.stop.is_cancelled() {
                return Ok(Outcome::Paused);
            }
        }
    }
}

/// Whether a bulk replay's status filters take a message whose latest attempt is `a`.
fn wanted(params: &Params, a: &attempts::Latest) -> bool {
    let status = match a.next.as_str() {
        "delivered" => 0,
        "dead_lettered" => 2,
        _ => 1,
    };
    let class = a.status.map_or(0, |s| (s / 100 * 100) as u16);
    params.status.is_none_or(|s| s == status) && params.status_code_class.is_none_or(|c| c == class)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latest(next: &str, status: Option<i32>) -> attempts::Latest {
        attempts::Latest {
            event_id: uuid::Uuid::nil(),
            next: next.into(),
            status,
        }
    }

    #[test]
    fn bulk_replay_status_filters_follow_svix() {
        let any = Params::default();
        assert!(wanted(&any, &latest("delivered", Some(200))));
        let failed = Params {
            status: Some(2),
            ..Params::default()
        };
        assert!(wanted(&failed, &latest("dead_lettered", Some(500))));
        assert!(!wanted(&failed, &latest("delivered", Some(200))));
        let fives = Params {
            status_code_class: Some(500),
            ..Params::default()
        };
        assert!(wanted(&fives, &latest("retry", Some(503))));
        assert!(!wanted(&fives, &latest("retry", None)));
        let none = Params {
            status_code_class: Some(0),
            ..Params::default()
        };
        assert!(wanted(&none, &latest("retry", None)));
    }
}
