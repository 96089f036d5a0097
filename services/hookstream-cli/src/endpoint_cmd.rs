//! `hookstream endpoint …`: create, list, update, custom headers, enable, disable, rotate
//! the secret (`stats` lives in attempts.rs).
//!
//! Custom headers carry receivers' credentials: the ones that are sensitive (they look like
//! credentials, or were marked so) are never printed, only their names, and no header value
//! is ever written to an error message.

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use hookstream_config::SecretsConfig;
use hookstream_egress::AddressPolicy;
use hookstream_routing::PayloadFilter;
use hookstream_store::endpoint_admin::{self, EndpointPatch};
use hookstream_store::endpoint_headers::{self, EndpointHeaders, HeaderError};
use hookstream_store::sqlx::PgPool;
use hookstream_store::{endpoints, operational};
use uuid::Uuid;

use crate::publish::checked_channels;
use crate::{attempts, payload_arg, secrets};

/// How a sensitive header's value is printed.
const MASK: &str = "********";

#[derive(Subcommand)]
pub(crate) enum EndpointCmd {
    /// Create an endpoint; prints its signing secret once.
    Create(EndpointCreate),
    /// List endpoints (with their channels, whether a payload filter is set, and the names of
    /// their custom headers).
    List {
        /// Tenant id or name.
        #[arg(long, conflicts_with = "operational")]
        tenant: Option<String>,
        /// The operational-webhook endpoints (channel `tenant.<id>`: that tenant's; none:
        /// the operators').
        #[arg(long)]
        operational: bool,
        #[arg(long)]
        json: bool,
    },
    /// Change an endpoint's event types, channels or payload filter; the rest is kept.
    Update(EndpointUpdate),
    /// An endpoint's custom headers: values of the others, `********` for sensitive ones.
    Headers {
        id: Uuid,
        /// `{"headers":{name: value},"sensitive":[name]}` (sensitive values left out).
        #[arg(long)]
        json: bool,
    },
    /// Set, remove or mark an endpoint's custom headers; those not named are kept
    /// (`--replace`: only the given ones remain).
    SetHeaders(SetHeaders),
    /// Per endpoint over a window: attempts, success rate, p50/p95/p99 latency, top error
    /// class and status, state; worst first (from the delivery log).
    Stats(attempts::StatsArgs),
    /// Send the endpoint, once each and paced, the messages of the window it never had an
    /// attempt at and its subscription takes (sent while it was disabled or before it
    /// subscribed), with their own webhook-ids. A background task an API runs.
    ReplayMissing(crate::tasks::Window),
    /// Send the endpoint again, paced, the messages of the window it had attempts at,
    /// optionally only some (by type, channel, tag, latest status). A background task.
    BulkReplay(crate::tasks::BulkReplay),
    /// Replay the endpoint's dead letters of the window (not yet replayed), paced, with their
    /// webhook-ids. A background task.
    Recover(crate::tasks::Window),
    /// Stop delivering to an endpoint.
    Disable { id: Uuid },
    /// Deliver to an endpoint again.
    Enable { id: Uuid },
    /// Start a secret rotation: prints a new secret, which signs from now on; the current
    /// secrets keep signing too until the overlap ends, so receivers can switch over.
    RotateSecret {
        id: Uuid,
        /// Hours the current secrets stay valid beside the new one (at most a year).
        #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(0..=8_760))]
        overlap_hours: u64,
        #[arg(long)]
        json: bool,
    },
}

/// `--header` and `--sensitive-header`.
#[derive(Args)]
pub(crate) struct HeaderFlags {
    /// A custom header every delivery carries, `'Name: value'` (repeatable). Names the
    /// delivery sets itself (`content-type`, `webhook-*`, `host`, …) are refused.
    #[arg(long = "header", value_name = "'NAME: VALUE'")]
    headers: Vec<String>,
    /// Also treat this header as sensitive: its value is never shown (repeatable). Names that
    /// look like credentials (`Authorization`, `*-Key`, `*-Token`, …) are sensitive anyway.
    #[arg(long = "sensitive-header", value_name = "NAME")]
    sensitive: Vec<String>,
}

