//! The admin REST API: applications (tenants), endpoints, messages (events enqueued through
//! `hookstream.enqueue`: the API is one more producer), the delivery log, event types, and
//! Hookstream's extensions, on Svix's API v1 paths, field names, pagination and error bodies,
//! so Svix's SDKs work against it unchanged (`docs/api.md` lists what differs).
//!
//! `run` serves it until shutdown. Requests are authenticated and scoped to a tenant
//! (`auth.rs`); message creates are written in groups (`writer.rs`); the OpenAPI document is
//! generated from the handlers (`routes/`, utoipa) and served at `/api/v1/openapi.json`; the
//! message store's day partitions are kept by a maintenance task (`maintenance.rs`). The
//! tenant portal (`portal/`) is served under `/portal`. Every long-running task is supervised.

#![forbid(unsafe_code)]

// Modules bottom-up: each uses only those declared above it (scripts/check/module_order.py).
mod app_cache;
pub mod config;
pub mod error;
mod extract;
mod maintenance;
pub mod metrics;
mod failed_auth;
pub mod auth;
pub mod models;
pub mod page;
mod payloads;
mod background;
mod routes;
pub mod portal;
pub mod unimplemented;
mod writer;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hookstream_egress::AddressPolicy;
use hookstream_replay::Replayer;
use hookstream_store::sealing::Sealer;
use hookstream_store::sqlx::PgPool;
use hookstream_store::StoreError;
use hookstream_telemetry::prometheus::Registry;
use hookstream_telemetry::{Health, ServiceError, Supervisor, TaskFailed};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::Layer as _;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::CorsLayer;
use tower_http::normalize_path::NormalizePathLayer;

pub use config::{ApiSettings, Config};

use crate::auth::Authenticator;
use crate::error::ApiError;
use crate::extract::BodyLimit;
use crate::metrics::ApiMetrics;
use crate::writer::MessageWriter;

#[derive(Debug, thiserror::Error)]
pub enum ApiServiceError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("http server: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    TaskFailed(#[from] TaskFailed),
}

impl ServiceError for ApiServiceError {
    fn exit_code(&self) -> u8 {
        match self {
            ApiServiceError::Config(_) => 2,
            _ => 1,
        }
    }
}

/// How long stopping waits for the database connections to close.
const POOL_CLOSE_WAIT: Duration = Duration::from_secs(5);

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub(crate) pool: PgPool,
    pub(crate) sealer: Arc<Sealer>,
    /// Opens stored payloads and seals what the API sends.
    pub(crate) payloads: payloads::Payloads,
    pub(crate) policy: AddressPolicy,
    pub(crate) cfg: Arc<ApiSettings>,
    pub(crate) auth: Arc<Authenticator>,
    pub(crate) metrics: ApiMetrics,
    pub(crate) writer: MessageWriter,
    /// Applications resolved for message creates.
    pub(crate) apps: Arc<app_cache::AppCache>,
    /// None when retries are off: resends and recoveries cannot be delivered.
    pub(crate) replayer: Option<Arc<Replayer>>,
    /// The tenant portal's per-session request rates.
    pub(crate) portal: Arc<portal::PortalState>,
    /// A request's whole budget (`api.request_timeout_ms`, resolved).
    pub(crate) request_deadline: Duration,
}

/// Binds `cfg.api.listen` (for `main`; tests bind port 0 themselves).
pub async fn bind(cfg: &Config) -> std::io::Result<TcpListener> {
    TcpListener::bind(&cfg.api.listen).await
}

