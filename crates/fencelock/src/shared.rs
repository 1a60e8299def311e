//! What every lock of one client shares: its connection, its nodes, its options and its
//! background work. The primitives hold it; the client makes it.

use std::sync::Arc;

use crate::error::Result;
use crate::holds::Holds;
use crate::keeper::Keeper;
use crate::notify::Notifier;
use crate::options::ClientOptions;
use crate::quorum::Quorum;
use crate::transport::conn::Conn;
use crate::transport::server::Server;

/// What every lock of one client shares.
pub(crate) struct Shared {
    /// The connection of a client on one Redis deployment; on a RedLock client, the first
    /// master's.
    pub(crate) conn: Conn,
    /// Every node a lease lives on, and how many must agree: one for a single deployment.
    pub(crate) nodes: Arc<Quorum>,
    pub(crate) options: ClientOptions,
    pub(crate) id: String,
    pub(crate) keeper: Keeper,
    pub(crate) notifier: Arc<Notifier>,
    /// Every hold of every lock made from this client, until a shutdown gives them back.
    pub(crate) holds: Holds,
    /// The server read at connect: on a cluster its oldest master; `None` when it did not say
    /// (or, on a RedLock client, when no master answered at connect).
    pub(crate) server: Option<Server>,
}

impl Shared {
    /// Refuses what only a single Redis deployment offers, on a RedLock client.
    pub(crate) fn require_single(&self, what: &'static str) -> Result<()> {
        if self.nodes.is_distributed() {
            return Err(crate::Error::Unsupported {
                what,
                deployment: "a RedLock client (several independent masters)",
            });
        }
        Ok(())
    }
}
