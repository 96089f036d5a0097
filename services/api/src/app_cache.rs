//! Applications resolved for message creates, cached: a create is the API's hot path, and
//! without this each one costs a `SELECT` on `hookstream.tenants` besides its share of the
//! writers' batched insert. Only found applications are cached, per (caller's scope, id or
//! uid), for `api.key_cache_ms` (as key lookups are). A change made through this process
//! (update, patch, delete) forgets the tenant at once; one made elsewhere shows within the TTL,
//! and a message for an application deleted meanwhile is still refused by
//! the group enqueue's tenant check (a 404), so the cache can only be late for a renamed uid.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hookstream_store::applications::{self, AppRef};
use hookstream_store::sqlx::PgPool;
use hookstream_store::StoreError;
use uuid::Uuid;

/// Most entries kept (beyond it the cache starts afresh).
const MAX: usize = 50_000;

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    scope: Option<Uuid>,
    id: Option<Uuid>,
    uid: Option<String>,
}

impl Key {
    fn of(app: &AppRef, scope: Option<Uuid>) -> Self {
        match app {
            AppRef::Id(id) => Key {
                scope,
                id: Some(*id),
                uid: None,
            },
            AppRef::Uid(uid) => Key {
                scope,
                id: None,
                uid: Some(uid.clone()),
            },
        }
    }
}

pub struct AppCache {
    ttl: Duration,
    entries: Mutex<HashMap<Key, (Uuid, Instant)>>,
}

impl AppCache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// `applications::resolve`, through the cache.
    pub async fn resolve(
        &self,
        pool: &PgPool,
        app: &AppRef,
        scope: Option<Uuid>,
    ) -> Result<Option<Uuid>, StoreError> {
        if self.ttl.is_zero() {
            return applications::resolve(pool, app, scope).await;
        }
        let key = Key::of(app, scope);
        if let Some((tenant, at)) = self.lock().get(&key).copied() {
            if at.elapsed() < self.ttl {
                return Ok(Some(tenant));
            }
        }
        let found = applications::resolve(pool, app, scope).await?;
        if let Some(tenant) = found {
            let mut entries = self.lock();
            if entries.len() >= MAX {
                entries.clear();
            }
            entries.insert(key, (tenant, Instant::now()));
        }
        Ok(found)
    }

    /// Forgets every entry of `tenant` (it was updated or deleted here).
    pub fn forget(&self, tenant: Uuid) {
        self.lock().retain(|_, (t, _)| *t != tenant);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (Uuid, Instant)>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