/// Serves the API on `listener` until `shutdown` is cancelled (then finishes the requests in
/// flight and stops the background tasks at their next message, giving their leases up), or one of its
/// tasks stops unexpectedly (then it drains and returns the failure).
pub async fn run(
    cfg: Config,
    listener: TcpListener,
    registry: &Registry,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), ApiServiceError> {
    let sealer = Sealer::from_config(&cfg.secrets).map_err(|e| ApiServiceError::Config(e.to_string()))?;
    let policy = AddressPolicy::new(cfg.delivery.allow_cidrs.clone());
    let pool = hookstream_store::connect(&cfg.database).await?;
    if cfg.database.migrate_on_start {
        hookstream_store::migrate(&pool).await?;
    }
    let payload_limit: i32 =
        hookstream_store::sqlx::query_scalar("SELECT max_payload_bytes FROM hookstream.settings")
            .fetch_one(&pool)
            .await
            .map_err(StoreError::from)?;
    let payload_limit = payload_limit.max(0) as usize;
    let body_limit = match cfg.api.max_body_bytes {
        0 => payload_limit + 64 * 1024,
        n => n,
    };
    let replayer = match Replayer::new(pool.clone(), &cfg.kafka, &cfg.retry) {
        Ok(r) => Some(Arc::new(r)),
        Err(e) => {
            tracing::warn!(error = %e, "resends and recoveries are off");
            None
        }
    };
    let metrics = ApiMetrics::register(registry);
    let auth = Arc::new(Authenticator::new(
        &cfg.api,
        pool.clone(),
        metrics.clone(),
        cfg.database.answer_deadline(),
    ));
    let (writer, writer_tasks) = MessageWriter::new(
        pool.clone(),
        cfg.api.message_writers,
        cfg.api.message_batch_rows,
        cfg.database.answer_deadline(),
        metrics.clone(),
    );
    let grace = Duration::from_millis(cfg.api.shutdown_grace_ms);
    let sealer = Arc::new(sealer);
    let payloads = payloads::Payloads::new(pool.clone(), sealer.clone());
    let state = AppState {
        pool: pool.clone(),
        sealer,
        payloads: payloads.clone(),
        policy,
        cfg: Arc::new(cfg.api.clone()),
        auth: auth.clone(),
        metrics,
        writer,
        apps: Arc::new(app_cache::AppCache::new(Duration::from_millis(
            cfg.api.key_cache_ms,
        ))),
        replayer,
        portal: Arc::new(portal::PortalState::new(&cfg.api)),
        request_deadline: match cfg.api.request_timeout_ms {
            0 => cfg.database.answer_deadline(),
            ms => Duration::from_millis(ms),
        },
    };

    let mut supervisor = Supervisor::new(health.clone(), shutdown.clone(), grace * 2);
    for task in writer_tasks {
        supervisor.spawn("message writer", async move {
            task.await;
            Ok::<(), Infallible>(())
        });
    }
    supervisor.spawn(
        "key usage",
        auth::flush_loop(auth, Duration::from_secs(5), shutdown.clone()),
    );
    supervisor.spawn(
        "message partitions",
        maintenance::run(
            pool.clone(),
            cfg.api.clone(),
            cfg.database.answer_deadline(),
            shutdown.clone(),
        ),
    );
    supervisor.spawn(
        "background tasks",
        background::Runner {
            pool: pool.clone(),
            replayer: state.replayer.clone(),
            cfg: state.cfg.clone(),
            payloads: payloads.clone(),
        }
        .run(shutdown.clone()),
    );
    let app = router(state, body_limit, &cfg.api)?;
    let stop = shutdown.clone();
    let addr = listener.local_addr()?;
    supervisor.spawn("http", async move {
        let app = NormalizePathLayer::trim_trailing_slash().layer(app);
        axum::serve(
            listener,
            axum::ServiceExt::<Request>::into_make_service_with_connect_info::<std::net::SocketAddr>(app),
        )
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await?;
        Ok::<(), std::io::Error>(())
    });
    tracing::info!(listen = %addr, "api listening");
    health.set_ready(true);
    supervisor.wait().await?;
    // Closing says goodbye on each connection, which waits on a server gone dark.
    if tokio::time::timeout(POOL_CLOSE_WAIT, pool.close()).await.is_err() {
        tracing::warn!(
            wait = ?POOL_CLOSE_WAIT,
            "the database did not answer the pool's goodbyes; leaving without them"
        );
    }
    Ok(())
}

