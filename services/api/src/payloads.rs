//! Stored messages' payloads: opened for answers and pages, and sealed in every envelope the
//! API sends (resends, replays of missing messages, examples), so nothing the API produces to
//! Kafka is in clear (`hookstream_store::payload_keys`). A message whose content was erased is
//! shown as `{}` and never sent again.

use std::sync::Arc;

use hookstream_proto::EventEnvelope;
use hookstream_store::messages::{self, Message};
use hookstream_store::payload_keys::Keyring;
use hookstream_store::sealing::Sealer;
use hookstream_store::sqlx::PgPool;

use crate::error::{ApiError, ApiResult};

/// What opening and sealing payloads takes: the database and the master keys.
#[derive(Clone)]
pub(crate) struct Payloads {
    pool: PgPool,
    sealer: Arc<Sealer>,
    keys: Arc<Keyring>,
}

impl Payloads {
    pub(crate) fn new(pool: PgPool, sealer: Arc<Sealer>) -> Self {
        let keys = Arc::new(Keyring::new(pool.clone(), sealer.clone()));
        Self { pool, sealer, keys }
    }

    pub(crate) fn keys(&self) -> &Keyring {
        &self.keys
    }

    /// Opens the sealed copies among `msgs` in place (`{}` for erased ones).
    pub(crate) async fn open(&self, msgs: &mut [Message]) -> ApiResult<()> {
        messages::open_all(&self.keys, msgs).await?;
        Ok(())
    }

    /// The envelope the relay would have shipped for `m`, its payload sealed: the stored
    /// ciphertext as it is, or the stored text sealed now. A 409 when its content was erased.
    pub(crate) async fn envelope(&self, m: &Message) -> ApiResult<EventEnvelope> {
        let erased = || {
            ApiError::Conflict(format!(
                "message {}'s content was erased (expunged, erased with its tenant or subject, or past retention): \
                 it cannot be sent again",
                m.event_id
            ))
        };
        if m.erased {
            return Err(erased());
        }
        let (key, payload) = match (m.payload_key, &m.body_sealed) {
            (Some(key), Some(sealed)) => {
                if self.keys.key(&key.to_string()).await?.is_err() {
                    return Err(erased());
                }
                (key, sealed.clone())
            }
            _ => {
                messages::seal_stored(
                    &self.pool,
                    &self.sealer,
                    m.tenant_id,
                    m.event_id,
                    m.payload.as_bytes(),
                )
                .await?
            }
        };
        Ok(EventEnvelope {
            event_id: m.event_id.to_string(),
            tenant_id: m.tenant_id.to_string(),
            event_type: m.event_type.clone(),
            aggregate_type: m.aggregate_type.clone(),
            aggregate_id: m.aggregate_id.clone(),
            payload: payload.into(),
            payload_key: key.to_string(),
            created_at_ms: m.created_at.timestamp_millis(),
            ..Default::default()
        })
    }
}
