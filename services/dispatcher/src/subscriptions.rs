//! Which endpoints want which events: an in-memory snapshot of every tenant and every enabled
//! endpoint, at a subscription version (`hookstream_store::subscriptions`).
//!
//! The snapshot is refreshed incrementally (only what changed since its version) on NOTIFY,
//! on a fallback timer, when a secret expires, and on demand: an event stamped with a newer
//! version than the snapshot's (an endpoint created just before it) waits for a refresh, so
//! it is never routed without an endpoint whose creation committed before the event did.
//! Concurrent refreshes are coalesced: one reads the database, the others use its result.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use hookstream_routing::Candidate;
use hookstream_store::endpoints::ActiveEndpoint;
use hookstream_store::sealing::Sealer;
use hookstream_store::sqlx::PgPool;
use hookstream_store::subscriptions::{self, Delta, View};
use hookstream_store::wakeup::Wakeup;
use hookstream_store::{answered, StoreError};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::metrics::DispatcherMetrics;
use crate::work::now_ms;

/// Channel the schema's triggers notify when tenants, endpoints or secrets change.
pub const NOTIFY_CHANNEL: &str = "hookstream_subscriptions";
/// How long the change log is kept (a dispatcher further behind reloads everything).
const KEEP_CHANGES: chrono::Duration = chrono::Duration::days(1);
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

#[derive(Default, Clone)]
struct Snapshot {
    version: i64,
    tenants: HashSet<Uuid>,
    by_tenant: HashMap<Uuid, Arc<Vec<Arc<ActiveEndpoint>>>>,
    by_id: HashMap<Uuid, Arc<ActiveEndpoint>>,
    /// When the first signing secret of any endpoint expires (it is reloaded then).
    next_expiry_ms: Option<i64>,
}

impl Snapshot {
    fn from_view(view: View) -> Self {
        let mut snap = Snapshot {
            version: view.version,
            tenants: view.tenants.into_iter().collect(),
            ..Default::default()
        };
        let mut by_tenant: HashMap<Uuid, Vec<Arc<ActiveEndpoint>>> = HashMap::new();
        for ep in view.endpoints {
            let ep = Arc::new(ep);
            by_tenant
                .entry(ep.endpoint.tenant_id)
                .or_default()
                .push(ep.clone());
            snap.by_id.insert(ep.endpoint.id, ep);
        }
        snap.by_tenant = by_tenant.into_iter().map(|(t, v)| (t, Arc::new(v))).collect();
        snap.next_expiry_ms = next_expiry(&snap.by_id);
        snap
    }