#[derive(Args)]
pub(crate) struct EndpointCreate {
    /// Tenant id or name (with --operational: the tenant whose operational events it gets).
    #[arg(long, required_unless_present = "operational")]
    tenant: Option<String>,
    /// An operational-webhook endpoint (as the API's /operational-webhook/endpoint): it gets
    /// `endpoint.*` and `message.attempt.*` events about every tenant's endpoints, or with
    /// --tenant about that tenant's only. --event-types narrows them.
    #[arg(long, conflicts_with = "channels")]
    operational: bool,
    #[arg(long)]
    url: String,
    /// Comma-separated filters such as `order.*,user.created`; empty means every type.
    #[arg(long, value_delimiter = ',')]
    event_types: Vec<String>,
    /// A channel to listen on (repeatable, or comma-separated): the endpoint then gets only
    /// events sent to one of its channels. None: every event.
    #[arg(long = "channel", value_name = "NAME", value_delimiter = ',')]
    channels: Vec<String>,
    /// A payload filter (JSON, `@FILE` or `@-`), e.g. `{"amount":{"$gte":10}}`: only events
    /// whose payload passes it are delivered.
    #[arg(long, value_name = "JSON")]
    filter: Option<String>,
    #[command(flatten)]
    headers: HeaderFlags,
    /// Requests per second at most.
    #[arg(long)]
    rate_limit: Option<i32>,
    /// Per-request timeout (100 to 30000 ms).
    #[arg(long)]
    timeout_ms: Option<i32>,
    /// Concurrent requests at most.
    #[arg(long)]
    max_in_flight: Option<i32>,
    #[arg(long, default_value = "")]
    description: String,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub(crate) struct EndpointUpdate {
    id: Uuid,
    /// Listen on these channels instead (repeatable, or comma-separated).
    #[arg(
        long = "channel",
        value_name = "NAME",
        value_delimiter = ',',
        conflicts_with = "no_channels"
    )]
    channels: Vec<String>,
    /// Listen on no channel: get every event.
    #[arg(long)]
    no_channels: bool,
    /// A new payload filter (JSON, `@FILE` or `@-`).
    #[arg(long, value_name = "JSON", conflicts_with = "no_filter")]
    filter: Option<String>,
    /// Remove the payload filter.
    #[arg(long)]
    no_filter: bool,
    /// Comma-separated event-type filters instead (`*`: every type).
    #[arg(long, value_delimiter = ',')]
    event_types: Option<Vec<String>>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub(crate) struct SetHeaders {
    id: Uuid,
    #[command(flatten)]
    headers: HeaderFlags,
    /// Remove this header (repeatable).
    #[arg(long = "remove-header", value_name = "NAME", conflicts_with = "replace")]
    remove: Vec<String>,
    /// Replace every header with the given ones (none given: remove them all).
    #[arg(long)]
    replace: bool,
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(
    cmd: EndpointCmd,
    pool: &PgPool,
    secrets_cfg: &SecretsConfig,
    policy: &AddressPolicy,
) -> anyhow::Result<()> {
    match cmd {
        EndpointCmd::Create(a) => create(a, pool, secrets_cfg, policy).await?,
        EndpointCmd::List {
            tenant,
            operational,
            json,
        } => {
            let tenant = match tenant {
                Some(t) => Some(crate::resolve_tenant(pool, &t).await?),
                None => operational.then_some(operational::OPERATIONAL_TENANT),
            };
            list(pool, tenant, json).await?
        }
        EndpointCmd::Update(a) => update(a, pool, secrets_cfg, policy).await?,
        EndpointCmd::Headers { id, json } => {
            let sealer = secrets::sealer(secrets_cfg)?;
            let mut conn = pool.acquire().await?;
            let headers = endpoint_headers::get(&mut conn, &sealer, id).await?;
            print_headers(&headers, json);
        }
        EndpointCmd::SetHeaders(a) => set_headers(a, pool, secrets_cfg).await?,
        EndpointCmd::Stats(_) => unreachable!("handled in attempts.rs"),
        EndpointCmd::ReplayMissing(_) | EndpointCmd::BulkReplay(_) | EndpointCmd::Recover(_) => {
            unreachable!("handled in tasks.rs")
        }
        EndpointCmd::Disable { id } => {
            endpoints::set_enabled(pool, id, false, Some("disabled by an operator")).await?;
            println!("endpoint {id} disabled");
        }
        EndpointCmd::Enable { id } => {
            endpoints::set_enabled(pool, id, true, None).await?;
            println!("endpoint {id} enabled");
        }
        EndpointCmd::RotateSecret {
            id,
            overlap_hours,
            json,
        } => {
            let sealer = secrets::sealer(secrets_cfg)?;
            let overlap = std::time::Duration::from_secs(overlap_hours * 3600);
            let secret = endpoints::rotate_secret(pool, &sealer, id, overlap).await?;
            if json {
                println!("{}", serde_json::json!({ "id": id, "secret": secret.expose() }));
            } else {
                println!(
                    "new signing secret for endpoint {id} (shown once): {}\nthe previous secrets keep signing for {overlap_hours} h",
                    secret.expose()
                );
            }
        }
    }
    Ok(())
}

async fn create(
    a: EndpointCreate,
    pool: &PgPool,
    secrets_cfg: &SecretsConfig,
    policy: &AddressPolicy,
) -> anyhow::Result<()> {
    let (tenant_id, channels) = if a.operational {
        let unknown = operational::not_operational(&a.event_types);
        if !unknown.is_empty() {
            bail!(
                "--event-types: {unknown:?} are not operational events (one of {:?})",
                operational::EVENT_TYPES
            );
        }
        let scope = match &a.tenant {
            Some(t) => vec![operational::channel_of(crate::resolve_tenant(pool, t).await?)],
            None => Vec::new(),
        };
        if operational::count_on(pool, &scope).await? >= operational::MAX_ENDPOINTS_PER_SCOPE {
            bail!(
                "at most {} operational webhook endpoints per tenant (and for the operators)",
                operational::MAX_ENDPOINTS_PER_SCOPE
            );
        }
        (operational::OPERATIONAL_TENANT, scope)
    } else {
        let tenant = a.tenant.as_deref().context("--tenant is required")?;
        (
            crate::resolve_tenant(pool, tenant).await?,
            checked_channels(&a.channels)?,
        )
    };
    let payload_filter = a.filter.as_deref().map(filter_arg).transpose()?;
    let headers = if a.headers.headers.is_empty() && a.headers.sensitive.is_empty() {
        None
    } else {
        let pairs = parse_headers(&a.headers.headers)?;
        let marked = &a.headers.sensitive;
        Some(
            EndpointHeaders::new(pairs, marked)
                .and_then(|h| marks_named(h, marked))
                .map_err(refused)?,
        )
    };
    let sealer = secrets::sealer(secrets_cfg)?;
    let (ep, secret) = endpoint_admin::create_from(
        pool,
        &sealer,
        policy,
        endpoints::NewEndpoint {
            tenant_id,
            url: a.url,
            description: a.description,
            event_types: a.event_types,
            rate_limit_per_s: a.rate_limit,
            timeout_ms: a.timeout_ms,
            max_in_flight: a.max_in_flight,
            channels,
            payload_filter,
            headers,
        },
    )
    .await?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({ "id": ep.id, "secret": secret.expose() })
        );
    } else {
        println!(
            "endpoint {} created for {}\nsigning secret (shown once): {}",
            ep.id,
            ep.url,
            secret.expose()
        );
    }
    Ok(())
}

