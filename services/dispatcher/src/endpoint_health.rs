//! Endpoint health: since when each endpoint has been failing (in the database and in
//! memory), touching the database only when an endpoint turns from healthy to failing or
//! back; an endpoint failing with no success for `disable_after_failing_ms`, or answering
//! 410, is disabled (and, when configured, its tenant gets an `endpoint.disabled` event in
//! the same transaction). Each write is given up after the database's answer deadline: the
//! delivery whose outcome it records waits for it.

use std::time::Duration;

use hookstream_delivery::{Outcome, Verdict};
use hookstream_store::answered;
use hookstream_store::endpoints::ActiveEndpoint;

use crate::context::Context;
use crate::work::now_ms;

/// Keeps `failing_since` in step with an outcome.
pub(crate) async fn track(ctx: &Context, ep: &ActiveEndpoint, outcome: &Outcome) {
    let id = ep.endpoint.id;
    let known = ctx
        .health
        .known(id)
        .unwrap_or_else(|| ep.endpoint.failing_since.map(|t| t.timestamp_millis()));
    match outcome.verdict {
        Verdict::Delivered => {
            if known.is_some() {
                let marked = answered(
                    ctx.answer_deadline,
                    hookstream_store::endpoints::mark_healthy(&ctx.pool, id),
                );
                if let Err(e) = marked.await {
                    tracing::warn!(endpoint_id = %id, error = %e, "could not record the endpoint's recovery");
                    return;
                }
                tracing::info!(endpoint_id = %id, "endpoint recovered");
            }
            ctx.health.set(id, None);
        }
        Verdict::Gone => {}
        Verdict::Retryable | Verdict::Permanent => {
            let since = match known {
                Some(since) => since,
                None => match answered(
                    ctx.answer_deadline,
                    hookstream_store::endpoints::mark_failing(&ctx.pool, id),
                )
                .await
                {
                    Ok(Some(since)) => since.timestamp_millis(),
                    Ok(None) => return, // disabled or deleted meanwhile
                    Err(e) => {
                        tracing::warn!(endpoint_id = %id, error = %e, "could not record the endpoint's failure");
                        return;
                    }
                },
            };
            ctx.health.set(id, Some(since));
            let window = ctx.settings.disable_after_failing_ms;
            if now_ms().saturating_sub(since) >= i64::try_from(window).unwrap_or(i64::MAX) {
                let reason = format!(
                    "no successful delivery for {} (failing since {})",
                    humanize_ms(window),
                    chrono::DateTime::from_timestamp_millis(since)
                        .unwrap_or_default()
                        .to_rfc3339()
                );
                disable(ctx, ep, "failing", reason, Some(Duration::from_millis(window))).await;
            }
        }
    }
}

fn humanize_ms(ms: u64) -> String {
    match ms {
        ms if ms >= 86_400_000 && ms % 86_400_000 == 0 => format!("{} days", ms / 86_400_000),
        ms if ms >= 3_600_000 && ms % 3_600_000 == 0 => format!("{} h", ms / 3_600_000),
        ms if ms % 1_000 == 0 => format!("{} s", ms / 1_000),
        ms => format!("{ms} ms"),
    }
}

/// Disables an endpoint (on 410, or failing too long: `failing_for` re-checks that in the
/// database, where another instance may have seen a success) and, when configured, publishes
/// `endpoint.disabled` to its tenant in the same transaction.
pub(crate) async fn disable(
    ctx: &Context,
    ep: &ActiveEndpoint,
    label: &str,
    reason: String,
    failing_for: Option<Duration>,
) {
    let id = ep.endpoint.id;
    let notice = ctx.settings.publish_endpoint_disabled.then(|| {
        hookstream_producer::Event::new(
            ep.endpoint.tenant_id,
            "endpoint.disabled",
            serde_json::json!({
                "endpoint_id": id,
                // The redacted form: the full URL may carry a token.
                "url": ep.endpoint.url,
                "reason": reason,
                "disabled_at": chrono::Utc::now().to_rfc3339(),
            }),
        )
        .idempotency_key(format!("endpoint.disabled:{id}:{}", now_ms()))
    });
    let disabled = answered(
        ctx.answer_deadline,
        hookstream_store::endpoints::disable(&ctx.pool, id, &reason, failing_for, notice),
    );
    match disabled.await {
        Ok(true) => {
            ctx.metrics.endpoints_disabled.with_label_values(&[label]).inc();
            ctx.health.forget(id);
            tracing::warn!(endpoint_id = %id, reason = %reason, "endpoint disabled");
        }
        Ok(false) => tracing::debug!(endpoint_id = %id, "endpoint already disabled (or recovered meanwhile)"),
        Err(e) => tracing::warn!(endpoint_id = %id, error = %e, "could not disable endpoint"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_read_naturally() {
        assert_eq!(humanize_ms(5 * 86_400_000), "5 days");
        assert_eq!(humanize_ms(7_200_000), "2 h");
        assert_eq!(humanize_ms(1_500), "1500 ms");
    }
}
