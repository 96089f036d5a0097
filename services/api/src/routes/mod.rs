//! The routes, each a handler with its `#[utoipa::path]`: the router and the OpenAPI document
//! are built from the same list (`build`), so neither can have a route the other lacks.

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
pub(crate) mod apps;
pub(crate) mod auth;
pub(crate) mod background_tasks;
pub(crate) mod endpoint_headers;
pub(crate) mod event_types;
pub(crate) mod extensions;
pub(crate) mod health;
pub(crate) mod messages;
pub(crate) mod attempts;
pub(crate) mod endpoints;
pub(crate) mod operational_webhooks;

use std::collections::BTreeMap;

use hookstream_store::applications::{self, AppRef};
use hookstream_store::endpoint_admin::{self, EndpointRef, ManagedEndpoint};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, HttpErrorOut, HttpValidationError, ValidationErrorItem};
use crate::models::Metadata;
use crate::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Hookstream API",
        description = "Hookstream's admin API, wire-compatible with Svix's API v1 (paths, fields, pagination, errors) so Svix's SDKs work against it. Differences and extensions: docs/api.md.",
        license(name = "Apache-2.0")
    ),
    modifiers(&Security),
    components(schemas(HttpErrorOut, HttpValidationError, ValidationErrorItem)),
    tags(
        (name = "Application", description = "An application is a Hookstream tenant."),
        (name = "Endpoint", description = "Where an application's messages are delivered."),
        (name = "Message", description = "A message is an event, enqueued through the outbox."),
        (name = "Message Attempt", description = "The delivery log."),
        (name = "Event Type", description = "The event-type catalogue."),
        (name = "Authentication", description = "App-portal tokens."),
        (name = "Health"),
        (name = "Hookstream", description = "Hookstream's extensions: API keys, dead letters."),
    )
)]
struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "HTTPBearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An operator token, a tenant key (hsk_…) or an app-portal token (hsp_…)",
                    ))
                    .build(),
            ),
        );
        doc.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
            "HTTPBearer",
            Vec::<String>::new(),
        )]);
    }
}

/// The error answers every authenticated route may give.
pub struct Errors;

impl utoipa::IntoResponses for Errors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let error = |description: &str, schema: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(utoipa::openapi::Ref::from_schema_name(schema)))
                            .build(),
                    )
                    .build(),
            )
        };
        [
            ("400", error("The body is not JSON", "HttpErrorOut")),
            ("401", error("Missing or invalid credentials", "HttpErrorOut")),
            ("403", error("The credentials may not do this", "HttpErrorOut")),
            ("404", error("Not found (or another tenant's)", "HttpErrorOut")),
            (
                "409",
                error("Conflicts with an existing resource", "HttpErrorOut"),
            ),
            ("413", error("The body is over the limit", "HttpErrorOut")),
            ("422", error("A field's value is refused", "HTTPValidationError")),
            (
                "429",
                error("Over the key's rate: see Retry-After", "HttpErrorOut"),
            ),
        ]
        .into_iter()
        .map(|(code, r)| (code.to_string(), r))
        .collect()
    }
}