/// The router with its OpenAPI document, the fallbacks and the layers.
pub fn router(state: AppState, body_limit: usize, cfg: &ApiSettings) -> Result<Router, ApiServiceError> {
    let (api, doc) = routes::build().split_for_parts();
    let doc = Arc::new(doc);
    let mut router = api
        .route(
            "/api/v1/openapi.json",
            axum::routing::get(move || {
                let doc = doc.clone();
                async move { axum::Json(doc.as_ref().clone()) }
            }),
        )
        .merge(portal::router(state.clone()))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // A handler that panics (a defect: bad input must be a 4xx) answers a logged 500,
        // counted by `track`, instead of dropping the connection.
        .layer(CatchPanicLayer::custom(panicked))
        // Inside the security headers and the metrics: a request given up is answered like
        // any other 503.
        .layer(axum::middleware::from_fn_with_state(state.clone(), deadline))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            portal::security_headers,
        ))
        .layer(axum::middleware::from_fn_with_state(state.clone(), track))
        .layer(axum::Extension(BodyLimit(body_limit)))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state);
    if !cfg.cors_allowed_origins.is_empty() {
        let origins: Vec<HeaderValue> = cfg
            .cors_allowed_origins
            .iter()
            .map(|o| {
                o.parse()
                    .map_err(|_| ApiServiceError::Config(format!("bad origin {o:?}")))
            })
            .collect::<Result<_, _>>()?;
        router = router.layer(
            CorsLayer::new()
                .allow_origin(origins)
                .allow_methods([
                    Method::GET,
                    Method::POST,
                    Method::PUT,
                    Method::PATCH,
                    Method::DELETE,
                ])
                .allow_headers([
                    axum::http::header::AUTHORIZATION,
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderName::from_static("idempotency-key"),
                ]),
        );
    }
    Ok(router)
}

/// The OpenAPI document the code generates (what `/api/v1/openapi.json` serves).
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes::build().split_for_parts().1
}

async fn not_found(method: Method, uri: axum::http::Uri) -> ApiError {
    match unimplemented::matching(method.as_str(), uri.path()) {
        Some(route) => ApiError::NotFound(format!(
            "{method} {route} is a Svix route Hookstream does not implement (docs/api.md lists them)"
        )),
        None => ApiError::NotFound(format!("no route {method} {}", uri.path())),
    }
}

async fn method_not_allowed(method: Method, uri: axum::http::Uri) -> Response {
    // `POST …/msg/bulk-expunge` has the shape of `GET …/msg/{msg_id}`: a Svix route not
    // implemented is a 404 saying so, not a 405.
    if unimplemented::matching(method.as_str(), uri.path()).is_some() {
        return not_found(method, uri).await.into_response();
    }
    let mut r = ApiError::NotFound(format!("no route {method} {}", uri.path())).into_response();
    *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    r
}

/// Counts and times every request by its route template.
/// The answer to a request whose handler panicked: the panic is logged, the caller gets the
/// generic internal error.
fn panicked(cause: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = cause
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| cause.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    ApiError::Internal(format!("a request handler panicked: {what}")).into_response()
}

/// Answers 503 to a request not answered within `request_deadline`, and gives its work up
/// (`hookstream_store::within`: a pooled connection it held is checked on its way back to the
/// pool).
async fn deadline(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let limit = state.request_deadline;
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    match hookstream_store::within(limit, next.run(req)).await {
        Some(response) => response,
        None => {
            tracing::warn!(%route, ?limit, "request not answered in time; given up");
            ApiError::Unavailable(format!(
                "the request was not answered within {} s (is the database reachable?)",
                limit.as_secs_f64()
            ))
            .into_response()
        }
    }
}

async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().clone();
    let start = std::time::Instant::now();
    let response = next.run(req).await;
    let class = match response.status().as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    let method = match method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => "OTHER",
    };
    state
        .metrics
        .requests
        .with_label_values(&[route.as_str(), method, class])
        .inc();
    state
        .metrics
        .duration
        .with_label_values(&[route.as_str()])
        .observe(start.elapsed().as_secs_f64());
    response
}