async fn list(pool: &PgPool, tenant: Option<Uuid>, json: bool) -> anyhow::Result<()> {
    let all = endpoints::list(pool, tenant).await?;
    if json {
        println!("{}", serde_json::to_string(&all)?);
        return Ok(());
    }
    for e in all {
        let state = if e.enabled {
            match e.failing_since {
                Some(t) => format!("enabled, failing since {}", t.to_rfc3339()),
                None => "enabled".to_string(),
            }
        } else {
            format!(
                "disabled ({})",
                e.disabled_reason.as_deref().unwrap_or("by an operator")
            )
        };
        let rate = e
            .rate_limit_per_s
            .map_or_else(|| "unlimited".to_string(), |r| format!("{r}/s"));
        println!(
            "{}  {}  types={}  channels={}  filter={}  headers={}  rate={}  max_in_flight={}  {}",
            e.id,
            e.url,
            joined_or(&e.event_types, "*"),
            joined_or(&e.channels, "all"),
            if e.payload_filter.is_some() { "yes" } else { "no" },
            joined_or(&e.header_names, "none"),
            rate,
            e.max_in_flight,
            state
        );
    }
    Ok(())
}

fn joined_or(items: &[String], none: &str) -> String {
    if items.is_empty() {
        none.to_string()
    } else {
        items.join(",")
    }
}

async fn update(
    a: EndpointUpdate,
    pool: &PgPool,
    secrets_cfg: &SecretsConfig,
    policy: &AddressPolicy,
) -> anyhow::Result<()> {
    let channels = if a.no_channels {
        Some(Vec::new())
    } else if a.channels.is_empty() {
        None
    } else {
        Some(checked_channels(&a.channels)?)
    };
    let payload_filter = if a.no_filter {
        Some(None)
    } else {
        a.filter.as_deref().map(filter_arg).transpose()?.map(Some)
    };
    if channels.is_none() && payload_filter.is_none() && a.event_types.is_none() {
        bail!("nothing to change: give --channel, --no-channels, --filter, --no-filter or --event-types");
    }
    let patch = EndpointPatch {
        channels,
        payload_filter,
        event_types: a.event_types,
        ..Default::default()
    };
    let tenant = endpoints::get(pool, a.id).await?.tenant_id;
    let sealer = secrets::sealer(secrets_cfg)?;
    let ep = endpoint_admin::patch(pool, &sealer, policy, tenant, a.id, &patch).await?;
    if a.json {
        println!("{}", serde_json::to_string(&ep)?);
    } else {
        println!(
            "endpoint {} updated: types={}  channels={}  filter={}",
            ep.id,
            joined_or(&ep.event_types, "*"),
            joined_or(&ep.channels, "all"),
            ep.payload_filter
                .as_ref()
                .map_or_else(|| "none".to_string(), |f| f.to_string())
        );
    }
    Ok(())
}