pub fn build() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(apps::list, apps::create))
        .routes(routes!(apps::get, apps::update, apps::patch, apps::delete))
        .routes(routes!(endpoints::list, endpoints::create))
        .routes(routes!(
            endpoints::get,
            endpoints::update,
            endpoints::patch,
            endpoints::delete
        ))
        .routes(routes!(endpoints::get_secret))
        .routes(routes!(endpoints::rotate_secret))
        .routes(routes!(background_tasks::recover))
        .routes(routes!(background_tasks::replay_missing))
        .routes(routes!(background_tasks::bulk_replay))
        .routes(routes!(background_tasks::list))
        .routes(routes!(background_tasks::get))
        .routes(routes!(endpoints::stats))
        .routes(routes!(endpoints::send_example))
        .routes(routes!(
            endpoint_headers::get_headers,
            endpoint_headers::update_headers,
            endpoint_headers::patch_headers
        ))
        .routes(routes!(messages::list, messages::create))
        .routes(routes!(messages::get))
        .routes(routes!(messages::expunge_content))
        .routes(routes!(messages::expunge_all_contents))
        .routes(routes!(attempts::list_by_endpoint))
        .routes(routes!(attempts::list_by_msg))
        .routes(routes!(attempts::get))
        .routes(routes!(attempts::expunge_content))
        .routes(routes!(attempts::list_attempted_messages))
        .routes(routes!(attempts::list_attempted_destinations))
        .routes(routes!(attempts::resend))
        .routes(routes!(event_types::list, event_types::create))
        .routes(routes!(
            event_types::get,
            event_types::update,
            event_types::patch,
            event_types::delete
        ))
        .routes(routes!(auth::app_portal_access))
        .routes(routes!(auth::logout))
        .routes(routes!(auth::expire_all))
        .routes(routes!(health::health))
        .routes(routes!(health::ping))
        .routes(routes!(operational_webhooks::list, operational_webhooks::create))
        .routes(routes!(
            operational_webhooks::get,
            operational_webhooks::update,
            operational_webhooks::delete
        ))
        .routes(routes!(operational_webhooks::get_secret))
        .routes(routes!(operational_webhooks::rotate_secret))
        .routes(routes!(
            operational_webhooks::get_headers,
            operational_webhooks::update_headers
        ))
        .routes(routes!(extensions::list_keys, extensions::create_key))
        .routes(routes!(extensions::revoke_key))
        .routes(routes!(extensions::list_dead_letters))
        .routes(routes!(extensions::replay_dead_letters))
}

// ---- helpers every route module uses ----

/// The tenant an application path segment names, within what `who` may see: another tenant's
/// application is not found, exactly like one that does not exist.
pub(crate) async fn tenant_of(state: &AppState, who: &Principal, app_id: &str) -> ApiResult<Uuid> {
    applications::resolve(&state.pool, &AppRef::parse(app_id), who.scope())
        .await?
        .ok_or_else(|| ApiError::not_found("application"))
}

/// One of `tenant`'s endpoints, by id or uid.
pub(crate) async fn endpoint_of(
    state: &AppState,
    tenant: Uuid,
    endpoint_id: &str,
) -> ApiResult<ManagedEndpoint> {
    endpoint_admin::find(&state.pool, tenant, &EndpointRef::parse(endpoint_id))
        .await?
        .ok_or_else(|| ApiError::not_found("endpoint"))
}

/// A uid: 1 to 256 of letters, digits, `-`, `_`, `.`, and not UUID-shaped (paths take ids and
/// uids alike).
pub(crate) fn check_uid(uid: &str, field: &str) -> ApiResult<()> {
    let ok = (1..=256).contains(&uid.len())
        && uid
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !ok {
        return Err(ApiError::body(
            field,
            "must be 1 to 256 letters, digits, '-', '_' or '.'",
        ));
    }
    if Uuid::parse_str(uid).is_ok() {
        return Err(ApiError::body(field, "must not look like a UUID (ids are UUIDs)"));
    }
    Ok(())
}

/// Svix metadata (strings) as stored (a JSON object).
pub(crate) fn metadata_json(m: Option<Metadata>) -> serde_json::Value {
    serde_json::to_value(m.unwrap_or_default()).unwrap_or_else(|_| serde_json::json!({}))
}

pub(crate) fn metadata_of(v: &serde_json::Value) -> Metadata {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Refuses a Svix field Hookstream does not support, when it is set to something.
pub(crate) fn refuse_set(v: &Option<serde_json::Value>, field: &str, what: &str) -> ApiResult<()> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(()),
        Some(serde_json::Value::Array(a)) if a.is_empty() => Ok(()),
        Some(serde_json::Value::Object(o)) if o.is_empty() => Ok(()),
        Some(_) => Err(ApiError::unsupported(field, what)),
    }
}

/// With `api.enforce_event_types`, refuses names not in the catalogue (or archived).
pub(crate) async fn check_catalogue(state: &AppState, names: &[String], field: &str) -> ApiResult<()> {
    if !state.cfg.enforce_event_types {
        return Ok(());
    }
    let exact: Vec<String> = names.iter().filter(|n| !n.contains('*')).cloned().collect();
    if exact.is_empty() {
        return Ok(());
    }
    let known = hookstream_store::event_types::active_among(&state.pool, &exact).await?;
    let unknown: Vec<&String> = exact.iter().filter(|n| !known.contains(n)).collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(ApiError::body(
            field,
            format!("unknown or archived event type(s) {unknown:?}: the catalogue is enforced"),
        ))
    }
}
