//! Every live hold of one client, each with the release that gives it back: what lets a
//! shutdown release the holds of every primitive, renewed or fixed, at once.
//!
//! A grant registers its hold here and whoever ends it (an unlock that Redis answered, a
//! dropped guard, the shutdown) takes the registration back, so that the drop or the shutdown
//! never releases a hold twice. Registering and taking cost a lock of a local map, no round
//! trip to Redis.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex, MutexGuard as StdMutexGuard};

use tokio_util::sync::CancellationToken;

use crate::core::lease::LeaseState;
use crate::cycle::{LockKind, Task};

/// A best-effort release to run in the background; `true` once Redis answered it.
pub(crate) type Release = Pin<Box<dyn Future<Output = bool> + Send>>;

/// One live hold: its lease, and the release that gives it back.
pub(crate) struct Registered {
    pub(crate) lease: Arc<LeaseState>,
    pub(crate) release: Release,
    /// What the wait-for graph knows of it: the task that acquired it, and what it took.
    pub(crate) taken: HeldNames,
}

/// The locks one hold took, and the task that took them.
#[derive(Clone, Debug)]
pub(crate) struct HeldNames {
    pub(crate) task: Task,
    pub(crate) kind: LockKind,
    pub(crate) names: Vec<String>,
}

/// The live holds of a client, until it is shut down.
#[derive(Default)]
pub(crate) struct LiveHolds {
    live: StdMutex<HashMap<u64, Registered>>,
    /// Cancelled when the client shuts down; no hold is registered after that.
    shut_down: CancellationToken,
}

impl LiveHolds {
    /// Registers a hold under its lease's id. When the client was shut down the release is
    /// handed back, for the caller to run: nobody would release that hold otherwise.
    pub(crate) fn register(
        &self,
        lease: Arc<LeaseState>,
        release: Release,
        taken: HeldNames,
    ) -> Result<(), Release> {
        let mut live = self.live();
        if self.shut_down.is_cancelled() {
            return Err(release);
        }
        live.insert(
            lease.id(),
            Registered {
                lease,
                release,
                taken,
            },
        );
        Ok(())
    }

    /// What `task` holds now, each lock once per hold.
    pub(crate) fn taken_by(&self, task: Task) -> Vec<(LockKind, String)> {
        let live = self.live();
        live.values()
            .filter(|held| held.taken.task == task)
            .flat_map(|held| {
                let kind = held.taken.kind;
                held.taken
                    .names
                    .iter()
                    .map(move |name| (kind, name.clone()))
            })
            .collect()
    }

    /// Takes a hold's registration, for the one about to release it; `None` when the shutdown
    /// took it (and released the hold).
    pub(crate) fn take(&self, lease_id: u64) -> Option<Release> {
        self.live().remove(&lease_id).map(|held| held.release)
    }

    /// Whether the hold is still registered: not ended, and not taken by a shutdown.
    pub(crate) fn is_live(&self, lease_id: u64) -> bool {
        self.live().contains_key(&lease_id)
    }

    /// Refuses every later registration and takes every hold registered: the start of a
    /// shutdown.
    pub(crate) fn shut_down(&self) -> Vec<Registered> {
        let mut live = self.live();
        self.shut_down.cancel();
        live.drain().map(|(_, held)| held).collect()
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.is_cancelled()
    }

    /// Completes when the client is shut down.
    pub(crate) async fn shutting_down(&self) {
        self.shut_down.cancelled().await;
    }

    fn live(&self) -> StdMutexGuard<'_, HashMap<u64, Registered>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }
}