async fn set_headers(a: SetHeaders, pool: &PgPool, secrets_cfg: &SecretsConfig) -> anyhow::Result<()> {
    let given = &a.headers;
    if !a.replace && given.headers.is_empty() && given.sensitive.is_empty() && a.remove.is_empty() {
        bail!("nothing to change: give --header, --remove-header, --sensitive-header or --replace");
    }
    let pairs = parse_headers(&given.headers)?;
    let marked = &given.sensitive;
    let sealer = secrets::sealer(secrets_cfg)?;
    let stored = endpoint_headers::update(pool, &sealer, a.id, |now| {
        let next = if a.replace {
            EndpointHeaders::new(pairs, marked)
        } else {
            let set = pairs.into_iter().map(|(n, v)| (n, Some(v)));
            now.patched(set, &a.remove, marked)
        };
        next.and_then(|h| marks_named(h, marked))
    })
    .await?
    .map_err(refused)?;
    print_headers(&stored, a.json);
    Ok(())
}

/// Headers as `headers` shows them: every name, sensitive values masked.
fn print_headers(headers: &EndpointHeaders, json: bool) {
    let (open, sensitive) = headers.shown();
    if json {
        println!(
            "{}",
            serde_json::json!({ "headers": open, "sensitive": sensitive })
        );
        return;
    }
    if headers.headers.is_empty() {
        println!("no custom headers");
    }
    for name in headers.headers.keys() {
        match open.get(name) {
            Some(value) => println!("{name}: {value}"),
            None => println!("{name}: {MASK}  (sensitive)"),
        }
    }
}

/// `'Name: value'` flags as pairs. An error never repeats the flag's text: it may hold a
/// credential.
fn parse_headers(given: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    given
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let Some((name, value)) = text.split_once(':') else {
                bail!("--header #{}: write it as 'Name: value' (no colon found)", i + 1);
            };
            Ok((
                name.trim().to_string(),
                value.trim_matches([' ', '\t']).to_string(),
            ))
        })
        .collect()
}

/// Refuses a `--sensitive-header` that names no header (a typo would leave the intended one
/// unmarked).
fn marks_named(headers: EndpointHeaders, marked: &[String]) -> Result<EndpointHeaders, HeaderError> {
    match marked
        .iter()
        .find(|m| !headers.headers.keys().any(|n| n.eq_ignore_ascii_case(m)))
    {
        Some(m) => Err(HeaderError {
            name: m.clone(),
            reason: "--sensitive-header names no header of this endpoint".into(),
        }),
        None => Ok(headers),
    }
}

fn refused(e: HeaderError) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// A `--filter` value (JSON, `@file`, `@-`), compiled: refused with the filter's own message,
/// which points at the bad part.
fn filter_arg(value: &str) -> anyhow::Result<serde_json::Value> {
    let text = payload_arg::read("--filter", value)?;
    let filter = PayloadFilter::parse(&text).with_context(|| "--filter: invalid payload filter")?;
    Ok(filter.source().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_without_echoing_values() {
        let got = parse_headers(&["Authorization: Bearer x y ".into(), "X-Team:a".into()]).unwrap();
        assert_eq!(
            got,
            vec![
                ("Authorization".to_string(), "Bearer x y".to_string()),
                ("X-Team".to_string(), "a".to_string())
            ]
        );
        let e = parse_headers(&["ok: 1".into(), "Bearer-secret-token".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("#2") && !e.contains("secret"), "{e}");
    }

    #[test]
    fn marks_must_name_a_header_and_filters_point_at_the_bad_part() {
        let hs = EndpointHeaders::new(vec![("X-Plan".into(), "gold".into())], &["x-plan".into()]).unwrap();
        assert!(marks_named(hs.clone(), &["x-plan".into()]).is_ok());
        let e = marks_named(hs, &["X-Plna".into()]).unwrap_err();
        assert_eq!(e.name, "X-Plna");
        let e = filter_arg(r#"{"amount":{"$gtx":1}}"#).unwrap_err();
        let text = format!("{e:#}");
        assert!(
            text.contains("at /amount/$gtx") && text.contains("unknown operator"),
            "{text}"
        );
        assert_eq!(
            filter_arg(r#"{"amount": {"$gte": 10}}"#).unwrap(),
            serde_json::json!({"amount": {"$gte": 10}})
        );
    }
}
