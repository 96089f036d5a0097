//! `hookstream secrets …` and the key that seals endpoint secrets for the CLI.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Subcommand;
use hookstream_config::SecretsConfig;
use hookstream_store::endpoints;
use hookstream_store::sealing::Sealer;
use hookstream_store::sqlx::PgPool;

#[derive(Subcommand)]
pub enum SecretsCmd {
    /// Print a new random key for `secrets.key` (`<id>:<64 hex digits>`).
    GenerateKey {
        /// The key's id, stored beside every secret it seals.
        #[arg(long, default_value = "k1")]
        id: String,
    },
    /// Seal every endpoint secret with the current key: plaintext rows written before
    /// sealing existed, and rows sealed with a previous key (after a key rotation); and re-seal
    /// every payload data key with it.
    Seal,
}

/// The sealer from the configuration or, when none is configured, from the local stack's
/// key file (`$HOOKSTREAM_STATE_DIR/secrets.key`, by default `.hookstream/secrets.key`),
/// which `make up` creates.
pub fn sealer(cfg: &SecretsConfig) -> anyhow::Result<Sealer> {
    let mut cfg = cfg.clone();
    if cfg.key.is_empty() && cfg.key_file.is_none() {
        let dir = std::env::var("HOOKSTREAM_STATE_DIR").unwrap_or_else(|_| ".hookstream".into());
        let local = PathBuf::from(dir).join("secrets.key");
        if local.exists() {
            cfg.key_file = Some(local);
        }
    }
    Ok(Sealer::from_config(&cfg)?)
}

pub fn generate_key(id: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !id.is_empty() && !id.contains(':') && !id.contains(char::is_whitespace),
        "--id must be non-empty, without ':' or spaces"
    );
    println!("{}", Sealer::generate_key(id));
    Ok(())
}

pub async fn seal(pool: &PgPool, cfg: &SecretsConfig) -> anyhow::Result<()> {
    let sealer = sealer(cfg)?;
    let done = endpoints::reseal(pool, &sealer)
        .await
        .context("sealing endpoint secrets and urls")?;
    println!(
        "{} endpoint secret(s) and {} endpoint url(s) sealed with key {}",
        done.secrets,
        done.urls,
        sealer.active_key_id()
    );
    let keys = hookstream_store::payload_keys::reseal(pool, &sealer)
        .await
        .context("re-sealing payload data keys")?;
    let left = hookstream_store::payload_keys::sealed_with_other_keys(pool, sealer.active_key_id()).await?;
    println!(
        "{keys} payload data key(s) re-sealed with key {}; {left} left on other keys",
        sealer.active_key_id()
    );
    Ok(())
}