    /// A copy with `delta` applied.
    fn apply(&self, delta: Delta) -> Self {
        let mut snap = self.clone();
        snap.version = delta.version;
        for (tenant, exists) in delta.tenants {
            if exists {
                snap.tenants.insert(tenant);
            } else {
                snap.tenants.remove(&tenant);
                if let Some(eps) = snap.by_tenant.remove(&tenant) {
                    for ep in eps.iter() {
                        snap.by_id.remove(&ep.endpoint.id);
                    }
                }
            }
        }
        let changed: HashSet<Uuid> = delta.endpoints.iter().map(|(id, _)| *id).collect();
        let mut touched: HashSet<Uuid> = HashSet::new();
        let mut added: HashMap<Uuid, Vec<Arc<ActiveEndpoint>>> = HashMap::new();
        for (id, now) in delta.endpoints {
            if let Some(old) = snap.by_id.remove(&id) {
                touched.insert(old.endpoint.tenant_id);
            }
            if let Some(ep) = now {
                let ep = Arc::new(ep);
                touched.insert(ep.endpoint.tenant_id);
                added.entry(ep.endpoint.tenant_id).or_default().push(ep.clone());
                snap.by_id.insert(id, ep);
            }
        }
        for tenant in touched {
            let mut eps: Vec<Arc<ActiveEndpoint>> = snap
                .by_tenant
                .get(&tenant)
                .map(|v| {
                    v.iter()
                        .filter(|e| !changed.contains(&e.endpoint.id))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            eps.extend(added.remove(&tenant).unwrap_or_default());
            if eps.is_empty() {
                snap.by_tenant.remove(&tenant);
            } else {
                snap.by_tenant.insert(tenant, Arc::new(eps));
            }
        }
        snap.next_expiry_ms = next_expiry(&snap.by_id);
        snap
    }
}

fn next_expiry(by_id: &HashMap<Uuid, Arc<ActiveEndpoint>>) -> Option<i64> {
    by_id.values().filter_map(|e| e.secrets_expire_at_ms).min()
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
    metrics: DispatcherMetrics,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Serialises refreshes and remembers when the last one finished.
    refreshing: Mutex<Instant>,
    /// How long a refresh waits for the database (`DatabaseConfig::answer_deadline`). A
    /// refresh holds `refreshing`, and an event newer than the snapshot waits for one: a
    /// query on a connection gone dark must not hold them for ever.
    deadline: Duration,
}

impl Subscriptions {
    /// Loads everything once.
    pub async fn load(
        pool: PgPool,
        sealer: Sealer,
        metrics: DispatcherMetrics,
        deadline: Duration,
    ) -> Result<Arc<Self>, StoreError> {
        let view = subscriptions::load_all(&pool, &sealer).await?;
        let snap = Snapshot::from_view(view);
        metrics.subscription_version.set(snap.version);
        metrics.subscription_refreshes.with_label_values(&["full"]).inc();
        Ok(Arc::new(Self {
            pool,
            sealer,
            metrics,
            snapshot: RwLock::new(Arc::new(snap)),
            refreshing: Mutex::new(Instant::now()),
            deadline,
        }))
    }

    fn current(&self) -> Arc<Snapshot> {
        self.snapshot.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The snapshot's subscription version.
    pub fn version(&self) -> i64 {
        self.current().version
    }

    /// Brings the snapshot up to the database's current version.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let mut last = self.refreshing.lock().await;
        self.refresh_locked(&mut last).await
    }

    async fn refresh_locked(&self, last: &mut Instant) -> Result<(), StoreError> {
        let snap = self.current();
        let now = now_ms();
        let expired: Vec<Uuid> = snap
            .by_id
            .values()
            .filter(|e| e.secrets_expire_at_ms.is_some_and(|t| t <= now))
            .map(|e| e.endpoint.id)
            .collect();
        let delta = answered(
            self.deadline,
            subscriptions::load_since(&self.pool, &self.sealer, snap.version, &expired),
        )
        .await
        .inspect_err(|_| self.metrics.subscription_refresh_errors.inc())?;
        let next = match delta {
            Some(d) if d.version == snap.version && d.tenants.is_empty() && d.endpoints.is_empty() => None,
            Some(d) => {
                self.metrics
                    .subscription_refreshes
                    .with_label_values(&["incremental"])
                    .inc();
                Some(snap.apply(d))
            }
            None => {
                let view = answered(self.deadline, subscriptions::load_all(&self.pool, &self.sealer))
                    .await
                    .inspect_err(|_| self.metrics.subscription_refresh_errors.inc())?;
                self.metrics
                    .subscription_refreshes
                    .with_label_values(&["full"])
                    .inc();
                Some(Snapshot::from_view(view))
            }
        };
        if let Some(next) = next {
            if next.version < snap.version {
                tracing::warn!(
                    from = snap.version,
                    to = next.version,
                    "the subscription version went back (database restored?); using the database's"
                );
            }
            self.metrics.subscription_version.set(next.version);
            *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        }
        *last = Instant::now();
        Ok(())
    }

    /// Refreshes unless the snapshot is at least `version` by the time it is our turn.
    async fn refresh_until(&self, version: i64) -> Result<(), StoreError> {
        let mut last = self.refreshing.lock().await;
        if self.current().version >= version {
            return Ok(());
        }
        self.refresh_locked(&mut last).await
    }

    /// Refreshes unless another refresh finished within `min_age` (coalesces bursts).
    async fn refresh_if_older_than(&self, min_age: Duration) -> Result<(), StoreError> {
        let mut last = self.refreshing.lock().await;
        if last.elapsed() < min_age {
            return Ok(());
        }
        self.refresh_locked(&mut last).await
    }

    /// The endpoints an event of `tenant`, stamped with subscription version `min_version` (0:
    /// unknown), goes to: those whose subscription (event types, channels, payload filter)
    /// matches it. Waits for a refresh when the snapshot is older than the event.
    pub async fn route(
        &self,
        tenant: Uuid,
        event: &Candidate<'_>,
        min_version: i64,
    ) -> Result<Route, StoreError> {
        let mut snap = self.current();
        if snap.version < min_version {
            self.metrics.route_waits.inc();
            self.refresh_until(min_version).await?;
            snap = self.current();
        } else if min_version == 0 && !snap.tenants.contains(&tenant) {
            // An event without a version (from an older relay or another producer): its tenant
            // may have been created a moment ago.
            self.refresh_if_older_than(Duration::from_millis(200)).await?;
            snap = self.current();
        }
        if !snap.tenants.contains(&tenant) {
            return Ok(Route::UnknownTenant);
        }
        let endpoints = snap
            .by_tenant
            .get(&tenant)
            .map(|eps| {
                eps.iter()
                    .filter(|e| e.subscription.matches(event))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Ok(Route::Endpoints(endpoints))
    }

    /// An enabled endpoint by id (the retry path). A snapshot older than `min_version` (the
    /// event's subscription version, 0: unknown) waits for a refresh first, and an endpoint not
    /// known yet gets one refresh. A refresh that fails is an error for the caller to retry: a
    /// database that cannot be read must not pass for a disabled endpoint.
    pub async fn endpoint(
        &self,
        id: Uuid,
        min_version: i64,
    ) -> Result<Option<Arc<ActiveEndpoint>>, StoreError> {
        if self.current().version < min_version {
            self.metrics.route_waits.inc();
            self.refresh_until(min_version).await?;
        }
        if let Some(ep) = self.current().by_id.get(&id) {
            return Ok(Some(ep.clone()));
        }
        self.refresh_if_older_than(Duration::from_millis(200)).await?;
        Ok(self.current().by_id.get(&id).cloned())
    }

    /// Keeps the snapshot fresh until `shutdown`; prunes the change log now and then.
    pub async fn watch(
        self: Arc<Self>,
        every: Duration,
        shutdown: CancellationToken,
    ) -> Result<(), StoreError> {
        let mut wakeup = Wakeup::new(self.pool.clone(), NOTIFY_CHANNEL);
        let mut prune_at = Instant::now() + PRUNE_EVERY;
        loop {
            let until_expiry = self
                .current()
                .next_expiry_ms
                .map(|t| Duration::from_millis(t.saturating_sub(now_ms()).max(0) as u64 + 1));
            let wait = until_expiry.map_or(every, |e| e.min(every));
            tokio::select! {
                _ = wakeup.wait(wait) => {}
                _ = shutdown.cancelled() => return Ok(()),
            }
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "subscription refresh failed, keeping the last snapshot");
                // The database may be down: no tight loop (the wake-up returns at once after
                // it reconnects).
                if !crate::work::pause(&shutdown, Duration::from_secs(1)).await {
                    return Ok(());
                }
            }
            if Instant::now() >= prune_at {
                prune_at = Instant::now() + PRUNE_EVERY;
                match subscriptions::prune_changes(&self.pool, chrono::Utc::now() - KEEP_CHANGES, 1_000).await
                {
                    Ok(n) if n > 0 => tracing::debug!(deleted = n, "subscription change log pruned"),
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "cannot prune the subscription change log"),
                }
            }
        }
    }
}
