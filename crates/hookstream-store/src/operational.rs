//! Operational webhooks (migration 0019): the reserved tenant whose endpoints receive events
//! about every other tenant's endpoints and deliveries, and who may see which of them. An
//! operator's operational endpoint listens on no channel (every tenant's events); a tenant's
//! listens on its own channel, `tenant.<id>`, and is that tenant's to see and change.

use sqlx::PgPool;
use uuid::Uuid;

use crate::StoreError;

/// The operational tenant (`hookstream.operational_tenant()`).
pub const OPERATIONAL_TENANT: Uuid = Uuid::from_u128(0xff);

/// The event types it sends, as Svix names them.
pub const EVENT_TYPES: &[&str] = &[
    "endpoint.created",
    "endpoint.updated",
    "endpoint.deleted",
    "endpoint.disabled",
    "endpoint.enabled",
    "message.attempt.failing",
    "message.attempt.exhausted",
    "message.attempt.recovered",
];

/// Operational endpoints one scope (a tenant, or the operators) may have.
pub const MAX_ENDPOINTS_PER_SCOPE: i64 = 10;

/// The names in an operational endpoint's event-type filter that no operational event has
/// (patterns with `*` are left to the filter's own checks).
pub fn not_operational(types: &[String]) -> Vec<&str> {
    types
        .iter()
        .map(String::as_str)
        .filter(|t| !t.contains('*') && !EVENT_TYPES.contains(t))
        .collect()
}

/// The channel a tenant's operational events are sent on.
pub fn channel_of(tenant: Uuid) -> String {
    format!("tenant.{tenant}")
}

/// Whether an operational endpoint listening on `channels` is visible to `scope` (a tenant;
/// `None`, an operator, sees every one).
pub fn visible_to(channels: &[String], scope: Option<Uuid>) -> bool {
    match scope {
        None => true,
        Some(t) => channels.len() == 1 && channels[0] == channel_of(t),
    }
}

/// How many operational endpoints listen on exactly `channels` (one scope's).
pub async fn count_on(pool: &PgPool, channels: &[String]) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM hookstream.endpoints
          WHERE tenant_id = hookstream.operational_tenant() AND coalesce(channels, '{}') = $1",
    )
    .bind(channels)
    .fetch_one(pool)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_constant_is_the_migrations_tenant_and_scopes_hold() {
        assert_eq!(
            OPERATIONAL_TENANT.to_string(),
            "00000000-0000-0000-0000-0000000000ff"
        );
        let t = Uuid::now_v7();
        assert!(visible_to(&[channel_of(t)], Some(t)));
        assert!(!visible_to(&[channel_of(t)], Some(Uuid::now_v7())));
        assert!(
            !visible_to(&[], Some(t)),
            "an operator's endpoint is not a tenant's"
        );
        assert!(visible_to(&[], None));
    }
}
