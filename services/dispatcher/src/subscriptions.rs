//! Which endpoints want which events: an in-memory snapshot of every tenant and every enabled
//! endpoint, refreshed on change (LISTEN/NOTIFY), periodically, and on demand when an event
//! names a tenant the snapshot does not know yet (it may have been created a moment ago).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hookstream_store::endpoints::{self, ActiveEndpoint};
use hookstream_store::sealing::Sealer;
use hookstream_store::sqlx::PgPool;
use hookstream_store::wakeup::Wakeup;
use hookstream_store::StoreError;
use tokio::sync::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Channel the schema's triggers notify when tenants, endpoints or secrets change.
pub const NOTIFY_CHANNEL: &str = "hookstream_subscriptions";

#[derive(Default)]
struct Snapshot {
    tenants: HashSet<Uuid>,
    by_tenant: HashMap<Uuid, Vec<Arc<ActiveEndpoint>>>,
}

/// Where an event goes.
pub enum Route {
    UnknownTenant,
    /// The matching endpoints; empty when nobody subscribes to this type.
    Endpoints(Vec<Arc<ActiveEndpoint>>),
}

pub struct Subscriptions {
    pool: PgPool,
    sealer: Sealer,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Serialises refreshes and remembers when the last one finished.
    refreshed: Mutex<Instant>,
}

impl Subscriptions {
    pub async fn load(pool: PgPool, sealer: Sealer) -> Result<Arc<Self>, StoreError> {
        let subs = Arc::new(Self {
            pool,
            sealer,
            snapshot: RwLock::new(Arc::default()),
            refreshed: Mutex::new(Instant::now()),
        });
        subs.refresh().await?;
        Ok(subs)
    }

    pub async fn refresh(&self) -> Result<(), StoreError> {
        let mut refreshed = self.refreshed.lock().await;
        let (tenants, active) = endpoints::load_active(&self.pool, &self.sealer).await?;
        let mut by_tenant: HashMap<Uuid, Vec<Arc<ActiveEndpoint>>> = HashMap::new();
        for ep in active {
            by_tenant
                .entry(ep.endpoint.tenant_id)
                .or_default()
                .push(Arc::new(ep));
        }
        *self.snapshot.write().await = Arc::new(Snapshot {
            tenants: tenants.into_iter().collect(),
            by_tenant,
        });
        *refreshed = Instant::now();
        Ok(())
    }

    /// Refreshes unless another refresh finished within `min_age` (coalesces bursts).
    async fn refresh_if_older_than(&self, min_age: Duration) -> Result<(), StoreError> {
        if self.refreshed.lock().await.elapsed() < min_age {
            return Ok(());
        }
        self.refresh().await
    }

    pub async fn route(&self, tenant: Uuid, event_type: &str) -> Result<Route, StoreError> {
        if !self.snapshot.read().await.tenants.contains(&tenant) {
            self.refresh_if_older_than(Duration::from_millis(200)).await?;
        }
        let snap = self.snapshot.read().await.clone();
        if !snap.tenants.contains(&tenant) {
            return Ok(Route::UnknownTenant);
        }
        let endpoints = snap
            .by_tenant
            .get(&tenant)
            .map(|eps| {
                eps.iter()
                    .filter(|e| e.filter.matches(event_type))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Ok(Route::Endpoints(endpoints))
    }

    /// An enabled endpoint by id (the retry path), refreshing once if it is not known yet.
    pub async fn endpoint(&self, id: Uuid) -> Option<Arc<ActiveEndpoint>> {
        let find = |snap: &Snapshot| {
            snap.by_tenant
                .values()
                .flatten()
                .find(|e| e.endpoint.id == id)
                .cloned()
        };
        if let Some(ep) = find(&*self.snapshot.read().await) {
            return Some(ep);
        }
        let _ = self.refresh_if_older_than(Duration::from_millis(200)).await;
        find(&*self.snapshot.read().await)
    }

    /// Keeps the snapshot fresh until `shutdown`.
    pub async fn watch(self: Arc<Self>, every: Duration, shutdown: CancellationToken) {
        let mut wakeup = Wakeup::new(self.pool.clone(), NOTIFY_CHANNEL);
        loop {
            tokio::select! {
                _ = wakeup.wait(every) => {}
                _ = shutdown.cancelled() => return,
            }
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "subscription refresh failed, keeping the last snapshot");
            }
        }
    }
}
