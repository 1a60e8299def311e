//! What every lock of one client shares: its nodes, its options and its background work. The
//! kinds hold it; the client makes it.

use std::sync::Arc;

use crate::core::keeper::Keeper;
use crate::core::live_holds::LiveHolds;
use crate::core::nodes::Nodes;
use crate::core::notify::Notifier;
use crate::core::waits::{ClientWaits, Holders};
use crate::options::ClientOptions;
use crate::transport::server::Server;

/// What every lock of one client shares.
pub(crate) struct Shared {
    /// Every node a lease lives on, and how many must agree: one, but on RedLock.
    pub(crate) nodes: Arc<Nodes>,
    pub(crate) options: ClientOptions,
    pub(crate) id: String,
    pub(crate) keeper: Keeper,
    pub(crate) notifier: Arc<Notifier>,
    /// Every hold of every lock made from this client, until a shutdown gives them back.
    pub(crate) holds: LiveHolds,
    /// The server read at connect: on a cluster its oldest master; `None` when it did not say
    /// (or, on a RedLock client, when no master answered at connect).
    pub(crate) server: Option<Server>,
    /// The reading of every kind's holds, which the façade installs: the one call the core
    /// makes up (`core/waits/holders.rs`).
    pub(crate) holders: &'static dyn Holders,
}

/// What a kind reads of its client when it makes a lock: these, and nothing else of `Shared`
/// (`xtask layers` refuses a kind that reaches into its fields).
impl Shared {
    /// The client's id, which its holders' tokens and its waiters' channels carry.
    pub(crate) fn client_id(&self) -> &str {
        &self.id
    }

    /// The prefix of every key and channel the client makes.
    pub(crate) fn prefix(&self) -> &str {
        &self.options.prefix
    }

    /// How long a waiter's place in line lasts past its last word, in ms.
    pub(crate) fn place_ms(&self) -> u64 {
        self.options.place_ms()
    }

    /// Whether waiters keep places in line on these nodes (see [`Nodes::keep_waiters_in_line`]).
    pub(crate) fn keeps_waiters_in_line(&self) -> bool {
        self.nodes.keep_waiters_in_line()
    }

    /// Whether keys `a` and `b` may go into one script: on one shard, or on a deployment
    /// that does not shard.
    pub(crate) fn same_shard(&self, a: &[u8], b: &[u8]) -> bool {
        let conn = self.nodes.first();
        conn.shard_of(a) == conn.shard_of(b)
    }
}

impl Shared {
    /// The client, as the waits feature uses it.
    pub(crate) fn waits(&self) -> ClientWaits<'_> {
        ClientWaits {
            nodes: &self.nodes,
            options: &self.options,
            id: &self.id,
            holds: &self.holds,
            holders: self.holders,
        }
    }
}
