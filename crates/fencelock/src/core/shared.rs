//! What every lock of one client shares: its nodes, its options and its background work. The
//! kinds hold it; the client makes it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::core::holds::Holds;
use crate::core::keeper::Keeper;
use crate::core::nodes::Nodes;
use crate::core::notify::Notifier;
use crate::core::waits::Wait;
use crate::cycle::WaitCycle;
use crate::error::Result;
use crate::options::ClientOptions;
use crate::transport::server::Server;

/// The deadlock check the façade runs for a waiter: it records the wait, reads every record
/// and answers the cycle the waiter must give up for, if any.
pub(crate) type CheckWait =
    fn(Arc<Shared>, Wait) -> Pin<Box<dyn Future<Output = Result<Option<WaitCycle>>> + Send>>;

/// What every lock of one client shares.
pub(crate) struct Shared {
    /// Every node a lease lives on, and how many must agree: one, but on RedLock.
    pub(crate) nodes: Arc<Nodes>,
    pub(crate) options: ClientOptions,
    pub(crate) id: String,
    pub(crate) keeper: Keeper,
    pub(crate) notifier: Arc<Notifier>,
    /// Every hold of every lock made from this client, until a shutdown gives them back.
    pub(crate) holds: Holds,
    /// The server read at connect: on a cluster its oldest master; `None` when it did not say
    /// (or, on a RedLock client, when no master answered at connect).
    pub(crate) server: Option<Server>,
    /// A waiter's deadlock check: the façade's, which reads every kind's storage.
    pub(crate) check_wait: CheckWait,
}
