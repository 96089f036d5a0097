//! `hookstream listen`: a receiver for developers. Verifies every delivery's Standard
//! Webhooks signature and prints it, one line per delivery (or JSON lines with `--json`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Router;
use clap::Args;
use hookstream_signing::{
    verify, Secret, DEFAULT_TOLERANCE_SECS, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP,
};

#[derive(Args)]
pub struct ListenArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    addr: SocketAddr,
    /// The endpoint's signing secret (`whsec_...`).
    #[arg(long, env = "HOOKSTREAM_LISTEN_SECRET")]
    secret: String,
    /// Print one JSON object per delivery.
    #[arg(long)]
    json: bool,
}

struct Listener {
    secret: Secret,
    json: bool,
}

pub async fn run(args: ListenArgs) -> anyhow::Result<()> {
    let secret = Secret::parse(&args.secret).map_err(|e| anyhow::anyhow!("--secret: {e}"))?;
    let state = Arc::new(Listener {
        secret,
        json: args.json,
    });
    let app = Router::new().fallback(receive).with_state(state);
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.addr))?;
    eprintln!(
        "listening on http://{} (signatures verified with the given secret)",
        listener.local_addr()?
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

async fn receive(State(state): State<Arc<Listener>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (id, ts, sig) = (get(HEADER_ID), get(HEADER_TIMESTAMP), get(HEADER_SIGNATURE));
    let event_type = get("hookstream-event-type");
    let now = chrono::Utc::now().timestamp();
    let result = verify(&state.secret, &id, &ts, &sig, &body, now, DEFAULT_TOLERANCE_SECS);
    let body_text = String::from_utf8_lossy(&body);
    if state.json {
        let line = serde_json::json!({
            "webhook_id": id,
            "event_type": event_type,
            "verified": result.is_ok(),
            "error": result.as_ref().err().map(|e| e.to_string()),
            "body": serde_json::from_slice::<serde_json::Value>(&body).unwrap_or(serde_json::Value::Null),
        });
        println!("{line}");
    } else {
        match &result {
            Ok(()) => println!("verified  {id}  {event_type}  {body_text}"),
            Err(e) => println!("REJECTED  {id}  {event_type}  signature: {e}"),
        }
    }
    match result {
        Ok(()) => StatusCode::NO_CONTENT,
        Err(_) => StatusCode::UNAUTHORIZED,
    }
}
