//! The routes of Svix's current API (those its SDK 2.9 calls) that Hookstream does not
//! implement. A request for one answers 404 saying so (not a bare "no route"), and docs/api.md
//! lists them; a test checks that each is indeed unrouted.

/// (method, path template), as Svix's SDK names them.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/api/v1/app/{app_id}/autoconfig"),
    ("DELETE", "/api/v1/app/{app_id}/autoconfig/{autoconfig_id}"),
    ("POST", "/api/v1/app/{app_id}/autoconfig/{autoconfig_id}/rotate"),
    ("GET", "/api/v1/app/{app_id}/destination"),
    ("POST", "/api/v1/app/{app_id}/destination"),
    ("DELETE", "/api/v1/app/{app_id}/destination/{destination_id}"),
    ("GET", "/api/v1/app/{app_id}/destination/{destination_id}"),
    ("PATCH", "/api/v1/app/{app_id}/destination/{destination_id}"),
    ("PUT", "/api/v1/app/{app_id}/destination/{destination_id}"),
    (
        "POST",
        "/api/v1/app/{app_id}/destination/{destination_id}/secret/rotate",
    ),
    (
        "GET",
        "/api/v1/app/{app_id}/destination/{destination_id}/transformation",
    ),
    (
        "PATCH",
        "/api/v1/app/{app_id}/destination/{destination_id}/transformation",
    ),
    ("GET", "/api/v1/app/{app_id}/endpoint/{endpoint_id}/attempt-stats"),
    (
        "GET",
        "/api/v1/app/{app_id}/endpoint/{endpoint_id}/transformation",
    ),
    (
        "PATCH",
        "/api/v1/app/{app_id}/endpoint/{endpoint_id}/transformation",
    ),
    ("GET", "/api/v1/app/{app_id}/integration"),
    ("POST", "/api/v1/app/{app_id}/integration"),
    ("DELETE", "/api/v1/app/{app_id}/integration/{integ_id}"),
    ("GET", "/api/v1/app/{app_id}/integration/{integ_id}"),
    ("PUT", "/api/v1/app/{app_id}/integration/{integ_id}"),
    ("POST", "/api/v1/app/{app_id}/integration/{integ_id}/key/rotate"),
    ("POST", "/api/v1/app/{app_id}/msg/bulk-expunge"),
    ("POST", "/api/v1/app/{app_id}/msg/precheck/active"),
    ("GET", "/api/v1/app/{app_id}/poller/{sink_id}"),
    (
        "GET",
        "/api/v1/app/{app_id}/poller/{sink_id}/consumer/{consumer_id}",
    ),
    (
        "POST",
        "/api/v1/app/{app_id}/poller/{sink_id}/consumer/{consumer_id}/seek",
    ),
    ("POST", "/api/v1/auth/stream-logout"),
    ("POST", "/api/v1/auth/stream-portal-access/{stream_id}"),
    ("POST", "/api/v1/auth/stream/{stream_id}/expire-all"),
    (
        "GET",
        "/api/v1/auth/stream/{stream_id}/sink/{sink_id}/poller/token",
    ),
    (
        "POST",
        "/api/v1/auth/stream/{stream_id}/sink/{sink_id}/poller/token/rotate",
    ),
    ("GET", "/api/v1/connector"),
    ("POST", "/api/v1/connector"),
    ("DELETE", "/api/v1/connector/{connector_id}"),
    ("GET", "/api/v1/connector/{connector_id}"),
    ("PATCH", "/api/v1/connector/{connector_id}"),
    ("PUT", "/api/v1/connector/{connector_id}"),
    ("POST", "/api/v1/environment/export"),
    ("POST", "/api/v1/environment/import"),
    ("POST", "/api/v1/event-type/import/openapi"),
    ("POST", "/api/v1/stats/usage/app"),
    ("PUT", "/api/v1/stats/usage/event-types"),
    ("GET", "/api/v1/stream"),
    ("POST", "/api/v1/stream"),
    ("GET", "/api/v1/stream/event-type"),
    ("POST", "/api/v1/stream/event-type"),
    ("DELETE", "/api/v1/stream/event-type/{name}"),
    ("GET", "/api/v1/stream/event-type/{name}"),
    ("PATCH", "/api/v1/stream/event-type/{name}"),
    ("PUT", "/api/v1/stream/event-type/{name}"),
    ("DELETE", "/api/v1/stream/{stream_id}"),
    ("GET", "/api/v1/stream/{stream_id}"),
    ("PATCH", "/api/v1/stream/{stream_id}"),
    ("PUT", "/api/v1/stream/{stream_id}"),
    ("POST", "/api/v1/stream/{stream_id}/events"),
    ("GET", "/api/v1/stream/{stream_id}/sink"),
    ("POST", "/api/v1/stream/{stream_id}/sink"),
    ("DELETE", "/api/v1/stream/{stream_id}/sink/{sink_id}"),
    ("GET", "/api/v1/stream/{stream_id}/sink/{sink_id}"),
    ("PATCH", "/api/v1/stream/{stream_id}/sink/{sink_id}"),
    ("PUT", "/api/v1/stream/{stream_id}/sink/{sink_id}"),
    ("GET", "/api/v1/stream/{stream_id}/sink/{sink_id}/events"),
    ("GET", "/api/v1/stream/{stream_id}/sink/{sink_id}/headers"),
    ("PATCH", "/api/v1/stream/{stream_id}/sink/{sink_id}/headers"),
    ("GET", "/api/v1/stream/{stream_id}/sink/{sink_id}/secret"),
    ("POST", "/api/v1/stream/{stream_id}/sink/{sink_id}/secret/rotate"),
    ("GET", "/api/v1/stream/{stream_id}/sink/{sink_id}/transformation"),
    (
        "PATCH",
        "/api/v1/stream/{stream_id}/sink/{sink_id}/transformation",
    ),
    ("GET", "/ingest/api/v1/source"),
    ("POST", "/ingest/api/v1/source"),
    ("DELETE", "/ingest/api/v1/source/{source_id}"),
    ("GET", "/ingest/api/v1/source/{source_id}"),
    ("PUT", "/ingest/api/v1/source/{source_id}"),
    ("POST", "/ingest/api/v1/source/{source_id}/dashboard"),
    ("GET", "/ingest/api/v1/source/{source_id}/endpoint"),
    ("POST", "/ingest/api/v1/source/{source_id}/endpoint"),
    (
        "DELETE",
        "/ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}",
    ),
    ("GET", "/ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}"),
    ("PUT", "/ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}"),
    (
        "GET",
        "/ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/headers",
    ),
    (
        "PUT",
        "/ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/headers",
    ),
    (
        "GET",
        "/ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/secret",
    ),
    (
        "POST",
        "/ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/secret/rotate",
    ),
    (
        "GET",
        "/ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/transformation",
    ),
    (
        "PATCH",
        "/ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/transformation",
    ),
    ("POST", "/ingest/api/v1/source/{source_id}/token/rotate"),
];

/// The route of `ROUTES` that `method path` is, if any.
pub fn matching(method: &str, path: &str) -> Option<&'static str> {
    let given: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    ROUTES.iter().find_map(|(m, template)| {
        let want: Vec<&str> = template.split('/').collect();
        let same = m.eq_ignore_ascii_case(method)
            && want.len() == given.len()
            && want.iter().zip(&given).all(|(w, g)| w.starts_with('{') || w == g);
        same.then_some(*template)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_concrete_paths_only_with_their_method() {
        assert_eq!(
            matching("POST", "/api/v1/app/app_1/msg/precheck/active"),
            Some("/api/v1/app/{app_id}/msg/precheck/active")
        );
        assert_eq!(matching("GET", "/api/v1/app/app_1/msg/precheck/active"), None);
        assert_eq!(matching("GET", "/api/v1/app/app_1/msg"), None);
        assert_eq!(
            matching("GET", "/ingest/api/v1/source"),
            Some("/ingest/api/v1/source")
        );
    }
}
