//! `hookstream api-key create|list|revoke|hash-token`: tenant API keys for the admin API
//! (services/api), and the hash of an operator token for `api.operator_token_hashes`.
//!
//! A key is printed once, when it is made; only its SHA-256 is stored, with a visible prefix.

use anyhow::bail;
use clap::{Args, Subcommand};
use hookstream_store::api_keys::{self, KeyKind, NewKey};
use hookstream_store::sqlx::PgPool;
use uuid::Uuid;

#[derive(Subcommand)]
pub enum ApiKeyCmd {
    /// Make a key that sees only one tenant; prints it once.
    Create(CreateArgs),
    /// List keys (never the keys themselves): prefix, name, created, last used, revoked.
    List {
        /// Only this tenant's (id or name).
        #[arg(long)]
        tenant: Option<String>,
        /// Also list app-portal tokens.
        #[arg(long)]
        portal: bool,
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key by its id: it stops working within the API's `api.key_cache_ms`.
    Revoke { id: Uuid },
    /// Print `sha256:<hex>` of an operator token read from stdin, for `api.operator_token_hashes`.
    HashToken,
}

#[derive(Args)]
pub struct CreateArgs {
    /// Tenant id or name.
    #[arg(long)]
    pub tenant: String,
    /// A label for people.
    #[arg(long, default_value = "")]
    pub name: String,
    /// The key may only read (GET).
    #[arg(long)]
    pub read_only: bool,
    /// Expires after this many days (never, by default; at most 36,500).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=36_500))]
    pub expires_in_days: Option<u32>,
    #[arg(long)]
    pub json: bool,
}

pub fn hash_token() -> anyhow::Result<()> {
    let mut token = String::new();
    std::io::stdin().read_line(&mut token)?;
    let token = token.trim_end_matches(['\n', '\r']);
    if token.len() < 16 {
        bail!("an operator token must be at least 16 characters");
    }
    println!("sha256:{}", hex::encode(api_keys::hash(token)));
    Ok(())
}

pub async fn run(cmd: ApiKeyCmd, pool: &PgPool) -> anyhow::Result<()> {
    match cmd {
        ApiKeyCmd::Create(a) => {
            let tenant_id = crate::resolve_tenant(pool, &a.tenant).await?;
            let (key, token) = api_keys::create(
                pool,
                &NewKey {
                    tenant_id,
                    kind: KeyKind::Tenant,
                    name: a.name,
                    read_only: a.read_only,
                    expires_at: a
                        .expires_in_days
                        .map(|d| chrono::Utc::now() + chrono::Duration::days(i64::from(d))),
                    minted_by: None,
                },
            )
            .await?;
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({"id": key.id, "tenant_id": key.tenant_id, "prefix": key.prefix,
                                       "read_only": key.read_only, "expires_at": key.expires_at, "key": token})
                );
            } else {
                println!(
                    "api key {} for tenant {} (shown once, store it now):",
                    key.id, key.tenant_id
                );
                println!("{token}");
            }
        }
        ApiKeyCmd::List { tenant, portal, json } => {
            let tenant = match tenant {
                Some(t) => Some(crate::resolve_tenant(pool, &t).await?),
                None => None,
            };
            let keys = api_keys::list(pool, tenant, portal).await?;
            if json {
                println!("{}", serde_json::to_string(&keys)?);
            } else {
                for k in keys {
                    let state = match (k.revoked_at, k.expires_at) {
                        (Some(at), _) => format!("revoked {at}"),
                        (None, Some(e)) if e <= chrono::Utc::now() => format!("expired {e}"),
                        _ => "active".into(),
                    };
                    let used = k
                        .last_used_at
                        .map_or_else(|| "never used".into(), |t| format!("last used {t}"));
                    println!(
                        "{}  {}…  tenant {}  {}{}  {:?}  created {}  {}  {}",
                        k.id,
                        k.prefix,
                        k.tenant_id,
                        k.kind,
                        if k.read_only { " read-only" } else { "" },
                        k.name,
                        k.created_at,
                        used,
                        state
                    );
                }
            }
        }
        ApiKeyCmd::Revoke { id } => {
            let k = api_keys::revoke(pool, id, None).await?;
            println!("api key {} ({}…) revoked", k.id, k.prefix);
        }
        ApiKeyCmd::HashToken => hash_token()?,
    }
    Ok(())
}
