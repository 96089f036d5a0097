//! Since when each endpoint has been failing, as this instance knows it: the in-memory half
//! of `endpoint_health`, held in the shared `Context` (so below it), which keeps the database
//! in step.

use std::collections::HashMap;
use std::sync::Mutex;

use uuid::Uuid;

/// What this instance knows of its endpoints' health.
#[derive(Default)]
pub(crate) struct EndpointHealth {
    /// Since when each endpoint has been failing (ms); absent means "as the subscription
    /// snapshot says", `None` means healthy.
    failing_since: Mutex<HashMap<Uuid, Option<i64>>>,
}

impl EndpointHealth {
    pub(crate) fn known(&self, id: Uuid) -> Option<Option<i64>> {
        self.failing_since.lock().expect("health lock").get(&id).copied()
    }

    pub(crate) fn set(&self, id: Uuid, since: Option<i64>) {
        self.failing_since.lock().expect("health lock").insert(id, since);
    }

    pub(crate) fn forget(&self, id: Uuid) {
        self.failing_since.lock().expect("health lock").remove(&id);
    }
}
