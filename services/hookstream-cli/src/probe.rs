//! `hookstream probe URL`: an HTTP health check for images with no shell or HTTP client (the
//! distroless one), for Docker `HEALTHCHECK`s and Compose `healthcheck`s. GETs the URL and
//! succeeds on a 2xx answer; anything else (another status, a redirect, no answer in time)
//! fails. Needs no configuration.

use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;

#[derive(Args)]
pub struct ProbeArgs {
    /// What to GET, e.g. http://127.0.0.1:9100/readyz.
    url: url::Url,
    /// Give up after this long: connecting, sending and reading the status.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
}

pub async fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(args.timeout_ms))
        // A redirect is not health, and a probe of a local port goes through no proxy.
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .context("building the HTTP client")?;
    let url = args.url.as_str();
    let response = match client.get(args.url.clone()).send().await {
        Ok(response) => response,
        Err(e) if e.is_timeout() => bail!("probe {url}: no answer within {} ms", args.timeout_ms),
        Err(e) => {
            // reqwest's outer messages repeat the URL; the innermost cause says what happened.
            let mut cause: &dyn std::error::Error = &e;
            while let Some(inner) = cause.source() {
                cause = inner;
            }
            let what = if e.is_connect() {
                "cannot connect"
            } else {
                "request failed"
            };
            bail!("probe {url}: {what}: {cause}")
        }
    };
    let status = response.status();
    if !status.is_success() {
        bail!("probe {url}: {status}");
    }
    println!("probe {url}: {status}");
    Ok(())
}
